"""The pods a simulation places: from manifests (Pods, or the pod templates of workload objects,
multiplied), or the cluster's pending pods.

A template's pods are named ``<object>-<i>`` and, for the controllers default spreading reads
(ReplicaSet, StatefulSet, ReplicationController, and a Deployment through a ReplicaSet of its
selector), carry the controller's ownerReference, so PodTopologySpread's default constraints
apply to them as they would to the real ones.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

# kind -> (how the replica count is found, the WorkloadIndex kind whose selector spreads the pods)
TEMPLATE_KINDS: dict[str, str | None] = {
    "Deployment": "rs", "ReplicaSet": "rs", "StatefulSet": "ss", "ReplicationController": "rc", "Job": None,
    "PodTemplate": None,
}
OWNER_API = {"rs": ("apps/v1", "ReplicaSet"), "ss": ("apps/v1", "StatefulSet"), "rc": ("v1", "ReplicationController")}
SIMULATED_UID_PREFIX = "whatif-"


class InputError(ValueError):
    """An input file that cannot be read or decoded."""


class PodsError(InputError):
    """A manifest that cannot be simulated; the message names the file, the document and why."""


@dataclass
class PodSet:
    """Pod objects to place, in order, and the controllers they belong to."""

    pods: list[dict] = field(default_factory=list)
    workloads: list[tuple[str, dict]] = field(default_factory=list)  # (WorkloadIndex kind, object)


def _documents(text: str, source: str) -> list[Any]:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise InputError(f"{source}: not YAML or JSON: {e}") from None
    out: list[Any] = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "List" and isinstance(d.get("items"), list):
            out.extend(d["items"])
        else:
            out.append(d)
    return out


def _check_pod_spec(spec: Any, where: str) -> None:
    if not isinstance(spec, dict):
        raise PodsError(f"{where}: Required value: a pod spec")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not all(isinstance(c, dict) for c in containers):
        raise PodsError(f"{where}.containers: Required value: a pod needs at least one container")


def _pod(meta: Mapping[str, Any], spec: Mapping[str, Any], name: str, namespace: str,
         owner: tuple[str, str, str] | None) -> dict:
    spec = copy.deepcopy(dict(spec))
    spec.pop("nodeName", None)  # a pod the simulation places has no node yet
    labels = dict(meta.get("labels") or {})
    md: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"{SIMULATED_UID_PREFIX}{namespace}-{name}",
                          "labels": labels}
    if meta.get("annotations"):
        md["annotations"] = dict(meta["annotations"])
    if owner is not None:
        api, kind, oname = owner
        md["ownerReferences"] = [{"apiVersion": api, "kind": kind, "name": oname, "uid": f"whatif-{oname}",
                                  "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}


def pods_from_documents(docs: list[Any], source: str, replicas: int | None = None) -> PodSet:
    """Pods from decoded manifests. ``replicas`` overrides every template's count and
    multiplies plain Pods too."""
    out = PodSet()
    names: set[str] = set()
    for i, doc in enumerate(docs, 1):
        where = f"{source}: document {i}"
        if not isinstance(doc, dict):
            raise PodsError(f"{where}: not a Kubernetes object")
        kind = doc.get("kind")
        meta = doc.get("metadata") or {}
        name = meta.get("name") or (meta.get("generateName") or "").rstrip("-")
        if not isinstance(name, str) or not name:
            raise PodsError(f"{where} ({kind}): metadata.name: Required value")
        namespace = meta.get("namespace") or "default"
        label = f"{where} ({kind} {name})"
        if kind == "Pod":
            _check_pod_spec(doc.get("spec"), f"{label}: spec")
            count = replicas if replicas is not None else 1
            made = [_pod(meta, doc["spec"], name if replicas is None else f"{name}-{j}", namespace, None)
                    for j in range(count)]
        elif kind in TEMPLATE_KINDS:
            spec = doc.get("template") if kind == "PodTemplate" else (doc.get("spec") or {}).get("template")
            path = "template" if kind == "PodTemplate" else "spec.template"
            if not isinstance(spec, dict):
                raise PodsError(f"{label}: {path}: Required value: a pod template")
            _check_pod_spec(spec.get("spec"), f"{label}: {path}.spec")
            ospec = doc.get("spec") or {}
            if replicas is not None:
                count = replicas
            elif kind == "Job":
                count = int(ospec.get("parallelism") or 1)
            elif kind == "PodTemplate":
                count = 1
            else:
                count = int(ospec.get("replicas", 1) if ospec.get("replicas") is not None else 1)
            wkind = TEMPLATE_KINDS[kind]
            owner = None
            if wkind is not None and ospec.get("selector") is not None:
                oname = f"{name}-whatif" if kind == "Deployment" else name
                api, okind = OWNER_API[wkind]
                owner = (api, okind, oname)
                out.workloads.append((wkind, {"metadata": {"name": oname, "namespace": namespace},
                                              "spec": {"selector": ospec["selector"]}}))
            tmeta = spec.get("metadata") or {}
            made = [_pod(tmeta, spec["spec"], f"{name}-{j}", namespace, owner) for j in range(count)]
        elif kind == "DaemonSet":
            raise PodsError(f"{label}: a DaemonSet places one pod per node by itself; simulate its pod "
                            "template as a Pod or a Deployment instead")
        else:
            raise PodsError(f"{label}: kind {kind!r} is not a Pod or a pod template "
                            f"(Pod, {', '.join(TEMPLATE_KINDS)})")
        for p in made:
            key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            if key in names:
                raise PodsError(f"{label}: pod {key} appears twice; pods need unique names")
            names.add(key)
        out.pods.extend(made)
    if not out.pods:
        raise PodsError(f"{source}: no pods: the file holds no Pod or pod template")
    return out


def load_pods(path: str | Path, replicas: int | None = None) -> PodSet:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise PodsError(f"cannot read {path}: {e.strerror or e}") from None
    return pods_from_documents(_documents(text, str(path)), str(path), replicas)


def load_policy_documents(path: str | Path) -> list[Any]:
    """The documents of a policy file (YAML or JSON, several documents or a List allowed)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from None
    return _documents(text, str(path))
