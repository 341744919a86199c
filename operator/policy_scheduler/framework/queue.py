"""The scheduling queue: upstream's PriorityQueue (pkg/scheduler/backend/queue), single-threaded.

Three sub-queues hold every pending pod exactly once:

- **activeQ**: a heap ordered by the QueueSort plugin's ``less``; ``pop`` takes its head.
- **backoffQ**: a heap ordered by backoff expiry; pods whose backoff completed move to activeQ.
- **unschedulable pool**: pods rejected by plugins, waiting for a cluster event
  (``move_all_to_active_or_backoff``) or for the leftover flush after
  ``unschedulable_max_duration`` (5 minutes).

A popped pod is *in flight* until ``add_unschedulable`` (failure) or ``done`` (success).
Cluster events that arrive while pods are in flight are remembered (upstream's
moveRequestCycle); a pod whose cycle saw one goes to backoffQ instead of the pool, because
the event may already have made it schedulable.

Simplifications against upstream, all deliberate:

- No locking, no blocking ``pop``, no background goroutines: the caller runs ``pop``
  (which flushes completed backoffs first), ``flush_unschedulable_leftover`` (upstream: every
  30 s) and sleeps ``next_ready_in()`` between attempts.
- QueueingHints are not modelled: every event is of interest to every rejecting plugin
  (all hints answer Queue); ``pre_check`` narrows the pods an event moves, as upstream's
  PreEnqueueCheck does.
- SchedulerPopFromBackoffQ is off: a pod never leaves backoffQ before its expiry, and the
  expiry is not aligned to the 1-second ordering window (both belong to that feature).
- No PreEnqueue plugins (gating), no nominator, no pod groups.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from .podinfo import PodInfo

log = logging.getLogger(__name__)

ACTIVE = "active"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"

# Event labels used by the queue itself (upstream framework/events.go).
EVENT_POD_ADD = "UnscheduledPodAdd"
EVENT_POD_UPDATE = "UnscheduledPodUpdate"
EVENT_UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"
EVENT_BACKOFF_COMPLETE = "BackoffComplete"
EVENT_ATTEMPT_FAILURE = "ScheduleAttemptFailure"


@dataclass(eq=False, slots=True)
class QueuedPodInfo:
    """A pod in the queue, upstream's framework.QueuedPodInfo.

    ``timestamp`` is when the pod was added, refreshed each time a failed attempt puts it back;
    PrioritySort breaks priority ties on it and both the backoff and the leftover flush are
    measured from it. Backoff grows with ``unschedulable_count`` (plugin rejections), or with
    ``consecutive_errors_count`` while the latest failures were errors; ``attempts`` counts pops.
    """

    pod: PodInfo
    policy: str
    timestamp: float
    initial_attempt_timestamp: float | None = None
    attempts: int = 0
    unschedulable_count: int = 0
    consecutive_errors_count: int = 0
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    backoff_expiry: float | None = None

    @property
    def key(self) -> str:
        return self.pod.key


Less = Callable[[QueuedPodInfo, QueuedPodInfo], bool]


class _Entry:
    __slots__ = ("item", "seq", "less", "live")

    def __init__(self, item: QueuedPodInfo, seq: int, less: Less) -> None:
        self.item, self.seq, self.less, self.live = item, seq, less, True

    def __lt__(self, other: "_Entry") -> bool:
        # Ties under ``less`` fall back to insertion order, so equal pods pop FIFO.
        if self.less(self.item, other.item):
            return True
        if self.less(other.item, self.item):
            return False
        return self.seq < other.seq


class _Heap:
    """A keyed heap (upstream backend/heap) with lazy deletion."""

    def __init__(self, less: Less) -> None:
        self._less = less
        self._heap: list[_Entry] = []
        self._index: dict[str, _Entry] = {}
        self._seq = itertools.count()
        self._dead = 0

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: str) -> bool:
        return key in self._index

    def get(self, key: str) -> QueuedPodInfo | None:
        e = self._index.get(key)
        return e.item if e else None

    def items(self) -> list[QueuedPodInfo]:
        return [e.item for e in self._index.values()]

    def push(self, item: QueuedPodInfo) -> None:
        self.remove(item.key)
        e = _Entry(item, next(self._seq), self._less)
        self._index[item.key] = e
        heapq.heappush(self._heap, e)

    def remove(self, key: str) -> QueuedPodInfo | None:
        e = self._index.pop(key, None)
        if e is None:
            return None
        e.live = False
        self._dead += 1
        if self._dead > 64 and self._dead > len(self._index):
            self._heap = [x for x in self._heap if x.live]
            heapq.heapify(self._heap)
            self._dead = 0
        return e.item

    def peek(self) -> QueuedPodInfo | None:
        while self._heap and not self._heap[0].live:
            heapq.heappop(self._heap)
            self._dead -= 1
        return self._heap[0].item if self._heap else None

    def pop(self) -> QueuedPodInfo | None:
        item = self.peek()
        if item is not None:
            heapq.heappop(self._heap)
            del self._index[item.key]
        return item


def _expires_first(a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
    return (a.backoff_expiry or 0.0) < (b.backoff_expiry or 0.0)


_IGNORED_METADATA = ("resourceVersion", "generation", "managedFields", "finalizers")
_KEPT_STATUS = ("resourceClaimStatuses", "extendedResourceClaimStatus")


def _strip(raw: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in raw.items() if k not in ("metadata", "status")}
    out["metadata"] = {k: v for k, v in (raw.get("metadata") or {}).items() if k not in _IGNORED_METADATA}
    status = raw.get("status") or {}
    out["status"] = {k: status[k] for k in _KEPT_STATUS if k in status}
    return out


def is_pod_updated(old: PodInfo, new: PodInfo) -> bool:
    """upstream isPodUpdated: did the pod change in a way that may make it schedulable?

    Ignores resourceVersion, generation, managedFields, finalizers and the status (except
    resource-claim statuses), so the scheduler's own PodScheduled condition write does not
    pull a pod out of the unschedulable pool."""
    if old.raw is None or new.raw is None:
        return old != new
    return _strip(old.raw) != _strip(new.raw)


@dataclass(slots=True)
class _InFlight:
    qpi: QueuedPodInfo
    cycle: int
    latest: PodInfo | None = None  # newest version received while in flight
    updated: bool = False  # an update that may make it schedulable arrived while in flight
    deleted: bool = False


class SchedulingQueue:
    def __init__(
        self,
        less: Less,
        clock: Callable[[], float] = time.monotonic,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        unschedulable_max_duration: float = 300.0,
    ) -> None:
        self._clock = clock
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.unschedulable_max_duration = unschedulable_max_duration
        self._active = _Heap(less)
        self._backoff = _Heap(_expires_first)
        self._unschedulable: dict[str, QueuedPodInfo] = {}
        self._in_flight: dict[str, _InFlight] = {}
        self._cycle = 0
        self._move_request_cycle = -1

    # ---- backoff -------------------------------------------------------------------------

    def backoff_duration(self, count: int) -> float:
        """upstream calculateBackoffDuration: initial * 2^(count-1), capped at max (the doubling
        stops as soon as it would pass max); 0 for a pod that never failed."""
        if count == 0:
            return 0.0
        duration = self.initial_backoff
        for _ in range(1, count):
            if duration > self.max_backoff - duration:
                return self.max_backoff
            duration += duration
        return duration

    def _backoff_expiry(self, qpi: QueuedPodInfo) -> float | None:
        """upstream getBackoffTime: from the pod's timestamp; none when max backoff is 0."""
        if self.max_backoff == 0:
            return None
        count = qpi.consecutive_errors_count or qpi.unschedulable_count
        if count == 0:
            return None
        return qpi.timestamp + self.backoff_duration(count)

    def is_backing_off(self, qpi: QueuedPodInfo) -> bool:
        """upstream isPodBackingoff: the expiry instant itself still counts as backing off."""
        return qpi.backoff_expiry is not None and qpi.backoff_expiry >= self._clock()

    # ---- moves between sub-queues ------------------------------------------------------

    def _to_active(self, qpi: QueuedPodInfo, event: str) -> str:
        """upstream moveToActiveQ (without PreEnqueue)."""
        if qpi.initial_attempt_timestamp is None:
            qpi.initial_attempt_timestamp = self._clock()
        self._unschedulable.pop(qpi.key, None)
        self._backoff.remove(qpi.key)
        self._active.push(qpi)
        log.debug("pod %s moved to the %s queue (event %s)", qpi.key, ACTIVE, event)
        return ACTIVE

    def _requeue(self, qpi: QueuedPodInfo, immediately: bool, event: str) -> str:
        """upstream requeuePodWithQueueingStrategy: backoffQ while still backing off, else activeQ;
        ``immediately`` (a Pending plugin's Queue hint) skips the backoff."""
        self._unschedulable.pop(qpi.key, None)
        if not immediately and self.is_backing_off(qpi):
            self._backoff.push(qpi)
            log.debug("pod %s moved to the %s queue (event %s)", qpi.key, BACKOFF, event)
            return BACKOFF
        return self._to_active(qpi, event)

    def _move_pods(self, pods: Iterable[QueuedPodInfo], event: str, wildcard: bool) -> int:
        """upstream movePodsToActiveOrBackoffQueue. With every hint answering Queue, a pod with
        Pending plugins goes straight to activeQ, except on wildcard events (the leftover flush),
        which always honour the backoff."""
        moved = 0
        for qpi in pods:
            self._requeue(qpi, not wildcard and bool(qpi.pending_plugins), event)
            moved += 1
        self._move_request_cycle = self._cycle
        return moved

    # ---- informer-driven operations ------------------------------------------------------

    def add(self, pod: PodInfo, policy: str) -> None:
        """upstream Add: a new pending pod goes to activeQ with timestamp now. A pod already
        queued (or in flight) is updated instead."""
        key = pod.key
        qpi = self.get(key)
        if qpi is not None:
            qpi.policy = policy
            self.update(pod)
            return
        rec = self._in_flight.get(key)
        if rec is not None and not rec.deleted and rec.qpi.pod.uid == pod.uid:
            rec.qpi.policy = policy
            self.update(pod)
            return
        if rec is not None:  # a different pod under the same name: the in-flight one is gone
            rec.deleted = True
        self._to_active(QueuedPodInfo(pod=pod, policy=policy, timestamp=self._clock()), EVENT_POD_ADD)

    def update(self, pod: PodInfo) -> bool:
        """upstream Update. In activeQ or backoffQ the PodInfo is replaced in place. In the pool,
        an update that may make the pod schedulable (``is_pod_updated``) moves it to backoffQ if
        still backing off, else activeQ; other updates keep it in the pool. For an in-flight pod
        the newest version is kept for its requeue, and a relevant update counts as an event of
        its cycle. Returns False when the queue does not know the pod."""
        key = pod.key
        qpi = self._active.get(key)
        if qpi is not None:
            qpi.pod = pod
            self._active.push(qpi)
            return True
        qpi = self._backoff.get(key)
        if qpi is not None:
            qpi.pod = pod  # the expiry, the backoff heap's order, is unchanged
            return True
        qpi = self._unschedulable.get(key)
        if qpi is not None:
            changed = is_pod_updated(qpi.pod, pod)
            qpi.pod = pod
            if changed:
                self._requeue(qpi, bool(qpi.pending_plugins), EVENT_POD_UPDATE)
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
                 or self._unschedulable.pop(key, None)) is not None
        rec = self._in_flight.get(key)
        if rec is not None:
            rec.deleted = True
            found = True
        return found

    # ---- scheduling-loop operations ------------------------------------------------------

    def pop(self) -> QueuedPodInfo | None:
        """upstream Pop, non-blocking: flush completed backoffs, then take activeQ's head.
        Increments the pod's attempts and the scheduling cycle, clears the plugins that rejected
        it last time, and marks it in flight. None when activeQ is empty."""
        self.flush_backoff_completed()
        qpi = self._active.pop()
        if qpi is None:
            return None
        qpi.attempts += 1
        self._cycle += 1
        self._in_flight[qpi.key] = _InFlight(qpi, self._cycle)
        qpi.unschedulable_plugins = set()
        qpi.pending_plugins = set()
        return qpi

    def done(self, key: str) -> None:
        """upstream Done: the pod's attempt is over (bound, or given up)."""
        self._in_flight.pop(key, None)

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
        the pool, unless an event arrived during its cycle (a move request, or a relevant update
        of the pod itself): then backoffQ as well. The timestamp is refreshed to now and the
        backoff expiry recomputed. Returns the sub-queue it went to, or None when it was dropped
        (deleted while in flight, or already queued).
        """
        key = qpi.key
        rec = self._in_flight.pop(key, None)
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
        qpi.backoff_expiry = self._backoff_expiry(qpi)
        if not rejected:
            return self._requeue(qpi, False, EVENT_ATTEMPT_FAILURE)
        cycle = rec.cycle if rec is not None else self._cycle
        if self._move_request_cycle >= cycle or (rec is not None and rec.updated):
            return self._requeue(qpi, bool(qpi.pending_plugins), EVENT_ATTEMPT_FAILURE)
        self._unschedulable[key] = qpi
        log.debug("pod %s moved to the %s queue (event %s)", key, UNSCHEDULABLE, EVENT_ATTEMPT_FAILURE)
        return UNSCHEDULABLE

    def move_all_to_active_or_backoff(
        self, event: str, pre_check: Callable[[QueuedPodInfo], bool] | None = None
    ) -> int:
        """upstream MoveAllToActiveOrBackoffQueue: a cluster event (``event`` is its label, e.g.
        "NodeAdd") may have made pool pods schedulable. Every pool pod passing ``pre_check``
        moves to backoffQ if still backing off, else activeQ. Records a move request even when
        nothing moved, so pods in flight now go to backoffQ if they fail. Returns the count."""
        pods = [q for q in self._unschedulable.values() if pre_check is None or pre_check(q)]
        return self._move_pods(pods, event, wildcard=False)

    def flush_unschedulable_leftover(self) -> int:
        """upstream flushUnschedulablePodsLeftover: pods in the pool for longer than
        ``unschedulable_max_duration`` since their timestamp move out (event
        UnschedulableTimeout). Returns the count."""
        now = self._clock()
        pods = [q for q in self._unschedulable.values()
                if now - q.timestamp > self.unschedulable_max_duration]
        return self._move_pods(pods, EVENT_UNSCHEDULABLE_TIMEOUT, wildcard=True) if pods else 0

    def flush_backoff_completed(self) -> int:
        """upstream flushBackoffQCompleted: move every pod whose backoff is over to activeQ."""
        moved = 0
        while (qpi := self._backoff.peek()) is not None and not self.is_backing_off(qpi):
            self._backoff.pop()
            self._to_active(qpi, EVENT_BACKOFF_COMPLETE)
            moved += 1
        return moved

    def next_ready_in(self) -> float | None:
        """Seconds until the earliest backoff expiry (0 if already due), None if backoffQ is empty."""
        qpi = self._backoff.peek()
        if qpi is None:
            return None
        return max(0.0, (qpi.backoff_expiry or 0.0) - self._clock())

    # ---- inspection ----------------------------------------------------------------------

    @property
    def scheduling_cycle(self) -> int:
        return self._cycle

    def __len__(self) -> int:
        return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def __contains__(self, key: str) -> bool:
        return key in self._active or key in self._backoff or key in self._unschedulable

    def get(self, key: str) -> QueuedPodInfo | None:
        return self._active.get(key) or self._backoff.get(key) or self._unschedulable.get(key)

    def state_of(self, key: str) -> str | None:
        """ACTIVE, BACKOFF or UNSCHEDULABLE; None if not queued (in flight pods are not queued)."""
        if key in self._active:
            return ACTIVE
        if key in self._backoff:
            return BACKOFF
        if key in self._unschedulable:
            return UNSCHEDULABLE
        return None

    def is_in_flight(self, key: str) -> bool:
        return key in self._in_flight

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def pending_pods(self, policy: str | None = None) -> list[QueuedPodInfo]:
        """upstream PendingPods: activeQ, then backoffQ, then the pool (each unordered)."""
        pods = self._active.items() + self._backoff.items() + list(self._unschedulable.values())
        return pods if policy is None else [q for q in pods if q.policy == policy]

    def counts(self, policy: str | None = None) -> dict[str, int]:
        """Pending pods per sub-queue (the pending_pods gauge), optionally for one policy."""
        if policy is None:
            return {ACTIVE: len(self._active), BACKOFF: len(self._backoff),
                    UNSCHEDULABLE: len(self._unschedulable)}
        return {
            ACTIVE: sum(q.policy == policy for q in self._active.items()),
            BACKOFF: sum(q.policy == policy for q in self._backoff.items()),
            UNSCHEDULABLE: sum(q.policy == policy for q in self._unschedulable.values()),
        }
