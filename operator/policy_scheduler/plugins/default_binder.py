"""DefaultBinder (upstream plugins/defaultbinder/default_binder.go): Bind posts the pod's
Binding through the handle. In every policy unless disabled; a Bind plugin listed in the policy
runs before it, and DefaultBinder binds only when every earlier one returned Skip.

The Binding carries the annotations the scheduling cycle left in the cycle state (the decision
annotation that ``policy-scheduler explain`` reads), so they cost no extra request.
"""

from __future__ import annotations

from ..framework.cycle.binding_cycle import BINDING_ANNOTATIONS
from ..framework.interface import BindPlugin, CycleState
from ..framework.model.podinfo import PodInfo
from ..framework.status import Status

NAME = "DefaultBinder"


class DefaultBinder(BindPlugin):
    NAME = NAME

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return await self.handle.bind_pod(pod, node_name, state.read(BINDING_ANNOTATIONS) or {})


PLUGIN = DefaultBinder
