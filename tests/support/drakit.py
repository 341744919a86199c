"""Builders shared by the DRA tests: API-style DeviceClasses, ResourceSlices, ResourceClaims and
pods with claims, and a Handle whose DraCache the test fills and whose API keeps claims in memory."""

from __future__ import annotations

import asyncio
import copy

import numpy as np

from policy_scheduler.cache.handle import StateHandle
from policy_scheduler.cache.state import ClusterState
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.plugins.dynamicresources.cache import DraCache
from policy_scheduler.framework.model.nodetable import NodeSpec, NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from support.handles import MemoryActions

DRIVER = "gpu.example.com"
HOSTNAME = "kubernetes.io/hostname"


class ApiError(Exception):
    def __init__(self, status, text="error"):
        super().__init__(text)
        self.status = status


class DraHandle(StateHandle):
    """The real StateHandle over a fresh ClusterState (its DraCache: ``cache``), writing through
    in-memory Actions: its API holds the claims added (GET/PUT of a claim and its status,
    resourceVersion bumped per write, 409 on a stale one); ``conflicts`` makes the next that many
    PUTs fail with 409; spawned coroutines run at ``drain()``."""

    def __init__(self) -> None:
        super().__init__(ClusterState(), actions=MemoryActions(api=self._api, spawn=True))
        self.objects: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.conflicts = 0

    @property
    def cache(self) -> DraCache:
        return self.state.dra

    @property
    def spawned(self) -> list:
        return self.actions.spawned

    def drain(self) -> None:
        while self.spawned:
            asyncio.run(self.spawned.pop(0))

    def add(self, kind, *bodies):
        for b in bodies:
            self.cache.apply(kind, "ADDED", b)
            if kind == "resourceclaims":
                self.objects[f"{b['metadata']['namespace']}/{b['metadata']['name']}"] = copy.deepcopy(b)
        return self

    async def _api(self, method, path, body=None):
        self.calls.append((method, path))
        parts = path.split("/")
        status = parts[-1] == "status"
        ns, name = parts[5], parts[7]
        key = f"{ns}/{name}"
        cur = self.objects.get(key)
        if cur is None:
            raise ApiError(404, "not found")
        if method == "GET":
            return copy.deepcopy(cur)
        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(409, "conflict")
        if body["metadata"].get("resourceVersion") != cur["metadata"].get("resourceVersion"):
            raise ApiError(409, "conflict")
        new = copy.deepcopy(cur)
        if status:
            new["status"] = copy.deepcopy(body.get("status") or {})
        else:
            new["metadata"] = copy.deepcopy(body["metadata"])
            new["spec"] = copy.deepcopy(body.get("spec"))
        new["metadata"]["resourceVersion"] = str(int(cur["metadata"]["resourceVersion"]) + 1)
        self.objects[key] = new
        return copy.deepcopy(new)


def device_class(name=DRIVER, selectors=None, config=None):
    sels = selectors if selectors is not None else [f'device.driver == "{DRIVER}"']
    spec = {"selectors": [{"cel": {"expression": s}} for s in sels]}
    if config:
        spec["config"] = config
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


def gpu(name, model="a100", memory="40Gi", root=None, taints=None, **attrs):
    a = {"model": {"string": model}, **{k: v for k, v in attrs.items()}}
    if root is not None:
        a["resource.kubernetes.io/pciRoot"] = {"string": root}
    d = {"name": name, "attributes": a, "capacity": {"memory": {"value": memory}}}
    if taints:
        d["taints"] = taints
    return d


def resource_slice(node, devices, name=None, pool=None, generation=1, count=1, driver=DRIVER, **spec):
    s = {"driver": driver, "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
         "devices": devices, **spec}
    if node and "allNodes" not in spec and "nodeSelector" not in spec:
        s["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node}-slice", "resourceVersion": "1"}, "spec": s}


def request(name="gpu", cls=DRIVER, count=None, mode=None, selectors=(), admin=False, tolerations=None):
    ex = {"deviceClassName": cls}
    if count is not None:
        ex["count"] = count
    if mode:
        ex["allocationMode"] = mode
    if selectors:
        ex["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if admin:
        ex["adminAccess"] = True
    if tolerations:
        ex["tolerations"] = tolerations
    return {"name": name, "exactly": ex}


def first_available(name, *subs):
    return {"name": name, "firstAvailable": [dict(r["exactly"], name=r["name"]) for r in subs]}


def claim(name, requests=None, ns="default", uid=None, owner=None, constraints=None, allocation=None,
          reserved=None, rv="1", deleting=False):
    meta = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "resourceVersion": rv}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": owner, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    devs = {"requests": list(requests if requests is not None else [request()])}
    if constraints:
        devs["constraints"] = constraints
    status = {}
    if allocation is not None:
        status["allocation"] = allocation
    if reserved:
        status["reservedFor"] = reserved
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": devs}, "status": status}


def pod(name, claims=(), templates=(), statuses=None, ns="default", uid=None):
    """``claims``: names of ResourceClaims; ``templates``: (pod-claim name, template name)."""
    rcs = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    rcs += [{"name": n, "resourceClaimTemplateName": t} for n, t in templates]
    body = {"metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}"},
            "spec": {"containers": [{"name": "c", "image": "pause"}], "resourceClaims": rcs}, "status": {}}
    if statuses is not None:
        body["status"]["resourceClaimStatuses"] = [{"name": n, "resourceClaimName": c} for n, c in statuses.items()]
    return parse_pod(body)


def nodes(*names, labels=None) -> NodeTable:
    t = NodeTable()
    for i, n in enumerate(names):
        t.upsert_node(NodeSpec.from_dict({"metadata": {"name": n, "labels": {HOSTNAME: n, **(labels or {}).get(n, {})}},
                                          "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}))
    return t


def filter_all(pl, p, table):
    """PreFilter then Filter over every node: (PreFilter status, FilterResult | None, state)."""
    state = CycleState()
    st, _ = pl.pre_filter(state, p, table)
    if not st.is_success:
        return st, None, state
    return st, pl.filter(state, p, table, np.arange(table.n)), state


def reasons_of(res, table) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for reason, mask in res.reasons:
        out[reason] = [table.names[i] for i in np.nonzero(mask)[0]]
    return out
