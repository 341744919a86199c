"""PolicyStatusWriter: the status subresource of every SchedulingPolicy.

Counts change with every pod, so writes are batched: every ``interval`` seconds each policy's
status is computed and written only when it differs from the last one written. A condition's
lastTransitionTime moves only when its status flips. A policy changed by its owner is written
at once (``write_soon``). A policy deleted meanwhile (404) is not written again until it changes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Mapping


from ..framework.queue.scheduling_queue import UNSCHEDULABLE, SchedulingQueue
from ..metricsources.manager import MetricSources
from .kubeclient import TRANSPORT_ERRORS, ApiError, Fenced, KubeClient
from ..cache.policies import PLURAL_PATH, PolicyState
from ..cache.rollouts import ABORTED, ENDED, ROLLED_BACK
from .recorder import now_rfc3339
from .telemetry import Telemetry
from .tasks import Tasks

log = logging.getLogger("policy_scheduler")


def invalid_message(st: PolicyState) -> str:
    """The Ready=False message: the errors; with a chain kept (the last valid generation, or a
    revision read back after a restart), which generation is invalid and what pods are scheduled
    with."""
    errors = "; ".join(st.errors)
    if st.chain is None:
        return errors
    rev = st.revision_in_use
    using = f"revision {rev} (generation {st.chain_generation})" if rev else f"generation {st.chain_generation}"
    return f"generation {st.generation} is invalid: {errors}; scheduling with {using}"


def rollout_status(st: PolicyState) -> dict[str, Any] | None:
    """status.rollout: the rollout's own, else what the cluster shows of an ended one (after a
    restart: a promoted or rolled-back rollout stays visible; an active one without spec.rollout
    any more was aborted)."""
    if st.rollout is not None:
        return st.rollout.to_status()
    seen = st.rollout_seen
    if not isinstance(seen, dict) or not isinstance(seen.get("phase"), str):
        return None
    if seen["phase"] in ENDED:
        return seen
    return {**seen, "phase": ABORTED, "summary": ABORTED, "message": "spec.rollout was removed"}


def revisions_conditions(st: PolicyState) -> list[dict[str, Any]]:
    """``RevisionsRecorded=False`` while the policy's revisions cannot be kept (cluster/revisions.py
    says why: NamespaceNotFound, Forbidden, RequestFailed); none otherwise, so the condition
    clears when they are kept again."""
    p = st.revisions_problem
    if p is None:
        return []
    return [{"type": "RevisionsRecorded", "status": "False", "reason": p.reason, "message": p.message,
             "observedGeneration": st.generation}]


class PolicyStatusWriter:
    """Writes ``status`` of the policies in ``policies`` (name -> PolicyState, read live), with
    pod counts from ``queue`` and metric freshness from ``sources``. The batch loop also sets
    the pending-pods gauge. ``side_sem`` bounds concurrent writes (shared with the recorder)."""

    def __init__(self, client: KubeClient, policies: Mapping[str, PolicyState], queue: SchedulingQueue,
                 sources: MetricSources, telemetry: Telemetry, *, interval: float = 2.0,
                 side_sem: asyncio.Semaphore | None = None, may_write: Callable[[], bool] = lambda: True,
                 admitted_namespaces: Callable[[PolicyState], int] | None = None,
                 fence: Callable[[], float | None] | None = None) -> None:
        self.client = client
        # asked when a write is sent, after the semaphore (kubeclient's fence): seconds left, None
        # for no limit; by default may_write's answer at that moment
        self.fence = fence or (lambda: None if self.may_write() else 0.0)
        self.admitted_namespaces = admitted_namespaces
        self.may_write = may_write  # False on a standby or a deposed leader: nothing is written
        self.policies = policies
        self.queue = queue
        self.sources = sources
        self.telemetry = telemetry
        self.interval = interval
        self._side_sem = side_sem or asyncio.Semaphore(32)
        self._tasks = Tasks()

    def policy_status(self, st: PolicyState) -> dict[str, Any]:
        """The status object of one policy (without lastTransitionTimes)."""
        counts = self.queue.counts(st.name)
        cond = {"type": "Ready", "status": "True" if st.ready else "False",
                "reason": "Valid" if st.ready else "Unreadable" if st.unreadable else "InvalidSpec",
                "message": ("chain built: " + ", ".join(
                    f"{p.name}{'' if p.weight is None else f'(w={p.weight})'}" for p in st.chain.resolved))
                if st.ready else invalid_message(st),
                "observedGeneration": st.generation}
        extra = self.sources.status(st.name) or {}
        status = {
            "observedGeneration": st.generation,
            "conditions": [cond, *extra.get("conditions", []), *revisions_conditions(st)],
            "plugins": [{"name": p.name, "points": p.points, "weight": p.weight} for p in st.chain.resolved]
            if st.chain else [],
            "pluginCount": len(st.chain.resolved) if st.chain else 0,
            "pluginSummary": ",".join(p.name if p.weight is None else f"{p.name}:{p.weight}"
                                      for p in st.chain.resolved) if st.chain else "",
            "scheduled": st.scheduled,
            "unschedulable": counts[UNSCHEDULABLE],
            "pending": sum(counts.values()),
            "lastScheduledTime": st.last_scheduled_time,
            "revision": st.revision_in_use,
        }
        if self.admitted_namespaces is not None:
            status["namespaces"] = self.admitted_namespaces(st)
        if "metrics" in extra:
            status["metrics"] = extra["metrics"]
        rollout = rollout_status(st)
        status["rollout"] = rollout  # None removes a rollout the cluster still shows
        if rollout is not None:
            ended_badly = rollout["phase"] in (ROLLED_BACK, ABORTED)
            status["conditions"].append({
                "type": "Rollout", "status": "False" if ended_badly else "True", "reason": rollout["phase"],
                "message": rollout.get("message") or "", "observedGeneration": st.generation})
        return status

    async def write(self, st: PolicyState) -> None:
        """Write the policy's status if it changed since the last write (and we lead)."""
        if not self.may_write():
            return
        status = self.policy_status(st)
        last = st.last_written or {}
        before = {c["type"]: c for c in last.get("conditions") or []}
        for cond in status["conditions"]:  # lastTransitionTime moves only when a condition flips
            old = before.get(cond["type"])
            cond["lastTransitionTime"] = (old.get("lastTransitionTime") if old and old.get("status") == cond["status"]
                                          else now_rfc3339())
        if status == last:
            st.dirty = False
            return
        async with self._side_sem:
            try:
                await self.client.merge_patch(f"{PLURAL_PATH}/{st.name}/status", {"status": status},
                                              fence=self.fence)
                st.last_written, st.dirty = status, False
            except Fenced:
                return  # not sent (counted by the client): still dirty, for the next leader's first write
            except ApiError as e:
                if e.status == 404:  # deleted meanwhile
                    st.dirty = False
                    return
                self.telemetry.events_dropped.labels("status").inc()
                log.warning("status of SchedulingPolicy %s not written: %s", st.name, e)
            except TRANSPORT_ERRORS as e:
                self.telemetry.events_dropped.labels("status").inc()
                log.warning("status of SchedulingPolicy %s not written: %s", st.name, e)

    def write_soon(self, st: PolicyState) -> None:
        """Write the policy's status in a task of its own (on the running loop)."""
        self._tasks.spawn(self.write(st))

    async def run(self) -> None:
        """The batch loop, until cancelled: every ``interval``, the pending-pods and
        unschedulable-pods gauges and every policy's status (written only when changed)."""
        while True:
            await asyncio.sleep(self.interval)
            c = self.queue.counts()
            for q, v in c.items():
                self.telemetry.pending.labels(q).set(v)
            self.telemetry.set_unschedulable(self.queue.unschedulable_plugin_counts())
            for st in list(self.policies.values()):
                await self.write(st)  # writes only what changed

    async def stop(self) -> None:
        """Cancel the writes started by ``write_soon``."""
        await self._tasks.cancel_all()
