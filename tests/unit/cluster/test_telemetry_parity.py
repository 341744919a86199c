"""cluster/telemetry.py and telemetry_collectors.py: kube-scheduler 1.37's remaining families
(pod_scheduling_attempts, scheduling_algorithm_duration_seconds, plugin_evaluation_total,
cache_size, event_handling_duration_seconds, the pod-group families), client-go's rest_client_*,
process_*/python_*, the build info, no *_created series, and what a standby exports."""

from __future__ import annotations

import asyncio

from aiohttp import web
from support.fakeclient import FakeClient
from support.standby import Standby
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from policy_scheduler import __version__
from policy_scheduler.cluster.engine import Engine
from policy_scheduler.serve import build_engine
from policy_scheduler.cluster.credentials import Credentials
from policy_scheduler.cluster.kubeclient import ApiError, KubeClient
from policy_scheduler.cluster.telemetry import ATTEMPT_BUCKETS, POD_ATTEMPTS_BUCKETS, Telemetry
from policy_scheduler.cluster.telemetry_collectors import KUBE_SCHEDULER_VERSION, REST_CLIENT_BUCKETS
from policy_scheduler.framework.status import Code
from support.objects import node, pod

# what a standby exports, and what only the leader does (the dashboard's contract)
BOTH = {"policy_scheduler_nodes", "policy_scheduler_policies", "scheduler_cache_size",
        "scheduler_event_handling_duration_seconds", "leader_election_master_status", "rest_client_requests",
        "rest_client_request_duration_seconds", "policy_scheduler_build_info"}
LEADER_ONLY = {"scheduler_schedule_attempts", "scheduler_scheduling_attempt_duration_seconds",
               "scheduler_scheduling_algorithm_duration_seconds", "scheduler_pod_scheduling_sli_duration_seconds",
               "scheduler_pod_scheduling_attempts", "scheduler_framework_extension_point_duration_seconds",
               "scheduler_plugin_execution_duration_seconds", "scheduler_plugin_evaluation",
               "scheduler_pending_pods", "scheduler_unschedulable_pods", "scheduler_queue_incoming_pods",
               "scheduler_queued_entities", "scheduler_queue_incoming_entities",
               "scheduler_preemption_attempts", "scheduler_preemption_victims",
               "scheduler_preemption_evaluation_duration_seconds", "scheduler_workload_preemption_attempts",
               "scheduler_workload_preemption_victims",
               "scheduler_podgroup_schedule_attempts", "scheduler_podgroup_scheduling_attempt_duration_seconds",
               "scheduler_podgroup_scheduling_algorithm_duration_seconds",
               "policy_scheduler_binding_duration_seconds", "policy_scheduler_binding_errors",
               "policy_scheduler_events_dropped", "policy_scheduler_tuning_evaluations",
               "policy_scheduler_tuning_replays", "policy_scheduler_tuning_evaluation_duration_seconds",
               "policy_scheduler_rollout_phase", "policy_scheduler_rollout_attempts",
               "policy_scheduler_rollout_shadow_decisions", "policy_scheduler_rollout_rollbacks",
               "policy_scheduler_rollout_promotions"}


def families(t: Telemetry) -> dict[str, list]:
    """Family name -> its samples, from the exposition text (what Prometheus reads)."""
    text = generate_latest(t.registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}




def scheduled_engine(leadership=None) -> Engine:
    async def go():
        e = build_engine(FakeClient(), plugin_metrics_sample_percent=100, leadership=leadership)
        e.on_policy("ADDED", {"metadata": {"name": "p", "generation": 1},
                              "spec": {"plugins": [{"name": "NodeResourcesFit"}, {"name": "TaintToleration"}]}})
        for n in ("n1", "n2", "n3"):
            e.informers.route("nodes")("ADDED", node(n))
        for name, cpu in (("a", "1"), ("b", "1"), ("big", "64")):
            e.informers.route("pods")("ADDED", pod(name, "p", cpu))
        while (qpi := e.queue.pop()) is not None:
            e.schedule(qpi)
        for _ in range(20):
            await asyncio.sleep(0)
        await e.stop()
        return e

    return asyncio.run(go())


def test_upstream_buckets_of_the_new_families():
    t = Telemetry()
    t.scheduled(1, 0.5)
    t.scheduled(3, 0.5)
    t.scheduled(40, 0.5)
    get = t.registry.get_sample_value
    assert POD_ATTEMPTS_BUCKETS == (1, 2, 4, 8, 16)  # upstream ExponentialBuckets(1, 2, 5)
    les = ("1.0", "2.0", "4.0", "16.0", "+Inf")
    assert [get("scheduler_pod_scheduling_attempts_bucket", {"le": le}) for le in les] == [1, 1, 2, 2, 3]
    assert get("scheduler_pod_scheduling_attempts_sum") == 44
    t.pod_group_algorithm(0.003)
    les = [s.labels["le"] for s in families(t)["scheduler_podgroup_scheduling_algorithm_duration_seconds"]
           if s.name.endswith("_bucket")]
    assert les[:-1] == [str(float(b)) for b in ATTEMPT_BUCKETS] and les[-1] == "+Inf"


def test_the_engine_feeds_the_new_scheduling_series():
    e = scheduled_engine()
    get = e.telemetry.registry.get_sample_value
    assert get("scheduler_scheduling_algorithm_duration_seconds_count") == 3  # every cycle, scheduled or not
    assert get("scheduler_scheduling_algorithm_duration_seconds_sum") > 0
    assert get("scheduler_pod_scheduling_attempts_count") == 2  # the bound pods
    assert get("scheduler_pod_scheduling_attempts_bucket", {"le": "1.0"}) == 2
    ev = {(s.labels["plugin"], s.labels["extension_point"]): s.value
          for s in families(e.telemetry)["scheduler_plugin_evaluation"] if s.labels["profile"] == "p"}
    # three cycles; each Filter plugin over the 3 nodes; two pods scored 3 feasible nodes, the big one none
    assert ev[("NodeResourcesFit", "PreFilter")] == 3
    assert ev[("NodeResourcesFit", "Filter")] == 9 and ev[("TaintToleration", "Filter")] == 9
    assert ev[("NodeResourcesFit", "Score")] == 6 and ev[("TaintToleration", "Score")] == 6
    assert ev[("TaintToleration", "PreScore")] == 2
    assert {pt for _, pt in ev} == {"PreFilter", "Filter", "PreScore", "Score"}


def test_cache_size_and_event_handling():
    e = scheduled_engine()
    get = e.telemetry.registry.get_sample_value
    assert get("scheduler_cache_size", {"type": "nodes"}) == 3
    assert get("scheduler_cache_size", {"type": "pods"}) == 2  # the two bound ones (assumed, then confirmed)
    assert get("scheduler_cache_size", {"type": "assumed_pods"}) == len(e.state.table.assumed)
    assert get("scheduler_event_handling_duration_seconds_count", {"event": "NodeAdd"}) == 3
    assert get("scheduler_event_handling_duration_seconds_count", {"event": "UnscheduledPodAdd"}) == 3
    assert get("scheduler_event_handling_duration_seconds_sum", {"event": "NodeAdd"}) > 0
    bound = dict(pod("a"), spec={**pod("a")["spec"], "nodeName": "n1"})
    e.informers.route("pods")("MODIFIED", bound)
    assert get("scheduler_event_handling_duration_seconds_count", {"event": "AssignedPodUpdate"}) == 1
    claim = {"metadata": {"name": "c", "namespace": "ns", "uid": "u"}, "spec": {}}
    e.informers.route("persistentvolumeclaims")("ADDED", claim)  # the informers' handlers are timed
    assert get("scheduler_event_handling_duration_seconds_count", {"event": "PersistentVolumeClaimAdd"}) == 1


def test_pod_group_attempts_by_result():
    t = Telemetry(known_policies={"g": 1})
    t.pod_group_attempt("scheduled", "g", 0.01)
    t.pod_group_attempt("waiting_on_preemption", "g", 0.02)
    t.pod_group_attempt("unschedulable", "nope", 0.02)
    get = t.registry.get_sample_value
    assert get("scheduler_podgroup_schedule_attempts_total", {"result": "scheduled", "profile": "g"}) == 1
    assert get("scheduler_podgroup_schedule_attempts_total",
               {"result": "waiting_on_preemption", "profile": "g"}) == 1
    assert get("scheduler_podgroup_schedule_attempts_total", {"result": "unschedulable", "profile": "unknown"}) == 1
    assert get("scheduler_podgroup_scheduling_attempt_duration_seconds_sum",
               {"result": "waiting_on_preemption", "profile": "g"}) == 0.02


def test_no_created_series_and_process_build_info():
    t = Telemetry()
    t.attempt("scheduled", None, 0.01)
    t.rest_client.observe("GET", "127.0.0.1:6443", 200, 0.01)
    text = generate_latest(t.registry).decode()
    assert "_created" not in text
    fams = families(t)
    assert fams["process_resident_memory_bytes"][0].value > 0
    assert "python_info" in fams and "python_gc_collections" in fams
    (info,) = fams["policy_scheduler_build_info"]
    assert info.value == 1 and info.labels["version"] == __version__
    assert info.labels["kube_scheduler_version"] == KUBE_SCHEDULER_VERSION
    assert set(info.labels) == {"version", "kube_scheduler_version", "python_implementation", "python_version"}


def test_rest_client_metrics_of_every_request():
    """client-go's names, labels and buckets, fed by the client's session (its TraceConfig)."""
    async def go():
        async def ok(_r):
            return web.json_response({})

        async def nope(_r):
            return web.json_response({"message": "no"}, status=409)

        app = web.Application()
        app.add_routes([web.get("/ok", ok), web.post("/nope", nope)])
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        t = Telemetry()
        client = KubeClient(Credentials(server=f"http://127.0.0.1:{port}", ssl_context=False), qps=0)
        client.metrics = t.rest_client
        await client.get("/ok")
        await client.get("/ok")
        try:
            await client.post("/nope", {})
        except ApiError:
            pass
        async with client.session.get(f"http://127.0.0.1:{port}/ok") as r:  # an informer's way
            await r.read()
        await client.close()
        dead = KubeClient(Credentials(server="http://127.0.0.1:1", ssl_context=False), qps=0)
        dead.metrics = t.rest_client
        try:
            await dead.get("/x")
        except Exception:
            pass
        await dead.close()
        await runner.cleanup()
        return t, port

    t, port = asyncio.run(go())
    get = t.registry.get_sample_value
    host = f"127.0.0.1:{port}"
    assert get("rest_client_requests_total", {"code": "200", "method": "GET", "host": host}) == 3
    assert get("rest_client_requests_total", {"code": "409", "method": "POST", "host": host}) == 1
    assert get("rest_client_requests_total", {"code": "<error>", "method": "GET", "host": "127.0.0.1:1"}) == 1
    assert get("rest_client_request_duration_seconds_count", {"verb": "GET", "host": host}) == 3
    les = [s.labels["le"] for s in families(t)["rest_client_request_duration_seconds"]
           if s.name.endswith("_bucket") and s.labels["host"] == host and s.labels["verb"] == "GET"]
    assert les == [str(float(b)) for b in REST_CLIENT_BUCKETS] + ["+Inf"]


def test_a_standby_exports_no_scheduling_series():
    lead = Standby()
    e = build_engine(FakeClient(), leadership=lead)
    t = e.telemetry
    e.route("nodes")("ADDED", node("n1"))
    t.leader.labels("policy-scheduler").set(0)
    t.pending.labels("active").set(0)
    t.preemption_attempts.inc(0)
    names = set(families(t))
    assert not names & LEADER_ONLY, names & LEADER_ONLY
    assert {n for n in BOTH if n != "rest_client_requests" and not n.startswith("rest_client")} <= names
    assert any(n.startswith("process_") for n in names) and any(n.startswith("python_") for n in names)
    lead.holding = True
    names = set(families(t))
    assert LEADER_ONLY <= names, LEADER_ONLY - names
    assert t.registry.get_sample_value("scheduler_pending_pods", {"queue": "active"}) == 0


def test_a_leader_that_steps_down_clears_its_gauges():
    lead = Standby()
    lead.holding = True
    t = Telemetry(is_leader=lambda: lead.holding)
    t.pending.labels("active").set(5)
    t.set_unschedulable({("p", "NodeResourcesFit"): 2})
    t.rollout_phase.labels("p", "Progressing").set(1)
    assert t.registry.get_sample_value("scheduler_pending_pods", {"queue": "active"}) == 5
    lead.holding = False
    t.stepped_down()
    assert t.registry.get_sample_value("scheduler_pending_pods", {"queue": "active"}) is None
    lead.holding = True  # even if collected again (a new term), the old values are gone
    fams = families(t)
    assert fams["scheduler_pending_pods"] == [] and fams["scheduler_unschedulable_pods"] == []
    assert fams["policy_scheduler_rollout_phase"] == []


# ------------------------------------------------------------------ pod groups through the engine
GANG = [{"name": "NodeResourcesFit"}, {"name": "DefaultPreemption"}, {"name": "GangScheduling"}]


def npg(name: str, min_count: int, priority: int | None = None) -> dict:
    spec: dict = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-pg-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec}


def member(name: str, group: str | None, cpu: str, node: str = "", priority: int | None = None) -> dict:
    spec: dict = {"schedulerName": "policy-scheduler", "nodeName": node,
                  "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


def test_pod_group_cycles_are_counted_by_upstreams_results():
    from policy_scheduler.cluster.sync import NATIVE_PODGROUPS

    async def go():
        e = build_engine(FakeClient())
        e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": GANG}})
        for n in ("n0", "n1"):
            e.on_node("ADDED", node(n))  # 4 cpu each
        for n in ("n0", "n1"):  # filled with low-priority pods: a group of high priority preempts
            for i in range(2):
                e.on_pod("ADDED", member(f"low-{n}-{i}", None, "2", node=n, priority=10))
        e.route(NATIVE_PODGROUPS)("ADDED", npg("big", 2))  # never fits (8 cpu per member)
        e.route(NATIVE_PODGROUPS)("ADDED", npg("hi", 2, priority=100))
        for i in range(2):
            e.on_pod("ADDED", member(f"big-{i}", "big", "8"))
            e.on_pod("ADDED", member(f"hi-{i}", "hi", "2", priority=100))
        for _ in range(2):
            e.schedule(e.queue.pop())
        await e.stop()
        fits = build_engine(FakeClient())  # and a group that fits
        fits.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": GANG}})
        fits.on_node("ADDED", node("n0"))
        fits.route(NATIVE_PODGROUPS)("ADDED", npg("ok", 2))
        for i in range(2):
            fits.on_pod("ADDED", member(f"ok-{i}", "ok", "1"))
        fits.schedule(fits.queue.pop())
        assert fits.telemetry.registry.get_sample_value("scheduler_podgroup_schedule_attempts_total",
                                                         {"result": "scheduled", "profile": "default"}) == 1
        await fits.stop()
        return e

    e = asyncio.run(go())
    get = e.telemetry.registry.get_sample_value
    assert get("scheduler_podgroup_schedule_attempts_total", {"result": "unschedulable", "profile": "default"}) == 1
    assert get("scheduler_podgroup_schedule_attempts_total",
               {"result": "waiting_on_preemption", "profile": "default"}) == 1
    assert get("scheduler_podgroup_scheduling_attempt_duration_seconds_count",
               {"result": "unschedulable", "profile": "default"}) == 1
    assert get("scheduler_podgroup_scheduling_algorithm_duration_seconds_count") == 2
    assert get("scheduler_podgroup_scheduling_algorithm_duration_seconds_sum") > 0
    # both groups ran DefaultPreemption's PodGroupPostFilter: the big one found no victims
    assert get("scheduler_workload_preemption_attempts_total", {"result": "Success"}) == 1
    assert get("scheduler_workload_preemption_attempts_total", {"result": "UnschedulableAndUnresolvable"}) == 1
    assert get("scheduler_workload_preemption_victims_count") == 1
    assert get("scheduler_workload_preemption_victims_sum") == 2  # a 2-cpu low pod per member: 2 of the 4
    assert get("scheduler_preemption_evaluation_duration_seconds_count",
               {"preemptor": "podgroup", "result": "Success"}) == 1


def test_a_pods_post_filter_is_its_preemption_evaluation():
    t = Telemetry(known_policies={"p": 1})
    rec = t.cycle_recorder("p")
    rec.point("PostFilter", Code.UNSCHEDULABLE, 0.004)
    rec.point("PostFilter", Code.UNSCHEDULABLE, 0.002)
    rec.point("Filter", Code.SUCCESS, 0.001)
    get = t.registry.get_sample_value
    assert get("scheduler_preemption_evaluation_duration_seconds_count",
               {"preemptor": "pod", "result": "Unschedulable"}) == 2
    assert get("scheduler_preemption_evaluation_duration_seconds_sum",
               {"preemptor": "pod", "result": "Unschedulable"}) == 0.006
    assert get("scheduler_framework_extension_point_duration_seconds_count",
               {"extension_point": "PostFilter", "status": "Unschedulable", "profile": "p"}) == 2


def test_queued_and_incoming_entities_mirror_the_pod_series():
    t = Telemetry()
    t.pending.labels("active").set(3)
    t.pending.labels("gated").set(1)
    t.queue_incoming.source = lambda: {("active", "UnscheduledPodAdd"): 4, ("active", "PolicyChange/p"): 2}
    get = t.registry.get_sample_value
    assert get("scheduler_queued_entities", {"queue": "active", "type": "pod"}) == 3
    assert get("scheduler_queued_entities", {"queue": "gated", "type": "pod"}) == 1
    assert get("scheduler_queue_incoming_entities_total",
               {"queue": "active", "event": "UnscheduledPodAdd", "type": "pod"}) == 4
    assert get("scheduler_queue_incoming_entities_total",
               {"queue": "active", "event": "PolicyChange", "type": "pod"}) == 2


def test_plugin_evaluations_leave_out_skipped_plugins_and_survive_a_new_chain():
    from types import SimpleNamespace as NS

    from policy_scheduler.cluster.telemetry_collectors import PluginEvaluations

    def chain(*names):
        ps = [NS(NAME=n) for n in names]
        return NS(pre_filter=ps, filter=ps, pre_score=ps, score=[(p, 1) for p in ps])

    ev = PluginEvaluations()
    c1 = chain("A", "B")
    ev.cycle("p", c1, set(), set(), 10, 4)
    ev.cycle("p", c1, {"B"}, {"A"}, 10, 1)  # B skipped Filter; one feasible node: nothing scored
    ev.cycle("p", c1, set(), {"A", "Z"}, 6, 3)  # A skipped Score (Z is no Score plugin of the chain)
    got = ev.counts()
    assert got[("A", "PreFilter", "p")] == 3 and got[("B", "PreFilter", "p")] == 3
    assert got[("A", "Filter", "p")] == 26 and got[("B", "Filter", "p")] == 16
    assert got[("A", "PreScore", "p")] == 2
    assert got[("A", "Score", "p")] == 4 and got[("B", "Score", "p")] == 7
    ev.MAX_PLANS = 1
    ev.cycle("p", chain("A"), set(), set(), 5, 0)  # a new chain (the old plan folded, not lost)
    got = ev.counts()
    assert got[("A", "Filter", "p")] == 31 and got[("B", "Filter", "p")] == 16 and got[("A", "PreFilter", "p")] == 4
