"""``Allowance``: how much time the remedies search may take, per pod and per second, so that it
never takes the scheduling loop's time: a token bucket of seconds of search, refilled at
``per_second`` seconds per second of the clock, at most ``burst`` deep; each pod's search gets at
most ``per_pod`` of it. The caller asks ``grant()`` before a search (0: skip it, the pod gets no
suggestion this time) and reports what it took with ``spent(seconds)`` (``Remedies.seconds``)."""

from __future__ import annotations

import time
from typing import Callable

from .search import DEFAULT_BUDGET


class Allowance:
    def __init__(self, per_second: float = 0.05, per_pod: float = DEFAULT_BUDGET, burst: float = 0.2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second, self.per_pod, self.burst, self.clock = max(per_second, 0.0), max(per_pod, 0.0), \
            max(burst, 0.0), clock
        self.tokens = self.burst
        self.last = clock()
        self.granted = 0  # searches granted
        self.refused = 0  # searches refused for want of time

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + max(now - self.last, 0.0) * self.per_second)
        self.last = now

    def grant(self) -> float:
        """The budget of the next search: up to ``per_pod``, 0 when the bucket is empty (or holds
        less than a tenth of ``per_pod``: a search that short finds nothing)."""
        self._refill()
        budget = min(self.per_pod, self.tokens)
        if budget <= 0 or budget < self.per_pod / 10:
            self.refused += 1
            return 0.0
        self.granted += 1
        return budget

    def spent(self, seconds: float) -> None:
        """What a search took (it may overrun its budget by one simulation: the bucket goes
        negative and refills before the next grant)."""
        self._refill()
        self.tokens -= max(seconds, 0.0)
