"""EventRecorder: the pods' Kubernetes Events (events.k8s.io/v1) and PodScheduled=False conditions.

Events go through a bounded queue (when it is full they are dropped and counted, as upstream's
recorder does) and are posted as they come by EVENT_WORKERS workers, as many as the bindings in
flight by default: a pod's Scheduled event keeps pace with its binding, as kube-scheduler's
does, instead of trailing behind a burst. A scheduling failure (``failure``) posts a Warning
event (once per distinct message a minute) and patches the pod's PodScheduled condition, only
when its reason or message differs from the last one written for the pod, its
lastTransitionTime set by the first write only (the status stays False): upstream's updatePod
writes nothing for a condition equal to the pod's, and keeps the transition time while the
status is unchanged. ``policy_event`` posts an Event about a SchedulingPolicy (one that cannot
be read). Nothing here raises into the
scheduler: failed writes are logged and counted in telemetry (``events_dropped``). Nothing is
written unless ``may_write()`` (the leader's lease is valid), and every write is fenced when it is
sent (``fence``: the lease's time left, kubeclient's ``fence``): one queued before the lease
lapsed is dropped unsent after it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Callable

from .. import API_GROUP, API_VERSION
from ..framework.model.podinfo import PodInfo
from ..framework.status import Code
from ..timefmt import now_micro, now_rfc3339
from .kubeclient import REQUEST_ERRORS, ApiError, Fenced, KubeClient
from .telemetry import Telemetry
from .tasks import Tasks

log = logging.getLogger("policy_scheduler")

EVENT_NOTE_LIMIT = 1024
EVENT_QUEUE_SIZE = 10000  # like upstream's recorder: a bounded queue; when full, events are dropped
# as many as the default bindings in flight (--bind-concurrency): with fewer, events got a small
# share of the API server during a burst and trailed the bindings by seconds
EVENT_WORKERS = 64
FAILURE_REPEAT_AFTER = 60.0  # seconds before the same failure message of a pod is reported again

__all__ = ["EventRecorder", "now_micro", "now_rfc3339", "truncate_note"]


def truncate_note(msg: str) -> str:
    """upstream truncates event notes to 1024 characters, ending in " ..."."""
    return msg if len(msg) <= EVENT_NOTE_LIMIT else msg[: EVENT_NOTE_LIMIT - 4] + " ..."


class EventRecorder:
    """Posts Events and PodScheduled conditions for pods, off the scheduling loop.

    ``side_sem`` bounds the concurrent condition patches (shared with the status
    writer by the engine).
    """

    def __init__(self, client: KubeClient, *, scheduler_name: str, telemetry: Telemetry,
                 instance: str | None = None,
                 side_sem: asyncio.Semaphore | None = None, workers: int = EVENT_WORKERS,
                 queue_size: int = EVENT_QUEUE_SIZE,
                 may_write: Callable[[], bool] = lambda: True,
                 fence: Callable[[], float | None] | None = None) -> None:
        self.client = client
        self.may_write = may_write  # False on a standby or a deposed leader: nothing is written
        # asked when each write is sent: seconds left (None: no limit); by default may_write's answer
        self.fence = fence or (lambda: None if self.may_write() else 0.0)
        self.scheduler_name = scheduler_name
        self.instance = instance or f"{scheduler_name}-{socket.gethostname()}"
        self.telemetry = telemetry
        self.workers = workers
        self._side_sem = side_sem or asyncio.Semaphore(32)
        self._events: asyncio.Queue = asyncio.Queue(queue_size)
        self._tasks = Tasks()
        self._last_failure: dict[str, tuple[str, float]] = {}  # pod key -> (message, time posted)
        # pod key -> (reason, message) of the PodScheduled=False condition last written (or being written)
        self._condition: dict[str, tuple[str, str]] = {}
        # pod key -> (pod, status fields, what) of a status write not sent yet (_queue_status)
        self._pending_status: dict[str, tuple[PodInfo, dict, list[str]]] = {}
        # pod key -> its latest status write's task, until it ends (``status_settled``)
        self._status_tasks: dict[str, asyncio.Task] = {}

    def _spawn(self, coro) -> asyncio.Task:
        return self._tasks.spawn(coro)

    # ------------------------------------------------------------------ what the scheduler calls
    def event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str) -> None:
        """Queue a Kubernetes Event; workers post them (asynchronous, as upstream's recorder)."""
        try:
            self._events.put_nowait((pod, type_, reason, action, note, now_micro()))
        except asyncio.QueueFull:
            self.telemetry.events_dropped.labels("event-queue-full").inc()

    def failure(self, pod: PodInfo, reason: str, msg: str, code: Code | None, once: bool = False) -> None:
        """A Warning event, unless this pod was reported the same message within the last minute
        (``once``: ever, while it stays pending); and a PodScheduled=False condition when its
        reason or message differs from the one last written for the pod."""
        key = pod.key
        cond_reason = "SchedulerError" if code == Code.ERROR else "Unschedulable"
        written = self._condition.get(key)
        if written != (cond_reason, msg):
            self._condition[key] = (cond_reason, msg)
            cond = {"type": "PodScheduled", "status": "False", "reason": cond_reason, "message": msg}
            if written is None:  # False from now on: later writes keep the transition time (a merge)
                cond["lastTransitionTime"] = now_rfc3339()
            self._queue_status(pod, {"conditions": [cond]}, "PodScheduled condition")
        last = self._last_failure.get(key)
        now = time.monotonic()
        if last is not None and last[0] == msg and (once or now - last[1] < FAILURE_REPEAT_AFTER):
            return  # same message recently: no new event
        self._last_failure[key] = (msg, now)
        self.event(pod, "Warning", reason, "Scheduling", msg)

    def policy_event(self, name: str, uid: str | None, type_: str, reason: str, action: str, note: str) -> None:
        """An Event about a SchedulingPolicy (cluster-scoped, so in namespace default, as the
        tuner's), posted off the loop."""
        self._spawn(self.post_policy_event(name, uid, type_, reason, action, note))

    def nominate(self, pod: PodInfo, node: str | None) -> None:
        """Write status.nominatedNodeName (a PostFilter's nomination; None clears it), off the loop."""
        self._queue_status(pod, {"nominatedNodeName": node}, "nominatedNodeName")

    def _queue_status(self, pod: PodInfo, status: dict, what: str) -> None:
        """A status write, off the loop. Writes for the same pod made before the writer runs go
        out as one patch, as upstream's updatePod writes the PodScheduled condition and the
        nomination of a failed attempt together (a later value of a field wins)."""
        key = pod.key
        pending = self._pending_status.get(key)
        if pending is None:
            self._pending_status[key] = (pod, dict(status), [what])
            task = self._spawn(self._flush_status(key))
            self._status_tasks[key] = task
            task.add_done_callback(lambda t: self._status_tasks.pop(key, None) if self._status_tasks.get(key) is t
                                   else None)
            return
        body, whats = pending[1], pending[2]
        for k, v in status.items():
            if k == "conditions":
                types = {c["type"] for c in v}
                body[k] = [c for c in body.get(k, []) if c["type"] not in types] + list(v)
            else:
                body[k] = v
        whats.append(what)

    async def status_settled(self, pod_key: str) -> None:
        """Wait until the pod's latest status write (its PodScheduled condition, a nomination) has
        been answered: a condition another component writes about the same failure (suggestions.py)
        then lands after it, so a reader never sees the advice before the failure."""
        task = self._status_tasks.get(pod_key)
        if task is not None and not task.done():
            await asyncio.wait({task})

    async def _flush_status(self, key: str) -> None:
        pod, status, whats = self._pending_status.pop(key)
        if not await self._patch_status(pod, {"status": status}, " and ".join(whats)):
            for c in status.get("conditions", ()):
                if c["type"] == "PodScheduled" and self._condition.get(key) == (c["reason"], c["message"]):
                    # not written: the next failure writes it again, with a transition time
                    # should the pod have none
                    self._condition.pop(key, None)

    async def disruption_target(self, pod: PodInfo, msg: str) -> None:
        """The DisruptionTarget condition of a pod about to be preempted (upstream, before the
        delete): reason PreemptionByScheduler."""
        body = {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                           "reason": "PreemptionByScheduler", "message": msg,
                                           "lastTransitionTime": now_rfc3339()}]}}
        await self._patch_status(pod, body, "DisruptionTarget condition")

    def forget(self, pod_key: str) -> None:
        """The pod is bound or gone: its next failure, if any, is reported anew."""
        self._last_failure.pop(pod_key, None)
        self._condition.pop(pod_key, None)

    def start(self) -> None:
        """Start the event workers (on the running loop)."""
        for _ in range(self.workers):
            self._spawn(self._event_worker())

    async def stop(self) -> None:
        """Stop the workers and pending condition patches; queued events are not posted."""
        await self._tasks.cancel_all()

    # ------------------------------------------------------------------ writers
    async def _event_worker(self) -> None:
        """Post queued events, as they come."""
        while True:
            item = await self._events.get()
            await self._post_event(*item)

    async def _post_event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str,
                          event_time: str) -> None:
        if not self.may_write():
            return
        body = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            # named as upstream's recorder does: <object>.<hex timestamp>
            "metadata": {"name": f"{pod.name}.{time.time_ns():x}", "namespace": pod.namespace},
            "eventTime": event_time, "reportingController": self.scheduler_name,
            "reportingInstance": self.instance, "action": action, "reason": reason, "type": type_,
            "note": truncate_note(note),
            "regarding": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace,
                          "uid": pod.uid},
        }
        try:
            await self.client.post(f"/apis/events.k8s.io/v1/namespaces/{pod.namespace}/events", body,
                                   fence=self.fence)
        except Fenced:
            return  # counted by the client
        except REQUEST_ERRORS as e:
            self.telemetry.events_dropped.labels("event").inc()
            log.warning("event %s for %s not recorded: %s", reason, pod.key, e)

    async def post_policy_event(self, name: str, uid: str | None, type_: str, reason: str, action: str, note: str,
                                instance: str | None = None) -> None:
        """Post an Event about a SchedulingPolicy now (``policy_event`` does it off the loop);
        ``instance``: the reportingInstance, the recorder's own by default."""
        if not self.may_write():
            return
        event_time = now_micro()
        regarding = {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "SchedulingPolicy", "name": name,
                     **({"uid": uid} if uid else {})}
        body = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": "default"},
                "eventTime": event_time, "reportingController": self.scheduler_name,
                "reportingInstance": instance or self.instance, "action": action, "reason": reason,
                "type": type_, "note": truncate_note(note), "regarding": regarding}
        try:
            await self.client.post("/apis/events.k8s.io/v1/namespaces/default/events", body, fence=self.fence)
        except Fenced:
            return
        except REQUEST_ERRORS as e:
            self.telemetry.events_dropped.labels("event").inc()
            log.warning("event %s for SchedulingPolicy %s not recorded: %s", reason, name, e)

    async def _patch_status(self, pod: PodInfo, body: dict, what: str) -> bool:
        """True when the API server took the patch."""
        if not self.may_write():
            return False
        async with self._side_sem:
            try:
                await self.client.strategic_patch(
                    f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status", body, fence=self.fence)
            except Fenced:
                return False
            except REQUEST_ERRORS as e:
                if isinstance(e, ApiError) and e.status == 422 and "already bound" in str(e):
                    return False  # a nomination that came after the pod was bound: nothing to say
                self.telemetry.events_dropped.labels("condition").inc()
                if not (isinstance(e, ApiError) and e.status == 404):  # pod gone meanwhile
                    log.warning("%s for %s not written: %s", what, pod.key, e)
                return False
        return True
