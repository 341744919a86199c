"""The engine's entry point to metric sources (the data usage-aware plugins read).

The engine calls these hooks; plugins never see this object, only the read-only views that
``view`` returns through ``Handle.source`` (prepared outside the scheduling cycle).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence


class MetricSources:
    """Keeps one metric source per policy that needs one. This base does nothing."""

    _node_names: Callable[[], Sequence[str]] | None = None
    _requeue: Callable[[str, Callable[[Any], bool]], None] | None = None

    def attach(self, node_names: Callable[[], Sequence[str]],
               requeue: Callable[[str, Callable[[Any], bool]], None]) -> None:
        """The engine's node names (for freshness counts), and a way to move waiting pods back to
        the active queue: ``requeue(event label, pre_check on QueuedPodInfo)``."""
        self._node_names = node_names
        self._requeue = requeue

    def policy_updated(self, name: str, spec: Any) -> list[str]:
        """A policy was created or changed; returns problems to report on its status (empty: fine)."""
        return []

    def policy_deleted(self, name: str) -> None:
        pass

    def view(self, name: str) -> Any:
        return None

    def status(self, name: str) -> dict[str, Any] | None:
        """Freshness figures for the policy's status, or None."""
        return None

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass
