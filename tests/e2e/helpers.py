"""Helpers shared by e2e tests: object builders and polling."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")
KWOK = {"kwok.x-k8s.io/node": "fake"}


def wait_for(fn: Callable[[], T], timeout: float = 30.0, interval: float = 0.2, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def node(name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110", labels: dict | None = None,
         taints: list | None = None, kwok: bool = False) -> dict:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                     "annotations": dict(KWOK) if kwok else {}},
        "spec": {"taints": taints or []},
        # kwok's node-initialize stage fills in conditions for the nodes it manages
        "status": {"capacity": alloc, "allocatable": alloc, **({} if kwok else {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "plain Node object"}]})},
    }


def pod(name: str, namespace: str, cpu: str | None = "100m", memory: str | None = "64Mi",
        scheduler: str = "policy-scheduler", labels: dict | None = None, **spec) -> dict:
    req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"schedulerName": scheduler,
                 "containers": [{"name": "c", "image": "registry.local/app:1", "resources": {"requests": req}}],
                 **spec},
    }
