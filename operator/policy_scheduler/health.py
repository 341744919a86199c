"""The probe endpoints, as kube-scheduler serves them: ``/healthz`` (and ``/livez``) for
liveness, ``/readyz`` for readiness, each answered from the operator's event loop.

- ``/healthz``: 200 while the event loop answers and the scheduling loop has not died; else 500
  (the kubelet restarts the container). A standby, or a cache still syncing, is alive.
- ``/readyz``: 200 once every informer has listed and every SchedulingPolicy is loaded, and, on
  the leader, once the scheduling loop runs; else 503. The body names what is still awaited
  (e.g. ``services: list failed: ... HTTP 403 ...``).

Both answer JSON with the details; ``?verbose`` is accepted and ignored, as a probe sends none.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from aiohttp import web

log = logging.getLogger("policy_scheduler")

HealthFn = Callable[[], tuple[bool, bool, dict[str, Any]]]


class HealthServer:
    """Serve ``health()`` (live, ready, details) on ``address:port``."""

    def __init__(self, health: HealthFn, address: str, port: int) -> None:
        self.health = health
        self.address = address
        self.port = port
        self._runner: web.AppRunner | None = None

    async def _live(self, _request: web.Request) -> web.Response:
        live, _ready, details = self.health()
        return web.json_response(details, status=200 if live else 500)

    async def _ready(self, _request: web.Request) -> web.Response:
        _live, ready, details = self.health()
        return web.json_response(details, status=200 if ready else 503)

    async def start(self) -> None:
        app = web.Application()
        app.add_routes([web.get("/healthz", self._live), web.get("/livez", self._live),
                        web.get("/readyz", self._ready)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.address, self.port)
        await site.start()
        log.info("probes on http://%s:%d (/healthz, /readyz)", self.address, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
