"""The cache DynamicResources reads: DeviceClasses, ResourceSlices and ResourceClaims (objects.py).

``DraCache`` holds them as the informers last saw them, with the index the allocator needs at
decision time and the scheduler's own in-flight state laid over them:

- ``slices_for_node(name)``: the slices published for that node plus those for several nodes
  (``allNodes`` or a ``nodeSelector``), so a decision never walks every slice of the cluster;
- ``allocated``: how many claims hold each device (``(driver, pool, device)``), kept up to date on
  every claim change; admin-access results do not count (upstream's allocated-state rule);
- pending allocations (upstream's ``SignalClaimPendingAllocation``): a claim allocated in memory
  by Reserve, until PreBind wrote it or Unreserve dropped it; its devices count as allocated;
- assumed claims (upstream's assume cache): the object PreBind wrote, read instead of the
  informer's until the informer delivers that version or a newer one;
- DeviceTaintRules (taint_rules.py): their taints laid over the matching devices of every slice
  (upstream's patched slices); a rule's change is a ResourceSlice update of each slice whose
  devices' taints it changed.

Pure: no client, no clock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

from ...framework.events import ActionType, ClusterEvent, Resource
from ...framework.model.versions import resource_version_newer
from .objects import (_PARSERS, _RESOURCES, DEVICE_TAINT_RULES, RESOURCE_CLAIMS, RESOURCE_SLICES, DeviceClass,
                      DeviceID, ResourceClaim, ResourceSlice)
from .taint_rules import DeviceTaintRule, patch_slice

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
        self.node_memo: dict[str, tuple] = {}  # allocator.node_devices' per-node lists
        self.taint_rules: dict[str, DeviceTaintRule] = {}

    def __len__(self) -> int:
        return len(self.slices) + len(self._api_claims) + len(self.classes) + len(self.taint_rules)

    # ------------------------------------------------------------------ informer side
    def apply(self, kind: str, event: str, body: Mapping[str, Any]) -> list[tuple[ClusterEvent, Any, Any]]:
        if kind == DEVICE_TAINT_RULES and event in ("ADDED", "MODIFIED", "DELETED"):
            return self._apply_rule(event, DeviceTaintRule.from_dict(body))
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
            if self.taint_rules:
                patch_slice(new, self.taint_rules.values())
        store[new.name] = new
        self._slices_changed()
        return [(ClusterEvent(res, ActionType.ADD if old is None else ActionType.UPDATE), old, new)]

    def _apply_rule(self, event: str, rule: DeviceTaintRule) -> list[tuple[ClusterEvent, Any, Any]]:
        """A DeviceTaintRule added, changed or deleted: every slice's devices patched again;
        the slices whose taints changed are reported as updated (upstream's tracker)."""
        old = self.taint_rules.get(rule.name)
        if event == "DELETED":
            if old is None:
                return []
            del self.taint_rules[rule.name]
        else:
            if old is not None and old.resource_version == rule.resource_version and rule.resource_version:
                return []
            self.taint_rules[rule.name] = rule
        if old is not None and event != "DELETED" and (old.selector, old.taint) == (rule.selector, rule.taint):
            return []
        rules = list(self.taint_rules.values())
        changed = [s for s in self.slices.values() if patch_slice(s, rules)]
        if not changed:
            return []
        self._slices_changed()
        ev = ClusterEvent(Resource.RESOURCE_SLICE, ActionType.UPDATE)
        return [(ev, s, s) for s in changed]

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
