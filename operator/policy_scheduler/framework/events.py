"""Cluster events and queueing hints: upstream's ClusterEvent, ActionType, EventsToRegister and
QueueingHint (kube-scheduler/framework/types.go, pkg/scheduler/framework/events.go).

A plugin that can reject a pod (PreEnqueue, PreFilter, Filter, Reserve, Permit) says, through
``events_to_register``, which cluster events may make a pod it rejected schedulable again, each
with an optional hint function that looks at the change and answers QUEUE or SKIP. The queue
moves a waiting pod only on an event registered by a plugin that rejected it, and only when that
plugin's hint says QUEUE.

Objects handed to hints: for node events ``NodeSpec`` (old is None on Add, new is None on
Delete); for pod events ``PodInfo``; for PersistentVolume, PersistentVolumeClaim, StorageClass,
CSINode and CSIDriver events the parsed objects of ``plugins/volumes/`` (from
``VolumeCache.apply``; old None on Add, new None on Delete); for PodGroup events
``plugins.podgroups.cache.PodGroupChange`` (the same convention); for namespace events
``NamespaceChange`` as new (old is None); policy and metrics events carry nothing (None, None:
the engine narrows them to the policy's pods itself). Hints must be cheap and must not raise;
one that raises counts as QUEUE, so a buggy hint cannot strand a pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from .model.nodetable import NodeSpec
    from .model.podinfo import PodInfo


class ActionType(IntFlag):
    """upstream fwk.ActionType (v1.37 bit values; only their order matters)."""

    ADD = 1
    DELETE = 2
    UPDATE_NODE_ALLOCATABLE = 4
    UPDATE_NODE_LABEL = 8
    UPDATE_NODE_TAINT = 16  # taints changed, or spec.unschedulable went true -> false
    UPDATE_NODE_CONDITION = 32
    UPDATE_NODE_ANNOTATION = 64
    UPDATE_NODE_DECLARED_FEATURE = 128  # status.declaredFeatures changed
    UPDATE_POD_LABEL = 512
    UPDATE_POD_SCALE_DOWN = 1024
    UPDATE_POD_SCALE_UP = 2048
    UPDATE_POD_TOLERATION = 4096
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 8192
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 16384  # the pod's status.resourceClaimStatuses changed
    UPDATE = (UPDATE_NODE_ALLOCATABLE | UPDATE_NODE_LABEL | UPDATE_NODE_TAINT | UPDATE_NODE_CONDITION
              | UPDATE_NODE_ANNOTATION | UPDATE_POD_LABEL | UPDATE_POD_SCALE_DOWN | UPDATE_POD_SCALE_UP
              | UPDATE_POD_TOLERATION | UPDATE_POD_SCHEDULING_GATES_ELIMINATED
              | UPDATE_POD_GENERATED_RESOURCE_CLAIM | UPDATE_NODE_DECLARED_FEATURE)
    ALL = 32767


_ACTION_LABELS = {
    ActionType.ADD: "Add", ActionType.DELETE: "Delete",
    ActionType.UPDATE_NODE_ALLOCATABLE: "UpdateNodeAllocatable", ActionType.UPDATE_NODE_LABEL: "UpdateNodeLabel",
    ActionType.UPDATE_NODE_TAINT: "UpdateNodeTaint", ActionType.UPDATE_NODE_CONDITION: "UpdateNodeCondition",
    ActionType.UPDATE_NODE_ANNOTATION: "UpdateNodeAnnotation",
    ActionType.UPDATE_NODE_DECLARED_FEATURE: "UpdateNodeDeclaredFeature",
    ActionType.UPDATE_POD_LABEL: "UpdatePodLabel",
    ActionType.UPDATE_POD_SCALE_DOWN: "UpdatePodScaleDown", ActionType.UPDATE_POD_SCALE_UP: "UpdatePodScaleUp",
    ActionType.UPDATE_POD_TOLERATION: "UpdatePodToleration",
    ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED: "UpdatePodSchedulingGatesEliminated",
    ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM: "UpdatePodGeneratedResourceClaim",
    ActionType.UPDATE: "Update", ActionType.ALL: "All",
}


class Resource:
    """upstream fwk.EventResource values we emit, plus our own (namespaces, policies, metrics)."""

    POD = "Pod"  # a registration on Pod matches AssignedPod, UnscheduledPod and TargetPod
    ASSIGNED_POD = "AssignedPod"
    UNSCHEDULED_POD = "UnscheduledPod"
    TARGET_POD = "TargetPod"  # the waiting pod itself
    NODE = "Node"
    PERSISTENT_VOLUME = "PersistentVolume"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    CSI_NODE = "storage.k8s.io/CSINode"
    CSI_DRIVER = "storage.k8s.io/CSIDriver"
    STORAGE_CLASS = "storage.k8s.io/StorageClass"
    VOLUME_ATTACHMENT = "storage.k8s.io/VolumeAttachment"  # not emitted (no VolumeAttachment cache)
    CSI_STORAGE_CAPACITY = "storage.k8s.io/CSIStorageCapacity"  # not emitted (no CSIStorageCapacity cache)
    NAMESPACE = "Namespace"  # ours: a namespace's labels changed
    POLICY = "SchedulingPolicy"  # ours: a policy was created, changed or deleted
    METRICS = "Metrics"  # ours: a policy's metric source published new values
    POD_GROUP = "scheduling.x-k8s.io/PodGroup"  # scheduler-plugins' PodGroup (plugins/podgroups/cache.py)
    NATIVE_POD_GROUP = "scheduling.k8s.io/PodGroup"  # Kubernetes' own PodGroup (plugins/podgroups/native_cache.py)
    RESOURCE_CLAIM = "resource.k8s.io/ResourceClaim"  # DRA (plugins/dynamicresources/)
    RESOURCE_SLICE = "resource.k8s.io/ResourceSlice"
    DEVICE_CLASS = "resource.k8s.io/DeviceClass"
    WILDCARD = "*"


_POD_RESOURCES = (Resource.ASSIGNED_POD, Resource.UNSCHEDULED_POD, Resource.TARGET_POD)


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    resource: str
    action: ActionType
    custom_label: str = ""

    @property
    def label(self) -> str:
        """upstream ClusterEvent.Label(): e.g. NodeAdd, AssignedPodDelete, or the custom label."""
        if self.custom_label:
            return self.custom_label
        return self.resource + _ACTION_LABELS.get(self.action, str(int(self.action)))

    @property
    def is_wildcard(self) -> bool:
        return self.resource == Resource.WILDCARD and self.action == ActionType.ALL

    def matches(self, incoming: "ClusterEvent") -> bool:
        """upstream MatchClusterEvents(registered=self, incoming): a registered wildcard matches
        every event; otherwise the resources match (registered Pod matches every pod resource) and
        the incoming action is within the registered one. An incoming wildcard matches only a
        wildcard registration."""
        if self.is_wildcard:
            return True
        if incoming.is_wildcard:
            return False
        if self.resource != incoming.resource and self.resource != Resource.WILDCARD and not (
                self.resource == Resource.POD and incoming.resource in _POD_RESOURCES):
            return False
        return bool(self.action & incoming.action) and (incoming.action & ~self.action) == 0


class QueueingHint(IntEnum):
    SKIP = 0  # this event cannot make the pod schedulable
    QUEUE = 1  # it may


HintFn = Callable[["PodInfo", Any, Any], QueueingHint]


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    event: ClusterEvent
    hint: HintFn | None = None  # None: always QUEUE


WILDCARD_EVENT = ClusterEvent(Resource.WILDCARD, ActionType.ALL)
# What a plugin that can reject but does not declare its events gets (upstream defaultEnqueueExtension).
DEFAULT_REGISTRATION = (ClusterEventWithHint(WILDCARD_EVENT),)

# Events the queue and the engine emit themselves.
UNSCHEDULABLE_TIMEOUT = ClusterEvent(Resource.WILDCARD, ActionType.ALL, "UnschedulableTimeout")
FORCE_ACTIVATE = ClusterEvent(Resource.WILDCARD, ActionType.ALL, "ForceActivate")
NODE_ADD = ClusterEvent(Resource.NODE, ActionType.ADD)
NODE_DELETE = ClusterEvent(Resource.NODE, ActionType.DELETE)
ASSIGNED_POD_ADD = ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD)
ASSIGNED_POD_DELETE = ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE)
NAMESPACE_LABELS = ClusterEvent(Resource.NAMESPACE, ActionType.UPDATE)
METRICS_REFRESH = ClusterEvent(Resource.METRICS, ActionType.UPDATE)


@dataclass(frozen=True, slots=True)
class NamespaceChange:
    """What namespace hints see: the namespace and its labels before and after."""

    name: str
    old_labels: Mapping[str, str] | None
    new_labels: Mapping[str, str] | None


# ---------------------------------------------------------------------------------------------
# What changed: upstream NodeSchedulingPropertiesChange and PodSchedulingPropertiesChange.

def node_change_events(old: "NodeSpec", new: "NodeSpec") -> list[ClusterEvent]:
    """One event per changed aspect the scheduler reads; empty for a heartbeat. Our NodeSpec has
    no conditions or annotations, so those aspects never fire."""
    out = []
    if old.allocatable != new.allocatable:
        out.append(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_ALLOCATABLE))
    if old.labels != new.labels:
        out.append(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL))
    if old.taints != new.taints or (old.unschedulable and not new.unschedulable):
        out.append(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_TAINT))
    if old.declared_features != new.declared_features:  # (upstream: last, when NodeDeclaredFeatures is on)
        out.append(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_DECLARED_FEATURE))
    return out  # unschedulable false -> true can only hurt: upstream emits nothing for it


def _requests_changed(old: "PodInfo", new: "PodInfo") -> tuple[bool, bool]:
    """(scaled down, scaled up), upstream extractPodScaleDown / extractPodScaleUp over the requests
    a node counts (status resources included: a kubelet actuating a resize changes them): some
    request lowered or removed / raised or added (a resource named, even at 0, then gone counts)."""
    a, b = old.requests, new.requests
    down = any(k not in b or b[k] < v for k, v in a.items())
    up = any(k not in a or a[k] < v for k, v in b.items())
    return down, up


def pod_change_events(old: "PodInfo", new: "PodInfo", target: bool) -> list[ClusterEvent]:
    """upstream PodSchedulingPropertiesChange: the events of an update of an assigned pod
    (``target=False``) or of the waiting pod itself (``target=True``); the generic Update when
    nothing specific changed."""
    res = Resource.TARGET_POD if target else Resource.ASSIGNED_POD
    out = []
    if old.labels != new.labels:
        out.append(ClusterEvent(res, ActionType.UPDATE_POD_LABEL))
    down, up = _requests_changed(old, new)
    if down:
        out.append(ClusterEvent(res, ActionType.UPDATE_POD_SCALE_DOWN))
    if up:
        out.append(ClusterEvent(res, ActionType.UPDATE_POD_SCALE_UP))
    if len(old.tolerations) != len(new.tolerations):
        out.append(ClusterEvent(res, ActionType.UPDATE_POD_TOLERATION))
    if target and old.scheduling_gates and not new.scheduling_gates:
        out.append(ClusterEvent(res, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED))
    if target and old.claim_statuses != new.claim_statuses:
        out.append(ClusterEvent(res, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM))
    if not out:
        out.append(ClusterEvent(res, ActionType.UPDATE))
    return out


def call_hint(reg: ClusterEventWithHint, pod: "PodInfo", old: Any, new: Any) -> QueueingHint:
    """Run a registration's hint; no hint, or a hint that raises, means QUEUE."""
    if reg.hint is None:
        return QueueingHint.QUEUE
    try:
        return QueueingHint.QUEUE if reg.hint(pod, old, new) else QueueingHint.SKIP
    except Exception:  # a buggy hint must not strand the pod (upstream: an error is Queue)
        return QueueingHint.QUEUE
