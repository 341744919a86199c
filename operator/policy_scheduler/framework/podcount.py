"""PodMatchCounter: per-node counts of the pods matching a predicate, kept across cycles.

Plugins that count existing pods per node (PodTopologySpread's countPodsMatchSelector,
InterPodAffinity's term matching) ask for the same predicates cycle after cycle while only a few
nodes' pods change in between, so a count array is cached per predicate key and brought up to
date by recounting only the rows whose pods changed since it was computed.
"""

from __future__ import annotations

import operator
from collections import deque
from itertools import islice
from typing import Callable, Hashable

import numpy as np

from .model.bounded import BoundedCache, approx_size
from .model.labels import LabelSelector
from .model.nodetable import NodeTable
from .model.podinfo import PodInfo

CACHE_SIZE = 64  # count arrays kept (least recently used dropped first) ...
CACHE_BYTES = 32 << 20  # ... within this many bytes: the keys hold selectors from pods
CHANGE_LOG_SIZE = 1024  # generations of changed rows kept (a cached count older than this is recounted)


def selector_matcher(sel: LabelSelector) -> Callable[[dict[str, str]], bool]:
    """A fast labels -> bool test: a superset check of the items for plain matchLabels selectors."""
    reqs = sel.requirements
    if not sel.nothing and all(r.operator == "In" and len(r.values) == 1 for r in reqs):
        want = {r.key: r.values[0] for r in reqs}.items()
        if len(want) == len(reqs):
            return lambda labels: want <= labels.items()
    return sel.matches


class PodMatchCounter:
    """Per-row counts of pods matching a predicate, cached per caller-chosen key.

    The key must identify the predicate: two calls with the same key must pass count functions
    that agree on every tuple of pods. A row's count depends only on the pod objects on it, so the counter keeps
    a snapshot (a tuple of the row's PodInfo objects per row) and, whenever the table's version
    moves, finds the rows whose pods changed and logs them as a new generation. A cached count
    array is brought up to date by recounting only the rows logged since its generation
    (everything when the node set changed or the log no longer reaches back).

    Finding the changed rows: when every change since the last look was the binding of a new pod
    (``NodeTable.add_pod`` of an unknown key bumps ``version`` by one and appends the key to
    ``pod_node``; every other change bumps ``version`` without growing ``pod_node``), the rows are
    those of the newest ``pod_node`` keys; otherwise each row's tuple is compared with the
    snapshot (identity first, in C). The snapshot holds the objects, so a new pod can never pass
    for an old one by reusing its memory. PodInfo objects are not modified once in the table.
    """

    def __init__(self, cache_size: int = CACHE_SIZE, cache_bytes: int = CACHE_BYTES) -> None:
        self._table: NodeTable | None = None
        self._version = -1
        self._npods = 0
        self._snap: list[tuple] = []
        self._gen = 0
        self._log: deque[tuple[int, np.ndarray | None]] = deque(maxlen=CHANGE_LOG_SIZE)
        # key -> (generation, counts); an entry over an eighth of the budget is counted each time
        self._entries = BoundedCache(cache_bytes, max_entries=cache_size)

    def _sync(self, nodes: NodeTable) -> None:
        if self._table is nodes and self._version == nodes.version:
            return
        pods, n = nodes.pods, nodes.n
        changed: np.ndarray | None
        if self._table is not nodes or len(self._snap) != n:
            self._snap = list(map(tuple, map(dict.values, pods[:n])))
            changed = None
        else:
            added = nodes.version - self._version
            if 0 < added == len(nodes.pod_node) - self._npods and added <= CHANGE_LOG_SIZE:
                where = (nodes.index.get(nodes.pod_node[k]) for k in islice(reversed(nodes.pod_node), added))
                changed = np.array(sorted({r for r in where if r is not None}), dtype=np.intp)
            else:
                changed = np.flatnonzero(np.fromiter(map(operator.ne, map(tuple, map(dict.values, pods[:n])),
                                                         self._snap), dtype=bool, count=n))
            for row in changed:
                self._snap[row] = tuple(pods[row].values())
        self._table, self._version, self._npods = nodes, nodes.version, len(nodes.pod_node)
        self._gen += 1
        self._log.append((self._gen, changed))

    def _changed_since(self, gen: int) -> np.ndarray | None:
        """Rows changed after generation ``gen``; None when unknown (recount everything)."""
        if not self._log or self._log[0][0] > gen + 1:
            return None
        parts = []
        for g, rows in islice(self._log, gen + 1 - self._log[0][0], None):  # generations are consecutive
            if g > gen:
                if rows is None:
                    return None
                parts.append(rows)
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.intp)

    def counts(self, nodes: NodeTable, key: Hashable, count: Callable[[tuple[PodInfo, ...]], int]) -> np.ndarray:
        """Per row (all rows), ``count`` of the row's pods (the number matching the predicate
        ``key`` stands for). Do not modify the result."""
        self._sync(nodes)
        entry = self._entries.get(key)
        if entry is not None and entry[0] == self._gen:
            return entry[1]
        rows = None if entry is None else self._changed_since(entry[0])
        if rows is None:
            counts = np.fromiter(map(count, self._snap), dtype=np.int64, count=len(self._snap))
        else:
            counts = entry[1].copy()
            for row in rows:
                counts[row] = count(self._snap[row])
        # an entry brought up to date keeps its size (same key, same rows): the key, a pod's
        # selector, is measured once, not on every update
        size = self._entries.charged(key) if rows is not None else None
        if size is None:
            size = counts.nbytes + approx_size(key) + 200
        self._entries.put(key, (self._gen, counts), size)
        return counts
