"""NodeResourcesFit: args defaulting/validation, Filter verdicts and reasons, Score strategies.

Expected numbers follow upstream noderesources (fit.go, least_allocated.go, most_allocated.go,
requested_to_capacity_ratio.go, helper/shape_score.go), arithmetic in the comments.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.framework.model.resources import broken_linear, go_div, is_scalar_resource_name
from policy_scheduler.plugins.node_resources_fit import PLUGIN

from support import kit
from policy_scheduler.framework.events import ActionType, Resource
from support.kit import QUEUE, SKIP, changed, hint, node, registered
from support.handles import overcommit_handle

MI = 1024 * 1024


def make_node(name, alloc, pods="110"):
    allocatable = {"pods": pods, **alloc} if pods is not None else dict(alloc)
    return {"metadata": {"name": name}, "status": {"allocatable": allocatable}}


def make_pod(name="p", requests=None, *, containers=None, init=None, overhead=None):
    """``requests``: one container with these requests (None: one container without requests)."""
    if containers is None:
        containers = [requests]
    spec = {"containers": [{"name": f"c{i}", "image": "busybox",
                            **({"resources": {"requests": r}} if r is not None else {})}
                           for i, r in enumerate(containers)]}
    if init:
        spec["initContainers"] = [{"name": f"i{i}", "image": "busybox", "resources": {"requests": r},
                                   **({"restartPolicy": "Always"} if sidecar else {})}
                                  for i, (r, sidecar) in enumerate(init)]
    if overhead:
        spec["overhead"] = overhead
    return parse_pod({"metadata": {"name": name, "namespace": "default"}, "spec": spec})


make_table = kit.table


def plugin(args=None):
    return kit.instance(PLUGIN, args)


def run_filter(pl, pod, table, rows=None):
    rows = np.arange(table.n) if rows is None else np.asarray(rows)
    state = CycleState()
    st, result = pl.pre_filter(state, pod, table)
    assert st.is_success and result is None
    return pl.filter(state, pod, table, rows)


def verdicts(res, n):
    """Per batch position: None if passed, else (code, [reasons])."""
    out = []
    for i in range(n):
        if res.passed[i]:
            out.append(None)
            continue
        code = Code(int(res.code[i])) if isinstance(res.code, np.ndarray) else res.code
        out.append((code, [r for r, m in res.reasons if m[i]]))
    return out


def run_score(pl, pod, table, rows=None):
    rows = np.arange(table.n) if rows is None else np.asarray(rows)
    state = CycleState()
    st = pl.pre_score(state, pod, table, rows)
    assert st.is_success
    scores = pl.score(state, pod, table, rows)
    assert scores.dtype == np.int64
    return scores.tolist()


U = Code.UNSCHEDULABLE
UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


# ---------------------------------------------------------------------------- args
def test_args_defaults():
    a = PLUGIN.Args.model_validate({})
    assert a.scoring_strategy.type == "LeastAllocated"
    assert [(r.name, r.weight) for r in a.scoring_strategy.resources] == [("cpu", 1), ("memory", 1)]
    assert a.ignored_resources == [] and a.ignored_resource_groups == []


def test_args_camel_case_and_weight_defaulting():
    a = PLUGIN.Args.model_validate({
        "ignoredResources": ["example.com/foo"],
        "ignoredResourceGroups": ["example.org"],
        "scoringStrategy": {"type": "MostAllocated",
                            "resources": [{"name": "cpu"}, {"name": "memory", "weight": 0},
                                          {"name": "nvidia.com/gpu", "weight": 5}]},
    })
    assert a.ignored_resources == ["example.com/foo"]
    assert a.ignored_resource_groups == ["example.org"]
    assert a.scoring_strategy.type == "MostAllocated"
    assert [(r.name, r.weight) for r in a.scoring_strategy.resources] == [
        ("cpu", 1), ("memory", 1), ("nvidia.com/gpu", 5)]


def test_args_empty_resources_get_defaults():
    a = PLUGIN.Args.model_validate({"scoringStrategy": {"type": "MostAllocated", "resources": []}})
    assert [(r.name, r.weight) for r in a.scoring_strategy.resources] == [("cpu", 1), ("memory", 1)]


RTCR = "RequestedToCapacityRatio"


@pytest.mark.parametrize("args, message", [
    ({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]}},
     "scoringStrategy.resources[0].weight"),
    ({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": -1}]}},
     "resource weight of cpu not in valid range (0, 100]"),
    ({"scoringStrategy": {"type": "Balanced"}}, "scoringStrategy.type: Unsupported value"),
    # upstream does not default the type of a given strategy
    ({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 1}]}}, "scoringStrategy.type"),
    ({"scoringStrategy": {"type": RTCR}}, "scoringStrategy.requestedToCapacityRatio: Required value"),
    ({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {"shape": []}}},
     "at least one point must be specified"),
    ({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {
        "shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]}}},
     "shape[1].utilization: Invalid value: 50: values must be sorted in increasing order"),
    ({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {
        "shape": [{"utilization": 60, "score": 1}, {"utilization": 10, "score": 2}]}}},
     "values must be sorted in increasing order"),
    ({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {
        "shape": [{"utilization": 101, "score": 1}]}}},
     "shape[0].utilization: Invalid value: 101: not in valid range [0, 100]"),
    ({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {
        "shape": [{"utilization": -1, "score": 1}]}}}, "not in valid range [0, 100]"),
    ({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {
        "shape": [{"utilization": 10, "score": 11}]}}},
     "shape[0].score: Invalid value: 11: not in valid range [0, 10]"),
    ({"scoringStrategy": {"type": "LeastAllocated", "requestedToCapacityRatio": {
        "shape": [{"utilization": 10, "score": 1}]}}},
     "requestedToCapacityRatio: Forbidden: must be nil when type is not RequestedToCapacityRatio"),
    ({"ignoredResourceGroups": ["example.com/foo"]}, "resource group name can't contain '/'"),
    ({"ignoredResources": ["-bad-"]}, "ignoredResources[0]"),
    ({"ignoredResources": ["Example.com/foo"]}, "ignoredResources[0]"),
    ({"ignoredResource": ["example.com/foo"]}, "ignoredResource"),  # unknown field
    ({"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "wieght": 1}]}}, "wieght"),
])
def test_args_invalid(args, message):
    with pytest.raises(ValidationError) as e:
        PLUGIN.Args.model_validate(args)
    assert message in str(e.value)


def test_args_valid_rtcr():
    a = PLUGIN.Args.model_validate({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {
        "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}}})
    assert [(p.utilization, p.score) for p in a.scoring_strategy.requested_to_capacity_ratio.shape] == [
        (0, 0), (100, 10)]


@pytest.mark.parametrize("name, scalar", [
    ("cpu", False), ("memory", False), ("ephemeral-storage", False), ("pods", False), ("foo", False),
    ("nvidia.com/gpu", True), ("example.com/foo", True), ("hugepages-2Mi", True),
    ("kubernetes.io/foo", True), ("attachable-volumes-csi-x", True), ("requests.example.com/x", False),
])
def test_scalar_resource_names(name, scalar):
    assert is_scalar_resource_name(name) is scalar


# ---------------------------------------------------------------------------- filter
NODE_10_20 = {"cpu": "10m", "memory": "20", "example.com/aaa": "5", "hugepages-2Mi": "5"}

FILTER_CASES = [
    # (id, pod, node allocatable, existing pods' requests, args, expected verdict)
    ("no requests always fits (node full)", make_pod(), NODE_10_20,
     [{"cpu": "10m", "memory": "20"}], None, None),
    ("cpu and memory both short, all reasons collected",
     make_pod(requests={"cpu": "1m", "memory": "1"}), NODE_10_20,
     [{"cpu": "10m", "memory": "20"}], None, (U, ["Insufficient cpu", "Insufficient memory"])),
    # init max {3m, 1} vs containers {1m, 1}: request 3m; 8m used -> 3 > 10-8
    ("init container cpu counted as max",
     make_pod(containers=[{"cpu": "1m", "memory": "1"}], init=[({"cpu": "3m", "memory": "1"}, False)]),
     NODE_10_20, [{"cpu": "8m", "memory": "19"}], None, (U, ["Insufficient cpu"])),
    # max(sum containers 1m, init max 3m) = 3m (not 4m); 7m used -> 3 <= 3
    ("init containers max not sum",
     make_pod(containers=[{"cpu": "1m", "memory": "1"}],
              init=[({"cpu": "3m", "memory": "1"}, False), ({"cpu": "2m", "memory": "1"}, False)]),
     NODE_10_20, [{"cpu": "7m", "memory": "19"}], None, None),
    # sidecar 2m runs next to the 1m container: 3m > 10-8
    ("sidecar requests are added",
     make_pod(containers=[{"cpu": "1m"}], init=[({"cpu": "2m"}, True)]),
     NODE_10_20, [{"cpu": "8m"}], None, (U, ["Insufficient cpu"])),
    ("equal edge case fits", make_pod(requests={"cpu": "5m", "memory": "5"}), NODE_10_20,
     [{"cpu": "5m", "memory": "15"}], None, None),
    ("memory short only", make_pod(requests={"cpu": "1m", "memory": "2"}), NODE_10_20,
     [{"cpu": "5m", "memory": "19"}], None, (U, ["Insufficient memory"])),
    # request 10 > allocatable 5: preemption cannot help
    ("extended resource above capacity is unresolvable",
     make_pod(requests={"cpu": "1m", "example.com/aaa": "10"}), NODE_10_20, [], None,
     (UU, ["Insufficient example.com/aaa"])),
    ("extended resource allocatable used up",
     make_pod(requests={"cpu": "1m", "example.com/aaa": "1"}), NODE_10_20,
     [{"example.com/aaa": "5"}], None, (U, ["Insufficient example.com/aaa"])),
    ("extended resource the node does not advertise",
     make_pod(requests={"example.com/bbb": "1"}), NODE_10_20, [], None,
     (UU, ["Insufficient example.com/bbb"])),
    ("ignored extended resource", make_pod(requests={"cpu": "1m", "example.com/bbb": "1"}), NODE_10_20, [],
     {"ignoredResources": ["example.com/bbb"]}, None),
    ("ignored resource group", make_pod(requests={"example.com/bbb": "1", "example.com/ccc": "1"}),
     NODE_10_20, [], {"ignoredResourceGroups": ["example.com"]}, None),
    # groups only apply to extended resources: kubernetes.io/ names are still checked
    ("ignored groups do not cover kubernetes.io resources",
     make_pod(requests={"example.com/bbb": "1", "kubernetes.io/something": "1"}),
     NODE_10_20, [], {"ignoredResourceGroups": ["example.com", "kubernetes.io"]},
     (UU, ["Insufficient kubernetes.io/something"])),
    ("zero extended request is not checked", make_pod(requests={"cpu": "1m", "example.com/zzz": "0"}),
     NODE_10_20, [], None, None),
    ("hugepages checked", make_pod(requests={"cpu": "1m", "hugepages-2Mi": "6"}), NODE_10_20, [], None,
     (UU, ["Insufficient hugepages-2Mi"])),
    # 1 + overhead 15 = 16 > 20 - 5
    ("overhead counted", make_pod(requests={"cpu": "1m", "memory": "1"}, overhead={"memory": "15"}),
     NODE_10_20, [{"cpu": "5m", "memory": "5"}], None, (U, ["Insufficient memory"])),
    ("overhead fits", make_pod(requests={"cpu": "1m", "memory": "1"}, overhead={"cpu": "3m", "memory": "13"}),
     NODE_10_20, [{"cpu": "5m", "memory": "5"}], None, None),
    ("ephemeral-storage above allocatable",
     make_pod(requests={"ephemeral-storage": "25"}), {**NODE_10_20, "ephemeral-storage": "20"}, [], None,
     (UU, ["Insufficient ephemeral-storage"])),
    ("ephemeral-storage fits",
     make_pod(requests={"ephemeral-storage": "10"}), {**NODE_10_20, "ephemeral-storage": "20"},
     [{"ephemeral-storage": "10"}], None, None),
    # the 100m / 200Mi defaults are for scoring only: 2 pods without requests use nothing here
    ("filter ignores the scoring defaults", make_pod(requests={"cpu": "10m", "memory": "20"}),
     NODE_10_20, [None, None], None, None),
    # all three kinds at once, in upstream's order; unresolvable because cpu 11m > 10m allocatable
    ("reason order cpu, memory, ephemeral, scalars; one unresolvable makes the node unresolvable",
     make_pod(requests={"cpu": "11m", "memory": "1", "ephemeral-storage": "1",
                        "hugepages-2Mi": "1", "example.com/aaa": "1"}),
     {**NODE_10_20, "ephemeral-storage": "1"},
     [{"memory": "20", "ephemeral-storage": "1", "hugepages-2Mi": "5", "example.com/aaa": "5"}], None,
     (UU, ["Insufficient cpu", "Insufficient memory", "Insufficient ephemeral-storage",
           "Insufficient example.com/aaa", "Insufficient hugepages-2Mi"])),
]


@pytest.mark.parametrize("pod, alloc, existing, args, want",
                         [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES])
def test_filter(pod, alloc, existing, args, want):
    table = make_table([make_node("n1", alloc)], [("n1", make_pod(requests=r)) for r in existing])
    columns = list(table.resources)
    res = run_filter(plugin(args), pod, table)
    assert verdicts(res, 1) == [want]
    assert table.resources == columns  # the snapshot is read, never extended


POD_LIMIT_CASES = [
    ("no requests, node full of pods", make_pod(), [None], None, (U, ["Too many pods"])),
    ("resources fit, no room for another pod", make_pod(requests={"cpu": "1m", "memory": "1"}),
     [{"cpu": "5m", "memory": "5"}], None, (U, ["Too many pods"])),
    ("too many pods comes first and joins other reasons",
     make_pod(requests={"cpu": "6m", "memory": "1"}), [{"cpu": "5m", "memory": "5"}], None,
     (U, ["Too many pods", "Insufficient cpu"])),
]


@pytest.mark.parametrize("pod, existing, args, want",
                         [c[1:] for c in POD_LIMIT_CASES], ids=[c[0] for c in POD_LIMIT_CASES])
def test_filter_pod_count(pod, existing, args, want):
    table = make_table([make_node("n1", NODE_10_20, pods="1")], [("n1", make_pod(requests=r)) for r in existing])
    assert verdicts(run_filter(plugin(args), pod, table), 1) == [want]


def test_filter_node_without_pods_allocatable_is_full():
    table = make_table([make_node("n1", NODE_10_20, pods=None)])
    assert verdicts(run_filter(plugin(), make_pod(), table), 1) == [(U, ["Too many pods"])]


def test_filter_batch_over_row_subset():
    nodes = [make_node("small", {"cpu": "1", "memory": "1Gi"}),
             make_node("big", {"cpu": "8", "memory": "16Gi"}),
             make_node("busy", {"cpu": "4", "memory": "8Gi"}),
             make_node("tiny", {"cpu": "100m", "memory": "1Gi"})]
    table = make_table(nodes, [("busy", make_pod(requests={"cpu": "3", "memory": "1Gi"}))])
    pod = make_pod(requests={"cpu": "2", "memory": "2Gi"})
    rows = [3, 2, 1]  # the runner passes surviving rows in any order
    res = run_filter(plugin(), pod, table, rows)
    assert verdicts(res, 3) == [
        (UU, ["Insufficient cpu", "Insufficient memory"]),  # tiny: 2 > 0.1 cpu and 2Gi > 1Gi allocatable
        (U, ["Insufficient cpu"]),                          # busy: 2 > 4 - 3, but 2 <= 4
        None,                                               # big
    ]
    assert verdicts(run_filter(plugin(), pod, table, [0]), 1) == [
        (UU, ["Insufficient cpu", "Insufficient memory"])]


def test_filter_empty_batch():
    table = make_table([make_node("n1", NODE_10_20)])
    res = run_filter(plugin(), make_pod(requests={"cpu": "1m"}), table, np.array([], dtype=np.int64))
    assert res.passed.shape == (0,)


# ---------------------------------------------------------------------------- score
# Nodes in upstream's score tests: cpu "4000" means 4000 cores = 4,000,000 millicores.
def upstream_nodes():
    return [make_node("node1", {"cpu": "4000", "memory": "10000"}),
            make_node("node2", {"cpu": "6000", "memory": "10000"})]


def test_least_allocated_upstream_case():
    table = make_table(upstream_nodes(), [("node1", make_pod(requests={"cpu": "2000", "memory": "4000"})),
                                          ("node2", make_pod(requests={"cpu": "1000", "memory": "2000"}))])
    pod = make_pod(requests={"cpu": "1000", "memory": "2000"})
    # node1: cpu (4000-3000)*100/4000 = 25, mem (10000-6000)*100/10000 = 40 -> 65/2 = 32
    # node2: cpu (6000-2000)*100/6000 = 66, mem (10000-4000)*100/10000 = 60 -> 126/2 = 63
    assert run_score(plugin(), pod, table) == [32, 63]


def test_most_allocated_upstream_case():
    table = make_table(upstream_nodes(), [("node1", make_pod(requests={"cpu": "2000", "memory": "4000"})),
                                          ("node2", make_pod(requests={"cpu": "1000", "memory": "2000"}))])
    pod = make_pod(requests={"cpu": "1000", "memory": "2000"})
    # node1: cpu 3000*100/4000 = 75, mem 6000*100/10000 = 60 -> 135/2 = 67
    # node2: cpu 2000*100/6000 = 33, mem 4000*100/10000 = 40 -> 73/2 = 36
    assert run_score(plugin({"scoringStrategy": {"type": "MostAllocated"}}), pod, table) == [67, 36]


def test_sidecar_counts_in_score():
    nodes = [make_node("node1", {"cpu": "4000", "memory": "10000"}),
             make_node("node2", {"cpu": "4000", "memory": "10000"})]
    table = make_table(nodes, [
        ("node1", make_pod(containers=[{"cpu": "1000", "memory": "2000"}],
                           init=[({"cpu": "1000", "memory": "2000"}, True)])),
        ("node2", make_pod(requests={"cpu": "1000", "memory": "2000"}))])
    pod = make_pod(requests={"cpu": "1000", "memory": "2000"})
    # least: node1 cpu (4000-3000)*100/4000 = 25, mem (10000-6000)*100/10000 = 40 -> 32
    #        node2 cpu (4000-2000)*100/4000 = 50, mem 60 -> 55
    assert run_score(plugin(), pod, table) == [32, 55]
    # most: node1 cpu 75, mem 60 -> 67; node2 cpu 50, mem 40 -> 45
    assert run_score(plugin({"scoringStrategy": {"type": "MostAllocated"}}), pod, table) == [67, 45]


def test_least_allocated_over_capacity_and_weights():
    nodes = [make_node("node1", {"cpu": "4", "memory": "10000"}),
             make_node("node2", {"cpu": "4", "memory": "10000"})]
    table = make_table(nodes, [("node2", make_pod(requests={"cpu": "0", "memory": "5000"}))])
    pod = make_pod(requests={"cpu": "6", "memory": "0"})
    # requested cpu 6 > 4: score 0. node1: (0 + 100) / 2 = 50; node2: (0 + 50) / 2 = 25
    assert run_score(plugin(), pod, table) == [50, 25]
    # weights cpu 1, memory 2: node1 (0*1 + 100*2)/3 = 66; node2 (0 + 50*2)/3 = 33
    args = {"scoringStrategy": {"type": "LeastAllocated",
                                "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 2}]}}
    assert run_score(plugin(args), pod, table) == [66, 33]


def test_most_allocated_clamps_to_capacity():
    table = make_table([make_node("n", {"cpu": "4", "memory": "10000"})])
    pod = make_pod(requests={"cpu": "6", "memory": "2500"})
    # cpu min(6000, 4000)*100/4000 = 100, mem 2500*100/10000 = 25 -> 125/2 = 62
    assert run_score(plugin({"scoringStrategy": {"type": "MostAllocated"}}), pod, table) == [62]


def test_nonzero_defaults_in_score():
    table = make_table([make_node("n", {"cpu": "1", "memory": str(1000 * MI)})],
                       [("n", make_pod()), ("n", make_pod())])  # two pods without requests
    # node nonzero: 200m, 400Mi; pod gets 100m + 200Mi too -> requested 300m, 600Mi
    # least: cpu (1000-300)*100/1000 = 70, mem (1000-600)*100/1000 = 40 -> 55
    assert run_score(plugin(), make_pod(), table) == [55]
    # a container that sets cpu "0" explicitly keeps 0 cpu but still gets the memory default:
    # cpu (1000-200)*100/1000 = 80, mem 40 -> 60
    assert run_score(plugin(), make_pod(requests={"cpu": "0"}), table) == [60]


def test_defaults_are_per_container():
    table = make_table([make_node("n", {"cpu": "1", "memory": str(1000 * MI)})])
    # container a: cpu 300m, memory defaulted 200Mi; container b: both defaulted (100m, 200Mi)
    pod = make_pod(containers=[{"cpu": "300m"}, None])
    # cpu (1000-400)*100/1000 = 60, mem (1000-400)*100/1000 = 60 -> 60
    assert run_score(plugin(), pod, table) == [60]


EXT = {"scoringStrategy": {"type": "LeastAllocated", "resources": [
    {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": "intel.com/foo", "weight": 1}]}}


def test_extended_resource_scored_only_when_requested():
    nodes = [make_node("node1", {"cpu": "10", "memory": "10000", "intel.com/foo": "4"}),
             make_node("node2", {"cpu": "10", "memory": "10000", "intel.com/foo": "10"}),
             make_node("node3", {"cpu": "10", "memory": "10000"})]
    table = make_table(nodes)
    # not requested: only cpu (10000-5000)*100/10000 = 50 and memory 50 count -> 50 everywhere
    assert run_score(plugin(EXT), make_pod(requests={"cpu": "5", "memory": "5000"}), table) == [50, 50, 50]
    pod = make_pod(requests={"cpu": "5", "memory": "5000", "intel.com/foo": "2"})
    # node1: foo (4-2)*100/4 = 50 -> (50+50+50)/3 = 50; node2: (10-2)*100/10 = 80 -> 180/3 = 60
    # node3 has no intel.com/foo (allocatable 0): skipped with its weight -> 100/2 = 50
    assert run_score(plugin(EXT), pod, table) == [50, 60, 50]


def test_unscorable_and_absent_resources_are_skipped():
    table = make_table([make_node("n", {"cpu": "10", "memory": "10000"})])
    pod = make_pod(requests={"cpu": "5", "memory": "2500"})
    # "pods" is no scalar resource and ephemeral-storage has allocatable 0: both left out
    # -> (cpu 50 + memory 75) / 2 = 62
    args = {"scoringStrategy": {"type": "LeastAllocated", "resources": [
        {"name": "cpu"}, {"name": "memory"}, {"name": "pods", "weight": 50},
        {"name": "ephemeral-storage", "weight": 50}, {"name": "example.com/never-seen", "weight": 50}]}}
    assert run_score(plugin(args), pod, table) == [62]


def test_ephemeral_storage_scored_without_pod_request():
    table = make_table([make_node("n", {"cpu": "10", "memory": "10000", "ephemeral-storage": "1000"})],
                       [("n", make_pod(requests={"cpu": "0", "memory": "0", "ephemeral-storage": "750"}))])
    pod = make_pod(requests={"cpu": "5", "memory": "5000"})
    # ephemeral-storage is not a scalar resource: counted even though the pod requests none
    # cpu (10000-5000)*100/10000 = 50, mem 50, eph (1000-750)*100/1000 = 25 -> 125/3 = 41
    args = {"scoringStrategy": {"type": "LeastAllocated", "resources": [
        {"name": "cpu"}, {"name": "memory"}, {"name": "ephemeral-storage"}]}}
    assert run_score(plugin(args), pod, table) == [41]


def test_no_allocatable_scores_zero():
    table = make_table([make_node("n", {}, pods="10")])
    assert run_score(plugin(), make_pod(requests={"cpu": "1"}), table) == [0]


def rtcr(shape, resources=None):
    strategy = {"type": RTCR, "requestedToCapacityRatio": {
        "shape": [{"utilization": u, "score": s} for u, s in shape]}}
    if resources:
        strategy["resources"] = resources
    return plugin({"scoringStrategy": strategy})


def test_rtcr_upstream_cases():
    table = make_table(upstream_nodes(), [("node1", make_pod(requests={"cpu": "2000", "memory": "4000"})),
                                          ("node2", make_pod(requests={"cpu": "1000", "memory": "2000"}))])
    pod = make_pod(requests={"cpu": "3000", "memory": "5000"})
    # shape (0,100) (100,0): node1 cpu 5000 > 4000 -> f(100) = 0 (not counted); mem 90 -> 10 => 10
    # node2 cpu 4000*100/6000 = 66 -> 34; mem 70 -> 30 => round(64/2) = 32
    assert run_score(rtcr([(0, 10), (100, 0)]), pod, table) == [10, 32]
    # shape (0,0) (100,100): node1 cpu f(100) = 100, mem 90 => 95; node2 66, 70 => 68
    assert run_score(rtcr([(0, 0), (100, 10)]), pod, table) == [95, 68]


def test_rtcr_zero_scores_do_not_count():
    nodes = [make_node("node1", {"cpu": "4000", "memory": "10000"}),
             make_node("node2", {"cpu": "4000", "memory": "10000"})]
    table = make_table(nodes, [("node1", make_pod()), ("node1", make_pod())])
    # best-effort pod: 100m/200Mi defaults. cpu utilization ~0 -> 100; memory 200Mi > 10000 bytes
    # -> f(100) = 0, left out of the weight sum -> 100 / 1 = 100 on both nodes
    assert run_score(rtcr([(0, 10), (100, 0)]), make_pod(), table) == [100, 100]


def test_rtcr_rounds_half_away_from_zero():
    table = make_table([make_node("n", {"cpu": "100m", "memory": "100"})])
    # shape (0,0) (100,100): cpu 23 -> 23, mem 50 -> 50; 73/2 = 36.5 -> 37 (banker's would give 36)
    pod = make_pod(requests={"cpu": "23m", "memory": "50"})
    assert run_score(rtcr([(0, 0), (100, 10)]), pod, table) == [37]
    # cpu listed twice, weights 1, 1, 2 on cpu, memory, cpu: (23 + 50 + 23*2) / 4 = 29.75 -> 30
    res = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": "cpu", "weight": 2}]
    assert run_score(rtcr([(0, 0), (100, 10)], res), pod, table) == [30]


def test_rtcr_interpolation_truncates_toward_zero():
    table = make_table([make_node("n", {"cpu": "100m", "memory": "100"})])
    pod = make_pod(requests={"cpu": "71m", "memory": "71"})
    # shape (40,100) (100,0): 100 + (0-100)*(71-40)/(100-40) = 100 + trunc(-51.67) = 49 (floor: 48)
    assert run_score(rtcr([(40, 10), (100, 0)]), pod, table) == [49]


@pytest.mark.parametrize("points, assertions", [
    # helper.BuildBrokenLinearFunction's own table (shape_score_test.go)
    ([(10, 1), (90, 9)], [(-10, 1), (0, 1), (9, 1), (10, 1), (15, 1), (19, 1), (20, 2), (89, 8),
                          (90, 9), (99, 9), (100, 9), (110, 9)]),
    ([(0, 2), (40, 10), (100, 0)], [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5), (100, 0), (110, 0)]),
    ([(0, 2), (40, 2), (100, 2)], [(-10, 2), (0, 2), (20, 2), (30, 2), (40, 2), (70, 2), (100, 2), (110, 2)]),
    # decreasing segment, Go truncation (flooring would give 4, 9, 0):
    # 71: 10 + (-10*31)/60 = 10 + trunc(-5.17) = 5; 41: 10 + trunc(-0.17) = 10; 99: 10 + trunc(-9.83) = 1
    ([(40, 10), (100, 0)], [(71, 5), (41, 10), (99, 1)]),
    ([(50, 7)], [(0, 7), (50, 7), (100, 7)]),
])
def test_broken_linear(points, assertions):
    p = np.array([a for a, _ in assertions], dtype=np.int64)
    assert broken_linear(points, p).tolist() == [b for _, b in assertions]


def test_score_rows_subset_and_prescore_state():
    nodes = [make_node(f"n{i}", {"cpu": str(i + 1), "memory": f"{i + 1}Gi"}) for i in range(4)]
    table = make_table(nodes)
    pod = make_pod(requests={"cpu": "500m", "memory": "512Mi"})
    pl = plugin()
    # n3: cpu (4000-500)*100/4000 = 87, mem (4096-512)*100/4096 = 87 -> 87
    # n1: cpu (2000-500)*100/2000 = 75, mem 75 -> 75
    assert run_score(pl, pod, table, [3, 1]) == [87, 75]
    # Score without a PreScore in the same cycle computes the request itself
    assert pl.score(CycleState(), pod, table, np.array([0])).tolist() == [50]


def test_go_div_truncates():
    assert go_div(np.array([-7, 7, -6, 0]), 2).tolist() == [-3, 3, -3, 0]


# ------------------------------------------------------------------ events and queueing hints
A, T = ActionType, Resource
BIG = {"cpu": "4", "memory": "8Gi", "pods": "110"}


def test_events_to_register():
    assert registered(plugin()) == [
        (T.ASSIGNED_POD, A.DELETE), (T.ASSIGNED_POD, A.UPDATE_POD_SCALE_DOWN),
        (T.NODE, A.ADD), (T.NODE, A.UPDATE_NODE_ALLOCATABLE), (T.TARGET_POD, A.UPDATE_POD_SCALE_DOWN),
        (T.DEVICE_CLASS, A.ADD | A.UPDATE)]


# upstream isSchedulableAfterNodeChange: Skip when the pod does not fit even the empty node (isFit);
# a new node then queues; an updated one only when the allowed pod count, or the allocatable of a
# resource the pod requests, grew (haveAnyRequestedResourcesIncreased).
@pytest.mark.parametrize("args, requests, action, old, new, want", [
    (None, {"cpu": "2"}, A.ADD, None, node("x", allocatable=BIG), QUEUE),
    (None, {"cpu": "8"}, A.ADD, None, node("x", allocatable=BIG), SKIP),  # too small even empty
    (None, None, A.ADD, None, node("x", allocatable={"cpu": "4"}), SKIP),  # no pods allowed
    (None, None, A.ADD, None, node("x", allocatable={"pods": "1"}), QUEUE),  # requests nothing
    (None, {"example.com/gpu": "1"}, A.ADD, None, node("x", allocatable=BIG), SKIP),
    (None, {"example.com/gpu": "1"}, A.ADD, None, node("x", allocatable={**BIG, "example.com/gpu": "1"}), QUEUE),
    # an ignored extended resource is not checked by Filter, so the node fits (see the module docstring)
    ({"ignoredResources": ["example.com/gpu"]}, {"example.com/gpu": "1"}, A.ADD, None,
     node("x", allocatable=BIG), QUEUE),
    (None, {"cpu": "2"}, A.UPDATE_NODE_ALLOCATABLE, node("x", allocatable={**BIG, "cpu": "3"}),
     node("x", allocatable=BIG), QUEUE),  # cpu grew
    (None, {"cpu": "2"}, A.UPDATE_NODE_ALLOCATABLE, node("x", allocatable={**BIG, "memory": "4Gi"}),
     node("x", allocatable=BIG), SKIP),  # memory grew, but the pod requests no memory
    (None, {"cpu": "2"}, A.UPDATE_NODE_ALLOCATABLE, node("x", allocatable={**BIG, "pods": "10"}),
     node("x", allocatable=BIG), QUEUE),  # more pods allowed
    (None, {"cpu": "2"}, A.UPDATE_NODE_ALLOCATABLE, node("x", allocatable={**BIG, "cpu": "5"}),
     node("x", allocatable=BIG), SKIP),  # shrank
    (None, {"cpu": "6"}, A.UPDATE_NODE_ALLOCATABLE, node("x", allocatable={**BIG, "cpu": "3"}),
     node("x", allocatable=BIG), SKIP),  # grew, but still too small
])
def test_node_change_hint(args, requests, action, old, new, want):
    pod = make_pod(requests=requests)
    assert hint(plugin(args), T.NODE, action, pod, old, new) == want


# upstream isSchedulableAfterPodEvent: a deleted pod that was bound or nominated frees room; a
# scale-down queues for the pod itself, and for an assigned pod only when it lowered a resource the
# pod requests (isSchedulableAfterPodScaleDown).
@pytest.mark.parametrize("resource, action, old, new, want", [
    (T.ASSIGNED_POD, A.DELETE, changed(make_pod("d", {"cpu": "1"}), node_name="n"), None, QUEUE),
    (T.ASSIGNED_POD, A.DELETE, changed(make_pod("d", {"cpu": "1"}), nominated_node_name="n"), None, QUEUE),
    (T.ASSIGNED_POD, A.DELETE, make_pod("d", {"cpu": "1"}), None, SKIP),  # never placed
    (T.ASSIGNED_POD, A.UPDATE_POD_SCALE_DOWN, changed(make_pod("d", {"cpu": "2"}), node_name="n"),
     changed(make_pod("d", {"cpu": "1"}), node_name="n"), QUEUE),
    (T.ASSIGNED_POD, A.UPDATE_POD_SCALE_DOWN, changed(make_pod("d", {"memory": "2Gi"}), node_name="n"),
     changed(make_pod("d", {"memory": "1Gi"}), node_name="n"), SKIP),  # the pod requests no memory
    (T.TARGET_POD, A.UPDATE_POD_SCALE_DOWN, make_pod("p", {"cpu": "3"}), make_pod("p", {"cpu": "2"}), QUEUE),
])
def test_pod_event_hint(resource, action, old, new, want):
    pod = make_pod("p", {"cpu": "2"})
    assert hint(plugin(), resource, action, pod, old, new) == want


# ------------------------------------------------------------------ args: upstream's verdicts
# TestValidateNodeResourcesFitArgs (paths and messages of ValidateNodeResourcesFitArgs)
@pytest.mark.parametrize("args, path, detail", [
    pytest.param({"ignoredResources": ["-invalid-resource-name"]}, "ignoredResources[0]",
                 'Invalid value: "-invalid-resource-name": name part must consist of', id="ignored-resource"),
    pytest.param({"ignoredResources": ["example.com/a/b"]}, "ignoredResources[0]", "a valid label key must consist of",
                 id="ignored-resource-two-slashes"),
    pytest.param({"ignoredResourceGroups": ["example.com/foo"]}, "ignoredResourceGroups[0]",
                 "Invalid value: \"example.com/foo\": resource group name can't contain '/'", id="group-slash"),
    pytest.param({"ignoredResourceGroups": ["-foo"]}, "ignoredResourceGroups[0]", "name part must consist of",
                 id="group-invalid"),
    pytest.param({"scoringStrategy": {"type": "Invalid"}}, "scoringStrategy.type",
                 'Unsupported value: "Invalid": supported values: "LeastAllocated", "MostAllocated", '
                 '"RequestedToCapacityRatio"', id="strategy-type"),
    pytest.param({"scoringStrategy": {}}, "scoringStrategy.type", 'Unsupported value: ""', id="strategy-type-empty"),
    pytest.param({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 101}]}},
                 "scoringStrategy.resources[0].weight",
                 "Invalid value: 101: resource weight of cpu not in valid range (0, 100]", id="weight-over"),
    pytest.param({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "memory", "weight": -1}]}},
                 "scoringStrategy.resources[0].weight", "resource weight of memory not in valid range (0, 100]",
                 id="weight-negative"),
    pytest.param({"scoringStrategy": {"type": RTCR}}, "scoringStrategy.requestedToCapacityRatio",
                 "Required value: must be specified when type is RequestedToCapacityRatio", id="rtcr-missing"),
    pytest.param({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {}}},
                 "scoringStrategy.requestedToCapacityRatio.shape",
                 "Required value: at least one point must be specified", id="shape-empty"),
    pytest.param({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {"shape": [
        {"utilization": 10, "score": 1}, {"utilization": 10, "score": 2}, {"utilization": 5, "score": 3}]}}},
        "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
        "Invalid value: 10: values must be sorted in increasing order", id="shape-unsorted"),
    pytest.param({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {"shape": [
        {"utilization": 110, "score": 1}]}}}, "scoringStrategy.requestedToCapacityRatio.shape[0].utilization",
        "Invalid value: 110: not in valid range [0, 100]", id="shape-utilization"),
    pytest.param({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {"shape": [
        {"utilization": 10, "score": -1}]}}}, "scoringStrategy.requestedToCapacityRatio.shape[0].score",
        "Invalid value: -1: not in valid range [0, 10]", id="shape-score"),
    pytest.param({"scoringStrategy": {"type": "LeastAllocated", "requestedToCapacityRatio": {"shape": [
        {"utilization": 10, "score": 1}]}}}, "scoringStrategy.requestedToCapacityRatio",
        "Forbidden: must be nil when type is not RequestedToCapacityRatio", id="rtcr-forbidden"),
    # types and sizes
    pytest.param({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {"shape": [
        {"utilization": "10", "score": 1}]}}}, "scoringStrategy.requestedToCapacityRatio.shape[0].utilization",
        'Invalid value: "10": must be an integer', id="shape-string"),
    pytest.param({"ignoredResources": [f"r{i}" for i in range(65)]}, "ignoredResources",
                 "Too many: 65: must have at most 64 items", id="too-many-ignored"),
    pytest.param({"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {"shape": [
        {"utilization": i % 101, "score": 1} for i in range(102)]}}},
        "scoringStrategy.requestedToCapacityRatio.shape", "Too many: 102: must have at most 101 items",
        id="too-many-points"),
    pytest.param({"ignoredResources": "cpu"}, "ignoredResources", 'Invalid value: "cpu": must be a list',
                 id="not-a-list"),
])
def test_args_upstream_refusals(args, path, detail):
    kit.refused("NodeResourcesFit", args, path, detail)


@pytest.mark.parametrize("args", [
    {}, {"ignoredResources": ["example.com/foo", "cpu"], "ignoredResourceGroups": ["example.com"]},
    {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 100}, {"name": "memory"}]}},
    {"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {"shape": [
        {"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}}},
])
def test_args_upstream_accepts(args):
    assert kit.arg_errors("NodeResourcesFit", args) == []


# ---------------------------------------------------------------------------- overcommit (tenants)


def _run_filter(plugin, pod, t):
    state = CycleState()
    plugin.pre_filter(state, pod, t)
    return state, plugin.filter(state, pod, t, np.arange(t.n))


def test_overcommit_fits_against_allocatable_times_the_factor_and_says_so():
    t = kit.table([make_node("n1", {"cpu": "4", "memory": "8Gi"}), make_node("n2", {"cpu": "8", "memory": "8Gi"})])
    t.add_pod(make_pod("used", {"cpu": "3800m"}), "n1")
    pod = make_pod("p", {"cpu": "400m"})
    strict = kit.instance(PLUGIN)
    loose = kit.instance(PLUGIN, handle=overcommit_handle({"cpu": 1.05}))
    _, res = _run_filter(strict, pod, t)
    assert res.passed.tolist() == [False, True]  # 3800m + 400m > 4000m
    state, res = _run_filter(loose, pod, t)
    assert res.passed.tolist() == [True, True]  # 4200m <= 4000m x 1.05
    assert loose.describe(state, pod, t, np.array([0, 1])) == [{"admittedBy": "overcommit (cpu x1.05)"}, None]
    assert strict.describe(CycleState(), pod, t, np.array([0])) is None
    # 4001m would pass nowhere on n1 even overcommitted: beyond 4200m
    _, res = _run_filter(loose, make_pod("big", {"cpu": "500m"}), t)
    assert res.passed.tolist() == [False, True]


def test_a_node_overcommitted_by_another_policy_is_refused_with_a_reason_that_says_so():
    t = kit.table([make_node("n1", {"cpu": "4", "memory": "8Gi"}), make_node("n2", {"cpu": "4", "memory": "8Gi"})])
    t.add_pod(make_pod("a", {"cpu": "4100m"}), "n1")  # another tenant's overcommit
    t.add_pod(make_pod("b", {"cpu": "3950m"}), "n2")  # full, not over
    # no policy overcommits: a node over allocatable holds nominated pods (counted for filtering),
    # and the reason is upstream's
    _, res = _run_filter(kit.instance(PLUGIN), make_pod("p", {"cpu": "100m"}), t)
    assert {r for r, _ in res.reasons} == {"Insufficient cpu"}
    _, res = _run_filter(kit.instance(PLUGIN, handle=overcommit_handle({})), make_pod("p", {"cpu": "100m"}), t)
    assert res.passed.tolist() == [False, False]
    reasons = {r: m.tolist() for r, m in res.reasons}
    assert reasons["Insufficient cpu (node already over its allocatable cpu: overcommitted)"] == [True, False]
    assert reasons["Insufficient cpu"] == [False, True]
    assert res.code.tolist() == [int(Code.UNSCHEDULABLE)] * 2
    # scores keep the real allocatable: the over-full node scores 0 for cpu, even for the policy
    # whose factor lets it fit
    t = kit.table([make_node("n1", {"cpu": "4", "memory": "8Gi"}), make_node("n2", {"cpu": "4", "memory": "8Gi"})])
    t.add_pod(make_pod("a", {"cpu": "4100m"}), "n1")
    t.add_pod(make_pod("b", {"cpu": "2000m"}), "n2")
    plugin = kit.instance(PLUGIN, handle=overcommit_handle({"cpu": 2.0}))
    state = CycleState()
    pod = make_pod("p", {"cpu": "100m", "memory": "100Mi"})
    plugin.pre_filter(state, pod, t)
    plugin.pre_score(state, pod, t, np.arange(2))
    s = plugin.score(state, pod, t, np.arange(2))
    assert s[0] < s[1]


# ------------------------------------------------------------------ in-place resize, pod-level resources
def test_filter_reads_the_spec_of_the_pod_being_scheduled_not_its_status():
    """computePodResourceRequest: no status resources for the pod being scheduled (a status that
    claims more, as a hostile writer could set, does not count)."""
    table = make_table([make_node("n", {"cpu": "2", "memory": "4Gi"})])
    body = {"metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"containerStatuses": [{"name": "c", "allocatedResources": {"cpu": "8"}}]}}
    p = parse_pod(body)
    assert p.requests == {"cpu": 8000} and p.spec_requests == {"cpu": 1000}
    assert verdicts(run_filter(plugin(), p, table), 1) == [None]


def test_score_gives_pod_level_pods_the_per_container_defaults():
    """resourceAllocationScorer.calculatePodResourceRequest as NewFit builds it (no feature flags):
    the pod level is not read; every container that names no cpu or memory gets 100m / 200Mi."""
    table = make_table([make_node("n", {"cpu": "4", "memory": "8Gi"})])
    body = {"metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "200m"}}}, {"name": "b"}],
                     "resources": {"requests": {"memory": "1Gi"}}}}
    pod_level = parse_pod(body)
    same = make_pod("q", {"cpu": "300m", "memory": "400Mi"})
    pod_level_read = make_pod("r", {"cpu": "300m", "memory": "1Gi"})
    for args in (None, {"scoringStrategy": {"type": "MostAllocated"}}):
        scores = [run_score(plugin(args), p, table)[0] for p in (pod_level, same, pod_level_read)]
        assert scores[0] == scores[1] != scores[2], (args, scores)
