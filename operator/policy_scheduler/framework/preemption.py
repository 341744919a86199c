"""The decision part of upstream's DefaultPreemption (framework/preemption/preemption.go and
plugins/defaultpreemption/default_preemption.go, v1.37): is the pod eligible, which nodes could
take it if lower-priority pods left, which pods on each (the fewest, PDBs respected where
possible), and which node to nominate. Acting on the choice (deleting the victims, clearing
lower-priority nominations) is the operator's part.

The dry run works on the live NodeTable (the cycle is synchronous): for one candidate node it
takes the node's lower-priority pods out of the table, runs the chain's PreFilter and Filter for
that one row (``schedule.NodeFilter``), adds them back one by one in importance order (reprieve)
and re-runs, and always restores the table exactly (try/finally), pod order on the row
included. Upstream works on a copy of the NodeInfo and updates the PreFilter state with the
RemovePod/AddPod extensions; re-running PreFilter on the changed table gives that state.
"""

from __future__ import annotations

import numpy as np

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .model.labels import NOTHING, LabelSelector, SelectorError
from .model.nodetable import PODS, NodeTable
from .model.podinfo import PodInfo
from .status import Code, Status

PREEMPT_NEVER = "Never"
MSG_NEVER = "not eligible due to preemptionPolicy=Never."
MSG_TERMINATING = "not eligible due to a terminating pod on the nominated node."
MSG_NO_VICTIMS = "No preemption victims found for incoming pod"
MSG_NOT_HELPFUL = "Preemption is not helpful for scheduling"
_MAX_INT32 = 2**31 - 1
_NOT_STARTED = "\U0010ffff"  # sorts after every RFC 3339 time: a pod not started counts as started now

NodeFilterFn = Callable[[PodInfo, NodeTable, int], Status]


@dataclass(frozen=True, slots=True)
class PDB:
    """What preemption reads of a policy/v1 PodDisruptionBudget."""

    namespace: str
    selector: LabelSelector  # NOTHING for a nil or invalid selector (matches no pod)
    disruptions_allowed: int
    disrupted_pods: frozenset[str] = frozenset()  # status.disruptedPods names
    name: str = ""

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> "PDB":
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        try:
            sel = LabelSelector.parse(spec.get("selector"), "spec.selector")
        except SelectorError:
            sel = NOTHING  # upstream: an invalid selector matches no pod
        return cls(str(meta.get("namespace") or "default"), sel, int(status.get("disruptionsAllowed") or 0),
                   frozenset(status.get("disruptedPods") or ()), str(meta.get("name") or ""))


@dataclass(slots=True)
class Candidate:
    """A node the pod would fit on once ``victims`` (most important first) are gone."""

    node: str
    victims: list[PodInfo]
    num_pdb_violations: int = 0


@dataclass(slots=True)
class PreemptionResult:
    """What one PostFilter decided.

    ``status``: Success (a node was chosen), Unschedulable with upstream's message (without the
    ``preemption: `` prefix the plugin adds), or Error. ``nominated_node``: the chosen node;
    ``""`` when no candidate exists (upstream then clears an old nomination); None to leave the
    pod's nomination as it is (not eligible, or an error). ``victims``: the pods to preempt on
    that node, most important first. ``clear_nominations``: pods of lower priority nominated to
    that node, whose nomination upstream clears."""

    status: Status
    nominated_node: str | None = None
    victims: list[PodInfo] = field(default_factory=list)
    num_pdb_violations: int = 0
    clear_nominations: list[PodInfo] = field(default_factory=list)
    candidates: int = 0  # candidates found by the dry run
    dry_runs: int = 0  # nodes dry-run

    @property
    def victim_keys(self) -> list[str]:
        return [p.key for p in self.victims]


def importance(p: PodInfo) -> tuple[int, str]:
    """Sort key, most important first: upstream util.MoreImportantPod (higher priority; then the
    earlier status.startTime; a pod not started counts as started now)."""
    return -p.priority, p.start_time or _NOT_STARTED


def eligible(pod: PodInfo, nodes: NodeTable, nominated_status: Status) -> tuple[bool, str]:
    """upstream PodEligibleToPreemptOthers."""
    if pod.preemption_policy == PREEMPT_NEVER:
        return False, MSG_NEVER
    nom = pod.nominated_node_name
    if nom:
        if nominated_status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return True, ""
        row = nodes.index.get(nom)
        if row is not None:
            for p in nodes.pods[row].values():
                if p.priority < pod.priority and p.terminating_by_preemption:
                    return False, MSG_TERMINATING
    return True, ""


def num_candidates(num_nodes: int, percentage: int, absolute: int) -> int:
    """upstream calculateNumCandidates (integer arithmetic)."""
    n = num_nodes * percentage // 100
    if n < absolute:
        n = absolute
    return min(n, num_nodes)


def charge_pdbs(p: PodInfo, pdbs: Sequence[PDB], allowed: list[int], first_only: bool = False) -> bool:
    """Charge the pod's disruption to every PDB selecting it (not listing it in disruptedPods),
    in ``allowed`` (one count per PDB); True when one has none left. ``first_only``: stop at the
    first such PDB (upstream 1.37's FilterVictimsWithPDBViolation)."""
    violated = False
    if not p.labels:  # a pod without labels matches no PDB
        return False
    for i, b in enumerate(pdbs):
        if b.namespace != p.namespace:
            continue
        sel = b.selector
        if sel.nothing or sel.empty or not sel.matches(p.labels):
            continue  # a nil or empty selector matches nothing
        if p.name in b.disrupted_pods:
            continue  # already processed by the API server
        allowed[i] -= 1
        if allowed[i] < 0:
            violated = True
            if first_only:
                break
    return violated


def filter_pods_with_pdb_violation(pods: Sequence[PodInfo], pdbs: Sequence[PDB]) -> tuple[list[PodInfo], list[PodInfo]]:
    """upstream filterPodsWithPDBViolation: (violating, non-violating), order kept."""
    if not pdbs:
        return [], list(pods)
    allowed = [b.disruptions_allowed for b in pdbs]
    violating: list[PodInfo] = []
    ok: list[PodInfo] = []
    for p in pods:
        (violating if charge_pdbs(p, pdbs, allowed) else ok).append(p)
    return violating, ok


# Filter plugins whose verdict on a node does not depend on the pods on it (node fields, labels,
# taints, metrics): removing or reprieving victims cannot change it.
_POD_INDEPENDENT_FILTERS = frozenset({"NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity",
                                      "NodeLabelMatch"})


class ResourceFit:
    """The reprieve check when only NodeResourcesFit depends on the victims (``resource_only``):
    does the pod fit a row whose requested vector is ``used``, as NodeResourcesFit's Filter
    decides in a dry run (real allocatable, the same resources checked). The arithmetic runs on
    plain lists of the compared columns only (``cols``: the pods column, then each checked
    resource), read out of the table once per preemption for every candidate row at once."""

    def __init__(self, checks: list[tuple[int | None, int, str]], independent_first: bool = False) -> None:
        self.checks = [(col, want) for col, want, _ in checks]
        # every pod-independent filter runs before NodeResourcesFit in the chain: a node that
        # NodeResourcesFit rejected in the cycle passed them all, so with its victims gone it
        # passes the chain exactly when the arithmetic says it fits (no dry run on the table)
        self.independent_first = independent_first
        # a resource no node has (column None) fits nowhere
        self.possible = all(col is not None for col, _ in self.checks)
        self.cols: list[int] = [PODS] + [col for col, _ in self.checks if col is not None]
        self.wants: list[int] = [1] + [want for col, want in self.checks if col is not None]

    def fits_list(self, alloc: list[int], used: list[int]) -> bool:
        """On the compared columns (``cols``) only."""
        if not self.possible:
            return False
        for a, u, w in zip(alloc, used, self.wants):
            if w > a - u:
                return False
        return True

    def vector(self, p: PodInfo, nodes: NodeTable) -> list[int]:
        """``p``'s true requests in the compared columns (NodeTable.request_vector's values)."""
        req = p.requests
        names = nodes.resources
        return [1 if c == PODS else req.get(names[c], 0) for c in self.cols]

    def rows(self, nodes: NodeTable, rows: Sequence[int]) -> dict[int, tuple[list[int], list[int]]]:
        """row -> (allocatable, requested) in the compared columns, for ``rows`` at once."""
        if not rows:
            return {}
        idx = np.ix_(np.asarray(rows, dtype=np.intp), np.asarray(self.cols, dtype=np.intp))
        return dict(zip(rows, zip(nodes.allocatable[idx].tolist(), nodes.requested[idx].tolist())))


_VOLUME_FILTERS = frozenset(("VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"))


def resource_only(pod: PodInfo, nodes: NodeTable, node_filter: Any) -> ResourceFit | None:
    """A ResourceFit when, for this pod, only NodeResourcesFit's verdict can change with the pods
    on a node: every other filter of the chain ignores them (or has nothing to check for this
    pod: no host ports, no pod (anti-)affinity of its own or any existing pod's required
    anti-affinity, no spread constraint, explicit or by default, no volumes). Else None (the full chain is
    re-run for every reprieve)."""
    chain = getattr(node_filter, "chain", None)
    if chain is None:
        return None
    fit = None
    independent_first = True
    for p in chain.filter:
        name = p.NAME
        if name in _POD_INDEPENDENT_FILTERS:
            if fit is not None:
                independent_first = False
            continue
        if name == "NodeResourcesFit":
            fit = p
        elif name == "NodePorts":
            if pod.host_ports:
                return None
        elif name == "InterPodAffinity":
            if pod.has_affinity or nodes.required_anti_affinity_terms:
                return None
        elif name == "PodTopologySpread":
            if pod.spread_constraints or p.handle.default_spread_selector(pod) is not None:
                return None
        elif name in _VOLUME_FILTERS:
            if pod.volumes:  # VolumeRestrictions and NodeVolumeLimits count the node's pods
                return None
            continue  # every one of them skips a pod without volumes
        elif name == "DynamicResources":
            if pod.resource_claims:
                return None
            continue  # skips a pod without claims
        elif name == "NodeDeclaredFeatures":  # reads the node only; skips a pod requiring no feature
            if fit is not None and getattr(p, "requires_features", lambda _: True)(pod):
                independent_first = False
            continue
        else:
            return None
    if fit is None:
        return None
    return ResourceFit(fit._checks(pod, nodes), independent_first)


def _reprieve(fast: ResourceFit, alloc: list[int], used: list[int], violating: list[PodInfo],
              non_violating: list[PodInfo], vector: Callable[[PodInfo], list[int]]) -> tuple[list[PodInfo], int]:
    """SelectVictimsOnNode's reprieve by NodeResourcesFit's arithmetic: ``used`` is the row's
    requested vector (``fast.cols``) with every potential victim gone; each pod, PDB-violating
    ones first, stays if the preemptor still fits with it. Returns (victims most important
    first, PDB violations)."""
    victims: list[PodInfo] = []
    n_violating = 0
    fits = fast.fits_list
    for group, counts in ((violating, True), (non_violating, False)):
        for p in group:
            with_p = [u + x for u, x in zip(used, vector(p))]
            if fits(alloc, with_p):
                used = with_p  # reprieved
            else:
                victims.append(p)
                n_violating += counts
    if violating and non_violating:
        victims.sort(key=importance)
    return victims, n_violating


# select_victims_on_node's answer when the arithmetic says the pod does not fit even without every
# potential victim and the caller asked to defer the chain's exact status (dry_run computes it only
# if no candidate is found: it only ever appears in the "0/N nodes are available" message)
DEFERRED = Status(Code.UNSCHEDULABLE, ("deferred",))


def select_victims_on_node(pod: PodInfo, nodes: NodeTable, row: int, pdbs: Sequence[PDB],
                           node_filter: NodeFilterFn, fast: ResourceFit | None = None,
                           rejected_by_fit: bool = False, defer: bool = False,
                           row_lists: tuple[list[int], list[int]] | None = None) -> tuple[list[PodInfo], int, Status]:
    """upstream SelectVictimsOnNode on the live table; the table is restored before returning.
    With ``fast``, the full chain runs once (every potential victim removed) and each reprieve
    is NodeResourcesFit's arithmetic on the row's requested vector; when moreover the node was
    rejected by NodeResourcesFit in the cycle and the chain checks pod-independent filters first
    (``fast.independent_first``), the chain does not run at all unless the arithmetic says the
    pod does not fit even without every potential victim (then its status is the chain's, or
    DEFERRED when ``defer``: the caller runs the chain for it later if it needs the status).
    ``row_lists``: the row's (allocatable, requested) in ``fast.cols`` (``ResourceFit.rows``)."""
    prio = pod.priority
    row_pods = nodes.pods[row]
    potential = [p for p in row_pods.values() if p.priority < prio]
    if not potential:
        return [], 0, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (MSG_NO_VICTIMS,))
    if fast is not None and fast.independent_first and rejected_by_fit:
        alloc, used = row_lists if row_lists is not None else fast.rows(nodes, [row])[row]
        vecs = {p.key: fast.vector(p, nodes) for p in potential}
        for v in vecs.values():
            used = [u - x for u, x in zip(used, v)]
        if fast.fits_list(alloc, used):
            potential.sort(key=importance)
            victims, n_violating = _reprieve(fast, alloc, used, *filter_pods_with_pdb_violation(potential, pdbs),
                                             lambda p: vecs[p.key])
            return victims, n_violating, Status.success()
        if defer:
            return [], 0, DEFERRED
    node = nodes.names[row]
    order = list(row_pods)
    aff = nodes.pods_with_affinity[row]
    aff_order = list(aff)
    assumed = {p.key for p in potential if p.key in nodes.assumed}
    out: set[str] = set()
    try:
        for p in potential:
            nodes.remove_pod(p.key)
            out.add(p.key)
        st = node_filter(pod, nodes, row)
        if not st.is_success:
            return [], 0, st
        potential.sort(key=importance)
        violating, non_violating = filter_pods_with_pdb_violation(potential, pdbs)
        victims = []
        n_violating = 0
        if fast is not None:  # the table keeps every potential victim out; restored below
            alloc, used = fast.rows(nodes, [row])[row]
            victims, n_violating = _reprieve(fast, alloc, used, violating, non_violating,
                                             lambda p: fast.vector(p, nodes))
            return victims, n_violating, Status.success()
        for group, counts in ((violating, True), (non_violating, False)):
            for p in group:
                nodes.add_pod(p, node, assumed=p.key in assumed)
                out.discard(p.key)
                if not node_filter(pod, nodes, row).is_success:  # upstream: an Error does not fit either
                    nodes.remove_pod(p.key)
                    out.add(p.key)
                    victims.append(p)
                    n_violating += counts
        if violating and non_violating:
            victims.sort(key=importance)
        return victims, n_violating, Status.success()
    finally:
        for p in potential:
            if p.key in out:
                nodes.add_pod(p, node, assumed=p.key in assumed)
        _reorder(row_pods, order)
        if aff_order:
            _reorder(aff, aff_order)


def _reorder(d: dict, order: list[str]) -> None:
    """Put ``d``'s entries back in ``order`` (in place), so iteration order is unchanged."""
    if list(d) != order:
        items = [(k, d[k]) for k in order]
        d.clear()
        d.update(items)


def pick_one_node(candidates: Sequence[Candidate]) -> Candidate | None:
    """upstream pickOneNodeForPreemption, criteria in order: fewest PDB violations; lowest
    highest victim priority; smallest sum of victim priorities (each shifted by 2^31); fewest
    victims; latest earliest start time among the highest-priority victims; then the first."""
    if not candidates:
        return None
    funcs: list[Callable[[Candidate], Any]] = [
        lambda c: -c.num_pdb_violations,
        lambda c: -c.victims[0].priority,
        lambda c: -sum(v.priority + _MAX_INT32 + 1 for v in c.victims),
        lambda c: -len(c.victims),
        _earliest_start_of_top_priority,
    ]
    left = list(candidates)
    for f in funcs:
        scores = [f(c) for c in left]
        best = max(scores)
        left = [c for c, s in zip(left, scores) if s == best]
        if len(left) == 1:
            break
    return left[0]


def _earliest_start_of_top_priority(c: Candidate) -> str:
    """upstream GetEarliestPodStartTime: the earliest start among the victims of the highest
    priority (a later one scores higher)."""
    top = max(v.priority for v in c.victims)
    return min(v.start_time or _NOT_STARTED for v in c.victims if v.priority == top)


def dry_run(pod: PodInfo, nodes: NodeTable, potential: Sequence[int], pdbs: Sequence[PDB], offset: int,
            wanted: int, node_filter: NodeFilterFn, fast: ResourceFit | None = None,
            by_fit: frozenset[int] = frozenset()) -> tuple[list[Candidate], dict[str, Status], list[Status], int]:
    """upstream DryRunPreemption, sequentially from ``offset`` (wrapping): stops once a
    non-violating candidate exists and ``wanted`` candidates were found. Returns (non-violating
    then violating candidates, statuses of the nodes that are not candidates, errors, nodes tried)."""
    good: list[Candidate] = []
    violating: list[Candidate] = []
    statuses: dict[str, Status] = {}
    errors: list[Status] = []
    deferred: list[int] = []  # rows the arithmetic ruled out, their exact status not computed yet

    def record(row: int, victims: list[PodInfo], n_viol: int, st: Status) -> bool:
        """A candidate (True), or the node's status kept for the message (False)."""
        name = nodes.names[row]
        if st.is_success and victims:
            (good if n_viol == 0 else violating).append(Candidate(name, victims, n_viol))
            return True
        if st.is_success:
            st = Status.error(f'expected at least one victim pod on node "{name}"')
        if st.code == Code.ERROR:
            errors.append(st)
        statuses[name] = st
        return False

    n = len(potential)
    tried = 0
    # the arithmetic's rows, read out of the table (columnar, in the compared columns) a chunk of
    # the rows to try at a time: most dry runs stop after ``wanted`` of them
    arith = fast is not None and fast.independent_first and bool(by_fit)
    lists: dict[int, tuple[list[int], list[int]]] = {}
    chunk = max(wanted, 64)
    for i in range(n):
        row = potential[(offset + i) % n]
        tried += 1
        rl = None
        if arith and row in by_fit:
            rl = lists.get(row)
            if rl is None:
                ahead = (potential[(offset + j) % n] for j in range(i, min(n, i + chunk)))
                lists.update(fast.rows(nodes, [r for r in ahead if r in by_fit]))  # type: ignore[union-attr]
                rl = lists[row]
        victims, n_viol, st = select_victims_on_node(pod, nodes, row, pdbs, node_filter, fast,
                                                     row in by_fit, defer=True, row_lists=rl)
        if st is DEFERRED:
            deferred.append(row)
        elif record(row, victims, n_viol, st) and good and len(good) + len(violating) >= wanted:
            break
    if not good and not violating:  # no candidate: the message counts every tried node's reason
        for row in deferred:  # (a candidate here would mean the chain disagrees with the arithmetic)
            record(row, *select_victims_on_node(pod, nodes, row, pdbs, node_filter, fast, False))
    return good + violating, statuses, errors, tried


def fit_error(num_all_nodes: int, statuses: Mapping[str, Status], absent: str = MSG_NOT_HELPFUL) -> str:
    """The nested FitError of a preemption that found no candidate: a histogram of the tried
    nodes' reasons, every other node counted as ``absent``."""
    hist: dict[str, int] = {}
    for st in statuses.values():
        for r in st.reasons:
            hist[r] = hist.get(r, 0) + 1
    n_absent = num_all_nodes - len(statuses)
    if n_absent > 0:
        hist[absent] = hist.get(absent, 0) + n_absent
    reasons = ", ".join(sorted(f"{c} {r}" for r, c in hist.items()))
    return f"0/{num_all_nodes} nodes are available: {reasons}."


def preempt(pod: PodInfo, nodes: NodeTable, statuses: Any, pdbs: Sequence[PDB], node_filter: Any,
            percentage: int = 10, absolute: int = 100, rng: Any = None) -> PreemptionResult:
    """upstream Evaluator.Preempt without its API calls. ``statuses``: the cycle's NodeToStatus;
    ``node_filter``: a ``schedule.NodeFilter`` (or any ``(pod, nodes, row) -> Status``; then
    nominated pods are not added). Returns the decision; the table is unchanged afterwards."""
    import random as _random

    rng = rng or _random
    ok, msg = eligible(pod, nodes, statuses.get(pod.nominated_node_name))
    if not ok:
        return PreemptionResult(Status(Code.UNSCHEDULABLE, (msg,)))
    potential_names = statuses.nodes_for_preemption(nodes.names)
    if not potential_names:
        return PreemptionResult(Status(Code.UNSCHEDULABLE, (fit_error(nodes.n, {}),)), nominated_node="")
    potential = [nodes.index[nm] for nm in potential_names]
    offset = rng.randrange(len(potential))
    wanted = num_candidates(len(potential), percentage, absolute)
    add = getattr(node_filter, "add_nominated", None)
    added = add(pod, nodes) if add is not None else []
    try:
        fast = resource_only(pod, nodes, node_filter)
        by_fit = frozenset(r for r, nm in zip(potential, potential_names)
                           if statuses.get(nm).plugin == "NodeResourcesFit") if fast is not None else frozenset()
        candidates, tried_statuses, errors, tried = dry_run(pod, nodes, potential, pdbs, offset, wanted, node_filter,
                                                            fast, by_fit)
    finally:
        nodes.remove_pods(added)
    if not candidates:
        if errors:
            return PreemptionResult(Status(Code.ERROR, (", ".join(e.message() for e in errors),)), dry_runs=tried)
        return PreemptionResult(Status(Code.UNSCHEDULABLE, (fit_error(nodes.n, tried_statuses),)),
                                nominated_node="", dry_runs=tried)
    best = pick_one_node(candidates)
    assert best is not None
    nominator = getattr(node_filter, "nominator", None)
    lower = [p for p in nominator.nominated_pods(best.node) if p.priority < pod.priority and p.key != pod.key] \
        if nominator else []
    return PreemptionResult(Status.success(), best.node, best.victims, best.num_pdb_violations, lower,
                            candidates=len(candidates), dry_runs=tried)
