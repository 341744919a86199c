"""Extended resources backed by DRA (upstream dynamicresources/extendeddynamicresources.go and
dynamic-resource-allocation/deviceclass/extendedresourcecache, v1.37; DRAExtendedResource, GA).

A pod that asks for an extended resource (``example.com/gpu: 1``) which a DeviceClass backs gets
its devices through a ResourceClaim the scheduler creates:

- **the mapping** (``framework/model/extended_resources.py``, shared with NodeResourcesFit): a
  DeviceClass serves ``spec.extendedResourceName`` and always
  ``deviceclass.resource.kubernetes.io/<class>``;
- **PreFilter** (``prepare``): when the pod's requests (PodRequests) name a mapped resource, the
  pod's special claim is the claim annotated ``resource.kubernetes.io/extended-resource-claim:
  "true"`` controlled by the pod (stale, left by an earlier cycle), else an in-memory one named
  ``<extended-resources>`` with a temporary UID and no requests;
- **Filter** (``node_variant``): a stale claim (it has requests) is ``cannot schedule extended
  resource claim`` on every node; a resource the node advertises (allocatable > 0) is left to
  the device plugin, one it has at 0 or not at all and a class backs goes to DRA, anything else
  is ``cannot fit resource``. The node's variant of the claim has one request per (container,
  resource) needing devices (``requests_and_mappings``, upstream's order and names);
- **PreBind**: the variant is created (``claim_body``: ``generateName <pod>-extended-resources-``,
  the pod as controlling owner, the annotation), allocated and reserved like any claim, and the
  pod's ``status.extendedResourceClaimStatus`` records the container -> request mappings;
- **PostFilter / Unreserve**: a claim of this kind that exists in the API is deleted (its
  finalizer removed first): ``deletion of ResourceClaim completed``.

Pure: no client, no clock (the temporary UID is random, as upstream's).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Mapping

from ...framework.model.podinfo import PodInfo
from ...framework.model.quantity import QuantityError, parse_quantity
from ...framework.model.extended_resources import class_map, is_dra_extended_resource_name
from .allocator import Allocator
from .cache import DraCache
from .objects import DeviceClass, ResourceClaim

SPECIAL_NAME = "<extended-resources>"  # deliberately not a valid object name
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
CANNOT_SCHEDULE = "cannot schedule extended resource claim"
CANNOT_FIT = "cannot fit resource"
DELETED = "deletion of ResourceClaim completed"
EXT_STATE_KEY = "DynamicResources/extended"  # CycleState: ExtState
MAX_CONTAINERS = 1024  # containers read per pod (the API allows far fewer)


def mapped_requests(pod: PodInfo, cmap: Mapping[str, DeviceClass]) -> dict[str, int]:
    """The pod's non-zero requests of DRA extended resource names, when one of them is backed by
    a class (upstream hasDeviceClassMappedExtendedResource); else empty."""
    reqs = {n: q for n, q in pod.requests.items() if q > 0 and is_dra_extended_resource_name(n)}
    return reqs if any(n in cmap for n in reqs) else {}


def find_claim(pod: PodInfo, cache: DraCache) -> ResourceClaim | None:
    """upstream findExtendedResourceClaim: the annotated claim the pod controls."""
    for c in cache.claims():
        if c.annotations.get(ANNOTATION) != "true" or c.namespace != pod.namespace:
            continue
        refs = ((c.raw.get("metadata") or {}).get("ownerReferences")) or []
        if any(isinstance(o, Mapping) and o.get("controller") is True and o.get("name") == pod.name
               and o.get("uid") == pod.uid for o in refs):
            return c
    return None


def in_memory_claim(pod: PodInfo) -> ResourceClaim:
    """The claim PreFilter makes when none exists: no requests, a temporary UID."""
    return ResourceClaim.from_dict(claim_body(pod, name=SPECIAL_NAME, uid=str(uuid.uuid4())))


def claim_body(pod: PodInfo, requests: list[dict[str, Any]] | None = None, name: str = "",
               uid: str = "") -> dict[str, Any]:
    """The special claim as upstream builds it (for PreBind's create: no name, no UID)."""
    meta: dict[str, Any] = {"namespace": pod.namespace, "generateName": f"{pod.name}-extended-resources-",
                            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                                                 "uid": pod.uid, "controller": True}],
                            "annotations": {ANNOTATION: "true"}}
    if name:
        meta["name"] = name
    if uid:
        meta["uid"] = uid
    spec: dict[str, Any] = {"devices": {"requests": requests}} if requests else {}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": spec}


# ---------------------------------------------------------------------------- requests
def _int_quantity(q: Any) -> int | None:
    """resource.Quantity.AsInt64: the integer, or None when it is not one."""
    try:
        d = parse_quantity(q)
    except (QuantityError, TypeError, ValueError, ArithmeticError):
        return None
    if d != d.to_integral_value() or abs(d) >= Decimal(2) ** 63:
        return None
    return int(d)


@dataclass(slots=True)
class _Container:
    index: int
    name: str
    requests: Mapping[str, Any]
    short_lived: bool  # an init container that is not a sidecar


def _containers(pod: PodInfo) -> list[_Container]:
    spec = ((pod.raw or {}).get("spec")) or {}
    inits = spec.get("initContainers") or []
    regular = spec.get("containers") or []
    out = []
    for i, c in enumerate((list(inits) + list(regular))[:MAX_CONTAINERS]):
        if not isinstance(c, Mapping):
            continue
        res = c.get("resources")
        reqs = (res.get("requests") if isinstance(res, Mapping) else None) or {}
        out.append(_Container(i, str(c.get("name") or ""), reqs if isinstance(reqs, Mapping) else {},
                              i < len(inits) and c.get("restartPolicy") != "Always"))
    return out


def _request_for(c: _Container, resource: str, cls: str,
                 reusable: list[dict | None]) -> tuple[dict | None, list[dict[str, str]]]:
    """upstream createResourceRequestAndMappings."""
    if resource not in c.requests:
        return None, []
    want = _int_quantity(c.requests[resource])
    if not want:
        return None, []
    mappings = []
    total = 0
    for r in reusable:
        if r is not None:
            total += r["exactly"]["count"]
            mappings.append({"containerName": c.name, "resourceName": resource, "requestName": r["name"]})
            if total >= want:
                return None, mappings
    ridx = sorted(str(k) for k in c.requests).index(resource)
    name = f"container-{c.index}-request-{ridx}"
    req = {"name": name, "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": want - total}}
    mappings.append({"containerName": c.name, "resourceName": resource, "requestName": name})
    return req, mappings


def requests_and_mappings(pod: PodInfo, resources: Mapping[str, int],
                          cmap: Mapping[str, DeviceClass]) -> tuple[list[dict], list[dict[str, str]]]:
    """upstream createRequestsAndMappings: per resource (sorted), one request per long-lived
    container asking for it, and for the short-lived init containers the largest request they
    still need after reusing later long-lived containers' requests; requests sorted by name."""
    containers = _containers(pod)
    requests: list[dict] = []
    mappings: list[dict[str, str]] = []
    for resource in sorted(resources):
        cls = cmap.get(resource)
        if cls is None:
            continue
        long_reqs: list[dict | None] = [None] * len(containers)
        long_maps: list[dict[str, str]] = []
        for k, c in enumerate(containers):
            if not c.short_lived:
                long_reqs[k], m = _request_for(c, resource, cls.name, [])
                long_maps += m
        biggest: dict | None = None
        short_names: set[str] = set()
        short_maps: list[dict[str, str]] = []
        for k, c in enumerate(containers):
            if c.short_lived:
                r, m = _request_for(c, resource, cls.name, long_reqs[k:])
                if r is not None:
                    short_names.add(r["name"])
                    if biggest is None or biggest["exactly"]["count"] < r["exactly"]["count"]:
                        biggest = r
                short_maps += m
        if biggest is not None and len(short_names) > 1:
            short_names.discard(biggest["name"])
            for entry in short_maps:
                if entry["requestName"] in short_names:
                    entry["requestName"] = biggest["name"]
        if biggest is not None:
            requests.append(biggest)
        requests += [r for r in long_reqs if r is not None]
        mappings += long_maps + short_maps
    requests.sort(key=lambda r: r["name"])
    return requests, mappings


# ---------------------------------------------------------------------------- cycle state
@dataclass(slots=True)
class NodeVariant:
    claim: ResourceClaim  # the node's claim: the special one with this node's requests
    mappings: list[dict[str, str]]
    signature: tuple


@dataclass(slots=True)
class ExtState:
    """The pod's special claim for this cycle, what it asks for, and per node its variant
    (None: the device plugin serves everything there)."""

    claim: ResourceClaim
    resources: dict[str, int]  # mapped resource -> the pod's request
    cmap: dict[str, DeviceClass]
    variants: dict[str, NodeVariant | None] = field(default_factory=dict)
    allocators: dict[tuple, Any] = field(default_factory=dict)  # signature -> Allocator
    created: ResourceClaim | None = None  # PreBind's claim in the API (Unreserve deletes it)
    allocation: dict[str, Any] | None = None  # Reserve's allocation of the node's variant

    @property
    def stale(self) -> bool:
        """A claim of an earlier cycle (it exists in the API)."""
        return self.claim.name != SPECIAL_NAME


def prepare(pod: PodInfo, cache: DraCache) -> ExtState | None:
    """upstream preFilterExtendedResources: None when the pod asks for no mapped resource."""
    cmap = class_map(cache)
    if not cmap:
        return None
    resources = mapped_requests(pod, cmap)
    if not resources:
        return None
    return ExtState(find_claim(pod, cache) or in_memory_claim(pod), resources, cmap)


def node_variant(ext: ExtState, pod: PodInfo, node_name: str, allocatable: Mapping[str, int],
                 user_claims: bool = False) -> tuple[NodeVariant | None, str | None]:
    """upstream filterExtendedResources for one node: (its variant or None, a rejection or None).
    Memoized per node for the cycle. A pod with claims of its own gets a variant even when the
    device plugin serves everything on the node: one without requests or mappings, which
    upstream allocates, creates and then fails to record in the pod (PreBind's ``nil or empty
    request mappings`` Error, every attempt), as here."""
    if ext.claim.requests:
        return None, CANNOT_SCHEDULE
    if node_name in ext.variants:
        return ext.variants[node_name], None
    to_dra: dict[str, int] = {}
    for name, q in ext.resources.items():
        have = allocatable.get(name)
        if name in ext.cmap and not have:
            to_dra[name] = q
        elif have is None:
            return None, CANNOT_FIT
    variant = None
    if (to_dra or user_claims) and ext.claim.allocation is None:
        reqs, mappings = requests_and_mappings(pod, to_dra, ext.cmap)
        body = claim_body(pod, reqs, name=ext.claim.name, uid=ext.claim.uid)
        sig = tuple((r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in reqs)
        variant = NodeVariant(ResourceClaim.from_dict(body), mappings, sig)
    ext.variants[node_name] = variant
    return variant, None


# ---------------------------------------------------------------------------- API writes
def claims_path(namespace: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"


async def create_claim(api: Any, pod: PodInfo, variant: NodeVariant) -> ResourceClaim:
    """PreBind's POST of the node's variant (upstream createExtendedResourceClaimInAPI)."""
    reqs = [{"name": r.name, "exactly": {"deviceClassName": r.exactly.class_name, "allocationMode": "ExactCount",
                                         "count": r.exactly.count}}
            for r in variant.claim.requests if r.exactly is not None]
    try:
        got = await api("POST", claims_path(pod.namespace), claim_body(pod, reqs))
    except Exception as e:  # noqa: BLE001 - the request's failure is the error
        raise ExtendedError(f"create claim for extended resources {pod.namespace}/: {e or type(e).__name__}") from None
    if not isinstance(got, Mapping):
        raise ExtendedError(f"create claim for extended resources {pod.namespace}/: unexpected answer")
    return ResourceClaim.from_dict(got)


async def record_in_pod(api: Any, pod: PodInfo, claim_name: str, mappings: list[dict[str, str]]) -> None:
    """upstream patchPodExtendedResourceClaimStatus: the pod's status.extendedResourceClaimStatus."""
    where = f"{pod.namespace}/{pod.name}"
    if not mappings:
        raise ExtendedError(f"nil or empty request mappings, no update of pod {where} ExtendedResourceClaimStatus")
    body = {"status": {"extendedResourceClaimStatus": {"requestMappings": mappings,
                                                       "resourceClaimName": claim_name}}}
    try:
        await api("PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status", body)
    except Exception as e:  # noqa: BLE001
        raise ExtendedError(f"update pod {where} ExtendedResourceClaimStatus: {e or type(e).__name__}") from None


async def delete_claim(api: Any, claim: ResourceClaim, finalizer: str, retries: int = 5) -> None:
    """upstream deleteClaim: remove the finalizer (an update, re-read after a conflict), then
    DELETE (a claim already gone is fine)."""
    path = f"{claims_path(claim.namespace)}/{claim.name}"
    body: Any = claim.raw
    for attempt in range(retries):
        if attempt:
            body = await api("GET", path)
        meta = dict((body or {}).get("metadata") or {})
        fins = [f for f in meta.get("finalizers") or [] if f != finalizer]
        meta["finalizers"] = fins
        try:
            await api("PUT", path, dict(body, metadata=meta))
            break
        except Exception as e:  # noqa: BLE001
            if getattr(e, "status", None) == 409 and attempt + 1 < retries:
                continue
            if getattr(e, "status", None) == 404:
                return
            raise
    try:
        await api("DELETE", path)
    except Exception as e:  # noqa: BLE001
        if getattr(e, "status", None) != 404:
            raise


def allocator_for(ext: ExtState, cache: DraCache, claims: list[ResourceClaim], variant: NodeVariant) -> Allocator:
    """The pod's claims to allocate followed by the node's variant of the special claim (one
    allocator per distinct variant, for the cycle)."""
    got = ext.allocators.get(variant.signature)
    if got is None:
        got = Allocator(cache, claims + [variant.claim])
        ext.allocators[variant.signature] = got
    return got


async def bind(ext: ExtState, pod: PodInfo, node_name: str, api: Any, bind_claim: Any, cache: DraCache,
               bind_error: type[Exception]) -> str | None:
    """upstream bindClaim for the special claim: create it, then ``bind_claim`` (the finalizer,
    the allocation, the reservation), then record it in the pod's status. The Error's text, or
    None."""
    variant = ext.variants.get(node_name)
    if variant is None or ext.allocation is None:
        return f"extended resource claim not found for node {node_name}"
    try:
        # a claim of an earlier attempt without requests (upstream lets it through Filter) is bound as it is
        ext.created = ext.claim if ext.stale else await create_claim(api, pod, variant)
        written = await bind_claim(ext.created, pod, ext.allocation)
    except (ExtendedError, bind_error) as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - the request's failure is the status
        assert ext.created is not None
        return f"add allocation and reservation to claim {ext.created.key}: {e or type(e).__name__}"
    ext.created = written
    cache.assume(written)
    cache.drop_pending(ext.claim.uid)
    try:
        await record_in_pod(api, pod, written.name, variant.mappings)
    except ExtendedError as e:
        return str(e)
    return None


class ExtendedError(Exception):
    """A PreBind step of the special claim failed: the status's Error text."""
