"""cluster/admission.py: the webhooks' decisions on the policy store (the HTTPS server, the
certificates and the API server's calls run in tests/e2e/test_webhooks.py)."""

from __future__ import annotations

import base64
import json

from policy_scheduler import POLICY_LABEL
from policy_scheduler.cluster.admission import Admission, review
from policy_scheduler.cache.policies import PolicyStore
from policy_scheduler.framework.interface import Handle
from policy_scheduler.metricsources.manager import MetricSources


def policy_store():
    """What Admission reads: the policy store, with its policies, namespaces and scheduler name."""
    namespaces = {"web": {"team": "web"},
                  "jobs": {"team": "batch", "policy-scheduler.io/default-policy": "batch"}}
    store = PolicyStore(MetricSources(), lambda name: Handle(), namespaces=namespaces)
    store.on_policy("ADDED", {"metadata": {"name": "batch", "generation": 1},
                              "spec": {"plugins": [{"name": "NodeResourcesFit"}],
                                       "namespaceSelector": {"matchLabels": {"team": "batch"}}}})
    return store


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
