"""Suggestions on the real control plane: pods that cannot be placed (too much cpu, an untolerated
taint, a nodeSelector no node matches, a cordoned node) get a SchedulingHint event and the signed
policy-scheduler.io/Suggestions condition; `explain -o json` lists the suggestion as verified;
applying the top suggestion (the pod re-created as its patch says, or the cluster change it names)
gets the pod bound by the operator on the node it named, or on one of equal score. The condition
is written once: its own write neither requeues the pod nor starts another search. Small: two
pods of each kind, one case at a time with its own nodes (a larger seeded run is later work)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from kubernetes import client

from conftest import OperatorProcess
from helpers import apply_policy, example_plugins, node, pod, recreated, suggestions_condition, wait_for

SCHED = POLICY = "hints"
DECISION = "policy-scheduler.io/decision"
TAINT = {"key": "dedicated", "value": "hints", "effect": "NoSchedule"}
CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
PER_KIND = 2


def raw_pod(core, namespace: str, name: str) -> dict:
    return json.loads(core.read_namespaced_pod(name, namespace, _preload_content=False).data)


def explain(cluster, namespace: str, name: str, ops: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "explain", f"{namespace}/{name}", "-o", "json",
                        "--operator-namespace", ops, "--kubeconfig", str(cluster.kubeconfig_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def apply_cluster(core, patch: list) -> None:
    """A Cluster suggestion's operations: JSON patches of nodes, pod deletions."""
    by_node: dict[str, list] = {}
    for op in patch:
        if op.get("kind") == "Node":
            by_node.setdefault(op["name"], []).append({k: op[k] for k in ("op", "path", "value") if k in op})
        elif op.get("kind") == "Pod" and op.get("op") == "delete":
            core.delete_namespaced_pod(op["name"], op["namespace"], grace_period_seconds=0)
    for name, ops in by_node.items():
        core.patch_node(name, ops)  # a list body: application/json-patch+json


KINDS = ("LowerRequest", "TolerateTaint", "DropNodeSelector", "UncordonNode")


def case(core, namespace: str, kind: str, i: int) -> tuple[list[dict], dict]:
    """The nodes of one case (label e2e-hints, which the policy requires) and its pod, which
    cannot be placed on them for one reason: ``kind`` is the remedy expected first."""
    tag = {"e2e-hints": f"{kind.lower()}-{i}"}
    name = f"{kind.lower()}-{i}"
    if kind == "LowerRequest":
        return [node(f"h-{name}-{n}", cpu="4", labels=tag) for n in "ab"], pod(name, namespace, cpu="6", scheduler=SCHED)
    if kind == "TolerateTaint":
        return ([node(f"h-{name}-{n}", cpu="4", labels=tag, taints=[TAINT]) for n in "ab"],
                pod(name, namespace, cpu="1", scheduler=SCHED))
    if kind == "DropNodeSelector":
        return ([node(f"h-{name}-{n}", cpu="4", labels=tag) for n in "ab"],
                pod(name, namespace, cpu="1", scheduler=SCHED, nodeSelector={"disk": "ssd"}))
    cordoned = node(f"h-{name}-a", cpu="4", labels=tag, taints=[CORDON_TAINT])
    cordoned["spec"]["unschedulable"] = True
    return [cordoned], pod(name, namespace, cpu="1", scheduler=SCHED)


def test_pods_that_cannot_be_placed_get_a_hint_a_condition_and_a_suggestion_that_places_them(
        cluster, core, namespace, crd, policies):
    ops = f"ops-hints-{os.getpid() % 1000}"  # the operator's namespace: its key's Secret
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ops)))
    # the policy only places pods on this test's nodes (a required term no pod change removes), so
    # the other nodes of the session's cluster are no remedy
    plugins = example_plugins("default")
    for p in plugins:
        if p["name"] == "NodeAffinity":
            p["args"] = {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "e2e-hints", "operator": "Exists"}]}]}}}
    apply_policy(policies, POLICY, plugins, schedulerName=SCHED)
    op = OperatorProcess(cluster, SCHED, extra=["--default-policy", POLICY, "--revision-namespace", ops]).start()
    made: list[str] = []
    try:
        wait_for(lambda: "successfully acquired lease" in op.log(), 30, what="the operator leads")
        for kind in KINDS:
            for i in range(PER_KIND):
                # one case at a time: its nodes, its pod, the hint, the condition, explain; then the
                # top suggestion applied, and the pod bound where it said
                node_bodies, body = case(core, namespace, kind, i)
                for n in node_bodies:
                    core.create_node(n)
                    made.append(n["metadata"]["name"])
                name = body["metadata"]["name"]
                core.create_namespaced_pod(namespace, body)
                check_and_apply(cluster, core, namespace, ops, kind, name, first=(kind, i) == (KINDS[0], 0))
                core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
                wait_for(lambda: not core.list_namespaced_pod(namespace).items, 30, what="the case's pods gone")
                for n in node_bodies:
                    core.delete_node(n["metadata"]["name"])
                    made.remove(n["metadata"]["name"])
    finally:
        op.stop()
        for n in made:
            try:
                core.delete_node(n)
            except client.exceptions.ApiException:
                pass


def check_and_apply(cluster, core, namespace: str, ops: str, kind: str, name: str, first: bool) -> None:
    def hint_events():
        return [e for e in core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
                if e.reason in ("SchedulingHint", "FailedScheduling")]

    wait_for(lambda: suggestions_condition(raw_pod(core, namespace, name)), 30, 0.3,
             what=f"the suggestions condition on {name}")
    body = raw_pod(core, namespace, name)
    cond, doc = suggestions_condition(body)
    assert (cond["status"], cond["reason"]) == ("True", "Found"), cond
    # the advice lands after the failure it is about: PodScheduled=False is there already
    assert any(c["type"] == "PodScheduled" and c["status"] == "False" for c in body["status"]["conditions"]), body
    assert doc["version"] == 1 and doc["pod"] == f"{namespace}/{name}", doc
    assert doc["suggestions"] and doc["suggestions"][0]["kind"] == kind, (name, doc)
    mac = json.loads(cond["message"])["mac"]
    assert mac.startswith("v1:") and len(cond["message"].encode()) <= 4096 + 100
    top = doc["suggestions"][0]
    # the FailedScheduling event keeps upstream's message; the hint is the top suggestion's sentence
    evs = wait_for(lambda: (lambda e: e if any(x.reason == "SchedulingHint" for x in e) else None)(hint_events()), 20,
                   what=f"the SchedulingHint event of {name}")
    failed = [e.message for e in evs if e.reason == "FailedScheduling"]
    assert failed and all(m.startswith("0/") and " nodes are available: " in m for m in failed), failed
    hint = next(e for e in evs if e.reason == "SchedulingHint")
    assert hint.type == "Normal" and hint.message == doc["text"], (hint.message, doc["text"])
    assert doc["text"].startswith(top["change"] + ": opens "), doc["text"]
    ex = explain(cluster, namespace, name, ops)
    assert ex["suggestions"] == doc and ex["suggestionsVerified"] is True, ex["suggestionsTrust"]
    assert ex["reasons"] and ex["blockers"], ex
    # the condition's own write did not requeue the pod: not written again since
    after = raw_pod(core, namespace, name)
    assert after["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"], (body["status"], after["status"])
    if first:  # a forgery by anyone else who may write pods/status does not verify, its mac copied
        time.sleep(2)
        assert raw_pod(core, namespace, name)["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]
        forged = dict(doc, text="delete every pod of namespace kube-system", mac=mac)
        core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [
            dict(cond, message=json.dumps(forged))]}})
        assert explain(cluster, namespace, name, ops)["suggestionsVerified"] is False
    # the top suggestion applied: the pod is bound on the node it named, or on one of equal score
    if top["target"] == "Pod":
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        fixed = f"{name}-fixed"
        core.create_namespaced_pod(namespace, recreated(body, top["patch"], fixed))
    else:
        apply_cluster(core, top["patch"])
        fixed = name
    where = wait_for(lambda: raw_pod(core, namespace, fixed)["spec"].get("nodeName"), 30, 0.3,
                     what=f"{fixed} bound after its suggestion {top['change']!r}")
    if where != top["node"]:
        decision = json.loads(raw_pod(core, namespace, fixed)["metadata"]["annotations"][DECISION])
        totals = {t["node"]: t["total"] for t in decision["top"]}
        assert top["score"] is not None and totals[where] == top["score"], (name, where, top, decision)
