"""NodeName: spec.nodeName pins the pod to that node."""

import numpy as np
from support import kit
import pytest

from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.node_name import ERR_REASON, PLUGIN
from policy_scheduler.framework.events import ActionType, Resource
from support.kit import QUEUE, hint, node, registered

NAMES = ("n1", "n2", "n3")


def table():
    t = NodeTable()
    for name in NAMES:
        t.upsert_node({"metadata": {"name": name}, "status": {"allocatable": {"cpu": "1", "pods": "10"}}})
    return t


def make_pod(node_name=None):
    spec = {"containers": [{"name": "c"}]}
    if node_name is not None:
        spec["nodeName"] = node_name
    return parse_pod({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})


@pytest.mark.parametrize("node_name, rows, passed", [
    pytest.param(None, [0, 1, 2], [True, True, True], id="unset-fits-all"),
    pytest.param("", [0, 1, 2], [True, True, True], id="empty-fits-all"),
    pytest.param("n2", [0, 1, 2], [False, True, False], id="only-named-node"),
    pytest.param("n2", [2, 1], [False, True], id="row-subset"),
    pytest.param("n9", [0, 1, 2], [False, False, False], id="unknown-node"),
    pytest.param("n1", [], [], id="no-rows"),
])
def test_filter(node_name, rows, passed):
    res = PLUGIN(None, Handle()).filter(CycleState(), make_pod(node_name), table(), np.asarray(rows, dtype=np.intp))
    assert res.passed.tolist() == passed
    if not all(passed):
        assert res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert [(r, m.tolist()) for r, m in res.reasons] == [(ERR_REASON, [not p for p in passed])]


def test_reason_text():
    assert ERR_REASON == "node(s) didn't match the requested node name"


# ------------------------------------------------------------------ events and queueing hints
def test_events_to_register_node_add_without_hint():
    # upstream registers Node/Add with no hint: only a new node can be the named one.
    pl = PLUGIN(None, Handle())
    assert registered(pl) == [(Resource.NODE, ActionType.ADD)]
    assert pl.events_to_register()[0].hint is None
    assert hint(pl, Resource.NODE, ActionType.ADD, make_pod("x"), None, node("y")) == QUEUE


# ------------------------------------------------------------------ args
@pytest.mark.parametrize("args", [{"x": 1}, {"weight": 2}])
def test_takes_no_args(args):
    kit.assert_takes_no_args(PLUGIN.NAME, args)
