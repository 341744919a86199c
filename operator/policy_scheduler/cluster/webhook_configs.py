"""The admission webhook configurations: which requests the API server sends to the operator's
webhooks (admission.py serves them), in one place.

manifests/08-webhooks.yaml holds the same webhooks with a Service ``clientConfig`` (a unit test
fails when the two drift). An operator running outside the cluster (``run --webhook-url``, e.g.
``make playground``) registers them itself with a URL ``clientConfig``: the API server calls
``<url><path>`` and checks the certificate against the ``caBundle`` written with them.

Every webhook is ``failurePolicy: Ignore``: a down operator never blocks a pod or a policy.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

VALIDATING, MUTATING = "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"
API = "admissionregistration.k8s.io/v1"
PLURALS = {VALIDATING: "validatingwebhookconfigurations", MUTATING: "mutatingwebhookconfigurations"}

_COMMON = {"failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5}
_PODS_CREATE = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"],
                 "scope": "Namespaced"}]

# (kind, name, path, the rest of the webhook)
WEBHOOKS: list[tuple[str, str, str, dict[str, Any]]] = [
    # `kubectl apply` of a bad policy fails with the field path (the chain builder's validation)
    (VALIDATING, "schedulingpolicies.policy-scheduler.io", "/validate/schedulingpolicies", {
        "rules": [{"apiGroups": ["policy-scheduler.io"], "apiVersions": ["v1alpha1"],
                   "resources": ["schedulingpolicies"], "operations": ["CREATE", "UPDATE"], "scope": "Cluster"}],
        **_COMMON}),
    # tenancy: a pod naming a policy whose namespaceSelector does not admit its namespace is refused
    (VALIDATING, "pods.policy-scheduler.io", "/validate/pods", {
        "rules": _PODS_CREATE,
        "objectSelector": {"matchExpressions": [{"key": "policy-scheduler.io/policy", "operator": "Exists"}]},
        **_COMMON}),
    # opt-in per namespace (policy-scheduler.io/inject=enabled): schedulerName and the policy label
    (MUTATING, "inject.policy-scheduler.io", "/mutate/pods", {
        "rules": _PODS_CREATE,
        "namespaceSelector": {"matchLabels": {"policy-scheduler.io/inject": "enabled"}},
        "failurePolicy": "Ignore", "sideEffects": "None", "reinvocationPolicy": "Never",
        "admissionReviewVersions": ["v1"], "timeoutSeconds": 5}),
]


def configurations(name: str, client_config: Callable[[str], dict[str, Any]],
                   ca_bundle: str | None = None) -> dict[str, dict[str, Any]]:
    """Both configurations named ``name``, by kind; ``client_config(path)`` gives each webhook's
    clientConfig (a Service or a URL), ``ca_bundle`` (base64) goes into every one."""
    out: dict[str, dict[str, Any]] = {}
    for kind, hook, path, rest in WEBHOOKS:
        cfg = out.setdefault(kind, {"apiVersion": API, "kind": kind, "metadata": {
            "name": name, "labels": {"app.kubernetes.io/name": "policy-scheduler"}}, "webhooks": []})
        cc = dict(client_config(path))
        if ca_bundle is not None:
            cc["caBundle"] = ca_bundle
        cfg["webhooks"].append({"name": hook, "clientConfig": cc, **copy.deepcopy(rest)})
    return out


def url_client_config(base_url: str) -> Callable[[str], dict[str, Any]]:
    """clientConfig of an operator outside the cluster: ``<base_url><path>``."""
    base = base_url.rstrip("/")
    return lambda path: {"url": f"{base}{path}"}


def service_client_config(namespace: str, service: str) -> Callable[[str], dict[str, Any]]:
    """clientConfig of the operator behind its webhook Service (manifests/, the Helm chart)."""
    return lambda path: {"service": {"name": service, "namespace": namespace, "path": path}}
