"""An out-of-tree plugin for the e2e tests only (loaded with ``run --plugin-module probe_plugin``):
it takes part in every binding-cycle point and writes each call to a file, so the tests can
assert what ran, in which order. What it does for a pod depends on the pod's label ``probe``:

- ``wait-allow``: Permit waits (timeout 30 s) and allows the pod after ``allowAfterSeconds``
  through the handle's waiting pods;
- ``wait-timeout``: the first Permit waits ``timeoutSeconds`` and nobody allows it;
- ``prebind-fail``: the first PreBind fails;
- anything else: every point succeeds.
Its Bind returns Skip, so DefaultBinder binds after it.
"""

from __future__ import annotations

import asyncio

from policy_scheduler.framework.interface import (BindPlugin, CycleState, PermitPlugin, PluginArgs, PostBindPlugin,
                                                  PreBindPlugin, ReservePlugin)
from policy_scheduler.framework.model.podinfo import PodInfo
from policy_scheduler.framework.status import Code, Status

NAME = "BindingProbe"


class ProbeArgs(PluginArgs):
    log: str
    allowAfterSeconds: float = 0.5
    timeoutSeconds: float = 1.0


class BindingProbe(ReservePlugin, PermitPlugin, PreBindPlugin, BindPlugin, PostBindPlugin):
    NAME = NAME
    Args = ProbeArgs

    def __init__(self, args, handle) -> None:
        super().__init__(args, handle)
        self.seen: dict[tuple[str, str], int] = {}

    def _log(self, point: str, pod: PodInfo, node: str) -> int:
        n = self.seen[(point, pod.key)] = self.seen.get((point, pod.key), 0) + 1
        with open(self.args.log, "a") as f:
            f.write(f"{pod.key} {point} {node}\n")
        return n

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        self._log("reserve", pod, node_name)
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self._log("unreserve", pod, node_name)

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        n = self._log("permit", pod, node_name)
        mode = pod.labels.get("probe", "")
        if mode == "wait-allow":
            waiting = self.handle.waiting_pods()

            def allow() -> None:
                wp = waiting.get(pod.uid)
                if wp is not None:
                    self._log("allow", pod, node_name)
                    wp.allow(NAME)

            asyncio.get_running_loop().call_later(self.args.allowAfterSeconds, allow)
            return Status(Code.WAIT), 30.0
        if mode == "wait-timeout" and n == 1:
            return Status(Code.WAIT), self.args.timeoutSeconds
        return Status.success(), 0.0

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        n = self._log("prebind", pod, node_name)
        if pod.labels.get("probe") == "prebind-fail" and n == 1:
            return Status.error("the probe refuses the first PreBind")
        return Status.success()

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        self._log("bind-skip", pod, node_name)
        return Status.skip()

    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self._log("postbind", pod, node_name)


PLUGIN = BindingProbe
