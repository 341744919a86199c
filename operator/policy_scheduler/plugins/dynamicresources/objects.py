"""Dynamic Resource Allocation objects (resource.k8s.io/v1), parsed once per watch event.

``DeviceClass``, ``ResourceSlice`` (its devices with qualified attributes, capacities and taints)
and ``ResourceClaim`` (requests, constraints, the allocation and ``reservedFor``), as the
informers last saw them; ``DraCache`` (cache.py) holds them. Pure: no client, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Callable, Mapping

from ...framework.events import Resource
from ...framework.model.labels import NodeSelector, SelectorError
from .capacity import Q, Capacity, parse_q

RESOURCE_CLAIMS, RESOURCE_SLICES, DEVICE_CLASSES = "resourceclaims", "resourceslices", "deviceclasses"
DEVICE_TAINT_RULES = "devicetaintrules"  # taint_rules.py: taints laid over the slices' devices
KINDS = (RESOURCE_CLAIMS, RESOURCE_SLICES, DEVICE_CLASSES, DEVICE_TAINT_RULES)
PATHS = {RESOURCE_CLAIMS: "/apis/resource.k8s.io/v1/resourceclaims",
         RESOURCE_SLICES: "/apis/resource.k8s.io/v1/resourceslices",
         DEVICE_CLASSES: "/apis/resource.k8s.io/v1/deviceclasses",
         DEVICE_TAINT_RULES: "/apis/resource.k8s.io/v1/devicetaintrules"}
_RESOURCES = {RESOURCE_CLAIMS: Resource.RESOURCE_CLAIM, RESOURCE_SLICES: Resource.RESOURCE_SLICE,
              DEVICE_CLASSES: Resource.DEVICE_CLASS}
FINALIZER = "resource.kubernetes.io/delete-protection"
MAX_RESULTS = 32  # upstream AllocationResultsMaxSize
FIRST_AVAILABLE_MAX = 8  # upstream FirstAvailableDeviceRequestMaxSize
MAX_CONDITIONS = 4  # upstream BindingConditionsMaxSize, BindingFailureConditionsMaxSize
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
    taints: tuple[DeviceTaint, ...] = ()  # the slice's own, then those of matching DeviceTaintRules
    binding_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False
    # consumesCounters: (counter set, ((counter, value), ...)) per entry
    counters: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...] = ()
    multi: bool = False  # allowMultipleAllocations
    capacity: Mapping[str, Capacity] = field(default_factory=dict)  # parsed raw_capacity
    # perDeviceNodeSelection: the device's own nodeName / allNodes / nodeSelector (raw and parsed)
    node_name: str = ""
    all_nodes: bool = False
    node_selector: NodeSelector | None = None
    raw_node_selector: Mapping[str, Any] | None = None
    own_taints: tuple[DeviceTaint, ...] = ()  # the slice's taints (taint_rules.py adds the rules' to ``taints``)
    binding_failure_conditions: tuple[str, ...] = ()
    _cel: Any = None
    matches: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> DeviceID:
        return (self.driver, self.pool, self.name)

    def matches_node(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """upstream NodeMatches on the device's own node selection (perDeviceNodeSelection)."""
        if self.node_name:
            return self.node_name == node_name
        if self.all_nodes:
            return True
        if self.node_selector is not None:
            return self.node_selector.matches(labels, node_name)
        return False

    def cel_device(self) -> Any:
        if self._cel is None:
            from .cel import Device as CelDevice

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


def _conditions(d: Mapping[str, Any], key: str, i: int) -> tuple[str, ...]:
    return tuple(str(c) for c in _list(d.get(key), f"spec.devices[{i}].{key}")[:MAX_CONDITIONS])


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
    shared_counters: tuple[tuple[str, dict[str, Decimal]], ...]  # (counter set, counter -> value)
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
            attrs: dict[str, tuple[str, Any]] = {}
            raw_attrs = _obj(d.get("attributes"), f"spec.devices[{i}].attributes")
            for n, v in raw_attrs.items():
                q = n if "/" in n else f"{driver}/{n}"
                attrs.setdefault(q, _attribute(v, f"spec.devices[{i}].attributes.{n}"))
            taints = tuple(DeviceTaint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                           for t in _list(d.get("taints"), f"spec.devices[{i}].taints"))
            raw_cap = _obj(d.get("capacity"), f"spec.devices[{i}].capacity")
            if len(raw_cap) > MAX_ENTRIES:
                raise ValueError(f"spec.devices[{i}].capacity: more than {MAX_ENTRIES} entries")
            dsel = d.get("nodeSelector")
            try:
                dev_sel = NodeSelector.parse(dsel, f"spec.devices[{i}].nodeSelector") if dsel else None
            except SelectorError as e:
                raise ValueError(str(e)) from None
            dev = Device(
                name=str(d.get("name") or ""), driver=driver, pool=pool_name, attributes=attrs,
                raw_attributes=raw_attrs, raw_capacity=raw_cap,
                taints=taints, own_taints=taints,
                binding_conditions=_conditions(d, "bindingConditions", i),
                binding_failure_conditions=_conditions(d, "bindingFailureConditions", i),
                binds_to_node=bool(d.get("bindsToNode")),
                counters=_consumes(d.get("consumesCounters"), f"spec.devices[{i}].consumesCounters"),
                multi=bool(d.get("allowMultipleAllocations")),
                capacity={str(n): Capacity.parse(c, f"spec.devices[{i}].capacity.{n}") for n, c in raw_cap.items()},
                node_name=str(d.get("nodeName") or ""), all_nodes=bool(d.get("allNodes")), node_selector=dev_sel,
                raw_node_selector=dsel if isinstance(dsel, Mapping) else None)
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
                   shared_counters=_counter_sets(spec.get("sharedCounters")), devices=devices)

    def relevant_for(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """upstream GatherPools: nodeName equal, allNodes, the nodeSelector matches, or (with
        perDeviceNodeSelection) some device's own node selection matches; else ignored."""
        if self.node_name:
            return self.node_name == node_name
        if self.all_nodes:
            return True
        if self.node_selector is not None:
            return self.node_selector.matches(labels, node_name)
        if self.per_device_node_selection:
            return any(d.matches_node(node_name, labels) for d in self.devices)
        return False


MAX_ENTRIES = 128  # counters per set, counter sets, consumptions, capacities: bounded (the API allows fewer)


def _counter_map(v: Any, where: str) -> dict[str, Decimal]:
    m = _obj(v, where)
    if len(m) > MAX_ENTRIES:
        raise ValueError(f"{where}: more than {MAX_ENTRIES} counters")
    return {str(n): parse_q(_obj(c, f"{where}.{n}").get("value") or "0", f"{where}.{n}.value")[0]
            for n, c in m.items()}


def _counter_sets(v: Any) -> tuple[tuple[str, dict[str, Decimal]], ...]:
    sets = _list(v, "spec.sharedCounters")
    if len(sets) > MAX_ENTRIES:
        raise ValueError(f"spec.sharedCounters: more than {MAX_ENTRIES} counter sets")
    out = []
    for i, cs in enumerate(sets):
        cs = _obj(cs, f"spec.sharedCounters[{i}]")
        out.append((str(cs.get("name") or ""), _counter_map(cs.get("counters"), f"spec.sharedCounters[{i}].counters")))
    return tuple(out)


def _consumes(v: Any, where: str) -> tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...]:
    items = _list(v, where)
    if len(items) > MAX_ENTRIES:
        raise ValueError(f"{where}: more than {MAX_ENTRIES} entries")
    out = []
    for i, c in enumerate(items):
        c = _obj(c, f"{where}[{i}]")
        out.append((str(c.get("counterSet") or ""),
                    tuple(_counter_map(c.get("counters"), f"{where}[{i}].counters").items())))
    return tuple(out)


# ---------------------------------------------------------------------------- classes
@dataclass(slots=True, eq=False)
class DeviceClass:
    name: str
    resource_version: str
    selectors: tuple[str, ...]
    config: list
    extended_resource_name: str = ""
    created: str = ""  # metadata.creationTimestamp (RFC 3339: compares as a string)

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "DeviceClass":
        meta = _meta(body)
        spec = _obj(body.get("spec"), "spec")
        sels = tuple(str(_obj(_obj(s, "spec.selectors[]").get("cel"), "cel").get("expression") or "")
                     for s in _list(spec.get("selectors"), "spec.selectors"))
        return cls(str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""), sels,
                   list(_list(spec.get("config"), "spec.config")), str(spec.get("extendedResourceName") or ""),
                   str(meta.get("creationTimestamp") or ""))


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
    capacity: Mapping[str, Q] = field(default_factory=dict)  # capacity.requests

    @classmethod
    def parse(cls, name: str, d: Mapping[str, Any], where: str) -> "SubRequest":
        sels = tuple(str(_obj(_obj(s, f"{where}.selectors[]").get("cel"), "cel").get("expression") or "")
                     for s in _list(d.get("selectors"), f"{where}.selectors"))
        tols = _list(d.get("tolerations"), f"{where}.tolerations")
        mode = str(d.get("allocationMode") or "ExactCount")
        count = d.get("count")
        reqs = _obj(_obj(d.get("capacity"), f"{where}.capacity").get("requests"), f"{where}.capacity.requests")
        if len(reqs) > MAX_ENTRIES:
            raise ValueError(f"{where}.capacity.requests: more than {MAX_ENTRIES} entries")
        return cls(name, str(d.get("deviceClassName") or ""), sels, mode,
                   int(count) if count is not None else (1 if mode == "ExactCount" else 0),
                   bool(d.get("adminAccess")), tuple(DeviceToleration.parse(_obj(t, "toleration")) for t in tols),
                   tuple(tols), {str(n): parse_q(q, f"{where}.capacity.requests.{n}") for n, q in reqs.items()})


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
        """The devices the allocation holds exclusively (admin-access results and shares of
        devices with allowMultipleAllocations, those with a ``shareID``, excluded)."""
        return [(str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in self.results()
                if isinstance(r, Mapping) and not r.get("adminAccess") and r.get("shareID") is None]

    def shared_ids(self) -> list[tuple[DeviceID, dict[str, Decimal]]]:
        """The shares (results with a ``shareID``, admin access excluded) and the capacity each
        consumes (upstream foreachAllocatedDevice's shared and consumed-capacity callbacks); a
        value that is not a quantity counts as nothing."""
        out = []
        for r in self.results():
            if not isinstance(r, Mapping) or r.get("adminAccess") or r.get("shareID") is None:
                continue
            consumed: dict[str, Decimal] = {}
            cc = r.get("consumedCapacity")
            if isinstance(cc, Mapping):
                for n, q in list(cc.items())[:MAX_ENTRIES]:
                    try:
                        consumed[str(n)] = parse_q(q, "consumedCapacity")[0]
                    except ValueError:
                        continue
            out.append(((str(r.get("driver")), str(r.get("pool")), str(r.get("device"))), consumed))
        return out

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


# each parser returns its kind's object; apply() reads the fields of the kind it was given
_PARSERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {RESOURCE_CLAIMS: ResourceClaim.from_dict, RESOURCE_SLICES: ResourceSlice.from_dict,
            DEVICE_CLASSES: DeviceClass.from_dict}
