"""NodeLabelMatch: pin one workload's pods to nodes carrying a given label (this project's own
plugin; no upstream counterpart).

Args select the workload by ``podNamePattern`` (an RE2 regular expression that must match the
whole pod name; RE2 matches in linear time, so no pattern can stall the scheduling loop) and/or ``podSelector`` (a metav1.LabelSelector on the pod's labels; ``{}`` selects
every pod); when both are given a pod must satisfy both. ``nodeLabel`` (``key`` and ``value``)
names the label the nodes must carry.

PreFilter Skips pods outside the workload, so they are not affected. For the workload's pods,
Filter rejects every node whose label ``key`` is missing or has another value, as
UnschedulableAndUnresolvable (preemption cannot add a label), with the reason
``node(s) didn't have label KEY=VALUE required for workload``.

Events: a node added, or its labels changed, queueing only when the node now carries KEY=VALUE
and did not before; the pod's own label change, queueing when the pod left the workload (its
name cannot change).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ..framework.interface import (CycleState, EnqueueExtensions, FilterPlugin, FilterResult, PluginArgs,
                                   PreFilterPlugin)
from ..framework.model.labels import LabelSelectorSpec, validate_label_name, validate_label_value
from ..framework.model.nodetable import NodeSpec, NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.status import Code, Status
from ..framework.validation import (MAX_LABEL_KEY, MAX_LABEL_VALUE, MAX_PATTERN, compile_user_regex, invalid,
                                    raise_if, regex_error, required)

NAME = "NodeLabelMatch"


class NodeLabel(PluginArgs):
    """The label the workload's nodes must carry: a valid label key and value."""

    key: str = Field(max_length=MAX_LABEL_KEY)
    value: str = Field(max_length=MAX_LABEL_VALUE)

    @model_validator(mode="after")
    def _valid_label(self) -> "NodeLabel":
        raise_if(validate_label_name(self.key, "key") + validate_label_value(self.value, "value"))
        return self


class NodeLabelMatchArgs(PluginArgs):
    pod_name_pattern: str | None = Field(
        default=None, alias="podNamePattern", max_length=MAX_PATTERN,
        description="RE2 regular expression the whole pod name must match.")
    pod_selector: LabelSelectorSpec | None = Field(default=None, alias="podSelector")
    node_label: NodeLabel = Field(alias="nodeLabel")

    @field_validator("pod_name_pattern")
    @classmethod
    def _valid_pattern(cls, v: str | None) -> str | None:
        if v is not None:
            why = regex_error(v)
            if why is not None:
                raise ValueError(invalid("podNamePattern", v, why))
        return v

    @model_validator(mode="after")
    def _selects_a_workload(self) -> "NodeLabelMatchArgs":
        if self.pod_name_pattern is None and self.pod_selector is None:
            raise ValueError(required("podNamePattern", "at least one of podNamePattern and podSelector is required"))
        return self


class NodeLabelMatch(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME = NAME
    Args = NodeLabelMatchArgs

    def __init__(self, args: NodeLabelMatchArgs, handle) -> None:
        super().__init__(args, handle)
        # RE2: matching is linear in the pod name, whatever the pattern (no backtracking)
        self.pattern = compile_user_regex(args.pod_name_pattern) if args.pod_name_pattern is not None else None
        self.selector = args.pod_selector.selector() if args.pod_selector is not None else None
        self.key = args.node_label.key
        self.value = args.node_label.value
        self.reason = f"node(s) didn't have label {self.key}={self.value} required for workload"

    def selects(self, pod: PodInfo) -> bool:
        """Whether ``pod`` belongs to the configured workload."""
        if self.pattern is not None and not self.pattern.fullmatch(pod.name):
            return False
        return self.selector is None or self.selector.matches(pod.labels)

    def _labelled(self, node: NodeSpec | None) -> bool:
        return node is not None and node.labels.get(self.key) == self.value

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD), self.node_change_hint),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL), self.node_change_hint),
            ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_LABEL), self.pod_label_hint),
        ]

    def node_change_hint(self, pod: PodInfo, old: NodeSpec | None, new: NodeSpec | None) -> QueueingHint:
        """Queue when the node now carries the label with the value and did not before."""
        return QueueingHint.QUEUE if self._labelled(new) and not self._labelled(old) else QueueingHint.SKIP

    def pod_label_hint(self, pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
        """Queue when the pod's new labels take it out of the workload: Filter then passes it."""
        return QueueingHint.QUEUE if new is not None and not self.selects(new) else QueueingHint.SKIP

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        if not self.selects(pod):
            return Status.skip(), None
        return Status.success(), None

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        if not self.selects(pod):
            return FilterResult.all_pass(len(rows))
        passed = nodes.label_mask(self.key, self.value)[rows]
        return FilterResult.from_mask(passed, self.reason, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


PLUGIN = NodeLabelMatch
