"""Schedule one popped pod and submit its result: upstream ``ScheduleOne`` minus the goroutine,
shared by the operator (cluster/engine.py) and what-if (whatif/queue_run.py).

    schedule(qpi): the pod's policy (none usable: NoPolicy) --> the rollout's chain for it
        --> a pod of a group: the pod-group cycle (group_cycle.py), else
        --> framework/cycle/schedule.py schedule_one --> Decision
        --> scheduled: ``submit``: ClusterState.reserve (assume, Reserve, Permit)
             --> Binder.start_binding (the operator's task, or what-if's virtual binding)
             --> ... ``bound`` (the bookkeeping) or ``failed`` (unreserve, requeue, report)
        --> not: requeue with the rejecting plugins, FailedScheduling, and the PostFilter's
            preemption (nominations here, the victims' deletions through the Victims port);
            then the Hints port hears of it (what would place the pod, searched later)

It reaches the world only through the ports (ports.py): what the pods are told (Recorder), what
is counted (Attempts), the binding (Binder), the victims' deletions (Victims), spec.rollout
(Rollouts) and the suggestions for pods that found no node (Hints). No I/O here.
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING, Callable, Mapping

from ..cache.policies import POLICY_SELECTION, PolicyState
from ..cache.state import ClusterState
from ..explain import failure_message
from ..framework.cycle.binding_cycle import NOMINATED_FOR_EXPECTATION
from ..framework.cycle.podgroup_result import group_plugin
from ..framework.cycle.schedule import POD_SPEC, Decision, schedule_one
from ..framework.events import (ASSIGNED_POD_DELETE, NAMESPACE_LABELS, ActionType, ClusterEvent, ClusterEventWithHint,
                                Resource)
from ..framework.interface import CycleState
from ..framework.model.podinfo import PodInfo
from ..framework.queue.nominator import Nominator
from ..framework.queue.scheduling_queue import QueuedPodInfo, SchedulingQueue
from ..framework.status import Code, Status
from ..logs import MAX_MESSAGE_LEN, decision_fields, failure_fields, fields, truncate
from ..plugins.default_preemption import NAME as PREEMPTION, RESULT_KEY as PREEMPTION_RESULT
from ..timefmt import now_rfc3339
from .group_cycle import GroupCycles
from .ports import Attempts, Binder, Hints, NoHints, Recorder, Rollouts, Victims

if TYPE_CHECKING:  # pragma: no cover
    from ..framework.cycle.chain import Chain
    from ..framework.preemption import PreemptionResult

log = logging.getLogger("policy_scheduler")

CYCLE_START = "policy-scheduler.io/cycle-start"  # CycleState key: perf_counter at the start of the attempt

# What wakes the pods that no plugin rejected but the driver did (pseudo rejectors; the queue's
# pseudo_events).
PSEUDO_EVENTS = {
    # no usable policy: a policy created or changed (a wildcard for that policy's pods), a
    # namespace's labels (a policy's namespaceSelector), or the pod's labels (which name its policy)
    POLICY_SELECTION: (ClusterEventWithHint(NAMESPACE_LABELS),
                       ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_LABEL))),
    # a spec that cannot be parsed: only the pod's own update can fix it
    POD_SPEC: (ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE)),),
}

ResolvePolicy = Callable[[PodInfo], "tuple[PolicyState | None, str]"]


class Scheduler:
    """The driver. ``resolve_policy(pod) -> (PolicyState | None, why)``; ``wake()``: the loop has
    pods to pop again; ``clock``: the queue's; ``pending_policy``: pending pod key -> its policy
    (the pending pods' bookkeeping, pending.py; a bound pod leaves it); ``placement_listeners``:
    called with (pod, policy, node) for every pod bound; ``hints``: told of each single pod that
    found no node, after its FailedScheduling (none by default)."""

    def __init__(self, state: ClusterState, queue: SchedulingQueue, nominator: Nominator,
                 resolve_policy: ResolvePolicy, recorder: Recorder, attempts: Attempts, binder: Binder,
                 victims: Victims, rollouts: Rollouts, rng: random.Random, wake: Callable[[], None], *,
                 clock: Callable[[], float] = time.monotonic, pending_policy: dict[str, str] | None = None,
                 logger: logging.Logger = log, hints: Hints | None = None) -> None:
        self.hints: Hints = hints if hints is not None else NoHints()
        self.state, self.queue, self.nominator, self.resolve_policy = state, queue, nominator, resolve_policy
        self.recorder, self.attempts, self.binder, self.victims = recorder, attempts, binder, victims
        self.rollouts, self.rng, self.wake, self.clock, self.log = rollouts, rng, wake, clock, logger
        self.pending_policy: dict[str, str] = {} if pending_policy is None else pending_policy
        self.placement_listeners: list[Callable[[PodInfo, str, str], None]] = []
        self.bound_count = 0  # pods bound by this process
        # replay (what-if): pod key -> the node it is assumed on instead of the decided one
        self.follow: Mapping[str, str] | None = None
        # kube-scheduler 1.37's pod-group cycle
        self.groups = GroupCycles(state, queue, nominator, recorder, attempts, victims, self.submit, self.nominate,
                                  resolve_policy, rng, logger=logger)

    # ------------------------------------------------------------------ the scheduling cycle
    def schedule(self, qpi: QueuedPodInfo) -> Decision | None:
        """One scheduling cycle: the policy's chain on the snapshot; then Reserve and Permit and
        the binding, or the failure: requeue with the rejecting plugins, a FailedScheduling event,
        and a nomination when a PostFilter made one. None: no single-pod decision (no policy, or
        the pod-group cycle decided)."""
        pod = qpi.pod
        st, why = self.resolve_policy(pod)
        if st is None:
            self.queue.add_unschedulable(qpi, {POLICY_SELECTION})
            self.recorder.failure(pod, "NoPolicy", why, code=None)
            self.attempts.attempt("unschedulable", qpi.policy)
            return None
        qpi.policy = st.name
        chain, arm = self.rollouts.chain_for(st, pod)  # the candidate's for a canary pod
        group = group_plugin(chain)
        if group is not None and group.group_key(pod) is not None:
            self.groups.schedule(qpi, st, chain, group)
            return None
        attempts = self.attempts
        state = CycleState(attempts.cycle_recorder(st.name))
        decision = schedule_one(chain, pod, self.state.table, self.rng, state, self.nominator)
        attempts.algorithm(st.name, chain, state, decision)
        if st.rollout is not None:
            self.rollouts.decided(st, pod, arm, decision, state)
        if not decision.scheduled:  # a scheduled one counts when bound (or failed) in the binding cycle
            attempts.attempt("error" if decision.status.code == Code.ERROR else "unschedulable", st.name,
                             decision.duration)
        lg = self.log
        if lg.isEnabledFor(logging.DEBUG):  # the fields cost more than the decision's bookkeeping: only on demand
            lg.debug("pod %s decided under policy %s: node %s (%d/%d feasible)", pod.key, st.name, decision.node,
                     decision.feasible, decision.evaluated, extra=decision_fields(pod.key, st.name, decision))
        if decision.scheduled:
            self.nominator.remove(pod.key)  # the Binding clears status.nominatedNodeName (API server, v1.35+)
            follow = self.follow
            self.submit(qpi, st, chain, state, decision, None if follow is None else follow.get(pod.key))
            return decision
        self.unschedulable(qpi, st, state, decision, chain)
        return decision

    def unschedulable(self, qpi: QueuedPodInfo, st: PolicyState, state: CycleState, decision: Decision,
                      chain: Chain | None = None) -> None:
        """No node: requeue with the rejecting plugins, FailedScheduling, and the PostFilter's
        preemption or nomination; then the Hints port (``chain``: the one that decided)."""
        pod = qpi.pod
        error = decision.status.code == Code.ERROR
        result = state.read(PREEMPTION_RESULT)
        victims = self.victims_to_delete(result) if result is not None else []
        self.victims.start(pod, victims)  # before the pod is requeued: its PreEnqueue must see it preempting
        self.queue.add_unschedulable(qpi, decision.unschedulable_plugins, error=error,
                                     pending_plugins=decision.pending_plugins)
        st.dirty = True
        msg = decision.message or decision.status.message()
        self.log.info("pod %s unschedulable under policy %s: %s", pod.key, st.name, truncate(msg, MAX_MESSAGE_LEN),
                      extra=failure_fields(pod.key, st.name, decision.unschedulable_plugins, decision.failures, msg))
        # a spec that cannot be parsed is reported once, not at every periodic retry
        self.recorder.failure(pod, "FailedScheduling", msg, code=decision.status.code,
                              once=POD_SPEC in decision.unschedulable_plugins)
        if result is not None:
            self.preempt(pod, result, victims)
        elif decision.nominated_node:
            self.nominate(pod, decision.nominated_node)
        if not error and chain is not None:  # an error is no question of what to change
            self.hints.unschedulable(pod, st, chain, decision)

    # ------------------------------------------------------------------ preemption: the decision half
    def victims_to_delete(self, result: PreemptionResult) -> list[PodInfo]:
        """The victims that need deleting: not those parked at Permit (rejected there, never
        bound) nor those already terminating (upstream: no second DELETE)."""
        if not result.nominated_node or not result.victims:
            return []
        waiting = self.state.waiting
        return [v for v in result.victims if not v.terminating and not (v.uid and waiting.get(v.uid) is not None)]

    def nominate(self, pod: PodInfo, node: str) -> None:
        """A PostFilter nominated ``node``: the pod counts there for pods of lower or equal
        priority, is tried there first next time, and status.nominatedNodeName says so."""
        self.nominator.add(pod, node)
        pod.nominated_node_name = node
        self.recorder.nominate(pod, node)

    def preempt(self, pod: PodInfo, result: PreemptionResult, victims: list[PodInfo]) -> None:
        """Act on DefaultPreemption's choice (upstream prepareCandidateAsync): the preemptor is
        nominated to the node, lower-priority pods nominated there lose their nomination, a victim
        parked at Permit is rejected there; the others (``victims``) go through the Victims port.
        Until they are gone the preemptor is held by DefaultPreemption's PreEnqueue; their
        deletion events then requeue it, and it is tried on its nominated node first."""
        node = result.nominated_node
        if node is None:
            return  # not eligible, or an error: the nomination stays as it is
        self.attempts.preemption_attempt()
        nominator, recorder = self.nominator, self.recorder
        if node == "":
            if pod.nominated_node_name or nominator.node_of(pod.key):  # no candidate: clear an old one
                nominator.remove(pod.key)
                pod.nominated_node_name = ""  # none (as the API's empty field)
                recorder.nominate(pod, None)
            return
        for other in result.clear_nominations:
            nominator.remove(other.key)
            other.nominated_node_name = ""
            recorder.nominate(other, None)
        self.nominate(pod, node)
        if not result.victims:
            return
        waiting = self.state.waiting
        for v in result.victims:
            if v.uid:
                waiting.reject(v.uid, PREEMPTION, "preempted")  # a pod parked at Permit: never bound
        self.victims.delete(pod, result, victims)

    # ------------------------------------------------------------------ Reserve, Permit, binding
    def submit(self, qpi: QueuedPodInfo, st: PolicyState, chain: Chain, state: CycleState, decision: Decision,
               node: str | None = None) -> bool:
        """Assume, Reserve, Permit (ClusterState.reserve) on ``node`` (the decision's unless
        given); then the binding (Binder.start_binding). False when Reserve or Permit failed
        (the pod is requeued and reported)."""
        pod = qpi.pod
        if node is None:
            node = decision.node
        assert node is not None
        state.write(CYCLE_START, time.perf_counter() - decision.duration)
        assumed, status = self.state.reserve(chain, state, pod, node)
        if not status.is_success and status.code != Code.WAIT:
            self.failed(qpi, chain, state, assumed, status, broadcast=False)
            return False
        return self.binder.start_binding(qpi, st, chain, state, decision, assumed, status)

    def not_needed(self, qpi: QueuedPodInfo, chain: Chain, state: CycleState, node: str) -> None:
        """The binding is no longer needed (the pod was bound elsewhere, deleted or replaced):
        undo Reserve, and the pod's flight ends; the watch says where it is."""
        self.state.unreserve(chain, state, qpi.pod, node)
        self.queue.done(qpi.pod.key)

    def count_attempt(self, state: CycleState, policy: str | None, result: str) -> None:
        """One attempt counted once its binding cycle ended (upstream: scheduling + binding)."""
        started = state.read(CYCLE_START)
        self.attempts.attempt(result, policy, None if started is None else time.perf_counter() - started)

    def failed(self, qpi: QueuedPodInfo, chain: Chain, state: CycleState, assumed: PodInfo, status: Status,
               broadcast: bool) -> None:
        """Reserve, Permit or the binding failed: Unreserve on every Reserve plugin in reverse
        order, forget the assumption, requeue the pod (a rejection records the plugin, so its
        events can wake the pod; an error goes through backoff), FailedScheduling naming the
        plugin, a nomination cleared (upstream clearNominatedNode); ``broadcast``: the room it
        held is free again, the other waiting pods may retry (upstream AssignedPodDelete)."""
        pod, node = qpi.pod, assumed.node_name
        queue = self.queue
        self.state.unreserve(chain, state, pod, node)
        rejected = status.is_rejected
        self.count_attempt(state, qpi.policy, "unschedulable" if rejected else "error")
        msg = failure_message(status)
        self.log.warning("pod %s not bound to %s: %s; requeued%s", pod.key, node, msg,
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

    def bound(self, qpi: QueuedPodInfo, st: PolicyState, node: str) -> None:
        """The binding cycle succeeded: the queue, the counters, the Scheduled event, the
        placement listeners."""
        pod = qpi.pod
        key = pod.key
        self.queue.done(key)
        self.bound_count += 1
        st.scheduled += 1
        st.last_scheduled_time = now_rfc3339()
        st.dirty = True
        waited = None if qpi.initial_attempt_timestamp is None else self.clock() - qpi.initial_attempt_timestamp
        if waited is not None:  # the queue's clock
            self.attempts.scheduled(qpi.attempts, waited)
        if st.rollout is not None:
            self.rollouts.bound(st, pod, waited, node)
        recorder = self.recorder
        recorder.forget(key)
        self.pending_policy.pop(key, None)
        recorder.event(pod, "Normal", "Scheduled", "Binding", f"Successfully assigned {key} to {node}")
        for listener in self.placement_listeners:
            listener(pod, st.name, node)
        lg = self.log
        if lg.isEnabledFor(logging.DEBUG):
            lg.debug("pod %s bound to %s under policy %s", key, node, st.name,
                     extra=fields(pod=key, node=node, policy=st.name))
