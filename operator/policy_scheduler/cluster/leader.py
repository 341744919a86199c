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

The election runs on a thread of its own, with its own event loop and its own HTTP client (its
own connections and token bucket, the operator's credentials), as kube-scheduler's leader
election runs in its own goroutine with its own client: a scheduling loop that is busy, stalled
or waiting in its token bucket cannot delay a renewal and so cannot cost leadership. The loop
reads the outcome: ``valid()`` and ``time_left()`` (the fence every leader write carries to the
moment it is sent: kubeclient.KubeClient.request ``fence``) are plain reads of what the thread
wrote, safe from any thread; acquisition and loss are handed to the loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable


from .kubeclient import REQUEST_ERRORS, ApiError, KubeClient

log = logging.getLogger("policy_scheduler.leader")

LEASE_DURATION = 15.0  # kube-scheduler's --leader-elect-lease-duration
RENEW_DEADLINE = 10.0  # --leader-elect-renew-deadline
RETRY_PERIOD = 2.0  # --leader-elect-retry-period
RESOURCE_NAMESPACE = "kube-system"  # --leader-elect-resource-namespace, as kube-scheduler
RETRY_JITTER = 0.2  # a standby retries every retry_period x [1, 1.2)
# the election's own client: a few requests per retry period, never queued behind the scheduler's
LEASE_QPS, LEASE_BURST = 5.0, 10


def lease_client(client: KubeClient) -> KubeClient:
    """The election's own client over the operator client's credentials (token renewal
    included): its own connections and token bucket; its User-Agent names it. Its requests
    count in the same ``rest_client_*`` metrics (thread-safe Prometheus children)."""
    own = KubeClient(client.creds, qps=LEASE_QPS, burst=LEASE_BURST, user_agent=f"{client.user_agent}/leader-election")
    own.metrics = client.metrics
    return own


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
    """client-go's LeaderElector, on a thread of its own. ``run`` (awaited on the operator's
    loop) starts the thread and returns when leadership is lost (after ``on_stopped_leading``);
    it is cancelled to stop, and then the thread releases the Lease.

    ``client``: the operator's client, whose credentials the election's own client uses
    (``make_client``, by default ``lease_client``; tests pass an in-memory one).
    ``on_started_leading()`` / ``on_stopped_leading()``: called on the loop, once each.
    ``on_new_leader(identity)``: whenever the observed holder changes (on the loop).
    """

    elected = True

    def __init__(self, client, config: ElectionConfig, *,
                 on_started_leading: Callable[[], None] | None = None,
                 on_stopped_leading: Callable[[], None] | None = None,
                 on_new_leader: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None,
                 make_client: Callable[[], Any] | None = None) -> None:
        self.client = client
        self.make_client = make_client or (lambda: lease_client(client))
        self.api: Any = None  # the election's own client, made on its thread
        self.config = config
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self.clock = clock
        self.rng = rng or random.Random()
        self._acquired = asyncio.Event()  # set on the operator's loop, for wait_acquired
        # written by the election's thread only; read from any thread
        self._holding = False
        self.observed: LeaseRecord | None = None
        self.observed_time = 0.0  # our clock, when ``observed`` last changed
        self.observed_version = ""  # the Lease's resourceVersion when we last read or wrote it
        self.renewed_at: float | None = None  # our clock at the start of the last successful acquire/renew
        self.renewals = 0  # successful acquisitions and renewals
        self.lost = False
        self.last_error: str | None = None
        self._reported_leader: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the operator's
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._thread_task: asyncio.Task | None = None
        self._stop_requested = False

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
        """Whether this replica holds the Lease and its last renewal is younger than the renew
        deadline (the thread's last writes; our monotonic clock). Safe from any thread."""
        renewed = self.renewed_at
        return (self._holding and not self.lost and renewed is not None
                and self.clock() - renewed < self.config.renew_deadline)

    def time_left(self) -> float | None:
        """Seconds until the renew deadline (0.0 when not valid): the fence of every write."""
        renewed = self.renewed_at
        if renewed is None or not self.valid():
            return 0.0
        return max(renewed + self.config.renew_deadline - self.clock(), 0.0)

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
                self._renewed(start)
                return True
        try:
            lease = await self.api.request("GET", f"{self.path}/{cfg.name}")
        except ApiError as e:
            if e.status != 404:
                raise
            rec = LeaseRecord(cfg.identity, int(cfg.lease_duration), now, now, 0)
            try:
                got = await self.api.request("POST", self.path, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": cfg.name, "namespace": cfg.namespace}, "spec": rec.spec()})
            except ApiError as e2:
                if e2.status == 409:  # created by another replica just now
                    return False
                raise
            self._observe(rec, got, start)
            self._renewed(start)
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
        self._renewed(start)
        return True

    def _renewed(self, start: float) -> None:
        self.renewed_at = start
        self.renewals += 1

    async def _write(self, rec: LeaseRecord, version: str) -> dict:
        cfg = self.config
        return await self.api.request("PUT", f"{self.path}/{cfg.name}", {
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
                self._on_loop(self.on_new_leader, rec.holder)

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
        self._holding = True
        self._on_loop(self._acquired.set)
        log.info("successfully acquired lease %s: this replica is the leader", self.lease)
        if self.on_started_leading is not None:
            self._on_loop(self.on_started_leading)

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

    # ------------------------------------------------------------------ the thread
    async def run(self) -> None:
        """Start the election's thread; return when leadership is lost (``on_stopped_leading``
        first). Cancelled: nothing is written from then on, the thread releases the Lease when
        held (``release_on_cancel``, waited for up to a retry period), and this re-raises."""
        loop = self._loop = asyncio.get_running_loop()
        ended: asyncio.Future = loop.create_future()

        def finish(outcome: str) -> None:  # on the thread, as it ends
            def done() -> None:
                if not ended.done():
                    ended.set_result(outcome)
            try:
                loop.call_soon_threadsafe(done)
            except RuntimeError:  # the operator's loop is closed
                pass

        self._thread = threading.Thread(target=self._thread_main, args=(finish,), daemon=True,
                                        name=f"leader-election {self.lease}")
        self._thread.start()
        try:
            outcome = await asyncio.shield(ended)
        except asyncio.CancelledError:
            if self._holding and not self.lost and self.config.release_on_cancel:
                self.lost = True  # nothing is bound from here on
            self._stop_thread()
            try:
                await asyncio.wait_for(asyncio.shield(ended), timeout=self.config.retry_period + 1.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                log.warning("lease %s: the election's thread did not stop in time", self.lease)
            raise
        if outcome == "lost" and self.on_stopped_leading is not None:
            self.on_stopped_leading()

    def _thread_main(self, finish: Callable[[str], None]) -> None:
        loop = self._thread_loop = asyncio.new_event_loop()
        outcome = "lost"
        try:
            outcome = loop.run_until_complete(self._elect())
        finally:
            try:
                if self.api is not None and hasattr(self.api, "close"):
                    loop.run_until_complete(self.api.close())
                loop.run_until_complete(loop.shutdown_asyncgens())
            except Exception:  # noqa: BLE001 - closing only
                pass
            loop.close()
            finish(outcome)

    async def _elect(self) -> str:
        """On the thread: acquire, then renew until lost ("lost"); cancelled ("cancelled"):
        release the Lease when held and ``release_on_cancel``."""
        self._thread_task = asyncio.current_task()
        if self._stop_requested:
            return "cancelled"
        try:
            self.api = self.make_client()
            await self.acquire()
            await self.renew()
        except asyncio.CancelledError:
            if self._holding and self.config.release_on_cancel:
                self.lost = True
                await self.release()
            return "cancelled"
        except Exception:  # a bug must not leave a leader that believes it leads
            log.exception("lease %s: leader election failed", self.lease)
        self.lost = True
        renewed = self.renewed_at
        reason = self.last_error or (
            f"the lease is held by {self.leader}" if self.leader not in ("", self.config.identity)
            else "no renewal" if renewed is None else f"last renewal {self.clock() - renewed:.1f}s ago")
        log.error("leader election lost: lease %s not renewed within %gs (%s)", self.lease,
                  self.config.renew_deadline, reason)
        return "lost"

    def _stop_thread(self) -> None:
        self._stop_requested = True  # read by _elect after it has set _thread_task
        loop, task = self._thread_loop, self._thread_task
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the thread's loop is closed: it has ended
                pass

    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn`` on the operator's loop (at once when there is none, or we are on it)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            fn(*args)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn(*args)
        else:
            loop.call_soon_threadsafe(fn, *args)

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
