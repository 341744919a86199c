"""framework/preemption.py against upstream v1.37 (preemption.go, default_preemption.go and the
cases of their tests): eligibility, the PDB split, victim selection with reprieve, the dry run's
candidate count and early stop, the node pick criterion by criterion, the messages, and the table
restored exactly after every dry run."""

from __future__ import annotations

import random

import pytest

from policy_scheduler.policy.chain import DEFAULT_PLUGINS, build_chain
from policy_scheduler.framework.interface import NodeToStatus
from policy_scheduler.framework.model.labels import LabelSelector
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.queue.nominator import Nominator
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.preemption import (
    MSG_NEVER,
    MSG_NO_VICTIMS,
    MSG_TERMINATING,
    PDB,
    Candidate,
    eligible,
    filter_pods_with_pdb_violation,
    fit_error,
    num_candidates,
    pick_one_node,
    preempt,
    select_victims_on_node,
)
from policy_scheduler.framework.cycle.schedule import NodeFilter
from policy_scheduler.framework.status import Code, Status
from policy_scheduler.plugins import default_registry

UNSCHED, UNRESOLVABLE = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
T0 = "2024-01-01T00:00:00Z"  # start times: T0 < T1 < T2
T1 = "2024-01-01T00:00:01Z"
T2 = "2024-01-02T00:00:00Z"


def pod(name, prio=0, cpu=None, mem=None, *, labels=None, start=None, ns="default", policy=None, nominated=None,
        terminating=False, conditions=None, spread=None):
    req = {}
    if cpu:
        req["cpu"] = cpu
    if mem:
        req["memory"] = mem
    spec = {"priority": prio, "containers": [{"name": "c", "resources": {"requests": req}}]}
    if policy:
        spec["preemptionPolicy"] = policy
    if spread:
        spec["topologySpreadConstraints"] = spread
    meta = {"name": name, "namespace": ns, "uid": name, "labels": labels or {}}
    if terminating:
        meta["deletionTimestamp"] = T2
    status = {}
    if start:
        status["startTime"] = start
    if nominated:
        status["nominatedNodeName"] = nominated
    if conditions:
        status["conditions"] = conditions
    return parse_pod({"metadata": meta, "spec": spec, "status": status})


def node(name, cpu="4", mem="4Gi", pods="110", labels=None):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "status": {"allocatable": {"cpu": cpu, "memory": mem, "pods": pods}}}


def table(nodes, placed=()):
    t = NodeTable()
    for n in nodes:
        t.upsert_node(n)
    for node_name, p in placed:
        t.add_pod(p, node_name)
    return t


def default_chain():
    return build_chain({"plugins": DEFAULT_PLUGINS}, default_registry())


def statuses_from(chain, p, nodes):
    """The NodeToStatus a cycle would hand PostFilter: every node filtered as schedule_one does."""
    nf = NodeFilter(chain)
    return NodeToStatus({nodes.names[r]: st for r in range(nodes.n) if not (st := nf(p, nodes, r)).is_success})


def snapshot(t: NodeTable):
    """Everything the table aggregates, for the before/after comparison."""
    return (t.requested[: t.n].tolist(), t.nonzero[: t.n].tolist(), dict(t.pod_node), set(t.assumed),
            [list(d) for d in t.pods], [dict(d) for d in t.used_ports], [list(d) for d in t.pods_with_affinity],
            {k: dict(v) for k, v in t.required_anti_affinity_terms.items()},
            {k: dict(v) for k, v in t.required_affinity_terms.items()},
            {k: dict(v) for k, v in t.preferred_affinity_terms.items()},
            {k: dict(v) for k, v in t.preferred_anti_affinity_terms.items()})


def run(p, nodes, chain=None, pdbs=(), seed=0, nominator=None, pct=10, ab=100):
    chain = chain or default_chain()
    before = snapshot(nodes)
    res = preempt(p, nodes, statuses_from(chain, p, nodes), list(pdbs), NodeFilter(chain, nominator), pct, ab,
                  random.Random(seed))
    assert snapshot(nodes) == before  # the table is restored exactly
    return res


# ---------------------------------------------------------------- eligibility (TestPodEligibleToPreemptOthers)
PREEMPTED = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]


@pytest.mark.parametrize("victim, nominated_code, want", [
    # "Pod with nominated node": a lower-priority victim terminating by preemption -> wait
    (dict(prio=10, terminating=True, conditions=PREEMPTED), UNSCHED, (False, MSG_TERMINATING)),
    # "Pod with nominated node, but without deletion timestamp"
    (dict(prio=10, conditions=PREEMPTED), UNSCHED, (True, "")),
    # terminating, but not because of the scheduler (no DisruptionTarget condition)
    (dict(prio=10, terminating=True), UNSCHED, (True, "")),
    # DisruptionTarget with another reason
    (dict(prio=10, terminating=True, conditions=[{"type": "DisruptionTarget", "status": "True",
                                                  "reason": "DeletionByTaintManager"}]), UNSCHED, (True, "")),
    # "non-victim Pods terminating": the terminating pod has a higher priority
    (dict(prio=200, terminating=True, conditions=PREEMPTED), UNSCHED, (True, "")),
    # the nominated node is UnschedulableAndUnresolvable now: preempt again elsewhere
    (dict(prio=10, terminating=True, conditions=PREEMPTED), UNRESOLVABLE, (True, "")),
])
def test_eligibility_with_a_nominated_node(victim, nominated_code, want):
    t = table([node("n1")], [("n1", pod("v", **victim))])
    p = pod("p", 100, nominated="n1")
    assert eligible(p, t, Status(nominated_code)) == want


def test_preemption_policy_never_is_not_eligible():
    t = table([node("n1")])
    assert eligible(pod("p", 100, policy="Never"), t, Status(UNSCHED)) == (False, MSG_NEVER)
    assert eligible(pod("p", 100), t, Status(UNSCHED)) == (True, "")


def test_first_disruption_target_condition_decides():
    conds = [{"type": "DisruptionTarget", "status": "False", "reason": "PreemptionByScheduler"}] + PREEMPTED
    assert pod("v", terminating=True, conditions=conds).terminating_by_preemption is False
    assert pod("v", terminating=True, conditions=PREEMPTED).terminating_by_preemption is True
    assert pod("v", start=T0).start_time == T0


# ---------------------------------------------------------------- numCandidates
@pytest.mark.parametrize("n, pct, ab, want", [
    (10, 10, 100, 10), (1000, 10, 100, 100), (5000, 10, 100, 500), (100, 0, 1, 1), (100, 40, 10, 40),
    (3, 100, 0, 3), (499, 10, 0, 49),
])
def test_num_candidates(n, pct, ab, want):
    assert num_candidates(n, pct, ab) == want


# ---------------------------------------------------------------- PDBs (filterPodsWithPDBViolation)
def sel(**labels):
    return LabelSelector.parse({"matchLabels": labels})


def test_pdb_split_keeps_order_and_decrements_per_matching_pod():
    a, b, c = (pod(n, labels={"app": "x"}) for n in "abc")
    other_ns = pod("d", labels={"app": "x"}, ns="other")
    bare = pod("e")
    pdbs = [PDB("default", sel(app="x"), 1)]
    violating, ok = filter_pods_with_pdb_violation([a, b, other_ns, c, bare], pdbs)
    assert [p.name for p in violating] == ["b", "c"]  # the first one uses the one allowed disruption
    assert [p.name for p in ok] == ["a", "d", "e"]


def test_pdb_disrupted_pods_and_empty_or_nil_selectors_do_not_count():
    a, b = pod("a", labels={"app": "x"}), pod("b", labels={"app": "x"})
    assert filter_pods_with_pdb_violation([a, b], [PDB("default", sel(app="x"), 0, frozenset({"a"}))]) == ([b], [a])
    assert filter_pods_with_pdb_violation([a], [PDB("default", LabelSelector.parse({}), 0)]) == ([], [a])
    assert filter_pods_with_pdb_violation([a], [PDB("default", LabelSelector.parse(None), 0)]) == ([], [a])


def test_pdb_from_dict():
    b = PDB.from_dict({"metadata": {"name": "b", "namespace": "ns"},
                       "spec": {"selector": {"matchLabels": {"app": "x"}}},
                       "status": {"disruptionsAllowed": 2, "disruptedPods": {"p1": T0}}})
    assert (b.namespace, b.disruptions_allowed, b.disrupted_pods, b.selector.matches({"app": "x"})) == \
        ("ns", 2, frozenset({"p1"}), True)
    bad = PDB.from_dict({"metadata": {"namespace": "ns"},
                         "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}}})
    assert bad.selector.nothing


# ---------------------------------------------------------------- SelectVictimsOnNode
def victims_on(t, p, row=0, pdbs=(), chain=None):
    nf = NodeFilter(chain or default_chain())
    before = snapshot(t)
    out = select_victims_on_node(p, t, row, list(pdbs), nf)
    assert snapshot(t) == before
    return [v.name for v in out[0]], out[1], out[2]


def test_no_lower_priority_pods_means_no_victims():
    t = table([node("n1", cpu="2")], [("n1", pod("same", 100, "2"))])
    assert victims_on(t, pod("p", 100, "1")) == ([], 0, Status(UNRESOLVABLE, (MSG_NO_VICTIMS,)))


def test_medium_priority_pod_is_preempted_but_the_small_lower_one_stays():
    # upstream "medium priority pod is preempted, but lower priority one stays as it is small"
    t = table([node("n1", cpu="5")], [("n1", pod("low", 10, "1")), ("n1", pod("mid", 50, "3"))])
    names, nv, st = victims_on(t, pod("p", 100, "3"))
    assert st.is_success and names == ["mid"] and nv == 0  # reprieve order: mid first (fails), then low fits


def test_mixed_priority_pods_are_preempted_most_important_first():
    # upstream "mixed priority pods are preempted": victims sorted by importance
    t = table([node("n1", cpu="4")], [("n1", pod("a", 10, "1")), ("n1", pod("b", 30, "1")),
                                      ("n1", pod("c", 20, "1")), ("n1", pod("d", 200, "1"))])
    names, _, st = victims_on(t, pod("p", 100, "3"))
    assert st.is_success and names == ["b", "c", "a"]


def test_equal_priorities_reprieve_the_earlier_started_pod():
    # upstream "mixed priority pods are preempted, pick later StartTime one when priorities are equal"
    t = table([node("n1", cpu="3")], [("n1", pod("late", 10, "1", start=T2)), ("n1", pod("early", 10, "1", start=T0)),
                                      ("n1", pod("nostart", 10, "1"))])
    names, _, st = victims_on(t, pod("p", 100, "2"))
    assert st.is_success and names == ["late", "nostart"]  # the earliest started is the most important


def test_still_not_fitting_after_removing_every_victim_returns_the_filter_status():
    t = table([node("n1", cpu="4")], [("n1", pod("low", 10, "1")), ("n1", pod("high", 200, "2"))])
    names, _, st = victims_on(t, pod("p", 100, "3"))
    assert names == [] and st.code == UNSCHED and st.reasons == ("Insufficient cpu",)
    assert st.plugin == "NodeResourcesFit"


def test_pdb_violating_pods_are_reprieved_first_and_counted():
    # two equal victims; the one covered by an exhausted PDB is tried first and stays
    t = table([node("n1", cpu="2")], [("n1", pod("free", 10, "1", start=T0)),
                                      ("n1", pod("guarded", 10, "1", start=T1, labels={"app": "x"}))])
    pdbs = [PDB("default", sel(app="x"), 0)]
    assert victims_on(t, pod("p", 100, "1"), pdbs=pdbs) == (["free"], 0, Status.success())
    # the preemptor needs both: the violating one is a victim too, and is counted
    names, nv, st = victims_on(t, pod("p", 100, "2"), pdbs=pdbs)
    assert names == ["free", "guarded"] and nv == 1  # re-sorted by importance after the two groups


def test_pod_topology_spread_prefilter_state_is_recomputed():
    # the preemptor's spread (hostname, maxSkew 2) fails on n1 with 2 matching pods while n2 has
    # none but is full of a higher-priority pod; removing both and reprieving one fits: 1 + 1 - 0 <= 2
    spread = [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "x"}}}]
    t = table([node("n1"), node("n2", cpu="1")],
              [("n1", pod("x1", 10, labels={"app": "x"}, start=T0)), ("n1", pod("x2", 10, labels={"app": "x"}, start=T1)),
               ("n2", pod("big", 500, "1"))])
    p = pod("p", 100, "1", labels={"app": "x"}, spread=spread)
    chain = default_chain()
    st = statuses_from(chain, p, t)
    assert st.get("n1").plugin == "PodTopologySpread" and st.get("n1").code == UNSCHED
    assert victims_on(t, p, 0, chain=chain) == (["x2"], 0, Status.success())
    res = run(p, t, chain)
    assert res.status.is_success and res.nominated_node == "n1" and res.victim_keys == ["default/x2"]


def test_assumed_victims_stay_assumed():
    t = table([node("n1", cpu="2")])
    t.add_pod(pod("a", 10, "1"), "n1", assumed=True)
    t.add_pod(pod("b", 10, "1"), "n1")
    assert victims_on(t, pod("p", 100, "1"))[0] in (["a"], ["b"])
    assert t.assumed == {"default/a"}


def test_pod_order_on_the_row_is_restored():
    t = table([node("n1", cpu="3")], [("n1", pod(n, 10, "1")) for n in "abc"])
    victims_on(t, pod("p", 100, "2"))
    assert list(t.pods[0]) == ["default/a", "default/b", "default/c"]


# ---------------------------------------------------------------- pickOneNodeForPreemption (TestPickOneNodeForPreemption)
def cand(node_name, *victims, pdb=0):
    return Candidate(node_name, [pod(f"{node_name}-{i}", prio, start=start) for i, (prio, start) in enumerate(victims)],
                     pdb)


@pytest.mark.parametrize("cands, want", [
    # 1. fewest PDB violations
    ([cand("a", (10, T0), pdb=1), cand("b", (50, T0))], "b"),
    # 2. "node with min highest priority pod is picked"
    ([cand("a", (50, T0), (10, T0)), cand("b", (40, T0), (30, T0), (30, T0))], "b"),
    # 3. "when highest priorities are the same, minimum sum of lower priority pods is picked"
    ([cand("a", (50, T0), (30, T0)), cand("b", (50, T0), (10, T0))], "b"),
    # 3. with the shift a sum over more pods is larger: (50, 10, 10) loses to (50, 30)
    ([cand("a", (50, T0), (30, T0)), cand("b", (50, T0), (10, T0), (10, T0))], "a"),
    # 3. "sum of adjusted priorities is considered": each shifted by 2^31, so fewer negative pods win
    ([cand("a", (-10, T0), (-10, T0)), cand("b", (-10, T0))], "b"),
    # "when highest priority and sum are the same, minimum number of pods is picked" (upstream's
    # case is decided by the shifted sum already: each pod adds 2^31)
    ([cand("a", (50, T0), (20, T0), (0, T0)), cand("b", (50, T0), (20, T0))], "b"),
    # 5. "same priority, same number of victims, different start time for each node's pod"
    ([cand("a", (10, T0), (10, T1)), cand("b", (10, T1), (10, T2))], "b"),
    # 5. only the highest-priority victims' start times count
    ([cand("a", (20, T1), (10, T2)), cand("b", (20, T2), (10, T0))], "b"),
    # 5. a victim that has not started counts as started now (the latest)
    ([cand("a", (10, T2)), cand("b", (10, None))], "b"),
    # 6. still tied: the first candidate
    ([cand("a", (10, T0)), cand("b", (10, T0))], "a"),
    ([cand("only", (10, T0), pdb=3)], "only"),
])
def test_pick_one_node(cands, want):
    assert pick_one_node(cands).node == want


def test_pick_one_node_of_nothing():
    assert pick_one_node([]) is None


# ---------------------------------------------------------------- the dry run and the whole decision
def test_fit_error_text():
    assert fit_error(3, {"a": Status(UNRESOLVABLE, (MSG_NO_VICTIMS,))}) == \
        "0/3 nodes are available: 1 No preemption victims found for incoming pod, " \
        "2 Preemption is not helpful for scheduling."
    assert fit_error(2, {}) == "0/2 nodes are available: 2 Preemption is not helpful for scheduling."


def test_only_unschedulable_nodes_are_tried_and_the_rest_is_not_helpful():
    # n1 Unschedulable (cpu) with no lower-priority pod; n2, n3 untolerated taint (Unresolvable)
    tainted = {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}
    t = table([node("n1", cpu="1"), {**node("n2"), **tainted}, {**node("n3"), **tainted}],
              [("n1", pod("same", 100, "1"))])
    res = run(pod("p", 100, "1"), t)
    assert res.status == Status(UNSCHED, ("0/3 nodes are available: 1 No preemption victims found for incoming pod, "
                                          "2 Preemption is not helpful for scheduling.",))
    assert res.nominated_node == "" and res.victims == []  # "" clears an old nomination


def test_a_node_where_removing_all_victims_does_not_help_shows_its_filter_reason():
    t = table([node("n1", cpu="4"), node("n2", cpu="4")],
              [("n1", pod("l1", 10, "1")), ("n1", pod("h1", 200, "2")), ("n2", pod("l2", 10, "1")), ("n2", pod("h2", 200, "2"))])
    res = run(pod("p", 100, "3"), t)
    assert res.status.reasons == ("0/2 nodes are available: 2 Insufficient cpu.",)


def test_picks_the_node_with_the_lower_priority_victims():
    # upstream TestPostFilter "pod can be made schedulable on one node"
    t = table([node("n1", cpu="2"), node("n2", cpu="2")],
              [("n1", pod("mid", 50, "2")), ("n2", pod("low", 10, "2"))])
    for seed in range(5):  # whatever the random offset
        res = run(pod("p", 100, "2"), t, seed=seed)
        assert res.status.is_success and res.nominated_node == "n2" and res.victim_keys == ["default/low"]
        assert res.candidates == 2


def test_non_violating_candidates_are_preferred():
    t = table([node("n1", cpu="1"), node("n2", cpu="1")],
              [("n1", pod("guarded", 1, "1", labels={"app": "x"})), ("n2", pod("free", 50, "1"))])
    res = run(pod("p", 100, "1"), t, pdbs=[PDB("default", sel(app="x"), 0)])
    assert res.nominated_node == "n2" and res.num_pdb_violations == 0
    res = run(pod("p", 100, "1"), t, pdbs=[PDB("default", sel(app="x"), 1)])
    assert res.nominated_node == "n1"  # the budget allows it: lowest priority wins


def test_early_stop_after_enough_candidates():
    # 20 candidate nodes, percentage 10 and absolute 3 -> 3 candidates, then stop
    t = table([node(f"n{i:02d}", cpu="1") for i in range(20)], [(f"n{i:02d}", pod(f"v{i}", 10, "1")) for i in range(20)])
    res = run(pod("p", 100, "1"), t, pct=10, ab=3)
    assert res.status.is_success and res.candidates == 3 and res.dry_runs == 3
    res = run(pod("p", 100, "1"), t, pct=50, ab=0)
    assert res.candidates == 10


def test_early_stop_needs_a_non_violating_candidate():
    t = table([node(f"n{i}", cpu="1") for i in range(4)],
              [("n0", pod("v0", 10, "1", labels={"app": "x"})), ("n1", pod("v1", 10, "1", labels={"app": "x"})),
               ("n2", pod("v2", 10, "1", labels={"app": "x"})), ("n3", pod("v3", 10, "1"))])
    res = run(pod("p", 100, "1"), t, pdbs=[PDB("default", sel(app="x"), 0)], pct=0, ab=1, seed=0)
    assert res.nominated_node == "n3" and res.num_pdb_violations == 0 and res.dry_runs >= 1


def test_nominated_pods_of_higher_priority_count_in_the_dry_run():
    # n1 has room for one 1-cpu pod after the victim leaves, but a nominated pod of higher
    # priority holds it; n2's victim is more important but nothing is nominated there
    t = table([node("n1", cpu="2"), node("n2", cpu="1")], [("n1", pod("low", 10, "1")), ("n2", pod("mid", 50, "1"))])
    nom = Nominator()
    nom.add(pod("waiting", 200, "1"), "n1")
    res = run(pod("p", 100, "1"), t, nominator=nom)
    assert res.nominated_node == "n2" and "default/waiting" not in t.pod_node


def test_lower_priority_nominations_on_the_chosen_node_are_returned():
    t = table([node("n1", cpu="1")], [("n1", pod("low", 10, "1"))])
    nom = Nominator()
    nom.add(pod("small", 5), "n1")
    res = run(pod("p", 100, "1"), t, nominator=nom)
    assert res.nominated_node == "n1" and [p.name for p in res.clear_nominations] == ["small"]


def test_not_eligible_leaves_the_nomination():
    t = table([node("n1", cpu="1")], [("n1", pod("low", 10, "1"))])
    res = run(pod("p", 100, "1", policy="Never"), t)
    assert res.status == Status(UNSCHED, (MSG_NEVER,)) and res.nominated_node is None


# ---------------------------------------------------------------- schedule.NodeFilter (the one-row hook)
def test_node_filter_statuses():
    nf = NodeFilter(default_chain())
    t = table([node("n1", cpu="1"), node("n2")], [("n1", pod("x", 0, "1"))])
    assert nf(pod("p", 0, "1"), t, 1).is_success
    st = nf(pod("p", 0, "1"), t, 0)
    assert (st.code, st.reasons, st.plugin) == (UNSCHED, ("Insufficient cpu",), "NodeResourcesFit")
    # a PreFilter result that leaves the row out
    pinned = parse_pod({"metadata": {"name": "q", "namespace": "default"}, "spec": {
        "containers": [{"name": "c"}], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}}}})
    assert nf(pinned, t, 0) == Status(UNRESOLVABLE, ("node(s) didn't satisfy plugin(s) [NodeAffinity]",))
    assert nf(pinned, t, 1).is_success


def test_node_filter_errors_in_the_runners_words():
    from policy_scheduler.framework.interface import FilterPlugin
    from policy_scheduler.framework.registry import Registry

    class Broken(FilterPlugin):
        NAME = "Broken"

        def filter(self, state, pod, nodes, rows):
            raise RuntimeError("boom")

    reg = Registry()
    reg.register(Broken)
    nf = NodeFilter(build_chain({"plugins": [{"name": "Broken"}]}, reg))
    st = nf(pod("p"), table([node("n1")]), 0)
    assert st == Status(Code.ERROR, ('running "Broken" filter plugin: RuntimeError: boom',))


# ---------------------------------------------------------------- the resource-only fast path


def test_the_resource_only_path_picks_the_same_victims_as_the_full_chain():
    """Random full nodes, priorities, start times and PDBs: reprieving by NodeResourcesFit's
    arithmetic gives exactly the victims (and violations, and statuses) of re-running the chain."""
    from policy_scheduler.framework.preemption import resource_only

    rng = random.Random(7)
    chain = default_chain()
    nf = NodeFilter(chain)
    compared = 0
    for case in range(60):
        nodes = [node(f"n{i}", cpu=str(rng.choice((2, 4, 8))), mem="8Gi", pods=str(rng.choice((3, 5, 110))))
                 for i in range(3)]
        placed = []
        for i, nd in enumerate(nodes):
            for j in range(rng.randint(1, 6)):
                labels = {"app": rng.choice(("a", "b"))}
                placed.append((nd["metadata"]["name"], pod(f"c{case}-{i}-{j}", rng.choice((0, 5, 10)),
                                                           rng.choice(("500m", "1", "1500m")),
                                                           rng.choice(("256Mi", "1Gi", "2Gi")), labels=labels,
                                                           start=rng.choice((T0, T1, T2, None)))))
        t = table(nodes, placed)
        pdbs = [PDB("default", LabelSelector.parse({"matchLabels": {"app": "a"}}, "s"), rng.choice((0, 1, 2)))]
        p = pod(f"p{case}", 100, rng.choice(("1", "2", "3")), rng.choice(("512Mi", "3Gi")))
        fast = resource_only(p, t, nf)
        assert fast is not None and fast.independent_first
        statuses = statuses_from(chain, p, t)
        for row in range(t.n):
            before = snapshot(t)
            slow_v, slow_n, slow_st = select_victims_on_node(p, t, row, pdbs, nf)
            slow = ([v.key for v in slow_v], slow_n, slow_st.code, slow_st.reasons)
            fast_v, fast_n, fast_st = select_victims_on_node(p, t, row, pdbs, nf, fast)
            assert ([v.key for v in fast_v], fast_n, fast_st.code, fast_st.reasons) == slow, (case, row)
            # a node NodeResourcesFit rejected in the cycle: no dry run on the table at all
            st = statuses.get(t.names[row])
            by_fit = not st.is_success and st.plugin == "NodeResourcesFit"
            arith_v, arith_n, arith_st = select_victims_on_node(p, t, row, pdbs, nf, fast, by_fit)
            assert ([v.key for v in arith_v], arith_n, arith_st.code, arith_st.reasons) == slow, (case, row)
            assert snapshot(t) == before
            compared += bool(slow_v) and by_fit
    assert compared > 50


def test_the_full_chain_runs_when_other_filters_depend_on_the_pods():
    from policy_scheduler.framework.preemption import resource_only

    t = table([node("n1")], [("n1", pod("v", 0, "1"))])
    nf = NodeFilter(default_chain())
    assert resource_only(pod("plain", 10, "1"), t, nf) is not None
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "a"}}}]
    assert resource_only(pod("spread", 10, "1", spread=spread), t, nf) is None
    ported = parse_pod({"metadata": {"name": "ported", "namespace": "default", "uid": "ported"},
                        "spec": {"priority": 10, "containers": [{"name": "c", "ports": [{"containerPort": 80,
                                                                                          "hostPort": 8080}]}]}})
    assert resource_only(ported, t, nf) is None
    claimed = parse_pod({"metadata": {"name": "claimed", "namespace": "default", "uid": "claimed"},
                         "spec": {"priority": 10, "containers": [{"name": "c"}],
                                  "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}})
    assert resource_only(claimed, t, nf) is None  # VolumeRestrictions / NodeVolumeLimits count the node's pods
    anti = parse_pod({"metadata": {"name": "anti", "namespace": "default", "uid": "anti", "labels": {"app": "x"}},
                      "spec": {"priority": 0, "affinity": {"podAntiAffinity": {
                          "requiredDuringSchedulingIgnoredDuringExecution": [{
                              "labelSelector": {"matchLabels": {"app": "x"}},
                              "topologyKey": "kubernetes.io/hostname"}]}},
                               "containers": [{"name": "c"}]}})
    t.add_pod(anti, "n1")  # an existing pod's required anti-affinity: removing it may lift a rejection
    assert resource_only(pod("plain", 10, "1"), t, nf) is None


def test_nodes_the_arithmetic_rules_out_still_get_the_chains_status_when_nothing_is_found():
    # with their victims gone both nodes are still full of higher-priority nominated pods: the
    # arithmetic rules them out without running the chain, and as no candidate is found their
    # exact status (the chain's) is computed for the message
    t = table([node("n1", cpu="2"), node("n2", cpu="2")], [("n1", pod("l1", 10, "1")), ("n2", pod("l2", 10, "1"))])
    nom = Nominator()
    nom.add(pod("w1", 200, "2"), "n1")
    nom.add(pod("w2", 200, "2"), "n2")
    res = run(pod("p", 100, "2"), t, nominator=nom)
    assert res.nominated_node == "" and res.dry_runs == 2
    assert res.status.message() == "0/2 nodes are available: 2 Insufficient cpu."


def _resizing(name, prio, spec_cpu, held_cpu, start=None):
    """A bound pod whose spec asks ``spec_cpu`` while its kubelet still holds ``held_cpu``
    (an in-place resize down not yet actuated)."""
    raw = {"metadata": {"name": name, "namespace": "default", "uid": name},
           "spec": {"priority": prio, "containers": [{"name": "c", "resources": {"requests": {"cpu": spec_cpu}}}]},
           "status": {"startTime": start or T0, "containerStatuses": [
               {"name": "c", "allocatedResources": {"cpu": held_cpu}, "resources": {"requests": {"cpu": held_cpu}}}]}}
    return parse_pod(raw)


def test_a_victim_in_the_middle_of_a_resize_frees_what_its_node_holds():
    """upstream removes a victim's NodeInfo resources (CalculateResource, status included): a pod
    resized down to 1 cpu that still holds 3 frees 3 when it goes, and until then it is what
    stands in the way."""
    t = table([node("n1", cpu="4")], [("n1", _resizing("shrinking", 10, "1", "3", start=T0)),
                                      ("n1", pod("small", 10, "1", start=T1))])
    assert t.requested[0, 0] == 4000
    names, nv, st = victims_on(t, pod("p", 100, "3"))
    # reprieve goes most important first: "shrinking" (earlier start) back on the node holds 3
    # cpu, too much; "small" then fits back (counted at its spec's 1 cpu, "shrinking" would be
    # reprieved and "small" the victim)
    assert st.is_success and names == ["shrinking"] and nv == 0
    t = table([node("n1", cpu="4")], [("n1", _resizing("growing", 10, "3", "1", start=T0)),
                                      ("n1", pod("small", 10, "1", start=T1))])
    # a resize up not yet actuated (Deferred or in progress): the spec's 3 counts already (its
    # status's 1 alone would make "small" the victim)
    assert t.requested[0, 0] == 4000
    names, _, st = victims_on(t, pod("p", 100, "3"))
    assert st.is_success and names == ["growing"]
