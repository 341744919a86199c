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
        self._on: dict[str, dict[str, PodInfo]] = {}  # node -> pod key -> the pod nominated there

    def add(self, pod: PodInfo, node: str) -> None:
        key = pod.key
        was = self._node_of.get(key)
        if was is not None and was != node:
            self._drop(key, was)
        self._node_of[key] = node
        self._pods[key] = pod
        self._on.setdefault(node, {})[key] = pod

    def remove(self, key: str) -> bool:
        self._pods.pop(key, None)
        node = self._node_of.pop(key, None)
        if node is None:
            return False
        self._drop(key, node)
        return True

    def _drop(self, key: str, node: str) -> None:
        on = self._on.get(node)
        if on is not None:
            on.pop(key, None)
            if not on:
                del self._on[node]

    def node_of(self, key: str) -> str | None:
        return self._node_of.get(key)

    def __len__(self) -> int:
        return len(self._node_of)

    def __bool__(self) -> bool:
        return bool(self._node_of)

    def pods_for(self, pod: PodInfo, node: str | None = None) -> list[tuple[PodInfo, str]]:
        """The nominated pods that count while ``pod`` is scheduled: every other one whose
        priority is at least ``pod``'s, with its node (``node``: those nominated to it alone)."""
        key, prio = pod.key, pod.priority
        if node is not None:
            return [(p, node) for k, p in self._on.get(node, {}).items() if k != key and p.priority >= prio]
        node_of = self._node_of
        return [(p, node_of[k]) for k, p in self._pods.items() if k != key and p.priority >= prio]

    def nominated_pods(self, node: str) -> list[PodInfo]:
        return list(self._on.get(node, {}).values())
