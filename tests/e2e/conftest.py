"""Session fixtures for end-to-end tests: one real local control plane for the whole session."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kubernetes import client, config

import localcluster

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".local" / "test-cluster"


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def cluster():
    """etcd + kube-apiserver + kwok, built from pinned sources by hack/ (built here if missing)."""
    c = localcluster.LocalCluster(STATE, kubeconfig_path=STATE / "kubeconfig")
    if c.state.get("procs"):
        c.down(quiet=True)  # a previous run that was killed
    t0 = time.monotonic()
    c.up(kwok=True, quiet=True)
    print(f"\nlocal control plane up in {time.monotonic() - t0:.1f}s at {c.server}")
    yield c
    c.down(quiet=True)


@pytest.fixture(scope="session")
def api(cluster) -> client.ApiClient:
    return config.new_client_from_config(str(cluster.kubeconfig_path))


@pytest.fixture(scope="session")
def core(api) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def namespace(core, request):
    """A fresh namespace per test (pods in it are removed with grace period 0 at the end)."""
    name = "t-" + request.node.name.lower().replace("_", "-")[:40].strip("-") + f"-{os.getpid() % 1000}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
