"""Coscheduling (scheduler-plugins' PodGroups, crds/podgroups.yaml) with the `gang` example policy,
on the real control plane: two groups that cannot both fit (one bound whole, the other not at all,
saying why, then bound whole once the first is gone), and a group whose Permit wait times out
(every reservation released, the next pods placed on that room)."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from helpers import events_for, pod, wait_for

GROUP, VERSION, PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
LABEL = "scheduling.x-k8s.io/pod-group"
POOL = "e2e.policy-scheduler.io/gang-pool"


@pytest.fixture
def groups(api, namespace):
    objs = client.CustomObjectsApi(api)

    def make(name: str, min_member: int, **spec) -> dict:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": min_member, **spec}}
        return objs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    make.status = lambda name: objs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get(
        "status") or {}
    return make


def member(name: str, namespace: str, group: str | None, pool: str, cpu: str = "1500m", **kw) -> dict:
    labels = {"policy-scheduler.io/policy": "gang", **({LABEL: group} if group else {})}
    return pod(name, namespace, cpu=cpu, labels=labels, nodeSelector={POOL: pool}, **kw)


def bound(core, namespace: str, prefix: str) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace).items
            if p.metadata.name.startswith(prefix) and p.spec.node_name}


def test_two_groups_that_cannot_both_fit(core, namespace, nodes, example_policies, groups, operator):
    """Six nodes of 4 cpu hold twelve 1.5-cpu pods: either group of eight fits alone, not both.
    The pods are created interleaved. One group is bound whole; the other holds nothing (four
    plain pods then fit in the room left) and says why; when the first group's pods are deleted,
    the second is bound whole."""
    t0 = time.monotonic()
    pool = f"two-{namespace[-6:]}"
    for i in range(6):
        nodes(f"{pool}-n{i}", cpu="4", labels={POOL: pool})
    groups("a", 8)
    groups("b", 8)
    for i in range(8):
        for g in ("a", "b"):
            core.create_namespaced_pod(namespace, member(f"{g}-{i}", namespace, g, pool))

    def one_whole():
        a, b = bound(core, namespace, "a-"), bound(core, namespace, "b-")
        return ("a", "b") if len(a) == 8 else ("b", "a") if len(b) == 8 else None

    winner, loser = wait_for(one_whole, 30, what="one group bound whole")
    t_whole = time.monotonic() - t0

    def loser_told():
        evs = [e for i in range(8) for e in events_for(core, namespace, f"{loser}-{i}", "FailedScheduling")]
        return [e.message for e in evs if f"PodGroup {namespace}/{loser}" in (e.message or "")]

    why = wait_for(loser_told, 20, what=f"a FailedScheduling event naming PodGroup {loser}")
    assert any("Insufficient cpu" in m for m in why), why
    assert bound(core, namespace, f"{loser}-") == {}
    # the loser holds no room: the four 1.5-cpu slots left take four plain pods
    plain = [f"plain-{i}" for i in range(4)]
    for name in plain:
        core.create_namespaced_pod(namespace, member(name, namespace, None, pool))
    wait_for(lambda: len(bound(core, namespace, "plain-")) == 4, 20, what="4 plain pods bound")
    assert bound(core, namespace, f"{loser}-") == {}
    wait_for(lambda: groups.status(winner).get("phase") == "Scheduled", 10, what=f"PodGroup {winner} Scheduled")
    st = groups.status(winner)
    assert st["scheduled"] == 8 and st.get("scheduleStartTime"), st
    assert groups.status(loser).get("scheduled", 0) == 0

    # the winner (and the plain pods) go: the loser is bound whole
    for i in range(8):
        core.delete_namespaced_pod(f"{winner}-{i}", namespace, grace_period_seconds=0)
    t1 = time.monotonic()
    wait_for(lambda: len(bound(core, namespace, f"{loser}-")) == 8, 40, what=f"group {loser} bound whole")
    t_second = time.monotonic() - t1
    wait_for(lambda: groups.status(loser).get("scheduled") == 8, 10, what=f"PodGroup {loser} status")
    assert "Traceback" not in operator.log()
    print(f"\nfirst group whole after {t_whole:.1f}s; second whole {t_second:.1f}s after the first was deleted")


def test_timeout_releases_every_reservation(core, namespace, nodes, example_policies, groups, operator):
    """A group of five whose fifth member nobody schedules: its four pods fill two nodes, wait at
    Permit for 3 s (scheduleTimeoutSeconds), are all rejected and unreserved; four plain pods
    waiting for that room are then bound, and the group's pods are not."""
    pool = f"slow-{namespace[-6:]}"
    for i in range(2):
        nodes(f"{pool}-n{i}", cpu="4", labels={POOL: pool})
    groups("slow", 5, scheduleTimeoutSeconds=3)
    for i in range(4):
        core.create_namespaced_pod(namespace, member(f"slow-{i}", namespace, "slow", pool))
    # the fifth member exists (the quorum counts it) but no scheduler runs for it
    core.create_namespaced_pod(namespace, member("slow-4", namespace, "slow", pool, scheduler="nobody"))
    wait_for(lambda: groups.status("slow").get("phase") == "Scheduling", 15, what="PodGroup slow Scheduling")
    t_reserved = time.monotonic()
    plain = [f"next-{i}" for i in range(4)]
    for name in plain:
        core.create_namespaced_pod(namespace, member(name, namespace, None, pool))
    wait_for(lambda: events_for(core, namespace, "next-0", "FailedScheduling"), 10,
             what="next-0 unschedulable while the group holds the room")
    assert bound(core, namespace, "next-") == {}
    wait_for(lambda: len(bound(core, namespace, "next-")) == 4, 20, what="4 next pods bound")
    waited = time.monotonic() - t_reserved
    assert 2.0 <= waited <= 12, waited
    assert bound(core, namespace, "slow-") == {}
    msgs = [e.message for i in range(4) for e in events_for(core, namespace, f"slow-{i}", "FailedScheduling")]
    assert any("rejected due to timeout after waiting 3s at plugin Coscheduling" in m for m in msgs), msgs
    assert sum("Coscheduling" in m for m in msgs) >= 4, msgs
    wait_for(lambda: groups.status("slow").get("phase") == "PreScheduling", 10, what="PodGroup slow PreScheduling")
    assert "Traceback" not in operator.log()
    print(f"\nnext pods bound {waited:.1f}s after the group reserved the room")
