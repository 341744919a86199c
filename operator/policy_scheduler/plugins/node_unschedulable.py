"""NodeUnschedulable (upstream plugins/nodeunschedulable/node_unschedulable.go).

Filter: a cordoned node (``spec.unschedulable: true``) fits only pods that tolerate the taint
``node.kubernetes.io/unschedulable:NoSchedule`` (empty value); others get
UnschedulableAndUnresolvable ``node(s) were unschedulable``.
"""

from __future__ import annotations

import numpy as np

from ..framework.interface import CycleState, FilterPlugin, FilterResult
from ..framework.nodetable import NodeTable
from ..framework.podinfo import PodInfo
from ..framework.status import Code
from ..framework.taints import NO_SCHEDULE, Taint, tolerated

NAME = "NodeUnschedulable"
ERR_REASON = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", NO_SCHEDULE)


class NodeUnschedulable(FilterPlugin):
    NAME = NAME
    Args = None

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        if tolerated(UNSCHEDULABLE_TAINT, pod.tolerations):
            return FilterResult.all_pass(len(rows))
        passed = ~nodes.unschedulable[rows]
        return FilterResult.from_mask(passed, ERR_REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


PLUGIN = NodeUnschedulable
