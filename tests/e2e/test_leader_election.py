"""Run like a platform component: two replicas with leader election on a Lease, a leader killed
mid-burst, a leader that loses its Lease, probes that tell the truth, and two instances with
different scheduler names that leave each other's policies alone. Real operator processes on the
real local control plane; RBAC identities are ServiceAccounts with the manifests' rules."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from conftest import OperatorProcess
from helpers import (GROUP, PLURAL, VERSION, apply_policy, events_for, pod, policy_status, wait_bound,
                     wait_for)

ROOT = Path(__file__).resolve().parents[2]
LABEL = "policy-scheduler.io/policy"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"


def manifest(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((ROOT / "manifests" / name).read_text()) if d]


def readyz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return 0, {}


def master_status(port: int, lease: str) -> float | None:
    """leader_election_master_status{name=lease} from the operator's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf'^leader_election_master_status{{name="{re.escape(lease)}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def lease_holder(api, name: str) -> str:
    try:
        return client.CoordinationV1Api(api).read_namespaced_lease(name, "kube-system").spec.holder_identity or ""
    except ApiException as e:
        if e.status == 404:
            return ""
        raise


def node_use(core, namespace: str) -> dict[str, int]:
    """Millicores requested per node by the bound pods of ``namespace``."""
    used: dict[str, int] = {}
    for p in core.list_namespaced_pod(namespace).items:
        if p.spec.node_name:
            cpu = p.spec.containers[0].resources.requests["cpu"]
            used[p.spec.node_name] = used.get(p.spec.node_name, 0) + (int(cpu[:-1]) if cpu.endswith("m")
                                                                        else int(cpu) * 1000)
    return used


def scheduled_events(core, namespace: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in core.list_namespaced_event(namespace).items:
        if e.reason == "Scheduled":
            counts[e.involved_object.name] = counts.get(e.involved_object.name, 0) + (e.count or 1)
    return counts


def create_pods(core, namespace: str, bodies: list[dict], threads: int = 12) -> None:
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda b: core.create_namespaced_pod(namespace, b), bodies))


class Identity:
    """A ServiceAccount with the manifests' ClusterRole (less ``drop``) and leader-election Role
    (for ``lease``), and a kubeconfig holding its token. ``revoke_lease()`` deletes the Role's
    binding."""

    def __init__(self, api, core, cluster, name: str, namespace: str, lease: str, drop=()) -> None:
        self.rbac = client.RbacAuthorizationV1Api(api)
        self.name = name
        core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
            metadata=client.V1ObjectMeta(name="op")))
        subject = [{"kind": "ServiceAccount", "name": "op", "namespace": namespace}]
        role = manifest("02-clusterrole.yaml")[0]
        rules = [{**r, "resources": [x for x in r["resources"] if x not in drop]} for r in role["rules"]]
        rules = self.rules = [r for r in rules if r["resources"]]
        self.rbac.create_cluster_role({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                       "metadata": {"name": name}, "rules": rules})
        self.rbac.create_cluster_role_binding({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subject})
        le_role, le_binding = manifest("06-leader-election-rbac.yaml")
        le_role = {**le_role, "metadata": {"name": name, "namespace": "kube-system"}}
        for r in le_role["rules"]:
            if "resourceNames" in r:
                r["resourceNames"] = [lease]
        self.rbac.create_namespaced_role("kube-system", le_role)
        self.rbac.create_namespaced_role_binding("kube-system", {
            **le_binding, "metadata": {"name": name, "namespace": "kube-system"},
            "roleRef": {**le_binding["roleRef"], "name": name}, "subjects": subject})
        token = core.create_namespaced_service_account_token("op", namespace, client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status.token
        self.kubeconfig = cluster.state_dir / f"{name}.kubeconfig"
        self.kubeconfig.write_text(localcluster.kubeconfig_text(
            cluster.server, (cluster.state_dir / "pki" / "ca.crt").read_bytes(), {"token": token}))

    def revoke_lease(self) -> None:
        self.rbac.delete_namespaced_role_binding(self.name, "kube-system")

    def grant(self, rule: dict) -> None:
        self.rules.append(rule)
        self.rbac.patch_cluster_role(self.name, {"rules": self.rules})

    def delete(self) -> None:
        for fn, args in ((self.rbac.delete_cluster_role_binding, (self.name,)),
                         (self.rbac.delete_cluster_role, (self.name,)),
                         (self.rbac.delete_namespaced_role_binding, (self.name, "kube-system")),
                         (self.rbac.delete_namespaced_role, (self.name, "kube-system"))):
            try:
                fn(*args)
            except ApiException as e:
                if e.status != 404:
                    raise


# ---------------------------------------------------------------------------------------------
# two replicas, 200 nearly full nodes, 2,000 pods; then the leader is killed mid-burst

def test_two_replicas_one_binds_and_a_killed_leader_is_replaced(cluster, api, core, namespace, nodes, crd, policies):
    sched = "ha-scheduler"
    apply_policy(policies, sched, [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesBalancedAllocation"}],
                 schedulerName=sched)
    n_nodes, cpu = 200, 12
    for i in range(n_nodes):
        nodes(f"ha-{i:03d}", cpu=str(cpu), memory="64Gi", pods="110", labels={"e2e": "ha"})
    ports = [localcluster.free_port(), localcluster.free_port()]
    mports = [localcluster.free_port(), localcluster.free_port()]
    reps = [OperatorProcess(cluster, sched, log_name=f"{sched}-{i}", extra=[
        "--default-policy", sched, "--health-port", str(ports[i]), "--health-address", "127.0.0.1",
        "--metrics-port", str(mports[i]), "--metrics-address", "127.0.0.1"])
        for i in range(2)]
    for r in reps:  # started together
        r.start(wait=False)
    try:
        for r in reps:
            r.wait_synced()
        wait_for(lambda: sum("successfully acquired lease" in r.log() for r in reps) == 1, 30, what="one leader")
        leader, standby = (reps if "successfully acquired lease" in reps[0].log() else reps[::-1])
        lport, sport = (ports if leader is reps[0] else ports[::-1])
        lmport, smport = (mports if leader is reps[0] else mports[::-1])
        wait_for(lambda: "is held by" in standby.log(), 10, what="the standby to see the leader")
        assert wait_for(lambda: readyz(sport)[0] == 200, 30, what="the standby ready")
        assert readyz(lport)[1]["leader"] is True and readyz(sport)[1]["leader"] is False
        assert master_status(lmport, sched) == 1 and master_status(smport, sched) == 0

        # 2,000 pods of 1 cpu on 200 x 12 cpu: 2,000 of 2,400 cpu
        sel = {"nodeSelector": {"e2e": "ha"}}
        names = [f"p{i:04d}" for i in range(2000)]
        t0 = time.monotonic()
        create_pods(core, namespace, [pod(n, namespace, cpu="1", memory="64Mi", scheduler=sched, **sel)
                                      for n in names])
        wait_bound(core, namespace, names, 180)
        print(f"\ntwo replicas: 2,000 pods bound in {time.monotonic() - t0:.1f}s by the leader alone")
        assert readyz(lport)[1]["bound"] == 2000 and readyz(sport)[1]["bound"] == 0
        for r in reps:
            # a refused binding or Lease write logs "HTTP 409" (timestamps may hold the digits 409)
            assert not re.search(r"HTTP 409|Conflict|already assigned", r.log()), r.log()[-3000:]
        assert not re.search(r"\bbound to\b|not bound", standby.log())
        used = node_use(core, namespace)
        assert max(used.values()) <= cpu * 1000, "a node is over its allocatable"
        wait_for(lambda: len(scheduled_events(core, namespace)) == 2000, 60, what="2,000 Scheduled events")
        assert set(scheduled_events(core, namespace).values()) == {1}

        # the leader is SIGKILLed mid-burst: 380 more pods fill the nodes to 2,380 of 2,400 cpu
        more = [f"q{i:03d}" for i in range(380)]
        creator = threading.Thread(target=create_pods, args=(core, namespace, [
            pod(n, namespace, cpu="1", memory="64Mi", scheduler=sched, **sel) for n in more], 4))
        creator.start()

        def bound_of(batch):
            return {p.metadata.name for p in core.list_namespaced_pod(namespace).items
                    if p.spec.node_name and p.metadata.name in batch}

        wait_for(lambda: len(bound_of(set(more))) >= 40, 60, 0.1, what="the second burst under way")
        leader.kill()
        killed = time.monotonic()
        at_kill = bound_of(set(more))

        def standby_bound():
            return readyz(sport)[1].get("bound", 0) > 0

        wait_for(standby_bound, 30, 0.1, what="the standby binding")
        took = time.monotonic() - killed
        creator.join()
        wait_bound(core, namespace, more, 120)
        print(f"leader SIGKILLed after {len(at_kill)}/380 of the second burst; the standby bound its first pod "
              f"{took:.1f}s after the kill (lease 15s); all 2,380 bound once")
        assert took <= 20.0
        assert len(at_kill) < len(more), "the burst finished before the kill; nothing was tested"
        used = node_use(core, namespace)
        assert sum(used.values()) == 2380 * 1000 and max(used.values()) <= cpu * 1000, "a node is overcommitted"
        # the new leader's Scheduled events all arrive; the killed one's that waited behind its
        # bindings in the recorder's queue died with it (events are best effort, as upstream's)
        by_standby = readyz(sport)[1]["bound"]
        wait_for(lambda: len([n for n in scheduled_events(core, namespace) if n.startswith("q")]) >= by_standby,
                 60, what="the new leader's Scheduled events")
        events = scheduled_events(core, namespace)
        assert set(events.values()) == {1}, "a pod was scheduled twice"
        print(f"{by_standby} pods bound by the new leader; Scheduled events of {len(events)}/2,380 pods "
              f"(the rest were queued in the killed process)")
        assert readyz(sport)[1]["leader"] is True and master_status(smport, sched) == 1
    finally:
        for r in reps:
            r.stop()
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, sched)


# ---------------------------------------------------------------------------------------------
# a leader whose Lease updates are refused stops before the lease duration passes

def test_a_leader_that_cannot_renew_stops_binding_and_exits(cluster, api, core, namespace, nodes, crd, policies):
    sched = "renew-scheduler"
    who = Identity(api, core, cluster, f"renew-{namespace}", namespace, lease=sched)
    apply_policy(policies, sched, [{"name": "NodeResourcesFit"}], schedulerName=sched)
    nodes("renew-0", cpu="64", labels={"e2e": "renew"})
    op = OperatorProcess(cluster, sched, kubeconfig=str(who.kubeconfig), extra=["--default-policy", sched])
    stop = threading.Event()

    def trickle():  # a pod every 0.2 s until told to stop
        i = 0
        while not stop.is_set():
            core.create_namespaced_pod(namespace, pod(f"t{i:03d}", namespace, cpu="10m", scheduler=sched,
                                                      nodeSelector={"e2e": "renew"}))
            i += 1
            time.sleep(0.2)

    creator = threading.Thread(target=trickle)
    try:
        op.start()
        wait_for(lambda: "successfully acquired lease" in op.log(), 30, what="leadership")
        creator.start()
        wait_for(lambda: any(p.spec.node_name for p in core.list_namespaced_pod(namespace).items), 30,
                 what="a pod bound")
        who.revoke_lease()
        revoked = time.time()
        op.proc.wait(30)
        exited = time.time()
        time.sleep(2)
        stop.set()
        creator.join()
    finally:
        stop.set()
        op.stop()
        who.delete()
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, sched)
    assert op.proc.returncode == 1, op.log()[-2000:]
    log = op.log()
    assert "leader election lost" in log and "forbidden" in log.lower()
    # the API server stamps each binding: PodScheduled's lastTransitionTime (seconds)
    last_bind = max(c.last_transition_time.timestamp() for p in core.list_namespaced_pod(namespace).items
                    for c in p.status.conditions or [] if c.type == "PodScheduled" and c.status == "True")
    unbound = [p.metadata.name for p in core.list_namespaced_pod(namespace).items if not p.spec.node_name]
    print(f"\nlease RBAC revoked; the leader exited {exited - revoked:.1f}s later (lease 15s, renew deadline 10s); "
          f"last binding {last_bind - revoked:+.0f}s from the revocation; {len(unbound)} pods left pending")
    assert exited - revoked < 15.0
    assert last_bind < revoked + 15.0 and unbound


# ---------------------------------------------------------------------------------------------
# probes: unready until synced; a denied LIST keeps it unready and is named in the log

def test_readyz_waits_for_sync_and_names_a_denied_list(cluster, api, core, namespace, crd):
    sched = "probe-rbac-scheduler"
    who = Identity(api, core, cluster, f"probe-{namespace}", namespace, lease=sched, drop=("services",))
    port = localcluster.free_port()
    op = OperatorProcess(cluster, sched, kubeconfig=str(who.kubeconfig), extra=[
        "--health-port", str(port), "--health-address", "127.0.0.1", "--cache-sync-timeout", "3s"])
    try:
        op.start(wait=False)
        code, body = wait_for(lambda: (lambda r: r if r[0] else None)(readyz(port)), 30, what="/readyz answering")
        assert code == 503 and body["synced"] is False
        wait_for(lambda: "cache not synced after" in op.log(), 30, what="the stuck-sync report")
        stuck = next(ln for ln in op.log().splitlines() if "cache not synced after" in ln)
        assert "services (list failed:" in stuck and "403" in stuck and "forbidden" in stuck, stuck
        code, body = readyz(port)
        assert code == 503 and set(body["waiting"]) == {"services"}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200  # alive: a restart would not help
        who.grant({"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch"]})
        t0 = time.monotonic()
        wait_for(lambda: readyz(port)[0] == 200, 60, what="ready once the list is allowed")
        print(f"\n/readyz 503 while 'list services' was denied; 200 {time.monotonic() - t0:.1f}s after it was "
              f"granted (informer backoff with jitter)")
        assert "cache synced" in op.log()
    finally:
        op.stop()
        who.delete()


# ---------------------------------------------------------------------------------------------
# two instances with different scheduler names

def test_two_instances_leave_each_other_s_policies_alone(cluster, core, namespace, nodes, crd, policies):
    a, b = "team-a-scheduler", "team-b-scheduler"
    apply_policy(policies, "team-a", [{"name": "NodeResourcesFit"}], schedulerName=a)
    apply_policy(policies, "team-b", [{"name": "NodeResourcesFit"}], schedulerName=b)
    nodes("teams-0", cpu="16", labels={"e2e": "teams"})
    ops = [OperatorProcess(cluster, s, extra=["--default-policy", f"team-{s[5]}"]).start() for s in (a, b)]
    try:
        sel = {"nodeSelector": {"e2e": "teams"}}
        create_pods(core, namespace, [pod(f"a{i}", namespace, scheduler=a, **sel) for i in range(3)]
                    + [pod(f"b{i}", namespace, scheduler=b, **sel) for i in range(2)]
                    # a pod of b naming a's policy: b does not use it, and says why
                    + [pod("b-wrong", namespace, scheduler=b, labels={LABEL: "team-a"}, **sel)])
        wait_bound(core, namespace, ["a0", "a1", "a2", "b0", "b1"], 60)
        ev = wait_for(lambda: events_for(core, namespace, "b-wrong", "NoPolicy"), 30, what="b-wrong's event")
        assert ev[0].message == ("SchedulingPolicy 'team-a' belongs to scheduler 'team-a-scheduler' "
                                 "(its spec.schedulerName), not to 'team-b-scheduler'")
        assert ev[0].reporting_component == b

        def counts():
            sa, sb = policy_status(policies, "team-a"), policy_status(policies, "team-b")
            return (sa.get("scheduled"), sa.get("pending"), sb.get("scheduled"), sb.get("pending"))

        wait_for(lambda: counts() == (3, 0, 2, 0), 30, what="each policy's status from its own instance")
        for _ in range(8):  # several status periods of both: nobody overwrites the other's counts
            time.sleep(0.5)
            assert counts() == (3, 0, 2, 0)
        assert "SchedulingPolicy team-a belongs to scheduler team-a-scheduler" in ops[1].log()
        assert "SchedulingPolicy team-b belongs to scheduler team-b-scheduler" in ops[0].log()
        assert lease_holder(core.api_client, a) and lease_holder(core.api_client, b)  # a Lease each
    finally:
        for op in ops:
            op.stop()
    assert lease_holder(core.api_client, a) == "" == lease_holder(core.api_client, b)  # released on SIGTERM
    for name in ("team-a", "team-b"):
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
