"""The whole scheduling cycle on the real control plane: scheduling gates, pods woken by the
cluster event they wait for, the binding cycle as plugins (with a test-only plugin), and the
error channel."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kubernetes import client

from conftest import OperatorProcess
from helpers import GROUP, PLURAL, VERSION, apply_policy, events_for, pod, wait_bound, wait_for

POLICY = "policy-scheduler.io/policy"
HERE = Path(__file__).resolve().parent


def pod_scheduled(core, ns: str, name: str) -> client.V1PodCondition | None:
    p = core.read_namespaced_pod(name, ns)
    return next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None)


def bound_within(core, ns: str, name: str, since: float, limit: float) -> float:
    """Wait until the pod has a node (polling every 0.1 s); the seconds since ``since``."""
    wait_for(lambda: core.read_namespaced_pod(name, ns).spec.node_name, limit + 10, 0.1, what=f"{name} bound")
    return time.monotonic() - since


# ---------------------------------------------------------------------------------------- gates

def test_gated_pod_is_never_bound_and_goes_at_once_when_ungated(core, namespace, nodes, operator,
                                                                example_policies):
    nodes("gate-0", cpu="4")
    body = pod("gated", namespace, schedulingGates=[{"name": "example.com/quota"}, {"name": "example.com/ipam"}],
               nodeSelector={"kubernetes.io/hostname": "gate-0"})
    core.create_namespaced_pod(namespace, body)
    core.create_namespaced_pod(namespace, pod("free", namespace, nodeSelector={"kubernetes.io/hostname": "gate-0"}))
    wait_bound(core, namespace, ["free"], 30)  # the operator is busy with this namespace: the gated pod was seen
    time.sleep(2)
    p = core.read_namespaced_pod("gated", namespace)
    assert not p.spec.node_name
    cond = pod_scheduled(core, namespace, "gated")
    assert cond.reason == "SchedulingGated" and cond.status == "False"  # the API server's, untouched
    assert events_for(core, namespace, "gated") == []  # no FailedScheduling, no Scheduled
    assert f"{namespace}/gated" not in operator.log()  # never decided, no binding attempted

    # removing one of two gates keeps it gated
    core.patch_namespaced_pod("gated", namespace, {"spec": {"schedulingGates": [{"name": "example.com/ipam"}]}})
    time.sleep(1.5)
    assert not core.read_namespaced_pod("gated", namespace).spec.node_name
    t0 = time.monotonic()
    core.patch_namespaced_pod("gated", namespace, {"spec": {"schedulingGates": None}})
    took = bound_within(core, namespace, "gated", t0, 2.0)
    print(f"\ngated pod bound {took:.2f}s after its last gate was removed")
    assert took <= 2.0
    assert events_for(core, namespace, "gated", "FailedScheduling") == []  # bound on its first attempt


# ---------------------------------------------------------------------------------------- waking

def test_pod_waiting_for_required_affinity_wakes_when_the_pod_it_needs_is_bound(core, namespace, nodes, operator,
                                                                               example_policies):
    nodes("wake-a0", cpu="4", labels={"e2e": "wake-a"})
    nodes("wake-a1", cpu="4", labels={"e2e": "wake-a"})
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    core.create_namespaced_pod(namespace, pod("web", namespace, affinity=affinity, nodeSelector={"e2e": "wake-a"}))
    wait_for(lambda: events_for(core, namespace, "web", "FailedScheduling"), 20, what="web rejected")
    time.sleep(1.5)  # past its first backoff: a wake-up now is the event, not a timer
    # the db pod is bound by another scheduler (created with its node set)
    t0 = time.monotonic()
    core.create_namespaced_pod(namespace, pod("db", namespace, scheduler="other-scheduler", labels={"app": "db"},
                                              nodeName="wake-a1"))
    took = bound_within(core, namespace, "web", t0, 2.0)
    print(f"\npodAffinity pod bound {took:.2f}s after its db pod was")
    assert core.read_namespaced_pod("web", namespace).spec.node_name == "wake-a1"
    assert took <= 2.0


def test_pod_waiting_on_a_spread_constraint_wakes_when_a_pod_is_deleted(core, namespace, nodes, operator,
                                                                       example_policies):
    nodes("wake-s0", cpu="4", labels={"e2e": "wake-s", "topology.kubernetes.io/zone": "za"})
    nodes("wake-s1", cpu="4", labels={"e2e": "wake-s", "topology.kubernetes.io/zone": "zb"})
    # one pod of the app in zone za, none in zb; zb is full (a pod of another app takes its cpu), so
    # the new pod fits no node: in za the skew would be 2 - 0 > 1, and zb has no room
    core.create_namespaced_pod(namespace, pod("old", namespace, scheduler="other-scheduler",
                                              labels={"app": "spread"}, nodeName="wake-s0"))
    core.create_namespaced_pod(namespace, pod("hog", namespace, scheduler="other-scheduler", cpu="4",
                                              nodeName="wake-s1"))
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "spread"}}}]
    core.create_namespaced_pod(namespace, pod("new", namespace, labels={"app": "spread"},
                                              topologySpreadConstraints=spread, nodeSelector={"e2e": "wake-s"}))
    ev = wait_for(lambda: events_for(core, namespace, "new", "FailedScheduling"), 20, what="new rejected")
    assert "didn't match pod topology spread constraints" in ev[0].message
    time.sleep(1.5)
    t0 = time.monotonic()
    core.delete_namespaced_pod("old", namespace, grace_period_seconds=0)  # za would now be 1 - 0: it fits
    took = bound_within(core, namespace, "new", t0, 2.0)
    print(f"\nspread-constrained pod bound {took:.2f}s after a pod was deleted")
    assert core.read_namespaced_pod("new", namespace).spec.node_name == "wake-s0"
    assert took <= 2.0


# ---------------------------------------------------------------------------------------- binding cycle

@pytest.fixture(scope="module")
def probe_operator(cluster, crd):
    # probe_plugin.py from here, the rest as the test run finds it (a work tree's operator/ first)
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    op = OperatorProcess(cluster, "probe-scheduler", extra=["--plugin-module", "probe_plugin"],
                         env={"PYTHONPATH": path}).start()
    assert "out-of-tree plugins registered: BindingProbe" in op.log()
    yield op
    op.stop()


def calls(log: Path, key: str) -> list[str]:
    if not log.exists():
        return []
    return [line.split()[1] for line in log.read_text().splitlines() if line.split()[0] == key]


def settled(log: Path, key: str, last: str) -> None:
    """Wait until the probe logged ``last`` for the pod (the plugin runs in the operator's process,
    after the API server already shows the pod bound)."""
    wait_for(lambda: calls(log, key)[-1:] == [last], 10, what=f"{last} of {key} in the probe's log")


def test_binding_cycle_runs_plugins_in_order(core, namespace, nodes, probe_operator, policies, tmp_path):
    log = tmp_path / "probe.log"
    apply_policy(policies, "probe", [{"name": "NodeResourcesFit"},
                                     {"name": "BindingProbe", "args": {"log": str(log), "timeoutSeconds": 1}}],
                 schedulerName="probe-scheduler")
    nodes("probe-0", cpu="8", labels={"e2e": "probe"})

    def mk(name: str, mode: str = "") -> None:
        labels = {POLICY: "probe", **({"probe": mode} if mode else {})}
        core.create_namespaced_pod(namespace, pod(name, namespace, scheduler="probe-scheduler", labels=labels,
                                                  nodeSelector={"e2e": "probe"}))

    # Permit waits, then the plugin allows it through the waiting pods' handle: bound
    mk("allowed", "wait-allow")
    wait_bound(core, namespace, ["allowed"], 30)
    # PostBind runs once the Binding's answer is in, which the API can show bound a moment before
    settled(log, f"{namespace}/allowed", "postbind")
    assert calls(log, f"{namespace}/allowed") == ["reserve", "permit", "allow", "prebind", "bind-skip", "postbind"]

    # a PreBind failure unreserves and requeues with backoff; the second try binds
    mk("prebind", "prebind-fail")
    wait_bound(core, namespace, ["prebind"], 30)
    settled(log, f"{namespace}/prebind", "postbind")
    assert calls(log, f"{namespace}/prebind") == ["reserve", "permit", "prebind", "unreserve",
                                                  "reserve", "permit", "prebind", "bind-skip", "postbind"]
    ev = events_for(core, namespace, "prebind", "FailedScheduling")
    assert ev and 'running PreBind plugin "BindingProbe": the probe refuses the first PreBind' in ev[0].message

    # a Permit timeout rejects in the plugin's name, unreserves and requeues the pod
    mk("late", "wait-timeout")
    ev = wait_for(lambda: events_for(core, namespace, "late", "FailedScheduling"), 30, what="permit timeout")
    assert "rejected due to timeout after waiting 1s at plugin BindingProbe" in ev[0].message
    assert calls(log, f"{namespace}/late") == ["reserve", "permit", "unreserve"]
    assert not core.read_namespaced_pod("late", namespace).spec.node_name
    # the rejected pod waits for a cluster event (the probe registers none: any event), then binds
    time.sleep(1.2)
    core.patch_node("probe-0", {"metadata": {"labels": {"touched": "yes"}}})
    wait_bound(core, namespace, ["late"], 30)
    settled(log, f"{namespace}/late", "postbind")
    assert calls(log, f"{namespace}/late")[3:] == ["reserve", "permit", "prebind", "bind-skip", "postbind"]
    policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "probe")


# ---------------------------------------------------------------------------------------- errors

def test_a_plugin_error_is_an_error_not_a_rejection(core, namespace, nodes, operator, policies, example_policies):
    """Regression: PodTopologySpread disabled at preFilter made its Filter report an internal
    error as a per-node reason ("0/3 nodes are available: 3 reading ... not found.")."""
    apply_policy(policies, "broken-spread", [{"name": "PodTopologySpread"}],
                 disabled=[{"name": "PodTopologySpread", "point": "preFilter"}])
    nodes("err-0", cpu="4", labels={"e2e": "err"})
    core.create_namespaced_pod(namespace, pod("p", namespace, labels={POLICY: "broken-spread"},
                                              nodeSelector={"e2e": "err"}))
    ev = wait_for(lambda: events_for(core, namespace, "p", "FailedScheduling"), 30, what="FailedScheduling")
    msg = ev[0].message
    assert msg.startswith('running "PodTopologySpread" filter plugin: reading '), msg
    assert "nodes are available" not in msg
    cond = wait_for(lambda: pod_scheduled(core, namespace, "p"), 10, what="condition")
    assert cond.reason == "SchedulerError"
    policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "broken-spread")
