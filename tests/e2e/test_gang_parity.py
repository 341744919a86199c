"""Native gangs against upstream: seeded cases of racks (nodes labelled `rack`, racks of distinct
sizes) and one scheduling.k8s.io PodGroup of n pods (gang minCount n, with or without
`topology: [{key: rack}]`, some too big for any rack), scheduled by kube-scheduler v1.37.1 (built
in hack/, started with the cluster's GenericWorkload and TopologyAwareWorkloadScheduling gates)
and by policy-scheduler's `gang` policy.

Each case's world is built three times: twice for kube-scheduler, once for policy-scheduler.
Racks have distinct sizes (upstream breaks ties between placements at random). Where upstream's
outcome agrees with itself across its two runs, ours must be the same: whether the group is
bound whole (or not at all), and in which rack. The agreement rate is printed.
"""

from __future__ import annotations

import os
import random
import secrets
import time
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from helpers import events_for, wait_for

SEED = int(os.environ.get("GANG_PARITY_SEED", "20261124"))
CASES = int(os.environ.get("GANG_PARITY_CASES", "12"))
OURS, UPSTREAM = "policy-scheduler", "default-scheduler"
GROUP, PLURAL = "scheduling.k8s.io", "podgroups"
VERSION = localcluster.GANG_API_VERSION
KEY = "rack"


@dataclass
class Case:
    racks: list[tuple[int, str]]  # per rack: number of nodes, node cpu
    pods: int
    cpu: str
    topology: bool


# racks of distinct total cpu: upstream breaks ties between equal placements at random
RACKS = [(2, "4"), (3, "4"), (4, "4"), (3, "8"), (4, "8")]  # 8, 12, 16, 24, 32 cpu


def make_case(rng: random.Random) -> Case:
    racks = rng.sample(RACKS, rng.randint(2, 3))
    return Case(racks, rng.randint(2, 8), rng.choice(("2", "4")), rng.random() < 0.8)


def run_world(api, core, namespace: str, case: Case, scheduler: str, tag: str):
    """Build the case's world under ``tag``; returns (bound whole, racks of the bound pods, or
    None without a topology key; number bound)."""
    objs = client.CustomObjectsApi(api)
    node_names = []
    for r, (count, cpu) in enumerate(case.racks):
        for i in range(count):
            name = f"gp-{tag}-r{r}-{i}"
            alloc = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
            core.create_node({"apiVersion": "v1", "kind": "Node",
                              "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "gp": tag,
                                                                    KEY: f"{tag}-r{r}"}},
                              "status": {"capacity": alloc, "allocatable": alloc, "conditions": [
                                  {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}]}})
            node_names.append(name)
    group = f"g-{tag}"
    spec: dict = {"schedulingPolicy": {"gang": {"minCount": case.pods}}}
    if case.topology:
        spec["schedulingConstraints"] = {"topology": [{"key": KEY}]}
    labels = {"gp": tag, **({"policy-scheduler.io/policy": "gang"} if scheduler == OURS else {})}
    try:
        objs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": group}, "spec": spec})
        # the scheduler has seen every node once it binds a probe only the last node admits
        probe = f"gp-{tag}-probe"
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": probe, "labels": labels},
            "spec": {"schedulerName": scheduler, "nodeSelector": {"kubernetes.io/hostname": node_names[-1]},
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.local/app:1"}]}})
        wait_for(lambda: core.read_namespaced_pod(probe, namespace).spec.node_name, 60, 0.1,
                 what=f"{scheduler} to see the world")
        core.delete_namespaced_pod(probe, namespace, grace_period_seconds=0)
        wait_for(lambda: probe not in {p.metadata.name for p in core.list_namespaced_pod(
            namespace, label_selector=f"gp={tag}").items}, 30, 0.1, what="the probe gone")
        names = [f"gp-{tag}-{i}" for i in range(case.pods)]
        for name in names:
            core.create_namespaced_pod(namespace, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                "spec": {"schedulerName": scheduler, "nodeSelector": {"gp": tag},
                         "schedulingGroup": {"podGroupName": group}, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "c", "image": "registry.local/app:1",
                                         "resources": {"requests": {"cpu": case.cpu, "memory": "64Mi"}}}]}})

        def bound() -> dict[str, str]:
            return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(
                namespace, label_selector=f"gp={tag}").items if p.spec.node_name}

        def settled():
            if len(bound()) == case.pods:
                return True
            return any(events_for(core, namespace, n, "FailedScheduling") for n in names) or None

        wait_for(settled, 60, 0.2, what=f"{scheduler}'s outcome for {group}")
        time.sleep(2.0)  # a failure: let whatever follows it happen
        placed = bound()
        racks = frozenset(int(n.split("-r")[-1].split("-")[0]) for n in placed.values()) if case.topology else None
        return len(placed) == case.pods, racks if placed else frozenset(), len(placed)
    finally:
        core.delete_collection_namespaced_pod(namespace, label_selector=f"gp={tag}", grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector=f"gp={tag}").items, 60,
                 what="the world's pods gone")
        try:
            objs.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, group)
        except ApiException:
            pass
        for n in node_names:
            core.delete_node(n)


def test_same_gang_placement_as_kube_scheduler(cluster, api, core, namespace, operator, example_policies):
    assert "GenericWorkload=true" in cluster.feature_gates, \
        "the e2e control plane must run with the GenericWorkload gate (hack/localcluster.py --gangs)"
    started = "kube-scheduler" not in cluster.state.get("procs", {})
    if started:
        cluster.start_scheduler()  # its default profile has the gang plugins with the cluster's gates
    rng = random.Random(SEED)
    cases = [make_case(rng) for _ in range(CASES)]
    run = secrets.token_hex(2)
    unique = agree = 0
    lines = []
    try:
        for i, case in enumerate(cases):
            up1 = run_world(api, core, namespace, case, UPSTREAM, f"{run}-{i}a")
            up2 = run_world(api, core, namespace, case, UPSTREAM, f"{run}-{i}b")
            ours = run_world(api, core, namespace, case, OURS, f"{run}-{i}c")
            desc = f"racks {case.racks}, {case.pods} x {case.cpu} cpu, topology {case.topology}"
            if up1 != up2:
                lines.append(f"  case {i} ({desc}): upstream not unique ({up1} / {up2}); ours {ours}")
                continue
            unique += 1
            same = ours == up1
            agree += same
            lines.append(f"  case {i} ({desc}): {'same' if same else 'DIFFERENT'}: upstream {up1}"
                         + ("" if same else f"; ours {ours}"))
    finally:
        if started:
            cluster.stop("kube-scheduler")
    print(f"\ngang parity: {CASES} cases (seed {SEED}); upstream unique on {unique}; same outcome (whole or "
          f"not, rack) on {agree}/{unique} = {100.0 * agree / unique if unique else 0:.0f}%")
    print("\n".join(lines))
    assert unique >= CASES // 2, "\n".join(lines)
    assert agree == unique, "\n".join(lines)
