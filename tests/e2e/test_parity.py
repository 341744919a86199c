"""Parity with upstream: the same seeded nodes and pods placed by kube-scheduler (default profile,
built in hack/) and by policy-scheduler under the `default` policy land on the same node wherever
the best node is unique.

Pods are created one at a time. Each is first scheduled by policy-scheduler, its node and decision
annotation recorded, and deleted; then the same pod is scheduled by kube-scheduler and kept. So both
schedulers decide every pod on the same state: the placements kube-scheduler made so far. The
ordering needs no sleeps: pod events reach a watcher in resourceVersion order, so a scheduler that
sees pod i+1 has already seen pod i bound (and its twin deleted).

The best node is unique when the decision's top total beats the runner-up (or only one node is
feasible); a tie is broken at random by both schedulers, so ties are counted but not compared.
At most 100 nodes exist, so upstream scores every feasible node (no sampling).
"""

from __future__ import annotations

import json
import os
import random
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes.client.rest import ApiException

from helpers import apply_policy, ready_condition, wait_for

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("PARITY_SEED", "20240611"))  # other seeds: PARITY_SEED=<n>
NUM_NODES = 36
NUM_PODS = 120
MAX_NODES = 100  # upstream scores every feasible node below this (numFeasibleNodesToFind)
ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
ZONES = ("zone-a", "zone-b", "zone-c")
APPS = ("web", "api", "db", "cache", "batch")
MB = 1024 * 1024
IMAGES = {  # name -> size on the nodes that have it
    "registry.local/parity/base:1": 40 * MB,
    "registry.local/parity/web:2": 180 * MB,
    "registry.local/parity/db:14": 450 * MB,
    "registry.local/parity/ml:3": 900 * MB,
    "registry.local/parity/huge:1": 2500 * MB,
}
UNCACHED = "registry.local/parity/fresh:1"
DECISION = "policy-scheduler.io/decision"
OURS, UPSTREAM = "policy-scheduler", "default-scheduler"


# ---------------------------------------------------------------------------------------------
# the seeded world


def make_nodes(rng: random.Random, tag: str) -> list[dict]:
    nodes = []
    for i in range(NUM_NODES):
        name = f"parity-{tag}-{i:02d}"
        labels = {HOST: name, "parity": tag, "disk": rng.choice(("ssd", "hdd"))}
        if rng.random() > 0.06:  # a few nodes have no zone: DoNotSchedule zone spread rejects them
            labels[ZONE] = ZONES[i % 3]
        taints = []
        if rng.random() < 0.2:
            taints.append({"key": "dedicated", "value": "infra", "effect": "PreferNoSchedule"})
        if rng.random() < 0.12:
            taints.append({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
        if rng.random() < 0.15:
            taints.append({"key": "team", "value": "ml", "effect": "NoSchedule"})
        images = [{"names": [img, f"{img.split(':')[0]}@sha256:{secrets.token_hex(32)}"], "sizeBytes": size}
                  for img, size in IMAGES.items() if rng.random() < 0.3]
        alloc = {"cpu": str(rng.choice((2, 4, 8, 16))), "memory": f"{rng.choice((4, 8, 16, 32, 64))}Gi",
                 "pods": "110"}
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {"capacity": alloc, "allocatable": alloc, "images": images,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "plain Node object"}]},
        })
    return nodes


def make_pod_spec(rng: random.Random, tag: str) -> tuple[dict, dict]:
    """(labels, spec without schedulerName) of one seeded pod."""
    app = rng.choice(APPS)
    labels = {"app": app, "parity": tag}
    sel = {"matchLabels": {"app": app, "parity": tag}}
    containers = []
    for c in range(rng.choice((1, 1, 1, 2))):
        ctr = {"name": f"c{c}", "image": rng.choice((*IMAGES, UNCACHED, UNCACHED))}
        if rng.random() > 0.15:  # some containers request nothing: scoring then uses 100m / 200Mi
            req = {"cpu": rng.choice(("100m", "250m", "500m", "1", "1500m", "3")),
                   "memory": rng.choice(("128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "6Gi"))}
            if rng.random() < 0.2:
                req.pop(rng.choice(("cpu", "memory")))
            ctr["resources"] = {"requests": req}
        containers.append(ctr)
    spec: dict = {"containers": containers, "nodeSelector": {"parity": tag}, "terminationGracePeriodSeconds": 0}

    tolerations = []
    if rng.random() < 0.3:
        tolerations.append({"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"})
    if rng.random() < 0.25:
        tolerations.append({"key": "dedicated", "operator": "Exists"})
    if rng.random() < 0.04:
        tolerations.append({"operator": "Exists"})
    if tolerations:
        spec["tolerations"] = tolerations

    affinity: dict = {}
    node_aff: dict = {}
    r = rng.random()
    if r < 0.12:
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}
    elif r < 0.2:
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": [rng.choice(ZONES)]}]},
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}
    if rng.random() < 0.4:
        prefs = [{"weight": rng.randint(1, 100), "preference": {"matchExpressions": [
            {"key": "disk", "operator": "In", "values": [rng.choice(("ssd", "hdd"))]}]}}]
        if rng.random() < 0.5:
            prefs.append({"weight": rng.randint(1, 100), "preference": {"matchExpressions": [
                {"key": ZONE, "operator": "In", "values": [rng.choice(ZONES)]}]}})
        node_aff["preferredDuringSchedulingIgnoredDuringExecution"] = prefs
    if node_aff:
        affinity["nodeAffinity"] = node_aff

    anti: dict = {}
    if rng.random() < 0.2:
        anti["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(10, 100), "podAffinityTerm": {"topologyKey": HOST, "labelSelector": sel}}]
    if rng.random() < 0.05:
        anti["requiredDuringSchedulingIgnoredDuringExecution"] = [{"topologyKey": HOST, "labelSelector": sel}]
    if anti:
        affinity["podAntiAffinity"] = anti
    if rng.random() < 0.08:
        affinity["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": rng.randint(10, 100), "podAffinityTerm": {"topologyKey": ZONE, "labelSelector": {
                "matchLabels": {"app": rng.choice(APPS), "parity": tag}}}}]}
    if affinity:
        spec["affinity"] = affinity

    spread = []
    r = rng.random()
    if r < 0.2:
        spread.append({"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                       "labelSelector": sel})
    elif r < 0.4:
        spread.append({"maxSkew": rng.choice((1, 2)), "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
                       "labelSelector": sel})
    if rng.random() < 0.12:
        spread.append({"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway",
                       "labelSelector": sel})
    if spread:
        spec["topologySpreadConstraints"] = spread
    return labels, spec


def summary(spec: dict) -> str:
    """One line describing what a pod asks for."""
    reqs = [",".join(f"{k}={v}" for k, v in (c.get("resources") or {}).get("requests", {}).items()) or "-"
            for c in spec["containers"]]
    images = " ".join(c["image"].rsplit("/", 1)[1] for c in spec["containers"])
    parts = [f"req[{' | '.join(reqs)}]", f"img[{images}]"]
    if spec.get("tolerations"):
        tols = " ".join(f"{t.get('key', '*')}:{t.get('effect', '*')}" for t in spec["tolerations"])
        parts.append(f"tol[{tols}]")
    aff = spec.get("affinity") or {}
    na = aff.get("nodeAffinity") or {}
    if "requiredDuringSchedulingIgnoredDuringExecution" in na:
        parts.append("nodeAff.req")
    if "preferredDuringSchedulingIgnoredDuringExecution" in na:
        parts.append("nodeAff.pref" + str([(p["weight"], p["preference"]["matchExpressions"][0]["values"][0])
                                           for p in na["preferredDuringSchedulingIgnoredDuringExecution"]]))
    for kind in ("podAffinity", "podAntiAffinity"):
        for mode, terms in (aff.get(kind) or {}).items():
            parts.append(f"{kind}.{mode[:4]}x{len(terms)}")
    for c in spec.get("topologySpreadConstraints") or []:
        parts.append(f"spread[{c['topologyKey'].rsplit('/', 1)[1]} skew={c['maxSkew']} {c['whenUnsatisfiable']}]")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# driving the two schedulers


@dataclass
class Outcome:
    index: int
    labels: dict
    spec: dict
    ours: str | None = None
    decision: dict | None = None
    upstream: str | None = None
    messages: list[str] = field(default_factory=list)  # FailedScheduling messages, ours then upstream's

    @property
    def unique_best(self) -> bool:
        top = (self.decision or {}).get("top") or []
        return len(top) == 1 or (len(top) > 1 and top[0]["total"] > top[1]["total"])


def settled_pod(core, namespace: str, name: str, timeout: float):
    """The pod once it is bound or its scheduler marked it unschedulable (PodScheduled=False)."""

    def check():
        p = core.read_namespaced_pod(name, namespace)
        rejected = any(c.type == "PodScheduled" and c.status == "False" for c in (p.status.conditions or []))
        return p if p.spec.node_name or rejected else None

    return wait_for(check, timeout, 0.03, what=f"{namespace}/{name} bound or unschedulable")


def unschedulable_message(pod) -> str:
    return next((c.message for c in pod.status.conditions or [] if c.type == "PodScheduled"), "")


def delete_and_wait(core, namespace: str, name: str) -> None:
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def gone() -> bool:
        try:
            core.read_namespaced_pod(name, namespace)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for(gone, 30, 0.03, what=f"{namespace}/{name} deleted")


def pod_body(name: str, namespace: str, scheduler: str, labels: dict, spec: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {**json.loads(json.dumps(spec)), "schedulerName": scheduler}}


def place(core, namespace: str, name: str, scheduler: str, labels: dict, spec: dict, timeout: float = 30.0):
    core.create_namespaced_pod(namespace, pod_body(name, namespace, scheduler, labels, spec))
    return settled_pod(core, namespace, name, timeout)


def report(outcomes: list[Outcome]) -> tuple[int, int, list[Outcome]]:
    unique = [o for o in outcomes if o.unique_best]
    agree = [o for o in unique if o.ours == o.upstream]
    bad = [o for o in unique if o.ours != o.upstream]
    ties = [o for o in outcomes if o.decision and not o.unique_best]
    unplaced = [o for o in outcomes if o.ours is None or o.upstream is None]
    # unschedulable for both: the same "0/N nodes are available: ..." histogram; upstream appends
    # its preemption outcome, as the default policy (DefaultPreemption) does
    mismatched = [o for o in unplaced if (o.ours is None) != (o.upstream is None)
                 or o.messages[0] != o.messages[1]]
    rate = 100.0 * len(agree) / len(unique) if unique else 0.0
    print(f"\nparity: {len(outcomes)} pods on {NUM_NODES} nodes (seed {SEED}); best node unique for "
          f"{len(unique)}, ties {len(ties)}, unschedulable for both {len(unplaced) - len(mismatched)}, "
          f"unschedulable for one or for other reasons {len(mismatched)}")
    print(f"parity: agreement on unique-best pods {len(agree)}/{len(unique)} = {rate:.1f}%; "
          f"same node on ties {sum(o.ours == o.upstream for o in ties)}/{len(ties)}")
    mattered: dict[str, int] = {}  # plugin -> unique-best pods where it scored the top two nodes apart
    for o in unique:
        top = o.decision["top"]
        for plugin in top[0]["scores"] if len(top) > 1 else ():
            if top[0]["scores"][plugin] != top[1]["scores"].get(plugin):
                mattered[plugin] = mattered.get(plugin, 0) + 1
    print("parity: plugins separating the best node from the runner-up: "
          + ", ".join(f"{k} {v}" for k, v in sorted(mattered.items())))
    for o in unplaced:
        print(f"  {'UNSCHEDULABLE' if o in mismatched else 'unschedulable'} pod {o.index:02d} ours={o.ours} "
              f"upstream={o.upstream}: {summary(o.spec)}")
        for m in o.messages:
            print(f"    {m}")
    for o in bad:
        print(f"  DISAGREE pod {o.index:02d} app={o.labels['app']}: ours={o.ours} upstream={o.upstream}\n"
              f"    {summary(o.spec)}\n    feasible={o.decision.get('feasible')}")
        for t in o.decision["top"]:
            print(f"    {t['node']}: total={t['total']} {t['scores']}")
    return len(agree), len(unique), bad + mismatched


def test_same_placements_as_kube_scheduler(cluster, core, operator, policies, namespace):
    existing = len(core.list_node().items)
    assert existing + NUM_NODES <= MAX_NODES, (
        f"{existing} nodes already exist: with {NUM_NODES} more, upstream would sample nodes instead of scoring all")
    default = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
    apply_policy(policies, "default", default["spec"]["plugins"])
    wait_for(lambda: (ready_condition(policies, "default") or {}).get("status") == "True", 30,
             what="policy default Ready")
    started = "kube-scheduler" not in cluster.state.get("procs", {})
    if started:
        cluster.start_scheduler()

    rng = random.Random(SEED)
    tag = f"run-{secrets.token_hex(3)}"
    nodes = make_nodes(rng, tag)
    pods = [make_pod_spec(rng, tag) for _ in range(NUM_PODS)]
    outcomes: list[Outcome] = []
    try:
        for n in nodes:
            core.create_node(n)
        # both schedulers have every node once they bind a pod that only the last node admits
        # (node events arrive in order); the probes are gone before the first parity pod
        last = nodes[-1]["metadata"]["name"]
        probe = {"containers": [{"name": "c", "image": UNCACHED}], "nodeSelector": {HOST: last},
                 "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0}
        for sched in (OURS, UPSTREAM):
            name = f"probe-{sched}"
            got = place(core, namespace, name, sched, {}, probe, timeout=60)
            assert got.spec.node_name == last, f"{sched} did not see the parity nodes"
            delete_and_wait(core, namespace, name)

        for i, (labels, spec) in enumerate(pods):
            o = Outcome(i, labels, spec)
            ours = place(core, namespace, f"p{i:02d}-ours", OURS, labels, spec)
            if ours.spec.node_name:
                o.ours = ours.spec.node_name
                o.decision = json.loads((ours.metadata.annotations or {})[DECISION])
            else:
                o.messages.append(unschedulable_message(ours))
            delete_and_wait(core, namespace, f"p{i:02d}-ours")
            up = place(core, namespace, f"p{i:02d}-upstream", UPSTREAM, labels, spec)
            if up.spec.node_name:
                o.upstream = up.spec.node_name
            else:  # pending pods count nowhere; delete it anyway so both schedulers see exactly the same
                o.messages.append(unschedulable_message(up))
                delete_and_wait(core, namespace, f"p{i:02d}-upstream")
            outcomes.append(o)
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60, what="parity pods deleted")
        for n in nodes:
            try:
                core.delete_node(n["metadata"]["name"])
            except ApiException as e:
                if e.status != 404:
                    raise
        if started:
            cluster.stop("kube-scheduler")

    agree, unique, bad = report(outcomes)
    assert unique >= NUM_PODS // 2, f"only {unique} of {NUM_PODS} pods had a unique best node"
    assert not bad, f"placements differ from kube-scheduler's on {len(bad)} pods (agreement {agree}/{unique})"
