"""framework/model/native_podgroups.py: scheduling.k8s.io PodGroups parsed (gang minCount, basic,
the topology key), membership by spec.schedulingGroup.podGroupName, the events for the queue, the
topology domain recorded and released, and the PodGroupInitiallyScheduled condition."""

from __future__ import annotations

import pytest

from policy_scheduler.framework.model.native_podgroups import (CONDITION, NATIVE_POD_GROUP_ADD,
                                                               NATIVE_POD_GROUP_MEMBERS, NATIVE_POD_GROUP_UPDATE,
                                                               Domain, NativePodGroup, NativePodGroupCache,
                                                               native_group_key)
from policy_scheduler.framework.model.podinfo import parse_pod


def npg(name="g", ns="ns", min_count=2, topology=None, basic=False):
    spec = {"schedulingPolicy": {"basic": {}} if basic else {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec}


def member(name, group="g", ns="ns", node="", phase="Pending", cpu="1"):
    spec = {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec, "status": {"phase": phase}}


def test_parse_gang_basic_topology_and_bad_specs():
    g = NativePodGroup.from_dict(npg(min_count=3, topology="rack"))
    assert (g.key, g.gang, g.min_member, g.topology_key, g.api_version) == (
        "ns/g", True, 3, "rack", "scheduling.k8s.io/v1alpha3")
    b = NativePodGroup.from_dict(npg(basic=True))
    assert (b.gang, b.min_member, b.topology_key) == (False, 1, "")
    assert not g.same_spec(NativePodGroup.from_dict(npg(min_count=3)))  # the topology key differs
    assert g.same_spec(NativePodGroup.from_dict(npg(min_count=3, topology="rack")))
    for bad in ({"schedulingPolicy": {"gang": {"minCount": "3"}}}, {"schedulingPolicy": {"gang": 3}},
                {"schedulingPolicy": {"gang": {"minCount": 2}}, "schedulingConstraints": {"topology": "rack"}}):
        with pytest.raises(ValueError):
            NativePodGroup.from_dict({"metadata": {"name": "x"}, "spec": bad})


def test_pod_membership_by_spec_scheduling_group():
    p = parse_pod(member("a", "g"))
    assert p.pod_group_name == "g" and native_group_key(p) == "ns/g"
    assert parse_pod(member("b", None)).pod_group_name == ""
    assert parse_pod({"metadata": {"name": "x"}, "spec": {"schedulingGroup": "g"}}).pod_group_name == ""


def test_members_events_and_requests():
    c = NativePodGroupCache()
    assert [e.label for e, _, _ in c.apply("ADDED", npg())] == [NATIVE_POD_GROUP_ADD.label]
    assert not c.tracks_pod("ns/plain", member("plain", None))
    assert c.tracks_pod("ns/a", member("a"))
    ev = c.on_pod("ADDED", member("a", cpu="1500m"))
    assert [e for e, _, _ in ev] == [NATIVE_POD_GROUP_MEMBERS] and ev[0][2].key == "ns/g"
    assert c.requests["ns/a"] == {"cpu": 1500}
    c.on_pod("ADDED", member("b"))
    assert c.counts("ns/g").pods == 2
    c.on_pod("MODIFIED", member("b", node="n1"))
    assert c.counts("ns/g").bound == 1
    c.on_pod("DELETED", member("b", node="n1"))
    assert c.counts("ns/g").pods == 1 and "ns/b" not in c.requests
    ev = c.apply("MODIFIED", npg(min_count=3))
    assert [e.label for e, _, _ in ev] == [NATIVE_POD_GROUP_UPDATE.label]


def test_domain_is_released_on_rejection_and_when_nothing_is_placed():
    c = NativePodGroupCache()
    c.apply("ADDED", npg(topology="rack"))
    c.on_pod("ADDED", member("a"))
    c.set_domain("ns/g", Domain("rack", "r1"))
    c.reserve("ns/a", "ns/g")
    assert c.domain("ns/g") == Domain("rack", "r1")
    c.unreserve("ns/a")  # nothing of the group placed any more
    assert c.domain("ns/g") is None
    c.set_domain("ns/g", Domain("rack", "r2"))
    c.reject("ns/g", "no room")
    assert c.domain("ns/g") is None and c.rejection("ns/g") == "no room"


def test_condition_false_while_rejected_then_true_and_terminal():
    c = NativePodGroupCache(wall=iter(["t1", "t2", "t3", "t4"]).__next__)
    c.apply("ADDED", npg(min_count=2))
    c.manage("ns/g")
    for n in ("a", "b"):
        c.on_pod("ADDED", member(n))
    assert c.status("ns/g") == {}  # nothing to say yet
    c.reject("ns/g", "pod a does not fit")
    st = c.status("ns/g")
    assert st == {"conditions": [{"type": CONDITION, "status": "False", "reason": "Unschedulable",
                                  "message": "pod a does not fit", "lastTransitionTime": "t1",
                                  "observedGeneration": 0}]}
    assert c.status("ns/g") == st  # stable: written once
    c.on_pod("MODIFIED", member("a", node="n1"))
    c.on_pod("MODIFIED", member("b", node="n2"))
    st = c.status("ns/g")
    cond = st["conditions"][0]
    assert (cond["status"], cond["reason"], cond["message"], cond["lastTransitionTime"]) == ("True", "Scheduled", "",
                                                                                            "t2")
    # the object comes back with it: terminal, kept whatever happens to the pods
    c.apply("MODIFIED", {**npg(min_count=2), "status": st})
    c.on_pod("DELETED", member("a", node="n1"))
    c.reject("ns/g", "later")
    assert c.status("ns/g") == st
