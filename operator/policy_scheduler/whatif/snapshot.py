"""The cluster snapshot: everything a scheduling decision reads, in one versioned JSON document.

Format ``policy-scheduler.io/snapshot/v2`` (docs/whatif.md describes every field)::

    {"apiVersion": "policy-scheduler.io/snapshot/v2", "kind": "ClusterSnapshot",
     "takenAt": "2025-01-01T12:00:00Z", "schedulerName": "policy-scheduler", "defaultPolicy": "default",
     "nodes": [<v1.Node>...], "pods": [<bound v1.Pod>...], "pendingPods": [<v1.Pod>...],
     "namespaces": {"<name>": {<labels>}},
     "services": [...], "replicationControllers": [...], "replicaSets": [...], "statefulSets": [...],
     "podDisruptionBudgets": [...], "policies": [<SchedulingPolicy>...],
     "metrics": [{"query": "<PromQL>", "nodeLabel": "instance",
                  "samples": {"<node>": {"value": 0.42, "time": 1735732800.0}}}],
     "persistentVolumes": [...], "persistentVolumeClaims": [...], "storageClasses": [...],
     "csiNodes": [...], "csiDrivers": [...],
     "resourceClaims": [...], "resourceSlices": [...], "deviceClasses": [...], "deviceTaintRules": [...],
     "podGroups": [<scheduling.k8s.io PodGroup>...], "podGroupsVersion": "v1beta1",
     "compositePodGroups": [<scheduling.k8s.io/v1alpha3 CompositePodGroup>...]}

v2 adds the five storage lists and keeps the pods' ``spec.volumes`` the volume plugins read; a v1
snapshot (neither) still loads, as a cluster without storage objects. The DRA lists and the
PodGroup lists are optional within v2: a snapshot without them loads as a cluster without them.

PodGroups (snapshot_groups.py: ``scheduling.k8s.io``, in the version the API serves, found by
discovery as the operator finds it: plugins/podgroups/native_cache.py VERSIONS) and CompositePodGroups
(``scheduling.k8s.io/v1alpha3``) are captured when the API serves them. A PodGroup the scheduler
cannot read (the GangScheduling cache refuses it) is not a reason to refuse the snapshot: it is
reported on itself (``Snapshot.warnings``) and skipped, as the operator ignores it.

Objects keep only the fields the scheduler reads (a Node's labels, taints, unschedulable,
allocatable, capacity, images and declared features; a Pod's labels, owner, spec and the status
fields preemption and in-place resize read; storage objects as the volume plugins read them), so a snapshot stays small and can be
edited by hand: add a node, change a label, ask "what if". Loading checks the version and the
shape and names the field of every problem. Nodes are written in name order, the order in which
the operator's (paginated) LIST hands them to its node table.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..cache.state import KINDS
from ..plugins.dynamicresources.objects import (DEVICE_CLASSES, DEVICE_TAINT_RULES, PATHS as DRA_PATHS,
                                                RESOURCE_CLAIMS, RESOURCE_SLICES)
from ..plugins.dynamicresources.cache import DraCache
from ..plugins.dynamicresources.extended import ANNOTATION as EXTENDED_CLAIM_ANNOTATION
from ..framework.model.podinfo import _VOLUME_SOURCES
from ..framework.model.podrequests import resize_status
from ..plugins.volumes.objects import (CSI_DRIVERS, CSI_NODES, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES,
                                       STORAGE_CLASSES)
from ..plugins.volumes.cache import VolumeCache
from ..timefmt import parse_rfc3339, rfc3339
from .snapshot_groups import check_groups, take_pod_groups, trim_pod_group  # noqa: F401 (trim_pod_group: API)

API_VERSION = "policy-scheduler.io/snapshot/v2"
API_VERSION_V1 = "policy-scheduler.io/snapshot/v1"  # no storage lists, no pod volumes: still read
READ_VERSIONS = (API_VERSION, API_VERSION_V1)
KIND = "ClusterSnapshot"

# the lists of API objects a snapshot holds, and the path each one is listed from
# (cache/state.py KINDS: the kinds that feed the cluster state, and their paths, as the
# operator's informers list them)
LISTS: dict[str, str] = {
    "nodes": KINDS["nodes"],
    "services": KINDS["services"],
    "replicationControllers": KINDS["replicationcontrollers"],
    "replicaSets": KINDS["replicasets"],
    "statefulSets": KINDS["statefulsets"],
    "podDisruptionBudgets": KINDS["poddisruptionbudgets"],
}
# the storage lists (v2): snapshot field -> the VolumeCache kind (plugins/volumes/),
# which is also the kind's name in KINDS
VOLUME_LISTS: dict[str, str] = {
    "persistentVolumes": PERSISTENT_VOLUMES,
    "persistentVolumeClaims": PERSISTENT_VOLUME_CLAIMS,
    "storageClasses": STORAGE_CLASSES,
    "csiNodes": CSI_NODES,
    "csiDrivers": CSI_DRIVERS,
}
# the DRA lists (resource.k8s.io/v1; optional, absent from older snapshots): snapshot field -> the
# DraCache kind (plugins/dynamicresources/)
DRA_LISTS: dict[str, str] = {
    "resourceClaims": RESOURCE_CLAIMS,
    "resourceSlices": RESOURCE_SLICES,
    "deviceClasses": DEVICE_CLASSES,
    "deviceTaintRules": DEVICE_TAINT_RULES,
}
# annotations no plugin reads that can be large
_ANNOTATIONS_DROP = frozenset(("kubectl.kubernetes.io/last-applied-configuration",))
# spec fields of a pod that no scheduling plugin reads: left out of snapshots
_POD_SPEC_DROP = frozenset((
    "securityContext", "dnsPolicy", "dnsConfig", "serviceAccount", "serviceAccountName",
    "automountServiceAccountToken", "enableServiceLinks", "terminationGracePeriodSeconds", "imagePullSecrets",
    "hostname", "subdomain", "restartPolicy", "activeDeadlineSeconds", "shareProcessNamespace", "hostAliases",
    "readinessGates", "setHostnameAsFQDN", "os"))
# (restartPolicyRules, hostUsers and volume mounts' bindMountOptions: what NodeDeclaredFeatures reads)
_CONTAINER_KEEP = ("name", "image", "resources", "ports", "restartPolicy", "restartPolicyRules")


class SnapshotError(ValueError):
    """A snapshot that cannot be used: not JSON, another version, or a field of the wrong shape."""


@dataclass
class Snapshot:
    """A loaded snapshot (plain dicts, as the API returns them, trimmed)."""

    taken_at: float
    scheduler_name: str
    default_policy: str
    nodes: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    pending_pods: list[dict] = field(default_factory=list)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    services: list[dict] = field(default_factory=list)
    replication_controllers: list[dict] = field(default_factory=list)
    replica_sets: list[dict] = field(default_factory=list)
    stateful_sets: list[dict] = field(default_factory=list)
    pod_disruption_budgets: list[dict] = field(default_factory=list)
    policies: list[dict] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    # storage objects, by VolumeCache kind (VOLUME_LISTS' values)
    volumes: dict[str, list[dict]] = field(default_factory=lambda: {k: [] for k in VOLUME_LISTS.values()})
    # DRA objects, by DraCache kind (DRA_LISTS' values)
    dra: dict[str, list[dict]] = field(default_factory=lambda: {k: [] for k in DRA_LISTS.values()})
    # scheduling.k8s.io PodGroups (GangScheduling's) and CompositePodGroups; the version served
    pod_groups: list[dict] = field(default_factory=list)
    composite_pod_groups: list[dict] = field(default_factory=list)
    pod_groups_version: str = ""
    # objects skipped at loading, each reported on itself (not written back)
    warnings: list[str] = field(default_factory=list)

    def policy(self, name: str) -> dict | None:
        return next((p for p in self.policies if (p.get("metadata") or {}).get("name") == name), None)

    def samples(self) -> dict[tuple[str, str], dict[str, tuple[float, float]]]:
        """(PromQL, node label) -> node -> (value, sample unix time)."""
        return {(m["query"], m["nodeLabel"]): {n: (float(s["value"]), float(s["time"]))
                                               for n, s in m["samples"].items()}
                for m in self.metrics}

    def volume_cache(self) -> VolumeCache:
        """A VolumeCache holding the snapshot's storage objects, as the operator's informers
        fill its own (each a fresh one: simulations assume PV/PVC copies in it)."""
        cache = VolumeCache()
        for kind in VOLUME_LISTS.values():
            for body in self.volumes.get(kind, ()):
                cache.apply(kind, "ADDED", body)
        return cache

    def to_dict(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION, "kind": KIND, "takenAt": rfc3339(self.taken_at),
            "schedulerName": self.scheduler_name, "defaultPolicy": self.default_policy,
            "nodes": self.nodes, "pods": self.pods, "pendingPods": self.pending_pods,
            "namespaces": self.namespaces, "services": self.services,
            "replicationControllers": self.replication_controllers, "replicaSets": self.replica_sets,
            "statefulSets": self.stateful_sets, "podDisruptionBudgets": self.pod_disruption_budgets,
            "policies": self.policies, "metrics": self.metrics,
            **{key: self.volumes.get(kind, []) for key, kind in VOLUME_LISTS.items()},
            **{key: self.dra.get(kind, []) for key, kind in DRA_LISTS.items()},
            "podGroups": self.pod_groups, "podGroupsVersion": self.pod_groups_version,
            "compositePodGroups": self.composite_pod_groups,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"


# ---------------------------------------------------------------------------------------- trimming

def _meta(obj: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in keys if meta.get(k) not in (None, {}, [])}


def trim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "metadata": _meta(node, "name", "labels"),
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if spec.get(k)},
        "status": {k: status[k] for k in ("capacity", "allocatable", "images", "declaredFeatures") if status.get(k)},
    }


def _trim_container(c: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: c[k] for k in _CONTAINER_KEEP if c.get(k) not in (None, {}, [])}
    mounts = [m for m in c.get("volumeMounts") or () if isinstance(m, Mapping) and m.get("bindMountOptions")]
    return {**out, "volumeMounts": mounts} if mounts else out


def _trim_volume(v: Any) -> dict[str, Any] | None:
    """A spec.volumes entry the volume plugins read (framework/model/podinfo.py parse_volumes): its
    name and its source; None for the other sources (configMap, secret, emptyDir, ...)."""
    if not isinstance(v, Mapping):
        return None
    for src in _VOLUME_SOURCES:
        if v.get(src) is not None:
            return {"name": v.get("name"), src: v[src]}
    return None


def trim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    spec = dict(pod.get("spec") or {})
    for k in _POD_SPEC_DROP:
        spec.pop(k, None)
    volumes = [t for t in (_trim_volume(v) for v in spec.pop("volumes", None) or ()) if t is not None]
    if volumes:
        spec["volumes"] = volumes
    for k in ("containers", "initContainers"):
        if k in spec:
            spec[k] = [_trim_container(c) for c in spec[k] or []]
    status = pod.get("status") or {}
    out_status = {k: status[k] for k in ("phase", "startTime", "nominatedNodeName", "resourceClaimStatuses")
                  if status.get(k)}
    dt = [c for c in status.get("conditions") or [] if c.get("type") in ("DisruptionTarget", "PodResizePending")]
    if dt:
        out_status["conditions"] = dt
    out_status.update(resize_status(status))
    return {"metadata": _meta(pod, "name", "namespace", "uid", "labels", "ownerReferences", "creationTimestamp",
                              "deletionTimestamp"),
            "spec": spec, "status": out_status}


def trim_selector_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Service or a controller: what default spreading reads (its selector)."""
    sel = (obj.get("spec") or {}).get("selector")
    return {"metadata": _meta(obj, "name", "namespace"), "spec": {"selector": sel} if sel is not None else {}}


def trim_pdb(obj: Mapping[str, Any]) -> dict[str, Any]:
    status = obj.get("status") or {}
    return {"metadata": _meta(obj, "name", "namespace"),
            "spec": {k: v for k, v in (obj.get("spec") or {}).items() if k == "selector"},
            "status": {k: status[k] for k in ("disruptionsAllowed", "disruptedPods") if k in status}}


def trim_policy(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj.get("apiVersion", "policy-scheduler.io/v1alpha1"), "kind": "SchedulingPolicy",
            "metadata": _meta(obj, "name", "generation"), "spec": obj.get("spec")}


def trim_storage(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A PV, PVC, StorageClass, CSINode or CSIDriver: what plugins/volumes/ parses of it
    (metadata, spec, status.phase; a StorageClass's top-level fields)."""
    meta = _meta(obj, "name", "namespace", "uid", "resourceVersion", "labels", "annotations", "ownerReferences",
                 "deletionTimestamp")
    if "annotations" in meta:
        meta["annotations"] = {k: v for k, v in meta["annotations"].items() if k not in _ANNOTATIONS_DROP}
        if not meta["annotations"]:
            del meta["annotations"]
    out: dict[str, Any] = {"metadata": meta}
    if kind == STORAGE_CLASSES:
        out.update({k: obj[k] for k in ("provisioner", "volumeBindingMode", "allowedTopologies") if k in obj})
        return out
    if obj.get("spec") is not None:
        out["spec"] = obj["spec"]
    phase = (obj.get("status") or {}).get("phase")
    if phase:
        out["status"] = {"phase": phase}
    return out


def trim_dra(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceClaim, ResourceSlice, DeviceClass or DeviceTaintRule: what plugins/dynamicresources/
    parses of it (a claim's status.devices: the binding conditions a driver reported)."""
    meta = _meta(obj, "name", "namespace", "uid", "resourceVersion", "ownerReferences", "deletionTimestamp",
                 "creationTimestamp", "finalizers")
    ann = ((obj.get("metadata") or {}).get("annotations")) or {}
    if isinstance(ann, Mapping) and ann.get(EXTENDED_CLAIM_ANNOTATION):  # the claim made for extended resources
        meta["annotations"] = {EXTENDED_CLAIM_ANNOTATION: ann[EXTENDED_CLAIM_ANNOTATION]}
    out: dict[str, Any] = {"metadata": meta, "spec": obj.get("spec") or {}}
    if kind == RESOURCE_CLAIMS:
        status = obj.get("status") or {}
        out["status"] = {k: status[k] for k in ("allocation", "reservedFor", "devices") if status.get(k)}
    return out


def split_pods(items: list[Mapping[str, Any]], scheduler_name: str) -> tuple[list[dict], list[dict]]:
    """(bound pods that count on their nodes, pending pods of ``scheduler_name``), as the engine
    sorts them: finished pods count nowhere, terminating pending pods are not scheduled."""
    bound, pending = [], []
    for p in items:
        spec = p.get("spec") or {}
        phase = (p.get("status") or {}).get("phase")
        if spec.get("nodeName"):
            if phase not in ("Succeeded", "Failed"):
                bound.append(trim_pod(p))
        elif spec.get("schedulerName") == scheduler_name and not (p.get("metadata") or {}).get("deletionTimestamp"):
            pending.append(trim_pod(p))
    return bound, pending


# ---------------------------------------------------------------------------------------- loading

def _check_list(errors: list[str], doc: Mapping[str, Any], key: str, need_name: bool = True,
                namespaced: bool = False) -> list[dict]:
    v = doc.get(key, [])
    if not isinstance(v, list):
        errors.append(f"{key}: must be a list, not {type(v).__name__}")
        return []
    out = []
    for i, o in enumerate(v):
        if not isinstance(o, dict):
            errors.append(f"{key}[{i}]: must be an object, not {type(o).__name__}")
            continue
        meta = o.get("metadata")
        if not isinstance(meta, dict):
            errors.append(f"{key}[{i}].metadata: required (an object)")
            continue
        if need_name and not (isinstance(meta.get("name"), str) and meta["name"]):
            errors.append(f"{key}[{i}].metadata.name: required")
            continue
        for sub in ("spec", "status"):
            if sub in o and not isinstance(o[sub], dict):
                errors.append(f"{key}[{i}].{sub}: must be an object")
        if "labels" in meta and not isinstance(meta["labels"], dict):
            errors.append(f"{key}[{i}].metadata.labels: must be an object")
        out.append(o)
    return out


def _check_metrics(errors: list[str], v: Any) -> list[dict]:
    if not isinstance(v, list):
        errors.append("metrics: must be a list")
        return []
    out = []
    for i, m in enumerate(v):
        where = f"metrics[{i}]"
        if not isinstance(m, dict):
            errors.append(f"{where}: must be an object")
            continue
        bad = False
        for k in ("query", "nodeLabel"):
            if not isinstance(m.get(k), str) or not m.get(k):
                errors.append(f"{where}.{k}: required (a string)")
                bad = True
        samples = m.get("samples", {})
        if not isinstance(samples, dict):
            errors.append(f"{where}.samples: must be an object (node -> {{value, time}})")
            continue
        for node, s in samples.items():
            ok = isinstance(s, dict) and all(isinstance(s.get(k), (int, float)) and not isinstance(s.get(k), bool)
                                             and math.isfinite(s[k]) for k in ("value", "time"))
            if not ok:
                errors.append(f"{where}.samples[{node}]: must be {{\"value\": <number>, \"time\": <unix seconds>}}")
                bad = True
        if not bad:
            out.append({"query": m["query"], "nodeLabel": m["nodeLabel"], "samples": samples})
    return out


def _check_storage(errors: list[str], doc: Mapping[str, Any], key: str, kind: str,
                   scratch: VolumeCache | DraCache | None = None) -> list[dict]:
    """A storage (or DRA) list: objects with a name that the VolumeCache (DraCache) can parse (the
    error names the object's index and why)."""
    out = []
    scratch = scratch if scratch is not None else VolumeCache()
    for i, o in enumerate(_check_list(errors, doc, key)):
        try:
            scratch.apply(kind, "ADDED", o)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            errors.append(f"{key}[{i}]: cannot be read as a {kind[:-1]}: {type(e).__name__}: {e}")
            continue
        out.append(o)
    return out


def _check_dra(errors: list[str], doc: Mapping[str, Any], key: str, kind: str) -> list[dict]:
    """A DRA list (optional: older snapshots have none), checked as the storage lists."""
    return _check_storage(errors, doc, key, kind, DraCache()) if key in doc else []


def from_dict(doc: Any, source: str = "snapshot") -> Snapshot:
    """Validate a decoded snapshot document; SnapshotError names every problem's field."""
    if not isinstance(doc, dict):
        raise SnapshotError(f"{source}: not a snapshot: the document must be a JSON object")
    version = doc.get("apiVersion")
    if version not in READ_VERSIONS:
        raise SnapshotError(f"{source}: apiVersion {version!r} is not supported: this policy-scheduler reads "
                            f"{API_VERSION!r} snapshots (and {API_VERSION_V1!r}; take a new one with "
                            "`policy-scheduler snapshot`)")
    if doc.get("kind", KIND) != KIND:
        raise SnapshotError(f"{source}: kind {doc.get('kind')!r} is not {KIND!r}")
    errors: list[str] = []
    taken = doc.get("takenAt")
    taken_at = time.time()
    if taken is not None:
        try:
            taken_at = parse_rfc3339(taken) if isinstance(taken, str) else float("nan")
            if taken_at != taken_at:
                raise ValueError
        except (ValueError, TypeError):
            errors.append(f"takenAt: {taken!r} is not a time like 2025-01-01T12:00:00Z")
    for k in ("schedulerName", "defaultPolicy"):
        if k in doc and not isinstance(doc[k], str):
            errors.append(f"{k}: must be a string")
    ns = doc.get("namespaces", {})
    if not isinstance(ns, dict) or any(not isinstance(v, dict) for v in ns.values()):
        errors.append("namespaces: must be an object: namespace name -> its labels (an object)")
        ns = {}
    snap = Snapshot(
        taken_at=taken_at,
        scheduler_name=doc.get("schedulerName") or "policy-scheduler",
        default_policy=doc.get("defaultPolicy") or "default",
        nodes=_check_list(errors, doc, "nodes"),
        pods=_check_list(errors, doc, "pods"),
        pending_pods=_check_list(errors, doc, "pendingPods"),
        namespaces={str(k): {str(a): str(b) for a, b in v.items()} for k, v in ns.items()},
        services=_check_list(errors, doc, "services"),
        replication_controllers=_check_list(errors, doc, "replicationControllers"),
        replica_sets=_check_list(errors, doc, "replicaSets"),
        stateful_sets=_check_list(errors, doc, "statefulSets"),
        pod_disruption_budgets=_check_list(errors, doc, "podDisruptionBudgets"),
        policies=_check_list(errors, doc, "policies"),
        metrics=_check_metrics(errors, doc.get("metrics", [])),
        volumes={kind: _check_storage(errors, doc, key, kind) for key, kind in VOLUME_LISTS.items()},
        dra={kind: _check_dra(errors, doc, key, kind) for key, kind in DRA_LISTS.items()},
    )
    snap.pod_groups = check_groups(snap.warnings, doc, "podGroups")
    snap.composite_pod_groups = check_groups(snap.warnings, doc, "compositePodGroups")
    version = doc.get("podGroupsVersion")
    snap.pod_groups_version = version if isinstance(version, str) else ""
    for i, p in enumerate(snap.pods):
        if not (p.get("spec") or {}).get("nodeName"):
            errors.append(f"pods[{i}].spec.nodeName: required (pods lists bound pods; pending ones go in pendingPods)")
    for i, p in enumerate(snap.policies):
        if not isinstance(p.get("spec"), dict):
            errors.append(f"policies[{i}].spec: required (an object)")
    names = [n["metadata"]["name"] for n in snap.nodes]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        errors.append(f"nodes: duplicate node names: {', '.join(dup[:5])}")
    if errors:
        more = f" (and {len(errors) - 20} more)" if len(errors) > 20 else ""
        raise SnapshotError(f"{source}: invalid snapshot: " + "; ".join(errors[:20]) + more)
    return snap


def loads(text: str, source: str = "snapshot") -> Snapshot:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise SnapshotError(f"{source}: not a snapshot: not valid JSON ({e})") from None
    return from_dict(doc, source)


def load(path: str | Path) -> Snapshot:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SnapshotError(f"cannot read snapshot {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise SnapshotError(f"{path}: not a snapshot: not UTF-8 text") from None
    return loads(text, str(path))


# ---------------------------------------------------------------------------------------- taking

async def take(client, *, scheduler_name: str, default_policy: str, prometheus_url: str | None = None,
               query_fn=None, warn=None) -> Snapshot:
    """Read everything a decision reads from the API server (``client``: a cluster.KubeClient)
    and, with ``prometheus_url`` (or policies with spec.prometheus.address), the current values
    of the metrics the policies query. ``warn(msg)`` hears about metrics that could not be read."""
    import asyncio

    from ..cache.policies import PLURAL_PATH

    paths = {**LISTS, "pods": KINDS["pods"], "namespaces": KINDS["namespaces"], "policies": PLURAL_PATH,
             **{key: KINDS[kind] for key, kind in VOLUME_LISTS.items()},
             **{key: DRA_PATHS[kind] for key, kind in DRA_LISTS.items()}}
    keys = list(paths)
    results = await asyncio.gather(*(client.get(paths[k]) for k in keys), return_exceptions=True)
    got: dict[str, list] = {}
    for k, r in zip(keys, results):
        if isinstance(r, BaseException):
            if k in ("policies", *DRA_LISTS) and getattr(r, "status", None) in (403, 404):
                # no CRD: no policies; no resource.k8s.io (or no right to list it): no DRA objects
                got[k] = []
                continue
            raise r
        got[k] = list((r or {}).get("items") or [])
    groups, composites, group_version = await take_pod_groups(client)
    bound, pending = split_pods(got["pods"], scheduler_name)
    policies = [trim_policy(p) for p in got["policies"]
                if ((p.get("spec") or {}).get("schedulerName") or "policy-scheduler") == scheduler_name]
    snap = Snapshot(
        taken_at=time.time(), scheduler_name=scheduler_name, default_policy=default_policy,
        # name order: the operator's paginated LIST fills its node table in that order, and a tie
        # between equally scored nodes follows that order (upstream's node tree)
        nodes=sorted((trim_node(n) for n in got["nodes"]), key=lambda n: n["metadata"].get("name", "")),
        pods=bound, pending_pods=pending,
        namespaces={(n.get("metadata") or {}).get("name", ""): dict((n.get("metadata") or {}).get("labels") or {})
                    for n in got["namespaces"]},
        services=[trim_selector_object(o) for o in got["services"]],
        replication_controllers=[trim_selector_object(o) for o in got["replicationControllers"]],
        replica_sets=[trim_selector_object(o) for o in got["replicaSets"]],
        stateful_sets=[trim_selector_object(o) for o in got["statefulSets"]],
        pod_disruption_budgets=[trim_pdb(o) for o in got["podDisruptionBudgets"]],
        policies=policies,
        volumes={kind: [trim_storage(kind, o) for o in got[key]] for key, kind in VOLUME_LISTS.items()},
        dra={kind: [trim_dra(kind, o) for o in got[key]] for key, kind in DRA_LISTS.items()},
        pod_groups=groups, composite_pod_groups=composites, pod_groups_version=group_version,
    )
    snap.metrics = await read_metrics(policies, prometheus_url, query_fn=query_fn, warn=warn)
    return snap


async def read_metrics(policies: list[dict], prometheus_url: str | None, *, query_fn=None,
                       warn=None) -> list[dict]:
    """The current value of every metric the policies' metric plugins query, with its sample
    time: one refresh of each policy's own Prometheus source (metricsources/prometheus.py), as the
    operator makes it."""
    from pydantic import ValidationError

    from ..metricsources.prometheus import PrometheusMetricSources, prometheus_api_query
    from ..policy.models import SchedulingPolicySpec

    sources = PrometheusMetricSources(prometheus_url, query_fn=query_fn or prometheus_api_query)
    out: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for p in policies:
        name = p["metadata"]["name"]
        try:
            spec = SchedulingPolicySpec.model_validate(p.get("spec") or {})
        except ValidationError:
            continue  # an invalid policy reads no metrics
        sources.policy_updated(name, spec)
        src = sources.sources.get(name)
        if src is None:
            continue
        if not src.config.address:
            if warn:
                warn(f"policy {name}: its metric plugins need a Prometheus address (--prometheus-url or "
                     "spec.prometheus.address); the snapshot has no values for them")
            continue
        await src.refresh(sources.query_fn)
        for key, err in src.errors.items():
            if warn:
                warn(f"policy {name}: query {key[0]!r}: {err}")
        for key, per_node in src.samples.items():
            bucket = out.setdefault(key, {})
            for node, (v, t) in per_node.items():
                bucket[node] = {"value": v, "time": t}
    return [{"query": q, "nodeLabel": label, "samples": dict(sorted(s.items()))}
            for (q, label), s in out.items()]
