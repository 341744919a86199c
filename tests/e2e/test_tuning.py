"""spec.tuning on the real local control plane, with the session's operator: Apply mode changes
the weights within bounds and maxStep, posts WeightsTuned and writes status.tuning, and the pods
placed after the change use fewer nodes; a person's edit of a tuned weight is not overwritten;
Recommend mode never writes the spec, and `kubectl get -o wide` shows the TUNING column."""

from __future__ import annotations

import subprocess
import time

import localcluster
from helpers import (
    GROUP,
    PLURAL,
    VERSION,
    apply_policy,
    events_for,
    pod,
    policy_status,
    wait_bound,
    wait_for,
)

LABEL = "policy-scheduler.io/policy"
BOUNDS = {"NodeResourcesFit": [1, 10], "PodTopologySpread": [1, 10]}


def plugins(fit=1, spread=10):
    return [{"name": "PrioritySort"}, {"name": "NodeUnschedulable"}, {"name": "NodeAffinity"},  # nodeSelector
            {"name": "NodeResourcesFit", "weight": fit, "args": {"scoringStrategy": {"type": "MostAllocated"}}},
            {"name": "PodTopologySpread", "weight": spread}]


def weights(policies, name):
    obj = policies.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    return {p["name"]: p.get("weight") for p in obj["spec"]["plugins"] if p.get("weight") is not None}, obj


def burst(core, namespace, policy, app, n):
    """n pods of 2 cpu / 8Gi, spread by hostname (ScheduleAnyway) among their app, on the test's nodes."""
    names = [f"{app}-{i:02d}" for i in range(n)]
    for name in names:
        core.create_namespaced_pod(namespace, pod(
            name, namespace, cpu="2", memory="8Gi", labels={LABEL: policy, "app": app}, nodeSelector={"e2e": "tune"},
            topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                        "whenUnsatisfiable": "ScheduleAnyway",
                                        "labelSelector": {"matchLabels": {"app": app}}}]))
    return wait_bound(core, namespace, names, timeout=60)


def test_apply_changes_weights_within_bounds_and_pods_placed_after_use_fewer_nodes_and_a_human_edit_wins(
        core, namespace, nodes, operator, policies):
    for i in range(12):
        nodes(f"tune-{i:02d}", cpu="8", memory="32Gi",
              labels={"e2e": "tune", "topology.kubernetes.io/zone": "zone-" + "ab"[i % 2]})
    name = "tune-apply"
    apply_policy(policies, name, plugins(), tuning={
        "mode": "Apply", "interval": "3s", "window": {"pods": 12}, "objective": {"nodesUsed": 1},
        "bounds": BOUNDS, "maxStep": 4, "maxReplays": 30})
    try:
        before = burst(core, namespace, name, "before", 12)
        used_before = len(set(before.values()))
        t0 = time.monotonic()
        new, obj = wait_for(lambda: (lambda w: w if w[0] != {"NodeResourcesFit": 1, "PodTopologySpread": 10}
                                     else None)(weights(policies, name)), 45, 0.5, what="the tuner's Apply step")
        print(f"\nweights applied {time.monotonic() - t0:.1f}s after the first window: {new}")
        for plugin, old in (("NodeResourcesFit", 1), ("PodTopologySpread", 10)):
            lo, hi = BOUNDS[plugin]
            assert lo <= new[plugin] <= hi
            assert abs(new[plugin] - old) <= max(1, int(old * 4))
        managers = {m["manager"] for m in obj["metadata"].get("managedFields") or []}
        assert "policy-scheduler-tuner" in managers, managers
        tuning = wait_for(lambda: (policy_status(policies, name).get("tuning") or {}).get("lastApplied") and
                          policy_status(policies, name)["tuning"], 15, what="status.tuning with lastApplied")
        # the status lists every Score weight; the spec carries only the ones written (the bounded two)
        assert {k: v for k, v in tuning["lastApplied"]["to"].items() if k in BOUNDS} == new
        assert tuning["current"]["weights"] and tuning["recommended"]["weights"]
        assert tuning["windowPods"] == 12 and tuning["replays"] >= 2
        assert tuning["summary"].startswith("apply ")
        tuned = wait_for(lambda: events_for(core, "default", name, "WeightsTuned"), 15, what="a WeightsTuned event")
        assert "predicted objective" in tuned[0].message, tuned[0].message
        print(f"WeightsTuned: {tuned[0].message}")
        # the operator scheduling with the new weights before the next pods come
        wait_for(lambda: f"NodeResourcesFit:{new['NodeResourcesFit']}" in
                 (policy_status(policies, name).get("pluginSummary") or ""), 15, what="the chain rebuilt")

        after = burst(core, namespace, name, "after", 12)
        used_after = len(set(after.values()))
        print(f"nodes used by the 12 pods placed before the change: {used_before}; by the 12 after: {used_after} "
              f"(objective nodesUsed; status predicted {tuning['lastApplied']['predictedObjective']:g} "
              f"against {tuning['current']['objective']:g} for the window)")
        assert used_after < used_before

        # a person sets NodeResourcesFit: the next evaluations leave it alone
        edited = [dict(p) for p in obj["spec"]["plugins"]]
        human = 3 if new["NodeResourcesFit"] != 3 else 2
        for p in edited:
            if p["name"] == "NodeResourcesFit":
                p["weight"] = human
        policies.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, {"spec": {"plugins": edited}})
        edit_time = time.time()
        wait_for(lambda: "NodeResourcesFit" in ((policy_status(policies, name).get("tuning") or {}).get("held") or []),
                 20, 0.5, what="the edited plugin held by the tuner")
        time.sleep(7)  # two more intervals
        tuning = policy_status(policies, name)["tuning"]
        assert time.time() - edit_time >= 7
        assert weights(policies, name)[0]["NodeResourcesFit"] == human
        print(f"after a person set NodeResourcesFit={human}: held {tuning['held']}, still {human} "
              f"(last evaluation {tuning['evaluatedTime']})")
    finally:
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def test_recommend_never_writes_the_spec_and_kubectl_shows_the_tuning_column(
        cluster, core, namespace, nodes, operator, policies):
    for i in range(6):
        nodes(f"tune-r-{i}", cpu="8", memory="32Gi", labels={"e2e": "tune"})
    name = "tune-recommend"
    created = apply_policy(policies, name, plugins(), tuning={
        "mode": "Recommend", "interval": "2s", "window": {"pods": 6}, "objective": {"nodesUsed": 1},
        "bounds": BOUNDS, "maxReplays": 12})
    try:
        burst(core, namespace, name, "rec", 6)
        tuning = wait_for(lambda: (lambda t: t if t.get("windowPods") == 6 and t.get("recommended") else None)(
            policy_status(policies, name).get("tuning") or {}), 30, 0.5, what="a recommendation in status.tuning")
        time.sleep(4)  # more evaluations
        w, obj = weights(policies, name)
        assert w == {"NodeResourcesFit": 1, "PodTopologySpread": 10}
        assert obj["metadata"]["generation"] == created["metadata"]["generation"]
        assert "policy-scheduler-tuner" not in {m["manager"] for m in obj["metadata"].get("managedFields") or []}
        print(f"\nrecommend: {tuning['summary']}, current {tuning['current']}, recommended {tuning['recommended']}")
        kubectl = localcluster.bin_dir(build=False) / "kubectl"
        out = subprocess.run([str(kubectl), "get", "schedulingpolicies", name, "-o", "wide"], capture_output=True,
                             text=True, env={"KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(cluster.state_dir)},
                             timeout=60)
        assert out.returncode == 0, out.stderr
        header, row = out.stdout.splitlines()[:2]
        assert header.split()[-1] == "TUNING"
        assert row.endswith(obj["status"]["tuning"]["summary"]) and " recommend " in row + " "
        print(out.stdout)
    finally:
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
