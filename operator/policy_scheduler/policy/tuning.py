"""spec.tuning: the weights that tune themselves (cluster/tuner.py runs it, whatif/tune.py
searches), and its bounds: the model's own (``TuningSpec``), those against the plugins listed
(``listed_problems``, the spec model's check) and those against the built chain
(``chain_problems``: only a Score plugin's weight is tuned)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from ..framework.cycle.chain import Chain
from ..framework.validation import invalid, raise_if
from .chain import MAX_PLUGINS
from .fields import Duration, Model, duration_seconds

MAX_TUNED_WEIGHT = 1000  # the largest weight a tuning bound may allow
MAX_TUNING_WINDOW_PODS = 5000
MAX_TUNING_WINDOW_MINUTES = 1440
MAX_TUNING_REPLAYS = 500


class TuningWindow(Model):
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


class TuningObjective(Model):
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


class TuningSpec(Model):
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


def listed_problems(tuning: TuningSpec, listed: set[str]) -> list[str]:
    """spec.tuning against the plugins ``listed`` in spec.plugins (paths relative to the spec)."""
    errs = [invalid(f"tuning.bounds.{name}", name, "must name a plugin listed in plugins")
            for name in tuning.bounds if name not in listed]
    if tuning.objective.hot_nodes and "LoadAware" not in listed:
        errs.append(invalid("tuning.objective.hotNodes", tuning.objective.hot_nodes,
                            "needs LoadAware in plugins (its metrics and thresholds)"))
    return errs


def chain_problems(tuning: TuningSpec, chain: Chain) -> list[str]:
    """spec.tuning's bounds against the built chain: each must name a plugin with a Score
    extension point there (paths from the policy: ``spec.tuning.bounds.<name>``)."""
    scored = {p.NAME for p, _ in chain.score}
    return [invalid(f"spec.tuning.bounds.{n}", n, "has no Score extension point in this chain: "
                    "only Score weights are tuned") for n in tuning.bounds if n not in scored]
