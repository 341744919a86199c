"""simulate with PodGroups (scheduling.k8s.io, GangScheduling), the queue-driven loop (pods tried
again on the events that may help them) and preemption carried out in the simulated world."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from policy_scheduler.whatif import report
from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.snapshot import API_VERSION, from_dict
from policy_scheduler.whatif.world import World

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
GANG = yaml.safe_load((ROOT / "policies" / "gang.yaml").read_text())
TAKEN = "2025-01-01T12:00:00Z"


def node(name, cpu="4", memory="16Gi", **labels):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}


def pod(name, cpu="1", memory="1Gi", group=None, namespace="default", priority=None, node_name=None, **spec):
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c", "image": "app:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **spec}}
    if group:
        body["spec"]["schedulingGroup"] = {"podGroupName": group}
    if priority is not None:
        body["spec"]["priority"] = priority
    if node_name:
        body["spec"]["nodeName"] = node_name
        body["status"] = {"phase": "Running", "startTime": "2025-01-01T11:00:00Z"}
    return body


def group(name, min_count, topology=None, namespace="default"):
    spec = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": f"pg-{name}"}, "spec": spec}


def snap(nodes, pods=(), groups=None, policies=(DEFAULT, GANG), **extra):
    doc = {"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": TAKEN, "nodes": list(nodes),
           "pods": list(pods), "policies": list(policies), "namespaces": {"default": {}}, **extra}
    if groups is not None:
        doc["podGroups"] = list(groups)
    return from_dict(doc)


def members(g, n, cpu="1500m", **kw):
    return [pod(f"{g}-{i}", cpu, group=g, **kw) for i in range(n)]


def interleaved(*gs):
    return [p for ps in zip(*gs) for p in ps]


# ---------------------------------------------------------------------------------------- snapshots
def test_an_old_snapshot_without_groups_loads_and_groups_round_trip():
    s = snap([node("n0")])
    assert s.pod_groups == [] and s.composite_pod_groups == [] and s.warnings == []
    s = snap([node("n0")], groups=[group("a", 2)],
             compositePodGroups=[{"metadata": {"name": "c", "namespace": "default"}, "spec": {}}])
    again = from_dict(json.loads(s.dumps()))
    assert again.pod_groups == s.pod_groups and [c["metadata"]["name"] for c in again.composite_pod_groups] == ["c"]


def test_a_malformed_pod_group_is_reported_on_itself_and_skipped():
    bad = [group("g1", 2), "nope", {"metadata": {}}, {"metadata": {"name": "x"}, "spec": []},
           {"metadata": {"name": "y"}, "spec": {"schedulingPolicy": {"gang": {"minCount": "two"}}}},
           {"metadata": {"name": "z"}, "spec": {"schedulingConstraints": {"topology": "rack"}}},
           {"metadata": {"name": "w", "generation": "x"}, "spec": {}}]
    s = snap([node("n0"), node("n1")], groups=bad)
    assert [g["metadata"]["name"] for g in s.pod_groups] == ["g1"]
    assert len(s.warnings) == 6, s.warnings
    assert any(w.startswith("podGroups[4] (default/y): cannot be read as a PodGroup") for w in s.warnings)
    # the members of a skipped group wait for it, as the operator's; nothing crashes
    sim = simulate(World(s), ["gang"], members("g1", 2) + members("y", 2))
    run = sim.runs[0]
    placed = {r.pod: r.node for r in run.results}
    assert placed["default/g1-0"] and placed["default/g1-1"]
    assert placed["default/y-0"] is None
    assert 'waiting for pods\'s pod group "y" to appear in scheduling queue' in run.results[2].message
    assert run.warnings == s.warnings
    assert json.loads(json.dumps(sim.to_dict()))["policies"]["gang"]["warnings"] == s.warnings
    # a group list that is not a list at all
    assert snap([node("n0")], groups=None, podGroups={"a": 1}).warnings[0].startswith("podGroups: must be a list")


def test_the_world_cache_sees_the_groups_and_members_as_the_operators():
    s = snap([node("n0"), node("n1")], pods=[pod("a-0", group="a", node_name="n0")], groups=[group("a", 3)])
    w = World(s)
    cache = w.state.native_pod_groups
    assert set(cache.groups) == {"default/a"} and cache.groups["default/a"].min_member == 3
    assert cache.counts("default/a").bound == 1
    w.fresh_groups([pod("a-1", group="a"), pod("a-2", group="a")])
    c = cache.counts("default/a")
    assert (c.pods, c.bound) == (3, 1)
    assert w.store.policies["gang"].chain is not None


# ---------------------------------------------------------------------------------------- gangs
def test_two_gangs_that_cannot_both_fit_one_is_placed_whole_the_other_not_at_all():
    """As e2e test_gang_native: six 4-cpu nodes, two gangs of eight 1.5-cpu pods, interleaved."""
    s = snap([node(f"n{i}") for i in range(6)], groups=[group("a", 8), group("b", 8)])
    sim = simulate(World(s), ["gang"], interleaved(members("a", 8), members("b", 8)))
    run = sim.runs[0]
    by = {g["podGroup"]: g for g in run.groups}
    wholes = [k for k, g in by.items() if g["whole"]]
    assert len(wholes) == 1, run.groups
    loser = by[({"default/a", "default/b"} - set(wholes)).pop()]
    assert loser["placed"] == 0 and not loser["scheduled"], loser
    # the PodGroupInitiallyScheduled condition the operator would write, from the pod-group cycle
    assert (loser["condition"]["status"], loser["condition"]["reason"]) == ("False", "Unschedulable")
    assert loser["message"] == loser["condition"]["message"]
    assert loser["message"].startswith("pod group is unschedulable, 0/1 placements are available"), loser
    assert by[wholes[0]]["scheduled"] and by[wholes[0]]["condition"]["status"] == "True"
    # one pod-group cycle per group (each group's members are taken out of the queue together)
    assert run.cycles == 2
    # no member of the loser holds room: 16 cpu used of 24
    assert sum(r.node is not None for r in run.results) == 8
    assert run.summary()["podGroups"] == {"total": 2, "whole": 1}


def test_a_gang_with_fewer_pods_than_min_count_waits_at_pre_enqueue():
    s = snap([node("n0")], groups=[group("g", 3)])
    run = simulate(World(s), ["gang"], members("g", 2, cpu="100m")).runs[0]
    assert all(r.node is None for r in run.results)
    assert run.results[0].message == "waiting for minCount pods from a gang to appear in scheduling queue"
    assert run.groups[0]["whole"] is False and run.groups[0]["message"] == run.results[0].message


def test_a_rack_group_lands_whole_in_the_tightest_rack_and_one_no_rack_holds_says_why():
    nodes = [node(f"r0-n{i}", cpu="8", rack="r0") for i in range(4)] + \
            [node(f"r1-n{i}", cpu="16", rack="r1") for i in range(4)]
    s = snap(nodes, groups=[group("t", 8, "rack"), group("w", 17, "rack")])
    run = simulate(World(s), ["gang"], members("t", 8, cpu="4") + members("w", 17, cpu="4")).runs[0]
    by = {g["podGroup"]: g for g in run.groups}
    # the placement score (PodGroupPodsCount + NodeResourcesFit's MostAllocated): r0 ends fuller
    assert by["default/t"]["whole"] and by["default/t"]["domains"] == ["r0"]
    assert all(r.node.startswith("r0-") for r in run.results[:8])
    assert by["default/w"]["placed"] == 0
    assert by["default/w"]["message"].startswith("pod group is unschedulable, 0/2 placements are available"), \
        by["default/w"]


def test_same_seed_same_output_with_groups():
    s = snap([node(f"n{i}") for i in range(6)], groups=[group("a", 4), group("b", 8)])
    pods = interleaved(members("a", 8), members("b", 8))
    one = simulate(World(s), ["gang"], pods, seed=3).to_dict()
    two = simulate(World(s), ["gang"], pods, seed=3).to_dict()
    for d in (one, two):
        d["policies"]["gang"].pop("seconds")
    assert one == two


# ---------------------------------------------------------------------------------------- the loop
def test_preemption_is_carried_out_and_the_preemptor_placed():
    low = [pod(f"low-{i}", cpu="2", priority=0, node_name="n0") for i in range(2)]
    s = snap([node("n0")], pods=low)
    run = simulate(World(s), ["default"], [pod("high", cpu="3", priority=1000)]).runs[0]
    r = run.results[0]
    assert r.node == "n0", r
    assert r.attempts == 2 and len(r.preempted) >= 1
    assert run.preemptions and run.preemptions[0]["node"] == "n0"
    assert run.to_dict()["placements"][0]["preempted"] == r.preempted
    assert run.summary()["preempted"] == len(r.preempted)


def test_a_pod_of_this_run_can_be_preempted_by_a_later_higher_priority_one():
    s = snap([node("n0", cpu="2")])
    pods = [pod("low", cpu="2", priority=0), pod("high", cpu="2", priority=1000)]
    run = simulate(World(s), ["default"], pods).runs[0]
    by = {r.pod: r for r in run.results}
    # PrioritySort pops high first: it fits; low then cannot preempt it (lower priority)
    assert by["default/high"].node == "n0" and by["default/low"].node is None
    assert by["default/low"].preempted == []


def test_a_pod_freed_by_a_victim_is_retried():
    """A pod that does not fit is tried again once a preemption elsewhere frees room."""
    low = [pod("low", cpu="3", priority=0, node_name="n0")]
    s = snap([node("n0")], pods=low)
    # mid comes first (higher priority) but may not preempt: it waits; high preempts low, and the
    # victim's deletion moves mid back to the queue
    pods = [pod("mid", cpu="2", priority=2000, preemptionPolicy="Never"), pod("high", cpu="2", priority=1000)]
    run = simulate(World(s), ["default"], pods).runs[0]
    by = {r.pod: r for r in run.results}
    assert by["default/high"].node == "n0" and by["default/high"].preempted == ["default/low"]
    assert by["default/mid"].node == "n0" and by["default/mid"].attempts >= 2


# ---------------------------------------------------------------------------------------- taking
class GroupsClient:
    """The API of a 1.37 control plane with the gang gates: discovery, PodGroups, CompositePodGroups."""

    def __init__(self, versions, objects, missing=()):
        self.versions, self.objects, self.missing, self.paths = versions, objects, set(missing), []

    async def get(self, path):
        self.paths.append(path)
        if path == "/apis/scheduling.k8s.io":
            if not self.versions:
                raise type("ApiError", (Exception,), {"status": 404})()
            return {"kind": "APIGroup", "versions": [{"version": v} for v in self.versions]}
        if path in self.missing:
            raise type("ApiError", (Exception,), {"status": 404})()
        return {"items": self.objects.get(path, [])}


def _take(client):
    import asyncio

    from policy_scheduler.whatif import snapshot as snapmod

    return asyncio.run(snapmod.take(client, scheduler_name="policy-scheduler", default_policy="default"))


def test_take_reads_pod_groups_in_the_served_version_and_composites_when_served():
    pg = {**group("a", 2), "metadata": {"name": "a", "namespace": "ns", "uid": "u", "managedFields": [{}],
                                        "resourceVersion": "9"}, "status": {"conditions": []}}
    cpg = {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
           "metadata": {"name": "c", "namespace": "ns"}, "spec": {"minGroupCount": 2}}
    client = GroupsClient(["v1alpha3", "v1beta1"], {"/apis/scheduling.k8s.io/v1beta1/podgroups": [pg],
                                                    "/apis/scheduling.k8s.io/v1alpha3/compositepodgroups": [cpg]})
    s = _take(client)
    assert s.pod_groups_version == "v1beta1"
    assert s.pod_groups == [{"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                             "metadata": {"name": "a", "namespace": "ns", "uid": "u"}, "spec": pg["spec"],
                             "status": {"conditions": []}}]
    assert [c["metadata"]["name"] for c in s.composite_pod_groups] == ["c"]
    doc = json.loads(s.dumps())
    assert doc["podGroups"] == s.pod_groups and doc["podGroupsVersion"] == "v1beta1"
    # an older server: v1alpha2 only, no composites
    client = GroupsClient(["v1alpha2"], {"/apis/scheduling.k8s.io/v1alpha2/podgroups": [pg]})
    s = _take(client)
    assert s.pod_groups_version == "v1alpha2" and len(s.pod_groups) == 1 and s.composite_pod_groups == []
    assert "/apis/scheduling.k8s.io/v1alpha3/compositepodgroups" not in client.paths


def test_take_without_pod_groups_served_or_listable():
    s = _take(GroupsClient([], {}))
    assert (s.pod_groups, s.composite_pod_groups, s.pod_groups_version) == ([], [], "")
    s = _take(GroupsClient(["v1beta1", "v1alpha3"], {}, missing={"/apis/scheduling.k8s.io/v1beta1/podgroups",
                                                                 "/apis/scheduling.k8s.io/v1alpha3/compositepodgroups"}))
    assert s.pod_groups == [] and s.composite_pod_groups == []


def test_a_group_preemption_is_carried_out_and_the_group_placed_whole():
    """Two 4-cpu nodes full of low-priority pods; a gang of two 3-cpu pods of priority 1000: the
    group's PodGroupPostFilter preempts, the victims go, the members are activated and the group is
    placed whole on its second cycle."""
    low = [pod(f"low-{i}", cpu="3", priority=0, node_name=f"n{i}") for i in range(2)]
    g = group("hi", 2)
    g["spec"]["priority"] = 1000
    s = snap([node("n0"), node("n1")], pods=low, groups=[g])
    run = simulate(World(s), ["gang"], members("hi", 2, cpu="3", priority=1000)).runs[0]
    assert [r.node for r in run.results] == ["n0", "n1"] or sorted(r.node for r in run.results) == ["n0", "n1"]
    assert run.preemptions and run.preemptions[0]["preemptor"] == "PodGroup default/hi"
    assert sorted(run.preemptions[0]["victims"]) == ["default/low-0", "default/low-1"]
    assert run.groups[0]["whole"] and run.groups[0]["condition"]["status"] == "True"
    assert sorted(v for r in run.results for v in r.preempted) == ["default/low-0", "default/low-1"]
    assert run.cycles == 2


# ---------------------------------------------------------------------------------------- hostile input, report
def test_hostile_groups_and_members_never_stop_a_simulation():
    deep: dict = {"a": None}
    cur = deep
    for _ in range(3000):
        cur["a"] = {"a": None}
        cur = cur["a"]
    groups = [group("g", 1), {"metadata": {"name": "s"}, "spec": {}, "status": []},
              {"metadata": {"name": "d"}, "spec": {"schedulingPolicy": deep}},
              {"metadata": {"name": "n", "namespace": 5}, "spec": {}},
              {"metadata": {"name": "big"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 10 ** 30}}}},
              {"metadata": {"name": "t"}, "spec": {"schedulingConstraints": {"topology": [{"key": ["x"]}]}}}]
    pods = [pod(f"h{i}") for i in range(3)] + members("big", 2) + members("t", 1)
    pods[0]["spec"]["schedulingGroup"] = "g"
    pods[1]["spec"]["schedulingGroup"] = {"podGroupName": 5}
    pods[2]["spec"]["schedulingGroup"] = {"podGroupName": ["x"]}
    s = snap([node("n0")], groups=groups, compositePodGroups=[1, {"metadata": {"name": "c"}, "spec": "x"}])
    assert len(s.warnings) == 3, s.warnings
    for policy in ("gang", "default"):
        run = simulate(World(s), [policy], pods).runs[0]
        assert len(run.results) == len(pods)
        by = {r.pod: r for r in run.results}
        assert by["default/big-0"].node is None and "minCount" in by["default/big-0"].message


def test_the_report_shows_each_group_placed_whole_or_not_and_why():
    import io

    s = snap([node(f"n{i}") for i in range(6)], groups=[group("a", 8), group("b", 8), "bad"])
    sim = simulate(World(s), ["gang"], interleaved(members("a", 8), members("b", 8)))
    out = io.StringIO()
    report.write_text(sim, out)
    text = out.getvalue()
    assert "warning: snapshot: podGroups[2]: must be an object, not str; skipped" in text
    assert "gang: PodGroups: 1 of 2 placed whole" in text
    assert "placed whole (8/8 placed, minCount 8)" in text and "not placed (0/8 placed, minCount 8)" in text
    why = next(g for g in sim.runs[0].groups if not g["whole"])["message"]
    assert f"    {why}\n" in text
    html = report.html_report(sim)
    assert "PodGroups, 1 of 2 placed whole" in html and "placed whole (8/8 placed, minCount 8)" in html
    assert "Objects of the snapshot skipped" in html
    doc = json.loads(json.dumps(sim.to_dict()))["policies"]["gang"]
    assert doc["podGroups"] == sim.runs[0].groups
    assert sorted(g["whole"] for g in doc["podGroups"]) == [False, True]
    assert doc["cycles"] == 2 and doc["warnings"] == sim.runs[0].warnings
