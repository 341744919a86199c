"""whatif/report.py: ``simulate --explain``'s table writes everything to the stream it is given."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from policy_scheduler.whatif.report import write_explain
from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.snapshot import API_VERSION, from_dict
from policy_scheduler.whatif.world import World

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())


def node(name):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def pod(name, cpu):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "app:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}


def test_write_explain_writes_the_decisions_to_out_and_nothing_to_stdout(capsys):
    snap = from_dict({"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": "2025-01-01T12:00:00Z",
                      "nodes": [node("a"), node("b")], "policies": [DEFAULT], "namespaces": {"default": {}}})
    sim = simulate(World(snap), ["default"], [pod("one", "500m"), pod("huge", "64")], keep_decisions=True)
    capsys.readouterr()
    out = io.StringIO()
    write_explain(sim.runs[0], out)
    assert capsys.readouterr() == ("", "")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("pod default/one under policy default: node ")
    # the decision record, as `policy-scheduler explain` prints it
    assert "  policy:    default" in lines
    assert any(x.startswith("  node:      ") and x.endswith("(decided simulated)") for x in lines)
    assert "  nodes:     2 in cluster, 2 evaluated, 2 feasible" in lines
    assert any(x.startswith("    NODE") and "TOTAL" in x and "NodeResourcesFit" in x for x in lines)
    # the pod no node fits: its FailedScheduling message and the filter histogram
    i = lines.index("pod default/huge under policy default: node (none)")
    assert lines[i + 1].startswith("  not scheduled: 0/2 nodes are available: 2 Insufficient cpu.")
    assert lines[i + 2:i + 4] == ["  filtered out:", "        2  Insufficient cpu"]
