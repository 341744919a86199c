"""SchedulingPolicy (policy-scheduler.io/v1alpha1): spec and status models.

The CRD in crds/ is generated from these models (``policy-scheduler crd``); a test fails when
the checked-in file drifts. Plugin args are validated per plugin by the chain builder (each
plugin's own pydantic model); the CRD types the args fields the built-in plugins share and keeps
the rest open (api/crd.py).

Every list and free string has a size cap (framework/validation.py), here and in the CRD. A
validation error names its field with upstream's path syntax (``plugins[3].weight``,
``namespaceSelector.matchExpressions[0].values``): the spec's errors are re-raised with the full
path as their single location, so that ``spec.<path>: <detail>`` reads right.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from .. import SCHEDULER_NAME
from ..framework.cycle.chain import ChainSpec, DisabledRef, PluginRef
from ..framework.model.labels import LabelSelectorRequirementSpec, LabelSelectorSpec
from ..framework.validation import (MAX_DISABLED, MAX_METRICS, MAX_PLUGINS, MAX_SHORT, MAX_URL, cap_errors, invalid, raise_if,
                                    required,
                                    split_field_message, validation_errors)

GROUP = "policy-scheduler.io"
VERSION = "v1alpha1"
KIND: Final = "SchedulingPolicy"
PLURAL = "schedulingpolicies"
SINGULAR = "schedulingpolicy"
SHORT_NAMES = ["spol"]
# a DNS-1123 subdomain, as a pod's spec.schedulerName must be
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class _Model(BaseModel):
    # strict: values are not coerced ("5" is not an integer), as the CRD's schema
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


# metav1.LabelSelector, validated as the API server does (framework/model/labels.py)
LabelSelectorRequirement = LabelSelectorRequirementSpec
LabelSelector = LabelSelectorSpec


DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(value: str) -> float:
    """A Kubernetes-style duration ("15s", "1m30s", "500ms") in seconds."""
    if not re.match(DURATION_PATTERN, value):
        raise ValueError(f"{value!r} is not a duration (e.g. 15s, 1m30s, 500ms)")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(value))


Duration = Annotated[str, Field(pattern=DURATION_PATTERN, max_length=MAX_SHORT)]


MAX_OVERCOMMIT = 10.0


class OvercommitSpec(_Model):
    """Factors on node allocatable for this policy's own pods: they fit against allocatable x
    factor. Scores, and every other policy, keep the real allocatable."""

    cpu: float = Field(default=1.0, ge=1.0, le=MAX_OVERCOMMIT, allow_inf_nan=False,
                       description="Factor on allocatable cpu (1.0 to 10.0; default 1.0: no overcommit).")
    memory: float = Field(default=1.0, ge=1.0, le=MAX_OVERCOMMIT, allow_inf_nan=False,
                          description="Factor on allocatable memory (1.0 to 10.0; default 1.0).")
    ephemeral_storage: float = Field(default=1.0, ge=1.0, le=MAX_OVERCOMMIT, allow_inf_nan=False,
                                     alias="ephemeral-storage",
                                     description="Factor on allocatable ephemeral-storage (1.0 to 10.0; default 1.0).")

    def factors(self) -> dict[str, float]:
        """The resources actually overcommitted (factor > 1), by resource name."""
        return {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory),
                                  ("ephemeral-storage", self.ephemeral_storage)) if v > 1.0}


class PrometheusSpec(_Model):
    """Where the policy's metric plugins (LoadAware, MetricThreshold, MetricScore) read metrics.

    Every refresh sends one instant query per distinct metric, for all nodes at once, off the
    scheduling loop. Unset fields take the operator's defaults (``policy-scheduler run
    --prometheus-url`` and the other ``--prometheus-*`` flags)."""

    address: str | None = Field(
        default=None, pattern=r"^https?://[^\s/]+(/\S*)?$", max_length=MAX_URL,
        description="Prometheus base URL, e.g. http://prometheus.monitoring:9090; unset: --prometheus-url.")
    refresh_interval: Duration | None = Field(
        default=None, alias="refreshInterval", description="Time between refreshes (default 15s).")
    query_timeout: Duration | None = Field(
        default=None, alias="queryTimeout", description="Time limit of one query (default 5s).")
    ttl: Duration | None = Field(
        default=None, description="A node's value older than this is stale (default 2m).")
    usage_lag: Duration | None = Field(
        default=None, alias="usageLag",
        description="How long after its placement a pod's usage is taken to show in the metrics (scrape "
                    "interval plus rate window); until a sample that much newer arrives, the pod counts on "
                    "its node at an estimate (default 1m).")

    @model_validator(mode="after")
    def _positive(self) -> "PrometheusSpec":
        errs = []
        for name, alias in (("refresh_interval", "refreshInterval"), ("query_timeout", "queryTimeout"),
                            ("ttl", "ttl")):
            v = getattr(self, name)
            if v is not None and duration_seconds(v) <= 0:
                errs.append(invalid(alias, v, "must be positive"))
        raise_if(errs)
        return self


MAX_TUNED_WEIGHT = 1000  # the largest weight a tuning bound may allow
MAX_TUNING_WINDOW_PODS = 5000
MAX_TUNING_WINDOW_MINUTES = 1440
MAX_TUNING_REPLAYS = 500


class TuningWindow(_Model):
    """Which of the policy's placed pods an evaluation replays: those placed in the last
    ``minutes``, or the last ``pods`` (one of the two)."""

    minutes: int | None = Field(default=None, ge=1, le=MAX_TUNING_WINDOW_MINUTES,
                                description="The pods placed in the last N minutes.")
    pods: int | None = Field(default=None, ge=1, le=MAX_TUNING_WINDOW_PODS,
                             description="The last N pods placed (at most 5000).")

    @model_validator(mode="after")
    def _one(self) -> "TuningWindow":
        if (self.minutes is None) == (self.pods is None):
            raise ValueError(invalid("minutes", self.minutes, "exactly one of minutes and pods must be set"))
        return self


class TuningObjective(_Model):
    """The objective the tuner minimizes: a weighted sum of what the window's replay measures,
    each measured as ``policy-scheduler simulate`` reports it. Every weight is 0 or more and one
    at least is positive."""

    imbalance: float = Field(default=0.0, ge=0, le=1e6, allow_inf_nan=False,
                             description="Weight of the imbalance: the std dev of node allocation (0..0.5).")
    nodes_used: float = Field(default=0.0, ge=0, le=1e6, allow_inf_nan=False, alias="nodesUsed",
                              description="Weight of the nodes with at least one pod after the window (packing).")
    zone_skew: float = Field(default=0.0, ge=0, le=1e6, allow_inf_nan=False, alias="zoneSkew",
                             description="Weight of the zone skew of the window's pods (most minus fewest per zone).")
    unschedulable: float = Field(default=0.0, ge=0, le=1e6, allow_inf_nan=False,
                                 description="Weight of the window's pods no node fits.")
    hot_nodes: float = Field(default=0.0, ge=0, le=1e6, allow_inf_nan=False, alias="hotNodes",
                             description="Weight of the hot nodes: usage (Prometheus, plus the window's pods at "
                                         "LoadAware's estimates) above LoadAware's thresholds. Needs LoadAware in "
                                         "the chain.")

    @model_validator(mode="after")
    def _some(self) -> "TuningObjective":
        if not any((self.imbalance, self.nodes_used, self.zone_skew, self.unschedulable, self.hot_nodes)):
            raise ValueError(invalid("objective", self.model_dump(by_alias=True),
                                     "at least one measure must have a positive weight"))
        return self

    def weights(self) -> dict[str, float]:
        """Measure name (as the tuner reports it) -> weight, the positive ones."""
        return {k: v for k, v in (("imbalance", self.imbalance), ("nodesUsed", self.nodes_used),
                                  ("zoneSkew", self.zone_skew), ("unschedulable", self.unschedulable),
                                  ("hotNodes", self.hot_nodes)) if v > 0}


class TuningSpec(_Model):
    """Weights that tune themselves: every ``interval`` the leader replays the policy's recent
    pods under its current weights and under candidates within ``bounds`` (the operator's own
    core, as ``policy-scheduler simulate``), and recommends (or, in Apply mode, applies, at most
    ``maxStep`` at a time) the best vector when it improves the objective by ``threshold``."""

    mode: Literal["Recommend", "Apply"] = Field(
        default="Recommend", description="Recommend writes status only; Apply also patches spec.plugins[*].weight.")
    interval: Duration = Field(default="10m", description="Time between evaluations (default 10m, at least 1s).")
    window: TuningWindow = Field(default_factory=lambda: TuningWindow(pods=500),
                                 description="The pods an evaluation replays (default: the last 500).")
    objective: TuningObjective = Field(description="What to minimize.")
    bounds: dict[str, Annotated[list[int], Field(min_length=2, max_length=2)]] = Field(
        min_length=1, max_length=MAX_PLUGINS,
        description="Plugin name -> [min, max] weight: only these plugins' weights move (each a Score plugin of "
                    f"spec.plugins; 1 <= min <= max <= {MAX_TUNED_WEIGHT}).")
    max_step: float = Field(default=0.5, gt=0, le=10, allow_inf_nan=False, alias="maxStep",
                            description="Apply: the largest relative change of a weight per step (default 0.5; "
                                        "a weight may always move by 1).")
    threshold: float = Field(default=0.02, ge=0, le=1, allow_inf_nan=False,
                             description="The least relative improvement of the objective worth recommending "
                                         "(default 0.02: 2%).")
    max_replays: int = Field(default=40, ge=2, le=MAX_TUNING_REPLAYS, alias="maxReplays",
                             description="Replay budget of one evaluation (default 40).")
    time_limit: Duration = Field(default="60s", alias="timeLimit",
                                 description="Time budget of one evaluation's search (default 60s).")
    max_prediction_error: float = Field(
        default=0.25, gt=0, le=100, allow_inf_nan=False, alias="maxPredictionError",
        description="Apply pauses when the objective measured on the pods placed since an Apply step differs "
                    "from the replay's prediction by more than this share (default 0.25).")
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="Seed of the replays' tie-breaks (as simulate --seed).")

    @model_validator(mode="after")
    def _check(self) -> "TuningSpec":
        errs = []
        if duration_seconds(self.interval) < 1:
            errs.append(invalid("interval", self.interval, "must be at least 1s"))
        if duration_seconds(self.time_limit) <= 0:
            errs.append(invalid("timeLimit", self.time_limit, "must be positive"))
        for name, b in self.bounds.items():
            lo, hi = b
            if not 1 <= lo <= hi <= MAX_TUNED_WEIGHT:
                errs.append(invalid(f"bounds.{name}", b, f"must be [min, max] with 1 <= min <= max <= {MAX_TUNED_WEIGHT}"))
        raise_if(errs)
        return self


MAX_ROLLOUT_SAMPLES = 10  # sample pods a rollout's status keeps


class CandidateSpec(_Model):
    """The candidate revision of a rollout: the fields of the chain it replaces. Everything else
    (namespaceSelector, prometheus, overcommit, schedulerName) is the policy's own."""

    plugins: list[PluginRef] = Field(
        min_length=1, max_length=MAX_PLUGINS,
        description="The candidate's ordered plugin chain (as spec.plugins).")
    disabled: list[DisabledRef] = Field(default_factory=list, max_length=MAX_DISABLED,
                                        description="The candidate's opt-outs (as spec.disabled).")
    percentage_of_nodes_to_score: int | None = Field(
        default=None, alias="percentageOfNodesToScore", ge=0, le=100,
        description="As spec.percentageOfNodesToScore, for the candidate.")

    def chain_spec(self) -> ChainSpec:
        return ChainSpec(plugins=self.plugins, disabled=self.disabled,
                         percentageOfNodesToScore=self.percentage_of_nodes_to_score)


class RolloutAnalysis(_Model):
    """Canary analysis: canary pods against stable pods over a sliding window. A breach rolls the
    candidate back; an unset threshold is not checked."""

    window: Duration = Field(default="5m", description="The sliding window compared (default 5m).")
    min_pods: int = Field(default=5, ge=1, le=10000, alias="minPods",
                          description="Attempts (failure rate) or placed pods (the other measures) each arm needs "
                                      "in the window before a measure is judged (default 5).")
    max_failure_rate_increase: float | None = Field(
        default=0.1, ge=0, le=1, allow_inf_nan=False, alias="maxFailureRateIncrease",
        description="Roll back when the canary's FailedScheduling rate (failed attempts / attempts) exceeds the "
                    "stable one's by more than this (default 0.1).")
    max_p95_increase: Duration | None = Field(
        default="30s", alias="maxTimeToScheduledP95Increase",
        description="Roll back when the canary's p95 time from first attempt to bound exceeds the stable one's "
                    "by more than this (default 30s).")
    max_nodes_used_increase: float | None = Field(
        default=None, ge=0, le=1, allow_inf_nan=False, alias="maxNodesUsedIncrease",
        description="Roll back when the canary's nodes used per placed pod (distinct nodes / pods, 0..1) exceeds "
                    "the stable one's by more than this.")
    max_imbalance_increase: float | None = Field(
        default=None, ge=0, le=1, allow_inf_nan=False, alias="maxImbalanceIncrease",
        description="Roll back when the imbalance (std dev of allocation) of the nodes the canary's pods went to "
                    "exceeds that of the stable pods' nodes by more than this.")
    max_zone_skew_increase: float | None = Field(
        default=None, ge=0, le=1, allow_inf_nan=False, alias="maxZoneSkewIncrease",
        description="Roll back when the canary's zone skew ((most - fewest pods per zone) / pods) exceeds the "
                    "stable one's by more than this.")

    @model_validator(mode="after")
    def _window(self) -> "RolloutAnalysis":
        if duration_seconds(self.window) < 1:
            raise ValueError(invalid("window", self.window, "must be at least 1s"))
        return self


class RolloutPromote(_Model):
    """When a canary without a breach is promoted: after ``pods`` canary pods were bound, or
    ``after`` since it started, whichever comes first. Unset: only by hand."""

    pods: int | None = Field(default=None, ge=1, le=10**9, description="Canary pods bound.")
    after: Duration | None = Field(default=None, description="Time since the rollout started.")


class RolloutSpec(_Model):
    """A candidate revision beside the policy's chain. Shadow: for every pod of the policy the
    candidate decides too, and never binds. Canary: ``percent`` of the pods (a stable hash of their
    UID) are scheduled with the candidate, the rest with the stable chain, until analysis rolls it
    back or it is promoted (spec.plugins, disabled and percentageOfNodesToScore become the
    candidate's and spec.rollout is removed)."""

    strategy: Literal["Shadow", "Canary"] = Field(description="Shadow (decide, never bind) or Canary.")
    candidate: CandidateSpec = Field(description="The candidate revision's chain.")
    percent: float | None = Field(default=None, gt=0, le=100, allow_inf_nan=False,
                                  description="Canary: the share of the policy's pods scheduled with the candidate.")
    analysis: RolloutAnalysis = Field(default_factory=RolloutAnalysis,
                                      description="Canary: what rolls it back.")
    promote: RolloutPromote | None = Field(default=None, description="Canary: when it is promoted.")

    @model_validator(mode="after")
    def _percent(self) -> "RolloutSpec":
        if self.strategy == "Canary" and self.percent is None:
            raise ValueError(required("percent", "with strategy Canary"))
        if self.strategy == "Shadow" and self.percent is not None:
            raise ValueError(invalid("percent", self.percent, "applies to strategy Canary only"))
        return self


class SchedulingPolicySpec(_Model):
    """What a policy does: an ordered chain of plugins (each runs at every extension point it
    implements, as upstream's multiPoint), score weights, plugin args, and who may use it."""

    plugins: list[PluginRef] = Field(
        min_length=1, max_length=MAX_PLUGINS,
        description="Ordered plugin chain. Each plugin runs at every extension point it implements.")
    disabled: list[DisabledRef] = Field(
        default_factory=list, max_length=MAX_DISABLED,
        description="Per-extension-point opt-outs for plugins listed in plugins.")
    percentage_of_nodes_to_score: int | None = Field(
        default=None, alias="percentageOfNodesToScore", ge=0, le=100,
        description="Share of nodes to find feasible before scoring; 0 or unset: upstream's adaptive rule.")
    namespace_selector: LabelSelector | None = Field(
        default=None, alias="namespaceSelector",
        description="Namespaces whose pods may use this policy (by namespace labels); unset: all.")
    prometheus: PrometheusSpec | None = Field(
        default=None, description="Metric source of the usage-aware plugins (LoadAware, MetricThreshold, "
                                  "MetricScore); unset: the operator's --prometheus-* defaults.")
    overcommit: OvercommitSpec | None = Field(
        default=None, description="Per-resource factors on node allocatable for this policy's pods only "
                                  "(NodeResourcesFit's fit check); e.g. {cpu: 1.05} lets its pods fill 105% of "
                                  "allocatable cpu. Scores and other policies use the real allocatable.")
    scheduler_name: str = Field(
        default=SCHEDULER_NAME, alias="schedulerName", max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
        description="The policy-scheduler instance that owns this policy: the one run with this "
                    "--scheduler-name. Only it loads the policy, schedules its pods and writes its status; "
                    f"other instances leave it alone. Default {SCHEDULER_NAME}.")
    tuning: TuningSpec | None = Field(
        default=None, description="Tune the Score weights from the policy's own recent placements (replayed with "
                                  "the operator's core): recommend, or apply within bounds.")
    rollout: RolloutSpec | None = Field(
        default=None, description="A candidate chain shadowed (decides beside the stable chain, never binds) or "
                                  "canaried (a share of the pods), analysed, rolled back or promoted.")

    @model_validator(mode="after")
    def _tuned_plugins(self) -> "SchedulingPolicySpec":
        if self.tuning is None:
            return self
        listed = {p.name for p in self.plugins}
        errs = [invalid(f"tuning.bounds.{name}", name, "must name a plugin listed in plugins")
                for name in self.tuning.bounds if name not in listed]
        if self.tuning.objective.hot_nodes and "LoadAware" not in listed:
            errs.append(invalid("tuning.objective.hotNodes", self.tuning.objective.hot_nodes,
                                "needs LoadAware in plugins (its metrics and thresholds)"))
        raise_if(errs)
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _field_paths(cls, data: Any, handler: Any) -> "SchedulingPolicySpec":
        """Re-raise validation errors with the full field path (``plugins[3].weight``) as their one
        location and upstream's wording as their message; at most MAX_ERRORS of them."""
        try:
            return handler(data)
        except ValidationError as e:
            details = []
            for line in cap_errors(validation_errors(e)):
                fm = split_field_message(line)
                path, msg = fm if fm else ("", line)
                details.append(InitErrorDetails(type=PydanticCustomError("invalid_field", "{detail}", {"detail": msg}),
                                                loc=(path,) if path else (), input=None))
            raise ValidationError.from_exception_data(cls.__name__, details) from None

    def chain_spec(self) -> ChainSpec:
        return ChainSpec(plugins=self.plugins, disabled=self.disabled,
                         percentageOfNodesToScore=self.percentage_of_nodes_to_score)


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")
    observed_generation: int | None = Field(default=None, alias="observedGeneration")


class PolicyPluginStatus(_Model):
    name: str
    points: list[str] = Field(default_factory=list, max_length=16)
    weight: int | None = None


class MetricQueryStatus(_Model):
    query: str
    node_label: str = Field(alias="nodeLabel")
    fresh: int = Field(default=0, description="Nodes with a value no older than the ttl.")
    stale: int = Field(default=0, description="Nodes whose latest value is older than the ttl.")
    missing: int = Field(default=0, description="Nodes of the cluster without any value.")
    newest_sample_time: str | None = Field(default=None, alias="newestSampleTime")
    oldest_sample_time: str | None = Field(default=None, alias="oldestSampleTime")
    error: str | None = Field(default=None, description="Why the latest query failed.")


class MetricsStatus(_Model):
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


class TunedWeights(_Model):
    weights: dict[str, int] = Field(default_factory=dict, max_length=MAX_PLUGINS)
    objective: float | None = Field(default=None, description="The objective of the window replayed with these "
                                                              "weights (lower is better).")


class TuningFeedback(_Model):
    """After an Apply step: the pods placed since, as they really went, against the replay."""

    pods: int = Field(description="Pods placed since the Apply step.")
    predicted: float = Field(description="Their objective replayed under the applied weights.")
    measured: float = Field(description="Their objective as placed.")
    error: float = Field(description="(measured - predicted) / predicted.")


class TuningStatus(_Model):
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


class RolloutArm(_Model):
    attempts: int = Field(default=0, description="Scheduling attempts since the rollout started.")
    failures: int = Field(default=0, description="Attempts that ended in FailedScheduling.")
    bound: int = Field(default=0, description="Pods bound.")


class ArmMeasures(_Model):
    attempts: int = 0
    failure_rate: float | None = Field(default=None, alias="failureRate")
    placed: int = 0
    p95_seconds: float | None = Field(default=None, alias="timeToScheduledP95Seconds")
    nodes_used: float | None = Field(default=None, alias="nodesUsedPerPod")
    imbalance: float | None = None
    zone_skew: float | None = Field(default=None, alias="zoneSkew")


class ShadowPlugin(_Model):
    name: str
    changed: int = Field(description="Changed decisions this plugin's weighted score moved toward the candidate's node.")


class ShadowSample(_Model):
    pod: str
    stable: str | None = Field(default=None, description="The node the stable chain chose (None: unschedulable).")
    candidate: str | None = Field(default=None, description="The candidate's best node (None: unschedulable).")
    plugins: list[str] = Field(default_factory=list, max_length=MAX_PLUGINS,
                               description="The plugins that moved the decision, most first.")
    time: str | None = None


class ShadowStatus(_Model):
    compared: int = Field(default=0, description="Decisions the candidate made beside the stable chain.")
    changed: int = Field(default=0, description="Of which the stable node is not among the candidate's best.")
    became_unschedulable: int = Field(default=0, alias="becameUnschedulable")
    became_schedulable: int = Field(default=0, alias="becameSchedulable")
    plugins: list[ShadowPlugin] = Field(default_factory=list, max_length=2 * MAX_PLUGINS)
    samples: list[ShadowSample] = Field(default_factory=list, max_length=MAX_ROLLOUT_SAMPLES)


class RolloutStatus(_Model):
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


class SchedulingPolicyStatus(_Model):
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


class SchedulingPolicy(_Model):
    api_version: Literal["policy-scheduler.io/v1alpha1"] = Field(default="policy-scheduler.io/v1alpha1",
                                                                 alias="apiVersion")
    kind: Literal["SchedulingPolicy"] = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SchedulingPolicySpec
    status: SchedulingPolicyStatus | None = None
