"""DynamicResources' per-node Filter timeout (upstream ``filterTimeout``, DRASchedulerFilterTimeout,
beta and on in v1.37, 10 s by default): a search that runs past it fails the attempt with
upstream's Error naming the node; 0 turns it off."""

from __future__ import annotations

import time

from support.drakit import DRIVER, DraHandle, claim, device_class, filter_all, gpu, nodes, pod, request, \
    resource_slice
from support.kit import arg_errors, instance

from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.dynamicresources.dynamic_resources import DynamicResources

C, D, S = "resourceclaims", "deviceclasses", "resourceslices"


def hard_world(timeout=None):
    """24 devices; one claim asking for 12 and then 13 more: no solution, and the depth-first
    search tries every way of taking the first 12 before it can say so (C(24, 12) of them)."""
    h = DraHandle()
    h.add(D, device_class())
    h.add(S, resource_slice("n0", [gpu(f"g{i:02d}") for i in range(24)]))
    h.add(C, claim("big", requests=[request("a", count=12), request("b", count=13)]))
    pl = instance(DynamicResources, None if timeout is None else {"filterTimeoutSeconds": timeout}, h)
    return h, pl, nodes("n0")


def test_a_search_past_the_timeout_is_an_error_naming_the_node():
    _, pl, t = hard_world(timeout=0.05)
    t0 = time.monotonic()
    st, res, _ = filter_all(pl, pod("p", claims=["big"]), t)
    took = time.monotonic() - t0
    assert st.is_success and res is not None and res.error is not None
    assert (res.error.code, res.error.reasons) == (Code.ERROR, ("node n0: timed out trying to allocate devices",))
    assert not res.passed.any()
    assert took < 2.0, took  # stopped near its deadline, not after the whole search


def test_the_default_is_ten_seconds_and_zero_turns_it_off():
    assert hard_world()[1].filter_timeout == 10.0
    assert hard_world(timeout=0)[1].filter_timeout == 0
    # with no limit a search that finds its answer is unaffected
    h = DraHandle()
    h.add(D, device_class())
    h.add(S, resource_slice("n0", [gpu(f"g{i}") for i in range(4)]))
    h.add(C, claim("two", requests=[request("a", count=2)]))
    pl = instance(DynamicResources, {"filterTimeoutSeconds": 0}, h)
    st, res, _ = filter_all(pl, pod("p", claims=["two"]), nodes("n0"))
    assert res.error is None and res.passed.all()


def test_filter_timeout_is_validated():
    assert arg_errors("DynamicResources", {"filterTimeoutSeconds": -1})
    assert not arg_errors("DynamicResources", {"filterTimeoutSeconds": 0.5})
