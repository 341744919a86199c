"""Place pods on a snapshot with the operator's own scheduling core, one policy at a time (the
loop itself is queue_run.py's QueueRun; this module sets each run up and measures it).

Per policy: a fresh NodeTable of the snapshot (World.table), fresh storage, DRA and PodGroup
caches (World.fresh_volumes, World.fresh_groups), the policy's chain as the operator's PolicyStore
built it, and the operator's own scheduling queue (framework/queue/scheduling_queue.py), driven as
the engine drives it, on a virtual clock:

- The pods are added in input order (each a moment after the previous one: the input order is the
  order they were queued in), so PreEnqueue runs as it does for the operator's informer: a pod a
  PreEnqueue plugin holds (a scheduling gate, a PodGroup with fewer than minCount pods...) waits
  and is reported with that plugin's message. Pods are popped as the policy's QueueSort orders them
  (PrioritySort: higher priority first, then the input order).
- Each popped pod goes through the operator's own scheduling driver (scheduler/schedule_one.py):
  a scheduling cycle (``schedule_one``); a placed pod is assumed on its node by the driver's
  ``submit``, then Reserve and Permit run (ClusterState.reserve), so the next pod sees it
  (VolumeBinding's Reserve assumes the PVs it matched and the claims it would provision). A pod a Permit plugin parks (GangScheduling until
  its group's quorum) waits there, in flight, until a plugin allows it (then it counts as bound)
  or rejects it (Unreserve, requeued); when nothing else is left to do, the earliest Permit timeout
  passes (upstream's ``rejected due to timeout after waiting ...``). A bound pod is counted as the
  operator counts its binding coming back (ClusterState.apply_pod), and the queue hears the
  cluster events this produces, as it hears the operator's informers.
- A pod that does not fit gets upstream's FailedScheduling message and goes back to the queue with
  the plugins that rejected it; an event one of those plugins registered (and whose hint says so)
  moves it again: a pod bound, a group member placed, a preemption's victims gone, a pod's room
  freed at Unreserve, a plugin's ``activate_pods``. A PostFilter's preemption is carried out: the
  preemptor is nominated to the node, its victims are removed from the state as their deletion
  would remove them (a victim parked at Permit is rejected there), and the preemptor is tried
  again. The victims are reported (``PodResult.preempted``, ``PolicyRun.preemptions``); a victim
  that was placed by this simulation is reported preempted.
- The run ends when the queue has nothing to pop (what is left waits for an event from outside,
  as it would in the operator; the operator's 5-minute flush of the unschedulable pool is not
  simulated), or when a pod had ``rounds`` cycles (MAX_ROUNDS; then it is given up). Bind and
  everything after it (PreBind's PV and PVC writes included) are not run: nothing is written
  anywhere.

Ties between the best nodes are broken as the operator (and kube-scheduler v1.37.1) breaks
them, without a draw (``schedule.select_host``); ties between a pod group's placements by a
``random.Random(seed)``, fresh for each policy: the same input gives the same output (the virtual
clock makes every queue order and backoff the same at each run). It is drawn from exactly as the
operator draws from its engine's ``rng`` (``policy-scheduler run --seed N`` makes that a
``random.Random(N)``), and by nothing else (preemption's candidate offset uses the ``random``
module, not this generator). So an operator started with the same seed on the same state, taking
the same pods in the same order, breaks every tie the same way.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ..explain import decision_annotation
from ..framework.cycle.shadow import ShadowResult
from ..framework.model.nodetable import CPU, MEMORY, PODS, NodeTable
from ..framework.model.podinfo import PodInfo, parse_pod
from ..remedies import Remedies, suggest
from . import metrics
from .drilldown import DrillDown, DrillRun, DrillSpec
from .queue_run import MAX_ROUNDS, PodResult, QueueRun, unique_best  # noqa: F401 (PodResult, unique_best: API)
from .world import World

ZONE_LABEL = "topology.kubernetes.io/zone"
SUGGEST_PODS = 50  # unschedulable pods per policy that get suggestions (remedies/), in input order
SUGGEST_BUDGET = 0.020  # seconds per pod (remedies.DEFAULT_BUDGET)



@dataclass
class NodeState:
    """Per node: allocatable and requested cpu (millicores) and memory (bytes), pod count."""

    names: list[str]
    zones: list[str]
    schedulable: np.ndarray  # bool: not spec.unschedulable
    allocatable: np.ndarray  # n x 2 (cpu, memory)
    requested: np.ndarray  # n x 2
    pods: np.ndarray  # n

    @classmethod
    def of(cls, table: NodeTable) -> "NodeState":
        n = table.n
        zones = table.label_column(ZONE_LABEL)
        return cls(list(table.names), [z or "" for z in zones], ~table.unschedulable[:n].copy(),
                   table.allocatable[:n, [CPU, MEMORY]].copy(), table.requested[:n, [CPU, MEMORY]].copy(),
                   table.requested[:n, PODS].copy())

    def allocation(self) -> np.ndarray:
        s = metrics.shares(self.requested, self.allocatable)
        return metrics.node_allocation(s[:, 0], s[:, 1])

    def imbalance(self) -> float:
        return metrics.imbalance(self.allocation()[self.schedulable])

    def imbalance_by_resource(self) -> dict[str, float]:
        s = metrics.shares(self.requested, self.allocatable)[self.schedulable]
        return {"cpu": metrics.imbalance(s[:, 0]), "memory": metrics.imbalance(s[:, 1])}

    def nodes_used(self) -> int:
        return int(np.count_nonzero(self.pods > 0))


@dataclass
class PolicyRun:
    """One policy's simulation and what it measured."""

    policy: str
    results: list[PodResult]
    before: NodeState
    after: NodeState
    shape: dict[str, int]  # the most common pod shape (resource -> request)
    fits_before: int
    fits_after: int
    seconds: float
    table: NodeTable | None = field(default=None, repr=False)  # the state after the run (the tuner reads it)
    # spec.rollout's candidate, decided beside every placed pod as the operator's shadow does
    # (framework/cycle/shadow.py); None when the policy has no candidate
    shadow: list[ShadowResult] | None = None
    # DRA devices (None without ResourceSlices): total, allocated before and after, nodes with one in use
    devices: dict[str, int] | None = None
    # the preemptions carried out: {"preemptor", "node", "victims"}, in the order they happened
    preemptions: list[dict[str, Any]] = field(default_factory=list)
    # per PodGroup of the pods (simulate.py _Sim.group_results): placed whole or not, and why
    groups: list[dict[str, Any]] = field(default_factory=list)
    cycles: int = 0  # scheduling cycles run
    warnings: list[str] = field(default_factory=list)  # snapshot objects skipped (each says why)
    drilldowns: list[DrillDown] = field(default_factory=list)  # drilldown.py: per pod, per node and plugin
    # per unschedulable pod (the first SUGGEST_PODS): the verified changes that would place it (remedies/)
    remedies: dict[str, Remedies] = field(default_factory=dict)

    @property
    def placed(self) -> list[PodResult]:
        return [r for r in self.results if r.node is not None]

    @property
    def failed(self) -> list[PodResult]:
        return [r for r in self.results if r.node is None]

    def zone_spread(self) -> dict:
        zone_of = dict(zip(self.after.names, self.after.zones))
        return metrics.zone_spread((zone_of.get(r.node, "") for r in self.placed), self.after.zones)

    def summary(self) -> dict[str, Any]:
        placed = self.placed
        return {
            "placed": len(placed),
            "unschedulable": len(self.results) - len(placed),
            "nodesUsed": self.after.nodes_used(),
            "nodesUsedBefore": self.before.nodes_used(),
            "nodesReceivingPods": len({r.node for r in placed}),
            "imbalance": round(self.after.imbalance(), 4),
            "imbalanceBefore": round(self.before.imbalance(), 4),
            "imbalanceByResource": {k: round(v, 4) for k, v in self.after.imbalance_by_resource().items()},
            "zoneSpread": self.zone_spread(),
            "fragmentation": {"shape": {k: format_quantity(k, v) for k, v in self.shape.items()},
                              "fits": self.fits_after, "fitsBefore": self.fits_before},
            "seconds": round(self.seconds, 3),
            **({"shadow": self.shadow_summary()} if self.shadow is not None else {}),
            **({"devices": self.devices} if self.devices is not None else {}),
            "cycles": self.cycles,
            **({"preempted": sum(len(p["victims"]) for p in self.preemptions)} if self.preemptions else {}),
            **({"podGroups": {"total": len(self.groups), "whole": sum(1 for g in self.groups if g["whole"])}}
               if self.groups else {}),
        }

    def shadow_summary(self) -> dict[str, Any]:
        """The candidate's decisions beside the policy's: as the operator's status.rollout.shadow."""
        results = self.shadow or []
        changed = [r for r in results if r.changed]
        movers: dict[str, int] = {}
        for r in changed:
            for p in r.plugins:
                movers[p] = movers.get(p, 0) + 1
        return {"compared": len(results), "changed": len(changed),
                "becameUnschedulable": sum(1 for r in changed if r.candidate is None),
                "becameSchedulable": sum(1 for r in changed if r.stable is None),
                "plugins": [{"name": n, "changed": k} for n, k in sorted(movers.items(), key=lambda x: -x[1])],
                "samples": [{"pod": r.pod, "stable": r.stable, "candidate": r.candidate, "plugins": r.plugins[:8]}
                            for r in changed[:10]]}

    def to_dict(self) -> dict[str, Any]:
        b, a = self.before, self.after
        nodes = [{"name": nm, "zone": z,
                  "cpu": {"allocatable": int(a.allocatable[i, 0]), "before": int(b.requested[i, 0]),
                          "after": int(a.requested[i, 0])},
                  "memory": {"allocatable": int(a.allocatable[i, 1]), "before": int(b.requested[i, 1]),
                             "after": int(a.requested[i, 1])},
                  "podsBefore": int(b.pods[i]), "podsAfter": int(a.pods[i])}
                 for i, (nm, z) in enumerate(zip(a.names, a.zones))]
        return {**self.summary(), "placements": [r.to_dict() for r in self.results],
                "failures": [{"pod": r.pod, "message": r.message,
                              **({"remedies": self.remedies[r.pod].to_json()} if r.pod in self.remedies else {})}
                             for r in self.failed], "nodes": nodes,
                **({"preemptions": self.preemptions} if self.preemptions else {}),
                **({"podGroups": self.groups} if self.groups else {}),
                **({"warnings": self.warnings} if self.warnings else {}),
                **({"drillDown": [x.to_dict() for x in self.drilldowns]} if self.drilldowns else {})}

    def explain(self, r: PodResult) -> dict[str, Any] | None:
        """The decision record explain prints (the annotation the operator would have bound)."""
        if r.decision is None or r.node is None:
            return None
        return json.loads(decision_annotation(self.policy, r.decision))


def format_quantity(resource: str, v: int) -> str:
    if resource == "cpu":
        return f"{v}m" if v % 1000 else str(v // 1000)
    if resource in ("memory", "ephemeral-storage"):
        for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if v and v % size == 0:
                return f"{v // size}{unit}"
        return str(v)
    return str(v)


def _shape(pods: list[PodInfo]) -> tuple[dict[str, int], PodInfo | None]:
    keys = [tuple(sorted(p.requests.items())) for p in pods]
    best = metrics.most_common(keys)
    if best is None:
        return {}, None
    return dict(best), pods[keys.index(best)]


def _free_for(table: NodeTable, pod: PodInfo | None) -> tuple[np.ndarray, np.ndarray]:
    if pod is None or table.requests_unadvertised(pod):  # fits nowhere: fits() counts 0
        return np.zeros((0, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)
    vec = table.request_vector(pod)
    n = table.n
    rows = ~table.unschedulable[:n]
    free = table.allocatable[:n] - table.requested[:n]
    return free[rows], vec


async def run_policy(world: World, policy: str, pod_objects: list[Mapping[str, Any] | PodInfo], *, seed: int = 0,
                     keep_decisions: bool = False, follow: Mapping[str, str] | None = None,
                     progress: Callable[[int], None] | None = None, rounds: int = MAX_ROUNDS,
                     drill: DrillSpec | None = None, suggestions: int = SUGGEST_PODS) -> PolicyRun:
    """Place ``pod_objects`` (pod objects, or pods the engine parsed already) under ``policy`` on
    a fresh copy of the snapshot, through the operator's own queue (see the module's docstring).

    ``follow`` (pod key -> node): after each decision, count the pod on that node instead of the
    decided one (replay: every decision is made on the state a recorded run had).

    ``rounds``: the most cycles one pod gets (its first included); then it is given up.

    ``drill``: the pods that get a drill-down (drilldown.py; PolicyRun.drilldowns), taken beside
    their cycles without changing any decision.

    ``suggestions``: how many of the pods left unschedulable (in input order) get the verified
    changes that would place them (remedies/ ``suggest``, on the state the run ended with; PolicyRun.remedies).

    A policy with spec.rollout has its candidate decide beside every pod, as the operator's shadow
    does (PolicyRun.shadow): the same comparison on the same state, before the pod is assumed."""
    t0 = time.perf_counter()
    st = world.usable_policy(policy)
    chain = st.chain
    assert chain is not None
    chain.next_start_node_index = 0
    table = world.table()
    world.fresh_volumes()
    devices_before = _device_use(world)
    before = NodeState.of(table)
    pods = [p if isinstance(p, PodInfo) else parse_pod(p) for p in pod_objects]
    shape, shape_pod = _shape(pods)
    free, vec = _free_for(table, shape_pod)
    fits_before = metrics.fits(free, vec)
    drilled = [] if drill is None else drill.chosen([p.key for p in pods])
    sim = (QueueRun(world, policy, st, table, seed, keep_decisions, follow, rounds, progress) if not drilled else
           DrillRun(world, policy, st, table, seed, keep_decisions, follow, rounds, progress, spec=drill,
                    pods=drilled))
    sim.run(pods)
    remedies: dict[str, Remedies] = {}
    for p in [p for p in pods if p.key in sim.results and sim.results[p.key].node is None][:max(suggestions, 0)]:
        remedies[p.key] = suggest(p, world.state, st, nominator=sim.nominator, budget=SUGGEST_BUDGET)
    after = NodeState.of(table)
    free, vec = _free_for(table, shape_pod)
    run = PolicyRun(policy, [sim.results[p.key] for p in pods], before, after, shape, fits_before,
                    metrics.fits(free, vec), time.perf_counter() - t0, table=table, shadow=sim.compared,
                    preemptions=sim.preemptions, groups=sim.group_results(pods), cycles=sim.cycles,
                    warnings=list(world.warnings),
                    drilldowns=[sim.drills.get(k) or DrillDown(k, nodes=table.n, note="never reached a scheduling "
                                f"cycle: {sim.results[k].message}") for k in drilled if k in sim.results],
                    remedies=remedies)
    if devices_before is not None:
        now = _device_use(world) or {}
        run.devices = {"total": devices_before["total"], "allocatedBefore": devices_before["allocated"],
                       "allocated": now.get("allocated", 0), "nodesBefore": devices_before["nodes"],
                       "nodes": now.get("nodes", 0)}
    return run


def _device_use(world: World) -> dict[str, int] | None:
    """How many DRA devices the world has, how many are allocated (in-flight included) and on how
    many nodes; None without ResourceSlices."""
    dra = world.state.dra
    if not dra.slices:
        return None
    total = sum(len(s.devices) for s in dra.slices.values())
    node_of = {(s.driver, s.pool): s.node_name for s in dra.slices.values() if s.node_name}
    used = [d for d in set(dra.allocated) | set(dra.shared) if dra.in_use(d)]  # shared devices count once
    return {"total": total, "allocated": len(used),
            "nodes": len({node_of.get((d[0], d[1])) for d in used if node_of.get((d[0], d[1]))})}


@dataclass
class Simulation:
    """Every policy's run on the same snapshot and pods."""

    runs: list[PolicyRun]
    pods: int
    nodes: int
    seed: int
    taken_at: float
    source: str

    def to_dict(self) -> dict[str, Any]:
        from .snapshot import rfc3339

        return {"apiVersion": "policy-scheduler.io/simulation/v1", "kind": "Simulation",
                "snapshot": {"source": self.source, "takenAt": rfc3339(self.taken_at), "nodes": self.nodes},
                "pods": self.pods, "seed": self.seed,
                "policies": {r.policy: r.to_dict() for r in self.runs}}


async def simulate_async(world: World, policies: Iterable[str], pod_objects: list[Mapping[str, Any]], *,
                         seed: int = 0, keep_decisions: bool = False, source: str = "",
                         progress: Callable[[int], None] | None = None, drill: DrillSpec | None = None,
                         suggestions: int = SUGGEST_PODS) -> Simulation:
    await world.prepare()
    runs = []
    for name in policies:
        runs.append(await run_policy(world, name, pod_objects, seed=seed, keep_decisions=keep_decisions,
                                     progress=progress, drill=drill, suggestions=suggestions))
    return Simulation(runs, len(pod_objects), len(world.node_specs), seed, world.snapshot.taken_at, source)


def simulate(world: World, policies: Iterable[str], pod_objects: list[Mapping[str, Any]], **kw) -> Simulation:
    """``simulate_async`` on its own event loop (Permit's waiting pods need one)."""
    return asyncio.run(simulate_async(world, policies, pod_objects, **kw))
