"""Leader election's contract with the engine (the election itself runs against the real API
server in tests/e2e/test_leader_election.py): timing constraints as kube-scheduler's, and a
replica that does not hold a valid lease binds nothing, posts no event, writes no status."""

from __future__ import annotations

import asyncio

from fakeclient import FakeClient
from standby import Standby

from policy_scheduler.cluster.engine import Engine
from policy_scheduler.cluster.leader import ElectionConfig




def test_timings_are_checked_as_kube_scheduler_checks_them():
    assert ElectionConfig("policy-scheduler").check() == []
    errs = ElectionConfig("x", lease_duration=10, renew_deadline=10, retry_period=2).check()
    assert errs == ["--leader-elect-lease-duration (10s) must be greater than --leader-elect-renew-deadline (10s)"]
    errs = ElectionConfig("x", lease_duration=15, renew_deadline=2, retry_period=2).check()
    assert len(errs) == 1 and errs[0].startswith("--leader-elect-renew-deadline (2s) must be greater than")
    assert ElectionConfig("", namespace="").check()[:2] == [
        "--leader-elect-resource-name must not be empty", "--leader-elect-resource-namespace must not be empty"]


NODE = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def pod(name, cpu="1"):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
            "spec": {"schedulerName": "policy-scheduler",
                     "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Pending"}}


def test_a_replica_without_a_valid_lease_writes_nothing():
    async def go():
        lead = Standby()
        e = Engine(FakeClient(), leadership=lead, status_interval=0.01)
        e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1},
                              "spec": {"plugins": [{"name": "NodeResourcesFit"}]}})
        e.on_node("ADDED", NODE)
        e.recorder.start()
        writer = asyncio.get_running_loop().create_task(e.status_writer.run())
        # a decision taken just before the lease lapsed: its binding is refused in-process
        e.on_pod("ADDED", pod("a"))
        e.schedule(e.queue.pop())
        e.on_pod("ADDED", pod("huge", cpu="64"))  # unschedulable: its event and condition are not written
        e.schedule(e.queue.pop())
        await asyncio.sleep(0.1)
        calls = [c.method for c in e.client.calls]
        assert calls == [], calls
        assert "ns/a" not in e.state.table.pod_node  # the assumption was forgotten and the pod requeued
        assert e.queue.get("ns/a") is not None
        assert e.policies["default"].dirty  # its status waits for a leader

        lead.holding = True  # leading again (a fresh replica would be): everything flows
        e.schedule(_pop(e, "ns/a"))
        await asyncio.sleep(0.1)
        assert [c.method for c in e.client.calls_of("bind")] == ["bind"]
        assert e.client.calls_of("merge_patch"), "the policy status is written by a leader"
        writer.cancel()
        await e.stop()
    asyncio.run(go())


def _pop(e: Engine, key: str):
    """The pod, out of the backoff its failed binding put it in."""
    assert e.queue.activate([key]) == 1
    got = e.queue.pop()
    assert got is not None and got.key == key, got
    return got


def test_probes_say_what_is_awaited():
    lead = Standby()
    e = Engine(FakeClient(), leadership=lead)
    live, ready, details = e.health()
    assert (live, ready) == (True, False) and details["synced"] is False
    e.synced = True
    live, ready, _ = e.health()
    assert (live, ready) == (True, True)  # a warm standby is ready
    lead.holding = True
    assert e.health()[1] is False  # the leader: ready once its loop runs
    e.scheduling = True
    assert e.health()[1] is True
    e.crashed = RuntimeError("boom")
    live, ready, details = e.health()
    assert (live, ready) == (False, False) and "boom" in details["error"]
