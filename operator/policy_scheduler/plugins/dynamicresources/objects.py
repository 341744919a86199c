"""Dynamic Resource Allocation objects (resource.k8s.io/v1) and the cache DynamicResources reads.

Parsed once per watch event: ``DeviceClass``, ``ResourceSlice`` (its devices with qualified
attributes, capacities and taints) and ``ResourceClaim`` (requests, constraints, the allocation
and ``reservedFor``). ``DraCache`` holds them as the informers last saw them, with the index the
allocator needs at decision time and the scheduler's own in-flight state laid over them:

- ``slices_for_node(name)``: the slices published for that node plus those for several nodes
  (``allNodes`` or a ``nodeSelector``), so a decision never walks every slice of the cluster;
- ``allocated``: how many claims hold each device (``(driver, pool, device)``), kept up to date on
  every claim change; admin-access results do not count (upstream's allocated-state rule);
- pending allocations (upstream's ``SignalClaimPendingAllocation``): a claim allocated in memory
  by Reserve, until PreBind wrote it or Unreserve dropped it; its devices count as allocated;
- assumed claims (upstream's assume cache): the object PreBind wrote, read instead of the
  informer's until the informer delivers that version or a newer one.

Pure: no client, no clock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ..events import ActionType, ClusterEvent, Resource
from .labels import NodeSelector, SelectorError
from .volumes import resource_version_newer

RESOURCE_CLAIMS, RESOURCE_SLICES, DEVICE_CLASSES = "resourceclaims", "resourceslices", "deviceclasses"
KINDS = (RESOURCE_CLAIMS, RESOURCE_SLICES, DEVICE_CLASSES)
PATHS = {RESOURCE_CLAIMS: "/apis/resource.k8s.io/v1/resourceclaims",
         RESOURCE_SLICES: "/apis/resource.k8s.io/v1/resourceslices",
         DEVICE_CLASSES: "/apis/resource.k8s.io/v1/deviceclasses"}
_RESOURCES = {RESOURCE_CLAIMS: Resource.RESOURCE_CLAIM, RESOURCE_SLICES: Resource.RESOURCE_SLICE,
              DEVICE_CLASSES: Resource.DEVICE_CLASS}
FINALIZER = "resource.kubernetes.io/delete-protection"
MAX_RESULTS = 32  # upstream AllocationResultsMaxSize
FIRST_AVAILABLE_MAX = 8  # upstream FirstAvailableDeviceRequestMaxSize
DeviceID = tuple[str, str, str]  # (driver, pool, device)


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    m = body.get("metadata") or {}
    if not isinstance(m, Mapping):
        raise ValueError("metadata is not an object")
    return m


def _list(v: Any, where: str) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ValueError(f"{where} is not a list")
    return v


def _obj(v: Any, where: str) -> Mapping[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise ValueError(f"{where} is not an object")
    return v


# ---------------------------------------------------------------------------- taints
@dataclass(frozen=True, slots=True)
class DeviceToleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> "DeviceToleration":
        return cls(str(d.get("key") or ""), str(d.get("operator") or "Equal"), str(d.get("value") or ""),
                   str(d.get("effect") or ""))

    def tolerates(self, taint: "DeviceTaint") -> bool:
        """upstream resourceclaim.ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str
    effect: str

    @property
    def prevents_allocation(self) -> bool:
        return self.effect in ("NoSchedule", "NoExecute")  # None and unknown effects are ignored


# ---------------------------------------------------------------------------- slices
@dataclass(slots=True, eq=False)
class Device:
    """One device of a slice. ``attributes``: qualified name -> (type, value), with names the
    driver published bare qualified by the driver's name; ``cel``: the selector variable (built on
    first use); ``matches``: selector text -> result, this device's cache across cycles (a slice
    update makes new Device objects)."""

    name: str
    driver: str
    pool: str
    attributes: dict[str, tuple[str, Any]]
    raw_attributes: Mapping[str, Any]
    raw_capacity: Mapping[str, Any]
    taints: tuple[DeviceTaint, ...] = ()
    binding_conditions: bool = False
    binds_to_node: bool = False
    consumes_counters: bool = False
    multi: bool = False  # allowMultipleAllocations
    _cel: Any = None
    matches: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> DeviceID:
        return (self.driver, self.pool, self.name)

    def cel_device(self) -> Any:
        if self._cel is None:
            from ..cel import Device as CelDevice

            attrs: dict[str, dict[str, Any]] = {}
            for q, v in self.raw_attributes.items():
                dom, _, n = q.rpartition("/")
                attrs.setdefault(dom or self.driver, {})[n] = v
            cap: dict[str, dict[str, Any]] = {}
            for q, v in self.raw_capacity.items():
                dom, _, n = q.rpartition("/")
                cap.setdefault(dom or self.driver, {})[n] = v
            self._cel = CelDevice({"driver": self.driver, "attributes": attrs, "capacity": cap,
                                   "allowMultipleAllocations": self.multi})
        return self._cel


_ATTR_TYPES = ("int", "bool", "string", "version")


def _attribute(v: Any, where: str) -> tuple[str, Any]:
    v = _obj(v, where)
    for t in _ATTR_TYPES:
        if t in v and v[t] is not None:
            return t, v[t]
    return "unknown", None


@dataclass(slots=True, eq=False)
class ResourceSlice:
    name: str
    uid: str
    resource_version: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str
    all_nodes: bool
    node_selector: NodeSelector | None
    raw_node_selector: Mapping[str, Any] | None
    per_device_node_selection: bool
    shared_counters: bool
    devices: list[Device]

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "ResourceSlice":
        meta = _meta(body)
        spec = _obj(body.get("spec"), "spec")
        pool = _obj(spec.get("pool"), "spec.pool")
        driver = str(spec.get("driver") or "")
        pool_name = str(pool.get("name") or "")
        sel = spec.get("nodeSelector")
        devices = []
        for i, d in enumerate(_list(spec.get("devices"), "spec.devices")):
            d = _obj(d, f"spec.devices[{i}]")
            attrs = {}
            raw_attrs = _obj(d.get("attributes"), f"spec.devices[{i}].attributes")
            for n, v in raw_attrs.items():
                q = n if "/" in n else f"{driver}/{n}"
                attrs.setdefault(q, _attribute(v, f"spec.devices[{i}].attributes.{n}"))
            taints = tuple(DeviceTaint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                           for t in _list(d.get("taints"), f"spec.devices[{i}].taints"))
            dev = Device(
                name=str(d.get("name") or ""), driver=driver, pool=pool_name, attributes=attrs,
                raw_attributes=raw_attrs, raw_capacity=_obj(d.get("capacity"), f"spec.devices[{i}].capacity"),
                taints=taints, binding_conditions=bool(d.get("bindingConditions")),
                binds_to_node=bool(d.get("bindsToNode")), consumes_counters=bool(d.get("consumesCounters")),
                multi=bool(d.get("allowMultipleAllocations")))
            try:  # the selector variable, built now: a value CEL cannot read refuses the slice here
                dev.cel_device()
            except (ValueError, TypeError, AttributeError) as e:
                raise ValueError(f"spec.devices[{i}] ({dev.name}): {e}") from None
            devices.append(dev)
        try:
            node_selector = NodeSelector.parse(sel, "spec.nodeSelector") if sel else None
        except SelectorError as e:
            raise ValueError(str(e)) from None
        return cls(name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
                   resource_version=str(meta.get("resourceVersion") or ""), driver=driver, pool=pool_name,
                   generation=int(pool.get("generation") or 0), slice_count=int(pool.get("resourceSliceCount") or 0),
                   node_name=str(spec.get("nodeName") or ""), all_nodes=bool(spec.get("allNodes")),
                   node_selector=node_selector, raw_node_selector=sel if isinstance(sel, Mapping) else None,
                   per_device_node_selection=bool(spec.get("perDeviceNodeSelection")),
                   shared_counters=bool(spec.get("sharedCounters")), devices=devices)

    def relevant_for(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """upstream: nodeName equal, allNodes, or the nodeSelector matches (perDeviceNodeSelection
        slices are skipped: partitionable devices are not covered)."""
        if self.node_name:
            return self.node_name == node_name
        if self.all_nodes:
            return True
        if self.node_selector is not None:
            return self.node_selector.matches(labels, node_name)
        return False


# ---------------------------------------------------------------------------- classes
@dataclass(slots=True, eq=False)
class DeviceClass:
    name: str
    resource_version: str
    selectors: tuple[str, ...]
    config: list
    extended_resource_name: str = ""

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "DeviceClass":
        meta = _meta(body)
        spec = _obj(body.get("spec"), "spec")
        sels = tuple(str(_obj(_obj(s, "spec.selectors[]").get("cel"), "cel").get("expression") or "")
                     for s in _list(spec.get("selectors"), "spec.selectors"))
        return cls(str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""), sels,
                   list(_list(spec.get("config"), "spec.config")), str(spec.get("extendedResourceName") or ""))


# ---------------------------------------------------------------------------- claims
@dataclass(frozen=True, slots=True)
class SubRequest:
    """A request's ``exactly`` part, or one ``firstAvailable`` entry (``name`` then its own)."""

    name: str
    class_name: str
    selectors: tuple[str, ...]
    mode: str  # ExactCount | All
    count: int
    admin_access: bool
    tolerations: tuple[DeviceToleration, ...]
    raw_tolerations: tuple = ()

    @classmethod
    def parse(cls, name: str, d: Mapping[str, Any], where: str) -> "SubRequest":
        sels = tuple(str(_obj(_obj(s, f"{where}.selectors[]").get("cel"), "cel").get("expression") or "")
                     for s in _list(d.get("selectors"), f"{where}.selectors"))
        tols = _list(d.get("tolerations"), f"{where}.tolerations")
        mode = str(d.get("allocationMode") or "ExactCount")
        count = d.get("count")
        return cls(name, str(d.get("deviceClassName") or ""), sels, mode,
                   int(count) if count is not None else (1 if mode == "ExactCount" else 0),
                   bool(d.get("adminAccess")), tuple(DeviceToleration.parse(_obj(t, "toleration")) for t in tols),
                   tuple(tols))


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    exactly: SubRequest | None
    first_available: tuple[SubRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: frozenset[str]
    match_attribute: str  # "" for an unknown constraint type (an allocation error)
    distinct_attribute: str = ""


@dataclass(slots=True, eq=False)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    resource_version: str
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[Constraint, ...]
    config: list
    deleting: bool
    controller_uid: str  # the controlling ownerReference's uid
    controller_kind: str
    annotations: Mapping[str, str]
    finalizers: tuple[str, ...]
    allocation: Mapping[str, Any] | None  # status.allocation, as the API has it
    allocation_node_selector: NodeSelector | None
    reserved_for: tuple[Mapping[str, Any], ...]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def results(self) -> list[Mapping[str, Any]]:
        if not self.allocation:
            return []
        return list(((self.allocation.get("devices") or {}).get("results")) or [])

    def allocated_ids(self) -> list[DeviceID]:
        """The devices the allocation holds exclusively (admin-access results excluded)."""
        return [(str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in self.results()
                if not r.get("adminAccess")]

    def reserved_uids(self) -> set[str]:
        return {str(r.get("uid") or "") for r in self.reserved_for}

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "ResourceClaim":
        meta = _meta(body)
        spec = _obj(body.get("spec"), "spec")
        devs = _obj(spec.get("devices"), "spec.devices")
        reqs = []
        for i, r in enumerate(_list(devs.get("requests"), "spec.devices.requests")):
            r = _obj(r, f"spec.devices.requests[{i}]")
            name = str(r.get("name") or "")
            ex = r.get("exactly")
            fa = _list(r.get("firstAvailable"), f"spec.devices.requests[{i}].firstAvailable")
            reqs.append(DeviceRequest(
                name, SubRequest.parse(name, _obj(ex, "exactly"), f"spec.devices.requests[{i}].exactly")
                if ex is not None else None,
                tuple(SubRequest.parse(str(_obj(s, "sub").get("name") or ""), s,
                                       f"spec.devices.requests[{i}].firstAvailable[{j}]") for j, s in enumerate(fa))))
        cons = []
        for i, c in enumerate(_list(devs.get("constraints"), "spec.devices.constraints")):
            c = _obj(c, f"spec.devices.constraints[{i}]")
            cons.append(Constraint(frozenset(str(x) for x in _list(c.get("requests"), "requests")),
                                   str(c.get("matchAttribute") or ""), str(c.get("distinctAttribute") or "")))
        ctrl_uid = ctrl_kind = ""
        for o in _list(meta.get("ownerReferences"), "metadata.ownerReferences"):
            if isinstance(o, Mapping) and o.get("controller"):
                ctrl_uid, ctrl_kind = str(o.get("uid") or ""), str(o.get("kind") or "")
                break
        status = _obj(body.get("status"), "status")
        alloc = status.get("allocation")
        alloc = _obj(alloc, "status.allocation") if alloc else None
        ns_sel = None
        if alloc and alloc.get("nodeSelector"):
            try:
                ns_sel = NodeSelector.parse(alloc["nodeSelector"], "status.allocation.nodeSelector")
            except SelectorError as e:
                raise ValueError(str(e)) from None
        return cls(namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name") or ""),
                   uid=str(meta.get("uid") or ""), resource_version=str(meta.get("resourceVersion") or ""),
                   requests=tuple(reqs), constraints=tuple(cons),
                   config=list(_list(devs.get("config"), "spec.devices.config")),
                   deleting=meta.get("deletionTimestamp") is not None, controller_uid=ctrl_uid,
                   controller_kind=ctrl_kind, annotations=dict(_obj(meta.get("annotations"), "annotations")),
                   finalizers=tuple(str(f) for f in _list(meta.get("finalizers"), "finalizers")),
                   allocation=alloc, allocation_node_selector=ns_sel,
                   reserved_for=tuple(_obj(r, "reservedFor[]") for r in _list(status.get("reservedFor"),
                                                                             "status.reservedFor")),
                   raw=body)

    def with_status(self, allocation: Mapping[str, Any] | None, reserved_for: list,
                    finalizer: bool = False) -> "ResourceClaim":
        """A copy with another allocation and reservedFor (the body changed alike)."""
        raw = dict(self.raw)
        raw["status"] = dict(raw.get("status") or {})
        if allocation is None:
            raw["status"].pop("allocation", None)
            raw["status"].pop("devices", None)
        else:
            raw["status"]["allocation"] = allocation
        raw["status"]["reservedFor"] = list(reserved_for)
        fins = self.finalizers
        if finalizer and FINALIZER not in fins:
            fins = fins + (FINALIZER,)
            raw["metadata"] = dict(raw.get("metadata") or {}, finalizers=list(fins))
        ns_sel = None
        if allocation and allocation.get("nodeSelector"):
            ns_sel = NodeSelector.parse(allocation["nodeSelector"], "status.allocation.nodeSelector")
        return replace(self, allocation=allocation, allocation_node_selector=ns_sel,
                       reserved_for=tuple(reserved_for), finalizers=fins, raw=raw)


_PARSERS = {RESOURCE_CLAIMS: ResourceClaim.from_dict, RESOURCE_SLICES: ResourceSlice.from_dict,
            DEVICE_CLASSES: DeviceClass.from_dict}


# ---------------------------------------------------------------------------- cache
@dataclass(slots=True)
class Pending:
    """An in-flight allocation: the claim as Reserve allocated it, and the pods sharing it."""

    claim: ResourceClaim
    pods: set[str]


class DraCache:
    """DeviceClasses, ResourceSlices and ResourceClaims, with the allocator's indexes and the
    scheduler's in-flight claims (module docstring)."""

    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self._api_claims: dict[str, ResourceClaim] = {}  # "ns/name"
        self._assumed: dict[str, ResourceClaim] = {}  # "ns/name" -> what PreBind wrote
        self.pending: dict[str, Pending] = {}  # claim uid
        self._by_node: dict[str, set[str]] = {}  # node name -> slice names
        self._multi_node: set[str] = set()  # slices without nodeName
        self._pools: dict[tuple[str, str], Counter] = {}  # (driver, pool) -> generation -> slice count
        self.allocated: Counter = Counter()  # DeviceID -> claims holding it (pending included)
        self.slice_version = 0  # bumps on slice and class changes (per-node device lists)
        self.node_memo: dict[str, tuple] = {}  # dra_allocator.node_devices' per-node lists

    def __len__(self) -> int:
        return len(self.slices) + len(self._api_claims) + len(self.classes)

    # ------------------------------------------------------------------ informer side
    def apply(self, kind: str, event: str, body: Mapping[str, Any]) -> list[tuple[ClusterEvent, Any, Any]]:
        parse = _PARSERS.get(kind)
        if parse is None or event not in ("ADDED", "MODIFIED", "DELETED"):
            raise ValueError(f"unknown DRA cache event {kind!r} {event!r}")
        new = parse(body)
        res = _RESOURCES[kind]
        if kind == RESOURCE_CLAIMS:
            key = new.key
            old_eff = self.claim(new.namespace, new.name)
            old = self._api_claims.get(key)
            if event == "DELETED":
                if old is None:
                    return []
                self._api_claims.pop(key, None)
                self._assumed.pop(key, None)
                self._recount(old_eff, None)
                return [(ClusterEvent(res, ActionType.DELETE), old, None)]
            if old is not None and old.resource_version == new.resource_version and new.resource_version:
                return []
            self._api_claims[key] = new
            a = self._assumed.get(key)
            if a is not None and (a.uid != new.uid or resource_version_newer(new.resource_version,
                                                                               a.resource_version)):
                self._assumed.pop(key)
            self._recount(old_eff, self.claim(new.namespace, new.name))
            return [(ClusterEvent(res, ActionType.ADD if old is None else ActionType.UPDATE), old, new)]
        store: dict = self.slices if kind == RESOURCE_SLICES else self.classes
        old = store.get(new.name)
        if event == "DELETED":
            if old is None:
                return []
            del store[new.name]
            if kind == RESOURCE_SLICES:
                self._unindex(old)
            self._slices_changed()
            return [(ClusterEvent(res, ActionType.DELETE), old, None)]
        if old is not None and old.resource_version == new.resource_version and new.resource_version:
            return []
        if kind == RESOURCE_SLICES:
            if old is not None:
                self._unindex(old)
            self._index(new)
        store[new.name] = new
        self._slices_changed()
        return [(ClusterEvent(res, ActionType.ADD if old is None else ActionType.UPDATE), old, new)]

    def _slices_changed(self) -> None:
        """Every node's device list is built again on its next use (and nodes gone since are
        forgotten: the memo holds only nodes used since the last change)."""
        self.slice_version += 1
        self.node_memo.clear()

    def _index(self, s: ResourceSlice) -> None:
        if s.node_name:
            self._by_node.setdefault(s.node_name, set()).add(s.name)
        else:
            self._multi_node.add(s.name)
        self._pools.setdefault((s.driver, s.pool), Counter())[s.generation] += 1

    def _unindex(self, s: ResourceSlice) -> None:
        if s.node_name:
            names = self._by_node.get(s.node_name)
            if names is not None:
                names.discard(s.name)
                if not names:
                    del self._by_node[s.node_name]
        else:
            self._multi_node.discard(s.name)
        c = self._pools.get((s.driver, s.pool))
        if c is not None:
            c[s.generation] -= 1
            if c[s.generation] <= 0:
                del c[s.generation]
            if not c:
                del self._pools[(s.driver, s.pool)]

    def _recount(self, old: ResourceClaim | None, new: ResourceClaim | None) -> None:
        """Move the allocated counts from claim ``old`` to ``new`` (either may be None). A claim
        with a pending allocation counts through the pending entry, not its own."""
        if old is not None and old.uid not in self.pending:
            self._count(old.allocated_ids(), -1)
        if new is not None and new.uid not in self.pending:
            self._count(new.allocated_ids(), 1)

    def _count(self, ids: list[DeviceID], delta: int) -> None:
        a = self.allocated
        for d in ids:
            n = a.get(d, 0) + delta
            if n > 0:
                a[d] = n
            else:
                a.pop(d, None)

    # ------------------------------------------------------------------ reads
    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        key = f"{namespace}/{name}"
        return self._assumed.get(key) or self._api_claims.get(key)

    def api_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self._api_claims.get(f"{namespace}/{name}")

    def claims(self) -> list[ResourceClaim]:
        return [self._assumed.get(k) or c for k, c in self._api_claims.items()]

    def device_class(self, name: str) -> DeviceClass | None:
        return self.classes.get(name)

    def slices_for_node(self, node_name: str) -> list[ResourceSlice]:
        """The slices published for ``node_name`` and every slice without a nodeName (the caller
        checks those against the node's labels)."""
        names = self._by_node.get(node_name, ())
        out = [self.slices[n] for n in names]
        out.extend(self.slices[n] for n in self._multi_node)
        return out

    def pool_generations(self, driver: str, pool: str) -> Counter:
        """generation -> how many slices of the pool the cluster has at it."""
        return self._pools.get((driver, pool), Counter())

    def in_use(self, dev: DeviceID) -> bool:
        return self.allocated.get(dev, 0) > 0

    # ------------------------------------------------------------------ in-flight
    def add_pending(self, claim: ResourceClaim, pod_uid: str) -> None:
        """Reserve's in-memory allocation of ``claim`` (allocation set) for ``pod_uid``."""
        p = self.pending.get(claim.uid)
        if p is not None:
            p.pods.add(pod_uid)
            return
        base = self.claim(claim.namespace, claim.name)
        if base is not None and base.uid == claim.uid:
            self._count(base.allocated_ids(), -1)
        self.pending[claim.uid] = Pending(claim, {pod_uid})
        self._count(claim.allocated_ids(), 1)

    def drop_pending(self, claim_uid: str, pod_uid: str | None = None) -> bool:
        """Drop ``pod_uid``'s share of an in-flight allocation (every share when None); the last
        share gone, the claim counts as the cache holds it again. True when it was the last."""
        p = self.pending.get(claim_uid)
        if p is None:
            return False
        if pod_uid is not None:
            p.pods.discard(pod_uid)
            if p.pods:
                return False
        del self.pending[claim_uid]
        self._count(p.claim.allocated_ids(), -1)
        base = self.claim(p.claim.namespace, p.claim.name)
        if base is not None and base.uid == claim_uid:
            self._count(base.allocated_ids(), 1)
        return True

    def assume(self, claim: ResourceClaim) -> None:
        """The claim as the API server answered a write of ours (PreBind, PostFilter): read until
        the informer delivers this version or a newer one."""
        key = claim.key
        old = self.claim(claim.namespace, claim.name)
        api = self._api_claims.get(key)
        if api is not None and resource_version_newer(api.resource_version, claim.resource_version) \
                and api.uid == claim.uid:
            return
        self._assumed[key] = claim
        self._recount(old, claim)

    def pending_for_pod(self, pod_uid: str) -> list[ResourceClaim]:
        return [p.claim for p in self.pending.values() if pod_uid in p.pods]
