"""Suggestions at scale, seeded: COUNT pending pods of every blocking kind the remedies core
supports, on the real control plane (the session's API server, plain Node objects) with the
operator as a process under admin credentials.

Kinds (each pod's expected top suggestion in brackets): too much cpu and/or memory
[LowerRequest], untolerated NoSchedule/NoExecute taints [TolerateTaint], a nodeSelector or a
required node affinity term no node matches [DropNodeSelector / WidenNodeAffinity], a
DoNotSchedule topology spread constraint [RelaxTopologySpread], a host port taken on the node
[DropHostPort], a claim that blocks (missing, or unbound with immediate binding and no volume to
bind) [DropVolume], a cordoned node [UncordonNode], no pod slot left and preemptionPolicy: Never
[EvictLowerPriority], a required pod affinity term no pod matches or an anti-affinity term the
pod on the node matches [DropPodAffinityTerm], a ResourceClaim that does not exist (named, a
template's never made, or one of two claims) [DropResourceClaim; DynamicResources holds such a
pod at PreEnqueue: no attempt, searched once held 5 s], a claim naming DeviceClasses that do not
exist (the node publishing devices of the run's driver in a ResourceSlice) [CreateDeviceClass].
Not covered: UsePolicy, which needs a second policy that places the pod (covered by unit tests).

Isolation: every pod has its own cell (one node) that only it can use. Each node holds a guard
pod (no requests, highest priority, tolerates everything) with a required anti-affinity against
every pod of this test of another cell: no suggestion can open another cell's node (no remedy
changes a pod's labels, preemption cannot evict the guard), so suggestions can be applied all at
once and each pod's cell is exactly the state its suggestion was verified on. The policy's
addedAffinity keeps the pods to this run's nodes. The kinds run one after another (their nodes,
pods, claims, slices and classes deleted after each), in this test's own namespace. DRA: every
node of a DRA kind publishes devices of DRIVER; a DeviceClass a suggestion creates must be one its
cell's claim names.

For each pod: the suggestions condition (polled with list calls), and ``explain -o json`` for a sample;
at least 95% of the pods of each kind must have a suggestion; the top one is applied (the pod
re-created as its patch says with remedies' apply_pod_patch, or the cluster change it names,
which must touch only the pod's own cell) and the pod must be bound by the operator on the node
the suggestion named, or on one of equal score: no applied suggestion may fail.

Environment: SUGGESTIONS_SEED (default 44), SUGGESTIONS_COUNT (pods per kind, default 60),
SUGGESTIONS_KINDS (comma-separated subset of KINDS' names), SUGGESTIONS_EXPLAIN (pods per kind
checked with explain, default 10: one as its own process, the rest through its entry point)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client

from conftest import OperatorProcess
from dra_world import Raw
from helpers import (apply_policy, example_plugins, node, pod, priority_classes, ready_condition,
                     recreated, suggestions_condition, wait_for)
from policy_scheduler import cli

SCHED = POLICY = "seeded"
DECISION = "policy-scheduler.io/decision"
CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
NO_PREEMPTION = "seeded-no-preemption"  # the same plugins without DefaultPreemption
GUARD, LOW, NEVER, HIGH = "e2e-seeded-guard", "e2e-seeded-low", "e2e-seeded-never", "e2e-seeded-high"

DRIVER = "seeded.example.com"
RESOURCE = "/apis/resource.k8s.io/v1"
SEED = int(os.environ.get("SUGGESTIONS_SEED", "44"))
COUNT = max(int(os.environ.get("SUGGESTIONS_COUNT", "60")), 1)
EXPLAIN = int(os.environ.get("SUGGESTIONS_EXPLAIN", "10"))
SHARE = 0.95  # of the pods of a kind that must have a suggestion
WAIT_SUGGESTIONS = 90.0  # seconds after a kind's last pod was created
WAIT_BOUND = 90.0


class Cell:
    """One pod's world: its nodes, the pods already on them, its claims, and the pending pod."""

    def __init__(self, kind: str, i: int, run: str, namespace: str):
        self.kind, self.name = kind, f"{kind}-{i}"
        self.labels = {"e2e-seeded": run, "e2e-cell": self.name}
        self.namespace = namespace
        self.nodes: list[dict] = []
        self.placed: list[dict] = []  # pods created with spec.nodeName (guards, fillers, victims)
        self.claims: list[dict] = []
        self.dra: list[tuple[str, dict]] = []  # (collection path, body): ResourceSlices, ResourceClaims
        self.classes: set[str] = set()  # the DeviceClasses this cell's claims name (and may be created)
        self.pod: dict = {}

    def add_node(self, suffix: str = "", guard: bool = True, **kw) -> dict:
        labels = {**self.labels, **kw.pop("labels", {})}
        n = node(f"sd{self.labels['e2e-seeded']}-{self.name}{suffix}", labels=labels, **kw)
        self.nodes.append(n)
        name = n["metadata"]["name"]
        if not guard:
            return n
        guard = pod(f"g-{name}", self.namespace, cpu=None, memory=None, scheduler=SCHED,
                    labels={"e2e-guard": self.labels["e2e-seeded"]}, nodeName=name, priorityClassName=GUARD,
                    tolerations=[{"operator": "Exists"}],
                    affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchExpressions": [
                            {"key": "e2e-cell", "operator": "Exists"},
                            {"key": "e2e-cell", "operator": "NotIn", "values": [self.name]}]}}]}})
        self.placed.append(guard)
        return n

    def place(self, suffix: str, node_name: str, **kw) -> dict:
        p = pod(f"f-{self.name}-{suffix}", self.namespace, scheduler=SCHED, nodeName=node_name, **kw)
        self.placed.append(p)
        return p

    def pending(self, cpu: str | None = "100m", memory: str | None = "64Mi", **spec) -> None:
        self.pod = pod(self.name, self.namespace, cpu=cpu, memory=memory, scheduler=SCHED,
                       labels={"e2e-cell": self.name, "e2e-kind": self.kind}, **spec)


# ----------------------------------------------------------------------------- the kinds
def resources(c: Cell, rng: random.Random) -> set[str]:
    cpu, mem = rng.choice((2, 4, 8)), rng.choice((4, 8, 16))
    c.add_node(cpu=str(cpu), memory=f"{mem}Gi")
    which = rng.choice(("cpu", "memory", "both"))
    want_cpu = f"{cpu * 1000 + rng.randrange(100, 4000, 100)}m" if which != "memory" else f"{rng.randrange(1, cpu)}"
    want_mem = f"{mem * 1024 + rng.randrange(64, 4096, 64)}Mi" if which != "cpu" else "256Mi"
    c.pending(cpu=want_cpu, memory=want_mem)
    return {"LowerRequest"}


def taints(c: Cell, rng: random.Random) -> set[str]:
    ts = [{"key": f"dedicated-{k}", "value": f"v{rng.randrange(100)}",
           "effect": rng.choice(("NoSchedule", "NoExecute"))}
          for k in range(rng.choice((1, 1, 2)))]
    if rng.random() < 0.3:
        ts.append({"key": "no-value", "effect": "NoSchedule"})
    c.add_node(taints=ts)
    c.pending(cpu=f"{rng.randrange(1, 30) * 100}m")
    return {"TolerateTaint"}


def affinity(c: Cell, rng: random.Random) -> set[str]:
    c.add_node(labels={"disk": "hdd", "e2e-zone": f"z{rng.randrange(4)}"})
    if rng.random() < 0.5:
        sel = {"disk": "ssd"} if rng.random() < 0.5 else {"disk": "ssd", "gpu": "yes"}
        c.pending(nodeSelector=sel)
        return {"DropNodeSelector"}
    exprs = [{"key": "e2e-zone", "operator": "In", "values": [f"z{rng.randrange(4, 9)}"]}]
    if rng.random() < 0.5:
        exprs.append({"key": "disk", "operator": "In", "values": ["ssd", "nvme"]})
    c.pending(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": exprs}]}}})
    return {"WidenNodeAffinity"}


def spread(c: Cell, rng: random.Random) -> set[str]:
    # the zone's minimum is 0 (the other cells' zones hold no pod of this selector): k pods here
    # already, k >= maxSkew, so k + 1 > maxSkew; at least two cells (COUNT >= 2) make it so
    n = c.add_node(labels={"e2e-zone": f"zone-{c.name}"})
    skew = rng.choice((1, 1, 2, 3))
    app = {"e2e-app": c.name}
    for k in range(skew + rng.randrange(0, 3)):
        c.place(str(k), n["metadata"]["name"], labels=app, priorityClassName=GUARD)
    c.pending(topologySpreadConstraints=[{"maxSkew": skew, "topologyKey": "e2e-zone",
                                          "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": app}}])
    c.pod["metadata"]["labels"].update(app)
    return {"RelaxTopologySpread"}


def ports(c: Cell, rng: random.Random) -> set[str]:
    n = c.add_node()
    port = rng.randrange(20000, 30000)
    c.place("holder", n["metadata"]["name"], priorityClassName=GUARD)["spec"]["containers"][0]["ports"] = [
        {"containerPort": 80, "hostPort": port, "protocol": "TCP"}]
    ps = [{"containerPort": 8080, "hostPort": port, "protocol": "TCP"}]
    if rng.random() < 0.4:
        ps.insert(0, {"containerPort": 9090, "hostPort": port + 1, "protocol": "TCP"})
    c.pending()
    c.pod["spec"]["containers"][0]["ports"] = ps
    return {"DropHostPort"}


def volumes(c: Cell, rng: random.Random) -> set[str]:
    c.add_node()
    claim = f"claim-{c.name}"
    if rng.random() < 0.5:  # unbound, immediate binding, no volume: "unbound immediate PersistentVolumeClaims"
        c.claims.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "metadata": {"name": claim, "namespace": c.namespace},
                         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                                  "resources": {"requests": {"storage": "1Gi"}}}})
    # else: the claim does not exist ("persistentvolumeclaim ... not found")
    c.pending(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])
    c.pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return {"DropVolume"}


def cordoned(c: Cell, rng: random.Random) -> set[str]:
    n = c.add_node(taints=[CORDON_TAINT])
    n["spec"]["unschedulable"] = True
    c.pending(cpu=f"{rng.randrange(1, 30) * 100}m")
    return {"UncordonNode"}


def priorities(c: Cell, rng: random.Random) -> set[str]:
    # no pod slot left (the victims fill it): no request to lower frees one; the pod may not
    # preempt (preemptionPolicy: Never), so preemption's answer is the suggestion. Kept to its
    # cell by a nodeSelector, not a guard: every other node is full too (NodeAffinity and
    # NodeResourcesFit: no single change, no pair opens it), and preemption's dry run skips a
    # node NodeAffinity rejects (unresolvable). With guards, every node of the kind would be a
    # preemption candidate, and the dry run re-runs PreFilter per candidate (InterPodAffinity
    # over every guard): at 60 cells the search outgrows the 20 ms budget before its turn.
    # Half the pods: preemptionPolicy: Never under the policy; the others may preempt, under a
    # policy without DefaultPreemption.
    victims = rng.randrange(1, 4)
    n = c.add_node(pods=str(victims), guard=False)
    for k in range(victims):
        c.place(f"v{k}", n["metadata"]["name"], cpu=f"{rng.randrange(1, 10) * 100}m", priorityClassName=LOW)
    never = rng.random() < 0.5
    c.pending(cpu=f"{rng.randrange(1, 20) * 100}m", priorityClassName=NEVER if never else HIGH,
              nodeSelector={"e2e-cell": c.name})
    if not never:
        c.pod["metadata"]["labels"]["policy-scheduler.io/policy"] = NO_PREEMPTION
    return {"EvictLowerPriority"}


def podaffinity(c: Cell, rng: random.Random) -> set[str]:
    # a required pod affinity term no pod matches, or a required anti-affinity term the pod
    # already on the node matches (the node's only pod of that label: a filler of this cell)
    n = c.add_node(labels={"e2e-zone": f"z{rng.randrange(4)}"})
    key = rng.choice(("kubernetes.io/hostname", "e2e-zone"))
    if rng.random() < 0.5:
        c.pending(affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": key, "labelSelector": {"matchLabels": {"e2e-missing": c.name}}}]}})
    else:
        app = {"e2e-app": c.name}
        c.place("peer", n["metadata"]["name"], labels=app, priorityClassName=GUARD)
        c.pending(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": key, "labelSelector": {"matchLabels": app}}]}})
    return {"DropPodAffinityTerm"}


def devices(c: Cell, node_name: str, count: int, rng: random.Random) -> None:
    """A ResourceSlice of DRIVER for the node: ``count`` devices, model a100 or t4."""
    c.dra.append((f"{RESOURCE}/resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-devices", "labels": {"e2e-seeded": c.labels["e2e-seeded"]}},
        "spec": {"driver": DRIVER, "nodeName": node_name,
                 "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"dev{i}", "attributes": {"model": {"string": rng.choice(("a100", "t4"))}}}
                             for i in range(count)]}}))


def resource_claim(c: Cell, name: str, requests: list[dict]) -> None:
    c.dra.append((f"{RESOURCE}/namespaces/{c.namespace}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": c.namespace, "labels": {"e2e-seeded": c.labels["e2e-seeded"]}},
        "spec": {"devices": {"requests": requests}}}))


def with_claims(c: Cell, entries: list[dict]) -> None:
    c.pod["spec"]["resourceClaims"] = entries
    c.pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": e["name"]} for e in entries]


def claims(c: Cell, rng: random.Random) -> set[str]:
    # a claim that does not exist: named, or a template's (no controller makes it), or one of two
    # (the other exists, through the run's class, and is allocated on the cell's node once applied)
    n = c.add_node()
    devices(c, n["metadata"]["name"], rng.choice((1, 2)), rng)
    c.pending(cpu=f"{rng.randrange(1, 20) * 100}m")
    how = rng.choice(("named", "template", "one of two"))
    if how == "template":
        with_claims(c, [{"name": "gpu", "resourceClaimTemplateName": f"tmpl-{c.name}"}])
    elif how == "named":
        with_claims(c, [{"name": "gpu", "resourceClaimName": f"rc-{c.name}-missing"}])
    else:
        resource_claim(c, f"rc-{c.name}", [{"name": "gpu", "exactly": {"deviceClassName": run_class(c)}}])
        with_claims(c, [{"name": "gpu", "resourceClaimName": f"rc-{c.name}"},
                        {"name": "extra", "resourceClaimName": f"rc-{c.name}-missing"}])
    return {"DropResourceClaim"}


def run_class(c: Cell) -> str:
    return f"sd{c.labels['e2e-seeded']}-devices"


def deviceclass(c: Cell, rng: random.Random) -> set[str]:
    # the claim's requests name classes that do not exist (one or two): creating them, selecting
    # DRIVER's devices, places the pod; dropping the claim would too, but ranks after
    n = c.add_node()
    names = [f"sd{c.labels['e2e-seeded']}-{c.name}-a"] + ([f"sd{c.labels['e2e-seeded']}-{c.name}-b"]
                                                           if rng.random() < 0.3 else [])
    devices(c, n["metadata"]["name"], max(len(names), rng.choice((1, 2, 3))), rng)
    c.classes = set(names)
    resource_claim(c, f"rc-{c.name}", [{"name": f"r{j}", "exactly": {"deviceClassName": cls}}
                                       for j, cls in enumerate(names)])
    c.pending(cpu=f"{rng.randrange(1, 20) * 100}m")
    with_claims(c, [{"name": "gpu", "resourceClaimName": f"rc-{c.name}"}])
    return {"CreateDeviceClass"}



KINDS = {"resources": resources, "taints": taints, "affinity": affinity, "spread": spread, "ports": ports,
         "volumes": volumes, "cordoned": cordoned, "priorities": priorities, "podaffinity": podaffinity,
         "claims": claims, "deviceclass": deviceclass}


# ----------------------------------------------------------------------------- API helpers
def raw_list(core, namespace: str, selector: str) -> list[dict]:
    r = core.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False)
    return json.loads(r.data)["items"]


def explain_args(cluster, namespace: str, name: str, ops: str) -> list[str]:
    return ["explain", f"{namespace}/{name}", "-o", "json", "--operator-namespace", ops,
            "--kubeconfig", str(cluster.kubeconfig_path)]


def explain(cluster, namespace: str, name: str, ops: str) -> dict:
    """`policy-scheduler explain -o json`, the command (a new process: most of its time is the
    interpreter's start and imports, seconds on a busy 2-core machine)."""
    p = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", *explain_args(cluster, namespace, name, ops)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def explain_here(cluster, namespace: str, name: str, ops: str) -> dict:
    """The same command's entry point (cli.main) in this process: its parsing, reads and output,
    without a new interpreter. Not thread-safe (stdout is redirected): the test's thread only."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(explain_args(cluster, namespace, name, ops))
    assert code == 0, (name, out.getvalue()[-2000:])
    return json.loads(out.getvalue())


def apply_cluster(core, cell: Cell, patch: list) -> None:
    """A Cluster suggestion's operations, each checked to touch only the cell's own objects."""
    own_nodes = {n["metadata"]["name"] for n in cell.nodes}
    own_pods = {p["metadata"]["name"] for p in cell.placed}
    by_node: dict[str, list] = {}
    for op in patch:
        if op.get("kind") == "DeviceClass" and op.get("op") == "create":
            assert op["name"] in cell.classes and op["value"]["metadata"]["name"] == op["name"], (cell.name, op)
            Raw(core.api_client).create(f"{RESOURCE}/deviceclasses", op["value"])
        elif op.get("kind") == "Node":
            assert op["name"] in own_nodes, (cell.name, op)
            by_node.setdefault(op["name"], []).append({k: op[k] for k in ("op", "path", "value") if k in op})
        elif op.get("kind") == "Pod" and op.get("op") == "delete":
            assert op["namespace"] == cell.namespace and op["name"] in own_pods, (cell.name, op)
            core.delete_namespaced_pod(op["name"], op["namespace"], grace_period_seconds=0)
        else:
            raise AssertionError(f"{cell.name}: an operation this test does not apply: {op}")
    for name, ops in by_node.items():
        core.patch_node(name, ops)


def dra_cleanup(core, namespace: str, run: str, classes: set[str]) -> None:
    """The run's ResourceClaims (their delete-protection finalizer stripped: PreBind added it),
    ResourceSlices and the DeviceClasses named (those a suggestion created)."""
    raw = Raw(core.api_client)
    sel = {"labelSelector": f"e2e-seeded={run}"}
    for c in (raw.req("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims", query=sel) or {}).get("items", []):
        if c["metadata"].get("finalizers"):
            raw.req("PATCH", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{c['metadata']['name']}",
                    {"metadata": {"finalizers": None}}, patch=True, missing_ok=True)
    raw.req("DELETE", f"{RESOURCE}/namespaces/{namespace}/resourceclaims", query=sel)
    raw.req("DELETE", f"{RESOURCE}/resourceslices", query=sel)
    for name in sorted(classes):
        raw.req("DELETE", f"{RESOURCE}/deviceclasses/{name}", missing_ok=True)


def pmap(fn, items, workers: int = 8) -> list:
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(fn, items))


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


# ----------------------------------------------------------------------------- the test
@pytest.fixture
def seeded_classes(api):
    yield from priority_classes(api, {GUARD: (1_000_000, None), LOW: (10, None), NEVER: (1000, "Never"),
                                      HIGH: (1000, None)})


def test_seeded_pending_pods_get_a_suggestion_that_places_them(cluster, core, namespace, crd, policies,
                                                                 seeded_classes):
    kinds = [k for k in os.environ.get("SUGGESTIONS_KINDS", ",".join(KINDS)).split(",") if k]
    assert set(kinds) <= set(KINDS), kinds
    count = max(COUNT, 2) if "spread" in kinds else COUNT
    run = f"{os.getpid() % 10000}"
    ops = f"ops-seeded-{run}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ops)))
    plugins = example_plugins("default")
    for p in plugins:
        if p["name"] == "NodeAffinity":
            p["args"] = {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "e2e-seeded", "operator": "In", "values": [run]}]}]}}}
    apply_policy(policies, POLICY, plugins, schedulerName=SCHED)
    # also a second policy every pod of the namespace may use: UsePolicy is tried for every pod
    # (it never places one here: the same filters)
    apply_policy(policies, NO_PREEMPTION, [p for p in plugins if p["name"] != "DefaultPreemption"],
                 schedulerName=SCHED)
    # the DeviceClass of the claims kind's claims that exist (DRIVER's devices)
    classes = {f"sd{run}-devices"}
    Raw(core.api_client).create(f"{RESOURCE}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": f"sd{run}-devices"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    # the search's share of the loop raised from 5 % (hundreds of pods fail within a second here);
    # its per-pod budget is the default's
    op = OperatorProcess(cluster, SCHED, extra=["--default-policy", POLICY, "--revision-namespace", ops,
                                                "--suggestion-share", "0.5"])
    print(f"\nseed {SEED}, {count} pods per kind, kinds {','.join(kinds)}")
    figures: dict[str, dict] = {}
    try:
        op.start()
        wait_for(lambda: "successfully acquired lease" in op.log(), 30, what="the operator leads")
        wait_for(lambda: all((ready_condition(policies, n) or {}).get("status") == "True"
                             for n in (POLICY, NO_PREEMPTION)), 30, what="the policies Ready")
        for kind in kinds:
            rng = random.Random(f"{SEED}-{kind}")
            figures[kind] = one_kind(cluster, core, op, namespace, ops, run, kind, count, rng, classes)
    finally:
        op.stop()
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        core.delete_collection_node(label_selector=f"e2e-seeded={run}")
        core.delete_collection_namespaced_persistent_volume_claim(namespace)
        dra_cleanup(core, namespace, run, classes)
        core.delete_namespace(ops)
        for name in (POLICY, NO_PREEMPTION):
            policies.delete_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies", name)
        report(figures)
    for kind, f in figures.items():
        assert f["with"] >= SHARE * f["pods"], (kind, f, "pods without a suggestion", f["missing"][:10])
        assert not f["failed"], (kind, "applied suggestions that did not place the pod", f["failed"][:10])
        assert not f["unexpected"], (kind, "top suggestions of another kind than expected", f["unexpected"][:10])


def report(figures: dict[str, dict]) -> None:
    print(f"{'kind':<11} {'pods':>5} {'sugg':>5} {'explain':>7} {'applied':>8} {'ok':>5} {'p50 s':>6} {'p95 s':>6} "
          f"{'kind s':>7}  top kinds")
    for kind, f in figures.items():
        print(f"{kind:<11} {f['pods']:>5} {f['with']:>5} {f['explained']:>7} {f['applied']:>8} {f['ok']:>5} "
              f"{f['p50']:>6.2f} "
              f"{f['p95']:>6.2f} {f['seconds']:>7.1f}  {json.dumps(f['tops'], sort_keys=True)}")
        print(f"{'':<11} phases (s since the kind began): {f['marks']}")


def one_kind(cluster, core, op, namespace: str, ops: str, run: str, kind: str, count: int, rng: random.Random,
             classes: set[str]) -> dict:
    t_kind = time.monotonic()
    cells = [Cell(kind, i, run, namespace) for i in range(count)]
    expected = {c.name: KINDS[kind](c, rng) for c in cells}
    by_name = {c.name: c for c in cells}
    classes.update(n for c in cells for n in c.classes)  # cleaned up at the end whatever happens
    pmap(core.create_node, [n for c in cells for n in c.nodes])
    pmap(lambda b: core.create_namespaced_persistent_volume_claim(namespace, b), [b for c in cells for b in c.claims])
    raw = Raw(core.api_client)
    pmap(lambda pb: raw.create(*pb), [pb for c in cells for pb in c.dra])
    pmap(lambda b: core.create_namespaced_pod(namespace, b), [p for c in cells for p in c.placed])

    created: dict[str, float] = {}

    def create(c: Cell) -> None:
        core.create_namespaced_pod(namespace, c.pod)
        created[c.name] = time.monotonic()

    marks = {"setup": time.monotonic() - t_kind}
    pmap(create, cells)
    # the suggestions condition of every pod, polled with list calls
    seen: dict[str, float] = {}
    docs: dict[str, dict] = {}
    bodies: dict[str, dict] = {}
    # explain -o json for a sample: the first as a command of its own (in the background, started
    # once its condition is there), the others through the command's entry point in this process
    order = rng.sample([c.name for c in cells], min(EXPLAIN, count))
    sample, first = set(order), order[:1]
    explaining = ThreadPoolExecutor(1)
    explained: dict = {}
    deadline = time.monotonic() + WAIT_SUGGESTIONS
    while len(seen) < count and time.monotonic() < deadline:
        op.assert_running()
        for body in raw_list(core, namespace, f"e2e-kind={kind}"):
            name = body["metadata"]["name"]
            got = suggestions_condition(body)
            if name in seen or got is None:
                continue
            seen[name] = time.monotonic()
            docs[name] = got[1]
            bodies[name] = body
            if name in first:
                explained[name] = explaining.submit(explain, cluster, namespace, name, ops)
        time.sleep(0.25)
    with_sugg = [n for n in docs if docs[n].get("suggestions")]
    missing = sorted(({c.name for c in cells} - set(with_sugg)),
                     key=lambda n: int(n.rsplit("-", 1)[1]))
    missing_why = [(n, {k: docs[n].get(k) for k in ("reason", "partial", "blockers")} if n in docs else "no condition")
                   for n in missing]
    marks["suggested"] = time.monotonic() - t_kind
    # the top suggestion of each applied (the cells are independent): the sampled pods' once
    # explain has read them
    tops: dict[str, int] = {}
    unexpected = []
    fixed: dict[str, str] = {}  # the pod to watch -> the cell

    def apply(name: str) -> None:
        top = docs[name]["suggestions"][0]
        cell = by_name[name]
        if top["target"] == "Pod":
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            core.create_namespaced_pod(namespace, recreated(bodies[name], top["patch"], f"{name}-f"))
            fixed[f"{name}-f"] = name
        else:
            apply_cluster(core, cell, top["patch"])
            fixed[name] = name

    for name in with_sugg:
        k = docs[name]["suggestions"][0]["kind"]
        change = docs[name]["suggestions"][0]["change"]
        label = k + ("/no-DefaultPreemption" if "no DefaultPreemption" in change else
                     "/Never" if "preemptionPolicy: Never" in change else "")
        tops[label] = tops.get(label, 0) + 1
        if k not in expected[name]:
            unexpected.append((name, docs[name]["suggestions"][0]))
    pmap(apply, [n for n in with_sugg if n not in sample])
    for name in order[1:]:
        if name in docs:
            explained[name] = explain_here(cluster, namespace, name, ops)
    marks["explained here"] = time.monotonic() - t_kind
    explaining.shutdown(wait=True)
    for name, got in explained.items():  # the same suggestions as the condition's, verified
        ex = got if isinstance(got, dict) else got.result()
        assert ex["suggestionsVerified"] is True, (name, ex.get("suggestionsTrust"))
        assert ex["suggestions"] == docs[name], (name, ex["suggestions"], docs[name])
        if docs[name].get("suggestions"):
            assert ex["suggestions"]["suggestions"], (name, ex)
    marks["explained"] = time.monotonic() - t_kind
    pmap(apply, [n for n in with_sugg if n in sample])
    bound: dict[str, dict] = {}
    deadline = time.monotonic() + WAIT_BOUND
    while len(bound) < len(fixed) and time.monotonic() < deadline:
        op.assert_running()
        for body in raw_list(core, namespace, f"e2e-kind={kind}"):
            if body["metadata"]["name"] in fixed and body["spec"].get("nodeName"):
                bound[body["metadata"]["name"]] = body
        time.sleep(0.25)
    if len(bound) < len(fixed):  # where the operator is, for the failure below
        print(f"\n{kind}: {len(fixed) - len(bound)} pods not bound in {WAIT_BOUND:.0f}s; the operator's stacks:\n"
              f"{op.stacks()[-8000:]}\nits log's tail:\n{op.log()[-4000:]}")
    failed = []
    for watched, name in fixed.items():
        top = docs[name]["suggestions"][0]
        body = bound.get(watched)
        if body is None:
            failed.append((name, "not bound", top))
            continue
        where = body["spec"]["nodeName"]
        if DECISION not in (body["metadata"].get("annotations") or {}):  # bound by this test's operator
            failed.append((name, "bound without the operator's decision", top))
            continue
        if where == top["node"]:
            continue
        decision = json.loads((body["metadata"].get("annotations") or {}).get(DECISION, "{}"))
        totals = {t["node"]: t["total"] for t in decision.get("top", [])}
        if top["score"] is None or totals.get(where) != top["score"]:
            failed.append((name, f"bound on {where}", top, decision.get("top")))
    marks["bound"] = time.monotonic() - t_kind
    delays = [seen[n] - created[n] for n in seen]
    # clean up the kind: its pods, claims and nodes
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    core.delete_collection_node(label_selector=f"e2e-seeded={run}")
    if any(c.claims for c in cells):
        core.delete_collection_namespaced_persistent_volume_claim(namespace)
    wait_for(lambda: not core.list_namespaced_pod(namespace, limit=1).items, 60, 0.5, what="the kind's pods gone")
    if any(c.dra for c in cells):
        dra_cleanup(core, namespace, run, {n for c in cells for n in c.classes})
    return {"pods": count, "with": len(with_sugg), "explained": len(explained), "applied": len(fixed),
            "ok": len(fixed) - len(failed),
            "p50": percentile(delays, 0.5), "p95": percentile(delays, 0.95), "seconds": time.monotonic() - t_kind,
            "tops": tops, "marks": {k: round(v, 1) for k, v in marks.items()}, "missing": missing_why,
            "failed": failed, "unexpected": unexpected}
