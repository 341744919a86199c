"""The pods a Permit plugin parked: ``WaitingPod``, ``WaitingPods`` (upstream's waitingPod and
waitingPodsMap, framework/runtime/waiting_pods_map.go), and ``go_duration`` for their messages.

A leaf of the framework: it imports only ``status``, so that both the contract
(``interface.Handle.waiting_pods``) and the binding cycle (cycle/binding_cycle.py, which parks and
awaits the pods) can use it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

from .status import Code, Status


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it (1s, 500ms, 1m30s), for upstream's messages."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms" if ms >= 1 else f"{seconds * 1e6:g}µs"
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    out = (f"{int(h)}h" if h else "") + (f"{int(m)}m" if h or m else "")
    return out + f"{round(s, 9):g}s"


class WaitingPod:
    """upstream waitingPod: a pod parked by Permit until every waiting plugin allows it, one
    rejects it, or a plugin's timeout passes (then it is rejected in that plugin's name).
    ``pod``: the pod's PodInfo (only its ``uid`` is read here)."""

    def __init__(self, pod: Any, node: str, timeouts: dict[str, float]) -> None:
        self.pod = pod
        self.node = node
        loop = asyncio.get_running_loop()
        self._future: asyncio.Future[Status] = loop.create_future()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        for plugin, timeout in timeouts.items():
            msg = f"rejected due to timeout after waiting {go_duration(timeout)} at plugin {plugin}"
            self._timers[plugin] = loop.call_later(timeout, self.reject, plugin, msg)

    @property
    def uid(self) -> str:
        return self.pod.uid

    def pending_plugins(self) -> list[str]:
        return list(self._timers)

    def allow(self, plugin: str) -> None:
        """This plugin lets the pod go; the pod is allowed when no plugin is waiting any more."""
        timer = self._timers.pop(plugin, None)
        if timer is not None:
            timer.cancel()
        if not self._timers and not self._future.done():
            self._future.set_result(Status.success())

    def reject(self, plugin: str, message: str) -> None:
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        if not self._future.done():
            self._future.set_result(Status(Code.UNSCHEDULABLE, (message,), plugin))

    @property
    def decided(self) -> bool:
        """Allowed or rejected already: ``wait`` returns at once."""
        return self._future.done()

    async def wait(self) -> Status:
        return await self._future


class WaitingPods:
    """The waiting pods of the scheduler, by pod UID (upstream waitingPodsMap)."""

    def __init__(self) -> None:
        self._pods: dict[str, WaitingPod] = {}

    def add(self, wp: WaitingPod) -> None:
        self._pods[wp.uid] = wp

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def get(self, uid: str) -> WaitingPod | None:
        return self._pods.get(uid)

    def __iter__(self) -> Iterator[WaitingPod]:
        return iter(list(self._pods.values()))

    def __len__(self) -> int:
        return len(self._pods)

    def reject(self, uid: str, plugin: str, message: str) -> bool:
        wp = self._pods.get(uid)
        if wp is None:
            return False
        wp.reject(plugin, message)
        return True
