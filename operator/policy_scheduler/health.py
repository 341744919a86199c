"""The probe endpoints, as kube-scheduler serves them: ``/healthz`` and ``/livez`` for liveness,
``/readyz`` for readiness, each answered from the operator's event loop (an event loop that does
not answer fails the probe by its timeout).

Each endpoint is a list of named checks (``probe_checks``):

- ``/livez``: ``ping``, ``scheduling-loop`` (fails once the scheduling loop died; the kubelet then
  restarts the container). A standby, or a cache still syncing, is alive.
- ``/healthz``: ``/livez``'s and ``leaderElection`` (fails once this replica lost its Lease: it
  is exiting, as kube-scheduler's watchdog).
- ``/readyz``: ``ping``, ``leaderElection``, ``shutdown`` (fails once stopping),
  ``informer-sync`` (every informer listed), ``policies-loaded`` (SchedulingPolicies loaded and
  the last valid revision of each invalid one restored), ``scheduling-loop`` (on the leader: the
  loop runs; a standby passes) and, with admission webhooks, ``webhooks`` (serving). Once the
  informers run, one ``informer/<name>`` check each (cluster/informer.py ``problem``): it fails
  while objects whose watch handler raised could not be repaired by the relist (quarantined), or
  while that informer's LIST keeps failing: the cache may hold ghosts or miss objects, silently
  otherwise. With revisions on, ``revisions``: a *warning*, never a failure, while ControllerRevisions
  cannot be written (cluster/revisions.py ``problem``: namespace missing, RBAC denied). Scheduling
  is unaffected, so readiness is too (failing it would stall a rolling update and take the
  webhooks off their Service for a loss of history); but the verbose body names it, as
  ``[+]revisions warning: <why>``, and ``/readyz/revisions`` answers ``warning: <why>`` (200).

Bodies, as k8s.io/apiserver/pkg/server/healthz where a kube operator reads them:

- ``?verbose`` (``kubectl get --raw '/readyz?verbose'``): text/plain, one line per check,
  ``[+]informer-sync ok`` or ``[-]informer-sync failed: reason withheld``, then ``readyz check
  passed`` or ``readyz check failed``; ``?exclude=<check>`` (repeatable) skips a check
  (``[+]<check> excluded: ok``);
- ``/readyz/<check>`` (and ``/livez/<check>``, ``/healthz/<check>``): ``ok``, or ``internal
  server error: <reason>`` with status 500;
- otherwise, the JSON details (``live``, ``ready``, what the cache waits for, e.g. ``services:
  list failed: ... HTTP 403 ...``, the leadership, counts), as before: the probes read the status.

Status: 200 when every check passes; else 500 for ``/healthz`` and ``/livez`` (upstream's), 503 for
``/readyz`` (the operator's readiness status since its first release; the kubelet treats both as a
failure).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from aiohttp import web

log = logging.getLogger("policy_scheduler")

HealthFn = Callable[[], tuple[bool, bool, dict[str, Any]]]
Checks = list[tuple[str, "str | None"]]  # (name, why it fails, None when it passes)
Warnings = dict[str, str]  # a passing check's name -> what an operator should know
FAILED_STATUS = {"healthz": 500, "livez": 500, "readyz": 503}


def probe_checks(*, crashed: BaseException | None, leading: bool, scheduling: bool, listed: bool, synced: bool,
                 waiting: dict[str, str], lost: bool, stopping: bool,
                 informers: dict[str, str | None] | None = None,
                 revisions: str | None | bool = False) -> dict[str, Checks]:
    """The checks of each endpoint, from the engine's state: ``listed`` (every informer listed),
    ``synced`` (and the policies loaded), ``waiting`` (informer -> why it has not listed),
    ``informers`` (informer -> why its cache is not to be trusted, None: fine), ``revisions``
    (False: off; else the check, which only warns: see ``warnings``)."""
    died = f"the scheduling loop died: {type(crashed).__name__}: {crashed}" if crashed is not None else None
    loop = died or ("this replica leads and its scheduling loop has not started" if leading and not scheduling
                    else None)
    lease = "leader election lost: the lease was not renewed (exiting)" if lost else None
    informers_check = None if listed else (
        "waiting for " + "; ".join(f"{k}: {v}" for k, v in sorted(waiting.items())) if waiting
        else "the informers have not started")
    policies = None if synced else "SchedulingPolicies and their revisions not loaded yet"
    live: Checks = [("ping", None), ("scheduling-loop", died)]
    per_informer: Checks = [(f"informer/{name}", why) for name, why in (informers or {}).items()]
    return {"livez": live, "healthz": [("ping", None), ("leaderElection", lease), ("scheduling-loop", died)],
            "readyz": [("ping", None), ("leaderElection", lease), ("shutdown", "stopping" if stopping else None),
                       ("informer-sync", informers_check), *per_informer, ("policies-loaded", policies),
                       *([("revisions", None)] if revisions is not False else []), ("scheduling-loop", loop)]}


def warnings(revisions: str | None | bool = False) -> Warnings:
    """The readyz checks that pass with a warning: ``revisions`` when they cannot be written."""
    return {"revisions": revisions} if isinstance(revisions, str) and revisions else {}


def verbose_body(endpoint: str, checks: Checks, exclude: list[str],
                 warned: Warnings | None = None) -> tuple[bool, str]:
    """(every check passed, upstream's verbose text) for ``checks`` minus ``exclude``; a passing
    check in ``warned`` reads ``[+]<name> warning: <why>``."""
    lines, failed, unknown = [], False, [e for e in dict.fromkeys(exclude) if e not in {n for n, _ in checks}]
    for name, err in checks:
        if name in exclude:
            lines.append(f"[+]{name} excluded: ok")
        elif err is not None:
            failed = True
            lines.append(f"[-]{name} failed: reason withheld")
        elif warned and name in warned:
            lines.append(f"[+]{name} warning: {' '.join(warned[name].split())}")
        else:
            lines.append(f"[+]{name} ok")
    if unknown:
        lines.append("warn: some health checks cannot be excluded: no matches for "
                     + ",".join(f'"{u}"' for u in unknown))
    lines.append(f"{endpoint} check {'failed' if failed else 'passed'}")
    return not failed, "\n".join(lines) + "\n"


class HealthServer:
    """Serve ``health()`` (live, ready, details; the checks in ``details["checks"]``) on
    ``address:port``."""

    def __init__(self, health: HealthFn, address: str, port: int) -> None:
        self.health = health
        self.address = address
        self.port = port
        self._runner: web.AppRunner | None = None

    def _checks(self, endpoint: str) -> tuple[bool, dict[str, Any], Checks, Warnings]:
        live, ready, details = self.health()
        details = dict(details)
        checks = list((details.pop("checks", None) or {}).get(endpoint) or [])
        warned = dict((details.pop("warnings", None) or {}).get(endpoint) or {})
        if not checks:  # a health function without checks: its verdict as one
            checks = [("ping", None), (endpoint, None if (ready if endpoint == "readyz" else live) else "failed")]
        if endpoint == "readyz" and isinstance(details.get("webhooks"), dict):
            checks.append(("webhooks", None if details["webhooks"].get("serving") else
                           details["webhooks"].get("error") or "not serving"))
        return all(err is None for _, err in checks), details, checks, warned

    async def _endpoint(self, request: web.Request) -> web.Response:
        endpoint = request.match_info["endpoint"]
        ok, details, checks, warned = self._checks(endpoint)
        status = 200 if ok else FAILED_STATUS[endpoint]
        if "verbose" in request.query:
            passed, text = verbose_body(endpoint, checks, request.query.getall("exclude", []), warned)
            return web.Response(text=text, status=200 if passed else FAILED_STATUS[endpoint],
                                headers={"X-Content-Type-Options": "nosniff"})
        details["live" if endpoint != "readyz" else "ready"] = ok
        return web.json_response(details, status=status)

    async def _one(self, request: web.Request) -> web.Response:
        endpoint, name = request.match_info["endpoint"], request.match_info["check"]
        _, _, checks, warned = self._checks(endpoint)
        for n, err in checks:
            if n == name:
                if err is None:
                    return web.Response(text=f"warning: {warned[n]}\n" if n in warned else "ok")
                return web.Response(text=f"internal server error: {err}\n", status=500)
        return web.Response(text="404 page not found\n", status=404)

    async def start(self) -> None:
        app = web.Application()
        app.add_routes([web.get("/{endpoint:healthz|livez|readyz}", self._endpoint),
                        web.get("/{endpoint:healthz|livez|readyz}/{check:.+}", self._one)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.address, self.port)
        await site.start()
        log.info("probes on http://%s:%d (/healthz, /livez, /readyz)", self.address, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
