"""GangScheduling: Kubernetes 1.37's own gangs (``scheduling.k8s.io`` PodGroups, the
``GenericWorkload`` feature gate), scheduled in kube-scheduler 1.37's pod-group cycle
(plugins/podgroups/cycle.py), with the topology constraint of ``TopologyAwareWorkloadScheduling``
(upstream's GangScheduling, TopologyPlacementGenerator and PodGroupPodsCount).

A pod belongs to the PodGroup named by its ``spec.schedulingGroup.podGroupName``, in its
namespace. When a policy lists GangScheduling, its pods in a group are not scheduled one at a
time: the engine takes every queued member of the group and runs the group cycle (placements,
every Filter per placement, the best placement's members assumed together, group preemption
when none fits). Pods in no group are scheduled as usual. The state lives in the operator's
``plugins.podgroups.native_cache.NativePodGroupCache`` (``handle.native_pod_groups()``).

- PreEnqueue (upstream's, v1.37.1's spelling): the group does not exist: ``waiting for pods's pod
  group "<name>" to appear in scheduling queue``; fewer than minCount members exist: ``waiting for
  minCount pods from a gang to appear in scheduling queue``. While a member is gated the others
  wait too (upstream gates the group entity as soon as one member is). As upstream's, nothing is
  written to the pod nor posted as an event.
- PlacementFeasible (``placement_feasible`` in the cycle): ``minCount (m) cannot be satisfied: s
  scheduled, r remaining`` / ``minCount (m) is not yet satisfied: ...``.
- Reserve / Unreserve: the member counts as assumed for its group (outside the cycle's own
  evaluation, which undoes itself).
- Permit (upstream's): ``waiting for minCount pods from a gang to be scheduled`` until minCount
  members are assumed or bound, for at most 5 minutes; each waiting member activates the group's
  pods that are not placed; the member that completes the quorum allows them all.
- Hints (upstream's): a member added (or bound, or ungated), the PodGroup added, or its minCount
  decreased.

Args: ``placementScoring``: ``Upstream`` (the default: PodGroupPodsCount plus NodeResourcesFit's
MostAllocated share, ties at random) or ``Tightest`` (the feasible placement that leaves the
least free cpu, then memory: big domains stay whole for big groups).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ...framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ...framework.interface import (GROUP_PLACEMENT, CycleState, EnqueueExtensions, PermitPlugin, PluginArgs,
                                    PreEnqueuePlugin, ReservePlugin)
from ...framework.model.podinfo import PodInfo
from ...framework.status import Code, Status
from .cache import PodGroupChange
from .cycle import POD_GROUP_CYCLE, UPSTREAM, PodGroupInfo
from .native_cache import CompositePodGroup, NativePodGroup, NativePodGroupCache, native_group_key

NAME = "GangScheduling"
PERMIT_TIMEOUT_SECONDS = 300.0  # upstream permitTimeoutDuration


class GangSchedulingArgs(PluginArgs):
    placement_scoring: Literal["Upstream", "Tightest"] = Field(
        default=UPSTREAM, alias="placementScoring",
        description="How the feasible placements of a group are compared: Upstream (PodGroupPodsCount plus "
                    "NodeResourcesFit's MostAllocated, kube-scheduler 1.37's) or Tightest (least free room left).")


class GangScheduling(PreEnqueuePlugin, ReservePlugin, PermitPlugin, EnqueueExtensions):
    NAME = NAME
    Args = GangSchedulingArgs
    GROUP_CYCLE = True  # the engine schedules this plugin's groups in a pod-group cycle

    def __init__(self, args: GangSchedulingArgs | None, handle) -> None:
        super().__init__(args, handle)
        self.cache: NativePodGroupCache = handle.native_pod_groups()
        self.placement_scoring = (args.placement_scoring if args is not None else UPSTREAM)

    def group_key(self, pod: Any) -> str | None:
        return native_group_key(pod)

    def group_info(self, key: str, composite: bool = False) -> PodGroupInfo | None:
        """The PodGroup (or CompositePodGroup) as the cycle reads it, with its placed members
        (a composite: every placed member of its leaves); None when it does not exist."""
        pg = self.cache.composites.get(key) if composite else self.cache.get(key)
        if pg is None:
            return None
        scheduled = {}
        for leaf in self.cache.leaves(composite, key):
            for pk, m in self.cache.members(leaf).items():
                if m.terminal:
                    continue
                node = m.node or (self.cache.assumed_node(pk) if m.assumed else "")
                if node:
                    scheduled[pk] = node
        return PodGroupInfo(key=key, gang=pg.gang, min_count=pg.min_member, topology_key=pg.topology_key,
                            priority=pg.priority, preemption_policy=pg.preemption_policy,
                            disruption_all=pg.disruption_all, scheduled=scheduled, uid=pg.uid)

    def hierarchy(self, key: str) -> tuple[bool, str] | None:
        """The root of the PodGroup ``key``'s hierarchy: (is a composite, key); None when a
        parent CompositePodGroup does not exist."""
        return self.cache.root_of(key)

    # ------------------------------------------------------------------ PreEnqueue
    def _wait(self, pod: PodInfo, kind: str, msg: str) -> Status:
        """A PreEnqueue refusal: as upstream's (v1.37.1), nothing is written to the pod and no
        event posted (the queue keeps the message: it shows as the pod's gating message)."""
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,))

    def pre_enqueue(self, pod: PodInfo) -> Status:
        key = native_group_key(pod)
        if key is None:
            return Status.success()
        pg = self.cache.get(key)
        if pg is None:
            return self._wait(pod, "missing", f"waiting for pods's pod group {go_quote(pod.pod_group_name)} to "
                                              f"appear in scheduling queue")
        self.cache.manage(key)
        if pg.parent:  # upstream checkCPGHierarchyReadiness: the whole tree must reach its quorum
            root = self.cache.root_of(key)
            if root is None:
                return self._wait(pod, "hierarchy", f"failed to build hierarchy snapshot: composite pod group object "
                                                    f"not found in state for {pod.namespace}/{pg.parent}")
            if not self.cache.tree_ready(root[1], lambda k: self.cache.counts(k).pods):
                return self._wait(pod, "tree", f"waiting for composite pod group {go_quote(pg_name(root[1]))} tree "
                                               f"to meet quorum")
            return Status.success()
        if not pg.gang:
            return Status.success()
        c = self.cache.counts(key)
        if c.pods < pg.min_member:
            return self._wait(pod, "members", "waiting for minCount pods from a gang to appear in scheduling queue")
        if c.gated and not pod.scheduling_gates and c.assigned < pg.min_member:
            return self._wait(pod, "gated", f"waiting for the gated pods of PodGroup {key}: {c.gated} of "
                                            f"{c.pods} have scheduling gates")
        return Status.success()

    # ------------------------------------------------------------------ Reserve, Unreserve
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        key = native_group_key(pod)
        if key is not None and not state.read(POD_GROUP_CYCLE):
            self.cache.reserve(pod.key, key)
            self.cache.set_assumed_node(pod.key, node_name)
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        if native_group_key(pod) is not None and not state.read(POD_GROUP_CYCLE):
            self.cache.unreserve(pod.key)

    # ------------------------------------------------------------------ Permit
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        key = native_group_key(pod)
        if key is None:
            return Status.success(), 0.0
        pg = self.cache.get(key)
        if pg is None:
            return Status.error(f"failed to get podGroup {key}: podgroup {pg_name(key)!r} not found"), 0.0
        if pg.parent:
            return self._permit_hierarchy(pod, key)
        if not pg.gang:
            return Status.success(), 0.0
        c = self.cache.counts(key)
        if c.assigned < pg.min_member:
            if state.read(GROUP_PLACEMENT) is None:  # members decided together are all in flight
                members = self.cache.members(key)
                self.handle.activate_pods([k for k, m in members.items()
                                           if k != pod.key and not m.node and not m.assumed and not m.terminal])
            return (Status(Code.WAIT, ("waiting for minCount pods from a gang to be scheduled",)),
                    PERMIT_TIMEOUT_SECONDS)
        self.cache.permit(key)
        for wp in self.handle.waiting_pods():
            if native_group_key(wp.pod) == key:
                wp.allow(NAME)
        return Status.success(), 0.0

    def _permit_hierarchy(self, pod: PodInfo, key: str) -> tuple[Status, float]:
        """upstream permitPodForHierarchy: wait until the whole tree reaches its quorum with the
        members assumed or bound, then let every waiting member of the tree through."""
        root = self.cache.root_of(key)
        if root is None:
            return Status.error(f"failed to build hierarchy snapshot: composite pod group object not found in state "
                                f"for {key}"), 0.0
        leaves = set(self.cache.leaves(*root))
        if not self.cache.tree_ready(root[1], lambda k: self.cache.counts(k).assigned):
            self.handle.activate_pods([k for leaf in leaves for k, m in self.cache.members(leaf).items()
                                       if k != pod.key and not m.node and not m.assumed and not m.terminal])
            return (Status(Code.WAIT, (f"waiting for composite pod group {go_quote(pg_name(root[1]))} tree to meet "
                                       f"quorum",)), PERMIT_TIMEOUT_SECONDS)
        for leaf in leaves:
            self.cache.permit(leaf)
        for wp in self.handle.waiting_pods():
            if native_group_key(wp.pod) in leaves:
                wp.allow(NAME)
        return Status.success(), 0.0

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            # a PodGroup or CompositePodGroup added; a PodGroup updated with a smaller minCount; a
            # member added, bound or ungated (NativePodGroupMembersChange, our UnscheduledPod/AssignedPod Add)
            ClusterEventWithHint(ClusterEvent(Resource.NATIVE_POD_GROUP, ActionType.ADD | ActionType.UPDATE),
                                 self._group_hint),
        ]

    def _same_hierarchy(self, key: str, change: PodGroupChange) -> bool:
        """upstream areSameHierarchy: the changed group (or composite) is in the pod's group's tree."""
        composite = isinstance(change.group, CompositePodGroup)
        if not composite and change.key == key:
            return True
        mine = self.cache.root_of(key)
        theirs = self.cache.root_of(change.key, composite)
        return mine is not None and mine == theirs

    def _group_hint(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        key = native_group_key(pod)
        change: PodGroupChange | None = new or old
        if key is None or change is None or not self._same_hierarchy(key, change):
            return QueueingHint.SKIP
        return _group_hint(pod, old, new)


def _group_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """upstream isSchedulableAfterPodGroupAdded / isSchedulableAfterPodGroupUpdated /
    isSchedulableAfterPodAdded, for a change in the pod's own hierarchy: an update only when both
    old and new are gangs and minCount decreased (a members' change has no old object)."""
    key = native_group_key(pod)
    change: PodGroupChange | None = new or old
    if key is None or change is None:
        return QueueingHint.SKIP
    if old is not None and new is not None:
        a, b = old.group, new.group
        if not (isinstance(a, NativePodGroup) and isinstance(b, NativePodGroup) and a.gang and b.gang):
            return QueueingHint.SKIP
        return QueueingHint.QUEUE if b.min_member < a.min_member else QueueingHint.SKIP
    return QueueingHint.QUEUE


def pg_name(key: str) -> str:
    return key.split("/", 1)[-1]


def go_quote(s: str) -> str:
    """Go's %q of a plain string (a PodGroup name is a DNS subdomain: only the quotes matter)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


PLUGIN = GangScheduling
