"""NodePorts (upstream plugins/nodeports/node_ports.go, ports from scheduler util.GetHostPorts,
conflicts from HostPortInfo.CheckConflict).

The pod's wanted host ports are those with ``hostPort > 0`` of its restartable init containers
(sidecars, ``restartPolicy: Always``, which run for the pod's whole life) and of its regular
containers; an empty hostIP means 0.0.0.0 and an empty protocol TCP. PreFilter Skips a pod
without host ports.

Filter: a node fails (Unschedulable: preemption can free ports) when a wanted
(hostIP, protocol, port) conflicts with a port in use there: a wanted 0.0.0.0 conflicts with the
same protocol and port on any IP; another IP conflicts with the same IP or with 0.0.0.0.

Events: an assigned pod deleted, queueing only when it was bound or nominated and held a host
port that clashes with one the pod wants (ports are immutable, so pod updates never help); a
node added (no hint).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ..framework.interface import CycleState, EnqueueExtensions, FilterPlugin, FilterResult, PreFilterPlugin
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.status import Code, Status

NAME = "NodePorts"
ERR_REASON = "node(s) didn't have free ports for the requested pod ports"
BIND_ALL = "0.0.0.0"
_PREFILTER_KEY = "PreFilter" + NAME

Port = tuple[str, str, int]  # (hostIP, protocol, hostPort), as NodeTable.used_ports keys


def _container_ports(containers: Iterable[Mapping[str, Any]]) -> list[Port]:
    out = []
    for c in containers:
        for p in c.get("ports") or []:
            try:
                host_port = int(p.get("hostPort") or 0)
            except (TypeError, ValueError):
                continue
            if host_port > 0:
                out.append((str(p.get("hostIP") or BIND_ALL), str(p.get("protocol") or "TCP"), host_port))
    return out


def wanted_ports(pod: PodInfo) -> tuple[Port, ...]:
    """util.GetHostPorts: sidecar init containers first, then regular containers.

    ``PodInfo.host_ports`` covers regular containers only, so the spec is read from ``pod.raw``.
    """
    if pod.raw is None:
        return pod.host_ports
    spec = pod.raw.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return tuple(_container_ports(sidecars) + _container_ports(spec.get("containers") or []))


def conflicts(want: Iterable[Port], used: Mapping[Port, int]) -> bool:
    """HostPortInfo.CheckConflict for each wanted port against the node's used ports."""
    for ip, proto, port in want:
        if ip == BIND_ALL:
            if any(p == port and pr == proto for _, pr, p in used):
                return True
        elif (ip, proto, port) in used or (BIND_ALL, proto, port) in used:
            return True
    return False


def pod_deleted_hint(pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
    """upstream isSchedulableAfterPodDeleted: Queue when the deleted pod was bound or nominated
    and one of its host ports conflicts with the pod's wanted ports."""
    if old is None:
        return QueueingHint.QUEUE
    if not old.node_name and not old.nominated_node_name:
        return QueueingHint.SKIP
    freed = wanted_ports(old)
    if not freed:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE if conflicts(wanted_ports(pod), dict.fromkeys(freed, 1)) else QueueingHint.SKIP


class NodePorts(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME = NAME
    Args = None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE), pod_deleted_hint),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD)),
        ]

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        want = wanted_ports(pod)
        if not want:
            return Status.skip(), None
        state.write(_PREFILTER_KEY, want)
        return Status.success(), None

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        want = state.read(_PREFILTER_KEY)
        if want is None:  # PreFilter did not run for this cycle
            want = wanted_ports(pod)
        passed = np.ones(len(rows), dtype=bool)
        used_ports = nodes.used_ports
        for i, row in enumerate(rows.tolist()):
            used = used_ports[row]
            if used and conflicts(want, used):
                passed[i] = False
        return FilterResult.from_mask(passed, ERR_REASON, Code.UNSCHEDULABLE)


PLUGIN = NodePorts
