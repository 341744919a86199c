"""Group preemption picks upstream's victims, pod for pod (issue 45's case): three 4-cpu nodes
(r0n0, r0n1 in rack r0, r1n0 in r1) full of priority-10 pods with distinct start times, a
PodGroup of 5 x 2 cpu (minCount 4, priority 1000, no topology), the default policy.

Upstream (preemption/podgrouppreemption.go): every lower-priority pod is taken off, the group
cycle runs once (each member through the whole single-pod cycle: with every node empty the
totals tie, so the members go to the nodes in upstream's order, the round-robin start of Filter
and the heap of select_host deciding: two nodes get 2 members, the last one 1), then the victims
are tried back from the most important (same priority: the earliest start first) against that
fixed placement, each one spared when every proposed member still passes Filter on its node.
Only the node with one member (2 cpu free) spares anything. Which node that is follows upstream's
node order: the third of the scan; kube-scheduler evicted 9 (all but r0n1's 1-cpu pod) where
r0n1 came last, 7 where r1n0 did."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
import yaml

from policy_scheduler.cluster.sync import NATIVE_PODGROUPS
from policy_scheduler.serve import build_engine
from support import gangs as G
from support.fakeclient import FakeClient

DEFAULT = yaml.safe_load((Path(__file__).resolve().parents[3] / "policies" / "default.yaml").read_text())
PLUGINS = DEFAULT["spec"]["plugins"]

# node -> [(pod, cpu, status.startTime)]
FILL = {"r0n0": [("a-1cpu", "1", "2026-11-03T16:58:00Z"), ("a-500m", "500m", "2026-11-01T12:00:00Z"),
                 ("a-1cpu-late", "1", "2026-11-04T06:44:00Z")],
        "r0n1": [("b-2cpu", "2", "2026-11-02T17:54:00Z"), ("b-1cpu", "1", "2026-11-01T06:42:00Z")],
        "r1n0": [("c-1cpu", "1", "2026-11-03T08:37:00Z"), ("c-1cpu-early", "1", "2026-11-01T15:13:00Z"),
                 ("c-500m-late", "500m", "2026-11-04T04:40:00Z"), ("c-500m", "500m", "2026-11-01T18:00:00Z"),
                 ("c-1cpu-mid", "1", "2026-11-02T15:27:00Z")]}
EVERY = sorted(p for pods in FILL.values() for p, _, _ in pods)


def _run(start: int = 0, zones: bool = False, nominated: str | None = None):
    """(victims deleted, members' nominations, the PodGroup's condition message). ``nominated``:
    a node a pending 1-cpu pod of the group's priority is nominated to."""

    async def go():
        e = build_engine(FakeClient(), rng=random.Random(7))
        e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": PLUGINS}})
        for n in FILL:
            extra = {"topology.kubernetes.io/zone": n[:2]} if zones else {}
            e.on_node("ADDED", G.node(n, cpu="4", rack=n[:2], **extra))
        for n, pods in FILL.items():
            for name, cpu, t in pods:
                b = G.pod_body(name, cpu=cpu, node=n, priority=10)
                b["status"]["startTime"] = t
                e.on_pod("ADDED", b)
        e.policies["default"].chain.next_start_node_index = start
        if nominated:
            from policy_scheduler.framework.model.podinfo import parse_pod
            e.nominator.add(parse_pod(G.pod_body("other", cpu="1", priority=1000)), nominated)
        e.route(NATIVE_PODGROUPS)("ADDED", G.npg("g", 4, priority=1000))
        for i in range(5):
            e.on_pod("ADDED", G.pod_body(f"g-{i}", "g", cpu="2", priority=1000))
        qpi = e.queue.pop()
        e.schedule(qpi)
        for _ in range(20):
            await asyncio.sleep(0)
        noms = {c.path.split("/")[-2]: c.body["status"]["nominatedNodeName"]
                for c in e.client.calls_of("strategic_patch")
                if (c.body.get("status") or {}).get("nominatedNodeName")}
        out = G.deletes(e), noms, G.cond_message(e)
        await e.stop()
        return out

    return asyncio.run(go())


@pytest.mark.parametrize("start, single, spared", [
    # the scan from r0n0: r0n0, r0n1, r1n0, r0n0, r0n1 -> r1n0 holds one member and keeps its
    # earliest pods while they fit in 2 cpu: 1 cpu (11-01 15:13), 500m (11-01 18:00), then 500m
    # (11-04 04:40) after the 1-cpu ones that no longer fit
    (0, "r1n0", {"c-1cpu-early", "c-500m", "c-500m-late"}),
    # from r0n1: r0n0 is the one; a-500m (11-01 12:00), then a-1cpu (11-03 16:58)
    (1, "r0n0", {"a-500m", "a-1cpu"}),
    # from r1n0: r0n1 is the one; b-1cpu (11-01 06:42), the most important victim of all: 9 evicted
    (2, "r0n1", {"b-1cpu"}),
])
def test_the_victims_are_upstreams_for_each_node_order(start, single, spared):
    victims, noms, msg = _run(start)
    assert victims == sorted(set(EVERY) - spared)
    assert sorted(noms.values()).count(single) == 1 and len(noms) == 5
    assert msg.endswith(f"pod group preemption: found a placement for podgroup, preempting {len(victims)} victims")
    assert msg.startswith("pod group is unschedulable, 0/1 placements are available, first placement status: "
                          "minCount (4) cannot be satisfied: 0 scheduled, 3 remaining, ")


def test_the_reprieve_counts_the_nominated_pods_as_upstreams_filter_does():
    # a pod of the group's priority nominated to r1n0 (1 cpu): the member there and it leave
    # 1 cpu, so only the most important victim of r1n0 that fits stays
    victims, noms, _ = _run(0, nominated="r1n0")
    assert sorted(noms.values()).count("r1n0") == 1
    assert victims == sorted(set(EVERY) - {"c-1cpu-early"})


def test_racks_as_zones_put_r0n1_last_as_upstreams_node_tree_does():
    # zones r0 and r1: upstream lists r0n0, r1n0, r0n1 (round-robin over the zones)
    victims, noms, _ = _run(0, zones=True)
    assert victims == sorted(set(EVERY) - {"b-1cpu"})
    assert sorted(noms.values()).count("r0n1") == 1


# ------------------------------------------------------------------ PodGroupPostFilter's parts

def _group_message(plugins, topology=None, members=3, min_count=3, cpu="5", priority=1000, deleting=0):
    """A group that does not fit (members of ``cpu`` on 4-cpu nodes): its condition message."""

    async def go():
        e = build_engine(FakeClient(), rng=random.Random(7))
        e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": plugins}})
        for n in ("r0n0", "r0n1"):
            e.on_node("ADDED", G.node(n, cpu="4", rack="r0"))
        e.on_pod("ADDED", G.pod_body("low", cpu="1", node="r0n0", priority=10))
        e.route(NATIVE_PODGROUPS)("ADDED", G.npg("g", min_count, topology=topology, priority=priority))
        for i in range(members):
            b = G.pod_body(f"g-{i}", "g", cpu=cpu, priority=priority)
            if i < deleting:
                b["metadata"]["deletionTimestamp"] = "2026-11-01T00:00:00Z"
            e.on_pod("ADDED", b)
        e.schedule(e.queue.pop())
        for _ in range(10):
            await asyncio.sleep(0)
        out = G.cond_message(e), G.deletes(e)
        await e.stop()
        return out

    return asyncio.run(go())


def test_dynamic_resources_adds_its_part_before_preemptions():
    msg, deleted = _group_message(PLUGINS)
    assert msg == ("pod group is unschedulable, 0/1 placements are available, first placement status: minCount (3) "
                   "cannot be satisfied: 0 scheduled, 2 remaining, deallocation and deletion of ResourceClaims "
                   "completed, pod group preemption: pod group is unschedulable, 0/1 placements are available, "
                   "first placement status: minCount (3) cannot be satisfied: 0 scheduled, 2 remaining")
    assert deleted == []
    without = [p for p in PLUGINS if p["name"] != "DynamicResources"]
    msg, _ = _group_message(without)
    assert "deallocation" not in msg and ", pod group preemption: pod group is unschedulable" in msg


def test_dynamic_resources_has_no_part_for_a_group_with_topology():
    msg, _ = _group_message(PLUGINS, topology="rack")
    assert "deallocation" not in msg


def test_a_preemption_that_succeeds_drops_the_dynamic_resources_part():
    msg, deleted = _group_message(PLUGINS, members=2, min_count=2, cpu="3500m")
    assert deleted == ["low"]
    assert msg.endswith("minCount (2) cannot be satisfied: 1 scheduled, 0 remaining, "
                        "pod group preemption: found a placement for podgroup, preempting 1 victims")


def test_no_member_evaluated_is_dynamic_resources_not_found_error():
    # a member being deleted counts for PreEnqueue but is not scheduled: PlacementFeasible fails
    # before any member's PreFilter ran, and upstream's DynamicResources finds no state in the
    # group's cycle state
    msg, _ = _group_message(PLUGINS, members=3, min_count=3, cpu="1", deleting=1)
    assert msg == 'error in "DynamicResources" PodGroupPostFilter plugins: not found'


# ------------------------------------------------------------------ the condition's write

def test_the_condition_is_written_as_the_cycle_sets_it_not_at_the_writers_next_round():
    async def go():
        e = build_engine(FakeClient(), rng=random.Random(7))
        e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": PLUGINS}})
        e.on_node("ADDED", G.node("n0", cpu="4"))
        writer = e.native_pod_group_status
        writer.interval = 3600  # only a kick can make it write within the test
        task = asyncio.create_task(writer.run())
        await asyncio.sleep(0)
        e.route(NATIVE_PODGROUPS)("ADDED", G.npg("g", 2))
        for i in range(2):
            e.on_pod("ADDED", G.pod_body(f"g-{i}", "g", cpu="1"))
        e.schedule(e.queue.pop())
        for _ in range(10):
            await asyncio.sleep(0)
        patches = [c.body["status"]["conditions"] for c in e.client.calls_of("merge_patch")
                   if c.path.endswith("/podgroups/g/status")]
        task.cancel()
        await e.stop()
        return patches

    patches = asyncio.run(go())
    assert [(c["type"], c["status"], c["reason"]) for c in patches[0]] == \
        [("PodGroupInitiallyScheduled", "True", "Scheduled")]


def test_every_policy_shares_one_round_robin_start_as_upstreams_profiles_do():
    # upstream's sched.nextStartNodeIndex is one per scheduler: a pod of another profile moves the
    # start the group's ties then follow
    async def go():
        e = build_engine(FakeClient(), rng=random.Random(7))
        for name in ("default", "other"):
            e.on_policy("ADDED", {"metadata": {"name": name, "generation": 1}, "spec": {"plugins": PLUGINS}})
        a, b = e.policies["default"].chain, e.policies["other"].chain
        a.next_start_node_index = 2
        seen = b.next_start_node_index
        e.on_policy("MODIFIED", {"metadata": {"name": "other", "generation": 2}, "spec": {"plugins": PLUGINS}})
        after = e.policies["other"].chain.next_start_node_index
        await e.stop()
        return seen, after

    assert asyncio.run(go()) == (2, 2)
