#!/usr/bin/env python3
"""What one tuner evaluation costs: a window of pods replayed on a synthetic 1,000-node cluster
(bench/simulate.py's snapshot) under the weight vectors the search tries, exactly as the
operator's worker process runs it (whatif/tune.py: ``evaluate_window``: the search, the window as
placed, and an Apply step's prediction).

Prints the time of the evaluation, the replays spent against the budget, why the search stopped,
and the time per replay, then one JSON line with every figure. Exits 1 when the evaluation does
not stop within its budget (``timeLimit``, plus the one replay in flight when it runs out).

    .venv/bin/python bench/tune.py [--nodes 1000] [--pods 500] [--max-replays 40] [--time-limit 60s]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import simulate as simbench
from policy_scheduler.policy.fields import duration_seconds
from policy_scheduler.framework.model.nodetable import NodeSpec
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.whatif import tune
from policy_scheduler.whatif.pods import pods_from_documents


def policy(max_replays: int, time_limit: str) -> dict:
    return {"apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "tuned"},
            "spec": {"plugins": [
                {"name": "PrioritySort"}, {"name": "NodeUnschedulable"}, {"name": "TaintToleration", "weight": 3},
                {"name": "NodeAffinity", "weight": 2},
                {"name": "NodeResourcesFit", "weight": 1, "args": {"scoringStrategy": {"type": "MostAllocated"}}},
                {"name": "PodTopologySpread", "weight": 2}, {"name": "InterPodAffinity", "weight": 2},
                {"name": "NodeResourcesBalancedAllocation", "weight": 1}],
                "tuning": {"mode": "Apply", "objective": {"nodesUsed": 1, "imbalance": 10},
                           "bounds": {"NodeResourcesFit": [1, 10], "PodTopologySpread": [1, 10],
                                      "NodeResourcesBalancedAllocation": [1, 10]},
                           "maxReplays": max_replays, "timeLimit": time_limit}}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--max-replays", type=int, default=40)
    ap.add_argument("--time-limit", default="60s")
    a = ap.parse_args()
    snap = simbench.snapshot(a.nodes)
    nodes = [NodeSpec.from_dict(n) for n in snap["nodes"]]
    bound = []
    for p in snap["pods"]:
        info = parse_pod(p)
        info.raw = None
        bound.append((info, p["spec"]["nodeName"]))
    podset = pods_from_documents(simbench.workloads(a.pods), "bench")
    window = [parse_pod(p) for p in podset.pods]
    rnd = random.Random(1)
    placed = {p.key: rnd.choice(nodes).name for p in window}  # where they "really" went: anywhere
    from policy_scheduler.cache.workloads import WorkloadIndex

    workloads = WorkloadIndex()
    for kind, body in podset.workloads:
        {"rs": workloads.on_replica_set, "ss": workloads.on_stateful_set,
         "rc": workloads.on_replication_controller}[kind]("ADDED", body)
    body = policy(a.max_replays, a.time_limit)
    job = tune.WindowJob(policy=body, current={"NodeResourcesFit": 1, "PodTopologySpread": 2,
                                               "NodeResourcesBalancedAllocation": 1},
                         nodes=nodes, bound=bound, pods=window, nodes_of=placed,
                         namespaces=snap["namespaces"], workloads=workloads, since=len(window) // 2)
    t0 = time.perf_counter()
    out = tune.evaluate_window_sync(job)
    total = time.perf_counter() - t0
    res = out["result"]
    per = [c for c in res["candidates"]]
    search_s = res["seconds"]
    limit = duration_seconds(a.time_limit)
    per_replay = search_s / max(1, res["replays"])
    print(f"tuner evaluation: {a.nodes} nodes, window of {len(window)} pods, {len(bound)} bound pods")
    print(f"  search: {res['replays']} replays of {res['maxReplays']} in {search_s:.1f}s ({res['stopped']}), "
          f"{per_replay:.2f}s per replay; time budget {limit:g}s")
    print(f"  whole evaluation (search, the window as placed, feedback, Apply step): {out['replays']} replays "
          f"in {total:.1f}s")
    print(f"  current {res['current']['weights']} objective {res['current']['objective']:.3f}; "
          f"recommended {res['recommended']['weights']} objective {res['recommended']['objective']:.3f} "
          f"({100 * res['gain']:+.1f}%)")
    within = search_s <= limit + 1.5 * per_replay and res["replays"] <= res["maxReplays"]
    print(json.dumps({"nodes": a.nodes, "pods": len(window), "replays": res["replays"], "maxReplays": res["maxReplays"],
                      "searchSeconds": round(search_s, 2), "evaluationReplays": out["replays"],
                      "evaluationSeconds": round(total, 2), "secondsPerReplay": round(per_replay, 3),
                      "timeLimit": limit, "stopped": res["stopped"], "withinBudget": within,
                      "gain": res["gain"], "candidates": len(per)}))
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
