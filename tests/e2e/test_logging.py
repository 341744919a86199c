"""Structured logs of a real operator process: with --log-format json every line of its output is
a JSON object (kopf's lines and the shutdown included); decisions at DEBUG carry the trace keys,
a failure the rejecting plugins and a bounded reason histogram."""

from __future__ import annotations

import json
import re

import pytest
from kubernetes.client.rest import ApiException

from conftest import OperatorProcess
from helpers import GROUP, PLURAL, VERSION, apply_policy, pod, ready_condition, wait_bound, wait_for

POLICY = "logging-e2e"
SCHEDULER = "json-log-scheduler"
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def json_operator(cluster, crd):
    op = OperatorProcess(cluster, SCHEDULER, extra=["--log-format", "json", "--log-level", "debug"]).start()
    yield op
    op.stop()


def lines(op: OperatorProcess) -> list[dict]:
    out = []
    for i, line in enumerate(op.log().splitlines()):
        try:
            d = json.loads(line)
        except ValueError:
            raise AssertionError(f"line {i + 1} of {op.log_path} is not JSON: {line!r}") from None
        assert isinstance(d, dict), f"line {i + 1} is not a JSON object: {line!r}"
        out.append(d)
    return out


def test_json_logs_with_decision_and_failure_fields(core, namespace, nodes, policies, json_operator):
    op = json_operator
    for i in range(3):
        nodes(f"log-{i}", cpu="4", labels={"e2e": "logging"})
    nodes("log-other", cpu="4")  # not selected by the pods: a second reason in the failure
    apply_policy(policies, POLICY, [{"name": "NodeAffinity"}, {"name": "TaintToleration"},
                                    {"name": "NodeResourcesFit", "weight": 2},
                                    {"name": "NodeResourcesBalancedAllocation"}], schedulerName=SCHEDULER)
    try:
        wait_for(lambda: (ready_condition(policies, POLICY) or {}).get("status") == "True", 30,
                 what=f"policy {POLICY} Ready")
        labels = {"policy-scheduler.io/policy": POLICY}
        names = [f"fit-{i}" for i in range(4)]
        for n in names:
            core.create_namespaced_pod(namespace, pod(n, namespace, cpu="500m", scheduler=SCHEDULER, labels=labels,
                                                      nodeSelector={"e2e": "logging"}))
        core.create_namespaced_pod(namespace, pod("too-big", namespace, cpu="64", scheduler=SCHEDULER, labels=labels,
                                                  nodeSelector={"e2e": "logging"}))
        bound = wait_bound(core, namespace, names, 60)
        wait_for(lambda: f"pod {namespace}/too-big unschedulable" in op.log(), 30, what="the failure line")
        wait_for(lambda: sum(f"{namespace}/fit-" in x.get("pod", "") and "bound to" in x["msg"]
                             for x in lines(op)) == len(names), 30, what="binding lines")
    finally:
        try:
            policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, POLICY)
        except ApiException:
            pass
    op.stop()  # the shutdown lines are checked too

    log = lines(op)
    assert len(log) > 20
    for d in log:  # every line: a JSON object with the four keys
        assert TS.match(d["ts"]) and d["level"] in ("debug", "info", "warning", "error", "critical"), d
        assert isinstance(d["logger"], str) and isinstance(d["msg"], str), d
    assert any(d["logger"].startswith("kopf") for d in log)  # kopf's own loggers go through the format
    assert any("cache synced" in d["msg"] for d in log)

    decisions = [d for d in log if d["level"] == "debug" and "decided under policy" in d["msg"]
                 and d.get("pod", "").startswith(f"{namespace}/fit-")]
    assert {d["pod"] for d in decisions} == {f"{namespace}/{n}" for n in names}, decisions
    for d in decisions:
        assert d["policy"] == POLICY and d["node"] == bound[d["pod"].split("/")[1]]
        assert d["nodes"] >= 4 and d["evaluated"] >= 4 and d["feasible"] == 3 and d["duration_ms"] > 0
        assert 1 <= len(d["top"]) <= 3 and d["top"][0]["node"] == d["node"]
        for t in d["top"]:
            assert t["node"].startswith("log-")
            # NodeAffinity's Score is skipped: the pods have no preferred affinity
            assert set(t["scores"]) == {"TaintToleration", "NodeResourcesFit", "NodeResourcesBalancedAllocation"}
            assert t["total"] == sum(t["scores"].values())
    print("\n  decision line:", json.dumps(decisions[-1]))

    binds = [d for d in log if "bound to" in d["msg"] and d.get("pod", "").startswith(f"{namespace}/fit-")]
    assert {d["pod"]: d["node"] for d in binds} == {f"{namespace}/{n}": bound[n] for n in names}
    assert all(d["policy"] == POLICY and d["level"] == "debug" for d in binds)

    failures = [d for d in log if d.get("pod") == f"{namespace}/too-big" and "unschedulable" in d["msg"]]
    assert failures, "no failure line"
    f = failures[0]
    assert f["level"] == "info" and f["policy"] == POLICY
    assert f["plugins"] == ["NodeAffinity", "NodeResourcesFit"]
    assert f["reasons"]["Insufficient cpu"] == 3
    assert f["reasons"]["node(s) didn't match Pod's node affinity/selector"] >= 1
    assert len(f["reasons"]) <= 10 and all(len(r) <= 200 for r in f["reasons"])
    assert f["message"].startswith("0/") and "3 Insufficient cpu" in f["message"] and len(f["message"]) <= 1024
    print("  failure line:", json.dumps(f))
    from collections import Counter
    print("  lines per logger and level:", dict(Counter((d["logger"], d["level"]) for d in log)))
    for d in log:
        if d["level"] in ("warning", "error", "critical") or d["logger"] in ("asyncio", "kopf.objects"):
            print("  ", json.dumps(d)[:600])
