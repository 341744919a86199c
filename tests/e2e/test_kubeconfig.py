"""Client configuration as kubectl resolves it, against the real control plane: `run` and
`explain` with nothing but ~/.kube/config, and a kubeconfig whose user is an exec credential
plugin (a ServiceAccount's TokenRequest token, handed out by a small script)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from conftest import OperatorProcess
from helpers import GROUP, PLURAL, VERSION, apply_policy, pod, wait_bound

PLUGINS = [{"name": "NodeUnschedulable"}, {"name": "NodeAffinity", "weight": 1},
           {"name": "NodeResourcesFit", "weight": 1}]
POLICY_LABEL = "policy-scheduler.io/policy"


def explain(target: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "explain", target, *args],
                          capture_output=True, text=True, timeout=60, env=env)


def schedule_one(core, policies, namespace: str, nodes, op: OperatorProcess, tag: str) -> str:
    """A policy and a node of our own, one pod for ``op``'s scheduler name; returns its node."""
    apply_policy(policies, tag, PLUGINS, schedulerName=op.scheduler_name)
    nodes(f"{tag}-0", labels={"e2e": tag})
    core.create_namespaced_pod(namespace, pod("p", namespace, scheduler=op.scheduler_name,
                                              labels={POLICY_LABEL: tag}, nodeSelector={"e2e": tag}))
    return wait_bound(core, namespace, ["p"], 60)["p"]


@pytest.fixture
def policy_cleanup(policies):
    names: list[str] = []
    yield names
    for n in names:
        try:
            policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, n)
        except ApiException:
            pass


def test_run_and_explain_with_only_home_kube_config(cluster, core, crd, policies, nodes, namespace, tmp_path,
                                                    policy_cleanup):
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(cluster.kubeconfig_path.read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(home)
    tag = "kc-home"
    policy_cleanup.append(tag)
    op = OperatorProcess(cluster, "ps-kc-home", kubeconfig_flag=False, env={"HOME": str(home), "KUBECONFIG": ""})
    try:
        op.start()
        assert "--kubeconfig" not in op.proc.args
        placed = schedule_one(core, policies, namespace, nodes, op, tag)
        assert placed == f"{tag}-0"
        assert op.proc.poll() is None
    finally:
        op.stop()
    out = explain(f"{namespace}/p", env=env)
    assert out.returncode == 0, out.stderr
    assert f"pod {namespace}/p: scheduler ps-kc-home, node {tag}-0" in out.stdout
    assert f"policy:    {tag}" in out.stdout
    out = explain(f"{namespace}/p", "--context", "nope", env=env)
    assert out.returncode == 1
    assert out.stderr.strip() == (f"policy-scheduler explain: cannot load credentials: kubeconfig "
                                  f"{home / '.kube' / 'config'}: context 'nope' not found "
                                  "(contexts: policy-scheduler-local)")


@pytest.fixture
def service_account_token(api, core, namespace):
    """A ServiceAccount bound to cluster-admin for this test, and a TokenRequest token of it."""
    rbac = client.RbacAuthorizationV1Api(api)
    name = f"kc-exec-{namespace}"[:63]
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(
        name="kc-exec")))
    rbac.create_cluster_role_binding({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "kc-exec", "namespace": namespace}]})
    status = core.create_namespaced_service_account_token("kc-exec", namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status
    yield status.token, status.expiration_timestamp
    rbac.delete_cluster_role_binding(name)
    core.delete_namespaced_service_account("kc-exec", namespace)


def exec_kubeconfig(cluster, d: Path, token: str, expires) -> tuple[Path, Path]:
    """A kubeconfig whose user runs ``d/credential-plugin``; its current context points nowhere,
    context ``exec`` at the test cluster. Returns (kubeconfig, the plugin's call log)."""
    (d / "token").write_text(token)
    plugin = d / "credential-plugin"
    plugin.write_text(f"#!{sys.executable}\n" + """import json, pathlib, sys
here = pathlib.Path(__file__).parent
with open(here / "calls", "a") as f:
    f.write("called\\n")
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": (here / "token").read_text(), "expirationTimestamp": sys.argv[1]}}))
""")
    plugin.chmod(0o755)
    ca = (cluster.state_dir / "pki" / "ca.crt").read_text()
    (d / "ca.crt").write_text(ca)
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "broken",
        "clusters": [{"name": "local", "cluster": {"server": cluster.server, "certificate-authority": "ca.crt"}},
                     {"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9",
                                                     "insecure-skip-tls-verify": True}}],
        "users": [{"name": "sa", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "interactiveMode": "Never",
            "args": [expires.strftime("%Y-%m-%dT%H:%M:%SZ")]}}}],
        "contexts": [{"name": "broken", "context": {"cluster": "nowhere", "user": "sa"}},
                     {"name": "exec", "context": {"cluster": "local", "user": "sa"}}],
    }
    kc = d / "kubeconfig"
    kc.write_text(json.dumps(cfg, indent=2))
    return kc, d / "calls"


def test_exec_credential_plugin_user_schedules_and_binds(cluster, core, crd, policies, nodes, namespace, tmp_path,
                                                         service_account_token, policy_cleanup):
    token, expires = service_account_token
    kc, calls = exec_kubeconfig(cluster, tmp_path, token, expires)
    tag = "kc-exec"
    policy_cleanup.append(tag)
    op = OperatorProcess(cluster, "ps-kc-exec", kubeconfig=str(kc), extra=["--context", "exec"])
    try:
        op.start()  # the informers synced with the plugin's token
        placed = schedule_one(core, policies, namespace, nodes, op, tag)  # the policy came through the plugin's token
        assert placed == f"{tag}-0"
        assert op.proc.poll() is None
    finally:
        op.stop()
    assert len(calls.read_text().splitlines()) >= 2  # our client's credentials and kopf's login
    assert "cannot renew" not in op.log() and " 401" not in op.log()
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    out = explain(f"{namespace}/p", "--kubeconfig", str(kc), "--context", "exec", env=env)
    assert out.returncode == 0, out.stderr
    assert f"node {tag}-0" in out.stdout and f"policy:    {tag}" in out.stdout


def test_a_failing_exec_plugin_stops_run_with_one_line(cluster, tmp_path):
    plugin = tmp_path / "broken-plugin"
    plugin.write_text("#!/bin/sh\necho 'token expired, run: cloud auth login' >&2\nexit 1\n")
    plugin.chmod(0o755)
    kc = tmp_path / "kubeconfig"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": cluster.server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                                  "command": str(plugin), "interactiveMode": "Never"}}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    out = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "run", "--kubeconfig", str(kc),
                          "--metrics-port", "0", "--health-port", "0"],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    assert out.stderr == (f"policy-scheduler: cannot load credentials: kubeconfig {kc}, context c: exec plugin "
                          f"'{plugin}' failed: process returned 1. token expired, run: cloud auth login\n")
