#!/usr/bin/env python3
"""Generate docs/grafana-dashboard.json: the Grafana dashboard of policy-scheduler.

The JSON is this script's output, never edited by hand: change the panels here and run

    .venv/bin/python hack/dashboard.py            # writes docs/grafana-dashboard.json
    .venv/bin/python hack/dashboard.py --check    # exit 1 when the committed JSON differs

tests/unit/test_dashboard.py fails when the committed JSON is not this script's output. Panels are
placed in rows, left to right, a new line when the next one does not fit in the 24 columns, so two
panels never overlap; ids are given in order. The output is deterministic (same input, same bytes).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "grafana-dashboard.json"

DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
J = 'job=~"$job"'
JP = 'job=~"$job", profile=~"$profile"'
JPOL = 'job=~"$job", policy=~"$profile"'
RATE = "[$__rate_interval]"

# How each series behaves with two replicas (manifests/04-deployment.yaml: a leader and a standby
# whose informer cache is warm), and so how a panel aggregates it over the job's instances:
# - cluster state both replicas export with the same value (their caches hold the same cluster):
#   max() over the instances, never sum() (two replicas would show twice the truth);
REPLICATED = {"policy_scheduler_nodes", "policy_scheduler_policies", "scheduler_cache_size"}
# - per replica, each its own value: shown by instance, or summed where the total is the truth
#   (leaders = the sum of the 0/1 statuses; API requests of both replicas are all real requests);
PER_REPLICA = {"leader_election_master_status", "up", "policy_scheduler_build_info",
               "scheduler_event_handling_duration_seconds", "rest_client_requests_total",
               "rest_client_request_duration_seconds", "process_cpu_seconds_total", "process_resident_memory_bytes",
               "process_open_fds", "python_gc_collections_total"}
# - everything else (attempts, durations, the queue, preemption, bindings, the tuner, rollouts) is
#   exported by the leader only (absent on a standby): sum() over the instances is the leader's.


# ------------------------------------------------------------------------------------ panel builders
def target(expr: str, legend: str = "", ref: str = "A") -> dict:
    return {"datasource": DS, "editorMode": "code", "expr": expr, "legendFormat": legend, "range": True,
            "refId": ref}


def targets(*pairs: tuple[str, str]) -> list[dict]:
    """(expr, legend) pairs, refIds A, B, ..."""
    return [target(e, lg, chr(ord("A") + i)) for i, (e, lg) in enumerate(pairs)]


def steps(*more: tuple[str, float], base: str = "green") -> dict:
    return {"mode": "absolute", "steps": [{"color": base, "value": None}]
            + [{"color": c, "value": v} for c, v in more]}


def _panel(kind: str, title: str, description: str, tgts: list[dict], w: int, h: int, defaults: dict,
           options: dict, overrides: list | None = None) -> dict:
    return {"datasource": DS, "description": description, "title": title, "type": kind,
            "gridPos": {"h": h, "w": w}, "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
            "options": options, "targets": tgts}


def stat(title: str, description: str, expr: str, *, unit: str = "short", thresholds: dict | None = None,
         decimals: int | None = None, mappings: list | None = None, legend: str = "", text_mode: str = "auto",
         graph_mode: str = "area", w: int = 4, h: int = 4) -> dict:
    defaults: dict = {"color": {"mode": "thresholds"}, "mappings": mappings or [], "unit": unit,
                      "thresholds": thresholds or steps()}
    if decimals is not None:
        defaults["decimals"] = decimals
    options = {"colorMode": "value", "graphMode": graph_mode, "justifyMode": "auto", "orientation": "auto",
               "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
               "showPercentChange": False, "textMode": text_mode, "wideLayout": True}
    return _panel("stat", title, description, [target(expr, legend)], w, h, defaults, options)


def value_map(*pairs: tuple[int, str, str]) -> list[dict]:
    """(value, text, color) -> a Grafana value mapping."""
    return [{"type": "value", "options": {str(v): {"color": c, "index": i, "text": t}
                                          for i, (v, t, c) in enumerate(pairs)}}]


def timeseries(title: str, description: str, tgts: list[dict], *, unit: str = "short", fill: int = 0,
               draw: str = "line", interpolation: str = "linear", table_legend: bool = False,
               maximum: float | None = None, decimals: int | None = None, overrides: list | None = None,
               w: int = 12, h: int = 8) -> dict:
    custom = {"axisBorderShow": False, "axisCenteredZero": False, "axisColorMode": "text", "axisLabel": "",
              "axisPlacement": "auto", "barAlignment": 0, "drawStyle": draw, "fillOpacity": fill,
              "gradientMode": "none", "hideFrom": {"legend": False, "tooltip": False, "viz": False},
              "insertNulls": False, "lineInterpolation": interpolation, "lineWidth": 1, "pointSize": 4,
              "scaleDistribution": {"type": "linear"}, "showPoints": "never", "spanNulls": False,
              "stacking": {"group": "A", "mode": "none"}, "thresholdsStyle": {"mode": "off"}}
    defaults: dict = {"color": {"mode": "palette-classic"}, "custom": custom, "mappings": [], "unit": unit,
                      "thresholds": steps(), "min": 0}
    if maximum is not None:
        defaults["max"] = maximum
    if decimals is not None:
        defaults["decimals"] = decimals
    legend = ({"calcs": ["max", "mean"], "displayMode": "table", "placement": "right", "showLegend": True}
              if table_legend else {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": True})
    options = {"legend": legend, "tooltip": {"mode": "multi", "sort": "desc"}}
    return _panel("timeseries", title, description, tgts, w, h, defaults, options, overrides)


def state_timeline(title: str, description: str, tgts: list[dict], mappings: list[dict], *, w: int = 12,
                   h: int = 8, show_legend: bool = False) -> dict:
    defaults = {"color": {"mode": "thresholds"},
                "custom": {"fillOpacity": 70, "hideFrom": {"legend": False, "tooltip": False, "viz": False},
                           "insertNulls": False, "lineWidth": 0, "spanNulls": False},
                "mappings": mappings, "unit": "short", "thresholds": steps(base="text")}
    options = {"alignValue": "left",
               "legend": {"displayMode": "list", "placement": "bottom", "showLegend": show_legend},
               "mergeValues": True, "rowHeight": 0.9, "showValue": "auto",
               "tooltip": {"mode": "single", "sort": "none"}}
    return _panel("state-timeline", title, description, tgts, w, h, defaults, options)


def row(title: str) -> dict:
    return {"collapsed": False, "gridPos": {"h": 1, "w": 24}, "panels": [], "title": title, "type": "row"}


def layout(items: list[dict]) -> list[dict]:
    """Ids in order and positions: a row takes a whole line; panels go left to right and start a new
    line when the next one does not fit in 24 columns (the line's height is its tallest panel)."""
    out, x, y, line_h = [], 0, 0, 0
    for i, p in enumerate(items, 1):
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if p["type"] == "row" or x + w > 24:
            x, y, line_h = 0, y + line_h, 0
        pos = {"h": h, "w": w, "x": x, "y": y}
        if p["type"] == "row":
            p = {"collapsed": p["collapsed"], "gridPos": pos, "id": i,
                 **{k: p[k] for k in ("panels", "title", "type")}}
            y += 1
        else:
            p = {"datasource": p["datasource"], "description": p["description"], "id": i, "title": p["title"],
                 "type": p["type"], "gridPos": pos, **{k: p[k] for k in ("fieldConfig", "options", "targets")}}
            x, line_h = x + w, max(line_h, h)
        out.append(p)
    return out


# ------------------------------------------------------------------------------------ the panels
def hist_quantiles(metric: str, selector: str, *qs: float) -> list[dict]:
    return targets(*((f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{selector}}}{RATE})))",
                      f"p{round(q * 100)}") for q in qs))


ROLLOUT_PHASES = [("Shadowing", "blue"), ("Progressing", "yellow"), ("Promoting", "purple"), ("Promoted", "green"),
                  ("RolledBack", "red"), ("Aborted", "#8e8e8e")]


def overview() -> list[dict]:
    return [
        row("Overview"),
        stat("Scheduled / s", "Scheduling attempts that found a node, per second "
             "(scheduler_schedule_attempts_total{result=\"scheduled\"}; the leader's: 0 for a new leader that has "
             "bound nothing yet).",
             f'sum(rate(scheduler_schedule_attempts_total{{{JP}, result="scheduled"}}{RATE})) or vector(0)',
             unit="ops", decimals=1),
        stat("Pending pods", "Pods in the scheduling queue, all sub-queues (scheduler_pending_pods).",
             f"sum(scheduler_pending_pods{{{J}}})"),
        stat("Unschedulable pods", "Pods waiting in the unschedulable pool for an event that may help them "
             "(scheduler_pending_pods{queue=\"unschedulable\"}).",
             f'sum(scheduler_pending_pods{{{J}, queue="unschedulable"}})', thresholds=steps(("orange", 1))),
        stat("Nodes", "Nodes in the scheduler's cache (policy_scheduler_nodes), the same as kubectl get nodes "
             "counts. Every replica exports it (a standby keeps its cache warm): the highest over the replicas, "
             "not their sum.",
             f"max(policy_scheduler_nodes{{{J}}})"),
        stat("Policies not Ready", "SchedulingPolicies of this scheduler name with Ready=False "
             "(policy_scheduler_policies{ready=\"false\"}, the highest over the replicas: each exports it): "
             "kubectl describe spol says which field is wrong.",
             f'max(policy_scheduler_policies{{{J}, ready="false"}}) or vector(0)', thresholds=steps(("red", 1))),
        stat("Binding errors (range)", "Failed pods/binding requests over the dashboard's time range "
             "(policy_scheduler_binding_errors_total). A few 404/409 are normal.",
             f"sum(increase(policy_scheduler_binding_errors_total{{{J}}}[$__range])) or vector(0)",
             thresholds=steps(("orange", 10)), decimals=0),
    ]


def scheduling() -> list[dict]:
    return [
        row("Scheduling"),
        timeseries("Schedule attempts by result", "Scheduling attempts per second by result "
                   "(scheduler_schedule_attempts_total): scheduled (the pod was bound; counted at the binding, as "
                   "upstream), unschedulable (no node fits, a Reserve, Permit or binding rejection, or no usable "
                   "policy), error (a plugin or the binding failed).",
                   targets((f"sum by (result) (rate(scheduler_schedule_attempts_total{{{JP}}}{RATE}))", "{{result}}")),
                   unit="ops", fill=10),
        timeseries("Scheduling attempt duration", "p50 and p99 of one attempt, over all results "
                   "(scheduler_scheduling_attempt_duration_seconds): from the start of its scheduling cycle to its "
                   "end, so for a bound pod the decision and the binding, as upstream.",
                   hist_quantiles("scheduler_scheduling_attempt_duration_seconds", JP, 0.5, 0.99), unit="s"),
        timeseries("Pod scheduling SLI duration", "p50 and p99 from the pod entering the queue to its binding, over "
                   "all attempts (scheduler_pod_scheduling_sli_duration_seconds): from its first entry into the "
                   "active queue, so time spent gated is not counted.",
                   hist_quantiles("scheduler_pod_scheduling_sli_duration_seconds", J, 0.5, 0.99), unit="s"),
        timeseries("Unschedulable pods by plugin", "Pods in the unschedulable pool by the plugin that rejected them "
                   "(scheduler_unschedulable_pods); a pod rejected by two plugins counts under both. Gated pods "
                   "count under their PreEnqueue plugin (SchedulingGates), pods without a usable policy under "
                   "PolicySelection.",
                   targets((f"sum by (plugin) (scheduler_unschedulable_pods{{{JP}}})", "{{plugin}}")), fill=10),
    ]


def queue() -> list[dict]:
    return [
        row("Scheduling queue"),
        timeseries("Pending pods by queue", "Pods in the scheduling queue by sub-queue (scheduler_pending_pods): "
                   "active (ready to be decided), backoff (waiting out their backoff), unschedulable (waiting for an "
                   "event that may help), gated (held by scheduling gates). Pods being decided or bound are in none.",
                   targets((f"sum by (queue) (scheduler_pending_pods{{{J}}})", "{{queue}}")), fill=10),
        timeseries("Incoming pods by event", "Pods added to a sub-queue (active, backoff, unschedulable, gated) per "
                   "second, by the event that put them there (scheduler_queue_incoming_pods_total): "
                   "UnscheduledPodAdd (new pods), ScheduleAttemptFailure (back after an attempt), BackoffComplete, "
                   "cluster events such as NodeAdd or AssignedPodDelete that moved waiting pods, PolicyChange, "
                   "UnschedulableTimeout (the 5-minute flush).",
                   targets((f"sum by (event) (rate(scheduler_queue_incoming_pods_total{{{J}}}{RATE}))", "{{event}}")),
                   unit="ops", fill=10),
    ]


def framework() -> list[dict]:
    return [
        row("Framework"),
        timeseries("Extension point duration p99", "p99 time of each extension point per cycle "
                   "(scheduler_framework_extension_point_duration_seconds): PreFilter, Filter (over every node), "
                   "PostFilter, PreScore, Score (with NormalizeScore), Reserve, Permit, PreBind, Bind, PostBind. "
                   "Upstream's buckets end at 204.8 ms: a p99 flat at 204.8 ms means more than that (Bind includes "
                   "the API request).",
                   targets(("histogram_quantile(0.99, sum by (le, extension_point) "
                            f"(rate(scheduler_framework_extension_point_duration_seconds_bucket{{{JP}}}{RATE})))",
                            "{{extension_point}}")), unit="s", table_legend=True),
        timeseries("Plugin execution duration p99", "p99 time of each plugin at each extension point "
                   "(scheduler_plugin_execution_duration_seconds), timed in a sample of cycles "
                   "(--plugin-metrics-sample-percent, 10 by default). Find the plugin behind a slow extension point "
                   "here. Upstream's buckets end at 22 ms: a p99 flat at 22 ms means more than that.",
                   targets(("histogram_quantile(0.99, sum by (le, plugin, extension_point) "
                            f"(rate(scheduler_plugin_execution_duration_seconds_bucket{{{J}}}{RATE})))",
                            "{{plugin}} {{extension_point}}")), unit="s", table_legend=True),
    ]


def binding() -> list[dict]:
    return [
        row("Binding and operator"),
        timeseries("Binding duration", "p50 and p99 of a successful pods/binding request "
                   "(policy_scheduler_binding_duration_seconds): the API server's answer time as the operator sees it.",
                   hist_quantiles("policy_scheduler_binding_duration_seconds", J, 0.5, 0.99), unit="s", w=8),
        timeseries("Binding errors by code", "Failed pods/binding requests per second by HTTP status or 'transport' "
                   "(policy_scheduler_binding_errors_total). 404 and 409 now and then are normal (pod deleted, "
                   "already bound).",
                   targets((f"sum by (code) (rate(policy_scheduler_binding_errors_total{{{J}}}{RATE}))", "{{code}}")),
                   unit="ops", draw="bars", fill=80, w=8),
        timeseries("Events and status writes dropped", "Kubernetes Events, pod conditions and policy status writes "
                   "that failed or were dropped, per second, by kind (policy_scheduler_events_dropped_total).",
                   targets((f"sum by (kind) (rate(policy_scheduler_events_dropped_total{{{J}}}{RATE}))", "{{kind}}")),
                   unit="ops", draw="bars", fill=80, w=8),
        timeseries("Nodes and policies", "Nodes in the scheduler's cache (policy_scheduler_nodes) and "
                   "SchedulingPolicies by readiness (policy_scheduler_policies): cluster state every replica exports, "
                   "so the highest over the replicas, not their sum.",
                   targets((f"max(policy_scheduler_nodes{{{J}}})", "nodes"),
                           (f"max by (ready) (policy_scheduler_policies{{{J}}})", "policies ready={{ready}}")),
                   w=24, h=6),
    ]


def rollouts() -> list[dict]:
    phase = "max by (policy) (\n" + "\n  or ".join(
        f'policy_scheduler_rollout_phase{{{JPOL}, phase="{ph}"}} * {i}'
        for i, (ph, _) in enumerate(ROLLOUT_PHASES, 1)) + "\n)"
    options = {"0": {"color": "transparent", "index": 0, "text": "none"}}
    options.update({str(i): {"color": c, "index": i, "text": ph} for i, (ph, c) in enumerate(ROLLOUT_PHASES, 1)})
    shadow = "policy_scheduler_rollout_shadow_decisions_total"
    attempts = "policy_scheduler_rollout_attempts_total"
    return [
        row("Rollouts"),
        state_timeline("Rollout phase by policy", "The phase of each policy's rollout (policy_scheduler_rollout_phase, "
                       "1 for the phase it is in): Shadowing (the candidate decides beside the policy's chain, never "
                       "binds), Progressing (a canary: percent of the pods scheduled with the candidate), Promoting "
                       "(the spec write under way), Promoted, RolledBack (an analysis breach: every pod back on the "
                       "policy's chain), Aborted (spec.rollout removed). Set by the leader every second; a policy "
                       "without a rollout since the leader started has no row. kubectl get spol shows the same in the "
                       "ROLLOUT column.",
                       targets((phase, "{{policy}}")), [{"type": "value", "options": options}]),
        timeseries("Shadow: changed decisions", "Share of a shadowed candidate's decisions that changed, per policy: "
                   "rate of outcome=\"changed\" over the rate of all "
                   "(policy_scheduler_rollout_shadow_decisions_total). "
                   "Changed: the node the policy's chain chose is not among the candidate's best-scored nodes (ties "
                   "count as the same), or only one of the two finds a node. Right axis: decisions compared per "
                   "second. Which plugins moved them, and sample pods: status.rollout.shadow, policy-scheduler "
                   "rollout diff.",
                   targets((f'sum by (policy) (rate({shadow}{{{JPOL}, outcome="changed"}}{RATE}))\n'
                            f"/ sum by (policy) (rate({shadow}{{{JPOL}}}{RATE}))", "{{policy}} changed"),
                           (f"sum by (policy) (rate({shadow}{{{JPOL}}}{RATE}))", "{{policy}} compared / s")),
                   unit="percentunit", fill=10, overrides=[{
                       "matcher": {"id": "byFrameRefID", "options": "B"},
                       "properties": [{"id": "unit", "value": "ops"}, {"id": "custom.axisPlacement", "value": "right"},
                                      {"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
                                      {"id": "custom.fillOpacity", "value": 0}]}]),
        timeseries("Canary attempts by arm and result", "Scheduling attempts of a canary rollout's pods per second, by "
                   "policy, arm (canary: the pods whose UID hash falls in spec.rollout.percent, decided by the "
                   "candidate; stable: the others) and result (scheduled: the cycle found a node; unschedulable: it "
                   "found none or failed) (policy_scheduler_rollout_attempts_total). Bindings are in "
                   "status.rollout.canary and .stable.",
                   targets((f"sum by (policy, arm, result) (rate({attempts}{{{JPOL}}}{RATE}))",
                            "{{policy}} {{arm}} {{result}}")), unit="ops", fill=10, w=8),
        timeseries("Canary failure rate by arm", "Unschedulable attempts over all attempts, per policy and arm "
                   "(policy_scheduler_rollout_attempts_total), over the dashboard's rate interval. The analysis "
                   "compares the same rate over its own window (spec.rollout.analysis.window, default 5m) and rolls "
                   "the candidate back when the canary's exceeds the stable one's by more than maxFailureRateIncrease "
                   "(default 0.1); what it measured last is in status.rollout.analysis.",
                   targets((f'(sum by (policy, arm) (rate({attempts}{{{JPOL}, result="unschedulable"}}{RATE}))\n'
                            f"  or sum by (policy, arm) (rate({attempts}{{{JPOL}}}{RATE})) * 0)\n"
                            f"/ sum by (policy, arm) (rate({attempts}{{{JPOL}}}{RATE}))", "{{policy}} {{arm}}")),
                   unit="percentunit", maximum=1, w=8),
        timeseries("Rollbacks and promotions", "Candidates rolled back by the canary analysis "
                   "(policy_scheduler_rollout_rollbacks_total) and promoted "
                   "(policy_scheduler_rollout_promotions_total, "
                   "counted when the spec write succeeded), per policy: the counters themselves, since each replica's "
                   "start (the leader counts), so a step is one rollback or promotion, the first one included. Why: "
                   "the policy's RolloutRolledBack / RolloutPromoting events (kubectl describe spol).",
                   targets((f"sum by (policy) (policy_scheduler_rollout_rollbacks_total{{{JPOL}}})",
                            "{{policy}} rolled back"),
                           (f"sum by (policy) (policy_scheduler_rollout_promotions_total{{{JPOL}}})",
                            "{{policy}} promoted")),
                   interpolation="stepAfter", decimals=0, w=8),
    ]


LEADER = f"leader_election_master_status{{{J}}}"
LEADER_MAP = value_map((0, "standby", "blue"), (1, "leader", "green"))


def leadership() -> list[dict]:
    return [
        row("Replicas and leader election"),
        stat("Leaders", "Replicas that hold the Lease now: the sum of leader_election_master_status (1 on the leader, "
             "0 on a standby) over the job's instances. 1 is right; 0 means nobody schedules (a lease being taken "
             "over lasts at most the lease duration, 15 s); more than 1 should never last a scrape. No data: the "
             "operator runs with --leader-elect=false.",
             f"sum({LEADER})", thresholds=steps(("green", 1), ("red", 2), base="red"), decimals=0),
        stat("Replicas up", "Replicas Prometheus scrapes successfully (up, a series Prometheus itself records per "
             "target): the Deployment's replicas when all are running.",
             f"sum(up{{{J}}})", thresholds=steps(("green", 1), base="red"), decimals=0),
        stat("Lease transitions (range)", "Times a replica became the leader over the dashboard's time range. There is "
             "no transitions counter: it is derived from leader_election_master_status, per instance the changes "
             "of the 0/1 status minus its falls (changes() - resets()), i.e. its rises from standby to leader, "
             "summed over the instances. A replica that was already leading at its first scrape (it started and "
             "won the Lease within a scrape interval) is not counted: Leader by replica over time shows it.",
             f"sum(changes({LEADER}[$__range]) - resets({LEADER}[$__range])) or vector(0)",
             thresholds=steps(("orange", 1), ("red", 3)), decimals=0),
        stat("Leader by replica", "Which replica leads: leader_election_master_status per instance (leader 1, "
             "standby 0). Only the leader schedules, binds and exports the scheduling series; a standby keeps its "
             "cache warm and takes the Lease over when the leader stops renewing it.",
             f"max by (instance) ({LEADER})", mappings=LEADER_MAP, legend="{{instance}}",
             text_mode="value_and_name", graph_mode="none", thresholds=steps(base="text"), w=12),
        state_timeline("Leader by replica over time", "leader_election_master_status per instance over time: a change "
                       "of color is a lease transition (a failover, a rolling update). A replica that stopped has no "
                       "row after its last scrape.",
                       targets((f"max by (instance) ({LEADER})", "{{instance}}")), LEADER_MAP, w=24, h=5),
    ]


def preemption() -> list[dict]:
    victims, wvictims = "scheduler_preemption_victims", "scheduler_workload_preemption_victims"
    evaluation = "scheduler_preemption_evaluation_duration_seconds"
    return [
        row("Preemption"),
        timeseries("Preemption attempts and victims", "Per second: DefaultPreemption runs for pods that no node fits "
                   "(scheduler_preemption_attempts_total, a candidate found or not) and the victims they chose (the "
                   "sum of scheduler_preemption_victims); preemptions for pod groups by result "
                   "(scheduler_workload_preemption_attempts_total) and their victims "
                   "(scheduler_workload_preemption_victims). The leader's alone.",
                   targets((f"sum(rate(scheduler_preemption_attempts_total{{{J}}}{RATE}))", "attempts / s"),
                           (f"sum(rate({victims}_sum{{{J}}}{RATE}))", "victims / s"),
                           (f"sum by (result) (rate(scheduler_workload_preemption_attempts_total{{{J}}}{RATE}))",
                            "pod group attempts {{result}} / s"),
                           (f"sum(rate({wvictims}_sum{{{J}}}{RATE}))", "pod group victims / s")),
                   unit="ops", fill=10, w=8),
        timeseries("Victims per preemption", "Victims chosen per preemption that chose some "
                   "(scheduler_preemption_victims): the mean, and p50 and p99 (upstream's buckets: 1 doubling to 64, "
                   "so quantiles are bucket bounds).",
                   targets((f"sum(rate({victims}_sum{{{J}}}{RATE})) / sum(rate({victims}_count{{{J}}}{RATE}))", "mean"))
                   + [dict(t, refId=r) for t, r in zip(hist_quantiles(victims, J, 0.5, 0.99), "BC")], w=8),
        timeseries("Preemption evaluation duration p99", "p99 time to find the victims, by preemptor: pod (the "
                   "PostFilter point) or podgroup (PodGroupPostFilter) (scheduler_preemption_evaluation_duration_"
                   "seconds). It grows with the nodes and the pods of lower priority on them.",
                   targets(("histogram_quantile(0.99, sum by (le, preemptor) "
                            f"(rate({evaluation}_bucket{{{J}}}{RATE})))", "{{preemptor}}")), unit="s", w=8),
    ]


def pod_groups() -> list[dict]:
    attempts = "scheduler_podgroup_schedule_attempts_total"
    duration = "scheduler_podgroup_scheduling_attempt_duration_seconds"
    algorithm = "scheduler_podgroup_scheduling_algorithm_duration_seconds"
    return [
        row("Pod groups"),
        timeseries("Pod group attempts by result", "Scheduling cycles of whole pod groups (PodGroups, gangs) per "
                   "second by result (scheduler_podgroup_schedule_attempts_total): scheduled, unschedulable, "
                   "waiting_on_preemption, error. The leader's alone; a group's members are also counted one by one "
                   "in Schedule attempts by result.",
                   targets((f"sum by (result) (rate({attempts}{{{JP}}}{RATE}))", "{{result}}")), unit="ops", fill=10),
        timeseries("Pod group attempt duration", "p50 and p99 of one pod-group cycle "
                   "(scheduler_podgroup_scheduling_attempt_duration_seconds), and the p99 of its algorithm alone, "
                   "the hierarchy's placements before PodGroupPostFilter "
                   "(scheduler_podgroup_scheduling_algorithm_duration_seconds).",
                   hist_quantiles(duration, JP, 0.5, 0.99)
                   + [target(f"histogram_quantile(0.99, sum by (le) (rate({algorithm}_bucket{{{J}}}{RATE})))",
                             "algorithm p99", "C")], unit="s"),
    ]


def tuner() -> list[dict]:
    ev, rp = "policy_scheduler_tuning_evaluations_total", "policy_scheduler_tuning_replays_total"
    dur = "policy_scheduler_tuning_evaluation_duration_seconds"
    return [
        row("Tuner"),
        timeseries("Tuner evaluations and replays per hour", "Per policy with spec.tuning, over the last hour: "
                   "evaluations that replayed a window of its pods (policy_scheduler_tuning_evaluations_total, one "
                   "every spec.tuning.interval, 10m by default) and the replays they ran "
                   "(policy_scheduler_tuning_replays_total, one per weight vector tried). The leader's alone. What "
                   "an evaluation found: status.tuning.",
                   targets((f"sum by (policy) (increase({ev}{{{JPOL}}}[1h]))", "{{policy}} evaluations"),
                           (f"sum by (policy) (increase({rp}{{{JPOL}}}[1h]))", "{{policy}} replays"))),
        timeseries("Tuner evaluation duration", "Time of one tuner evaluation, per policy, over the last hour "
                   "(policy_scheduler_tuning_evaluation_duration_seconds): the mean and the p99. The replays run in a "
                   "worker process, off the scheduling loop; a long one delays only the next evaluation.",
                   targets((f"sum by (policy) (increase({dur}_sum{{{JPOL}}}[1h])) "
                            f"/ sum by (policy) (increase({dur}_count{{{JPOL}}}[1h]))", "{{policy}} mean"),
                           (f"histogram_quantile(0.99, sum by (le, policy) (increase({dur}_bucket{{{JPOL}}}[1h])))",
                            "{{policy}} p99")), unit="s"),
    ]


def process() -> list[dict]:
    """Per replica: the version, the process, the cache, the API client, the event handlers."""
    return [
        row("Replicas: process, cache and API client"),
        stat("Version by replica", "The operator's version on each replica (policy_scheduler_build_info, 1 with the "
             "version in its labels; also kube_scheduler_version, the release whose behaviour and metrics it "
             "follows, and python_version). Two versions side by side: a rolling update under way, or stuck.",
             f"max by (instance, version) (policy_scheduler_build_info{{{J}}})", legend="{{instance}} {{version}}",
             text_mode="name", graph_mode="none", thresholds=steps(base="text"), w=24, h=3),
        timeseries("CPU per replica", "CPU time per second of each replica's process (process_cpu_seconds_total), "
                   "1 = one core. The leader's grows with the scheduling load; a standby's stays low (its informers "
                   "only). Compare with the container's cpu limit.",
                   targets((f"sum by (instance) (rate(process_cpu_seconds_total{{{J}}}{RATE}))", "{{instance}}")),
                   unit="percentunit", w=8),
        timeseries("Resident memory per replica", "Resident memory of each replica's process "
                   "(process_resident_memory_bytes): both hold the cluster's nodes and pods in their caches, so a "
                   "standby's is near the leader's. Compare with the container's memory limit.",
                   targets((f"sum by (instance) (process_resident_memory_bytes{{{J}}})", "{{instance}}")),
                   unit="bytes", w=8),
        timeseries("Scheduler cache", "Objects in the scheduler's cache by type (scheduler_cache_size): nodes, pods "
                   "(bound and assumed), assumed_pods (decided, binding not yet confirmed). Every replica exports it: "
                   "the highest over the replicas (the leader's assumed pods; a standby has none).",
                   targets((f"max by (type) (scheduler_cache_size{{{J}}})", "{{type}}")), w=8),
        timeseries("API requests by code", "Requests to the API server per second by HTTP status, both replicas "
                   "together (rest_client_requests_total): list/watch of the informers and Lease renewals on both, "
                   "bindings, events and status writes on the leader. 429: the client's --qps/--burst or the API "
                   "server's priority and fairness; 5xx: the API server.",
                   targets((f"sum by (code) (rate(rest_client_requests_total{{{J}}}{RATE}))", "{{code}}")),
                   unit="ops", fill=10, w=8),
        timeseries("API request latency p99 by verb", "p99 time of a request to the API server by verb (the HTTP "
                   "method), both replicas together (rest_client_request_duration_seconds; until the response's "
                   "headers, so a watch counts its start, not its stream).",
                   targets(("histogram_quantile(0.99, sum by (le, verb) "
                            f"(rate(rest_client_request_duration_seconds_bucket{{{J}}}{RATE})))", "{{verb}}")),
                   unit="s", w=8),
        timeseries("Event handling duration p99 per replica", "p99 time to apply one watch event to the cache "
                   "(scheduler_event_handling_duration_seconds, whose event label says which: NodeAdd, "
                   "AssignedPodUpdate, ...), per replica: a standby handles the same events as the leader. Growing: "
                   "a replica's loop is starved (cpu) or an event is expensive.",
                   targets(("histogram_quantile(0.99, sum by (le, instance) "
                            f"(rate(scheduler_event_handling_duration_seconds_bucket{{{J}}}{RATE})))", "{{instance}}")),
                   unit="s", w=8),
    ]


# ------------------------------------------------------------------------------------ the dashboard
def variable(name: str, label: str, query: str, description: str, *, include_all: bool = False) -> dict:
    v: dict = {"allValue": ".*"} if include_all else {}
    v.update({"current": {}, "datasource": DS, "definition": query, "description": description, "hide": 0,
              "includeAll": include_all, "label": label, "multi": include_all, "name": name, "options": [],
              "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
              "refresh": 2, "regex": "", "skipUrlSync": False, "sort": 1, "type": "query"})
    return v


PANEL_PLUGINS = {"stat": "Stat", "state-timeline": "State timeline", "timeseries": "Time series"}


def dashboard() -> dict:
    items = layout(overview() + leadership() + scheduling() + queue() + preemption() + pod_groups() + framework()
                   + binding() + process() + tuner() + rollouts())
    used = sorted({p["type"] for p in items} - {"row"})
    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus",
                      "description": "The Prometheus that scrapes policy-scheduler's /metrics", "type": "datasource",
                      "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "__elements": {},
        "__requires": [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
                       {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"}]
        + [{"type": "panel", "id": t, "name": PANEL_PLUGINS[t], "version": ""} for t in used],
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                                  "name": "Annotations & Alerts", "type": "dashboard"}]},
        "description": "policy-scheduler: the leader and its replicas, scheduling attempts and latency, the scheduling "
                       "queue, preemption, framework and plugin timings, bindings, the tuner, rollouts "
                       "(docs/observability.md).",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [],
        "panels": items,
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["kubernetes", "scheduler", "policy-scheduler"],
        "templating": {"list": [
            variable("job", "Job", "label_values(policy_scheduler_nodes, job)",
                     "The scrape job of policy-scheduler (keeps kube-scheduler's series of the same names out)."),
            variable("profile", "Profile (policy)",
                     f"label_values(scheduler_schedule_attempts_total{{{J}}}, profile)",
                     "The profile: the SchedulingPolicy that decided the pod.", include_all=True),
        ]},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": "policy-scheduler",
        "uid": "policy-scheduler",
        "version": 1,
        "weekStart": "",
    }


AGGREGATIONS = {"sum", "avg", "max", "min", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile"}


def enclosing_aggregations(expr: str, pos: int) -> list[str]:
    """The aggregation operators around position ``pos`` of ``expr``, innermost first (functions such
    as rate() are skipped; ``max by (x) (`` counts as max)."""
    out, depth = [], 0
    for i in range(pos - 1, -1, -1):
        c = expr[i]
        if c == ")":
            depth += 1
        elif c == "(":
            if depth:
                depth -= 1
                continue
            m = re.search(r"(\w+)\s*(?:(?:by|without)\s*\([^()]*\)\s*)?$", expr[:i])
            if m and m.group(1) in AGGREGATIONS:
                out.append(m.group(1))
    return out


def replica_problems(dash: dict) -> list[str]:
    """Expressions that would count a replicated series once per replica: every selector of a
    REPLICATED series must sit directly in max() (or max by), or be joined with the leader's
    status (``* on(instance) group_left() (leader_election_master_status == 1)``)."""
    problems = []
    for p in _all_panels(dash):
        for t in p.get("targets", []):
            expr = t["expr"]
            leader_join = re.search(r"group_left\s*\(\s*\)\s*\(\s*leader_election_master_status\{[^}]*\}\s*==\s*1",
                                    expr)
            for name in sorted(REPLICATED):
                for m in re.finditer(rf"\b{name}\b(?!_)", expr):
                    aggs = enclosing_aggregations(expr, m.start())
                    if leader_join or (aggs and aggs[0] == "max"):
                        continue
                    problems.append(f"{p.get('title', '?')}: {name} is exported by every replica; aggregate it "
                                    f"with max() (here: {aggs[0] if aggs else 'no aggregation'}): {expr}")
    return problems


def _all_panels(dash: dict) -> list[dict]:
    return [q for p in dash.get("panels", []) for q in [p, *p.get("panels", [])]]


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the file differs from the generator's output")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        if not a.out.exists() or a.out.read_text() != text:
            print(f"{a.out} is not hack/dashboard.py's output: run .venv/bin/python hack/dashboard.py",
                  file=sys.stderr)
            return 1
        return 0
    a.out.write_text(text)
    print(f"wrote {a.out} ({len(dashboard()['panels'])} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
