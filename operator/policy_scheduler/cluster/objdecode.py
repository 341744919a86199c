"""LIST pages and WATCH lines of Pods and Nodes, decoded without their ``metadata.managedFields``.

managedFields is two thirds of a pod's JSON as the API server sends it, and nothing here reads it
(kube-scheduler's informers drop it after decoding). Decoding it anyway cost 13 µs of a pod's
20 µs of JSON, and most of the start-up's LIST of 150,000 bound pods. msgspec reads the document
against a schema of the object's top level and its ObjectMeta: a field not in the schema (only
managedFields: Pods and Nodes have no other top-level field than the five below) is stepped over
without being built; every value of a field in the schema is kept as it is (``Any``), so the
objects the handlers get are the dicts ``safejson.loads`` gives, less managedFields.

Anything the schema does not take (metadata that is not an object, a page whose items are not
objects, a document nested deeper than msgspec reads, invalid JSON) is decoded again by
``safejson.loads``, which reads every document the API server can send: one hostile object costs
its page the fast path, never an object. A watch ERROR event (a Status, not an object) too.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from ..safejson import loads

# ObjectMeta's fields (k8s.io/apimachinery meta/v1), managedFields left out
META_FIELDS = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
               "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
               "ownerReferences", "finalizers")
OBJECT_FIELDS = ("apiVersion", "kind", "spec", "status")  # with metadata, a Pod's and a Node's top level

_Meta = msgspec.defstruct("_Meta", [(f, Any, UNSET) for f in META_FIELDS])
_Object = msgspec.defstruct("_Object", [("metadata", _Meta, UNSET), *((f, Any, UNSET) for f in OBJECT_FIELDS)])
_Page = msgspec.defstruct("_Page", [("kind", Any, UNSET), ("apiVersion", Any, UNSET), ("metadata", Any, UNSET),
                                    ("items", list[_Object] | None, UNSET)])
_Event = msgspec.defstruct("_Event", [("type", Any, UNSET), ("object", _Object, UNSET)])
_PAGE = msgspec.json.Decoder(_Page)
_EVENT = msgspec.json.Decoder(_Event)
_FALLBACK = (msgspec.MsgspecError, RecursionError, ValueError, TypeError)


def _object(o: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    m = o.metadata
    if m is not UNSET:
        out["metadata"] = {f: v for f in META_FIELDS if (v := getattr(m, f)) is not UNSET}
    for f in OBJECT_FIELDS:
        v = getattr(o, f)
        if v is not UNSET:
            out[f] = v
    return out


def page(raw: bytes) -> Any:
    """A LIST answer: ``{"kind", "apiVersion", "metadata", "items": [objects]}`` as it came, the
    items without managedFields."""
    try:
        p = _PAGE.decode(raw)
    except _FALLBACK:
        return loads(raw)
    out: dict[str, Any] = {}
    for f in ("kind", "apiVersion", "metadata"):
        v = getattr(p, f)
        if v is not UNSET:
            out[f] = v
    if p.items is not UNSET:
        out["items"] = None if p.items is None else [_object(o) for o in p.items]
    return out


def event(raw: bytes) -> Any:
    """A WATCH line: ``{"type", "object"}``, the object without managedFields; an ERROR event
    whole (its object is a Status)."""
    try:
        ev = _EVENT.decode(raw)
    except _FALLBACK:
        return loads(raw)
    if ev.type == "ERROR":
        return loads(raw)
    out: dict[str, Any] = {}
    if ev.type is not UNSET:
        out["type"] = ev.type
    if ev.object is not UNSET:
        out["object"] = _object(ev.object)
    return out
