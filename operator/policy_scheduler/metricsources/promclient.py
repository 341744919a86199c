"""One Prometheus instant query over HTTP, bounded in time, size and what it may echo.

A policy's author chooses ``spec.prometheus.address``: any http(s) URL the scheduler pod can
reach. The answer is untrusted, so:

- **A total deadline.** urllib3's timeouts are per socket operation: a server that drips one
  byte at a time, in the headers or in the body, never trips them. A watchdog shuts the query's
  sockets down when its time is up (``timeout`` from the start, connect and TLS included), so a
  query thread is never held longer than that.
- **A byte cap.** The body is read in chunks (``read1``: what one receive gives) up to
  ``MAX_ANSWER_BYTES`` (16 MiB) after decoding; a bigger answer is the query's fault (too many
  series: aggregate by node) and is refused without being parsed.
- **No echo.** Only Prometheus's own ``errorType`` and ``error`` fields of an error answer are
  kept, bounded and stripped of control characters (``clean``); a body that is not Prometheus's
  JSON is never quoted. The policy's status shows these texts to anyone who can read policies.
- **No redirect, no retry.** A redirect is an answer like any other non-200 (HTTP 3xx): the
  address is the one the policy names. The next refresh is the retry.

Blocking: ``metricsources/prometheus.py`` calls it in its own small thread pool, never on the
event loop and never in asyncio's default executor (which the API client's token renewal uses).
Proxies: ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` are honoured, as by the client this replaces.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

MAX_ANSWER_BYTES = 16 * 1024 * 1024
ERROR_TYPE_CHARS = 40
ERROR_CHARS = 300
READ_CHUNK = 1 << 16


class QueryError(Exception):
    """Prometheus answered, but the query is invalid or its result is not a vector keyed by node."""


class Unreachable(Exception):
    """No usable answer: connection refused, timeout, or a server error."""


def clean(text: Any, limit: int = ERROR_CHARS) -> str:
    """``text`` as one printable line of at most ``limit`` characters: control and format
    characters (newlines, escapes, bidi overrides) dropped, the rest kept."""
    s = "".join(ch if ch.isprintable() else " " if ch in "\t\r\n" else "" for ch in str(text))
    s = " ".join(s.split())
    return s if len(s) <= limit else s[:limit - 1] + "…"


def prometheus_error(body: bytes) -> str:
    """``errorType: error`` of a Prometheus error answer, bounded and clean; "" when the body is
    not Prometheus's JSON (its text is never shown)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ""
    if not isinstance(doc, dict):
        return ""
    etype, err = doc.get("errorType"), doc.get("error")
    etype = clean(etype, ERROR_TYPE_CHARS) if isinstance(etype, str) else ""
    err = clean(err, ERROR_CHARS) if isinstance(err, str) else ""
    if not etype and not err:
        return ""
    return f"{etype or 'error'}: {err}"


# --------------------------------------------------------------------------------------------
# the deadline: every socket a query opens is shut down when its time is up


class _Deadline:
    """Registered in the query's thread (``_current``); the connections below add their sockets
    once connected. ``shutdown`` wakes a thread blocked in recv (close would not)."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def add(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._socks.append(sock)
            expired = self.expired
        if expired:
            _shutdown(sock)

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            socks = list(self._socks)
        for s in socks:
            _shutdown(s)

    def cancel(self) -> None:
        self._timer.cancel()


def _shutdown(sock: socket.socket) -> None:
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's (an SSLSocket's drops its TLS state)
    except OSError:
        pass


_current = threading.local()


def _register(sock: socket.socket | None) -> None:
    d = getattr(_current, "deadline", None)
    if d is not None:
        d.add(sock)


class _WatchedHTTPConnection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _register(self.sock)


class _WatchedHTTPSConnection(HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _register(self.sock)


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


def _manager(url: str) -> urllib3.PoolManager:
    """A pool manager for one query (no connection outlives it), through the environment's proxy
    for this URL if any."""
    host = urlsplit(url).hostname or ""
    proxy = urllib.request.getproxies().get(urlsplit(url).scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        pm: urllib3.PoolManager = urllib3.ProxyManager(proxy, num_pools=1)
    else:
        pm = urllib3.PoolManager(num_pools=1)
    pm.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
    return pm


# --------------------------------------------------------------------------------------------


def _read_capped(resp: urllib3.BaseHTTPResponse, cap: int) -> bytes:
    body = bytearray()
    while True:
        chunk = resp.read1(READ_CHUNK)
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > cap:
            raise QueryError(f"the answer is larger than {cap // (1024 * 1024)} MiB: aggregate the query by node "
                             "(e.g. max by (instance) (...))")


def prometheus_api_query(address: str, query: str, timeout: float, *,
                         max_bytes: int = MAX_ANSWER_BYTES) -> list:
    """One instant query (``GET <address>/api/v1/query``), its result list; blocking (call it in
    a thread). ``timeout`` bounds the whole query and is also sent as Prometheus's own
    evaluation limit. Raises QueryError (the query is at fault: HTTP 400/422, an error answer,
    too big) or Unreachable (anything else)."""
    url = address.rstrip("/") + "/api/v1/query"
    deadline = _Deadline(timeout)
    _current.deadline = deadline
    started = time.monotonic()
    pm = _manager(url)
    try:
        resp = pm.request("GET", url, fields={"query": query, "timeout": f"{timeout:g}s"},
                          preload_content=False, redirect=False, retries=False,
                          timeout=urllib3.Timeout(connect=timeout, read=timeout),
                          headers={"Accept": "application/json"})
        try:
            body = _read_capped(resp, max_bytes)
        finally:
            resp.release_conn()
    except QueryError:
        raise
    except Exception as e:  # urllib3's errors, or a socket shut down by the deadline
        if deadline.expired or time.monotonic() - started >= timeout:
            raise Unreachable(f"no answer within {timeout:g}s") from None
        reason = getattr(e, "reason", None) or e
        raise Unreachable(clean(f"{type(reason).__name__}: {reason}")) from None
    finally:
        deadline.cancel()
        _current.deadline = None
        pm.clear()
    if deadline.expired:
        raise Unreachable(f"no answer within {timeout:g}s")
    if resp.status != 200:
        msg = prometheus_error(body)
        if resp.status in (400, 422):  # bad_data, execution: the query is at fault
            raise QueryError(msg or f"HTTP {resp.status}")
        raise Unreachable(f"HTTP {resp.status}" + (f": {msg}" if msg else ""))
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise Unreachable("not a Prometheus API answer (not JSON)") from None
    if not isinstance(doc, dict):
        raise Unreachable("not a Prometheus API answer (not a JSON object)")
    if doc.get("status") == "error":
        raise QueryError(prometheus_error(body) or "Prometheus answered with an error")
    if doc.get("status") != "success":
        raise Unreachable("not a Prometheus API answer (no status)")
    data = doc.get("data")
    if not isinstance(data, dict) or "result" not in data:
        raise Unreachable("not a Prometheus API answer (no data.result)")
    return data["result"]
