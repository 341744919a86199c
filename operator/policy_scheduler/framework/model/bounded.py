"""A least-recently-used cache with a byte budget, for everything keyed by what objects contain.

kube-scheduler keys its caches by objects (a node, a pod), so their size follows the cluster's.
Ours also memoise results keyed by *content*: a mask per label value, per node-selector term, per
toleration set, per spread selector, per compiled CEL expression or regular expression. A tenant
chooses that content: one pod with a required node affinity ``In`` over 100,000 values would
otherwise keep 100,000 node masks. Every such cache is a ``BoundedCache``:

- an entry is charged the approximate size of its key and its value (``approx_size``: numpy
  buffers, containers and the strings in them; a string shared by two entries is charged twice,
  which only errs on the safe side);
- past ``budget`` bytes, the least recently used entries are evicted;
- an entry larger than ``max_entry`` (a fraction of the budget) is not kept: the caller gets the
  value it built, computed again next time. A pod larger than the budget is still scheduled
  correctly, just without the memo.

``bytes``, ``entries``, ``evictions`` and ``uncached`` are plain attributes (the pure core does no
I/O): the operator's metrics collector reads them at scrape time.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np

_getsizeof = sys.getsizeof
_SLOT_OBJECT = 56  # a small object with slots, its own header


def approx_size(obj: Any, depth: int = 8) -> int:
    """Bytes ``obj`` holds, roughly: numpy buffers, and containers, dataclasses with slots and
    strings followed ``depth`` levels down (beyond that, the shallow size)."""
    if isinstance(obj, np.ndarray):
        return obj.nbytes + 112
    size = _getsizeof(obj)
    if depth <= 0 or isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return size
    d = depth - 1
    if isinstance(obj, (tuple, list, frozenset, set)):
        return size + sum(approx_size(x, d) for x in obj)
    if isinstance(obj, dict):
        return size + sum(approx_size(k, d) + approx_size(v, d) for k, v in obj.items())
    slots = getattr(type(obj), "__slots__", None)
    if slots:
        return size + sum(approx_size(getattr(obj, s, None), d) for s in slots if s != "__weakref__")
    return size


class BoundedCache:
    """LRU mapping with a byte budget (see the module docstring). Not thread-safe by itself: a
    cache shared between threads is guarded by its owner's lock."""

    __slots__ = ("budget", "max_entry", "max_entries", "bytes", "evictions", "uncached", "_data", "_sizer")

    def __init__(self, budget: int, max_entry: int | None = None, max_entries: int | None = None,
                 sizer: Callable[[Hashable, Any], int] | None = None) -> None:
        """``max_entry``: the largest charge kept (default: an eighth of the budget);
        ``max_entries``: a count limit as well, where upstream has one."""
        self.budget = max(0, int(budget))
        self.max_entry = self.budget // 8 if max_entry is None else min(int(max_entry), self.budget)
        self.max_entries = max_entries
        self.bytes = 0  # the charge of the entries kept
        self.evictions = 0  # entries dropped to stay under the budget (clear() does not count)
        self.uncached = 0  # values built but not kept: over max_entry
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._sizer = sizer or (lambda k, v: approx_size(k) + approx_size(v) + 120)

    @property
    def entries(self) -> int:
        return len(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def get(self, key: Hashable, default: Any = None) -> Any:
        hit = self._data.get(key)
        if hit is None:
            return default
        self._data.move_to_end(key)
        return hit[0]

    def put(self, key: Hashable, value: Any, size: int | None = None) -> bool:
        """Keep ``value`` under ``key`` (charged ``size`` bytes, estimated when None); False when it
        is too large to keep."""
        if size is None:
            size = self._sizer(key, value)
        old = self._data.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        if size > self.max_entry:
            self.uncached += 1
            return False
        self._data[key] = (value, size)
        self.bytes += size
        limit = self.max_entries
        while self._data and (self.bytes > self.budget or (limit is not None and len(self._data) > limit)):
            _, (_, s) = self._data.popitem(last=False)
            self.bytes -= s
            self.evictions += 1
        return True

    def charged(self, key: Hashable) -> int | None:
        """The bytes ``key``'s entry is charged, None when it is not kept (no recency change):
        a caller replacing an entry with one of the same size need not measure it again."""
        hit = self._data.get(key)
        return None if hit is None else hit[1]

    def get_or_build(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The cached value for ``key``, else ``build()`` (kept if it fits)."""
        hit = self._data.get(key)
        if hit is not None:
            self._data.move_to_end(key)
            return hit[0]
        value = build()
        self.put(key, value)
        return value

    def pop(self, key: Hashable, default: Any = None) -> Any:
        hit = self._data.pop(key, None)
        if hit is None:
            return default
        self.bytes -= hit[1]
        return hit[0]

    def clear(self) -> None:
        self._data.clear()
        self.bytes = 0

    def stats(self) -> dict[str, int]:
        """The figures the metrics show."""
        return {"bytes": self.bytes, "entries": len(self._data), "budget": self.budget,
                "evictions": self.evictions, "uncached": self.uncached}
