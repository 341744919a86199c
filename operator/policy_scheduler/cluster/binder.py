"""The binding cycle in the operator: after a decision, assume the pod on its node, run Reserve
and Permit in the scheduling loop, then, as a task, WaitOnPermit, PreBind, Bind and PostBind
(framework/binding.py runs the plugins; DefaultBinder posts the Binding through the handle).

Nothing is lost. Any failure runs Unreserve on every Reserve plugin in reverse order, forgets
the assumption, requeues the pod (a rejection records the plugin, so its events can wake the
pod; an error goes through backoff), posts a FailedScheduling event that names the plugin, and
lets the other waiting pods retry (upstream broadcasts AssignedPodDelete). A binding that is no
longer needed (the pod was bound elsewhere, deleted, or replaced: ``PodGone``) is dropped, since
the watch says where the pod is.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from typing import TYPE_CHECKING

import aiohttp

from ..explain import DECISION_ANNOTATION, decision_annotation, failure_message
from ..framework.binding import BINDING_ANNOTATIONS, run_binding, run_permit, run_reserve, run_unreserve, \
    wait_on_permit
from ..framework.events import ASSIGNED_POD_DELETE
from ..framework.interface import GROUP_PLACEMENT, CycleState, PodGone
from ..framework.podinfo import PodInfo
from ..framework.queue import QueuedPodInfo
from ..framework.runner import Decision
from ..framework.status import Code, Status
from ..logs import fields
from .kubeclient import ApiError

if TYPE_CHECKING:  # pragma: no cover
    from ..framework.chain import Chain
    from .engine import Engine
    from .policies import PolicyState

log = logging.getLogger("policy_scheduler")

GATED_CONFLICT = "has non-empty .spec.schedulingGates"
CYCLE_START = "policy-scheduler.io/cycle-start"  # CycleState key: perf_counter at the start of the attempt


async def post_binding(engine: "Engine", pod: PodInfo, node: str, annotations: dict[str, str]) -> Status:
    """The operator's Handle.bind_pod: POST pods/binding. Success; PodGone when no binding is
    needed any more; an Error status (the pod is requeued) otherwise. A 409 is told apart:
    already assigned, being deleted or replaced (a UID precondition) is PodGone; a pod that
    got scheduling gates behind our back is an error, requeued and gated on its next try."""
    t0 = time.perf_counter()
    telemetry = engine.telemetry
    left = engine.leadership.time_left()
    if left is not None and left <= 0:  # not (or no longer) the leader: a deposed leader never binds
        return Status.error("not bound: this replica does not hold the leader lease")
    try:
        # a leader's binding may not outlive its lease: past the renew deadline another replica may lead
        await engine.client.bind(pod.namespace, pod.name, node, uid=pod.uid or None, annotations=annotations,
                                 timeout=left)
    except ApiError as e:
        telemetry.bind_errors.labels(str(e.status)).inc()
        text = str(e)
        if e.status == 404:
            raise PodGone(f"pod {pod.key} not found: {text}") from None
        if e.status == 409:
            if GATED_CONFLICT in text:
                return Status.error(f"Binding rejected: the pod has scheduling gates: {text}")
            if "already assigned" in text or "being deleted" in text or "UID in precondition" in text:
                raise PodGone(text) from None
        return Status.error(f"Binding rejected: {text}")
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        telemetry.bind_errors.labels("transport").inc()
        return Status.error(f"Binding failed: {type(e).__name__}: {e}")
    telemetry.binding_duration.observe(time.perf_counter() - t0)
    return Status.success()


class Binder:
    """Reserve, Permit and the asynchronous binding of decided pods, for the engine."""

    def __init__(self, engine: "Engine", concurrency: int) -> None:
        self.engine = engine
        self._sem = asyncio.Semaphore(concurrency)

    # ------------------------------------------------------------------ in the scheduling loop
    def start(self, qpi: QueuedPodInfo, st: "PolicyState", chain: "Chain", state: CycleState,
              decision: Decision) -> bool:
        """Assume, Reserve, Permit; then the binding task. False when Reserve or Permit failed
        (the pod is requeued and reported)."""
        e = self.engine
        pod, node = qpi.pod, decision.node
        assert node is not None
        # upstream assume(): a copy with spec.nodeName set is what the cache counts (and what
        # hints see); the queued pod keeps no node, in case it comes back
        assumed = copy.copy(pod)
        assumed.node_name = node
        e.table.add_pod(assumed, node, assumed=True)
        state.write(CYCLE_START, time.perf_counter() - decision.duration)
        status = run_reserve(chain, state, pod, node)
        if status.is_success:
            status = run_permit(chain, state, pod, node, e.waiting)
        if not status.is_success and status.code != Code.WAIT:
            self._failed(qpi, chain, state, assumed, status, broadcast=False)
            return False
        state.write(BINDING_ANNOTATIONS, {DECISION_ANNOTATION: decision_annotation(
            st.name, decision, state.read(GROUP_PLACEMENT))})
        e.spawn(self._bind(qpi, st, chain, state, assumed))
        return True

    # ------------------------------------------------------------------ the binding task
    async def _bind(self, qpi: QueuedPodInfo, st: "PolicyState", chain: "Chain", state: CycleState,
                    assumed: PodInfo) -> None:
        pod, node = qpi.pod, assumed.node_name
        try:
            status = await wait_on_permit(self.engine.waiting, pod)  # outside the bind slots
            if status.is_success:
                async with self._sem:
                    status = await run_binding(chain, state, pod, node, self.engine.waiting)
        except PodGone as gone:
            log.info("binding %s to %s not needed: %s", pod.key, node, gone)
            run_unreserve(chain, state, pod, node)
            self.engine.forget_assumed(pod.key)
            self.engine.queue.done(pod.key)
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
        self.engine.bound(qpi, st, node)

    def _count_attempt(self, state: CycleState, policy: str | None, result: str) -> None:
        started = state.read(CYCLE_START)
        self.engine.telemetry.attempt(result, policy, None if started is None else time.perf_counter() - started)

    # ------------------------------------------------------------------ failures
    def _failed(self, qpi: QueuedPodInfo, chain: "Chain", state: CycleState, assumed: PodInfo, status: Status,
                broadcast: bool) -> None:
        e = self.engine
        pod, node = qpi.pod, assumed.node_name
        run_unreserve(chain, state, pod, node)
        e.forget_assumed(pod.key)
        rejected = status.is_rejected
        self._count_attempt(state, qpi.policy, "unschedulable" if rejected else "error")
        msg = failure_message(status)
        log.warning("pod %s not bound to %s: %s; requeued%s", pod.key, node, msg,
                    "" if rejected else " with backoff",
                    extra=fields(pod=pod.key, node=node, plugin=status.plugin or None, code=str(status.code)))
        if rejected:
            where = e.queue.add_unschedulable(
                qpi, {status.plugin} if status.plugin else (),
                pending_plugins={status.plugin} if status.code == Code.PENDING and status.plugin else ())
        else:
            where = e.queue.add_unschedulable(qpi, error=True)
        if where is not None:  # None: the pod was deleted meanwhile, nobody to tell
            e.recorder.failure(pod, "FailedScheduling", msg, code=status.code)
        if broadcast:  # the room it held is free again: pods waiting for it may fit now
            e.queue.move_all_to_active_or_backoff(ASSIGNED_POD_DELETE, assumed, None,
                                                  pre_check=lambda q: q.key != pod.key)
        e.wake()
