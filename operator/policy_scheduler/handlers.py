"""kopf wiring, and nothing else: login, startup and cleanup.

kopf watches nothing. Every object, SchedulingPolicies included, reaches the cache through the
engine's own LIST+WATCH informers (cluster/informer.py): they give the sync point a scheduler
needs before its first decision, and they read objects no JSON parser of kopf's reads (nested
deeper than its recursion limit) without stopping, where one such policy made kopf's watch, and
the process, exit. The engine (informers and the scheduling loop) runs as a task serve.py starts
before kopf is imported (kopf and its dependencies take a few hundred milliseconds to import: not
on the way to the first decision); kopf's cleanup stops it.
"""

from __future__ import annotations

import asyncio
import logging

import kopf

from .cluster.engine import Engine
from .cluster.credentials import load_credentials


def build_registry(engine: Engine, task: asyncio.Task, kubeconfig: str | None = None,
                   context: str | None = None) -> kopf.OperatorRegistry:
    """``task``: the engine's, already running (serve.py)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_):
        # the same resolution and credentials as our own client (kubeconfig or service account:
        # certificates, tokens, exec plugins), loaded afresh in a thread since an exec plugin may run;
        # kopf logs in again at `expiration` (a token that expires) or on a 401
        c = await asyncio.to_thread(load_credentials, kubeconfig, context)
        scheme, _, token = (c.authorization or "").partition(" ")
        return kopf.ConnectionInfo(server=c.server, ca_data=c.ca_data, insecure=c.insecure or None,
                                   certificate_data=c.cert_data, private_key_data=c.key_data,
                                   scheme=scheme or None, token=token or None, default_namespace=c.namespace,
                                   expiration=c.expiration)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_):
        settings.posting.enabled = False  # we post our own kube-style events
        settings.scanning.disabled = True  # no CRD/namespace discovery: less RBAC, fixed resources
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.networking.error_backoffs = [1, 1, 2, 3, 5]

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_):
        await engine.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await engine.client.close()

    return registry


async def run_operator(engine: Engine, task: asyncio.Task, *, kubeconfig: str | None = None,
                       context: str | None = None, stop_flag=None, ready_flag=None) -> None:
    """Run kopf with our registry until ``stop_flag`` (or cancellation); its cleanup stops the
    engine's ``task``. The probes are served by health.py, not by kopf."""
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    await kopf.operator(registry=build_registry(engine, task, kubeconfig, context), clusterwide=True,
                        standalone=True, stop_flag=stop_flag, ready_flag=ready_flag)
