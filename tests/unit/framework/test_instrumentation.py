"""framework/instrumentation.py: what schedule_one and the binding cycle report to the cycle's
recorder: every extension point every cycle (duration and status code), each plugin call only
in sampled cycles, with upstream's extension point labels."""

from __future__ import annotations

import asyncio

import numpy as np

from policy_scheduler.framework.cycle.binding_cycle import run_binding, run_permit, run_reserve, run_unreserve
from policy_scheduler.policy.chain import build_chain, default_chain_spec
from policy_scheduler.framework.instrumentation import NOOP, CycleRecorder, ListRecorder
from policy_scheduler.framework.interface import CycleState, FilterPlugin, FilterResult, Handle
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.registry import Registry
from policy_scheduler.framework.cycle.schedule import schedule_one
from policy_scheduler.framework.status import Code, Status
from policy_scheduler.framework.waiting import WaitingPods
from policy_scheduler.plugins import default_registry
from support.handles import MemoryActions, state_handle


def table(n=4, cpu="4"):
    t = NodeTable()
    for i in range(n):
        alloc = {"cpu": cpu, "memory": "16Gi", "pods": "110"}
        t.upsert_node({"metadata": {"name": f"n{i}", "labels": {"kubernetes.io/hostname": f"n{i}"}},
                       "status": {"allocatable": alloc, "capacity": alloc}})
    return t


def pod(name="p", cpu="1"):
    return parse_pod({"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"},
                      "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}})


def default_chain():
    return build_chain(default_chain_spec(), default_registry(), Handle())


def test_the_default_recorder_records_nothing_and_is_not_sampled():
    assert CycleState().recorder is NOOP and not NOOP.sampled
    NOOP.point("Filter", Code.SUCCESS, 0.1)  # accepted, ignored
    NOOP.plugin("X", "Filter", Code.SUCCESS, 0.1)


def test_a_sampled_cycle_reports_every_point_and_every_plugin_call():
    chain, rec = default_chain(), ListRecorder(sampled=True)
    state = CycleState(rec)
    d = schedule_one(chain, pod(), table(), state=state)
    assert d.scheduled
    points = {(p, c) for p, c, _ in rec.points}
    assert points == {("PreFilter", Code.SUCCESS), ("Filter", Code.SUCCESS), ("PreScore", Code.SUCCESS),
                      ("Score", Code.SUCCESS)}
    assert all(s > 0 for _, _, s in rec.points)
    seen = {(name, point) for name, point, _, _ in rec.plugins}
    assert {(p.NAME, "Filter") for p in chain.filter if p.NAME not in state.skip_filter} <= seen
    assert {(p.NAME, "Score") for p, _ in chain.score if p.NAME not in state.skip_score} <= seen
    assert not any(pt == "Filter" and n in state.skip_filter for n, pt, _, _ in rec.plugins)
    assert {(p.NAME, "PreFilter") for p in chain.pre_filter} <= seen
    assert {(p.NAME, "PreScore") for p in chain.pre_score} <= seen
    # NormalizeScore only for plugins that normalize (upstream ScoreExtensions)
    normalizing = {n for n, pt, _, _ in rec.plugins if pt == "ScoreExtensionNormalize"}
    assert normalizing and normalizing < {p.NAME for p, _ in chain.score}
    assert all(s >= 0 for *_, s in rec.plugins)


def test_an_unsampled_cycle_reports_points_only():
    rec = ListRecorder(sampled=False)
    schedule_one(default_chain(), pod(), table(), recorder=rec)
    assert rec.plugins == []
    assert [p for p, _, _ in rec.points] == ["PreFilter", "Filter", "PreScore", "Score"]


def test_statuses_of_a_rejection_and_of_an_error():
    rec = ListRecorder()
    d = schedule_one(default_chain(), pod(cpu="64"), table(), recorder=rec)  # fits nowhere
    assert not d.scheduled
    assert ("Filter", Code.SUCCESS) in {(p, c) for p, c, _ in rec.points}  # upstream: Success unless an error
    assert ("NodeResourcesFit", "Filter", Code.UNSCHEDULABLE_AND_UNRESOLVABLE) in {
        (n, p, c) for n, p, c, _ in rec.plugins}  # more cpu than any node has

    class Broken(FilterPlugin):
        NAME = "Broken"

        def filter(self, state, pod, nodes, rows):
            return FilterResult(np.ones(len(rows), dtype=bool), error=Status.error("broke"))

    reg = Registry()
    reg.register(Broken)
    chain = build_chain({"plugins": [{"name": "Broken"}]}, reg, Handle())
    rec = ListRecorder()
    d = schedule_one(chain, pod(), table(), recorder=rec)
    assert d.status.code == Code.ERROR
    assert ("Filter", Code.ERROR) in {(p, c) for p, c, _ in rec.points}
    assert ("Broken", "Filter", Code.ERROR) in {(n, p, c) for n, p, c, _ in rec.plugins}


def test_the_binding_cycle_reports_its_points_through_the_cycle_state():
    binds = state_handle(actions=MemoryActions(bind=Status.success()))  # the API accepts every Binding
    chain = build_chain(default_chain_spec(), default_registry(), binds)
    rec = ListRecorder(sampled=True)
    state = CycleState(rec)

    async def go():
        assert run_reserve(chain, state, pod(), "n0").is_success
        assert run_permit(chain, state, pod(), "n0", WaitingPods()).is_success
        return await run_binding(chain, state, pod(), "n0", WaitingPods())

    st = asyncio.run(go())
    assert st.is_success, st
    assert [(p, c) for p, c, _ in rec.points] == [("Reserve", Code.SUCCESS), ("Permit", Code.SUCCESS),
                                                  ("PreBind", Code.SUCCESS), ("Bind", Code.SUCCESS),
                                                  ("PostBind", Code.SUCCESS)]
    assert ("DefaultBinder", "Bind", Code.SUCCESS) in {(n, p, c) for n, p, c, _ in rec.plugins}
    run_unreserve(chain, state, pod(), "n0")
    assert rec.points[-1][:2] == ("Unreserve", Code.SUCCESS)


def test_a_custom_recorder_needs_only_the_two_methods():
    class Count(CycleRecorder):
        __slots__ = ("n",)

        def __init__(self):
            super().__init__(False)
            self.n = 0

        def point(self, point, code, seconds):
            self.n += 1

    c = Count()
    schedule_one(default_chain(), pod(), table(), state=CycleState(c))
    assert c.n == 4
