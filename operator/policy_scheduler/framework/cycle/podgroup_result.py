"""The pod-group cycle's data, the contract between the cycle (plugins/podgroups/cycle.py), its
callers and DefaultPreemption's PodGroupPostFilter (framework/group_preemption.py): upstream's
fwk.Status as the cycle uses it (GroupStatus), a PodGroup as the cycle reads it (PodGroupInfo), a
hierarchy node (GroupNode), the results per member, placement and group, what a PodGroupPostFilter
reads of the cycle (``GroupCycleRunner``) and of a pod (``native_group_key``); and what a caller
does with a result: the members' statuses (``member_status``, upstream's
submitPodGroupAlgorithmResult), the PodGroup condition (``condition``), the checks before the
cycle (``validate``), member order. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from ..interface import CycleState
from ..model.nodetable import NodeTable
from ..model.podinfo import PodInfo
from ..status import Code
from .decision import Decision

if TYPE_CHECKING:  # pragma: no cover
    from .chain import Chain

POD_GROUP_UNSCHEDULABLE = "pod group is unschedulable"
MAX_DEPTH = 16  # a PodGroup hierarchy deeper than this (or a cycle of parents) has no root


def native_group_key(pod: Any) -> str | None:
    """"<namespace>/<spec.schedulingGroup.podGroupName>" of a PodInfo, or None."""
    name = getattr(pod, "pod_group_name", "")
    return f"{pod.namespace}/{name}" if name else None


@dataclass
class GroupStatus:
    """upstream's fwk.Status as the pod-group cycle uses it: a code, reasons, and an error that
    ``message`` puts first."""

    code: Code = Code.SUCCESS
    reasons: list[str] = field(default_factory=list)
    err: str | None = None
    plugin: str = ""

    @classmethod
    def unschedulable(cls, *reasons: str, err: str | None = POD_GROUP_UNSCHEDULABLE) -> "GroupStatus":
        return cls(Code.UNSCHEDULABLE, list(reasons), err)

    @classmethod
    def error(cls, err: str) -> "GroupStatus":
        return cls(Code.ERROR, [], err)

    def message(self) -> str:
        return ", ".join(([self.err] if self.err is not None else []) + self.reasons)

    def as_error(self) -> str:
        return self.err if self.err is not None else self.message()

    @property
    def is_success(self) -> bool:
        return self.code == Code.SUCCESS

    @property
    def is_wait(self) -> bool:
        return self.code == Code.WAIT

    @property
    def is_rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def is_error(self) -> bool:
        return not (self.is_success or self.is_wait or self.is_rejected or self.code == Code.SKIP)

    def clone(self) -> "GroupStatus":
        return GroupStatus(self.code, list(self.reasons), self.err, self.plugin)


@dataclass
class PodGroupInfo:
    """What the cycle needs of a PodGroup (GangScheduling builds it from its cache)."""

    key: str  # namespace/name
    gang: bool
    min_count: int  # gang.minCount; 1 for a basic group
    topology_key: str = ""
    priority: int = 0
    preemption_policy: str = "PreemptLowerPriority"
    disruption_all: bool = False
    scheduled: dict[str, str] = field(default_factory=dict)  # member pod key -> node (assumed or bound)
    uid: str = ""

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]


@dataclass
class MemberResult:
    """One member's outcome in a placement: its decision, and (not scheduled) its status."""

    pod: PodInfo
    state: CycleState
    decision: Decision | None = None
    status: GroupStatus | None = None  # None: it fits (decision.node)
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    nominated: str | None = None  # a PodGroupPostFilter's nomination

    @property
    def node(self) -> str | None:
        if self.status is None and self.decision is not None:
            return self.decision.node
        return None


@dataclass
class PlacementResult:
    name: str
    rows: np.ndarray | None  # None: every node
    status: GroupStatus
    members: list[MemberResult]
    any_scheduled: bool = False


@dataclass
class GroupResult:
    info: PodGroupInfo
    status: GroupStatus
    members: list[MemberResult]  # every queued member, in member order
    placement: str | None = None  # the chosen placement's name ("" for every node)
    any_scheduled: bool = False  # a member was scheduled in this cycle
    waiting_on_preemption: bool = False
    duration: float = 0.0


@dataclass
class GroupNode:
    """A node of a group hierarchy: a PodGroup (a leaf, with its queued ``pods`` in member order)
    or a CompositePodGroup (``children``; its ``info.min_count`` is minGroupCount, 1 for basic,
    and ``info.scheduled`` every placed member of its leaves)."""

    info: PodGroupInfo
    composite: bool = False
    children: list["GroupNode"] = field(default_factory=list)
    pods: list[PodInfo] = field(default_factory=list)

    @property
    def id(self) -> str:
        return ("CompositePodGroup/" if self.composite else "PodGroup/") + self.info.key

    def leaves(self) -> list["GroupNode"]:
        return [leaf for c in self.children for leaf in c.leaves()] if self.composite else [self]


class GroupCycleRunner(Protocol):
    """What a PodGroupPostFilter reads of the pod-group cycle (plugins/podgroups/cycle.py's
    PodGroupCycle): its chain, table and nominator, and one more run of a group."""

    chain: "Chain"
    nodes: NodeTable
    nominator: Any

    def run(self, info: "PodGroupInfo", pods: list[PodInfo]) -> "GroupResult": ...


def validate(info: PodGroupInfo, pods: list[PodInfo], placed: list[PodInfo],
             policy_of: Callable[[PodInfo], str | None], policy: str) -> str | None:
    """upstream validatePodGroup, the group's queued ``pods`` and its ``placed`` members: one
    policy (upstream: one scheduler name), the group's priority, its preemption policy
    (PodGroupPreemptionPolicy on). The error's text, or None."""
    for p in pods:
        other = policy_of(p)
        if other is not None and other != policy:
            return f"all pods in a single pod group should have the same policy, got: {other!r} and {policy!r}"
    for p in list(pods) + list(placed):
        if p.priority != info.priority:
            return (f"all pods in a single pod group should have the same priority as the pod group's priority, "
                    f"got {p.priority} and {info.priority}")
        if p.preemption_policy != info.preemption_policy:
            return (f"all pods in a single pod group should have the same preemption policy as the pod group's "
                    f"preemption policy, got {p.preemption_policy} and {info.preemption_policy}")
    return None


def group_plugin(chain: "Chain"):
    """The chain's plugin whose groups are scheduled in a pod-group cycle (GangScheduling: its
    ``GROUP_CYCLE``), or None."""
    return chain.group_cycle


def member_order_key(priority: int, attempts: int, timestamp: float, name: str) -> tuple:
    """upstream PodGroupMemberPodsOrderingFunc: priority desc, attempts desc, timestamp asc, name asc."""
    return (-priority, -attempts, timestamp, name)


# ---------------------------------------------------------------------------------- submitting

def member_status(res: GroupResult, m: MemberResult) -> tuple[GroupStatus | None, bool]:
    """upstream submitPodGroupAlgorithmResult for one member: (the status its failure handler
    reports, whether its nominated node is cleared); (None, False) when it goes to binding."""
    gs = res.status
    if gs.is_error:
        if m.status is not None and m.status.is_error:
            return m.status, True
        return gs, True
    if m.status is None:  # it fitted
        if gs.is_success:
            return None, False
        if gs.is_rejected:
            if res.waiting_on_preemption:
                return gs, False
            return GroupStatus.unschedulable(gs.message()), True
        return GroupStatus.error(f"received unexpected pod group scheduling algorithm status code: {gs.code.name}"), True
    return m.status, False


def condition(res: GroupResult) -> tuple[str, str, str]:
    """The PodGroupInitiallyScheduled condition (status, reason, message) the cycle leads to."""
    gs = res.status
    if gs.is_success:
        return "True", "Scheduled", gs.message()
    if gs.is_rejected:
        return "False", "Unschedulable", gs.message()
    return "False", "SchedulerError", gs.as_error()
