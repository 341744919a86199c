"""The Helm chart (charts/policy-scheduler) and the kustomize base (manifests/): `helm lint` passes,
and what `helm template` renders for the default values and three other value sets, and what
`kubectl apply -k manifests/` sends, is accepted by the real API server (server-side dry run, so
with its schemas, strict field validation and admission). helm is built from source by
hack/ensure-helm.sh (`make helm`), the first time only.

The default values render the objects of manifests/ and run the operator with the same flags; the
drift between the chart's copies and their sources (CRDs, policies, ClusterRole rules) is checked
without helm in tests/unit/test_chart.py."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from conftest import install_crd, wait_served
from helpers import wait_for
from policy_scheduler.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "policy-scheduler"
MANIFESTS = ROOT / "manifests"
MANIFESTS_NS = "policy-scheduler-system"
RELEASE = "policy-scheduler"
LEASE_NS = "kube-system"
POLICY_NAMES = sorted(p.stem for p in (ROOT / "policies").glob("*.yaml"))
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
VAP_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
CLUSTER_KINDS = ("ClusterRole", "ClusterRoleBinding", "SchedulingPolicy", "CustomResourceDefinition", *WEBHOOK_KINDS,
                 *VAP_KINDS)

# Minimal CRDs of the kinds the chart renders from other projects, so that the dry run validates
# them too: subsets of the Prometheus Operator's and cert-manager's schemas (the fields the chart
# sets, with their upstream types), without x-kubernetes-preserve-unknown-fields, so a misspelt or
# misplaced field fails kubectl's strict field validation.
_STR = {"type": "string"}
_LABEL_SELECTOR = {"type": "object", "properties": {
    "matchLabels": {"type": "object", "additionalProperties": _STR},
    "matchExpressions": {"type": "array", "items": {"type": "object", "required": ["key", "operator"], "properties": {
        "key": _STR, "operator": _STR, "values": {"type": "array", "items": _STR}}}}}}
FOREIGN_CRDS = {
    ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"): {
        "type": "object", "required": ["selector"], "properties": {
            "jobLabel": _STR,
            "selector": _LABEL_SELECTOR,
            "namespaceSelector": {"type": "object", "properties": {
                "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": _STR}}},
            "endpoints": {"type": "array", "items": {"type": "object", "properties": {
                "port": _STR, "path": _STR, "scheme": {"type": "string", "enum": ["http", "https"]},
                "interval": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?"
                                                          "(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                "scrapeTimeout": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?"
                                                               "(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                "honorLabels": {"type": "boolean"}}}}}},
    ("cert-manager.io", "Issuer", "issuers"): {
        "type": "object", "properties": {
            "selfSigned": {"type": "object", "properties": {"crlDistributionPoints": {"type": "array", "items": _STR}}},
            "ca": {"type": "object", "required": ["secretName"], "properties": {"secretName": _STR}}}},
    ("cert-manager.io", "Certificate", "certificates"): {
        "type": "object", "required": ["issuerRef", "secretName"], "properties": {
            "secretName": _STR, "commonName": _STR, "duration": _STR, "renewBefore": _STR,
            "dnsNames": {"type": "array", "items": _STR},
            "privateKey": {"type": "object", "properties": {
                "algorithm": {"type": "string", "enum": ["RSA", "ECDSA", "Ed25519"]}, "size": {"type": "integer"},
                "rotationPolicy": {"type": "string", "enum": ["Never", "Always"]}}},
            "issuerRef": {"type": "object", "required": ["name"], "properties": {
                "name": _STR, "kind": _STR, "group": _STR}}}},
}


def foreign_crd(group: str, kind: str, plural: str, spec_schema: dict) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "properties": {"spec": spec_schema}}}}]}}


# ---------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def tools(cluster, tmp_path_factory):
    """helm (built if missing) and kubectl, with a private HOME (kubectl's discovery cache, helm's
    directories) and the test cluster's kubeconfig."""
    res = subprocess.run(["bash", str(ROOT / "hack" / "ensure-helm.sh")], stdout=subprocess.PIPE, text=True)
    assert res.returncode == 0, "hack/ensure-helm.sh failed (see its output above)"
    helm = res.stdout.strip().splitlines()[-1]
    kubectl = str(localcluster.bin_dir(build=False) / "kubectl")
    home = tmp_path_factory.mktemp("helm-home")
    env = {"KUBECONFIG": str(cluster.kubeconfig_path), "PATH": "/usr/bin:/bin", "HOME": str(home),
           "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data")}

    def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run([{"helm": helm, "kubectl": kubectl}[args[0]], *args[1:]], input=stdin, env=env,
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        if check:
            assert out.returncode == 0, f"{' '.join(args)} failed:\n{out.stderr}"
        return out

    return run


def _ensure_namespace(core: client.CoreV1Api, body: dict) -> bool:
    """Create the Namespace unless it is there (True if created here). One left Terminating by an
    earlier test (the test cluster runs no namespace controller) is finalized and made again."""
    name = body["metadata"]["name"]
    try:
        ns = core.read_namespace(name)
    except ApiException as e:
        if e.status != 404:
            raise
    else:
        if ns.metadata.deletion_timestamp is None:
            return False
        _finalize(core, name)
    core.create_namespace(body)
    return True


def _finalize(core: client.CoreV1Api, name: str) -> None:
    """Delete a namespace for good: nothing in the test cluster empties it and drops the
    `kubernetes` finalizer (the namespaces used here hold nothing: every apply was a dry run)."""
    try:
        core.delete_namespace(name)
        core.replace_namespace_finalize(name, {"metadata": {"name": name}, "spec": {"finalizers": []}})
    except ApiException as e:
        if e.status != 404:
            raise

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for(gone, 30, what=f"namespace {name} deleted")


@pytest.fixture(scope="module")
def kinds(api, crd, podgroup_crd):
    """Every kind the chart can render is served: our CRDs (conftest) and minimal CRDs of the
    ServiceMonitor, Issuer and Certificate kinds (removed again at the end if made here)."""
    ext = client.ApiextensionsV1Api(api)
    made, manifests = [], [crd, podgroup_crd]
    for (group, kind, plural), schema in FOREIGN_CRDS.items():
        body = foreign_crd(group, kind, plural, schema)
        try:
            ext.read_custom_resource_definition(body["metadata"]["name"])
        except ApiException as e:
            if e.status != 404:
                raise
            made.append(body["metadata"]["name"])
        path = Path(os.environ.get("TMPDIR", "/tmp")) / f"test-helm-{os.getpid()}-{plural}.yaml"
        path.write_text(yaml.safe_dump(body))
        try:
            manifests.append(install_crd(api, path))
        finally:
            path.unlink()
    wait_served(api, *manifests)
    yield
    for name in made:
        ext.delete_custom_resource_definition(name)


@pytest.fixture(scope="module")
def release_ns(core):
    """The release's namespace, with Pod Security "restricted" enforced and warned about, as
    manifests/ sets it for its own (the chart leaves the namespace to `--create-namespace`)."""
    name = f"t-helm-{os.getpid() % 1000}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"}
    made = _ensure_namespace(core, {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": name, "labels": labels}})
    yield name
    if made:
        _finalize(core, name)


def docs_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def the(docs: list[dict], kind: str) -> dict:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def manifest_docs() -> list[dict]:
    return [d for f in sorted(MANIFESTS.glob("*.yaml")) for d in docs_of(f.read_text())]


def operator_flags(args: list[str]) -> dict:
    """What `policy-scheduler run` makes of a container's args (its own parser)."""
    a = vars(build_parser().parse_args(args))
    a.pop("fn", None)
    return a


# ---------------------------------------------------------------------------------------------
# value sets: the defaults and three others

CUSTOM = {
    "image": {"repository": "registry.example.com/platform/policy-scheduler", "tag": "0.1.0-rc1",
              "digest": "sha256:" + "ab" * 32, "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "registry-credentials"}],
    # Helm merges maps with the defaults: null drops a default (no CPU limit)
    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": None, "memory": "4Gi"}},
    "nodeSelector": {"kubernetes.io/os": "linux", "node-role.kubernetes.io/control-plane": ""},
    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}}]}},
    "priorityClassName": "platform-critical",
    "podAnnotations": {"example.com/team": "platform"},
    "replicas": 3,
    "leaderElection": {"leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "4s"},
    "logLevel": "debug",
    "extraArgs": ["--prometheus-url=http://prometheus.monitoring:9090", "--log-format=json",
                  "--revision-history-limit=5"],
    "policies": POLICY_NAMES,
}
VALUE_SETS = {
    "defaults": {},
    "cert-manager-and-servicemonitor": {
        "webhooks": {"certificates": {"mode": "certManager"}},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}, "interval": "15s"}},
    },
    "one-replica-no-election-no-webhooks": {
        "replicas": 1, "leaderElection": {"enabled": False}, "webhooks": {"enabled": False}, "policies": [],
    },
    "custom": CUSTOM,
}
# another release name for the custom set: objects named "<release>-policy-scheduler"
RELEASES = {"custom": "batch"}


@pytest.fixture(scope="module")
def template(tools, tmp_path_factory):
    """`helm template` of a value set (the CRDs included) into a namespace: its text."""
    d = tmp_path_factory.mktemp("helm-values")
    done: dict[tuple[str, str], str] = {}

    def render(name: str, namespace: str) -> str:
        if (name, namespace) not in done:
            f = d / f"{name}.yaml"
            f.write_text(yaml.safe_dump(VALUE_SETS[name]))
            done[name, namespace] = tools("helm", "template", RELEASES.get(name, RELEASE), str(CHART),
                                          "--namespace", namespace, "--include-crds", "-f", str(f)).stdout
        return done[name, namespace]

    return render


# ---------------------------------------------------------------------------------------------


def test_helm_lint_passes_for_every_value_set(tools, tmp_path):
    for name, values in VALUE_SETS.items():
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump(values))
        out = tools("helm", "lint", "--strict", str(CHART), "-f", str(f), check=False)
        assert out.returncode == 0, f"{name}:\n{out.stdout}\n{out.stderr}"
        assert "0 chart(s) failed" in out.stdout, out.stdout


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_the_api_server_accepts_what_the_chart_renders(tools, kinds, release_ns, template, name):
    text = template(name, release_ns)
    docs = docs_of(text)
    out = tools("kubectl", "apply", "--dry-run=server", "-f", "-", stdin=text)
    lines = out.stdout.splitlines()
    assert len(lines) == len(docs) and all(ln.endswith("(server dry run)") for ln in lines), lines
    assert "would violate PodSecurity" not in out.stderr, out.stderr  # the namespace is "restricted"
    for d in docs:  # namespaced objects in the release's namespace, but for the Lease's Role
        ns = d["metadata"].get("namespace")
        if d["kind"] in CLUSTER_KINDS:
            assert ns is None, (d["kind"], ns)
        elif "leader-election" in d["metadata"]["name"]:
            assert ns == LEASE_NS, d["kind"]
        else:
            assert ns == release_ns, (d["kind"], d["metadata"]["name"])
    assert sorted(d["metadata"]["name"] for d in by_kind(docs, "CustomResourceDefinition")) == [
        "podgroups.scheduling.x-k8s.io", "schedulingpolicies.policy-scheduler.io"]


def test_the_default_values_render_the_objects_of_the_manifests(template):
    """Installed as the documented release `policy-scheduler` in policy-scheduler-system, the
    chart makes the objects of manifests/ (less the Namespace, which Helm leaves to
    --create-namespace), with the same RBAC rules, webhooks, Service ports and pod spec, and runs
    the operator with the same flags."""
    chart = [d for d in docs_of(template("defaults", MANIFESTS_NS))
             if d["kind"] not in ("CustomResourceDefinition", "SchedulingPolicy")]
    plain = [d for d in manifest_docs() if d["kind"] != "Namespace"]

    def key(d):
        return d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")

    assert sorted(map(key, chart)) == sorted(map(key, plain))
    plain_by_key = {key(d): d for d in plain}
    for d in chart:
        p = plain_by_key[key(d)]
        assert {k: v for k, v in p["metadata"].get("labels", {}).items()}.items() <= d["metadata"]["labels"].items()
        if d["kind"] in ("ClusterRole", "Role"):
            assert d["rules"] == p["rules"], key(d)
        elif d["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert (d["roleRef"], d["subjects"]) == (p["roleRef"], p["subjects"]), key(d)
        elif d["kind"] in WEBHOOK_KINDS:
            assert d["webhooks"] == p["webhooks"], key(d)
        elif d["kind"] == "Service":
            assert d["spec"]["ports"] == p["spec"]["ports"], key(d)
            assert d["metadata"].get("annotations") == p["metadata"].get("annotations"), key(d)
        elif d["kind"] == "PodDisruptionBudget":
            assert d["spec"]["minAvailable"] == p["spec"]["minAvailable"]
        elif d["kind"] in VAP_KINDS:  # the same CEL, the same names
            assert d["spec"] == p["spec"], key(d)
        elif d["kind"] == "NetworkPolicy":
            assert (d["spec"]["ingress"], d["spec"]["policyTypes"]) == (p["spec"]["ingress"], p["spec"]["policyTypes"])
    dep, plain_dep = the(chart, "Deployment"), the(plain, "Deployment")
    assert dep["spec"]["replicas"] == plain_dep["spec"]["replicas"]
    assert dep["spec"]["strategy"] == plain_dep["spec"]["strategy"]
    pod, plain_pod = dep["spec"]["template"]["spec"], plain_dep["spec"]["template"]["spec"]
    for field in ("serviceAccountName", "nodeSelector", "securityContext", "volumes"):
        assert pod[field] == plain_pod[field], field
    assert "priorityClassName" not in pod
    spread, plain_spread = pod["topologySpreadConstraints"], plain_pod["topologySpreadConstraints"]
    for s in (spread[0], plain_spread[0]):
        s.pop("labelSelector")  # the chart's selector adds the release (app.kubernetes.io/instance)
    assert spread == plain_spread
    (c,), (pc,) = pod["containers"], plain_pod["containers"]
    assert c["image"] == pc["image"]
    for field in ("imagePullPolicy", "env", "ports", "livenessProbe", "readinessProbe", "resources",
                  "securityContext", "volumeMounts"):
        assert c[field] == pc[field], field
    assert operator_flags(c["args"]) == operator_flags(pc["args"])
    # the Deployment's selector picks the Services', the PDB's and the spread's pods
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    for d in by_kind(chart, "Service"):
        assert d["spec"]["selector"] == selector
    assert the(chart, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == selector
    assert the(chart, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"] == selector
    # the example policy `default`, owned by this instance
    (policy,) = by_kind(docs_of(template("defaults", MANIFESTS_NS)), "SchedulingPolicy")
    assert policy["metadata"]["name"] == "default" and policy["spec"]["schedulerName"] == "policy-scheduler"


def test_cert_manager_and_servicemonitor(template):
    ns = "ops"
    docs = docs_of(template("cert-manager-and-servicemonitor", ns))
    cert, issuer = the(docs, "Certificate"), the(docs, "Issuer")
    svc = next(d for d in by_kind(docs, "Service") if d["metadata"]["name"].endswith("-webhook"))
    name = svc["metadata"]["name"]
    assert cert["spec"]["issuerRef"] == {"name": issuer["metadata"]["name"], "kind": "Issuer",
                                         "group": "cert-manager.io"}
    assert "selfSigned" in issuer["spec"]
    # the names the operator would put in its own certificate (serve.py)
    assert cert["spec"]["dnsNames"] == [f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}", name]
    for d in docs:
        if d["kind"] in WEBHOOK_KINDS:
            assert d["metadata"]["annotations"] == {
                "cert-manager.io/inject-ca-from": f"{ns}/{cert['metadata']['name']}"}
    (c,) = the(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    flags = operator_flags(c["args"])
    assert flags["webhook_secret"] == (ns, cert["spec"]["secretName"])
    assert flags["webhook_service"] == (ns, name)
    assert flags["webhook_manage_certs"] is False and not flags["webhook_configuration"]
    role = next(d for d in by_kind(docs, "Role") if d["metadata"]["name"].endswith(":webhook-certificates"))
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": [cert["spec"]["secretName"]], "verbs": ["get"]}]
    # the CA injector writes the caBundle: no webhook-configuration rule, so no policy narrowing it
    assert not [r for r in the(docs, "ClusterRole")["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert not [d for d in docs if d["kind"] in VAP_KINDS]
    # the ServiceMonitor selects the metrics Service (and no other) by labels, port metrics
    sm = the(docs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    selected = [d for d in by_kind(docs, "Service")
                if sm["spec"]["selector"]["matchLabels"].items() <= d["metadata"]["labels"].items()]
    assert [d["metadata"]["name"] for d in selected] == [f"{RELEASE}-metrics"]
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    assert [p["name"] for p in selected[0]["spec"]["ports"]] == ["metrics"]
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [ns]}
    # no ServiceMonitor, Issuer or Certificate unless asked for
    foreign = ("ServiceMonitor", "Issuer", "Certificate")
    assert not [d for d in docs_of(template("defaults", ns)) if d["kind"] in foreign]


def test_one_replica_without_election_or_webhooks(template):
    docs = docs_of(template("one-replica-no-election-no-webhooks", "ops"))
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["CustomResourceDefinition"] * 2 + ["ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                                               "Role", "RoleBinding", "Role", "RoleBinding", "Service",
                                                               "Deployment", "NetworkPolicy"]), kinds
    # no webhooks: no webhook-configuration rule, no policy, no webhook port in the NetworkPolicy
    assert not [r for r in the(docs, "ClusterRole")["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert [p["port"] for r in the(docs, "NetworkPolicy")["spec"]["ingress"] for p in r["ports"]] == [8081, 8080]
    dep = the(docs, "Deployment")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}  # never two instances without a Lease
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    flags = operator_flags(c["args"])
    assert flags["leader_elect"] is False and flags["webhook_port"] == 0
    assert [p["name"] for p in c["ports"]] == ["health", "metrics"]


def test_custom_values(template):
    docs = docs_of(template("custom", "ops"))
    dep = the(docs, "Deployment")
    assert dep["metadata"]["name"] == "batch-policy-scheduler"
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == f"{CUSTOM['image']['repository']}@{CUSTOM['image']['digest']}"
    assert c["imagePullPolicy"] == "Always"
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}
    for field in ("nodeSelector", "tolerations", "affinity", "priorityClassName", "imagePullSecrets"):
        assert pod[field] == CUSTOM[field], field
    assert dep["spec"]["template"]["metadata"]["annotations"] == CUSTOM["podAnnotations"]
    assert dep["spec"]["replicas"] == 3
    assert c["args"][-3:] == CUSTOM["extraArgs"]
    flags = operator_flags(c["args"])
    assert (flags["leader_elect_lease_duration"], flags["leader_elect_renew_deadline"],
            flags["leader_elect_retry_period"]) == (30.0, 20.0, 4.0)
    assert flags["log_level"] == "debug" and flags["log_format"] == "json"
    assert flags["prometheus_url"] == "http://prometheus.monitoring:9090" and flags["revision_history_limit"] == 5
    # the names follow the release: RBAC grants what the flags name
    assert flags["webhook_configuration"] == "batch-policy-scheduler"
    rules = the(docs, "ClusterRole")["rules"]
    assert [r["resourceNames"] for r in rules if "admissionregistration.k8s.io" in r["apiGroups"]] == [
        ["batch-policy-scheduler"]]
    assert [d["metadata"]["name"] for d in docs if d["kind"] in WEBHOOK_KINDS] == ["batch-policy-scheduler"] * 2
    # the policy narrowing that rule names the release's ServiceAccount and configurations
    vap = the(docs, "ValidatingAdmissionPolicy")
    assert vap["metadata"]["name"] == "batch-policy-scheduler-webhook-configurations"
    assert vap["spec"]["matchConditions"][0]["expression"] == (
        'request.userInfo.username == "system:serviceaccount:ops:batch-policy-scheduler"')
    assert 'request.name == "batch-policy-scheduler"' in vap["spec"]["validations"][0]["expression"]
    assert the(docs, "ValidatingAdmissionPolicyBinding")["spec"]["policyName"] == vap["metadata"]["name"]
    secret_names = [r["resourceNames"] for d in by_kind(docs, "Role") for r in d["rules"] if "resourceNames" in r
                    and r["resources"] == ["secrets"]]
    assert any(flags["webhook_secret"][1] in names for names in secret_names), secret_names
    # the decision key's Secret follows the scheduler name (cluster/decision_mac.py secret_name)
    assert [f"{flags['scheduler_name']}-decision-key"] in secret_names
    # every example policy, as in policies/ (labelled, and owned by this instance)
    policies = {d["metadata"]["name"]: d for d in by_kind(docs, "SchedulingPolicy")}
    assert sorted(policies) == POLICY_NAMES
    for name, p in policies.items():
        # the chart installs a file's first object, its policy (gpu-dra.yaml holds more)
        source = next(yaml.safe_load_all((ROOT / "policies" / f"{name}.yaml").read_text()))
        assert source["kind"] == "SchedulingPolicy", name
        assert p["spec"].pop("schedulerName") == "policy-scheduler"
        assert p["metadata"].pop("labels")["app.kubernetes.io/instance"] == "batch"
        assert p == source, name
    assert the(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


@pytest.mark.parametrize("values, message", [
    ({"replicas": 2, "leaderElection": {"enabled": False}}, "replicas > 1 needs leaderElection.enabled"),
    ({"webhooks": {"certificates": {"mode": "vault"}}}, "webhooks.certificates.mode must be"),
    ({"policies": ["default", "no-such-policy"]}, 'no example policy "no-such-policy"'),
])
def test_values_that_cannot_work_fail_the_render(tools, tmp_path, values, message):
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump(values))
    out = tools("helm", "template", RELEASE, str(CHART), "-f", str(f), check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_kustomize_base_applies(tools, kinds, core):
    """`kubectl apply -f crds/` then `kubectl apply -k manifests/`, as documented: the base holds
    every manifest (its namespace is created for real first: a dry run creates nothing, so the
    namespaced objects would find none)."""
    made = _ensure_namespace(core, yaml.safe_load((MANIFESTS / "00-namespace.yaml").read_text()))
    try:
        built = docs_of(tools("kubectl", "kustomize", str(MANIFESTS)).stdout)
        assert sorted((d["kind"], d["metadata"]["name"]) for d in built) == sorted(
            (d["kind"], d["metadata"]["name"]) for d in manifest_docs())
        tools("kubectl", "apply", "--dry-run=server", "-f", str(ROOT / "crds"))
        out = tools("kubectl", "apply", "--dry-run=server", "-k", str(MANIFESTS))
        lines = out.stdout.splitlines()
        assert len(lines) == len(built), lines
        assert "deployment.apps/policy-scheduler created (server dry run)" in lines
        assert "would violate PodSecurity" not in out.stderr, out.stderr
        # and `kubectl apply -f manifests/` still sees only the manifests (no Kustomization object)
        out = tools("kubectl", "apply", "--dry-run=client", "-f", str(MANIFESTS))
        assert len(out.stdout.splitlines()) == len(built), out.stdout
    finally:
        if made:
            _finalize(core, MANIFESTS_NS)


def test_helm_upgrade_keeps_policies_and_revisions(tools, kinds, api, core, release_ns):
    """A real `helm install`, then `helm upgrade` with other values and `helm uninstall`: the
    policies a user applied and their ControllerRevisions (the operator's history) are not the
    chart's, and outlive both; the chart's own objects follow the release."""
    from helpers import GROUP, PLURAL, VERSION, apply_policy

    rel = "ps-upgrade"
    objs = client.CustomObjectsApi(api)
    apps = client.AppsV1Api(api)
    mine = "helm-upgrade-mine"
    apply_policy(objs, mine, [{"name": "NodeResourcesFit"}])
    label = {"policy-scheduler.io/policy": mine}
    apps.create_namespaced_controller_revision(release_ns, {
        "apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": 1,
        "metadata": {"name": f"{mine}-abc", "labels": label}, "data": {"plugins": [{"name": "NodeResourcesFit"}]}})
    base = ["--set", "webhooks.enabled=false", "--set", "policies=null", "--set", "leaderElection.namespace=" + release_ns]
    try:
        tools("helm", "install", rel, str(CHART), "-n", release_ns, *base)
        dep = apps.read_namespaced_deployment(f"{rel}-policy-scheduler", release_ns)
        assert dep.spec.replicas == 2
        tools("helm", "upgrade", rel, str(CHART), "-n", release_ns, "--reuse-values", "--set", "replicas=3",
              "--set", "logLevel=debug")
        dep = apps.read_namespaced_deployment(f"{rel}-policy-scheduler", release_ns)
        assert dep.spec.replicas == 3 and "--log-level=debug" in " ".join(dep.spec.template.spec.containers[0].args)
        assert objs.get_cluster_custom_object(GROUP, VERSION, PLURAL, mine)["metadata"]["name"] == mine
        revs = apps.list_namespaced_controller_revision(release_ns, label_selector=f"policy-scheduler.io/policy={mine}")
        assert [r.metadata.name for r in revs.items] == [f"{mine}-abc"]
        tools("helm", "uninstall", rel, "-n", release_ns)
        with pytest.raises(ApiException) as e:
            apps.read_namespaced_deployment(f"{rel}-policy-scheduler", release_ns)
        assert e.value.status == 404
        assert objs.get_cluster_custom_object(GROUP, VERSION, PLURAL, mine)["metadata"]["name"] == mine
        assert len(apps.list_namespaced_controller_revision(
            release_ns, label_selector=f"policy-scheduler.io/policy={mine}").items) == 1
    finally:
        tools("helm", "uninstall", rel, "-n", release_ns, check=False)
        objs.delete_cluster_custom_object(GROUP, VERSION, PLURAL, mine)
        apps.delete_collection_namespaced_controller_revision(release_ns, label_selector=f"policy-scheduler.io/policy={mine}")


# ---------------------------------------------------------------------------------------------
# least privilege: the webhook-configuration rule and its policy, the NetworkPolicy, quoting


def render(tools, tmp_path, values: dict, release: str = RELEASE, namespace: str = "ops") -> list[dict]:
    f = tmp_path / "values.yaml"
    f.write_text(yaml.safe_dump(values))
    return docs_of(tools("helm", "template", release, str(CHART), "--namespace", namespace, "-f", str(f)).stdout)


@pytest.mark.parametrize("values, writes", [
    ({}, True),
    ({"webhooks": {"enabled": False}}, False),
    ({"webhooks": {"certificates": {"mode": "certManager"}}}, False),
    ({"webhooks": {"enabled": False, "certificates": {"mode": "certManager"}}}, False),
])
def test_the_webhook_configuration_rule_and_its_policy_only_when_the_operator_writes_the_ca_bundle(
        tools, tmp_path, values, writes):
    docs = render(tools, tmp_path, values)
    rules = [r for r in the(docs, "ClusterRole")["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]]
    vap = by_kind(docs, "ValidatingAdmissionPolicy")
    binding = by_kind(docs, "ValidatingAdmissionPolicyBinding")
    (c,) = the(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    flags = operator_flags(c["args"])
    if writes:
        assert rules == [{"apiGroups": ["admissionregistration.k8s.io"],
                          "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
                          "resourceNames": [RELEASE], "verbs": ["get", "update"]}]
        assert len(vap) == len(binding) == 1 and flags["webhook_configuration"] == RELEASE
    else:
        assert rules == [] and vap == [] and binding == []
        # and the operator writes no configuration: no webhooks, or none named
        assert flags["webhook_port"] == 0 or not flags["webhook_configuration"], flags
    # every other rule is the manifests' (only that one is left out)
    manifest_rules = yaml.safe_load((MANIFESTS / "02-clusterrole.yaml").read_text())["rules"]
    assert [r for r in the(docs, "ClusterRole")["rules"] if "admissionregistration.k8s.io" not in r["apiGroups"]] == [
        r for r in manifest_rules if "admissionregistration.k8s.io" not in r["apiGroups"]]
    # the policy can be turned off (clusters before 1.30), the rule stays
    if writes:
        off = render(tools, tmp_path, {**values, "webhooks": {"configurationPolicy": {"enabled": False}}})
        assert not [d for d in off if d["kind"] in VAP_KINDS]
        assert [r for r in the(off, "ClusterRole")["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]]


def _ports(docs: list[dict]) -> tuple[list[int], list[int]]:
    (c,) = the(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    np = the(docs, "NetworkPolicy")
    return (sorted(p["containerPort"] for p in c["ports"]),
            sorted(p["port"] for r in np["spec"]["ingress"] for p in r["ports"]))


@pytest.mark.parametrize("values", [{}, {"metrics": {"port": 9100}, "webhooks": {"port": 10443}},
                                    {"webhooks": {"enabled": False}}])
def test_the_network_policy_opens_exactly_the_containers_ports(tools, tmp_path, values):
    docs = render(tools, tmp_path, values)
    container, opened = _ports(docs)
    assert opened == container
    # the defaults: each port from anywhere (no `from`), nothing else
    for rule in the(docs, "NetworkPolicy")["spec"]["ingress"]:
        assert set(rule) == {"ports"}, rule
    # and the flags the operator listens on
    (c,) = the(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    flags = operator_flags(c["args"])
    assert sorted(x for x in (flags["health_port"], flags["metrics_port"], flags["webhook_port"]) if x) == container


def test_the_network_policy_takes_its_sources_from_the_values(tools, tmp_path):
    extra = {"from": [{"podSelector": {"matchLabels": {"app": "debug"}}}], "ports": [{"port": 8080}]}
    docs = render(tools, tmp_path, {"networkPolicy": {
        "webhook": {"apiServerCIDRs": ["10.0.0.0/24", "fd00::/64"]},
        "metrics": {"namespace": "monitoring", "podSelector": {"app.kubernetes.io/name": "prometheus"}},
        "probes": {"nodeCIDRs": ["192.168.0.0/16"]},
        "extraIngress": [extra]}})
    np = the(docs, "NetworkPolicy")
    assert np["metadata"]["namespace"] == "ops"
    assert np["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 9443}],
         "from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}, {"ipBlock": {"cidr": "fd00::/64"}}]},
        {"ports": [{"protocol": "TCP", "port": 8081}],
         "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                   "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]},
        {"ports": [{"protocol": "TCP", "port": 8080}], "from": [{"ipBlock": {"cidr": "192.168.0.0/16"}}]},
        extra]
    assert not by_kind(render(tools, tmp_path, {"networkPolicy": {"enabled": False}}), "NetworkPolicy")


def test_a_value_with_a_newline_cannot_inject_arguments(tools, tmp_path):
    """Every templated argument is quoted: a newline (or YAML list syntax) stays inside one
    argument, which the operator's parser then sees whole (or the API server refuses, where a
    value also names an object, as the Lease's namespace does its Role's)."""
    def args(values: dict) -> list[str]:
        (c,) = the(render(tools, tmp_path, {"policies": [], **values}), "Deployment")["spec"]["template"]["spec"][
            "containers"]
        return c["args"]

    # indented as the template's args: without quoting, these would be two more list items
    inject = "\n            - --kubeconfig=/tmp/x\n            - --webhook-configuration=victim"
    clean = args({})
    got = args({"logLevel": "info" + inject,
                "leaderElection": {"leaseDuration": "15s" + inject, "renewDeadline": "10s" + inject,
                                   "retryPeriod": "2s" + inject, "namespace": "kube-system" + inject},
                "extraArgs": ["--revision-history-limit=5" + inject]})
    assert len(got) == len(clean) + 1, got  # the one extraArg, nothing injected
    for arg in ("--log-level=info", "--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s",
                "--leader-elect-retry-period=2s", "--leader-elect-resource-namespace=kube-system",
                "--revision-history-limit=5"):
        assert arg + inject in got, arg
    # the scheduler name (without leader election: with it, it also names the Lease in a Role)
    evil = "x\n- --leader-elect=true" + inject
    got = args({"schedulerName": evil, "leaderElection": {"enabled": False}, "replicas": 1})
    assert f"--scheduler-name={evil}" in got and len(got) == len(args({"leaderElection": {"enabled": False},
                                                                       "replicas": 1}))
    assert got.count("--leader-elect=false") == 1 and "--leader-elect=true" not in got
    assert not [a for a in got if a.startswith(("--kubeconfig", "--webhook-configuration=victim"))]
    # the operator's parser refuses such a value whole instead of running with it
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--leader-elect-lease-duration=15s" + inject])


def test_the_charts_policy_confines_its_release_on_the_api_server(tools, kinds, api, core, tmp_path):
    """The policy as Helm renders it for a release of another name and namespace (its CEL with
    the names filled in), applied with the release's RBAC and webhook configurations: as the
    release's ServiceAccount, a caBundle change passes and a rules change is refused."""
    ns = f"t-helm-vap-{os.getpid() % 1000}"
    made_ns = _ensure_namespace(core, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    docs = render(tools, tmp_path, {"policies": []}, release="vap", namespace=ns)
    keep = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", *WEBHOOK_KINDS, *VAP_KINDS)
    text = yaml.safe_dump_all([d for d in docs if d["kind"] in keep])
    name = "vap-policy-scheduler"
    adm = client.AdmissionregistrationV1Api(api)
    try:
        tools("kubectl", "apply", "-f", "-", stdin=text)
        sa_client = client.ApiClient(api.configuration)  # the admin's, impersonating the ServiceAccount
        sa_client.set_default_header("Impersonate-User", f"system:serviceaccount:{ns}:{name}")
        as_sa = client.AdmissionregistrationV1Api(sa_client)

        def current() -> dict:
            return client.ApiClient().sanitize_for_serialization(adm.read_mutating_webhook_configuration(name))

        def refused_rules() -> bool:
            body = current()
            body["webhooks"][0]["rules"][0]["operations"] = ["CREATE", "UPDATE"]
            try:
                as_sa.replace_mutating_webhook_configuration(name, body, dry_run="All")
            except ApiException as e:
                assert e.status in (403, 422) and f"ValidatingAdmissionPolicy '{name}-webhook-configurations'" in e.body
                assert f"the {name} ServiceAccount may change only clientConfig.caBundle" in e.body, e.body
                return True
            return False

        wait_for(refused_rules, 30, interval=0.5, what="the chart's policy enforced")
        body = current()
        for w in body["webhooks"]:
            w["clientConfig"]["caBundle"] = base64.b64encode(b"ca").decode()
        as_sa.replace_mutating_webhook_configuration(name, body)
        assert current()["webhooks"][0]["clientConfig"]["caBundle"] == base64.b64encode(b"ca").decode()
    finally:
        tools("kubectl", "delete", "--ignore-not-found", "-f", "-", stdin=text, check=False)
        if made_ns:
            _finalize(core, ns)
