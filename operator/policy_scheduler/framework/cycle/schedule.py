"""schedule_one: the scheduling cycle for one pod on the snapshot, in upstream's steps
(schedule_one.go): ``pre_filter``, ``find_feasible_nodes`` (with the nominated-node fast path and
the nominated pods counted), ``post_filter`` when nothing fits (after a rejection at PreFilter
too, every node then carrying it), ``prioritize`` and ``select_host``. Reserve and Permit follow
in the caller (binding_cycle.py), after it assumed the pod.

One error channel: a rejection (Unschedulable, UnschedulableAndUnresolvable, and Pending at
Filter) only ever says the pod does not fit, and names the plugins that rejected it so the queue
knows which events may wake it. Anything else a plugin returns, or raises, aborts the cycle with
an Error in upstream's words (``running "X" filter plugin: ...``), and the pod is retried with
backoff; except an Error status returned at PostFilter, which upstream adds to the FitError
message of a pod that stays unschedulable. Never raises: a pod that cannot be parsed, a failing
plugin, no nodes: a Decision whose status says why. Plugins are called, timed and their errors
worded by runtime.py; the Decision and its messages are in decision.py. PreFilter, Filter and the
statuses of the rejected nodes (``FilterCycle``) are filtering.py's; this module runs the steps
in order and holds PostFilter (with ``NodeFilter``, its one-row dry run), Score and select.
"""

from __future__ import annotations

import random
import time
from time import perf_counter

import numpy as np

from .chain import Chain
from .decision import Decision, NodeScore, fit_error_message  # Decision: also imported from here by cluster/, whatif/
from ..instrumentation import FILTER, POST_FILTER, PRE_FILTER, PRE_SCORE, SCORE, CycleRecorder
from ..interface import DRY_RUN_KEY, MAX_NODE_SCORE, MIN_NODE_SCORE, CycleState, NodeToStatus
from ..model.nodetable import NodeTable
from ..model.nodetree import heap_root_among
from ..queue.nominator import Nominator
from ..model.podinfo import PodInfo
from .filtering import Failures, FilterCycle, add_nominated
from .runtime import (Abort, call, cycle_failed, first_code, invalid_score, plugin_error, score, status_code,
                      timed)
from ..status import Code, Status

TOP_NODES = 5  # how many nodes a Decision keeps per-plugin scores for
DESCRIBED_NODES = 3  # how many of them get plugin details (see describe_top)
NO_NODES = "no nodes available to schedule pods"
# a pod with spec.resourceClaims under a chain without a Filter plugin that allocates them
# (``ALLOCATES_CLAIMS``: DynamicResources)
NO_CLAIM_ALLOCATOR = ("pod has resourceClaims, and its policy has no DynamicResources plugin to allocate their "
                      "devices")
# CycleState key under which ``post_filter`` offers PostFilter plugins a ``NodeFilter``: the
# cycle's PreFilter and Filter for one node row (DefaultPreemption's dry run, preemption.py)
NODE_FILTER_KEY = "framework/node-filter"
# CycleState key under which a cycle that scored leaves (feasible rows, totals, normalized scores
# plugins x feasible, [(plugin, weight)]): a shadow comparison (shadow.py) reads it; one feasible
# node leaves (rows, None, None, [])
SCORES_KEY = "framework/scores"
# pseudo plugin recorded as the rejector of a pod whose spec cannot be parsed: it registers only
# the pod's own update, so the pod waits for a fix instead of being retried
POD_SPEC = "PodSpec"


def describe_top(chain: Chain, state: CycleState, pod: PodInfo, nodes: NodeTable, top: list[NodeScore],
                 rows: np.ndarray) -> None:
    """Optional plugin method ``describe(state, pod, nodes, rows) -> list[dict | None] | None``:
    what the plugin saw of each of the best nodes (e.g. metric values and their freshness),
    kept in ``NodeScore.details`` for explain. Called once per cycle for the first
    DESCRIBED_NODES nodes (``rows``: theirs, in ``top``'s order); a plugin returns None (or None
    per node) when it has nothing to say."""
    for p in chain.describers:
        try:
            out = p.describe(state, pod, nodes, rows[:DESCRIBED_NODES])
        except Exception:  # explain details are best effort: never fail a placement for them
            continue
        for s, d in zip(top, out or ()):
            if d:
                s.details[p.NAME] = d


class _Cycle(FilterCycle):
    """One pod's scheduling cycle on the snapshot (upstream schedulePod and its helpers): its
    PreFilter and Filter (``FilterCycle``, filtering.py), then PostFilter, Score and select."""

    # ------------------------------------------------------------------------ PostFilter
    def post_filter(self, statuses: NodeToStatus) -> tuple[str, str | None]:
        """PostFilter plugins in order, as upstream's RunPostFilterPlugins. Returns (the text added
        to the FitError message, the node a plugin nominated). The first plugin that succeeds ends
        the run with its message and nomination; one that answers UnschedulableAndUnresolvable ends
        it with its message; one that answers anything else (an Error) ends it with its message and
        no nomination, and the pod stays unschedulable, not failed (upstream schedulingAlgorithm);
        else the rejecting plugins' messages are joined with ", ". A plugin that raises aborts the
        cycle with an Error, as at every point."""
        msgs: list[str] = []
        rec = self.rec
        t0 = perf_counter()
        code = Code.UNSCHEDULABLE  # upstream: no PostFilter plugin succeeded
        self.state.write(NODE_FILTER_KEY, NodeFilter(self.chain, self.nominator))
        try:
            for p in self.chain.post_filter:
                pst, node = call(self.rec, p.NAME, POST_FILTER, "PostFilter", first_code, p.post_filter, self.state,
                                 self.pod, self.nodes, statuses)
                if pst.is_success:
                    code = Code.SUCCESS
                    return pst.message(), node or None
                if pst.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    code = pst.code
                    return pst.message(), None
                if not pst.is_rejected:  # upstream: AsStatus(s.AsError()), an Error (Skip and Wait: none)
                    code = Code.ERROR if pst.code == Code.ERROR else Code.SUCCESS
                    return (pst.message() if pst.code == Code.ERROR else ""), None
                if pst.reasons:
                    msgs.append(pst.message())
            return ", ".join(msgs), None
        except Abort:
            code = Code.ERROR
            raise
        finally:
            rec.point(POST_FILTER, code, perf_counter() - t0)

    # ------------------------------------------------------------------------ PreScore, Score
    def prioritize(self, feasible: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple[str, int]]]:
        """PreScore, Score and NormalizeScore for every plugin (in range [0, 100]), weighted.
        Returns (total per feasible node, normalized scores plugins x nodes, (plugin, weight))."""
        chain, state, pod, nodes = self.chain, self.state, self.pod, self.nodes
        rec = self.rec
        t0 = perf_counter()
        try:
            for p in chain.pre_score:
                st = call(rec, p.NAME, PRE_SCORE, "PreScore", status_code, p.pre_score, state, pod, nodes, feasible)
                if st.is_skip:
                    state.skip_score.add(p.NAME)
                elif not st.is_success:
                    raise Abort(plugin_error("PreScore", p.NAME, st))
        except Abort as a:
            rec.point(PRE_SCORE, a.status.code, perf_counter() - t0)
            raise
        rec.point(PRE_SCORE, Code.SUCCESS, perf_counter() - t0)
        return timed(self.rec, SCORE, self._score, feasible)

    def _score(self, feasible: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple[str, int]]]:
        chain, state, pod, nodes = self.chain, self.state, self.pod, self.nodes
        rec = self.rec
        # as upstream, every Score plugin runs before the normalized scores are range-checked
        scored: list[tuple[str, int]] = []
        norms: list[np.ndarray] = []
        for p, weight in chain.score:
            if p.NAME in state.skip_score:
                continue
            norms.append(score(rec, p, state, pod, nodes, feasible))
            scored.append((p.NAME, weight))
        if not scored:
            return np.ones(len(feasible), dtype=np.int64), np.zeros((0, len(feasible)), dtype=np.int64), scored
        mat = np.vstack(norms)  # plugins x feasible
        if mat.min() < MIN_NODE_SCORE or mat.max() > MAX_NODE_SCORE:  # the first plugin out of range fails
            out_of_range = (mat < MIN_NODE_SCORE) | (mat > MAX_NODE_SCORE)
            i = int(np.flatnonzero(out_of_range.any(axis=1))[0])
            bad, name = int(mat[i][out_of_range[i]][0]), scored[i][0]
            raise Abort(invalid_score(name, bad))
        weights = np.array([w for _, w in scored], dtype=np.int64)
        return weights @ mat, mat, scored

    # ------------------------------------------------------------------------ select
    def select_host(self, feasible: np.ndarray, total: np.ndarray, mat: np.ndarray,
                    scored: list[tuple[str, int]]) -> tuple[int, list[NodeScore], np.ndarray]:
        """The best total, ties as upstream's heap breaks them (``heap_root_among``); the top
        nodes with their per-plugin scores."""
        best = np.flatnonzero(total == total.max())
        pick = heap_root_among(best)
        k = min(TOP_NODES, len(total))
        top_idx = np.argsort(-total, kind="stable")[:k]
        if pick not in top_idx:
            top_idx = np.concatenate([[pick], top_idx[: k - 1]])
        else:
            top_idx = np.concatenate([[pick], top_idx[top_idx != pick]])
        top_rows = feasible[top_idx]
        top_norms = mat[:, top_idx].T.tolist()  # top nodes x plugins
        names = self.nodes.names
        top = [NodeScore(names[r], t, {name: (v, v * w) for (name, w), v in zip(scored, vs)})
               for r, t, vs in zip(top_rows.tolist(), total[top_idx].tolist(), top_norms)]
        return int(feasible[pick]), top, top_rows


class NodeFilter:
    """The chain's PreFilter and Filter for one pod on one node row of the live table, on a
    fresh CycleState (upstream RunFilterPluginsWithNominatedPods after the PreFilter state
    was brought up to date): what a PostFilter plugin dry-runs after changing the table.
    ``add_nominated``/``remove`` count the nominated pods of equal or higher priority as the
    cycle does."""

    __slots__ = ("chain", "nominator", "_rows", "_pos")

    def __init__(self, chain: Chain, nominator: Nominator | None = None) -> None:
        self.chain, self.nominator = chain, nominator
        self._rows = np.zeros(1, dtype=np.int64)
        self._pos = np.zeros(1, dtype=np.int64)

    def add_nominated(self, pod: PodInfo, nodes: NodeTable, only: str | None = None) -> list[str]:
        return add_nominated(self.nominator, pod, nodes, only)

    def __call__(self, pod: PodInfo, nodes: NodeTable, row: int) -> Status:
        """Success, the status of the plugin that rejected the node (its code and reasons), or
        an Error status in the runner's words."""
        state = CycleState()
        state.write(DRY_RUN_KEY, True)
        cycle = FilterCycle(self.chain, pod, nodes, state)
        failures = Failures()
        self._rows[0] = row
        try:
            candidates, narrowing = cycle.pre_filter(dry_run=True)
            if narrowing and not (candidates == row).any():
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                              (f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(narrowing))}]",))
            ok, _ = cycle._run_filters(self._rows, self._pos, failures)
        except Abort as a:
            return a.status
        except Exception as e:  # a framework bug
            return cycle_failed("scheduling", e)
        if len(ok):
            return Status.success()
        plugin, _, codes, reasons = failures.records[-1]
        return Status(Code(int(codes[0])), tuple(r for r, _ in reasons), plugin)


def schedule_one(chain: Chain, pod: PodInfo, nodes: NodeTable, rng: random.Random | None = None,
                 state: CycleState | None = None, nominator: Nominator | None = None,
                 recorder: CycleRecorder | None = None, placement: np.ndarray | None = None,
                 post_filter: bool = True) -> Decision:
    """One scheduling cycle; extension points (and sampled plugin calls) reported to ``recorder``
    (default: the state's). A pod-group cycle (plugins/podgroups/cycle.py) passes its ``placement`` (its rows: the
    nodes scanned, the N of "0/N nodes") and ``post_filter=False`` (none per member). ``rng`` is
    not drawn from: node ties are upstream's heap order (select_host); the group cycle's are random."""
    start = time.perf_counter()
    state = state or CycleState()
    if recorder is not None:
        state.recorder = recorder
    n_all = nodes.n if placement is None else len(placement)
    if pod.parse_error:
        st = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (f"invalid pod spec: {pod.parse_error}",), POD_SPEC)
        return Decision(pod.key, None, st, n_all, message=fit_error_message(n_all, {}, st.message()),
                        unschedulable_plugins={POD_SPEC}, duration=time.perf_counter() - start)
    if pod.resource_claims and not any(getattr(p, "ALLOCATES_CLAIMS", False) for p in chain.filter):
        # bound without its devices allocated, the pod would never start (the kubelet waits for an
        # allocation nobody makes): refused until its policy has DynamicResources
        st = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_CLAIM_ALLOCATOR,), POD_SPEC)
        return Decision(pod.key, None, st, n_all, message=fit_error_message(n_all, {}, st.message()),
                        unschedulable_plugins={POD_SPEC}, duration=time.perf_counter() - start)
    if n_all == 0:
        st = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_NODES,))
        return Decision(pod.key, None, st, 0, message=NO_NODES, duration=time.perf_counter() - start)
    cycle = _Cycle(chain, pod, nodes, state, nominator, placement)
    cycle.run_post_filter = post_filter
    added = add_nominated(nominator, pod, nodes)
    try:
        return _schedule(cycle, added, start)
    except Abort as a:  # an Error (a rejection at PreFilter is _schedule's, like one at Filter)
        st = a.status
        return Decision(pod.key, None, st, n_all, message=st.message(), duration=time.perf_counter() - start)
    except Exception as e:  # a framework bug must not escape the cycle
        st = cycle_failed("scheduling", e)
        return Decision(pod.key, None, st, n_all, message=st.message(), duration=time.perf_counter() - start)
    finally:
        nodes.remove_pods(added)


def _schedule(cycle: _Cycle, added: list[str], start: float) -> Decision:
    pod, nodes, chain, state = cycle.pod, cycle.nodes, cycle.chain, cycle.state
    n_all = cycle.n_all
    post_filters = chain.post_filter if cycle.run_post_filter else []
    try:
        candidates, narrowing = timed(cycle.rec, PRE_FILTER, cycle.pre_filter)
    except Abort as a:
        if a.status.code == Code.ERROR:
            raise
        return _pre_filter_rejected(cycle, a, added, start)

    if pod.nominated_node_name:
        row = timed(cycle.rec, FILTER, cycle.evaluate_nominated_node, candidates)
        if row is not None:
            nodes.remove_pods(added)  # nominated pods count for filtering only
            added.clear()
            top = [NodeScore(nodes.names[row], 0)]
            describe_top(chain, state, pod, nodes, top, np.array([row], dtype=np.int64))
            return Decision(pod.key, nodes.names[row], Status.success(), n_all, evaluated=1, feasible=1,
                            top=top, duration=time.perf_counter() - start)

    scan = timed(cycle.rec, FILTER, cycle.find_feasible_nodes, candidates, narrowing)
    feasible = scan.feasible
    if len(feasible) or not post_filters:
        nodes.remove_pods(added)
        added.clear()
    # else the nominated pods stay counted through PostFilter, whose dry run counts the same ones
    # (upstream SelectVictimsOnNode filters with them); schedule_one takes them out afterwards

    if len(feasible) == 0:
        code = Code.UNSCHEDULABLE if int(Code.UNSCHEDULABLE) in scan.codes else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        nominated = None
        post_msg = ""
        if post_filters:
            post_msg, nominated = cycle.post_filter(cycle.node_to_status(scan))
        msg = fit_error_message(n_all, scan.hist, None, post_msg)
        return Decision(pod.key, None, Status(code, (msg,)), n_all, evaluated=scan.processed, feasible=0,
                        failures=scan.hist, message=msg, unschedulable_plugins=scan.rejectors,
                        pending_plugins=scan.pending, nominated_node=nominated, duration=time.perf_counter() - start)

    if len(feasible) == 1:  # one fit: no scoring
        state.write(SCORES_KEY, (feasible, None, None, []))
        name = nodes.names[int(feasible[0])]
        top = [NodeScore(name, 0)]
        describe_top(chain, state, pod, nodes, top, feasible)
        return Decision(pod.key, name, Status.success(), n_all, evaluated=scan.processed, feasible=1,
                        top=top, failures=scan.hist, duration=time.perf_counter() - start)

    total, mat, scored = cycle.prioritize(feasible)
    state.write(SCORES_KEY, (feasible, total, mat, scored))
    row, top, top_rows = cycle.select_host(feasible, total, mat, scored)
    describe_top(chain, state, pod, nodes, top, top_rows)
    return Decision(pod.key, nodes.names[row], Status.success(), n_all, evaluated=scan.processed,
                    feasible=len(feasible), top=top, failures=scan.hist, duration=time.perf_counter() - start)


def _pre_filter_rejected(cycle: _Cycle, rejection: Abort, added: list[str], start: float) -> Decision:
    """upstream findNodesThatFitPod after a PreFilter rejection: a FitError whose NodeToStatus has
    no evaluated node and the rejection as the absent-node status (every node carries it), so
    PostFilter runs as after Filter. DefaultPreemption then finds no node where preemption may
    help for an UnschedulableAndUnresolvable rejection (``preemption: 0/N nodes are available:
    N Preemption is not helpful for scheduling.``, clearing an old nomination), and tries every
    node for an Unschedulable one. The PreFilter message replaces the per-node histogram
    (FitError.Error); no node is scanned and the round-robin start stays."""
    pod, nodes, chain = cycle.pod, cycle.nodes, cycle.chain
    n_all = cycle.n_all
    st = rejection.status
    nominated = None
    post_msg = ""
    if chain.post_filter and cycle.run_post_filter:
        # the nominated pods stay counted through PostFilter, as after Filter; schedule_one takes
        # them out afterwards
        post_msg, nominated = cycle.post_filter(NodeToStatus({}, st))
    else:
        nodes.remove_pods(added)
        added.clear()
    msg = fit_error_message(n_all, {}, st.message(), post_msg)
    # upstream's UnschedulablePlugins: the rejecting plugin (Diagnosis.AddPluginStatus), with the
    # plugins that returned node sets when the rejection was Unschedulable or their empty intersection
    return Decision(pod.key, None, Status(st.code, (msg,), st.plugin), n_all, evaluated=0,
                    failures={r: n_all for r in st.reasons}, message=msg,
                    unschedulable_plugins=set(rejection.rejectors or ()), nominated_node=nominated,
                    duration=time.perf_counter() - start)
