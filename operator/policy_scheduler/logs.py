"""The operator's log output: text or JSON lines, with structured fields.

A caller attaches fields with logging's ``extra=`` mechanism::

    log.info("pod %s unschedulable", key, extra=fields(pod=key, policy=name))

``--log-format json`` writes one JSON object per line: ``ts`` (RFC 3339, milliseconds, UTC),
``level``, ``logger``, ``msg``, the fields, and ``exc`` for an exception. ``--log-format text``
writes ``<time> <LEVEL> <logger>: <message>`` with the fields appended as ``key=value``. Every
logger goes through the root handler installed by :func:`setup`, kopf's included.

Only the standard library and orjson: no framework objects are imported here (decisions are
read by attribute).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, Iterable, Mapping

import orjson

FIELDS = "fields"  # the LogRecord attribute that carries the structured fields
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"

MAX_REASONS = 10  # failure histogram entries in a failure line
MAX_REASON_LEN = 200
MAX_MESSAGE_LEN = 1024
TOP_NODES = 3

# keys of a JSON line that fields cannot replace (a clashing field is written as "<key>_")
_RESERVED = frozenset({"ts", "level", "logger", "msg", "exc", "stack", "object"})
_ORJSON_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def fields(**kw: Any) -> dict[str, dict[str, Any]]:
    """``extra=`` for a log call: ``log.info("...", extra=fields(pod=key, node=node))``."""
    return {FIELDS: kw}


def truncate(s: str, limit: int) -> str:
    """At most ``limit`` characters, ending in `` ...`` when cut (as events are)."""
    s = str(s)
    return s if len(s) <= limit else s[:max(limit - 4, 0)] + " ..."


def bounded_reasons(failures: Mapping[str, int], limit: int = MAX_REASONS,
                    reason_len: int = MAX_REASON_LEN) -> dict[str, int]:
    """A failure histogram {reason: node count} cut to the ``limit`` most frequent reasons, each
    at most ``reason_len`` characters (reasons cut to the same text add up)."""
    items = sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    out: dict[str, int] = {}
    for reason, n in items:
        r = truncate(reason, reason_len)
        out[r] = out.get(r, 0) + int(n)
    return out


def top_scores(top: Iterable[Any], n: int = TOP_NODES) -> list[dict[str, Any]]:
    """The first ``n`` NodeScores as [{"node", "total", "scores": {plugin: weighted}}] (the
    decision annotation's shape)."""
    out = []
    for i, s in enumerate(top):
        if i >= n:
            break
        out.append({"node": s.node, "total": int(s.total),
                    "scores": {p: int(w) for p, (_norm, w) in s.plugins.items()}})
    return out


def decision_fields(pod: str, policy: str, decision: Any) -> dict[str, dict[str, Any]]:
    """``extra=`` for the DEBUG line of one scheduling decision. Build it only when DEBUG is on."""
    return fields(pod=pod, policy=policy, node=decision.node, feasible=decision.feasible,
                  evaluated=decision.evaluated, nodes=decision.num_all_nodes,
                  duration_ms=round(decision.duration * 1000, 3), top=top_scores(decision.top))


def failure_fields(pod: str, policy: str, plugins: Iterable[str], failures: Mapping[str, int],
                   message: str) -> dict[str, dict[str, Any]]:
    """``extra=`` for the line of an unschedulable pod: the rejecting plugins (sorted), the
    bounded failure histogram (``reasons_omitted`` when reasons were left out), the message cut
    to 1024 characters."""
    f: dict[str, Any] = {"pod": pod, "policy": policy, "plugins": sorted(plugins),
                         "reasons": bounded_reasons(failures)}
    if len(failures) > MAX_REASONS:
        f["reasons_omitted"] = len(failures) - MAX_REASONS
    f["message"] = truncate(message, MAX_MESSAGE_LEN)
    return {FIELDS: f}


# ---------------------------------------------------------------------------------- formatters
def _rfc3339(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + ".%03dZ" % record.msecs


def _kopf_object(record: logging.LogRecord) -> str | None:
    """kopf's per-object loggers attach the object reference as ``k8s_ref``."""
    ref = getattr(record, "k8s_ref", None)
    if not isinstance(ref, dict) or not ref.get("name"):
        return None
    ns = ref.get("namespace")
    return f"{ns}/{ref['name']}" if ns else str(ref["name"])


def _record_fields(record: logging.LogRecord) -> Mapping[str, Any]:
    f = getattr(record, FIELDS, None)
    return f if isinstance(f, Mapping) else {}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the record's fields, exc, stack."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": _rfc3339(record), "level": record.levelname.lower(),
                               "logger": record.name, "msg": record.getMessage()}
        obj = _kopf_object(record)
        if obj is not None:
            out["object"] = obj
        for k, v in _record_fields(record).items():
            k = str(k)
            out[k + "_" if k in _RESERVED else k] = v
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        try:
            return orjson.dumps(out, default=str, option=_ORJSON_OPTS).decode()
        except (TypeError, orjson.JSONEncodeError):  # e.g. an integer beyond 64 bits: say it, do not lose the line
            return orjson.dumps({k: v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)
                                 for k, v in out.items()}, default=str).decode()


def _text_value(v: Any) -> str:
    if isinstance(v, str):
        if v and not any(c in v for c in ' ="\n\t') and v.isprintable():
            return v
        return orjson.dumps(v).decode()
    if v is None or isinstance(v, (bool, int, float)):
        return orjson.dumps(v).decode()
    try:
        return orjson.dumps(v, default=str, option=_ORJSON_OPTS).decode()
    except (TypeError, orjson.JSONEncodeError):
        return repr(v)


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger>: <message>`` and then `` key=value`` per field (strings with
    spaces, quotes or ``=`` quoted as JSON strings; lists and maps as compact JSON). A string
    field longer than 40 characters that the message already contains is not repeated. A
    traceback follows on the next lines, as logging always wrote it."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        parts = []
        obj = _kopf_object(record)
        if obj is not None:
            parts.append(f"object={_text_value(obj)}")
        msg = record.message
        # a long string field the message already shows (a failure's message) is not repeated
        parts.extend(f"{k}={_text_value(v)}" for k, v in _record_fields(record).items()
                     if not (isinstance(v, str) and len(v) > 40 and v in msg))
        return line + " " + " ".join(parts) if parts else line


def make_formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return TextFormatter()
    raise ValueError(f"unknown log format {log_format!r} (one of {', '.join(LOG_FORMATS)})")


class _Handler(logging.StreamHandler):
    """The root handler :func:`setup` installs (so that a second setup replaces it)."""


def setup(level: str = "info", log_format: str = "text", stream=None) -> logging.Handler:
    """One handler on the root logger, in ``log_format``, at ``level``: every logger propagates to
    it (policy_scheduler's, kopf's, aiohttp's, asyncio's). Python warnings go through logging
    too (``py.warnings``), and so does an exception nothing caught, so that with JSON every line
    of the output is JSON."""
    handler = _Handler(stream if stream is not None else sys.stderr)
    handler.setFormatter(make_formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if not isinstance(h, _Handler)] + [handler]
    root.setLevel(getattr(logging, level.upper()))
    # kopf logs every handler run at INFO: one line per watch event is noise, and costs CPU
    logging.getLogger("kopf").setLevel(logging.NOTSET if level == "debug" else logging.WARNING)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
    return handler


def _log_uncaught(exc_type, exc, tb) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    logging.getLogger("policy_scheduler").critical("uncaught exception: %s: %s", exc_type.__name__, exc,
                                                   exc_info=(exc_type, exc, tb))


def _log_uncaught_in_thread(args) -> None:
    if args.exc_type is SystemExit:
        return
    logging.getLogger("policy_scheduler").critical(
        "uncaught exception in thread %s: %s: %s", args.thread.name if args.thread else "?",
        args.exc_type.__name__, args.exc_value, exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
