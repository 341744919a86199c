#!/usr/bin/env python3
"""Decision time per pod of the default-equivalent chain on a synthetic cluster.

For each size in ``--nodes`` a fresh process builds a NodeTable of that many nodes (3 zones,
hostname / instance-type / pool labels, a few tainted or cordoned nodes, cached images) holding
about ``--pods-per-node`` bound pods of ~50 workloads in 5 namespaces (varied cpu/memory
requests, a few best-effort workloads; a small share with zone spread constraints or pod
anti-affinity), then schedules ``--pods`` more pods of the same workloads, some of them with
node affinity or a toleration for the dedicated pool, through ``schedule_one`` with
``default_chain_spec()``. Only ``schedule_one`` is timed; every decision is then applied with
``NodeTable.add_pod(..., assumed=True)`` so the cluster fills up as in a real run. Every pod is
owned by a ReplicaSet selecting ``app=<workload>``, so the system default spreading of
PodTopologySpread applies to pods without constraints of their own, as in a real cluster.

Reported per size: median / p90 / p99 / max decision time (also per kind of measured pod),
memory (RSS growth for building the table and for the measured run, tracemalloc peak of one
decision), and the share of decision time per plugin and extension point over all pods and over
the plain ones (a separate pass with timed plugin methods). ``--profile`` adds a cProfile pass
and prints the functions with the most own time. ``--plugin-timing`` adds a pass that decides
every pod several times in a row, in rotating order, with the operator's metrics recorder
(cluster/telemetry.py) and without: no recorder, extension points only (0 % of cycles with
per-plugin timing), upstream's 10 % sample, and 100 %; it prints the median and mean per mode
and the overhead of per-plugin timing (10 % against 0 %, same pods, same run). The last line of
output is one JSON object with every figure.

    .venv/bin/python bench/decide.py [--nodes 1000 5000] [--pods-per-node 10] [--pods 2000]
                                     [--warmup 100] [--workloads 50] [--seed 1] [--profile]
                                     [--plugin-timing] [--volume-overhead] [--dra]

``--dra`` adds a DRA pass per size (DynamicResources in the default chain): every node publishes
one ResourceSlice of ``--dra-devices`` devices (upstream scheduler_perf's attributes and
capacities), one DeviceClass selects the driver by CEL, and each measured pod has its own claim
of one device (the SchedulingWithResourceClaimTemplate shape); each decision is reserved (the
devices count as allocated for the next pod) and then written back as the claim's allocation, so
the cluster fills up. It reports the decision time per pod and DynamicResources' own share
(PreFilter + Filter + Score: the allocation time per pod).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import random
import resource
import subprocess
import sys
import time
import tracemalloc
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from policy_scheduler.policy.chain import build_chain, default_chain_spec
from policy_scheduler.plugins import default_registry
from policy_scheduler.framework.interface import Handle
from policy_scheduler.framework.model.labels import LabelSelector, Requirement
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import PodInfo, parse_pod
from policy_scheduler.framework.cycle.schedule import schedule_one

TARGET_MEDIAN_MS = 2.0  # at 5,000 nodes
RESULT_PREFIX = "RESULT "

ZONES = ("zone-a", "zone-b", "zone-c")
NAMESPACES = ("default", "shop", "payments", "data", "platform")
# (instance type, allocatable cpu, allocatable memory, share of nodes)
INSTANCE_TYPES = (("m5.large", "1930m", "7Gi", 0.15), ("m5.xlarge", "3920m", "14Gi", 0.35),
                  ("m5.2xlarge", "7910m", "29Gi", 0.3), ("m5.4xlarge", "15890m", "58Gi", 0.2))
SYSTEM_IMAGES = (("registry.k8s.io/pause:3.9", 750_000), ("registry.k8s.io/kube-proxy:v1.31.0", 30_000_000),
                 ("docker.io/calico/node:v3.28.0", 120_000_000))
SIDECAR_IMAGE = ("docker.io/envoyproxy/envoy:v1.30.1", 60_000_000)
# default tolerations the admission plugin adds to every pod
DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]
GPU_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
MI = 1024 * 1024
POINTS = (("pre_filter", "preFilter"), ("filter", "filter"), ("pre_score", "preScore"), ("score", "score"),
          ("normalize_score", "normalizeScore"))


# ------------------------------------------------------------------------------------ workloads

@dataclass
class Workload:
    name: str
    namespace: str
    cpu_m: int  # 0 with mem_mi 0: best-effort
    mem_mi: int
    image: str
    image_size: int
    sidecar: bool
    kind: str  # "plain", "spread-hard", "spread-soft", "anti-required", "anti-preferred"


# workload index -> kind; with Zipf weights these are ~4% (spread) and ~2.5% (anti) of all pods
SPECIAL_KINDS = {9: "spread-hard", 19: "spread-soft", 29: "spread-hard", 14: "anti-required",
                 39: "anti-required", 44: "anti-preferred"}


def make_workloads(rnd: random.Random, count: int) -> tuple[list[Workload], list[float]]:
    cpus = (50, 100, 100, 250, 250, 500, 500, 1000, 2000)
    mems = (64, 128, 256, 256, 512, 512, 1024, 2048, 4096)
    out = []
    for i in range(count):
        best_effort = i % 17 == 16
        out.append(Workload(
            name=f"app-{i:02d}", namespace=NAMESPACES[i % len(NAMESPACES)],
            cpu_m=0 if best_effort else rnd.choice(cpus), mem_mi=0 if best_effort else rnd.choice(mems),
            image=f"registry.example.com/{NAMESPACES[i % len(NAMESPACES)]}/app-{i:02d}:1.{i % 7}.{i % 3}",
            image_size=rnd.randint(20, 800) * MI, sidecar=rnd.random() < 0.25,
            kind=SPECIAL_KINDS.get(i, "plain")))
    weights = [1.0 / (i + 1) for i in range(count)]
    return out, weights


def _selector(w: Workload) -> dict[str, Any]:
    return {"matchLabels": {"app": w.name}}


def pod_dict(w: Workload, name: str, rnd: random.Random, node_name: str | None = None,
             extras: bool = False) -> dict[str, Any]:
    """An API-style pod of workload ``w``; ``extras`` adds the per-pod variety of the measured mix
    (node affinity for ~10%, the dedicated-pool toleration and selector for ~2%, host port ~1%)."""
    resources = {} if not w.cpu_m else {"requests": {"cpu": f"{w.cpu_m}m", "memory": f"{w.mem_mi}Mi"}}
    main: dict[str, Any] = {"name": "main", "image": w.image, "resources": resources}
    containers = [main]
    if w.sidecar:
        containers.append({"name": "envoy", "image": SIDECAR_IMAGE[0],
                           "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}})
    spec: dict[str, Any] = {"schedulerName": "default-scheduler", "containers": containers,
                            "tolerations": list(DEFAULT_TOLERATIONS)}
    if w.kind == "spread-hard":
        spec["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": _selector(w)},
            {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": _selector(w)}]
    elif w.kind == "spread-soft":
        spec["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": _selector(w)}]
    elif w.kind == "anti-required":
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": _selector(w)}]}}
    elif w.kind == "anti-preferred":
        spec["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                "labelSelector": _selector(w)}}]}}
    if extras:
        r = rnd.random()
        if r < 0.10:
            zones = rnd.sample(ZONES, 2)
            spec.setdefault("affinity", {})["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "preference": {"matchExpressions": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In",
                         "values": ["m5.2xlarge", "m5.4xlarge"]}]}}]}
        elif r < 0.12:
            spec["tolerations"].append(GPU_TOLERATION)
            spec["nodeSelector"] = {"pool": "gpu"}
        elif r < 0.13:
            main["ports"] = [{"containerPort": 9100, "hostPort": 9100, "protocol": "TCP"}]
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": w.namespace, "uid": f"uid-{name}",
                         "labels": {"app": w.name, "pod-template-hash": f"{zlib.crc32(w.name.encode()) & 0xffffff:06x}"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": w.name,
                                              "controller": True}]},
            "spec": spec, "status": {"phase": "Pending"}}


class BenchHandle(Handle):
    """Every pod is owned by the ReplicaSet of its workload, selecting ``app=<workload>``."""

    def __init__(self) -> None:
        self._selectors: dict[str, LabelSelector] = {}

    def default_spread_selector(self, pod: PodInfo):
        app = pod.labels.get("app")
        if app is None:
            return None
        sel = self._selectors.get(app)
        if sel is None:
            sel = self._selectors[app] = LabelSelector((Requirement("app", "In", (app,)),))
        return sel


# ------------------------------------------------------------------------------------ cluster

def node_dict(i: int, rnd: random.Random, workloads: list[Workload], weights: list[float]) -> dict[str, Any]:
    name = f"node-{i:05d}"
    itype, cpu, mem, _ = rnd.choices(INSTANCE_TYPES, weights=[t[3] for t in INSTANCE_TYPES])[0]
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "arm64" if rnd.random() < 0.05 else "amd64",
              "topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": ZONES[i % len(ZONES)],
              "node.kubernetes.io/instance-type": itype, "pool": "general"}
    spec: dict[str, Any] = {}
    r = rnd.random()
    if r < 0.02:  # dedicated pool
        labels["pool"] = "gpu"
        spec["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    elif r < 0.03:
        spec["taints"] = [{"key": "maintenance", "value": "soon", "effect": "PreferNoSchedule"}]
    elif r < 0.035:  # cordoned
        spec["unschedulable"] = True
        spec["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    images = [{"names": [n], "sizeBytes": s} for n, s in SYSTEM_IMAGES]
    if rnd.random() < 0.5:
        images.append({"names": [SIDECAR_IMAGE[0]], "sizeBytes": SIDECAR_IMAGE[1]})
    for w in {id(w): w for w in rnd.choices(workloads, weights=weights, k=8)}.values():
        images.append({"names": [w.image], "sizeBytes": w.image_size})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": mem, "pods": "110", "ephemeral-storage": "95Gi"},
                       "images": images}}


def build_cluster(n_nodes: int, per_node: int, rnd: random.Random, workloads: list[Workload],
                  weights: list[float]) -> tuple[NodeTable, dict[str, int]]:
    """The table with ``n_nodes`` nodes and about ``per_node`` bound pods each, placed at random
    on nodes with room (spread workloads balanced over zones, anti-affinity ones one per node)."""
    table = NodeTable(capacity=n_nodes)
    free_cpu, free_mem, zone_of, open_rows = [], [], [], []
    for i in range(n_nodes):
        node = node_dict(i, rnd, workloads, weights)
        table.upsert_node(node)
        spec = table.specs[i]
        free_cpu.append(spec.allocatable["cpu"])
        free_mem.append(spec.allocatable["memory"])
        zone_of.append(i % len(ZONES))
        if not node["spec"]:  # untainted, schedulable
            open_rows.append(i)
    zone_rows = [[r for r in open_rows if zone_of[r] == z] for z in range(len(ZONES))]
    per_zone: dict[tuple[str, int], int] = {}
    hosts: dict[str, set[int]] = {}
    kinds: dict[str, int] = {}
    for k in range(n_nodes * per_node):
        w = rnd.choices(workloads, weights=weights)[0]
        cpu = w.cpu_m + (50 if w.sidecar else 0) if w.cpu_m else 0
        mem = (w.mem_mi + (64 if w.sidecar else 0)) * MI if w.mem_mi else 0
        pool = open_rows
        if w.kind.startswith("spread"):
            z = min(range(len(ZONES)), key=lambda z: per_zone.get((w.name, z), 0))
            pool = zone_rows[z]
        for _ in range(30):
            row = rnd.choice(pool)
            if free_cpu[row] >= cpu and free_mem[row] >= mem and not (
                    w.kind == "anti-required" and row in hosts.get(w.name, ())):
                break
        else:
            continue
        free_cpu[row] -= cpu
        free_mem[row] -= mem
        per_zone[(w.name, zone_of[row])] = per_zone.get((w.name, zone_of[row]), 0) + 1
        hosts.setdefault(w.name, set()).add(row)
        name = f"{w.name}-{k:07d}"
        table.add_pod(parse_pod(pod_dict(w, name, rnd, node_name=table.names[row])), table.names[row])
        kinds[w.kind] = kinds.get(w.kind, 0) + 1
    return table, kinds


# ------------------------------------------------------------------------------------ measuring

def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024


class PodStream:
    """The measured pods: workloads by weight, with the per-pod extras."""

    def __init__(self, rnd: random.Random, workloads: list[Workload], weights: list[float]) -> None:
        self.rnd, self.workloads, self.weights, self.k = rnd, workloads, weights, 0
        self.last_kind = ""

    def next(self) -> PodInfo:
        w = self.rnd.choices(self.workloads, weights=self.weights)[0]
        self.k += 1
        d = pod_dict(w, f"{w.name}-new-{self.k:06d}", self.rnd, extras=True)
        spec = d["spec"]
        kind = ("node-affinity" if "nodeAffinity" in spec.get("affinity", {}) else
                "dedicated-pool" if "nodeSelector" in spec else
                "host-port" if "ports" in spec["containers"][0] else w.kind)
        self.last_kind = kind
        return parse_pod(d)


def run_pass(chain, table: NodeTable, stream: PodStream, count: int, rng: random.Random,
             timed: bool = True) -> tuple[list[tuple[str, float]], int]:
    """Schedule ``count`` pods, applying each decision; (pod kind, schedule_one time in ms) per pod."""
    times = []
    scheduled = 0
    for _ in range(count):
        pod = stream.next()
        t0 = time.perf_counter_ns()
        d = schedule_one(chain, pod, table, rng)
        t1 = time.perf_counter_ns()
        if timed:
            times.append((stream.last_kind, (t1 - t0) / 1e6))
        if d.node is not None:
            table.add_pod(pod, d.node, assumed=True)
            scheduled += 1
    return times, scheduled


def phase_pass(chain, table: NodeTable, stream: PodStream, count: int, rng: random.Random) -> dict[str, Any]:
    """Time every plugin method separately; the rest of schedule_one is the runner's own time.
    Shares are given over all pods (the mean) and over the plain pods alone (what the median is
    made of)."""
    groups = ("all", "plain")
    acc: dict[str, dict[tuple[str, str], float]] = {g: {} for g in groups}
    cycle = {g: 0.0 for g in groups}
    npods = {g: 0 for g in groups}
    current = {"plain": False}
    wrapped = []

    def wrap(plugin, attr: str, label: str):
        fn = getattr(plugin, attr)
        key = (plugin.NAME, label)
        for g in groups:
            acc[g][key] = 0.0

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                dt = time.perf_counter() - t0
                acc["all"][key] += dt
                if current["plain"]:
                    acc["plain"][key] += dt

        setattr(plugin, attr, timed)
        wrapped.append((plugin, attr))

    point_lists = {"pre_filter": chain.pre_filter, "filter": chain.filter, "pre_score": chain.pre_score,
                   "score": [p for p, _ in chain.score], "normalize_score": [p for p, _ in chain.score]}
    for attr, label in POINTS:
        for p in point_lists[attr]:
            wrap(p, attr, label)
    try:
        for _ in range(count):
            pod = stream.next()
            current["plain"] = stream.last_kind == "plain"
            c0 = time.perf_counter()
            d = schedule_one(chain, pod, table, rng)
            dt = time.perf_counter() - c0
            for g in groups:
                if g == "all" or current["plain"]:
                    cycle[g] += dt
                    npods[g] += 1
            if d.node is not None:
                table.add_pod(pod, d.node, assumed=True)
    finally:
        for p, attr in wrapped:
            delattr(p, attr)
    out: dict[str, Any] = {"pods": count}
    for g in groups:
        total, n = cycle[g] or 1e-12, max(npods[g], 1)
        items = dict(acc[g])
        items[("(runner)", "scan/select")] = cycle[g] - sum(acc[g].values())
        out[g] = {"pods": npods[g], "ms_per_pod": 1e3 * cycle[g] / n,
                  "rows": {f"{name} {point}": (1e3 * sec / n, sec / total) for (name, point), sec in items.items()},
                  "per_point": {}, "per_plugin": {}}
        for (name, point), sec in acc[g].items():
            out[g]["per_point"][point] = out[g]["per_point"].get(point, 0.0) + sec / total
            out[g]["per_plugin"][name] = out[g]["per_plugin"].get(name, 0.0) + sec / total
    return out


def memory_pass(chain, table: NodeTable, stream: PodStream, count: int, rng: random.Random) -> dict[str, float]:
    """tracemalloc peak (above what was allocated before) of single decisions."""
    peaks = []
    tracemalloc.start()
    try:
        for _ in range(count):
            pod = stream.next()
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            d = schedule_one(chain, pod, table, rng)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
            if d.node is not None:
                table.add_pod(pod, d.node, assumed=True)
    finally:
        tracemalloc.stop()
    return {"decision_peak_kib_median": float(np.median(peaks)) / 1024,
            "decision_peak_kib_max": float(max(peaks)) / 1024}


def profile_pass(chain, table: NodeTable, stream: PodStream, count: int, rng: random.Random, top: int = 25) -> str:
    prof = cProfile.Profile()
    prof.enable()
    run_pass(chain, table, stream, count, rng, timed=False)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


TIMING_MODES = (("none", None), ("points", 0.0), ("sampled-10%", 10.0), ("all-100%", 100.0))


def plugin_timing_pass(chain, table: NodeTable, stream: PodStream, count: int, rng: random.Random) -> dict[str, Any]:
    """Each pod decided once per mode (rotating which goes first), the first decision applied.
    Modes: no recorder; the operator's recorder with 0 % / 10 % / 100 % of cycles timing their
    plugin calls (extension points are timed in all three)."""
    from policy_scheduler.cluster.telemetry import Telemetry

    recorders = {}
    for name, pct in TIMING_MODES:
        if pct is not None:
            t = Telemetry(plugin_sample_percent=pct, known_policies={"default": None}, rng=random.Random(7))
            recorders[name] = t.cycle_recorder
    times: dict[str, list[float]] = {name: [] for name, _ in TIMING_MODES}
    names = [name for name, _ in TIMING_MODES]
    gc.collect()
    gc.disable()  # a collection landing in one mode's decision would swamp a 1 % difference
    try:
        _timing_loop(chain, table, stream, count, rng, names, recorders, times)
    finally:
        gc.enable()
    out: dict[str, Any] = {"pods": count, "modes": {}}
    for name in names:
        v = np.array(times[name])
        out["modes"][name] = {"median_ms": float(np.median(v)), "mean_ms": float(v.mean())}
    base = np.array(times["points"])
    # the same pods with and without: the mean per-pod difference (0.5 % trimmed at each end, so a
    # stray pause in one mode does not count) over the mean decision time
    diff = np.sort(np.array(times["sampled-10%"]) - base)
    k = len(diff) // 200
    diff = diff[k:len(diff) - k] if k else diff
    out["plugin_timing_overhead"] = float(diff.mean() / base.mean())
    with_ = out["modes"]["sampled-10%"]
    out["plugin_timing_overhead_median"] = with_["median_ms"] / out["modes"]["points"]["median_ms"] - 1
    return out


VOLUME_PLUGINS = ("VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone")


def volume_overhead_pass(chain, table: NodeTable, stream: PodStream, count: int, rng: random.Random) -> dict[str, Any]:
    """What the four volume plugins of the default chain cost pods without volumes: each pod is
    decided by the default chain and by the same chain without them (rotating which goes first),
    the first decision applied; the mean per-pod difference (0.5 % trimmed at each end) over the
    mean decision time without them."""
    spec = default_chain_spec()
    spec.plugins = [p for p in spec.plugins if p.name not in VOLUME_PLUGINS]
    without = build_chain(spec, default_registry(), handle=BenchHandle())
    chains = {"with": chain, "without": without}
    names = list(chains)
    times: dict[str, list[float]] = {n: [] for n in names}
    gc.collect()
    gc.disable()
    try:
        for i in range(count):
            pod = stream.next()
            first = None
            for k in range(len(names)):
                name = names[(i + k) % len(names)]
                t0 = time.perf_counter_ns()
                d = schedule_one(chains[name], pod, table, rng)
                times[name].append((time.perf_counter_ns() - t0) / 1e6)
                first = first or d
            if first.node is not None:
                table.add_pod(pod, first.node, assumed=True)
    finally:
        gc.enable()
    base = np.array(times["without"])
    diff = np.sort(np.array(times["with"]) - base)
    k = len(diff) // 200
    diff = diff[k:len(diff) - k] if k else diff
    return {"pods": count,
            "median_ms": {n: float(np.median(times[n])) for n in names},
            "mean_ms": {n: float(np.mean(times[n])) for n in names},
            "overhead": float(diff.mean() / base.mean()),
            "overhead_median": float(np.median(times["with"]) / np.median(base) - 1)}


def _timing_loop(chain, table, stream, count, rng, names, recorders, times) -> None:
    for i in range(count):
        pod = stream.next()
        first = None
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            rec = recorders[name]("default") if name in recorders else None
            t0 = time.perf_counter_ns()
            d = schedule_one(chain, pod, table, rng, recorder=rec)
            times[name].append((time.perf_counter_ns() - t0) / 1e6)
            first = first or d
        if first.node is not None:
            table.add_pod(pod, first.node, assumed=True)


DRA_DRIVER = "test-driver.cdi.k8s.io"


def _dra_world(table: NodeTable, devices: int):
    from policy_scheduler.plugins.dynamicresources.cache import DraCache

    class DraBench(BenchHandle):
        def __init__(self) -> None:
            super().__init__()
            self.cache = DraCache()

        def dra(self):
            return self.cache

    h = DraBench()
    h.cache.apply("deviceclasses", "ADDED", {"metadata": {"name": "test-class", "resourceVersion": "1"}, "spec": {
        "selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]}})
    for i, name in enumerate(table.names[:table.n]):
        devs = [{"name": f"basic-device-{d}", "attributes": {
            "driverVersion": {"version": "1.2.3"}, "productName": {"string": "test"}, "dra.example.com/numa": {"int": d % 2},
            "resource.kubernetes.io/pciRoot": {"string": f"pci{d % 2}"}},
            "capacity": {"memory": {"value": "24480Mi"}, "millicores": {"value": "1k"}}} for d in range(devices)]
        h.cache.apply("resourceslices", "ADDED", {"metadata": {"name": f"resourceslice-{i}", "resourceVersion": "1"},
                                                  "spec": {"driver": DRA_DRIVER, "nodeName": name, "devices": devs,
                                                           "pool": {"name": name, "generation": 1,
                                                                    "resourceSliceCount": 1}}})
    return h


def _with_claim(h, pod: PodInfo, k: int) -> dict[str, Any]:
    """Claim number ``k`` (one device of test-class) in the cache, referenced by ``pod``."""
    claim = {"metadata": {"name": f"claim-{k}", "namespace": pod.namespace, "uid": f"claim-uid-{k}",
                          "resourceVersion": "1"},
             "spec": {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "test-class"}}]}}}
    h.cache.apply("resourceclaims", "ADDED", claim)
    pod.resource_claims = (("resource", claim["metadata"]["name"], ""),)
    return claim


def dra_pass(table: NodeTable, stream: PodStream, count: int, warmup: int, rng: random.Random,
             devices: int) -> dict[str, Any]:
    """Decision time of pods with one claim each (module docstring, ``--dra``)."""
    from policy_scheduler.framework.instrumentation import CycleRecorder
    from policy_scheduler.plugins.dynamicresources.allocator import STATE_KEY

    h = _dra_world(table, devices)
    chain = build_chain(default_chain_spec(), default_registry(), handle=h)
    dra = next(p for p in chain.reserve if p.NAME == "DynamicResources")
    times, dra_ms, placed, k = [], [], 0, 0
    from policy_scheduler.framework.interface import CycleState
    for j in range(warmup + count):
        pod = stream.next()
        k += 1
        claim = _with_claim(h, pod, k)
        state = CycleState()
        t0 = time.perf_counter_ns()
        d = schedule_one(chain, pod, table, rng, state=state)
        t1 = time.perf_counter_ns()
        if j >= warmup:
            times.append((t1 - t0) / 1e6)
        if d.node is None:
            continue
        placed += 1
        table.add_pod(pod, d.node, assumed=True)
        dra.reserve(state, pod, d.node)  # the devices count as allocated for the next pod
        st = state.read(STATE_KEY)
        alloc = st.reserved[0]
        h.cache.drop_pending(claim["metadata"]["uid"])
        h.cache.apply("resourceclaims", "MODIFIED", dict(claim, metadata=dict(claim["metadata"], resourceVersion="2"),
                                                         status={"allocation": alloc, "reservedFor": [
                                                             {"resource": "pods", "name": pod.name, "uid": pod.uid}]}))
    # DynamicResources' own time: the same pods' plugin calls timed apart (phase_pass's method)
    for j in range(min(count, 500)):
        pod = stream.next()
        k += 1
        claim = _with_claim(h, pod, k)
        state = CycleState()
        t0 = time.perf_counter_ns()
        st, _ = dra.pre_filter(state, pod, table)
        if st.is_success:
            dra.filter(state, pod, table, np.arange(table.n))
        dra_ms.append((time.perf_counter_ns() - t0) / 1e6)
        h.cache.apply("resourceclaims", "DELETED", claim)
    t = np.array(times)
    return {"pods": count, "devices_per_node": devices, "placed": placed,
            "median_ms": float(np.median(t)), "p99_ms": float(np.percentile(t, 99)), "mean_ms": float(t.mean()),
            "allocation_all_nodes_median_ms": float(np.median(dra_ms)),
            "allocation_all_nodes_p99_ms": float(np.percentile(dra_ms, 99))}


def worker(args: argparse.Namespace) -> None:
    n = args.nodes[0]
    rnd = random.Random(args.seed)
    workloads, weights = make_workloads(rnd, args.workloads)
    gc.collect()
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    table, bound_kinds = build_cluster(n, args.pods_per_node, rnd, workloads, weights)
    build_s = time.perf_counter() - t0
    gc.collect()
    rss1 = rss_bytes()
    chain = build_chain(default_chain_spec(), default_registry(), handle=BenchHandle())
    stream = PodStream(random.Random(args.seed + 1), workloads, weights)
    rng = random.Random(args.seed + 2)
    bound = len(table.pod_node)

    run_pass(chain, table, stream, args.warmup, rng, timed=False)
    gc.collect()
    rss2 = rss_bytes()
    times, scheduled = run_pass(chain, table, stream, args.pods, rng)
    rss3 = rss_bytes()
    t = np.array([ms for _, ms in times])
    by_kind: dict[str, list[float]] = {}
    for kind, ms in times:
        by_kind.setdefault(kind, []).append(ms)
    kinds = {k: {"pods": len(v), "median_ms": float(np.median(v)), "p99_ms": float(np.percentile(v, 99))}
             for k, v in sorted(by_kind.items(), key=lambda kv: -len(kv[1]))}
    result: dict[str, Any] = {
        "nodes": n, "bound_pods": bound, "measured_pods": args.pods, "scheduled": scheduled,
        "median_ms": float(np.median(t)), "p90_ms": float(np.percentile(t, 90)),
        "p99_ms": float(np.percentile(t, 99)), "max_ms": float(t.max()), "mean_ms": float(t.mean()),
        "build_s": build_s, "rss_table_mib": (rss1 - rss0) / MI, "rss_run_mib": (rss3 - rss2) / MI,
        "bound_mix": bound_kinds, "by_kind": kinds,
    }
    result.update(memory_pass(chain, table, stream, min(200, args.pods), rng))
    phases = phase_pass(chain, table, stream, args.pods, rng)
    result["phases"] = phases
    result["peak_rss_mib"] = peak_rss_bytes() / MI

    print(f"\n== {n} nodes: {bound} bound pods, {args.pods} measured (+{args.warmup} warm-up), "
          f"table built in {build_s:.1f} s")
    print("   bound pods: " + ", ".join(f"{k} {v}" for k, v in sorted(bound_kinds.items(), key=lambda kv: -kv[1])))
    print(f"   measured pods by kind: {'pods':>6}{'median ms':>11}{'p99 ms':>9}")
    for k, v in kinds.items():
        print(f"     {k:<20}{v['pods']:>6}{v['median_ms']:>11.3f}{v['p99_ms']:>9.3f}")
    a, pl = phases["all"], phases["plain"]
    print(f"   share of decision time ({phases['pods']} more pods, plugin methods timed one by one; "
          f"all pods {a['ms_per_pod']:.3f} ms/pod, plain pods {pl['ms_per_pod']:.3f} ms/pod):")
    print(f"   {'plugin':<32}{'point':<16}{'all ms/pod':>11}{'share':>7}{'plain ms/pod':>14}{'share':>7}")
    for key, (ms, share) in sorted(a["rows"].items(), key=lambda kv: -kv[1][0]):
        if share < 0.001:
            continue
        name, point = key.rsplit(" ", 1)
        pms, pshare = pl["rows"].get(key, (0.0, 0.0))
        print(f"   {name:<32}{point:<16}{ms:>11.3f}{100 * share:>6.1f}%{pms:>14.3f}{100 * pshare:>6.1f}%")
    print("   by point (all pods):  " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in
                                                 sorted(a["per_point"].items(), key=lambda kv: -kv[1])))
    if args.plugin_timing:
        pt = plugin_timing_pass(chain, table, stream, args.pods, rng)
        result["plugin_timing"] = pt
        print(f"\n   metrics recorder ({args.pods} more pods, each decided once per mode, same run):")
        print(f"   {'mode':<14}{'median ms':>10}{'mean ms':>10}")
        for name, v in pt["modes"].items():
            print(f"   {name:<14}{v['median_ms']:>10.3f}{v['mean_ms']:>10.3f}")
        print(f"   per-plugin timing in 10 % of cycles against 0 % (extension points timed in both): "
              f"{100 * pt['plugin_timing_overhead']:+.2f}% of decision time (mean per-pod difference), "
              f"{100 * pt['plugin_timing_overhead_median']:+.2f}% on the median (budget 3%)")
    if args.volume_overhead:
        vo = volume_overhead_pass(chain, table, stream, args.pods, rng)
        result["volume_overhead"] = vo
        print(f"\n   volume plugins for pods without volumes ({args.pods} more pods, each decided with and "
              f"without them, same run): median {vo['median_ms']['with']:.3f} against "
              f"{vo['median_ms']['without']:.3f} ms; {100 * vo['overhead']:+.2f}% of decision time (mean "
              f"per-pod difference), {100 * vo['overhead_median']:+.2f}% on the median (budget 5%)")
    if args.dra:
        r = dra_pass(table, stream, args.pods, args.warmup, rng, args.dra_devices)
        result["dra"] = r
        print(f"\n   DRA ({args.pods} pods with one claim each, {args.dra_devices} devices per node, "
              f"{r['placed']} placed): decision median {r['median_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms; "
              f"DynamicResources PreFilter + Filter over all {n} nodes: median "
              f"{r['allocation_all_nodes_median_ms']:.3f} ms, p99 {r['allocation_all_nodes_p99_ms']:.3f} ms")
    if args.profile:
        print(f"\n   cProfile ({args.pods} more pods), functions by own time:")
        print(profile_pass(chain, table, stream, args.pods, rng))
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ------------------------------------------------------------------------------------ driver

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000], help="cluster sizes (default 1000 5000)")
    ap.add_argument("--pods-per-node", type=int, default=10, help="bound pods per node (default 10)")
    ap.add_argument("--pods", type=int, default=2000, help="measured pods per size (default 2000)")
    ap.add_argument("--warmup", type=int, default=100, help="pods scheduled before measuring (default 100)")
    ap.add_argument("--workloads", type=int, default=50, help="number of workloads (default 50)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="add a cProfile pass per size")
    ap.add_argument("--plugin-timing", action="store_true",
                    help="add a pass measuring the metrics recorder: per-plugin timing with and without")
    ap.add_argument("--volume-overhead", action="store_true",
                    help="add a pass deciding every pod with and without the four volume plugins (none of "
                         "the pods has volumes): what they cost pods without volumes")
    ap.add_argument("--dra", action="store_true",
                    help="add a pass of pods with one DRA claim each (DynamicResources' allocation time)")
    ap.add_argument("--dra-devices", type=int, default=8, help="devices per node in the --dra pass (default 8)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main() -> int:
    args = parse_args()
    if args.worker:
        worker(args)
        return 0
    results = []
    for n in args.nodes:  # one process per size: clean caches and honest RSS figures
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--nodes", str(n),
               "--pods-per-node", str(args.pods_per_node), "--pods", str(args.pods), "--warmup", str(args.warmup),
               "--workloads", str(args.workloads), "--seed", str(args.seed)]
        cmd += (["--profile"] if args.profile else []) + (["--plugin-timing"] if args.plugin_timing else [])
        cmd += ["--volume-overhead"] if args.volume_overhead else []
        cmd += ["--dra", "--dra-devices", str(args.dra_devices)] if args.dra else []
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
            for line in proc.stdout:
                if line.startswith(RESULT_PREFIX):
                    results.append(json.loads(line[len(RESULT_PREFIX):]))
                else:
                    sys.stdout.write(line)
                    sys.stdout.flush()
        if proc.returncode:
            print(f"size {n} failed (exit {proc.returncode})", file=sys.stderr)
            return 1

    print("\nschedule_one, default-equivalent chain (times per pod, ms)")
    head = (f"{'nodes':>6} {'bound':>7} {'pods':>5} {'placed':>6} {'median':>7} {'p90':>7} {'p99':>7} {'max':>7} "
            f"{'table MiB':>9} {'run MiB':>8} {'decision peak KiB':>18}")
    print(head)
    print("-" * len(head))
    for r in results:
        print(f"{r['nodes']:>6} {r['bound_pods']:>7} {r['measured_pods']:>5} {r['scheduled']:>6} "
              f"{r['median_ms']:>7.3f} {r['p90_ms']:>7.3f} {r['p99_ms']:>7.3f} {r['max_ms']:>7.2f} "
              f"{r['rss_table_mib']:>9.1f} {r['rss_run_mib']:>8.1f} "
              f"{r['decision_peak_kib_median']:>8.0f} / {r['decision_peak_kib_max']:<7.0f}")
    print("(table MiB: RSS growth building nodes + bound pods; run MiB: RSS growth over the measured pods;"
          " decision peak: tracemalloc peak of one decision, median / max)")
    big = [r for r in results if r["nodes"] == 5000]
    if big:
        r = big[0]
        verdict = "meets" if r["median_ms"] <= TARGET_MEDIAN_MS else "misses"
        def top(group: str) -> str:
            rows = sorted(r["phases"][group]["rows"].items(), key=lambda kv: -kv[1][1])[:3]
            return ", ".join(f"{k} {100 * v[1]:.0f}%" for k, v in rows)
        print(f"target median <= {TARGET_MEDIAN_MS} ms at 5000 nodes: {verdict} ({r['median_ms']:.3f} ms)")
        print(f"  largest shares, plain pods: {top('plain')}")
        print(f"  largest shares, all pods:   {top('all')}")
    summary = {"benchmark": "decide", "seed": args.seed, "pods_per_node": args.pods_per_node,
               "target_median_ms_at_5000": TARGET_MEDIAN_MS,
               "results": [{k: v for k, v in r.items() if k != "phases"}
                           | {"share_by_point": r["phases"]["all"]["per_point"],
                              "share_by_plugin": r["phases"]["all"]["per_plugin"],
                              "plain_share_by_plugin": r["phases"]["plain"]["per_plugin"]}
                           for r in results]}
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
