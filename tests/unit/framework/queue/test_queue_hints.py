"""SchedulingQueue with policies' chains: PreEnqueue gating, event hints of the rejecting plugins
only, in-flight events replayed, QueueSort per policy and the fair rule across policies."""

from __future__ import annotations

from dataclasses import dataclass, field

from policy_scheduler.framework.events import (ASSIGNED_POD_ADD, NODE_ADD, ActionType, ClusterEvent,
                                               ClusterEventWithHint, QueueingHint, Resource)
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.queue.hints import Hints
from policy_scheduler.framework.queue.scheduling_queue import ACTIVE, BACKOFF, GATED, UNSCHEDULABLE, SchedulingQueue
from policy_scheduler.plugins.priority_sort import PrioritySort
from policy_scheduler.plugins.scheduling_gates import SchedulingGates

T0 = 1000.0
NODE_LABEL = ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL)
NODE_ALLOCATABLE = ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_ALLOCATABLE)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


@dataclass
class Profile:
    """What the queue reads of a chain."""

    queue_sort: object = None
    pre_enqueue: list = field(default_factory=list)
    events: dict = field(default_factory=dict)


def pod(name, priority=0, gates=(), labels=None, rv="1"):
    return parse_pod({
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {},
                     "resourceVersion": rv},
        "spec": {"priority": priority, "containers": [{"name": "c", "image": "i"}],
                 "schedulingGates": [{"name": g} for g in gates]},
    })


def queue(profiles: dict[str, Profile], **kw):
    clock = Clock()
    gates = SchedulingGates(None, None)
    fallback = Profile(pre_enqueue=[gates], events={"SchedulingGates": gates.events_to_register()})
    kw.setdefault("pop_from_backoff", False)  # the backoff is pinned here; test_queue covers that feature
    q = SchedulingQueue(PrioritySort(None, None).less, clock=clock, profile_of=profiles.get, **kw)
    q.fallback = fallback
    return q, clock


def gated_profile(**events) -> Profile:
    gates = SchedulingGates(None, None)
    return Profile(pre_enqueue=[gates], events={"SchedulingGates": gates.events_to_register(), **events})


# ---- gates ---------------------------------------------------------------------------------

def test_gated_pod_never_enters_the_active_queue_until_its_last_gate_goes():
    q, clock = queue({"p": gated_profile()})
    assert q.add(pod("a", gates=("x", "y")), "p") == GATED
    assert q.pop() is None
    qpi = q.get("ns/a")
    assert qpi.gating_plugin == "SchedulingGates"
    assert qpi.gating_message == "waiting for scheduling gates: [x y]"
    assert q.counts() == {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, GATED: 1}
    # events of other resources do not touch it; the flush runs PreEnqueue again and keeps it
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 0
    clock.t += 301
    assert q.flush_unschedulable_leftover() == 0
    assert q.state_of("ns/a") == GATED
    # removing one of two gates is not the gate-elimination event
    q.update(pod("a", gates=("y",), rv="2"))
    assert q.state_of("ns/a") == GATED
    q.update(pod("a", rv="3"))
    assert q.state_of("ns/a") == ACTIVE
    got = q.pop()
    assert got.pod.name == "a" and got.attempts == 1 and got.gating_plugin is None
    assert got.initial_attempt_timestamp == clock.t  # latency counts from ungating


def test_the_on_gated_hook_hears_each_gating_after_the_move_and_changes_nothing():
    """The operator's suggestions worker files held pods through it (cluster/suggestions.py);
    the queue's own moves are the same with or without it."""
    told = []
    q, clock = queue({"p": gated_profile()})
    q.on_gated = lambda qpi: told.append((qpi.key, qpi.gating_plugin, q.state_of(qpi.key)))
    assert q.add(pod("a", gates=("x",)), "p") == GATED
    assert q.add(pod("b"), "p") == ACTIVE
    assert told == [("ns/a", "SchedulingGates", GATED)]
    clock.t += 301
    assert q.flush_unschedulable_leftover() == 0  # PreEnqueue ran again: still held, told again
    assert told[1:] == [("ns/a", "SchedulingGates", GATED)]
    q.update(pod("a", rv="2"))
    assert q.state_of("ns/a") == ACTIVE and len(told) == 2


def test_pods_without_a_usable_policy_are_gated_by_the_fallback():
    q, _ = queue({})
    assert q.add(pod("a", gates=("x",)), "missing") == GATED
    assert q.add(pod("b"), "missing") == ACTIVE


def test_a_pod_gated_again_while_backing_off_stays_in_the_pool():
    q, clock = queue({"p": gated_profile(NodeResourcesFit=[ClusterEventWithHint(NODE_ADD)])})
    q.add(pod("a"), "p")
    qpi = q.pop()
    assert q.add_unschedulable(qpi, {"NodeResourcesFit"}) == UNSCHEDULABLE
    # the API server would refuse to add gates to a pod; a PreEnqueue plugin may still say no
    qpi.pod = pod("a", gates=("late",))
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 0
    assert q.state_of("ns/a") == GATED


# ---- hints ---------------------------------------------------------------------------------

def fits_new_node(p, old, new):
    return QueueingHint.QUEUE if new == "big" else QueueingHint.SKIP


def hinted_profile() -> Profile:
    return Profile(events={
        "NodeResourcesFit": [ClusterEventWithHint(NODE_ADD, fits_new_node),
                             ClusterEventWithHint(NODE_ALLOCATABLE)],
        "NodeAffinity": [ClusterEventWithHint(NODE_ADD), ClusterEventWithHint(NODE_LABEL)],
        "NodePorts": [],
    })


def rejected(q, name, plugins, policy="p"):
    q.add(pod(name), policy)
    qpi = q.pop()
    assert q.add_unschedulable(qpi, set(plugins)) == UNSCHEDULABLE
    return qpi


def test_an_event_no_rejecting_plugin_registered_moves_nothing():
    q, clock = queue({"p": hinted_profile()})
    rejected(q, "fit", {"NodeResourcesFit"})
    rejected(q, "ports", {"NodePorts"})
    clock.t += 20
    # NodeAffinity registered node label changes, but it rejected neither pod
    assert q.move_all_to_active_or_backoff(NODE_LABEL) == 0
    assert q.state_of("ns/fit") == q.state_of("ns/ports") == UNSCHEDULABLE
    assert q.skipped_by_hint == {"NodeUpdateNodeLabel": 2} and q.moved_by_event == {}
    # a registered event whose hint says SKIP moves nothing either
    assert q.move_all_to_active_or_backoff(NODE_ADD, None, "small") == 0
    assert q.move_all_to_active_or_backoff(NODE_ADD, None, "big") == 1
    assert q.state_of("ns/fit") == ACTIVE and q.state_of("ns/ports") == UNSCHEDULABLE
    assert q.moved_by_event == {"NodeAdd": 1}


def test_any_rejecting_plugin_can_wake_the_pod():
    q, clock = queue({"p": hinted_profile()})
    rejected(q, "a", {"NodeResourcesFit", "NodeAffinity"})
    clock.t += 20
    assert q.move_all_to_active_or_backoff(NODE_LABEL) == 1


def test_a_hint_that_raises_counts_as_queue():
    def broken(p, old, new):
        raise KeyError("bug")

    q, clock = queue({"p": Profile(events={"X": [ClusterEventWithHint(NODE_ADD, broken)]})})
    rejected(q, "a", {"X"})
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 1
    assert q.state_of("ns/a") == BACKOFF  # still inside its 1 s backoff


def test_registration_matching_is_narrower_or_equal():
    q, clock = queue({"p": Profile(events={"X": [ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.UPDATE))],
                                           "Y": [ClusterEventWithHint(ClusterEvent(Resource.POD, ActionType.ADD))]})})
    rejected(q, "x", {"X"})
    rejected(q, "y", {"Y"})
    clock.t += 20
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 0  # Add is not an Update
    assert q.move_all_to_active_or_backoff(NODE_LABEL) == 1  # UpdateNodeLabel is within Update
    assert q.move_all_to_active_or_backoff(ASSIGNED_POD_ADD) == 1  # Pod covers AssignedPod
    assert q.state_of("ns/x") == q.state_of("ns/y") == ACTIVE


def test_unknown_rejector_gets_every_event_and_pseudo_plugins_their_own():
    q, clock = queue({"p": Profile()}, pseudo_events={
        "PolicySelection": [ClusterEventWithHint(ClusterEvent(Resource.POLICY, ActionType.UPDATE))]})
    rejected(q, "gone", {"PluginRemovedFromPolicy"})
    rejected(q, "nopolicy", {"PolicySelection"})
    clock.t += 20
    assert q.move_all_to_active_or_backoff(NODE_LABEL) == 1
    assert q.state_of("ns/gone") == ACTIVE and q.state_of("ns/nopolicy") == UNSCHEDULABLE
    assert q.move_all_to_active_or_backoff(ClusterEvent(Resource.POLICY, ActionType.UPDATE)) == 1


def test_target_pod_update_moves_only_when_a_rejector_registered_it():
    q, clock = queue({"p": Profile(events={
        "NodeResourcesFit": [ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_SCALE_DOWN))],
        "InterPodAffinity": [ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_LABEL))],
    })})
    rejected(q, "a", {"NodeResourcesFit"})
    clock.t += 20
    q.update(pod("a", labels={"x": "y"}, rv="2"))  # a label change cannot help a resource rejection
    assert q.state_of("ns/a") == UNSCHEDULABLE
    q.delete("ns/a")
    rejected(q, "b", {"InterPodAffinity"})
    clock.t += 20
    q.update(pod("b", labels={"x": "y"}, rv="2"))
    assert q.state_of("ns/b") == ACTIVE


def test_in_flight_events_are_replayed_through_the_hints():
    q, clock = queue({"p": hinted_profile()})
    q.add(pod("a"), "p")
    q.add(pod("b"), "p")
    a = q.pop()
    q.move_all_to_active_or_backoff(NODE_LABEL)  # arrives while a is being scheduled
    assert q.add_unschedulable(a, {"NodeResourcesFit"}) == UNSCHEDULABLE  # NodeResourcesFit ignores it
    b = q.pop()
    q.move_all_to_active_or_backoff(NODE_ADD, None, "big")
    assert q.add_unschedulable(b, {"NodeResourcesFit"}) == BACKOFF  # this one may help


def test_events_are_not_kept_once_nothing_is_in_flight():
    q, _ = queue({"p": hinted_profile()})
    q.add(pod("a"), "p")
    a = q.pop()
    q.move_all_to_active_or_backoff(NODE_ADD, None, "big")
    q.done(a.key)
    q.add(pod("b"), "p")
    b = q.pop()
    assert q.add_unschedulable(b, {"NodeResourcesFit"}) == UNSCHEDULABLE


# ---- QueueSort per policy and the fair rule ---------------------------------------------

class Fifo:
    """A QueueSort that ignores priority: first queued, first out."""

    NAME = "Fifo"

    @staticmethod
    def less(a, b):
        return a.timestamp < b.timestamp


def test_each_policy_orders_its_own_pods_with_its_queue_sort():
    q, clock = queue({"fifo": Profile(queue_sort=Fifo), "prio": Profile()})
    for i, (name, prio) in enumerate([("f-low", 1), ("f-high", 5)]):
        clock.t = T0 + i
        q.add(pod(name, prio), "fifo")
    # within "fifo", the older pod goes first although its priority is lower
    assert q.pop().pod.name == "f-low"
    assert q.pop().pod.name == "f-high"


def test_across_policies_priority_first_then_round_robin():
    q, clock = queue({"a": Profile(), "b": Profile(), "c": Profile()})
    for i in range(3):
        q.add(pod(f"a{i}"), "a")
        q.add(pod(f"b{i}"), "b")
    q.add(pod("c0"), "c")
    q.add(pod("urgent", priority=100), "c")
    order = [q.pop().pod.name for _ in range(8)]
    assert order == ["urgent", "a0", "b0", "c0", "a1", "b1", "a2", "b2"]
    assert q.pop() is None


def test_policy_change_reorders_its_active_queue():
    profiles = {"p": Profile()}
    q, clock = queue(profiles)
    clock.t = T0
    q.add(pod("old-low", 1), "p")
    clock.t = T0 + 1
    q.add(pod("new-high", 9), "p")
    profiles["p"] = Profile(queue_sort=Fifo)
    q.policy_changed("p")
    assert q.pop().pod.name == "old-low"


def test_a_policy_change_runs_the_new_chains_pre_enqueue_on_queued_pods():
    """Pods queued before their policy was known (start-up: pods come before policies) reach no
    cycle that the policy's PreEnqueue plugins would have held them from."""
    profiles = {"p": Profile()}
    q, clock = queue(profiles)
    assert q.add(pod("a", gates=("x",)), "p") == ACTIVE  # no PreEnqueue plugin yet
    assert q.add(pod("b"), "p") == ACTIVE
    profiles["p"] = gated_profile()
    q.policy_changed("p")
    assert q.counts("p")[GATED] == 1 and q.get("ns/a").gating_plugin == "SchedulingGates"
    assert q.pop().pod.name == "b" and q.pop() is None


def test_relabelled_pod_moves_to_its_new_policys_queue():
    q, _ = queue({"a": Profile(), "b": Profile()})
    q.add(pod("x"), "a")
    q.add(pod("x", labels={"moved": "yes"}, rv="2"), "b")
    assert q.counts("a")[ACTIVE] == 0 and q.counts("b")[ACTIVE] == 1
    assert q.pop().policy == "b"


def test_gated_pods_are_asked_once_per_group_and_follow_a_policy_move(monkeypatch):
    """An event reaches a gated pod only through its gating plugin's registrations: the queue
    asks once per (policy, gating plugin), not once per pod, and a pod relabelled to another
    policy while gated is asked under its new one."""
    profiles = {"p": gated_profile(), "q": gated_profile(), "open": Profile()}
    q, _ = queue(profiles)
    for i in range(50):
        assert q.add(pod(f"g{i}", gates=("x",)), "p") == GATED
    q.add(pod("free"), "open")
    asked = []
    real = Hints.gated_interested
    monkeypatch.setattr(Hints, "gated_interested",
                        lambda self, qpi, ev, cache=None: asked.append(qpi.policy) or real(self, qpi, ev, cache))
    assert q.move_all_to_active_or_backoff(NODE_LABEL) == 0  # SchedulingGates registers no node event
    assert asked == ["p"]
    q.add(pod("g0", gates=("x",), labels={"to": "q"}, rv="2"), "q")  # relabelled: policy q
    asked.clear()
    q.move_all_to_active_or_backoff(NODE_LABEL)
    assert sorted(asked) == ["p", "q"]
    assert q.counts("p")[GATED] == 49 and q.counts("q")[GATED] == 1 and q.counts()[GATED] == 50
    assert len(q) == 51 and q.state_of("ns/g0") == GATED and q.get("ns/g0").policy == "q"
    q.update(pod("g0", labels={"to": "q"}, rv="3"))  # its gate lifted: out of the gated pool
    assert q.state_of("ns/g0") == ACTIVE and q.counts()[GATED] == 49
    assert {x.pod.name for x in q.pending_pods("p")} == {f"g{i}" for i in range(1, 50)}


# ---- in-place resize: the scale-down of a pod on a node -------------------------------------

def test_a_bound_pods_status_scale_down_requeues_a_pod_node_resources_fit_rejected():
    """The informer's update of a bound pod whose kubelet actuated a resize down (status
    resources) is AssignedPod/UpdatePodScaleDown (cache/state.py); NodeResourcesFit registered it
    and its hint queues a pod requesting the freed resource. A label change of that pod, or a
    scale-down of a resource the waiting pod does not request, moves nothing."""
    from policy_scheduler.cache.state import ClusterState
    from policy_scheduler.plugins.node_resources_fit import PLUGIN as FIT
    from support import kit

    fit = kit.instance(FIT)
    q, clock = queue({"p": Profile(events={"NodeResourcesFit": fit.events_to_register()})})
    s = ClusterState()
    s.apply_node("ADDED", {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi",
                                                                                 "pods": "110"}}})

    def big(labels=None, cpu="3", mem="4Gi", alloc=None):
        status = {"phase": "Running"}
        if alloc:
            status["containerStatuses"] = [{"name": "c", "allocatedResources": alloc, "resources": {"requests": alloc}}]
        return {"metadata": {"name": "big", "namespace": "ns", "uid": "uid-big", "labels": labels or {}},
                "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i",
                                                          "resources": {"requests": {"cpu": cpu, "memory": mem}}}]},
                "status": status}

    s.apply_pod("ADDED", big())
    waiting = parse_pod({"metadata": {"name": "w", "namespace": "ns", "uid": "uid-w"},
                         "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "2"}}}]}})
    q.add(waiting, "p")
    assert q.add_unschedulable(q.pop(), {"NodeResourcesFit"}) == UNSCHEDULABLE
    clock.t += 20  # past its backoff: a move goes to activeQ

    def deliver(body):
        _, changes = s.apply_pod("MODIFIED", body)
        return sum(q.move_all_to_active_or_backoff(ev, old, new) for ev, old, new in changes)

    assert deliver(big(labels={"x": "y"})) == 0  # AssignedPodUpdatePodLabel: not Fit's
    assert deliver(big(labels={"x": "y"}, mem="1Gi")) == 0  # memory freed: the pod asks only cpu
    assert q.state_of("ns/w") == UNSCHEDULABLE
    # spec lowered, the kubelet still holds 3 cpu: not yet
    assert deliver(big(labels={"x": "y"}, cpu="1", mem="1Gi", alloc={"cpu": "3", "memory": "1Gi"})) == 0
    assert q.state_of("ns/w") == UNSCHEDULABLE
    assert s.table.requested[0, 0] == 3000
    # actuated: 2 cpu freed
    assert deliver(big(labels={"x": "y"}, cpu="1", mem="1Gi", alloc={"cpu": "1", "memory": "1Gi"})) == 1
    assert q.state_of("ns/w") == ACTIVE and s.table.requested[0, 0] == 1000


def test_an_event_asks_only_the_gating_plugin_of_a_pod_it_keeps_gated():
    """A pod that its gating plugin still holds, as it is, stays where it is on an event that
    plugin registered (no PreEnqueue of the others, no move within the pool); once that plugin
    lets it go, the event moves it."""
    from policy_scheduler.framework.status import Code, Status

    class Hold:
        NAME = "Hold"

        def __init__(self):
            self.held = {"ns/a", "ns/b"}
            self.calls = 0

        def pre_enqueue(self, p):
            self.calls += 1
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("held",)) if p.key in self.held else Status.success()

    class CountingGates(SchedulingGates):
        calls = 0

        def pre_enqueue(self, p):
            CountingGates.calls += 1
            return super().pre_enqueue(p)

    hold, gates = Hold(), CountingGates(None, None)
    profile = Profile(pre_enqueue=[gates, hold], events={"Hold": [ClusterEventWithHint(NODE_ADD)]})
    q, _ = queue({"p": profile})
    assert q.add(pod("a"), "p") == GATED and q.add(pod("b"), "p") == GATED
    assert q.get("ns/a").gating_plugin == "Hold"
    hold.calls = CountingGates.calls = 0
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 0
    assert (hold.calls, CountingGates.calls) == (2, 0)
    assert [x.key for m in q._gated.groups() for x in m] == ["ns/a", "ns/b"]
    hold.held.discard("ns/a")
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 1
    assert q.state_of("ns/a") == ACTIVE and q.state_of("ns/b") == GATED
