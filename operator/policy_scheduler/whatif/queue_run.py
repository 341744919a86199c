"""The queue-driven run of one policy (simulate.py's ``run_policy``): the operator's own
SchedulingQueue and scheduling driver (scheduler/schedule_one.py: the cycles, the pod-group
cycles, Reserve and Permit, preemption) on a virtual clock, with in-memory ports (``_SimPorts``):
a binding is counted at once, a Permit wait parks the pod until a plugin allows or rejects it (or
its timeout passes on the virtual clock), victims leave the state as their DELETED events would
make them. simulate.py's docstring says what it does and why; this module is the loop, the ports
and the per-pod result (``PodResult``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..cache.policies import PolicyState
from ..cache.rollouts import STABLE
from ..framework.cycle.chain import Chain
from ..framework.cycle.podgroup_result import PodGroupInfo
from ..framework.cycle.schedule import Decision
from ..framework.cycle.shadow import Shadow, ShadowResult
from ..framework.interface import DEVICE_ALLOCATION, CycleState, Handle
from ..plugins.podgroups.native_cache import CONDITION
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.preemption import PreemptionResult
from ..framework.queue.nominator import Nominator
from ..framework.queue.scheduling_queue import SchedulingQueue
from ..framework.queue.subqueues import QueuedPodInfo
from ..framework.status import Code, Status
from ..framework.waiting import WaitingPod, go_duration
from ..plugins.default_preemption import NAME as PREEMPTION
from ..plugins.priority_sort import PrioritySort
from ..scheduler.ports import NoAttempts
from ..scheduler.schedule_one import Scheduler
from .world import World

# the driver's log lines are the operator's; a simulation keeps only its errors
QUIET = logging.getLogger("policy_scheduler.whatif.cycles")
QUIET.setLevel(logging.ERROR)

MAX_ROUNDS = 10  # scheduling cycles one pod may get in a run (then it is given up)
ADD_SECONDS = 1e-6  # virtual time between two pods added to the queue (input order = queueing order)
CYCLE_SECONDS = 1e-3  # virtual time one scheduling cycle takes


@dataclass
class PodResult:
    pod: str  # namespace/name
    node: str | None
    message: str = ""  # the FailedScheduling message when not placed
    feasible: int = 0
    top: list[tuple[str, int]] = field(default_factory=list)  # (node, total score), best first
    unique: bool = False  # the best node was the only one with the top total (or the only feasible one)
    note: str = ""  # a preemption the policy would start, a Permit wait counted as allowed
    decision: Decision | None = None  # kept for --explain
    devices: list[dict[str, Any]] = field(default_factory=list)  # DRA devices of its claims (Reserve)
    attempts: int = 1  # scheduling cycles it had
    preempted: list[str] = field(default_factory=list)  # the pods its preemptions removed

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"pod": self.pod, "node": self.node}
        if self.attempts > 1:
            d["attempts"] = self.attempts
        if self.preempted:
            d["preempted"] = list(self.preempted)
        if self.devices:
            d["devices"] = [x["device"] for x in self.devices]
        if self.node is None:
            d["message"] = self.message
        else:
            d["score"] = self.top[0][1] if self.top else None
            d["uniqueBest"] = self.unique
            d["top"] = [{"node": n, "score": s} for n, s in self.top]
        if self.note:
            d["note"] = self.note
        return d


def unique_best(d: Decision) -> bool:
    if d.node is None:
        return False
    if d.feasible == 1:
        return True
    return len(d.top) < 2 or d.top[0].total > d.top[1].total


class VirtualClock:
    """The simulation's time: the queue's timestamps and backoffs, the groups' backoffs. Each
    scheduling cycle takes ``CYCLE_SECONDS``; waiting for a backoff or a Permit timeout jumps."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


@dataclass
class _Parked:
    """A pod a Permit plugin parked: its cycle, its assumed copy (on its node) and the virtual
    time its first timeout ends."""

    qpi: QueuedPodInfo
    assumed: PodInfo
    state: CycleState
    decision: Decision
    deadline: float
    timeouts: dict[str, float]


class QueueRun:
    """One policy's run: the queue, the driver's cycles, the binding cycle's Permit wait,
    preemptions."""

    def __init__(self, world: World, policy: str, st: PolicyState, table: NodeTable, seed: int, keep: bool,
                 follow: Mapping[str, str] | None, rounds: int, progress: Callable[[int], None] | None) -> None:
        self.world, self.policy, self.st, self.table = world, policy, st, table
        assert st.chain is not None
        self.chain: Chain = st.chain
        self.rng = random.Random(seed)  # as the engine's rng under `run --seed`
        self.nominator = Nominator()
        self.keep, self.follow, self.rounds, self.progress = keep, follow, max(int(rounds), 1), progress
        self.shadow = None if st.shadow is None else Shadow(self.chain, st.shadow.candidate, st.shadow.shared)
        self.compared: list[ShadowResult] | None = None if self.shadow is None else []
        self.clock = VirtualClock()
        self.queue = SchedulingQueue(less=PrioritySort(None, Handle()).less, clock=self.clock,
                                     profile_of=lambda name: self.chain if name == policy else None)
        self.results: dict[str, PodResult] = {}
        self.parked: dict[str, _Parked] = {}  # pod uid -> its wait at Permit
        self.preemptions: list[dict[str, Any]] = []
        self.victims_of: dict[str, list[str]] = {}  # preemptor key -> the pods it preempted
        self.placed: dict[str, str] = {}  # pod key -> node, for the pods of this run now placed
        self.bodies: dict[str, Mapping[str, Any]] = {}
        self.cycles = 0
        self.reported: set[str] = set()
        # the decision a failure reported now belongs to (its result shows it), by pod key
        self.deciding: dict[str, Decision] = {}
        # group preemptions of the cycle in progress, carried out once it is over
        self.group_preemptions: list[tuple[PodGroupInfo, list[PodInfo], list[PodInfo]]] = []
        ports = _SimPorts(self)
        self.driver = _SimDriver(self, world.state, self.queue, self.nominator, lambda pod: (st, ""), ports,
                                 NoAttempts(), ports, ports, ports, self.rng, _nothing, clock=self.clock, logger=QUIET)
        self.driver.follow = follow

    # ------------------------------------------------------------------ the loop
    def run(self, pods: list[PodInfo]) -> None:
        world, queue = self.world, self.queue
        for p in pods:
            if isinstance(p.raw, Mapping):
                self.bodies[p.key] = p.raw
        world.fresh_groups(self.bodies.values(), self.clock)
        world.events.clear()
        world.queue = queue
        try:
            for p in pods:
                if not world.admits(self.st, p.namespace):
                    msg = f"SchedulingPolicy {self.policy!r} does not admit pods of namespace {p.namespace!r}"
                    self.results[p.key] = PodResult(p.key, None, msg)
                    self._done(p.key)
                    continue
                queue.add(p, self.policy)  # as the engine's informer: PreEnqueue first
                self.clock.advance(ADD_SECONDS)  # input order is queueing order
            self._loop()
        finally:
            world.queue = None
            for uid in list(self.parked):  # ended with pods parked (given up): release their timers
                world.waiting.reject(uid, "", "simulation ended")
                world.waiting.remove(uid)
        for p in pods:
            if p.key not in self.results:
                self.results[p.key] = self._never_tried(p)
            self._done(p.key)
            if p.key in self.victims_of:
                r = self.results[p.key]
                r.preempted = self.victims_of[p.key]

    def _loop(self) -> None:
        queue = self.queue
        while True:
            self._settle()
            qpi = queue.pop()
            if qpi is None:
                if self.parked:  # nothing else to do: the first Permit timeout passes
                    self._time_out()
                    continue
                delay = queue.next_ready_in()
                if delay is not None:  # errors back off: wait for them
                    self.clock.advance(delay)
                    continue
                return  # the live queue would idle here until an event from outside
            if qpi.attempts > self.rounds:
                queue.done(qpi.key)  # given up: its last result stands
                r = self.results.get(qpi.key)
                if r is not None and not r.note:
                    r.note = f"given up after {self.rounds} scheduling cycles"
                continue
            self.clock.advance(CYCLE_SECONDS)
            self.cycles += 1
            self._cycle(qpi)

    def _done(self, key: str) -> None:
        if key not in self.reported:
            self.reported.add(key)
            if self.progress is not None:
                self.progress(1)

    def _never_tried(self, p: PodInfo) -> PodResult:
        qpi = self.queue.get(p.key)
        msg = ""
        if qpi is not None and qpi.gating_plugin:
            msg = qpi.gating_message or f"held at PreEnqueue by {qpi.gating_plugin}"
        msg = msg or self.world.events.get(p.key) or "not tried"
        return PodResult(p.key, None, msg, note="never reached a scheduling cycle (held at PreEnqueue)")

    # ------------------------------------------------------------------ one cycle
    def _cycle(self, qpi: QueuedPodInfo) -> None:
        """The driver's cycle (scheduler/schedule_one.py), the operator's own: one pod, or the
        popped pod's whole group (scheduler/group_cycle.py). A group preemption is carried out
        once the cycle is over, as the operator's deletions come after it: the victims gone, the
        members activated."""
        self.driver.schedule(qpi)
        while self.group_preemptions:
            info, members, victims = self.group_preemptions.pop(0)
            keys = [v.key for v in victims]
            nodes = sorted({self.table.node_of(v.key) or v.node_name or "" for v in victims} - {""})
            self.preemptions.append({"preemptor": f"PodGroup {info.key}", "node": ", ".join(nodes) or "-",
                                     "victims": keys})
            if members:
                self.victims_of.setdefault(members[0].key, []).extend(keys)
            for m in members:
                r = self.results.get(m.key)
                if r is not None and r.node is None and not r.note:
                    r.note = f"its PodGroup {info.key} preempted {len(keys)} pod(s): {', '.join(keys)}"
            self._delete_victims(f"PodGroup {info.key}", victims)
            self.queue.activate([m.key for m in members if m.key in self.queue])

    # ------------------------------------------------------------------ binding cycle
    def _settle(self) -> None:
        """The parked pods a plugin allowed or rejected meanwhile: bound, or failed."""
        waiting = self.world.state.waiting
        for uid, p in list(self.parked.items()):
            wp = waiting.get(uid)
            status = _outcome(wp) if wp is not None else Status.success()
            if status is None:
                continue
            del self.parked[uid]
            waiting.remove(uid)
            if status.is_success:
                self._bound(p.qpi, p.assumed.node_name, p.state, p.decision, waited=True)
                continue
            self.deciding[p.qpi.key] = p.decision
            try:
                self.driver.failed(p.qpi, self.chain, p.state, p.assumed, status, broadcast=True)
            finally:
                self.deciding.pop(p.qpi.key, None)

    def _time_out(self) -> None:
        """The earliest Permit timeout of the parked pods passes (upstream: the waiting pod is
        rejected in the plugin's name, ``rejected due to timeout after waiting ...``)."""
        uid, p = min(self.parked.items(), key=lambda x: (x[1].deadline, x[1].qpi.key))
        self.clock.advance(p.deadline - self.clock())
        plugin = min(p.timeouts, key=lambda k: (p.timeouts[k], k)) if p.timeouts else ""
        wp = self.world.state.waiting.get(uid)
        msg = f"rejected due to timeout after waiting {go_duration(p.timeouts.get(plugin, 0.0))} at plugin {plugin}"
        if wp is not None:
            wp.reject(plugin, msg)

    def _bound(self, qpi: QueuedPodInfo, node: str, state: CycleState, d: Decision, waited: bool = False) -> None:
        """The binding cycle succeeded (PreBind and Bind are not run): the driver's bookkeeping;
        the pod counts on its node as the state counts it once the binding comes back
        (ClusterState.apply_pod confirms the assumption, the pod's PodGroup counts it bound), and
        the queue hears it."""
        pod = qpi.pod
        self.driver.bound(qpi, self.st, node)
        body = self.bodies.get(pod.key)
        if body is not None:
            bound = {**body, "spec": {**(body.get("spec") or {}), "nodeName": node}}
            change = self.world.state.apply_pod("MODIFIED", bound)
            self._moves(change.changes)
        elif pod.key in self.table.assumed:  # a pod given parsed (the tuner's): no object to bind
            self.table.confirm(pod.key)
        self.placed[pod.key] = node
        top = [(s.node, s.total) for s in d.top[:3]]
        note = "waited at Permit until its group's quorum" if waited else ""
        self.results[pod.key] = PodResult(pod.key, d.node, "", d.feasible, top, unique_best(d), note,
                                          d if self.keep else None, list(state.read(DEVICE_ALLOCATION) or ()),
                                          attempts=qpi.attempts)
        self._done(pod.key)

    def _moves(self, changes: Any) -> None:
        for ev, old, new in changes:
            self.queue.move_all_to_active_or_backoff(ev, old, new)

    # ------------------------------------------------------------------ preemption
    def _delete_victims(self, by: str, victims: list[PodInfo]) -> None:
        """The victims gone as their DELETEs would make them go (what-if's Victims port): one
        parked at Permit is rejected there (never bound); the others are deleted (their DELETED events: the state frees
        their room, the queue hears it); one already terminating is left alone."""
        waiting = self.world.state.waiting
        for v in victims:
            if v.uid and waiting.get(v.uid) is not None:
                waiting.reject(v.uid, PREEMPTION, "preempted")
                continue
            if v.terminating:
                continue  # upstream: no second DELETE
            node = self.table.node_of(v.key) or v.node_name or ""
            meta = {"name": v.name, "namespace": v.namespace, **({"uid": v.uid} if v.uid else {})}
            change = self.world.state.apply_pod("DELETED", {"metadata": meta, "spec": {"nodeName": node}})
            if v.key in self.placed:  # a pod of this run: reported preempted
                del self.placed[v.key]
                self.results[v.key] = PodResult(v.key, None, f"preempted by {by} on node {node}",
                                                note=f"was placed on {node}, then preempted")
            self._moves(change.changes)

    # ------------------------------------------------------------------ groups
    def group_results(self, pods: list[PodInfo]) -> list[dict[str, Any]]:
        """Per PodGroup of the pods placed: placed whole or not, and why (the PodGroupInitially-
        Scheduled condition the operator would write; else the members' own message)."""
        cache = self.world.state.native_pod_groups
        keys: list[str] = []
        for p in pods:
            name = getattr(p, "pod_group_name", "")
            if name and f"{p.namespace}/{name}" not in keys:
                keys.append(f"{p.namespace}/{name}")
        out = []
        for gkey in keys:
            mine = [p for p in pods if getattr(p, "pod_group_name", "") and f"{p.namespace}/{p.pod_group_name}" == gkey]
            placed = [p.key for p in mine if self.results[p.key].node is not None]
            pg = cache.groups.get(gkey)
            c = cache.counts(gkey)
            entry: dict[str, Any] = {"podGroup": gkey, "exists": pg is not None, "pods": len(mine),
                                     "placed": len(placed), "boundBefore": max(c.bound - len(placed), 0)}
            if pg is not None:
                entry["minCount"] = pg.min_member if pg.gang else None
                entry["policy"] = "gang" if pg.gang else "basic"
                if pg.topology_key:
                    entry["topologyKey"] = pg.topology_key
                    values = {self.table.specs[self.table.index[self.results[k].node]].labels.get(pg.topology_key)
                              for k in placed if self.results[k].node in self.table.index}
                    entry["domains"] = sorted(str(v) for v in values)
            entry["whole"] = bool(mine) and len(placed) == len(mine)
            entry["scheduled"] = pg is not None and (not pg.gang or c.bound + c.succeeded >= pg.min_member)
            cond = None
            if pg is not None:
                cond = next((x for x in cache.status(gkey).get("conditions") or []
                             if isinstance(x, Mapping) and x.get("type") == CONDITION), None)
            if cond is not None:
                entry["condition"] = {k: cond.get(k) for k in ("type", "status", "reason", "message")}
            why = ""
            if not entry["whole"]:
                if cond is not None and cond.get("status") == "False" and cond.get("message"):
                    why = str(cond["message"])
                else:
                    failed = [self.results[p.key] for p in mine if self.results[p.key].node is None]
                    why = failed[0].message if failed else ""
            entry["message"] = why
            out.append(entry)
        return out


def _nothing() -> None:
    """The driver's ``wake``: a simulation's loop pops until its queue is empty."""


class _SimDriver(Scheduler):
    """The driver, the operator's own, telling the simulation which decision a failure it
    reports belongs to (the pod's result shows the decision)."""

    def __init__(self, sim: QueueRun, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.sim = sim

    def submit(self, qpi: QueuedPodInfo, st: PolicyState, chain: Chain, state: CycleState, decision: Decision,
               node: str | None = None) -> bool:
        deciding = self.sim.deciding
        deciding[qpi.key] = decision
        try:
            return super().submit(qpi, st, chain, state, decision, node)
        finally:
            deciding.pop(qpi.key, None)

    def unschedulable(self, qpi: QueuedPodInfo, st: PolicyState, state: CycleState, decision: Decision,
                      chain: Chain | None = None) -> None:
        deciding = self.sim.deciding
        deciding[qpi.key] = decision
        try:
            super().unschedulable(qpi, st, state, decision, chain)
        finally:
            deciding.pop(qpi.key, None)


class _SimPorts:
    """The driver's ports (scheduler/ports.py) answered by a simulation (nothing is counted:
    NoAttempts). Recorder: a failure is the pod's result; nominations are the driver's
    nominator's only. Binder: bound at once, or parked at Permit. Victims: gone from the state at once; a group's
    kept for QueueRun._cycle to carry out after the cycle. Rollouts: the stable chain decides;
    spec.rollout's candidate decides beside it (the shadow), before the pod is assumed."""

    def __init__(self, sim: QueueRun) -> None:
        self.sim = sim

    # Recorder
    def failure(self, pod: PodInfo, reason: str, msg: str, code: Code | None, once: bool = False) -> None:
        sim = self.sim
        q = sim.queue.get(pod.key)
        attempts = q.attempts if q is not None else 1
        d = sim.deciding.get(pod.key)
        if d is None:
            sim.results[pod.key] = PodResult(pod.key, None, msg, attempts=attempts)
        else:
            sim.results[pod.key] = PodResult(pod.key, None, msg, d.feasible, [(s.node, s.total) for s in d.top[:3]],
                                             False, "", d if sim.keep else None, attempts=attempts)

    def nominate(self, pod: PodInfo, node: str | None) -> None:
        pass

    def event(self, pod: PodInfo, type_: str, reason: str, action: str, note: str) -> None:
        pass

    def forget(self, pod_key: str) -> None:
        pass

    # Binder
    def start_binding(self, qpi: QueuedPodInfo, st: PolicyState, chain: Chain, state: CycleState,
                      decision: Decision, assumed: PodInfo, status: Status) -> bool:
        sim, pod, d = self.sim, qpi.pod, decision
        if status.code == Code.WAIT:
            timeouts = _timeouts(sim.world.state.waiting.get(pod.uid))
            sim.parked[pod.uid] = _Parked(qpi, assumed, state, d, sim.clock() + min(timeouts.values(), default=0.0),
                                          timeouts)
            sim.results[pod.key] = PodResult(pod.key, None, status.message(), d.feasible,
                                             [(s.node, s.total) for s in d.top[:3]], False, "waiting at Permit",
                                             d if sim.keep else None, attempts=qpi.attempts)
            return True
        sim._bound(qpi, assumed.node_name, state, d)
        return True

    # Victims
    def start(self, pod: PodInfo, victims: list[PodInfo]) -> None:
        pass  # deleted at once: no preemption stays in progress

    def delete(self, pod: PodInfo, result: PreemptionResult, victims: list[PodInfo]) -> None:
        sim = self.sim
        keys, node = result.victim_keys, result.nominated_node
        sim.preemptions.append({"preemptor": pod.key, "node": node, "victims": keys})
        sim.victims_of.setdefault(pod.key, []).extend(keys)
        sim._delete_victims(pod.key, victims)
        r = sim.results.get(pod.key)
        if r is not None:
            r.note = f"preempted {len(keys)} pod(s) on node {node}: {', '.join(keys)}"

    def preempt_group(self, info: PodGroupInfo, members: list[PodInfo], victims: list[PodInfo]) -> None:
        if victims:
            self.sim.group_preemptions.append((info, list(members), list(victims)))

    # Rollouts
    def chain_for(self, st: PolicyState, pod: PodInfo) -> tuple[Chain, str]:
        return self.sim.chain, STABLE

    def decided(self, st: PolicyState, pod: PodInfo, arm: str, decision: Decision, state: CycleState) -> None:
        sim = self.sim
        if sim.shadow is not None and sim.compared is not None:
            follow = None if sim.follow is None else sim.follow.get(pod.key)
            sim.compared.append(sim.shadow.compare(pod, sim.table, state, decision,
                                                   follow if decision.scheduled else None, sim.nominator))

    def bound(self, st: PolicyState, pod: PodInfo, seconds: float | None, node: str) -> None:
        pass


def _timeouts(wp: WaitingPod | None) -> dict[str, float]:
    """A parked pod's plugins and their timeouts (seconds, as Permit asked: read off the timers
    just set, the loop's clock has not moved since)."""
    if wp is None:
        return {}
    loop = asyncio.get_running_loop()
    out = {}
    for plugin, timer in getattr(wp, "_timers", {}).items():
        out[plugin] = round(max(timer.when() - loop.time(), 0.0), 3)
    return out


def _outcome(wp: WaitingPod) -> Status | None:
    """A parked pod's outcome once a plugin allowed or rejected it (None while it waits)."""
    fut = getattr(wp, "_future", None)
    if fut is None or not fut.done():
        return None
    return fut.result()
