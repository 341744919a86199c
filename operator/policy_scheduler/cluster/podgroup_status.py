"""PodGroup status: phase, scheduled / running / succeeded / failed counts, scheduleStartTime and
occupiedBy of the scheduler-plugins PodGroups that a Coscheduling plugin manages
(``PodGroupCache.status``), written by the leader through ``Handle.patch_pod_group_status``.

Changes are gathered (``PodGroupCache.take_dirty``) and written every ``interval`` seconds (at
once after ``kick``: a native PodGroup's condition set by its cycle), one
merge PATCH per group whose status differs from what was last written or seen on the object,
fenced by the leader lease when it is sent (through the Handle: apicalls.py).
A failed write is logged and tried again at the next round; a group deleted meanwhile is
dropped. Groups no policy's Coscheduling looked at are never written: another scheduler may own
them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable


from ..framework.interface import Handle
from ..plugins.podgroups.cache import PodGroupCache
from .kubeclient import TRANSPORT_ERRORS, ApiError, Fenced

log = logging.getLogger("policy_scheduler")


class PodGroupStatusWriter:
    def __init__(self, cache: PodGroupCache, handle: Handle, interval: float = 1.0,
                 patch: Callable[[str, str, dict[str, Any]], Awaitable[None]] | None = None) -> None:
        self.cache = cache
        self.handle = handle
        # the write: scheduler-plugins' PodGroups by default; the native ones pass their own
        self.patch = patch or handle.patch_pod_group_status
        self.interval = interval
        self._retry: set[str] = set()
        self._kicked = asyncio.Event()

    def kick(self) -> None:
        """Write now rather than at the next round (a PodGroup condition its cycle just set)."""
        self._kicked.set()

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._kicked.wait(), self.interval)
            except asyncio.TimeoutError:
                pass
            self._kicked.clear()
            await self.flush()

    async def flush(self) -> int:
        """Write every changed status now. Returns the number written."""
        keys = set(self.cache.take_dirty()) | self._retry
        self._retry = set()
        written = 0
        for key in sorted(keys):
            pg = self.cache.groups.get(key)
            if pg is None:
                continue
            status = self.cache.status(key)
            if status == self.cache.written.get(key) or all(pg.status.get(k) == v for k, v in status.items()):
                self.cache.written[key] = status
                continue
            try:
                await self.patch(pg.namespace, pg.name, status)
            except Fenced:  # not sent: the lease lapsed (counted by the client); for the next round
                self._retry.add(key)
                continue
            except ApiError as e:
                if e.status != 404:  # a group deleted meanwhile needs nothing
                    log.warning("PodGroup %s status not written: %s", key, e)
                    self._retry.add(key)
                continue
            except (*TRANSPORT_ERRORS, RuntimeError) as e:
                log.warning("PodGroup %s status not written: %s", key, e)
                self._retry.add(key)
                continue
            self.cache.written[key] = status
            written += 1
        return written
