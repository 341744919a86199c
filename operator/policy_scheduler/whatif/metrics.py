"""What a simulation measures, as pure functions on arrays (no scheduling here).

- **allocation**: per node, requested / allocatable for cpu and memory (0 for a node with none
  of a resource); a node's allocation is the mean of the two shares.
- **imbalance**: the population standard deviation of node allocation over the nodes that can
  take pods (0: every node equally full).
- **zone spread**: placed pods per zone (nodes without the zone label count under ``""``) and
  the skew, the largest minus the smallest count over every zone that has nodes.
- **fragmentation**: how many more pods of the most common shape (the requests most of the
  simulated pods have) would still fit, node by node, by resources and pod slots alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Hashable, Iterable, Sequence, TypeVar

import numpy as np

T = TypeVar("T", bound=Hashable)


def shares(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
    """requested / allocatable per element; 0 where nothing is allocatable."""
    req = np.asarray(requested, dtype=np.float64)
    alloc = np.asarray(allocatable, dtype=np.float64)
    out = np.zeros(np.broadcast(req, alloc).shape, dtype=np.float64)
    np.divide(req, alloc, out=out, where=alloc > 0)
    return out


def node_allocation(cpu_share: np.ndarray, memory_share: np.ndarray) -> np.ndarray:
    return (np.asarray(cpu_share, dtype=np.float64) + np.asarray(memory_share, dtype=np.float64)) / 2.0


def imbalance(allocation: np.ndarray) -> float:
    """Population standard deviation of node allocation (0 for no nodes)."""
    a = np.asarray(allocation, dtype=np.float64)
    return float(a.std()) if a.size else 0.0


def zone_spread(placed_zones: Iterable[str | None], all_zones: Iterable[str | None]) -> dict:
    """{"perZone": zone -> placed pods, "skew": max - min over all zones with nodes}."""
    zones = sorted({z or "" for z in all_zones})
    per = {z: 0 for z in zones}
    for z in placed_zones:
        per[z or ""] = per.get(z or "", 0) + 1
    counts = list(per.values())
    return {"perZone": per, "skew": (max(counts) - min(counts)) if counts else 0}


def most_common(items: Sequence[T]) -> T | None:
    """The most frequent item; on a tie, the one seen first."""
    if not items:
        return None
    counts = Counter(items)
    best = max(counts.values())
    return next(x for x in items if counts[x] == best)


def fits(free: np.ndarray, shape: np.ndarray) -> int:
    """How many pods of ``shape`` (a request per column, 0 = not requested) fit into ``free``
    (nodes x columns), each node on its own: sum over nodes of the smallest
    floor(free / request) over the requested columns. A shape that requests nothing fits
    nowhere countably: 0."""
    free = np.asarray(free, dtype=np.int64)
    shape = np.asarray(shape, dtype=np.int64)
    cols = np.flatnonzero(shape > 0)
    if free.size == 0 or cols.size == 0:
        return 0
    per = np.maximum(free[:, cols], 0) // shape[cols]
    return int(per.min(axis=1).sum())
