"""NodeUnschedulable: cordoned nodes fit only pods tolerating node.kubernetes.io/unschedulable:NoSchedule."""

import numpy as np
from support import kit
import pytest

from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.node_unschedulable import ERR_REASON, PLUGIN
from policy_scheduler.framework.events import ActionType, Resource
from support.kit import QUEUE, SKIP, hint, node, registered

KEY = "node.kubernetes.io/unschedulable"


def make_node(name, unschedulable):
    return {"metadata": {"name": name}, "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": "1", "pods": "10"}}}


def make_pod(tolerations=()):
    return parse_pod({"metadata": {"name": "p", "namespace": "default"},
                      "spec": {"containers": [{"name": "c"}], "tolerations": list(tolerations)}})


def run(nodes, pod, rows):
    return PLUGIN(None, Handle()).filter(CycleState(), pod, nodes, np.asarray(rows, dtype=np.intp))


def table():
    t = NodeTable()
    t.upsert_node(make_node("open", False))
    t.upsert_node(make_node("cordoned", True))
    return t


@pytest.mark.parametrize("tolerations, fits_cordoned", [
    pytest.param([], False, id="no-toleration"),
    pytest.param([{"key": KEY, "operator": "Exists", "effect": "NoSchedule"}], True, id="exists-noschedule"),
    pytest.param([{"key": KEY, "operator": "Exists"}], True, id="exists-any-effect"),
    pytest.param([{"operator": "Exists"}], True, id="tolerate-everything"),
    pytest.param([{"key": KEY, "operator": "Equal", "effect": "NoSchedule"}], True, id="equal-empty-value"),
    pytest.param([{"key": KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}], False,
                 id="equal-other-value"),
    pytest.param([{"key": KEY, "operator": "Exists", "effect": "NoExecute"}], False, id="wrong-effect"),
    pytest.param([{"key": KEY, "operator": "Exists", "effect": "PreferNoSchedule"}], False, id="prefer-effect"),
    pytest.param([{"key": "other", "operator": "Exists"}], False, id="other-key"),
])
def test_filter(tolerations, fits_cordoned):
    res = run(table(), make_pod(tolerations), [0, 1])
    assert res.passed.tolist() == [True, fits_cordoned]
    if not fits_cordoned:
        assert res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert [(r, m.tolist()) for r, m in res.reasons] == [(ERR_REASON, [False, True])]


def test_follows_cordon_and_uncordon_on_row_subset():
    nodes = table()
    assert run(nodes, make_pod(), [1, 0]).passed.tolist() == [False, True]
    nodes.upsert_node(make_node("cordoned", False))
    nodes.upsert_node(make_node("open", True))
    assert run(nodes, make_pod(), [1, 0]).passed.tolist() == [True, False]


def test_reason_text():
    assert ERR_REASON == "node(s) were unschedulable"


# ------------------------------------------------------------------ events and queueing hints
A, T = ActionType, Resource


def test_events_to_register():
    assert registered(PLUGIN(None, Handle())) == [
        (T.NODE, A.ADD), (T.NODE, A.UPDATE_NODE_TAINT), (T.TARGET_POD, A.UPDATE_POD_TOLERATION)]


# upstream isSchedulableAfterNodeChange: Queue when the node was added schedulable, or went from
# unschedulable to schedulable; a cordoned node (added or still cordoned) cannot help.
@pytest.mark.parametrize("action, old, new, want", [
    (A.ADD, None, node("a"), QUEUE),
    (A.ADD, None, node("a", unschedulable=True), SKIP),
    (A.UPDATE_NODE_TAINT, node("a", unschedulable=True), node("a"), QUEUE),
    (A.UPDATE_NODE_TAINT, node("a"), node("a", taints=[("k", "v", "NoSchedule")]), SKIP),  # was schedulable already
    (A.UPDATE_NODE_TAINT, node("a", unschedulable=True),
     node("a", unschedulable=True, taints=[("k", "", "NoSchedule")]), SKIP),  # still cordoned
])
def test_node_change_hint(action, old, new, want):
    assert hint(PLUGIN(None, Handle()), T.NODE, action, make_pod(), old, new) == want


# upstream isSchedulableAfterPodTolerationChange: the pod itself now tolerates
# node.kubernetes.io/unschedulable:NoSchedule (tolerations are only ever added).
@pytest.mark.parametrize("tolerations, want", [
    ([{"key": KEY, "operator": "Exists", "effect": "NoSchedule"}], QUEUE),
    ([{"operator": "Exists"}], QUEUE),  # tolerates everything
    ([{"key": "other", "operator": "Exists"}], SKIP),  # an unrelated toleration
    ([{"key": KEY, "operator": "Exists", "effect": "NoExecute"}], SKIP),  # wrong effect
])
def test_pod_toleration_hint(tolerations, want):
    pod = make_pod()
    new = make_pod(tolerations)
    assert hint(PLUGIN(None, Handle()), T.TARGET_POD, A.UPDATE_POD_TOLERATION, pod, pod, new) == want


# ------------------------------------------------------------------ args
@pytest.mark.parametrize("args", [{"x": 1}, {"weight": 2}])
def test_takes_no_args(args):
    kit.assert_takes_no_args(PLUGIN.NAME, args)
