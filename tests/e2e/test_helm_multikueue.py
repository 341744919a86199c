"""The chart's MultiKueue values (templates/multikueue-rbac.yaml): what `helm template` renders with
``multikueue.enabled``, applied to the local control plane (RBAC on), and what the API server's
own authorizer then allows the release's ServiceAccount (SubjectAccessReviews): ``get`` on exactly
the named kubeconfig Secrets in Kueue's namespace, and nothing else of Secrets; the Kueue objects
the chooser reads and writes, and no write on MultiKueueClusters. Values that cannot work fail the
render. helm is built from source by hack/ensure-helm.sh, the first time only."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "policy-scheduler"
RELEASE, NS, KUEUE_NS = "policy-scheduler", "ops-mk", "kueue-mk"
SA = f"system:serviceaccount:{NS}:{RELEASE}"
VALUES = {"multikueue": {"enabled": True, "dispatcher": "policy-scheduler.io/cluster-chooser",
                         "namespace": KUEUE_NS, "kubeconfigSecrets": ["worker-a", "worker-b"]}}


@pytest.fixture(scope="module")
def helm(tmp_path_factory):
    res = subprocess.run(["bash", str(ROOT / "hack" / "ensure-helm.sh")], stdout=subprocess.PIPE, text=True)
    assert res.returncode == 0, "hack/ensure-helm.sh failed (see its output above)"
    binary = res.stdout.strip().splitlines()[-1]
    home = tmp_path_factory.mktemp("helm-home")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}

    def render(values: dict, check: bool = True) -> subprocess.CompletedProcess:
        f = home / "values.yaml"
        f.write_text(yaml.safe_dump(values))
        out = subprocess.run([binary, "template", RELEASE, str(CHART), "--namespace", NS, "-f", str(f)],
                             env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
        if check:
            assert out.returncode == 0, out.stderr
        return out

    return render


def docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def allowed(api, verb: str, resource: str, namespace: str | None = None, name: str = "",
            group: str = "", subresource: str = "") -> bool:
    review = client.AuthorizationV1Api(api).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": SA, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}"],
                 "resourceAttributes": {"verb": verb, "resource": resource, "group": group, "name": name,
                                        "subresource": subresource, **({"namespace": namespace} if namespace else {})}}})
    return bool(review.status.allowed)


def test_multikueue_rbac_grants_get_on_exactly_the_named_secrets(helm, api):
    assert not [d for d in docs(helm({}).stdout) if "multikueue" in d["metadata"]["name"]]  # off by default
    rendered = docs(helm(VALUES).stdout)
    mine = [d for d in rendered if d["metadata"]["name"].endswith((":multikueue", ":multikueue-kubeconfigs"))]
    assert sorted(d["kind"] for d in mine) == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    (role,) = [d for d in mine if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == KUEUE_NS
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["worker-a", "worker-b"],
                              "verbs": ["get"]}]
    args = next(d for d in rendered if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--multikueue-dispatcher=policy-scheduler.io/cluster-chooser" in args
    assert f"--multikueue-namespace={KUEUE_NS}" in args and "--multikueue-allow-insecure-tls" not in args
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    for ns in (NS, KUEUE_NS):
        try:
            core.create_namespace({"metadata": {"name": ns}})
        except client.ApiException as e:
            assert e.status == 409
    created = []
    try:
        for d in mine:
            kind = d["kind"]
            if kind == "ClusterRole":
                rbac.create_cluster_role(d)
            elif kind == "ClusterRoleBinding":
                rbac.create_cluster_role_binding(d)
            elif kind == "Role":
                rbac.create_namespaced_role(KUEUE_NS, d)
            else:
                rbac.create_namespaced_role_binding(KUEUE_NS, d)
            created.append(d)
        checks = {
            ("get", "secrets", KUEUE_NS, "worker-a", ""): True,
            ("get", "secrets", KUEUE_NS, "worker-b", ""): True,
            ("get", "secrets", KUEUE_NS, "kueue-webhook-server-cert", ""): False,  # Kueue's own key
            ("list", "secrets", KUEUE_NS, "", ""): False,
            ("watch", "secrets", KUEUE_NS, "", ""): False,
            ("get", "secrets", "kube-system", "worker-a", ""): False,
            ("get", "secrets", None, "", ""): False,  # never cluster-wide
            ("list", "workloads", None, "", "kueue.x-k8s.io"): True,
            ("patch", "workloads", "team", "w", "kueue.x-k8s.io"): True,
            ("list", "multikueueclusters", None, "", "kueue.x-k8s.io"): True,
            ("list", "admissionchecks", None, "", "kueue.x-k8s.io"): True,
            ("patch", "multikueueclusters", None, "w", "kueue.x-k8s.io"): False,  # Kueue owns them
            ("update", "multikueueclusters", None, "w", "kueue.x-k8s.io"): False,
            ("delete", "workloads", "team", "w", "kueue.x-k8s.io"): False,
        }
        got = {k: allowed(api, k[0], k[1], k[2], k[3], k[4]) for k in checks}
        assert allowed(api, "patch", "workloads", "team", "w", "kueue.x-k8s.io", "status")
        assert got == checks, {k: v for k, v in got.items() if checks[k] != v}
    finally:
        for d in reversed(created):
            kind, name = d["kind"], d["metadata"]["name"]
            {"ClusterRole": lambda: rbac.delete_cluster_role(name),
             "ClusterRoleBinding": lambda: rbac.delete_cluster_role_binding(name),
             "Role": lambda: rbac.delete_namespaced_role(name, KUEUE_NS),
             "RoleBinding": lambda: rbac.delete_namespaced_role_binding(name, KUEUE_NS)}[kind]()


@pytest.mark.parametrize("values, message", [
    ({"multikueue": {"enabled": True, "dispatcher": "d"}}, "multikueue.kubeconfigSecrets must list"),
    ({"multikueue": {"enabled": True, "dispatcher": "d", "kubeconfigSecrets": ["../x"]}}, '"../x" is not a Secret name'),
    ({"multikueue": {"enabled": True, "dispatcher": "d", "kubeconfigSecrets": ["Worker"]}}, '"Worker" is not a Secret'),
    ({"multikueue": {"enabled": True, "kubeconfigSecrets": ["w"]}}, "multikueue.dispatcher"),
])
def test_multikueue_values_that_cannot_work_fail_the_render(helm, values, message):
    out = helm(values, check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_insecure_tls_is_passed_only_when_asked(helm):
    values = {"multikueue": {**VALUES["multikueue"], "allowInsecureTLS": True}}
    dep = next(d for d in docs(helm(values).stdout) if d["kind"] == "Deployment")
    assert "--multikueue-allow-insecure-tls" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
