"""DynamicResources (upstream dynamicresources, v1.37) and its allocator: claim resolution and
its messages, the allocator's search order (pools, slices, devices, requests), selectors,
matchAttribute, All, firstAvailable and its score, admin access, device taints, in-flight
allocations, PreBind's writes, PostFilter's deallocation, and the queueing hints."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from support.drakit import (DRIVER, DraHandle, claim, device_class, filter_all, first_available, gpu, nodes, pod,
                    reasons_of, request, resource_slice)
from support.kit import QUEUE, SKIP, instance

from policy_scheduler.framework.events import ActionType, Resource
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.plugins.dynamicresources.objects import FINALIZER, ResourceClaim
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.dynamicresources.dynamic_resources import (CANNOT_ALLOCATE, DEALLOCATED, NOT_AVAILABLE,
                                                                         STATE_KEY, DynamicResources)

C, S, D = "resourceclaims", "resourceslices", "deviceclasses"


def world(*node_devices, claims=(), classes=None):
    """One node per entry of ``node_devices`` (a list of gpu() devices), named n0, n1, ..."""
    h = DraHandle()
    h.add(D, *(classes if classes is not None else [device_class()]))
    for i, devs in enumerate(node_devices):
        h.add(S, resource_slice(f"n{i}", devs))
    h.add(C, *claims)
    return h, nodes(*(f"n{i}" for i in range(len(node_devices))))


def plugin(h):
    return instance(DynamicResources, None, h)


def allocations(state, node):
    st = state.read(STATE_KEY)
    return [a.result for a in st.allocator.results(st.by_node[node], node)]


def devices_on(res, table, st, node):
    return [[r["device"] for r in a["devices"]["results"]] for a in allocations(st, node)]


# ---------------------------------------------------------------- claims of a pod

def test_pre_enqueue_and_pre_filter_messages():
    h, t = world([gpu("g0")], claims=[claim("mine", owner="uid-p"), claim("theirs", owner="someone-else"),
                                      claim("gone", deleting=True)])
    pl = plugin(h)
    cases = [
        (pod("p", templates=[("gpu", "tmpl")]), 'pod "default/p": ResourceClaim not created yet'),
        (pod("p", claims=["nope"]), 'could not find ResourceClaim "default/nope"'),
        (pod("p", claims=["gone"]), 'resourceclaim "gone" is being deleted'),
        (pod("p", templates=[("gpu", "tmpl")], statuses={"gpu": "theirs"}),
         "ResourceClaim default/theirs was not created for Pod default/p (Pod is not owner)"),
    ]
    for p, msg in cases:
        st = pl.pre_enqueue(p)
        assert (st.code, st.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,))
        st, _ = pl.pre_filter(CycleState(), p, t)
        assert st.reasons == (msg,)
    assert pl.pre_enqueue(pod("p", templates=[("gpu", "tmpl")], statuses={"gpu": "mine"})).is_success
    # a claim the controller intentionally did not create is skipped; no claims at all: Skip
    assert pl.pre_filter(CycleState(), pod("p", templates=[("gpu", "t")], statuses={"gpu": None}), t)[0].code == Code.SKIP
    assert pl.pre_filter(CycleState(), pod("q"), t)[0].code == Code.SKIP


def test_pre_filter_checks_classes():
    h, t = world([gpu("g0")], claims=[claim("a", [request(cls="missing")]),
                                      claim("b", [first_available("r", request("x"), request("y", cls="nope"))]),
                                      claim("c", [{"name": "r"}]), claim("d", [request(cls="")])])
    pl = plugin(h)
    msgs = {n: pl.pre_filter(CycleState(), pod("p", claims=[n]), t)[0] for n in "abcd"}
    assert msgs["a"].reasons == ("request gpu: device class missing does not exist",)
    assert msgs["b"].reasons == ("request r/y: device class nope does not exist",)
    assert msgs["c"].reasons == ("resource claim default/c, request r: unknown request type",)
    assert msgs["d"].code == Code.ERROR and msgs["d"].reasons == ("request gpu: unsupported request type",)


# ---------------------------------------------------------------- the allocator

def test_first_device_in_order_and_in_flight_devices_are_taken():
    h, t = world([gpu("g0"), gpu("g1")], [gpu("g0")], claims=[claim("a"), claim("b"), claim("c"), claim("d")])
    pl = plugin(h)
    st, res, state = filter_all(pl, pod("pa", claims=["a"]), t)
    assert res.passed.all() and devices_on(res, t, state, "n0") == [["g0"]]
    assert pl.reserve(state, pod("pa", claims=["a"]), "n0").is_success
    assert h.cache.in_use((DRIVER, "n0", "g0"))
    _, res, state_b = filter_all(pl, pod("pb", claims=["b"]), t)
    assert devices_on(res, t, state_b, "n0") == [["g1"]] and devices_on(res, t, state_b, "n1") == [["g0"]]
    pl.reserve(state_b, pod("pb", claims=["b"]), "n0")
    _, res, _ = filter_all(pl, pod("pc", claims=["c"]), t)
    assert list(res.passed) == [False, True]
    assert reasons_of(res, t) == {CANNOT_ALLOCATE: ["n0"]} and res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    pl.unreserve(state, pod("pa", claims=["a"]), "n0")  # frees g0 on n0
    assert not h.cache.in_use((DRIVER, "n0", "g0"))
    _, res, state_d = filter_all(pl, pod("pd", claims=["d"]), t)
    assert devices_on(res, t, state_d, "n0") == [["g0"]]


def test_selectors_class_then_request():
    cls = device_class(selectors=[f'device.driver == "{DRIVER}"'])
    big = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0'
    h, t = world([gpu("small", memory="20Gi"), gpu("h", model="h100", memory="80Gi"), gpu("a", memory="40Gi")],
                 claims=[claim("x", [request(selectors=[big, 'device.attributes["gpu.example.com"].model == "a100"'])]),
                         claim("y", [request(selectors=[big])])], classes=[cls])
    _, res, state = filter_all(plugin(h), pod("p", claims=["x"]), t)
    assert devices_on(res, t, state, "n0") == [["a"]]
    _, res, state = filter_all(plugin(h), pod("p", claims=["y"]), t)
    assert devices_on(res, t, state, "n0") == [["h"]]


def test_cel_runtime_error_is_an_error():
    h, t = world([gpu("g0")], claims=[claim("x", [request(selectors=['device.attributes["gpu.example.com"].nope == 1'])])])
    _, res, _ = filter_all(plugin(h), pod("p", claims=["x"]), t)
    assert res.error is not None and res.error.code == Code.ERROR
    assert res.error.reasons[0].startswith(
        "claim default/x: selector #0 on device gpu.example.com/n0/g0: CEL runtime error: no such key: nope")


def test_match_attribute_backtracks_to_one_pci_root():
    devs = [gpu("g0", root="r0"), gpu("g1", root="r1"), gpu("g2", root="r1")]
    h, t = world(devs, claims=[claim("x", [request(count=2)],
                                     constraints=[{"matchAttribute": "resource.kubernetes.io/pciRoot"}]),
                               claim("y", [request(count=2)], constraints=[{"matchAttribute": "gpu.example.com/model"}]),
                               claim("z", [request(count=2)], constraints=[{"matchAttribute": "gpu.example.com/missing"}])])
    _, res, state = filter_all(plugin(h), pod("p", claims=["x"]), t)
    assert devices_on(res, t, state, "n0") == [["g1", "g2"]]
    _, res, state = filter_all(plugin(h), pod("p", claims=["y"]), t)  # a bare attribute, qualified by the driver
    assert devices_on(res, t, state, "n0") == [["g0", "g1"]]
    _, res, _ = filter_all(plugin(h), pod("p", claims=["z"]), t)
    assert not res.passed.any()


def test_all_mode_takes_every_matching_device_and_refuses_incomplete_pools():
    h, t = world([gpu("g0"), gpu("g1", model="h100"), gpu("g2")],
                 claims=[claim("x", [request(mode="All", selectors=['device.attributes["gpu.example.com"].model == "a100"'])])])
    _, res, state = filter_all(plugin(h), pod("p", claims=["x"]), t)
    assert devices_on(res, t, state, "n0") == [["g0", "g2"]]
    h.add(S, resource_slice("n0", [gpu("g9")], name="extra", pool="n0", count=2, generation=2))
    _, res, _ = filter_all(plugin(h), pod("p", claims=["x"]), t)
    assert res.error is not None
    assert res.error.reasons[0] == ("claim default/x, request gpu: asks for all devices, but resource pool "
                                    "gpu.example.com/n0 is currently being updated")


def test_first_available_falls_back_and_scores_the_earlier_subrequest_higher():
    h, t = world([gpu("g0", model="h100")], [gpu("g0"), gpu("g1")],
                 claims=[claim("x", [first_available("gpu", request("two", count=2), request("one"))])])
    pl = plugin(h)
    _, res, state = filter_all(pl, pod("p", claims=["x"]), t)
    assert devices_on(res, t, state, "n0") == [["g0"]] and devices_on(res, t, state, "n1") == [["g0", "g1"]]
    results = allocations(state, "n0")[0]["devices"]["results"]
    assert results[0]["request"] == "gpu/one"
    scores = pl.score(state, pod("p", claims=["x"]), t, np.arange(2))
    assert list(scores) == [7, 8]
    assert list(pl.normalize_score(state, None, t, np.arange(2), scores)) == [87, 100]


def test_admin_access_may_use_an_allocated_device():
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "g0"}]}}
    h, t = world([gpu("g0")], claims=[claim("held", allocation=alloc), claim("x"), claim("adm", [request(admin=True)])])
    _, res, _ = filter_all(plugin(h), pod("p", claims=["x"]), t)
    assert not res.passed.any()
    _, res, state = filter_all(plugin(h), pod("p", claims=["adm"]), t)
    assert devices_on(res, t, state, "n0") == [["g0"]]
    assert allocations(state, "n0")[0]["devices"]["results"][0]["adminAccess"] is True


def test_device_taints_need_a_toleration():
    taint = [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]
    h, t = world([gpu("g0", taints=taint), gpu("g1", taints=[{"key": "info", "effect": "None"}])],
                 claims=[claim("x", [request(count=2)]),
                         claim("y", [request(count=2, tolerations=[{"key": "broken", "operator": "Exists"}])])])
    _, res, _ = filter_all(plugin(h), pod("p", claims=["x"]), t)
    assert not res.passed.any()
    _, res, state = filter_all(plugin(h), pod("p", claims=["y"]), t)
    assert devices_on(res, t, state, "n0") == [["g0", "g1"]]
    assert allocations(state, "n0")[0]["devices"]["results"][0]["tolerations"] == [
        {"key": "broken", "operator": "Exists"}]


def test_pools_sorted_and_multi_node_slices_by_selector():
    h = DraHandle()
    h.add(D, device_class())
    h.add(S, resource_slice("", [gpu("z0")], name="zz", pool="zpool", allNodes=True),
          resource_slice("", [gpu("s0")], name="sel", pool="apool",
                         nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "rack", "operator": "In", "values": ["r1"]}]}]}))
    h.add(C, claim("x"))
    t = nodes("n0", "n1", labels={"n1": {"rack": "r1"}})
    _, res, state = filter_all(plugin(h), pod("p", claims=["x"]), t)
    assert devices_on(res, t, state, "n0") == [["z0"]] and devices_on(res, t, state, "n1") == [["s0"]]
    a = allocations(state, "n0")[0]
    assert "nodeSelector" not in a  # allNodes: usable everywhere
    sel = allocations(state, "n1")[0]["nodeSelector"]
    assert sel["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "rack"


# ---------------------------------------------------------------- allocated claims, PostFilter

def test_allocated_claim_pins_the_pod_and_post_filter_deallocates():
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "g0"}]},
             "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                 {"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]}}
    h, t = world([gpu("g0")], [gpu("g0")], claims=[claim("x", allocation=alloc)])
    pl = plugin(h)
    _, res, state = filter_all(pl, pod("p", claims=["x"]), t)
    assert list(res.passed) == [True, False] and reasons_of(res, t) == {NOT_AVAILABLE: ["n1"]}
    # n0 is taken by something else in this cycle: nothing fits, the claim is freed
    st, nominated = pl.post_filter(state, pod("p", claims=["x"]), t, None)
    assert (st.code, st.reasons, nominated) == (Code.UNSCHEDULABLE, (DEALLOCATED,), None)
    h.drain()
    assert "allocation" not in h.objects["default/x"]["status"]
    assert h.cache.claim("default", "x").allocation is None  # assumed until the informer catches up
    assert not h.cache.in_use((DRIVER, "n0", "g0"))
    # reserved for another pod: left alone
    h2, t2 = world([gpu("g0")], [gpu("g0")], claims=[claim("x", allocation=alloc, reserved=[
        {"resource": "pods", "name": "o", "uid": "other"}])])
    pl2 = plugin(h2)
    _, _, state = filter_all(pl2, pod("p", claims=["x"]), t2)
    st, _ = pl2.post_filter(state, pod("p", claims=["x"]), t2, None)
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE, ()) and not h2.spawned


def test_shared_claim_in_flight_waits():
    h, t = world([gpu("g0")], claims=[claim("shared")])
    pl = plugin(h)
    _, _, state = filter_all(pl, pod("a", claims=["shared"]), t)
    pl.reserve(state, pod("a", claims=["shared"]), "n0")
    st, _ = pl.pre_filter(CycleState(), pod("b", claims=["shared"]), t)
    assert st.reasons == ("resource claim default/shared is in the process of being allocated",)


# ---------------------------------------------------------------- PreBind

def test_pre_bind_writes_finalizer_allocation_and_reservation():
    h, t = world([gpu("g0")], claims=[claim("x")])
    pl = plugin(h)
    p = pod("p", claims=["x"])
    _, _, state = filter_all(pl, p, t)
    assert pl.reserve(state, p, "n0").is_success
    h.conflicts = 1  # one conflict: read again, write again
    st = asyncio.run(pl.pre_bind(state, p, "n0"))
    assert st.is_success, st.reasons
    obj = h.objects["default/x"]
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert obj["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    res = obj["status"]["allocation"]
    assert res["devices"]["results"] == [{"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "g0"}]
    assert res["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n0"]
    assert "allocationTimestamp" in res
    assert not h.cache.pending and h.cache.in_use((DRIVER, "n0", "g0"))
    # a second pod sharing the claim is only added to reservedFor
    q = pod("q", claims=["x"])
    _, res2, state2 = filter_all(pl, q, t)
    assert res2.passed.all() and pl.reserve(state2, q, "n0").is_success
    assert asyncio.run(pl.pre_bind(state2, q, "n0")).is_success
    assert [r["uid"] for r in h.objects["default/x"]["status"]["reservedFor"]] == ["uid-p", "uid-q"]
    # binding q failed after PreBind: Unreserve takes q out of reservedFor, the allocation stays
    pl.unreserve(state2, q, "n0")
    h.drain()
    assert [r["uid"] for r in h.objects["default/x"]["status"]["reservedFor"]] == ["uid-p"]
    assert h.objects["default/x"]["status"]["allocation"]


def test_pre_bind_refuses_a_claim_allocated_elsewhere():
    h, t = world([gpu("g0")], claims=[claim("x")])
    pl = plugin(h)
    p = pod("p", claims=["x"])
    _, _, state = filter_all(pl, p, t)
    pl.reserve(state, p, "n0")
    h.objects["default/x"]["status"]["allocation"] = {"devices": {"results": []}}
    h.objects["default/x"]["metadata"]["resourceVersion"] = "7"  # written by someone else: our copy is stale
    st = asyncio.run(pl.pre_bind(state, p, "n0"))
    assert (st.code, st.reasons) == (Code.ERROR, ("claim default/x got allocated elsewhere in the meantime",))


# ---------------------------------------------------------------- hints

def test_claim_hints():
    h, t = world([gpu("g0")], claims=[claim("x"), claim("other")])
    pl = plugin(h)
    p = pod("p", claims=["x"])
    c = lambda **kw: ResourceClaim.from_dict(claim(**kw))  # noqa: E731
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "g0"}]}}
    assert pl.claim_hint(p, None, c(name="x")) == QUEUE
    assert pl.claim_hint(p, None, c(name="other")) == SKIP
    assert pl.claim_hint(p, c(name="other", allocation=alloc), c(name="other")) == QUEUE  # freed devices
    assert pl.claim_hint(p, c(name="x"), c(name="x", rv="2")) == SKIP  # same status
    assert pl.claim_hint(p, c(name="other", allocation=alloc), None) == QUEUE
    assert pl.claim_hint(p, c(name="other"), None) == SKIP
    gated = pod("g", templates=[("gpu", "t")])
    assert pl.pod_claims_hint(gated, None, gated) == SKIP
    assert pl.pod_claims_hint(gated, None, pod("g", templates=[("gpu", "t")], statuses={"gpu": "x"})) == SKIP  # not owner
    regs = {(r.event.resource, r.event.action) for r in pl.events_to_register()}
    assert (Resource.TARGET_POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM) in regs
    assert (Resource.RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE) in regs


def test_hostile_objects_are_refused_on_themselves():
    h = DraHandle()
    for kind, body in [(S, {"metadata": {"name": "s"}, "spec": {"devices": "nope"}}),
                       (C, {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [1]}}}),
                       (D, {"metadata": {"name": "d"}, "spec": {"selectors": {"x": 1}}})]:
        with pytest.raises(ValueError):
            h.cache.apply(kind, "ADDED", body)
    assert len(h.cache) == 0


def test_post_filter_after_an_earlier_pre_filter_rejection_says_not_found_as_upstream():
    h, t = world([gpu("g0")])
    pl = plugin(h)
    st, _ = pl.post_filter(CycleState(), pod("p"), t, None)  # PreFilter never ran
    assert (st.code, st.reasons) == (Code.ERROR, ("not found",))
    state = CycleState()
    assert pl.pre_filter(state, pod("p"), t)[0].code == Code.SKIP  # no claims: state written, Skip
    st, _ = pl.post_filter(state, pod("p"), t, None)
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE, ())
