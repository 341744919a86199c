"""`policy-scheduler clusters`: every kubeconfig context's free capacity, and per policy how many
pods of a probe shape it would place there (simulate's core on a snapshot read once; nothing is
written)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import cluster_flags

PROBE_LIMIT = 10_000


def add_parser(sub) -> None:
    c = sub.add_parser(
        "clusters", help="each kubeconfig context's free capacity, by policy",
        description="Reads each context's cluster once (as `policy-scheduler snapshot`) and prints its schedulable "
                    "nodes, their free CPU, memory and pod slots, and for every SchedulingPolicy of that cluster "
                    "how many probe pods (--probe-cpu, --probe-memory) the policy places there, simulated with "
                    "the operator's own core, up to --probe-pods. Nothing is written. Default: every context of "
                    "the kubeconfig.")
    c.add_argument("--probe-cpu", default="1", metavar="QTY", help="the probe pod's CPU request (default 1)")
    c.add_argument("--probe-memory", default="1Gi", metavar="QTY", help="the probe pod's memory request (default 1Gi)")
    c.add_argument("--probe-pods", type=int, default=100, metavar="N",
                   help=f"at most this many probe pods per policy (default 100, at most {PROBE_LIMIT}); "
                        "0: no probe, free capacity only")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    cluster_flags(c, several=True)
    c.set_defaults(fn=cmd_clusters)


def _probe(cpu: str, memory: str, n: int) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"probe-{i:05d}", "namespace": "default"},
             "spec": {"containers": [{"name": "probe", "image": "probe",
                                      "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}
            for i in range(n)]


def cluster_capacity(snap, probe: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Free capacity of a snapshot's schedulable nodes, and per policy the probe pods it places."""
    import numpy as np

    from ..framework.model.nodetable import CPU, MEMORY, PODS
    from ..whatif.simulate import format_quantity, simulate
    from ..whatif.world import PolicyError, World

    world = World(snap)
    table = world.table()
    n = table.n
    ok = ~table.unschedulable[:n]
    free = np.maximum(table.allocatable[:n] - table.requested[:n], 0)[ok]
    out: dict[str, Any] = {
        "nodes": int(n), "schedulableNodes": int(ok.sum()),
        "free": {"cpu": format_quantity("cpu", int(free[:, CPU].sum())),
                 "memory": format_quantity("memory", int(free[:, MEMORY].sum())),
                 "pods": int(free[:, PODS].sum())},
        "policies": {}}
    for name in world.policy_names():
        try:
            world.usable_policy(name)
        except PolicyError as e:
            out["policies"][name] = {"error": str(e)}
            continue
        if not probe:
            out["policies"][name] = {}
            continue
        run = simulate(world, [name], probe, seed=seed, source="").runs[0]
        placed = len(run.placed)
        out["policies"][name] = {"probePods": placed, "of": len(probe), "nodes": run.summary()["nodesReceivingPods"],
                                 **({"stoppedBy": run.failed[0].message} if run.failed else {})}
    return out


def cmd_clusters(a: argparse.Namespace) -> int:
    from ..cluster.credentials import CredentialsError, kubeconfig_contexts
    from ..framework.model.quantity import QuantityError, resource_value
    from .whatif import _live_snapshot, _quiet_operator_logs

    who = "policy-scheduler clusters"
    _quiet_operator_logs()
    if not 0 <= a.probe_pods <= PROBE_LIMIT:
        print(f"{who}: --probe-pods must be between 0 and {PROBE_LIMIT}", file=sys.stderr)
        return 2
    for flag, res, v in (("--probe-cpu", "cpu", a.probe_cpu), ("--probe-memory", "memory", a.probe_memory)):
        try:
            if resource_value(res, v) <= 0:
                raise QuantityError("not positive")
        except QuantityError as e:
            print(f"{who}: {flag} {v!r}: {e}", file=sys.stderr)
            return 2
    try:
        contexts = a.context or kubeconfig_contexts(a.kubeconfig)
    except CredentialsError as e:
        print(f"{who}: {e}", file=sys.stderr)
        return 2
    if not contexts:
        print(f"{who}: no contexts: pass --kubeconfig or --context", file=sys.stderr)
        return 2
    probe = _probe(a.probe_cpu, a.probe_memory, a.probe_pods)
    result: dict[str, Any] = {}
    for ctx in contexts:
        errors: list[str] = []
        snap = _live_snapshot(a, "clusters", ctx, errors)
        result[ctx] = {"error": errors[0]} if snap is None else cluster_capacity(snap, probe)
    if a.json:
        json.dump({"probe": {"cpu": a.probe_cpu, "memory": a.probe_memory, "max": a.probe_pods},
                   "contexts": result}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        write_text(result, a, sys.stdout)
    return 0 if any("error" not in r for r in result.values()) else 1


def write_text(result: dict[str, Any], a: argparse.Namespace, out) -> None:
    rows = [["CONTEXT", "NODES", "FREE CPU", "FREE MEMORY", "FREE PODS"]]
    for ctx, r in result.items():
        if "error" in r:
            rows.append([ctx, "-", "-", "-", "-"])
            continue
        f = r["free"]
        rows.append([ctx, f"{r['schedulableNodes']}/{r['nodes']}", f["cpu"], f["memory"], str(f["pods"])])
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    for x in rows:
        out.write("  ".join(v.ljust(w) for v, w in zip(x, widths)).rstrip() + "\n")
    shape = f"{a.probe_cpu} cpu / {a.probe_memory}"
    for ctx, r in result.items():
        if "error" in r:
            out.write(f"\n{ctx}: not read: {r['error']}\n")
            continue
        if not r["policies"]:
            out.write(f"\n{ctx}: no SchedulingPolicies\n")
            continue
        out.write(f"\n{ctx}: probe pods of {shape} each policy places (at most {a.probe_pods})\n")
        for name, p in r["policies"].items():
            if "error" in p:
                out.write(f"  {name}: not usable: {p['error']}\n")
            elif "probePods" in p:
                more = "" if p["probePods"] < p["of"] else "+"
                why = f"; then: {p['stoppedBy']}" if "stoppedBy" in p else ""
                out.write(f"  {name}: {p['probePods']}{more} on {p['nodes']} nodes{why}\n")
            else:
                out.write(f"  {name}: (no probe)\n")
