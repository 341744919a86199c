"""framework/events.py pod_change_events: upstream PodSchedulingPropertiesChange's scale events,
read from the requests a node counts (in-place resize's status resources included)."""

from __future__ import annotations

import pytest

from policy_scheduler.framework.events import pod_change_events
from policy_scheduler.framework.model.podinfo import parse_pod


def bound(requests, status=None, labels=None):
    return parse_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": labels or {}},
                      "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"requests": requests}}]},
                      "status": status or {}})


def held(cpu):
    return {"containerStatuses": [{"name": "c", "allocatedResources": {"cpu": cpu}, "resources": {"requests": {"cpu": cpu}}}]}


@pytest.mark.parametrize("old, new, want", [
    (bound({"cpu": "2"}), bound({"cpu": "1"}), ["AssignedPodUpdatePodScaleDown"]),
    (bound({"cpu": "1"}), bound({"cpu": "2"}), ["AssignedPodUpdatePodScaleUp"]),
    # a resource removed, even one named at 0: scaled down (upstream: missing from the new requests)
    (bound({"cpu": "1", "example.com/x": "0"}), bound({"cpu": "1"}), ["AssignedPodUpdatePodScaleDown"]),
    (bound({"cpu": "1"}), bound({"cpu": "1", "example.com/x": "0"}), ["AssignedPodUpdatePodScaleUp"]),
    # one up, another down: both
    (bound({"cpu": "1", "memory": "1Gi"}), bound({"cpu": "2", "memory": "512Mi"}),
     ["AssignedPodUpdatePodScaleDown", "AssignedPodUpdatePodScaleUp"]),
    # the spec lowered while the kubelet holds 2: nothing a node counts changed
    (bound({"cpu": "2"}, held("2")), bound({"cpu": "1"}, held("2")), ["AssignedPodUpdate"]),
    # the kubelet actuates it
    (bound({"cpu": "1"}, held("2")), bound({"cpu": "1"}, held("1")), ["AssignedPodUpdatePodScaleDown"]),
    # labels and a scale-down together
    (bound({"cpu": "1"}, held("2")), bound({"cpu": "1"}, held("1"), labels={"a": "b"}),
     ["AssignedPodUpdatePodLabel", "AssignedPodUpdatePodScaleDown"]),
])
def test_scale_events_follow_what_the_node_counts(old, new, want):
    assert [ev.label for ev in pod_change_events(old, new, target=False)] == want
