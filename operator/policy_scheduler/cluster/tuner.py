"""The tuner: every ``spec.tuning.interval``, on the leader only, each policy with ``spec.tuning``
is evaluated on its recent placements (whatif/tune.py does the work; this module is the wiring).

- **Window.** The engine tells ``PlacementLog`` of every pod it binds (its listener); the log
  keeps, per policy with tuning, the pods in placement order (at most 5,000). An evaluation takes
  the last N of them, or those placed in the last N minutes.
- **State before the window.** The engine's cache (nodes, bound pods, namespaces, workloads,
  storage, the policy's metric samples) without the window's pods.
- **Off the loop.** The replays run in a worker process (one, under ``SCHED_IDLE`` from its first
  import on: see idle.py), so the scheduling loop keeps its core and the GIL. It is started, and
  imports the scheduling core, at the first moment this replica leads, a policy has tuning and
  the scheduling queue is empty (or at the first evaluation, if that comes first), so that a
  later burst does not pay for it. While the queue has work, a shared flag is up and the worker
  waits before each step, so that it works at most a tenth of the time: a burst is placed at
  nearly full speed, and the evaluation's status says how long it waited (``yieldedSeconds``).
- **Writes.** ``status.tuning`` (merge patch on the status subresource); in Apply mode,
  ``spec.plugins`` with the stepped weights, under the field manager ``policy-scheduler-tuner``
  and the resourceVersion read just before (a concurrent edit wins: 409, nothing written), then a
  ``WeightsTuned`` event on the policy.
- **A person's edit wins.** A tuned plugin whose weight differs from what the tuner last wrote,
  in a generation the tuner did not write, is held: left alone until ``spec.tuning`` changes.
- **Feedback.** After an Apply step, the pods placed since are replayed under the applied
  weights and compared with how they really went; when the objective misses by more than
  ``maxPredictionError``, Apply pauses (Recommend goes on) until ``spec.tuning`` changes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import concurrent.futures.process
import copy
import logging
import multiprocessing
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..framework.model.podinfo import PodInfo
from ..idle import become_idle, warm
from ..whatif import tune
from ..cache.policies import PLURAL_PATH, PolicyState, PolicyStore
from ..cache.rollouts import PROMOTING
from ..cache.state import ClusterState
from ..framework.queue.scheduling_queue import SchedulingQueue
from ..metricsources.manager import MetricSources
from ..policy.fields import duration_seconds
from ..policy.tuning import MAX_TUNING_WINDOW_PODS, TuningSpec
from .kubeclient import REQUEST_ERRORS, TRANSPORT_ERRORS, ApiError, KubeClient
from .leader import Leadership
from .telemetry import Telemetry
from .recorder import EventRecorder, now_rfc3339

log = logging.getLogger("policy_scheduler")

FIELD_MANAGER = "policy-scheduler-tuner"
TICK = 0.5  # how often the tuner looks for a policy due
BUSY_TICK = 0.1  # how often, during an evaluation, the worker's busy flag follows the queue
WORKER_MODULES = ("policy_scheduler.whatif.tune",)  # what the worker imports when it starts


@dataclass
class Placement:
    pod: PodInfo
    node: str
    at: float  # time.time() of the binding


class PlacementLog:
    """The pods bound per policy, in order, for the policies with tuning (``enabled(name)``)."""

    def __init__(self, enabled: Callable[[str], bool], cap: int = MAX_TUNING_WINDOW_PODS,
                 clock: Callable[[], float] = time.time) -> None:
        self.enabled = enabled
        self.cap = cap
        self.clock = clock
        self.by_policy: dict[str, deque[Placement]] = {}
        self.count: dict[str, int] = {}  # placements ever recorded per policy (index of the next one)

    def record(self, pod: PodInfo, policy: str, node: str) -> None:
        """The engine's placement listener (on the loop: O(1))."""
        if not self.enabled(policy):
            return
        q = self.by_policy.get(policy)
        if q is None:
            q = self.by_policy[policy] = deque(maxlen=self.cap)
        q.append(Placement(pod, node, self.clock()))
        self.count[policy] = self.count.get(policy, 0) + 1

    def window(self, policy: str, spec: TuningSpec) -> list[Placement]:
        q = self.by_policy.get(policy) or ()
        if spec.window.pods is not None:
            return list(q)[-spec.window.pods:]
        since = self.clock() - 60.0 * (spec.window.minutes or 0)
        return [p for p in q if p.at >= since]


@dataclass
class TuningState:
    """What the tuner remembers of one policy (lost on restart: it starts over, nothing held)."""

    tuning_key: str = ""  # spec.tuning as JSON: a change resets holds and the pause
    due: float = 0.0
    held: set[str] = field(default_factory=set)
    paused: str = ""  # why Apply is paused ("" = not)
    written: dict[str, int] | None = None  # weights of the tuner's last spec write
    written_generation: int | None = None
    applied_at_count: int | None = None  # PlacementLog.count at the last Apply step
    last_applied: dict[str, Any] | None = None
    running: bool = False


class Tuner:
    """Runs the evaluations of every policy with ``spec.tuning`` while this replica leads."""

    def __init__(self, client: KubeClient, state: ClusterState, store: PolicyStore, sources: MetricSources,
                 queue: SchedulingQueue, leadership: Leadership, telemetry: Telemetry, recorder: EventRecorder,
                 scheduling: Callable[[], bool], *, plugin_modules: list[str] | None = None,
                 executor: concurrent.futures.Executor | None = None) -> None:
        """``scheduling()``: the scheduling loop runs (this replica leads and is synced). The
        caller adds ``self.log.record`` to the engine's placement listeners."""
        self.client = client
        self.state = state
        self.store = store
        self.sources = sources
        self.queue = queue
        self.leadership = leadership
        self.telemetry = telemetry
        self.recorder = recorder  # the WeightsTuned events
        self.scheduling = scheduling
        self.plugin_modules = list(plugin_modules or [])
        self.states: dict[str, TuningState] = {}
        self.log = PlacementLog(self._enabled)
        self._executor = executor
        self._own_executor = executor is None
        self._busy: Any = None  # the worker's flag: up while the scheduling queue has work (idle.py)

    def _enabled(self, policy: str) -> bool:
        st = self.store.policies.get(policy)
        return st is not None and st.good_spec is not None and st.good_spec.tuning is not None

    def executor(self) -> concurrent.futures.Executor:
        if self._executor is None:
            ctx = multiprocessing.get_context("spawn")
            self._busy = ctx.RawValue("b", 0)
            self._executor = concurrent.futures.ProcessPoolExecutor(
                max_workers=1, mp_context=ctx, initializer=become_idle, initargs=(self._busy,))
        return self._executor

    def _start_worker(self) -> None:
        """Spawn the worker and let it import the scheduling core now, while the queue is empty,
        ahead of the first evaluation (a failure here shows again at the first one)."""
        fut = asyncio.get_running_loop().run_in_executor(self.executor(), warm, WORKER_MODULES)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception() is None
                              or log.warning("the tuner's worker failed to start: %s", f.exception()))

    def busy(self) -> bool:
        """The scheduling queue has work: pods to try, or in their binding cycle."""
        q = self.queue
        return bool(q.active_count or q.in_flight_count)

    async def _follow_busy(self, flag: Any) -> None:
        """While an evaluation runs: keep the worker's flag equal to ``busy()`` (while it is up, the
        worker waits before each step: see idle.py)."""
        while True:
            flag.value = 1 if self.busy() else 0
            await asyncio.sleep(BUSY_TICK)

    async def run(self) -> None:
        """Until cancelled: wait to lead, then evaluate each policy when it is due."""
        await self.leadership.wait_acquired()
        while True:
            await asyncio.sleep(TICK)
            if not self.leadership.valid() or not self.scheduling():
                continue
            now = time.monotonic()
            for name, st in list(self.store.policies.items()):
                tuning = st.good_spec.tuning if st.ready and st.good_spec is not None else None
                if tuning is None:
                    self.states.pop(name, None)
                    continue
                if self._executor is None and not self.busy():
                    self._start_worker()
                ts = self.states.setdefault(name, TuningState(due=now + duration_seconds(tuning.interval)))
                if ts.running or now < ts.due:
                    continue
                ts.running = True
                try:
                    await self.evaluate(st, tuning, ts)
                except asyncio.CancelledError:
                    raise
                except Exception:  # one policy's failure must not stop the others
                    log.exception("tuning of SchedulingPolicy %s failed", name)
                finally:
                    ts.running = False
                    ts.due = time.monotonic() + duration_seconds(tuning.interval)

    async def stop(self) -> None:
        """Drop the worker at once, an evaluation in progress included: the interpreter joins a
        process pool's workers when it exits, so a worker left to finish would hold a stopping
        operator up to the policy's timeLimit."""
        if self._executor is not None and self._own_executor:
            executor, self._executor = self._executor, None
            # pid -> Process (Python 3.11-3.13; 3.14 has terminate_workers()), read before shutdown clears it
            workers = list((getattr(executor, "_processes", None) or {}).values())
            executor.shutdown(wait=False, cancel_futures=True)
            for w in workers:
                if w.is_alive():
                    w.terminate()

    # ------------------------------------------------------------------ one evaluation
    async def evaluate(self, st: PolicyState, tuning: TuningSpec, ts: TuningState) -> dict[str, Any] | None:
        name = st.name
        obj = await self.client.get(f"{PLURAL_PATH}/{name}")
        spec = obj.get("spec") or {}
        meta = obj.get("metadata") or {}
        generation = int(meta.get("generation") or 0)
        tuning_key = repr(sorted((spec.get("tuning") or {}).items()))
        if tuning_key != ts.tuning_key:  # spec.tuning (re-)enabled or changed: a fresh start
            ts.tuning_key, ts.held, ts.paused = tuning_key, set(), ""
            ts.applied_at_count, ts.written, ts.written_generation = None, None, None
        weights = {p.get("name"): int(p.get("weight") or 1) for p in spec.get("plugins") or []}
        if ts.written is not None and generation != ts.written_generation:
            for plugin, w in ts.written.items():  # a person changed what the tuner wrote
                if plugin in weights and weights[plugin] != w and plugin not in ts.held:
                    ts.held.add(plugin)
                    log.info("SchedulingPolicy %s: weight of %s changed by someone else (%d -> %d); the tuner "
                             "leaves it alone until spec.tuning changes", name, plugin, w, weights[plugin])
        scored = {p.NAME for p, _ in st.chain.score} if st.chain is not None else set()
        current = {k: v for k, v in weights.items() if k in scored}
        window = self.log.window(name, tuning)
        status: dict[str, Any] = {
            "mode": tuning.mode, "observedGeneration": generation, "evaluatedTime": now_rfc3339(),
            "windowPods": len(window), "maxReplays": tuning.max_replays, "held": sorted(ts.held),
            "paused": bool(ts.paused), "lastApplied": ts.last_applied}
        if not window:
            status.update(summary=tune.summary(tuning.mode, None), replays=0, seconds=0.0, yieldedSeconds=0.0,
                          stopped="",
                          current={"weights": current, "objective": None}, recommended=None, gain=None,
                          measured=None, feedback=None,
                          message="no pods placed by this policy in the window yet")
            await self._write_status(name, status)
            return None
        since = None
        if ts.applied_at_count is not None:
            first = self.log.count.get(name, 0) - len(window)
            since = max(0, ts.applied_at_count - first)
            if since >= len(window):
                since = None
        job = self._job(obj, current, window, ts, since)
        t0 = time.perf_counter()
        executor, busy = self.executor(), self._busy
        follow = asyncio.create_task(self._follow_busy(busy)) if busy is not None else None
        try:
            out = await asyncio.get_running_loop().run_in_executor(executor, tune.evaluate_window_sync, job)
        except concurrent.futures.process.BrokenProcessPool:
            if self._own_executor and self._executor is executor:  # the worker died (OOM-killed, ...):
                executor.shutdown(wait=False, cancel_futures=True)  # the next evaluation starts another
                self._executor = self._busy = None
            raise
        finally:
            if follow is not None:
                follow.cancel()
                busy.value = 0
        seconds = time.perf_counter() - t0
        tel = self.telemetry
        tel.tuning_evaluations.labels(name).inc()
        tel.tuning_replays.labels(name).inc(out["replays"])
        tel.tuning_duration.labels(name).observe(seconds)
        res = out["result"]
        fb = out.get("feedback")
        if fb is not None and tuning.mode == "Apply" and not ts.paused and abs(fb["error"]) > tuning.max_prediction_error:
            ts.paused = (f"the objective of the {fb['pods']} pods placed since the last Apply step was "
                         f"{fb['measured']:.4g}, the replay predicted {fb['predicted']:.4g} "
                         f"({100 * fb['error']:+.1f}%, more than maxPredictionError {tuning.max_prediction_error:g})")
            log.warning("SchedulingPolicy %s: Apply paused: %s", name, ts.paused)
        rec = res["recommended"]
        gain = res["gain"]
        message = (f"{res['replays']} replays of {res['maxReplays']}, {res['stopped']}; "
                   + ("no vector improves the objective by the threshold" if rec["weights"] == res["current"]["weights"]
                      else "recommended weights improve the objective by the threshold"))
        status.update(summary=tune.summary(tuning.mode, gain, paused=bool(ts.paused)), replays=out["replays"],
                      seconds=round(seconds, 3), yieldedSeconds=out.get("yieldedSeconds", 0.0), stopped=res["stopped"],
                      current={"weights": res["current"]["weights"], "objective": res["current"]["objective"]},
                      recommended={"weights": rec["weights"], "objective": rec["objective"]}, gain=gain,
                      measured=out["measured"], feedback=fb, paused=bool(ts.paused), held=sorted(ts.held),
                      message=(ts.paused and f"Apply paused: {ts.paused}") or message)
        step = out.get("step")
        # a rollout under way compares its candidate with this chain: Apply waits until it ends
        rolling = st.rollout is not None and (st.rollout.active or st.rollout.phase == PROMOTING)
        if step is not None and tuning.mode == "Apply" and not ts.paused and rolling:
            status["message"] = (f"Apply waits: spec.rollout ({st.rollout.phase}) compares a candidate with this "
                                 "chain; a weight step would change it mid-rollout")
        if step is not None and tuning.mode == "Apply" and not ts.paused and not rolling and self.leadership.valid():
            applied = await self._apply(obj, step, current, res, len(window))
            if applied is not None:
                ts.written, ts.written_generation = step["weights"], applied
                ts.applied_at_count = self.log.count.get(name, 0)
                ts.last_applied = {"time": now_rfc3339(), "from": current, "to": step["weights"],
                                   "predictedObjective": step["objective"], "predictedGain": round(step["gain"], 6),
                                   "generation": applied}
                status["lastApplied"] = ts.last_applied
        await self._write_status(name, status)
        return status

    def _job(self, obj: dict, current: dict[str, int], window: list[Placement], ts: TuningState,
             since: int | None) -> tune.WindowJob:
        keys = {p.pod.key for p in window}
        state = self.state
        table = state.table
        nodes = [table.specs[i] for i in range(table.n)]
        bound = [(table.pod(k), n) for k, n in table.pod_node.items() if k not in keys and table.pod(k) is not None]
        pods = []
        for p in window:
            q = copy.copy(p.pod)
            q.raw = None
            q.node_name = None
            pods.append(q)
        src = getattr(self.sources, "sources", {}).get(obj["metadata"]["name"])
        metric_list = []
        if src is not None:
            for (query, label), per_node in src.samples.items():
                metric_list.append({"query": query, "nodeLabel": label,
                                    "samples": {n: {"value": v, "time": t} for n, (v, t) in per_node.items()}})
        body = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                "metadata": {"name": obj["metadata"]["name"], "generation": obj["metadata"].get("generation")},
                "spec": obj.get("spec")}
        return tune.WindowJob(policy=body, current=current, nodes=nodes, bound=bound, pods=pods,
                              nodes_of={p.pod.key: p.node for p in window},
                              namespaces={k: dict(v) for k, v in state.namespaces.items()},
                              workloads=state.workloads, volumes=state.volumes, metrics=metric_list, taken_at=time.time(),
                              scheduler_name=self.store.scheduler_name, held=sorted(ts.held), since=since,
                              plugin_modules=self.plugin_modules)

    async def _apply(self, obj: dict, step: dict, current: dict[str, int], res: dict, window: int) -> int | None:
        """Patch spec.plugins with the step's weights; the new generation, or None (not written)."""
        name = obj["metadata"]["name"]
        plugins = copy.deepcopy((obj.get("spec") or {}).get("plugins") or [])
        changed = []
        for p in plugins:
            w = step["weights"].get(p.get("name"))
            if w is not None and w != current.get(p.get("name")):
                changed.append(f"{p['name']} {current.get(p['name'])}->{w}")
                p["weight"] = w
        if not changed:
            return None
        patch = {"metadata": {"resourceVersion": obj["metadata"].get("resourceVersion")}, "spec": {"plugins": plugins}}
        try:
            out = await self.client.request("PATCH", f"{PLURAL_PATH}/{name}", patch,
                                            params={"fieldManager": FIELD_MANAGER},
                                            content_type="application/merge-patch+json",
                                            fence=self.leadership.time_left)  # not sent past the lease
        except ApiError as e:
            log.info("SchedulingPolicy %s: weights not applied (%s); the next evaluation starts again", name, e)
            return None
        except TRANSPORT_ERRORS as e:
            log.warning("SchedulingPolicy %s: weights not applied: %s", name, e)
            return None
        note = (f"{', '.join(changed)}: predicted objective {step['objective']:.4g} (was {res['current']['objective']:.4g}, "
                f"{100 * step['gain']:+.1f}%) on the last {window} pods; recommended "
                + " ".join(f"{k}={v}" for k, v in sorted(res['recommended']['weights'].items())))
        log.info("SchedulingPolicy %s: weights tuned: %s", name, note)
        meta = (out or obj).get("metadata") or {}
        await self.recorder.post_policy_event(name, meta.get("uid"), "Normal", "WeightsTuned", "Tuning", note,
                                              instance=f"{self.store.scheduler_name}-tuner")
        return int(((out or {}).get("metadata") or {}).get("generation") or 0)

    async def _write_status(self, name: str, status: dict[str, Any]) -> None:
        if not self.leadership.valid():
            return
        try:
            await self.client.merge_patch(f"{PLURAL_PATH}/{name}/status", {"status": {"tuning": status}},
                                          fence=self.leadership.time_left)
        except REQUEST_ERRORS as e:
            log.warning("tuning status of SchedulingPolicy %s not written: %s", name, e)
