"""Plugin protocols per extension point, CycleState, FilterResult and the framework Handle.

A plugin is a class deriving from one or more of the extension-point bases below; the chain
runs it at every point it implements (upstream's multiPoint). Filter and Score work on a batch
of node rows at once (``rows``: an int array of NodeTable rows) and return arrays, so that a
plugin can vectorize; per-node Python loops are fine for plugins whose work is per-node anyway.

Filter semantics match upstream exactly: for every node, plugins run in chain order and the
first plugin that rejects a node decides that node's status; the runner only passes a plugin
the rows that every earlier plugin accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict

from .events import ClusterEventWithHint
from .instrumentation import NOOP, CycleRecorder
from .status import Code, Status
from .waiting import WaitingPods

if TYPE_CHECKING:  # pragma: no cover
    from .model.nodetable import NodeTable
    from .model.podinfo import PodInfo

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0

# The caches a plugin family keeps (Handle.volumes, dra, pod_groups, native_pod_groups), by that
# method's name: the factory of the empty one a Handle builds on first use. Each family registers
# its own (plugins/<family>/__init__.py): the contract names no family's types.
DEFAULT_CACHES: dict[str, Callable[[], Any]] = {}


def register_default_cache(name: str, factory: Callable[[], Any]) -> None:
    """A family's cache: ``Handle.<name>()`` builds ``factory()`` when the handle has none."""
    DEFAULT_CACHES[name] = factory


class PluginArgs(BaseModel):
    """Base for every plugin's typed args: unknown fields are rejected, and values are not
    coerced (``"5"`` is not an integer, ``1`` is not a boolean), as upstream's strict decoding of
    a KubeSchedulerConfiguration; integers are accepted where a number is expected."""

    # defer_build: validators are built on first use, not at import (the operator's start-up)
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True, defer_build=True)


class CycleState:
    """Per-cycle scratch space shared by the plugins of one scheduling attempt and, after it, by
    the same pod's binding cycle (Reserve, Permit, PreBind, Bind, PostBind)."""

    __slots__ = ("_data", "skip_filter", "skip_score", "recorder")

    def __init__(self, recorder: CycleRecorder = NOOP) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter: set[str] = set()  # plugins whose PreFilter returned Skip
        self.skip_score: set[str] = set()  # plugins whose PreScore returned Skip
        self.recorder = recorder  # the cycle's timings (instrumentation.py); upstream recordPluginMetrics

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self._data


@dataclass(slots=True)
class FilterResult:
    """Verdicts of one Filter plugin for a batch of rows.

    ``passed[i]`` is the verdict for ``rows[i]``. For the failed ones: ``code`` is either one Code
    for all of them or an int array per row; ``reasons`` lists (reason text, bool mask over the
    batch) pairs; a failed node carries every reason whose mask is set for it (a node can have
    several, e.g. "Insufficient cpu" and "Insufficient memory"). ``error`` aborts the cycle.
    """

    passed: np.ndarray
    code: Code | np.ndarray = Code.UNSCHEDULABLE
    reasons: list[tuple[str, np.ndarray]] = field(default_factory=list)
    error: Status | None = None

    @classmethod
    def all_pass(cls, n: int) -> "FilterResult":
        return cls(np.ones(n, dtype=bool))

    @classmethod
    def from_mask(cls, passed: np.ndarray, reason: str,
                  code: Code = Code.UNSCHEDULABLE) -> "FilterResult":
        """All failed rows share one reason and code."""
        passed = np.asarray(passed, dtype=bool)
        return cls(passed, code, [(reason, ~passed)])

    @classmethod
    def failed(cls, status: Status, n: int) -> "FilterResult":
        """Every row fails with the same status."""
        return cls(np.zeros(n, dtype=bool), status.code, [(r, np.ones(n, dtype=bool)) for r in status.reasons])


# CycleState key, True in the cycles of a PostFilter's dry run on one node (schedule.NodeFilter):
# preemption makes room against the real allocatable (NodeResourcesFit drops overcommit factors)
DRY_RUN_KEY = "framework/preemption-dry-run"
# CycleState key: the pod's PodGroup placement, written by a gang plugin at PreFilter (a JSON-able
# dict: podGroup, minCount, domain); the decision annotation carries it (``explain``)
GROUP_PLACEMENT = "policy-scheduler.io/group-placement"
# CycleState key: the DRA devices of the pod's claims on the chosen node, written by
# DynamicResources at Reserve (a JSON-able list of {claim, request, device: driver/pool/device});
# the decision annotation carries it (``explain``)
DEVICE_ALLOCATION = "policy-scheduler.io/devices"


class Handle:
    """What plugins may ask of the world outside the pure core; all answers come from caches.

    The operator subclasses it (namespace labels from the namespace cache, workload selectors
    for system default spreading, metric sources). The defaults answer "nothing known".
    """

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return None

    def all_namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return {}

    def default_spread_selector(self, pod: "PodInfo"):
        """upstream helper.DefaultSelector: the selector of the Services/RCs/RSs/StatefulSets
        selecting ``pod``, or None when nothing selects it (then no system default spreading)."""
        return None

    def source(self, name: str) -> Any:
        """A named outside-data source prepared out of the cycle (e.g. Prometheus metrics)."""
        return None

    def pdbs(self) -> Sequence[Any]:
        """The PodDisruptionBudgets DefaultPreemption weighs (``framework.preemption.PDB``
        values, from the operator's cache; upstream's PDB lister). Default: none."""
        return ()

    def is_pod_running_preemption(self, uid: str) -> bool:
        """upstream Executor.IsPodRunningPreemption: is the pod's preemption still deleting its
        victims (asynchronous preemption)? Default: never."""
        return False

    def waiting_pods(self) -> WaitingPods:
        """upstream Handle.IterateOverWaitingPods / GetWaitingPod / RejectWaitingPod: the pods
        parked by a Permit plugin's Wait, shared by every policy of the scheduler."""
        w = getattr(self, "_waiting", None)
        if w is None:
            w = self._waiting = WaitingPods()
        return w

    async def bind_pod(self, pod: "PodInfo", node_name: str, annotations: Mapping[str, str]) -> Status:
        """POST the pod's Binding (what DefaultBinder calls). The operator answers from its API
        client; only bind-side plugins call it, from the binding cycle, never from the
        scheduling cycle. Returns Success, or an Error status that says why (the pod is
        requeued). Raises PodGone when no binding is needed any more."""
        return Status.error("this handle cannot bind pods")

    def _family_cache(self, name: str) -> Any:
        """The empty cache of a plugin family this handle owns, built on first use
        (``DEFAULT_CACHES``); a handle fed by the operator overrides the method instead."""
        attr = "_" + name
        c = getattr(self, attr, None)
        if c is None:
            factory = DEFAULT_CACHES.get(name)
            if factory is None:
                raise LookupError(f"no plugin family registered a {name} cache (import policy_scheduler.plugins)")
            c = factory()
            setattr(self, attr, c)
        return c

    def volumes(self) -> Any:
        """The PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes and CSIDrivers
        (``plugins.volumes.cache.VolumeCache``) the volume plugins read, with VolumeBinding's
        assumed PV/PVC copies. The operator feeds it from its informers
        (``VolumeCache.apply``) and hands the returned events to the queue. Default: an empty
        cache owned by this handle."""
        return self._family_cache("volumes")

    def dra(self) -> Any:
        """The DeviceClasses, ResourceSlices and ResourceClaims (``plugins.dynamicresources.cache.DraCache``)
        DynamicResources reads, with its in-flight allocations. The operator feeds it from its
        informers. Default: an empty cache owned by this handle."""
        return self._family_cache("dra")

    def spawn(self, coro: Any) -> None:
        """Run ``coro`` (API writes a plugin starts outside the binding cycle: DynamicResources'
        PostFilter and Unreserve) in the background; failures are logged. Default: nothing runs."""
        coro.close()

    def pod_groups(self) -> Any:
        """scheduler-plugins' PodGroups and their members
        (``plugins.podgroups.cache.PodGroupCache``), fed by the operator's informers;
        Coscheduling reads it and records reservations and group rejections in it. Default: an
        empty cache owned by this handle."""
        return self._family_cache("pod_groups")

    def native_pod_groups(self) -> Any:
        """Kubernetes' own PodGroups (``scheduling.k8s.io``) and their members
        (``plugins.podgroups.native_cache.NativePodGroupCache``), fed by the operator's
        informers; GangScheduling reads it, records reservations, rejections and topology domains
        in it. Default: an empty cache owned by this handle."""
        return self._family_cache("native_pod_groups")

    async def patch_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Write a PodGroup's status (merge PATCH of its status subresource). The operator's
        leader writes; a standby, or this default, writes nothing."""
        return None

    def activate_pods(self, keys: Sequence[str]) -> int:
        """upstream PodsToActivate: move these pending pods ("namespace/name") out of backoff and
        the unschedulable pool into the active queue now (pods being scheduled are left alone).
        Returns how many moved. Default: none."""
        return 0

    def pod_event(self, pod: "PodInfo", reason: str, message: str) -> None:
        """Tell the pod's owner why it waits: a Warning event (and the PodScheduled=False
        condition), as for a scheduling failure, for waits the queue keeps to itself (PreEnqueue).
        Default: nothing."""
        return None

    def pod_normal_event(self, pod: "PodInfo", reason: str, message: str) -> None:
        """A Normal event about the pod (action ``Scheduling``), nothing else: what a plugin tells
        the pod's owner while the pod waits in the binding cycle (DynamicResources'
        ``BindingConditionsPending``). Default: nothing."""
        return None

    async def nominate_for_expectation(self, pod: "PodInfo", node_name: str) -> None:
        """Write the pod's ``status.nominatedNodeName`` in the binding cycle, before WaitOnPermit
        and PreBind (upstream NominatedNodeNameForExpectation); a failure is only logged.
        Default: nothing is written."""
        return None

    async def api_request(self, method: str, path: str, body: Any = None) -> Any:
        """One request to the API server, for bind-side plugins in the binding cycle only
        (VolumeBinding's PreBind writes PVs and PVCs): ``method`` an HTTP verb ("GET", "PUT",
        "PATCH", ...), ``path`` the API path (e.g.
        ``/api/v1/persistentvolumes/pv-1``), ``body`` the JSON object to send (a PATCH body is a
        merge patch). Returns the decoded JSON answer; raises an exception whose text says why
        on a failure (an HTTP error status, a timeout). Default: NotImplementedError."""
        raise NotImplementedError("this handle cannot make API requests")


class PodGone(Exception):
    """The pod needs no binding any more: already bound, deleted, or replaced by a new pod of
    that name. The binding cycle undoes the assumption and drops the pod without requeueing it;
    the watch says where it went."""


class Plugin:
    """Base of every plugin. ``NAME`` is the registry name; ``Args`` the typed args model."""

    NAME: ClassVar[str] = ""
    Args: ClassVar[type[PluginArgs] | None] = None

    def __init__(self, args: PluginArgs | None, handle: Handle) -> None:
        self.args = args
        self.handle = handle

    @property
    def name(self) -> str:
        return self.NAME


class EnqueueExtensions:
    """upstream EnqueueExtensions: the cluster events that may make a pod this plugin rejected
    schedulable, each with an optional hint. A plugin that can reject (PreEnqueue, PreFilter,
    Filter, Reserve, Permit) and does not derive from this gets DEFAULT_REGISTRATION: every
    event. An empty list: pods it rejected move only on a wildcard event (e.g. their policy
    changed) and on the periodic flush; their own updates, too, go through the hints."""

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        raise NotImplementedError


class PreEnqueuePlugin(Plugin):
    def pre_enqueue(self, pod: "PodInfo") -> Status:
        """Before the pod may enter the active queue: non-success keeps it waiting ("gated");
        it is never decided nor bound until every PreEnqueue plugin passes. Must be cheap."""
        raise NotImplementedError


class QueueSortPlugin(Plugin):
    def less(self, a: Any, b: Any) -> bool:  # a, b: QueuedPodInfo
        raise NotImplementedError


class PreFilterPlugin(Plugin):
    def pre_filter(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable") -> tuple[Status, set[str] | None]:
        """Return (status, node-name set or None). Skip disables this plugin's Filter."""
        raise NotImplementedError


class FilterPlugin(Plugin):
    def filter(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable", rows: np.ndarray) -> FilterResult:
        raise NotImplementedError


class PostFilterPlugin(Plugin):
    def post_filter(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable",
                    statuses: "NodeToStatus") -> tuple[Status, str | None]:
        """Only when no node fits. ``statuses``: every node's status in this cycle (upstream's
        NodeToStatus). Return (status, nominated node name or None); Success ends the PostFilter
        run, and a nominated node is where the pod is tried first next time."""
        raise NotImplementedError


class PreScorePlugin(Plugin):
    def pre_score(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable", rows: np.ndarray) -> Status:
        """``rows``: the feasible nodes. Skip disables this plugin's Score."""
        raise NotImplementedError


class ScorePlugin(Plugin):
    def score(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable", rows: np.ndarray) -> np.ndarray:
        """Raw int64 scores for ``rows``."""
        raise NotImplementedError

    def normalize_score(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable", rows: np.ndarray,
                        scores: np.ndarray) -> np.ndarray:
        """Map raw scores into [0, 100]. The default is no normalization."""
        return scores


class ReservePlugin(Plugin):
    """Runs right after the pod is assumed on the node, in the scheduling cycle (synchronous)."""

    def reserve(self, state: CycleState, pod: "PodInfo", node_name: str) -> Status:
        raise NotImplementedError

    def unreserve(self, state: CycleState, pod: "PodInfo", node_name: str) -> None:
        """Undo ``reserve``. Called on every Reserve plugin (in reverse order) when any later
        step fails, even on plugins whose ``reserve`` did not run: must be idempotent."""
        raise NotImplementedError


class PermitPlugin(Plugin):
    def permit(self, state: CycleState, pod: "PodInfo", node_name: str) -> tuple[Status, float]:
        """Return (status, timeout seconds). Success allows; Wait parks the pod until every
        waiting plugin allows it through ``handle.waiting_pods()``, or one rejects it, or its
        timeout passes; Unschedulable rejects."""
        raise NotImplementedError


class PreBindPlugin(Plugin):
    """Binding cycle (asynchronous, off the scheduling loop).

    Optional: ``pre_bind_pre_flight(state, pod, node_name) -> Status`` (upstream
    PreBindPreFlight, run before WaitOnPermit): Success when this plugin's PreBind has work for
    the pod, Skip when it has none (its PreBind is then not called), Error to fail the binding.
    A plugin without it counts as Skip for the nomination but its PreBind still runs."""

    async def pre_bind(self, state: CycleState, pod: "PodInfo", node_name: str) -> Status:
        raise NotImplementedError


class BindPlugin(Plugin):
    async def bind(self, state: CycleState, pod: "PodInfo", node_name: str) -> Status:
        """Skip: let the next Bind plugin bind."""
        raise NotImplementedError


class PostBindPlugin(Plugin):
    def post_bind(self, state: CycleState, pod: "PodInfo", node_name: str) -> None:
        """Informational, after a successful bind."""
        raise NotImplementedError


@runtime_checkable
class DescribesNodes(Protocol):
    """Optional: what the plugin saw of the best nodes (e.g. metric values and their
    freshness), kept in the Decision for ``explain``. ``rows``: the top nodes, best first;
    return one dict (or None) per row, or None when there is nothing to say."""

    NAME: ClassVar[str]  # a plugin's (the details are kept under it)

    def describe(self, state: CycleState, pod: "PodInfo", nodes: "NodeTable",
                 rows: np.ndarray) -> Sequence[dict | None] | None: ...


@runtime_checkable
class ReadsMetrics(Protocol):
    """Optional, for plugins that read metric values: the series their args ask for, so the
    policy's metric source queries them (class method, called before the plugin is built)."""

    @classmethod
    def metric_queries(cls, args: Any) -> list[Any]: ...


EXTENSION_POINTS: dict[str, type[Plugin]] = {
    "preEnqueue": PreEnqueuePlugin,
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
}
# The points whose rejection records the plugin as a rejector (its events can wake the pod).
REJECTING_POINTS = ("preEnqueue", "preFilter", "filter", "reserve", "permit")


class NodeToStatus:
    """upstream NodeToStatus: every evaluated node's rejection status, and one status for the
    nodes not evaluated (``absent``: those a PreFilter excluded, or every node when a PreFilter
    rejected the pod)."""

    __slots__ = ("_statuses", "absent")

    def __init__(self, statuses: dict[str, Status] | None = None, absent: Status | None = None) -> None:
        self._statuses = statuses or {}
        self.absent = absent or Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def get(self, node: str) -> Status:
        return self._statuses.get(node, self.absent)

    def items(self):
        return self._statuses.items()

    def __len__(self) -> int:
        return len(self._statuses)

    def nodes_for_preemption(self, all_nodes: Sequence[str]) -> list[str]:
        """upstream NodesForStatusCode(Unschedulable): nodes where removing pods might help."""
        return [n for n in all_nodes if self.get(n).code == Code.UNSCHEDULABLE]


def default_normalize_score(scores: np.ndarray, reverse: bool, max_priority: int = MAX_NODE_SCORE) -> np.ndarray:
    """upstream helper.DefaultNormalizeScore (integer arithmetic)."""
    scores = np.asarray(scores, dtype=np.int64)
    if scores.size == 0:
        return scores
    mx = int(scores.max())
    if mx == 0:
        if reverse:
            return np.full_like(scores, max_priority)
        return scores
    out = max_priority * scores // mx
    if reverse:
        out = max_priority - out
    return out
