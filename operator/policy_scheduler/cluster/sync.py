"""Informer sync: one informer per kind that feeds the cluster state, one for the
SchedulingPolicies (into the policy store), the discovery of the PodGroup API version, and the
wait until every kind is listed, policies included. No decision is made before that.

The policies come through an informer of ours (not kopf's watch) so that no policy object can
stop the process: the informer reads what orjson refuses (safejson), and the store reports such an
object on itself.

upstream: the informer factory's ``Start`` and ``WaitForCacheSync`` in ``scheduler.Run``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Mapping

from ..cache.policies import PLURAL_PATH
from ..cache.state import DRA_KINDS, KINDS
from ..plugins.podgroups.native_cache import DEFAULT_VERSION as NATIVE_DEFAULT_VERSION, GROUP as NATIVE_GROUP
from ..plugins.podgroups.native_cache import VERSIONS as NATIVE_VERSIONS
from ..plugins.podgroups.native_cache import COMPOSITE_PATH
from ..plugins.podgroups.native_cache import api_path as native_pod_groups_path
from ..plugins.podgroups.cache import API_PATH as POD_GROUPS_PATH
from ..logs import fields
from . import objdecode
from .informer import Informer
from .kubeclient import REQUEST_ERRORS, KubeClient

if TYPE_CHECKING:  # pragma: no cover
    from .telemetry import Telemetry

log = logging.getLogger("policy_scheduler")

NATIVE_PODGROUPS = f"podgroups.{NATIVE_GROUP}"  # the informer of scheduling.k8s.io PodGroups
COMPOSITE_PODGROUPS = f"compositepodgroups.{NATIVE_GROUP}"  # and of its v1alpha3 CompositePodGroups
POLICIES = "schedulingpolicies"  # the informer of SchedulingPolicies (the policy store's)
Handler = Callable[[str, Mapping[str, Any]], None]
# the kinds read without their managedFields (objdecode): most of the cluster's objects by count
LEAN_KINDS = ("pods", "nodes")
LEAN = {"decode_page": objdecode.page, "decode_event": objdecode.event}
# Fault injection, for the end-to-end test of a handler that raises (tests/e2e/test_drift.py) and
# nothing else: with this variable set to an annotation key, every informer's handler raises on an
# object that carries the annotation (the API server validates Pods and Nodes too strictly for a
# real object to make a handler raise). Unset in the manifests and the chart; read at start.
FAULT_ENV = "POLICY_SCHEDULER_TEST_HANDLER_FAULT"


class InjectedFault(RuntimeError):
    pass


def with_fault(handler: Handler, annotation: str) -> Handler:
    """``handler``, raising InjectedFault on an object annotated ``annotation`` (FAULT_ENV)."""
    def handle(event: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata")
        notes = meta.get("annotations") if isinstance(meta, dict) else None
        if isinstance(notes, dict) and annotation in notes:
            raise InjectedFault(f"{FAULT_ENV}: the object is annotated {annotation}")
        handler(event, obj)
    return handle


class Sync:
    """The informers, fed to ``route(kind)`` (a kind of cache/state.KINDS, "podgroups",
    NATIVE_PODGROUPS or POLICIES -> its watch-event handler). ``telemetry``: where handler
    failures, relists and quarantined objects are counted (informer.py says what they are)."""

    def __init__(self, client: KubeClient, route: Callable[[str], Handler],
                 spawn: Callable[[Coroutine], asyncio.Task], timeout: float,
                 telemetry: "Telemetry | None" = None) -> None:
        self.client = client
        self.telemetry = telemetry
        self.route = route
        self.spawn = spawn
        self.timeout = timeout
        self.native_version = NATIVE_DEFAULT_VERSION  # the API version served (discovery)
        self.informers: list[Informer] = []

    def status(self) -> dict[str, str]:
        """What the cache still waits for: informer -> why; empty when synced."""
        return {inf.name: inf.last_error or "listing" for inf in self.informers if not inf.synced.is_set()}

    def problems(self) -> dict[str, str | None]:
        """Every informer -> why its cache is not to be trusted now (None: nothing): objects a
        relist could not repair, or a LIST that keeps failing (``/readyz``'s ``informer/<name>``)."""
        return {inf.name: inf.problem for inf in self.informers}

    def _informer(self, path: str, kind: str, **kw: Any) -> Informer:
        """The informer of ``kind``, its handler failures, relists and quarantine counted."""
        tel = self.telemetry
        if tel is not None:
            errors = tel.informer_handler_errors.labels(kind)
            kw.update(on_handler_error=lambda _event: errors.inc(),
                      on_relist=lambda reason: tel.informer_relists.labels(kind, reason).inc(),
                      on_quarantine=tel.informer_quarantined.labels(kind).set)
        handler = self.route(kind)
        fault = os.environ.get(FAULT_ENV)
        if fault:
            handler = with_fault(handler, fault)
        return Informer(self.client, path, handler, kind, **kw)

    async def discover_native_version(self) -> str:
        """The scheduling.k8s.io version to watch PodGroups in: the first of NATIVE_VERSIONS the
        API server serves (discovery), else the default (the informer then waits for it)."""
        try:
            group = await asyncio.wait_for(self.client.get(f"/apis/{NATIVE_GROUP}"), 10)
            served = {str(v.get("version")) for v in (group or {}).get("versions") or [] if isinstance(v, dict)}
        except REQUEST_ERRORS as e:
            log.debug("discovery of %s failed: %s", NATIVE_GROUP, e)
            served = set()
        for v in NATIVE_VERSIONS:
            if v in served:
                return v
        log.info("%s PodGroups are not served (the GenericWorkload feature gate and --runtime-config "
                 "%s/%s=true enable them); GangScheduling's groups stay empty until they are",
                 NATIVE_GROUP, NATIVE_GROUP, NATIVE_DEFAULT_VERSION)
        return NATIVE_DEFAULT_VERSION

    def _informers(self) -> list[Informer]:
        """One informer per kind of cache/state.KINDS and one for the SchedulingPolicies; plus the
        PodGroups of both APIs, optional (while their CRD or feature gate is missing the kind is
        empty, and the LIST is tried again in the background)."""
        mk = self._informer
        return [
            *(mk(path, kind, **(LEAN if kind in LEAN_KINDS else {})) for kind, path in KINDS.items()),
            mk(PLURAL_PATH, POLICIES),
            *(mk(path, kind, optional=True) for kind, path in DRA_KINDS.items()),
            mk(POD_GROUPS_PATH, "podgroups", optional=True),
            mk(native_pod_groups_path(self.native_version), NATIVE_PODGROUPS, optional=True),
            mk(COMPOSITE_PATH, COMPOSITE_PODGROUPS, optional=True),
        ]

    async def run(self) -> float:
        """Start the informers and wait until every kind is listed, SchedulingPolicies included.
        Past ``timeout`` it says which informer is stuck and why, and keeps waiting (readiness
        fails meanwhile). Returns the seconds it took."""
        t0 = time.monotonic()
        self.native_version = await self.discover_native_version()
        self.informers = self._informers()
        for inf in self.informers:
            self.spawn(inf.run())
        waiting = asyncio.gather(*(inf.synced.wait() for inf in self.informers))
        try:
            while True:
                try:
                    await asyncio.wait_for(asyncio.shield(waiting), timeout=self.timeout)
                    break
                except asyncio.TimeoutError:
                    stuck = self.status()
                    log.error("cache not synced after %.0fs; not ready until it is. Waiting for: %s",
                              time.monotonic() - t0, "; ".join(f"{k} ({v})" for k, v in sorted(stuck.items())),
                              extra=fields(waiting=sorted(stuck)))
        finally:
            if not waiting.done():
                waiting.cancel()
        return time.monotonic() - t0
