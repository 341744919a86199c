"""Admission webhooks, served by the operator (every replica: a standby's cache is warm too).

- ``/validate/schedulingpolicies``: the chain builder's own validation (PolicyStore.validate), so
  `kubectl apply` of a bad policy fails with the field path in the message. Policies that belong
  to another instance (spec.schedulerName) are left to it.
- ``/mutate/pods``: in namespaces that opt in (the MutatingWebhookConfiguration's
  namespaceSelector, label ``policy-scheduler.io/inject: enabled``), a new pod that names no
  scheduler (or ``default-scheduler``) gets ``spec.schedulerName`` and, without one, the policy
  label: the namespace's ``policy-scheduler.io/default-policy`` label, else ``--default-policy``.
- ``/validate/pods``: a pod of ours that names a policy whose ``spec.namespaceSelector`` does not
  admit its namespace is refused, with a message naming the policy and the namespace.

All three are ``failurePolicy: Ignore`` in manifests/: a down operator never blocks a pod or a
policy; the scheduler's own checks (``Ready=False``, ``NoPolicy`` events) still catch everything.
So an answer must never be an HTTP error (the API server would take it as "allowed"): a body
that cannot be read (not JSON, larger than MAX_BODY, nested deeper than any reader goes) is
denied in an AdmissionReview (HTTP 200, code 400), with the request's uid read even from such a
body (safejson's tolerant decoder, else the first ``"uid"`` of the raw bytes); a policy past the
limits of api/limits.py is denied (code 422) by the store's own check.

kopf's admission support is not used: its managed configurations cannot carry a namespaceSelector
or one failurePolicy per webhook, and its self-signed certificate is per process, where replicas
behind one Service need one certificate (certs.py keeps it in a Secret).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from .. import POLICY_LABEL
from ..cache.policies import policy_owner
from ..safejson import Unreadable, tolerant
from .certs import Bundle, ensure_bundle
from .kubeclient import REQUEST_ERRORS, ApiError
from .webhook_configs import PLURALS, configurations, url_client_config

if TYPE_CHECKING:  # pragma: no cover
    from ..cache.policies import PolicyStore

log = logging.getLogger("policy_scheduler.webhooks")

INJECT_LABEL = "policy-scheduler.io/inject"  # namespace label: "enabled" opts its pods in (manifests/)
MAX_MESSAGE = 4000
# the largest body read: the API server sends an object of up to 3 MiB, twice for an UPDATE
MAX_BODY = 8 * 1024 * 1024
_UID = re.compile(rb'"uid"\s*:\s*"((?:[^"\\]|\\.){0,253})"')
RECHECK_CERTS = 12 * 3600.0  # seconds between checks of the serving certificate's expiry


def _escape(key: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def review(request: dict[str, Any], allowed: bool, *, message: str = "", code: int = 403, reason: str = "",
           patch: list[dict] | None = None) -> dict[str, Any]:
    """The AdmissionReview (admission.k8s.io/v1) answering ``request``."""
    resp: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": allowed}
    if not allowed:
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE - 4] + " ..."
        resp["status"] = {"code": code, "message": message, **({"reason": reason} if reason else {})}
    if patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}


def sniff_uid(body: bytes) -> str:
    """The request's uid from a body no parser reads: the first ``"uid"`` after ``"request"``
    (the API server writes it first), else ""."""
    at = body.find(b'"request"')
    m = _UID.search(body, at if at >= 0 else 0)
    if m is None:
        return ""
    try:
        return m.group(1).decode()
    except UnicodeDecodeError:
        return ""


def respond(body: bytes, decide, *, truncated: bool = False) -> dict[str, Any]:
    """The AdmissionReview answering the raw ``body`` with ``decide(request)``; never raises.
    ``truncated``: the body was longer than MAX_BODY and only its start was read."""
    if truncated:
        return review({"uid": sniff_uid(body)}, False, code=400, reason="BadRequest",
                      message=f"the admission request is larger than {MAX_BODY // (1024 * 1024)} MiB: not read")
    cut = 0
    try:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc, cut = tolerant(body)
    except ValueError as e:
        return review({"uid": sniff_uid(body)}, False, code=400, reason="BadRequest",
                      message=f"the admission request is not JSON: {e}")
    req = doc.get("request") if isinstance(doc, dict) else None
    if not isinstance(req, dict):
        uid = sniff_uid(body)
        return review({"uid": uid}, False, code=400, reason="BadRequest",
                      message="not an AdmissionReview: no request object")
    if not isinstance(req.get("uid"), str):
        req["uid"] = ""
    try:
        out = decide(req)
    except Exception as e:  # a bug must not break admission: allow, and say so
        log.exception("admission of %s failed", req.get("name") or "")
        out = review(req, True)
        out["response"]["warnings"] = [f"policy-scheduler webhook error: {type(e).__name__}"]
    if cut and out["response"].get("allowed") and _holds_marker(req.get("object")):
        # whatever the decision, a part of the object was never read (an oldObject that cannot be
        # read does not count: an UPDATE may be the fix)
        return review(req, False, code=400, reason="BadRequest",
                      message="the object cannot be read: nested deeper than any reader goes")
    return out


def _holds_marker(value: Any) -> bool:
    """Whether the tolerant decoder cut a part of ``value`` (iteratively)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Unreadable):
            return True
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


class Admission:
    """The three decisions, on the policy store and the namespaces it reads (pure: no I/O)."""

    def __init__(self, store: "PolicyStore") -> None:
        self.store = store

    def validate_policy(self, req: dict[str, Any]) -> dict[str, Any]:
        obj = req.get("object") or {}
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        name = name if isinstance(name, str) else ""
        spec = obj.get("spec") if isinstance(obj, dict) else None
        if policy_owner(spec) != self.store.scheduler_name:
            return review(req, True)  # another instance's policy: its own webhook, or its Ready=False
        errors = self.store.validate(spec)
        if not errors:
            return review(req, True)
        return review(req, False, code=422, reason="Invalid",
                      message=f'SchedulingPolicy "{name}" is invalid: ' + "; ".join(errors))

    def mutate_pod(self, req: dict[str, Any]) -> dict[str, Any]:
        pod = req.get("object") or {}
        spec = pod.get("spec") or {}
        if spec.get("schedulerName") not in (None, "", "default-scheduler"):
            return review(req, True)  # the pod chose a scheduler: not ours to change
        ns = req.get("namespace") or (pod.get("metadata") or {}).get("namespace") or ""
        patch: list[dict] = [{"op": "add", "path": "/spec/schedulerName", "value": self.store.scheduler_name}]
        labels = (pod.get("metadata") or {}).get("labels")
        if not (labels or {}).get(POLICY_LABEL):
            policy = self.store.default_policy_of(ns)
            if labels is None:
                patch.append({"op": "add", "path": "/metadata/labels", "value": {POLICY_LABEL: policy}})
            else:
                patch.append({"op": "add", "path": f"/metadata/labels/{_escape(POLICY_LABEL)}", "value": policy})
        return review(req, True, patch=patch)

    def validate_pod(self, req: dict[str, Any]) -> dict[str, Any]:
        pod = req.get("object") or {}
        if (pod.get("spec") or {}).get("schedulerName") != self.store.scheduler_name:
            return review(req, True)
        name = ((pod.get("metadata") or {}).get("labels") or {}).get(POLICY_LABEL)
        ns = req.get("namespace") or (pod.get("metadata") or {}).get("namespace") or ""
        st = self.store.policies.get(name) if name else None
        labels = self.store.namespaces.get(ns)
        if st is None or st.namespace_selector is None or labels is None:
            return review(req, True)  # nothing known against it: the scheduler still checks
        if st.namespace_selector.matches(labels):
            return review(req, True)
        return review(req, False, code=403, reason="Forbidden",
                      message=f'SchedulingPolicy "{name}" does not admit pods of namespace "{ns}" '
                              f"(its spec.namespaceSelector); label {POLICY_LABEL} names it")


class WebhookServer:
    """HTTPS server of the admission webhooks, with the certificate of the Secret, and the
    caBundle written into the webhook configurations."""

    def __init__(self, client, store: "PolicyStore", *, address: str, port: int, secret: tuple[str, str],
                 hosts: list[str], configuration: str | None, manage_certs: bool = True,
                 url: str | None = None) -> None:
        self.client = client
        # outside the cluster: the configurations are registered here, calling <url><path>
        self.url = url
        self.admission = Admission(store)
        self.address, self.port = address, port
        self.secret = secret
        self.hosts = hosts
        self.configuration = configuration
        self.manage_certs = manage_certs
        self.serving = False
        self.error: str | None = "starting"
        self.requests = 0
        self._ssl: ssl.SSLContext | None = None
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task | None = None

    # ------------------------------------------------------------------ requests
    async def _handle(self, request: web.Request, decide) -> web.Response:
        """Read at most MAX_BODY bytes and answer with ``respond``: always an AdmissionReview."""
        body = bytearray()
        truncated = False
        while True:
            chunk = await request.content.read(1 << 16)
            if not chunk:
                break
            body += chunk
            if len(body) > MAX_BODY:
                truncated = True
                break
        self.requests += 1
        out = respond(bytes(body), decide, truncated=truncated)
        return web.Response(body=orjson.dumps(out), content_type="application/json")

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        for path, decide in (("/validate/schedulingpolicies", self.admission.validate_policy),
                             ("/mutate/pods", self.admission.mutate_pod),
                             ("/validate/pods", self.admission.validate_pod)):
            async def handler(request: web.Request, decide=decide) -> web.Response:
                return await self._handle(request, decide)
            app.router.add_post(path, handler)
        return app

    # ------------------------------------------------------------------ certificates
    def _load(self, bundle: Bundle) -> None:
        ctx = self._ssl or ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as d:  # ssl reads files (in a private dir); read at once
            cert, key = Path(d) / "tls.crt", Path(d) / "tls.key"
            cert.write_bytes(bundle.cert)
            key.write_bytes(bundle.key)
            ctx.load_cert_chain(str(cert), str(key))
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
        self._load(bundle)
        await self._inject(bundle.ca_cert)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Serve in the background: certificates first (retried with backoff), then HTTPS."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        from .informer import Backoff

        backoff = Backoff(initial=1.0, cap=60.0)
        while True:
            try:
                await self._prepare()
                break
            except asyncio.CancelledError:
                raise
            except (*REQUEST_ERRORS, ValueError, RuntimeError) as e:
                self.error = f"certificates: {e}"
                delay = backoff.next()
                log.warning("admission webhooks not serving: %s; retrying in %.0fs", self.error, delay)
                await asyncio.sleep(delay)
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.address, self.port, ssl_context=self._ssl).start()
        self.serving, self.error = True, None
        log.info("admission webhooks on https://%s:%d (certificate for %s)", self.address, self.port,
                 ", ".join(self.hosts))
        while True:  # the serving certificate is re-issued before it expires; new connections get it
            await asyncio.sleep(RECHECK_CERTS)
            try:
                await self._prepare()
            except (*REQUEST_ERRORS, ValueError, RuntimeError) as e:
                log.warning("webhook certificate check failed: %s", e)

    def describe(self) -> dict[str, Any]:
        return {"serving": self.serving, **({"error": self.error} if self.error else {}), "requests": self.requests}

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
