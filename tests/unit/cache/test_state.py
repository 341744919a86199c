"""cache/state.py: ClusterState, fed one watch event at a time, and the cluster events each change
returns (plain synchronous tests: no client, no loop)."""

from policy_scheduler.cache.state import ASSIGNED, GONE, IGNORED, KINDS, PENDING, ClusterState
from policy_scheduler.policy.chain import build_chain
from policy_scheduler.framework.events import (ASSIGNED_POD_ADD, ASSIGNED_POD_DELETE, NAMESPACE_LABELS, NODE_ADD,
                                               NODE_DELETE, ActionType)
from policy_scheduler.framework.interface import CycleState, Handle, PermitPlugin, ReservePlugin
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.registry import Registry
from policy_scheduler.framework.status import Status


def node(name, cpu="4", labels=None):
    alloc = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": name, "labels": labels or {"topology.kubernetes.io/zone": "zone-0"}},
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
            "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def assumed_state(spread=False):
    """A node, and pod p assumed on it (our binding in flight)."""
    s = ClusterState()
    s.apply_node("ADDED", node("n1"))
    s.assume(parse_pod(pod("p", spread=spread)), "n1")
    return s


def events(changes):
    return [ev for ev, _, _ in changes]


# ---------------------------------------------------------------------------------------- nodes

def test_a_node_added_changed_and_deleted_returns_its_events_and_a_heartbeat_none():
    s = ClusterState()
    assert events(s.apply_node("ADDED", node("n1"))) == [NODE_ADD] and s.table.names == ["n1"]
    assert s.apply_node("MODIFIED", node("n1")) == []  # a heartbeat: nothing the scheduler reads changed
    changed = s.apply_node("MODIFIED", node("n1", cpu="8"))
    assert [ev.action for ev in events(changed)] == [ActionType.UPDATE_NODE_ALLOCATABLE]
    assert changed[0][1].allocatable["cpu"] == 4000 and changed[0][2].allocatable["cpu"] == 8000
    assert events(s.apply_node("DELETED", node("n1"))) == [NODE_DELETE] and s.table.n == 0
    assert s.apply_node("DELETED", node("n1")) == []  # unknown: nothing to say


def test_a_namespace_label_change_carries_the_labels_before_and_after():
    s = ClusterState()
    (ev, _, ch), = s.apply_namespace("ADDED", {"metadata": {"name": "web", "labels": {"team": "a"}}})
    assert ev == NAMESPACE_LABELS and ch.old_labels is None and ch.new_labels == {"team": "a"}
    assert s.apply_namespace("MODIFIED", {"metadata": {"name": "web", "labels": {"team": "a"}}}) == []
    (_, _, ch), = s.apply_namespace("MODIFIED", {"metadata": {"name": "web", "labels": {"team": "b"}}})
    assert ch.old_labels == {"team": "a"} and s.namespaces["web"] == {"team": "b"}
    assert s.apply_namespace("DELETED", {"metadata": {"name": "web"}}) == [] and "web" not in s.namespaces


# ---------------------------------------------------------------------------------------- pods

def test_pod_outcomes_pending_ignored_assigned_gone():
    s = ClusterState()
    s.apply_node("ADDED", node("n1"))
    assert s.apply_pod("ADDED", pod("q")) == (PENDING, [])
    dying = pod("q")
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert s.apply_pod("MODIFIED", dying) == (IGNORED, [])
    outcome, changes = s.apply_pod("MODIFIED", pod("q", "n1"))
    assert outcome == ASSIGNED and events(changes) == [ASSIGNED_POD_ADD] and s.table.node_of("ns/q") == "n1"
    finished = pod("q", "n1")
    finished["status"]["phase"] = "Succeeded"
    outcome, changes = s.apply_pod("MODIFIED", finished)
    assert outcome == GONE and events(changes) == [ASSIGNED_POD_DELETE] and s.table.pod("ns/q") is None
    assert s.apply_pod("DELETED", pod("q")) == (GONE, [])  # gone already: nothing freed twice


def test_a_pod_assumed_by_us_is_not_pending_and_its_binding_echo_confirms_the_assumption():
    s = assumed_state()
    before = s.table.pod("ns/p")
    assert s.apply_pod("MODIFIED", pod("p")) == (IGNORED, [])  # our binding is in flight
    outcome, changes = s.apply_pod("MODIFIED", pod("p", "n1"))
    assert outcome == ASSIGNED and events(changes) == [ASSIGNED_POD_ADD]  # bound now: waiting pods may go
    assert "ns/p" not in s.table.assumed and s.table.pod("ns/p") is before  # not parsed again
    assert s.apply_pod("MODIFIED", pod("p", "n1")) == (ASSIGNED, [])  # a status update: nothing changed


def test_labels_added_at_binding_replace_the_cached_labels():
    s = assumed_state()
    labels = {"app": "a", "topology.kubernetes.io/zone": "zone-0"}
    s.apply_pod("MODIFIED", pod("p", "n1", labels))
    got = s.table.pod("ns/p")
    assert "ns/p" not in s.table.assumed
    assert got.labels == labels and got.node_name == "n1" and got.raw is None
    assert got.requests == {"cpu": 100} and s.table.requested[s.table.index["n1"], 0] == 100


def test_labels_changed_on_a_pod_with_spread_constraints_are_parsed_again():
    s = assumed_state(spread=True)
    labels = {"app": "a", "pod-template-hash": "h1"}
    s.apply_pod("MODIFIED", pod("p", "n1", labels, spread=True))
    got = s.table.pod("ns/p")
    assert got.labels == labels
    assert got.spread_constraints[0].selector.matches({"app": "a", "pod-template-hash": "h1"})
    assert not got.spread_constraints[0].selector.matches({"app": "a", "pod-template-hash": "h2"})


def test_what_preemption_reads_of_a_bound_pod_follows_its_updates():
    """The start time (the kubelet sets it after binding) and termination by preemption reach the
    state: victims are ordered by start time, and a preemptor waits for terminating victims."""
    s = assumed_state()
    s.apply_pod("MODIFIED", pod("p", "n1"))
    started = pod("p", "n1")
    started["status"]["startTime"] = "2026-01-01T00:00:00Z"
    outcome, changes = s.apply_pod("MODIFIED", started)
    assert outcome == ASSIGNED and s.table.pod("ns/p").start_time == "2026-01-01T00:00:00Z"
    dying = pod("p", "n1")
    dying["status"] = {"startTime": "2026-01-01T00:00:00Z", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    s.apply_pod("MODIFIED", dying)
    got = s.table.pod("ns/p")
    assert got.terminating and got.terminating_by_preemption
    assert s.table.requested[s.table.index["n1"], 0] == 100  # still counted until it is gone


def test_a_deleted_victim_stays_terminating_against_a_late_older_version():
    s = ClusterState()
    s.apply_node("ADDED", node("n1"))
    s.apply_pod("ADDED", pod("v", "n1"))
    victim = s.table.pod("ns/v")
    assert not s.victim_gone("ns/v")
    s.mark_terminating(victim)  # our DELETE succeeded
    assert s.victim_gone("ns/v") and ("ns/v", "uid-v") in s.deleted_victims
    s.apply_pod("MODIFIED", {**pod("v", "n1"), "status": {"phase": "Running", "startTime": "x"}})  # older, seen late
    assert s.table.pod("ns/v").terminating
    s.apply_pod("DELETED", pod("v", "n1"))
    assert s.table.pod("ns/v") is None and not s.deleted_victims


# ---------------------------------------------------------------------------------------- assume, Reserve, Permit

class Recorder(ReservePlugin, PermitPlugin):
    NAME = "Rec"

    def __init__(self, args, handle):
        super().__init__(args, handle)
        self.calls = []

    def reserve(self, state, pod, node):
        self.calls.append(("reserve", node))
        return Status.success()

    def unreserve(self, state, pod, node):
        self.calls.append(("unreserve", node))

    def permit(self, state, pod, node):
        self.calls.append(("permit", node))
        return Status.success(), 0.0


def chain_with(plugin_cls):
    reg = Registry()
    reg.register(plugin_cls)
    return build_chain({"plugins": [{"name": plugin_cls.NAME}]}, reg, Handle())


def test_reserve_assumes_then_runs_reserve_and_permit_and_unreserve_undoes_it():
    s = ClusterState()
    s.apply_node("ADDED", node("n1"))
    chain = chain_with(Recorder)
    rec = chain.plugin("Rec")
    p = parse_pod(pod("p"))
    state = CycleState()
    assumed, status = s.reserve(chain, state, p, "n1")
    assert status.is_success and assumed.node_name == "n1" and p.node_name in (None, "")
    assert "ns/p" in s.table.assumed and s.table.requested[0, 0] == 100
    s.unreserve(chain, state, p, "n1")
    assert s.table.pod("ns/p") is None and s.table.requested[0, 0] == 0
    assert rec.calls == [("reserve", "n1"), ("permit", "n1"), ("unreserve", "n1")]


def test_kinds_name_every_path_the_informers_and_snapshots_list():
    assert KINDS["pods"] == "/api/v1/pods" and KINDS["nodes"] == "/api/v1/nodes"
    assert all(p.startswith(("/api/v1/", "/apis/")) for p in KINDS.values())
    assert len(set(KINDS.values())) == len(KINDS)


# ---------------------------------------------------------------------------------- in-place resize

def _resized(name, node_name, spec_cpu, allocated=None, actuated=None, reason=None):
    """A bound pod whose one container asks ``spec_cpu`` and whose status shows the kubelet's
    allocated / actuated cpu (in-place resize) and a PodResizePending reason."""
    p = pod(name, node_name)
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = spec_cpu
    cs = {"name": "c", "ready": True}
    if allocated:
        cs["allocatedResources"] = {"cpu": allocated}
    if actuated:
        cs["resources"] = {"requests": {"cpu": actuated}}
    p["status"]["containerStatuses"] = [cs]
    if reason:
        p["status"]["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": reason}]
    return p


def test_a_resize_in_the_status_reaches_the_node_and_says_scale_down_or_up():
    """upstream: the node holds max(spec, allocated, actuated); the informer's update of a bound
    pod whose total shrinks is AssignedPod/UpdatePodScaleDown, one that grows UpdatePodScaleUp;
    a status update that leaves the total alone is nothing."""
    s = ClusterState()
    s.apply_node("ADDED", node("n1"))
    s.apply_pod("ADDED", _resized("p", "n1", "2", "2", "2"))
    col = s.table.index["n1"]
    assert s.table.requested[col, 0] == 2000
    # spec lowered to 1 (the resize subresource): the kubelet still holds 2: a plain update
    outcome, changes = s.apply_pod("MODIFIED", _resized("p", "n1", "1", "2", "2"))
    assert [ev.label for ev in events(changes)] == ["AssignedPodUpdate"]
    assert s.table.requested[col, 0] == 2000 and s.table.pod("ns/p").spec_requests == {"cpu": 1000}
    # allocated, not yet actuated: still 2
    assert s.apply_pod("MODIFIED", _resized("p", "n1", "1", "1", "2")) == (ASSIGNED, [])
    outcome, changes = s.apply_pod("MODIFIED", _resized("p", "n1", "1", "1", "1"))  # actuated
    assert outcome == ASSIGNED and [ev.label for ev in events(changes)] == ["AssignedPodUpdatePodScaleDown"]
    assert changes[0][1].requests == {"cpu": 2000} and changes[0][2].requests == {"cpu": 1000}
    assert s.table.requested[col, 0] == 1000 and s.table.nonzero[col, 0] == 1000
    # a status update that changes nothing of the total: no event
    again = _resized("p", "n1", "1", "1", "1")
    again["status"]["startTime"] = s.table.pod("ns/p").start_time or None
    again["status"]["phase"] = "Running"
    assert s.apply_pod("MODIFIED", again) == (ASSIGNED, [])
    # a scale-up asked (Deferred: counted at once), then given up as Infeasible (back to what it holds)
    outcome, changes = s.apply_pod("MODIFIED", _resized("p", "n1", "3", "1", "1", "Deferred"))
    assert [ev.label for ev in events(changes)] == ["AssignedPodUpdatePodScaleUp"]
    assert s.table.requested[col, 0] == 3000
    outcome, changes = s.apply_pod("MODIFIED", _resized("p", "n1", "3", "1", "1", "Infeasible"))
    assert [ev.label for ev in events(changes)] == ["AssignedPodUpdatePodScaleDown"]
    assert s.table.requested[col, 0] == 1000
    s.apply_pod("DELETED", _resized("p", "n1", "3", "1", "1", "Infeasible"))
    assert s.table.requested[col, 0] == 0 and s.table.nonzero[col, 0] == 0
