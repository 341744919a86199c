"""EventRecorder against the fake client: Events as upstream's recorder posts them, notes
truncated, failures reported once per message a minute, failed writes counted, conditions."""

from __future__ import annotations

import asyncio
import re

from support.fakeclient import FakeClient

from policy_scheduler.cluster.recorder import EVENT_NOTE_LIMIT, EventRecorder, truncate_note
from policy_scheduler.cluster.telemetry import Telemetry
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code

POD = parse_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"},
                 "spec": {"schedulerName": "policy-scheduler", "containers": [{"name": "c", "image": "i"}]}})


def recorder(client, telemetry=None, **kw):
    return EventRecorder(client, scheduler_name="policy-scheduler", telemetry=telemetry or Telemetry(),
                         instance="policy-scheduler-host", **kw)


async def until(cond, timeout=2.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def dropped(t: Telemetry, kind: str) -> float:
    return t.registry.get_sample_value("policy_scheduler_events_dropped_total", {"kind": kind}) or 0.0


def test_events_are_posted_with_upstream_names_and_fields():
    c = FakeClient()

    async def main():
        r = recorder(c)
        r.start()
        r.event(POD, "Normal", "Scheduled", "Binding", "Successfully assigned ns/p to n1")
        await until(lambda: c.calls_of("post"))
        await r.stop()

    asyncio.run(main())
    (call,) = c.calls_of("post")
    assert call.path == "/apis/events.k8s.io/v1/namespaces/ns/events"
    body = call.body
    assert re.fullmatch(r"p\.[0-9a-f]+", body["metadata"]["name"]) and body["metadata"]["namespace"] == "ns"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", body["eventTime"])
    assert {k: body[k] for k in ("apiVersion", "kind", "reportingController", "reportingInstance", "action",
                                 "reason", "type", "note", "regarding")} == {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "reportingController": "policy-scheduler",
        "reportingInstance": "policy-scheduler-host", "action": "Binding", "reason": "Scheduled",
        "type": "Normal", "note": "Successfully assigned ns/p to n1",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "ns", "uid": "uid-p"}}


def test_notes_are_truncated_to_1024_characters():
    assert truncate_note("x" * EVENT_NOTE_LIMIT) == "x" * EVENT_NOTE_LIMIT
    cut = truncate_note("x" * 5000)
    assert len(cut) == 1024 and cut.endswith(" ...")
    c = FakeClient()

    async def main():
        r = recorder(c)
        r.start()
        r.event(POD, "Warning", "FailedScheduling", "Scheduling", "y" * 3000)
        await until(lambda: c.calls_of("post"))
        await r.stop()

    asyncio.run(main())
    assert len(c.calls_of("post")[0].body["note"]) == 1024


def test_a_failure_posts_a_warning_and_patches_the_condition():
    c = FakeClient()

    async def main():
        r = recorder(c)
        r.start()
        r.failure(POD, "FailedScheduling", "0/3 nodes are available", Code.UNSCHEDULABLE)
        await until(lambda: c.calls_of("post") and c.calls_of("strategic_patch"))
        r.failure(POD, "FailedScheduling", "Binding rejected: boom", Code.ERROR)
        await until(lambda: len(c.calls_of("strategic_patch")) == 2)
        await r.stop()

    asyncio.run(main())
    ev = c.calls_of("post")[0].body
    assert (ev["type"], ev["reason"], ev["action"], ev["note"]) == (
        "Warning", "FailedScheduling", "Scheduling", "0/3 nodes are available")
    first, second = c.calls_of("strategic_patch")
    assert first.path == "/api/v1/namespaces/ns/pods/p/status"
    (cond,) = first.body["status"]["conditions"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", cond.pop("lastTransitionTime"))
    assert cond == {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available"}
    assert second.body["status"]["conditions"][0]["reason"] == "SchedulerError"


def test_the_same_failure_within_a_minute_is_reported_once():
    c = FakeClient()

    async def main():
        r = recorder(c)
        r.start()
        for _ in range(3):
            r.failure(POD, "FailedScheduling", "same", Code.UNSCHEDULABLE)
        await until(lambda: c.calls_of("post") and c.calls_of("strategic_patch"))
        await asyncio.sleep(0.05)
        assert len(c.calls_of("post")) == 1 and len(c.calls_of("strategic_patch")) == 1
        r.failure(POD, "FailedScheduling", "different", Code.UNSCHEDULABLE)  # a new message: reported
        await until(lambda: len(c.calls_of("post")) == 2)
        msg, at = r._last_failure[POD.key]
        r._last_failure[POD.key] = (msg, at - 61)  # a minute later: reported again
        r.failure(POD, "FailedScheduling", "different", Code.UNSCHEDULABLE)
        await until(lambda: len(c.calls_of("post")) == 3)
        r.forget(POD.key)  # bound or gone: the next failure is new
        r.failure(POD, "FailedScheduling", "different", Code.UNSCHEDULABLE)
        await until(lambda: len(c.calls_of("post")) == 4)
        await r.stop()

    asyncio.run(main())
    assert [x.body["note"] for x in c.calls_of("post")] == ["same", "different", "different", "different"]


def test_the_condition_is_written_when_it_changes_and_keeps_its_transition_time():
    """upstream updatePod: nothing is written for a condition equal to the pod's, and the
    transition time stays while the status stays False. The event is repeated after a minute;
    the condition is not. A write that failed is made again by the next failure."""
    c = FakeClient()
    c.fail("strategic_patch", 500, times=1)

    def conds():
        return [x["status"]["conditions"][0] for x in (p.body for p in c.calls_of("strategic_patch"))]

    async def main():
        r = recorder(c)
        r.start()
        r.failure(POD, "FailedScheduling", "a", Code.UNSCHEDULABLE)  # its write fails
        await until(lambda: len(c.calls_of("strategic_patch")) == 1)
        await asyncio.sleep(0.01)
        r.failure(POD, "FailedScheduling", "a", Code.UNSCHEDULABLE)  # written again (the first was not), no event
        await until(lambda: len(c.calls_of("strategic_patch")) == 2)
        assert len(c.calls_of("post")) == 1
        msg, at = r._last_failure[POD.key]
        r._last_failure[POD.key] = (msg, at - 61)
        r.failure(POD, "FailedScheduling", "a", Code.UNSCHEDULABLE)  # a minute later: the event only
        await until(lambda: len(c.calls_of("post")) == 2)
        r.failure(POD, "FailedScheduling", "b", Code.UNSCHEDULABLE)  # a new message
        await until(lambda: len(c.calls_of("strategic_patch")) == 3)
        r.failure(POD, "FailedScheduling", "c", Code.ERROR)  # another reason
        await until(lambda: len(c.calls_of("strategic_patch")) == 4)
        r.failure(POD, "FailedScheduling", "c", Code.UNSCHEDULABLE)  # the reason alone changes: the condition
        await until(lambda: len(c.calls_of("strategic_patch")) == 5)
        r.failure(POD, "FailedScheduling", "c", Code.ERROR)
        await until(lambda: len(c.calls_of("strategic_patch")) == 6)
        r.forget(POD.key)  # bound or gone: a later failure is a new transition
        r.failure(POD, "FailedScheduling", "c", Code.ERROR)
        await until(lambda: len(c.calls_of("strategic_patch")) == 7)
        await asyncio.sleep(0.05)
        await r.stop()

    asyncio.run(main())
    assert len(c.calls_of("post")) == 5 and len(c.calls_of("strategic_patch")) == 7
    got = [(x["reason"], x["message"], "lastTransitionTime" in x) for x in conds()]
    assert got == [("Unschedulable", "a", True), ("Unschedulable", "a", True), ("Unschedulable", "b", False),
                   ("SchedulerError", "c", False), ("Unschedulable", "c", False), ("SchedulerError", "c", False),
                   ("SchedulerError", "c", True)]


def test_failed_writes_are_counted_and_do_not_raise():
    c = FakeClient()
    t = Telemetry()
    c.fail("post", 500, times=1)
    c.fail("strategic_patch", 404, times=1)  # pod gone meanwhile
    c.fail("strategic_patch", 403, times=1)

    async def main():
        r = recorder(c, t)
        r.start()
        r.event(POD, "Normal", "Scheduled", "Binding", "first")
        r.event(POD, "Normal", "Scheduled", "Binding", "second")  # the worker goes on
        r.failure(POD, "FailedScheduling", "a", Code.UNSCHEDULABLE)
        await until(lambda: len(c.calls_of("strategic_patch")) == 1)
        r.failure(POD, "FailedScheduling", "b", Code.UNSCHEDULABLE)
        await until(lambda: len(c.calls_of("post")) == 4 and len(c.calls_of("strategic_patch")) == 2)
        await asyncio.sleep(0.05)
        await r.stop()

    asyncio.run(main())
    assert dropped(t, "event") == 1 and dropped(t, "condition") == 2


def test_a_full_event_queue_drops_and_counts():
    c = FakeClient()
    t = Telemetry()

    async def main():
        r = recorder(c, t, queue_size=1)  # no workers started: nothing drains the queue
        r.event(POD, "Normal", "Scheduled", "Binding", "kept")
        r.event(POD, "Normal", "Scheduled", "Binding", "dropped")
        await r.stop()

    asyncio.run(main())
    assert dropped(t, "event-queue-full") == 1 and not c.calls


def test_events_are_posted_as_they_come_by_as_many_workers_as_bindings_in_flight():
    """No event waits for a burst of bindings to end: with every worker's POST still in flight,
    as many events as workers are posted at once (a slow API server does not serialize them)."""
    c = FakeClient()
    release = asyncio.Event()

    async def main():
        async def slow_post(path, body, fence=None):
            c._record("post", path, body)
            await release.wait()

        c.post = slow_post
        r = recorder(c)
        assert r.workers == 64
        r.start()
        for i in range(80):
            r.event(POD, "Normal", "Scheduled", "Binding", f"event {i}")
        await until(lambda: len(c.calls_of("post")) == 64)
        await asyncio.sleep(0.05)
        assert len(c.calls_of("post")) == 64  # the other 16 wait for a free worker
        release.set()
        await until(lambda: len(c.calls_of("post")) == 80)
        await r.stop()

    asyncio.run(main())


def test_a_failure_and_its_nomination_go_out_as_one_status_patch():
    """upstream updatePod: the PodScheduled condition and nominatedNodeName of one failed attempt
    in one PATCH; a write made after that patch went out is a patch of its own."""
    c = FakeClient()

    async def main():
        r = recorder(c)
        r.failure(POD, "FailedScheduling", "0/3 nodes are available", Code.UNSCHEDULABLE)
        r.nominate(POD, "n2")
        await until(lambda: len(c.calls_of("strategic_patch")) == 1)
        r.nominate(POD, None)
        await until(lambda: len(c.calls_of("strategic_patch")) == 2)
        await r.stop()

    asyncio.run(main())
    first, second = (p.body["status"] for p in c.calls_of("strategic_patch"))
    assert first["nominatedNodeName"] == "n2"
    assert [(x["type"], x["status"], x["reason"]) for x in first["conditions"]] == [
        ("PodScheduled", "False", "Unschedulable")]
    assert second == {"nominatedNodeName": None}
