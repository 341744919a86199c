"""Revisions stored in the cluster, on the real control plane: every valid generation of a policy
becomes a ControllerRevision; an invalid edit made while the operator is down does not strand the
policy's pods after a restart (they are bound with the last valid revision as soon as the operator
is ready); `policy-scheduler rollout history` lists the revisions and `rollout undo` writes one back.
No admission webhook runs here: the invalid edit is stored as it would be with the operator down."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from conftest import OperatorProcess, wait_served
from helpers import (FAST_ELECTION, GROUP, PLURAL, VERSION, apply_policy, example_plugins, pod, policy_status,
                     ready_condition, wait_for)

ROOT = Path(__file__).resolve().parents[2]
SCHED = "rev-sched"
POLICY = "rev-binpack"
LABEL = "policy-scheduler.io/policy"


def binpack(**weights) -> list[dict]:
    """policies/binpack.yaml's plugins, with some weights changed."""
    return example_plugins("binpack", **weights)


def bogus() -> list[dict]:
    plugins = binpack()
    fit = next(p for p in plugins if p["name"] == "NodeResourcesFit")
    fit["args"]["scoringStrategy"]["type"] = "Bogus"
    return plugins


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status == 200 and json.loads(r.read())["ready"]
    except (urllib.error.URLError, OSError, ValueError):
        return False


def rollout(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "rollout", *args,
                           "--kubeconfig", str(cluster.kubeconfig_path)], capture_output=True, text=True, timeout=60)


def test_an_invalid_edit_made_while_the_operator_is_down_schedules_with_the_last_valid_revision(
        cluster, api, core, crd, policies, namespace, nodes):
    wait_served(api, crd)
    apps = client.AppsV1Api(api)

    def revisions() -> dict[int, client.V1ControllerRevision]:
        return {r.revision: r for r in apps.list_namespaced_controller_revision(
            namespace, label_selector=f"{LABEL}={POLICY}").items}

    def status_revision(n: int):
        return lambda: policy_status(policies, POLICY).get("revision") == n

    for i in range(3):
        nodes(f"rev-{i}", cpu="4", labels={"e2e": "rev"})
    port = localcluster.free_port()
    op = OperatorProcess(cluster, SCHED, extra=["--revision-namespace", namespace, "--health-port", str(port),
                                                "--health-address", "127.0.0.1", *FAST_ELECTION])
    try:
        op.start()
        # two valid generations: two revisions, the newest in use
        first = apply_policy(policies, POLICY, binpack(), schedulerName=SCHED)
        wait_for(status_revision(1), 30, what="revision 1 in use")
        (r1,) = revisions().values()
        assert r1.metadata.name.startswith(f"{POLICY}-") and r1.metadata.labels == {LABEL: POLICY}
        assert r1.metadata.annotations["policy-scheduler.io/generation"] == "1"
        owner = r1.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid) == ("SchedulingPolicy", POLICY, first["metadata"]["uid"])
        assert r1.data["plugins"] == binpack() and r1.data["schedulerName"] == SCHED
        apply_policy(policies, POLICY, binpack(TaintToleration=2), schedulerName=SCHED)
        wait_for(status_revision(2), 30, what="revision 2 in use")
        assert sorted(revisions()) == [1, 2]

        # the operator goes; an invalid edit gets in (no webhook to refuse it); pods wait
        op.stop()
        apply_policy(policies, POLICY, bogus(), schedulerName=SCHED)
        names = [f"bp{i}" for i in range(3)]
        for n in names:
            core.create_namespaced_pod(namespace, pod(n, namespace, cpu="500m", scheduler=SCHED,
                                                      labels={LABEL: POLICY}, nodeSelector={"e2e": "rev"}))

        # a new process: its pods are bound with revision 2 within 5 s of its readiness
        op.start(wait=False)
        wait_for(lambda: ready(port) or op.proc.poll() is not None, 60, 0.05, what="the operator ready")
        t_ready = time.monotonic()

        def bound():
            got = {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace).items
                   if p.spec.node_name}
            return got if set(got) == set(names) else None

        try:
            placed = wait_for(bound, 5, 0.1, what="the pods bound")
        except AssertionError:
            raise AssertionError(f"pods not bound within 5 s of readiness\n{op.log()[-3000:]}") from None
        print(f"\n  {len(names)} pods bound {time.monotonic() - t_ready:.2f}s after readiness")
        assert len(set(placed.values())) == 1, f"not packed: binpack's MostAllocated is not in use: {placed}"
        decision = json.loads(core.read_namespaced_pod(names[0], namespace).metadata.annotations[
            "policy-scheduler.io/decision"])
        assert decision["policy"] == POLICY

        cond = wait_for(lambda: (lambda c: c if c and c.get("observedGeneration") == 3 else None)(
            ready_condition(policies, POLICY)), 20, what="the condition of generation 3")
        assert cond["status"] == "False" and cond["reason"] == "InvalidSpec"
        assert cond["message"].startswith("generation 3 is invalid: spec.plugins[6].args.scoringStrategy.type"), \
            cond["message"]
        assert cond["message"].endswith("; scheduling with revision 2 (generation 2)"), cond["message"]
        assert policy_status(policies, POLICY)["revision"] == 2
        assert "scheduling with revision 2 (generation 2) read from the cluster" in op.log()
        kubectl = localcluster.bin_dir(build=False) / "kubectl"
        out = subprocess.run([str(kubectl), "get", "schedulingpolicies", POLICY], capture_output=True, text=True,
                             env={"KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(cluster.state_dir)},
                             timeout=60)
        header, row = (ln.split() for ln in out.stdout.splitlines())
        assert dict(zip(header, row))["REVISION"] == "2" and dict(zip(header, row))["READY"] == "False"

        # rollout history: both revisions, the one in use marked, what changed
        h = rollout(cluster, "history", POLICY, "--revision-namespace", namespace)
        assert h.returncode == 0, h.stderr
        print(h.stdout)
        lines = h.stdout.splitlines()
        assert lines[0].endswith("Ready False, scheduling with revision 2"), lines[0]
        rows = {ln.split()[0]: ln for ln in lines[2:]}
        assert sorted(rows) == ["1", "2"]
        assert rows["1"].split()[1] == "1" and "plugins: PrioritySort" in rows["1"]
        assert rows["2"].split()[1] == "2" and " * " in rows["2"] and rows["2"].endswith("TaintToleration weight 3->2")

        # rollout undo: the revision before the one in use (1) written back; valid again, reused
        u = rollout(cluster, "undo", POLICY, "--revision-namespace", namespace)
        assert u.returncode == 0, u.stderr
        assert u.stdout.strip() == (f"schedulingpolicy.policy-scheduler.io/{POLICY} rolled back to revision 1 "
                                    "(generation 1)")
        wait_for(lambda: (ready_condition(policies, POLICY) or {}).get("status") == "True", 20, what="Ready again")
        assert policies.get_cluster_custom_object(GROUP, VERSION, PLURAL, POLICY)["spec"]["plugins"] == binpack()
        wait_for(status_revision(3), 20, what="revision 1 reused as revision 3")
        assert {n: r.metadata.name for n, r in revisions().items()} == {2: revisions()[2].metadata.name,
                                                                        3: r1.metadata.name}
        u = rollout(cluster, "undo", POLICY, "--to-revision", "2", "--revision-namespace", namespace)
        assert u.returncode == 0 and "rolled back to revision 2" in u.stdout, u.stderr
        wait_for(status_revision(4), 20, what="revision 2 reused as revision 4")
        core.create_namespaced_pod(namespace, pod("after-undo", namespace, cpu="500m", scheduler=SCHED,
                                                  labels={LABEL: POLICY}, nodeSelector={"e2e": "rev"}))
        wait_for(lambda: core.read_namespaced_pod("after-undo", namespace).spec.node_name, 20, what="bound")
        h = rollout(cluster, "history", POLICY, "--revision-namespace", namespace)
        assert [ln.split()[0] for ln in h.stdout.splitlines()[2:]] == ["3", "4"], h.stdout
        missing = rollout(cluster, "undo", POLICY, "--to-revision", "9", "--revision-namespace", namespace)
        assert missing.returncode == 1 and "revision 9" in missing.stderr and "not found" in missing.stderr
        assert "Traceback" not in op.log()
    finally:
        op.stop()
        try:
            policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, POLICY)
        except ApiException:
            pass
        # no garbage collector in the test cluster: the policy's revisions go by hand
        apps.delete_collection_namespaced_controller_revision(namespace, label_selector=f"{LABEL}={POLICY}")
