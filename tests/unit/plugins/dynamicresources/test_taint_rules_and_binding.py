"""DeviceTaintRules (taints laid over slices by driver, pool and device; their effects; rule
removal) and binding conditions (the allocation result carries them; PreBind waits for them,
fails on a failure condition, times out; Filter and PostFilter then free the claim), as
upstream v1.37.1."""

from __future__ import annotations

import asyncio
import copy

import pytest
from support.drakit import DRIVER, DraHandle, claim, device_class, filter_all, gpu, nodes, pod, reasons_of, request, \
    resource_slice
from support.kit import arg_errors, instance

from policy_scheduler.framework.events import ActionType, Resource
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.dynamicresources import binding_conditions as bc
from policy_scheduler.plugins.dynamicresources.dynamic_resources import DEALLOCATED, NOT_AVAILABLE, DynamicResources

C, S, D, R = "resourceclaims", "resourceslices", "deviceclasses", "devicetaintrules"


def rule(name, effect="NoSchedule", key="example.com/bad", value="yes", rv="1", **selector):
    spec = {"taint": {"key": key, "value": value, "effect": effect}}
    if selector.pop("no_selector", False) is False:
        spec["deviceSelector"] = selector
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name, "resourceVersion": rv}, "spec": spec}


def two_nodes(extra_claims=()):
    """n0: pool n0 (g0, g1) of DRIVER; n1: pool n1 (g0) of DRIVER and pool other (h0) of other.example.com."""
    h = DraHandle()
    h.add(D, device_class(), device_class("any", selectors=["true"]))
    h.add(S, resource_slice("n0", [gpu("g0"), gpu("g1")]), resource_slice("n1", [gpu("g0")]),
          resource_slice("n1", [gpu("h0")], name="n1-other", pool="other", driver="other.example.com"))
    h.add(C, claim("one", [request(cls="any")]), claim("two", [request(cls="any", count=2)]),
          claim("tol", [request(cls="any", tolerations=[{"key": "example.com/bad", "operator": "Exists"}])]),
          *extra_claims)
    return h, nodes("n0", "n1")


def devices(h, t, claim_name):
    """node -> the devices the claim gets there (None: the node does not fit)."""
    pl = instance(DynamicResources, None, h)
    _, res, state = filter_all(pl, pod("p", claims=[claim_name]), t)
    st = state.read("DynamicResources")  # allocator.STATE_KEY
    out = {}
    for i, n in enumerate(t.names):
        if not res.passed[i]:
            out[n] = None
            continue
        a = st.allocator.results(st.by_node[n], n)[0].result
        out[n] = [f"{r['pool']}/{r['device']}" for r in a["devices"]["results"]]
    return out


def taints(h, slice_name):
    return {d.name: [(t.key, t.effect) for t in d.taints] for d in h.cache.slices[slice_name].devices}


def test_rules_select_by_driver_pool_and_device():
    h, t = two_nodes()
    assert devices(h, t, "one") == {"n0": ["n0/g0"], "n1": ["n1/g0"]}
    h.add(R, rule("by-device", device="g0"))  # every g0, whatever the driver and pool
    assert devices(h, t, "one") == {"n0": ["n0/g1"], "n1": ["other/h0"]}
    h.add(R, rule("by-pool", pool="n0", device="g1"))
    assert devices(h, t, "one") == {"n0": None, "n1": ["other/h0"]}
    h.add(R, rule("by-driver", driver="other.example.com"))
    assert devices(h, t, "one") == {"n0": None, "n1": None}
    # a request that tolerates the taint still gets the first device
    assert devices(h, t, "tol") == {"n0": ["n0/g0"], "n1": ["n1/g0"]}
    assert taints(h, "n1-other") == {"h0": [("example.com/bad", "NoSchedule")]}
    assert taints(h, "n0-slice") == {"g0": [("example.com/bad", "NoSchedule")],
                                     "g1": [("example.com/bad", "NoSchedule")]}


def test_empty_selector_matches_all_and_no_selector_matches_none():
    h, t = two_nodes()
    h.add(R, rule("none", no_selector=True))
    assert devices(h, t, "one") == {"n0": ["n0/g0"], "n1": ["n1/g0"]}
    h.add(R, rule("all"))
    assert devices(h, t, "one") == {"n0": None, "n1": None}
    assert devices(h, t, "tol") == {"n0": ["n0/g0"], "n1": ["n1/g0"]}


@pytest.mark.parametrize("effect,blocks", [("NoSchedule", True), ("NoExecute", True), ("None", False),
                                           ("SomethingNew", False)])
def test_rule_effects(effect, blocks):
    h, t = two_nodes()
    h.add(R, rule("r", effect=effect, pool="n0", device="g0"))
    assert devices(h, t, "one")["n0"] == (["n0/g1"] if blocks else ["n0/g0"])
    assert devices(h, t, "two")["n0"] == (None if blocks else ["n0/g0", "n0/g1"])


def test_rule_change_and_removal_are_slice_updates_and_keep_the_slices_own_taints():
    h, t = two_nodes()
    own = [{"key": "driver/own", "value": "1", "effect": "NoSchedule"}]
    h.add(S, resource_slice("n0", [gpu("g0", taints=own), gpu("g1")]) | {
        "metadata": {"name": "n0-slice", "resourceVersion": "2"}})
    evs = h.cache.apply(R, "ADDED", rule("r", pool="n0", device="g1"))
    assert [(e.resource, e.action, old.name) for e, old, new in evs] == [
        (Resource.RESOURCE_SLICE, ActionType.UPDATE, "n0-slice")]
    assert taints(h, "n0-slice") == {"g0": [("driver/own", "NoSchedule")], "g1": [("example.com/bad", "NoSchedule")]}
    assert devices(h, t, "one")["n0"] is None
    # the same rule again (a resync): nothing; its effect changed to None: the device is usable again
    assert h.cache.apply(R, "MODIFIED", rule("r", pool="n0", device="g1")) == []
    evs = h.cache.apply(R, "MODIFIED", rule("r", effect="None", pool="n0", device="g1", rv="2"))
    assert len(evs) == 1 and devices(h, t, "one")["n0"] == ["n0/g1"]
    # a slice published again keeps the rule's taint; the rule deleted: only the slice's own taints
    h.add(S, resource_slice("n0", [gpu("g0", taints=own), gpu("g1")]) | {
        "metadata": {"name": "n0-slice", "resourceVersion": "3"}})
    assert taints(h, "n0-slice")["g1"] == [("example.com/bad", "None")]
    evs = h.cache.apply(R, "DELETED", rule("r", rv="2"))
    assert len(evs) == 1 and taints(h, "n0-slice") == {"g0": [("driver/own", "NoSchedule")], "g1": []}
    assert h.cache.apply(R, "DELETED", rule("r", rv="2")) == []
    # a rule before any slice: a slice added later is tainted
    h2 = DraHandle()
    h2.add(R, rule("early", device="g0"))
    h2.add(S, resource_slice("n0", [gpu("g0"), gpu("g1")]))
    assert taints(h2, "n0-slice") == {"g0": [("example.com/bad", "NoSchedule")], "g1": []}


def test_hostile_rules_are_refused_on_themselves():
    h, t = two_nodes()
    for bad in ({"metadata": {"name": "x"}, "spec": {"deviceSelector": {"device": ["g0"]}}},
                {"metadata": {"name": "x"}, "spec": {"deviceSelector": "all"}},
                {"metadata": {"name": "x"}, "spec": {"taint": 5}}):
        assert h.state.apply_dra(R, "ADDED", bad) == []
    assert not h.cache.taint_rules and devices(h, t, "one")["n0"] == ["n0/g0"]


# ---------------------------------------------------------------- binding conditions

def bc_world(timeout=None):
    h = DraHandle()
    h.add(D, device_class())
    dev = gpu("g0") | {"bindingConditions": ["Attached"], "bindingFailureConditions": ["AttachFailed"],
                       "bindsToNode": True}
    # the pool with binding conditions sorts first by name, but is searched last
    h.add(S, resource_slice("n0", [dev], name="a-slice", pool="a-pool", allNodes=True),
          resource_slice("n0", [gpu("g1")], name="z-slice", pool="z-pool"))
    h.add(C, claim("x"), claim("y"))
    pl = instance(DynamicResources, {"bindingTimeoutSeconds": timeout} if timeout else None, h)
    return h, pl, nodes("n0")


def reserved(h, pl, t, names=("x", "y")):
    p = pod("p", claims=list(names))
    _, res, state = filter_all(pl, p, t)
    assert res.passed.all() and pl.reserve(state, p, "n0").is_success
    return p, state


def set_device_conditions(h, name, **conds):
    """What a driver does: status.devices of the claim's device with the conditions, delivered by the informer."""
    body = copy.deepcopy(h.objects[f"default/{name}"])
    r = body["status"]["allocation"]["devices"]["results"][0]
    body["status"]["devices"] = [{"driver": r["driver"], "pool": r["pool"], "device": r["device"], "conditions": [
        {"type": k, "status": s, "reason": "Driver", "message": f"{k} is {s}",
         "lastTransitionTime": "2026-01-01T00:00:00Z"} for k, s in conds.items()]}]
    body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
    h.objects[f"default/{name}"] = body
    h.cache.apply(C, "MODIFIED", body)


def run_with(coro, *later):
    """Run ``coro``; each (delay, fn) of ``later`` runs meanwhile after its delay."""
    async def main():
        async def at(delay, fn):
            await asyncio.sleep(delay)
            fn()
        tasks = [asyncio.ensure_future(at(d, fn)) for d, fn in later]
        out = await coro
        for tk in tasks:
            tk.cancel()
        return out
    return asyncio.run(main())


@pytest.fixture
def fast_polls(monkeypatch):
    monkeypatch.setattr(bc, "POLL_INTERVAL", 0.05)


def test_allocation_carries_binding_conditions_and_binds_to_the_node(fast_polls):
    h, pl, t = bc_world()
    p, state = reserved(h, pl, t)
    res = [a.result for a in state.read("DynamicResources").allocator.results(
        state.read("DynamicResources").by_node["n0"], "n0")]
    assert res[0]["devices"]["results"] == [{"request": "gpu", "driver": DRIVER, "pool": "z-pool", "device": "g1"}]
    assert res[1]["devices"]["results"] == [{"request": "gpu", "driver": DRIVER, "pool": "a-pool", "device": "g0",
                                             "bindingConditions": ["Attached"],
                                             "bindingFailureConditions": ["AttachFailed"]}]
    # bindsToNode: pinned to the node though the slice is for all nodes
    assert res[1]["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]}


def test_pre_bind_waits_for_the_binding_conditions(fast_polls):
    h, pl, t = bc_world()
    p, state = reserved(h, pl, t)
    st = run_with(pl.pre_bind(state, p, "n0"), (0.2, lambda: set_device_conditions(h, "y", Attached="False")),
                  (0.4, lambda: set_device_conditions(h, "y", Attached="True")))
    assert st.is_success, st.reasons
    # written before the wait: both claims allocated and reserved for the pod
    y = h.objects["default/y"]
    assert y["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    assert y["status"]["allocation"]["allocationTimestamp"]


def test_pre_bind_returns_before_the_condition_only_when_none_is_needed(fast_polls):
    h, pl, t = bc_world()
    p = pod("p", claims=["x"])
    _, _, state = filter_all(pl, p, t)
    pl.reserve(state, p, "n0")
    assert asyncio.run(asyncio.wait_for(pl.pre_bind(state, p, "n0"), 1.0)).is_success


def test_failure_condition_fails_pre_bind_then_the_claim_is_freed(fast_polls):
    h, pl, t = bc_world()
    p, state = reserved(h, pl, t)
    st = run_with(pl.pre_bind(state, p, "n0"),
                  (0.1, lambda: set_device_conditions(h, "y", Attached="False", AttachFailed="True")))
    assert (st.code, st.reasons) == (Code.ERROR, ('device binding failed: claim=y, reason=Driver, '
                                                  'message="AttachFailed is True"',))
    pl.unreserve(state, p, "n0")
    h.drain()
    y = h.objects["default/y"]
    assert y["status"]["allocation"] and not y["status"]["reservedFor"]  # the allocation stays
    h.cache.apply(C, "MODIFIED", y)
    # the next attempt: the claim is available nowhere, PostFilter deallocates it
    _, res, state = filter_all(pl, p, t)
    assert reasons_of(res, t) == {NOT_AVAILABLE: ["n0"]}
    st, _ = pl.post_filter(state, p, t, None)
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE, (DEALLOCATED,))
    h.drain()
    assert "allocation" not in h.objects["default/y"]["status"] and "devices" not in h.objects["default/y"]["status"]


def test_binding_timeout():
    h, pl, t = bc_world(timeout=1)
    p, state = reserved(h, pl, t)
    st = asyncio.run(pl.pre_bind(state, p, "n0"))  # polls at once, then the deadline comes before 5 s
    assert (st.code, st.reasons) == (Code.ERROR, ("device binding timeout: context deadline exceeded",))
    # the claim's own allocationTimestamp + timeout passed: the poll says so, and Filter frees it
    y = copy.deepcopy(h.objects["default/y"])
    y["status"]["allocation"]["allocationTimestamp"] = "2026-01-01T00:00:00Z"
    y["status"]["reservedFor"] = []
    y["metadata"]["resourceVersion"] = "99"
    h.cache.apply(C, "MODIFIED", y)
    claims = [h.cache.claim("default", "y")]
    assert asyncio.run(bc.wait_for_binding(claims, lambda c: h.cache.claim("default", c.name), 600.0, 0.05)) == \
        "device binding timeout: claim=y"
    _, res, _ = filter_all(pl, pod("q", claims=["y"]), t)
    assert reasons_of(res, t) == {NOT_AVAILABLE: ["n0"]}
    # not timed out yet (the default 600 s): the claim stays available on its node
    h2, pl2, t2 = bc_world()
    h2.cache.apply(C, "MODIFIED", y | {"metadata": dict(y["metadata"], resourceVersion="100")})
    y2 = h2.cache.claim("default", "y")
    assert not bc.unavailable(y2, 600.0, bc.allocation_time(y2) + 599)
    assert bc.unavailable(y2, 600.0, bc.allocation_time(y2) + 601)


def test_binding_timeout_is_validated():
    assert arg_errors("DynamicResources", {"bindingTimeoutSeconds": 0.5})
    assert not arg_errors("DynamicResources", {"bindingTimeoutSeconds": 1})
    assert instance(DynamicResources, None, DraHandle()).binding_timeout == 600.0


def test_pre_bind_of_a_claim_allocated_before_adds_no_finalizer_and_sets_the_timestamp():
    """upstream bindClaim: the finalizer only with an allocation of its own; allocationTimestamp
    set when missing; a claim deallocated meanwhile is an Error."""
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "z-pool", "device": "g1"}]}}
    h, pl, t = bc_world()
    h.add(C, claim("pre", allocation=alloc))
    p = pod("p", claims=["pre"])
    _, _, state = filter_all(pl, p, t)
    assert pl.reserve(state, p, "n0").is_success
    assert asyncio.run(pl.pre_bind(state, p, "n0")).is_success
    obj = h.objects["default/pre"]
    assert "finalizers" not in obj["metadata"] and obj["status"]["allocation"]["allocationTimestamp"]
    assert [m for m, path in h.calls if not path.endswith("/status")] == []
    h.add(C, claim("gone", allocation=alloc))
    q = pod("q", claims=["gone"])
    _, _, state = filter_all(pl, q, t)
    pl.reserve(state, q, "n0")
    h.objects["default/gone"]["status"] = {}
    h.objects["default/gone"]["metadata"]["resourceVersion"] = "5"
    st = asyncio.run(pl.pre_bind(state, q, "n0"))
    assert (st.code, st.reasons) == (Code.ERROR, ("claim default/gone got deallocated elsewhere in the meantime",))
