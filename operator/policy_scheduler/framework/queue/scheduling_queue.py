"""The scheduling queue: upstream's PriorityQueue (pkg/scheduler/backend/queue), single-threaded.

Every pending pod is in exactly one place:

- **activeQ**: one heap per policy, ordered by that policy's QueueSort plugin (PrioritySort when
  it has none). ``pop`` takes the head with the highest priority across policies, and among
  policies whose heads tie on priority, takes them in turn (round-robin by policy name), so a
  policy with a long queue cannot starve another at the same priority.
- **backoffQ**: two heaps ordered by backoff expiry, one for pods rejected by plugins and one for
  pods whose attempt ended in an error (upstream's podBackoffQ and podErrorBackoffQ); pods whose
  backoff completed move to activeQ. SchedulerPopFromBackoffQ (on by default since v1.33): when
  activeQ is empty, ``pop`` takes the head of the rejected pods' heap before its backoff is
  over (never an errored pod), so an idle scheduler does not sleep out a backoff. PreEnqueue runs
  when a pod enters backoffQ, not again when it leaves.
- **unschedulable pool**: pods rejected by plugins, waiting for a cluster event that one of
  those plugins registered and whose hint says QUEUE (``move_all_to_active_or_backoff``), for
  their own update, or for the leftover flush after ``unschedulable_max_duration`` (5 minutes).
  Gated pods (a PreEnqueue plugin said no) wait here too, counted apart as ``gated``; an event
  is looked at for them only when their gating plugin registered it (or it is a wildcard), and
  then, as for any pool pod, the hints of every plugin that rejected them decide (the gating
  plugin is added to those, as upstream does); PreEnqueue runs again before they move.

A popped pod is *in flight* until ``add_unschedulable`` or ``done``; events arriving meanwhile are
replayed through the hints when it comes back. Structures and ``QueuedPodInfo``: subqueues.py;
what the plugins answer the queue (PreEnqueue, the queueing hints): hints.py.

Simplifications against upstream, all deliberate: no locking, no blocking ``pop``, no goroutines
(the caller runs ``pop``, ``flush_unschedulable_leftover`` every 30 s, and sleeps
``next_ready_in()``); the backoff expiry is not aligned to SchedulerPopFromBackoffQ's 1-second
window (ties in expiry: priority, then queue time); a pod group is no queue entry of its own: a
pod-group cycle ``take``s the group's queued members with the one popped (scheduler/group_cycle.py),
and Coscheduling keeps a group's pods together through its QueueSort.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..events import FORCE_ACTIVATE, UNSCHEDULABLE_TIMEOUT, ClusterEvent, ClusterEventWithHint, pod_change_events
from ..model.podinfo import PodInfo
from .hints import IMMEDIATELY, NO_PROFILE, SKIP, Hints, QueueProfile, is_pod_updated
from .subqueues import ActiveQueue, BackoffQueue, GatedPool, InFlight, Less, QueuedPodInfo

log = logging.getLogger(__name__)

ACTIVE = "active"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"
GATED = "gated"

# Event labels used by the queue itself (upstream framework/events.go).
EVENT_POD_ADD = "UnscheduledPodAdd"
EVENT_BACKOFF_COMPLETE = "BackoffComplete"
EVENT_ATTEMPT_FAILURE = "ScheduleAttemptFailure"
EVENT_POPPED_FROM_BACKOFF = "PoppedFromBackoffQ"  # our label: activeQ was empty (SchedulerPopFromBackoffQ)
EVENT_POLICY_CHANGED = "SchedulingPolicyChange"  # ours: the PreEnqueue plugins of a changed chain ran

class SchedulingQueue:
    def __init__(
        self,
        less: Less,
        clock: Callable[[], float] = time.monotonic,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        unschedulable_max_duration: float = 300.0,
        profile_of: Callable[[str], QueueProfile | None] | None = None,
        pseudo_events: Mapping[str, Sequence[ClusterEventWithHint]] | None = None,
        pop_from_backoff: bool = True,
    ) -> None:
        """``less``: the order of a policy without a QueueSort plugin. ``profile_of(policy)``:
        the policy's chain (None when it has none usable; then ``fallback`` is used: set it to a
        chain of the implicit plugins so gates hold for every pod). ``pseudo_events``: the
        registrations of rejector names that are not plugins (e.g. the engine's policy
        selection). ``pop_from_backoff``: upstream's SchedulerPopFromBackoffQ (see the module)."""
        self._clock = clock
        self.pop_from_backoff = pop_from_backoff
        self.unschedulable_max_duration = unschedulable_max_duration
        self._default_less = less
        self._profile_of = profile_of or (lambda _policy: None)
        self.fallback: QueueProfile = NO_PROFILE
        self._hints = Hints(self._profile, dict(pseudo_events or {}))  # PreEnqueue, the queueing hints
        self._active = ActiveQueue(self._less_of)
        self._backoff = BackoffQueue(clock, initial_backoff, max_backoff)
        self._unschedulable: dict[str, QueuedPodInfo] = {}  # the pool's pods no PreEnqueue plugin holds
        self._gated = GatedPool()  # and those one holds
        self._in_flight = InFlight()  # the pods popped and not done, and the events since
        self.moved_by_event: dict[str, int] = {}  # event label -> pods it moved out of the pool
        self.skipped_by_hint: dict[str, int] = {}  # event label -> pool pods it left in place
        # (sub-queue, event label) -> pods that entered it (upstream scheduler_queue_incoming_pods_total)
        self.incoming: dict[tuple[str, str], int] = {}
        # told of each pod a PreEnqueue plugin holds (entering the pool or staying there), after the
        # move: must return at once and change nothing here (the operator files the pod for a
        # search of what would place it: cluster/suggestions.py)
        self.on_gated: Callable[[QueuedPodInfo], None] | None = None

    def _count_in(self, queue: str, event: str) -> None:
        key = (queue, event)
        self.incoming[key] = self.incoming.get(key, 0) + 1

    # ---- profiles ------------------------------------------------------------------------

    def _profile(self, policy: str) -> QueueProfile:
        return self._profile_of(policy) or self.fallback

    def _less_of(self, policy: str) -> Less:
        qs = self._profile(policy).queue_sort
        return qs.less if qs is not None else self._default_less

    def policy_changed(self, policy: str) -> None:
        """The policy's chain changed: reorder its activeQ with its (new) QueueSort, and run its
        (new) PreEnqueue plugins on its pods in activeQ and backoffQ: a pod queued before its
        policy was known (at start-up, the pods come before the policies) or under a chain
        without these plugins must not reach a cycle that one of them would have held it from."""
        self._active.reorder(policy)
        queued = [q for q in self._active.items() if q.policy == policy]
        queued += [q for q in self._backoff.items() if q.policy == policy]
        for qpi in queued:
            if self._hints.pre_enqueue(qpi) is not None:
                self._gate(qpi, EVENT_POLICY_CHANGED)

    def backoff_duration(self, count: int) -> float:
        """upstream calculateBackoffDuration (``BackoffQueue.duration``)."""
        return self._backoff.duration(count)

    def _gate(self, qpi: QueuedPodInfo, event: str) -> str:
        gated = self._gated
        if not gated.holds(qpi):  # a gated pod that stays gated (same group) stays where it is
            if qpi.key not in gated:  # ... and did not enter anything
                self._count_in(GATED, event)
            self._drop_from_pool(qpi.key)
            self._backoff.remove(qpi.key)
            self._active.remove(qpi.key, qpi.policy)
            gated.add(qpi)
        log.debug("pod %s gated by %s: %s", qpi.key, qpi.gating_plugin, qpi.gating_message)
        if self.on_gated is not None:
            self.on_gated(qpi)
        return GATED

    # ---- moves between sub-queues ------------------------------------------------------

    def _drop_from_pool(self, key: str) -> QueuedPodInfo | None:
        return self._unschedulable.pop(key, None) or self._gated.pop(key)

    def _to_active(self, qpi: QueuedPodInfo, event: str) -> str:
        """upstream moveToActiveQ: PreEnqueue first; a gated pod goes to the pool instead."""
        if self._hints.pre_enqueue(qpi) is not None:
            return self._gate(qpi, event)
        if qpi.initial_attempt_timestamp is None:
            qpi.initial_attempt_timestamp = self._clock()
        self._drop_from_pool(qpi.key)
        self._backoff.remove(qpi.key)
        self._active.remove(qpi.key, qpi.policy)
        self._active.push(qpi)
        self._count_in(ACTIVE, event)
        log.debug("pod %s moved to the %s queue (event %s)", qpi.key, ACTIVE, event)
        return ACTIVE

    def _requeue(self, qpi: QueuedPodInfo, immediately: bool, event: str) -> str:
        """upstream requeuePodWithQueueingStrategy: backoffQ while still backing off, else activeQ;
        ``immediately`` (a Pending plugin's Queue hint) skips the backoff. PreEnqueue runs before
        either (SchedulerPopFromBackoffQ), so a pod gated meanwhile stays in the pool."""
        if not immediately and self._backoff.is_backing_off(qpi):
            if self._hints.pre_enqueue(qpi) is not None:
                return self._gate(qpi, event)
            self._drop_from_pool(qpi.key)
            self._backoff.push(qpi)
            self._count_in(BACKOFF, event)
            log.debug("pod %s moved to the %s queue (event %s)", qpi.key, BACKOFF, event)
            return BACKOFF
        return self._to_active(qpi, event)

    # ---- informer-driven operations ------------------------------------------------------

    def add(self, pod: PodInfo, policy: str) -> str | None:
        """upstream Add: a new pending pod goes to activeQ with timestamp now (or to the pool
        when a PreEnqueue plugin gates it). A pod already queued (or in flight) is updated
        instead. Returns where it went (None for an update)."""
        key = pod.key
        qpi = self.get(key)
        if qpi is not None:
            if qpi.policy != policy:
                self._move_policy(qpi, policy)
            self.update(pod)
            return None
        rec = self._in_flight.get(key)
        if rec is not None and not rec.deleted and rec.qpi.pod.uid == pod.uid:
            rec.qpi.policy = policy
            self.update(pod)
            return None
        if rec is not None:  # a different pod under the same name: the in-flight one is gone
            rec.deleted = True
        return self._to_active(QueuedPodInfo(pod=pod, policy=policy, timestamp=self._clock()), EVENT_POD_ADD)

    def _move_policy(self, qpi: QueuedPodInfo, policy: str) -> None:
        active = self._active.remove(qpi.key, qpi.policy) is not None
        gated = self._gated.pop(qpi.key)
        qpi.policy = policy
        if gated is not None:
            self._gated.add(qpi)
        if active:
            self._active.push(qpi)

    def update(self, pod: PodInfo) -> bool:
        """upstream Update. In activeQ or backoffQ the PodInfo is replaced in place. In the pool,
        an update that may make the pod schedulable (``is_pod_updated``) is turned into TargetPod
        events, and the pod moves if a rejecting (or gating) plugin's hint says so; other updates
        keep it in the pool. For an in-flight pod the newest version is kept for its requeue,
        and a relevant update counts as an event of its cycle. Returns False when the queue does
        not know the pod."""
        key = pod.key
        if self._active.replace(key, pod):  # reorders on a priority change
            return True
        qpi = self._backoff.get(key)
        if qpi is not None:
            qpi.pod = pod  # the expiry, the backoff heap's order, is unchanged
            return True
        qpi = self._unschedulable.get(key) or self._gated.get(key)
        if qpi is not None:
            old = qpi.pod
            changed = is_pod_updated(old, pod)
            qpi.pod = pod
            if changed:
                for ev in pod_change_events(old, pod, target=True):
                    if key in self._gated and not self._hints.gated_interested(qpi, ev):
                        continue
                    strategy = self._hints.strategy(qpi, ev, old, pod)
                    if strategy != SKIP:
                        if self._requeue(qpi, strategy == IMMEDIATELY, ev.label) != GATED:
                            break
            return True
        rec = self._in_flight.get(key)
        if rec is not None and not rec.deleted:
            if is_pod_updated(rec.latest or rec.qpi.pod, pod):
                rec.updated = True
            rec.latest = pod
            return True
        return False

    def delete(self, key: str) -> bool:
        """upstream Delete: drop the pod from whichever sub-queue holds it. An in-flight pod is
        marked so that a later ``add_unschedulable`` drops it."""
        found = (self._active.remove(key) or self._backoff.remove(key)
                 or self._drop_from_pool(key)) is not None
        rec = self._in_flight.get(key)
        if rec is not None:
            rec.deleted = True
            found = True
        return found

    # ---- scheduling-loop operations ------------------------------------------------------

    def pop(self) -> QueuedPodInfo | None:
        """upstream Pop, non-blocking: flush completed backoffs, then take the head of activeQ
        (highest priority across policies; ties between policies in turn). Increments the pod's
        attempts and the scheduling cycle, clears the plugins that rejected it last time, and
        marks it in flight. None when activeQ is empty."""
        self.flush_backoff_completed()
        if not self._active:
            qpi = self._backoff.rejected.pop() if self.pop_from_backoff else None
            if qpi is None:
                return None
            if qpi.initial_attempt_timestamp is None:
                qpi.initial_attempt_timestamp = self._clock()
            self._count_in(ACTIVE, EVENT_POPPED_FROM_BACKOFF)
            return self._start_flight(qpi)
        qpi = self._active.pop()
        return self._start_flight(qpi) if qpi is not None else None

    def take(self, key: str) -> QueuedPodInfo | None:
        """A pod-group cycle takes a queued (not gated) member with the one popped, into flight
        as ``pop`` does (upstream's group entity). None when it is not queued or gated."""
        if key in self._gated:
            return None
        qpi = self._active.remove(key) or self._backoff.remove(key) or self._drop_from_pool(key)
        if qpi is None:
            return None
        if qpi.initial_attempt_timestamp is None:
            qpi.initial_attempt_timestamp = self._clock()
        return self._start_flight(qpi)

    def _start_flight(self, qpi: QueuedPodInfo) -> QueuedPodInfo:
        qpi.attempts += 1
        self._in_flight.start(qpi)
        qpi.unschedulable_plugins = set()
        qpi.pending_plugins = set()
        return qpi

    def done(self, key: str) -> None:
        """upstream Done: the pod's attempt is over (bound, or given up)."""
        self._in_flight.end(key)

    def add_unschedulable(
        self,
        qpi: QueuedPodInfo,
        plugins: Iterable[str] = (),
        error: bool = False,
        pending_plugins: Iterable[str] = (),
    ) -> str | None:
        """upstream AddUnschedulableIfNotPresent, after a failed attempt; also ends the flight.

        ``plugins`` rejected the pod (Unschedulable / UnschedulableAndUnresolvable), and
        ``pending_plugins`` returned Pending. ``error=True`` (an Error status) records no plugins.
        Without rejecting plugins the failure counts as an error: the pod goes to backoffQ
        (activeQ once the backoff is over) and never waits for an event. Otherwise it goes to
        the pool, unless an event that arrived during its flight (replayed through the hints of
        the plugins that rejected it) or a relevant update of the pod itself may have made it
        schedulable: then backoffQ (activeQ for a Pending plugin's hint). The timestamp is
        refreshed to now and the backoff expiry recomputed. Returns the sub-queue it went to, or
        None when it was dropped (deleted while in flight, or already queued).
        """
        key = qpi.key
        rec = self._in_flight.get(key)
        events = self._in_flight.events_since(rec) if rec is not None else []
        self._in_flight.end(key)
        if (rec is not None and rec.deleted) or key in self:
            return None
        if rec is not None and rec.latest is not None:
            qpi.pod = rec.latest
        qpi.unschedulable_plugins = set() if error else set(plugins)
        qpi.pending_plugins = set() if error else set(pending_plugins)
        rejected = bool(qpi.unschedulable_plugins or qpi.pending_plugins)
        if rejected:
            qpi.unschedulable_count += 1
            qpi.consecutive_errors_count = 0
        else:
            qpi.consecutive_errors_count += 1
        qpi.timestamp = self._clock()
        qpi.backoff_expiry = self._backoff.expiry(qpi)
        if not rejected:
            return self._requeue(qpi, False, EVENT_ATTEMPT_FAILURE)
        if rec is not None and rec.updated:
            return self._requeue(qpi, bool(qpi.pending_plugins), EVENT_ATTEMPT_FAILURE)
        best = SKIP
        for _, ev, old, new in events:
            best = max(best, self._hints.strategy(qpi, ev, old, new))
            if best == IMMEDIATELY:
                break
        if best != SKIP:
            return self._requeue(qpi, best == IMMEDIATELY, EVENT_ATTEMPT_FAILURE)
        self._unschedulable[key] = qpi
        self._count_in(UNSCHEDULABLE, EVENT_ATTEMPT_FAILURE)
        log.debug("pod %s moved to the %s queue (event %s)", key, UNSCHEDULABLE, EVENT_ATTEMPT_FAILURE)
        return UNSCHEDULABLE

    def move_all_to_active_or_backoff(
        self, event: ClusterEvent, old: Any = None, new: Any = None,
        pre_check: Callable[[QueuedPodInfo], bool] | None = None,
    ) -> int:
        """upstream MoveAllToActiveOrBackoffQueue: a cluster event may have made pool pods
        schedulable. A pool pod passing ``pre_check`` moves when a plugin that rejected it
        registered the event and that plugin's hint says QUEUE (to backoffQ if still backing
        off, else activeQ); a gated pod only on its gating plugin's events, and PreEnqueue runs
        again. The event is also recorded for the pods in flight. Returns the count moved."""
        self._in_flight.record(event, old, new)
        if not self._unschedulable and not self._gated:
            return 0
        moved = skipped = 0
        cache: dict = {}
        # gated pods of the groups whose gating plugin registered the event, then the others
        pods = [q for m in self._gated.groups() if self._hints.gated_interested(next(iter(m)), event, cache) for q in m]
        for qpi in pods + list(self._unschedulable.values()):
            if pre_check is not None and not pre_check(qpi):
                continue
            strategy = self._hints.strategy(qpi, event, old, new, cache)
            if strategy == SKIP:
                skipped += 1
                continue
            if qpi.gating_plugin is not None and qpi.key in self._gated and self._hints.still_gated(qpi):
                continue  # PreEnqueue would gate it again as it is (e.g. its preemption still runs)
            if self._requeue(qpi, strategy == IMMEDIATELY, event.label) != GATED:
                moved += 1
        label = event.label
        if moved:
            self.moved_by_event[label] = self.moved_by_event.get(label, 0) + moved
        if skipped:
            self.skipped_by_hint[label] = self.skipped_by_hint.get(label, 0) + skipped
        return moved

    def flush_unschedulable_leftover(self) -> int:
        """upstream flushUnschedulablePodsLeftover: pods in the pool for longer than
        ``unschedulable_max_duration`` since their timestamp move out with the wildcard event
        UnschedulableTimeout (backoff applies; gated pods run PreEnqueue again and most stay).
        Returns the count moved out of the pool."""
        now = self._clock()
        pods = [q for q in [*self._unschedulable.values(), *self._gated.values()]
                if now - q.timestamp > self.unschedulable_max_duration]
        if not pods:
            return 0
        self._in_flight.record(UNSCHEDULABLE_TIMEOUT)
        moved = 0
        for qpi in pods:
            if qpi.key in self._gated:
                qpi.timestamp = now  # checked again after another full period
                if self._to_active(qpi, UNSCHEDULABLE_TIMEOUT.label) != GATED:
                    moved += 1
                continue
            self._requeue(qpi, False, UNSCHEDULABLE_TIMEOUT.label)
            moved += 1
        return moved

    def activate(self, keys: Iterable[str]) -> int:
        """upstream Activate: move these pods from the pool or backoffQ to activeQ now. For a pod
        in flight, a ForceActivate event is recorded, so it is requeued when it comes back."""
        n = 0
        for key in keys:
            qpi = self._unschedulable.get(key) or self._gated.get(key) or self._backoff.get(key)
            if qpi is not None:
                if self._to_active(qpi, FORCE_ACTIVATE.label) == ACTIVE:
                    n += 1
            elif key in self._in_flight:
                self._in_flight.record(FORCE_ACTIVATE)
        return n

    def flush_backoff_completed(self) -> int:
        """upstream flushBackoffQCompleted: move every pod whose backoff is over to activeQ."""
        moved = 0
        while (qpi := self._backoff.peek()) is not None and not self._backoff.is_backing_off(qpi):
            self._backoff.pop()
            self._to_active(qpi, EVENT_BACKOFF_COMPLETE)
            moved += 1
        return moved

    def next_ready_in(self) -> float | None:
        """Seconds until the earliest backoff expiry (0 if already due, or when a rejected pod may
        be popped early), None if backoffQ is empty."""
        qpi = self._backoff.peek()
        if qpi is None:
            return None
        if self.pop_from_backoff and len(self._backoff.rejected) and not self._active:
            return 0.0
        return max(0.0, (qpi.backoff_expiry or 0.0) - self._clock())

    # ---- inspection ----------------------------------------------------------------------

    @property
    def scheduling_cycle(self) -> int:
        return self._in_flight.cycle

    def __len__(self) -> int:
        return len(self._active) + len(self._backoff) + len(self._unschedulable) + len(self._gated)

    def __contains__(self, key: str) -> bool:
        return self.state_of(key) is not None

    def get(self, key: str) -> QueuedPodInfo | None:
        return self._active.get(key) or self._backoff.get(key) or self._unschedulable.get(key) or self._gated.get(key)

    def state_of(self, key: str) -> str | None:
        """ACTIVE, BACKOFF, UNSCHEDULABLE or GATED; None if not queued (in flight pods are not)."""
        if key in self._backoff:
            return BACKOFF
        if key in self._unschedulable:
            return UNSCHEDULABLE
        if key in self._gated:
            return GATED
        if self._active.get(key) is not None:
            return ACTIVE
        return None

    def is_in_flight(self, key: str) -> bool:
        return key in self._in_flight

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    @property
    def active_count(self) -> int:
        return len(self._active)

    def pending_pods(self, policy: str | None = None) -> list[QueuedPodInfo]:
        """upstream PendingPods: activeQ, then backoffQ, then the pool (each unordered)."""
        pods = self._active.items()
        pods += self._backoff.items() + list(self._unschedulable.values()) + self._gated.values()
        return pods if policy is None else [q for q in pods if q.policy == policy]

    def unschedulable_plugin_counts(self) -> dict[tuple[str, str], int]:
        """(policy, plugin) -> pods in the unschedulable pool that plugin rejected (or gates, or
        answered Pending for): upstream's scheduler_unschedulable_pods."""
        out: dict[tuple[str, str], int] = {}
        for q in [*self._unschedulable.values(), *self._gated.values()]:
            for plugin in q.unschedulable_plugins | q.pending_plugins:
                key = (q.policy, plugin)
                out[key] = out.get(key, 0) + 1
        return out

    def counts(self, policy: str | None = None) -> dict[str, int]:
        """Pending pods per sub-queue (the pending_pods gauge), optionally for one policy; the
        pool is split into ``unschedulable`` and ``gated``."""
        if policy is None:
            return {ACTIVE: len(self._active), BACKOFF: len(self._backoff),
                    UNSCHEDULABLE: len(self._unschedulable), GATED: len(self._gated)}
        return {
            ACTIVE: self._active.count(policy),
            BACKOFF: sum(q.policy == policy for q in self._backoff.items()),
            UNSCHEDULABLE: sum(q.policy == policy for q in self._unschedulable.values()),
            GATED: sum(q.policy == policy for q in self._gated.values()),
        }
