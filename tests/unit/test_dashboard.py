"""docs/grafana-dashboard.json stays in step with the metrics the operator exports: every series
a panel or variable queries exists in the Telemetry registry (a renamed metric fails here); the
JSON is hack/dashboard.py's output."""

import json
import re
from pathlib import Path

import dashboard  # hack/, on sys.path through tests/conftest.py
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
