"""Pod-group cycle: kube-scheduler 1.37's scheduleOnePodGroup (schedule_one_podgroup.go, with the
``GenericWorkload`` and ``TopologyAwareWorkloadScheduling`` gates) on the operator's table.

A group's queued members are scheduled together, in one cycle:

1. **Placements** (TopologyPlacementGenerator): without ``schedulingConstraints.topology``, one
   placement of every node; with ``topology[0].key = K``, one per value of the node label K (nodes
   without it are left out), or only the domain of the members already placed. None:
   ``no feasible placements found``. Placed members in several domains: an Error
   ``cannot determine domain for already scheduled pods: more than 1 domain found for pod group: a, b``.
2. **Each placement** (podGroupSchedulingDefaultAlgorithm): PlacementFeasible (GangScheduling:
   ``minCount (m) cannot be satisfied: s scheduled, r remaining`` / ``... is not yet satisfied``)
   first, then every member in member order goes through the policy's whole single-pod cycle
   (``schedule_one`` restricted to the placement's nodes: every PreFilter, Filter, PreScore and Score,
   but no PostFilter); a member that fits is assumed on the table and Reserved, so the next member
   sees it; after each member PlacementFeasible again. A member that does not fit does not stop
   the loop while minCount can still be reached. Then everything is undone (Unreserve, forget, in
   reverse order).
3. **The best placement**: the only feasible one; else the highest total of PodGroupPodsCount (the
   group's placed members plus this placement's, x100 / the largest) and NodeResourcesFit's
   MostAllocated share of the placement's resources after the group (its weight and resources are
   the policy's NodeResourcesFit's); ties at random (the cycle's ``rng``). GangScheduling's
   ``placementScoring: Tightest`` replaces the score by the free room left in the domain (least
   first). No feasible placement: ``pod group is unschedulable, 0/P placements are available,
   first placement status: ...``.

What the caller does with the result (cluster/engine.py, whatif/simulate.py): the winner's
members are assumed, Reserved and Permitted for real and bound; the other members fail with the
statuses ``member_status`` gives (upstream's submitPodGroupAlgorithmResult), and the PodGroup gets
its ``PodGroupInitiallyScheduled`` condition (``condition``). Group preemption (PodGroupPostFilter)
runs between the two when the group is unschedulable (``framework/group_preemption.py``).

Statuses follow upstream's framework Status: ``message()`` is the error (``pod group is
unschedulable``) then the reasons, joined with ", "; ``as_error()`` is the error alone when there
is one. Pure: no I/O, no kopf, no client.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..interface import GROUP_PLACEMENT, CycleState
from ..model.nodetable import BASE_RESOURCES, CPU, MEMORY, NodeTable
from ..model.podinfo import PodInfo
from ..status import Code
from .binding_cycle import run_reserve, run_unreserve
from .decision import Decision
from .schedule import schedule_one

if TYPE_CHECKING:  # pragma: no cover
    from ..instrumentation import CycleRecorder
    from ..queue.nominator import Nominator
    from .chain import Chain

POD_GROUP_UNSCHEDULABLE = "pod group is unschedulable"
GANG = "GangScheduling"
PLACEMENT_GENERATOR = "TopologyPlacementGenerator"
PODS_COUNT = "PodGroupPodsCount"
# CycleState key set on a member's state while the group cycle evaluates it (upstream
# IsPodGroupSchedulingCycle): plugins may read it
POD_GROUP_CYCLE = "framework/pod-group-cycle"
UPSTREAM, TIGHTEST = "Upstream", "Tightest"


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
    evaluated: bool = True

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
    score: int = 0


@dataclass
class GroupResult:
    info: PodGroupInfo
    status: GroupStatus
    members: list[MemberResult]  # every queued member, in member order
    placement: str | None = None  # the chosen placement's name ("" for every node)
    placements: int = 0
    feasible: int = 0  # feasible placements
    scores: dict[str, int] = field(default_factory=dict)  # placement -> total score (several feasible)
    waiting_on_preemption: bool = False
    duration: float = 0.0

    @property
    def scheduled(self) -> bool:
        return self.status.is_success

    def domain(self) -> str | None:
        """``key=value`` of the chosen placement, when the group has a topology key."""
        if self.placement and self.info.topology_key:
            return f"{self.info.topology_key}={self.placement}"
        return None


def placement_feasible(info: PodGroupInfo, remaining: int, scheduled: int) -> GroupStatus:
    """GangScheduling's PlacementFeasible (upstream's words)."""
    m = info.min_count if info.gang else 1
    if remaining + scheduled < m:
        return GroupStatus(Code.UNSCHEDULABLE,
                           [f"minCount ({m}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"],
                           plugin=GANG)
    if scheduled < m:
        return GroupStatus(Code.WAIT, [f"minCount ({m}) is not yet satisfied: {scheduled} scheduled, "
                                       f"{remaining} remaining"], plugin=GANG)
    return GroupStatus()


def generate_placements(info: PodGroupInfo, nodes: NodeTable) -> list[tuple[str, np.ndarray | None]] | GroupStatus:
    """TopologyPlacementGenerator: (name, rows) per placement, rows None for every node; in the
    order of the label's values (upstream's order is a Go map's)."""
    key = info.topology_key
    if not key:
        return [("", None)]
    required: str | None = None
    for pk, node in sorted(info.scheduled.items()):
        row = nodes.index.get(node)
        if row is None:
            return GroupStatus.error(f"cannot determine domain for already scheduled pods: getting node for pod "
                                     f"{pk}: node {node!r} not found")
        value = nodes.specs[row].labels.get(key)
        if value is None:
            return GroupStatus.error(f"cannot determine domain for already scheduled pods: no topology domain "
                                     f"found for pod {pk}")
        if required is not None and required != value:
            return GroupStatus.error(f"cannot determine domain for already scheduled pods: more than 1 domain "
                                     f"found for pod group: {required}, {value}")
        required = value
    out = []
    values = nodes.label_values(key)
    for value in sorted(values):
        if required is not None and value != required:
            continue
        rows = sorted(nodes.index[nm] for nm in values[value] if nm in nodes.index and nodes.index[nm] < nodes.n)
        if rows:
            out.append((value, np.array(rows, dtype=np.int64)))
    if not out:
        return GroupStatus(Code.UNSCHEDULABLE, ["no feasible placements found"], plugin=PLACEMENT_GENERATOR)
    return out


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
    for p in chain.plugins:
        if getattr(p, "GROUP_CYCLE", False):
            return p
    return None


def member_order_key(priority: int, attempts: int, timestamp: float, name: str) -> tuple:
    """upstream PodGroupMemberPodsOrderingFunc: priority desc, attempts desc, timestamp asc, name asc."""
    return (-priority, -attempts, timestamp, name)


class PodGroupCycle:
    """The algorithm for one group on ``nodes`` (the live table: members are assumed on it while
    evaluated and taken off again). ``fit_score(pods, nodes, rows) -> (score, weight)`` is the
    policy's NodeResourcesFit placement score (None: the policy has no NodeResourcesFit)."""

    def __init__(self, chain: "Chain", nodes: NodeTable, rng, nominator: "Nominator | None" = None,
                 recorder: "CycleRecorder | None" = None,
                 fit_score: Callable[[list[PodInfo], NodeTable, np.ndarray], int] | None = None,
                 fit_weight: int = 1, scoring: str = UPSTREAM) -> None:
        self.chain, self.nodes, self.rng, self.nominator = chain, nodes, rng, nominator
        self.recorder = recorder
        self.fit_score, self.fit_weight, self.scoring = fit_score, fit_weight, scoring

    # ------------------------------------------------------------------ one member
    def _member(self, info: PodGroupInfo, pod: PodInfo, rows: np.ndarray | None,
                placement: str) -> tuple[MemberResult, Callable[[], None] | None]:
        state = CycleState(self.recorder) if self.recorder is not None else CycleState()
        state.write(POD_GROUP_CYCLE, info.key)
        d = schedule_one(self.chain, pod, self.nodes, self.rng, state, self.nominator, placement=rows,
                         post_filter=False)
        if not d.scheduled:
            code = d.status.code
            st = GroupStatus(code if code != Code.SUCCESS else Code.ERROR, [], d.message or d.status.message())
            return MemberResult(pod, state, d, st, set(d.unschedulable_plugins), set(d.pending_plugins)), None
        node = d.node
        assert node is not None
        placement_info = {"podGroup": info.key, "minCount": info.min_count if info.gang else None}
        if info.topology_key:
            placement_info["domain"] = f"{info.topology_key}={placement}"
        state.write(GROUP_PLACEMENT, placement_info)
        assumed = copy.copy(pod)
        assumed.node_name = node
        self.nodes.add_pod(assumed, node, assumed=True)
        st = run_reserve(self.chain, state, pod, node)
        nodes, chain = self.nodes, self.chain

        def revert() -> None:
            run_unreserve(chain, state, pod, node)
            if nodes.pod_node.get(pod.key) == node:
                nodes.remove_pod(pod.key)

        if not st.is_success:
            revert()
            if st.is_rejected:  # upstream: a FitError with the one node
                reasons = ", ".join(st.reasons) if st.reasons else st.message()
                msg = f"0/1 nodes are available: 1 {reasons}."
                plugins = {st.plugin} if st.plugin else set()
                return MemberResult(pod, state, d, GroupStatus(st.code, [], msg), plugins), None
            return MemberResult(pod, state, d, GroupStatus.error(st.message())), None
        return MemberResult(pod, state, d), revert

    # ------------------------------------------------------------------ one placement
    def _placement(self, info: PodGroupInfo, pods: list[PodInfo], name: str,
                   rows: np.ndarray | None) -> tuple[PlacementResult, list[Callable[[], None]]]:
        """podGroupSchedulingDefaultAlgorithm. The reverts of a successful result are returned
        (the caller undoes them); an unsuccessful one is undone here."""
        remaining, scheduled = len(pods), len(info.scheduled)
        feas = placement_feasible(info, remaining, scheduled)
        if feas.code == Code.UNSCHEDULABLE:
            return PlacementResult(name, rows, GroupStatus.unschedulable(*feas.reasons), []), []
        status = feas
        members: list[MemberResult] = []
        reverts: list[Callable[[], None]] = []
        any_scheduled = False
        for pod in pods:
            r, rev = self._member(info, pod, rows, name)
            members.append(r)
            if rev is not None:
                reverts.append(rev)
            if r.status is not None and not r.status.is_rejected:
                status = GroupStatus.error(f"failed to schedule other pod from a pod group: {r.status.as_error()}")
                break
            remaining -= 1
            if r.status is None:
                scheduled += 1
            status = placement_feasible(info, remaining, scheduled)
            if status.code == Code.UNSCHEDULABLE:
                break
            any_scheduled = any_scheduled or r.status is None
        if status.is_wait:
            status = GroupStatus.unschedulable(*status.reasons)
        if not status.is_success:
            _revert(reverts)
            reverts = []
            any_scheduled = False
        return PlacementResult(name, rows, status, members, any_scheduled), reverts

    # ------------------------------------------------------------------ scoring
    def _scores(self, info: PodGroupInfo, ok: list[PlacementResult]) -> list[int]:
        if self.scoring == TIGHTEST:
            return [-_free_after(self.nodes, r) for r in ok]
        raw = [len(info.scheduled) + sum(1 for m in r.members if m.node) for r in ok]
        top = max(raw)
        if top == 0:
            raise _ScoreError(f"running PlacementScore plugins: plugin {PODS_COUNT!r} failed with: no pods from pod "
                              f"group are assigned to any of the candidate placements")
        totals = [x * 100 // top for x in raw]
        if self.fit_score is not None:
            for i, r in enumerate(ok):
                placed = [m.pod for m in r.members if m.node]
                rows = r.rows if r.rows is not None else np.arange(self.nodes.n, dtype=np.int64)
                totals[i] += self.fit_score(placed, self.nodes, rows) * self.fit_weight
        return totals

    # ------------------------------------------------------------------ the group
    def run(self, info: PodGroupInfo, pods: list[PodInfo]) -> GroupResult:
        """The algorithm for the group's queued ``pods`` (in member order); every assumption undone."""
        start = time.perf_counter()
        placements = generate_placements(info, self.nodes)
        if isinstance(placements, GroupStatus):
            res = GroupResult(info, placements, [])
        else:
            res = self._best(info, pods, placements)
        if res.status.is_success and not any(m.node for m in res.members):
            res.status = GroupStatus.unschedulable()  # the framework needs one pod scheduled
        _complete(res, pods)
        res.duration = time.perf_counter() - start
        return res

    def _best(self, info: PodGroupInfo, pods: list[PodInfo],
              placements: list[tuple[str, np.ndarray | None]]) -> GroupResult:
        first: PlacementResult | None = None
        ok: list[PlacementResult] = []
        for name, rows in placements:
            r, reverts = self._placement(info, pods, name, rows)
            _revert(reverts)
            if r.status.is_error:
                return GroupResult(info, r.status, r.members, name, len(placements))
            if first is None:
                first = r
            if r.status.is_success:
                ok.append(r)
        assert first is not None
        if not ok:
            st = GroupStatus.unschedulable(f"0/{len(placements)} placements are available, first placement status: "
                                           f"{first.status.as_error()}")
            return GroupResult(info, st, first.members, None, len(placements))
        scores: dict[str, int] = {}
        if len(ok) == 1:
            best = ok[0]
        else:
            try:
                totals = self._scores(info, ok)
            except _ScoreError as e:
                return GroupResult(info, GroupStatus.error(str(e)), [], None, len(placements), len(ok))
            scores = {r.name: t for r, t in zip(ok, totals)}
            top = max(totals)
            tied = [r for r, t in zip(ok, totals) if t == top]
            best = tied[self.rng.randrange(len(tied))] if len(tied) > 1 else tied[0]
        return GroupResult(info, best.status, best.members, best.name, len(placements), len(ok), scores)


class _ScoreError(Exception):
    pass


def _revert(reverts: list[Callable[[], None]]) -> None:
    for fn in reversed(reverts):
        fn()
    reverts.clear()


def _complete(res: GroupResult, pods: list[PodInfo]) -> None:
    """completePodGroupAlgorithmResult: the members never evaluated get a copy of the group's status."""
    done = {m.pod.key for m in res.members}
    for pod in pods:
        if pod.key not in done:
            res.members.append(MemberResult(pod, CycleState(), None, res.status.clone(), evaluated=False))
    order = {p.key: i for i, p in enumerate(pods)}
    res.members.sort(key=lambda m: order.get(m.pod.key, 0))


def _free_after(nodes: NodeTable, r: PlacementResult) -> int:
    """The free cpu (then memory) left in the placement after its members: the Tightest score."""
    rows = r.rows if r.rows is not None else np.arange(nodes.n, dtype=np.int64)
    free_cpu = int((nodes.allocatable[rows, CPU] - nodes.requested[rows, CPU]).clip(min=0).sum())
    free_mem = int((nodes.allocatable[rows, MEMORY] - nodes.requested[rows, MEMORY]).clip(min=0).sum())
    used_cpu = sum(m.pod.requests.get(BASE_RESOURCES[CPU], 0) for m in r.members if m.node)
    used_mem = sum(m.pod.requests.get(BASE_RESOURCES[MEMORY], 0) for m in r.members if m.node)
    # cpu dominates (millicores), memory breaks ties (scaled to stay below one millicore)
    return (free_cpu - used_cpu) * 2**40 + min(max(free_mem - used_mem, 0), 2**40 - 1)


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
