"""The scheduling engine: cache and queue fed by watch events, one scheduling loop, asynchronous
binding.

The engine's informers (informer.py) call ``on_node`` / ``on_pod`` / ``on_namespace`` and the
kopf handlers (handlers.py) call ``on_policy``, with the raw object dicts; these only update the
cache and the queue. ``run`` syncs the informers, then is the loop.
Everything runs on one asyncio loop: a cycle is synchronous (pure core) and the loop yields
between pods; bindings, events and status writes are tasks.

The engine delegates, one module each: policies and their chains (policies.py, PolicyStore),
Events and PodScheduled conditions (recorder.py, EventRecorder), SchedulingPolicy status
(policy_status.py, PolicyStatusWriter), the operator's own metrics (telemetry.py, Telemetry),
and the plugins' Handle (handle.py).

Nothing is lost: a failed bind forgets the assumption and requeues the pod with backoff; a pod
already bound (409) or deleted (404) is dropped quietly, since the watch then says where it is.
On restart the initial LIST rebuilds everything: bound pods count on their nodes, unbound ones
are queued again, and the API refuses a second binding of a pod.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import time
from dataclasses import replace
from typing import Any, Mapping

import aiohttp
import orjson

from .. import SCHEDULER_NAME
from ..framework.interface import Handle
from ..framework.nodetable import NodeSpec, NodeTable
from ..framework.podinfo import parse_pod
from ..framework.queue import QueuedPodInfo, SchedulingQueue
from ..framework.registry import Registry
from ..framework.runner import Decision, schedule_one
from ..framework.status import Code
from ..metricsources.manager import MetricSources
from ..plugins.priority_sort import PrioritySort
from .handle import OperatorHandle, PolicyHandle
from .informer import Informer
from .kubeclient import ApiError, KubeClient
from .policies import PLURAL_PATH, POLICY_SELECTION, PolicyState, PolicyStore, policy_name
from .policy_status import PolicyStatusWriter
from .recorder import EventRecorder, now_rfc3339
from .telemetry import Telemetry
from .workloads import WorkloadIndex

__all__ = ["DECISION_ANNOTATION", "Engine", "OperatorHandle", "PolicyHandle"]

log = logging.getLogger("policy_scheduler")

DECISION_ANNOTATION = "policy-scheduler.io/decision"


def _rounded(v: Any) -> Any:
    """Plugin details for the decision annotation, floats (numpy's too) to 3 decimals."""
    if isinstance(v, float):
        return round(float(v), 3)
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v


class Engine:
    """The scheduler: the cache (nodes, pods, namespaces, workloads), the queue, the loop and
    binding. Requires an API client (tests pass an in-memory one)."""

    def __init__(self, client: KubeClient, *, scheduler_name: str = SCHEDULER_NAME,
                 namespaces: set[str] | None = None, bind_concurrency: int = 64,
                 status_interval: float = 2.0, telemetry: Telemetry | None = None,
                 rng: random.Random | None = None, sources: MetricSources | None = None,
                 registry: Registry | None = None) -> None:
        self.client = client
        self.scheduler_name = scheduler_name
        self.scope = namespaces  # None: every namespace
        self.table = NodeTable()
        self.queue = SchedulingQueue(less=PrioritySort(None, Handle()).less)
        self.namespaces: dict[str, dict[str, str]] = {}
        self.workloads = WorkloadIndex()
        self.sources = sources or MetricSources()
        self.sources.attach(lambda: self.table.names, self._move)
        self.telemetry = telemetry or Telemetry()
        self.rng = rng or random.Random()
        side_sem = asyncio.Semaphore(32)  # condition and status patches
        self.policy_store = PolicyStore(self.sources, lambda name: PolicyHandle(self, name), registry=registry,
                                        namespaces=self.namespaces, telemetry=self.telemetry,
                                        on_change=self._policy_changed)
        self.resolve_policy = self.policy_store.resolve_policy
        self.recorder = EventRecorder(client, scheduler_name=scheduler_name, telemetry=self.telemetry,
                                      pods_waiting=lambda: self.queue.counts()["active"] > 0, side_sem=side_sem)
        self.status_writer = PolicyStatusWriter(client, self.policy_store.policies, self.queue, self.sources,
                                                self.telemetry, interval=status_interval, side_sem=side_sem)
        self._bind_sem = asyncio.Semaphore(bind_concurrency)
        self._tasks: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._stopping = False
        self._first_seen: dict[str, float] = {}
        self._pod_policy: dict[str, str] = {}  # pending pod key -> policy it was queued under
        self.bound_by_us = 0
        self.informers: list[Informer] = []
        self.synced = False

    @property
    def policies(self) -> dict[str, PolicyState]:
        """Every SchedulingPolicy by name (the policy store's)."""
        return self.policy_store.policies

    # ------------------------------------------------------------------ helpers
    def _spawn(self, coro) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    def wake(self) -> None:
        self._wake.set()

    def _ours(self, body: Mapping[str, Any]) -> bool:
        spec = body.get("spec") or {}
        if spec.get("schedulerName") != self.scheduler_name:
            return False
        return self.scope is None or (body.get("metadata") or {}).get("namespace") in self.scope

    def _move(self, event: str, pre_check=None) -> None:
        if self.queue.move_all_to_active_or_backoff(event, pre_check):
            self.wake()

    # ------------------------------------------------------------------ watch events
    def on_node(self, event: str, body: Mapping[str, Any]) -> None:
        name = (body.get("metadata") or {}).get("name", "")
        if event == "DELETED":
            self.table.remove_node(name)
            self.telemetry.nodes.set(self.table.n)
            return
        spec = NodeSpec.from_dict(body)
        row = self.table.index.get(name)
        if row is not None:
            old = self.table.specs[row]
            if (old.labels == spec.labels and old.taints == spec.taints and old.unschedulable == spec.unschedulable
                    and old.allocatable == spec.allocatable and old.images.keys() == spec.images.keys()):
                return  # a heartbeat: nothing the scheduler reads changed
        self.table.upsert_node(spec)
        self.telemetry.nodes.set(self.table.n)
        self._move("NodeAdd" if row is None else "NodeUpdate")

    def on_namespace(self, event: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        name = meta.get("name", "")
        if event == "DELETED":
            self.namespaces.pop(name, None)
            return
        labels = dict(meta.get("labels") or {})
        if self.namespaces.get(name) != labels:
            self.namespaces[name] = labels
            self._move("NamespaceChange")  # a policy's namespaceSelector may admit waiting pods now

    def on_pod(self, event: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        spec = body.get("spec") or {}
        node = spec.get("nodeName") or ""
        phase = (body.get("status") or {}).get("phase")
        if event == "DELETED" or (node and phase in ("Succeeded", "Failed")):
            self._forget_pending(key)
            if self.table.remove_pod(key) is not None:
                self._move("AssignedPodDelete")
            return
        if node:
            self._forget_pending(key)
            if self.table.node_of(key) == node:
                old = self.table.pod(key)
                labels = meta.get("labels") or {}
                if old is not None and old.uid == meta.get("uid") and old.labels == labels:
                    # our own binding coming back (confirm the assumption), or a status update of a
                    # pod we already count: nothing the cache holds changed, no need to parse it again
                    if key in self.table.assumed:
                        self.table.confirm(key)
                        old.raw = None
                    return
                if (old is not None and old.uid == meta.get("uid") and not old.spread_constraints
                        and not meta.get("deletionTimestamp")):
                    # only the labels changed (the API server copies the node's topology labels onto
                    # a pod it binds): nothing else derives from them unless spread constraints merge
                    # matchLabelKeys, so the parsed pod is kept with the new labels
                    self.table.add_pod(replace(old, labels=dict(labels), node_name=node, raw=None), node)
                    return
            info = parse_pod(body)
            info.raw = None  # nothing reads a bound pod's object: do not keep managedFields & co.
            self.table.add_pod(info, node)  # replaces an assumption: now confirmed
            return
        if not self._ours(body) or meta.get("deletionTimestamp"):
            return
        if key in self.table.assumed:
            return  # our binding of it is in flight
        pod = parse_pod(body)
        policy = policy_name(pod)
        self._first_seen.setdefault(key, time.monotonic())
        self._pod_policy[key] = policy
        known = key in self.queue or self.queue.is_in_flight(key)
        self.queue.add(pod, policy)  # for a known pod: an update
        if not known:
            self.wake()

    def _forget_pending(self, key: str) -> None:
        self.queue.delete(key)
        self._first_seen.pop(key, None)
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
        self._move("PolicyChange")

    # ------------------------------------------------------------------ the loop
    async def sync(self, policy_timeout: float = 15.0) -> None:
        """Start the informers and wait until nodes, pods and namespaces are listed and every
        existing SchedulingPolicy has been delivered (by kopf): no decision before that."""
        t0 = time.monotonic()
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
        ]
        for inf in self.informers:
            self._spawn(inf.run())
        await asyncio.gather(*(inf.synced.wait() for inf in self.informers))
        try:
            listed = await self.client.get(PLURAL_PATH)
            names = {(i.get("metadata") or {}).get("name") for i in listed.get("items") or []}
        except (ApiError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            log.warning("cannot list SchedulingPolicies (%s); starting without waiting for them", e)
            names = set()
        deadline = time.monotonic() + policy_timeout
        while names - set(self.policies) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        log.info("cache synced in %.1fs: %d nodes, %d bound pods, %d pending, %d policies",
                 time.monotonic() - t0, self.table.n, len(self.table.pod_node), len(self.queue), len(self.policies))

    async def run(self) -> None:
        """Sync, then pop, decide, assume, bind asynchronously; until ``stop``."""
        await self.sync()
        await self.sources.start()
        # the cache is built: keep the collector from re-scanning it (full collections over tens of
        # thousands of pod objects otherwise pause the loop for 100+ ms in the middle of bursts)
        gc.collect()
        gc.freeze()
        gc.set_threshold(20000, 50, 100)
        self.recorder.start()
        self.synced = True
        last_flush = time.monotonic()
        status_task = self._spawn(self.status_writer.run())
        n = 0
        try:
            while not self._stopping:
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
                n += 1
                if n % 8 == 0:
                    await asyncio.sleep(0)  # let watch events and bindings in
        finally:
            status_task.cancel()

    async def stop(self) -> None:
        self._stopping = True
        self.wake()
        await self.sources.stop()
        await self.recorder.stop()
        await self.status_writer.stop()
        tasks = list(self._tasks)
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def schedule(self, qpi: QueuedPodInfo) -> Decision | None:
        pod = qpi.pod
        st, why = self.resolve_policy(pod)
        if st is None:
            self.queue.add_unschedulable(qpi, {POLICY_SELECTION})
            self.recorder.failure(pod, "NoPolicy", why, code=None)
            self.telemetry.attempt("unschedulable", qpi.policy)
            return None
        qpi.policy = st.name
        decision = schedule_one(st.chain, pod, self.table, self.rng)
        result = "scheduled" if decision.scheduled else (
            "error" if decision.status.code == Code.ERROR else "unschedulable")
        self.telemetry.attempt(result, st.name, decision.duration)
        if decision.scheduled:
            self.table.add_pod(pod, decision.node, assumed=True)
            self._spawn(self._bind(qpi, st, decision))
        else:
            error = decision.status.code == Code.ERROR
            self.queue.add_unschedulable(qpi, decision.unschedulable_plugins, error=error)
            st.dirty = True
            msg = decision.message or decision.status.message()
            log.info("pod %s unschedulable under policy %s: %s", pod.key, st.name, msg)
            self.recorder.failure(pod, "FailedScheduling", msg, code=decision.status.code)
        return decision

    # ------------------------------------------------------------------ binding
    def decision_annotation(self, policy: str, d: Decision) -> str:
        return orjson.dumps({
            "policy": policy, "node": d.node, "nodes": d.num_all_nodes, "evaluated": d.evaluated,
            "feasible": d.feasible, "at": now_rfc3339(),
            "top": [{"node": s.node, "total": s.total, "scores": {k: v[1] for k, v in s.plugins.items()},
                     **({"details": _rounded(s.details)} if s.details else {})}
                    for s in d.top[:3]],
            "failures": dict(sorted(d.failures.items(), key=lambda kv: -kv[1])[:8]),
        }).decode()

    def _forget_assumed(self, key: str) -> None:
        if key in self.table.assumed:
            self.table.remove_pod(key)

    def _bind_failed(self, qpi: QueuedPodInfo, node: str, why: str) -> None:
        log.warning("binding %s to %s failed: %s; requeued with backoff", qpi.key, node, why)
        self._forget_assumed(qpi.key)
        self.queue.add_unschedulable(qpi, error=True)
        self.recorder.failure(qpi.pod, "FailedScheduling", f"Binding rejected: {why}", code=Code.ERROR)
        self.wake()

    async def _bind(self, qpi: QueuedPodInfo, st: PolicyState, d: Decision) -> None:
        pod, node = qpi.pod, d.node
        key = pod.key
        async with self._bind_sem:
            t0 = time.perf_counter()
            try:
                await self.client.bind(pod.namespace, pod.name, node, uid=pod.uid or None,
                                       annotations={DECISION_ANNOTATION: self.decision_annotation(st.name, d)})
            except ApiError as e:
                self.telemetry.bind_errors.labels(str(e.status)).inc()
                if e.status in (404, 409):
                    # deleted, already bound, or replaced by a new pod of that name: the watch has the truth
                    log.info("binding %s to %s not needed: %s", key, node, e)
                    self._forget_assumed(key)
                    self.queue.done(key)
                    return
                self._bind_failed(qpi, node, str(e))
                return
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                self.telemetry.bind_errors.labels("transport").inc()
                self._bind_failed(qpi, node, f"{type(e).__name__}: {e}")
                return
            except Exception as e:  # a bug must not strand the pod: requeue it like any failure
                log.exception("binding %s to %s: unexpected error", key, node)
                self.telemetry.bind_errors.labels("internal").inc()
                self._bind_failed(qpi, node, f"{type(e).__name__}: {e}")
                return
            self.telemetry.binding_duration.observe(time.perf_counter() - t0)
        self.queue.done(key)
        self.bound_by_us += 1
        st.scheduled += 1
        st.last_scheduled_time = now_rfc3339()
        st.dirty = True
        seen = self._first_seen.pop(key, None)
        if seen is not None:
            self.telemetry.e2e_duration.observe(time.monotonic() - seen)
        self.recorder.forget(key)
        self._pod_policy.pop(key, None)
        self.recorder.event(pod, "Normal", "Scheduled", "Binding", f"Successfully assigned {key} to {node}")
