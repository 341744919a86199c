"""Chain building: registry lookup, args and weight validation (errors name the field), multiPoint
expansion per extension point, disabled points, and the default-equivalent chain."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import Field

from policy_scheduler.plugins import default_registry
from policy_scheduler.policy.chain import (DEFAULT_PLUGINS, MAX_WEIGHT, ChainError, ChainSpec, build_chain,
                                          default_chain_spec)
from policy_scheduler.framework.interface import (
    FilterPlugin,
    Handle,
    PluginArgs,
    PostFilterPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from policy_scheduler.framework.registry import Registry, RegistryError


class FilterArgs(PluginArgs):
    mode: Literal["strict", "loose"] = "strict"
    max_count: int = Field(3, alias="maxCount", ge=0)


class FakeFilter(PreFilterPlugin, FilterPlugin):
    NAME = "FakeFilter"
    Args = FilterArgs


class FakeScore(PreScorePlugin, ScorePlugin):
    NAME = "FakeScore"


class OtherScore(ScorePlugin):
    NAME = "OtherScore"


class FakeSort(QueueSortPlugin):
    NAME = "FakeSort"


class OtherSort(QueueSortPlugin):
    NAME = "OtherSort"


class FakePost(PostFilterPlugin, ReservePlugin):
    NAME = "FakePost"


class PickyArgs(PluginArgs):
    label: str = "x"


class Picky(FilterPlugin):
    """Validation beyond the schema happens in the constructor."""

    NAME = "Picky"
    Args = PickyArgs

    def __init__(self, args, handle):
        super().__init__(args, handle)
        if args.label.startswith("-"):
            raise ValueError("label: must not start with '-'")


@pytest.fixture
def registry():
    reg = Registry()
    for cls in (FakeFilter, FakeScore, OtherScore, FakeSort, OtherSort, FakePost, Picky):
        reg.register(cls)
    return reg


def build(registry, plugins, **spec):
    return build_chain({"plugins": plugins, **spec}, registry)


def errors_of(registry, plugins, **spec):
    with pytest.raises(ChainError) as e:
        build(registry, plugins, **spec)
    return e.value.errors


# ---------------------------------------------------------------- registry

def test_registry_rejects_duplicates_and_nameless_classes(registry):
    with pytest.raises(RegistryError, match="already registered"):
        registry.register(FakeFilter)

    class Nameless(FilterPlugin):
        pass

    with pytest.raises(RegistryError, match="has no NAME"):
        registry.register(Nameless)
    assert registry.names() == sorted(registry.names()) and "FakeFilter" in registry
    assert registry.get("Nope") is None


# ---------------------------------------------------------------- layout per extension point

def test_plugins_run_at_every_point_they_implement_in_list_order(registry):
    chain = build(registry, [{"name": "FakeSort"}, {"name": "OtherScore", "weight": 4}, {"name": "FakeFilter"},
                             {"name": "FakeScore"}, {"name": "FakePost"}])
    assert chain.queue_sort.NAME == "FakeSort"
    assert [p.NAME for p in chain.pre_filter] == ["FakeFilter"]
    assert [p.NAME for p in chain.filter] == ["FakeFilter"]
    assert [p.NAME for p in chain.post_filter] == ["FakePost"]
    assert [p.NAME for p in chain.pre_score] == ["FakeScore"]
    assert [(p.NAME, w) for p, w in chain.score] == [("OtherScore", 4), ("FakeScore", 1)]
    assert [p.NAME for p in chain.points["reserve"]] == ["FakePost"]
    assert [p.NAME for p in chain.plugins] == ["FakeSort", "OtherScore", "FakeFilter", "FakeScore", "FakePost"]
    assert chain.plugin("FakeScore") is chain.pre_score[0] and chain.plugin("Nope") is None
    assert [(r.name, r.points, r.weight) for r in chain.resolved] == [
        ("FakeSort", ["queueSort"], None),
        ("OtherScore", ["score"], 4),
        ("FakeFilter", ["preFilter", "filter"], None),
        ("FakeScore", ["preScore", "score"], 1),
        ("FakePost", ["postFilter", "reserve"], None),
    ]
    assert chain.next_start_node_index == 0


def test_args_are_validated_with_defaults_even_when_absent(registry):
    chain = build(registry, [{"name": "FakeFilter"}, {"name": "FakeScore"}])
    f = chain.plugin("FakeFilter")
    assert isinstance(f.args, FilterArgs) and (f.args.mode, f.args.max_count) == ("strict", 3)
    assert chain.plugin("FakeScore").args is None
    chain = build(registry, [{"name": "FakeFilter", "args": {"mode": "loose", "maxCount": 0}}])
    assert (chain.plugin("FakeFilter").args.mode, chain.plugin("FakeFilter").args.max_count) == ("loose", 0)


def test_handle_is_passed_to_plugins(registry):
    h = Handle()
    chain = build_chain({"plugins": [{"name": "FakeScore"}]}, registry, h)
    assert chain.plugin("FakeScore").handle is h


@pytest.mark.parametrize("disabled, pre_filter, filter_, score", [
    ([{"name": "FakeFilter", "point": "filter"}], ["FakeFilter"], [], ["FakeScore"]),
    ([{"name": "FakeFilter", "point": "preFilter"}], [], ["FakeFilter"], ["FakeScore"]),
    ([{"name": "FakeFilter"}], [], [], ["FakeScore"]),  # point defaults to "*"
    ([{"name": "FakeScore", "point": "score"}], ["FakeFilter"], ["FakeFilter"], []),
    ([{"name": "FakeScore", "point": "*"}, {"name": "FakeFilter", "point": "filter"}], ["FakeFilter"], [], []),
])
def test_disabled_points(registry, disabled, pre_filter, filter_, score):
    chain = build(registry, [{"name": "FakeFilter"}, {"name": "FakeScore"}], disabled=disabled)
    assert [p.NAME for p in chain.pre_filter] == pre_filter
    assert [p.NAME for p in chain.filter] == filter_
    assert [p.NAME for p, _ in chain.score] == score


def test_disabled_score_point_has_no_weight(registry):
    chain = build(registry, [{"name": "FakeScore", "weight": 5}], disabled=[{"name": "FakeScore", "point": "score"}])
    assert chain.score == [] and chain.resolved[0].weight is None
    assert [p.NAME for p in chain.pre_score] == ["FakeScore"]


# ---------------------------------------------------------------- weights

@pytest.mark.parametrize("weight, effective", [(None, 1), (0, 1), (1, 1), (7, 7), (MAX_WEIGHT, MAX_WEIGHT)])
def test_weight_defaults(registry, weight, effective):
    ref = {"name": "FakeScore"} if weight is None else {"name": "FakeScore", "weight": weight}
    chain = build(registry, [ref])
    assert chain.score[0][1] == effective


@pytest.mark.parametrize("ref, message", [
    ({"name": "FakeScore", "weight": -1}, "plugins[1].weight: -1 is out of range [0, 2147483647]"),
    ({"name": "FakeScore", "weight": MAX_WEIGHT + 1}, "plugins[1].weight: 2147483648 is out of range"),
    ({"name": "FakeFilter", "weight": 2}, "plugins[1].weight: plugin FakeFilter has no Score extension point"),
    ({"name": "FakeSort", "weight": 0}, "plugins[1].weight: plugin FakeSort has no Score extension point"),
])
def test_bad_weights_name_the_field(registry, ref, message):
    errors = errors_of(registry, [{"name": "OtherScore"}, ref])
    assert len(errors) == 1 and errors[0].startswith(message), errors


# ---------------------------------------------------------------- names and args

def test_unknown_plugin_lists_known_ones(registry):
    errors = errors_of(registry, [{"name": "FakeScore"}, {"name": "NodeResourceFit"}])
    assert errors == ["plugins[1].name: unknown plugin 'NodeResourceFit'; known plugins: FakeFilter, FakePost, "
                      "FakeScore, FakeSort, OtherScore, OtherSort, Picky"]


def test_duplicate_plugin(registry):
    errors = errors_of(registry, [{"name": "FakeScore"}, {"name": "FakeFilter"}, {"name": "FakeScore"}])
    assert errors == ["plugins[2].name: duplicate plugin 'FakeScore' (already at plugins[0])"]


@pytest.mark.parametrize("args, field", [
    ({"mode": "fast"}, "plugins[0].args.mode:"),
    ({"maxCount": -1}, "plugins[0].args.maxCount:"),  # the camelCase alias is named
    ({"maxCount": "many"}, "plugins[0].args.maxCount:"),
    ({"bogus": 1}, "plugins[0].args.bogus:"),
])
def test_bad_args_name_the_field(registry, args, field):
    errors = errors_of(registry, [{"name": "FakeFilter", "args": args}])
    assert len(errors) == 1 and errors[0].startswith(field), errors


def test_args_for_a_plugin_without_args(registry):
    assert errors_of(registry, [{"name": "FakeScore", "args": {"x": 1}}]) == \
        ["plugins[0].args: plugin FakeScore takes no args"]
    build(registry, [{"name": "FakeScore", "args": {}}])  # empty args are fine


def test_constructor_validation_is_reported_under_args(registry):
    errors = errors_of(registry, [{"name": "FakeScore"}, {"name": "Picky", "args": {"label": "-x"}}])
    assert errors == ["plugins[1].args.label: must not start with '-'"]


def test_every_problem_is_reported_at_once(registry):
    with pytest.raises(ChainError) as e:
        build(registry, [{"name": "Nope"}, {"name": "FakeFilter", "args": {"mode": "x"}},
                         {"name": "FakeFilter"}, {"name": "FakeScore", "weight": -5}],
              disabled=[{"name": "Ghost", "point": "filter"}])
    errs = e.value.errors
    assert [x.split(":")[0] for x in errs] == [
        "plugins[0].name", "plugins[2].name", "disabled[0].name", "plugins[1].args.mode", "plugins[3].weight"]
    assert str(e.value) == "; ".join(errs)
    assert isinstance(e.value, ValueError)


def test_only_one_queue_sort(registry):
    errors = errors_of(registry, [{"name": "FakeSort"}, {"name": "OtherSort"}])
    assert errors == ["plugins: only one queue sort plugin can be enabled, found FakeSort, OtherSort"]


@pytest.mark.parametrize("spec, field", [
    ({"plugins": [{"name": ""}]}, "spec.plugins[0].name"),
    ({"plugins": [{"name": "FakeScore", "wieght": 2}]}, "spec.plugins[0].wieght"),
    ({"plugins": [], "percentageOfNodesToScore": 101}, "spec.percentageOfNodesToScore"),
    ({"plugins": [], "percentageOfNodesToScore": -1}, "spec.percentageOfNodesToScore"),
    ({"plugins": [], "disabled": [{"name": "FakeScore", "point": "scoring"}]}, "spec.disabled[0].point"),
    ({"plugins": [], "extra": True}, "spec.extra"),
])
def test_spec_shape_errors(registry, spec, field):
    with pytest.raises(ChainError) as e:
        build_chain(spec, registry)
    assert e.value.errors[0].startswith(field + ":"), e.value.errors


def test_percentage_of_nodes_to_score(registry):
    assert build(registry, [{"name": "FakeScore"}]).percentage_of_nodes_to_score is None
    chain = build(registry, [{"name": "FakeScore"}], percentageOfNodesToScore=30)
    assert chain.percentage_of_nodes_to_score == 30
    spec = ChainSpec(plugins=[], percentage_of_nodes_to_score=0)  # by field name too
    assert build_chain(spec, registry).percentage_of_nodes_to_score == 0


def test_empty_chain_builds(registry):
    chain = build(registry, [])
    assert chain.plugins == [] and chain.queue_sort is None and chain.score == []


# ---------------------------------------------------------------- the default-equivalent chain

def test_default_chain_spec_matches_upstream_default_profile():
    """Upstream default_plugins.go order and weights (the implicit plugins excluded)."""
    spec = default_chain_spec()
    assert [(p.name, p.weight) for p in spec.plugins] == [
        ("PrioritySort", None), ("NodeName", None), ("NodeUnschedulable", None), ("TaintToleration", 3),
        ("NodeAffinity", 2), ("NodePorts", None), ("NodeResourcesFit", 1), ("VolumeRestrictions", None),
        ("NodeVolumeLimits", None), ("VolumeBinding", 1), ("VolumeZone", None), ("PodTopologySpread", 2),
        ("InterPodAffinity", 2), ("DynamicResources", 2), ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1), ("NodeDeclaredFeatures", None),
    ]
    assert spec.disabled == [] and spec.percentage_of_nodes_to_score is None
    assert len(DEFAULT_PLUGINS) == 17


def test_default_chain_builds_with_the_default_registry():
    chain = build_chain(default_chain_spec(), default_registry())
    assert chain.queue_sort.NAME == "PrioritySort"
    assert [(p.NAME, w) for p, w in chain.score] == [
        ("TaintToleration", 3), ("NodeAffinity", 2), ("NodeResourcesFit", 1), ("VolumeBinding", 1),
        ("PodTopologySpread", 2), ("InterPodAffinity", 2), ("DynamicResources", 2),
        ("NodeResourcesBalancedAllocation", 1), ("ImageLocality", 1),
    ]
    assert [p.NAME for p in chain.filter] == [
        "NodeName", "NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
        "VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone", "PodTopologySpread",
        "InterPodAffinity", "DynamicResources", "NodeDeclaredFeatures",
    ]
    # plugins with Args got a validated instance carrying upstream defaults
    for p in chain.plugins:
        assert (p.args is None) == (p.Args is None)
