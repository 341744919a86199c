"""MetricsView: publication, fresh/stale/missing states, row alignment, in-flight estimates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policy_scheduler.framework.metricview import (CPU_BARE, CPU_LIMIT, CPU_REQUEST, FRESH, MEM_BARE, MEM_LIMIT,
                                                   MEM_REQUEST, MISSING, STALE, Estimator, MetricsView, RowCache,
                                                   estimate_parts, node_key, pod_limits)
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod

MI = 1024 * 1024
CPU = ("cpu-q", "instance")
MEM = ("mem-q", "instance")


def make_pod(name="p", containers=({"requests": {"cpu": "100m"}},), overhead=None):
    spec = {"containers": [{"name": f"c{i}", "image": "x", "resources": r} for i, r in enumerate(containers)]}
    if overhead:
        spec["overhead"] = overhead
    return parse_pod({"metadata": {"name": name, "namespace": "ns"}, "spec": spec})


def table(*names):
    t = NodeTable()
    for n in names:
        t.upsert_node({"metadata": {"name": n}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}})
    return t


@pytest.mark.parametrize("label,node", [
    ("node-a", "node-a"),
    ("node-a:9100", "node-a"),  # node_exporter's instance label: host:port
    ("10.0.0.1:9100", "10.0.0.1"),
    ("node-a:metrics", "node-a:metrics"),  # not a port: kept as is
])
def test_node_key(label, node):
    assert node_key(label) == node


@pytest.mark.parametrize("containers,overhead,limits", [
    ([{"limits": {"cpu": "1", "memory": "1Gi"}}], None, {"cpu": 1000, "memory": 1024 * MI}),
    # every container must set the limit, else the pod has none for that resource
    ([{"limits": {"cpu": "1"}}, {"limits": {"cpu": "500m", "memory": "1Gi"}}], None, {"cpu": 1500}),
    ([{"limits": {"cpu": "1"}}, {}], None, {}),
    # the pod overhead adds to the limit
    ([{"limits": {"cpu": "1"}}], {"cpu": "250m"}, {"cpu": 1250}),
])
def test_pod_limits(containers, overhead, limits):
    assert pod_limits(make_pod(containers=containers, overhead=overhead)) == limits


@pytest.mark.parametrize("containers,expected", [
    # limit wins over request
    ([{"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}],
     {CPU_LIMIT: 2000, MEM_LIMIT: 1024 * MI}),
    # request without limit
    ([{"requests": {"cpu": "300m", "memory": "64Mi"}}], {CPU_REQUEST: 300, MEM_REQUEST: 64 * MI}),
    # nothing: one bare pod per resource
    ([{}], {CPU_BARE: 1, MEM_BARE: 1}),
    # cpu limited, memory only requested
    ([{"requests": {"memory": "1Gi"}, "limits": {"cpu": "1"}}], {CPU_LIMIT: 1000, MEM_REQUEST: 1024 * MI}),
])
def test_estimate_parts(containers, expected):
    parts = estimate_parts(make_pod(containers=containers))
    want = np.zeros(6)
    for col, v in expected.items():
        want[col] = v
    assert parts.tolist() == want.tolist()


def test_estimator_applies_limit_factor_default():
    est = Estimator(cpu_factor=0.5, memory_factor=0.25, default_cpu=250, default_memory=100)
    parts = np.array([1000, 400, 2, 10, 80, 3], dtype=float)
    cpu, mem = est.apply(parts)
    assert cpu == 1000 + 0.5 * 400 + 250 * 2  # 1700 millicores
    assert mem == 10 + 0.25 * 80 + 100 * 3  # 330 bytes
    both = est.apply(np.stack([parts, np.zeros(6)]))
    assert both[0].tolist() == [1700, 0] and both[1].tolist() == [330, 0]


@pytest.mark.parametrize("sample_time,now,ttl,state", [
    (100.0, 100.0, 30.0, FRESH),
    (100.0, 130.0, 30.0, FRESH),  # exactly ttl old: still fresh
    (100.0, 130.5, 30.0, STALE),
    (None, 130.0, 30.0, MISSING),
])
def test_states(sample_time, now, ttl, state):
    v = MetricsView()
    samples = {} if sample_time is None else {"a": (0.5, sample_time)}
    v.publish({CPU: samples, MEM: {"b": (0.1, now)}}, now=now, ttl=ttl, available=True)
    t = table("a", "b")
    slots = v.slot_rows(t)
    assert int(v.series_for(CPU).state[slots[0]]) == state


def test_slot_rows_follow_the_table_and_the_layout():
    v = MetricsView()
    t = table("a", "b", "c")
    v.publish({CPU: {"c": (0.3, 10.0), "a": (0.1, 10.0)}}, now=10.0, ttl=60, available=True)
    s = v.series_for(CPU)
    slots = v.slot_rows(t)
    assert [s.values[i] for i in slots[[0, 2]]] == [0.1, 0.3]
    assert math.isnan(s.values[slots[1]]) and s.state[slots[1]] == MISSING  # b: sentinel slot
    layout = v.layout
    v.publish({CPU: {"b": (0.2, 11.0)}}, now=11.0, ttl=60, available=True)  # b is new: layout changes
    assert v.layout == layout + 1
    slots = v.slot_rows(t)
    assert v.series_for(CPU).values[slots[1]] == 0.2
    # the published samples replace the old ones entirely (the source merges; the view does not)
    assert v.series_for(CPU).state[slots[0]] == MISSING
    # a series the source does not have: every node missing
    assert (v.series_for(("other", "instance")).state[v.slot_rows(t)] == MISSING).all()


def test_inflight_counts_until_a_sample_usage_lag_newer_covers_it():
    v = MetricsView()
    v.publish({CPU: {"a": (0.2, 100.0)}, MEM: {"a": (0.3, 100.0)}}, now=100.0, ttl=60, available=True)
    parts = np.array([0, 200, 0, 0, 0, 1], dtype=float)
    v.add_inflight("ns/p1", "a", parts, placed_at=101.0)
    v.add_inflight("ns/p2", "unknown-node", parts, placed_at=101.0)  # no series names it: not counted
    slot = v.index["a"]
    assert v.acc[slot].tolist() == parts.tolist()
    # a sample at 105 is newer than the placement, but not usage_lag (10 s) newer: still counted
    v.publish({CPU: {"a": (0.2, 105.0)}, MEM: {"a": (0.3, 105.0)}}, now=105.0, ttl=60, available=True,
              usage_lag=10.0, horizon=600.0)
    assert "ns/p1" in v.records and v.acc[slot].tolist() == parts.tolist()
    # cpu sampled at 111 covers it, but memory (110.5) does not yet: the oldest series decides
    v.publish({CPU: {"a": (0.2, 111.0)}, MEM: {"a": (0.3, 110.5)}}, now=111.0, ttl=60, available=True,
              usage_lag=10.0, horizon=600.0)
    assert "ns/p1" in v.records
    v.publish({CPU: {"a": (0.25, 111.0)}, MEM: {"a": (0.3, 111.0)}}, now=111.0, ttl=60, available=True,
              usage_lag=10.0, horizon=600.0)
    assert "ns/p1" not in v.records and v.acc[slot].tolist() == [0.0] * 6
    # the pod on a node without series goes after the horizon
    assert "ns/p2" in v.records
    v.publish({CPU: {}, MEM: {}}, now=101.0 + 601.0, ttl=60, available=False, usage_lag=10.0, horizon=600.0)
    assert v.records == {}


def test_stale_samples_do_not_cover_inflight_pods():
    v = MetricsView()
    v.publish({CPU: {"a": (0.2, 100.0)}}, now=100.0, ttl=30, available=True)
    v.add_inflight("ns/p", "a", np.ones(6), placed_at=100.0)
    # sample at 120 would cover (lag 5), but it is 40 s old at publication: stale
    v.publish({CPU: {"a": (0.2, 120.0)}}, now=160.0, ttl=30, available=False, usage_lag=5.0, horizon=600.0)
    assert "ns/p" in v.records


class Listener:
    def __init__(self):
        self.calls = []

    def changed(self, node, parts):
        self.calls.append((node, parts[0]))


def test_remove_and_replace_inflight_tell_subscribers():
    v = MetricsView()
    v.publish({CPU: {"a": (0.2, 1.0), "b": (0.2, 1.0)}}, now=1.0, ttl=60, available=True)
    seen = Listener()
    v.subscribe(seen.changed)
    v.subscribe(seen.changed)  # once is enough
    v.add_inflight("ns/p", "a", np.full(6, 2.0), placed_at=1.0)
    v.add_inflight("ns/p", "b", np.full(6, 3.0), placed_at=2.0)  # re-placed: moves
    assert v.acc[v.index["a"]].tolist() == [0.0] * 6 and v.acc[v.index["b"]].tolist() == [3.0] * 6
    assert v.remove_inflight("ns/p") and not v.remove_inflight("ns/p")
    assert v.acc[v.index["b"]].tolist() == [0.0] * 6
    v.add_inflight("ns/q", "no-series", np.ones(6), placed_at=2.0)  # no slot: nobody is told
    # every signed change, in order, as it happens
    assert seen.calls == [("a", 2.0), ("a", -2.0), ("b", 3.0), ("b", -3.0)]
    del seen  # held weakly: a dropped plugin is not kept alive, nor called
    v.add_inflight("ns/r", "a", np.ones(6), placed_at=3.0)
    assert v._listeners == []


def test_row_cache_is_valid_for_one_publication_and_node_set():
    v = MetricsView()
    t = table("a")
    c = RowCache()
    assert c.stale(v, t) and not c.stale(v, t) and c.valid_for(v, t)
    v.publish({CPU: {"a": (0.1, 1.0)}}, now=1.0, ttl=60, available=True)
    assert not c.valid_for(v, t) and c.stale(v, t)
    v.add_inflight("ns/p", "a", np.ones(6), placed_at=1.0)
    assert not c.stale(v, t)  # in-flight changes reach subscribers directly
    t.upsert_node({"metadata": {"name": "b"}, "status": {"allocatable": {"cpu": "1"}}})
    assert c.stale(v, t)
    assert c.stale(None, t) and not c.stale(None, t)
