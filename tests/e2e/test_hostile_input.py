"""Nothing in an object can stop scheduling, on the real API server: a SchedulingPolicy whose args
nest 1,100 levels deep (the API server stores up to 10,000; orjson reads 1,024, Python's json
less) is refused by the admission webhook with a message, unread; created while the operator is down it is
stored, and the operator starts, keeps running, schedules the other policies' pods and reports
the bad one Ready=False, reason Unreadable, with a Warning event; a working policy that receives
such an edit keeps scheduling with its last valid chain. A duplicate plugin name is refused by
the API server naming the entry (spec.plugins is a list-map keyed by name).

The Python client cannot write or read such objects (its json module stops at about 1,000
levels): they are created with kubectl and read back raw, through safejson."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from conftest import OperatorProcess
from helpers import (STEADY_ELECTION, GROUP, PLURAL, VERSION, apply_policy, events_for, pod, wait_bound, wait_for,
                     webhook_configs)
from policy_scheduler.safejson import loads

SCHED = "hostile-scheduler"
CONFIG = "hostile-e2e"
LABEL = "policy-scheduler.io/policy"
LEVELS = 1_100


def deep_policy(name: str, levels: int = LEVELS, **meta: str) -> str:
    """NodeAffinity's addedAffinity nested ``levels`` deep, as JSON text (no Python JSON encoder
    writes it)."""
    head = json.dumps({"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulingPolicy",
                       "metadata": {"name": name, **meta},
                       "spec": {"schedulerName": SCHED, "plugins": [
                           {"name": "NodeResourcesFit"}, {"name": "NodeAffinity", "args": {"addedAffinity": "@"}}]}})
    return head.replace('"@"', '{"a":' * levels + "1" + "}" * levels)


def kubectl(cluster, tmp_path, verb: str, manifest: str) -> subprocess.CompletedProcess:
    f = tmp_path / f"{time.monotonic_ns()}.json"
    f.write_text(manifest)
    exe = localcluster.bin_dir(build=False) / "kubectl"
    return subprocess.run([str(exe), verb, "-f", str(f)], capture_output=True, text=True, timeout=60,
                          env={"KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})


def read_raw(policies, name: str) -> dict:
    """The policy as the API server sends it, read by safejson (the client's own decoder would fail)."""
    resp = policies.get_cluster_custom_object(GROUP, VERSION, PLURAL, name, _preload_content=False)
    return loads(resp.data)


def ready(policies, name: str) -> dict | None:
    conds = (read_raw(policies, name).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), None)


def delete(policies, *names: str) -> None:
    for name in names:
        try:
            policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name, _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise


def test_a_policy_too_deep_to_parse_is_refused_by_the_webhook(api, core, cluster, crd, policies, namespace,
                                                              tmp_path):
    port = localcluster.free_port()
    args = ["--webhook-port", str(port), "--webhook-address", "127.0.0.1", "--webhook-host", "127.0.0.1",
            "--webhook-secret", f"{namespace}/webhook-tls", "--webhook-configuration", CONFIG,
            "--leader-elect=false"]
    adm = client.AdmissionregistrationV1Api(api)
    cfgs = webhook_configs(port, CONFIG)
    adm.create_validating_webhook_configuration(cfgs["ValidatingWebhookConfiguration"])
    op = OperatorProcess(cluster, SCHED, extra=args, log_name=f"{SCHED}-webhook")
    try:
        op.start()
        wait_for(lambda: "admission webhooks on https://" in op.log(), 30, what="the webhooks serving")
        ca = core.read_namespaced_secret("webhook-tls", namespace).data["ca.crt"]
        wait_for(lambda: adm.read_validating_webhook_configuration(CONFIG).webhooks[0].client_config.ca_bundle == ca,
                 10, what="the caBundle written")
        out = kubectl(cluster, tmp_path, "create", deep_policy("hostile-deep-adm"))
        print(f"\nkubectl create of a policy {LEVELS} levels deep: {out.stderr.strip()[:400]}")
        assert out.returncode != 0
        # deeper than the JSON readers go: denied unread, in linear time (no path: finding it
        # would take the pure-Python decoder, which the webhook never runs on what anyone posts)
        assert 'admission webhook "schedulingpolicies.policy-scheduler.io" denied the request: ' \
               'SchedulingPolicy "hostile-deep-adm" is invalid: nested deeper than any reader goes ' \
               '(a spec may nest 64 levels)' in out.stderr, out.stderr
        with pytest.raises(ApiException) as gone:
            policies.get_cluster_custom_object(GROUP, VERSION, PLURAL, "hostile-deep-adm")
        assert gone.value.status == 404
        assert op.proc.poll() is None
    finally:
        op.stop()
        adm.delete_validating_webhook_configuration(CONFIG)
        delete(policies, "hostile-deep-adm")


def test_created_while_the_operator_is_down_it_is_reported_and_everything_else_schedules(
        core, cluster, crd, policies, nodes, namespace, tmp_path):
    for i in range(4):
        nodes(f"hostile-{i}", cpu="16", memory="32Gi")
    good = [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesBalancedAllocation", "weight": 2}]
    apply_policy(policies, "hostile-good", good, schedulerName=SCHED)
    apply_policy(policies, "hostile-edited", good, schedulerName=SCHED)
    out = kubectl(cluster, tmp_path, "create", deep_policy("hostile-deep"))
    assert out.returncode == 0, out.stderr  # no webhook: the API server stores it
    big = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulingPolicy", "metadata": {"name": "hostile-big"},
           "spec": {"schedulerName": SCHED, "plugins": [{"name": "NodeResourcesFit", "args": {"x": "y" * 300_000}}]}}
    policies.create_cluster_custom_object(GROUP, VERSION, PLURAL, big)
    # two replicas with leader election: neither may crash on what it reads
    reps = [OperatorProcess(cluster, SCHED, log_name=f"{SCHED}-{i}", extra=STEADY_ELECTION) for i in range(2)]
    try:
        for r in reps:
            r.start(wait=False)
        for r in reps:
            r.wait_synced()  # synced: every policy listed, the deep one included
        wait_for(lambda: sum("successfully acquired lease" in r.log() for r in reps) == 1, 30, what="one leader")
        names = [f"burst-{i}" for i in range(50)]
        t0 = time.monotonic()
        for n in names:
            core.create_namespaced_pod(namespace, pod(n, namespace, scheduler=SCHED, labels={LABEL: "hostile-good"}))
        placed = wait_bound(core, namespace, names, 60)
        print(f"\n50 pods of hostile-good bound in {time.monotonic() - t0:.1f}s on {sorted(set(placed.values()))}, "
              f"a policy {LEVELS} levels deep stored beside it")

        cond = wait_for(lambda: ready(policies, "hostile-deep"), 30, what="the deep policy's status")
        assert (cond["status"], cond["reason"]) == ("False", "Unreadable"), cond
        assert cond["message"].startswith("spec.plugins[1].args.addedAffinity.a.a."), cond
        assert cond["message"].endswith(": nested deeper than 64 levels"), cond
        cond = wait_for(lambda: ready(policies, "hostile-big"), 30, what="the big policy's status")
        assert (cond["status"], cond["reason"]) == ("False", "Unreadable"), cond
        assert cond["message"] == "spec.plugins[0].args.x: Too long: a string of 300000 characters, at most 16384", cond
        ev = wait_for(lambda: events_for(core, "default", "hostile-deep", "Unreadable"), 20,
                      what="the Unreadable event")[0]
        assert ev.type == "Warning" and ev.involved_object.kind == "SchedulingPolicy"
        assert "nested deeper than 64 levels" in ev.message and "it is not used until it is fixed" in ev.message
        print(f"Ready=False Unreadable: {cond['message']}\nevent: {ev.message}")

        # a working policy edited into one that cannot be read keeps scheduling with its last valid chain
        rv = read_raw(policies, "hostile-edited")["metadata"]["resourceVersion"]
        out = kubectl(cluster, tmp_path, "replace", deep_policy("hostile-edited", resourceVersion=rv))
        assert out.returncode == 0, out.stderr
        cond = wait_for(lambda: (c := ready(policies, "hostile-edited")) and c["reason"] == "Unreadable" and c,
                        30, what="the edited policy's status")
        # the form of an invalid generation's message (policy_status.invalid_message): the revision's
        # number once the leader has recorded one, else the generation
        assert re.search(r"^generation 2 is invalid: .*; scheduling with (revision \d+ \(generation 1\)|generation 1)$",
                         cond["message"]), cond
        more = [f"after-edit-{i}" for i in range(10)]
        for n in more:
            core.create_namespaced_pod(namespace, pod(n, namespace, scheduler=SCHED, labels={LABEL: "hostile-edited"}))
        wait_bound(core, namespace, more, 60)

        for r in reps:  # the leader and the standby alike
            assert r.proc.poll() is None, r.log()[-3000:]
            log = r.log()
            assert "Traceback" not in log and "handler failed" not in log, log[-3000:]
    finally:
        for r in reps:
            r.stop()
        delete(policies, "hostile-good", "hostile-edited", "hostile-deep", "hostile-big")


def test_a_duplicate_plugin_name_is_refused_naming_the_entry(crd, policies):
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulingPolicy", "metadata": {"name": "hostile-dup"},
            "spec": {"plugins": [{"name": "NodeResourcesFit"}, {"name": "NodeName"},
                                 {"name": "NodeResourcesFit", "weight": 2}]}}
    with pytest.raises(ApiException) as refused:
        policies.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    e = refused.value
    status = json.loads(e.body)
    print(f"\nduplicate plugin name: HTTP {e.status}: {status['message']}")
    assert e.status == 422
    assert status["details"]["causes"] == [{
        "reason": "FieldValueDuplicate", "field": "spec.plugins[2]",
        "message": 'Duplicate value: {"name":"NodeResourcesFit"}'}]
