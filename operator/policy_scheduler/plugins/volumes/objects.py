"""Storage objects the volume plugins read (VolumeBinding, VolumeZone, VolumeRestrictions,
NodeVolumeLimits): PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes and
CSIDrivers, parsed once per watch event, keeping only what those plugins read. ``VolumeCache``
(cache.py) holds them. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ...framework.events import ActionType, Resource
from ...framework.model.labels import LabelSelector, NodeSelector, SelectorError
from ...framework.model.quantity import QuantityError, resource_value

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


# each parser returns its kind's object; apply() reads the fields of the kind it was given
_PARSERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    PERSISTENT_VOLUMES: PersistentVolume.from_dict,
    PERSISTENT_VOLUME_CLAIMS: PersistentVolumeClaim.from_dict,
    STORAGE_CLASSES: StorageClass.from_dict,
    CSI_NODES: CSINode.from_dict,
    CSI_DRIVERS: CSIDriver.from_dict,
}
