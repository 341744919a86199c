"""Where a gang's time goes, without an API server: the operator's Engine on the in-memory
FakeClient (tests/support/fakeclient.py), policies/default.yaml, cProfile.

    .venv/bin/python bench/gang_profile.py [--workload GangScheduling|GangPreemption]
        [--nodes 100] [--groups 10] [--size 50] [--pods-first] [--noprof] [--top 30]

GangScheduling (bench/throughput.py's --quick shape): nodes of 4 cpu / 32Gi / 110 pods in 3
zones, PodGroups of --size (minCount = size) of 100m / 500Mi pods; the pods are queued (with
--pods-first before their PodGroups, as the operator's informers list them at start-up), then
the loop pops, schedules and lets the binding tasks run until every pod is bound. Prints the time
to queue and to schedule per pod, the events and API writes per pod, and the top functions.
GangPreemption: every node holds 4 bound pods of 900m (priority 10); PodGroups of --size (10)
pods of 3 cpu (priority 1000) that each must preempt; profiles the first cycle of every group.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT / "tests"))  # support/: the in-memory API client
from support.fakeclient import FakeClient  # noqa: E402
from policy_scheduler.cluster.engine import Engine  # noqa: E402
from policy_scheduler.serve import build_engine  # noqa: E402
from policy_scheduler.cluster.sync import NATIVE_PODGROUPS  # noqa: E402

NS = "bench"


def node(i: int) -> dict:
    name = f"node-{i:05d}"
    alloc = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
            "status": {"allocatable": alloc, "capacity": alloc, "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, cpu: str, priority: int | None = None, group: str | None = None, node_name: str = "") -> dict:
    r = {"cpu": cpu, "memory": "500Mi"}
    spec: dict = {"schedulerName": "policy-scheduler", "nodeName": node_name, "terminationGracePeriodSeconds": 0,
                  "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                  "ports": [{"containerPort": 80}], "resources": {"requests": r, "limits": r}}]}
    if priority is not None:
        spec["priority"] = priority
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    status = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"} if node_name else {"phase": "Pending"}
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": {"app": "t"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec, "status": status}


def pod_group(name: str, min_count: int, priority: int | None = None) -> dict:
    spec: dict = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-pg-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec}


def engine(nodes: int) -> Engine:
    e = build_engine(FakeClient())
    plugins = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())["spec"]["plugins"]
    e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": plugins}})
    for i in range(nodes):
        e.on_node("ADDED", node(i))
    return e


def report(prof: cProfile.Profile | None, pods: int, top: int) -> None:
    if prof is None:
        return
    st = pstats.Stats(prof)
    print(f"profiled: {st.total_tt:.3f} s in all, {st.total_tt / pods * 1e3:.2f} ms per pod")
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(top)
        print(s.getvalue())


async def gang_scheduling(a: argparse.Namespace, prof: cProfile.Profile | None) -> None:
    e = engine(a.nodes)
    total = a.groups * a.size

    def groups() -> None:
        for g in range(a.groups):
            e.route(NATIVE_PODGROUPS)("ADDED", pod_group(f"g{g:03d}", a.size))

    t0 = time.perf_counter()
    if prof:
        prof.enable()
    if not a.pods_first:
        groups()
    for g in range(a.groups):
        for i in range(a.size):
            e.on_pod("ADDED", pod(f"t-{g:03d}-{i:03d}", "100m", group=f"g{g:03d}"))
    if a.pods_first:
        groups()
    t1 = time.perf_counter()
    rounds = 0
    bound = lambda: len(e.client.calls_of("bind"))  # noqa: E731
    while bound() < total and rounds < 100 * total:
        qpi = e.queue.pop()
        if qpi is not None:
            e.schedule(qpi)
        for _ in range(4):
            await asyncio.sleep(0)
        rounds += 1
    if prof:
        prof.disable()
    t2 = time.perf_counter()
    n = bound()
    reasons = collections.Counter(x[2] for x in list(e.recorder._events._queue))
    writes = collections.Counter()
    for c in e.client.calls:
        what = c.method
        if c.method == "strategic_patch":
            st = (c.body or {}).get("status") or {}
            what += " " + "+".join(sorted("condition" if k == "conditions" else k for k in st))
        writes[what] += 1
    print(f"GangScheduling: {n}/{total} bound; queueing {t1 - t0:.3f} s ({(t1 - t0) / total * 1e3:.2f} ms/pod), "
          f"scheduling and binding {t2 - t1:.3f} s ({(t2 - t1) / max(n, 1) * 1e3:.2f} ms/pod)"
          f"{' under cProfile' if prof else ''}")
    print("events per pod:", {k: round(v / total, 2) for k, v in reasons.items()})
    print("API writes per pod:", {k: round(v / total, 2) for k, v in writes.items()})
    report(prof, total, a.top)
    await e.stop()


async def gang_preemption(a: argparse.Namespace, prof: cProfile.Profile | None) -> None:
    e = engine(a.nodes)
    for i in range(a.nodes):
        for j in range(4):
            e.on_pod("ADDED", pod(f"low-{i:05d}-{j}", "900m", 10, node_name=f"node-{i:05d}"))
    for g in range(a.groups):
        e.route(NATIVE_PODGROUPS)("ADDED", pod_group(f"g{g:03d}", a.size, priority=1000))
        for i in range(a.size):
            e.on_pod("ADDED", pod(f"t-{g:03d}-{i:03d}", "3000m", 1000, group=f"g{g:03d}"))
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    for _ in range(a.groups):
        qpi = e.queue.pop()
        if qpi is None:
            break
        e.schedule(qpi)
    if prof:
        prof.disable()
    dt = time.perf_counter() - t0
    print(f"GangPreemption: {a.groups} group cycles with preemption in {dt:.3f} s "
          f"({dt / a.groups * 1e3:.0f} ms per group{' under cProfile' if prof else ''})")
    report(prof, a.groups * a.size, a.top)
    await e.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=("GangScheduling", "GangPreemption"), default="GangScheduling")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--size", type=int, default=None, help="pods per group (50; GangPreemption 10)")
    ap.add_argument("--pods-first", action="store_true", help="the pods reach the engine before their PodGroups")
    ap.add_argument("--noprof", action="store_true", help="time only, no cProfile")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    if a.size is None:
        a.size = 10 if a.workload == "GangPreemption" else 50
    prof = None if a.noprof else cProfile.Profile()
    run = gang_preemption if a.workload == "GangPreemption" else gang_scheduling
    asyncio.run(run(a, prof))


if __name__ == "__main__":
    main()
