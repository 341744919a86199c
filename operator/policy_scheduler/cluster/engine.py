"""The scheduling engine: cache and queue fed by watch events, one scheduling loop, asynchronous
binding, FailedScheduling events and pod conditions, and batched policy status.

The engine's informers (informer.py) call ``on_node`` / ``on_pod`` / ``on_namespace`` and the
kopf handlers (handlers.py) call ``on_policy``, with the raw object dicts; these only update the
cache and the queue. ``run`` syncs the informers, then is the loop.
Everything runs on one asyncio loop: a cycle is synchronous (pure core) and the loop yields
between pods; bindings, events and status writes are tasks.

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
import socket
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Mapping

import aiohttp
import orjson
from pydantic import ValidationError

from .. import POLICY_LABEL, SCHEDULER_NAME
from ..api.models import SchedulingPolicySpec
from ..framework.chain import Chain, ChainError, build_chain
from ..plugins import default_registry
from ..framework.interface import Handle
from ..framework.labels import LabelSelector, SelectorError
from ..framework.metricview import SOURCE as METRICS_SOURCE
from ..framework.nodetable import NodeSpec, NodeTable
from ..framework.podinfo import PodInfo, parse_pod
from ..framework.queue import UNSCHEDULABLE, QueuedPodInfo, SchedulingQueue
from ..framework.runner import Decision, schedule_one
from ..framework.status import Code
from ..metricsources.manager import MetricSources
from ..plugins.priority_sort import PrioritySort
from .informer import Informer
from .kubeclient import ApiError, KubeClient
from .telemetry import Telemetry
from .workloads import WorkloadIndex

log = logging.getLogger("policy_scheduler")

DEFAULT_POLICY = "default"
DECISION_ANNOTATION = "policy-scheduler.io/decision"
POLICY_SELECTION = "PolicySelection"  # pseudo plugin name for pods no usable policy selects
EVENT_NOTE_LIMIT = 1024
EVENT_QUEUE_SIZE = 10000  # like upstream's recorder: a bounded queue; when full, events are dropped
EVENT_WORKERS = 4  # few on purpose: bindings come first, events trail behind in a burst
EVENT_MAX_DELAY = 2.0  # seconds an event may be held back while pods are waiting to be scheduled
PLURAL_PATH = "/apis/policy-scheduler.io/v1alpha1/schedulingpolicies"


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _rounded(v: Any) -> Any:
    """Plugin details for the decision annotation, floats (numpy's too) to 3 decimals."""
    if isinstance(v, float):
        return round(float(v), 3)
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v


def truncate_note(msg: str) -> str:
    """upstream truncates event notes to 1024 characters, ending in " ..."."""
    return msg if len(msg) <= EVENT_NOTE_LIMIT else msg[: EVENT_NOTE_LIMIT - 4] + " ..."


@dataclass
class PolicyState:
    name: str
    generation: int = 0
    spec_raw: Any = None
    # the chain pods are scheduled with: that of the last valid generation. An invalid edit of a
    # working policy keeps it (and says so in the status) instead of stranding the policy's pods.
    chain: Chain | None = None
    chain_generation: int = 0
    good_spec: Any = None
    errors: list[str] = field(default_factory=list)  # problems of the current generation
    namespace_selector: LabelSelector | None = None
    scheduled: int = 0
    last_scheduled_time: str | None = None
    dirty: bool = True
    last_written: dict | None = None

    @property
    def ready(self) -> bool:
        return self.chain is not None and not self.errors


class OperatorHandle(Handle):
    """Plugins' view of the world outside the core, answered from the engine's caches."""

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.engine.namespaces.get(namespace)

    def all_namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return self.engine.namespaces

    def default_spread_selector(self, pod: PodInfo):
        return self.engine.workloads.default_selector(pod)

    def source(self, name: str):
        return self.engine.sources.view(name)


class PolicyHandle(OperatorHandle):
    """The handle of one policy's plugins: ``source(metricview.SOURCE)`` is that policy's metrics."""

    def __init__(self, engine: "Engine", policy: str) -> None:
        super().__init__(engine)
        self.policy = policy

    def source(self, name: str):
        return self.engine.sources.view(self.policy) if name == METRICS_SOURCE else None


class Engine:
    def __init__(self, client: KubeClient | None, *, scheduler_name: str = SCHEDULER_NAME,
                 namespaces: set[str] | None = None, bind_concurrency: int = 64,
                 status_interval: float = 2.0, telemetry: Telemetry | None = None,
                 rng: random.Random | None = None, sources: MetricSources | None = None) -> None:
        self.client = client
        self.scheduler_name = scheduler_name
        self.scope = namespaces  # None: every namespace
        self.table = NodeTable()
        self.queue = SchedulingQueue(less=PrioritySort(None, Handle()).less)
        self.policies: dict[str, PolicyState] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.workloads = WorkloadIndex()
        self.sources = sources or MetricSources()
        self.sources.attach(lambda: self.table.names, self._move)
        self.telemetry = telemetry or Telemetry()
        self.rng = rng or random.Random()
        self.status_interval = status_interval
        self.instance = f"{scheduler_name}-{socket.gethostname()}"
        self._bind_sem = asyncio.Semaphore(bind_concurrency)
        self._side_sem = asyncio.Semaphore(32)  # condition and status patches
        self._events: asyncio.Queue = asyncio.Queue(EVENT_QUEUE_SIZE)
        self._tasks: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._stopping = False
        self._first_seen: dict[str, float] = {}
        self._last_failure: dict[str, tuple[str, float]] = {}  # pod key -> (message, time posted)
        self._pod_policy: dict[str, str] = {}  # pending pod key -> policy it was queued under
        self.bound_by_us = 0
        self.informers: list[Informer] = []
        self.synced = False

    # ------------------------------------------------------------------ helpers
    def _spawn(self, coro) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    def wake(self) -> None:
        self._wake.set()

    def _policy_name(self, pod: PodInfo) -> str:
        return pod.labels.get(POLICY_LABEL) or DEFAULT_POLICY

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
        policy = self._policy_name(pod)
        self._first_seen.setdefault(key, time.monotonic())
        self._pod_policy[key] = policy
        known = key in self.queue or self.queue.is_in_flight(key)
        self.queue.add(pod, policy)  # for a known pod: an update
        if not known:
            self.wake()

    def _forget_pending(self, key: str) -> None:
        self.queue.delete(key)
        self._first_seen.pop(key, None)
        self._last_failure.pop(key, None)
        pol = self._pod_policy.pop(key, None)
        if pol and pol in self.policies:
            self.policies[pol].dirty = True

    def on_policy(self, event: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        name = meta.get("name", "")
        if event == "DELETED":
            st = self.policies.pop(name, None)
            self.sources.policy_deleted(name)
            if st is not None:
                log.info("SchedulingPolicy %s deleted; its pods wait until a policy selects them", name)
                self._update_policy_gauge()
            return
        gen = int(meta.get("generation") or 0)
        st = self.policies.get(name)
        spec = body.get("spec")
        if st is not None and st.generation == gen and st.spec_raw == spec:
            return  # our own status write, or a resync
        if st is None:
            st = self.policies[name] = PolicyState(name)
        st.generation, st.spec_raw, st.dirty = gen, spec, True
        try:
            parsed = SchedulingPolicySpec.model_validate(spec or {})
            ns_selector = (None if parsed.namespace_selector is None else LabelSelector.parse(
                parsed.namespace_selector.model_dump(by_alias=True, exclude_none=True), "spec.namespaceSelector"))
            chain = build_chain(parsed.chain_spec(), default_registry(), handle=PolicyHandle(self, name))
            problems = self.sources.policy_updated(name, parsed)
            if problems:
                raise ChainError(problems)
        except ValidationError as e:
            st.errors = [f"spec.{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()]
        except ChainError as e:
            st.errors = [f"spec.{x}" for x in e.errors]
        except SelectorError as e:
            st.errors = [str(e)]
        else:
            if st.chain is not None:
                chain.next_start_node_index = st.chain.next_start_node_index
            st.chain, st.chain_generation, st.good_spec, st.errors = chain, gen, parsed, []
            st.namespace_selector = ns_selector
        if st.ready:
            log.info("SchedulingPolicy %s (generation %d) is ready: %s", name, gen,
                     ", ".join(p.name for p in st.chain.resolved))
        elif st.chain is not None:
            self.sources.policy_updated(name, st.good_spec)  # the last valid generation keeps its metrics
            log.warning("SchedulingPolicy %s generation %d is invalid: %s; still scheduling with generation %d",
                        name, gen, "; ".join(st.errors), st.chain_generation)
        else:
            self.sources.policy_deleted(name)  # an invalid policy reads no metrics
            log.warning("SchedulingPolicy %s (generation %d) is invalid: %s", name, gen, "; ".join(st.errors))
        self._update_policy_gauge()
        self._spawn(self._write_policy_status(st))
        self._move("PolicyChange")

    def _update_policy_gauge(self) -> None:
        ready = sum(1 for p in self.policies.values() if p.ready)
        self.telemetry.policies.labels("true").set(ready)
        self.telemetry.policies.labels("false").set(len(self.policies) - ready)

    # ------------------------------------------------------------------ the loop
    async def sync(self, policy_timeout: float = 15.0) -> None:
        """Start the informers and wait until nodes, pods and namespaces are listed and every
        existing SchedulingPolicy has been delivered (by kopf): no decision before that."""
        assert self.client is not None
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
        if self.client is not None:
            await self.sync()
        await self.sources.start()
        # the cache is built: keep the collector from re-scanning it (full collections over tens of
        # thousands of pod objects otherwise pause the loop for 100+ ms in the middle of bursts)
        gc.collect()
        gc.freeze()
        gc.set_threshold(20000, 50, 100)
        for _ in range(EVENT_WORKERS):
            self._spawn(self._event_worker())
        self.synced = True
        last_flush = time.monotonic()
        status_task = self._spawn(self._status_loop())
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
        tasks = list(self._tasks)
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def resolve_policy(self, pod: PodInfo) -> tuple[PolicyState | None, str]:
        name = self._policy_name(pod)
        st = self.policies.get(name)
        explicit = POLICY_LABEL in pod.labels
        if st is None:
            if explicit:
                return None, f"SchedulingPolicy {name!r} (label {POLICY_LABEL}) does not exist"
            return None, (f"no SchedulingPolicy selects this pod: it has no {POLICY_LABEL} label "
                          f"and there is no policy named {DEFAULT_POLICY!r}")
        if st.chain is None:
            return None, f"SchedulingPolicy {name!r} is not Ready: {'; '.join(st.errors)}"
        if st.namespace_selector is not None and not st.namespace_selector.matches(
                self.namespaces.get(pod.namespace, {})):
            return None, f"SchedulingPolicy {name!r} does not admit pods of namespace {pod.namespace!r}"
        return st, ""

    def schedule(self, qpi: QueuedPodInfo) -> Decision | None:
        pod = qpi.pod
        st, why = self.resolve_policy(pod)
        if st is None:
            self.queue.add_unschedulable(qpi, {POLICY_SELECTION})
            self._report_failure(pod, "NoPolicy", why, code=None)
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
            self._report_failure(pod, "FailedScheduling", msg, code=decision.status.code)
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
        self._report_failure(qpi.pod, "FailedScheduling", f"Binding rejected: {why}", code=Code.ERROR)
        self.wake()

    async def _bind(self, qpi: QueuedPodInfo, st: PolicyState, d: Decision) -> None:
        pod, node = qpi.pod, d.node
        key = pod.key
        async with self._bind_sem:
            t0 = time.perf_counter()
            try:
                if self.client is None:
                    raise RuntimeError("no API client")
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
        self._last_failure.pop(key, None)
        self._pod_policy.pop(key, None)
        self._record_event(pod, "Normal", "Scheduled", "Binding", f"Successfully assigned {key} to {node}")

    # ------------------------------------------------------------------ events, conditions, status
    def _report_failure(self, pod: PodInfo, reason: str, msg: str, code: Code | None) -> None:
        last = self._last_failure.get(pod.key)
        now = time.monotonic()
        if last is not None and last[0] == msg and now - last[1] < 60:
            return  # same message recently: no new event, no new condition write
        self._last_failure[pod.key] = (msg, now)
        self._record_event(pod, "Warning", reason, "Scheduling", msg)
        cond_reason = "SchedulerError" if code == Code.ERROR else "Unschedulable"
        self._spawn(self._patch_condition(pod, cond_reason, msg))

    def _record_event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str) -> None:
        """Queue a Kubernetes Event; workers post them (asynchronous, as upstream's recorder)."""
        if self.client is None:
            return
        try:
            self._events.put_nowait((pod, type_, reason, action, note, now_micro()))
        except asyncio.QueueFull:
            self.telemetry.events_dropped.labels("event-queue-full").inc()

    async def _event_worker(self) -> None:
        """Post queued events. While pods wait to be scheduled, bindings have the API server first:
        an event waits until the burst is over, or at most EVENT_MAX_DELAY seconds."""
        while True:
            item = await self._events.get()
            queued = time.monotonic()
            while self.queue.counts()["active"] and time.monotonic() - queued < EVENT_MAX_DELAY:
                await asyncio.sleep(0.05)
            await self._post_event(*item)

    async def _post_event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str,
                          event_time: str) -> None:
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
            await self.client.post(f"/apis/events.k8s.io/v1/namespaces/{pod.namespace}/events", body)
        except (ApiError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            self.telemetry.events_dropped.labels("event").inc()
            log.warning("event %s for %s not recorded: %s", reason, pod.key, e)

    async def _patch_condition(self, pod: PodInfo, reason: str, msg: str) -> None:
        if self.client is None:
            return
        body = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": reason,
                                           "message": msg, "lastTransitionTime": now_rfc3339()}]}}
        async with self._side_sem:
            try:
                await self.client.strategic_patch(
                    f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status", body)
            except (ApiError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                self.telemetry.events_dropped.labels("condition").inc()
                if not (isinstance(e, ApiError) and e.status == 404):  # pod gone meanwhile
                    log.warning("PodScheduled condition for %s not written: %s", pod.key, e)

    def policy_status(self, st: PolicyState) -> dict[str, Any]:
        counts = self.queue.counts(st.name)
        cond = {"type": "Ready", "status": "True" if st.ready else "False",
                "reason": "Valid" if st.ready else "InvalidSpec",
                "message": ("chain built: " + ", ".join(
                    f"{p.name}{'' if p.weight is None else f'(w={p.weight})'}" for p in st.chain.resolved))
                if st.ready else "; ".join(st.errors) + (
                    f" (pods are still scheduled with generation {st.chain_generation})" if st.chain else ""),
                "observedGeneration": st.generation}
        extra = self.sources.status(st.name) or {}
        status = {
            "observedGeneration": st.generation,
            "conditions": [cond, *extra.get("conditions", [])],
            "plugins": [{"name": p.name, "points": p.points, "weight": p.weight} for p in st.chain.resolved]
            if st.chain else [],
            "pluginCount": len(st.chain.resolved) if st.chain else 0,
            "pluginSummary": ",".join(p.name if p.weight is None else f"{p.name}:{p.weight}"
                                      for p in st.chain.resolved) if st.chain else "",
            "scheduled": st.scheduled,
            "unschedulable": counts[UNSCHEDULABLE],
            "pending": sum(counts.values()),
            "lastScheduledTime": st.last_scheduled_time,
        }
        if "metrics" in extra:
            status["metrics"] = extra["metrics"]
        return status

    async def _write_policy_status(self, st: PolicyState) -> None:
        if self.client is None:
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
                await self.client.merge_patch(f"{PLURAL_PATH}/{st.name}/status", {"status": status})
                st.last_written, st.dirty = status, False
            except ApiError as e:
                if e.status == 404:  # deleted meanwhile
                    st.dirty = False
                    return
                self.telemetry.events_dropped.labels("status").inc()
                log.warning("status of SchedulingPolicy %s not written: %s", st.name, e)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                self.telemetry.events_dropped.labels("status").inc()
                log.warning("status of SchedulingPolicy %s not written: %s", st.name, e)

    async def _status_loop(self) -> None:
        """Batched status: counts change with every pod; write each policy at most every interval."""
        while not self._stopping:
            await asyncio.sleep(self.status_interval)
            c = self.queue.counts()
            for q, v in c.items():
                self.telemetry.pending.labels(q).set(v)
            for st in list(self.policies.values()):
                await self._write_policy_status(st)  # writes only what changed
