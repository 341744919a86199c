"""Generate the SchedulingPolicy CustomResourceDefinition from the pydantic models.

pydantic emits JSON Schema; Kubernetes wants an OpenAPI v3 *structural* schema: every node typed,
no $ref, nullable instead of a null branch, no titles. The models' size caps become maxItems /
maxLength / maxProperties, so the API server refuses oversized policies itself.

Plugin ``args`` are one schema for every plugin: the union of the built-in plugins' args fields,
their types and size caps only (a field two plugins declare with different types, like
``nodeLabel``, is left untyped), with ``x-kubernetes-preserve-unknown-fields`` on every object, so
that any other field (an out-of-tree plugin's, or a typo) reaches the operator. Values (enums,
ranges, patterns, required fields) are the plugins' to check, in upstream's words, when the chain
is built: the policy is then stored and reported ``Ready=False`` with the field named.

``spec.plugins`` is a list-map keyed by ``name`` (``x-kubernetes-list-type: map``): the API server
refuses a second entry of a name itself, naming it (``spec.plugins[2]: Duplicate value:
{"name":"NodeName"}``). CEL rules (``x-kubernetes-validations``) check
what the schema cannot say: ``disabled`` naming listed (or implicit) plugins, no ``weight`` on
built-in plugins without a Score point.

Of the limits of policy/limits.py the schema carries what the API server can check: every open
object of args (``x-kubernetes-preserve-unknown-fields``) has at most MAX_KEYS fields. Depth, total
size, and the strings and lists of fields no schema types are the operator's to check.
"""

from __future__ import annotations

from typing import Any

import yaml

from .. import SCHEDULER_NAME
from ..framework.interface import ScorePlugin
from ..framework.registry import Registry
from .chain import IMPLICIT_FIRST, IMPLICIT_LAST
from .limits import MAX_KEYS
from .models import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION, SchedulingPolicySpec
from .status import SchedulingPolicyStatus

_DROP = {"title", "default"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        nullable = len(branches) != len(node["anyOf"])
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(branches) == 1:
            one = _structural({**branches[0], **rest}, defs)
            if nullable:
                one["nullable"] = True
            return one
        raise ValueError(f"cannot express anyOf with several non-null branches structurally: {node}")
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in _DROP or k == "$defs":
            continue
        if k == "const":
            out["enum"] = [v]
            continue
        if k in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(v, bool):
            # JSON Schema's numeric form (pydantic gt/lt); the API server's OpenAPI v3.0 schema
            # takes a bound plus a boolean
            out["minimum" if k == "exclusiveMinimum" else "maximum"] = v
            out[k] = True
            continue
        if k == "properties":
            out[k] = {pk: _structural(pv, defs) for pk, pv in v.items()}
        elif k in ("items", "additionalProperties") and isinstance(v, dict):
            out[k] = _structural(v, defs)
        else:
            out[k] = v
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("additionalProperties") is True:
        del out["additionalProperties"]
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("additionalProperties") is False:
        del out["additionalProperties"]
    return out


def _schema(model) -> dict[str, Any]:
    js = model.model_json_schema(by_alias=True, mode="serialization")
    return _structural(js, js.get("$defs", {}))


# ---------------------------------------------------------------------------------------- args
_CONFLICT: dict[str, Any] = {"conflict": True}  # a field two plugins declare differently


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One schema accepting what both accept where they agree: properties merged, constraints
    kept when equal and dropped when not; a different type is a conflict."""
    if a is _CONFLICT or b is _CONFLICT or a.get("type") != b.get("type"):
        return _CONFLICT
    if a == b:
        return a
    out: dict[str, Any] = {}
    for k in list(a) + [k for k in b if k not in a]:
        if k == "properties":
            pa, pb = a.get(k, {}), b.get(k, {})
            out[k] = {n: (_merge(pa[n], pb[n]) if n in pa and n in pb else pa.get(n, pb.get(n)))
                      for n in list(pa) + [n for n in pb if n not in pa]}
        elif k == "items" and k in a and k in b:
            out[k] = _merge(a[k], b[k])
        elif k == "description":
            out[k] = a.get(k, b.get(k))
        elif a.get(k) == b.get(k) or k in ("type", "nullable", "x-kubernetes-preserve-unknown-fields"):
            out[k] = a.get(k, b.get(k))
    return out


# what the args schema keeps of the plugins' schemas: structure, types and size caps
_ARGS_KEYS = {"type", "nullable", "description", "properties", "items", "additionalProperties", "maxItems",
              "maxLength", "maxProperties", "x-kubernetes-preserve-unknown-fields"}


def _open(node: dict[str, Any]) -> dict[str, Any] | None:
    """Args schema clean-up: conflicts dropped (an array whose items conflict goes too), only
    structure, types and caps kept, every object with properties keeps unknown fields."""
    if node is _CONFLICT:
        return None
    out = {k: v for k, v in node.items() if k in _ARGS_KEYS}
    if "properties" in out:
        props = {n: _open(v) for n, v in out["properties"].items()}
        out["properties"] = {n: v for n, v in props.items() if v is not None}
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "items" in out:
        items = _open(out["items"])
        if items is None:
            return None
        out["items"] = items
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _open(out["additionalProperties"]) or {
            "x-kubernetes-preserve-unknown-fields": True}
    return out


def args_schema(registry: Registry) -> dict[str, Any]:
    """The ``args`` schema: the union of the registry's plugins' args (see the module doc)."""
    merged: dict[str, Any] = {"type": "object", "properties": {}}
    for name in registry.names():
        cls = registry.get(name)
        if cls is None or cls.Args is None:
            continue
        merged = _merge(merged, {"type": "object", "properties": _schema(cls.Args).get("properties", {})})
    out = _open(merged) or {"type": "object"}
    out.update({"nullable": True, "x-kubernetes-preserve-unknown-fields": True,
                "description": "Plugin args. The fields of the built-in plugins' args are typed here; each "
                               "plugin validates its own args in full when the chain is built."})
    _cap_open_objects(out)
    return out


def _cap_open_objects(node: dict[str, Any]) -> None:
    """maxProperties (MAX_KEYS, policy/limits.py) on every object of ``node`` that keeps unknown fields."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.get("x-kubernetes-preserve-unknown-fields") and "maxProperties" not in n:
            n["maxProperties"] = MAX_KEYS
        stack.extend(v for v in (n.get("properties") or {}).values())
        stack.extend(n[k] for k in ("items", "additionalProperties") if isinstance(n.get(k), dict))


def _cel_list(names: list[str]) -> str:
    return "[" + ", ".join(f"'{n}'" for n in names) + "]"


def crd() -> dict[str, Any]:
    from ..plugins import default_registry

    registry = default_registry()
    spec = _schema(SchedulingPolicySpec)
    # arg-type ignored: registry.get(n) is never None for a name registry.names() lists
    no_score = [n for n in registry.names() if not issubclass(registry.get(n), ScorePlugin)]  # type: ignore[arg-type]
    candidate = spec["properties"]["rollout"]["properties"]["candidate"]
    for chain in (spec, candidate):  # spec.plugins and spec.rollout.candidate.plugins alike
        plugin = chain["properties"]["plugins"]["items"]
        plugin["properties"]["args"] = args_schema(registry)
        plugin["x-kubernetes-validations"] = [{
            "rule": f"!has(self.weight) || !(self.name in {_cel_list(no_score)})",
            "message": "weight applies only to plugins with a Score extension point",
            "fieldPath": ".weight", "reason": "FieldValueForbidden"}]
        # a list-map: the API server refuses a duplicate name naming the entry (spec.plugins[2])
        chain["properties"]["plugins"]["x-kubernetes-list-type"] = "map"
        chain["properties"]["plugins"]["x-kubernetes-list-map-keys"] = ["name"]
    implicit = [n for n in IMPLICIT_FIRST + IMPLICIT_LAST if n in registry]
    spec["x-kubernetes-validations"] = [{
        "rule": (f"!has(self.disabled) || self.disabled.all(d, d.name in {_cel_list(implicit)} "
                 "|| self.plugins.exists(p, p.name == d.name))"),
        "message": f"each disabled entry must name a plugin listed in plugins, or {' or '.join(implicit)}",
        "fieldPath": ".disabled", "reason": "FieldValueInvalid"}]
    # defaulted by the API server, so `kubectl get -o wide` shows every policy's owner
    spec["properties"]["schedulerName"]["default"] = SCHEDULER_NAME
    status = _schema(SchedulingPolicyStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {"plural": PLURAL, "singular": SINGULAR, "kind": KIND, "listKind": f"{KIND}List",
                      "shortNames": SHORT_NAMES, "categories": ["scheduling"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                    {"name": "Plugins", "type": "integer", "jsonPath": ".status.pluginCount"},
                    {"name": "Revision", "type": "integer", "jsonPath": ".status.revision"},
                    {"name": "Rollout", "type": "string", "jsonPath": ".status.rollout.summary"},
                    {"name": "Scheduled", "type": "integer", "jsonPath": ".status.scheduled"},
                    {"name": "Pending", "type": "integer", "jsonPath": ".status.pending"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    {"name": "Reason", "type": "string", "priority": 1,
                     "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason"},
                    {"name": "Unschedulable", "type": "integer", "priority": 1, "jsonPath": ".status.unschedulable"},
                    {"name": "Chain", "type": "string", "priority": 1, "jsonPath": ".status.pluginSummary"},
                    {"name": "Scheduler", "type": "string", "priority": 1, "jsonPath": ".spec.schedulerName"},
                    {"name": "Namespaces", "type": "integer", "priority": 1, "jsonPath": ".status.namespaces"},
                    {"name": "CPU-Overcommit", "type": "number", "priority": 1, "jsonPath": ".spec.overcommit.cpu"},
                    {"name": "Memory-Overcommit", "type": "number", "priority": 1,
                     "jsonPath": ".spec.overcommit.memory"},
                    {"name": "Tuning", "type": "string", "priority": 1, "jsonPath": ".status.tuning.summary"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A scheduling policy: a weighted chain of Filter and Score plugins, applied live.",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status,
                    },
                }},
            }],
        },
    }


class _Dumper(yaml.SafeDumper):
    """No YAML anchors and aliases for repeated sub-schemas: every node written out."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def crd_yaml() -> str:
    header = "# Generated by `policy-scheduler crd` from operator/policy_scheduler/policy/models.py. Do not edit.\n"
    return header + yaml.dump(crd(), Dumper=_Dumper, sort_keys=False, width=120)
