"""The webhook port is open to every pod: a flood of it costs neither scheduling nor leadership.

For 40 s, 16 clients (webhook_flood.py, a process of its own) POST 4-8 MB bodies (unclosed
brackets; millions of tiny objects) to the operator's webhook port as fast as it answers, while
60 pods are created one by one, each going through the operator's validating webhook (the
configurations of manifests/ call it by URL). Every pod is bound within 5 s of its creation, the
leader keeps its Lease (same holder, no transition), the process stays up and its RSS stays under
600 MB. The webhooks serve on their own thread with caps on concurrent requests, buffered bytes
and read time (cluster/webhook_server.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from kubernetes import client

import localcluster
from conftest import OperatorProcess
from helpers import STEADY_ELECTION, GROUP, PLURAL, VERSION, apply_policy, pod, wait_for, webhook_configs

SCHED = "flood-scheduler"
CONFIG = "flood-e2e"
LABEL = "policy-scheduler.io/policy"
FLOOD_SECONDS, CLIENTS, PODS = 40.0, 16, 60
BIND_WITHIN, RSS_LIMIT_MB = 5.0, 600


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_a_webhook_flood_costs_neither_scheduling_nor_the_lease(api, core, cluster, crd, policies, nodes, namespace):
    port = localcluster.free_port()
    args = ["--webhook-port", str(port), "--webhook-address", "127.0.0.1", "--webhook-host", "127.0.0.1",
            "--webhook-secret", f"{namespace}/webhook-tls", "--webhook-configuration", CONFIG,
            "--leader-elect-resource-namespace", namespace, *STEADY_ELECTION]
    apply_policy(policies, "flood-default", [{"name": "NodeResourcesFit"}], schedulerName=SCHED)
    for i in range(4):
        nodes(f"flood-{i}", cpu="32", memory="64Gi")
    adm = client.AdmissionregistrationV1Api(api)
    cfgs = webhook_configs(port, CONFIG)
    adm.create_validating_webhook_configuration(cfgs["ValidatingWebhookConfiguration"])
    leases = client.CoordinationV1Api(api)
    op = OperatorProcess(cluster, SCHED, extra=args)
    flood = None
    try:
        op.start()
        wait_for(lambda: "admission webhooks on https://" in op.log(), 30, what="the webhooks serving")
        wait_for(lambda: "successfully acquired lease" in op.log(), 30, what="the leader")
        ca = core.read_namespaced_secret("webhook-tls", namespace).data["ca.crt"]
        wait_for(lambda: adm.read_validating_webhook_configuration(CONFIG).webhooks[0].client_config.ca_bundle == ca,
                 10, what="the caBundle written")
        lease0 = leases.read_namespaced_lease(SCHED, namespace).spec
        rss0 = rss_mb(op.proc.pid)

        # the flood, in a process of its own; it stops by itself
        flood = subprocess.Popen([sys.executable, str(Path(__file__).with_name("webhook_flood.py")), str(port),
                                  str(FLOOD_SECONDS), str(CLIENTS)], stdout=subprocess.PIPE, text=True)
        t_start = time.monotonic()
        created: dict[str, float] = {}
        admitted: dict[str, float] = {}
        bound: dict[str, float] = {}
        rss: list[float] = []
        done = threading.Event()

        def watch() -> None:  # bound pods and the operator's RSS, every 0.2 s
            while not done.is_set():
                now = time.monotonic()
                for p in core.list_namespaced_pod(namespace).items:
                    if p.spec.node_name and p.metadata.name not in bound:
                        bound[p.metadata.name] = now
                if op.proc.poll() is None:
                    rss.append(rss_mb(op.proc.pid))
                done.wait(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(2.0)  # the flood under way
        gap = (FLOOD_SECONDS - 6.0) / PODS
        for i in range(PODS):
            name = f"flood-pod-{i}"
            created[name] = time.monotonic()
            core.create_namespaced_pod(namespace, pod(name, namespace, scheduler=SCHED,
                                                      labels={LABEL: "flood-default"}))
            admitted[name] = time.monotonic() - created[name]  # the API server called the webhook
            time.sleep(max(0.0, created[name] + gap - time.monotonic()))
        wait_for(lambda: len(bound) >= PODS or op.proc.poll() is not None, 15, what="every pod bound")
        out, _ = flood.communicate(timeout=FLOOD_SECONDS + 30)
        done.set()
        watcher.join(5)
        stats = json.loads(out.strip().splitlines()[-1])
        lease1 = leases.read_namespaced_lease(SCHED, namespace).spec

        waits = {n: bound[n] - t for n, t in created.items() if n in bound}
        slow = {n: round(w, 2) for n, w in waits.items() if w > BIND_WITHIN}
        answered = sum(v for k, v in stats.items() if k.startswith("http_"))
        print(f"\nflood {time.monotonic() - t_start:.0f}s, {CLIENTS} clients: {answered} requests answered "
              f"({', '.join(f'{k} {v}' for k, v in sorted(stats.items()) if k != 'bytes_sent')}), "
              f"{stats.get('bytes_sent', 0) / 1e9:.2f} GB sent; {len(waits)}/{PODS} pods bound, "
              f"slowest in {max(waits.values(), default=0):.2f}s, median "
              f"{sorted(waits.values())[len(waits) // 2] if waits else 0:.2f}s (creation, admission included: slowest "
              f"{max(admitted.values()):.2f}s); RSS {rss0:.0f} MB before, "
              f"peak {max(rss, default=0):.0f} MB; lease holder {lease1.holder_identity}, "
              f"transitions {lease0.lease_transitions} -> {lease1.lease_transitions}")
        assert op.proc.poll() is None, op.log()[-3000:]
        assert "leader election lost" not in op.log()
        assert len(waits) == PODS, f"not bound: {sorted(set(created) - set(bound))}"
        assert not slow, f"bound later than {BIND_WITHIN}s after creation: {slow}"
        assert (lease1.holder_identity, lease1.lease_transitions) == (lease0.holder_identity,
                                                                      lease0.lease_transitions)
        assert max(rss) < RSS_LIMIT_MB, f"RSS peaked at {max(rss):.0f} MB"
        assert answered >= CLIENTS, stats  # the flood was answered, not refused at the door
    finally:
        if flood is not None and flood.poll() is None:
            flood.kill()
            flood.wait(5)
        op.stop()
        adm.delete_validating_webhook_configuration(CONFIG)
        try:
            policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "flood-default")
        except client.rest.ApiException:
            pass
