"""spec.rollout: a candidate chain shadowed or canaried beside the policy's own (cache/rollouts.py
tallies it, cluster/rollout_controller.py acts), and its validation: the models' own checks, and
the candidate's chain built as the policy's is (``candidate_chain``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ..framework.cycle.chain import Chain
from ..framework.interface import Handle
from ..framework.registry import Registry
from ..framework.validation import invalid, required
from .chain import MAX_DISABLED, MAX_PLUGINS, ChainError, ChainSpec, DisabledRef, PluginRef, build_chain
from .errors import PolicyInvalid
from .fields import Duration, Model, duration_seconds

MAX_ROLLOUT_SAMPLES = 10  # sample pods a rollout's status keeps


class CandidateSpec(Model):
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


class RolloutAnalysis(Model):
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


class RolloutPromote(Model):
    """When a canary without a breach is promoted: after ``pods`` canary pods were bound, or
    ``after`` since it started, whichever comes first. Unset: only by hand."""

    pods: int | None = Field(default=None, ge=1, le=10**9, description="Canary pods bound.")
    after: Duration | None = Field(default=None, description="Time since the rollout started.")


class RolloutSpec(Model):
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


def candidate_chain(rollout: RolloutSpec, registry: Registry, handle: Handle) -> Chain:
    """The candidate's chain, built as the policy's own; PolicyInvalid names each problem under
    ``spec.rollout.candidate.``."""
    try:
        return build_chain(rollout.candidate.chain_spec(), registry, handle=handle)
    except ChainError as e:
        raise PolicyInvalid([f"spec.rollout.candidate.{x}" for x in e.errors]) from None
