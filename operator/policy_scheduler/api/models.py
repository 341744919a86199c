"""SchedulingPolicy (policy-scheduler.io/v1alpha1): spec and status models.

The CRD in crds/ is generated from these models (``policy-scheduler crd``); a test fails when
the checked-in file drifts. Plugin args are validated per plugin by the chain builder (each
plugin's own pydantic model), so the CRD keeps ``args`` schemaless.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..framework.chain import ChainSpec, DisabledRef, PluginRef

GROUP = "policy-scheduler.io"
VERSION = "v1alpha1"
KIND = "SchedulingPolicy"
PLURAL = "schedulingpolicies"
SINGULAR = "schedulingpolicy"
SHORT_NAMES = ["spol"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class LabelSelectorRequirement(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = None


class LabelSelector(_Model):
    match_labels: dict[str, str] | None = Field(default=None, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] | None = Field(default=None, alias="matchExpressions")


class SchedulingPolicySpec(_Model):
    """What a policy does: an ordered chain of plugins (each runs at every extension point it
    implements, as upstream's multiPoint), score weights, plugin args, and who may use it."""

    plugins: list[PluginRef] = Field(
        min_length=1, description="Ordered plugin chain. Each plugin runs at every extension point it implements.")
    disabled: list[DisabledRef] = Field(
        default_factory=list, description="Per-extension-point opt-outs for plugins listed in plugins.")
    percentage_of_nodes_to_score: int | None = Field(
        default=None, alias="percentageOfNodesToScore", ge=0, le=100,
        description="Share of nodes to find feasible before scoring; 0 or unset: upstream's adaptive rule.")
    namespace_selector: LabelSelector | None = Field(
        default=None, alias="namespaceSelector",
        description="Namespaces whose pods may use this policy (by namespace labels); unset: all.")

    def chain_spec(self) -> ChainSpec:
        return ChainSpec(plugins=self.plugins, disabled=self.disabled,
                         percentage_of_nodes_to_score=self.percentage_of_nodes_to_score)


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")
    observed_generation: int | None = Field(default=None, alias="observedGeneration")


class PolicyPluginStatus(_Model):
    name: str
    points: list[str] = Field(default_factory=list)
    weight: int | None = None


class SchedulingPolicyStatus(_Model):
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
    conditions: list[Condition] = Field(default_factory=list)
    plugins: list[PolicyPluginStatus] = Field(default_factory=list, description="The resolved chain.")
    plugin_count: int | None = Field(default=None, alias="pluginCount",
                                     description="Number of plugins in the resolved chain (PLUGINS column).")
    plugin_summary: str | None = Field(default=None, alias="pluginSummary",
                                       description="Plugins in chain order with score weights (CHAIN column).")
    scheduled: int = Field(default=0, description="Pods bound under this policy since the operator started.")
    unschedulable: int = Field(default=0, description="Pods currently waiting because no node fits.")
    pending: int = Field(default=0, description="Pods of this policy waiting in the scheduling queue.")
    last_scheduled_time: str | None = Field(default=None, alias="lastScheduledTime")


class SchedulingPolicy(_Model):
    api_version: Literal["policy-scheduler.io/v1alpha1"] = Field(default=f"{GROUP}/{VERSION}", alias="apiVersion")
    kind: Literal["SchedulingPolicy"] = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SchedulingPolicySpec
    status: SchedulingPolicyStatus | None = None
