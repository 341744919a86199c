"""Extended resources backed by DRA (upstream extendeddynamicresources.go, v1.37): which resources a
DeviceClass backs, NodeResourcesFit's verdict when the node does not advertise one, the claim
DynamicResources allocates and creates for it (requests, container mappings, the object PreBind
posts), the pod status it records, Unreserve's and PostFilter's deletion of the claim, and the
messages."""

from __future__ import annotations

import asyncio
import copy

import numpy as np
from support.drakit import DRIVER, DraHandle, claim, device_class, gpu, resource_slice
from support.kit import QUEUE, SKIP, instance

from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.model.extended_resources import IMPLICIT_PREFIX, backed_requests, class_map
from policy_scheduler.framework.model.nodetable import NodeSpec, NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.dynamicresources.dynamic_resources import CANNOT_ALLOCATE, DynamicResources
from policy_scheduler.plugins.dynamicresources.extended import (ANNOTATION, CANNOT_FIT, CANNOT_SCHEDULE, DELETED,
                                                                SPECIAL_NAME, requests_and_mappings)
from policy_scheduler.plugins.dynamicresources.objects import FINALIZER, DeviceClass
from policy_scheduler.plugins.node_resources_fit import NodeResourcesFit

C, S, D = "resourceclaims", "resourceslices", "deviceclasses"
GPU = "example.com/gpu"


class ExtHandle(DraHandle):
    """DraHandle whose API also creates claims (generateName), deletes them and patches pods."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[dict] = []
        self.pod_patches: list[tuple[str, dict]] = []
        self.deleted: list[str] = []

    async def _api(self, method, path, body=None):
        parts = path.split("/")
        if method == "POST" and parts[-1] == "resourceclaims":
            self.calls.append((method, path))
            obj = copy.deepcopy(body)
            meta = obj["metadata"]
            meta["name"] = meta["generateName"] + f"x{len(self.created)}"
            meta.update(uid=f"uid-{meta['name']}", resourceVersion="1", creationTimestamp="2026-01-01T00:00:00Z")
            self.created.append(copy.deepcopy(body))
            self.objects[f"{parts[5]}/{meta['name']}"] = obj
            return copy.deepcopy(obj)
        if parts[1] == "api" and parts[-1] == "status" and method == "PATCH":
            self.calls.append((method, path))
            self.pod_patches.append((path, body))
            return {}
        if method == "DELETE":
            self.calls.append((method, path))
            self.deleted.append(path)
            self.objects.pop(f"{parts[5]}/{parts[7]}", None)
            return {}
        return await super()._api(method, path, body)


def ext_class(name="gpu-class", resource=GPU, created="2026-01-01T00:00:00Z"):
    body = device_class(name)
    body["metadata"]["creationTimestamp"] = created
    if resource:
        body["spec"]["extendedResourceName"] = resource
    return body


def ext_pod(name="p", containers=None, inits=None, uid=None):
    cs = containers if containers is not None else [{"name": "c", "image": "x",
                                                     "resources": {"requests": {GPU: "1"}}}]
    spec = {"containers": cs}
    if inits:
        spec["initContainers"] = inits
    return parse_pod({"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
                      "spec": spec, "status": {}})


def table(*nodes: tuple[str, dict]) -> NodeTable:
    t = NodeTable()
    for name, extra in nodes:
        t.upsert_node(NodeSpec.from_dict({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                                          "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110",
                                                                     **extra}}}))
    return t


def world(*node_devices, classes=None, claims=()):
    h = ExtHandle()
    h.add(D, *(classes if classes is not None else [ext_class()]))
    for i, devs in enumerate(node_devices):
        if devs is not None:
            h.add(S, resource_slice(f"n{i}", devs))
    h.add(C, *claims)
    return h


def run_filter(pl, p, t):
    state = CycleState()
    st, _ = pl.pre_filter(state, p, t)
    res = pl.filter(state, p, t, np.arange(t.n)) if st.is_success else None
    return st, res, state


def reasons(res, t):
    return {r: [t.names[i] for i in np.nonzero(m)[0]] for r, m in res.reasons}


# ---------------------------------------------------------------- the mapping

def test_a_class_backs_its_extended_resource_name_and_its_implicit_name():
    h = world(classes=[ext_class("a", GPU), ext_class("b", None)])
    m = class_map(h.cache)
    assert {k: v.name for k, v in m.items()} == {GPU: "a", IMPLICIT_PREFIX + "a": "a", IMPLICIT_PREFIX + "b": "b"}
    assert backed_requests({GPU: 1, "example.com/other": 1, "cpu": 1000, IMPLICIT_PREFIX + "b": 0}, h.cache) \
        == frozenset({GPU})


def test_two_classes_with_one_name_the_newer_wins_then_the_lower_name():
    h = world(classes=[ext_class("old", GPU, "2026-01-01T00:00:00Z"), ext_class("new", GPU, "2026-02-01T00:00:00Z")])
    assert class_map(h.cache)[GPU].name == "new"
    h = world(classes=[ext_class("zz", GPU), ext_class("aa", GPU)])
    assert class_map(h.cache)[GPU].name == "aa"
    # as upstream's cache: a class added after a newer one of the same name is left out, implicit name too
    h = world(classes=[ext_class("new", GPU, "2026-02-01T00:00:00Z"), ext_class("old", GPU, "2026-01-01T00:00:00Z")])
    m = class_map(h.cache)
    assert m[GPU].name == "new" and IMPLICIT_PREFIX + "old" not in m
    # a class change is seen at once (the map follows the cache's version)
    h.cache.apply(D, "DELETED", ext_class("new", GPU))
    assert GPU not in class_map(h.cache) and IMPLICIT_PREFIX + "old" not in class_map(h.cache)
    h.cache.apply(D, "ADDED", ext_class("third", GPU))
    assert class_map(h.cache)[GPU].name == "third"


# ---------------------------------------------------------------- requests and mappings

def _cls(name):
    return DeviceClass(name, "1", (), [], GPU)


def test_requests_one_per_long_lived_container_named_by_container_and_sorted_resource_index():
    p = ext_pod(containers=[
        {"name": "a", "resources": {"requests": {"cpu": "1", GPU: "2"}}},  # cpu sorts first: request 1
        {"name": "b", "resources": {"requests": {GPU: "1", "example.com/fpga": "1"}}},
        {"name": "c", "resources": {"requests": {"cpu": "1"}}}])
    reqs, maps = requests_and_mappings(p, {GPU: 3}, {GPU: _cls("k")})
    assert reqs == [
        {"name": "container-0-request-1", "exactly": {"deviceClassName": "k", "allocationMode": "ExactCount",
                                                      "count": 2}},
        {"name": "container-1-request-1", "exactly": {"deviceClassName": "k", "allocationMode": "ExactCount",
                                                      "count": 1}}]
    assert maps == [{"containerName": "a", "resourceName": GPU, "requestName": "container-0-request-1"},
                    {"containerName": "b", "resourceName": GPU, "requestName": "container-1-request-1"}]
    # a resource no class maps gets no request
    assert requests_and_mappings(p, {"example.com/fpga": 1}, {GPU: _cls("k")}) == ([], [])


def test_init_containers_reuse_later_long_lived_requests_and_keep_the_largest_rest():
    g = lambda n: {"requests": {GPU: str(n)}}  # noqa: E731
    p = ext_pod(inits=[{"name": "i0", "resources": g(1)},
                       {"name": "side", "restartPolicy": "Always", "resources": g(1)},
                       {"name": "i2", "resources": g(2)}],
                containers=[{"name": "c", "resources": g(1)}])
    reqs, maps = requests_and_mappings(p, {GPU: 3}, {GPU: _cls("k")})
    assert [(r["name"], r["exactly"]["count"]) for r in reqs] == [
        ("container-1-request-0", 1), ("container-2-request-0", 1), ("container-3-request-0", 1)]
    assert [(m["containerName"], m["requestName"]) for m in maps] == [
        ("side", "container-1-request-0"), ("c", "container-3-request-0"),
        ("i0", "container-1-request-0"), ("i2", "container-3-request-0"), ("i2", "container-2-request-0")]
    # two short-lived requests: only the largest is kept, both containers map to it
    p = ext_pod(inits=[{"name": "i0", "resources": g(1)}, {"name": "i1", "resources": g(2)}],
                containers=[{"name": "c", "resources": {"requests": {"cpu": "1"}}}])
    reqs, maps = requests_and_mappings(p, {GPU: 2}, {GPU: _cls("k")})
    assert [(r["name"], r["exactly"]["count"]) for r in reqs] == [("container-1-request-0", 2)]
    assert [(m["containerName"], m["requestName"]) for m in maps] == [
        ("i0", "container-1-request-0"), ("i1", "container-1-request-0")]


# ---------------------------------------------------------------- NodeResourcesFit

def test_node_resources_fit_leaves_a_backed_resource_to_dra_where_the_node_does_not_advertise_it():
    t = table(("none", {}), ("zero", {GPU: "0"}), ("one", {GPU: "1"}), ("two", {GPU: "2"}))
    p = ext_pod(containers=[{"name": "c", "resources": {"requests": {GPU: "2"}}}])
    backed = instance(NodeResourcesFit, None, world())
    state = CycleState()
    backed.pre_filter(state, p, t)
    res = backed.filter(state, p, t, np.arange(t.n))
    assert res.passed.tolist() == [True, True, False, True]  # the device plugin's node is still checked
    assert reasons(res, t) == {f"Insufficient {GPU}": ["one"]}
    # without a class backing it, every node that lacks it fails
    plain = instance(NodeResourcesFit, None, world(classes=[ext_class(resource="example.com/other")]))
    state = CycleState()
    plain.pre_filter(state, p, t)
    res = plain.filter(state, p, t, np.arange(t.n))
    assert res.passed.tolist() == [False, False, False, True]
    # the node hint: a node that lacks it fits the pod when DRA serves it
    assert backed.node_change_hint(p, None, t.specs[0]) == QUEUE
    assert plain.node_change_hint(p, None, t.specs[0]) == SKIP


def test_node_resources_fit_device_class_hint():
    pl = instance(NodeResourcesFit, None, world())
    p = ext_pod()
    new = DeviceClass.from_dict(ext_class("k", GPU))
    other = DeviceClass.from_dict(ext_class("k", "example.com/other"))
    assert pl.device_class_hint(p, None, new) == QUEUE
    assert pl.device_class_hint(p, None, other) == SKIP
    assert pl.device_class_hint(p, other, new) == QUEUE
    assert pl.device_class_hint(p, new, new) == SKIP  # the same extendedResourceName
    implicit = ext_pod(containers=[{"name": "c", "resources": {"requests": {IMPLICIT_PREFIX + "k": "1"}}}])
    assert pl.device_class_hint(implicit, None, DeviceClass.from_dict(ext_class("k", None))) == QUEUE
    assert pl.device_class_hint(implicit, None, DeviceClass.from_dict(ext_class("j", None))) == SKIP


# ---------------------------------------------------------------- DynamicResources

def test_filter_allocates_the_special_claim_where_dra_serves_the_resource():
    h = world([gpu("g0"), gpu("g1")], [gpu("g0")], None, claims=[])
    t = table(("n0", {}), ("n1", {GPU: "0"}), ("n2", {}), ("n3", {GPU: "4"}))
    pl = instance(DynamicResources, None, h)
    p = ext_pod(containers=[{"name": "c", "resources": {"requests": {GPU: "2"}}}])
    st, res, state = run_filter(pl, p, t)
    assert st.is_success
    # n1 has one device, n2 none; n3's device plugin serves it (DRA has nothing to do there)
    assert res.passed.tolist() == [True, False, False, True]
    assert reasons(res, t) == {CANNOT_ALLOCATE: ["n1", "n2"]}
    assert res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert pl.reserve(state, p, "n0").is_success
    assert sorted(h.cache.allocated) == [(DRIVER, "n0", "g0"), (DRIVER, "n0", "g1")]  # in flight
    # a pod that asks for nothing a class backs: Skip
    plain = ext_pod(containers=[{"name": "c", "resources": {"requests": {"example.com/other": "1"}}}])
    assert pl.pre_filter(CycleState(), plain, t)[0].code == Code.SKIP


def test_a_resource_neither_advertised_nor_backed_cannot_fit():
    h = world([gpu("g0")], [gpu("g0")])
    t = table(("n0", {}), ("n1", {"example.com/other": "1"}))
    p = ext_pod(containers=[{"name": "c", "resources": {"requests": {GPU: "1", "example.com/other": "1"}}}])
    _, res, _ = run_filter(instance(DynamicResources, None, h), p, t)
    assert res.passed.tolist() == [False, True]
    assert reasons(res, t) == {CANNOT_FIT: ["n0"]}


def test_pre_bind_creates_the_claim_as_upstream_and_records_it_in_the_pod():
    h = world([gpu("g0"), gpu("g1")])
    t = table(("n0", {}))
    pl = instance(DynamicResources, None, h)
    p = ext_pod(containers=[{"name": "c", "resources": {"requests": {GPU: "1"}}}])
    _, res, state = run_filter(pl, p, t)
    assert res.passed.tolist() == [True]
    assert pl.reserve(state, p, "n0").is_success
    assert pl.pre_bind_pre_flight(state, p, "n0").is_success
    assert asyncio.run(pl.pre_bind(state, p, "n0")).is_success
    assert h.created == [{
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"namespace": "default", "generateName": "p-extended-resources-",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p",
                                          "controller": True}],
                     "annotations": {ANNOTATION: "true"}},
        "spec": {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {
            "deviceClassName": "gpu-class", "allocationMode": "ExactCount", "count": 1}}]}}}]
    obj = h.objects["default/p-extended-resources-x0"]
    assert obj["metadata"]["finalizers"] == [FINALIZER]
    assert obj["status"]["allocation"]["devices"]["results"] == [
        {"request": "container-0-request-0", "driver": DRIVER, "pool": "n0", "device": "g0"}]
    assert obj["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    assert h.pod_patches == [("/api/v1/namespaces/default/pods/p/status", {"status": {"extendedResourceClaimStatus": {
        "requestMappings": [{"containerName": "c", "resourceName": GPU, "requestName": "container-0-request-0"}],
        "resourceClaimName": "p-extended-resources-x0"}}})]
    # the created claim holds the device, the in-memory one no longer does
    assert not h.cache.pending and h.cache.allocated == {(DRIVER, "n0", "g0"): 1}
    # a failure after PreBind: Unreserve deletes the claim (its finalizer removed first)
    pl.unreserve(state, p, "n0")
    h.drain()
    assert h.deleted == ["/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/p-extended-resources-x0"]
    puts = [c for c in h.calls if c[0] == "PUT" and c[1].endswith("x0")]
    assert puts, "the finalizer is removed with an update before the DELETE"


def test_a_stale_claim_cannot_be_scheduled_and_post_filter_deletes_it():
    stale = claim("p-extended-resources-old", [{"name": "container-0-request-0", "exactly": {
        "deviceClassName": "gpu-class", "allocationMode": "ExactCount", "count": 1}}])
    stale["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p",
                                             "controller": True}]
    stale["metadata"]["annotations"] = {ANNOTATION: "true"}
    stale["metadata"]["finalizers"] = [FINALIZER]
    h = world([gpu("g0")], claims=[stale])
    t = table(("n0", {}), ("n1", {}))
    pl = instance(DynamicResources, None, h)
    p = ext_pod()
    _, res, state = run_filter(pl, p, t)
    assert reasons(res, t) == {CANNOT_SCHEDULE: ["n0", "n1"]}
    st, _ = pl.post_filter(state, p, t, None)
    assert (st.code, st.message()) == (Code.UNSCHEDULABLE, DELETED)
    h.drain()
    assert h.deleted == ["/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/p-extended-resources-old"]
    path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/p-extended-resources-old"
    assert h.calls == [("PUT", path), ("DELETE", path)]  # the finalizer removed, then the claim deleted
    # another pod's claim of this kind (owner differs) is not the pod's: an in-memory claim is used
    other = ext_pod("q", uid="uid-q")
    _, res, state = run_filter(pl, other, t)
    assert res.passed.tolist() == [True, False]
    st, _ = pl.post_filter(state, other, t, None)
    assert (st.code, st.message()) == (Code.UNSCHEDULABLE, "")
    assert state.read("DynamicResources/extended").claim.name == SPECIAL_NAME


def test_hostile_containers_give_no_request_rather_than_an_exception():
    p = ext_pod(containers=[{"name": "a", "resources": ["not", "a", "map"]},
                            {"name": "b", "resources": {"requests": {GPU: {"no": "quantity"}}}},
                            "not a container",
                            {"name": "c", "resources": {"requests": {GPU: "1"}}}])
    reqs, maps = requests_and_mappings(p, {GPU: 1}, {GPU: _cls("k")})
    assert [r["name"] for r in reqs] == ["container-3-request-0"] and [m["containerName"] for m in maps] == ["c"]


def test_the_special_claim_is_allocated_after_the_pods_own_claims():
    h = world([gpu("g0"), gpu("g1")], claims=[claim("mine", [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu-class"}}])])
    t = table(("n0", {}))
    pl = instance(DynamicResources, None, h)
    body = {"metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: "1"}}}],
                     "resourceClaims": [{"name": "own", "resourceClaimName": "mine"}]}, "status": {}}
    p = parse_pod(body)
    _, res, state = run_filter(pl, p, t)
    assert res.passed.tolist() == [True]
    assert pl.reserve(state, p, "n0").is_success
    devs = pl._devices(state.read("DynamicResources"), state.read("DynamicResources/extended"))
    assert [(d["claim"], d["device"]) for d in devs] == [("mine", f"{DRIVER}/n0/g0"), (SPECIAL_NAME, f"{DRIVER}/n0/g1")]
    assert asyncio.run(pl.pre_bind(state, p, "n0")).is_success
    assert h.objects["default/mine"]["status"]["allocation"]["devices"]["results"][0]["device"] == "g0"
    made = h.objects["default/p-extended-resources-x0"]
    assert made["status"]["allocation"]["devices"]["results"][0]["device"] == "g1"
    # one device only: the pod's claims and the special one cannot both be had
    h2 = world([gpu("g0")], claims=[claim("mine", [{"name": "gpu", "exactly": {"deviceClassName": "gpu-class"}}])])
    _, res, _ = run_filter(instance(DynamicResources, None, h2), p, t)
    assert reasons(res, t) == {CANNOT_ALLOCATE: ["n0"]}


def test_own_claims_and_a_device_plugin_fail_in_pre_bind_as_upstream():
    """upstream's case: a pod with a claim of its own, and its extended resource served by the
    node's device plugin. The special claim has no requests there; PreBind creates it, allocates
    it (nothing) and then cannot record it in the pod: an Error, at every attempt."""
    h = world([gpu("g0")], claims=[claim("mine", [{"name": "gpu", "exactly": {"deviceClassName": "gpu-class"}}])])
    t = table(("n0", {GPU: "1"}))
    pl = instance(DynamicResources, None, h)
    p = parse_pod({"metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
                   "spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: "1"}}}],
                            "resourceClaims": [{"name": "own", "resourceClaimName": "mine"}]}, "status": {}})
    _, res, state = run_filter(pl, p, t)
    assert res.passed.tolist() == [True]
    assert pl.reserve(state, p, "n0").is_success
    st = asyncio.run(pl.pre_bind(state, p, "n0"))
    assert st.code == Code.ERROR
    assert st.message() == "nil or empty request mappings, no update of pod default/p ExtendedResourceClaimStatus"
    assert h.created[0]["spec"] == {} and not h.pod_patches
    pl.unreserve(state, p, "n0")
    h.drain()
    assert h.deleted == ["/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/p-extended-resources-x0"]


def test_a_claim_left_without_requests_is_bound_as_it_is():
    """A claim of an earlier attempt that has no requests passes Filter (upstream checks only a
    claim with requests): it gets the node's requests in memory and PreBind binds it, creating
    nothing."""
    left = claim("p-extended-resources-old", [])
    left["spec"] = {}
    left["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p",
                                            "controller": True}]
    left["metadata"]["annotations"] = {ANNOTATION: "true"}
    h = world([gpu("g0")], claims=[left])
    t = table(("n0", {}))
    pl = instance(DynamicResources, None, h)
    p = ext_pod()
    _, res, state = run_filter(pl, p, t)
    assert res.passed.tolist() == [True]
    assert pl.reserve(state, p, "n0").is_success
    assert asyncio.run(pl.pre_bind(state, p, "n0")).is_success
    assert not h.created
    obj = h.objects["default/p-extended-resources-old"]
    assert obj["status"]["allocation"]["devices"]["results"][0]["device"] == "g0"
    assert h.pod_patches[0][1]["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == \
        "p-extended-resources-old"
