"""SchedulingPolicy's status: what the operator writes (cluster/policy_status.py, the tuner, the
rollout controller). Its caps are those of the spec's lists, so that the CRD's schema (policy/crd.py)
holds what the operator writes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ..framework.validation import MAX_METRICS
from .chain import MAX_PLUGINS
from .fields import Model
from .rollout import MAX_ROLLOUT_SAMPLES


class Condition(Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")
    observed_generation: int | None = Field(default=None, alias="observedGeneration")


class PolicyPluginStatus(Model):
    name: str
    points: list[str] = Field(default_factory=list, max_length=16)
    weight: int | None = None


class MetricQueryStatus(Model):
    query: str
    node_label: str = Field(alias="nodeLabel")
    fresh: int = Field(default=0, description="Nodes with a value no older than the ttl.")
    stale: int = Field(default=0, description="Nodes whose latest value is older than the ttl.")
    missing: int = Field(default=0, description="Nodes of the cluster without any value.")
    newest_sample_time: str | None = Field(default=None, alias="newestSampleTime")
    oldest_sample_time: str | None = Field(default=None, alias="oldestSampleTime")
    error: str | None = Field(default=None, description="Why the latest query failed.")


class MetricsStatus(Model):
    """Freshness of the policy's metrics (plugins LoadAware, MetricThreshold, MetricScore)."""

    address: str
    available: bool = Field(description="The latest refresh reached Prometheus.")
    refresh_interval_seconds: float = Field(alias="refreshIntervalSeconds")
    ttl_seconds: float = Field(alias="ttlSeconds")
    last_refresh_time: str | None = Field(default=None, alias="lastRefreshTime")
    last_success_time: str | None = Field(default=None, alias="lastSuccessTime")
    in_flight_pods: int = Field(default=0, alias="inFlightPods",
                                description="Placed pods counted at an estimate until a sample covers them.")
    queries: list[MetricQueryStatus] = Field(default_factory=list, max_length=4 * MAX_METRICS)


class TunedWeights(Model):
    weights: dict[str, int] = Field(default_factory=dict, max_length=MAX_PLUGINS)
    objective: float | None = Field(default=None, description="The objective of the window replayed with these "
                                                              "weights (lower is better).")


class TuningFeedback(Model):
    """After an Apply step: the pods placed since, as they really went, against the replay."""

    pods: int = Field(description="Pods placed since the Apply step.")
    predicted: float = Field(description="Their objective replayed under the applied weights.")
    measured: float = Field(description="Their objective as placed.")
    error: float = Field(description="(measured - predicted) / predicted.")


class TuningStatus(Model):
    mode: str
    summary: str = Field(description="The TUNING column: mode and the predicted change of the objective.")
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
    evaluated_time: str | None = Field(default=None, alias="evaluatedTime")
    window_pods: int = Field(default=0, alias="windowPods")
    replays: int = Field(default=0, description="Replays spent by the last evaluation.")
    max_replays: int = Field(default=0, alias="maxReplays")
    seconds: float = Field(default=0.0, description="Time spent by the last evaluation.")
    yielded_seconds: float = Field(default=0.0, alias="yieldedSeconds",
                                   description="Of which the worker waited for the scheduler's bursts to end.")
    stopped: str = Field(default="", description="Why the search stopped: converged, replay budget, time budget.")
    current: TunedWeights | None = None
    recommended: TunedWeights | None = None
    gain: float | None = Field(default=None, description="Relative change of the objective, recommended over "
                                                         "current (negative: better).")
    measured: float | None = Field(default=None, description="The window's objective as the pods were placed.")
    feedback: TuningFeedback | None = None
    paused: bool = Field(default=False, description="Apply is paused (predictions missed); recommendations go on.")
    held: list[str] = Field(default_factory=list, max_length=MAX_PLUGINS,
                            description="Plugins whose weight a person changed: left alone until spec.tuning changes.")
    last_applied: dict[str, Any] | None = Field(default=None, alias="lastApplied")
    message: str = ""


class RolloutArm(Model):
    attempts: int = Field(default=0, description="Scheduling attempts since the rollout started.")
    failures: int = Field(default=0, description="Attempts that ended in FailedScheduling.")
    bound: int = Field(default=0, description="Pods bound.")


class ArmMeasures(Model):
    attempts: int = 0
    failure_rate: float | None = Field(default=None, alias="failureRate")
    placed: int = 0
    p95_seconds: float | None = Field(default=None, alias="timeToScheduledP95Seconds")
    nodes_used: float | None = Field(default=None, alias="nodesUsedPerPod")
    imbalance: float | None = None
    zone_skew: float | None = Field(default=None, alias="zoneSkew")


class ShadowPlugin(Model):
    name: str
    changed: int = Field(description="Changed decisions this plugin's weighted score moved toward the candidate's node.")


class ShadowSample(Model):
    pod: str
    stable: str | None = Field(default=None, description="The node the stable chain chose (None: unschedulable).")
    candidate: str | None = Field(default=None, description="The candidate's best node (None: unschedulable).")
    plugins: list[str] = Field(default_factory=list, max_length=MAX_PLUGINS,
                               description="The plugins that moved the decision, most first.")
    time: str | None = None


class ShadowStatus(Model):
    compared: int = Field(default=0, description="Decisions the candidate made beside the stable chain.")
    changed: int = Field(default=0, description="Of which the stable node is not among the candidate's best.")
    became_unschedulable: int = Field(default=0, alias="becameUnschedulable")
    became_schedulable: int = Field(default=0, alias="becameSchedulable")
    plugins: list[ShadowPlugin] = Field(default_factory=list, max_length=2 * MAX_PLUGINS)
    samples: list[ShadowSample] = Field(default_factory=list, max_length=MAX_ROLLOUT_SAMPLES)


class RolloutStatus(Model):
    strategy: str | None = None
    percent: float | None = None
    candidate_hash: str = Field(default="", alias="candidateHash", description="Which candidate this is about.")
    phase: str = Field(description="Shadowing, Progressing, Promoting, Promoted, RolledBack or Aborted.")
    summary: str = Field(default="", description="The ROLLOUT column.")
    message: str = ""
    start_time: str | None = Field(default=None, alias="startTime")
    end_time: str | None = Field(default=None, alias="endTime")
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
    stable: RolloutArm | None = None
    canary: RolloutArm | None = None
    analysis: dict[str, ArmMeasures] | None = Field(default=None, max_length=2,
                                                   description="The window's measures, by arm (stable, canary).")
    shadow: ShadowStatus | None = None


class SchedulingPolicyStatus(Model):
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    plugins: list[PolicyPluginStatus] = Field(default_factory=list, max_length=2 * MAX_PLUGINS,
                                              description="The resolved chain.")
    plugin_count: int | None = Field(default=None, alias="pluginCount",
                                     description="Number of plugins in the resolved chain (PLUGINS column).")
    plugin_summary: str | None = Field(default=None, alias="pluginSummary",
                                       description="Plugins in chain order with score weights (CHAIN column).")
    scheduled: int = Field(default=0, description="Pods bound under this policy since the operator started.")
    unschedulable: int = Field(default=0, description="Pods currently waiting because no node fits.")
    pending: int = Field(default=0, description="Pods of this policy waiting in the scheduling queue.")
    namespaces: int | None = Field(default=None, description="Namespaces whose pods may use this policy "
                                                             "(its namespaceSelector; all namespaces when unset).")
    last_scheduled_time: str | None = Field(default=None, alias="lastScheduledTime")
    revision: int | None = Field(default=None, description="The ControllerRevision of this policy its pods are "
                                                           "scheduled with (REVISION column; `policy-scheduler "
                                                           "rollout history`).")
    metrics: MetricsStatus | None = None
    tuning: TuningStatus | None = None
    rollout: RolloutStatus | None = Field(default=None, description="The policy's rollout (ROLLOUT column).")
