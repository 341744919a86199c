"""Least privilege for the webhook configurations: RBAC lets the operator `update` its two
configurations (it writes their caBundle), and the ValidatingAdmissionPolicy of
manifests/10-webhook-configurations-policy.yaml narrows that to caBundle. On the real API server,
with manifests/' objects applied as they are (namespace, ServiceAccount, ClusterRole and binding,
webhook configurations, the policy and its binding):

- requests made as the operator's ServiceAccount (impersonation) that change the caBundle pass;
  those that change rules, clientConfig url or service, namespaceSelector, objectSelector,
  failurePolicy, the list of webhooks or the metadata are refused by the policy, and create and
  delete by RBAC (the policy would refuse them too);
- the same changes made by an administrator pass (the policy matches only the operator);
- the operator itself, running with a token of that ServiceAccount, still writes its caBundle.

The Helm chart renders the same policy for its release (tests/e2e/test_helm.py compares them)."""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

import localcluster
from conftest import OperatorProcess, wait_served
from helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
NS, SA, NAME = "policy-scheduler-system", "policy-scheduler", "policy-scheduler"
USER = f"system:serviceaccount:{NS}:{SA}"
POLICY = "policy-scheduler-webhook-configurations"
FILES = ("00-namespace.yaml", "01-serviceaccount.yaml", "02-clusterrole.yaml", "03-clusterrolebinding.yaml",
         "08-webhooks.yaml", "09-revisions-rbac.yaml", "10-webhook-configurations-policy.yaml")


def manifest_docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def _create(api: client.ApiClient, doc: dict) -> tuple[str, str, str | None] | None:
    """Create one manifest's object (None when it was there already): (kind, name, namespace)."""
    from kubernetes import utils

    try:
        utils.create_from_dict(api, doc)
    except utils.FailToCreateError as e:
        if all(x.status == 409 for x in e.api_exceptions):
            return None
        raise
    return doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace")


def _delete(api: client.ApiClient, kind: str, name: str, namespace: str | None) -> None:
    adm, rbac, core = client.AdmissionregistrationV1Api(api), client.RbacAuthorizationV1Api(api), client.CoreV1Api(api)
    calls = {
        "ValidatingAdmissionPolicyBinding": lambda: adm.delete_validating_admission_policy_binding(name),
        "ValidatingAdmissionPolicy": lambda: adm.delete_validating_admission_policy(name),
        "ValidatingWebhookConfiguration": lambda: adm.delete_validating_webhook_configuration(name),
        "MutatingWebhookConfiguration": lambda: adm.delete_mutating_webhook_configuration(name),
        "ClusterRoleBinding": lambda: rbac.delete_cluster_role_binding(name),
        "ClusterRole": lambda: rbac.delete_cluster_role(name),
        "RoleBinding": lambda: rbac.delete_namespaced_role_binding(name, namespace),
        "Role": lambda: rbac.delete_namespaced_role(name, namespace),
        "ServiceAccount": lambda: core.delete_namespaced_service_account(name, namespace),
        "Service": lambda: core.delete_namespaced_service(name, namespace),
        "Secret": lambda: core.delete_namespaced_secret(name, namespace),
    }
    try:
        calls[kind]()
    except ApiException as e:
        if e.status != 404:
            raise


def _exists(core: client.CoreV1Api, ns: str) -> bool:
    try:
        core.read_namespace(ns)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


@pytest.fixture(scope="module")
def installed(api, core):
    """manifests/' RBAC, webhook configurations and the policy, applied for real (the objects
    made here are deleted at the end; the namespace is finalized if made here)."""
    try:  # a namespace another test deleted stays Terminating here (no namespace controller)
        if core.read_namespace(NS).metadata.deletion_timestamp is not None:
            core.replace_namespace_finalize(NS, {"metadata": {"name": NS}, "spec": {"finalizers": []}})
            wait_for(lambda: not _exists(core, NS), 30, what=f"namespace {NS} gone")
    except ApiException as e:
        if e.status != 404:
            raise
    made = []
    for f in FILES:
        for doc in manifest_docs(f):
            got = _create(api, doc)
            if got is not None:
                made.append(got)
    yield
    for kind, name, ns in reversed(made):
        if kind == "Namespace":
            continue
        _delete(api, kind, name, ns)
    _delete(api, "Secret", f"{NAME}-webhook-tls", NS)
    if ("Namespace", NS, None) in made:
        try:
            core.delete_namespace(NS)
            core.replace_namespace_finalize(NS, {"metadata": {"name": NS}, "spec": {"finalizers": []}})
        except ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture(scope="module")
def as_operator(cluster, installed):
    """The admission API as the operator's ServiceAccount (impersonation by the admin)."""
    api = config.new_client_from_config(str(cluster.kubeconfig_path))
    api.set_default_header("Impersonate-User", USER)
    return client.AdmissionregistrationV1Api(api)


@pytest.fixture(scope="module")
def adm(api):
    return client.AdmissionregistrationV1Api(api)


def plain(obj) -> dict:
    return client.ApiClient().sanitize_for_serialization(obj)


def mutating(adm) -> dict:
    return plain(adm.read_mutating_webhook_configuration(NAME))


def validating(adm) -> dict:
    return plain(adm.read_validating_webhook_configuration(NAME))


def refusal(fn) -> ApiException:
    with pytest.raises(ApiException) as e:
        fn()
    return e.value


def by_policy(e: ApiException) -> bool:
    return e.status in (403, 422) and f"ValidatingAdmissionPolicy '{POLICY}'" in (e.body or "")


@pytest.fixture(scope="module")
def enforced(as_operator, adm):
    """Until the API server enforces the new policy (its informer): a forbidden change, sent as
    a dry run, is refused."""
    def refused() -> bool:
        body = mutating(adm)
        body["webhooks"][0]["failurePolicy"] = "Fail"
        try:
            as_operator.replace_mutating_webhook_configuration(NAME, body, dry_run="All")
        except ApiException as e:
            if by_policy(e):
                return True
            raise
        return False

    wait_for(refused, 30, interval=0.5, what="the ValidatingAdmissionPolicy enforced")


def test_the_policy_is_stored_as_written(adm, installed, enforced):
    """The API server compiled its CEL on create (a syntax or type error is refused there) and
    keeps it as written. (Its type-checking warnings, status.typeChecking, come from
    kube-controller-manager, which the test cluster does not run.)"""
    want, want_binding = manifest_docs("10-webhook-configurations-policy.yaml")
    got = plain(adm.read_validating_admission_policy(POLICY))["spec"]
    assert [v["expression"] for v in got["validations"]] == [v["expression"] for v in want["spec"]["validations"]]
    assert got["matchConditions"] == want["spec"]["matchConditions"]
    assert got["failurePolicy"] == "Fail"
    binding = adm.read_validating_admission_policy_binding(POLICY)
    assert binding.spec.policy_name == POLICY and binding.spec.validation_actions == ["Deny"]


def _ca(seed: str) -> str:
    return base64.b64encode(f"-----BEGIN CERTIFICATE-----\n{seed}\n-----END CERTIFICATE-----\n".encode()).decode()


def test_the_operator_may_change_the_ca_bundle_and_nothing_else(as_operator, adm, enforced):
    # the caBundle, in every webhook of both configurations: allowed (a real write, not a dry run)
    for read, replace in ((mutating, as_operator.replace_mutating_webhook_configuration),
                          (validating, as_operator.replace_validating_webhook_configuration)):
        body = read(adm)
        for w in body["webhooks"]:
            w["clientConfig"]["caBundle"] = _ca("one")
        replace(NAME, body)
        assert all(w["clientConfig"]["caBundle"] == _ca("one") for w in read(adm)["webhooks"])
        # and again, to another CA (renewal), with the object as just read
        body = read(adm)
        for w in body["webhooks"]:
            w["clientConfig"]["caBundle"] = _ca("two")
        replace(NAME, body)
        assert all(w["clientConfig"]["caBundle"] == _ca("two") for w in read(adm)["webhooks"])

    def change(fn):
        def make(body: dict) -> dict:
            body = copy.deepcopy(body)
            fn(body)
            return body
        return make

    def svc(b):
        b["webhooks"][0]["clientConfig"]["service"]["name"] = "evil"

    def url(b):
        cc = b["webhooks"][0]["clientConfig"]
        cc.pop("service")
        cc["url"] = "https://evil.example.com/mutate"

    def port(b):
        b["webhooks"][0]["clientConfig"]["service"]["port"] = 8443

    def path(b):
        b["webhooks"][0]["clientConfig"]["service"]["path"] = "/mutate/everything"

    def rules(b):
        b["webhooks"][0]["rules"][0]["operations"] = ["CREATE", "UPDATE"]

    def all_namespaces(b):
        b["webhooks"][0]["namespaceSelector"] = {}

    def object_selector(b):
        b["webhooks"][0]["objectSelector"] = {"matchLabels": {"x": "y"}}

    def failure(b):
        b["webhooks"][0]["failurePolicy"] = "Fail"

    def timeout(b):
        b["webhooks"][0]["timeoutSeconds"] = 30

    def reinvocation(b):
        b["webhooks"][0]["reinvocationPolicy"] = "IfNeeded"

    def match_conditions(b):
        b["webhooks"][0]["matchConditions"] = [{"name": "all", "expression": "true"}]

    def extra_webhook(b):
        w = copy.deepcopy(b["webhooks"][0])
        w["name"] = "more.policy-scheduler.io"
        b["webhooks"].append(w)

    def label(b):
        b["metadata"].setdefault("labels", {})["owner"] = "me"

    def annotation(b):
        b["metadata"].setdefault("annotations", {})["cert-manager.io/inject-ca-from"] = "x/y"

    mutating_changes = {"service name": svc, "url": url, "service port": port, "service path": path,
                        "rules": rules, "namespaceSelector": all_namespaces, "objectSelector": object_selector,
                        "failurePolicy": failure, "timeoutSeconds": timeout, "reinvocationPolicy": reinvocation,
                        "matchConditions": match_conditions, "a webhook added": extra_webhook, "a label": label,
                        "an annotation": annotation}
    current = mutating(adm)
    for what, fn in mutating_changes.items():
        body = change(fn)(current)
        e = refusal(lambda: as_operator.replace_mutating_webhook_configuration(NAME, body))
        assert by_policy(e), (what, e.status, e.body)
        assert "policy-scheduler ServiceAccount may" in e.body, (what, e.body)
        # ... even together with a caBundle change
        for w in body["webhooks"]:
            w["clientConfig"]["caBundle"] = _ca("three")
        e = refusal(lambda: as_operator.replace_mutating_webhook_configuration(NAME, body))
        assert by_policy(e), (what, e.body)
    assert mutating(adm)["webhooks"] == current["webhooks"]
    print(f"\nrefused as {USER}: " + ", ".join(mutating_changes))

    # the validating configuration: its webhooks removed, reordered, or widened
    current = validating(adm)
    for what, fn in {"a webhook removed": lambda b: b["webhooks"].pop(),
                     "webhooks reordered": lambda b: b["webhooks"].reverse(),
                     "pods' objectSelector dropped": lambda b: b["webhooks"][1].pop("objectSelector"),
                     "rules": lambda b: b["webhooks"][0]["rules"][0]["operations"].append("DELETE")}.items():
        body = change(fn)(current)
        e = refusal(lambda: as_operator.replace_validating_webhook_configuration(NAME, body))
        assert by_policy(e), (what, e.status, e.body)

    # create, delete and patch: RBAC refuses them (the policy would refuse the first two as well)
    other = change(lambda b: b["metadata"].update(name="policy-scheduler-2"))(
        {k: v for k, v in current.items() if k in ("apiVersion", "kind", "webhooks")} | {"metadata": {}})
    for fn in (lambda: as_operator.create_validating_webhook_configuration(other),
               lambda: as_operator.delete_mutating_webhook_configuration(NAME),
               lambda: as_operator.patch_mutating_webhook_configuration(NAME, {"metadata": {"labels": {"a": "b"}}})):
        assert refusal(fn).status == 403

    # an administrator is not matched: the same kind of change passes (and is undone)
    body = change(failure)(mutating(adm))
    adm.replace_mutating_webhook_configuration(NAME, body)
    assert mutating(adm)["webhooks"][0]["failurePolicy"] == "Fail"
    body = mutating(adm)
    body["webhooks"][0]["failurePolicy"] = "Ignore"
    adm.replace_mutating_webhook_configuration(NAME, body)


def test_the_operator_still_writes_its_ca_bundle(cluster, api, core, adm, crd, podgroup_crd, enforced, tmp_path):
    """`policy-scheduler run` with a token of the ServiceAccount (so with exactly the ClusterRole of
    manifests/ and under the policy): it makes its CA and writes it into both configurations."""
    wait_served(api, crd, podgroup_crd)
    # start from configurations without a caBundle (the previous test left one)
    for read, replace in ((mutating, adm.replace_mutating_webhook_configuration),
                          (validating, adm.replace_validating_webhook_configuration)):
        body = read(adm)
        for w in body["webhooks"]:
            w["clientConfig"].pop("caBundle", None)
        replace(NAME, body)
    _delete(api, "Secret", f"{NAME}-webhook-tls", NS)
    token = core.create_namespaced_service_account_token(
        SA, NS, {"spec": {"expirationSeconds": 3600}}).status.token
    admin = yaml.safe_load(Path(cluster.kubeconfig_path).read_text())
    ca = base64.b64decode(admin["clusters"][0]["cluster"]["certificate-authority-data"])
    kubeconfig = tmp_path / "operator.kubeconfig"
    kubeconfig.write_text(localcluster.kubeconfig_text(cluster.server, ca, {"token": token}))
    port = localcluster.free_port()
    op = OperatorProcess(cluster, "vap-scheduler", kubeconfig=str(kubeconfig), env={"POD_NAMESPACE": NS},
                         extra=["--leader-elect=false", "--webhook-port", str(port), "--webhook-address", "127.0.0.1",
                                "--webhook-service", f"{NS}/{NAME}-webhook",
                                "--webhook-secret", f"{NS}/{NAME}-webhook-tls", "--webhook-configuration", NAME])
    try:
        op.start()
        wait_for(lambda: "admission webhooks on https://" in op.log() or op.proc.poll() is not None, 60,
                 what="the operator's webhooks serving")
        assert op.proc.poll() is None, op.log()[-3000:]
        secret_ca = core.read_namespaced_secret(f"{NAME}-webhook-tls", NS).data["ca.crt"]
        for read in (mutating, validating):
            wait_for(lambda: all(w["clientConfig"].get("caBundle") == secret_ca for w in read(adm)["webhooks"]), 30,
                     what="the caBundle written")
        log = op.log()
        assert log.count("caBundle written into") == 2, log[-3000:]
        # nothing it did to its webhook configurations or their Secret was refused (the decision
        # key's Role of manifests/ names policy-scheduler's key, not this instance's: that 403 is
        # the decision key's, which falls back on a key of this process)
        refused = [line for line in log.splitlines() if "forbidden" in line.lower() and "decision annotations:" not in line]
        assert "ValidatingAdmissionPolicy" not in log and not refused, refused or log[-3000:]
        # what it wrote is the caBundle, and nothing else moved
        for read in (mutating, validating):
            got = read(adm)
            want = next(d for d in manifest_docs("08-webhooks.yaml") if d["kind"] == got["kind"])
            assert [w["name"] for w in got["webhooks"]] == [w["name"] for w in want["webhooks"]]
            for w, ww in zip(got["webhooks"], want["webhooks"]):
                service = {k: w["clientConfig"]["service"][k] for k in ww["clientConfig"]["service"]}
                assert service == ww["clientConfig"]["service"] and "url" not in w["clientConfig"], w["name"]
                assert {k: v for k, v in w.items() if k in ww and k != "clientConfig"} == {
                    k: v for k, v in ww.items() if k != "clientConfig"}, w["name"]
    finally:
        op.stop()
