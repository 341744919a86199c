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
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import compress
from types import MappingProxyType
from typing import Iterable, Iterator, Mapping

import numpy as np
from pydantic import Field, field_validator

from ..framework.interface import (
    MAX_NODE_SCORE,
    CycleState,
    FilterPlugin,
    FilterResult,
    PluginArgs,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
)
from ..framework.nodetable import NodeTable
from ..framework.podinfo import AffinityTerm, PodInfo
from ..framework.status import Code, Status

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
            raise ValueError(f"hardPodAffinityWeight: Invalid value: {v}: not in valid range [0, 100]")
        return v


@dataclass(slots=True)
class _FilterState:
    affinity: tuple[AffinityTerm, ...]  # incoming pod's required terms, namespaces resolved
    anti_affinity: tuple[AffinityTerm, ...]
    existing_anti_counts: dict[Pair, int]  # existing pods' required anti-affinity terms matching the pod
    affinity_counts: dict[Pair, int]  # existing pods matching ALL of the pod's affinity terms
    anti_affinity_counts: dict[Pair, int]  # existing pods matching each of the pod's anti-affinity terms
    self_affine: bool  # the pod matches all of its own affinity terms


@dataclass(slots=True)
class _ExistingTerms:
    """The terms of the pods already on nodes, grouped by term value: term -> {topology pair:
    total}. Whether a term matches the incoming pod depends only on the term, so each distinct
    term is matched once per cycle and its totals added at once, which sums exactly what upstream
    adds pod by pod."""

    anti: dict[AffinityTerm, dict[Pair, int]]  # required anti-affinity terms, +1 per pod
    scoring: dict[AffinityTerm, dict[Pair, int]]  # the terms of _existing_scoring_terms, signed weights


def _add(counts: dict[Pair, int], pair: Pair, value: int) -> None:
    counts[pair] = counts.get(pair, 0) + value


def _domain_rows(nodes: NodeTable, counts: Mapping[Pair, int], keys: Iterable[str] | None = None) -> np.ndarray:
    """Mask over all rows: nodes lying in a domain whose count is > 0 (only ``keys``, if given)."""
    mask = np.zeros(nodes.n, dtype=bool)
    wanted = None if keys is None else set(keys)
    rows: list[int] = []
    for (key, value), count in counts.items():
        if count > 0 and (wanted is None or key in wanted):
            rows.extend(nodes.index[name] for name in nodes.label_values(key).get(value, ()))
    if rows:
        mask[rows] = True
    return mask


def _existing_scoring_terms(existing: PodInfo, hard_weight: int) -> Iterator[tuple[int, AffinityTerm]]:
    """(weight, term) for an existing pod's terms that score: its required affinity terms at
    hardPodAffinityWeight (none when 0), its preferred affinity (+w) and anti-affinity (-w) terms.
    Its required anti-affinity only filters."""
    if hard_weight > 0:
        for term in existing.required_affinity:
            yield hard_weight, term
    for wt in existing.preferred_affinity:
        yield wt.weight, wt.term
    for wt in existing.preferred_anti_affinity:
        yield -wt.weight, wt.term


class InterPodAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    """Filter: required (anti-)affinity of the pod and required anti-affinity of existing pods.
    Score: preferred terms both ways plus existing pods' required affinity, min-max normalized."""

    NAME = "InterPodAffinity"
    Args = InterPodAffinityArgs

    _FILTER_KEY = NAME + "/filter"
    _SCORE_KEY = NAME + "/score"

    def __init__(self, args: InterPodAffinityArgs, handle) -> None:
        super().__init__(args, handle)
        self._terms: tuple[NodeTable, tuple[int, int], _ExistingTerms] | None = None

    def _existing_terms(self, nodes: NodeTable) -> _ExistingTerms:
        """The existing pods' terms, rebuilt only when a pod with (anti)affinity came or went or
        node labels changed."""
        version = (nodes.node_version, nodes.affinity_version)
        if self._terms is not None and self._terms[0] is nodes and self._terms[1] == version:
            return self._terms[2]
        anti: dict[AffinityTerm, dict[Pair, int]] = {}
        scoring: dict[AffinityTerm, dict[Pair, int]] = {}
        hard_weight = self.args.hard_pod_affinity_weight
        for row in compress(range(nodes.n), nodes.affinity_pods):
            labels = nodes.specs[row].labels
            for existing in nodes.pods_with_affinity[row].values():
                for term in existing.required_anti_affinity:
                    value = labels.get(term.topology_key)
                    if value is not None:
                        _add(anti.setdefault(term, {}), (term.topology_key, value), 1)
                for weight, term in _existing_scoring_terms(existing, hard_weight):
                    value = labels.get(term.topology_key)
                    if value is not None:
                        _add(scoring.setdefault(term, {}), (term.topology_key, value), weight)
        terms = _ExistingTerms(anti, scoring)
        self._terms = (nodes, version, terms)
        return terms

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

    # ------------------------------------------------------------------ PreFilter / Filter
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        """Count, per topology pair, the existing pods whose required anti-affinity rejects ``pod``
        and the existing pods matching ``pod``'s required (anti-)affinity terms. Skip when the pod
        has no required terms and no existing pod's required anti-affinity matches it."""
        has_terms = bool(pod.required_affinity or pod.required_anti_affinity)
        if not has_terms and not any(nodes.anti_affinity_pods):
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
        anti = self._existing_terms(nodes).anti
        if anti:
            ns_labels = self._namespace_labels(pod)
            for term, pairs in anti.items():
                if term.matches(pod, ns_labels):
                    for pair, count in pairs.items():
                        _add(counts, pair, count)
        return counts

    @staticmethod
    def _incoming_counts(affinity: tuple[AffinityTerm, ...], anti: tuple[AffinityTerm, ...],
                         nodes: NodeTable) -> tuple[dict[Pair, int], dict[Pair, int]]:
        """getIncomingAffinityAntiAffinityCounts: an existing pod counts for affinity only if it
        matches ALL affinity terms (+1 per term whose key its node has); for anti-affinity +1 per
        term it matches."""
        affinity_counts: dict[Pair, int] = {}
        anti_counts: dict[Pair, int] = {}
        if not affinity and not anti:
            return affinity_counts, anti_counts
        for row in range(nodes.n):
            pods = nodes.pods[row]
            if not pods:
                continue
            labels = nodes.specs[row].labels
            aff_pairs = [(t.topology_key, labels[t.topology_key]) for t in affinity if t.topology_key in labels]
            anti_pairs = [(t, (t.topology_key, labels[t.topology_key])) for t in anti if t.topology_key in labels]
            if not aff_pairs and not anti_pairs:
                continue
            for existing in pods.values():
                if aff_pairs:
                    for t in affinity:
                        if not t.matches(existing, _NO_LABELS):
                            break
                    else:
                        for pair in aff_pairs:
                            _add(affinity_counts, pair, 1)
                for term, pair in anti_pairs:
                    if term.matches(existing, _NO_LABELS):
                        _add(anti_counts, pair, 1)
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
        (anti-)affinity terms the pod matches. All pods are scanned when the pod has preferred
        terms; existing pods' terms come grouped by value (_existing_terms). Skip when nothing
        accumulates."""
        if len(rows) == 0:
            return Status.skip()
        has_preferred = bool(pod.preferred_affinity or pod.preferred_anti_affinity)
        if not has_preferred and (self.args.ignore_preferred_terms_of_existing_pods
                                  or not any(nodes.affinity_pods)):
            return Status.skip()
        # the pod's preferred terms, anti-affinity ones with negated weights
        preferred = ([(wt.weight, self._resolve(wt.term)) for wt in pod.preferred_affinity]
                     + [(-wt.weight, self._resolve(wt.term)) for wt in pod.preferred_anti_affinity])
        ns_labels = self._namespace_labels(pod)
        topology_score: dict[Pair, int] = {}
        if has_preferred:
            for row in range(nodes.n):
                labels = nodes.specs[row].labels
                incoming = [(w, t, labels[t.topology_key]) for w, t in preferred if t.topology_key in labels]
                if not incoming:
                    continue
                for existing in nodes.pods[row].values():
                    for weight, term, value in incoming:
                        if term.matches(existing, _NO_LABELS):
                            _add(topology_score, (term.topology_key, value), weight)
        for term, pairs in self._existing_terms(nodes).scoring.items():
            if term.matches(pod, ns_labels):
                for pair, weight in pairs.items():
                    _add(topology_score, pair, weight)
        if not topology_score:
            return Status.skip()
        state.write(self._SCORE_KEY, topology_score)
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        """Raw score: the sum of topologyScore over the node's (key, value) labels; may be negative."""
        topology_score: dict[Pair, int] = state.read(self._SCORE_KEY)
        totals = np.zeros(nodes.n, dtype=np.int64)
        for (key, value), weight in topology_score.items():
            members = [nodes.index[name] for name in nodes.label_values(key).get(value, ())]
            if members:
                totals[members] += weight
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
