"""plugins/podgroups/native_cache.py: scheduling.k8s.io PodGroups parsed (gang minCount, basic,
the topology key, priority, preemption policy, disruption mode), membership by
spec.schedulingGroup.podGroupName, the events for the queue, the nodes members were assumed on,
and the PodGroupInitiallyScheduled condition as the last pod-group cycle left it."""

from __future__ import annotations

import pytest

from policy_scheduler.plugins.podgroups.native_cache import (CONDITION, NATIVE_POD_GROUP_ADD, NATIVE_POD_GROUP_MEMBERS,
                                                             NATIVE_POD_GROUP_UPDATE, NativePodGroup,
                                                             NativePodGroupCache, native_group_key)
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


def test_priority_preemption_policy_and_disruption_mode():
    body = npg()
    body["spec"].update({"priority": 1000, "preemptionPolicy": "Never", "disruptionMode": {"all": {}}})
    g = NativePodGroup.from_dict(body)
    assert (g.priority, g.preemption_policy, g.preemption_policy_set, g.disruption_all) == (1000, "Never", True, True)
    d = NativePodGroup.from_dict(npg())
    assert (d.priority, d.preemption_policy, d.preemption_policy_set, d.disruption_all) == (
        0, "PreemptLowerPriority", False, False)
    assert not g.same_spec(d)
    single = npg()
    single["spec"]["disruptionMode"] = {"single": {}}
    assert NativePodGroup.from_dict(single).disruption_all is False
    for bad in ({"priority": "high"}, {"preemptionPolicy": "Sometimes"}, {"disruptionMode": "all"}):
        body = npg()
        body["spec"].update(bad)
        with pytest.raises(ValueError):
            NativePodGroup.from_dict(body)


def test_assumed_node_kept_until_unreserved_or_gone():
    c = NativePodGroupCache()
    c.apply("ADDED", npg(topology="rack"))
    c.on_pod("ADDED", member("a"))
    c.reserve("ns/a", "ns/g")
    c.set_assumed_node("ns/a", "n1")
    assert c.assumed_node("ns/a") == "n1" and c.counts("ns/g").assumed == 1
    c.unreserve("ns/a")
    assert c.assumed_node("ns/a") == "" and c.counts("ns/g").assumed == 0
    c.reserve("ns/a", "ns/g")
    c.set_assumed_node("ns/a", "n2")
    c.on_pod("DELETED", member("a"))
    assert c.assumed_node("ns/a") == ""


def test_condition_as_the_last_cycle_left_it_true_is_terminal():
    c = NativePodGroupCache(wall=iter(["t1", "t2", "t3", "t4"]).__next__)
    c.apply("ADDED", npg(min_count=2))
    c.manage("ns/g")
    for n in ("a", "b"):
        c.on_pod("ADDED", member(n))
    assert c.status("ns/g") == {}  # nothing to say yet
    c.set_condition("ns/g", "False", "Unschedulable", "pod group is unschedulable, 0/1 placements are available")
    st = c.status("ns/g")
    assert st == {"conditions": [{"type": CONDITION, "status": "False", "reason": "Unschedulable",
                                  "message": "pod group is unschedulable, 0/1 placements are available",
                                  "lastTransitionTime": "t1", "observedGeneration": 0}]}
    assert c.status("ns/g") == st  # stable: written once
    c.set_condition("ns/g", "True", "Scheduled", "")
    c.set_condition("ns/g", "False", "Unschedulable", "a cycle for the extra pods, before True was written")
    st = c.status("ns/g")
    cond = st["conditions"][0]
    assert (cond["status"], cond["reason"], cond["message"], cond["lastTransitionTime"]) == ("True", "Scheduled", "",
                                                                                            "t2")
    # the object comes back with it: terminal, kept whatever a later cycle says
    c.apply("MODIFIED", {**npg(min_count=2), "status": st})
    c.set_condition("ns/g", "False", "Unschedulable", "later")
    assert c.status("ns/g") == st
    c.set_condition("ns/unknown", "True", "Scheduled", "")  # a group that does not exist: nothing
    assert c.status("ns/unknown") == {}


HOSTILE = [None, [], "x", 3, {"x": 1}, [None], {"gang": None}, {"gang": {"minGroupCount": "x"}}]


def test_hostile_composites_and_podgroups_are_refused_on_their_own():
    """Wrong types and nulls anywhere in a (Composite)PodGroup: the object is refused (ValueError,
    which the state logs and skips) or read with defaults, never anything else; a chain of parents
    that loops has no root (its pods wait at PreEnqueue)."""
    from policy_scheduler.cache.state import ClusterState
    st = ClusterState()
    fields = ("schedulingPolicy", "schedulingConstraints", "priority", "disruptionMode", "preemptionPolicy",
              "parentCompositePodGroupName")
    for i, (f, v) in enumerate((f, v) for f in fields for v in HOSTILE):
        body = {"metadata": {"name": f"h{i}", "namespace": "ns"}, "spec": {f: v}}
        assert isinstance(st.apply_composite_pod_group("ADDED", body), list)
        assert isinstance(st.apply_native_pod_group("ADDED", body), list)
    for body in ({"metadata": None, "spec": None}, {"spec": {"schedulingPolicy": {"gang": {"minCount": True}}}}):
        st.apply_composite_pod_group("ADDED", body)
        st.apply_native_pod_group("ADDED", body)
    c = st.native_pod_groups
    c.apply_composite("ADDED", {"metadata": {"name": "loop", "namespace": "ns"},
                                "spec": {"parentCompositePodGroupName": "loop"}})
    c.apply("ADDED", {"metadata": {"name": "leaf", "namespace": "ns"}, "spec": {
        "schedulingPolicy": {"gang": {"minCount": 1}}, "parentCompositePodGroupName": "loop"}})
    assert c.root_of("ns/leaf") is None and c.root_of("ns/loop", composite=True) is None
    assert c.tree_ready("ns/loop", lambda k: 1) in (True, False)
