"""The resource pools a node can allocate from, in the allocator's search order, and the shared
counters of partitionable devices (upstream ``structured/internal/incubating/pools_incubating.go``
and the counter half of ``allocator_incubating.go``; DRAPartitionableDevices, beta and on).

A pool is ``(driver, pool name)``; only its highest generation counts. Slices are relevant to a
node by ``nodeName``, ``allNodes``, ``nodeSelector`` or, with ``perDeviceNodeSelection``, when
one device's own selection matches (each device is checked again when it is considered).
Incomplete pools (fewer slices than ``resourceSliceCount``) and invalid ones (duplicate device
names, duplicate counter set names, a ``consumesCounters`` entry naming a counter set or a
counter that does not exist) are never allocated from.

Shared counters (``sharedCounters``) live in slices of their own, possibly not published for the
node, so a pool's counter sets are read from every slice of the pool at its generation. A device
that consumes counters is allocated only while, in every counter set of its pool, the counters
left (the sets' values minus what allocated devices of the pool consume, in-flight allocations
included) cover what this attempt's picks consume (``Counters``). A device with
``allowMultipleAllocations`` that already has a share consumes its counters once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Mapping

from .cache import DraCache
from .objects import Device, ResourceSlice

CounterSets = dict[str, dict[str, Decimal]]  # counter set -> counter -> value


@dataclass(slots=True)
class Pool:
    driver: str
    name: str
    incomplete: bool
    invalid: bool
    binding: bool  # has a device with bindingConditions: searched last
    slices: list[ResourceSlice]  # the device slices relevant to the node, by name
    counter_sets: CounterSets = field(default_factory=dict)
    all_devices: list[Device] = field(default_factory=list)  # every device of the pool at its generation
    reason: str = ""  # why it is invalid


@dataclass(slots=True)
class NodeDevices:
    pools: list[Pool]
    devices: list[tuple[Device, ResourceSlice, Pool]]  # usable pools only, in search order
    any_invalid: bool
    counters: bool = False  # some usable device consumes counters


def node_devices(cache: DraCache, node_name: str, labels: Mapping[str, str]) -> NodeDevices:
    """The node's pools and devices in search order (memoized per slice version and labels)."""
    memo = cache.node_memo
    hit = memo.get(node_name)
    if hit is not None and hit[0] == cache.slice_version and hit[1] is labels:
        return hit[2]
    by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in cache.slices_for_node(node_name):
        if not s.relevant_for(node_name, labels):
            continue
        by_pool.setdefault((s.driver, s.pool), []).append(s)
    pools = []
    for (driver, pname), slices in by_pool.items():
        gen = max(s.generation for s in slices)
        gens = cache.pool_generations(driver, pname)
        if gens and max(gens) > gen:
            continue  # obsolete: a newer generation exists elsewhere
        slices = sorted((s for s in slices if s.generation == gen), key=lambda s: s.name)
        complete = gens.get(gen, 0) == (slices[0].slice_count or 0)
        pools.append(_build(cache, driver, pname, gen, slices, not complete))
    pools.sort(key=lambda p: (p.binding, p.driver, p.name))
    devices = [(d, s, p) for p in pools if not (p.incomplete or p.invalid) for s in p.slices for d in s.devices]
    out = NodeDevices(pools, devices, any(p.invalid for p in pools), any(d.counters for d, _, _ in devices))
    memo[node_name] = (cache.slice_version, labels, out)
    return out


def _build(cache: DraCache, driver: str, pname: str, gen: int, slices: list[ResourceSlice],
           incomplete: bool) -> Pool:
    device_slices = [s for s in slices if not s.shared_counters]
    pool = Pool(driver, pname, incomplete, False, False, device_slices)
    if incomplete:
        return pool  # (upstream: no slices, so never "with binding conditions")
    seen: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in seen:
                pool.invalid, pool.reason = True, f"duplicate device name {d.name}"
                return pool
            seen.add(d.name)
    every = [s for s in cache.pool_slices(driver, pname) if s.generation == gen]
    if not any(s.shared_counters for s in every) and not any(d.counters for s in every for d in s.devices):
        pool.binding = any(d.binding_conditions for s in device_slices for d in s.devices)
        return pool  # no partitionable devices: nothing more to check
    for s in sorted(every, key=lambda s: s.name):
        for name, counters in s.shared_counters:
            if name in pool.counter_sets:
                pool.invalid, pool.reason = True, f"duplicate counter set name {name}"
                return pool
            pool.counter_sets[name] = counters
    pool.all_devices = [d for s in every if not s.shared_counters for d in s.devices]
    for d in pool.all_devices:
        for set_name, consumes in d.counters:
            cs = pool.counter_sets.get(set_name)
            if cs is None:
                pool.invalid, pool.reason = True, f"counter set {set_name} not found"
                return pool
            for c, _ in consumes:
                if c not in cs:
                    pool.invalid, pool.reason = True, f"counter {c} not found in counter set {set_name}"
                    return pool
    pool.binding = any(d.binding_conditions for s in device_slices for d in s.devices)
    return pool


class Counters:
    """One allocation attempt's view of shared counters: what is left per pool (computed once per
    pool and Allocator, as upstream's ``availableCounters``) and what this attempt's picks consume."""

    def __init__(self, cache: DraCache) -> None:
        self.cache = cache
        self.available: dict[tuple[str, str], CounterSets] = {}
        self.consumed: dict[tuple[str, str], CounterSets] = {}

    def _available(self, pool: Pool) -> CounterSets:
        key = (pool.driver, pool.name)
        got = self.available.get(key)
        if got is None:
            got = {n: dict(cs) for n, cs in pool.counter_sets.items()}
            in_use = self.cache.in_use
            for d in pool.all_devices:
                if not d.counters or not in_use(d.id):
                    continue
                for set_name, counters in d.counters:
                    cs = got.get(set_name)
                    if cs is None:
                        continue
                    for c, v in counters:
                        if c in cs:
                            cs[c] -= v  # may go negative: then nothing is left
            self.available[key] = got
        return got

    def reserve(self, pool: Pool, dev: Device) -> bool:
        """Add ``dev``'s consumption; False (and nothing added) when some counter of the pool
        would be exceeded."""
        avail = self._available(pool)
        mine = self.consumed.setdefault((pool.driver, pool.name), {})
        self._add(mine, dev, 1)
        for set_name, cs in avail.items():
            used = mine.get(set_name, {})
            for c, v in cs.items():
                if v < used.get(c, 0):
                    self._add(mine, dev, -1)
                    return False
        return True

    def release(self, pool: Pool, dev: Device) -> None:
        self._add(self.consumed[(pool.driver, pool.name)], dev, -1)

    @staticmethod
    def _add(mine: CounterSets, dev: Device, sign: int) -> None:
        for set_name, counters in dev.counters:
            cs = mine.setdefault(set_name, {})
            for c, v in counters:
                cs[c] = cs.get(c, Decimal(0)) + sign * v


def node_selector(node_name: str, picked: list[tuple[Device, ResourceSlice]]) -> dict | None:
    """upstream createNodeSelector: the node itself when a device is node-local (the slice's, or
    with perDeviceNodeSelection the device's own nodeName) or binds to it, else the one-term
    selectors merged, else None (usable from every node)."""
    exprs: list = []
    fields: list = []
    for d, s in picked:
        per_device = s.per_device_node_selection
        if (d.node_name if per_device else s.node_name) or d.binds_to_node:
            return {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
        raw_sel = d.raw_node_selector if per_device else (s.raw_node_selector if s.node_selector is not None else None)
        raw = (raw_sel or {}).get("nodeSelectorTerms") or []
        if len(raw) == 1:
            for e in raw[0].get("matchFields") or []:
                if e not in fields:
                    fields.append(e)
            for e in raw[0].get("matchExpressions") or []:
                if e not in exprs:
                    exprs.append(e)
    if not exprs and not fields:
        return None
    term: dict[str, Any] = {}
    if exprs:
        term["matchExpressions"] = exprs
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}
