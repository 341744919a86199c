"""NodeDeclaredFeatures against upstream: seeded cases of two kwok nodes whose
`status.declaredFeatures` are set through the status subresource (after kwok has initialized the
node, and checked again at the end: kwok's status updates keep them), and pods whose specs need
node features, run by kube-scheduler v1.37.1 (its default profile: NodeDeclaredFeatures is GA and
locked on in 1.37) and by policy-scheduler's `default` policy.

Features a pod can need (the inference of component-helpers v0.37.1 nodedeclaredfeatures):
RestartAllContainersOnContainerExits (a RestartAllContainers restart rule on a container, an init
container or a sidecar), UserNamespacesHostNetworkSupport (hostNetwork with hostUsers: false) and
VolumeBindMountOptions (bindMountOptions on a volume mount); the API server runs with the two
alpha gates that keep those fields (conftest.NODE_FEATURE_GATES). Nodes declare a subset of them,
sometimes with a name the library does not know. Some pods need nothing (a plain pod, a restart
rule whose action is Restart).

A pod too big for a 2-cpu node is rejected there by NodeResourcesFit, which comes before
NodeDeclaredFeatures in both chains (its reason, not this plugin's, counts for that node).

Every node of every case exists before the first pod (a probe per scheduler shows it has seen the
last one); each pod is selected to its case's two nodes, created for policy-scheduler, its node
or FailedScheduling message recorded, deleted, then the same for kube-scheduler. The nodes differ
in size, so where both fit, the bigger one is the unique best (LeastAllocated). Node and message
must be the same. A last test checks the queueing hint: a pod that no node fits waits (both
schedulers), one node's declared features are patched to include what it needs, and both bind
it there within seconds (upstream's UpdateNodeDeclaredFeature event and hint), far sooner than the
five-minute flush of unschedulable pods.

Environment: NDF_PARITY_SEED, NDF_PARITY_CASES."""

from __future__ import annotations

import json
import os
import random
import secrets
import time
from pathlib import Path

import pytest
import yaml
from kubernetes.client.rest import ApiException

from dra_world import Raw
from helpers import apply_policy, node, ready_condition, wait_for

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("NDF_PARITY_SEED", "20261129"))
CASES = int(os.environ.get("NDF_PARITY_CASES", "16"))
OURS, UPSTREAM = "policy-scheduler", "default-scheduler"
MAX_NODES = 99  # below 100, kube-scheduler looks at every node (no sampling)
DECISION = "policy-scheduler.io/decision"
CASE_LABEL = "ndf-case"

RESTART_ALL = "RestartAllContainersOnContainerExits"
USERNS = "UserNamespacesHostNetworkSupport"
BIND = "VolumeBindMountOptions"
UNKNOWN = "SomeFutureFeature"  # a name the library's registry does not have
RULE_ALL = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
RULE_RESTART = {"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}


def _ctr(name: str = "c", **kw) -> dict:
    return {"name": name, "image": "registry.local/app:1", "resources": {"requests": {"cpu": "500m"}}, **kw}


# pod kind -> (spec without schedulerName/nodeSelector, the features it needs)
POD_KINDS: dict[str, tuple[dict, set[str]]] = {
    "plain": ({"containers": [_ctr()]}, set()),
    "restart-rule": ({"containers": [_ctr(restartPolicy="Never", restartPolicyRules=[RULE_RESTART])]}, set()),
    "restart-all": ({"containers": [_ctr(restartPolicy="Never", restartPolicyRules=[RULE_ALL])]}, {RESTART_ALL}),
    # too big for a 2-cpu node: NodeResourcesFit (earlier in the chain) rejects it there first
    "restart-all-big": ({"containers": [_ctr(restartPolicy="Never", restartPolicyRules=[RULE_ALL],
                                             resources={"requests": {"cpu": "3"}})]}, {RESTART_ALL}),
    "restart-all-init": ({"containers": [_ctr()], "initContainers": [
        _ctr("init", restartPolicy="Never", restartPolicyRules=[RULE_RESTART, RULE_ALL])]}, {RESTART_ALL}),
    "restart-all-sidecar": ({"containers": [_ctr()], "initContainers": [
        _ctr("side", restartPolicy="Always", restartPolicyRules=[RULE_ALL])]}, {RESTART_ALL}),
    "userns-hostnet": ({"containers": [_ctr()], "hostNetwork": True, "hostUsers": False}, {USERNS}),
    "bind-mount": ({"containers": [_ctr(volumeMounts=[{"name": "scratch", "mountPath": "/s",
                                                        "bindMountOptions": ["noexec", "nosuid"]}])],
                    "volumes": [{"name": "scratch", "emptyDir": {}}]}, {BIND}),
    "restart-all+bind": ({"containers": [_ctr(restartPolicy="Never", restartPolicyRules=[RULE_ALL],
                                              volumeMounts=[{"name": "scratch", "mountPath": "/s",
                                                             "bindMountOptions": ["nodev"]}])],
                          "volumes": [{"name": "scratch", "emptyDir": {}}]}, {RESTART_ALL, BIND}),
}
NEEDING = [k for k, (_, need) in POD_KINDS.items() if need]


def make_case(rng: random.Random, i: int) -> dict:
    """Two nodes (cpu, declared features) and a few pods. The case's main feature set is declared
    by one node (half the cases), by both, or by neither; the other node declares another subset."""
    main = rng.choice(NEEDING)
    need = POD_KINDS[main][1]
    shape = ("one", "one", "both", "none")[i % 4]
    decl = []
    for n in range(2):
        if shape == "both" or (shape == "one" and n == 0):
            d = set(need)
        else:
            d = {f for f in (RESTART_ALL, USERNS, BIND) if rng.random() < 0.4} - (need if len(need) == 1 else set())
        if rng.random() < 0.3:
            d.add(UNKNOWN)
        decl.append(sorted(d))
    if rng.random() < 0.5:
        decl.reverse()
    cpus = rng.sample(["2", "8", "32"], 2)
    pods = [main] + rng.sample([k for k in POD_KINDS if k != main], 2)
    return {"nodes": list(zip(cpus, decl)), "pods": pods}


def body(name: str, ns: str, scheduler: str, case_tag: str, kind: str) -> dict:
    spec = json.loads(json.dumps(POD_KINDS[kind][0]))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {**spec, "schedulerName": scheduler, "nodeSelector": {CASE_LABEL: case_tag},
                     "terminationGracePeriodSeconds": 0}}


def settled(core, ns: str, name: str, timeout: float = 30):
    def check():
        p = core.read_namespaced_pod(name, ns)
        rejected = any(c.type == "PodScheduled" and c.status == "False" for c in (p.status.conditions or []))
        return p if p.spec.node_name or rejected else None
    return wait_for(check, timeout, 0.05, what=f"{ns}/{name} bound or unschedulable")


def delete_and_wait(core, ns: str, name: str) -> None:
    core.delete_namespaced_pod(name, ns, grace_period_seconds=0)

    def gone() -> bool:
        try:
            core.read_namespaced_pod(name, ns)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False
    wait_for(gone, 30, 0.05, what=f"{ns}/{name} deleted")


def outcome(pod) -> tuple[str, str]:
    """("node", name) or ("message", the PodScheduled condition's message)."""
    if pod.spec.node_name:
        return "node", pod.spec.node_name
    return "message", next((c.message for c in pod.status.conditions or [] if c.type == "PodScheduled"), "")


def declare(raw: Raw, name: str, features: list[str]) -> None:
    """status.declaredFeatures through the status subresource (a merge patch)."""
    raw.req("PATCH", f"/api/v1/nodes/{name}/status", {"status": {"declaredFeatures": features}}, patch=True)


def declared(raw: Raw, name: str) -> list[str]:
    return (raw.req("GET", f"/api/v1/nodes/{name}").get("status") or {}).get("declaredFeatures") or []


def kwok_ready(raw: Raw, name: str) -> bool:
    conds = (raw.req("GET", f"/api/v1/nodes/{name}").get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


@pytest.fixture(scope="module")
def schedulers(cluster, operator, policies):
    default = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
    assert any(p["name"] == "NodeDeclaredFeatures" for p in default["spec"]["plugins"])
    apply_policy(policies, "default", default["spec"]["plugins"])
    wait_for(lambda: (ready_condition(policies, "default") or {}).get("status") == "True", 30,
             what="policy default Ready")
    started = "kube-scheduler" not in cluster.state.get("procs", {})
    if started:
        cluster.start_scheduler()
    yield
    if started:
        cluster.stop("kube-scheduler")


def make_nodes(core, raw: Raw, specs: list[tuple[str, str, list[str]]]) -> None:
    """(name, cpu, declared) per node: created as kwok nodes, and once kwok has made each Ready,
    their declared features patched in."""
    for name, cpu, _ in specs:
        n = node(name, cpu=cpu, memory="32Gi", kwok=True, labels={CASE_LABEL: name.rsplit("-", 1)[0]})
        core.create_node(n)
    for name, _, _ in specs:
        wait_for(lambda: kwok_ready(raw, name), 60, 0.2, what=f"kwok to initialize {name}")
    for name, _, feats in specs:
        if feats:
            declare(raw, name, feats)
        assert declared(raw, name) == feats


def probe(core, ns: str, last: str) -> None:
    """Both schedulers have seen every node once each binds a pod only the last node admits."""
    for sched in (OURS, UPSTREAM):
        name = f"probe-{sched}"
        b = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
             "spec": {"schedulerName": sched, "containers": [_ctr()], "terminationGracePeriodSeconds": 0,
                      "nodeSelector": {"kubernetes.io/hostname": last}}}
        core.create_namespaced_pod(ns, b)
        got = wait_for(lambda: core.read_namespaced_pod(name, ns).spec.node_name, 60, 0.1,
                       what=f"{sched} to bind the probe")
        assert got == last, f"{sched} did not see the last node"
        delete_and_wait(core, ns, name)


def delete_nodes(core, names) -> None:
    for n in names:
        try:
            core.delete_node(n)
        except ApiException as e:
            if e.status != 404:
                raise


def test_same_node_and_message_as_kube_scheduler(cluster, api, core, schedulers, namespace):
    raw = Raw(api)
    rng = random.Random(SEED)
    cases = [make_case(rng, i) for i in range(CASES)]
    run = secrets.token_hex(2)
    specs = []
    for i, c in enumerate(cases):
        for j, (cpu, feats) in enumerate(c["nodes"]):
            specs.append((f"ndf{run}-{i:02d}-{j}", cpu, feats))
    existing = len(core.list_node().items)
    assert existing + len(specs) <= MAX_NODES, f"{existing} nodes already exist"
    results: list[str] = []
    bad: list[str] = []
    shapes: set[str] = set()
    try:
        make_nodes(core, raw, specs)
        probe(core, namespace, specs[-1][0])
        for i, c in enumerate(cases):
            tag = f"ndf{run}-{i:02d}"
            for k, kind in enumerate(c["pods"]):
                got = {}
                for sched in (OURS, UPSTREAM):
                    name = f"c{i:02d}-{k}-{'ours' if sched == OURS else 'up'}"
                    core.create_namespaced_pod(namespace, body(name, namespace, sched, tag, kind))
                    p = settled(core, namespace, name)
                    got[sched] = outcome(p)
                    if sched == OURS and p.spec.node_name:
                        top = json.loads((p.metadata.annotations or {})[DECISION]).get("top") or []
                        assert len(top) == 1 or top[0]["total"] > top[1]["total"], f"a tie for {name}: {top}"
                    delete_and_wait(core, namespace, name)
                need = POD_KINDS[kind][1]
                fits = [set(need) <= set(f) for _, f in c["nodes"]]
                shapes.add(f"{sum(fits)}-of-2" if need else "needs-nothing")
                line = f"case {i:02d} nodes={c['nodes']} pod={kind}: ours={got[OURS]} upstream={got[UPSTREAM]}"
                results.append(line)
                if got[OURS] != got[UPSTREAM]:
                    bad.append(line)
        # kwok's status updates (heartbeats, conditions) kept every node's declared features
        for name, _, feats in specs:
            assert declared(raw, name) == feats, f"{name}: declaredFeatures changed to {declared(raw, name)}"
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        delete_nodes(core, [s[0] for s in specs])
    print("\n" + "\n".join(results))
    assert {"0-of-2", "1-of-2", "2-of-2", "needs-nothing"} <= shapes, f"seed {SEED} misses a shape: {shapes}"
    assert not bad, f"{len(bad)} of {len(results)} pods differ from kube-scheduler:\n" + "\n".join(bad)
    # the refusals carry the plugin's reason
    assert any("node(s) didn't match Pod's required features" in r for r in results)
    assert any("1 Insufficient cpu, 1 node(s) didn't match Pod's required features" in r for r in results), \
        f"seed {SEED}: no case where NodeResourcesFit rejects a node before NodeDeclaredFeatures"


def test_a_waiting_pod_is_placed_when_a_node_declares_its_feature(api, core, schedulers, namespace):
    """The node update hint (UpdateNodeDeclaredFeature): both schedulers bind the pod to the node
    whose declared features now include what it needs, without waiting for a periodic flush."""
    raw = Raw(api)
    run = secrets.token_hex(2)
    tag = f"ndfwait{run}"
    names = [f"{tag}-0", f"{tag}-1"]
    try:
        make_nodes(core, raw, [(names[0], "8", [UNKNOWN]), (names[1], "4", [BIND])])
        probe(core, namespace, names[1])
        for sched in (OURS, UPSTREAM):
            core.create_namespaced_pod(namespace, body(f"wait-{sched}", namespace, sched, tag, "restart-all"))
        msgs = {s: outcome(settled(core, namespace, f"wait-{s}")) for s in (OURS, UPSTREAM)}
        assert msgs[OURS] == msgs[UPSTREAM] and msgs[OURS][0] == "message", msgs
        assert "2 node(s) didn't match Pod's required features" in msgs[OURS][1]
        time.sleep(1.0)
        t0 = time.monotonic()
        declare(raw, names[1], sorted([BIND, RESTART_ALL]))
        for sched in (OURS, UPSTREAM):
            got = wait_for(lambda: core.read_namespaced_pod(f"wait-{sched}", namespace).spec.node_name, 30, 0.1,
                           what=f"{sched} to place the waiting pod")
            assert got == names[1], f"{sched} placed it on {got}"
        assert time.monotonic() - t0 < 30
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        delete_nodes(core, names)
