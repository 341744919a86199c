"""cluster/telemetry.py: kube-scheduler's metric names, labels and buckets; the profile label
bounded to existing policies; plugin timing sampled; queue moves read at scrape time; and the
engine feeding it (attempts counted when bound, the SLI duration, extension points)."""

from __future__ import annotations

import asyncio
import random
import uuid

from support.fakeclient import FakeClient

from policy_scheduler.serve import build_engine
from policy_scheduler.cluster.telemetry import (ATTEMPT_BUCKETS, EXTENSION_POINT_BUCKETS, PLUGIN_BUCKETS, SLI_BUCKETS,
                                                Telemetry, attempts_label)
from policy_scheduler.framework.queue.scheduling_queue import SchedulingQueue
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from support.objects import node, pod


def series(t: Telemetry, name: str) -> set[tuple]:
    return {tuple(sorted(s.labels.items())) for m in t.registry.collect() for s in m.samples if s.name == name}


def test_upstream_buckets():
    assert ATTEMPT_BUCKETS[0] == 0.001 and len(ATTEMPT_BUCKETS) == 15 and ATTEMPT_BUCKETS[-1] == 0.001 * 2 ** 14
    assert PLUGIN_BUCKETS[0] == 0.00001 and len(PLUGIN_BUCKETS) == 20
    assert abs(PLUGIN_BUCKETS[1] / PLUGIN_BUCKETS[0] - 1.5) < 1e-9
    assert EXTENSION_POINT_BUCKETS[0] == 0.0001 and len(EXTENSION_POINT_BUCKETS) == 12
    assert SLI_BUCKETS[0] == 0.01 and len(SLI_BUCKETS) == 20


def test_attempts_label_is_capped_as_upstream():
    assert [attempts_label(n) for n in (1, 2, 14, 15, 99)] == ["1", "2", "14", "15+", "15+"]


def test_a_thousand_random_policy_names_add_no_series():
    t = Telemetry(known_policies={"default": 1, "binpack": 1})
    t.attempt("scheduled", "default", 0.01)
    t.attempt("unschedulable", "nope", 0.01)
    t.set_unschedulable({("nope", "PolicySelection"): 1})
    before = {name: series(t, name) for name in ("scheduler_schedule_attempts_total",
                                                 "scheduler_scheduling_attempt_duration_seconds_count",
                                                 "scheduler_unschedulable_pods")}
    for _ in range(1000):
        name = uuid.uuid4().hex
        t.attempt("unschedulable", name, 0.01)
        t.set_unschedulable({(name, "PolicySelection"): 1})
        t.cycle_recorder(name).point("Filter", Code.SUCCESS, 0.001)
    for name, s in before.items():
        assert series(t, name) == s, name
    profiles = {dict(labels).get("profile") for name in before for labels in series(t, name)}
    assert profiles <= {"default", "binpack", "unknown"}
    pts = series(t, "scheduler_framework_extension_point_duration_seconds_count")
    assert {dict(x)["profile"] for x in pts} == {"unknown"}
    assert t.registry.get_sample_value("scheduler_schedule_attempts_total",
                                       {"result": "unschedulable", "profile": "unknown"}) == 1001
    assert len(t._attempt_children) == 2 and len(t._recorders) <= 2  # caches keyed by label, not by name


def test_plugin_timing_is_sampled_at_the_configured_rate():
    def share(pct):
        t = Telemetry(plugin_sample_percent=pct, known_policies={"p": 1}, rng=random.Random(3))
        return sum(t.cycle_recorder("p").sampled for _ in range(20000)) / 20000

    assert share(0) == 0.0 and share(100) == 1.0
    assert 0.09 < share(10) < 0.11  # upstream pluginMetricsSamplePercent
    assert 0.45 < share(50) < 0.55


def test_the_recorder_fills_upstreams_series():
    t = Telemetry(plugin_sample_percent=100, known_policies={"p": 1})
    rec = t.cycle_recorder("p")
    assert rec.sampled and t.cycle_recorder("p") is rec  # cached per (profile, sampled)
    rec.point("Filter", Code.SUCCESS, 0.002)
    rec.point("Filter", Code.SUCCESS, 0.004)
    rec.plugin("NodeResourcesFit", "Filter", Code.UNSCHEDULABLE, 0.0001)
    get = t.registry.get_sample_value
    assert get("scheduler_framework_extension_point_duration_seconds_count",
               {"extension_point": "Filter", "status": "Success", "profile": "p"}) == 2
    assert abs(get("scheduler_framework_extension_point_duration_seconds_sum",
                   {"extension_point": "Filter", "status": "Success", "profile": "p"}) - 0.006) < 1e-12
    assert get("scheduler_plugin_execution_duration_seconds_count",
               {"plugin": "NodeResourcesFit", "extension_point": "Filter", "status": "Unschedulable"}) == 1
    t.scheduled(3, 0.5)
    t.scheduled(20, 0.5)
    assert get("scheduler_pod_scheduling_sli_duration_seconds_count", {"attempts": "3"}) == 1
    assert get("scheduler_pod_scheduling_sli_duration_seconds_count", {"attempts": "15+"}) == 1


def test_queue_incoming_pods_are_read_from_the_queue_at_scrape_time():
    t = Telemetry()
    q = SchedulingQueue(less=lambda a, b: False)
    t.queue_incoming.source = lambda: q.incoming
    for i in range(3):
        q.add(parse_pod({"metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"},
                         "spec": {"containers": [{"name": "c"}]}}), "p")
    qpi = q.pop()
    q.add_unschedulable(qpi, {"NodeResourcesFit"})
    q.incoming[("active", "PolicyChange/p")] = 2  # our per-policy event labels lose their suffix
    get = t.registry.get_sample_value
    assert get("scheduler_queue_incoming_pods_total", {"queue": "active", "event": "UnscheduledPodAdd"}) == 3
    assert get("scheduler_queue_incoming_pods_total",
               {"queue": "unschedulable", "event": "ScheduleAttemptFailure"}) == 1
    assert get("scheduler_queue_incoming_pods_total", {"queue": "active", "event": "PolicyChange"}) == 2


def test_the_engine_counts_attempts_when_bound_and_bounds_the_profile():
    async def go():
        e = build_engine(FakeClient(), plugin_metrics_sample_percent=100)
        e.on_policy("ADDED", {"metadata": {"name": "p", "generation": 1},
                              "spec": {"plugins": [{"name": "NodeResourcesFit"}, {"name": "TaintToleration"}]}})
        e.on_node("ADDED", node("n1"))
        e.on_node("ADDED", node("n2"))
        for name, policy, cpu in (("a", "p", "1"), ("b", "p", "1"), ("big", "p", "64"), ("lost", "zz-nope", "1")):
            e.on_pod("ADDED", pod(name, policy, cpu))
        while (qpi := e.queue.pop()) is not None:
            e.schedule(qpi)
        for _ in range(20):
            await asyncio.sleep(0)
        await e.stop()
        return e

    e = asyncio.run(go())
    get = e.telemetry.registry.get_sample_value
    assert get("scheduler_schedule_attempts_total", {"result": "scheduled", "profile": "p"}) == 2
    assert get("scheduler_schedule_attempts_total", {"result": "unschedulable", "profile": "p"}) == 1
    assert get("scheduler_schedule_attempts_total", {"result": "unschedulable", "profile": "unknown"}) == 1
    assert get("scheduler_scheduling_attempt_duration_seconds_count", {"result": "scheduled", "profile": "p"}) == 2
    assert get("scheduler_scheduling_attempt_duration_seconds_sum", {"result": "scheduled", "profile": "p"}) > 0
    assert get("scheduler_pod_scheduling_sli_duration_seconds_count", {"attempts": "1"}) == 2
    for point in ("PreFilter", "Filter", "PreScore", "Score", "Reserve", "Permit", "PreBind", "Bind", "PostBind"):
        assert get("scheduler_framework_extension_point_duration_seconds_count",
                   {"extension_point": point, "status": "Success", "profile": "p"}) >= 2, point
    for plugin in ("NodeResourcesFit", "TaintToleration"):
        assert get("scheduler_plugin_execution_duration_seconds_count",
                   {"plugin": plugin, "extension_point": "Filter", "status": "Success"}), plugin
    assert get("scheduler_plugin_execution_duration_seconds_count",
               {"plugin": "DefaultBinder", "extension_point": "Bind", "status": "Success"}) == 2
    assert get("scheduler_queue_incoming_pods_total", {"queue": "active", "event": "UnscheduledPodAdd"}) == 4
    profiles = {s.labels["profile"] for m in e.telemetry.registry.collect() for s in m.samples
                if "profile" in s.labels}
    assert profiles == {"p", "unknown"}
