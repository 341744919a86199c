"""The HTTPS server of the admission webhooks (admission.py decides), on a thread of its own.

The webhook port is open to every pod, and nothing authenticates its callers (the API server
calls without a client certificate). So serving it must cost the scheduling loop nothing:

- It runs on its own thread, with its own asyncio event loop: a request (TLS, reading the body,
  the decision) never waits for the scheduling loop, and never makes it, or the Lease renewal,
  or the probes, wait. The decisions read the policy store without a lock (admission.py says
  why that is safe). The certificates stay on the scheduling loop, which owns the API client
  (an aiohttp session is bound to its loop): the Secret, the caBundle and the 12-hourly check
  are made there, and a renewed certificate is loaded into the server's SSL context on the
  server's thread (between handshakes, never during one).
- Caps (``Caps``, the ``--webhook-*`` flags): at most ``max_inflight`` requests are read and
  decided at once (the rest wait ``queue_wait`` for a slot, then 503), and as many more whose
  ``Content-Length`` is at most SMALL_BODY (64 KiB: what the API server sends, read and decided
  in about a millisecond), so that large bodies never crowd it out; the bodies being read
  hold at most ``max_buffered`` bytes together (beyond it: refused); a body must arrive within
  ``read_deadline`` of the request (below the configurations' ``timeoutSeconds: 5``); a
  ``Content-Length`` over ``max_body`` is refused before the body is read, a chunked body as
  soon as it passes it. A refusal is an AdmissionReview denying the request when its uid can be
  read from what arrived (``sniff_uid``), else HTTP 413, 408 or 503: every webhook is
  ``failurePolicy: Ignore``, so an API server that gets no answer admits the object, and the
  scheduler still checks everything it would have refused. Refusals are counted by reason
  (``policy_scheduler_webhook_refused_requests_total``).
- Reading a body costs time linear in its size, whatever it holds (admission.py): 16 clients
  posting 8 MB bodies as fast as it answers leave the scheduling loop and the Lease untouched
  (tests/e2e/test_webhook_flood.py).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import datetime as dt
import logging
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from .admission import MAX_BODY, Admission, respond, review, sniff_uid
from .certs import Bundle, ensure_bundle, expiries
from .kubeclient import ApiError
from .webhook_configs import PLURALS, configurations, url_client_config

if TYPE_CHECKING:  # pragma: no cover
    from ..cache.policies import PolicyStore
    from .telemetry import WebhookMetrics

log = logging.getLogger("policy_scheduler.webhooks")

RECHECK_CERTS = 12 * 3600.0  # seconds between checks of the serving certificate's expiry
SNIFF_BYTES = 4096  # what is read of a body refused for its size, to find its uid
# a body announced this small (Content-Length) waits for its own slots: the API server's requests
# (a pod or a policy of a few KiB) are not held up by bodies of megabytes in the other slots
SMALL_BODY = 64 * 1024
# TLS 1.2 only with forward secrecy and AEAD (TLS 1.3's suites are all of that kind already)
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


@dataclass(frozen=True)
class Caps:
    """What one replica's webhook server takes on at once (the ``--webhook-*`` flags)."""

    max_inflight: int = 4  # requests read and decided at once
    queue_wait: float = 1.0  # seconds a request waits for a slot before a 503
    max_buffered: int = 32 * 1024 * 1024  # bytes of bodies held at once, all requests together
    read_deadline: float = 4.0  # seconds from a request's arrival to its whole body (API server: 5)
    max_body: int = MAX_BODY


class Refused(Exception):
    """A request refused by a cap: its reason (the metric's label) and HTTP status."""

    def __init__(self, reason: str, status: int, message: str) -> None:
        super().__init__(message)
        self.reason, self.status, self.message = reason, status, message


def tls_context() -> ssl.SSLContext:
    """The server's TLS settings, explicit: TLS 1.2 at least, and for TLS 1.2 only ECDHE key
    exchange with AEAD ciphers (the certificate's key is ECDSA P-256, certs.py)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    return ctx


class WebhookServer:
    """HTTPS server of the admission webhooks on its own thread, with the certificate of the
    Secret, and the caBundle written into the webhook configurations (from the scheduling loop)."""

    def __init__(self, client, store: "PolicyStore", *, address: str, port: int, secret: tuple[str, str],
                 hosts: list[str], configuration: str | None, manage_certs: bool = True,
                 url: str | None = None, caps: Caps | None = None, metrics: "WebhookMetrics | None" = None) -> None:
        self.client = client  # the scheduling loop's: used from that loop only
        # outside the cluster: the configurations are registered here, calling <url><path>
        self.url = url
        self.admission = Admission(store)
        self.address, self.port = address, port
        self.secret = secret
        self.hosts = hosts
        self.configuration = configuration
        self.manage_certs = manage_certs
        self.caps = caps or Caps()
        self.metrics = metrics
        self.serving = False
        self.error: str | None = "starting"
        # written on the server's thread only, read by /readyz (an int or a dict swapped whole)
        self.requests = 0
        self.refused: dict[str, int] = {}
        self.inflight = 0
        self.buffered = 0
        self.bound_port: int | None = None  # the port listened on (``port`` 0: the one the OS chose)
        self._ssl: ssl.SSLContext | None = None
        self._task: asyncio.Task | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the server thread's
        self._runner: web.AppRunner | None = None
        self._slots: asyncio.Semaphore | None = None  # created on the server's loop
        self._small: asyncio.Semaphore | None = None  # the slots of bodies of at most SMALL_BODY

    # ------------------------------------------------------------------ requests (server thread)
    async def _handle(self, request: web.Request, decide, path: str) -> web.StreamResponse:
        """One request under the caps; always an AdmissionReview, but for a refusal of a body
        whose uid cannot be read (``Refused``)."""
        loop = asyncio.get_running_loop()
        caps = self.caps
        arrived = loop.time()
        deadline = arrived + caps.read_deadline
        body = bytearray()
        held = 0  # bytes of the budget this request holds
        slot = False
        slots = self._slots
        try:
            try:
                length = request.content_length
                if length is not None and length > caps.max_body:
                    # refused before the body is read: only its start, for the uid
                    async with asyncio.timeout_at(min(deadline, arrived + 1.0)):
                        body += await request.content.read(SNIFF_BYTES)
                    raise Refused("too_large", 413, f"the admission request is {length} bytes, more than "
                                                    f"{caps.max_body // (1024 * 1024)} MiB: not read")
                # the API server's requests are small (an object of a few KiB): they have slots of
                # their own, so bodies of megabytes never make them wait
                slots = self._small if length is not None and length <= SMALL_BODY else self._slots
                try:
                    async with asyncio.timeout_at(min(deadline, arrived + caps.queue_wait)):
                        await slots.acquire()
                except TimeoutError:
                    raise Refused("busy", 503, f"{caps.max_inflight} admission requests in flight: "
                                               "try again") from None
                slot = True
                self.inflight += 1
                if length is not None:
                    held = self._reserve(length)
                async with asyncio.timeout_at(deadline):
                    while True:
                        chunk = await request.content.read(1 << 16)
                        if not chunk:
                            break
                        if length is None or len(body) + len(chunk) > length:  # chunked (or lying)
                            held += self._reserve(len(chunk))
                        body += chunk
                        if len(body) > caps.max_body:
                            raise Refused("too_large", 413, f"the admission request is larger than "
                                                            f"{caps.max_body // (1024 * 1024)} MiB: not read")
            except TimeoutError:
                raise Refused("deadline", 408, f"the admission request's body did not arrive within "
                                               f"{caps.read_deadline:g}s") from None
            out = respond(body, decide)
            self.requests += 1
            if self.metrics is not None:
                self.metrics.answered(path, out["response"]["allowed"])
            return web.Response(body=orjson.dumps(out), content_type="application/json")
        except Refused as e:
            return self._refusal(e, body, path)
        finally:
            if held:
                self.buffered -= held
            if slot:
                self.inflight -= 1
                slots.release()
            if self.metrics is not None:
                self.metrics.buffered.set(self.buffered)
                self.metrics.inflight.set(self.inflight)

    def _reserve(self, n: int) -> int:
        """Take ``n`` bytes of the buffered-bytes budget (all requests together), or Refused."""
        if self.buffered + n > self.caps.max_buffered:
            raise Refused("budget", 503, f"admission requests hold {self.caps.max_buffered // (1024 * 1024)} MiB "
                                         "already: try again")
        self.buffered += n
        if self.metrics is not None:
            self.metrics.buffered.set(self.buffered)
        return n

    def _refusal(self, e: Refused, body: bytearray, path: str) -> web.Response:
        """An AdmissionReview denying the request when its uid is in what was read, else HTTP
        ``e.status``; the connection is closed (the rest of the body is never read)."""
        self.refused = {**self.refused, e.reason: self.refused.get(e.reason, 0) + 1}
        if self.metrics is not None:
            self.metrics.refused.labels(e.reason).inc()
        uid = sniff_uid(body) if body else ""
        if uid:
            out = review({"uid": uid}, False, code=e.status, reason="RequestEntityTooLarge" if e.status == 413
                         else "Timeout" if e.status == 408 else "ServiceUnavailable", message=e.message)
            resp = web.Response(body=orjson.dumps(out), content_type="application/json")
        else:
            resp = web.Response(status=e.status, text=e.message + "\n",
                                headers={"Retry-After": "1"} if e.status == 503 else None)
        resp.force_close()
        return resp

    def _app(self) -> web.Application:
        app = web.Application()
        for path, decide in (("/validate/schedulingpolicies", self.admission.validate_policy),
                             ("/mutate/pods", self.admission.mutate_pod),
                             ("/validate/pods", self.admission.validate_pod)):
            async def handler(request: web.Request, decide=decide, path=path) -> web.StreamResponse:
                return await self._handle(request, decide, path)
            app.router.add_post(path, handler)
        return app

    # ------------------------------------------------------------------ the server's thread
    def _serve(self, started: concurrent.futures.Future) -> None:
        """The server thread: its event loop, until ``stop`` stops it."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._listen())
        except BaseException as e:  # noqa: BLE001 (told to the scheduling loop, which retries)
            started.set_exception(e)
            loop.run_until_complete(self._close())
            loop.close()
            return
        started.set_result(None)
        try:
            loop.run_forever()
        finally:
            self.serving = False
            loop.run_until_complete(self._close())
            loop.close()

    async def _listen(self) -> None:
        self._slots = asyncio.Semaphore(self.caps.max_inflight)
        self._small = asyncio.Semaphore(self.caps.max_inflight)
        # no lingering: a body refused unread is not drained; in-flight requests get 1 s at a stop
        self._runner = web.AppRunner(self._app(), access_log=None, lingering_time=0, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.address, self.port, ssl_context=self._ssl)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []  # noqa: SLF001 (the port the OS chose)
        self.bound_port = sockets[0].getsockname()[1] if sockets else self.port

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _in_thread(self, fn, *args) -> Any:
        """``fn(*args)`` run on the server's thread (its loop), awaited from the scheduling loop."""
        async def call():
            return fn(*args)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), self._loop))

    # ------------------------------------------------------------------ certificates (scheduling loop)
    def _load(self, bundle: Bundle) -> None:
        """The bundle's serving pair into the SSL context (new connections get it). Before the
        server starts, on the scheduling loop; after, on the server's thread."""
        ctx = self._ssl or tls_context()
        with tempfile.TemporaryDirectory() as d:  # ssl reads files (in a private dir); read at once
            cert, key = Path(d) / "tls.crt", Path(d) / "tls.key"
            cert.write_bytes(bundle.cert)
            key.write_bytes(bundle.key)
            try:
                ctx.load_cert_chain(str(cert), str(key))
            except ssl.SSLError as e:
                raise ValueError(f"Secret {'/'.join(self.secret)}: tls.crt and tls.key cannot be served: "
                                 f"{e.reason or e}") from None
        self._ssl = ctx

    async def _register(self, ca: bytes) -> None:
        """Outside the cluster (``url``): create or update both configurations (webhook_configs.py),
        each webhook calling ``<url><path>`` with our CA. Fields the API server defaults are kept."""
        want = base64.b64encode(ca).decode()
        cfgs = configurations(self.configuration or "policy-scheduler", url_client_config(self.url or ""), want)
        for kind, body in cfgs.items():
            coll = f"/apis/admissionregistration.k8s.io/v1/{PLURALS[kind]}"
            path = f"{coll}/{body['metadata']['name']}"
            for _ in range(5):
                try:
                    cur = await self.client.request("GET", path)
                except ApiError as e:
                    if e.status != 404:
                        raise
                    try:
                        await self.client.request("POST", coll, body)
                    except ApiError as e2:
                        if e2.status == 409:
                            continue
                        raise
                    log.info("%s %s registered, calling %s", kind, body["metadata"]["name"], self.url)
                    break
                hooks = {h.get("name"): h for h in cur.get("webhooks") or []}
                if len(hooks) == len(body["webhooks"]) and all(
                        all(hooks.get(w["name"], {}).get(k) == v for k, v in w.items()) for w in body["webhooks"]):
                    break
                cur["webhooks"] = [{**hooks.get(w["name"], {}), **w} for w in body["webhooks"]]
                try:
                    await self.client.request("PUT", path, cur)
                except ApiError as e:
                    if e.status == 409:
                        continue
                    raise
                log.info("%s %s updated, calling %s", kind, body["metadata"]["name"], self.url)
                break

    async def _inject(self, ca: bytes) -> None:
        """Write the CA bundle into our Validating and Mutating webhook configurations (outside
        the cluster: register them, ``_register``)."""
        if self.url:
            await self._register(ca)
            return
        if not self.configuration:
            return
        want = base64.b64encode(ca).decode()
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            path = f"/apis/admissionregistration.k8s.io/v1/{kind}/{self.configuration}"
            for _ in range(5):
                try:
                    cfg = await self.client.request("GET", path)
                except ApiError as e:
                    if e.status == 404:
                        log.info("no %s %s: its caBundle is not written", kind[:-1], self.configuration)
                        break
                    raise
                hooks = cfg.get("webhooks") or []
                if all((h.get("clientConfig") or {}).get("caBundle") == want for h in hooks):
                    break
                for h in hooks:
                    h.setdefault("clientConfig", {})["caBundle"] = want
                try:
                    await self.client.request("PUT", path, cfg)
                except ApiError as e:
                    if e.status == 409:
                        continue
                    raise
                log.info("caBundle written into %s %s", kind[:-1], self.configuration)
                break

    async def _prepare(self) -> None:
        ns, name = self.secret
        bundle = await ensure_bundle(self.client, ns, name, self.hosts, manage=self.manage_certs)
        if self._loop is None:
            self._load(bundle)
        else:
            await self._in_thread(self._load, bundle)
        if self.metrics is not None:
            for which, at in expiries(bundle).items():
                self.metrics.certificate_expiry.labels(which).set(
                    (at - dt.datetime.now(dt.timezone.utc)).total_seconds())
        await self._inject(bundle.ca_cert)

    # ------------------------------------------------------------------ lifecycle (scheduling loop)
    async def start(self) -> None:
        """Serve in the background: certificates first (retried with backoff), then HTTPS on the
        server's thread."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        from .informer import Backoff

        backoff = Backoff(initial=1.0, cap=60.0)
        while True:
            step = "certificates"
            try:
                await self._prepare()
                step = f"listening on {self.address}:{self.port}"
                await self._start_thread()
                break
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 (any failure: said on /readyz, retried)
                self.error = f"{step}: {e}"
                delay = backoff.next()
                log.warning("admission webhooks not serving: %s; retrying in %.0fs", self.error, delay)
                await asyncio.sleep(delay)
        self.serving, self.error = True, None
        log.info("admission webhooks on https://%s:%d (certificate for %s; at most %d requests at once, "
                 "%d MiB buffered, %gs to read a body)", self.address, self.bound_port or self.port,
                 ", ".join(self.hosts), self.caps.max_inflight, self.caps.max_buffered // (1024 * 1024),
                 self.caps.read_deadline)
        while True:  # the serving certificate is re-issued before it expires; new connections get it
            await asyncio.sleep(RECHECK_CERTS)
            try:
                await self._prepare()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 (the loop must outlive any failure: the old certificate serves)
                log.warning("webhook certificate check failed: %s: %s", type(e).__name__, e)
                if self.metrics is not None:
                    self.metrics.certificate_errors.inc()

    async def _start_thread(self) -> None:
        started: concurrent.futures.Future = concurrent.futures.Future()
        self._loop = None
        thread = threading.Thread(target=self._serve, args=(started,), name="webhooks", daemon=True)
        thread.start()
        try:
            await asyncio.wrap_future(started)
        except BaseException:
            self._loop = None
            raise
        self._thread = thread

    def describe(self) -> dict[str, Any]:
        return {"serving": self.serving, **({"error": self.error} if self.error else {}), "requests": self.requests,
                **({"refused": dict(self.refused)} if self.refused else {})}

    async def stop(self) -> None:
        """Stop the certificate task and the server's thread (its loop closes the listener and
        gives in-flight requests 1 s)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        thread, loop = self._thread, self._loop
        if thread is not None and loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            until = time.monotonic() + 5.0
            while thread.is_alive() and time.monotonic() < until:
                await asyncio.sleep(0.02)
            if thread.is_alive():
                log.warning("the admission webhooks' thread did not stop within 5s")
        self._thread = self._loop = None
        self.serving = False
