"""simulate's per-pod drill-down: for some pods, what every Filter plugin said of some nodes and
what every Score plugin gave them (raw, normalized, weight, weighted), as kube-scheduler-simulator
shows per node and plugin; explain.py's ``plugin_table`` makes the table of it, the report draws it.

How: just before such a pod's scheduling cycle, the same cycle is run once more on the same state
(``schedule_one`` with a copy of the run's random generator, the round-robin start put back, no
PostFilter), so the run's own decisions are untouched; its CycleState holds the scores of every
feasible node it scored (SCORES_KEY). The Score plugins are asked again for their raw scores on
those nodes, and the Filter plugins, one after another, for their verdict on the nodes named that
the cycle did not find feasible. The pod's last cycle is the one kept. A pod a pod-group cycle
decides (with its group) gets no drill-down: its cycle is not one pod's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..explain import NOT_RUN, PASSED, SKIPPED, plugin_table
from ..framework.cycle.podgroup_result import group_plugin
from ..framework.cycle.schedule import SCORES_KEY, NodeFilter, schedule_one
from ..framework.interface import CycleState
from ..framework.model.podinfo import PodInfo
from ..framework.queue.subqueues import QueuedPodInfo
from .queue_run import QueueRun

TOP = 5  # the best nodes a drill-down shows (besides the nodes named)
DEFAULT_PODS = 5  # pods drilled down into when none is named: the first ones in input order


@dataclass
class DrillSpec:
    """Which pods get a drill-down, and which nodes each shows besides its TOP best."""

    pods: list[str] = field(default_factory=list)  # namespace/name; empty: the first DEFAULT_PODS
    nodes: list[str] = field(default_factory=list)
    top: int = TOP

    def chosen(self, keys: list[str]) -> list[str]:
        return list(self.pods) if self.pods else keys[:DEFAULT_PODS]


@dataclass
class DrillDown:
    """One pod's drill-down under one policy (its last scheduling cycle)."""

    pod: str
    node: str | None = None  # the node the cycle chose (None: none fits)
    nodes: int = 0  # nodes in the cluster
    evaluated: int = 0
    feasible: int = 0
    message: str = ""  # why no node fits
    note: str = ""  # why there is no table, or what the table leaves out
    weights: dict[str, int] = field(default_factory=dict)
    filters: list[str] = field(default_factory=list)  # Filter plugins in chain order
    entries: list[dict[str, Any]] = field(default_factory=list)  # explain.plugin_table's nodes
    failures: dict[str, int] = field(default_factory=dict)

    def table(self) -> dict:
        """explain.py's per-plugin table of the nodes shown (the one explain prints)."""
        return plugin_table(self.entries, self.weights, self.filters)

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node, "nodes": self.nodes, "evaluated": self.evaluated,
                "feasible": self.feasible, **({"message": self.message} if self.message else {}),
                **({"note": self.note} if self.note else {}), "weights": self.weights,
                "table": [{"node": r["node"], "total": r["total"], "verdict": r["verdict"], "chosen": r["chosen"],
                           "plugins": r["cells"]} for r in self.table()["rows"]]}


def _filter_verdicts(chain, state: CycleState, pod: PodInfo, table, row: int, nominator) -> tuple[dict, str]:
    """Each Filter plugin's verdict on one node, in chain order, on the cycle's state (its
    PreFilter ran), the nominated pods counted as the cycle counts them: PASSED, the rejection's
    reasons, then NOT_RUN after it. And a word on the node."""
    out: dict[str, str] = {}
    verdict = "passed every Filter"
    rows = np.array([row], dtype=np.int64)
    added = NodeFilter(chain, nominator).add_nominated(pod, table)
    try:
        for p in chain.filter:
            if verdict != "passed every Filter":
                out[p.NAME] = NOT_RUN
                continue
            if p.NAME in state.skip_filter:
                out[p.NAME] = SKIPPED
                continue
            try:
                res = p.filter(state, pod, table, rows)
            except Exception as e:  # the cycle would have aborted: say so, never fail the report
                out[p.NAME] = f"error: {type(e).__name__}: {e}"
                verdict = f"{p.NAME} failed"
                continue
            if res.error is not None:
                out[p.NAME] = f"error: {res.error.message()}"
                verdict = f"{p.NAME} failed"
            elif bool(np.asarray(res.passed, dtype=bool)[0]):
                out[p.NAME] = PASSED
            else:
                reasons = [r for r, mask in res.reasons if bool(np.asarray(mask, dtype=bool)[0])]
                out[p.NAME] = "; ".join(reasons) or "rejected"
                verdict = f"rejected by {p.NAME}"
    finally:
        table.remove_pods(added)
    return out, verdict


def probe(chain, pod: PodInfo, table, rng: random.Random, nominator, spec: DrillSpec) -> DrillDown:
    """The drill-down of ``pod``'s cycle on the current state, leaving the state, the chain's
    round-robin start and ``rng`` as they were (see the module's docstring)."""
    start = chain.next_start_node_index
    twin = random.Random()
    twin.setstate(rng.getstate())
    state = CycleState()
    try:
        d = schedule_one(chain, pod, table, twin, state, nominator, post_filter=False)
    finally:
        chain.next_start_node_index = start
    dd = DrillDown(pod.key, d.node, d.num_all_nodes, d.evaluated, d.feasible, "" if d.node else d.message,
                   filters=[p.NAME for p in chain.filter], failures=dict(d.failures))
    names = table.names
    passed_all = {p.NAME: (SKIPPED if p.NAME in state.skip_filter else PASSED) for p in chain.filter}
    scores = state.read(SCORES_KEY)
    shown: list[int] = []
    if scores is not None and scores[1] is not None:
        feasible, total, mat, scored = scores
        dd.weights = {n: int(w) for n, w in scored}
        by_name = {p.NAME: p for p, _ in chain.score}
        raw = []
        for n, _ in scored:
            try:
                raw.append(np.asarray(by_name[n].score(state, pod, table, feasible), dtype=np.int64))
            except Exception:  # a raw score is a detail: leave it out
                raw.append(None)
        order = [int(i) for i in np.argsort(-total, kind="stable")]
        ties = int(np.count_nonzero(total == total.max())) - 1
        chosen = "chosen" + (f" (of {ties + 1} nodes with the best total, the first in kube-scheduler's "
                             "heap order)" if ties else "")
        pick = next((i for i in order if names[int(feasible[i])] == d.node), order[0])
        idx = [pick] + [i for i in order if i != pick][:max(spec.top - 1, 0)]
        pos = {names[int(r)]: i for i, r in enumerate(feasible.tolist())}
        idx += [pos[n] for n in spec.nodes if n in pos and pos[n] not in idx]
        for i in idx:
            named = "; asked for with --explain-node" if names[int(feasible[i])] in spec.nodes else ""
            dd.entries.append({
                "node": names[int(feasible[i])], "total": int(total[i]), "chosen": names[int(feasible[i])] == d.node,
                "verdict": (chosen if names[int(feasible[i])] == d.node else "feasible, scored") + named,
                "filters": passed_all,
                "normalized": {n: int(mat[k, i]) for k, (n, _) in enumerate(scored)},
                "scores": {n: int(mat[k, i]) * int(w) for k, (n, w) in enumerate(scored)},
                "raw": {n: int(raw[k][i]) for k, (n, _) in enumerate(scored) if raw[k] is not None}})
            shown.append(int(feasible[i]))
    elif d.node is not None:  # one feasible node, or the nominated node tried first: nothing scored
        why = ("the only feasible node: not scored" if d.feasible == 1 and not pod.nominated_node_name else
               "its nominated node, tried first: it passed every Filter, so nothing was scored")
        dd.entries.append({"node": d.node, "total": None, "chosen": True, "verdict": f"chosen; {why}",
                           "filters": passed_all})
        shown.append(table.index[d.node])
    elif d.evaluated == 0 and d.failures:  # rejected at PreFilter: no node was filtered
        dd.note = "rejected at PreFilter, before any node was filtered"
    wanted = [n for n in spec.nodes if n in table.index and table.index[n] not in shown]
    if d.node is None and not dd.note:  # the first nodes of the snapshot, to show why they do not fit
        wanted = [names[r] for r in range(min(spec.top, table.n)) if names[r] not in spec.nodes] + wanted
    if not dd.note:
        for n in wanted:
            fv, verdict = _filter_verdicts(chain, state, pod, table, table.index[n], nominator)
            if verdict == "passed every Filter":
                verdict += "; not scored (past the cycle's percentageOfNodesToScore, or left out at PreFilter)"
            dd.entries.append({"node": n, "total": None, "chosen": False, "filters": fv,
                               "verdict": verdict + ("; asked for with --explain-node" if n in spec.nodes else "")})
    missing = [n for n in spec.nodes if n not in table.index]
    if missing:
        dd.note = (dd.note + "; " if dd.note else "") + "not in the snapshot: " + ", ".join(missing)
    return dd


class DrillRun(QueueRun):
    """QueueRun with a drill-down taken before each cycle of the pods of ``spec`` (the last kept)."""

    def __init__(self, *args: Any, spec: DrillSpec, pods: list[str], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.spec = spec
        self.wanted = set(pods)
        self.drills: dict[str, DrillDown] = {}

    def _cycle(self, qpi: QueuedPodInfo) -> None:
        pod = qpi.pod
        if pod.key in self.wanted:
            group = group_plugin(self.chain)
            if group is not None and group.group_key(pod) is not None:
                self.drills[pod.key] = DrillDown(pod.key, nodes=self.table.n,
                                                 note=f"decided with its group ({group.group_key(pod)}) in a "
                                                      "pod-group cycle: no per-node drill-down")
            else:
                self.drills[pod.key] = probe(self.chain, pod, self.table, self.rng, self.nominator, self.spec)
        super()._cycle(qpi)
