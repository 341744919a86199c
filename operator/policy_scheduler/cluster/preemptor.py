"""The operator's Victims (scheduler/ports.py): a preemption the scheduling driver decided
(scheduler/schedule_one.py: the nominations, the victims parked at Permit) carried out off the
scheduling loop: the Preempting event, DisruptionTarget, the victims' DELETEs and the Preempted
events; and whether a preemptor is still waiting for its victims to go (DefaultPreemption's
PreEnqueue asks, through the Handle).

upstream: ``framework/preemption/executor.go`` (prepareCandidateAsync, IsPodRunningPreemption,
``preempting`` and ``lastVictimsPendingPreemption``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Coroutine

from ..cache.state import ClusterState
from ..framework.cycle.podgroup_result import PodGroupInfo
from ..framework.model.podinfo import PodInfo
from ..framework.preemption import PreemptionResult
from ..framework.queue.scheduling_queue import SchedulingQueue
from ..logs import MAX_MESSAGE_LEN, fields, truncate
from ..plugins.default_preemption import NAME as PREEMPTION
from .apicalls import GONE, UNKNOWN, ApiCalls
from .recorder import EventRecorder
from .telemetry import Telemetry

log = logging.getLogger("policy_scheduler")

VICTIMS_WAIT = 10.0  # seconds a preemptor (or a pod group's members) waits for its victims to be gone, at most
GROUP_VICTIMS_WAIT = VICTIMS_WAIT


class Preemptor:
    """Preemptions in progress: preemptor uid -> its last victim's key once only that one is
    left to delete (None before)."""

    def __init__(self, state: ClusterState, queue: SchedulingQueue, recorder: EventRecorder,
                 api: ApiCalls, telemetry: Telemetry, spawn: Callable[[Coroutine], asyncio.Task],
                 wake: Callable[[], None], scheduler_name: str) -> None:
        self.state = state
        self.queue = queue
        self.recorder = recorder
        self.api = api
        self.telemetry = telemetry
        self.spawn = spawn
        self.wake = wake
        self.scheduler_name = scheduler_name
        self.preempting: dict[str, str | None] = {}
        # a preemptor (or a pod group's member) after its victims' DELETEs returned, until the
        # state no longer holds them: uid -> (victim keys, deadline)
        self.waits: dict[str, tuple[list[str], float]] = {}

    def start(self, pod: PodInfo, victims: list[PodInfo]) -> None:
        """Mark ``pod`` as preempting before it is requeued: its PreEnqueue must see it so."""
        if victims and pod.uid:
            self.preempting[pod.uid] = None

    def is_running(self, uid: str) -> bool:
        """upstream Executor.IsPodRunningPreemption: the preemptor's victims are still being
        deleted. Once only the last victim is left, the preemption counts as done as soon as the
        state no longer holds that victim, so the victim's deletion event, which may arrive
        before the DELETE call returns, can let the preemptor go. Once the DELETEs returned, the
        preemptor is held until the state no longer holds any of its victims (their DELETED
        events), VICTIMS_WAIT seconds at most. Upstream lets it go as soon as the last victim
        has a deletionTimestamp (its DELETE sent), at the next pod deletion event of any pod;
        but a preemptor tried while its victims still count on the node finds no room and is
        not eligible to preempt again (a terminating pod on the nominated node), so it would
        only wait again, once per victim's event (a futile cycle, a FailedScheduling event and
        a status patch each), and in a burst our watch lags the API by up to seconds. The last
        victim's DELETED event moves it (DefaultPreemption registers AssignedPod Delete); a
        victim stuck terminating (a grace period) lets it go at the deadline, as not eligible."""
        waiting = self.waits.get(uid)
        if waiting is not None:  # until every victim is gone from the state
            if time.monotonic() < waiting[1] and any(self.state.table.pod(k) is not None for k in waiting[0]):
                return True
            del self.waits[uid]
            return False
        if uid not in self.preempting:
            return False
        last = self.preempting[uid]
        return last is None or self.state.table.pod(last) is not None

    def delete(self, pod: PodInfo, result: PreemptionResult, victims: list[PodInfo]) -> None:
        """The Victims port (scheduler/ports.py): DefaultPreemption's choice, decided by the
        driver (scheduler/schedule_one.py ``preempt``: nominations written, victims parked at
        Permit rejected), carried out off the loop: the Preempting event, then each of ``victims``
        gets the DisruptionTarget condition, is deleted and gets a Preempted event. Until the
        deletions are done the preemptor is held by DefaultPreemption's PreEnqueue (``is_running``)."""
        node = result.nominated_node
        assert node
        log.info("pod %s preempts %d pods on node %s: %s", pod.key, len(result.victims), node,
                 ", ".join(result.victim_keys), extra=fields(pod=pod.key, node=node, victims=result.victim_keys))
        top = result.victims[0]
        self.recorder.event(pod, "Normal", "Preempting", "Preempting", truncate(
            f"Preempting {len(result.victims)} pod(s) on node {node}: {', '.join(result.victim_keys)} "
            f"(chosen from {result.candidates} candidate node(s) by upstream's order: {result.num_pdb_violations} "
            f"PDB violation(s), highest victim priority {top.priority}, priority sum "
            f"{sum(v.priority for v in result.victims)}, {len(result.victims)} victim(s))", MAX_MESSAGE_LEN))
        self.telemetry.preemption_victims.observe(len(result.victims))
        if victims:
            self.spawn(self._delete_victims(pod, victims, node))  # the loop yields next: they start now

    def preempt_group(self, info: PodGroupInfo, members: list[PodInfo], victims: list[PodInfo]) -> None:
        """Act on a pod group's preemption (upstream actuatePodGroupPreemption), off the loop: a
        victim parked at Permit is rejected in memory; the others get the DisruptionTarget
        condition, are deleted and get a ``Preempted`` event (``Preempted by podgroup <uid> on
        node cluster``). Until the deletions are done the members are held at PreEnqueue; then
        they are activated. The members' nominations are written by the caller."""
        self.telemetry.preemption_attempts.inc()
        if not victims:
            return
        keys = [v.key for v in victims]
        log.info("PodGroup %s preempts %d pods: %s", info.key, len(victims), ", ".join(keys),
                 extra=fields(pod_group=info.key, victims=keys))
        self.telemetry.preemption_victims.observe(len(victims))
        waiting = self.state.waiting
        to_delete = []
        for v in victims:
            if v.uid and waiting.get(v.uid) is not None:
                waiting.reject(v.uid, PREEMPTION, "preempted")  # never bound: rejected in memory
            elif not v.terminating:
                to_delete.append(v)
        if not to_delete:
            return
        for m in members:
            if m.uid:
                self.preempting[m.uid] = None
        self.spawn(self._delete_group_victims(info, members, to_delete))

    async def _delete_group_victims(self, info: PodGroupInfo, members: list[PodInfo], victims: list[PodInfo]) -> None:
        """The victims' deletions, in parallel. The members stay held at PreEnqueue until every
        victim is gone from the state (its DELETED event, which moves them), at most
        VICTIMS_WAIT seconds: tried before, they would find the victims still counted and
        wait again (``ongoing preemption``), once per victim's event. On a failure they go at once."""
        ok = False
        try:
            ok = all(await asyncio.gather(*(self._delete_group_victim(v, info) for v in victims)))
        finally:
            for m in members:
                self.preempting.pop(m.uid, None)
            self._wait_for_victims(members, [v.key for v in victims], ok)

    def _wait_for_victims(self, pods: list[PodInfo], keys: list[str], ok: bool) -> None:
        """The DELETEs returned: ``pods`` stay held (``is_running``) until every victim in
        ``keys`` is gone from the state (the last one's DELETED event moves them), VICTIMS_WAIT
        seconds at most. On a failure, or when the victims are gone already (their deletion
        events came while the pods were still held, and no later event will look at the gate
        again), they go now."""
        deadline = time.monotonic() + VICTIMS_WAIT
        if ok:
            for m in pods:
                if m.uid:
                    self.waits[m.uid] = (keys, deadline)
        table = self.state.table
        if not ok or all(table.pod(k) is None for k in keys):
            self._release(pods)
        else:
            self.spawn(self._release_later(pods, deadline))

    def _release(self, members: list[PodInfo]) -> None:
        for m in members:
            self.waits.pop(m.uid, None)
        if self.queue.activate([m.key for m in members]):
            self.wake()

    async def _release_later(self, members: list[PodInfo], deadline: float) -> None:
        """A victim still not gone at the deadline (stuck terminating): the members go anyway."""
        await asyncio.sleep(max(deadline - time.monotonic(), 0.0))
        if any(m.uid in self.waits and self.waits[m.uid][1] == deadline for m in members):
            self._release(members)

    async def _delete_group_victim(self, victim: PodInfo, info: PodGroupInfo) -> bool:
        return await self._delete(victim, "podgroup", f"Preempted by podgroup {info.uid} on node cluster")

    async def _delete_victims(self, pod: PodInfo, victims: list[PodInfo], node: str) -> None:
        """All victims but the last in parallel, then the last one (upstream): the preemptor
        stays gated until the last victim is gone from the state. On any failure the preemptor
        is activated, so it is not left waiting for a deletion event that will not come."""
        ok = True
        try:
            if len(victims) > 1:
                done = await asyncio.gather(*(self._delete_victim(v, pod, node) for v in victims[:-1]))
                ok = all(done)
            if ok:
                last = victims[-1]
                if pod.uid in self.preempting:
                    self.preempting[pod.uid] = last.key
                ok = await self._delete_victim(last, pod, node)
        finally:
            self.preempting.pop(pod.uid, None)
            self._wait_for_victims([pod], [v.key for v in victims], ok)

    async def _delete_victim(self, victim: PodInfo, preemptor: PodInfo, node: str) -> bool:
        return await self._delete(victim, "pod", f"Preempted by pod {preemptor.uid} on node {node}")

    async def _delete(self, victim: PodInfo, preemptor_kind: str, event: str) -> bool:
        """DisruptionTarget, DELETE (with the victim's uid as precondition) and the Preempted
        event. False when the victim could not be deleted (it being gone already is success).
        Both writes are fenced by the lease when they are sent (apicalls.py). A DELETE that got
        no answer is not taken as failed: the victim is read back first, so a victim deleted
        after all is not followed by new victims for the same preemptor."""
        if not self.api.leadership.valid():
            return False
        await self.recorder.disruption_target(
            victim, f"{self.scheduler_name}: preempting to accommodate a higher priority {preemptor_kind}")
        done = await self.api.delete_pod(victim)
        if done == UNKNOWN:
            done = await self.api.victim_state(victim)
        if done is None:
            return False
        self.state.mark_terminating(victim)
        if done == GONE:
            return True
        self.recorder.event(victim, "Normal", "Preempted", "Preempting", event)
        return True
