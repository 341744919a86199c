"""Changes of two kinds at once, for nodes two plugins reject (too little cpu *and* an untolerated
taint, a nodeSelector key *and* a colliding host port, ...): for a few such nodes, each kind's
candidate for that node alone (the kind's generator on a view of the diagnosis where the node is
rejected by its plugin only), the two patches joined. Verified like any other (search.py).

Only the kinds whose candidate is a plain patch drawn from one node: requests, taints, node
selector and affinity, host ports. Kind ``"A+B"`` (e.g. ``"LowerRequest+TolerateTaint"``)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from .pod_changes import (AFFINITY, FIT, PORTS, TAINTS, Candidate, Caps, drop_host_ports, lower_requests,
                          node_affinity, tolerate_taints)
from .probe import Verdicts

GENERATORS = {FIT: lower_requests, TAINTS: tolerate_taints, AFFINITY: node_affinity, PORTS: drop_host_ports}


def _view(v: Verdicts, row: int, plugin: str) -> Verdicts:
    """The diagnosis as if ``plugin`` alone rejected node ``row`` (and nothing else any node)."""
    m = np.zeros(v.n, dtype=bool)
    m[row] = True
    w = Verdicts(v.n)
    w.rejected = {plugin: m}
    w.reasons = {plugin: [(r, mk & m) for r, mk in v.reasons.get(plugin, ()) if mk[row]]}
    return w


def two_kinds(pod: PodInfo, raw: Mapping[str, Any], table: NodeTable, v: Verdicts, caps: Caps) -> list[Candidate]:
    if v.prefilter is not None or not v.rejected:
        return []
    names = sorted(v.rejected)
    count = np.zeros(v.n, dtype=np.int64)
    for p in names:
        count += v.rejected[p]
    if v.outside is not None:
        count[v.outside] = 99
    rows = np.flatnonzero(count == 2)[: caps.rows]
    out: list[Candidate] = []
    pairs: dict[tuple[str, ...], int] = {}
    tried = 0
    for row in rows.tolist():
        pair = tuple(p for p in names if v.rejected[p][row])
        if any(p not in GENERATORS for p in pair) or pairs.get(pair, 0) >= 2:
            continue
        tried += 1
        if tried > 2 * caps.per_kind:  # each try reads every node once per kind: a few only
            break
        parts = []
        for p in pair:
            got = GENERATORS[p](pod, raw, table, _view(v, row, p), caps)
            if not got:
                break
            parts.append(got[0])
        if len(parts) != 2 or any(c.search is not None for c in parts):
            continue
        change = f"{parts[0].change}; and {parts[1].change}"
        if any(c.change == change for c in out):
            continue
        pairs[pair] = pairs.get(pair, 0) + 1
        out.append(Candidate(f"{parts[0].kind}+{parts[1].kind}", change, parts[0].ops + parts[1].ops,
                             parts[0].size + parts[1].size))
        if len(out) >= caps.per_kind:
            break
    return out
