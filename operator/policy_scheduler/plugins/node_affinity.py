"""NodeAffinity (upstream plugins/nodeaffinity/node_affinity.go, matching as in
component-helpers scheduling/corev1/nodeaffinity).

PreFilter: Skip when the pod has no nodeSelector, no required node affinity and the profile has
no ``addedAffinity`` required selector. When every required term carries ``matchFields``
``metadata.name In`` requirements, the union over terms of each term's intersection of names is
returned as the node set; an empty union is ``pod affinity terms conflict``
(UnschedulableAndUnresolvable).

Filter (all UnschedulableAndUnresolvable): the profile's added required selector must match,
else ``node(s) didn't match scheduler-enforced node affinity``; then every nodeSelector pair must
equal a node label and at least one required term must match, else
``node(s) didn't match Pod's node affinity/selector``. Terms are ORed; inside a term every
expression and field must hold; a term with neither matches nothing. Gt/Lt parse the label
value and the requirement value as base-10 int64 (Go ``strconv.ParseInt``); a label that is
absent or not an integer does not match.

Score: the sum of the weights of the preferred terms (the pod's and the profile's added ones)
matching the node; terms with weight 0 or an empty preference are ignored. PreScore Skips when
there are none. NormalizeScore is DefaultNormalizeScore (not reversed).

Every term's mask over all rows is cached on the table (terms are hashable), so label matching
is a handful of numpy operations per distinct term, not a per-node loop. That memo is the table's
byte-bounded LRU (framework/model/bounded.py): the terms come from pods, so a tenant can fill it
only up to its budget, and an ``In`` builds its mask from the label index without keeping one per
value.

Events: a node added or its labels changed, queueing only when the node now matches the pod's
nodeSelector, its required terms and the profile's added required selector, and did not before
(a new node did not before).
"""

from __future__ import annotations

import re

import numpy as np
from pydantic import Field

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ..framework.interface import (CycleState, EnqueueExtensions, FilterPlugin, FilterResult, PluginArgs,
                                   PreFilterPlugin, PreScorePlugin, ScorePlugin, default_normalize_score)
from ..framework.model.labels import NodeAffinitySpec, NodeSelector, NodeSelectorTerm, Requirement
from ..framework.model.nodetable import NodeSpec, NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.status import Code, Status

NAME = "NodeAffinity"
ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"
_PREFILTER_KEY = "PreFilter" + NAME
_PRESCORE_KEY = "PreScore" + NAME
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_INT64 = re.compile(r"[+-]?[0-9]+")

WeightedTerms = tuple[tuple[int, NodeSelectorTerm], ...]


def parse_int64(s: str) -> int | None:
    """Go strconv.ParseInt(s, 10, 64): optional sign, decimal digits, int64 range."""
    if not _INT64.fullmatch(s):
        return None
    v = int(s)
    return v if -(1 << 63) <= v < (1 << 63) else None


def _requirement_mask(nodes: NodeTable, r: Requirement) -> np.ndarray:
    op = r.operator
    if op in ("In", "NotIn"):  # from the label index: no mask per value (a value no node has is a set lookup)
        m = nodes.values_mask(r.key, r.values)
        return m if op == "In" else ~m
    if op == "Exists":
        return nodes.label_mask(r.key)
    if op == "DoesNotExist":
        return ~nodes.label_mask(r.key)
    m = np.zeros(nodes.n, dtype=bool)  # Gt / Lt (parsing guarantees exactly one value)
    want = parse_int64(r.values[0])
    if want is None:
        return m
    for value, names in nodes.label_values(r.key).items():
        have = parse_int64(value)
        if have is not None and (have > want if op == "Gt" else have < want):
            for name in names:
                m[nodes.index[name]] = True
    return m


def _field_mask(nodes: NodeTable, r: Requirement) -> np.ndarray:
    """``metadata.name`` In / NotIn with exactly one value."""
    m = np.zeros(nodes.n, dtype=bool)
    row = nodes.index.get(r.values[0])
    if row is not None:
        m[row] = True
    return m if r.operator == "In" else ~m


def term_mask(nodes: NodeTable, term: NodeSelectorTerm) -> np.ndarray:
    """Mask over all rows of the nodes matching ``term`` (cached; do not modify)."""

    def build():
        m = np.zeros(nodes.n, dtype=bool)
        if term.empty:
            return m
        m[:] = True
        for r in term.expressions:
            m &= _requirement_mask(nodes, r)
        for r in term.fields:
            m &= _field_mask(nodes, r)
        return m

    return nodes.cached((NAME, "term", term), build)


def selector_mask(nodes: NodeTable, selector: NodeSelector) -> np.ndarray:
    """Mask of the nodes matching any term of ``selector`` (cached; do not modify)."""

    def build():
        m = np.zeros(nodes.n, dtype=bool)
        for t in selector.terms:
            m |= term_mask(nodes, t)
        return m

    return nodes.cached((NAME, "selector", selector), build)


def required_mask(nodes: NodeTable, pod: PodInfo) -> np.ndarray:
    """upstream RequiredNodeAffinity.Match over all rows: nodeSelector AND required affinity."""
    node_selector = frozenset(pod.node_selector.items())
    affinity = pod.required_node_affinity

    def build():
        m = np.ones(nodes.n, dtype=bool)
        for k, v in node_selector:
            m &= nodes.label_mask(k, v)
        if affinity is not None:
            m &= selector_mask(nodes, affinity)
        return m

    return nodes.cached((NAME, "required", node_selector, affinity), build)


def required_matches(pod: PodInfo, node: NodeSpec) -> bool:
    """upstream RequiredNodeAffinity.Match on one node: every nodeSelector pair and, when set, one
    of the required terms (``required_mask`` for a single node)."""
    labels = node.labels
    for k, v in pod.node_selector.items():
        if labels.get(k) != v:
            return False
    affinity = pod.required_node_affinity
    return affinity is None or affinity.matches(labels, node.name)


def preferred_score(nodes: NodeTable, terms: WeightedTerms, rows: np.ndarray) -> np.ndarray:
    """Sum of the weights of ``terms`` matching each of ``rows``. A weight-0 term adds nothing and
    an empty term matches no node, which is upstream's dropping of such terms."""
    out = np.zeros(len(rows), dtype=np.int64)
    for weight, term in terms:
        out += weight * term_mask(nodes, term)[rows]
    return out


def _parse_added_affinity(a: NodeAffinitySpec) -> tuple[NodeSelector | None, WeightedTerms]:
    """The parsed ``addedAffinity`` (already validated by NodeAffinitySpec). An empty required term
    list matches no node, as upstream; preferred terms with weight 0 or an empty preference are
    dropped (NewPreferredSchedulingTerms skips them)."""
    d = a.as_dict()
    required = None
    if _REQUIRED in d:
        terms = d[_REQUIRED].get("nodeSelectorTerms") or []
        required = NodeSelector(tuple(NodeSelectorTerm.parse(t, f"addedAffinity.{_REQUIRED}.nodeSelectorTerms[{i}]")
                                      for i, t in enumerate(terms)))
    preferred = []
    for i, p in enumerate(d.get(_PREFERRED) or []):
        weight, pref = p.get("weight", 0), p.get("preference") or {}
        if weight == 0 or not (pref.get("matchExpressions") or pref.get("matchFields")):
            continue
        preferred.append((weight, NodeSelectorTerm.parse(pref, f"addedAffinity.{_PREFERRED}[{i}].preference")))
    return required, tuple(preferred)


class NodeAffinityArgs(PluginArgs):
    """upstream NodeAffinityArgs, validated as ValidateNodeAffinityArgs: the added required
    selector and preferred terms must parse (operators, values, keys and values as labels)."""

    added_affinity: NodeAffinitySpec | None = Field(default=None, alias="addedAffinity")


class NodeAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, EnqueueExtensions):
    NAME = NAME
    Args = NodeAffinityArgs

    def __init__(self, args: NodeAffinityArgs, handle) -> None:
        super().__init__(args, handle)
        self.added_required: NodeSelector | None = None
        self.added_preferred: WeightedTerms = ()
        if args.added_affinity is not None:
            self.added_required, self.added_preferred = _parse_added_affinity(args.added_affinity)

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD), self.node_change_hint),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL), self.node_change_hint),
        ]

    def _node_passes(self, pod: PodInfo, node: NodeSpec) -> bool:
        """What Filter decides for ``node``: the added required selector, then the pod's own."""
        if self.added_required is not None and not self.added_required.matches(node.labels, node.name):
            return False
        return required_matches(pod, node)

    def node_change_hint(self, pod: PodInfo, old: NodeSpec | None, new: NodeSpec | None) -> QueueingHint:
        """upstream isSchedulableAfterNodeChange: Skip unless the new node passes; Queue for a new
        node, and for an updated one only if it did not pass before."""
        if new is None or not self._node_passes(pod, new):
            return QueueingHint.SKIP
        if old is None:
            return QueueingHint.QUEUE
        return QueueingHint.SKIP if self._node_passes(pod, old) else QueueingHint.QUEUE

    # ------------------------------------------------------------------ PreFilter / Filter
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        affinity = pod.required_node_affinity
        if affinity is None and self.added_required is None and not pod.node_selector:
            return Status.skip(), None
        state.write(_PREFILTER_KEY, required_mask(nodes, pod))
        if affinity is None or not affinity.terms:
            return Status.success(), None
        names: set[str] = set()
        for term in affinity.terms:
            term_names: set[str] | None = None
            for r in term.fields:
                if r.key == "metadata.name" and r.operator == "In":
                    term_names = set(r.values) if term_names is None else term_names & set(r.values)
            if term_names is None:  # this term does not pin names, and terms are ORed
                return Status.success(), None
            names |= term_names
        if not names:
            return Status.unschedulable(ERR_REASON_CONFLICT, unresolvable=True), None
        return Status.success(), names

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        mask = state.read(_PREFILTER_KEY)
        if mask is None:  # PreFilter did not run for this cycle
            mask = required_mask(nodes, pod)
        pod_ok = mask[rows]
        if self.added_required is None:
            return FilterResult.from_mask(pod_ok, ERR_REASON_POD, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        added_ok = selector_mask(nodes, self.added_required)[rows]
        return FilterResult(added_ok & pod_ok, Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                            [(ERR_REASON_ENFORCED, ~added_ok), (ERR_REASON_POD, added_ok & ~pod_ok)])

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> Status:
        if not pod.preferred_node_affinity and not self.added_preferred:
            return Status.skip()
        state.write(_PRESCORE_KEY, self.added_preferred + pod.preferred_node_affinity)
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        terms = state.read(_PRESCORE_KEY)
        if terms is None:  # PreScore did not run for this cycle
            terms = self.added_preferred + pod.preferred_node_affinity
        return preferred_score(nodes, terms, rows)

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray,
                        scores: np.ndarray) -> np.ndarray:
        return default_normalize_score(scores, reverse=False)


PLUGIN = NodeAffinity
