"""cluster/webhook_server.py: the webhooks' HTTPS server on its own thread, and its caps (a
Content-Length over the limit, the buffered-bytes budget, the read deadline, the concurrency cap),
called over real TLS sockets on 127.0.0.1; and admission.py's readers, in linear time whatever a
body holds (the certificates' API calls run in tests/e2e/test_webhooks.py)."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import socket
import ssl
import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from policy_scheduler import POLICY_LABEL
from policy_scheduler.cluster import admission as admission_mod
from policy_scheduler.cluster.admission import Admission, respond
from policy_scheduler.cluster.certs import new_bundle
from policy_scheduler.cluster.telemetry import WebhookMetrics
from policy_scheduler.cluster.webhook_server import Caps, WebhookServer, tls_context
from support.admission import policy_store

MB = 1024 * 1024


@pytest.fixture
def serve():
    """serve(caps) -> a started WebhookServer on a free port (its own thread), stopped afterwards."""
    started: list[WebhookServer] = []

    def make(caps: Caps | None = None, store=None, before=None) -> WebhookServer:
        metrics = WebhookMetrics(CollectorRegistry())
        srv = WebhookServer(None, store or policy_store(), address="127.0.0.1", port=0, secret=("ns", "s"),
                            hosts=["127.0.0.1"], configuration=None, caps=caps, metrics=metrics)
        srv._load(new_bundle(["127.0.0.1"]))
        if before is not None:
            before(srv)
        asyncio.run(srv._start_thread())
        started.append(srv)
        return srv

    yield make
    for srv in started:
        asyncio.run(srv.stop())
        assert srv._thread is None


def connect(port: int) -> ssl.SSLSocket:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10))


def head(path: str, length: int | None) -> bytes:
    size = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{size}\r\n\r\n".encode()


def answer(s: ssl.SSLSocket) -> tuple[int, bytes]:
    r = http.client.HTTPResponse(s)
    r.begin()
    return r.status, r.read()


def pod_body(uid: str = "u-1", ns: str = "web", policy: str = "batch") -> bytes:
    return json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {
        "uid": uid, "namespace": ns, "operation": "CREATE", "object": {
            "metadata": {"name": "p", "labels": {POLICY_LABEL: policy}},
            "spec": {"schedulerName": "policy-scheduler", "containers": [{"name": "c"}]}}}}).encode()


def post(port: int, path: str, body: bytes) -> tuple[int, bytes]:
    s = connect(port)
    try:
        s.sendall(head(path, len(body)) + body)
        return answer(s)
    finally:
        s.close()


def refused(srv: WebhookServer, reason: str) -> float:
    return srv.metrics.refused.labels(reason)._value.get()


# ---------------------------------------------------------------------------------------------
# serving

def test_requests_are_answered_on_the_servers_own_thread_with_explicit_tls(serve):
    seen = []

    def spy(req):  # which thread decides
        seen.append(threading.current_thread().name)
        return decide(req)

    spy.__name__ = "validate_pod"  # read as a pod's request
    srv = serve(before=lambda srv: setattr(srv.admission, "validate_pod", spy))
    decide = Admission(srv.admission.store).validate_pod
    status, body = post(srv.bound_port, "/validate/pods", pod_body())
    r = json.loads(body)["response"]
    assert status == 200 and r["uid"] == "u-1" and r["allowed"] is False and r["status"]["code"] == 403
    assert seen == ["webhooks"] and srv.describe()["requests"] == 1
    # TLS 1.2 at least, and TLS 1.2 with ECDHE and AEAD only
    ctx = tls_context()
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"} <= {
        c["name"] for c in ctx.get_ciphers() if c["kea"] == "kx-ecdhe" and c["aead"]}
    s = socket.create_connection(("127.0.0.1", srv.bound_port), timeout=5)
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname, old.verify_mode = False, ssl.CERT_NONE
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    old.set_ciphers("AES128-SHA256")  # CBC, no forward secrecy: refused
    with pytest.raises(ssl.SSLError):
        old.wrap_socket(s)
    s.close()


def test_a_content_length_over_the_limit_is_refused_before_the_body_is_read(serve):
    srv = serve(Caps(max_body=1 * MB))
    s = connect(srv.bound_port)
    start = pod_body(uid="u-big")[:200]
    t0 = time.monotonic()
    s.sendall(head("/validate/pods", 100 * MB) + start)  # 100 MB announced, 200 bytes sent
    status, body = answer(s)
    took = time.monotonic() - t0
    s.close()
    r = json.loads(body)["response"]  # the uid was in what arrived: an AdmissionReview
    assert status == 200 and r["uid"] == "u-big" and r["allowed"] is False and r["status"]["code"] == 413
    assert "more than 1 MiB: not read" in r["status"]["message"]
    assert took < 2.0 and srv.buffered == 0
    # no uid in what arrived: HTTP 413
    s = connect(srv.bound_port)
    s.sendall(head("/mutate/pods", 100 * MB) + b"[" * 5000)
    status, _ = answer(s)
    s.close()
    assert status == 413 and refused(srv, "too_large") == 2
    # a chunked body is refused once it passes the limit
    s = connect(srv.bound_port)
    s.sendall(head("/mutate/pods", None))
    chunk = b"[" * (256 * 1024)
    try:
        for _ in range(8):
            s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    except OSError:
        pass  # the server may close before all is sent
    status, _ = answer(s)
    s.close()
    assert status == 413 and refused(srv, "too_large") == 3


def test_the_buffered_bytes_budget_refuses_past_it(serve):
    srv = serve(Caps(max_buffered=3 * MB, max_inflight=4))
    holders = []
    for _ in range(2):  # two slow requests announce 1.5 MB each and send part: the budget is held
        s = connect(srv.bound_port)
        s.sendall(head("/validate/pods", int(1.5 * MB)) + pod_body()[:50])
        holders.append(s)
    time.sleep(0.3)
    assert srv.buffered == 3 * MB
    status, body = post(srv.bound_port, "/validate/pods", pod_body(uid="u-2"))
    assert status == 503 and refused(srv, "budget") == 1, body  # refused before reading: no uid
    for s in holders:
        s.close()
    time.sleep(0.3)
    assert srv.buffered == 0
    status, body = post(srv.bound_port, "/validate/pods", pod_body(uid="u-3"))
    assert status == 200 and json.loads(body)["response"]["uid"] == "u-3"


def test_a_body_that_does_not_arrive_in_time_is_refused(serve):
    srv = serve(Caps(read_deadline=0.5))
    s = connect(srv.bound_port)
    t0 = time.monotonic()
    s.sendall(head("/validate/pods", 10_000) + pod_body(uid="u-slow")[:120])  # then nothing
    status, body = answer(s)
    took = time.monotonic() - t0
    s.close()
    r = json.loads(body)["response"]
    assert status == 200 and r["uid"] == "u-slow" and not r["allowed"] and r["status"]["code"] == 408
    assert 0.4 < took < 2.0 and refused(srv, "deadline") == 1
    s = connect(srv.bound_port)
    s.sendall(head("/validate/pods", 10_000) + b"{")  # no uid yet: HTTP 408
    assert answer(s)[0] == 408
    s.close()


def test_requests_past_the_concurrency_cap_wait_briefly_then_get_503(serve):
    srv = serve(Caps(max_inflight=1, queue_wait=0.3, read_deadline=3.0))
    body = pod_body(uid="u-held")
    holder = connect(srv.bound_port)
    holder.sendall(head("/validate/pods", len(body)) + body[:40])  # holds the one slot
    time.sleep(0.2)
    assert srv.inflight == 1
    t0 = time.monotonic()
    status, _ = post(srv.bound_port, "/validate/pods", pod_body(uid="u-other"))
    assert status == 503 and 0.25 < time.monotonic() - t0 < 1.5 and refused(srv, "busy") == 1
    # a request that finds the slot within queue_wait is served
    got = {}
    th = threading.Thread(target=lambda: got.update(r=post(srv.bound_port, "/validate/pods", pod_body(uid="u-w"))))
    th.start()
    time.sleep(0.1)
    holder.sendall(body[40:])
    assert json.loads(answer(holder)[1])["response"]["uid"] == "u-held"
    holder.close()
    th.join(5)
    assert got["r"][0] == 200 and json.loads(got["r"][1])["response"]["uid"] == "u-w"
    assert srv.describe()["refused"] == {"busy": 1}


def test_small_bodies_have_slots_of_their_own(serve):
    """Bodies of megabytes fill the slots: a request as small as the API server's is still served."""
    srv = serve(Caps(max_inflight=2, queue_wait=0.3, read_deadline=3.0))
    big = []
    for _ in range(3):
        s = connect(srv.bound_port)
        s.sendall(head("/validate/pods", 4 * MB) + b'{"request":{')
        big.append(s)
    time.sleep(0.5)
    assert srv.inflight == 2 and refused(srv, "busy") == 1  # the third big one found no slot
    t0 = time.monotonic()
    status, body = post(srv.bound_port, "/validate/pods", pod_body(uid="u-small"))
    assert status == 200 and json.loads(body)["response"]["uid"] == "u-small" and time.monotonic() - t0 < 0.25
    for s in big:
        s.close()


def test_stop_ends_the_thread_and_closes_the_port(serve):
    srv = serve()
    port, thread = srv.bound_port, srv._thread
    asyncio.run(srv.stop())
    assert not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


# ---------------------------------------------------------------------------------------------
# reading bodies: linear time, never the tolerant decoder

HEAD = b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u-9",'


def deep(size: int) -> bytes:
    return HEAD + b'"object":{"metadata":{"name":"x"},"spec":' + b"[" * size + b"]" * size + b"}}}"


def unclosed(size: int) -> bytes:
    return HEAD + b'"object":' + b"[" * size


def tiny_objects(size: int) -> bytes:
    return HEAD + b'"object":{"metadata":{"name":"x"},"spec":[' + b"{}," * (size // 3) + b"{}]}}}"


@pytest.fixture
def no_tolerant(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("the tolerant decoder was called")

    import policy_scheduler.safejson as safejson

    monkeypatch.setattr(safejson, "tolerant", fail)
    monkeypatch.setattr(safejson, "loads", fail)
    assert not hasattr(admission_mod, "tolerant")


@pytest.mark.parametrize("shape", [deep, unclosed, tiny_objects])
def test_hostile_bodies_are_denied_in_linear_time_on_every_path(shape, no_tolerant):
    a = Admission(policy_store())
    for decide in (a.validate_policy, a.mutate_pod, a.validate_pod):
        took = {}
        for size in (1 * MB, 8 * MB):
            body = shape(size // 2 if shape is deep else size)
            t0 = time.perf_counter()
            r = respond(body, decide)["response"]
            took[size] = time.perf_counter() - t0
            assert r["uid"] == "u-9" and r["allowed"] is False and r["status"]["code"] in (400, 422), r
        assert took[8 * MB] < 0.5, (decide.__name__, took)  # orjson + tolerant: 0.5 s per MB and more
        assert took[8 * MB] < 16 * took[1 * MB] + 0.05, (decide.__name__, took)


def test_a_legitimate_pod_request_is_read_for_what_the_decisions_need():
    a = Admission(policy_store())
    body = pod_body(uid="u-4", ns="jobs", policy="batch")
    assert respond(body, a.validate_pod)["response"] == {"uid": "u-4", "allowed": True}
    out = respond(json.dumps({"request": {"uid": "u-5", "namespace": "jobs", "object": {
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}}}).encode(), a.mutate_pod)
    patch = json.loads(base64.b64decode(out["response"]["patch"]))
    assert patch == [{"op": "add", "path": "/spec/schedulerName", "value": "policy-scheduler"},
                     {"op": "add", "path": "/metadata/labels", "value": {POLICY_LABEL: "batch"}}]
    # a type the API server never sends is refused unread, naming where
    r = respond(b'{"request":{"uid":"u-6","object":{"metadata":{"labels":{"a":1}}}}}', a.mutate_pod)["response"]
    assert r["uid"] == "u-6" and not r["allowed"] and r["status"]["message"] == (
        "metadata.labels: Expected `str`, got `int` - at `$[...]`")


def test_the_policy_store_is_read_safely_while_the_scheduling_loop_changes_it():
    """Decisions on one thread, namespaces and policies replaced on another, as the server thread
    and the scheduling loop do: no error, and every answer is one of the two states."""
    store = policy_store()
    a = Admission(store)
    stop = threading.Event()
    errors = []

    def churn():
        i = 0
        while not stop.is_set():
            i += 1
            store.namespaces["web"] = {"team": "batch"} if i % 2 else {"team": "web"}
            store.namespaces[f"ns-{i % 50}"] = {"i": str(i)}
            store.namespaces.pop(f"ns-{(i + 25) % 50}", None)
            store.on_policy("ADDED", {"metadata": {"name": "batch", "generation": i}, "spec": {
                "plugins": [{"name": "NodeResourcesFit"}],
                "namespaceSelector": {"matchLabels": {"team": "batch" if i % 3 else "web"}}}})

    th = threading.Thread(target=churn)
    th.start()
    try:
        body = pod_body(uid="u-c", ns="web", policy="batch")
        for _ in range(2000):
            r = respond(body, a.validate_pod)["response"]
            if "warnings" in r or r["uid"] != "u-c":
                errors.append(r)
    finally:
        stop.set()
        th.join(5)
    assert not errors, errors[:3]


def test_the_certificate_loop_serves_then_survives_any_error_and_counts_it(monkeypatch):
    """_run: certificates, then the server's thread, then the periodic check, which logs and counts
    a failure of any kind (a TypeError here) and goes on; /readyz's detail follows."""
    from policy_scheduler.cluster import webhook_server

    monkeypatch.setattr(webhook_server, "RECHECK_CERTS", 0.05)
    metrics = WebhookMetrics(CollectorRegistry())
    srv = WebhookServer(None, policy_store(), address="127.0.0.1", port=0, secret=("ns", "s"),
                        hosts=["127.0.0.1"], configuration=None, metrics=metrics)
    bundle = new_bundle(["127.0.0.1"])
    calls = []

    async def prepare():
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            srv._load(bundle)
            return
        raise TypeError("an unexpected kind of failure")

    srv._prepare = prepare

    async def scenario():
        assert srv.describe() == {"serving": False, "error": "starting", "requests": 0}
        await srv.start()
        for _ in range(100):
            await asyncio.sleep(0.05)
            if metrics.certificate_errors._value.get() >= 2:
                break
        assert srv.describe()["serving"] is True and "error" not in srv.describe()
        assert not srv._task.done() and srv._thread.is_alive()
        status, _ = await asyncio.to_thread(post, srv.bound_port, "/validate/pods", pod_body())
        assert status == 200
        await srv.stop()
        assert srv.describe()["serving"] is False

    asyncio.run(scenario())
    assert metrics.certificate_errors._value.get() >= 2
    assert set(calls) == {"MainThread"}  # the API calls stay on the scheduling loop's thread
