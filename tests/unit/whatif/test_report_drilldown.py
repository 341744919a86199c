"""whatif/drilldown.py: simulate's per-pod drill-down (every Filter plugin's verdict and every
Score plugin's raw, normalized, weighted score on the best nodes and the nodes named), taken beside
the run without changing one decision."""

from __future__ import annotations

from pathlib import Path

import yaml

from policy_scheduler.explain import NOT_RUN, PASSED
from policy_scheduler.whatif.drilldown import DEFAULT_PODS, DrillSpec
from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.snapshot import API_VERSION, from_dict
from policy_scheduler.whatif.world import World

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())


def node(name, cpu="4"):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}}


def pod(name, cpu):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "app:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}


def snap(n=9):
    return from_dict({"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": "2025-01-01T12:00:00Z",
                      "nodes": [node(f"n{i}", "4" if i % 3 else "8") for i in range(n)], "policies": [DEFAULT],
                      "namespaces": {"default": {}}})


PODS = [pod(f"p{i}", "1500m") for i in range(12)] + [pod("huge", "64")]


def test_the_drill_down_changes_no_decision():
    plain = simulate(World(snap()), ["default"], PODS, seed=3).runs[0]
    every = DrillSpec(pods=[f"default/p{i}" for i in range(12)] + ["default/huge"], nodes=["n1"])
    drilled = simulate(World(snap()), ["default"], PODS, seed=3, drill=every).runs[0]
    assert [r.to_dict() for r in drilled.results] == [r.to_dict() for r in plain.results]
    assert len(drilled.drilldowns) == 13 and not plain.drilldowns


def test_a_placed_pod_shows_its_best_nodes_per_plugin():
    run = simulate(World(snap()), ["default"], PODS, drill=DrillSpec(pods=["default/p4"], nodes=["n8"])).runs[0]
    (dd,) = run.drilldowns
    result = next(r for r in run.results if r.pod == "default/p4")
    assert dd.pod == "default/p4" and dd.node == result.node and dd.feasible == 9
    table = dd.table()
    rows = table["rows"]
    assert rows[0]["node"] == result.node and rows[0]["chosen"] and rows[0]["total"] == result.top[0][1]
    assert [r["node"] for r in rows[1:5]] and len(rows) in (5, 6)  # the top five, and n8 unless among them
    assert "n8" in [r["node"] for r in rows]
    assert set(table["scores"]) == set(dd.weights) >= {"NodeResourcesFit", "TaintToleration"}
    for r in rows:
        cells = [r["cells"][p] for p in table["scores"]]
        assert all(c["normalized"] * c["weight"] == c["weighted"] for c in cells)
        assert sum(c["weighted"] for c in cells) == r["total"]
        assert all(c["raw"] is not None for c in cells)
        assert all(r["cells"][p]["filter"] in (PASSED, "skipped") for p in table["filters"])
    # the totals are the cycle's: the run's own top three
    assert [(r["node"], r["total"]) for r in rows[:3]] == [tuple(t) for t in result.top]


def test_an_unschedulable_pod_shows_which_filter_rejected_each_node():
    run = simulate(World(snap()), ["default"], PODS, drill=DrillSpec(pods=["default/huge"], nodes=["n7", "ghost"],
                                                                      top=3)).runs[0]
    (dd,) = run.drilldowns
    assert dd.node is None and dd.message.startswith("0/9 nodes are available")
    rows = dd.table()["rows"]
    assert [r["node"] for r in rows] == ["n0", "n1", "n2", "n7"]
    fit = dd.filters.index("NodeResourcesFit")
    for r in rows:
        assert r["verdict"].startswith("rejected by NodeResourcesFit") and r["total"] is None
        assert r["cells"]["NodeResourcesFit"]["filter"] == "Insufficient cpu"
        assert all(r["cells"][p]["filter"] == NOT_RUN for p in dd.filters[fit + 1:])
        assert all(r["cells"][p]["filter"] != NOT_RUN for p in dd.filters[:fit])
    assert rows[-1]["verdict"] == "rejected by NodeResourcesFit; asked for with --explain-node"
    assert "not in the snapshot: ghost" in dd.note


def test_without_pods_named_the_first_ones_get_a_drill_down():
    run = simulate(World(snap()), ["default"], PODS, drill=DrillSpec()).runs[0]
    assert [d.pod for d in run.drilldowns] == [f"default/p{i}" for i in range(DEFAULT_PODS)]
    doc = run.to_dict()["drillDown"][0]
    assert doc["pod"] == "default/p0" and doc["table"][0]["chosen"] and doc["weights"]["TaintToleration"] == 3
