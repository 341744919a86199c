"""MetricThreshold: filter nodes by any PromQL the policy gives.

Each entry of ``metrics`` names a query returning an instant vector keyed by node (the label
``nodeLabel``, ``instance`` unless told; a ``host:port`` value means ``host``) and rejects a
node whose fresh value is above ``rejectAbove`` or below ``rejectBelow``. ``podsRequesting``
limits an entry to pods requesting one of those resources, e.g. GPU utilisation from the DCGM
exporter above 0.9 makes a node unschedulable for pods requesting ``nvidia.com/gpu`` only.

A node without a fresh value follows the entry's ``onMissingMetrics``: ``Exclude`` rejects it;
``Neutral`` and ``FallbackToRequests`` pass it (requests are NodeResourcesFit's to check).

Events: the policy's metric source published new values (METRICS_REFRESH), or a node was added;
both queue without a hint.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from ..framework.events import ClusterEventWithHint
from ..framework.interface import CycleState, EnqueueExtensions, FilterPlugin, FilterResult, PluginArgs, PreFilterPlugin
from ..framework.metricrules import (MetricRule, RuleSelection, describe_rules, metric_plugin_events, rule_values,
                                     unique_names)
from ..framework.metricview import SOURCE
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.status import Status
from ..framework.validation import MAX_METRICS, go_value, invalid, required


def fmt(v: float) -> str:
    return f"{v:.3g}"


class ThresholdRule(MetricRule):
    reject_above: float | None = Field(default=None, alias="rejectAbove", allow_inf_nan=False)
    reject_below: float | None = Field(default=None, alias="rejectBelow", allow_inf_nan=False)

    @model_validator(mode="after")
    def _bounds(self) -> "ThresholdRule":
        if self.reject_above is None and self.reject_below is None:
            raise ValueError(required("rejectAbove", "set rejectAbove, rejectBelow or both"))
        if self.reject_above is not None and self.reject_below is not None and self.reject_below > self.reject_above:
            raise ValueError(invalid("rejectBelow", self.reject_below,
                                     f"above rejectAbove ({go_value(self.reject_above)}): every node would be rejected"))
        return self


class MetricThresholdArgs(PluginArgs):
    metrics: list[ThresholdRule] = Field(min_length=1, max_length=MAX_METRICS)

    @model_validator(mode="after")
    def _unique(self) -> "MetricThresholdArgs":
        unique_names(self.metrics)
        return self


class MetricThreshold(RuleSelection, PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME = "MetricThreshold"
    Args = MetricThresholdArgs
    args: MetricThresholdArgs  # what Args parsed

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return metric_plugin_events()

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
