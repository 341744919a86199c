"""framework/cycle/runtime.py: calling a plugin, timing the call and wording its failure as
upstream's runtime/framework.go does (the table "One error channel" in docs/development.md)."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest

from policy_scheduler.framework.instrumentation import FILTER, NOOP, RESERVE, ListRecorder
from policy_scheduler.framework.interface import FilterResult, PodGone
from policy_scheduler.framework.cycle.runtime import (Abort, call, call_async, call_informational, cycle_failed,
                                                      filter_code, invalid_score, plugin_error, settle, status_code)
from policy_scheduler.framework.status import Code, Status


@pytest.mark.parametrize("point, cause, want", [
    ("filter", ValueError("boom"), 'running "X" filter plugin: ValueError: boom'),
    ("filter", Status(Code.ERROR, ("no state",)), 'running "X" filter plugin: no state'),
    ("PreFilter", Status(Code.WAIT), 'running PreFilter plugin "X": Wait'),
    ("Reserve", KeyError("k"), "running Reserve plugin \"X\": KeyError: 'k'"),
    ("PreBind", Status(Code.UNSCHEDULABLE, ("a", "b")), 'running PreBind plugin "X": a, b'),
])
def test_plugin_error_wording(point, cause, want):
    st = plugin_error(point, "X", cause)
    assert (st.code, st.message(), st.plugin) == (Code.ERROR, want, "X")


def test_other_wordings():
    assert invalid_score("X", 101).message() == \
        'plugin "X" returns an invalid score 101, it should in the range of [0, 100] after normalizing'
    assert cycle_failed("scheduling", RuntimeError("bug")).message() == "scheduling cycle failed: RuntimeError: bug"


def test_settle_keeps_a_rejection_and_words_anything_else():
    rej = settle("Reserve", "X", Status(Code.UNSCHEDULABLE, ("full",)))
    assert (rej.code, rej.reasons, rej.plugin) == (Code.UNSCHEDULABLE, ("full",), "X")
    err = settle("Permit", "X", Status(Code.SKIP))
    assert (err.code, err.message()) == (Code.ERROR, 'running Permit plugin "X": Skip')


def test_call_returns_the_result_and_times_it_only_when_sampled():
    rec = ListRecorder(sampled=True)
    assert call(rec, "X", RESERVE, RESERVE, status_code, lambda a: Status(Code.UNSCHEDULABLE), 1).code == \
        Code.UNSCHEDULABLE
    assert [(p, pt, c) for p, pt, c, _ in rec.plugins] == [("X", RESERVE, Code.UNSCHEDULABLE)]
    quiet = ListRecorder(sampled=False)
    call(quiet, "X", RESERVE, RESERVE, status_code, Status.success)
    assert quiet.plugins == []


def test_a_raising_plugin_aborts_with_its_error_logged_only_with_a_key(caplog):
    def broken(*_):
        raise ValueError("boom")

    rec = ListRecorder(sampled=True)
    with caplog.at_level(logging.ERROR, "policy_scheduler.framework.cycle.runtime"):
        with pytest.raises(Abort) as a:
            call(rec, "X", FILTER, "filter", filter_code, broken)
        assert not caplog.records
        with pytest.raises(Abort) as b:
            call(NOOP, "X", RESERVE, RESERVE, status_code, broken, log_key="ns/p")
    assert a.value.status.message() == 'running "X" filter plugin: ValueError: boom'
    assert b.value.status.message() == 'running Reserve plugin "X": ValueError: boom'
    assert [(p, pt, c) for p, pt, c, _ in rec.plugins] == [("X", FILTER, Code.ERROR)]
    (r,) = caplog.records
    assert r.getMessage() == "Reserve plugin X failed on pod ns/p" and r.exc_info


def test_filter_code():
    assert filter_code(FilterResult(np.array([True, True]))) == Code.SUCCESS
    assert filter_code(FilterResult(np.array([True, False]), np.array([2, 3]))) == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert filter_code(FilterResult(np.array([False]), error=Status.error("x"))) == Code.ERROR


def test_call_async_lets_pod_gone_through_and_aborts_on_other_exceptions():
    async def gone(*_):
        raise PodGone()

    async def broken(*_):
        raise OSError("down")

    async def ok(*_):
        return Status.skip()

    rec = ListRecorder(sampled=True)
    with pytest.raises(PodGone):
        asyncio.run(call_async(rec, "X", "Bind", gone))
    with pytest.raises(Abort) as a:
        asyncio.run(call_async(rec, "X", "Bind", broken))
    assert a.value.status.message() == 'running Bind plugin "X": OSError: down'
    assert asyncio.run(call_async(rec, "X", "Bind", ok)).is_skip
    assert [(p, c) for p, _, c, _ in rec.plugins] == [("X", Code.ERROR), ("X", Code.SKIP)]


def test_an_informational_call_never_raises_and_counts_as_success(caplog):
    def broken(*_):
        raise ValueError("boom")

    rec = ListRecorder(sampled=True)
    with caplog.at_level(logging.ERROR, "policy_scheduler.framework.cycle.runtime"):
        call_informational(rec, "X", "PostBind", broken, log_key="ns/p")
    assert [(p, pt, c) for p, pt, c, _ in rec.plugins] == [("X", "PostBind", Code.SUCCESS)]
    assert [r.getMessage() for r in caplog.records] == ["PostBind plugin X failed on pod ns/p"]
