"""NodeDeclaredFeatures (upstream plugins/nodedeclaredfeatures/nodedeclaredfeatures.go), with the
inference of k8s.io/component-helpers v0.37.1 nodedeclaredfeatures (the library kube-scheduler
1.37.1 calls: ``DefaultFramework.InferForPodScheduling``).

A node publishes the features it supports in ``status.declaredFeatures`` (the kubelet writes the
names of the library's registry it provides). A pod whose spec uses one of them may only go to a
node that declares it. Upstream's registry (``features.AllFeatures``) has nine features; three of
them are inferred from a pod's spec for scheduling (the others only for pod updates, or never):

- ``RestartAllContainersOnContainerExits``: a regular or init container (not an ephemeral one)
  has a ``restartPolicyRules`` entry whose ``action`` is ``RestartAllContainers``;
- ``UserNamespacesHostNetworkSupport``: ``hostNetwork: true`` and ``hostUsers: false``;
- ``VolumeBindMountOptions``: a ``volumeMounts`` entry of a regular, init or ephemeral
  container has a non-empty ``bindMountOptions``.

A feature whose max version is below the scheduler's (v1.37.1) is not required any more; no
feature of v0.37.1 has one. The inference reads the pod's spec as the API server serves it: a
field the API server dropped (its feature gate off: ``bindMountOptions`` without
VolumeBindMountOptions) requires nothing.

PreFilter: Skip when the pod requires no feature, else the required set goes into the cycle
state. Filter: a node whose declared features do not include every required one fails with
UnschedulableAndUnresolvable ``node(s) didn't match Pod's required features`` (names the
registry does not know are ignored, as upstream's ``TryMap``). Upstream's skip of a pod whose
resize is deferred applies only with the alpha gate InPlacePodVerticalScalingSchedulerPreemption
(off by default), so it is not done here.

Events: a node added, or its declared features changed (UpdateNodeDeclaredFeature), queueing
unless the features are the same as before; the pod's own update, queueing only when it changes
the features the pod requires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ..framework.interface import CycleState, EnqueueExtensions, FilterPlugin, FilterResult, PreFilterPlugin
from ..framework.model.nodetable import NodeSpec, NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.status import Code, Status

NAME = "NodeDeclaredFeatures"
ERR_REASON = "node(s) didn't match Pod's required features"
_PREFILTER_KEY = "PreFilter" + NAME

# the version kube-scheduler passes (component-base version.Get()) and features' max versions are
# compared with (GreaterThan: a feature is not required by a scheduler newer than its max version)
SCHEDULER_VERSION = (1, 37, 1)

Spec = Mapping[str, Any]


def _items(v: Any) -> list:
    """A list field as a list; anything else (null, a string, a map) as no entries."""
    return v if isinstance(v, list) else []


def _restart_all_containers(spec: Spec) -> bool:
    """restartallcontainers: a restart rule with action RestartAllContainers on a regular or an
    init container."""
    for kind in ("containers", "initContainers"):
        for c in _items(spec.get(kind)):
            if isinstance(c, dict) and (rules := c.get("restartPolicyRules")):
                for rule in _items(rules):
                    if isinstance(rule, dict) and rule.get("action") == "RestartAllContainers":
                        return True
    return False


def _user_namespaces_host_network(spec: Spec) -> bool:
    """usernamespaceshostnetwork: host network and user namespaces (hostUsers set to false)."""
    return spec.get("hostNetwork") is True and spec.get("hostUsers") is False


def _volume_bind_mount_options(spec: Spec) -> bool:
    """volumebindmountoptions: a volume mount with bind mount options, in any kind of container."""
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for c in _items(spec.get(kind)):
            if isinstance(c, dict) and (mounts := c.get("volumeMounts")):
                for m in _items(mounts):
                    if isinstance(m, dict) and _items(m.get("bindMountOptions")):
                        return True
    return False


def _never(spec: Spec) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Feature:
    """One entry of the library's registry: its name, whether a pod spec requires it for
    scheduling (InferForScheduling), and its max version (None: no bound)."""

    name: str
    infer: Callable[[Spec], bool]
    max_version: tuple[int, int, int] | None = None


# features.AllFeatures of v0.37.1, sorted by name as ndf.New sorts them. The six that infer
# nothing for scheduling: DRA's (node allocatable resources; optional node operations, which
# DynamicResources checks itself), websockets to the kubelet, and the three in-place resize ones
# (pod-level resources, non-sidecar init containers, memory-backed volumes: pod updates only).
FEATURES: tuple[Feature, ...] = tuple(sorted((
    Feature("RestartAllContainersOnContainerExits", _restart_all_containers),
    Feature("InPlacePodLevelResourcesVerticalScaling", _never),
    Feature("ExtendWebSocketsToKubelet", _never),
    Feature("InPlacePodVerticalScalingInitContainers", _never),
    Feature("InPlacePodVerticalScalingMemoryBackedVolumes", _never),
    Feature("UserNamespacesHostNetworkSupport", _user_namespaces_host_network),
    Feature("DRANodeAllocatableResources", _never),
    Feature("VolumeBindMountOptions", _volume_bind_mount_options),
    Feature("DRAOptionalNodeOperations", _never),
), key=lambda f: f.name))
KNOWN = frozenset(f.name for f in FEATURES)
_NONE: frozenset[str] = frozenset()


def infer_for_scheduling(spec: Any, version: tuple[int, int, int] = SCHEDULER_VERSION) -> frozenset[str]:
    """Framework.InferForPodScheduling: the names of the features ``spec`` (a pod's spec, as the
    API serves it) requires of its node. Never raises: a field of the wrong type counts as absent."""
    if not isinstance(spec, dict):  # (JSON objects: the API's pods, the snapshot's)
        return _NONE
    found = None
    for f in FEATURES:
        if f.infer is not _never and (f.max_version is None or version <= f.max_version) and f.infer(spec):
            found = [f.name] if found is None else found + [f.name]
    return _NONE if found is None else frozenset(found)


def required_features(pod: PodInfo) -> frozenset[str] | None:
    """The features ``pod`` requires, or None when its API object is not kept (a bound pod)."""
    if pod.raw is None:
        return None
    return infer_for_scheduling(pod.raw.get("spec"))


def node_change_hint(pod: PodInfo, old: NodeSpec | None, new: NodeSpec | None) -> QueueingHint:
    """upstream isSchedulableAfterNodeChange: Skip when the node's declared features are the ones
    it had; Queue for a node added or whose declared features changed."""
    if new is None:
        return QueueingHint.SKIP
    if old is not None and old.declared_features == new.declared_features:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE


def pod_update_hint(pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
    """upstream isSchedulableAfterTargetPodUpdate: Queue only when the update changes the
    features the pod requires."""
    if old is None or new is None:
        return QueueingHint.QUEUE
    before, after = required_features(old), required_features(new)
    if before is None or after is None:
        return QueueingHint.QUEUE  # cannot tell: as upstream on an error
    return QueueingHint.SKIP if before == after else QueueingHint.QUEUE


class NodeDeclaredFeatures(PreFilterPlugin, FilterPlugin, EnqueueExtensions):
    NAME = NAME
    Args = None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE),
                                 node_change_hint),
            ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE), pod_update_hint),
        ]

    def requires_features(self, pod: PodInfo) -> bool:
        """Whether PreFilter would not Skip ``pod`` (preemption's reprieve shortcut asks)."""
        return required_features(pod) != frozenset()

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        reqs = required_features(pod)
        if not reqs:
            return Status.skip(), None
        state.write(_PREFILTER_KEY, reqs)
        return Status.success(), None

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        reqs: frozenset[str] | None = state.read(_PREFILTER_KEY)
        if reqs is None:  # PreFilter did not run for this cycle
            reqs = required_features(pod) or frozenset()
        if not reqs:
            return FilterResult.all_pass(len(rows))
        specs = nodes.specs
        passed = np.fromiter((reqs <= specs[row].declared_features for row in rows.tolist()), dtype=bool,
                             count=len(rows))
        return FilterResult.from_mask(passed, ERR_REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


PLUGIN = NodeDeclaredFeatures
