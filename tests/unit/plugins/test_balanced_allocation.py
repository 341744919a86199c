"""NodeResourcesBalancedAllocation: args, PreScore skip for best-effort pods, v1.37 scoring.

score = 50 + (50 + balance(with pod) - balance(without pod)) / 2, balance = int((1 - std) * 100)
(upstream noderesources/balanced_allocation.go). Cases marked "upstream" are the v1.37 test table.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.plugins.balanced_allocation import PLUGIN, balance_score

from support import kit


def make_node(name, cpu_milli, memory, extra=None):
    alloc = {"pods": "110", "cpu": f"{cpu_milli}m", "memory": str(memory), **(extra or {})}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc}}


def make_pod(*containers, name="p"):
    """Each container is a requests dict (or None for no requests)."""
    spec = {"containers": [{"name": f"c{i}", "image": "busybox",
                            **({"resources": {"requests": r}} if r is not None else {})}
                           for i, r in enumerate(containers or [None])]}
    return parse_pod({"metadata": {"name": name, "namespace": "default"}, "spec": spec})


def cm(cpu, mem):
    return {"cpu": cpu, "memory": mem}


make_table = kit.table


def plugin(args=None):
    return kit.instance(PLUGIN, args)


def scores(pl, pod, table, rows=None):
    rows = np.arange(table.n) if rows is None else np.asarray(rows)
    state = CycleState()
    st = pl.pre_score(state, pod, table, rows)
    assert st.is_success
    out = pl.score(state, pod, table, rows)
    assert out.dtype == np.int64
    return out.tolist()


GPU3 = [{"name": "cpu"}, {"name": "memory"}, {"name": "nvidia.com/gpu"}]

# (id, pod, nodes, existing (node, pod), args, expected scores)
CASES = [
    # upstream. node1: with cpu 3000/4000 = .75, mem 5000/10000 = .5 -> std .125 -> 87; without 100
    #   -> 50 + (50 + 87 - 100)/2 = 50 + 18 = 68. node2: .5, .5 -> 100 and 100 -> 75
    ("nothing scheduled, resources requested, differently sized nodes",
     make_pod(cm("1000m", "2000"), cm("2000m", "3000")),
     [make_node("node1", 4000, 10000), make_node("node2", 6000, 10000)], [], None, [68, 75]),
    # upstream. node1: with .6, .25 -> std .175 -> 82; without .3, 0 -> .15 -> 85 -> 50 + 47/2 = 73
    #   node2: with .6, .5 -> 95; without .3, .25 -> 97 -> 50 + 48/2 = 74
    ("resources requested, pods scheduled with resources",
     make_pod(cm("1000m", "2000"), cm("2000m", "3000")),
     [make_node("node1", 10000, 20000), make_node("node2", 10000, 20000)],
     [("node1", make_pod({"cpu": "1000m"}, {"cpu": "2000m"})),
      ("node2", make_pod(cm("1000m", "2000"), cm("2000m", "3000")))], None, [73, 74]),
    # upstream. node2: with .6, .2 -> 80; without .3, .1 -> 90 -> 50 + 40/2 = 70
    ("resources requested, pods scheduled with resources, differently sized nodes",
     make_pod(cm("1000m", "2000"), cm("2000m", "3000")),
     [make_node("node1", 10000, 20000), make_node("node2", 10000, 50000)],
     [("node1", make_pod({"cpu": "1000m"}, {"cpu": "2000m"})),
      ("node2", make_pod(cm("1000m", "2000"), cm("2000m", "3000")))], None, [73, 70]),
    # upstream. node1: with 1, 1 -> 100; without 1, 0 -> 50 -> 50 + 100/2 = 100
    #   node2: with 0, 1 -> 50; without 0, 0 -> 100 -> 50 + 0/2 = 50
    ("nodes to reach min/max score", make_pod({"memory": "2000"}, {"memory": "3000"}),
     [make_node("node1", 3000, 5000), make_node("node2", 3000, 5000)],
     [("node1", make_pod({"cpu": "1000m"}, {"cpu": "2000m"}))], None, [100, 50]),
    # upstream. node1: with 1, 0 -> 50; without .5, 0 -> 75 -> 50 + 25/2 = 62
    #   node2: with 1, .5 -> 75; without .5, .5 -> 100 -> 62
    ("requested resources at node capacity", make_pod({"cpu": "1000m"}, {"cpu": "2000m"}),
     [make_node("node1", 6000, 10000), make_node("node2", 6000, 10000)],
     [("node1", make_pod({"cpu": "1000m"}, {"cpu": "2000m"})),
      ("node2", make_pod(cm("1000m", "2000"), cm("2000m", "3000")))], None, [62, 62]),
    # fractions are capped at 1: cpu 8000/4000 -> 1; mem .5 -> std .25 -> 75; without 0, 0 -> 100
    #   -> 50 + 25/2 = 62
    ("fraction capped at 1", make_pod(cm("8000m", "5000")), [make_node("n", 4000, 10000)], [], None, [62]),
    # upstream, 3 resources (population std). node1: with (3000/3500, 5000/40000, 4/8) = (.857, .125, .5):
    #   mean .494, std .299 -> 70; without (.857, .125, .375): std .304 -> 69 -> 50 + (50 + 70 - 69)/2 = 75
    #   node2: with (.857, .125, .125): std .345 -> 65; without (.857, .125, 0): std .378 -> 62
    #   -> 50 + 53/2 = 76
    ("scalar resource included when the pod requests it",
     make_pod({"cpu": "0", "memory": "0", "nvidia.com/gpu": "1"}),
     [make_node("node1", 3500, 40000, {"nvidia.com/gpu": "8"}), make_node("node2", 3500, 40000, {"nvidia.com/gpu": "8"})],
     [("node1", make_pod(cm("1000m", "2000"), {"cpu": "2000m", "memory": "3000", "nvidia.com/gpu": "3"})),
      ("node2", make_pod(cm("1000m", "2000"), cm("2000m", "3000")))],
     {"resources": GPU3}, [75, 76]),
    # upstream. gpu not requested -> ignored: with .857, .125 -> std .366 -> 63; without 100 -> 50 + 13/2 = 56
    ("scalar resource ignored when the pod does not request it",
     make_pod(cm("1000m", "2000"), cm("2000m", "3000")),
     [make_node("node1", 3500, 40000, {"nvidia.com/gpu": "8"}), make_node("node2", 3500, 40000)], [],
     {"resources": GPU3}, [56, 56]),
    # node2 lacks the gpu (allocatable 0): only cpu and memory count there.
    #   node1: with (.5, .5, .5) -> 100; without 0s -> 100 -> 75
    #   node2: with (.5, .5) -> 100; without -> 100 -> 75
    ("node without the requested scalar resource", make_pod({"cpu": "1", "memory": "20000", "nvidia.com/gpu": "4"}),
     [make_node("node1", 2000, 40000, {"nvidia.com/gpu": "8"}), make_node("node2", 2000, 40000)], [],
     {"resources": GPU3}, [75, 75]),
    # uses true requests, not the 100m/200Mi defaults: existing pods without requests add nothing.
    #   with .5, .5 -> 100; without 0, 0 -> 100 -> 75 (with defaults it would be unbalanced)
    ("true requests only", make_pod(cm("1000m", "1000")),
     [make_node("n", 2000, 2000)], [("n", make_pod(None)), ("n", make_pod(None))], None, [75]),
    # a single fraction: std 0 both ways -> 75
    ("one resource", make_pod({"cpu": "500m"}), [make_node("n", 1000, 1000)], [],
     {"resources": [{"name": "cpu"}]}, [75]),
    # a node with no allocatable for any configured resource: no fractions -> 100 and 100 -> 75
    ("no fractions", make_pod({"cpu": "500m"}),
     [{"metadata": {"name": "bare"}, "status": {"allocatable": {"pods": "10"}}}], [], None, [75]),
]


@pytest.mark.parametrize("pod, nodes, existing, args, want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_score(pod, nodes, existing, args, want):
    assert scores(plugin(args), pod, make_table(nodes, existing)) == want


@pytest.mark.parametrize("pod, args", [
    (make_pod(None), None),
    (make_pod(cm("0", "0")), None),
    # only the configured resources decide: ephemeral-storage is not configured
    (make_pod({"ephemeral-storage": "1Gi"}), None),
    (make_pod({"cpu": "0", "nvidia.com/gpu": "0"}), {"resources": GPU3}),
])
def test_prescore_skips_best_effort(pod, args):
    table = make_table([make_node("n", 1000, 1000)])
    assert plugin(args).pre_score(CycleState(), pod, table, np.arange(1)).is_skip


def test_prescore_not_skipped_for_a_scalar_request():
    table = make_table([make_node("n", 1000, 1000, {"nvidia.com/gpu": "2"})])
    pl = plugin({"resources": GPU3})
    # with (0, 0, .5): mean 1/6, std .2357 -> 76; without 0s -> 100 -> 50 + 26/2 = 63
    assert scores(pl, make_pod({"nvidia.com/gpu": "1"}), table) == [63]


def test_rows_subset_and_order():
    nodes = [make_node("a", 4000, 10000), make_node("b", 6000, 10000), make_node("c", 4000, 10000)]
    pod = make_pod(cm("1000m", "2000"), cm("2000m", "3000"))
    # see the first case: 4000m nodes 68, the 6000m node 75
    assert scores(plugin(), pod, make_table(nodes), [2, 1]) == [68, 75]


def test_balance_score_matches_formula():
    f = np.array([[0.75, 0.3, 0.0, 1.0], [0.5, 0.3, 1.0, 0.2], [0.1, 0.3, 0.5, 0.9]])
    valid = np.array([[True, True, True, True], [True, True, True, False], [False, True, True, True]])
    # col0: 2 fractions .75, .5 -> 87; col1: 3 equal -> 100
    # col2: 0, 1, .5: mean .5, std sqrt((.25+.25+0)/3) = .408 -> 59; col3: 1.0, .9 -> std .05 -> 95
    assert balance_score(f, valid).tolist() == [87, 100, 59, 95]


def test_args_defaults_and_weight_zero():
    a = PLUGIN.Args.model_validate({})
    assert [(r.name, r.weight) for r in a.resources] == [("cpu", 1), ("memory", 1)]
    a = PLUGIN.Args.model_validate({"resources": [{"name": "cpu", "weight": 0}, {"name": "nvidia.com/gpu"}]})
    assert [(r.name, r.weight) for r in a.resources] == [("cpu", 1), ("nvidia.com/gpu", 1)]


@pytest.mark.parametrize("args, message", [
    ({"resources": [{"name": "cpu", "weight": 2}]}, "resources[0].weight: Invalid value: 2: must be 1"),
    ({"resources": [{"name": "cpu"}, {"name": "cpu"}]}, "resources[1].name: Duplicate value: \"cpu\""),
    ({"resource": []}, "resource"),
])
def test_args_invalid(args, message):
    with pytest.raises(ValidationError) as e:
        PLUGIN.Args.model_validate(args)
    assert message in str(e.value)


def test_balance_score_two_resources():
    f = np.array([[0.75, 0.25, 0.9, 0.0], [0.5, 0.75, 0.2, 0.6]])
    valid = np.array([[True, True, False, False], [True, True, True, False]])
    # col0: |.75 - .5| / 2 = .125 -> 87; col1: .25 -> 75; col2: one fraction -> std 0 -> 100; col3: none -> 100
    assert balance_score(f, valid).tolist() == [87, 75, 100, 100]


# ------------------------------------------------------------------ args: upstream's verdicts
# TestValidateNodeResourcesBalancedAllocationArgs
@pytest.mark.parametrize("args, path, detail", [
    ({"resources": [{"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}]}, "resources[0].weight",
     "Invalid value: 2: must be 1"),
    ({"resources": [{"name": "cpu", "weight": 1}, {"name": "cpu", "weight": 1}]}, "resources[1].name",
     'Duplicate value: "cpu"'),
    ({"resources": [{"name": "cpu", "weight": -1}]}, "resources[0].weight", "Invalid value: -1: must be 1"),
    ({"resources": [{"weight": 1}]}, "resources[0].name", "Required value"),
    ({"resources": [{"name": "cpu", "weight": "1"}]}, "resources[0].weight", "must be an integer"),
    ({"resources": [{"name": f"r{i}.io/x", "weight": 1} for i in range(33)]}, "resources",
     "Too many: 33: must have at most 32 items"),
    ({"resources": [{"name": "x" * 318, "weight": 1}]}, "resources[0].name", "Too long"),
])
def test_args_upstream_refusals(args, path, detail):
    kit.refused("NodeResourcesBalancedAllocation", args, path, detail)


@pytest.mark.parametrize("args", [
    {}, {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]},
    {"resources": [{"name": "cpu"}, {"name": "nvidia.com/gpu", "weight": 0}]},  # weight 0 (unset) becomes 1
])
def test_args_upstream_accepts(args):
    assert kit.arg_errors("NodeResourcesBalancedAllocation", args) == []
