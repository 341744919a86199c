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
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Callable, Mapping

import aiohttp

from ..safejson import loads
from .kubeclient import TRANSPORT_ERRORS, ApiError, KubeClient

log = logging.getLogger("policy_scheduler.informer")

Handler = Callable[[str, Mapping[str, Any]], None]
LIST_YIELD = 100  # a LIST's objects handed over between two yields to the event loop


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return ""
    ns, name = meta.get("namespace"), meta.get("name")
    name = name if isinstance(name, str) else ""
    return f"{ns}/{name}" if isinstance(ns, str) and ns else name


class Gone(Exception):
    pass


class Informer:
    def __init__(self, client: KubeClient, path: str, handler: Handler, name: str, *, page: int = 1000,
                 watch_timeout: int = 300, backoff: "Backoff | None" = None, optional: bool = False,
                 absent_retry: float = 10.0, decode_page: Callable[[bytes], Any] = loads,
                 decode_event: Callable[[bytes], Any] = loads) -> None:
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

    def _deliver(self, kind: str, obj: Mapping[str, Any]) -> None:
        try:
            self.handler(kind, obj)
        except Exception:  # a handler bug must not kill the watch
            log.exception("%s informer: handler failed on %s %s", self.name, kind, object_key(obj))

    async def list(self) -> None:
        """LIST in pages. The next page is asked for as this one's objects are handed over, so
        the API server encodes it while the handler parses these (both cores busy, not in turn);
        the handler yields to the loop every LIST_YIELD objects, so the request goes out and the
        probes answer."""
        seen: set[str] = set()
        ahead: asyncio.Task | None = None
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
        finally:
            if ahead is not None:  # cancelled, or a handler's page failed: the request ahead goes too
                ahead.cancel()
        for key in self.known - seen:  # gone while we were not watching
            ns, _, name = key.rpartition("/")
            meta = {"name": name, **({"namespace": ns} if ns else {})}
            self._deliver("DELETED", {"metadata": meta})
        self.known = seen

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
        self._deliver(kind, obj)

    async def run(self) -> None:
        need_list = True
        while True:
            try:
                if need_list:
                    await self.list()
                    if self.absent:
                        log.info("%s informer: the kind is served now", self.name)
                        self.absent = False
                    if not self.synced.is_set():
                        log.info("%s informer synced: %d objects", self.name, len(self.known))
                    self.synced.set()
                    self.last_error = None
                    need_list = False
                await self.watch()  # returns when the server ends the watch: resume from our version
            except Gone:
                log.info("%s informer: resourceVersion too old; listing again", self.name)
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
