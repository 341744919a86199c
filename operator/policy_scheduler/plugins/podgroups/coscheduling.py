"""Coscheduling: all-or-nothing scheduling of scheduler-plugins' PodGroups
(``scheduling.x-k8s.io/v1alpha1``; kubernetes-sigs/scheduler-plugins pkg/coscheduling).

A pod belongs to the PodGroup named by its label ``scheduling.x-k8s.io/pod-group`` in its
namespace. No member binds unless ``spec.minMember`` members are placed together; pods without
the label are scheduled as usual. The state (groups, members, reservations, rejections) lives in
the shared ``plugins.podgroups.cache.PodGroupCache`` (``handle.pod_groups()``).

- QueueSort: priority, then the group's creation time (a pod in no group: its own creation
  time), then the group's key (a pod in no group: its own), then the time queued. A group's pods
  are adjacent in the active queue. Use it in place of PrioritySort.
- PreEnqueue: a pod whose PodGroup does not exist, or whose group has fewer than minMember pods
  that are not gated, waits out of the active queue, with one event per reason.
- PreFilter (UnschedulableAndUnresolvable, so no member preempts alone): the group was rejected
  and nothing that may help it changed since; ``podGroupBackoffSeconds`` after a rejection; too
  few members (upstream's message); gated members; ``spec.minResources`` (plus ``pods:
  minMember``) larger than the cluster's free capacity, the group's own pods counted as free
  (``resource gap: ...``). The last three reject the whole group.
- PostFilter: a member that fits nowhere rejects the group: its waiting pods are rejected (their
  reservations undone) and the group waits as one. Not when the group already reached its quorum.
  List it after DefaultPreemption, as the upstream KEP asks (a successful preemption ends the
  PostFilter run).
- Reserve / Unreserve: the member counts as assumed / no longer. An Unreserve of a group that has
  not reached its quorum (a Permit timeout, a rejection, a failed binding) rejects every waiting
  pod of the group and the group itself; not the Unreserve of a pod that was rejected because its
  group was (it comes later, asynchronously, and must not reject the group's next attempt).
- Permit: waits until minMember members are reserved or bound, then allows them all; the first
  member to wait moves its siblings into the active queue (upstream's ActivateSiblings). The wait
  is the group's ``spec.scheduleTimeoutSeconds``, else ``permitWaitingTimeSeconds`` (0: 60 s).

Args (upstream CoschedulingArgs): ``permitWaitingTimeSeconds`` (default 60) and
``podGroupBackoffSeconds`` (default 0: off), both >= 0.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from ...framework.events import ActionType, ClusterEvent, ClusterEventWithHint, Resource
from ...framework.interface import (CycleState, EnqueueExtensions, PermitPlugin, PluginArgs, PostFilterPlugin,
                                    PreEnqueuePlugin, PreFilterPlugin, QueueSortPlugin, ReservePlugin)
from ...framework.model.nodetable import NodeTable
from ...framework.model.podinfo import PodInfo
from ...framework.status import Code, Status
from ...framework.validation import int32_errors, invalid, raise_if
from .cache import POD_GROUP_LABEL, PodGroup, PodGroupCache, group_key_of
from .gangs import GroupMachinery, format_amount, membership_hint, not_own_release

NAME = "Coscheduling"
DEFAULT_WAIT_SECONDS = 60  # upstream DefaultWaitTime


class CoschedulingArgs(PluginArgs):
    """upstream CoschedulingArgs (v1) and its validation."""

    permit_waiting_time_seconds: int = Field(60, alias="permitWaitingTimeSeconds", strict=True)
    pod_group_backoff_seconds: int = Field(0, alias="podGroupBackoffSeconds", strict=True)

    @model_validator(mode="after")
    def _validate(self) -> "CoschedulingArgs":
        errs: list[str] = []
        for path, v in (("permitWaitingTimeSeconds", self.permit_waiting_time_seconds),
                        ("podGroupBackoffSeconds", self.pod_group_backoff_seconds)):
            e = int32_errors(path, v)
            errs += e or ([invalid(path, v, "must be greater than 0")] if v < 0 else [])
        raise_if(errs)
        return self


def _group_name(pod: Any) -> str | None:
    return pod.labels.get(POD_GROUP_LABEL) or None


def _label_key(pod: Any) -> str | None:
    """The scheduler-plugins group of a pod: "<namespace>/<label value>", or None."""
    return group_key_of(pod.namespace, pod.labels)


_membership_hint = membership_hint(_label_key)
_not_own_release = not_own_release(_label_key)


class Coscheduling(GroupMachinery, QueueSortPlugin, PreEnqueuePlugin, PreFilterPlugin, PostFilterPlugin,
                   ReservePlugin, PermitPlugin, EnqueueExtensions):
    NAME = NAME
    Args = CoschedulingArgs
    args: CoschedulingArgs  # what Args parsed

    def __init__(self, args, handle) -> None:
        super().__init__(args, handle)
        self.cache: PodGroupCache = handle.pod_groups()

    def group_key(self, pod: Any) -> str | None:
        return _label_key(pod)

    def rejection_backoff(self, members: int, min_member: int) -> float:
        return float(self.args.pod_group_backoff_seconds) if members >= min_member else 0.0

    # ------------------------------------------------------------------ QueueSort
    def _sort_key(self, pod: PodInfo) -> tuple[str, str]:
        name = _group_name(pod)
        if name:
            key = f"{pod.namespace}/{name}"
            pg = self.cache.groups.get(key)
            if pg is not None:
                return pg.creation_timestamp, key
        return pod.creation_timestamp, pod.key

    def less(self, a: Any, b: Any) -> bool:
        pa, pb = a.pod.priority, b.pod.priority
        if pa != pb:
            return pa > pb
        ka, kb = self._sort_key(a.pod), self._sort_key(b.pod)
        if ka != kb:
            return ka < kb
        return a.timestamp < b.timestamp

    # ------------------------------------------------------------------ PreEnqueue
    def pre_enqueue(self, pod: PodInfo) -> Status:
        name = _group_name(pod)
        if not name:
            return Status.success()
        key = f"{pod.namespace}/{name}"
        pg = self.cache.groups.get(key)
        if pg is None:
            return self._wait(pod, "missing", f"waiting for PodGroup {key} to be created (pod label "
                                              f"{POD_GROUP_LABEL}={name})")
        self.cache.manage(key)
        c = self.cache.counts(key)
        ready = c.pods - c.gated
        if ready < pg.min_member:
            gated = f", {c.gated} of them gated" if c.gated else ""
            return self._wait(pod, "members", f"waiting for the pods of PodGroup {key}: {c.pods} exist{gated}, "
                                              f"minMember is {pg.min_member}")
        self.cache.forget_report(pod.key)
        return Status.success()

    # ------------------------------------------------------------------ PreFilter
    def node_local_for(self, members: list[PodInfo]) -> bool:
        """Group preemption's question (framework/group_preemption.py): whether PreFilter's verdict
        for these pods reads no node: it skips a pod outside any scheduler-plugins PodGroup (a
        member of one may read the cluster's free room, minResources)."""
        return not any(_group_name(m) for m in members)

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        name = _group_name(pod)
        if not name:
            return Status.skip(), None
        key = f"{pod.namespace}/{name}"
        pg = self.cache.groups.get(key)
        if pg is None:
            return Status.skip(), None  # upstream: only groups it can read are checked (Permit refuses it)
        cache = self.cache
        cache.manage(key)
        cache.scheduling_started(key)
        c = cache.counts(key)
        if cache.permitted(key) or c.assigned >= pg.min_member:
            return Status.success(), None  # the group is placed: a further member goes on its own
        if cache.backed_off(key):
            return _unresolvable(f"podGroup {key} failed recently"), None
        why = cache.rejection(key)
        if why is not None:
            return _unresolvable(f"PodGroup {key} was rejected ({why}); waiting for a change in the cluster "
                                 f"that may help it"), None
        if c.pods < pg.min_member:
            msg = (f"pre-filter pod {pod.name} cannot find enough sibling pods, current pods number: {c.pods}, "
                   f"minMember of group: {pg.min_member}")
            self._reject_group(key, msg, exclude=pod.uid)
            return _unresolvable(msg), None
        if c.pods - c.gated < pg.min_member:
            msg = f"pre-filter pod {pod.name} cannot proceed due to gated pods in the same PodGroup"
            self._reject_group(key, msg, exclude=pod.uid)
            return _unresolvable(msg), None
        if pg.min_resources:
            gap = self.resource_gap(pg, nodes)
            if gap:
                text = ", ".join(f"{r}: {format_amount(r, v)}" for r, v in sorted(gap.items()))
                msg = f"PodGroup {key}: minResources do not fit the cluster's free capacity: resource gap: {text}"
                self._reject_group(key, msg, exclude=pod.uid)
                return _unresolvable(msg), None
        return Status.success(), None

    def resource_gap(self, pg: PodGroup, nodes: NodeTable) -> dict[str, int]:
        """upstream CheckClusterResource: ``minResources`` plus ``pods: minMember`` against the
        sum over nodes of allocatable minus requested, with the group's own pods (bound or
        assumed) counted as free. Returns what is missing per resource (empty: it fits). A node
        already past its allocatable counts as zero free."""
        need = dict(pg.min_resources)
        need["pods"] = pg.min_member
        n = nodes.n
        own: list[tuple[int, PodInfo]] = []
        for pod_key in self.cache.members(pg.key):
            node = nodes.pod_node.get(pod_key)
            row = nodes.index.get(node) if node is not None else None
            p = nodes.pod(pod_key) if row is not None else None
            if row is not None and p is not None:
                own.append((row, p))
        gap: dict[str, int] = {}
        for r, q in need.items():
            col = nodes.res_index.get(r)
            if col is None or n == 0:
                free = 0
            else:
                per_node = nodes.allocatable[:n, col] - nodes.requested[:n, col]
                if own:
                    per_node = per_node.copy()
                    for row, p in own:
                        per_node[row] += 1 if r == "pods" else p.requests.get(r, 0)
                free = int(per_node.clip(min=0).sum())
            if q > free:
                gap[r] = q - free
        return gap

    # ------------------------------------------------------------------ Permit
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        name = _group_name(pod)
        if not name:
            return Status.success(), 0.0
        key = f"{pod.namespace}/{name}"
        pg = self.cache.groups.get(key)
        if pg is None:
            return Status(Code.UNSCHEDULABLE, ("PodGroup not found",)), 0.0
        c = self.cache.counts(key)
        if self.cache.permitted(key) or c.assigned >= pg.min_member:
            self.cache.permit(key)
            for wp in self._waiting(key):
                wp.allow(NAME)
            return Status.success(), 0.0
        if not any(True for _ in self._waiting(key)):
            # the first member to wait brings its siblings into the active queue, next to each other
            siblings = [k for k in self.cache.members(key) if k != pod.key]
            self.handle.activate_pods(siblings)
        timeout = pg.schedule_timeout_seconds or self.args.permit_waiting_time_seconds or DEFAULT_WAIT_SECONDS
        return Status(Code.WAIT, (f"waiting for {pg.min_member - c.assigned} more pods of PodGroup {key}",)), \
            float(timeout)

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.POD_GROUP, ActionType.ADD | ActionType.UPDATE | ActionType.DELETE),
                                 _membership_hint),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE), _not_own_release),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE
                                              | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT)),
        ]


def _unresolvable(msg: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,))


PLUGIN = Coscheduling
