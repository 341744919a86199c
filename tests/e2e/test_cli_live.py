"""The command line on the real control plane, as a user types it: `explain -o json|yaml` of a
scheduled and an unscheduled pod piped into a parser (the unscheduled one names the policy it
would be scheduled with), `explain NAME -n NS`, `tune` on the live cluster, and `run` stopping
within a second of SIGTERM.

The operator here has its own scheduler name and policy; the pods select this test's nodes."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes.client.rest import ApiException

from conftest import OperatorProcess
from helpers import GROUP, PLURAL, VERSION, apply_policy, events_for, pod, wait_bound, wait_for

SCHED = "ps-cli"
POLICY = "cli-e2e"
POLICY_LABEL = "policy-scheduler.io/policy"
DEFAULT_POLICY_LABEL = "policy-scheduler.io/default-policy"
PLUGINS = [{"name": "NodeUnschedulable"}, {"name": "NodeAffinity", "weight": 1},
           {"name": "NodeResourcesFit", "weight": 1}, {"name": "PodTopologySpread", "weight": 2}]
TUNING = {"objective": {"nodesUsed": 1}, "bounds": {"NodeResourcesFit": [1, 10], "PodTopologySpread": [1, 10]}}
PROGRAM = str(Path(sys.executable).parent / "policy-scheduler")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(command, shell=True, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def op(cluster, crd, policies):
    apply_policy(policies, POLICY, PLUGINS, schedulerName=SCHED, tuning=TUNING)
    o = OperatorProcess(cluster, SCHED).start()
    yield o
    o.stop()
    try:
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, POLICY)
    except ApiException:
        pass


def test_explain_json_and_yaml_of_a_scheduled_and_an_unscheduled_pod(cluster, core, namespace, nodes, op):
    for i in range(3):
        nodes(f"cli-{i}", cpu="4", labels={"e2e": "cli"})
    kc = cluster.kubeconfig_path
    # the namespace names the policy of its unlabelled pods
    core.patch_namespace(namespace, {"metadata": {"labels": {DEFAULT_POLICY_LABEL: POLICY}}})
    core.create_namespaced_pod(namespace, pod("x", namespace, scheduler=SCHED, nodeSelector={"e2e": "cli"}))
    node = wait_bound(core, namespace, ["x"], 60)["x"]
    core.create_namespaced_pod(namespace, pod("big", namespace, cpu="64", scheduler=SCHED,
                                              nodeSelector={"e2e": "cli"}))
    wait_for(lambda: events_for(core, namespace, "big", "FailedScheduling"), 60, what="big's FailedScheduling")

    # the acceptance: the output is one JSON document, for both
    for name in ("x", "big"):
        p = sh(f"{PROGRAM} explain {namespace}/{name} -o json --kubeconfig {kc} | python3 -m json.tool")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["pod"] == f"{namespace}/{name}"

    p = sh(f"{PROGRAM} explain {namespace}/x -o json --kubeconfig {kc}")
    doc = json.loads(p.stdout)
    assert doc["node"] == node and doc["scheduler"] == SCHED
    assert (doc["policy"], doc["policySource"]) == (POLICY, "decision")
    assert doc["decision"]["node"] == node and 1 <= len(doc["decision"]["top"]) <= 3  # three nodes fit
    assert doc["podScheduled"]["status"] == "True"

    p = sh(f"{PROGRAM} explain big -n {namespace} -o yaml --kubeconfig {kc}")
    assert p.returncode == 0, p.stderr
    doc = yaml.safe_load(p.stdout)
    assert doc["node"] is None and doc["decision"] is None
    assert (doc["policy"], doc["policySource"]) == (POLICY, "namespaceLabel")
    assert doc["podScheduled"]["status"] == "False" and doc["podScheduled"]["reason"] == "Unschedulable"
    assert "Insufficient cpu" in doc["lastFailedScheduling"]["message"]
    print("\n  explain big -o yaml:\n" + "\n".join("    " + x for x in p.stdout.splitlines()))

    # text: the policy the pod would be scheduled with, and why it is not
    p = sh(f"{PROGRAM} explain big --namespace {namespace} --kubeconfig {kc}")
    lines = p.stdout.splitlines()
    assert lines[0] == f"pod {namespace}/big: scheduler {SCHED}, node (none)"
    assert lines[1] == f"  policy:    {POLICY}   (would schedule it: the namespace's label {DEFAULT_POLICY_LABEL})"
    assert lines[2].startswith("  not scheduled (Unschedulable): ") and "Insufficient cpu" in lines[2]

    # --top: at most what the decision holds
    p = sh(f"{PROGRAM} explain {namespace}/x --top 1 -o json --kubeconfig {kc}")
    assert [t["node"] for t in json.loads(p.stdout)["decision"]["top"]] == [node]


def test_tune_reads_the_live_cluster(cluster, core, namespace, nodes, op, tmp_path):
    for i in range(4):
        nodes(f"cli-tune-{i}", cpu="8", memory="32Gi", labels={"e2e": "cli-tune"})
    pods = [pod(f"t-{i}", namespace, cpu="1", memory="1Gi", scheduler=SCHED, labels={POLICY_LABEL: POLICY, "app": "t"},
                nodeSelector={"e2e": "cli-tune"},
                topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                            "whenUnsatisfiable": "ScheduleAnyway",
                                            "labelSelector": {"matchLabels": {"app": "t"}}}]) for i in range(8)]
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    p = sh(f"{PROGRAM} tune --policy {POLICY} --pods {tmp_path / 'pods.yaml'} --max-replays 6 --json "
           f"--kubeconfig {cluster.kubeconfig_path} --scheduler-name {SCHED}")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["source"] == "the live cluster" and out["snapshot"] is None
    assert out["policy"] == POLICY and out["pods"] == 8 and 1 <= out["replays"] <= 6
    assert set(out["current"]["weights"]) >= {"NodeResourcesFit", "PodTopologySpread"}
    p = sh(f"{PROGRAM} tune --policy nope --pods {tmp_path / 'pods.yaml'} --kubeconfig {cluster.kubeconfig_path} "
           f"--scheduler-name {SCHED}")
    assert p.returncode == 2 and "nope" in p.stderr and "Traceback" not in p.stderr


def test_run_stops_within_a_second_of_sigterm(cluster, core, crd, namespace, nodes, policies):
    """The leader, having scheduled a pod, with its probe, metrics and tuner: SIGTERM to exit
    status 0 within a second, the Lease released, and a last line saying it stopped."""
    sched = "ps-cli-stop"
    apply_policy(policies, sched, PLUGINS, schedulerName=sched, tuning=TUNING)
    nodes("cli-stop-0", labels={"e2e": "cli-stop"})
    o = OperatorProcess(cluster, sched, extra=["--default-policy", sched, "--metrics-port", str(free_port()),
                                               "--health-port", str(free_port())])
    try:
        o.start()
        wait_for(lambda: "this replica is the leader" in o.log(), 30, what="leadership")
        core.create_namespaced_pod(namespace, pod("s", namespace, scheduler=sched, nodeSelector={"e2e": "cli-stop"}))
        wait_bound(core, namespace, ["s"], 60)
        time.sleep(1.5)  # the tuner's worker process starts once the queue is empty
        t0 = time.monotonic()
        o.proc.send_signal(signal.SIGTERM)
        code = o.proc.wait(15)
        took = time.monotonic() - t0
        print(f"\n  exit status {code} {took:.2f}s after SIGTERM; last lines:\n    "
              + "\n    ".join(o.log().splitlines()[-3:]))
        assert code == 0
        assert took < 1.0, o.log()[-3000:]
        assert "SIGTERM received: stopping" in o.log()
        assert "released lease" in o.log()
        assert "policy-scheduler stopped (SIGTERM) in " in o.log().splitlines()[-1]
    finally:
        o.stop()
        try:
            policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, sched)
        except ApiException:
            pass
