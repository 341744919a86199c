"""In-place pod resize in the operator, on the real API server: a node full but for a pod being
resized down holds the pod's old requests until the kubelet reports the resize done (the
status's allocatedResources and resources.requests), and a pod waiting for that room is bound
as soon as that status update arrives (the AssignedPod UpdatePodScaleDown event and
NodeResourcesFit's hint), not at the periodic flush of unschedulable pods.

The node is a plain Node object (no kwok), so no simulated kubelet writes the pods' status: the
test writes it through the status subresource, as the kubelet would."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from helpers import GROUP, PLURAL, VERSION, apply_policy, events_for, pod, wait_bound, wait_for

ROOT = Path(__file__).resolve().parents[2]
LABEL = "policy-scheduler.io/policy"
POLICY = "t-resize"


@pytest.fixture
def resize_policy(policies, operator):
    spec = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())["spec"]
    apply_policy(policies, POLICY, spec["plugins"])
    yield POLICY
    policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, POLICY)


def kubelet_status(cpu: str, memory: str) -> dict:
    """The status a kubelet reports for a running one-container pod holding ``cpu``/``memory``."""
    res = {"cpu": cpu, "memory": memory}
    return {"status": {
        "phase": "Running", "startTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{
            "name": "c", "image": "registry.local/app:1", "imageID": "", "ready": True, "restartCount": 0,
            "started": True, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            "allocatedResources": res, "resources": {"requests": res}}]}}


def resize(core, namespace: str, name: str, cpu: str, memory: str) -> None:
    """PATCH pods/<name>/resize: the spec's new requests (what `kubectl patch --subresource
    resize` sends)."""
    body = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}
    core.patch_namespaced_pod_resize(name, namespace, body)


def test_a_pod_waiting_for_a_scale_down_is_bound_when_the_kubelet_reports_it(
        core, namespace, nodes, resize_policy):
    node = nodes("resize-0", cpu="4", memory="8Gi")
    big = pod("big", namespace, cpu="3", memory="1Gi", labels={LABEL: POLICY}, nodeName=node)
    core.create_namespaced_pod(namespace, big)
    core.patch_namespaced_pod_status("big", namespace, kubelet_status("3", "1Gi"))

    core.create_namespaced_pod(namespace, pod("waiting", namespace, cpu="2", memory="1Gi", labels={LABEL: POLICY}))
    ev = wait_for(lambda: events_for(core, namespace, "waiting", "FailedScheduling"), 30,
                  what="the waiting pod rejected")
    assert "Insufficient cpu" in ev[0].message

    # the resize asked (spec 1 cpu) but not done: the node still holds 3 cpu
    resize(core, namespace, "big", "1", "1Gi")
    assert core.read_namespaced_pod("big", namespace).spec.containers[0].resources.requests["cpu"] == "1"
    time.sleep(2.5)  # past the waiting pod's backoff, and the resize event has been seen
    assert core.read_namespaced_pod("waiting", namespace).spec.node_name is None

    # allocated but not yet actuated: still 3 (max of the two)
    st = kubelet_status("1", "1Gi")
    st["status"]["containerStatuses"][0]["resources"] = {"requests": {"cpu": "3", "memory": "1Gi"}}
    core.patch_namespaced_pod_status("big", namespace, st)
    time.sleep(1.0)
    assert core.read_namespaced_pod("waiting", namespace).spec.node_name is None

    # the kubelet reports the resize done: 2 cpu free
    core.patch_namespaced_pod_status("big", namespace, kubelet_status("1", "1Gi"))
    t0 = time.monotonic()
    bound = wait_for(lambda: core.read_namespaced_pod("waiting", namespace).spec.node_name, 10, interval=0.05,
                     what="the waiting pod bound")
    took = time.monotonic() - t0
    print(f"\nresize: the waiting pod bound {took:.2f}s after the kubelet's status update")
    assert bound == node
    assert took < 2.0, f"bound {took:.2f}s after the status update"
    wait_bound(core, namespace, ["waiting"], 5)
