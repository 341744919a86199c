"""BoundedCache: the byte budget, LRU eviction, entries too large to keep, the counters."""

import numpy as np

from policy_scheduler.framework.model.bounded import BoundedCache, approx_size
from policy_scheduler.framework.model.labels import NodeSelectorTerm


def test_approx_size_counts_buffers_and_contents():
    assert approx_size(np.zeros(10_000, dtype=bool)) >= 10_000
    assert approx_size(np.zeros(1000, dtype=np.int64)) >= 8000
    small = NodeSelectorTerm.parse({"matchExpressions": [{"key": "k", "operator": "In", "values": ["a"]}]}, "t")
    big = NodeSelectorTerm.parse({"matchExpressions": [
        {"key": "k", "operator": "In", "values": [f"value-{i:06d}" for i in range(10_000)]}]}, "t")
    # a term keeps its values alive: 10,000 strings of 12 characters are more than 500 KB
    assert approx_size(big) > 500_000 > approx_size(small)
    assert approx_size(("a", (1, 2), {"k": "v"})) > approx_size("a")


def test_budget_reached_evicts_least_recently_used():
    c = BoundedCache(10_000, max_entry=5_000)
    for i in range(5):
        assert c.put(i, f"v{i}", size=2_500)
    # 4 fit; the fifth evicted the oldest
    assert c.entries == 4 and c.bytes == 10_000 and c.evictions == 1
    assert 0 not in c and all(i in c for i in range(1, 5))
    c.get(1)  # 1 is now the most recently used: 2 goes next
    c.put(5, "v5", size=2_500)
    assert 2 not in c and 1 in c and c.evictions == 2
    assert c.bytes <= c.budget


def test_entry_over_the_limit_is_built_but_not_kept():
    c = BoundedCache(1 << 20)  # max_entry: 1/8 of the budget
    built = []

    def build():
        built.append(1)
        return np.zeros(200_000, dtype=bool)  # 200 KB > 128 KiB

    for _ in range(3):
        v = c.get_or_build("big", build)
        assert v.shape == (200_000,) and not v.any()
    assert len(built) == 3 and c.entries == 0 and c.bytes == 0 and c.uncached == 3


def test_replacing_a_key_recharges_it():
    c = BoundedCache(1000, max_entry=1000)
    c.put("k", 1, size=600)
    c.put("k", 2, size=300)
    assert c.bytes == 300 and c.get("k") == 2 and c.entries == 1
    assert c.pop("k") == 2 and c.bytes == 0
    c.put("a", 1, size=10)
    c.clear()
    assert c.bytes == 0 and c.entries == 0 and c.evictions == 0


def test_100k_distinct_keys_stay_under_budget_by_summed_nbytes():
    budget = 4 << 20
    c = BoundedCache(budget)
    for i in range(100_000):
        c.get_or_build(("label", "k", f"v{i}"), lambda: np.zeros(2000, dtype=bool))
    held = sum(v.nbytes for v, _ in c._data.values())
    assert held <= budget and c.bytes <= budget
    assert c.evictions >= 100_000 - c.entries > 0
    assert c.stats() == {"bytes": c.bytes, "entries": c.entries, "budget": budget,
                         "evictions": c.evictions, "uncached": 0}
