"""framework/model/podrequests.py: a pod's requests as upstream component-helpers PodRequests
(v0.37.1) computes them with the scheduler's options: in-place resize's status resources for pods
on nodes (allocatedResources, resources.requests, PodResizePending Deferred/Infeasible), pod-level
resources and their status, sidecars, init containers, overhead and the non-zero defaults.

Expected values are worked out by hand from upstream's rules (each case says which)."""

from __future__ import annotations

import pytest

from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.model.podrequests import compute_requests, pod_requests_of, resize_status

MI = 2**20
DEF_MEM = 200 * MI


def ctr(name, requests=None, *, sidecar=False):
    d = {"name": name, "image": "i"}
    if requests is not None:
        d["resources"] = {"requests": requests}
    if sidecar:
        d["restartPolicy"] = "Always"
    return d


def cstatus(name, allocated=None, actuated=None):
    d = {"name": name, "ready": True}
    if allocated is not None:
        d["allocatedResources"] = allocated
    if actuated is not None:
        d["resources"] = {"requests": actuated}
    return d


def resize(reason):
    return {"type": "PodResizePending", "status": "True", "reason": reason}


def bound(spec, status=None):
    return parse_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                      "spec": {"nodeName": "n", **spec}, "status": status or {}})


# ---------------------------------------------------------------- in-place resize (containers)

@pytest.mark.parametrize("spec_cpu, statuses, conditions, want_cpu", [
    # no status resources: the spec
    ("1", [cstatus("c")], [], 1000),
    # a scale-down the kubelet has not actuated yet: the node still holds the old 2 cpu
    ("1", [cstatus("c", {"cpu": "2"}, {"cpu": "2"})], [], 2000),
    # allocated (1) but still actuated at 2: the larger
    ("1", [cstatus("c", {"cpu": "1"}, {"cpu": "2"})], [], 2000),
    # done: allocated and actuated at the new 1 cpu
    ("1", [cstatus("c", {"cpu": "1"}, {"cpu": "1"})], [], 1000),
    # a scale-up waiting (Deferred): the spec's 3 counts already
    ("3", [cstatus("c", {"cpu": "2"}, {"cpu": "2"})], [resize("Deferred")], 3000),
    # a scale-up that cannot happen (Infeasible): the spec is left out
    ("3", [cstatus("c", {"cpu": "2"}, {"cpu": "2"})], [resize("Infeasible")], 2000),
    # actuated absent: allocated stands in for it
    ("1", [cstatus("c", {"cpu": "1500m"})], [], 1500),
    # actuated alone (no allocatedResources): allocated falls back to the spec
    ("1", [cstatus("c", None, {"cpu": "250m"})], [], 1000),
    ("1", [cstatus("c", None, {"cpu": "4"})], [], 4000),
    # a status of another name does not count for this container
    ("1", [cstatus("other", {"cpu": "8"})], [], 1000),
])
def test_one_container_counts_the_largest_of_spec_allocated_and_actuated(spec_cpu, statuses, conditions, want_cpu):
    p = bound({"containers": [ctr("c", {"cpu": spec_cpu})]},
              {"containerStatuses": statuses, "conditions": conditions})
    assert p.requests == {"cpu": want_cpu}
    assert p.spec_requests == {"cpu": int(float(spec_cpu) * 1000)}  # Fit's filter reads the spec only
    assert p.nonzero_cpu == want_cpu and p.nonzero_memory == DEF_MEM


def test_infeasible_leaves_out_a_container_without_status_resources():
    """containerAllocatedRequests/ActuatedRequests: nil for a container with no status resources
    when the resize is Infeasible; the spec is not counted for anyone."""
    p = bound({"containers": [ctr("a", {"cpu": "1", "memory": "1Gi"}), ctr("b", {"cpu": "2"})]},
              {"containerStatuses": [cstatus("a", {"cpu": "500m", "memory": "1Gi"})],
               "conditions": [{"type": "Ready", "status": "True"}, resize("Infeasible")]})
    assert p.requests == {"cpu": 500, "memory": 1024 * MI}
    # the non-zero pass gives container b its defaults (applyNonMissing on a nil list)
    assert (p.nonzero_cpu, p.nonzero_memory) == (600, 1024 * MI + DEF_MEM)


def test_only_the_first_resize_pending_condition_decides():
    st = {"containerStatuses": [cstatus("c", {"cpu": "1"}, {"cpu": "1"})],
          "conditions": [resize("Deferred"), resize("Infeasible")]}
    assert bound({"containers": [ctr("c", {"cpu": "2"})]}, st).requests == {"cpu": 2000}


def test_sidecars_and_init_containers_use_their_statuses():
    """Init-phase usage = the sidecars before it + the init container; the total is at least the
    largest; a sidecar's status (initContainerStatuses) counts as a container's does."""
    spec = {"initContainers": [ctr("side", {"cpu": "500m"}, sidecar=True), ctr("init", {"cpu": "2"})],
            "containers": [ctr("main", {"cpu": "1"})]}
    assert bound(spec).requests == {"cpu": 2500}  # max(1 + 0.5, 0.5 + 2)
    st = {"initContainerStatuses": [cstatus("side", {"cpu": "1500m"}, {"cpu": "1500m"})],
          "containerStatuses": [cstatus("main", {"cpu": "1"}, {"cpu": "1"})]}
    p = bound(spec, st)
    # allocated/actuated: sidecar 1.5 + main 1 = 2.5; init phase 1.5 + 2 = 3.5 -> 3.5
    assert p.requests == {"cpu": 3500} and p.spec_requests == {"cpu": 2500}


def test_pod_level_status_replaces_the_container_statuses():
    """With status.allocatedResources and status.resources.requests both set, they are the
    allocated and actuated totals (container statuses not read)."""
    spec = {"containers": [ctr("c", {"cpu": "1", "memory": "1Gi"})]}
    st = {"allocatedResources": {"cpu": "3"}, "resources": {"requests": {"cpu": "2", "memory": "512Mi"}},
          "containerStatuses": [cstatus("c", {"cpu": "9"}, {"cpu": "9"})]}
    assert bound(spec, st).requests == {"cpu": 3000, "memory": 1024 * MI}
    st.pop("allocatedResources")  # one of them missing: the containers' statuses
    assert bound(spec, st).requests == {"cpu": 9000, "memory": 1024 * MI}


# ---------------------------------------------------------------- pod-level resources

def test_pod_level_requests_replace_cpu_memory_and_hugepages_only():
    spec = {"containers": [ctr("a", {"cpu": "1", "ephemeral-storage": "1Gi"}), ctr("b", {"memory": "1Gi"})],
            "resources": {"requests": {"cpu": "3", "ephemeral-storage": "9Gi"}}, "overhead": {"cpu": "100m"}}
    p = bound(spec)
    assert p.requests == {"cpu": 3100, "ephemeral-storage": 1024 * MI, "memory": 1024 * MI}
    assert compute_requests(spec) == p.requests


def test_pod_level_status_resize():
    """effectivePodLevelResources: max(spec, status requests, allocated); spec out when Infeasible."""
    spec = {"containers": [ctr("c")], "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    st = {"resources": {"requests": {"cpu": "2"}}, "allocatedResources": {"memory": "512Mi"}}
    assert bound(spec, st).requests == {"cpu": 2000, "memory": 1024 * MI}
    st["conditions"] = [resize("Infeasible")]
    assert bound(spec, st).requests == {"cpu": 2000, "memory": 512 * MI}
    # without status.resources the pod level's status is not read
    assert bound(spec, {"allocatedResources": {"cpu": "4"}}).requests["cpu"] == 1000


def test_nonzero_with_pod_level_requests_defaults_only_what_nobody_names():
    """getNonMissingContainerRequests: pod-level requests set -> the default only for cpu/memory
    that the total does not name. NodeResourcesFit's score request: its scorer is built without
    the feature flags (NewFit), so the pod level is not read and every container that names no
    cpu or memory gets the default."""
    spec = {"containers": [ctr("a", {"cpu": "200m"}), ctr("b")], "resources": {"requests": {"memory": "1Gi"}}}
    p = bound(spec)
    assert p.requests == {"cpu": 200, "memory": 1024 * MI}
    assert (p.nonzero_cpu, p.nonzero_memory) == (200, 1024 * MI)  # cpu named: no default
    assert (p.score_cpu, p.score_memory) == (300, 2 * DEF_MEM)  # the containers with their defaults
    spec = {"containers": [ctr("a"), ctr("b")], "initContainers": [ctr("i")],
            "resources": {"requests": {"cpu": "1"}}}
    p = bound(spec)
    assert p.requests == {"cpu": 1000}
    assert (p.nonzero_cpu, p.nonzero_memory) == (1000, 2 * DEF_MEM)  # memory: per container, init max
    assert (p.score_cpu, p.score_memory) == (200, 2 * DEF_MEM)


def test_fit_score_reads_neither_status_nor_pod_level():
    spec = {"containers": [ctr("c", {"cpu": "1", "ephemeral-storage": "1Gi"})],
            "resources": {"requests": {"cpu": "2", "hugepages-2Mi": "4Mi"}}}
    st = {"containerStatuses": [cstatus("c", {"cpu": "3", "ephemeral-storage": "2Gi"})]}
    p = bound(spec, st)
    assert p.requests == {"cpu": 2000, "ephemeral-storage": 2048 * MI, "hugepages-2Mi": 4 * MI}
    assert p.score_requests == {"cpu": 1000, "memory": DEF_MEM, "ephemeral-storage": 1024 * MI}
    assert (p.score_cpu, p.score_memory) == (1000, DEF_MEM)
    plain = bound({"containers": [ctr("c", {"cpu": "1"})]})
    assert plain.fit_score is None and plain.score_requests is plain.requests


def test_without_pod_level_requests_every_container_gets_the_defaults():
    p = bound({"containers": [ctr("a", {"cpu": "0"}), ctr("b", {"memory": "1Gi"})]})
    assert p.requests == {"cpu": 0, "memory": 1024 * MI}
    # a: cpu named (0) kept, memory defaulted; b: cpu defaulted
    assert (p.nonzero_cpu, p.nonzero_memory) == (100, DEF_MEM + 1024 * MI)
    assert (p.score_cpu, p.score_memory) == (p.nonzero_cpu, p.nonzero_memory)


def test_pod_level_limits_only_are_not_requests():
    spec = {"containers": [ctr("a", {"cpu": "1"})], "resources": {"limits": {"cpu": "2"}}}
    assert bound(spec).requests == {"cpu": 1000}
    spec = {"containers": [ctr("a", {"cpu": "1"})], "resources": {"requests": {"example.com/x": "2"}}}
    assert bound(spec).requests == {"cpu": 1000}  # no supported pod-level resource: not set


# ---------------------------------------------------------------- hostile input

@pytest.mark.parametrize("status, field", [
    ({"containerStatuses": [cstatus("c", {"cpu": "lots"})]}, "status.containerStatuses[0].allocatedResources.cpu"),
    ({"initContainerStatuses": [cstatus("c", None, {"memory": "1Kb"})]},
     "status.initContainerStatuses[0].resources.requests.memory"),
    ({"allocatedResources": {"cpu": []}}, "status.allocatedResources.cpu"),
    ({"resources": {"requests": "x"}}, "status.resources.requests"),
])
def test_a_malformed_status_quantity_is_named(status, field):
    p = bound({"containers": [ctr("c", {"cpu": "1"})]}, status)
    assert p.parse_error is not None and field in p.parse_error


def test_status_shapes_that_are_not_lists_or_objects_are_ignored():
    for st in ({"containerStatuses": "x"}, {"containerStatuses": [None, 3, "x"]}, {"conditions": "x"},
               {"conditions": [None, 1]}, {"resources": None}):
        p = bound({"containers": [ctr("c", {"cpu": "1"})]}, st)
        assert p.parse_error is None and p.requests == {"cpu": 1000}, st


def test_resize_status_keeps_what_the_requests_read():
    st = {"phase": "Running", "containerStatuses": [
        {"name": "c", "image": "i", "imageID": "x", "allocatedResources": {"cpu": "1"},
         "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "3"}}}, {"name": "d", "ready": True}],
        "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}, "allocatedResources": {"cpu": "1"}}
    kept = resize_status(st)
    assert kept == {"containerStatuses": [{"name": "c", "allocatedResources": {"cpu": "1"},
                                           "resources": {"requests": {"cpu": "2"}}}],
                    "resources": {"requests": {"cpu": "2"}}, "allocatedResources": {"cpu": "1"}}
    spec = {"containers": [ctr("c", {"cpu": "500m"})], "resources": {"requests": {"cpu": "1"}}}
    assert pod_requests_of(spec, kept) == pod_requests_of(spec, st)
