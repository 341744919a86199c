"""`simulate --context A --context B` and `clusters` against two live control planes of their own
(etcd and kube-apiserver each; plain Node objects, pods bound by nodeName, no scheduler), reached
through one kubeconfig with a context per cluster, as a platform engineer's kubeconfig holds them:

- small: 2 nodes of 4 CPUs, one 3-CPU pod bound; big: 4 nodes of 8 CPUs, two 2-CPU pods bound;
- the same 12 one-CPU pods ranked per policy: big first (places all 12), small second (5);
- the same ranking from snapshots of both clusters (`snapshot --context`, then `simulate
  --snapshot a --snapshot b`);
- `clusters` prints each context's free CPU and pod slots and the probe pods each policy places.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml
from kubernetes import client, config

import localcluster
from conftest import ROOT, STATE, install_crd
from helpers import merged_kubeconfig, node

SHAPES = {"small": (2, "4", [("s-0", "3")]), "big": (4, "8", [("b-0", "2"), ("b-1", "2")])}


def bound_pod(name: str, node_name: str, cpu: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "c", "image": "registry.local/app:1", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """Both control planes up, with their nodes, pods and the example policies; a merged kubeconfig."""
    up: dict[str, localcluster.LocalCluster] = {}
    try:
        for name, (count, cpu, pods) in SHAPES.items():
            state = STATE / f"{name}-cluster"
            c = localcluster.LocalCluster(state, kubeconfig_path=state / "kubeconfig")
            c.up(quiet=True)
            up[name] = c
            api = config.new_client_from_config(str(c.kubeconfig_path))
            install_crd(api, ROOT / "crds" / "schedulingpolicies.yaml")
            core = client.CoreV1Api(api)
            for i in range(count):
                core.create_node(node(f"{name[0]}-{i}", cpu=cpu, memory="32Gi",
                                      labels={"topology.kubernetes.io/zone": f"{name}-zone-{i % 2}"}))
            for pod_name, cpu_req in pods:
                core.create_namespaced_pod("default", bound_pod(f"filler-{pod_name}", pod_name, cpu_req))
            objs = client.CustomObjectsApi(api)
            for f in ("default.yaml", "binpack.yaml"):
                objs.create_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies",
                                                  yaml.safe_load((ROOT / "policies" / f).read_text()))
        d = tmp_path_factory.mktemp("across")
        (d / "kubeconfig").write_text(merged_kubeconfig(up))
        (d / "pods.yaml").write_text(yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i:02d}", "namespace": "default"},
             "spec": {"containers": [{"name": "c", "image": "registry.local/app:1",
                                      "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
            for i in range(12)]))
        yield d
    finally:
        for c in up.values():
            c.down(quiet=True)
            shutil.rmtree(c.state_dir, ignore_errors=True)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "policy_scheduler.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_simulate_across_contexts_ranks_the_clusters_and_matches_their_snapshots(two):
    kc = str(two / "kubeconfig")
    live = cli("simulate", "--kubeconfig", kc, "--context", "small", "--context", "big", "--pods",
               str(two / "pods.yaml"), "--policy", "default", "--policy", "binpack", "--json",
               "--report", str(two / "across.html"))
    assert live.returncode == 0, live.stderr
    d = json.loads(live.stdout)
    for policy in ("default", "binpack"):
        ranked = d["ranking"][policy]
        assert [(s["cluster"], s["placed"]) for s in ranked] == [("big", 12), ("small", 5)], ranked
        assert ranked[0]["fitsWhole"] and not ranked[1]["fitsWhole"]
    assert "across clusters" in (two / "across.html").read_text()
    snaps = []
    for ctx in ("small", "big"):
        out = two / f"{ctx}.json"
        r = cli("snapshot", "--kubeconfig", kc, "--context", ctx, "-o", str(out))
        assert r.returncode == 0, r.stderr
        snaps += ["--snapshot", str(out)]
    offline = cli("simulate", *snaps, "--pods", str(two / "pods.yaml"), "--policy", "default", "--policy", "binpack",
                  "--json")
    assert offline.returncode == 0, offline.stderr
    o = json.loads(offline.stdout)

    def outcome(doc, rename):
        return {p: [(rename(s["cluster"]), s["placed"], s["meanScore"]) for s in ranked]
                for p, ranked in doc["ranking"].items()}

    assert outcome(o, lambda f: f.rsplit("/", 1)[-1].removesuffix(".json")) == outcome(d, lambda c: c)
    text = cli("simulate", "--kubeconfig", kc, "--context", "small", "--context", "big", "--pods",
               str(two / "pods.yaml"))
    assert text.returncode == 0 and "12/12 (all)" in text.stdout and "5/12" in text.stdout, text.stdout
    print("\n" + text.stdout)


def test_clusters_prints_free_capacity_by_policy(two):
    r = cli("clusters", "--kubeconfig", str(two / "kubeconfig"), "--json", "--probe-pods", "40")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["contexts"]
    assert set(d) == {"small", "big"}  # every context of the kubeconfig by default
    assert d["small"]["free"]["cpu"] == "5" and d["big"]["free"]["cpu"] == "28"
    assert d["small"]["schedulableNodes"] == 2 and d["big"]["schedulableNodes"] == 4
    for ctx, fits in (("small", 5), ("big", 28)):
        assert {p: v["probePods"] for p, v in d[ctx]["policies"].items()} == {"default": fits, "binpack": fits}
    text = cli("clusters", "--kubeconfig", str(two / "kubeconfig"), "--context", "big")
    assert text.returncode == 0 and "big" in text.stdout and "small" not in text.stdout, text.stdout
    print("\n" + text.stdout)
