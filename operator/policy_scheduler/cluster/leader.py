"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it for
kube-scheduler.

Every replica runs a LeaderElector. One holds the Lease and schedules; the others keep their
caches warm and try to take the Lease every ``retry_period``. A Lease held by another identity is
taken only when it has not changed for ``lease_duration`` seconds *as this replica observed it*
(its own clock: the holder's clock, and the renewTime it wrote, are not trusted). Writes are
optimistic (resourceVersion): of two replicas that try at once, one gets a 409 and stays standby.

The leader renews every ``retry_period``. When no renewal has succeeded for ``renew_deadline``
seconds it has lost the lease: ``valid()`` turns false at that instant, so nothing is bound after
it, and ``run`` returns (the operator then exits, as kube-scheduler does). Since others wait
``lease_duration`` (> ``renew_deadline``) from the last renewal they saw, a deposed leader has
stopped before anyone else starts. On a graceful stop the leader releases the Lease (holder
cleared, duration 1 s), so a standby takes over within one retry period.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable


from .kubeclient import REQUEST_ERRORS, ApiError

log = logging.getLogger("policy_scheduler.leader")

LEASE_DURATION = 15.0  # kube-scheduler's --leader-elect-lease-duration
RENEW_DEADLINE = 10.0  # --leader-elect-renew-deadline
RETRY_PERIOD = 2.0  # --leader-elect-retry-period
RESOURCE_NAMESPACE = "kube-system"  # --leader-elect-resource-namespace, as kube-scheduler
RETRY_JITTER = 0.2  # a standby retries every retry_period x [1, 1.2)


def default_identity() -> str:
    """``<hostname>_<uuid>``, as kube-scheduler: unique per process, readable in the Lease."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def micro_time(ts: float | None = None) -> str:
    """A metav1.MicroTime: RFC 3339 in UTC with microseconds."""
    dt = datetime.fromtimestamp(time.time() if ts is None else ts, timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    """The fields of a Lease's spec that leader election reads and writes."""

    holder: str = ""
    duration: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: dict[str, Any]) -> "LeaseRecord":
        s = lease.get("spec") or {}
        return cls(holder=s.get("holderIdentity") or "", duration=int(s.get("leaseDurationSeconds") or 0),
                   acquire_time=s.get("acquireTime"), renew_time=s.get("renewTime"),
                   transitions=int(s.get("leaseTransitions") or 0))

    def spec(self) -> dict[str, Any]:
        return {"holderIdentity": self.holder, "leaseDurationSeconds": self.duration,
                "acquireTime": self.acquire_time, "renewTime": self.renew_time,
                "leaseTransitions": self.transitions}


@dataclass
class ElectionConfig:
    name: str
    namespace: str = RESOURCE_NAMESPACE
    identity: str = field(default_factory=default_identity)
    lease_duration: float = LEASE_DURATION
    renew_deadline: float = RENEW_DEADLINE
    retry_period: float = RETRY_PERIOD
    release_on_cancel: bool = True

    def check(self) -> list[str]:
        """kube-scheduler's constraints on the timings (and ours on the names)."""
        errs = []
        if not self.name:
            errs.append("--leader-elect-resource-name must not be empty")
        if not self.namespace:
            errs.append("--leader-elect-resource-namespace must not be empty")
        if self.retry_period <= 0:
            errs.append("--leader-elect-retry-period must be greater than zero")
        if self.renew_deadline <= self.retry_period * (1 + RETRY_JITTER):
            errs.append(f"--leader-elect-renew-deadline ({self.renew_deadline:g}s) must be greater than "
                        f"--leader-elect-retry-period x {1 + RETRY_JITTER:g} ({self.retry_period * 1.2:g}s)")
        if self.lease_duration <= self.renew_deadline:
            errs.append(f"--leader-elect-lease-duration ({self.lease_duration:g}s) must be greater than "
                        f"--leader-elect-renew-deadline ({self.renew_deadline:g}s)")
        if self.lease_duration < 1:
            errs.append("--leader-elect-lease-duration must be at least 1s")
        return errs


class Leadership:
    """What the engine asks of leader election. This one: no election, always the leader."""

    elected = False  # whether an election runs at all (``run`` is then the election)

    def __init__(self) -> None:
        self._acquired = asyncio.Event()
        self._acquired.set()

    def valid(self) -> bool:
        """True while this process may act as the scheduler (bind, post events, write status)."""
        return True

    @property
    def leading(self) -> bool:
        return self.valid()

    async def wait_acquired(self) -> None:
        await self._acquired.wait()

    def time_left(self) -> float | None:
        """Seconds this process may still act without another renewal; None: unbounded."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"leaderElection": False}


class LeaderElector(Leadership):
    """client-go's LeaderElector over our aiohttp client. ``run`` returns when leadership is lost
    (after ``on_stopped_leading``); it is cancelled to stop, and then releases the Lease.

    ``on_started_leading()`` / ``on_stopped_leading()``: called on the loop, once each.
    ``on_new_leader(identity)``: whenever the observed holder changes.
    """

    elected = True

    def __init__(self, client, config: ElectionConfig, *,
                 on_started_leading: Callable[[], None] | None = None,
                 on_stopped_leading: Callable[[], None] | None = None,
                 on_new_leader: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.client = client
        self.config = config
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self.clock = clock
        self.rng = rng or random.Random()
        self._acquired = asyncio.Event()
        self.observed: LeaseRecord | None = None
        self.observed_time = 0.0  # our clock, when ``observed`` last changed
        self.observed_version = ""  # the Lease's resourceVersion when we last read or wrote it
        self.renewed_at: float | None = None  # our clock at the start of the last successful acquire/renew
        self.lost = False
        self.last_error: str | None = None
        self._reported_leader: str | None = None

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.config.namespace}/leases"

    @property
    def lease(self) -> str:
        return f"{self.config.namespace}/{self.config.name}"

    @property
    def leader(self) -> str:
        """The identity of the holder as last observed ('' for none)."""
        return self.observed.holder if self.observed else ""

    def valid(self) -> bool:
        return (self._acquired.is_set() and not self.lost and self.renewed_at is not None
                and self.clock() - self.renewed_at < self.config.renew_deadline)

    def time_left(self) -> float | None:
        if not self.valid():
            return 0.0
        return self.renewed_at + self.config.renew_deadline - self.clock()

    def describe(self) -> dict[str, Any]:
        return {"leaderElection": True, "lease": self.lease, "identity": self.config.identity,
                "leader": self.valid(), "holder": self.leader}

    # ------------------------------------------------------------------ one attempt
    async def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's tryAcquireOrRenew): True when we hold the Lease now."""
        cfg = self.config
        start = self.clock()
        now = micro_time()
        if self.valid() and self.observed is not None and self.observed.holder == cfg.identity:
            # fast path: renew on the version we wrote last; a 409 means someone else wrote meanwhile
            rec = LeaseRecord(cfg.identity, int(cfg.lease_duration), self.observed.acquire_time, now,
                              self.observed.transitions)
            try:
                got = await self._write(rec, self.observed_version)
            except ApiError as e:
                if e.status != 409:
                    raise
            else:
                self._observe(LeaseRecord.from_lease(got), got, start)
                self.renewed_at = start
                return True
        try:
            lease = await self.client.request("GET", f"{self.path}/{cfg.name}")
        except ApiError as e:
            if e.status != 404:
                raise
            rec = LeaseRecord(cfg.identity, int(cfg.lease_duration), now, now, 0)
            try:
                got = await self.client.request("POST", self.path, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": cfg.name, "namespace": cfg.namespace}, "spec": rec.spec()})
            except ApiError as e2:
                if e2.status == 409:  # created by another replica just now
                    return False
                raise
            self._observe(rec, got, start)
            self.renewed_at = start
            return True
        old = LeaseRecord.from_lease(lease)
        self._observe(old, lease, self.clock())
        if old.holder and old.holder != cfg.identity and self.observed_time + max(old.duration, 1) > self.clock():
            return False  # held by another, and renewed within its duration as far as we saw
        if old.holder == cfg.identity:
            rec = LeaseRecord(cfg.identity, int(cfg.lease_duration), old.acquire_time, now, old.transitions)
        else:
            rec = LeaseRecord(cfg.identity, int(cfg.lease_duration), now, now, old.transitions + 1)
        try:
            got = await self._write(rec, (lease.get("metadata") or {}).get("resourceVersion", ""))
        except ApiError as e:
            if e.status == 409:  # another replica won the race
                return False
            raise
        self._observe(rec, got, start)
        self.renewed_at = start
        return True

    async def _write(self, rec: LeaseRecord, version: str) -> dict:
        cfg = self.config
        return await self.client.request("PUT", f"{self.path}/{cfg.name}", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": cfg.name, "namespace": cfg.namespace, "resourceVersion": version},
            "spec": rec.spec()})

    def _observe(self, rec: LeaseRecord, lease: Any, at: float) -> None:
        if isinstance(lease, dict):
            self.observed_version = (lease.get("metadata") or {}).get("resourceVersion", "") or self.observed_version
        if rec != self.observed:
            self.observed, self.observed_time = rec, at
        if rec.holder != self._reported_leader:
            self._reported_leader = rec.holder
            if rec.holder and rec.holder != self.config.identity:
                log.info("lease %s is held by %s; standing by", self.lease, rec.holder)
            if self.on_new_leader is not None:
                self.on_new_leader(rec.holder)

    async def _attempt(self, timeout: float) -> bool:
        try:
            ok = await asyncio.wait_for(self.try_acquire_or_renew(), timeout=max(timeout, 0.001))
        except asyncio.CancelledError:
            raise
        except asyncio.TimeoutError:
            self._error(f"no answer within {timeout:.1f}s")
            return False
        except (*REQUEST_ERRORS, ValueError) as e:
            self._error(str(e))
            return False
        self.last_error = None
        return ok

    def _error(self, msg: str) -> None:
        if msg != self.last_error:
            log.warning("lease %s: %s", self.lease, msg)
        self.last_error = msg

    # ------------------------------------------------------------------ the loops
    async def acquire(self) -> None:
        """Retry until we hold the Lease (every retry_period, with jitter)."""
        cfg = self.config
        log.info("attempting to acquire leader lease %s as %s", self.lease, cfg.identity)
        while not await self._attempt(cfg.renew_deadline):
            await asyncio.sleep(cfg.retry_period * (1 + RETRY_JITTER * self.rng.random()))
        self._acquired.set()
        log.info("successfully acquired lease %s: this replica is the leader", self.lease)
        if self.on_started_leading is not None:
            self.on_started_leading()

    async def renew(self) -> None:
        """Renew every retry_period until a renewal fails for renew_deadline; then return."""
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.retry_period)
            while True:
                left = self.renewed_at + cfg.renew_deadline - self.clock()
                if left <= 0:
                    return
                if await self._attempt(left):
                    break
                if self.observed is not None and self.observed.holder not in ("", cfg.identity):
                    return  # someone else holds it now
                await asyncio.sleep(min(cfg.retry_period, max(self.renewed_at + cfg.renew_deadline - self.clock(), 0)))

    async def run(self) -> None:
        """Acquire, then renew until lost; on loss ``on_stopped_leading`` and return. Cancelled:
        release the Lease when held (``release_on_cancel``) and re-raise."""
        try:
            await self.acquire()
            await self.renew()
        except asyncio.CancelledError:
            if self._acquired.is_set() and not self.lost and self.config.release_on_cancel:
                self.lost = True  # nothing is bound from here on
                await asyncio.shield(self.release())
            raise
        self.lost = True
        reason = self.last_error or (f"the lease is held by {self.leader}" if self.leader else "no renewal")
        log.error("leader election lost: lease %s not renewed within %gs (%s)", self.lease,
                  self.config.renew_deadline, reason)
        if self.on_stopped_leading is not None:
            self.on_stopped_leading()

    async def release(self) -> bool:
        """Give the Lease up (holder cleared, duration 1 s) so a standby takes over at once."""
        if self.observed is None or self.observed.holder != self.config.identity:
            return False
        rec = LeaseRecord("", 1, micro_time(), micro_time(), self.observed.transitions)
        try:
            await asyncio.wait_for(self._write(rec, self.observed_version), timeout=self.config.retry_period)
        except REQUEST_ERRORS as e:
            log.warning("lease %s not released: %s", self.lease, e)
            return False
        log.info("released lease %s", self.lease)
        return True
