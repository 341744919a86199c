"""plugins/volumes/: the parsed storage objects, VolumeCache (informer events and the
cluster events it returns, the assume overlay), PodInfo.volumes, the NodeTable volume
indexes, and the Handle's volume contract."""

from __future__ import annotations

import asyncio

import pytest

from policy_scheduler.framework.events import ActionType, ClusterEvent, Resource
from policy_scheduler.framework.interface import Handle
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import PodVolume, parse_pod
from policy_scheduler.plugins.volumes.objects import (ANN_BOUND_BY_CONTROLLER, ClaimRef, CSIDriver, CSINode,
                                                      PersistentVolume, PersistentVolumeClaim, StorageClass,
                                                      label_zones_to_set)
from policy_scheduler.plugins.volumes.cache import AssumeError, VolumeCache
from policy_scheduler.plugins.volumes.binder import bind_volume_to_claim, with_selected_node

GI = 2**30


def pv_body(name="pv-1", rv="1", cls="local", claim=None, labels=None, **spec):
    s = {"storageClassName": cls, "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], **spec}
    if claim:
        s["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": labels or {}}, "spec": s,
            "status": {"phase": "Available"}}


def pvc_body(name="data", ns="default", rv="1", **spec):
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "uid": f"u-{name}"},
            "spec": {"accessModes": ["ReadWriteOncePod"], "resources": {"requests": {"storage": "5Gi"}}, **spec}}


# ---------------------------------------------------------------- parsing

def test_persistent_volume():
    body = pv_body(labels={"topology.kubernetes.io/zone": "z1__z2"}, claim=("ns", "c"),
                   csi={"driver": "d", "volumeHandle": "h"},
                   nodeAffinity={"required": {"nodeSelectorTerms": [
                       {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}})
    pv = PersistentVolume.from_dict(body)
    assert (pv.name, pv.capacity, pv.storage_class, pv.phase) == ("pv-1", 10 * GI, "local", "Available")
    assert pv.access_modes == {"ReadWriteOnce"} and pv.claim_ref == ClaimRef("ns", "c")
    assert (pv.csi_driver, pv.volume_handle) == ("d", "h")
    assert pv.matches_node({"k": "v"}) and not pv.matches_node({"k": "w"})
    assert pv.topology() == [("topology.kubernetes.io/zone", frozenset({"z1", "z2"}))]
    assert PersistentVolume.from_dict(pv_body()).matches_node({})  # no affinity: every node


def test_storage_class_annotation_wins_and_empty_affinity_matches_nothing():
    body = pv_body(nodeAffinity={"required": {"nodeSelectorTerms": []}})
    body["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "old"}
    pv = PersistentVolume.from_dict(body)
    assert pv.storage_class == "old" and not pv.matches_node({"k": "v"})


def test_claim():
    body = pvc_body(storageClassName="fast", volumeName="pv-9", selector={"matchLabels": {"a": "b"}})
    body["metadata"]["annotations"] = {"pv.kubernetes.io/bind-completed": "yes",
                                       "volume.kubernetes.io/selected-node": "n1"}
    body["metadata"]["ownerReferences"] = [{"uid": "pod-uid", "controller": True}]
    c = PersistentVolumeClaim.from_dict(body)
    assert (c.key, c.storage_class, c.volume_name, c.request) == ("default/data", "fast", "pv-9", 5 * GI)
    assert c.fully_bound and c.selected_node == "n1" and c.controller_uid == "pod-uid"
    assert c.selector.matches({"a": "b"}) and not c.selector.matches({})
    assert not PersistentVolumeClaim.from_dict(pvc_body(volumeName="pv-9")).fully_bound  # not completed


def test_storage_class_csinode_csidriver():
    s = StorageClass.from_dict({"metadata": {"name": "c"}, "provisioner": "p", "volumeBindingMode": "WaitForFirstConsumer",
                                "allowedTopologies": [{"matchLabelExpressions": [{"key": "z", "values": ["1", "2"]}]}]})
    assert s.binding_mode == "WaitForFirstConsumer"
    assert s.topology_matches({"z": "2"}) and not s.topology_matches({"z": "3"}) and not s.topology_matches({})
    assert StorageClass.from_dict({"metadata": {"name": "c"}}).binding_mode is None
    assert StorageClass.from_dict({"metadata": {"name": "c"}}).topology_matches({})
    n = CSINode.from_dict({"metadata": {"name": "n"}, "spec": {"drivers": [
        {"name": "a", "allocatable": {"count": 3}}, {"name": "b"}]}})
    assert n.drivers == {"a": 3, "b": None} and n.limits() == {"a": 3}
    d = CSIDriver.from_dict({"metadata": {"name": "a"}, "spec": {}})
    assert d.attach_required and not d.storage_capacity


@pytest.mark.parametrize("value, want", [("z1", {"z1"}), ("z1__z2", {"z1", "z2"}), (" z1 ", {"z1"}),
                                         ("", set()), ("z1____z2", set())])
def test_label_zones_to_set(value, want):
    assert label_zones_to_set(value) == want


def test_pod_volumes():
    p = parse_pod({"metadata": {"name": "web", "namespace": "ns"}, "spec": {"volumes": [
        {"name": "a", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}},
        {"name": "s", "ephemeral": {"volumeClaimTemplate": {}}},
        {"name": "t", "projected": {"sources": []}},
        {"name": "c", "csi": {"driver": "inline.example.com"}},
        {"name": "g", "gcePersistentDisk": {"pdName": "disk"}},
        {"name": "r", "rbd": {"monitors": ["m"], "image": "i"}},
    ]}})
    assert p.parse_error is None
    assert p.volumes == (PodVolume("a", claim="data", pvc=True, read_only=True),
                         PodVolume("s", claim="web-s", ephemeral=True),
                         PodVolume("c", csi_driver="inline.example.com"),
                         PodVolume("g", gce_pd="disk"),
                         PodVolume("r", rbd=(frozenset({"m"}), "rbd", "i")))
    assert p.claim_names == ("data", "web-s")
    assert parse_pod({"metadata": {"name": "x"}, "spec": {}}).volumes == ()


# ---------------------------------------------------------------- the cache and its events

def test_apply_returns_the_cluster_events_with_parsed_objects():
    c = VolumeCache()
    assert len(c) == 0 and c.pv("pv-1") is None
    (ev, old, new), = c.apply("persistentvolumes", "ADDED", pv_body())
    assert ev == ClusterEvent(Resource.PERSISTENT_VOLUME, ActionType.ADD) and old is None and new.name == "pv-1"
    assert c.apply("persistentvolumes", "MODIFIED", pv_body()) == []  # a resync at the same version
    (ev, old, new), = c.apply("persistentvolumes", "MODIFIED", pv_body(rv="2", cls="other"))
    assert ev.action == ActionType.UPDATE and (old.resource_version, new.resource_version) == ("1", "2")
    assert c.pvs_of_class("local") == [] and [p.name for p in c.pvs_of_class("other")] == ["pv-1"]
    (ev, old, new), = c.apply("persistentvolumes", "DELETED", pv_body(rv="3"))
    assert ev.action == ActionType.DELETE and new is None and c.pv("pv-1") is None
    assert c.apply("persistentvolumes", "DELETED", pv_body()) == []


@pytest.mark.parametrize("kind, body, resource, lookup", [
    ("persistentvolumeclaims", pvc_body(), Resource.PERSISTENT_VOLUME_CLAIM, lambda c: c.pvc("default", "data")),
    ("storageclasses", {"metadata": {"name": "sc"}, "provisioner": "p"}, Resource.STORAGE_CLASS,
     lambda c: c.storage_class("sc")),
    ("csinodes", {"metadata": {"name": "n"}, "spec": {"drivers": []}}, Resource.CSI_NODE, lambda c: c.csinode("n")),
    ("csidrivers", {"metadata": {"name": "d"}, "spec": {}}, Resource.CSI_DRIVER, lambda c: c.csidriver("d")),
])
def test_every_kind(kind, body, resource, lookup):
    c = VolumeCache()
    (ev, _, new), = c.apply(kind, "ADDED", body)
    assert ev.resource == resource and lookup(c) is new
    c.apply(kind, "DELETED", body)
    assert lookup(c) is None


def test_unknown_kind_or_event():
    with pytest.raises(ValueError):
        VolumeCache().apply("pods", "ADDED", {})
    with pytest.raises(ValueError):
        VolumeCache().apply("persistentvolumes", "BOOKMARK", pv_body())


def test_assume_overlays_until_revert_or_a_newer_informer_object():
    c = VolumeCache()
    c.apply("persistentvolumes", "ADDED", pv_body())
    c.apply("persistentvolumeclaims", "ADDED", pvc_body())
    claim = c.pvc("default", "data")
    new_pv, dirty = bind_volume_to_claim(c.pv("pv-1"), claim)
    assert dirty and new_pv.claim_ref == ClaimRef("default", "data", "u-data")
    assert new_pv.annotations[ANN_BOUND_BY_CONTROLLER] == "yes"
    assert new_pv.raw["spec"]["claimRef"]["name"] == "data" and new_pv.raw["metadata"]["resourceVersion"] == "1"
    provisioned = with_selected_node(claim, "n1")
    c.assume("default/p", [new_pv], [provisioned])
    assert c.pv("pv-1") is new_pv and c.api_pv("pv-1").claim_ref is None
    assert c.pvc("default", "data").selected_node == "n1" and c.api_pvc("default", "data").selected_node is None
    assert c.pvs_of_class("local") == [new_pv]
    assert c.assumed_by("default/p") == (["pv-1"], ["default/data"])
    c.revert("default/p")
    c.revert("default/p")
    assert c.pv("pv-1").claim_ref is None and c.pvc("default", "data").selected_node is None
    # an informer update at another version drops the assumed copy
    c.assume("default/p", [new_pv])
    c.apply("persistentvolumes", "MODIFIED", pv_body(rv="2"))
    assert c.pv("pv-1").claim_ref is None and c.pv("pv-1").resource_version == "2"
    # forget keeps the copies until the informer moves on
    again, _ = bind_volume_to_claim(c.pv("pv-1"), claim)
    c.assume("default/q", [again])
    c.forget("default/q")
    assert c.assumed_by("default/q") == ([], []) and c.pv("pv-1") is again
    c.revert("default/q")
    assert c.pv("pv-1") is again


def test_assume_is_all_or_nothing():
    c = VolumeCache()
    c.apply("persistentvolumes", "ADDED", pv_body())
    stale, _ = bind_volume_to_claim(PersistentVolume.from_dict(pv_body(rv="0")),
                                    PersistentVolumeClaim.from_dict(pvc_body()))
    fresh, _ = bind_volume_to_claim(c.pv("pv-1"), PersistentVolumeClaim.from_dict(pvc_body()))
    with pytest.raises(AssumeError):
        c.assume("default/p", [fresh, stale])
    with pytest.raises(AssumeError):
        c.assume("default/p", [], [PersistentVolumeClaim.from_dict(pvc_body())])  # unknown claim
    assert c.pv("pv-1").claim_ref is None and c.assumed_by("default/p") == ([], [])


def test_binding_a_pre_bound_volume_is_not_dirty():
    pv = PersistentVolume.from_dict(pv_body(claim=("default", "data")))
    claim = PersistentVolumeClaim.from_dict(pvc_body())
    new, dirty = bind_volume_to_claim(pv, claim)
    assert dirty and ANN_BOUND_BY_CONTROLLER not in new.annotations  # the uid is filled in
    same, dirty = bind_volume_to_claim(new, claim)
    assert not dirty and same is new


# ---------------------------------------------------------------- NodeTable and Handle

def pod_with(name, *claims, ns="default"):
    return parse_pod({"metadata": {"name": name, "namespace": ns}, "spec": {"volumes": [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]}})


def test_node_table_counts_claim_users():
    t = NodeTable()
    t.upsert_node({"metadata": {"name": "a"}})
    t.add_pod(pod_with("x", "c1", "c2"), "a")
    t.add_pod(pod_with("y", "c1"), "a")
    t.add_pod(parse_pod({"metadata": {"name": "plain"}, "spec": {}}), "a")
    assert t.pvc_refs == {"default/c1": 2, "default/c2": 1}
    assert sorted(t.pods_with_volumes[0]) == ["default/x", "default/y"]
    t.remove_pod("default/x")
    assert t.pvc_refs == {"default/c1": 1}
    t.remove_node("a")
    assert t.pvc_refs == {}
    t.upsert_node({"metadata": {"name": "a"}})  # the pods come back with the node
    assert t.pvc_refs == {"default/c1": 1}


def test_handle_defaults():
    h = Handle()
    assert isinstance(h.volumes(), VolumeCache) and h.volumes() is h.volumes() and len(h.volumes()) == 0
    assert Handle().volumes() is not h.volumes()
    with pytest.raises(NotImplementedError):
        asyncio.run(h.api_request("GET", "/api/v1/persistentvolumes"))
