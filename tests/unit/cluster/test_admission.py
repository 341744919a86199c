"""cluster/admission.py: the webhooks' decisions on the policy store (the HTTPS server, the
certificates and the API server's calls run in tests/e2e/test_webhooks.py)."""

from __future__ import annotations

import base64
import json

from policy_scheduler import POLICY_LABEL
from policy_scheduler.cluster.admission import Admission, review
from support.admission import policy_store


def req(obj, namespace="web", uid="u1"):
    return {"uid": uid, "namespace": namespace, "operation": "CREATE", "object": obj}


def patch_of(out):
    return json.loads(base64.b64decode(out["response"]["patch"]))


def test_a_bad_policy_is_refused_with_the_field_path_and_a_good_one_passes():
    a = Admission(policy_store())
    bad = {"metadata": {"name": "p"}, "spec": {"plugins": [{"name": "NodeResourcesFit", "weight": -1}]}}
    out = a.validate_policy(req(bad))
    r = out["response"]
    assert out["kind"] == "AdmissionReview" and r["uid"] == "u1" and r["allowed"] is False
    assert r["status"]["code"] == 422 and r["status"]["message"].startswith('SchedulingPolicy "p" is invalid: spec.plugins[0].weight')
    good = {"metadata": {"name": "p"}, "spec": {"plugins": [{"name": "NodeResourcesFit", "weight": 2}]}}
    assert a.validate_policy(req(good))["response"] == {"uid": "u1", "allowed": True}
    theirs = {"metadata": {"name": "p"}, "spec": {"schedulerName": "other", "plugins": [{"name": "Nope"}]}}
    assert a.validate_policy(req(theirs))["response"]["allowed"] is True  # left to its owner


def test_pods_of_an_opted_in_namespace_get_the_scheduler_and_a_policy():
    a = Admission(policy_store())
    out = a.mutate_pod(req({"metadata": {"name": "x"}, "spec": {"containers": []}}))
    assert patch_of(out) == [{"op": "add", "path": "/spec/schedulerName", "value": "policy-scheduler"},
                             {"op": "add", "path": "/metadata/labels", "value": {POLICY_LABEL: "default"}}]
    # the namespace names its policy; the pod's other labels stay
    out = a.mutate_pod(req({"metadata": {"name": "x", "labels": {"app": "a"}},
                            "spec": {"schedulerName": "default-scheduler"}}, namespace="jobs"))
    assert patch_of(out)[1] == {"op": "add", "path": "/metadata/labels/policy-scheduler.io~1policy",
                                "value": "batch"}
    # a pod that names its policy keeps it; one that chose another scheduler is left alone
    out = a.mutate_pod(req({"metadata": {"name": "x", "labels": {POLICY_LABEL: "mine"}}, "spec": {}}))
    assert patch_of(out) == [{"op": "add", "path": "/spec/schedulerName", "value": "policy-scheduler"}]
    out = a.mutate_pod(req({"metadata": {"name": "x"}, "spec": {"schedulerName": "volcano"}}))
    assert out["response"] == {"uid": "u1", "allowed": True}


def test_a_pod_naming_a_policy_its_namespace_may_not_use_is_refused():
    a = Admission(policy_store())

    def pod(ns, policy, scheduler="policy-scheduler"):
        return req({"metadata": {"name": "x", "labels": {POLICY_LABEL: policy}},
                    "spec": {"schedulerName": scheduler}}, namespace=ns)

    r = a.validate_pod(pod("web", "batch"))["response"]
    assert r["allowed"] is False and r["status"]["code"] == 403
    assert r["status"]["message"].startswith('SchedulingPolicy "batch" does not admit pods of namespace "web"')
    assert a.validate_pod(pod("jobs", "batch"))["response"]["allowed"] is True
    assert a.validate_pod(pod("web", "nope"))["response"]["allowed"] is True  # unknown: the scheduler says why
    assert a.validate_pod(pod("new-ns", "batch"))["response"]["allowed"] is True  # namespace not seen yet
    assert a.validate_pod(pod("web", "batch", scheduler="other"))["response"]["allowed"] is True


def test_long_messages_are_cut():
    out = review({"uid": "u"}, False, message="x" * 10000)
    assert len(out["response"]["status"]["message"]) == 4000


# ---------------------------------------------------------------------------------------------
# the handler: raw bodies as the API server (or anyone) sends them; always an AdmissionReview

def review_body(spec: bytes, uid: str = "u-7", name: str = "p") -> bytes:
    return (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"' + uid.encode()
            + b'","kind":{"group":"policy-scheduler.io","version":"v1alpha1","kind":"SchedulingPolicy"},'
            b'"operation":"CREATE","object":{"apiVersion":"policy-scheduler.io/v1alpha1","kind":"SchedulingPolicy",'
            b'"metadata":{"name":"' + name.encode() + b'"},"spec":' + spec + b"}}}")


def affinity_spec(levels: int) -> bytes:
    return (b'{"plugins":[{"name":"NodeAffinity","args":{"addedAffinity":' + b'{"a":' * levels + b"1"
            + b"}" * levels + b"}}]}")


def answer(body: bytes, decide=None, **kw) -> dict:
    from policy_scheduler.cluster.admission import respond

    out = respond(body, decide or Admission(policy_store()).validate_policy, **kw)
    assert out["kind"] == "AdmissionReview" and json.loads(json.dumps(out)) == out
    return out["response"]


def test_a_policy_nested_too_deep_for_any_parser_is_denied_with_its_uid():
    r = answer(review_body(affinity_spec(70)))  # read, and refused by the limits: the path is named
    assert r["uid"] == "u-7" and r["allowed"] is False and r["status"]["code"] == 422, r
    msg = r["status"]["message"]
    assert msg.startswith('SchedulingPolicy "p" is invalid: spec.plugins[0].args.addedAffinity.a.a.'), msg
    assert msg.endswith(": nested deeper than 64 levels")
    for levels in (1_100, 10_000):  # deeper than any reader goes: denied unread
        r = answer(review_body(affinity_spec(levels)))
        assert r["uid"] == "u-7" and r["allowed"] is False and r["status"]["code"] == 422, r
        assert r["status"]["message"] == ('SchedulingPolicy "p" is invalid: nested deeper than any reader goes '
                                          "(a spec may nest 64 levels): not read")


def test_what_cannot_be_read_is_denied_never_an_http_error():
    r = answer(b'{"request":{"uid":"u-1","object":{"spec":' + b"[" * 5 + b"}")
    assert r["uid"] == "u-1" and not r["allowed"] and r["status"]["code"] == 400
    assert r["status"]["message"].startswith("the admission request is not JSON: ")
    r = answer(b"not json at all")
    assert r == {"uid": "", "allowed": False, "status": {"code": 400, "reason": "BadRequest",
                                                          "message": r["status"]["message"]}}
    assert answer(b'{"kind":"AdmissionReview"}')["status"]["message"] == "not an AdmissionReview: no request object"
    assert answer(b"[1]")["status"]["code"] == 400
    r = answer(review_body(b'{"plugins":[]}', uid="u-2")[:100_000] + b"x" * 100, truncated=True)
    assert r["uid"] == "u-2" and not r["allowed"]
    assert r["status"]["message"] == "the admission request is larger than 8 MiB: not read"
    big = review_body(b'{"plugins":[{"name":"NodeResourcesFit","args":{"x":"' + b"y" * 1_000_000 + b'"}}]}')
    r = answer(big)
    assert not r["allowed"] and r["status"]["code"] == 422
    assert r["status"]["message"] == ('SchedulingPolicy "p" is invalid: spec.plugins[0].args.x: Too long: a string '
                                      "of 1000000 characters, at most 16384")
    assert answer(review_body(b'{"plugins":[{"name":"NodeResourcesFit"}]}'))["allowed"] is True


def test_a_pod_request_too_deep_to_read_is_denied_whatever_the_decision():
    a = Admission(policy_store())
    body = (b'{"request":{"uid":"u-3","namespace":"web","object":{"metadata":{"name":"x","annotations":'
            + b'{"a":' * 1_100 + b'"1"' + b"}" * 1_100 + b'},"spec":{}}}}')
    for decide in (a.mutate_pod, a.validate_pod):
        r = answer(body, decide)
        assert r["uid"] == "u-3" and not r["allowed"] and r["status"]["code"] == 400
        assert r["status"]["message"] == "the object cannot be read: nested deeper than any reader goes"


def test_a_decision_that_fails_allows_with_a_warning():
    def broken(req):
        raise KeyError("bug")

    r = answer(review_body(b"{}"), broken)
    assert r["allowed"] is True and r["uid"] == "u-7" and r["warnings"] == ["policy-scheduler webhook error: KeyError"]


def test_an_update_that_fixes_a_policy_too_deep_to_read_is_allowed():
    """The stored object (oldObject) cannot be read; the new one can: the fix goes through."""
    body = (b'{"request":{"uid":"u-4","operation":"UPDATE","object":{"metadata":{"name":"p"},'
            b'"spec":{"plugins":[{"name":"NodeResourcesFit"}]}},"oldObject":{"metadata":{"name":"p"},"spec":'
            + affinity_spec(1_100) + b"}}}")
    r = answer(body)
    assert r == {"uid": "u-4", "allowed": True}
