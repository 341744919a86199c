"""What-if test builders shared by the simulate, across-clusters and tune tests: node, pod and
snapshot bodies, the repository's example policies, and a tuning policy with its pod stream."""

from __future__ import annotations

import random
from pathlib import Path

import yaml

from policy_scheduler.whatif.snapshot import API_VERSION, from_dict

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
BINPACK = yaml.safe_load((ROOT / "policies" / "binpack.yaml").read_text())
TAKEN = "2025-01-01T12:00:00Z"


def node(name, cpu="4", memory="16Gi", zone=None, **labels):
    labels = {"kubernetes.io/hostname": name, **labels}
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}


def pod(name, cpu="500m", memory="1Gi", namespace="default", labels=None, **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                          "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "app:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **spec}}


def snap(nodes, pods=(), policies=(DEFAULT, BINPACK), **extra):
    return from_dict({"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": TAKEN,
                      "nodes": list(nodes), "pods": list(pods), "policies": list(policies),
                      "namespaces": {"default": {}}, **extra})


BOUNDS = {"NodeResourcesFit": [1, 10], "PodTopologySpread": [1, 10]}


def policy(fit=1, spread=10, **tuning):
    """Packing objective, PodTopologySpread outweighing NodeResourcesFit(MostAllocated)."""
    return {"apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "pack"},
            "spec": {"plugins": [
                {"name": "PrioritySort"}, {"name": "NodeUnschedulable"},
                {"name": "NodeResourcesFit", "weight": fit, "args": {"scoringStrategy": {
                    "type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}}},
                {"name": "PodTopologySpread", "weight": spread}],
                "tuning": {"objective": {"nodesUsed": 1}, "bounds": BOUNDS, **tuning}}}


def snapshot_doc(nodes=40):
    out = []
    for i in range(nodes):
        name = f"node-{i:04d}"
        out.append({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                          "topology.kubernetes.io/zone": "zone-" + "abc"[i % 3]}},
                    "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
    return {"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": "2025-01-01T12:00:00Z",
            "nodes": out, "pods": [], "namespaces": {"prod": {}}, "policies": []}


def stream(n, seed=7):
    """A seeded stream of pods of three apps, each spread by hostname (ScheduleAnyway)."""
    rnd = random.Random(seed)
    pods = []
    for i in range(n):
        app = rnd.choice(["web", "api", "batch"])
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"p-{i:04d}", "namespace": "prod", "labels": {"app": app}},
                     "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {
                         "cpu": rnd.choice(["500m", "1", "2"]), "memory": "1Gi"}}}],
                              "topologySpreadConstraints": [{
                                  "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                  "whenUnsatisfiable": "ScheduleAnyway",
                                  "labelSelector": {"matchLabels": {"app": app}}}]}})
    return pods
