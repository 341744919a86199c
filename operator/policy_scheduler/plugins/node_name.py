"""NodeName (upstream plugins/nodename/node_name.go).

Filter: a pod whose ``spec.nodeName`` is set fits only the node of that name; a pod without one
fits every node. Failing nodes are UnschedulableAndUnresolvable.

Events: a node added (no hint, as upstream): only a new node can be the named one.
"""

from __future__ import annotations

import numpy as np

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, Resource
from ..framework.interface import CycleState, EnqueueExtensions, FilterPlugin, FilterResult
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.status import Code

NAME = "NodeName"
ERR_REASON = "node(s) didn't match the requested node name"


class NodeName(FilterPlugin, EnqueueExtensions):
    NAME = NAME
    Args = None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD))]

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        if not pod.node_name:
            return FilterResult.all_pass(len(rows))
        passed = rows == nodes.index.get(pod.node_name, -1)
        return FilterResult.from_mask(passed, ERR_REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


PLUGIN = NodeName
