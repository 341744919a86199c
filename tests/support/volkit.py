"""Builders shared by the volume plugin tests: API-style PV, PVC, StorageClass, CSINode
objects, pods with volumes, and a Handle whose VolumeCache the test fills."""

from __future__ import annotations

import numpy as np

from policy_scheduler.cache.handle import StateHandle
from policy_scheduler.cache.state import ClusterState
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.plugins.volumes.objects import ANN_BIND_COMPLETED
from policy_scheduler.plugins.volumes.cache import VolumeCache
from support.handles import MemoryActions

HOSTNAME = "kubernetes.io/hostname"


class VolHandle(StateHandle):
    """The real StateHandle over a fresh ClusterState (its VolumeCache: ``cache``), writing through
    in-memory Actions whose ``api_request`` records the calls and answers the body with a
    resourceVersion one above the one it was sent with (as the API server would), or raises
    ``fail`` when set."""

    def __init__(self) -> None:
        super().__init__(ClusterState(), actions=MemoryActions(api=self._api))
        self.calls: list[tuple[str, str, dict]] = []
        self.fail: Exception | None = None

    @property
    def cache(self) -> VolumeCache:
        return self.state.volumes

    async def _api(self, method, path, body=None):
        self.calls.append((method, path, body))
        if self.fail is not None:
            raise self.fail
        out = dict(body)
        meta = dict(out.get("metadata") or {})
        meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
        out["metadata"] = meta
        return out

    def add(self, kind, *bodies):
        for b in bodies:
            self.cache.apply(kind, "ADDED", b)
        return self


def pv(name, cls="local", size="10Gi", modes=("ReadWriteOnce",), node=None, labels=None, claim=None,
       phase="Available", rv="1", csi=None, affinity=None):
    """``node``: a local PV's hostname affinity; ``claim``: (namespace, name[, uid]);
    ``csi``: (driver, handle)."""
    spec = {"storageClassName": cls, "capacity": {"storage": size}, "accessModes": list(modes)}
    if node is not None:
        affinity = {"key": HOSTNAME, "operator": "In", "values": [node]}
    if affinity is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [affinity]}]}}
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1], **({"uid": claim[2]} if len(claim) > 2 else {})}
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "resourceVersion": rv, "labels": dict(labels or {})},
            "spec": spec, "status": {"phase": phase}}


def pvc(name, ns="default", cls="local", size="5Gi", modes=("ReadWriteOnce",), volume=None, bound=False,
        rv="1", annotations=None, uid=None, phase=None, owner=None, selector=None):
    """``bound``: volumeName set with the bind-completed annotation and phase Bound."""
    ann = dict(annotations or {})
    spec = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if cls is not None:
        spec["storageClassName"] = cls
    if volume is not None:
        spec["volumeName"] = volume
    if selector is not None:
        spec["selector"] = selector
    if bound:
        ann[ANN_BIND_COMPLETED] = "yes"
        phase = phase or "Bound"
    meta = {"name": name, "namespace": ns, "resourceVersion": rv, "uid": uid or f"uid-{name}", "annotations": ann}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": owner, "controller": True}]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec,
            "status": {"phase": phase or "Pending"}}


def sc(name, provisioner="kubernetes.io/no-provisioner", mode="WaitForFirstConsumer", topologies=None):
    """``topologies``: a list of terms, each a dict key -> values; ``mode`` None: unset."""
    body = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, "resourceVersion": "1"}, "provisioner": provisioner}
    if mode is not None:
        body["volumeBindingMode"] = mode
    if topologies is not None:
        body["allowedTopologies"] = [{"matchLabelExpressions": [{"key": k, "values": list(v)} for k, v in t.items()]}
                                     for t in topologies]
    return body


def csinode(name, drivers):
    """``drivers``: driver name -> allocatable count (None: no count)."""
    return {"metadata": {"name": name, "resourceVersion": "1"},
            "spec": {"drivers": [{"name": d, "nodeID": name, **({"allocatable": {"count": c}} if c is not None else {})}
                                 for d, c in drivers.items()]}}


def pod(name="p", *claims, ns="default", volumes=(), uid=None, node_name=None):
    """A pod with a persistentVolumeClaim volume per claim name, plus ``volumes`` as given."""
    vols = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    vols += list(volumes)
    spec = {"containers": [{"name": "c", "image": "x"}]}
    if vols:
        spec["volumes"] = vols
    if node_name:
        spec["nodeName"] = node_name
    return parse_pod({"metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}"}, "spec": spec})


def nodes(*specs) -> NodeTable:
    """Nodes named by ``specs``: a name, or (name, labels); each gets its hostname label."""
    t = NodeTable()
    for s in specs:
        name, labels = (s, {}) if isinstance(s, str) else s
        t.upsert_node({"metadata": {"name": name, "labels": {HOSTNAME: name, **labels}},
                       "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
    return t


def run_filter(plugin, p, table, state=None):
    """PreFilter then Filter over every row: (pre-filter status, {node: (passed, reasons)})."""
    state = state if state is not None else CycleState()
    st, _ = plugin.pre_filter(state, p, table)
    if not st.is_success:
        return st, {}
    rows = np.arange(table.n)
    res = plugin.filter(state, p, table, rows)
    assert res.error is None, res.error
    out = {}
    for i, row in enumerate(rows.tolist()):
        reasons = tuple(r for r, m in res.reasons if m[i])
        out[table.names[row]] = (bool(res.passed[i]), reasons)
    return st, out
