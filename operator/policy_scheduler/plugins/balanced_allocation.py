"""NodeResourcesBalancedAllocation: favor nodes whose resource usage stays balanced.

upstream pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go (v1.36+ scoring)
with resource_allocation.go (useRequested = true: true requests, no 100m / 200Mi defaults).

PreScore returns Skip for a best-effort pod (its request for every configured resource is 0).

Score per node: for every configured resource that is cpu, memory, ephemeral-storage, or a
scalar resource the pod requests, with allocatable > 0 on the node, take the fractions
  with    = min((node requested + pod request) / allocatable, 1)
  without = min(node requested / allocatable, 1)
balance(f) = int64((1 - std(f)) * 100), where std is |f1 - f2| / 2 for two fractions, the
population standard deviation for more, and 0 for fewer. The score rewards the change in
balance that placing the pod brings:
  50 + (50 + balance(with) - balance(without)) / 2        (Go integer division)
Both balances are in [50, 100], so the score is in [50, 100]. Weights are accepted (must be 1)
but not used by the formula. No NormalizeScore.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from ..framework.interface import MAX_NODE_SCORE, CycleState, PluginArgs, PreScorePlugin, ScorePlugin
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.model.resources import ResourceSpec, default_resources, is_scalar_resource_name
from ..framework.status import Status
from ..framework.validation import MAX_RESOURCES, duplicate, invalid, raise_if

_NATIVE = ("cpu", "memory", "ephemeral-storage")


class NodeResourcesBalancedAllocationArgs(PluginArgs):
    """Defaulted (empty -> cpu, memory; weight 0 -> 1) then validated as upstream
    ValidateNodeResourcesBalancedAllocationArgs: no duplicate names, every weight 1."""

    resources: list[ResourceSpec] = Field(default_factory=list, max_length=MAX_RESOURCES)

    @model_validator(mode="after")
    def _default_and_validate(self) -> "NodeResourcesBalancedAllocationArgs":
        self.resources = default_resources(self.resources)
        errs = []
        seen: set[str] = set()
        for i, r in enumerate(self.resources):
            if r.name in seen:
                errs.append(duplicate(f"resources[{i}].name", r.name))
            seen.add(r.name)
            if r.weight != 1:
                errs.append(invalid(f"resources[{i}].weight", r.weight, "must be 1"))
        raise_if(errs)
        return self


def balance_score(fractions: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """balancedResourceScore over (resources x rows) fractions (already capped at 1); only the
    ``valid`` entries of each column count. Float operations follow upstream's order."""
    if len(fractions) == 2:  # the usual cpu + memory: std is |f1 - f2| / 2, 0 unless both count
        std = np.where(valid[0] & valid[1], np.abs(fractions[0] - fractions[1]) / 2, 0.0)
        return ((1 - std) * MAX_NODE_SCORE).astype(np.int64)
    count = valid.sum(axis=0)
    f = np.where(valid, fractions, 0.0)
    total = np.zeros(fractions.shape[1])
    for row in f:
        total += row
    hi = np.where(valid, fractions, -np.inf).max(axis=0, initial=-np.inf)
    lo = np.where(valid, fractions, np.inf).min(axis=0, initial=np.inf)
    std = np.zeros(fractions.shape[1])
    two = count == 2
    std[two] = (hi[two] - lo[two]) / 2
    many = count > 2
    if many.any():
        mean = total[many] / count[many]
        acc = np.zeros(int(many.sum()))
        for row, ok in zip(fractions[:, many], valid[:, many]):
            acc += np.where(ok, (row - mean) * (row - mean), 0.0)
        std[many] = np.sqrt(acc / count[many])
    return ((1 - std) * MAX_NODE_SCORE).astype(np.int64)


class NodeResourcesBalancedAllocation(PreScorePlugin, ScorePlugin):
    NAME = "NodeResourcesBalancedAllocation"
    Args = NodeResourcesBalancedAllocationArgs

    _PRE_SCORE_KEY = NAME + "/preScore"

    def __init__(self, args: NodeResourcesBalancedAllocationArgs, handle) -> None:
        super().__init__(args, handle)
        self._resources = [r.name for r in args.resources]

    def _requests(self, pod: PodInfo) -> list[int]:
        return [pod.requests.get(name, 0) for name in self._resources]

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> Status:
        reqs = self._requests(pod)
        if not any(reqs):
            return Status.skip()
        state.write(self._PRE_SCORE_KEY, reqs)
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        reqs = state.read(self._PRE_SCORE_KEY)
        if reqs is None:
            reqs = self._requests(pod)
        used = [(name, q) for name, q in zip(self._resources, reqs)
                if name in _NATIVE or (q != 0 and is_scalar_resource_name(name))]
        cols = [nodes.res_index.get(name) for name, _ in used]
        picked = [(c, q) for c, (_, q) in zip(cols, used) if c is not None]  # no column: allocatable 0
        want = np.array([q for _, q in picked], dtype=np.int64).reshape(-1, 1)
        idx = (rows[:, None], [c for c, _ in picked])  # one gather per array, resources x rows after .T
        alloc = nodes.allocatable[idx].T
        node_req = nodes.requested[idx].T
        valid = alloc > 0
        safe = np.where(valid, alloc, 1).astype(np.float64)
        with_pod = balance_score(np.minimum((node_req + want) / safe, 1.0), valid)
        without = balance_score(np.minimum(node_req / safe, 1.0), valid)
        half = MAX_NODE_SCORE // 2
        return half + (half + with_pod - without) // 2  # the operand is >= 0: floor == Go's truncation


PLUGIN = NodeResourcesBalancedAllocation
