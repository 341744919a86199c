"""The operator's /metrics after a burst, on the real control plane: kube-scheduler's metric names
and labels, values that moved (attempts = pods, durations > 0, per-plugin series for every
plugin of the policy), and a profile label that pods naming random policies cannot grow."""

from __future__ import annotations

import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

import localcluster
from conftest import OperatorProcess
from helpers import apply_policy, pod, ready_condition, wait_bound, wait_for

SCHED = "observability-scheduler"
POLICY = "obs-policy"
LABEL = "policy-scheduler.io/policy"
PODS = 50
PLUGINS = [{"name": "NodeResourcesFit"}, {"name": "NodeAffinity"}, {"name": "TaintToleration"},
           {"name": "ImageLocality"}]


@pytest.fixture(scope="module")
def obs(cluster, crd):
    port = localcluster.free_port()
    # every cycle times its plugins here (default 10 %), so 50 pods surely give every plugin a series
    op = OperatorProcess(cluster, SCHED, extra=["--metrics-port", str(port), "--metrics-address", "127.0.0.1",
                                                "--plugin-metrics-sample-percent", "100"]).start()
    yield op, f"http://127.0.0.1:{port}/metrics"
    op.stop()


def scrape(url: str) -> dict[str, list[tuple[dict, float]]]:
    """Sample name -> [(labels, value)]."""
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict, float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def value(m, name: str, **labels) -> float | None:
    vals = [v for lb, v in m.get(name, []) if all(lb.get(k) == x for k, x in labels.items())]
    return sum(vals) if vals else None


def test_metrics_after_a_burst(core, namespace, nodes, policies, obs):
    op, url = obs
    for i in range(3):
        nodes(f"obs-{i}", cpu="16", labels={"e2e": "obs"})
    apply_policy(policies, POLICY, PLUGINS, schedulerName=SCHED)
    try:
        wait_for(lambda: (ready_condition(policies, POLICY) or {}).get("status") == "True", 30,
                 what=f"policy {POLICY} Ready")
        names = [f"obs{i}" for i in range(PODS)]
        for n in names:
            core.create_namespaced_pod(namespace, pod(n, namespace, scheduler=SCHED, labels={LABEL: POLICY},
                                                      nodeSelector={"e2e": "obs"}))
        wait_bound(core, namespace, names, 90)
        # the binding's bookkeeping follows the API answer; the pending gauge every 2 s
        m = wait_for(lambda: (lambda m: m if value(m, "scheduler_schedule_attempts_total", result="scheduled",
                                                   profile=POLICY) == PODS
                              and "scheduler_pending_pods" in m else None)(scrape(url)),
                     15, 0.5, what="the attempts of every pod and the pending gauge")

        attempt = dict(result="scheduled", profile=POLICY)
        assert value(m, "scheduler_scheduling_attempt_duration_seconds_count", **attempt) == PODS
        assert value(m, "scheduler_scheduling_attempt_duration_seconds_sum", **attempt) > 0
        assert value(m, "scheduler_pod_scheduling_sli_duration_seconds_count") == PODS
        assert value(m, "scheduler_pod_scheduling_sli_duration_seconds_sum") > 0
        for plugin, point in (("NodeResourcesFit", "Filter"), ("NodeAffinity", "Filter"),
                              ("TaintToleration", "Filter"), ("NodeResourcesFit", "Score"),
                              ("TaintToleration", "Score"), ("ImageLocality", "Score"),
                              ("DefaultBinder", "Bind")):
            n = value(m, "scheduler_plugin_execution_duration_seconds_count", plugin=plugin, extension_point=point)
            assert n and n >= PODS, (plugin, point, n)
            assert value(m, "scheduler_plugin_execution_duration_seconds_sum", plugin=plugin,
                         extension_point=point) > 0
        for point in ("PreFilter", "Filter", "Score", "Reserve", "Permit", "PreBind", "Bind", "PostBind"):
            n = value(m, "scheduler_framework_extension_point_duration_seconds_count", extension_point=point,
                      status="Success", profile=POLICY)
            assert n == PODS, (point, n)
        assert {lb["queue"] for lb, _ in m["scheduler_pending_pods"]} >= {"active", "backoff", "unschedulable",
                                                                           "gated"}
        assert value(m, "scheduler_queue_incoming_pods_total", queue="active", event="UnscheduledPodAdd") >= PODS

        # pods naming policies that do not exist: counted, under profile "unknown", no new series
        def profiles(m) -> set[str]:
            return {lb["profile"] for samples in m.values() for lb, _ in samples if "profile" in lb}

        def series_with_profile(m) -> int:
            return sum(1 for samples in m.values() for lb, _ in samples if "profile" in lb)

        random_names = [f"nope-{uuid.uuid4().hex[:12]}" for _ in range(100)]
        for i, name in enumerate(random_names):
            core.create_namespaced_pod(namespace, pod(f"lost{i}", namespace, scheduler=SCHED, labels={LABEL: name}))
        m1 = wait_for(lambda: (lambda m: m if (value(m, "scheduler_schedule_attempts_total", result="unschedulable",
                                                     profile="unknown") or 0) >= 100 else None)(scrape(url)),
                      30, 0.5, what="the attempts of the pods without a policy")
        existing = {p["metadata"]["name"] for p in policies.list_cluster_custom_object(
            "policy-scheduler.io", "v1alpha1", "schedulingpolicies")["items"]}
        assert profiles(m1) <= existing | {"unknown"}
        assert not profiles(m1) & set(random_names)
        wait_for(lambda: value(scrape(url), "scheduler_unschedulable_pods", plugin="PolicySelection",
                               profile="unknown") == 100, 10, 0.5, what="the unschedulable gauge")
        m2 = scrape(url)
        # a second round of 900 other names (1,000 random names in all) adds nothing at all
        def create(i: int) -> None:
            core.create_namespaced_pod(namespace, pod(f"lost2-{i}", namespace, scheduler=SCHED,
                                                      labels={LABEL: f"nope-{uuid.uuid4().hex[:12]}"}))

        with ThreadPoolExecutor(8) as ex:
            list(ex.map(create, range(900)))
        wait_for(lambda: value(scrape(url), "scheduler_unschedulable_pods", plugin="PolicySelection",
                               profile="unknown") == 1000, 60, 0.5, what="the unschedulable gauge")
        m3 = scrape(url)
        assert series_with_profile(m3) == series_with_profile(m2)
        assert profiles(m3) == profiles(m2)
    finally:
        policies.delete_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies", POLICY)


# what a standby exports (the dashboard sums the scheduling series over replicas and takes max()
# of the cache gauges): its cache, client, process and build; none of the scheduling series
BOTH = {"policy_scheduler_nodes", "policy_scheduler_policies", "scheduler_cache_size",
        "scheduler_event_handling_duration_seconds_count", "leader_election_master_status",
        "rest_client_requests_total", "rest_client_request_duration_seconds_count", "policy_scheduler_build_info",
        "process_resident_memory_bytes", "python_info"}
# each replica's own: its caches keyed by object content, its informers' failures and relists,
# its background tasks, the decision key it holds, writes its fence refused (docs/operations.md)
REPLICA_OWN = ("policy_scheduler_content_cache_", "policy_scheduler_informer_", "policy_scheduler_background_task_",
               "policy_scheduler_decision_key_", "policy_scheduler_fenced_writes", "policy_scheduler_forged_decisions")
LEADER_ONLY = {"scheduler_schedule_attempts_total", "scheduler_scheduling_attempt_duration_seconds_count",
               "scheduler_scheduling_algorithm_duration_seconds_count", "scheduler_pod_scheduling_attempts_count",
               "scheduler_pod_scheduling_sli_duration_seconds_count", "scheduler_pending_pods",
               "scheduler_framework_extension_point_duration_seconds_count", "scheduler_plugin_evaluation_total",
               "scheduler_queue_incoming_pods_total", "scheduler_preemption_attempts_total",
               "scheduler_podgroup_scheduling_algorithm_duration_seconds_count",
               "policy_scheduler_binding_duration_seconds_count"}


def test_a_standby_exports_its_cache_not_the_scheduling_series(cluster, core, namespace, nodes, policies, crd):
    sched = "obs-ha-scheduler"
    apply_policy(policies, sched, [{"name": "NodeResourcesFit"}], schedulerName=sched)
    nodes("obs-ha-0", cpu="16", labels={"e2e": "obs-ha"})
    mports = [localcluster.free_port(), localcluster.free_port()]
    reps = [OperatorProcess(cluster, sched, log_name=f"{sched}-{i}", extra=[
        "--default-policy", sched, "--metrics-port", str(mports[i]), "--metrics-address", "127.0.0.1"])
        for i in range(2)]
    for r in reps:
        r.start(wait=False)
    try:
        for r in reps:
            r.wait_synced()
        wait_for(lambda: sum("successfully acquired lease" in r.log() for r in reps) == 1, 30, what="one leader")
        lead, standby = mports if "successfully acquired lease" in reps[0].log() else mports[::-1]
        names = [f"ha{i}" for i in range(5)]
        for n in names:
            core.create_namespaced_pod(namespace, pod(n, namespace, scheduler=sched, nodeSelector={"e2e": "obs-ha"}))
        wait_bound(core, namespace, names, 30)
        leader_m = wait_for(lambda: (lambda m: m if value(m, "scheduler_schedule_attempts_total") == 5
                                     and "scheduler_pending_pods" in m else None)(
            scrape(f"http://127.0.0.1:{lead}/metrics")), 15, 0.5, what="the leader's attempts")
        standby_m = scrape(f"http://127.0.0.1:{standby}/metrics")
        assert BOTH <= set(leader_m) and LEADER_ONLY <= set(leader_m), (BOTH | LEADER_ONLY) - set(leader_m)
        assert BOTH <= set(standby_m), BOTH - set(standby_m)
        assert not LEADER_ONLY & set(standby_m), LEADER_ONLY & set(standby_m)
        assert not [n for n in standby_m if n.startswith(("scheduler_", "policy_scheduler_"))
                    and n.split("_bucket")[0].split("_count")[0].split("_sum")[0] not in
                    {"scheduler_cache_size", "scheduler_event_handling_duration_seconds", "policy_scheduler_nodes",
                     "policy_scheduler_policies", "policy_scheduler_build_info"}
                    and not n.startswith(REPLICA_OWN)]
        # and its own caches and decision key (what a standby holds, not what it schedules)
        assert {"policy_scheduler_content_cache_bytes", "policy_scheduler_decision_key_shared"} <= set(standby_m)
        assert value(standby_m, "scheduler_cache_size", type="pods") >= 5  # its cache saw the bindings
        assert value(standby_m, "leader_election_master_status") == 0
    finally:
        for r in reps:
            r.stop()
        policies.delete_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies", sched)
