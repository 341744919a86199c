"""Engine.on_pod: what the cache keeps of bound pods as their watch events come back."""

from fakeclient import FakeClient

from policy_scheduler.cluster.engine import Engine


def node(name):
    alloc = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "zone-0"}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name, node_name="", labels=None, spread=False):
    spec = {"schedulerName": "policy-scheduler", "nodeName": node_name,
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]}
    if spread:
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                              "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": {"matchLabels": {"app": "a"}},
                                              "matchLabelKeys": ["pod-template-hash"]}]
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {"app": "a"}},
            "spec": spec, "status": {"phase": "Pending"}}


def bound_engine(spread=False):
    e = Engine(FakeClient())
    e.on_node("ADDED", node("n1"))
    e.on_pod("ADDED", pod("p", spread=spread))
    e.table.add_pod(e.queue.pop().pod, "n1", assumed=True)
    return e


def test_binding_echo_with_unchanged_labels_confirms_the_assumption():
    e = bound_engine()
    before = e.table.pod("ns/p")
    e.on_pod("MODIFIED", pod("p", "n1"))
    assert "ns/p" not in e.table.assumed
    assert e.table.pod("ns/p") is before


def test_labels_added_at_binding_replace_the_cached_labels():
    e = bound_engine()
    labels = {"app": "a", "topology.kubernetes.io/zone": "zone-0"}
    e.on_pod("MODIFIED", pod("p", "n1", labels))
    got = e.table.pod("ns/p")
    assert "ns/p" not in e.table.assumed
    assert got.labels == labels and got.node_name == "n1" and got.raw is None
    assert got.requests == {"cpu": 100} and e.table.requested[e.table.index["n1"], 0] == 100


def test_labels_changed_on_a_pod_with_spread_constraints_are_parsed_again():
    e = bound_engine(spread=True)
    labels = {"app": "a", "pod-template-hash": "h1"}
    e.on_pod("MODIFIED", pod("p", "n1", labels, spread=True))
    got = e.table.pod("ns/p")
    assert got.labels == labels
    assert got.spread_constraints[0].selector.matches({"app": "a", "pod-template-hash": "h1"})
    assert not got.spread_constraints[0].selector.matches({"app": "a", "pod-template-hash": "h2"})


def test_what_preemption_reads_of_a_bound_pod_follows_its_updates():
    """The start time (the kubelet sets it after binding) and termination by preemption reach the
    cache: victims are ordered by start time, and a preemptor waits for terminating victims."""
    e = bound_engine()
    e.on_pod("MODIFIED", pod("p", "n1"))
    started = pod("p", "n1")
    started["status"]["startTime"] = "2026-01-01T00:00:00Z"
    e.on_pod("MODIFIED", started)
    assert e.table.pod("ns/p").start_time == "2026-01-01T00:00:00Z"
    dying = pod("p", "n1")
    dying["status"] = {"startTime": "2026-01-01T00:00:00Z", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    e.on_pod("MODIFIED", dying)
    got = e.table.pod("ns/p")
    assert got.terminating and got.terminating_by_preemption
    assert e.table.requested[e.table.index["n1"], 0] == 100  # still counted until it is gone
