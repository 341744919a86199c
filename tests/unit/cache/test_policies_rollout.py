"""PolicyStore and spec.rollout: the candidate chain and the shadow built beside the chain, an
invalid candidate invalidates the generation (errors under spec.rollout), a new candidate starts
a new rollout while new thresholds keep it, removing spec.rollout aborts it (a promotion ends as
Promoted), and a fresh store continues the rollout its status.rollout shows (failover)."""

from __future__ import annotations

from policy_scheduler.cache.policies import PolicyStore
from policy_scheduler.cache.rollouts import ABORTED, CANARY, PROGRESSING, PROMOTED, PROMOTING, ROLLED_BACK, SHADOWING, STABLE
from policy_scheduler.framework.interface import Handle
from policy_scheduler.metricsources.manager import MetricSources

FIT = {"name": "NodeResourcesFit", "weight": 5, "args": {"scoringStrategy": {"type": "MostAllocated"}}}
SPREAD = {"name": "PodTopologySpread", "weight": 1}
PLUGINS = [FIT, SPREAD]
WEIGHTS_ONLY = [{**FIT, "weight": 1}, {**SPREAD, "weight": 5}]
OTHER_ARGS = [{**FIT, "args": {"scoringStrategy": {"type": "LeastAllocated"}}}, SPREAD]


def canary(plugins=WEIGHTS_ONLY, percent=20, **kw):
    return {"strategy": "Canary", "percent": percent, "candidate": {"plugins": plugins}, **kw}


def shadow(plugins=WEIGHTS_ONLY):
    return {"strategy": "Shadow", "candidate": {"plugins": plugins}}


def policy(rollout=None, gen=1, status=None, plugins=PLUGINS, name="p"):
    spec = {"plugins": plugins}
    if rollout is not None:
        spec["rollout"] = rollout
    body = {"metadata": {"name": name, "generation": gen, "uid": "pol-uid"}, "spec": spec}
    if status is not None:
        body["status"] = status
    return body


def store():
    changed = []
    return PolicyStore(MetricSources(), lambda name: Handle(), on_change=changed.append), changed


def names(chain):
    return [(p.name, p.weight) for p in chain.resolved if p.weight is not None]


# ------------------------------------------------------------------ building
def test_a_canary_builds_the_candidate_chain_beside_the_stable_one():
    s, changed = store()
    s.on_policy("ADDED", policy(canary()))
    st = s.policies["p"]
    assert st.ready and st.errors == []
    assert names(st.chain) == [("NodeResourcesFit", 5), ("PodTopologySpread", 1)]
    assert names(st.candidate) == [("NodeResourcesFit", 1), ("PodTopologySpread", 5)]
    assert st.candidate is not st.chain
    assert st.rollout is not None and st.rollout.phase == PROGRESSING and st.rollout.generation == 1
    assert st.rollout.spec.percent == 20
    assert st.shadow is not None and st.shadow.shared  # weights alone differ
    assert st.shadow.stable is st.chain and st.shadow.candidate is st.candidate
    assert changed == [st]


def test_a_shadow_with_other_args_takes_the_full_way():
    s, _ = store()
    s.on_policy("ADDED", policy(shadow(OTHER_ARGS)))
    st = s.policies["p"]
    assert st.ready and st.rollout.phase == SHADOWING
    assert st.shadow is not None and not st.shadow.shared


def test_a_policy_without_rollout_has_none():
    s, _ = store()
    s.on_policy("ADDED", policy())
    st = s.policies["p"]
    assert st.ready and st.candidate is None and st.shadow is None and st.rollout is None


# ------------------------------------------------------------------ invalid candidates
def test_an_invalid_candidate_makes_the_generation_invalid():
    s, _ = store()
    s.on_policy("ADDED", policy(canary([{"name": "Nope"}]), name="unknown"))
    s.on_policy("ADDED", policy(canary([{**FIT, "args": {"bogus": 1}}]), name="args"))
    s.on_policy("ADDED", policy(canary([FIT, {"name": "NodeResourcesFit"}]), name="dup"))
    errors = {n: st.errors for n, st in s.policies.items()}
    assert not any(st.ready or st.chain is not None or st.candidate is not None for st in s.policies.values())
    assert errors["unknown"][0].startswith("spec.rollout.candidate.plugins[0].name: unknown plugin 'Nope'")
    assert errors["args"] == ["spec.rollout.candidate.plugins[0].args.bogus: Extra inputs are not permitted"]
    assert errors["dup"][0].startswith("spec.rollout.candidate.plugins[1].name: duplicate plugin 'NodeResourcesFit'")


def test_an_invalid_candidate_edit_keeps_the_last_valid_generation_and_its_rollout():
    s, _ = store()
    s.on_policy("ADDED", policy(canary(), gen=1))
    st = s.policies["p"]
    chain, candidate, ro = st.chain, st.candidate, st.rollout
    s.on_policy("MODIFIED", policy(canary([{"name": "NodeResourcesFit", "weight": -1}]), gen=2))
    assert not st.ready and st.errors[0].startswith("spec.rollout.candidate.plugins[0].weight: ")
    assert st.chain is chain and st.candidate is candidate and st.rollout is ro and ro.phase == PROGRESSING


def test_percent_is_required_with_canary_and_refused_with_shadow():
    s, _ = store()
    s.on_policy("ADDED", policy({"strategy": "Canary", "candidate": {"plugins": WEIGHTS_ONLY}}, name="c"))
    s.on_policy("ADDED", policy({**shadow(), "percent": 5}, name="s"))
    s.on_policy("ADDED", policy(canary(percent=0), name="zero"))
    assert s.policies["c"].errors == ["spec.rollout.percent: Required value: with strategy Canary"]
    assert s.policies["s"].errors == ["spec.rollout.percent: Invalid value: 5: applies to strategy Canary only"]
    assert len(s.policies["zero"].errors) == 1 and s.policies["zero"].errors[0].startswith("spec.rollout.percent: ")
    assert s.validate({"plugins": PLUGINS, "rollout": {"strategy": "Canary", "candidate": {"plugins": PLUGINS}}}) == [
        "spec.rollout.percent: Required value: with strategy Canary"]


# ------------------------------------------------------------------ one rollout per candidate
def test_a_changed_threshold_keeps_the_rollout_and_a_changed_candidate_starts_a_new_one():
    s, _ = store()
    s.on_policy("ADDED", policy(canary(), gen=1))
    st = s.policies["p"]
    ro = st.rollout
    ro.attempt(CANARY, False)
    ro.count_bound(CANARY, "u1")
    s.on_policy("MODIFIED", policy(canary(analysis={"minPods": 50}, promote={"pods": 10}), gen=2))
    assert st.rollout is ro and ro.hash == st.rollout.hash and ro.generation == 2
    assert ro.spec.analysis.min_pods == 50 and ro.spec.promote.pods == 10  # the new thresholds apply
    assert ro.arms[CANARY].bound == 1  # and the counts carry on
    s.on_policy("MODIFIED", policy(canary([{**FIT, "weight": 2}, SPREAD]), gen=3))
    assert st.rollout is not ro and st.rollout.hash != ro.hash
    assert st.rollout.phase == PROGRESSING and st.rollout.arms[CANARY].bound == 0 and st.rollout.generation == 3
    assert names(st.candidate) == [("NodeResourcesFit", 2), ("PodTopologySpread", 1)]
    s.on_policy("MODIFIED", policy(canary(percent=50), gen=4))  # a new share is a new rollout too
    assert st.rollout.spec.percent == 50 and st.rollout.generation == 4


def test_a_rolled_back_candidate_stays_rolled_back_until_it_changes():
    s, _ = store()
    s.on_policy("ADDED", policy(canary(), gen=1))
    st = s.policies["p"]
    st.rollout.finish(ROLLED_BACK, "rolled back")
    s.on_policy("MODIFIED", policy(canary(analysis={"minPods": 1}), gen=2))
    assert st.rollout.phase == ROLLED_BACK
    s.on_policy("MODIFIED", policy(canary(OTHER_ARGS), gen=3))
    assert st.rollout.phase == PROGRESSING


def test_removing_spec_rollout_aborts_it():
    s, _ = store()
    s.on_policy("ADDED", policy(canary(), gen=1))
    st = s.policies["p"]
    ro = st.rollout
    s.on_policy("MODIFIED", policy(None, gen=2))
    assert st.ready and st.candidate is None and st.shadow is None
    assert st.rollout is ro and ro.phase == ABORTED and ro.message == "spec.rollout was removed"
    assert ro.end is not None
    assert {ro.arm(u) for u in ("a", "b", "c", "d", "e", "f")} == {STABLE}


def test_a_rollout_added_again_after_an_abort_runs_again():
    s, _ = store()
    s.on_policy("ADDED", policy(shadow(), gen=1))
    st = s.policies["p"]
    s.on_policy("MODIFIED", policy(None, gen=2))
    assert st.rollout.phase == ABORTED
    s.on_policy("MODIFIED", policy(shadow(), gen=3))
    assert st.rollout.phase == SHADOWING and st.rollout.generation == 3 and st.shadow is not None


def test_a_promotion_ends_as_promoted_when_the_patched_generation_arrives():
    s, _ = store()
    s.on_policy("ADDED", policy(canary(), gen=1))
    st = s.policies["p"]
    st.rollout.finish(PROMOTING, "promoting: 3 canary pods bound without a breach")
    s.on_policy("MODIFIED", policy(None, gen=2, plugins=WEIGHTS_ONLY))
    assert st.rollout.phase == PROMOTED and st.rollout.message.startswith("promoted: generation 2")
    assert names(st.chain) == [("NodeResourcesFit", 1), ("PodTopologySpread", 5)] and st.candidate is None


# ------------------------------------------------------------------ failover
def test_a_fresh_store_continues_the_rollout_its_status_shows():
    s, _ = store()
    s.on_policy("ADDED", policy(canary(), gen=1))
    ro = s.policies["p"].rollout
    ro.start -= 600  # started ten minutes ago
    for i in range(7):
        ro.attempt(STABLE, False)
        ro.attempt(CANARY, i < 2)
    for i in range(4):
        ro.count_bound(CANARY, f"u{i}")
    status = {"rollout": ro.to_status()}

    s2, _ = store()  # the new leader: the same body, with the status the old one wrote
    s2.on_policy("ADDED", policy(canary(), gen=1, status=status))
    ro2 = s2.policies["p"].rollout
    assert ro2 is not ro and ro2.hash == ro.hash and ro2.phase == PROGRESSING
    assert int(ro2.start) == int(ro.start)  # the status keeps whole seconds
    assert ro2.arms[CANARY].to_status() == ro.arms[CANARY].to_status() == {"attempts": 7, "failures": 2, "bound": 4}
    assert ro2.arms[STABLE].to_status() == {"attempts": 7, "failures": 0, "bound": 0}


def test_a_fresh_store_keeps_a_rolled_back_candidate_rolled_back():
    s, _ = store()
    s.on_policy("ADDED", policy(canary(), gen=1))
    ro = s.policies["p"].rollout
    ro.finish(ROLLED_BACK, "rolled back: FailedScheduling rate 100% of 5 canary attempts")
    status = {"rollout": ro.to_status()}
    s2, _ = store()
    s2.on_policy("ADDED", policy(canary(), gen=1, status=status))
    ro2 = s2.policies["p"].rollout
    assert ro2.phase == ROLLED_BACK and ro2.message == ro.message
    assert {ro2.arm(u) for u in ("a", "b", "c", "d", "e", "f", "g")} == {STABLE}
    # a status about another candidate is not adopted
    s3, _ = store()
    s3.on_policy("ADDED", policy(canary(OTHER_ARGS), gen=1, status=status))
    assert s3.policies["p"].rollout.phase == PROGRESSING


def test_the_leaders_status_writes_reach_a_follower():
    """A follower reads every status write: counts only grow, so it is ready to take over."""
    s, _ = store()
    s.on_policy("ADDED", policy(canary(), gen=1))
    ro = s.policies["p"].rollout
    status = {"rollout": {**ro.to_status(), "canary": {"attempts": 9, "failures": 1, "bound": 8}}}
    s.on_policy("MODIFIED", policy(canary(), gen=1, status=status))  # the same generation: a status write
    assert s.policies["p"].rollout is ro and ro.arms[CANARY].to_status() == {"attempts": 9, "failures": 1, "bound": 8}
    older = {"rollout": {**ro.to_status(), "canary": {"attempts": 3, "failures": 0, "bound": 2}}}
    s.on_policy("MODIFIED", policy(canary(), gen=1, status=older))
    assert ro.arms[CANARY].to_status() == {"attempts": 9, "failures": 1, "bound": 8}
