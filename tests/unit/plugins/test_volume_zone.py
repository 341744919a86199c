"""VolumeZone (upstream volumezone, v1.37): bound PVs' zone/region labels against the node's."""

from __future__ import annotations

import pytest
from support.kit import QUEUE, SKIP, assert_takes_no_args, instance
from support.volkit import VolHandle, nodes, pod, pv, pvc, run_filter, sc

from policy_scheduler.framework.events import ActionType, Resource
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.volumes.objects import PersistentVolume, PersistentVolumeClaim, StorageClass
from policy_scheduler.plugins.volumes.volume_zone import ERR_REASON_CONFLICT, VolumeZone

PV, PVC, SC = "persistentvolumes", "persistentvolumeclaims", "storageclasses"
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
BETA_ZONE, BETA_REGION = "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region"


def plugin(h):
    return VolumeZone(None, h)


def bound(pv_labels):
    return VolHandle().add(PV, pv("pv-1", labels=pv_labels, claim=("default", "data"), phase="Bound")).add(
        PVC, pvc("data", volume="pv-1", bound=True))


@pytest.mark.parametrize("pv_labels, node_labels, ok", [
    ({ZONE: "z1"}, {ZONE: "z1"}, True),
    ({ZONE: "z1"}, {ZONE: "z2"}, False),
    ({ZONE: "z1__z2"}, {ZONE: "z2"}, True),  # a multi-zone PV
    ({ZONE: "z1"}, {}, True),  # a node without any topology label passes (single-zone clusters)
    ({ZONE: "z1"}, {REGION: "r1"}, False),  # it has one: the zone label is missing
    ({BETA_ZONE: "z1"}, {ZONE: "z1"}, True),  # a beta key falls back to the GA label
    ({BETA_ZONE: "z1"}, {BETA_ZONE: "z1"}, True),
    ({ZONE: "z1"}, {BETA_ZONE: "z1"}, False),  # no fallback from GA to beta
    ({ZONE: "z1", REGION: "r1"}, {ZONE: "z1", REGION: "r2"}, False),
    ({BETA_REGION: "r1", ZONE: "z1"}, {REGION: "r1", ZONE: "z1"}, True),
    ({ZONE: "a____b"}, {ZONE: "z9"}, "skip"),  # an unparseable value is ignored: no topology left
])
def test_filter(pv_labels, node_labels, ok):
    st, got = run_filter(plugin(bound(pv_labels)), pod("p", "data"), nodes(("n", node_labels)))
    if ok == "skip":
        assert st.code == Code.SKIP
        return
    assert got == {"n": (True, ())} if ok else {"n": (False, (ERR_REASON_CONFLICT,))}


def test_reason_and_code():
    pl, state, t = plugin(bound({ZONE: "z1"})), CycleState(), nodes(("a", {ZONE: "z1"}), ("b", {ZONE: "z2"}))
    assert pl.pre_filter(state, pod("p", "data"), t)[0].is_success
    import numpy as np
    res = pl.filter(state, pod("p", "data"), t, np.arange(2))
    assert res.passed.tolist() == [True, False] and res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert ERR_REASON_CONFLICT == "node(s) had no available volume zone"


def test_pv_without_topology_labels_skips():
    st, _ = run_filter(plugin(bound({})), pod("p", "data"), nodes("a"))
    assert st.code == Code.SKIP


@pytest.mark.parametrize("objects, claim, want", [
    ([], "data", 'persistentvolumeclaim "data" not found'),
    ([(PVC, pvc("data", cls=None))], "data", "PersistentVolumeClaim had no pv name and storageClass name"),
    ([(PVC, pvc("data", cls="gone"))], "data", 'storageclass.storage.k8s.io "gone" not found'),
    ([(PVC, pvc("data", cls="odd")), (SC, sc("odd", mode=None))], "data",
     'VolumeBindingMode not set for StorageClass "odd"'),
    ([(PVC, pvc("data", cls="std")), (SC, sc("std", mode="Immediate"))], "data", "PersistentVolume had no name"),
    ([(PVC, pvc("data", volume="gone", bound=True))], "data", 'persistentvolume "gone" not found'),
    ([], "", "PersistentVolumeClaim had no name"),
])
def test_pre_filter_rejections(objects, claim, want):
    h = VolHandle()
    for kind, body in objects:
        h.add(kind, body)
    st, _ = run_filter(plugin(h), pod("p", claim), nodes("a"))
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (want,))


def test_wait_for_first_consumer_claims_are_left_to_volume_binding():
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("data"))
    st, _ = run_filter(plugin(h), pod("p", "data"), nodes("a"))
    assert st.code == Code.SKIP


def test_ephemeral_volumes_do_not_count():
    p = pod("w", volumes=[{"name": "s", "ephemeral": {}}])
    st, _ = run_filter(plugin(VolHandle()), p, nodes("a"))
    assert st.code == Code.SKIP


def test_events_and_hints():
    pl = plugin(VolHandle())
    add_update = ActionType.ADD | ActionType.UPDATE
    assert {(r.event.resource, r.event.action) for r in pl.events_to_register()} == {
        (Resource.STORAGE_CLASS, ActionType.ADD), (Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
        (Resource.PERSISTENT_VOLUME_CLAIM, add_update), (Resource.PERSISTENT_VOLUME, add_update)}
    p = pod("p", "data")
    assert pl.storage_class_hint(p, None, StorageClass.from_dict(sc("c"))) == QUEUE
    assert pl.storage_class_hint(p, None, StorageClass.from_dict(sc("c", mode="Immediate"))) == SKIP
    assert pl.pvc_hint(p, None, PersistentVolumeClaim.from_dict(pvc("data"))) == QUEUE
    assert pl.pvc_hint(p, None, PersistentVolumeClaim.from_dict(pvc("other"))) == SKIP
    a, b = PersistentVolume.from_dict(pv("x", labels={ZONE: "z1"})), PersistentVolume.from_dict(pv("x", labels={ZONE: "z2"}))
    c = PersistentVolume.from_dict(pv("x", labels={ZONE: "z1", "other": "y"}))
    assert pl.pv_hint(p, None, a) == QUEUE
    assert pl.pv_hint(p, a, b) == QUEUE
    assert pl.pv_hint(p, a, c) == SKIP


@pytest.mark.parametrize("args", [{"x": 1}])
def test_takes_no_args(args):
    assert_takes_no_args("VolumeZone", args)
