"""InterPodAffinity against upstream interpodaffinity (filtering.go, scoring.go, plugin.go)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.inter_pod_affinity import (
    ERR_AFFINITY,
    ERR_ANTI_AFFINITY,
    ERR_EXISTING_ANTI_AFFINITY,
    PLUGIN,
    InterPodAffinityArgs,
)
from policy_scheduler.framework.events import NAMESPACE_LABELS, ActionType, NamespaceChange, Resource
from support.kit import QUEUE, SKIP, arg_errors, changed, hint, node, refused, registered
from support.handles import namespaces_handle

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
U = Code.UNSCHEDULABLE
AFF = (UU, ERR_AFFINITY)
ANTI = (U, ERR_ANTI_AFFINITY)
EXISTING = (U, ERR_EXISTING_ANTI_AFFINITY)


# ---------------------------------------------------------------------- fixtures
def make_node(name, **labels):
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def zone_node(name, zone=None):
    labels = {HOST: name}
    if zone is not None:
        labels[ZONE] = zone
    return make_node(name, **labels)


def term(key, match=None, namespaces=None, ns_selector=None, selector="labels"):
    """A PodAffinityTerm; ``match`` -> labelSelector.matchLabels, ``selector=None`` omits it (nil)."""
    t = {"topologyKey": key}
    if selector == "labels":
        t["labelSelector"] = {"matchLabels": match} if match is not None else {}
    if namespaces is not None:
        t["namespaces"] = namespaces
    if ns_selector is not None:
        t["namespaceSelector"] = ns_selector
    return t


def weighted(weight, t):
    return {"weight": weight, "podAffinityTerm": t}


def make_pod(name, ns="default", labels=None, affinity=None, anti=None, pref_affinity=None, pref_anti=None):
    aff = {}
    if affinity or pref_affinity:
        aff["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": affinity or [],
                              "preferredDuringSchedulingIgnoredDuringExecution": pref_affinity or []}
    if anti or pref_anti:
        aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": anti or [],
                                  "preferredDuringSchedulingIgnoredDuringExecution": pref_anti or []}
    pod = {"metadata": {"name": name, "namespace": ns, "labels": labels or {}},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    if aff:
        pod["spec"]["affinity"] = aff
    info = parse_pod(pod)
    assert info.parse_error is None, info.parse_error
    return info


def make_table(nodes, placed=()):
    table = NodeTable()
    for n in nodes:
        table.upsert_node(n)
    for node_name, pod in placed:
        table.add_pod(pod, node_name)
    return table


def make_plugin(namespaces=None, **args):
    return PLUGIN(InterPodAffinityArgs(**args), namespaces_handle(namespaces))


def run_filter(plugin, pod, table, rows=None):
    """None when PreFilter skips, else {node name: None (pass) | (code, reason)}."""
    state = CycleState()
    status, selected = plugin.pre_filter(state, pod, table)
    assert selected is None
    if status.is_skip:
        return None
    assert status.is_success
    rows = np.arange(table.n) if rows is None else np.asarray(rows)
    res = plugin.filter(state, pod, table, rows)
    assert res.error is None
    codes = np.broadcast_to(np.asarray(res.code), rows.shape)
    out = {}
    for i, row in enumerate(rows):
        name = table.names[row]
        if res.passed[i]:
            out[name] = None
        else:
            reasons = [r for r, mask in res.reasons if mask[i]]
            assert len(reasons) == 1, reasons
            out[name] = (Code(int(codes[i])), reasons[0])
    return out


def run_score(plugin, pod, table):
    """None when PreScore skips, else ({node: raw}, {node: normalized}) over all nodes."""
    state = CycleState()
    rows = np.arange(table.n)
    if plugin.pre_score(state, pod, table, rows).is_skip:
        return None
    raw = plugin.score(state, pod, table, rows)
    norm = plugin.normalize_score(state, pod, table, rows, raw.copy())
    names = [table.names[r] for r in rows]
    return dict(zip(names, raw.tolist())), dict(zip(names, norm.tolist()))


# ---------------------------------------------------------------------- filter
ZONES = [zone_node("a1", "a"), zone_node("a2", "a"), zone_node("b1", "b"), zone_node("nozone")]
WEB = {"app": "web"}
DB = {"app": "db"}

FILTER_CASES = [
    # (id, nodes, placed pods, incoming pod, namespaces, expected per node)
    ("affinity to an existing pod's zone; node without the zone key fails",
     ZONES, [("a1", make_pod("db", labels=DB))],
     make_pod("p", affinity=[term(ZONE, DB)]), None,
     {"a1": None, "a2": None, "b1": AFF, "nozone": AFF}),
    ("affinity: every term must hold in the node's domains",
     ZONES, [("a1", make_pod("db", labels=DB)), ("b1", make_pod("db2", labels=DB))],
     make_pod("p", affinity=[term(ZONE, DB), term(HOST, DB)]), None,
     {"a1": None, "a2": AFF, "b1": None, "nozone": AFF}),
    ("affinity: one existing pod must match ALL terms (two pods matching one term each do not)",
     ZONES, [("a1", make_pod("db", labels=DB)), ("a2", make_pod("tier", labels={"tier": "x"}))],
     make_pod("p", affinity=[term(ZONE, DB), term(ZONE, {"tier": "x"})]), None,
     # no pod matches both -> counts empty; the pod does not match its own terms -> all fail
     {"a1": AFF, "a2": AFF, "b1": AFF, "nozone": AFF}),
    ("first pod of a self-affine group passes wherever the topology key exists",
     ZONES, [("b1", make_pod("other", labels=DB))],
     make_pod("p", labels=WEB, affinity=[term(ZONE, WEB)]), None,
     {"a1": None, "a2": None, "b1": None, "nozone": AFF}),
    ("no first-pod exception once some pod matches",
     ZONES, [("b1", make_pod("web", labels=WEB))],
     make_pod("p", labels=WEB, affinity=[term(ZONE, WEB)]), None,
     {"a1": AFF, "a2": AFF, "b1": None, "nozone": AFF}),
    ("no first-pod exception when the pod does not match its own terms",
     ZONES, [], make_pod("p", labels=DB, affinity=[term(ZONE, WEB)]), None,
     {"a1": AFF, "a2": AFF, "b1": AFF, "nozone": AFF}),
    ("anti-affinity per hostname; a node without the key passes even with a match on it",
     [zone_node("n1"), zone_node("n2"), make_node("bare")],
     [("n1", make_pod("w1", labels=WEB)), ("bare", make_pod("w2", labels=WEB))],
     make_pod("p", labels=WEB, anti=[term(HOST, WEB)]), None,
     {"n1": ANTI, "n2": None, "bare": None}),
    ("anti-affinity per zone rejects the whole zone",
     ZONES, [("a2", make_pod("w", labels=WEB))],
     make_pod("p", anti=[term(ZONE, WEB)]), None,
     {"a1": ANTI, "a2": ANTI, "b1": None, "nozone": None}),
    ("existing pods' required anti-affinity is symmetric",
     ZONES, [("a1", make_pod("guard", labels=DB, anti=[term(ZONE, WEB)]))],
     make_pod("p", labels=WEB), None,
     {"a1": EXISTING, "a2": EXISTING, "b1": None, "nozone": None}),
    ("filter order: affinity failure hides anti-affinity failures",
     ZONES, [("a1", make_pod("db", labels=DB)),
             ("b1", make_pod("guard", labels=WEB, anti=[term(ZONE, {"role": "x"})]))],
     make_pod("p", labels={"role": "x"}, affinity=[term(ZONE, DB)], anti=[term(ZONE, WEB)]), None,
     {"a1": None, "a2": None, "b1": AFF, "nozone": AFF}),
    ("filter order: own anti-affinity before existing pods' anti-affinity",
     ZONES, [("b1", make_pod("guard", labels=WEB, anti=[term(ZONE, {"role": "x"})]))],
     make_pod("p", labels={"role": "x"}, anti=[term(ZONE, WEB)]), None,
     {"a1": None, "a2": None, "b1": ANTI, "nozone": None}),
    ("namespace defaults to the incoming term owner's namespace",
     ZONES, [("a1", make_pod("db", ns="team-b", labels=DB)), ("b1", make_pod("db", ns="team-a", labels=DB))],
     make_pod("p", ns="team-a", affinity=[term(ZONE, DB)]), None,
     {"a1": AFF, "a2": AFF, "b1": None, "nozone": AFF}),
    ("namespace of an existing pod's term defaults to the existing pod's namespace",
     ZONES, [("a1", make_pod("guard", ns="ops", anti=[term(ZONE, WEB)])),
             ("b1", make_pod("guard", ns="team-a", anti=[term(ZONE, WEB)]))],
     make_pod("p", ns="team-a", labels=WEB), None,
     {"a1": None, "a2": None, "b1": EXISTING, "nozone": None}),
    ("explicit namespaces list",
     ZONES, [("a1", make_pod("w", ns="x", labels=WEB)), ("b1", make_pod("w", ns="y", labels=WEB))],
     make_pod("p", anti=[term(ZONE, WEB, namespaces=["y"])]), None,
     {"a1": None, "a2": None, "b1": ANTI, "nozone": None}),
    ("namespaceSelector {} means all namespaces",
     ZONES, [("a1", make_pod("w", ns="x", labels=WEB)), ("b1", make_pod("w", ns="y", labels=WEB))],
     make_pod("p", anti=[term(ZONE, WEB, ns_selector={})]), None,
     {"a1": ANTI, "a2": ANTI, "b1": ANTI, "nozone": None}),
    ("incoming namespaceSelector resolved against the namespace cache, merged with namespaces",
     ZONES, [("a1", make_pod("w", ns="x", labels=WEB)), ("b1", make_pod("w", ns="y", labels=WEB)),
             ("nozone", make_pod("w", ns="z", labels=WEB))],
     make_pod("p", anti=[term(ZONE, WEB, namespaces=["z"], ns_selector={"matchLabels": {"env": "prod"}})]),
     {"x": {"env": "prod"}, "y": {"env": "dev"}, "z": {}},
     {"a1": ANTI, "a2": ANTI, "b1": None, "nozone": None}),
    ("existing pod's namespaceSelector matched against the incoming pod's namespace labels",
     ZONES, [("a1", make_pod("guard", ns="ops", anti=[term(ZONE, WEB, ns_selector={"matchLabels": {"env": "prod"}})])),
             ("b1", make_pod("guard2", ns="ops", anti=[term(ZONE, WEB, ns_selector={"matchLabels": {"env": "dev"}})]))],
     make_pod("p", ns="shop", labels=WEB), {"shop": {"env": "prod"}, "ops": {}},
     {"a1": EXISTING, "a2": EXISTING, "b1": None, "nozone": None}),
    ("an unknown namespace has no labels: a DoesNotExist namespaceSelector matches it",
     ZONES, [("a1", make_pod("guard", ns="ops", anti=[term(
         ZONE, WEB, ns_selector={"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]})]))],
     make_pod("p", ns="ghost", labels=WEB), {},
     {"a1": EXISTING, "a2": EXISTING, "b1": None, "nozone": None}),
    ("nil labelSelector matches nothing (anti-affinity never fires)",
     ZONES, [("a1", make_pod("w", labels=WEB))],
     make_pod("p", labels=WEB, anti=[term(ZONE, selector=None)]), None,
     {"a1": None, "a2": None, "b1": None, "nozone": None}),
    ("nil labelSelector matches nothing (affinity never satisfied, not even by the pod itself)",
     ZONES, [("a1", make_pod("w", labels=WEB))],
     make_pod("p", labels=WEB, affinity=[term(ZONE, selector=None)]), None,
     {"a1": AFF, "a2": AFF, "b1": AFF, "nozone": AFF}),
    ("empty labelSelector matches every pod in the namespace",
     ZONES, [("b1", make_pod("any", labels={"x": "y"})), ("a1", make_pod("far", ns="other"))],
     make_pod("p", anti=[term(ZONE, {})]), None,
     {"a1": None, "a2": None, "b1": ANTI, "nozone": None}),
    ("existing anti-affinity on another key rejects every node in that domain",
     [make_node("r1", rack="1"), make_node("r1b", rack="1"), make_node("r2", rack="2")],
     [("r1", make_pod("guard", anti=[term("rack", WEB)]))],
     make_pod("p", labels=WEB), None,
     {"r1": EXISTING, "r1b": EXISTING, "r2": None}),
]


@pytest.mark.parametrize("nodes,placed,pod,namespaces,expected",
                         [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES])
def test_filter(nodes, placed, pod, namespaces, expected):
    table = make_table(nodes, placed)
    assert run_filter(make_plugin(namespaces), pod, table) == expected


SKIP_CASES = [
    ("no affinity anywhere", [("a1", make_pod("w", labels=WEB))], make_pod("p", labels=WEB)),
    ("existing required anti-affinity that does not match the pod",
     [("a1", make_pod("guard", anti=[term(ZONE, DB)]))], make_pod("p", labels=WEB)),
    ("existing anti-affinity matching, but its node lacks the topology key",
     [("nozone", make_pod("guard", anti=[term(ZONE, WEB)]))], make_pod("p", labels=WEB)),
    ("only preferred terms on the pod", [("a1", make_pod("w", labels=WEB))],
     make_pod("p", labels=WEB, pref_anti=[weighted(10, term(ZONE, WEB))])),
]


@pytest.mark.parametrize("placed,pod", [c[1:] for c in SKIP_CASES], ids=[c[0] for c in SKIP_CASES])
def test_prefilter_skips(placed, pod):
    assert run_filter(make_plugin(), pod, make_table(ZONES, placed)) is None


def test_filter_results_align_with_the_given_rows():
    table = make_table(ZONES, [("a1", make_pod("db", labels=DB))])
    pod = make_pod("p", affinity=[term(ZONE, DB)])
    # rows b1, a2 only (in that order), as the runner passes survivors of earlier plugins
    rows = [table.index["b1"], table.index["a2"]]
    assert run_filter(make_plugin(), pod, table, rows) == {"b1": AFF, "a2": None}


def test_filter_without_prefilter_state_is_an_error():
    table = make_table(ZONES)
    res = make_plugin().filter(CycleState(), make_pod("p"), table, np.arange(table.n))
    assert res.error is not None and res.error.code == Code.ERROR
    assert not res.passed.any()


# ---------------------------------------------------------------------- score
SCORE_NODES = [zone_node("a1", "a"), zone_node("a2", "a"), zone_node("b1", "b"),
               zone_node("c1", "c"), zone_node("nozone")]


def score_cluster():
    """a1: db; b1: cache; c1: a pod requiring affinity to web (zone); a2: a pod preferring
    anti-affinity (weight 7, hostname) to web."""
    return make_table(SCORE_NODES, [
        ("a1", make_pod("db", labels=DB)),
        ("b1", make_pod("cache", labels={"app": "cache"})),
        ("c1", make_pod("follower", affinity=[term(ZONE, WEB)])),
        ("a2", make_pod("loner", pref_anti=[weighted(7, term(HOST, WEB))])),
    ])


WEB_POD = make_pod("p", labels=WEB,
                   pref_affinity=[weighted(10, term(ZONE, DB))],
                   pref_anti=[weighted(4, term(ZONE, {"app": "cache"}))])


@pytest.mark.parametrize("hard_weight,raw,normalized", [
    # topologyScore: (zone,a) +10 [db matches the pod's preferred affinity],
    # (zone,b) -4 [cache matches its preferred anti-affinity], (zone,c) +hard [the pod matches
    # follower's required affinity], (hostname,a2) -7 [the pod matches loner's preferred anti].
    # raw a1=10, a2=10-7=3, b1=-4, c1=hard, nozone=0; min -4, max 10, spread 14:
    # a1 100*(14/14)=100, a2 100*(7/14)=50, b1 0, nozone 100*(4/14)=28.57->28
    (5, {"a1": 10, "a2": 3, "b1": -4, "c1": 5, "nozone": 0},
     {"a1": 100, "a2": 50, "b1": 0, "c1": 64, "nozone": 28}),  # c1: 100*(9/14)=64.28->64
    (1, {"a1": 10, "a2": 3, "b1": -4, "c1": 1, "nozone": 0},
     {"a1": 100, "a2": 50, "b1": 0, "c1": 35, "nozone": 28}),  # c1: 100*(5/14)=35.71->35
    (0, {"a1": 10, "a2": 3, "b1": -4, "c1": 0, "nozone": 0},  # weight 0 disables the hard term
     {"a1": 100, "a2": 50, "b1": 0, "c1": 28, "nozone": 28}),
])
def test_score_preferred_terms_and_hard_pod_affinity_weight(hard_weight, raw, normalized):
    plugin = make_plugin(hardPodAffinityWeight=hard_weight)
    assert run_score(plugin, WEB_POD, score_cluster()) == (raw, normalized)


def test_default_hard_pod_affinity_weight_is_one():
    assert run_score(make_plugin(), WEB_POD, score_cluster())[0]["c1"] == 1


def test_score_existing_pods_terms_only():
    # The pod has no preferred terms: only existing pods' terms score.
    # (zone,a) +3 [a1 pod prefers affinity to web, weight 3]; (zone,b) +1 [hard weight 1];
    # (zone,b) -2 [b1 other pod prefers anti-affinity to web, weight 2] -> b: -1.
    # raw a1=3, a2=3, b1=-1, c1=0, nozone=0; spread 4: a 100, b1 0, others 100*(1/4)=25
    table = make_table(SCORE_NODES, [
        ("a1", make_pod("fan", pref_affinity=[weighted(3, term(ZONE, WEB))])),
        ("b1", make_pod("follower", affinity=[term(ZONE, WEB)])),
        ("b1", make_pod("hater", pref_anti=[weighted(2, term(ZONE, WEB))])),
        ("c1", make_pod("plain", labels=WEB)),
    ])
    raw, norm = run_score(make_plugin(), make_pod("p", labels=WEB), table)
    assert raw == {"a1": 3, "a2": 3, "b1": -1, "c1": 0, "nozone": 0}
    assert norm == {"a1": 100, "a2": 100, "b1": 0, "c1": 25, "nozone": 25}


def test_negative_raw_scores_are_min_max_normalized():
    # Preferred anti-affinity only: (zone,a) -5 [one web pod], (zone,b) -10 [two web pods].
    # raw a1=a2=-5, b1=-10, c1=nozone=0; min -10 (not 0), max 0, spread 10:
    # a 100*(5/10)=50, b1 0, c1/nozone 100
    table = make_table(SCORE_NODES, [("a1", make_pod("w1", labels=WEB)), ("b1", make_pod("w2", labels=WEB)),
                                     ("b1", make_pod("w3", labels=WEB))])
    pod = make_pod("p", labels=WEB, pref_anti=[weighted(5, term(ZONE, WEB))])
    raw, norm = run_score(make_plugin(), pod, table)
    assert raw == {"a1": -5, "a2": -5, "b1": -10, "c1": 0, "nozone": 0}
    assert norm == {"a1": 50, "a2": 50, "b1": 0, "c1": 100, "nozone": 100}


def test_all_negative_scores_use_the_real_minimum():
    # min starts at +inf: raw a=-5, b=-10 only (rows a1, a2, b1) -> a 100*(5/5)=100, b 0.
    # (Starting min/max at 0 would give a 50.)
    table = make_table(SCORE_NODES[:3], [("a1", make_pod("w1", labels=WEB)), ("b1", make_pod("w2", labels=WEB)),
                                         ("b1", make_pod("w3", labels=WEB))])
    pod = make_pod("p", labels=WEB, pref_anti=[weighted(5, term(ZONE, WEB))])
    assert run_score(make_plugin(), pod, table)[1] == {"a1": 100, "a2": 100, "b1": 0}


def test_normalization_is_float_then_truncated():
    # raw a=29, b=100, c=0: 100*(29/100) = 28.999999999999996 in float64 -> 28 (integer math gives 29).
    table = make_table(SCORE_NODES[:4], [("a1", make_pod("x", labels={"k": "x"})),
                                         ("b1", make_pod("y", labels={"k": "y"}))])
    pod = make_pod("p", pref_affinity=[weighted(29, term(ZONE, {"k": "x"})),
                                       weighted(100, term(ZONE, {"k": "y"}))])
    raw, norm = run_score(make_plugin(), pod, table)
    assert raw == {"a1": 29, "a2": 29, "b1": 100, "c1": 0}
    assert norm == {"a1": 28, "a2": 28, "b1": 100, "c1": 0}


def test_equal_scores_normalize_to_zero():
    # Every node in the one zone with a match: raw 10 everywhere, spread 0 -> all 0.
    table = make_table([zone_node("a1", "a"), zone_node("a2", "a")], [("a1", make_pod("db", labels=DB))])
    pod = make_pod("p", pref_affinity=[weighted(10, term(ZONE, DB))])
    assert run_score(make_plugin(), pod, table) == ({"a1": 10, "a2": 10}, {"a1": 0, "a2": 0})


def test_score_namespace_handling():
    # Preferred affinity of the pod in ns "shop" with namespaceSelector env=prod: pods in "x" (prod)
    # count, pods in "y" (dev) do not. An existing pod's preferred term with namespaceSelector
    # env=prod matches the pod through its namespace labels.
    # (zone,a) +6 [x/db]; (zone,c) +2 [follower's preferred affinity]; raw a=6, b=0, c=2, nozone 0
    table = make_table(SCORE_NODES, [
        ("a1", make_pod("db", ns="x", labels=DB)),
        ("b1", make_pod("db", ns="y", labels=DB)),
        ("c1", make_pod("fan", ns="ops", pref_affinity=[
            weighted(2, term(ZONE, WEB, ns_selector={"matchLabels": {"env": "prod"}}))])),
    ])
    pod = make_pod("p", ns="shop", labels=WEB,
                   pref_affinity=[weighted(6, term(ZONE, DB, ns_selector={"matchLabels": {"env": "prod"}}))])
    plugin = make_plugin({"x": {"env": "prod"}, "y": {"env": "dev"}, "shop": {"env": "prod"}})
    raw, norm = run_score(plugin, pod, table)
    assert raw == {"a1": 6, "a2": 6, "b1": 0, "c1": 2, "nozone": 0}
    assert norm == {"a1": 100, "a2": 100, "b1": 0, "c1": 33, "nozone": 0}  # 100*(2/6)=33.3->33


@pytest.mark.parametrize("args,placed,pod", [
    pytest.param({}, [("a1", make_pod("w", labels=WEB))], make_pod("p", labels=WEB),
                 id="no preferred terms and no existing pod with affinity"),
    pytest.param({"ignorePreferredTermsOfExistingPods": True},
                 [("a1", make_pod("fan", pref_affinity=[weighted(3, term(ZONE, WEB))]))],
                 make_pod("p", labels=WEB, affinity=[term(ZONE, WEB)]),
                 id="ignorePreferredTermsOfExistingPods and the pod has no preferred terms"),
    pytest.param({}, [("a1", make_pod("w", labels=WEB))],
                 make_pod("p", pref_affinity=[weighted(3, term(ZONE, DB))]),
                 id="preferred terms that match nothing"),
    pytest.param({"hardPodAffinityWeight": 0}, [("a1", make_pod("follower", affinity=[term(ZONE, WEB)]))],
                 make_pod("p", labels=WEB), id="hardPodAffinityWeight 0 and only existing required affinity"),
    pytest.param({}, [("a1", make_pod("guard", anti=[term(ZONE, WEB)]))], make_pod("p", labels=WEB),
                 id="existing pods' required anti-affinity does not score"),
    pytest.param({}, [("nozone", make_pod("w", labels=WEB))],
                 make_pod("p", pref_anti=[weighted(3, term(ZONE, WEB))]),
                 id="match on a node without the topology key"),
])
def test_prescore_skips(args, placed, pod):
    assert run_score(make_plugin(**args), pod, make_table(SCORE_NODES, placed)) is None


def test_ignore_preferred_terms_of_existing_pods_still_scores_them_when_the_pod_has_preferred_terms():
    # As upstream: the flag only skips when the incoming pod has no preferred terms.
    # (zone,a) +3 [fan prefers web]; (zone,b) +4 [the pod prefers db]; raw a=3, b=4, c/nozone 0.
    table = make_table(SCORE_NODES, [("a1", make_pod("fan", pref_affinity=[weighted(3, term(ZONE, WEB))])),
                                     ("b1", make_pod("db", labels=DB))])
    pod = make_pod("p", labels=WEB, pref_affinity=[weighted(4, term(ZONE, DB))])
    raw, _ = run_score(make_plugin(ignorePreferredTermsOfExistingPods=True), pod, table)
    assert raw == {"a1": 3, "a2": 3, "b1": 4, "c1": 0, "nozone": 0}


def test_score_covers_pods_on_infeasible_nodes():
    # PreScore scans every node of the snapshot, not only the feasible rows being scored.
    table = make_table(SCORE_NODES, [("a1", make_pod("db", labels=DB))])
    pod = make_pod("p", pref_affinity=[weighted(10, term(ZONE, DB))])
    plugin, state = make_plugin(), CycleState()
    rows = np.array([table.index["a2"], table.index["b1"]])
    assert plugin.pre_score(state, pod, table, rows).is_success
    assert plugin.score(state, pod, table, rows).tolist() == [10, 0]


# ---------------------------------------------------------------------- args
def test_args_defaults_and_aliases():
    a = InterPodAffinityArgs()
    assert (a.hard_pod_affinity_weight, a.ignore_preferred_terms_of_existing_pods) == (1, False)
    a = InterPodAffinityArgs.model_validate({"hardPodAffinityWeight": 100, "ignorePreferredTermsOfExistingPods": True})
    assert (a.hard_pod_affinity_weight, a.ignore_preferred_terms_of_existing_pods) == (100, True)


@pytest.mark.parametrize("bad", [{"hardPodAffinityWeight": 101}, {"hardPodAffinityWeight": -1},
                                 {"hardPodAffinityWeight": "5"}, {"hardPodAffinityWeigth": 1}])
def test_args_rejected(bad):
    with pytest.raises(ValidationError, match="hardPodAffinityWei"):
        InterPodAffinityArgs.model_validate(bad)


def test_plugin_identity():
    assert PLUGIN.NAME == "InterPodAffinity" and PLUGIN.Args is InterPodAffinityArgs


# ---------------------------------------------------------------------- counting equals a pod-by-pod walk
def brute_counts(plugin, pod, table):
    """The PreFilter counts and PreScore topology scores as upstream adds them, pod by pod."""
    ns_labels = plugin.handle.namespace_labels(pod.namespace) or {}
    affinity = [plugin._resolve(t) for t in pod.required_affinity]
    anti = [plugin._resolve(t) for t in pod.required_anti_affinity]
    preferred = ([(w.weight, plugin._resolve(w.term)) for w in pod.preferred_affinity]
                 + [(-w.weight, plugin._resolve(w.term)) for w in pod.preferred_anti_affinity])
    hard = plugin.args.hard_pod_affinity_weight
    existing_anti, affinity_counts, anti_counts, score = {}, {}, {}, {}

    def add(counts, key, labels, value):
        if key in labels:
            counts[(key, labels[key])] = counts.get((key, labels[key]), 0) + value

    for row in range(table.n):
        labels = table.specs[row].labels
        for e in table.pods[row].values():
            for t in e.required_anti_affinity:
                if t.matches(pod, ns_labels):
                    add(existing_anti, t.topology_key, labels, 1)
            if affinity and all(t.matches(e, {}) for t in affinity):
                for t in affinity:
                    add(affinity_counts, t.topology_key, labels, 1)
            for t in anti:
                if t.matches(e, {}):
                    add(anti_counts, t.topology_key, labels, 1)
            for w, t in preferred:
                if t.matches(e, {}):
                    add(score, t.topology_key, labels, w)
            existing_terms = ([(hard, t) for t in e.required_affinity if hard > 0]
                              + [(w.weight, w.term) for w in e.preferred_affinity]
                              + [(-w.weight, w.term) for w in e.preferred_anti_affinity])
            for w, t in existing_terms:
                if t.matches(pod, ns_labels):
                    add(score, t.topology_key, labels, w)
    return existing_anti, affinity_counts, anti_counts, score


def test_counts_equal_a_pod_by_pod_walk_under_random_table_changes():
    """PreFilter/PreScore state (from the term index and the per-node match counts kept across
    cycles) equals a fresh pod-by-pod count after any mix of pod, node and label changes."""
    import random

    rng = random.Random(11)
    namespaces = {"default": {"team": "a"}, "other": {"team": "b"}}
    plugin = make_plugin(namespaces, hardPodAffinityWeight=2)
    table = make_table([])
    terms = [term(ZONE, {"app": "web"}), term(HOST, {"app": "web"}), term(ZONE, {"app": "db"}),
             term(HOST, {"app": "db"}, namespaces=["other"]), term(ZONE, {"app": "web"}, ns_selector={}),
             term(ZONE, {"app": "db"}, ns_selector={"matchLabels": {"team": "b"}}), term("rack")]

    def random_pod(name):
        pick = lambda: rng.sample(terms, rng.choice([0, 0, 1, 2]))  # noqa: E731
        return make_pod(name, ns=rng.choice(["default", "other"]),
                        labels={"app": rng.choice(["web", "db", "cache"])},
                        affinity=pick(), anti=pick(),
                        pref_affinity=[weighted(rng.randint(1, 5), t) for t in pick()],
                        pref_anti=[weighted(rng.randint(1, 5), t) for t in pick()])

    def random_node(name):
        labels = {HOST: name}
        if rng.random() < 0.8:
            labels[ZONE] = rng.choice(["z1", "z2", "z3"])
        if rng.random() < 0.3:
            labels["rack"] = rng.choice(["r1", "r2"])
        return make_node(name, **labels)

    for i in range(8):
        table.upsert_node(random_node(f"n{i}"))
    checked = 0
    for step in range(500):
        op = rng.random()
        if op < 0.5:
            table.add_pod(random_pod(f"p{rng.randrange(80)}"), rng.choice(table.names + ["ghost"]))
        elif op < 0.65:
            table.remove_pod(f"{rng.choice(['default', 'other'])}/p{rng.randrange(80)}")
        elif op < 0.8:
            table.upsert_node(random_node(rng.choice(table.names + ["ghost"])))
        elif op < 0.85 and table.n > 3:
            table.remove_node(rng.choice(table.names))
        incoming = random_pod("incoming")
        existing_anti, affinity_counts, anti_counts, score = brute_counts(plugin, incoming, table)
        state = CycleState()
        if plugin.pre_filter(state, incoming, table)[0].is_skip:
            assert not existing_anti and not incoming.required_affinity and not incoming.required_anti_affinity
        else:
            s = state.read(plugin._FILTER_KEY)
            assert s.existing_anti_counts == existing_anti, step
            assert s.affinity_counts == affinity_counts, step
            assert s.anti_affinity_counts == anti_counts, step
            checked += bool(existing_anti or affinity_counts or anti_counts)
        state = CycleState()
        if plugin.pre_score(state, incoming, table, np.arange(table.n)).is_skip:
            assert not score, step
        else:
            assert state.read(plugin._SCORE_KEY) == score, step
            raw = plugin.score(state, incoming, table, np.arange(table.n))
            expected = [sum(w for (k, v), w in score.items() if table.specs[r].labels.get(k) == v)
                        for r in range(table.n)]
            assert raw.tolist() == expected, step
    assert checked > 100  # most steps had something to count


# ------------------------------------------------------------------ events and queueing hints
A, T = ActionType, Resource
WANTS_DB = make_pod("p", affinity=[term(ZONE, {"app": "db"})])  # needs an app=db pod in its zone
AVOIDS_WEB = make_pod("p", anti=[term(ZONE, {"app": "web"})])  # must not share a zone with app=web


def placed(name="e", labels=None, ns="default", node_name="n1", **kw):
    return changed(make_pod(name, ns=ns, labels=labels, **kw), node_name=node_name)


def test_events_to_register():
    assert registered(make_plugin()) == [
        (T.ASSIGNED_POD, A.ADD), (T.ASSIGNED_POD, A.DELETE), (T.ASSIGNED_POD, A.UPDATE_POD_LABEL),
        (NAMESPACE_LABELS.resource, NAMESPACE_LABELS.action),
        (T.NODE, A.ADD), (T.NODE, A.UPDATE_NODE_LABEL), (T.TARGET_POD, A.UPDATE_POD_LABEL)]


# upstream isSchedulableAfterPodChange: the other pod must be bound or nominated. Added: it helps
# only if it matches all of the pod's affinity terms. Relabelled: if it now matches all affinity
# terms, or stopped matching an anti-affinity term. Deleted: if it matched an anti-affinity term of
# the pod, or its own required anti-affinity matched the pod.
@pytest.mark.parametrize("pod, action, old, new, want", [
    (WANTS_DB, A.ADD, None, placed(labels={"app": "db"}), QUEUE),
    (WANTS_DB, A.ADD, None, placed(labels={"app": "db"}, node_name=""), SKIP),  # not placed
    (WANTS_DB, A.ADD, None, changed(placed(labels={"app": "db"}, node_name=""), nominated_node_name="n1"), QUEUE),
    (WANTS_DB, A.ADD, None, placed(labels={"app": "web"}), SKIP),
    (WANTS_DB, A.ADD, None, placed(labels={"app": "db"}, ns="other"), SKIP),  # term's namespace: the pod's
    (AVOIDS_WEB, A.ADD, None, placed(labels={"app": "db"}), SKIP),  # an added pod never lifts anti-affinity
    (make_pod("p"), A.ADD, None, placed(labels={"app": "db"}), SKIP),  # no affinity terms at all
    (WANTS_DB, A.UPDATE_POD_LABEL, placed(labels={"app": "web"}), placed(labels={"app": "db"}), QUEUE),
    (WANTS_DB, A.UPDATE_POD_LABEL, placed(labels={"app": "db"}), placed(labels={"app": "db", "v": "2"}), SKIP),
    (AVOIDS_WEB, A.UPDATE_POD_LABEL, placed(labels={"app": "web"}), placed(labels={"app": "db"}), QUEUE),
    (AVOIDS_WEB, A.UPDATE_POD_LABEL, placed(labels={"app": "db"}), placed(labels={"app": "web"}), SKIP),
    (AVOIDS_WEB, A.DELETE, placed(labels={"app": "web"}), None, QUEUE),
    (AVOIDS_WEB, A.DELETE, placed(labels={"app": "db"}), None, SKIP),
    (WANTS_DB, A.DELETE, placed(labels={"app": "db"}), None, SKIP),  # a deletion never helps affinity
    # the deleted pod's own anti-affinity rejected the pod (existing pods' anti-affinity)
    (make_pod("p", labels={"app": "api"}), A.DELETE, placed(anti=[term(ZONE, {"app": "api"})]), None, QUEUE),
    (make_pod("p", labels={"app": "api"}), A.DELETE, placed(anti=[term(ZONE, {"app": "db"})]), None, SKIP),
])
def test_assigned_pod_hint(pod, action, old, new, want):
    assert hint(make_plugin(), T.ASSIGNED_POD, action, pod, old, new) == want


def test_assigned_pod_hint_reads_namespace_labels_for_namespace_selectors():
    # the term selects pods of namespaces labelled team=a: an added app=db pod counts only there
    pod = make_pod("p", affinity=[term(ZONE, {"app": "db"}, ns_selector={"matchLabels": {"team": "a"}})])
    pl = make_plugin({"ns-a": {"team": "a"}, "ns-b": {"team": "b"}})
    assert hint(pl, T.ASSIGNED_POD, A.ADD, pod, None, placed(labels={"app": "db"}, ns="ns-a")) == QUEUE
    assert hint(pl, T.ASSIGNED_POD, A.ADD, pod, None, placed(labels={"app": "db"}, ns="ns-b")) == SKIP


def test_target_pod_label_change_always_queues():
    # upstream: the pod's own label change may make existing pods' anti-affinity stop matching it
    pod = make_pod("p", labels={"app": "api"})
    assert hint(make_plugin(), T.TARGET_POD, A.UPDATE_POD_LABEL, pod, pod, make_pod("p", labels={"app": "x"})) == QUEUE


# upstream isSchedulableAfterNodeChange: affinity is helped by a term's topology key appearing or
# changing on a node, anti-affinity by the key being removed or changed, or by any new node.
@pytest.mark.parametrize("pod, action, old, new, want", [
    (WANTS_DB, A.ADD, None, node("x", {ZONE: "a"}), QUEUE),
    (WANTS_DB, A.ADD, None, node("x", {HOST: "x"}), SKIP),  # no zone: affinity cannot pass there
    (AVOIDS_WEB, A.ADD, None, node("x", {HOST: "x"}), QUEUE),  # in no zone: anti-affinity passes
    (WANTS_DB, A.UPDATE_NODE_LABEL, node("x"), node("x", {ZONE: "a"}), QUEUE),  # key appeared
    (WANTS_DB, A.UPDATE_NODE_LABEL, node("x", {ZONE: "a"}), node("x", {ZONE: "b"}), QUEUE),  # changed
    (WANTS_DB, A.UPDATE_NODE_LABEL, node("x", {ZONE: "a"}), node("x"), SKIP),  # removed: cannot help
    (WANTS_DB, A.UPDATE_NODE_LABEL, node("x", {ZONE: "a"}), node("x", {ZONE: "a", "k": "v"}), SKIP),
    (AVOIDS_WEB, A.UPDATE_NODE_LABEL, node("x", {ZONE: "a"}), node("x"), QUEUE),  # removed
    (AVOIDS_WEB, A.UPDATE_NODE_LABEL, node("x", {ZONE: "a"}), node("x", {ZONE: "b"}), QUEUE),  # changed
    (AVOIDS_WEB, A.UPDATE_NODE_LABEL, node("x"), node("x", {ZONE: "a"}), SKIP),  # appeared: cannot help
    # no terms of its own: rejected by existing pods' anti-affinity, whose keys the hint does not see
    (make_pod("p"), A.ADD, None, node("x"), QUEUE),
    (make_pod("p"), A.UPDATE_NODE_LABEL, node("x", {ZONE: "a"}), node("x"), QUEUE),
])
def test_node_change_hint(pod, action, old, new, want):
    assert hint(make_plugin(), T.NODE, action, pod, old, new) == want


# Ours, NAMESPACE_LABELS: the pod's terms read namespace labels through their namespaceSelector
# (queue when one's verdict on the changed namespace flips); existing pods' terms read the labels
# of the pod's own namespace (queue when that one changed).
TEAM_A = {"matchLabels": {"team": "a"}}


@pytest.mark.parametrize("pod, change, want", [
    (make_pod("p", affinity=[term(ZONE, {"app": "db"}, ns_selector=TEAM_A)]),
     NamespaceChange("ns-x", {}, {"team": "a"}), QUEUE),  # ns-x now selected
    (make_pod("p", anti=[term(ZONE, {"app": "db"}, ns_selector=TEAM_A)]),
     NamespaceChange("ns-x", {"team": "a"}, {"team": "b"}), QUEUE),  # ns-x no longer selected
    (make_pod("p", affinity=[term(ZONE, {"app": "db"}, ns_selector=TEAM_A)]),
     NamespaceChange("ns-x", {"team": "a"}, {"team": "a", "env": "prod"}), SKIP),  # still selected
    (make_pod("p", affinity=[term(ZONE, {"app": "db"}, ns_selector=TEAM_A)]),
     NamespaceChange("ns-x", None, {"team": "b"}), SKIP),  # a new namespace, not selected
    (WANTS_DB, NamespaceChange("ns-x", {}, {"team": "a"}), SKIP),  # no namespaceSelector
    (make_pod("p"), NamespaceChange("default", {}, {"team": "a"}), QUEUE),  # the pod's own namespace
    (make_pod("p", affinity=[term(ZONE, {"app": "db"}, ns_selector=TEAM_A, namespaces=["ns-x"])]),
     NamespaceChange("ns-x", {}, {"team": "a"}), SKIP),  # ns-x is listed: its labels do not matter
])
def test_namespace_hint(pod, change, want):
    assert hint(make_plugin(), NAMESPACE_LABELS.resource, NAMESPACE_LABELS.action, pod, None, change) == want


# ------------------------------------------------------------------ args: upstream's verdicts
# TestValidateInterPodAffinityArgs: hardPodAffinityWeight in [0, 100]; values decoded strictly
@pytest.mark.parametrize("args, path, detail", [
    ({"hardPodAffinityWeight": -1}, "hardPodAffinityWeight", "Invalid value: -1: not in valid range [0, 100]"),
    ({"hardPodAffinityWeight": 101}, "hardPodAffinityWeight", "Invalid value: 101: not in valid range [0, 100]"),
    ({"hardPodAffinityWeight": 2**40}, "hardPodAffinityWeight", "not in valid range [0, 100]"),
    ({"hardPodAffinityWeight": "5"}, "hardPodAffinityWeight", 'Invalid value: "5": must be an integer'),
    ({"hardPodAffinityWeight": 1.5}, "hardPodAffinityWeight", "must be an integer"),
    ({"hardPodAffinityWeight": True}, "hardPodAffinityWeight", "Invalid value: true: must be an integer"),
    ({"ignorePreferredTermsOfExistingPods": "yes"}, "ignorePreferredTermsOfExistingPods", "must be a boolean"),
    ({"hardPodAffinity": 1}, "hardPodAffinity", "Extra inputs are not permitted"),
])
def test_args_upstream_refusals(args, path, detail):
    refused("InterPodAffinity", args, path, detail)


@pytest.mark.parametrize("args", [{}, {"hardPodAffinityWeight": 10}, {"hardPodAffinityWeight": 0},
                                  {"hardPodAffinityWeight": 100, "ignorePreferredTermsOfExistingPods": True}])
def test_args_upstream_accepts(args):
    assert arg_errors("InterPodAffinity", args) == []
