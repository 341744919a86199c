"""A small asyncio client for the Kubernetes API over aiohttp, with plain dicts.

Used on the hot path (bindings, events, status patches), where the generated clients cost
several times more CPU per call and raise on the Status that a successful Binding returns.
Credentials come from a kubeconfig (client certificate or bearer token) or the in-cluster
service account. A token bucket limits requests to ``qps`` with ``burst``.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str = "", path: str = "") -> None:
        self.status = status
        self.body = body
        msg = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: HTTP {status}: {msg}")

    @property
    def reason(self) -> str:
        return self.body.get("reason", "") if isinstance(self.body, dict) else ""


TOKEN_FILE_PERIOD = 60.0  # seconds a token read from a file is used before it is read again


@dataclass
class Credentials:
    server: str
    ssl_context: ssl.SSLContext | bool
    token: str | None = None
    token_file: Path | None = None
    _token_read_at: float | None = None

    def auth_header(self) -> dict[str, str]:
        if self.token_file is not None and (
                self._token_read_at is None or time.monotonic() - self._token_read_at >= TOKEN_FILE_PERIOD):
            # bound tokens rotate: re-read the file, as client-go does, at most once a minute
            try:
                self.token = self.token_file.read_text().strip()
            except OSError:
                pass
            self._token_read_at = time.monotonic()
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def _data_or_file(entry: dict, key: str) -> bytes | None:
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        return Path(entry[key]).expanduser().read_bytes()
    return None


@dataclass
class ConnectionParts:
    """What a kubeconfig context (or the in-cluster service account) says about a connection."""

    server: str
    ca_data: bytes | None = None
    insecure: bool = False
    cert_data: bytes | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: Path | None = None
    namespace: str | None = None


def connection_parts(kubeconfig: str | os.PathLike | None = None, context: str | None = None) -> ConnectionParts:
    """Read ``kubeconfig`` (else $KUBECONFIG, ~/.kube/config) or the in-cluster service account."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if not path and (SA_DIR / "token").exists() and os.environ.get("KUBERNETES_SERVICE_HOST"):
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if ":" in host:
            host = f"[{host}]"
        return ConnectionParts(f"https://{host}:{port}", ca_data=(SA_DIR / "ca.crt").read_bytes(),
                               token_file=SA_DIR / "token")
    path = Path(path or "~/.kube/config").expanduser()
    try:
        cfg = yaml.safe_load(path.read_text())
    except OSError as e:
        raise RuntimeError(f"cannot read kubeconfig {path}: {e}") from None
    ctx_name = context or cfg.get("current-context")
    ctxs = {c["name"]: c["context"] for c in cfg.get("contexts") or []}
    if ctx_name not in ctxs:
        raise RuntimeError(f"kubeconfig {path}: context {ctx_name!r} not found")
    c = ctxs[ctx_name]
    cluster = {x["name"]: x["cluster"] for x in cfg.get("clusters") or []}[c["cluster"]]
    user = {x["name"]: x["user"] for x in cfg.get("users") or []}.get(c.get("user"), {}) or {}
    return ConnectionParts(
        server=cluster["server"].rstrip("/"),
        ca_data=_data_or_file(cluster, "certificate-authority"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        cert_data=_data_or_file(user, "client-certificate"),
        key_data=_data_or_file(user, "client-key"),
        token=user.get("token"),
        token_file=Path(user["tokenFile"]) if user.get("tokenFile") else None,
        namespace=c.get("namespace"),
    )


def load_credentials(kubeconfig: str | os.PathLike | None = None, context: str | None = None) -> Credentials:
    """Credentials (TLS context, token) for our aiohttp client."""
    parts = connection_parts(kubeconfig, context)
    sslctx: ssl.SSLContext | bool = True
    if parts.server.startswith("https"):
        if parts.insecure:
            sslctx = ssl.create_default_context()
            sslctx.check_hostname = False
            sslctx.verify_mode = ssl.CERT_NONE
        else:
            sslctx = ssl.create_default_context(cadata=parts.ca_data.decode() if parts.ca_data else None)
        if parts.cert_data and parts.key_data:
            with tempfile.TemporaryDirectory() as d:  # ssl wants files; they are read at once
                (Path(d) / "c.pem").write_bytes(parts.cert_data)
                (Path(d) / "k.pem").write_bytes(parts.key_data)
                sslctx.load_cert_chain(str(Path(d) / "c.pem"), str(Path(d) / "k.pem"))
    return Credentials(parts.server, sslctx, token=parts.token, token_file=parts.token_file)


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


class KubeClient:
    def __init__(self, creds: Credentials, qps: float = 200.0, burst: int = 400, timeout: float = 30.0,
                 user_agent: str = "policy-scheduler") -> None:
        self.creds = creds
        self.bucket = TokenBucket(qps, burst)
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256, ssl=self.creds.ssl_context),
                timeout=self.timeout, headers={"User-Agent": self.user_agent},
                cookie_jar=aiohttp.DummyCookieJar(),  # the API server sets none: skip the per-request jar lookup
                json_serialize=lambda o: orjson.dumps(o).decode())
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(self, method: str, path: str, body: Any = None, params: dict | None = None,
                      content_type: str = "application/json") -> Any:
        """Send one request; return the decoded JSON body, raise ApiError for HTTP >= 400."""
        await self.bucket.take()
        headers = {**self.creds.auth_header(), "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = orjson.dumps(body)
        async with self.session.request(method, self.creds.server + path, data=data, params=params,
                                        headers=headers) as resp:
            raw = await resp.read()
            try:
                payload = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                payload = raw.decode(errors="replace")
            if resp.status >= 400:
                raise ApiError(resp.status, payload, method, path)
            return payload

    async def get(self, path: str, **params) -> Any:
        return await self.request("GET", path, params=params or None)

    async def post(self, path: str, body: Any) -> Any:
        return await self.request("POST", path, body)

    async def merge_patch(self, path: str, body: Any) -> Any:
        return await self.request("PATCH", path, body, content_type="application/merge-patch+json")

    async def strategic_patch(self, path: str, body: Any) -> Any:
        return await self.request("PATCH", path, body, content_type="application/strategic-merge-patch+json")

    async def bind(self, namespace: str, name: str, node: str, uid: str | None = None,
                   annotations: dict[str, str] | None = None) -> None:
        """POST pods/binding. The API answers 201 with a v1.Status; 409 if already bound."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if annotations:
            meta["annotations"] = annotations
        await self.post(f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
                        {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                         "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
