"""The operator's composition root: `policy-scheduler run` once the CLI has parsed its flags and
loaded the credentials and plugins. Builds the API client, the Prometheus metric sources, the
leader elector, the engine, the tuner, the admission webhooks, the probe and metrics endpoints,
then runs kopf until it stops (cli.py holds the flags; cmd_run calls ``serve``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import signal
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from . import SCHEDULER_NAME, __version__
from .cluster.leader import ElectionConfig

if TYPE_CHECKING:  # pragma: no cover
    from .cache.policies import PolicyStore
    from .cluster.suggestions import SuggestionConfig
    from .cluster.engine import Engine
    from .cluster.kubeclient import KubeClient
    from .cluster.sync import Sync
    from .cluster.leader import Leadership
    from .cluster.telemetry import Telemetry
    from .framework.registry import Registry
    from .metricsources.manager import MetricSources


def election_config(a: argparse.Namespace) -> ElectionConfig:
    """The Lease election of `run`'s --leader-elect-* flags (the Lease is named after the scheduler
    unless --leader-elect-resource-name says otherwise)."""
    return ElectionConfig(name=a.leader_elect_resource_name or a.scheduler_name,
                          namespace=a.leader_elect_resource_namespace,
                          lease_duration=a.leader_elect_lease_duration, renew_deadline=a.leader_elect_renew_deadline,
                          retry_period=a.leader_elect_retry_period)


def suggestion_config(a: argparse.Namespace) -> SuggestionConfig:
    """The SuggestionConfig of `run`'s --suggestion* flags."""
    from .cluster.suggestions import SuggestionConfig

    per_pod = getattr(a, "suggestion_budget", 0.020)
    per_second = getattr(a, "suggestion_share", 0.05)
    return SuggestionConfig(enabled=getattr(a, "suggestions", "on") == "on" and per_pod > 0 and per_second > 0,
                            per_pod=per_pod, per_second=per_second, burst=max(4 * per_second, per_pod),
                            queue_size=getattr(a, "suggestion_queue", 1024))


def build_engine(client: KubeClient, *, scheduler_name: str = SCHEDULER_NAME, namespaces: set[str] | None = None,
                 bind_concurrency: int = 64, status_interval: float = 2.0, telemetry: Telemetry | None = None,
                 rng: random.Random | None = None, sources: MetricSources | None = None,
                 registry: Registry | None = None, plugin_metrics_sample_percent: float | None = None,
                 leadership: Leadership | None = None, sync_timeout: float = 60.0, default_policy: str | None = None,
                 revision_namespace: str | None = None, revision_history_limit: int | None = None,
                 suggestions: SuggestionConfig | None = None) -> Engine:
    """The engine and its parts, each handed only what it uses (unit tests pass an in-memory
    client). ``suggestions``: the search for what would place a pod that found no node
    (cluster/suggestions.py; off when None or not enabled). The parts that call back into the loop (policy changes, requeues, routing) are
    handed the engine's methods once it is built."""
    from .cache.handle import StateHandle
    from .cache.policies import DEFAULT_POLICY, PolicyStore
    from .cache.revisions import DEFAULT_HISTORY_LIMIT
    from .cache.state import ClusterState
    from .cluster.apicalls import ApiCalls, OperatorActions
    from .cluster.binding_tasks import BindingTasks
    from .cluster import engine as engine_module
    from .cluster.leader import Leadership
    from .cluster.podgroup_status import PodGroupStatusWriter
    from .cluster.policy_status import PolicyStatusWriter
    from .cluster.preemptor import Preemptor
    from .cluster.recorder import EventRecorder
    from .cluster.revisions import Revisions
    from .cluster.rollout_controller import RolloutController
    from .cluster.suggestions import SuggestionMetrics, SuggestionWorker
    from .cluster.sync import Sync
    from .cluster.tasks import Tasks
    from .cluster.telemetry import Telemetry
    from .policy.chain import build_chain
    from .framework.interface import Handle
    from .framework.queue.nominator import Nominator
    from .framework.queue.scheduling_queue import SchedulingQueue
    from .metricsources.manager import MetricSources
    from .plugins.priority_sort import PrioritySort
    from .scheduler.pending import PendingPods
    from .scheduler.schedule_one import PSEUDO_EVENTS, Scheduler

    # bound further down: the callbacks below run only once they are
    engine: Engine
    store: PolicyStore
    informers: Sync
    leadership = leadership or Leadership()  # who may act: the elected leader only; without election, always
    state = ClusterState()
    tasks, wake_event = Tasks(), asyncio.Event()
    spawn, wake = tasks.spawn, wake_event.set

    def chain_of(policy: str) -> Any:  # the queue's profile (QueueSort) of a policy's pods
        st = store.policies.get(policy)
        return st.chain if st is not None else None

    queue = SchedulingQueue(less=PrioritySort(None, Handle()).less, profile_of=chain_of, pseudo_events=PSEUDO_EVENTS)
    nominator = Nominator()
    sources = sources or MetricSources()
    sources.attach(lambda: state.table.names, lambda event, pre_check=None: engine.move_for_source(event, pre_check))
    tel = telemetry or Telemetry()
    side_sem = asyncio.Semaphore(32)  # condition and status patches
    may_write, fence = leadership.valid, leadership.time_left  # a standby writes nothing; fenced
    recorder = EventRecorder(client, scheduler_name=scheduler_name, telemetry=tel, side_sem=side_sem,
                             may_write=may_write, fence=fence)
    api = ApiCalls(client, leadership, tel, lambda: informers.native_version)
    preemptor = Preemptor(state, queue, recorder, api, tel, spawn, wake, scheduler_name)
    actions = OperatorActions(api, lambda keys: engine.activate(keys),
                              lambda pod, reason, msg, code: recorder.failure(pod, reason, msg, code=code),
                              preemptor.is_running, spawn,
                              lambda pod, reason, note: recorder.event(pod, "Normal", reason, "Scheduling", note))

    def count_policies(ready: int, not_ready: int) -> None:
        tel.policies.labels("true").set(ready)
        tel.policies.labels("false").set(not_ready)

    store = PolicyStore(sources, lambda name: StateHandle(state, store, sources, name, actions), registry=registry,
                        namespaces=state.namespaces, on_counts=count_policies,
                        on_change=lambda st: engine.policy_changed(st), scheduler_name=scheduler_name,
                        default_policy=default_policy or DEFAULT_POLICY)
    # the Handle of the implicit plugins (pods without a usable policy) and of the status writers
    handle = StateHandle(state, store, sources, None, actions)
    # metrics: profile labels of existing policies; queue and cache read at scrape time; leader-only series
    tel.attach(store.policies, lambda: queue.incoming, lambda: state.table, lambda: leadership.leading, client)
    if plugin_metrics_sample_percent is not None:
        tel.plugin_sample_percent = plugin_metrics_sample_percent
    # pods without a usable policy still get the implicit plugins (SchedulingGates holds them)
    queue.fallback = build_chain({"plugins": []}, store.registry, handle)
    status_writer = PolicyStatusWriter(client, store.policies, queue, sources, tel, interval=status_interval,
                                       side_sem=side_sem, may_write=may_write,
                                       admitted_namespaces=store.admitted_namespaces, fence=fence)
    binding_tasks = BindingTasks(state, spawn, bind_concurrency)
    # every valid generation recorded as a ControllerRevision; the last valid one read back at the
    # sync point (cluster/revisions.py); off without a namespace
    history = DEFAULT_HISTORY_LIMIT if revision_history_limit is None else revision_history_limit
    revisions = Revisions(client, store, api, namespace=revision_namespace, history_limit=history, may_write=may_write,
                          on_recorded=status_writer.write_soon)
    # spec.rollout: the candidate's shadow, canary, analysis, rollback and promotion
    rollouts = RolloutController(state, store.policies, nominator, recorder, tel, api.patch_policy,
                                 lambda name: engine.requeue_policy(name), status_writer.write_soon, may_write,
                                 key=binding_tasks.key, read=lambda p: client.get(p))
    # what would place a pod that found no node: searched while the loop has nothing to pop
    hints = None
    if suggestions is not None and suggestions.enabled:
        hints = SuggestionWorker(state, queue, nominator, policies=store.policies, namespaces=state.namespaces,
                                 event=recorder.event, patch=api.patch_pod_condition,
                                 key=lambda: binding_tasks.key, spawn=spawn,
                                 metrics=SuggestionMetrics(tel.leader_only.registry), config=suggestions,
                                 settled=recorder.status_settled)
        queue.on_gated = hints.gated  # pods DynamicResources holds at PreEnqueue: no attempt, no Hints call

    def forget(key: str) -> None:  # a pending pod bound or gone
        recorder.forget(key)
        if hints is not None:
            hints.forget(key)

    pending = PendingPods(queue, nominator, store.policy_name, store.policies, forget, wake)
    # the scheduling driver (scheduler/schedule_one.py) with the operator's ports
    driver = Scheduler(state, queue, nominator, store.resolve_policy, recorder, tel, binding_tasks, preemptor,
                       rollouts, rng or random.Random(), wake, pending_policy=pending.policy_of, hints=hints)
    binding_tasks.attach(driver)
    informers = Sync(client, lambda kind: tel.timed_handler(kind, engine.route(kind)), spawn, sync_timeout, tel)
    engine = engine_module.Engine(
        client, scheduler_name=scheduler_name, scope=namespaces, leadership=leadership, state=state, queue=queue,
        nominator=nominator, pending=pending, driver=driver, sources=sources, telemetry=tel, tasks=tasks,
        wake=wake_event, recorder=recorder, api=api, preemptor=preemptor, binding_tasks=binding_tasks,
        policy_store=store, handle=handle, status_writer=status_writer, revisions=revisions, rollouts=rollouts,
        pod_group_status=PodGroupStatusWriter(state.pod_groups, handle),
        native_pod_group_status=PodGroupStatusWriter(state.native_pod_groups, handle,
                                                     patch=api.patch_native_pod_group_status),
        informers=informers, suggestions=hints)
    state.native_pod_groups.on_condition = engine.native_pod_group_status.kick
    return engine


async def serve(a: argparse.Namespace, creds, registry, *, stop_flag: asyncio.Event | None = None,
                on_engine=None) -> int:
    """`policy-scheduler run` once its flags, credentials and plugins are loaded: the engine, its
    leader election, the probe and metrics endpoints, and kopf, until SIGTERM/SIGINT (which set
    ``stop_flag``: ``stop_on_signals``) or ``stop_flag``. 0 on a stop; 1 when leadership was lost
    (as kube-scheduler, the process exits and its restart runs as a standby). ``on_engine(engine)``
    sees the engine."""
    from prometheus_client import start_http_server

    from .health import HealthServer
    from .metricsources.prometheus import PrometheusMetricSources
    from .cluster.kubeclient import KubeClient
    from .cluster.leader import LeaderElector

    log = logging.getLogger("policy_scheduler")
    client = KubeClient(creds, qps=a.qps, burst=a.burst)
    sources = PrometheusMetricSources(a.prometheus_url, refresh=a.prometheus_refresh_interval,
                                      timeout=a.prometheus_query_timeout, ttl=a.prometheus_ttl,
                                      usage_lag=a.prometheus_usage_lag)
    sources.registry = registry
    leadership = LeaderElector(client, election_config(a)) if a.leader_elect else None
    seed = getattr(a, "seed", None)
    engine = build_engine(client, scheduler_name=a.scheduler_name, namespaces=set(a.namespace) if a.namespace else None,
                          bind_concurrency=a.bind_concurrency, sources=sources, registry=registry,
                          rng=random.Random(seed) if seed is not None else None,
                          plugin_metrics_sample_percent=a.plugin_metrics_sample_percent, leadership=leadership,
                          sync_timeout=a.cache_sync_timeout, default_policy=a.default_policy,
                          revision_namespace=getattr(a, "revision_namespace", None),
                          revision_history_limit=getattr(a, "revision_history_limit", 10),
                          suggestions=suggestion_config(a))
    tuner = attach_tuner(engine, plugin_modules=list(getattr(a, "plugin_module", None) or []))  # spec.tuning
    if on_engine is not None:
        on_engine(engine)
    stop_flag = stop_flag or asyncio.Event()
    lost = False

    def leadership_lost() -> None:
        # kube-scheduler exits at once; kopf is given a few seconds to stop, then the process goes
        # (a timer thread: it fires even if the loop is stuck). The fence has stopped every write.
        nonlocal lost
        lost = True
        log.critical("leader election lost: stopped scheduling; exiting")
        stop_flag.set()
        exit_timer = threading.Timer(10.0, os._exit, (1,))
        exit_timer.daemon = True
        exit_timer.start()

    engine.on_leadership_lost = leadership_lost
    if a.metrics_port:
        start_http_server(a.metrics_port, addr=a.metrics_address, registry=engine.telemetry.registry)
    webhooks = None
    if a.webhook_port:
        from .cluster.webhook_server import Caps, WebhookServer

        svc_ns, svc = a.webhook_service
        url = getattr(a, "webhook_url", None)  # outside the cluster: configurations registered with this URL
        hosts = [f"{svc}.{svc_ns}.svc", f"{svc}.{svc_ns}.svc.cluster.local", f"{svc}.{svc_ns}", svc,
                 *a.webhook_host, *([urlsplit(url).hostname] if url and urlsplit(url).hostname else [])]
        webhooks = WebhookServer(client, engine.policy_store, address=a.webhook_address, port=a.webhook_port,
                                 secret=a.webhook_secret, hosts=list(dict.fromkeys(hosts)),
                                 configuration=a.webhook_configuration or None,
                                 manage_certs=a.webhook_manage_certs, url=url,
                                 caps=Caps(max_inflight=getattr(a, "webhook_max_inflight", 4),
                                           max_buffered=getattr(a, "webhook_max_buffered_mib", 32) << 20,
                                           read_deadline=getattr(a, "webhook_read_timeout", 4.0)),
                                 metrics=engine.telemetry.webhook_metrics())

    def health():
        live, ready, details = engine.health()
        if webhooks is not None:  # a replica behind the webhook Service serves admission too
            details["webhooks"] = webhooks.describe()
            ready = ready and webhooks.serving
            details["ready"] = ready
        return live, ready, details

    server = HealthServer(health, a.health_address, a.health_port) if a.health_port else None
    if server is not None:
        await server.start()
    if webhooks is not None:
        await webhooks.start()
    from .cluster.decision_mac import attach  # the key that signs decision annotations, before the pods are listed
    await attach(engine, getattr(a, "revision_namespace", None), a.scheduler_name)
    election = (f"leader election on Lease {leadership.lease} as {leadership.config.identity}"
                if leadership else "no leader election")
    log.info("policy-scheduler %s starting: scheduler name %s, API %s (%s), namespaces %s, %s", __version__,
             a.scheduler_name, creds.server, creds.source, ",".join(a.namespace) if a.namespace else "all",
             election)
    loop = asyncio.get_running_loop()
    tuner_task = loop.create_task(tuner.run())
    chooser_task = None
    if getattr(a, "multikueue_dispatcher", None):  # the MultiKueue cluster chooser (cluster/multikueue.py)
        from .cluster.multikueue import Chooser

        chooser = Chooser(client, dispatcher=a.multikueue_dispatcher, scheduler_name=a.scheduler_name,
                          default_policy=a.default_policy, kueue_namespace=a.multikueue_namespace,
                          refresh=a.multikueue_refresh,
                          allow_insecure_tls=getattr(a, "multikueue_allow_insecure_tls", False))
        chooser_task = loop.create_task(chooser.run(lambda: leadership is None or leadership.valid(),
                                                       fence=leadership.time_left if leadership else None))
    ready_flag = asyncio.Event()
    stopping: list[tuple[str, float]] = []  # the signal that stopped the operator, and when
    signals = loop.create_task(stop_on_signals(ready_flag, stop_flag, stopping))
    # the engine first (informers, then the scheduling loop), kopf once the first pods are decided:
    # importing kopf is not on the way to the first decision; a signal meanwhile sets the stop flag
    engine_task = loop.create_task(engine.run())
    engine_task.add_done_callback(_report_engine_exit)
    early_signals(loop, stop_flag, stopping)
    try:
        await until_first_decisions(engine, engine_task, stop_flag)
        if stop_flag.is_set():
            await engine.stop()  # what kopf's cleanup would do: the Lease released
            engine_task.cancel()
            await asyncio.gather(engine_task, return_exceptions=True)
            await engine.client.close()
        else:
            from .handlers import run_operator

            # a stop (a signal, or the stop flag) runs kopf's cleanup: it stops the engine, which
            # releases the Lease
            await run_operator(engine, engine_task, kubeconfig=a.kubeconfig, context=a.context,
                               stop_flag=stop_flag, ready_flag=ready_flag)
    finally:
        signals.cancel()
        await asyncio.gather(signals, return_exceptions=True)
        for task in (tuner_task, chooser_task):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (tuner_task, chooser_task) if t is not None), return_exceptions=True)
        await tuner.stop()
        if webhooks is not None:
            await webhooks.stop()
        if server is not None:
            await server.stop()
    if stopping:
        name, at = stopping[0]
        log.info("policy-scheduler stopped (%s) in %.2fs", name, time.monotonic() - at)
    else:
        log.info("policy-scheduler stopped")
    return 1 if lost else 0


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _report_engine_exit(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger("policy_scheduler").critical(
            "the scheduling loop died; /healthz now fails so the operator is restarted",
            exc_info=task.exception())


FIRST_DECISIONS_WAIT = 3.0  # seconds kopf's start waits at most for the engine's first decisions


async def until_first_decisions(engine: Engine, task: asyncio.Task, stop_flag: asyncio.Event,
                                limit: float = FIRST_DECISIONS_WAIT) -> None:
    """Until the engine has bound its first pod, has no pod to place, or stands by (another
    replica leads), at most ``limit`` seconds; at once on a stop or when the engine ended."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and not stop_flag.is_set() and not task.done():
        if engine.scheduling and (engine.bound_by_us > 0 or not len(engine.queue)):
            return
        if engine.synced and not engine.scheduling and not engine.leadership.leading:
            return  # a standby: nothing to decide until it leads
        await asyncio.sleep(0.01)


def early_signals(loop: asyncio.AbstractEventLoop, stop_flag: asyncio.Event,
                  stopping: list[tuple[str, float]]) -> None:
    """SIGTERM and SIGINT set ``stop_flag`` before kopf runs (kopf installs its own handlers when
    it starts, and ``stop_on_signals`` replaces those once it is ready). Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    log = logging.getLogger("policy_scheduler")

    def received(sig: signal.Signals) -> None:
        if stop_flag.is_set():
            return
        stopping.append((sig.name, time.monotonic()))
        log.info("%s received: stopping", sig.name)
        stop_flag.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, received, sig)


async def stop_on_signals(ready_flag: asyncio.Event, stop_flag: asyncio.Event,
                          stopping: list[tuple[str, float]]) -> None:
    """Once kopf is up (``ready_flag``), SIGTERM and SIGINT set ``stop_flag``, and ``stopping`` gets
    the signal's name and time; a second one exits at once. Until the operator returns (then the
    handlers are removed).

    kopf installs its own handlers when it starts; they stop it too, but leave its task that waits
    for the stop flag pending, and kopf waits 5 s for such "hung" tasks before it exits. Replaced
    once kopf is ready (after it installed them), a signal stops kopf by its stop flag: nothing is
    left waiting. Only the main thread receives signals (asyncio's rule, and kopf's)."""
    await ready_flag.wait()
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    log = logging.getLogger("policy_scheduler")

    def received(sig: signal.Signals) -> None:
        if stopping or stop_flag.is_set():
            log.warning("%s received while stopping: exiting now", sig.name)
            os._exit(128 + sig)
        stopping.append((sig.name, time.monotonic()))
        log.info("%s received: stopping", sig.name)
        stop_flag.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, received, sig)
    try:
        await asyncio.Event().wait()
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


def attach_tuner(engine, **kw):
    """The Tuner over the engine's parts (it is handed each part it reads, never the engine),
    told of every pod the engine binds."""
    from .cluster.tuner import Tuner

    tuner = Tuner(engine.client, engine.state, engine.policy_store, engine.sources, engine.queue,
                  engine.leadership, engine.telemetry, engine.recorder, lambda: engine.scheduling, **kw)
    engine.placement_listeners.append(tuner.log.record)
    return tuner
