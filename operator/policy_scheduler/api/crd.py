"""Generate the SchedulingPolicy CustomResourceDefinition from the pydantic models.

pydantic emits JSON Schema; Kubernetes wants an OpenAPI v3 *structural* schema: every node typed,
no $ref, nullable instead of a null branch, no titles. Plugin ``args`` stay open
(x-kubernetes-preserve-unknown-fields): each plugin validates its own args when the chain is built.
"""

from __future__ import annotations

from typing import Any

import yaml

from .. import SCHEDULER_NAME
from .models import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION, SchedulingPolicySpec, SchedulingPolicyStatus

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
            out = _structural({**branches[0], **rest}, defs)
            if nullable:
                out["nullable"] = True
            return out
        raise ValueError(f"cannot express anyOf with several non-null branches structurally: {node}")
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in _DROP or k == "$defs":
            continue
        if k == "const":
            out["enum"] = [v]
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


def crd() -> dict[str, Any]:
    spec = _schema(SchedulingPolicySpec)
    # args of a plugin: any object, validated by the plugin itself
    spec["properties"]["plugins"]["items"]["properties"]["args"] = {
        "type": "object", "nullable": True, "x-kubernetes-preserve-unknown-fields": True,
        "description": "Plugin args; validated against the plugin's own schema when the chain is built."}
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
                    {"name": "Scheduled", "type": "integer", "jsonPath": ".status.scheduled"},
                    {"name": "Pending", "type": "integer", "jsonPath": ".status.pending"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    {"name": "Reason", "type": "string", "priority": 1,
                     "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason"},
                    {"name": "Unschedulable", "type": "integer", "priority": 1, "jsonPath": ".status.unschedulable"},
                    {"name": "Chain", "type": "string", "priority": 1, "jsonPath": ".status.pluginSummary"},
                    {"name": "Scheduler", "type": "string", "priority": 1, "jsonPath": ".spec.schedulerName"},
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


def crd_yaml() -> str:
    header = "# Generated by `policy-scheduler crd` from operator/policy_scheduler/api/models.py. Do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120)
