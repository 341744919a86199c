"""A snapshot as the engine holds the cluster: a ClusterState (cache/state.py) filled from the
snapshot's objects through the same ``apply_*`` methods the operator's informers call (nodes,
bound pods, namespaces, Services and controllers for default spreading, PDBs, the storage
objects the volume plugins read), the policies built by the operator's own PolicyStore (the same
parsing, validation and chain building as ``policy-scheduler run``), and the operator's own
Handle over them (cache/handle.py StateHandle), with no Actions: nothing is written.

Metrics go through the operator's Prometheus source too: each policy's source is refreshed once
with a query function that answers from the snapshot's samples, and its clock is the snapshot's
time, so a value is fresh, stale or missing exactly as it was when the snapshot was taken.

PodGroups (scheduling.k8s.io) go into the state's GangScheduling cache as the operator's
informers put them there (``ClusterState.apply_native_pod_group``), and so do their members: every
pod naming a group, bound or pending, is handed to the cache as the operator's pod informer hands
it (``NativePodGroupCache.on_pod``, which ``ClusterState.apply_pod`` calls first for such pods).
The cache holds reservations and rejections, so each simulation starts from a fresh one
(``fresh_groups``). A PodGroup the cache cannot read is reported (``warnings``) and skipped.

The plugins' Handle is the operator's own over the state (``StateHandle``) without Actions, but
for the two requests a queue answers: ``activate_pods`` moves the pods in the simulation's queue
(``World.queue``, set by simulate.py while it runs) and ``pod_event`` keeps the last event
message of each pod (``World.events``: PreEnqueue's "waiting for ..." messages).
"""

from __future__ import annotations

import copy
import logging
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..cache.handle import StateHandle
from ..cache.policies import PolicyState, PolicyStore
from ..cache.state import DRA_KINDS, VOLUME_KINDS, ClusterState
from ..cache.workloads import WorkloadIndex
from ..framework.model.nodetable import NodeSpec, NodeTable
from ..framework.model.podinfo import PodInfo, parse_pod
from ..framework.registry import Registry
from ..plugins.dynamicresources.cache import DraCache
from ..plugins.volumes.cache import VolumeCache
from ..metricsources.prometheus import PrometheusMetricSources
from .snapshot import Snapshot, rfc3339

log = logging.getLogger("policy_scheduler.whatif")

POLICY_KINDS = ("SchedulingPolicy",)


class PolicyError(ValueError):
    """A policy that cannot be simulated; the message is the admission webhook's."""


class SnapshotMetricSources(PrometheusMetricSources):
    """The operator's per-policy Prometheus sources, answered from a snapshot's samples at the
    snapshot's time."""

    def __init__(self, snapshot: Snapshot, registry: Registry | None = None) -> None:
        self.snapshot_samples = snapshot.samples()
        super().__init__(None, registry=registry, query_fn=self._answer, clock=lambda: snapshot.taken_at)

    def _answer(self, address: str, query: str, timeout: float) -> list:
        """An instant-query result (Prometheus's JSON shape) for every key with this query."""
        out = []
        for (q, label), per_node in self.snapshot_samples.items():
            if q != query:
                continue
            out.extend({"metric": {label: node}, "value": [t, repr(v)]} for node, (v, t) in per_node.items())
        return out

    async def refresh_all(self) -> None:
        for src in self.sources.values():
            await src.refresh(self.query_fn)


class SimHandle(StateHandle):
    """The operator's Handle over the world's state, whose queue requests go to the simulation."""

    def __init__(self, world: "World", *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.world = world

    def activate_pods(self, keys: Sequence[str]) -> int:
        return self.world.activate(keys)

    def pod_event(self, pod: PodInfo, reason: str, message: str) -> None:
        self.world.events[pod.key] = message


class World:
    """Everything the engine would hold for a snapshot, ready to schedule on."""

    def __init__(self, snapshot: Snapshot, registry: Registry | None = None, *,
                 nodes: list[NodeSpec] | None = None, bound: list[tuple[PodInfo, str]] | None = None,
                 workloads: WorkloadIndex | None = None, volumes: VolumeCache | None = None) -> None:
        """``nodes``, ``bound``, ``workloads`` and ``volumes``, when given, are the engine's own
        state (parsed already) instead of the snapshot's lists: the tuner replays the operator's
        state without a round trip through JSON."""
        self.snapshot = snapshot
        self.state = state = ClusterState()
        for name, labels in snapshot.namespaces.items():
            state.apply_namespace("ADDED", {"metadata": {"name": name, "labels": labels}})
        if workloads is not None:
            state.workloads = workloads
        for kind, bodies in (("services", snapshot.services), ("replicationcontrollers",
                                                                snapshot.replication_controllers),
                             ("replicasets", snapshot.replica_sets), ("statefulsets", snapshot.stateful_sets)):
            for body in bodies:
                state.apply_workload(kind, "ADDED", body)
        for body in snapshot.pod_disruption_budgets:
            state.apply_pdb("ADDED", body)
        self.sources = SnapshotMetricSources(snapshot, registry)
        self.queue = None  # the simulation's SchedulingQueue while one runs (activate_pods)
        self.events: dict[str, str] = {}  # pod key -> the last event message a plugin sent about it
        self.warnings: list[str] = list(snapshot.warnings)  # objects skipped, each reported on itself
        self.composite_pod_groups = list(snapshot.composite_pod_groups)
        self.store = PolicyStore(self.sources, lambda name: SimHandle(self, state, self.store, self.sources, name),
                                 registry=registry, namespaces=state.namespaces,
                                 scheduler_name=snapshot.scheduler_name, default_policy=snapshot.default_policy)
        for body in snapshot.policies:
            self.store.on_policy("ADDED", self._ours(body))
        self.node_specs = [NodeSpec.from_dict(n) for n in snapshot.nodes] + list(nodes or ())
        # PVs, PVCs, StorageClasses, CSINodes, CSIDrivers; VolumeBinding's Reserve assumes PV/PVC
        # copies in them, so each simulation starts from a fresh copy (fresh_volumes)
        self._volumes_given = volumes
        self.bound: list[tuple[PodInfo, str]] = list(bound or ())
        for p in snapshot.pods:
            info = parse_pod(p)
            info.raw = None  # as the engine: nothing reads a bound pod's object
            self.bound.append((info, info.node_name))
        # bound pods naming a PodGroup: members the GangScheduling cache counts as bound
        self._bound_members = [p for p in snapshot.pods if _names_group(p)]
        self.fresh_volumes()
        self.fresh_groups()

    @property
    def namespaces(self) -> dict[str, dict[str, str]]:
        return self.state.namespaces

    @property
    def workloads(self) -> WorkloadIndex:
        return self.state.workloads

    @property
    def waiting(self):
        return self.state.waiting

    @property
    def volumes(self) -> VolumeCache:
        return self.state.volumes

    def _ours(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The policy as this snapshot's scheduler would own it (a policy file written for another
        --scheduler-name is simulated all the same)."""
        body = copy.deepcopy(dict(body))
        spec = body.get("spec")
        if isinstance(spec, dict):
            spec["schedulerName"] = self.snapshot.scheduler_name
        return body

    # ------------------------------------------------------------------ policies
    def policy_names(self) -> list[str]:
        return sorted(self.store.policies)

    def add_policy(self, body: Mapping[str, Any], source: str) -> str:
        """A policy from a file: validated exactly as the admission webhook validates it (the
        same field-named errors), then loaded like a watch event, replacing a snapshot policy of
        the same name. Returns its name."""
        if not isinstance(body, Mapping):
            raise PolicyError(f"{source}: not a SchedulingPolicy: a YAML/JSON object is expected")
        kind = body.get("kind")
        if kind not in POLICY_KINDS:
            raise PolicyError(f"{source}: kind {kind!r} is not a SchedulingPolicy")
        name = (body.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            raise PolicyError(f"{source}: metadata.name: Required value")
        errors = self.store.validate((body.get("spec")))
        if errors:
            raise PolicyError(f'{source}: SchedulingPolicy "{name}" is invalid: ' + "; ".join(errors))
        ours = self._ours(body)
        ours.setdefault("metadata", {})["generation"] = int((body.get("metadata") or {}).get("generation") or 0) + 1
        self.store.on_policy("ADDED", ours)
        return name

    def usable_policy(self, name: str) -> PolicyState:
        """The policy named ``name`` with a chain to schedule with; PolicyError says why not."""
        st = self.store.policies.get(name)
        if st is None:
            known = ", ".join(self.policy_names()) or "none"
            raise PolicyError(f"no SchedulingPolicy named {name!r} in the snapshot (it has: {known})")
        if st.chain is None or st.errors:
            raise PolicyError(f'SchedulingPolicy "{name}" is invalid: ' + "; ".join(st.errors))
        return st

    async def prepare(self) -> None:
        """Publish the snapshot's metric values to every policy's source (call once the
        simulated policies are added)."""
        await self.sources.refresh_all()

    # ------------------------------------------------------------------ the state
    def table(self) -> NodeTable:
        """A fresh NodeTable in the state: every node and every bound pod of the snapshot."""
        self.state.load(self.node_specs, self.bound)
        return self.state.table

    def fresh_volumes(self) -> None:
        """The snapshot's storage and DRA objects again, without the assumptions (PV/PVC copies,
        in-flight device allocations) of an earlier run."""
        self.state.dra = DraCache()
        for kind in DRA_KINDS:
            for body in self.snapshot.dra.get(kind, ()):
                self.state.apply_dra(kind, "ADDED", body)
        given = self._volumes_given
        if given is not None:
            self.state.volumes = copy.deepcopy(given)
            return
        self.state.volumes = VolumeCache()
        for kind in VOLUME_KINDS:
            for body in self.snapshot.volumes.get(kind, ()):
                self.state.apply_volume(kind, "ADDED", body)

    def fresh_groups(self, pending: Iterable[Mapping[str, Any]] = (), clock: Callable[[], float] | None = None) -> None:
        """The GangScheduling cache again, as the operator's informers fill it: the snapshot's
        PodGroups, then its bound pods and ``pending`` (the pods to place) that name one, without
        the reservations and rejections of an earlier run. ``clock``: the simulation's (group
        backoffs); condition times are the snapshot's time. The cache object is kept (the plugins
        hold it): it is emptied in place."""
        cache = self.state.native_pod_groups
        taken = rfc3339(self.snapshot.taken_at)
        type(cache).__init__(cache, clock=clock or time.monotonic, wall=lambda: taken)
        reported = set(self.warnings)
        for body in self.snapshot.pod_groups:
            try:
                self.state.apply_native_pod_group("ADDED", body)
            except Exception as e:  # a snapshot built in code, not checked at loading: skip it, say so
                meta = body.get("metadata") or {} if isinstance(body, Mapping) else {}
                msg = (f"PodGroup {meta.get('namespace') or 'default'}/{meta.get('name')}: cannot be read: "
                       f"{type(e).__name__}: {e}; skipped")
                if msg not in reported:
                    self.warnings.append(msg)
                    reported.add(msg)
        for body in (*self._bound_members, *pending):
            meta = body.get("metadata") or {}
            key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
            if cache.tracks_pod(key, body):
                try:
                    cache.on_pod("ADDED", body)
                except Exception as e:  # the pod's own problem is its cycle's to report
                    log.debug("pod %s not counted in its PodGroup: %s", key, e)

    def activate(self, keys: Sequence[str]) -> int:
        """upstream PodsToActivate, as the engine's: the queued pods among ``keys`` go to activeQ."""
        q = self.queue
        if q is None:
            return 0
        return q.activate([k for k in keys if k in q])

    def admits(self, st: PolicyState, namespace: str) -> bool:
        """The policy's namespaceSelector (PolicyStore.resolve_policy's check)."""
        return st.namespace_selector is None or st.namespace_selector.matches(self.namespaces.get(namespace, {}))

    def add_workloads(self, objects: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """Controllers the simulated pods belong to (kind "rs", "ss" or "rc"), so that default
        spreading selects them as it would the real ones."""
        for kind, body in objects:
            self.state.apply_workload({"rs": "replicasets", "ss": "statefulsets", "rc": "replicationcontrollers"}[kind],
                                      "ADDED", body)



def _names_group(body: Any) -> bool:
    spec = body.get("spec") if isinstance(body, Mapping) else None
    group = spec.get("schedulingGroup") if isinstance(spec, Mapping) else None
    return isinstance(group, Mapping) and bool(group.get("podGroupName"))
