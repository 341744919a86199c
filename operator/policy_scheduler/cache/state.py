"""The cluster state: everything plugins read of the cluster, fed by watch objects, and what each
change means for the pods that wait.

upstream: ``pkg/scheduler/backend/cache`` (the Cache interface's Assume/Forget/Add/Update/Remove
state machine, ``interface.go``) together with the listers the plugins read, while
``eventhandlers.go`` only routes. Here ``ClusterState`` holds the node table (nodes and the pods
counted on them, assumed, bound or terminating), namespaces, workload selectors, PodDisruption-
Budgets, storage objects, the PodGroups of both APIs and the pods parked by Permit. Each
``apply_*`` method takes one watch event (``ADDED``/``MODIFIED``/``DELETED`` and the object as a
dict), updates the state and returns the cluster events the change produced, as
``(ClusterEvent, old, new)`` triples for the queue's hints (framework/events.py).

The operator's engine (cluster/engine.py) routes its informers here and hands the events to the
queue; what-if (whatif/world.py) fills a ClusterState from a snapshot through the same methods.
Both schedule through one Handle over it (cache/handle.py) and assume, Reserve and Permit through
``reserve`` below, so the two cannot drift apart.

Pure: no client, no tasks, no clock of its own.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import replace
from typing import Any, Iterable, Mapping, NamedTuple

from ..framework.cycle.binding_cycle import run_permit, run_reserve, run_unreserve
from ..framework.cycle.chain import Chain
from ..framework.events import (ASSIGNED_POD_ADD, ASSIGNED_POD_DELETE, NAMESPACE_LABELS, NODE_ADD, NODE_DELETE,
                                ClusterEvent, NamespaceChange, node_change_events, pod_change_events)
from ..framework.interface import CycleState
from ..plugins.podgroups.native_cache import GROUP as NATIVE_GROUP, NativePodGroupCache
from ..framework.model.nodetable import NodeSpec, NodeTable
from ..plugins.podgroups.cache import PodGroupCache
from ..framework.model.podinfo import PodInfo, parse_pod
from ..framework.model.podrequests import PodSpecError, pod_requests_of
from ..framework.preemption import PDB
from ..framework.status import Status
from ..plugins.dynamicresources.objects import KINDS as DRA_KIND_NAMES, PATHS as DRA_PATHS
from ..plugins.dynamicresources.cache import DraCache
from ..plugins.volumes.cache import VolumeCache
from ..framework.waiting import WaitingPods
from .workloads import WorkloadIndex

log = logging.getLogger("policy_scheduler")

Change = tuple[ClusterEvent, Any, Any]  # a cluster event with the object before and after

# what a pod watch event turned out to be (PodChange.outcome)
GONE = "gone"  # deleted, or finished on its node: no longer pending, no longer counted
ASSIGNED = "assigned"  # bound to a node: counted there, no longer pending
PENDING = "pending"  # not bound, not being deleted, not assumed by us: the queue's business
IGNORED = "ignored"  # unbound but being deleted, or our own binding of it is in flight


class PodChange(NamedTuple):
    """What ``apply_pod`` made of a pod event: the outcome, and the cluster events in order."""

    outcome: str
    changes: list[Change]


def same_requests(old: PodInfo, spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether a new version of a counted pod (its spec and status) asks for what ``old`` holds:
    an in-place resize (spec) or the kubelet allocating or actuating one (status) changes it."""
    try:
        pr = pod_requests_of(spec, status if isinstance(status, Mapping) else None)
    except (PodSpecError, TypeError, ValueError, AttributeError):
        return old.parse_error is not None  # still malformed: nothing new to count
    return (pr.requests == old.requests and pr.nonzero_cpu == old.nonzero_cpu
            and pr.nonzero_memory == old.nonzero_memory and pr.spec_requests == old.spec_only
            and pr.fit_score == old.fit_score)


class ClusterState:
    """The plugin-visible state of the cluster, one copy for the operator and what-if alike."""

    def __init__(self, table: NodeTable | None = None) -> None:
        self.table = table if table is not None else NodeTable()
        self.namespaces: dict[str, dict[str, str]] = {}  # name -> labels
        self.workloads = WorkloadIndex()  # Services and controllers: system default spreading
        self.pdbs: dict[str, PDB] = {}  # namespace/name -> what DefaultPreemption reads of it
        # PVs, PVCs, StorageClasses, CSINodes, CSIDrivers: what the volume plugins read
        self.volumes = VolumeCache()
        # DeviceClasses, ResourceSlices, ResourceClaims: what DynamicResources reads
        self.dra = DraCache()
        # scheduler-plugins' PodGroups and their members: what Coscheduling reads
        self.pod_groups = PodGroupCache()
        # Kubernetes' own PodGroups (scheduling.k8s.io) and their members: what GangScheduling reads
        self.native_pod_groups = NativePodGroupCache()
        self.waiting = WaitingPods()  # pods parked by Permit, shared by every policy
        # (key, uid) of preemption victims whose DELETE succeeded, until their DELETED event: a late
        # watch event of an older version does not make them look alive again (mark_terminating)
        self.deleted_victims: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ nodes
    def apply_node(self, event: str, body: Mapping[str, Any]) -> list[Change]:
        """A Node: added, updated per changed aspect (framework/events.node_change_events), or
        deleted. A heartbeat that changes nothing the scheduler reads produces nothing."""
        name = (body.get("metadata") or {}).get("name", "")
        table = self.table
        row = table.index.get(name)
        if event == "DELETED":
            old = table.specs[row] if row is not None else None
            table.remove_node(name)
            self.capacity_changed()
            return [] if old is None else [(NODE_DELETE, old, None)]
        spec = NodeSpec.from_dict(body)
        if row is None:
            table.upsert_node(spec)
            self.capacity_changed()
            return [(NODE_ADD, None, spec)]
        old = table.specs[row]
        events = node_change_events(old, spec)
        if not events and old.images.keys() == spec.images.keys():
            return []  # a heartbeat
        table.upsert_node(spec)
        if events:
            self.capacity_changed()
        return [(ev, old, spec) for ev in events]

    def capacity_changed(self) -> None:
        """Room may have been freed or added: groups waiting as one (either API) may try again."""
        self.pod_groups.capacity_changed()
        self.native_pod_groups.capacity_changed()

    # ------------------------------------------------------------------ namespaces
    def apply_namespace(self, event: str, body: Mapping[str, Any]) -> list[Change]:
        """A Namespace: its labels (policies' and affinity terms' namespaceSelectors). The change
        carries a NamespaceChange with the labels before and after."""
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        if event == "DELETED":
            self.namespaces.pop(name, None)
            return []
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        old = self.namespaces.get(name)
        if old == labels:
            return []
        self.namespaces[name] = labels
        return [(NAMESPACE_LABELS, None, NamespaceChange(name, old, labels))]

    # ------------------------------------------------------------------ pods
    def apply_pod(self, event: str, body: Mapping[str, Any]) -> PodChange:
        """A Pod. A bound pod is counted on its node (our own binding coming back confirms the
        assumption); a deleted or finished one is removed, its room freed, its Permit wait
        rejected. PodGroup members update their group first (PreEnqueue reads the counts), and
        the group's events come after the pod's own."""
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        caches = [g for g in (self.pod_groups, self.native_pod_groups) if g.tracks_pod(key, body)]
        pod_node = self.table.pod_node
        if not caches:
            had = key in pod_node
            result = self._apply_pod(event, body, meta, key)
            if had and key not in pod_node:
                self.capacity_changed()  # its room is free: groups waiting as one may try again
            return result
        causes = {id(g): g.group_of(key) for g in caches}
        group_changes = [ch for g in caches for ch in g.on_pod(event, body)]
        had = key in pod_node
        result = self._apply_pod(event, body, meta, key)
        if had and key not in pod_node:
            for g in (self.pod_groups, self.native_pod_groups):
                g.capacity_changed(causes.get(id(g)))  # its own group's release cannot help that group
        result.changes.extend(group_changes)
        return result

    def _apply_pod(self, event: str, body: Mapping[str, Any], meta: Mapping[str, Any], key: str) -> PodChange:
        spec = body.get("spec") or {}
        node = spec.get("nodeName") or ""
        status = body.get("status") or {}
        table = self.table
        if event == "DELETED" or (node and status.get("phase") in ("Succeeded", "Failed")):
            uid = str(meta.get("uid") or "")
            if event == "DELETED" and uid:  # upstream: RejectWaitingPod on delete
                self.waiting.reject(uid, "", f"pod {key} was deleted")
            self.deleted_victims.discard((key, uid))
            old = table.remove_pod(key)
            return PodChange(GONE, [] if old is None else [(ASSIGNED_POD_DELETE, old, None)])
        if not node:
            if meta.get("deletionTimestamp") or key in table.assumed:
                return PodChange(IGNORED, [])  # being deleted, or our binding of it is in flight
            return PodChange(PENDING, [])
        if table.node_of(key) == node:
            old = table.pod(key)
            labels = meta.get("labels") or {}
            # what preemption reads of a bound pod: its start time, and whether it is terminating
            same_life = old is not None and old.start_time == str(status.get("startTime") or "") \
                and old.terminating == (meta.get("deletionTimestamp") is not None) \
                and same_requests(old, spec, status)  # an in-place resize changes what the node holds
            if same_life and old is not None and old.uid == meta.get("uid") and old.labels == labels:
                # our own binding coming back (confirm the assumption), or a status update of a
                # pod already counted: nothing the state holds changed, no need to parse it again
                if key in table.assumed:
                    table.confirm(key)
                    old.raw = None
                    return PodChange(ASSIGNED, [(ASSIGNED_POD_ADD, None, old)])  # bound now
                return PodChange(ASSIGNED, [])
            if (same_life and old is not None and old.uid == meta.get("uid") and not old.spread_constraints
                    and not meta.get("deletionTimestamp")):
                # only the labels changed (the API server copies the node's topology labels onto
                # a pod it binds): nothing else derives from them unless spread constraints merge
                # matchLabelKeys, so the parsed pod is kept with the new labels
                confirmed = key in table.assumed
                new = replace(old, labels=dict(labels), node_name=node, raw=None)
                table.add_pod(new, node)
                if confirmed:
                    return PodChange(ASSIGNED, [(ASSIGNED_POD_ADD, None, new)])
                return PodChange(ASSIGNED, [(ev, old, new) for ev in pod_change_events(old, new, target=False)])
        prev = table.pod(key)
        was_assumed = key in table.assumed
        info = parse_pod(body)
        info.raw = None  # nothing reads a bound pod's object: do not keep managedFields & co.
        if not info.terminating and (key, info.uid) in self.deleted_victims:
            # a version older than our DELETE (e.g. its DisruptionTarget condition), seen late
            info.terminating = info.terminating_by_preemption = True
        table.add_pod(info, node)  # replaces an assumption: now confirmed
        if prev is None or was_assumed or prev.uid != info.uid:
            return PodChange(ASSIGNED, [(ASSIGNED_POD_ADD, None, info)])
        return PodChange(ASSIGNED, [(ev, prev, info) for ev in pod_change_events(prev, info, target=False)])

    # ------------------------------------------------------------------ other kinds
    def apply_pdb(self, event: str, body: Mapping[str, Any]) -> list[Change]:
        """A PodDisruptionBudget (DefaultPreemption's victims). No plugin waits on one."""
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        if event == "DELETED":
            self.pdbs.pop(key, None)
        else:
            self.pdbs[key] = PDB.from_dict(body)
        return []

    def apply_pod_group(self, event: str, body: Mapping[str, Any]) -> list[Change]:
        """A scheduler-plugins PodGroup (Coscheduling)."""
        return _apply_group(self.pod_groups, "", event, body)

    def apply_native_pod_group(self, event: str, body: Mapping[str, Any]) -> list[Change]:
        """A scheduling.k8s.io PodGroup (GangScheduling)."""
        return _apply_group(self.native_pod_groups, f" ({NATIVE_GROUP})", event, body)

    def apply_composite_pod_group(self, event: str, body: Mapping[str, Any]) -> list[Change]:
        """A scheduling.k8s.io/v1alpha3 CompositePodGroup (GangScheduling's hierarchies)."""
        try:
            return self.native_pod_groups.apply_composite(event, body)
        except ValueError as e:
            meta = body.get("metadata") or {}
            log.warning("CompositePodGroup %s/%s ignored: %s", meta.get("namespace"), meta.get("name"), e)
            return []

    def apply_volume(self, kind: str, event: str, body: Mapping[str, Any]) -> list[Change]:
        """A storage object of VolumeCache ``kind`` (VolumeBinding and co. registered its events)."""
        try:
            return self.volumes.apply(kind, event, body)
        except (ValueError, TypeError, KeyError) as e:  # one bad object must not stop the informer
            meta = body.get("metadata") or {}
            log.warning("%s %s ignored: %s", kind, meta.get("name"), e)
            return []

    def apply_dra(self, kind: str, event: str, body: Mapping[str, Any]) -> list[Change]:
        """A DRA object of DraCache ``kind`` (DynamicResources registered its events)."""
        try:
            return self.dra.apply(kind, event, body)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
            # one bad object must not stop the informer
            meta = (body.get("metadata") or {}) if isinstance(body, Mapping) else {}
            log.warning("%s %s ignored: %s", kind, meta.get("name"), e)
            return []

    def apply_workload(self, kind: str, event: str, body: Mapping[str, Any]) -> list[Change]:
        """A Service, ReplicationController, ReplicaSet or StatefulSet (``kind`` as in KINDS):
        the selectors PodTopologySpread's system default constraints read. No event."""
        w = self.workloads
        {"services": w.on_service, "replicationcontrollers": w.on_replication_controller,
         "replicasets": w.on_replica_set, "statefulsets": w.on_stateful_set}[kind](event, body)
        return []

    # ------------------------------------------------------------------ assume, Reserve, Permit
    def assume(self, pod: PodInfo, node: str) -> PodInfo:
        """upstream Cache.AssumePod: a copy with spec.nodeName set counts on the node (and is what
        hints see); the queued pod keeps no node, in case it comes back."""
        assumed = copy.copy(pod)
        assumed.node_name = node
        self.table.add_pod(assumed, node, assumed=True)
        return assumed

    def forget(self, key: str) -> None:
        """upstream Cache.ForgetPod: drop an assumption (a binding that failed or was not needed)."""
        if key in self.table.assumed:
            self.table.remove_pod(key)

    def reserve(self, chain: Chain, state: CycleState, pod: PodInfo, node: str) -> tuple[PodInfo, Status]:
        """The end of the scheduling cycle (upstream schedulingCycle after SchedulePod): assume,
        Reserve, Permit. Returns the assumed copy and the status: Success, Wait (parked at
        Permit), or a failure, after which the caller runs ``unreserve``."""
        assumed = self.assume(pod, node)
        status = run_reserve(chain, state, pod, node)
        if status.is_success:
            status = run_permit(chain, state, pod, node, self.waiting)
        return assumed, status

    def unreserve(self, chain: Chain, state: CycleState, pod: PodInfo, node: str) -> None:
        """Undo ``reserve``: Unreserve on every Reserve plugin in reverse order, then forget."""
        run_unreserve(chain, state, pod, node)
        self.forget(pod.key)

    # ------------------------------------------------------------------ preemption victims
    def mark_terminating(self, victim: PodInfo) -> None:
        """The API server has the victim terminating (or gone): so does the state, before its watch
        event arrives, which may lag seconds behind in a burst. Until then the victim still counts
        on the node, and a preemptor tried meanwhile waits for it (PodEligibleToPreemptOthers)
        instead of preempting the same pod again."""
        cached = self.table.pod(victim.key)
        if cached is not None and cached.uid == victim.uid:
            self.deleted_victims.add((victim.key, victim.uid))  # until its DELETED event
            if not cached.terminating:
                cached.terminating = cached.terminating_by_preemption = True

    def victim_gone(self, key: str) -> bool:
        """The victim no longer counts as running: gone from the state, or terminating."""
        victim = self.table.pod(key)
        return victim is None or victim.terminating

    # ------------------------------------------------------------------ what-if
    def load(self, nodes: Iterable[NodeSpec], bound: Iterable[tuple[PodInfo, str]]) -> None:
        """A table of parsed nodes and bound pods at once (a snapshot, or the operator's own
        table copied for the tuner), replacing the current one."""
        nodes = list(nodes)
        t = NodeTable(capacity=max(len(nodes), 1))
        for spec in nodes:
            t.upsert_node(spec)
        for info, node in bound:
            t.add_pod(info, node)
        self.table = t


def _apply_group(cache: PodGroupCache | NativePodGroupCache, api: str, event: str,
                 body: Mapping[str, Any]) -> list[Change]:
    """A PodGroup event into its cache; a spec the scheduler cannot use counts as absent."""
    try:
        return cache.apply(event, body)
    except ValueError as e:
        meta = body.get("metadata") or {}
        log.warning("PodGroup %s/%s%s ignored: %s", meta.get("namespace"), meta.get("name"), api, e)
        return []


# The kinds that feed the state, with the API path each is listed and watched from and the
# ClusterState method that applies one event of it. The operator's informers (cluster/engine.py)
# and what-if's snapshot (whatif/snapshot.py) both read this table. Pods, nodes and namespaces are
# routed by the engine itself (pending pods go to the queue); PodGroups are optional (CRD or gate).
KINDS: dict[str, str] = {
    "nodes": "/api/v1/nodes",
    "namespaces": "/api/v1/namespaces",
    "pods": "/api/v1/pods",
    # the Services and controllers selecting a pod drive PodTopologySpread's default constraints
    "services": "/api/v1/services",
    "replicationcontrollers": "/api/v1/replicationcontrollers",
    "replicasets": "/apis/apps/v1/replicasets",
    "statefulsets": "/apis/apps/v1/statefulsets",
    # DefaultPreemption spares pods whose PodDisruptionBudget allows no more disruptions
    "poddisruptionbudgets": "/apis/policy/v1/poddisruptionbudgets",
    # the volume plugins: claims and volumes (VolumeBinding, VolumeZone, VolumeRestrictions),
    # classes (binding mode, provisioning topology), CSI attach limits (NodeVolumeLimits)
    "persistentvolumes": "/api/v1/persistentvolumes",
    "persistentvolumeclaims": "/api/v1/persistentvolumeclaims",
    "storageclasses": "/apis/storage.k8s.io/v1/storageclasses",
    "csinodes": "/apis/storage.k8s.io/v1/csinodes",
    "csidrivers": "/apis/storage.k8s.io/v1/csidrivers",
}
WORKLOAD_KINDS = ("services", "replicationcontrollers", "replicasets", "statefulsets")
VOLUME_KINDS = ("persistentvolumes", "persistentvolumeclaims", "storageclasses", "csinodes", "csidrivers")
# DRA (resource.k8s.io/v1): optional informers, like the PodGroups (an API server without the
# group, or RBAC without it, leaves DynamicResources' cache empty instead of stopping the sync)
DRA_KINDS: dict[str, str] = {k: DRA_PATHS[k] for k in DRA_KIND_NAMES}
