"""A Leadership that holds the lease only while ``holding`` is set: a standby replica, or a leader
that lost its lease (shared by the leader, health and telemetry tests)."""

from __future__ import annotations

from policy_scheduler.cluster.leader import Leadership


class Standby(Leadership):
    """A replica that does not (or no longer) hold the lease."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = False

    def valid(self) -> bool:
        return self.holding

    def time_left(self) -> float | None:
        return 5.0 if self.holding else 0.0
