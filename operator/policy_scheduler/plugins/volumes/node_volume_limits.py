"""NodeVolumeLimits (upstream plugins/nodevolumelimits/csi.go, v1.37): CSI attach limits.

PreFilter Skips a pod without persistentVolumeClaim or ephemeral volumes.

Filter (per node): the pod's attachable volumes are keyed ``<driver>/<volumeHandle>``: a
claim bound to a CSI PV gives the PV's driver and handle; an unbound claim, or one whose PV is
not in the cache, falls back to its StorageClass (driver = provisioner, a handle unique to the
claim); no class or an unknown class, or a non-CSI PV, is not counted. A missing claim fails
the node UnschedulableAndUnresolvable (``looking up PVC <ns>/<name>: persistentvolumeclaim
"<name>" not found``); for pods already on the node it is ignored. No new volumes: pass. A
driver whose CSIDriver has ``preventPodSchedulingIfMissing`` and that the node's CSINode does
not list: ``<driver> CSI driver is not installed on the node`` (Unschedulable). Limits are the
node's CSINode ``drivers[].allocatable.count``; for a driver with one, the unique volumes of the
pods on the node (bound and assumed) plus the pod's new ones above it give ``node(s) exceed max
volume count`` (Unschedulable).

Not modelled: in-tree volumes migrated to CSI (CSINode's migrated-plugins annotation) and
VolumeAttachments: neither is counted.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from ...framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ...framework.interface import CycleState, EnqueueExtensions, FilterPlugin, FilterResult, PreFilterPlugin
from ...framework.model.nodetable import NodeTable
from ...framework.model.podinfo import PodInfo
from ...framework.status import Code, Status
from .cache import VolumeCache
from .objects import CSINode, PersistentVolumeClaim

NAME = "NodeVolumeLimits"
ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"


class _LookupError(Exception):
    def __init__(self, message: str, code: Code) -> None:
        super().__init__(message)
        self.code = code


class NodeVolumeLimits(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME = NAME
    Args = None

    def __init__(self, args: Any, handle) -> None:
        super().__init__(args, handle)
        self._random_prefix = secrets.token_hex(16)  # upstream randomVolumeIDPrefix

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, ActionType.ADD)),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, ActionType.UPDATE), self.csinode_updated_hint),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE), self.pod_deleted_hint),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD), self.pvc_added_hint),
        ]

    @staticmethod
    def csinode_updated_hint(pod: PodInfo, old: CSINode | None, new: CSINode | None) -> QueueingHint:
        """Queue when some driver's attach limit went up, was lifted, or a driver appeared."""
        if old is None or new is None:
            return QueueingHint.QUEUE
        for driver, count in new.drivers.items():
            if driver not in old.drivers:
                return QueueingHint.QUEUE
            before = old.drivers[driver]
            if before is not None and (count is None or count > before):
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    @staticmethod
    def pod_deleted_hint(pod: PodInfo, old: PodInfo | None, new: Any) -> QueueingHint:
        """Queue when the deleted pod was on a node and used a claim (PVC or ephemeral)."""
        if old is None:
            return QueueingHint.QUEUE
        if not old.volumes or not old.node_name:
            return QueueingHint.SKIP
        return QueueingHint.QUEUE if any(v.has_claim for v in old.volumes) else QueueingHint.SKIP

    @staticmethod
    def pvc_added_hint(pod: PodInfo, old: Any, new: PersistentVolumeClaim | None) -> QueueingHint:
        """Queue when the pod references the claim (persistentVolumeClaim or ephemeral)."""
        if new is None or new.namespace != pod.namespace:
            return QueueingHint.SKIP
        return QueueingHint.QUEUE if any(v.has_claim and v.claim == new.name for v in pod.volumes) \
            else QueueingHint.SKIP

    # ------------------------------------------------------------------ PreFilter
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        if any(v.has_claim for v in pod.volumes):
            return Status.success(), None
        return Status.skip(), None

    # ------------------------------------------------------------------ Filter
    def attachable_volumes(self, pod: PodInfo, cache: VolumeCache, new_pod: bool) -> dict[str, str]:
        """upstream filterAttachableVolumes: ``<driver>/<handle>`` -> driver, for the pod's
        claims. Raises _LookupError for a missing claim of the new pod, and for an ephemeral
        claim the pod does not control."""
        out: dict[str, str] = {}
        for v in pod.volumes:
            if not v.has_claim:
                continue  # inline volumes: only migrated in-tree ones count upstream (not modelled)
            if not v.claim:
                raise _LookupError("PersistentVolumeClaim had no name", Code.ERROR)
            pvc = cache.api_pvc(pod.namespace, v.claim)
            if pvc is None:
                if new_pod:
                    raise _LookupError(f'looking up PVC {pod.namespace}/{v.claim}: persistentvolumeclaim '
                                       f'"{v.claim}" not found', Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
                continue
            if v.ephemeral and pvc.controller_uid != pod.uid:
                raise _LookupError(f"PVC {pvc.namespace}/{pvc.name} was not created for pod "
                                   f"{pod.namespace}/{pod.name} (pod is not owner)", Code.ERROR)
            driver, handle = self._driver_info(pvc, cache)
            if driver and handle:
                out[f"{driver}/{handle}"] = driver
        return out

    def _driver_info(self, pvc: PersistentVolumeClaim, cache: VolumeCache) -> tuple[str, str]:
        """upstream getCSIDriverInfo / getCSIDriverInfoFromSC."""
        if pvc.volume_name:
            pv = cache.api_pv(pvc.volume_name)
            if pv is not None:
                return pv.csi_driver, pv.volume_handle  # a non-CSI PV: ("", "")
        if not pvc.storage_class:
            return "", ""
        sc = cache.storage_class(pvc.storage_class)
        if sc is None:
            return "", ""
        return sc.provisioner, f"{self._random_prefix}-{pvc.namespace}/{pvc.name}"

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        n = len(rows)
        if not pod.volumes:
            return FilterResult.all_pass(n)
        cache = self.handle.volumes()
        try:
            new_volumes = self.attachable_volumes(pod, cache, new_pod=True)
        except _LookupError as e:
            status = Status(e.code, (str(e),))
            if e.code == Code.ERROR:
                return FilterResult(np.zeros(n, dtype=bool), error=status)
            return FilterResult.failed(status, n)
        if not new_volumes:
            return FilterResult.all_pass(n)
        new_drivers = set(new_volumes.values())
        required_drivers = [d for d in sorted(new_drivers)
                            if (drv := cache.csidriver(d)) is not None and drv.prevent_pod_scheduling_if_missing]
        passed = np.ones(n, dtype=bool)
        over = np.zeros(n, dtype=bool)
        missing: dict[str, np.ndarray] = {}
        existing_cache: dict[str, dict[str, str]] = {}
        with_volumes = nodes.pods_with_volumes
        try:
            for i, row in enumerate(rows.tolist()):
                name = nodes.names[row]
                csinode = cache.csinode(name)
                absent = [d for d in required_drivers if csinode is None or d not in csinode.drivers]
                if absent:
                    missing.setdefault(absent[0], np.zeros(n, dtype=bool))[i] = True
                    passed[i] = False
                    continue
                limits = csinode.limits() if csinode is not None else {}
                if not limits or not (new_drivers & limits.keys()):
                    continue
                attached: dict[str, str] = {}
                for key, other in with_volumes[row].items():
                    vols = existing_cache.get(key)
                    if vols is None:
                        vols = existing_cache[key] = self.attachable_volumes(other, cache, new_pod=False)
                    attached.update(vols)
                attached_count: dict[str, int] = {}
                for unique, driver in attached.items():
                    attached_count[driver] = attached_count.get(driver, 0) + 1
                new_count: dict[str, int] = {}
                for unique, driver in new_volumes.items():
                    if unique not in attached:  # one volume used by several pods counts once
                        new_count[driver] = new_count.get(driver, 0) + 1
                for driver, count in new_count.items():
                    limit = limits.get(driver)
                    if limit is not None and attached_count.get(driver, 0) + count > limit:
                        over[i] = True
                        passed[i] = False
                        break
        except _LookupError as e:
            return FilterResult(np.zeros(n, dtype=bool), error=Status(Code.ERROR, (str(e),)))
        reasons = [(f"{d} CSI driver is not installed on the node", m) for d, m in missing.items()]
        if over.any():
            reasons.append((ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED, over))
        return FilterResult(passed, Code.UNSCHEDULABLE, reasons)


PLUGIN = NodeVolumeLimits
