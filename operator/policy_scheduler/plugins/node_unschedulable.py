"""NodeUnschedulable (upstream plugins/nodeunschedulable/node_unschedulable.go).

Filter: a cordoned node (``spec.unschedulable: true``) fits only pods that tolerate the taint
``node.kubernetes.io/unschedulable:NoSchedule`` (empty value); others get
UnschedulableAndUnresolvable ``node(s) were unschedulable``.

Events: a node added schedulable, or uncordoned (UpdateNodeTaint covers unschedulable going
true -> false); the pod's own tolerations changing so that it tolerates the unschedulable taint.
"""

from __future__ import annotations

import numpy as np

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ..framework.interface import CycleState, EnqueueExtensions, FilterPlugin, FilterResult
from ..framework.model.nodetable import NodeSpec
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.status import Code
from ..framework.model.taints import NO_SCHEDULE, Taint, tolerated

NAME = "NodeUnschedulable"
ERR_REASON = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", NO_SCHEDULE)


def node_change_hint(pod: PodInfo, old: NodeSpec | None, new: NodeSpec | None) -> QueueingHint:
    """upstream isSchedulableAfterNodeChange: Queue when the node was added schedulable, or went
    from unschedulable to schedulable; any other node change cannot lift this plugin's rejection."""
    if new is None:
        return QueueingHint.SKIP
    if (old is None or old.unschedulable) and not new.unschedulable:
        return QueueingHint.QUEUE
    return QueueingHint.SKIP


def pod_toleration_hint(pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
    """upstream isSchedulableAfterPodTolerationChange: Queue when the pod itself now tolerates the
    unschedulable taint (tolerations can only be added, so it did not before)."""
    if new is None or new.uid != pod.uid:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE if tolerated(UNSCHEDULABLE_TAINT, new.tolerations) else QueueingHint.SKIP


class NodeUnschedulable(FilterPlugin, EnqueueExtensions):
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
        if tolerated(UNSCHEDULABLE_TAINT, pod.tolerations):
            return FilterResult.all_pass(len(rows))
        passed = ~nodes.unschedulable[rows]
        return FilterResult.from_mask(passed, ERR_REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


PLUGIN = NodeUnschedulable
