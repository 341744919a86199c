"""scheduler-plugins' PodGroups (``scheduling.x-k8s.io/v1alpha1``), as the Coscheduling plugin
reads them: the parsed groups, their members (pods labelled ``scheduling.x-k8s.io/pod-group:
<name>`` in the group's namespace), and what the scheduler knows of each member: bound, assumed
(reserved and not yet seen bound), gated, and its phase. Pure core, no I/O: the operator feeds it
from its PodGroup and pod informers (``apply``, ``on_pod``) and hands the returned cluster events to
the queue; the plugin reads it and marks reservations and group rejections.

Group rejection (what keeps a group from holding part of the cluster): when a group is rejected
as a whole (a member does not fit, its minResources do not fit, a member timed out at Permit),
``reject`` records the cache's *epoch*. The epoch moves on every change that may free or add
capacity (``capacity_changed``: an assigned pod gone, a node added or changed, an unreserved
pod), except the group's own releases. While a rejected group's epoch is the current one,
nothing has changed that could help it, and PreFilter refuses its pods at once, all of them:
the group backs off as one, and comes back on the first event from outside it.

Status (``status``) is computed from the members, for the groups Coscheduling manages, and
written by the operator (leader only) when it changed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ...framework.events import ActionType, ClusterEvent, Resource
from ...framework.model.quantity import QuantityError, resource_value

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GROUP, VERSION, PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
API_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"

POD_GROUP_ADD = ClusterEvent(Resource.POD_GROUP, ActionType.ADD)
POD_GROUP_UPDATE = ClusterEvent(Resource.POD_GROUP, ActionType.UPDATE)
POD_GROUP_DELETE = ClusterEvent(Resource.POD_GROUP, ActionType.DELETE)
# ours: a group's membership changed (a labelled pod added, removed, bound, or its gates gone)
POD_GROUP_MEMBERS = ClusterEvent(Resource.POD_GROUP, ActionType.UPDATE, "PodGroupMembersChange")

TERMINAL = ("Succeeded", "Failed")


def group_key_of(namespace: str, labels: Mapping[str, str] | None) -> str | None:
    """"<namespace>/<group name>" of a pod's label, or None for a pod in no group."""
    name = (labels or {}).get(POD_GROUP_LABEL)
    return f"{namespace}/{name}" if name else None


@dataclass(slots=True)
class PodGroup:
    """What the scheduler reads of a PodGroup: its spec and creation time (and the status last
    seen, so that an unchanged status is not written again)."""

    namespace: str
    name: str
    min_member: int = 1
    min_resources: dict[str, int] = field(default_factory=dict)  # scheduler units (cpu in millicores)
    min_resources_raw: dict[str, str] = field(default_factory=dict)  # as written, for messages
    schedule_timeout_seconds: int | None = None
    creation_timestamp: str = ""
    uid: str = ""
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "PodGroup":
        """Parse a PodGroup object; ValueError on a spec the scheduler cannot use."""
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        mm = spec.get("minMember", 1)
        if isinstance(mm, bool) or not isinstance(mm, int):
            raise ValueError(f"spec.minMember: not an integer: {mm!r}")
        res: dict[str, int] = {}
        raw: dict[str, str] = {}
        for k, v in (spec.get("minResources") or {}).items():
            try:
                res[str(k)] = resource_value(str(k), v)
            except QuantityError as e:
                raise ValueError(f"spec.minResources.{k}: {e}") from None
            raw[str(k)] = str(v)
        timeout = spec.get("scheduleTimeoutSeconds")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)):
            raise ValueError(f"spec.scheduleTimeoutSeconds: not an integer: {timeout!r}")
        return cls(namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name") or ""),
                   min_member=max(int(mm), 1), min_resources=res, min_resources_raw=raw,
                   schedule_timeout_seconds=timeout, creation_timestamp=str(meta.get("creationTimestamp") or ""),
                   uid=str(meta.get("uid") or ""), status=dict(body.get("status") or {}))

    def same_spec(self, other: "PodGroup") -> bool:
        return (self.min_member, self.min_resources, self.schedule_timeout_seconds, self.creation_timestamp,
                self.uid) == (other.min_member, other.min_resources, other.schedule_timeout_seconds,
                              other.creation_timestamp, other.uid)


@dataclass(slots=True)
class Member:
    """A labelled pod, as far as its group is concerned."""

    node: str = ""
    phase: str = ""
    gated: bool = False
    assumed: bool = False  # reserved by this scheduler and not yet seen bound
    owner: str = ""  # "<namespace>/<owner name>" of its first ownerReference, if any

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL


@dataclass(frozen=True, slots=True)
class PodGroupChange:
    """What the hints see of a PodGroup event (old is None on an add, new None on a delete):
    the group's key, and the group as parsed, when it exists."""

    key: str
    group: PodGroup | None = None


@dataclass(frozen=True, slots=True)
class Counts:
    pods: int  # non-terminal members (gated ones included): upstream's quorum count
    gated: int  # of those, pods with spec.schedulingGates
    assumed: int  # reserved and not yet bound
    bound: int  # non-terminal members with a node
    running: int
    succeeded: int
    failed: int

    @property
    def assigned(self) -> int:
        """Bound or assumed: upstream's CalculateAssignedPods."""
        return self.bound + self.assumed


class PodGroupCache:
    """The groups of one API and their members. Subclasses (plugins/podgroups/native_cache.py)
    change the API: ``parse`` (the group object), ``member_group`` (a pod's group key) and
    ``EVENTS`` (the cluster events' resource), and ``status``."""

    # the cluster events handed to the queue: add, update, delete, and a change of the members
    EVENTS = (POD_GROUP_ADD, POD_GROUP_UPDATE, POD_GROUP_DELETE, POD_GROUP_MEMBERS)

    def parse(self, body: Mapping[str, Any]) -> PodGroup:
        """The group object as the plugins read it; ValueError for a spec that cannot be used."""
        return PodGroup.from_dict(body)

    def member_group(self, namespace: str, body: Mapping[str, Any]) -> str | None:
        """"<namespace>/<group>" of the pod object ``body``, or None for a pod in no group."""
        return group_key_of(namespace, (body.get("metadata") or {}).get("labels"))

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], str] | None = None) -> None:
        self.clock = clock
        self.wall = wall or (lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.groups: dict[str, PodGroup] = {}
        self._members: dict[str, dict[str, Member]] = {}  # group key -> pod key -> Member
        self._pod_group: dict[str, str] = {}  # pod key -> its group key
        self._counts: dict[str, Counts] = {}  # group key -> its counts, until a member changes
        self.epoch = 0
        self._rejected: dict[str, tuple[int, str]] = {}  # group -> (epoch of the rejection, why)
        self._backoff_until: dict[str, float] = {}  # group -> clock time (podGroupBackoffSeconds)
        self._permitted: set[str] = set()  # groups whose quorum Permit reached (members bind freely)
        self._released: set[str] = set()  # pods rejected at Permit as part of their group's rejection
        self._start: dict[str, str] = {}  # group -> scheduleStartTime (RFC 3339)
        self._reported: dict[str, str] = {}  # pod key -> kind of wait last reported (events once per kind)
        self.managed: set[str] = set()  # groups some policy's Coscheduling looked at: their status is written
        self._dirty: set[str] = set()
        self.written: dict[str, dict[str, Any]] = {}  # group -> status last written

    # ------------------------------------------------------------------ PodGroup objects
    def apply(self, event: str, body: Mapping[str, Any]) -> list[tuple[ClusterEvent, Any, Any]]:
        """A PodGroup watch event (ADDED, MODIFIED, DELETED). Returns the cluster events for the
        queue: PodGroup Add, Update (spec changed) or Delete, with PodGroupChange objects. A status
        change (ours coming back) is remembered but is no event. ValueError for a spec that
        cannot be parsed (the group is then treated as absent)."""
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        old = self.groups.get(key)
        add, update, delete, _ = self.EVENTS
        if event == "DELETED":
            if old is None:
                return []
            del self.groups[key]
            self._forget_group_state(key)
            return [(delete, PodGroupChange(key, old), None)]
        try:
            new = self.parse(body)
        except ValueError:
            if old is not None:
                del self.groups[key]
                return [(delete, PodGroupChange(key, old), None)]
            raise
        self.groups[key] = new
        if old is None:
            self._rejected.pop(key, None)
            self._mark(key)
            return [(add, None, PodGroupChange(key, new))]
        if old.same_spec(new):
            return []
        if old.uid != new.uid:
            self._forget_group_state(key)
        self._rejected.pop(key, None)  # a new spec may help: try the group again
        self._mark(key)
        return [(update, PodGroupChange(key, old), PodGroupChange(key, new))]

    def _forget_group_state(self, key: str) -> None:
        self._rejected.pop(key, None)
        self._backoff_until.pop(key, None)
        self._permitted.discard(key)
        self._start.pop(key, None)
        self.written.pop(key, None)
        self._dirty.discard(key)

    def get(self, key: str | None) -> PodGroup | None:
        return self.groups.get(key) if key else None

    # ------------------------------------------------------------------ members (pods)
    def tracks(self, key: str, labels: Mapping[str, str] | None) -> bool:
        """Is this pod event of interest (the pod is labelled, or was a member)?"""
        return key in self._pod_group or bool(labels and POD_GROUP_LABEL in labels)

    def tracks_pod(self, key: str, body: Mapping[str, Any]) -> bool:
        """Is this pod event of interest (the pod names a group, or was a member)?"""
        return self.tracks(key, (body.get("metadata") or {}).get("labels"))

    def on_pod(self, event: str, body: Mapping[str, Any]) -> list[tuple[ClusterEvent, Any, Any]]:
        """A pod watch event. Keeps the pod's membership (label, namespace), node, phase and gates.
        Returns a PodGroupMembersChange event when the group's quorum may have changed (a member
        added or removed, bound, or its gates gone)."""
        meta = body.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        pod_key = f"{ns}/{meta.get('name', '')}"
        gkey = None if event == "DELETED" else self.member_group(ns, body)
        old_gkey = self._pod_group.get(pod_key)
        out: list[tuple[ClusterEvent, Any, Any]] = []
        self._counts.pop(old_gkey or "", None)
        self._counts.pop(gkey or "", None)
        if old_gkey is not None and old_gkey != gkey:
            m = self._members.get(old_gkey, {}).pop(pod_key, None)
            del self._pod_group[pod_key]
            if not self._members.get(old_gkey):
                self._members.pop(old_gkey, None)
            self._reported.pop(pod_key, None)
            if m is not None:
                self._after_member_change(old_gkey)
                out.append((self.EVENTS[3], None, PodGroupChange(old_gkey, self.groups.get(old_gkey))))
        if gkey is None:
            return out
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        owners = meta.get("ownerReferences") or []
        new = Member(node=str(spec.get("nodeName") or ""), phase=str(status.get("phase") or ""),
                     gated=bool(spec.get("schedulingGates")),
                     owner=f"{ns}/{owners[0].get('name', '')}" if owners else "")
        members = self._members.setdefault(gkey, {})
        prev = members.get(pod_key)
        if prev is not None:
            new.assumed = prev.assumed and not new.node
        members[pod_key] = new
        self._pod_group[pod_key] = gkey
        if prev is None or prev.terminal != new.terminal or prev.gated != new.gated \
                or bool(prev.node) != bool(new.node):
            if prev is None or (prev.gated and not new.gated):
                self._rejected.pop(gkey, None)  # one more member that can be scheduled: try again
            self._after_member_change(gkey)
            out.append((self.EVENTS[3], None, PodGroupChange(gkey, self.groups.get(gkey))))
        elif prev.phase != new.phase:
            self._mark(gkey)
        return out

    def _after_member_change(self, gkey: str) -> None:
        if not any(m.node or m.assumed for m in self._members.get(gkey, {}).values() if not m.terminal):
            self._permitted.discard(gkey)  # nothing of it placed any more: the quorum starts again
        self._mark(gkey)

    def group_of(self, pod_key: str) -> str | None:
        return self._pod_group.get(pod_key)

    def members(self, gkey: str) -> dict[str, Member]:
        return self._members.get(gkey, {})

    def counts(self, gkey: str) -> Counts:
        c = self._counts.get(gkey)
        if c is None:
            c = self._counts[gkey] = self._count(gkey)
        return c

    def _count(self, gkey: str) -> Counts:
        pods = gated = assumed = bound = running = succeeded = failed = 0
        for m in self._members.get(gkey, {}).values():
            if m.phase == "Succeeded":
                succeeded += 1
                continue
            if m.phase == "Failed":
                failed += 1
                continue
            pods += 1
            gated += m.gated
            if m.node:
                bound += 1
                running += m.phase == "Running"
            elif m.assumed:
                assumed += 1
        return Counts(pods, gated, assumed, bound, running, succeeded, failed)

    # ------------------------------------------------------------------ reservations (the plugin)
    def reserve(self, pod_key: str, gkey: str) -> None:
        """The pod was assumed on a node (Reserve)."""
        m = self._members.setdefault(gkey, {}).setdefault(pod_key, Member())
        self._pod_group.setdefault(pod_key, gkey)
        self._counts.pop(gkey, None)
        if not m.node:
            m.assumed = True
        if not self._start.get(gkey):
            self._start[gkey] = self.wall()
        self._mark(gkey)

    def unreserve(self, pod_key: str) -> bool:
        """The pod's reservation was undone (Unreserve). Its room is free: capacity changed for
        every other group. True when it was reserved."""
        gkey = self._pod_group.get(pod_key)
        m = self._members.get(gkey or "", {}).get(pod_key)
        if gkey is None or m is None or not m.assumed:
            return False
        m.assumed = False
        self._counts.pop(gkey, None)
        self._after_member_change(gkey)
        self.capacity_changed(gkey)
        return True

    def released(self, pod_key: str) -> None:
        """The pod was rejected while waiting at Permit because its group was rejected: its
        Unreserve, which comes later, is not a new failure of the group."""
        self._released.add(pod_key)

    def take_released(self, pod_key: str) -> bool:
        if pod_key in self._released:
            self._released.discard(pod_key)
            return True
        return False

    def permit(self, gkey: str) -> None:
        """Permit reached the group's quorum: its members are let through."""
        self._permitted.add(gkey)
        self._rejected.pop(gkey, None)
        self._mark(gkey)

    def permitted(self, gkey: str) -> bool:
        return gkey in self._permitted

    def scheduling_started(self, gkey: str) -> None:
        """A member's scheduling attempt began: the group's scheduleStartTime, once."""
        if not self._start.get(gkey):
            self._start[gkey] = self.wall()
            self._mark(gkey)

    # ------------------------------------------------------------------ group rejection
    def capacity_changed(self, cause: str | None = None) -> None:
        """Something may have freed or added capacity (an assigned pod gone, a node added or
        changed, a reservation undone). ``cause``: the group whose own pod it was: its own
        rejection stands (its release cannot help it)."""
        self.epoch += 1
        if cause is not None:
            r = self._rejected.get(cause)
            if r is not None and r[0] == self.epoch - 1:
                self._rejected[cause] = (self.epoch, r[1])

    def reject(self, gkey: str, why: str, backoff: float = 0.0) -> None:
        """The group was rejected as a whole; its pods are refused at PreFilter until something
        from outside the group changes (or, with ``backoff``, for that many seconds at least)."""
        r = self._rejected.get(gkey)
        if r is None or r[0] != self.epoch:  # keep the first reason of a cascade
            self._rejected[gkey] = (self.epoch, why)
        if backoff > 0:
            self._backoff_until[gkey] = self.clock() + backoff
        self._mark(gkey)

    def rejection(self, gkey: str) -> str | None:
        """Why the group was rejected, while nothing that may help it has happened since."""
        r = self._rejected.get(gkey)
        if r is None:
            return None
        if r[0] != self.epoch:
            del self._rejected[gkey]
            return None
        return r[1]

    def backed_off(self, gkey: str) -> bool:
        until = self._backoff_until.get(gkey)
        if until is None:
            return False
        if self.clock() >= until:
            del self._backoff_until[gkey]
            return False
        return True

    # ------------------------------------------------------------------ events reported once per kind
    def should_report(self, pod_key: str, kind: str) -> bool:
        """True the first time ``pod_key`` waits for this kind of reason (then not again until
        the kind changes), so a gated pod gets one event per reason, not one per recount."""
        if self._reported.get(pod_key) == kind:
            return False
        self._reported[pod_key] = kind
        return True

    def forget_report(self, pod_key: str) -> None:
        self._reported.pop(pod_key, None)

    # ------------------------------------------------------------------ status
    def manage(self, gkey: str) -> None:
        if gkey not in self.managed:
            self.managed.add(gkey)
            self._dirty.add(gkey)

    def _mark(self, gkey: str) -> None:
        if gkey in self.managed:
            self._dirty.add(gkey)

    def take_dirty(self) -> list[str]:
        out = [k for k in self._dirty if k in self.groups]
        self._dirty.clear()
        return out

    def status(self, gkey: str) -> dict[str, Any]:
        """The group's status as scheduler-plugins reports it: phase (Pending, PreScheduling,
        Scheduling, Scheduled, Running, Finished, Failed), scheduled (bound members), running,
        succeeded, failed, scheduleStartTime, occupiedBy (the first member's owner)."""
        pg = self.groups.get(gkey)
        c = self.counts(gkey)
        mm = pg.min_member if pg is not None else 1
        if c.succeeded >= mm:
            phase = "Finished"
        elif c.failed and c.failed + c.running + c.succeeded >= mm:
            phase = "Failed"
        elif c.running + c.succeeded >= mm:
            phase = "Running"
        elif c.bound + c.succeeded >= mm:
            phase = "Scheduled"
        elif c.assigned:
            phase = "Scheduling"
        elif c.pods >= mm:
            phase = "PreScheduling"
        else:
            phase = "Pending"
        out: dict[str, Any] = {"phase": phase, "scheduled": c.bound, "running": c.running,
                               "succeeded": c.succeeded, "failed": c.failed}
        if self._start.get(gkey):
            out["scheduleStartTime"] = self._start[gkey]
        owner = next((m.owner for m in self._members.get(gkey, {}).values() if m.owner), "")
        if owner:
            out["occupiedBy"] = owner
        return out
