"""Extended resources backed by DRA (DRAExtendedResource, GA in v1.37): which resource names a
DeviceClass serves, as upstream's ``deviceclass/extendedresourcecache`` resolves them. Shared by
NodeResourcesFit (which leaves such a resource to DynamicResources on a node that does not
advertise it) and DynamicResources (which allocates devices for it).

A DeviceClass serves ``spec.extendedResourceName`` and always the implicit
``deviceclass.resource.kubernetes.io/<class>``. Two classes naming the same resource: the newer
``creationTimestamp`` wins, on a tie the lower name. Class changes are applied as upstream's
cache applies its events, quirks included: a class added after a newer one of the same resource
name is left out (its implicit name too), an update that keeps the resource name changes
nothing, and deleting a class drops its resource name even when another class also names it.

The DRA cache is read duck-typed: ``classes`` (name -> object with ``name``,
``extended_resource_name``, ``created``) and ``slice_version`` (bumped on every class change).
"""

from __future__ import annotations

import weakref
from typing import Any

from .resources import is_extended_resource_name

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"

# cache -> (its version, the classes as last seen, the mapping)
_MAPS: "weakref.WeakKeyDictionary[Any, tuple[int, dict[str, Any], dict[str, Any]]]" = weakref.WeakKeyDictionary()


def is_dra_extended_resource_name(name: str) -> bool:
    """upstream schedutil.IsDRAExtendedResourceName."""
    return is_extended_resource_name(name) or name.startswith(IMPLICIT_PREFIX)


def class_map(cache: Any) -> dict[str, Any]:
    """Resource name -> the DeviceClass backing it (upstream ExtendedResourceCache.GetDeviceClass).
    The class changes since the last call are applied as upstream's cache applies its events
    (deletions, then additions and updates in the informer's order)."""
    hit = _MAPS.get(cache)
    version = cache.slice_version
    if hit is not None and hit[0] == version:
        return hit[2]
    prev, out = (hit[1], dict(hit[2])) if hit is not None else ({}, {})
    cur = dict(cache.classes)
    for name, old in prev.items():
        if name not in cur:
            _remove(out, old)
    for name, c in cur.items():
        old = prev.get(name)
        if old is not c:
            _update(out, c, old)
    _MAPS[cache] = (version, cur, out)
    return out


def _update(out: dict[str, Any], new: Any, old: Any) -> None:
    """upstream updateResourceName2class."""
    if new.extended_resource_name:
        holder = out.get(new.extended_resource_name)
        if holder is not None and (new.created < holder.created
                                   or (new.created == holder.created and new.name >= holder.name)):
            return
    if old is not None:
        _remove(out, old)
    if new.extended_resource_name:
        out[new.extended_resource_name] = new
    out[IMPLICIT_PREFIX + new.name] = new


def _remove(out: dict[str, Any], c: Any) -> None:
    """upstream removeResourceName2class (the resource name goes, whichever class held it)."""
    out.pop(IMPLICIT_PREFIX + c.name, None)
    if c.extended_resource_name:
        out.pop(c.extended_resource_name, None)


def backed_requests(requests: dict[str, int], cache: Any) -> frozenset[str]:
    """The names among ``requests`` (non-zero) that a DeviceClass backs."""
    names = [n for n, q in requests.items() if q > 0 and is_dra_extended_resource_name(n)]
    if not names or not cache.classes:
        return frozenset()
    cmap = class_map(cache)
    return frozenset(n for n in names if n in cmap)
