"""MetricThreshold: any PromQL as a filter; pod applicability; onMissingMetrics; args validation."""

from __future__ import annotations

import numpy as np
import pytest

from policy_scheduler.policy.chain import ChainError, build_chain
from policy_scheduler.plugins import default_registry
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.metricview import MetricsView
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.plugins.metric_threshold import PLUGIN, MetricThreshold

from policy_scheduler.framework.events import METRICS_REFRESH, ActionType, Resource

from support.kit import QUEUE, hint, node, refused, registered
from support.handles import view_handle

NOW = 1000.0
GPU_QUERY = "max by (Hostname) (DCGM_FI_DEV_GPU_UTIL) / 100"


def make_table(names):
    t = NodeTable()
    for n in names:
        t.upsert_node({"metadata": {"name": n}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi",
                                                                           "nvidia.com/gpu": "4"}}})
    return t


def make_pod(gpus=0):
    req = {"cpu": "1"}
    if gpus:
        req["nvidia.com/gpu"] = str(gpus)
    return parse_pod({"metadata": {"name": "p", "namespace": "ns"},
                      "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": req}}]}})


def view_of(key, values, age=0.0):
    v = MetricsView(lambda: NOW)
    v.publish({key: {n: (x, NOW - age) for n, x in values.items()}}, now=NOW, ttl=60, available=True)
    return v


def gpu_rule(**kw):
    return {"name": "gpu-util", "query": GPU_QUERY, "nodeLabel": "Hostname", "rejectAbove": 0.9,
            "podsRequesting": ["nvidia.com/gpu"], **kw}


def run(pl, table, pod):
    """(pre-filter skipped?, node -> reasons or None when passed)."""
    state = CycleState()
    st, _ = pl.pre_filter(state, pod, table)
    if st.is_skip:
        return True, None
    res = pl.filter(state, pod, table, np.arange(table.n))
    return False, {n: (None if res.passed[i] else sorted(r for r, m in res.reasons if m[i]))
                   for i, n in enumerate(table.names)}


def plugin(view, *rules):
    return PLUGIN(PLUGIN.Args.model_validate({"metrics": list(rules)}), view_handle(view))


def test_gpu_utilisation_above_threshold_rejects_nodes_for_gpu_pods_only():
    t = make_table(["g1", "g2", "g3"])
    view = view_of((GPU_QUERY, "Hostname"), {"g1": 0.95, "g2": 0.5, "g3": 0.9})
    pl = plugin(view, gpu_rule())
    skipped, got = run(pl, t, make_pod(gpus=1))
    assert not skipped
    assert got == {"g1": ["node(s) had gpu-util 0.95 above the 0.9 threshold"], "g2": None,
                   "g3": None}  # 0.9 is not above 0.9
    skipped, _ = run(pl, t, make_pod(gpus=0))
    assert skipped  # the rule is for pods requesting nvidia.com/gpu


def test_reject_below_and_a_band():
    key = ("node_disk_free_ratio", "instance")
    t = make_table(["a", "b", "c"])
    view = view_of(key, {"a": 0.05, "b": 0.5, "c": 0.97})
    pl = plugin(view, {"name": "disk-free", "query": key[0], "rejectBelow": 0.1, "rejectAbove": 0.95})
    _, got = run(pl, t, make_pod())
    assert got == {"a": ["node(s) had disk-free 0.05 below the 0.1 threshold"], "b": None,
                   "c": ["node(s) had disk-free 0.97 above the 0.95 threshold"]}


def test_nodes_with_equal_shown_values_share_a_reason():
    key = ("q", "instance")
    t = make_table(["a", "b", "c"])
    pl = plugin(view_of(key, {"a": 0.951, "b": 0.9512, "c": 0.99}), {"name": "m", "query": "q", "rejectAbove": 0.9})
    res = pl.filter(CycleState(), make_pod(), t, np.arange(3))
    assert sorted((r, int(m.sum())) for r, m in res.reasons) == [
        ("node(s) had m 0.951 above the 0.9 threshold", 2), ("node(s) had m 0.99 above the 0.9 threshold", 1)]


@pytest.mark.parametrize("mode,expected", [
    ("Neutral", None),
    ("FallbackToRequests", None),
    ("Exclude", ["node(s) had no fresh gpu-util metric"]),
])
def test_missing_and_stale_values(mode, expected):
    t = make_table(["fresh", "stale", "missing"])
    view = MetricsView(lambda: NOW)
    view.publish({(GPU_QUERY, "Hostname"): {"fresh": (0.1, NOW), "stale": (0.99, NOW - 300)}},
                 now=NOW, ttl=60, available=True)
    _, got = run(plugin(view, gpu_rule(onMissingMetrics=mode)), t, make_pod(gpus=1))
    # the stale 0.99 is not trusted either way: it is never compared to the threshold
    assert got == {"fresh": None, "stale": expected, "missing": expected}


def test_several_rules_each_reject_with_their_own_reason():
    t = make_table(["a", "b"])
    view = MetricsView(lambda: NOW)
    view.publish({(GPU_QUERY, "Hostname"): {"a": (0.95, NOW), "b": (0.1, NOW)},
                  ("temp", "instance"): {"a": (90.0, NOW), "b": (95.0, NOW)}}, now=NOW, ttl=60, available=True)
    pl = plugin(view, gpu_rule(), {"name": "temperature", "query": "temp", "rejectAbove": 85})
    _, got = run(pl, t, make_pod(gpus=1))
    assert got == {"a": ["node(s) had gpu-util 0.95 above the 0.9 threshold",
                         "node(s) had temperature 90 above the 85 threshold"],
                   "b": ["node(s) had temperature 95 above the 85 threshold"]}


def test_describe_and_metric_queries():
    t = make_table(["g1", "g2"])
    view = view_of((GPU_QUERY, "Hostname"), {"g1": 0.5}, age=2.0)
    pl = plugin(view, gpu_rule())
    state = CycleState()
    pl.pre_filter(state, make_pod(gpus=1), t)
    assert pl.describe(state, make_pod(gpus=1), t, np.array([0, 1])) == [
        {"gpu-util": {"state": "fresh", "age": 2.0, "value": 0.5}},
        {"gpu-util": {"state": "missing", "age": None}}]
    assert all(type(d["gpu-util"]["value"]) is float for d in pl.describe(state, make_pod(gpus=1), t, np.array([0])))
    state = CycleState()
    assert pl.describe(state, make_pod(), t, np.array([0])) is None  # not a GPU pod
    assert MetricThreshold.metric_queries(pl.args) == [(GPU_QUERY, "Hostname")]


@pytest.mark.parametrize("args,error", [
    ({"metrics": []}, "plugins[0].args.metrics: Required value: must have at least 1 item(s)"),
    ({"metrics": [{"name": "m", "query": "q"}]}, "plugins[0].args.metrics[0].rejectAbove: Required value"),
    ({"metrics": [{"name": "m", "query": "q", "rejectAbove": 1, "rejectBelow": 2}]},
     "plugins[0].args.metrics[0].rejectBelow: Invalid value: 2: above rejectAbove"),
    ({"metrics": [{"name": "m", "query": "q", "rejectAbove": 1}, {"name": "m", "query": "r", "rejectAbove": 1}]},
     "plugins[0].args.metrics[1].name: Duplicate value: \"m\""),
    ({"metrics": [{"name": "m", "query": "", "rejectAbove": 1}]},
     "plugins[0].args.metrics[0].query: Required value"),
    ({"metrics": [{"name": "bad name", "query": "q", "rejectAbove": 1}]},
     "plugins[0].args.metrics[0].name: Invalid value: \"bad name\": must match the regular expression"),
])
def test_args_validation(args, error):
    with pytest.raises(ChainError) as e:
        build_chain({"plugins": [{"name": "MetricThreshold", "args": args}]}, default_registry())
    assert any(x.startswith(error) for x in e.value.errors), e.value.errors


# ------------------------------------------------------------------ events
def test_events_to_register_metrics_refresh_and_node_add_without_hints():
    # a new publication may change any node's verdict, and a new node may pass: both always queue
    pl = plugin(None, gpu_rule(rejectAbove=0.9))
    assert registered(pl) == [(Resource.METRICS, ActionType.UPDATE), (Resource.NODE, ActionType.ADD)]
    assert all(r.hint is None for r in pl.events_to_register())
    assert hint(pl, METRICS_REFRESH.resource, METRICS_REFRESH.action, make_pod(), None, "policy") == QUEUE
    assert hint(pl, Resource.NODE, ActionType.ADD, make_pod(), None, node("x")) == QUEUE


# ------------------------------------------------------------------ args: every field checked
def rule(**kw):
    return {"name": "m", "query": "q", "rejectAbove": 1, **kw}


@pytest.mark.parametrize("args, path, detail", [
    ({"metrics": [rule(rejectAbove=float("nan"))]}, "metrics[0].rejectAbove", "must be a finite number"),
    ({"metrics": [rule(rejectBelow=float("-inf"))]}, "metrics[0].rejectBelow", "must be a finite number"),
    ({"metrics": [rule(rejectAbove="0.9")]}, "metrics[0].rejectAbove", 'Invalid value: "0.9": must be a number'),
    ({"metrics": [rule(name="x" * 64)]}, "metrics[0].name", "Too long: may not be more than 63 bytes"),
    ({"metrics": [rule(name="gpu util")]}, "metrics[0].name", "must match the regular expression"),
    ({"metrics": [rule(query="x" * 4097)]}, "metrics[0].query", "Too long: may not be more than 4096 bytes"),
    ({"metrics": [rule(nodeLabel="Host-name")]}, "metrics[0].nodeLabel", "must be a Prometheus label name"),
    ({"metrics": [rule(podsRequesting=["nvidia.com/gpu", "bad resource"])]}, "metrics[0].podsRequesting[1]",
     'Invalid value: "bad resource": name part must consist of'),
    ({"metrics": [rule(podsRequesting=[f"r{i}" for i in range(17)])]}, "metrics[0].podsRequesting",
     "Too many: 17: must have at most 16 items"),
    ({"metrics": [rule(onMissingMetrics="Drop")]}, "metrics[0].onMissingMetrics", 'Unsupported value: "Drop"'),
    ({"metrics": [rule(name=f"m{i}") for i in range(17)]}, "metrics", "Too many: 17: must have at most 16 items"),
    ({"metrics": [rule(), rule(query="r"), rule(query="s")]}, "metrics[2].name", 'Duplicate value: "m"'),
    ({"metrics": [rule(prefer="Lower")]}, "metrics[0].prefer", "Extra inputs are not permitted"),
    ({"metrics": "gpu"}, "metrics", "must be a list"),
])
def test_args_refused_with_the_field(args, path, detail):
    refused("MetricThreshold", args, path, detail)
