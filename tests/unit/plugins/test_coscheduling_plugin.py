"""Coscheduling (plugins/podgroups/coscheduling.py): its args, QueueSort, PreEnqueue, PreFilter (members,
gates, minResources), PostFilter and the hints; then whole groups in the operator's engine
(in-memory client): two groups that fit alone but not together (one placed whole, the other
holding nothing, then placed once the first is gone), and a Permit timeout that releases every
reservation."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from support.fakeclient import FakeClient
from support.gangs import drain
from support.handles import MemoryActions, state_handle
from support.kit import QUEUE, SKIP, arg_errors, instance, table
from policy_scheduler.cluster.engine import Engine
from policy_scheduler.serve import build_engine
from policy_scheduler.cluster.podgroup_status import PodGroupStatusWriter
from policy_scheduler.framework.events import ASSIGNED_POD_DELETE, call_hint
from policy_scheduler.framework.interface import CycleState, NodeToStatus
from policy_scheduler.plugins.podgroups.cache import POD_GROUP_LABEL, POD_GROUP_MEMBERS, PodGroupChange
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code, Status
from policy_scheduler.plugins.podgroups.coscheduling import Coscheduling, format_amount

NS = "ns"


def pg(name, min_member, created="2026-01-01T00:00:00Z", **spec):
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-pg-{name}", "creationTimestamp": created},
            "spec": {"minMember": min_member, **spec}}


def pod_body(name, group=None, cpu="1500m", scheduler="policy-scheduler", priority=0, created="", gates=(),
             node=""):
    labels = {POD_GROUP_LABEL: group} if group else {}
    spec = {"schedulerName": scheduler, "priority": priority, "nodeName": node,
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels,
                         "creationTimestamp": created},
            "spec": spec, "status": {"phase": "Pending"}}


def node(name, cpu="4"):
    alloc = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def event_handle():
    """The real handle; the events the plugin posts are in ``h.actions.events``."""
    return state_handle(actions=MemoryActions())


def plugin(args=None, handle=None):
    return instance(Coscheduling, args, handle or event_handle())


def members(p, group, n, gated=0):
    for i in range(n):
        p.cache.on_pod("ADDED", pod_body(f"{group}-{i}", group, gates=("g",) if i < gated else ()))


# ------------------------------------------------------------------ args
def test_args_defaults_and_validation():
    a = Coscheduling.Args.model_validate({})
    assert (a.permit_waiting_time_seconds, a.pod_group_backoff_seconds) == (60, 0)
    assert arg_errors("Coscheduling", {"permitWaitingTimeSeconds": 5, "podGroupBackoffSeconds": 2}) == []
    assert arg_errors("Coscheduling", {"permitWaitingTimeSeconds": -1}) == [
        "permitWaitingTimeSeconds: Invalid value: -1: must be greater than 0"]
    assert arg_errors("Coscheduling", {"podGroupBackoffSeconds": -2}) == [
        "podGroupBackoffSeconds: Invalid value: -2: must be greater than 0"]
    assert arg_errors("Coscheduling", {"minMember": 2})  # not an arg


def test_format_amount():
    assert [format_amount("cpu", 4000), format_amount("cpu", 1500), format_amount("memory", 3 * 2**30),
            format_amount("memory", 1000), format_amount("pods", 2)] == ["4", "1500m", "3Gi", "1000", "2"]


# ------------------------------------------------------------------ QueueSort
def test_less_keeps_a_group_together():
    p = plugin()
    p.cache.apply("ADDED", pg("old", 2, created="2026-01-01T00:00:00Z"))
    p.cache.apply("ADDED", pg("new", 2, created="2026-01-01T00:00:05Z"))

    def q(name, group=None, ts=0.0, prio=0, created="2026-01-01T00:00:03Z"):
        return SimpleNamespace(pod=parse_pod(pod_body(name, group, priority=prio, created=created)), timestamp=ts)

    new1, old1, old2 = q("n1", "new", ts=1), q("o1", "old", ts=2), q("o2", "old", ts=3)
    plain = q("plain", ts=0)  # created between the groups
    ordered = sorted([new1, old2, plain, old1], key=lambda x: [p.less(x, y) for y in (new1, old1, old2, plain)].count(True),
                     reverse=True)
    assert [x.pod.name for x in ordered] == ["o1", "o2", "plain", "n1"]
    assert p.less(q("hi", "new", prio=10), old1)  # priority first
    # same creation second: the group key decides, both members of a group stay adjacent
    p.cache.apply("ADDED", pg("aaa", 2, created="2026-01-01T00:00:05Z"))
    assert p.less(q("x", "aaa", ts=9), new1) and not p.less(new1, q("y", "aaa", ts=9))


# ------------------------------------------------------------------ PreEnqueue
def test_pre_enqueue_waits_for_the_group_and_its_members_with_one_event_per_reason():
    h = event_handle()
    p = plugin(handle=h)
    a0 = parse_pod(pod_body("a-0", "a"))
    assert p.pre_enqueue(parse_pod(pod_body("plain"))).is_success
    st = p.pre_enqueue(a0)
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == f"waiting for PodGroup {NS}/a to be created (pod label {POD_GROUP_LABEL}=a)"
    p.pre_enqueue(a0)
    assert len(h.actions.events) == 1  # once per reason
    p.cache.apply("ADDED", pg("a", 3))
    members(p, "a", 3, gated=1)
    st = p.pre_enqueue(a0)
    assert st.message() == f"waiting for the pods of PodGroup {NS}/a: 3 exist, 1 of them gated, minMember is 3"
    assert [e[1] for e in h.actions.events] == ["FailedScheduling", "FailedScheduling"]
    p.cache.on_pod("MODIFIED", pod_body("a-0", "a"))  # gate removed
    assert p.pre_enqueue(a0).is_success
    assert "ns/a" in p.cache.managed


# ------------------------------------------------------------------ PreFilter
def test_pre_filter_members_gates_and_the_rejection_marker():
    p = plugin()
    nodes = table([node("n1")])
    p.cache.apply("ADDED", pg("a", 3))
    members(p, "a", 2)
    a0 = parse_pod(pod_body("a-0", "a"))
    st, _ = p.pre_filter(CycleState(), a0, nodes)
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and st.message() == (
        "pre-filter pod a-0 cannot find enough sibling pods, current pods number: 2, minMember of group: 3")
    st, _ = p.pre_filter(CycleState(), a0, nodes)
    assert st.message().startswith(f"PodGroup {NS}/a was rejected (pre-filter pod a-0 cannot find")
    p.cache.on_pod("ADDED", pod_body("a-2", "a", gates=("g",)))  # a new member clears the marker
    st, _ = p.pre_filter(CycleState(), a0, nodes)
    assert st.message() == "pre-filter pod a-0 cannot proceed due to gated pods in the same PodGroup"
    p.cache.on_pod("MODIFIED", pod_body("a-2", "a"))
    assert p.pre_filter(CycleState(), a0, nodes)[0].is_success
    assert p.pre_filter(CycleState(), parse_pod(pod_body("plain")), nodes)[0].is_skip


def test_pre_filter_min_resources_against_free_capacity_counting_the_groups_own_pods():
    p = plugin()
    nodes = table([node("n1", cpu="4"), node("n2", cpu="4")])
    other = parse_pod(pod_body("other", cpu="3"))
    nodes.add_pod(other, "n1")  # 1 + 4 cpu free
    p.cache.apply("ADDED", pg("a", 2, minResources={"cpu": "6", "memory": "1Gi"}))
    members(p, "a", 2)
    a0 = parse_pod(pod_body("a-0", "a"))
    st, _ = p.pre_filter(CycleState(), a0, nodes)
    assert st.message() == f"PodGroup {NS}/a: minResources do not fit the cluster's free capacity: resource gap: cpu: 1"
    # a member already placed counts as free room for its own group
    p.cache.capacity_changed("ns/someone-else")
    a1 = parse_pod(pod_body("a-1", "a", cpu="2"))
    a1.node_name = "n2"
    nodes.add_pod(a1, "n2")
    p.cache.on_pod("MODIFIED", pod_body("a-1", "a", cpu="2", node="n2"))
    assert p.resource_gap(p.cache.groups["ns/a"], nodes) == {"cpu": 1000}  # not 3000: its 2 cpu count as free
    nodes.add_pod(parse_pod(pod_body("foreign", cpu="2")), "n2")
    assert p.resource_gap(p.cache.groups["ns/a"], nodes) == {"cpu": 3000}
    nodes.remove_pod("ns/foreign")
    nodes.remove_pod("ns/other")
    assert p.resource_gap(p.cache.groups["ns/a"], nodes) == {}
    assert p.pre_filter(CycleState(), a0, nodes)[0].is_success


def test_post_filter_rejects_the_group_not_plain_pods_and_not_a_placed_group():
    p = plugin()
    nodes = table([node("n1")])
    statuses = NodeToStatus({"n1": Status(Code.UNSCHEDULABLE, ("Insufficient cpu",))})
    st, nominated = p.post_filter(CycleState(), parse_pod(pod_body("plain")), nodes, statuses)
    assert (st.code, st.reasons, nominated) == (Code.UNSCHEDULABLE, (), None)
    p.cache.apply("ADDED", pg("a", 2))
    members(p, "a", 2)
    st, _ = p.post_filter(CycleState(), parse_pod(pod_body("a-1", "a")), nodes, statuses)
    assert st.message() == f"PodGroup {NS}/a gets rejected due to Pod a-1 is unschedulable even after PostFilter"
    assert p.cache.rejection("ns/a") == "pod a-1 does not fit: 0/1 nodes are available: 1 Insufficient cpu."
    p.cache.permit("ns/a")  # placed: a further member's failure leaves it alone
    st, _ = p.post_filter(CycleState(), parse_pod(pod_body("a-1", "a")), nodes, statuses)
    assert st.reasons == ()


def test_hints():
    p = plugin()
    regs = {r.event.resource: r for r in p.events_to_register()}
    waiting = parse_pod(pod_body("a-0", "a"))
    mine, other = PodGroupChange("ns/a"), PodGroupChange("ns/b")
    reg = regs["scheduling.x-k8s.io/PodGroup"]
    assert reg.event.matches(POD_GROUP_MEMBERS)
    assert call_hint(reg, waiting, None, mine) == QUEUE and call_hint(reg, waiting, None, other) == SKIP
    assert call_hint(reg, waiting, mine, None) == QUEUE  # deleted
    reg = regs["AssignedPod"]
    assert reg.event.matches(ASSIGNED_POD_DELETE)
    assert call_hint(reg, waiting, parse_pod(pod_body("a-1", "a")), None) == SKIP  # its own group's release
    assert call_hint(reg, waiting, parse_pod(pod_body("b-1", "b")), None) == QUEUE
    assert call_hint(reg, waiting, parse_pod(pod_body("x")), None) == QUEUE


# ------------------------------------------------------------------ whole groups in the engine
GANG = [{"name": "NodeResourcesFit"}, {"name": "DefaultPreemption"}, {"name": "Coscheduling"}]


def engine(n_nodes=3, args=None) -> Engine:
    e = build_engine(FakeClient())
    plugins = [dict(x) for x in GANG]
    if args:
        plugins[-1]["args"] = args
    e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": plugins}})
    for i in range(n_nodes):
        e.on_node("ADDED", node(f"n{i}"))
    return e



def bound_by_group(e: Engine) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in e.client.calls_of("bind"):
        name = c.path.split("/")[-2]
        g = name.split("-")[0]
        out[g] = out.get(g, 0) + 1
    return out


def confirm_bindings(e: Engine) -> None:
    """The watch brings our bindings back (the pods now have their nodes)."""
    for c in e.client.calls_of("bind"):
        name = c.path.split("/")[-2]
        e.on_pod("MODIFIED", pod_body(name, name.split("-")[0], node=c.body["target"]["name"]))


def test_two_groups_that_fit_alone_but_not_together_do_not_deadlock():
    """Three nodes of 4 cpu hold six 1.5-cpu pods; groups a and b of four each, created
    interleaved. One is bound whole, the other not at all and holds nothing; it is bound whole
    once the first group's pods are gone."""
    async def go():
        e = engine()
        e.route("podgroups")("ADDED", pg("a", 4))
        e.route("podgroups")("ADDED", pg("b", 4))
        for i in range(4):
            for g in ("a", "b"):
                e.on_pod("ADDED", pod_body(f"{g}-{i}", g))
        await drain(e, 80)
        assert bound_by_group(e) == {"a": 4}
        assert len(e.state.waiting) == 0
        assert not [k for k in e.state.table.pod_node if k.startswith("ns/b-")]  # b holds no room
        assert e.state.pod_groups.rejection("ns/b") is not None
        assert e.state.pod_groups.counts("ns/b").assigned == 0
        confirm_bindings(e)
        await drain(e, 20)
        assert bound_by_group(e) == {"a": 4}  # a binding of a's coming back helps b nothing
        for i in range(4):
            e.on_pod("DELETED", pod_body(f"a-{i}", "a", node="n0"))
        await drain(e, 80)
        assert bound_by_group(e) == {"a": 4, "b": 4}
        assert len(e.state.waiting) == 0
        await e.stop()

    asyncio.run(go())


def test_a_permit_timeout_releases_every_reservation():
    """Group s of three whose third member another scheduler owns: its two pods reserve and
    wait; at the 1 s timeout both are rejected and unreserved, and a plain pod uses the room."""
    async def go():
        e = engine(n_nodes=1)
        e.route("podgroups")("ADDED", pg("s", 3, scheduleTimeoutSeconds=1))
        e.on_pod("ADDED", pod_body("s-0", "s"))
        e.on_pod("ADDED", pod_body("s-1", "s"))
        e.on_pod("ADDED", pod_body("s-2", "s", scheduler="someone-else"))
        await drain(e, 10)
        assert len(e.state.waiting) == 2 and e.state.pod_groups.counts("ns/s").assumed == 2
        e.on_pod("ADDED", pod_body("x-0", None))
        await drain(e, 10)
        assert bound_by_group(e) == {}  # the room is held while the group waits
        await asyncio.sleep(1.1)
        await drain(e, 20)
        assert len(e.state.waiting) == 0 and e.state.pod_groups.counts("ns/s").assumed == 0
        assert bound_by_group(e) == {"x": 1}
        assert not [k for k in e.state.table.pod_node if k.startswith("ns/s-")]
        assert "timed out" in (e.state.pod_groups.rejection("ns/s") or "") or e.state.pod_groups.rejection("ns/s")
        events = [(x[0].name, x[4]) for x in list(e.recorder._events._queue)]
        assert any(n.startswith("s-") and "rejected due to timeout after waiting 1s at plugin Coscheduling" in m
                   for n, m in events), events
        await e.stop()

    asyncio.run(go())


def test_status_is_written_for_managed_groups_through_the_handle():
    async def go():
        e = engine(n_nodes=1)
        e.route("podgroups")("ADDED", pg("a", 2))
        e.route("podgroups")("ADDED", pg("unmanaged", 2))
        for i in range(2):
            e.on_pod("ADDED", pod_body(f"a-{i}", "a"))
        await drain(e, 10)
        writer = PodGroupStatusWriter(e.state.pod_groups, e.handle)
        assert await writer.flush() == 1
        patch = [c for c in e.client.calls_of("merge_patch") if "podgroups" in c.path]
        assert [c.path for c in patch] == [f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups/a/status"]
        assert patch[0].body["status"]["phase"] in ("Scheduling", "Scheduled")
        assert await writer.flush() == 0  # nothing changed
        await e.stop()

    asyncio.run(go())
