"""Decision annotations this scheduler wrote, told apart from those anyone else wrote.

A pod's ``policy-scheduler.io/decision`` annotation is set through the Binding (the API server
copies a Binding's annotations onto the pod), but any pod owner can write it too: on a pod
created with ``spec.nodeName`` set, or by a PATCH of a running pod. The rollout analysis counts
the pods a canary bound from that annotation (on every replica, and again after a failover,
from the pods as the watch lists them), so a tenant who copies the candidate hash from a policy's
status could promote a candidate, or force a rollback, with pods the scheduler never saw.

So the binder signs what it writes: ``policy-scheduler.io/decision-mac`` is an HMAC-SHA256, under
a key every replica shares, over the pod's UID, the node it is bound to and the decision
annotation's exact text. A tenant can read the MAC of its own pods, but it cannot make one for
other text, for another pod (another UID) or for another node without the key; copying both
annotations onto a forged pod fails the UID check. Anything that reads the annotation as a fact
(the rollout counts) counts only pods whose MAC verifies; what does not verify is ignored and
counted (``policy_scheduler_forged_decisions_total``).

The suggestions condition (``policy-scheduler.io/Suggestions``, cluster/suggestions.py) is
signed with the same key under another domain: its ``mac`` over the pod's UID and the exact text
of the JSON form without it (``sign_suggestions``), so explain tells what the scheduler wrote
from what anyone else with pods/status wrote.

The key lives in a Secret in the operator's namespace (``<scheduler-name>-decision-key``, the
namespace of ``--revision-namespace``: ``POD_NAMESPACE`` in a pod). The first replica that finds
no Secret creates it with a random key; a replica that loses the create race (409) reads the
winner's, so all replicas converge on one key, and a new leader verifies what the old one bound.
Without a usable namespace (a run out of the cluster whose namespace does not exist, or RBAC
that denies the Secret) the key is random per process: forged annotations are still refused,
but a new process cannot verify what an earlier one bound and keeps only the counts the
policy's status carries (``Rollout.adopt``). It says so once in the log and in
``policy_scheduler_decision_key_shared``. The key is never logged.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import secrets
from typing import Any, Mapping

from .kubeclient import TRANSPORT_ERRORS, ApiError

log = logging.getLogger("policy_scheduler")

MAC_ANNOTATION = "policy-scheduler.io/decision-mac"
MAC_PREFIX = "v1:"  # the scheme: a later one can be told apart and refused by an older replica
KEY_BYTES = 32
SECRET_KEY = "key"  # the Secret's data item
_DOMAIN = b"policy-scheduler.io/decision-mac/v1"
_SUGGESTIONS_DOMAIN = b"policy-scheduler.io/suggestions-mac/v1"


def secret_name(scheduler_name: str) -> str:
    """The Secret of an instance's key: one per scheduler name (instances do not share keys)."""
    return f"{scheduler_name}-decision-key"


class DecisionKey:
    """The HMAC key (random when not given). ``shared``: it came from the Secret, so every replica
    has it; ``where``: the Secret's namespace/name, or why the key is this process's own."""

    __slots__ = ("_key", "shared", "where")

    def __init__(self, key: bytes | None = None, *, shared: bool = False, where: str = "this process only") -> None:
        self._key = key if key is not None else secrets.token_bytes(KEY_BYTES)
        self.shared, self.where = shared, where

    def __repr__(self) -> str:  # never the key
        return f"DecisionKey(shared={self.shared}, where={self.where!r})"

    def _mac(self, domain: bytes, *parts: str) -> str:
        msg = bytearray(domain)
        for part in parts:  # each length-prefixed: no field can pass text on to the next one
            b = part.encode()
            msg += len(b).to_bytes(8, "big") + b
        digest = hmac.new(self._key, msg, hashlib.sha256).digest()
        return MAC_PREFIX + base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def sign(self, uid: str, node: str, decision: str) -> str:
        """The MAC of ``decision`` (the annotation's exact text) for the pod ``uid`` bound to ``node``."""
        return self._mac(_DOMAIN, uid, node, decision)

    def sign_suggestions(self, uid: str, text: str) -> str:
        """The MAC of a suggestions document's exact text for the pod ``uid`` (another domain:
        never a decision's MAC)."""
        return self._mac(_SUGGESTIONS_DOMAIN, uid, text)

    def verify_suggestions(self, uid: Any, text: Any, mac: Any) -> bool:
        """Whether ``mac`` is this key's MAC of the suggestions text for that pod (constant time)."""
        if not (isinstance(mac, str) and mac.startswith(MAC_PREFIX) and len(mac) < 128 and isinstance(uid, str)
                and uid and isinstance(text, str)):
            return False
        return hmac.compare_digest(mac.encode(), self.sign_suggestions(uid, text).encode())

    def verify(self, uid: str, node: str, decision: str, mac: Any) -> bool:
        """Whether ``mac`` is this key's MAC of the decision for that pod and node (constant time)."""
        if not (isinstance(mac, str) and mac.startswith(MAC_PREFIX) and len(mac) < 128 and uid and node):
            return False
        return hmac.compare_digest(mac.encode(), self.sign(uid, node, decision).encode())

    def verify_pod(self, body: Mapping[str, Any]) -> bool:
        """Whether a bound pod's decision annotation is one this scheduler's binder wrote for it."""
        meta = body.get("metadata") or {}
        ann = meta.get("annotations") or {}
        decision = ann.get("policy-scheduler.io/decision")
        node = (body.get("spec") or {}).get("nodeName")
        uid = meta.get("uid")
        if not (isinstance(decision, str) and isinstance(node, str) and isinstance(uid, str)):
            return False
        return self.verify(uid, node, decision, ann.get(MAC_ANNOTATION))


def decode_key(secret: Any) -> bytes | None:
    """The key in a Secret's ``data``, or None when it is missing or too short."""
    data = secret.get("data") if isinstance(secret, Mapping) else None
    raw = data.get(SECRET_KEY) if isinstance(data, Mapping) else None
    if not isinstance(raw, str):
        return None
    try:
        key = base64.b64decode(raw, validate=True)
    except ValueError:
        return None
    return key if len(key) >= KEY_BYTES else None


async def load_key(client, namespace: str | None, name: str, *, attempts: int = 6, delay: float = 1.0) -> DecisionKey:
    """The shared key from Secret ``namespace/name``, created (random) when missing; a key of this
    process only when there is no namespace, the namespace does not exist, RBAC denies the
    Secret, or the Secret holds no usable key (each said once in the log, without the key).
    Transport errors are tried again ``attempts`` times, ``delay`` seconds apart and doubling."""
    if not namespace:
        return _own("no operator namespace (--revision-namespace is empty)")
    path = f"/api/v1/namespaces/{namespace}/secrets"
    where = f"Secret {namespace}/{name}"
    for i in range(attempts):
        try:
            for _ in range(3):  # GET, else create; a lost create race reads the winner's key
                try:
                    key = decode_key(await client.request("GET", f"{path}/{name}"))
                    if key is None:
                        return _own(f"{where} has no usable data.{SECRET_KEY} (at least {KEY_BYTES} bytes)")
                    log.info("decision annotations signed and verified with the key in %s", where)
                    return DecisionKey(key, shared=True, where=where)
                except ApiError as e:
                    if e.status != 404:
                        raise
                fresh = secrets.token_bytes(KEY_BYTES)
                body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": name, "namespace": namespace,
                                     "labels": {"app.kubernetes.io/name": "policy-scheduler"}},
                        "data": {SECRET_KEY: base64.b64encode(fresh).decode()}}
                try:
                    await client.request("POST", path, body)
                except ApiError as e:
                    if e.status == 409:
                        continue  # another replica created it first: use theirs
                    raise
                log.info("decision annotations: key created in %s", where)
                return DecisionKey(fresh, shared=True, where=where)
            return _own(f"{where} was created and deleted again while it was read")
        except ApiError as e:
            if e.status in (401, 403, 404):  # RBAC, or the namespace does not exist
                return _own(f"{where} not usable: HTTP {e.status} {e.reason or ''}".rstrip())
            why = f"{where}: HTTP {e.status}"
        except TRANSPORT_ERRORS as e:
            why = f"{where}: {type(e).__name__}"
        if i + 1 < attempts:
            await asyncio.sleep(delay * 2 ** i)
    return _own(why)


def _own(why: str) -> DecisionKey:
    log.warning("decision annotations: %s; a key of this process only: forged annotations are still refused, "
                "but a replica that takes over cannot verify what this one bound (its rollout counts are what "
                "the policies' status says)", why)
    return DecisionKey(where=why)


async def attach(engine, namespace: str | None, scheduler_name: str) -> DecisionKey:
    """Load the key (``load_key``) and give it to the engine's binder and rollout analysis, before
    the informers list the pods that the analysis verifies (serve.py, before kopf starts)."""
    key = await load_key(engine.client, namespace, secret_name(scheduler_name))
    engine.binding_tasks.key = engine.rollouts.key = key
    engine.telemetry.decision_key_shared.set(1 if key.shared else 0)
    return key
