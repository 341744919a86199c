"""The Helm chart (charts/policy-scheduler) and the kustomize base (manifests/Kustomization) stay in
step with the tree, without helm, the network or the Go build.

One source of truth: crds/, policies/ and manifests/02-clusterrole.yaml. The chart holds copies
of them (crds/, files/policies/, files/clusterrole-rules.yaml, made by hack/helm/sync-chart.sh;
Chart.yaml says why copies and not symlinks), and these tests fail as soon as a copy differs from
its source. Rendering the chart and the API server's verdict on it are tests/e2e/test_helm.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from policy_scheduler.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "policy-scheduler"
SYNC = "run `bash hack/helm/sync-chart.sh` to copy the sources into the chart"


def names(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("*.yaml"))


@pytest.mark.parametrize("source, copy", [("crds", "crds"), ("policies", "files/policies")])
def test_the_chart_copies_are_byte_identical_to_their_sources(source, copy):
    src, dst = ROOT / source, CHART / copy
    assert names(dst) == names(src), f"charts/policy-scheduler/{copy} and {source}/ hold other files: {SYNC}"
    for name in names(src):
        assert not (dst / name).is_symlink(), f"{copy}/{name} is a symlink (see Chart.yaml): {SYNC}"
        assert (dst / name).read_bytes() == (src / name).read_bytes(), f"{copy}/{name} differs from {source}/: {SYNC}"


def test_the_chart_clusterrole_rules_are_the_manifests_rules():
    """The ClusterRole of the chart and of manifests/ grant exactly the same, comments included
    (each rule's reason is written once, in manifests/02-clusterrole.yaml)."""
    manifest_text = (ROOT / "manifests" / "02-clusterrole.yaml").read_text()
    chart_text = (CHART / "files" / "clusterrole-rules.yaml").read_text()
    assert yaml.safe_load(chart_text) == yaml.safe_load(manifest_text)["rules"], SYNC
    block = manifest_text.split("\nrules:\n", 1)[1]
    assert chart_text.endswith(block), f"the rules' comments differ: {SYNC}"
    # ... and the template takes them from that file (only the webhook configurations' name,
    # which follows the release's name, is set there)
    template = (CHART / "templates" / "clusterrole.yaml").read_text()
    assert '.Files.Get "files/clusterrole-rules.yaml"' in template
    assert re.search(r"^rules:\n\s+\{\{- toYaml \$rules \| nindent 2 \}\}$", template, re.M), template


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "policy-scheduler"
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert chart["appVersion"] == version  # the image tag by default
    deployment = yaml.safe_load((ROOT / "manifests" / "04-deployment.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"policy-scheduler:{version}"


def test_default_values_match_the_manifests_and_the_operator():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    deployment = yaml.safe_load((ROOT / "manifests" / "04-deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert values["replicas"] == deployment["spec"]["replicas"]
    assert values["resources"] == container["resources"]
    assert values["nodeSelector"] == pod["nodeSelector"]
    assert f'{values["image"]["repository"]}:' in container["image"] and not values["image"]["tag"]
    assert values["image"]["pullPolicy"] == container["imagePullPolicy"]
    assert values["priorityClassName"] == "" and "priorityClassName" not in pod
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert (values["metrics"]["port"], values["webhooks"]["port"]) == (ports["metrics"], ports["webhook"])
    pdb = yaml.safe_load((ROOT / "manifests" / "07-poddisruptionbudget.yaml").read_text())
    assert values["podDisruptionBudget"]["minAvailable"] == pdb["spec"]["minAvailable"]
    # the leader election values are the operator's own defaults (kube-scheduler's)
    le = values["leaderElection"]
    defaults = build_parser().parse_args(["run"])
    given = build_parser().parse_args(["run", f"--leader-elect-lease-duration={le['leaseDuration']}",
                                       f"--leader-elect-renew-deadline={le['renewDeadline']}",
                                       f"--leader-elect-retry-period={le['retryPeriod']}",
                                       f"--leader-elect-resource-namespace={le['namespace']}"])
    for flag in ("lease_duration", "renew_deadline", "retry_period", "resource_namespace"):
        assert getattr(given, f"leader_elect_{flag}") == getattr(defaults, f"leader_elect_{flag}"), flag
    assert le["enabled"] is True and values["schedulerName"] == defaults.scheduler_name
    assert values["webhooks"]["enabled"] is True and values["webhooks"]["certificates"]["mode"] == "selfSigned"
    assert values["metrics"]["serviceMonitor"]["enabled"] is False
    # the example policies: `default` by default, and every one the values' comment lists exists
    assert values["policies"] == ["default"]
    listed = re.search(r"^# Example policies.*?:(.*?)\n# Pods", (CHART / "values.yaml").read_text(), re.M | re.S)
    assert sorted(re.findall(r"[a-z][a-z-]+", listed.group(1))) == [p[:-5] for p in names(ROOT / "policies")]


def test_the_kustomization_lists_every_manifest():
    """`kubectl apply -k manifests/` sends what `kubectl apply -f manifests/` does. The file is
    named Kustomization: kustomization.yaml would be read by `kubectl apply -f manifests/` too."""
    k = yaml.safe_load((ROOT / "manifests" / "Kustomization").read_text())
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and k["kind"] == "Kustomization"
    assert k["resources"] == names(ROOT / "manifests")
    assert not list((ROOT / "manifests").glob("kustomization.y*ml"))


def test_helm_is_pinned_in_one_version():
    env = dict(re.findall(r"^([A-Z_]+)=(\S+)$", (ROOT / "hack" / "versions.env").read_text(), re.M))
    gomod = (ROOT / "hack" / "helm" / "go.mod").read_text()
    assert re.search(rf"^\s*(require\s+)?helm\.sh/helm/v3 {re.escape(env['HELM_VERSION'])}$", gomod, re.M), (
        "hack/helm/go.mod must require helm.sh/helm/v3 at HELM_VERSION of hack/versions.env")


def _manifest(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((ROOT / "manifests" / name).read_text()) if d]


def test_the_network_policy_opens_exactly_the_deployments_ports():
    """manifests/11-networkpolicy.yaml lets in exactly the container's ports (no drift: a port
    moved in one file and not in the other fails here; the chart's is tests/e2e/test_helm.py's)."""
    (np,) = _manifest("11-networkpolicy.yaml")
    (dep,) = _manifest("04-deployment.yaml")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    container = sorted(p["containerPort"] for p in c["ports"])
    opened = sorted(p["port"] for rule in np["spec"]["ingress"] for p in rule["ports"])
    assert opened == container
    assert all(p.get("protocol", "TCP") == "TCP" for rule in np["spec"]["ingress"] for p in rule["ports"])
    # ... and they are the ports the operator is told to listen on
    args = c["args"]
    flags = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    assert sorted(int(flags[f]) for f in ("--health-port", "--metrics-port", "--webhook-port")) == container
    assert np["spec"]["podSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert np["spec"]["policyTypes"] == ["Ingress"] and np["metadata"]["namespace"] == dep["metadata"]["namespace"]


def test_the_webhook_configuration_policy_names_the_manifests_objects():
    """The ValidatingAdmissionPolicy matches the ServiceAccount of the ClusterRoleBinding, covers
    the resources of the ClusterRole's webhook-configuration rule, and allows only their names."""
    vap, binding = _manifest("10-webhook-configurations-policy.yaml")
    assert (vap["kind"], binding["kind"]) == ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    assert vap["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    (crb,) = _manifest("03-clusterrolebinding.yaml")
    (sa,) = crb["subjects"]
    (cond,) = vap["spec"]["matchConditions"]
    assert cond["expression"] == f'request.userInfo.username == "system:serviceaccount:{sa["namespace"]}:{sa["name"]}"'
    (rule,) = [r for r in yaml.safe_load((ROOT / "manifests" / "02-clusterrole.yaml").read_text())["rules"]
               if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert rule["verbs"] == ["get", "update"]
    (name,) = rule["resourceNames"]
    (match,) = vap["spec"]["matchConstraints"]["resourceRules"]
    assert sorted(match["resources"]) == sorted(rule["resources"])
    assert set(match["operations"]) >= {"CREATE", "UPDATE", "DELETE"}
    assert f'request.name == "{name}"' in vap["spec"]["validations"][0]["expression"]
    webhooks = [d for d in _manifest("08-webhooks.yaml") if d["kind"].endswith("WebhookConfiguration")]
    assert [d["metadata"]["name"] for d in webhooks] == [name, name]
    assert vap["spec"]["failurePolicy"] == "Fail"


def test_the_chart_renders_the_webhook_configuration_rule_only_when_the_operator_writes_the_ca_bundle():
    """Without helm: the template keeps the rule behind writesCABundle (webhooks on, selfSigned),
    and the policy behind the same condition (rendered by tests/e2e/test_helm.py)."""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert re.search(r'define "policy-scheduler.writesCABundle".*\n.*and \.Values\.webhooks\.enabled '
                     r'\(eq \.Values\.webhooks\.certificates\.mode "selfSigned"\)', helpers), helpers
    role = (CHART / "templates" / "clusterrole.yaml").read_text()
    assert '$writes := include "policy-scheduler.writesCABundle" .' in role
    vap = (CHART / "templates" / "webhook-configurations-policy.yaml").read_text()
    assert vap.startswith('{{- if and (include "policy-scheduler.writesCABundle" .) '
                          '.Values.webhooks.configurationPolicy.enabled }}')
