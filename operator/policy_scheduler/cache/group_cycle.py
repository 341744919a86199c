"""The pod-group cycle as the operator (cluster/engine.py) and what-if (whatif/simulate.py) run it
(upstream scheduleOnePodGroup and submitPodGroupAlgorithmResult): the engine hands over a popped pod whose policy schedules its
group as one (GangScheduling); every queued member of the group comes out of the queue with it,
the members are validated, the group cycle runs on the live table
(framework/cycle/podgroup.py), PodGroupPostFilter (group preemption,
framework/group_preemption.py) when it is unschedulable, then:

- the chosen placement's members go through the binding cycle as any pod (cluster/binding_tasks.py:
  assume, Reserve, Permit, then the binding task); GangScheduling's Permit lets them all through
  once minCount are assumed;
- the other members are requeued with the status upstream gives each (its own FitError, the
  group's status, or a copy of it), a FailedScheduling event and the PodScheduled condition; a
  nomination from the group preemption is written, an old one cleared where upstream clears it;
- the PodGroup gets its ``PodGroupInitiallyScheduled`` condition (written by the status writer).

A member rejected as part of the group waits for what may help any member: the union of the
plugins that rejected the members, plus GangScheduling (a member added, the group added, minCount
lowered); when one is woken and popped, the whole group comes along.

No I/O here: the collaborators are handed in (the operator's binding tasks, preemptor and event
recorder, or what-if's in-memory stand-ins).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from ..framework.cycle.podgroup import (POD_GROUP_CYCLE, GroupResult, PodGroupCycle, condition, group_plugin,
                                        member_order_key, member_status, validate)
from ..framework.queue.scheduling_queue import QueuedPodInfo
from ..framework.status import Code
from ..logs import MAX_MESSAGE_LEN, fields, truncate

if TYPE_CHECKING:  # pragma: no cover
    from ..framework.queue.nominator import Nominator
    from ..framework.queue.scheduling_queue import SchedulingQueue
    from .policies import PolicyState
    from .state import ClusterState

log = logging.getLogger("policy_scheduler")


class GroupCycles:
    """``resolve_policy(pod) -> (PolicyState | None, why)``: the policy selection. ``recorder``:
    ``failure(pod, reason, msg, code)`` and ``nominate(pod, node)``; ``telemetry``:
    ``attempt(result, policy, seconds)`` and ``cycle_recorder(policy)``; ``preemptor``:
    ``preempt_group(info, members, victims)`` and ``nominate(pod, node)``; ``binding_tasks``:
    ``start(qpi, policy state, chain, state, decision) -> bool``."""

    def __init__(self, state: "ClusterState", queue: "SchedulingQueue", nominator: "Nominator",
                 recorder: Any, telemetry: Any, preemptor: Any, binding_tasks: Any, resolve_policy: Callable,
                 rng) -> None:
        self.state, self.queue, self.nominator, self.recorder = state, queue, nominator, recorder
        self.telemetry, self.preemptor, self.binding_tasks = telemetry, preemptor, binding_tasks
        self.resolve_policy, self.rng = resolve_policy, rng

    def schedule(self, qpi: QueuedPodInfo, st: "PolicyState", chain, group) -> GroupResult | None:
        e = self
        key = group.group_key(qpi.pod)
        info = group.group_info(key)
        if info is None:  # deleted since PreEnqueue let the pod in: it waits there again
            e.queue.add_unschedulable(qpi, {group.NAME})
            return None
        taken = [qpi]
        for pk in list(group.cache.members(key)):
            if pk != qpi.key:
                other = e.queue.take(pk)
                if other is not None:
                    taken.append(other)
        members: list[QueuedPodInfo] = []
        for m in taken:
            if m.pod.terminating:  # upstream skipPodSchedule: not requeued, its flight ends
                e.queue.done(m.key)
                continue
            members.append(m)
        if not members:
            return None
        members.sort(key=lambda m: member_order_key(m.pod.priority, m.attempts, m.timestamp, m.pod.name))
        placed = [p for pk in info.scheduled if (p := e.state.table.pod(pk)) is not None]

        def policy_of(pod):
            other, _ = e.resolve_policy(pod)
            return other.name if other is not None else None

        err = validate(info, [m.pod for m in members], placed, policy_of, st.name)
        if err is not None:  # upstream handlePodGroupFailureBeforeScheduling
            for m in members:
                e.queue.add_unschedulable(m, error=True)
                e.recorder.failure(m.pod, "FailedScheduling", err, code=Code.ERROR)
            group.cache.set_condition(key, "False", "SchedulerError", err)
            e.telemetry.attempt("error", st.name)
            return None
        fit = chain.plugin("NodeResourcesFit")
        fit_weight = next((w for p, w in chain.score if p is fit), 1)
        cycle = PodGroupCycle(chain, e.state.table, e.rng, e.nominator, recorder=e.telemetry.cycle_recorder(st.name),
                              fit_score=getattr(fit, "score_placement", None), fit_weight=fit_weight,
                              scoring=getattr(group, "placement_scoring", "Upstream"))
        res = cycle.run(info, [m.pod for m in members])
        if res.status.code == Code.UNSCHEDULABLE:
            self._post_filter(chain, cycle, res)
        self._submit(res, members, st, chain, group)
        return res

    def _post_filter(self, chain, cycle: PodGroupCycle, res: GroupResult) -> None:
        """PodGroupPostFilter (upstream RunPodGroupPostFilterPlugins with DefaultPreemption's
        workload-aware preemption): its message is added to the group's status; a preemption
        nominates each member and deletes the victims."""
        runner = getattr(chain.plugin("DefaultPreemption"), "pod_group_post_filter", None)
        if runner is None:
            res.status.reasons.append("")  # upstream: no plugin answered, an empty reason is added
            return
        out = runner(cycle, res)
        status = out.status
        if status.is_success:
            res.waiting_on_preemption = True
            for m in res.members:
                m.nominated = out.nominations.get(m.pod.key)
            self.preemptor.preempt_group(res.info, [m.pod for m in res.members], out.victims)
        if status.is_error:
            res.status = status
        else:
            res.status.reasons.append(status.message())

    def _submit(self, res: GroupResult, members: list[QueuedPodInfo], st: "PolicyState", chain, group) -> None:
        """upstream submitPodGroupAlgorithmResult."""
        e = self
        by_key = {m.key: m for m in members}
        rejectors = {group.NAME}
        for r in res.members:
            rejectors |= r.unschedulable_plugins
        bound = 0
        for r in res.members:
            q = by_key[r.pod.key]
            status, clear = member_status(res, r)
            if status is None:
                r.state.write(POD_GROUP_CYCLE, None)  # the binding cycle is a plain one
                assert r.decision is not None
                e.nominator.remove(q.key)
                if e.binding_tasks.start(q, st, chain, r.state, r.decision):
                    bound += 1
                continue
            error = status.is_error
            pending = set() if error else r.pending_plugins
            e.queue.add_unschedulable(q, () if error else rejectors, error=error, pending_plugins=pending)
            msg = status.message()
            log.info("pod %s of PodGroup %s unschedulable under policy %s: %s", q.key, res.info.key, st.name,
                     truncate(msg, MAX_MESSAGE_LEN))
            e.recorder.failure(q.pod, "FailedScheduling", msg, code=Code.ERROR if error else status.code)
            if r.nominated:
                e.preemptor.nominate(q.pod, r.nominated)
            elif clear and (q.pod.nominated_node_name or e.nominator.node_of(q.key)):
                e.nominator.remove(q.key)
                q.pod.nominated_node_name = None
                e.recorder.nominate(q.pod, None)
        st.dirty = True
        group.cache.set_condition(res.info.key, *condition(res))
        outcome = "scheduled" if res.status.is_success else ("error" if res.status.is_error else "unschedulable")
        if outcome != "scheduled":
            e.telemetry.attempt(outcome, st.name, res.duration)
        log.info("PodGroup %s under policy %s: %s (%d members, %d to binding, placement %r)", res.info.key,
                 st.name, outcome, len(res.members), bound, res.placement,
                 extra=fields(pod_group=res.info.key, policy=st.name))
