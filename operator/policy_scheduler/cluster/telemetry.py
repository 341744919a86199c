"""Telemetry: the operator's own metrics, exported on /metrics (names mirror kube-scheduler's, prefixed).

Not to be confused with metricsources/ (the Prometheus data the usage-aware plugins read) or
framework/metricview.py (the plugins' read-only view of those values)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY = tuple(0.0005 * 2**i for i in range(16))  # 0.5 ms .. ~16 s


class Telemetry:
    """The operator's own metrics, exported on /metrics."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.attempts = Counter("policy_scheduler_schedule_attempts", "Scheduling attempts by result.",
                                ["result", "policy"], registry=r)
        self.attempt_duration = Histogram("policy_scheduler_scheduling_attempt_duration_seconds",
                                          "Time of one scheduling cycle (decision only).", ["result"],
                                          buckets=_LATENCY, registry=r)
        self.binding_duration = Histogram("policy_scheduler_binding_duration_seconds",
                                          "Time of the pods/binding request.", buckets=_LATENCY, registry=r)
        self.e2e_duration = Histogram("policy_scheduler_pod_scheduling_duration_seconds",
                                      "From first seen pending to bound.", buckets=_LATENCY, registry=r)
        self.bind_errors = Counter("policy_scheduler_binding_errors", "Failed bindings by HTTP status.",
                                   ["code"], registry=r)
        self.pending = Gauge("policy_scheduler_pending_pods", "Pods in the scheduling queue by sub-queue.",
                             ["queue"], registry=r)
        self.nodes = Gauge("policy_scheduler_nodes", "Nodes in the scheduler's cache.", registry=r)
        self.policies = Gauge("policy_scheduler_policies", "SchedulingPolicies by readiness.", ["ready"], registry=r)
        self.events_dropped = Counter("policy_scheduler_events_dropped",
                                      "Kubernetes Events or status writes that failed.", ["kind"], registry=r)
        self._attempt_children: dict[tuple[str, str], tuple[Any, Any]] = {}

    def attempt(self, result: str, policy: str, seconds: float | None = None) -> None:
        """Count one scheduling attempt (and its duration, when given); the labelled children are
        looked up once per (result, policy), not per pod."""
        children = self._attempt_children.get((result, policy))
        if children is None:
            children = self._attempt_children[(result, policy)] = (
                self.attempts.labels(result, policy), self.attempt_duration.labels(result))
        children[0].inc()
        if seconds is not None:
            children[1].observe(seconds)
