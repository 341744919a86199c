"""What the gang plugins share (Coscheduling, coscheduling.py, for scheduler-plugins' PodGroups;
GangScheduling, gang_scheduling.py, for Kubernetes' own): a group rejected as one (PostFilter,
Unreserve) with its waiting members released, reservations counted (Reserve), the hints on the
group's events, resource amounts for messages. The state is a ``PodGroupCache`` (cache.py; or its
subclass for the native API, native_cache.py)."""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from ...framework.cycle.decision import fit_error_message
from ...framework.events import QueueingHint
from ...framework.interface import CycleState, NodeToStatus
from ...framework.model.nodetable import NodeTable
from ...framework.model.podinfo import PodInfo
from ...framework.status import Code, Status
from .cache import PodGroupCache, PodGroupChange


def format_amount(resource: str, v: int) -> str:
    """A resource amount as a quantity: cpu from millicores, bytes with a binary suffix when exact."""
    if resource == "cpu":
        return str(v // 1000) if v % 1000 == 0 else f"{v}m"
    if resource in ("pods",) or v == 0:
        return str(v)
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if v % size == 0:
            return f"{v // size}{suffix}"
    return str(v)


def membership_hint(key_of: Callable[[Any], str | None]) -> Callable[[PodInfo, Any, Any], QueueingHint]:
    """A PodGroup event (the object, or its members) about the pod's own group."""
    def hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        key = key_of(pod)
        change: PodGroupChange | None = new or old
        return QueueingHint.QUEUE if key is None or (change is not None and change.key == key) else QueueingHint.SKIP

    return hint


def not_own_release(key_of: Callable[[Any], str | None]) -> Callable[[PodInfo, Any, Any], QueueingHint]:
    """An assigned pod gone frees room, unless it was a pod of the waiting pod's own group (its
    own release after a rejection cannot help it)."""
    def hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        key = key_of(pod)
        if old is None or key is None:
            return QueueingHint.QUEUE
        return QueueingHint.SKIP if key_of(old) == key else QueueingHint.QUEUE

    return hint


class GroupMachinery:
    """What Coscheduling and GangScheduling (plugins/podgroups/gang_scheduling.py) share: a group rejected
    as one (PostFilter, Unreserve), reservations counted (Reserve), the waiting members found.
    A subclass sets ``cache`` and NAME and defines ``group_key``."""

    NAME: ClassVar[str]
    cache: PodGroupCache
    handle: Any

    def group_key(self, pod: Any) -> str | None:
        raise NotImplementedError

    def rejection_backoff(self, members: int, min_member: int) -> float:
        """Seconds a group rejected in PostFilter is refused at PreFilter at least (0: until an event)."""
        return 0.0

    def _wait(self, pod: PodInfo, kind: str, msg: str) -> Status:
        """PreEnqueue's refusal: one FailedScheduling event per pod and reason, then the status."""
        if self.cache.should_report(pod.key, kind):
            self.handle.pod_event(pod, "FailedScheduling", msg)
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,))

    def post_filter_message(self, key: str, pod: PodInfo) -> str:
        return f"PodGroup {key} gets rejected due to Pod {pod.name} is unschedulable even after PostFilter"

    # ------------------------------------------------------------------ PostFilter
    def post_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable,
                    statuses: NodeToStatus) -> tuple[Status, str | None]:
        key = self.group_key(pod)
        pg = self.cache.groups.get(key) if key else None
        if pg is None:
            return Status(Code.UNSCHEDULABLE), None  # nothing to add to the pod's message
        c = self.cache.counts(pg.key)
        if self.cache.permitted(pg.key) or c.assigned >= pg.min_member:
            return Status(Code.UNSCHEDULABLE), None  # the quorum is met: do not disturb the group
        hist: dict[str, int] = {}
        for _, st in statuses.items():
            for r in st.reasons:
                hist[r] = hist.get(r, 0) + 1
        why = f"pod {pod.name} does not fit: {fit_error_message(nodes.n, hist)}" if hist else \
            f"pod {pod.name} does not fit"
        self._reject_group(pg.key, why, exclude=pod.uid, backoff=self.rejection_backoff(c.pods, pg.min_member),
                           message=f"optimistic rejection in PostFilter: {why}")
        return Status(Code.UNSCHEDULABLE, (self.post_filter_message(pg.key, pod),)), None

    # ------------------------------------------------------------------ Reserve, Unreserve
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        key = self.group_key(pod)
        if key is not None:
            self.cache.reserve(pod.key, key)
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        key = self.group_key(pod)
        if key is None:
            return
        was_reserved = self.cache.unreserve(pod.key)
        released = self.cache.take_released(pod.key)  # rejected with its group: nothing new
        if was_reserved and not released and not self.cache.permitted(key):
            why = f"pod {pod.name} was unreserved (rejected, timed out at Permit, or its binding failed)"
            self._reject_group(key, why, exclude=pod.uid, message=f"rejection in Unreserve: {why}")

    def _waiting(self, key: str):
        for wp in self.handle.waiting_pods():
            if self.group_key(wp.pod) == key:
                yield wp

    def _reject_group(self, key: str, why: str, exclude: str = "", backoff: float = 0.0,
                      message: str | None = None) -> None:
        """Reject the group as one: every waiting member is rejected (its binding cycle undoes its
        reservation), and the group's pods are refused at PreFilter until something changes."""
        self.cache.reject(key, why, backoff)
        text = message or f"PodGroup {key} rejected: {why}"
        for wp in list(self._waiting(key)):
            if wp.pod.uid != exclude:
                self.cache.released(wp.pod.key)
                wp.reject(self.NAME, text)
