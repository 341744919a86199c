"""Storage objects and the volume cache the volume plugins read (VolumeBinding, VolumeZone,
VolumeRestrictions, NodeVolumeLimits).

The parsed objects keep only what those plugins read. ``VolumeCache`` holds them, fed by the
operator's informers through ``apply(kind, event, body)``, which returns the cluster events for
the queue's hints. It also holds upstream's assume cache (volumebinding's pvCache/pvcCache,
``passive_assume_cache.go``): VolumeBinding's Reserve lays PV and PVC copies over the informer
objects so that the next pod does not pick the same PV; Unreserve takes them back; an informer
update with another resourceVersion drops the copy (the API has moved on).

Pure: no I/O. Empty by default and cheap: a cluster without storage objects costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..events import ActionType, ClusterEvent, Resource
from .labels import LabelSelector, NodeSelector, SelectorError
from .quantity import QuantityError, resource_value

# annotations and names (component-helpers storage/volume, api core/v1)
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"  # deprecated, wins over spec.storageClassName
ANN_MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"  # on CSINodes
NO_PROVISIONER = "kubernetes.io/no-provisioner"
IMMEDIATE = "Immediate"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
CLAIM_BOUND = "Bound"
CLAIM_LOST = "Lost"
VOLUME_AVAILABLE = "Available"

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
ZONE_LABEL_BETA = "failure-domain.beta.kubernetes.io/zone"
REGION_LABEL_BETA = "failure-domain.beta.kubernetes.io/region"
TOPOLOGY_LABELS = (ZONE_LABEL_BETA, REGION_LABEL_BETA, ZONE_LABEL, REGION_LABEL)

# VolumeCache.apply kinds (the informers' resource plurals)
PERSISTENT_VOLUMES = "persistentvolumes"
PERSISTENT_VOLUME_CLAIMS = "persistentvolumeclaims"
STORAGE_CLASSES = "storageclasses"
CSI_NODES = "csinodes"
CSI_DRIVERS = "csidrivers"
KINDS = (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS, STORAGE_CLASSES, CSI_NODES, CSI_DRIVERS)
_RESOURCES = {
    PERSISTENT_VOLUMES: Resource.PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIMS: Resource.PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASSES: Resource.STORAGE_CLASS,
    CSI_NODES: Resource.CSI_NODE,
    CSI_DRIVERS: Resource.CSI_DRIVER,
}
_ACTIONS = {"ADDED": ActionType.ADD, "MODIFIED": ActionType.UPDATE, "DELETED": ActionType.DELETE}


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def _storage(q: Any) -> int:
    """A storage quantity in bytes; an unparseable or missing one counts as 0."""
    if q is None:
        return 0
    try:
        return resource_value("storage", q)
    except (QuantityError, TypeError, ValueError):
        return 0


def resource_version_newer(a: str, b: str) -> bool:
    """Is resourceVersion ``a`` at least as new as ``b``? (etcd revisions: integers; anything
    that does not parse compares as equal only.)"""
    try:
        return int(a) >= int(b)
    except (TypeError, ValueError):
        return a == b


# ---------------------------------------------------------------------------- objects
@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class PersistentVolume:
    """The parts of a v1.PersistentVolume the volume plugins read. ``node_affinity``:
    ``spec.nodeAffinity.required`` (None: no constraint); ``storage_class``: the deprecated
    annotation, else ``spec.storageClassName`` (upstream GetPersistentVolumeClass)."""

    name: str
    resource_version: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    capacity: int = 0  # capacity.storage, bytes
    access_modes: frozenset[str] = frozenset()
    storage_class: str = ""
    volume_mode: str = "Filesystem"
    claim_ref: ClaimRef | None = None
    node_affinity: NodeSelector | None = None
    node_affinity_error: str | None = None  # an unparseable affinity matches no node
    phase: str = ""
    csi_driver: str = ""
    volume_handle: str = ""
    deleting: bool = False
    raw: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "PersistentVolume":
        meta = _meta(body)
        spec = body.get("spec") or {}
        ann = dict(meta.get("annotations") or {})
        ref = spec.get("claimRef")
        claim_ref = None
        if isinstance(ref, Mapping):
            claim_ref = ClaimRef(str(ref.get("namespace") or ""), str(ref.get("name") or ""), str(ref.get("uid") or ""))
        na = None
        na_err = None
        required = (spec.get("nodeAffinity") or {}).get("required")
        if required is not None:
            try:
                if not (required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None):
                    na = NodeSelector(())  # no terms: matches no node (MatchNodeSelectorTerms)
                else:
                    na = NodeSelector.parse(required, "spec.nodeAffinity.required")
            except (SelectorError, TypeError, ValueError, AttributeError) as e:
                na_err = str(e)
        csi = spec.get("csi") or {}
        return cls(
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            labels=dict(meta.get("labels") or {}),
            annotations=ann,
            capacity=_storage((spec.get("capacity") or {}).get("storage")),
            access_modes=frozenset(spec.get("accessModes") or ()),
            storage_class=str(ann[ANN_STORAGE_CLASS]) if ANN_STORAGE_CLASS in ann
            else str(spec.get("storageClassName") or ""),
            volume_mode=str(spec.get("volumeMode") or "Filesystem"),
            claim_ref=claim_ref,
            node_affinity=na,
            node_affinity_error=na_err,
            phase=str((body.get("status") or {}).get("phase") or ""),
            csi_driver=str(csi.get("driver") or ""),
            volume_handle=str(csi.get("volumeHandle") or ""),
            deleting=meta.get("deletionTimestamp") is not None,
            raw=body,
        )

    def matches_node(self, node_labels: Mapping[str, str]) -> bool:
        """upstream CheckNodeAffinity(pv, node labels): the required terms against the labels
        (on a node object without a name, so matchFields never match)."""
        if self.node_affinity_error is not None:
            return False
        return self.node_affinity is None or self.node_affinity.matches(node_labels, "")

    def topology(self) -> list[tuple[str, frozenset[str]]]:
        """VolumeZone: (label key, zone set) for each of the four topology labels the PV has;
        a value may list zones separated by ``__`` (LabelZonesToSet); an empty set is dropped."""
        out = []
        for key in TOPOLOGY_LABELS:
            value = self.labels.get(key)
            if value is None:
                continue
            zones = label_zones_to_set(value)
            if zones:
                out.append((key, zones))
        return out


def label_zones_to_set(value: str) -> frozenset[str]:
    """upstream volumehelpers.LabelZonesToSet: ``a__b`` -> {a, b}; an empty value or an empty
    zone is an error (here: the empty set)."""
    zones = [z.strip() for z in value.split("__")]
    if any(not z for z in zones):
        return frozenset()
    return frozenset(zones)


@dataclass(slots=True)
class PersistentVolumeClaim:
    """The parts of a v1.PersistentVolumeClaim the volume plugins read. ``storage_class``:
    the deprecated annotation, else ``spec.storageClassName``, else "" (upstream
    GetPersistentVolumeClaimClass). ``request``: resources.requests.storage in bytes."""

    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    volume_name: str = ""
    storage_class: str = ""
    access_modes: frozenset[str] = frozenset()
    request: int = 0
    selector: LabelSelector | None = None
    volume_mode: str = "Filesystem"
    phase: str = ""
    deleting: bool = False
    controller_uid: str = ""  # the uid of the controlling ownerReference, if any
    raw: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def fully_bound(self) -> bool:
        """volumeName set and the bind-completed annotation present (upstream isPVCFullyBound)."""
        return self.volume_name != "" and ANN_BIND_COMPLETED in self.annotations

    @property
    def selected_node(self) -> str | None:
        return self.annotations.get(ANN_SELECTED_NODE)

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "PersistentVolumeClaim":
        meta = _meta(body)
        spec = body.get("spec") or {}
        ann = dict(meta.get("annotations") or {})
        sel = spec.get("selector")
        try:
            selector = None if sel is None else LabelSelector.parse(sel, "spec.selector")
        except SelectorError:
            selector = LabelSelector(nothing=True)
        controller = ""
        for ref in meta.get("ownerReferences") or ():
            if isinstance(ref, Mapping) and ref.get("controller"):
                controller = str(ref.get("uid") or "")
                break
        return cls(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            annotations=ann,
            volume_name=str(spec.get("volumeName") or ""),
            storage_class=str(ann[ANN_STORAGE_CLASS]) if ANN_STORAGE_CLASS in ann
            else str(spec.get("storageClassName") or ""),
            access_modes=frozenset(spec.get("accessModes") or ()),
            request=_storage(((spec.get("resources") or {}).get("requests") or {}).get("storage")),
            selector=selector,
            volume_mode=str(spec.get("volumeMode") or "Filesystem"),
            phase=str((body.get("status") or {}).get("phase") or ""),
            deleting=meta.get("deletionTimestamp") is not None,
            controller_uid=controller,
            raw=body,
        )


@dataclass(slots=True)
class StorageClass:
    """``binding_mode``: volumeBindingMode, None when unset (upstream: an error for the
    binder); ``allowed_topologies``: per term, (key, allowed values) requirements."""

    name: str
    resource_version: str = ""
    provisioner: str = ""
    binding_mode: str | None = IMMEDIATE
    allowed_topologies: tuple[tuple[tuple[str, frozenset[str]], ...], ...] = ()

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "StorageClass":
        meta = _meta(body)
        terms = []
        for t in body.get("allowedTopologies") or ():
            if not isinstance(t, Mapping):
                continue
            terms.append(tuple((str(e.get("key") or ""), frozenset(str(v) for v in e.get("values") or ()))
                               for e in t.get("matchLabelExpressions") or () if isinstance(e, Mapping)))
        mode = body.get("volumeBindingMode")
        return cls(
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            provisioner=str(body.get("provisioner") or ""),
            binding_mode=None if mode is None else str(mode),
            allowed_topologies=tuple(terms),
        )

    def topology_matches(self, node_labels: Mapping[str, str]) -> bool:
        """upstream v1helper.MatchTopologySelectorTerms: no terms match every node; else some
        non-empty term whose every expression has the node's label value among its values."""
        if not self.allowed_topologies:
            return True
        for term in self.allowed_topologies:
            if not term:
                continue
            if all(node_labels.get(k) in values for k, values in term):
                return True
        return False


@dataclass(slots=True)
class CSINode:
    """``drivers``: driver name -> allocatable.count (None: no limit); ``migrated_plugins``:
    the ``storage.alpha.kubernetes.io/migrated-plugins`` annotation (VolumeBinding's hint)."""

    name: str
    resource_version: str = ""
    drivers: dict[str, int | None] = field(default_factory=dict)
    migrated_plugins: str = ""

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "CSINode":
        meta = _meta(body)
        drivers: dict[str, int | None] = {}
        for d in (body.get("spec") or {}).get("drivers") or ():
            if not isinstance(d, Mapping):
                continue
            count = (d.get("allocatable") or {}).get("count")
            try:
                drivers[str(d.get("name") or "")] = None if count is None else int(count)
            except (TypeError, ValueError):
                drivers[str(d.get("name") or "")] = None
        return cls(str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""), drivers,
                   str((meta.get("annotations") or {}).get(ANN_MIGRATED_PLUGINS) or ""))

    def limits(self) -> dict[str, int]:
        """The drivers with an attach limit (upstream getVolumeLimits)."""
        return {d: c for d, c in self.drivers.items() if c is not None}


@dataclass(slots=True)
class CSIDriver:
    name: str
    resource_version: str = ""
    attach_required: bool = True  # spec.attachRequired, defaulted true by the API
    storage_capacity: bool = False
    prevent_pod_scheduling_if_missing: bool = False

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "CSIDriver":
        meta = _meta(body)
        spec = body.get("spec") or {}
        attach = spec.get("attachRequired")
        return cls(
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            attach_required=True if attach is None else bool(attach),
            storage_capacity=bool(spec.get("storageCapacity")),
            prevent_pod_scheduling_if_missing=bool(spec.get("preventPodSchedulingIfMissing")),
        )


_PARSERS = {
    PERSISTENT_VOLUMES: PersistentVolume.from_dict,
    PERSISTENT_VOLUME_CLAIMS: PersistentVolumeClaim.from_dict,
    STORAGE_CLASSES: StorageClass.from_dict,
    CSI_NODES: CSINode.from_dict,
    CSI_DRIVERS: CSIDriver.from_dict,
}


# ---------------------------------------------------------------------------- binder helpers
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


class AssumeError(ValueError):
    """An assumption on an object the cache does not hold, or holds at another version."""


# ---------------------------------------------------------------------------- cache
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
        return {PERSISTENT_VOLUMES: self._pvs, PERSISTENT_VOLUME_CLAIMS: self._pvcs, STORAGE_CLASSES: self._classes,
                CSI_NODES: self._csinodes, CSI_DRIVERS: self._csidrivers}[kind]

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

    def is_assumed_pv(self, name: str) -> bool:
        return name in self._assumed_pvs
