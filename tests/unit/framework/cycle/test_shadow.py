"""framework/cycle/shadow.py: which candidates take the shared way, the shared and the full way
agreeing on real plugins (NodeResourcesFit, PodTopologySpread, NodeAffinity), ties counting as
agreement, an identical candidate never changing a decision, a candidate that rejects every
node, and the plugins named as having moved a changed decision."""

from __future__ import annotations

import random

import pytest

from policy_scheduler.policy.chain import ChainSpec, build_chain
from policy_scheduler.framework.cycle.schedule import SCORES_KEY, schedule_one
from policy_scheduler.framework.cycle.shadow import Shadow, shares_filters
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.plugins import default_registry

HOSTNAME = "kubernetes.io/hostname"
SPREAD = {"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway",
          "labelSelector": {"matchLabels": {"app": "a"}}}


def node(name, labels=None):
    return {"metadata": {"name": name, "labels": {HOSTNAME: name, **(labels or {})}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


def pod(name, cpu="1", app="a", spread=True):
    spec = {"containers": [{"name": "c", "image": "i",
                            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    if spread:
        spec["topologySpreadConstraints"] = [SPREAD]
    return parse_pod({"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"app": app}},
                      "spec": spec})


def loaded_table() -> NodeTable:
    """n0 holds three app=a pods (6 of 8 cpu), n1 one (2 cpu), n2 nothing, n3 one pod of
    another app (1 cpu): binpacking prefers n0, spreading app=a prefers n3 (no app=a pod, a
    little fuller than n2)."""
    t = NodeTable()
    for n in ("n0", "n1", "n2", "n3"):
        t.upsert_node(node(n))
    for i in range(3):
        t.add_pod(pod(f"e0-{i}", "2"), "n0")
    t.add_pod(pod("e1", "2"), "n1")
    t.add_pod(pod("e3", "1", app="b", spread=False), "n3")
    return t


def spec(fit_weight=5, spread_weight=1, strategy="MostAllocated", extra=()):
    return {"plugins": [{"name": "NodeResourcesFit", "weight": fit_weight,
                         "args": {"scoringStrategy": {"type": strategy}}},
                        {"name": "PodTopologySpread", "weight": spread_weight}, *extra]}


def chain(s):
    return build_chain(s, default_registry())


BINPACK = spec(5, 1)


def stable_cycle(stable, p, table, seed=0):
    """The stable chain's cycle for ``p``: its decision and the CycleState it wrote."""
    state = CycleState()
    return schedule_one(stable, p, table, random.Random(seed), state), state


def compare(stable_spec, candidate_spec, p, table, shared=None, **kw):
    stable, candidate = chain(stable_spec), chain(candidate_spec)
    if shared is None:
        shared = shares_filters(ChainSpec.model_validate(stable_spec), ChainSpec.model_validate(candidate_spec))
    d, state = stable_cycle(stable, p, table)
    return Shadow(stable, candidate, shared).compare(p, table, state, d, **kw), d


# ------------------------------------------------------------------ shares_filters
def _cs(s):
    return ChainSpec.model_validate(s)


def test_shares_filters_only_when_weights_alone_differ():
    assert shares_filters(_cs(BINPACK), _cs(spec(1, 5)))
    assert shares_filters(_cs(BINPACK), _cs(BINPACK))
    assert not shares_filters(_cs(BINPACK), _cs(spec(5, 1, strategy="LeastAllocated")))  # args differ
    swapped = {"plugins": list(reversed(BINPACK["plugins"]))}
    assert not shares_filters(_cs(BINPACK), _cs(swapped))  # same plugins, another order
    assert not shares_filters(_cs(BINPACK), _cs(spec(extra=[{"name": "TaintToleration"}])))
    assert not shares_filters(_cs(BINPACK), _cs({**BINPACK, "disabled": [{"name": "PodTopologySpread",
                                                                          "point": "score"}]}))
    assert not shares_filters(_cs(BINPACK), _cs({**BINPACK, "percentageOfNodesToScore": 50}))


# ------------------------------------------------------------------ the two ways
def test_the_stable_binpack_chain_picks_the_fullest_node():
    d, state = stable_cycle(chain(BINPACK), pod("p"), loaded_table())
    assert d.node == "n0"
    feasible, total, mat, scored = state.read(SCORES_KEY)
    assert len(feasible) == 4 and mat.shape == (2, 4)
    assert scored == [("NodeResourcesFit", 5), ("PodTopologySpread", 1)]


@pytest.mark.parametrize("candidate", [spec(1, 5), spec(5, 10), spec(1, 1), spec(5, 1)],
                         ids=["swapped", "spread-up", "fit-down", "identical"])
def test_the_shared_and_the_full_way_agree(candidate):
    t = loaded_table()
    p = pod("p")
    shared, _ = compare(BINPACK, candidate, p, t, shared=True)
    full, _ = compare(BINPACK, candidate, p, t, shared=False)
    assert shares_filters(_cs(BINPACK), _cs(candidate))
    assert (shared.stable, shared.candidate, shared.changed) == (full.stable, full.candidate, full.changed)
    assert shared.plugins == full.plugins
    assert shared.stable == "n0"
    if candidate == BINPACK:
        assert not shared.changed and shared.candidate == "n0" and shared.plugins == []
    else:  # a spread-heavier candidate leaves the fullest node for the one without app=a pods
        assert shared.changed and shared.candidate == "n3"


def test_plugins_name_the_plugin_whose_weight_moved_the_decision():
    t = loaded_table()
    p = pod("p")
    up, _ = compare(BINPACK, spec(5, 10), p, t)  # only PodTopologySpread's weight moved
    down, _ = compare(BINPACK, spec(1, 1), p, t)  # only NodeResourcesFit's weight moved
    both, _ = compare(BINPACK, spec(1, 5), p, t)
    assert up.changed and up.plugins == ["PodTopologySpread"]
    assert down.changed and down.plugins == ["NodeResourcesFit"]
    assert both.changed and set(both.plugins) == {"NodeResourcesFit", "PodTopologySpread"}


def test_a_candidate_with_other_args_takes_the_full_way():
    t = loaded_table()
    p = pod("p")
    spread = spec(5, 1, strategy="LeastAllocated")
    r, d = compare(BINPACK, spread, p, t)
    assert d.node == "n0"
    # LeastAllocated + spreading: the empty n2 (n3 holds a pod, n0 and n1 app=a pods)
    assert r.changed and r.stable == "n0" and r.candidate == "n2"
    # the same weights, other args: NodeResourcesFit's own scores moved it (the stable cycle's
    # scores against the candidate's)
    assert r.plugins == ["NodeResourcesFit"]
    # the stable cycle's scores are not the candidate's: the shared way would not see the change
    wrong, _ = compare(BINPACK, spread, p, t, shared=True)
    assert not wrong.changed


# ------------------------------------------------------------------ ties and identical candidates
def even_table(n=4) -> NodeTable:
    t = NodeTable()
    for i in range(n):
        t.upsert_node(node(f"e{i}"))
    return t


@pytest.mark.parametrize("shared", [True, False])
def test_ties_count_as_agreement(shared):
    """Every node ties: whichever the stable chain took (the recorded one of a replay here) is
    among the candidate's best, so nothing changed whatever the candidate's tie-break."""
    t = even_table()
    p = pod("p")
    for recorded in ("e0", "e1", "e2", "e3"):
        r, _ = compare(BINPACK, spec(1, 5), p, t, shared=shared, stable_node=recorded)
        assert not r.changed and r.stable == recorded and r.candidate == recorded and r.plugins == []


@pytest.mark.parametrize("shared", [True, False])
def test_an_identical_candidate_never_changes_a_decision(shared):
    t = loaded_table()
    for i in range(4):
        t.upsert_node(node(f"x{i}"))  # empty nodes that tie: tie-breaks differ between the two cycles
    stable, candidate = chain(BINPACK), chain(BINPACK)
    shadow = Shadow(stable, candidate, shared, rng=random.Random(99))
    rng = random.Random(1)
    changed = 0
    for i in range(30):
        p = pod(f"p{i}", cpu=str(1 + i % 3), spread=bool(i % 2))
        state = CycleState()
        d = schedule_one(stable, p, t, rng, state)
        r = shadow.compare(p, t, state, d)
        changed += r.changed
        assert r.candidate == d.node
        if d.node is not None:
            t.add_pod(p, d.node)
    assert changed == 0


# ------------------------------------------------------------------ unschedulable on one side
NO_NODE_MATCHES = {"name": "NodeAffinity", "args": {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}}}


def test_a_candidate_that_rejects_every_node_changes_the_decision_to_none():
    t = loaded_table()
    p = pod("p")
    candidate = spec(extra=[NO_NODE_MATCHES])
    assert not shares_filters(_cs(BINPACK), _cs(candidate))
    r, d = compare(BINPACK, candidate, p, t)
    assert d.node == "n0"
    assert r.stable == "n0" and r.candidate is None and r.changed
    assert r.plugins == ["NodeAffinity"]


def test_a_candidate_that_schedules_what_the_stable_chain_cannot():
    t = loaded_table()
    p = pod("p")
    r, d = compare(spec(extra=[NO_NODE_MATCHES]), BINPACK, p, t)
    assert d.node is None
    assert r.stable is None and r.candidate == "n0" and r.changed
    assert r.plugins == ["NodeAffinity"]  # what held the pod back on the stable side


def test_both_unschedulable_is_no_change():
    t = loaded_table()
    p = pod("p")
    for shared in (True, False):
        r, d = compare(spec(extra=[NO_NODE_MATCHES]), spec(1, 5, extra=[NO_NODE_MATCHES]), p, t, shared=shared)
        assert d.node is None
        assert (r.stable, r.candidate, r.changed, r.plugins) == (None, None, False, [])


def test_a_single_feasible_node_is_no_change():
    t = loaded_table()
    t.upsert_node(node("gpu-0", {"pool": "gpu"}))
    p = pod("p")
    stable = spec(extra=[NO_NODE_MATCHES])  # only gpu-0 passes: no scoring
    for shared in (True, False):
        r, d = compare(stable, spec(1, 5, extra=[NO_NODE_MATCHES]), p, t, shared=shared)
        assert d.node == "gpu-0"
        assert (r.stable, r.candidate, r.changed) == ("gpu-0", "gpu-0", False)


def test_a_recorded_node_the_candidate_filters_out_is_a_change():
    """A replay passes the node the pod went to; the candidate rejects it."""
    t = loaded_table()
    t.upsert_node(node("gpu-0", {"pool": "gpu"}))
    t.upsert_node(node("gpu-1", {"pool": "gpu"}))
    r, _ = compare(BINPACK, spec(extra=[NO_NODE_MATCHES]), pod("p"), t, stable_node="n0")
    assert r.changed and r.stable == "n0" and r.candidate in ("gpu-0", "gpu-1")
