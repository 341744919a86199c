"""The node table's label index and the masks built from it (NodeTable's base): which nodes
carry a label (value), as boolean masks and columns over the table's rows, memoized in a
byte-bounded LRU until the node set, labels or taints change."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .bounded import BoundedCache
from .nodespec import NodeSpec

# Byte budget of the memo of masks and columns (``cached``, ``label_mask``, ``label_column``): its
# keys come from pod content (selector values, terms, tolerations, topology keys), so what a
# tenant can add to the operator's memory through it is at most this much.
MASK_CACHE_BYTES = 64 << 20


class NodeLabels:
    """Label index and masks over rows ``0..n-1`` of the table (``n`` and ``index``, node name ->
    row, are the table's)."""

    n: int
    index: dict[str, int]

    def _init_labels(self, mask_cache_bytes: int) -> None:
        # label -> value -> node names; masks and columns cached in a byte budget (keys come from
        # pod content)
        self._label_index: dict[str, dict[str, set[str]]] = {}
        self._mask_cache = BoundedCache(mask_cache_bytes)
        self._none: np.ndarray = _read_only(np.zeros(0, dtype=bool))  # the shared all-False mask

    def _index_labels(self, spec: NodeSpec) -> None:
        for k, v in spec.labels.items():
            self._label_index.setdefault(k, {}).setdefault(v, set()).add(spec.name)

    def _unindex_labels(self, spec: NodeSpec) -> None:
        for k, v in spec.labels.items():
            vals = self._label_index.get(k)
            if vals and v in vals:
                vals[v].discard(spec.name)
                if not vals[v]:
                    del vals[v]
                if not vals:
                    del self._label_index[k]

    # ------------------------------------------------------------------ label masks
    def label_values(self, key: str) -> dict[str, set[str]]:
        """value -> names of the nodes carrying label ``key`` with that value."""
        return self._label_index.get(key, {})

    def no_nodes(self) -> np.ndarray:
        """The shared read-only all-False mask over rows ``0..n-1`` (what a label no node carries
        matches): one array per node count, never one per value."""
        if len(self._none) != self.n:
            self._none = _read_only(np.zeros(self.n, dtype=bool))
        return self._none

    def label_mask(self, key: str, value: str | None = None) -> np.ndarray:
        """Boolean mask over rows ``0..n-1``: nodes having label ``key`` (with ``value`` if given).
        Cached until the node set or any node's labels change; do not modify the result. A key or
        value no node carries costs a dict lookup and returns ``no_nodes()``: nothing is cached
        for it, so only values some node has are ever kept (a bound set by the nodes)."""
        vals = self._label_index.get(key)
        if vals is None:
            return self.no_nodes()
        groups: Iterable[set[str]] = vals.values()
        if value is not None:
            names = vals.get(value)
            if names is None:
                return self.no_nodes()
            groups = (names,)
        ck = ("label", key, value)
        m = self._mask_cache.get(ck)
        if m is not None:
            return m
        m = np.zeros(self.n, dtype=bool)
        index = self.index
        for group in groups:
            for nm in group:
                m[index[nm]] = True
        self._mask_cache.put(ck, m, m.nbytes + 200 + len(key) + len(value or ""))
        return m

    def values_mask(self, key: str, values: Iterable[str]) -> np.ndarray:
        """Mask of the nodes whose label ``key`` is one of ``values`` (a requirement's ``In``),
        built from the label index: a value no node carries costs a set lookup, and no mask is
        kept per value (only ``label_mask``'s for a single value some node carries). Do not
        modify the result."""
        vals = self._label_index.get(key)
        if vals is None:
            return self.no_nodes()
        hit = [v for v in values if v in vals]
        if not hit:
            return self.no_nodes()
        if len(hit) == 1:
            return self.label_mask(key, hit[0])
        m = np.zeros(self.n, dtype=bool)
        index = self.index
        for v in set(hit):
            for nm in vals[v]:
                m[index[nm]] = True
        return m

    def label_column(self, key: str) -> list[str | None]:
        """Per row, the value of label ``key`` or None. Cached like ``label_mask`` (a key no node
        has is not cached)."""
        vals = self._label_index.get(key)
        if vals is None:
            return [None] * self.n
        ck = ("col", key)
        c = self._mask_cache.get(ck)
        if c is not None:
            return c
        col: list[str | None] = [None] * self.n
        index = self.index
        for v, names in vals.items():
            for nm in names:
                col[index[nm]] = v
        # the strings are the nodes' own: the list is what the entry adds
        self._mask_cache.put(ck, col, 8 * self.n + 200 + len(key))
        return col

    def cached(self, key: tuple, build) -> Any:
        """Memoize ``build()`` until the node set, labels or taints change (for plugin masks), in
        the byte-bounded LRU: an evicted or too large result is built again when next asked."""
        return self._mask_cache.get_or_build(key, build)

    def mask_cache_stats(self) -> dict[str, int]:
        """bytes, entries, budget, evictions, uncached of the mask memo (read by the metrics)."""
        return self._mask_cache.stats()


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a
