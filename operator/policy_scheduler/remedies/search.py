"""``suggest``: after a failed scheduling attempt, the changes that would place the pod, each
verified by the pod's own scheduling cycle, ranked (README.md in this folder: the kinds, the
algorithm, the ranking, the bounds).

1. The diagnosis: every Filter plugin's verdict on every node (probe.py ``Probe.verdicts``).
2. Candidates per kind, from the nodes only one plugin rejects (pod_changes.py,
   cluster_changes.py), each capped.
3. Each candidate, the kinds taken in turn (the first of each kind, then the second, ...) so that
   a short budget still tries every kind: the pod changed by its patch (or the cluster changed in
   an overlay) goes through PreFilter and every Filter on every node (the nodes it opens), then
   through the policy's scheduling cycle (``schedule_one`` without PostFilter, on the same table):
   only a candidate the cycle places becomes a Suggestion, with the node the cycle chose.
4. Ranked: most nodes opened first, then the smallest change, then the kind's order.

Read-only and bounded: nothing is reserved, assumed, nominated, queued or written; the time
budget is checked before each simulation (one simulation, at most one cycle and one filter pass,
or one preemption dry run, may overrun it) and a search stopped by it says so (``partial``).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import numpy as np

from ..cache.policies import PolicyState
from ..cache.state import ClusterState
from ..framework.cycle.chain import Chain
from ..framework.cycle.podgroup_result import group_plugin
from ..framework.cycle.schedule import Decision
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo, parse_pod
from ..framework.queue.nominator import Nominator
from .cluster_changes import ClusterCandidate, evict_lower_priority, uncordon
from .patch import PatchError, apply_pod_patch
from .pod_affinity import drop_pod_affinity
from .pod_changes import POD_KINDS, Candidate, Caps, too_large
from .combined import two_kinds
from .dra_changes import create_device_classes, drop_resource_claims
from .policy_change import use_policy
from .probe import Probe, Verdicts
from .result import CLUSTER, POD, Remedies, Suggestion

DEFAULT_BUDGET = 0.020  # seconds per pod


def suggest(pod: PodInfo, state: ClusterState, policy: PolicyState | Chain, decision: Decision | None = None, *,
            nominator: Nominator | None = None, budget: float = DEFAULT_BUDGET, caps: Caps | None = None,
            alternatives: Mapping[str, Chain] | None = None, clock: Callable[[], float] = time.perf_counter) -> Remedies:
    """The verified suggestions for ``pod`` (pending, its attempt under ``policy`` failed) on
    ``state``, best first. ``decision``: that attempt's (a placed pod gets none);
    ``nominator``: the scheduler's, so the nominated pods count as in the cycle; ``budget``:
    seconds; ``alternatives``: the other policies the pod may use (name -> chain: ready, admitting
    its namespace), each tried as a ``UsePolicy`` suggestion. Never raises for what the pod or the
    cluster holds."""
    t0 = clock()
    out = Remedies(pod.key)
    try:
        _search(out, pod, state, policy, decision, nominator, t0 + max(budget, 0.0), caps or Caps(), clock,
                alternatives or {})
    except Exception as e:  # a remedy is advice: a failure in the search never reaches the caller
        out.suggestions = []
        out.reason = f"the search failed: {type(e).__name__}: {e}"
    out.seconds = clock() - t0
    return out


def _search(out: Remedies, pod: PodInfo, state: ClusterState, policy: PolicyState | Chain, decision: Decision | None,
            nominator: Nominator | None, deadline: float, caps: Caps, clock: Callable[[], float],
            alternatives: Mapping[str, Chain]) -> None:
    chain = policy if isinstance(policy, Chain) else policy.chain
    raw = pod.raw
    why = ("it was placed" if decision is not None and decision.scheduled else
           "its policy has no chain" if chain is None else
           f"its spec cannot be read: {pod.parse_error}" if pod.parse_error else
           "no pod object to change" if not isinstance(raw, Mapping) else "")
    if chain is None or why:
        out.reason = why
        return
    big = too_large(pod, raw, caps)  # type: ignore[arg-type]
    if big:
        out.reason = big
        return
    group = group_plugin(chain)
    if group is not None and group.group_key(pod) is not None:
        out.reason = "decided with its pod group: no single-pod suggestion"
        return
    table = state.table
    probe = Probe(chain, table, nominator)
    try:
        v = probe.verdicts(pod)
        if v.error:
            out.reason = f"a Filter plugin failed: {v.error}"
            return
        out.blockers = blockers(v, table.n)
        if probe.feasible(pod).size:
            out.reason = "it fits a node now"
            return
        queues: list[list[Any]] = []
        for gen in (*POD_KINDS, drop_pod_affinity):
            try:
                got = gen(pod, raw, table, v, caps)  # type: ignore[arg-type]
            except (TypeError, ValueError, AttributeError, KeyError, IndexError):  # a spec too odd to change
                continue
            if got:
                queues.append(list(got))
        found = uncordon(pod, table, v, caps)
        if found:
            queues.append(list(found))
        for dra in (create_device_classes(pod, table, chain, v, caps),
                    drop_resource_claims(pod, raw, chain, v, caps)):  # type: ignore[arg-type]
            if dra:
                queues.append(list(dra))
        others = use_policy(pod, raw, v, "" if isinstance(policy, Chain) else policy.name,  # type: ignore[arg-type]
                            alternatives, caps)
        if others:
            queues.append(list(others))
        pdbs = list(state.pdbs.values())
        # computed when their turn comes, after the single kinds' first candidates
        queues.append([lambda: two_kinds(pod, raw, table, v, caps)])  # type: ignore[arg-type]
        queues.append([lambda: evict_lower_priority(pod, table, v, chain, nominator, pdbs, caps)])
        _run(out, queues, pod, raw, table, probe, deadline, caps, clock)  # type: ignore[arg-type]
    finally:
        out.runs = probe.runs
    out.suggestions.sort(key=Suggestion.rank_key)
    if not out.suggestions and not out.reason:
        out.reason = "no change of the supported kinds places it"


def blockers(v: Verdicts, n: int) -> dict[str, int]:
    """Nodes per set of rejecting plugins ("A+B", sorted), most first; PreFilter's rejection (or
    its narrowing) as its plugin's name."""
    if v.prefilter is not None:
        return {f"{v.prefilter.plugin or 'PreFilter'} (PreFilter)": n}
    names = sorted(v.rejected)
    if not names:
        return {}
    bits = np.zeros(n, dtype=np.int64)
    for i, p in enumerate(names[:62]):
        bits |= v.rejected[p].astype(np.int64) << i
    if v.outside is not None:
        bits[v.outside] = -1
    values, counts = np.unique(bits, return_counts=True)
    out = {}
    for b, c in sorted(zip(values.tolist(), counts.tolist()), key=lambda x: -x[1]):
        key = ("+".join(v.narrowing) + " (PreFilter)" if b == -1 else
               "+".join(p for i, p in enumerate(names[:62]) if b >> i & 1))
        if key:
            out[key] = c
    return out


def _run(out: Remedies, queues: list[list[Any]], pod: PodInfo, raw: Mapping[str, Any], table: NodeTable,
         probe: Probe, deadline: float, caps: Caps, clock: Callable[[], float]) -> None:
    seen: set[str] = set()
    while any(queues):
        for q in queues:
            if not q:
                continue
            if clock() > deadline:
                left = sum(len(x) for x in queues)
                out.partial = True
                out.reason = f"time budget spent: {left} candidate{'s' if left != 1 else ''} not tried"
                return
            c = q.pop(0)
            if callable(c):  # a kind computed only when its turn comes (preemption's dry run)
                q[:0] = c()
                continue
            out.candidates += 1
            s = _try(c, pod, raw, table, probe, deadline, caps, clock)
            if s is None or s.change in seen:
                out.rejected += s is None
                continue
            seen.add(s.change)
            out.suggestions.append(s)


def _changed(pod: PodInfo, raw: Mapping[str, Any], ops: list[dict[str, Any]]) -> PodInfo | None:
    try:
        p = parse_pod(apply_pod_patch(raw, ops))
    except PatchError:
        return None
    if p.parse_error:
        return None
    p.nominated_node_name = pod.nominated_node_name  # the scheduler's view (a nomination made since)
    return p


def _verified(kind: str, target: str, change: str, ops: list[dict[str, Any]], size: float, p: PodInfo,
              probe: Probe, table: NodeTable | None = None, rows: Any = None) -> Suggestion | None:
    rows = probe.feasible(p, table) if rows is None else rows
    if not len(rows):
        return None
    d = probe.place(p, table)
    if not d.scheduled or d.node is None:
        return None
    score = d.top[0].total if d.top and d.feasible > 1 else None
    return Suggestion(kind, target, change, ops, size, int(len(rows)), d.node, score)


def _try(c: Candidate | ClusterCandidate, pod: PodInfo, raw: Mapping[str, Any], table: NodeTable, probe: Probe,
         deadline: float, caps: Caps, clock: Callable[[], float]) -> Suggestion | None:
    if isinstance(c, ClusterCandidate):
        if c.chain is not None:  # the change is read by the plugins (a DeviceClass): their own copies
            alt = Probe(c.chain(), probe.table, probe.nominator)
            try:
                return _verified(c.kind, CLUSTER, c.change, c.ops, c.size, pod, alt, c.build())
            finally:
                probe.runs += alt.runs
        return _verified(c.kind, CLUSTER, c.change, c.ops, c.size, pod, probe, c.build())
    if c.search is None:
        p = _changed(pod, raw, c.ops)
        other = c.extra.get("chain")
        if other is not None:  # another policy: its own chain decides
            alt = Probe(other, probe.table, probe.nominator)
            try:
                return None if p is None else _verified(c.kind, POD, c.change, c.ops, c.size, p, alt)
            finally:
                probe.runs += alt.runs
        return None if p is None else _verified(c.kind, POD, c.change, c.ops, c.size, p, probe)
    return _search_value(c, pod, raw, probe, deadline, caps, clock)


def _search_value(c: Candidate, pod: PodInfo, raw: Mapping[str, Any], probe: Probe, deadline: float, caps: Caps,
                  clock: Callable[[], float]) -> Suggestion | None:
    """The smallest value in ``c.bounds`` whose change opens a node (opening is monotone in it:
    a larger maxSkew never closes a node): doubling steps, then bisection, at most
    ``caps.skew_steps`` filter passes."""
    assert c.search is not None
    lo, hi = c.bounds
    steps = 0
    found: tuple[int, Any, PodInfo] | None = None

    def opens(value: int) -> tuple[Any, PodInfo] | None:
        nonlocal steps
        steps += 1
        assert c.search is not None
        p = _changed(pod, raw, c.search(value)[1])
        if p is None:
            return None
        rows = probe.feasible(p)
        return (rows, p) if len(rows) else None

    bad, step, value = lo - 1, 1, lo
    while steps < caps.skew_steps and clock() <= deadline:
        got = opens(value)
        if got is not None:
            found = (value, *got)
            break
        bad = value
        if value >= hi:
            return None
        value = min(hi, value + step)
        step *= 2
    if found is None:
        return None
    good = found[0]
    while good - bad > 1 and steps < caps.skew_steps and clock() <= deadline:
        mid = (good + bad) // 2
        got = opens(mid)
        if got is not None:
            found, good = (mid, *got), mid
        else:
            bad = mid
    value, rows, p = found
    change, ops, size = c.search(value)
    return _verified(c.kind, POD, change, ops, size, p, probe, rows=rows)
