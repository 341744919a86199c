"""Filter, the half of the scheduling cycle that finds where a pod fits (upstream
findNodesThatFitPod, findNodesThatPassFilters, evaluateNominatedNode, numFeasibleNodesToFind):
PreFilter, the Filter plugins over chunks of node rows from the round-robin start, the
nominated-node fast path, the nominated pods counted while filtering, and the statuses of the
nodes rejected (NodeToStatus, what PostFilter gets). schedule.py runs it and goes on to PostFilter,
Score and the choice of a host; its ``NodeFilter`` (a PostFilter's one-row dry run) reuses
``FilterCycle.pre_filter`` and ``_run_filters``. The loops over rows and plugins are schedule_one's
hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..instrumentation import FILTER, PRE_FILTER, CycleRecorder
from ..interface import CycleState, FilterResult, NodeToStatus
from ..model.nodetable import NodeTable
from ..model.podinfo import PodInfo
from ..queue.nominator import Nominator
from ..status import Code, Status
from .chain import Chain
from .runtime import Abort, call, filter_code, first_code, plugin_error

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(percentage: int | None, num_all_nodes: int) -> int:
    """upstream numFeasibleNodesToFind (integer arithmetic; 0/None = adaptive)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    pct = percentage or 0
    if pct == 0:
        pct = 50 - num_all_nodes // 125
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
            pct = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
    n = num_all_nodes * pct // 100
    return max(n, MIN_FEASIBLE_NODES_TO_FIND)


_UNSCHED, _UNRESOLVABLE, _PENDING = int(Code.UNSCHEDULABLE), int(Code.UNSCHEDULABLE_AND_UNRESOLVABLE), int(Code.PENDING)
_REJECTION_CODES = frozenset((_UNSCHED, _UNRESOLVABLE, _PENDING))


class Failures:
    """Filter rejections recorded during the scan, with scan positions for the cut-off."""

    def __init__(self) -> None:
        self.records: list[tuple[str, np.ndarray, np.ndarray, list[tuple[str, np.ndarray]]]] = []

    def add(self, plugin: str, pos: np.ndarray, codes: np.ndarray, reasons: list[tuple[str, np.ndarray]]) -> None:
        self.records.append((plugin, pos, codes, reasons))

    def summarize(self, cutoff: int | None):
        """(evaluated failure count, reason histogram, codes seen, plugins that rejected)."""
        n = 0
        hist: dict[str, int] = {}
        codes: set[int] = set()
        plugins: set[str] = set()
        for plugin, pos, cds, reasons in self.records:
            keep = None if cutoff is None else pos <= cutoff
            k = len(pos) if keep is None else int(np.count_nonzero(keep))
            if k == 0:
                continue
            n += k
            plugins.add(plugin)
            codes.update((cds if keep is None else cds[keep]).tolist())
            for reason, rpos in reasons:
                c = len(rpos) if cutoff is None else int(np.count_nonzero(rpos <= cutoff))
                if c:
                    hist[reason] = hist.get(reason, 0) + c
        return n, hist, codes, plugins


@dataclass
class Scan:
    """What filtering found: feasible rows, and the rejected ones with their statuses."""

    feasible: np.ndarray
    processed: int
    hist: dict[str, int]
    codes: set[int]
    rejectors: set[str]
    failures: Failures
    cutoff: int | None
    order: np.ndarray  # rows in scan order (positions index into it)
    absent: int = 0
    absent_reason: str = ""
    pending: set[str] = field(default_factory=set)  # plugins that answered Pending


class FilterCycle:
    """One pod's scheduling cycle on the snapshot, its PreFilter and Filter steps (schedule.py's
    ``_Cycle`` adds the others: upstream schedulePod and its helpers)."""

    def __init__(self, chain: Chain, pod: PodInfo, nodes: NodeTable, state: CycleState,
                 nominator: Nominator | None = None, placement: np.ndarray | None = None) -> None:
        self.chain, self.pod, self.nodes, self.state, self.nominator = chain, pod, nodes, state, nominator
        self.placement = placement  # a pod-group cycle's (upstream ListNodesInPlacement); None: all
        self.n_all = nodes.n if placement is None else len(placement)
        self.run_post_filter = True  # a pod-group cycle runs none per member
        self.pending: set[str] = set()  # Filter plugins that answered Pending for some node
        self.rec: CycleRecorder = state.recorder

    # ------------------------------------------------------------------------ PreFilter
    def pre_filter(self, dry_run: bool = False) -> tuple[np.ndarray, list[str]]:
        """Every PreFilter plugin, in order (upstream RunPreFilterPlugins). Returns the candidate
        rows (all, or the intersection of the node sets plugins returned) and the narrowing
        plugins. A rejection rejects every node (``Abort`` with the status and the plugins to
        record, which ``schedule._schedule`` turns into the absent-node status of PostFilter's NodeToStatus):
        UnschedulableAndUnresolvable at once; Unschedulable after the later plugins ran (an empty
        intersection of their node sets then wins). Any other status is an Error, Pending
        included. Skip disables the plugin's Filter for this cycle.

        ``dry_run`` (a PostFilter's dry run, ``NodeFilter``): upstream's dry run does not run
        PreFilter again, only the Filters on the cycle's state; an Unschedulable verdict, which
        sent preemption to every node, is therefore no rejection there."""
        chain, pod, nodes, state = self.chain, self.pod, self.nodes, self.state
        allowed: set[str] | None = None
        narrowing: list[str] = []
        rejected: Status | None = None  # an Unschedulable PreFilter status; later PreFilters still run
        for p in chain.pre_filter:
            st, result = call(self.rec, p.NAME, PRE_FILTER, "PreFilter", first_code, p.pre_filter, state, pod, nodes)
            if st.is_skip:
                state.skip_filter.add(p.NAME)
                continue
            if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                raise Abort(st.with_plugin(p.NAME), {p.NAME})
            if st.code == Code.UNSCHEDULABLE:
                rejected = st.with_plugin(p.NAME)  # upstream keeps the last one
                continue
            if not st.is_success:
                raise Abort(plugin_error("PreFilter", p.NAME, st))
            if result is not None:
                narrowing.append(p.NAME)
                allowed = set(result) if allowed is None else allowed & set(result)
                if not allowed:
                    names = sorted(narrowing)
                    msg = (f"node(s) didn't satisfy plugin {names[0]}" if len(names) == 1 else
                           f"node(s) didn't satisfy plugin(s) [{' '.join(names)}] simultaneously")
                    raise Abort(Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,), p.NAME), set(narrowing))
        if rejected is not None and not dry_run:
            raise Abort(rejected, set(narrowing) | {rejected.plugin or ""})
        tree, pos = nodes.tree_rows()  # upstream's node order: where a scan stops, who wins a tie
        if allowed is None:
            if self.placement is not None:
                return self.placement[np.argsort(pos[self.placement], kind="stable")], narrowing
            return tree, narrowing
        rows = np.array([nodes.index[nm] for nm in allowed if nm in nodes.index], dtype=np.int64)
        if self.placement is not None:
            rows = rows[np.isin(rows, self.placement)]
        return rows[np.argsort(pos[rows], kind="stable")], narrowing  # upstream: Go map order

    # ------------------------------------------------------------------------ Filter
    def _run_filters(self, rows: np.ndarray, rpos: np.ndarray, failures: Failures) -> tuple[np.ndarray, np.ndarray]:
        """Filter plugins in order over ``rows``; each gets the rows every earlier one passed.
        Records rejections; an error aborts the cycle. In a sampled cycle each call is timed:
        Success when every row passed, Error, or the first rejected row's code."""
        for p in self.chain.filter:
            if len(rows) == 0:
                break
            if p.NAME in self.state.skip_filter:
                continue
            res: FilterResult = call(self.rec, p.NAME, FILTER, "filter", filter_code, p.filter, self.state,
                                     self.pod, self.nodes, rows)
            if res.error is not None:
                raise Abort(plugin_error("filter", p.NAME, res.error))
            ok = np.asarray(res.passed, dtype=bool)
            if ok.all():
                continue
            bad = ~ok
            if isinstance(res.code, np.ndarray):
                codes = np.asarray(res.code)[bad]
                internal = bool(((codes < _UNSCHED) | ((codes > _UNRESOLVABLE) & (codes != _PENDING))).any())
                pending = bool((codes == _PENDING).any())
            else:
                code = int(res.code)
                codes = np.full(int(bad.sum()), code, dtype=np.int8)
                internal = code not in _REJECTION_CODES
                pending = code == _PENDING
            if pending:
                self.pending.add(p.NAME)
            if internal:
                # not a rejection: an internal error (e.g. state PreFilter should have written)
                msg = "; ".join(r for r, mk in res.reasons if (np.asarray(mk, dtype=bool) & bad).any())
                raise Abort(plugin_error("filter", p.NAME, Status(Code.ERROR, (msg or "error",))))
            reasons = [(r, rpos[np.asarray(mk, dtype=bool) & bad]) for r, mk in res.reasons]
            failures.add(p.NAME, rpos[bad], codes, [(r, x) for r, x in reasons if len(x)])
            rows, rpos = rows[ok], rpos[ok]
        return rows, rpos

    def evaluate_nominated_node(self, candidates: np.ndarray) -> int | None:
        """upstream evaluateNominatedNode: a pod nominated to a node tries that node alone first;
        the row when it passes every filter, else None (then the full scan runs)."""
        row = self.nodes.index.get(self.pod.nominated_node_name)
        if row is None:
            return None
        if self.placement is not None and not (self.placement == row).any():
            return None  # in the cluster, not in this placement (upstream: not an error)
        rows = np.array([row], dtype=np.int64)
        ok, _ = self._run_filters(rows, np.zeros(1, dtype=np.int64), Failures())
        return row if len(ok) else None

    def find_feasible_nodes(self, candidates: np.ndarray, narrowing: list[str]) -> Scan:
        """upstream findNodesThatPassFilters: scan from the round-robin start, in chunks, until
        numFeasibleNodesToFind nodes passed; rejections after the cut-off are not counted."""
        chain = self.chain
        n_all = self.n_all
        m = len(candidates)
        need = num_feasible_nodes_to_find(chain.percentage_of_nodes_to_score, m)  # upstream: len(nodes) scanned
        if not chain.score:
            need = 1
        startidx = chain.next_start_node_index % m if m else 0
        order = np.concatenate((candidates[startidx:], candidates[:startidx]))  # scan from startidx, wrapping
        failures = Failures()
        feasible_parts: list[np.ndarray] = []
        found = 0
        cutoff: int | None = None
        pos = 0
        chunk = max(need + need // 4, 64)
        try:
            while pos < m and found < need:
                rows = order[pos:pos + chunk]
                rpos = np.arange(pos, pos + len(rows), dtype=np.int64)
                rows, rpos = self._run_filters(rows, rpos, failures)
                if found + len(rows) >= need:
                    take = need - found
                    cutoff = int(rpos[take - 1])
                    rows = rows[:take]
                feasible_parts.append(rows)
                found += len(rows)
                pos += chunk
                chunk *= 2
        except Abort:  # upstream advances the start even when a filter errored
            n_failed = failures.summarize(cutoff)[0]
            chain.next_start_node_index = (chain.next_start_node_index + found + n_failed) % n_all
            raise
        n_failed, hist, codes, rejecting = failures.summarize(cutoff)
        chain.next_start_node_index = (chain.next_start_node_index + found + n_failed) % n_all
        feasible = np.concatenate(feasible_parts) if feasible_parts else np.zeros(0, dtype=np.int64)
        pending = self.pending & rejecting  # (plugins whose Pending rows all fell past the cut-off drop out)
        rejecting.update(narrowing)  # upstream's UnschedulablePlugins starts as the narrowing plugins
        absent = n_all - m
        absent_reason = f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(narrowing))}]" if absent else ""
        if absent:
            hist[absent_reason] = hist.get(absent_reason, 0) + absent
            codes.add(int(Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
        return Scan(feasible, len(feasible) + n_failed, hist, codes, rejecting, failures, cutoff, order,
                     absent, absent_reason, pending)

    # ------------------------------------------------------------------------ NodeToStatus
    def node_to_status(self, scan: Scan) -> NodeToStatus:
        """Every evaluated node's status, and the absent-node status (upstream NodeToStatus)."""
        names = self.nodes.names
        order = scan.order
        statuses: dict[str, Status] = {}
        # the nodes of one plugin share few distinct statuses (frozen): one object each
        made: dict[tuple[int, tuple[str, ...]], Status] = {}
        for plugin, pos, codes, reasons in scan.failures.records:
            made.clear()
            keep = pos if scan.cutoff is None else pos[pos <= scan.cutoff]
            if not len(keep):
                continue
            per_pos: dict[int, list[str]] = {}
            for reason, rpos in reasons:
                for x in rpos.tolist():
                    per_pos.setdefault(x, []).append(reason)
            code_of = dict(zip(pos.tolist(), codes.tolist()))
            for x, row in zip(keep.tolist(), order[keep].tolist()):
                k = (code_of[x], tuple(per_pos.get(x, ())))
                st = made.get(k)
                if st is None:
                    st = made[k] = Status(Code(k[0]), k[1], plugin)
                statuses[names[row]] = st
        absent = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (scan.absent_reason,) if scan.absent_reason else ())
        return NodeToStatus(statuses, absent)


def add_nominated(nominator: Nominator | None, pod: PodInfo, nodes: NodeTable, only: str | None = None) -> list[str]:
    """Count the nominated pods of equal or higher priority on their nodes while filtering.
    Upstream adds them per node inside Filter (PreFilter state updated through AddPod); here
    they are in the table from PreFilter on, which gives PreFilter-computed state (spread
    counts, affinity terms) the same view, and taken out again before scoring. ``only``: those
    nominated to that node alone (upstream's RunFilterPluginsWithNominatedPods for one node:
    a pod group's reprieve check, one member on one node at a time)."""
    if not nominator:
        return []
    return nodes.add_pods(nominator.pods_for(pod, only))
