"""docs/grafana-dashboard.json stays in step with the metrics the operator exports: every series
a panel or variable queries exists in the Telemetry registry (a renamed metric fails here)."""

import json
from pathlib import Path

import render_dashboard  # hack/, on sys.path through tests/conftest.py

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def test_dashboard_parses_with_its_datasource_input_and_profile_variable():
    dash = json.loads(DASHBOARD.read_text())
    assert any(i.get("name") == "DS_PROMETHEUS" for i in dash.get("__inputs", []))
    assert "profile" in {v["name"] for v in dash["templating"]["list"]}
    assert len(list(render_dashboard.panels(dash))) >= 10


def test_every_queried_series_is_exported_by_the_operator():
    dash = json.loads(DASHBOARD.read_text())
    assert render_dashboard.registry_series() is not None  # the package is importable here
    assert render_dashboard.check_dashboard(dash) == []


def test_the_check_catches_an_unknown_series():
    dash = json.loads(DASHBOARD.read_text())
    panel = next(p for p in render_dashboard.panels(dash) if p.get("targets"))
    panel["targets"][0]["expr"] = "rate(scheduler_no_such_metric_total[1m])"
    assert any("scheduler_no_such_metric_total" in p for p in render_dashboard.check_dashboard(dash))
