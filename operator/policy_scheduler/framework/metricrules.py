"""Metric rules: what the metric plugins (LoadAware, MetricThreshold, MetricScore) share about
naming a PromQL series, reading its fresh values from the policy's MetricsView, describing them
for explain, and what a node without fresh values gets.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal, Protocol, Sequence

import numpy as np
from pydantic import Field, field_validator

from .events import ActionType, ClusterEvent, ClusterEventWithHint, METRICS_REFRESH, Resource
from .interface import MAX_NODE_SCORE, CycleState, PluginArgs
from .metricview import FRESH, MISSING, STATE_NAMES, MetricsView, SeriesKey, ages
from .model.nodetable import NodeTable
from .model.labels import validate_label_name
from .model.podinfo import PodInfo
from .validation import MAX_LABEL_KEY, MAX_NAME, MAX_PODS_REQUESTING, MAX_QUERY, duplicate, invalid, raise_if

OnMissingMetrics = Literal["Neutral", "Exclude", "FallbackToRequests"]
# the score of a node without fresh values under onMissingMetrics: Neutral
NEUTRAL_SCORE = MAX_NODE_SCORE // 2
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# a metric's name in reasons, explain and the status
METRIC_NAME_PATTERN = r"^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"


def metric_plugin_events() -> list[ClusterEventWithHint]:
    """What a plugin rejecting nodes by their metrics registers: the policy's metric source
    published new values, or a node was added (both without a hint: any may change a verdict)."""
    return [ClusterEventWithHint(METRICS_REFRESH), ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD))]


def check_label_name(v: str) -> str:
    """A Prometheus label name (the field validator of ``nodeLabel``)."""
    if len(v) > MAX_NAME or not LABEL_NAME.fullmatch(v):
        raise ValueError(invalid("nodeLabel", v, "must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"))
    return v


class MetricRule(PluginArgs):
    """One metric: a PromQL instant vector keyed by node, and what to do without fresh values."""

    name: str = Field(min_length=1, max_length=63, pattern=METRIC_NAME_PATTERN,
                      description="Short name used in reasons, explain and the policy status.")
    query: str = Field(min_length=1, max_length=MAX_QUERY)
    node_label: str = Field(default="instance", alias="nodeLabel", max_length=MAX_NAME)
    pods_requesting: list[Annotated[str, Field(max_length=MAX_LABEL_KEY)]] = Field(
        default_factory=list, alias="podsRequesting", max_length=MAX_PODS_REQUESTING)
    on_missing_metrics: OnMissingMetrics = Field(default="Neutral", alias="onMissingMetrics")

    @field_validator("node_label")
    @classmethod
    def _label(cls, v: str) -> str:
        return check_label_name(v)

    @field_validator("pods_requesting")
    @classmethod
    def _resource_names(cls, v: list[str]) -> list[str]:
        errs: list[str] = []
        for i, r in enumerate(v):
            errs += validate_label_name(r, f"podsRequesting[{i}]")
        raise_if(errs)
        return v

    @property
    def key(self) -> SeriesKey:
        return (self.query, self.node_label)

    def applies_to(self, pod: PodInfo) -> bool:
        return not self.pods_requesting or any(pod.requests.get(r, 0) > 0 for r in self.pods_requesting)


def unique_names(rules: Sequence[MetricRule]) -> None:
    """Each metric's name at most once (``metrics[i].name: Duplicate value``)."""
    seen: set[str] = set()
    errs = []
    for i, r in enumerate(rules):
        if r.name in seen:
            errs.append(duplicate(f"metrics[{i}].name", r.name))
        seen.add(r.name)
    raise_if(errs)


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
        assert slots is not None  # set whenever view is
        age = ages(view, s, slots)
        for j, (st, v) in enumerate(zip(s.state[slots].tolist(), s.values[slots].tolist())):
            d = {"state": STATE_NAMES[st], "age": age[j]}
            if st != MISSING:
                d["value"] = v
            out[j][rule.name] = d
    return out


class _RulesArgs(Protocol):
    @property
    def metrics(self) -> Sequence[MetricRule]: ...


class RuleSelection:
    """For plugins configured by ``args.metrics`` (a list of rules): the queries their source
    must run, and per cycle the rules that apply to the pod (kept in CycleState)."""

    NAME: ClassVar[str] = ""
    args: _RulesArgs

    @classmethod
    def metric_queries(cls, args) -> list[SeriesKey]:
        return [r.key for r in args.metrics]

    def _rules(self, state: CycleState, pod: PodInfo) -> list:
        key = self.NAME + "/rules"
        rules = state.read(key)
        if rules is None:
            rules = [r for r in self.args.metrics if r.applies_to(pod)]
            state.write(key, rules)
        return rules
