"""The operator on the real local control plane: policies, placements, failures, live changes."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml
from kubernetes import client

import localcluster
from conftest import OperatorProcess
from helpers import (FAST_ELECTION, GROUP, PLURAL, VERSION, apply_policy, events_for, pod, policy_status, ready_condition,
                     wait_bound, wait_for)

ROOT = Path(__file__).resolve().parents[2]
POLICY = "policy-scheduler.io/policy"


def sel(group: str) -> dict:
    return {"nodeSelector": {"e2e": group}}


def create_one_by_one(core, ns: str, pods: list[dict]) -> dict[str, str]:
    """Create pods one at a time, each after the previous is bound (so each sees the last)."""
    placed = {}
    for p in pods:
        core.create_namespaced_pod(ns, p)
        placed.update(wait_bound(core, ns, [p["metadata"]["name"]], 30))
    return placed


def test_binpack_packs_and_default_spreads(core, namespace, nodes, example_policies):
    for i in range(3):
        nodes(f"pack-b{i}", cpu="4", labels={"e2e": "pack-b"})
        nodes(f"pack-d{i}", cpu="4", labels={"e2e": "pack-d"})
    packed = create_one_by_one(core, namespace, [
        pod(f"bp{i}", namespace, cpu="500m", labels={POLICY: "binpack"}, **sel("pack-b")) for i in range(4)])
    assert len(set(packed.values())) == 1, f"binpack spread its pods: {packed}"
    spread = create_one_by_one(core, namespace, [
        pod(f"dp{i}", namespace, cpu="500m", **sel("pack-d")) for i in range(3)])  # no label: policy "default"
    assert len(set(spread.values())) == 3, f"default (LeastAllocated) did not spread: {spread}"


def test_spread_policy_balances_a_service_across_zones(core, namespace, nodes, example_policies):
    for z in "abc":
        for r in range(2):
            nodes(f"sp-{z}{r}", cpu="8", labels={"e2e": "spread", "topology.kubernetes.io/zone": f"zone-{z}",
                                                  "topology.kubernetes.io/rack": f"rack-{z}{r}"})
    # a Service selecting the pods makes PodTopologySpread's default constraints apply (as upstream)
    core.create_namespaced_service(namespace, client.V1Service(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1ServiceSpec(selector={"app": "web"}, ports=[client.V1ServicePort(port=80)])))
    time.sleep(0.5)  # let the operator's service informer see it
    placed = create_one_by_one(core, namespace, [
        pod(f"web{i}", namespace, labels={"app": "web", POLICY: "spread"}, **sel("spread")) for i in range(6)])
    zones = [n.split("-")[1][0] for n in placed.values()]
    assert sorted(zones) == list("aabbcc"), f"zone spread broken: {placed}"
    assert len(set(placed.values())) == 6, f"rack (soft) spread broken: {placed}"


def test_node_label_match_pins_the_workload_only(core, namespace, nodes, example_policies):
    pool = nodes("nlm-pool", cpu="4", labels={"e2e": "nlm", "pool": "ingest"})
    nodes("nlm-big0", cpu="32", labels={"e2e": "nlm"})
    nodes("nlm-big1", cpu="32", labels={"e2e": "nlm"})
    placed = create_one_by_one(core, namespace, [
        pod(f"ingest-{i}", namespace, labels={"app": "ingest", POLICY: "node-label-match"}, **sel("nlm"))
        for i in range(3)])
    assert set(placed.values()) == {pool}
    other = create_one_by_one(core, namespace, [
        pod("other", namespace, cpu="1", labels={"app": "other", POLICY: "node-label-match"}, **sel("nlm"))])
    assert other["other"] != pool  # the big empty nodes score higher for an unaffected pod
    # a pinned pod that cannot fit on the labelled node is not placed elsewhere
    core.create_namespaced_pod(namespace, pod("ingest-huge", namespace, cpu="8",
                                              labels={"app": "ingest", POLICY: "node-label-match"}, **sel("nlm")))
    ev = wait_for(lambda: events_for(core, namespace, "ingest-huge", "FailedScheduling"), 20, what="FailedScheduling")
    assert "1 Insufficient cpu" in ev[0].message
    assert "2 node(s) didn't have label pool=ingest required for workload" in ev[0].message


def test_taints_and_node_affinity_under_default(core, namespace, nodes, example_policies):
    nodes("ta-tainted", cpu="32", labels={"e2e": "ta", "zone": "a"},
          taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    nodes("ta-plain", cpu="2", labels={"e2e": "ta", "zone": "a"})
    nodes("ta-zone-b", cpu="2", labels={"e2e": "ta", "zone": "b"})
    placed = create_one_by_one(core, namespace, [
        pod("plain", namespace, **sel("ta"), affinity={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}),
        pod("tolerant", namespace, **sel("ta"), tolerations=[
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]),
        pod("zone-b", namespace, **sel("ta"), affinity={"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}]}}),
    ])
    assert placed["plain"] == "ta-plain"  # zone a, and the tainted node is not tolerated
    assert placed["tolerant"] == "ta-tainted"  # the empty 32-cpu node wins once tolerated
    assert placed["zone-b"] == "ta-zone-b"


def test_kubectl_shows_policy_columns(cluster, example_policies):
    kubectl = localcluster.bin_dir(build=False) / "kubectl"
    out = subprocess.run([str(kubectl), "get", "schedulingpolicies"], capture_output=True, text=True,
                         env={"KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(cluster.state_dir)}, timeout=60)
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0].split()
    assert header == ["NAME", "READY", "PLUGINS", "REVISION", "ROLLOUT", "SCHEDULED", "PENDING", "AGE"]
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[1:]}
    assert rows["default"][1] == "True" and rows["default"][2] == "21"  # the 19 listed + SchedulingGates, DefaultBinder


def test_invalid_policies_are_not_ready_with_the_field_named(core, namespace, nodes, operator, policies,
                                                             example_policies):
    bad = {
        "bad-name": ([{"name": "NoSuchPlugin"}], r"spec\.plugins\[0\]\.name: unknown plugin 'NoSuchPlugin'"),
        "bad-args": ([{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Bogus"}}}],
                     r"spec\.plugins\[0\]\.args\.scoringStrategy\.type"),
        "bad-weight": ([{"name": "NodeResourcesFit", "weight": -3}], r"spec\.plugins\[0\]\.weight: -3 is out of range"),
    }
    for name, (plugins, _) in bad.items():
        apply_policy(policies, name, plugins)
    for name, (_, pattern) in bad.items():
        cond = wait_for(lambda: ready_condition(policies, name), 20, what=f"{name} status")
        assert cond["status"] == "False" and cond["reason"] == "InvalidSpec", cond
        assert re.search(pattern, cond["message"]), cond["message"]
    assert operator.proc.poll() is None, "the operator died on an invalid policy"
    # a pod asking for an invalid policy waits, with an event saying why
    nodes("inv-0", labels={"e2e": "inv"})
    core.create_namespaced_pod(namespace, pod("waits", namespace, labels={POLICY: "bad-weight"}, **sel("inv")))
    ev = wait_for(lambda: events_for(core, namespace, "waits", "NoPolicy"), 20, what="NoPolicy event")
    assert "'bad-weight' is not Ready" in ev[0].message and "weight" in ev[0].message
    # other policies keep scheduling
    core.create_namespaced_pod(namespace, pod("fine", namespace, **sel("inv")))
    wait_bound(core, namespace, ["fine"], 20)
    # fixing the policy schedules the waiting pod, without a restart
    apply_policy(policies, "bad-weight", [{"name": "NodeResourcesFit", "weight": 3}])
    wait_for(lambda: (ready_condition(policies, "bad-weight") or {}).get("status") == "True", 20, what="fixed")
    wait_bound(core, namespace, ["waits"], 30)
    # a bad edit of a working policy: Ready=False, but its pods keep the last valid chain
    good_gen = policy_status(policies, "bad-weight")["observedGeneration"]
    apply_policy(policies, "bad-weight", [{"name": "NodeResourcesFit", "weight": -1}])
    cond = wait_for(lambda: (lambda c: c if c and c["status"] == "False" else None)(
        ready_condition(policies, "bad-weight")), 20, what="bad edit reported")
    assert re.search(rf"^generation \d+ is invalid: .*; scheduling with (revision \d+ \()?generation {good_gen}\)?$",
                     cond["message"]), cond["message"]
    core.create_namespaced_pod(namespace, pod("after-bad-edit", namespace, labels={POLICY: "bad-weight"},
                                              **sel("inv")))
    wait_bound(core, namespace, ["after-bad-edit"], 20)
    for name in bad:
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def test_unschedulable_pod_reports_then_binds_when_a_node_fits(core, namespace, nodes, example_policies):
    nodes("us-small0", cpu="1", labels={"e2e": "us"})
    nodes("us-small1", cpu="1", labels={"e2e": "us"})
    nodes("us-elsewhere", cpu="8", labels={"e2e": "not-us"})  # filtered by the pod's nodeSelector
    core.create_namespaced_pod(namespace, pod("large", namespace, cpu="3", **sel("us")))
    ev = wait_for(lambda: events_for(core, namespace, "large", "FailedScheduling"), 20, what="FailedScheduling")
    msg = ev[0].message
    n_all = len(core.list_node().items)
    assert msg.startswith(f"0/{n_all} nodes are available: "), msg
    # the default policy preempts: upstream's suffix; 3 cpu on 1-cpu nodes is unresolvable everywhere
    msg, _, preemption = msg.partition(" preemption: ")
    assert preemption == f"0/{n_all} nodes are available: {n_all} Preemption is not helpful for scheduling."
    hist = re.findall(r"(\d+) ([^,]+?)(?:, |\.$)", msg.split(": ", 1)[1])
    counts = {reason: int(c) for c, reason in hist}
    assert counts["Insufficient cpu"] == 2
    assert counts["node(s) didn't match Pod's node affinity/selector"] == n_all - 2
    assert [h[0] + " " + h[1] for h in hist] == sorted(h[0] + " " + h[1] for h in hist)  # upstream's string sort
    assert ev[0].source.component == "policy-scheduler" or ev[0].reporting_component == "policy-scheduler"
    cond = next(c for c in core.read_namespaced_pod("large", namespace).status.conditions if c.type == "PodScheduled")
    assert cond.status == "False" and cond.reason == "Unschedulable" and cond.message == ev[0].message
    nodes("us-big", cpu="4", labels={"e2e": "us"})
    placed = wait_bound(core, namespace, ["large"], 30)
    assert placed["large"] == "us-big"
    assert wait_for(lambda: events_for(core, namespace, "large", "Scheduled"), 10, what="Scheduled event")


def test_weight_change_moves_the_next_pods_without_restart(core, namespace, nodes, operator, policies):
    nodes("wc-pref", cpu="4", labels={"e2e": "wc", "tier": "preferred"})
    nodes("wc-empty", cpu="4", labels={"e2e": "wc"})
    # half-fill the preferred node so LeastAllocated favours the empty one
    core.create_namespaced_pod(namespace, pod("filler", namespace, cpu="2", memory="4Gi", scheduler="none",
                                              **sel("wc"), nodeName="wc-pref"))
    plugins = lambda fit_w: [  # noqa: E731
        {"name": "PrioritySort"}, {"name": "NodeAffinity", "weight": 1},
        {"name": "NodeResourcesFit", "weight": fit_w}]
    apply_policy(policies, "tunable", plugins(1))
    wait_for(lambda: (ready_condition(policies, "tunable") or {}).get("status") == "True", 20, what="tunable")
    prefers = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [{"key": "tier", "operator": "In",
                                                             "values": ["preferred"]}]}}]}}
    first = create_one_by_one(core, namespace, [
        pod("w1", namespace, labels={POLICY: "tunable"}, affinity=prefers, **sel("wc"))])
    assert first["w1"] == "wc-pref"  # affinity 100 + fit ~60 beats fit ~97
    gen = policy_status(policies, "tunable").get("observedGeneration")
    pid = operator.proc.pid
    apply_policy(policies, "tunable", plugins(5))
    wait_for(lambda: policy_status(policies, "tunable").get("observedGeneration", 0) > gen, 20, what="new generation")
    second = create_one_by_one(core, namespace, [
        pod("w2", namespace, labels={POLICY: "tunable"}, affinity=prefers, **sel("wc"))])
    assert second["w2"] == "wc-empty"  # fit x5 now outweighs the affinity
    assert operator.proc.pid == pid and operator.proc.poll() is None
    policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "tunable")


def test_deleted_policy_leaves_pods_waiting_not_lost(core, namespace, nodes, operator, policies):
    nodes("dp-0", labels={"e2e": "dp"})
    apply_policy(policies, "ephemeral", [{"name": "NodeResourcesFit"}])
    wait_for(lambda: ready_condition(policies, "ephemeral"), 20, what="ephemeral status")
    policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "ephemeral")
    time.sleep(1)
    core.create_namespaced_pod(namespace, pod("orphan", namespace, labels={POLICY: "ephemeral"}, **sel("dp")))
    ev = wait_for(lambda: events_for(core, namespace, "orphan", "NoPolicy"), 20, what="NoPolicy event")
    assert "SchedulingPolicy 'ephemeral'" in ev[0].message and "does not exist" in ev[0].message
    assert not core.read_namespaced_pod("orphan", namespace).spec.node_name
    apply_policy(policies, "ephemeral", [{"name": "NodeResourcesFit"}])
    wait_bound(core, namespace, ["orphan"], 30)
    policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "ephemeral")


def test_explain_shows_the_decision(cluster, core, namespace, nodes, example_policies):
    nodes("ex-0", cpu="8", labels={"e2e": "ex"})
    nodes("ex-1", cpu="2", labels={"e2e": "ex"})
    nodes("ex-elsewhere", cpu="8", labels={"e2e": "not-ex"})  # filtered by the pod's nodeSelector
    placed = create_one_by_one(core, namespace, [pod("why", namespace, **sel("ex"))])
    out = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "explain", f"{namespace}/why",
                          "--kubeconfig", str(cluster.kubeconfig_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"node:      {placed['why']}" in out.stdout
    assert "policy:    default" in out.stdout
    assert "NodeResourcesFit" in out.stdout and "TaintToleration" in out.stdout
    assert re.search(r"\d+  node\(s\) didn't match Pod's node affinity/selector", out.stdout), out.stdout


def own_default(policies, scheduler: str) -> None:
    """A copy of policies/default.yaml owned by ``scheduler`` (and named after it): its --default-policy."""
    spec = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())["spec"]
    apply_policy(policies, scheduler, spec.pop("plugins"), **{**spec, "schedulerName": scheduler})


def test_sigkill_mid_burst_binds_every_pod_exactly_once(cluster, core, namespace, nodes, crd, policies):
    n_nodes, n_pods = 8, 300
    for i in range(n_nodes):
        nodes(f"crash-{i}", cpu="4", memory="16Gi", pods="110", labels={"e2e": "crash"})
    own_default(policies, "policy-scheduler-crash")
    # short lease timings: the restarted process waits for the killed one's lease to expire
    op = OperatorProcess(cluster, "policy-scheduler-crash", extra=FAST_ELECTION + [
        "--default-policy", "policy-scheduler-crash"]).start()
    try:
        names = [f"burst-{i:03d}" for i in range(n_pods)]
        # 300 x 100m = 30 cpu on 32: tight, so any double counting or missed pod overcommits a node
        bodies = [pod(n, namespace, cpu="100m", memory="64Mi", scheduler="policy-scheduler-crash", **sel("crash"))
                  for n in names]
        creator = threading.Thread(target=lambda: [core.create_namespaced_pod(namespace, b) for b in bodies])
        creator.start()

        def bound_count():
            return sum(1 for p in core.list_namespaced_pod(namespace).items if p.spec.node_name)

        wait_for(lambda: bound_count() >= n_pods // 4, 60, what="a quarter of the burst bound")
        op.kill()
        killed_at = bound_count()
        creator.join()
        assert killed_at < n_pods, "the burst finished before the kill; nothing was tested"
        op.start()  # a fresh process: it relists, requeues the unbound, counts the bound
        placed = wait_bound(core, namespace, names, 120)
    finally:
        op.stop()
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "policy-scheduler-crash")
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}
    used: dict[str, int] = {}
    for name, node_name in placed.items():
        used[node_name] = used.get(node_name, 0) + 100
    assert max(used.values()) <= 4000, f"a node is overcommitted: {used}"
    scheduled = {}
    for e in core.list_namespaced_event(namespace).items:
        if e.reason == "Scheduled":
            scheduled[e.involved_object.name] = scheduled.get(e.involved_object.name, 0) + (e.count or 1)
    assert all(v == 1 for v in scheduled.values()), {k: v for k, v in scheduled.items() if v != 1}
    assert len(pods) == n_pods and all(p.spec.node_name for p in pods.values())
    print(f"\nSIGKILL after {killed_at}/{n_pods} bound; after restart all {n_pods} bound once, "
          f"max node use {max(used.values())}m of 4000m")


def test_a_rejected_binding_is_requeued_not_lost(cluster, api, core, namespace, nodes, crd, policies):
    """A bind the API refuses (403: the operator's role lacks pods/binding) is reported and retried
    with backoff; once the permission is granted the same pod binds. Nothing is dropped."""
    rbac = client.RbacAuthorizationV1Api(api)
    role = yaml.safe_load((ROOT / "manifests" / "02-clusterrole.yaml").read_text())
    rules = [r for r in role["rules"] if "pods/binding" not in r.get("resources", [])]
    assert len(rules) == len(role["rules"]) - 1
    name = f"nobind-{namespace}"
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="op")))
    rbac.create_cluster_role({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                              "metadata": {"name": name}, "rules": rules})
    rbac.create_cluster_role_binding({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": namespace}]})
    token = core.create_namespaced_service_account_token("op", namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status.token
    kc = cluster.state_dir / f"{name}.kubeconfig"
    kc.write_text(localcluster.kubeconfig_text(cluster.server, (cluster.state_dir / "pki" / "ca.crt").read_bytes(),
                                               {"token": token}))
    nodes("nb-0", labels={"e2e": "nb"})
    own_default(policies, "policy-scheduler-nobind")
    op = OperatorProcess(cluster, "policy-scheduler-nobind", kubeconfig=str(kc),
                         extra=["--default-policy", "policy-scheduler-nobind", "--leader-elect=false"]).start()
    try:
        core.create_namespaced_pod(namespace, pod("refused", namespace, scheduler="policy-scheduler-nobind",
                                                  **sel("nb")))
        ev = wait_for(lambda: [e for e in events_for(core, namespace, "refused", "FailedScheduling")
                               if "Binding rejected" in e.message], 30, what="a rejected binding reported")
        assert "403" in ev[0].message and "forbidden" in ev[0].message.lower()
        assert not core.read_namespaced_pod("refused", namespace).spec.node_name
        rules.append({"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]})
        rbac.patch_cluster_role(name, {"rules": rules})
        placed = wait_bound(core, namespace, ["refused"], 45)  # the next retry (backoff <= 10 s) binds it
        assert placed["refused"] == "nb-0"
        assert op.proc.poll() is None
    finally:
        op.stop()
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "policy-scheduler-nobind")
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
