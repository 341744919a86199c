"""policy.validate: the one check of a SchedulingPolicy spec, in its order (limits, models, selector,
chain, tuning bounds, rollout candidate), what it returns, and a plugin's bug reported or raised."""

from __future__ import annotations

import pytest

from policy_scheduler.cache.policies import PolicyStore
from policy_scheduler.framework.interface import FilterPlugin, Handle
from policy_scheduler.framework.registry import Registry
from policy_scheduler.metricsources.manager import MetricSources
from policy_scheduler.plugins import default_registry
from policy_scheduler.plugins.node_name import PLUGIN as NodeName
from policy_scheduler.policy import Validated, validate
from policy_scheduler.policy.limits import MAX_DEPTH, spec_problem

GOOD = {"plugins": [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesBalancedAllocation", "weight": 2}]}


def test_a_valid_spec_gives_its_model_selector_chain_and_candidate():
    spec = {**GOOD, "namespaceSelector": {"matchLabels": {"team": "a"}},
            "rollout": {"strategy": "Shadow", "candidate": {"plugins": [{"name": "NodeResourcesFit"}]}}}
    got = validate(spec, default_registry())
    assert isinstance(got, Validated)
    assert [p.name for p in got.spec.plugins] == ["NodeResourcesFit", "NodeResourcesBalancedAllocation"]
    assert got.namespace_selector is not None and got.namespace_selector.matches({"team": "a"})
    assert [p.name for p in got.chain.resolved] == ["SchedulingGates", "NodeResourcesFit",
                                                   "NodeResourcesBalancedAllocation", "DefaultBinder"]
    assert got.candidate is not None and got.candidate is not got.chain
    assert validate(GOOD).candidate is None  # the built-in registry when none is given


def test_the_limits_come_first_and_stop_everything_else():
    deep: object = 1
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    spec = {"plugins": [{"name": "Bogus", "args": {"a": deep}}], "disabled": "not a list"}
    assert validate(spec) == [spec_problem(spec)]
    assert validate(spec)[0].endswith(f"nested deeper than {MAX_DEPTH} levels")


@pytest.mark.parametrize("spec, errors", [
    ({"plugins": []}, ["spec.plugins: Required value: must have at least 1 item(s)"]),
    ({"plugins": [{"name": "NodeResourcesFit", "weight": 1.5}]},
     ["spec.plugins[0].weight: Invalid value: 1.5: must be an integer"]),
    ({**GOOD, "namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}},
     ["spec.namespaceSelector.matchExpressions[0].values: Required value: must be specified when `operator` is "
      "'In' or 'NotIn'"]),
    ({"plugins": [{"name": "NodeName", "weight": 2}]},
     ["spec.plugins[0].weight: plugin NodeName has no Score extension point; weight does not apply"]),
    ({"plugins": [{"name": "NodeName"}, {"name": "NodeResourcesFit"}],
      "tuning": {"objective": {"imbalance": 1}, "bounds": {"NodeName": [1, 2]}}},
     ['spec.tuning.bounds.NodeName: Invalid value: "NodeName": has no Score extension point in this chain: '
      "only Score weights are tuned"]),
    ({"plugins": [{"name": "NodeName"}], "tuning": {"objective": {"imbalance": 1}, "bounds": {"Other": [1, 2]}}},
     ['spec.tuning.bounds.Other: Invalid value: "Other": must name a plugin listed in plugins']),
    ({"plugins": [{"name": "NodeName"}],
      "rollout": {"strategy": "Canary", "percent": 5, "candidate": {"plugins": [{"name": "NodeName", "weight": 3}]}}},
     ["spec.rollout.candidate.plugins[0].weight: plugin NodeName has no Score extension point; weight does not "
      "apply"]),
])
def test_each_step_names_the_field(spec, errors):
    assert validate(spec) == errors


def test_the_store_and_the_webhook_say_what_validate_says():
    from policy_scheduler.cluster.admission import Admission

    store = PolicyStore(MetricSources(), lambda name: Handle())
    bad = {"plugins": [{"name": "NodeName", "weight": 2}]}
    assert store.validate(bad) == validate(bad) and store.validate(GOOD) == []
    answer = Admission(store).validate_policy({"uid": "u", "object": {"metadata": {"name": "x"}, "spec": bad}})
    assert answer["response"]["status"]["message"] == 'SchedulingPolicy "x" is invalid: ' + validate(bad)[0]
    store.on_policy("ADDED", {"metadata": {"name": "x", "generation": 1}, "spec": bad})
    assert store.policies["x"].errors == validate(bad)


class Broken(FilterPlugin):
    NAME = "Broken"
    Args = None

    def __init__(self, args, handle) -> None:
        raise RuntimeError("a bug")


def test_a_plugin_constructors_bug_is_a_problem_or_raised():
    registry = Registry()
    registry.register(NodeName)
    registry.register(Broken)
    spec = {"plugins": [{"name": "NodeName"}, {"name": "Broken"}]}
    assert validate(spec, registry) == ["spec: cannot build the chain: RuntimeError: a bug"]
    with pytest.raises(RuntimeError, match="a bug"):
        validate(spec, registry, raise_bugs=True)
    # the store's informer is told (it reports the handler's failure and relists); the webhook refuses
    store = PolicyStore(MetricSources(), lambda name: Handle(), registry=registry)
    with pytest.raises(RuntimeError):
        store.on_policy("ADDED", {"metadata": {"name": "x", "generation": 1}, "spec": spec})
    assert store.validate(spec) == ["spec: cannot build the chain: RuntimeError: a bug"]
