"""What the engine and the binding tasks log, with which fields: a decision at DEBUG (built only
when DEBUG is on), a failure at INFO, a binding at DEBUG, a binding-cycle failure at WARNING."""

from __future__ import annotations

import asyncio
import logging

from support.fakeclient import FakeClient

import policy_scheduler.scheduler.schedule_one as driver_mod
from policy_scheduler.serve import build_engine
from policy_scheduler.framework.interface import PermitPlugin
from policy_scheduler.framework.status import Status
from policy_scheduler.logs import FIELDS
from policy_scheduler.plugins import registry_with


class Refuser(PermitPlugin):
    NAME = "Refuser"

    def permit(self, state, pod, node):
        if pod.labels.get("permit") == "no":
            return Status.unschedulable("not allowed"), 0.0
        return Status.success(), 0.0


PLUGINS = [Refuser]


def node(name, cpu="4"):
    alloc = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name, cpu="1", **labels):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels},
            "spec": {"schedulerName": "policy-scheduler",
                     "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Pending"}}


def run_pods(*bodies) -> None:
    async def go():
        registry, _ = registry_with([__name__])
        e = build_engine(FakeClient(), registry=registry)
        e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1},
                              "spec": {"plugins": [{"name": "NodeResourcesFit"}, {"name": "TaintToleration"},
                                                   {"name": "Refuser"}]}})
        for i in range(4):
            e.on_node("ADDED", node(f"n{i}", cpu=str(2 + i)))
        for b in bodies:
            e.on_pod("ADDED", b)
            e.schedule(e.queue.pop())
            for _ in range(5):  # let the binding task run
                await asyncio.sleep(0)
    asyncio.run(go())


def _fields(caplog, needle):
    return [getattr(r, FIELDS) for r in caplog.records if needle in r.getMessage()]


def test_debug_decision_and_binding_lines_carry_the_trace_fields(caplog):
    caplog.set_level(logging.DEBUG, "policy_scheduler")
    run_pods(pod("a"))
    (d,) = _fields(caplog, "decided under policy")
    assert {k: d[k] for k in ("pod", "policy", "node", "feasible", "evaluated", "nodes")} == {
        "pod": "ns/a", "policy": "default", "node": d["top"][0]["node"], "feasible": 4, "evaluated": 4, "nodes": 4}
    assert d["duration_ms"] >= 0 and len(d["top"]) == 3
    assert set(d["top"][0]["scores"]) == {"NodeResourcesFit", "TaintToleration"}
    assert d["top"][0]["total"] == sum(d["top"][0]["scores"].values())
    (b,) = _fields(caplog, "bound to")
    assert b == {"pod": "ns/a", "node": d["node"], "policy": "default"}


def test_failure_line_has_plugins_reasons_and_message(caplog):
    caplog.set_level(logging.INFO, "policy_scheduler")
    run_pods(pod("huge", cpu="64"))
    (f,) = _fields(caplog, "unschedulable under policy")
    assert f["pod"] == "ns/huge" and f["policy"] == "default" and f["plugins"] == ["NodeResourcesFit"]
    assert f["reasons"] == {"Insufficient cpu": 4}
    assert f["message"].startswith("0/4 nodes are available: 4 Insufficient cpu.")


def test_binding_cycle_failure_line_names_pod_node_plugin_and_code(caplog):
    caplog.set_level(logging.INFO, "policy_scheduler")
    run_pods(pod("p", permit="no"))
    (f,) = _fields(caplog, "not bound to")
    assert f == {"pod": "ns/p", "node": f["node"], "plugin": "Refuser", "code": "Unschedulable"}
    assert f["node"].startswith("n")


def test_at_info_no_decision_fields_are_built(caplog, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("decision fields built at INFO")

    monkeypatch.setattr(driver_mod, "decision_fields", boom)
    caplog.set_level(logging.INFO, "policy_scheduler")
    run_pods(pod("a"), pod("b"))
    assert not [r for r in caplog.records if r.levelno < logging.INFO]
