"""DynamicResources (upstream plugins/dynamicresources/dynamicresources.go, v1.37): devices of
ResourceClaims (DRA, resource.k8s.io/v1) allocated with structured parameters.

PreEnqueue: every claim of ``spec.resourceClaims`` exists (a template's claim named in
``status.resourceClaimStatuses``), is not being deleted and, when made from a template, is
controlled by the pod; else the pod waits with upstream's text, and nothing is written to it.

PreFilter: the same resolution (UnschedulableAndUnresolvable); a pod without claims is Skipped.
An allocated claim restricts the pod to its allocation's nodeSelector; an unallocated one must
not be in flight for another pod (``resource claim <ns>/<c> is in the process of being
allocated``) and its classes must exist. An Allocator (allocator.py) is prepared for the
unallocated claims.

Filter, per node: the allocator's first solution there (``cannot allocate all claims`` when there
is none), and every allocated claim available on the node (``resourceclaim not available on the
node``); all UnschedulableAndUnresolvable, so DefaultPreemption never evicts for devices. Invalid
input (CEL errors, an ``All`` request over an incomplete pool) is an Error.

Score: 8 - i per ``firstAvailable`` request whose subrequest i was chosen, normalized to 100.

Reserve: the node's allocation is held in memory (DraCache.pending): no other pod gets those
devices and a claim shared with another pod waits until PreBind wrote it. Unreserve drops it and
removes the pod from ``reservedFor`` if it got there.

PreBind: per claim not yet reserved for the pod (from the cache, re-read after a conflict), add the finalizer
``resource.kubernetes.io/delete-protection`` (update), then write ``status.allocation`` (with
``allocationTimestamp``) and append the pod to ``status.reservedFor`` (one status update), retried
on conflicts. A claim deleted or allocated elsewhere in the meantime is an Error. Then, when a
device allocated to the pod has binding conditions, it waits for them (binding_conditions.py);
Filter holds a claim whose binding failed or timed out unavailable, so PostFilter frees it.

PostFilter: when no node fits, the first unavailable claim reserved for nobody or only for this
pod is deallocated (``deallocation of ResourceClaim completed``), so the next attempt may
allocate it afresh. After a rejection by an earlier PreFilter, upstream's PostFilter finds no
state and answers the Error ``not found``, which ends the PostFilter run (no preemption) and
is appended to the FitError message: so is ours.

Extended resources backed by DRA (extended.py): the pod's special claim is allocated after its
own claims, created in PreBind (then allocated and reserved like the others) and recorded in the
pod's ``status.extendedResourceClaimStatus``; Unreserve deletes it, PostFilter deletes a stale one.

Filter timeout: one node's allocation searching longer than ``filterTimeoutSeconds`` (10 s) fails
the attempt with the Error ``node <node>: timed out trying to allocate devices``, as upstream.

Not covered: the binding-conditions wait metric.
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any

import numpy as np
from pydantic import Field

from ...framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ...framework.interface import (DEVICE_ALLOCATION, CycleState, EnqueueExtensions, FilterPlugin, FilterResult,
                                    PluginArgs, PostFilterPlugin, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin,
                                    PreScorePlugin, ReservePlugin, ScorePlugin, default_normalize_score)
from ...framework.model.nodetable import NodeTable
from ...framework.model.podinfo import PodInfo
from ...framework.status import Code, Status
from . import binding_conditions as bc
from .allocator import (STATE_KEY, AllocationError, AllocationTimeout, Allocator, DraState, NodeAllocationError,
                        first_available_score)
from . import extended
from .binding_conditions import DEFAULT_BINDING_TIMEOUT
from .cache import DraCache
from .extended import EXT_STATE_KEY, ExtState
from .objects import FINALIZER, ResourceClaim

NAME = "DynamicResources"
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
DEALLOCATED = "deallocation of ResourceClaim completed"
DEFAULT_FILTER_TIMEOUT = 10.0  # upstream DynamicResourcesArgs.FilterTimeout default
CONFLICT_RETRIES = 5  # upstream retry.DefaultRetry: 5 steps


class DynamicResourcesArgs(PluginArgs):
    """upstream DynamicResourcesArgs. ``filterTimeoutSeconds`` (upstream ``filterTimeout``, 10 s,
    ``DRASchedulerFilterTimeout``; 0: none): how long one node's allocation may search before
    Filter gives up with an Error (the pod goes to backoff).
    ``bindingTimeoutSeconds`` (upstream ``bindingTimeout``, 600 s, at least 1 s): how long PreBind
    waits for a device's binding conditions (binding_conditions.py)."""

    filter_timeout_seconds: float = Field(default=DEFAULT_FILTER_TIMEOUT, alias="filterTimeoutSeconds", ge=0)
    binding_timeout_seconds: float = Field(default=DEFAULT_BINDING_TIMEOUT, alias="bindingTimeoutSeconds", ge=1)


def claim_path(namespace: str, name: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"


def resolve_claims(pod: PodInfo, cache: DraCache) -> tuple[list[ResourceClaim], str | None]:
    """upstream foreachPodResourceClaim: the pod's claims in spec order, or the first error."""
    out: list[ResourceClaim] = []
    ns = pod.namespace
    for name, claim_name, template in pod.resource_claims:
        owned = False
        if claim_name:
            cn = claim_name
        elif template:
            if name not in pod.claim_statuses:
                return out, f'pod "{ns}/{pod.name}": ResourceClaim not created yet'
            cn = pod.claim_statuses[name]
            if not cn:
                continue  # intentionally not created
            owned = True
        else:
            return out, f'pod "{ns}/{pod.name}", spec.resourceClaim "{name}": none of the supported fields are set'
        claim = cache.claim(ns, cn)
        if claim is None:
            return out, f'could not find ResourceClaim "{ns}/{cn}"'
        if claim.deleting:
            return out, f'resourceclaim "{cn}" is being deleted'
        if owned and claim.controller_uid != pod.uid:
            return out, f"ResourceClaim {ns}/{cn} was not created for Pod {ns}/{pod.name} (Pod is not owner)"
        out.append(claim)
    return out, None


class DynamicResources(PreEnqueuePlugin, PreFilterPlugin, FilterPlugin, PostFilterPlugin, PreScorePlugin,
                       ScorePlugin, ReservePlugin, PreBindPlugin, EnqueueExtensions):
    NAME = NAME
    Args = DynamicResourcesArgs
    ALLOCATES_CLAIMS = True  # a chain without such a Filter refuses pods with claims (schedule.py)

    def _cache(self) -> DraCache:
        return self.handle.dra()

    @property
    def filter_timeout(self) -> float:
        """Seconds one node's allocation may take in Filter (0: no limit)."""
        args = self.args if isinstance(self.args, DynamicResourcesArgs) else None
        return args.filter_timeout_seconds if args is not None else DEFAULT_FILTER_TIMEOUT

    @property
    def binding_timeout(self) -> float:
        args = self.args if isinstance(self.args, DynamicResourcesArgs) else None
        return args.binding_timeout_seconds if args is not None else DEFAULT_BINDING_TIMEOUT

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL
                                              | ActionType.UPDATE_NODE_ALLOCATABLE)),
            ClusterEventWithHint(ClusterEvent(Resource.RESOURCE_CLAIM, ActionType.ADD | ActionType.UPDATE
                                              | ActionType.DELETE), self.claim_hint),
            ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM),
                                 self.pod_claims_hint),
            ClusterEventWithHint(ClusterEvent(Resource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE)),
            ClusterEventWithHint(ClusterEvent(Resource.RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE)),
        ]

    def pod_claims_hint(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        target = new if isinstance(new, PodInfo) else pod
        _, err = resolve_claims(target, self._cache())
        return QueueingHint.SKIP if err else QueueingHint.QUEUE

    def claim_hint(self, pod: PodInfo, old: ResourceClaim | None, new: ResourceClaim | None) -> QueueingHint:
        """upstream isSchedulableAfterClaimChange."""
        if new is None:
            if old is None:
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE if old.allocation else QueueingHint.SKIP
        claims, err = resolve_claims(pod, self._cache())
        if err:
            return QueueingHint.SKIP
        if old is not None and old.allocation and not new.allocation:
            return QueueingHint.QUEUE  # devices freed: any pod may fit now
        if not any(c.uid == new.uid for c in claims):
            return QueueingHint.SKIP
        if old is None:
            return QueueingHint.QUEUE
        if (old.raw.get("status") or {}) == (new.raw.get("status") or {}):
            return QueueingHint.SKIP
        return QueueingHint.QUEUE

    # ------------------------------------------------------------------ PreEnqueue
    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.resource_claims:
            return Status.success()
        _, err = resolve_claims(pod, self._cache())
        return Status.unschedulable(err, unresolvable=True) if err else Status.success()

    # ------------------------------------------------------------------ PreFilter
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        st = DraState([], [], None)
        state.write(STATE_KEY, st)  # upstream writes its state first: PostFilter finds it from here on
        cache = self._cache()
        claims: list[ResourceClaim] = []
        if pod.resource_claims:
            claims, err = resolve_claims(pod, cache)
            if err:
                return Status.unschedulable(err, unresolvable=True), None
        ext = extended.prepare(pod, cache) if cache.classes else None  # the special claim, after the user's
        if not claims and ext is None:
            return Status.skip(), None
        if ext is not None:
            state.write(EXT_STATE_KEY, ext)
        to_allocate = []
        for i, c in enumerate(claims):
            if c.allocation is not None:
                continue
            if c.uid in cache.pending:
                return Status.unschedulable(f"resource claim {c.key} is in the process of being allocated",
                                            unresolvable=True), None
            for r in c.requests:
                if r.exactly is not None:
                    checks = [(r.name, r.exactly.class_name)]
                elif r.first_available:
                    checks = [(f"{r.name}/{s.name}", s.class_name) for s in r.first_available]
                else:
                    return Status.unschedulable(f"resource claim {c.key}, request {r.name}: unknown request type",
                                                unresolvable=True), None
                for rname, cls in checks:
                    if not cls:
                        return Status.error(f"request {rname}: unsupported request type"), None
                    if cache.device_class(cls) is None:
                        return Status.unschedulable(f"request {rname}: device class {cls} does not exist",
                                                    unresolvable=True), None
            to_allocate.append(i)
        st.claims, st.to_allocate = claims, to_allocate
        st.allocator = Allocator(cache, [claims[i] for i in to_allocate]) if to_allocate else None
        return Status.success(), None

    # ------------------------------------------------------------------ Filter
    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        st: DraState | None = state.read(STATE_KEY)
        n = len(rows)
        if st is None:
            return FilterResult.all_pass(n)
        ext: ExtState | None = state.read(EXT_STATE_KEY)
        passed = np.ones(n, dtype=bool)
        reasons: dict[str, np.ndarray] = {}
        specs = nodes.specs
        allocated = [(i, c.allocation_node_selector) for i, c in enumerate(st.claims) if c.allocation is not None
                     and c.allocation_node_selector is not None]
        # an allocated claim whose binding failed or timed out is available nowhere (PostFilter frees it)
        now = bc.wall_clock()
        unbound = [i for i, c in enumerate(st.claims) if c.allocation is not None
                   and bc.unavailable(c, self.binding_timeout, now)]
        timeout = self.filter_timeout
        for k, row in enumerate(rows.tolist()):
            spec = specs[row]
            allocator = st.allocator
            if ext is not None:  # upstream filterExtendedResources, before the claims
                variant, reason = extended.node_variant(ext, pod, spec.name, spec.allocatable, bool(st.claims))
                if reason is None and variant is None and not st.claims:
                    continue  # the device plugin serves it all here
                if reason is not None:
                    passed[k] = False
                    reasons.setdefault(reason, np.zeros(n, dtype=bool))[k] = True
                    continue
                if variant is not None:
                    allocator = extended.allocator_for(ext, self._cache(), [st.claims[i] for i in st.to_allocate], variant)
            unavailable = [i for i, sel in allocated if not sel.matches(spec.labels, spec.name)]
            if unbound:
                unavailable = sorted(set(unavailable).union(unbound))
            reason = None
            if allocator is not None:
                try:
                    allocs = allocator.allocate(spec.name, spec.labels,
                                                None if timeout <= 0 else time.monotonic() + timeout)
                except NodeAllocationError as e:
                    allocs, reason = None, str(e)
                except AllocationError as e:
                    return FilterResult(np.zeros(n, dtype=bool), error=Status.error(str(e)))
                except AllocationTimeout:
                    # upstream: potentially transient, so Error (backoff), naming the node
                    return FilterResult(np.zeros(n, dtype=bool),
                                        error=Status.error(f"node {spec.name}: timed out trying to allocate devices"))
                if allocs is None:
                    reason = reason or CANNOT_ALLOCATE
                elif not unavailable:
                    st.by_node[spec.name] = allocs
            if reason is None and unavailable:
                st.unavailable.update(unavailable)
                reason = NOT_AVAILABLE
            if reason is not None:
                passed[k] = False
                reasons.setdefault(reason, np.zeros(n, dtype=bool))[k] = True
        return FilterResult(passed, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, list(reasons.items()))

    # ------------------------------------------------------------------ PostFilter
    def post_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, statuses) -> tuple[Status, str | None]:
        st: DraState | None = state.read(STATE_KEY)
        if st is None:  # an earlier PreFilter rejected the pod: upstream's getStateData error
            return Status.error("not found"), None
        ext: ExtState | None = state.read(EXT_STATE_KEY)
        if not st.claims and ext is None:
            return Status(Code.UNSCHEDULABLE), None
        cache = self._cache()
        for i in sorted(st.unavailable):
            claim = cache.claim(st.claims[i].namespace, st.claims[i].name)
            if claim is None or claim.allocation is None:
                continue
            if not claim.reserved_for or claim.reserved_uids() == {pod.uid}:
                self.handle.spawn(self._deallocate(claim))
                return Status.unschedulable(DEALLOCATED), None
        if ext is not None and ext.stale:  # left by an earlier cycle: deleted, the next one starts anew
            self.handle.spawn(extended.delete_claim(self.handle.api_request, ext.claim, FINALIZER))
            return Status.unschedulable(extended.DELETED), None
        return Status(Code.UNSCHEDULABLE), None

    async def _deallocate(self, claim: ResourceClaim) -> None:
        """upstream deallocateOrDeletePodClaims: clear reservedFor, allocation and devices."""
        body = dict(claim.raw)
        body["status"] = {k: v for k, v in (body.get("status") or {}).items()
                          if k not in ("allocation", "reservedFor", "devices")}
        resp = await self.handle.api_request("PUT", claim_path(claim.namespace, claim.name) + "/status", body)
        if isinstance(resp, dict):
            self._cache().assume(ResourceClaim.from_dict(resp))

    # ------------------------------------------------------------------ Score
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> Status:
        """Skip unless a claim has a firstAvailable request: every score would be 0 (upstream
        scores 0 everywhere then, which normalizes to 0: the same totals)."""
        st: DraState | None = state.read(STATE_KEY)
        if st is None or not any(r.first_available for c in st.claims for r in c.requests):
            return Status.skip()
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        st: DraState | None = state.read(STATE_KEY)
        out = np.zeros(len(rows), dtype=np.int64)
        if st is None:
            return out
        base = sum(first_available_score(c) for c in st.claims if c.allocation is not None)
        for k, row in enumerate(rows.tolist()):
            allocs = st.by_node.get(nodes.names[row])
            if allocs is None or st.allocator is None:  # (by_node is filled by the allocator)
                continue
            out[k] = base + sum(first_available_score(st.claims[i], st.allocator.sub_indices(allocs, j))
                                for j, i in enumerate(st.to_allocate))
        return out

    def normalize_score(self, state, pod, nodes, rows, scores):
        return default_normalize_score(scores, reverse=False)

    # ------------------------------------------------------------------ Reserve
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        st: DraState | None = state.read(STATE_KEY)
        ext: ExtState | None = state.read(EXT_STATE_KEY)
        if st is None or (not st.claims and ext is None):
            return Status.success()
        if ext is not None:
            ext.allocation = None
            variant = ext.variants.get(node_name)
            if variant is not None:  # the node's claim, allocated in memory as the others
                picked = st.by_node.get(node_name)
                if picked is None:
                    return Status.error("claim allocation not found for node")
                result = extended.allocator_for(ext, self._cache(), [st.claims[i] for i in st.to_allocate], variant).results(picked, node_name)[-1].result
                self._cache().add_pending(variant.claim.with_status(result, [], finalizer=True), pod.uid)
                ext.allocation = result
        if not st.to_allocate:  # every claim allocated already (shared): its devices, for explain
            state.write(DEVICE_ALLOCATION, self._devices(st, ext))
            return Status.success()
        picked = st.by_node.get(node_name)
        if picked is None or st.allocator is None:
            return Status.error("claim allocation not found for node")
        allocs = st.allocator.results(picked, node_name)
        if len(allocs) != len(st.to_allocate):
            return Status.error(f"internal error, have {len(allocs)} allocations, {len(st.to_allocate)} claims "
                                f"to allocate, want {len(st.to_allocate)} claims")
        cache = self._cache()
        st.node = node_name
        for i, a in zip(st.to_allocate, allocs):
            claim = st.claims[i]
            cache.add_pending(claim.with_status(a.result, list(claim.reserved_for), finalizer=True), pod.uid)
            st.reserved[i] = a.result
        state.write(DEVICE_ALLOCATION, self._devices(st, ext))
        return Status.success()

    @staticmethod
    def _devices(st: DraState, ext: ExtState | None = None) -> list[dict[str, Any]]:
        """The pod's devices on the chosen node, for the decision annotation (``explain``); the
        special claim's as ``<extended-resources>``, with the resources they serve."""
        out = []
        for i, c in enumerate(st.claims):
            alloc = st.reserved.get(i) or c.allocation or {}
            for r in ((alloc.get("devices") or {}).get("results")) or []:
                out.append({"claim": c.name, "request": r.get("request"),
                            "device": f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}",
                            **({"adminAccess": True} if r.get("adminAccess") else {}),
                            **({"shared": True} if r.get("shareID") else {}),
                            **({"consumedCapacity": r["consumedCapacity"]} if r.get("consumedCapacity") else {})})
        if ext is not None and ext.allocation is not None:  # the special claim last, as upstream's order
            for r in ext.allocation["devices"]["results"]:
                out.append({"claim": extended.SPECIAL_NAME, "request": r.get("request"),
                            "device": f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}",
                            "resources": sorted(ext.resources)})
        return out

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        st: DraState | None = state.read(STATE_KEY)
        if st is None:
            return
        cache = self._cache()
        for c in st.claims:
            cache.drop_pending(c.uid, pod.uid)
            cur = cache.claim(c.namespace, c.name)
            if cur is not None and cur.allocation is not None and pod.uid in cur.reserved_uids():
                self.handle.spawn(self._unreserve_claim(cur, pod.uid))
        st.reserved.clear()
        ext: ExtState | None = state.read(EXT_STATE_KEY)
        if ext is not None:  # upstream unreserveExtendedResourceClaim: a claim PreBind created is deleted
            cache.drop_pending(ext.claim.uid, pod.uid)
            ext.allocation = None
            if ext.created is not None:
                cur = cache.claim(ext.created.namespace, ext.created.name) or ext.created
                self.handle.spawn(extended.delete_claim(self.handle.api_request, cur, FINALIZER))
                ext.created = None

    async def _unreserve_claim(self, claim: ResourceClaim, pod_uid: str) -> None:
        """Remove the pod from the claim's reservedFor (upstream's strategic-merge patch; here a
        read and a status update, retried on conflicts). Errors are only logged, as upstream."""
        path = claim_path(claim.namespace, claim.name)
        for _ in range(CONFLICT_RETRIES):
            body = await self.handle.api_request("GET", path)
            if not isinstance(body, dict) or (body.get("metadata") or {}).get("uid") != claim.uid:
                return
            status = dict(body.get("status") or {})
            kept = [r for r in status.get("reservedFor") or [] if r.get("uid") != pod_uid]
            if len(kept) == len(status.get("reservedFor") or []):
                return
            status["reservedFor"] = kept
            try:
                resp = await self.handle.api_request("PUT", path + "/status", dict(body, status=status))
            except Exception as e:  # noqa: BLE001
                if getattr(e, "status", None) == 409:
                    continue
                raise
            if isinstance(resp, dict):
                self._cache().assume(ResourceClaim.from_dict(resp))
            return

    # ------------------------------------------------------------------ PreBind
    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """upstream PreBindPreFlight: Success when the pod has any claim (PreBind has work),
        Skip otherwise."""
        st: DraState | None = state.read(STATE_KEY)
        if st is None or not (st.claims or state.read(EXT_STATE_KEY) is not None):
            return Status.skip()
        return Status.success()

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        st: DraState | None = state.read(STATE_KEY)
        if st is None:
            return Status.success()
        cache = self._cache()
        for i, c in enumerate(st.claims):
            cur = cache.claim(c.namespace, c.name) or c
            if pod.uid in cur.reserved_uids() and i not in st.reserved:
                continue
            allocation = st.reserved.get(i)
            try:
                written = await self._bind_claim(c, pod, allocation)
            except _BindError as e:
                return Status.error(str(e))
            except Exception as e:  # noqa: BLE001 - the request's failure is the status
                what = "add allocation and reservation to claim" if allocation else "add reservation to claim"
                return Status.error(f"{what} {c.key}: {e or type(e).__name__}")
            cache.assume(written)
            if allocation is not None:
                cache.drop_pending(c.uid)
                st.reserved.pop(i, None)
        ext: ExtState | None = state.read(EXT_STATE_KEY)
        claims = [cache.claim(c.namespace, c.name) or c for c in st.claims]
        if ext is not None and ext.allocation is not None:  # the special claim last, as upstream's order
            err = await extended.bind(ext, pod, node_name, self.handle.api_request, self._bind_claim, cache,
                                      _BindError)
            if err:
                return Status.error(err)
            if ext.created is not None:
                claims.append(cache.claim(ext.created.namespace, ext.created.name) or ext.created)
        if not bc.has_binding_conditions(claims):
            return Status.success()
        # upstream: a Normal event, then a poll every 5 s until every device's binding conditions
        # are True (or one fails)
        self.handle.pod_normal_event(pod, bc.PENDING_REASON, f"waiting for binding conditions for device on node {node_name}")
        err = await bc.wait_for_binding(claims, lambda c: cache.claim(c.namespace, c.name), self.binding_timeout,
                                         bc.POLL_INTERVAL)
        return Status.error(err) if err else Status.success()

    async def _bind_claim(self, claim: ResourceClaim, pod: PodInfo, allocation: dict | None) -> ResourceClaim:
        path = claim_path(claim.namespace, claim.name)
        api = self.handle.api_request
        cached = self._cache().claim(claim.namespace, claim.name)
        for attempt in range(CONFLICT_RETRIES):
            # the first attempt writes over the cached object (a stale one fails with a conflict);
            # every retry reads the claim again, as upstream's conflict loop
            if attempt == 0 and cached is not None and cached.uid == claim.uid and cached.raw.get("metadata"):
                body = cached.raw
            else:
                body = await api("GET", path)
            meta = dict(body.get("metadata") or {})
            if meta.get("uid") != claim.uid or meta.get("deletionTimestamp"):
                raise _BindError(f"claim {claim.key} got deleted in the meantime")
            status = dict(body.get("status") or {})
            if allocation is not None and status.get("allocation"):
                raise _BindError(f"claim {claim.key} got allocated elsewhere in the meantime")
            if allocation is None and not status.get("allocation"):  # binding conditions on (upstream's gates)
                raise _BindError(f"claim {claim.key} got deallocated elsewhere in the meantime")
            try:
                fins = list(meta.get("finalizers") or [])
                # only with an allocation of ours (upstream): "if we were interrupted in the past, it
                # might already be set"
                if allocation is not None and FINALIZER not in fins:
                    meta["finalizers"] = fins + [FINALIZER]
                    body = await api("PUT", path, dict(body, metadata=meta))
                status = dict(body.get("status") or {})
                alloc = dict(allocation if allocation is not None else status["allocation"])
                if not alloc.get("allocationTimestamp"):  # set once (an allocated claim's: the API refuses it)
                    alloc["allocationTimestamp"] = _now()
                if allocation is not None or alloc != status["allocation"]:
                    status["allocation"] = alloc
                reserved = list(status.get("reservedFor") or [])
                if not any(r.get("uid") == pod.uid for r in reserved):
                    reserved.append({"resource": "pods", "name": pod.name, "uid": pod.uid})
                status["reservedFor"] = reserved
                resp = await api("PUT", path + "/status", dict(body, status=status))
            except Exception as e:  # noqa: BLE001
                if getattr(e, "status", None) == 409 and attempt + 1 < CONFLICT_RETRIES:
                    continue
                raise
            return ResourceClaim.from_dict(resp)
        raise _BindError(f"claim {claim.key}: too many conflicts")  # pragma: no cover - loop returns or raises


class _BindError(Exception):
    pass


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


PLUGIN = DynamicResources
