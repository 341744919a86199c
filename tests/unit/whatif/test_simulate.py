"""whatif/world.py and simulate.py: the operator's core on a snapshot; pods.py: the manifests;
and the `simulate` command's outputs and refusals."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

from policy_scheduler import cli
from policy_scheduler.cluster.admission import Admission
from policy_scheduler.whatif.pods import PodsError, pods_from_documents
from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.world import PolicyError, World
from support.whatif import BINPACK, DEFAULT, ROOT, node, pod, snap

TAKEN_AT = 1735732800.0


def six_nodes():
    return [node(f"n{i}", zone="abc"[i % 3]) for i in range(6)]


def burst(n, cpu="500m", memory="1Gi"):
    return [pod(f"p{i}", cpu, memory) for i in range(n)]


def test_binpack_uses_fewer_nodes_than_default():
    sim = simulate(World(snap(six_nodes())), ["default", "binpack"], burst(12))
    by = {r.policy: r.summary() for r in sim.runs}
    assert by["default"]["placed"] == by["binpack"]["placed"] == 12
    assert by["default"]["nodesUsed"] == 6  # LeastAllocated + balance: every node gets pods
    assert by["binpack"]["nodesUsed"] < by["default"]["nodesUsed"]
    # 12 pods of 500m on 4-cpu nodes: binpack fills 8 per node -> 2 nodes
    assert by["binpack"]["nodesUsed"] == 2
    assert by["binpack"]["imbalance"] > by["default"]["imbalance"]
    # six free 4-cpu/16Gi nodes hold 8 pods of 500m each: 48 before, 36 after, whichever policy
    assert by["default"]["fragmentation"] == by["binpack"]["fragmentation"] == {
        "shape": {"cpu": "500m", "memory": "1Gi"}, "fits": 36, "fitsBefore": 48}
    assert by["default"]["zoneSpread"] == {"perZone": {"a": 4, "b": 4, "c": 4}, "skew": 0}


def test_each_placement_is_assumed_so_the_next_pod_sees_it():
    # two nodes with room for exactly one 3-cpu pod each: the second pod cannot go where the first went
    sim = simulate(World(snap([node("a"), node("b")])), ["binpack"], [pod("x", "3"), pod("y", "3"), pod("z", "3")])
    run = sim.runs[0]
    nodes = [r.node for r in run.results]
    assert sorted(nodes[:2]) == ["a", "b"] and nodes[2] is None
    # upstream's FailedScheduling message for the third
    assert run.results[2].message == "0/2 nodes are available: 2 Insufficient cpu."
    assert run.summary()["unschedulable"] == 1


def test_bound_pods_of_the_snapshot_count_and_nothing_is_changed_in_it():
    s = snap([node("a"), node("b")], pods=[{"metadata": {"name": "old", "namespace": "default"},
                                            "spec": {"nodeName": "a", "containers": [
                                                {"name": "c", "resources": {"requests": {"cpu": "3500m"}}}]}}])
    before = json.dumps(s.to_dict(), sort_keys=True)
    world = World(s)
    run = simulate(world, ["default"], [pod("x", "1")]).runs[0]
    assert run.results[0].node == "b"
    assert json.dumps(s.to_dict(), sort_keys=True) == before
    # a second simulation on the same world starts from the snapshot again
    assert simulate(world, ["binpack"], [pod("x", "1")]).runs[0].results[0].node == "b"


def test_the_same_input_gives_the_same_output_and_node_ties_do_not_depend_on_the_seed():
    nodes = [node(f"n{i}") for i in range(20)]  # identical empty nodes: every first choice is a tie
    out = {seed: [simulate(World(snap(nodes)), ["default"], burst(10), seed=seed).runs[0].to_dict()["placements"]
                  for _ in range(2)] for seed in (0, 1)}
    assert out[0][0] == out[0][1] and out[1][0] == out[1][1]
    assert out[0][0] == out[1][0]  # as kube-scheduler v1.37.1: the heap over the node order, no draw
    assert out[0][0][0]["uniqueBest"] is False and out[0][0][0]["node"] == "n0"


def test_pods_go_in_queue_sort_order():
    sim = simulate(World(snap([node("a", cpu="1")])), ["default"],
                   [pod("low", "1"), pod("high", "1", priority=100)])
    r = {p.pod: p.node for p in sim.runs[0].results}
    assert r == {"default/low": None, "default/high": "a"}
    # results keep the input order
    assert [p.pod for p in sim.runs[0].results] == ["default/low", "default/high"]


def test_a_policy_file_gets_the_webhooks_error():
    world = World(snap(six_nodes()))
    bad = {"apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "p"},
           "spec": {"plugins": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Bogus"}}},
                                {"name": "Nope", "weight": 2}]}}
    with pytest.raises(PolicyError) as e:
        world.add_policy(bad, "p.yaml")
    webhook = Admission(world.store)
    expected = webhook.validate_policy({"uid": "u", "object": bad})["response"]["status"]["message"]
    assert str(e.value) == f"p.yaml: {expected}"
    assert "spec.plugins[0].args.scoringStrategy.type: Unsupported value: \"Bogus\"" in str(e.value)
    assert "spec.plugins[1].name: unknown plugin 'Nope'" in str(e.value)
    with pytest.raises(PolicyError, match="kind 'ConfigMap' is not a SchedulingPolicy"):
        world.add_policy({"kind": "ConfigMap", "metadata": {"name": "x"}}, "c.yaml")
    with pytest.raises(PolicyError, match=r"no SchedulingPolicy named 'spread' in the snapshot \(it has: binpack, default\)"):
        world.usable_policy("spread")


def test_a_policy_file_replaces_the_snapshots_policy_of_that_name():
    world = World(snap(six_nodes()))
    edited = json.loads(json.dumps(DEFAULT))
    edited["spec"]["plugins"] = BINPACK["spec"]["plugins"]
    assert world.add_policy(edited, "default.yaml") == "default"
    run = simulate(world, ["default"], burst(12)).runs[0]
    assert run.summary()["nodesUsed"] == 2


def test_a_policy_that_does_not_admit_the_namespace_places_nothing():
    strict = json.loads(json.dumps(BINPACK))
    strict["metadata"]["name"] = "strict"
    strict["spec"]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    world = World(snap(six_nodes(), policies=[strict]))
    r = simulate(world, ["strict"], [pod("x")]).runs[0].results[0]
    assert r.node is None and r.message == "SchedulingPolicy 'strict' does not admit pods of namespace 'default'"


def test_metric_values_are_as_fresh_as_when_the_snapshot_was_taken():
    gpu = {"apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "gpu"},
           "spec": {"plugins": [{"name": "NodeResourcesFit"}, {"name": "MetricThreshold", "args": {"metrics": [
               {"name": "util", "query": "util", "nodeLabel": "instance", "rejectAbove": 0.9,
                "onMissingMetrics": "Exclude"}]}}]}}
    metrics = [{"query": "util", "nodeLabel": "instance", "samples": {
        "hot": {"value": 0.95, "time": TAKEN_AT - 10}, "cool": {"value": 0.2, "time": TAKEN_AT - 10},
        "old": {"value": 0.1, "time": TAKEN_AT - 3600}}}]
    s = snap([node("hot"), node("cool"), node("old"), node("none")], policies=[gpu], metrics=metrics)
    run = simulate(World(s), ["gpu"], [pod("a"), pod("b")]).runs[0]
    # taken years ago, the values are still judged at the snapshot's time: only "cool" is fresh and below
    assert [r.node for r in run.results] == ["cool", "cool"]
    s = snap([node("hot")], policies=[gpu], metrics=metrics)
    r = simulate(World(s), ["gpu"], [pod("a")]).runs[0].results[0]
    assert r.node is None and r.message.startswith("0/1 nodes are available: 1 ")


def test_template_pods_are_spread_by_default_constraints_like_the_real_ones():
    docs = [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
             "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "web"}},
                      "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod("x")["spec"]}}}]
    ps = pods_from_documents(docs, "d.yaml")
    assert [p["metadata"]["name"] for p in ps.pods] == [f"web-{i}" for i in range(6)]
    assert ps.pods[0]["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert ps.workloads == [("rs", {"metadata": {"name": "web-whatif", "namespace": "default"},
                                    "spec": {"selector": {"matchLabels": {"app": "web"}}}})]
    packed_spread = {"apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy",
                     "metadata": {"name": "packed-spread"},
                     "spec": {"plugins": [{"name": "NodeResourcesFit", "weight": 1, "args": {"scoringStrategy": {
                         "type": "MostAllocated"}}}, {"name": "PodTopologySpread", "weight": 10}]}}
    world = World(snap(six_nodes(), policies=[packed_spread]))
    # without their controller, nothing selects them: MostAllocated stacks them on one node
    run = simulate(world, ["packed-spread"], ps.pods).runs[0]
    assert run.summary()["nodesReceivingPods"] == 1
    # with it, PodTopologySpread's system default constraints (hostname, zone) spread them
    world.add_workloads(ps.workloads)
    run = simulate(world, ["packed-spread"], ps.pods).runs[0]
    assert run.summary()["zoneSpread"]["skew"] == 0 and run.summary()["nodesReceivingPods"] > 1
    assert pods_from_documents(docs, "d.yaml", replicas=2).pods[-1]["metadata"]["name"] == "web-1"


@pytest.mark.parametrize("doc,needle", [
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
     "document 1 (ConfigMap c): kind 'ConfigMap' is not a Pod or a pod template"),
    ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}},
     "document 1 (Pod p): spec.containers: Required value"),
    ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}},
     "document 1 (Deployment d): spec.template: Required value"),
    ({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"}, "spec": {}},
     "a DaemonSet places one pod per node"),
    ({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"containers": [{"name": "c"}]}},
     "metadata.name: Required value"),
    ("just a string", "document 1: not a Kubernetes object"),
])
def test_a_manifest_that_is_not_a_pod_or_template_is_refused(doc, needle):
    with pytest.raises(PodsError) as e:
        pods_from_documents([doc], "pods.yaml")
    assert str(e.value).startswith("pods.yaml: ") and needle in str(e.value)


# ------------------------------------------------------------------------------------ the command

@pytest.fixture
def files(tmp_path):
    s = snap(six_nodes())
    (tmp_path / "snap.json").write_text(s.dumps())
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([pod("one"), pod("huge", cpu="64")]))
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(pod("one")))
    return tmp_path


def run_cli(capsys, *args):
    code = cli.main(["simulate", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_output_is_keyed_by_policy(files, capsys):
    code, out, err = run_cli(capsys, "--snapshot", str(files / "snap.json"), "--pods", str(files / "pods.yaml"),
                             "--policy", "default", "--policy", str(ROOT / "policies" / "binpack.yaml"), "--json")
    assert code == 0 and err == ""  # no progress bar when the output is not a terminal
    d = json.loads(out)
    assert set(d["policies"]) == {"default", "binpack"} and d["pods"] == 2
    for name, r in d["policies"].items():
        assert {"placed", "unschedulable", "nodesUsed", "imbalance", "zoneSpread", "fragmentation",
                "placements", "failures", "nodes"} <= set(r)
        assert r["placed"] == 1 and r["unschedulable"] == 1
        assert [p["pod"] for p in r["placements"]] == ["default/one", "default/huge"]
        assert r["placements"][1]["node"] is None
        assert r["failures"][0]["message"].startswith("0/6 nodes are available: 6 Insufficient cpu.")
        assert len(r["nodes"]) == 6 and set(r["nodes"][0]) >= {"name", "zone", "cpu", "memory"}


def test_text_output_and_report(files, capsys):
    code, out, err = run_cli(capsys, "--snapshot", str(files / "snap.json"), "--pods", str(files / "pods.yaml"),
                             "--policy", "default", "--policy", "binpack", "--report", str(files / "r.html"))
    assert code == 0, err
    assert out.splitlines()[2].split()[:4] == ["POLICY", "PLACED", "UNSCHEDULABLE", "NODES"]
    assert "default: 1 unschedulable" in out and "0/6 nodes are available: 6 Insufficient cpu." in out
    assert "default/huge" in out and "per-node allocation" in out
    page = (files / "r.html").read_text()
    assert page.count("<svg") >= 6 and "<script" not in page and "http" not in page.split("<body>")[1].replace(
        'xmlns="http://www.w3.org/2000/svg"', "")


def test_explain_prints_explains_table_for_a_pod_not_there_yet(files, capsys):
    code, out, err = run_cli(capsys, "--snapshot", str(files / "snap.json"), "--pods", str(files / "one.yaml"),
                             "--explain")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("pod default/one under policy default: node n")
    assert "  policy:    default" in lines and any(x.startswith("  node:      n") for x in lines)
    assert "  nodes:     6 in cluster, 6 evaluated, 6 feasible" in lines
    header = next(x for x in lines if x.startswith("    NODE"))
    assert "TOTAL" in header and "NodeResourcesFit" in header and "TaintToleration" in header


@pytest.mark.parametrize("make,needle", [
    (lambda d: ["--snapshot", str(d / "missing.json"), "--pods", str(d / "one.yaml")], "cannot read snapshot"),
    (lambda d: (d / "v3.json").write_text(json.dumps({"apiVersion": "policy-scheduler.io/snapshot/v3"})) and ["--snapshot", str(d / "v3.json"), "--pods", str(d / "one.yaml")], "is not supported"),
    (lambda d: (d / "cm.yaml").write_text("kind: ConfigMap\nmetadata: {name: c}\n") and ["--snapshot", str(d / "snap.json"), "--pods", str(d / "cm.yaml")], "is not a Pod or a pod template"),
    (lambda d: (d / "bad.yaml").write_text(yaml.safe_dump({"kind": "SchedulingPolicy", "metadata": {"name": "b"},
                                                           "spec": {"plugins": [{"name": "NodeName", "weight": 3}]}})) and ["--snapshot", str(d / "snap.json"), "--pods", str(d / "one.yaml"), "--policy", str(d / "bad.yaml")],
     'SchedulingPolicy "b" is invalid: spec.plugins[0].weight: plugin NodeName has no Score extension point'),
    (lambda d: ["--snapshot", str(d / "snap.json"), "--pods", str(d / "one.yaml"), "--policy", "nope"],
     "no SchedulingPolicy named 'nope'"),
    (lambda d: ["--snapshot", str(d / "snap.json")], "--pods FILE or --pending"),
])
def test_bad_input_is_refused_with_exit_status_2(files, capsys, make, needle):
    code, out, err = run_cli(capsys, *make(files))
    assert code == 2 and out == ""
    assert err.startswith("policy-scheduler simulate: ") and needle in err


def test_the_operator_run_with_the_same_seed_places_every_pod_where_the_simulation_did():
    """The operator and the simulation break node ties the same way (upstream's heap over the
    node order; the seed only draws pod-group placement ties): the same pods, queued in the same
    order on the same state, go to the same nodes, ties included."""
    import asyncio
    import random
    from policy_scheduler.serve import build_engine

    nodes = [node(f"n{i:02d}", zone="abc"[i % 3]) for i in range(12)]
    pods = [pod(f"p{i:02d}", ("250m", "500m", "1")[i % 3], schedulerName="policy-scheduler")
            for i in range(40)]
    for p in pods:
        p["metadata"]["uid"] = f"uid-{p['metadata']['name']}"
    sim = simulate(World(snap(nodes)), ["default"], pods, seed=5).runs[0]
    assert sum(not r.unique for r in sim.results) >= 10  # plenty of ties to draw

    async def operator(seed):
        e = build_engine(SimpleNamespace(), rng=random.Random(seed))  # no binding task gets to run
        e.on_policy("ADDED", {**DEFAULT, "metadata": {"name": "default", "generation": 1}})
        for n in nodes:
            e.on_node("ADDED", n)
        for p in pods:
            e.on_pod("ADDED", p)
        placed = {}
        while (qpi := e.queue.pop()) is not None:
            placed[qpi.pod.key] = e.schedule(qpi).node
        await e._tasks.cancel_all()
        return placed

    assert asyncio.run(operator(5)) == {r.pod: r.node for r in sim.results}
    # node ties are not drawn (upstream's heap order): another seed places them the same
    assert asyncio.run(operator(6)) == {r.pod: r.node for r in sim.results}


# ------------------------------------------------------------------------------ volumes

def local_pv(name, node_name, size="10Gi", cls="local", modes=("ReadWriteOnce",), claim=None):
    spec = {"storageClassName": cls, "capacity": {"storage": size}, "accessModes": list(modes),
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}]}]}},
            "local": {"path": f"/mnt/{name}"}}
    if claim is not None:
        spec["claimRef"] = {"namespace": "default", "name": claim, "uid": f"uid-{claim}"}
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "resourceVersion": "1"}, "spec": spec,
            "status": {"phase": "Bound" if claim else "Available"}}


def claim(name, size="5Gi", cls="local", modes=("ReadWriteOnce",), volume=None):
    meta = {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"}
    spec = {"storageClassName": cls, "accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if volume is not None:
        meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
        spec["volumeName"] = volume
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec,
            "status": {"phase": "Bound" if volume else "Pending"}}


def with_claim(body, claim_name):
    body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}},
                               {"name": "cfg", "configMap": {"name": "app"}}]
    return body


WAIT_FOR_FIRST_CONSUMER = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "local"},
                           "provisioner": "kubernetes.io/no-provisioner",
                           "volumeBindingMode": "WaitForFirstConsumer"}


def test_a_claim_of_a_wait_for_first_consumer_class_goes_where_its_local_pvs_are_and_each_pv_once():
    """Two static local PVs on n1 only: the pods with claims go to n1, each claim assumed on its
    own PV (VolumeBinding's Reserve in the simulation's VolumeCache), and a third claim finds no
    PV left. Each policy starts from the snapshot's volumes again."""
    nodes = [node(f"n{i}") for i in range(3)]
    again = {**DEFAULT, "metadata": {"name": "again"}}  # the volume plugins too (binpack.yaml has none)
    s = snap(nodes, policies=(DEFAULT, again), storageClasses=[WAIT_FOR_FIRST_CONSUMER],
             persistentVolumes=[local_pv("pv-a", "n1"), local_pv("pv-b", "n1")],
             persistentVolumeClaims=[claim("c1"), claim("c2"), claim("c3")])
    world = World(s)
    pods = [with_claim(pod("x"), "c1"), with_claim(pod("y"), "c2"), with_claim(pod("z"), "c3"), pod("plain")]
    sim = simulate(world, ["default", "again"], pods)
    for run in sim.runs:
        r = {p.pod: p for p in run.results}
        assert r["default/x"].node == "n1" and r["default/x"].unique and r["default/x"].feasible == 1
        assert r["default/y"].node == "n1"
        assert r["default/z"].node is None
        assert r["default/z"].message == ("0/3 nodes are available: 3 node(s) didn't find available persistent "
                                          "volumes to bind. preemption: 0/3 nodes are available: 3 Preemption is "
                                          "not helpful for scheduling.")
        assert r["default/plain"].node is not None
    # the last run's assumptions: each claim on its own PV; the snapshot itself is untouched
    bound = {world.volumes.pv(n).claim_ref.name for n in ("pv-a", "pv-b")}
    assert bound == {"c1", "c2"}
    assert all("claimRef" not in p["spec"] for p in s.volumes["persistentvolumes"])
    assert world.volumes.pvc("default", "c3").volume_name == ""


def test_a_bound_pods_claim_counts_as_in_the_operator():
    """A snapshot pod keeps the volumes the plugins read (trim_pod): its ReadWriteOncePod claim is
    in use, so a simulated pod with the same claim is refused by VolumeRestrictions."""
    from policy_scheduler.whatif.snapshot import trim_pod

    bound = with_claim(pod("owner", nodeName="n0"), "solo")
    bound["metadata"]["uid"] = "uid-owner"
    trimmed = trim_pod(bound)
    assert trimmed["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "solo"}}]
    s = snap([node("n0"), node("n1")], pods=[trimmed], storageClasses=[WAIT_FOR_FIRST_CONSUMER],
             persistentVolumes=[local_pv("pv-solo", "n0", modes=("ReadWriteOncePod",), claim="solo")],
             persistentVolumeClaims=[claim("solo", modes=("ReadWriteOncePod",), volume="pv-solo")])
    r = simulate(World(s), ["default"], [with_claim(pod("second"), "solo")]).runs[0].results[0]
    assert r.node is None
    assert "ReadWriteOncePod" in r.message, r.message


def _dra_objects(nodes, per_node=2):
    cls = {"metadata": {"name": "gpu.example.com"},
           "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}}
    slices = [{"metadata": {"name": f"{n}-gpus"}, "spec": {
        "driver": "gpu.example.com", "nodeName": n, "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": "a100"}}} for i in range(per_node)]}}
        for n in nodes]
    return cls, slices


def claim_obj(name, uid):
    return {"metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}


def test_dra_claims_are_allocated_in_the_simulation_and_device_use_is_reported():
    """A snapshot carries ResourceSlices, DeviceClasses and ResourceClaims: simulated pods get
    devices (each its own), the run reports device use, and each policy starts from the snapshot."""
    cls, slices = _dra_objects(["n0", "n1"])
    claims = [claim_obj(f"c{i}", f"u{i}") for i in range(5)]
    s = snap([node("n0"), node("n1")], resourceSlices=slices, deviceClasses=[cls], resourceClaims=claims)
    pods = [pod(f"p{i}", resourceClaims=[{"name": "gpu", "resourceClaimName": f"c{i}"}]) for i in range(5)]
    sim = simulate(World(s), ["default", "binpack"], pods)
    run = sim.runs[0]
    placed = [r for r in run.results if r.node]
    assert len(placed) == 4  # 4 devices
    devs = [r.devices[0]["device"] for r in placed]
    assert len(set(devs)) == 4 and all(d.split("/")[1] == r.node for d, r in zip(devs, placed))
    assert run.devices == {"total": 4, "allocatedBefore": 0, "allocated": 4, "nodesBefore": 0, "nodes": 2}
    assert "0/2 nodes are available: 2 cannot allocate all claims." in run.results[4].message
    # binpack has no DynamicResources: its pods with claims are refused, not bound without devices
    assert sim.runs[1].devices["allocated"] == 0 and not any(r.node for r in sim.runs[1].results)
    assert sim.runs[1].results[0].message == ("0/2 nodes are available: pod has resourceClaims, and its policy "
                                              "has no DynamicResources plugin to allocate their devices.")
    out = json.loads(json.dumps(run.summary()))
    assert out["devices"]["allocated"] == 4 and run.results[0].to_dict()["devices"] == [devs[0]]


def test_a_policy_with_a_rollout_candidate_is_shadowed_in_the_simulation():
    """run_policy hands the candidate's comparisons to the run (PolicyRun.shadow), not elsewhere."""
    spread = {"name": "NodeResourcesFit", "weight": 1, "args": {"scoringStrategy": {
        "type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}]}}}
    pol = {"apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "ro"},
           "spec": {"plugins": [{"name": "NodeResourcesFit", "weight": 1}],
                    "rollout": {"strategy": "Shadow", "candidate": {"plugins": [spread]}}}}
    sim = simulate(World(snap(six_nodes(), policies=(pol,))), ["ro"], burst(6))
    run = sim.runs[0]
    assert run.devices is None
    assert run.shadow is not None and run.shadow_summary()["compared"] == 6


def test_extended_resources_backed_by_a_device_class_are_simulated_and_their_claims_kept():
    """A pod asking for ``example.com/gpu`` that a DeviceClass backs gets devices in the
    simulation (its special claim, explain's device list), a node advertising the resource is
    left to its device plugin, and the claim the scheduler made for a bound pod keeps its
    annotation in the snapshot and holds its device."""
    from policy_scheduler.whatif.snapshot import trim_dra

    cls, slices = _dra_objects(["n0", "n1"], per_node=1)
    cls["spec"]["extendedResourceName"] = "example.com/gpu"
    held = claim_obj("old-extended-resources-abc", "u-old")
    held["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true", "other": "x"}
    held["status"] = {"allocation": {"devices": {"results": [
        {"request": "container-0-request-0", "driver": "gpu.example.com", "pool": "n0", "device": "gpu-0"}]}}}
    trimmed = trim_dra("resourceclaims", held)
    assert trimmed["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    s = snap([node("n0"), node("n1")], resourceSlices=slices, deviceClasses=[cls], resourceClaims=[trimmed])
    gpu_pod = pod("g")
    gpu_pod["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "1"
    pods = [gpu_pod, {**gpu_pod, "metadata": {**gpu_pod["metadata"], "name": "g2"}}]
    run = simulate(World(s), ["default"], pods).runs[0]
    first, second = run.results
    assert first.node == "n1"  # n0's only device is held by the bound pod's claim
    # request 1: example.com/gpu is the container's second request name (cpu, example.com/gpu, memory)
    assert first.devices == [{"claim": "<extended-resources>", "request": "container-0-request-1",
                              "device": "gpu.example.com/n1/gpu-0", "resources": ["example.com/gpu"]}]
    assert second.node is None
    assert "0/2 nodes are available: 2 cannot allocate all claims." in second.message
