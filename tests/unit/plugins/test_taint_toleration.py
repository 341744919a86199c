"""TaintToleration: Filter on NoSchedule/NoExecute taints, Score on PreferNoSchedule taints."""

import numpy as np
from support import kit
import pytest

from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.taint_toleration import ERR_REASON_UNTOLERATED, PLUGIN
from policy_scheduler.framework.events import ActionType, Resource
from support.kit import QUEUE, SKIP, changed, hint, node, registered


def make_node(name, taints=()):
    return {"metadata": {"name": name},
            "spec": {"taints": [dict(zip(("key", "value", "effect"), t)) for t in taints]},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def make_pod(tolerations=()):
    return parse_pod({"metadata": {"name": "p", "namespace": "default"},
                      "spec": {"containers": [{"name": "c"}], "tolerations": list(tolerations)}})


def table(*nodes):
    t = NodeTable()
    for n in nodes:
        t.upsert_node(n)
    return t


def plugin():
    return PLUGIN(None, Handle())


def run_filter(nodes, pod, rows=None):
    rows = np.arange(nodes.n) if rows is None else np.asarray(rows)
    return plugin().filter(CycleState(), pod, nodes, rows)


def run_score(nodes, pod):
    pl, state, rows = plugin(), CycleState(), np.arange(nodes.n)
    assert pl.pre_score(state, pod, nodes, rows).is_success
    raw = pl.score(state, pod, nodes, rows)
    return raw.tolist(), pl.normalize_score(state, pod, nodes, rows, raw).tolist()


GPU = ("dedicated", "gpu", "NoSchedule")


@pytest.mark.parametrize("taints, tolerations, fits", [
    pytest.param([], [], True, id="no-taints"),
    pytest.param([GPU], [], False, id="untolerated-noschedule"),
    pytest.param([("dedicated", "gpu", "NoExecute")], [], False, id="untolerated-noexecute"),
    pytest.param([("dedicated", "gpu", "PreferNoSchedule")], [], True, id="prefer-ignored-by-filter"),
    pytest.param([GPU], [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                 True, id="equal-match"),
    pytest.param([GPU], [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
                 True, id="operator-defaults-to-equal"),
    pytest.param([GPU], [{"key": "dedicated", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}],
                 False, id="equal-wrong-value"),
    pytest.param([GPU], [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
                 True, id="exists-any-value"),
    pytest.param([GPU], [{"key": "other", "operator": "Exists"}], False, id="exists-other-key"),
    pytest.param([GPU], [{"operator": "Exists"}], True, id="empty-key-exists-tolerates-all"),
    pytest.param([GPU], [{"key": "dedicated", "operator": "Exists"}], True, id="empty-effect-matches-all"),
    pytest.param([GPU], [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}],
                 False, id="effect-mismatch"),
    pytest.param([GPU], [{"key": "dedicated", "operator": "Exists", "effect": "PreferNoSchedule"}],
                 False, id="prefer-toleration-does-not-cover-noschedule"),
    pytest.param([("node-role.kubernetes.io/control-plane", "", "NoSchedule")],
                 [{"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "effect": "NoSchedule"}],
                 True, id="empty-value-equal"),
    pytest.param([("a", "1", "NoSchedule"), ("b", "2", "NoExecute")],
                 [{"key": "a", "operator": "Exists"}], False, id="second-taint-untolerated"),
    pytest.param([("a", "1", "NoSchedule"), ("b", "2", "NoExecute")],
                 [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Equal", "value": "2"}],
                 True, id="all-taints-tolerated"),
])
def test_filter(taints, tolerations, fits):
    nodes = table(make_node("n", taints))
    res = run_filter(nodes, make_pod(tolerations))
    assert res.passed.tolist() == [fits]
    if not fits:
        assert res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert [(r, m.tolist()) for r, m in res.reasons] == [(ERR_REASON_UNTOLERATED, [True])]


def test_reason_text_is_the_current_upstream_one():
    # v1.37 (since PR 134740) no longer prints the taint key and value.
    assert ERR_REASON_UNTOLERATED == "node(s) had untolerated taint(s)"


def test_filter_results_align_with_the_given_rows():
    nodes = table(make_node("clean"), make_node("gpu", [GPU]), make_node("soft", [("x", "", "PreferNoSchedule")]),
                  make_node("gpu2", [GPU]))
    res = run_filter(nodes, make_pod(), rows=[3, 0, 1])
    assert res.passed.tolist() == [False, True, False]
    assert [(r, m.tolist()) for r, m in res.reasons] == [(ERR_REASON_UNTOLERATED, [True, False, True])]


def test_filter_empty_rows():
    nodes = table(make_node("gpu", [GPU]))
    assert run_filter(nodes, make_pod(), rows=np.array([], dtype=np.intp)).passed.tolist() == []


def test_verdict_follows_node_taint_changes_and_pod_tolerations():
    nodes = table(make_node("n", [GPU]))
    assert run_filter(nodes, make_pod()).passed.tolist() == [False]
    tolerating = make_pod([{"key": "dedicated", "operator": "Exists"}])
    assert run_filter(nodes, tolerating).passed.tolist() == [True]
    nodes.upsert_node(make_node("n"))  # taint removed
    assert run_filter(nodes, make_pod()).passed.tolist() == [True]
    nodes.upsert_node(make_node("n", [("other", "x", "NoExecute")]))
    assert run_filter(nodes, tolerating).passed.tolist() == [False]


SOFT1 = ("k1", "v1", "PreferNoSchedule")
SOFT2 = ("k2", "v2", "PreferNoSchedule")
SOFT3 = ("k3", "v3", "PreferNoSchedule")


@pytest.mark.parametrize("node_taints, tolerations, raw, normalized", [
    # max raw 2: 100 - 100*raw//2 -> 100, 50, 0, 50 (the NoSchedule taint on d is not counted)
    pytest.param([[], [SOFT1], [SOFT1, SOFT2], [GPU, SOFT2]], [], [0, 1, 2, 1], [100, 50, 0, 50],
                 id="counts-prefer-taints-only"),
    # k1 tolerated: raw 0,0,1,1 -> max 1 -> 100, 100, 0, 0
    pytest.param([[], [SOFT1], [SOFT1, SOFT2], [GPU, SOFT2]],
                 [{"key": "k1", "operator": "Exists", "effect": "PreferNoSchedule"}],
                 [0, 0, 1, 1], [100, 100, 0, 0], id="prefer-toleration"),
    # an empty-effect toleration also counts for PreferNoSchedule
    pytest.param([[], [SOFT1], [SOFT1, SOFT2], [GPU, SOFT2]],
                 [{"key": "k1", "operator": "Equal", "value": "v1"}],
                 [0, 0, 1, 1], [100, 100, 0, 0], id="empty-effect-toleration"),
    # a NoSchedule toleration is not used for scoring
    pytest.param([[], [SOFT1], [SOFT1, SOFT2], [GPU, SOFT2]],
                 [{"key": "k1", "operator": "Exists", "effect": "NoSchedule"}],
                 [0, 1, 2, 1], [100, 50, 0, 50], id="noschedule-toleration-ignored"),
    # all raw 0 -> every node 100 (reverse DefaultNormalizeScore)
    pytest.param([[], [SOFT1], [GPU]], [{"operator": "Exists"}], [0, 0, 0], [100, 100, 100],
                 id="all-tolerated"),
    # max 3: 100 - 100*1//3 = 100 - 33 = 67; 100 - 100*3//3 = 0
    pytest.param([[], [SOFT1], [SOFT1, SOFT2, SOFT3]], [], [0, 1, 3], [100, 67, 0], id="integer-truncation"),
])
def test_score(node_taints, tolerations, raw, normalized):
    nodes = table(*(make_node(f"n{i}", t) for i, t in enumerate(node_taints)))
    assert run_score(nodes, make_pod(tolerations)) == (raw, normalized)


def test_score_on_a_subset_of_rows():
    nodes = table(make_node("a", [SOFT1]), make_node("b"), make_node("c", [SOFT1, SOFT2]))
    pl, state, rows = plugin(), CycleState(), np.array([2, 1])
    pl.pre_score(state, make_pod(), nodes, rows)
    raw = pl.score(state, make_pod(), nodes, rows)
    assert raw.tolist() == [2, 0]
    # 100 - 100*2//2 = 0; raw 0 -> 100
    assert pl.normalize_score(state, make_pod(), nodes, rows, raw).tolist() == [0, 100]


# ------------------------------------------------------------------ events and queueing hints
A, T = ActionType, Resource
NS = ("dedicated", "gpu", "NoSchedule")
NE = ("dedicated", "gpu", "NoExecute")
PREFER = ("soft", "x", "PreferNoSchedule")
TOL_GPU = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


def test_events_to_register():
    assert registered(plugin()) == [
        (T.NODE, A.ADD), (T.NODE, A.UPDATE_NODE_TAINT), (T.TARGET_POD, A.UPDATE_POD_TOLERATION)]


# upstream isSchedulableAfterNodeChange: Queue only when the old node (a new node counts as having
# had one) had an untolerated NoSchedule/NoExecute taint and the new node has none.
@pytest.mark.parametrize("action, old, new, tolerations, want", [
    (A.ADD, None, node("a"), (), QUEUE),
    (A.ADD, None, node("a", taints=[PREFER]), (), QUEUE),  # PreferNoSchedule never filters
    (A.ADD, None, node("a", taints=[NS]), (), SKIP),
    (A.ADD, None, node("a", taints=[NS]), (TOL_GPU,), QUEUE),  # tolerated
    (A.ADD, None, node("a", taints=[NS, NE]), (TOL_GPU,), SKIP),  # NoExecute still untolerated
    (A.UPDATE_NODE_TAINT, node("a", taints=[NS]), node("a"), (), QUEUE),
    (A.UPDATE_NODE_TAINT, node("a", taints=[NS]), node("a", taints=[NE]), (), SKIP),
    (A.UPDATE_NODE_TAINT, node("a"), node("a", taints=[PREFER]), (), SKIP),  # was tolerated already
    (A.UPDATE_NODE_TAINT, node("a", taints=[NS]), node("a", taints=[PREFER]), (), QUEUE),
])
def test_node_change_hint(action, old, new, tolerations, want):
    assert hint(plugin(), T.NODE, action, make_pod(tolerations), old, new) == want


# upstream isSchedulableAfterPodTolerationChange: any toleration added to the pod itself queues.
@pytest.mark.parametrize("same_pod, want", [(True, QUEUE), (False, SKIP)])
def test_pod_toleration_hint(same_pod, want):
    pod = make_pod()
    new = make_pod((TOL_GPU,))
    if not same_pod:
        new = changed(new, uid="someone-else")
    assert hint(plugin(), T.TARGET_POD, A.UPDATE_POD_TOLERATION, pod, pod, new) == want


# ------------------------------------------------------------------ args
@pytest.mark.parametrize("args", [{"x": 1}, {"weight": 2}])
def test_takes_no_args(args):
    kit.assert_takes_no_args(PLUGIN.NAME, args)
