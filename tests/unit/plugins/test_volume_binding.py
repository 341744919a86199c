"""VolumeBinding (upstream volumebinding, v1.37): PreFilter sorting of claims and its messages,
Filter's reasons per node, Score, Reserve/Unreserve through the VolumeCache, PreBind's API
writes and its wait. Also: a pod without volumes is Skipped by every volume plugin's PreFilter."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from support.kit import QUEUE, SKIP, arg_errors, instance, refused
from support.volkit import VolHandle, csinode, nodes, pod, pv, pvc, run_filter, sc

from policy_scheduler.framework.events import ActionType, Resource
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.volumes.objects import ANN_SELECTED_NODE, PersistentVolumeClaim, StorageClass
from policy_scheduler.plugins import default_registry
from policy_scheduler.plugins.volumes.volume_binding import (ERR_REASON_BIND_CONFLICT, ERR_REASON_NODE_CONFLICT,
                                                             ERR_REASON_PV_NOT_EXIST, ERR_UNBOUND_IMMEDIATE, STATE_KEY,
                                                             VolumeBinding)

PV, PVC, SC = "persistentvolumes", "persistentvolumeclaims", "storageclasses"


def plugin(handle, args=None):
    return instance(VolumeBinding, args, handle)


# ---------------------------------------------------------------- no volumes: nothing runs

@pytest.mark.parametrize("name", ["VolumeBinding", "VolumeZone", "VolumeRestrictions", "NodeVolumeLimits"])
@pytest.mark.parametrize("volumes", [(), ({"name": "t", "projected": {"sources": []}}, {"name": "e", "emptyDir": {}})])
def test_every_volume_plugin_skips_a_pod_without_volumes(name, volumes):
    cls = default_registry().get(name)
    pl = cls(cls.Args.model_validate({}) if cls.Args else None, VolHandle())
    p = pod("p", volumes=volumes)
    assert p.volumes == ()
    st, _ = pl.pre_filter(CycleState(), p, nodes("a"))
    assert st.code == Code.SKIP


# ---------------------------------------------------------------- PreFilter

def test_pre_filter_missing_claim():
    st, _ = run_filter(plugin(VolHandle()), pod("p", "data"), nodes("a"))
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ('persistentvolumeclaim "data" not found',))


def test_pre_filter_missing_ephemeral_claim():
    p = pod("web", volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}])
    st, _ = run_filter(plugin(VolHandle()), p, nodes("a"))
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ('waiting for ephemeral volume controller to create the persistentvolumeclaim "web-scratch"',)


def test_pre_filter_ephemeral_claim_not_owned_by_the_pod():
    h = VolHandle().add(SC, sc("fast", "csi.example.com")).add(PVC, pvc("web-scratch", cls="fast", owner="someone"))
    p = pod("web", volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}], uid="u1")
    st, _ = run_filter(plugin(h), p, nodes("a"))
    assert st.reasons == ("PVC default/web-scratch was not created for pod default/web (pod is not owner)",)
    h.add(PVC, pvc("web-scratch", cls="fast", owner="u1", rv="2"))
    st, _ = run_filter(plugin(h), p, nodes("a"))
    assert st.is_success


@pytest.mark.parametrize("claim, want", [
    (pvc("data", phase="Lost", volume="gone"),
     'persistentvolumeclaim "data" bound to non-existent persistentvolume "gone"'),
])
def test_pre_filter_lost_claim(claim, want):
    h = VolHandle().add(PVC, claim)
    st, _ = run_filter(plugin(h), pod("p", "data"), nodes("a"))
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (want,))


def test_pre_filter_claim_being_deleted():
    body = pvc("data")
    body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    st, _ = run_filter(plugin(VolHandle().add(PVC, body)), pod("p", "data"), nodes("a"))
    assert st.reasons == ('persistentvolumeclaim "data" is being deleted',)


@pytest.mark.parametrize("classes, claim", [
    ([sc("std", "csi.example.com", mode="Immediate")], pvc("data", cls="std")),  # Immediate class
    ([], pvc("data", cls="missing")),  # a missing class counts as Immediate
    ([], pvc("data", cls=None)),  # no class
    # pre-bound by volumeName, not completed, even with a WaitForFirstConsumer class
    ([sc("local")], pvc("data", volume="pv-1")),
])
def test_pre_filter_unbound_immediate_claims(classes, claim):
    h = VolHandle().add(SC, *classes).add(PVC, claim)
    st, _ = run_filter(plugin(h), pod("p", "data"), nodes("a"))
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_UNBOUND_IMMEDIATE,))
    assert ERR_UNBOUND_IMMEDIATE == "pod has unbound immediate PersistentVolumeClaims"


def test_pre_filter_class_without_binding_mode_is_an_error():
    h = VolHandle().add(SC, sc("odd", mode=None)).add(PVC, pvc("data", cls="odd"))
    st, _ = run_filter(plugin(h), pod("p", "data"), nodes("a"))
    assert (st.code, st.reasons) == (Code.ERROR, ('VolumeBindingMode not set for StorageClass "odd"',))


def test_pre_filter_sorts_claims():
    h = VolHandle().add(SC, sc("local")).add(PV, pv("pv-b", claim=("default", "b"), phase="Bound"))
    h.add(PVC, pvc("b", volume="pv-b", bound=True), pvc("w"))
    state = CycleState()
    st, _ = plugin(h).pre_filter(state, pod("p", "b", "w"), nodes("a"))
    assert st.is_success
    s = state.read(STATE_KEY)
    assert [c.name for c in s.bound] == ["b"] and [c.name for c in s.delayed] == ["w"]


# ---------------------------------------------------------------- Filter

def test_bound_pv_node_affinity():
    h = VolHandle().add(PV, pv("pv-1", node="a", claim=("default", "data"), phase="Bound"))
    h.add(PVC, pvc("data", volume="pv-1", bound=True))
    _, got = run_filter(plugin(h), pod("p", "data"), nodes("a", "b"))
    assert got == {"a": (True, ()), "b": (False, (ERR_REASON_NODE_CONFLICT,))}
    assert ERR_REASON_NODE_CONFLICT == "node(s) didn't match PersistentVolume's node affinity"


def test_bound_claim_whose_pv_is_missing():
    h = VolHandle().add(PVC, pvc("data", volume="gone", bound=True))
    _, got = run_filter(plugin(h), pod("p", "data"), nodes("a"))
    assert got == {"a": (False, (ERR_REASON_PV_NOT_EXIST,))}


def test_wait_for_first_consumer_takes_a_local_pv_or_fails_with_bind_conflict():
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("data")).add(PV, pv("pv-a", node="a"))
    _, got = run_filter(plugin(h), pod("p", "data"), nodes("a", "b"))
    assert got == {"a": (True, ()), "b": (False, (ERR_REASON_BIND_CONFLICT,))}
    assert ERR_REASON_BIND_CONFLICT == "node(s) didn't find available persistent volumes to bind"


def test_both_reasons_in_upstream_order():
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("w"), pvc("b", volume="pv-b", bound=True))
    h.add(PV, pv("pv-b", node="a", claim=("default", "b"), phase="Bound"))
    _, got = run_filter(plugin(h), pod("p", "b", "w"), nodes("c"))
    assert got == {"c": (False, (ERR_REASON_NODE_CONFLICT, ERR_REASON_BIND_CONFLICT))}


@pytest.mark.parametrize("pvs, want", [
    # the smallest that fits
    ([pv("big", size="100Gi"), pv("small", size="6Gi"), pv("tiny", size="1Gi")], "small"),
    # wrong access modes, phase, class, claimed by another claim: none of those
    ([pv("rox", modes=("ReadOnlyMany",)), pv("rel", phase="Released"), pv("other", cls="other"),
      pv("taken", claim=("default", "someone-else")), pv("ok", size="50Gi")], "ok"),
    # a PV pre-bound to this claim wins over a smaller free one
    ([pv("free", size="5Gi"), pv("mine", size="50Gi", claim=("default", "data"))], "mine"),
])
def test_matching_pv_choice(pvs, want):
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("data")).add(PV, *pvs)
    state = CycleState()
    _, got = run_filter(plugin(h), pod("p", "data"), nodes("a"), state)
    assert got["a"][0]
    (claim, chosen), = state.read(STATE_KEY).by_node["a"].static_bindings
    assert (claim.name, chosen.name) == ("data", want)


def test_claim_selector():
    h = VolHandle().add(SC, sc("local")).add(PV, pv("x", labels={"tier": "gold"}), pv("y", size="6Gi"))
    h.add(PVC, pvc("data", selector={"matchLabels": {"tier": "gold"}}))
    state = CycleState()
    run_filter(plugin(h), pod("p", "data"), nodes("a"), state)
    assert [b[1].name for b in state.read(STATE_KEY).by_node["a"].static_bindings] == ["x"]


def test_two_claims_do_not_take_the_same_pv():
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("one"), pvc("two")).add(PV, pv("only"))
    _, got = run_filter(plugin(h), pod("p", "one", "two"), nodes("a"))
    assert got == {"a": (False, (ERR_REASON_BIND_CONFLICT,))}


def test_dynamic_provisioning_with_allowed_topologies():
    zone = "topology.kubernetes.io/zone"
    h = VolHandle().add(SC, sc("fast", "csi.example.com", topologies=[{zone: ["z1"]}]))
    h.add(PVC, pvc("data", cls="fast"))
    state = CycleState()
    _, got = run_filter(plugin(h), pod("p", "data"), nodes(("a", {zone: "z1"}), ("b", {zone: "z2"}), "c"), state)
    assert got == {"a": (True, ()), "b": (False, (ERR_REASON_BIND_CONFLICT,)),
                   "c": (False, (ERR_REASON_BIND_CONFLICT,))}
    assert [c.name for c in state.read(STATE_KEY).by_node["a"].dynamic_provisions] == ["data"]


def test_selected_node_annotation_pins_the_claim():
    h = VolHandle().add(SC, sc("fast", "csi.example.com")).add(
        PVC, pvc("data", cls="fast", annotations={ANN_SELECTED_NODE: "b"}))
    _, got = run_filter(plugin(h), pod("p", "data"), nodes("a", "b"))
    assert got == {"a": (False, (ERR_REASON_BIND_CONFLICT,)), "b": (True, ())}


def test_provisioning_errors_abort_the_filter():
    # the class is deleted between PreFilter and Filter: upstream's error, not a rejection
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("data"))
    pl = plugin(h)
    state = CycleState()
    assert pl.pre_filter(state, pod("p", "data"), nodes("a"))[0].is_success
    h.cache.apply(SC, "DELETED", sc("local"))
    res = pl.filter(state, pod("p", "data"), nodes("a"), np.arange(1))
    assert res.error is not None and res.error.reasons == ('failed to find storage class "local"',)


# ---------------------------------------------------------------- Score

def test_score_prefers_the_emptier_pv():
    # claim 5Gi: on a (10Gi PV) utilization 50 -> shape (0,100),(100,0) -> 50;
    # on b (20Gi PV) utilization 25 -> 75
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("data")).add(PV, pv("pa", node="a"), pv("pb", node="b", size="20Gi"))
    pl, state, t = plugin(h), CycleState(), nodes("a", "b")
    run_filter(pl, pod("p", "data"), t, state)
    rows = np.arange(2)
    assert pl.pre_score(state, pod("p", "data"), t, rows).is_success
    assert pl.score(state, pod("p", "data"), t, rows).tolist() == [50, 75]


def test_score_with_a_custom_shape_and_pre_score_skip_without_static_bindings():
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("data")).add(PV, pv("pa", node="a"))
    pl = plugin(h, {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]})
    state, t = CycleState(), nodes("a")
    run_filter(pl, pod("p", "data"), t, state)
    assert pl.score(state, pod("p", "data"), t, np.arange(1)).tolist() == [50]
    h2 = VolHandle().add(SC, sc("fast", "csi.example.com")).add(PVC, pvc("data", cls="fast"))
    pl2, state2 = plugin(h2), CycleState()
    run_filter(pl2, pod("p", "data"), t, state2)
    assert pl2.pre_score(state2, pod("p", "data"), t, np.arange(1)).code == Code.SKIP


# ---------------------------------------------------------------- Reserve / Unreserve

def test_reserve_keeps_the_pv_from_the_next_pod_and_unreserve_gives_it_back():
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("one"), pvc("two")).add(PV, pv("only", node="a"))
    pl, t = plugin(h), nodes("a")
    first, second = pod("p1", "one"), pod("p2", "two")
    s1 = CycleState()
    _, got = run_filter(pl, first, t, s1)
    assert got == {"a": (True, ())}
    assert pl.reserve(s1, first, "a").is_success
    assumed = h.cache.pv("only")
    assert (assumed.claim_ref.namespace, assumed.claim_ref.name) == ("default", "one")
    assert h.cache.api_pv("only").claim_ref is None  # the informer's object is untouched
    assert h.cache.assumed_by("default/p1") == (["only"], [])
    # the second pod cannot take it: no PV left, no provisioner
    _, got = run_filter(pl, second, t, CycleState())
    assert got == {"a": (False, (ERR_REASON_BIND_CONFLICT,))}
    pl.unreserve(s1, first, "a")
    pl.unreserve(s1, first, "a")  # idempotent
    assert h.cache.pv("only").claim_ref is None
    s2 = CycleState()
    _, got = run_filter(pl, second, t, s2)
    assert got == {"a": (True, ())}
    assert s2.read(STATE_KEY).by_node["a"].static_bindings[0][1].name == "only"


def test_reserve_of_a_provisioned_claim_sets_the_selected_node():
    h = VolHandle().add(SC, sc("fast", "csi.example.com")).add(PVC, pvc("data", cls="fast"))
    pl, s = plugin(h), CycleState()
    run_filter(pl, pod("p", "data"), nodes("a", "b"), s)
    assert pl.reserve(s, pod("p", "data"), "b").is_success
    assert h.cache.pvc("default", "data").selected_node == "b"
    assert h.cache.api_pvc("default", "data").selected_node is None
    pl.unreserve(s, pod("p", "data"), "b")
    assert h.cache.pvc("default", "data").selected_node is None


def test_reserve_with_every_claim_bound_assumes_nothing():
    h = VolHandle().add(PV, pv("pv-1", claim=("default", "data"), phase="Bound"))
    h.add(PVC, pvc("data", volume="pv-1", bound=True))
    pl, s = plugin(h), CycleState()
    run_filter(pl, pod("p", "data"), nodes("a"), s)
    assert pl.reserve(s, pod("p", "data"), "a").is_success
    assert s.read(STATE_KEY).all_bound
    assert asyncio.run(pl.pre_bind(s, pod("p", "data"), "a")).is_success
    assert h.calls == []


def test_reserve_fails_when_the_pv_changed_since_filter():
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("data")).add(PV, pv("pv-1"))
    pl, s = plugin(h), CycleState()
    run_filter(pl, pod("p", "data"), nodes("a"), s)
    h.cache.apply(PV, "MODIFIED", pv("pv-1", rv="7"))
    st = pl.reserve(s, pod("p", "data"), "a")
    assert st.code == Code.ERROR and "resourceVersion" in st.message()
    assert h.cache.assumed_by("default/p") == ([], [])


# ---------------------------------------------------------------- PreBind

def _reserved(h, p, node="a"):
    pl = plugin(h)
    pl.poll_interval = 0.01
    s = CycleState()
    _, got = run_filter(pl, p, nodes(node), s)
    assert got[node][0]
    assert pl.reserve(s, p, node).is_success
    return pl, s


def test_pre_bind_writes_the_pv_claim_ref_and_waits_until_bound():
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("data", rv="3", uid="claim-uid")).add(PV, pv("pv-1", rv="5"))
    p = pod("p", "data")
    pl, s = _reserved(h, p)

    async def go():
        task = asyncio.create_task(pl.pre_bind(s, p, "a"))
        await asyncio.sleep(0.05)
        assert not task.done()  # waiting for the PV controller
        # the PV controller: the PV is bound to the claim, then the claim completes
        h.cache.apply(PV, "MODIFIED", pv("pv-1", rv="6", claim=("default", "data", "claim-uid"), phase="Bound"))
        await asyncio.sleep(0.05)
        assert not task.done()
        h.cache.apply(PVC, "MODIFIED", pvc("data", rv="7", volume="pv-1", bound=True, uid="claim-uid"))
        return await asyncio.wait_for(task, 2)

    st = asyncio.run(go())
    assert st.is_success, st
    (method, path, body), = h.calls
    assert (method, path) == ("PUT", "/api/v1/persistentvolumes/pv-1")
    ref = body["spec"]["claimRef"]
    assert (ref["namespace"], ref["name"], ref["uid"]) == ("default", "data", "claim-uid")
    assert body["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert body["metadata"]["resourceVersion"] == "5"  # an update of the version the decision saw
    assert h.cache.assumed_by("default/p") == ([], [])  # forgotten: the informer has the truth


def test_pre_bind_provisioning_puts_the_selected_node_annotation():
    h = VolHandle().add(SC, sc("fast", "csi.example.com")).add(PVC, pvc("data", cls="fast", rv="3"))
    p = pod("p", "data")
    pl, s = _reserved(h, p)

    async def go():
        task = asyncio.create_task(pl.pre_bind(s, p, "a"))
        await asyncio.sleep(0.03)
        h.cache.apply(PV, "ADDED", pv("pvc-123", cls="fast", claim=("default", "data"), phase="Bound"))
        h.cache.apply(PVC, "MODIFIED", pvc("data", cls="fast", rv="5", volume="pvc-123", bound=True,
                                           annotations={ANN_SELECTED_NODE: "a"}))
        return await asyncio.wait_for(task, 2)

    assert asyncio.run(go()).is_success
    (method, path, body), = h.calls
    assert (method, path) == ("PUT", "/api/v1/namespaces/default/persistentvolumeclaims/data")
    assert body["metadata"]["annotations"][ANN_SELECTED_NODE] == "a"


def test_pre_bind_times_out_with_upstream_wording():
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("data")).add(PV, pv("pv-1"))
    p = pod("p", "data")
    for timeout in (0, 1):
        pl = plugin(h, {"bindTimeoutSeconds": timeout})
        pl.poll_interval = 0.05
        s = CycleState()
        run_filter(pl, p, nodes("a"), s)
        assert pl.reserve(s, p, "a").is_success
        st = asyncio.run(pl.pre_bind(s, p, "a"))
        assert (st.code, st.reasons) == (Code.ERROR, ("binding volumes: context deadline exceeded",))
        pl.unreserve(s, p, "a")
        assert h.cache.pv("pv-1").claim_ref is None


def test_pre_bind_fails_when_the_provisioner_gives_up():
    h = VolHandle().add(SC, sc("fast", "csi.example.com")).add(PVC, pvc("data", cls="fast", rv="3"))
    p = pod("p", "data")
    pl, s = _reserved(h, p)

    async def go():
        task = asyncio.create_task(pl.pre_bind(s, p, "a"))
        await asyncio.sleep(0.03)
        # the provisioner removes the annotation to ask for another node
        h.cache.apply(PVC, "MODIFIED", pvc("data", cls="fast", rv="9", annotations={"other": "x"}))
        return await asyncio.wait_for(task, 2)

    st = asyncio.run(go())
    assert (st.code, st.reasons) == (Code.ERROR, ('binding volumes: provisioning failed for PVC "data"',))


def test_pre_bind_api_failure_is_an_error():
    h = VolHandle().add(SC, sc("local")).add(PVC, pvc("data")).add(PV, pv("pv-1"))
    p = pod("p", "data")
    pl, s = _reserved(h, p)
    h.fail = RuntimeError('Operation cannot be fulfilled on persistentvolumes "pv-1"')
    st = asyncio.run(pl.pre_bind(s, p, "a"))
    assert (st.code, st.reasons) == (Code.ERROR, ('Operation cannot be fulfilled on persistentvolumes "pv-1"',))


# ---------------------------------------------------------------- args and events

def test_args_defaults_and_validation():
    pl = plugin(VolHandle())
    assert pl.bind_timeout == 600
    assert [(p.utilization, p.score) for p in pl.args.shape] == [(0, 10), (100, 0)]
    assert arg_errors("VolumeBinding", {"bindTimeoutSeconds": 30}) == []
    refused("VolumeBinding", {"bindTimeoutSeconds": -1}, "bindTimeoutSeconds",
            "invalid BindTimeoutSeconds, should not be a negative value")
    refused("VolumeBinding", {"shape": [{"utilization": 50, "score": 1}, {"utilization": 10, "score": 2}]},
            "shape[1].utilization", "values must be sorted in increasing order")
    refused("VolumeBinding", {"shape": [{"utilization": 0, "score": 11}]}, "shape[0].score",
            "not in valid range [0, 10]")
    refused("VolumeBinding", {"bogus": 1}, "bogus")


def test_events_and_hints():
    pl = plugin(VolHandle())
    regs = {(r.event.resource, r.event.action) for r in pl.events_to_register()}
    add_update = ActionType.ADD | ActionType.UPDATE
    assert regs == {(Resource.STORAGE_CLASS, add_update), (Resource.PERSISTENT_VOLUME_CLAIM, add_update),
                    (Resource.PERSISTENT_VOLUME, add_update),
                    (Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                    (Resource.CSI_NODE, add_update), (Resource.CSI_DRIVER, ActionType.UPDATE)}
    p = pod("p", "data")
    mine, other = PersistentVolumeClaim.from_dict(pvc("data")), PersistentVolumeClaim.from_dict(pvc("x"))
    elsewhere = PersistentVolumeClaim.from_dict(pvc("data", ns="other"))
    assert [pl.pvc_hint(p, None, c) for c in (mine, other, elsewhere)] == [QUEUE, SKIP, SKIP]
    eph = parse_pod({"metadata": {"name": "w"}, "spec": {"volumes": [{"name": "s", "ephemeral": {}}]}})
    assert pl.pvc_hint(eph, None, PersistentVolumeClaim.from_dict(pvc("w-s"))) == QUEUE
    a = StorageClass.from_dict(sc("c", topologies=[{"zone": ["z1"]}]))
    b = StorageClass.from_dict(sc("c", topologies=[{"zone": ["z1", "z2"]}]))
    assert pl.storage_class_hint(p, None, a) == QUEUE
    assert pl.storage_class_hint(p, a, b) == QUEUE
    assert pl.storage_class_hint(p, a, a) == SKIP
    from policy_scheduler.plugins.volumes.objects import CSINode

    n1 = CSINode.from_dict(csinode("a", {"d": 1}))
    assert pl.csinode_hint(p, None, n1) == QUEUE and pl.csinode_hint(p, n1, n1) == SKIP
