"""NodeLabelMatch: pods of one workload only on nodes with a given label; args validation."""

import time

import numpy as np
import pytest

from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.node_label_match import NAME, PLUGIN
from policy_scheduler.framework.events import ActionType, Resource
from support.kit import QUEUE, SKIP, arg_errors, hint, node, refused, registered

NODES = {"web-1": {"pool": "web"}, "db-1": {"pool": "db"}, "bare": {}, "web-2": {"pool": "web", "zone": "a"}}
REASON = "node(s) didn't have label pool=web required for workload"


def table():
    t = NodeTable()
    for name, labels in NODES.items():
        t.upsert_node({"metadata": {"name": name, "labels": labels},
                       "status": {"allocatable": {"cpu": "4", "pods": "10"}}})
    return t


def make_pod(name, labels=None):
    return parse_pod({"metadata": {"name": name, "namespace": "default", "labels": labels or {}},
                      "spec": {"containers": [{"name": "c"}]}})


def plugin(**selection):
    args = {"nodeLabel": {"key": "pool", "value": "web"}, **selection}
    return PLUGIN(PLUGIN.Args.model_validate(args), Handle())


def run(pl, pod, nodes=None):
    """None when the pod is not selected (PreFilter Skip), else the names of the passing nodes."""
    nodes = nodes or table()
    state = CycleState()
    status, names = pl.pre_filter(state, pod, nodes)
    assert names is None
    if status.is_skip:
        return None
    assert status.is_success
    res = pl.filter(state, pod, nodes, np.arange(nodes.n))
    failed = ~res.passed
    if failed.any():
        assert res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert [(r, m.tolist()) for r, m in res.reasons] == [(REASON, failed.tolist())]
    return {nodes.names[r] for r, ok in enumerate(res.passed) if ok}


WEB_NODES = {"web-1", "web-2"}


@pytest.mark.parametrize("selection, pod, expected", [
    pytest.param({"podNamePattern": "web-.*"}, make_pod("web-7f9c"), WEB_NODES, id="pattern-selects"),
    pytest.param({"podNamePattern": "web-.*"}, make_pod("myweb-1"), None, id="pattern-is-a-full-match-start"),
    pytest.param({"podNamePattern": "web"}, make_pod("web-1"), None, id="pattern-is-a-full-match-end"),
    pytest.param({"podNamePattern": "web|api"}, make_pod("api"), WEB_NODES, id="alternation-anchored"),
    pytest.param({"podSelector": {"matchLabels": {"app": "web"}}}, make_pod("x", {"app": "web"}), WEB_NODES,
                 id="selector-selects"),
    pytest.param({"podSelector": {"matchLabels": {"app": "web"}}}, make_pod("x", {"app": "db"}), None,
                 id="selector-other-pod"),
    pytest.param({"podSelector": {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}},
                 make_pod("x"), WEB_NODES, id="selector-expression"),
    pytest.param({"podSelector": {}}, make_pod("anything"), WEB_NODES, id="empty-selector-selects-all"),
    pytest.param({"podNamePattern": "web-.*", "podSelector": {"matchLabels": {"app": "web"}}},
                 make_pod("web-1", {"app": "web"}), WEB_NODES, id="both-match"),
    pytest.param({"podNamePattern": "web-.*", "podSelector": {"matchLabels": {"app": "web"}}},
                 make_pod("web-1", {"app": "db"}), None, id="both-required-labels-differ"),
    pytest.param({"podNamePattern": "web-.*", "podSelector": {"matchLabels": {"app": "web"}}},
                 make_pod("api-1", {"app": "web"}), None, id="both-required-name-differs"),
])
def test_selection_and_filter(selection, pod, expected):
    assert run(plugin(**selection), pod) == expected


def test_other_label_value_and_missing_label_fail():
    pl = PLUGIN(PLUGIN.Args.model_validate({"podNamePattern": ".*", "nodeLabel": {"key": "zone", "value": "a"}}),
                Handle())
    nodes = table()
    res = pl.filter(CycleState(), make_pod("p"), nodes, np.array([nodes.index["web-2"], nodes.index["bare"]]))
    assert res.passed.tolist() == [True, False]
    assert [(r, m.tolist()) for r, m in res.reasons] == [
        ("node(s) didn't have label zone=a required for workload", [False, True])]


def test_filter_lets_unselected_pods_through():
    nodes = table()
    res = plugin(podNamePattern="web-.*").filter(CycleState(), make_pod("db-0"), nodes, np.arange(nodes.n))
    assert res.passed.all()


def test_node_relabel_is_seen():
    nodes, pl = table(), plugin(podNamePattern="web-.*")
    nodes.upsert_node({"metadata": {"name": "bare", "labels": {"pool": "web"}}})
    assert run(pl, make_pod("web-1"), nodes) == WEB_NODES | {"bare"}


LABEL_KEY_MSG = "name part must consist of alphanumeric characters, '-', '_' or '.'"
LABEL_VALUE_MSG = "a valid label must be an empty string or consist of alphanumeric characters"


@pytest.mark.parametrize("args, path, detail", [
    # podNamePattern: RE2 only (linear-time matching); what RE2 cannot compile is refused
    pytest.param({"podNamePattern": "web-("}, "podNamePattern", "missing ): web-(", id="invalid-regex"),
    pytest.param({"podNamePattern": "(a)\\1"}, "podNamePattern", "not a regular expression RE2 accepts",
                 id="backreference"),
    pytest.param({"podNamePattern": "web-(?=x)"}, "podNamePattern", "invalid perl operator: (?=", id="lookahead"),
    pytest.param({"podNamePattern": "(?<!a)b"}, "podNamePattern", "invalid perl operator: (?<", id="lookbehind"),
    pytest.param({"podNamePattern": "a{1001}"}, "podNamePattern", "invalid repetition size", id="huge-repeat"),
    pytest.param({"podNamePattern": "x" * 1025}, "podNamePattern", "Too long: may not be more than 1024 bytes",
                 id="pattern-too-long"),
    pytest.param({"podNamePattern": 5}, "podNamePattern", "Invalid value: 5: must be a string", id="pattern-not-str"),
    # podSelector: metav1validation.ValidateLabelSelector, values included
    pytest.param({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}},
                 "podSelector.matchExpressions[0].operator", 'Invalid value: "Gt": not a valid selector operator',
                 id="selector-bad-operator"),
    pytest.param({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
                 "podSelector.matchExpressions[0].values",
                 "Required value: must be specified when `operator` is 'In' or 'NotIn'", id="selector-in-without-values"),
    pytest.param({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
                 "podSelector.matchExpressions[0].values",
                 "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                 id="selector-exists-with-values"),
    pytest.param({"podSelector": {"matchExpressions": [{"key": "a_", "operator": "Exists"}]}},
                 "podSelector.matchExpressions[0].key", LABEL_KEY_MSG, id="selector-bad-key"),
    pytest.param({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["ok", "not ok"]}]}},
                 "podSelector.matchExpressions[0].values[1]", LABEL_VALUE_MSG, id="selector-bad-value"),
    pytest.param({"podSelector": {"matchLabels": {"app/x/y": "web"}}}, "podSelector.matchLabels",
                 "a valid label key must consist of", id="selector-bad-match-label-key"),
    pytest.param({"podSelector": {"matchLabels": {"app": "-web"}}}, "podSelector.matchLabels", LABEL_VALUE_MSG,
                 id="selector-bad-match-label-value"),
    pytest.param({"podSelector": {"matchLabels": {"app": "w" * 64}}}, "podSelector.matchLabels.app",
                 "Too long: may not be more than 63 bytes", id="selector-value-too-long"),
    pytest.param({"podSelector": {"matchLabels": {f"k{i}": "v" for i in range(65)}}}, "podSelector.matchLabels",
                 "Too many: 65: must have at most 64 items", id="selector-too-many-labels"),
    pytest.param({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"}] * 33}},
                 "podSelector.matchExpressions", "Too many: 33", id="selector-too-many-expressions"),
    pytest.param({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In",
                                                        "values": [str(i) for i in range(129)]}]}},
                 "podSelector.matchExpressions[0].values", "Too many: 129", id="selector-too-many-values"),
    pytest.param({"podSelector": {"matchLabel": {}}}, "podSelector.matchLabel", "Extra inputs are not permitted",
                 id="selector-unknown-field"),
    # at least one of the two
    pytest.param({}, "podNamePattern", "Required value: at least one of podNamePattern and podSelector",
                 id="no-workload"),
    # nodeLabel: a label key and value
    pytest.param({"podNamePattern": "x", "nodeLabel": None}, "nodeLabel", "must be an object",
                 id="node-label-null"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"key": "pool"}}, "nodeLabel.value", "Required value",
                 id="node-label-value-missing"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"value": "web"}}, "nodeLabel.key", "Required value",
                 id="node-label-key-missing"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"key": "", "value": "web"}}, "nodeLabel.key",
                 'Invalid value: "": name part must be non-empty', id="node-label-key-empty"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"key": "pool name", "value": "web"}}, "nodeLabel.key",
                 LABEL_KEY_MSG, id="node-label-key-space"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"key": "example.com/", "value": "web"}}, "nodeLabel.key",
                 "name part must be non-empty", id="node-label-key-no-name"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"key": "pool", "value": "web pool"}}, "nodeLabel.value",
                 LABEL_VALUE_MSG, id="node-label-bad-value"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"key": "pool", "value": "w" * 64}}, "nodeLabel.value",
                 "Too long: may not be more than 63 bytes", id="node-label-value-too-long"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"key": "pool", "value": "web", "op": "In"}},
                 "nodeLabel.op", "Extra inputs are not permitted", id="node-label-unknown-field"),
    pytest.param({"podNamePattern": "x", "namespaces": ["a"]}, "namespaces", "Extra inputs are not permitted",
                 id="unknown-field"),
])
def test_args_validation(args, path, detail):
    full = {"nodeLabel": {"key": "pool", "value": "web"}, **args}
    refused(NAME, full, path, detail)


@pytest.mark.parametrize("args", [
    {"podNamePattern": "web-[0-9]+"},
    {"podNamePattern": "(?i)WEB-.*"},
    {"podNamePattern": ""},  # matches only the empty name: selects nothing, but valid
    {"podSelector": {}},  # {} selects every pod
    {"podSelector": {"matchLabels": {"example.com/app": ""}}},
    {"podSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a", ""]}]}},
])
def test_args_accepted(args):
    assert arg_errors(NAME, {"nodeLabel": {"key": "example.com/pool", "value": ""}, **args}) == []


def test_a_pathological_pattern_matches_in_linear_time():
    """(a+)+$ backtracks exponentially in Python's re on "aaa...a-x"; RE2 answers at once."""
    pl = plugin(podNamePattern="(a+)+$")
    name = "a" * 200 + "-x"
    t0 = time.perf_counter()
    assert not pl.selects(make_pod(name)) and pl.selects(make_pod("aaaa"))
    assert time.perf_counter() - t0 < 0.05


def test_a_null_label_value_in_the_pod_selector_is_the_empty_string():
    """As Go reads {app: null}: app="" (not the text "None")."""
    for sel in ({"matchLabels": {"app": None}}, {"matchExpressions": [{"key": "app", "operator": "In",
                                                                        "values": [None]}]}):
        pl = plugin(podSelector=sel)
        assert pl.selects(make_pod("x", {"app": ""})) and not pl.selects(make_pod("y", {"app": "None"}))
        assert not pl.selects(make_pod("z"))


def test_args_accept_field_names_and_empty_label_value():
    args = PLUGIN.Args.model_validate({"pod_name_pattern": "a.*", "node_label": {"key": "k", "value": ""}})
    assert (args.pod_name_pattern, args.node_label.key, args.node_label.value) == ("a.*", "k", "")


# ------------------------------------------------------------------ events and queueing hints
A, T = ActionType, Resource


def test_events_to_register():
    assert registered(plugin(podSelector={})) == [
        (T.NODE, A.ADD), (T.NODE, A.UPDATE_NODE_LABEL), (T.TARGET_POD, A.UPDATE_POD_LABEL)]


# Filter passes a node of the workload only when it carries pool=web: a node helps when it now has
# that label with that value and did not before (a new node did not before).
@pytest.mark.parametrize("action, old, new, want", [
    (A.ADD, None, node("x", {"pool": "web"}), QUEUE),
    (A.ADD, None, node("x", {"pool": "db"}), SKIP),
    (A.ADD, None, node("x"), SKIP),
    (A.UPDATE_NODE_LABEL, node("x", {"pool": "db"}), node("x", {"pool": "web"}), QUEUE),
    (A.UPDATE_NODE_LABEL, node("x"), node("x", {"pool": "web"}), QUEUE),
    (A.UPDATE_NODE_LABEL, node("x", {"pool": "web"}), node("x", {"pool": "web", "zone": "a"}), SKIP),
    (A.UPDATE_NODE_LABEL, node("x", {"pool": "web"}), node("x", {"pool": "db"}), SKIP),
])
def test_node_change_hint(action, old, new, want):
    pod = make_pod("api-0", {"app": "api"})
    assert hint(plugin(podSelector={"matchLabels": {"app": "api"}}), T.NODE, action, pod, old, new) == want


# The pod's own label change helps only when it takes the pod out of the workload (Filter then
# passes every node); its name, which podNamePattern reads, cannot change.
@pytest.mark.parametrize("selection, new_labels, want", [
    ({"podSelector": {"matchLabels": {"app": "api"}}}, {"app": "other"}, QUEUE),
    ({"podSelector": {"matchLabels": {"app": "api"}}}, {"app": "api", "v": "2"}, SKIP),
    ({"podNamePattern": "api-.*"}, {"app": "other"}, SKIP),  # still selected by name
])
def test_pod_label_hint(selection, new_labels, want):
    pod = make_pod("api-0", {"app": "api"})
    new = make_pod("api-0", new_labels)
    assert hint(plugin(**selection), T.TARGET_POD, A.UPDATE_POD_LABEL, pod, pod, new) == want
