"""GangScheduling (plugins/gang_scheduling.py): PreEnqueue with upstream's messages, Permit, the
choice of a topology domain (the tightest that holds the whole group; none: the largest named),
the hints; then whole groups in the operator's engine (in-memory client): two groups that fit
alone but not together, racks (a group of eight 4-cpu pods in one rack, the tightest; a group no
rack can hold waits and says so), and a group whose placed members fix the domain of the next."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))  # the in-memory client
from fakeclient import FakeClient  # noqa: E402

from kit import QUEUE, SKIP, table  # noqa: E402
from policy_scheduler.cluster.engine import DECISION_ANNOTATION, Engine  # noqa: E402
from policy_scheduler.cluster.sync import NATIVE_PODGROUPS  # noqa: E402
from policy_scheduler.framework.events import call_hint  # noqa: E402
from policy_scheduler.framework.interface import CycleState, Handle  # noqa: E402
from policy_scheduler.framework.model.native_podgroups import NATIVE_POD_GROUP_MEMBERS, Domain  # noqa: E402
from policy_scheduler.framework.model.podgroups import PodGroupChange  # noqa: E402
from policy_scheduler.framework.model.podinfo import parse_pod  # noqa: E402
from policy_scheduler.framework.status import Code  # noqa: E402
from policy_scheduler.plugins.gang_scheduling import GangScheduling, choose_domain, eligible_rows  # noqa: E402

NS = "ns"


def npg(name, min_count=None, topology=None, created="2026-01-01T00:00:00Z"):
    spec = {"schedulingPolicy": {"gang": {"minCount": min_count}} if min_count else {"basic": {}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-pg-{name}", "creationTimestamp": created},
            "spec": spec}


def pod_body(name, group=None, cpu="1500m", node="", scheduler="policy-scheduler", gates=()):
    spec = {"schedulerName": scheduler, "nodeName": node,
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"}, "spec": spec,
            "status": {"phase": "Pending"}}


def node(name, cpu="4", rack=None, **labels):
    alloc = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    lab = {"kubernetes.io/hostname": name, **({"rack": rack} if rack else {}), **labels}
    return {"metadata": {"name": name, "labels": lab}, "status": {"allocatable": alloc, "capacity": alloc}}


class EventHandle(Handle):
    def __init__(self):
        self.events = []
        self.activated = []

    def pod_event(self, pod, reason, message):
        self.events.append((pod.name, reason, message))

    def activate_pods(self, keys):
        self.activated.append(sorted(keys))
        return len(keys)


def plugin(handle=None):
    return GangScheduling(None, handle or EventHandle())


# ------------------------------------------------------------------ PreEnqueue
def test_pre_enqueue_upstream_messages_and_one_event_per_reason():
    h = EventHandle()
    p = plugin(h)
    a0 = parse_pod(pod_body("a-0", "a"))
    assert p.pre_enqueue(parse_pod(pod_body("plain"))).is_success
    st = p.pre_enqueue(a0)
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == 'waiting for pods\'s pod group "a" to appear in scheduling queue'
    p.pre_enqueue(a0)
    assert len(h.events) == 1
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
    h = EventHandle()
    p = plugin(h)
    p.cache.apply("ADDED", npg("a", 2))
    for i in range(3):
        p.cache.on_pod("ADDED", pod_body(f"a-{i}", "a"))
    a0 = parse_pod(pod_body("a-0", "a"))
    p.reserve(CycleState(), a0, "n1")
    st, timeout = p.permit(CycleState(), a0, "n1")
    assert (st.code, st.message(), timeout) == (Code.WAIT, "waiting for minCount pods from a gang to be scheduled",
                                                300.0)
    assert h.activated == [["ns/a-1", "ns/a-2"]]
    a1 = parse_pod(pod_body("a-1", "a"))
    p.reserve(CycleState(), a1, "n1")
    assert p.permit(CycleState(), a1, "n1")[0].is_success and p.cache.permitted("ns/a")
    assert p.permit(CycleState(), parse_pod(pod_body("x")), "n1")[0].is_success


# ------------------------------------------------------------------ topology domains
def racks(*sizes, cpu="8"):
    """Racks r0, r1, ... of ``size`` nodes each."""
    return [node(f"r{r}-n{i}", cpu=cpu, rack=f"r{r}") for r, size in enumerate(sizes) for i in range(size)]


def test_choose_domain_the_tightest_that_holds_the_whole_group():
    nodes = table(racks(4, 4, cpu="8") + [node("big-0", cpu="64", rack="big")])
    pod = parse_pod(pod_body("x", cpu="4"))
    items = [{"cpu": 4000}] * 8  # 32 cpu: r0 and r1 hold it exactly, big with 32 left over
    fit = choose_domain(nodes, "rack", items, 8, eligible_rows(nodes, pod))
    assert fit.domain == Domain("rack", "r0") and not fit.quorum_only
    nodes.add_pod(parse_pod(pod_body("other", cpu="1")), "r0-n0")  # r0 no longer holds eight 4-cpu pods
    fit = choose_domain(nodes, "rack", items, 8, eligible_rows(nodes, pod))
    assert fit.domain == Domain("rack", "r1")
    # 9 such pods: only big holds them (fragmentation: r1 has 32 cpu, but in 8-cpu nodes)
    assert choose_domain(nodes, "rack", [{"cpu": 4000}] * 9, 9, eligible_rows(nodes, pod)).domain == \
        Domain("rack", "big")
    # 17 pods: none holds them; the largest is named
    fit = choose_domain(nodes, "rack", [{"cpu": 4000}] * 17, 17, eligible_rows(nodes, pod))
    assert fit.domain is None and fit.largest == "big" and fit.largest_free["cpu"] == 64000
    assert fit.need == {"cpu": 68000} and fit.candidates == 3
    # minCount of them fits somewhere: that domain, the tightest such
    fit = choose_domain(nodes, "rack", [{"cpu": 4000}] * 17, 8, eligible_rows(nodes, pod))
    assert fit.domain == Domain("rack", "r1") and fit.quorum_only


def test_choose_domain_counts_only_nodes_the_pod_may_use():
    nodes = table([node("a-0", cpu="8", rack="a", pool="x"), node("a-1", cpu="8", rack="a", pool="x"),
                   node("b-0", cpu="64", rack="b", pool="y")])
    body = pod_body("x", cpu="4")
    body["spec"]["nodeSelector"] = {"pool": "x"}
    pod = parse_pod(body)
    fit = choose_domain(nodes, "rack", [{"cpu": 4000}] * 4, 4, eligible_rows(nodes, pod))
    assert fit.domain == Domain("rack", "a")
    assert choose_domain(nodes, "rack", [{"cpu": 4000}] * 5, 5, eligible_rows(nodes, pod)).domain is None


def test_pre_filter_narrows_to_the_domain_and_explains_a_group_no_domain_holds():
    p = plugin()
    nodes = table(racks(2, 2, cpu="8"))
    p.cache.apply("ADDED", npg("g", 4, topology="rack"))
    for i in range(4):
        p.cache.on_pod("ADDED", pod_body(f"g-{i}", "g", cpu="4"))
    st, names = p.pre_filter(CycleState(), parse_pod(pod_body("g-0", "g", cpu="4")), nodes)
    assert st.is_success and names == {"r0-n0", "r0-n1"}
    assert p.cache.domain("ns/g") == Domain("rack", "r0")
    p.cache.apply("ADDED", npg("big", 5, topology="rack"))
    for i in range(5):
        p.cache.on_pod("ADDED", pod_body(f"big-{i}", "big", cpu="4"))
    st, _ = p.pre_filter(CycleState(), parse_pod(pod_body("big-0", "big", cpu="4")), nodes)
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == ("PodGroup ns/big: no single rack domain can hold the group's 5 pods (cpu: 20); "
                            "the largest is rack=r1 with cpu: 16 free (counting the pods of other groups already "
                            "headed there)")
    assert p.cache.rejection("ns/big") == st.message()
    assert p.pre_filter(CycleState(), parse_pod(pod_body("plain")), nodes)[0].is_skip


def test_hints():
    p = plugin()
    regs = {r.event.resource: r for r in p.events_to_register()}
    waiting = parse_pod(pod_body("a-0", "a"))
    reg = regs["scheduling.k8s.io/PodGroup"]
    assert reg.event.matches(NATIVE_POD_GROUP_MEMBERS)
    assert call_hint(reg, waiting, None, PodGroupChange("ns/a")) == QUEUE
    assert call_hint(reg, waiting, None, PodGroupChange("ns/b")) == SKIP
    reg = regs["AssignedPod"]
    assert call_hint(reg, waiting, parse_pod(pod_body("a-1", "a")), None) == SKIP  # its own group's release
    assert call_hint(reg, waiting, parse_pod(pod_body("b-1", "b")), None) == QUEUE


# ------------------------------------------------------------------ whole groups in the engine
GANG = [{"name": "NodeResourcesFit"}, {"name": "DefaultPreemption"}, {"name": "GangScheduling"}]


def engine(nodes) -> Engine:
    e = Engine(FakeClient())
    e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": GANG}})
    for n in nodes:
        e.on_node("ADDED", n)
    return e


async def drain(e: Engine, rounds: int = 120) -> None:
    for _ in range(rounds):
        qpi = e.queue.pop()
        if qpi is not None:
            e.schedule(qpi)
        for _ in range(4):
            await asyncio.sleep(0)


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
        assert len(e.state.waiting) == 0
        assert not [k for k in e.state.table.pod_node if k.startswith(f"ns/{loser}-")]
        assert e.state.native_pod_groups.rejection(f"ns/{loser}") is not None
        for name, target in binds(e).items():
            e.on_pod("MODIFIED", pod_body(name, winner, node=target))
        await drain(e, 20)
        for i in range(4):
            e.on_pod("DELETED", pod_body(f"{winner}-{i}", winner, node="n0"))
        await drain(e)
        assert by_group(e) == {winner: 4, loser: 4}
        await e.stop()

    asyncio.run(go())


def test_racks_a_group_lands_in_the_tightest_rack_and_one_no_rack_holds_waits_saying_so():
    async def go():
        # r0: 4 nodes of 8 cpu (32), r1: 4 nodes of 16 cpu (64); eight 4-cpu pods fit both: r0 is tighter
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
        # a group of 17 4-cpu pods (68 cpu): no rack holds it; it waits, saying so
        e.route(NATIVE_PODGROUPS)("ADDED", npg("w", 17, topology="rack"))
        for i in range(17):
            e.on_pod("ADDED", pod_body(f"w-{i}", "w", cpu="4"))
        await drain(e)
        assert by_group(e) == {"t": 8}
        msgs = [m for n, m in events(e) if n.startswith("w-")]
        assert any("no single rack domain can hold the group's 17 pods (cpu: 68); the largest is "
                   "rack=r1 with cpu: 64 free" in m for m in msgs), msgs
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


def test_a_rejected_group_that_held_a_domain_wakes_the_groups_it_crowded_out():
    """g chose r0, the only rack; big, which r0 could hold alone, was refused (g's pods were
    headed there); when g is rejected its room is free again: big's marker is stale and its pods
    are activated, while g's own rejection stands."""
    h = EventHandle()
    p = plugin(h)
    p.cache.apply("ADDED", npg("g", 2, topology="rack"))
    p.cache.apply("ADDED", npg("big", 3, topology="rack"))
    for i in range(2):
        p.cache.on_pod("ADDED", pod_body(f"g-{i}", "g", cpu="4"))
    for i in range(3):
        p.cache.on_pod("ADDED", pod_body(f"big-{i}", "big", cpu="4"))
    nodes = table([node("r0-n0", cpu="16", rack="r0")])
    assert p.pre_filter(CycleState(), parse_pod(pod_body("g-0", "g", cpu="4")), nodes)[0].is_success
    assert p.cache.domain("ns/g") == Domain("rack", "r0")
    st, _ = p.pre_filter(CycleState(), parse_pod(pod_body("big-0", "big", cpu="4")), nodes)
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and "headed there" in st.message()
    assert p.cache.rejection("ns/big") is not None
    h.activated.clear()
    p._reject_group("ns/g", "pod g-0 does not fit")
    assert p.cache.domain("ns/g") is None and p.cache.rejection("ns/big") is None
    assert h.activated == [["ns/big-0", "ns/big-1", "ns/big-2"]]
    assert p.cache.rejection("ns/g") == "pod g-0 does not fit"  # its own rejection stands
    st, names = p.pre_filter(CycleState(), parse_pod(pod_body("big-0", "big", cpu="4")), nodes)
    assert st.is_success and names == {"r0-n0"}


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
