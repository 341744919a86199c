"""A built plugin chain: the plugin instances of a policy per extension point, its score weights
and the cluster events its rejecting plugins registered; what the scheduling cycle, the queue and
the binding cycle read of a policy.

A chain is built, and every part of a policy validated on the way, by policy/chain.py
(``build_chain``): the plugins are resolved in the registry, their args and weights checked, and
laid out per extension point, as upstream's multiPoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..events import ClusterEventWithHint
from ..interface import (BindPlugin, DescribesNodes, FilterPlugin, PermitPlugin, Plugin, PostBindPlugin, PostFilterPlugin,
                         PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreScorePlugin, QueueSortPlugin,
                         ReservePlugin, ScorePlugin)


@dataclass
class ResolvedPlugin:
    name: str
    points: list[str]
    weight: int | None


@dataclass
class Chain:
    """A built chain: plugin instances per extension point, score weights, sampling setting, and
    the cluster events each rejecting plugin registered."""

    plugins: list[Plugin]
    queue_sort: QueueSortPlugin | None
    pre_filter: list[PreFilterPlugin]
    filter: list[FilterPlugin]
    post_filter: list[PostFilterPlugin]
    pre_score: list[PreScorePlugin]
    score: list[tuple[ScorePlugin, int]]
    points: dict[str, list[Plugin]]
    percentage_of_nodes_to_score: int | None = None
    # the round-robin start of Filter's node scan (upstream's sched.nextStartNodeIndex: one per
    # scheduler, every profile's cycles advance it): a cell the policy store shares between its
    # policies' chains (a chain alone has its own)
    start: list[int] = field(default_factory=lambda: [0])
    resolved: list[ResolvedPlugin] = field(default_factory=list)
    # plugin name -> its registrations, for the plugins that can reject (upstream's hint map)
    events: dict[str, tuple[ClusterEventWithHint, ...]] = field(default_factory=dict)
    # plugins implementing the optional DescribesNodes protocol (checked once here: a runtime
    # protocol check costs microseconds, too much for every cycle)
    describers: list[DescribesNodes] = field(default_factory=list)
    # the plugin whose groups are scheduled in a pod-group cycle (its ``GROUP_CYCLE``:
    # GangScheduling), found once here rather than at every cycle; None without one
    group_cycle: Plugin | None = None

    @property
    def next_start_node_index(self) -> int:
        return self.start[0]

    @next_start_node_index.setter
    def next_start_node_index(self, value: int) -> None:
        self.start[0] = value

    def plugin(self, name: str) -> Plugin | None:
        for p in self.plugins:
            if p.NAME == name:
                return p
        return None

    # points[p] holds only plugins implementing p (build_chain checks each with isinstance): that
    # is all the ignored return-value errors below (and the arg-type ones of build_chain's Chain(...)) are
    @property
    def pre_enqueue(self) -> list[PreEnqueuePlugin]:
        return self.points["preEnqueue"]  # type: ignore[return-value]

    @property
    def reserve(self) -> list[ReservePlugin]:
        return self.points["reserve"]  # type: ignore[return-value]

    @property
    def permit(self) -> list[PermitPlugin]:
        return self.points["permit"]  # type: ignore[return-value]

    @property
    def pre_bind(self) -> list[PreBindPlugin]:
        return self.points["preBind"]  # type: ignore[return-value]

    @property
    def bind(self) -> list[BindPlugin]:
        return self.points["bind"]  # type: ignore[return-value]

    @property
    def post_bind(self) -> list[PostBindPlugin]:
        return self.points["postBind"]  # type: ignore[return-value]
