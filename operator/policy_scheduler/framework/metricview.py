"""Metric values as the usage-aware plugins read them: prepared outside the scheduling cycle.

A metric source (outside the pure core) queries its backend off the scheduling loop and
publishes the results here: per series key (PromQL text, node label) one value per node, with
the value's sample time and its state. Plugins only index numpy arrays; they never wait.

- **fresh**: the sample is at most ``ttl`` seconds old;
- **stale**: an older sample is all there is (the backend is down, or stopped returning the node);
- **missing**: no sample for the node at all.

The view also carries the in-flight estimates that protect against herds: a pod placed after a
node's latest sample counts on that node, at an estimate, until a sample taken at least
``usage_lag`` seconds after its placement covers it. Estimates are kept in parts per node
(limit, request, count of pods with neither; for cpu and memory) so that each plugin applies
its own request factors and defaults. A plugin that keeps row-aligned results may subscribe to
in-flight changes and update only the node a placement touched, when the placement happens.
"""

from __future__ import annotations

import itertools
import math
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from .model.quantity import QuantityError, resource_value

if TYPE_CHECKING:  # pragma: no cover
    from .model.nodetable import NodeTable
    from .model.podinfo import PodInfo

SOURCE = "metrics"  # the name plugins pass to Handle.source
FRESH, STALE, MISSING = 0, 1, 2
STATE_NAMES = ("fresh", "stale", "missing")

# columns of the in-flight parts: per resource, the sum of limits, the sum of requests of pods
# without a limit, and the number of pods with neither
CPU_LIMIT, CPU_REQUEST, CPU_BARE, MEM_LIMIT, MEM_REQUEST, MEM_BARE = range(6)
PARTS = 6

SeriesKey = tuple[str, str]  # (PromQL, label naming the node)
Sample = tuple[float, float]  # (value, sample unix time)

_uids = itertools.count(1)


def node_key(label_value: str) -> str:
    """The node name a series label names: ``host:port`` (the usual ``instance``) means ``host``;
    node names never contain ':'."""
    head, sep, tail = label_value.rpartition(":")
    return head if sep and tail.isdigit() else label_value


def pod_limits(pod: "PodInfo") -> dict[str, int]:
    """cpu (milli) and memory (bytes) limits of a pod when every app container sets one (the sum,
    plus the pod overhead); a resource some container leaves unlimited is absent."""
    spec = (pod.raw or {}).get("spec") or {}
    containers = spec.get("containers") or []
    out: dict[str, int] = {}
    if not containers:
        return out
    for res in ("cpu", "memory"):
        total = 0
        for c in containers:
            q = ((c.get("resources") or {}).get("limits") or {}).get(res)
            if q is None:
                break
            try:
                total += resource_value(res, q)
            except QuantityError:
                break
        else:
            over = (spec.get("overhead") or {}).get(res)
            try:
                out[res] = total + (resource_value(res, over) if over is not None else 0)
            except QuantityError:
                out[res] = total
    return out


def estimate_parts(pod: "PodInfo") -> np.ndarray:
    """The pod's in-flight parts: its limit if set, else its request, else one 'bare' pod."""
    parts = np.zeros(PARTS, dtype=np.float64)
    limits = pod_limits(pod)
    for res, base in (("cpu", CPU_LIMIT), ("memory", MEM_LIMIT)):
        if res in limits:
            parts[base] = limits[res]
        elif pod.requests.get(res, 0) > 0:
            parts[base + 1] = pod.requests[res]
        else:
            parts[base + 2] = 1
    return parts


@dataclass(slots=True)
class Estimator:
    """How an in-flight pod counts: limit, else request x factor, else the default."""

    cpu_factor: float = 0.85
    memory_factor: float = 0.7
    default_cpu: float = 250.0  # millicores
    default_memory: float = 200.0 * 1024 * 1024  # bytes

    def apply(self, parts: np.ndarray) -> tuple[Any, Any]:
        """(cpu millicores, memory bytes) from parts (one row or a matrix of rows)."""
        p = parts.T
        cpu = p[CPU_LIMIT] + self.cpu_factor * p[CPU_REQUEST] + self.default_cpu * p[CPU_BARE]
        mem = p[MEM_LIMIT] + self.memory_factor * p[MEM_REQUEST] + self.default_memory * p[MEM_BARE]
        return cpu, mem

    def apply_one(self, parts: np.ndarray) -> tuple[float, float]:
        """``apply`` for one pod's parts, in Python floats."""
        cl, cr, cb, ml, mr, mb = parts.tolist()
        return (cl + self.cpu_factor * cr + self.default_cpu * cb,
                ml + self.memory_factor * mr + self.default_memory * mb)


@dataclass(slots=True)
class Series:
    """One query's samples over the view's slots (the last slot is the 'no such node' sentinel)."""

    values: np.ndarray  # float64; NaN where missing
    times: np.ndarray  # float64 unix seconds; NaN where missing
    state: np.ndarray  # int8 FRESH / STALE / MISSING


class MetricsView:
    """The published metrics of one policy's source, plus its in-flight estimates."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.uid = next(_uids)
        self.clock = clock
        self.version = 0  # bumps on every publication (values, states, layout)
        self.layout = 0  # bumps when the slot set changes
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.series: dict[SeriesKey, Series] = {}
        self.available = False  # the latest refresh reached the backend
        # in-flight pods: key -> (node, placed at, parts); ``acc`` sums them per slot
        self.records: dict[str, tuple[str, float, np.ndarray]] = {}
        self.acc = np.zeros((1, PARTS), dtype=np.float64)
        self._listeners: list[weakref.WeakMethod] = []

    # ------------------------------------------------------------------ reading (plugins)
    def slot_rows(self, nodes: "NodeTable") -> np.ndarray:
        """Per NodeTable row, its slot here (the sentinel when no series names the node).
        Cached in the table until its node set changes or this view's layout does."""
        def build() -> np.ndarray:
            sentinel = len(self.names)
            idx = self.index
            return np.fromiter((idx.get(nm, sentinel) for nm in nodes.names), dtype=np.int64, count=nodes.n)
        return nodes.cached(("metric-slots", self.uid, self.layout), build)

    def series_for(self, key: SeriesKey) -> Series:
        """The series for ``key``; every node missing when the source does not have it (yet)."""
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = _empty_series(len(self.names) + 1)
        return s

    # ------------------------------------------------------------------ writing (the source)
    def publish(self, samples: Mapping[SeriesKey, Mapping[str, Sample]], now: float, ttl: float,
                available: bool, usage_lag: float = 0.0, horizon: float = math.inf) -> int:
        """Replace every series with ``samples`` (node -> (value, time)), states as of ``now``;
        then drop the in-flight pods the new samples cover (see ``_expire_inflight``). Returns
        how many were dropped."""
        names: set[str] = set()
        for per_node in samples.values():
            names.update(per_node)
        new = [nm for nm in names if nm not in self.index]
        if new:
            for nm in sorted(new):
                self.index[nm] = len(self.names)
                self.names.append(nm)
            self.layout += 1
        size = len(self.names) + 1
        series = {}
        for key, per_node in samples.items():
            values = np.full(size, np.nan)
            times = np.full(size, np.nan)
            for nm, (v, t) in per_node.items():
                i = self.index[nm]
                values[i], times[i] = v, t
            series[key] = Series(values, times, _states(times, now, ttl))
        self.series = series
        self.available = available
        dropped = self._expire_inflight(now, usage_lag, horizon)
        self._rebuild_acc()
        self.version += 1
        return dropped

    def covered_at(self) -> np.ndarray:
        """Per slot, the oldest of its latest fresh samples over all series (NaN: none fresh)."""
        out = np.full(len(self.names) + 1, np.nan)
        for s in self.series.values():
            t = np.where(s.state == FRESH, s.times, np.nan)
            out = np.fmin(out, t)  # NaN-ignoring minimum
        return out

    def add_inflight(self, key: str, node: str, parts: np.ndarray, placed_at: float) -> None:
        if key in self.records:
            self.remove_inflight(key)
        self.records[key] = (node, placed_at, parts)
        self._count(node, parts)

    def remove_inflight(self, key: str, node: str | None = None) -> bool:
        """Forget the in-flight pod ``key`` (only if it is on ``node``, when given); False when
        there was nothing to forget."""
        rec = self.records.get(key)
        if rec is None or (node is not None and rec[0] != node):
            return False
        del self.records[key]
        self._count(rec[0], -rec[2])
        return True

    def _expire_inflight(self, now: float, usage_lag: float, horizon: float) -> int:
        """Forget the in-flight pods that a fresh sample taken at least ``usage_lag`` seconds after
        their placement covers on every series of their node, and those placed more than
        ``horizon`` seconds ago (their node's metrics are stale by then)."""
        cov = self.covered_at()
        gone = []
        for key, (node, t, _parts) in self.records.items():
            slot = self.index.get(node)
            covered = slot is not None and not math.isnan(cov[slot]) and cov[slot] >= t + usage_lag
            if covered or now - t > horizon:
                gone.append(key)
        for key in gone:
            del self.records[key]
        return len(gone)

    def _count(self, node: str, signed: np.ndarray) -> None:
        slot = self.index.get(node)
        if slot is None:
            return  # no series names the node: its estimate matters to no metric
        self.acc[slot] += signed
        for ref in list(self._listeners):
            listener = ref()
            if listener is None:
                self._listeners.remove(ref)
            else:
                listener(node, signed)

    def subscribe(self, listener: Callable[[str, np.ndarray], None]) -> None:
        """Call ``listener(node, signed parts)`` (a bound method, held weakly) on every in-flight
        change of a node that has a slot, as it happens."""
        ref = weakref.WeakMethod(listener)
        if ref not in self._listeners:
            self._listeners.append(ref)

    def _rebuild_acc(self) -> None:
        self.acc = np.zeros((len(self.names) + 1, PARTS), dtype=np.float64)
        for node, _t, parts in self.records.values():
            slot = self.index.get(node)
            if slot is not None:
                self.acc[slot] += parts


def _empty_series(size: int) -> Series:
    return Series(np.full(size, np.nan), np.full(size, np.nan), np.full(size, MISSING, dtype=np.int8))


def _states(times: np.ndarray, now: float, ttl: float) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        fresh = now - times <= ttl
    return np.where(np.isnan(times), MISSING, np.where(fresh, FRESH, STALE)).astype(np.int8)


class RowCache:
    """Whether a plugin's row-aligned values derived from a view are still valid: they are for one
    (view publication, node set) pair."""

    __slots__ = ("key",)

    def __init__(self) -> None:
        self.key: tuple | None = None

    def stale(self, view: MetricsView | None, nodes: "NodeTable") -> bool:
        key = (None if view is None else (view.uid, view.version), id(nodes), nodes.node_version, nodes.n)
        if key != self.key:
            self.key = key
            return True
        return False

    def valid_for(self, view: MetricsView, nodes: "NodeTable") -> bool:
        return self.key == ((view.uid, view.version), id(nodes), nodes.node_version, nodes.n)


def ages(view: MetricsView | None, series: Series | None, slots: np.ndarray) -> list[float | None]:
    """Sample ages in seconds for the given slots (None where missing)."""
    if view is None or series is None:
        return [None] * len(slots)
    now = view.clock()
    return [None if t != t else now - t for t in series.times[slots].tolist()]  # t != t: NaN
