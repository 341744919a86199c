"""cache/rollouts.py: the UID hash that picks canary pods, who decides in which phase, the
window analysis (a breach, not before minPods; promotion by pods and by time; old samples
trimmed), the shadow tally, status.rollout and its adoption by a new leader, the ROLLOUT column."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid

import pytest

from policy_scheduler.policy.rollout import RolloutSpec
from policy_scheduler.cache.rollouts import (
    ABORTED,
    CANARY,
    HASH_BUCKETS,
    PROGRESSING,
    PROMOTED,
    PROMOTING,
    ROLLED_BACK,
    SHADOWING,
    STABLE,
    Rollout,
    bucket,
    candidate_hash,
    in_canary,
    p95,
)
from policy_scheduler.framework.cycle.shadow import ShadowResult

CANDIDATE = {"plugins": [{"name": "NodeResourcesFit", "weight": 1}]}


def uids(n, seed=7):
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]


class Clock:
    def __init__(self, t=0.0):
        self.t = t

    def __call__(self):
        return self.t


def raw(strategy="Canary", percent=10, **kw):
    out = {"strategy": strategy, "candidate": CANDIDATE, **kw}
    if strategy == "Canary":
        out["percent"] = percent
    return out


def rollout(strategy="Canary", percent=10, now=None, wall=None, **kw):
    r = raw(strategy, percent, **kw)
    spec = RolloutSpec.model_validate(r)
    return Rollout(spec, candidate_hash(r), 3, now=now or Clock(), wall=wall or Clock(1_700_000_000))


# ------------------------------------------------------------------ the UID hash
def test_bucket_is_stable_across_processes_and_hash_seeds():
    ids = uids(20)
    here = [bucket(u) for u in ids]
    assert here == [bucket(u) for u in ids] and all(0 <= b < HASH_BUCKETS for b in here)
    code = ("import sys, json; from policy_scheduler.cache.rollouts import bucket; "
            "print(json.dumps([bucket(u) for u in sys.argv[1:]]))")
    for seed in ("1", "12345"):
        out = subprocess.run([sys.executable, "-c", code, *ids], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        assert [int(x) for x in out.strip().strip("[]").split(",")] == here


def test_ten_percent_takes_about_a_tenth_of_the_pods():
    ids = uids(10_000)
    share = sum(in_canary(u, 10) for u in ids) / len(ids)
    assert 0.09 <= share <= 0.11
    assert 0.49 <= sum(in_canary(u, 50) for u in ids) / len(ids) <= 0.51
    assert all(in_canary(u, 100) for u in ids)
    assert not any(in_canary(u, 0.001) for u in ids[:1000])  # rounds to no bucket at all


def test_a_canary_pod_stays_in_the_canary_when_the_share_grows():
    for u in uids(2000):
        if in_canary(u, 5):
            assert in_canary(u, 10) and in_canary(u, 50)


def test_p95_is_the_nearest_rank():
    assert p95([]) is None
    assert p95([4.0]) == 4.0
    assert p95([float(x) for x in range(100, 0, -1)]) == 95.0
    assert p95([1.0] * 19 + [50.0]) == 1.0  # rank 19 of 20
    assert p95([1.0] * 18 + [50.0, 60.0]) == 50.0


def test_candidate_hash_ignores_thresholds_only():
    h = candidate_hash(raw())
    assert h == candidate_hash(raw(analysis={"minPods": 50}, promote={"pods": 3}))
    assert h != candidate_hash(raw(percent=20))
    assert h != candidate_hash({**raw(), "candidate": {"plugins": [{"name": "NodeResourcesFit", "weight": 2}]}})
    assert candidate_hash(raw("Shadow")) != candidate_hash({**raw("Shadow"), "strategy": "Canary"})


# ------------------------------------------------------------------ who decides
def test_arm_is_canary_only_while_progressing():
    ids = uids(1000)
    ro = rollout(percent=30)
    assert ro.phase == PROGRESSING and ro.active and not ro.shadowing
    arms = [ro.arm(u) for u in ids]
    assert arms == [CANARY if in_canary(u, 30) else STABLE for u in ids]
    assert 200 < arms.count(CANARY) < 400
    assert ro.arm("") == STABLE  # a pod without a UID is never a canary
    for phase in (PROMOTING, PROMOTED, ROLLED_BACK, ABORTED):
        ro.finish(phase, "x")
        assert {ro.arm(u) for u in ids} == {STABLE}, phase
    shadow = rollout("Shadow")
    assert shadow.phase == SHADOWING and shadow.shadowing
    assert {shadow.arm(u) for u in ids} == {STABLE}


def test_finish_sets_the_end_of_ended_phases_only():
    wall = Clock(1_700_000_000)
    ro = rollout(wall=wall)
    wall.t += 60
    ro.finish(PROMOTING, "promoting")
    assert ro.end is None and not ro.active
    wall.t += 5
    ro.finish(PROMOTED, "done")
    assert ro.end == 1_700_000_065


# ------------------------------------------------------------------ the analysis
def test_a_canary_that_always_fails_is_breached_once_min_pods_attempts_are_in():
    ro = rollout(analysis={"minPods": 5})
    for _ in range(10):
        ro.attempt(STABLE, False)
    for i in range(4):
        ro.attempt(CANARY, True)
        assert ro.analyze().breach is None, i  # fewer than minPods canary attempts
    ro.attempt(CANARY, True)
    v = ro.analyze()
    assert v.promote is None
    assert v.breach is not None and v.breach.startswith("FailedScheduling rate 100% of 5 canary attempts")
    assert "against 0% of 10 stable" in v.breach and "at most +0.1" in v.breach
    assert ro.last_measures[CANARY]["failureRate"] == 1.0 and ro.last_measures[STABLE]["failureRate"] == 0.0


def test_failures_as_frequent_as_the_stable_ones_are_no_breach():
    ro = rollout(analysis={"minPods": 5, "maxFailureRateIncrease": 0.2})
    for i in range(10):
        ro.attempt(STABLE, i % 2 == 0)  # 50%
        ro.attempt(CANARY, i % 10 < 6)  # 60%: +0.1, within +0.2
    assert ro.analyze().breach is None
    for _ in range(10):
        ro.attempt(CANARY, True)  # 80% against 50%
    assert "FailedScheduling rate 80% of 20 canary attempts against 50% of 10 stable" in ro.analyze().breach


def test_an_unset_threshold_is_not_checked():
    ro = rollout(analysis={"minPods": 1, "maxFailureRateIncrease": None})
    for _ in range(5):
        ro.attempt(CANARY, True)
    assert ro.analyze().breach is None


def test_a_slower_canary_is_breached_on_time_to_scheduled_once_both_arms_placed_min_pods():
    ro = rollout(analysis={"minPods": 3, "maxTimeToScheduledP95Increase": "30s"})
    for i in range(3):
        ro.bound(STABLE, 1.0, f"s{i}")
    for i in range(2):
        ro.bound(CANARY, 100.0, f"c{i}")
    assert ro.analyze().breach is None  # two canary pods placed: not judged yet
    ro.bound(CANARY, 100.0, "c2")
    v = ro.analyze()
    assert v.breach == "time to scheduled p95 100s on the canary against 1s on stable (at most +30s)"


def test_nodes_used_and_zone_skew_measures():
    ro = rollout(analysis={"minPods": 4, "maxNodesUsedIncrease": 0.5, "maxTimeToScheduledP95Increase": None})
    for _ in range(4):
        ro.bound(STABLE, 1.0, "a")  # one node for four pods: 0.25
    for i in range(4):
        ro.bound(CANARY, 1.0, f"c{i}")  # four nodes for four pods: 1.0
    zone = {"a": "z1", "c0": "z1", "c1": "z1", "c2": "z1", "c3": "z2"}
    v = ro.analyze(zone_of=zone.get, zones=["z1", "z2"])
    assert v.breach == "nodes used per pod 1 on the canary against 0.25 on stable (at most +0.5)"
    assert ro.last_measures[STABLE]["zoneSkew"] == 1.0 and ro.last_measures[CANARY]["zoneSkew"] == 0.5


def test_bound_pods_count_once_per_uid():
    ro = rollout()
    assert ro.count_bound(CANARY, "u1") and ro.count_bound(STABLE, "u2")
    assert not ro.count_bound(CANARY, "u1")  # the same pod again (a resync, a restart's LIST)
    assert not ro.count_bound(CANARY, "") and not ro.count_bound("other", "u3")
    assert ro.arms[CANARY].to_status() == {"attempts": 1, "failures": 0, "bound": 1}
    assert ro.arms[STABLE].to_status() == {"attempts": 1, "failures": 0, "bound": 1}
    ro.bound(CANARY, 2.0, "n1")  # a window sample of this process: not a count
    assert ro.arms[CANARY].bound == 1 and len(ro.arms[CANARY].placed) == 1


def test_promotion_by_pods():
    ro = rollout(promote={"pods": 3})
    ro.count_bound(CANARY, "u1")
    ro.count_bound(CANARY, "u2")
    ro.count_bound(STABLE, "u3")  # stable pods do not count
    ro.count_bound(CANARY, "u2")  # nor does a pod seen twice
    assert ro.analyze().promote is None
    ro.count_bound(CANARY, "u4")
    assert ro.analyze().promote == "3 canary pods bound without a breach"


def test_promotion_by_time():
    wall = Clock(1_700_000_000)
    ro = rollout(wall=wall, promote={"after": "10m"})
    wall.t += 599
    assert ro.analyze().promote is None
    wall.t += 1
    assert ro.analyze().promote == "10m without a breach"


def test_a_breach_wins_over_a_promotion():
    ro = rollout(analysis={"minPods": 1}, promote={"pods": 1})
    ro.count_bound(CANARY, "u1")
    ro.attempt(CANARY, True)
    v = ro.analyze()
    assert v.breach is not None and v.promote is None


def test_only_a_progressing_canary_is_analysed():
    ro = rollout(analysis={"minPods": 1})
    ro.attempt(CANARY, True)
    ro.finish(ROLLED_BACK, "x")
    assert ro.analyze().breach is None
    shadow = rollout("Shadow", analysis={"minPods": 1}, promote={"pods": 1})
    assert shadow.analyze().breach is None and shadow.analyze().promote is None


def test_the_window_drops_old_samples_but_not_the_counts():
    now = Clock(1000.0)
    ro = rollout(now=now, analysis={"minPods": 5, "window": "1m"})
    for _ in range(3):
        ro.attempt(CANARY, True)
    now.t += 50
    for _ in range(2):
        ro.attempt(CANARY, True)
    now.t += 20  # the first three are 70s old
    assert ro.analyze().breach is None
    assert ro.last_measures[CANARY]["attempts"] == 2
    assert ro.arms[CANARY].attempts == 5 and ro.arms[CANARY].failures == 5  # the status counts stay
    for _ in range(3):
        ro.attempt(CANARY, True)
    assert "of 5 canary attempts" in ro.analyze().breach
    now.t += 3600
    assert ro.analyze().breach is None and ro.last_measures[CANARY]["attempts"] == 0


# ------------------------------------------------------------------ the shadow tally
def test_the_shadow_tally():
    ro = rollout("Shadow")
    ro.shadow(ShadowResult("ns/a", "n1", "n1", False))
    ro.shadow(ShadowResult("ns/b", "n1", "n2", True, ["PodTopologySpread", "NodeResourcesFit"]))
    ro.shadow(ShadowResult("ns/c", "n1", None, True, ["NodeAffinity"]))
    ro.shadow(ShadowResult("ns/d", None, "n3", True, ["NodeAffinity"]))
    assert (ro.compared, ro.changed, ro.became_unschedulable, ro.became_schedulable) == (4, 3, 1, 1)
    st = ro.to_status()["shadow"]
    assert st["plugins"][0] == {"name": "NodeAffinity", "changed": 2}
    assert [s["pod"] for s in st["samples"]] == ["ns/b", "ns/c", "ns/d"]
    assert st["samples"][1] == {"pod": "ns/c", "stable": "n1", "candidate": None, "plugins": ["NodeAffinity"],
                                "time": "2023-11-14T22:13:20Z"}


# ------------------------------------------------------------------ status.rollout and adoption
T0 = 1_700_000_000  # 2023-11-14T22:13:20Z


def test_to_status_of_a_canary():
    wall = Clock(T0)
    ro = rollout(percent=25, wall=wall, promote={"pods": 4})
    ro.attempt(STABLE, False)
    ro.attempt(CANARY, True)
    ro.count_bound(CANARY, "u1")
    st = ro.to_status()
    assert st["strategy"] == "Canary" and st["percent"] == 25 and st["candidateHash"] == ro.hash
    assert st["phase"] == PROGRESSING and st["summary"] == "Progressing 25% 1/4"
    assert st["startTime"] == "2023-11-14T22:13:20Z" and st["endTime"] is None and st["observedGeneration"] == 3
    assert st["stable"] == {"attempts": 1, "failures": 0, "bound": 0}
    assert st["canary"] == {"attempts": 2, "failures": 1, "bound": 1}
    assert "shadow" not in st and "analysis" not in st
    ro.analyze()
    assert ro.to_status()["analysis"]["canary"] == {"attempts": 1, "failureRate": 1.0, "placed": 0}


def test_a_new_rollout_adopting_a_status_continues_it():
    wall = Clock(T0)
    old = rollout(wall=wall)
    for i in range(6):
        old.attempt(STABLE, False)
        old.attempt(CANARY, i < 5)
    old.count_bound(CANARY, "u1")
    wall.t += 120
    old.finish(ROLLED_BACK, "rolled back: FailedScheduling rate")
    status = old.to_status()
    assert status["endTime"] == "2023-11-14T22:15:20Z"

    new = rollout(wall=Clock(T0 + 900))  # a new leader, fifteen minutes later
    assert new.start == T0 + 900 and new.phase == PROGRESSING
    assert new.adopt(status)
    assert new.start == T0 and new.end == T0 + 120
    assert new.phase == ROLLED_BACK and new.message == "rolled back: FailedScheduling rate"
    assert new.arms[CANARY].to_status() == {"attempts": 6, "failures": 5, "bound": 1}
    assert new.arms[STABLE].to_status() == {"attempts": 6, "failures": 0, "bound": 0}
    assert new.to_status() == status
    assert {new.arm(u) for u in uids(200)} == {STABLE}  # stays rolled back


def test_a_status_about_another_candidate_is_not_adopted():
    old = rollout(wall=Clock(T0))
    old.attempt(CANARY, True)
    old.finish(ROLLED_BACK, "x")
    other = raw(percent=10)
    other["candidate"] = {"plugins": [{"name": "NodeResourcesFit", "weight": 7}]}
    new = Rollout(RolloutSpec.model_validate(other), candidate_hash(other), now=Clock(), wall=Clock(T0 + 900))
    assert new.hash != old.hash
    assert not new.adopt(old.to_status())
    assert new.phase == PROGRESSING and new.start == T0 + 900 and new.arms[CANARY].attempts == 0
    assert not new.adopt(None) and not new.adopt("RolledBack")


def test_adoption_only_moves_forward():
    ro = rollout(wall=Clock(T0))
    for _ in range(5):
        ro.attempt(CANARY, False)
    later = {**ro.to_status(), "phase": PROGRESSING, "startTime": "2023-11-15T00:00:00Z",
             "canary": {"attempts": 2, "failures": True, "bound": 9}}
    assert ro.adopt(later)
    assert ro.start == T0  # a later start does not replace an earlier one
    assert ro.arms[CANARY].to_status() == {"attempts": 5, "failures": 0, "bound": 9}  # larger ints only
    assert ro.adopt({**ro.to_status(), "phase": PROMOTING, "message": "promoting: 9 canary pods"})
    assert ro.phase == PROMOTING and ro.message == "promoting: 9 canary pods"
    assert ro.adopt({**ro.to_status(), "phase": PROGRESSING})
    assert ro.phase == PROMOTING  # an older status does not undo a promotion
    assert ro.adopt({**ro.to_status(), "startTime": "yesterday", "endTime": "never"})
    assert ro.start == T0


def test_a_shadow_status_round_trip():
    sh = rollout("Shadow", wall=Clock(T0))
    sh.shadow(ShadowResult("ns/a", "n1", "n2", True, ["PodTopologySpread"]))
    sh.shadow(ShadowResult("ns/b", "n1", "n1", False))
    status = sh.to_status()
    assert "canary" not in status and status["percent"] is None
    new = rollout("Shadow", wall=Clock(T0 + 60))
    assert new.adopt(status)
    assert (new.compared, new.changed, new.phase) == (2, 1, SHADOWING)
    assert new.movers == {"PodTopologySpread": 1}
    assert new.to_status()["shadow"] == status["shadow"]


# ------------------------------------------------------------------ summary
def test_summary_strings():
    sh = rollout("Shadow")
    assert sh.summary() == "Shadowing 0/0 changed"
    for i in range(4):
        sh.shadow(ShadowResult(f"ns/p{i}", "n1", "n2" if i == 0 else "n1", i == 0))
    assert sh.summary() == "Shadowing 1/4 changed (25%)"
    sh.finish(ABORTED, "spec.rollout was removed")  # a shadow has no percent: its tally in every phase
    assert sh.summary() == "Aborted 1/4 changed (25%)"
    assert sh.to_status()["summary"] == "Aborted 1/4 changed (25%)" and sh.to_status()["phase"] == ABORTED

    ca = rollout(percent=12.5, promote={"pods": 20})
    assert ca.summary() == "Progressing 12.5% 0/20"
    ca.count_bound(CANARY, "u1")
    ca.count_bound(STABLE, "u2")
    assert ca.summary() == "Progressing 12.5% 1/20"
    ca.finish(ROLLED_BACK, "x")
    assert ca.summary() == "RolledBack 12.5% 1/20"
    assert rollout(percent=5).summary() == "Progressing 5% 0"
