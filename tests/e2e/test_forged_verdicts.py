"""A canary's verdict cannot be forged, on the real control plane.

A tenant reads the candidate hash in the policy's status and the arm names in the decision
annotation of a pod the canary scheduled, then writes that annotation on 100 pods the operator
never bound (created with spec.nodeName set, some annotated at creation, some patched afterwards,
some carrying the MAC of a genuine pod copied with its annotation): the rollout's counts and phase
do not move, the forgeries are counted in policy_scheduler_forged_decisions_total and logged once
per pod, a genuine canary binding still counts, and a new operator process (after the first one
stopped, with the counts in the status reset so that it must recount the pods themselves) counts
every pod the first one bound and none of the forged ones. `explain` says which decision the
scheduler wrote.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from conftest import OperatorProcess
from helpers import (FAST_ELECTION, GROUP, PLURAL, VERSION, apply_policy, arms, example_plugins, metric, pod,
                     policy_status, wait_bound, wait_for)

LABEL = "policy-scheduler.io/policy"
DECISION = "policy-scheduler.io/decision"
MAC = "policy-scheduler.io/decision-mac"
SCHED = POLICY = "forged-verdicts"
FORGED = "policy_scheduler_forged_decisions_total"


def rollout(policies) -> dict:
    return policy_status(policies, POLICY).get("rollout") or {}


def counts(policies) -> tuple[int, int]:
    r = rollout(policies)
    return (r.get("canary") or {}).get("bound", 0), (r.get("stable") or {}).get("bound", 0)


def genuine(core, namespace: str, names: list[str]) -> dict[str, int]:
    """Create pods the operator schedules; once bound, their arms (from their annotations)."""
    for n in names:
        core.create_namespaced_pod(namespace, pod(n, namespace, cpu="100m", scheduler=SCHED, labels={LABEL: POLICY},
                                                  nodeSelector={"e2e": "fv"}))
    wait_bound(core, namespace, names, 60)
    return arms(core, namespace, names)


def start(cluster, ops: str, port: int, log_name: str) -> OperatorProcess:
    op = OperatorProcess(cluster, SCHED, log_name=log_name, extra=[
        "--default-policy", POLICY, "--revision-namespace", ops, "--metrics-port", str(port),
        "--metrics-address", "127.0.0.1", *FAST_ELECTION]).start()
    wait_for(lambda: "successfully acquired lease" in op.log(), 30, what="the operator leads")
    return op


def explain(cluster, namespace: str, name: str, ops: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "explain", f"{namespace}/{name}", "-o", "json",
                        "--operator-namespace", ops, "--kubeconfig", str(cluster.kubeconfig_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_forged_decision_annotations_move_no_count_not_even_after_a_failover(cluster, core, namespace, nodes, crd,
                                                                           policies):
    ops = f"ops-fv-{os.getpid() % 1000}"  # the operator's namespace: its key's Secret
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ops)))
    for i in range(6):
        nodes(f"fv-{i:02d}", cpu="32", memory="64Gi", labels={"e2e": "fv"})
    apply_policy(policies, POLICY, example_plugins("binpack"), schedulerName=SCHED,
                 rollout={"strategy": "Canary", "percent": 50,
                          "candidate": {"plugins": example_plugins("binpack", NodeResourcesFit=1, PodTopologySpread=5)},
                          "promote": {"pods": 30}})
    port = localcluster.free_port()
    op = start(cluster, ops, port, SCHED)
    op2 = None
    try:
        wait_for(lambda: rollout(policies).get("phase") == "Progressing", 30, what="Progressing")
        chash = rollout(policies)["candidateHash"]
        secret = core.read_namespaced_secret(f"{SCHED}-decision-key", ops)
        assert len(base64.b64decode(secret.data["key"])) == 32
        assert base64.b64decode(secret.data["key"]).hex() not in op.log() and secret.data["key"] not in op.log()

        # genuine pods: the canary takes about half, and the status counts them
        first = genuine(core, namespace, [f"g{i:02d}" for i in range(10)])
        assert first.get("canary", 0) >= 1, first  # 1 - 2^-10: the canary took some
        wait_for(lambda: counts(policies) == (first.get("canary", 0), first.get("stable", 0)), 20,
                 what=f"the status counts the genuine pods {first}")
        before = rollout(policies)
        real = next(p for p in core.list_namespaced_pod(namespace).items
                    if p.metadata.name.startswith("g") and '"canary"' in p.metadata.annotations[DECISION])
        real_ann, real_mac = real.metadata.annotations[DECISION], real.metadata.annotations[MAC]
        assert f'"candidate":"{chash}"' in real_ann

        # the attacker: 100 pods never scheduled, each claiming a canary (or stable) binding of this
        # candidate; half of the canary claims also claim a failed filter (the verdict's other half)
        def claim(i: int, node: str) -> str:
            d = json.loads(real_ann)
            d["node"] = node
            d["rollout"] = {"arm": "canary" if i % 2 else "stable", "candidate": chash}
            if i % 4 == 1:
                d["feasible"], d["failures"] = 0, {"node(s) didn't match Pod's node affinity/selector": 6}
            return json.dumps(d, separators=(",", ":"))

        t0 = time.monotonic()
        for i in range(100):
            node = f"fv-{i % 6:02d}"
            anns = {}
            if i % 5 == 0:
                anns = {DECISION: real_ann, MAC: real_mac}  # a genuine pod's annotation and MAC, copied
            elif i % 5 == 1:
                anns = {DECISION: claim(i, node), MAC: real_mac}  # a genuine MAC on other text
            elif i % 5 == 2:
                anns = {DECISION: claim(i, node), MAC: "v1:" + base64.urlsafe_b64encode(os.urandom(32)).decode()}
            elif i % 5 == 3:
                anns = {DECISION: claim(i, node)}
            body = pod(f"f{i:03d}", namespace, cpu="10m", scheduler=SCHED, labels={LABEL: POLICY}, nodeName=node)
            body["metadata"]["annotations"] = anns
            core.create_namespaced_pod(namespace, body)
            if i % 5 == 4:  # annotated after the fact, on a running pod
                core.patch_namespaced_pod(f"f{i:03d}", namespace, {"metadata": {"annotations": {DECISION: claim(i, node)}}})
        for i in range(100):  # and touched again: each pod's update comes back on the watch
            core.patch_namespaced_pod(f"f{i:03d}", namespace, {"metadata": {"labels": {"touched": "yes"}}})
        wait_for(lambda: metric(port, FORGED, policy=POLICY) >= 100, 30, what="100 forgeries counted")
        took = time.monotonic() - t0
        time.sleep(5)  # a few status writes (every 2 s) and rollout ticks (every 1 s)
        after = rollout(policies)
        assert metric(port, FORGED, policy=POLICY) == 100  # once per pod, whatever its updates
        assert op.log().count("was not written by this scheduler") == 100
        assert after["phase"] == "Progressing" and after["candidateHash"] == chash
        for arm in ("canary", "stable"):
            assert after[arm] == before[arm], (arm, before[arm], after[arm])

        # a genuine canary binding still counts
        second = genuine(core, namespace, [f"h{i:02d}" for i in range(10)])
        total = {a: first.get(a, 0) + second.get(a, 0) for a in ("canary", "stable")}
        assert total["canary"] < 30, total  # below promote.pods: the phase must stay
        wait_for(lambda: counts(policies) == (total["canary"], total["stable"]), 20,
                 what=f"the status counts the genuine pods {total}")
        assert rollout(policies)["phase"] == "Progressing"

        # explain tells the scheduler's decision from the tenant's
        assert explain(cluster, namespace, real.metadata.name, ops)["decisionVerified"] is True
        for name in ("f000", "f001", "f003", "f004"):
            doc = explain(cluster, namespace, name, ops)
            assert doc["decisionVerified"] is False, doc["decisionTrust"]

        # failover: the operator stops, the status forgets what it counted, a new process recounts
        op.stop()
        status = policy_status(policies, POLICY)
        zero = {"attempts": 0, "failures": 0, "bound": 0}
        policies.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, POLICY, {"status": {"rollout": {
            **status["rollout"], "canary": zero, "stable": zero, "summary": "reset by the test"}}})
        assert counts(policies) == (0, 0)
        port2 = localcluster.free_port()
        op2 = start(cluster, ops, port2, SCHED + "-2")
        wait_for(lambda: counts(policies) == (total["canary"], total["stable"]), 30,
                 what=f"the new process's counts: the genuine pods {total}")
        wait_for(lambda: metric(port2, FORGED, policy=POLICY) == 100, 10, what="the new process refuses the 100")
        assert "key in Secret" in op2.log() or "decision annotations signed and verified" in op2.log()
        time.sleep(3)
        assert counts(policies) == (total["canary"], total["stable"])
        assert rollout(policies)["phase"] == "Progressing" and rollout(policies)["candidateHash"] == chash
        third = genuine(core, namespace, [f"k{i:02d}" for i in range(4)])
        grand = {a: total[a] + third.get(a, 0) for a in ("canary", "stable")}
        wait_for(lambda: counts(policies) == (grand["canary"], grand["stable"]), 20,
                 what=f"the new leader counts its own bindings {grand}")
        print(f"\nforged verdicts: 100 forged pods (created and patched in {took:.1f}s) counted in {FORGED}, none in "
              f"the rollout; genuine {grand} (canary, stable) counted by both processes")
        for o in (op, op2):
            assert "Traceback" not in o.log()
    finally:
        for o in (op, op2):
            if o is not None:
                o.stop()
        try:
            policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, POLICY)
        except ApiException:
            pass
        core.delete_namespace(ops)
