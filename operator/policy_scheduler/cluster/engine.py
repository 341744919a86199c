"""The scheduling engine: the loop. It syncs the informers, routes their watch events into the
cluster state (cache/state.py) and the cluster events that state returns into the queue, pops
pods and runs one scheduling cycle each (``schedule``).

upstream: ``scheduler.go``, ``eventhandlers.go`` and ``ScheduleOne`` together. It builds the parts
and hands each only what it uses: ClusterState (what plugins read, and what a change means), the
SchedulingQueue, the BindingTasks (binding_tasks.py: Reserve, Permit, the binding task), the
Preemptor (preemptor.py), the API writes (apicalls.py), Events and conditions (recorder.py), policy
status (policy_status.py), the policies' revisions (revisions.py) and the operator's metrics
(telemetry.py). SchedulingPolicies come through an informer too (``on_policy``).

A watch event becomes a binding::

    informer (informer.py) --on_pod/on_node/...--> Engine router
        --> ClusterState.apply_* (cache/state.py): state updated, [(ClusterEvent, old, new)]
        --> pending pod of ours: SchedulingQueue.add (PreEnqueue, policy, nomination)
        --> each cluster event: queue.move_all_to_active_or_backoff (hints) --> wake the loop
    loop: queue.pop --> schedule(): policy's chain --> schedule.schedule_one --> Decision
        --> scheduled: BindingTasks.start: ClusterState.reserve (assume, Reserve, Permit)
             --> task: WaitOnPermit, PreBind, Bind (DefaultBinder --> Handle --> ApiCalls.bind
             --> POST pods/binding) --> PostBind --> Engine.bound (Scheduled event)
        --> not: queue.add_unschedulable, FailedScheduling, Preemptor.preempt or a nomination

Scheduling runs on one asyncio loop: a cycle is synchronous (pure core) and the loop yields
between pods; bindings, events and status writes are tasks, each fenced by the Lease's deadline
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
import random
import time
from typing import Any, Callable, Mapping

from .. import DEFAULT_POLICY_LABEL, POLICY_LABEL, SCHEDULER_NAME
from ..cache.group_cycle import GroupCycles
from ..cache.handle import StateHandle
from ..cache.policies import DEFAULT_POLICY, POLICY_SELECTION, PolicyState, PolicyStore
from ..cache.revisions import DEFAULT_HISTORY_LIMIT
from ..cache.state import ASSIGNED, DRA_KINDS, GONE, PENDING, VOLUME_KINDS, WORKLOAD_KINDS, Change, ClusterState
from ..framework.cycle.podgroup_result import group_plugin
from ..framework.events import (NAMESPACE_LABELS, ActionType, ClusterEvent, ClusterEventWithHint, NamespaceChange,
                                Resource)
from ..framework.interface import CycleState, Handle
from ..framework.queue.nominator import Nominator
from ..framework.model.podinfo import parse_pod
from ..framework.queue.scheduling_queue import QueuedPodInfo, SchedulingQueue
from ..framework.registry import Registry
from ..framework.cycle.schedule import POD_SPEC, Decision, schedule_one
from ..framework.status import Code
from ..logs import MAX_MESSAGE_LEN, decision_fields, failure_fields, fields, truncate
from ..metricsources.manager import MetricSources
from ..plugins.default_preemption import RESULT_KEY as PREEMPTION_RESULT
from ..plugins.priority_sort import PrioritySort
from ..policy.chain import build_chain
from .apicalls import ApiCalls, OperatorActions
from .binding_tasks import DECISION_ANNOTATION, BindingTasks
from .crdcheck import check_crd
from .engine_health import engine_health
from .kubeclient import KubeClient
from .leader import Leadership
from .podgroup_status import PodGroupStatusWriter
from .policy_status import PolicyStatusWriter
from .preemptor import Preemptor
from .recorder import EventRecorder, now_rfc3339
from .revisions import Revisions
from .rollout_controller import RolloutController
from .sync import COMPOSITE_PODGROUPS, NATIVE_PODGROUPS, POLICIES, Sync
from .tasks import Tasks
from .telemetry import Telemetry

__all__ = ["DECISION_ANNOTATION", "Engine"]

log = logging.getLogger("policy_scheduler")

# What wakes the pods that no plugin rejected but the engine did (pseudo rejectors).
PSEUDO_EVENTS = {
    # no usable policy: a policy created or changed (a wildcard for that policy's pods), a
    # namespace's labels (a policy's namespaceSelector), or the pod's labels (which name its policy)
    POLICY_SELECTION: (ClusterEventWithHint(NAMESPACE_LABELS),
                       ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_LABEL))),
    # a spec that cannot be parsed: only the pod's own update can fix it
    POD_SPEC: (ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE)),),
}
YIELD_EVERY_S = 0.008  # the scheduling loop lets I/O in after at most this much of cycles


def policy_change_event(name: str) -> ClusterEvent:
    """A policy's chain changed: every pod of the policy may schedule differently (a wildcard,
    narrowed to the policy's pods by the caller)."""
    return ClusterEvent(Resource.WILDCARD, ActionType.ALL, f"PolicyChange/{name}")


class Engine:
    """The scheduler's loop over the cluster state and the queue. Requires an API client (unit
    tests pass an in-memory one)."""

    def __init__(self, client: KubeClient, *, scheduler_name: str = SCHEDULER_NAME,
                 namespaces: set[str] | None = None, bind_concurrency: int = 64,
                 status_interval: float = 2.0, telemetry: Telemetry | None = None,
                 rng: random.Random | None = None, sources: MetricSources | None = None,
                 registry: Registry | None = None, plugin_metrics_sample_percent: float | None = None,
                 leadership: Leadership | None = None, sync_timeout: float = 60.0,
                 default_policy: str = DEFAULT_POLICY, revision_namespace: str | None = None,
                 revision_history_limit: int = DEFAULT_HISTORY_LIMIT) -> None:
        self.client = client
        # who may act: the elected leader only (leader.py); without election, always this process
        self.leadership = leadership or Leadership()
        self.scheduler_name = scheduler_name
        self.scope = namespaces  # None: every namespace
        self.state = ClusterState()
        state = self.state
        self.queue = SchedulingQueue(less=PrioritySort(None, Handle()).less, profile_of=self._chain_of,
                                     pseudo_events=PSEUDO_EVENTS)
        self.nominator = Nominator()
        self._api_nominated: dict[str, str | None] = {}  # pending pod -> status.nominatedNodeName as last seen
        self._pod_policy: dict[str, str] = {}  # pending pod key -> policy it was queued under
        self.sources = sources or MetricSources()
        self.sources.attach(lambda: state.table.names, self._move_for_source)
        self.telemetry = telemetry or Telemetry()
        tel = self.telemetry
        self.rng = rng or random.Random()
        self._tasks = Tasks()
        self._wake = asyncio.Event()
        side_sem = asyncio.Semaphore(32)  # condition and status patches
        may_write, fence = self.leadership.valid, self.leadership.time_left  # a standby writes nothing; fenced
        self.recorder = EventRecorder(client, scheduler_name=scheduler_name, telemetry=tel, side_sem=side_sem,
                                      may_write=may_write, fence=fence)
        self.api = ApiCalls(client, self.leadership, tel, lambda: self.informers.native_version)
        self.preemptor = Preemptor(state, self.queue, self.nominator, self.recorder, self.api, tel, self.spawn,
                                   self.wake, scheduler_name)
        actions = OperatorActions(self.api, self._activate,
                                  lambda pod, reason, msg, code: self.recorder.failure(pod, reason, msg, code=code),
                                  self.preemptor.is_running, self.spawn)
        self.policy_store = PolicyStore(
            self.sources, lambda name: StateHandle(state, self.policy_store, self.sources, name, actions),
            registry=registry, namespaces=state.namespaces, on_counts=self._count_policies,
            on_change=self._policy_changed, scheduler_name=scheduler_name, default_policy=default_policy)
        self.resolve_policy = self.policy_store.resolve_policy
        # the Handle of the implicit plugins (pods without a usable policy) and of the status writers
        self.handle = handle = StateHandle(state, self.policy_store, self.sources, None, actions)
        # metrics: profile labels of existing policies; queue and cache read at scrape time; leader-only series
        tel.attach(self.policy_store.policies, lambda: self.queue.incoming, lambda: state.table,
                   lambda: self.leadership.leading, client)
        if plugin_metrics_sample_percent is not None:
            tel.plugin_sample_percent = plugin_metrics_sample_percent
        # pods without a usable policy still get the implicit plugins (SchedulingGates holds them)
        self.queue.fallback = build_chain({"plugins": []}, self.policy_store.registry, handle)
        self.status_writer = PolicyStatusWriter(client, self.policy_store.policies, self.queue, self.sources, tel,
                                                interval=status_interval, side_sem=side_sem, may_write=may_write,
                                                admitted_namespaces=self.policy_store.admitted_namespaces, fence=fence)
        self.binding_tasks = BindingTasks(state, self.queue, self.recorder, tel, self.spawn, self.wake, self.bound,
                                          bind_concurrency)
        # kube-scheduler 1.37's pod-group cycle (cache/group_cycle.py)
        self.groups = GroupCycles(state, self.queue, self.nominator, self.recorder, tel, self.preemptor,
                                  self.binding_tasks, self.resolve_policy, self.rng, group_metrics=tel)
        # every valid generation recorded as a ControllerRevision; the last valid one read back at
        # the sync point (revisions.py); off without a namespace
        self.revisions = Revisions(client, self.policy_store, self.api, namespace=revision_namespace,
                                   history_limit=revision_history_limit, may_write=may_write,
                                   on_recorded=self.status_writer.write_soon)
        # spec.rollout: the candidate's shadow, canary, analysis, rollback and promotion
        self.rollouts = RolloutController(state, self.policy_store.policies, self.nominator, self.recorder, tel,
                                          self.api.patch_policy, self._requeue_policy, self.status_writer.write_soon,
                                          may_write, key=self.binding_tasks.key, read=lambda p: client.get(p))
        self.pod_group_status = PodGroupStatusWriter(state.pod_groups, handle)
        self.native_pod_group_status = PodGroupStatusWriter(state.native_pod_groups, handle,
                                                            patch=self.api.patch_native_pod_group_status)
        self._stopping = False
        self.bound_by_us = 0
        self.informers = Sync(client, lambda kind: tel.timed_handler(kind, self.route(kind)), self.spawn, sync_timeout,
                              tel)
        self.synced = False  # every informer listed (SchedulingPolicies included)
        self.scheduling = False  # the scheduling loop runs (this process leads)
        self.crashed: BaseException | None = None  # why the loop died, if it did
        self.on_leadership_lost: Callable[[], None] | None = None  # the operator exits (cli.py)
        self._election: asyncio.Task | None = None
        # called with (pod, policy, node) for every pod bound (the tuner's placement log)
        self.placement_listeners: list[Callable[[Any, str, str], None]] = []

    @property
    def policies(self) -> dict[str, PolicyState]:
        """Every SchedulingPolicy by name (the policy store's)."""
        return self.policy_store.policies

    # ------------------------------------------------------------------ helpers
    def _chain_of(self, policy: str):
        st = self.policy_store.policies.get(policy)
        return st.chain if st is not None else None

    def spawn(self, coro) -> asyncio.Task:
        return self._tasks.spawn(coro)

    def wake(self) -> None:
        self._wake.set()

    def _count_policies(self, ready: int, not_ready: int) -> None:
        self.telemetry.policies.labels("true").set(ready)
        self.telemetry.policies.labels("false").set(not_ready)

    def _activate(self, keys) -> int:
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

    def _move_for_source(self, event: ClusterEvent, pre_check=None) -> None:
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
                self._queue_pending(body)
        elif outcome is GONE or outcome is ASSIGNED:
            meta = body.get("metadata") or {}
            self._forget_pending(f"{meta.get('namespace', 'default')}/{meta.get('name', '')}")
            if outcome is ASSIGNED:
                self.rollouts.seen_bound(body)  # a canary's pods count where the cluster shows them
        if changes:
            self._moves(changes)

    def _queue_pending(self, body: Mapping[str, Any]) -> None:
        """upstream addPodToSchedulingQueue / updatePodInSchedulingQueue: its policy, its
        nomination as the API says (or as a PostFilter just made it), then the queue."""
        pod = parse_pod(body)
        key = pod.key
        policy = self.policy_store.policy_name(pod)
        api_was = self._api_nominated.get(key)
        self._api_nominated[key] = pod.nominated_node_name
        if pod.nominated_node_name:
            self.nominator.add(pod, pod.nominated_node_name)
        elif self.nominator.node_of(key) is not None:
            if api_was:  # the API took the nomination away
                self.nominator.remove(key)
            else:
                # upstream UpdateNominatedPod: an update without nominatedNodeName right after a
                # PostFilter nominated the pod in memory (our status patch not applied yet, or an
                # older write seen now) keeps the reservation, else another pod takes its room
                pod.nominated_node_name = self.nominator.node_of(key)
                self.nominator.add(pod, pod.nominated_node_name)
        self._pod_policy[key] = policy
        active = self.queue.active_count
        self.queue.add(pod, policy)  # for a known pod: an update (which may ungate it)
        if self.queue.active_count > active:
            self.wake()

    def _forget_pending(self, key: str) -> None:
        self.queue.delete(key)
        self.nominator.remove(key)
        self._api_nominated.pop(key, None)
        self.recorder.forget(key)
        pol = self._pod_policy.pop(key, None)
        if pol:
            st = self.policy_store.policies.get(pol)
            if st is not None:
                st.dirty = True

    def _namespace_default_changed(self, namespace: str) -> None:
        """The namespace's default-policy label changed: its pending pods without a policy label
        now belong to another policy, and are tried again at once under it."""
        prefix = namespace + "/"
        moved = []
        for key, policy in list(self._pod_policy.items()):
            if not key.startswith(prefix):
                continue
            qpi = self.queue.get(key)
            if qpi is None or POLICY_LABEL in qpi.pod.labels:
                continue
            new = self.policy_store.policy_name(qpi.pod)
            if new != policy:
                self.queue.add(qpi.pod, new)
                self._pod_policy[key] = new
                moved.append(key)
        if moved and self.queue.activate(moved):
            self.wake()
        if moved:
            log.info("namespace %s: default policy now %s for %d pending pods", namespace,
                     self.policy_store.default_policy_of(namespace), len(moved))

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

    def _policy_changed(self, st: PolicyState) -> None:
        self.status_writer.write_soon(st)
        self.revisions.policy_changed(st)
        self.queue.policy_changed(st.name)  # its QueueSort may have changed
        self._requeue_policy(st.name)

    def _requeue_policy(self, name: str) -> None:
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
                    self._wake.clear()
                    delay = self.queue.next_ready_in()
                    try:
                        await asyncio.wait_for(self._wake.wait(), timeout=min(delay if delay is not None else 5.0, 5.0))
                    except asyncio.TimeoutError:
                        pass
                    continue
                self.schedule(qpi)
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
        """One scheduling cycle: the policy's chain on the snapshot; then Reserve and Permit and
        the binding task (binding_tasks.py), or the failure: requeue with the rejecting plugins, a
        FailedScheduling event, and a nomination when a PostFilter made one."""
        pod = qpi.pod
        st, why = self.resolve_policy(pod)
        if st is None:
            self.queue.add_unschedulable(qpi, {POLICY_SELECTION})
            self.recorder.failure(pod, "NoPolicy", why, code=None)
            self.telemetry.attempt("unschedulable", qpi.policy)
            return None
        qpi.policy = st.name
        chain, arm = self.rollouts.chain_for(st, pod)  # the candidate's for a canary pod
        group = group_plugin(chain)
        if group is not None and group.group_key(pod) is not None:
            self.groups.schedule(qpi, st, chain, group)
            return None
        state = CycleState(self.telemetry.cycle_recorder(st.name))
        decision = schedule_one(chain, pod, self.state.table, self.rng, state, self.nominator)
        self.telemetry.algorithm(st.name, chain, state, decision)
        if st.rollout is not None:
            self.rollouts.decided(st, pod, arm, decision, state)
        if not decision.scheduled:  # a scheduled one counts when bound (or failed) in the binding cycle
            self.telemetry.attempt("error" if decision.status.code == Code.ERROR else "unschedulable", st.name,
                                   decision.duration)
        if log.isEnabledFor(logging.DEBUG):  # the fields cost more than the decision's bookkeeping: only on demand
            log.debug("pod %s decided under policy %s: node %s (%d/%d feasible)", pod.key, st.name, decision.node,
                      decision.feasible, decision.evaluated, extra=decision_fields(pod.key, st.name, decision))
        if decision.scheduled:
            self.nominator.remove(pod.key)  # the Binding clears status.nominatedNodeName (API server, v1.35+)
            self.binding_tasks.start(qpi, st, chain, state, decision)
            return decision
        error = decision.status.code == Code.ERROR
        result = state.read(PREEMPTION_RESULT)
        victims = self.preemptor.victims_to_delete(pod, result) if result is not None else []
        self.preemptor.start(pod, victims)  # before the pod is requeued: its PreEnqueue must see it preempting
        self.queue.add_unschedulable(qpi, decision.unschedulable_plugins, error=error,
                                     pending_plugins=decision.pending_plugins)
        st.dirty = True
        msg = decision.message or decision.status.message()
        log.info("pod %s unschedulable under policy %s: %s", pod.key, st.name, truncate(msg, MAX_MESSAGE_LEN),
                 extra=failure_fields(pod.key, st.name, decision.unschedulable_plugins, decision.failures, msg))
        # a spec that cannot be parsed is reported once, not at every periodic retry
        self.recorder.failure(pod, "FailedScheduling", msg, code=decision.status.code,
                              once=POD_SPEC in decision.unschedulable_plugins)
        if result is not None:
            self.preemptor.preempt(pod, result, victims)
        elif decision.nominated_node:
            self.preemptor.nominate(pod, decision.nominated_node)
        return decision

    # ------------------------------------------------------------------ binding (see binding_tasks.py)
    def bound(self, qpi: QueuedPodInfo, st: PolicyState, node: str) -> None:
        """The binding cycle succeeded."""
        pod = qpi.pod
        key = pod.key
        self.queue.done(key)
        self.bound_by_us += 1
        st.scheduled += 1
        st.last_scheduled_time = now_rfc3339()
        st.dirty = True
        waited = None if qpi.initial_attempt_timestamp is None else time.monotonic() - qpi.initial_attempt_timestamp
        if waited is not None:  # the queue's clock: time.monotonic
            self.telemetry.scheduled(qpi.attempts, waited)
        if st.rollout is not None:
            self.rollouts.bound(st, pod, waited, node)
        self.recorder.forget(key)
        self._pod_policy.pop(key, None)
        self.recorder.event(pod, "Normal", "Scheduled", "Binding", f"Successfully assigned {key} to {node}")
        for listener in self.placement_listeners:
            listener(pod, st.name, node)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("pod %s bound to %s under policy %s", key, node, st.name,
                      extra=fields(pod=key, node=node, policy=st.name))
