"""Generated invalid policies (tests/support/invalid_policies.py), each refused by the validation the
operator runs (PolicyStore.on_policy) with an error naming the field that is wrong; valid ones pass.

Nothing a user writes may block the operator: every policy here is judged in milliseconds,
10,000 plugins included, and a regular expression can never backtrack (RE2).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from policy_scheduler.cache.policies import PolicyStore
from policy_scheduler.framework.interface import Handle
from policy_scheduler.metricsources.manager import MetricSources

from support.invalid_policies import Case, invalid_policies, refusal_for, valid_policies

CASES = invalid_policies()


def judge(spec) -> list[str]:
    """The errors PolicyStore.on_policy records for ``spec`` (empty: the policy is Ready). A spec
    whose schedulerName is not this instance's is another instance's to judge (on_policy leaves
    it alone): PolicyStore.validate, the same check (the admission webhook's), judges it."""
    store = PolicyStore(MetricSources(), lambda name: Handle())
    checked = store.validate(spec)
    store.on_policy("ADDED", {"metadata": {"name": "p", "generation": 1}, "spec": spec})
    st = store.policies.get("p")
    if st is None:
        assert "p" in store.foreign
        return checked
    assert st.ready == (not st.errors)
    assert (st.chain is None) == bool(st.errors)
    assert st.errors == checked
    return st.errors


def test_at_least_500_cases_covering_every_plugin_and_field():
    assert len(CASES) >= 500
    paths = " ".join(c.path for c in CASES)
    for plugin in ("NodeResourcesFit", "NodeResourcesBalancedAllocation", "PodTopologySpread", "InterPodAffinity",
                   "NodeAffinity", "NodeLabelMatch", "LoadAware", "MetricThreshold", "MetricScore", "ImageLocality",
                   "NodeName", "NodePorts", "NodeUnschedulable", "TaintToleration", "PrioritySort",
                   "SchedulingGates", "DefaultBinder"):
        assert any(plugin in str(c.spec) for c in CASES), plugin
    for fld in ("spec.plugins", "spec.disabled", "spec.percentageOfNodesToScore", "spec.namespaceSelector",
                "spec.prometheus", "spec.schedulerName", "podNamePattern", "podSelector", "nodeLabel",
                "addedAffinity", "defaultConstraints", "scoringStrategy", "hardPodAffinityWeight", "metrics",
                "usageThresholds"):
        assert fld in paths, fld
    kinds = Counter(c.detail.split(":")[0] for c in CASES)
    assert kinds["Too many"] >= 20 and kinds["Too long"] >= 20


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_refused_naming_the_field(case: Case):
    errors = judge(case.spec)
    assert errors, f"{case.name}: accepted"
    assert all(e.startswith("spec.") and ": " in e for e in errors), errors
    assert refusal_for(errors, case), f"{case.name}: no error names {case.path} ({case.detail!r}): {errors}"


@pytest.mark.parametrize("name, spec", valid_policies(), ids=[n for n, _ in valid_policies()])
def test_valid_policies_pass(name, spec):
    assert judge(spec) == []


def test_every_case_is_judged_quickly():
    t0 = time.perf_counter()
    worst = 0.0
    for case in CASES:
        t = time.perf_counter()
        judge(case.spec)
        worst = max(worst, time.perf_counter() - t)
    total = time.perf_counter() - t0
    print(f"\n{len(CASES)} invalid policies judged in {total:.2f}s, slowest {worst * 1000:.1f}ms")
    assert worst < 0.5 and total < 30


def test_ten_thousand_plugins_refused_at_once_with_one_short_error():
    t0 = time.perf_counter()
    errors = judge({"plugins": [{"name": f"P{i}", "args": {"x": i}} for i in range(10000)]})
    assert time.perf_counter() - t0 < 1.0
    # past the limits of a spec (policy/limits.py: 1,024 items in any list): refused before parsing
    assert errors == ["spec.plugins: Too many: 10000: must have at most 1024 items"]
    errors = judge({"plugins": [{"name": f"P{i}", "args": {"x": i}} for i in range(1000)]})
    assert errors == ["spec.plugins: Too many: 1000: must have at most 64 items"]


def test_the_number_of_errors_reported_is_capped():
    spec = {"plugins": [{"name": "NodeAffinity", "args": {"addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": f"-k{i}", "operator": "In", "values": [f"-v{j}" for j in range(10)]}
                                  for i in range(32)]}]}}}}]}
    errors = judge(spec)
    assert len(errors) == 50 and errors[-1].endswith("more errors)"), errors[-1]
    assert sum(map(len, errors)) < 64 * 1024
