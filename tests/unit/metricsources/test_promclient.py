"""The Prometheus client against hostile servers, over real HTTP on loopback: a total deadline that
dripping headers or bodies cannot stretch, a byte cap, no redirect, only Prometheus's own error
fields (bounded, control characters stripped) in what reaches the policy status, and queries in
their own thread pool, not in asyncio's default executor (the API client's token renewal)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from policy_scheduler.metricsources import promclient
from policy_scheduler.metricsources.prometheus import (QUERY_THREADS, PolicySource, QueryError, SourceConfig,
                                                       Unreachable, prometheus_api_query)
from policy_scheduler.metricsources.promclient import clean, prometheus_error


class RawServer:
    """A TCP server on loopback whose connection handler the test writes (raw HTTP/1.1 bytes)."""

    def __init__(self, handler) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.handler = handler
        self.requests: list[bytes] = []
        self.stop = threading.Event()
        self.sent = 0  # body bytes the handler managed to send
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            self.requests.append(data)
            try:
                self.handler(self, conn)
            except OSError:
                pass  # the client went away

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def server():
    made = []

    def make(handler) -> RawServer:
        s = RawServer(handler)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def answer(status: int, body: bytes, ctype: str = "application/json", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{extra}"
            f"Connection: close\r\n\r\n").encode() + body


def test_a_vector_answer(server):
    doc = {"status": "success", "data": {"resultType": "vector",
                                         "result": [{"metric": {"instance": "n1"}, "value": [1, "0.5"]}]}}
    s = server(lambda srv, c: c.sendall(answer(200, json.dumps(doc).encode())))
    assert prometheus_api_query(s.url, "up", 2.0) == doc["data"]["result"]
    assert s.requests[0].startswith(b"GET /api/v1/query?query=up&timeout=2s HTTP/1.1")


def test_only_prometheus_error_fields_bounded_and_clean_reach_the_message(server):
    hostile = "line one\nline two\x1b[31m red\u202e reversed " + "x" * 5000
    body = json.dumps({"status": "error", "errorType": "bad_data\n\x07" + "t" * 100, "error": hostile,
                       "secret": "do-not-echo"}).encode()
    s = server(lambda srv, c: c.sendall(answer(400, body)))
    with pytest.raises(QueryError) as e:
        prometheus_api_query(s.url, "up", 2.0)
    msg = str(e.value)
    assert msg.startswith("bad_data tttt") and ": line one line two[31m red reversed xxx" in msg, msg
    assert "do-not-echo" not in msg
    assert all(ch.isprintable() for ch in msg), repr(msg)
    assert len(msg) <= promclient.ERROR_TYPE_CHARS + 2 + promclient.ERROR_CHARS


@pytest.mark.parametrize("status, kind", [(500, Unreachable), (400, QueryError), (200, Unreachable)])
def test_a_body_that_is_not_prometheus_json_is_never_quoted(server, status, kind):
    body = b"<html>internal admin page: password=hunter2</html>"
    s = server(lambda srv, c: c.sendall(answer(status, body, "text/html")))
    with pytest.raises(kind) as e:
        prometheus_api_query(s.url, "up", 2.0)
    assert "hunter2" not in str(e.value) and "html" not in str(e.value), str(e.value)
    assert str(e.value) in (f"HTTP {status}", "not a Prometheus API answer (not JSON)")


def test_a_redirect_is_not_followed(server):
    target = server(lambda srv, c: c.sendall(answer(200, b'{"status":"success","data":{"result":[]}}')))
    s = server(lambda srv, c: c.sendall(answer(302, b"", extra=f"Location: {target.url}/api/v1/query\r\n")))
    with pytest.raises(Unreachable, match="^HTTP 302$"):
        prometheus_api_query(s.url, "up", 2.0)
    assert target.requests == []


def test_an_answer_over_the_cap_is_refused_without_reading_it_all(server):
    size = 64 * 1024 * 1024

    def big(srv, c):
        c.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode())
        c.sendall(b'{"status":"success","data":{"result":[')
        chunk = b'{"metric":{},"value":[1,"1"]},' * 2000
        while srv.sent < size:
            c.sendall(chunk)
            srv.sent += len(chunk)

    s = server(big)
    with pytest.raises(QueryError, match="larger than 1 MiB: aggregate the query by node"):
        prometheus_api_query(s.url, "up", 5.0, max_bytes=1024 * 1024)
    assert s.sent < size // 4  # the client stopped reading; the server could not push it all
    # the default cap is 16 MiB
    assert promclient.MAX_ANSWER_BYTES == 16 * 1024 * 1024


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_dripping_server_is_cut_at_the_total_deadline(server, where):
    """One byte every 50 ms never trips a per-read timeout of 0.5 s; the total deadline does."""
    def drip(srv, c):
        if where == "headers":
            head = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 10_000 + b"\r\n\r\n"
            for i in range(len(head)):
                c.sendall(head[i:i + 1])
                time.sleep(0.05)
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            for _ in range(100000):
                c.sendall(b" ")
                time.sleep(0.05)

    s = server(drip)
    t0 = time.monotonic()
    with pytest.raises(Unreachable, match=r"^no answer within 0\.5s$"):
        prometheus_api_query(s.url, "up", 0.5)
    took = time.monotonic() - t0
    assert 0.45 <= took < 2.0, took


def test_connection_refused_is_unreachable_and_says_why():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(Unreachable) as e:
        prometheus_api_query(f"http://127.0.0.1:{port}", "up", 1.0)
    assert "Connection refused" in str(e.value) or "NewConnectionError" in str(e.value), str(e.value)


def test_clean():
    assert clean("a\nb\tc\x00d\x1b[0m\u200be") == "a b cd[0me"
    assert clean("x" * 10, 5) == "xxxx…"
    assert prometheus_error(b"not json") == "" and prometheus_error(b"[1]") == ""
    assert prometheus_error(b'{"errorType": 3, "error": "boom"}') == "error: boom"


# ------------------------------------------------------------------ the thread pool


def test_queries_run_in_their_own_pool_and_never_block_the_default_executor():
    """QUERY_THREADS hung queries (and more waiting behind them) leave asyncio's default
    executor, where the API client renews its token, free."""
    release = threading.Event()
    names: list[str] = []

    def hung(address, query, timeout):
        names.append(threading.current_thread().name)
        release.wait(10)
        return []

    keys = [(f"q{i}", "instance") for i in range(QUERY_THREADS * 2)]
    src = PolicySource("p", SourceConfig("http://prom:9090", 5.0, 1.0, 30.0, 10.0), keys, set(), time.time)

    async def main():
        refresh = asyncio.create_task(src.refresh(hung))
        await asyncio.sleep(0.3)  # every pool thread is now stuck in a query
        t0 = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(None, lambda: None)  # as token renewal does
        renewal = time.monotonic() - t0
        await refresh
        return renewal

    try:
        renewal = asyncio.run(main())
    finally:
        release.set()
    assert renewal < 0.2, renewal
    assert len(names) == QUERY_THREADS  # the others waited in the pool's queue and timed out there
    assert all(n.startswith("prometheus-query") for n in names), names
    assert set(src.errors.values()) == {"no answer within 1s"}


def test_the_status_shows_clean_bounded_errors():
    def bad(address, query, timeout):
        raise QueryError("evil\n\x1b]0;title\x07" + "y" * 2000)

    src = PolicySource("p", SourceConfig("http://prom:9090", 5.0, 1.0, 30.0, 10.0), [("q", "instance")], set(),
                       time.time)
    asyncio.run(src.refresh(bad))
    err = src.status(None)["metrics"]["queries"][0]["error"]
    assert err.startswith("evil ]0;title") and len(err) <= 400 and all(ch.isprintable() for ch in err), err
