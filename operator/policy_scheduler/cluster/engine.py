"""The scheduling engine: cache and queue fed by watch events, one scheduling loop, and the
binding cycle (binder.py).

The engine's informers (informer.py) call ``on_node`` / ``on_pod`` / ``on_namespace`` and the
kopf handlers (handlers.py) call ``on_policy``, with the raw object dicts; these only update the
cache and the queue. ``run`` syncs the informers, then is the loop.
Everything runs on one asyncio loop: a cycle is synchronous (pure core) and the loop yields
between pods; bindings, events and status writes are tasks.

Watch events become cluster events for the queue (framework/events.py): a node added, a node
update per changed aspect, an assigned pod added, updated or deleted, a namespace's labels, a
policy change. The queue moves a waiting pod only when a plugin that rejected it registered the
event and its hint says it may help.

The engine delegates, one module each: the binding cycle (binder.py, Binder), policies and
their chains (policies.py, PolicyStore), Events and PodScheduled conditions (recorder.py,
EventRecorder), SchedulingPolicy status (policy_status.py, PolicyStatusWriter), the operator's
own metrics (telemetry.py, Telemetry), and the plugins' Handle (handle.py).

Nothing is lost: a failed binding cycle unreserves, forgets the assumption and requeues the pod;
a pod already bound or deleted is dropped quietly, since the watch then says where it is. On
restart the initial LIST rebuilds everything: bound pods count on their nodes, unbound ones are
queued again, and the API refuses a second binding of a pod.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import time
from dataclasses import replace
from typing import Any, Callable, Mapping

import aiohttp

from .. import DEFAULT_POLICY_LABEL, POLICY_LABEL, SCHEDULER_NAME
from ..framework.binding import WaitingPods
from ..framework.chain import build_chain
from ..framework.events import (ASSIGNED_POD_ADD, ASSIGNED_POD_DELETE, NAMESPACE_LABELS, NODE_ADD, NODE_DELETE,
                                ActionType, ClusterEvent, ClusterEventWithHint, NamespaceChange, Resource,
                                node_change_events, pod_change_events)
from ..framework.interface import CycleState, Handle
from ..framework.native_podgroups import DEFAULT_VERSION as NATIVE_DEFAULT_VERSION, GROUP as NATIVE_GROUP
from ..framework.native_podgroups import VERSIONS as NATIVE_VERSIONS, NativePodGroupCache
from ..framework.native_podgroups import api_path as native_pod_groups_path
from ..framework.nodetable import NodeSpec, NodeTable
from ..framework.nominator import Nominator
from ..framework.podgroups import API_PATH as POD_GROUPS_PATH, PodGroupCache
from ..framework.podinfo import PodInfo, parse_pod
from ..framework.preemption import PDB, PreemptionResult
from ..plugins.default_preemption import NAME as PREEMPTION, RESULT_KEY as PREEMPTION_RESULT
from ..framework.queue import GATED, QueuedPodInfo, SchedulingQueue
from ..framework.registry import Registry
from ..framework.runner import POD_SPEC, Decision, schedule_one
from ..framework.status import Code
from ..framework.volumes import VolumeCache
from ..logs import MAX_MESSAGE_LEN, decision_fields, failure_fields, fields, truncate
from ..metricsources.manager import MetricSources
from ..plugins.priority_sort import PrioritySort
from .binder import DECISION_ANNOTATION, Binder
from .handle import OperatorHandle, PolicyHandle
from .informer import Backoff, Informer
from .leader import Leadership
from .kubeclient import ApiError, KubeClient
from .policies import DEFAULT_POLICY, PLURAL_PATH, POLICY_SELECTION, PolicyState, PolicyStore
from .podgroup_status import PodGroupStatusWriter
from .policy_status import PolicyStatusWriter
from .recorder import EventRecorder, now_rfc3339
from .tasks import Tasks
from .telemetry import Telemetry
from .workloads import WorkloadIndex

__all__ = ["DECISION_ANNOTATION", "Engine", "OperatorHandle", "PolicyHandle"]

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


VOLUME_INFORMERS = (
    ("persistentvolumes", "/api/v1/persistentvolumes"),
    ("persistentvolumeclaims", "/api/v1/persistentvolumeclaims"),
    ("storageclasses", "/apis/storage.k8s.io/v1/storageclasses"),
    ("csinodes", "/apis/storage.k8s.io/v1/csinodes"),
    ("csidrivers", "/apis/storage.k8s.io/v1/csidrivers"),
)
YIELD_EVERY_S = 0.008  # the scheduling loop lets I/O in after at most this much of cycles


def policy_change_event(name: str) -> ClusterEvent:
    """A policy's chain changed: every pod of the policy may schedule differently (a wildcard,
    narrowed to the policy's pods by the caller)."""
    return ClusterEvent(Resource.WILDCARD, ActionType.ALL, f"PolicyChange/{name}")


class Engine:
    """The scheduler: the cache (nodes, pods, namespaces, workloads), the queue, the loop and
    binding. Requires an API client (tests pass an in-memory one)."""

    def __init__(self, client: KubeClient, *, scheduler_name: str = SCHEDULER_NAME,
                 namespaces: set[str] | None = None, bind_concurrency: int = 64,
                 status_interval: float = 2.0, telemetry: Telemetry | None = None,
                 rng: random.Random | None = None, sources: MetricSources | None = None,
                 registry: Registry | None = None, plugin_metrics_sample_percent: float | None = None,
                 leadership: Leadership | None = None, sync_timeout: float = 60.0,
                 default_policy: str = DEFAULT_POLICY) -> None:
        self.client = client
        # who may act: the elected leader only (leader.py); without election, always this process
        self.leadership = leadership or Leadership()
        self.sync_timeout = sync_timeout
        self.scheduler_name = scheduler_name
        self.scope = namespaces  # None: every namespace
        self.table = NodeTable()
        self.queue = SchedulingQueue(less=PrioritySort(None, Handle()).less, profile_of=self._chain_of,
                                     pseudo_events=PSEUDO_EVENTS)
        self.nominator = Nominator()
        self._api_nominated: dict[str, str | None] = {}  # pending pod -> status.nominatedNodeName as last seen
        self.waiting = WaitingPods()  # pods parked by Permit, shared by every policy's handle
        self.namespaces: dict[str, dict[str, str]] = {}
        self.workloads = WorkloadIndex()
        self.pdbs: dict[str, PDB] = {}  # namespace/name -> what DefaultPreemption reads of it
        # PVs, PVCs, StorageClasses, CSINodes, CSIDrivers: what the volume plugins read
        self.volumes = VolumeCache()
        # scheduler-plugins' PodGroups and their members: what Coscheduling reads
        self.pod_groups = PodGroupCache()
        # Kubernetes' own PodGroups (scheduling.k8s.io) and their members: what GangScheduling reads
        self.native_pod_groups = NativePodGroupCache()
        self.native_pod_groups_version = NATIVE_DEFAULT_VERSION  # the API version served (sync reads discovery)
        # preemptor uid -> its last victim's key once only that one is left to delete (None before):
        # upstream Executor.preempting and lastVictimsPendingPreemption
        self.preempting: dict[str, str | None] = {}
        self.sources = sources or MetricSources()
        self.sources.attach(lambda: self.table.names, self._move_for_source)
        self.telemetry = telemetry or Telemetry()
        self.rng = rng or random.Random()
        side_sem = asyncio.Semaphore(32)  # condition and status patches
        self.policy_store = PolicyStore(self.sources, lambda name: PolicyHandle(self, name), registry=registry,
                                        namespaces=self.namespaces, telemetry=self.telemetry,
                                        on_change=self._policy_changed, scheduler_name=scheduler_name,
                                        default_policy=default_policy)
        self.resolve_policy = self.policy_store.resolve_policy
        # metrics: a profile label names an existing policy (else "unknown"); queue moves read at scrape time
        self.telemetry.known_policies = self.policy_store.policies
        self.telemetry.queue_incoming.source = lambda: self.queue.incoming
        if plugin_metrics_sample_percent is not None:
            self.telemetry.plugin_sample_percent = plugin_metrics_sample_percent
        # pods without a usable policy still get the implicit plugins (SchedulingGates holds them)
        self.queue.fallback = build_chain({"plugins": []}, self.policy_store.registry, OperatorHandle(self))
        may_write = self.leadership.valid  # a standby (or a deposed leader) writes nothing
        self.recorder = EventRecorder(client, scheduler_name=scheduler_name, telemetry=self.telemetry,
                                      side_sem=side_sem,
                                      may_write=may_write)
        self.status_writer = PolicyStatusWriter(client, self.policy_store.policies, self.queue, self.sources,
                                                self.telemetry, interval=status_interval, side_sem=side_sem,
                                                may_write=may_write,
                                                admitted_namespaces=self.policy_store.admitted_namespaces)
        self.binder = Binder(self, bind_concurrency)
        self.pod_group_status = PodGroupStatusWriter(self.pod_groups, OperatorHandle(self))
        self.native_pod_group_status = PodGroupStatusWriter(
            self.native_pod_groups, OperatorHandle(self),
            patch=lambda ns, name, status: OperatorHandle(self).patch_native_pod_group_status(ns, name, status))
        self._tasks = Tasks()
        self._wake = asyncio.Event()
        self._stopping = False
        self._pod_policy: dict[str, str] = {}  # pending pod key -> policy it was queued under
        self.bound_by_us = 0
        self.informers: list[Informer] = []
        self.policies_listed: bool = False
        self.policies_error: str | None = None
        self.synced = False  # every informer listed and every SchedulingPolicy loaded
        self.scheduling = False  # the scheduling loop runs (this process leads)
        self.crashed: BaseException | None = None  # why the loop died, if it did
        self.on_leadership_lost: Callable[[], None] | None = None  # the operator exits (cli.py)
        self._election: asyncio.Task | None = None
        # (key, uid) of victims whose DELETE succeeded, until their DELETED event: a late watch
        # event of an older version does not make them look alive again (_mark_terminating)
        self._deleted_victims: set[tuple[str, str]] = set()
        # called with (pod, policy, node) for every pod bound (the tuner's placement log)
        self.placement_listeners: list[Callable[[PodInfo, str, str], None]] = []

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

    def _ours(self, body: Mapping[str, Any]) -> bool:
        spec = body.get("spec") or {}
        if spec.get("schedulerName") != self.scheduler_name:
            return False
        return self.scope is None or (body.get("metadata") or {}).get("namespace") in self.scope

    def _move(self, event: ClusterEvent, old: Any = None, new: Any = None, pre_check=None) -> None:
        if self.queue.move_all_to_active_or_backoff(event, old, new, pre_check=pre_check):
            self.wake()

    def _move_for_source(self, event: ClusterEvent, pre_check=None) -> None:
        """The metric sources' requeue hook (new values may lift their plugins' rejections)."""
        self._move(event, None, None, pre_check)

    # ------------------------------------------------------------------ watch events
    def on_node(self, event: str, body: Mapping[str, Any]) -> None:
        name = (body.get("metadata") or {}).get("name", "")
        row = self.table.index.get(name)
        if event == "DELETED":
            old = self.table.specs[row] if row is not None else None
            self.table.remove_node(name)
            self._capacity_changed()
            self.telemetry.nodes.set(self.table.n)
            if old is not None:
                self._move(NODE_DELETE, old, None)
            return
        spec = NodeSpec.from_dict(body)
        if row is None:
            self.table.upsert_node(spec)
            self.telemetry.nodes.set(self.table.n)
            self._capacity_changed()
            self._move(NODE_ADD, None, spec)
            return
        old = self.table.specs[row]
        events = node_change_events(old, spec)
        if not events and old.images.keys() == spec.images.keys():
            return  # a heartbeat: nothing the scheduler reads changed
        self.table.upsert_node(spec)
        if events:
            self._capacity_changed()
        for ev in events:
            self._move(ev, old, spec)

    def on_namespace(self, event: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        name = meta.get("name", "")
        if event == "DELETED":
            self.namespaces.pop(name, None)
            return
        labels = dict(meta.get("labels") or {})
        old = self.namespaces.get(name)
        if old != labels:
            self.namespaces[name] = labels
            if (old or {}).get(DEFAULT_POLICY_LABEL) != labels.get(DEFAULT_POLICY_LABEL):
                self._namespace_default_changed(name)
            # affinity terms' and policies' namespaceSelectors may admit waiting pods now
            self._move(NAMESPACE_LABELS, None, NamespaceChange(name, old, labels))

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

    def _capacity_changed(self) -> None:
        """Room may have been freed or added: groups waiting as one (either API) may try again."""
        self.pod_groups.capacity_changed()
        self.native_pod_groups.capacity_changed()

    def on_pod(self, event: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        caches = [g for g in (self.pod_groups, self.native_pod_groups) if g.tracks_pod(key, body)]
        if not caches:
            had = key in self.table.pod_node
            self._on_pod(event, body, meta, key)
            if had and key not in self.table.pod_node:
                self._capacity_changed()  # its room is free: groups waiting as one may try again
            return
        # a PodGroup member: the group's counts first (PreEnqueue reads them when the pod is
        # queued), then the pod, then the cluster event that may ungate or wake its siblings
        causes = {id(g): g.group_of(key) for g in caches}
        changes = [ch for g in caches for ch in g.on_pod(event, body)]
        had = key in self.table.pod_node
        self._on_pod(event, body, meta, key)
        if had and key not in self.table.pod_node:
            for g in (self.pod_groups, self.native_pod_groups):
                g.capacity_changed(causes.get(id(g)))  # its own group's release cannot help that group
        for ev, old, new in changes:
            self._move(ev, old, new)

    def _on_pod(self, event: str, body: Mapping[str, Any], meta: Mapping[str, Any], key: str) -> None:
        spec = body.get("spec") or {}
        node = spec.get("nodeName") or ""
        phase = (body.get("status") or {}).get("phase")
        if event == "DELETED" or (node and phase in ("Succeeded", "Failed")):
            self._forget_pending(key)
            if event == "DELETED" and meta.get("uid"):  # upstream: RejectWaitingPod on delete
                self.waiting.reject(str(meta["uid"]), "", f"pod {key} was deleted")
            self._deleted_victims.discard((key, str(meta.get("uid") or "")))
            old = self.table.remove_pod(key)
            if old is not None:  # its room is free: pods waiting for it may fit now
                self._move(ASSIGNED_POD_DELETE, old, None)
            return
        if node:
            self._forget_pending(key)
            if self.table.node_of(key) == node:
                old = self.table.pod(key)
                labels = meta.get("labels") or {}
                status = body.get("status") or {}
                # what preemption reads of a bound pod: its start time, and whether it is terminating
                same_life = old is not None and old.start_time == str(status.get("startTime") or "") \
                    and old.terminating == (meta.get("deletionTimestamp") is not None)
                if same_life and old.uid == meta.get("uid") and old.labels == labels:
                    # our own binding coming back (confirm the assumption), or a status update of a
                    # pod we already count: nothing the cache holds changed, no need to parse it again
                    if key in self.table.assumed:
                        self.table.confirm(key)
                        old.raw = None
                        self._move(ASSIGNED_POD_ADD, None, old)  # bound now: pods waiting on it may go
                    return
                if (same_life and old.uid == meta.get("uid") and not old.spread_constraints
                        and not meta.get("deletionTimestamp")):
                    # only the labels changed (the API server copies the node's topology labels onto
                    # a pod it binds): nothing else derives from them unless spread constraints merge
                    # matchLabelKeys, so the parsed pod is kept with the new labels
                    confirmed = key in self.table.assumed
                    new = replace(old, labels=dict(labels), node_name=node, raw=None)
                    self.table.add_pod(new, node)
                    if confirmed:
                        self._move(ASSIGNED_POD_ADD, None, new)
                    else:
                        for ev in pod_change_events(old, new, target=False):
                            self._move(ev, old, new)
                    return
            prev = self.table.pod(key)
            was_assumed = key in self.table.assumed
            info = parse_pod(body)
            info.raw = None  # nothing reads a bound pod's object: do not keep managedFields & co.
            if not info.terminating and (key, info.uid) in self._deleted_victims:
                # a version older than our DELETE (e.g. its DisruptionTarget condition), seen late
                info.terminating = info.terminating_by_preemption = True
            self.table.add_pod(info, node)  # replaces an assumption: now confirmed
            if prev is None or was_assumed or prev.uid != info.uid:
                self._move(ASSIGNED_POD_ADD, None, info)
            else:
                for ev in pod_change_events(prev, info, target=False):
                    self._move(ev, prev, info)
            return
        if not self._ours(body) or meta.get("deletionTimestamp"):
            return
        if key in self.table.assumed:
            return  # our binding of it is in flight
        pod = parse_pod(body)
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

    def on_pdb(self, event: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        if event == "DELETED":
            self.pdbs.pop(key, None)
        else:
            self.pdbs[key] = PDB.from_dict(body)

    def on_pod_group(self, event: str, body: Mapping[str, Any]) -> None:
        """A scheduler-plugins PodGroup: the cache, then the PodGroup event for the queue."""
        try:
            changes = self.pod_groups.apply(event, body)
        except ValueError as e:  # a spec the scheduler cannot use: the group counts as absent
            meta = body.get("metadata") or {}
            log.warning("PodGroup %s/%s ignored: %s", meta.get("namespace"), meta.get("name"), e)
            return
        for ev, old, new in changes:
            self._move(ev, old, new)

    def on_native_pod_group(self, event: str, body: Mapping[str, Any]) -> None:
        """A scheduling.k8s.io PodGroup: the cache, then the PodGroup event for the queue."""
        try:
            changes = self.native_pod_groups.apply(event, body)
        except ValueError as e:  # a spec the scheduler cannot use: the group counts as absent
            meta = body.get("metadata") or {}
            log.warning("PodGroup %s/%s (%s) ignored: %s", meta.get("namespace"), meta.get("name"), NATIVE_GROUP, e)
            return
        for ev, old, new in changes:
            self._move(ev, old, new)

    async def _native_pod_groups_version(self) -> str:
        """The scheduling.k8s.io version to watch PodGroups in: the first of NATIVE_VERSIONS the
        API server serves (discovery), else the default (the informer then waits for it)."""
        try:
            group = await asyncio.wait_for(self.client.get(f"/apis/{NATIVE_GROUP}"), 10)
            served = {str(v.get("version")) for v in (group or {}).get("versions") or [] if isinstance(v, dict)}
        except (ApiError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            log.debug("discovery of %s failed: %s", NATIVE_GROUP, e)
            served = set()
        for v in NATIVE_VERSIONS:
            if v in served:
                return v
        log.info("%s PodGroups are not served (the GenericWorkload feature gate and --runtime-config "
                 "%s/%s=true enable them); GangScheduling's groups stay empty until they are",
                 NATIVE_GROUP, NATIVE_GROUP, NATIVE_DEFAULT_VERSION)
        return NATIVE_DEFAULT_VERSION

    def _volume_handler(self, kind: str) -> Callable[[str, Mapping[str, Any]], None]:
        def on_event(event: str, body: Mapping[str, Any]) -> None:
            try:
                changes = self.volumes.apply(kind, event, body)
            except (ValueError, TypeError, KeyError) as e:  # one bad object must not stop the informer
                meta = body.get("metadata") or {}
                log.warning("%s %s ignored: %s", kind, meta.get("name"), e)
                return
            for ev, old, new in changes:  # VolumeBinding & co. registered these, with hints
                self._move(ev, old, new)

        return on_event

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

    def on_policy(self, event: str, body: Mapping[str, Any]) -> None:
        """A SchedulingPolicy event (from kopf): see PolicyStore.on_policy."""
        self.policy_store.on_policy(event, body)

    def _policy_changed(self, st: PolicyState) -> None:
        self.status_writer.write_soon(st)
        name = st.name
        self.queue.policy_changed(name)  # its QueueSort may have changed
        self._move(policy_change_event(name), pre_check=lambda q: q.policy == name)

    # ------------------------------------------------------------------ the loop
    def sync_status(self) -> dict[str, str]:
        """What the cache still waits for: informer (or ``schedulingpolicies``) -> why; empty when synced."""
        waiting = {inf.name: inf.last_error or "listing" for inf in self.informers if not inf.synced.is_set()}
        if not self.policies_listed:
            waiting["schedulingpolicies"] = self.policies_error or "listing"
        return waiting

    async def _list_policies(self) -> set[str]:
        """The names of the existing SchedulingPolicies; retried with backoff until the LIST works."""
        backoff = Backoff()
        while True:
            try:
                listed = await self.client.get(PLURAL_PATH)
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                self.policies_error = f"list failed: {e}"
                delay = backoff.next()
                log.warning("schedulingpolicies: %s; retrying in %.1fs", self.policies_error, delay)
                await asyncio.sleep(delay)
                continue
            self.policies_error = None
            return {(i.get("metadata") or {}).get("name") for i in listed.get("items") or []}

    async def _wait_policies(self, policy_timeout: float) -> None:
        names = await self._list_policies()
        deadline = time.monotonic() + policy_timeout
        while names - set(self.policies) - set(self.policy_store.foreign) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        missing = names - set(self.policies) - set(self.policy_store.foreign)
        if missing:
            log.warning("SchedulingPolicies %s listed but not delivered by the watch within %.0fs; "
                        "starting without them", ", ".join(sorted(missing)), policy_timeout)
        self.policies_listed = True

    async def sync(self, policy_timeout: float = 15.0) -> None:
        """Start the informers and wait until nodes, pods and namespaces are listed and every
        existing SchedulingPolicy has been delivered (by kopf): no decision before that.
        Past ``sync_timeout`` the operator says which informer is stuck and why, and keeps
        waiting (readiness fails meanwhile)."""
        t0 = time.monotonic()
        self.native_pod_groups_version = await self._native_pod_groups_version()
        self.informers = [
            Informer(self.client, "/api/v1/nodes", self.on_node, "nodes"),
            Informer(self.client, "/api/v1/namespaces", self.on_namespace, "namespaces"),
            Informer(self.client, "/api/v1/pods", self.on_pod, "pods"),
            # the Services and controllers selecting a pod drive PodTopologySpread's default constraints
            Informer(self.client, "/api/v1/services", self.workloads.on_service, "services"),
            Informer(self.client, "/api/v1/replicationcontrollers", self.workloads.on_replication_controller,
                     "replicationcontrollers"),
            Informer(self.client, "/apis/apps/v1/replicasets", self.workloads.on_replica_set, "replicasets"),
            Informer(self.client, "/apis/apps/v1/statefulsets", self.workloads.on_stateful_set, "statefulsets"),
            # DefaultPreemption spares pods whose PodDisruptionBudget allows no more disruptions
            Informer(self.client, "/apis/policy/v1/poddisruptionbudgets", self.on_pdb, "poddisruptionbudgets"),
            # the volume plugins: claims and volumes (VolumeBinding, VolumeZone, VolumeRestrictions),
            # classes (binding mode, provisioning topology), CSI attach limits (NodeVolumeLimits)
            *(Informer(self.client, path, self._volume_handler(kind), kind) for kind, path in VOLUME_INFORMERS),
            # scheduler-plugins' PodGroups (Coscheduling); their CRD is optional: while it is not
            # installed the kind is empty, and the LIST is tried again in the background
            Informer(self.client, POD_GROUPS_PATH, self.on_pod_group, "podgroups", optional=True),
            # Kubernetes' own PodGroups (GangScheduling), served only with the GenericWorkload gate
            Informer(self.client, native_pod_groups_path(self.native_pod_groups_version), self.on_native_pod_group,
                     f"podgroups.{NATIVE_GROUP}", optional=True),
        ]
        for inf in self.informers:
            self.spawn(inf.run())
        waiting = asyncio.gather(self._wait_policies(policy_timeout), *(inf.synced.wait() for inf in self.informers))
        try:
            while True:
                try:
                    await asyncio.wait_for(asyncio.shield(waiting), timeout=self.sync_timeout)
                    break
                except asyncio.TimeoutError:
                    stuck = self.sync_status()
                    log.error("cache not synced after %.0fs; not ready until it is. Waiting for: %s",
                              time.monotonic() - t0, "; ".join(f"{k} ({v})" for k, v in sorted(stuck.items())),
                              extra=fields(waiting=sorted(stuck)))
        finally:
            if not waiting.done():
                waiting.cancel()
        self.synced = True
        log.info("cache synced in %.1fs: %d nodes, %d bound pods, %d pending, %d policies",
                 time.monotonic() - t0, self.table.n, len(self.table.pod_node), len(self.queue), len(self.policies))

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
        """(live, ready, details) for the probes: live unless the loop died; ready once the cache
        is synced (a standby) and, on the leader, once the scheduling loop runs."""
        lead = self.leadership.describe()
        waiting = self.sync_status() if not self.synced else {}
        live = self.crashed is None
        ready = live and self.synced and (self.scheduling or not self.leadership.leading)
        details: dict[str, Any] = {
            "live": live, "ready": ready, "synced": self.synced, "scheduling": self.scheduling,
            **({"waiting": waiting} if waiting else {}), **lead,
            "nodes": self.table.n, "queued": len(self.queue), "bound": self.bound_by_us,
            "policies": sorted(self.policies)}
        if self.crashed is not None:
            details["error"] = f"the scheduling loop died: {type(self.crashed).__name__}: {self.crashed}"
        return live, ready, details

    async def _run(self) -> None:
        await self.sync()
        await self.sources.start()
        # the cache is built: keep the collector from re-scanning it (full collections over tens of
        # thousands of pod objects otherwise pause the loop for 100+ ms in the middle of bursts)
        gc.collect()
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
        self.recorder.start()
        last_flush = time.monotonic()
        status_task = self.spawn(self.status_writer.run())
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
                if now - last_yield >= YIELD_EVERY_S or self.preempting:
                    await asyncio.sleep(0)
                    last_yield = time.perf_counter()
        finally:
            self.scheduling = False
            status_task.cancel()
            pod_group_task.cancel()
            native_pod_group_task.cancel()

    async def _elect(self) -> None:
        """The leader election (leader.py). It returns only when leadership is lost: stop
        scheduling at once, and let the operator exit."""
        el = self.leadership
        self.telemetry.leader.labels(el.config.name).set(0)
        await el.run()
        self.telemetry.leader.labels(el.config.name).set(0)
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
        the binding task (binder.py), or the failure: requeue with the rejecting plugins, a
        FailedScheduling event, and a nomination when a PostFilter made one."""
        pod = qpi.pod
        st, why = self.resolve_policy(pod)
        if st is None:
            self.queue.add_unschedulable(qpi, {POLICY_SELECTION})
            self.recorder.failure(pod, "NoPolicy", why, code=None)
            self.telemetry.attempt("unschedulable", qpi.policy)
            return None
        qpi.policy = st.name
        chain = st.chain
        state = CycleState(self.telemetry.cycle_recorder(st.name))
        decision = schedule_one(chain, pod, self.table, self.rng, state, self.nominator)
        if not decision.scheduled:  # a scheduled one counts when bound (or failed) in the binding cycle
            self.telemetry.attempt("error" if decision.status.code == Code.ERROR else "unschedulable", st.name,
                                   decision.duration)
        if log.isEnabledFor(logging.DEBUG):  # the fields cost more than the decision's bookkeeping: only on demand
            log.debug("pod %s decided under policy %s: node %s (%d/%d feasible)", pod.key, st.name, decision.node,
                      decision.feasible, decision.evaluated, extra=decision_fields(pod.key, st.name, decision))
        if decision.scheduled:
            self.nominator.remove(pod.key)  # the Binding clears status.nominatedNodeName (API server, v1.35+)
            self.binder.start(qpi, st, chain, state, decision)
            return decision
        error = decision.status.code == Code.ERROR
        result = state.read(PREEMPTION_RESULT)
        victims = self._victims_to_delete(pod, result) if result is not None else []
        if victims and pod.uid:  # before the pod is requeued: its PreEnqueue must see it preempting
            self.preempting[pod.uid] = None
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
            self._preempt(pod, result, victims)
        elif decision.nominated_node:
            self.nominate(pod, decision.nominated_node)
        return decision

    def _victims_to_delete(self, pod: PodInfo, result: PreemptionResult) -> list[PodInfo]:
        """The victims that need an API call: not those parked at Permit (rejected there, never
        bound) nor those already terminating (upstream: no second DELETE)."""
        if not result.nominated_node or not result.victims:
            return []
        return [v for v in result.victims
                if not v.terminating and not (v.uid and self.waiting.get(v.uid) is not None)]

    def is_pod_running_preemption(self, uid: str) -> bool:
        """upstream Executor.IsPodRunningPreemption: the preemptor's victims are still being
        deleted. Once only the last victim is left, the preemption counts as done as soon as the
        cache no longer holds that victim (or holds it terminating), so the victim's deletion
        event, which may arrive before the DELETE call returns, can let the preemptor go."""
        if uid not in self.preempting:
            return False
        last = self.preempting[uid]
        return last is None or not self._victim_gone(last)

    def _preempt(self, pod: PodInfo, result: PreemptionResult, victims: list[PodInfo]) -> None:
        """Act on DefaultPreemption's choice (upstream prepareCandidateAsync), off the loop: the
        preemptor is nominated to the node, lower-priority pods nominated there lose their
        nomination, and each victim gets the DisruptionTarget condition, is deleted and gets a
        Preempted event. Until the victims' deletions are done the preemptor is held by
        DefaultPreemption's PreEnqueue (``is_pod_running_preemption``); the deletion events then
        requeue it, and it is tried on its nominated node first."""
        node = result.nominated_node
        if node is None:
            return  # not eligible, or an error: the nomination stays as it is
        self.telemetry.preemption_attempts.inc()
        if node == "":
            if pod.nominated_node_name or self.nominator.node_of(pod.key):  # no candidate: clear an old one
                self.nominator.remove(pod.key)
                pod.nominated_node_name = None
                self.recorder.nominate(pod, None)
            return
        for other in result.clear_nominations:
            self.nominator.remove(other.key)
            other.nominated_node_name = None
            self.recorder.nominate(other, None)
        self.nominate(pod, node)
        if not result.victims:
            return
        log.info("pod %s preempts %d pods on node %s: %s", pod.key, len(result.victims), node,
                 ", ".join(result.victim_keys), extra=fields(pod=pod.key, node=node, victims=result.victim_keys))
        top = result.victims[0]
        self.recorder.event(pod, "Normal", "Preempting", "Preempting", truncate(
            f"Preempting {len(result.victims)} pod(s) on node {node}: {', '.join(result.victim_keys)} "
            f"(chosen from {result.candidates} candidate node(s) by upstream's order: {result.num_pdb_violations} "
            f"PDB violation(s), highest victim priority {top.priority}, priority sum "
            f"{sum(v.priority for v in result.victims)}, {len(result.victims)} victim(s))", MAX_MESSAGE_LEN))
        self.telemetry.preemption_victims.observe(len(result.victims))
        for v in result.victims:
            if v.uid:
                self.waiting.reject(v.uid, PREEMPTION, "preempted")  # a pod parked at Permit: never bound
        if victims:
            self.spawn(self._delete_victims(pod, victims, node))  # the loop yields next: they start now

    async def _delete_victims(self, pod: PodInfo, victims: list[PodInfo], node: str) -> None:
        """All victims but the last in parallel, then the last one (upstream): the preemptor
        stays gated until the last victim is gone from the cache. On any failure the preemptor
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
            # on a failure; or when the last victim left the cache before it was registered as
            # the last (its deletion event found the preemptor still held, and no later event
            # will look at the gate again): the preemptor goes now. A victim still in the cache,
            # terminating, has its DELETED event to come, which moves the preemptor (tried now,
            # it would find the victim still counted on the node, and wait anyway)
            if not ok or (self.table.pod(victims[-1].key) is None and self.queue.state_of(pod.key) == GATED):
                if self.queue.activate([pod.key]):
                    self.wake()

    def _victim_gone(self, key: str) -> bool:
        victim = self.table.pod(key)
        return victim is None or victim.terminating

    async def _delete_victim(self, victim: PodInfo, preemptor: PodInfo, node: str) -> bool:
        """DisruptionTarget, DELETE (with the victim's uid as precondition) and the Preempted
        event. False when the victim could not be deleted (it being gone already is success)."""
        if not self.leadership.valid():
            return False
        await self.recorder.disruption_target(
            victim, f"{self.scheduler_name}: preempting to accommodate a higher priority pod")
        try:
            await self.client.request("DELETE", f"/api/v1/namespaces/{victim.namespace}/pods/{victim.name}",
                                      {"apiVersion": "v1", "kind": "DeleteOptions",
                                       **({"preconditions": {"uid": victim.uid}} if victim.uid else {})})
        except ApiError as e:
            if e.status in (404, 409):  # gone already, or replaced by a pod of the same name
                self._mark_terminating(victim)
                return True
            log.warning("preemption victim %s not deleted: %s", victim.key, e)
            return False
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            log.warning("preemption victim %s not deleted: %s", victim.key, e)
            return False
        self._mark_terminating(victim)
        self.recorder.event(victim, "Normal", "Preempted", "Preempting",
                            f"Preempted by pod {preemptor.uid} on node {node}")
        return True

    def _mark_terminating(self, victim: PodInfo) -> None:
        """The API server has the victim terminating (or gone): so does the cache, before its watch
        event arrives, which may lag seconds behind in a burst. Until then the victim still counts
        on the node, and a preemptor tried meanwhile waits for it (PodEligibleToPreemptOthers)
        instead of preempting the same pod again."""
        cached = self.table.pod(victim.key)
        if cached is not None and cached.uid == victim.uid:
            self._deleted_victims.add((victim.key, victim.uid))  # until its DELETED event
            if not cached.terminating:
                cached.terminating = cached.terminating_by_preemption = True

    def nominate(self, pod: PodInfo, node: str) -> None:
        """A PostFilter nominated ``node``: the pod counts there for pods of lower or equal
        priority, is tried there first next time, and status.nominatedNodeName says so."""
        self.nominator.add(pod, node)
        pod.nominated_node_name = node
        self.recorder.nominate(pod, node)

    # ------------------------------------------------------------------ binding (see binder.py)
    def forget_assumed(self, key: str) -> None:
        if key in self.table.assumed:
            self.table.remove_pod(key)

    def bound(self, qpi: QueuedPodInfo, st: PolicyState, node: str) -> None:
        """The binding cycle succeeded."""
        pod = qpi.pod
        key = pod.key
        self.queue.done(key)
        self.bound_by_us += 1
        st.scheduled += 1
        st.last_scheduled_time = now_rfc3339()
        st.dirty = True
        if qpi.initial_attempt_timestamp is not None:  # the queue's clock: time.monotonic
            self.telemetry.scheduled(qpi.attempts, time.monotonic() - qpi.initial_attempt_timestamp)
        self.recorder.forget(key)
        self._pod_policy.pop(key, None)
        self.recorder.event(pod, "Normal", "Scheduled", "Binding", f"Successfully assigned {key} to {node}")
        for listener in self.placement_listeners:
            listener(pod, st.name, node)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("pod %s bound to %s under policy %s", key, node, st.name,
                      extra=fields(pod=key, node=node, policy=st.name))
