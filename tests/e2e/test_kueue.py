"""policy-scheduler as the pod scheduler under Kueue v0.17 (hack/kueue.py), on a control plane of its
own: etcd, kube-apiserver, kube-controller-manager (the Job controller makes the pods) and Kueue's
manager with its webhooks; Kueue's webhooks on Pods must not reach the session's cluster, which
the other tests share. No kubelet: the test finishes a bound pod itself (status Succeeded) after a
short run, so the Job completes and Kueue releases its quota.

- 50 one-pod Jobs in two LocalQueues (two namespaces) over one ClusterQueue with 6 CPUs of quota,
  every pod asking 1 CPU and `schedulerName: policy-scheduler` with the policy label: sampled every
  0.2 s, the CPUs of bound, unfinished pods never exceed 6; every bound pod's Job is admitted
  (its Workload Admitted, the Job unsuspended); Jobs not admitted have no pod bound; every Job
  completes, and the bindings' Scheduled events come from policy-scheduler.
- Kueue's topology-aware scheduling on racks: a Topology (rack, hostname), a flavor on it, Jobs of
  3 pods with `kueue.x-k8s.io/podset-required-topology` on the rack label. Kueue gates the pods
  (`kueue.x-k8s.io/topology`), assigns nodes and writes them as node selectors when it lifts the
  gate; our scheduler binds every pod on the node Kueue assigned, so each Job is in one rack.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter

import pytest
import yaml
from kubernetes import client, config

import localcluster
from conftest import ROOT, STATE, OperatorProcess, install_crd
from helpers import apply_policy, node, ready_condition, wait_for
from kueue import Kueue  # hack/ is on the tests' path, as for localcluster

KQ = ("kueue.x-k8s.io", "v1beta2")
SCHED, POLICY, LABEL = "policy-scheduler", "kueue-batch", "policy-scheduler.io/policy"
RACK = "cloud.provider.com/topology-rack"
QUOTA = 6
JOBS = 50
NAMESPACES = ("team-a", "team-b")
RUN_FOR = 1.0  # seconds a bound pod "runs" before the test marks it Succeeded


@pytest.fixture(scope="module")
def kq():
    state = STATE / "kueue-cluster"  # inside the session's state dir: reaped with it
    c = localcluster.LocalCluster(state, kubeconfig_path=state / "kubeconfig")
    c.up(controller_manager=True, quiet=True)
    k = op = None
    try:
        k = Kueue(c).up()
        api = config.new_client_from_config(str(c.kubeconfig_path))
        install_crd(api, ROOT / "crds" / "schedulingpolicies.yaml")
        core = client.CoreV1Api(api)
        for i in range(4):  # two racks of two 4-CPU nodes, as a kubelet labels them
            rack = f"rack-{i // 2}"
            core.create_node(node(f"kq-{i}", cpu="4", memory="16Gi",
                                  labels={RACK: rack, "topology.kubernetes.io/zone": "zone-a"}))
        for ns in NAMESPACES:
            core.create_namespace({"metadata": {"name": ns}})
        objs = client.CustomObjectsApi(api)
        op = OperatorProcess(c, SCHED, log_name="kueue-policy-scheduler").start()
        default = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
        apply_policy(objs, POLICY, default["spec"]["plugins"])  # the default plugin set: NodeAffinity too
        wait_for(lambda: (ready_condition(objs, POLICY) or {}).get("status") == "True", 30, what="policy Ready")
        yield c, k, api
    finally:
        if op is not None:
            op.stop()
        if k is not None:
            k.down()
        c.down(quiet=True)
        shutil.rmtree(state, ignore_errors=True)


def kobj(api, plural: str, name: str, body: dict, namespace: str | None = None) -> dict:
    objs = client.CustomObjectsApi(api)
    body = {"apiVersion": "/".join(KQ), **body, "metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}
    if namespace:
        return objs.create_namespaced_custom_object(*KQ, namespace, plural, body)
    return objs.create_cluster_custom_object(*KQ, plural, body)


def workloads(api, namespace: str) -> list[dict]:
    return client.CustomObjectsApi(api).list_namespaced_custom_object(*KQ, namespace, "workloads")["items"]


def cond(obj: dict, typ: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == typ), {})


def job(name: str, queue: str, cpu: str = "1", pods: int = 1, annotations: dict | None = None) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"parallelism": pods, "completions": pods, "template": {
                "metadata": {"labels": {LABEL: POLICY}, "annotations": annotations or {}},
                "spec": {"schedulerName": SCHED, "restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "registry.local/batch:1",
                                         "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}}}}


def finish(core, p) -> None:
    """What a kubelet would write when the container exits 0."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.patch_namespaced_pod_status(p.metadata.name, p.metadata.namespace, {"status": {
        "phase": "Succeeded", "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
        "containerStatuses": [{"name": "c", "image": "registry.local/batch:1", "imageID": "", "ready": False,
                               "restartCount": 0, "state": {"terminated": {
                                   "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}}]}})


def drive(api, namespaces, done, timeout: float, check=None) -> dict:
    """Finish bound pods after RUN_FOR seconds and call ``check(pods)`` on every sample, until
    ``done(jobs)``; returns what was seen."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    bound_at: dict[str, float] = {}
    seen = {"peak_cpu": 0, "samples": 0, "bound": set()}
    deadline = time.monotonic() + timeout
    while True:
        # pods first: a pod bound in this sample had its Job admitted before the Jobs are read
        pods = [p for ns in namespaces for p in core.list_namespaced_pod(ns).items]
        jobs = [j for ns in namespaces for j in batch.list_namespaced_job(ns).items]
        if done(jobs):
            return seen
        if time.monotonic() > deadline:
            states = Counter("complete" if (j.status.succeeded or 0) >= j.spec.completions else
                             "suspended" if j.spec.suspend else "running" for j in jobs)
            raise AssertionError(f"timed out after {timeout:.0f}s: jobs {dict(states)}")
        if check:
            check(pods, jobs, seen)
        seen["samples"] += 1
        now = time.monotonic()
        for p in pods:
            if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed"):
                seen["bound"].add(f"{p.metadata.namespace}/{p.metadata.name}")
                t = bound_at.setdefault(p.metadata.uid, now)
                if now - t >= RUN_FOR:
                    finish(core, p)
        time.sleep(0.2)


def cpu_m(p) -> int:
    return sum(int(float(c.resources.requests["cpu"].rstrip("m")) * (1 if c.resources.requests["cpu"].endswith("m")
                                                                         else 1000))
               for c in p.spec.containers)


def test_jobs_under_a_quota_are_placed_by_policy_scheduler(kq):
    c, k, api = kq
    kobj(api, "resourceflavors", "default-flavor", {"kind": "ResourceFlavor", "spec": {}})
    kobj(api, "clusterqueues", "batch", {"kind": "ClusterQueue", "spec": {
        "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
            "name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": str(QUOTA)},
                                                    {"name": "memory", "nominalQuota": "64Gi"}]}]}]}})
    for ns in NAMESPACES:
        kobj(api, "localqueues", "lq", {"kind": "LocalQueue", "spec": {"clusterQueue": "batch"}}, namespace=ns)
    batch = client.BatchV1Api(api)
    for i in range(JOBS):
        ns = NAMESPACES[i % 2]
        batch.create_namespaced_job(ns, job(f"job-{i:02d}", "lq"))

    def check(pods, jobs, seen):
        running = [p for p in pods if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed")]
        used = sum(cpu_m(p) for p in running)
        seen["peak_cpu"] = max(seen["peak_cpu"], used)
        assert used <= QUOTA * 1000, f"{used}m CPU bound and running, over the ClusterQueue's {QUOTA} CPUs"
        suspended = {(j.metadata.namespace, j.metadata.name) for j in jobs if j.spec.suspend}
        for p in running:
            owner = next((o.name for o in p.metadata.owner_references or [] if o.kind == "Job"), None)
            assert (p.metadata.namespace, owner) not in suspended, f"{p.metadata.name} bound while its Job is suspended"
            assert p.spec.scheduler_name == SCHED

    t0 = time.monotonic()
    seen = drive(api, NAMESPACES, lambda jobs: len(jobs) == JOBS and all(
        (j.status.succeeded or 0) >= j.spec.completions for j in jobs), 240, check)
    took = time.monotonic() - t0
    print(f"\n{JOBS} Jobs under a {QUOTA}-CPU quota: all complete in {took:.1f}s; peak {seen['peak_cpu']}m CPU bound; "
          f"{len(seen['bound'])} pods bound by {SCHED}; {seen['samples']} samples")
    assert len(seen["bound"]) == JOBS
    assert seen["peak_cpu"] == QUOTA * 1000, "the quota was never filled: nothing was compared with it"
    for ns in NAMESPACES:
        wls = workloads(api, ns)
        assert len(wls) == JOBS // 2 and all(cond(w, "Finished").get("status") == "True" for w in wls)
    core = client.CoreV1Api(api)
    ev = [e for ns in NAMESPACES for e in core.list_namespaced_event(ns).items if e.reason == "Scheduled"]
    assert len(ev) >= JOBS and {e.reporting_component or e.source.component for e in ev} == {SCHED}


def test_topology_aware_jobs_land_where_kueue_assigned_them(kq):
    c, k, api = kq
    ns, host = "team-tas", "kubernetes.io/hostname"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    kobj(api, "topologies", "racks", {"kind": "Topology", "spec": {"levels": [{"nodeLabel": RACK},
                                                                            {"nodeLabel": host}]}})
    kobj(api, "resourceflavors", "tas-flavor", {"kind": "ResourceFlavor", "spec": {
        "nodeLabels": {"topology.kubernetes.io/zone": "zone-a"}, "topologyName": "racks"}})
    kobj(api, "clusterqueues", "tas", {"kind": "ClusterQueue", "spec": {
        "namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
            "name": "tas-flavor", "resources": [{"name": "cpu", "nominalQuota": "16"},
                                                {"name": "memory", "nominalQuota": "64Gi"}]}]}]}})
    kobj(api, "localqueues", "tas", {"kind": "LocalQueue", "spec": {"clusterQueue": "tas"}}, namespace=ns)
    batch = client.BatchV1Api(api)
    names = [f"tas-{i}" for i in range(4)]
    for n in names:  # 3 pods of 2 CPUs each: 6 of a rack's 8 CPUs, so one Job per rack at a time
        batch.create_namespaced_job(ns, job(n, "tas", cpu="2", pods=3,
                                            annotations={"kueue.x-k8s.io/podset-required-topology": RACK}))
    racks = {f"kq-{i}": f"rack-{i // 2}" for i in range(4)}
    placed: dict[str, dict[str, str]] = {}  # job -> pod -> node
    gated: set[str] = set()

    def check(pods, jobs, seen):
        for j in jobs:  # Kueue writes its gate into an admitted TAS Job's pod template
            if any(g.name == "kueue.x-k8s.io/topology" for g in j.spec.template.spec.scheduling_gates or []):
                gated.add(j.metadata.name)
        for p in pods:
            owner = next((o.name for o in p.metadata.owner_references or [] if o.kind == "Job"), None)
            gates = [g.name for g in p.spec.scheduling_gates or []]
            if gates:
                assert not p.spec.node_name, f"{p.metadata.name} bound while gated by {gates}"
            if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed"):
                want = (p.spec.node_selector or {}).get(host)
                assert want == p.spec.node_name, \
                    f"{p.metadata.name} bound to {p.spec.node_name}, Kueue assigned {want} ({p.spec.node_selector})"
                placed.setdefault(owner, {})[p.metadata.name] = p.spec.node_name

    seen = drive(api, [ns], lambda jobs: len(jobs) == len(names) and all(
        (j.status.succeeded or 0) >= 3 for j in jobs), 180, check)
    print(f"\nTAS: {len(names)} Jobs of 3 pods on 2 racks: " + "; ".join(
        f"{j} on {sorted(set(v.values()))}" for j, v in sorted(placed.items())) + f" ({seen['samples']} samples)")
    assert sorted(placed) == names and all(len(v) == 3 for v in placed.values())
    for j, v in placed.items():
        assert len({racks[n] for n in v.values()}) == 1, f"{j} spans racks: {v}"
    assert gated == set(names), f"Jobs seen with Kueue's topology gate: {sorted(gated)}"
