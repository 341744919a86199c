"""The nominator: pods a PostFilter nominated to a node (status.nominatedNodeName) but that are
not bound yet. upstream's nominator (backend/queue/nominator.go): while a pod is scheduled, the
nominated pods of equal or higher priority count on their node, so the room a preemption made
for one pod is not taken by a pod of lower priority.
"""

from __future__ import annotations

from ..model.podinfo import PodInfo


class Nominator:
    def __init__(self) -> None:
        self._node_of: dict[str, str] = {}  # pod key -> nominated node
        self._pods: dict[str, PodInfo] = {}  # pod key -> the pod

    def add(self, pod: PodInfo, node: str) -> None:
        self._node_of[pod.key] = node
        self._pods[pod.key] = pod

    def remove(self, key: str) -> bool:
        self._pods.pop(key, None)
        return self._node_of.pop(key, None) is not None

    def node_of(self, key: str) -> str | None:
        return self._node_of.get(key)

    def __len__(self) -> int:
        return len(self._node_of)

    def __bool__(self) -> bool:
        return bool(self._node_of)

    def pods_for(self, pod: PodInfo) -> list[tuple[PodInfo, str]]:
        """The nominated pods that count while ``pod`` is scheduled: every other one whose
        priority is at least ``pod``'s, with its node."""
        return [(p, self._node_of[k]) for k, p in self._pods.items()
                if k != pod.key and p.priority >= pod.priority]

    def nominated_pods(self, node: str) -> list[PodInfo]:
        return [self._pods[k] for k, n in self._node_of.items() if n == node]
