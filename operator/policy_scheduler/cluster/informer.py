"""LIST + WATCH informers for the resources the scheduler's cache is built from.

A scheduler must not decide before its cache holds every bound pod and every node (upstream's
WaitForCacheSync), or it overcommits nodes whose pods it has not seen yet. An informer LISTs
(paginated), hands every object to the handler, sets ``synced``, then WATCHes from the list's
resourceVersion. On 410 Gone or a broken stream it re-LISTs and reports objects that vanished
meanwhile as DELETED, so the cache never keeps a ghost. A failed LIST or WATCH is retried with
exponential backoff and jitter (``Backoff``, as client-go's reflector); ``last_error`` says why.

An ``optional`` informer is for a kind whose CRD may not be installed (scheduler-plugins'
PodGroups): a LIST answered 404 counts as an empty list (the informer is synced, so the operator
starts), and the LIST is tried again every ``absent_retry`` seconds until the kind is served.

Every object is hostile until parsed: pages and watch lines are read with safejson (orjson, and
for a document orjson refuses, nested deeper than it reads, a decoder that replaces the deepest
subtrees by a marker), so one such object neither stops the informer nor hides the others; it
reaches the handler, whose owner reports it. A LIST or WATCH answer that is not JSON at all is a
failed request (retried); an item or event that is not an object is skipped with a warning.

A handler that raises (a bug: handlers report bad objects on themselves) leaves the cache unsure
about that object: a ghost pod kept, a node missed. The informer then relists, and the known-set
diff repairs the state (a pod deleted meanwhile is reported DELETED). Each failure is counted
(``on_handler_error``), logged with the object's kind, namespace, name and resourceVersion (the
exception text and the traceback bounded), and the relist is scheduled with a backoff of its own
(``relist_backoff``: 1 s doubling up to 5 min) while the watch goes on, so a handler that always
raises on one object does not relist in a hot loop. An object whose handler raises again in the
relist meant to repair it is *quarantined*: the cache keeps what the handler left of it, no further
relist is made for it, and ``problem`` (``/readyz``'s ``informer/<name>`` check) says so until a
later event of it is handled (it changed) or it is deleted. A DELETED whose handler raised keeps
its key known, so the next relist reports the deletion again. ``problem`` also names a LIST that
failed RELIST_FAILING_AFTER times in a row once synced (the cache then ages unseen).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import traceback
from typing import Any, Callable, Mapping

import aiohttp

from ..safejson import loads
from .kubeclient import TRANSPORT_ERRORS, ApiError, KubeClient

log = logging.getLogger("policy_scheduler.informer")

Handler = Callable[[str, Mapping[str, Any]], None]
LIST_YIELD = 100  # a LIST's objects handed over between two yields to the event loop
RELIST_FAILING_AFTER = 3  # consecutive failed LISTs after which a synced informer reports a problem
MAX_TRACKED = 1000  # objects remembered per informer as failing or quarantined (keys are bounded too)
MAX_KEY = 320  # namespace/name as logged and tracked (63 + 1 + 253, with room)
MAX_ERROR = 500  # characters of a handler's exception text in the log and in ``problem``
TRACE_FRAMES = 8  # innermost frames of a handler's traceback in the log


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return ""
    ns, name = meta.get("namespace"), meta.get("name")
    name = name if isinstance(name, str) else ""
    return f"{ns}/{name}" if isinstance(ns, str) and ns else name


def _rv(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return rv[:32] if isinstance(rv, str) else ""


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


class Gone(Exception):
    pass


class Informer:
    def __init__(self, client: KubeClient, path: str, handler: Handler, name: str, *, page: int = 1000,
                 watch_timeout: int = 300, backoff: "Backoff | None" = None, optional: bool = False,
                 absent_retry: float = 10.0, decode_page: Callable[[bytes], Any] = loads,
                 decode_event: Callable[[bytes], Any] = loads, relist_backoff: "Backoff | None" = None,
                 on_handler_error: Callable[[str], None] | None = None,
                 on_relist: Callable[[str], None] | None = None,
                 on_quarantine: Callable[[int], None] | None = None) -> None:
        self.client = client
        self.path = path
        self.handler = handler
        self.name = name
        self.page = page
        self.watch_timeout = watch_timeout
        self.backoff = backoff or Backoff()
        self.synced = asyncio.Event()
        self.last_error: str | None = None  # why the last LIST or WATCH failed (readiness, stuck sync)
        self.known: set[str] = set()
        self.resource_version = ""
        self.events = 0
        self.optional = optional
        self.absent_retry = absent_retry
        self.absent = False  # an optional kind the API server does not serve (yet)
        # how a LIST page and a WATCH line are read: safejson.loads, or for Pods and Nodes
        # objdecode's, which leaves managedFields out
        self.decode_page = decode_page
        self.decode_event = decode_event
        # handler failures: the relist that repairs them, with its own backoff (``_deliver``)
        self.relist_backoff = relist_backoff or Backoff(initial=1.0, cap=300.0, reset=600.0)
        self.on_handler_error = on_handler_error  # (kind): a handler raised (the metric)
        self.on_relist = on_relist  # (reason): a relist starts after the first LIST (the metric)
        self.on_quarantine = on_quarantine  # (objects quarantined now): the gauge
        self.handler_errors = 0
        self.relist_due: float | None = None  # time.monotonic() when the relist a handler failure asked for is due
        self._relist_set = asyncio.Event()
        self._suspects: dict[str, str] = {}  # key -> why: failed since the last relist (the next one repairs them)
        self.quarantined: dict[str, str] = {}  # key -> why: failed again in the relist meant to repair them
        self._listing = False
        self._list_suspects: dict[str, str] = {}  # the suspects the running relist is repairing
        self.list_failures = 0  # consecutive failed LISTs

    @property
    def problem(self) -> str | None:
        """Why this informer's cache is not to be trusted now, once synced (``/readyz``'s
        ``informer/<name>`` check): objects a relist could not repair, or a LIST that keeps failing."""
        if self.quarantined:
            key, why = next(iter(self.quarantined.items()))
            more = f" (and {len(self.quarantined) - 1} more)" if len(self.quarantined) > 1 else ""
            return (f"the handler raised again on {key}{more} in the relist meant to repair it: {why}; "
                    "kept as the cache holds it until it changes or is deleted")
        if self.synced.is_set() and self.list_failures >= RELIST_FAILING_AFTER:
            return f"relisting: {self.list_failures} LISTs failed in a row; {self.last_error}"
        return None

    def _deliver(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """Hand one event to the handler; on an exception, report the object and schedule a
        relist (or quarantine it, in the relist meant to repair it). False when the handler raised."""
        try:
            self.handler(kind, obj)
        except Exception as e:  # a handler bug must not kill the watch
            self._handler_failed(kind, obj, e)
            return False
        if self.quarantined:  # (the key only then: a LIST of 50,000 pods pays nothing)
            key = object_key(obj)[:MAX_KEY]
            if key in self.quarantined:
                del self.quarantined[key]  # changed (or gone) and handled: the cache holds it again
                log.info("%s informer: %s %s handled again; no longer quarantined", self.name, kind, key)
                self._quarantine_changed()
        return True

    def _handler_failed(self, kind: str, obj: Mapping[str, Any], e: BaseException) -> None:
        self.handler_errors += 1
        if self.on_handler_error is not None:
            self.on_handler_error(kind)
        key, rv = object_key(obj)[:MAX_KEY], _rv(obj)
        why = _bounded(f"{type(e).__name__}: {e}", MAX_ERROR)
        tb = "".join(traceback.format_tb(e.__traceback__, limit=-TRACE_FRAMES))
        if self._listing and (key in self._list_suspects or key in self.quarantined):
            # the relist meant to repair it failed on it again: no relist loop for this object
            if key not in self.quarantined and len(self.quarantined) < MAX_TRACKED:
                self.quarantined[key] = why
                self._quarantine_changed()
                log.error("%s informer: handler failed again on %s %s (resourceVersion %s) in the relist: %s; "
                          "quarantined: kept as the cache holds it, no further relist for it until it changes or "
                          "is deleted\n%s", self.name, kind, key, rv, why, tb)
            else:
                log.debug("%s informer: handler failed on quarantined %s %s: %s", self.name, kind, key, why)
            return
        if key in self.quarantined and not self._listing:
            del self.quarantined[key]  # it changed and still fails: one more relist for it
            self._quarantine_changed()
        if len(self._suspects) < MAX_TRACKED:
            self._suspects[key] = why
        due = self.relist_due is None
        if due:
            self.relist_due = time.monotonic() + self.relist_backoff.next()
            self._relist_set.set()
        log.error("%s informer: handler failed on %s %s (resourceVersion %s): %s; %s\n%s", self.name, kind, key, rv,
                  why, f"relisting in {max(0.0, self.relist_due - time.monotonic()):.1f}s" if due
                  else "a relist is already due", tb)

    def _quarantine_changed(self) -> None:
        if self.on_quarantine is not None:
            self.on_quarantine(len(self.quarantined))

    async def list(self) -> None:
        """LIST in pages. The next page is asked for as this one's objects are handed over, so
        the API server encodes it while the handler parses these (both cores busy, not in turn);
        the handler yields to the loop every LIST_YIELD objects, so the request goes out and the
        probes answer."""
        seen: set[str] = set()
        ahead: asyncio.Task | None = None
        # the objects whose handler failed since the last relist: this one repairs them, or (should
        # the handler fail on one again) quarantines it
        self._list_suspects, self._suspects = self._suspects, {}
        self.relist_due = None
        self._listing = True
        try:
            body = await self._page(None)
            while True:
                if not isinstance(body, dict):
                    raise ValueError(f"the LIST answer is not a JSON object: {str(body)[:200]!r}")
                cont = (body.get("metadata") or {}).get("continue")
                if cont:
                    ahead = asyncio.ensure_future(self._page(cont))
                    await asyncio.sleep(0)  # let it start
                for n, item in enumerate(body.get("items") or [], 1):
                    if not isinstance(item, dict):
                        log.warning("%s informer: skipped a listed item that is not an object", self.name)
                        continue
                    key = object_key(item)
                    seen.add(key)
                    self._deliver("ADDED", item)
                    if n % LIST_YIELD == 0:
                        await asyncio.sleep(0)
                if not cont:
                    self.resource_version = (body.get("metadata") or {}).get("resourceVersion", "")
                    break
                assert ahead is not None
                body, ahead = await ahead, None
            for key in self.known - seen:  # gone while we were not watching
                ns, _, name = key.rpartition("/")
                meta = {"name": name, **({"namespace": ns} if ns else {})}
                if not self._deliver("DELETED", {"metadata": meta}):
                    seen.add(key)  # still known: the next relist reports its deletion again
            self.known = seen
        except BaseException:
            self._suspects.update(self._list_suspects)  # not repaired: the next relist tries again
            raise
        finally:
            self._listing = False
            self._list_suspects = {}
            if ahead is not None:  # cancelled, or a handler's page failed: the request ahead goes too
                ahead.cancel()

    async def _page(self, cont: str | None) -> Any:
        params: dict[str, Any] = {"limit": str(self.page)}
        if cont:
            params["continue"] = cont
        return await self.client.request("GET", self.path, params=params, decode=self.decode_page)

    async def watch(self) -> None:
        params = {"watch": "1", "allowWatchBookmarks": "true", "resourceVersion": self.resource_version,
                  "timeoutSeconds": str(self.watch_timeout)}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=self.watch_timeout + 30)
        async with self.client.session.get(self.client.creds.server + self.path, params=params, timeout=timeout,
                                           headers=await self.client.creds.auth_header_async()) as resp:
            if resp.status == 410:
                raise Gone()
            if resp.status >= 400:
                raise ApiError(resp.status, await resp.text(), "WATCH", self.path)
            buf = b""
            async for chunk in resp.content.iter_any():
                if b"\n" not in chunk:
                    buf += chunk
                    continue
                *lines, buf = (buf + chunk).split(b"\n")  # one event per line; the last may be partial
                for line in lines:
                    if line.strip():
                        self._event(self.decode_event(line))

    def _event(self, ev: Any) -> None:
        if not isinstance(ev, dict):
            raise ValueError(f"a watch event that is not a JSON object: {str(ev)[:200]!r}")
        kind = ev.get("type")
        obj = ev.get("object") or {}
        if not isinstance(obj, dict):
            log.warning("%s informer: skipped a %s event whose object is not an object", self.name, kind)
            return
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise ApiError(int(obj.get("code") or 500), obj, "WATCH", self.path)
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = rv
        if kind == "BOOKMARK":
            return
        self.events += 1
        key = object_key(obj)
        if kind == "DELETED":
            self.known.discard(key)
        else:
            self.known.add(key)
        if not self._deliver(kind, obj) and kind == "DELETED":
            self.known.add(key)  # the relist's diff reports the deletion again

    async def _watch(self) -> bool:
        """WATCH until the server ends it (False: resume from our version) or until the relist a
        handler failure asked for is due (True); the watch goes on meanwhile."""
        task = asyncio.ensure_future(self.watch())
        try:
            while not task.done():
                if self.relist_due is None:
                    self._relist_set.clear()
                    waiter = asyncio.ensure_future(self._relist_set.wait())
                    try:
                        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        waiter.cancel()
                    continue
                left = self.relist_due - time.monotonic()
                if left <= 0:
                    return True
                await asyncio.wait({task}, timeout=left)
            task.result()  # Gone, ApiError, ...: the caller's
            return False
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def _relisting(self, reason: str) -> None:
        if self.on_relist is not None and self.synced.is_set():
            self.on_relist(reason)

    async def run(self) -> None:
        need_list = True
        while True:
            try:
                if need_list:
                    try:
                        await self.list()
                    except asyncio.CancelledError:
                        raise
                    except BaseException:
                        self.list_failures += 1
                        raise
                    self.list_failures = 0
                    if self.absent:
                        log.info("%s informer: the kind is served now", self.name)
                        self.absent = False
                    if not self.synced.is_set():
                        log.info("%s informer synced: %d objects", self.name, len(self.known))
                    self.synced.set()
                    self.last_error = None
                    need_list = False
                if await self._watch():  # False: the server ended the watch; resume from our version
                    log.info("%s informer: relisting to repair the cache after a handler failure", self.name)
                    self._relisting("handler_error")
                    need_list = True
            except Gone:
                log.info("%s informer: resourceVersion too old; listing again", self.name)
                self._relisting("gone")
                need_list = True
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                if not (self.optional and need_list and e.status == 404):
                    delay = self._failed(e, need_list)
                    need_list = True
                    await asyncio.sleep(delay)
                    continue
                if not self.absent:
                    log.info("%s informer: not served by the API server (404: its CRD is not installed?); "
                             "empty until it is, checked every %.0fs", self.name, self.absent_retry)
                self.absent = True
                self.list_failures = 0
                for key in list(self.known):  # the kind went away: so did its objects
                    ns, _, name = key.rpartition("/")
                    self._deliver("DELETED", {"metadata": {"name": name, **({"namespace": ns} if ns else {})}})
                self.known = set()
                self.synced.set()
                self.last_error = None
                await asyncio.sleep(self.absent_retry)
                continue
            except (*TRANSPORT_ERRORS, ValueError) as e:
                delay = self._failed(e, need_list)
                need_list = True
                await asyncio.sleep(delay)

    def _failed(self, e: BaseException, listing: bool) -> float:
        """Record why a LIST or WATCH failed; the delay before the next try."""
        what = "list" if listing else "watch"
        self._relisting("error")
        self.last_error = f"{what} failed: {e}" if str(e) else f"{what} failed: {type(e).__name__}"
        delay = self.backoff.next()
        log.warning("%s informer: %s; retrying in %.1fs", self.name, self.last_error, delay)
        return delay


class Backoff:
    """client-go's reflector backoff: from ``initial`` doubling up to ``cap``, each delay
    stretched by up to ``jitter`` (1.0: up to twice as long), back to ``initial`` after
    ``reset`` seconds without a failure. Many replicas (or informers) that lost the API server
    together do not come back in step."""

    def __init__(self, initial: float = 0.8, cap: float = 30.0, factor: float = 2.0, jitter: float = 1.0,
                 reset: float = 120.0, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.initial, self.cap, self.factor, self.jitter, self.reset = initial, cap, factor, jitter, reset
        self.rng = rng or random.Random()
        self.clock = clock
        self._step = 0.0
        self._last: float | None = None

    def next(self) -> float:
        now = self.clock()
        if self._last is None or now - self._last > self.reset:
            self._step = self.initial
        else:
            self._step = min(self._step * self.factor, self.cap)
        self._last = now
        return self._step * (1 + self.jitter * self.rng.random())
