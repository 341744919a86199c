"""GangScheduling (Kubernetes' own PodGroups, scheduling.k8s.io, pods' spec.schedulingGroup) with
the `gang` example policy, on the real control plane started with the GenericWorkload and
TopologyAwareWorkloadScheduling feature gates: two groups that cannot both fit (one bound whole,
the other not at all, saying why, then bound whole once the first is gone), and racks (a group
of eight 4-cpu pods with `topology: [{key: rack}]` in one rack, the tightest; a group no rack can
hold waits and says so)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from helpers import events_for, pod, wait_for

GROUP, PLURAL = "scheduling.k8s.io", "podgroups"
VERSION = localcluster.GANG_API_VERSION
POOL = "e2e.policy-scheduler.io/native-gang-pool"
CONDITION = "PodGroupInitiallyScheduled"


@pytest.fixture
def groups(api, namespace):
    objs = client.CustomObjectsApi(api)
    try:
        objs.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    except ApiException as e:  # the session's control plane starts with the gang gates: a set-up failure
        pytest.fail(f"{GROUP}/{VERSION} PodGroups are not served ({e.status}): the e2e control plane must run "
                    f"with the GenericWorkload gate (hack/localcluster.py --gangs)")

    def make(name: str, min_count: int, topology: str | None = None) -> dict:
        spec: dict = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
        if topology:
            spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return objs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    def condition(name: str) -> dict:
        st = objs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get("status") or {}
        return next((c for c in st.get("conditions") or [] if c.get("type") == CONDITION), {})

    make.condition = condition
    return make


def member(name: str, namespace: str, group: str | None, pool: str, cpu: str = "1500m", **kw) -> dict:
    body = pod(name, namespace, cpu=cpu, labels={"policy-scheduler.io/policy": "gang"}, nodeSelector={POOL: pool},
               **kw)
    if group:
        body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


def bound(core, namespace: str, prefix: str) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace).items
            if p.metadata.name.startswith(prefix) and p.spec.node_name}


def messages(core, namespace: str, names) -> list[str]:
    return [e.message or "" for n in names for e in events_for(core, namespace, n, "FailedScheduling")]


def test_two_native_groups_that_cannot_both_fit(core, namespace, nodes, example_policies, groups, operator):
    """Six nodes of 4 cpu hold twelve 1.5-cpu pods: either gang of eight fits alone, not both.
    The pods are created interleaved. One group is bound whole; the other holds nothing (four
    plain pods then fit in the room left) and says why (its members' own FitErrors, the group's
    status for the others: upstream's words); its PodGroup's PodGroupInitiallyScheduled
    condition is False (Unschedulable) and the winner's True (within 2 s of its pods being bound); when the first group's pods are
    deleted, the second is bound whole."""
    t0 = time.monotonic()
    pool = f"ntwo-{namespace[-6:]}"
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
    # the condition is written as the cycle decides (upstream writes it as the cycle ends), not
    # seconds after the pods are bound
    wait_for(lambda: groups.condition(winner).get("status") == "True", 2, what=f"{winner} {CONDITION}=True at once")
    why = wait_for(lambda: [m for m in messages(core, namespace, [f"{loser}-{i}" for i in range(8)])
                            if "pod group is unschedulable" in m], 20,
                   what=f"a FailedScheduling event of group {loser} in upstream's words")
    assert any("minCount (8) cannot be satisfied" in m for m in why), why
    assert any("Insufficient cpu" in m for m in messages(core, namespace, [f"{loser}-{i}" for i in range(8)]))
    assert bound(core, namespace, f"{loser}-") == {}
    for name in [f"plain-{i}" for i in range(4)]:
        core.create_namespaced_pod(namespace, member(name, namespace, None, pool))
    wait_for(lambda: len(bound(core, namespace, "plain-")) == 4, 20, what="4 plain pods bound")
    assert bound(core, namespace, f"{loser}-") == {}
    wait_for(lambda: groups.condition(winner).get("status") == "True", 10, what=f"{winner} {CONDITION}=True")
    cond = wait_for(lambda: groups.condition(loser) or None, 10, what=f"{loser} {CONDITION}")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable"), cond

    for i in range(8):
        core.delete_namespaced_pod(f"{winner}-{i}", namespace, grace_period_seconds=0)
    t1 = time.monotonic()
    wait_for(lambda: len(bound(core, namespace, f"{loser}-")) == 8, 40, what=f"group {loser} bound whole")
    t_second = time.monotonic() - t1
    wait_for(lambda: groups.condition(loser).get("status") == "True", 2, what=f"{loser} {CONDITION}=True at once")
    assert "Traceback" not in operator.log()
    print(f"\nfirst group whole after {t_whole:.1f}s; second whole {t_second:.1f}s after the first was deleted")


def test_racks(cluster, core, namespace, nodes, example_policies, groups, operator):
    """Racks of 4 nodes labelled `rack`: r0 of 8-cpu nodes (32 cpu), r1 of 16-cpu nodes (64).
    A group of eight 4-cpu pods with topology [{key: rack}] fits both and lands whole in r0, the
    fuller placement (upstream's score); `explain` names the group and its rack. A group of
    seventeen (68 cpu) fits no rack: nothing of it is bound, and its pods' events and the
    PodGroup's condition say so in upstream's words (no placement is available)."""
    pool = f"rack-{namespace[-6:]}"
    for r, cpu in (("r0", "8"), ("r1", "16")):
        for i in range(4):
            nodes(f"{pool}-{r}-n{i}", cpu=cpu, labels={POOL: pool, "rack": f"{pool}-{r}"})
    groups("t", 8, topology="rack")
    for i in range(8):
        core.create_namespaced_pod(namespace, member(f"t-{i}", namespace, "t", pool, cpu="4"))
    placed = wait_for(lambda: (lambda b: b if len(b) == 8 else None)(bound(core, namespace, "t-")), 30,
                      what="group t bound")
    assert {n.rsplit("-", 1)[0] for n in placed.values()} == {f"{pool}-r0"}, placed
    # explain names the group and the domain chosen for it
    out = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "explain", f"{namespace}/t-0",
                          "--kubeconfig", str(cluster.kubeconfig_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"group:     PodGroup {namespace}/t, minCount 8, domain rack={pool}-r0" in out.stdout, out.stdout

    groups("w", 17, topology="rack")
    for i in range(17):
        core.create_namespaced_pod(namespace, member(f"w-{i}", namespace, "w", pool, cpu="4"))
    unplaceable = "placements are available, first placement status: minCount (17) cannot be satisfied"
    why = wait_for(lambda: [m for m in messages(core, namespace, [f"w-{i}" for i in range(17)])
                            if unplaceable in m], 30, what="group w says no rack holds it")
    assert all(m.startswith("pod group is unschedulable, ") for m in why), why
    time.sleep(2)
    assert bound(core, namespace, "w-") == {}
    cond = wait_for(lambda: groups.condition("w") or None, 10, what=f"w {CONDITION}")
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable" and unplaceable in cond["message"], cond
    assert "Traceback" not in operator.log()
