"""GangScheduling: Kubernetes 1.37's own gangs (``scheduling.k8s.io`` PodGroups, the
``GenericWorkload`` feature gate), with the topology constraint of
``TopologyAwareWorkloadScheduling`` (upstream's GangScheduling, TopologyPlacementGenerator and
PodGroupPodsCount, in this framework's one-pod-at-a-time cycle).

A pod belongs to the PodGroup named by its ``spec.schedulingGroup.podGroupName``, in its
namespace. A group whose ``spec.schedulingPolicy`` is ``gang`` is all-or-nothing: no member binds
unless ``minCount`` of them are placed together. Pods in no group are scheduled as usual; a
``basic`` group only gets the topology constraint. The state lives in the operator's
``framework.model.native_podgroups.NativePodGroupCache`` (``handle.native_pod_groups()``), with the
machinery Coscheduling uses (framework/gangs.py, GroupMachinery).

- PreEnqueue (upstream's, v1.37.1's spelling): the group does not exist: ``waiting for pods's pod
  group "<name>" to appear in scheduling queue``; fewer than minCount members exist: ``waiting for minCount pods
  from a gang to appear in scheduling queue``. Ours: while a member is gated the others wait too
  (upstream queues a group as one entity, gated as soon as one member is). One event per reason.
- PreFilter (UnschedulableAndUnresolvable, so no member preempts alone): the group was rejected
  and nothing that may help it changed since; the members are gone below minCount. With a
  topology key, the group's domain: the one its placed members are in, else the one chosen now
  for the whole group (see below), else the group waits, rejected as one, with a message that
  says no single domain can hold it and gives the largest domain's free room. The pod's
  candidate nodes are the domain's.
- PostFilter: a member that fits nowhere rejects the group (its waiting pods are rejected and
  unreserved, the domain choice is released) until something from outside the group changes.
- Reserve / Unreserve: reservations counted; an Unreserve before the quorum rejects the group.
- Permit (upstream's): ``waiting for minCount pods from a gang to be scheduled`` until minCount
  members are reserved or bound, for at most 5 minutes; each waiting member activates the
  group's pods that are not placed; the member that completes the quorum allows them all.

Choosing a domain (TopologyPlacementGenerator's placements, one per value of the key): the
members not yet placed, with their requests summed, against each domain's free allocatable
(allocatable minus requested on its nodes, counting only the nodes the pod may use by its
nodeSelector, required node affinity, taints it does not tolerate and cordons). A domain fits
when the members can be packed onto its nodes (first fit, largest first). Among the domains that
fit, the tightest: the least free room left after the group (cpu, then memory, then the other
resources, then pods), then upstream's placement score (the share of cpu and memory allocated
after the group, higher first), then the value's name; so big domains stay whole for big groups.
(Upstream 1.37.1 scores placements by the number of the group's pods they take,
PodGroupPodsCount, plus NodeResourcesFit's MostAllocated share over the placement's nodes: without
other pods on them the two orders agree; with some, upstream may prefer a bigger domain that ends
up fuller over a smaller one that keeps less room.) When no domain holds every member but some hold
minCount of them, the tightest of those. The choice holds until the group is rejected or nothing
of it is placed any more.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, Resource
from ..framework.gangs import GroupMachinery, format_amount, membership_hint, not_own_release
from ..framework.interface import (GROUP_PLACEMENT, CycleState, EnqueueExtensions, NodeToStatus, PermitPlugin,
                                   PostFilterPlugin, PreEnqueuePlugin, PreFilterPlugin, ReservePlugin)
from ..framework.model.native_podgroups import Domain, DomainFit, NativePodGroup, NativePodGroupCache, native_group_key
from ..framework.model.nodetable import BASE_RESOURCES, CPU, MEMORY, PODS, NodeTable
from ..framework.model.podinfo import DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, PodInfo
from ..framework.status import Code, Status
from ..framework.model.taints import first_untolerated

NAME = "GangScheduling"
PERMIT_TIMEOUT_SECONDS = 300.0  # upstream permitTimeoutDuration
RESOURCE_ORDER = ("cpu", "memory")


def _order(resources) -> list[str]:
    rest = sorted(r for r in resources if r not in RESOURCE_ORDER and r != "pods")
    return [r for r in RESOURCE_ORDER if r in resources] + rest


def _amounts(d: dict[str, int]) -> str:
    return ", ".join(f"{r}: {format_amount(r, v)}" for r, v in ((r, d[r]) for r in _order(d) + ["pods"] if r in d))


def eligible_rows(nodes: NodeTable, pod: PodInfo) -> np.ndarray:
    """The rows the pod may use as far as the group's domain is concerned: not cordoned, its
    nodeSelector and required node affinity, no NoSchedule/NoExecute taint it does not tolerate."""
    n = nodes.n
    ok = ~nodes.unschedulable[:n].copy()
    for k, v in pod.node_selector.items():
        ok &= nodes.label_mask(k, v)
    for row in np.flatnonzero(ok):
        spec = nodes.specs[row]
        if pod.required_node_affinity is not None and not pod.required_node_affinity.matches(spec.labels, spec.name):
            ok[row] = False
        elif spec.taints and first_untolerated(spec.taints, pod.tolerations) is not None:
            ok[row] = False
    return ok


def _packs(free: np.ndarray, items: np.ndarray) -> bool:
    """Can every item (rows of ``items``) be placed on some node (rows of ``free``) at once?
    First fit, largest items first."""
    free = free.copy()
    for vec in items[np.lexsort(items.T[::-1])[::-1]]:
        ok = np.flatnonzero((free >= vec).all(axis=1))
        if ok.size == 0:
            return False
        free[ok[0]] -= vec
    return True


def _matrix(items: list[dict[str, int]], resources: list[str]) -> np.ndarray:
    mat = np.zeros((len(items), len(resources) + 1), dtype=np.int64)
    for i, it in enumerate(items):
        for j, r in enumerate(resources):
            mat[i, j] = it.get(r, 0)
    mat[:, -1] = 1
    return mat


def _after(free: np.ndarray, items: np.ndarray) -> np.ndarray:
    """``free`` once ``items`` are placed as ``_packs`` places them (they fit)."""
    free = free.copy()
    for vec in items[np.lexsort(items.T[::-1])[::-1]]:
        free[np.flatnonzero((free >= vec).all(axis=1))[0]] -= vec
    return free


def _most_allocated(nodes: NodeTable, idx: np.ndarray, items: list[dict[str, int]]) -> int:
    """upstream's placement score (NodeResourcesFit's ScorePlacement, MostAllocated over cpu and
    memory, weights 1): the domain's requested (non-zero defaults) plus the group's, over its
    allocatable, 0-100. The tie-break between domains that leave the same room."""
    scores = []
    for col, nz, default in ((CPU, 0, DEFAULT_MILLI_CPU_REQUEST), (MEMORY, 1, DEFAULT_MEMORY_REQUEST)):
        cap = int(nodes.allocatable[idx, col].sum())
        if cap == 0:
            continue
        req = int(nodes.nonzero[idx, nz].sum()) + sum(it.get(BASE_RESOURCES[col], 0) or default for it in items)
        scores.append(min(req, cap) * 100 // cap)
    return sum(scores) // len(scores) if scores else 0


def choose_domain(nodes: NodeTable, key: str, items: list[dict[str, int]], quorum: int,
                  eligible: np.ndarray, held: dict[str, list[dict[str, int]]] | None = None) -> DomainFit:
    """The tightest domain of label ``key`` that holds every item (else ``quorum`` of them, the
    smallest), on the ``eligible`` rows. ``held``: per domain value, the members of other groups
    that chose it and are not placed yet; they must fit there too. See the module doc."""
    held = held or {}
    resources = _order({r for it in items for r, q in it.items() if q > 0})
    cols = [nodes.res_index.get(r) for r in resources]
    mat = _matrix(items, resources)
    need = {r: int(mat[:, j].sum()) for j, r in enumerate(resources)}
    fit = DomainFit(None, need, len(items))
    by_size = mat[np.lexsort(mat.T[::-1])] if len(items) else mat
    small = by_size[:max(quorum, 0)]
    whole: list[tuple[tuple, str]] = []
    part: list[tuple[tuple, str]] = []
    best_free: tuple = ()
    for value in sorted(nodes.label_values(key)):
        rows = [nodes.index[nm] for nm in nodes.label_values(key)[value] if nm in nodes.index]
        rows = [r for r in rows if r < nodes.n and eligible[r]]
        if not rows:
            continue
        fit.candidates += 1
        idx = np.array(rows, dtype=np.int64)
        free = np.zeros((len(rows), len(resources) + 1), dtype=np.int64)
        for j, col in enumerate(cols):
            if col is not None:
                free[:, j] = nodes.allocatable[idx, col] - nodes.requested[idx, col]
        free[:, -1] = nodes.allocatable[idx, PODS] - nodes.requested[idx, PODS]
        free = free.clip(min=0)
        if held.get(value):  # the room other groups' unplaced members will take
            others = _matrix(held[value], resources)
            if not _packs(free, others):
                continue
            free = _after(free, others)
        total = free.sum(axis=0)
        size = tuple(int(x) for x in total)
        if size > best_free:
            best_free = size
            fit.largest = value
            fit.largest_free = {r: int(total[j]) for j, r in enumerate(resources)}
        if _packs(free, mat):
            whole.append((tuple(int(x) for x in total - mat.sum(axis=0)), -_most_allocated(nodes, idx, items),
                          value))
        elif quorum < len(items) and _packs(free, small):
            part.append((tuple(int(x) for x in total - small.sum(axis=0)), 0, value))
    if whole:
        fit.domain = Domain(key, min(whole)[2])
    elif part:
        fit.domain = Domain(key, min(part)[2])
        fit.quorum_only = True
    return fit


class GangScheduling(GroupMachinery, PreEnqueuePlugin, PreFilterPlugin, PostFilterPlugin, ReservePlugin,
                     PermitPlugin, EnqueueExtensions):
    NAME = NAME
    Args = None

    def __init__(self, args, handle) -> None:
        super().__init__(args, handle)
        self.cache: NativePodGroupCache = handle.native_pod_groups()

    def group_key(self, pod: Any) -> str | None:
        return native_group_key(pod)

    def post_filter_message(self, key: str, pod: PodInfo) -> str:
        return f"PodGroup {key} rejected as a whole: pod {pod.name} is unschedulable"

    def _gang(self, pod: Any) -> bool:
        key = native_group_key(pod)
        pg = self.cache.groups.get(key) if key else None
        return pg is not None and pg.gang

    def _reject_group(self, key: str, why: str, exclude: str = "", backoff: float = 0.0,
                      message: str | None = None) -> None:
        """As GroupMachinery's; and when the group had a domain, the room its unplaced members
        were to take there is free again: other rejected groups (which may have counted it) are
        tried again (capacity changed, their pods activated)."""
        held = self.cache.domain(key) is not None
        super()._reject_group(key, why, exclude, backoff, message)
        if not held:
            return
        self.cache.capacity_changed(key)
        others = [g for g in self.cache.rejected_groups() if g != key]
        self.handle.activate_pods([pk for g in others for pk, m in self.cache.members(g).items()
                                   if not m.node and not m.assumed and not m.terminal])

    # ------------------------------------------------------------------ PostFilter, Unreserve
    def post_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable,
                    statuses: NodeToStatus) -> tuple[Status, str | None]:
        if not self._gang(pod):
            return Status(Code.UNSCHEDULABLE), None  # a basic group is not rejected as one
        if not len(statuses) and statuses.absent.plugin == self.NAME:
            # refused by its own PreFilter (which rejected the group and said why): PostFilter runs
            # after a PreFilter rejection too, as upstream's, and must not reject it again
            return Status(Code.UNSCHEDULABLE), None
        return super().post_filter(state, pod, nodes, statuses)

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        if native_group_key(pod) is not None and not self._gang(pod):
            self.cache.unreserve(pod.key)
            return
        super().unreserve(state, pod, node_name)

    # ------------------------------------------------------------------ PreEnqueue
    def pre_enqueue(self, pod: PodInfo) -> Status:
        key = native_group_key(pod)
        if key is None:
            return Status.success()
        pg = self.cache.groups.get(key)
        if pg is None:
            return self._wait(pod, "missing", f"waiting for pods's pod group {go_quote(pod.pod_group_name)} to "
                                              f"appear in scheduling queue")
        self.cache.manage(key)
        if not pg.gang:
            self.cache.forget_report(pod.key)
            return Status.success()
        c = self.cache.counts(key)
        if c.pods < pg.min_member:
            return self._wait(pod, "members", "waiting for minCount pods from a gang to appear in scheduling queue")
        if c.gated and not pod.scheduling_gates and c.assigned < pg.min_member:
            return self._wait(pod, "gated", f"waiting for the gated pods of PodGroup {key}: {c.gated} of "
                                            f"{c.pods} have scheduling gates")
        self.cache.forget_report(pod.key)
        return Status.success()

    # ------------------------------------------------------------------ PreFilter
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        key = native_group_key(pod)
        if key is None:
            return Status.skip(), None
        cache = self.cache
        pg = cache.groups.get(key)
        if pg is None:
            return _unresolvable(f"PodGroup {key} does not exist"), None
        cache.manage(key)
        cache.scheduling_started(key)
        c = cache.counts(key)
        placed = cache.permitted(key) or c.assigned >= pg.min_member or not pg.gang
        if not placed:
            why = cache.rejection(key)
            if why is not None:
                return _unresolvable(f"PodGroup {key} was rejected ({why}); waiting for a change in the cluster "
                                     f"that may help it"), None
            if c.pods < pg.min_member:
                msg = f"PodGroup {key}: {c.pods} pods exist, minCount is {pg.min_member}"
                self._reject_group(key, msg, exclude=pod.uid)
                return _unresolvable(msg), None
        placement: dict[str, Any] = {"podGroup": key, "minCount": pg.min_member if pg.gang else None}
        state.write(GROUP_PLACEMENT, placement)
        if not pg.topology_key:
            return Status.success(), None
        dom, msg = self.domain_of(pg, pod, nodes)
        if dom is None:
            if pg.gang and not placed:
                self._reject_group(key, msg, exclude=pod.uid)
            return _unresolvable(msg), None
        placement["domain"] = str(dom)
        names = nodes.label_values(dom.key).get(dom.value, set())
        return Status.success(), set(names)

    def domain_of(self, pg: NativePodGroup, pod: PodInfo, nodes: NodeTable) -> tuple[Domain | None, str]:
        """The group's domain: where its placed members are, else the one recorded, else the
        tightest that fits (recorded now). (None, why) when there is none."""
        key, cache = pg.key, self.cache
        tk = pg.topology_key
        placed_values = set()
        for pk, m in cache.members(key).items():
            node = nodes.pod_node.get(pk) if (m.node or m.assumed) and not m.terminal else None
            row = nodes.index.get(node) if node else None
            if row is not None:
                placed_values.add(nodes.specs[row].labels.get(tk))
        if placed_values:
            if len(placed_values) > 1 or None in placed_values:
                shown = ", ".join(sorted(str(v) for v in placed_values))
                return None, f"PodGroup {key}: its placed pods are not in one {tk} domain ({shown})"
            dom = Domain(tk, placed_values.pop())
            cache.set_domain(key, dom)
            return dom, ""
        dom = cache.domain(key)
        if dom is not None and dom.key == tk:
            return dom, ""
        pending = [pk for pk, m in cache.members(key).items() if not m.terminal and not m.node and not m.assumed]
        if pod.key not in pending:
            pending.append(pod.key)
        items = [dict(cache.requests.get(pk) or (pod.requests if pk == pod.key else {})) for pk in pending]
        quorum = max(pg.min_member - cache.counts(key).assigned, 1) if pg.gang else 1
        held: dict[str, list[dict[str, int]]] = {}
        for other, d in cache.domains().items():
            if other != key and d.key == tk:
                held.setdefault(d.value, []).extend(
                    cache.requests.get(pk) or {} for pk, m in cache.members(other).items()
                    if not m.terminal and not m.node and not m.assumed)
        fit = choose_domain(nodes, tk, items, quorum, eligible_rows(nodes, pod), held)
        if fit.domain is None:
            if fit.candidates == 0:
                return None, f"PodGroup {key}: no node the pod may use has the label {tk}"
            largest = f"{tk}={fit.largest} with {_amounts(fit.largest_free)} free"
            if any(held.values()):
                largest += " (counting the pods of other groups already headed there)"
            return None, (f"PodGroup {key}: no single {tk} domain can hold the group's {fit.pods} pods "
                          f"({_amounts(fit.need)}); the largest is {largest}")
        cache.set_domain(key, fit.domain)
        return fit.domain, ""

    # ------------------------------------------------------------------ Permit
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        key = native_group_key(pod)
        if key is None:
            return Status.success(), 0.0
        pg = self.cache.groups.get(key)
        if pg is None:
            return Status(Code.UNSCHEDULABLE, (f"PodGroup {key} not found",)), 0.0
        if not pg.gang:
            return Status.success(), 0.0
        c = self.cache.counts(key)
        if self.cache.permitted(key) or c.assigned >= pg.min_member:
            self.cache.permit(key)
            for wp in self._waiting(key):
                wp.allow(NAME)
            return Status.success(), 0.0
        # upstream: every waiting member activates the group's pods that are not placed yet
        members = self.cache.members(key)
        self.handle.activate_pods([k for k, m in members.items()
                                   if k != pod.key and not m.node and not m.assumed and not m.terminal])
        return Status(Code.WAIT, ("waiting for minCount pods from a gang to be scheduled",)), PERMIT_TIMEOUT_SECONDS

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.NATIVE_POD_GROUP,
                                              ActionType.ADD | ActionType.UPDATE | ActionType.DELETE),
                                 membership_hint(native_group_key)),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE),
                                 not_own_release(native_group_key)),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE
                                              | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT)),
        ]


def go_quote(s: str) -> str:
    """Go's %q of a plain string (a PodGroup name is a DNS subdomain: only the quotes matter)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unresolvable(msg: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,))


PLUGIN = GangScheduling
