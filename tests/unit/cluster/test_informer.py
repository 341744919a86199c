"""informer.Backoff: client-go's reflector backoff (exponential with jitter, reset when quiet)."""

from __future__ import annotations

import random

from policy_scheduler.cluster.informer import Backoff


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_delays_double_up_to_the_cap_and_reset_after_a_quiet_spell():
    clock = Clock()
    b = Backoff(initial=0.8, cap=30, factor=2, jitter=0, reset=120, clock=clock)
    delays = []
    for _ in range(8):
        delays.append(b.next())
        clock.t += delays[-1]
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30]
    clock.t += 121  # two quiet minutes: back to the start
    assert b.next() == 0.8


def test_jitter_spreads_replicas_that_fail_together():
    firsts = {round(Backoff(rng=random.Random(seed)).next(), 3) for seed in range(20)}
    assert len(firsts) == 20 and all(0.8 <= d < 1.6 for d in firsts)
