"""schedule_one against upstream schedule_one.go / framework runtime semantics, with fake plugins:
sampling (numFeasibleNodesToFind), round-robin start, FitError text, PreFilter results,
first-failing-plugin filtering, scoring with weights, upstream's tie-breaking, errors."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from policy_scheduler.policy.chain import build_chain
from policy_scheduler.framework.interface import (
    FilterPlugin,
    FilterResult,
    PostFilterPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
)
from policy_scheduler.framework.model.nodetable import NodeSpec, NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.registry import Registry
from policy_scheduler.framework.cycle.schedule import (
    POD_SPEC,
    NO_NODES,
    fit_error_message,
    schedule_one,
)
from policy_scheduler.framework.cycle.filtering import num_feasible_nodes_to_find
from policy_scheduler.framework.status import Code, Status

UNSCHED = Code.UNSCHEDULABLE
UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


# ---------------------------------------------------------------- fakes

def _reasons_of(spec, name):
    r = spec(name) if callable(spec) else spec.get(name)
    if r is None:
        return ()
    return (r,) if isinstance(r, str) else tuple(r)


def filter_plugin(name, reject=None, code=UNSCHED, seen=None, error_on=None):
    """Rejects nodes: ``reject`` maps node name -> reason(s), or is a function name -> reason(s)/None.
    ``seen`` collects the node names the plugin was asked about, in order."""
    reject = reject or {}

    class Fake(FilterPlugin):
        NAME = name

        def filter(self, state, pod, nodes, rows):
            names = [nodes.names[int(r)] for r in rows]
            if seen is not None:
                seen.extend(names)
            if error_on is not None and error_on in names:
                return FilterResult(np.ones(len(rows), dtype=bool), error=Status.error(f"{name} broke"))
            per_node = [_reasons_of(reject, n) for n in names]
            passed = np.array([not rs for rs in per_node], dtype=bool)
            masks: dict[str, np.ndarray] = {}
            for i, rs in enumerate(per_node):
                for r in rs:
                    masks.setdefault(r, np.zeros(len(rows), dtype=bool))[i] = True
            return FilterResult(passed, code, list(masks.items()))
    return Fake


def prefilter_plugin(name, status=None, result=None, calls=None, with_filter=None):
    """PreFilter returning (status, result); optionally also a Filter (``with_filter``: reject map)."""
    bases = (PreFilterPlugin,) if with_filter is None else (PreFilterPlugin, filter_plugin(name, with_filter))

    class Fake(*bases):
        NAME = name

        def pre_filter(self, state, pod, nodes):
            if calls is not None:
                calls.append(name)
            return status or Status.success(), (None if result is None else set(result))
    return Fake


def score_plugin(name, scores=None, normalize=None, seen=None, pre_score=None):
    """Raw score per node from ``scores`` (dict or function of the name, default 0); ``normalize``
    maps the raw array to the normalized one (default: unchanged)."""
    scores = scores or {}
    bases = (ScorePlugin,) if pre_score is None else (PreScorePlugin, ScorePlugin)

    class Fake(*bases):
        NAME = name

        def pre_score(self, state, pod, nodes, rows):
            return pre_score

        def score(self, state, pod, nodes, rows):
            names = [nodes.names[int(r)] for r in rows]
            if seen is not None:
                seen.extend(names)
            get = scores if callable(scores) else (lambda n: scores.get(n, 0))
            return np.array([get(n) for n in names], dtype=np.int64)

        def normalize_score(self, state, pod, nodes, rows, raw):
            return raw if normalize is None else normalize(raw)
    return Fake


class Boom(Exception):
    pass


def raising(point, name="Raiser"):
    """A plugin implementing PreFilter, Filter, PreScore and Score that raises at ``point``."""

    class Fake(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
        NAME = name

        def pre_filter(self, state, pod, nodes):
            if point == "pre_filter":
                raise Boom("pre_filter exploded")
            return Status.success(), None

        def filter(self, state, pod, nodes, rows):
            if point == "filter":
                raise Boom("filter exploded")
            return FilterResult.all_pass(len(rows))

        def pre_score(self, state, pod, nodes, rows):
            if point == "pre_score":
                raise Boom("pre_score exploded")
            return Status.success()

        def score(self, state, pod, nodes, rows):
            if point == "score":
                raise Boom("score exploded")
            if point == "score_length":
                return np.zeros(len(rows) + 1, dtype=np.int64)
            return np.zeros(len(rows), dtype=np.int64)

        def normalize_score(self, state, pod, nodes, rows, scores):
            if point == "normalize":
                raise Boom("normalize exploded")
            return scores
    return Fake


def chain_of(*plugins, pct=None):
    """``plugins``: classes, or (class, weight) pairs; built through the real chain builder."""
    reg = Registry()
    refs = []
    for p in plugins:
        cls, weight = p if isinstance(p, tuple) else (p, None)
        reg.register(cls)
        refs.append({"name": cls.NAME} if weight is None else {"name": cls.NAME, "weight": weight})
    return build_chain({"plugins": refs, "percentageOfNodesToScore": pct}, reg)


def table(n):
    t = NodeTable()
    for i in range(n):
        t.upsert_node(NodeSpec(name=f"n{i:04d}"))
    return t


def name(i):
    return f"n{i:04d}"


POD = parse_pod({"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}})


def run(chain, nodes, pod=POD, seed=0):
    return schedule_one(chain, pod, nodes, random.Random(seed))


# ---------------------------------------------------------------- numFeasibleNodesToFind

@pytest.mark.parametrize("n, want", [
    (0, 0), (1, 1), (99, 99),  # fewer than 100 nodes: all of them
    (100, 100),  # 50% -> 50 -> floored to 100
    (200, 100),  # 49% -> 98 -> 100
    (250, 120),  # 48%
    (500, 230),  # 46%
    (1000, 420),  # 42%
    (5000, 500),  # 50 - 40 = 10%
    (5625, 281),  # 50 - 45 = 5%: 5625*5/100 = 281 (integer division)
    (6000, 300),  # 50 - 48 = 2% -> floored to 5%
    (10000, 500),  # 5%
])
def test_num_feasible_nodes_to_find_adaptive(n, want):
    assert num_feasible_nodes_to_find(None, n) == want
    assert num_feasible_nodes_to_find(0, n) == want


@pytest.mark.parametrize("pct, n, want", [
    (10, 1000, 100), (30, 1000, 300), (5, 1000, 100), (100, 5000, 5000), (50, 150, 100), (1, 99, 99),
])
def test_num_feasible_nodes_to_find_configured(pct, n, want):
    assert num_feasible_nodes_to_find(pct, n) == want


# ---------------------------------------------------------------- sampling and round robin

def test_small_cluster_evaluates_every_node_and_index_stays():
    seen_f, seen_s = [], []
    chain = chain_of(filter_plugin("F", {name(1): "bad"}, seen=seen_f), score_plugin("S", seen=seen_s))
    nodes = table(10)
    d = run(chain, nodes)
    assert d.scheduled and (d.evaluated, d.feasible) == (10, 9)
    assert seen_f == [name(i) for i in range(10)]
    assert sorted(seen_s) == [name(i) for i in range(10) if i != 1]
    assert chain.next_start_node_index == 0  # advanced by 10, modulo 10
    chain.next_start_node_index = 7
    seen_f.clear()
    run(chain, nodes)
    assert seen_f[:3] == [name(7), name(8), name(9)] and seen_f[3] == name(0)
    assert chain.next_start_node_index == 7


def test_round_robin_advances_by_processed_nodes():
    seen = []
    chain = chain_of(filter_plugin("F"), score_plugin("S", seen=seen))
    nodes = table(250)  # need 120 per pod
    for start, expected in [(0, range(0, 120)), (120, range(120, 240)),
                            (240, [*range(240, 250), *range(0, 110)])]:
        assert chain.next_start_node_index == start
        seen.clear()
        d = run(chain, nodes)
        assert (d.evaluated, d.feasible) == (120, 120)
        assert seen == [name(i) for i in expected]
    assert chain.next_start_node_index == 110


def test_sampling_stops_after_needed_feasible_and_counts_only_evaluated_failures():
    seen = []
    even = lambda n: "even" if int(n[1:]) % 2 == 0 else None  # noqa: E731
    chain = chain_of(filter_plugin("F", even), score_plugin("S", seen=seen))
    nodes = table(250)
    d = run(chain, nodes)
    # the 120th feasible (odd) node is n0239; evens 0..238 were evaluated before it
    assert sorted(seen) == [name(i) for i in range(1, 240, 2)]
    assert (d.evaluated, d.feasible) == (240, 120)
    assert d.failures == {"even": 120}
    assert chain.next_start_node_index == 240


def test_configured_percentage_of_nodes_to_score():
    seen = []
    chain = chain_of(filter_plugin("F"), score_plugin("S", seen=seen), pct=30)
    run(chain, table(1000))
    assert len(seen) == 300


def test_without_score_plugins_the_first_feasible_node_wins():
    chain = chain_of(filter_plugin("F", {name(3): "no", name(4): "no"}))
    nodes = table(10)
    chain.next_start_node_index = 3
    d = run(chain, nodes)
    assert d.node == name(5)
    assert (d.evaluated, d.feasible) == (3, 1)  # two failures + the winner
    assert chain.next_start_node_index == 6
    assert run(chain, nodes).node == name(6)


def test_no_filter_plugins_takes_nodes_from_the_start_index():
    seen = []
    chain = chain_of(score_plugin("S", seen=seen))
    nodes = table(200)
    chain.next_start_node_index = 150
    d = run(chain, nodes)
    assert seen == [name(i) for i in [*range(150, 200), *range(0, 50)]]  # 100 nodes
    assert d.evaluated == 100 and chain.next_start_node_index == 50


# ---------------------------------------------------------------- FitError message

@pytest.mark.parametrize("n, failures, prefilter, post, want", [
    (12, {"X": 10, "Y": 2}, None, "", "0/12 nodes are available: 10 X, 2 Y."),  # "10 X" < "2 Y"
    (3, {"b": 1, "a": 2}, None, "", "0/3 nodes are available: 1 b, 2 a."),  # sorted as strings
    (5, {}, "pod has unbound immediate PersistentVolumeClaims", "",
     "0/5 nodes are available: pod has unbound immediate PersistentVolumeClaims."),
    (1, {"Insufficient cpu": 1}, None,
     "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
     "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
     "1 No preemption victims found for incoming pod."),
])
def test_fit_error_message_format(n, failures, prefilter, post, want):
    assert fit_error_message(n, failures, prefilter, post) == want


def test_fit_error_histogram_counts_a_node_once_per_reason():
    both = {name(0): ["Insufficient cpu", "Insufficient memory"], name(1): "Insufficient memory",
            name(2): "Insufficient memory"}
    taint = {name(3): "node(s) had untolerated taint {dedicated: gpu}", name(4): "node(s) were unschedulable"}
    chain = chain_of(filter_plugin("Taints", taint, code=UNRESOLVABLE), filter_plugin("Fit", both),
                     score_plugin("S"))
    d = run(chain, table(5))
    assert not d.scheduled
    assert d.message == ("0/5 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint "
                         "{dedicated: gpu}, 1 node(s) were unschedulable, 3 Insufficient memory.")
    assert d.status.is_rejected and d.status.message() == d.message
    assert d.failures == {"Insufficient cpu": 1, "Insufficient memory": 3,
                          "node(s) had untolerated taint {dedicated: gpu}": 1, "node(s) were unschedulable": 1}
    assert d.unschedulable_plugins == {"Taints", "Fit"}
    assert (d.evaluated, d.feasible, d.num_all_nodes) == (5, 0, 5)


def test_fit_error_ten_before_two():
    reject = {name(i): ("X" if i < 10 else "Y") for i in range(12)}
    d = run(chain_of(filter_plugin("F", reject), score_plugin("S")), table(12))
    assert d.message == "0/12 nodes are available: 10 X, 2 Y."


def test_post_filter_message_is_appended():
    class Post(PostFilterPlugin):
        NAME = "Post"

        def post_filter(self, state, pod, nodes, statuses):
            return Status.unschedulable("preemption: not eligible due to preemptionPolicy=Never."), None

    d = run(chain_of(filter_plugin("F", lambda n: "X"), Post), table(2))
    assert d.message == "0/2 nodes are available: 2 X. preemption: not eligible due to preemptionPolicy=Never."


def test_no_nodes():
    d = run(chain_of(filter_plugin("F"), score_plugin("S")), table(0))
    assert not d.scheduled
    assert d.status.code == UNRESOLVABLE and d.message == NO_NODES == "no nodes available to schedule pods"


# ---------------------------------------------------------------- PreFilter

def test_prefilter_rejection_replaces_the_histogram_and_skips_filters():
    seen = []
    pf = prefilter_plugin("Vol", Status.unschedulable("pod has unbound immediate PersistentVolumeClaims",
                                                      unresolvable=True))
    d = run(chain_of(pf, filter_plugin("F", seen=seen), score_plugin("S")), table(5))
    assert d.message == "0/5 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    assert d.status.code == UNRESOLVABLE and d.status.plugin == "Vol"
    assert d.unschedulable_plugins == {"Vol"} and seen == []
    assert d.failures == {"pod has unbound immediate PersistentVolumeClaims": 5}


def test_prefilter_rejection_joins_reasons():
    pf = prefilter_plugin("P", Status.unschedulable("a", "b"))
    assert run(chain_of(pf), table(2)).message == "0/2 nodes are available: a, b."


def test_unschedulable_prefilter_still_runs_later_prefilters():
    calls = []
    first = prefilter_plugin("First", Status.unschedulable("first says no"), calls=calls)
    second = prefilter_plugin("Second", calls=calls, result={name(0)})
    d = run(chain_of(first, second, filter_plugin("F")), table(3))
    assert calls == ["First", "Second"]
    assert d.message == "0/3 nodes are available: first says no."
    assert d.status.code == UNSCHED and d.unschedulable_plugins == {"First", "Second"}


def test_unresolvable_prefilter_after_unschedulable_wins_and_stops():
    calls = []
    chain = chain_of(prefilter_plugin("A", Status.unschedulable("soft"), calls=calls),
                     prefilter_plugin("B", Status.unschedulable("hard", unresolvable=True), calls=calls),
                     prefilter_plugin("C", calls=calls))
    d = run(chain, table(3))
    assert calls == ["A", "B"]
    assert d.message == "0/3 nodes are available: hard." and d.status.code == UNRESOLVABLE
    assert d.unschedulable_plugins == {"B"}


def test_prefilter_skip_disables_only_that_plugins_filter():
    seen_a, seen_b = [], []

    class A(PreFilterPlugin, FilterPlugin):
        NAME = "A"

        def pre_filter(self, state, pod, nodes):
            return Status.skip(), None

        def filter(self, state, pod, nodes, rows):
            seen_a.extend(rows)
            return FilterResult.from_mask(np.zeros(len(rows), dtype=bool), "A rejects all")

    d = run(chain_of(A, filter_plugin("B", seen=seen_b), score_plugin("S")), table(4))
    assert d.scheduled and seen_a == [] and len(seen_b) == 4


def test_prefilter_result_narrows_the_scan_and_absent_nodes_get_a_reason():
    seen = []
    pf = prefilter_plugin("NodeAffinity", result={name(1), name(3), "ghost"})  # unknown names are ignored
    chain = chain_of(pf, filter_plugin("F", lambda n: "Insufficient cpu", seen=seen), score_plugin("S"))
    d = run(chain, table(5))
    assert sorted(seen) == [name(1), name(3)]
    assert d.message == ("0/5 nodes are available: 2 Insufficient cpu, "
                         "3 node(s) didn't satisfy plugin(s) [NodeAffinity].")
    assert d.unschedulable_plugins == {"NodeAffinity", "F"}
    assert d.status.is_rejected


def test_prefilter_results_intersect_and_feasible_nodes_come_from_the_intersection():
    seen = []
    chain = chain_of(prefilter_plugin("P1", result={name(0), name(1), name(2)}),
                     prefilter_plugin("P2", result={name(1), name(2), name(4)}),
                     filter_plugin("F"), score_plugin("S", seen=seen))
    d = run(chain, table(6))
    assert sorted(seen) == [name(1), name(2)] and d.node in (name(1), name(2))


def test_prefilter_empty_intersection_names_the_plugins_sorted():
    chain = chain_of(prefilter_plugin("Zeta", result={name(0)}), prefilter_plugin("Alpha", result={name(1)}),
                     filter_plugin("F"))
    d = run(chain, table(3))
    assert d.message == "0/3 nodes are available: node(s) didn't satisfy plugin(s) [Alpha Zeta] simultaneously."
    assert d.status.code == UNRESOLVABLE and d.unschedulable_plugins == {"Alpha", "Zeta"}


def test_prefilter_empty_result_from_one_plugin():
    d = run(chain_of(prefilter_plugin("NodeAffinity", result=set()), filter_plugin("F")), table(3))
    assert d.message == "0/3 nodes are available: node(s) didn't satisfy plugin NodeAffinity."


def test_prefilter_narrowing_plugin_is_unschedulable_plugin_even_without_cut():
    pf = prefilter_plugin("P", result={name(0), name(1)})
    d = run(chain_of(pf, filter_plugin("F", lambda n: "X")), table(2))
    assert d.message == "0/2 nodes are available: 2 X."
    assert d.unschedulable_plugins == {"P", "F"}


def test_sample_size_follows_the_narrowed_node_list():
    """upstream findNodesThatPassFilters sizes numNodesToFind from the PreFilterResult nodes."""
    seen = []
    pf = prefilter_plugin("P", result={name(i) for i in range(200)})
    chain = chain_of(pf, filter_plugin("F"), score_plugin("S", seen=seen))
    d = run(chain, table(1000))
    assert len(seen) == 100  # numFeasibleNodesToFind(200) = 100, not numFeasibleNodesToFind(1000) = 420
    assert d.evaluated == 100
    assert chain.next_start_node_index == 100  # advanced modulo all 1000 nodes


# ---------------------------------------------------------------- Filter order

def test_first_failing_plugin_decides_and_later_plugins_never_see_the_node():
    seen_b = []
    a = filter_plugin("A", {name(0): "A says no", name(1): "A says no"})
    b = filter_plugin("B", {name(1): "B says no", name(2): "B says no"}, seen=seen_b)
    d = run(chain_of(a, b, score_plugin("S")), table(4))
    assert seen_b == [name(2), name(3)]
    assert d.node == name(3)
    assert d.failures == {"A says no": 2, "B says no": 1}


def test_per_row_codes_are_accepted():
    class Mixed(FilterPlugin):
        NAME = "Mixed"

        def filter(self, state, pod, nodes, rows):
            passed = np.zeros(len(rows), dtype=bool)
            codes = np.array([UNSCHED, UNRESOLVABLE][:len(rows)], dtype=np.int8)
            return FilterResult(passed, codes, [("r", np.ones(len(rows), dtype=bool))])

    d = run(chain_of(Mixed), table(2))
    assert d.message == "0/2 nodes are available: 2 r." and d.status.is_rejected


# ---------------------------------------------------------------- scoring

def test_one_feasible_node_is_chosen_without_scoring():
    called = []
    chain = chain_of(filter_plugin("F", lambda n: None if n == name(2) else "no"),
                     score_plugin("S", seen=called, pre_score=Status.error("must not run")))
    d = run(chain, table(4))
    assert d.node == name(2) and called == []
    assert (d.evaluated, d.feasible) == (4, 1) and d.status.is_success


def test_weights_multiply_normalized_scores():
    # raw A: n0 10, n1 5, n2 0 -> normalized x10 ; B: n0 0, n1 40, n2 30
    a = score_plugin("A", {name(0): 10, name(1): 5, name(2): 0}, normalize=lambda s: s * 10)
    b = score_plugin("B", {name(0): 0, name(1): 40, name(2): 30})
    d = run(chain_of(filter_plugin("F"), (a, 2), (b, 3)), table(3))
    # totals: n0 100*2 + 0*3 = 200; n1 50*2 + 40*3 = 220; n2 0 + 90 = 90
    assert d.node == name(1)
    assert [(s.node, s.total) for s in d.top] == [(name(1), 220), (name(0), 200), (name(2), 90)]
    assert d.top[0].plugins == {"A": (50, 100), "B": (40, 120)}
    assert d.feasible == 3


@pytest.mark.parametrize("bad", [101, -1])
def test_out_of_range_normalized_score_is_an_error(bad):
    s = score_plugin("Bad", {name(0): bad, name(1): 0})
    d = run(chain_of(filter_plugin("F"), s), table(2))
    assert not d.scheduled and d.status.code == Code.ERROR
    assert d.message == (f'plugin "Bad" returns an invalid score {bad}, it should in the range of '
                         "[0, 100] after normalizing")
    assert d.status.plugin == "Bad" and d.unschedulable_plugins == set()


def test_prescore_skip_disables_the_coupled_score():
    seen = []
    skipped = score_plugin("Skipped", {name(1): 100}, seen=seen, pre_score=Status.skip())
    picks = Counter(run(chain_of(filter_plugin("F"), skipped), table(3), seed=s).node for s in range(20))
    assert seen == [] and set(picks) == {name(0)}  # every node scores 0: the tie goes to the first


def test_ties_go_to_the_root_of_upstreams_heap_whatever_the_seed():
    """v1.37.1 heap-sorts the scores (no random key without extenders) and pops the root."""
    tie = score_plugin("S", {name(1): 50, name(2): 50, name(3): 50, name(4): 50, name(0): 10})
    picks = Counter(schedule_one(chain_of(filter_plugin("F"), tie), POD, table(5), random.Random(s)).node
                    for s in range(50))
    assert picks == {name(1): 50}
    # heap.Init sifts n0003 up past n0001 into the root's left child, then into the root
    late = score_plugin("S", {name(0): 1, name(1): 2, name(2): 10, name(3): 10})
    assert {run(chain_of(filter_plugin("F"), late), table(4), seed=s).node for s in range(20)} == {name(3)}


def test_a_single_best_node_always_wins():
    best = score_plugin("S", {name(3): 100, name(1): 99})
    chain = chain_of(filter_plugin("F"), best)
    assert {run(chain, table(5), seed=s).node for s in range(20)} == {name(3)}


# ---------------------------------------------------------------- errors never escape

@pytest.mark.parametrize("point", ["pre_filter", "filter", "pre_score", "score", "normalize", "score_length"])
def test_plugin_exception_becomes_error_status(point):
    d = run(chain_of(raising(point)), table(3))
    assert not d.scheduled and d.status.code == Code.ERROR
    assert d.unschedulable_plugins == set()
    if point != "score_length":
        assert f"Boom: {point} exploded" in d.message


def test_filter_error_result_aborts_the_cycle():
    chain = chain_of(filter_plugin("F", error_on=name(1)), score_plugin("S"))
    d = run(chain, table(3))
    assert d.status.code == Code.ERROR and d.status.plugin == "F"
    assert d.message == 'running "F" filter plugin: F broke'  # upstream's wording


def test_prescore_error_aborts_the_cycle():
    chain = chain_of(filter_plugin("F"), score_plugin("S", pre_score=Status.error("no state")))
    d = run(chain, table(3))
    assert d.status.code == Code.ERROR and d.status.plugin == "S"


def test_prefilter_error_status_aborts_the_cycle():
    chain = chain_of(prefilter_plugin("P", Status.error("lister failed")), filter_plugin("F"))
    d = run(chain, table(3))
    assert d.status.code == Code.ERROR and d.status.plugin == "P"
    assert d.message == 'running PreFilter plugin "P": lister failed'


def test_pod_with_parse_error_is_unschedulable_with_the_reason():
    bad = parse_pod({"metadata": {"name": "bad", "namespace": "default"},
                     "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}})
    seen = []
    d = run(chain_of(filter_plugin("F", seen=seen), score_plugin("S")), table(3), pod=bad)
    assert not d.scheduled and d.status.is_rejected and d.status.code != Code.ERROR
    assert d.unschedulable_plugins == {POD_SPEC}  # waits for its own update, not retried blindly
    assert d.message.startswith("0/3 nodes are available: invalid pod spec: "
                                "spec.containers[0].resources.requests.cpu: ")
    assert d.message.endswith(".") and seen == []


# ---------------------------------------------------------------- the whole cycle: PostFilter, nominations

def test_post_filter_gets_every_evaluated_nodes_status_and_the_absent_status():
    seen = {}

    class Post(PostFilterPlugin):
        NAME = "Post"

        def post_filter(self, state, pod, nodes, statuses):
            seen.update({n: (s.code, s.reasons, s.plugin) for n, s in statuses.items()})
            seen["absent"] = statuses.get("not-a-node")
            seen["candidates"] = statuses.nodes_for_preemption(nodes.names)
            return Status.success(), name(1)

    narrow = prefilter_plugin("Narrow", result={name(0), name(1), name(2)})
    taint = filter_plugin("Taint", {name(0): "node(s) had untolerated taint(s)"}, code=UNRESOLVABLE)
    fit = filter_plugin("Fit", {name(1): ["Insufficient cpu", "Insufficient memory"], name(2): "Insufficient cpu"})
    d = run(chain_of(narrow, taint, fit, Post), table(4))
    assert not d.scheduled and d.nominated_node == name(1)
    assert seen[name(0)] == (UNRESOLVABLE, ("node(s) had untolerated taint(s)",), "Taint")
    assert seen[name(1)] == (UNSCHED, ("Insufficient cpu", "Insufficient memory"), "Fit")
    assert seen[name(2)] == (UNSCHED, ("Insufficient cpu",), "Fit")
    assert name(3) not in seen  # excluded by PreFilter: the absent-node status
    assert seen["absent"].code == UNRESOLVABLE
    assert seen["absent"].reasons == ("node(s) didn't satisfy plugin(s) [Narrow]",)
    assert seen["candidates"] == [name(1), name(2)]  # only Unschedulable nodes may be preempted on
    assert d.unschedulable_plugins == {"Narrow", "Taint", "Fit"}


def test_nominated_node_is_tried_first_and_taken_without_scoring():
    scored = []
    nominated = parse_pod({"metadata": {"name": "p", "namespace": "default"},
                           "spec": {"containers": [{"name": "c"}]}, "status": {"nominatedNodeName": name(2)}})
    chain = chain_of(filter_plugin("F"), score_plugin("S", {name(0): 100}, seen=scored))
    d = run(chain, table(5), pod=nominated)
    assert d.node == name(2) and d.evaluated == 1 and scored == []
    # when the nominated node does not fit any more, the full scan runs
    chain = chain_of(filter_plugin("F", {name(2): "Insufficient cpu"}), score_plugin("S", {name(0): 100}))
    assert run(chain, table(5), pod=nominated).node == name(0)


def test_nominated_pods_of_higher_or_equal_priority_count_on_their_node():
    from policy_scheduler.framework.queue.nominator import Nominator

    def pod(n, prio, cpu="1"):
        return parse_pod({"metadata": {"name": n, "namespace": "default"},
                          "spec": {"priority": prio, "containers": [
                              {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}})

    class Fit(FilterPlugin):
        NAME = "Fit"

        def filter(self, state, p, nodes, rows):
            free = nodes.allocatable[rows, 0] - nodes.requested[rows, 0]
            return FilterResult.from_mask(free >= p.requests.get("cpu", 0), "Insufficient cpu")

    t = NodeTable()
    t.upsert_node({"metadata": {"name": "only"}, "status": {"allocatable": {"cpu": "1", "pods": "10"}}})
    nom = Nominator()
    nom.add(pod("preemptor", 10), "only")
    chain = chain_of(Fit)
    low = schedule_one(chain, pod("low", 5), t, random.Random(0), nominator=nom)
    assert not low.scheduled and "1 Insufficient cpu" in low.message
    equal = schedule_one(chain, pod("equal", 10), t, random.Random(0), nominator=nom)
    assert not equal.scheduled  # equal priority: the nomination counts too
    higher = schedule_one(chain, pod("higher", 11), t, random.Random(0), nominator=nom)
    assert higher.node == "only"  # a lower-priority nomination does not hold the room
    assert t.requested[0, 0] == 0 and "default/preemptor" not in t.pod_node  # nothing left behind
    assert schedule_one(chain, pod("preemptor", 10), t, random.Random(0), nominator=nom).node == "only"


def test_filter_reading_missing_prefilter_state_is_an_error_not_a_rejection():
    """Regression: PodTopologySpread disabled at preFilter used to report its internal error as
    a per-node reason ("0/3 nodes are available: 3 reading ... not found.")."""
    from policy_scheduler.plugins import default_registry

    chain = build_chain({"plugins": [{"name": "PodTopologySpread"}],
                         "disabled": [{"name": "PodTopologySpread", "point": "preFilter"}]}, default_registry())
    d = run(chain, table(3))
    assert d.status.code == Code.ERROR and d.status.plugin == "PodTopologySpread"
    assert d.message.startswith('running "PodTopologySpread" filter plugin: reading ')
    assert "nodes are available" not in d.message and d.unschedulable_plugins == set()


def test_an_exception_keeps_the_plugins_name():
    d = run(chain_of(raising("filter", name="Exploder")), table(3))
    assert d.status.plugin == "Exploder"
    assert d.message == 'running "Exploder" filter plugin: Boom: filter exploded'


# ---------------------------------------------------------------- a PreFilter rejection, then PostFilter
# upstream findNodesThatFitPod: a rejection at PreFilter is a FitError whose NodeToStatus has no
# evaluated node and the rejection as the absent-node status; schedulingAlgorithm then runs the
# PostFilter plugins on it, as after Filter.

def preemption_chain(*plugins):
    from policy_scheduler.plugins.default_preemption import DefaultPreemption

    return chain_of(*plugins, DefaultPreemption)


def prio_pod(name_, prio, *, policy=None, nominated=None):
    spec = {"priority": prio, "containers": [{"name": "c"}]}
    if policy:
        spec["preemptionPolicy"] = policy
    return parse_pod({"metadata": {"name": name_, "namespace": "default", "uid": name_}, "spec": spec,
                      "status": {"nominatedNodeName": nominated} if nominated else {}})


def preemption_result(chain, nodes, pod):
    from policy_scheduler.framework.interface import CycleState
    from policy_scheduler.plugins.default_preemption import RESULT_KEY

    state = CycleState()
    d = schedule_one(chain, pod, nodes, random.Random(0), state)
    return d, state.read(RESULT_KEY)


MISSING_PVC = Status.unschedulable('persistentvolumeclaim "x" not found', unresolvable=True)


def test_prefilter_rejection_runs_post_filter_with_every_node_absent():
    seen = {}

    class Post(PostFilterPlugin):
        NAME = "Post"

        def post_filter(self, state, pod, nodes, statuses):
            seen["explicit"] = dict(statuses.items())
            seen["absent"] = statuses.get(name(0))
            seen["candidates"] = statuses.nodes_for_preemption(nodes.names)
            return Status.unschedulable("post says"), None

    filtered = []
    d = run(chain_of(prefilter_plugin("VolumeRestrictions", MISSING_PVC), filter_plugin("F", seen=filtered), Post),
            table(3))
    assert seen["explicit"] == {} and filtered == []
    absent = seen["absent"]
    assert (absent.code, absent.reasons, absent.plugin) == (
        UNRESOLVABLE, ('persistentvolumeclaim "x" not found',), "VolumeRestrictions")
    assert seen["candidates"] == []
    assert d.message == '0/3 nodes are available: persistentvolumeclaim "x" not found. post says'
    assert d.status.code == UNRESOLVABLE and d.status.message() == d.message
    assert d.unschedulable_plugins == {"VolumeRestrictions"} and d.nominated_node is None


def test_unresolvable_prefilter_rejection_preemption_is_not_helpful():
    """kube-scheduler v1.37.1, default profile, a pod whose PVC does not exist, 7 nodes."""
    d, res = preemption_result(preemption_chain(prefilter_plugin("VolumeRestrictions", MISSING_PVC)), table(7),
                               prio_pod("p", 100))
    assert d.message == ('0/7 nodes are available: persistentvolumeclaim "x" not found. preemption: '
                         '0/7 nodes are available: 7 Preemption is not helpful for scheduling.')
    assert d.unschedulable_plugins == {"VolumeRestrictions"} and d.status.code == UNRESOLVABLE
    # no candidate: upstream's PostFilterResult clears a nomination ("") and preempts nothing
    assert d.nominated_node is None and res.nominated_node == "" and res.victims == [] and res.dry_runs == 0


def test_unresolvable_prefilter_rejection_of_a_nominated_pod_clears_its_nomination():
    """The nominated node is not tried first (upstream returns before evaluateNominatedNode); its
    status is the absent one, UnschedulableAndUnresolvable, so the pod may preempt elsewhere, and
    with no candidate the nomination is cleared."""
    seen = []
    nodes = table(3)
    nodes.add_pod(prio_pod("low", 1), name(1))
    d, res = preemption_result(preemption_chain(prefilter_plugin("VolumeRestrictions", MISSING_PVC),
                                                filter_plugin("F", seen=seen)), nodes,
                               prio_pod("p", 100, nominated=name(1)))
    assert seen == []
    assert d.message == ('0/3 nodes are available: persistentvolumeclaim "x" not found. preemption: '
                         '0/3 nodes are available: 3 Preemption is not helpful for scheduling.')
    assert res.nominated_node == "" and d.nominated_node is None


def test_prefilter_rejection_of_a_pod_that_may_not_preempt():
    d, res = preemption_result(preemption_chain(prefilter_plugin("VolumeRestrictions", MISSING_PVC)), table(2),
                               prio_pod("p", 100, policy="Never", nominated=name(0)))
    assert d.message == ('0/2 nodes are available: persistentvolumeclaim "x" not found. '
                         'preemption: not eligible due to preemptionPolicy=Never.')
    assert res.nominated_node is None  # upstream: a nil PostFilterResult leaves the nomination as it is


def test_empty_prefilter_intersection_runs_post_filter_too():
    chain = preemption_chain(prefilter_plugin("Zeta", result={name(0)}), prefilter_plugin("Alpha", result={name(1)}))
    d, _ = preemption_result(chain, table(3), prio_pod("p", 100))
    assert d.message == ("0/3 nodes are available: node(s) didn't satisfy plugin(s) [Alpha Zeta] simultaneously. "
                         "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
    assert d.unschedulable_plugins == {"Alpha", "Zeta"}


def test_unschedulable_prefilter_rejection_lets_preemption_try_every_node():
    """An Unschedulable PreFilter status is every node's status, so upstream's NodesForStatusCode
    gives every node to the dry run; a node without lower-priority pods has no victims."""
    chain = preemption_chain(prefilter_plugin("Quota", Status.unschedulable("over quota")), filter_plugin("F"))
    d, res = preemption_result(chain, table(3), prio_pod("p", 100))
    assert d.message == ("0/3 nodes are available: over quota. preemption: 0/3 nodes are available: "
                         "3 No preemption victims found for incoming pod.")
    assert d.status.code == UNSCHED and d.unschedulable_plugins == {"Quota"}
    assert res.dry_runs == 3 and res.nominated_node == ""


def test_unschedulable_prefilter_rejection_dry_run_asks_the_filters_only():
    """Upstream's dry run does not run PreFilter again: on a node whose lower-priority pods are
    removed the Filters decide, and the PreFilter's Unschedulable verdict does not count there."""

    class Room(FilterPlugin):
        NAME = "Room"

        def filter(self, state, pod, nodes, rows):  # room for one pod per node
            return FilterResult.from_mask(np.array([len(nodes.pods[int(r)]) == 0 for r in rows]), "no room")

    nodes = table(3)
    nodes.add_pod(prio_pod("low", 1), name(1))
    nodes.add_pod(prio_pod("high", 1000), name(2))
    chain = preemption_chain(prefilter_plugin("Quota", Status.unschedulable("over quota")), Room)
    d, res = preemption_result(chain, nodes, prio_pod("p", 100))
    assert d.message == ("0/3 nodes are available: over quota. preemption: found a potential placement for pod "
                         "on node n0001, preempting 1 victims")
    assert d.nominated_node == name(1) and res.victim_keys == ["default/low"]
    assert d.unschedulable_plugins == {"Quota"}
    # with only the pod that may not be preempted: no candidate
    nodes.remove_pod("default/low")
    d, res = preemption_result(chain, nodes, prio_pod("p", 100))
    assert d.message == ("0/3 nodes are available: over quota. preemption: 0/3 nodes are available: "
                         "3 No preemption victims found for incoming pod.")


def test_unschedulable_prefilter_with_node_sets_names_them_too():
    chain = preemption_chain(prefilter_plugin("Quota", Status.unschedulable("over quota")),
                             prefilter_plugin("Narrow", result={name(0)}))
    d, _ = preemption_result(chain, table(2), prio_pod("p", 100))
    assert d.message.startswith("0/2 nodes are available: over quota. preemption: ")
    assert d.unschedulable_plugins == {"Quota", "Narrow"}


def test_pending_from_prefilter_is_an_error():
    """upstream RunPreFilterPlugins: only Unschedulable and UnschedulableAndUnresolvable reject."""
    d = run(chain_of(prefilter_plugin("P", Status(Code.PENDING, ("later",))), filter_plugin("F")), table(2))
    assert d.status.code == Code.ERROR and d.message == 'running PreFilter plugin "P": later'
    assert d.unschedulable_plugins == set() and d.pending_plugins == set()


def test_prefilter_rejection_keeps_nominated_pods_out_of_the_table():
    from policy_scheduler.framework.queue.nominator import Nominator

    nodes = table(2)
    nom = Nominator()
    nom.add(prio_pod("other", 500), name(0))
    for chain in (chain_of(prefilter_plugin("V", MISSING_PVC)),
                  preemption_chain(prefilter_plugin("V", MISSING_PVC))):
        d = schedule_one(chain, prio_pod("p", 100), nodes, random.Random(0), nominator=nom)
        assert not d.scheduled and "default/other" not in nodes.pod_node
    assert chain.next_start_node_index == 0  # no node was scanned


# ---------------------------------------------------------------- PostFilter outcomes (upstream RunPostFilterPlugins)

def post_plugin(name_, status, calls):
    class Post(PostFilterPlugin):
        NAME = name_

        def post_filter(self, state, pod, nodes, statuses):
            calls.append(name_)
            return status, None
    return Post


def test_post_filter_error_status_ends_postfilter_and_the_pod_stays_unschedulable():
    """upstream: an Error from a PostFilter plugin stops the others; schedulingAlgorithm puts its
    message after the FitError's and returns Unschedulable (no nomination change)."""
    calls = []
    chain = chain_of(filter_plugin("F", lambda n: "X"), post_plugin("A", Status.unschedulable("a says"), calls),
                     post_plugin("B", Status.error("b broke"), calls), post_plugin("C", Status.success(), calls))
    d = run(chain, table(2))
    assert calls == ["A", "B"]
    assert d.message == "0/2 nodes are available: 2 X. b broke"
    assert d.status.code == UNSCHED and d.unschedulable_plugins == {"F"} and d.nominated_node is None


def test_post_filter_unresolvable_status_ends_postfilter_with_its_message():
    calls = []
    chain = chain_of(filter_plugin("F", lambda n: "X"), post_plugin("A", Status.unschedulable("a says"), calls),
                     post_plugin("B", Status.unschedulable("b is final", unresolvable=True), calls),
                     post_plugin("C", Status.unschedulable("c says"), calls))
    d = run(chain, table(2))
    assert calls == ["A", "B"] and d.message == "0/2 nodes are available: 2 X. b is final"


def test_post_filter_that_raises_aborts_the_cycle():
    class Raiser(PostFilterPlugin):
        NAME = "Raiser"

        def post_filter(self, state, pod, nodes, statuses):
            raise Boom("exploded")

    d = run(chain_of(filter_plugin("F", lambda n: "X"), Raiser), table(2))
    assert d.status.code == Code.ERROR and d.message == 'running PostFilter plugin "Raiser": Boom: exploded'


def test_post_filter_reading_state_its_prefilter_never_wrote():
    """kube-scheduler v1.37.1's default profile has DynamicResources, whose PreFilter comes after the
    volume plugins' and whose PostFilter, before DefaultPreemption, reads the state its PreFilter
    writes: after an UnschedulableAndUnresolvable rejection at an earlier PreFilter that state is
    missing, its PostFilter errs with "not found" and preemption never runs."""
    from policy_scheduler.framework.interface import CycleState
    from policy_scheduler.plugins.default_preemption import RESULT_KEY, DefaultPreemption

    class Stateful(PreFilterPlugin, PostFilterPlugin):
        NAME = "Stateful"

        def pre_filter(self, state, pod, nodes):
            state.write("stateful", True)
            return Status.skip(), None

        def post_filter(self, state, pod, nodes, statuses):
            if state.read("stateful") is None:
                return Status.error("not found"), None
            return Status.unschedulable(), None

    chain = chain_of(prefilter_plugin("VolumeRestrictions", MISSING_PVC), Stateful, DefaultPreemption)
    state = CycleState()
    d = schedule_one(chain, prio_pod("p", 100), table(7), random.Random(0), state)
    assert d.message == '0/7 nodes are available: persistentvolumeclaim "x" not found. not found'
    assert d.status.code == UNRESOLVABLE and d.unschedulable_plugins == {"VolumeRestrictions"}
    assert state.read(RESULT_KEY) is None  # no preemption: the nomination stays as it is
    # with the state written (a rejection at Filter) preemption runs after it
    chain = chain_of(Stateful, filter_plugin("F", lambda n: "X", code=UNRESOLVABLE), DefaultPreemption)
    d = run(chain, table(7), pod=prio_pod("p", 100))
    assert d.message == ("0/7 nodes are available: 7 X. preemption: 0/7 nodes are available: "
                         "7 Preemption is not helpful for scheduling.")
