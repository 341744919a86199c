"""The queue-driven run of one policy (simulate.py's ``run_policy``): the operator's own
SchedulingQueue on a virtual clock, the scheduling cycles and pod-group cycles, the binding cycle's
Permit wait, preemptions carried out. simulate.py's docstring says what it does and why; this
module is the loop and its per-pod result (``PodResult``).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..cache.group_cycle import GroupCycles
from ..explain import failure_message
from ..framework.cycle.chain import Chain
from ..framework.cycle.podgroup_result import group_plugin
from ..framework.cycle.schedule import Decision, schedule_one
from ..framework.cycle.shadow import Shadow, ShadowResult
from ..framework.events import ASSIGNED_POD_DELETE
from ..framework.instrumentation import NOOP
from ..framework.interface import DEVICE_ALLOCATION, CycleState, Handle
from ..plugins.podgroups.native_cache import CONDITION
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.queue.nominator import Nominator
from ..framework.queue.scheduling_queue import SchedulingQueue
from ..framework.queue.subqueues import QueuedPodInfo
from ..framework.status import Code, Status
from ..framework.waiting import go_duration
from ..plugins.default_preemption import NAME as PREEMPTION, RESULT_KEY as PREEMPTION_RESULT
from ..plugins.priority_sort import PrioritySort
from .world import World

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
    """A pod a Permit plugin parked: its cycle, node and the virtual time its first timeout ends."""

    qpi: QueuedPodInfo
    node: str
    state: CycleState
    decision: Decision
    deadline: float
    timeouts: dict[str, float]


class QueueRun:
    """One policy's run: the queue, the cycles, the binding cycle's Permit wait, preemptions."""

    def __init__(self, world: World, policy: str, st, table: NodeTable, seed: int, keep: bool,
                 follow: Mapping[str, str] | None, rounds: int, progress: Callable[[int], None] | None) -> None:
        self.world, self.policy, self.st, self.table = world, policy, st, table
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
        self.group_actions = _GroupActions(self)
        a = self.group_actions
        self.group_cycles = GroupCycles(world.state, self.queue, self.nominator, a, a, a, a,
                                        lambda pod: (st, ""), self.rng)

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
        pod = qpi.pod
        group = group_plugin(self.chain)
        if group is not None and group.group_key(pod) is not None:
            self._group_cycle(qpi, group)
            return
        state = CycleState()
        d = schedule_one(self.chain, pod, self.table, self.rng, state, self.nominator)
        follow = None if self.follow is None else self.follow.get(pod.key)
        if self.shadow is not None and self.compared is not None:
            self.compared.append(self.shadow.compare(pod, self.table, state, d, follow if d.scheduled else None,
                                                     self.nominator))
        top = [(s.node, s.total) for s in d.top[:3]]
        if not d.scheduled:
            error = d.status.code == Code.ERROR
            self.queue.add_unschedulable(qpi, d.unschedulable_plugins, error=error,
                                         pending_plugins=d.pending_plugins)
            r = PodResult(pod.key, None, d.message or d.status.message(), d.feasible, top, False, "",
                          d if self.keep else None, attempts=qpi.attempts)
            self.results[pod.key] = r
            result = state.read(PREEMPTION_RESULT)
            if result is not None:
                r.note = self._preempt(pod, result)
            elif d.nominated_node:
                self.nominator.add(pod, d.nominated_node)
            return
        node = follow or d.node
        assert node is not None
        self.nominator.remove(pod.key)
        self._reserve(qpi, state, d, node)

    def _reserve(self, qpi: QueuedPodInfo, state: CycleState, d: Decision, node: str) -> None:
        """The binding tasks' assume, Reserve and Permit: the operator's own (ClusterState.reserve);
        then bound, parked at Permit, or failed."""
        pod = qpi.pod
        top = [(s.node, s.total) for s in d.top[:3]]
        cluster = self.world.state
        _, status = cluster.reserve(self.chain, state, pod, node)
        if status.code == Code.WAIT:
            wp = cluster.waiting.get(pod.uid)
            timeouts = _timeouts(wp)
            self.parked[pod.uid] = _Parked(qpi, node, state, d, self.clock() + min(timeouts.values(), default=0.0),
                                           timeouts)
            self.results[pod.key] = PodResult(pod.key, None, status.message(), d.feasible, top, False,
                                              "waiting at Permit", d if self.keep else None, attempts=qpi.attempts)
            return
        if not status.is_success:
            self._failed(qpi, state, node, status, d, broadcast=False)
            return
        self._bound(qpi, node, state, d)

    # ------------------------------------------------------------------ pod-group cycle
    def _group_cycle(self, qpi: QueuedPodInfo, group) -> None:
        """The operator's own pod-group cycle (cache/group_cycle.py GroupCycles, as the engine
        calls it): the popped pod's queued group members come out of the queue with it, are
        validated, go through the cycle (plugins/podgroups/cycle.py) as one entity, group
        preemption (PodGroupPostFilter) when the group is unschedulable, then the winners go
        through assume, Reserve and Permit (and are bound once allowed), the others are requeued
        with their statuses, and the PodGroup gets its PodGroupInitiallyScheduled condition. Its
        recorder, telemetry, preemptor and binding tasks are the simulation's (_GroupActions); a
        group preemption is carried out once the cycle is over, as the operator's deletions come
        after it: the victims gone, the members activated."""
        actions = self.group_actions
        self.group_cycles.schedule(qpi, self.st, self.chain, group)
        while actions.preemptions:
            info, members, victims = actions.preemptions.pop(0)
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
                self._bound(p.qpi, p.node, p.state, p.decision, waited=True)
            else:
                self._failed(p.qpi, p.state, p.node, status, p.decision, broadcast=True)

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
        """The binding cycle succeeded (PreBind and Bind are not run): the pod counts on its node as
        the operator's state counts it once its binding comes back (ClusterState.apply_pod
        confirms the assumption, the pod's PodGroup counts it bound), and the queue hears it."""
        pod = qpi.pod
        self.queue.done(pod.key)
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

    def _failed(self, qpi: QueuedPodInfo, state: CycleState, node: str, status: Status, d: Decision,
                broadcast: bool) -> None:
        """Reserve or Permit refused the pod (binding_tasks._failed): unreserve, requeue, and when
        the pod held room (a Permit wait), the room is free again for the pods waiting for it."""
        pod = qpi.pod
        self.world.state.unreserve(self.chain, state, pod, node)
        if status.is_rejected:
            self.queue.add_unschedulable(qpi, {status.plugin} if status.plugin else (),
                                         pending_plugins={status.plugin} if status.code == Code.PENDING and
                                         status.plugin else ())
        else:
            self.queue.add_unschedulable(qpi, error=True)
        self.results[pod.key] = PodResult(pod.key, None, failure_message(status), d.feasible,
                                          [(s.node, s.total) for s in d.top[:3]], False, "",
                                          d if self.keep else None, attempts=qpi.attempts)
        if broadcast:
            self.queue.move_all_to_active_or_backoff(ASSIGNED_POD_DELETE, pod, None,
                                                     pre_check=lambda q: q.key != pod.key)

    def _moves(self, changes) -> None:
        for ev, old, new in changes:
            self.queue.move_all_to_active_or_backoff(ev, old, new)

    # ------------------------------------------------------------------ preemption
    def _preempt(self, pod: PodInfo, result) -> str:
        """DefaultPreemption's choice carried out as the operator's preemptor does: the preemptor
        nominated to the node (lower-priority pods nominated there lose it), the victims gone from
        the state (their DELETED events: the queue hears them, the preemptor among others is tried
        again); a victim parked at Permit is rejected there instead. Returns the note."""
        node = result.nominated_node
        if node is None:
            return ""
        if node == "":
            self.nominator.remove(pod.key)
            pod.nominated_node_name = None
            return ""
        for other in result.clear_nominations:
            self.nominator.remove(other.key)
            other.nominated_node_name = None
        self.nominator.add(pod, node)
        pod.nominated_node_name = node
        if not result.victims:
            return ""
        keys = result.victim_keys
        self.preemptions.append({"preemptor": pod.key, "node": node, "victims": keys})
        self.victims_of.setdefault(pod.key, []).extend(keys)
        self._delete_victims(pod.key, result.victims)
        return f"preempted {len(keys)} pod(s) on node {node}: {', '.join(keys)}"

    def _delete_victims(self, by: str, victims) -> None:
        """The victims gone as the operator's preemptor makes them go: one parked at Permit is
        rejected there (never bound); the others are deleted (their DELETED events: the state frees
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
            if v.key in self.placed:  # a pod of this run: deleted, as the operator's victims are
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


class _GroupActions:
    """The engine's recorder, telemetry, preemptor and binding tasks as GroupCycles uses them,
    answered by a simulation: a failure is the member's result, a nomination goes to the
    simulation's nominator, a group preemption is kept for QueueRun._group_cycle to carry out, a
    binding starts with the simulation's assume, Reserve and Permit."""

    def __init__(self, sim: "QueueRun") -> None:
        self.sim = sim
        self.preemptions: list[tuple[Any, list[PodInfo], list[PodInfo]]] = []

    # recorder
    def failure(self, pod: PodInfo, reason: str, message: str, code: Any = None, once: bool = False) -> None:
        q = self.sim.queue.get(pod.key)
        self.sim.results[pod.key] = PodResult(pod.key, None, message, attempts=q.attempts if q is not None else 1)

    # recorder and preemptor
    def nominate(self, pod: PodInfo, node: str | None) -> None:
        if node:
            self.sim.nominator.add(pod, node)
        else:
            self.sim.nominator.remove(pod.key)
        pod.nominated_node_name = node

    # telemetry
    def attempt(self, *a: Any, **kw: Any) -> None:
        pass

    def cycle_recorder(self, policy: str):
        return NOOP

    # preemptor
    def preempt_group(self, info: Any, members: list[PodInfo], victims: list[PodInfo]) -> None:
        if victims:
            self.preemptions.append((info, list(members), list(victims)))

    # binding tasks
    def start(self, qpi: QueuedPodInfo, st: Any, chain: Chain, state: CycleState, decision: Decision) -> bool:
        assert decision.node is not None
        self.sim._reserve(qpi, state, decision, decision.node)
        return qpi.key in self.sim.placed or qpi.pod.uid in self.sim.parked


def _timeouts(wp) -> dict[str, float]:
    """A parked pod's plugins and their timeouts (seconds, as Permit asked: read off the timers
    just set, the loop's clock has not moved since)."""
    if wp is None:
        return {}
    loop = asyncio.get_running_loop()
    out = {}
    for plugin, timer in getattr(wp, "_timers", {}).items():
        out[plugin] = round(max(timer.when() - loop.time(), 0.0), 3)
    return out


def _outcome(wp) -> Status | None:
    """A parked pod's outcome once a plugin allowed or rejected it (None while it waits)."""
    fut = getattr(wp, "_future", None)
    if fut is None or not fut.done():
        return None
    return fut.result()
