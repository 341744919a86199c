"""The binding cycle in the operator: after a decision, assume the pod on its node, run Reserve and
Permit in the scheduling loop, then, as a task, PreBindPreFlight, WaitOnPermit, PreBind, Bind and
PostBind (framework/cycle/binding_cycle.py runs the plugins; DefaultBinder posts the Binding
through the handle, whose Actions are cluster/apicalls.py, and so goes the nomination for
expectation: status.nominatedNodeName before the wait, when a PreBind has work or the pod waits
at Permit). Assume, Reserve and Permit are the cluster state's (cache/state.py
ClusterState.reserve), shared with what-if.

Nothing is lost. Any failure runs Unreserve on every Reserve plugin in reverse order, forgets
the assumption, requeues the pod (a rejection records the plugin, so its events can wake the
pod; an error goes through backoff), posts a FailedScheduling event that names the plugin, and
lets the other waiting pods retry (upstream broadcasts AssignedPodDelete); a nomination, ours for
expectation or an earlier one, is cleared with the failure's condition (clearNominatedNode). A
binding that is no longer needed (the pod was bound elsewhere, deleted, or replaced: ``PodGone``)
is dropped, since the watch says where the pod is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Callable, Coroutine

from ..cache.state import ClusterState
from ..explain import DECISION_ANNOTATION, ROLLOUT_KEY, decision_annotation, failure_message
from ..framework.cycle.binding_cycle import (BINDING_ANNOTATIONS, NOMINATED_FOR_EXPECTATION,
                                             nominate_for_expectation, run_binding, wait_on_permit)
from ..framework.events import ASSIGNED_POD_DELETE
from ..framework.interface import DEVICE_ALLOCATION, GROUP_PLACEMENT, CycleState, PodGone
from ..framework.model.podinfo import PodInfo
from ..framework.queue.scheduling_queue import QueuedPodInfo, SchedulingQueue
from ..framework.cycle.schedule import Decision
from ..framework.status import Code, Status
from ..logs import fields
from .decision_mac import MAC_ANNOTATION, DecisionKey
from .recorder import EventRecorder
from .telemetry import Telemetry

if TYPE_CHECKING:  # pragma: no cover
    from ..cache.policies import PolicyState
    from ..framework.cycle.chain import Chain

log = logging.getLogger("policy_scheduler")

CYCLE_START = "policy-scheduler.io/cycle-start"  # CycleState key: perf_counter at the start of the attempt


class BindingTasks:
    """Reserve, Permit and the asynchronous binding of decided pods. ``on_bound(qpi, st, node)``:
    the binding cycle succeeded (the engine's bookkeeping)."""

    def __init__(self, state: ClusterState, queue: SchedulingQueue, recorder: EventRecorder, telemetry: Telemetry,
                 spawn: Callable[[Coroutine], asyncio.Task], wake: Callable[[], None],
                 on_bound: Callable[[QueuedPodInfo, "PolicyState", str], None], concurrency: int) -> None:
        self.state = state
        self.queue = queue
        self.recorder = recorder
        self.telemetry = telemetry
        self.spawn = spawn
        self.wake = wake
        self.on_bound = on_bound
        self._sem = asyncio.Semaphore(concurrency)
        # signs each decision annotation (decision_mac.py): the rollout counts only pods it verifies.
        # Random until the operator sets the shared one (serve.py, from the Secret)
        self.key = DecisionKey()

    # ------------------------------------------------------------------ in the scheduling loop
    def start(self, qpi: QueuedPodInfo, st: "PolicyState", chain: "Chain", state: CycleState,
              decision: Decision) -> bool:
        """Assume, Reserve, Permit (ClusterState.reserve); then the binding task. False when
        Reserve or Permit failed (the pod is requeued and reported)."""
        pod, node = qpi.pod, decision.node
        assert node is not None
        state.write(CYCLE_START, time.perf_counter() - decision.duration)
        assumed, status = self.state.reserve(chain, state, pod, node)
        if not status.is_success and status.code != Code.WAIT:
            self._failed(qpi, chain, state, assumed, status, broadcast=False)
            return False
        ann = decision_annotation(st.name, decision, state.read(GROUP_PLACEMENT), rollout=state.read(ROLLOUT_KEY),
                                  devices=state.read(DEVICE_ALLOCATION))
        state.write(BINDING_ANNOTATIONS, {DECISION_ANNOTATION: ann, MAC_ANNOTATION: self.key.sign(pod.uid, node, ann)})
        self.spawn(self._bind(qpi, st, chain, state, assumed))
        return True

    # ------------------------------------------------------------------ the binding task
    async def _bind(self, qpi: QueuedPodInfo, st: "PolicyState", chain: "Chain", state: CycleState,
                    assumed: PodInfo) -> None:
        pod, node = qpi.pod, assumed.node_name
        waiting = self.state.waiting
        try:
            wp = waiting.get(pod.uid)
            if wp is None or wp.decided:
                # nothing to wait for (e.g. a pod group's members all allowed in one cycle): the
                # nomination and the binding in one slot, so the pods decided first bind first
                async with self._sem:
                    status = await self._nominate_and_wait(chain, state, pod, node)
                    if status.is_success:
                        status = await run_binding(chain, state, pod, node, waiting)
            else:
                status = await self._nominate_and_wait(chain, state, pod, node)  # outside the bind slots
                if status.is_success:
                    async with self._sem:
                        status = await run_binding(chain, state, pod, node, waiting)
        except PodGone as gone:
            log.info("binding %s to %s not needed: %s", pod.key, node, gone)
            self.state.unreserve(chain, state, pod, node)
            self.queue.done(pod.key)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a framework bug must not strand the pod
            log.exception("binding cycle of %s failed", pod.key)
            status = Status.error(f"binding cycle failed: {type(exc).__name__}: {exc}")
        if not status.is_success:
            self._failed(qpi, chain, state, assumed, status, broadcast=True)
            return
        self._count_attempt(state, st.name, "scheduled")  # upstream: once bound, scheduling + binding
        self.on_bound(qpi, st, node)

    async def _nominate_and_wait(self, chain: "Chain", state: CycleState, pod: PodInfo, node: str) -> Status:
        """PreBindPreFlights and the nomination for expectation (upstream: before WaitOnPermit),
        then WaitOnPermit."""
        status = await nominate_for_expectation(chain, state, pod, node, self.state.waiting)
        if status.is_success or status.is_skip:
            status = await wait_on_permit(self.state.waiting, pod)
        return status

    def _count_attempt(self, state: CycleState, policy: str | None, result: str) -> None:
        started = state.read(CYCLE_START)
        self.telemetry.attempt(result, policy, None if started is None else time.perf_counter() - started)

    # ------------------------------------------------------------------ failures
    def _failed(self, qpi: QueuedPodInfo, chain: "Chain", state: CycleState, assumed: PodInfo, status: Status,
                broadcast: bool) -> None:
        pod, node = qpi.pod, assumed.node_name
        queue = self.queue
        self.state.unreserve(chain, state, pod, node)
        rejected = status.is_rejected
        self._count_attempt(state, qpi.policy, "unschedulable" if rejected else "error")
        msg = failure_message(status)
        log.warning("pod %s not bound to %s: %s; requeued%s", pod.key, node, msg,
                    "" if rejected else " with backoff",
                    extra=fields(pod=pod.key, node=node, plugin=status.plugin or None, code=str(status.code)))
        if rejected:
            where = queue.add_unschedulable(
                qpi, {status.plugin} if status.plugin else (),
                pending_plugins={status.plugin} if status.code == Code.PENDING and status.plugin else ())
        else:
            where = queue.add_unschedulable(qpi, error=True)
        if where is not None:  # None: the pod was deleted meanwhile, nobody to tell
            self.recorder.failure(pod, "FailedScheduling", msg, code=status.code)
            if pod.nominated_node_name or state.read(NOMINATED_FOR_EXPECTATION):
                # upstream clearNominatedNode: the failure's status patch also empties the
                # nomination (ours for expectation, or an earlier preemption's), one patch
                self.recorder.nominate(pod, None)
        if broadcast:  # the room it held is free again: pods waiting for it may fit now
            queue.move_all_to_active_or_backoff(ASSIGNED_POD_DELETE, assumed, None,
                                                pre_check=lambda q: q.key != pod.key)
        self.wake()
