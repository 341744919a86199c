"""NodeVolumeLimits (upstream nodevolumelimits/csi.go, v1.37): CSI attach limits from the
CSINode, counting unique driver/handle volumes of the pods on the node."""

from __future__ import annotations

import numpy as np
from support.kit import QUEUE, SKIP, assert_takes_no_args
from support.volkit import VolHandle, csinode, nodes, pod, pv, pvc, run_filter, sc

from policy_scheduler.framework.events import ActionType, Resource
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.volumes.objects import CSINode, PersistentVolumeClaim
from policy_scheduler.plugins.volumes.node_volume_limits import ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED, NodeVolumeLimits

PV, PVC, SC, CN, CD = "persistentvolumes", "persistentvolumeclaims", "storageclasses", "csinodes", "csidrivers"
DRV = "ebs.csi.aws.com"


def plugin(h):
    return NodeVolumeLimits(None, h)


def handle(limit=2, n_pvs=4):
    """PVs vol-0.. bound to claims c0.. (CSI driver DRV, handles h0..); nodes a and b with
    ``limit`` attachments of DRV on a, none on b."""
    h = VolHandle().add(CN, csinode("a", {DRV: limit}), csinode("b", {DRV: None}))
    for i in range(n_pvs):
        h.add(PV, pv(f"vol-{i}", cls="gp3", csi=(DRV, f"h{i}"), claim=("default", f"c{i}"), phase="Bound"))
        h.add(PVC, pvc(f"c{i}", cls="gp3", volume=f"vol-{i}", bound=True))
    return h


def test_within_and_over_the_limit():
    h, t = handle(limit=2), nodes("a", "b")
    t.add_pod(pod("x", "c0"), "a")
    _, got = run_filter(plugin(h), pod("p", "c1"), t)
    assert got == {"a": (True, ()), "b": (True, ())}  # 1 attached + 1 new = 2 <= 2
    t.add_pod(pod("y", "c1"), "a")
    _, got = run_filter(plugin(h), pod("p", "c2"), t)
    assert got == {"a": (False, (ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,)), "b": (True, ())}  # 2 + 1 > 2
    assert ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED == "node(s) exceed max volume count"


def test_a_volume_already_on_the_node_counts_once():
    h, t = handle(limit=2), nodes("a")
    t.add_pod(pod("x", "c0"), "a")
    t.add_pod(pod("y", "c1"), "a")
    _, got = run_filter(plugin(h), pod("p", "c1"), t)  # shares vol-1 with y
    assert got == {"a": (True, ())}
    t.add_pod(pod("z", "c0"), "a")  # the same volume twice on the node
    _, got = run_filter(plugin(h), pod("p", "c1"), t)
    assert got == {"a": (True, ())}


def test_unbound_claim_counts_through_its_storage_class():
    h, t = handle(limit=1), nodes("a")
    h.add(SC, sc("gp3", DRV)).add(PVC, pvc("fresh", cls="gp3"))
    t.add_pod(pod("x", "c0"), "a")
    _, got = run_filter(plugin(h), pod("p", "fresh"), t)
    assert got == {"a": (False, (ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,))}
    h.add(PVC, pvc("noclass", cls=None))
    _, got = run_filter(plugin(h), pod("p", "noclass"), t)
    assert got == {"a": (True, ())}  # no class: not counted


def test_non_csi_pv_and_nodes_without_limits_pass():
    h, t = handle(limit=0), nodes("a", "b", "c")
    h.add(PV, pv("plain", phase="Bound", claim=("default", "plain"))).add(PVC, pvc("plain", volume="plain", bound=True))
    _, got = run_filter(plugin(h), pod("p", "plain"), t)
    assert all(ok for ok, _ in got.values())  # a non-CSI volume is not counted
    _, got = run_filter(plugin(h), pod("p", "c0"), t)
    # a: limit 0; b: the driver without a count; c: no CSINode at all
    assert got == {"a": (False, (ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,)), "b": (True, ()), "c": (True, ())}


def test_other_pods_missing_claims_are_ignored_but_the_pods_own_fail_the_node():
    h, t = handle(limit=1), nodes("a")
    t.add_pod(pod("x", "gone"), "a")
    _, got = run_filter(plugin(h), pod("p", "c0"), t)
    assert got == {"a": (True, ())}
    pl, state = plugin(h), CycleState()
    assert pl.pre_filter(state, pod("p", "nope"), t)[0].is_success
    res = pl.filter(state, pod("p", "nope"), t, np.arange(1))
    assert not res.passed[0] and res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert [r for r, _ in res.reasons] == ['looking up PVC default/nope: persistentvolumeclaim "nope" not found']


def test_driver_required_but_not_installed():
    h, t = handle(limit=5), nodes("a", "b")
    h.add(CD, {"metadata": {"name": DRV, "resourceVersion": "1"}, "spec": {"preventPodSchedulingIfMissing": True}})
    h.cache.apply(CN, "DELETED", csinode("b", {}))
    _, got = run_filter(plugin(h), pod("p", "c0"), t)
    assert got == {"a": (True, ()), "b": (False, (f"{DRV} CSI driver is not installed on the node",))}


def test_pre_filter_skips_pods_without_claims():
    p = pod("p", volumes=[{"name": "i", "csi": {"driver": DRV}}])
    assert plugin(VolHandle()).pre_filter(CycleState(), p, nodes("a"))[0].code == Code.SKIP


def test_events_and_hints():
    pl = plugin(VolHandle())
    assert {(r.event.resource, r.event.action) for r in pl.events_to_register()} == {
        (Resource.CSI_NODE, ActionType.ADD), (Resource.CSI_NODE, ActionType.UPDATE),
        (Resource.ASSIGNED_POD, ActionType.DELETE), (Resource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD)}
    p = pod("p", "c0")
    old = CSINode.from_dict(csinode("a", {DRV: 2}))
    assert pl.csinode_updated_hint(p, old, CSINode.from_dict(csinode("a", {DRV: 3}))) == QUEUE
    assert pl.csinode_updated_hint(p, old, CSINode.from_dict(csinode("a", {DRV: 1}))) == SKIP
    assert pl.csinode_updated_hint(p, old, old) == SKIP
    assert pl.pod_deleted_hint(p, pod("x", "c9", node_name="a"), None) == QUEUE
    assert pl.pod_deleted_hint(p, pod("x", node_name="a"), None) == SKIP
    assert pl.pod_deleted_hint(p, pod("x", "c9"), None) == SKIP  # never on a node
    assert pl.pvc_added_hint(p, None, PersistentVolumeClaim.from_dict(pvc("c0"))) == QUEUE
    assert pl.pvc_added_hint(p, None, PersistentVolumeClaim.from_dict(pvc("c1"))) == SKIP


def test_takes_no_args():
    assert_takes_no_args("NodeVolumeLimits", {"x": 1})
