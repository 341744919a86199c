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
