"""The volume cache the volume plugins read: the storage objects of objects.py as the informers
last saw them, fed through ``apply(kind, event, body)``, which returns the cluster events for the
queue's hints. It also holds upstream's assume cache (volumebinding's pvCache/pvcCache,
``passive_assume_cache.go``): VolumeBinding's Reserve lays PV and PVC copies over the informer
objects so that the next pod does not pick the same PV; Unreserve takes them back; an informer
update with another resourceVersion drops the copy (the API has moved on).

Pure: no I/O. Empty by default and cheap: a cluster without storage objects costs nothing.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ...framework.events import ActionType, ClusterEvent
from .objects import (_ACTIONS, _PARSERS, _RESOURCES, CSI_DRIVERS, CSI_NODES, PERSISTENT_VOLUME_CLAIMS,
                      PERSISTENT_VOLUMES, STORAGE_CLASSES, CSIDriver, CSINode, PersistentVolume, PersistentVolumeClaim,
                      StorageClass)


class AssumeError(ValueError):
    """An assumption on an object the cache does not hold, or holds at another version."""


class VolumeCache:
    """PVs, PVCs, StorageClasses, CSINodes and CSIDrivers as the informers last saw them, with
    the assumed PV/PVC copies of pods being scheduled laid over them.

    Reads (``pv``, ``pvc``, ``pvs_of_class``) return the assumed copy while the informer still
    holds the version it was made from; ``api_pv``/``api_pvc`` return the informer's object.

    Assume cache (upstream AssumePodVolumes / RevertAssumedPodVolumes):
    - ``assume(pod_key, pvs, pvcs)``: lay PV copies (claimRef set by ``bind_volume_to_claim``)
      and PVC copies (selected-node set by ``with_selected_node``) over the informer's objects,
      recorded under the pod. Raises AssumeError (and assumes nothing) when an object is
      unknown or the informer holds another resourceVersion than the copy was made from.
    - ``revert(pod_key)``: take back the pod's copies still in place (idempotent).
    - ``forget(pod_key)``: drop the pod's record but leave its copies until the informer
      delivers newer objects (after a successful PreBind).
    - An informer add, update or delete of an object with another resourceVersion than an
      assumed copy's drops that copy.
    """

    def __init__(self) -> None:
        self._pvs: dict[str, PersistentVolume] = {}
        self._pvcs: dict[str, PersistentVolumeClaim] = {}  # "namespace/name"
        self._classes: dict[str, StorageClass] = {}
        self._csinodes: dict[str, CSINode] = {}
        self._csidrivers: dict[str, CSIDriver] = {}
        self._pvs_by_class: dict[str, set[str]] = {}
        self._assumed_pvs: dict[str, tuple[PersistentVolume, str]] = {}  # name -> (copy, pod key)
        self._assumed_pvcs: dict[str, tuple[PersistentVolumeClaim, str]] = {}  # key -> (copy, pod key)
        self._by_pod: dict[str, tuple[list[str], list[str]]] = {}  # pod key -> (pv names, pvc keys)
        self.version = 0  # bumps on every change, assumptions included

    # ------------------------------------------------------------------ informer side
    def apply(self, kind: str, event: str, body: Mapping[str, Any]) -> list[tuple[ClusterEvent, Any, Any]]:
        """Record a watch event (``kind``: one of KINDS; ``event``: ADDED, MODIFIED or DELETED;
        ``body``: the API object) and return the cluster events for the queue, each with the
        old and new parsed objects (old None on Add, new None on Delete). A MODIFIED object at
        the version already held (a resync) changes nothing and returns no event."""
        parse = _PARSERS.get(kind)
        action = _ACTIONS.get(event)
        if parse is None or action is None:
            raise ValueError(f"unknown volume cache event {kind!r} {event!r}")
        new = parse(body)
        store = self._store(kind)
        key = new.key if kind == PERSISTENT_VOLUME_CLAIMS else new.name
        old = store.get(key)
        if action == ActionType.DELETE:
            if old is None:
                return []
            self._remove(kind, key, old)
            self.version += 1
            return [(ClusterEvent(_RESOURCES[kind], ActionType.DELETE), old, None)]
        if old is not None and old.resource_version == new.resource_version and new.resource_version:
            return []
        if old is not None and kind == PERSISTENT_VOLUMES:
            self._unindex_pv(old)
        store[key] = new
        if kind == PERSISTENT_VOLUMES:
            self._pvs_by_class.setdefault(new.storage_class, set()).add(key)
            self._drop_stale(self._assumed_pvs, key, new.resource_version)
        elif kind == PERSISTENT_VOLUME_CLAIMS:
            self._drop_stale(self._assumed_pvcs, key, new.resource_version)
        self.version += 1
        return [(ClusterEvent(_RESOURCES[kind], ActionType.ADD if old is None else ActionType.UPDATE), old, new)]

    def _store(self, kind: str) -> dict[str, Any]:
        stores: dict[str, dict[str, Any]] = {
            PERSISTENT_VOLUMES: self._pvs, PERSISTENT_VOLUME_CLAIMS: self._pvcs, STORAGE_CLASSES: self._classes,
            CSI_NODES: self._csinodes, CSI_DRIVERS: self._csidrivers}
        return stores[kind]

    def _remove(self, kind: str, key: str, old: Any) -> None:
        del self._store(kind)[key]
        if kind == PERSISTENT_VOLUMES:
            self._unindex_pv(old)
            self._assumed_pvs.pop(key, None)
        elif kind == PERSISTENT_VOLUME_CLAIMS:
            self._assumed_pvcs.pop(key, None)

    def _unindex_pv(self, pv: PersistentVolume) -> None:
        names = self._pvs_by_class.get(pv.storage_class)
        if names is not None:
            names.discard(pv.name)
            if not names:
                del self._pvs_by_class[pv.storage_class]

    @staticmethod
    def _drop_stale(assumed: dict[str, tuple[Any, str]], key: str, rv: str) -> None:
        a = assumed.get(key)
        if a is not None and a[0].resource_version != rv:
            del assumed[key]

    # ------------------------------------------------------------------ reads
    def pv(self, name: str) -> PersistentVolume | None:
        """The PV, assumed copy if any."""
        a = self._assumed_pvs.get(name)
        return a[0] if a is not None else self._pvs.get(name)

    def pvc(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        """The PVC, assumed copy if any."""
        key = f"{namespace}/{name}"
        a = self._assumed_pvcs.get(key)
        return a[0] if a is not None else self._pvcs.get(key)

    def api_pv(self, name: str) -> PersistentVolume | None:
        """The PV as the informer last saw it (no assumption)."""
        return self._pvs.get(name)

    def api_pvc(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        """The PVC as the informer last saw it (no assumption)."""
        return self._pvcs.get(f"{namespace}/{name}")

    def pvs_of_class(self, class_name: str) -> list[PersistentVolume]:
        """Every PV of the storage class (assumed copies included), by name."""
        return [self.pv(n) for n in sorted(self._pvs_by_class.get(class_name, ()))]  # type: ignore[misc]

    def storage_class(self, name: str) -> StorageClass | None:
        return self._classes.get(name)

    def csinode(self, node_name: str) -> CSINode | None:
        return self._csinodes.get(node_name)

    def csidriver(self, name: str) -> CSIDriver | None:
        return self._csidrivers.get(name)

    def __len__(self) -> int:
        return len(self._pvs) + len(self._pvcs) + len(self._classes) + len(self._csinodes) + len(self._csidrivers)

    # ------------------------------------------------------------------ assume cache
    def assume(self, pod_key: str, pvs: Sequence[PersistentVolume] = (),
               pvcs: Sequence[PersistentVolumeClaim] = ()) -> None:
        """Lay ``pvs`` and ``pvcs`` (modified copies) over the informer's objects for
        ``pod_key``. All or nothing: raises AssumeError when one is unknown or was made from
        another resourceVersion than the informer holds."""
        for pv in pvs:
            cur = self._pvs.get(pv.name)
            if cur is None:
                raise AssumeError(f"persistentvolume {pv.name!r} not found in the cache")
            if cur.resource_version != pv.resource_version:
                raise AssumeError(f"persistentvolume {pv.name!r}: resourceVersion {pv.resource_version} is not "
                                  f"the cached {cur.resource_version}")
        for pvc in pvcs:
            cur_c = self._pvcs.get(pvc.key)
            if cur_c is None:
                raise AssumeError(f"persistentvolumeclaim {pvc.key!r} not found in the cache")
            if cur_c.resource_version != pvc.resource_version:
                raise AssumeError(f"persistentvolumeclaim {pvc.key!r}: resourceVersion {pvc.resource_version} is "
                                  f"not the cached {cur_c.resource_version}")
        names, keys = self._by_pod.setdefault(pod_key, ([], []))
        for pv in pvs:
            self._assumed_pvs[pv.name] = (pv, pod_key)
            names.append(pv.name)
        for pvc in pvcs:
            self._assumed_pvcs[pvc.key] = (pvc, pod_key)
            keys.append(pvc.key)
        self.version += 1

    def revert(self, pod_key: str) -> None:
        """Take back the copies ``pod_key`` assumed that are still in place. Idempotent."""
        rec = self._by_pod.pop(pod_key, None)
        if rec is None:
            return
        for name in rec[0]:
            a = self._assumed_pvs.get(name)
            if a is not None and a[1] == pod_key:
                del self._assumed_pvs[name]
        for key in rec[1]:
            a2 = self._assumed_pvcs.get(key)
            if a2 is not None and a2[1] == pod_key:
                del self._assumed_pvcs[key]
        self.version += 1

    def forget(self, pod_key: str) -> None:
        """Drop the record of ``pod_key``'s assumptions, leaving the copies until the informer
        delivers newer objects (the API writes succeeded)."""
        self._by_pod.pop(pod_key, None)

    def assumed_by(self, pod_key: str) -> tuple[list[str], list[str]]:
        """(PV names, PVC keys) ``pod_key`` has assumed and not reverted nor forgotten."""
        rec = self._by_pod.get(pod_key)
        return (list(rec[0]), list(rec[1])) if rec else ([], [])
