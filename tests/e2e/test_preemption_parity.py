"""Preemption against upstream: seeded cases of full nodes holding pods of several priorities, some
covered by PodDisruptionBudgets, then one higher-priority pod, preempting under kube-scheduler
v1.37.1 (built in hack/, default profile) and under policy-scheduler's `default` policy.

Each case's world (nodes, bound pods, PDBs with a set status) is built three times: twice for
kube-scheduler, once for policy-scheduler. Where upstream's outcome agrees with itself across
its two runs (its ties are broken at random), ours must be the same: the nominated node, the set
of victims (pods marked for deletion), or the same FailedScheduling message when nothing can be
preempted. Nodes have no kubelet, so victims stay terminating and the outcome stays visible.
"""

from __future__ import annotations

import os
import random
import re
import secrets
from dataclasses import dataclass

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from helpers import events_for, priority_classes, wait_for

SEED = int(os.environ.get("PREEMPTION_PARITY_SEED", "20261124"))
CASES = 10
OURS, UPSTREAM = "policy-scheduler", "default-scheduler"
PRIORITIES = {"pp-10": 10, "pp-20": 20, "pp-30": 30, "pp-1000": 1000, "pp-1000-never": 1000}


@dataclass
class Case:
    nodes: int
    fillers: list[tuple[int, str, str, bool]]  # node index, cpu, priority class, guarded by the PDB
    pdb_allowed: int
    preemptor_cpu: str
    never: bool
    starts: list[str]  # status.startTime of each filler


@dataclass
class Outcome:
    node: int | None  # nominated (or bound) node index
    victims: frozenset[str]  # filler names (world-independent)
    message: str  # the first FailedScheduling message, preemption suffix included

    def key(self):
        return (self.node, self.victims, self.message)


def make_case(rng: random.Random) -> Case:
    n = rng.randint(2, 4)
    fillers = []
    for j in range(n):
        used = 0
        while used < 4000:  # every node exactly full: the preemptor fits nowhere without preempting
            cpu = rng.choice([c for c in (500, 1000, 1500) if used + c <= 4000])
            used += cpu
            fillers.append((j, f"{cpu}m", rng.choice(("pp-10", "pp-20", "pp-30")), rng.random() < 0.3))
    roll = rng.random()
    big = "5" if roll < 0.1 else rng.choice(("1", "1500m", "2", "3"))
    minutes = rng.sample(range(len(fillers) * 3), len(fillers))
    starts = [f"2026-01-01T{m // 60:02d}:{m % 60:02d}:00Z" for m in minutes]
    return Case(n, fillers, rng.choice((0, 0, 1)), big, 0.1 <= roll < 0.2, starts)


@pytest.fixture(scope="module")
def pclasses(api):
    yield from priority_classes(api, {name: (value, "Never" if name.endswith("-never") else None)
                                      for name, value in PRIORITIES.items()})


def run_world(api, core, namespace: str, case: Case, scheduler: str, tag: str) -> Outcome:
    """Build the case's world under ``tag``, let ``scheduler`` handle the preemptor, tear down."""
    policy_api = client.PolicyV1Api(api)
    node_names = [f"pp-{tag}-{j}" for j in range(case.nodes)]
    for name in node_names:
        alloc = {"cpu": "4", "memory": "16Gi", "pods": "110"}
        core.create_node({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "pp": tag}},
                          "status": {"capacity": alloc, "allocatable": alloc, "conditions": [
                              {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}]}})
    try:
        for k, (j, cpu, pclass, guarded) in enumerate(case.fillers):
            filler = f"{tag}-f{k:02d}"
            core.create_namespaced_pod(namespace, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": filler, "labels": {"pp": tag, **({"guard": tag} if guarded else {})}},
                "spec": {"nodeName": node_names[j], "priorityClassName": pclass,
                         "containers": [{"name": "c", "image": "registry.local/app:1",
                                         "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}})
            # no kubelet: the case's start time, so "the more recently started victims" is decided
            core.patch_namespaced_pod_status(filler, namespace, {"status": {"startTime": case.starts[k]}})
        pdb = policy_api.create_namespaced_pod_disruption_budget(namespace, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": f"{tag}-pdb"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"guard": tag}}}})
        # no disruption controller runs here: the status is what the test says
        policy_api.patch_namespaced_pod_disruption_budget_status(f"{tag}-pdb", namespace, {"status": {
            "disruptionsAllowed": case.pdb_allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1,
            "observedGeneration": pdb.metadata.generation}})
        # the scheduler has seen every node and filler once it binds a probe only the last node
        # admits (node and pod events each arrive in order); the probe requests nothing
        probe = f"{tag}-probe"
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": probe, "labels": {"pp": tag}},
            "spec": {"schedulerName": scheduler, "nodeSelector": {"kubernetes.io/hostname": node_names[-1]},
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.local/app:1"}]}})
        wait_for(lambda: core.read_namespaced_pod(probe, namespace).spec.node_name, 60, 0.1,
                 what=f"{scheduler} to see the world")
        core.delete_namespaced_pod(probe, namespace, grace_period_seconds=0)
        wait_for(lambda: probe not in {p.metadata.name for p in core.list_namespaced_pod(
            namespace, label_selector=f"pp={tag}").items}, 30, 0.1, what="the probe gone")
        name = f"{tag}-pre"
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"pp": tag}},
            "spec": {"schedulerName": scheduler, "priorityClassName": "pp-1000-never" if case.never else "pp-1000",
                     "nodeSelector": {"pp": tag},
                     "containers": [{"name": "c", "image": "registry.local/app:1",
                                     "resources": {"requests": {"cpu": case.preemptor_cpu, "memory": "64Mi"}}}]}})

        found = re.compile(r"preemption: found a potential placement for pod on node (\S+), preempting (\d+) victims")

        def terminating() -> frozenset[str]:
            return frozenset(p.metadata.name.rsplit("-", 1)[1] for p in core.list_namespaced_pod(
                namespace, label_selector=f"pp={tag}").items
                if p.metadata.deletion_timestamp and p.metadata.name not in (name, probe))

        def settled():
            ev = events_for(core, namespace, name, "FailedScheduling")
            msg = ev[0].message if ev else None  # the first attempt's message
            if msg is None or "preemption:" not in msg:
                return None
            m = found.search(msg)
            if m is None:  # nothing preempted
                return None, terminating(), msg
            nominated = core.read_namespaced_pod(name, namespace).status.nominated_node_name
            victims = terminating()
            if nominated != m.group(1) or len(victims) != int(m.group(2)):
                return None  # the nomination and the deletions are on their way
            return node_names.index(nominated), victims, msg

        try:
            node, victims, msg = wait_for(settled, 60, 0.2, what=f"{scheduler}'s outcome for {name}")
        except AssertionError as e:
            p = core.read_namespaced_pod(name, namespace)
            raise AssertionError(f"{e}; nominated {p.status.nominated_node_name}, node {p.spec.node_name}, "
                                 f"terminating {sorted(terminating())}, events "
                                 f"{[(x.reason, x.message) for x in events_for(core, namespace, name)]}") from None
        return Outcome(node, victims, msg.replace(tag, "<tag>"))
    finally:
        core.delete_collection_namespaced_pod(namespace, label_selector=f"pp={tag}", grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector=f"pp={tag}").items, 60,
                 what="the world's pods gone")
        try:
            policy_api.delete_namespaced_pod_disruption_budget(f"{tag}-pdb", namespace)
        except ApiException:
            pass
        for n in node_names:
            core.delete_node(n)


def test_same_preemption_as_kube_scheduler(cluster, api, core, namespace, operator, example_policies,
                                           pclasses):
    started = "kube-scheduler" not in cluster.state.get("procs", {})
    if started:
        cluster.start_scheduler()
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
            if up1.key() != up2.key():
                lines.append(f"  case {i}: upstream not unique ({up1.key()} / {up2.key()})")
                continue
            unique += 1
            same = ours.key() == up1.key()
            agree += same
            lines.append(f"  case {i}: {'same' if same else 'DIFFERENT'}: upstream {up1.key()}"
                         + ("" if same else f"; ours {ours.key()}"))
    finally:
        if started:
            cluster.stop("kube-scheduler")
    print(f"\npreemption parity: {CASES} cases (seed {SEED}); upstream unique on {unique}; "
          f"same outcome (node, victims, message) on {agree}/{unique}"
          f" = {100.0 * agree / unique if unique else 0:.0f}%")
    print("\n".join(lines))
    assert unique >= CASES // 2
    assert agree == unique, "\n".join(lines)
