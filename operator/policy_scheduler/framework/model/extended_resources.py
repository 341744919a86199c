"""Extended resources backed by DRA (DRAExtendedResource, GA in v1.37): which resource names a
DeviceClass serves, as upstream's ``deviceclass/extendedresourcecache`` resolves them. Shared by
NodeResourcesFit (which leaves such a resource to DynamicResources on a node that does not
advertise it) and DynamicResources (which allocates devices for it).

A DeviceClass serves ``spec.extendedResourceName`` and always the implicit
``deviceclass.resource.kubernetes.io/<class>``. Two classes naming the same resource: the newer
``creationTimestamp`` wins, on a tie the lower name. The classes are replayed in the order the
informer delivered them, as upstream's cache applies its adds (so a class added after a newer
one of the same resource name is left out, its implicit name included, as upstream's).

The DRA cache is read duck-typed: ``classes`` (name -> object with ``name``,
``extended_resource_name``, ``created``) and ``slice_version`` (bumped on every class change).
"""

from __future__ import annotations

import weakref
from typing import Any

from .resources import is_extended_resource_name

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"

_MAPS: "weakref.WeakKeyDictionary[Any, tuple[int, dict[str, Any]]]" = weakref.WeakKeyDictionary()


def is_dra_extended_resource_name(name: str) -> bool:
    """upstream schedutil.IsDRAExtendedResourceName."""
    return is_extended_resource_name(name) or name.startswith(IMPLICIT_PREFIX)


def class_map(cache: Any) -> dict[str, Any]:
    """Resource name -> the DeviceClass backing it (upstream ExtendedResourceCache.GetDeviceClass),
    rebuilt when a class changed."""
    hit = _MAPS.get(cache)
    version = cache.slice_version
    if hit is not None and hit[0] == version:
        return hit[1]
    out: dict[str, Any] = {}
    for c in cache.classes.values():
        if c.extended_resource_name:
            holder = out.get(c.extended_resource_name)
            if holder is not None and (c.created < holder.created
                                       or (c.created == holder.created and c.name >= holder.name)):
                continue
            out[c.extended_resource_name] = c
        out[IMPLICIT_PREFIX + c.name] = c
    _MAPS[cache] = (version, out)
    return out


def backed_requests(requests: dict[str, int], cache: Any) -> frozenset[str]:
    """The names among ``requests`` (non-zero) that a DeviceClass backs."""
    names = [n for n, q in requests.items() if q > 0 and is_dra_extended_resource_name(n)]
    if not names or not cache.classes:
        return frozenset()
    cmap = class_map(cache)
    return frozenset(n for n in names if n in cmap)
