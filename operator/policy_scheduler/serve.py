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
from urllib.parse import urlsplit

from . import __version__
from .cluster.leader import ElectionConfig


def election_config(a: argparse.Namespace) -> ElectionConfig:
    """The Lease election of `run`'s --leader-elect-* flags (the Lease is named after the scheduler
    unless --leader-elect-resource-name says otherwise)."""
    return ElectionConfig(name=a.leader_elect_resource_name or a.scheduler_name,
                          namespace=a.leader_elect_resource_namespace,
                          lease_duration=a.leader_elect_lease_duration, renew_deadline=a.leader_elect_renew_deadline,
                          retry_period=a.leader_elect_retry_period)


async def serve(a: argparse.Namespace, creds, registry, *, stop_flag: asyncio.Event | None = None,
                on_engine=None) -> int:
    """`policy-scheduler run` once its flags, credentials and plugins are loaded: the engine, its
    leader election, the probe and metrics endpoints, and kopf, until SIGTERM/SIGINT (which set
    ``stop_flag``: ``stop_on_signals``) or ``stop_flag``. 0 on a stop; 1 when leadership was lost
    (as kube-scheduler, the process exits and its restart runs as a standby). ``on_engine(engine)``
    sees the engine."""
    from prometheus_client import start_http_server

    from .handlers import run_operator
    from .health import HealthServer
    from .metricsources.prometheus import PrometheusMetricSources
    from .cluster.engine import Engine
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
    engine = Engine(client, scheduler_name=a.scheduler_name, namespaces=set(a.namespace) if a.namespace else None,
                    bind_concurrency=a.bind_concurrency, sources=sources, registry=registry,
                    rng=random.Random(seed) if seed is not None else None,
                    plugin_metrics_sample_percent=a.plugin_metrics_sample_percent, leadership=leadership,
                    sync_timeout=a.cache_sync_timeout, default_policy=a.default_policy,
                    revision_namespace=getattr(a, "revision_namespace", None),
                    revision_history_limit=getattr(a, "revision_history_limit", 10))
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
    try:
        # a stop (a signal, or the stop flag) runs kopf's cleanup: it stops the engine, which
        # releases the Lease
        await run_operator(engine, kubeconfig=a.kubeconfig, context=a.context, stop_flag=stop_flag,
                           ready_flag=ready_flag)
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
