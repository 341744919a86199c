"""MetricScore: any PromQL as a score (higher or lower is better), weights, onMissingMetrics."""

from __future__ import annotations

import random

import numpy as np
import pytest

from policy_scheduler.policy.chain import ChainError, build_chain
from policy_scheduler.plugins import default_registry
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.metricview import MetricsView
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.cycle.schedule import schedule_one
from policy_scheduler.plugins.metric_score import PLUGIN, MetricScore

from policy_scheduler.framework.events import METRICS_REFRESH, ActionType, Resource

from support.kit import QUEUE, hint, node, refused, registered
from support.handles import view_handle

NOW = 1000.0


def make_table(names):
    t = NodeTable()
    for n in names:
        t.upsert_node({"metadata": {"name": n}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi",
                                                                           "pods": "110"}}})
    return t


def make_pod(requests=None):
    res = {"requests": requests} if requests else {}
    return parse_pod({"metadata": {"name": "p", "namespace": "ns"},
                      "spec": {"containers": [{"name": "c", "image": "x", "resources": res}]}})


def publish(series):
    """series: query -> {node: value} (fresh) ; a value None means a stale sample."""
    v = MetricsView(lambda: NOW)
    v.publish({(q, "instance"): {n: (0.0 if x is None else x, NOW - 300 if x is None else NOW)
                                 for n, x in vals.items()} for q, vals in series.items()},
              now=NOW, ttl=60, available=True)
    return v


def plugin(view, *rules):
    return PLUGIN(PLUGIN.Args.model_validate({"metrics": list(rules)}), view_handle(view))


def run_score(pl, table, pod=None):
    pod = pod or make_pod()
    state = CycleState()
    pl.pre_filter(state, pod, table)
    rows = np.arange(table.n)
    assert pl.pre_score(state, pod, table, rows).is_success
    return dict(zip(table.names, pl.score(state, pod, table, rows).tolist()))


@pytest.mark.parametrize("prefer,expected", [
    # values 10, 20, 40: range 30
    ("Lower", {"a": 100, "b": 66, "c": 0}),  # floor((40-v)*100/30): 100, 66.7, 0
    ("Higher", {"a": 0, "b": 33, "c": 100}),  # floor((v-10)*100/30): 0, 33.3, 100
])
def test_scaled_among_the_scored_nodes(prefer, expected):
    t = make_table(["a", "b", "c"])
    pl = plugin(publish({"q": {"a": 10, "b": 20, "c": 40}}), {"name": "m", "query": "q", "prefer": prefer})
    assert run_score(pl, t) == expected


def test_equal_values_all_score_100():
    t = make_table(["a", "b"])
    pl = plugin(publish({"q": {"a": 5, "b": 5}}), {"name": "m", "query": "q", "prefer": "Lower"})
    assert run_score(pl, t) == {"a": 100, "b": 100}


def test_weights_combine_rules():
    t = make_table(["a", "b"])
    view = publish({"lat": {"a": 1, "b": 3}, "free": {"a": 0, "b": 10}})
    pl = plugin(view, {"name": "latency", "query": "lat", "prefer": "Lower", "weight": 1},
                {"name": "free", "query": "free", "prefer": "Higher", "weight": 3})
    # a: latency 100, free 0 -> (100 + 0) // 4 = 25; b: latency 0, free 100 -> 300 // 4 = 75
    assert run_score(pl, t) == {"a": 25, "b": 75}


@pytest.mark.parametrize("mode,other", [
    ("Neutral", 50),
    # LeastAllocated of a pod requesting 1 cpu / 2Gi on 4 / 8Gi: (75 + 75) // 2
    ("FallbackToRequests", 75),
])
def test_missing_values_score_by_mode(mode, other):
    t = make_table(["a", "b", "stale", "missing"])
    pl = plugin(publish({"q": {"a": 1, "b": 2, "stale": None}}),
                {"name": "m", "query": "q", "prefer": "Lower", "onMissingMetrics": mode})
    got = run_score(pl, t, make_pod({"cpu": "1", "memory": "2Gi"}))
    assert got == {"a": 100, "b": 0, "stale": other, "missing": other}


def test_exclude_filters_nodes_without_fresh_values():
    t = make_table(["a", "stale", "missing"])
    pl = plugin(publish({"q": {"a": 1, "stale": None}}),
                {"name": "m", "query": "q", "prefer": "Lower", "onMissingMetrics": "Exclude"})
    state = CycleState()
    st, _ = pl.pre_filter(state, make_pod(), t)
    assert st.is_success
    res = pl.filter(state, make_pod(), t, np.arange(3))
    assert res.passed.tolist() == [True, False, False]
    assert [(r, m.tolist()) for r, m in res.reasons] == [("node(s) had no fresh m metric", [False, True, True])]
    # without an Exclude rule the filter is skipped
    pl = plugin(publish({"q": {}}), {"name": "m", "query": "q", "prefer": "Lower"})
    assert pl.pre_filter(CycleState(), make_pod(), t)[0].is_skip


def test_rules_for_other_pods_skip_the_score():
    t = make_table(["a"])
    pl = plugin(publish({"q": {"a": 1}}), {"name": "m", "query": "q", "prefer": "Lower",
                                          "podsRequesting": ["nvidia.com/gpu"]})
    state = CycleState()
    assert pl.pre_score(state, make_pod(), t, np.arange(1)).is_skip


def test_in_a_chain_the_lower_value_wins_and_explain_shows_it():
    t = make_table(["a", "b"])
    chain = build_chain({"plugins": [{"name": "MetricScore", "args": {"metrics": [
        {"name": "queue", "query": "q", "prefer": "Lower"}]}}]},
        default_registry(), handle=view_handle(publish({"q": {"a": 7, "b": 2}})))
    d = schedule_one(chain, make_pod(), t, random.Random(0))
    assert d.node == "b"
    assert d.top[0].details == {"MetricScore": {"queue": {"state": "fresh", "age": 0.0, "value": 2.0}}}
    assert MetricScore.metric_queries(chain.plugin("MetricScore").args) == [("q", "instance")]


@pytest.mark.parametrize("args,error", [
    ({"metrics": [{"name": "m", "query": "q"}]}, "plugins[0].args.metrics[0].prefer: Required value"),
    ({"metrics": [{"name": "m", "query": "q", "prefer": "Up"}]},
     "plugins[0].args.metrics[0].prefer: Unsupported value: \"Up\": supported values: \"Higher\", \"Lower\""),
    ({"metrics": [{"name": "m", "query": "q", "prefer": "Lower", "weight": 0}]},
     "plugins[0].args.metrics[0].weight: Invalid value: 0: must be greater than or equal to 1"),
])
def test_args_validation(args, error):
    with pytest.raises(ChainError) as e:
        build_chain({"plugins": [{"name": "MetricScore", "args": args}]}, default_registry())
    assert any(x.startswith(error) for x in e.value.errors), e.value.errors


# ------------------------------------------------------------------ events
def test_events_to_register_metrics_refresh_and_node_add_without_hints():
    # a new publication may change any node's verdict, and a new node may pass: both always queue
    pl = plugin(None, {"name": "m", "query": "q", "prefer": "Lower"})
    assert registered(pl) == [(Resource.METRICS, ActionType.UPDATE), (Resource.NODE, ActionType.ADD)]
    assert all(r.hint is None for r in pl.events_to_register())
    assert hint(pl, METRICS_REFRESH.resource, METRICS_REFRESH.action, make_pod(), None, "policy") == QUEUE
    assert hint(pl, Resource.NODE, ActionType.ADD, make_pod(), None, node("x")) == QUEUE


# ------------------------------------------------------------------ args: every field checked
def rule(**kw):
    return {"name": "m", "query": "q", "prefer": "Lower", **kw}


@pytest.mark.parametrize("args, path, detail", [
    ({"metrics": [rule(weight=101)]}, "metrics[0].weight", "Invalid value: 101: must be less than or equal to 100"),
    ({"metrics": [rule(weight=1.5)]}, "metrics[0].weight", "must be an integer"),
    ({"metrics": [rule(prefer="lower")]}, "metrics[0].prefer",
     'Unsupported value: "lower": supported values: "Higher", "Lower"'),
    ({"metrics": [rule(name="")]}, "metrics[0].name", "Required value"),
    ({"metrics": [rule(query="")]}, "metrics[0].query", "Required value"),
    ({"metrics": [rule(nodeLabel="")]}, "metrics[0].nodeLabel", "must be a Prometheus label name"),
    ({"metrics": [rule(podsRequesting=["a/b/c"])]}, "metrics[0].podsRequesting[0]", "a valid label key"),
    ({"metrics": [rule(rejectAbove=1)]}, "metrics[0].rejectAbove", "Extra inputs are not permitted"),
    ({"metrics": [rule(name=f"m{i}") for i in range(17)]}, "metrics", "Too many: 17"),
    ({"metrics": []}, "metrics", "Required value: must have at least 1 item(s)"),
    ({}, "metrics", "Required value"),
])
def test_args_refused_with_the_field(args, path, detail):
    refused("MetricScore", args, path, detail)
