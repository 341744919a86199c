"""InterPodAffinity: required pod (anti-)affinity as a filter, preferred terms as a score.

Matches upstream pkg/scheduler/framework/plugins/interpodaffinity (filtering.go, scoring.go,
plugin.go) as of v1.37, where the InterPodAffinityHostnameFastPath gate is alpha and off by
default (the code path without it is the one matched here).

Term matching (AffinityTerm.Matches): the pod's namespace is in the term's namespace set, or the
term's namespaceSelector matches the labels of the pod's namespace; and the term's labelSelector
matches the pod's labels (a nil labelSelector matches nothing, ``{}`` everything). The namespace
set defaults to the namespace of the pod that OWNS the term. For the incoming pod's own terms a
non-empty namespaceSelector is resolved once per cycle against every known namespace and merged
into the set; an empty one (``{}``) keeps meaning "all namespaces". Existing pods' terms are
matched against the incoming pod's namespace labels; an unknown namespace counts as having no
labels (upstream's nil ``labels.Set``), so e.g. a ``DoesNotExist`` selector still matches it.

Topology domains: two nodes share a domain of key ``k`` iff both carry label ``k`` with the same
value; a node without the label is in no domain.

Cost per pod: existing pods' terms come from the NodeTable's term index (each distinct term is
matched once against the pod, its per-domain occurrences added at once); the pod's own terms are
counted per node by a PodMatchCounter (kept across cycles, recounting only nodes whose pods
changed) and summed per domain with numpy. Both sum exactly what upstream adds pod by pod.

Events (upstream plugin.go; only the pod's required terms can reject it): an assigned pod added
that matches all of the pod's affinity terms; an assigned pod relabelled so that it now matches
all affinity terms, or stopped matching an anti-affinity term; an assigned pod deleted that
matched an anti-affinity term, or whose own anti-affinity matched the pod; the pod's own label
change (Queue); a node added or relabelled where an affinity term's topology key appeared or
changed, or an anti-affinity term's key was removed or changed (any new node may help
anti-affinity). Ours: a namespace's labels changed (NAMESPACE_LABELS) when that flips one of the
pod's terms' namespaceSelector, or when it is the pod's own namespace (existing pods' terms'
namespaceSelector read it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

import numpy as np
from pydantic import Field, field_validator

from ..framework.events import (
    NAMESPACE_LABELS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    NamespaceChange,
    QueueingHint,
    Resource,
)
from ..framework.interface import (
    MAX_NODE_SCORE,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    FilterResult,
    PluginArgs,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
)
from ..framework.model.nodetable import NodeSpec, NodeTable
from ..framework.podcount import PodMatchCounter, selector_matcher
from ..framework.model.podinfo import AffinityTerm, PodInfo
from ..framework.status import Code, Status
from ..framework.validation import invalid

ERR_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
ERR_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

# upstream passes a nil labels.Set where no namespace labels apply: it behaves as an empty set.
_NO_LABELS: Mapping[str, str] = MappingProxyType({})

Pair = tuple[str, str]  # (topology key, topology value)


class InterPodAffinityArgs(PluginArgs):
    """upstream InterPodAffinityArgs (v1 defaults: hardPodAffinityWeight 1)."""

    hard_pod_affinity_weight: int = Field(1, alias="hardPodAffinityWeight", strict=True)
    ignore_preferred_terms_of_existing_pods: bool = Field(
        False, alias="ignorePreferredTermsOfExistingPods", strict=True)

    @field_validator("hard_pod_affinity_weight")
    @classmethod
    def _weight_range(cls, v: int) -> int:
        if not 0 <= v <= 100:
            raise ValueError(invalid("hardPodAffinityWeight", v, "not in valid range [0, 100]"))
        return v


@dataclass(slots=True)
class _FilterState:
    affinity: tuple[AffinityTerm, ...]  # incoming pod's required terms, namespaces resolved
    anti_affinity: tuple[AffinityTerm, ...]
    existing_anti_counts: dict[Pair, int]  # existing pods' required anti-affinity terms matching the pod
    affinity_counts: dict[Pair, int]  # existing pods matching ALL of the pod's affinity terms
    anti_affinity_counts: dict[Pair, int]  # existing pods matching each of the pod's anti-affinity terms
    self_affine: bool  # the pod matches all of its own affinity terms


def _add(counts: dict[Pair, int], pair: Pair, value: int) -> None:
    counts[pair] = counts.get(pair, 0) + value


def _domains(nodes: NodeTable, key: str) -> tuple[np.ndarray, dict[str, int], list[str]]:
    """(code per row, value -> code, values by code) for label ``key``; code -1 where the node
    lacks the key. Cached until node labels change."""

    def build():
        vals = nodes.label_values(key)
        codes = np.full(nodes.n, -1, dtype=np.int64)
        for i, names in enumerate(vals.values()):
            codes[[nodes.index[nm] for nm in names]] = i
        return codes, {v: i for i, v in enumerate(vals)}, list(vals)

    return nodes.cached(("InterPodAffinity", "domains", key), build)


def _add_domain_sums(counts: dict[Pair, int], nodes: NodeTable, key: str, per_row: np.ndarray,
                     weight: int = 1) -> None:
    """Add ``weight`` x the per-row counts summed per domain of ``key``, for the domains whose
    sum is positive (as upstream adds per matching pod, creating only those pairs)."""
    codes, _, values = _domains(nodes, key)
    has = codes >= 0
    sums = np.bincount(codes[has], weights=per_row[has], minlength=len(values))
    for i in np.flatnonzero(sums > 0).tolist():
        _add(counts, (key, values[i]), weight * int(sums[i]))


def _by_code(nodes: NodeTable, counts: Mapping[Pair, int], positive_only: bool,
             keys: Iterable[str] | None = None) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """Per topology key (only ``keys``, if given): (code per row, value per code with one
    trailing 0 for the rows lacking the key) from the counts."""
    wanted = None if keys is None else set(keys)
    grouped: dict[str, list[tuple[str, int]]] = {}
    for (key, value), count in counts.items():
        if (count > 0 or not positive_only) and (wanted is None or key in wanted):
            grouped.setdefault(key, []).append((value, count))
    for key, items in grouped.items():
        codes, index, values = _domains(nodes, key)
        per_code = np.zeros(len(values) + 1, dtype=np.int64)
        for value, count in items:
            code = index.get(value)
            if code is not None:
                per_code[code] = count
        yield codes, per_code


def _domain_rows(nodes: NodeTable, counts: Mapping[Pair, int], keys: Iterable[str] | None = None) -> np.ndarray:
    """Mask over all rows: nodes lying in a domain whose count is > 0 (only ``keys``, if given)."""
    mask = np.zeros(nodes.n, dtype=bool)
    for codes, per_code in _by_code(nodes, counts, True, keys):
        mask |= per_code[codes] > 0
    return mask


def _term_counter(terms: tuple[AffinityTerm, ...]) -> Callable[[tuple[PodInfo, ...]], int]:
    """Pods -> how many match every term (AffinityTerm.matches; the incoming pod's resolved
    terms, whose namespaceSelector is gone or empty, need no namespace labels)."""
    if len(terms) == 1 and terms[0].namespace_selector is None:
        namespaces, match = terms[0].namespaces, selector_matcher(terms[0].selector)

        def count(pods: tuple) -> int:
            c = 0
            for p in pods:
                if p.namespace in namespaces and match(p.labels):
                    c += 1
            return c
    else:
        def count(pods: tuple) -> int:
            return sum(1 for p in pods if all(t.matches(p, _NO_LABELS) for t in terms))

    return count


def _placed(p: PodInfo) -> bool:
    """Bound or nominated: only such a pod can count in a domain."""
    return bool(p.node_name or p.nominated_node_name)


class InterPodAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, EnqueueExtensions):
    """Filter: required (anti-)affinity of the pod and required anti-affinity of existing pods.
    Score: preferred terms both ways plus existing pods' required affinity, min-max normalized."""

    NAME = "InterPodAffinity"
    Args = InterPodAffinityArgs
    args: InterPodAffinityArgs  # what Args parsed

    _FILTER_KEY = NAME + "/filter"
    _SCORE_KEY = NAME + "/score"

    def __init__(self, args: InterPodAffinityArgs, handle) -> None:
        super().__init__(args, handle)
        self._counter = PodMatchCounter()

    def _matching(self, nodes: NodeTable, terms: tuple[AffinityTerm, ...]) -> np.ndarray:
        """Per row, the existing pods matching all of ``terms`` (resolved terms of the pod)."""
        return self._counter.counts(nodes, terms, _term_counter(terms))

    # ------------------------------------------------------------------ namespaces
    def _resolve(self, term: AffinityTerm) -> AffinityTerm:
        """mergeAffinityTermNamespacesIfNotEmpty: fold a non-empty namespaceSelector of the incoming
        pod's term into its namespace set; an empty selector stays (it matches every namespace)."""
        sel = term.namespace_selector
        if sel is None or sel.empty:
            return term
        names = {ns for ns, labels in self.handle.all_namespace_labels().items() if sel.matches(labels)}
        return replace(term, namespaces=term.namespaces | names, namespace_selector=None)

    def _namespace_labels(self, pod: PodInfo) -> Mapping[str, str]:
        return self.handle.namespace_labels(pod.namespace) or _NO_LABELS

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        pod, node = self.pod_change_hint, self.node_change_hint
        return [
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD), pod),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.UPDATE_POD_LABEL), pod),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE), pod),
            ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_LABEL)),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD), node),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL), node),
            ClusterEventWithHint(NAMESPACE_LABELS, self.namespace_hint),
        ]

    def _matches(self, term: AffinityTerm, p: PodInfo) -> bool:
        return term.matches(p, self._namespace_labels(p))

    def _matches_all(self, terms: tuple[AffinityTerm, ...], p: PodInfo) -> bool:
        """upstream podMatchesAllAffinityTerms: false for no terms."""
        return bool(terms) and all(self._matches(t, p) for t in terms)

    def pod_change_hint(self, pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
        """upstream isSchedulableAfterPodChange, for an assigned pod added, relabelled or deleted."""
        if (new is not None and not _placed(new)) or (old is not None and not _placed(old)):
            return QueueingHint.SKIP
        affinity, anti = pod.required_affinity, pod.required_anti_affinity
        if old is not None and new is not None:
            if not self._matches_all(affinity, old) and self._matches_all(affinity, new):
                return QueueingHint.QUEUE
            if any(self._matches(t, old) and not self._matches(t, new) for t in anti):
                return QueueingHint.QUEUE
            return QueueingHint.SKIP
        if new is not None:  # added: it can only help affinity
            return QueueingHint.QUEUE if self._matches_all(affinity, new) else QueueingHint.SKIP
        if old is None:
            return QueueingHint.QUEUE
        # deleted: it can only have blocked the pod by anti-affinity, the pod's or its own
        if any(self._matches(t, old) for t in anti):
            return QueueingHint.QUEUE
        if old.required_anti_affinity:
            ns_labels = self._namespace_labels(pod)
            if any(t.matches(pod, ns_labels) for t in old.required_anti_affinity):
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def node_change_hint(self, pod: PodInfo, old: NodeSpec | None, new: NodeSpec | None) -> QueueingHint:
        """upstream isSchedulableAfterNodeChange: affinity needs a term's topology key to appear or
        change; anti-affinity is helped by a key removed or changed, or by any new node. A pod
        without required terms was rejected by existing pods' anti-affinity, whose keys this hint
        does not see: any new or relabelled node may help it."""
        if new is None:
            return QueueingHint.SKIP
        affinity, anti = pod.required_affinity, pod.required_anti_affinity
        if old is None:
            if anti or not affinity or any(t.topology_key in new.labels for t in affinity):
                return QueueingHint.QUEUE
            return QueueingHint.SKIP
        if not affinity and not anti:
            return QueueingHint.QUEUE
        for t in affinity:
            k = t.topology_key
            if k in new.labels and old.labels.get(k) != new.labels[k]:
                return QueueingHint.QUEUE
        for t in anti:
            k = t.topology_key
            if k in old.labels and old.labels[k] != new.labels.get(k):
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def namespace_hint(self, pod: PodInfo, old: object, new: NamespaceChange | None) -> QueueingHint:
        """Ours: a namespace's labels changed. The pod's terms read them through their
        namespaceSelector (Queue when one's verdict on that namespace flips); existing pods' terms
        read the labels of the pod's own namespace (Queue when it is that one)."""
        if new is None:
            return QueueingHint.QUEUE
        if new.name == pod.namespace:
            return QueueingHint.QUEUE
        before, after = new.old_labels or _NO_LABELS, new.new_labels or _NO_LABELS
        for t in pod.required_affinity + pod.required_anti_affinity:
            sel = t.namespace_selector
            if sel is not None and new.name not in t.namespaces and sel.matches(before) != sel.matches(after):
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    # ------------------------------------------------------------------ PreFilter / Filter
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        """Count, per topology pair, the existing pods whose required anti-affinity rejects ``pod``
        and the existing pods matching ``pod``'s required (anti-)affinity terms. Skip when the pod
        has no required terms and no existing pod's required anti-affinity matches it."""
        has_terms = bool(pod.required_affinity or pod.required_anti_affinity)
        if not has_terms and not nodes.required_anti_affinity_terms:  # the table's index: O(1)
            return Status.skip(), None
        existing = self._existing_anti_counts(pod, nodes)
        if not has_terms and not existing:
            return Status.skip(), None
        affinity = tuple(self._resolve(t) for t in pod.required_affinity)
        anti = tuple(self._resolve(t) for t in pod.required_anti_affinity)
        affinity_counts, anti_counts = self._incoming_counts(affinity, anti, nodes)
        self_affine = bool(affinity) and all(t.matches(pod, _NO_LABELS) for t in affinity)
        state.write(self._FILTER_KEY, _FilterState(affinity, anti, existing, affinity_counts, anti_counts,
                                                   self_affine))
        return Status.success(), None

    def _existing_anti_counts(self, pod: PodInfo, nodes: NodeTable) -> dict[Pair, int]:
        """getExistingAntiAffinityCounts: only nodes hosting pods with required anti-affinity."""
        counts: dict[Pair, int] = {}
        anti = nodes.required_anti_affinity_terms
        if anti:
            ns_labels = self._namespace_labels(pod)
            for term, pairs in anti.items():
                if term.matches(pod, ns_labels):
                    if counts:
                        for pair, count in pairs.items():
                            _add(counts, pair, count)
                    else:
                        counts = dict(pairs)
        return counts

    def _incoming_counts(self, affinity: tuple[AffinityTerm, ...], anti: tuple[AffinityTerm, ...],
                         nodes: NodeTable) -> tuple[dict[Pair, int], dict[Pair, int]]:
        """getIncomingAffinityAntiAffinityCounts: an existing pod counts for affinity only if it
        matches ALL affinity terms (+1 per term whose key its node has); for anti-affinity +1 per
        term it matches."""
        affinity_counts: dict[Pair, int] = {}
        anti_counts: dict[Pair, int] = {}
        if affinity:
            matching = self._matching(nodes, affinity)
            for term in affinity:
                _add_domain_sums(affinity_counts, nodes, term.topology_key, matching)
        for term in anti:
            _add_domain_sums(anti_counts, nodes, term.topology_key, self._matching(nodes, (term,)))
        return affinity_counts, anti_counts

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        """Upstream order, first failure wins: the pod's affinity (UnschedulableAndUnresolvable),
        the pod's anti-affinity, existing pods' anti-affinity (both Unschedulable)."""
        s: _FilterState | None = state.read(self._FILTER_KEY)
        if s is None:
            return FilterResult(np.zeros(len(rows), dtype=bool),
                                error=Status.error(f"reading {self._FILTER_KEY!r} from cycle state: not found"))
        n = nodes.n
        affinity_ok = np.ones(n, dtype=bool)
        if s.affinity:
            # Every topology key must be present; then every term's domain must hold a matching pod,
            # unless no pod matched anywhere and the pod matches its own terms (first of its group).
            in_domains = np.ones(n, dtype=bool)
            for term in s.affinity:
                affinity_ok &= nodes.label_mask(term.topology_key)
                in_domains &= _domain_rows(nodes, s.affinity_counts, (term.topology_key,))
            if s.affinity_counts or not s.self_affine:
                affinity_ok &= in_domains
        anti_fail = _domain_rows(nodes, s.anti_affinity_counts, (t.topology_key for t in s.anti_affinity))
        existing_fail = _domain_rows(nodes, s.existing_anti_counts)

        fail_affinity = ~affinity_ok[rows]
        fail_anti = anti_fail[rows] & ~fail_affinity
        fail_existing = existing_fail[rows] & ~fail_affinity & ~fail_anti
        passed = ~(fail_affinity | fail_anti | fail_existing)
        code = np.where(fail_affinity, int(Code.UNSCHEDULABLE_AND_UNRESOLVABLE), int(Code.UNSCHEDULABLE))
        reasons = [(ERR_AFFINITY, fail_affinity), (ERR_ANTI_AFFINITY, fail_anti),
                   (ERR_EXISTING_ANTI_AFFINITY, fail_existing)]
        return FilterResult(passed, code, [(r, m) for r, m in reasons if m.any()])

    # ------------------------------------------------------------------ PreScore / Score
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> Status:
        """Build topologyScore[(key, value)] from every existing pod E on a labelled node N:
        +/-w for each of the pod's preferred (anti-)affinity terms E matches; +hardPodAffinityWeight
        for each of E's required affinity terms the pod matches; +/-w for each of E's preferred
        (anti-)affinity terms the pod matches. The pod's terms are counted per node
        (PodMatchCounter), existing pods' terms come from the table's term index. Skip when
        nothing accumulates."""
        if len(rows) == 0:
            return Status.skip()
        has_preferred = bool(pod.preferred_affinity or pod.preferred_anti_affinity)
        if not has_preferred and (self.args.ignore_preferred_terms_of_existing_pods
                                  or not (nodes.required_affinity_terms or nodes.preferred_affinity_terms
                                          or nodes.preferred_anti_affinity_terms)):
            return Status.skip()  # no existing pod has a term that scores (their required anti-affinity does not)
        # the pod's preferred terms, anti-affinity ones with negated weights
        preferred = ([(wt.weight, self._resolve(wt.term)) for wt in pod.preferred_affinity]
                     + [(-wt.weight, self._resolve(wt.term)) for wt in pod.preferred_anti_affinity])
        ns_labels = self._namespace_labels(pod)
        topology_score: dict[Pair, int] = {}
        for weight, term in preferred:
            _add_domain_sums(topology_score, nodes, term.topology_key, self._matching(nodes, (term,)), weight)
        hard_weight = self.args.hard_pod_affinity_weight
        existing = [(wt.weight, wt.term, pairs) for wt, pairs in nodes.preferred_affinity_terms.items()]
        existing += [(-wt.weight, wt.term, pairs) for wt, pairs in nodes.preferred_anti_affinity_terms.items()]
        if hard_weight > 0:
            existing += [(hard_weight, term, pairs) for term, pairs in nodes.required_affinity_terms.items()]
        for weight, term, pairs in existing:
            if term.matches(pod, ns_labels):
                for pair, count in pairs.items():
                    _add(topology_score, pair, weight * count)
        if not topology_score:
            return Status.skip()
        state.write(self._SCORE_KEY, topology_score)
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Raw score: the sum of topologyScore over the node's (key, value) labels; may be negative."""
        topology_score: dict[Pair, int] = state.read(self._SCORE_KEY)
        totals = np.zeros(nodes.n, dtype=np.int64)
        for codes, per_code in _by_code(nodes, topology_score, False):
            totals += per_code[codes]
        return totals[rows]

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray,
                        scores: np.ndarray) -> np.ndarray:
        """Min-max over the scored nodes (min from +inf, max from -inf):
        int64(100 * (float(s - min) / float(max - min))), all 0 when max == min."""
        scores = np.asarray(scores, dtype=np.int64)
        if scores.size == 0:
            return scores
        low = int(scores.min())
        spread = int(scores.max()) - low
        if spread <= 0:
            return np.zeros_like(scores)
        return (float(MAX_NODE_SCORE) * ((scores - low).astype(np.float64) / float(spread))).astype(np.int64)


PLUGIN = InterPodAffinity
