"""Refuse bad input at the door: the operator's admission webhooks, called by the real API server
over TLS with the operator's own certificate. manifests/08-webhooks.yaml's configurations are
installed under another name and call the operator by URL (no Service network here)."""

from __future__ import annotations

import subprocess
import time

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from conftest import OperatorProcess
from helpers import GROUP, PLURAL, VERSION, apply_policy, pod, ready_condition, wait_bound, wait_for, webhook_configs

SCHED = "admission-scheduler"
CONFIG = "admission-e2e"
LABEL = "policy-scheduler.io/policy"


@pytest.fixture
def webhooks(api, core, cluster, crd, policies, nodes, namespace, tmp_path):
    """The operator with its webhooks on, its two policies, and the configurations calling it."""
    port = localcluster.free_port()
    args = ["--webhook-port", str(port), "--webhook-address", "127.0.0.1", "--webhook-host", "127.0.0.1",
            "--webhook-secret", f"{namespace}/webhook-tls", "--webhook-configuration", CONFIG,
            "--default-policy", "adm-default", "--leader-elect=false"]
    apply_policy(policies, "adm-default", [{"name": "NodeResourcesFit"}], schedulerName=SCHED)
    apply_policy(policies, "adm-batch", [{"name": "NodeResourcesFit"}], schedulerName=SCHED,
                 namespaceSelector={"matchLabels": {"team": "batch"}})
    nodes("adm-0", cpu="8")
    adm = client.AdmissionregistrationV1Api(api)
    cfgs = webhook_configs(port, CONFIG)
    adm.create_validating_webhook_configuration(cfgs["ValidatingWebhookConfiguration"])
    adm.create_mutating_webhook_configuration(cfgs["MutatingWebhookConfiguration"])
    op = OperatorProcess(cluster, SCHED, extra=args)
    try:
        yield op, adm
    finally:
        op.stop()
        adm.delete_validating_webhook_configuration(CONFIG)
        adm.delete_mutating_webhook_configuration(CONFIG)
        for name in ("adm-default", "adm-batch", "adm-bad", "adm-bad-while-down"):
            try:
                policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            except ApiException:
                pass


def serving(op: OperatorProcess) -> bool:
    return "admission webhooks on https://" in op.log()


def bad_policy(name: str) -> dict:
    """Valid for the CRD's schema, invalid for the chain builder: only the webhook can refuse it."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulingPolicy", "metadata": {"name": name},
            "spec": {"schedulerName": SCHED, "plugins": [
                {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Bogus"}}}]}}


def test_webhooks_refuse_default_and_stay_out_of_the_way_when_down(core, cluster, policies, namespace, webhooks,
                                                                   tmp_path):
    op, adm = webhooks
    op.start()
    wait_for(lambda: serving(op), 30, what="the webhooks serving")
    ca = core.read_namespaced_secret("webhook-tls", namespace).data["ca.crt"]
    wait_for(lambda: adm.read_mutating_webhook_configuration(CONFIG).webhooks[0].client_config.ca_bundle == ca,
             10, what="the caBundle written")
    assert adm.read_validating_webhook_configuration(CONFIG).webhooks[1].client_config.ca_bundle == ca

    # kubectl apply of an invalid policy fails with the field path
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(bad_policy("adm-bad")))
    kubectl = localcluster.bin_dir(build=False) / "kubectl"
    out = subprocess.run([str(kubectl), "apply", "-f", str(f)], capture_output=True, text=True, timeout=60,
                         env={"KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode != 0
    assert 'admission webhook "schedulingpolicies.policy-scheduler.io" denied the request' in out.stderr, out.stderr
    assert 'SchedulingPolicy "adm-bad" is invalid: spec.plugins[0].args.scoringStrategy.type' in out.stderr, out.stderr
    print(f"\nkubectl apply: {out.stderr.strip()}")

    # a pod of an opted-in namespace gets the scheduler and the policy, and binds
    core.patch_namespace(namespace, {"metadata": {"labels": {"policy-scheduler.io/inject": "enabled"}}})
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
             "spec": {"containers": [{"name": "c", "image": "registry.local/app:1",
                                      "resources": {"requests": {"cpu": "100m"}}}]}}
    got = core.create_namespaced_pod(namespace, plain)
    assert got.spec.scheduler_name == SCHED and got.metadata.labels == {LABEL: "adm-default"}
    assert wait_bound(core, namespace, ["plain"], 30)["plain"] == "adm-0"

    # tenancy: a policy whose namespaceSelector does not admit this namespace is refused at creation
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod("tenant", namespace, scheduler=SCHED, labels={LABEL: "adm-batch"}))
    assert refused.value.status == 403
    assert (f'SchedulingPolicy \\"adm-batch\\" does not admit pods of namespace \\"{namespace}\\"'
            in refused.value.body), refused.value.body
    # the namespace's own default policy, once it is labelled team=batch and names it
    core.patch_namespace(namespace, {"metadata": {"labels": {"team": "batch",
                                                             "policy-scheduler.io/default-policy": "adm-batch"}}})
    time.sleep(1)  # the operator's namespace watch
    got = core.create_namespaced_pod(namespace, {**plain, "metadata": {"name": "batch-job"}})
    assert got.metadata.labels == {LABEL: "adm-batch"}
    wait_bound(core, namespace, ["batch-job"], 30)

    # the operator down: pods are still created (not defaulted), and a bad policy is accepted...
    op.stop()
    t0 = time.monotonic()
    got = core.create_namespaced_pod(namespace, {**plain, "metadata": {"name": "while-down"}})
    took = time.monotonic() - t0
    assert got.spec.scheduler_name == "default-scheduler" and not got.metadata.labels
    policies.create_cluster_custom_object(GROUP, VERSION, PLURAL, bad_policy("adm-bad-while-down"))
    print(f"operator down: a pod created in {took * 1000:.0f} ms, an invalid policy accepted")
    assert took < 5
    # ...and ends Ready=False, naming the field, once the operator is back
    op.start()
    cond = wait_for(lambda: ready_condition(policies, "adm-bad-while-down"), 30, what="the bad policy's status")
    assert cond["status"] == "False" and "spec.plugins[0].args.scoringStrategy.type" in cond["message"]
    assert op.proc.poll() is None
