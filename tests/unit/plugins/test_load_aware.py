"""LoadAware: thresholds and reasons, headroom score, in-flight estimates (herd protection),
onMissingMetrics modes, explain details, args validation. Arithmetic in the comments."""

from __future__ import annotations

import random

import numpy as np
import pytest

from policy_scheduler.policy.chain import ChainError, build_chain
from policy_scheduler.plugins import default_registry
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.metricview import MetricsView, estimate_parts
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.cycle.schedule import schedule_one
from policy_scheduler.plugins.load_aware import PLUGIN, LoadAware

from policy_scheduler.framework.events import METRICS_REFRESH, ActionType, Resource

from support.kit import QUEUE, arg_errors, hint, node, refused, registered
from support.handles import view_handle

GI = 1024 ** 3
NOW = 1000.0
TTL = 60.0


def make_table(names, cpu="4", memory="8Gi"):
    t = NodeTable()
    for n in names:
        t.upsert_node({"metadata": {"name": n}, "status": {"allocatable": {"cpu": cpu, "memory": memory,
                                                                           "pods": "110"}}})
    return t


def make_pod(name="p", requests=None, limits=None):
    res = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    return parse_pod({"metadata": {"name": name, "namespace": "ns"},
                      "spec": {"containers": [{"name": "c", "image": "x", "resources": res}]}})


def make_view(usage, *, age=0.0, clock=None):
    """usage: node -> (cpu share, memory share); samples ``age`` seconds old at NOW."""
    view = MetricsView(clock or (lambda: NOW))
    cpu_key, mem_key = LoadAware.Args.model_validate({}).queries()
    view.publish({cpu_key: {n: (c, NOW - age) for n, (c, _) in usage.items()},
                  mem_key: {n: (m, NOW - age) for n, (_, m) in usage.items()}},
                 now=NOW, ttl=TTL, available=True)
    return view


def plugin(view, **args):
    return PLUGIN(PLUGIN.Args.model_validate(args), view_handle(view))


def filter_all(pl, table, pod=None):
    rows = np.arange(table.n)
    res = pl.filter(CycleState(), pod or make_pod(), table, rows)
    reasons = {}
    for i, name in enumerate(table.names):
        reasons[name] = sorted(r for r, m in res.reasons if m[i]) if not res.passed[i] else None
    return reasons


def scores(pl, table, pod=None):
    rows = np.arange(table.n)
    return dict(zip(table.names, pl.score(CycleState(), pod or make_pod(), table, rows).tolist()))


# ------------------------------------------------------------------ filter
def test_filter_rejects_nodes_above_the_thresholds_naming_metric_and_threshold():
    t = make_table(["ok", "hot-cpu", "hot-mem", "hot-both", "edge", "full"])
    view = make_view({"ok": (0.5, 0.5), "hot-cpu": (0.85, 0.5), "hot-mem": (0.5, 0.95),
                      "hot-both": (0.93, 0.99), "edge": (0.8, 0.9), "full": (1.2, 0.1)})
    got = filter_all(plugin(view), t)  # defaults: cpu 80%, memory 90%
    assert got == {
        "ok": None,
        "hot-cpu": ["node(s) had cpu usage above the 80% threshold"],
        "hot-mem": ["node(s) had memory usage above the 90% threshold"],
        "hot-both": ["node(s) had cpu usage above the 80% threshold",
                     "node(s) had memory usage above the 90% threshold"],
        "edge": None,  # exactly at the threshold: not above
        "full": ["node(s) had cpu usage above the 80% threshold"],
    }


def test_nodes_share_reasons_so_the_histogram_aggregates():
    t = make_table(["a", "b", "c", "d"])
    pl = plugin(make_view({"a": (0.91, 0.1), "b": (0.97, 0.1), "c": (0.83, 0.95), "d": (0.1, 0.1)}))
    res = pl.filter(CycleState(), make_pod(), t, np.arange(4))
    assert res.passed.tolist() == [False, False, False, True]
    hist = {}
    for r, m in res.reasons:
        hist[r] = hist.get(r, 0) + int(m.sum())
    assert hist == {"node(s) had cpu usage above the 80% threshold": 3,
                    "node(s) had memory usage above the 90% threshold": 1}


def test_zero_threshold_turns_a_check_off():
    t = make_table(["a"])
    got = filter_all(plugin(make_view({"a": (0.99, 0.99)}), usageThresholds={"cpu": 0, "memory": 0}), t)
    assert got == {"a": None}
    got = filter_all(plugin(make_view({"a": (0.99, 0.5)}), usageThresholds={"cpu": 95}), t)
    assert got == {"a": ["node(s) had cpu usage above the 95% threshold"]}


def test_filter_counts_inflight_pods():
    t = make_table(["a"])  # 4 cores
    view = make_view({"a": (0.7, 0.5)})
    pl = plugin(view)
    assert filter_all(pl, t) == {"a": None}
    # a pod with a 1-core limit placed since the sample: 0.7 + 1000/4000 = 0.95 > 0.8
    view.add_inflight("ns/x", "a", estimate_parts(make_pod(limits={"cpu": "1"})), NOW)
    assert filter_all(pl, t) == {"a": ["node(s) had cpu usage above the 80% threshold"]}
    view.remove_inflight("ns/x")
    assert filter_all(pl, t) == {"a": None}


# ------------------------------------------------------------------ score
@pytest.mark.parametrize("usage,weights,expected", [
    ((0.25, 0.5), {}, (75 + 50) // 2),  # 62
    ((0.25, 0.5), {"cpu": 2, "memory": 1}, (2 * 75 + 50) // 3),  # 66
    ((0.25, 0.5), {"cpu": 1, "memory": 0}, 75),
    ((0.123, 0.456), {}, (87 + 54) // 2),  # floor(87.7) = 87, floor(54.4) = 54 -> 70
    ((1.2, 0.0), {}, (0 + 100) // 2),  # over 100% clips to 0
])
def test_score_is_weighted_headroom(usage, weights, expected):
    t = make_table(["a"])
    pl = plugin(make_view({"a": usage}), resourceWeights=weights, usageThresholds={"cpu": 0, "memory": 0})
    assert scores(pl, t) == {"a": expected}


@pytest.mark.parametrize("resources,cpu_share", [
    ({"limits": {"cpu": "1"}}, 1000 / 4000),  # the limit
    ({"requests": {"cpu": "400m"}}, 0.85 * 400 / 4000),  # request x 85%: 340m
    ({}, 250 / 4000),  # neither: the 250m default
])
def test_inflight_estimate_lowers_the_score(resources, cpu_share):
    t = make_table(["a"])
    view = make_view({"a": (0.2, 0.0)})
    pl = plugin(view, resourceWeights={"cpu": 1, "memory": 0})
    assert scores(pl, t) == {"a": 80}
    view.add_inflight("ns/x", "a", estimate_parts(make_pod(**resources)), NOW)
    want = int(np.floor((1 - (0.2 + cpu_share)) * 100))  # 55, 71, 73
    assert scores(pl, t) == {"a": want}
    # the update made when the pod was placed and a fresh build from the view agree
    assert scores(plugin(view, resourceWeights={"cpu": 1, "memory": 0}), t) == {"a": want}


def test_estimator_args():
    t = make_table(["a"])
    view = make_view({"a": (0.0, 0.0)})
    pl = plugin(view, resourceWeights={"cpu": 1, "memory": 0}, estimatedScalingFactors={"cpu": 50},
                estimatedDefaults={"cpu": "1"})
    view.add_inflight("ns/x", "a", estimate_parts(make_pod(requests={"cpu": "2"})), NOW)  # 2000m x 50% = 1000m
    view.add_inflight("ns/y", "a", estimate_parts(make_pod()), NOW)  # default 1 core
    assert scores(pl, t) == {"a": 50}  # (1 - 2000/4000) * 100


def test_herd_protection_spreads_a_burst():
    """Two nodes, a at 10% cpu and b at 40%; cpu weight only. Each pod has a 500m limit: +0.125 of
    a 4-core node. Score = floor((1 - cpu) * 100):
      p1: a 0.100 -> 90, b 0.400 -> 60: a      p2: a 0.225 -> 77: a      p3: a 0.350 -> 64/65: a
      p4: a 0.475 -> 52 < 60: b                p5: a 52, b 0.525 -> 47: a
      p6: a 0.600 -> 39/40 < 47: b
    Without the in-flight estimates every pod would go to a."""
    t = make_table(["a", "b"])
    view = make_view({"a": (0.1, 0.5), "b": (0.4, 0.5)})
    args = {"usageThresholds": {"cpu": 0, "memory": 0}, "resourceWeights": {"cpu": 1, "memory": 0}}
    chain = build_chain({"plugins": [{"name": "LoadAware", "args": args}]}, default_registry(), handle=view_handle(view))
    placed = []
    for i in range(6):
        pod = make_pod(f"p{i}", limits={"cpu": "500m"})
        d = schedule_one(chain, pod, t, random.Random(0))
        placed.append(d.node)
        t.add_pod(pod, d.node, assumed=True)
        view.add_inflight(pod.key, d.node, estimate_parts(pod), NOW)
    assert placed == ["a", "a", "a", "b", "a", "b"]


# ------------------------------------------------------------------ missing / stale metrics
def _mixed_view():
    # "fresh" has samples; "stale" only a sample 120 s old (ttl 60); "missing" none
    view = MetricsView(lambda: NOW)
    cpu_key, mem_key = LoadAware.Args.model_validate({}).queries()
    view.publish({cpu_key: {"fresh": (0.5, NOW), "stale": (0.1, NOW - 120)},
                  mem_key: {"fresh": (0.5, NOW), "stale": (0.1, NOW - 120)}}, now=NOW, ttl=TTL, available=True)
    return view


@pytest.mark.parametrize("mode,filtered,score_other", [
    ("Neutral", None, 50),
    ("Exclude", ["node(s) had no fresh cpu and memory usage metrics"], 0),
    # LeastAllocated: pod 1 cpu / 2Gi on 4 cores / 8Gi: cpu (4000-1000)*100//4000 = 75,
    # memory (8Gi-2Gi)*100//8Gi = 75 -> 75
    ("FallbackToRequests", None, 75),
])
def test_on_missing_metrics(mode, filtered, score_other):
    t = make_table(["fresh", "stale", "missing"])
    pl = plugin(_mixed_view(), onMissingMetrics=mode)
    pod = make_pod(requests={"cpu": "1", "memory": "2Gi"})
    got = filter_all(pl, t, pod)
    assert got == {"fresh": None, "stale": filtered, "missing": filtered}
    assert scores(pl, t, pod) == {"fresh": 50, "stale": score_other, "missing": score_other}


def test_no_source_at_all_is_missing_everywhere():
    t = make_table(["a", "b"])
    t.add_pod(make_pod("big", requests={"cpu": "2", "memory": "4Gi"}), "b")
    pl = plugin(None, onMissingMetrics="FallbackToRequests")
    assert filter_all(pl, t) == {"a": None, "b": None}
    # pod without requests: non-zero defaults 100m / 200Mi
    # a: cpu (4000-100)*100//4000 = 97, mem (8192-200)*100//8192 = 97 -> 97
    # b: cpu (4000-2100)*100//4000 = 47, mem (8192-4296)*100//8192 = 47 -> 47
    assert scores(pl, t) == {"a": 97, "b": 47}


def test_metrics_resume_after_a_new_publication():
    t = make_table(["a"])
    view = make_view({"a": (0.5, 0.5)}, age=120)  # stale
    pl = plugin(view, onMissingMetrics="Neutral")
    assert scores(pl, t) == {"a": 50}
    cpu_key, mem_key = pl.cpu_key, pl.mem_key
    view.publish({cpu_key: {"a": (0.1, NOW)}, mem_key: {"a": (0.3, NOW)}}, now=NOW, ttl=TTL, available=True)
    assert scores(pl, t) == {"a": (90 + 70) // 2}


# ------------------------------------------------------------------ explain
def test_describe_reports_value_inflight_age_and_state():
    t = make_table(["a", "m"])
    view = make_view({"a": (0.25, 0.5)}, age=3.0, clock=lambda: NOW)
    view.add_inflight("ns/x", "a", estimate_parts(make_pod(limits={"cpu": "1", "memory": "1Gi"})), NOW)
    pl = plugin(view, onMissingMetrics="Neutral")
    d = pl.describe(CycleState(), make_pod(), t, np.array([0, 1]))
    assert d[0] == {"cpu": {"state": "fresh", "age": 3.0, "value": 0.25, "inFlight": 0.25},
                    "memory": {"state": "fresh", "age": 3.0, "value": 0.5, "inFlight": 0.125},
                    "scoredBy": "usage"}
    assert d[1] == {"cpu": {"state": "missing", "age": None}, "memory": {"state": "missing", "age": None},
                    "scoredBy": "Neutral"}


def plain(v) -> bool:
    """Only JSON's own types (the decision annotation's serializer rejects numpy scalars)."""
    if isinstance(v, dict):
        return all(type(k) is str and plain(x) for k, x in v.items())
    if isinstance(v, list):
        return all(plain(x) for x in v)
    return v is None or type(v) in (str, int, float, bool)


def test_details_are_plain_json_values():
    t = make_table(["a", "m"])
    view = make_view({"a": (0.25, 0.5)}, age=3.0)
    view.add_inflight("ns/x", "a", estimate_parts(make_pod(limits={"cpu": "1"})), NOW)
    d = plugin(view, onMissingMetrics="Neutral").describe(CycleState(), make_pod(), t, np.array([0, 1]))
    assert plain(d) and not plain({"x": np.float64(1.0)})


def test_decision_carries_details_for_the_top_nodes():
    t = make_table(["a", "b"])
    view = make_view({"a": (0.1, 0.1), "b": (0.5, 0.5)})
    chain = build_chain({"plugins": [{"name": "LoadAware"}]}, default_registry(), handle=view_handle(view))
    d = schedule_one(chain, make_pod(), t, random.Random(0))
    assert d.node == "a"
    assert [s.node for s in d.top] == ["a", "b"]
    assert d.top[0].details["LoadAware"]["cpu"]["value"] == 0.1
    assert d.top[1].details["LoadAware"]["memory"]["value"] == 0.5


# ------------------------------------------------------------------ args
def test_default_queries_read_node_exporter_series():
    cpu, mem = PLUGIN.Args.model_validate({"nodeLabel": "node", "rateWindow": "30s"}).queries()
    assert cpu == ('1 - avg by (node) (rate(node_cpu_seconds_total{mode="idle"}[30s]))', "node")
    assert mem == ("1 - max by (node) (node_memory_MemAvailable_bytes) / max by (node) "
                   "(node_memory_MemTotal_bytes)", "node")
    own = PLUGIN.Args.model_validate({"cpuQuery": "my_cpu", "memoryQuery": "my_mem"}).queries()
    assert own == (("my_cpu", "instance"), ("my_mem", "instance"))
    assert LoadAware.metric_queries(PLUGIN.Args.model_validate({})) == list(PLUGIN.Args.model_validate({}).queries())


@pytest.mark.parametrize("args,error", [
    ({"usageThresholds": {"cpu": 120}},
     "plugins[0].args.usageThresholds.cpu: Invalid value: 120: must be a percentage in [0, 100]"),
    ({"nodeLabel": "node-name"},
     "plugins[0].args.nodeLabel: Invalid value: \"node-name\": must be a Prometheus label name"),
    ({"rateWindow": "1 minute"},
     "plugins[0].args.rateWindow: Invalid value: \"1 minute\": must be a PromQL duration"),
    ({"resourceWeights": {"cpu": 0, "memory": 0}},
     "plugins[0].args.resourceWeights: Invalid value: map[cpu:0 memory:0]: at least one weight must be positive"),
    ({"onMissingMetrics": "Ignore"}, "plugins[0].args.onMissingMetrics: Unsupported value: \"Ignore\": "
                                     "supported values: \"Neutral\", \"Exclude\", \"FallbackToRequests\""),
    ({"estimatedDefaults": {"cpu": "lots"}}, "plugins[0].args.estimatedDefaults.cpu: Invalid value: \"lots\""),
    ({"threshold": 3}, "plugins[0].args.threshold: Extra inputs are not permitted"),
])
def test_args_validation_names_the_field(args, error):
    with pytest.raises(ChainError) as e:
        build_chain({"plugins": [{"name": "LoadAware", "args": args}]}, default_registry())
    assert any(x.startswith(error) for x in e.value.errors), e.value.errors


# ------------------------------------------------------------------ reserve / unreserve
def test_reserve_adds_the_inflight_estimate_the_next_score_sees():
    t = make_table(["a", "b"])  # 4 cores each
    view = make_view({"a": (0.2, 0.0), "b": (0.2, 0.0)})
    pl = plugin(view, resourceWeights={"cpu": 1, "memory": 0})
    assert scores(pl, t) == {"a": 80, "b": 80}
    pod = make_pod("x", limits={"cpu": "1"})
    assert pl.reserve(CycleState(), pod, "a").is_success
    # 0.2 + 1000m / 4000m = 0.45 on a only: floor(55) (b untouched)
    assert scores(pl, t) == {"a": 55, "b": 80}
    node, placed_at, _ = view.records["ns/x"]
    assert (node, placed_at) == ("a", NOW)  # placed at the view's clock, the samples' time base
    # a fresh plugin built from the view agrees with the row updated in place
    assert scores(plugin(view, resourceWeights={"cpu": 1, "memory": 0}), t) == {"a": 55, "b": 80}
    # and Filter counts it too: 0.2 + 0.25 + another 1-core pod = 0.7; with 2 more: 0.95 > 0.8
    for name in ("y", "z"):
        pl.reserve(CycleState(), make_pod(name, limits={"cpu": "1"}), "a")
    assert filter_all(pl, t) == {"a": ["node(s) had cpu usage above the 80% threshold"], "b": None}


def test_unreserve_removes_it_and_twice_is_harmless():
    t = make_table(["a"])
    view = make_view({"a": (0.2, 0.0)})
    pl = plugin(view, resourceWeights={"cpu": 1, "memory": 0})
    pod = make_pod("x", limits={"cpu": "1"})
    pl.reserve(CycleState(), pod, "a")
    assert scores(pl, t) == {"a": 55}
    pl.unreserve(CycleState(), pod, "a")
    assert scores(pl, t) == {"a": 80} and "ns/x" not in view.records
    pl.unreserve(CycleState(), pod, "a")  # again: nothing left to remove, nothing goes negative
    assert scores(pl, t) == {"a": 80}
    assert not view.acc.any()
    # unreserve of a plugin whose reserve did not run for the pod (another Reserve plugin failed first)
    pl.unreserve(CycleState(), make_pod("never"), "a")
    assert scores(pl, t) == {"a": 80}


def test_unreserve_leaves_a_reservation_on_another_node():
    t = make_table(["a", "b"])
    view = make_view({"a": (0.2, 0.0), "b": (0.2, 0.0)})
    pl = plugin(view, resourceWeights={"cpu": 1, "memory": 0})
    pod = make_pod("x", limits={"cpu": "1"})
    pl.reserve(CycleState(), pod, "b")
    pl.unreserve(CycleState(), pod, "a")  # a stale undo for another node
    assert scores(pl, t) == {"a": 80, "b": 55}


def test_reserve_without_a_metric_source_does_nothing():
    pl = plugin(None)
    assert pl.reserve(CycleState(), make_pod("x"), "a").is_success
    pl.unreserve(CycleState(), make_pod("x"), "a")


def test_load_aware_is_at_the_reserve_point_of_its_chain():
    chain = build_chain({"plugins": [{"name": "LoadAware"}]}, default_registry(), view_handle(None))
    assert [p.NAME for p in chain.reserve] == ["LoadAware"]


# ------------------------------------------------------------------ events
def test_events_to_register_metrics_refresh_and_node_add_without_hints():
    # a new publication may change any node's verdict, and a new node may pass: both always queue
    pl = plugin(None)
    assert registered(pl) == [(Resource.METRICS, ActionType.UPDATE), (Resource.NODE, ActionType.ADD)]
    assert all(r.hint is None for r in pl.events_to_register())
    assert hint(pl, METRICS_REFRESH.resource, METRICS_REFRESH.action, make_pod(), None, "policy") == QUEUE
    assert hint(pl, Resource.NODE, ActionType.ADD, make_pod(), None, node("x")) == QUEUE


# ------------------------------------------------------------------ args: every field checked
@pytest.mark.parametrize("args, path, detail", [
    ({"usageThresholds": {"cpu": 100.5}}, "usageThresholds.cpu", "Invalid value: 100.5: must be a percentage in [0, 100]"),
    ({"usageThresholds": {"memory": -1}}, "usageThresholds.memory", "Invalid value: -1: must be a percentage"),
    ({"usageThresholds": {"cpu": float("nan")}}, "usageThresholds.cpu", "must be a finite number"),
    ({"usageThresholds": {"cpu": float("inf")}}, "usageThresholds.cpu", "must be a finite number"),
    ({"usageThresholds": {"cpu": "80"}}, "usageThresholds.cpu", 'Invalid value: "80": must be a number'),
    ({"usageThresholds": {"gpu": 80}}, "usageThresholds.gpu", "Extra inputs are not permitted"),
    ({"estimatedScalingFactors": {"cpu": 101}}, "estimatedScalingFactors.cpu", "must be a percentage in [0, 100]"),
    ({"resourceWeights": {"cpu": 101}}, "resourceWeights.cpu", "Invalid value: 101: must be less than or equal to 100"),
    ({"resourceWeights": {"memory": -1}}, "resourceWeights.memory", "must be greater than or equal to 0"),
    ({"resourceWeights": {"cpu": 0, "memory": 0}}, "resourceWeights", "at least one weight must be positive"),
    ({"onMissingMetrics": "neutral"}, "onMissingMetrics", 'Unsupported value: "neutral"'),
    ({"nodeLabel": "instance\n"}, "nodeLabel", "must be a Prometheus label name"),
    ({"nodeLabel": "1instance"}, "nodeLabel", "must be a Prometheus label name"),
    ({"nodeLabel": "x" * 129}, "nodeLabel", "Too long: may not be more than 128 bytes"),
    ({"rateWindow": "1m\n"}, "rateWindow", "must be a PromQL duration"),
    ({"rateWindow": "5"}, "rateWindow", "must be a PromQL duration"),
    ({"rateWindow": "1" * 65}, "rateWindow", "Too long: may not be more than 64 bytes"),
    ({"cpuQuery": ""}, "cpuQuery", "Required value"),
    ({"memoryQuery": "x" * 4097}, "memoryQuery", "Too long: may not be more than 4096 bytes"),
    ({"estimatedDefaults": {"memory": "1Zi"}}, "estimatedDefaults.memory", 'Invalid value: "1Zi"'),
    ({"estimatedDefaults": {"cpu": "1" * 65}}, "estimatedDefaults.cpu", "Too long"),
])
def test_args_refused_with_the_field(args, path, detail):
    refused("LoadAware", args, path, detail)


def test_args_report_every_problem():
    errs = arg_errors("LoadAware", {"usageThresholds": {"cpu": 120, "memory": 200},
                                    "estimatedDefaults": {"cpu": "x", "memory": "y"}})
    assert [e.split(": ")[0] for e in errs] == ["usageThresholds.cpu", "usageThresholds.memory",
                                               "estimatedDefaults.cpu", "estimatedDefaults.memory"]
