"""Candidate changes to the pod's required inter-pod (anti-)affinity: when InterPodAffinity alone
rejects some nodes because of the pod's own terms (``node(s) didn't match pod affinity rules``,
``node(s) didn't match pod anti-affinity rules``), each of those required terms dropped, named
by its topology key and selector; then, with more than one, all of that kind at once.

A node rejected because an existing pod's anti-affinity excludes this pod (``node(s) didn't
satisfy existing pods anti-affinity rules``) is opened by no change of this pod's affinity: the
rule is the other pod's, and this pod's labels are what it matches (changing them would change
what selects the pod: its owner, Services, policies). No candidate for it.

Like every candidate, none is verified here: the search (search.py) simulates each.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np

from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from .patch import pointer
from .pod_changes import Candidate, Caps
from .probe import Verdicts
from .result import DROP_POD_AFFINITY

PLUGIN = "InterPodAffinity"
# upstream's reasons (plugins/inter_pod_affinity.py ERR_AFFINITY, ERR_ANTI_AFFINITY)
TERMS = (("podAffinity", "node(s) didn't match pod affinity rules", "affinity"),
         ("podAntiAffinity", "node(s) didn't match pod anti-affinity rules", "anti-affinity"))
MAX_WORDS = 120  # characters of a term's selector in the change's words


def _map(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def describe(term: Mapping[str, Any]) -> str:
    """A term in words: its topology key and selector (cut), e.g. ``topologyKey
    kubernetes.io/hostname, labelSelector {"matchLabels": {"app": "db"}}``."""
    tk = term.get("topologyKey")
    sel = term.get("labelSelector")
    try:
        words = json.dumps(sel, sort_keys=True, separators=(", ", ": ")) if sel is not None else "none"
    except (TypeError, ValueError):
        words = "unreadable"
    if len(words) > MAX_WORDS:
        words = words[: MAX_WORDS - 3] + "..."
    return f"topologyKey {tk if isinstance(tk, str) else '?'}, labelSelector {words}"


def drop_pod_affinity(pod: PodInfo, raw: Mapping[str, Any], table: NodeTable, v: Verdicts,
                      caps: Caps) -> list[Candidate]:
    """Per required term of the pod's podAffinity / podAntiAffinity, when InterPodAffinity alone
    rejects some node for that kind's reason: the term dropped (size 1); with several terms of
    the kind, all of them too (size: their count). Terms of the kind whose reason rejects the
    most nodes come first."""
    only = v.only({PLUGIN})
    if not only.any():
        return []
    affinity = _map(_map(raw.get("spec")).get("affinity"))
    found: list[tuple[int, list[Candidate]]] = []
    for key, reason, words in TERMS:
        rows = np.zeros(v.n, dtype=bool)
        for r, mask in v.reasons.get(PLUGIN, ()):
            if r == reason:
                rows |= mask
        count = int((rows & only).sum())
        terms = _map(affinity.get(key)).get("requiredDuringSchedulingIgnoredDuringExecution")
        if not count or not isinstance(terms, list) or not terms or len(terms) > caps.items:
            continue
        path = ("spec", "affinity", key, "requiredDuringSchedulingIgnoredDuringExecution")
        out = [Candidate(DROP_POD_AFFINITY, f"drop required pod {words} term {i} ({describe(_map(t))})",
                         [{"op": "remove", "path": pointer(*path, i)}], 1.0, extra={"count": count})
               for i, t in enumerate(terms)]
        if len(terms) > 1:
            out.append(Candidate(DROP_POD_AFFINITY, f"drop the pod's {len(terms)} required pod {words} terms",
                                 [{"op": "remove", "path": pointer(*path)}], float(len(terms)),
                                 extra={"count": count}))
        found.append((count, out))
    found.sort(key=lambda x: -x[0])
    return [c for _, cs in found for c in cs][: caps.per_kind]
