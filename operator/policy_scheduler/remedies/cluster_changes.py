"""Candidate changes to the cluster, each simulated on an overlay of the node table (probe.py
``overlay``), never on the live one:

- ``UncordonNode``: a cordoned node (spec.unschedulable) that nothing else but its cordon (the
  NodeUnschedulable plugin, and TaintToleration for the ``node.kubernetes.io/unschedulable``
  taint the node controller adds) rejects.
- ``EvictLowerPriority``: DefaultPreemption's own choice (framework/preemption.py ``preempt``,
  its dry run on an overlay) of a node and the pods of lower priority to evict there, offered
  only when preemption does not already run for the pod: its policy has no DefaultPreemption, or
  the pod says ``preemptionPolicy: Never``. The pods named are deleted in the overlay and the
  pod's cycle run again.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ..framework.cycle.chain import Chain
from ..framework.cycle.schedule import NodeFilter
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.preemption import PDB, PREEMPT_NEVER, preempt
from ..framework.queue.nominator import Nominator
from ..plugins.default_preemption import NAME as PREEMPTION
from ..plugins.node_unschedulable import NAME as UNSCHEDULABLE, UNSCHEDULABLE_TAINT
from ..plugins.taint_toleration import NAME as TAINTS
from .pod_changes import Caps
from .probe import Verdicts, overlay
from .result import PREEMPT, UNCORDON


@dataclass
class ClusterCandidate:
    kind: str
    change: str
    ops: list[dict[str, Any]]  # operations naming their object (patch.py)
    size: float
    build: Callable[[], NodeTable]  # the overlay with the change made
    # a change outside the node table (a DeviceClass): the chain whose plugins read it (dra_changes.py)
    chain: Callable[[], Chain] | None = None


def _uncordoned(table: NodeTable, row: int) -> NodeTable:
    t = overlay(table, nodes_changed=True)
    spec = table.specs[row]
    t.specs[row] = replace(spec, unschedulable=False, taints=tuple(x for x in spec.taints if x != UNSCHEDULABLE_TAINT))
    t.unschedulable[row] = False
    return t


def uncordon(pod: PodInfo, table: NodeTable, v: Verdicts, caps: Caps) -> list[ClusterCandidate]:
    rows = np.flatnonzero(v.rejected.get(UNSCHEDULABLE, np.zeros(v.n, dtype=bool))
                          & ~v.rejected_by_others({UNSCHEDULABLE, TAINTS}))
    out = []
    for row in rows[: caps.per_kind].tolist():
        spec = table.specs[row]
        ops: list[dict[str, Any]] = [{"op": "replace", "kind": "Node", "name": spec.name, "path": "/spec/unschedulable",
                                      "value": False}]
        ops += [{"op": "remove", "kind": "Node", "name": spec.name, "path": f"/spec/taints/{i}"}
                for i, t in reversed(list(enumerate(spec.taints))) if t == UNSCHEDULABLE_TAINT]
        out.append(ClusterCandidate(UNCORDON, f"uncordon node {spec.name}", ops, 1.0,
                                    functools.partial(_uncordoned, table, row)))
    return out


def _without(table: NodeTable, victims: list[PodInfo]) -> NodeTable:
    t = overlay(table)
    for p in victims:
        t.remove_pod(p.key)
    return t


def evict_lower_priority(pod: PodInfo, table: NodeTable, v: Verdicts, chain: Chain, nominator: Nominator | None,
                         pdbs: list[PDB], caps: Caps) -> list[ClusterCandidate]:
    """DefaultPreemption's answer for the pod, when preemption does not run for it already."""
    plugin = next((p for p in chain.post_filter if p.NAME == PREEMPTION), None)
    if plugin is not None and pod.preemption_policy != PREEMPT_NEVER:
        return []  # its own PostFilter preempts (or found nothing to preempt)
    if pod.nominated_node_name:
        return []
    args = getattr(plugin, "args", None)
    pct = getattr(args, "min_candidate_nodes_percentage", 10)
    absolute = getattr(args, "min_candidate_nodes_absolute", 100)
    who = replace(pod, preemption_policy="PreemptLowerPriority")
    dry = overlay(table)
    result = preempt(who, dry, v.node_to_status(table.names), pdbs, NodeFilter(chain, nominator), pct, absolute,
                     _First())
    if not result.nominated_node or not result.victims:
        return []
    victims = list(result.victims)
    names = ", ".join(p.key for p in victims[: caps.items]) + (", ..." if len(victims) > caps.items else "")
    ops = [{"op": "delete", "kind": "Pod", "namespace": p.namespace, "name": p.name} for p in victims]
    why = "its policy has no DefaultPreemption" if plugin is None else "it has preemptionPolicy: Never"
    change = (f"evict {len(victims)} pod{'s' if len(victims) > 1 else ''} of lower priority from node "
              f"{result.nominated_node} ({names}); the scheduler does not preempt for this pod: {why}")
    return [ClusterCandidate(PREEMPT, change, ops, float(len(victims)),
                             functools.partial(_without, table, victims))]


class _First:
    """The dry run's random offset: the first candidate node (a stable answer)."""

    def randrange(self, n: int) -> int:
        return 0
