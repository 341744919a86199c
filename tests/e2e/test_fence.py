"""The leadership fence, end to end: a leader frozen past its lease's renew deadline (SIGSTOP of
the whole operator process) while it has bindings and a preemption's victim DELETE waiting to be
sent, then resumed (SIGCONT), sends no Binding and no DELETE after the deadline, and exits.

What the operator sent is read from kube-apiserver's audit log: this module starts a control
plane of its own with an audit policy (hack/localcluster.py ``audit_policy``), and the operator
runs with a client certificate of its own (user ``fence-operator``), so every request it makes,
kopf's included, is attributed to it. Its client is held to 5 requests per second (--qps 5
--burst 1), so that when it is frozen, bindings it has decided and its victim's DELETE are still
waiting in the token bucket; its leader election has a client of its own and keeps renewing
meanwhile."""

from __future__ import annotations

import base64
import datetime as dt
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

import localcluster
from conftest import STATE, OperatorProcess, install_crd, wait_served
from helpers import GROUP, PLURAL, STEADY_ELECTION, VERSION, apply_policy, node, pod, priority_classes, wait_for

ROOT = Path(__file__).resolve().parents[2]
SCHED = "fence-scheduler"
USER = "fence-operator"
LABEL = "policy-scheduler.io/policy"
RENEW_DEADLINE = float(STEADY_ELECTION[STEADY_ELECTION.index("--leader-elect-renew-deadline") + 1].rstrip("s"))
# every write, by anyone, at Metadata level (who, what, when); nothing else
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
"""


@pytest.fixture(scope="module")
def audited():
    """A control plane of this module's own (no kwok: plain Node objects), with an audit log."""
    state = STATE / "fence-cluster"  # inside the session's state dir: reaped with it
    c = localcluster.LocalCluster(state, kubeconfig_path=state / "kubeconfig")
    c.up(quiet=True, audit_policy=AUDIT_POLICY)
    yield c
    c.down(quiet=True)
    shutil.rmtree(state, ignore_errors=True)


def operator_kubeconfig(c: localcluster.LocalCluster) -> Path:
    """A kubeconfig with a client certificate of the operator's own (user ``fence-operator``, in
    system:masters), signed by the cluster's CA: its requests are told apart in the audit log."""
    pki = c.state_dir / "pki"
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", "fence.key", "-out", "fence.csr", "-subj", f"/O=system:masters/CN={USER}"],
                   cwd=pki, check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", "fence.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                    "-CAcreateserial", "-out", "fence.crt", "-days", "1", "-extfile", "client.ext"],
                   cwd=pki, check=True, capture_output=True)
    b64 = lambda p: base64.b64encode((pki / p).read_bytes()).decode()  # noqa: E731
    path = c.state_dir / "fence-operator.kubeconfig"
    path.write_text(localcluster.kubeconfig_text(c.server, (pki / "ca.crt").read_bytes(),
                                                 {"client-certificate-data": b64("fence.crt"),
                                                  "client-key-data": b64("fence.key")}))
    return path


def audit_events(c: localcluster.LocalCluster) -> list[dict]:
    out = []
    for line in c.audit_log.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def ts(s: str) -> float:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def kind(e: dict) -> str:
    ref = e.get("objectRef") or {}
    return "/".join(x for x in (ref.get("resource"), ref.get("subresource")) if x)


def test_a_frozen_leader_sends_no_binding_and_no_delete_after_its_deadline(audited):
    api = config.new_client_from_config(str(audited.kubeconfig_path))
    core = client.CoreV1Api(api)
    objs = client.CustomObjectsApi(api)
    wait_served(api, install_crd(api, ROOT / "crds" / "schedulingpolicies.yaml"),
                install_crd(api, ROOT / "crds" / "podgroups.yaml"))
    prio = priority_classes(api, {"fence-low": (100, None), "fence-high": (1000, None)})
    next(prio)
    ns = "fence"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    plugins = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())["spec"]["plugins"]
    assert {"name": "DefaultPreemption"} in plugins
    apply_policy(objs, SCHED, plugins, schedulerName=SCHED)
    core.create_node(node("fence-pre", cpu="2", labels={"e2e": "fence-pre"}))
    core.create_node(node("fence-bulk", cpu="64", pods="500", labels={"e2e": "fence-bulk"}))
    victims = [f"low-{i}" for i in range(2)]
    for v in victims:  # the 2-cpu node full of low-priority pods
        core.create_namespaced_pod(ns, pod(v, ns, cpu="1", scheduler=SCHED, labels={LABEL: SCHED},
                                           priorityClassName="fence-low", nodeName="fence-pre"))

    op = OperatorProcess(audited, SCHED, kubeconfig=str(operator_kubeconfig(audited)), extra=[
        "--default-policy", SCHED, "--leader-elect", *STEADY_ELECTION, "--qps", "5", "--burst", "1"])
    try:
        op.start()
        wait_for(lambda: "scheduling:" in op.log(), 60, what="the operator to lead and schedule")
        bulk = [f"b{i:03d}" for i in range(100)]
        for b in bulk:
            core.create_namespaced_pod(ns, pod(b, ns, cpu="100m", scheduler=SCHED, labels={LABEL: SCHED},
                                               nodeSelector={"e2e": "fence-bulk"}))
        # the leader binds them at 5 requests a second, with their Scheduled events: a backlog
        wait_for(lambda: sum(1 for p in core.list_namespaced_pod(ns).items
                             if p.metadata.name in bulk and p.spec.node_name) >= 3, 60, what="the first bindings")
        time.sleep(5)  # the backlog runs for a while (the election renews meanwhile)
        core.create_namespaced_pod(ns, pod("high", ns, cpu="1", scheduler=SCHED, labels={LABEL: SCHED},
                                           priorityClassName="fence-high", nodeSelector={"e2e": "fence-pre"}))
        wait_for(lambda: "preempts 1 pods on node fence-pre" in op.log(), 30, 0.02, what="the preemption decided")
        op.proc.send_signal(signal.SIGSTOP)  # the whole process: its loop and the election's thread
        stopped = time.time()
        try:
            pods = {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}
            pending_at_stop = [b for b in bulk if not pods[b].spec.node_name]
            assert not any(pods[v].metadata.deletion_timestamp for v in victims), "the victim went before the freeze"
            assert pending_at_stop, "every binding went before the freeze"
            time.sleep(RENEW_DEADLINE + 3)  # frozen past the renew deadline of its last renewal
        finally:
            op.proc.send_signal(signal.SIGCONT)
        resumed = time.time()
        op.proc.wait(40)
    finally:
        op.stop()
    log = op.log()
    assert op.proc.returncode == 1, log[-3000:]
    assert "leader election lost" in log and "exiting" in log, log[-3000:]
    # what was waiting was refused: at the fence when sent ("request not sent"), before it when a
    # binding starts after the deadline ("does not hold the leader lease"), or cancelled as the
    # operator stopped
    refused = [line for line in log.splitlines() if "request not sent: the leader lease's renew deadline" in line
               or "not bound: this replica does not hold the leader lease" in line
               or "renew deadline passed before the Binding was sent" in line]
    print(f"\n{len(refused)} writes refused after the resume, e.g. {refused[:1]}")

    events = [e for e in audit_events(audited) if e["user"]["username"] == USER]
    renewals = [ts(e["requestReceivedTimestamp"]) for e in events
                if kind(e) == "leases" and e["verb"] == "update" and (e.get("responseStatus") or {}).get("code") == 200
                and ts(e["requestReceivedTimestamp"]) < stopped]
    assert renewals, "no renewal before the freeze"
    last_renewal = max(renewals)
    # the election's own client kept renewing every second while the operator's client was held
    # in its token bucket (5 requests a second, a backlog of bindings and events)
    assert sum(1 for r in renewals if r > stopped - 5) >= 3, sorted(renewals)[-6:]
    deadline = last_renewal + RENEW_DEADLINE  # the API server's receipt is after the renewal's start
    assert resumed > deadline
    bindings = [e for e in events if kind(e) == "pods/binding" and e["verb"] == "create"]
    bound_by_it = [e for e in bindings if (e.get("responseStatus") or {}).get("code") in (200, 201)]
    deletes = [e for e in events if kind(e) == "pods" and e["verb"] == "delete"]
    late = [(kind(e), e["verb"], (e.get("objectRef") or {}).get("name"), e["requestReceivedTimestamp"])
            for e in bindings + deletes if ts(e["requestReceivedTimestamp"]) >= deadline]
    assert late == [], late
    # nothing of the leader's pod writes after the deadline at all: status patches, events
    late_writes = [(kind(e), e["verb"], e["requestReceivedTimestamp"]) for e in events
                   if ts(e["requestReceivedTimestamp"]) >= deadline and kind(e) in ("pods", "pods/binding",
                                                                                  "pods/status", "events")]
    assert late_writes == [], late_writes
    assert bindings and not deletes, (len(bindings), deletes)  # it was binding; the victim's DELETE never went
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}
    assert all(pods[v].metadata.deletion_timestamp is None for v in victims)
    bound = sorted(b for b in bulk if pods[b].spec.node_name)
    assert len(bound) == len(bound_by_it) and len(bound) < len(bulk)
    print(f"\nfrozen {resumed - stopped:.1f}s, {deadline - stopped:.1f}s after the freeze its deadline passed; "
          f"{len(pending_at_stop)} bindings and 1 victim DELETE were waiting; after SIGCONT: 0 sent "
          f"({len(bindings)} bindings in all, before the freeze); exited {op.proc.returncode}")
    try:
        core.delete_namespace(ns)
        objs.delete_cluster_custom_object(GROUP, VERSION, PLURAL, SCHED)
    except ApiException:
        pass
    next(prio, None)
