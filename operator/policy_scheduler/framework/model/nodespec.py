"""NodeSpec: the parts of a v1.Node the scheduler reads, parsed as hostile input (unparseable
quantities count as none, status.declaredFeatures bounded)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from .quantity import QuantityError, resource_value
from .taints import Taint

# status.declaredFeatures kept per node: at most this many names (the kubelet declares a few of
# its registry's), each at most MAX_FEATURE_NAME long (the API's limit); the rest are dropped
MAX_DECLARED_FEATURES = 128
MAX_FEATURE_NAME = 253

def declared_features(status: Mapping[str, Any]) -> frozenset[str]:
    """A node's ``status.declaredFeatures``: the strings of the list (anything else, or a list
    that is not one, counts as none), bounded as above; names interned (every node has the same)."""
    v = status.get("declaredFeatures") if isinstance(status, Mapping) else None
    if not isinstance(v, list):
        return frozenset()
    names = (sys.intern(f) for f in v if isinstance(f, str) and len(f) <= MAX_FEATURE_NAME)
    out: set[str] = set()
    for f in names:
        out.add(f)
        if len(out) >= MAX_DECLARED_FEATURES:
            break
    return frozenset(out)


@dataclass(slots=True)
class NodeSpec:
    """The scheduler-relevant parts of a v1.Node."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: dict[str, int] = field(default_factory=dict)
    images: dict[str, int] = field(default_factory=dict)  # every image name -> size in bytes
    declared_features: frozenset[str] = frozenset()  # status.declaredFeatures (NodeDeclaredFeatures)

    @classmethod
    def from_dict(cls, node: Mapping[str, Any]) -> "NodeSpec":
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        alloc: dict[str, int] = {}
        for k, v in (status.get("allocatable") or status.get("capacity") or {}).items():
            try:
                alloc[k] = resource_value(k, v)
            except QuantityError:
                alloc[k] = 0  # an unparseable allocatable counts as none of it
        images: dict[str, int] = {}
        for img in status.get("images") or []:
            size = int(img.get("sizeBytes") or 0)
            for n in img.get("names") or []:
                images[n] = size
        return cls(
            name=str(meta.get("name", "")),
            labels=dict(meta.get("labels") or {}),
            taints=tuple(Taint.parse(t) for t in (spec.get("taints") or [])),
            unschedulable=bool(spec.get("unschedulable", False)),
            allocatable=alloc,
            images=images,
            declared_features=declared_features(status),
        )
