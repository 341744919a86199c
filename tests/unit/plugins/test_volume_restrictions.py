"""VolumeRestrictions (upstream volumerestrictions, v1.37): inline disk conflicts per node and
ReadWriteOncePod claims in use anywhere in the cluster."""

from __future__ import annotations

import pytest
from support.kit import QUEUE, SKIP, assert_takes_no_args
from support.volkit import VolHandle, nodes, pod, pvc, run_filter

from policy_scheduler.framework.events import ActionType, Resource
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.volumes.objects import PersistentVolumeClaim
from policy_scheduler.plugins.volumes.volume_restrictions import (ERR_REASON_DISK_CONFLICT,
                                                                  ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT,
                                                                  VolumeRestrictions)

PVC = "persistentvolumeclaims"


def plugin(h=None):
    return VolumeRestrictions(None, h or VolHandle())


def gce(pd, ro=False):
    return {"name": f"g-{pd}", "gcePersistentDisk": {"pdName": pd, "readOnly": ro}}


def ebs(vid, ro=False):
    return {"name": f"e-{vid}", "awsElasticBlockStore": {"volumeID": vid, "readOnly": ro}}


def iscsi(iqn, ro=False):
    return {"name": f"i-{iqn}", "iscsi": {"iqn": iqn, "targetPortal": "p", "lun": 0, "readOnly": ro}}


def rbd(mons, image, pool=None, ro=False):
    src = {"monitors": list(mons), "image": image, "readOnly": ro}
    if pool:
        src["pool"] = pool
    return {"name": f"r-{image}", "rbd": src}


@pytest.mark.parametrize("existing, wanted, conflict", [
    (gce("a"), gce("a"), True),
    (gce("a", ro=True), gce("a", ro=True), False),  # both read-only
    (gce("a", ro=True), gce("a"), True),
    (gce("a"), gce("b"), False),
    (ebs("v1", ro=True), ebs("v1", ro=True), True),  # EBS: always
    (ebs("v1"), ebs("v2"), False),
    (iscsi("iqn.1"), iscsi("iqn.1"), True),
    (iscsi("iqn.1", ro=True), iscsi("iqn.1", ro=True), False),
    (rbd(["m1", "m2"], "img"), rbd(["m2", "m3"], "img"), True),  # a shared monitor
    (rbd(["m1"], "img"), rbd(["m2"], "img"), False),
    (rbd(["m1"], "img", pool="p1"), rbd(["m1"], "img", pool="p2"), False),
    (rbd(["m1"], "img"), rbd(["m1"], "img", pool="rbd"), True),  # the API's default pool
    (rbd(["m1"], "img", ro=True), rbd(["m1"], "img", ro=True), False),
    (gce("a"), ebs("a"), False),  # different kinds never conflict
])
def test_disk_conflicts(existing, wanted, conflict):
    t = nodes("a", "b")
    t.add_pod(pod("old", volumes=[existing]), "a")
    st, got = run_filter(plugin(), pod("new", volumes=[wanted]), t)
    assert st.is_success
    assert got["b"] == (True, ())
    assert got["a"] == ((False, (ERR_REASON_DISK_CONFLICT,)) if conflict else (True, ()))


def test_disk_conflict_is_unschedulable_and_freed_when_the_pod_leaves():
    import numpy as np

    from policy_scheduler.framework.interface import CycleState

    t = nodes("a")
    t.add_pod(pod("old", volumes=[gce("a")]), "a")
    pl, state, p = plugin(), CycleState(), pod("new", volumes=[gce("a")])
    pl.pre_filter(state, p, t)
    res = pl.filter(state, p, t, np.arange(1))
    assert res.code == Code.UNSCHEDULABLE and not res.passed[0]
    t.remove_pod("default/old")
    assert pl.filter(state, p, t, np.arange(1)).passed.tolist() == [True]
    assert ERR_REASON_DISK_CONFLICT == "node(s) had no available disk"


def rwop_handle():
    return VolHandle().add(PVC, pvc("solo", modes=("ReadWriteOncePod",)), pvc("shared", modes=("ReadWriteMany",)))


def test_read_write_once_pod_claim_in_use_fails_every_node():
    t = nodes("a", "b")
    t.add_pod(pod("holder", "solo"), "a")
    st, got = run_filter(plugin(rwop_handle()), pod("p", "solo"), t)
    assert st.is_success
    assert got == {n: (False, (ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT,)) for n in "ab"}
    assert ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT == ("node(s) unavailable due to PersistentVolumeClaim with "
                                                      "ReadWriteOncePod access mode already in-use by another pod")


def test_read_write_once_pod_claim_free_or_shared_claim_skips():
    t = nodes("a")
    t.add_pod(pod("holder", "shared"), "a")
    pl = plugin(rwop_handle())
    st, _ = run_filter(pl, pod("p", "solo"), t)
    assert st.code == Code.SKIP  # nobody uses the RWOP claim
    st, _ = run_filter(pl, pod("q", "shared"), t)
    assert st.code == Code.SKIP  # used, but not ReadWriteOncePod
    t.add_pod(pod("holder2", "solo", ns="other"), "a")
    st, _ = run_filter(pl, pod("p", "solo"), t)
    assert st.code == Code.SKIP  # same claim name in another namespace


def test_read_write_once_pod_released_by_the_holder():
    t = nodes("a")
    t.add_pod(pod("holder", "solo"), "a")
    pl = plugin(rwop_handle())
    st, got = run_filter(pl, pod("p", "solo"), t)
    assert not got["a"][0]
    t.remove_pod("default/holder")
    st, _ = run_filter(pl, pod("p", "solo"), t)
    assert st.code == Code.SKIP


def test_missing_claim():
    st, _ = run_filter(plugin(), pod("p", "nope"), nodes("a"))
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ('persistentvolumeclaim "nope" not found',))


def test_events_and_hints():
    pl = plugin()
    assert {(r.event.resource, r.event.action) for r in pl.events_to_register()} == {
        (Resource.ASSIGNED_POD, ActionType.DELETE), (Resource.NODE, ActionType.ADD),
        (Resource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD)}
    waiting = pod("p", "solo", volumes=[gce("a")])
    assert pl.pod_deleted_hint(waiting, pod("x", volumes=[gce("a")]), None) == QUEUE
    assert pl.pod_deleted_hint(waiting, pod("x", "solo"), None) == QUEUE
    assert pl.pod_deleted_hint(waiting, pod("x", "solo", ns="other"), None) == SKIP
    assert pl.pod_deleted_hint(waiting, pod("x", volumes=[gce("b")]), None) == SKIP
    assert pl.pvc_added_hint(waiting, None, PersistentVolumeClaim.from_dict(pvc("solo"))) == QUEUE
    assert pl.pvc_added_hint(waiting, None, PersistentVolumeClaim.from_dict(pvc("x"))) == SKIP


def test_takes_no_args():
    assert_takes_no_args("VolumeRestrictions", {"x": 1})
