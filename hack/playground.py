#!/usr/bin/env python3
"""`make playground`: a local cluster to try policy-scheduler on, left running.

`up` starts, in `.local/playground/` (hack/localcluster.py), and leaves up:
- etcd + kube-apiserver (with Kubernetes' own gang API) + kwok, built from pinned sources, and
  kube-controller-manager with only the resourceclaim and garbage-collector controllers (DRA: the
  claims of ResourceClaimTemplates, see start_claim_controllers);
- 14 kwok nodes in a realistic shape: 3 zones, 2 racks each, general nodes of two sizes, an ingest
  pool (`pool=ingest`), a GPU pool (`nvidia.com/gpu`, tainted `dedicated=gpu:NoSchedule`) and a
  tainted spot pool (`spot=true:NoSchedule`), every node with the labels a kubelet sets; the GPU
  nodes also publish their GPUs as DRA devices of the driver gpu.example.com (ResourceSlices);
- a Prometheus server (the Debian package's binary) scraping a small exporter of node cpu, memory
  and GPU utilisation (tests/e2e/promsim.py's), for the load-aware and gpu-utilization policies;
- the operator, out of the cluster, with its admission webhooks registered as URL webhooks
  (`run --webhook-url https://127.0.0.1:<port>`), so a bad policy is refused at the door;
- the CRDs, every example policy of policies/ (and gpu-dra.yaml's DeviceClass and
  ResourceClaimTemplate; not its Deployment, see apply_policies), and pods for each of them, placed.

It prints where the pods went (and which devices the gpu-dra pods got), `kubectl get
schedulingpolicies`, the `export KUBECONFIG=...` line and what to try next. `down` stops everything
and removes the directory.

    python3 hack/playground.py up | down | status
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import localcluster  # noqa: E402

# where it lives ($POLICY_SCHEDULER_PLAYGROUND: another directory, e.g. for a test)
STATE = Path(os.environ.get("POLICY_SCHEDULER_PLAYGROUND") or ROOT / ".local" / "playground")
KUBECONFIG = STATE / "kubeconfig"
NS = "playground"
POLICY = "policy-scheduler.io/policy"
ZONE, RACK = "topology.kubernetes.io/zone", "topology.kubernetes.io/rack"
WEBHOOK_CONFIG = "policy-scheduler-playground"
BAD_POLICY = HERE / "playground" / "bad-policy.yaml"

GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
# The DRA example: policies/gpu-dra.yaml holds the policy, a DeviceClass for the driver's GPUs, a
# ResourceClaimTemplate for one GPU of 40Gi or more, and a Deployment whose pods claim one each.
DRA_EXAMPLE = ROOT / "policies" / "gpu-dra.yaml"
DRA_DRIVER = "gpu.example.com"
# The GPUs each GPU node publishes in its ResourceSlice: (device, model, memory). Some match the
# template's selector (memory >= 40Gi), some do not (the l4s), so the allocation has to choose.
# The simulated nodes show their GPUs both ways, as a device plugin's count (nvidia.com/gpu, for
# gpu-utilization) and as a DRA driver's devices (for gpu-dra); a real node has one or the other.
GPU_DEVICES = {
    "gpu-b1": [("gpu-0", "a100", "40Gi"), ("gpu-1", "a100", "40Gi"), ("gpu-2", "l4", "24Gi"), ("gpu-3", "l4", "24Gi")],
    "gpu-b2": [("gpu-0", "h100", "80Gi"), ("gpu-1", "h100", "80Gi"), ("gpu-2", "l4", "24Gi"), ("gpu-3", "l4", "24Gi")],
}
SPOT_TAINT = {"key": "spot", "value": "true", "effect": "NoSchedule"}


def nodes() -> list[tuple[str, dict, dict, list]]:
    """(name, allocatable, extra labels, taints) of every node."""
    out = []
    for z in "abc":
        for r in (1, 2):
            out.append((f"general-{z}{r}", {"cpu": "8", "memory": "32Gi"}, {}, []))
        out.append((f"large-{z}1", {"cpu": "32", "memory": "128Gi"}, {}, []))
    for z, r in (("a", 2), ("c", 1)):
        out.append((f"ingest-{z}{r}", {"cpu": "16", "memory": "64Gi"}, {"pool": "ingest"}, []))
    for z, r in (("b", 1), ("b", 2)):
        out.append((f"gpu-{z}{r}", {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"},
                    {"accelerator": "gpu", "pool": "gpu"}, [GPU_TAINT]))
    out.append(("spot-a1", {"cpu": "16", "memory": "64Gi"}, {"pool": "spot"}, [SPOT_TAINT]))
    return out


def node_object(name: str, alloc: dict, labels: dict, taints: list) -> dict:
    zone, rack = f"zone-{name.split('-')[1][0]}", f"rack-{name.split('-')[1]}"
    alloc = {**alloc, "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {localcluster.KWOK_NODE_ANNOTATION: "fake"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", ZONE: zone, RACK: rack,
                                    "topology.kubernetes.io/region": "local", **labels}},
            "spec": {"taints": taints},
            "status": {"capacity": alloc, "allocatable": alloc}}


def pod(name: str, cpu: str, mem: str, policy: str | None = None, labels: dict | None = None,
        namespace: str = NS, extra: dict | None = None, claims: list | None = None, **spec) -> dict:
    """A pod; ``claims``: its containers' resources.claims (with spec resourceClaims in ``spec``)."""
    lab = dict(labels or {})
    if policy:
        lab[POLICY] = policy
    res = {"cpu": cpu, "memory": mem, **(extra or {})}
    resources = {"requests": res, "limits": dict(extra or {}) or None, **({"claims": claims} if claims else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": lab},
            "spec": {"schedulerName": "policy-scheduler",
                     "containers": [{"name": "main", "image": "registry.local/app:1", "resources": resources}],
                     **spec}}


def load_yaml_docs(path: Path) -> list[dict]:
    import yaml  # the venv's (``down`` runs with any python3)

    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def dra_example() -> dict[str, dict]:
    """policies/gpu-dra.yaml's objects by kind (SchedulingPolicy, DeviceClass,
    ResourceClaimTemplate, Deployment)."""
    return {d["kind"]: d for d in load_yaml_docs(DRA_EXAMPLE)}


def dra_pods(prefix: str, n: int, cpu: str, mem: str, namespace: str = NS, **spec) -> list[dict]:
    """``n`` pods of the policy gpu-dra that claim what the example Deployment's pods claim (its
    pod template's resourceClaims, each naming the ResourceClaimTemplate single-gpu, and its
    container's resources.claims), read from the file, with ``spec`` added (e.g. tolerations)."""
    tmpl = dra_example()["Deployment"]["spec"]["template"]["spec"]
    claims = tmpl["containers"][0]["resources"]["claims"]
    return [pod(f"{prefix}-{i}", cpu, mem, "gpu-dra", {"app": prefix}, namespace=namespace, claims=claims,
                resourceClaims=tmpl["resourceClaims"], **spec) for i in range(n)]


def resource_slice(node: str, devices: list[tuple[str, str, str]]) -> dict:
    """The ResourceSlice a DRA driver publishes for ``node``: its whole pool (named after the
    node) in one slice, each device with a ``model`` attribute and a ``memory`` capacity."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRA_DRIVER}"},
            "spec": {"driver": DRA_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": d, "attributes": {"model": {"string": model}},
                                  "capacity": {"memory": {"value": memory}}} for d, model, memory in devices]}}


def claim_devices(claim: dict, slices: list[dict]) -> str:
    """The devices allocated to ``claim`` (status.allocation.devices.results), each with its
    model and memory as its ResourceSlice publishes them: ``gpu-0 (h100 80Gi)``."""
    known = {(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]): d
             for s in slices for d in s["spec"].get("devices") or ()}
    out = []
    for r in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or ():
        d = known.get((r["driver"], r["pool"], r["device"])) or {}
        model = ((d.get("attributes") or {}).get("model") or {}).get("string", "?")
        memory = ((d.get("capacity") or {}).get("memory") or {}).get("value", "?")
        out.append(f"{r['device']} ({model} {memory})")
    return ", ".join(out) or "no devices"


GPU_TOLERATION = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]

def workloads() -> list[tuple[str, str, list[dict]]]:
    """(what, policy, pods) of every workload."""
    return [*WORKLOADS, (
        "serve: GPU pods, one GPU of 40Gi or more each through DRA (claims from gpu-dra.yaml's "
        "ResourceClaimTemplate), devices packed", "gpu-dra",
        dra_pods("serve", 3, "2", "8Gi", tolerations=GPU_TOLERATION))]


# (what, policy, pods); workloads() adds the DRA one
WORKLOADS = [
    ("web: a Service's replicas, spread by zone (hard) and rack (soft)", "spread",
     [pod(f"web-{i}", "500m", "512Mi", "spread", {"app": "web"}) for i in range(6)]),
    ("batch: packed onto as few nodes as possible", "binpack",
     [pod(f"batch-{i}", "1", "2Gi", "binpack", {"app": "batch"}) for i in range(8)]),
    ("ingest: pinned to the ingest pool", "node-label-match",
     [pod(f"ingest-{i}", "1", "2Gi", "node-label-match", {"app": "ingest"}) for i in range(4)]),
    ("api: no policy label, so the policy 'default' (upstream's default profile)", "default",
     [pod(f"api-{i}", "250m", "256Mi", None, {"app": "api"}) for i in range(6)]),
    ("cache: real cpu and memory usage from Prometheus (hot nodes avoided)", "load-aware",
     [pod(f"cache-{i}", "500m", "1Gi", "load-aware", {"app": "cache"}) for i in range(4)]),
    ("infer: GPU pods, the least utilised GPUs first (DCGM utilisation)", "gpu-utilization",
     [pod(f"infer-{i}", "2", "8Gi", "gpu-utilization", {"app": "infer"}, extra={"nvidia.com/gpu": "1"},
          tolerations=GPU_TOLERATION) for i in range(3)]),
    ("report: a namespace of the analytics department (its default policy, 5% cpu overcommit)",
     "dept-analytics", [pod(f"report-{i}", "1", "1Gi", None, {"app": "report"}, namespace="analytics")
                        for i in range(3)]),
    ("ledger: a namespace of the payments department (its default policy, no overcommit)",
     "dept-payments", [pod(f"ledger-{i}", "1", "1Gi", None, {"app": "ledger"}, namespace="payments")
                       for i in range(3)]),
    ("train: a PodGroup of 3, all or nothing", "gang",
     [pod(f"train-{i}", "2", "4Gi", "gang", {"app": "train", "scheduling.x-k8s.io/pod-group": "train"})
      for i in range(3)]),
]
NAMESPACES = {NS: {}, "analytics": {"department": "analytics", "policy-scheduler.io/default-policy": "dept-analytics"},
              "payments": {"department": "payments", "policy-scheduler.io/default-policy": "dept-payments"}}
# the exporter's values: a busy general node, busy GPUs on one node
USAGE = {"general-a1": {"cpu": 0.92, "memory": 0.7}, "gpu-b1": {"gpu": 95.0}, "gpu-b2": {"gpu": 10.0}}


def say(msg: str) -> None:
    print(msg, flush=True)


def kubectl(*args: str, check: bool = False, stdin: str | None = None) -> subprocess.CompletedProcess:
    bins = localcluster.bin_dir(build=False)
    p = subprocess.run([str(bins / "kubectl"), *args], capture_output=True, text=True, timeout=120,
                       input=stdin, env={**os.environ, "KUBECONFIG": str(KUBECONFIG)})
    if check and p.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed:\n{p.stderr}")
    return p


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "policy_scheduler.cli", *args, "--kubeconfig", str(KUBECONFIG)],
                          capture_output=True, text=True, timeout=120)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def wait(what: str, check, timeout: float = 60.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}; logs in {STATE / 'cluster' / 'logs'}")


# ---------------------------------------------------------------------------------------- exporter
def exporter_main(port_file: str) -> int:
    """The exporter process: promsim's SimExporter with USAGE, its port written to ``port_file``."""
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from promsim import SimExporter

    exp = SimExporter()
    for name, _, _, _ in nodes():
        exp.set(name, cpu=0.15, memory=0.3)
    for name, v in USAGE.items():
        exp.set(name, **v)
    Path(port_file).write_text(str(exp.port))
    while True:
        time.sleep(3600)


# ---------------------------------------------------------------------------------------- up
def up() -> int:
    t0 = time.monotonic()
    cluster = localcluster.LocalCluster(STATE / "cluster", kubeconfig_path=KUBECONFIG)
    if cluster.state.get("procs"):
        if cluster.running() and cluster.ready():
            say(f"the playground is up already: export KUBECONFIG={KUBECONFIG}  (make playground-down to stop it)")
            return 0
        cluster.down(quiet=True)
    subprocess.run(["bash", str(HERE / "ensure-prometheus.sh")], check=True, stdout=subprocess.DEVNULL)
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        raise SystemExit("prometheus is not on PATH after hack/ensure-prometheus.sh")
    say("== a local control plane (etcd, kube-apiserver with the gang API, kwok) from pinned upstream sources")
    cluster.up(kwok=True, quiet=True, feature_gates=localcluster.GANG_FEATURE_GATES,
               runtime_config=localcluster.GANG_RUNTIME_CONFIG)
    try:
        start_claim_controllers(cluster)
        return _populate(cluster, prometheus, t0)
    except BaseException:
        say(f"playground start failed: stopping it (logs were in {STATE})")
        cluster.down(quiet=True)
        raise


def start_claim_controllers(cluster: localcluster.LocalCluster) -> None:
    """kube-controller-manager with two controllers only: resourceclaim-controller makes each pod's
    ResourceClaim from its ResourceClaimTemplate (and sets the pod's status.resourceClaimStatuses),
    and when a pod is gone it takes the pod out of its claims' reservedFor and frees their
    devices; garbage-collector-controller then deletes the claims made for pods that are gone.

    Why not a named ResourceClaim per pod, made here, and no controller at all: pods then claim
    exactly what policies/gpu-dra.yaml's pods claim (its template, read from the file), and the
    playground stays up for people to try things on: without the controller a pod deleted by
    hand would keep its devices allocated and reserved for good (nothing else takes a gone pod
    out of a claim's reservedFor), and a pod of their own naming a template would never get its
    claim. It costs about 90 MB of memory and 2 seconds at start-up (no other controller runs:
    nodes are kwok's, and nothing here needs Deployments, ServiceAccounts or node lifecycle)."""
    cluster.start_controller_manager(controllers="resourceclaim-controller,garbage-collector-controller")


def apply_policies() -> str:
    """``kubectl apply -n playground`` of every document of policies/ but the example workloads.

    The SchedulingPolicies and gpu-dra.yaml's DeviceClass are cluster-scoped; its
    ResourceClaimTemplate single-gpu goes to the namespace of the playground's pods, which claim
    from it. Its Deployment is left out: nothing here runs Deployments (no deployment or
    replicaset controller), and its pods do not tolerate the GPU pool's taint; the playground's
    own gpu-dra pods (`serve-*`, see workloads()) claim what its pods claim."""
    import yaml

    docs = [d for f in sorted((ROOT / "policies").glob("*.yaml")) for d in load_yaml_docs(f)
            if d.get("kind") != "Deployment"]
    out = kubectl("apply", "-n", NS, "-f", "-", check=True, stdin=yaml.safe_dump_all(docs, sort_keys=False))
    return out.stdout.rstrip()


def _populate(cluster: localcluster.LocalCluster, prometheus: str, t0: float) -> int:
    from kubernetes import client, config

    kubectl("apply", "-f", str(ROOT / "crds"), check=True)
    api = config.new_client_from_config(str(KUBECONFIG))
    ext = client.ApiextensionsV1Api(api)

    def established(name: str) -> bool:
        conds = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conds)

    wait("the CRDs established", lambda: established("schedulingpolicies.policy-scheduler.io")
         and established("podgroups.scheduling.x-k8s.io"), 60)
    core = client.CoreV1Api(api)
    for n in nodes():
        core.create_node(node_object(*n))
    for ns, labels in NAMESPACES.items():
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns, labels=labels or None)))
    core.create_namespaced_service(NS, client.V1Service(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1ServiceSpec(selector={"app": "web"}, ports=[client.V1ServicePort(port=80)])))
    objs = client.CustomObjectsApi(api)
    for name, devices in GPU_DEVICES.items():
        objs.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", resource_slice(name, devices))
    say(f"== {len(nodes())} kwok nodes: 3 zones x 2 racks, an ingest pool, a GPU pool (tainted), a spot pool "
        f"(tainted); the GPU nodes publish their GPUs as DRA devices of {DRA_DRIVER} (ResourceSlices)")

    port_file = STATE / "exporter.port"
    port_file.unlink(missing_ok=True)
    cluster._spawn("exporter", [sys.executable, str(Path(__file__).resolve()), "_exporter", str(port_file)])
    exporter_port = int(wait("the exporter", lambda: port_file.exists() and port_file.read_text().strip() or None))
    prom_dir = STATE / "prometheus"
    prom_dir.mkdir(parents=True, exist_ok=True)
    prom_port = localcluster.free_port()
    (prom_dir / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
        "  - job_name: nodes\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n")
    cluster._spawn("prometheus", [prometheus, f"--config.file={prom_dir / 'prometheus.yml'}",
                                  f"--storage.tsdb.path={prom_dir / 'data'}",
                                  f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"])
    prom_url = f"http://127.0.0.1:{prom_port}"
    wait("Prometheus", lambda: http_ok(f"{prom_url}/-/ready"))
    say(f"== Prometheus on {prom_url}, scraping a node exporter (cpu, memory, GPU utilisation)")

    webhook_port, metrics_port, health_port = (localcluster.free_port() for _ in range(3))
    cluster._spawn("operator", [
        sys.executable, "-m", "policy_scheduler.cli", "run", "--kubeconfig", str(KUBECONFIG),
        "--metrics-port", str(metrics_port), "--metrics-address", "127.0.0.1",
        "--health-port", str(health_port), "--health-address", "127.0.0.1",
        "--webhook-port", str(webhook_port), "--webhook-address", "127.0.0.1",
        "--webhook-url", f"https://127.0.0.1:{webhook_port}", "--webhook-configuration", WEBHOOK_CONFIG,
        "--webhook-secret", "default/policy-scheduler-webhook-tls",
        "--revision-namespace", "default", "--prometheus-url", prom_url],
        env={"PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), os.environ.get("PYTHONPATH", "")])})

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=2) as r:
                return json.loads(r.read()).get("ready") is True
        except (OSError, ValueError):
            return False

    wait("the operator ready (cache synced, webhooks serving)", ready, 90)
    adm = client.AdmissionregistrationV1Api(api)
    wait("the webhooks registered", lambda: all(
        h.client_config.ca_bundle for h in adm.read_validating_webhook_configuration(WEBHOOK_CONFIG).webhooks), 30)
    say(f"== the operator runs out of the cluster; admission webhooks registered at https://127.0.0.1:{webhook_port}")

    say(f"$ kubectl apply -n {NS} -f policies/   # but gpu-dra.yaml's Deployment: serve-* claim as its pods do\n"
        + apply_policies())
    objs.create_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", NS, "podgroups", {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": NS}, "spec": {"minMember": 3}})
    wait("every policy Ready", lambda: all(
        any(c.get("type") == "Ready" and c.get("status") == "True" for c in (p.get("status") or {}).get("conditions") or [])
        for p in objs.list_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies")["items"]), 60)

    def fresh(name: str) -> bool:
        """The policy's metrics read: every query has a fresh value for some node."""
        m = (objs.get_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies", name)
             .get("status") or {}).get("metrics") or {}
        return bool(m.get("queries")) and all(q.get("fresh", 0) > 0 for q in m["queries"])

    # the usage-aware policies decide on real values, not on their fallbacks: wait for a refresh
    # that found them (the policies refresh every 15 s; Prometheus needs two scrapes for a rate)
    wait("the metrics of load-aware and gpu-utilization", lambda: fresh("load-aware") and fresh("gpu-utilization"),
         90, 1.0)
    say("== load-aware and gpu-utilization read fresh node metrics from Prometheus")
    work = workloads()
    total = sum(len(p) for _, _, p in work)
    burst = time.monotonic()
    for _, _, pods in work:
        for p in pods:
            core.create_namespaced_pod(p["metadata"]["namespace"], p)

    def placed():
        got = {(p.metadata.namespace, p.metadata.name): p for ns in NAMESPACES
               for p in core.list_namespaced_pod(ns).items}
        return got if sum(1 for p in got.values() if p.spec.node_name) == total else None

    items = wait(f"{total} pods placed", placed, 90)
    took = time.monotonic() - burst
    time.sleep(2.5)  # the policies' status is written every 2 s
    specs = {n[0]: n for n in nodes()}
    # the devices each pod with claims got: its claims (status.resourceClaimStatuses names the
    # claims made from templates) and their allocations, with the devices' model and memory
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c
              for c in objs.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims")["items"]}
    slices = objs.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")["items"]

    def label(p) -> str:
        names = [s.resource_claim_name for s in p.status.resource_claim_statuses or () if s.resource_claim_name]
        names += [c.resource_claim_name for c in p.spec.resource_claims or () if c.resource_claim_name]
        if not names:
            return p.metadata.name
        got = [claim_devices(claims.get((p.metadata.namespace, n)) or {}, slices) for n in names]
        return f"{p.metadata.name} [{', '.join(got)}]"

    say(f"\n== placements: {total}/{total} pods bound in {took:.1f}s\n")
    for what, policy, pods in work:
        say(f"{what}   [policy {policy}]")
        per_node = defaultdict(list)
        for p in pods:
            got = items[(p["metadata"]["namespace"], p["metadata"]["name"])]
            per_node[got.spec.node_name].append(label(got))
        for nn, names in sorted(per_node.items()):
            n = node_object(*specs[nn])
            say(f"    {nn:<12} {n['metadata']['labels'][ZONE]:<7} {n['metadata']['labels'][RACK]:<8} "
                f"{specs[nn][1]['cpu']:>3} cpu  {', '.join(names)}")
        say("")
    say("$ kubectl get schedulingpolicies")
    say(kubectl("get", "schedulingpolicies").stdout)
    say(f"== the playground is up ({time.monotonic() - t0:.0f}s); it stays up until `make playground-down`.\n")
    say(NEXT.format(kubeconfig=KUBECONFIG, bad=BAD_POLICY.relative_to(ROOT), metrics=metrics_port, prom=prom_url,
                    health=health_port, log=STATE / "cluster" / "logs" / "operator.log"))
    return 0


NEXT = """export KUBECONFIG={kubeconfig}
export PATH="$PWD/.venv/bin:$PATH"      # policy-scheduler (and kubectl-policy_scheduler)

Next, try:
  kubectl get schedulingpolicies -o wide                    # READY, REVISION, ROLLOUT, CHAIN, ...
  kubectl apply -f {bad}                   # refused by the webhook, naming the field
  policy-scheduler explain playground/web-0                 # why web-0 went where it went
  policy-scheduler explain playground/cache-0               # LoadAware: each node's usage and its freshness
  policy-scheduler explain playground/serve-0               # DRA: the devices allocated, DeviceFragmentation's score
  kubectl get resourceslices; kubectl get resourceclaims -n playground          # the GPUs, the pods' claims
  kubectl get pods -n playground -o wide
  policy-scheduler simulate --policy binpack --policy spread --pending   # what-if on the live cluster
  policy-scheduler snapshot -o /tmp/playground.json && \\
    policy-scheduler simulate --snapshot /tmp/playground.json --policy policies/binpack.yaml \\
      --pods hack/playground/more-pods.yaml --report /tmp/report.html
  policy-scheduler rollout history binpack
  curl -s http://127.0.0.1:{metrics}/metrics | grep scheduler_schedule_attempts_total
  curl -s http://127.0.0.1:{health}/readyz
  Prometheus: {prom}    operator log: {log}
  make playground-down                                      # stop it all
"""


def down() -> int:
    cluster = localcluster.LocalCluster(STATE / "cluster", kubeconfig_path=KUBECONFIG)
    stopped = cluster.down(quiet=True)
    shutil.rmtree(STATE, ignore_errors=True)
    say("playground stopped" if stopped else "no playground was running")
    return 0


def status() -> int:
    cluster = localcluster.LocalCluster(STATE / "cluster", kubeconfig_path=KUBECONFIG)
    if cluster.state.get("procs") and cluster.running() and cluster.ready():
        say(f"up: export KUBECONFIG={KUBECONFIG}  ({', '.join(cluster.state['procs'])})")
        return 0
    say("down")
    return 1


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["_exporter"]:
        return exporter_main(argv[1])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["up", "down", "status"])
    a = ap.parse_args(argv)
    return {"up": up, "down": down, "status": status}[a.command]()


if __name__ == "__main__":
    sys.exit(main())
