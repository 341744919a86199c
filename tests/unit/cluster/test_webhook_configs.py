"""The webhook configurations in code (an operator outside the cluster registers them) and in
manifests/08-webhooks.yaml (applied with the operator in the cluster) are the same webhooks."""

from __future__ import annotations

from pathlib import Path

import yaml

from policy_scheduler.cluster.webhook_configs import (MUTATING, VALIDATING, configurations, service_client_config,
                                                      url_client_config)

ROOT = Path(__file__).resolve().parents[3]


def manifests() -> dict[str, dict]:
    docs = yaml.safe_load_all((ROOT / "manifests" / "08-webhooks.yaml").read_text())
    return {d["kind"]: d for d in docs if d and d["kind"] in (VALIDATING, MUTATING)}


def test_the_manifests_hold_the_webhooks_of_the_code():
    plain = manifests()
    code = configurations("policy-scheduler", service_client_config("policy-scheduler-system",
                                                                    "policy-scheduler-webhook"))
    assert sorted(plain) == sorted(code) == [MUTATING, VALIDATING]
    for kind in (VALIDATING, MUTATING):
        assert plain[kind]["metadata"]["name"] == code[kind]["metadata"]["name"]
        assert plain[kind]["webhooks"] == code[kind]["webhooks"], kind


def test_outside_the_cluster_every_webhook_calls_the_url_with_the_ca():
    code = configurations("pg", url_client_config("https://127.0.0.1:9443/"), "Q0E=")
    hooks = [h for kind in (VALIDATING, MUTATING) for h in code[kind]["webhooks"]]
    assert [h["clientConfig"] for h in hooks] == [
        {"url": "https://127.0.0.1:9443/validate/schedulingpolicies", "caBundle": "Q0E="},
        {"url": "https://127.0.0.1:9443/validate/pods", "caBundle": "Q0E="},
        {"url": "https://127.0.0.1:9443/mutate/pods", "caBundle": "Q0E="}]
    assert all(h["failurePolicy"] == "Ignore" for h in hooks)  # a down operator blocks nothing
    assert code[VALIDATING]["metadata"]["name"] == code[MUTATING]["metadata"]["name"] == "pg"
