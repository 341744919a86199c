"""MetricScore: score nodes by any PromQL the policy gives.

Each entry of ``metrics`` names a query returning an instant vector keyed by node (see
MetricThreshold) and whether ``Higher`` or ``Lower`` values are better. Among the nodes being
scored, an entry's fresh values are scaled to 0..100: ``floor((v - min) * 100 / (max - min))``
for Higher, ``floor((max - v) * 100 / (max - min))`` for Lower, 100 for all when max == min.
Entries combine as ``sum(weight * score) // sum(weight)`` over the entries that apply to the
pod (``podsRequesting``).

A node without a fresh value follows the entry's ``onMissingMetrics``: ``Neutral`` scores 50;
``Exclude`` rejects the node at Filter; ``FallbackToRequests`` scores it by allocation, as
NodeResourcesFit's LeastAllocated over cpu and memory.

Events: the policy's metric source published new values (METRICS_REFRESH), or a node was added;
both queue without a hint.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..framework.events import ClusterEventWithHint
from ..framework.interface import (MAX_NODE_SCORE, CycleState, EnqueueExtensions, FilterPlugin, FilterResult,
                                   PluginArgs, PreFilterPlugin, PreScorePlugin, ScorePlugin)
from ..framework.metricrules import (NEUTRAL_SCORE, MetricRule, RuleSelection, describe_rules, metric_plugin_events,
                                     rule_values, unique_names)
from ..framework.metricview import SOURCE
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.model.resources import requests_scores
from ..framework.status import Status
from ..framework.validation import MAX_METRICS

_EQUAL_WEIGHTS = np.array([1, 1], dtype=np.int64)


class ScoreRule(MetricRule):
    prefer: Literal["Higher", "Lower"]
    weight: int = Field(default=1, ge=1, le=100)


class MetricScoreArgs(PluginArgs):
    metrics: list[ScoreRule] = Field(min_length=1, max_length=MAX_METRICS)

    @model_validator(mode="after")
    def _unique(self) -> "MetricScoreArgs":
        unique_names(self.metrics)
        return self


def scale(v: np.ndarray, fresh: np.ndarray, prefer: str) -> np.ndarray:
    """The fresh values scaled to 0..100 among themselves (other entries: 0)."""
    out = np.zeros(len(v), dtype=np.int64)
    if not fresh.any():
        return out
    lo, hi = float(v[fresh].min()), float(v[fresh].max())
    if hi == lo:
        out[fresh] = MAX_NODE_SCORE
        return out
    num = (v[fresh] - lo) if prefer == "Higher" else (hi - v[fresh])
    out[fresh] = np.floor(num * MAX_NODE_SCORE / (hi - lo)).astype(np.int64)
    return out


class MetricScore(RuleSelection, PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, EnqueueExtensions):
    NAME = "MetricScore"
    Args = MetricScoreArgs
    args: MetricScoreArgs  # what Args parsed

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return metric_plugin_events()

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        excluding = any(r.on_missing_metrics == "Exclude" for r in self._rules(state, pod))
        return (Status.success() if excluding else Status.skip()), None

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        view = self.handle.source(SOURCE)
        failed = np.zeros(len(rows), dtype=bool)
        reasons = []
        for rule in self._rules(state, pod):
            if rule.on_missing_metrics != "Exclude":
                continue
            _, fresh = rule_values(view, rule, nodes, rows)
            if not fresh.all():
                reasons.append((f"node(s) had no fresh {rule.name} metric", ~fresh))
                failed |= ~fresh
        return FilterResult(~failed, reasons=reasons)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> Status:
        return Status.success() if self._rules(state, pod) else Status.skip()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        view = self.handle.source(SOURCE)
        rules = self._rules(state, pod)
        total = np.zeros(len(rows), dtype=np.int64)
        if not rules:
            return total
        for rule in rules:
            v, fresh = rule_values(view, rule, nodes, rows)
            s = scale(v, fresh, rule.prefer)
            miss = ~fresh
            if miss.any():
                if rule.on_missing_metrics == "Neutral":
                    s[miss] = NEUTRAL_SCORE
                elif rule.on_missing_metrics == "FallbackToRequests":
                    s[miss] = requests_scores(pod, nodes, rows[miss], _EQUAL_WEIGHTS)
            total += rule.weight * s
        return total // sum(r.weight for r in rules)

    def describe(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> list[dict] | None:
        rules = self._rules(state, pod)
        if not rules:
            return None
        return describe_rules(self.handle.source(SOURCE), rules, nodes, rows)


PLUGIN = MetricScore
