"""cluster/suggestions.py with the real engine parts (build_engine on the in-memory client, the
default policy of policies/default.yaml): a pod that found no node is filed, not searched, at its
failure; ``step`` searches it and tells the SchedulingHint event and the signed condition; the
queue is deduplicated, capped and skips pods no longer waiting; the event and the condition are
rate-limited per pod; the condition's own write neither requeues the pod nor starts a search."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from support.fakeclient import FakeClient
from support.whatif import DEFAULT

from policy_scheduler.cluster.decision_mac import DecisionKey
from policy_scheduler.cluster.suggestions import (HINT_EVENT, SUGGESTIONS_CONDITION, SuggestionConfig,
                                                  document_text, split_message)
from policy_scheduler.framework.queue.scheduling_queue import BACKOFF, UNSCHEDULABLE
from policy_scheduler.remedies import Remedies, Suggestion
from policy_scheduler.serve import build_engine


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def node(name, cpu="2"):
    alloc = {"cpu": cpu, "memory": "8Gi", "pods": "110"}
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name, cpu="4", uid=None, annotations=None):
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}", "labels": {},
                         "annotations": dict(annotations or {}), "resourceVersion": "1"},
            "spec": {"schedulerName": "policy-scheduler",
                     "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Pending"}}


def make(**cfg):
    clock = cfg.pop("clock", None) or Clock()
    e = build_engine(FakeClient(), suggestions=SuggestionConfig(per_pod=1.0, per_second=1.0, burst=10.0, **cfg))
    e.suggestions.clock = clock
    e.suggestions.allowance.clock = clock
    e.on_namespace("ADDED", {"metadata": {"name": "ns", "labels": {}}})
    e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": DEFAULT["spec"]})
    for n in ("n1", "n2", "n3"):
        e.on_node("ADDED", node(n))
    return e, clock


def fail(e, body):
    """One attempt of a pod that cannot be placed."""
    e.on_pod("ADDED", body)
    qpi = e.queue.pop()
    assert qpi is not None and qpi.key == f"ns/{body['metadata']['name']}"
    d = e.schedule(qpi)
    assert d is not None and not d.scheduled
    return d


def events(e):
    """The events queued on the recorder: (reason, type, note)."""
    out = []
    q = e.recorder._events
    while not q.empty():
        p, type_, reason, action, note, _ = q.get_nowait()
        out.append((p.key, type_, reason, note))
    return out


def patches(e):
    """The suggestions condition's PATCHes (pods/status; the PodScheduled ones left out)."""
    return [c for c in e.client.calls_of("strategic_patch") if c.path.startswith("/api/v1/namespaces/ns/pods/")
            and any(x.get("type") == SUGGESTIONS_CONDITION for x in c.body["status"].get("conditions", []))]


def written(p):
    """A condition PATCH's (condition, document, the text the mac signs, mac)."""
    (cond,) = [x for x in p.body["status"]["conditions"] if x["type"] == SUGGESTIONS_CONDITION]
    doc, text, mac = split_message(cond["message"])
    return cond, doc, text, mac


async def flush(e):
    """Let the recorder's PodScheduled PATCHes of the failures go out first."""
    for _ in range(3):
        await asyncio.sleep(0)


def metric(e, text):
    return [ln for ln in generate_latest(e.telemetry.registry).decode().splitlines() if ln.startswith(text)]


def run(coro_fn):
    return asyncio.run(coro_fn())


def test_a_failure_is_filed_not_searched_then_step_tells_the_hint_and_the_signed_condition():
    async def go():
        e, _ = make()
        fail(e, pod("big", cpu="3"))
        assert len(e.suggestions) == 1
        evs = events(e)
        assert [r for _, _, r, _ in evs] == ["FailedScheduling"]  # nothing searched at the failure
        assert evs[0][3] == "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: " \
                            "3 Preemption is not helpful for scheduling."
        assert e.suggestions.step()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        evs = events(e)
        assert [(r, t) for _, t, r, _ in evs] == [(HINT_EVENT, "Normal")]
        assert evs[0][3] == "lower the cpu request to at most 2: opens 3 nodes (n1 would be chosen)"
        (p,) = patches(e)
        assert p.path == "/api/v1/namespaces/ns/pods/big/status"  # pods/status: the shipped RBAC grants it
        assert p.body["metadata"] == {"uid": "uid-big"}  # the precondition
        cond, doc, text, mac = written(p)
        assert (cond["status"], cond["reason"]) == ("True", "Found") and cond["lastTransitionTime"]
        assert json.loads(cond["message"])["mac"] == mac and json.loads(text) == doc
        assert doc["version"] == 1 and doc["pod"] == "ns/big" and len(text.encode()) <= 4096
        assert doc["suggestions"][0]["kind"] == "LowerRequest" and doc["blockers"] == {"NodeResourcesFit": 3}
        key = e.binding_tasks.key
        assert key.verify_suggestions("uid-big", text, mac)
        assert not key.verify_suggestions("uid-other", text, mac)  # another pod's copy does not verify
        assert not key.verify_suggestions("uid-big", text.replace("at most 2", "at most 1"), mac)
        assert not DecisionKey().verify_suggestions("uid-big", text, mac)  # nor under another key
        assert not e.suggestions.step()  # nothing left
        assert metric(e, 'policy_scheduler_suggestion_searches_total{result="found"}') == \
            ['policy_scheduler_suggestion_searches_total{result="found"} 1.0']
        assert metric(e, 'policy_scheduler_suggestions_total{kind="LowerRequest"}')
        assert metric(e, "policy_scheduler_suggestion_search_duration_seconds_count") == \
            ["policy_scheduler_suggestion_search_duration_seconds_count 1.0"]
    run(go)


def test_the_condition_write_does_not_requeue_the_pod_nor_start_a_search():
    """upstream isPodUpdated ignores the status: the pod's update that only adds the condition
    leaves it in the unschedulable pool, and no new attempt means no new search."""
    async def go():
        e, _ = make()
        fail(e, pod("big", cpu="3"))
        assert e.suggestions.step()
        await asyncio.sleep(0)
        cond = written(patches(e)[0])[0]
        assert e.queue.state_of("ns/big") == UNSCHEDULABLE
        updated = pod("big", cpu="3")
        updated["status"]["conditions"] = [cond]
        e.on_pod("MODIFIED", updated)
        assert e.queue.state_of("ns/big") == UNSCHEDULABLE  # not moved
        assert e.queue.get("ns/big").pod.raw["status"]["conditions"] == [cond]  # the update was seen
        assert e.queue.pop() is None and len(e.suggestions) == 0 and not e.suggestions.step()
    run(go)


def test_a_requeued_pod_whose_search_finds_the_same_writes_nothing_again():
    """Should something requeue the pod, its next failure's search writes the same text: no
    second PATCH (no feedback), and no second event within the repeat interval."""
    async def go():
        e, clock = make()
        fail(e, pod("big", cpu="3"))
        assert e.suggestions.step()
        await asyncio.sleep(0)
        events(e)
        e.queue.activate(["ns/big"])
        qpi = e.queue.pop()
        e.schedule(qpi)
        clock.t += 100  # past the condition's interval, within the event's
        assert e.suggestions.step()
        await asyncio.sleep(0)
        assert len(patches(e)) == 1
        assert [r for _, _, r, _ in events(e)] == []  # FailedScheduling deduplicated too (same message)
        assert metric(e, 'policy_scheduler_suggestion_writes_total{result="unchanged",what="condition"}')
        assert metric(e, 'policy_scheduler_suggestion_writes_total{result="rate-limited",what="event"}')
    run(go)


def test_one_entry_per_pod_the_latest_attempt_wins_and_the_oldest_is_dropped_when_full():
    async def go():
        e, _ = make(queue_size=2)
        w = e.suggestions
        fail(e, pod("a", cpu="3"))
        first = w._queue["ns/a"]
        assert not hasattr(first, "decision")  # the attempt's per-node diagnosis is not kept
        e.queue.activate(["ns/a"])
        fail_again(e, "ns/a")
        assert len(w) == 1 and w._queue["ns/a"] is not first
        fail(e, pod("b", cpu="3"))
        fail(e, pod("c", cpu="3"))
        assert list(w._queue) == ["ns/b", "ns/c"] and w.dropped == 1
        assert metric(e, "policy_scheduler_suggestion_queue_dropped_total") == [
            "policy_scheduler_suggestion_queue_dropped_total 1.0"]
        assert metric(e, "policy_scheduler_suggestion_queue_length") == ["policy_scheduler_suggestion_queue_length 2.0"]
    run(go)


def fail_again(e, key):
    qpi = e.queue.pop()
    assert qpi.key == key
    return e.schedule(qpi)


def test_pods_bound_deleted_replaced_or_back_in_the_active_queue_are_skipped():
    async def go():
        e, _ = make()
        w = e.suggestions
        for n in ("gone", "bound", "replaced", "active"):
            fail(e, pod(n, cpu="3"))
        e.on_pod("DELETED", pod("gone", cpu="3"))
        assert "ns/gone" not in w._queue  # forgotten with the pod
        bound = pod("bound", cpu="1")
        bound["spec"]["nodeName"] = "n1"
        e.on_pod("MODIFIED", bound)
        assert "ns/bound" not in w._queue
        e.on_pod("MODIFIED", pod("replaced", cpu="3", uid="uid-new"))  # another pod of that name (a missed delete)
        e.queue.activate(["ns/active"])
        assert [w.step() for _ in range(3)] == [True, True, False]
        assert not patches(e) and not [r for _, _, r, _ in events(e) if r == HINT_EVENT]
        assert metric(e, 'policy_scheduler_suggestion_searches_total{result="skipped-stale"}') == [
            'policy_scheduler_suggestion_searches_total{result="skipped-stale"} 2.0']
    run(go)


def test_the_allowance_bounds_the_search_time_and_a_pod_waiting_too_long_is_dropped():
    async def go():
        clock = Clock()
        e = build_engine(FakeClient(), suggestions=SuggestionConfig(per_pod=0.5, per_second=0.01, burst=0.5,
                                                                     stale_after=120))
        w = e.suggestions
        w.clock = w.allowance.clock = clock
        w.allowance.last = clock.t
        e.on_namespace("ADDED", {"metadata": {"name": "ns", "labels": {}}})
        e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": DEFAULT["spec"]})
        e.on_node("ADDED", node("n1"))
        budgets = []
        real = w.search

        def search(*a, **kw):
            budgets.append(kw["budget"])
            r = real(*a, **kw)
            r.seconds = 0.5  # as if it took the whole budget
            return r

        w.search = search
        fail(e, pod("a", cpu="3"))
        fail(e, pod("b", cpu="3"))
        assert w.step() and budgets == [0.5]
        assert not w.step() and len(w) == 1  # the bucket is empty: no search now
        assert w.retry_in() == 1.0  # capped: the loop looks again within a second
        clock.t += 50  # 0.5 s of search time back
        assert w.step() and budgets == [0.5, 0.5]
        fail(e, pod("c", cpu="3"))
        clock.t += 121  # c waited past stale_after (refilled meanwhile, but its state has moved on)
        assert w.step() and budgets == [0.5, 0.5] and len(w) == 0
        assert metric(e, 'policy_scheduler_suggestion_searches_total{result="skipped-budget"}') == [
            'policy_scheduler_suggestion_searches_total{result="skipped-budget"} 1.0']
    run(go)


def remedies(pod_key, change, nodes=1):
    return Remedies(pod_key, [Suggestion("LowerRequest", "Pod", change, [], 0.5, nodes, "n1", None)])


def test_the_event_is_not_repeated_within_five_minutes_unless_the_sentence_changes():
    async def go():
        e, clock = make()
        w = e.suggestions
        fail(e, pod("a", cpu="3"))
        events(e)
        p = e.queue.get("ns/a").pod
        w.tell(p, remedies("ns/a", "lower the cpu request to at most 2"))
        clock.t += 60
        w.tell(p, remedies("ns/a", "lower the cpu request to at most 2"))
        clock.t += 60
        w.tell(p, remedies("ns/a", "lower the cpu request to at most 1"))  # changed: told at once
        w.tell(p, remedies("ns/a", "lower the cpu request to at most 3"))  # changed again, within 30 s
        w.tell(p, remedies("ns/a", "lower the cpu request to at most 1"))
        clock.t += 301
        w.tell(p, remedies("ns/a", "lower the cpu request to at most 1"))  # again after 5 minutes
        notes = [n[len("lower the cpu request to at most "):][0] for _, _, r, n in events(e) if r == HINT_EVENT]
        assert notes == ["2", "1", "3", "1", "1"]
        await asyncio.sleep(0)
        # the condition: written when its text changes, at most every 30 s (not "at most 3")
        texts = [written(c)[1]["text"] for c in patches(e)]
        assert texts == ["lower the cpu request to at most 2: opens 1 node (n1 would be chosen)",
                         "lower the cpu request to at most 1: opens 1 node (n1 would be chosen)"]
        assert metric(e, 'policy_scheduler_suggestion_writes_total{result="rate-limited",what="condition"}')
        w.forget("ns/a")  # bound or gone: everything starts over
        w.tell(p, remedies("ns/a", "lower the cpu request to at most 1"))
        await asyncio.sleep(0)
        assert len(patches(e)) == 3 and len([r for _, _, r, _ in events(e) if r == HINT_EVENT]) == 1
    run(go)


def test_a_failed_write_is_tried_again_by_the_next_search():
    async def go():
        e, clock = make()
        w = e.suggestions
        fail(e, pod("a", cpu="3"))
        p = e.queue.get("ns/a").pod
        await flush(e)
        e.client.fail("strategic_patch", 500, path_contains="/pods/a/status", times=1)
        w.tell(p, remedies("ns/a", "x"))
        await asyncio.sleep(0)
        w.tell(p, remedies("ns/a", "x"))
        await asyncio.sleep(0)
        assert len(patches(e)) == 2
        assert metric(e, 'policy_scheduler_suggestion_writes_total{result="failed",what="condition"}')
    run(go)


def test_the_condition_document_is_at_most_4_kib_whatever_the_suggestions_say():
    r = Remedies("ns/a", [Suggestion("LowerRequest", "Pod", "x" * 2000, [{"op": "add", "path": "/a", "value": "y" * 900}],
                                     0.5, 1, "n1", None) for _ in range(9)], blockers={"A" * 300: 1})
    text = document_text(r)
    assert len(text.encode()) <= 4096 and json.loads(text)["truncated"] is True


def test_off_by_default_in_build_engine_and_with_run_suggestions_off():
    from policy_scheduler.cli import build_parser
    from policy_scheduler.serve import suggestion_config

    assert build_engine(FakeClient()).suggestions is None
    p = build_parser()
    on = suggestion_config(p.parse_args(["run"]))
    assert on.enabled and on.per_pod == pytest.approx(0.020) and on.per_second == pytest.approx(0.05)
    off = suggestion_config(p.parse_args(["run", "--suggestions=off"]))
    assert not off.enabled
    c = suggestion_config(p.parse_args(["run", "--suggestion-budget", "50ms", "--suggestion-share", "0.2",
                                        "--suggestion-queue", "10"]))
    assert (c.per_pod, c.per_second, c.queue_size) == (pytest.approx(0.05), pytest.approx(0.2), 10)
    with pytest.raises(SystemExit):
        p.parse_args(["run", "--suggestion-share", "2"])
    assert build_engine(FakeClient(), suggestions=off).suggestions is None


def test_a_search_cut_short_before_it_found_anything_is_tried_again_before_it_is_told():
    async def go():
        e, _ = make()
        w = e.suggestions
        real = w.search
        calls = []

        def search(*a, **kw):
            calls.append(1)
            if len(calls) <= 2:
                return Remedies("ns/a", partial=True, reason="time budget spent: 3 candidates not tried")
            return real(*a, **kw)

        w.search = search
        fail(e, pod("a", cpu="3"))
        assert w.step() and w.step() and len(w) == 1 and not patches(e)  # twice cut short: filed again
        assert w.step() and len(w) == 0
        await asyncio.sleep(0)
        (p,) = patches(e)
        assert written(p)[1]["suggestions"]
        # a third time cut short would be told as it is (partial, with its reason)
        calls.clear()
        w.search = lambda *a, **kw: Remedies("ns/a", partial=True, reason="time budget spent")
        e.queue.activate(["ns/a"])
        fail_again(e, "ns/a")
        assert w.step() and w.step() and w.step() and len(w) == 0
    run(go)


def test_the_engine_loop_searches_only_when_no_pod_waits_to_be_placed():
    """The scheduling loop itself (Engine.run): every pod waiting in the active queue is decided
    and bound before a search starts, and each search starts with the active queue empty and no
    binding in flight."""
    async def go():
        e, _ = make()
        w = e.suggestions

        async def listed():  # the informers, listed
            return 0.0

        e.informers.run = listed
        seen: list[tuple] = []
        real_step, real_schedule = w.step, e.driver.schedule

        def step():
            seen.append(("step", e.queue.active_count, e.binding_tasks.binding,
                         len(e.client.calls_of("bind"))))
            return real_step()

        def schedule(qpi):
            seen.append(("schedule", qpi.key))
            if qpi.key == "ns/late-0":  # a pod arrives between searches: placed before the next one
                e.on_pod("ADDED", pod("late-1", cpu="1"))
            return real_schedule(qpi)

        w.step, e.driver.schedule = step, schedule
        for i in range(3):
            e.on_pod("ADDED", pod(f"big-{i}", cpu="3"))
        e.on_pod("ADDED", pod("small", cpu="1"))
        task = asyncio.get_running_loop().create_task(e.run())
        for _ in range(200):
            await asyncio.sleep(0.01)
            if any(s[0] == "step" for s in seen):
                break
        e.on_pod("ADDED", pod("late-0", cpu="1"))
        e.wake()
        for _ in range(300):
            await asyncio.sleep(0.01)
            if len(w) == 0 and ("schedule", "ns/late-1") in seen:
                break
        await e.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        first_step = next(i for i, s in enumerate(seen) if s[0] == "step")
        assert {s[1] for s in seen[:first_step]} == {"ns/big-0", "ns/big-1", "ns/big-2", "ns/small"}
        assert all(s[1] == 0 and s[2] == 0 for s in seen if s[0] == "step"), seen
        assert seen[first_step][3] == 1  # small's Binding was posted before the first search
        assert ("schedule", "ns/late-0") in seen and ("schedule", "ns/late-1") in seen and len(w) == 0
        assert metric(e, 'policy_scheduler_suggestion_searches_total{result="found"}') == [
            'policy_scheduler_suggestion_searches_total{result="found"} 3.0']
    run(go)


def test_a_search_that_raises_is_logged_and_the_loop_goes_on(caplog):
    async def go():
        e, _ = make()
        w = e.suggestions

        def boom(*a, **kw):
            raise RuntimeError("a bug")

        w.search = boom
        fail(e, pod("a", cpu="3"))
        assert w.step() and len(w) == 0 and not patches(e)
        assert "no suggestions for pod ns/a: RuntimeError: a bug" in caplog.text
    run(go)


@pytest.mark.parametrize("policy_file", sorted(p.name for p in (Path(__file__).resolve().parents[3] / "policies")
                                               .glob("*.yaml")))
def test_no_plugin_that_can_reject_a_pod_requeues_it_for_a_condition_update(policy_file):
    """Every example policy, every plugin of its chain that can leave a pod unschedulable
    (PreEnqueue, PreFilter, Filter, PostFilter, Reserve, Permit): the pod it rejected stays in the
    unschedulable pool when only its suggestions condition changes (the suggestions' own write)."""
    import copy

    import yaml

    from policy_scheduler.framework.interface import (FilterPlugin, PermitPlugin, PostFilterPlugin, PreEnqueuePlugin,
                                                      PreFilterPlugin, ReservePlugin)

    path = Path(__file__).resolve().parents[3] / "policies" / policy_file
    body = next(d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "SchedulingPolicy")
    name = body["metadata"]["name"]

    async def go():
        e = build_engine(FakeClient())
        e.on_namespace("ADDED", {"metadata": {"name": "ns", "labels": {}}})
        e.on_policy("ADDED", {"metadata": {"name": name, "generation": 1}, "spec": body["spec"]})
        chain = e.policies[name].chain
        assert chain is not None, e.policies[name].errors
        kinds = (PreEnqueuePlugin, PreFilterPlugin, FilterPlugin, PostFilterPlugin, ReservePlugin, PermitPlugin)
        rejecting = sorted(p.NAME for p in chain.plugins if isinstance(p, kinds))
        assert len(rejecting) >= 3
        p = pod("a", cpu="1")
        p["metadata"]["labels"]["policy-scheduler.io/policy"] = name
        for plugin in rejecting:
            e.on_pod("ADDED", p)
            qpi = e.queue.pop()
            e.queue.add_unschedulable(qpi, {plugin})
            assert e.queue.state_of("ns/a") == UNSCHEDULABLE, plugin
            annotated = copy.deepcopy(p)
            annotated["status"]["conditions"] = [{"type": SUGGESTIONS_CONDITION, "status": "True", "reason": "Found",
                                                  "message": '{"mac":"v1:x"}'}]
            e.on_pod("MODIFIED", annotated)
            assert e.queue.state_of("ns/a") == UNSCHEDULABLE, f"{plugin} requeued the pod for a condition update"
            e.on_pod("DELETED", annotated)
    run(go)


def test_a_forbidden_condition_is_switched_off_and_the_events_go_on():
    """An RBAC without pods/status (the shipped ClusterRole grants it): the first 403 turns the
    condition off (counted, logged once), and later searches still send their SchedulingHint events."""
    async def go():
        e, clock = make()
        w = e.suggestions
        fail(e, pod("a", cpu="3"))
        fail(e, pod("b", cpu="3"))
        await flush(e)
        e.client.fail("strategic_patch", 403, path_contains="/pods/")
        w.tell(e.queue.get("ns/a").pod, remedies("ns/a", "x"))
        await asyncio.sleep(0)
        assert w.conditions_forbidden and len(patches(e)) == 1
        w.tell(e.queue.get("ns/b").pod, remedies("ns/b", "y"))
        await asyncio.sleep(0)
        assert len(patches(e)) == 1  # not tried again
        assert [r for _, _, r, _ in events(e) if r == HINT_EVENT] == [HINT_EVENT, HINT_EVENT]
        assert metric(e, 'policy_scheduler_suggestion_writes_total{result="forbidden",what="condition"} 2.0')
    run(go)


class HeldStatusClient(FakeClient):
    """The PodScheduled PATCH of a failure held until ``release`` is set (a slow API server);
    the suggestions condition's PATCH is answered at once."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def strategic_patch(self, path, body, fence=None):
        if any(x.get("type") == "PodScheduled" for x in body.get("status", {}).get("conditions", [])):
            await self.release.wait()
        return await super().strategic_patch(path, body, fence)


def test_the_condition_is_sent_after_the_same_failures_podscheduled_condition():
    """A reader never sees the advice before the failure: while the failure's PodScheduled PATCH
    is unanswered, the suggestions condition waits; it goes out once that one is answered."""
    async def go():
        client = HeldStatusClient()
        e = build_engine(client, suggestions=SuggestionConfig(per_pod=1.0, per_second=1.0, burst=10.0))
        e.on_namespace("ADDED", {"metadata": {"name": "ns", "labels": {}}})
        e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": DEFAULT["spec"]})
        for n in ("n1", "n2", "n3"):
            e.on_node("ADDED", node(n))
        fail(e, pod("big", cpu="3"))
        assert e.suggestions.step()
        for _ in range(10):
            await asyncio.sleep(0)
        assert not patches(e) and not client.calls_of("strategic_patch")  # both wait: the failure's is held
        client.release.set()
        for _ in range(10):
            await asyncio.sleep(0)
        kinds = [[x["type"] for x in c.body["status"].get("conditions", [])] for c in client.calls_of("strategic_patch")]
        assert kinds == [["PodScheduled"], [SUGGESTIONS_CONDITION]], kinds
        assert e.recorder._status_tasks == {}  # an answered write is not kept
    run(go)
