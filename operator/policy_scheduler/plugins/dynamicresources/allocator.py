"""The structured-parameters allocator of DRA (upstream
``dynamic-resource-allocation/structured/internal/incubating``, the one a v1.37 scheduler runs).

For one node and the pod's claims still to allocate it returns the first complete solution of a
depth-first search, or None. The search order is upstream's, because it decides which devices a
claim gets:

- pools sorted by (driver, pool name), pools with a device that has bindingConditions last;
  slices of a pool by name; devices in slice order. Incomplete and invalid pools are never
  allocated from (``invalid resource pools were encountered`` when nothing fits and one was
  invalid);
- claims in the pod's order, requests in spec order, ``firstAvailable`` subrequests in order (the
  first that leads to a full solution wins);
- within one ExactCount request, device k+1 is searched after device k's position;
- a device is acceptable when it is not in use (allocated in the cluster, in flight, or taken
  in this attempt; admin access only needs it unused by the same claim; a device with
  ``allowMultipleAllocations`` is shared), the class selectors and then the request's selectors
  accept it (CEL, cel.py; results cached on the device across cycles), with
  ``perDeviceNodeSelection`` its own node selection matches, its capacity covers the request
  (capacity.py), the shared counters of its pool last (pools.py), no NoSchedule/NoExecute taint
  is left untolerated, and every ``matchAttribute``/``distinctAttribute`` constraint accepts it;
- a share of an ``allowMultipleAllocations`` device is written with a new ``shareID`` and the
  ``consumedCapacity`` of every capacity of the device;
- ``allocationMode: All`` fixes its devices up front (every selectable device of the node's
  pools; an incomplete or invalid pool is an error) and must get all of them;
- at most 32 results per claim.

Errors (``AllocationError``) are upstream's texts: they abort the scheduling attempt.

Per node, the device list in search order is computed once per set of slices and node labels
(``node_devices``), so a decision reads a short prepared list per node, not the slices.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from .cache import DraCache
from .capacity import CapacityError, canonical, consumed_amounts, fits
from .cel import CELError
from .objects import (FIRST_AVAILABLE_MAX, MAX_RESULTS, Device, DeviceClass, DeviceID, ResourceClaim, ResourceSlice,
                      SubRequest)
from .pools import Counters, NodeDevices, Pool, node_devices, node_selector as _node_selector
from .selectors import selector_result

__all__ = ["Allocator", "AllocationError", "NodeAllocationError", "NodeDevices", "Pool", "node_devices"]


class AllocationError(Exception):
    """Invalid input: Filter returns Error (the attempt fails with SchedulerError)."""


class NodeAllocationError(Exception):
    """This node cannot be used (``invalid resource pools were encountered``): UAU."""


class AllocationTimeout(Exception):
    """The search on one node ran past its deadline (upstream's filterTimeout,
    ``DRASchedulerFilterTimeout``): Filter returns Error for the attempt."""


@dataclass(slots=True)
class _Req:
    """One request or subrequest of one claim, as the search uses it."""

    claim: int
    name: str  # the result's request name: "req" or "req/sub"
    base: str  # the request's name
    sub: str  # the subrequest's name, "" for none
    spec: SubRequest
    cls: DeviceClass | None
    all_devices: list = field(default_factory=list)


@dataclass(slots=True)
class Allocation:
    """One claim's allocation on a node: ``result`` is status.allocation's value;
    ``sub_index``: per firstAvailable request, the index of the subrequest chosen."""

    result: dict[str, Any]
    sub_index: list[int]


@dataclass(slots=True)
class Picked:
    """What the search found on one node, before it is written out (``Allocator.results``):
    per claim the (request, device, slice, consumed capacity: None unless the device allows
    multiple allocations) picked, and the subrequest chosen per request."""

    picks: list[list[tuple]]
    chosen: dict[tuple[int, int], int]

    def device_ids(self) -> set[DeviceID]:
        return {pick[1].id for per_claim in self.picks for pick in per_claim}


STATE_KEY = "DynamicResources"  # CycleState: DraState (DeviceFragmentation reads it too)


@dataclass(slots=True)
class DraState:
    """DynamicResources' CycleState: the pod's claims, which of them need an allocation, and what
    Filter found per node, Filter's unavailable claims (PostFilter), Reserve's allocations."""

    claims: list[ResourceClaim]
    to_allocate: list[int]  # indices into claims
    allocator: "Allocator | None"
    by_node: dict[str, Picked] = field(default_factory=dict)
    unavailable: set[int] = field(default_factory=set)
    reserved: dict[int, dict[str, Any]] = field(default_factory=dict)  # claim index -> allocation
    node: str = ""


class Allocator:
    """The claims of one pod that still need an allocation (PreFilter builds it; Filter calls
    ``allocate`` per node)."""

    def __init__(self, cache: DraCache, claims: list[ResourceClaim]) -> None:
        self.cache = cache
        self.claims = claims
        self.counters = Counters(cache)  # counters left per pool: computed once per pod attempt
        self.reqs: list[list[list[_Req]]] = []  # claim -> request -> alternatives
        self.error: str | None = None
        for ci, c in enumerate(claims):
            per_claim = []
            min_devices = 0
            for r in c.requests:
                alts = r.first_available if r.first_available else (r.exactly,)
                entries = []
                for sub in alts:
                    if sub is None:
                        continue
                    name = f"{r.name}/{sub.name}" if r.first_available else r.name
                    entries.append(_Req(ci, name, r.name, sub.name if r.first_available else "", sub,
                                        cache.device_class(sub.class_name)))
                per_claim.append(entries)
                counts = [e.spec.count for e in entries if e.spec.mode == "ExactCount"]
                min_devices += min(counts) if counts and len(counts) == len(entries) else 0
            self.reqs.append(per_claim)
            if min_devices > MAX_RESULTS and self.error is None:
                self.error = (f"claim {c.key}: number of requested devices {min_devices} exceeds the claim "
                              f"limit of {MAX_RESULTS}")
            for i, con in enumerate(c.constraints):
                if not con.match_attribute and not con.distinct_attribute and self.error is None:
                    self.error = f"claim {c.key}, constraint #{i}: empty constraint (unsupported constraint type?)"
        # one claim, one plain request (the common case): the search is first-fit, no backtracking
        # can change its outcome (acceptance of a device does not depend on the others picked)
        self.simple: _Req | None = None
        if len(claims) == 1 and len(self.reqs[0]) == 1 and len(self.reqs[0][0]) == 1 and not claims[0].constraints:
            rq = self.reqs[0][0][0]
            if rq.spec.mode == "ExactCount" and not rq.spec.admin_access and 0 < rq.spec.count <= MAX_RESULTS:
                self.simple = rq

    # ------------------------------------------------------------------ selection
    def _selectable(self, rq: _Req, dev: Device) -> bool:
        for owner, sels in ((rq.cls, rq.cls.selectors if rq.cls else ()), (None, rq.spec.selectors)):
            for i, text in enumerate(sels):
                hit = selector_result(dev, text)
                if isinstance(hit, CELError):
                    who = f"class {owner.name}" if owner is not None else f"claim {self.claims[rq.claim].key}"
                    if hit.kind == "compile":
                        raise AllocationError(f"{who}: selector #{i}: {hit}")
                    raise AllocationError(f"{who}: selector #{i} on device {dev.driver}/{dev.pool}/{dev.name}: {hit}")
                if not hit:
                    return False
        return True

    def _fits(self, rq: _Req, dev: Device, allocating: Mapping[str, Any] | None, short: bool = False) -> bool:
        """upstream CmpRequestOverCapacity against what allocated claims and this attempt consume
        (an error aborts: ``short`` names the device as the All-mode check does)."""
        if not dev.capacity and not rq.spec.capacity:
            return True
        try:
            return fits(rq.spec.capacity, dev.capacity, self.cache.capacity_used.get(dev.id), allocating)
        except CapacityError as e:
            what = dev.name if short else f"{dev.driver}/{dev.pool}/{dev.name}"
            raise AllocationError(f"claim {self.claims[rq.claim].key}, request {rq.spec.name}: checking capacity "
                                  f"for device {what}: {e}") from None

    def _consumed(self, rq: _Req, dev: Device) -> dict[str, Any]:
        try:
            return consumed_amounts(rq.spec.capacity, dev.capacity)
        except CapacityError as e:
            raise AllocationError(f"claim {self.claims[rq.claim].key}, request {rq.spec.name}: computing consumed "
                                  f"capacity for device {dev.driver}/{dev.pool}/{dev.name}: {e}") from None

    # ------------------------------------------------------------------ the search
    def _simple(self, rq: _Req, nd: NodeDevices, node: str, labels: Mapping[str, str]) -> Picked | None:
        """First fit: without counters, whether a device fits does not depend on the others
        picked for the one request; with counters, for a request of one device (the search's
        first device whose counters last, in the same order and with the same checks)."""
        in_use = self.cache.allocated
        want = rq.spec.count
        got = []
        tolerations = rq.spec.tolerations
        counters = self.counters if nd.counters else None
        if counters is not None:
            counters.consumed.clear()
        shared = self.cache.shared
        for dev, sl, pool in nd.devices:
            if dev.id in in_use or not self._selectable(rq, dev):
                continue
            if sl.per_device_node_selection and not dev.matches_node(node, labels):
                continue
            if not self._fits(rq, dev, None):
                continue
            if counters is not None and dev.counters and not (dev.multi and shared.get(dev.id, 0) > 0):
                if not counters.reserve(pool, dev):
                    continue
                counters.release(pool, dev)  # one device: nothing else of this attempt consumes
            if dev.taints and any(t.prevents_allocation and not any(tol.tolerates(t) for tol in tolerations)
                                  for t in dev.taints):
                continue
            got.append((rq, dev, sl, self._consumed(rq, dev) if dev.multi else None))
            if len(got) == want:
                return Picked([got], {(0, 0): 0})
        if nd.any_invalid:
            raise NodeAllocationError("invalid resource pools were encountered")
        return None

    def allocate(self, node_name: str, labels: Mapping[str, str], deadline: float | None = None) -> Picked | None:
        """The first solution on the node, or None; AllocationError for invalid input,
        NodeAllocationError when the node's pools are invalid, AllocationTimeout when
        ``time.monotonic()`` passes ``deadline`` during the search (checked at every step, as
        upstream's allocateOne checks its context)."""
        if self.error is not None:
            raise AllocationError(self.error)
        nd = node_devices(self.cache, node_name, labels)
        if self.simple is not None and (not nd.counters or self.simple.spec.count == 1):
            return self._simple(self.simple, nd, node_name, labels)
        cache = self.cache
        in_use = cache.allocated
        claims = self.claims
        reqs = self.reqs
        taking: dict[DeviceID, set[int]] = {}
        shares: dict[DeviceID, int] = {}  # this attempt's shares of allowMultipleAllocations devices
        allocating: dict[DeviceID, dict[str, Any]] = {}  # ... and the capacity they consume
        counters = self.counters
        counters.consumed.clear()
        results: list[list[tuple]] = [[] for _ in claims]
        chosen: dict[tuple[int, int], int] = {}
        cons: list[list[list[Any]]] = [[[c, None, 0] for c in claim.constraints] for claim in claims]  # [constraint, value, n]
        devices = nd.devices

        def node_ok(dev: Device, sl: ResourceSlice) -> bool:
            return not sl.per_device_node_selection or dev.matches_node(node_name, labels)

        # All-mode requests: their devices, fixed per node
        for per_claim in reqs:
            for alts in per_claim:
                for rq in alts:
                    if rq.spec.mode == "All":
                        for p in nd.pools:
                            if p.incomplete:
                                raise AllocationError(
                                    f"claim {claims[rq.claim].key}, request {rq.name}: asks for all devices, but "
                                    f"resource pool {p.driver}/{p.name} is currently being updated")
                            if p.invalid:
                                raise AllocationError(
                                    f"claim {claims[rq.claim].key}, request {rq.name}: asks for all devices, but "
                                    f"resource pool {p.driver}/{p.name} is currently invalid")
                        rq.all_devices = [(d, s, p) for d, s, p in devices if self._selectable(rq, d)
                                          and node_ok(d, s) and self._fits_static(rq, d)]

        def attr_ok(ci: int, rq: _Req, dev: Device) -> list | None:
            """Add ``dev`` to the claim's constraints; the list of entries touched, or None."""
            touched: list[list[Any]] = []
            for entry in cons[ci]:
                c = entry[0]
                if c.requests and rq.base not in c.requests and (not rq.sub or rq.name not in c.requests):
                    continue
                attr = c.match_attribute or c.distinct_attribute
                v = dev.attributes.get(attr)
                if v is None or v[0] == "unknown":
                    _undo(touched)
                    return None
                if c.match_attribute:
                    if entry[2] and entry[1] != v:
                        _undo(touched)
                        return None
                    if not entry[2]:
                        entry[1] = v
                else:  # distinctAttribute: values tracked as a list
                    if entry[1] is None:
                        entry[1] = []
                    if v in entry[1]:
                        _undo(touched)
                        return None
                    entry[1].append(v)
                entry[2] += 1
                touched.append(entry)
            return touched

        def _undo(touched: list) -> None:
            for entry in touched:
                entry[2] -= 1
                if entry[0].distinct_attribute:
                    entry[1].pop()
                elif entry[2] == 0:
                    entry[1] = None

        def usable(ci: int, rq: _Req, dev: Device) -> bool:
            did = dev.id
            if rq.spec.admin_access:
                if ci in taking.get(did, ()):
                    return False
            elif did in taking or in_use.get(did, 0) > 0:
                return False
            return True

        def tainted(rq: _Req, dev: Device) -> bool:
            for t in dev.taints:
                if t.prevents_allocation and not any(tol.tolerates(t) for tol in rq.spec.tolerations):
                    return True
            return False

        def take(ci: int, rq: _Req, dev: Device, sl: ResourceSlice, pool: Pool) -> tuple[str, Any]:
            """upstream allocateDevice: ("", undo token) or (why not, None)."""
            did = dev.id
            reserved = False
            if dev.counters and not (dev.multi and (cache.shared.get(did, 0) > 0 or shares.get(did, 0) > 0)):
                if not counters.reserve(pool, dev):
                    return "counters", None
                reserved = True
            if tainted(rq, dev):
                if reserved:
                    counters.release(pool, dev)
                return "taint", None
            touched = attr_ok(ci, rq, dev)
            if touched is None:
                if reserved:
                    counters.release(pool, dev)
                return "constraint", None
            consumed = None
            if dev.multi:
                if not self._fits(rq, dev, allocating.get(did)):
                    _undo(touched)
                    if reserved:
                        counters.release(pool, dev)
                    return "capacity", None
                consumed = self._consumed(rq, dev)
                shares[did] = shares.get(did, 0) + 1
                acc = allocating.setdefault(did, {})
                for n, q in consumed.items():
                    acc[n] = acc.get(n, 0) + q[0]
            else:
                taking.setdefault(did, set()).add(ci)
            results[ci].append((rq, dev, sl, consumed))
            return "", (touched, reserved, pool)

        def release(ci: int, dev: Device, token: tuple) -> None:
            touched, reserved, pool = token
            rq, _, _, consumed = results[ci].pop()
            did = dev.id
            if consumed is not None:
                acc = allocating[did]
                for n, q in consumed.items():
                    acc[n] -= q[0]
                shares[did] -= 1
                if not shares[did]:
                    del shares[did]
                    del allocating[did]
            else:
                s = taking[did]
                s.discard(ci)
                if not s:
                    del taking[did]
            _undo(touched)
            if reserved:
                counters.release(pool, dev)

        def solve(ci: int, ri: int) -> bool:
            if deadline is not None and time.monotonic() > deadline:
                raise AllocationTimeout()
            if ci == len(claims):
                return True
            if ri == len(reqs[ci]):
                return solve(ci + 1, 0)
            alts = reqs[ci][ri]
            for si, rq in enumerate(alts):
                if rq.spec.mode == "All":
                    if not rq.all_devices:
                        continue
                    if len(results[ci]) + len(rq.all_devices) > MAX_RESULTS:
                        continue
                    ok = place_all(ci, ri, rq, 0)
                else:
                    if len(results[ci]) + rq.spec.count > MAX_RESULTS:
                        continue
                    ok = place(ci, ri, rq, 0, 0)
                if ok:
                    chosen[(ci, ri)] = si
                    return True
            return False

        def place_all(ci: int, ri: int, rq: _Req, k: int) -> bool:
            if k == len(rq.all_devices):
                return solve(ci, ri + 1)
            dev, sl, pool = rq.all_devices[k]
            if not usable(ci, rq, dev):
                return False
            why, token = take(ci, rq, dev, sl, pool)
            if why == "constraint":
                raise AllocationError(f"claim {claims[ci].key}, request {rq.spec.name}: cannot add device "
                                      f"{dev.driver}/{dev.pool}/{dev.name} because a claim constraint would "
                                      "not be satisfied")
            if why:
                return False
            if place_all(ci, ri, rq, k + 1):
                return True
            release(ci, dev, token)
            return False

        def place(ci: int, ri: int, rq: _Req, k: int, start: int) -> bool:
            if k == rq.spec.count:
                return solve(ci, ri + 1)
            if deadline is not None and time.monotonic() > deadline:
                raise AllocationTimeout()
            for pos in range(start, len(devices)):
                dev, sl, pool = devices[pos]
                if not usable(ci, rq, dev) or not self._selectable(rq, dev) or not node_ok(dev, sl):
                    continue
                if not self._fits(rq, dev, allocating.get(dev.id)):
                    continue
                why, token = take(ci, rq, dev, sl, pool)
                if why:
                    continue
                if place(ci, ri, rq, k + 1, pos + 1):
                    return True
                release(ci, dev, token)
            return False

        if not solve(0, 0):
            if nd.any_invalid:
                raise NodeAllocationError("invalid resource pools were encountered")
            return None
        return Picked([list(r) for r in results], dict(chosen))

    def _fits_static(self, rq: _Req, dev: Device) -> bool:
        """All mode: the device's capacity alone (nothing allocated) must fit the request."""
        if not dev.capacity and not rq.spec.capacity:
            return True
        try:
            return fits(rq.spec.capacity, dev.capacity, None, None)
        except CapacityError as e:
            raise AllocationError(f"claim {self.claims[rq.claim].key}, request {rq.spec.name}: checking capacity "
                                  f"for device {dev.name}: {e}") from None

    def results(self, picked: Picked, node_name: str) -> list[Allocation]:
        """The allocations ``picked`` stands for, per claim (status.allocation's values)."""
        return [self._result(ci, node_name, picked.picks[ci], picked.chosen) for ci in range(len(self.claims))]

    def sub_indices(self, picked: Picked, ci: int) -> list[int]:
        return [picked.chosen[(ci, ri)] for ri, alts in enumerate(self.reqs[ci]) if alts and alts[0].sub]

    # ------------------------------------------------------------------ results
    def _result(self, ci: int, node_name: str, picked: list, chosen: dict) -> Allocation:
        claim = self.claims[ci]
        out = []
        for rq, dev, _, consumed in picked:
            r: dict[str, Any] = {"request": rq.name, "driver": dev.driver, "pool": dev.pool, "device": dev.name}
            if rq.spec.admin_access:
                r["adminAccess"] = True
            if rq.spec.raw_tolerations:
                r["tolerations"] = list(rq.spec.raw_tolerations)
            if consumed is not None:  # a share of an allowMultipleAllocations device
                r["shareID"] = str(uuid.uuid4())
                if consumed:
                    r["consumedCapacity"] = {n: canonical(q) for n, q in consumed.items()}
            if dev.binding_conditions:  # the device's, for PreBind to wait on (binding_conditions.py)
                r["bindingConditions"] = list(dev.binding_conditions)
            if dev.binding_failure_conditions:
                r["bindingFailureConditions"] = list(dev.binding_failure_conditions)
            out.append(r)
        used = [self.reqs[ci][ri][chosen[(ci, ri)]] for ri in range(len(self.reqs[ci]))]
        all_names = {rq.name for rq in used}
        config: list[dict[str, Any]] = []
        seen: dict[str, list[dict]] = {}
        for rq in used:
            if rq.cls is None:
                continue
            if rq.cls.name in seen:
                for e in seen[rq.cls.name]:
                    e["requests"].append(rq.name)
                continue
            seen[rq.cls.name] = []
            for c in rq.cls.config:
                e = {"source": "FromClass", "requests": [rq.name], **{k: v for k, v in c.items() if k != "requests"}}
                seen[rq.cls.name].append(e)
                config.append(e)
        for c in claim.config:
            names = list(c.get("requests") or [])
            if names and not any(n in names or n.split("/")[0] in names for n in all_names):
                continue
            config.append({"source": "FromClaim", "requests": names,
                           **{k: v for k, v in c.items() if k != "requests"}})
        for e in config:
            if e["requests"] and set(e["requests"]) >= all_names:
                e["requests"] = []
        result: dict[str, Any] = {"devices": {"results": out}}
        if config:
            result["devices"]["config"] = config
        sel = _node_selector(node_name, [(d, s) for _, d, s, _ in picked])
        if sel is not None:
            result["nodeSelector"] = sel
        subs = [chosen[(ci, ri)] for ri, alts in enumerate(self.reqs[ci]) if alts and alts[0].sub]
        return Allocation(result, subs)


def first_available_score(claim: ResourceClaim, sub_index: list[int] | None = None) -> int:
    """upstream Score: sum over firstAvailable requests of 8 - the chosen subrequest's index,
    from ``sub_index`` (a fresh allocation) or the claim's own allocation results."""
    if sub_index is not None:
        return sum(FIRST_AVAILABLE_MAX - i for i in sub_index)
    total = 0
    names = {}
    for r in claim.requests:
        for i, s in enumerate(r.first_available):
            names[f"{r.name}/{s.name}"] = i
    seen = set()
    for res in claim.results():
        req = str(res.get("request") or "")
        if req in names and req.split("/")[0] not in seen:
            seen.add(req.split("/")[0])
            total += FIRST_AVAILABLE_MAX - names[req]
    return total
