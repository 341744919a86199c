"""LoadAware: place pods by the nodes' real cpu and memory usage (Prometheus), not by requests.

Usage per node is a fraction of the node: cpu busy share and memory used share, from the
policy's metric source (by default node_exporter's ``node_cpu_seconds_total`` idle rate and
``node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes``, keyed by the ``nodeLabel``
label, ``instance`` unless told). Pods placed since a node's latest sample are added at an
estimate (limit, else request x ``estimatedScalingFactors``, else ``estimatedDefaults``) as a
share of the node's allocatable, so a burst does not pile onto the node that merely looked idle.

Filter: a node whose cpu (or memory) usage is above ``usageThresholds`` (percent; 0 turns the
check off) is rejected, with a reason naming the metric and the threshold, e.g. "node(s) had cpu
usage above the 80% threshold": one reason per metric, so that the FailedScheduling histogram
aggregates (the nodes' values are in explain's details).
Score (0..100, no normalization): the weighted headroom, per resource
``floor((1 - usage) * 100)`` clipped to [0, 100], combined as
``sum(weight * score) // sum(weight)`` over ``resourceWeights``.

A node without fresh values for both metrics follows ``onMissingMetrics``: ``Neutral`` passes
the filter and scores 50; ``Exclude`` rejects it; ``FallbackToRequests`` passes the filter and
scores by allocation as NodeResourcesFit's LeastAllocated (non-zero requests incl. the pod's).

Reserve: the pod placed on a node counts there as in flight, at its estimate, in the policy's
MetricsView (placed at the view's clock, the one its sample times are read with); Unreserve takes
it back when a later step fails. The view drops it once a fresh sample covers it.

Every per-pod step indexes row-aligned arrays derived once per metrics publication (and node
set); a placement updates its node's entries when it happens, outside the cycle.

Events: the policy's metric source published new values (METRICS_REFRESH), or a node was added;
both queue without a hint.
"""

from __future__ import annotations

import math
import re

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..framework.events import ClusterEventWithHint
from ..framework.interface import (MAX_NODE_SCORE, CycleState, EnqueueExtensions, FilterPlugin, FilterResult,
                                   PluginArgs, ReservePlugin, ScorePlugin)
from ..framework.metricrules import NEUTRAL_SCORE, OnMissingMetrics, check_label_name, metric_plugin_events
from ..framework.metricview import (FRESH, SOURCE, STATE_NAMES, Estimator, MetricsView, RowCache, SeriesKey,
                                    estimate_parts)
from ..framework.model.nodetable import CPU, MEMORY, NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.model.quantity import QuantityError, resource_value
from ..framework.model.resources import requests_scores
from ..framework.status import Status
from ..framework.validation import MAX_NAME, MAX_QUERY, MAX_SHORT, invalid, raise_if

PROM_DURATION = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+")


class _Percentages(PluginArgs):
    cpu: float = Field(allow_inf_nan=False)
    memory: float = Field(allow_inf_nan=False)

    @model_validator(mode="after")
    def _range(self) -> "_Percentages":
        raise_if([invalid(name, getattr(self, name), "must be a percentage in [0, 100]")
                  for name in ("cpu", "memory") if not 0 <= getattr(self, name) <= 100])
        return self


class Thresholds(_Percentages):
    """Usage above which a node is filtered out, in percent; 0 turns the check off."""

    cpu: float = Field(default=80, allow_inf_nan=False)
    memory: float = Field(default=90, allow_inf_nan=False)


class ScalingFactors(_Percentages):
    """Share of its request an in-flight pod without a limit is counted at, in percent."""

    cpu: float = Field(default=85, allow_inf_nan=False)
    memory: float = Field(default=70, allow_inf_nan=False)


class Weights(PluginArgs):
    """Score weight of each resource's headroom."""

    cpu: int = Field(default=1, ge=0, le=100)
    memory: int = Field(default=1, ge=0, le=100)


class Quantities(PluginArgs):
    """What an in-flight pod with neither limit nor request counts as."""

    cpu: str = Field(default="250m", max_length=MAX_SHORT)
    memory: str = Field(default="200Mi", max_length=MAX_SHORT)

    @model_validator(mode="after")
    def _parse(self) -> "Quantities":
        errs = []
        for name in ("cpu", "memory"):
            try:
                resource_value(name, getattr(self, name))
            except QuantityError as e:
                errs.append(invalid(name, getattr(self, name), str(e)))
        raise_if(errs)
        return self


class LoadAwareArgs(PluginArgs):
    usage_thresholds: Thresholds = Field(default_factory=Thresholds, alias="usageThresholds")
    resource_weights: Weights = Field(default_factory=Weights, alias="resourceWeights")
    on_missing_metrics: OnMissingMetrics = Field(default="FallbackToRequests", alias="onMissingMetrics")
    node_label: str = Field(default="instance", alias="nodeLabel", max_length=MAX_NAME)
    rate_window: str = Field(default="1m", alias="rateWindow", max_length=MAX_SHORT)
    cpu_query: str | None = Field(default=None, alias="cpuQuery", min_length=1, max_length=MAX_QUERY)
    memory_query: str | None = Field(default=None, alias="memoryQuery", min_length=1, max_length=MAX_QUERY)
    estimated_scaling_factors: ScalingFactors = Field(default_factory=ScalingFactors,
                                                      alias="estimatedScalingFactors")
    estimated_defaults: Quantities = Field(default_factory=Quantities, alias="estimatedDefaults")

    @field_validator("node_label")
    @classmethod
    def _label(cls, v: str) -> str:
        return check_label_name(v)

    @field_validator("rate_window")
    @classmethod
    def _window(cls, v: str) -> str:
        if len(v) > MAX_SHORT or not PROM_DURATION.fullmatch(v):
            raise ValueError(invalid("rateWindow", v, "must be a PromQL duration (e.g. 1m, 30s)"))
        return v

    @model_validator(mode="after")
    def _weights(self) -> "LoadAwareArgs":
        if self.resource_weights.cpu + self.resource_weights.memory == 0:
            raise ValueError(invalid("resourceWeights", self.resource_weights.model_dump(),
                                     "at least one weight must be positive"))
        return self

    def queries(self) -> tuple[SeriesKey, SeriesKey]:
        label = self.node_label
        cpu = self.cpu_query or (
            f'1 - avg by ({label}) (rate(node_cpu_seconds_total{{mode="idle"}}[{self.rate_window}]))')
        mem = self.memory_query or (
            f"1 - max by ({label}) (node_memory_MemAvailable_bytes) / max by ({label}) (node_memory_MemTotal_bytes)")
        return (cpu, label), (mem, label)


class _Rows:
    """LoadAware's row-aligned state for one (publication, node set). Verdicts and scores are
    arrays (gathered per pod); the inputs are lists per resource (cpu, memory), so that a
    placement updates its row in plain Python."""

    __slots__ = ("avail", "rid", "reject", "score", "rids", "missing", "base", "est", "alloc", "seen")

    def __init__(self, n: int) -> None:
        self.avail = np.zeros(n, dtype=bool)
        self.rid = np.zeros(n, dtype=np.int64)  # 0: passes the filter; else which reasons (see _reasons)
        self.reject = np.zeros(n, dtype=bool)  # rid > 0
        self.score = np.zeros(n, dtype=np.int64)
        self.rids: dict[int, int] = {}  # reasons' id -> rows having it
        self.missing = True  # some row lacks fresh metrics
        self.base: list[list[float]] = [[], []]  # measured cpu, memory share
        self.est: list[list[float]] = [[], []]  # in-flight cpu millicores, memory bytes
        self.alloc: list[list[float]] = [[], []]  # allocatable (at least 1)
        self.seen: list[list[tuple[str, float]]] = [[], []]  # (state name, sample time) of each metric, for explain


RESOURCES = ("cpu", "memory")


class LoadAware(FilterPlugin, ScorePlugin, ReservePlugin, EnqueueExtensions):
    NAME = "LoadAware"
    Args = LoadAwareArgs

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return metric_plugin_events()

    _KEY = NAME + "/rows"

    def __init__(self, args: LoadAwareArgs, handle) -> None:
        super().__init__(args, handle)
        self.cpu_key, self.mem_key = args.queries()
        t = args.usage_thresholds
        self._thr_pct = (float(t.cpu), float(t.memory))
        self._thr = (t.cpu / 100.0, t.memory / 100.0)
        w = args.resource_weights
        self._w = (w.cpu, w.memory)
        self._weights = np.array(self._w, dtype=np.int64)
        self._wsum = w.cpu + w.memory
        f, d = args.estimated_scaling_factors, args.estimated_defaults
        self.estimator = Estimator(f.cpu / 100.0, f.memory / 100.0, float(resource_value("cpu", d.cpu)),
                                   float(resource_value("memory", d.memory)))
        self._mode = args.on_missing_metrics
        self._exclude = self._mode == "Exclude"
        self._other = NEUTRAL_SCORE if self._mode == "Neutral" else 0  # score of a node without metrics
        self._cache = RowCache()
        self._rows = _Rows(0)
        self._nodes: NodeTable | None = None  # the table the rows were built for
        self._texts: dict[int, list[str]] = {}

    @classmethod
    def metric_queries(cls, args: LoadAwareArgs) -> list[SeriesKey]:
        """The series this plugin reads, for the policy's metric source."""
        return list(args.queries())

    # ------------------------------------------------------------------ row-aligned state
    def _view(self) -> MetricsView | None:
        return self.handle.source(SOURCE)

    def _sync(self, state: CycleState, nodes: NodeTable) -> _Rows:
        """The row state, brought up to date once per cycle."""
        r = state.read(self._KEY)
        if r is not None:
            return r
        view = self._view()
        r = self._rows
        if self._cache.stale(view, nodes):
            r = self._rows = self._build(view, nodes)
            self._nodes = nodes
            if view is not None:
                view.subscribe(self._on_inflight)
        state.write(self._KEY, r)
        return r

    def _on_inflight(self, node: str, parts: np.ndarray) -> None:
        """A placement (or its undoing) outside the cycle: update that node's row now, if the rows
        are still those of the view's publication and the table's node set (else the next cycle
        rebuilds them, in-flight pods included)."""
        nodes = self._nodes
        view = self._view()
        if nodes is None or view is None or not self._cache.valid_for(view, nodes):
            return
        row = nodes.index.get(node)
        if row is not None and self._rows.avail[row]:
            self._add_row(self._rows, row, self.estimator.apply_one(parts))

    def _build(self, view: MetricsView | None, nodes: NodeTable) -> _Rows:
        n = nodes.n
        r = _Rows(n)
        base, est = np.zeros((2, n)), np.zeros((2, n))
        if view is not None and n:
            slots = view.slot_rows(nodes)
            cs, ms = view.series_for(self.cpu_key), view.series_for(self.mem_key)
            r.avail = (cs.state[slots] == FRESH) & (ms.state[slots] == FRESH)
            base[0] = np.where(r.avail, cs.values[slots], 0.0)
            base[1] = np.where(r.avail, ms.values[slots], 0.0)
            est[0], est[1] = self.estimator.apply(view.acc[slots])
        alloc = np.maximum(nodes.allocatable[:n, [CPU, MEMORY]].T, 1).astype(np.float64)
        r.missing = not bool(r.avail.all())
        # verdicts and scores of every row; _add_row is the same arithmetic for one row
        usage = base + est / alloc
        thr = np.array(self._thr)[:, None]
        hot = (thr > 0) & (usage > thr) & r.avail
        r.rid = hot[0] * 4 + hot[1] * 2 + (~r.avail & self._exclude)
        r.reject = r.rid > 0
        ids, counts = np.unique(r.rid[r.reject], return_counts=True)
        r.rids = dict(zip(ids.tolist(), counts.tolist()))
        head = np.clip(np.floor((1.0 - usage) * MAX_NODE_SCORE), 0, MAX_NODE_SCORE).astype(np.int64)
        r.score = np.where(r.avail, (head * self._weights[:, None]).sum(axis=0) // self._wsum, self._other)
        r.base, r.est, r.alloc = base.tolist(), est.tolist(), alloc.tolist()
        if view is not None and n:
            r.seen = [list(zip([STATE_NAMES[x] for x in s.state[slots].tolist()], s.times[slots].tolist()))
                      for s in (cs, ms)]
        else:
            r.seen = [[("missing", math.nan)] * n] * 2
        return r

    def _add_row(self, r: _Rows, row: int, est: tuple[float, float]) -> None:
        """Add an in-flight estimate to a row with metrics: ``_build``'s arithmetic for one row."""
        rid = 0
        total = 0
        for i in (0, 1):
            e = r.est[i][row] = r.est[i][row] + est[i]
            u = r.base[i][row] + e / r.alloc[i][row]
            if self._thr[i] > 0 and u > self._thr[i]:
                rid += 4 >> i
            total += self._w[i] * min(max(math.floor((1.0 - u) * MAX_NODE_SCORE), 0), MAX_NODE_SCORE)
        old = int(r.rid[row])
        if rid != old:
            if old:
                r.rids[old] -= 1
                if not r.rids[old]:
                    del r.rids[old]
            if rid:
                r.rids[rid] = r.rids.get(rid, 0) + 1
            r.rid[row] = rid
            r.reject[row] = rid > 0
        r.score[row] = total // self._wsum

    def _reasons(self, rid: int) -> list[str]:
        """The reasons of a row id: bit 4 cpu above its threshold, bit 2 memory, bit 1 no fresh
        metrics (Exclude)."""
        texts = self._texts.get(rid)
        if texts is None:
            texts = ["node(s) had no fresh cpu and memory usage metrics"] if rid & 1 else []
            texts += [f"node(s) had {name} usage above the {thr:g}% threshold"
                      for name, thr, bit in zip(RESOURCES, self._thr_pct, (4, 2)) if rid & bit]
            self._texts[rid] = texts
        return texts

    def hot_rows(self, nodes: NodeTable) -> np.ndarray:
        """Per row of ``nodes``: the node has fresh metrics and its cpu or memory usage (measured,
        plus the pods in flight at their estimates) is above its threshold: what Filter rejects
        as hot (the tuner's hotNodes measure)."""
        r = self._sync(CycleState(), nodes)
        return (r.rid[:nodes.n] & 6) > 0

    # ------------------------------------------------------------------ reserve
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Count the pod on ``node_name`` as in flight until a fresh sample covers it; the row of
        that node is updated at once (``_on_inflight``), so the next pod's Filter and Score see it."""
        view = self._view()
        if view is not None:
            view.add_inflight(pod.key, node_name, estimate_parts(pod), view.clock())
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Undo ``reserve`` (idempotent: nothing to do when the pod is not in flight there)."""
        view = self._view()
        if view is not None:
            view.remove_inflight(pod.key, node_name)

    # ------------------------------------------------------------------ filter
    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        r = self._sync(state, nodes)
        if not r.rids:
            return FilterResult(np.ones(len(rows), dtype=bool))
        bad = r.reject[rows]
        if len(r.rids) == 1:  # the usual case: one reason (set) for every rejected node
            return FilterResult(~bad, reasons=[(text, bad) for text in self._reasons(next(iter(r.rids)))])
        ids = r.rid[rows]
        reasons: list[tuple[str, np.ndarray]] = []
        for rid in r.rids:
            mask = ids == rid
            if mask.any():
                reasons.extend((text, mask) for text in self._reasons(rid))
        return FilterResult(~bad, reasons=reasons)

    # ------------------------------------------------------------------ score
    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        r = self._sync(state, nodes)
        out = r.score[rows]
        if r.missing and self._mode == "FallbackToRequests":
            miss = ~r.avail[rows]
            if miss.any():
                out[miss] = requests_scores(pod, nodes, rows[miss], self._weights)
        return out

    def describe(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> list[dict]:
        """Per row: measured usage share, in-flight share, sample age (s) and state of each metric,
        and what scored the node (its usage, or the onMissingMetrics fallback)."""
        r = self._sync(state, nodes)
        view = self._view()
        now = view.clock() if view is not None else 0.0
        (b0, b1), (e0, e1), (a0, a1), (s0, s1) = r.base, r.est, r.alloc, r.seen
        out = []
        for row in rows.tolist():
            (st0, t0), (st1, t1) = s0[row], s1[row]
            if r.avail[row]:  # both fresh: both sampled
                out.append({"cpu": {"state": st0, "age": now - t0, "value": b0[row], "inFlight": e0[row] / a0[row]},
                            "memory": {"state": st1, "age": now - t1, "value": b1[row],
                                       "inFlight": e1[row] / a1[row]},
                            "scoredBy": "usage"})
            else:  # t != t: NaN, no sample at all
                out.append({"cpu": {"state": st0, "age": None if t0 != t0 else now - t0},
                            "memory": {"state": st1, "age": None if t1 != t1 else now - t1},
                            "scoredBy": self._mode})
        return out


PLUGIN = LoadAware
