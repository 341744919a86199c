"""The ground every e2e test stands on is a real control plane: prove it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from helpers import node, pod, wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_nodes_with_status_and_a_pod_binding(cluster, core, namespace):
    core.create_node(node("cp-node-a", cpu="2", memory="4Gi", labels={"zone": "a"}))
    n = core.read_node("cp-node-a")
    assert n.status.allocatable["cpu"] == "2"
    assert [c.type for c in n.status.conditions] == ["Ready"]
    assert not n.spec.taints, "TaintNodesByCondition must be off: no not-ready taint on new nodes"

    core.create_namespaced_pod(namespace, pod("bind-me", namespace))
    body = client.V1Binding(metadata=client.V1ObjectMeta(name="bind-me"),
                            target=client.V1ObjectReference(kind="Node", name="cp-node-a"))
    # _preload_content=False: the generated client cannot deserialize the Status a binding returns
    core.create_namespaced_pod_binding("bind-me", namespace, body, _preload_content=False)
    assert core.read_namespaced_pod("bind-me", namespace).spec.node_name == "cp-node-a"

    with pytest.raises(ApiException) as e:  # a second binding is refused by the API server
        core.create_namespaced_pod_binding("bind-me", namespace, body, _preload_content=False)
    assert e.value.status == 409
    core.delete_node("cp-node-a")


def test_crd_from_crds_dir_becomes_established(api, crd):
    """The `crd` fixture applies crds/schedulingpolicies.yaml and waits for Established."""
    ext = client.ApiextensionsV1Api(api)
    got = ext.read_custom_resource_definition(crd["metadata"]["name"])
    assert any(c.type == "Established" and c.status == "True" for c in got.status.conditions)
    objs = client.CustomObjectsApi(api)
    objs.create_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies", {
        "apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy",
        "metadata": {"name": "cp-check"}, "spec": {"plugins": [{"name": "NodeResourcesFit", "weight": 1}]}})
    got = objs.get_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies", "cp-check")
    assert got["spec"]["plugins"][0]["name"] == "NodeResourcesFit"
    with pytest.raises(ApiException) as e:  # the structural schema rejects unknown fields
        objs.create_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies", {
            "apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": "cp-bad"}, "spec": {"plugins": [{"nmae": "X"}]}},
            field_validation="Strict")
    assert e.value.status in (400, 422)
    objs.delete_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies", "cp-check")


def test_kubectl_against_the_kubeconfig(cluster):
    kubectl = localcluster.bin_dir(build=False) / "kubectl"
    env = {"KUBECONFIG": str(cluster.kubeconfig_path), "PATH": "/usr/bin:/bin", "HOME": str(cluster.state_dir)}
    out = subprocess.run([str(kubectl), "get", "--raw", "/readyz"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    ver = subprocess.run([str(kubectl), "version", "-o", "json"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert '"gitVersion": "v1.37.1"' in ver.stdout, ver.stdout  # the pinned server answered


def test_kwok_runs_a_bound_pod_on_a_simulated_node(cluster, core, namespace):
    core.create_node(node("cp-kwok-0", kwok=True))
    def ready():
        n = core.read_node("cp-kwok-0")
        return any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []) and \
            n.status.node_info.kubelet_version.startswith("kwok")

    wait_for(ready, 30, what="kwok to initialize the node")
    assert core.read_node("cp-kwok-0").status.allocatable["cpu"] == "4"  # kwok keeps the capacity we set
    core.create_namespaced_pod(namespace, pod("runs", namespace))
    core.create_namespaced_pod_binding("runs", namespace, client.V1Binding(
        metadata=client.V1ObjectMeta(name="runs"), target=client.V1ObjectReference(kind="Node", name="cp-kwok-0")),
        _preload_content=False)
    p = wait_for(lambda: (lambda p: p if p.status.phase == "Running" else None)(
        core.read_namespaced_pod("runs", namespace)), 30, what="pod Running")
    assert p.status.pod_ip
    core.delete_namespaced_pod("runs", namespace, grace_period_seconds=0)
    core.delete_node("cp-kwok-0")


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "hack" / "localcluster.py"), *args, "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=180)


def _live(state: Path) -> list[int]:
    import json
    try:
        procs = json.loads((state / "state.json").read_text())["procs"]
    except (OSError, KeyError, ValueError):
        return []
    return [p["pid"] for p in procs.values() if localcluster.pid_alive(p["pid"])]


def test_cluster_cli_up_twice_down_twice(tmp_path):
    state = tmp_path / "cluster"
    up = _cli(state, "up")
    assert up.returncode == 0, up.stderr
    import json
    st = json.loads((state / "state.json").read_text())
    pids = [p["pid"] for p in st["procs"].values()]
    assert all(localcluster.pid_alive(p) for p in pids)
    again = _cli(state, "up")
    assert again.returncode == 0 and "already up" in again.stderr
    status = _cli(state, "status")
    assert status.stdout.startswith("up: https://127.0.0.1:")
    down = _cli(state, "down")
    assert down.returncode == 0 and "stopped" in down.stderr
    assert not any(localcluster.pid_alive(p) for p in pids), "a component outlived cluster-down"
    assert not localcluster.port_in_use(st["apiserver_port"]) and not localcluster.port_in_use(st["etcd_port"])
    again = _cli(state, "down")
    assert again.returncode == 0 and "no local cluster is running" in again.stderr


def test_failed_start_names_the_component_and_cleans_up(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = _cli(tmp_path / "c1", "up", "--port", str(port))
    assert res.returncode == 1
    assert f"port {port}" in res.stderr and "already in use" in res.stderr
    assert not _live(tmp_path / "c1")

    # etcd dies at start (a data dir it cannot use): the error names etcd and shows its log
    c = localcluster.LocalCluster(tmp_path / "c2")
    c.bins = localcluster.bin_dir(build=False)
    real = c._spawn

    def broken_spawn(name, args, env=None):
        if name == "etcd":
            args = args + ["--snapshot-count=not-a-number"]
        return real(name, args, env)

    c._spawn = broken_spawn
    with pytest.raises(localcluster.ClusterError) as e:
        c.up()
    assert "etcd exited" in str(e.value) and "Last lines of" in str(e.value)
    assert not _live(tmp_path / "c2")


def test_missing_binary_is_reported(tmp_path):
    c = localcluster.LocalCluster(tmp_path / "c3")
    c.bins = tmp_path / "no-bins"
    with pytest.raises(localcluster.ClusterError) as e:
        c.up()
    assert "kube-apiserver" in str(e.value) or "etcd" in str(e.value)
    assert "missing" in str(e.value)
