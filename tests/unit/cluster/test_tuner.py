"""cluster/tuner.py against the fake client: the placement log and its windows, Recommend writes
status only, Apply patches the weights under its field manager with an event, a person's edit
of a tuned weight is left alone, and a prediction that misses pauses Apply."""

from __future__ import annotations

import asyncio
import concurrent.futures
import concurrent.futures.process
import copy
import functools
import os

from support.fakeclient import FakeClient
from policy_scheduler.policy.tuning import TuningSpec
from policy_scheduler.serve import build_engine
from policy_scheduler.serve import attach_tuner
from policy_scheduler.cache.policies import PLURAL_PATH
from policy_scheduler.cluster.tuner import (
    PlacementLog,
    TuningState,
)
from policy_scheduler.framework.model.podinfo import parse_pod

PATH = f"{PLURAL_PATH}/pack"


def node(i):
    name = f"n{i}"
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "topology.kubernetes.io/zone": "z" + "ab"[i % 2]}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


def pod(i):
    return parse_pod({"metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}", "labels": {"app": "a"}},
                      "spec": {"schedulerName": "policy-scheduler",
                               "containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}],
                               "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                              "whenUnsatisfiable": "ScheduleAnyway",
                                                              "labelSelector": {"matchLabels": {"app": "a"}}}]}})


def policy(mode="Recommend", fit=1, spread=10, generation=1, **tuning):
    return {"apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy",
            "metadata": {"name": "pack", "generation": generation, "resourceVersion": str(100 + generation),
                         "uid": "pol-uid"},
            "spec": {"plugins": [
                {"name": "NodeResourcesFit", "weight": fit, "args": {"scoringStrategy": {"type": "MostAllocated"}}},
                {"name": "PodTopologySpread", "weight": spread}],
                "tuning": {"mode": mode, "interval": "1s", "window": {"pods": 20}, "objective": {"nodesUsed": 1},
                           "bounds": {"NodeResourcesFit": [1, 10], "PodTopologySpread": [1, 10]}, **tuning}}}


def setup(body):
    client = FakeClient()
    engine = build_engine(client)
    for i in range(12):
        engine.on_node("ADDED", node(i))
    engine.on_policy("ADDED", body)
    client.objects[PATH] = body
    return client, engine, attach_tuner(engine, executor=concurrent.futures.ThreadPoolExecutor(1))  # no worker process here


def spread_placements(tuner, n=20):
    """Pods placed as the spreading weights place them: one per node, round the nodes."""
    for i in range(n):
        tuner.log.record(pod(i), "pack", f"n{i % 12}")


def waiting_pod():
    """A pending pod of the policy (while it is in the scheduling queue, the tuner is busy)."""
    return {"metadata": {"name": "waiting", "namespace": "ns", "uid": "w1",
                         "labels": {"policy-scheduler.io/policy": "pack"}},
            "spec": {"schedulerName": "policy-scheduler", "containers": [{"name": "c"}]}}


async def evaluate(tuner, engine):
    st = engine.policies["pack"]
    ts = tuner.states.setdefault("pack", TuningState())
    return await tuner.evaluate(st, st.good_spec.tuning, ts)


def on_a_loop(fn):
    """The engine spawns status writes: the test body runs on an event loop."""
    @functools.wraps(fn)
    def run():
        asyncio.run(fn())
    return run


def spec_patches(client):
    return [c for c in client.calls if c.method == "patch" and c.path == PATH]


def test_the_placement_log_keeps_tuned_policies_and_serves_windows():
    now = [1000.0]
    log = PlacementLog(lambda p: p == "pack", cap=5, clock=lambda: now[0])
    for i in range(7):
        now[0] += 60
        log.record(pod(i), "pack", "n0")
        log.record(pod(i), "other", "n0")
    now[0] += 30
    assert "other" not in log.by_policy and log.count["pack"] == 7
    by_pods = TuningSpec.model_validate({"objective": {"nodesUsed": 1}, "bounds": {"A": [1, 2]}, "window": {"pods": 3}})
    assert [p.pod.name for p in log.window("pack", by_pods)] == ["p4", "p5", "p6"]
    by_time = TuningSpec.model_validate({"objective": {"nodesUsed": 1}, "bounds": {"A": [1, 2]},
                                         "window": {"minutes": 2}})
    assert [p.pod.name for p in log.window("pack", by_time)] == ["p5", "p6"]


@on_a_loop
async def test_recommend_writes_status_and_never_the_spec():
    client, engine, tuner = setup(policy("Recommend"))
    spread_placements(tuner)
    status = await evaluate(tuner, engine)
    assert not spec_patches(client)
    writes = [c for c in client.calls_of("merge_patch") if c.path == PATH + "/status" and "tuning" in c.body["status"]]
    assert writes and writes[-1].body["status"]["tuning"] == status
    assert status["windowPods"] == 20 and status["replays"] >= 2
    assert status["current"]["weights"] == {"NodeResourcesFit": 1, "PodTopologySpread": 10}
    assert status["recommended"]["objective"] < status["current"]["objective"]
    assert status["summary"] == f"recommend {100 * status['gain']:+.1f}%" and status["gain"] <= -0.02
    assert status["measured"] == status["current"]["objective"]  # the log's placements are the replay's
    tel = engine.telemetry
    assert tel.tuning_evaluations.labels("pack")._value.get() == 1
    assert tel.tuning_replays.labels("pack")._value.get() == status["replays"]


@on_a_loop
async def test_apply_patches_within_bounds_and_max_step_posts_the_event_and_a_human_edit_wins():
    body = policy("Apply", maxStep=4)
    client, engine, tuner = setup(body)
    spread_placements(tuner)
    status = await evaluate(tuner, engine)
    (patch,) = spec_patches(client)
    assert patch.body["metadata"]["resourceVersion"] == "101"
    new = {p["name"]: p["weight"] for p in patch.body["spec"]["plugins"]}
    assert new != {"NodeResourcesFit": 1, "PodTopologySpread": 10}
    for name, old in (("NodeResourcesFit", 1), ("PodTopologySpread", 10)):
        assert 1 <= new[name] <= 10 and abs(new[name] - old) <= max(1, 4 * old)
    assert status["lastApplied"]["to"] == new
    (event,) = [c for c in client.calls_of("post") if c.path.endswith("/events")]
    assert event.body["reason"] == "WeightsTuned" and event.body["regarding"]["kind"] == "SchedulingPolicy"
    assert "predicted objective" in event.body["note"]
    assert tuner.states["pack"].written == new
    # the API server's answer to the patch is the next generation; then a person sets NodeResourcesFit
    edited = copy.deepcopy(body)
    edited["metadata"].update(generation=3, resourceVersion="103")
    for p in edited["spec"]["plugins"]:
        p["weight"] = {"NodeResourcesFit": 2, "PodTopologySpread": new["PodTopologySpread"]}[p["name"]]
    tuner.states["pack"].written_generation = 2
    client.objects[PATH] = edited
    engine.on_policy("MODIFIED", edited)
    spread_placements(tuner)
    status = await evaluate(tuner, engine)
    assert status["held"] == ["NodeResourcesFit"]
    for c in spec_patches(client)[1:]:
        assert {p["name"]: p["weight"] for p in c.body["spec"]["plugins"]}["NodeResourcesFit"] == 2
    # spec.tuning changed: a fresh start, nothing held
    retuned = copy.deepcopy(edited)
    retuned["metadata"].update(generation=4, resourceVersion="104")
    retuned["spec"]["tuning"]["threshold"] = 0.03
    client.objects[PATH] = retuned
    engine.on_policy("MODIFIED", retuned)
    assert (await evaluate(tuner, engine))["held"] == []


@on_a_loop
async def test_a_prediction_that_misses_pauses_apply():
    client, engine, tuner = setup(policy("Apply", maxStep=4, maxPredictionError=0.1))
    spread_placements(tuner)
    await evaluate(tuner, engine)
    assert len(spec_patches(client)) == 1
    applied = tuner.states["pack"].written
    body = copy.deepcopy(client.objects[PATH])
    body["metadata"].update(generation=2, resourceVersion="102")
    for p in body["spec"]["plugins"]:
        p["weight"] = applied[p["name"]]
    tuner.states["pack"].written_generation = 2
    client.objects[PATH] = body
    engine.on_policy("MODIFIED", body)
    for i in range(20, 30):  # reality: every pod since on its own node, whatever the weights said
        tuner.log.record(pod(i), "pack", f"n{i % 12}")
    status = await evaluate(tuner, engine)
    fb = status["feedback"]
    print(f"\nfeedback: predicted {fb['predicted']}, measured {fb['measured']}, error {fb['error']:+.2f}")
    assert fb["pods"] == 10 and fb["measured"] > fb["predicted"]
    assert status["paused"] and status["summary"] == "apply paused" and "Apply paused" in status["message"]
    assert len(spec_patches(client)) == 1


@on_a_loop
async def test_the_worker_runs_under_sched_idle_and_waits_while_the_queue_has_work():
    """The default executor: one spawned process, lowered by idle.become_idle before its imports;
    while a pod waits in the scheduling queue, the worker waits before its replays."""
    _, engine, _ = setup(policy())
    tuner = attach_tuner(engine)
    loop = asyncio.get_running_loop()
    try:
        assert await loop.run_in_executor(tuner.executor(), os.sched_getscheduler, 0) == os.SCHED_IDLE
        raw = waiting_pod()
        assert not tuner.busy()
        engine.on_pod("ADDED", raw)
        assert tuner.busy()
        loop.call_later(3.0, engine.on_pod, "DELETED", raw)  # the burst ends after 3 s
        spread_placements(tuner)
        status = await evaluate(tuner, engine)
        assert not tuner.busy() and status["replays"] > 0
        assert 0.5 <= status["yieldedSeconds"] <= status["seconds"], status
        again = await evaluate(tuner, engine)  # nothing to wait for
        assert again["yieldedSeconds"] == 0.0 and again["recommended"] == status["recommended"], again
    finally:
        await tuner.stop()


@on_a_loop
async def test_the_worker_is_started_ahead_of_the_first_evaluation_once_the_queue_is_empty():
    _, engine, _ = setup(policy(interval="10m"))
    engine.scheduling = True
    tuner = attach_tuner(engine)
    started = []

    def start():  # instead of spawning: record when, and hand over an executor
        started.append(tuner.busy())
        tuner._executor = concurrent.futures.ThreadPoolExecutor(1)

    tuner._start_worker = start
    raw = waiting_pod()
    engine.on_pod("ADDED", raw)
    task = asyncio.create_task(tuner.run())
    try:
        await asyncio.sleep(1.5)
        assert started == []  # a pod waits: not now
        engine.on_pod("DELETED", raw)
        await asyncio.sleep(1.5)
        assert started == [False]  # once, with the queue empty, long before the evaluation (10 min)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await tuner.stop()


@on_a_loop
async def test_a_dead_worker_is_replaced_at_the_next_evaluation():
    import signal

    from policy_scheduler.idle import warm

    _, engine, _ = setup(policy())
    tuner = attach_tuner(engine)
    loop = asyncio.get_running_loop()
    try:
        pid = await loop.run_in_executor(tuner.executor(), warm, [])
        os.kill(pid, signal.SIGKILL)  # as the OOM killer would
        spread_placements(tuner)
        try:
            await evaluate(tuner, engine)
            raise AssertionError("the evaluation on a dead worker succeeded")
        except concurrent.futures.process.BrokenProcessPool:
            pass
        status = await evaluate(tuner, engine)  # a new worker
        assert status["replays"] > 0
        assert await loop.run_in_executor(tuner.executor(), warm, []) != pid
    finally:
        await tuner.stop()


@on_a_loop
async def test_apply_waits_while_a_rollout_is_under_way():
    """A weight step would change the stable chain a rollout compares its candidate with: while
    spec.rollout is active, Apply recommends and writes no spec; once the rollout is gone, it applies."""
    body = policy("Apply", maxStep=4)
    body["spec"]["rollout"] = {"strategy": "Shadow", "candidate": {"plugins": copy.deepcopy(body["spec"]["plugins"])}}
    client, engine, tuner = setup(body)
    assert engine.policies["pack"].rollout is not None and engine.policies["pack"].rollout.active
    spread_placements(tuner)
    status = await evaluate(tuner, engine)
    assert not spec_patches(client)
    assert status["message"].startswith("Apply waits: spec.rollout (Shadowing)")
    assert status["recommended"]["objective"] < status["current"]["objective"]  # it still recommends
    plain = copy.deepcopy(body)
    del plain["spec"]["rollout"]
    plain["metadata"].update(generation=2, resourceVersion="102")
    client.objects[PATH] = plain
    engine.on_policy("MODIFIED", plain)
    spread_placements(tuner)
    await evaluate(tuner, engine)
    assert len(spec_patches(client)) == 1
