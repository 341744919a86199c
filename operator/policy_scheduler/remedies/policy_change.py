"""``UsePolicy``: another SchedulingPolicy the pod may use (the caller names them: ready, admitting
its namespace) whose chain places it, with the plugin of the pod's own policy that rejected the
most nodes. The change is the pod's ``policy-scheduler.io/policy`` label; it is verified with the
other policy's chain on the same table."""

from __future__ import annotations

from typing import Any, Mapping

from .. import POLICY_LABEL
from ..framework.cycle.chain import Chain
from ..framework.model.podinfo import PodInfo
from .patch import pointer
from .pod_changes import Candidate, Caps
from .probe import Verdicts
from .result import USE_POLICY


def use_policy(pod: PodInfo, raw: Mapping[str, Any], v: Verdicts, current: str, alternatives: Mapping[str, Chain],
               caps: Caps) -> list[Candidate]:
    others = [(n, c) for n, c in alternatives.items() if n != current and isinstance(c, Chain)][: caps.per_kind]
    if not others:
        return []
    counts = {p: int(m.sum()) for p, m in v.rejected.items()}
    if counts:
        top = max(sorted(counts), key=lambda p: counts[p])
        why = f"; under {current or 'its policy'}, {top} rejects the most nodes ({counts[top]})"
    elif v.prefilter is not None:
        why = f"; under {current or 'its policy'}, {v.prefilter.plugin or 'a PreFilter plugin'} rejects it at PreFilter"
    else:
        why = ""
    labels = raw.get("metadata", {}).get("labels") if isinstance(raw.get("metadata"), Mapping) else None
    out = []
    for name, chain in others:
        ops: list[dict[str, Any]]
        if isinstance(labels, Mapping):
            ops = [{"op": "replace" if POLICY_LABEL in labels else "add",
                    "path": pointer("metadata", "labels", POLICY_LABEL), "value": name}]
        else:
            ops = [{"op": "add", "path": "/metadata/labels", "value": {POLICY_LABEL: name}}]
        out.append(Candidate(USE_POLICY, f"schedule it with SchedulingPolicy {name} (label {POLICY_LABEL}={name}){why}",
                             ops, 1.0, extra={"chain": chain}))
    return out
