"""remedies.suggest for pods DynamicResources blocks before any node is looked at: a claim naming
a DeviceClass that does not exist (CreateDeviceClass, DropResourceClaim) and a claim that does
not exist (DropResourceClaim; upstream holds such a pod at PreEnqueue, the search sees it through
PreFilter). Each suggestion applied (the class created through the snapshot, the pod re-created
from its patched object) places the pod on the node it named; the search changes neither the
node table nor the DRA cache."""

from __future__ import annotations

import copy

from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.remedies import Caps, apply_pod_patch, suggest
from policy_scheduler.remedies.dra_changes import class_object, dra_chain, dra_overlay
from policy_scheduler.plugins.dynamicresources.objects import DeviceClass

from support.drakit import claim, device_class, gpu, request, resource_slice
from support.remedykit import Cluster, apply, state_fingerprint
from support.whatif import node, pod

DRIVER = "gpu.example.com"
NIC = "nic.example.com"
A100 = f'device.attributes["{DRIVER}"].model == "a100"'


def with_claims(body, *entries, containers=None):
    """``entries``: (pod claim name, {"resourceClaimName": ...} or {"resourceClaimTemplateName": ...})."""
    body["spec"]["resourceClaims"] = [{"name": n, **src} for n, src in entries]
    names = containers if containers is not None else [n for n, _ in entries]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": n} for n in names]
    return body


def dra_fingerprint(state):
    d = state.dra
    return (id(d), sorted(d.classes), sorted(d.slices), sorted(c.key for c in d.claims()), dict(d.allocated),
            dict(d.pending), d.slice_version)


def run(cluster, body, **kw):
    """suggest() for a pod the cluster cannot place; every suggestion applied places it on its node."""
    assert not cluster.decide(body).scheduled
    before, dra = state_fingerprint(cluster.state), dra_fingerprint(cluster.state)
    r = suggest(parse_pod(body), cluster.state, cluster.policy(), budget=kw.pop("budget", 2.0), **kw)
    assert state_fingerprint(cluster.state) == before, "the search changed the node table"
    assert dra_fingerprint(cluster.state) == dra, "the search changed the DRA cache"
    assert not r.partial, r.reason
    for s in r.suggestions:
        d = apply(cluster, body, s)
        assert d.scheduled and d.node == s.node, (s.sentence(), d.message)
    return r


def gpu_cluster(claims=(), classes=(), nic_node=True):
    nodes = [node("g0"), node("g1"), node("plain")]
    slices = [resource_slice("g0", [gpu("d0"), gpu("d1", model="t4")]), resource_slice("g1", [gpu("d0", model="t4")])]
    if nic_node:
        nodes.append(node("n0"))
        slices.append(resource_slice("n0", [{"name": "eth0", "attributes": {"speed": {"int": 100}}}], driver=NIC,
                                     name="n0-nic"))
    return Cluster(nodes, resourceSlices=slices, resourceClaims=list(claims), deviceClasses=list(classes))


def test_create_the_missing_device_class_for_the_driver_that_serves_the_claim():
    c = gpu_cluster([claim("big", [request(cls="fast-gpu", selectors=(A100,))])], [device_class("other")])
    body = with_claims(pod("p"), ("gpu", {"resourceClaimName": "big"}))
    r = run(c, body)
    assert r.blockers == {"DynamicResources (PreFilter)": 4}
    create = [s for s in r.suggestions if s.kind == "CreateDeviceClass"]
    assert len(create) == 1, [s.change for s in r.suggestions]  # the nic driver's class opens nothing
    s = create[0]
    assert s.target == "Cluster" and s.nodes_opened == 1 and s.node == "g0"
    assert s.change == (f'create DeviceClass fast-gpu selecting the devices of driver {DRIVER} '
                        f'(selector device.driver == "{DRIVER}")')
    assert s.patch == [{"op": "create", "kind": "DeviceClass", "name": "fast-gpu",
                        "value": class_object("fast-gpu", DRIVER)}]
    assert s.patch[0]["value"]["spec"] == {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}
    # dropping the claim opens every node, so it ranks first; its words say what the pod loses
    drop = r.best
    assert drop.kind == "DropResourceClaim" and drop.nodes_opened == 4
    assert drop.change == ("drop resource claim gpu (its DeviceClass fast-gpu does not exist) from the pod and its "
                           "containers: the pod gets no devices for it")
    assert drop.patch == [{"op": "remove", "path": "/spec/containers/0/resources/claims/0"},
                          {"op": "remove", "path": "/spec/resourceClaims/0"}]


def test_the_class_ranks_before_dropping_the_claim_when_both_open_as_many_nodes():
    # every node but g0 is full: both changes open g0 alone; the class (size 1) before the claim dropped
    # (size 2: the claim and its one request)
    c = Cluster([node("g0"), node("g1", cpu="100m")], resourceSlices=[resource_slice("g0", [gpu("d0")]),
                                                                      resource_slice("g1", [gpu("d0")])],
                resourceClaims=[claim("big", [request(cls="missing")])])
    r = run(c, with_claims(pod("p", cpu="1"), ("gpu", {"resourceClaimName": "big"})))
    assert [(s.kind, s.nodes_opened, s.node, s.size) for s in r.suggestions] == [
        ("CreateDeviceClass", 1, "g0", 1.0), ("DropResourceClaim", 1, "g0", 2.0)]
    assert r.text() == (f'create DeviceClass missing selecting the devices of driver {DRIVER} (selector '
                        f'device.driver == "{DRIVER}"): opens 1 node (g0 would be chosen)')


def test_every_missing_class_of_the_claims_is_created_at_once():
    fa = {"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": "one"},
                                            {"name": "b", "deviceClassName": "two"}]}
    c = gpu_cluster([claim("c1", [fa])], nic_node=False)
    r = run(c, with_claims(pod("p"), ("gpu", {"resourceClaimName": "c1"})))
    s = next(s for s in r.suggestions if s.kind == "CreateDeviceClass")
    assert [op["name"] for op in s.patch] == ["one", "two"] and s.size == 2
    assert s.change.startswith(f"create DeviceClasses one, two, each selecting the devices of driver {DRIVER}")
    assert s.nodes_opened == 2


def test_no_class_is_suggested_when_no_device_would_serve_the_claim():
    h100 = f'device.attributes["{DRIVER}"].model == "h100"'
    c = gpu_cluster([claim("big", [request(cls="fast-gpu", selectors=(h100,))])], nic_node=False)
    r = run(c, with_claims(pod("p"), ("gpu", {"resourceClaimName": "big"})))
    assert [s.kind for s in r.suggestions] == ["DropResourceClaim"]
    assert r.rejected >= 1


def test_drop_a_claim_that_does_not_exist():
    c = gpu_cluster([claim("ok")], [device_class(DRIVER)])
    body = with_claims(pod("p"), ("mine", {"resourceClaimName": "ok"}), ("gone", {"resourceClaimName": "nope"}))
    body["spec"]["containers"].append({"name": "side", "image": "x", "resources": {"claims": [{"name": "gone"}]}})
    r = run(c, body)
    assert [s.kind for s in r.suggestions] == ["DropResourceClaim"]
    s = r.best
    assert s.change == ("drop resource claim gone (ResourceClaim default/nope does not exist) from the pod and its "
                        "containers: the pod gets no devices for it")
    assert s.patch == [{"op": "remove", "path": "/spec/containers/0/resources/claims/1"},
                       {"op": "remove", "path": "/spec/containers/1/resources/claims/0"},
                       {"op": "remove", "path": "/spec/resourceClaims/1"}]
    # the claim kept is allocated: the pod goes where a device is
    assert s.nodes_opened == 2 and s.node in ("g0", "g1")
    changed = parse_pod(apply_pod_patch(body, s.patch))
    assert changed.resource_claims == (("mine", "ok", ""),)


def test_drop_a_claim_its_template_has_not_produced():
    c = gpu_cluster()
    body = with_claims(pod("p"), ("gpu", {"resourceClaimTemplateName": "gpu-template"}))
    r = run(c, body)
    assert r.best.kind == "DropResourceClaim" and r.best.nodes_opened == 4
    assert r.best.change.startswith("drop resource claim gpu (its ResourceClaim from template gpu-template has not "
                                    "been created)")
    # produced, but not for this pod (another owner), or being deleted
    body["metadata"]["uid"] = "uid-p"
    body["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}]}
    c = gpu_cluster([claim("p-gpu", owner="someone-else"), claim("q", deleting=True)])
    r = run(c, body)
    assert "ResourceClaim default/p-gpu was not created for this pod" in r.best.change
    body2 = with_claims(pod("p2"), ("gpu", {"resourceClaimName": "q"}))
    assert "ResourceClaim default/q is being deleted" in run(c, body2).best.change


def test_nothing_for_dra_when_dra_does_not_block():
    c = gpu_cluster([claim("ok")], [device_class(DRIVER)])
    body = with_claims(pod("p", cpu="64"), ("gpu", {"resourceClaimName": "ok"}))
    r = run(c, body)
    assert not any(s.kind in ("DropResourceClaim", "CreateDeviceClass") for s in r.suggestions)


def test_the_overlay_and_the_chain_copies_leave_the_live_cache_and_chain_alone():
    c = gpu_cluster()
    live = c.state.dra
    chain = c.policy().chain
    handles = [p.handle for p in chain.plugins]
    o = dra_overlay(live, (DeviceClass.from_dict(class_object("x", DRIVER)),))
    sim = dra_chain(chain, o)
    assert "x" in o.classes and "x" not in live.classes
    dyn = sim.plugin("DynamicResources")
    assert dyn.handle.dra() is o and chain.plugin("DynamicResources").handle.dra() is live
    assert [p.handle for p in chain.plugins] == handles
    assert sim.filter[0] is sim.plugin(sim.filter[0].NAME)  # one copy per plugin, everywhere
    assert sim.start is chain.start


def test_too_many_claims_stop_the_search_early():
    c = gpu_cluster()
    body = with_claims(pod("p"), *[(f"c{i}", {"resourceClaimName": f"n{i}"}) for i in range(5)])
    r = suggest(parse_pod(body), c.state, c.policy(), caps=Caps(pod_lists=4), budget=1.0)
    assert r.reason.startswith("the pod is too large to search (5 resource claims")
    assert copy.deepcopy(body) == body


def test_a_class_name_the_api_would_refuse_is_not_created():
    c = gpu_cluster([claim("odd", [request(cls="Not_A-Name")])], nic_node=False)
    r = run(c, with_claims(pod("p"), ("gpu", {"resourceClaimName": "odd"})))
    assert [s.kind for s in r.suggestions] == ["DropResourceClaim"]
