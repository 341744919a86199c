"""spec.rollout on the real control plane: a candidate chain shadowed, canaried, rolled back,
promoted, and carried across a leader's SIGKILL.

Every test runs two replicas with leader election.

- Shadow: binpack's chain with a spread-like candidate (the same plugins and args, other weights)
  over a burst of 500 pods a Service selects (so PodTopologySpread's system defaults score them).
  The operator's status.rollout.shadow must count the changed decisions that a replay of the same
  pods through simulate counts (a snapshot taken before the burst, the pods in the operator's
  decision order, each counted where the operator bound it), within 2%; `rollout diff` prints it
  and writes the HTML page.
- Canary: two replicas with leader election; 10% by UID hash over 1,000 pods: 10 +- 3% decided
  by the candidate (the arm is in each pod's decision annotation); the leader SIGKILLed mid-burst,
  the standby continues the same rollout (same candidate, start time, counts that only grow); then
  promotion by count writes the candidate into spec.plugins and ends the rollout as Promoted.
- Rollback: a candidate whose filter rejects every node, canaried at 10% over a burst of 1,000
  pods, is rolled back after its first failures (a Warning event, phase RolledBack, the Rollout
  condition False, the rollbacks metric); at most 1% of the burst's pods got a FailedScheduling
  event, and every pod is bound by the stable chain.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from conftest import OperatorProcess
from helpers import (GROUP, PLURAL, STEADY_ELECTION, VERSION, apply_policy, arms, example_plugins, metric, pod,
                     policy_status, ready_condition, wait_bound, wait_for)

LABEL = "policy-scheduler.io/policy"
ZONE = "topology.kubernetes.io/zone"


def binpack(**weights) -> list[dict]:
    """policies/binpack.yaml's plugins, some weights changed."""
    return example_plugins("binpack", **weights)


def spread_weights() -> list[dict]:
    """binpack -> spread as a weight change: packing weighs 1, spreading 5."""
    return binpack(NodeResourcesFit=1, PodTopologySpread=5, InterPodAffinity=2)


def create_pods(core, namespace: str, bodies: list[dict], threads: int = 8) -> None:
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda b: core.create_namespaced_pod(namespace, b), bodies))


def make_nodes(nodes, prefix: str, n: int, cpu: str = "8") -> list[str]:
    names = [f"{prefix}-{i:02d}" for i in range(n)]
    for i, name in enumerate(names):
        nodes(name, cpu=cpu, memory="32Gi", labels={"e2e": prefix, ZONE: f"{prefix}-z{i % 3}"})
    return names


def cli(cluster, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "policy_scheduler.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def rollout_status(policies, name: str) -> dict:
    return policy_status(policies, name).get("rollout") or {}


def rollout_condition(policies, name: str) -> dict | None:
    return next((c for c in policy_status(policies, name).get("conditions") or [] if c["type"] == "Rollout"), None)


def policy_events(core, name: str, reason: str) -> list:
    evs = client.EventsV1Api(core.api_client).list_namespaced_event("default").items
    return [e for e in evs if e.regarding and e.regarding.name == name and e.reason == reason]


def decided_in_order(log: str, namespace: str) -> list[tuple[str, str | None]]:
    """The operator's DEBUG decision lines of this namespace's pods, in decision order."""
    out = []
    for line in log.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        p = rec.get("pod")
        if isinstance(p, str) and p.startswith(namespace + "/") and " decided under policy " in rec.get("msg", ""):
            out.append((p.split("/", 1)[1], rec.get("node")))
    return out


def cleanup(policies, name: str) -> None:
    try:
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    except ApiException:
        pass


# ------------------------------------------------------------------------------------------ shadow
def test_a_shadowed_candidate_counts_the_decisions_simulate_finds_changed(cluster, core, namespace, nodes, crd,
                                                                        policies, tmp_path):
    import asyncio

    from policy_scheduler.whatif import snapshot as snapmod
    from policy_scheduler.whatif.simulate import run_policy
    from policy_scheduler.whatif.world import World

    sched, name, n_pods = "ro-shadow", "ro-shadow", 500
    make_nodes(nodes, "rs", 24)
    core.create_namespaced_service(namespace, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                                               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
    apply_policy(policies, name, binpack(), schedulerName=sched,
                 rollout={"strategy": "Shadow", "candidate": {"plugins": spread_weights()}})
    reps, _ = replicas(cluster, sched, name, ["--log-level", "debug", "--log-format", "json"], ops=namespace)
    op = next(r for r in reps if "successfully acquired lease" in r.log())  # the leader decides
    try:
        wait_for(lambda: (ready_condition(policies, name) or {}).get("status") == "True", 30, what="Ready")
        wait_for(lambda: rollout_status(policies, name).get("phase") == "Shadowing", 30, what="Shadowing")
        snap_path = tmp_path / "cluster.json"
        p = cli(cluster, "snapshot", "--kubeconfig", str(cluster.kubeconfig_path), "--scheduler-name", sched,
                "-o", str(snap_path))
        assert p.returncode == 0, p.stderr

        cpus = ["100m", "250m", "500m"]
        bodies = [pod(f"w{i:03d}", namespace, cpu=cpus[i % 3], memory="128Mi", scheduler=sched,
                      labels={"app": "web", LABEL: name}, nodeSelector={"e2e": "rs"}) for i in range(n_pods)]
        t0 = time.monotonic()
        create_pods(core, namespace, bodies)
        live = wait_bound(core, namespace, [b["metadata"]["name"] for b in bodies], 120)
        took = time.monotonic() - t0
        shadow = wait_for(lambda: (lambda s: s if s.get("compared") == n_pods else None)(
            rollout_status(policies, name).get("shadow") or {}), 20, what=f"{n_pods} decisions compared")
        order = [n for n, _ in decided_in_order(op.log(), namespace)]
        assert sorted(order) == sorted(live), "each pod must be decided exactly once"
        log_tail = op.log()[-3000:]
    finally:
        for r in reps:
            r.stop()

    # the replay: the same pods in the operator's order, each counted where the operator put it
    snap = snapmod.load(snap_path)
    by_name = {b["metadata"]["name"]: b for b in bodies}

    async def replay():
        world = World(snap)
        await world.prepare()
        return await run_policy(world, name, [by_name[n] for n in order],
                                follow={f"{namespace}/{n}": v for n, v in live.items()})

    run = asyncio.run(replay())
    sim = run.shadow_summary()
    changed, replayed = shadow["changed"], sim["changed"]
    print(f"\nshadow over {n_pods} pods (bound in {took:.1f}s): status says {changed} changed, the replay "
          f"through simulate {replayed}; moved by {shadow['plugins'][:3]}")
    assert sim["compared"] == n_pods
    assert changed > 20, f"the candidate should move many decisions: {shadow}\n{log_tail}"
    assert abs(changed - replayed) <= 0.02 * n_pods, (changed, replayed)
    assert {p["name"] for p in shadow["plugins"]} & {"NodeResourcesFit", "PodTopologySpread"}, shadow["plugins"]
    sample = shadow["samples"][0]
    assert sample["stable"] == live[sample["pod"].split("/", 1)[1]] and sample["candidate"] != sample["stable"]
    st = rollout_status(policies, name)
    assert st["summary"].startswith(f"Shadowing {changed}/{n_pods} changed"), st["summary"]

    # rollout diff: the text and the HTML page
    html = tmp_path / "diff.html"
    d = cli(cluster, "rollout", "diff", name, "--kubeconfig", str(cluster.kubeconfig_path), "--html", str(html))
    assert d.returncode == 0, d.stderr
    print(d.stdout)
    assert f"changed {changed} of {n_pods} decisions" in d.stdout
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "rollout candidate beside the policy" in page and "<svg" in page
    kubectl = localcluster.bin_dir(build=False) / "kubectl"
    out = subprocess.run([str(kubectl), "get", "schedulingpolicies", name], capture_output=True, text=True,
                         env={"KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(cluster.state_dir)}, timeout=60)
    header = out.stdout.splitlines()[0].split()
    assert "ROLLOUT" in header and f"{changed}/{n_pods}" in out.stdout, out.stdout
    cleanup(policies, name)


# ------------------------------------------------------------------------------------------ canary
def replicas(cluster, sched: str, policy: str, extra: list[str] | None = None, *, ops: str
             ) -> tuple[list[OperatorProcess], list[int]]:
    """Two replicas with leader election, started together; once one leads. ``ops``: their
    namespace (--revision-namespace), where they share the key that signs decision annotations: a
    replica counts the canary pods another bound only with that key."""
    mports = [localcluster.free_port(), localcluster.free_port()]
    reps = [OperatorProcess(cluster, sched, log_name=f"{sched}-{i}", extra=[
        "--default-policy", policy, "--metrics-port", str(mports[i]), "--metrics-address", "127.0.0.1",
        "--revision-namespace", ops, *STEADY_ELECTION, *(extra or [])]) for i in range(2)]
    for r in reps:
        r.start(wait=False)
    for r in reps:
        r.wait_synced()
    wait_for(lambda: sum("successfully acquired lease" in r.log() for r in reps) == 1, 30, what="one leader")
    return reps, mports


def test_a_canary_takes_its_share_survives_a_leader_kill_and_is_promoted(cluster, core, namespace, nodes, crd,
                                                                       policies):
    sched, name = "ro-canary", "ro-canary"
    make_nodes(nodes, "rc", 30, cpu="16")
    apply_policy(policies, name, binpack(), schedulerName=sched,
                 rollout={"strategy": "Canary", "percent": 10, "candidate": {"plugins": spread_weights()},
                          "promote": {"pods": 100000}})
    reps, mports = replicas(cluster, sched, name, ops=namespace)
    try:
        leader = next(r for r in reps if "successfully acquired lease" in r.log())
        standby = reps[1] if leader is reps[0] else reps[0]
        sport = mports[reps.index(standby)]
        wait_for(lambda: rollout_status(policies, name).get("phase") == "Progressing", 30, what="Progressing")
        first = rollout_status(policies, name)
        sel = {"nodeSelector": {"e2e": "rc"}}
        names = [f"c{i:04d}" for i in range(1000)]
        create_pods(core, namespace, [pod(n, namespace, cpu="100m", scheduler=sched, labels={LABEL: name}, **sel)
                                      for n in names[:600]])
        creator = threading.Thread(target=create_pods, args=(core, namespace, [
            pod(n, namespace, cpu="100m", scheduler=sched, labels={LABEL: name}, **sel) for n in names[600:]], 4))
        creator.start()

        def bound_count():
            return sum(1 for p in core.list_namespaced_pod(namespace).items if p.spec.node_name)

        wait_for(lambda: bound_count() >= 300, 60, 0.1, what="the burst under way")
        wait_for(lambda: (rollout_status(policies, name).get("canary") or {}).get("attempts", 0) > 0, 10, 0.1,
                 what="canary counts in the status")
        before = rollout_status(policies, name)
        leader.kill()
        at_kill = bound_count()
        creator.join()
        try:
            wait_bound(core, namespace, names, 120)
        except AssertionError as e:
            raise AssertionError(f"{e}\nthe standby's log:\n{standby.log()[-6000:]}") from None
        assert at_kill < len(names), "the burst finished before the kill; nothing was tested"
        wait_for(lambda: "successfully acquired lease" in standby.log(), 30, what="the standby leads")

        # the same rollout, continued: same candidate and start, counts that only grew
        def settled():
            s = rollout_status(policies, name)
            total = (s.get("stable") or {}).get("attempts", 0) + (s.get("canary") or {}).get("attempts", 0)
            return s if total >= at_kill and s.get("observedGeneration") else None

        after = wait_for(settled, 20, what="the new leader's counts")
        assert after["candidateHash"] == first["candidateHash"] == before["candidateHash"]
        assert after["startTime"] == first["startTime"], (first["startTime"], after["startTime"])
        assert after["phase"] == "Progressing"
        for arm in ("stable", "canary"):
            assert after[arm]["attempts"] >= before[arm]["attempts"], (before, after)

        # 10 +- 3% of the 1,000 pods decided by the candidate (each pod's decision annotation)
        got = arms(core, namespace, names)
        share = got.get("canary", 0) / len(names)
        print(f"\ncanary at 10%: {got} of {len(names)} pods ({share:.1%}); leader killed after {at_kill} bound; "
              f"status before the kill {before['canary']}/{before['stable']}, after {after['canary']}/{after['stable']}")
        assert got.get("canary", 0) + got.get("stable", 0) == len(names), got
        assert 0.07 <= share <= 0.13, got
        # the bound counts are the cluster's (each pod's annotation, as the watch delivers it), so
        # the new leader's status counts every pod the killed one bound, too
        wait_for(lambda: (lambda s: [s["canary"]["bound"], s["stable"]["bound"]] == [got["canary"], got["stable"]])(
            rollout_status(policies, name)), 10, what="the status's bound counts equal the pods' arms")

        # promotion by count: lower the bar (a threshold change keeps the rollout)
        cur = policies.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        apply_policy(policies, name, cur["spec"]["plugins"], schedulerName=sched,
                     rollout={**cur["spec"]["rollout"], "promote": {"pods": 50}})
        wait_for(lambda: "rollout" not in policies.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)["spec"],
                 20, what="the promotion written")
        spec = policies.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)["spec"]
        assert spec["plugins"] == spread_weights()
        done = wait_for(lambda: (lambda s: s if s.get("phase") == "Promoted" else None)(
            rollout_status(policies, name)), 20, what="Promoted")
        assert done["candidateHash"] == first["candidateHash"]
        assert policy_events(core, name, "RolloutPromoted"), "no RolloutPromoted event"
        assert (rollout_condition(policies, name) or {}).get("status") == "True"
        assert metric(sport, "policy_scheduler_rollout_promotions_total", policy=name) == 1
        assert "Traceback" not in standby.log()
    finally:
        for r in reps:
            r.stop()
        cleanup(policies, name)


# ------------------------------------------------------------------------------------------ rollback
def test_a_candidate_that_rejects_every_node_is_rolled_back_within_seconds(cluster, core, namespace, nodes, crd,
                                                                         policies):
    sched, name, n_pods = "ro-rollback", "ro-rollback", 1000
    make_nodes(nodes, "rb", 20, cpu="16")
    broken = binpack()
    next(p for p in broken if p["name"] == "NodeAffinity")["args"] = {"addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "no-such-label", "operator": "Exists"}]}]}}}
    apply_policy(policies, name, binpack(), schedulerName=sched,
                 rollout={"strategy": "Canary", "percent": 10, "candidate": {"plugins": broken}})
    reps, mports = replicas(cluster, sched, name, ops=namespace)
    try:
        leader = next(r for r in reps if "successfully acquired lease" in r.log())
        lport = mports[reps.index(leader)]
        wait_for(lambda: rollout_status(policies, name).get("phase") == "Progressing", 30, what="Progressing")
        names = [f"r{i:04d}" for i in range(n_pods)]
        create_pods(core, namespace, [pod(n, namespace, cpu="100m", scheduler=sched, labels={LABEL: name},
                                          nodeSelector={"e2e": "rb"}) for n in names])
        wait_bound(core, namespace, names, 120)
        st = wait_for(lambda: (lambda s: s if s.get("phase") == "RolledBack" else None)(
            rollout_status(policies, name)), 20, what="RolledBack")
        evs = core.list_namespaced_event(namespace).items
        failed = {e.involved_object.name for e in evs if e.reason == "FailedScheduling"}
        first_fail = min(e.event_time or e.first_timestamp or e.metadata.creation_timestamp for e in evs
                         if e.reason == "FailedScheduling")
        rb = wait_for(lambda: policy_events(core, name, "RolloutRolledBack"), 10, what="the RolloutRolledBack event")
        took = (rb[0].event_time - first_fail).total_seconds()
        print(f"\nrollback: {len(failed)} of {n_pods} pods got FailedScheduling; rolled back {took:.2f}s after the "
              f"first failure: {st['message']}")
        assert 1 <= len(failed) <= 0.01 * n_pods, failed
        assert took <= 10, took
        assert "FailedScheduling rate" in st["message"] and st["summary"].startswith("RolledBack 10%")
        cond = rollout_condition(policies, name)
        assert cond["status"] == "False" and cond["reason"] == "RolledBack"
        # every pod, the failed canary ones included, bound by the stable chain
        got = arms(core, namespace, names)
        assert got.get("canary", 0) == 0 and sum(got.values()) == n_pods, got
        assert metric(lport, "policy_scheduler_rollout_rollbacks_total", policy=name) == 1
        assert re.search(r"rolled back after \d+ canary attempts", leader.log())
        # ready stays True: a rolled-back candidate does not make the policy invalid
        assert (ready_condition(policies, name) or {}).get("status") == "True"
    finally:
        for r in reps:
            r.stop()
        cleanup(policies, name)
