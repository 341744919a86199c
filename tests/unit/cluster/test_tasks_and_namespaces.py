"""L6 and L9 of the tenancy review: a background task that fails is logged and counted when it
ends (tasks.py's done-callback); a pod of a namespace the cache does not hold yet waits under a
policy with a namespaceSelector and is requeued by the namespace's ADD (the engine, with the
in-memory client)."""

from __future__ import annotations

import asyncio
import gc
import logging

from support.fakeclient import FakeClient
from prometheus_client import CollectorRegistry, generate_latest

from policy_scheduler.cache.policies import POLICY_SELECTION
from policy_scheduler.cluster import tasks
from policy_scheduler.serve import build_engine
from policy_scheduler.cluster.tasks import TaskFailures, Tasks


async def _boom() -> None:
    await asyncio.sleep(0)
    raise ValueError("revisions went wrong")


async def _fine() -> None:
    await asyncio.sleep(0)


async def _forever() -> None:
    await asyncio.sleep(3600)


def test_a_failed_background_task_is_logged_and_counted_when_it_ends(caplog):
    before = tasks.FAILED["_boom"]

    async def go():
        t = Tasks()
        failed, fine, forever = t.spawn(_boom()), t.spawn(_fine()), t.spawn(_forever())
        await asyncio.gather(failed, fine, return_exceptions=True)
        await asyncio.sleep(0)  # done-callbacks run on the next turn of the loop
        assert tasks.FAILED["_boom"] == before + 1  # at its end, not at garbage collection
        await t.cancel_all()  # cancellation is no failure
        assert not forever.cancelled() or tasks.FAILED["_forever"] == 0

    with caplog.at_level(logging.ERROR):
        asyncio.run(go())
        gc.collect()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]  # no "Task exception was never retrieved"
    assert errors[0].getMessage() == "background task _boom failed: ValueError: revisions went wrong"
    assert errors[0].exc_info and errors[0].exc_info[0] is ValueError  # with its traceback
    registry = CollectorRegistry()
    registry.register(TaskFailures())
    text = generate_latest(registry).decode()
    assert f'policy_scheduler_background_task_failures_total{{task="_boom"}} {float(before + 1)}' in text


POLICY = {"plugins": [{"name": "NodeResourcesFit"}],
          "namespaceSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}}


def test_a_pod_of_an_unknown_namespace_waits_and_is_requeued_by_the_namespaces_add():
    async def go():
        e = build_engine(FakeClient())
        e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1, "uid": "u"}, "spec": POLICY})
        alloc = {"cpu": "4", "memory": "8Gi", "pods": "110"}
        e.on_node("ADDED", {"metadata": {"name": "n1", "labels": {}},
                            "status": {"allocatable": alloc, "capacity": alloc}})
        e.on_pod("ADDED", {"metadata": {"name": "p", "namespace": "late", "uid": "u-p"},
                           "spec": {"schedulerName": "policy-scheduler", "containers": [{"name": "c"}]},
                           "status": {"phase": "Pending"}})
        qpi = e.queue.pop()
        assert qpi is not None and e.schedule(qpi) is None
        assert e.queue.pop() is None  # waiting: the namespace's labels are unknown
        assert POLICY_SELECTION in e.queue.get("late/p").unschedulable_plugins
        e.on_namespace("ADDED", {"metadata": {"name": "late", "labels": {"tier": "y"}}})
        qpi = e.queue.pop()
        assert qpi is not None and qpi.pod.key == "late/p"  # moved by the namespace's ADD
        decision = e.schedule(qpi)
        assert decision is not None and decision.node == "n1"

    asyncio.run(go())
