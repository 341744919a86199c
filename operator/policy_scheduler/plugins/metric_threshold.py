"""MetricThreshold: filter nodes by any PromQL the policy gives.

Each entry of ``metrics`` names a query returning an instant vector keyed by node (the label
``nodeLabel``, ``instance`` unless told; a ``host:port`` value means ``host``) and rejects a
node whose fresh value is above ``rejectAbove`` or below ``rejectBelow``. ``podsRequesting``
limits an entry to pods requesting one of those resources, e.g. GPU utilisation from the DCGM
exporter above 0.9 makes a node unschedulable for pods requesting ``nvidia.com/gpu`` only.

A node without a fresh value follows the entry's ``onMissingMetrics``: ``Exclude`` rejects it;
``Neutral`` and ``FallbackToRequests`` pass it (requests are NodeResourcesFit's to check).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..framework.interface import CycleState, FilterPlugin, FilterResult, PluginArgs, PreFilterPlugin
from ..framework.metricview import FRESH, MISSING, SOURCE, STATE_NAMES, MetricsView, SeriesKey, ages
from ..framework.nodetable import NodeTable
from ..framework.podinfo import PodInfo
from ..framework.status import Status
from .load_aware import OnMissingMetrics, check_label_name


class MetricRule(PluginArgs):
    """One metric: a PromQL instant vector keyed by node, and what to do without fresh values."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$",
                      description="Short name used in reasons, explain and the policy status.")
    query: str = Field(min_length=1)
    node_label: str = Field(default="instance", alias="nodeLabel")
    pods_requesting: list[str] = Field(default_factory=list, alias="podsRequesting")
    on_missing_metrics: OnMissingMetrics = Field(default="Neutral", alias="onMissingMetrics")

    @field_validator("node_label")
    @classmethod
    def _label(cls, v: str) -> str:
        return check_label_name(v)

    @property
    def key(self) -> SeriesKey:
        return (self.query, self.node_label)

    def applies_to(self, pod: PodInfo) -> bool:
        return not self.pods_requesting or any(pod.requests.get(r, 0) > 0 for r in self.pods_requesting)


def unique_names(rules: list[MetricRule]) -> None:
    seen: dict[str, int] = {}
    for i, r in enumerate(rules):
        if r.name in seen:
            raise ValueError(f"metrics[{i}].name: Duplicate value: {r.name!r} (also metrics[{seen[r.name]}])")
        seen[r.name] = i


def rule_values(view: MetricsView | None, rule: MetricRule, nodes: NodeTable,
                rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, fresh mask) of ``rule``'s series for ``rows``."""
    if view is None:
        return np.zeros(len(rows)), np.zeros(len(rows), dtype=bool)
    s = view.series_for(rule.key)
    slots = view.slot_rows(nodes)[rows]
    return s.values[slots], s.state[slots] == FRESH


def describe_rules(view: MetricsView | None, rules: list[MetricRule], nodes: NodeTable,
                   rows: np.ndarray) -> list[dict]:
    """Per row: value, sample age and state of each rule's metric."""
    out: list[dict] = [{} for _ in rows]
    slots = view.slot_rows(nodes)[rows] if view is not None else None
    for rule in rules:
        if view is None:
            for d in out:
                d[rule.name] = {"state": "missing", "age": None}
            continue
        s = view.series_for(rule.key)
        age = ages(view, s, slots)
        for j, (st, v) in enumerate(zip(s.state[slots].tolist(), s.values[slots].tolist())):
            d = {"state": STATE_NAMES[st], "age": age[j]}
            if st != MISSING:
                d["value"] = v
            out[j][rule.name] = d
    return out


def fmt(v: float) -> str:
    return f"{v:.3g}"


class ThresholdRule(MetricRule):
    reject_above: float | None = Field(default=None, alias="rejectAbove")
    reject_below: float | None = Field(default=None, alias="rejectBelow")

    @model_validator(mode="after")
    def _bounds(self) -> "ThresholdRule":
        if self.reject_above is None and self.reject_below is None:
            raise ValueError("rejectAbove: Required value: set rejectAbove, rejectBelow or both")
        if self.reject_above is not None and self.reject_below is not None and self.reject_below > self.reject_above:
            raise ValueError(f"rejectBelow: Invalid value: {self.reject_below:g}: above rejectAbove "
                             f"({self.reject_above:g}) every node would be rejected")
        return self


class MetricThresholdArgs(PluginArgs):
    metrics: list[ThresholdRule] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "MetricThresholdArgs":
        unique_names(self.metrics)
        return self


class RuleSelection:
    """For plugins configured by ``args.metrics`` (a list of rules): the queries their source
    must run, and per cycle the rules that apply to the pod (kept in CycleState)."""

    NAME = ""

    @classmethod
    def metric_queries(cls, args) -> list[SeriesKey]:
        return [r.key for r in args.metrics]

    def _rules(self, state: CycleState, pod: PodInfo) -> list:
        key = self.NAME + "/rules"
        rules = state.read(key)
        if rules is None:
            rules = [r for r in self.args.metrics if r.applies_to(pod)]  # type: ignore[attr-defined]
            state.write(key, rules)
        return rules


class MetricThreshold(RuleSelection, PreFilterPlugin, FilterPlugin):
    NAME = "MetricThreshold"
    Args = MetricThresholdArgs

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        return (Status.success() if self._rules(state, pod) else Status.skip()), None

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        view = self.handle.source(SOURCE)
        failed = np.zeros(len(rows), dtype=bool)
        reasons: list[tuple[str, np.ndarray]] = []
        for rule in self._rules(state, pod):
            v, fresh = rule_values(view, rule, nodes, rows)
            if rule.on_missing_metrics == "Exclude" and not fresh.all():
                reasons.append((f"node(s) had no fresh {rule.name} metric", ~fresh))
                failed |= ~fresh
            for bound, word, out in ((rule.reject_above, "above", lambda b: fresh & (v > b)),
                                     (rule.reject_below, "below", lambda b: fresh & (v < b))):
                if bound is None:
                    continue
                bad = out(bound)
                if not bad.any():
                    continue
                failed |= bad
                shown = np.array([fmt(x) for x in v[bad]])
                for text in np.unique(shown):
                    mask = np.zeros(len(rows), dtype=bool)
                    mask[np.flatnonzero(bad)[shown == text]] = True
                    reasons.append((f"node(s) had {rule.name} {text} {word} the {fmt(bound)} threshold", mask))
        return FilterResult(~failed, reasons=reasons)

    def describe(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> list[dict] | None:
        rules = self._rules(state, pod)
        if not rules:
            return None
        return describe_rules(self.handle.source(SOURCE), rules, nodes, rows)


PLUGIN = MetricThreshold
