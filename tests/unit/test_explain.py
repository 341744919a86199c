"""explain.py: the decision record the operator binds with, a failed binding cycle's message, and
explain's printing of a record (to the stream it is given, nothing else)."""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path

import numpy as np

from policy_scheduler import explain
from policy_scheduler.explain import (DECISION_ANNOTATION, decision_annotation, failure_message, format_details,
                                      print_decision)
from policy_scheduler.framework.cycle.schedule import Decision, NodeScore
from policy_scheduler.framework.status import Code, Status


def decision(**kw) -> Decision:
    top = [NodeScore(f"n{i}", 300 - i, {"NodeResourcesFit": (90 - i, 90 - i), "TaintToleration": (100, 200)})
           for i in range(7)]
    top[0].details = {"LoadAware": {"cpu": {"value": np.float64(0.41666), "inFlight": 0.05, "state": "fresh",
                                            "age": 3.14159}}}
    failures = {f"reason {i}": i + 1 for i in range(10)}
    return Decision(**{"pod": "default/p", "node": "n0", "status": Status.success(), "num_all_nodes": 20,
                       "evaluated": 16, "feasible": 5, "top": top, "failures": failures, **kw})


def test_the_annotation_is_bounded_and_rounded():
    d = json.loads(decision_annotation("default", decision(), at="2025-01-01T12:00:00Z"))
    assert DECISION_ANNOTATION == "policy-scheduler.io/decision"
    assert {k: d[k] for k in ("policy", "node", "nodes", "evaluated", "feasible", "at")} == {
        "policy": "default", "node": "n0", "nodes": 20, "evaluated": 16, "feasible": 5, "at": "2025-01-01T12:00:00Z"}
    assert [t["node"] for t in d["top"]] == ["n0", "n1", "n2", "n3", "n4"]  # the top five
    assert d["top"][0]["scores"] == {"NodeResourcesFit": 90, "TaintToleration": 200}  # the weighted score
    assert d["top"][0]["details"] == {"LoadAware": {"cpu": {"value": 0.417, "inFlight": 0.05, "state": "fresh",
                                                            "age": 3.142}}}
    assert "details" not in d["top"][1]
    assert list(d["failures"].values()) == [10, 9, 8, 7, 6, 5, 4, 3]  # the eight largest, largest first
    assert "group" not in d


def test_the_annotation_keeps_the_nodes_a_decision_keeps():
    """explain --top shows at most what the annotation holds: every node the cycle kept scores of."""
    from policy_scheduler.framework.cycle.schedule import TOP_NODES

    assert explain.ANNOTATION_TOP_NODES == TOP_NODES == 5


def test_the_annotation_names_the_group_and_defaults_to_now():
    d = json.loads(decision_annotation("gang", decision(), group={"podGroup": "ns/g", "minCount": 3}))
    assert d["group"] == {"podGroup": "ns/g", "minCount": 3}
    assert d["at"].endswith("Z") and len(d["at"]) == len("2025-01-01T12:00:00Z")


def test_failure_message_names_the_plugin_once():
    assert failure_message(Status.unschedulable("node is full", plugin="Quota")) == \
        'plugin "Quota" rejected the pod: node is full'
    assert failure_message(Status.error('running Reserve plugin "Quota": boom', plugin="Quota")) == \
        'running Reserve plugin "Quota": boom'
    assert failure_message(Status(Code.ERROR, ())) == str(Code.ERROR)


def test_format_details():
    assert format_details({"cpu": {"value": 0.42, "inFlight": 0.05, "state": "fresh", "age": 3.1},
                           "memory": {"value": None, "state": "missing"}, "note": "x"}) == \
        "cpu 0.42 (+0.05 in flight, fresh, 3.1s old); memory (missing); note x"


def test_print_decision_writes_the_table_to_its_stream_only(capsys):
    d = json.loads(decision_annotation("default", decision(), group={"podGroup": "ns/g", "minCount": 3,
                                                                     "domain": "zone-a"}, at="T"))
    out = io.StringIO()
    print_decision(d, out)
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["  policy:    default", "  node:      n0   (decided T)",
                         "  nodes:     20 in cluster, 16 evaluated, 5 feasible"]
    assert lines[3] == "  top nodes (weighted score per plugin):"
    assert lines[4].split() == ["NODE", "TOTAL", "NodeResourcesFit", "TaintToleration"]
    assert lines[5].split() == ["n0", "300", "90", "200"]
    assert "    n0  LoadAware: cpu 0.417 (+0.05 in flight, fresh, 3.142s old)" in lines
    assert "  group:     PodGroup ns/g, minCount 3, domain zone-a" in lines
    assert lines[lines.index("  filtered out:") + 1] == "       10  reason 9"
    assert capsys.readouterr() == ("", "")


def test_a_bare_record_prints_only_its_head():
    out = io.StringIO()
    print_decision({"policy": "p", "node": "n", "at": "T"}, out)
    assert out.getvalue().count("\n") == 3


def test_explain_is_a_leaf():
    """It sits below the CLI, the operator and what-if: they import it, never the other way."""
    tree = ast.parse(Path(explain.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert (node.module or "").split(".")[0] in ("framework", "timefmt"), node.module
        elif isinstance(node, ast.ImportFrom) or isinstance(node, ast.Import):
            mods = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            assert not any(m.startswith("policy_scheduler") for m in mods)


def test_the_annotation_lists_the_devices_and_explain_prints_them():
    devs = [{"claim": "c", "request": "gpu", "device": f"gpu.example.com/n0/gpu-{i}"} for i in range(20)]
    devs[0]["adminAccess"] = True
    d = json.loads(decision_annotation("gpu-dra", decision(), devices=devs, at="T"))
    assert len(d["devices"]) == explain.ANNOTATION_DEVICES and d["deviceCount"] == 20
    out = io.StringIO()
    print_decision(d, out)
    lines = out.getvalue().splitlines()
    assert "  devices:   16 of 20 shown" in lines
    assert "    claim c  request gpu  gpu.example.com/n0/gpu-0  (admin access)" in lines
    assert "devices" not in json.loads(decision_annotation("p", decision()))
    # the claim the scheduler makes for extended resources backed by DRA: the resources it serves
    ext = [{"claim": "<extended-resources>", "request": "container-0-request-1", "device": "gpu.example.com/n0/gpu-0",
            "resources": ["example.com/gpu"]}]
    out = io.StringIO()
    print_decision(json.loads(decision_annotation("p", decision(), devices=ext, at="T")), out)
    assert ("    claim <extended-resources>  request container-0-request-1  gpu.example.com/n0/gpu-0  for "
            "example.com/gpu") in out.getvalue().splitlines()


def test_plugin_table_derives_normalized_and_weighted_from_the_weight():
    t = explain.plugin_table([{"node": "a", "total": 290, "scores": {"Fit": 90, "Taint": 200}, "chosen": True},
                              {"node": "b", "total": 100, "normalized": {"Fit": 40}, "raw": {"Fit": 7},
                               "filters": {"NodeName": explain.PASSED, "Ports": "port 80 in use"}}],
                             {"Fit": 1, "Taint": 2}, ["NodeName", "Ports"])
    assert t["filters"] == ["NodeName", "Ports"] and t["scores"] == ["Fit", "Taint"]
    a, b = t["rows"]
    assert a["chosen"] and not b["chosen"]
    assert a["cells"]["Taint"] == {"raw": None, "normalized": 100, "weight": 2, "weighted": 200}
    assert b["cells"]["Fit"] == {"raw": 7, "normalized": 40, "weight": 1, "weighted": 40}
    assert b["cells"]["Ports"] == {"filter": "port 80 in use"}
    assert b["cells"]["Taint"]["weighted"] is None  # unknown stays unknown
    out = io.StringIO()
    explain.write_plugin_table(t, out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["NODE", "TOTAL", "Fit", "Taint"]
    assert lines[1].split() == ["a", "*", "290", "90x1=90", "100x2=200"]
    assert lines[2].split() == ["b", "100", "raw", "7:", "40x1=40", "-"]
    assert lines[3] == "    b: (Filter plugins: 1 passed; Ports: port 80 in use)"


def test_plugin_table_of_a_hostile_record_keeps_what_it_can_read():
    t = explain.plugin_table([{"node": "a", "total": 1, "scores": ["x"], "normalized": "y", "filters": 3},
                              "not a node", {"total": 2}, {"node": 7, "scores": {"Fit": 4}}], {"Fit": "2"})
    assert [r["node"] for r in t["rows"]] == ["a", "7"] and t["scores"] == ["Fit"]
    assert t["rows"][1]["cells"]["Fit"] == {"raw": None, "normalized": None, "weight": None, "weighted": 4}
    out = io.StringIO()
    explain.write_plugin_table(t, out)
    assert out.getvalue().splitlines()[2].split() == ["7", "-", "4"]
