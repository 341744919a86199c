"""What the remedies search returns: ``Suggestion`` (one verified change), ``Remedies`` (a pod's
ranked suggestions, and whether the search was cut short), and their JSON form, a small stable
schema for a condition, an annotation or an event (README.md in this folder documents it).

JSON form (``Remedies.to_json``), version 1::

    {"version": 1, "pod": "ns/name", "partial": false, "reason": "",        # why partial
     "suggestions": [{"kind": "LowerRequest", "target": "Pod",              # or "Cluster"
                      "change": "lower the cpu request to at most 1500m",   # in words
                      "patch": [{"op": "replace", "path": "/spec/containers/0/resources/requests/cpu",
                                 "value": "1500m"}],
                      "nodesOpened": 3, "node": "node-a", "score": 187,     # score: null if not scored
                      "size": 0.25}],
     "text": "lower the cpu request to at most 1500m: opens 3 nodes (node-a would be chosen)"}

Bounded: at most ``max_suggestions`` suggestions, strings cut at MAX_STRING characters, a patch
at MAX_PATCH operations, and suggestions dropped from the end until the document is at most
``max_bytes`` long (``"truncated": true`` then).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
POD, CLUSTER = "Pod", "Cluster"

# kinds of changes (``Suggestion.kind``), in the order they are tried
LOWER_REQUEST = "LowerRequest"
TOLERATE_TAINT = "TolerateTaint"
DROP_NODE_SELECTOR = "DropNodeSelector"
WIDEN_NODE_AFFINITY = "WidenNodeAffinity"
RELAX_SPREAD = "RelaxTopologySpread"
DROP_HOST_PORT = "DropHostPort"
DROP_VOLUME = "DropVolume"
DROP_POD_AFFINITY = "DropPodAffinityTerm"
CREATE_DEVICE_CLASS = "CreateDeviceClass"
DROP_RESOURCE_CLAIM = "DropResourceClaim"
UNCORDON = "UncordonNode"
PREEMPT = "EvictLowerPriority"
USE_POLICY = "UsePolicy"
KINDS = (LOWER_REQUEST, TOLERATE_TAINT, DROP_NODE_SELECTOR, WIDEN_NODE_AFFINITY, RELAX_SPREAD, DROP_HOST_PORT,
         DROP_VOLUME, DROP_POD_AFFINITY, CREATE_DEVICE_CLASS, DROP_RESOURCE_CLAIM, UNCORDON, PREEMPT, USE_POLICY)

MAX_STRING = 512
MAX_PATCH = 32
MAX_SUGGESTIONS = 5
MAX_BYTES = 4096
MAX_BLOCKERS = 8


def _cut(s: str, n: int = MAX_STRING) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


@dataclass
class Suggestion:
    """One change that places the pod, verified by the pod's own scheduling cycle."""

    kind: str
    target: str  # POD or CLUSTER
    change: str  # the change in words ("lower the cpu request to at most 1500m")
    patch: list[dict[str, Any]]  # Pod: JSON Patch on the pod; Cluster: operations naming their object
    size: float  # how big the change is (README.md: per kind); the ranking's second key
    nodes_opened: int = 0  # nodes the changed pod (or cluster) passes every Filter on
    node: str = ""  # the node its cycle chose
    score: int | None = None  # that node's total score (None: one feasible node, not scored)

    def rank_key(self) -> tuple:
        return (-self.nodes_opened, self.size, KINDS.index(self.kind) if self.kind in KINDS else len(KINDS),
                self.change)

    def sentence(self) -> str:
        n = self.nodes_opened
        return f"{self.change}: opens {n} node{'' if n == 1 else 's'} ({self.node} would be chosen)"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "change": _cut(self.change),
                "patch": [{k: (_cut(v) if isinstance(v, str) else v) for k, v in op.items()}
                          for op in self.patch[:MAX_PATCH]],
                **({"patchTruncated": True} if len(self.patch) > MAX_PATCH else {}),
                "nodesOpened": self.nodes_opened, "node": self.node, "score": self.score,
                "size": round(self.size, 4)}


@dataclass
class Remedies:
    """A pod's verified suggestions, best first."""

    pod: str
    suggestions: list[Suggestion] = field(default_factory=list)
    partial: bool = False  # the budget ran out (or a cap was reached) before every candidate was tried
    reason: str = ""  # why partial, or why there is nothing to suggest
    candidates: int = 0  # candidates tried
    rejected: int = 0  # candidates whose change did not place the pod (never returned)
    runs: int = 0  # filter passes and cycles run
    seconds: float = 0.0  # time spent
    # the diagnosis the candidates came from: the plugins rejecting each node, over every node (the
    # cycle stops at a node's first rejection): "NodeResourcesFit+TaintToleration" -> nodes, most first
    blockers: dict[str, int] = field(default_factory=dict)

    @property
    def best(self) -> Suggestion | None:
        return self.suggestions[0] if self.suggestions else None

    def text(self) -> str:
        """The best suggestion in one sentence ("" when there is none)."""
        b = self.best
        return b.sentence() if b else ""

    def to_json(self, max_suggestions: int = MAX_SUGGESTIONS, max_bytes: int = MAX_BYTES,
                blockers: bool = False) -> dict[str, Any]:
        """The versioned JSON form, at most ``max_bytes`` long when serialised compactly;
        ``blockers``: with the diagnosis (at most MAX_BLOCKERS entries)."""
        doc: dict[str, Any] = {"version": SCHEMA_VERSION, "pod": _cut(self.pod), "partial": self.partial,
                               "reason": _cut(self.reason),
                               "suggestions": [s.to_dict() for s in self.suggestions[:max(max_suggestions, 0)]],
                               "text": _cut(self.text())}
        if blockers:
            doc["blockers"] = {_cut(k, 128): v for k, v in list(self.blockers.items())[:MAX_BLOCKERS]}
        if len(self.suggestions) > max_suggestions:
            doc["truncated"] = True
        while doc["suggestions"] and len(dumps(doc).encode()) > max_bytes:
            doc["suggestions"].pop()
            doc["truncated"] = True
        if len(dumps(doc).encode()) > max_bytes:  # tiny limits: only what says what happened
            doc = {"version": SCHEMA_VERSION, "partial": self.partial, "suggestions": [], "truncated": True}
        return doc


def dumps(doc: dict[str, Any]) -> str:
    """The compact serialisation the size cap counts."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
