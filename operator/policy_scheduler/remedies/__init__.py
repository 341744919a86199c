"""Why a pod is pending and what would place it: ranked changes to the pod or the cluster, each
verified by the pod's own scheduling cycle (README.md in this folder). Pure: no client, no I/O.

    suggest(pod, state, policy, decision, nominator=..., budget=0.020) -> Remedies
    Remedies.suggestions: [Suggestion], best first; Remedies.to_json(): the versioned JSON form;
    Remedies.text(): the best one in a sentence; apply_pod_patch(pod, suggestion.patch): the pod
    changed as a Pod suggestion says.
"""

from .allowance import Allowance
from .patch import PatchError, apply_pod_patch
from .pod_changes import Caps
from .result import CLUSTER, KINDS, POD, SCHEMA_VERSION, Remedies, Suggestion, dumps
from .search import DEFAULT_BUDGET, suggest

__all__ = ["Allowance", "CLUSTER", "DEFAULT_BUDGET", "KINDS", "POD", "SCHEMA_VERSION", "Caps", "PatchError", "Remedies",
           "Suggestion", "apply_pod_patch", "dumps", "suggest"]
