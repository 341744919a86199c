"""TaintToleration (upstream plugins/tainttoleration/taint_toleration.go).

Filter: a node fails when one of its NoSchedule/NoExecute taints, walked in node order, is not
tolerated by any of the pod's tolerations; the status is UnschedulableAndUnresolvable (preemption
cannot remove a taint). The reason text is the one of current releases, which no longer names
the taint (kubernetes PR 134740, in v1.34.2+ and v1.35+); older releases printed
``node(s) had untolerated taint {key: value}``.

Score: the number of the node's PreferNoSchedule taints that the pod's tolerations with effect
PreferNoSchedule or empty do not tolerate; NormalizeScore is DefaultNormalizeScore reversed, so
the nodes with the most intolerable soft taints get 0 and, when no node has any, all get 100.

Nodes are grouped by their (relevant) taint list, which is cached on the table until a node's
taints change; a verdict per group is computed once per distinct toleration set.

Events: a node added or its taints changed, queueing only when the node (or no node, on Add) had
an untolerated NoSchedule/NoExecute taint and now has none; the pod's own tolerations changed.
"""

from __future__ import annotations

import numpy as np

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ..framework.interface import (CycleState, EnqueueExtensions, FilterPlugin, FilterResult, PreScorePlugin,
                                   ScorePlugin, default_normalize_score)
from ..framework.model.nodetable import NodeSpec, NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.status import Code, Status
from ..framework.model.taints import (NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE, Taint, Toleration, first_untolerated,
                                      tolerated)

NAME = "TaintToleration"
ERR_REASON_UNTOLERATED = "node(s) had untolerated taint(s)"
_PRESCORE_KEY = "PreScore" + NAME
_FILTER_EFFECTS = (NO_SCHEDULE, NO_EXECUTE)
_SCORE_EFFECTS = (PREFER_NO_SCHEDULE,)


def prefer_tolerations(pod: PodInfo) -> tuple[Toleration, ...]:
    """The pod's tolerations that can tolerate a PreferNoSchedule taint (an empty effect matches
    every effect)."""
    return tuple(t for t in pod.tolerations if t.effect in ("", PREFER_NO_SCHEDULE))


def taint_groups(nodes: NodeTable, effects: tuple[str, ...]) -> list[tuple[tuple[Taint, ...], np.ndarray]]:
    """Rows grouped by their taints with one of ``effects`` (node order kept); rows without any
    such taint are left out. Cached until the node set or any node's taints change."""

    def build() -> list[tuple[tuple[Taint, ...], np.ndarray]]:
        groups: dict[tuple[Taint, ...], list[int]] = {}
        for row in range(nodes.n):
            taints = tuple(t for t in nodes.specs[row].taints if t.effect in effects)
            if taints:
                groups.setdefault(taints, []).append(row)
        return [(taints, np.asarray(rows, dtype=np.intp)) for taints, rows in groups.items()]

    return nodes.cached((NAME, "groups", effects), build)


def untolerated_mask(nodes: NodeTable, tolerations: tuple[Toleration, ...]) -> np.ndarray:
    """Mask over all rows: True where a NoSchedule/NoExecute taint is not tolerated."""

    def build():
        bad = np.zeros(nodes.n, dtype=bool)
        for taints, rows in taint_groups(nodes, _FILTER_EFFECTS):
            if first_untolerated(taints, tolerations) is not None:
                bad[rows] = True
        return bad

    return nodes.cached((NAME, "untolerated", tolerations), build)


def intolerable_prefer_counts(nodes: NodeTable, tolerations: tuple[Toleration, ...]) -> np.ndarray:
    """Per row, the number of PreferNoSchedule taints none of ``tolerations`` tolerates."""

    def build():
        counts = np.zeros(nodes.n, dtype=np.int64)
        for taints, rows in taint_groups(nodes, _SCORE_EFFECTS):
            counts[rows] = sum(1 for t in taints if not tolerated(t, tolerations))
        return counts

    return nodes.cached((NAME, "prefer", tolerations), build)


def node_change_hint(pod: PodInfo, old: NodeSpec | None, new: NodeSpec | None) -> QueueingHint:
    """upstream isSchedulableAfterNodeChange: Queue only when the node went from having an
    untolerated NoSchedule/NoExecute taint (a new node counts as having had one) to having none."""
    if new is None:
        return QueueingHint.SKIP
    was = old is None or first_untolerated(old.taints, pod.tolerations, _FILTER_EFFECTS) is not None
    now = first_untolerated(new.taints, pod.tolerations, _FILTER_EFFECTS) is not None
    return QueueingHint.QUEUE if was and not now else QueueingHint.SKIP


def pod_toleration_hint(pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
    """upstream isSchedulableAfterPodTolerationChange: the pod itself got a toleration."""
    return QueueingHint.QUEUE if new is not None and new.uid == pod.uid else QueueingHint.SKIP


class TaintToleration(FilterPlugin, PreScorePlugin, ScorePlugin, EnqueueExtensions):
    NAME = NAME
    Args = None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD), node_change_hint),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_TAINT), node_change_hint),
            ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_TOLERATION),
                                 pod_toleration_hint),
        ]

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        passed = ~untolerated_mask(nodes, pod.tolerations)[rows]
        return FilterResult.from_mask(passed, ERR_REASON_UNTOLERATED, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> Status:
        state.write(_PRESCORE_KEY, prefer_tolerations(pod))
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        prefer = state.read(_PRESCORE_KEY)
        if prefer is None:  # PreScore did not run for this cycle
            prefer = prefer_tolerations(pod)
        return intolerable_prefer_counts(nodes, prefer)[rows]

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray,
                        scores: np.ndarray) -> np.ndarray:
        return default_normalize_score(scores, reverse=True)


PLUGIN = TaintToleration
