"""Plugin protocols per extension point, CycleState, FilterResult and the framework Handle.

A plugin is a class deriving from one or more of the extension-point bases below; the chain
runs it at every point it implements (upstream's multiPoint). Filter and Score work on a batch
of node rows at once (``rows``: an int array of NodeTable rows) and return arrays, so that a
plugin can vectorize; per-node Python loops are fine for plugins whose work is per-node anyway.

Filter semantics match upstream exactly: for every node, plugins run in chain order and the
first plugin that rejects a node decides that node's status; the runner only passes a plugin
the rows that every earlier plugin accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

import numpy as np
from pydantic import BaseModel, ConfigDict

from .status import Code, Status

if TYPE_CHECKING:  # pragma: no cover
    from .nodetable import NodeTable
    from .podinfo import PodInfo

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0


class PluginArgs(BaseModel):
    """Base for every plugin's typed args: unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class CycleState:
    """Per-cycle scratch space shared by the plugins of one scheduling attempt."""

    __slots__ = ("_data", "skip_filter", "skip_score")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter: set[str] = set()  # plugins whose PreFilter returned Skip
        self.skip_score: set[str] = set()  # plugins whose PreScore returned Skip

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self._data


@dataclass(slots=True)
class FilterResult:
    """Verdicts of one Filter plugin for a batch of rows.

    ``passed[i]`` is the verdict for ``rows[i]``. For the failed ones: ``code`` is either one Code
    for all of them or an int array per row; ``reasons`` lists (reason text, bool mask over the
    batch) pairs; a failed node carries every reason whose mask is set for it (a node can have
    several, e.g. "Insufficient cpu" and "Insufficient memory"). ``error`` aborts the cycle.
    """

    passed: np.ndarray
    code: Code | np.ndarray = Code.UNSCHEDULABLE
    reasons: list[tuple[str, np.ndarray]] = field(default_factory=list)
    error: Status | None = None

    @classmethod
    def all_pass(cls, n: int) -> "FilterResult":
        return cls(np.ones(n, dtype=bool))

    @classmethod
    def from_mask(cls, passed: np.ndarray, reason: str,
                  code: Code = Code.UNSCHEDULABLE) -> "FilterResult":
        """All failed rows share one reason and code."""
        passed = np.asarray(passed, dtype=bool)
        return cls(passed, code, [(reason, ~passed)])

    @classmethod
    def failed(cls, status: Status, n: int) -> "FilterResult":
        """Every row fails with the same status."""
        return cls(np.zeros(n, dtype=bool), status.code, [(r, np.ones(n, dtype=bool)) for r in status.reasons])


class Handle:
    """What plugins may ask of the world outside the pure core; all answers come from caches.

    The operator subclasses it (namespace labels from the namespace cache, workload selectors
    for system default spreading, metric sources). The defaults answer "nothing known".
    """

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return None

    def all_namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return {}

    def default_spread_selector(self, pod: "PodInfo"):
        """upstream helper.DefaultSelector: the selector of the Services/RCs/RSs/StatefulSets
        selecting ``pod``, or None when nothing selects it (then no system default spreading)."""
        return None

    def source(self, name: str) -> Any:
        """A named outside-data source prepared out of the cycle (e.g. Prometheus metrics)."""
        return None


class Plugin:
    """Base of every plugin. ``NAME`` is the registry name; ``Args`` the typed args model."""

    NAME: ClassVar[str] = ""
    Args: ClassVar[type[PluginArgs] | None] = None

    def __init__(self, args: PluginArgs | None, handle: Handle) -> None:
        self.args = args
        self.handle = handle

    @property
    def name(self) -> str:
        return self.NAME


class QueueSortPlugin(Plugin):
    def less(self, a: Any, b: Any) -> bool:  # a, b: QueuedPodInfo
        raise NotImplementedError


class PreFilterPlugin(Plugin):
    def pre_filter(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable") -> tuple[Status, set[str] | None]:
        """Return (status, node-name set or None). Skip disables this plugin's Filter."""
        raise NotImplementedError


class FilterPlugin(Plugin):
    def filter(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable", rows: np.ndarray) -> FilterResult:
        raise NotImplementedError


class PostFilterPlugin(Plugin):
    def post_filter(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable",
                    statuses: Mapping[str, Status]) -> tuple[Status, str | None]:
        """Return (status, nominated node name or None)."""
        raise NotImplementedError


class PreScorePlugin(Plugin):
    def pre_score(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable", rows: np.ndarray) -> Status:
        """``rows``: the feasible nodes. Skip disables this plugin's Score."""
        raise NotImplementedError


class ScorePlugin(Plugin):
    def score(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable", rows: np.ndarray) -> np.ndarray:
        """Raw int64 scores for ``rows``."""
        raise NotImplementedError

    def normalize_score(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable", rows: np.ndarray,
                        scores: np.ndarray) -> np.ndarray:
        """Map raw scores into [0, 100]. The default is no normalization."""
        return scores


class ReservePlugin(Plugin):
    def reserve(self, state: CycleState, pod: "PodInfo", node_name: str) -> Status:
        raise NotImplementedError

    def unreserve(self, state: CycleState, pod: "PodInfo", node_name: str) -> None:
        raise NotImplementedError


class PermitPlugin(Plugin):
    def permit(self, state: CycleState, pod: "PodInfo", node_name: str) -> tuple[Status, float]:
        """Return (status, timeout seconds); status Wait parks the pod."""
        raise NotImplementedError


class PreBindPlugin(Plugin):
    async def pre_bind(self, state: CycleState, pod: "PodInfo", node_name: str) -> Status:
        raise NotImplementedError


class BindPlugin(Plugin):
    async def bind(self, state: CycleState, pod: "PodInfo", node_name: str) -> Status:
        """Skip: let the next Bind plugin bind."""
        raise NotImplementedError


class PostBindPlugin(Plugin):
    def post_bind(self, state: CycleState, pod: "PodInfo", node_name: str) -> None:
        raise NotImplementedError


EXTENSION_POINTS: dict[str, type[Plugin]] = {
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
}


def default_normalize_score(scores: np.ndarray, reverse: bool, max_priority: int = MAX_NODE_SCORE) -> np.ndarray:
    """upstream helper.DefaultNormalizeScore (integer arithmetic)."""
    scores = np.asarray(scores, dtype=np.int64)
    if scores.size == 0:
        return scores
    mx = int(scores.max())
    if mx == 0:
        if reverse:
            return np.full_like(scores, max_priority)
        return scores
    out = max_priority * scores // mx
    if reverse:
        out = max_priority - out
    return out
