"""VolumeBinding's binder (upstream plugins/volumebinding/binder.go, v1.37, and the PV controller's
GetBindVolumeToClaim): which PV a delayed claim takes on a node (``find_matching_volume``), the
PV and PVC copies Reserve assumes (``bind_volume_to_claim``, ``with_selected_node``), and
PreBind's ``check_bindings`` on the informer's objects. Pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...framework.model.podinfo import PodInfo
from ...framework.model.versions import resource_version_newer
from .cache import VolumeCache
from .objects import (ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE, VOLUME_AVAILABLE, WAIT_FOR_FIRST_CONSUMER, ClaimRef,
                      PersistentVolume, PersistentVolumeClaim)


def bind_volume_to_claim(pv: PersistentVolume, pvc: PersistentVolumeClaim) -> tuple[PersistentVolume, bool]:
    """upstream GetBindVolumeToClaim: the PV with ``claimRef`` naming the claim (and
    ``pv.kubernetes.io/bound-by-controller: "yes"`` unless it was pre-bound to this claim), and
    whether anything changed. The copy's ``raw`` is the API object to PUT."""
    ref = pv.claim_ref
    prebound = (ref is not None and ref.namespace == pvc.namespace and ref.name == pvc.name
                and (not ref.uid or ref.uid == pvc.uid))  # IsVolumeBoundToClaim
    want = ClaimRef(pvc.namespace, pvc.name, pvc.uid)
    dirty = ref != want
    ann = dict(pv.annotations)
    if not prebound and ANN_BOUND_BY_CONTROLLER not in ann:
        ann[ANN_BOUND_BY_CONTROLLER] = "yes"
        dirty = True
    if not dirty:
        return pv, False
    raw = dict(pv.raw or {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv.name}})
    meta = dict(raw.get("metadata") or {})
    meta["annotations"] = ann
    raw["metadata"] = meta
    spec = dict(raw.get("spec") or {})
    spec["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": pvc.namespace,
                        "name": pvc.name, "uid": pvc.uid,
                        **({"resourceVersion": pvc.resource_version} if pvc.resource_version else {})}
    raw["spec"] = spec
    return replace(pv, annotations=ann, claim_ref=want, raw=raw), True


def with_selected_node(pvc: PersistentVolumeClaim, node_name: str) -> PersistentVolumeClaim:
    """The claim with ``volume.kubernetes.io/selected-node: <node>`` (dynamic provisioning);
    its ``raw`` is the API object to PUT."""
    ann = dict(pvc.annotations)
    ann[ANN_SELECTED_NODE] = node_name
    raw = dict(pvc.raw or {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                           "metadata": {"name": pvc.name, "namespace": pvc.namespace}})
    meta = dict(raw.get("metadata") or {})
    meta["annotations"] = ann
    raw["metadata"] = meta
    return replace(pvc, annotations=ann, raw=raw)


def check_access_modes(pvc: PersistentVolumeClaim, pv: PersistentVolume) -> bool:
    """upstream CheckAccessModes: the PV offers every mode the claim asks for."""
    return pvc.access_modes <= pv.access_modes


def is_volume_bound_to_claim(pv: PersistentVolume, pvc: PersistentVolumeClaim) -> bool:
    ref = pv.claim_ref
    if ref is None or ref.name != pvc.name or ref.namespace != pvc.namespace:
        return False
    return not ref.uid or ref.uid == pvc.uid


def find_matching_volume(pvc: PersistentVolumeClaim, pvs: list[PersistentVolume], node_labels: dict[str, str],
                         excluded: set[str]) -> PersistentVolume | None:
    """upstream FindMatchingVolume (scheduler path, delayBinding): a PV pre-bound to the claim
    wins if its node affinity matches (else none); otherwise the smallest Available PV of the
    claim's class that fits."""
    smallest: PersistentVolume | None = None
    for pv in pvs:
        if pv.name in excluded:
            continue
        if pv.claim_ref is not None and not is_volume_bound_to_claim(pv, pvc):
            continue
        if pv.capacity < pvc.request:
            continue
        if pv.volume_mode != pvc.volume_mode:
            continue
        if pv.deleting:
            continue
        affinity_ok = pv.matches_node(node_labels)
        if is_volume_bound_to_claim(pv, pvc):
            return pv if affinity_ok else None
        if pv.phase != VOLUME_AVAILABLE:
            continue
        if pvc.selector is not None and not pvc.selector.matches(pv.labels):
            continue
        if pv.storage_class != pvc.storage_class:
            continue
        if not affinity_ok:
            continue
        if not check_access_modes(pvc, pv):
            continue
        if smallest is None or smallest.capacity > pv.capacity:
            smallest = pv
    return smallest


def resource_version(resp: Any, default: str) -> str:
    if isinstance(resp, dict):
        rv = (resp.get("metadata") or {}).get("resourceVersion")
        if rv:
            return str(rv)
    return default


def check_bindings(cache: VolumeCache, node_name: str, labels: dict[str, str],
                    pvs: list[tuple[PersistentVolumeClaim, str, str]],
                    pvcs: list[tuple[PersistentVolumeClaim, str]]) -> bool:
    """upstream checkBindings, on the informer's objects: True when every claim is fully bound;
    ValueError when binding must be retried."""
    for claim, pv_name, written in pvs:
        pv = cache.api_pv(pv_name)
        if pv is None:
            raise ValueError(f'failed to check binding: persistentvolume "{pv_name}" not found')
        pvc = cache.api_pvc(claim.namespace, claim.name)
        if pvc is None:
            raise ValueError(f'failed to check binding: persistentvolumeclaim "{claim.key}" not found')
        if not resource_version_newer(pv.resource_version, written):
            return False  # the informer has not seen our write yet
        if not pv.matches_node(labels):
            raise ValueError(f'pv "{pv.name}" node affinity doesn\'t match node "{node_name}": '
                             "no matching NodeSelectorTerms")
        if pv.claim_ref is None or not pv.claim_ref.uid:
            raise ValueError(f'ClaimRef got reset for pv "{pv.name}"')
        if not pvc.fully_bound:
            return False
    for claim, written in pvcs:
        pvc = cache.api_pvc(claim.namespace, claim.name)
        if pvc is None:
            raise ValueError(f'failed to check provisioning pvc: persistentvolumeclaim "{claim.key}" not found')
        if not resource_version_newer(pvc.resource_version, written):
            return False
        if not pvc.annotations:
            raise ValueError(f'selectedNode annotation reset for PVC "{pvc.name}"')
        if pvc.selected_node != node_name:
            raise ValueError(f'provisioning failed for PVC "{pvc.name}"')
        if pvc.volume_name:
            pv = cache.api_pv(pvc.volume_name)
            if pv is None:
                return False  # not seen yet
            if not pv.matches_node(labels):
                raise ValueError(f'pv "{pv.name}" node affinity doesn\'t match node "{node_name}": '
                                 "no matching NodeSelectorTerms")
        if not pvc.fully_bound:
            return False
    return True


def is_delay_binding_mode(pvc: PersistentVolumeClaim, cache: VolumeCache) -> bool:
    """upstream IsDelayBindingMode: the claim's class exists and is WaitForFirstConsumer; a
    class without volumeBindingMode is an error."""
    if not pvc.storage_class:
        return False
    sc = cache.storage_class(pvc.storage_class)
    if sc is None:
        return False
    if sc.binding_mode is None:
        raise ValueError(f'VolumeBindingMode not set for StorageClass "{sc.name}"')
    return sc.binding_mode == WAIT_FOR_FIRST_CONSUMER


def all_bound(pod: PodInfo, cache: VolumeCache) -> bool:
    """upstream arePodVolumesBound: every claim of the pod is fully bound (assumed copies count)."""
    for v in pod.volumes:
        if v.has_claim:
            pvc = cache.pvc(pod.namespace, v.claim)
            if pvc is None or not pvc.fully_bound:
                return False
    return True
