"""Candidate changes for a pod that DynamicResources (DRA) blocks before any node is looked at:

- ``CreateDeviceClass`` (Cluster): a request of one of the pod's claims names a DeviceClass that
  does not exist (PreFilter: ``request R: device class C does not exist``). The class is created
  selecting the devices of one driver that publishes ResourceSlices (``device.driver == "D"``,
  one candidate per driver, the drivers with the most slices first): applied literally, the
  patch's object is the class that was simulated. Simulated on an overlay of the DRA cache (a
  copy holding the class; the live cache is never changed) read by copies of the chain's
  plugins (``dra_chain``).
- ``DropResourceClaim`` (Pod): the pod's claims that block it, removed from
  ``spec.resourceClaims`` and from every container's ``resources.claims``: a claim that does not
  exist (``resourceClaimName``), one a template has not produced yet (no
  ``status.resourceClaimStatuses`` entry, or no such claim), one being deleted or not owned by the
  pod, and a claim asking for a DeviceClass that does not exist. The pod then gets no devices for
  those claims (the change says so). Upstream holds a pod whose claim is missing at PreEnqueue:
  it never reaches a scheduling cycle, and the search sees it through PreFilter, which resolves
  the claims alike.

Creating a missing ResourceClaim is not offered: its spec lives in a ResourceClaimTemplate or in
the user's manifest, neither of which the scheduler reads.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from collections import Counter
from itertools import islice
from typing import Any, Mapping

from ..framework.cycle.chain import Chain
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..plugins.dynamicresources.cache import DraCache
from ..plugins.dynamicresources.objects import DeviceClass, ResourceClaim
from .cluster_changes import ClusterCandidate
from .patch import pointer
from .pod_changes import Candidate, Caps
from .probe import Verdicts
from .result import CREATE_DEVICE_CLASS, DROP_RESOURCE_CLAIM

DRA = "DynamicResources"
API_VERSION = "resource.k8s.io/v1"
MAX_SLICES_READ = 4096  # slices read to find the drivers
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _name(s: str) -> bool:
    """A DNS subdomain (a DeviceClass's name, a driver's)."""
    return len(s) <= 253 and _DNS_SUBDOMAIN.match(s) is not None


# ---------------------------------------------------------------------------------- the overlay
class _DraHandle:
    """A plugin's handle that answers ``dra()`` with an overlay cache, everything else as the
    plugin's own handle."""

    def __init__(self, base: Any, cache: DraCache) -> None:
        self._base, self._cache = base, cache

    def dra(self) -> DraCache:
        return self._cache

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


def dra_overlay(cache: DraCache, classes: tuple[DeviceClass, ...] = ()) -> DraCache:
    """A DraCache to simulate on: the live one's slices, claims and counts shared (read only: no
    Reserve runs in a simulation), its own class table holding ``classes`` and its own memo."""
    c = copy.copy(cache)
    c.classes = dict(cache.classes)
    for cl in classes:
        c.classes[cl.name] = cl
    c.node_memo = dict(cache.node_memo)
    return c


def dra_chain(chain: Chain, cache: DraCache) -> Chain:
    """The chain with every plugin copied (shallow) to read ``cache`` as its DRA cache; the
    round-robin start is shared (Probe.place puts it back)."""
    copies: dict[int, Any] = {}

    def cp(p: Any) -> Any:
        if p is None:
            return None
        q = copies.get(id(p))
        if q is None:
            q = copy.copy(p)
            if getattr(p, "handle", None) is not None:
                q.handle = _DraHandle(p.handle, cache)
            copies[id(p)] = q
        return q

    return dataclasses.replace(
        chain, plugins=[cp(p) for p in chain.plugins], queue_sort=cp(chain.queue_sort),
        pre_filter=[cp(p) for p in chain.pre_filter], filter=[cp(p) for p in chain.filter],
        post_filter=[cp(p) for p in chain.post_filter], pre_score=[cp(p) for p in chain.pre_score],
        score=[(cp(p), w) for p, w in chain.score], points={k: [cp(p) for p in v] for k, v in chain.points.items()},
        describers=[cp(p) for p in chain.describers], group_cycle=cp(chain.group_cycle))


def dra_cache(chain: Chain) -> DraCache | None:
    """The DRA cache the chain's DynamicResources reads (None without the plugin)."""
    p = chain.plugin(DRA)
    handle = getattr(p, "handle", None)
    cache = handle.dra() if handle is not None else None
    return cache if isinstance(cache, DraCache) else None


# ---------------------------------------------------------------------------------- what blocks
def _claim_problem(pod: PodInfo, cache: DraCache, name: str, claim_name: str,
                   template: str) -> tuple[str, ResourceClaim | None]:
    """Why the pod's claim ``name`` blocks it at PreEnqueue ("" when it does not), as
    dynamic_resources.resolve_claims decides, and the claim when it exists."""
    ns = pod.namespace
    owned = False
    if claim_name:
        cn = claim_name
    elif template:
        cn = pod.claim_statuses.get(name, "")
        if name not in pod.claim_statuses:
            return f"its ResourceClaim from template {template} has not been created", None
        if not cn:
            return "", None  # intentionally not created: nothing to allocate
        owned = True
    else:
        return "it names neither a claim nor a template", None
    claim = cache.claim(ns, cn)
    if claim is None:
        what = f"from template {template} " if template else ""
        return f"ResourceClaim {ns}/{cn} {what}does not exist", None
    if claim.deleting:
        return f"ResourceClaim {ns}/{cn} is being deleted", claim
    if owned and claim.controller_uid != pod.uid:
        return f"ResourceClaim {ns}/{cn} was not created for this pod", claim
    return "", claim


def _missing_classes(claim: ResourceClaim, cache: DraCache) -> list[str]:
    """The DeviceClasses an unallocated claim's requests name that do not exist, in order."""
    if claim.allocation is not None:
        return []
    out: list[str] = []
    for r in claim.requests:
        subs = (r.exactly,) if r.exactly is not None else r.first_available
        for s in subs:
            if s is not None and s.class_name and cache.device_class(s.class_name) is None \
                    and s.class_name not in out:
                out.append(s.class_name)
    return out


def _blocked(pod: PodInfo, cache: DraCache, caps: Caps) -> tuple[list[tuple[str, str, int]], list[str]]:
    """The pod's blocking claims ((name, why, device requests of the claim: 0 when it does not
    exist)) and the missing DeviceClasses its claims name."""
    claims: list[tuple[str, str, int]] = []
    classes: list[str] = []
    for name, claim_name, template in pod.resource_claims[: caps.pod_lists]:
        why, claim = _claim_problem(pod, cache, name, claim_name, template)
        if why:
            claims.append((name, why, len(claim.requests) if claim is not None else 0))
            continue
        missing = _missing_classes(claim, cache) if claim is not None else []
        if missing and claim is not None:
            claims.append((name, f"its DeviceClass{'es' if len(missing) > 1 else ''} "
                                 f"{', '.join(missing)} do{'' if len(missing) > 1 else 'es'} not exist",
                           len(claim.requests)))
            classes += [c for c in missing if c not in classes]
    return claims, classes


def _dra_rejected(v: Verdicts) -> bool:
    return v.prefilter is not None and v.prefilter.plugin == DRA


# ---------------------------------------------------------------------------------- DropResourceClaim
def _list(v: Any) -> list:
    return v if isinstance(v, list) else []


def _dict(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def drop_claim_ops(raw: Mapping[str, Any], names: set[str], caps: Caps) -> list[dict[str, Any]] | None:
    """JSON Patch removing the pod's claims ``names`` from spec.resourceClaims and from every
    container's (and init container's) resources.claims; None when the lists exceed the caps."""
    spec = _dict(raw.get("spec"))
    ops: list[dict[str, Any]] = []
    for kind in ("initContainers", "containers"):
        cs = _list(spec.get(kind))
        if len(cs) > caps.items:
            return None
        for ci, c in enumerate(cs):
            refs = _list(_dict(_dict(c).get("resources")).get("claims"))
            if len(refs) > caps.items:
                return None
            for j in reversed(range(len(refs))):
                if _dict(refs[j]).get("name") in names:
                    ops.append({"op": "remove", "path": pointer("spec", kind, ci, "resources", "claims", j)})
    rcs = _list(spec.get("resourceClaims"))
    for i in reversed(range(len(rcs))):
        if _dict(rcs[i]).get("name") in names:
            ops.append({"op": "remove", "path": pointer("spec", "resourceClaims", i)})
    return ops


def drop_resource_claims(pod: PodInfo, raw: Mapping[str, Any], chain: Chain, v: Verdicts,
                         caps: Caps) -> list[Candidate]:
    """When DynamicResources rejected the pod at PreFilter: its blocking claims dropped (all of
    them: one left would block it still)."""
    cache = dra_cache(chain)
    if cache is None or not _dra_rejected(v) or not pod.resource_claims:
        return []
    blocked, _ = _blocked(pod, cache, caps)
    if not blocked:
        return []
    ops = drop_claim_ops(raw, {name for name, _, _ in blocked}, caps)
    if not ops:
        return []
    words = "; ".join(f"{name} ({why})" for name, why, _ in blocked[: caps.items])
    change = (f"drop resource claim{'s' if len(blocked) > 1 else ''} {words} from the pod and its containers: "
              f"the pod gets no devices for {'them' if len(blocked) > 1 else 'it'}")
    # 1 per claim and 1 per device request it had: the devices the pod goes without
    return [Candidate(DROP_RESOURCE_CLAIM, change, ops, float(sum(1 + n for _, _, n in blocked)))]


# ---------------------------------------------------------------------------------- CreateDeviceClass
def _drivers(cache: DraCache, caps: Caps) -> list[str]:
    """The drivers publishing slices (at most MAX_SLICES_READ read), the most slices first."""
    count: Counter = Counter(s.driver for s in islice(iter(cache.slices.values()), MAX_SLICES_READ))
    out = [d for d, _ in sorted(count.items(), key=lambda x: (-x[1], x[0]))
           if isinstance(d, str) and _name(d)]
    return out[: caps.per_kind]


def class_object(name: str, driver: str) -> dict[str, Any]:
    """The DeviceClass ``name`` selecting every device of ``driver``, as the API takes it."""
    return {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def _same(table: NodeTable) -> NodeTable:
    return table  # a class changes no node


def _class_chain(chain: Chain, cache: DraCache, objects: tuple[dict[str, Any], ...]) -> Chain:
    return dra_chain(chain, dra_overlay(cache, tuple(DeviceClass.from_dict(o) for o in objects)))


def create_device_classes(pod: PodInfo, table: NodeTable, chain: Chain, v: Verdicts,
                          caps: Caps) -> list[ClusterCandidate]:
    """When the pod's claims name DeviceClasses that do not exist (and nothing else of DRA
    blocks it at PreFilter): per driver, every missing class created selecting its devices."""
    cache = dra_cache(chain)
    if cache is None or not _dra_rejected(v) or not pod.resource_claims:
        return []
    blocked, classes = _blocked(pod, cache, caps)
    if not classes or any(not why.startswith("its DeviceClass") for _, why, _ in blocked):
        return []
    classes = classes[: caps.items]
    if not all(_name(c) for c in classes):  # not a name the API would take: nothing to create
        return []
    out = []
    for driver in _drivers(cache, caps):
        objects = tuple(class_object(c, driver) for c in classes)
        ops = [{"op": "create", "kind": "DeviceClass", "name": o["metadata"]["name"], "value": o} for o in objects]
        which = (f"DeviceClass {classes[0]}" if len(classes) == 1 else
                 f"DeviceClasses {', '.join(classes)}, each")
        change = (f'create {which} selecting the devices of driver {driver} (selector device.driver == "{driver}")')
        out.append(ClusterCandidate(CREATE_DEVICE_CLASS, change, ops, float(len(classes)),
                                    build=functools.partial(_same, table),
                                    chain=functools.partial(_class_chain, chain, cache, objects)))
    return out
