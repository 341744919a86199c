"""SchedulingQueue against upstream PriorityQueue semantics (pkg/scheduler/backend/queue)."""

from __future__ import annotations

import pytest

from policy_scheduler.framework.events import (ASSIGNED_POD_DELETE, NODE_ADD, ActionType, ClusterEvent,
                                               Resource)
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.queue.scheduling_queue import (
    ACTIVE,
    BACKOFF,
    GATED,
    UNSCHEDULABLE,
    QueuedPodInfo,
    SchedulingQueue,
)
from policy_scheduler.framework.queue.hints import is_pod_updated

T0 = 1000.0
EV = {
    "NodeAdd": NODE_ADD,
    "NodeUpdate": ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL),
    "AssignedPodDelete": ASSIGNED_POD_DELETE,
    "ResourceClaimUpdate": ClusterEvent("resource.k8s.io/ResourceClaim", ActionType.UPDATE),
}


class FakeClock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


def priority_sort(a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
    """PrioritySort.Less: higher priority first, then the earlier queue timestamp."""
    pa, pb = a.pod.priority, b.pod.priority
    return pa > pb or (pa == pb and a.timestamp < b.timestamp)


def make_pod(name, priority=0, uid=None, labels=None, rv="1", status=None, ns="default"):
    return parse_pod({
        "metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}",
                     "labels": labels or {}, "resourceVersion": rv},
        "spec": {"priority": priority, "containers": [{"name": "c", "image": "busybox"}]},
        "status": status or {"phase": "Pending"},
    })


def make_queue(clock=None, **kw):
    """A queue with SchedulerPopFromBackoffQ off unless asked: most tests here pin the backoff
    itself, which that feature lets an idle queue skip (its own tests below turn it on)."""
    clock = clock or FakeClock()
    kw.setdefault("pop_from_backoff", False)
    return SchedulingQueue(priority_sort, clock=clock, **kw), clock


def key(name):
    return f"default/{name}"


def fail(q, qpi, plugins=("NodeResourcesFit",), **kw):
    """One failed attempt for a popped pod."""
    return q.add_unschedulable(qpi, set(plugins), **kw)


# ---- ordering ------------------------------------------------------------------------

@pytest.mark.parametrize("pods, order", [
    # (name, priority, seconds after T0 it is added)
    ([("a", 0, 0), ("b", 10, 1), ("c", 5, 2)], ["b", "c", "a"]),
    # equal priority: FIFO by queue timestamp
    ([("a", 0, 2), ("b", 0, 0), ("c", 0, 1)], ["b", "c", "a"]),
    ([("lo-old", 1, 0), ("hi-new", 2, 5), ("lo-new", 1, 3), ("hi-old", 2, 1)],
     ["hi-old", "hi-new", "lo-old", "lo-new"]),
    # negative priorities sort below the default 0
    ([("neg", -5, 0), ("zero", 0, 1)], ["zero", "neg"]),
])
def test_pop_order_priority_then_timestamp(pods, order):
    q, clock = make_queue()
    for name, prio, at in sorted(pods, key=lambda p: p[2]):
        clock.t = T0 + at
        q.add(make_pod(name, prio), "p")
    got = []
    while (qpi := q.pop()) is not None:
        got.append(qpi.pod.name)
        q.done(qpi.key)
    assert got == order


def test_requeued_pod_sorts_by_its_new_timestamp():
    # "a" was added first, failed, and comes back with timestamp = failure time; "b" (added at
    # T0+1, same priority) is now older in the queue and pops first.
    q, clock = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    clock.advance(1)
    q.add(make_pod("b"), "p")
    clock.advance(1)
    assert fail(q, qpi, error=True) == BACKOFF  # timestamp T0+2, backoff 1 s
    clock.advance(1.5)
    assert [q.pop().pod.name, q.pop().pod.name] == ["b", "a"]


def test_equal_priority_and_timestamp_pops_fifo():
    q, _ = make_queue()
    for n in ("x", "y", "z"):
        q.add(make_pod(n), "p")
    assert [q.pop().pod.name for _ in range(3)] == ["x", "y", "z"]


# ---- backoff -------------------------------------------------------------------------

@pytest.mark.parametrize("initial, maximum, expected", [
    (1.0, 10.0, [0, 1, 2, 4, 8, 10, 10, 10]),  # defaults: 1s doubling, capped at 10s
    (3.0, 10.0, [0, 3, 6, 10, 10]),            # 6 > 10-6, so the next is the cap
    (2.0, 8.0, [0, 2, 4, 8, 8]),               # reaches the cap exactly
    (1.0, 1.0, [0, 1, 1, 1]),
])
def test_backoff_duration(initial, maximum, expected):
    q, _ = make_queue(initial_backoff=initial, max_backoff=maximum)
    assert [q.backoff_duration(n) for n in range(len(expected))] == expected


def test_a_pod_groups_max_backoff_grows_with_the_square_root_of_its_size():
    """upstream calculateBackoffDuration(count, entitySize): max x sqrt(size) for a group of more
    than one queued pod; an initial backoff above max is capped at once."""
    q, _ = make_queue(initial_backoff=1.0, max_backoff=10.0)
    b = q._backoff
    assert [b.duration(n, 4) for n in range(7)] == [0, 1, 2, 4, 8, 16, 20]  # 10 x sqrt(4)
    assert [b.duration(n, 1) for n in range(7)] == [0, 1, 2, 4, 8, 10, 10]
    assert make_queue(initial_backoff=12.0, max_backoff=10.0)[0]._backoff.duration(1) == 10.0


def test_backoff_sequence_across_failures():
    """Each rejection doubles the wait (1, 2, 4, 8, 10, 10 s), measured from the failure time."""
    q, clock = make_queue()
    q.add(make_pod("a"), "p")
    for n, wait in enumerate([1, 2, 4, 8, 10, 10], start=1):
        qpi = q.pop()
        assert qpi is not None and qpi.attempts == n
        clock.advance(0.25)  # the attempt takes some time; backoff starts at the failure
        failed_at = clock.t
        assert fail(q, qpi) == UNSCHEDULABLE
        assert q.move_all_to_active_or_backoff(EV["NodeAdd"]) == 1
        assert q.state_of(qpi.key) == BACKOFF
        assert qpi.timestamp == failed_at and qpi.unschedulable_count == n
        assert qpi.backoff_expiry == failed_at + wait
        assert q.next_ready_in() == wait
        clock.advance(wait)
        assert q.pop() is None  # the expiry instant itself still backs off
        assert q.next_ready_in() == 0
        clock.advance(0.25)
        assert q.next_ready_in() == 0


def test_error_backoff_counts_consecutive_errors_only():
    """Errors back off on ConsecutiveErrorsCount, which a plugin rejection resets."""
    q, clock = make_queue()
    q.add(make_pod("a"), "p")
    steps = [  # (error?, expected backoff)
        (False, 1), (False, 2), (False, 4),
        (True, 1), (True, 2),   # errors restart at 1 s
        (False, 8),             # 4th rejection: UnschedulableCount 4
        (True, 1),              # error count was reset by the rejection
    ]
    for error, wait in steps:
        qpi = q.pop()
        fail(q, qpi, error=error)
        q.move_all_to_active_or_backoff(EV["NodeAdd"])
        assert qpi.backoff_expiry - qpi.timestamp == wait
        clock.advance(wait + 0.5)


def test_max_backoff_zero_disables_backoff():
    q, _ = make_queue(max_backoff=0.0)
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    assert fail(q, qpi, error=True) == ACTIVE
    assert qpi.backoff_expiry is None
    assert q.pop() is qpi


# ---- where a failed pod goes ---------------------------------------------------------

def test_rejected_pod_stays_in_pool_until_an_event():
    q, clock = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    assert fail(q, qpi, {"NodeAffinity"}) == UNSCHEDULABLE
    assert qpi.unschedulable_plugins == {"NodeAffinity"}
    clock.advance(60)  # backoff long over, but no event
    assert q.pop() is None
    assert q.state_of(qpi.key) == UNSCHEDULABLE
    assert q.move_all_to_active_or_backoff(EV["NodeUpdate"]) == 1
    assert q.state_of(qpi.key) == ACTIVE  # backoff over: straight to activeQ
    popped = q.pop()
    assert popped is qpi and popped.attempts == 2
    assert popped.unschedulable_plugins == set()  # cleared for the next attempt


def test_event_moves_pod_still_backing_off_to_backoff_queue():
    q, clock = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    fail(q, qpi)
    clock.advance(0.5)
    q.move_all_to_active_or_backoff(EV["NodeAdd"])
    assert q.state_of(qpi.key) == BACKOFF
    assert q.next_ready_in() == 0.5
    assert q.pop() is None
    clock.advance(0.75)
    assert q.pop() is qpi


def test_pre_check_limits_which_pods_an_event_moves():
    q, clock = make_queue()
    for n in ("a", "b"):
        q.add(make_pod(n), "p")
    fail(q, q.pop(), {"NodeAffinity"})
    fail(q, q.pop(), {"NodeResourcesFit"})
    clock.advance(20)
    moved = q.move_all_to_active_or_backoff(
        EV["AssignedPodDelete"], pre_check=lambda qpi: "NodeResourcesFit" in qpi.unschedulable_plugins)
    assert moved == 1
    assert (q.state_of(key("a")), q.state_of(key("b"))) == (UNSCHEDULABLE, ACTIVE)


@pytest.mark.parametrize("error, plugins", [
    (True, set()),
    (True, {"NodeResourcesFit"}),  # an Error status records no plugins
    (False, set()),                # no rejecting plugin counts as an error
])
def test_error_goes_to_backoff_without_event(error, plugins):
    q, clock = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    assert q.add_unschedulable(qpi, plugins, error=error) == BACKOFF
    assert qpi.unschedulable_plugins == set()
    assert (qpi.consecutive_errors_count, qpi.unschedulable_count) == (1, 0)
    clock.advance(1.25)
    assert q.pop() is qpi


def test_move_request_during_flight_sends_pod_to_backoff():
    q, clock = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    assert q.move_all_to_active_or_backoff(EV["NodeAdd"]) == 0  # pool empty, still recorded
    assert fail(q, qpi) == BACKOFF
    clock.advance(1.25)
    assert q.pop() is qpi


def test_move_request_before_pop_does_not_count():
    q, _ = make_queue()
    q.add(make_pod("a"), "p")
    q.move_all_to_active_or_backoff(EV["NodeAdd"])
    qpi = q.pop()
    assert fail(q, qpi) == UNSCHEDULABLE


def test_move_request_during_another_pods_later_cycle_counts():
    # "a" is popped (cycle 1) and still in flight (binding) when "b" is popped (cycle 2) and an
    # event arrives: moveRequestCycle 2 >= 1, so "a" goes to backoff when its binding fails.
    q, _ = make_queue()
    q.add(make_pod("a"), "p")
    q.add(make_pod("b"), "p")
    a, b = q.pop(), q.pop()
    q.move_all_to_active_or_backoff(EV["NodeAdd"])
    assert fail(q, b) == BACKOFF
    assert fail(q, a) == BACKOFF
    assert q.scheduling_cycle == 2


def test_update_during_flight_counts_as_event_and_is_requeued():
    q, _ = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    newer = make_pod("a", labels={"zone": "b"}, rv="2")
    assert q.update(newer)
    assert fail(q, qpi) == BACKOFF
    assert qpi.pod is newer


def test_status_only_update_during_flight_does_not_count():
    q, _ = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    newer = make_pod("a", rv="2", status={"phase": "Pending", "conditions": [{"type": "PodScheduled"}]})
    q.update(newer)
    assert fail(q, qpi) == UNSCHEDULABLE
    assert qpi.pod is newer


def test_pending_plugins_skip_backoff_on_event_but_not_on_leftover_flush():
    q, clock = make_queue(unschedulable_max_duration=0.25)
    q.add(make_pod("a"), "p")
    a = q.pop()
    assert q.add_unschedulable(a, (), pending_plugins={"DynamicResources"}) == UNSCHEDULABLE
    assert a.unschedulable_count == 1  # Pending is a rejection, not an error
    q.move_all_to_active_or_backoff(EV["ResourceClaimUpdate"])
    assert q.state_of(a.key) == ACTIVE  # backing off until T0+1, yet straight to activeQ
    q.delete(a.key)
    q.add(make_pod("b"), "p")
    b = q.pop()
    assert q.add_unschedulable(b, (), pending_plugins={"DynamicResources"}) == UNSCHEDULABLE
    clock.advance(0.5)  # in the pool for longer than 0.25 s, backoff until T0+1
    assert q.flush_unschedulable_leftover() == 1
    assert q.state_of(b.key) == BACKOFF  # the timeout is a wildcard event: backoff applies


# ---- leftover flush ------------------------------------------------------------------

def test_leftover_flush_after_max_duration():
    q, clock = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    fail(q, qpi)
    clock.advance(300)
    assert q.flush_unschedulable_leftover() == 0  # exactly 300 s: not longer than the max
    clock.advance(0.5)
    assert q.flush_unschedulable_leftover() == 1
    assert q.state_of(qpi.key) == ACTIVE


def test_leftover_flush_counts_from_last_failure():
    q, clock = make_queue(unschedulable_max_duration=60.0)
    for n in ("old", "new"):
        q.add(make_pod(n), "p")
    fail(q, q.pop())
    clock.advance(30)
    fail(q, q.pop())
    clock.advance(30.5)
    assert q.flush_unschedulable_leftover() == 1
    assert (q.state_of(key("old")), q.state_of(key("new"))) == (ACTIVE, UNSCHEDULABLE)


def test_leftover_flush_records_a_move_request():
    q, clock = make_queue(unschedulable_max_duration=0.0, max_backoff=0.0)
    for n in ("a", "b"):
        q.add(make_pod(n), "p")
    a, b = q.pop(), q.pop()
    fail(q, a)
    assert q.flush_unschedulable_leftover() == 0  # a's time in the pool is 0, not > 0
    clock.advance(1)
    assert q.flush_unschedulable_leftover() == 1
    assert fail(q, b) == ACTIVE  # b was in flight during the flush; no backoff configured


# ---- delete / update -----------------------------------------------------------------

def _put(q, clock, state):
    """Put pod "a" into the given state."""
    q.add(make_pod("a"), "p")
    if state == ACTIVE:
        return None
    qpi = q.pop()
    if state == "in-flight":
        return qpi
    fail(q, qpi)
    if state == BACKOFF:
        q.move_all_to_active_or_backoff(EV["NodeAdd"])
    assert q.state_of(key("a")) == state
    return qpi


@pytest.mark.parametrize("state", [ACTIVE, BACKOFF, UNSCHEDULABLE])
def test_delete_from_every_sub_queue(state):
    q, clock = make_queue()
    _put(q, clock, state)
    assert q.delete(key("a"))
    assert key("a") not in q and len(q) == 0
    assert q.counts() == {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, GATED: 0}
    clock.advance(60)
    q.move_all_to_active_or_backoff(EV["NodeAdd"])
    assert q.pop() is None
    assert not q.delete(key("a"))


def test_delete_in_flight_pod_drops_it_on_failure():
    q, clock = make_queue()
    qpi = _put(q, clock, "in-flight")
    assert q.delete(key("a"))
    assert fail(q, qpi) is None
    assert len(q) == 0 and not q.is_in_flight(key("a"))


def test_recreated_pod_while_old_one_in_flight():
    q, clock = make_queue()
    old = _put(q, clock, "in-flight")
    q.add(make_pod("a", uid="uid-2"), "p")  # delete event missed; same name, new uid
    assert q.state_of(key("a")) == ACTIVE
    assert fail(q, old) is None  # the old attempt's pod no longer exists
    assert q.pop().pod.uid == "uid-2"


@pytest.mark.parametrize("label_change, elapsed, expected", [
    (False, 0.0, UNSCHEDULABLE),  # status/resourceVersion only: stays in the pool
    (True, 0.5, BACKOFF),         # may be schedulable now, but still backing off
    (True, 5.0, ACTIVE),          # backoff over
])
def test_update_while_in_pool(label_change, elapsed, expected):
    q, clock = make_queue()
    qpi = _put(q, clock, UNSCHEDULABLE)
    clock.advance(elapsed)
    newer = make_pod("a", labels={"tier": "web"} if label_change else None, rv="2",
                     status={"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]})
    assert q.update(newer)
    assert q.state_of(key("a")) == expected
    assert q.get(key("a")) is qpi and qpi.pod is newer


@pytest.mark.parametrize("state", [ACTIVE, BACKOFF])
def test_update_in_active_or_backoff_replaces_in_place(state):
    q, clock = make_queue()
    _put(q, clock, state)
    newer = make_pod("a", labels={"tier": "web"}, rv="2")
    assert q.update(newer)
    assert q.state_of(key("a")) == state and q.get(key("a")).pod is newer


def test_update_reorders_active_queue_on_priority_change():
    q, _ = make_queue()
    q.add(make_pod("a", 1), "p")
    q.add(make_pod("b", 2), "p")
    q.update(make_pod("a", 3, rv="2"))
    assert q.pop().pod.name == "a"


def test_add_of_in_flight_pod_is_an_update_not_a_second_entry():
    q, _ = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    newer = make_pod("a", labels={"x": "y"}, rv="2")
    q.add(newer, "p")
    assert len(q) == 0 and q.is_in_flight(key("a"))
    assert fail(q, qpi) == BACKOFF and qpi.pod is newer


def test_update_of_unknown_pod_returns_false():
    q, _ = make_queue()
    assert not q.update(make_pod("ghost"))
    assert len(q) == 0


def test_add_of_queued_pod_updates_it():
    q, clock = make_queue()
    q.add(make_pod("a"), "p")
    clock.advance(5)
    newer = make_pod("a", labels={"x": "y"}, rv="2")
    q.add(newer, "p")
    assert len(q) == 1
    qpi = q.pop()
    assert qpi.pod is newer and qpi.timestamp == T0


@pytest.mark.parametrize("old_kw, new_kw, updated", [
    ({}, {"rv": "9"}, False),
    ({}, {"status": {"phase": "Pending", "nominatedNodeName": "n1"}}, False),
    ({}, {"labels": {"a": "b"}}, True),
    ({}, {"priority": 5}, True),
    ({}, {"status": {"resourceClaimStatuses": [{"name": "c"}]}}, True),
])
def test_is_pod_updated(old_kw, new_kw, updated):
    assert is_pod_updated(make_pod("a", **old_kw), make_pod("a", **new_kw)) is updated


# ---- bookkeeping ---------------------------------------------------------------------

def test_pop_bookkeeping_and_done():
    q, clock = make_queue()
    assert q.pop() is None and q.next_ready_in() is None
    q.add(make_pod("a"), "p")
    clock.advance(2)
    qpi = q.pop()
    assert (qpi.attempts, qpi.initial_attempt_timestamp, q.scheduling_cycle) == (1, T0, 1)
    assert q.is_in_flight(qpi.key) and key("a") not in q and q.in_flight_count == 1
    q.done(qpi.key)
    assert not q.is_in_flight(qpi.key)
    assert qpi.initial_attempt_timestamp == T0


def test_add_unschedulable_ends_the_flight():
    q, _ = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    fail(q, qpi)
    assert not q.is_in_flight(qpi.key)
    assert fail(q, qpi) is None  # already present in the pool


def test_counts_and_pending_pods_per_policy():
    q, clock = make_queue()
    for n, pol in (("a", "p1"), ("b", "p1"), ("c", "p2"), ("d", "p2")):
        q.add(make_pod(n), pol)
    # equal priorities: the policies take turns
    a, c, b = q.pop(), q.pop(), q.pop()
    assert [x.pod.name for x in (a, c, b)] == ["a", "c", "b"]
    fail(q, a)                           # a -> pool
    fail(q, c, error=True)               # c -> backoff
    # b in flight: not pending in any sub-queue
    assert q.counts() == {ACTIVE: 1, BACKOFF: 1, UNSCHEDULABLE: 1, GATED: 0}
    assert q.counts("p1") == {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 1, GATED: 0}
    assert q.counts("p2") == {ACTIVE: 1, BACKOFF: 1, UNSCHEDULABLE: 0, GATED: 0}
    assert len(q) == 3 and key("d") in q and key("b") not in q
    assert sorted(x.pod.name for x in q.pending_pods()) == ["a", "c", "d"]
    assert sorted(x.pod.name for x in q.pending_pods("p2")) == ["c", "d"]


def test_many_deletes_keep_heap_consistent():
    q, _ = make_queue()
    for i in range(300):
        q.add(make_pod(f"p{i:03d}", priority=i % 7), "p")
    for i in range(300):
        if i % 3:
            q.delete(key(f"p{i:03d}"))  # enough deletions to compact the heap
    got = []
    while (qpi := q.pop()) is not None:
        got.append((qpi.pod.priority, qpi.pod.name))
    assert len(got) == 100
    assert got == sorted(got, key=lambda x: (-x[0], x[1]))  # equal timestamps: FIFO = name order


def test_with_the_priority_sort_plugin():
    from policy_scheduler.plugins.priority_sort import PLUGIN

    clock = FakeClock()
    q = SchedulingQueue(PLUGIN(None, None).less, clock=clock)
    for name, prio in (("a", 0), ("b", 100), ("c", 0), ("d", 100)):
        q.add(make_pod(name, prio), "p")
        clock.advance(1)
    assert [q.pop().pod.name for _ in range(4)] == ["b", "d", "a", "c"]


# ---- SchedulerPopFromBackoffQ (upstream default since v1.33) ------------------------------


def test_pop_from_backoff_takes_a_rejected_pod_early_only_when_activeq_is_empty():
    q, clock = make_queue(pop_from_backoff=True)
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    fail(q, qpi)
    q.move_all_to_active_or_backoff(EV["NodeAdd"])
    assert q.state_of(qpi.key) == BACKOFF and q.next_ready_in() == 0.0
    q.add(make_pod("b"), "p")
    assert q.pop().key == key("b")  # activeQ first
    got = q.pop()  # activeQ empty: the backing-off pod, a second early
    assert got is qpi and got.attempts == 2 and clock.t < qpi.backoff_expiry


def test_pop_from_backoff_never_takes_an_errored_pod_early():
    q, clock = make_queue(pop_from_backoff=True)
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    assert q.add_unschedulable(qpi, error=True) == BACKOFF
    assert q.pop() is None and q.next_ready_in() == 1.0
    clock.advance(1.01)
    assert q.pop() is qpi


def test_pop_from_backoff_off_waits_out_the_backoff():
    q, clock = make_queue(pop_from_backoff=False)
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    fail(q, qpi)
    q.move_all_to_active_or_backoff(EV["NodeAdd"])
    assert q.pop() is None and q.next_ready_in() == 1.0


def test_activating_a_pod_in_flight_requeues_it_when_it_comes_back():
    """upstream Activate: for an in-flight pod a ForceActivate event is recorded (what an
    asynchronous preemption that failed relies on)."""
    q, clock = make_queue()
    q.add(make_pod("a"), "p")
    qpi = q.pop()
    assert q.activate([qpi.key]) == 0
    assert fail(q, qpi) == BACKOFF  # not the pool: the recorded event moved it
