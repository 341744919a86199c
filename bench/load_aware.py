#!/usr/bin/env python3
"""Extra decision time per pod that LoadAware adds to the default-equivalent chain.

The cluster is bench/decide.py's synthetic one (``--nodes`` nodes, about ``--pods-per-node``
bound pods of ~50 workloads, system default spreading). Every node has fresh cpu and memory
usage values in a MetricsView, as the Prometheus source publishes them. Each of ``--pods`` pods
is decided twice on the same cluster state: by ``default_chain_spec()`` and by the same chain
plus ``LoadAware`` (weight 1, default thresholds 80% cpu / 90% memory). The LoadAware decision is
applied (``NodeTable.add_pod(..., assumed=True)``, and the pod's in-flight estimate added to the
view as LoadAware's Reserve does), so in-flight estimates pile up as in a burst;
every ``--publish-every`` pods the view is republished (a metrics refresh: LoadAware rebuilds
its row-aligned state).

Whichever chain decides a pod second finds some per-pod work already done, so the order
alternates, and the extra time is the mean of the two order-conditional medians of the per-pod
differences (a control, the default chain against a second copy of itself, measures ~0 this
way). Two regimes: "busy" (node cpu uniform in 5..75%: the burst's in-flight pods push some
nodes over the 80% threshold, so the filter rejects nodes) and "calm" (5..50%: it never does).

Reported per regime: median decision time of both chains, the extra time per pod, and that as a
share of the default chain's median (target <= 5 %); also the median time spent inside
LoadAware's methods (a separate pass with timed methods), and the in-flight bookkeeping after
each placement, outside the cycle (the view's accounting and LoadAware's update of that node's
row). The last line of output is one JSON object with every figure.

    .venv/bin/python bench/load_aware.py [--nodes 1000] [--pods 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import decide  # noqa: E402  (the shared synthetic cluster)

from policy_scheduler.policy.chain import ChainSpec, PluginRef, build_chain, default_chain_spec  # noqa: E402
from policy_scheduler.plugins import default_registry  # noqa: E402
from policy_scheduler.framework.metricview import SOURCE, MetricsView, estimate_parts  # noqa: E402
from policy_scheduler.framework.cycle.schedule import schedule_one  # noqa: E402
from policy_scheduler.plugins.load_aware import LoadAware, LoadAwareArgs  # noqa: E402

TARGET_OVERHEAD = 0.05
REGIMES = (("busy", 0.75), ("calm", 0.50))
TIMED = ("filter", "score", "normalize_score", "describe")


class MetricsHandle(decide.BenchHandle):
    def __init__(self, view: MetricsView) -> None:
        super().__init__()
        self.view = view

    def source(self, name: str):
        return self.view if name == SOURCE else None


def publish(view: MetricsView, names: list[str], rnd: random.Random, now: float, max_cpu: float) -> None:
    cpu_key, mem_key = LoadAwareArgs.model_validate({}).queries()
    view.publish({cpu_key: {n: (rnd.uniform(0.05, max_cpu), now) for n in names},
                  mem_key: {n: (rnd.uniform(0.2, 0.6), now) for n in names}},
                 now=now, ttl=120.0, available=True, usage_lag=60.0, horizon=180.0)


class PluginClock:
    """Time spent inside LoadAware's methods during one decision."""

    def __init__(self) -> None:
        self.ns = 0
        for name in TIMED:
            f = getattr(LoadAware, name)

            def timed(*args, _f=f, **kw):
                s = time.perf_counter_ns()
                try:
                    return _f(*args, **kw)
                finally:
                    self.ns += time.perf_counter_ns() - s
            setattr(LoadAware, name, timed)


def run(a: argparse.Namespace, max_cpu: float, control: bool, clock: PluginClock | None) -> dict:
    rnd = random.Random(a.seed)
    workloads, weights = decide.make_workloads(rnd, a.workloads)
    table, _kinds = decide.build_cluster(a.nodes, a.pods_per_node, rnd, workloads, weights)
    # as the engine does once its caches are synced: the long-lived objects leave the collector's
    # generations, and young-generation collections run less often
    gc.collect()
    gc.freeze()
    gc.set_threshold(20000, 50, 100)
    now = [1_000_000.0]
    view = MetricsView(lambda: now[0])
    metric_rnd = random.Random(a.seed + 1)
    publish(view, table.names, metric_rnd, now[0], max_cpu)
    spec = default_chain_spec()
    extra = [] if control else [PluginRef(name="LoadAware", weight=1)]
    base = build_chain(spec, default_registry(), handle=decide.BenchHandle())
    other = build_chain(ChainSpec(plugins=[*spec.plugins, *extra]), default_registry(), handle=MetricsHandle(view))
    stream = decide.PodStream(rnd, workloads, weights)
    diffs: tuple[list[float], list[float]] = ([], [])  # base first, other first
    t_base, t_other, t_plugin, t_book = [], [], [], []
    for i in range(a.warmup + a.pods):
        pod = stream.next()
        first = i % 2
        times = [0.0, 0.0]
        d = None
        for which in ((0, 1) if first == 0 else (1, 0)):
            if clock is not None and which == 1:
                clock.ns = 0
            s = time.perf_counter_ns()
            dec = schedule_one(base if which == 0 else other, pod, table, random.Random(i))
            times[which] = (time.perf_counter_ns() - s) / 1e3
            if which == 1:
                d = dec
        if i >= a.warmup:
            diffs[first].append(times[1] - times[0])
            t_base.append(times[0])
            t_other.append(times[1])
            if clock is not None:
                t_plugin.append(clock.ns / 1e3)
        if d.node is not None:
            table.add_pod(pod, d.node, assumed=True)
            s = time.perf_counter_ns()
            view.add_inflight(pod.key, d.node, estimate_parts(pod), now[0])
            if i >= a.warmup:
                t_book.append((time.perf_counter_ns() - s) / 1e3)
        now[0] += 0.01
        if (i + 1) % a.publish_every == 0:
            publish(view, table.names, metric_rnd, now[0], max_cpu)
    gc.unfreeze()
    extra_us = (statistics.median(diffs[0]) + statistics.median(diffs[1])) / 2
    base_us = statistics.median(t_base)
    return {"median_us_default": base_us, "median_us_with": statistics.median(t_other), "extra_us": extra_us,
            "overhead": extra_us / base_us, "plugin_us": statistics.median(t_plugin) if t_plugin else None,
            "bookkeeping_us": statistics.median(t_book), "in_flight_pods": len(view.records)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods-per-node", type=int, default=10)
    p.add_argument("--pods", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--publish-every", type=int, default=500, help="pods between two metric publications")
    p.add_argument("--workloads", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()

    results = {"control": run(a, 0.75, control=True, clock=None)}
    for name, max_cpu in REGIMES:
        results[name] = run(a, max_cpu, control=False, clock=None)
    clock = PluginClock()  # a second pass per regime: the timing wrappers cost time themselves
    for name, max_cpu in REGIMES:
        results[name]["plugin_us"] = run(a, max_cpu, control=False, clock=clock)["plugin_us"]

    print(f"decision time per pod at {a.nodes} nodes, {a.pods} pods (us)")
    print(f"  {'':<34} {'default':>8} {'+ LoadAware':>11} {'extra':>7} {'share':>7} {'in LoadAware':>13}")
    for name, label in (("busy", "busy (cpu 5..75%, hot nodes)"), ("calm", "calm (cpu 5..50%, none hot)"),
                        ("control", "control (default vs default)")):
        r = results[name]
        own = "" if r["plugin_us"] is None else f"{r['plugin_us']:.1f}"
        print(f"  {label:<34} {r['median_us_default']:>8.1f} {r['median_us_with']:>11.1f} {r['extra_us']:>7.1f} "
              f"{r['overhead'] * 100:>6.1f}% {own:>13}")
    for name, _ in REGIMES:
        r = results[name]
        print(f"  {name}: target <= {TARGET_OVERHEAD * 100:.0f} %: "
              f"{'meets' if r['overhead'] <= TARGET_OVERHEAD else 'misses'}; in-flight bookkeeping after each "
              f"placement (outside the cycle) {r['bookkeeping_us']:.1f} us; {r['in_flight_pods']} pods in flight "
              "at the end")
    print(json.dumps({"benchmark": "load_aware", "nodes": a.nodes, "pods": a.pods, "seed": a.seed,
                      "target_overhead": TARGET_OVERHEAD, **results}, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
