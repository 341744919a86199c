#!/usr/bin/env python3
"""How long `policy-scheduler simulate` takes: a synthetic snapshot (default 1,000 nodes in three
zones, a few bound pods on most of them) and a mixed burst (default 5,000 pods: four
Deployment-like templates, one with a zone spread constraint, one with preferred anti-affinity),
placed under each policy given (default: policies/default.yaml).

Prints the wall time of the whole command (snapshot loading, policies, every placement, the
JSON output) and of the placements alone, then one JSON line with every figure. Target: 5,000
pods on 1,000 nodes in under 10 s. Not a test: nothing fails when the figure gets worse.

    .venv/bin/python bench/simulate.py [--nodes 1000] [--pods 5000] [--policy policies/default.yaml ...]
                                       [--report docs/img/whatif-report.html] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def snapshot(nodes: int, seed: int = 1) -> dict:
    rnd = random.Random(seed)
    out_nodes, pods = [], []
    for i in range(nodes):
        name = f"node-{i:05d}"
        cpu = rnd.choice((8, 16, 16, 32))
        zone = "zone-" + "abc"[i % 3]
        out_nodes.append({"metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone,
            "node.kubernetes.io/instance-type": f"m.{cpu}x"}},
            "status": {"allocatable": {"cpu": str(cpu), "memory": f"{cpu * 4}Gi", "pods": "110"}}})
        for j in range(rnd.choice((0, 1, 2, 3))):
            pods.append({"metadata": {"name": f"existing-{i}-{j}", "namespace": "prod", "labels": {"app": "existing"}},
                         "spec": {"nodeName": name, "containers": [{"name": "c", "image": "registry.local/old:1",
                                                                   "resources": {"requests": {"cpu": "1",
                                                                                              "memory": "2Gi"}}}]}})
    return {"apiVersion": "policy-scheduler.io/snapshot/v2", "kind": "ClusterSnapshot",
            "takenAt": "2025-01-01T12:00:00Z", "schedulerName": "policy-scheduler", "defaultPolicy": "default",
            "nodes": out_nodes, "pods": pods, "namespaces": {"prod": {"kubernetes.io/metadata.name": "prod"}},
            "policies": []}


def workloads(total: int) -> list[dict]:
    """Four templates sharing ``total`` pods: 40% web, 30% api, 20% batch, 10% cache."""
    def deploy(name: str, replicas: int, cpu: str, mem: str, **extra) -> dict:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "prod"},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"containers": [{"name": "c", "image": f"registry.local/{name}:1",
                                                               "resources": {"requests": {"cpu": cpu,
                                                                                          "memory": mem}}}],
                                               **extra}}}}
    web, api, batch = int(total * 0.4), int(total * 0.3), int(total * 0.2)
    cache = total - web - api - batch
    spread = {"topologySpreadConstraints": [{"maxSkew": 5, "topologyKey": "topology.kubernetes.io/zone",
                                             "whenUnsatisfiable": "DoNotSchedule",
                                             "labelSelector": {"matchLabels": {"app": "api"}}}]}
    anti = {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                           "labelSelector": {"matchLabels": {"app": "cache"}}}}]}}}
    return [deploy("web", web, "500m", "1Gi"), deploy("api", api, "1", "2Gi", **spread),
            deploy("batch", batch, "250m", "512Mi"), deploy("cache", cache, "2", "4Gi", **anti)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--policy", action="append", default=None, help="policy file or name (repeatable)")
    ap.add_argument("--report", default=None, help="also write the HTML report here")
    ap.add_argument("--keep", default=None, help="keep the snapshot, pods and output in this directory")
    a = ap.parse_args()
    policies = a.policy or [str(ROOT / "policies" / "default.yaml")]
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-simulate-"))
    work.mkdir(parents=True, exist_ok=True)
    snap, pods = work / "snapshot.json", work / "pods.yaml"
    snap.write_text(json.dumps(snapshot(a.nodes)))
    import yaml

    pods.write_text(yaml.safe_dump_all(workloads(a.pods)))
    cmd = [sys.executable, "-m", "policy_scheduler.cli", "simulate", "--snapshot", str(snap), "--pods", str(pods),
           "--json", *[x for p in policies for x in ("--policy", p)]]
    if a.report:
        cmd += ["--report", a.report]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return 1
    (work / "result.json").write_text(proc.stdout)
    result = json.loads(proc.stdout)
    print(f"simulate: {a.pods} pods on {a.nodes} nodes, {len(policies)} policies: {wall:.2f} s wall "
          f"(the whole command: start, snapshot, policies, placements, JSON)")
    figures = {"nodes": a.nodes, "pods": a.pods, "wallSeconds": round(wall, 3), "policies": {}}
    for name, r in result["policies"].items():
        per_pod = r["seconds"] / max(a.pods, 1) * 1000
        print(f"  {name}: placements {r['seconds']:.2f} s ({per_pod:.2f} ms per pod); placed {r['placed']}, "
              f"unschedulable {r['unschedulable']}, nodes used {r['nodesUsed']}, imbalance {r['imbalance']}")
        figures["policies"][name] = {"seconds": r["seconds"], "msPerPod": round(per_pod, 3), "placed": r["placed"],
                                     "unschedulable": r["unschedulable"], "nodesUsed": r["nodesUsed"]}
    if (a.nodes, a.pods) == (1000, 5000):
        print(f"target: 5,000 pods on 1,000 nodes in under 10 s: {wall:.2f} s ({'met' if wall < 10 else 'MISSED'})")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
