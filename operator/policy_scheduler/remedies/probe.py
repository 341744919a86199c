"""What the remedies search asks of the scheduling chain, read-only:

- ``Probe.verdicts(pod)``: every Filter plugin's verdict on every node (not only up to the first
  rejection, as the cycle stops): which plugins reject each node and why. This is the per-node
  diagnosis candidates are drawn from (a node rejected only by NodeResourcesFit may open by a
  smaller request, one rejected only by TaintToleration by a toleration, ...).
- ``Probe.feasible(pod, table)``: the nodes a (changed) pod passes PreFilter and every Filter on,
  over every node (the cycle's scan stops at numFeasibleNodesToFind): the nodes it opens.
- ``Probe.place(pod, table)``: the pod's scheduling cycle itself (framework/cycle/schedule.py
  ``schedule_one``, PreFilter to select_host, no PostFilter: nothing is preempted or nominated),
  from the chain's current round-robin start, which is put back after: the node it would get.

Nothing is written: no Reserve, no assume, no queue. The nominated pods are counted on their
nodes as the cycle counts them (added to the table and taken out again, as ``schedule_one``
does). A change to the cluster is simulated on ``overlay(table)``: a NodeTable sharing the
live table's read-only parts (labels, node order) and holding its own copies of what a change
or the cycle's bookkeeping writes, so the live table is never changed.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field

import numpy as np

from ..framework.cycle.chain import Chain
from ..framework.cycle.filtering import FilterCycle, add_nominated
from ..framework.cycle.runtime import Abort
from ..framework.cycle.schedule import Decision, schedule_one
from ..framework.interface import CycleState
from ..framework.model.bounded import BoundedCache
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.queue.nominator import Nominator
from ..framework.interface import NodeToStatus
from ..framework.status import Code, Status

OVERLAY_MASK_CACHE_BYTES = 8 << 20  # an overlay whose nodes changed memoizes its masks anew, in this much
MAX_STATUSES = 100_000  # per-node statuses kept (one per node of a large cluster)
_VERSIONS = itertools.count(1)  # an overlay's versions are negative: never equal to a live table's


def overlay(table: NodeTable, nodes_changed: bool = False) -> NodeTable:
    """A NodeTable to simulate a change to the cluster on: the live table's node order, labels
    and label index shared (no overlay changes them), every column and per-row record a pod or
    node change writes copied. ``nodes_changed``: the caller will change node specs (taints,
    unschedulable), so the memo of node masks is a new one."""
    t = copy.copy(table)
    t.resources, t.res_index = list(table.resources), dict(table.res_index)
    t.allocatable, t.requested = table.allocatable.copy(), table.requested.copy()
    t.nonzero, t.unschedulable = table.nonzero.copy(), table.unschedulable.copy()
    t.names, t.specs = list(table.names), list(table.specs)
    t.pods = [dict(d) for d in table.pods]
    t.pod_node, t.assumed = dict(table.pod_node), set(table.assumed)
    t._orphans = {k: dict(v) for k, v in table._orphans.items()}
    t.used_ports = [dict(d) for d in table.used_ports]
    t.loose = [dict(d) for d in table.loose]
    t._request_cols = {}  # its columns may come to differ from the live table's
    t.pods_with_affinity = [dict(d) for d in table.pods_with_affinity]
    t.pods_with_volumes = [dict(d) for d in table.pods_with_volumes]
    t.pvc_refs = dict(table.pvc_refs)
    t.required_affinity_terms = {k: dict(v) for k, v in table.required_affinity_terms.items()}
    t.required_anti_affinity_terms = {k: dict(v) for k, v in table.required_anti_affinity_terms.items()}
    t.preferred_affinity_terms = {k: dict(v) for k, v in table.preferred_affinity_terms.items()}
    t.preferred_anti_affinity_terms = {k: dict(v) for k, v in table.preferred_anti_affinity_terms.items()}
    t.image_nodes = dict(table.image_nodes)
    t.version = -next(_VERSIONS)
    if nodes_changed:
        t._mask_cache = BoundedCache(OVERLAY_MASK_CACHE_BYTES)
        t.node_version = -next(_VERSIONS)
        t._tree_rows = None
    return t


@dataclass
class Verdicts:
    """Every Filter plugin's verdict on every node for one pod (masks over the table's rows)."""

    n: int
    rejected: dict[str, np.ndarray] = field(default_factory=dict)  # plugin -> rows it rejects
    reasons: dict[str, list[tuple[str, np.ndarray]]] = field(default_factory=dict)  # plugin -> (reason, rows)
    outside: np.ndarray | None = None  # rows PreFilter left out (narrowing plugins)
    narrowing: list[str] = field(default_factory=list)
    prefilter: Status | None = None  # a rejection (or error) at PreFilter: no node was filtered
    error: str = ""  # a Filter plugin that failed: no verdicts
    # the status the cycle records for each node: its first rejecting plugin's (row -> Status)
    first: dict[int, Status] = field(default_factory=dict)

    def node_to_status(self, names: list[str]) -> NodeToStatus:
        """The cycle's NodeToStatus (what PostFilter gets) rebuilt from the verdicts."""
        if self.prefilter is not None:
            return NodeToStatus({}, self.prefilter)
        absent = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                        (f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(self.narrowing))}]",))
        return NodeToStatus({names[r]: st for r, st in self.first.items()}, absent)

    def rejected_by_others(self, plugins: set[str]) -> np.ndarray:
        """Rows some plugin outside ``plugins`` rejects (or PreFilter left out)."""
        m = np.zeros(self.n, dtype=bool) if self.outside is None else self.outside.copy()
        for p, mask in self.rejected.items():
            if p not in plugins:
                m |= mask
        return m

    def only(self, plugins: set[str]) -> np.ndarray:
        """Rows rejected by some plugin of ``plugins`` and by no other: what changing only what
        those plugins read can open."""
        mine = np.zeros(self.n, dtype=bool)
        for p in plugins:
            if p in self.rejected:
                mine |= self.rejected[p]
        return mine & ~self.rejected_by_others(plugins)

    def reason_rows(self, plugin: str, prefix: str) -> list[tuple[str, np.ndarray]]:
        return [(r, m) for r, m in self.reasons.get(plugin, ()) if r.startswith(prefix)]

    def rejectors(self) -> list[str]:
        return sorted(p for p, m in self.rejected.items() if m.any())


class Probe:
    """The chain's PreFilter and Filter, and its cycle, for one pod and its changed copies."""

    def __init__(self, chain: Chain, table: NodeTable, nominator: Nominator | None = None) -> None:
        self.chain, self.table, self.nominator = chain, table, nominator
        self.runs = 0  # filter passes and cycles run (the cost of the search)

    def _prefilter(self, pod: PodInfo, table: NodeTable, state: CycleState) -> tuple[np.ndarray, list[str]]:
        return FilterCycle(self.chain, pod, table, state, self.nominator).pre_filter()

    def verdicts(self, pod: PodInfo) -> Verdicts:
        table = self.table
        v = Verdicts(table.n)
        state = CycleState()
        added = add_nominated(self.nominator, pod, table)
        self.runs += 1
        try:
            try:
                rows, v.narrowing = self._prefilter(pod, table, state)
            except Abort as a:
                v.prefilter = a.status
                return v
            if len(rows) < table.n:
                v.outside = np.ones(table.n, dtype=bool)
                v.outside[rows] = False
            for p in self.chain.filter:
                if p.NAME in state.skip_filter or not len(rows):
                    continue
                try:
                    res = p.filter(state, pod, table, rows)
                except Exception as e:  # the cycle would fail with an Error: no remedy to find
                    v.error = f"{p.NAME}: {type(e).__name__}: {e}"
                    return v
                if res.error is not None:
                    v.error = f"{p.NAME}: {res.error.message()}"
                    return v
                ok = np.asarray(res.passed, dtype=bool)
                if ok.all():
                    continue
                bad = np.zeros(table.n, dtype=bool)
                bad[rows[~ok]] = True
                v.rejected[p.NAME] = bad
                out = []
                for reason, mask in res.reasons:
                    m = np.zeros(table.n, dtype=bool)
                    m[rows[np.asarray(mask, dtype=bool) & ~ok]] = True
                    if m.any():
                        out.append((reason, m))
                v.reasons[p.NAME] = out
                codes = np.asarray(res.code) if isinstance(res.code, np.ndarray) else None
                for k in np.flatnonzero(~ok).tolist():
                    row = int(rows[k])
                    if row not in v.first and len(v.first) < MAX_STATUSES:
                        code = Code(int(codes[k])) if codes is not None else Code(int(res.code))
                        v.first[row] = Status(code, tuple(r for r, m in out if m[row]), p.NAME)
            return v
        finally:
            table.remove_pods(added)

    def feasible(self, pod: PodInfo, table: NodeTable | None = None) -> np.ndarray:
        """The rows ``pod`` passes PreFilter and every Filter on (empty on any rejection or error)."""
        table = self.table if table is None else table
        state = CycleState()
        added = add_nominated(self.nominator, pod, table)
        self.runs += 1
        empty = np.zeros(0, dtype=np.int64)
        try:
            try:
                rows, _ = self._prefilter(pod, table, state)
            except Abort:
                return empty
            for p in self.chain.filter:
                if not len(rows):
                    break
                if p.NAME in state.skip_filter:
                    continue
                try:
                    res = p.filter(state, pod, table, rows)
                except Exception:
                    return empty
                if res.error is not None:
                    return empty
                rows = rows[np.asarray(res.passed, dtype=bool)]
            return rows
        finally:
            table.remove_pods(added)

    def place(self, pod: PodInfo, table: NodeTable | None = None) -> Decision:
        """The pod's cycle without PostFilter, the round-robin start put back."""
        chain = self.chain
        start = chain.next_start_node_index
        self.runs += 1
        try:
            return schedule_one(chain, pod, self.table if table is None else table, None, CycleState(), self.nominator,
                                post_filter=False)
        finally:
            chain.next_start_node_index = start
