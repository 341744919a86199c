"""The operator's Binder (scheduler/ports.py): the asynchronous half of the binding cycle. The
scheduling driver (scheduler/schedule_one.py ``submit``) assumes the pod on its node and runs
Reserve and Permit in the scheduling loop (ClusterState.reserve); then ``start_binding`` signs the
decision annotation and spawns the task: PreBindPreFlight, WaitOnPermit, PreBind, Bind and PostBind
(framework/cycle/binding_cycle.py runs the plugins; DefaultBinder posts the Binding through the
handle, whose Actions are cluster/apicalls.py, and so goes the nomination for expectation:
status.nominatedNodeName before the wait, when a PreBind has work or the pod waits at Permit).

Nothing is lost: any failure goes to the driver's ``failed`` (Unreserve in reverse order, the
assumption forgotten, the pod requeued and reported, the nomination cleared, the other waiting
pods let retry); a success to its ``bound``. A binding that is no longer needed (the pod was
bound elsewhere, deleted, or replaced: ``PodGone``) is dropped, since the watch says where the
pod is.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable, Coroutine

from ..cache.state import ClusterState
from ..explain import DECISION_ANNOTATION, ROLLOUT_KEY, decision_annotation
from ..framework.cycle.binding_cycle import BINDING_ANNOTATIONS, nominate_for_expectation, run_binding, wait_on_permit
from ..framework.interface import DEVICE_ALLOCATION, GROUP_PLACEMENT, CycleState, PodGone
from ..framework.model.podinfo import PodInfo
from ..framework.queue.scheduling_queue import QueuedPodInfo
from ..framework.cycle.schedule import Decision
from ..framework.status import Status
from ..scheduler.schedule_one import Scheduler
from .decision_mac import MAC_ANNOTATION, DecisionKey

if TYPE_CHECKING:  # pragma: no cover
    from ..cache.policies import PolicyState
    from ..framework.cycle.chain import Chain

log = logging.getLogger("policy_scheduler")


class BindingTasks:
    """The asynchronous binding of decided pods, ``concurrency`` Bind calls at a time; the
    driver (``attach``) hears how each ends."""

    driver: Scheduler

    def __init__(self, state: ClusterState, spawn: Callable[[Coroutine], asyncio.Task], concurrency: int) -> None:
        self.state = state
        self.spawn = spawn
        self._sem = asyncio.Semaphore(concurrency)
        # bindings started and not yet ended (a pod waiting at Permit counted once it is allowed):
        # while any is, the suggestions' search waits (its writes would compete at the API server)
        self.binding = 0
        # signs each decision annotation (decision_mac.py): the rollout counts only pods it verifies.
        # Random until the operator sets the shared one (serve.py, from the Secret)
        self.key = DecisionKey()

    def attach(self, driver: Scheduler) -> None:
        self.driver = driver

    # ------------------------------------------------------------------ in the scheduling loop
    def start_binding(self, qpi: QueuedPodInfo, st: "PolicyState", chain: "Chain", state: CycleState,
                      decision: Decision, assumed: PodInfo, status: Status) -> bool:
        """After Reserve and Permit (the driver's ``submit``): the decision annotation, signed,
        and the binding task."""
        pod, node = qpi.pod, assumed.node_name
        ann = decision_annotation(st.name, decision, state.read(GROUP_PLACEMENT), rollout=state.read(ROLLOUT_KEY),
                                  devices=state.read(DEVICE_ALLOCATION))
        state.write(BINDING_ANNOTATIONS, {DECISION_ANNOTATION: ann, MAC_ANNOTATION: self.key.sign(pod.uid, node, ann)})
        wp = self.state.waiting.get(pod.uid)
        ready = wp is None or wp.decided
        if ready:  # counted from now, not from when the task first runs: the loop looks at once
            self.binding += 1
        self.spawn(self._bind(qpi, st, chain, state, assumed, counted=ready))
        return True

    # ------------------------------------------------------------------ the binding task
    async def _bind(self, qpi: QueuedPodInfo, st: "PolicyState", chain: "Chain", state: CycleState,
                    assumed: PodInfo, counted: bool = False) -> None:
        pod, node = qpi.pod, assumed.node_name
        waiting = self.state.waiting
        try:
            if counted:
                # nothing to wait for (e.g. a pod group's members all allowed in one cycle): the
                # nomination and the binding in one slot, so the pods decided first bind first
                try:
                    async with self._sem:
                        status = await self._nominate_and_wait(chain, state, pod, node)
                        if status.is_success:
                            status = await run_binding(chain, state, pod, node, waiting)
                finally:
                    self.binding -= 1
            else:
                status = await self._nominate_and_wait(chain, state, pod, node)  # outside the bind slots
                if status.is_success:
                    self.binding += 1
                    try:
                        async with self._sem:
                            status = await run_binding(chain, state, pod, node, waiting)
                    finally:
                        self.binding -= 1
        except PodGone as gone:
            log.info("binding %s to %s not needed: %s", pod.key, node, gone)
            self.driver.not_needed(qpi, chain, state, node)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a framework bug must not strand the pod
            log.exception("binding cycle of %s failed", pod.key)
            status = Status.error(f"binding cycle failed: {type(exc).__name__}: {exc}")
        driver = self.driver
        if not status.is_success:
            driver.failed(qpi, chain, state, assumed, status, broadcast=True)
            return
        driver.count_attempt(state, st.name, "scheduled")  # upstream: once bound, scheduling + binding
        driver.bound(qpi, st, node)

    async def _nominate_and_wait(self, chain: "Chain", state: CycleState, pod: PodInfo, node: str) -> Status:
        """PreBindPreFlights and the nomination for expectation (upstream: before WaitOnPermit),
        then WaitOnPermit."""
        status = await nominate_for_expectation(chain, state, pod, node, self.state.waiting)
        if status.is_success or status.is_skip:
            status = await wait_on_permit(self.state.waiting, pod)
        return status
