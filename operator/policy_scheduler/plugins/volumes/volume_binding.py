"""VolumeBinding (upstream plugins/volumebinding/{volume_binding.go,binder.go,scorer.go}, v1.37).

PreFilter: a pod without persistentVolumeClaim or ephemeral volumes is Skipped (nothing else
runs for it). A claim missing from the cache, Lost, being deleted, or an ephemeral claim the pod
does not control rejects the pod UnschedulableAndUnresolvable with upstream's text. Claims are
sorted into bound (volumeName set and ``pv.kubernetes.io/bind-completed``), delayed (unbound,
class WaitForFirstConsumer, no volumeName) and immediate (the rest: an unbound claim of an
Immediate, missing or no class, or one pre-bound by volumeName but not completed); any
immediate claim rejects the pod with ``pod has unbound immediate PersistentVolumeClaims``. A
class without volumeBindingMode is an Error.

Filter (per node, UnschedulableAndUnresolvable, every applicable reason, upstream's order):
a bound claim's PV must exist and its node affinity match the node's labels; a delayed claim
with ``volume.kubernetes.io/selected-node`` fits that node only; the other delayed claims
(smallest request first) each take the smallest available PV of their class that fits
(capacity, volume mode, claimRef free or naming the claim, phase Available, selector, access
modes, node affinity), or else must be provisionable there (a provisioner other than
``kubernetes.io/no-provisioner``, the class's allowedTopologies matching the node). What was
found per node is kept in the CycleState for Reserve.

Score (StorageCapacityScoring, beta and on in v1.37): for nodes with static bindings, per class
requested/capacity utilization through ``shape`` (default (0,10),(100,0): emptier PVs score
higher), averaged over classes. PreScore Skips pods without static bindings on any node (their
score is 0 everywhere: we keep no CSIStorageCapacity).

Reserve assumes the node's findings in ``Handle.volumes()`` (PVs with claimRef, PVCs with the
selected-node annotation), so the next pod does not take the same PV; Unreserve reverts them.
PreBind PUTs each statically bound PV and each PVC to provision through ``Handle.api_request``,
then polls the volume cache every second until every claim is fully bound, for at most
``bindTimeoutSeconds``: ``binding volumes: context deadline exceeded`` (an Error) after that.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from ...framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ...framework.interface import (
    MAX_NODE_SCORE,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    FilterResult,
    PluginArgs,
    PreBindPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from ...framework.model.nodetable import NodeTable
from ...framework.model.podinfo import PodInfo
from ...framework.model.resources import (MAX_CUSTOM_PRIORITY_SCORE, MAX_UTILIZATION, UtilizationShapePoint,
                                         broken_linear, shape_errors)
from ...framework.status import Code, Status
from ...framework.validation import MAX_SHAPE_POINTS, invalid, raise_if
from .binder import (all_bound, bind_volume_to_claim, check_bindings, find_matching_volume, is_delay_binding_mode,
                     resource_version, with_selected_node)
from .cache import AssumeError, VolumeCache
from .objects import CLAIM_LOST, NO_PROVISIONER, PersistentVolume, PersistentVolumeClaim, StorageClass

NAME = "VolumeBinding"
STATE_KEY = NAME  # CycleState: VolumeBindingState

ERR_REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"  # needs CSIStorageCapacity: never given
ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

POLL_INTERVAL_SECONDS = 1.0  # upstream BindPodVolumes polls checkBindings every second
DEFAULT_SHAPE = ((0, 10), (100, 0))


# ---------------------------------------------------------------------------- args
class VolumeBindingArgs(PluginArgs):
    """KubeSchedulerConfiguration VolumeBindingArgs (v1), with StorageCapacityScoring on:
    ``shape`` defaults to (0, 10), (100, 0) when empty."""

    bind_timeout_seconds: int = Field(default=600, alias="bindTimeoutSeconds")
    shape: list[UtilizationShapePoint] = Field(default_factory=list, max_length=MAX_SHAPE_POINTS)

    @model_validator(mode="after")
    def _default_and_validate(self) -> "VolumeBindingArgs":
        if not self.shape:
            self.shape = [UtilizationShapePoint(utilization=u, score=s) for u, s in DEFAULT_SHAPE]
        errs = []
        if self.bind_timeout_seconds < 0:
            errs.append(invalid("bindTimeoutSeconds", self.bind_timeout_seconds,
                                "invalid BindTimeoutSeconds, should not be a negative value"))
        errs += shape_errors(self.shape, "shape")
        raise_if(errs)
        return self




# ---------------------------------------------------------------------------- state
@dataclass(slots=True)
class PodVolumes:
    """What Filter found for one node: (claim, PV) static bindings and claims to provision."""

    static_bindings: list[tuple[PersistentVolumeClaim, PersistentVolume]] = field(default_factory=list)
    dynamic_provisions: list[PersistentVolumeClaim] = field(default_factory=list)
    node_labels: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class VolumeBindingState:
    """CycleState under ``VolumeBinding``. ``all_bound``: set by Reserve (PreBind has nothing to
    do); ``by_node``: Filter's findings per feasible node name."""

    all_bound: bool = False
    bound: list[PersistentVolumeClaim] = field(default_factory=list)
    delayed: list[PersistentVolumeClaim] = field(default_factory=list)
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    has_static_bindings: bool = False
    # after Reserve: what PreBind writes
    bindings: list[tuple[PersistentVolumeClaim, PersistentVolume]] = field(default_factory=list)
    provisions: list[PersistentVolumeClaim] = field(default_factory=list)


class _FilterError(Exception):
    pass


def _claim_hint_names(pod: PodInfo) -> set[str]:
    return {v.claim for v in pod.volumes if v.has_claim}


class VolumeBinding(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, ReservePlugin, PreBindPlugin,
                    EnqueueExtensions):
    NAME = NAME
    Args = VolumeBindingArgs

    def __init__(self, args: VolumeBindingArgs, handle) -> None:
        super().__init__(args, handle)
        scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
        self._shape = [(p.utilization, p.score * scale) for p in args.shape]
        self.bind_timeout = float(args.bind_timeout_seconds)
        self.poll_interval = POLL_INTERVAL_SECONDS

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        add_update = ActionType.ADD | ActionType.UPDATE
        return [
            ClusterEventWithHint(ClusterEvent(Resource.STORAGE_CLASS, add_update), self.storage_class_hint),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, add_update), self.pvc_hint),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME, add_update)),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, add_update), self.csinode_hint),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_DRIVER, ActionType.UPDATE), self.csidriver_hint),
        ]

    @staticmethod
    def storage_class_hint(pod: PodInfo, old: StorageClass | None, new: StorageClass | None) -> QueueingHint:
        """Add: Queue; Update: Queue only when allowedTopologies changed."""
        if old is None or new is None:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if old.allowed_topologies != new.allowed_topologies else QueueingHint.SKIP

    @staticmethod
    def pvc_hint(pod: PodInfo, old: Any, new: PersistentVolumeClaim | None) -> QueueingHint:
        """Queue when the claim is one of the pod's (same namespace, a claim name it uses)."""
        if new is None or new.namespace != pod.namespace:
            return QueueingHint.SKIP
        return QueueingHint.QUEUE if new.name in _claim_hint_names(pod) else QueueingHint.SKIP

    @staticmethod
    def csinode_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Add: Queue; Update: Queue only when the migrated-plugins annotation changed."""
        if old is None or new is None:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if old.migrated_plugins != new.migrated_plugins else QueueingHint.SKIP

    @staticmethod
    def csidriver_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when one of the pod's inline CSI volumes uses the driver and its
        storageCapacity went from true to false."""
        if old is None or new is None:
            return QueueingHint.QUEUE
        if not any(v.csi_driver == new.name for v in pod.volumes):
            return QueueingHint.SKIP
        return QueueingHint.QUEUE if old.storage_capacity and not new.storage_capacity else QueueingHint.SKIP

    # ------------------------------------------------------------------ PreFilter
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        if not pod.volumes:  # no state: Reserve and PreBind then have nothing to do
            return Status.skip(), None
        claims = [v for v in pod.volumes if v.has_claim]
        if not claims:
            return Status.skip(), None
        cache = self.handle.volumes()
        pvcs = []
        for v in claims:  # upstream podHasPVCs
            pvc = cache.pvc(pod.namespace, v.claim)
            if pvc is None:
                if v.ephemeral:
                    msg = f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{v.claim}"'
                else:
                    msg = f'persistentvolumeclaim "{v.claim}" not found'
                return Status.unschedulable(msg, unresolvable=True), None
            if pvc.phase == CLAIM_LOST:
                return Status.unschedulable(
                    f'persistentvolumeclaim "{pvc.name}" bound to non-existent persistentvolume "{pvc.volume_name}"',
                    unresolvable=True), None
            if pvc.deleting:
                return Status.unschedulable(f'persistentvolumeclaim "{pvc.name}" is being deleted',
                                            unresolvable=True), None
            if v.ephemeral and pvc.controller_uid != pod.uid:
                return Status.unschedulable(
                    f"PVC {pvc.namespace}/{pvc.name} was not created for pod {pod.namespace}/{pod.name} "
                    "(pod is not owner)", unresolvable=True), None
            pvcs.append(pvc)
        st = VolumeBindingState()
        immediate = False
        for pvc in pvcs:  # upstream GetPodVolumeClaims
            if pvc.fully_bound:
                st.bound.append(pvc)
                continue
            try:
                delay = is_delay_binding_mode(pvc, cache)
            except ValueError as e:
                return Status.error(str(e)), None
            if delay and not pvc.volume_name:
                st.delayed.append(pvc)
            else:
                immediate = True
        if immediate:
            return Status.unschedulable(ERR_UNBOUND_IMMEDIATE, unresolvable=True), None
        state.write(STATE_KEY, st)
        return Status.success(), None

    # ------------------------------------------------------------------ Filter
    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        st: VolumeBindingState | None = state.read(STATE_KEY)
        n = len(rows)
        if st is None or (not st.bound and not st.delayed):
            return FilterResult.all_pass(n)
        cache = self.handle.volumes()
        node_conflict = np.zeros(n, dtype=bool)
        bind_conflict = np.zeros(n, dtype=bool)
        pv_missing = np.zeros(n, dtype=bool)
        specs = nodes.specs
        classes = {c.storage_class: cache.pvs_of_class(c.storage_class) for c in st.delayed}  # once per call
        try:
            for i, row in enumerate(rows.tolist()):
                spec = specs[row]
                ok_bound, found, ok_unbound, pvols = self._find_pod_volumes(st, cache, spec.name, spec.labels,
                                                                            classes)
                node_conflict[i] = not ok_bound
                bind_conflict[i] = not ok_unbound
                pv_missing[i] = not found
                if ok_bound and found and ok_unbound:
                    st.by_node[spec.name] = pvols
                    if pvols.static_bindings:
                        st.has_static_bindings = True
        except _FilterError as e:
            return FilterResult(np.zeros(n, dtype=bool), error=Status.error(str(e)))
        passed = ~(node_conflict | bind_conflict | pv_missing)
        reasons = [(r, m) for r, m in ((ERR_REASON_NODE_CONFLICT, node_conflict),
                                        (ERR_REASON_BIND_CONFLICT, bind_conflict),
                                        (ERR_REASON_PV_NOT_EXIST, pv_missing)) if m.any()]
        return FilterResult(passed, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons)

    def _find_pod_volumes(self, st: VolumeBindingState, cache: VolumeCache, node_name: str,
                          labels: dict[str, str], classes: dict[str, list[PersistentVolume]]
                          ) -> tuple[bool, bool, bool, PodVolumes]:
        """upstream FindPodVolumes: (bound volumes satisfied, bound PVs found, unbound volumes
        satisfied, the node's PodVolumes). ``classes``: the PVs of each delayed claim's class."""
        pvols = PodVolumes(node_labels=labels)
        bound_ok = found = unbound_ok = True
        for pvc in st.bound:  # checkBoundClaims
            pv = cache.pv(pvc.volume_name)
            if pv is None:
                found = False
                break
            if not pv.matches_node(labels):
                bound_ok = False
                break
        if st.delayed:
            to_match, to_provision = [], []
            for pvc in st.delayed:
                selected = pvc.selected_node
                if selected is not None:
                    if selected != node_name:
                        return bound_ok, found, False, pvols  # fast path: another node was selected
                    to_provision.append(pvc)
                else:
                    to_match.append(pvc)
            if to_match:  # findMatchingVolumes
                chosen: set[str] = set()
                for pvc in sorted(to_match, key=lambda c: c.request):
                    pv = find_matching_volume(pvc, classes[pvc.storage_class], labels, chosen)
                    if pv is None:
                        to_provision.append(pvc)
                        continue
                    chosen.add(pv.name)
                    pvols.static_bindings.append((pvc, pv))
            if to_provision:  # checkVolumeProvisions
                for pvc in to_provision:
                    if not pvc.storage_class:
                        raise _FilterError(f'no class for claim "{pvc.key}"')
                    sc = cache.storage_class(pvc.storage_class)
                    if sc is None:
                        raise _FilterError(f'failed to find storage class "{pvc.storage_class}"')
                    if not sc.provisioner or sc.provisioner == NO_PROVISIONER:
                        unbound_ok = False
                        break
                    if not sc.topology_matches(labels):
                        unbound_ok = False
                        break
                    pvols.dynamic_provisions.append(pvc)
                if not unbound_ok:
                    pvols.dynamic_provisions = []
        return bound_ok, found, unbound_ok, pvols

    # ------------------------------------------------------------------ Score
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> Status:
        st: VolumeBindingState | None = state.read(STATE_KEY)
        if st is None or not st.has_static_bindings:
            return Status.skip()
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        st: VolumeBindingState | None = state.read(STATE_KEY)
        out = np.zeros(len(rows), dtype=np.int64)
        if st is None:
            return out
        for i, row in enumerate(rows.tolist()):
            pvols = st.by_node.get(nodes.names[row])
            if pvols is None or not pvols.static_bindings:
                continue
            classes: dict[str, list[int]] = {}
            for pvc, pv in pvols.static_bindings:
                acc = classes.setdefault(pv.storage_class, [0, 0])
                acc[0] += pvc.request
                acc[1] += pv.capacity
            utils = np.array([MAX_UTILIZATION if cap == 0 or req > cap else req * MAX_UTILIZATION // cap
                              for req, cap in classes.values()], dtype=np.int64)
            total = int(broken_linear(self._shape, utils).sum())
            k = len(classes)
            out[i] = (2 * total + k) // (2 * k)  # int64(math.Round(total / k)), both >= 0
        return out

    # ------------------------------------------------------------------ Reserve
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        st: VolumeBindingState | None = state.read(STATE_KEY)
        if st is None:
            return Status.success()
        pvols = st.by_node.get(node_name)
        if pvols is None:
            st.all_bound = True
            return Status.success()
        cache = self.handle.volumes()
        if all_bound(pod, cache):
            st.all_bound = True
            return Status.success()
        bindings, assumed_pvs = [], []
        for pvc, pv in pvols.static_bindings:  # AssumePodVolumes
            new_pv, dirty = bind_volume_to_claim(pv, pvc)
            if dirty:
                assumed_pvs.append(new_pv)
            bindings.append((pvc, new_pv))
        provisions = [with_selected_node(pvc, node_name) for pvc in pvols.dynamic_provisions]
        try:
            cache.assume(pod.key, assumed_pvs, provisions)
        except AssumeError as e:
            return Status.error(str(e))
        st.all_bound = False
        st.bindings = bindings
        st.provisions = provisions
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self.handle.volumes().revert(pod.key)

    # ------------------------------------------------------------------ PreBind
    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """upstream PreBindPreFlight: Skip when every claim is bound (or the pod has none),
        Success when PreBind has PVs to bind or claims to provision on ``node_name``."""
        st: VolumeBindingState | None = state.read(STATE_KEY)
        if st is None or st.all_bound:
            return Status.skip()
        if node_name not in st.by_node:
            return Status.error(f'no pod volume found for node "{node_name}"')
        return Status.success()

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        st: VolumeBindingState | None = state.read(STATE_KEY)
        if st is None or st.all_bound:
            return Status.success()
        pvols = st.by_node.get(node_name)
        if pvols is None:
            return Status.error(f'no pod volumes found for node "{node_name}"')
        cache = self.handle.volumes()
        written_pvs: list[tuple[PersistentVolumeClaim, str, str]] = []  # (claim, PV name, written version)
        written_pvcs: list[tuple[PersistentVolumeClaim, str]] = []
        try:  # bindAPIUpdate: no rollback of what was written
            for pvc, pv in st.bindings:
                resp = await self.handle.api_request("PUT", f"/api/v1/persistentvolumes/{pv.name}", pv.raw)
                written_pvs.append((pvc, pv.name, resource_version(resp, pv.resource_version)))
            for pvc in st.provisions:
                resp = await self.handle.api_request(
                    "PUT", f"/api/v1/namespaces/{pvc.namespace}/persistentvolumeclaims/{pvc.name}", pvc.raw)
                written_pvcs.append((pvc, resource_version(resp, pvc.resource_version)))
        except Exception as e:  # noqa: BLE001 - the request's failure is the status
            return Status.error(str(e) or type(e).__name__)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.bind_timeout
        while True:  # wait.PollUntilContextTimeout(interval 1 s, bindTimeout, immediate=false)
            now = loop.time()
            if now >= deadline:
                return Status.error("binding volumes: context deadline exceeded")
            await asyncio.sleep(min(self.poll_interval, deadline - now))
            if loop.time() >= deadline:
                return Status.error("binding volumes: context deadline exceeded")
            try:
                done = check_bindings(cache, node_name, pvols.node_labels, written_pvs, written_pvcs)
            except ValueError as e:
                return Status.error(f"binding volumes: {e}")
            if done:
                cache.forget(pod.key)
                return Status.success()


PLUGIN = VolumeBinding
