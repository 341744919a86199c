"""PodTopologySpread (upstream plugins/podtopologyspread: common.go, filtering.go, scoring.go, plugin.go).

Constraints: the pod's own ``topologySpreadConstraints`` (matchLabelKeys already merged into the
selector by podinfo); only when it has none, the profile defaults: ``defaultingType: System``
gives hostname maxSkew 3 and zone maxSkew 5, both ScheduleAnyway; ``List`` gives
``args.defaultConstraints``. Defaults take as selector the one of the Services, RCs, RSs and
StatefulSets selecting the pod (``Handle.default_spread_selector``); with no such selector the pod
gets no default spreading. DoNotSchedule constraints filter, ScheduleAnyway constraints score.

Counting (countPodsMatchSelector): pods on a node in the incoming pod's namespace, not terminating,
whose labels match the selector; an empty selector counts 0 (though the pod still "self-matches").
A node takes part in a constraint's counting only when it has every topology key of the
constraint set and passes the constraint's node inclusion policies: nodeAffinityPolicy Honor
(default) requires the pod's nodeSelector and required node affinity to match it,
nodeTaintsPolicy Honor (default Ignore) requires the pod to tolerate its NoSchedule/NoExecute taints.

Filter, per node and per hard constraint in order (the first failure decides):
missing topology key -> UnschedulableAndUnresolvable; else
``count(domain) + selfMatch - globalMin > maxSkew`` -> Unschedulable, where globalMin is the least
count over the eligible domains, or 0 when there are fewer eligible domains than minDomains.

Score: ``sum over constraints the node has the key of [count * ln(size + 2) + maxSkew - 1]``,
rounded half away from zero; ``size`` is the number of domains among the scored nodes (for
hostname: the number of scored nodes), counts are summed over all nodes of those domains
(hostname: the node's own pods). When the pod has its own constraints or the defaults are not the
system ones, feasible nodes missing any key are ignored (score 0). NormalizeScore:
``100 * (max + min - s) / max`` over the non-ignored nodes, max starting at 0; all 100 when max is 0.

Matching-pod counts per node are kept per (namespace, selector) across cycles and recounted only
for nodes whose pod set changed since (framework.podcount.PodMatchCounter), so a cycle's cost is
mostly numpy work over the node rows.

Events (upstream plugin.go), judged against the pod's hard constraints (its own DoNotSchedule
ones, or the defaults): an assigned pod added, relabelled or deleted in the pod's namespace,
queueing when its labels match (Add, Delete) or a selector's verdict on it flips (label update);
the pod's own update, queueing on a new toleration when a constraint honors taints, or a label
change that flips a selector; a node added or deleted that has every topology key, or updated so
that "has every key" flips, or, having them, a topology-key label or its taints changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Annotated, Any

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ..framework.interface import (CycleState, EnqueueExtensions, FilterPlugin, FilterResult, Handle, MAX_NODE_SCORE,
                                   PluginArgs, PreFilterPlugin, PreScorePlugin, ScorePlugin)
from ..framework.model.labels import NOTHING, LabelSelector, validate_label_name
from ..framework.model.nodetable import NodeSpec, NodeTable
from ..framework.podcount import PodMatchCounter, selector_matcher
from ..framework.model.podinfo import DO_NOT_SCHEDULE, HONOR, IGNORE, SCHEDULE_ANYWAY, PodInfo, SpreadConstraint
from ..framework.status import Code, Status
from ..framework.model.taints import NO_EXECUTE, NO_SCHEDULE, first_untolerated
from ..framework.validation import (MAX_CONSTRAINTS, MAX_LABEL_KEY, MAX_MATCH_LABEL_KEYS, MAX_SHORT, duplicate,
                                    forbidden, int32_errors, invalid, not_supported, raise_if, required)

NAME = "PodTopologySpread"
ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"
SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"

_DEFAULT_SELECTOR_KEY = NAME + "/defaultSelector"
_PREFILTER_KEY = "PreFilter" + NAME
_PRESCORE_KEY = "PreScore" + NAME
_MAX_INT32 = 2**31 - 1
_DO_NOT_SCHEDULE_TAINTS = (NO_SCHEDULE, NO_EXECUTE)

SYSTEM_DEFAULT_CONSTRAINTS = (
    SpreadConstraint(max_skew=3, topology_key=LABEL_HOSTNAME, when_unsatisfiable=SCHEDULE_ANYWAY, selector=NOTHING),
    SpreadConstraint(max_skew=5, topology_key=LABEL_ZONE, when_unsatisfiable=SCHEDULE_ANYWAY, selector=NOTHING),
)

# ---------------------------------------------------------------------------------------- args

NODE_INCLUSION_POLICIES = (HONOR, IGNORE)  # sorted, as upstream lists them


class DefaultConstraint(PluginArgs):
    """A v1.TopologySpreadConstraint given in ``defaultConstraints`` (its selector is deduced per pod)."""

    max_skew: int = Field(0, alias="maxSkew")
    topology_key: str = Field("", alias="topologyKey", max_length=MAX_LABEL_KEY)
    when_unsatisfiable: str = Field("", alias="whenUnsatisfiable", max_length=MAX_SHORT,
                                    json_schema_extra={"enum": [DO_NOT_SCHEDULE, SCHEDULE_ANYWAY]})
    label_selector: dict[str, Any] | None = Field(None, alias="labelSelector")
    min_domains: int | None = Field(None, alias="minDomains")
    node_affinity_policy: str | None = Field(None, alias="nodeAffinityPolicy", max_length=MAX_SHORT,
                                             json_schema_extra={"enum": list(NODE_INCLUSION_POLICIES)})
    node_taints_policy: str | None = Field(None, alias="nodeTaintsPolicy", max_length=MAX_SHORT,
                                           json_schema_extra={"enum": list(NODE_INCLUSION_POLICIES)})
    match_label_keys: list[Annotated[str, Field(max_length=MAX_LABEL_KEY)]] | None = Field(
        None, alias="matchLabelKeys", max_length=MAX_MATCH_LABEL_KEYS)

    def to_constraint(self) -> SpreadConstraint:
        """filterTopologySpreadConstraints for a default: minDomains nil -> 1, policies nil ->
        Honor/Ignore. matchLabelKeys has no effect: the selector is replaced per pod."""
        return SpreadConstraint(
            max_skew=self.max_skew, topology_key=self.topology_key, when_unsatisfiable=self.when_unsatisfiable,
            selector=NOTHING, min_domains=1 if self.min_domains is None else self.min_domains,
            node_affinity_policy=self.node_affinity_policy or HONOR,
            node_taints_policy=self.node_taints_policy or IGNORE)

    def errors(self, p: str) -> list[str]:
        """ValidatePodTopologySpreadArgs' checks of one constraint, plus those of the API server's
        validateTopologySpreadConstraints that upstream's config validation leaves out (minDomains,
        the node inclusion policies, matchLabelKeys): an unknown policy would silently act as
        Ignore."""
        errs = int32_errors(f"{p}.maxSkew", self.max_skew)
        if self.max_skew <= 0:
            errs.append(invalid(f"{p}.maxSkew", self.max_skew, "not in valid range (0, inf)"))
        if not self.topology_key:
            errs.append(required(f"{p}.topologyKey", "can not be empty"))
        else:
            errs += validate_label_name(self.topology_key, f"{p}.topologyKey")
        wu = self.when_unsatisfiable
        if not wu:
            errs.append(required(f"{p}.whenUnsatisfiable", "can not be empty"))
        elif wu not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            errs.append(not_supported(f"{p}.whenUnsatisfiable", wu, (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY)))
        if self.label_selector is not None:
            errs.append(forbidden(f"{p}.labelSelector",
                                  "constraint must not define a selector, as they deduced for each pod"))
        if self.min_domains is not None:
            errs += int32_errors(f"{p}.minDomains", self.min_domains)
            if self.min_domains <= 0:
                errs.append(invalid(f"{p}.minDomains", self.min_domains, "must be greater than zero"))
            if wu != DO_NOT_SCHEDULE:
                errs.append(invalid(f"{p}.minDomains", self.min_domains,
                                    f"can only use minDomains if whenUnsatisfiable={DO_NOT_SCHEDULE}, not {wu}"))
        for name, v in (("nodeAffinityPolicy", self.node_affinity_policy),
                        ("nodeTaintsPolicy", self.node_taints_policy)):
            if v is not None and v not in NODE_INCLUSION_POLICIES:
                errs.append(not_supported(f"{p}.{name}", v, NODE_INCLUSION_POLICIES))
        for i, key in enumerate(self.match_label_keys or []):
            errs += validate_label_name(key, f"{p}.matchLabelKeys[{i}]")
        return errs


class PodTopologySpreadArgs(PluginArgs):
    """PodTopologySpreadArgs, validated as upstream ValidatePodTopologySpreadArgs."""

    default_constraints: list[DefaultConstraint] = Field(default_factory=list, alias="defaultConstraints",
                                                         max_length=MAX_CONSTRAINTS)
    defaulting_type: str = Field(SYSTEM_DEFAULTING, alias="defaultingType", max_length=MAX_SHORT)

    @field_validator("defaulting_type")
    @classmethod
    def _default_type(cls, v: str) -> str:
        return v or SYSTEM_DEFAULTING  # v1 SetDefaults_PodTopologySpreadArgs: "" -> System

    @model_validator(mode="after")
    def _validate(self) -> "PodTopologySpreadArgs":
        errs: list[str] = []
        dt = self.defaulting_type
        if dt not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
            errs.append(not_supported("defaultingType", dt, (SYSTEM_DEFAULTING, LIST_DEFAULTING)))
        elif dt == SYSTEM_DEFAULTING and self.default_constraints:
            errs.append(invalid("defaultingType", dt, "when .defaultConstraints are not empty"))
        seen: set[tuple[str, str]] = set()
        for i, c in enumerate(self.default_constraints):
            errs += c.errors(f"defaultConstraints[{i}]")
            pair = (c.topology_key, c.when_unsatisfiable)
            if pair in seen:
                errs.append(duplicate(f"defaultConstraints[{i}]", f"{{{pair[0]}, {pair[1]}}}"))
            seen.add(pair)
        raise_if(errs)
        return self


# ---------------------------------------------------------------------------------------- helpers

_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_L1, _L2, _L3 = 6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01
_L4, _L5 = 2.222219843214978396e-01, 1.818357216161805012e-01
_L6, _L7 = 1.531383769920937332e-01, 1.479819860511658591e-01
_HALF_SQRT2 = 7.07106781186547524401e-01


def go_log(x: float) -> float:
    """Go's math.Log for x > 0, bit for bit (the FreeBSD algorithm Go runs; libm's log differs by
    one ulp for some integers, e.g. ln 3, which upstream's ln(size + 2) weights hit)."""
    f1, ki = math.frexp(x)
    if f1 <= _HALF_SQRT2:  # amd64 archLog compares "not less than"; equal to Go's f1 < Sqrt2/2 for integers
        f1 *= 2
        ki -= 1
    f = f1 - 1
    k = float(ki)
    s = f / (2 + f)
    s2 = s * s
    s4 = s2 * s2
    t1 = s2 * (_L1 + s4 * (_L3 + s4 * (_L5 + s4 * _L7)))
    t2 = s4 * (_L2 + s4 * (_L4 + s4 * _L6))
    r = t1 + t2
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)


def go_round(x: np.ndarray) -> np.ndarray:
    """Go's math.Round (half away from zero) as int64; ``x - trunc(x)`` is exact."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t).astype(np.int64)


def _count_matching(counter: PodMatchCounter, nodes: NodeTable, namespace: str, sel: LabelSelector) -> np.ndarray:
    """Per row (all rows), countPodsMatchSelector. Do not modify the result."""
    if sel.empty or sel.nothing:  # {} counts nothing (upstream), nil matches nothing
        return np.zeros(nodes.n, dtype=np.int64)
    match = selector_matcher(sel)

    def count(pods: tuple) -> int:
        c = 0
        for p in pods:
            if p.namespace == namespace and not p.terminating and match(p.labels):
                c += 1
        return c

    return counter.counts(nodes, (namespace, sel), count)


def _domain_codes(nodes: NodeTable, key: str) -> tuple[np.ndarray, int, int]:
    """(code per row, number of values, code of the value "") for label ``key``; code -1 where
    the node lacks the key. The "" code is an extra slot when no node has the value ""."""

    def build():
        vals = nodes.label_values(key)
        codes = np.full(nodes.n, -1, dtype=np.int64)
        empty = len(vals)
        for i, (v, names) in enumerate(vals.items()):
            if v == "":
                empty = i
            codes[[nodes.index[nm] for nm in names]] = i
        return codes, len(vals), empty

    return nodes.cached((NAME, "codes", key), build)


def _all_keys_mask(nodes: NodeTable, constraints: tuple[SpreadConstraint, ...]) -> np.ndarray:
    """nodeLabelsMatchSpreadConstraints: the node has every constraint's topology key."""
    m = np.ones(nodes.n, dtype=bool)
    for c in constraints:
        m &= nodes.label_mask(c.topology_key)
    return m


def _node_affinity_mask(nodes: NodeTable, pod: PodInfo) -> np.ndarray | None:
    """GetRequiredNodeAffinity(pod).Match per row (nodeSelector AND required terms); None = all."""
    sel, req = pod.node_selector, pod.required_node_affinity
    if not sel and req is None:
        return None

    def build():
        m = np.ones(nodes.n, dtype=bool)
        for k, v in sel.items():
            m &= nodes.label_mask(k, v)
        if req is not None:
            m &= np.fromiter((req.matches(s.labels, s.name) for s in nodes.specs[: nodes.n]),
                             dtype=bool, count=nodes.n)
        return m

    return nodes.cached((NAME, "affinity", tuple(sorted(sel.items())), req), build)


def _tolerated_mask(nodes: NodeTable, pod: PodInfo) -> np.ndarray:
    """Per row: the pod tolerates every NoSchedule/NoExecute taint of the node."""
    tolerations = pod.tolerations

    def tainted() -> dict[tuple, np.ndarray]:  # rows as arrays: compact in the byte-bounded memo
        groups: dict[tuple, list[int]] = {}
        for row in range(nodes.n):
            taints = tuple(t for t in nodes.specs[row].taints if t.effect in _DO_NOT_SCHEDULE_TAINTS)
            if taints:
                groups.setdefault(taints, []).append(row)
        return {taints: np.asarray(rows, dtype=np.intp) for taints, rows in groups.items()}

    def build():
        m = np.ones(nodes.n, dtype=bool)
        for taints, rows in nodes.cached((NAME, "taint-groups"), tainted).items():
            if first_untolerated(taints, tolerations) is not None:
                m[rows] = False
        return m

    return nodes.cached((NAME, "tolerated", tolerations), build)


def _eligible(nodes: NodeTable, pod: PodInfo, c: SpreadConstraint, base: np.ndarray) -> np.ndarray:
    """``base`` narrowed by the constraint's node inclusion policies (matchNodeInclusionPolicies)."""
    m = base
    if c.node_affinity_policy == HONOR:
        aff = _node_affinity_mask(nodes, pod)
        if aff is not None:
            m = m & aff
    if c.node_taints_policy == HONOR:
        m = m & _tolerated_mask(nodes, pod)
    return m


# ---------------------------------------------------------------------------------------- state

@dataclass(slots=True)
class _HardConstraint:
    codes: np.ndarray  # per row, domain code (-1: key missing)
    match_num: np.ndarray  # per domain code, matching pods; one extra trailing 0 for code -1
    min_match: int
    self_match: int
    max_skew: int


@dataclass(slots=True)
class _SoftConstraint:
    has_key: np.ndarray  # per row
    count: np.ndarray  # per row: the count of the row's domain (hostname: of the row itself)
    weight: float
    max_skew: int


@dataclass(slots=True)
class _PreScoreState:
    constraints: list[_SoftConstraint]
    ignored: np.ndarray  # per row: a feasible node missing a topology key (requireAllTopologies)


def _involved(other: PodInfo, pod: PodInfo) -> bool:
    """upstream involvedInTopologySpreading: the pod itself, or an assigned pod of its namespace."""
    return other.uid == pod.uid or (bool(other.node_name) and other.namespace == pod.namespace)


def _has_all_keys(node: NodeSpec, constraints: tuple[SpreadConstraint, ...]) -> bool:
    """nodeLabelsMatchSpreadConstraints on one node."""
    return all(c.topology_key in node.labels for c in constraints)


class PodTopologySpread(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, EnqueueExtensions):
    NAME = NAME
    Args = PodTopologySpreadArgs

    def __init__(self, args: PodTopologySpreadArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self.system_defaulted = args.defaulting_type == SYSTEM_DEFAULTING
        defaults = (SYSTEM_DEFAULT_CONSTRAINTS if self.system_defaulted
                    else tuple(c.to_constraint() for c in args.default_constraints))
        self._default_hard = tuple(c for c in defaults if c.when_unsatisfiable == DO_NOT_SCHEDULE)
        self._default_soft = tuple(c for c in defaults if c.when_unsatisfiable == SCHEDULE_ANYWAY)
        self._counter = PodMatchCounter()

    # ------------------------------------------------------------------ constraints
    def _constraints(self, state: CycleState, pod: PodInfo, action: str) -> tuple[SpreadConstraint, ...]:
        """getConstraints / initPreScoreState: the pod's own constraints with ``action``, or
        buildDefaultConstraints when it has none (empty default selector -> none)."""
        if pod.spread_constraints:
            return tuple(c for c in pod.spread_constraints if c.when_unsatisfiable == action)
        defaults = self._default_hard if action == DO_NOT_SCHEDULE else self._default_soft
        if not defaults:
            return ()
        if _DEFAULT_SELECTOR_KEY not in state:
            state.write(_DEFAULT_SELECTOR_KEY, self.handle.default_spread_selector(pod))
        sel = state.read(_DEFAULT_SELECTOR_KEY)
        if sel is None or sel.empty:
            return ()
        return tuple(replace(c, selector=sel) for c in defaults)

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        pod, node = self.pod_change_hint, self.node_change_hint
        return [
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD), pod),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.UPDATE_POD_LABEL), pod),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE), pod),
            ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_LABEL), pod),
            ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_TOLERATION), pod),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD), node),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.DELETE), node),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL), node),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_TAINT), node),
        ]

    def _hard_constraints(self, pod: PodInfo) -> tuple[SpreadConstraint, ...]:
        """upstream getConstraints: what PreFilter filters ``pod`` by."""
        return self._constraints(CycleState(), pod, DO_NOT_SCHEDULE)

    def pod_change_hint(self, pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
        """upstream isSchedulableAfterPodChange."""
        if (new is not None and not _involved(new, pod)) or (old is not None and not _involved(old, pod)):
            return QueueingHint.SKIP
        constraints = self._hard_constraints(pod)
        if old is not None and new is not None:
            if (new.uid == pod.uid and new.tolerations != old.tolerations
                    and any(c.node_taints_policy == HONOR for c in constraints)):
                return QueueingHint.QUEUE
            if new.labels == old.labels:
                return QueueingHint.SKIP
            flips = any(c.selector.matches(old.labels) != c.selector.matches(new.labels) for c in constraints)
            return QueueingHint.QUEUE if flips else QueueingHint.SKIP
        changed = new if new is not None else old
        if changed is None:
            return QueueingHint.QUEUE
        matches = any(c.selector.matches(changed.labels) for c in constraints)  # podLabelsMatchSpreadConstraints
        return QueueingHint.QUEUE if matches else QueueingHint.SKIP

    def node_change_hint(self, pod: PodInfo, old: NodeSpec | None, new: NodeSpec | None) -> QueueingHint:
        """upstream isSchedulableAfterNodeChange."""
        constraints = self._hard_constraints(pod)
        old_ok = old is not None and _has_all_keys(old, constraints)
        new_ok = new is not None and _has_all_keys(new, constraints)
        if old is not None and new is not None:
            if old_ok != new_ok:
                return QueueingHint.QUEUE
            if new_ok and (any(old.labels.get(c.topology_key, "") != new.labels.get(c.topology_key, "")
                               for c in constraints) or old.taints != new.taints):
                return QueueingHint.QUEUE
            return QueueingHint.SKIP
        return QueueingHint.QUEUE if (new_ok if new is not None else old_ok) else QueueingHint.SKIP

    # ------------------------------------------------------------------ PreFilter / Filter
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        constraints = self._constraints(state, pod, DO_NOT_SCHEDULE)
        if not constraints:
            return Status.skip(), None
        base = _all_keys_mask(nodes, constraints)
        hard = []
        for c in constraints:
            codes, nvals, _ = _domain_codes(nodes, c.topology_key)
            eligible = _eligible(nodes, pod, c, base)
            counts = _count_matching(self._counter, nodes, pod.namespace, c.selector)
            domains = codes[eligible]
            present = np.bincount(domains, minlength=nvals) > 0
            match_num = np.zeros(nvals + 1, dtype=np.int64)
            match_num[:nvals] = np.bincount(domains, weights=counts[eligible], minlength=nvals)
            n_domains = int(present.sum())
            min_match = int(match_num[:nvals][present].min()) if n_domains else _MAX_INT32
            if n_domains < c.min_domains:
                min_match = 0
            hard.append(_HardConstraint(codes, match_num, min_match,
                                        int(c.selector.matches(pod.labels)), c.max_skew))
        state.write(_PREFILTER_KEY, hard)
        return Status.success(), None

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        hard: list[_HardConstraint] | None = state.read(_PREFILTER_KEY)
        if hard is None:
            return FilterResult.failed(Status.error(f'reading "{_PREFILTER_KEY}" from cycleState: not found'),
                                       len(rows))
        undecided = np.ones(len(rows), dtype=bool)
        missing_label = np.zeros(len(rows), dtype=bool)
        too_skewed = np.zeros(len(rows), dtype=bool)
        for h in hard:
            codes = h.codes[rows]
            missing = undecided & (codes < 0)
            missing_label |= missing
            undecided &= ~missing
            skewed = undecided & (h.match_num[codes] + h.self_match - h.min_match > h.max_skew)
            too_skewed |= skewed
            undecided &= ~skewed
        code = np.where(missing_label, np.int8(Code.UNSCHEDULABLE_AND_UNRESOLVABLE), np.int8(Code.UNSCHEDULABLE))
        return FilterResult(undecided, code, [(ERR_REASON_NODE_LABEL_NOT_MATCH, missing_label),
                                              (ERR_REASON_CONSTRAINTS_NOT_MATCH, too_skewed)])

    # ------------------------------------------------------------------ PreScore / Score
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> Status:
        if nodes.n == 0:
            return Status.skip()
        constraints = self._constraints(state, pod, SCHEDULE_ANYWAY)
        if not constraints:
            return Status.skip()
        # Only pods with their own constraints, or non-system defaults, need every key on a node;
        # with system defaults a node without a zone label is still spread by hostname.
        require_all = bool(pod.spread_constraints) or not self.system_defaulted
        if require_all:
            base = _all_keys_mask(nodes, constraints)
            ignored = ~base
        else:
            base = np.ones(nodes.n, dtype=bool)
            ignored = np.zeros(nodes.n, dtype=bool)
        kept = rows[~ignored[rows]]
        soft = []
        for c in constraints:
            counts = _count_matching(self._counter, nodes, pod.namespace, c.selector)
            has_key = nodes.label_mask(c.topology_key)
            if c.topology_key == LABEL_HOSTNAME:
                size, count = len(kept), counts
            else:
                codes, nvals, empty = _domain_codes(nodes, c.topology_key)
                codes = np.where(codes >= 0, codes, empty)  # a node without the key is in domain ""
                size = int(np.count_nonzero(np.bincount(codes[kept], minlength=nvals + 1)))
                eligible = _eligible(nodes, pod, c, base)
                sums = np.bincount(codes[eligible], weights=counts[eligible], minlength=nvals + 1)
                count = sums.astype(np.int64)[codes]
            soft.append(_SoftConstraint(has_key, count, go_log(float(size + 2)), c.max_skew))
        state.write(_PRESCORE_KEY, _PreScoreState(soft, ignored))
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        s: _PreScoreState = state.read(_PRESCORE_KEY)
        total = np.zeros(len(rows), dtype=np.float64)
        for c in s.constraints:
            term = c.count[rows].astype(np.float64) * c.weight + float(c.max_skew - 1)
            total = total + np.where(c.has_key[rows], term, 0.0)
        out = go_round(total)
        out[s.ignored[rows]] = 0
        return out

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray,
                        scores: np.ndarray) -> np.ndarray:
        s: _PreScoreState = state.read(_PRESCORE_KEY)
        scores = np.asarray(scores, dtype=np.int64)
        valid = ~s.ignored[rows]
        out = np.zeros(len(scores), dtype=np.int64)
        if not valid.any():
            return out
        v = scores[valid]
        min_score, max_score = int(v.min()), max(0, int(v.max()))
        if max_score == 0:
            out[valid] = MAX_NODE_SCORE
        else:
            out[valid] = MAX_NODE_SCORE * (max_score + min_score - v) // max_score
        return out


PLUGIN = PodTopologySpread
