"""Place pods on a snapshot with the operator's own scheduling core, one policy at a time.

Per policy: a fresh NodeTable of the snapshot (World.table), the policy's chain as the operator's
PolicyStore built it, and the pods in the order the policy's QueueSort pops them when they are
pending together (PrioritySort: higher priority first, then the input order). Each pod gets one
scheduling cycle (``schedule_one``); a placed pod is assumed on its node exactly as the operator's
binding tasks assume it (a copy with ``spec.nodeName`` counted on the node), then Reserve and
Permit run, so the next pod sees it (VolumeBinding's Reserve assumes the PVs it matched and the
claims it would provision in the world's VolumeCache, fresh per policy); Bind and everything after
it (PreBind's PV and PVC writes included) are not run: nothing is written anywhere. A pod no node
fits gets upstream's FailedScheduling message. A PostFilter's preemption is reported (its nominated
node and victims), not carried out.

Ties between the best nodes are broken by a ``random.Random(seed)``, fresh for each policy: the
same input gives the same output. It is drawn from exactly as the operator draws from its engine's
``rng`` (``policy-scheduler run --seed N`` makes that a ``random.Random(N)``): once per
``schedule_one`` whose best total is shared by several nodes, and by nothing else (preemption's
candidate offset uses the ``random`` module, not this generator). So an operator started with the
same seed on the same state, taking the same pods in the same order, breaks every tie the same way.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ..explain import decision_annotation, failure_message
from ..framework.cycle.chain import Chain
from ..framework.interface import DEVICE_ALLOCATION, CycleState
from ..framework.model.nodetable import CPU, MEMORY, PODS, NodeTable
from ..framework.queue.nominator import Nominator
from ..framework.model.podinfo import PodInfo, parse_pod
from ..framework.cycle.schedule import Decision, schedule_one
from ..framework.cycle.shadow import Shadow, ShadowResult
from ..framework.status import Code, Status
from ..plugins.default_preemption import RESULT_KEY as PREEMPTION_RESULT
from . import metrics
from .world import World

ZONE_LABEL = "topology.kubernetes.io/zone"


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

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"pod": self.pod, "node": self.node}
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
                "failures": [{"pod": r.pod, "message": r.message} for r in self.failed], "nodes": nodes}

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


def queue_order(chain: Chain, pods: list[PodInfo]) -> list[PodInfo]:
    """The pods as the policy's QueueSort pops them when all are pending at once (input order
    stands for the time they were queued)."""
    if chain.queue_sort is None:
        return list(pods)
    less = chain.queue_sort.less
    items = [SimpleNamespace(pod=p, timestamp=float(i)) for i, p in enumerate(pods)]

    def cmp(a, b) -> int:
        return -1 if less(a, b) else (1 if less(b, a) else 0)

    return [q.pod for q in sorted(items, key=functools.cmp_to_key(cmp))]


def unique_best(d: Decision) -> bool:
    if d.node is None:
        return False
    if d.feasible == 1:
        return True
    return len(d.top) < 2 or d.top[0].total > d.top[1].total


def _shape(pods: list[PodInfo]) -> tuple[dict[str, int], PodInfo | None]:
    keys = [tuple(sorted(p.requests.items())) for p in pods]
    best = metrics.most_common(keys)
    if best is None:
        return {}, None
    return dict(best), pods[keys.index(best)]


def _free_for(table: NodeTable, pod: PodInfo | None) -> tuple[np.ndarray, np.ndarray]:
    if pod is None:
        return np.zeros((0, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)
    vec = table.request_vector(pod)
    n = table.n
    rows = ~table.unschedulable[:n]
    free = table.allocatable[:n] - table.requested[:n]
    return free[rows], vec


async def run_policy(world: World, policy: str, pod_objects: list[Mapping[str, Any] | PodInfo], *, seed: int = 0,
                     keep_decisions: bool = False, follow: Mapping[str, str] | None = None,
                     progress: Callable[[int], None] | None = None) -> PolicyRun:
    """Place ``pod_objects`` (pod objects, or pods the engine parsed already) under ``policy`` on
    a fresh copy of the snapshot.

    ``follow`` (pod key -> node): after each decision, count the pod on that node instead of the
    decided one (replay: every decision is made on the state a recorded run had).

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
    rng = random.Random(seed)  # as the engine's rng under `run --seed`
    nominator = Nominator()
    shadow = None if st.shadow is None else Shadow(chain, st.shadow.candidate, st.shadow.shared)
    compared: list[ShadowResult] | None = None if shadow is None else []
    by_key: dict[str, PodResult] = {}
    done = 0
    for pod in queue_order(chain, pods):
        if not world.admits(st, pod.namespace):
            msg = f"SchedulingPolicy {policy!r} does not admit pods of namespace {pod.namespace!r}"
            by_key[pod.key] = PodResult(pod.key, None, msg)
        else:
            by_key[pod.key] = _place(world, chain, table, pod, rng, nominator, keep_decisions,
                                     None if follow is None else follow.get(pod.key), shadow, compared)
        done += 1
        if progress is not None:
            progress(1)
    after = NodeState.of(table)
    free, vec = _free_for(table, shape_pod)
    run = PolicyRun(policy, [by_key[p.key] for p in pods], before, after, shape, fits_before,
                    metrics.fits(free, vec), time.perf_counter() - t0, table=table, shadow=compared)
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
    used = [d for d in dra.allocated if dra.allocated[d] > 0]
    return {"total": total, "allocated": len(used),
            "nodes": len({node_of.get((d[0], d[1])) for d in used if node_of.get((d[0], d[1]))})}


def _place(world: World, chain: Chain, table: NodeTable, pod: PodInfo, rng: random.Random, nominator: Nominator,
           keep: bool, follow: str | None, shadow: Shadow | None = None,
           compared: list[ShadowResult] | None = None) -> PodResult:
    state = CycleState()
    d = schedule_one(chain, pod, table, rng, state, nominator)
    if shadow is not None and compared is not None:
        compared.append(shadow.compare(pod, table, state, d, follow if d.scheduled else None, nominator))
    top = [(s.node, s.total) for s in d.top[:3]]
    if not d.scheduled:
        note = ""
        result = state.read(PREEMPTION_RESULT)
        if result is not None and result.nominated_node and result.victims:
            note = (f"would preempt {len(result.victims)} pod(s) on node {result.nominated_node}: "
                    f"{', '.join(result.victim_keys)}")
        return PodResult(pod.key, None, d.message or d.status.message(), d.feasible, top, False, note,
                         d if keep else None)
    node = follow or d.node
    assert node is not None
    # the binding tasks' assume, Reserve and Permit: the operator's own (ClusterState.reserve)
    cluster = world.state
    _, status = cluster.reserve(chain, state, pod, node)
    note = ""
    if status.code == Code.WAIT:  # nothing will allow it here: counted as allowed
        wp = cluster.waiting.get(pod.uid)
        if wp is not None:
            for plugin in wp.pending_plugins():
                wp.allow(plugin)
            cluster.waiting.remove(pod.uid)
        note = "a Permit plugin asked to wait; counted as allowed"
        status = Status.success()
    if not status.is_success:
        cluster.unreserve(chain, state, pod, node)
        return PodResult(pod.key, None, failure_message(status), d.feasible, top, False, "", d if keep else None)
    return PodResult(pod.key, d.node, "", d.feasible, top, unique_best(d), note, d if keep else None,
                     list(state.read(DEVICE_ALLOCATION) or ()))


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
                         progress: Callable[[int], None] | None = None) -> Simulation:
    await world.prepare()
    runs = []
    for name in policies:
        runs.append(await run_policy(world, name, pod_objects, seed=seed, keep_decisions=keep_decisions,
                                     progress=progress))
    return Simulation(runs, len(pod_objects), len(world.node_specs), seed, world.snapshot.taken_at, source)


def simulate(world: World, policies: Iterable[str], pod_objects: list[Mapping[str, Any]], **kw) -> Simulation:
    """``simulate_async`` on its own event loop (Permit's waiting pods need one)."""
    return asyncio.run(simulate_async(world, policies, pod_objects, **kw))
