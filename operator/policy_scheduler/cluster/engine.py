"""The scheduling engine: the loop. It syncs the informers, routes their watch events into the
cluster state (cache/state.py) and the cluster events that state returns into the queue, pops
pods and hands each to the scheduling driver (scheduler/schedule_one.py).

upstream: ``scheduler.go`` and ``eventhandlers.go``; ``ScheduleOne`` is the driver's. serve.py's
``build_engine`` builds the parts and hands each only what it uses: ClusterState (what plugins
read, and what a change means), the SchedulingQueue, the pending pods (scheduler/pending.py), the
driver with the operator's ports: the BindingTasks (binding_tasks.py: the binding task), the
Preemptor (preemptor.py: the victims' deletions), Events and conditions (recorder.py) and the
operator's metrics (telemetry.py); the API writes (apicalls.py), policy status
(policy_status.py) and the policies' revisions (revisions.py). SchedulingPolicies come through an
informer too (``on_policy``).

A watch event becomes a binding::

    informer (informer.py) --on_pod/on_node/...--> Engine router
        --> ClusterState.apply_* (cache/state.py): state updated, [(ClusterEvent, old, new)]
        --> pending pod of ours: PendingPods.add (policy, nomination) --> SchedulingQueue.add (PreEnqueue)
        --> each cluster event: queue.move_all_to_active_or_backoff (hints) --> wake the loop
    loop: queue.pop --> Scheduler.schedule (scheduler/schedule_one.py): policy's chain
        --> schedule.schedule_one --> Decision (or the pod-group cycle, scheduler/group_cycle.py)
        --> scheduled: Scheduler.submit: ClusterState.reserve (assume, Reserve, Permit)
             --> BindingTasks.start_binding --> task: WaitOnPermit, PreBind, Bind (DefaultBinder
             --> Handle --> ApiCalls.bind --> POST pods/binding) --> PostBind
             --> Scheduler.bound (Scheduled event)
        --> not: queue.add_unschedulable, FailedScheduling, Scheduler.preempt (Preemptor.delete)
            or a nomination

Scheduling runs on one asyncio loop: a cycle is synchronous (pure core) and the loop yields
between pods; while it has no pod to pop it runs the suggestions' searches, one at a time
(suggestions.py); bindings, events and status writes are tasks, each fenced by the Lease's deadline
when it is sent. The Lease is renewed on its own thread and client (leader.py) and the admission
webhooks serve on theirs (webhook_server.py), so a busy loop costs neither. Nothing is lost: a failed binding
cycle unreserves, forgets the assumption and requeues the pod; a pod already bound or deleted is
dropped quietly, since the watch then says where it is. On restart the initial LIST rebuilds
everything: bound pods count on their nodes, unbound ones are queued again, and the API refuses a
second binding of a pod.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any, Callable, Mapping

from .. import DEFAULT_POLICY_LABEL
from ..cache.handle import StateHandle
from ..cache.policies import PolicyState, PolicyStore
from ..cache.state import ASSIGNED, DRA_KINDS, GONE, PENDING, VOLUME_KINDS, WORKLOAD_KINDS, Change, ClusterState
from ..framework.cycle.schedule import Decision
from ..framework.events import ActionType, ClusterEvent, NamespaceChange, Resource
from ..framework.queue.nominator import Nominator
from ..framework.queue.scheduling_queue import QueuedPodInfo, SchedulingQueue
from ..metricsources.manager import MetricSources
from ..scheduler.pending import PendingPods
from ..scheduler.schedule_one import Scheduler
from .apicalls import ApiCalls
from .binding_tasks import DECISION_ANNOTATION, BindingTasks
from .crdcheck import check_crd
from .engine_health import engine_health
from .kubeclient import KubeClient
from .leader import Leadership
from .podgroup_status import PodGroupStatusWriter
from .policy_status import PolicyStatusWriter
from .preemptor import Preemptor
from .recorder import EventRecorder
from .revisions import Revisions
from .rollout_controller import RolloutController
from .suggestions import SuggestionWorker
from .sync import COMPOSITE_PODGROUPS, NATIVE_PODGROUPS, POLICIES, Sync
from .tasks import Tasks
from .telemetry import Telemetry

__all__ = ["DECISION_ANNOTATION", "Engine"]

log = logging.getLogger("policy_scheduler")

YIELD_EVERY_S = 0.008  # the scheduling loop lets I/O in after at most this much of cycles
QUIET_POLL_S = 0.05  # how soon a search waiting for the bindings in flight to end looks again


def policy_change_event(name: str) -> ClusterEvent:
    """A policy's chain changed: every pod of the policy may schedule differently (a wildcard,
    narrowed to the policy's pods by the caller)."""
    return ClusterEvent(Resource.WILDCARD, ActionType.ALL, f"PolicyChange/{name}")


class Engine:
    """The scheduler's loop over the cluster state and the queue. Built by serve.py's
    ``build_engine`` (the composition root), which hands it its parts."""

    def __init__(self, client: KubeClient, *, scheduler_name: str, scope: set[str] | None, leadership: Leadership,
                 state: ClusterState, queue: SchedulingQueue, nominator: Nominator, pending: PendingPods,
                 driver: Scheduler, sources: MetricSources, telemetry: Telemetry, tasks: Tasks, wake: asyncio.Event,
                 recorder: EventRecorder, api: ApiCalls, preemptor: Preemptor, binding_tasks: BindingTasks,
                 policy_store: PolicyStore, handle: StateHandle, status_writer: PolicyStatusWriter,
                 revisions: Revisions, rollouts: RolloutController, pod_group_status: PodGroupStatusWriter,
                 native_pod_group_status: PodGroupStatusWriter, informers: Sync,
                 suggestions: SuggestionWorker | None = None) -> None:
        self.client, self.scheduler_name, self.leadership = client, scheduler_name, leadership
        self.scope = scope  # None: every namespace
        self.state, self.queue, self.nominator, self.pending, self.driver = state, queue, nominator, pending, driver
        self.sources, self.telemetry, self.recorder, self.api = sources, telemetry, recorder, api
        self.preemptor, self.binding_tasks = preemptor, binding_tasks
        self.policy_store, self.handle = policy_store, handle
        self.resolve_policy = policy_store.resolve_policy
        self.status_writer, self.revisions, self.rollouts = status_writer, revisions, rollouts
        self.pod_group_status, self.native_pod_group_status = pod_group_status, native_pod_group_status
        self.informers = informers
        self.suggestions = suggestions  # None: run --suggestions=off
        self._tasks, self._wake = tasks, wake
        self.spawn, self.wake = tasks.spawn, wake.set
        self.rng = driver.rng
        # called with (pod, policy, node) for every pod bound (the tuner's placement log)
        self.placement_listeners = driver.placement_listeners
        self._stopping = False
        self.synced = False  # every informer listed (SchedulingPolicies included)
        self.scheduling = False  # the scheduling loop runs (this process leads)
        self.crashed: BaseException | None = None  # why the loop died, if it did
        self.on_leadership_lost: Callable[[], None] | None = None  # the operator exits (cli.py)
        self._election: asyncio.Task | None = None

    @property
    def policies(self) -> dict[str, PolicyState]:
        """Every SchedulingPolicy by name (the policy store's)."""
        return self.policy_store.policies

    @property
    def bound_by_us(self) -> int:
        """Pods this process bound (the driver's count)."""
        return self.driver.bound_count

    # ------------------------------------------------------------------ helpers
    def activate(self, keys) -> int:
        """upstream PodsToActivate: pods in flight (waiting at Permit) stay as they are."""
        q = self.queue
        moved = q.activate([k for k in keys if k in q])
        if moved:
            self.wake()
        return moved

    def _ours(self, body: Mapping[str, Any]) -> bool:
        spec = body.get("spec") or {}
        if spec.get("schedulerName") != self.scheduler_name:
            return False
        return self.scope is None or (body.get("metadata") or {}).get("namespace") in self.scope

    def _move(self, event: ClusterEvent, old: Any = None, new: Any = None, pre_check=None) -> None:
        if self.queue.move_all_to_active_or_backoff(event, old, new, pre_check=pre_check):
            self.wake()

    def _moves(self, changes: list[Change]) -> None:
        move = self.queue.move_all_to_active_or_backoff
        woke = False
        for ev, old, new in changes:
            if move(ev, old, new):
                woke = True
        if woke:
            self.wake()

    def move_for_source(self, event: ClusterEvent, pre_check=None) -> None:
        """The metric sources' requeue hook (new values may lift their plugins' rejections)."""
        self._move(event, None, None, pre_check)

    # ------------------------------------------------------------------ watch events: routing
    def on_node(self, event: str, body: Mapping[str, Any]) -> None:
        changes = self.state.apply_node(event, body)
        if changes:
            self.telemetry.nodes.set(self.state.table.n)
            self._moves(changes)

    def on_namespace(self, event: str, body: Mapping[str, Any]) -> None:
        changes = self.state.apply_namespace(event, body)
        for _, _, ch in changes:
            if isinstance(ch, NamespaceChange) and \
                    (ch.old_labels or {}).get(DEFAULT_POLICY_LABEL) != (ch.new_labels or {}).get(DEFAULT_POLICY_LABEL):
                self._namespace_default_changed(ch.name)
        self._moves(changes)  # affinity terms' and policies' namespaceSelectors may admit waiting pods now
        self.revisions.namespaces_changed()  # the revision namespace may have appeared (or gone)

    def on_pod(self, event: str, body: Mapping[str, Any]) -> None:
        """upstream's pod event handlers: the state first (an assigned pod is counted, a deleted
        one freed); a pending pod of ours goes to the queue; then the cluster events."""
        outcome, changes = self.state.apply_pod(event, body)
        if outcome is PENDING:
            if self._ours(body):
                self.pending.add(body)
        elif outcome is GONE or outcome is ASSIGNED:
            meta = body.get("metadata") or {}
            self.pending.forget(f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")
            if outcome is ASSIGNED:
                self.rollouts.seen_bound(body)  # a canary's pods count where the cluster shows them
        if changes:
            self._moves(changes)

    def _namespace_default_changed(self, namespace: str) -> None:
        """The namespace's default-policy label changed: its pending pods without a policy label
        now belong to another policy, and are tried again at once under it (pending.py)."""
        moved = self.pending.namespace_default_changed(namespace)
        if moved:
            log.info("namespace %s: default policy now %s for %d pending pods", namespace,
                     self.policy_store.default_policy_of(namespace), moved)

    def _router(self, apply: Callable[..., list[Change]], *kind: str) -> Callable[[str, Mapping[str, Any]], None]:
        """An informer's handler for a kind the engine only routes: state, then the queue."""
        def on_event(event: str, body: Mapping[str, Any]) -> None:
            changes = apply(*kind, event, body)
            if changes:
                self._moves(changes)

        return on_event

    def on_policy(self, event: str, body: Mapping[str, Any]) -> None:
        """A SchedulingPolicy event (its informer): see PolicyStore.on_policy. A generation that
        cannot be read (policy/limits.py) also gets a Warning event on the policy."""
        self.policy_store.on_policy(event, body)
        self._report_unreadable()

    def _report_unreadable(self) -> None:
        """A Warning event for each unreadable generation not reported yet; only while leading
        (a replica that starts to lead reports what it saw as a standby)."""
        if not self.leadership.valid():
            return
        for st in self.policy_store.policies.values():
            if st.unreadable is None or st.unreadable_reported == (st.generation, st.unreadable):
                continue
            st.unreadable_reported = (st.generation, st.unreadable)
            then = (f"pods are still scheduled with generation {st.chain_generation}" if st.chain
                    else "it is not used until it is fixed")
            self.recorder.policy_event(st.name, st.uid or None, "Warning", "Unreadable", "Loading",
                                       f"generation {st.generation} cannot be read: {st.unreadable}; {then}")

    def policy_changed(self, st: PolicyState) -> None:
        self.status_writer.write_soon(st)
        self.revisions.policy_changed(st)
        self.queue.policy_changed(st.name)  # its QueueSort may have changed
        self.requeue_policy(st.name)

    def requeue_policy(self, name: str) -> None:
        """The policy's chain changed (or a rollout moved): its waiting pods are tried again."""
        self._move(policy_change_event(name), pre_check=lambda q: q.policy == name)

    # ------------------------------------------------------------------ the loop
    def route(self, kind: str) -> Callable[[str, Mapping[str, Any]], None]:
        """The handler of one kind's watch events (an informer's callback): nodes, namespaces,
        pods and SchedulingPolicies by the engine's own handlers, every other kind of cache/state.KINDS and the PodGroups
        of both APIs ("podgroups", NATIVE_PODGROUPS) straight into the state, then the queue."""
        own = {"nodes": self.on_node, "namespaces": self.on_namespace, "pods": self.on_pod,
               POLICIES: self.on_policy}
        if kind in own:
            return own[kind]
        st = self.state
        if kind in WORKLOAD_KINDS:
            return self._router(st.apply_workload, kind)
        if kind in VOLUME_KINDS:
            return self._router(st.apply_volume, kind)
        if kind in DRA_KINDS:
            return self._router(st.apply_dra, kind)
        return self._router({"poddisruptionbudgets": st.apply_pdb, "podgroups": st.apply_pod_group,
                             NATIVE_PODGROUPS: st.apply_native_pod_group,
                             COMPOSITE_PODGROUPS: st.apply_composite_pod_group}[kind])

    async def sync(self) -> None:
        """Start the informers and wait until every kind is listed, SchedulingPolicies included
        (sync.py); then give each invalid policy without a chain its last valid revision
        (revisions.py): no decision before that."""
        took = await self.informers.run()
        await self.revisions.restore_all()  # invalid policies without a chain: their last valid revision
        self.synced = True
        self.spawn(check_crd(self.client))  # an older CRD drops fields: say so (crdcheck.py), off the sync
        table = self.state.table
        log.info("cache synced in %.1fs: %d nodes, %d bound pods, %d pending, %d policies",
                 took, table.n, len(table.pod_node), len(self.queue), len(self.policies))

    async def run(self) -> None:
        """Sync; wait for leadership (a standby stays here, its cache kept warm by the watches);
        then pop, decide, assume, bind asynchronously; until ``stop`` or leadership is lost.
        Should it die, ``crashed`` says why (liveness fails)."""
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            self.crashed = e
            raise

    def health(self) -> tuple[bool, bool, dict[str, Any]]:
        """(live, ready, details) for the probes (engine_health.py)."""
        return engine_health(self)

    async def _run(self) -> None:
        # the first LISTs decode every object of the cluster: the collector would scan the growing
        # cache again and again while nothing of it is garbage (a third of the sync at 50,000
        # pods); it waits until the cache is built
        gc.disable()
        try:
            await self.sync()
        finally:
            gc.enable()
        self.spawn(self.revisions.run())
        await self.sources.start()
        # the cache is built: keep the collector from re-scanning it (full collections over tens of
        # thousands of pod objects otherwise pause the loop for 100+ ms in the middle of bursts).
        # No collection first: decoding the LISTs leaves no cycles to collect, and one full pass
        # over 50,000 pods' objects cost 0.4 s before the first decision
        gc.freeze()
        gc.set_threshold(20000, 50, 100)
        if self.leadership.elected:  # as kube-scheduler: only a replica with a synced cache runs for leader
            self._election = asyncio.get_running_loop().create_task(self._elect())
            if not self.leadership.leading:
                log.info("cache synced; standing by until this replica leads")
        await self.leadership.wait_acquired()
        if self._stopping:
            return
        if self.leadership.elected:
            self.telemetry.leader.labels(self.leadership.config.name).set(1)
        for st in self.policies.values():  # the previous leader wrote them: ours replace them
            st.dirty = True
        self.revisions.lead()  # the previous leader may not have recorded every valid generation
        self.recorder.start()
        self._report_unreadable()
        last_flush = time.monotonic()
        status_task = self.spawn(self.status_writer.run())
        rollout_task = self.spawn(self.rollouts.run())
        pod_group_task = self.spawn(self.pod_group_status.run())
        native_pod_group_task = self.spawn(self.native_pod_group_status.run())
        self.scheduling = True
        log.info("scheduling: %d pods waiting", len(self.queue))
        schedule = self.driver.schedule
        last_yield = time.perf_counter()
        try:
            while not self._stopping:
                if not self.leadership.valid():  # a renewal is overdue: decide nothing more
                    await asyncio.sleep(0.1)
                    continue
                if time.monotonic() - last_flush > 30:
                    last_flush = time.monotonic()
                    if self.queue.flush_unschedulable_leftover():
                        self.wake()
                qpi = self.queue.pop()
                if qpi is None:
                    hints = self.suggestions
                    # no pod to place, none being bound, no victim being deleted: one search for a
                    # pod that found no node (suggestions.py), then watch events and bindings get
                    # in before the queue is asked again
                    quiet = self.binding_tasks.binding == 0 and not self.preemptor.preempting
                    if hints is not None and quiet and hints.step():
                        await asyncio.sleep(0)
                        last_yield = time.perf_counter()
                        continue
                    self._wake.clear()
                    delay = self.queue.next_ready_in()
                    retry = hints.retry_in() if hints is not None else None
                    if retry is not None and not quiet:  # look again soon: the bindings end in ms
                        retry = min(retry, QUIET_POLL_S)
                    if retry is not None:
                        delay = retry if delay is None else min(delay, retry)
                    try:
                        await asyncio.wait_for(self._wake.wait(), timeout=min(delay if delay is not None else 5.0, 5.0))
                    except asyncio.TimeoutError:
                        pass
                    continue
                schedule(qpi)
                # let watch events, bindings and victim deletions in: every few ms of cycles (eight
                # plain cycles); and after every cycle while a preemption's victims are being deleted
                # (from the preemption on: its API calls start at once, and a victim's DELETED event
                # already read reaches the cache before its preemptor is tried again)
                now = time.perf_counter()
                if now - last_yield >= YIELD_EVERY_S or self.preemptor.preempting:
                    await asyncio.sleep(0)
                    last_yield = time.perf_counter()
        finally:
            self.scheduling = False
            status_task.cancel()
            rollout_task.cancel()
            pod_group_task.cancel()
            native_pod_group_task.cancel()

    async def _elect(self) -> None:
        """The leader election (leader.py). It returns only when leadership is lost: stop
        scheduling at once, and let the operator exit."""
        el = self.leadership
        self.telemetry.leader.labels(el.config.name).set(0)
        await el.run()
        self.telemetry.stepped_down(el.config.name)
        self._stopping = True
        self.wake()
        if self.on_leadership_lost is not None:
            self.on_leadership_lost()

    async def stop(self) -> None:
        """Stop the loop and every task; then give up the Lease (held or not, a standby's
        election ends too), so a standby takes over at once."""
        self._stopping = True
        self.wake()
        await self.sources.stop()
        await self.recorder.stop()
        await self.status_writer.stop()
        await self._tasks.cancel_all()
        if self._election is not None:
            self._election.cancel()
            await asyncio.gather(self._election, return_exceptions=True)
            if self.leadership.elected:
                self.telemetry.leader.labels(self.leadership.config.name).set(0)

    def schedule(self, qpi: QueuedPodInfo) -> Decision | None:
        """One scheduling cycle (scheduler/schedule_one.py)."""
        return self.driver.schedule(qpi)
