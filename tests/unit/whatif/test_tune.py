"""whatif/tune.py and `policy-scheduler tune`: replays on the what-if core, the objective, the
search and its budgets, the Apply step, one evaluation of a window (feedback included)."""

from __future__ import annotations

import asyncio
import json

import pytest
from policy_scheduler import cli
from policy_scheduler.policy.tuning import TuningSpec
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.whatif import tune
from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.snapshot import from_dict
from policy_scheduler.whatif.world import World
from support.whatif import BOUNDS, policy, snapshot_doc, stream

def world_with(body=None, nodes=40):
    w = World(from_dict(snapshot_doc(nodes)))
    name = w.add_policy(body or policy(), "test")
    asyncio.run(w.prepare())
    return w, name


def spec_of(world, name) -> TuningSpec:
    return world.usable_policy(name).good_spec.tuning


def test_tune_command_recommends_weights_that_pack_the_held_out_half_better(tmp_path, capsys):
    """The acceptance case: the search sees the first 100 pods; on the other 100 (replayed on the
    snapshot) the recommended weights use at least 10% fewer nodes than the current ones."""
    (tmp_path / "snap.json").write_text(json.dumps(snapshot_doc()))
    (tmp_path / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": stream(200)}))
    (tmp_path / "policy.json").write_text(json.dumps(policy()))
    args = ["tune", "--policy", str(tmp_path / "policy.json"), "--snapshot", str(tmp_path / "snap.json"),
            "--pods", str(tmp_path / "pods.json"), "--holdout", "0.5"]
    assert cli.main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    held = out["heldOut"]
    rec = out["recommended"]["weights"]
    with capsys.disabled():
        print(f"\nheld-out objective (nodes used): current {held['current']['objective']:g} with "
              f"{out['current']['weights']}, recommended {held['recommended']['objective']:g} with {rec}: "
              f"{100 * held['gain']:+.1f}%; {out['replays']} replays in {out['seconds']:.2f}s ({out['stopped']})")
    assert out["window"] == 100 and held["pods"] == 100
    assert held["gain"] <= -0.10
    assert held["recommended"]["objective"] <= 0.9 * held["current"]["objective"]
    for plugin, (lo, hi) in BOUNDS.items():
        assert lo <= rec[plugin] <= hi
    assert rec != out["current"]["weights"]
    assert out["replays"] <= 40
    # the table for people: every candidate, the recommendation, the held-out check
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "recommended: NodeResourcesFit=" in text and "held out (100 pods): current weights" in text
    assert len([line for line in text.splitlines() if line.split(" ")[0].isdigit()
                and "NodeResourcesFit=" in line]) == out["replays"]


def test_a_replay_under_the_current_weights_is_the_simulation():
    """Same core, same seed: the replay measures what `simulate` reports for the same pods."""
    w, name = world_with()
    pods = stream(60)
    sim = simulate(w, [name], pods, seed=3).runs[0].summary()
    ev = asyncio.run(tune.replay(w, name, pods, tune.score_weights(w, name), {"nodesUsed": 1.0, "imbalance": 2.0},
                                 seed=3))
    assert ev.measures["nodesUsed"] == sim["nodesUsed"]
    assert ev.measures["imbalance"] == pytest.approx(sim["imbalance"], abs=1e-4)
    assert ev.measures["zoneSkew"] == sim["zoneSpread"]["skew"]
    assert ev.measures["unschedulable"] == sim["unschedulable"] == 0
    assert ev.objective == pytest.approx(sim["nodesUsed"] + 2 * ev.measures["imbalance"])
    # the chain's weights are put back after a replay under others
    asyncio.run(tune.replay(w, name, pods, {"NodeResourcesFit": 9, "PodTopologySpread": 1}, {"nodesUsed": 1.0}))
    assert tune.score_weights(w, name) == {"NodeResourcesFit": 1, "PodTopologySpread": 10}


def test_follow_measures_the_placements_as_they_were():
    """With ``follow`` every pod counts where it really went: all on one node here."""
    w, name = world_with()
    pods = stream(6)
    ev = asyncio.run(tune.replay(w, name, pods, {}, {"nodesUsed": 1.0},
                                 follow={f"prod/p-{i:04d}": "node-0000" for i in range(6)}))
    assert ev.measures["nodesUsed"] == 1
    assert ev.measures["zoneSkew"] == 6  # all in zone-a


def test_unschedulable_pods_count():
    w, name = world_with(nodes=2)
    big = stream(3)
    for p in big:
        p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "6"
    ev = asyncio.run(tune.replay(w, name, big, {}, {"unschedulable": 1.0}))
    assert ev.measures["unschedulable"] == 1 and ev.objective == 1


def test_the_search_keeps_its_replay_budget_and_its_time_budget():
    w, name = world_with()
    pods = stream(60)
    res = asyncio.run(tune.search(w, name, pods, spec_of(w, name), max_replays=3))
    assert res.replays == len(res.candidates) == 3 and res.stopped == "replay budget"
    ticks = iter(range(1000))
    res = asyncio.run(tune.search(w, name, pods, spec_of(w, name), time_limit=2.5, clock=lambda: float(next(ticks))))
    assert res.stopped == "time budget" and res.replays <= 3


def test_pace_runs_before_every_replay_and_its_waits_count_against_the_time_budget():
    w, name = world_with()
    pods = stream(60)
    now = [0.0]
    calls = []

    def pace() -> float:  # a burst to wait for: 10 s before every replay
        calls.append(now[0])
        now[0] += 10.0
        return 10.0

    res = asyncio.run(tune.search(w, name, pods, spec_of(w, name), time_limit=25, clock=lambda: now[0], pace=pace))
    assert len(calls) == res.replays == 3 and res.stopped == "time budget", (calls, res.stopped)
    assert res.yielded == 30.0 and res.to_dict()["yieldedSeconds"] == 30.0
    res = asyncio.run(tune.search(w, name, pods, spec_of(w, name), max_replays=4, pace=lambda: 0.0))
    assert res.yielded == 0.0 and res.replays == 4


def test_only_bounded_plugins_move_and_held_ones_do_not():
    w, name = world_with(policy(bounds={"NodeResourcesFit": [1, 10]}))
    res = asyncio.run(tune.search(w, name, stream(40), spec_of(w, name)))
    assert {c.weights["PodTopologySpread"] for c in res.candidates} == {10}
    assert len({c.weights["NodeResourcesFit"] for c in res.candidates}) > 1
    res = asyncio.run(tune.search(w, name, stream(40), spec_of(w, name), held=["NodeResourcesFit"]))
    assert res.stopped == "nothing to tune" and res.replays == 1 and res.recommended is res.current


def test_the_threshold_decides_whether_anything_is_recommended():
    w, name = world_with(policy(threshold=1))
    res = asyncio.run(tune.search(w, name, stream(60), spec_of(w, name)))
    assert res.best.objective < res.current.objective  # better found, but not by 100%
    assert res.recommended is res.current
    w, name = world_with(policy(threshold=0.02))
    res = asyncio.run(tune.search(w, name, stream(60), spec_of(w, name)))
    assert res.recommended is res.best and res.gain <= -0.02


def test_the_apply_step_respects_max_step_bounds_and_holds():
    spec = TuningSpec.model_validate({"objective": {"nodesUsed": 1}, "maxStep": 0.5,
                                      "bounds": {"A": [1, 10], "B": [2, 8], "C": [1, 100]}})
    cur = {"A": 1, "B": 8, "C": 40, "D": 3}
    step = tune.step_toward(cur, {"A": 10, "B": 1, "C": 41, "D": 9}, spec)
    assert step == {"A": 2, "B": 4, "C": 41, "D": 3}  # at least 1; half of 8; to the target; D not tuned
    assert tune.step_toward(cur, {"A": 10, "B": 1, "C": 1}, spec, held=["A"]) == {"A": 1, "B": 4, "C": 20, "D": 3}
    assert tune.step_toward({"A": 20}, {"A": 20}, spec)["A"] == 10  # back into the bounds


def test_summary_is_the_tuning_column():
    assert tune.summary("Recommend", -0.073) == "recommend -7.3%"
    assert tune.summary("Apply", 0.0) == "apply 0.0%"
    assert tune.summary("Apply", -0.2, paused=True) == "apply paused"
    assert tune.summary("Recommend", None) == "recommend pending"


def test_one_window_evaluation_with_feedback_and_an_apply_step():
    """What the operator's worker runs: search, the window as placed, the pods since the last
    Apply step against their replay, and the step (within maxStep) with its prediction."""
    body = policy(mode="Apply", maxStep=4.0)
    w, name = world_with(body)
    pods = [parse_pod(p) for p in stream(40)]
    # where they "really" went: as the current weights place them (the replay is exact here)
    run = simulate(w, [name], [p for p in stream(40)], seed=0).runs[0]
    nodes_of = {r.pod: r.node for r in run.results}
    job = tune.WindowJob(policy=body, current={"NodeResourcesFit": 1, "PodTopologySpread": 10},
                         nodes=list(w.node_specs), bound=[], pods=pods, nodes_of=nodes_of, since=20)
    out = tune.evaluate_window_sync(job)
    res = out["result"]
    assert out["measured"] == pytest.approx(res["current"]["objective"])  # the replay is the real placement
    fb = out["feedback"]
    assert fb["pods"] == 20 and fb["error"] == pytest.approx(0.0)
    step = out["step"]["weights"]
    assert step != res["current"]["weights"]
    assert all(abs(step[k] - v) <= max(1, 4 * v) for k, v in res["current"]["weights"].items())
    assert out["step"]["gain"] == pytest.approx(tune.relative(out["step"]["objective"], res["current"]["objective"]))
    assert out["step"]["objective"] <= res["current"]["objective"]
    assert out["replays"] >= res["replays"] + 3
