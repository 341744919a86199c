"""A small asyncio client for the Kubernetes API over aiohttp, with plain dicts: sending requests
(the token bucket, the leadership fence, the one policy for failed requests). Where to connect
and how to authenticate is cluster/credentials.py's part (Credentials, load_credentials).

Used on the hot path (bindings, events, status patches), where the generated clients cost
several times more CPU per call and raise on the Status that a successful Binding returns.
A token bucket limits requests to ``qps`` with ``burst``. A token that expires is renewed by
``Credentials.auth_header_async`` before a request is sent.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Callable

import aiohttp
import orjson

from ..safejson import loads

if TYPE_CHECKING:
    from .credentials import Credentials

log = logging.getLogger(__name__)


class ApiError(Exception):
    """The API server answered with an HTTP error status (``status``, its Status ``body``)."""

    def __init__(self, status: int, body: Any, method: str = "", path: str = "") -> None:
        self.status = status
        self.body = body
        msg = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: HTTP {status}: {msg}")

    @property
    def reason(self) -> str:
        return self.body.get("reason", "") if isinstance(self.body, dict) else ""


# The one policy for failed requests, used by every caller in cluster/: TRANSPORT_ERRORS, the
# request got no answer (connection refused or reset, TLS, a timeout); REQUEST_ERRORS, any
# failed request, answered with an error status (ApiError) or not. A caller catches one of the
# two (adding what its own parsing may raise), never its own spelling of them.
class Fenced(Exception):
    """A fenced request was not sent: its fence said the deadline had passed (a leader's write
    after its lease's renew deadline). Nothing reached the API server; a caller treats it as a
    write that did not happen, never as one whose outcome is unknown."""

    def __init__(self, method: str = "", path: str = "") -> None:
        super().__init__(f"{method} {path}: not sent: the leader lease's renew deadline has passed")


# Fenced is a transport error (the request got no answer), so a caller that does not tell it
# apart treats it as a failed write; bind and DELETE tell it apart (certainly not sent).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (Fenced, aiohttp.ClientError, asyncio.TimeoutError, OSError)
REQUEST_ERRORS: tuple[type[BaseException], ...] = (ApiError, *TRANSPORT_ERRORS)


class TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        self.rate = float(qps)
        self.capacity = max(1, int(burst))
        self.tokens = float(self.capacity)
        self.last = time.monotonic()

    async def take(self) -> None:
        if self.rate <= 0:
            return
        while True:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.rate)


class _FencedBody(aiohttp.payload.BytesPayload):
    """The body of a fenced request. The fence is asked once more when aiohttp writes the body:
    the status line and headers wait in its buffer to go out with the first body bytes, so this
    check is made in the same step of the loop as the socket write, after the connection was
    acquired (a pool wait, a TCP or TLS handshake). Raising here sends nothing."""

    def __init__(self, data: bytes, content_type: str, fence: Callable[[], float | None], method: str,
                 path: str) -> None:
        super().__init__(data, content_type=content_type)
        self._fence, self._method, self._path = fence, method, path

    def _check(self) -> None:
        left = self._fence()
        if left is not None and left <= 0:
            raise Fenced(self._method, self._path)

    async def write(self, writer) -> None:
        self._check()
        await super().write(writer)

    async def write_with_length(self, writer, content_length) -> None:
        self._check()
        await super().write_with_length(writer, content_length)


class KubeClient:
    def __init__(self, creds: Credentials, qps: float = 200.0, burst: int = 400, timeout: float = 30.0,
                 user_agent: str = "policy-scheduler") -> None:
        self.creds = creds
        self.bucket = TokenBucket(qps, burst)
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        # client-go's rest_client_* metrics (cluster/telemetry_collectors.RestClientMetrics), set
        # before the first request: every request of the session, the informers' included
        self.metrics: Any = None
        self.on_fenced: Callable[[str], None] | None = None  # a fenced request not sent (its method)
        self.fenced = 0  # fenced requests not sent
        self._fenced_logged = -math.inf

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256, ssl=self.creds.ssl_context),
                timeout=self.timeout, headers={"User-Agent": self.user_agent},
                cookie_jar=aiohttp.DummyCookieJar(),  # the API server sets none: skip the per-request jar lookup
                json_serialize=lambda o: orjson.dumps(o).decode(),
                middlewares=(self.metrics.middleware(),) if self.metrics is not None else ())
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(self, method: str, path: str, body: Any = None, params: dict | None = None,
                      content_type: str = "application/json", timeout: float | None = None,
                      decode: Callable[[bytes], Any] = loads,
                      fence: Callable[[], float | None] | None = None) -> Any:
        """Send one request; return the decoded JSON body, raise ApiError for HTTP >= 400.
        ``timeout``: seconds for this request instead of the client's (asyncio.TimeoutError);
        ``decode``: how a successful answer's body is read (safejson.loads, or what falls back on it).

        ``fence``: seconds this request may still be sent in, None for no limit (a leader's
        write: its lease's time left, ``Leadership.time_left``). It is asked after the token
        bucket and a token renewal, immediately before the request goes out, and again when the
        body is written (``_FencedBody``; a fenced request carries a body); its answer bounds
        the request's timeout. At 0 or less the request is not sent: Fenced is raised and
        ``on_fenced`` told."""
        await self.bucket.take()
        headers = {**(await self.creds.auth_header_async()), "Accept": "application/json"}
        if fence is not None:
            left = fence()
            if left is not None:
                if left <= 0:
                    self._fenced(method)
                    raise Fenced(method, path)
                timeout = left if timeout is None else min(timeout, left)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = orjson.dumps(body)
            if fence is not None:
                data = _FencedBody(data, content_type, fence, method, path)
        extra = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(total=timeout)}
        try:
            async with self.session.request(method, self.creds.server + path, data=data, params=params,
                                            headers=headers, **extra) as resp:
                raw = await resp.read()
                try:  # orjson, or for an answer nested deeper than it reads, the tolerant decoder
                    payload = (decode(raw) if resp.status < 400 else loads(raw)) if raw else None
                except ValueError:
                    payload = raw.decode(errors="replace")
                if resp.status >= 400:
                    raise ApiError(resp.status, payload, method, path)
                return payload
        except aiohttp.ClientError as e:
            if isinstance(e.__cause__, Fenced):  # the body's check (aiohttp wraps what a payload raises)
                self._fenced(method)
                raise e.__cause__ from None
            raise

    def _fenced(self, method: str) -> None:
        self.fenced += 1
        now = time.monotonic()
        if now - self._fenced_logged >= 1.0:  # a deposed leader's queue may hold thousands of writes
            self._fenced_logged = now
            log.warning("%s request not sent: the leader lease's renew deadline has passed (%d fenced so far)",
                        method, self.fenced)
        if self.on_fenced is not None:
            self.on_fenced(method)

    async def get(self, path: str, **params) -> Any:
        return await self.request("GET", path, params=params or None)

    async def post(self, path: str, body: Any, fence: Callable[[], float | None] | None = None) -> Any:
        return await self.request("POST", path, body, fence=fence)

    async def merge_patch(self, path: str, body: Any, fence: Callable[[], float | None] | None = None) -> Any:
        return await self.request("PATCH", path, body, content_type="application/merge-patch+json", fence=fence)

    async def strategic_patch(self, path: str, body: Any, fence: Callable[[], float | None] | None = None) -> Any:
        return await self.request("PATCH", path, body, content_type="application/strategic-merge-patch+json",
                                  fence=fence)

    async def bind(self, namespace: str, name: str, node: str, uid: str | None = None,
                   annotations: dict[str, str] | None = None, timeout: float | None = None,
                   fence: Callable[[], float | None] | None = None) -> None:
        """POST pods/binding. The API answers 201 with a v1.Status; 409 if already bound."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if annotations:
            meta["annotations"] = annotations
        await self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
                           {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}, timeout=timeout,
                           fence=fence)
