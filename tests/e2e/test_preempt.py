"""DefaultPreemption in the operator: victims chosen, marked, deleted and told; the preemptor
nominated and bound; preemptionPolicy Never; PDBs; nothing evicted when eviction cannot help.
Nodes are kwok's, so a deleted victim really goes away."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from helpers import GROUP, PLURAL, VERSION, apply_policy, events_for, pod, priority_classes, wait_bound, wait_for

ROOT = Path(__file__).resolve().parents[2]
LABEL = "policy-scheduler.io/policy"
POLICY = "t-preempt"


@pytest.fixture(scope="module")
def priorities(api):
    yield from priority_classes(api, {"t-low": (100, None), "t-high": (1000, None), "t-high-never": (1000, "Never")})


@pytest.fixture
def preempt_policy(policies, operator):
    spec = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())["spec"]
    assert {"name": "DefaultPreemption"} in spec["plugins"]
    apply_policy(policies, POLICY, spec["plugins"])
    yield POLICY
    policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, POLICY)


def fill(core, namespace, nodes, pool: str, n_nodes: int, per_node: int, protected: set[str] = frozenset()):
    """``n_nodes`` kwok nodes of 2 cpu, each filled by ``per_node`` low-priority 1-cpu pods."""
    names = [nodes(f"{pool}-{i}", cpu="2", memory="8Gi", labels={"e2e": pool}, kwok=True) for i in range(n_nodes)]
    low = []
    for node_name in names:
        for j in range(per_node):
            name = f"low-{node_name}-{j}"
            labels = {LABEL: POLICY, "tier": "protected" if name in protected else "low"}
            core.create_namespaced_pod(namespace, pod(name, namespace, cpu="1", labels=labels,
                                                      priorityClassName="t-low", nodeName=node_name))
            low.append(name)
    wait_bound(core, namespace, low, 30)
    return names, low


def gone_or_terminating(core, namespace, name) -> bool:
    try:
        return core.read_namespaced_pod(name, namespace).metadata.deletion_timestamp is not None
    except ApiException as e:
        return e.status == 404


def test_a_high_priority_pod_preempts_and_binds(cluster, core, namespace, nodes, priorities, preempt_policy):
    names, low = fill(core, namespace, nodes, "pre-a", 2, 2)
    core.create_namespaced_pod(namespace, pod("high", namespace, cpu="1", labels={LABEL: POLICY},
                                              priorityClassName="t-high", nodeSelector={"e2e": "pre-a"}))
    t0 = time.monotonic()
    node = wait_bound(core, namespace, ["high"], 60)["high"]
    took = time.monotonic() - t0
    victims = [n for n in low if gone_or_terminating(core, namespace, n)]
    assert len(victims) == 1 and victims[0].startswith(f"low-{node}-"), (node, victims)
    ev = wait_for(lambda: events_for(core, namespace, victims[0], "Preempted"), 30, what="the Preempted event")
    uid = core.read_namespaced_pod("high", namespace).metadata.uid
    assert ev[0].message == f"Preempted by pod {uid} on node {node}"
    preempting = events_for(core, namespace, "high", "Preempting")
    assert preempting and f"on node {node}: {namespace}/{victims[0]}" in preempting[0].message
    print(f"\nhigh-priority pod bound {took:.1f}s after creation on {node}, preempting {victims[0]}")
    out = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "explain", f"{namespace}/high",
                          "--kubeconfig", str(cluster.kubeconfig_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"node:      {node}" in out.stdout
    assert f"preemption: Preempting 1 pod(s) on node {node}: {namespace}/{victims[0]}" in out.stdout, out.stdout


def test_preemption_policy_never_does_not_preempt(core, namespace, nodes, priorities, preempt_policy):
    names, low = fill(core, namespace, nodes, "pre-n", 1, 2)
    core.create_namespaced_pod(namespace, pod("polite", namespace, cpu="1", labels={LABEL: POLICY},
                                              priorityClassName="t-high-never", nodeSelector={"e2e": "pre-n"}))
    ev = wait_for(lambda: events_for(core, namespace, "polite", "FailedScheduling"), 30, what="FailedScheduling")
    assert "1 Insufficient cpu" in ev[0].message
    assert ev[0].message.endswith(". preemption: not eligible due to preemptionPolicy=Never."), ev[0].message
    time.sleep(1)
    assert not any(gone_or_terminating(core, namespace, n) for n in low)


def test_a_pdb_protected_victim_is_spared_when_another_node_will_do(api, core, namespace, nodes, priorities,
                                                                      preempt_policy):
    # node 0 holds a pod covered by a PodDisruptionBudget (no disruption allowed), node 1 none
    names, low = fill(core, namespace, nodes, "pre-p", 2, 2, protected={"low-pre-p-0-0", "low-pre-p-0-1"})
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(namespace, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guard"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"tier": "protected"}}}})
    time.sleep(1)  # the operator's PDB watch
    core.create_namespaced_pod(namespace, pod("high", namespace, cpu="1", labels={LABEL: POLICY},
                                              priorityClassName="t-high", nodeSelector={"e2e": "pre-p"}))
    assert wait_bound(core, namespace, ["high"], 60)["high"] == "pre-p-1"
    victims = [n for n in low if gone_or_terminating(core, namespace, n)]
    assert len(victims) == 1 and victims[0].startswith("low-pre-p-1-"), victims


def test_nothing_is_evicted_when_eviction_cannot_help(core, namespace, nodes, priorities, preempt_policy):
    names, low = fill(core, namespace, nodes, "pre-x", 2, 2)
    core.create_namespaced_pod(namespace, pod("giant", namespace, cpu="5", labels={LABEL: POLICY},
                                              priorityClassName="t-high", nodeSelector={"e2e": "pre-x"}))
    ev = wait_for(lambda: events_for(core, namespace, "giant", "FailedScheduling"), 30, what="FailedScheduling")
    # 5 cpu on 2-cpu nodes: UnschedulableAndUnresolvable everywhere, so no node is even tried
    m = re.fullmatch(r"0/(\d+) nodes are available: (.*)\. preemption: 0/(\d+) nodes are available: "
                     r"(\d+) Preemption is not helpful for scheduling\.", ev[0].message)
    assert m and m.group(1) == m.group(3) == m.group(4) and "2 Insufficient cpu" in m.group(2), ev[0].message
    time.sleep(1)
    assert not any(gone_or_terminating(core, namespace, n) for n in low)
