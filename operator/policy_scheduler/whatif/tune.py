"""Tuning: search a policy's Score weights by replaying a window of pods with the what-if core.

Pure: no API client, no kopf. The operator's tuner (cluster/tuner.py) and ``policy-scheduler
tune`` call the same functions.

- **Replay.** The window (the state before its pods, and the pods in order) is replayed with
  ``simulate.run_policy``, the operator's own ``schedule_one``, assume and Reserve, under a
  weight vector: the chain the policy store built, with its Score weights set to the vector for
  the replay (nothing else of the chain changes; the weights are put back after it). Group
  placement ties are drawn from ``random.Random(seed)``, as ``simulate --seed``. LoadAware's in-flight estimates of
  one replay are taken back before the next.
- **Objective** (lower is better): ``sum(weight[m] * measure[m])`` over the measures of the
  policy's ``spec.tuning.objective``, each as ``simulate`` reports it: ``imbalance`` (std dev of
  node allocation after the window), ``nodesUsed`` (nodes with a pod after it), ``zoneSkew`` (of
  the window's placed pods), ``unschedulable`` (window pods no node fits) and ``hotNodes``
  (nodes whose usage, measured plus the window's pods at LoadAware's estimates, is above
  LoadAware's thresholds: what its Filter rejects as hot).
- **Search.** First probes: the corners of the bounds' box (every tuned weight at its min or
  max, up to 3 tuned plugins: weights only count relative to each other, and the corners hold
  the extreme ratios), then a few seeded random vectors (up to 8, at most a quarter of the replay
  budget; each weight drawn log-uniformly within its bounds). Then coordinate search on integer
  weights within ``bounds`` from the best point so far (the current weights, clamped into the
  bounds, unless a probe beat them): each tuned plugin in turn (by name) tries its weight plus and minus
  a step, starting at its bounds' width (the far bound); the first move that lowers the objective is taken
  and the pass goes on from there; a pass without a move halves the steps; it stops when every
  step is below 1 (converged), or at the replay or time budget. Every vector is replayed once
  (cached). The best vector is recommended only if it lowers the objective by at least
  ``threshold`` (relative) from the current weights.
- **Apply step.** From the current weights toward the recommendation, each weight moving at most
  ``maxStep`` of itself (at least 1), within its bounds, skipping the plugins held (a person
  changed their weight); ``evaluate_window`` replays the step and offers it only when its
  predicted objective is no worse than the current weights'.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..framework.model.podinfo import PodInfo
from ..policy.fields import duration_seconds
from ..policy.tuning import TuningSpec
from . import metrics
from .simulate import PolicyRun, run_policy
from .world import World

Weights = dict[str, int]
MAX_CORNERS = 8  # the corners of the bounds' box are probed when there are at most this many (3 plugins)
RANDOM_PROBES = 8  # seeded random vectors tried before the coordinate search (at most a quarter of the budget)


@dataclass
class Evaluation:
    """One replay of the window under a weight vector."""

    weights: Weights
    measures: dict[str, float]
    objective: float
    note: str = ""  # how the search got here ("current", "NodeResourcesFit 1->5", ...)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"weights": dict(self.weights), "objective": round(self.objective, 6),
                "measures": {k: round(v, 6) for k, v in self.measures.items()}, "note": self.note}


@dataclass
class TuneResult:
    current: Evaluation
    best: Evaluation
    candidates: list[Evaluation]  # every vector replayed, in the order tried
    replays: int
    max_replays: int
    seconds: float
    stopped: str  # "converged", "replay budget", "time budget", "nothing to tune"
    threshold: float
    window: int
    yielded: float = 0.0  # seconds spent waiting for the scheduler's bursts to end (``pace``)

    @property
    def gain(self) -> float:
        """Relative change of the objective, best over current (negative: better)."""
        return relative(self.best.objective, self.current.objective)

    @property
    def recommended(self) -> Evaluation:
        """The best vector when it improves on the current one by the threshold, else the current."""
        if self.best is not self.current and -self.gain >= self.threshold and self.best.objective < self.current.objective:
            return self.best
        return self.current

    def to_dict(self) -> dict[str, Any]:
        rec = self.recommended
        return {"window": self.window, "replays": self.replays, "maxReplays": self.max_replays,
                "seconds": round(self.seconds, 3), "yieldedSeconds": round(self.yielded, 3),
                "stopped": self.stopped, "threshold": self.threshold,
                "current": self.current.to_dict(), "best": self.best.to_dict(), "recommended": rec.to_dict(),
                "gain": round(relative(rec.objective, self.current.objective), 6),
                "candidates": [c.to_dict() for c in self.candidates]}


def relative(new: float, old: float) -> float:
    """(new - old) / |old|; 0 when both are 0, and -1 / +1 from an objective of 0."""
    if old == 0:
        return 0.0 if new == 0 else math.copysign(1.0, new)
    return (new - old) / abs(old)


def objective_value(measures: Mapping[str, float], weights: Mapping[str, float]) -> float:
    return float(sum(w * measures.get(m, 0.0) for m, w in weights.items()))


def score_weights(world: World, policy: str) -> Weights:
    """The policy's Score weights, as its chain has them (plugin name -> weight)."""
    chain = world.usable_policy(policy).chain
    assert chain is not None
    return {p.NAME: w for p, w in chain.score}


def clamp(w: int, bound: Sequence[int]) -> int:
    return max(int(bound[0]), min(int(bound[1]), int(w)))


# ---------------------------------------------------------------------------------------- replay

def measure(run: PolicyRun, world: World, policy: str, follow: Mapping[str, str] | None = None) -> dict[str, float]:
    """The measures of one replay (``follow``: the pods went to these nodes, not to the decided ones)."""
    after = run.after
    placed = [(r.pod, r.node) for r in run.results if r.node is not None]
    if follow is not None:
        placed = [(pod, follow.get(pod, node)) for pod, node in placed]
    zone_of = dict(zip(after.names, after.zones))
    skew = metrics.zone_spread((zone_of.get(n, "") for _, n in placed), after.zones)["skew"]
    out = {"imbalance": after.imbalance(), "nodesUsed": float(after.nodes_used()), "zoneSkew": float(skew),
           "unschedulable": float(len(run.results) - len(placed)), "hotNodes": 0.0}
    chain = world.usable_policy(policy).chain
    plugin = chain.plugin("LoadAware") if chain is not None else None
    if plugin is not None and run.table is not None and hasattr(plugin, "hot_rows"):
        out["hotNodes"] = float(np.count_nonzero(plugin.hot_rows(run.table)))
    return out


async def replay(world: World, policy: str, pods: Sequence[Mapping[str, Any] | PodInfo], weights: Mapping[str, int],
                 objective: Mapping[str, float], *, seed: int = 0, follow: Mapping[str, str] | None = None,
                 note: str = "") -> Evaluation:
    """The window replayed under ``weights`` (plugins not named keep theirs), measured."""
    t0 = time.perf_counter()
    st = world.usable_policy(policy)
    chain = st.chain
    assert chain is not None
    saved = chain.score
    chain.score = [(p, int(weights.get(p.NAME, w))) for p, w in saved]
    try:
        run = await run_policy(world, policy, list(pods), seed=seed, follow=follow)
        m = measure(run, world, policy, follow)
    finally:
        chain.score = saved
        view = world.sources.view(policy)
        if view is not None:  # LoadAware's Reserve counted the window's pods in flight: take them back
            for p in pods:
                view.remove_inflight(p.key if isinstance(p, PodInfo) else _key(p))
    used = {p.NAME: int(weights.get(p.NAME, w)) for p, w in saved}
    return Evaluation(used, m, objective_value(m, objective), note, time.perf_counter() - t0)


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


# ---------------------------------------------------------------------------------------- search

async def search(world: World, policy: str, pods: Sequence[Mapping[str, Any] | PodInfo], tuning: TuningSpec, *,
                 current: Mapping[str, int] | None = None, held: Iterable[str] = (),
                 max_replays: int | None = None, time_limit: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 pace: Callable[[], float] | None = None,
                 progress: Callable[[], Any] | None = None) -> TuneResult:
    """Coordinate search (see the module doc) of the weights of ``tuning.bounds`` (less ``held``)
    for ``pods`` on ``world``. ``current``: the weights in force (default: the chain's).
    ``pace``: called before each replay; it may wait (the operator's worker waits while the
    scheduler has a burst to place) and returns the seconds it waited, which count against
    ``time_limit``. ``progress``: called after each replay (`policy-scheduler tune`'s bar)."""
    t0 = clock()
    budget = max_replays if max_replays is not None else tuning.max_replays
    limit = time_limit if time_limit is not None else duration_seconds(tuning.time_limit)
    deadline = t0 + limit
    objective = tuning.objective.weights()
    base = dict(score_weights(world, policy))
    if current:
        base.update({k: int(v) for k, v in current.items() if k in base})
    tuned = sorted(n for n in tuning.bounds if n in base and n not in set(held))
    seen: dict[tuple[int, ...], Evaluation] = {}
    order: list[Evaluation] = []
    yielded = 0.0

    async def evaluate(w: Weights, note: str) -> Evaluation:
        nonlocal yielded
        k = tuple(w[n] for n in sorted(w))
        if k not in seen:
            if pace is not None:
                yielded += pace()
            seen[k] = await replay(world, policy, pods, w, objective, seed=tuning.seed, note=note)
            order.append(seen[k])
            if progress is not None:
                progress()
        return seen[k]

    cur = await evaluate(base, "current")
    stopped = "nothing to tune" if not tuned else "converged"
    start = dict(base)
    for n in tuned:
        start[n] = clamp(base[n], tuning.bounds[n])
    point = cur
    if tuned and start != base:  # weights outside their bounds: the search starts at the bounds
        point = await evaluate(start, "clamped into bounds")
    # seeded random probes (log-uniform within the bounds): a plateau around the current weights
    # does not hide a better region; the coordinate search starts from the best point seen
    # (weights only matter relative to each other: the corners hold the extreme ratios)
    probes: list[tuple[Weights, str]] = []
    if tuned and 2 ** len(tuned) <= MAX_CORNERS:
        for corner in itertools.product(*((tuning.bounds[n][0], tuning.bounds[n][1]) for n in tuned)):
            probes.append(({**point.weights, **dict(zip(tuned, corner))}, "corner"))
    rnd = random.Random(tuning.seed)
    for i in range(min(RANDOM_PROBES, max(0, budget // 4)) if tuned else 0):
        w = dict(point.weights)
        for n in tuned:
            lo, hi = tuning.bounds[n]
            w[n] = clamp(round(math.exp(rnd.uniform(math.log(lo), math.log(hi)))), (lo, hi))
        probes.append((w, f"random probe {i + 1}"))
    for w, note in probes:
        if len(seen) >= budget or clock() >= deadline:
            break
        cand = await evaluate(w, note)
        if cand.objective < point.objective:
            point = cand
    steps = {n: max(1, tuning.bounds[n][1] - tuning.bounds[n][0]) for n in tuned}
    while tuned and any(s >= 1 for s in steps.values()):
        moved = False
        for n in tuned:
            if steps[n] < 1:
                continue
            for sign in (1, -1):
                if len(seen) >= budget:
                    stopped = "replay budget"
                    break
                if clock() >= deadline:
                    stopped = "time budget"
                    break
                w = dict(point.weights)
                w[n] = clamp(w[n] + sign * steps[n], tuning.bounds[n])
                if w[n] == point.weights[n]:
                    continue
                cand = await evaluate(w, f"{n} {point.weights[n]}->{w[n]}")
                if cand.objective < point.objective:
                    point, moved = cand, True
                    break
            if stopped != "converged":
                break
        if stopped != "converged":
            break
        if not moved:
            steps = {n: s // 2 for n, s in steps.items()}
    best = min(order, key=lambda e: (e.objective, 0 if e is cur else 1))
    return TuneResult(cur, best, order, len(seen), budget, clock() - t0, stopped, tuning.threshold, len(pods),
                      yielded)


def step_toward(current: Mapping[str, int], target: Mapping[str, int], tuning: TuningSpec,
                held: Iterable[str] = ()) -> Weights:
    """The Apply step: each tuned plugin's weight moved toward ``target`` by at most ``maxStep``
    of itself (at least 1), kept within its bounds; held plugins and the others unchanged."""
    held = set(held)
    out = dict(current)
    for n, b in tuning.bounds.items():
        if n in held or n not in current or n not in target:
            continue
        w = int(current[n])
        delta = max(1, int(math.floor(w * tuning.max_step + 1e-9)))
        t = clamp(int(target[n]), b)
        out[n] = clamp(max(w - delta, min(w + delta, t)), b)
    return out


def summary(mode: str, gain: float | None, *, paused: bool = False) -> str:
    """The TUNING column: ``recommend -7.3%``, ``apply -4.0%``, ``apply paused``, ``recommend 0.0%``."""
    word = mode.lower()
    if paused:
        return f"{word} paused"
    if gain is None:
        return f"{word} pending"
    pct = round(100 * gain, 1)
    return f"{word} {pct:+.1f}%" if pct else f"{word} 0.0%"


def run(coro):
    """Run a search on its own event loop (Permit's waiting pods need one), off any other loop."""
    return asyncio.run(coro)


# ---------------------------------------------------------------------------------------- output

def _weights_text(w: Mapping[str, int], names: Sequence[str]) -> str:
    return " ".join(f"{n}={w[n]}" for n in names if n in w)


def write_text(res: TuneResult, out, *, policy: str, objective: Mapping[str, float], nodes: int,
               held_out: tuple[Evaluation, Evaluation] | None = None, held_out_pods: int = 0) -> None:
    """The candidates table and the recommendation (``policy-scheduler tune``)."""
    names = sorted(n for n in res.current.weights if any(c.weights.get(n) != res.current.weights.get(n)
                                                         for c in res.candidates)) or sorted(res.current.weights)
    obj = " + ".join(f"{w:g}*{m}" for m, w in objective.items())
    out.write(f"tuning {policy} on {res.window} pods, {nodes} nodes: objective = {obj} (lower is better)\n\n")
    rows = [["#", "WEIGHTS", "OBJECTIVE", "CHANGE", *(m.upper() for m in objective), "TRIED"]]
    for i, c in enumerate(res.candidates, 1):
        mark = " *" if c is res.recommended and c is not res.current else ""
        rows.append([str(i), _weights_text(c.weights, names) + mark, f"{c.objective:.4f}",
                     f"{100 * relative(c.objective, res.current.objective):+.1f}%",
                     *(f"{c.measures.get(m, 0):g}" for m in objective), c.note])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() + "\n")
    rec = res.recommended
    out.write(f"\n{res.replays} replays of {res.max_replays} in {res.seconds:.1f}s ({res.stopped})\n")
    if rec is res.current:
        out.write(f"no recommendation: the best found ({_weights_text(res.best.weights, names)}, "
                  f"{100 * res.gain:+.1f}%) does not improve the objective by {100 * res.threshold:g}%\n")
    else:
        out.write(f"recommended: {_weights_text(rec.weights, names)} (was {_weights_text(res.current.weights, names)}): "
                  f"objective {rec.objective:.4f}, was {res.current.objective:.4f} "
                  f"({100 * relative(rec.objective, res.current.objective):+.1f}%)\n")
    if held_out is not None:
        cur, new = held_out
        out.write(f"held out ({held_out_pods} pods): current weights {cur.objective:.4f}, recommended {new.objective:.4f} "
                  f"({100 * relative(new.objective, cur.objective):+.1f}%)\n")


# ---------------------------------------------------------------------------------------- one evaluation

@dataclass
class WindowJob:
    """What the operator's tuner hands to an evaluation (picklable: it runs in a worker process).

    ``nodes`` and ``bound``: the cache without the window's pods (the state before them);
    ``pods``: the window's pods in placement order, ``nodes_of``: where each really went;
    ``since``: index of the first pod placed after the last Apply step (None: no feedback)."""

    policy: dict  # the SchedulingPolicy object (metadata.name, spec)
    current: Weights  # the Score weights in force (spec.plugins[*].weight)
    nodes: list
    bound: list
    pods: list
    nodes_of: dict[str, str]
    namespaces: dict = field(default_factory=dict)
    workloads: Any = None
    volumes: Any = None
    metrics: list = field(default_factory=list)
    taken_at: float = 0.0
    scheduler_name: str = "policy-scheduler"
    held: list[str] = field(default_factory=list)
    since: int | None = None
    plugin_modules: list[str] = field(default_factory=list)


async def evaluate_window(job: WindowJob, pace: Callable[[], float] | None = None) -> dict[str, Any]:
    """Search, the window as really placed, the feedback on the pods since the last Apply step and,
    in Apply mode, the step and its prediction. Returns plain data (status and event material).
    ``pace``: as ``search``'s, also called before building the replay world and before each
    replay outside the search."""
    from ..plugins import registry_with
    from .snapshot import Snapshot

    waited = 0.0

    def wait() -> None:
        nonlocal waited
        if pace is not None:
            waited += pace()

    wait()
    registry, _ = registry_with(job.plugin_modules)
    snap = Snapshot(taken_at=job.taken_at, scheduler_name=job.scheduler_name, default_policy="",
                    namespaces=job.namespaces, metrics=job.metrics)
    world = World(snap, registry, nodes=job.nodes, bound=job.bound, workloads=job.workloads, volumes=job.volumes)
    name = world.add_policy(job.policy, "the policy")
    await world.prepare()
    st = world.usable_policy(name)
    tuning: TuningSpec = st.good_spec.tuning
    objective = tuning.objective.weights()
    res = await search(world, name, job.pods, tuning, current=job.current, held=job.held, pace=pace)
    out: dict[str, Any] = {"result": res.to_dict(), "replays": res.replays, "seconds": res.seconds}
    wait()
    measured = await replay(world, name, job.pods, res.current.weights, objective, seed=tuning.seed,
                            follow=job.nodes_of)
    out["measured"] = measured.objective
    replays = res.replays + 1
    if job.since is not None and 0 <= job.since < len(job.pods):
        import copy as _copy

        before, after = job.pods[:job.since], job.pods[job.since:]
        saved = list(world.bound)
        for p in before:  # the state before the pods since the Apply step: the earlier ones as placed
            node = job.nodes_of.get(p.key)
            if node is not None:
                q = _copy.copy(p)
                q.node_name = node
                world.bound.append((q, node))
        try:
            wait()
            pred = await replay(world, name, after, res.current.weights, objective, seed=tuning.seed)
            wait()
            real = await replay(world, name, after, res.current.weights, objective, seed=tuning.seed,
                                follow=job.nodes_of)
        finally:
            world.bound = saved
        replays += 2
        out["feedback"] = {"pods": len(after), "predicted": pred.objective, "measured": real.objective,
                           "error": relative(real.objective, pred.objective)}
    if tuning.mode == "Apply":
        rec = res.recommended
        step = step_toward(res.current.weights, rec.weights, tuning, job.held) if rec is not res.current else None
        if step is not None and step != res.current.weights:
            ev = next((c for c in res.candidates if c.weights == step), None)
            if ev is None:
                wait()
                ev = await replay(world, name, job.pods, step, objective, seed=tuning.seed, note="apply step")
                replays += 1
            if ev.objective <= res.current.objective:  # a step predicted to make things worse waits
                out["step"] = {"weights": step, "objective": ev.objective,
                               "gain": relative(ev.objective, res.current.objective)}
    out["replays"] = replays
    out["yieldedSeconds"] = round(waited + res.yielded, 3)
    return out


def evaluate_window_sync(job: WindowJob) -> dict[str, Any]:
    """``evaluate_window`` on an event loop of its own (the tuner's worker process runs this),
    paced by the operator's busy flag (idle.py: a no-op in a process without one)."""
    from ..idle import new_job, yield_while_busy

    new_job()
    return asyncio.run(evaluate_window(job, pace=yield_while_busy))
