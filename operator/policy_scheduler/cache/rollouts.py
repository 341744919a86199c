"""A policy's rollout as data: which pods a canary takes, what the two arms did, the verdict of the
analysis, the shadow's tally, and the ``status.rollout`` object. No I/O: the operator's
RolloutController (cluster/rollout_controller.py) feeds it and acts on its verdicts.

Phases: ``Shadowing`` (strategy Shadow: the candidate decides beside the stable chain and never
binds), ``Progressing`` (Canary: ``percent`` of the pods, by a stable hash of their UID, are
scheduled with the candidate), ``Promoting`` (promotion decided, the spec write under way),
``Promoted``, ``RolledBack`` (an analysis breach: every pod is scheduled with the stable chain
again) and ``Aborted`` (spec.rollout removed before an end).

A rollout is keyed by its candidate's hash (``candidate_hash``). What it counted is in the
status, so a new leader (or a restarted operator) that reads a status with the same hash
continues it: same start time, same counts, same phase (``adopt``). A rolled-back candidate
stays rolled back until the candidate changes.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..framework.cycle.shadow import ShadowResult
from ..policy.fields import duration_seconds
from ..policy.rollout import MAX_ROLLOUT_SAMPLES, RolloutSpec
from ..timefmt import parse_rfc3339, rfc3339

STABLE, CANARY = "stable", "canary"
SHADOWING, PROGRESSING, PROMOTING, PROMOTED, ROLLED_BACK, ABORTED = (
    "Shadowing", "Progressing", "Promoting", "Promoted", "RolledBack", "Aborted")
ACTIVE = (SHADOWING, PROGRESSING)
ENDED = (PROMOTED, ROLLED_BACK, ABORTED)
HASH_BUCKETS = 10_000
MAX_WINDOW_SAMPLES = 20_000  # per arm and measure: the oldest go first


def candidate_hash(rollout_raw: Mapping[str, Any]) -> str:
    """A short hash of what defines a rollout: strategy, candidate and percent (analysis and
    promotion thresholds may be tuned without starting over)."""
    key = {k: rollout_raw.get(k) for k in ("strategy", "candidate", "percent")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


def bucket(uid: str) -> int:
    """A pod's place in [0, HASH_BUCKETS): a stable hash of its UID (the same on every replica)."""
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:8], "big") % HASH_BUCKETS


def in_canary(uid: str, percent: float) -> bool:
    return bucket(uid) < round(percent * HASH_BUCKETS / 100)


def p95(values: list[float]) -> float | None:
    """The 95th percentile (nearest rank)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(0.95 * len(s)) - 1)]


@dataclass
class Arm:
    attempts: int = 0
    failures: int = 0
    bound: int = 0
    # the window: (monotonic time, failed) per attempt; (time, seconds to bound, node) per bound pod
    tries: deque = field(default_factory=lambda: deque(maxlen=MAX_WINDOW_SAMPLES))
    placed: deque = field(default_factory=lambda: deque(maxlen=MAX_WINDOW_SAMPLES))

    def trim(self, since: float) -> None:
        for q in (self.tries, self.placed):
            while q and q[0][0] < since:
                q.popleft()

    def measures(self, zone_of: Callable[[str], str], zones: list[str],
                 allocation_of: Callable[[str], float | None]) -> dict[str, Any]:
        tries = len(self.tries)
        failed = sum(1 for _, f in self.tries if f)
        nodes = [n for _, _, n in self.placed]
        out: dict[str, Any] = {"attempts": tries, "failureRate": round(failed / tries, 4) if tries else None,
                               "placed": len(nodes)}
        if nodes:
            q = p95([s for _, s, _ in self.placed])
            out["timeToScheduledP95Seconds"] = round(q, 3) if q is not None else None
            distinct = set(nodes)
            out["nodesUsedPerPod"] = round(len(distinct) / len(nodes), 4)
            allocs = [a for a in (allocation_of(n) for n in distinct) if a is not None]
            if allocs:
                mean = sum(allocs) / len(allocs)
                out["imbalance"] = round(math.sqrt(sum((a - mean) ** 2 for a in allocs) / len(allocs)), 4)
            if zones:
                per = Counter(zone_of(n) for n in nodes)
                counts = [per.get(z, 0) for z in zones]
                out["zoneSkew"] = round((max(counts) - min(counts)) / len(nodes), 4)
        return out

    def to_status(self) -> dict[str, int]:
        return {"attempts": self.attempts, "failures": self.failures, "bound": self.bound}

    def adopt(self, st: Any) -> None:
        if isinstance(st, Mapping):
            for k in ("attempts", "failures", "bound"):
                v = st.get(k)
                if isinstance(v, int) and not isinstance(v, bool) and v > getattr(self, k):
                    setattr(self, k, v)


@dataclass
class Verdict:
    breach: str | None = None  # why the candidate is rolled back
    promote: str | None = None  # why it is promoted


class Rollout:
    """One candidate's rollout (``spec``: the policy's spec.rollout; ``chash``: candidate_hash).
    ``now``/``wall`` are clocks (monotonic and epoch seconds), replaceable in tests."""

    def __init__(self, spec: RolloutSpec, chash: str, generation: int = 0, *,
                 now: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.spec, self.hash, self.generation = spec, chash, generation
        self.now, self.wall = now, wall
        self.phase = SHADOWING if spec.strategy == "Shadow" else PROGRESSING
        self.start = wall()
        self.end: float | None = None
        self.message = ("the candidate decides beside the stable chain; nothing it decides is bound"
                        if self.phase == SHADOWING else f"{spec.percent:g}% of the pods are scheduled with the candidate")
        self.arms = {STABLE: Arm(), CANARY: Arm()}
        self.threshold = round((spec.percent or 0) * HASH_BUCKETS / 100)
        self.compared = self.changed = self.became_unschedulable = self.became_schedulable = 0
        self.movers: Counter[str] = Counter()
        self.samples: deque[Mapping[str, Any]] = deque(maxlen=MAX_ROLLOUT_SAMPLES)
        self.last_measures: dict[str, dict[str, Any]] = {}
        self._counted: set[str] = set()  # UIDs of the bound pods counted (count_bound)

    # ------------------------------------------------------------------ who decides
    @property
    def active(self) -> bool:
        return self.phase in ACTIVE

    @property
    def shadowing(self) -> bool:
        return self.phase == SHADOWING

    def arm(self, uid: str) -> str:
        """The arm of a pod: CANARY while the canary progresses and the pod's hash falls in it."""
        if self.phase != PROGRESSING or not uid:
            return STABLE
        return CANARY if bucket(uid) < self.threshold else STABLE

    # ------------------------------------------------------------------ what happened
    def attempt(self, arm: str, failed: bool) -> None:
        a = self.arms[arm]
        a.attempts += 1
        a.failures += failed
        a.tries.append((self.now(), failed))

    def bound(self, arm: str, seconds: float | None, node: str) -> None:
        """A pod this process bound: a sample of the window (the leader's)."""
        self.arms[arm].placed.append((self.now(), seconds if seconds is not None else 0.0, node))

    def counted(self, uid: str) -> bool:
        """Whether the bound pod ``uid`` is counted already (its later updates need no check)."""
        return uid in self._counted

    def count_bound(self, arm: str, uid: str) -> bool:
        """A bound pod whose decision annotation names this candidate and ``arm``, as the watch
        delivers it (on every replica, and again after a restart's LIST): counted once per UID.
        So the bound counts of a new leader are the cluster's, not the last status write's. The
        caller has verified that the annotation is the scheduler's (cluster/decision_mac.py)."""
        if arm not in self.arms or not uid or uid in self._counted:
            return False
        self._counted.add(uid)
        a = self.arms[arm]
        a.bound += 1
        a.attempts = max(a.attempts, a.bound + a.failures)  # each bound pod had an attempt of its own
        return True

    def shadow(self, r: ShadowResult) -> None:
        self.compared += 1
        if not r.changed:
            return
        self.changed += 1
        if r.candidate is None:
            self.became_unschedulable += 1
        elif r.stable is None:
            self.became_schedulable += 1
        self.movers.update(r.plugins)
        self.samples.append({"pod": r.pod, "stable": r.stable, "candidate": r.candidate, "plugins": r.plugins[:8],
                             "time": rfc3339(self.wall())})

    # ------------------------------------------------------------------ the analysis
    def analyze(self, zone_of: Callable[[str], str] = lambda n: "", zones: list[str] | None = None,
                allocation_of: Callable[[str], float | None] = lambda n: None) -> Verdict:
        """The canary's verdict over the window: a breach, a promotion, or neither."""
        if self.phase != PROGRESSING:
            return Verdict()
        a = self.spec.analysis
        since = self.now() - duration_seconds(a.window)
        m = {}
        for name, arm in self.arms.items():
            arm.trim(since)
            m[name] = arm.measures(zone_of, zones or [], allocation_of)
        self.last_measures = m
        s, c = m[STABLE], m[CANARY]
        need = a.min_pods
        if a.max_failure_rate_increase is not None and c["attempts"] >= need:
            diff = c["failureRate"] - (s["failureRate"] or 0.0)
            if diff > a.max_failure_rate_increase:
                return Verdict(breach=f"FailedScheduling rate {c['failureRate']:.0%} of {c['attempts']} canary "
                                      f"attempts against {(s['failureRate'] or 0.0):.0%} of {s['attempts']} stable "
                                      f"ones (at most +{a.max_failure_rate_increase:g})")
        if c["placed"] >= need and s["placed"] >= need:
            checks = (("timeToScheduledP95Seconds", a.max_p95_increase and duration_seconds(a.max_p95_increase),
                       "time to scheduled p95", "s"),
                      ("nodesUsedPerPod", a.max_nodes_used_increase, "nodes used per pod", ""),
                      ("imbalance", a.max_imbalance_increase, "imbalance", ""),
                      ("zoneSkew", a.max_zone_skew_increase, "zone skew", ""))
            for key, limit, label, unit in checks:
                if limit is None or c.get(key) is None or s.get(key) is None:
                    continue
                if c[key] - s[key] > limit:
                    return Verdict(breach=f"{label} {c[key]:g}{unit} on the canary against {s[key]:g}{unit} on "
                                          f"stable (at most +{limit:g}{unit})")
        p = self.spec.promote
        if p is not None:
            if p.pods is not None and self.arms[CANARY].bound >= p.pods:
                return Verdict(promote=f"{self.arms[CANARY].bound} canary pods bound without a breach")
            if p.after is not None and self.wall() - self.start >= duration_seconds(p.after):
                return Verdict(promote=f"{p.after} without a breach")
        return Verdict()

    def finish(self, phase: str, message: str) -> None:
        self.phase, self.message = phase, message
        if phase in ENDED:
            self.end = self.wall()

    # ------------------------------------------------------------------ status
    def summary(self) -> str:
        """The ROLLOUT column."""
        if self.spec.strategy == "Shadow":  # in every phase: a shadow has no percent
            pct = f" ({100 * self.changed / self.compared:.0f}%)" if self.compared else ""
            return f"{self.phase} {self.changed}/{self.compared} changed{pct}"
        c = self.arms[CANARY]
        promote = self.spec.promote
        of = f"/{promote.pods}" if promote is not None and promote.pods is not None else ""
        return f"{self.phase} {self.spec.percent:g}% {c.bound}{of}"

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "strategy": self.spec.strategy, "percent": self.spec.percent, "candidateHash": self.hash,
            "phase": self.phase, "summary": self.summary(), "message": self.message,
            "startTime": rfc3339(self.start), "endTime": rfc3339(self.end) if self.end is not None else None,
            "observedGeneration": self.generation,
        }
        if self.spec.strategy == "Canary":
            out["stable"] = self.arms[STABLE].to_status()
            out["canary"] = self.arms[CANARY].to_status()
            if self.last_measures:
                out["analysis"] = {k: {kk: vv for kk, vv in v.items() if vv is not None}
                                   for k, v in self.last_measures.items()}
        else:
            out["shadow"] = {
                "compared": self.compared, "changed": self.changed,
                "becameUnschedulable": self.became_unschedulable, "becameSchedulable": self.became_schedulable,
                "plugins": [{"name": n, "changed": k} for n, k in self.movers.most_common()],
                "samples": list(self.samples)}
        return out

    def adopt(self, status: Any) -> bool:
        """Continue the rollout a status describes (a new leader, a restart): when it is about
        this candidate, take its start, phase and counts. Returns whether it was."""
        if not isinstance(status, Mapping) or status.get("candidateHash") != self.hash:
            return False
        start = status.get("startTime")
        if isinstance(start, str):
            try:
                self.start = min(self.start, parse_rfc3339(start))
            except ValueError:
                pass
        phase = status.get("phase")
        if phase in (ROLLED_BACK, PROMOTED) or (phase == PROMOTING and self.phase == PROGRESSING):
            self.phase = phase
            msg = status.get("message")
            self.message = msg if isinstance(msg, str) else self.message
            end = status.get("endTime")
            if isinstance(end, str):
                try:
                    self.end = parse_rfc3339(end)
                except ValueError:
                    pass
        for name in (STABLE, CANARY):
            self.arms[name].adopt(status.get(name))
        sh = status.get("shadow")
        if isinstance(sh, Mapping):
            for attr, key in (("compared", "compared"), ("changed", "changed"),
                              ("became_unschedulable", "becameUnschedulable"),
                              ("became_schedulable", "becameSchedulable")):
                v = sh.get(key)
                if isinstance(v, int) and not isinstance(v, bool) and v > getattr(self, attr):
                    setattr(self, attr, v)
            plugins = sh.get("plugins")
            if isinstance(plugins, list):
                for p in plugins:
                    if isinstance(p, Mapping) and isinstance(p.get("name"), str) and isinstance(p.get("changed"), int):
                        self.movers[p["name"]] = max(self.movers[p["name"]], p["changed"])
            samples = sh.get("samples")
            if isinstance(samples, list) and not self.samples:
                self.samples.extend(s for s in samples[-MAX_ROLLOUT_SAMPLES:] if isinstance(s, Mapping))
        return True
