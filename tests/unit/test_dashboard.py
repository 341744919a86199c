"""docs/grafana-dashboard.json stays in step with the metrics the operator exports: every series
a panel or variable queries exists in the Telemetry registry (a renamed metric fails here); the
JSON is hack/dashboard.py's output."""

import json
import re
from pathlib import Path

import dashboard  # hack/, on sys.path through pyproject.toml
import render_dashboard

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def test_dashboard_parses_with_its_datasource_input_and_profile_variable():
    dash = json.loads(DASHBOARD.read_text())
    assert any(i.get("name") == "DS_PROMETHEUS" for i in dash.get("__inputs", []))
    assert "profile" in {v["name"] for v in dash["templating"]["list"]}
    assert len(list(render_dashboard.panels(dash))) >= 10


def test_the_committed_json_is_the_generators_output():
    assert DASHBOARD.read_text() == dashboard.render(), "run .venv/bin/python hack/dashboard.py"
    assert dashboard.render() == dashboard.render()  # deterministic


def test_every_queried_series_is_exported_by_the_operator():
    dash = json.loads(DASHBOARD.read_text())
    assert render_dashboard.registry_series() is not None  # the package is importable here
    assert render_dashboard.check_dashboard(dash) == []


def test_the_check_catches_an_unknown_series():
    dash = json.loads(DASHBOARD.read_text())
    panel = next(p for p in render_dashboard.panels(dash) if p.get("targets"))
    panel["targets"][0]["expr"] = "rate(scheduler_no_such_metric_total[1m])"
    assert any("scheduler_no_such_metric_total" in p for p in render_dashboard.check_dashboard(dash))


def test_panels_do_not_overlap():
    dash = json.loads(DASHBOARD.read_text())
    boxes = [(p["title"], p["gridPos"]) for p in dash["panels"]]
    for i, (a, ga) in enumerate(boxes):
        for b, gb in boxes[i + 1:]:
            apart = (ga["x"] + ga["w"] <= gb["x"] or gb["x"] + gb["w"] <= ga["x"]
                     or ga["y"] + ga["h"] <= gb["y"] or gb["y"] + gb["h"] <= ga["y"])
            assert apart, f"{a!r} and {b!r} overlap"
    assert len({p["id"] for p in render_dashboard.panels(dash)}) == len(render_dashboard.panels(dash))


def _rollout_panels(dash: dict) -> list[dict]:
    top = dash["panels"]
    start = next(i for i, p in enumerate(top) if p.get("type") == "row" and p.get("title") == "Rollouts")
    end = next((i for i in range(start + 1, len(top)) if top[i].get("type") == "row"), len(top))
    return top[start + 1:end]


def test_rollouts_row_reads_every_rollout_metric_filtered_by_job_and_policy():
    dash = json.loads(DASHBOARD.read_text())
    rollout_panels = _rollout_panels(dash)
    assert {p["title"] for p in rollout_panels} >= {
        "Rollout phase by policy", "Shadow: changed decisions", "Canary attempts by arm and result",
        "Canary failure rate by arm", "Rollbacks and promotions"}
    exprs = [t["expr"] for p in rollout_panels for t in p["targets"]]
    read = set().union(*(render_dashboard.series_names(e) for e in exprs))
    assert read == {n for n in render_dashboard.METRICS if n.startswith("policy_scheduler_rollout_")}
    for p in rollout_panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
        for t in p["targets"]:
            # every selector of the expression: the scrape job and the policy variable (the rollout
            # metrics' policy label holds what scheduler_*'s profile label holds)
            selectors = re.findall(r"policy_scheduler_rollout_\w+\{([^}]*)\}", t["expr"])
            assert selectors and all('job=~"$job"' in s and 'policy=~"$profile"' in s for s in selectors), t["expr"]


def test_phase_panel_maps_every_rollout_phase():
    from policy_scheduler.cache.rollouts import (ABORTED, PROGRESSING, PROMOTED, PROMOTING, ROLLED_BACK,
                                                 SHADOWING)

    dash = json.loads(DASHBOARD.read_text())
    panel = next(p for p in _rollout_panels(dash) if p["title"] == "Rollout phase by policy")
    codes = {ph: int(n) for ph, n in re.findall(r'phase="(\w+)"\}\s*\*\s*(\d+)', panel["targets"][0]["expr"])}
    assert set(codes) == {SHADOWING, PROGRESSING, PROMOTING, PROMOTED, ROLLED_BACK, ABORTED}
    assert len(set(codes.values())) == len(codes) and 0 not in codes.values()  # 0: no phase is 1
    texts = {int(k): v["text"] for m in panel["fieldConfig"]["defaults"]["mappings"] for k, v in m["options"].items()}
    assert {texts[n] for n in codes.values()} == set(codes) and all(texts[n] == ph for ph, n in codes.items())
    assert any(r.get("id") == panel["type"] for r in dash["__requires"])


# ---------------------------------------------------------------------------------------------
# two replicas: the leader and a standby export the cluster state alike

def _exprs(dash: dict) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in render_dashboard.panels(dash) for t in p.get("targets", [])]


def test_every_cluster_state_gauge_is_aggregated_with_max_not_sum():
    dash = json.loads(DASHBOARD.read_text())
    assert dashboard.replica_problems(dash) == []
    reads = [(title, expr) for title, expr in _exprs(dash)
             if render_dashboard.series_names(expr) & dashboard.REPLICATED]
    assert {t for t, _ in reads} >= {"Nodes", "Policies not Ready", "Nodes and policies"}
    for title, expr in reads:
        assert not re.search(r"\b(sum|avg|count)\b", expr), (title, expr)


def test_the_replica_check_catches_a_sum_and_accepts_max_or_the_leaders_series():
    dash = json.loads(DASHBOARD.read_text())
    nodes = next(p for p in render_dashboard.panels(dash) if p.get("title") == "Nodes")
    for expr, bad in [('sum(policy_scheduler_nodes{job=~"$job"})', True),
                      ('policy_scheduler_nodes{job=~"$job"}', True),
                      ('max(sum by (instance) (policy_scheduler_nodes{job=~"$job"}))', True),
                      ('sum(max by (instance) (policy_scheduler_nodes{job=~"$job"}))', False),
                      ('max by (ready) (policy_scheduler_policies{job=~"$job"})', False),
                      ('sum(policy_scheduler_nodes{job=~"$job"} * on(instance) group_left() '
                       '(leader_election_master_status{job=~"$job"} == 1))', False)]:
        nodes["targets"][0]["expr"] = expr
        assert bool(dashboard.replica_problems(dash)) is bad, expr
    assert any("policy_scheduler_nodes" in p for p in render_dashboard.check_dashboard(
        {**dash, "panels": [dict(nodes, targets=[dict(nodes["targets"][0], expr="sum(policy_scheduler_nodes)")])]}))


def _row(dash: dict, title: str) -> list[dict]:
    top = dash["panels"]
    start = next(i for i, p in enumerate(top) if p.get("type") == "row" and p.get("title") == title)
    end = next((i for i in range(start + 1, len(top)) if top[i].get("type") == "row"), len(top))
    return top[start + 1:end]


def _reads(panels: list[dict]) -> set[str]:
    return set().union(*(render_dashboard.series_names(t["expr"]) for p in panels for t in p["targets"]))


def test_leader_preemption_and_tuner_rows():
    dash = json.loads(DASHBOARD.read_text())
    leader = {p["title"]: p for p in _row(dash, "Replicas and leader election")}
    assert set(leader) == {"Leaders", "Replicas up", "Lease transitions (range)", "Leader by replica",
                           "Leader by replica over time"}
    assert _reads(list(leader.values())) == {"leader_election_master_status", "up"}
    assert leader["Leaders"]["targets"][0]["expr"] == 'sum(leader_election_master_status{job=~"$job"})'
    # transitions are derived from the status: its rises (changes minus falls) over the range
    lt = leader["Lease transitions (range)"]["targets"][0]["expr"]
    assert "changes(" in lt and "resets(" in lt and "[$__range]" in lt
    assert "changes(" in leader["Lease transitions (range)"]["description"]
    for title in ("Leader by replica", "Leader by replica over time"):
        assert "by (instance)" in leader[title]["targets"][0]["expr"]
        texts = {k: v["text"] for m in leader[title]["fieldConfig"]["defaults"]["mappings"]
                 for k, v in m["options"].items()}
        assert texts == {"0": "standby", "1": "leader"}

    preemption = _row(dash, "Preemption")
    assert _reads(preemption) == {"scheduler_preemption_attempts_total", "scheduler_preemption_victims_sum",
                                  "scheduler_preemption_victims_count", "scheduler_preemption_victims_bucket",
                                  "scheduler_workload_preemption_attempts_total",
                                  "scheduler_workload_preemption_victims_sum",
                                  "scheduler_preemption_evaluation_duration_seconds_bucket"}
    assert {p["title"] for p in _row(dash, "Pod groups")} == {"Pod group attempts by result",
                                                              "Pod group attempt duration"}
    tuner = _row(dash, "Tuner")
    assert _reads(tuner) == {"policy_scheduler_tuning_evaluations_total", "policy_scheduler_tuning_replays_total",
                             "policy_scheduler_tuning_evaluation_duration_seconds_sum",
                             "policy_scheduler_tuning_evaluation_duration_seconds_count",
                             "policy_scheduler_tuning_evaluation_duration_seconds_bucket"}
    for p in tuner:
        for t in p["targets"]:
            assert all('job=~"$job"' in s and 'policy=~"$profile"' in s
                       for s in re.findall(r"policy_scheduler_tuning_\w+\{([^}]*)\}", t["expr"])), t["expr"]
    assert any(r.get("id") == "stat" for r in dash["__requires"])


def test_every_selector_is_filtered_by_the_job():
    dash = json.loads(DASHBOARD.read_text())
    for title, expr in _exprs(dash):
        for name in render_dashboard.series_names(expr):
            for m in re.finditer(rf"\b{name}\b(\{{[^}}]*\}})?", expr):
                assert m.group(1) and 'job=~"$job"' in m.group(1), (title, expr)


def test_replica_row_reads_each_replicas_own_series_per_instance_and_the_cache_with_max():
    dash = json.loads(DASHBOARD.read_text())
    panels = {p["title"]: p for p in _row(dash, "Replicas: process, cache and API client")}
    assert set(panels) == {"Version by replica", "CPU per replica", "Resident memory per replica", "Scheduler cache",
                           "API requests by code", "API request latency p99 by verb",
                           "Event handling duration p99 per replica"}
    for title in ("Version by replica", "CPU per replica", "Resident memory per replica",
                  "Event handling duration p99 per replica"):
        t = panels[title]["targets"][0]
        assert re.search(r"by \((le, )?instance\b", t["expr"]) and "{{instance}}" in t["legendFormat"], title
    assert panels["Scheduler cache"]["targets"][0]["expr"].startswith("max by (type) (scheduler_cache_size{")
    # API requests: every request of either replica is a real one, so the sum over replicas is the truth
    assert _reads([panels["API requests by code"]]) == {"rest_client_requests_total"}
    assert _reads([panels["API request latency p99 by verb"]]) == {"rest_client_request_duration_seconds_bucket"}
    per_replica = set().union(*(dashboard.PER_REPLICA, dashboard.REPLICATED))
    assert {n.removesuffix("_bucket") for n in _reads(list(panels.values()))} <= per_replica
