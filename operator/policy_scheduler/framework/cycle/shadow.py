"""A shadow decision: what a candidate chain would decide for a pod, beside the chain that decides
it, on the same snapshot and before the decided pod is assumed. The candidate never binds.

A decision *changed* when the node the stable chain chose is not among the candidate's best
nodes (ties count as agreement, so the count does not depend on tie-breaks), or when one of the
two finds no node and the other does. The plugins that moved a changed decision are those whose
weighted score difference between the candidate's node and the stable node grew from the stable
chain to the candidate, most first: per plugin, ``w_cand * (cand score(cand node) - cand score(stable
node)) - w_stable * (stable score(cand node) - stable score(stable node))``, positive ones only (with
the same args both chains score alike, and this is ``(w_cand - w_stable) * (score difference)``).

Two ways, one answer:
- *shared*: the candidate has the stable chain's plugins with the same args in the same order, the
  same opt-outs and percentageOfNodesToScore; only weights differ. Then it filters exactly as the
  stable cycle did and its plugins' normalized scores are the stable cycle's (schedule.SCORES_KEY):
  its totals are a matrix-vector product, no plugin runs again.
- *full*: anything else. The candidate runs a cycle of its own (``schedule_one``, its own
  CycleState and tie-break generator) on the same table.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..interface import CycleState
from ..model.nodetable import NodeTable
from ..model.nodetree import heap_root_among
from ..model.podinfo import PodInfo
from ..queue.nominator import Nominator
from .chain import Chain
from .decision import Decision
from .schedule import SCORES_KEY, schedule_one


def _plugin_key(p: Any) -> tuple[str, Any]:
    return (p.name, p.args)


def shares_filters(stable: Any, candidate: Any) -> bool:
    """Whether two chain specs (``plugins``, ``disabled``, ``percentage_of_nodes_to_score``)
    differ in score weights only: then the shadow takes the shared way."""
    return ([_plugin_key(p) for p in stable.plugins] == [_plugin_key(p) for p in candidate.plugins]
            and [(d.name, d.point) for d in stable.disabled] == [(d.name, d.point) for d in candidate.disabled]
            and stable.percentage_of_nodes_to_score == candidate.percentage_of_nodes_to_score)


@dataclass
class ShadowResult:
    pod: str
    stable: str | None  # the node the stable chain chose (None: unschedulable)
    candidate: str | None  # the candidate's best node (the stable node when it is among them)
    changed: bool
    plugins: list[str] = field(default_factory=list)  # what moved a changed decision, most first


@dataclass
class Shadow:
    """A candidate chain compared with a stable one (``shared``: shares_filters of their specs)."""

    stable: Chain
    candidate: Chain
    shared: bool
    rng: random.Random = field(default_factory=lambda: random.Random(0))  # the candidate's tie-breaks (full way)

    def __post_init__(self) -> None:
        self._stable_w = {p.NAME: w for p, w in self.stable.score}
        self._cand_w = {p.NAME: w for p, w in self.candidate.score}
        self._weights: dict[tuple[str, ...], np.ndarray] = {}

    def compare(self, pod: PodInfo, nodes: NodeTable, state: CycleState, decision: Decision,
                stable_node: str | None = None, nominator: Nominator | None = None) -> ShadowResult:
        """The candidate's decision for ``pod`` beside the stable ``decision`` (whose cycle wrote
        ``state``), on ``nodes`` as that cycle saw them. ``stable_node``: the node the pod goes
        to (default the decision's; a replay passes the recorded one)."""
        node = stable_node if stable_node is not None else decision.node
        if self.shared:
            return self._shared(pod, nodes, state, node)
        return self._full(pod, nodes, state, decision, node, nominator)

    def _shared(self, pod: PodInfo, nodes: NodeTable, state: CycleState, node: str | None) -> ShadowResult:
        if node is None:  # the same filters reject every node for the candidate too
            return ShadowResult(pod.key, None, None, False)
        scores = state.read(SCORES_KEY)
        if scores is None or scores[1] is None:  # one feasible node, or the nominated node passed
            return ShadowResult(pod.key, node, node, False)
        feasible, _, mat, scored = scores
        row = nodes.index.get(node)
        at = np.flatnonzero(feasible == row) if row is not None else np.empty(0, dtype=np.intp)
        if len(at) == 0:  # the stable node was not scored (a replay following another run)
            return ShadowResult(pod.key, node, None, True)
        i_s = int(at[0])
        names = tuple(n for n, _ in scored)
        wc = self._weights.get(names)
        if wc is None:  # the candidate's weights in the order the stable cycle scored (per skip set)
            wc = self._weights[names] = np.array([self._cand_w.get(n, 0) for n in names], dtype=np.int64)
        total = wc @ mat
        best = total.max()
        if total[i_s] == best:
            return ShadowResult(pod.key, node, node, False)
        i_c = heap_root_among(np.flatnonzero(total == best))  # the node the candidate would take
        ws = np.array([w for _, w in scored], dtype=np.int64)
        delta = (wc - ws) * (mat[:, i_c] - mat[:, i_s])
        return ShadowResult(pod.key, node, nodes.names[int(feasible[i_c])], True,
                            _movers([n for n, _ in scored], delta))

    def _full(self, pod: PodInfo, nodes: NodeTable, stable_state: CycleState, decision: Decision,
              node: str | None, nominator: Nominator | None) -> ShadowResult:
        cstate = CycleState()
        d = schedule_one(self.candidate, pod, nodes, self.rng, cstate, nominator)
        if d.node is None:
            return ShadowResult(pod.key, node, None, node is not None, sorted(d.unschedulable_plugins)
                                if node is not None else [])
        if node is None:
            return ShadowResult(pod.key, None, d.node, True, sorted(decision.unschedulable_plugins))
        scores = cstate.read(SCORES_KEY)
        if scores is None or scores[1] is None:
            return ShadowResult(pod.key, node, d.node, d.node != node)
        feasible, total, mat, scored = scores
        row = nodes.index.get(node)
        at = np.flatnonzero(feasible == row) if row is not None else np.empty(0, dtype=np.intp)
        if len(at) == 0:  # the candidate filtered the stable node out (or did not reach it)
            return ShadowResult(pod.key, node, d.node, True)
        i_s = int(at[0])
        best = total.max()
        if total[i_s] == best:
            return ShadowResult(pod.key, node, node, False)
        i_c = heap_root_among(np.flatnonzero(total == best))  # the node the candidate would take
        cand_row = int(feasible[i_c])
        # per plugin: its weighted difference between the candidate's node and the stable node
        # under the candidate, less the same under the stable chain (its own scores where it scored
        # both nodes; a plugin a chain lacks weighs 0 there)
        move: dict[str, int] = {}
        for k, (n, w) in enumerate(scored):
            move[n] = int(w) * int(mat[k, i_c] - mat[k, i_s])
        s_scores = stable_state.read(SCORES_KEY)
        if s_scores is not None and s_scores[1] is not None:
            s_feasible, _, s_mat, s_scored = s_scores
            a, b = np.flatnonzero(s_feasible == cand_row), np.flatnonzero(s_feasible == row)
            if len(a) and len(b):
                for k, (n, w) in enumerate(s_scored):
                    move[n] = move.get(n, 0) - int(w) * int(s_mat[k, a[0]] - s_mat[k, b[0]])
        names = list(move)
        return ShadowResult(pod.key, node, nodes.names[cand_row], True,
                            _movers(names, np.array([move[n] for n in names], dtype=np.int64)))


def _movers(names: Sequence[str], delta: np.ndarray) -> list[str]:
    """The plugins with a positive share in moving the decision, largest first."""
    order = np.argsort(-delta, kind="stable")
    return [names[int(i)] for i in order if delta[int(i)] > 0]
