"""VolumeZone (upstream plugins/volumezone/volume_zone.go, v1.37).

PreFilter collects the zone/region topology of the pod's bound PVs (persistentVolumeClaim
volumes only): the labels ``topology.kubernetes.io/{zone,region}`` and the deprecated
``failure-domain.beta.kubernetes.io/{zone,region}``, a value listing zones separated by ``__``.
A claim without volumeName whose class is WaitForFirstConsumer is left to VolumeBinding; the
other failures reject the pod UnschedulableAndUnresolvable with upstream's texts. No topology:
Skip.

Filter: a node without any of the four labels passes (single-zone clusters); otherwise each PV
topology needs the node's label under the same key (a beta key falls back to the GA key) with a
value in the PV's set, else ``node(s) had no available volume zone``
(UnschedulableAndUnresolvable). PV node affinity is VolumeBinding's business.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ...framework.interface import CycleState, EnqueueExtensions, FilterPlugin, FilterResult, PreFilterPlugin
from ...framework.model.nodetable import NodeTable
from ...framework.model.podinfo import PodInfo
from ...framework.status import Code, Status
from .objects import (REGION_LABEL, REGION_LABEL_BETA, TOPOLOGY_LABELS, WAIT_FOR_FIRST_CONSUMER, ZONE_LABEL,
                      ZONE_LABEL_BETA, PersistentVolume, PersistentVolumeClaim, StorageClass)

NAME = "VolumeZone"
ERR_REASON_CONFLICT = "node(s) had no available volume zone"
_STATE_KEY = "PreFilter" + NAME
_GA_OF_BETA = {ZONE_LABEL_BETA: ZONE_LABEL, REGION_LABEL_BETA: REGION_LABEL}


def _unresolvable(msg: str) -> tuple[Status, None]:
    return Status.unschedulable(msg, unresolvable=True), None


class VolumeZone(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME = NAME
    Args = None

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        add_update = ActionType.ADD | ActionType.UPDATE
        return [
            ClusterEventWithHint(ClusterEvent(Resource.STORAGE_CLASS, ActionType.ADD), self.storage_class_hint),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, add_update), self.pvc_hint),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME, add_update), self.pv_hint),
        ]

    @staticmethod
    def storage_class_hint(pod: PodInfo, old: Any, new: StorageClass | None) -> QueueingHint:
        """Queue only for a WaitForFirstConsumer class."""
        if new is None:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if new.binding_mode == WAIT_FOR_FIRST_CONSUMER else QueueingHint.SKIP

    @staticmethod
    def pvc_hint(pod: PodInfo, old: Any, new: PersistentVolumeClaim | None) -> QueueingHint:
        """Queue when it is one of the pod's persistentVolumeClaim volumes."""
        if new is None or new.namespace != pod.namespace:
            return QueueingHint.SKIP
        return QueueingHint.QUEUE if any(v.pvc and v.claim == new.name for v in pod.volumes) else QueueingHint.SKIP

    @staticmethod
    def pv_hint(pod: PodInfo, old: PersistentVolume | None, new: PersistentVolume | None) -> QueueingHint:
        """Add: Queue; Update: Queue when a zone/region label changed."""
        if old is None or new is None:
            return QueueingHint.QUEUE
        for key in TOPOLOGY_LABELS:
            if old.labels.get(key) != new.labels.get(key):
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    # ------------------------------------------------------------------ PreFilter
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        if not pod.volumes:
            return Status.skip(), None
        claims = [v for v in pod.volumes if v.pvc]
        if not claims:
            return Status.skip(), None
        cache = self.handle.volumes()
        topologies: list[tuple[str, frozenset[str]]] = []
        for v in claims:  # upstream getPVbyPod
            if not v.claim:
                return _unresolvable("PersistentVolumeClaim had no name")
            pvc = cache.api_pvc(pod.namespace, v.claim)  # the listers: no assumed copies
            if pvc is None:
                return _unresolvable(f'persistentvolumeclaim "{v.claim}" not found')
            if not pvc.volume_name:
                if not pvc.storage_class:
                    return _unresolvable("PersistentVolumeClaim had no pv name and storageClass name")
                sc = cache.storage_class(pvc.storage_class)
                if sc is None:
                    return _unresolvable(f'storageclass.storage.k8s.io "{pvc.storage_class}" not found')
                if sc.binding_mode is None:
                    return _unresolvable(f'VolumeBindingMode not set for StorageClass "{sc.name}"')
                if sc.binding_mode == WAIT_FOR_FIRST_CONSUMER:
                    continue  # VolumeBinding decides
                return _unresolvable("PersistentVolume had no name")
            pv = cache.api_pv(pvc.volume_name)
            if pv is None:
                return _unresolvable(f'persistentvolume "{pvc.volume_name}" not found')
            topologies.extend(pv.topology())
        if not topologies:
            return Status.skip(), None
        state.write(_STATE_KEY, topologies)
        return Status.success(), None

    # ------------------------------------------------------------------ Filter
    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        topologies = state.read(_STATE_KEY)
        n = len(rows)
        if not topologies:
            return FilterResult.all_pass(n)
        # nodes without any of the four labels pass
        has_any = np.zeros(nodes.n, dtype=bool)
        for key in TOPOLOGY_LABELS:
            has_any |= nodes.label_mask(key)
        passed = np.ones(n, dtype=bool)
        for key, zones in topologies:
            col = nodes.label_column(key)
            ga = _GA_OF_BETA.get(key)
            ga_col = nodes.label_column(ga) if ga is not None else None
            for i, row in enumerate(rows.tolist()):
                if not passed[i] or not has_any[row]:
                    continue
                value = col[row]
                if value is None and ga_col is not None:
                    value = ga_col[row]
                if value is None or value not in zones:
                    passed[i] = False
        return FilterResult.from_mask(passed, ERR_REASON_CONFLICT, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


PLUGIN = VolumeZone
