"""Calling plugins: one place that calls a plugin method at an extension point, times the call
and turns what it raised or returned into a Status in upstream's words, stamped with the
plugin's name. Upstream's frameworkImpl (pkg/scheduler/framework/runtime/framework.go): its
run<Point>Plugin calls with recordPluginMetrics, and the errors of its Run<Point>Plugins
(``running %q filter plugin: %w``, ``running <Point> plugin %q: %w``).

Used by the scheduling cycle (schedule.py: PreFilter, Filter, PostFilter, PreScore, Score and
NormalizeScore), the binding side (binding_cycle.py: Reserve, Unreserve, Permit, PreBind, Bind,
PostBind) and the queue (queue/scheduling_queue.py: PreEnqueue). The loops over a point's plugins
stay with their callers, since what a status means differs per point; the wording lives here only,
and is the table "One error channel" of docs/development.md.

A plugin that raises ends the run with ``Abort`` (an Error naming the plugin); the caller either
lets it end the cycle (schedule.py) or returns its status (binding_cycle.py, scheduling_queue.py,
which also log the traceback by passing ``log_key``). Costs per plugin call, never per node (Filter
and Score get a batch of node rows at once); the clock is read only in sampled cycles
(``CycleRecorder.sampled``).
"""

from __future__ import annotations

import logging
from time import perf_counter
from typing import Any, Callable

import numpy as np

from ..instrumentation import SCORE, SCORE_NORMALIZE, CycleRecorder
from ..interface import MAX_NODE_SCORE, MIN_NODE_SCORE, FilterResult, PodGone, ScorePlugin
from ..status import Code, Status

log = logging.getLogger(__name__)

# ------------------------------------------------------------------------------ wording


def plugin_error(point: str, plugin: str, cause: Status | BaseException) -> Status:
    """upstream's wording for a plugin's internal error at ``point`` ("filter" for Filter, else
    the point's name: "PreFilter", "Reserve", ...), stamped with its name. ``cause``: the
    status it returned (its message, or its code when it has none) or the exception it raised
    (``<type>: <message>``)."""
    if isinstance(cause, Status):
        detail = cause.message() or str(cause.code)
    else:
        detail = f"{type(cause).__name__}: {cause}"
    if point == "filter":
        return Status.error(f'running "{plugin}" filter plugin: {detail}', plugin)
    return Status.error(f'running {point} plugin "{plugin}": {detail}', plugin)


def invalid_score(plugin: str, score: int) -> Status:
    """upstream's error for a normalized score outside [0, 100] (RunScorePlugins)."""
    return Status.error(f"plugin \"{plugin}\" returns an invalid score {score}, it should in the range of "
                        f"[{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing", plugin)


def cycle_failed(cycle: str, exc: BaseException) -> Status:
    """A bug of the framework itself (not of a plugin) in the ``cycle`` ("scheduling",
    "binding"): the error status that ends it."""
    return Status.error(f"{cycle} cycle failed: {type(exc).__name__}: {exc}")


def settle(point: str, plugin: str, st: Status) -> Status:
    """A plugin's non-success status at a point where a rejection keeps its code (Reserve,
    Permit): the rejection stamped with the plugin's name, anything else an Error."""
    return st.with_plugin(plugin) if st.is_rejected else plugin_error(point, plugin, st)


# ------------------------------------------------------------------------------ calls


class Abort(Exception):
    """Ends a run with ``status``: a plugin's error in upstream's words or, in the scheduling
    cycle, a rejection of every node (``rejectors``: the plugins to record for it)."""

    def __init__(self, status: Status, rejectors: set[str] | None = None) -> None:
        self.status = status
        self.rejectors = rejectors


def status_code(st: Status) -> Code:
    """The code of a Status result (for ``code_of``)."""
    return st.code


def first_code(out: tuple) -> Code:
    """The code of a (Status, ...) result: PreFilter, PostFilter, Permit."""
    return out[0].code


def filter_code(res: FilterResult) -> Code:
    """One Filter call's code for its timing: Error, Success when every row passed, else the
    code of the first rejected row."""
    if res.error is not None:
        return Code.ERROR
    passed = np.asarray(res.passed, dtype=bool)
    if passed.all():
        return Code.SUCCESS
    if isinstance(res.code, np.ndarray):
        return Code(int(np.asarray(res.code)[~passed][0]))
    return Code(int(res.code))


def _failed(rec: CycleRecorder, plugin: str, point: str, label: str, e: Exception, t: float | None,
            log_key: str | None) -> Abort:
    if t is not None:
        rec.plugin(plugin, point, Code.ERROR, perf_counter() - t)
    if log_key is not None:
        log.error("%s plugin %s failed on pod %s", point, plugin, log_key, exc_info=e)
    return Abort(plugin_error(label, plugin, e))


def call(rec: CycleRecorder, plugin: str, point: str, label: str, code_of: Callable[[Any], Code],
         fn: Callable, *args: Any, log_key: str | None = None) -> Any:
    """One plugin call, ``fn(*args)``, at ``point`` (an instrumentation label; ``label`` is the
    point's name in the error text). Returns what it returned; raises ``Abort`` with the
    plugin's error when it raised (logged with its traceback when ``log_key``, the pod's key,
    is given). In a sampled cycle its duration and ``code_of(result)`` (Error when it raised)
    go to ``rec``."""
    if not rec.sampled:
        try:
            return fn(*args)
        except Exception as e:
            raise _failed(rec, plugin, point, label, e, None, log_key) from None
    t = perf_counter()
    try:
        out = fn(*args)
    except Exception as e:
        raise _failed(rec, plugin, point, label, e, t, log_key) from None
    rec.plugin(plugin, point, code_of(out), perf_counter() - t)
    return out


async def call_async(rec: CycleRecorder, plugin: str, point: str, fn: Callable, *args: Any,
                     log_key: str | None = None) -> Status:
    """``call`` for a bind-side coroutine method returning a Status (PreBind, Bind): awaited;
    ``PodGone`` goes through untouched, any other exception raises ``Abort``."""
    sampled = rec.sampled
    t = perf_counter() if sampled else None
    try:
        st = await fn(*args)
    except PodGone:
        raise
    except Exception as e:
        raise _failed(rec, plugin, point, point, e, t, log_key) from None
    if t is not None:
        rec.plugin(plugin, point, st.code, perf_counter() - t)
    return st


def call_informational(rec: CycleRecorder, plugin: str, point: str, fn: Callable, *args: Any,
                       log_key: str) -> None:
    """A call whose failure changes nothing (Unreserve, PostBind): an exception is logged with
    its traceback, never raised; as upstream, the call is reported as Success."""
    t = perf_counter() if rec.sampled else None
    try:
        fn(*args)
    except Exception as e:
        log.error("%s plugin %s failed on pod %s", point, plugin, log_key, exc_info=e)
    if t is not None:
        rec.plugin(plugin, point, Code.SUCCESS, perf_counter() - t)


_BASE_NORMALIZE = ScorePlugin.normalize_score


def score(rec: CycleRecorder, p: ScorePlugin, state: Any, pod: Any, nodes: Any, rows: np.ndarray) -> np.ndarray:
    """One Score plugin's Score then NormalizeScore over ``rows``: its normalized int64 scores
    (not yet range-checked). An exception in either raises ``Abort`` (upstream's wording names
    the Score point for both). In a sampled cycle each call is timed, NormalizeScore only when
    the plugin normalizes (labels Score and ScoreExtensionNormalize)."""
    if not rec.sampled:
        try:
            raw = np.asarray(p.score(state, pod, nodes, rows), dtype=np.int64)
            return np.asarray(p.normalize_score(state, pod, nodes, rows, raw), dtype=np.int64)
        except Exception as e:
            raise Abort(plugin_error("Score", p.NAME, e)) from None
    point = SCORE
    t = perf_counter()
    try:
        raw = np.asarray(p.score(state, pod, nodes, rows), dtype=np.int64)
        t1 = perf_counter()
        rec.plugin(p.NAME, SCORE, Code.SUCCESS, t1 - t)
        if type(p).normalize_score is _BASE_NORMALIZE:
            return np.asarray(p.normalize_score(state, pod, nodes, rows, raw), dtype=np.int64)
        point, t = SCORE_NORMALIZE, t1
        norm = np.asarray(p.normalize_score(state, pod, nodes, rows, raw), dtype=np.int64)
        rec.plugin(p.NAME, SCORE_NORMALIZE, Code.SUCCESS, perf_counter() - t)
        return norm
    except Exception as e:
        rec.plugin(p.NAME, point, Code.ERROR, perf_counter() - t)
        raise Abort(plugin_error("Score", p.NAME, e)) from None


def timed(rec: CycleRecorder, point: str, fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` as one extension point of a cycle: its duration and how it ended (Success,
    or the status code of the ``Abort`` it raised; Error for any other exception) go to
    ``rec``."""
    t = perf_counter()
    code = Code.ERROR
    try:
        out = fn(*args)
        code = Code.SUCCESS
        return out
    except Abort as a:
        code = a.status.code
        raise
    finally:
        rec.point(point, code, perf_counter() - t)
