"""Workload-aware preemption (framework/group_preemption.py) against kube-scheduler 1.37.1's
podgrouppreemption.go, types.go and util.go: the victims (NewPodVictim's rank for a pod with
spec.schedulingGroup), FilterVictimsWithPDBViolation as 1.37 has it (a pod charges the PDBs up to
the first one it violates), the reprieve order (MoreImportantVictim: priority, rank, size, the
earliest start; no start time counts as now), and the shortcut for victims far from the proposal
(the same victims as the full check), in the operator's engine with the in-memory client."""

from __future__ import annotations

import asyncio

from policy_scheduler.cluster.engine import Engine
from policy_scheduler.serve import build_engine
from policy_scheduler.cluster.sync import NATIVE_PODGROUPS
from policy_scheduler.framework import group_preemption as gp
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.preemption import PDB
from policy_scheduler.framework.model.labels import LabelSelector
from support.fakeclient import FakeClient

NS = "ns"
GANG = [{"name": "NodeResourcesFit"}, {"name": "DefaultPreemption"}, {"name": "GangScheduling"}]
WITH_AFFINITY = [{"name": "NodeResourcesFit"}, {"name": "InterPodAffinity"}, {"name": "DefaultPreemption"},
                 {"name": "GangScheduling"}]


def npg(name, min_count, priority, topology=None, mode=None):
    spec = {"schedulingPolicy": {"gang": {"minCount": min_count}}, "priority": priority}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    if mode:
        spec["disruptionMode"] = {mode: {}}
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-pg-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec}


def pod(name, cpu, node="", priority=10, group=None, start=None, labels=None, anti=None):
    spec = {"schedulerName": "policy-scheduler", "nodeName": node, "priority": priority,
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if anti:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": anti}, "topologyKey": "kubernetes.io/hostname"}]}}
    status = {"phase": "Running" if node else "Pending"}
    if start:
        status["startTime"] = start
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": dict(labels or {})},
            "spec": spec, "status": status}


def node(name, cpu="4", rack=None):
    alloc = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    labels = {"kubernetes.io/hostname": name, **({"rack": rack} if rack else {})}
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": alloc, "capacity": alloc}}


def engine(nodes, plugins=GANG) -> Engine:
    e = build_engine(FakeClient())
    e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": plugins}})
    for n in nodes:
        e.on_node("ADDED", n)
    return e


def deletes(e: Engine) -> list[str]:
    return sorted(c.path.split("/")[-1] for c in e.client.calls_of("delete"))


def cond_message(e: Engine, group: str = "ns/g") -> str:
    return e.state.native_pod_groups.status(group)["conditions"][0]["message"]


def preempt(build, members: int, cpu: str, priority=100, topology=None) -> list[str]:
    """The world ``build()`` makes (an engine), then the group g of ``members`` x ``cpu``: its
    cycle and preemption; the victims deleted."""
    async def go():
        e = build()
        e.route(NATIVE_PODGROUPS)("ADDED", npg("g", members, priority, topology))
        for i in range(members):
            e.on_pod("ADDED", pod(f"g-{i}", cpu, priority=priority, group="g"))
        e.schedule(e.queue.pop())
        for _ in range(20):
            await asyncio.sleep(0)
        out = deletes(e)
        await e.stop()
        return out
    return asyncio.run(go())


T = [f"2026-01-01T00:00:{s:02d}Z" for s in range(10)]


def test_the_earlier_started_victim_is_spared_first_and_no_start_time_counts_as_now():
    # one node of 4 cpu full of 1-cpu pods of one priority, started at different times; the group
    # needs 2 cpu: the two most important (earliest started: c, d) are spared, a pod not started
    # yet (b) is the least important
    def build():
        e = engine([node("n0")])
        for name, start in (("a", T[3]), ("b", None), ("c", T[1]), ("d", T[2])):
            e.on_pod("ADDED", pod(name, "1", "n0", start=start))
        return e

    assert preempt(build, 2, "1") == ["a", "b"]


def test_priority_before_start_time():
    def build():
        e = engine([node("n0")])
        e.on_pod("ADDED", pod("old-low", "1", "n0", priority=5, start=T[0]))
        e.on_pod("ADDED", pod("new-mid", "1", "n0", priority=20, start=T[9]))
        e.on_pod("ADDED", pod("x", "1", "n0", priority=20, start=T[5]))
        e.on_pod("ADDED", pod("y", "1", "n0", priority=20, start=T[6]))
        return e

    assert preempt(build, 1, "2") == ["new-mid", "old-low"]


def test_a_pod_in_a_pod_group_ranks_as_a_group_even_when_the_group_is_unknown():
    # upstream NewPodVictim: spec.schedulingGroup set -> PodGroupKeyType (rank 2) whether or not the
    # PodGroup exists (its priority is then the pod's own); a plain pod of the same priority is
    # less important, however early it started
    def build():
        e = engine([node("n0", cpu="2")])
        e.on_pod("ADDED", pod("plain", "1", "n0", start=T[0]))
        e.on_pod("ADDED", pod("member", "1", "n0", group="nowhere", start=T[5]))
        return e

    assert preempt(build, 1, "1") == ["plain"]


def test_a_disruption_all_group_is_one_victim_more_important_than_its_pods_alone():
    # the group (2 pods, rank 2) is tried before the single pods: spared when the room is made
    # by the single pods
    def build():
        e = engine([node("n0"), node("n1")])
        e.route(NATIVE_PODGROUPS)("ADDED", npg("low", 2, 10, mode="all"))
        e.on_pod("ADDED", pod("low-0", "2", "n0", group="low", start=T[5]))
        e.on_pod("ADDED", pod("low-1", "2", "n1", group="low", start=T[5]))
        e.on_pod("ADDED", pod("s0", "2", "n0", start=T[0]))
        e.on_pod("ADDED", pod("s1", "2", "n1", start=T[0]))
        return e

    assert preempt(build, 2, "2") == ["s0", "s1"]


def sel(**labels):
    return LabelSelector.parse({"matchLabels": labels})


def victims(*specs):
    return [gp.Victim([parse_pod(pod(n, "1", "n0", labels=lab))], 10, 1, f"ns/{n}") for n, lab in specs]


def test_pdb_violations_1_37_a_pod_charges_the_pdbs_up_to_the_first_it_violates():
    # x matches both PDBs; the first has no disruption left: x violates, and the second PDB is
    # not charged for it (1.37 returns at the first violated PDB), so y (second PDB only) may go
    vs = victims(("x", {"a": "1", "b": "1"}), ("y", {"b": "1"}))
    pdbs = [PDB(NS, sel(a="1"), 0), PDB(NS, sel(b="1"), 1)]
    violating, ok = gp.filter_victims_with_pdb_violation(vs, pdbs)
    assert [(v.key, n) for v, n in violating] == [("ns/x", 1)]
    assert [v.key for v in ok] == ["ns/y"]


def test_pdb_violations_of_a_group_victim_count_each_violating_pod():
    pods = [parse_pod(pod(n, "1", "n0", labels={"app": "x"})) for n in ("p", "q", "r")]
    group = gp.Victim(pods, 10, 2, "ns/low", group=True)
    lone = victims(("s", {"app": "x"}))[0]
    violating, ok = gp.filter_victims_with_pdb_violation([group, lone], [PDB(NS, sel(app="x"), 1)])
    assert [(v.key, n) for v, n in violating] == [("ns/low", 2), ("ns/s", 1)]  # p used the one allowed
    assert ok == []


def test_pdb_protected_victims_are_tried_first_and_spared_when_others_make_room():
    def build():
        e = engine([node("n0")])
        e.route("poddisruptionbudgets")("ADDED", {
            "metadata": {"name": "guard", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "guarded"}}}, "status": {"disruptionsAllowed": 0}})
        # the guarded pods are the least important (latest started): still spared first
        e.on_pod("ADDED", pod("free-0", "1", "n0", start=T[0]))
        e.on_pod("ADDED", pod("free-1", "1", "n0", start=T[1]))
        e.on_pod("ADDED", pod("guarded-0", "1", "n0", start=T[8], labels={"app": "guarded"}))
        e.on_pod("ADDED", pod("guarded-1", "1", "n0", start=T[9], labels={"app": "guarded"}))
        return e

    assert preempt(build, 2, "1") == ["free-0", "free-1"]


def world(plugins):
    """Rack a (two 4-cpu nodes, a high-priority pod on a0 makes the spread deterministic), rack b
    (two 2-cpu nodes: too small for the group); every node full of low pods."""
    e = engine([node("a0", rack="a"), node("a1", rack="a"), node("b0", cpu="2", rack="b"),
                node("b1", cpu="2", rack="b")], plugins)
    e.on_pod("ADDED", pod("keep", "1", "a0", priority=1000, start=T[0]))
    for k, (n, cpu) in enumerate((("a0", "1"), ("a0", "2"), ("a1", "1"), ("a1", "1"), ("a1", "2"),
                                  ("b0", "1"), ("b1", "2"))):
        e.on_pod("ADDED", pod(f"f{k:02d}", cpu, n, start=T[k]))
    return e


def test_victims_far_from_the_proposal_are_spared_without_a_check_same_victims(monkeypatch):
    # 3 x 2 cpu in rack a: two on a1 (f02-f04 go), one on a0 (f00, the earlier, is spared, f01
    # goes). Node-local filters only: rack b's victims are spared without a check; a chain with
    # InterPodAffinity and a victim with required anti-affinity: the full check for every victim.
    # The same victims either way.
    calls = []
    real = gp._fits

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(gp, "_fits", counting)
    fast = preempt(lambda: world(GANG), 3, "2", topology="rack")
    n_fast = len(calls)
    calls.clear()

    def build():
        e = world(WITH_AFFINITY)
        e.on_pod("ADDED", pod("far", "100m", "b0", start=T[9], anti={"app": "nobody"}))  # a victim too
        return e

    full = preempt(build, 3, "2", topology="rack")
    assert fast == full == ["f01", "f02", "f03", "f04"], (fast, full)
    assert (n_fast, len(calls)) == (5, 8)  # the 5 victims of rack a / all 8
