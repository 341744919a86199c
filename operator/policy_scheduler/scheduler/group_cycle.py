"""The pod-group cycle of the scheduling driver (schedule_one.py), the operator's and what-if's
(upstream scheduleOnePodGroup and submitPodGroupAlgorithmResult): the driver hands over a popped
pod whose policy schedules its group as one (GangScheduling); every queued member of the group
comes out of the queue with it, the members are validated, the group cycle runs on the live
table (plugins/podgroups/cycle.py), PodGroupPostFilter (group preemption,
framework/group_preemption.py) when it is unschedulable, then:

- the chosen placement's members go through the binding cycle as any pod (the driver's ``submit``:
  assume, Reserve, Permit, then the Binder); GangScheduling's Permit lets them all through
  once minCount are assumed;
- the other members are requeued with the status upstream gives each (its own FitError, the
  group's status, or a copy of it), a FailedScheduling event and the PodScheduled condition; a
  nomination from the group preemption is written, an old one cleared where upstream clears it;
- the PodGroup gets its ``PodGroupInitiallyScheduled`` condition (written by the status writer).

A member rejected as part of the group waits for what may help any member: the union of the
plugins that rejected the members, plus GangScheduling (a member added, the group added, minCount
lowered); when one is woken and popped, the whole group comes along.

No I/O here: the collaborators are the driver's ports (ports.py: the operator's event recorder,
telemetry and preemptor, or what-if's in-memory stand-ins) and the driver's own ``submit`` (Reserve,
Permit, then the Binder) and ``nominate`` (schedule_one.py).
"""

from __future__ import annotations

import logging
import random
from time import perf_counter
from typing import TYPE_CHECKING, Any, Callable

from ..plugins.podgroups.cycle import (POD_GROUP_CYCLE, GroupNode, GroupResult, PodGroupCycle, condition,
                                       member_order_key, member_status, validate)
from ..framework.group_post_filter import run_pod_group_post_filters
from ..framework.queue.scheduling_queue import QueuedPodInfo
from ..framework.status import Code
from ..logs import MAX_MESSAGE_LEN, fields, truncate
from .ports import Attempts, Recorder, Victims

if TYPE_CHECKING:  # pragma: no cover
    from ..cache.policies import PolicyState
    from ..cache.state import ClusterState
    from ..framework.cycle.chain import Chain
    from ..framework.cycle.podgroup_result import PodGroupInfo
    from ..framework.cycle.schedule import Decision
    from ..framework.interface import CycleState
    from ..framework.model.podinfo import PodInfo
    from ..framework.queue.nominator import Nominator
    from ..framework.queue.scheduling_queue import SchedulingQueue

log = logging.getLogger("policy_scheduler")

# the driver's submit(qpi, policy state, chain, cycle state, decision) -> bool (Reserve, Permit, the Binder)
Submit = Callable[["QueuedPodInfo", "PolicyState", "Chain", "CycleState", "Decision"], bool]


class GroupCycles:
    """``resolve_policy(pod) -> (PolicyState | None, why)``: the policy selection. ``recorder``:
    failures and nominations; ``attempts``: ``attempt``, ``cycle_recorder`` and the pod-group
    metrics: ``pod_group_attempt(result, policy, seconds)`` once per cycle (upstream
    podGroupCycle's result: scheduled, unschedulable, waiting_on_preemption or error, and the
    seconds since the cycle started), ``pod_group_algorithm(seconds)`` once the hierarchy's
    placements are known and ``pod_group_preemption(code, seconds, victims)`` after
    DefaultPreemption's PodGroupPostFilter; ``victims``: ``preempt_group``; ``submit`` and
    ``nominate``: the driver's (schedule_one.py)."""

    def __init__(self, state: ClusterState, queue: SchedulingQueue, nominator: Nominator, recorder: Recorder,
                 attempts: Attempts, victims: Victims, submit: Submit, nominate: Callable[[PodInfo, str], None],
                 resolve_policy: Callable[[PodInfo], tuple[PolicyState | None, str]], rng: random.Random, *,
                 logger: logging.Logger = log) -> None:
        self.state, self.queue, self.nominator, self.recorder = state, queue, nominator, recorder
        self.attempts, self.victims, self.submit, self.nominate = attempts, victims, submit, nominate
        self.resolve_policy, self.rng, self.log = resolve_policy, rng, logger
        self._handled: set[str] = set()  # the members of the cycle in progress already requeued or bound

    def schedule(self, qpi: QueuedPodInfo, st: PolicyState, chain: Chain, group: Any) -> GroupResult | None:
        """The popped pod's group (the root of its hierarchy: a PodGroup, or the top
        CompositePodGroup) in one cycle. Returns the root's result (None when nothing ran)."""
        e = self
        key = group.group_key(qpi.pod)
        root_ref = group.hierarchy(key)
        root = self._tree(group, *root_ref) if root_ref is not None else None
        if root is None:  # deleted since PreEnqueue let the pod in: it waits there again
            e.queue.add_unschedulable(qpi, {group.NAME})
            return None
        taken = [qpi]
        for leaf in root.leaves():
            for pk in list(group.cache.members(leaf.info.key)):
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
        self._handled = set()
        start = perf_counter()
        try:
            res = self._run(root, members, st, chain, group, start)
        except Exception as exc:  # a framework bug must not stop scheduling nor strand the members
            self.log.exception("pod-group cycle of %s failed", root.info.key)
            msg = f"pod group scheduling cycle failed: {type(exc).__name__}: {exc}"
            for m in members:
                if m.key not in self._handled:
                    e.queue.add_unschedulable(m, error=True)
                    e.recorder.failure(m.pod, "FailedScheduling", msg, code=Code.ERROR)
            res = None
        # upstream podGroupCycle's result, by the root's status
        result = ("error" if res is None or res.status.is_error else "scheduled" if res.status.is_success
                  else "waiting_on_preemption" if res.waiting_on_preemption else "unschedulable")
        self.attempts.pod_group_attempt(result, st.name, perf_counter() - start)
        return res

    def _run(self, root: GroupNode, members: list[QueuedPodInfo], st: PolicyState, chain: Chain, group: Any,
             start: float) -> GroupResult | None:
        e = self
        for leaf in root.leaves():
            leaf.pods = [m.pod for m in members if group.group_key(m.pod) == leaf.info.key]
        placed = [p for pk in root.info.scheduled if (p := e.state.table.pod(pk)) is not None]

        def policy_of(pod: PodInfo) -> str | None:
            other, _ = e.resolve_policy(pod)
            return other.name if other is not None else None

        err = validate(root.info, [m.pod for m in members], placed, policy_of, st.name)
        if err is not None:  # upstream handlePodGroupFailureBeforeScheduling
            for m in members:
                self._handled.add(m.key)
                e.queue.add_unschedulable(m, error=True)
                e.recorder.failure(m.pod, "FailedScheduling", err, code=Code.ERROR)
            for leaf in root.leaves():
                group.cache.set_condition(leaf.info.key, "False", "SchedulerError", err)
            e.attempts.attempt("error", st.name)
            return None
        fit = chain.plugin("NodeResourcesFit")
        fit_weight = next((w for p, w in chain.score if p is fit), 1)
        cycle = PodGroupCycle(chain, e.state.table, e.rng, e.nominator, recorder=e.attempts.cycle_recorder(st.name),
                              fit_score=getattr(fit, "score_placement", None), fit_weight=fit_weight,
                              scoring=getattr(group, "placement_scoring", "Upstream"))
        results = cycle.run_tree(root)
        res = results[root.id]
        self.attempts.pod_group_algorithm(perf_counter() - start)
        if res.status.code == Code.UNSCHEDULABLE:
            self._post_filter(chain, _TreeRun(cycle, root), res, results)
        for m in members:  # upstream: a requeued group's max backoff grows with √(its queued size)
            m.entity_size = len(members)
        for leaf in root.leaves():
            self._submit(results[leaf.id], [m for m in members if group.group_key(m.pod) == leaf.info.key],
                         st, chain, group)
        return res

    def _tree(self, group: Any, composite: bool, key: str, depth: int = 0) -> GroupNode | None:
        """The hierarchy under (composite, key) as the cycle reads it (children in upstream's order)."""
        info = group.group_info(key, composite)
        if info is None or depth > 16:
            return None
        node = GroupNode(info, composite)
        if composite:
            for c, k in group.cache.children(key):
                child = self._tree(group, c, k, depth + 1)
                if child is not None:
                    node.children.append(child)
        return node

    def _post_filter(self, chain: Chain, cycle: _TreeRun, res: GroupResult, results: dict[str, GroupResult]) -> None:
        """The PodGroupPostFilter plugins (upstream RunPodGroupPostFilterPlugins: DynamicResources'
        and DefaultPreemption's workload-aware preemption, framework/group_post_filter.py) and
        applyPodGroupPostFilterResult: their message is added to every result's status of the
        hierarchy (a status shared by several results gets it once per result, as upstream's); a
        preemption nominates each member and deletes the victims."""
        t = perf_counter()
        out, status = run_pod_group_post_filters(chain, cycle, res, cycle.root.composite)
        if out is not None and out.status is not None:
            self.attempts.pod_group_preemption(out.status.code, perf_counter() - t,
                                              len(out.victims) if out.status.is_success else None)
        members = [m for r in results.values() for m in r.members]
        if status.is_success:
            for r in results.values():
                r.waiting_on_preemption = True
            for m in members:
                m.nominated = out.nominations.get(m.pod.key) if out is not None else None
            if out is not None:
                self.victims.preempt_group(res.info, [m.pod for m in members], out.victims)
        for r in results.values():
            if status.is_error:
                r.status = status
            else:  # no reason at all: upstream adds an empty one
                r.status.reasons.append(status.message())

    def _submit(self, res: GroupResult, members: list[QueuedPodInfo], st: PolicyState, chain: Chain,
                group: Any) -> None:
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
            self._handled.add(q.key)
            if status is None:
                r.state.write(POD_GROUP_CYCLE, None)  # the binding cycle is a plain one
                assert r.decision is not None
                e.nominator.remove(q.key)
                if e.submit(q, st, chain, r.state, r.decision):
                    bound += 1
                continue
            error = status.is_error
            pending = set() if error else r.pending_plugins
            e.queue.add_unschedulable(q, () if error else rejectors, error=error, pending_plugins=pending)
            msg = status.message()
            e.log.info("pod %s of PodGroup %s unschedulable under policy %s: %s", q.key, res.info.key, st.name,
                     truncate(msg, MAX_MESSAGE_LEN))
            e.recorder.failure(q.pod, "FailedScheduling", msg, code=Code.ERROR if error else status.code)
            if r.nominated:
                e.nominate(q.pod, r.nominated)
            elif clear and (q.pod.nominated_node_name or e.nominator.node_of(q.key)):
                e.nominator.remove(q.key)
                q.pod.nominated_node_name = ""  # none (as the API's empty field)
                e.recorder.nominate(q.pod, None)
        st.dirty = True
        group.cache.set_condition(res.info.key, *condition(res))
        outcome = "scheduled" if res.status.is_success else ("error" if res.status.is_error else "unschedulable")
        if outcome != "scheduled":
            e.attempts.attempt(outcome, st.name, res.duration)
        e.log.info("PodGroup %s under policy %s: %s (%d members, %d to binding, placement %r)", res.info.key,
                 st.name, outcome, len(res.members), bound, res.placement,
                 extra=fields(pod_group=res.info.key, policy=st.name))


class _TreeRun:
    """What group preemption (framework/group_preemption.py) reads of the cycle for a hierarchy:
    ``run(info, pods)`` runs the whole tree again (upstream's podGroupSchedulingFunc) and answers
    with the root's status and every leaf's members."""

    def __init__(self, cycle: PodGroupCycle, root: GroupNode) -> None:
        self.cycle, self.root = cycle, root
        self.nodes, self.chain, self.nominator = cycle.nodes, cycle.chain, cycle.nominator

    def run(self, info: PodGroupInfo, pods: list[PodInfo]) -> GroupResult:
        results = self.cycle.run_tree(self.root)
        res = results[self.root.id]
        return GroupResult(res.info, res.status, [m for leaf in self.root.leaves() for m in results[leaf.id].members])
