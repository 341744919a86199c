"""Resource names and resource-based scoring shared by the resource plugins.

upstream pkg/scheduler/framework/plugins/noderesources (resource_allocation.go, least_allocated.go,
most_allocated.go, requested_to_capacity_ratio.go, helper/shape_score.go), v1helper
IsExtendedResourceName and schedutil IsScalarResourceName: what NodeResourcesFit,
NodeResourcesBalancedAllocation and the metric plugins' FallbackToRequests score read.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from pydantic import Field

from ..interface import MAX_NODE_SCORE, PluginArgs
from .labels import qualified_name_errors
from .nodetable import CPU, MEMORY, NodeTable
from .podinfo import PodInfo
from ..validation import MAX_LABEL_KEY, invalid, required

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
SCORING_STRATEGY_TYPES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)
MAX_CUSTOM_PRIORITY_SCORE = 10  # shape point scores are 0..10, scaled by MaxNodeScore / 10
MAX_UTILIZATION = 100

# ---------------------------------------------------------------------------- resource names

@lru_cache(maxsize=4096)
def is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName: outside the kubernetes.io namespace, has a "/" prefix,
    not a quota "requests." name, and "requests.<name>" is a qualified name."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return not qualified_name_errors("requests." + name)


def is_scalar_resource_name(name: str) -> bool:
    """schedutil.IsScalarResourceName: extended, hugepages-*, *kubernetes.io/* or attachable-volumes-*."""
    return (is_extended_resource_name(name) or name.startswith("hugepages-")
            or "kubernetes.io/" in name or name.startswith("attachable-volumes-"))


def go_div(num: np.ndarray, den: np.ndarray | int) -> np.ndarray:
    """int64 division truncating toward zero, as Go's ``/`` (numpy's ``//`` floors)."""
    q = np.abs(num) // np.abs(den)
    return np.where((num < 0) != (np.asarray(den) < 0), -q, q)


# ---------------------------------------------------------------------------- resources to score
class ResourceSpec(PluginArgs):
    """A resource to score and its weight; weight 0 (or unset) is defaulted to 1."""

    name: str = Field(max_length=MAX_LABEL_KEY)
    weight: int = 0


DEFAULT_RESOURCES = (("cpu", 1), ("memory", 1))


def default_resources(resources: list[ResourceSpec]) -> list[ResourceSpec]:
    """SetDefaults_*: an empty list means cpu and memory with weight 1; weight 0 becomes 1."""
    if not resources:
        return [ResourceSpec(name=n, weight=w) for n, w in DEFAULT_RESOURCES]
    return [r if r.weight != 0 else ResourceSpec(name=r.name, weight=1) for r in resources]


# ---------------------------------------------------------------------------- scoring
def broken_linear(shape: list[tuple[int, int]], p: np.ndarray) -> np.ndarray:
    """helper.BuildBrokenLinearFunction over an array: the first point's score at or below its
    utilization, the last point's score above the last one, and in between the segment
    interpolation s[i-1] + (s[i]-s[i-1]) * (p-u[i-1]) / (u[i]-u[i-1]) in Go integer math."""
    us = np.array([u for u, _ in shape], dtype=np.int64)
    ss = np.array([s for _, s in shape], dtype=np.int64)
    i = np.searchsorted(us, p, side="left")  # first point with p <= utilization
    out = np.full(p.shape, ss[-1], dtype=np.int64)
    out[i == 0] = ss[0]
    mid = (i > 0) & (i < len(us))
    if mid.any():
        j = i[mid]
        num = (ss[j] - ss[j - 1]) * (p[mid] - us[j - 1])
        out[mid] = ss[j - 1] + go_div(num, us[j] - us[j - 1])
    return out


def score_resources(kind: str, shape: list[tuple[int, int]] | None, requested: np.ndarray,
                    allocatable: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per-node score from (resources x rows) requested/allocatable matrices. Entries with
    allocatable 0 are skipped (no score, no weight), as every upstream scorer does."""
    valid = allocatable > 0
    alloc = np.where(valid, allocatable, 1)
    w = weights[:, None]
    if kind == LEAST_ALLOCATED:
        s = np.where(requested > alloc, 0, (alloc - requested) * MAX_NODE_SCORE // alloc)
    elif kind == MOST_ALLOCATED:
        s = np.minimum(requested, alloc) * MAX_NODE_SCORE // alloc
    else:
        assert shape is not None, "RequestedToCapacityRatio needs its shape"
        util = np.where(requested > alloc, MAX_UTILIZATION, requested * MAX_UTILIZATION // alloc)
        s = broken_linear(shape, util)
        valid &= s > 0  # RequestedToCapacityRatio counts only resources scoring above 0
    num = (np.where(valid, s, 0) * w).sum(axis=0)
    den = np.where(valid, w, 0).sum(axis=0)
    if kind == REQUESTED_TO_CAPACITY_RATIO:
        # int64(math.Round(num/den)): half away from zero; exact in integers since both are >= 0
        return np.where(den > 0, (2 * num + den) // np.maximum(2 * den, 1), 0)
    return np.where(den > 0, num // np.maximum(den, 1), 0)


def requests_scores(pod: PodInfo, nodes: NodeTable, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The FallbackToRequests score: NodeResourcesFit LeastAllocated over cpu and memory."""
    requested = np.stack([nodes.nonzero[rows, 0] + pod.score_cpu, nodes.nonzero[rows, 1] + pod.score_memory])
    alloc = np.stack([nodes.allocatable[rows, CPU], nodes.allocatable[rows, MEMORY]])
    return score_resources(LEAST_ALLOCATED, None, requested, alloc, weights)


class UtilizationShapePoint(PluginArgs):  # one point of a utilization -> score shape
    utilization: int
    score: int


def shape_errors(shape: list[UtilizationShapePoint], path: str) -> list[str]:
    """upstream validateFunctionShape: at least one point, utilization strictly increasing,
    utilization in [0, 100], score in [0, 10] (NodeResourcesFit's RequestedToCapacityRatio shape,
    and VolumeBinding's)."""
    if not shape:
        return [required(path, "at least one point must be specified")]
    errs = []
    for i in range(1, len(shape)):
        if shape[i - 1].utilization >= shape[i].utilization:
            errs.append(invalid(f"{path}[{i}].utilization", shape[i].utilization,
                                "values must be sorted in increasing order"))
            break
    for i, p in enumerate(shape):
        if not 0 <= p.utilization <= MAX_UTILIZATION:
            errs.append(invalid(f"{path}[{i}].utilization", p.utilization, f"not in valid range [0, {MAX_UTILIZATION}]"))
        if not 0 <= p.score <= MAX_CUSTOM_PRIORITY_SCORE:
            errs.append(invalid(f"{path}[{i}].score", p.score, f"not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"))
    return errs
