"""PodTopologySpread: filter verdicts, scores and args, with numbers from upstream's formulas."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from pydantic import ValidationError

from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.labels import EVERYTHING, LabelSelector
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.pod_topology_spread import (ERR_REASON_CONSTRAINTS_NOT_MATCH,
                                                          ERR_REASON_NODE_LABEL_NOT_MATCH, PLUGIN,
                                                          PodTopologySpreadArgs, go_log, go_round)
from policy_scheduler.framework.events import ActionType, Resource
from support.kit import QUEUE, SKIP, arg_errors, changed, hint, node, refused, registered
from support.handles import state_handle
from policy_scheduler.cache.state import ClusterState

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
WEB = {"app": "web"}


# ------------------------------------------------------------------------------------ fixtures

def make_node(name, zone=None, labels=None, taints=()):
    lbl = {HOST: name}
    if zone is not None:
        lbl[ZONE] = zone
    lbl.update(labels or {})
    return {"metadata": {"name": name, "labels": lbl},
            "spec": {"taints": [dict(t) for t in taints]},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}


def constraint(key=ZONE, max_skew=1, when="DoNotSchedule", selector=WEB, **extra):
    c = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    if selector is not None:
        c["labelSelector"] = {"matchLabels": selector} if selector else {}
    c.update(extra)
    return c


def make_pod(name="p", ns="default", labels=WEB, constraints=(), node_selector=None, tolerations=(),
             terminating=False):
    meta = {"name": name, "namespace": ns, "labels": dict(labels)}
    if terminating:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    spec = {"containers": [{"name": "c", "image": "img"}],
            "topologySpreadConstraints": [dict(c) for c in constraints],
            "tolerations": [dict(t) for t in tolerations]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    info = parse_pod({"metadata": meta, "spec": spec})
    assert info.parse_error is None, info.parse_error
    return info


def table(nodes, pods=None):
    """``pods``: node name -> number of matching (app=web) pods, or a list of pod dict kwargs."""
    t = NodeTable()
    for n in nodes:
        t.upsert_node(n)
    for node_name, ps in (pods or {}).items():
        if isinstance(ps, int):
            ps = [{}] * ps
        for i, kw in enumerate(ps):
            t.add_pod(make_pod(name=f"{node_name}-{i}", **kw), node_name)
    return t


class CountingWorkloads:
    """The state's workload index (Services and controllers) answering ``selector`` for every pod,
    counting the plugin's questions in ``calls``."""

    def __init__(self, selector):
        self.selector = selector
        self.calls = 0

    def default_selector(self, pod):
        self.calls += 1
        return self.selector


def selector_handle(selector):
    """The real handle over a state whose workloads deduce ``selector``; ``h.state.workloads.calls``."""
    state = ClusterState()
    state.workloads = CountingWorkloads(selector)
    return state_handle(state)


def plugin(args=None, handle=None):
    return PLUGIN(PodTopologySpreadArgs.model_validate(args or {}), handle or Handle())


def run_filter(pl, pod, nodes):
    """name -> None (passed) or (code, reasons); or the PreFilter status when it does not succeed."""
    state = CycleState()
    st, result = pl.pre_filter(state, pod, nodes)
    assert result is None
    if not st.is_success:
        return st
    rows = np.arange(nodes.n)
    res = pl.filter(state, pod, nodes, rows)
    out = {}
    for i, row in enumerate(rows):
        name = nodes.names[row]
        if res.passed[i]:
            out[name] = None
        else:
            code = res.code[i] if isinstance(res.code, np.ndarray) else res.code
            out[name] = (Code(int(code)), [r for r, m in res.reasons if m[i]])
    return out


def run_score(pl, pod, nodes, feasible=None):
    """name -> (raw, normalized); or the PreScore status when it does not succeed."""
    state = CycleState()
    rows = np.array([nodes.index[n] for n in (feasible or nodes.names)], dtype=np.int64)
    st = pl.pre_score(state, pod, nodes, rows)
    if not st.is_success:
        return st
    raw = pl.score(state, pod, nodes, rows)
    norm = pl.normalize_score(state, pod, nodes, rows, raw)
    return {nodes.names[r]: (int(raw[i]), int(norm[i])) for i, r in enumerate(rows)}


OK = None
SKEW = (Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH])
NO_LABEL = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_NODE_LABEL_NOT_MATCH])
THREE_ZONES = [make_node("a1", "a"), make_node("a2", "a"), make_node("b1", "b"), make_node("c1", "c")]


# ------------------------------------------------------------------------------------ PreFilter skip

def test_prefilter_skips_without_hard_constraints_and_does_not_ask_for_a_selector():
    h = selector_handle(LabelSelector.parse({"matchLabels": WEB}))
    pl = plugin(handle=h)
    nodes = table(THREE_ZONES, {"a1": 1})
    assert run_filter(pl, make_pod(), nodes).is_skip  # no constraints; system defaults are soft
    assert run_filter(pl, make_pod(constraints=[constraint(when="ScheduleAnyway")]), nodes).is_skip
    assert h.state.workloads.calls == 0


# ------------------------------------------------------------------------------------ Filter

@pytest.mark.parametrize("counts,max_skew,expected", [
    # min over zones {a:3, b:1, c:0} = 0, selfMatch 1: a 3+1-0=4>1, b 1+1-0=2>1, c 0+1-0=1
    ({"a1": 2, "a2": 1, "b1": 1}, 1, {"a1": SKEW, "a2": SKEW, "b1": SKEW, "c1": OK}),
    # min {a:2, b:1, c:1} = 1: a 2+1-1=2>1, b 1+1-1=1, c 1+1-1=1
    ({"a1": 1, "a2": 1, "b1": 1, "c1": 1}, 1, {"a1": SKEW, "a2": SKEW, "b1": OK, "c1": OK}),
    # maxSkew 2: a 2+1-1=2 <= 2 passes
    ({"a1": 1, "a2": 1, "b1": 1, "c1": 1}, 2, {"a1": OK, "a2": OK, "b1": OK, "c1": OK}),
    # no matching pods anywhere: every zone 0+1-0=1
    ({}, 1, {"a1": OK, "a2": OK, "b1": OK, "c1": OK}),
])
def test_skew_with_three_zones(counts, max_skew, expected):
    nodes = table(THREE_ZONES, counts)
    pod = make_pod(constraints=[constraint(max_skew=max_skew)])
    assert run_filter(plugin(), pod, nodes) == expected


@pytest.mark.parametrize("min_domains,expected", [
    # 2 eligible domains {a:1, b:1}: min 1, each 1+1-1=1 <= 1
    (None, {"a1": OK, "b1": OK}),
    (2, {"a1": OK, "b1": OK}),
    # 2 domains < minDomains 3: global min forced to 0, each 1+1-0=2 > 1
    (3, {"a1": SKEW, "b1": SKEW}),
])
def test_min_domains_forces_global_minimum_zero(min_domains, expected):
    nodes = table([make_node("a1", "a"), make_node("b1", "b")], {"a1": 1, "b1": 1})
    extra = {} if min_domains is None else {"minDomains": min_domains}
    pod = make_pod(constraints=[constraint(**extra)])
    assert run_filter(plugin(), pod, nodes) == expected


def test_node_affinity_policy_honor_vs_ignore():
    # zone c's only node lacks disk=ssd, which the pod's nodeSelector requires.
    nodes = table([make_node("a1", "a", {"disk": "ssd"}), make_node("b1", "b", {"disk": "ssd"}),
                   make_node("c1", "c")], {"a1": 2, "b1": 1})
    honor = make_pod(node_selector={"disk": "ssd"}, constraints=[constraint()])
    # Honor (default): zone c is not a domain; min over {a:2, b:1} = 1: a 2+1-1=2>1, b 1+1-1=1,
    # c (not counted, matchNum 0) 0+1-1=0
    assert run_filter(plugin(), honor, nodes) == {"a1": SKEW, "b1": OK, "c1": OK}
    ignore = make_pod(node_selector={"disk": "ssd"}, constraints=[constraint(nodeAffinityPolicy="Ignore")])
    # Ignore: zone c counts with 0 pods, min 0: b 1+1-0=2>1
    assert run_filter(plugin(), ignore, nodes) == {"a1": SKEW, "b1": SKEW, "c1": OK}


def test_node_taints_policy():
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    nodes = table([make_node("a1", "a"), make_node("b1", "b"), make_node("c1", "c", taints=[taint])],
                  {"a1": 2, "b1": 1})
    # Ignore (default): tainted zone c counts with 0 pods, min 0: a 3>1, b 2>1, c 1
    default = make_pod(constraints=[constraint()])
    assert run_filter(plugin(), default, nodes) == {"a1": SKEW, "b1": SKEW, "c1": OK}
    # Honor without a toleration: zone c is not a domain, min over {a:2, b:1} = 1
    honor = make_pod(constraints=[constraint(nodeTaintsPolicy="Honor")])
    assert run_filter(plugin(), honor, nodes) == {"a1": SKEW, "b1": OK, "c1": OK}
    # Honor with a toleration: zone c is a domain again, min 0
    tolerant = make_pod(constraints=[constraint(nodeTaintsPolicy="Honor")],
                        tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert run_filter(plugin(), tolerant, nodes) == {"a1": SKEW, "b1": SKEW, "c1": OK}
    # PreferNoSchedule taints do not exclude a node
    soft = table([make_node("a1", "a"), make_node("b1", "b"),
                  make_node("c1", "c", taints=[dict(taint, effect="PreferNoSchedule")])], {"a1": 2, "b1": 1})
    assert run_filter(plugin(), honor, soft) == {"a1": SKEW, "b1": SKEW, "c1": OK}


def test_node_missing_the_key():
    nodes = table([make_node("a1", "a"), make_node("b1", "b"), make_node("x", None)],
                  {"a1": 1, "b1": 1, "x": 5})
    pod = make_pod(constraints=[constraint()])
    # x lacks the zone label: unresolvable; its 5 pods are in no domain, so min stays 1
    assert run_filter(plugin(), pod, nodes) == {"a1": OK, "b1": OK, "x": NO_LABEL}


def test_first_failing_constraint_decides_the_status():
    rack = "example.com/rack"
    nodes = table([make_node("a1", "a", {rack: "r1"}), make_node("b1", "b"), make_node("b2", "b", {rack: "r2"})],
                  {"a1": 2, "b1": 3})
    pod = make_pod(constraints=[constraint(), constraint(key=rack)])
    # Only nodes with BOTH keys count: a1 (zone a, r1: 2 pods) and b2 (zone b, r2: 0 pods); b1's
    # 3 pods count nowhere. Zone: {a:2, b:0}, min 0: a1 2+1>1 fails on the zone constraint first;
    # b1 passes zone (0+1) then lacks the rack label; b2 passes both (0+1).
    assert run_filter(plugin(), pod, nodes) == {"a1": SKEW, "b1": NO_LABEL, "b2": OK}
    # the missing label comes first when the rack constraint is listed first
    pod = make_pod(constraints=[constraint(key=rack), constraint()])
    assert run_filter(plugin(), pod, nodes)["b1"] == NO_LABEL


@pytest.mark.parametrize("labels,expected", [
    # selfMatch 1: a 1+1-0=2 > 1
    (WEB, {"a1": SKEW, "b1": OK}),
    # the pod does not match its own selector: selfMatch 0, a 1+0-0=1 <= 1
    ({"app": "other"}, {"a1": OK, "b1": OK}),
])
def test_self_match(labels, expected):
    nodes = table([make_node("a1", "a"), make_node("b1", "b")], {"a1": 1})
    pod = make_pod(labels=labels, constraints=[constraint()])
    assert run_filter(plugin(), pod, nodes) == expected


def test_other_namespace_terminating_and_non_matching_pods_are_not_counted():
    nodes = table([make_node("a1", "a"), make_node("b1", "b")],
                  {"a1": [{"ns": "other"}, {"terminating": True}, {"labels": {"app": "db"}}, {"labels": {}}]})
    pod = make_pod(constraints=[constraint()])
    # a counts 0: a1 0+1-0 = 1 passes
    assert run_filter(plugin(), pod, nodes) == {"a1": OK, "b1": OK}
    nodes.add_pod(make_pod(name="real"), "a1")  # one countable pod: a1 1+1-0 = 2 > 1
    assert run_filter(plugin(), pod, nodes) == {"a1": SKEW, "b1": OK}


def test_empty_selector_counts_nothing_but_self_matches():
    nodes = table([make_node("a1", "a"), make_node("b1", "b")], {"a1": 3})
    # labelSelector {}: counts 0 everywhere (countPodsMatchSelector), selfMatch 1, 0+1-0 = 1
    assert run_filter(plugin(), make_pod(constraints=[constraint(selector={})]), nodes) == {"a1": OK, "b1": OK}
    # maxSkew 0 shows the self match: 0+1-0 = 1 > 0 everywhere
    pod = make_pod(constraints=[constraint(selector={}, max_skew=0)])
    assert run_filter(plugin(), pod, nodes) == {"a1": SKEW, "b1": SKEW}
    # no labelSelector at all (nil): matches nothing, selfMatch 0: 0+0-0 = 0
    pod = make_pod(constraints=[constraint(selector=None, max_skew=0)])
    assert run_filter(plugin(), pod, nodes) == {"a1": OK, "b1": OK}


def test_match_label_keys_narrow_the_selector():
    nodes = table([make_node("a1", "a"), make_node("b1", "b")],
                  {"a1": [{"labels": {"app": "web", "rev": "1"}}] * 2, "b1": [{"labels": {"app": "web", "rev": "2"}}]})
    pod = make_pod(labels={"app": "web", "rev": "2"}, constraints=[constraint(matchLabelKeys=["rev"])])
    # app=web,rev=2: {a:0, b:1}, min 0: a 0+1=1, b 1+1=2>1 (without the key a would fail instead)
    assert run_filter(plugin(), pod, nodes) == {"a1": OK, "b1": SKEW}


def test_hard_hostname_constraint_counts_per_node():
    nodes = table([make_node("n1", "a"), make_node("n2", "a"), make_node("n3", "a")], {"n1": 2, "n2": 1})
    pod = make_pod(constraints=[constraint(key=HOST)])
    # {n1:2, n2:1, n3:0}, min 0: n1 3>1, n2 2>1, n3 1
    assert run_filter(plugin(), pod, nodes) == {"n1": SKEW, "n2": SKEW, "n3": OK}


def test_filter_on_a_subset_of_rows_uses_prefilter_counts():
    nodes = table(THREE_ZONES, {"a1": 2, "b1": 1})
    pod = make_pod(constraints=[constraint()])
    state = CycleState()
    assert plugin().pre_filter(state, pod, nodes)[0].is_success
    rows = np.array([nodes.index["c1"], nodes.index["b1"]])
    res = plugin().filter(state, pod, nodes, rows)
    # c: 0+1-0 = 1 passes; b: 1+1-0 = 2 fails
    assert res.passed.tolist() == [True, False]


# ------------------------------------------------------------------------------------ counting cache

def test_counts_follow_table_changes_between_cycles():
    pl = plugin()
    nodes = table([make_node("a1", "a"), make_node("b1", "b")], {})
    pod = make_pod(constraints=[constraint()])
    assert run_filter(pl, pod, nodes) == {"a1": OK, "b1": OK}
    nodes.add_pod(make_pod(name="x"), "a1")  # a:1 -> a1 2 > 1
    assert run_filter(pl, pod, nodes) == {"a1": SKEW, "b1": OK}
    nodes.add_pod(make_pod(name="x", labels={"app": "db"}), "a1")  # same key, labels changed
    assert run_filter(pl, pod, nodes) == {"a1": OK, "b1": OK}
    nodes.add_pod(make_pod(name="x", terminating=True), "a1")  # now terminating
    assert run_filter(pl, pod, nodes) == {"a1": OK, "b1": OK}
    nodes.add_pod(make_pod(name="y"), "b1")
    nodes.add_pod(make_pod(name="z"), "b1")
    assert run_filter(pl, pod, nodes) == {"a1": OK, "b1": SKEW}
    nodes.remove_node("a1")  # b1 moves to row 0; only zone b remains: 2+1-2 = 1
    assert run_filter(pl, pod, nodes) == {"b1": OK}
    nodes.upsert_node(make_node("c1", "c"))
    assert run_filter(pl, pod, nodes) == {"b1": SKEW, "c1": OK}
    nodes.remove_pod("default/y")  # b 1+1-0 = 2 > 1 still
    assert run_filter(pl, pod, nodes) == {"b1": SKEW, "c1": OK}
    nodes.remove_pod("default/z")
    assert run_filter(pl, pod, nodes) == {"b1": OK, "c1": OK}
    # the same plugin on another table with an equal version number
    other = table([make_node("b1", "b"), make_node("c1", "c")], {"c1": 2})
    assert run_filter(pl, pod, other) == {"b1": OK, "c1": SKEW}


# ------------------------------------------------------------------------------------ Score

W = {n: math.log(n) for n in range(3, 8)}


def test_go_log_and_round():
    # Go's math.Log(3) is 0x3ff193ea7aad030a; libm's differs by one ulp
    assert struct.unpack("<Q", struct.pack("<d", go_log(3.0)))[0] == 0x3FF193EA7AAD030A
    for n in range(3, 200):
        assert abs(go_log(float(n)) - math.log(n)) <= 2 * math.ulp(math.log(n))
    assert go_round(np.array([0.5, 1.5, 2.5, 2.4999, 3.0])).tolist() == [1, 2, 3, 2, 3]


def test_prescore_skips_without_soft_constraints():
    nodes = table(THREE_ZONES)
    assert run_score(plugin(), make_pod(constraints=[constraint()]), nodes).is_skip
    assert run_score(plugin(), make_pod(), nodes).is_skip  # system defaults need a selector


def test_soft_zone_constraint_score():
    nodes = table([make_node("n1", "a"), make_node("n2", "a"), make_node("n3", "b")], {"n1": 2, "n2": 1})
    pod = make_pod(constraints=[constraint(when="ScheduleAnyway")])
    # 2 zones -> weight ln(2+2) = 1.3862943611198906; zone a has 3 pods, b 0; maxSkew-1 = 0
    # n1, n2: 3*1.386.. = 4.1588830833596715 -> 4; n3: 0
    # normalize (min 0, max 4): 100*(4+0-4)/4 = 0; 100*(4+0-0)/4 = 100
    assert run_score(plugin(), pod, nodes) == {"n1": (4, 0), "n2": (4, 0), "n3": (0, 100)}


def test_soft_zone_and_hostname_score():
    nodes = table([make_node("n1", "a"), make_node("n2", "a"), make_node("n3", "b")], {"n1": 2, "n2": 1})
    pod = make_pod(constraints=[constraint(when="ScheduleAnyway"),
                                constraint(key=HOST, max_skew=2, when="ScheduleAnyway")])
    wz, wh = W[4], W[5]  # 2 zones; 3 nodes
    # n1: 3*wz + 0 + 2*wh + 1 = 4.15888 + 4.21888 = 8.37776 -> 8
    # n2: 3*wz + 1*wh + 1 = 4.15888 + 2.60944 = 6.76832 -> 7
    # n3: 0 + 0 + 1 = 1
    assert round(3 * wz + 2 * wh + 1) == 8 and round(3 * wz + wh + 1) == 7
    # normalize (min 1, max 8): n1 100*(9-8)/8 = 12, n2 100*(9-7)/8 = 25, n3 100*(9-1)/8 = 100
    assert run_score(plugin(), pod, nodes) == {"n1": (8, 12), "n2": (7, 25), "n3": (1, 100)}


def test_soft_score_counts_all_nodes_of_feasible_domains_and_ignores_nodes_missing_keys():
    nodes = table([make_node("n1", "a"), make_node("n2", "a"), make_node("n3", "b"), make_node("n4", "c"),
                   make_node("x", None)], {"n1": 1, "n2": 2, "n3": 1, "n4": 7, "x": 4})
    pod = make_pod(constraints=[constraint(when="ScheduleAnyway", max_skew=2)])
    # feasible n1, n3, x: x lacks the zone -> ignored (score 0); domains among the rest {a, b}
    # -> weight ln(4); zone a counts n1 AND n2 (not feasible) = 3, b = 1; zone c is not scored.
    # n1: 3*1.3862943611198906 + 1 = 5.158883 -> 5; n3: 1.3862943611198906 + 1 = 2.386294 -> 2
    # normalize (min 2, max 5): n1 100*(7-5)/5 = 40, n3 100*(7-2)/5 = 100, x 0
    assert run_score(plugin(), pod, nodes, ["n1", "n3", "x"]) == {"n1": (5, 40), "n3": (2, 100), "x": (0, 0)}


def test_soft_score_node_affinity_policy():
    nodes = table([make_node("n1", "a", {"disk": "ssd"}), make_node("n2", "a"), make_node("n3", "b", {"disk": "ssd"})],
                  {"n1": 1, "n2": 3})
    feasible = ["n1", "n3"]
    # Honor: n2 (no disk=ssd) is not counted: a = 1, b = 0; weight ln 4
    # n1: 1.386 -> 1, n3: 0; normalize (min 0, max 1): n1 0, n3 100
    honor = make_pod(node_selector={"disk": "ssd"}, constraints=[constraint(when="ScheduleAnyway")])
    assert run_score(plugin(), honor, nodes, feasible) == {"n1": (1, 0), "n3": (0, 100)}
    # Ignore: a = 4: n1 4*1.3862943611198906 = 5.545 -> 6; normalize: n1 100*(6-6)/6 = 0, n3 100
    ignore = make_pod(node_selector={"disk": "ssd"},
                      constraints=[constraint(when="ScheduleAnyway", nodeAffinityPolicy="Ignore")])
    assert run_score(plugin(), ignore, nodes, feasible) == {"n1": (6, 0), "n3": (0, 100)}


def test_all_equal_raw_scores_normalize_to_100_when_max_is_zero():
    nodes = table([make_node("n1", "a"), make_node("n2", "b")])
    pod = make_pod(constraints=[constraint(when="ScheduleAnyway")])
    # no pods: raw 0 everywhere, maxScore 0 -> 100
    assert run_score(plugin(), pod, nodes) == {"n1": (0, 100), "n2": (0, 100)}
    pod = make_pod(constraints=[constraint(when="ScheduleAnyway", max_skew=3)])
    # raw 2 everywhere: min 2, max 2: 100*(2+2-2)/2 = 100
    assert run_score(plugin(), pod, nodes) == {"n1": (2, 100), "n2": (2, 100)}


# ------------------------------------------------------------------------------------ defaults

SYSTEM_NODES = [make_node("n1", "a"), make_node("n2", "a"), make_node("n3", "b"), make_node("n4", None)]
SYSTEM_PODS = {"n1": 2, "n2": 1, "n4": 1}


@pytest.mark.parametrize("selector", [None, EVERYTHING])
def test_system_defaults_need_a_non_empty_selector(selector):
    h = selector_handle(selector)
    assert run_score(plugin(handle=h), make_pod(), table(SYSTEM_NODES, SYSTEM_PODS)).is_skip
    assert h.state.workloads.calls == 1


def test_system_defaults_score_with_a_selector():
    h = selector_handle(LabelSelector.parse({"matchLabels": WEB}))
    nodes = table(SYSTEM_NODES, SYSTEM_PODS)
    # System defaults: no node is ignored (n4 has no zone but is spread by hostname).
    # zone (maxSkew 5): domains among feasible {a, b, ""} -> ln 5; a = 3, b = 0
    # hostname (maxSkew 3): 4 nodes -> ln 6
    # n1: 3*ln5 + 4 + 2*ln6 + 2 = 8.828314 + 5.583519 = 14.411833 -> 14
    # n2: 3*ln5 + 4 + 1*ln6 + 2 = 8.828314 + 3.791759 = 12.620073 -> 13
    # n3: 0 + 4 + 0 + 2 = 6
    # n4: (no zone) 1*ln6 + 2 = 3.791759 -> 4
    assert round(3 * W[5] + 4 + 2 * W[6] + 2) == 14 and round(3 * W[5] + 4 + W[6] + 2) == 13
    # normalize (min 4, max 14): 100*(18-s)/14 -> 400/14 = 28, 500/14 = 35, 1200/14 = 85, 100
    assert run_score(plugin(handle=h), make_pod(), nodes) == {
        "n1": (14, 28), "n2": (13, 35), "n3": (6, 85), "n4": (4, 100)}
    # a pod with its own (hard) constraints gets no defaults: nothing to score
    assert run_score(plugin(handle=h), make_pod(constraints=[constraint()]), nodes).is_skip


def test_system_defaults_ignore_other_namespaces():
    h = selector_handle(LabelSelector.parse({"matchLabels": WEB}))
    nodes = table(SYSTEM_NODES, SYSTEM_PODS)
    # in namespace "other" nothing matches: raw = maxSkew-1 terms only: 4 + 2 = 6 (n4: 2)
    # normalize (min 2, max 6): 100*(8-6)/6 = 33, n4 100*(8-2)/6 = 100
    assert run_score(plugin(handle=h), make_pod(ns="other"), nodes) == {
        "n1": (6, 33), "n2": (6, 33), "n3": (6, 33), "n4": (2, 100)}


def test_list_defaults_filter_and_require_all_topologies():
    h = selector_handle(LabelSelector.parse({"matchLabels": WEB}))
    args = {"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"},
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway"}]}
    nodes = table(SYSTEM_NODES, SYSTEM_PODS)
    pl = plugin(args, h)
    # hard zone constraint with the deduced selector: {a:3, b:0}: n1/n2 4>1, n3 1, n4 no zone label
    assert run_filter(pl, make_pod(labels={"app": "web", "pod": "x"}), nodes) == {
        "n1": SKEW, "n2": SKEW, "n3": OK, "n4": NO_LABEL}
    # soft hostname constraint; List defaults require all keys of the SOFT constraints (hostname
    # only), so n4 is scored: 4 nodes -> ln 6; n1 2*1.791759 = 3.58 -> 4, n2 1.79 -> 2, n3 0, n4 2
    # normalize (min 0, max 4): 0, 50, 100, 50
    assert run_score(pl, make_pod(), nodes) == {"n1": (4, 0), "n2": (2, 50), "n3": (0, 100), "n4": (2, 50)}
    # without a selector no defaults apply at all
    assert run_filter(plugin(args, selector_handle(None)), make_pod(), nodes).is_skip


# ------------------------------------------------------------------------------------ args

def test_args_defaults():
    a = PodTopologySpreadArgs.model_validate({})
    assert a.defaulting_type == "System" and a.default_constraints == []
    assert PodTopologySpreadArgs.model_validate({"defaultingType": "List"}).default_constraints == []
    assert PodTopologySpreadArgs.model_validate({"defaultingType": ""}).defaulting_type == "System"


@pytest.mark.parametrize("args,fragment", [
    ({"defaultingType": "Zone"}, "defaultingType: Unsupported value"),
    ({"defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]},
     "defaultingType: Invalid value: \"System\""),
    ({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 0, "topologyKey": ZONE,
                                                        "whenUnsatisfiable": "DoNotSchedule"}]},
     "defaultConstraints[0].maxSkew"),
    ({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]},
     "defaultConstraints[0].topologyKey: Required"),
    ({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": "a/b/c",
                                                        "whenUnsatisfiable": "DoNotSchedule"}]},
     "defaultConstraints[0].topologyKey: Invalid"),
    ({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": "-bad",
                                                        "whenUnsatisfiable": "DoNotSchedule"}]},
     "defaultConstraints[0].topologyKey: Invalid"),
    ({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE}]},
     "defaultConstraints[0].whenUnsatisfiable: Required"),
    ({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE,
                                                        "whenUnsatisfiable": "Maybe"}]},
     "defaultConstraints[0].whenUnsatisfiable: Unsupported"),
    ({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE,
                                                        "whenUnsatisfiable": "DoNotSchedule",
                                                        "labelSelector": {}}]},
     "defaultConstraints[0].labelSelector: Forbidden"),
    ({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"},
        {"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]},
     "defaultConstraints[1]: Duplicate value"),
    ({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE,
                                                        "whenUnsatisfiable": "DoNotSchedule", "extra": 1}]},
     "extra"),
    ({"unknown": 1}, "unknown"),
])
def test_args_validation(args, fragment):
    with pytest.raises(ValidationError) as e:
        PodTopologySpreadArgs.model_validate(args)
    assert fragment in str(e.value)


def test_args_accept_list_with_both_actions_on_one_key():
    a = PodTopologySpreadArgs.model_validate({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "example.com/rack", "whenUnsatisfiable": "DoNotSchedule", "minDomains": 2},
        {"maxSkew": 1, "topologyKey": "example.com/rack", "whenUnsatisfiable": "ScheduleAnyway"}]})
    c = a.default_constraints[0].to_constraint()
    assert (c.min_domains, c.node_affinity_policy, c.node_taints_policy) == (2, "Honor", "Ignore")


def test_match_counter_stays_exact_under_random_table_changes():
    """Counts kept across cycles equal a fresh count after any mix of table changes."""
    import random

    from policy_scheduler.framework.podcount import PodMatchCounter
    from policy_scheduler.plugins.pod_topology_spread import _count_matching

    rng = random.Random(7)
    nodes = table([make_node(f"n{i}", "a") for i in range(6)])
    counter = PodMatchCounter()
    selectors = [LabelSelector.parse({"matchLabels": WEB}),
                 LabelSelector.parse({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]})]
    rare = LabelSelector.parse({"matchLabels": {"app": "db"}})
    next_node = 6

    def fresh(ns, sel):
        return [sum(1 for p in nodes.pods[r].values()
                    if p.namespace == ns and not p.terminating and sel.matches(p.labels))
                for r in range(nodes.n)]

    for step in range(600):
        op = rng.random()
        name = f"p{rng.randrange(40)}"
        kw = dict(name=name, ns=rng.choice(["default", "other"]), terminating=rng.random() < 0.1,
                  labels=rng.choice([WEB, {"app": "db"}, {"app": "web", "tier": "x"}, {"tier": "y"}]))
        target = rng.choice(nodes.names + ["ghost"])
        if op < 0.5:
            for i in range(rng.randrange(1, 4)):  # mostly new pods (the add-only path), some re-adds
                fresh_name = f"q{step}-{i}" if rng.random() < 0.7 else name
                nodes.add_pod(make_pod(**dict(kw, name=fresh_name)), rng.choice(nodes.names + ["ghost"]))
        elif op < 0.7:
            nodes.remove_pod(f"{kw['ns']}/{name}")
        elif op < 0.75 and nodes.n > 2:
            nodes.remove_node(rng.choice(nodes.names))
        elif op < 0.8:
            nodes.upsert_node(make_node(rng.choice(["ghost", f"n{next_node}"]), "b"))
            next_node += 1
        elif op < 0.85:
            nodes.add_pod(make_pod(**kw), target)
            nodes.remove_pod(f"{kw['ns']}/{name}")
        if step % 100 == 99:  # a selector looked at rarely: its generation falls out of the change log
            assert _count_matching(counter, nodes, "default", rare).tolist() == fresh("default", rare), step
        if rng.random() < 0.1:
            continue  # let changes pile up between looks
        for sel in rng.sample(selectors, rng.randrange(1, 3)):
            ns = rng.choice(["default", "other"])
            assert _count_matching(counter, nodes, ns, sel).tolist() == fresh(ns, sel), step


def test_match_counter_recounts_everything_once_its_generation_left_the_change_log():
    from policy_scheduler.framework.podcount import CHANGE_LOG_SIZE, PodMatchCounter
    from policy_scheduler.plugins.pod_topology_spread import _count_matching

    nodes = table([make_node("n0", "a"), make_node("n1", "a")])
    counter = PodMatchCounter()
    web, db = LabelSelector.parse({"matchLabels": WEB}), LabelSelector.parse({"matchLabels": {"app": "db"}})
    assert _count_matching(counter, nodes, "default", web).tolist() == [0, 0]
    nodes.add_pod(make_pod(name="w"), "n0")
    for i in range(CHANGE_LOG_SIZE + 1):  # later generations only touch n1
        nodes.add_pod(make_pod(name=f"d{i}", labels={"app": "db"}), "n1")
        assert _count_matching(counter, nodes, "default", db).tolist() == [0, i + 1]
    assert _count_matching(counter, nodes, "default", web).tolist() == [1, 0]


# ------------------------------------------------------------------ events and queueing hints
A, T = ActionType, Resource
SPREAD = make_pod("p", constraints=[constraint()])  # zone, maxSkew 1, app=web, DoNotSchedule


def assigned(name="e", ns="default", labels=WEB, node_name="n1"):
    return changed(make_pod(name, ns=ns, labels=labels), node_name=node_name)


def test_events_to_register():
    assert registered(plugin()) == [
        (T.ASSIGNED_POD, A.ADD), (T.ASSIGNED_POD, A.DELETE), (T.ASSIGNED_POD, A.UPDATE_POD_LABEL),
        (T.NODE, A.ADD), (T.NODE, A.DELETE), (T.NODE, A.UPDATE_NODE_LABEL), (T.NODE, A.UPDATE_NODE_TAINT),
        (T.TARGET_POD, A.UPDATE_POD_LABEL), (T.TARGET_POD, A.UPDATE_POD_TOLERATION)]


# upstream isSchedulableAfterPodChange: only an assigned pod of the same namespace (or the pod itself)
# counts. Add/Delete queue when its labels match some hard constraint's selector; a label update
# when some selector's verdict on it flips.
@pytest.mark.parametrize("action, old, new, want", [
    (A.ADD, None, assigned(), QUEUE),
    (A.ADD, None, assigned(labels={"app": "db"}), SKIP),  # not counted by the selector
    (A.ADD, None, assigned(ns="other"), SKIP),  # another namespace is never counted
    (A.ADD, None, assigned(node_name=""), SKIP),  # not assigned
    (A.DELETE, assigned(), None, QUEUE),
    (A.DELETE, assigned(labels={"app": "db"}), None, SKIP),
    (A.UPDATE_POD_LABEL, assigned(labels={"app": "db"}), assigned(), QUEUE),  # now counted
    (A.UPDATE_POD_LABEL, assigned(), assigned(labels={"app": "db"}), QUEUE),  # no longer counted
    (A.UPDATE_POD_LABEL, assigned(), assigned(labels={**WEB, "tier": "x"}), SKIP),  # still counted
])
def test_assigned_pod_hint(action, old, new, want):
    assert hint(plugin(), T.ASSIGNED_POD, action, SPREAD, old, new) == want


def test_assigned_pod_hint_without_hard_constraints_skips():
    # a pod with only ScheduleAnyway constraints has no hard constraint to match against
    soft = make_pod("p", constraints=[constraint(when="ScheduleAnyway")])
    assert hint(plugin(), T.ASSIGNED_POD, A.ADD, soft, None, assigned()) == SKIP


# The pod's own update: a new toleration queues only when a constraint honors taints; a label
# change only when it flips a selector's verdict (matchLabelKeys-merged selectors read the labels).
@pytest.mark.parametrize("pod, new, action, want", [
    (make_pod("p", constraints=[constraint(nodeTaintsPolicy="Honor")]),
     make_pod("p", constraints=[constraint(nodeTaintsPolicy="Honor")], tolerations=[{"operator": "Exists"}]),
     A.UPDATE_POD_TOLERATION, QUEUE),
    (SPREAD, make_pod("p", constraints=[constraint()], tolerations=[{"operator": "Exists"}]),
     A.UPDATE_POD_TOLERATION, SKIP),  # taints are ignored (the default): a toleration cannot help
    (SPREAD, make_pod("p", labels={"app": "db"}, constraints=[constraint()]), A.UPDATE_POD_LABEL, QUEUE),
    (SPREAD, make_pod("p", labels={**WEB, "x": "y"}, constraints=[constraint()]), A.UPDATE_POD_LABEL, SKIP),
])
def test_target_pod_hint(pod, new, action, want):
    assert hint(plugin(), T.TARGET_POD, action, pod, pod, new) == want


def spec(name="n", zone=None, labels=None, taints=()):
    lbl = {HOST: name, **({ZONE: zone} if zone is not None else {}), **(labels or {})}
    return node(name, lbl, taints)


# upstream isSchedulableAfterNodeChange: "has every topology key" of the hard constraints decides.
# Add/Delete queue when the node has them; an update when that flips, or when the node has them and
# a topology-key label value or its taints changed.
@pytest.mark.parametrize("action, old, new, want", [
    (A.ADD, None, spec(zone="a"), QUEUE),
    (A.ADD, None, spec(), SKIP),  # no zone label: not in any domain
    (A.DELETE, spec(zone="a"), None, QUEUE),
    (A.DELETE, spec(), None, SKIP),
    (A.UPDATE_NODE_LABEL, spec(), spec(zone="a"), QUEUE),  # joined a domain
    (A.UPDATE_NODE_LABEL, spec(zone="a"), spec(), QUEUE),  # left its domain
    (A.UPDATE_NODE_LABEL, spec(zone="a"), spec(zone="b"), QUEUE),  # moved
    (A.UPDATE_NODE_LABEL, spec(zone="a"), spec(zone="a", labels={"x": "1"}), SKIP),  # unrelated label
    (A.UPDATE_NODE_LABEL, spec(), spec(labels={"x": "1"}), SKIP),
    (A.UPDATE_NODE_TAINT, spec(zone="a", taints=[("k", "", "NoSchedule")]), spec(zone="a"), QUEUE),
    (A.UPDATE_NODE_TAINT, spec(taints=[("k", "", "NoSchedule")]), spec(), SKIP),  # not in a domain
])
def test_node_change_hint(action, old, new, want):
    assert hint(plugin(), T.NODE, action, SPREAD, old, new) == want


def test_hints_use_the_default_constraints_of_a_pod_without_its_own():
    # List defaulting with a hard zone constraint; the selector comes from the handle (the pod's
    # Services/ReplicaSets). No selector: no default constraints, so no topology key is required.
    args = {"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]}
    bare = make_pod("p")
    with_selector = plugin(args, selector_handle(LabelSelector.parse({"matchLabels": WEB})))
    assert hint(with_selector, T.NODE, A.ADD, bare, None, spec()) == SKIP
    assert hint(with_selector, T.NODE, A.ADD, bare, None, spec(zone="a")) == QUEUE
    assert hint(with_selector, T.ASSIGNED_POD, A.ADD, bare, None, assigned()) == QUEUE
    assert hint(plugin(args, selector_handle(None)), T.NODE, A.ADD, bare, None, spec()) == QUEUE


# ------------------------------------------------------------------ args: upstream's verdicts
# TestValidatePodTopologySpreadArgs, with its messages; then the API server's own checks of a
# topology spread constraint (validateTopologySpreadConstraints) that config validation leaves out
def dc(**kw):
    return {"maxSkew": 1, "topologyKey": "node", "whenUnsatisfiable": "DoNotSchedule", **kw}


def listed(*constraints):
    return {"defaultingType": "List", "defaultConstraints": list(constraints)}


@pytest.mark.parametrize("args, path, detail", [
    pytest.param(listed(dc(maxSkew=-1)), "defaultConstraints[0].maxSkew",
                 "Invalid value: -1: not in valid range (0, inf)", id="maxSkew-negative"),
    pytest.param(listed(dc(maxSkew=0)), "defaultConstraints[0].maxSkew", "not in valid range (0, inf)",
                 id="maxSkew-zero"),
    pytest.param(listed(dc(maxSkew=2**31)), "defaultConstraints[0].maxSkew", "must fit in a 32-bit integer",
                 id="maxSkew-beyond-int32"),
    pytest.param(listed(dc(topologyKey="")), "defaultConstraints[0].topologyKey", "Required value: can not be empty",
                 id="empty-topology-key"),
    pytest.param(listed(dc(topologyKey="zone/")), "defaultConstraints[0].topologyKey",
                 'Invalid value: "zone/": name part must be non-empty', id="topology-key-no-name"),
    pytest.param(listed(dc(topologyKey="-zone")), "defaultConstraints[0].topologyKey",
                 "name part must consist of alphanumeric characters", id="topology-key-invalid"),
    pytest.param(listed(dc(whenUnsatisfiable="")), "defaultConstraints[0].whenUnsatisfiable",
                 "Required value: can not be empty", id="whenUnsatisfiable-empty"),
    pytest.param(listed(dc(whenUnsatisfiable="unknown action")), "defaultConstraints[0].whenUnsatisfiable",
                 'Unsupported value: "unknown action": supported values: "DoNotSchedule", "ScheduleAnyway"',
                 id="whenUnsatisfiable-unsupported"),
    pytest.param(listed(dc(), dc(maxSkew=2)), "defaultConstraints[1]", 'Duplicate value: "{node, DoNotSchedule}"',
                 id="duplicated-constraints"),
    pytest.param(listed(dc(labelSelector={"matchLabels": {"a": "b"}})), "defaultConstraints[0].labelSelector",
                 "Forbidden: constraint must not define a selector, as they deduced for each pod",
                 id="label-selector-present"),
    pytest.param({"defaultingType": "unknown"}, "defaultingType",
                 'Unsupported value: "unknown": supported values: "System", "List"', id="wrong-defaulting-type"),
    pytest.param({"defaultingType": "System", "defaultConstraints": [dc()]}, "defaultingType",
                 'Invalid value: "System": when .defaultConstraints are not empty', id="system-with-constraints"),
    pytest.param({"defaultConstraints": [dc()]}, "defaultingType", 'Invalid value: "System"',
                 id="defaulted-system-with-constraints"),
    # the API server's rules for a constraint
    pytest.param(listed(dc(nodeAffinityPolicy="Always")), "defaultConstraints[0].nodeAffinityPolicy",
                 'Unsupported value: "Always": supported values: "Honor", "Ignore"', id="node-affinity-policy"),
    pytest.param(listed(dc(nodeTaintsPolicy="honor")), "defaultConstraints[0].nodeTaintsPolicy",
                 'Unsupported value: "honor": supported values: "Honor", "Ignore"', id="node-taints-policy"),
    pytest.param(listed(dc(minDomains=0)), "defaultConstraints[0].minDomains",
                 "Invalid value: 0: must be greater than zero", id="minDomains-zero"),
    pytest.param(listed(dc(minDomains=2, whenUnsatisfiable="ScheduleAnyway")), "defaultConstraints[0].minDomains",
                 "Invalid value: 2: can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
                 id="minDomains-schedule-anyway"),
    pytest.param(listed(dc(matchLabelKeys=["app", "bad key"])), "defaultConstraints[0].matchLabelKeys[1]",
                 "name part must consist of alphanumeric characters", id="match-label-keys"),
    # sizes and types
    pytest.param(listed(*[dc(topologyKey=f"k{i}") for i in range(17)]), "defaultConstraints",
                 "Too many: 17: must have at most 16 items", id="too-many-constraints"),
    pytest.param(listed(dc(topologyKey="k" * 318)), "defaultConstraints[0].topologyKey",
                 "Too long: may not be more than 317 bytes", id="topology-key-too-long"),
    pytest.param(listed(dc(maxSkew="1")), "defaultConstraints[0].maxSkew", 'Invalid value: "1": must be an integer',
                 id="maxSkew-string"),
    pytest.param(listed(dc(nodeAffinity="Honor")), "defaultConstraints[0].nodeAffinity",
                 "Extra inputs are not permitted", id="unknown-field"),
])
def test_args_upstream_refusals(args, path, detail):
    refused("PodTopologySpread", args, path, detail)


@pytest.mark.parametrize("args", [
    pytest.param(listed(dc(), dc(maxSkew=2, topologyKey="zone", whenUnsatisfiable="ScheduleAnyway")), id="valid"),
    pytest.param({"defaultingType": "List"}, id="list-no-constraints"),
    pytest.param({"defaultingType": "System"}, id="system"),
    pytest.param({"defaultingType": ""}, id="empty-type-is-system"),
    pytest.param(listed(dc(minDomains=3, nodeAffinityPolicy="Ignore", nodeTaintsPolicy="Honor",
                           matchLabelKeys=["pod-template-hash"])), id="all-fields"),
])
def test_args_upstream_accepts(args):
    assert arg_errors("PodTopologySpread", args) == []
