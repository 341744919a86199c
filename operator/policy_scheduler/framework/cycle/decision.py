"""What a scheduling cycle answers: ``Decision`` (upstream's ScheduleResult with the
diagnosis of a failure, schedule_one.go), the best nodes' ``NodeScore``, and upstream's
FitError message (framework/types.go, ``FitError.Error``).

Values only: schedule.py (``schedule_one``) builds them; the operator records and explains them
(the decision annotation, events, ``explain``), and the gang plugins word their own rejections
with ``fit_error_message``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..status import Status


@dataclass
class NodeScore:
    node: str
    total: int
    plugins: dict[str, tuple[int, int]] = field(default_factory=dict)  # plugin -> (normalized, weighted)
    details: dict[str, dict] = field(default_factory=dict)  # plugin -> what its describe() says of the node


@dataclass
class Decision:
    """What one cycle decided and why (bounded in size: top nodes only)."""

    pod: str
    node: str | None
    status: Status
    num_all_nodes: int = 0
    evaluated: int = 0
    feasible: int = 0
    top: list[NodeScore] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)  # reason -> node count
    message: str = ""
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    nominated_node: str | None = None  # a PostFilter's nomination (the pod is tried there first next time)
    duration: float = 0.0

    @property
    def scheduled(self) -> bool:
        return self.node is not None


def fit_error_message(num_all_nodes: int, failures: dict[str, int], prefilter_msg: str | None = None,
                      postfilter_msg: str = "") -> str:
    """upstream FitError.Error(): "0/N nodes are available: <histogram>." (+ PostFilter text)."""
    if prefilter_msg is not None:
        reasons = f" {prefilter_msg}."
    else:
        hist = sorted(f"{count} {reason}" for reason, count in failures.items())
        reasons = " " + ", ".join(hist) + "."
    msg = f"0/{num_all_nodes} nodes are available:{reasons}"
    if postfilter_msg:
        msg += " " + postfilter_msg
    return msg
