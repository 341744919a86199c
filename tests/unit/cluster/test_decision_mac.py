"""cluster/decision_mac.py: the MAC the binder writes beside a decision annotation verifies only for
that pod (UID), that node and that exact text under that key; the shared key comes from the
operator's Secret, created once (replicas that lose the create race read the winner's), and a key
of the process only when there is no usable namespace; the key is never logged."""

from __future__ import annotations

import asyncio
import base64
import logging

from support.fakeclient import FakeClient

from policy_scheduler.cluster.decision_mac import (KEY_BYTES, MAC_ANNOTATION, DecisionKey, decode_key, load_key,
                                                   secret_name)
from policy_scheduler.cluster.kubeclient import ApiError
from policy_scheduler.explain import DECISION_ANNOTATION

NS = "ops"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
NAME = secret_name("policy-scheduler")
DECISION = '{"policy":"p","node":"n1","rollout":{"arm":"canary","candidate":"0123456789ab"}}'


def bound(key: DecisionKey, uid="u1", node="n1", decision=DECISION, mac=None) -> dict:
    """A bound pod as the watch delivers it, its decision annotation signed by ``key``."""
    return {"metadata": {"name": "w", "namespace": "t", "uid": uid,
                         "annotations": {DECISION_ANNOTATION: decision,
                                         MAC_ANNOTATION: key.sign(uid, node, decision) if mac is None else mac}},
            "spec": {"nodeName": node}}


def test_a_signed_annotation_verifies_for_its_pod_only():
    key = DecisionKey()
    pod = bound(key)
    assert key.verify_pod(pod)
    # tampered: the arm changed after signing
    tampered = bound(key)
    tampered["metadata"]["annotations"][DECISION_ANNOTATION] = DECISION.replace("canary", "stable")
    assert not key.verify_pod(tampered)
    # copied, annotation and MAC, onto another pod (another UID): refused
    copied = bound(key, uid="u2", mac=pod["metadata"]["annotations"][MAC_ANNOTATION])
    assert not key.verify_pod(copied)
    # the same pod on another node than the one it was signed for
    moved = bound(key)
    moved["spec"]["nodeName"] = "n2"
    assert not key.verify_pod(moved)
    # another key (a forger's, or another scheduler instance's)
    assert not DecisionKey().verify_pod(pod)
    assert DecisionKey(b"k" * KEY_BYTES).sign("u1", "n1", DECISION) != DecisionKey(b"j" * KEY_BYTES).sign(
        "u1", "n1", DECISION)


def test_missing_or_malformed_macs_and_fields_are_refused():
    key = DecisionKey()
    good = key.sign("u1", "n1", DECISION)
    for mac in (None, "", 7, ["v1:x"], good[3:], "v2:" + good[3:], good + "A", good[:-1], "v1:" + "A" * 500):
        pod = bound(key, mac="")
        pod["metadata"]["annotations"][MAC_ANNOTATION] = mac
        if mac is None:
            del pod["metadata"]["annotations"][MAC_ANNOTATION]
        assert not key.verify_pod(pod), mac
    for broken in ({}, {"metadata": None, "spec": None}, {"metadata": {"uid": 5}},
                   {"metadata": {"uid": "u1", "annotations": {DECISION_ANNOTATION: DECISION, MAC_ANNOTATION: good}}},
                   {"metadata": {"uid": "", "annotations": {DECISION_ANNOTATION: DECISION, MAC_ANNOTATION: good}},
                    "spec": {"nodeName": "n1"}}):
        assert not key.verify_pod(broken)
    # a colon, a NUL or a newline inside the fields cannot move text from one field to another
    assert key.sign("u1", "n1\0x", "y") != key.sign("u1", "n1", "x\0y")


def test_the_key_is_not_in_its_repr():
    raw = b"s" * KEY_BYTES
    key = DecisionKey(raw, shared=True, where="Secret a/b")
    assert "sss" not in repr(key) and base64.b64encode(raw).decode() not in repr(key)


def run(coro):
    return asyncio.run(coro)


def test_the_first_replica_creates_the_secret_and_the_next_reads_it(caplog):
    client = FakeClient()
    store = client.serve(SECRETS)
    with caplog.at_level(logging.INFO, logger="policy_scheduler"):
        first = run(load_key(client, NS, NAME))
        second = run(load_key(client, NS, NAME))
    assert first.shared and second.shared and first.where == f"Secret {NS}/{NAME}"
    secret = store[NAME]
    assert secret["type"] == "Opaque" and len(decode_key(secret)) == KEY_BYTES
    assert second.sign("u", "n", "d") == first.sign("u", "n", "d")  # one key for every replica
    assert [c.method for c in client.calls] == ["get", "post", "get"]
    assert secret["data"]["key"] not in caplog.text  # the key is never logged


class RacingClient(FakeClient):
    """Another replica creates the Secret between this one's GET (404) and its POST (409)."""

    def __init__(self, winner: bytes):
        super().__init__()
        self.winner = winner

    async def request(self, method, path, body=None, **kw):
        if method == "POST" and not self.calls_of("post"):
            self.served[SECRETS][NAME] = {"metadata": {"name": NAME},
                                          "data": {"key": base64.b64encode(self.winner).decode()}}
        return await super().request(method, path, body, **kw)


def test_a_replica_that_loses_the_create_race_uses_the_winners_key():
    winner = b"w" * KEY_BYTES
    client = RacingClient(winner)
    client.serve(SECRETS)
    key = run(load_key(client, NS, NAME))
    assert [c.method for c in client.calls] == ["get", "post", "get"]
    assert key.shared and key.sign("u", "n", "d") == DecisionKey(winner).sign("u", "n", "d")


def test_without_a_usable_namespace_the_key_is_the_process_own(caplog):
    with caplog.at_level(logging.WARNING, logger="policy_scheduler"):
        assert not run(load_key(FakeClient(), None, NAME)).shared
        # the namespace does not exist (a run out of the cluster): POST answers 404
        client = FakeClient()
        client.fail("get", 404, path_contains=NAME)
        client.fail("post", 404, path_contains="secrets")
        key = run(load_key(client, NS, NAME))
        assert not key.shared and "HTTP 404" in key.where
        # RBAC denies the Secret
        client = FakeClient()
        client.fail("get", 403, path_contains=NAME)
        assert not run(load_key(client, NS, NAME)).shared
        # a Secret without a usable key (too short): not used, not replaced
        client = FakeClient()
        client.serve(SECRETS, {"metadata": {"name": NAME}, "data": {"key": base64.b64encode(b"short").decode()}})
        key = run(load_key(client, NS, NAME))
        assert not key.shared and "no usable data.key" in key.where
        assert [c.method for c in client.calls] == ["get"]
    assert caplog.text.count("a key of this process only") == 4


def test_transport_errors_are_tried_again_then_the_key_is_the_process_own():
    client = FakeClient()
    client.serve(SECRETS)
    client.fail("get", 503, path_contains=NAME, times=2)
    key = run(load_key(client, NS, NAME, delay=0))
    assert key.shared and [c.method for c in client.calls] == ["get", "get", "get", "post"]

    class Down(FakeClient):
        async def request(self, method, path, body=None, **kw):
            self._record(method.lower(), path, body)
            raise OSError("connection refused")

    down = Down()
    key = run(load_key(down, NS, NAME, attempts=3, delay=0))
    assert not key.shared and "OSError" in key.where and len(down.calls) == 3


def test_decode_key_takes_only_a_base64_key_of_32_bytes_or_more():
    good = base64.b64encode(b"x" * 40).decode()
    assert decode_key({"data": {"key": good}}) == b"x" * 40
    for bad in (None, {}, {"data": None}, {"data": {"key": 5}}, {"data": {"key": "not base64!"}},
                {"data": {"key": base64.b64encode(b"x" * 31).decode()}}):
        assert decode_key(bad) is None, bad
    assert isinstance(ApiError(404, {}), Exception)
