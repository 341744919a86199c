"""`simulate --explain-pod/--explain-node/--explain-top`: which pods the report's drill-down shows,
and the flags' mistakes refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from policy_scheduler import cli
from policy_scheduler.whatif.snapshot import API_VERSION, from_dict

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())


def node(name):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def pod(name, cpu="500m", ns="default"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "app:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}


@pytest.fixture
def files(tmp_path):
    s = from_dict({"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": "2025-01-01T12:00:00Z",
                   "nodes": [node(f"n{i}") for i in range(8)], "policies": [DEFAULT],
                   "namespaces": {"default": {}, "team": {}}})
    (tmp_path / "snap.json").write_text(s.dumps())
    pods = [pod(f"p{i}") for i in range(8)] + [pod("huge", "64"), pod("web", ns="team")]
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    return tmp_path


def simulate(files, capsys, *args):
    code = cli.main(["simulate", "--snapshot", str(files / "snap.json"), "--pods", str(files / "pods.yaml"), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_by_default_the_first_pods_get_a_drill_down(files, capsys):
    code, out, err = simulate(files, capsys, "--json")
    assert code == 0, err
    dd = json.loads(out)["policies"]["default"]["drillDown"]
    assert [d["pod"] for d in dd] == [f"default/p{i}" for i in range(5)]
    assert all(len(d["table"]) == 5 and d["table"][0]["chosen"] for d in dd)


def test_the_pods_and_nodes_named(files, capsys, tmp_path):
    report = tmp_path / "r.html"
    code, out, err = simulate(files, capsys, "--json", "--report", str(report), "--explain-pod", "team/web",
                              "--explain-pod", "huge", "--explain-node", "n7", "--explain-top", "2")
    assert code == 0, err
    web, huge = json.loads(out)["policies"]["default"]["drillDown"]
    assert web["pod"] == "team/web" and huge["pod"] == "default/huge"
    assert len(web["table"]) in (2, 3) and web["table"][-1]["node"] == "n7"
    assert [r["node"] for r in huge["table"]] == ["n0", "n1", "n7"]
    assert huge["table"][0]["plugins"]["NodeResourcesFit"]["filter"] == "Insufficient cpu"
    page = report.read_text()
    assert "team/web: node " in page and "default/huge: no node" in page
    assert page.count('<tr class="score-row"') == len(web["weights"])  # one row per Score plugin, for web only


@pytest.mark.parametrize("args, msg", [
    (["--explain-pod", "default/nope"], "--explain-pod default/nope: no such pod among the 10 pods simulated"),
    (["--explain-node", "ghost"], "--explain-node ghost: no such node in the snapshot"),
    (["--explain-top", "-1"], "--explain-top must be 0 or more"),
])
def test_mistakes_are_refused(files, capsys, args, msg):
    code, out, err = simulate(files, capsys, "--json", *args)
    assert code == 2 and out == "" and err == f"policy-scheduler simulate: {msg}\n"


def test_no_drill_down_with_explain_top_0_or_without_a_report(files, capsys):
    code, out, _ = simulate(files, capsys, "--json", "--explain-top", "0")
    assert code == 0 and "drillDown" not in json.loads(out)["policies"]["default"]
    code, out, _ = simulate(files, capsys)
    assert code == 0 and out.startswith("simulated 10 pods on 8 nodes")


def test_help_names_the_flags(capsys):
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--explain-pod NS/NAME" in text and "--explain-node NAME" in text and "--explain-top N" in text


def test_the_parser_says_the_drill_down_defaults():
    """commands/whatif.py names them without importing whatif/ (the parser stays light)."""
    from policy_scheduler.commands import whatif
    from policy_scheduler.whatif import drilldown

    assert (whatif.DEFAULT_DRILL_PODS, whatif.DRILL_TOP) == (drilldown.DEFAULT_PODS, drilldown.TOP)
