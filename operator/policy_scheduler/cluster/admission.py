"""Admission webhooks, served by the operator (every replica: a standby's cache is warm too).

- ``/validate/schedulingpolicies``: the policy store's own check (``policy.validate``,
  policy/check.py, with the store's plugin registry), so `kubectl apply` of a bad policy fails
  with the field path in the message. Policies that belong
  to another instance (spec.schedulerName) are left to it.
- ``/mutate/pods``: in namespaces that opt in (the MutatingWebhookConfiguration's
  namespaceSelector, label ``policy-scheduler.io/inject: enabled``), a new pod that names no
  scheduler (or ``default-scheduler``) gets ``spec.schedulerName`` and, without one, the policy
  label: the namespace's ``policy-scheduler.io/default-policy`` label, else ``--default-policy``.
- ``/validate/pods``: a pod of ours that names a policy whose ``spec.namespaceSelector`` does not
  admit its namespace is refused, with a message naming the policy and the namespace.

All three are ``failurePolicy: Ignore`` in manifests/: a down operator never blocks a pod or a
policy; the scheduler's own checks (``Ready=False``, ``NoPolicy`` events) still catch everything.
So an answer is an AdmissionReview wherever one can be (an HTTP error counts as "allowed"): a
body that cannot be read (not JSON, larger than MAX_BODY, nested deeper than any reader goes) is
denied (HTTP 200, code 400), with the request's uid sniffed from the raw bytes (``sniff_uid``);
a policy past the limits of policy/limits.py is denied (code 422) by the store's own check.

The port is open to every pod, so reading a body costs time linear in its size and memory bounded
by what the decisions need, whatever it holds: each decision's request is read against a schema
(msgspec steps over everything else without building it), and nothing is ever handed to
safejson's pure-Python tolerant decoder. The server, its thread and its caps on concurrent
requests, buffered bytes and read time: webhook_server.py.

Thread-safety: the decisions run on the webhook server's own thread, and read the policy store
without a lock. Every read is one ``dict.get`` (atomic) of a value the scheduling loop never
changes in place once published: a namespace's labels are replaced by a new dict
(ClusterState.apply_namespace), a policy's ``namespace_selector`` by a new LabelSelector
(``policy.validate``), and ``validate`` builds a chain of its own with a fresh Handle, from the
plugin registry (filled before start) and the thread-safe caches of framework/ (lru_cache, CEL's
locked LRU). A decision may see a namespace or a policy one event late, as it could before.

kopf's admission support is not used: its managed configurations cannot carry a namespaceSelector
or one failurePolicy per webhook, and its self-signed certificate is per process, where replicas
behind one Service need one certificate (certs.py keeps it in a Secret).
"""

from __future__ import annotations

import base64
import logging
import re
from typing import TYPE_CHECKING, Any, Optional

import msgspec
import orjson

from .. import POLICY_LABEL
from ..cache.policies import policy_owner
from ..policy import validate
from ..policy.limits import MAX_DEPTH, MAX_SPEC_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from ..cache.policies import PolicyStore

log = logging.getLogger("policy_scheduler.webhooks")

MAX_MESSAGE = 4000
# the largest body read: the API server sends an object of up to 3 MiB, twice for an UPDATE
MAX_BODY = 8 * 1024 * 1024
_UID = re.compile(rb'"uid"\s*:\s*"((?:[^"\\]|\\.){0,253})"')
_NAME = re.compile(rb'"name"\s*:\s*"((?:[^"\\]|\\.){0,253})"')


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


def _sniff(body: bytes | bytearray, field: re.Pattern) -> str:
    """The first match of ``field`` after ``"request"`` in a body no parser reads, else ""."""
    at = body.find(b'"request"')
    m = field.search(body, at if at >= 0 else 0)
    if m is None:
        return ""
    try:
        return m.group(1).decode()
    except UnicodeDecodeError:
        return ""


def sniff_uid(body: bytes | bytearray) -> str:
    """The request's uid from a body no parser reads (the API server writes it first), else ""."""
    return _sniff(body, _UID)


def sniff_name(body: bytes | bytearray) -> str:
    """The request's name from a body no parser reads (the API server writes ``request.name``
    before the object), else ""."""
    return _sniff(body, _NAME)


# What the webhooks read of a request, as msgspec schemas: everything else (a pod's containers,
# managedFields, an UPDATE's oldObject, whatever a caller adds) is stepped over by msgspec's C
# scanner, in linear time and without building a value (8 MiB of ``[{},{},...]``: 24 ms, where
# building it costs orjson 0.46 s and 235 MiB). Scalars are typed: the API server never sends
# another type, so a caller who does is refused without more work. Depth: msgspec stops at
# Python's recursion limit (about 1,000 levels), orjson at 1,024; a body nested deeper is denied
# as it is, never re-read by safejson's pure-Python tolerant decoder.
class _PodMeta(msgspec.Struct):
    name: Optional[str] = None
    namespace: Optional[str] = None
    labels: msgspec.Raw = msgspec.Raw()  # decoded once its size is known (_labels)


class _PodSpec(msgspec.Struct):
    schedulerName: Optional[str] = None


class _Pod(msgspec.Struct):
    metadata: Optional[_PodMeta] = None
    spec: Optional[_PodSpec] = None


class _PolicyMeta(msgspec.Struct):
    name: Optional[str] = None


class _Policy(msgspec.Struct):
    metadata: Optional[_PolicyMeta] = None
    spec: msgspec.Raw = msgspec.Raw()  # decoded once its size is known (_spec)


def _request(obj_type: type) -> type:
    return msgspec.defstruct(f"_Request{obj_type.__name__}", [
        ("uid", str, ""), ("name", Optional[str], None), ("namespace", Optional[str], None),
        ("operation", Optional[str], None), ("object", Optional[obj_type], None)])


_POD = msgspec.json.Decoder(msgspec.defstruct("_PodReview", [("request", Optional[_request(_Pod)], None)]))
_POLICY = msgspec.json.Decoder(msgspec.defstruct("_PolicyReview", [("request", Optional[_request(_Policy)], None)]))
_LABELS = msgspec.json.Decoder(Optional[dict[str, str]])
MAX_LABELS_BYTES = 1024 * 1024  # a pod's labels as JSON: more is refused unread (the API server's are far smaller)
# a policy's spec as raw JSON: more is judged by counting its values (C speed) before parsing:
# more than MAX_SPEC_BYTES of brackets and commas cannot be within MAX_SPEC_BYTES (policy/limits.py)
SPEC_COUNTED = 4 * MAX_SPEC_BYTES
_OLD_OBJECT = b',"oldObject":'


def _values(raw: bytes) -> int:
    """At least how many bytes of brackets and commas ``raw`` holds as JSON (C speed; brackets
    and commas inside strings count too, which only makes a refusal earlier for a spec that
    would be refused anyway)."""
    return raw.count(b"{") + raw.count(b"[") + raw.count(b",")


class Unread(Exception):
    """A request that is denied unread: (code, reason, message)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _decode(body, decoder) -> Any:
    """The request of ``body`` read against ``decoder``'s schema; Unread when it cannot be."""
    try:
        return decoder.decode(body).request
    except RecursionError:
        # the API server writes an UPDATE's oldObject after the object: a stored object too deep
        # to read must not block the update that fixes it. The body up to ``,"oldObject":`` is a
        # complete review once its two open objects are closed, or it is not read at all.
        at = body.find(_OLD_OBJECT)
        if at > 0:
            try:
                return decoder.decode(bytes(body[:at]) + b"}}").request
            except (msgspec.MsgspecError, RecursionError):
                pass
        raise Unread(400, "BadRequest", "the object cannot be read: nested deeper than any reader goes") from None
    except msgspec.ValidationError as e:
        raise Unread(400, "BadRequest", f"not an AdmissionReview this webhook reads: {e}") from None
    except msgspec.DecodeError as e:
        raise Unread(400, "BadRequest", f"the admission request is not JSON: {e}") from None


def _envelope(req) -> dict[str, Any]:
    out: dict[str, Any] = {"uid": req.uid}
    for k in ("name", "namespace", "operation"):
        v = getattr(req, k)
        if v is not None:
            out[k] = v
    return out


def read_pod_review(body) -> dict[str, Any] | None:
    """The request of a pod's AdmissionReview, as the decisions read it (``object``: metadata's
    name, namespace and labels, spec's schedulerName), or None (no request); Unread."""
    req = _decode(body, _POD)
    if req is None:
        return None
    out = _envelope(req)
    pod = req.object
    if pod is not None:
        obj: dict[str, Any] = {}
        if pod.metadata is not None:
            m = pod.metadata
            meta = {k: v for k, v in (("name", m.name), ("namespace", m.namespace)) if v is not None}
            if len(m.labels):
                if len(m.labels) > MAX_LABELS_BYTES:
                    raise Unread(400, "BadRequest", f"metadata.labels: Too long: more than "
                                                    f"{MAX_LABELS_BYTES // 1024} KiB as JSON")
                try:
                    meta["labels"] = _LABELS.decode(m.labels)
                except msgspec.MsgspecError as e:
                    raise Unread(400, "BadRequest", f"metadata.labels: {e}") from None
            obj["metadata"] = meta
        if pod.spec is not None:
            obj["spec"] = {} if pod.spec.schedulerName is None else {"schedulerName": pod.spec.schedulerName}
        out["object"] = obj
    return out


def read_policy_review(body) -> dict[str, Any] | None:
    """The request of a SchedulingPolicy's AdmissionReview (``object``: metadata's name and the
    whole spec), or None (no request); Unread. A spec too large for policy/limits.py is refused with
    the store's message before it is parsed; a smaller one is parsed whole (orjson), so the store's
    check names the field."""
    try:
        req = _decode(body, _POLICY)
    except Unread as e:
        if e.message.startswith("the object cannot be read"):
            name = sniff_name(body)
            raise Unread(422, "Invalid", f'SchedulingPolicy "{name}" is invalid: nested deeper than any reader goes '
                                         f"(a spec may nest {MAX_DEPTH} levels): not read") from None
        raise
    if req is None:
        return None
    out = _envelope(req)
    pol = req.object
    if pol is not None:
        obj: dict[str, Any] = {}
        if pol.metadata is not None:
            obj["metadata"] = {} if pol.metadata.name is None else {"name": pol.metadata.name}
        raw = memoryview(pol.spec)
        if len(raw):
            if len(raw) > SPEC_COUNTED and _values(bytes(raw)) > MAX_SPEC_BYTES:
                name = (pol.metadata.name if pol.metadata is not None else None) or ""
                raise Unread(422, "Invalid", f'SchedulingPolicy "{name}" is invalid: spec: Too long: more than '
                                             f"{MAX_SPEC_BYTES // 1024} KiB as JSON")
            try:
                obj["spec"] = orjson.loads(raw)
            except orjson.JSONDecodeError as e:  # orjson's depth limit: msgspec read it, orjson does not
                raise Unread(400, "BadRequest", f"the object cannot be read: {e}") from None
        out["object"] = obj
    return out


# the request reader of each decision (by name); another decision reads a policy's request
READERS = {"mutate_pod": read_pod_review, "validate_pod": read_pod_review, "validate_policy": read_policy_review}


def respond(body: bytes | bytearray, decide, *, truncated: bool = False) -> dict[str, Any]:
    """The AdmissionReview answering the raw ``body`` with ``decide(request)``; never raises, and
    costs time linear in the body's size whatever it holds. ``truncated``: the body was longer
    than MAX_BODY and only its start was read."""
    if truncated:
        return review({"uid": sniff_uid(body)}, False, code=400, reason="BadRequest",
                      message=f"the admission request is larger than {MAX_BODY // (1024 * 1024)} MiB: not read")
    reader = READERS.get(getattr(decide, "__name__", ""), read_policy_review)
    try:
        req = reader(body)
    except Unread as e:
        return review({"uid": sniff_uid(body)}, False, code=e.code, reason=e.reason, message=e.message)
    if req is None:
        return review({"uid": sniff_uid(body)}, False, code=400, reason="BadRequest",
                      message="not an AdmissionReview: no request object")
    try:
        return decide(req)
    except Exception as e:  # a bug must not break admission: allow, and say so
        log.exception("admission of %s failed", req.get("name") or "")
        out = review(req, True)
        out["response"]["warnings"] = [f"policy-scheduler webhook error: {type(e).__name__}"]
        return out


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
        got = validate(spec, self.store.registry)  # a Validated, or the field errors
        if not isinstance(got, list):
            return review(req, True)
        return review(req, False, code=422, reason="Invalid",
                      message=f'SchedulingPolicy "{name}" is invalid: ' + "; ".join(got))

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
