"""The order in which a scheduling cycle visits nodes, and how it breaks score ties: upstream's.

kube-scheduler's cache keeps a NodeTree (pkg/scheduler/backend/cache/node_tree.go): nodes by
zone key (region and zone labels, beta labels first), zones in the order their first node
arrived, nodes of a zone in arrival order; a zone whose last node goes is dropped (and goes to
the end if a node brings it back); a node whose zone changes moves to the end of the new zone.
The snapshot lists nodes round-robin over the zones (the first node of each zone, then the
second, ...), Filter scans that list from a rotating start, and the feasible nodes keep that
order. v1.37.1 then puts the scores in a max-heap (heap.Init over the feasible list, no random
key without extenders) and pops the root: among the nodes with the best total, the first in a
preorder walk of the heap's implicit binary tree (``heap_root_among``), not the first in the list
and not a random one.

``NodeTree`` keeps that order for the NodeTable, whose rows are dense and reorder on removal.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

ZONE_BETA, ZONE = "failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone"
REGION_BETA, REGION = "failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region"


def zone_key(labels: Mapping[str, str]) -> str:
    """upstream GetZoneKey: "region:\\x00:zone", or "" when the node has neither."""
    zone = labels[ZONE_BETA] if ZONE_BETA in labels else labels.get(ZONE, "")
    region = labels[REGION_BETA] if REGION_BETA in labels else labels.get(REGION, "")
    if not region and not zone:
        return ""
    return f"{region}:\x00:{zone}"


class NodeTree:
    """Node names by zone key, in upstream's arrival order; ``order()`` is the snapshot's list."""

    __slots__ = ("_zones", "_zone_of", "_list")

    def __init__(self) -> None:
        self._zones: dict[str, list[str]] = {}  # insertion order = the zones' order
        self._zone_of: dict[str, str] = {}
        self._list: list[str] | None = None

    def __len__(self) -> int:
        return len(self._zone_of)

    def add(self, name: str, labels: Mapping[str, str]) -> None:
        if name in self._zone_of:
            self.update(name, labels)
            return
        z = zone_key(labels)
        self._zones.setdefault(z, []).append(name)
        self._zone_of[name] = z
        self._list = None

    def update(self, name: str, labels: Mapping[str, str]) -> None:
        old = self._zone_of.get(name)
        if old is None:
            self.add(name, labels)
        elif zone_key(labels) != old:
            self.remove(name)
            self.add(name, labels)

    def remove(self, name: str) -> None:
        z = self._zone_of.pop(name, None)
        if z is None:
            return
        members = self._zones[z]
        members.remove(name)
        if not members:
            del self._zones[z]
        self._list = None

    def order(self) -> list[str]:
        """upstream nodeTree.list(): round-robin over the zones."""
        if self._list is None:
            zones = list(self._zones.values())
            out: list[str] = []
            depth = max((len(m) for m in zones), default=0)
            for i in range(depth):
                for m in zones:
                    if i < len(m):
                        out.append(m[i])
            self._list = out
        return self._list


def heap_root_among(best: np.ndarray) -> int:
    """Which of ``best`` (ascending positions in the feasible list, all with the top total) Go's
    heap.Init + Pop returns. heap.Init sifts each inner node down, swapping with its left child
    unless the right one is strictly greater; so the root ends up being the first top-scored
    element in a preorder walk (node, left subtree, right subtree) of the 0-based implicit tree."""
    if len(best) == 1:
        return int(best[0])
    k = best.astype(np.int64) + 1  # 1-based heap index: its bits after the leading one are the path
    depth = np.floor(np.log2(k)).astype(np.int64)
    # exact for the sizes we meet; guard the float log against k = 2^d rounding below
    depth += (np.left_shift(1, depth + 1) <= k).astype(np.int64)
    depth -= (np.left_shift(1, depth) > k).astype(np.int64)
    top = int(depth.max())
    path = (k - np.left_shift(1, depth)) << (top - depth)  # the path, left-aligned
    # smallest path; a prefix (shallower) before its extensions: one key, one argmin
    return int(best[int(np.argmin(path * (top + 1) + depth))])
