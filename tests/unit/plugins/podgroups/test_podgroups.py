"""plugins/podgroups/cache.py: PodGroups parsed, membership by label, counts, the events handed
to the queue, group rejection by epoch, and the status the operator writes."""

from __future__ import annotations

import pytest

from policy_scheduler.plugins.podgroups.cache import (POD_GROUP_ADD, POD_GROUP_DELETE, POD_GROUP_LABEL,
                                                      POD_GROUP_MEMBERS, POD_GROUP_UPDATE, PodGroup, PodGroupCache,
                                                      group_key_of)


def pg(name="g", ns="ns", min_member=2, **spec):
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"minMember": min_member, **spec}}


def pod(name, group="g", ns="ns", node="", phase="Pending", gates=(), owner=None):
    meta = {"name": name, "namespace": ns, "labels": {POD_GROUP_LABEL: group} if group else {}}
    if owner:
        meta["ownerReferences"] = [{"kind": "Job", "name": owner}]
    return {"metadata": meta,
            "spec": {"nodeName": node, **({"schedulingGates": [{"name": x} for x in gates]} if gates else {})},
            "status": {"phase": phase}}


def labels(ev):
    return [e.label for e, _, _ in ev]


def test_parse_spec_and_bad_specs():
    g = PodGroup.from_dict(pg(min_member=3, minResources={"cpu": "1500m", "memory": "1Gi"},
                              scheduleTimeoutSeconds=7))
    assert (g.key, g.min_member, g.min_resources, g.schedule_timeout_seconds) == (
        "ns/g", 3, {"cpu": 1500, "memory": 2**30}, 7)
    assert g.min_resources_raw == {"cpu": "1500m", "memory": "1Gi"}
    for bad in ({"minMember": "3"}, {"minResources": {"cpu": "lots"}}, {"scheduleTimeoutSeconds": 1.5}):
        with pytest.raises(ValueError):
            PodGroup.from_dict({"metadata": {"name": "x"}, "spec": bad})
    assert group_key_of("ns", {POD_GROUP_LABEL: "g"}) == "ns/g" and group_key_of("ns", {}) is None


def test_apply_events_add_update_status_only_delete():
    c = PodGroupCache()
    assert labels(c.apply("ADDED", pg())) == [POD_GROUP_ADD.label]
    assert c.apply("MODIFIED", {**pg(), "status": {"phase": "Scheduling"}}) == []  # status only: no event
    assert c.groups["ns/g"].status == {"phase": "Scheduling"}
    ev = c.apply("MODIFIED", pg(min_member=3))
    assert labels(ev) == [POD_GROUP_UPDATE.label] and ev[0][2].group.min_member == 3
    assert labels(c.apply("DELETED", pg())) == [POD_GROUP_DELETE.label] and "ns/g" not in c.groups
    assert c.apply("DELETED", pg()) == []
    with pytest.raises(ValueError):
        c.apply("ADDED", {"metadata": {"name": "bad", "namespace": "ns"}, "spec": {"minMember": "x"}})
    assert "ns/bad" not in c.groups


def test_members_counts_and_events():
    c = PodGroupCache()
    c.apply("ADDED", pg(min_member=3))
    assert labels(c.on_pod("ADDED", pod("a"))) == [POD_GROUP_MEMBERS.label]
    assert c.on_pod("MODIFIED", pod("a")) == []  # nothing that changes the quorum
    c.on_pod("ADDED", pod("b", gates=["wait"]))
    c.on_pod("ADDED", pod("c", node="n1", phase="Running"))
    c.on_pod("ADDED", pod("d", node="n1", phase="Succeeded"))
    c.on_pod("ADDED", pod("x", group=None))  # no label: not tracked
    k = c.counts("ns/g")
    assert (k.pods, k.gated, k.assumed, k.bound, k.running, k.succeeded, k.failed) == (3, 1, 0, 1, 1, 1, 0)
    assert not c.tracks("ns/x", {}) and c.tracks("ns/a", {})
    ev = c.on_pod("MODIFIED", pod("b"))  # its gates are gone
    assert labels(ev) == [POD_GROUP_MEMBERS.label] and c.counts("ns/g").gated == 0
    # relabelled to another group: leaves this one
    ev = c.on_pod("MODIFIED", pod("a", group="h"))
    assert sorted(e[2].key for e in ev) == ["ns/g", "ns/h"] and c.group_of("ns/a") == "ns/h"
    c.on_pod("DELETED", {"metadata": {"name": "c", "namespace": "ns"}})
    assert c.group_of("ns/c") is None and c.counts("ns/g").bound == 0


def test_reserve_unreserve_and_binding_confirmed():
    c = PodGroupCache()
    c.apply("ADDED", pg())
    c.on_pod("ADDED", pod("a"))
    c.reserve("ns/a", "ns/g")
    assert c.counts("ns/g").assumed == 1
    c.on_pod("MODIFIED", pod("a", node="n1"))  # our binding came back
    k = c.counts("ns/g")
    assert (k.assumed, k.bound, k.assigned) == (0, 1, 1)
    c.on_pod("ADDED", pod("b"))
    c.reserve("ns/b", "ns/g")
    epoch = c.epoch
    assert c.unreserve("ns/b") and c.epoch == epoch + 1 and not c.unreserve("ns/b")


def test_rejection_holds_until_something_from_outside_changes():
    c = PodGroupCache()
    for g in ("g", "h"):
        c.apply("ADDED", pg(g))
    c.reject("ns/g", "pod a does not fit")
    assert c.rejection("ns/g") == "pod a does not fit"
    c.reject("ns/g", "later reason")  # the first reason of a cascade stays
    assert c.rejection("ns/g") == "pod a does not fit"
    c.capacity_changed("ns/g")  # its own release: still rejected
    assert c.rejection("ns/g") == "pod a does not fit"
    c.capacity_changed("ns/h")  # another group's pod went: may help
    assert c.rejection("ns/g") is None
    c.reject("ns/g", "x")
    c.on_pod("ADDED", pod("new"))  # one more member: try again
    assert c.rejection("ns/g") is None
    c.reject("ns/g", "x")
    c.apply("MODIFIED", pg(min_member=1))  # a new spec: try again
    assert c.rejection("ns/g") is None


def test_backoff_uses_the_clock():
    now = [100.0]
    c = PodGroupCache(clock=lambda: now[0])
    c.reject("ns/g", "x", backoff=5)
    assert c.backed_off("ns/g")
    now[0] = 105.0
    assert not c.backed_off("ns/g")


@pytest.mark.parametrize("members,phase", [
    ([], "Pending"),
    ([pod("a"), pod("b")], "PreScheduling"),
    ([pod("a", node="n"), pod("b")], "Scheduling"),
    ([pod("a", node="n"), pod("b", node="n")], "Scheduled"),
    ([pod("a", node="n", phase="Running"), pod("b", node="n", phase="Running")], "Running"),
    ([pod("a", node="n", phase="Succeeded"), pod("b", node="n", phase="Succeeded")], "Finished"),
    ([pod("a", node="n", phase="Failed"), pod("b", node="n", phase="Running")], "Failed"),
])
def test_status_phases(members, phase):
    c = PodGroupCache(wall=lambda: "2026-01-01T00:00:05Z")
    c.apply("ADDED", pg())
    for m in members:
        c.on_pod("ADDED", m)
    assert c.status("ns/g")["phase"] == phase


def test_status_counts_start_time_owner_and_dirty_only_when_managed():
    c = PodGroupCache(wall=lambda: "2026-01-01T00:00:05Z")
    c.apply("ADDED", pg())
    c.on_pod("ADDED", pod("a", owner="job-1"))
    assert c.take_dirty() == []  # nobody manages it: never written
    c.manage("ns/g")
    assert c.take_dirty() == ["ns/g"]
    c.reserve("ns/a", "ns/g")
    assert c.take_dirty() == ["ns/g"]
    assert c.status("ns/g") == {"phase": "Scheduling", "scheduled": 0, "running": 0, "succeeded": 0, "failed": 0,
                                "scheduleStartTime": "2026-01-01T00:00:05Z", "occupiedBy": "ns/job-1"}


def test_reports_once_per_kind():
    c = PodGroupCache()
    assert c.should_report("ns/a", "members") and not c.should_report("ns/a", "members")
    assert c.should_report("ns/a", "missing")
    c.forget_report("ns/a")
    assert c.should_report("ns/a", "missing")
