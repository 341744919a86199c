"""The MultiKueue cluster chooser's workers (cluster/multikueue.py): each MultiKueueCluster's
kubeconfig, read from its Secret and accepted or refused by cluster/kubeconfig_guard.py off the
event loop, the client built from it, and the chooser's condition on it.

The condition (type ``KubeconfigAccepted``) is the chooser's record of a MultiKueueCluster. Kueue
owns the MultiKueueCluster (its spec and status), and a right to patch it would let this
identity re-aim a worker's ``clusterSource``; so the chooser writes nothing on it. It keeps the
condition in memory and shows it where each audience looks:

- an Event regarding the MultiKueueCluster (``kubectl describe multikueuecluster NAME``), on each
  transition: ``KubeconfigRefused`` (Warning; the reason and the field, never the file's
  content), then ``KubeconfigAccepted`` (Normal) once a refused one is accepted again;
- per worker in the ``policy-scheduler.io/cluster-scores`` record of every Workload it
  evaluates (tenants read it): ``{"error": "KubeconfigRefused", "reason": "ExecPlugin"}``, words
  of a fixed vocabulary only (kubeconfig_guard.REASONS; ``NotActive``, ``NotRead``);
- the log, with the detail, once per transition.

A worker's answers are bounded too (:class:`WorkerClient`): at most ``max_bytes`` per response,
JSON read by orjson only (no tolerant re-parse of a deep body), no redirects followed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import aiohttp
import orjson

from . import kubeconfig_guard as guard
from .kubeclient import ApiError, KubeClient

log = logging.getLogger("policy_scheduler.multikueue")

CONDITION = "KubeconfigAccepted"
LOAD_TIMEOUT = 10.0  # seconds to validate a kubeconfig and set up its TLS context (in a thread)
MAX_RESPONSE_BYTES = 128 * 1024 * 1024  # one answer of a worker's API server (a LIST of its pods)
WORKER_TIMEOUT = 20.0  # seconds for one request to a worker
# words a tenant may read about a worker (the Workloads' record): these and guard.REASONS
NOT_ACTIVE, NOT_READ, REFUSED = "NotActive", "NotRead", "KubeconfigRefused"
_NOT_READ_REASONS = {"SecretNotFound", "SecretUnreadable", "LoadTimeout"}


class ResponseRefused(ValueError):
    """A worker's answer that is too big or not JSON."""


class WorkerClient(KubeClient):
    """KubeClient for a worker: a response is read up to ``max_bytes`` (ResponseRefused past it),
    decoded by orjson alone, and a redirect is an error, not followed."""

    def __init__(self, creds, *, max_bytes: int = MAX_RESPONSE_BYTES, **kw) -> None:
        super().__init__(creds, timeout=WORKER_TIMEOUT, qps=50.0, burst=100,
                         user_agent="policy-scheduler-multikueue", **kw)
        self.max_bytes = max_bytes

    async def request(self, method: str, path: str, body: Any = None, params: dict | None = None,
                      content_type: str = "application/json", timeout: float | None = None,
                      decode: Callable[[bytes], Any] | None = None) -> Any:
        await self.bucket.take()
        headers = {**(await self.creds.auth_header_async()), "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = orjson.dumps(body)
        extra = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(total=timeout)}
        async with self.session.request(method, self.creds.server + path, data=data, params=params,
                                        headers=headers, allow_redirects=False, **extra) as resp:
            if resp.content_length is not None and resp.content_length > self.max_bytes:
                raise ResponseRefused(f"{method} {path}: answer of {resp.content_length} bytes, "
                                      f"more than {self.max_bytes}")
            chunks, n = [], 0
            async for chunk in resp.content.iter_chunked(1 << 16):
                n += len(chunk)
                if n > self.max_bytes:
                    raise ResponseRefused(f"{method} {path}: answer over {self.max_bytes} bytes")
                chunks.append(chunk)
            raw = b"".join(chunks)
            try:
                payload = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                payload = None
                if resp.status < 300:
                    raise ResponseRefused(f"{method} {path}: the answer is not JSON orjson reads") from None
            if resp.status >= 300:
                raise ApiError(resp.status, payload if isinstance(payload, dict) else "", method, path)
            return payload


@dataclass
class Worker:
    name: str
    uid: str = ""
    snapshot: Any = None  # whatif.snapshot.Snapshot
    taken: float = 0.0
    error: str = ""  # why it is not a candidate, in the tenant-visible vocabulary
    reason: str = ""  # the kubeconfig condition's reason, when error is KubeconfigRefused / NotRead
    held: list[tuple[float, str, dict]] = field(default_factory=list)  # (when, workload, a pod it placed)
    client: Any = None  # WorkerClient, built from the accepted kubeconfig
    digest: str = ""  # sha-256 of the kubeconfig text last checked
    checked: float = -1e18  # when the Secret was last read (monotonic)
    condition: dict[str, Any] = field(default_factory=dict)  # type KubeconfigAccepted

    def record(self) -> dict[str, str]:
        """This worker's entry in a Workload's cluster-scores record when it is not a candidate."""
        return {"error": self.error or NOT_READ, **({"reason": self.reason} if self.reason else {})}

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def kubeconfig_text(client, namespace: str, mc: Mapping[str, Any]) -> bytes:
    """The kubeconfig a MultiKueueCluster names, as bytes; KubeconfigRefused when it cannot be
    used (a Path location, a bad Secret name, no Secret, no ``kubeconfig`` key)."""
    src = ((mc.get("spec") or {}).get("clusterSource") or {})
    src = src.get("kubeConfig") if isinstance(src, Mapping) else None
    if not isinstance(src, Mapping):
        raise guard.KubeconfigRefused("Malformed", "spec.clusterSource.kubeConfig", "not set")
    kind = src.get("locationType") or "Secret"
    if kind != "Secret":
        # a Path names a file in Kueue's pod; read here it would be any file of the scheduler's
        raise guard.KubeconfigRefused("PathLocation", "spec.clusterSource.kubeConfig.locationType",
                                      "only Secret locations are read by the cluster chooser")
    path = guard.secret_path(namespace, src.get("location"))
    try:
        sec = await client.get(path)
    except ApiError as e:
        if e.status == 404:
            raise guard.KubeconfigRefused("SecretNotFound", "spec.clusterSource.kubeConfig.location",
                                          f"no Secret {src.get('location')} in {namespace}") from None
        raise guard.KubeconfigRefused("SecretUnreadable", "spec.clusterSource.kubeConfig.location",
                                      f"GET the Secret: HTTP {e.status}") from None
    data = ((sec or {}).get("data") or {}) if isinstance(sec, Mapping) else {}
    value = data.get("kubeconfig") if isinstance(data, Mapping) else None
    if not isinstance(value, str) or not value:
        raise guard.KubeconfigRefused("NoKubeconfigKey", "data.kubeconfig", "the Secret has no key kubeconfig")
    if len(value) > guard.MAX_KUBECONFIG_BYTES * 4 // 3 + 8:
        raise guard.KubeconfigRefused("TooLarge", "data.kubeconfig", f"more than {guard.MAX_KUBECONFIG_BYTES} bytes")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise guard.KubeconfigRefused("Malformed", "data.kubeconfig", "not base64") from None


async def check(worker: Worker, client, namespace: str, mc: Mapping[str, Any], *, allow_insecure_tls: bool,
                event: Callable[..., Any], load_timeout: float = LOAD_TIMEOUT,
                max_bytes: int = MAX_RESPONSE_BYTES) -> None:
    """Read the worker's kubeconfig; build its client if it changed and is accepted, or close the
    old one and record why not. ``event(worker, type, reason, note)`` is awaited on a transition."""
    digest = ""
    try:
        text = await kubeconfig_text(client, namespace, mc)
        digest = hashlib.sha256(text).hexdigest()
        if digest == worker.digest and (worker.client is not None or (worker.condition.get("status") == "False"
                                                                     and worker.reason != "LoadTimeout")):
            return  # the same text as last time: the same verdict, nothing loaded again
        creds = await asyncio.wait_for(asyncio.to_thread(
            guard.load, text, f"MultiKueueCluster {worker.name}", allow_insecure_tls=allow_insecure_tls),
            load_timeout)
    except asyncio.TimeoutError:
        await refuse(worker, guard.KubeconfigRefused("LoadTimeout", "", f"not loaded within {load_timeout:g}s"),
                     digest, event)
        return
    except guard.KubeconfigRefused as e:
        await refuse(worker, e, digest, event)
        return
    await worker.close()
    worker.client = WorkerClient(creds, max_bytes=max_bytes)
    worker.digest, worker.snapshot, worker.error, worker.reason = digest, None, "", ""
    was = worker.condition.get("status")
    worker.condition = {"type": CONDITION, "status": "True", "reason": "Accepted",
                        "message": "inline credentials, https", "lastTransitionTime": _now_rfc3339()}
    if was == "False":
        log.info("MultiKueueCluster %s: kubeconfig accepted", worker.name)
        await event(worker, "Normal", "KubeconfigAccepted", "the worker's kubeconfig is accepted (inline credentials)")


async def refuse(worker: Worker, e: guard.KubeconfigRefused, digest: str, event) -> None:
    await worker.close()
    worker.snapshot = None
    worker.error = NOT_READ if e.reason in _NOT_READ_REASONS else REFUSED
    worker.reason = e.reason
    same = (worker.condition.get("status") == "False" and worker.condition.get("reason") == e.reason
            and worker.digest == digest)
    worker.digest = digest
    if same:
        return
    worker.condition = {"type": CONDITION, "status": "False", "reason": e.reason, "message": str(e),
                        "lastTransitionTime": _now_rfc3339()}
    log.warning("MultiKueueCluster %s: kubeconfig not used (%s): %s", worker.name, e.reason, e)
    await event(worker, "Warning", "KubeconfigRefused", f"{e.reason}: {e}")
