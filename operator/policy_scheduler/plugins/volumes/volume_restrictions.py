"""VolumeRestrictions (upstream plugins/volumerestrictions/volume_restrictions.go, v1.37).

PreFilter: the pod's persistentVolumeClaim volumes are looked up (a missing claim:
UnschedulableAndUnresolvable ``persistentvolumeclaim "<name>" not found``); those whose claim
has the ReadWriteOncePod access mode count as a conflict when some pod on a node (bound or
assumed) already uses the claim (``NodeTable.pvc_refs``). Skip when the pod has no inline
GCE PD, AWS EBS, iSCSI or RBD volume and no conflict. (Re-running PreFilter on the changed
table in preemption's dry run stands in for upstream's AddPod/RemovePod.)

Filter, both Unschedulable (preemption may help):
1. ``node(s) had no available disk``: a pod on the node mounts the same GCE PD (unless both
   read-only), AWS EBS volume, iSCSI IQN (unless both read-only), or RBD image (a shared
   monitor, same pool and image, unless both read-only).
2. ReadWriteOncePod: a conflict found by PreFilter fails every node with
   ``node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode
   already in-use by another pod``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ...framework.interface import CycleState, EnqueueExtensions, FilterPlugin, FilterResult, PreFilterPlugin
from ...framework.model.nodetable import NodeTable
from ...framework.model.podinfo import PodInfo, PodVolume
from ...framework.status import Code, Status
from .objects import READ_WRITE_ONCE_POD, PersistentVolumeClaim

NAME = "VolumeRestrictions"
ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT = ("node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod "
                                           "access mode already in-use by another pod")
_STATE_KEY = "PreFilter" + NAME


def needs_restrictions_check(v: PodVolume) -> bool:
    """A GCE PD, AWS EBS, iSCSI or RBD inline volume."""
    return bool(v.gce_pd or v.aws_ebs or v.iscsi_iqn or v.rbd is not None)


def is_volume_conflict(v: PodVolume, existing: PodInfo) -> bool:
    """upstream isVolumeConflict: ``v`` against every volume of ``existing``."""
    for e in existing.volumes:
        if v.gce_pd and e.gce_pd and v.gce_pd == e.gce_pd and not (v.read_only and e.read_only):
            return True
        if v.aws_ebs and e.aws_ebs and v.aws_ebs == e.aws_ebs:
            return True
        if v.iscsi_iqn and e.iscsi_iqn and v.iscsi_iqn == e.iscsi_iqn and not (v.read_only and e.read_only):
            return True
        if v.rbd is not None and e.rbd is not None:
            mon, pool, image = v.rbd
            emon, epool, eimage = e.rbd
            if mon & emon and pool == epool and image == eimage and not (v.read_only and e.read_only):
                return True
    return False


def satisfies_volume_conflicts(pod: PodInfo, existing: Any) -> bool:
    """upstream satisfyVolumeConflicts: no restricted volume of ``pod`` conflicts with a pod of
    ``existing`` (an iterable of PodInfo)."""
    checked = [v for v in pod.volumes if needs_restrictions_check(v)]
    if not checked:
        return True
    for other in existing:
        for v in checked:
            if is_volume_conflict(v, other):
                return False
    return True


class VolumeRestrictions(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME = NAME
    Args = None

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE), self.pod_deleted_hint),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD)),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD), self.pvc_added_hint),
        ]

    @staticmethod
    def pod_deleted_hint(pod: PodInfo, old: PodInfo | None, new: Any) -> QueueingHint:
        """Queue when the deleted pod (same namespace) held a conflicting disk or used one of the
        pod's claims."""
        if old is None:
            return QueueingHint.QUEUE
        if old.namespace != pod.namespace:
            return QueueingHint.SKIP
        if not satisfies_volume_conflicts(pod, (old,)):
            return QueueingHint.QUEUE
        names = {v.claim for v in pod.volumes if v.pvc}
        if any(v.pvc and v.claim in names for v in old.volumes):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    @staticmethod
    def pvc_added_hint(pod: PodInfo, old: Any, new: PersistentVolumeClaim | None) -> QueueingHint:
        """Queue when the pod references the claim."""
        if new is None or new.namespace != pod.namespace:
            return QueueingHint.SKIP
        return QueueingHint.QUEUE if any(v.pvc and v.claim == new.name for v in pod.volumes) else QueueingHint.SKIP

    # ------------------------------------------------------------------ PreFilter
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        if not pod.volumes:
            return Status.skip(), None
        needs_check = any(needs_restrictions_check(v) for v in pod.volumes)
        conflicts = 0
        claims = [v for v in pod.volumes if v.pvc]
        if claims:
            cache = self.handle.volumes()
            rwop: set[str] = set()
            for v in claims:  # readWriteOncePodPVCsForPod
                pvc = cache.api_pvc(pod.namespace, v.claim)
                if pvc is None:
                    return Status.unschedulable(f'persistentvolumeclaim "{v.claim}" not found', unresolvable=True), None
                if READ_WRITE_ONCE_POD in pvc.access_modes:
                    rwop.add(f"{pod.namespace}/{v.claim}")
            refs = nodes.pvc_refs
            conflicts = sum(1 for k in rwop if refs.get(k, 0) > 0)  # calPreFilterState
        if not needs_check and conflicts == 0:
            return Status.skip(), None
        state.write(_STATE_KEY, conflicts)
        return Status.success(), None

    # ------------------------------------------------------------------ Filter
    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        n = len(rows)
        disk_conflict = np.zeros(n, dtype=bool)
        if any(needs_restrictions_check(v) for v in pod.volumes):
            with_volumes = nodes.pods_with_volumes
            for i, row in enumerate(rows.tolist()):
                existing = with_volumes[row]
                if existing and not satisfies_volume_conflicts(pod, existing.values()):
                    disk_conflict[i] = True
        conflicts = state.read(_STATE_KEY, 0)
        rwop = np.full(n, conflicts > 0, dtype=bool) & ~disk_conflict
        passed = ~(disk_conflict | rwop)
        reasons = [(r, m) for r, m in ((ERR_REASON_DISK_CONFLICT, disk_conflict),
                                        (ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT, rwop)) if m.any()]
        return FilterResult(passed, Code.UNSCHEDULABLE, reasons)


PLUGIN = VolumeRestrictions
