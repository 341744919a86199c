"""schedule_one: one scheduling cycle for one pod on the snapshot, as upstream's
schedulePod / findNodesThatFitPod / prioritizeNodes / selectHost.

Never raises for bad input: a pod that cannot be parsed, a plugin that fails, or a cluster with
no nodes all come back as a Decision whose status says why.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import numpy as np

from .chain import Chain
from .interface import MAX_NODE_SCORE, MIN_NODE_SCORE, CycleState
from .nodetable import NodeTable
from .podinfo import PodInfo
from .status import Code, Status

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
TOP_NODES = 5  # how many nodes a Decision keeps per-plugin scores for
DESCRIBED_NODES = 3  # how many of them get plugin details (see describe_top)
NO_NODES = "no nodes available to schedule pods"


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


@dataclass
class NodeScore:
    node: str
    total: int
    plugins: dict[str, tuple[int, int]] = field(default_factory=dict)  # plugin -> (normalized, weighted)
    details: dict[str, dict] = field(default_factory=dict)  # plugin -> what its describe() says of the node


@dataclass
class Decision:
    """What one cycle decided and why (bounded in size: top nodes only)."""

    pod: str
    node: str | None
    status: Status
    num_all_nodes: int = 0
    evaluated: int = 0
    feasible: int = 0
    top: list[NodeScore] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)  # reason -> node count
    message: str = ""
    unschedulable_plugins: set[str] = field(default_factory=set)
    duration: float = 0.0

    @property
    def scheduled(self) -> bool:
        return self.node is not None


def fit_error_message(num_all_nodes: int, failures: dict[str, int], prefilter_msg: str | None = None,
                      postfilter_msg: str = "") -> str:
    """upstream FitError.Error(): "0/N nodes are available: <histogram>." (+ PostFilter text)."""
    if prefilter_msg is not None:
        reasons = f" {prefilter_msg}."
    else:
        hist = sorted(f"{count} {reason}" for reason, count in failures.items())
        reasons = " " + ", ".join(hist) + "."
    msg = f"0/{num_all_nodes} nodes are available:{reasons}"
    if postfilter_msg:
        msg += " " + postfilter_msg
    return msg


class _Failures:
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


def describe_top(chain: Chain, state: CycleState, pod: PodInfo, nodes: NodeTable, top: list[NodeScore],
                 rows: np.ndarray) -> None:
    """Optional plugin method ``describe(state, pod, nodes, rows) -> list[dict | None] | None``:
    what the plugin saw of each of the best nodes (e.g. metric values and their freshness),
    kept in ``NodeScore.details`` for explain. Called once per cycle for the first
    DESCRIBED_NODES nodes (``rows``: theirs, in ``top``'s order); a plugin returns None (or None
    per node) when it has nothing to say."""
    for p in chain.plugins:
        if getattr(p, "describe", None) is None:
            continue
        out = p.describe(state, pod, nodes, rows[:DESCRIBED_NODES])
        for s, d in zip(top, out or ()):
            if d:
                s.details[p.NAME] = d


def _error(pod: PodInfo, nodes: NodeTable, status: Status, start: float) -> Decision:
    return Decision(pod.key, None, status, nodes.n, message=status.message(),
                    unschedulable_plugins=set(), duration=time.perf_counter() - start)


def _prefilter_rejection(pod: PodInfo, st: Status, plugins: set[str], n_all: int, start: float) -> Decision:
    """A PreFilter rejection rejects every node; its message replaces the per-node histogram."""
    return Decision(pod.key, None, st, n_all, evaluated=0, failures={r: n_all for r in st.reasons},
                    message=fit_error_message(n_all, {}, st.message()), unschedulable_plugins=plugins,
                    duration=time.perf_counter() - start)


def schedule_one(chain: Chain, pod: PodInfo, nodes: NodeTable, rng: random.Random | None = None,
                 state: CycleState | None = None) -> Decision:
    start = time.perf_counter()
    rng = rng or random
    state = state or CycleState()
    n_all = nodes.n
    if pod.parse_error:
        st = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (f"invalid pod spec: {pod.parse_error}",))
        return Decision(pod.key, None, st, n_all, message=fit_error_message(n_all, {}, st.message()),
                        duration=time.perf_counter() - start)
    if n_all == 0:
        st = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_NODES,))
        return Decision(pod.key, None, st, 0, message=NO_NODES, duration=time.perf_counter() - start)
    try:
        return _schedule(chain, pod, nodes, rng, state, start)
    except Exception as e:  # a plugin bug must not escape the cycle
        return _error(pod, nodes, Status.error(f"scheduling cycle failed: {type(e).__name__}: {e}"), start)


def _schedule(chain: Chain, pod: PodInfo, nodes: NodeTable, rng, state: CycleState, start: float) -> Decision:
    n_all = nodes.n
    # ---------------------------------------------------------------- PreFilter
    allowed: set[str] | None = None
    narrowing: list[str] = []
    rejected: Status | None = None  # an Unschedulable PreFilter status; later PreFilters still run
    for p in chain.pre_filter:
        st, result = p.pre_filter(state, pod, nodes)
        if st.is_skip:
            state.skip_filter.add(p.NAME)
            continue
        if st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return _prefilter_rejection(pod, st.with_plugin(p.NAME), {p.NAME}, n_all, start)
        if st.code == Code.UNSCHEDULABLE:
            rejected = st.with_plugin(p.NAME)
            continue
        if not st.is_success:
            return _error(pod, nodes, st.with_plugin(p.NAME), start)
        if result is not None:
            narrowing.append(p.NAME)
            allowed = set(result) if allowed is None else allowed & set(result)
            if not allowed:
                names = sorted(narrowing)
                msg = (f"node(s) didn't satisfy plugin {names[0]}" if len(names) == 1 else
                       f"node(s) didn't satisfy plugin(s) [{' '.join(names)}] simultaneously")
                st = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,), p.NAME)
                return _prefilter_rejection(pod, st, set(narrowing), n_all, start)
    if rejected is not None:
        return _prefilter_rejection(pod, rejected, set(narrowing) | {rejected.plugin}, n_all, start)

    if allowed is None:
        candidates = np.arange(n_all, dtype=np.int64)
    else:
        candidates = np.array(sorted(nodes.index[nm] for nm in allowed if nm in nodes.index), dtype=np.int64)
    absent = n_all - len(candidates)
    absent_reason = f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(narrowing))}]" if absent else ""

    # ---------------------------------------------------------------- Filter (sampled scan)
    filters = [p for p in chain.filter if p.NAME not in state.skip_filter]
    m = len(candidates)
    need = num_feasible_nodes_to_find(chain.percentage_of_nodes_to_score, m)  # upstream: len(nodes) scanned
    if not chain.score:
        need = 1
    startidx = chain.next_start_node_index % m if m else 0
    order = np.concatenate((candidates[startidx:], candidates[:startidx]))  # scan from startidx, wrapping
    failures = _Failures()
    feasible_parts: list[np.ndarray] = []
    found = 0
    cutoff: int | None = None
    pos = 0
    chunk = max(need + need // 4, 64)
    while pos < m and found < need:
        rows = order[pos:pos + chunk]
        rpos = np.arange(pos, pos + len(rows), dtype=np.int64)
        for p in filters:
            if len(rows) == 0:
                break
            res = p.filter(state, pod, nodes, rows)
            if res.error is not None:
                return _error(pod, nodes, res.error.with_plugin(p.NAME), start)
            ok = np.asarray(res.passed, dtype=bool)
            if not ok.all():
                bad = ~ok
                codes = (np.asarray(res.code)[bad] if isinstance(res.code, np.ndarray)
                         else np.full(int(bad.sum()), int(res.code), dtype=np.int8))
                reasons = [(r, rpos[np.asarray(mk, dtype=bool) & bad]) for r, mk in res.reasons]
                failures.add(p.NAME, rpos[bad], codes, [(r, x) for r, x in reasons if len(x)])
                rows, rpos = rows[ok], rpos[ok]
        if found + len(rows) >= need:
            take = need - found
            cutoff = int(rpos[take - 1])
            rows = rows[:take]
        feasible_parts.append(rows)
        found += len(rows)
        pos += chunk
        chunk *= 2
    feasible = np.concatenate(feasible_parts) if feasible_parts else np.zeros(0, dtype=np.int64)
    n_failed, hist, codes, rejecting = failures.summarize(cutoff)
    processed = len(feasible) + n_failed
    chain.next_start_node_index = (chain.next_start_node_index + processed) % n_all
    rejecting.update(narrowing)  # upstream's UnschedulablePlugins starts as the narrowing plugins
    if absent:
        hist[absent_reason] = hist.get(absent_reason, 0) + absent
        codes.add(int(Code.UNSCHEDULABLE_AND_UNRESOLVABLE))

    # ---------------------------------------------------------------- no fit: PostFilter
    if len(feasible) == 0:
        code = Code.UNSCHEDULABLE if int(Code.UNSCHEDULABLE) in codes else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        post_msg = ""
        for p in chain.post_filter:
            statuses = {}  # per-node statuses are not materialized; PostFilter plugins use the histogram
            pst, _nominated = p.post_filter(state, pod, nodes, statuses)
            if pst.reasons:
                post_msg = pst.message()
            if pst.is_success:
                break
        msg = fit_error_message(n_all, hist, None, post_msg)
        return Decision(pod.key, None, Status(code, (msg,)), n_all, evaluated=processed, feasible=0,
                        failures=hist, message=msg, unschedulable_plugins=rejecting,
                        duration=time.perf_counter() - start)

    # ---------------------------------------------------------------- one fit: no scoring
    if len(feasible) == 1:
        name = nodes.names[int(feasible[0])]
        top = [NodeScore(name, 0)]
        describe_top(chain, state, pod, nodes, top, feasible)
        return Decision(pod.key, name, Status.success(), n_all, evaluated=processed, feasible=1,
                        top=top, failures=hist, duration=time.perf_counter() - start)

    # ---------------------------------------------------------------- PreScore / Score
    for p in chain.pre_score:
        st = p.pre_score(state, pod, nodes, feasible)
        if st.is_skip:
            state.skip_score.add(p.NAME)
        elif not st.is_success:
            return _error(pod, nodes, st.with_plugin(p.NAME), start)
    # as upstream, every Score plugin runs before the normalized scores are range-checked
    scored: list[tuple[str, int]] = []
    norms: list[np.ndarray] = []
    for p, weight in chain.score:
        if p.NAME in state.skip_score:
            continue
        raw = np.asarray(p.score(state, pod, nodes, feasible), dtype=np.int64)
        norms.append(np.asarray(p.normalize_score(state, pod, nodes, feasible, raw), dtype=np.int64))
        scored.append((p.NAME, weight))
    if scored:
        mat = np.vstack(norms)  # plugins x feasible
        if mat.min() < MIN_NODE_SCORE or mat.max() > MAX_NODE_SCORE:  # the first plugin out of range fails
            out_of_range = (mat < MIN_NODE_SCORE) | (mat > MAX_NODE_SCORE)
            i = int(np.flatnonzero(out_of_range.any(axis=1))[0])
            bad, name = int(mat[i][out_of_range[i]][0]), scored[i][0]
            return _error(pod, nodes, Status.error(
                f"plugin \"{name}\" returns an invalid score {bad}, it should in the range of "
                f"[{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing", name), start)
        weights = np.array([w for _, w in scored], dtype=np.int64)
        total = weights @ mat
    else:
        mat = np.zeros((0, len(feasible)), dtype=np.int64)
        total = np.ones(len(feasible), dtype=np.int64)

    # ---------------------------------------------------------------- select (random among the best)
    best = np.flatnonzero(total == total.max())
    pick = int(best[rng.randrange(len(best))]) if len(best) > 1 else int(best[0])
    k = min(TOP_NODES, len(total))
    top_idx = np.argsort(-total, kind="stable")[:k]
    if pick not in top_idx:
        top_idx = np.concatenate([[pick], top_idx[: k - 1]])
    else:
        top_idx = np.concatenate([[pick], top_idx[top_idx != pick]])
    top_rows = feasible[top_idx]
    top_norms = mat[:, top_idx].T.tolist()  # top nodes x plugins
    names = nodes.names
    top = [NodeScore(names[r], t, {name: (v, v * w) for (name, w), v in zip(scored, vs)})
           for r, t, vs in zip(top_rows.tolist(), total[top_idx].tolist(), top_norms)]
    describe_top(chain, state, pod, nodes, top, top_rows)
    return Decision(pod.key, nodes.names[int(feasible[pick])], Status.success(), n_all, evaluated=processed,
                    feasible=len(feasible), top=top, failures=hist, duration=time.perf_counter() - start)
