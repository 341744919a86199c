"""Building a policy's plugin chain (a ``Chain``, framework/cycle/chain.py): resolve names in the
registry, validate every plugin's args and weight before any scheduling, and lay the plugins out
per extension point. The chain builder's checks: names known and not repeated, ``disabled``
naming listed plugins, each plugin's ``Args`` (its own model) and constructor, weights only on
Score plugins and in range, the total score without overflow, one QueueSort.

Like upstream's multiPoint, each listed plugin runs at every extension point it implements, in
list order; ``disabled`` opts a plugin out of single points. Errors name the field, e.g.
``plugins[2].args.scoringStrategy.type: Unsupported value: "Bogus": supported values: ...``
(paths relative to the policy's spec; at most ``MAX_ERRORS`` are reported).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..framework.cycle.chain import Chain, ResolvedPlugin
from ..framework.events import DEFAULT_REGISTRATION, ClusterEventWithHint
from ..framework.interface import (EXTENSION_POINTS, MAX_NODE_SCORE, REJECTING_POINTS, DescribesNodes,
                                   EnqueueExtensions, Handle, Plugin, ScorePlugin)
from ..framework.registry import Registry
from ..framework.validation import MAX_NAME, FieldErrors
from .errors import cap_errors, split_field_message, validation_errors

# Sizes of a policy's chain. The CRD (policy/crd.py) carries the same caps as maxItems / maxLength.
MAX_PLUGINS = 64  # spec.plugins (names are unique: more than every registered plugin is a mistake)
MAX_DISABLED = 256  # spec.disabled
MAX_PLUGIN_NAME = MAX_NAME
MAX_TOTAL_SCORE = 2**63 - 1
MAX_WEIGHT = 2**31 - 1  # upstream's weight is an int32

PointName = Literal["preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score",
                    "reserve", "permit", "preBind", "bind", "postBind", "*"]

# Plugins every policy gets without listing them (upstream's default profile has both), when the
# registry knows them: SchedulingGates holds gated pods, DefaultBinder posts the Binding. A policy
# opts out with ``disabled: [{name: SchedulingGates}]``; listing another Bind plugin first puts it
# before DefaultBinder.
IMPLICIT_FIRST = ("SchedulingGates",)
IMPLICIT_LAST = ("DefaultBinder",)


class PluginRef(BaseModel):
    """One entry of a policy's plugin list."""

    # defer_build: validators are built on first use, not at import (the operator's start-up)
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    name: str = Field(min_length=1, max_length=MAX_PLUGIN_NAME,
                      description="Registry name of the plugin, e.g. NodeResourcesFit.")
    weight: int | None = Field(default=None, description="Score weight (default 1; 0 means 1, as upstream).")
    args: dict[str, Any] | None = Field(default=None, description="Plugin args; validated against the plugin's schema.")


class DisabledRef(BaseModel):
    """Opt a listed plugin out of one extension point ("*" for all)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    name: str = Field(min_length=1, max_length=MAX_PLUGIN_NAME)
    point: PointName = "*"


class ChainSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True, defer_build=True)

    plugins: list[PluginRef] = Field(default_factory=list, max_length=MAX_PLUGINS)
    disabled: list[DisabledRef] = Field(default_factory=list, max_length=MAX_DISABLED)
    percentage_of_nodes_to_score: int | None = Field(default=None, alias="percentageOfNodesToScore", ge=0, le=100)


class ChainError(ValueError):
    """A chain that cannot be built. ``errors`` holds one "field: message" line per problem."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("; ".join(errors))


def plugin_events(plugin: Plugin) -> tuple[ClusterEventWithHint, ...]:
    """The plugin's registrations: its own list, or every event when it declares none."""
    if isinstance(plugin, EnqueueExtensions):
        return tuple(plugin.events_to_register())
    return DEFAULT_REGISTRATION


def _constructor_errors(where: str, e: Exception) -> list[str]:
    """A plugin constructor's ValueError under ``<where>.args`` (its own "field: detail" joined on)."""
    msgs = e.errors if isinstance(e, FieldErrors) else [str(e)]
    out = []
    for m in msgs:
        fm = split_field_message(m)
        out.append(f"{where}.args.{fm[0]}: {fm[1]}" if fm else f"{where}.args: {m}")
    return out


def build_chain(spec: ChainSpec | dict[str, Any], registry: Registry,
                handle: Handle | None = None) -> Chain:
    """Validate ``spec`` completely and build the chain; raise ChainError listing every problem.
    ``registry``: the plugins by name (``policy_scheduler.plugins.default_registry()`` for the
    built-in ones)."""
    handle = handle or Handle()
    errors: list[str] = []
    if not isinstance(spec, ChainSpec):
        try:
            spec = ChainSpec.model_validate(spec)
        except ValidationError as e:
            raise ChainError(cap_errors(validation_errors(e, "spec"))) from None

    seen: dict[str, int] = {}
    classes: list[tuple[int, PluginRef, type[Plugin]]] = []
    for i, ref in enumerate(spec.plugins):
        where = f"plugins[{i}]"
        if ref.name in seen:
            errors.append(f"{where}.name: duplicate plugin {ref.name!r} (already at plugins[{seen[ref.name]}])")
            continue
        seen[ref.name] = i
        cls = registry.get(ref.name)
        if cls is None:
            errors.append(f"{where}.name: unknown plugin {ref.name!r}; known plugins: {', '.join(registry.names())}")
            continue
        classes.append((i, ref, cls))
    implicit = [n for n in IMPLICIT_FIRST + IMPLICIT_LAST if n not in seen and n in registry]
    for j, d in enumerate(spec.disabled):
        if d.name not in seen and d.name not in implicit:
            errors.append(f"disabled[{j}].name: {d.name!r} is not in plugins")
    first = [(-1, PluginRef(name=n), c) for n in IMPLICIT_FIRST
             if n in implicit and (c := registry.get(n)) is not None]
    last = [(-1, PluginRef(name=n), c) for n in IMPLICIT_LAST
            if n in implicit and (c := registry.get(n)) is not None]
    classes = first + classes + last

    instances: list[tuple[int, PluginRef, Plugin]] = []
    total = 0
    for i, ref, cls in classes:
        where = f"plugins[{i}]"
        args = None
        if cls.Args is not None:
            try:
                args = cls.Args.model_validate(ref.args or {})
            except ValidationError as e:
                errors.extend(validation_errors(e, f"{where}.args"))
                continue
        elif ref.args:
            errors.append(f"{where}.args: plugin {ref.name} takes no args")
            continue
        if ref.weight is not None:
            if not issubclass(cls, ScorePlugin):
                errors.append(f"{where}.weight: plugin {ref.name} has no Score extension point; weight does not apply")
            elif ref.weight < 0 or ref.weight > MAX_WEIGHT:
                errors.append(f"{where}.weight: {ref.weight} is out of range [0, {MAX_WEIGHT}] (0 means the default, 1)")
        try:
            plugin = cls(args, handle)
        except (ValueError, TypeError) as e:  # plugin-level validation beyond the schema
            errors.extend(_constructor_errors(where, e))
            continue
        instances.append((i, ref, plugin))

    disabled: dict[str, set[str]] = {}
    for d in spec.disabled:
        disabled.setdefault(d.name, set()).add(d.point)

    points: dict[str, list[Plugin]] = {p: [] for p in EXTENSION_POINTS}
    score: list[tuple[ScorePlugin, int]] = []
    resolved: list[ResolvedPlugin] = []
    for i, ref, plugin in instances:
        off = disabled.get(ref.name, set())
        mine = []
        for point, base in EXTENSION_POINTS.items():
            if isinstance(plugin, base) and point not in off and "*" not in off:
                points[point].append(plugin)
                mine.append(point)
        weight = None
        if "score" in mine:
            weight = ref.weight or 1
            if weight * MAX_NODE_SCORE > MAX_TOTAL_SCORE - total:
                errors.append(f"plugins[{i}].weight: total score of Score plugins could overflow")
            total += weight * MAX_NODE_SCORE
            score.append((plugin, weight))  # type: ignore[arg-type]  # "score" in mine: a ScorePlugin
        if mine or i >= 0:  # an implicit plugin disabled everywhere is not listed
            resolved.append(ResolvedPlugin(ref.name, mine, weight))
    events = {}
    for plugin in [p for _, _, p in instances]:
        if any(plugin in points[pt] for pt in REJECTING_POINTS):
            try:
                events[plugin.NAME] = plugin_events(plugin)
            except Exception as e:  # upstream: the scheduler does not start; here the policy is invalid
                errors.append(f"plugins: {plugin.NAME}: cannot list the events it registers: {e}")
    if len(points["queueSort"]) > 1:
        errors.append("plugins: only one queue sort plugin can be enabled, found "
                      + ", ".join(p.NAME for p in points["queueSort"]))
    if errors:
        raise ChainError(cap_errors(errors))
    # each points[p] holds plugins implementing p (the isinstance above): the arg-type ignores below
    return Chain(
        plugins=[p for _, _, p in instances],
        queue_sort=points["queueSort"][0] if points["queueSort"] else None,  # type: ignore[arg-type]
        pre_filter=points["preFilter"],  # type: ignore[arg-type]
        filter=points["filter"],  # type: ignore[arg-type]
        post_filter=points["postFilter"],  # type: ignore[arg-type]
        pre_score=points["preScore"],  # type: ignore[arg-type]
        score=score,
        points=points,
        percentage_of_nodes_to_score=spec.percentage_of_nodes_to_score,
        resolved=resolved,
        events=events,
        describers=[p for _, _, p in instances if isinstance(p, DescribesNodes)],
        group_cycle=next((p for _, _, p in instances if getattr(p, "GROUP_CYCLE", False)), None),
    )


# Upstream's default profile (pkg/scheduler/apis/config/v1/default_plugins.go), in upstream's
# order and with upstream's weights (DefaultPreemption and the binder aside).
DEFAULT_PLUGINS: list[dict[str, Any]] = [
    {"name": "PrioritySort"},
    {"name": "NodeName"},
    {"name": "NodeUnschedulable"},
    {"name": "TaintToleration", "weight": 3},
    {"name": "NodeAffinity", "weight": 2},
    {"name": "NodePorts"},
    {"name": "NodeResourcesFit", "weight": 1},
    {"name": "VolumeRestrictions"},
    {"name": "NodeVolumeLimits"},
    {"name": "VolumeBinding", "weight": 1},
    {"name": "VolumeZone"},
    {"name": "PodTopologySpread", "weight": 2},
    {"name": "InterPodAffinity", "weight": 2},
    {"name": "DynamicResources", "weight": 2},
    {"name": "NodeResourcesBalancedAllocation", "weight": 1},
    {"name": "ImageLocality", "weight": 1},
    {"name": "NodeDeclaredFeatures"},
]


def default_chain_spec() -> ChainSpec:
    """The default-equivalent policy: upstream's default plugin set and weights."""
    return ChainSpec(plugins=[PluginRef(**p) for p in DEFAULT_PLUGINS])
