"""logs.py: JSON lines and text lines with structured fields, and the bounded decision/failure
fields."""

from __future__ import annotations

import io
import json
import logging
import re
import warnings
from types import SimpleNamespace

import pytest

from policy_scheduler import logs
from policy_scheduler.logs import (JsonFormatter, TextFormatter, bounded_reasons, decision_fields, failure_fields,
                                   fields, truncate)

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def record(msg="pod %s unschedulable", args=("ns/a",), level=logging.INFO, name="policy_scheduler", extra=None,
           exc_info=None) -> logging.LogRecord:
    r = logging.getLogger(name).makeRecord(name, level, __file__, 1, msg, args, exc_info, extra=extra)
    r.created = 1795811600.25  # 2026-11-27T20:33:20.250Z
    r.msecs = 250.0
    return r


def test_json_line_has_ts_level_logger_msg_and_the_fields():
    line = JsonFormatter().format(record(extra=fields(pod="ns/a", policy="default", plugins=["NodeResourcesFit"],
                                                      reasons={"Insufficient cpu": 3})))
    assert "\n" not in line
    d = json.loads(line)
    assert d == {"ts": "2026-11-27T20:33:20.250Z", "level": "info", "logger": "policy_scheduler",
                 "msg": "pod ns/a unschedulable", "pod": "ns/a", "policy": "default",
                 "plugins": ["NodeResourcesFit"], "reasons": {"Insufficient cpu": 3}}
    assert TS.match(d["ts"])


def test_json_timestamp_is_utc_with_milliseconds():
    r = logging.makeLogRecord({"msg": "x"})
    d = json.loads(JsonFormatter().format(r))
    assert TS.match(d["ts"]), d["ts"]


def test_json_exception_is_in_exc_and_the_line_stays_one_line():
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        import sys
        r = record("binding cycle of %s failed", ("ns/a",), logging.ERROR, exc_info=sys.exc_info())
    line = JsonFormatter().format(r)
    assert line.count("\n") == 0
    d = json.loads(line)
    assert d["level"] == "error" and d["msg"] == "binding cycle of ns/a failed"
    assert d["exc"].startswith("Traceback (most recent call last):") and "ValueError: bad\nthing" in d["exc"]


def test_json_fields_do_not_replace_the_reserved_keys_and_odd_values_still_serialize():
    import numpy as np

    d = json.loads(JsonFormatter().format(record(extra=fields(msg="mine", level=3, n=np.int64(7), t=(1, 2),
                                                              obj=object(), keys={1: "a"}))))
    assert d["msg"] == "pod ns/a unschedulable" and d["level"] == "info"
    assert d["msg_"] == "mine" and d["level_"] == 3
    assert d["n"] == 7 and d["t"] == [1, 2] and d["obj"].startswith("<object object") and d["keys"] == {"1": "a"}


def test_json_kopf_object_reference_is_kept():
    r = record("Handler succeeded.", (), name="kopf.objects",
               extra={"k8s_ref": {"namespace": None, "name": "binpack", "kind": "SchedulingPolicy"}})
    assert json.loads(JsonFormatter().format(r))["object"] == "binpack"


def test_text_is_the_old_format_with_fields_appended_as_key_value():
    r = record(extra=fields(pod="ns/a", policy="default", feasible=0, node=None,
                            plugins=["NodeResourcesFit", "TaintToleration"], reasons={"Insufficient cpu": 3},
                            note="two words"))
    line = TextFormatter().format(r)
    head = logging.Formatter(logs.TEXT_FORMAT).format(record())
    assert line.startswith(head + " ")
    assert line.endswith(' pod=ns/a policy=default feasible=0 node=null '
                         'plugins=["NodeResourcesFit","TaintToleration"] reasons={"Insufficient cpu":3} '
                         'note="two words"')


def test_text_without_fields_is_unchanged_and_a_traceback_follows():
    assert TextFormatter().format(record()) == logging.Formatter(logs.TEXT_FORMAT).format(record())
    try:
        raise KeyError("k")
    except KeyError:
        import sys
        r = record(exc_info=sys.exc_info(), extra=fields(pod="ns/a"))
    first, *rest = TextFormatter().format(r).split("\n")
    assert first.endswith("pod ns/a unschedulable pod=ns/a")
    assert rest[0].startswith("Traceback") and rest[-1] == "KeyError: 'k'"


def test_text_does_not_repeat_a_long_message_field_the_line_already_shows():
    msg = "0/3 nodes are available: 3 Insufficient cpu. preemption: not eligible."
    line = TextFormatter().format(record("pod %s unschedulable under policy %s: %s", ("ns/a", "default", msg),
                                         extra=fields(pod="ns/a", message=msg)))
    assert line.count(msg) == 1 and line.endswith(" pod=ns/a")


def test_truncate_and_bounded_reasons():
    assert truncate("abc", 10) == "abc"
    assert truncate("x" * 2000, 1024) == "x" * 1020 + " ..." and len(truncate("x" * 2000, 1024)) == 1024
    hist = {f"reason {i:02d} " + "y" * 300: i + 1 for i in range(15)}
    b = bounded_reasons(hist)
    assert len(b) == 10 and all(len(r) <= 200 for r in b)
    assert list(b.values()) == [15, 14, 13, 12, 11, 10, 9, 8, 7, 6]  # the most frequent first


def test_failure_fields_are_bounded():
    hist = {f"node(s) had reason {i} " + "z" * 500: 1 for i in range(25)}
    f = failure_fields("ns/a", "default", {"TaintToleration", "NodeAffinity"}, hist, "m" * 5000)[logs.FIELDS]
    assert f["pod"] == "ns/a" and f["policy"] == "default"
    assert f["plugins"] == ["NodeAffinity", "TaintToleration"]
    assert len(f["reasons"]) == 10 and max(len(r) for r in f["reasons"]) == 200 and f["reasons_omitted"] == 15
    assert len(f["message"]) == 1024
    small = failure_fields("ns/a", "p", set(), {"Insufficient cpu": 2}, "short")[logs.FIELDS]
    assert small["reasons"] == {"Insufficient cpu": 2} and "reasons_omitted" not in small


def test_decision_fields_have_the_top_three_nodes_with_weighted_scores():
    score = lambda n, t: SimpleNamespace(node=n, total=t, plugins={"NodeResourcesFit": (81, 81),  # noqa: E731
                                                                   "TaintToleration": (100, 300)})
    d = SimpleNamespace(node="n1", feasible=4, evaluated=6, num_all_nodes=6, duration=0.0012345,
                        top=[score("n1", 452), score("n2", 439), score("n3", 427), score("n4", 1)])
    f = decision_fields("ns/a", "default", d)[logs.FIELDS]
    assert f == {"pod": "ns/a", "policy": "default", "node": "n1", "feasible": 4, "evaluated": 6, "nodes": 6,
                 "duration_ms": pytest.approx(1.2345, abs=1e-3),
                 "top": [{"node": n, "total": t, "scores": {"NodeResourcesFit": 81, "TaintToleration": 300}}
                         for n, t in (("n1", 452), ("n2", 439), ("n3", 427))]}


def test_setup_sends_every_logger_and_warnings_through_one_json_handler(restore_logging):
    out = io.StringIO()
    logs.setup("info", "json", stream=out)
    logs.setup("info", "json", stream=out)  # a second setup replaces the handler, no duplicate lines
    logging.getLogger("policy_scheduler.informer").info("pods informer synced: %d objects", 3)
    logging.getLogger("kopf.objects").info("Handler succeeded.")  # kopf below warning: dropped
    logging.getLogger("kopf.reactor").warning("Something odd.")
    logging.getLogger("policy_scheduler").debug("not at info")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("deprecated thing", DeprecationWarning)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [(x["logger"], x["level"]) for x in lines] == [
        ("policy_scheduler.informer", "info"), ("kopf.reactor", "warning"), ("py.warnings", "warning")]
    assert "deprecated thing" in lines[2]["msg"]


def test_setup_debug_lets_kopf_through_and_text_is_the_default(restore_logging):
    out = io.StringIO()
    logs.setup("debug", stream=out)
    logging.getLogger("kopf.objects").info("Handler succeeded.")
    assert re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO    kopf.objects: Handler succeeded.$",
                    out.getvalue().strip())


def test_uncaught_exceptions_are_logged(restore_logging):
    import sys
    import threading

    out = io.StringIO()
    logs.setup("info", "json", stream=out)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        sys.excepthook(*sys.exc_info())
    t = threading.Thread(target=lambda: 1 / 0, name="worker")
    t.start()
    t.join()
    a, b = (json.loads(x) for x in out.getvalue().splitlines())
    assert a["level"] == "critical" and a["msg"] == "uncaught exception: RuntimeError: boom" and "boom" in a["exc"]
    assert b["msg"].startswith("uncaught exception in thread worker: ZeroDivisionError") and b["exc"]


def test_run_help_says_what_the_log_flags_do(capsys):
    from policy_scheduler.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--log-format {text,json}" in out and "one JSON object per line" in out and "key=value" in out
    assert build_parser().parse_args(["run"]).log_format == "text"
    assert build_parser().parse_args(["run", "--log-format", "json"]).log_format == "json"
