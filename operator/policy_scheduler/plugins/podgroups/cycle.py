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
import functools
import time
from typing import TYPE_CHECKING, Callable, Final

import numpy as np

from ...framework.cycle.binding_cycle import run_reserve, run_unreserve
from ...framework.cycle.podgroup_result import (POD_GROUP_UNSCHEDULABLE, GroupNode, GroupResult, GroupStatus,
                                                MemberResult, PlacementResult, PodGroupInfo, condition, group_plugin,
                                                member_order_key, member_status, validate)
from ...framework.cycle.schedule import schedule_one
from ...framework.interface import GROUP_PLACEMENT, CycleState
from ...framework.model.nodetable import BASE_RESOURCES, CPU, MEMORY, NodeTable
from ...framework.model.podinfo import PodInfo
from ...framework.status import Code

if TYPE_CHECKING:  # pragma: no cover
    from ...framework.instrumentation import CycleRecorder
    from ...framework.queue.nominator import Nominator
    from ...framework.cycle.chain import Chain

GANG = "GangScheduling"
PLACEMENT_GENERATOR = "TopologyPlacementGenerator"
PODS_COUNT = "PodGroupPodsCount"
# CycleState key set on a member's state while the group cycle evaluates it (upstream
# IsPodGroupSchedulingCycle): plugins may read it
POD_GROUP_CYCLE = "framework/pod-group-cycle"
UPSTREAM: Final = "Upstream"
TIGHTEST: Final = "Tightest"


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


def generate_placements(info: PodGroupInfo, nodes: NodeTable,
                        parent: np.ndarray | None = None) -> list[tuple[str, np.ndarray | None]] | GroupStatus:
    """TopologyPlacementGenerator within the ``parent`` placement (None: every node): (name, rows)
    per placement; in the order of the label's values (upstream's order is a Go map's)."""
    key = info.topology_key
    if not key:
        return [("", parent)]
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
    out: list[tuple[str, np.ndarray | None]] = []
    values = nodes.label_values(key)
    allowed = set(parent.tolist()) if parent is not None else set()
    for value in sorted(values):
        if required is not None and value != required:
            continue
        rows = sorted(nodes.index[nm] for nm in values[value] if nm in nodes.index and nodes.index[nm] < nodes.n)
        if parent is not None:
            rows = [r for r in rows if r in allowed]
        if rows:
            out.append((value, np.array(rows, dtype=np.int64)))
    if not out:
        return GroupStatus(Code.UNSCHEDULABLE, ["no feasible placements found"], plugin=PLACEMENT_GENERATOR)
    return out


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
            gst = GroupStatus(code if code != Code.SUCCESS else Code.ERROR, [], d.message or d.status.message())
            return MemberResult(pod, state, d, gst, set(d.unschedulable_plugins), set(d.pending_plugins)), None
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

    def _choose(self, info: PodGroupInfo, ok: list[PlacementResult]) -> int:
        """findBestPlacement: the index of the feasible placement to keep (the only one, else the
        best total, ties at random). _ScoreError when a score plugin fails."""
        if len(ok) == 1:
            return 0
        totals = self._scores(info, ok)
        top = max(totals)
        tied = [i for i, t in enumerate(totals) if t == top]
        return tied[self.rng.randrange(len(tied))] if len(tied) > 1 else tied[0]

    # ------------------------------------------------------------------ the group
    def run(self, info: PodGroupInfo, pods: list[PodInfo]) -> GroupResult:
        """The algorithm for one PodGroup's queued ``pods`` (in member order); every assumption
        undone."""
        node = GroupNode(info, pods=pods)
        return self.run_tree(node)[node.id]

    def run_tree(self, root: GroupNode) -> dict[str, GroupResult]:
        """runRootSchedulingAlgorithm and the completion of its results: a result per node of the
        hierarchy (by ``GroupNode.id``), every leaf's with every queued member; every assumption
        undone. A child that succeeded inside a failed parent gets the parent's status (the same
        object, as upstream's)."""
        start = time.perf_counter()
        results: dict[str, GroupResult] = {}
        res, reverts = self._algorithm(root, None, results, keep=root.composite)
        _revert(reverts)
        results[root.id] = res
        if res.status.is_success and not res.any_scheduled:
            res.status = GroupStatus.unschedulable()  # the framework needs one pod scheduled
        _propagate(root, results, None)
        for leaf in root.leaves():
            _complete(results[leaf.id], leaf.pods)
        res.duration = time.perf_counter() - start
        return results

    def _algorithm(self, node: GroupNode, rows: np.ndarray | None, results: dict[str, GroupResult],
                   keep: bool = True) -> tuple[GroupResult, list[Callable[[], None]]]:
        """podGroupSchedulingRecursiveAlgorithm: a PodGroup's placement algorithm, or a
        CompositePodGroup's; the chosen result stays assumed (its reverts returned) so that the
        siblings evaluated next see it (``keep``; a lone PodGroup's would be undone at once)."""
        if node.composite:
            return self._composite(node, rows, results)
        placements = generate_placements(node.info, self.nodes, rows)
        if isinstance(placements, GroupStatus):
            res = GroupResult(node.info, placements, [])
            results[node.id] = res
            return res, []
        res = self._best(node.info, node.pods, placements)
        results[node.id] = res
        reverts = self._assume(res.members, res.info, res.placement) if keep and res.status.is_success else []
        return res, reverts

    def _assume(self, members: list[MemberResult], info: PodGroupInfo, placement) -> list[Callable[[], None]]:
        """assumeSubtreeWithRevert for members: each that fits assumed on its node and Reserved again."""
        reverts: list[Callable[[], None]] = []
        for m in members:
            node = m.node
            if node is None:
                continue
            assumed = copy.copy(m.pod)
            assumed.node_name = node
            self.nodes.add_pod(assumed, node, assumed=True)
            st = run_reserve(self.chain, m.state, m.pod, node)
            reverts.append(functools.partial(_undo, self.chain, self.nodes, m.state, m.pod, node))
            if not st.is_success:
                break
        return reverts

    def _composite(self, node: GroupNode, rows: np.ndarray | None,
                   results: dict[str, GroupResult]) -> tuple[GroupResult, list[Callable[[], None]]]:
        """compositePodGroupSchedulingPlacementAlgorithm: the composite's placements (its own
        topology key within ``rows``), its children evaluated in each, the best one kept."""
        placements = generate_placements(node.info, self.nodes, rows)
        if isinstance(placements, GroupStatus):
            res = GroupResult(node.info, placements, [])
            results[node.id] = res
            return res, []
        first: dict[str, GroupResult] | None = None
        ok: list[tuple[str, np.ndarray | None, dict[str, GroupResult]]] = []
        for name, prows in placements:
            sub: dict[str, GroupResult] = {}
            r, reverts = self._composite_default(node, prows, sub)
            _revert(reverts)
            if r.status.is_error:
                results[node.id] = r
                return r, []
            if first is None:
                first = sub
            if r.status.is_success:
                ok.append((name, prows, sub))
        assert first is not None
        if not ok:
            root = first[node.id]
            root.status = GroupStatus.unschedulable(f"0/{len(placements)} placements are available, first placement "
                                                    f"status: {root.status.as_error()}")
            results.update(first)
            return root, []
        views = [PlacementResult(name, prows, sub[node.id].status,
                                 [m for leaf in _successful_leaves(node, sub) for m in leaf.members])
                 for name, prows, sub in ok]
        try:
            name, prows, sub = ok[self._choose(node.info, views)]
        except _ScoreError as e:
            res = GroupResult(node.info, GroupStatus.error(str(e)), [])
            results[node.id] = res
            return res, []
        reverts = []
        for leaf in _successful_leaves(node, sub):
            reverts += self._assume(leaf.members, leaf.info, leaf.placement)
        results.update(sub)
        root = sub[node.id]
        root.placement = name
        return root, reverts

    def _composite_default(self, node: GroupNode, rows: np.ndarray | None,
                           results: dict[str, GroupResult]) -> tuple[GroupResult, list[Callable[[], None]]]:
        """compositePodGroupSchedulingDefaultAlgorithm: PlacementFeasible on the children
        (minGroupCount), each child's algorithm in turn (its result kept assumed for the next)."""
        reverts: list[Callable[[], None]] = []
        remaining, scheduled = len(node.children), 0
        status = placement_feasible(node.info, remaining, scheduled)
        any_scheduled = False
        if status.code not in (Code.UNSCHEDULABLE, Code.ERROR):
            for child in node.children:
                cres, creverts = self._algorithm(child, rows, results)
                if cres.status.is_error:
                    status = GroupStatus.error(f"composite pod group evaluation failed due to child error: "
                                               f"{cres.status.as_error()}")
                    reverts += creverts
                    break
                any_scheduled = any_scheduled or cres.any_scheduled
                reverts += creverts
                remaining -= 1
                if cres.status.is_success:
                    scheduled += 1
                status = placement_feasible(node.info, remaining, scheduled)
                if status.code == Code.UNSCHEDULABLE:
                    break
            if status.is_wait:
                status = GroupStatus.unschedulable(*status.reasons)
        res = GroupResult(node.info, status, [], any_scheduled=any_scheduled)
        results[node.id] = res
        if not status.is_success:
            _revert(reverts)
            res.any_scheduled = False
        return res, reverts

    def _best(self, info: PodGroupInfo, pods: list[PodInfo],
              placements: list[tuple[str, np.ndarray | None]]) -> GroupResult:
        first: PlacementResult | None = None
        ok: list[PlacementResult] = []
        for name, rows in placements:
            r, reverts = self._placement(info, pods, name, rows)
            _revert(reverts)
            if r.status.is_error:
                return GroupResult(info, r.status, r.members, name)
            if first is None:
                first = r
            if r.status.is_success:
                ok.append(r)
        assert first is not None
        if not ok:
            st = GroupStatus.unschedulable(f"0/{len(placements)} placements are available, first placement status: "
                                           f"{first.status.as_error()}")
            return GroupResult(info, st, first.members)
        try:
            best = ok[self._choose(info, ok)]
        except _ScoreError as e:
            return GroupResult(info, GroupStatus.error(str(e)), [])
        return GroupResult(info, best.status, best.members, best.name, any_scheduled=best.any_scheduled)


def _undo(chain, nodes: NodeTable, state: CycleState, pod: PodInfo, node: str) -> None:
    run_unreserve(chain, state, pod, node)
    if nodes.pod_node.get(pod.key) == node:
        nodes.remove_pod(pod.key)


def _successful_leaves(node: GroupNode, results: dict[str, GroupResult]) -> list[GroupResult]:
    """successfulLeafResults: the leaves whose result and every ancestor's succeeded."""
    res = results.get(node.id)
    if res is None or not res.status.is_success:
        return []
    if not node.composite:
        return [res] if res.members else []
    return [leaf for c in node.children for leaf in _successful_leaves(c, results)]


def _propagate(node: GroupNode, results: dict[str, GroupResult], parent: GroupStatus | None) -> None:
    """completeCompositePodGroupAlgorithmResultMap: a child missing, or succeeded inside a failed
    parent, gets the parent's status (the same object)."""
    res = results.get(node.id)
    if res is None or (parent is not None and not parent.is_success and res.status.is_success):
        res = GroupResult(node.info, parent if parent is not None else GroupStatus(), [])
        results[node.id] = res
    for c in node.children:
        _propagate(c, results, res.status)


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
            res.members.append(MemberResult(pod, CycleState(), None, res.status.clone()))
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
