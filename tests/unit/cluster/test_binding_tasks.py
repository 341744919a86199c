"""cluster/binding_tasks.py against the in-memory client: the binding cycle in the operator
(assume, Reserve, Permit, then the binding task), how each API answer to the Binding is handled,
and that every failure unreserves, forgets the assumption and requeues."""

from __future__ import annotations

import asyncio

import pytest
from support.fakeclient import FakeClient

from policy_scheduler.cluster.binding_tasks import DECISION_ANNOTATION
from policy_scheduler.cluster.decision_mac import MAC_ANNOTATION
from policy_scheduler.cluster.engine import Engine
from policy_scheduler.serve import build_engine
from policy_scheduler.framework.interface import PermitPlugin, PostFilterPlugin, PreBindPlugin, ReservePlugin
from policy_scheduler.framework.queue.scheduling_queue import ACTIVE, BACKOFF, UNSCHEDULABLE
from policy_scheduler.framework.status import Code, Status
from policy_scheduler.plugins import registry_with

CALLS: list[tuple[str, str]] = []


class Recorder(ReservePlugin, PermitPlugin):
    """Test plugin: logs reserve/unreserve/permit; a pod labelled ``reserve=no`` is refused at
    Reserve, ``permit=no`` at Permit."""

    NAME = "Recorder"

    def reserve(self, state, pod, node):
        CALLS.append(("reserve", pod.name))
        return Status.unschedulable("no reservation") if pod.labels.get("reserve") == "no" else Status.success()

    def unreserve(self, state, pod, node):
        CALLS.append(("unreserve", pod.name))

    def permit(self, state, pod, node):
        CALLS.append(("permit", pod.name))
        if pod.labels.get("permit") == "no":
            return Status.unschedulable("not allowed"), 0.0
        return Status.success(), 0.0


PLUGINS = [Recorder]


def node(name):
    alloc = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name, **labels):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels},
            "spec": {"schedulerName": "policy-scheduler",
                     "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def make_engine() -> Engine:
    """An engine with one policy and one node (call inside a running loop: it writes status)."""
    CALLS.clear()
    registry, _ = registry_with([__name__])
    e = build_engine(FakeClient(), registry=registry)
    e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1},
                          "spec": {"plugins": [{"name": "NodeResourcesFit"}, {"name": "Recorder"}]}})
    e.on_node("ADDED", node("n1"))
    return e


async def schedule(e: Engine, body) -> None:
    e.on_pod("ADDED", body)
    qpi = e.queue.pop()
    e.schedule(qpi)
    for _ in range(5):  # let the binding task run
        await asyncio.sleep(0)


def run(body):
    """Run ``body(engine)`` (a coroutine function) on a fresh engine; returns the engine."""
    async def go():
        e = make_engine()
        await body(e)
        return e
    return asyncio.run(go())


def test_success_binds_with_the_decision_annotation_and_counts():
    engine = run(lambda e: schedule(e, pod("a")))
    binds = engine.client.calls_of("bind")
    assert len(binds) == 1 and binds[0].body["target"]["name"] == "n1"
    assert '"node":"n1"' in binds[0].body["metadata"]["annotations"][DECISION_ANNOTATION]
    assert engine.bound_by_us == 1 and not engine.queue.is_in_flight("ns/a")
    assert "ns/a" in engine.state.table.assumed  # until the watch confirms it
    assert CALLS == [("reserve", "a"), ("permit", "a")]


def test_the_binding_signs_its_decision_annotation_for_that_pod_and_node():
    """The API server copies a Binding's annotations onto the pod: the pod as the watch then shows
    it verifies under the key the rollout analysis holds; the same annotations on another pod do not."""
    engine = run(lambda e: schedule(e, pod("a")))
    meta = engine.client.calls_of("bind")[0].body["metadata"]
    assert engine.rollouts.key is engine.binding_tasks.key
    seen = {"metadata": {"name": "a", "namespace": "ns", "uid": "uid-a", "annotations": meta["annotations"]},
            "spec": {"nodeName": "n1"}}
    assert set(meta["annotations"]) == {DECISION_ANNOTATION, MAC_ANNOTATION}
    assert engine.rollouts.key.verify_pod(seen)
    assert not engine.rollouts.key.verify_pod({**seen, "metadata": {**seen["metadata"], "uid": "uid-b"}})


@pytest.mark.parametrize("status, message, requeued", [
    (409, 'Operation cannot be fulfilled on pods/binding "a": pod a has non-empty .spec.schedulingGates', BACKOFF),
    (500, "etcdserver: request timed out", BACKOFF),
    (403, "pods/binding is forbidden", BACKOFF),
    (409, 'Operation cannot be fulfilled on pods/binding "a": pod a is already assigned to node "n2"', None),
    (409, "Precondition failed: UID in precondition: uid-a, UID in object meta: other", None),
    (404, 'pods "a" not found', None),
])
def test_binding_answers(status, message, requeued):
    async def body(e):
        e.client.fail("bind", status, {"kind": "Status", "code": status, "message": message})
        await schedule(e, pod("a"))
    engine = run(body)
    assert "ns/a" not in engine.state.table.pod_node  # the assumption is forgotten either way
    assert CALLS[-1] == ("unreserve", "a")
    assert engine.queue.state_of("ns/a") == requeued  # None: dropped, the watch has the truth
    assert not engine.queue.is_in_flight("ns/a")
    if requeued:
        q = engine.queue.get("ns/a")
        assert q.consecutive_errors_count == 1 and q.unschedulable_plugins == set()


def test_reserve_and_permit_rejections_requeue_with_the_plugin_recorded():
    async def body(e):
        await schedule(e, pod("r", reserve="no"))
        await schedule(e, pod("p", permit="no"))
    engine = run(body)
    assert CALLS == [("reserve", "r"), ("unreserve", "r"), ("reserve", "p"), ("permit", "p"), ("unreserve", "p")]
    assert engine.client.calls_of("bind") == []
    for key in ("ns/r", "ns/p"):
        assert engine.queue.state_of(key) == UNSCHEDULABLE
        assert engine.queue.get(key).unschedulable_plugins == {"Recorder"}
        assert key not in engine.state.table.pod_node
    assert engine.state.table.requested[0, 0] == 0  # nothing left reserved on the node


def _waiting_huge_pod(e):
    """A 3.5-cpu pod rejected by NodeResourcesFit (1 of the node's 4 cpus is taken), its
    backoff over: only an event can move it now."""
    huge = pod("huge")
    huge["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3500m"
    e.on_pod("ADDED", huge)
    d = e.schedule(e.queue.pop())
    assert not d.scheduled and e.queue.state_of("ns/huge") == UNSCHEDULABLE
    e.queue.get("ns/huge").backoff_expiry = 0


def test_a_deleted_assigned_pod_wakes_a_pod_rejected_for_resources():
    async def body(e):
        await schedule(e, pod("small"))
        _waiting_huge_pod(e)
        bound = {**pod("small"), "spec": {**pod("small")["spec"], "nodeName": "n1"}}
        e.on_pod("MODIFIED", bound)  # our binding comes back: an assigned pod was added, no use to huge
        assert e.queue.state_of("ns/huge") == UNSCHEDULABLE
        e.on_pod("DELETED", bound)
        assert e.queue.state_of("ns/huge") == ACTIVE  # AssignedPodDelete, NodeResourcesFit's hint: Queue
    run(body)


def test_a_failed_binding_lets_other_waiting_pods_retry():
    async def body(e):
        await schedule(e, pod("small"))
        _waiting_huge_pod(e)
        e.client.fail("bind", 500, times=1)
        await schedule(e, pod("c"))
    engine = run(body)
    # c's binding failed: the room it held is free again, so the waiting pod is moved
    assert engine.queue.state_of("ns/huge") == ACTIVE
    assert engine.queue.state_of("ns/c") == BACKOFF


def test_gated_pod_is_never_decided():
    engine = run(lambda e: asyncio.sleep(0))
    engine.client.calls.clear()
    body = pod("g")
    body["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    engine.on_pod("ADDED", body)
    assert engine.queue.pop() is None and engine.queue.counts()["gated"] == 1
    assert engine.client.calls == []  # no condition patch, no event
    ungated = pod("g")
    ungated["metadata"]["resourceVersion"] = "2"
    engine.on_pod("MODIFIED", ungated)
    assert engine.queue.pop().pod.name == "g"


def test_failure_event_names_the_plugin():
    async def body(e):
        e.recorder.start()
        await schedule(e, pod("p", permit="no"))
        await asyncio.sleep(0.05)
        await e.recorder.stop()
    engine = run(body)
    notes = [c.body["note"] for c in engine.client.calls_of("post") if c.body.get("reason") == "FailedScheduling"]
    assert notes == ['plugin "Recorder" rejected the pod: not allowed']
    cond = [c.body for c in engine.client.calls_of("strategic_patch")][0]["status"]["conditions"][0]
    assert cond["reason"] == "Unschedulable"


def test_a_pod_without_a_usable_policy_moves_when_relabelled_to_one():
    async def body(engine):
        lost = pod("lost", **{"policy-scheduler.io/policy": "missing"})
        engine.on_pod("ADDED", lost)
        assert engine.schedule(engine.queue.pop()) is None
        assert engine.queue.state_of("ns/lost") == UNSCHEDULABLE
        engine.queue.get("ns/lost").backoff_expiry = 0
        found = pod("lost", **{"policy-scheduler.io/policy": "default"})
        found["metadata"]["resourceVersion"] = "2"
        engine.on_pod("MODIFIED", found)
        qpi = engine.queue.pop()
        assert qpi is not None and qpi.policy == "default"
    run(body)


def test_an_unparseable_pod_is_reported_once_and_waits_for_its_update():
    async def body(e):
        e.recorder.start()
        bad = pod("bad")
        bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
        e.on_pod("ADDED", bad)
        for i in range(3):  # the periodic flush retries it: the same message is not posted again
            if i:  # minutes later: past the recorder's one-minute repeat window and the pool's 5 minutes
                msg, at = e.recorder._last_failure["ns/bad"]
                e.recorder._last_failure["ns/bad"] = (msg, at - 400)
                e.queue.get("ns/bad").timestamp -= 301
                e.queue.flush_unschedulable_leftover()
                e.queue.get("ns/bad").backoff_expiry = 0
            d = e.schedule(e.queue.pop())
            assert not d.scheduled and e.queue.state_of("ns/bad") == UNSCHEDULABLE
        await asyncio.sleep(0.1)
        await e.recorder.stop()
    engine = run(body)
    notes = [c.body["note"] for c in engine.client.calls_of("post") if c.body.get("reason") == "FailedScheduling"]
    assert len(notes) == 1 and "invalid pod spec: spec.containers[0].resources.requests.cpu" in notes[0]


class Nominate(PostFilterPlugin):
    """Test PostFilter: nominates node n1 for any pod that does not fit."""

    NAME = "Nominate"

    def post_filter(self, state, pod, nodes, statuses):
        CALLS.append(("postFilter", f"{pod.name}:{statuses.get('n1').reasons}"))
        return Status.success(), "n1"


PLUGINS.append(Nominate)


def test_a_postfilter_nomination_is_written_counted_and_tried_first():
    async def body(e):
        e.on_policy("MODIFIED", {"metadata": {"name": "default", "generation": 2}, "spec": {"plugins": [
            {"name": "NodeResourcesFit"}, {"name": "Nominate"}]}})
        e.on_node("ADDED", node("n2"))
        filler = pod("filler")  # n2 is the busier node: without the nomination a pod would go to n1
        filler["spec"]["nodeName"] = "n2"
        filler["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
        e.on_pod("ADDED", filler)
        big = pod("big")
        big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"
        big["spec"]["priority"] = 100
        e.on_pod("ADDED", big)
        d = e.schedule(e.queue.pop())
        assert not d.scheduled and d.nominated_node == "n1"
        await asyncio.sleep(0)
        # status.nominatedNodeName is written, and the nomination holds room on n1 for pods of
        # lower or equal priority
        patches = [c for c in e.client.calls_of("strategic_patch") if "nominatedNodeName" in c.body["status"]]
        # with the PodScheduled condition of the same attempt, in one patch (upstream updatePod)
        assert patches and patches[0].body["status"]["nominatedNodeName"] == "n1"
        assert [x["type"] for x in patches[0].body["status"]["conditions"]] == ["PodScheduled"]
        assert e.nominator.node_of("ns/big") == "n1"
        low = pod("low")
        low["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
        e.on_pod("ADDED", low)
        d = e.schedule(e.queue.pop())
        assert d.node == "n2"  # n1 is held for "big": counted there, it leaves no room for 3 cpu
        e.nominator.remove("ns/big")
        e.state.forget("ns/low")
        e.queue.done("ns/low")
        e.state.table.remove_pod("ns/low")
        again = pod("again")
        again["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
        e.on_pod("ADDED", again)
        assert e.schedule(e.queue.pop()).node == "n1"  # without the nomination: the emptier n1
        # next time, "big" tries its nominated node first: it still does not fit, the scan runs
        assert e.queue.get("ns/big").pod.nominated_node_name == "n1"
    run(body)
    assert ("postFilter", "big:('Insufficient cpu',)") in CALLS


class Hold(PermitPlugin):
    """Test Permit: every pod waits (for a minute)."""

    NAME = "Hold"

    def permit(self, state, pod, node):
        return Status(Code.WAIT), 60.0


PLUGINS.append(Hold)


def test_deleting_a_pod_that_waits_at_permit_rejects_it_and_frees_its_room():
    async def body(e):
        e.on_policy("MODIFIED", {"metadata": {"name": "default", "generation": 2}, "spec": {"plugins": [
            {"name": "NodeResourcesFit"}, {"name": "Hold"}]}})
        await schedule(e, pod("w"))
        assert len(e.state.waiting) == 1 and "ns/w" in e.state.table.assumed
        e.on_pod("DELETED", pod("w"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(e.state.waiting) == 0 and "ns/w" not in e.state.table.pod_node
        assert e.client.calls_of("bind") == [] and not e.queue.is_in_flight("ns/w") and "ns/w" not in e.queue
    run(body)


# ------------------------------------------------------------------ the nomination for expectation
# (upstream bindingCycle, NominatedNodeNameForExpectation) and its clearing on failure

class Work(PreBindPlugin):
    """Test PreBind: has work (PreBindPreFlight Success) for pods labelled ``work=yes``, fails
    its PreBindPreFlight for ``work=broken``."""

    NAME = "Work"

    def pre_bind_pre_flight(self, state, pod, node):
        w = pod.labels.get("work")
        if w == "broken":
            return Status.error("no state")
        return Status.success() if w == "yes" else Status.skip()

    async def pre_bind(self, state, pod, node):
        CALLS.append(("preBind", pod.name))
        return Status.success()


PLUGINS.append(Work)


def _writes(e):
    """The pod writes in order: ("nnn", pod, value) for a nominatedNodeName patch, ("bind", pod, node)."""
    out = []
    for c in e.client.calls:
        if c.method == "strategic_patch" and "nominatedNodeName" in (c.body.get("status") or {}):
            out.append(("nnn", c.path.split("/")[-2], c.body["status"]["nominatedNodeName"]))
        elif c.method == "bind":
            out.append(("bind", c.body["metadata"]["name"], c.body["target"]["name"]))
    return out


def _policy(e, *plugins):
    e.on_policy("MODIFIED", {"metadata": {"name": "default", "generation": 2}, "spec": {"plugins": [
        {"name": "NodeResourcesFit"}, *({"name": p} for p in plugins)]}})


def test_nominated_before_binding_only_with_pre_bind_work():
    async def body(e):
        _policy(e, "Work")
        await schedule(e, pod("plain"))
        await schedule(e, pod("work", work="yes"))
    engine = run(body)
    assert _writes(engine) == [("bind", "plain", "n1"), ("nnn", "work", "n1"), ("bind", "work", "n1")]
    assert CALLS == [("preBind", "work")]  # plain's PreBindPreFlight said Skip: its PreBind is not run


def test_a_pod_waiting_at_permit_is_nominated_before_it_waits():
    async def body(e):
        _policy(e, "Hold")
        await schedule(e, pod("w"))
        assert _writes(e) == [("nnn", "w", "n1")] and len(e.state.waiting) == 1
        # our own write coming back while the pod is assumed: not a preemption nominee
        e.on_pod("MODIFIED", {**pod("w"), "status": {"phase": "Pending", "nominatedNodeName": "n1"}})
        assert e.nominator.node_of("ns/w") is None
        e.state.waiting.get("uid-w").allow("Hold")
        for _ in range(5):
            await asyncio.sleep(0)
    engine = run(body)
    assert _writes(engine) == [("nnn", "w", "n1"), ("bind", "w", "n1")]


def test_a_failed_binding_clears_the_nomination_with_its_condition():
    async def body(e):
        _policy(e, "Work")
        e.client.fail("bind", 500, times=2)  # both fail: only the nominated one gets a clearing write
        await schedule(e, pod("work", work="yes"))
        await schedule(e, pod("plain"))
        await asyncio.sleep(0)
    engine = run(body)
    assert _writes(engine) == [("nnn", "work", "n1"), ("bind", "work", "n1"), ("nnn", "work", None),
                               ("bind", "plain", "n1")]
    clear = [c.body["status"] for c in engine.client.calls_of("strategic_patch")
             if c.body["status"].get("nominatedNodeName", "") is None][0]
    assert [x["reason"] for x in clear["conditions"]] == ["SchedulerError"]  # one patch, as upstream's updatePod
    assert engine.queue.state_of("ns/work") == BACKOFF and engine.queue.state_of("ns/plain") == BACKOFF


def test_a_failed_pre_bind_pre_flight_fails_the_binding():
    async def body(e):
        e.recorder.start()
        _policy(e, "Work")
        await schedule(e, pod("b", work="broken"))
        await asyncio.sleep(0.05)
        await e.recorder.stop()
    engine = run(body)
    assert _writes(engine) == [] and engine.queue.state_of("ns/b") == BACKOFF
    assert "ns/b" not in engine.state.table.pod_node
    notes = [c.body["note"] for c in engine.client.calls_of("post") if c.body.get("reason") == "FailedScheduling"]
    assert notes == ['running PreBindPreFlight "Work": no state']
