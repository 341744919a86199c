"""SchedulingPolicy (policy-scheduler.io/v1alpha1): the spec's model and the object's; spec.tuning's
models are in policy/tuning.py, spec.rollout's in policy/rollout.py, the status's in
policy/status.py.

The CRD in crds/ is generated from these models (``policy-scheduler crd``); a test fails when
the checked-in file drifts. Plugin args are validated per plugin by the chain builder (each
plugin's own pydantic model); the CRD types the args fields the built-in plugins share and keeps
the rest open (policy/crd.py).

Every list and free string has a size cap (framework/validation.py, policy/chain.py), here and in
the CRD. A validation error names its field with upstream's path syntax (``plugins[3].weight``,
``namespaceSelector.matchExpressions[0].values``): the spec's errors are re-raised with the full
path as their single location, so that ``spec.<path>: <detail>`` reads right.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from .. import SCHEDULER_NAME
from ..framework.model.labels import LabelSelectorSpec
from ..framework.validation import invalid, raise_if
from .chain import MAX_DISABLED, MAX_PLUGINS, ChainSpec, DisabledRef, PluginRef
from .errors import cap_errors, split_field_message, validation_errors
from .fields import Duration, Model, duration_seconds
from .rollout import RolloutSpec
from .status import SchedulingPolicyStatus
from .tuning import TuningSpec, listed_problems

GROUP = "policy-scheduler.io"
VERSION = "v1alpha1"
KIND: Final = "SchedulingPolicy"
PLURAL = "schedulingpolicies"
SINGULAR = "schedulingpolicy"
SHORT_NAMES = ["spol"]
# a DNS-1123 subdomain, as a pod's spec.schedulerName must be
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


# metav1.LabelSelector, validated as the API server does (framework/model/labels.py)
LabelSelector = LabelSelectorSpec

MAX_URL = 2048
MAX_OVERCOMMIT = 10.0


class OvercommitSpec(Model):
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


class PrometheusSpec(Model):
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


class SchedulingPolicySpec(Model):
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
        raise_if(listed_problems(self.tuning, {p.name for p in self.plugins}))
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


class SchedulingPolicy(Model):
    api_version: Literal["policy-scheduler.io/v1alpha1"] = Field(default="policy-scheduler.io/v1alpha1",
                                                                 alias="apiVersion")
    kind: Literal["SchedulingPolicy"] = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SchedulingPolicySpec
    status: SchedulingPolicyStatus | None = None
