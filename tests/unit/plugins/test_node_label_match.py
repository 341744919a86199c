"""NodeLabelMatch: pods of one workload only on nodes with a given label; args validation."""

import numpy as np
import pytest
from pydantic import ValidationError

from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.nodetable import NodeTable
from policy_scheduler.framework.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.node_label_match import PLUGIN
from policy_scheduler.framework.events import ActionType, Resource
from kit import QUEUE, SKIP, hint, node, registered

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


@pytest.mark.parametrize("args, fragment", [
    pytest.param({"podNamePattern": "web-("}, "podNamePattern", id="invalid-regex"),
    pytest.param({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}},
                 "podSelector.matchExpressions[0].operator", id="selector-bad-operator"),
    pytest.param({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
                 "podSelector.matchExpressions[0].values", id="selector-in-without-values"),
    pytest.param({}, "podNamePattern or podSelector", id="no-workload"),
    pytest.param({"podNamePattern": "x", "nodeLabel": None}, "nodeLabel", id="node-label-missing"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"key": "pool"}}, "value", id="node-label-value-missing"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"value": "web"}}, "key", id="node-label-key-missing"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"key": "", "value": "web"}}, "nodeLabel.key",
                 id="node-label-key-empty"),
    pytest.param({"podNamePattern": "x", "nodeLabel": {"key": "pool", "value": "web", "op": "In"}}, "op",
                 id="node-label-unknown-field"),
    pytest.param({"podNamePattern": "x", "namespaces": ["a"]}, "namespaces", id="unknown-field"),
])
def test_args_validation(args, fragment):
    full = {"nodeLabel": {"key": "pool", "value": "web"}, **args}
    if full["nodeLabel"] is None:
        del full["nodeLabel"]
    with pytest.raises(ValidationError) as e:
        PLUGIN.Args.model_validate(full)
    assert fragment in str(e.value)


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
