"""Leader election's contract with the engine (the election itself runs against the real API
server in tests/e2e/test_leader_election.py): timing constraints as kube-scheduler's, and a
replica that does not hold a valid lease binds nothing, posts no event, writes no status."""

from __future__ import annotations

import asyncio

from support.fakeclient import FakeClient
from support.standby import Standby

from policy_scheduler.cluster.engine import Engine
from policy_scheduler.serve import build_engine
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
        e = build_engine(FakeClient(), leadership=lead, status_interval=0.01)
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
    e = build_engine(FakeClient(), leadership=lead)
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


# ---------------------------------------------------------------------------------------------
# the election's own thread (its Lease reads and writes kept in memory by a FakeClient)

import threading  # noqa: E402
import time  # noqa: E402

from policy_scheduler.cluster.apicalls import ApiCalls  # noqa: E402
from policy_scheduler.cluster.credentials import Credentials  # noqa: E402
from policy_scheduler.cluster.kubeclient import KubeClient  # noqa: E402
from policy_scheduler.cluster.leader import LeaderElector, lease_client  # noqa: E402
from policy_scheduler.cluster.telemetry import Telemetry  # noqa: E402
from policy_scheduler.framework.model.podinfo import PodInfo  # noqa: E402

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
QUICK = ElectionConfig("t", lease_duration=1.5, renew_deadline=1.0, retry_period=0.1)


class ThreadedFake(FakeClient):
    """The FakeClient, noting which thread each request came from."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    async def request(self, method, path, body=None, **kw):
        self.threads.add(threading.current_thread().name)
        return await super().request(method, path, body, **kw)


def _elector(fake, **kw) -> LeaderElector:
    fake.serve(LEASES)
    return LeaderElector(None, QUICK, make_client=lambda: fake, **kw)


def test_the_lease_is_renewed_while_the_scheduling_loop_is_blocked():
    async def go():
        fake = ThreadedFake()
        el = _elector(fake)
        task = asyncio.get_running_loop().create_task(el.run())
        await asyncio.wait_for(el.wait_acquired(), 5)
        assert el.valid() and fake.threads == {"leader-election kube-system/t"}
        before = el.renewals
        time.sleep(2.5)  # the loop does nothing for 2.5 renew deadlines
        assert el.valid() and 0 < el.time_left() <= QUICK.renew_deadline
        assert el.renewals - before >= 8, el.renewals - before  # every retry period, meanwhile
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not el.valid() and el.time_left() == 0.0
        lease = fake.served[LEASES]["t"]["spec"]
        assert lease["holderIdentity"] == "" and lease["leaseDurationSeconds"] == 1  # released on a stop
    asyncio.run(go())


def test_failed_renewals_stop_every_write_and_end_the_election():
    async def go():
        fake = ThreadedFake()
        stopped: list[str] = []
        el = _elector(fake, on_stopped_leading=lambda: stopped.append(threading.current_thread().name))
        loop = asyncio.get_running_loop()
        task = loop.create_task(el.run())
        await asyncio.wait_for(el.wait_acquired(), 5)
        writes = FakeClient()
        api = ApiCalls(writes, el, Telemetry(), lambda: "v1")
        pod_ = PodInfo.from_dict(pod("a"))
        assert (await api.bind(pod_, "n1", {})).is_success
        fake.fail("put", 500)
        fake.fail("get", 500)
        t0 = time.monotonic()
        while el.valid():
            await asyncio.sleep(0.01)
        lapsed = time.monotonic() - t0
        assert lapsed <= QUICK.renew_deadline + 0.2, lapsed
        assert el.time_left() == 0.0
        assert not (await api.bind(pod_, "n1", {})).is_success
        assert await api.delete_pod(pod_) is None
        assert [c.method for c in writes.calls] == ["bind"]  # nothing after the lapse
        await asyncio.wait_for(task, 5)  # run() returns: leadership lost
        assert el.lost and stopped == [threading.main_thread().name]  # told on the operator's loop
    asyncio.run(go())


def test_the_election_has_its_own_client_and_token_bucket():
    main = KubeClient(Credentials(server="https://127.0.0.1:6443", ssl_context=True), qps=1, burst=1)
    own = lease_client(main)
    assert own is not main and own.bucket is not main.bucket and own.creds is main.creds
    assert own.user_agent == "policy-scheduler/leader-election" and own.metrics is main.metrics


def test_the_lease_is_valid_until_the_renew_deadline_on_the_monotonic_clock():
    now = [100.0]
    el = LeaderElector(None, QUICK, clock=lambda: now[0])
    el._holding, el.renewed_at = True, 100.0
    now[0] = 100.9
    assert el.valid() and abs(el.time_left() - 0.1) < 1e-9
    now[0] = 101.0
    assert not el.valid() and el.time_left() == 0.0
