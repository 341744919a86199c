"""GangScheduling (plugins/podgroups/gang_scheduling.py): PreEnqueue with upstream's messages, Permit, the
hints (a member added, the group added, minCount decreased); then whole groups in the operator's
engine (in-memory client), in the pod-group cycle (plugins/podgroups/cycle.py): two groups that fit
alone but not together, racks (the fuller placement; a group no rack can hold fails with
upstream's message), a member added later joins its placed siblings' rack, pod affinity decides
the rack, Tightest scoring, minCount lowered, and group preemption (disruptionMode Single and All,
preemptionPolicy Never)."""

from __future__ import annotations

import asyncio
import json

from support.gangs import NS, cond_message, deletes, drain, engine, node, npg, pod_body
from support.handles import MemoryActions, state_handle
from support.kit import QUEUE, SKIP, table
from policy_scheduler.cluster.engine import DECISION_ANNOTATION, Engine
from policy_scheduler.cluster.sync import NATIVE_PODGROUPS
from policy_scheduler.framework.events import call_hint
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.plugins.podgroups.native_cache import NATIVE_POD_GROUP_MEMBERS, NativePodGroup
from policy_scheduler.plugins.podgroups.cache import PodGroupChange
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.podgroups.gang_scheduling import GangScheduling, GangSchedulingArgs


def event_handle():
    """The real handle; the events the plugin posts and the pods it activates are in
    ``h.actions.events`` and ``h.actions.activated``."""
    return state_handle(actions=MemoryActions(activate=True))


def plugin(handle=None):
    return GangScheduling(None, handle or event_handle())


# ------------------------------------------------------------------ PreEnqueue
def test_pre_enqueue_upstream_messages_nothing_written():
    h = event_handle()
    p = plugin(h)
    a0 = parse_pod(pod_body("a-0", "a"))
    assert p.pre_enqueue(parse_pod(pod_body("plain"))).is_success
    st = p.pre_enqueue(a0)
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == 'waiting for pods\'s pod group "a" to appear in scheduling queue'
    p.pre_enqueue(a0)
    assert h.actions.events == []  # upstream v1.37.1: a PreEnqueue rejection writes nothing, posts no event
    p.cache.apply("ADDED", npg("a", 3))
    p.cache.on_pod("ADDED", pod_body("a-0", "a"))
    p.cache.on_pod("ADDED", pod_body("a-1", "a"))
    assert p.pre_enqueue(a0).message() == "waiting for minCount pods from a gang to appear in scheduling queue"
    p.cache.on_pod("ADDED", pod_body("a-2", "a", gates=("x",)))
    assert "gated" in p.pre_enqueue(a0).message()
    p.cache.on_pod("MODIFIED", pod_body("a-2", "a"))
    assert p.pre_enqueue(a0).is_success
    p.cache.apply("ADDED", npg("basic"))
    assert p.pre_enqueue(parse_pod(pod_body("b-0", "basic"))).is_success  # a basic group: no quorum


# ------------------------------------------------------------------ Permit
def test_permit_waits_for_min_count_and_activates_the_unplaced_members():
    h = event_handle()
    p = plugin(h)
    p.cache.apply("ADDED", npg("a", 2))
    for i in range(3):
        p.cache.on_pod("ADDED", pod_body(f"a-{i}", "a"))
    a0 = parse_pod(pod_body("a-0", "a"))
    p.reserve(CycleState(), a0, "n1")
    st, timeout = p.permit(CycleState(), a0, "n1")
    assert (st.code, st.message(), timeout) == (Code.WAIT, "waiting for minCount pods from a gang to be scheduled",
                                                300.0)
    assert h.actions.activated == [["ns/a-1", "ns/a-2"]]
    a1 = parse_pod(pod_body("a-1", "a"))
    p.reserve(CycleState(), a1, "n1")
    assert p.permit(CycleState(), a1, "n1")[0].is_success and p.cache.permitted("ns/a")
    assert p.permit(CycleState(), parse_pod(pod_body("x")), "n1")[0].is_success


# ------------------------------------------------------------------ hints
def test_hints_member_added_group_added_min_count_decreased():
    p = plugin()
    (reg,) = p.events_to_register()
    waiting = parse_pod(pod_body("a-0", "a"))
    assert reg.event.matches(NATIVE_POD_GROUP_MEMBERS)
    assert call_hint(reg, waiting, None, PodGroupChange("ns/a")) == QUEUE  # a member, or the group, added
    assert call_hint(reg, waiting, None, PodGroupChange("ns/b")) == SKIP
    four, three = (PodGroupChange("ns/a", NativePodGroup.from_dict(npg("a", n))) for n in (4, 3))
    assert call_hint(reg, waiting, four, three) == QUEUE  # minCount decreased
    assert call_hint(reg, waiting, three, four) == SKIP  # increased: nothing can fit now that did not
    basic = PodGroupChange("ns/a", NativePodGroup.from_dict(npg("a")))
    assert call_hint(reg, waiting, basic, three) == SKIP  # not both gangs
    assert call_hint(reg, parse_pod(pod_body("plain")), None, PodGroupChange("ns/a")) == SKIP


# ------------------------------------------------------------------ whole groups in the engine
def binds(e: Engine) -> dict[str, str]:
    return {c.path.split("/")[-2]: c.body["target"]["name"] for c in e.client.calls_of("bind")}


def by_group(e: Engine) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in binds(e):
        g = name.split("-")[0]
        out[g] = out.get(g, 0) + 1
    return out


def events(e: Engine) -> list[tuple[str, str]]:
    return [(x[0].name, x[4]) for x in list(e.recorder._events._queue)]


NO_VICTIMS = ", pod group preemption: No preemption victims found for incoming preemptor"


def failed(e: Engine, prefix: str) -> dict[str, str]:
    """The latest FailedScheduling message per pod whose name starts with ``prefix``."""
    out = {}
    for name, msg in events(e):
        if name.startswith(prefix):
            out[name] = msg
    return out


def bind_all(e: Engine, group: str | None = None) -> None:
    """The API server's answer to the bindings so far: the pods come back bound."""
    for name, target in binds(e).items():
        g = name.split("-")[0]
        e.on_pod("MODIFIED", pod_body(name, group or g, node=target, cpu="4" if g in ("t", "g") else "1500m"))


def test_two_native_groups_that_fit_alone_but_not_together():
    async def go():
        e = engine([node(f"n{i}") for i in range(3)])
        e.route(NATIVE_PODGROUPS)("ADDED", npg("a", 4))
        e.route(NATIVE_PODGROUPS)("ADDED", npg("b", 4))
        for i in range(4):
            for g in ("a", "b"):
                e.on_pod("ADDED", pod_body(f"{g}-{i}", g))
        await drain(e)
        won = by_group(e)
        assert list(won.values()) == [4], won
        winner = next(iter(won))
        loser = "b" if winner == "a" else "a"
        assert len(e.state.waiting) == 0  # the quorum was reached in one cycle: every member allowed
        assert not [k for k in e.state.table.pod_node if k.startswith(f"ns/{loser}-")]
        msgs = failed(e, f"{loser}-")
        assert len(msgs) == 4
        # upstream's words (six 1.5-cpu slots; the winner took four): the group's status for the two
        # members that fitted, its own FitError for the third, and for the fourth, never evaluated, a
        # copy of the group's status taken before the PodGroupPostFilter's message was added
        before = ("pod group is unschedulable, 0/1 placements are available, first placement status: minCount (4) "
                  "cannot be satisfied: 2 scheduled, 1 remaining")
        group_msg = before + NO_VICTIMS
        assert sorted(msgs.values()) == sorted(["pod group is unschedulable, " + group_msg] * 2 + [
            "0/3 nodes are available: 3 Insufficient cpu.", before]), msgs
        cond = e.state.native_pod_groups.status(f"ns/{loser}")["conditions"][0]
        assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", group_msg)
        for name, target in binds(e).items():
            e.on_pod("MODIFIED", pod_body(name, winner, node=target))
        await drain(e, 20)
        for i in range(4):
            e.on_pod("DELETED", pod_body(f"{winner}-{i}", winner, node="n0"))
        await drain(e)
        assert by_group(e) == {winner: 4, loser: 4}
        await e.stop()

    asyncio.run(go())


def test_racks_the_fuller_placement_and_a_group_no_rack_holds_fails_with_upstreams_message():
    async def go():
        # r0: 4 nodes of 8 cpu (32), r1: 4 nodes of 16 cpu (64); eight 4-cpu pods fit both: the same
        # PodGroupPodsCount, and MostAllocated prefers r0 (full after the group)
        e = engine([node(f"r0-n{i}", cpu="8", rack="r0") for i in range(4)]
                   + [node(f"r1-n{i}", cpu="16", rack="r1") for i in range(4)])
        e.route(NATIVE_PODGROUPS)("ADDED", npg("t", 8, topology="rack"))
        for i in range(8):
            e.on_pod("ADDED", pod_body(f"t-{i}", "t", cpu="4"))
        await drain(e)
        placed = binds(e)
        assert len(placed) == 8 and {n.split("-")[0] for n in placed.values()} == {"r0"}, placed
        # the decision annotation (explain) names the group and its domain
        ann = json.loads(e.client.calls_of("bind")[0].body["metadata"]["annotations"][DECISION_ANNOTATION])
        assert ann["group"] == {"podGroup": "ns/t", "minCount": 8, "domain": "rack=r0"}
        bind_all(e)
        # a group of 17 4-cpu pods (68 cpu): no rack holds it (r0 is full, r1 holds 16)
        e.route(NATIVE_PODGROUPS)("ADDED", npg("w", 17, topology="rack"))
        for i in range(17):
            e.on_pod("ADDED", pod_body(f"w-{i}", "w", cpu="4"))
        await drain(e)
        assert by_group(e) == {"t": 8}
        group_msg = ("pod group is unschedulable, 0/2 placements are available, first placement status: minCount (17) "
                     "cannot be satisfied: 0 scheduled, 16 remaining" + NO_VICTIMS)
        msgs = failed(e, "w-")
        assert msgs["w-0"] == "0/4 nodes are available: 4 Insufficient cpu.", msgs  # its own, in the first rack
        assert set(msgs) == {f"w-{i}" for i in range(17)}
        # never evaluated: a copy of the group's status before PodGroupPostFilter's message was added
        assert msgs["w-16"] == group_msg[:-len(NO_VICTIMS)]
        assert not [k for k in e.state.table.pod_node if k.startswith("ns/w-")]
        await e.stop()

    asyncio.run(go())


def test_a_member_added_later_joins_its_placed_siblings_domain():
    async def go():
        e = engine([node(f"r0-n{i}", cpu="8", rack="r0") for i in range(2)]
                   + [node(f"r1-n{i}", cpu="8", rack="r1") for i in range(2)])
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 2, topology="rack"))
        for i in range(2):
            e.on_pod("ADDED", pod_body(f"g-{i}", "g", cpu="4"))
        await drain(e)
        first = binds(e)
        assert len(first) == 2
        rack = {n.split("-")[0] for n in first.values()}
        assert len(rack) == 1
        for name, target in first.items():
            e.on_pod("MODIFIED", pod_body(name, "g", cpu="4", node=target))
        e.on_pod("ADDED", pod_body("g-2", "g", cpu="4"))
        await drain(e)
        assert binds(e)["g-2"].split("-")[0] == rack.pop()
        await e.stop()

    asyncio.run(go())


def test_pod_affinity_decides_the_rack_every_filter_runs_per_placement():
    """r0 is the fuller placement, but the members require a pod labelled app=db on their node,
    and only r1 has one: every Filter runs in every placement, so the group goes to r1."""
    async def go():
        e = engine([node(f"r0-n{i}", cpu="8", rack="r0") for i in range(2)]
                   + [node(f"r1-n{i}", cpu="16", rack="r1") for i in range(2)])
        e.on_pod("ADDED", pod_body("db", cpu="1", node="r1-n0", labels={"app": "db"}))
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 2, topology="rack"))
        for i in range(2):
            body = pod_body(f"g-{i}", "g", cpu="2")
            body["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "rack"}]}}
            e.on_pod("ADDED", body)
        await drain(e)
        assert {n.split("-")[0] for n in binds(e).values()} == {"r1"} and len(binds(e)) == 2
        await e.stop()

    asyncio.run(go())


def test_tightest_scoring_leaves_the_big_rack_whole():
    """Two 2-cpu pods: r0 (2 x 3 cpu, empty: 2 cpu left after them) and r1 (2 x 8 cpu, 8 used: 4
    left): upstream's score prefers the fuller r1 (MostAllocated 75% against 66%); Tightest takes
    r0, which leaves less free room."""
    async def go():
        for scoring, want in (("Upstream", "r1"), ("Tightest", "r0")):
            plugins = [{"name": "NodeResourcesFit"}, {"name": "GangScheduling", "args": {"placementScoring": scoring}}]
            e = engine([node(f"r0-n{i}", cpu="3", rack="r0") for i in range(2)]
                       + [node(f"r1-n{i}", cpu="8", rack="r1") for i in range(2)], plugins)
            e.on_pod("ADDED", pod_body("x-0", cpu="6", node="r1-n0"))
            e.on_pod("ADDED", pod_body("x-1", cpu="2", node="r1-n1"))
            e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 2, topology="rack"))
            for i in range(2):
                e.on_pod("ADDED", pod_body(f"g-{i}", "g", cpu="2"))
            await drain(e)
            assert {n.split("-")[0] for n in binds(e).values()} == {want}, (scoring, binds(e))
            await e.stop()

    asyncio.run(go())


def test_lowering_min_count_lets_a_waiting_gang_through():
    async def go():
        e = engine([node(f"n{i}") for i in range(2)])
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 4))
        for i in range(3):
            e.on_pod("ADDED", pod_body(f"g-{i}", "g"))
        await drain(e, 20)
        assert binds(e) == {}  # 3 of minCount 4 exist: waiting at PreEnqueue
        e.route(NATIVE_PODGROUPS)("MODIFIED", npg("g", 5))  # raised: still waiting
        await drain(e, 20)
        assert binds(e) == {}
        e.route(NATIVE_PODGROUPS)("MODIFIED", npg("g", 3))  # lowered to what exists
        await drain(e, 20)
        assert by_group(e) == {"g": 3}
        await e.stop()

    asyncio.run(go())


def low_pods(e: Engine, nodes_cpu: dict[str, int], group=None, priority=10):
    """Fill each node with 1-cpu pods of ``priority`` (members of ``group`` when given)."""
    for n, cpu in nodes_cpu.items():
        for i in range(cpu):
            e.on_pod("ADDED", pod_body(f"low-{n}-{i}", group, cpu="1", node=n, priority=priority))


def test_group_preemption_single_and_all_and_never():
    async def go():
        # Single: each low pod is a victim of its own; the group needs 2 of n0's 4 cpu
        e = engine([node("n0", cpu="4"), node("n1", cpu="4")])
        low_pods(e, {"n0": 4, "n1": 4})
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 2, priority=100))
        for i in range(2):
            e.on_pod("ADDED", pod_body(f"g-{i}", "g", cpu="1", priority=100))
        e.schedule(e.queue.pop())  # the group's cycle
        assert cond_message(e).endswith("pod group preemption: found a placement for podgroup, preempting 2 victims")
        # the members' own statuses (the first did not fit; the loop stopped there)
        assert failed(e, "g-")["g-0"] == "0/2 nodes are available: 2 Insufficient cpu."
        await drain(e, 10)
        for _ in range(20):
            await asyncio.sleep(0)
        assert deletes(e) == ["low-n0-3", "low-n1-3"]  # one per node: the others are reprieved
        # the deletions are done, the victims not gone yet: the members wait for them (held at
        # PreEnqueue), not tried again once per victim's event
        assert cond_message(e).endswith("found a placement for podgroup, preempting 2 victims")
        assert {e.queue.state_of(f"ns/g-{i}") for i in range(2)} <= {"gated", "unschedulable"}
        e.on_pod("DELETED", pod_body("low-n0-3", cpu="1", node="n0", priority=10))
        await drain(e, 5)
        assert binds(e) == {}  # one victim still there
        e.on_pod("DELETED", pod_body("low-n1-3", cpu="1", node="n1", priority=10))
        await drain(e, 10)
        assert sorted(binds(e)) == ["g-0", "g-1"]  # the last victim gone: tried once more, placed
        noms = [c for c in e.client.calls_of("strategic_patch") if (c.body.get("status") or {}).get("nominatedNodeName")]
        assert {c.path.split("/")[-2] for c in noms} == {"g-0", "g-1"}
        await e.stop()

        # All: the low pods are one PodGroup with disruptionMode All: every one of them goes, on
        # both nodes, although two would have made room
        e = engine([node("n0", cpu="4"), node("n1", cpu="4")])
        e.route(NATIVE_PODGROUPS)("ADDED", npg("low", 1, priority=10, mode="all"))
        low_pods(e, {"n0": 4, "n1": 4}, group="low")
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 2, priority=100))
        for i in range(2):
            e.on_pod("ADDED", pod_body(f"g-{i}", "g", cpu="1", priority=100))
        e.schedule(e.queue.pop())
        assert cond_message(e).endswith("preempting 8 victims")
        await drain(e, 10)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(deletes(e)) == 8, deletes(e)
        await e.stop()

        # Never: nothing preempted, upstream's words
        e = engine([node("n0", cpu="4")])
        low_pods(e, {"n0": 4})
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 2, priority=100, policy="Never"))
        for i in range(2):
            e.on_pod("ADDED", pod_body(f"g-{i}", "g", cpu="1", priority=100, policy="Never"))
        await drain(e, 10)
        assert deletes(e) == []
        assert cond_message(e).endswith("pod group preemption: not eligible due to preemptionPolicy=Never.")
        await e.stop()

        # a group that does not fit even with every lower-priority pod gone preempts nothing
        e = engine([node("n0", cpu="4")])
        low_pods(e, {"n0": 4})
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 5, priority=100))
        for i in range(5):
            e.on_pod("ADDED", pod_body(f"g-{i}", "g", cpu="1", priority=100))
        await drain(e, 10)
        assert deletes(e) == []
        assert cond_message(e) == ("pod group is unschedulable, 0/1 placements are available, first placement status: "
                                   "minCount (5) cannot be satisfied: 0 scheduled, 4 remaining, pod group preemption: "
                                   "pod group is unschedulable, 0/1 placements are available, first placement status: "
                                   "minCount (5) cannot be satisfied: 4 scheduled, 0 remaining")
        await e.stop()

    asyncio.run(go())


def test_a_member_whose_priority_differs_fails_the_group_with_upstreams_error():
    async def go():
        e = engine([node("n0")])
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 2, priority=5))
        e.on_pod("ADDED", pod_body("g-0", "g", priority=5))
        e.on_pod("ADDED", pod_body("g-1", "g", priority=7))
        await drain(e, 10)
        assert binds(e) == {}
        msgs = set(failed(e, "g-").values())
        assert msgs == {"all pods in a single pod group should have the same priority as the pod group's priority, "
                        "got 7 and 5"}, msgs
        cond = e.state.native_pod_groups.status("ns/g")["conditions"][0]
        assert (cond["status"], cond["reason"]) == ("False", "SchedulerError")
        await e.stop()

    asyncio.run(go())


def test_the_served_version_is_read_from_discovery():
    async def go():
        e = engine([])
        assert await e.informers.discover_native_version() == "v1beta1"  # nothing served: the default
        e.client.objects["/apis/scheduling.k8s.io"] = {"versions": [{"version": "v1"}, {"version": "v1alpha3"}]}
        assert await e.informers.discover_native_version() == "v1alpha3"
        e.client.objects["/apis/scheduling.k8s.io"]["versions"].append({"version": "v1beta1"})
        assert await e.informers.discover_native_version() == "v1beta1"
        await e.stop()

    asyncio.run(go())


def test_the_condition_is_written_for_groups_the_policy_schedules():
    async def go():
        e = engine([node(f"n{i}") for i in range(2)])
        e.route(NATIVE_PODGROUPS)("ADDED", npg("a", 2))
        e.route(NATIVE_PODGROUPS)("ADDED", npg("other", 2))
        for i in range(2):
            e.on_pod("ADDED", pod_body(f"a-{i}", "a"))
        await drain(e, 20)
        assert by_group(e) == {"a": 2}
        assert await e.native_pod_group_status.flush() == 1
        patch = [c for c in e.client.calls_of("merge_patch") if "podgroups" in c.path]
        assert [c.path for c in patch] == [f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NS}/podgroups/a/status"]
        (cond,) = patch[0].body["status"]["conditions"]
        assert (cond["type"], cond["status"], cond["reason"]) == ("PodGroupInitiallyScheduled", "True", "Scheduled")
        assert await e.native_pod_group_status.flush() == 0
        await e.stop()

    asyncio.run(go())


# ------------------------------------------------------------------ CompositePodGroups
def cpg(name, min_groups=None, topology=None, priority=None):
    spec = {"schedulingPolicy": {"gang": {"minGroupCount": min_groups}} if min_groups else {"basic": {}},
            "workloadRef": {"workloadName": "w", "templateName": "t"}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-cpg-{name}"}, "spec": spec}


def child(name, min_count, parent, topology=None):
    body = npg(name, min_count, topology=topology)
    body["spec"]["parentCompositePodGroupName"] = parent
    body["spec"]["workloadRef"] = {"workloadName": "w", "templateName": name}
    return body


def zoned(zones: dict[str, dict[str, tuple[int, str]]]):
    """{zone: {rack: (nodes, cpu)}} -> nodes labelled zone and rack."""
    return [node(f"{z}-{r}-n{i}", cpu=cpu, rack=f"{z}-{r}", zone=z)
            for z, racks in zones.items() for r, (n, cpu) in racks.items() for i in range(n)]


def test_composite_two_levels_one_zone_each_child_in_a_rack():
    """A gang composite (minGroupCount 2) by zone with two child gangs by rack: the whole tree
    lands in one zone (z1: z0 cannot hold both children), each child in one rack of it; nothing is
    bound before the tree's quorum; a tree that cannot meet minGroupCount binds nothing and each
    child's condition says so in upstream's words."""
    from policy_scheduler.cluster.sync import COMPOSITE_PODGROUPS

    async def go():
        e = engine(zoned({"z0": {"r0": (2, "4")}, "z1": {"r0": (2, "4"), "r1": (2, "4")}}))
        e.route(COMPOSITE_PODGROUPS)("ADDED", cpg("c", 2, topology="zone"))
        e.route(NATIVE_PODGROUPS)("ADDED", child("a", 2, "c", topology="rack"))
        e.route(NATIVE_PODGROUPS)("ADDED", child("b", 2, "c", topology="rack"))
        for g in ("a", "b"):
            for i in range(2):
                e.on_pod("ADDED", pod_body(f"{g}-{i}", g, cpu="3"))
        await drain(e)
        placed = binds(e)
        assert len(placed) == 4, placed
        assert {n.split("-")[0] for n in placed.values()} == {"z1"}, placed
        for g in ("a", "b"):
            assert len({placed[f"{g}-{i}"].rsplit("-", 1)[0] for i in range(2)}) == 1  # one rack per child
        assert placed["a-0"].rsplit("-", 1)[0] != placed["b-0"].rsplit("-", 1)[0]  # 2 x 3 cpu per rack
        cond = e.state.native_pod_groups.status("ns/a")["conditions"][0]
        assert (cond["status"], cond["reason"]) == ("True", "Scheduled")
        await e.stop()

        # three children of 2 x 3 cpu, minGroupCount 3, in a zone of two racks: the tree cannot be placed
        e = engine(zoned({"z0": {"r0": (2, "4"), "r1": (2, "4")}}))
        e.route(COMPOSITE_PODGROUPS)("ADDED", cpg("c", 3, topology="zone"))
        for g in ("a", "b", "d"):
            e.route(NATIVE_PODGROUPS)("ADDED", child(g, 2, "c", topology="rack"))
            for i in range(2):
                e.on_pod("ADDED", pod_body(f"{g}-{i}", g, cpu="3"))
        await drain(e)
        assert binds(e) == {}
        conds = {g: e.state.native_pod_groups.status(f"ns/{g}")["conditions"][0] for g in ("a", "b", "d")}
        assert all(c["status"] == "False" and c["reason"] == "Unschedulable" for c in conds.values()), conds
        # upstream's words: a and b fitted inside the failed composite and share its status, which
        # PodGroupPostFilter's message is then added to once per result holding it (three: the
        # composite's, a's, b's); d failed on its own (both racks of z0 taken), its status once
        shared = ("pod group is unschedulable, 0/1 placements are available, first placement status: minCount (3) "
                  "cannot be satisfied: 2 scheduled, 0 remaining" + NO_VICTIMS * 3)
        assert conds["a"]["message"] == conds["b"]["message"] == shared, conds
        assert conds["d"]["message"] == ("pod group is unschedulable, 0/2 placements are available, first placement "
                                         "status: minCount (2) cannot be satisfied: 0 scheduled, 1 remaining"
                                         + NO_VICTIMS), conds
        await e.stop()

    asyncio.run(go())


def test_composite_pre_enqueue_waits_for_the_tree_and_its_parent():
    h = event_handle()
    p = plugin(h)
    p.cache.apply("ADDED", child("a", 2, "c"))
    p.cache.on_pod("ADDED", pod_body("a-0", "a"))
    a0 = parse_pod(pod_body("a-0", "a"))
    assert p.pre_enqueue(a0).message() == ("failed to build hierarchy snapshot: composite pod group object not found "
                                           "in state for ns/c")
    p.cache.apply_composite("ADDED", cpg("c", 2))
    p.cache.apply("ADDED", child("b", 1, "c"))
    p.cache.on_pod("ADDED", pod_body("b-0", "b"))
    assert p.pre_enqueue(a0).message() == 'waiting for composite pod group "c" tree to meet quorum'  # a has 1 of 2
    p.cache.on_pod("ADDED", pod_body("a-1", "a"))
    assert p.pre_enqueue(a0).is_success
    (reg,) = p.events_to_register()
    from policy_scheduler.plugins.podgroups.native_cache import CompositePodGroup
    assert call_hint(reg, a0, None, PodGroupChange("ns/c", CompositePodGroup.from_dict(cpg("c", 2)))) == QUEUE
    assert call_hint(reg, a0, None, PodGroupChange("ns/b")) == QUEUE  # a sibling's member added
    assert call_hint(reg, a0, None, PodGroupChange("ns/other")) == SKIP


def test_a_failing_group_cycle_stops_nothing_and_strands_no_member(monkeypatch):
    """A bug in the pod-group cycle (here: the algorithm raises) is reported on the group's
    members, which are requeued with backoff; other pods go on being scheduled."""
    from policy_scheduler.plugins.podgroups import cycle as podgroup

    def boom(self, root):
        raise RuntimeError("kaboom")

    async def go():
        e = engine([node("n0")])
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 2))
        for i in range(2):
            e.on_pod("ADDED", pod_body(f"g-{i}", "g"))
        e.on_pod("ADDED", pod_body("plain"))
        monkeypatch.setattr(podgroup.PodGroupCycle, "run_tree", boom)
        await drain(e, 10)
        assert set(binds(e)) == {"plain"}
        msgs = failed(e, "g-")
        assert msgs == {f"g-{i}": "pod group scheduling cycle failed: RuntimeError: kaboom" for i in range(2)}
        assert {e.queue.state_of(f"ns/g-{i}") for i in range(2)} <= {"backoff", "active"}
        await e.stop()

    asyncio.run(go())


def test_a_composite_with_disruption_mode_all_is_preempted_whole():
    """The low pods belong to two child PodGroups of a CompositePodGroup with disruptionMode All:
    one victim (every placed pod of both children, on every node), although two pods on one node
    would have made room."""
    from policy_scheduler.cluster.sync import COMPOSITE_PODGROUPS

    async def go():
        e = engine([node("n0", cpu="4"), node("n1", cpu="4")])
        body = cpg("low", 1, priority=10)
        body["spec"]["disruptionMode"] = {"all": {}}
        e.route(COMPOSITE_PODGROUPS)("ADDED", body)
        for g, n in (("la", "n0"), ("lb", "n1")):
            child_body = child(g, 1, "low")
            child_body["spec"]["priority"] = 10
            e.route(NATIVE_PODGROUPS)("ADDED", child_body)
            for i in range(4):
                e.on_pod("ADDED", pod_body(f"{g}-{i}", g, cpu="1", node=n, priority=10))
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", 2, priority=100))
        for i in range(2):
            e.on_pod("ADDED", pod_body(f"g-{i}", "g", cpu="1", priority=100))
        e.schedule(e.queue.pop())
        assert cond_message(e).endswith("pod group preemption: found a placement for podgroup, preempting 8 victims")
        await drain(e, 10)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(deletes(e)) == 8, deletes(e)
        await e.stop()

    asyncio.run(go())
