"""The structures the scheduling queue (scheduling_queue.py) moves pods between, and the pod entry
they hold.

- ``QueuedPodInfo``: a pending pod with its queue bookkeeping (upstream framework.QueuedPodInfo,
  framework/types.go).
- ``Heap``: a keyed heap with lazy deletion (upstream backend/heap/heap.go).
- ``ActiveQueue``: activeQ, one heap per policy, popped by priority across policies and in turn
  among policies that tie (upstream backend/queue/active_queue.go, per policy here).
- ``InFlight``: the pods popped and not done yet, and the cluster events recorded while they
  are out (upstream's inFlightPods and inFlightEvents, also in active_queue.go).
- ``BackoffQueue``: backoffQ, the rejected and the errored pods by backoff expiry, and the
  backoff lengths (upstream backend/queue/backoff_queue.go: podBackoffQ, podErrorBackoffQ,
  calculateBackoffDuration).

They decide nothing: which pod goes where, and when (PreEnqueue, the hints), is
scheduling_queue.py's.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from ..model.podinfo import PodInfo


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
    gating_plugin: str | None = None  # the PreEnqueue plugin holding the pod back, if any
    gating_message: str = ""
    entity_size: int = 1  # the members of its pod group queued with it (upstream's entity Size)

    @property
    def key(self) -> str:
        return self.pod.key


Less = Callable[[QueuedPodInfo, QueuedPodInfo], bool]


# ------------------------------------------------------------------------------ heap

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


class Heap:
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


# ------------------------------------------------------------------------------ activeQ

class ActiveQueue:
    """activeQ: a heap per policy, ordered by ``less_of(policy)`` (the policy's QueueSort).
    ``pop`` takes the head with the highest priority across policies and, among policies whose
    heads tie on priority, takes them in turn (round-robin by policy name)."""

    def __init__(self, less_of: Callable[[str], Less]) -> None:
        self._less_of = less_of
        self._heaps: dict[str, Heap] = {}  # policy -> its heap
        self._n = 0
        self._last_policy = ""  # round-robin position among policies

    def __len__(self) -> int:
        return self._n

    def get(self, key: str) -> QueuedPodInfo | None:
        for h in self._heaps.values():
            qpi = h.get(key)
            if qpi is not None:
                return qpi
        return None

    def push(self, qpi: QueuedPodInfo) -> None:
        """Into its policy's heap; a pod already there is reordered (e.g. a priority change)."""
        h = self._heaps.get(qpi.policy)
        if h is None:
            h = self._heaps[qpi.policy] = Heap(self._less_of(qpi.policy))
        if qpi.key not in h:
            self._n += 1
        h.push(qpi)

    def replace(self, key: str, pod: PodInfo) -> bool:
        """A new version of a pod in activeQ: replaced in place and reordered (e.g. a priority
        change). False when activeQ does not hold the pod."""
        for h in self._heaps.values():
            qpi = h.get(key)
            if qpi is not None:
                qpi.pod = pod
                h.push(qpi)
                return True
        return False

    def remove(self, key: str, policy: str | None = None) -> QueuedPodInfo | None:
        heaps = [self._heaps[policy]] if policy in self._heaps else self._heaps.values()
        for h in heaps:
            qpi = h.remove(key)
            if qpi is not None:
                self._n -= 1
                return qpi
        if policy is not None:  # the pod may sit under the policy it had before
            return self.remove(key)
        return None

    def pop(self) -> QueuedPodInfo | None:
        best: list[tuple[str, QueuedPodInfo]] = []
        top = None
        for policy, h in self._heaps.items():
            head = h.peek()
            if head is None:
                continue
            prio = head.pod.priority
            if top is None or prio > top:
                top, best = prio, [(policy, head)]
            elif prio == top:
                best.append((policy, head))
        if not best:
            return None
        if len(best) == 1:
            policy, _ = best[0]
        else:
            names = sorted(p for p, _ in best)
            policy = next((p for p in names if p > self._last_policy), names[0])
        self._last_policy = policy
        self._n -= 1
        return self._heaps[policy].pop()

    def reorder(self, policy: str) -> None:
        """The policy's order changed: rebuild its heap (pods in the order they were queued)."""
        h = self._heaps.get(policy)
        if h is None:
            return
        items = h.items()
        nh = self._heaps[policy] = Heap(self._less_of(policy))
        for qpi in sorted(items, key=lambda q: q.timestamp):
            nh.push(qpi)

    def items(self) -> list[QueuedPodInfo]:
        return [q for h in self._heaps.values() for q in h.items()]

    def count(self, policy: str) -> int:
        h = self._heaps.get(policy)
        return len(h) if h is not None else 0


# ------------------------------------------------------------------------------ in flight

@dataclass(slots=True)
class InFlightPod:
    qpi: QueuedPodInfo
    cycle: int
    event_seq: int  # events recorded after this sequence number arrived during the flight
    latest: PodInfo | None = None  # newest version received while in flight
    updated: bool = False  # an update that may make it schedulable arrived while in flight
    deleted: bool = False
    ended: bool = False


class InFlight:
    """The pods popped and not done yet (by key), the scheduling cycle count, and the cluster
    events recorded while any pod is out, kept until no pod popped before them is out."""

    def __init__(self) -> None:
        self._pods: dict[str, InFlightPod] = {}
        self._order: deque[InFlightPod] = deque()  # in pop order; ended ones dropped lazily
        self._events: deque[tuple[int, Any, Any, Any]] = deque()  # (seq, event, old, new)
        self._event_seq = 0
        self.cycle = 0

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, key: str) -> bool:
        return key in self._pods

    def get(self, key: str) -> InFlightPod | None:
        return self._pods.get(key)

    def start(self, qpi: QueuedPodInfo) -> InFlightPod:
        """A new scheduling cycle for ``qpi``."""
        self.cycle += 1
        rec = self._pods[qpi.key] = InFlightPod(qpi, self.cycle, self._event_seq)
        self._order.append(rec)
        return rec

    def end(self, key: str) -> InFlightPod | None:
        rec = self._pods.pop(key, None)
        if rec is None:
            return None
        rec.ended = True
        order = self._order
        while order and order[0].ended:
            order.popleft()
        if not order:
            self._events.clear()
        elif self._events:  # events older than the oldest flight are of no use any more
            oldest = order[0].event_seq
            events = self._events
            while events and events[0][0] <= oldest:
                events.popleft()
        return rec

    def record(self, event: Any, old: Any = None, new: Any = None) -> None:
        """A cluster event, kept for the pods out now (nothing is kept when none is)."""
        if self._pods:
            self._event_seq += 1
            self._events.append((self._event_seq, event, old, new))

    def events_since(self, rec: InFlightPod) -> list[tuple[int, Any, Any, Any]]:
        """The events recorded during ``rec``'s flight, oldest first."""
        return [e for e in self._events if e[0] > rec.event_seq] if self._events else []


# ------------------------------------------------------------------------------ backoffQ

def _expires_first(a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
    return (a.backoff_expiry or 0.0) < (b.backoff_expiry or 0.0)


def _expires_first_then_priority(a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
    ea, eb = a.backoff_expiry or 0.0, b.backoff_expiry or 0.0
    if ea != eb:
        return ea < eb
    pa, pb = a.pod.priority, b.pod.priority
    return pa > pb or (pa == pb and a.timestamp < b.timestamp)


class BackoffQueue:
    """backoffQ: rejected pods (``rejected``) and errored pods (``errored``), each a heap by
    expiry; a pod is in one of them at most. With the backoff lengths: ``initial`` doubled per
    failure up to ``max`` (seconds; ``max`` 0: no backoff)."""

    def __init__(self, clock: Callable[[], float], initial: float = 1.0, max_backoff: float = 10.0) -> None:
        self.rejected = Heap(_expires_first_then_priority)
        self.errored = Heap(_expires_first)
        self._clock = clock
        self.initial = initial
        self.max = max_backoff

    def duration(self, count: int, size: int = 1) -> float:
        """upstream calculateBackoffDuration: initial * 2^(count-1), capped at max (the doubling
        stops as soon as it would pass max); 0 for a pod that never failed. A pod group's members
        (``size`` > 1) have max multiplied by the square root of the group's queued size."""
        if count == 0:
            return 0.0
        cap = self.max * math.sqrt(size) if size > 1 else self.max
        duration = self.initial
        for _ in range(1, count):
            if duration > cap - duration:
                return cap
            duration += duration
        return min(duration, cap)

    def expiry(self, qpi: QueuedPodInfo) -> float | None:
        """upstream getBackoffTime: from the pod's timestamp, by its consecutive errors, else
        its rejections; none when max backoff is 0 or the pod never failed."""
        if self.max == 0:
            return None
        count = qpi.consecutive_errors_count or qpi.unschedulable_count
        if count == 0:
            return None
        return qpi.timestamp + self.duration(count, qpi.entity_size)

    def is_backing_off(self, qpi: QueuedPodInfo) -> bool:
        """upstream isPodBackingoff: the expiry instant itself still counts as backing off."""
        return qpi.backoff_expiry is not None and qpi.backoff_expiry >= self._clock()

    def __len__(self) -> int:
        return len(self.rejected) + len(self.errored)

    def __contains__(self, key: str) -> bool:
        return key in self.rejected or key in self.errored

    def get(self, key: str) -> QueuedPodInfo | None:
        return self.rejected.get(key) or self.errored.get(key)

    def items(self) -> list[QueuedPodInfo]:
        return self.rejected.items() + self.errored.items()

    def push(self, qpi: QueuedPodInfo) -> None:
        if qpi.unschedulable_plugins or qpi.pending_plugins:
            self.errored.remove(qpi.key)
            self.rejected.push(qpi)
        else:
            self.rejected.remove(qpi.key)
            self.errored.push(qpi)

    def remove(self, key: str) -> QueuedPodInfo | None:
        return self.rejected.remove(key) or self.errored.remove(key)

    def peek(self) -> QueuedPodInfo | None:
        """The pod whose backoff ends first, of both heaps."""
        a, b = self.rejected.peek(), self.errored.peek()
        if a is None or b is None:
            return a or b
        return b if _expires_first(b, a) else a

    def pop(self) -> QueuedPodInfo | None:
        qpi = self.peek()
        if qpi is not None:
            self.remove(qpi.key)
        return qpi


class GatedPool:
    """The pool's gated pods (a PreEnqueue plugin holds them), by (policy, gating plugin): a
    cluster event reaches a gated pod only through its gating plugin's registrations, so the
    queue asks once per group, not once per pod (10,000 gated pods otherwise cost every pod
    event a walk over all of them). The group is the one the pod had when it was gated."""

    def __init__(self) -> None:
        self._group_of: dict[str, tuple[str, str]] = {}
        self._groups: dict[tuple[str, str], dict[str, QueuedPodInfo]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._group_of

    def __len__(self) -> int:
        return len(self._group_of)

    def holds(self, qpi: QueuedPodInfo) -> bool:
        """``qpi`` itself is here, in the group of its policy and gating plugin."""
        group = self._group_of.get(qpi.key)
        return group is not None and group == (qpi.policy, qpi.gating_plugin or "") \
            and self._groups[group][qpi.key] is qpi

    def add(self, qpi: QueuedPodInfo) -> None:
        self.pop(qpi.key)
        group = (qpi.policy, qpi.gating_plugin or "")
        self._group_of[qpi.key] = group
        self._groups.setdefault(group, {})[qpi.key] = qpi

    def pop(self, key: str) -> QueuedPodInfo | None:
        group = self._group_of.pop(key, None)
        if group is None:
            return None
        members = self._groups[group]
        qpi = members.pop(key)
        if not members:
            del self._groups[group]
        return qpi

    def get(self, key: str) -> QueuedPodInfo | None:
        group = self._group_of.get(key)
        return None if group is None else self._groups[group][key]

    def groups(self) -> list:
        """Each (policy, gating plugin)'s pods, a live view of each (never empty): read them all
        before moving any."""
        return [m.values() for m in self._groups.values()]

    def values(self) -> list[QueuedPodInfo]:
        return [q for m in self._groups.values() for q in m.values()]
