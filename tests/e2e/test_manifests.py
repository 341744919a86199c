"""The install manifests: the API server accepts them as written, and their ClusterRole is all the
operator needs. The operator runs in this process under the manifests' ServiceAccount, with RBAC
enforced, and must schedule, bind, record events, conditions and policy status without a 403."""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import logging
import re
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

import localcluster
from helpers import apply_policy, events_for, node, pod, policy_status, ready_condition, wait_bound, wait_for

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
SCHEDULER = "policy-scheduler-rbac"
POLICY = "rbac-check"
POOL_LABEL = "e2e.policy-scheduler.io/rbac-pool"


def manifest_docs() -> list[dict]:
    """Every object of manifests/, in the order `kubectl apply -f manifests/` creates them."""
    return [d for f in sorted(MANIFESTS.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def the(kind: str) -> dict:
    docs = [d for d in manifest_docs() if d["kind"] == kind]
    assert len(docs) == 1, f"expected one {kind} in manifests/, found {len(docs)}"
    return docs[0]


# The API calls of `policy-scheduler run` (cluster/engine.py, cluster/informer.py, SchedulingPolicies
# included): (API group, resource, verb).
OPERATOR_CALLS = {
    *((g, r, v) for g, r in (("", "nodes"), ("", "pods"), ("", "namespaces"), ("", "services"),
                              ("", "replicationcontrollers"), ("apps", "replicasets"), ("apps", "statefulsets"),
                              ("policy", "poddisruptionbudgets"), ("policy-scheduler.io", "schedulingpolicies"),
                              ("", "persistentvolumes"), ("", "persistentvolumeclaims"),
                              ("storage.k8s.io", "storageclasses"), ("storage.k8s.io", "csinodes"),
                              ("storage.k8s.io", "csidrivers"), ("scheduling.x-k8s.io", "podgroups"),
                              ("scheduling.k8s.io", "podgroups"), ("scheduling.k8s.io", "compositepodgroups"))
      for v in ("list", "watch")),
    ("", "persistentvolumes", "update"),  # VolumeBinding's PreBind: a static match's claimRef
    ("", "persistentvolumeclaims", "update"),  # ... and a claim to provision: selected-node
    ("", "pods", "delete"),  # DefaultPreemption's victims
    ("", "pods/binding", "create"),
    ("", "pods/status", "patch"),
    ("events.k8s.io", "events", "create"),
    ("policy-scheduler.io", "schedulingpolicies/status", "patch"),
    ("policy-scheduler.io", "schedulingpolicies", "get"),  # the tuner reads the policy it evaluates
    ("policy-scheduler.io", "schedulingpolicies", "patch"),  # a rollout's promotion; the tuner's Apply
    ("scheduling.x-k8s.io", "podgroups/status", "patch"),  # Coscheduling's PodGroup status
    ("scheduling.k8s.io", "podgroups/status", "patch"),  # GangScheduling's PodGroup condition
}
# DynamicResources (DRA, resource.k8s.io), as upstream's kube-scheduler: the claims, slices, classes
# and DeviceTaintRules it lists and watches; its writes to claims (PreBind's finalizer, GET after a
# conflict, the extended-resource claim's create and delete) and to their status (PreBind's
# allocation and reservation and PostFilter's deallocation: PUT; Unreserve: strategic-merge PATCH),
# where the API server (DRAResourceClaimGranularStatusAuthorization) also asks for the same verb on
# the synthetic resourceclaims/binding. The pod's extendedResourceClaimStatus is a pods/status
# PATCH, in OPERATOR_CALLS already. Every other verb on these resources is refused.
DRA_READS = ("resourceclaims", "resourceslices", "deviceclasses", "devicetaintrules")
DRA_CALLS = {
    *(("resource.k8s.io", r, v) for r in DRA_READS for v in ("list", "watch")),
    *(("resource.k8s.io", "resourceclaims", v) for v in ("get", "create", "update", "delete")),
    *(("resource.k8s.io", r, v) for r in ("resourceclaims/status", "resourceclaims/binding")
      for v in ("update", "patch")),
}
ALL_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# The admission webhooks' caBundle (cluster/admission.py), in the operator's own configurations.
WEBHOOK_CONFIG_CALLS = {("admissionregistration.k8s.io", r, v) for r in ("validatingwebhookconfigurations",
                                                                          "mutatingwebhookconfigurations")
                        for v in ("get", "update")}
WEBHOOK_CONFIG_NAME = "policy-scheduler"
# The installed SchedulingPolicy CRD, compared with the operator's own at start-up (cluster/crdcheck.py).
CRD_CALLS = {("apiextensions.k8s.io", "customresourcedefinitions", "get")}
CRD_NAME = "schedulingpolicies.policy-scheduler.io"
# Their certificate Secret (cluster/certs.py), in the operator's namespace.
SECRET_NAME = "policy-scheduler-webhook-tls"
SECRET_CALLS = {("", "secrets", v) for v in ("create", "get", "update")}
# Leader election (cluster/leader.py): its Lease in kube-system, named after the scheduler name.
LEASE_NAMESPACE, LEASE_NAME = "kube-system", "policy-scheduler"
LEASE_CALLS = {("coordination.k8s.io", "leases", v) for v in ("create", "get", "update")}
# The policies' revisions (cluster/revisions.py): ControllerRevisions in the operator's namespace.
REVISION_CALLS = {("apps", "controllerrevisions", v) for v in ("list", "create", "patch", "delete")}
# The key that signs decision annotations (cluster/decision_mac.py): its Secret in the operator's namespace.
DECISION_KEY = "policy-scheduler-decision-key"


@pytest.fixture(scope="module")
def installed(api, crd):
    """Namespace, ServiceAccount, ClusterRole, ClusterRoleBinding and Service created for real, in
    file order; the Deployment is left to the tests (server-side dry run only)."""
    # the Deployment and the webhook configurations are only dry-run: the configurations would send
    # the session's other pods and policies to a Service without endpoints
    docs = [d for d in manifest_docs() if d["kind"] not in ("Deployment", *WEBHOOK_CONFIG_KINDS)]
    for d in docs:
        if d["kind"] == "PodDisruptionBudget":  # kubernetes' utils has no create for policy/v1
            client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(d["metadata"]["namespace"], d)
        else:
            utils.create_from_dict(api, d)
    yield docs
    for d in reversed(docs):  # the Namespace last, finalized: this control plane runs no namespace
        meta = d["metadata"]  # controller, and a namespace left Terminating refuses the next test's objects
        kind = d["kind"]
        try:
            if kind == "Namespace":
                client.CoreV1Api(api).delete_namespace(meta["name"])
                client.CoreV1Api(api).replace_namespace_finalize(
                    meta["name"], {"metadata": {"name": meta["name"]}, "spec": {"finalizers": []}})
            elif kind == "ServiceAccount":
                client.CoreV1Api(api).delete_namespaced_service_account(meta["name"], meta["namespace"])
            elif kind == "Service":
                client.CoreV1Api(api).delete_namespaced_service(meta["name"], meta["namespace"])
            elif kind == "ClusterRole":
                client.RbacAuthorizationV1Api(api).delete_cluster_role(meta["name"])
            elif kind == "ClusterRoleBinding":
                client.RbacAuthorizationV1Api(api).delete_cluster_role_binding(meta["name"])
            elif kind == "Role":
                client.RbacAuthorizationV1Api(api).delete_namespaced_role(meta["name"], meta["namespace"])
            elif kind == "RoleBinding":
                client.RbacAuthorizationV1Api(api).delete_namespaced_role_binding(meta["name"], meta["namespace"])
            elif kind == "PodDisruptionBudget":
                client.PolicyV1Api(api).delete_namespaced_pod_disruption_budget(meta["name"], meta["namespace"])
            elif kind == "NetworkPolicy":
                client.NetworkingV1Api(api).delete_namespaced_network_policy(meta["name"], meta["namespace"])
            elif kind == "ValidatingAdmissionPolicy":
                client.AdmissionregistrationV1Api(api).delete_validating_admission_policy(meta["name"])
            elif kind == "ValidatingAdmissionPolicyBinding":
                client.AdmissionregistrationV1Api(api).delete_validating_admission_policy_binding(meta["name"])
            else:
                raise AssertionError(f"no cleanup for {kind}")
        except ApiException as e:
            if e.status != 404:
                raise


WEBHOOK_CONFIG_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
VAP_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def test_layout_installs_in_one_go():
    """`kubectl apply -f crds/ -f manifests/` walks the directory in name order: the Namespace
    must come first and everything namespaced must live in it, but for the leader-election Role
    and RoleBinding, which live with the Lease in kube-system (as kube-scheduler's)."""
    docs = manifest_docs()
    assert docs[0]["kind"] == "Namespace"
    ns = docs[0]["metadata"]["name"]
    assert ns == "policy-scheduler-system"
    assert sorted(d["kind"] for d in docs) == sorted(
        ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "Service",
         "Role", "RoleBinding", "Role", "RoleBinding", "Role", "RoleBinding", "Role", "RoleBinding",
         "PodDisruptionBudget", *WEBHOOK_CONFIG_KINDS, *VAP_KINDS, "NetworkPolicy"])
    for d in docs:
        if d["kind"] in ("Role", "RoleBinding") and "leader-election" in d["metadata"]["name"]:
            assert d["metadata"]["namespace"] == LEASE_NAMESPACE, d["kind"]
        elif d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding", *WEBHOOK_CONFIG_KINDS, *VAP_KINDS):
            assert d["metadata"]["namespace"] == ns, d["kind"]
    sa, binding, dep = the("ServiceAccount"), the("ClusterRoleBinding"), the("Deployment")
    assert binding["roleRef"]["name"] == the("ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": ns}]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role"}
    for rb in (d for d in docs if d["kind"] == "RoleBinding"):
        assert rb["subjects"] == binding["subjects"]
        assert rb["metadata"]["namespace"] == roles[rb["roleRef"]["name"]]["metadata"]["namespace"]
    # every webhook: Ignore on failure, served by the webhook Service on a path the operator serves
    svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "policy-scheduler-webhook")
    for cfg in (d for d in docs if d["kind"] in WEBHOOK_CONFIG_KINDS):
        assert cfg["metadata"]["name"] == WEBHOOK_CONFIG_NAME
        for w in cfg["webhooks"]:
            assert w["failurePolicy"] == "Ignore" and w["sideEffects"] == "None", w["name"]
            ref = w["clientConfig"]["service"]
            assert (ref["name"], ref["namespace"]) == (svc["metadata"]["name"], ns)
            assert ref["path"] in ("/validate/schedulingpolicies", "/validate/pods", "/mutate/pods")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    # the revisions' namespace is the pod's own (downward API), where their Role grants them
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    revisions_role = roles["policy-scheduler:revisions"]
    assert revisions_role["metadata"]["namespace"] == ns
    assert {("apps", r, v) for rule in revisions_role["rules"] for r in rule["resources"]
            for v in rule["verbs"]} == REVISION_CALLS


def test_cluster_role_is_exactly_the_operators_calls():
    granted = {(g, r, v) for rule in the("ClusterRole")["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert granted == OPERATOR_CALLS | DRA_CALLS | WEBHOOK_CONFIG_CALLS | CRD_CALLS
    names = {"admissionregistration.k8s.io": [WEBHOOK_CONFIG_NAME], "apiextensions.k8s.io": [CRD_NAME]}
    for r in the("ClusterRole")["rules"]:
        assert "nonResourceURLs" not in r
        # names only where the calls name objects of ours: the webhook configurations, our CRD
        assert r.get("resourceNames") == names.get(r["apiGroups"][0]), r


def test_objects_are_accepted(cluster, api, core, installed, tmp_path):
    sa = the("ServiceAccount")
    ns = sa["metadata"]["namespace"]
    assert core.read_namespace(ns).metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert core.read_namespaced_service_account(sa["metadata"]["name"], ns)
    rbac = client.RbacAuthorizationV1Api(api)
    assert rbac.read_cluster_role(the("ClusterRole")["metadata"]["name"]).rules
    assert rbac.read_cluster_role_binding(the("ClusterRoleBinding")["metadata"]["name"]).subjects

    # the Deployment: validated and admitted by the API server, but not stored
    dep = the("Deployment")
    apps = client.AppsV1Api(api)
    got = apps.create_namespaced_deployment(ns, dep, dry_run="All")
    # two replicas with leader election, rolled one at a time, a new one Ready before an old one goes
    assert got.spec.replicas == 2 and got.spec.strategy.type == "RollingUpdate"
    assert got.spec.strategy.rolling_update.max_unavailable == 0
    c = got.spec.template.spec.containers[0]
    assert c.image == "policy-scheduler:0.1.0" and c.args[:3] == ["run", "--log-level", "info"]
    assert not any(x.startswith("--leader-elect") for x in c.args)  # kube-scheduler's defaults
    assert {p.name: p.container_port for p in c.ports} == {"health": 8080, "metrics": 8081, "webhook": 9443}
    assert c.args[c.args.index("--webhook-port") + 1] == "9443"
    assert c.liveness_probe.http_get.path == "/healthz" and c.readiness_probe.http_get.path == "/readyz"
    spread = got.spec.template.spec.topology_spread_constraints
    assert [(t.topology_key, t.when_unsatisfiable, t.max_skew) for t in spread] == [
        ("kubernetes.io/hostname", "DoNotSchedule", 1)]
    assert spread[0].label_selector.match_labels == got.spec.selector.match_labels
    pdb = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(the("PodDisruptionBudget")["metadata"]["name"],
                                                                        ns)
    assert pdb.spec.min_available == 1 and pdb.spec.selector.match_labels == got.spec.selector.match_labels
    with pytest.raises(ApiException) as e:
        apps.read_namespaced_deployment(dep["metadata"]["name"], ns)
    assert e.value.status == 404

    # the pod it would create passes the namespace's Pod Security "restricted" admission
    template = dep["spec"]["template"]
    pod_body = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
                "metadata": {"generateName": "policy-scheduler-", "labels": template["metadata"]["labels"]}}
    core.create_namespaced_pod(ns, pod_body, dry_run="All")
    lax = copy.deepcopy(pod_body)  # proof that the admission check is on: a weaker pod is refused
    del lax["spec"]["containers"][0]["securityContext"]["capabilities"]
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod(ns, lax, dry_run="All")
    assert e.value.status == 403 and "PodSecurity" in e.value.body

    # and the documented install command accepts the whole set as it lies in the tree
    kubectl = localcluster.bin_dir(build=False) / "kubectl"
    out = subprocess.run([str(kubectl), "apply", "--dry-run=server", "-f", str(ROOT / "crds"), "-f", str(MANIFESTS)],
                         env={"KUBECONFIG": str(cluster.kubeconfig_path), "PATH": "/usr/bin:/bin",
                              "HOME": str(tmp_path)},  # kubectl's discovery cache goes there
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    n_crds = len(list((ROOT / "crds").glob("*.yaml")))
    assert len(lines) == n_crds + len(manifest_docs()) and all(ln.endswith("(server dry run)") for ln in lines), lines
    assert f"deployment.apps/{dep['metadata']['name']} created (server dry run)" in lines


def test_service_account_is_granted_exactly_that(api, installed):
    """RBAC as the API server evaluates it for the ServiceAccount's identity."""
    sa = the("ServiceAccount")["metadata"]
    user = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"
    authz = client.AuthorizationV1Api(api)

    def allowed(group: str, resource: str, verb: str, namespace: str = "default", name: str | None = None) -> bool:
        res, _, sub = resource.partition("/")
        review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=user, groups=["system:serviceaccounts", f"system:serviceaccounts:{sa['namespace']}",
                               "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(group=group, resource=res, subresource=sub or None,
                                                            verb=verb, namespace=namespace or None, name=name)))
        return authz.create_subject_access_review(review).status.allowed

    for call in sorted(OPERATOR_CALLS | DRA_CALLS):
        assert allowed(*call), call
    for call in sorted(CRD_CALLS):  # our CRD only
        assert allowed(*call, namespace="", name=CRD_NAME), call
        assert not allowed(*call, namespace="", name="podgroups.scheduling.x-k8s.io"), call
    # the Lease: create, then get and update of the one named after the scheduler, in kube-system only
    for call in sorted(LEASE_CALLS):
        assert allowed(*call, namespace=LEASE_NAMESPACE, name=LEASE_NAME), call
        assert not allowed(*call, namespace="default", name=LEASE_NAME), call
    for verb in ("get", "update"):
        assert not allowed("coordination.k8s.io", "leases", verb, namespace=LEASE_NAMESPACE, name="kube-scheduler")
    for verb in ("delete", "list", "watch", "patch"):
        assert not allowed("coordination.k8s.io", "leases", verb, namespace=LEASE_NAMESPACE, name=LEASE_NAME)
    # the webhooks: their two configurations, and the certificate Secret in the operator's namespace
    for call in sorted(WEBHOOK_CONFIG_CALLS):
        assert allowed(*call, namespace="", name=WEBHOOK_CONFIG_NAME), call
        assert not allowed(*call, namespace="", name="someone-elses"), call
    for call in sorted(SECRET_CALLS):
        assert allowed(*call, namespace=sa["namespace"], name=SECRET_NAME), call
        assert not allowed(*call, namespace="default", name=SECRET_NAME), call
    for verb in ("get", "update"):
        assert not allowed("", "secrets", verb, namespace=sa["namespace"], name="other-secret")
    for verb in ("list", "watch", "delete"):
        assert not allowed("", "secrets", verb, namespace=sa["namespace"], name=SECRET_NAME)
    # the policies' revisions: in the operator's namespace only
    for call in sorted(REVISION_CALLS):
        assert allowed(*call, namespace=sa["namespace"]), call
        assert not allowed(*call, namespace="default"), call
        assert not allowed(*call, namespace=""), call  # not cluster-wide
    for verb in ("get", "watch", "update"):
        assert not allowed("apps", "controllerrevisions", verb, namespace=sa["namespace"]), verb
    # the decision key (cluster/decision_mac.py): get on its Secret, create, in the operator's namespace only
    assert allowed("", "secrets", "get", namespace=sa["namespace"], name=DECISION_KEY)
    assert allowed("", "secrets", "create", namespace=sa["namespace"])
    for verb in ("update", "patch", "delete", "list", "watch"):
        assert not allowed("", "secrets", verb, namespace=sa["namespace"], name=DECISION_KEY), verb
    assert not allowed("", "secrets", "get", namespace="default", name=DECISION_KEY)
    # DRA: exactly DRA_CALLS (and, for pods/status, exactly patch), namespaced and cluster-wide
    for resource in (*DRA_READS, "resourceclaims/status", "resourceclaims/binding", "resourceclaims/driver",
                     "resourceclaimtemplates", "devicetaintrules/status"):
        for verb in ALL_VERBS:
            want = ("resource.k8s.io", resource, verb) in DRA_CALLS
            for ns in ("default", ""):
                assert allowed("resource.k8s.io", resource, verb, namespace=ns) is want, (resource, verb, ns, want)
    for verb in ALL_VERBS:
        assert allowed("", "pods/status", verb) is (verb == "patch"), verb
    assert not allowed("", "pods/finalizers", "update")  # upstream's grant; our claims block no deletion
    # no patch on pods (the suggestions go into a pods/status condition instead)
    for call in [("", "pods", "get"), ("", "pods", "create"), ("", "pods", "patch"), ("", "pods", "update"),
                 ("", "nodes", "patch"),
                 ("", "secrets", "list"), ("", "events", "create"), ("events.k8s.io", "events", "patch"),
                 ("policy-scheduler.io", "schedulingpolicies", "update"), ("scheduling.x-k8s.io", "podgroups", "patch"),
                 ("scheduling.x-k8s.io", "podgroups", "create")]:
        assert not allowed(*call), call


def sa_token(core, namespace: str, name: str) -> str:
    req = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    return core.create_namespaced_service_account_token(name, namespace, req).status.token


def caller(cluster, token: str):
    """``call(method, path, body=None, content_type=...)``: one request to the API server with a
    bearer token; its JSON answer, or Refused with the status and body of a refusal."""
    import ssl

    ctx = ssl.create_default_context(cafile=str(cluster.state_dir / "pki" / "ca.crt"))

    def call(method: str, path: str, body=None, content_type: str = "application/json"):
        req = urllib.request.Request(cluster.server + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": content_type,
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
                text = r.read()
        except urllib.error.HTTPError as e:
            raise Refused(e.code, e.read().decode()) from None
        if "watch=true" in path:  # a stream of events, none at all when nothing changed
            return text
        return json.loads(text)

    return call


class Refused(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body}")
        self.status, self.body = status, body


DRA = "/apis/resource.k8s.io/v1"
EXTENDED = "deviceclass.resource.kubernetes.io/gpu.example.com"  # the class's implicit extended resource


def test_dra_calls_pass_the_api_servers_checks(cluster, api, core, namespace, installed):
    """DRA_CALLS made for real with the ServiceAccount's token, in the order upstream's
    DynamicResources makes them for a pod whose extended resource DRA provides (PreBind: create the
    claim, finalizer, allocation and reservation, the pod's extendedResourceClaimStatus; Unreserve:
    the reservation removed by strategic-merge patch; PostFilter: deallocation; then the finalizer
    removed and the claim deleted). The API server's own check of status.allocation and
    status.reservedFor (resourceclaims/binding) lets them through; a ServiceAccount granted all of
    it but resourceclaims/binding is refused the same allocation."""
    sa = the("ServiceAccount")["metadata"]
    call = caller(cluster, sa_token(core, sa["namespace"], sa["name"]))
    # list and watch, cluster-wide
    for r in DRA_READS:
        assert call("GET", f"{DRA}/{r}")["kind"].endswith("List"), r
        call("GET", f"{DRA}/{r}?watch=true&timeoutSeconds=1")
    # a pod asking for one device of the class as an extended resource (no scheduler takes it)
    p = pod("dra-rbac", namespace, scheduler="nobody")
    p["spec"]["containers"][0]["resources"] = {"requests": {EXTENDED: "1"}, "limits": {EXTENDED: "1"}}
    made = core.create_namespaced_pod(namespace, p)
    claims = f"{DRA}/namespaces/{namespace}/resourceclaims"
    request = "container-0-request-0"
    claim = call("POST", claims, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"generateName": "dra-rbac-extended-resources-",
                     "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "dra-rbac",
                                          "uid": made.metadata.uid, "controller": True}]},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {
            "deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 1}}]}}})
    name = claim["metadata"]["name"]
    claim = call("GET", f"{claims}/{name}")
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    claim = call("PUT", f"{claims}/{name}", claim)
    allocation = {"devices": {"results": [{"request": request, "driver": "gpu.example.com", "pool": "node-a",
                                           "device": "gpu-0"}]},
                  "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                      {"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]},
                  "allocationTimestamp": "2026-01-01T00:00:00Z"}
    claim["status"] = {"allocation": allocation,
                       "reservedFor": [{"resource": "pods", "name": "dra-rbac", "uid": made.metadata.uid}]}
    claim = call("PUT", f"{claims}/{name}/status", claim)
    assert claim["status"]["reservedFor"][0]["uid"] == made.metadata.uid
    call("PATCH", f"/api/v1/namespaces/{namespace}/pods/dra-rbac/status", {"status": {"extendedResourceClaimStatus": {
        "requestMappings": [{"containerName": "c", "resourceName": EXTENDED, "requestName": request}],
        "resourceClaimName": name}}}, content_type="application/strategic-merge-patch+json")
    got = core.read_namespaced_pod_status("dra-rbac", namespace).status.extended_resource_claim_status
    assert got.resource_claim_name == name
    claim = call("PATCH", f"{claims}/{name}/status", {
        "metadata": {"uid": claim["metadata"]["uid"]},
        "status": {"reservedFor": [{"$patch": "delete", "uid": made.metadata.uid}]}},
        content_type="application/strategic-merge-patch+json")
    assert not claim["status"].get("reservedFor") and claim["status"]["allocation"]
    claim["status"] = {}
    claim = call("PUT", f"{claims}/{name}/status", claim)
    assert not claim.get("status", {}).get("allocation")
    claim["metadata"]["finalizers"] = []
    call("PUT", f"{claims}/{name}", claim)
    call("DELETE", f"{claims}/{name}")
    with pytest.raises(Refused) as gone:
        call("GET", f"{claims}/{name}")
    assert gone.value.status == 404

    # the same ClusterRole without resourceclaims/binding: the allocation is refused
    rbac = client.RbacAuthorizationV1Api(api)
    rules = [r for r in copy.deepcopy(the("ClusterRole")["rules"]) if "resourceclaims/binding" not in r["resources"]]
    rules.append({"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["update"]})
    weaker = "dra-rbac-no-binding"
    core.create_namespaced_service_account(namespace, {"metadata": {"name": weaker}})
    rbac.create_cluster_role({"metadata": {"name": weaker}, "rules": rules})
    rbac.create_cluster_role_binding({"metadata": {"name": weaker}, "subjects": [
        {"kind": "ServiceAccount", "name": weaker, "namespace": namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": weaker}})
    try:
        authz = client.AuthorizationV1Api(api)
        wait_for(lambda: authz.create_subject_access_review(client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=f"system:serviceaccount:{namespace}:{weaker}",
                resource_attributes=client.V1ResourceAttributes(group="resource.k8s.io", resource="resourceclaims",
                                                                subresource="status", verb="update",
                                                                namespace=namespace)))).status.allowed,
                 10, what="the weaker ClusterRoleBinding in effect")
        call = caller(cluster, sa_token(core, namespace, weaker))
        claim = call("POST", claims, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                      "metadata": {"name": "dra-rbac-weaker"},
                                      "spec": {"devices": {"requests": [{"name": request, "exactly": {
                                          "deviceClassName": "gpu.example.com"}}]}}})
        claim["status"] = {"allocation": allocation}
        with pytest.raises(Refused) as refused:
            call("PUT", f"{claims}/dra-rbac-weaker/status", claim)
        assert refused.value.status == 422, refused.value
        message = json.loads(refused.value.body)["message"]
        assert 'requires resource="resourceclaims/binding", verb="update"' in message, message
    finally:
        rbac.delete_cluster_role_binding(weaker)
        rbac.delete_cluster_role(weaker)
        client.ResourceV1Api(api).delete_collection_namespaced_resource_claim(namespace)


# ---------------------------------------------------------------------------------------------
# the operator in this process, as the ServiceAccount


def readyz_body(port: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


class LogRecorder(logging.Handler):
    """The operator's log lines (attached to its loggers, so it sees them before the root's handlers)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        # kopf's records carry the operator's settings, and with them the executor of its sync
        # handlers: pytest keeps the records it captures until the end of the test, and would keep
        # that executor's idle thread alive after the operator stopped.
        record.__dict__.pop("settings", None)

    def text(self) -> str:
        return "\n".join(self.lines)


class InProcessOperator:
    """`policy-scheduler run` on its own thread and event loop, stopped through kopf's stop flag
    (kopf installs no signal handlers off the main thread)."""

    def __init__(self, kubeconfig: Path, health_port: int, webhook_port: int = 0) -> None:
        from policy_scheduler.cli import build_parser

        self.args = build_parser().parse_args([
            "run", "--kubeconfig", str(kubeconfig), "--scheduler-name", SCHEDULER,
            "--health-port", str(health_port), "--health-address", "127.0.0.1", "--metrics-port", "0",
            "--webhook-port", str(webhook_port), "--webhook-address", "127.0.0.1", "--webhook-host", "127.0.0.1"])
        self.engine = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_flag: asyncio.Event | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="policy-scheduler-rbac", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as e:  # reported by the test, not lost in the thread
            self.error = e

    async def _run(self) -> None:
        from policy_scheduler.cluster.credentials import load_credentials
        from policy_scheduler.serve import serve
        from policy_scheduler.plugins import default_registry

        a = self.args  # run exactly as cli.cmd_run runs it (leader election, probes, kopf)
        self.stop_flag = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.exit_code = await serve(a, load_credentials(a.kubeconfig, a.context), default_registry(),
                                     stop_flag=self.stop_flag, on_engine=lambda e: setattr(self, "engine", e))

    def start(self, log: LogRecorder) -> None:
        self.thread.start()
        try:
            wait_for(lambda: (self.engine is not None and self.engine.scheduling) or not self.thread.is_alive(), 60,
                     what="in-process operator to lead and schedule")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{log.text()[-3000:]}") from None
        assert self.thread.is_alive(), f"operator stopped: {self.error!r}\n{log.text()[-3000:]}"

    def stop(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.stop_flag.set)
        self.thread.join(30)


@pytest.fixture
def log_recorder():
    rec = LogRecorder()
    loggers = [logging.getLogger(n) for n in ("policy_scheduler", "kopf")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.INFO)
        lg.addHandler(rec)
    yield rec
    for lg, level in zip(loggers, levels):
        lg.removeHandler(rec)
        lg.setLevel(level)


@pytest.fixture
def sa_kubeconfig(cluster, core, installed, tmp_path) -> Path:
    """A kubeconfig holding a TokenRequest token of the manifests' ServiceAccount."""
    sa = the("ServiceAccount")["metadata"]
    req = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token = core.create_namespaced_service_account_token(sa["name"], sa["namespace"], req).status.token
    path = tmp_path / "sa.kubeconfig"
    ca = (cluster.state_dir / "pki" / "ca.crt").read_bytes()
    path.write_text(localcluster.kubeconfig_text(cluster.server, ca, {"token": token}, name=SCHEDULER))
    return path


@pytest.fixture
def rbac_nodes(core):
    names = [f"rbac-node-{i}" for i in range(3)]
    for n in names:
        core.create_node(node(n, cpu="4", memory="8Gi", labels={POOL_LABEL: "yes"}))
    yield names
    for n in names:
        core.delete_node(n)


def test_operator_needs_nothing_more(api, core, policies, namespace, sa_kubeconfig, rbac_nodes, log_recorder):
    # this instance's scheduler name is its Lease's name: added to the Role, as docs/operations.md says
    role = next(d for d in manifest_docs() if d["kind"] == "Role" and "leader-election" in d["metadata"]["name"])
    rules = copy.deepcopy(role["rules"])
    for r in rules:
        if "resourceNames" in r:
            r["resourceNames"].append(SCHEDULER)
    client.RbacAuthorizationV1Api(api).patch_namespaced_role(role["metadata"]["name"], LEASE_NAMESPACE,
                                                             {"rules": rules})
    # and its decision key's Secret is named after it too
    key_role = next(d for d in manifest_docs() if d["kind"] == "Role" and d["metadata"]["name"].endswith(":decision-key"))
    key_rules = copy.deepcopy(key_role["rules"])
    for r in key_rules:
        if "resourceNames" in r:
            r["resourceNames"].append(f"{SCHEDULER}-decision-key")
    client.RbacAuthorizationV1Api(api).patch_namespaced_role(key_role["metadata"]["name"],
                                                             key_role["metadata"]["namespace"], {"rules": key_rules})
    apply_policy(policies, POLICY, [{"name": "NodeUnschedulable"}, {"name": "NodeAffinity", "weight": 1},
                                    {"name": "NodeResourcesFit", "weight": 1}], schedulerName=SCHEDULER)
    # the webhook configurations of manifests/, calling the in-process operator by URL (no Service
    # network here): it creates the certificate Secret and writes their caBundle
    wport = localcluster.free_port()
    admission = client.AdmissionregistrationV1Api(api)
    configs = {d["kind"]: copy.deepcopy(d) for d in manifest_docs() if d["kind"] in WEBHOOK_CONFIG_KINDS}
    for cfg in configs.values():
        for w in cfg["webhooks"]:
            path = w["clientConfig"].pop("service")["path"]
            w["clientConfig"]["url"] = f"https://127.0.0.1:{wport}{path}"
    admission.create_validating_webhook_configuration(configs["ValidatingWebhookConfiguration"])
    admission.create_mutating_webhook_configuration(configs["MutatingWebhookConfiguration"])
    threads_before = set(threading.enumerate())
    op = InProcessOperator(sa_kubeconfig, localcluster.free_port(), webhook_port=wport)
    try:
        op.start(log_recorder)
        labels = {"policy-scheduler.io/policy": POLICY}
        placed = [f"rbac-{i}" for i in range(3)]
        for name in placed:
            core.create_namespaced_pod(namespace, pod(name, namespace, scheduler=SCHEDULER, labels=labels,
                                                      nodeSelector={POOL_LABEL: "yes"}))
        core.create_namespaced_pod(namespace, pod("rbac-nowhere", namespace, scheduler=SCHEDULER, labels=labels,
                                                  nodeSelector={POOL_LABEL: "no"}))

        # pods/binding create (with the decision annotation the binding carries)
        bound = wait_bound(core, namespace, placed)
        assert set(bound.values()) <= set(rbac_nodes)
        decision = json.loads(core.read_namespaced_pod(placed[0], namespace).metadata.annotations[
            "policy-scheduler.io/decision"])
        assert decision["policy"] == POLICY

        # events.k8s.io events create
        failed = wait_for(lambda: events_for(core, namespace, "rbac-nowhere", "FailedScheduling"), 30,
                          what="FailedScheduling event")
        assert failed[0].type == "Warning" and failed[0].reporting_component == SCHEDULER
        assert "didn't match Pod's node affinity/selector" in failed[0].message
        assert wait_for(lambda: events_for(core, namespace, placed[0], "Scheduled"), 30, what="Scheduled event")

        # pods/status patch
        def unschedulable_condition():
            conds = core.read_namespaced_pod_status("rbac-nowhere", namespace).status.conditions or []
            return next((c for c in conds if c.type == "PodScheduled"), None)

        cond = wait_for(unschedulable_condition, 30, what="PodScheduled condition")
        assert (cond.status, cond.reason) == ("False", "Unschedulable")

        # schedulingpolicies list/watch (the policy was loaded) and schedulingpolicies/status patch
        def counted():
            st = policy_status(policies, POLICY)
            return st.get("scheduled") == 3 and st.get("pending") == 1

        wait_for(counted, 30, what="policy status: 3 scheduled, 1 pending")
        assert ready_condition(policies, POLICY)["status"] == "True"

        # controllerrevisions list, create and patch in the operator's namespace: the valid
        # generation recorded as revision 1; an edit is revision 2; the first spec again reuses
        # its revision, renumbered 3
        apps = client.AppsV1Api(api)
        rev_ns = the("ServiceAccount")["metadata"]["namespace"]

        def revisions() -> dict[str, int]:
            return {r.metadata.name: r.revision for r in apps.list_namespaced_controller_revision(
                rev_ns, label_selector=f"policy-scheduler.io/policy={POLICY}").items}

        first = wait_for(revisions, 30, what="the policy's first revision")
        assert list(first.values()) == [1]
        wait_for(lambda: policy_status(policies, POLICY).get("revision") == 1, 30, what="status.revision 1")
        plugins = [{"name": "NodeUnschedulable"}, {"name": "NodeAffinity", "weight": 1},
                   {"name": "NodeResourcesFit", "weight": 1}]
        apply_policy(policies, POLICY, plugins[:2] + [{"name": "NodeResourcesFit", "weight": 2}],
                     schedulerName=SCHEDULER)
        wait_for(lambda: len(revisions()) == 2, 30, what="the edit's revision")
        apply_policy(policies, POLICY, plugins, schedulerName=SCHEDULER)
        wait_for(lambda: revisions().get(next(iter(first))) == 3, 30, what="the first revision renumbered")

        # the Deployment's probe paths answer from the operator's event loop
        with urllib.request.urlopen(f"http://127.0.0.1:{op.args.health_port}/healthz", timeout=5) as r:
            assert r.status == 200 and json.loads(r.read())["live"] is True
        with urllib.request.urlopen(f"http://127.0.0.1:{op.args.health_port}/readyz", timeout=5) as r:
            ready = json.loads(r.read())
        assert ready["synced"] is True and ready["leader"] is True and ready["lease"] == f"kube-system/{SCHEDULER}"
        assert op.engine.telemetry.registry.get_sample_value("leader_election_master_status",
                                                             {"name": SCHEDULER}) == 1

        # secrets create (the webhook certificates), webhook configurations get/update (caBundle)
        wait_for(lambda: readyz_body(op.args.health_port).get("webhooks", {}).get("serving"), 30,
                 what="the webhooks serving")
        sa_ns = the("ServiceAccount")["metadata"]["namespace"]
        ca = core.read_namespaced_secret(SECRET_NAME, sa_ns).data["ca.crt"]
        # secrets get and create of the decision key (created by this first replica)
        assert core.read_namespaced_secret(f"{SCHEDULER}-decision-key", sa_ns).data["key"]
        assert op.engine.telemetry.registry.get_sample_value("policy_scheduler_decision_key_shared") == 1
        assert admission.read_validating_webhook_configuration(WEBHOOK_CONFIG_NAME).webhooks[0].client_config.ca_bundle == ca
        assert admission.read_mutating_webhook_configuration(WEBHOOK_CONFIG_NAME).webhooks[0].client_config.ca_bundle == ca
        with pytest.raises(ApiException) as refused:  # the API server called the webhook over TLS
            apply_policy(policies, "rbac-bad", [{"name": "NodeResourcesFit", "weight": -5}], schedulerName=SCHEDULER)
        assert refused.value.status == 422 and "spec.plugins[0].weight" in refused.value.body
    finally:
        op.stop()
        policies.delete_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies", POLICY)
        client.AppsV1Api(api).delete_collection_namespaced_controller_revision(  # no garbage collector here
            the("ServiceAccount")["metadata"]["namespace"], label_selector=f"policy-scheduler.io/policy={POLICY}")
        admission.delete_validating_webhook_configuration(WEBHOOK_CONFIG_NAME)
        admission.delete_mutating_webhook_configuration(WEBHOOK_CONFIG_NAME)
        try:
            core.delete_namespaced_secret(SECRET_NAME, the("ServiceAccount")["metadata"]["namespace"])
        except ApiException:
            pass

    assert not op.thread.is_alive(), "operator thread did not stop"
    assert op.error is None, repr(op.error)
    assert op.exit_code == 0
    assert op.loop.is_closed()
    gc.collect()  # kopf's handler executor lets its worker threads go when it is collected
    try:
        wait_for(lambda: not (set(threading.enumerate()) - threads_before), 10, what="operator threads to end")
    except AssertionError:
        raise AssertionError(f"threads left behind: {set(threading.enumerate()) - threads_before}") from None

    m = op.engine.telemetry.registry
    for kind in ("event", "condition", "status"):
        assert m.get_sample_value("policy_scheduler_events_dropped_total", {"kind": kind}) in (None, 0.0), kind
    assert not [s for s in m.collect() if s.name == "policy_scheduler_binding_errors" and s.samples]
    denied = [ln for ln in log_recorder.lines if re.search(r"\b403\b|forbidden", ln, re.I)]
    assert not denied, "\n".join(denied)
    assert "cache synced" in log_recorder.text()
