"""Memory keyed by what pods contain is bounded (issue #41, H2): the node table's memo of masks is
an LRU with a byte budget, a label value no node carries is never cached, and a plugin result
too large for the memo is computed without it. Assertions are on memory actually held
(tracemalloc, summed nbytes) so that they fail when a cache grows with pod content."""

from __future__ import annotations

import tracemalloc

import numpy as np

from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.plugins import inter_pod_affinity, pod_topology_spread, taint_toleration
from policy_scheduler.plugins.node_affinity import PLUGIN as NodeAffinity, required_mask

N = 2000


def make_table(n=N, budget=None, taint_every=0) -> NodeTable:
    t = NodeTable() if budget is None else NodeTable(mask_cache_bytes=budget)
    for i in range(n):
        taints = [{"key": "dedicated", "value": f"t{i % 7}", "effect": "NoSchedule"}] if taint_every and i % taint_every == 0 else []
        t.upsert_node({"metadata": {"name": f"n{i}", "labels": {"kubernetes.io/hostname": f"n{i}", "zone": f"z{i % 3}"}},
                       "spec": {"taints": taints},
                       "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
    return t


def affinity_pod(name, key, values, **spec):
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
    return parse_pod({"metadata": {"name": name, "namespace": "t"}, "spec": {
        "containers": [{"name": "c"}], **spec,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}})


def held_nbytes(t: NodeTable) -> int:
    total = 0
    for v, _ in t._mask_cache._data.values():
        parts = v if isinstance(v, tuple) else (v,)
        total += sum(p.nbytes for p in parts if isinstance(p, np.ndarray))
    return total


def filter_names(t: NodeTable, pod) -> set[str]:
    pl = NodeAffinity(NodeAffinity.Args.model_validate({}), Handle())
    state = CycleState()
    status, _ = pl.pre_filter(state, pod, t)
    res = pl.filter(state, pod, t, np.arange(t.n))
    return {t.names[r] for r, ok in enumerate(res.passed) if ok}


# ------------------------------------------------------------------------------------- label masks
def test_unknown_key_or_value_returns_the_shared_read_only_empty_mask_uncached():
    t = make_table(10)
    before = t.mask_cache_stats()["entries"]
    a = t.label_mask("zone", "nowhere")
    b = t.label_mask("no-such-key", "x")
    c = t.label_mask("no-such-key")
    assert a is b is c is t.no_nodes()
    assert a.shape == (10,) and not a.any() and not a.flags.writeable
    assert t.mask_cache_stats()["entries"] == before
    # a known value is cached (bounded by what nodes carry)
    z = t.label_mask("zone", "z1")
    assert z.sum() == 3 and t.label_mask("zone", "z1") is z
    # the shared mask follows the node count
    t.upsert_node({"metadata": {"name": "extra"}, "status": {"allocatable": {"cpu": "1"}}})
    assert t.label_mask("zone", "nowhere").shape == (11,)


def test_in_over_100k_unknown_values_caches_nothing_per_value():
    t = make_table()
    values = [f"absent-{i}" for i in range(100_000)]
    m = t.values_mask("kubernetes.io/hostname", values)
    assert not m.any() and t.mask_cache_stats()["entries"] == 0
    # known values among them still match, from the label index
    m = t.values_mask("kubernetes.io/hostname", values + ["n5", "n7", "n7"])
    assert set(np.flatnonzero(m)) == {t.index["n5"], t.index["n7"]}
    assert t.mask_cache_stats()["entries"] == 0  # several values: no mask kept per value
    assert t.values_mask("zone", ["z2", "nope"]).sum() == N // 3
    assert list(t._mask_cache._data) == [("label", "zone", "z2")]  # one value some node has: its own mask


def test_node_affinity_filter_with_100k_unknown_values_holds_no_memory():
    t = make_table()
    values = [f"absent-{i}" for i in range(100_000)]
    pod = affinity_pod("p", "kubernetes.io/hostname", values + ["n3"])
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        assert filter_names(t, pod) == {"n3"}
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    # before: one 2,000-byte mask per value, 200 MB; now the term, selector and required masks
    assert held < 100_000, held
    assert held_nbytes(t) <= 4 * N


def test_distinct_terms_stay_under_the_budget_and_evict():
    budget = 1 << 20
    t = make_table(budget=budget)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(600):  # every pod names known values in a term of its own
            pod = affinity_pod(f"p{i}", "kubernetes.io/hostname", [f"n{i}", f"n{(i + 1) % N}"])
            assert filter_names(t, pod) == {f"n{i}", f"n{(i + 1) % N}"}
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    stats = t.mask_cache_stats()
    assert stats["bytes"] <= budget and stats["evictions"] > 0
    assert held_nbytes(t) <= budget
    assert held < 2 * budget, held  # what tracemalloc sees: the cache and its keys, and nothing per pod


def test_a_pod_larger_than_the_budget_is_scheduled_without_the_cache():
    t = make_table(budget=64 << 10)  # 8 KiB per entry at most
    values = [f"absent-{i}" for i in range(5000)] + ["n10"]
    pod = affinity_pod("big", "kubernetes.io/hostname", values)
    for _ in range(2):
        assert filter_names(t, pod) == {"n10"}
    stats = t.mask_cache_stats()
    assert stats["uncached"] >= 2 and stats["bytes"] <= stats["budget"]
    assert required_mask(t, pod).sum() == 1


def test_node_selector_with_unknown_values_is_not_cached():
    t = make_table(100)
    for i in range(1000):
        pod = parse_pod({"metadata": {"name": f"p{i}", "namespace": "t"},
                         "spec": {"containers": [{"name": "c"}], "nodeSelector": {"zone": f"x{i}"}}})
        assert not required_mask(t, pod).any()
    # the required masks are per (nodeSelector, affinity) and bounded; no per-value label masks
    assert not any(k[0] == "label" for k in t._mask_cache._data)
    assert t.mask_cache_stats()["bytes"] <= t.mask_cache_stats()["budget"]


# ------------------------------------------------------------------------------------- other plugins
def test_toleration_sets_are_bounded():
    budget = 256 << 10
    t = make_table(budget=budget, taint_every=2)
    for i in range(2000):
        pod = parse_pod({"metadata": {"name": f"p{i}", "namespace": "t"}, "spec": {
            "containers": [{"name": "c"}],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": f"t{i % 7}", "effect": "NoSchedule"},
                            {"key": f"tenant-{i}", "operator": "Exists"}]}})
        bad = taint_toleration.untolerated_mask(t, pod.tolerations)
        # tolerates t{i%7} only: the other tainted nodes stay untolerated
        assert bad.sum() == sum(1 for r in range(0, N, 2) if r % 7 != i % 7)
        taint_toleration.intolerable_prefer_counts(t, pod.tolerations)
        pod_topology_spread._tolerated_mask(t, pod)
    stats = t.mask_cache_stats()
    assert stats["bytes"] <= budget and stats["evictions"] > 0 and held_nbytes(t) <= budget


def test_topology_keys_are_bounded():
    budget = 256 << 10
    t = make_table(budget=budget)
    for i in range(2000):  # domains of topology keys no node has, named by pods
        codes, _, _ = inter_pod_affinity._domains(t, f"tenant/key-{i}")
        assert (codes == -1).all()
        codes, count, _ = pod_topology_spread._domain_codes(t, f"tenant/key-{i}")
        assert count == 0
    codes, by_value, _ = inter_pod_affinity._domains(t, "zone")
    assert len(by_value) == 3 and (codes >= 0).all()
    stats = t.mask_cache_stats()
    assert stats["bytes"] <= budget and stats["evictions"] > 0 and held_nbytes(t) <= budget


def test_label_changes_still_clear_the_cache():
    t = make_table(10)
    assert t.label_mask("zone", "z0").sum() == 4
    t.upsert_node({"metadata": {"name": "n1", "labels": {"zone": "z0"}}, "status": {"allocatable": {"cpu": "4"}}})
    assert t.label_mask("zone", "z0").sum() == 5
    assert t.mask_cache_stats()["entries"] == 1
