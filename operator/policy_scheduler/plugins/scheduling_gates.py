"""SchedulingGates (upstream plugins/schedulinggates/scheduling_gates.go).

PreEnqueue: a pod with ``spec.schedulingGates`` stays out of the active queue, never decided nor
bound, with UnschedulableAndUnresolvable ``waiting for scheduling gates: [a b]`` (Go's %v over
the gate names, in spec order). It registers one event, the pod's own update that removes its
last gate, whose hint always queues: the pod is then scheduled at once. The PodScheduled
condition stays the API server's ``SchedulingGated``: the scheduler writes nothing for a gated pod.
"""

from __future__ import annotations

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, Resource
from ..framework.interface import EnqueueExtensions, PreEnqueuePlugin
from ..framework.model.podinfo import PodInfo
from ..framework.status import Status

NAME = "SchedulingGates"


class SchedulingGates(PreEnqueuePlugin, EnqueueExtensions):
    NAME = NAME

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.scheduling_gates:
            return Status.success()
        return Status.unschedulable(f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]",
                                    unresolvable=True)

    def events_to_register(self):
        return [ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD,
                                                  ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED))]


PLUGIN = SchedulingGates
