"""NodeResourcesFit: does the node have room for the pod's requests, and how full would it be.

upstream pkg/scheduler/framework/plugins/noderesources (fit.go, resource_allocation.go,
least_allocated.go, most_allocated.go, requested_to_capacity_ratio.go, helper/shape_score.go)
and the args validation of apis/config/validation/validation_pluginargs.go.

Filter (true requests, never the scoring defaults), per node, every failing reason collected:
  1. pods on the node + 1 > allocatable pods                  -> "Too many pods"
  2. a pod requesting nothing stops here (only the pod count matters);
  3. cpu, memory, ephemeral-storage, then every scalar resource (extended, hugepages-*,
     *kubernetes.io/*, attachable-volumes-*) with request > 0: request > allocatable - requested
     -> "Insufficient <name>". Extended resources listed in ignoredResources, or whose prefix
     before "/" is in ignoredResourceGroups, are not checked. A resource a DeviceClass backs
     (DRAExtendedResource) is not checked on a node that does not advertise it: DynamicResources
     allocates it there (upstream shouldDelegateResourceToDRA).
The status is Unschedulable, or UnschedulableAndUnresolvable when some failing resource is
requested beyond the node's whole allocatable (preemption cannot help there).

Overcommit (the policy's ``spec.overcommit``, through ``handle.source("overcommit")``): for the
policy's own pods, cpu, memory and ephemeral-storage fit against allocatable x factor (rounded
down); not in preemption's dry runs, which make room against the real allocatable. A node that passes only thanks to the factor is said so in the decision (``describe``).
A node already over its real allocatable (another policy overcommitted it) fails with
"Insufficient <name> (node already over its allocatable <name>: overcommitted)". Scores always
use the real allocatable.

Score (no normalization, raw score already 0..100), per configured resource: the pod's request
(cpu/memory with the 100m / 200Mi per-container defaults, true requests otherwise) plus the
node's requested (NonZeroRequested for cpu/memory, Requested otherwise) against allocatable.
A scalar resource the pod does not request, a resource the node does not advertise
(allocatable 0) and a name that is neither cpu, memory, ephemeral-storage nor a scalar
resource are left out, weight included.

Events (upstream EventsToRegister with in-place pod resize on): an assigned pod deleted (it was
bound or nominated, so it freed room: Queue); a node added, queueing only when the pod's requests
fit the node empty; a node's allocatable changed, queueing only when the pod fits the node empty
and the allocatable of the pod count or of some resource the pod requests grew; an assigned pod
scaled down, queueing only when it released a resource the pod requests; the pod itself scaled
down (Queue); a DeviceClass added or changed, queueing only when its (new) resource name is one
the pod requests.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field, model_validator

from ..framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from ..framework.interface import (
    DRY_RUN_KEY,
    MAX_NODE_SCORE,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    FilterResult,
    PluginArgs,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
)
from ..framework.model.extended_resources import IMPLICIT_PREFIX, backed_requests
from ..framework.model.labels import validate_label_name
from ..framework.model.nodetable import CPU, EPHEMERAL, MEMORY, PODS, NodeSpec, NodeTable
from ..framework.model.podinfo import PodInfo
from ..framework.model.resources import (
    LEAST_ALLOCATED,
    MAX_CUSTOM_PRIORITY_SCORE,
    REQUESTED_TO_CAPACITY_RATIO,
    SCORING_STRATEGY_TYPES,
    ResourceSpec,
    UtilizationShapePoint,
    default_resources,
    is_extended_resource_name,
    shape_errors,
    is_scalar_resource_name,
    score_resources,
)
from ..framework.status import Code, Status
from ..framework.validation import (MAX_LABEL_KEY, MAX_NAMES, MAX_RESOURCES, MAX_SHAPE_POINTS, MAX_SHORT, forbidden,
                                    invalid, not_supported, raise_if, required)


# ---------------------------------------------------------------------------- args
ResourceName = Annotated[str, Field(max_length=MAX_LABEL_KEY)]


class RequestedToCapacityRatioParam(PluginArgs):
    shape: list[UtilizationShapePoint] = Field(default_factory=list, max_length=MAX_SHAPE_POINTS)


class ScoringStrategy(PluginArgs):
    type: str = Field(default="", max_length=MAX_SHORT, json_schema_extra={"enum": list(SCORING_STRATEGY_TYPES)})
    resources: list[ResourceSpec] = Field(default_factory=list, max_length=MAX_RESOURCES)
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = Field(
        default=None, alias="requestedToCapacityRatio")




class NodeResourcesFitArgs(PluginArgs):
    """KubeSchedulerConfiguration NodeResourcesFitArgs, defaulted then validated as upstream
    ValidateNodeResourcesFitArgs."""

    ignored_resources: list[ResourceName] = Field(default_factory=list, alias="ignoredResources", max_length=MAX_NAMES)
    ignored_resource_groups: list[ResourceName] = Field(
        default_factory=list, alias="ignoredResourceGroups", max_length=MAX_NAMES)
    scoring_strategy: ScoringStrategy | None = Field(default=None, alias="scoringStrategy")

    @model_validator(mode="after")
    def _default_and_validate(self) -> "NodeResourcesFitArgs":
        if self.scoring_strategy is None:
            self.scoring_strategy = ScoringStrategy(type=LEAST_ALLOCATED)
        s = self.scoring_strategy
        s.resources = default_resources(s.resources)
        errs = []
        for i, res in enumerate(self.ignored_resources):
            errs += validate_label_name(res, f"ignoredResources[{i}]")
        for i, group in enumerate(self.ignored_resource_groups):
            if "/" in group:
                errs.append(invalid(f"ignoredResourceGroups[{i}]", group, "resource group name can't contain '/'"))
            errs += validate_label_name(group, f"ignoredResourceGroups[{i}]")
        if s.type not in SCORING_STRATEGY_TYPES:
            errs.append(not_supported("scoringStrategy.type", s.type, sorted(SCORING_STRATEGY_TYPES)))
        for i, r in enumerate(s.resources):
            if not 0 < r.weight <= 100:
                errs.append(invalid(f"scoringStrategy.resources[{i}].weight", r.weight,
                                    f"resource weight of {r.name} not in valid range (0, 100]"))
        if s.type == REQUESTED_TO_CAPACITY_RATIO:
            if s.requested_to_capacity_ratio is None:
                errs.append(required("scoringStrategy.requestedToCapacityRatio",
                                     "must be specified when type is RequestedToCapacityRatio"))
            else:
                errs += shape_errors(s.requested_to_capacity_ratio.shape,
                                      "scoringStrategy.requestedToCapacityRatio.shape")
        elif s.requested_to_capacity_ratio is not None:
            errs.append(forbidden("scoringStrategy.requestedToCapacityRatio",
                                  "must be nil when type is not RequestedToCapacityRatio"))
        raise_if(errs)
        return self


# ---------------------------------------------------------------------------- plugin
_NATIVE = ("cpu", "memory", "ephemeral-storage")
OVERCOMMIT_SOURCE = "overcommit"  # handle.source(): {resource: factor > 1} of the policy's spec.overcommit
# handle.source(): whether any policy overcommits (a node can then be over its allocatable for good; else
# only nominated pods, counted for filtering, put it there, and upstream's reason applies unchanged)
OVERCOMMIT_ANYWHERE = "overcommit/anywhere"
_ADMITTED_KEY = "NodeResourcesFit/overcommitted"  # CycleState: rows that fit only thanks to a factor


class NodeResourcesFit(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, EnqueueExtensions):
    NAME = "NodeResourcesFit"
    Args = NodeResourcesFitArgs

    _PRE_FILTER_KEY = NAME + "/preFilter"
    _DRA_KEY = NAME + "/dra"  # the pod's requested resources a DeviceClass backs
    _PRE_SCORE_KEY = NAME + "/preScore"

    def __init__(self, args: NodeResourcesFitArgs, handle) -> None:
        super().__init__(args, handle)
        s = args.scoring_strategy
        assert s is not None  # the args' validator fills in the default
        self._ignored = frozenset(args.ignored_resources)
        self._ignored_groups = frozenset(args.ignored_resource_groups)
        self._kind = s.type
        self._resources = [r.name for r in s.resources]
        self._weights = np.array([r.weight for r in s.resources], dtype=np.int64)
        self._shape = None
        if s.type == REQUESTED_TO_CAPACITY_RATIO:
            scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
            rtc = s.requested_to_capacity_ratio
            assert rtc is not None  # the args' validator requires it for this type
            self._shape = [(p.utilization, p.score * scale) for p in rtc.shape]

    # ------------------------------------------------------------------ events
    def events_to_register(self) -> list[ClusterEventWithHint]:
        pod_hint, node_hint = self.pod_event_hint, self.node_change_hint
        return [
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE), pod_hint),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.UPDATE_POD_SCALE_DOWN), pod_hint),
            ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_SCALE_DOWN), pod_hint),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD), node_hint),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_ALLOCATABLE), node_hint),
            ClusterEventWithHint(ClusterEvent(Resource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
                                 self.device_class_hint),
        ]

    def _dra_backed(self, pod: PodInfo) -> frozenset[str]:
        """The pod's requested resources that a DeviceClass backs (DRAExtendedResource): on a
        node that does not advertise one (allocatable 0), DynamicResources allocates it, and
        Filter does not compare it (upstream shouldDelegateResourceToDRA)."""
        if self.handle is None or not any(q > 0 and "/" in n for n, q in pod.requests.items()):
            return frozenset()
        try:
            return backed_requests(pod.requests, self.handle.dra())
        except LookupError:  # no DRA cache registered (a bare handle without the plugin families)
            return frozenset()

    def device_class_hint(self, pod: PodInfo, old, new) -> QueueingHint:
        """upstream isSchedulableAfterDeviceClassEvent: a class added whose implicit name the
        pod requests, or whose extendedResourceName (new or changed) the pod requests."""
        if new is None:
            return QueueingHint.SKIP
        if old is not None:
            if old.extended_resource_name == new.extended_resource_name:
                return QueueingHint.SKIP
        elif pod.requests.get(IMPLICIT_PREFIX + new.name) is not None:
            return QueueingHint.QUEUE
        if new.extended_resource_name and pod.requests.get(new.extended_resource_name) is not None:
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _checked(self, name: str, quantity: int) -> bool:
        """Whether Filter compares the pod's request for ``name`` (as ``_checks``)."""
        if quantity <= 0:
            return False
        if name in _NATIVE:
            return True
        if not is_scalar_resource_name(name):
            return False
        return not (is_extended_resource_name(name)
                    and (name in self._ignored or name.split("/")[0] in self._ignored_groups))

    def _factors(self) -> dict[str, float]:
        return (self.handle.source(OVERCOMMIT_SOURCE) if self.handle is not None else None) or {}

    def fits_empty_node(self, pod: PodInfo, node: NodeSpec) -> bool:
        """upstream isFit: the Filter's verdict on ``node`` with no pod on it."""
        factors = self._factors()
        alloc = {k: int(v * factors[k]) if k in factors else v for k, v in node.allocatable.items()} \
            if factors else node.allocatable
        if alloc.get("pods", 0) < 1:
            return False
        dra = self._dra_backed(pod)
        return all(q <= alloc.get(name, 0) for name, q in pod.spec_requests.items()
                   if self._checked(name, q) and not (name in dra and node.allocatable.get(name, 0) <= 0))

    def _requested_resources_grew(self, pod: PodInfo, old: NodeSpec, new: NodeSpec) -> bool:
        """upstream haveAnyRequestedResourcesIncreased: the allowed pod count grew, or the
        allocatable of some resource the pod requests did."""
        if new.allocatable.get("pods", 0) > old.allocatable.get("pods", 0):
            return True
        if any(new.allocatable.get(n, 0) <= 0 for n in self._dra_backed(pod)):
            return True  # upstream: a resource DRA serves on the node counts as grown
        return any(new.allocatable.get(name, 0) > old.allocatable.get(name, 0)
                   for name, q in pod.spec_requests.items()
                   if q > 0 and (name in _NATIVE or is_scalar_resource_name(name)))

    def node_change_hint(self, pod: PodInfo, old: NodeSpec | None, new: NodeSpec | None) -> QueueingHint:
        """upstream isSchedulableAfterNodeChange: Skip when the pod would not fit even the empty
        node; Queue a new node; an updated node only if what the pod needs grew."""
        if new is None or not self.fits_empty_node(pod, new):
            return QueueingHint.SKIP
        if old is None or self._requested_resources_grew(pod, old, new):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def pod_event_hint(self, pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
        """upstream isSchedulableAfterPodEvent: a deleted pod frees room when it was bound or
        nominated (always the case for AssignedPod events); a scale-down helps when it is the pod
        itself, or an assigned pod lowering a resource the pod requests."""
        if new is None:
            if old is not None and not old.node_name and not old.nominated_node_name:
                return QueueingHint.SKIP
            return QueueingHint.QUEUE
        if old is None or new.uid == pod.uid:
            return QueueingHint.QUEUE
        if not new.node_name:
            return QueueingHint.SKIP
        for name, q in pod.requests.items():
            if q > 0 and (name in _NATIVE or is_scalar_resource_name(name)) \
                    and old.requests.get(name, 0) > new.requests.get(name, 0):
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    # ------------------------------------------------------------------ filter
    def _checks(self, pod: PodInfo, nodes: NodeTable) -> list[tuple[int | None, int, str]]:
        """(column, request, reason) for every resource the Filter compares, in upstream's order:
        cpu, memory, ephemeral-storage, then scalar resources (sorted by name; upstream walks a
        Go map, so its order among several failing scalar resources is unspecified). Column
        None: no node has the resource (allocatable 0 everywhere). The spec's requests: status
        resources (in-place resize) count for pods on nodes, not for the pod being scheduled."""
        req = pod.spec_requests
        checks: list[tuple[int | None, int, str]] = [(col, req.get(name, 0), f"Insufficient {name}")
                  for col, name in ((CPU, "cpu"), (MEMORY, "memory"), (EPHEMERAL, "ephemeral-storage"))]
        for name in sorted(req):
            if req[name] <= 0 or not is_scalar_resource_name(name):
                continue
            if is_extended_resource_name(name) and (
                    name in self._ignored or name.split("/")[0] in self._ignored_groups):
                continue
            checks.append((nodes.res_index.get(name), req[name], f"Insufficient {name}"))
        return [c for c in checks if c[1] > 0]

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable) -> tuple[Status, set[str] | None]:
        state.write(self._PRE_FILTER_KEY, self._checks(pod, nodes))
        state.write(self._DRA_KEY, self._dra_backed(pod))
        return Status.success(), None

    def filter(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> FilterResult:
        checks = state.read(self._PRE_FILTER_KEY)
        if checks is None:
            checks = self._checks(pod, nodes)
        dra = state.read(self._DRA_KEY)
        if dra is None:
            dra = self._dra_backed(pod)
        too_many = nodes.requested[rows, PODS] + 1 > nodes.allocatable[rows, PODS]
        if not checks:
            return FilterResult.from_mask(~too_many, "Too many pods")
        reasons = [("Too many pods", too_many)]
        failed = too_many.copy()
        unresolvable = np.zeros(len(rows), dtype=bool)
        # preemption's dry runs make room against the real allocatable: a factor admits pods into
        # free room, never evicts another pod for room that exists only thanks to it
        factors = {} if state.read(DRY_RUN_KEY) else self._factors()
        admitted = None  # rows that fit only thanks to an overcommit factor
        for col, want, reason in checks:
            if col is None:
                alloc = used = np.zeros(len(rows), dtype=np.int64)
            else:
                alloc, used = nodes.allocatable[rows, col], nodes.requested[rows, col]
            factor = factors.get(reason[13:]) if factors else None  # reason: "Insufficient <name>"
            if factor is not None:
                strict_short = want > alloc - used
                alloc = (alloc * factor).astype(np.int64)
            short = want > alloc - used
            if dra and reason[13:] in dra:  # left to DynamicResources where the node does not advertise it
                short &= nodes.allocatable[rows, col] > 0 if col is not None else False
            over = short & (used > nodes.allocatable[rows, col]) if col is not None and short.any() else None
            # past allocatable by another policy's overcommit (asked only then: else nominated pods put it there)
            if over is not None and over.any() and self.handle is not None \
                    and self.handle.source(OVERCOMMIT_ANYWHERE):
                reasons.append((f"{reason} (node already over its allocatable {reason[13:]}: overcommitted)", over))
                reasons.append((reason, short & ~over))
            else:
                reasons.append((reason, short))
            failed |= short
            unresolvable |= short & (want > alloc)
            if factor is not None and strict_short.any():
                admitted = (strict_short & ~short) if admitted is None else (admitted | (strict_short & ~short))
        if admitted is not None and (admitted & ~failed).any():
            got = state.read(_ADMITTED_KEY)
            if got is None:
                got = set()
                state.write(_ADMITTED_KEY, got)
            got.update(int(r) for r in rows[admitted & ~failed])
        if not failed.any():
            return FilterResult.all_pass(len(rows))
        code = np.where(unresolvable, int(Code.UNSCHEDULABLE_AND_UNRESOLVABLE),
                        int(Code.UNSCHEDULABLE)).astype(np.int8)
        return FilterResult(~failed, code, [(r, m) for r, m in reasons if m.any()])

    def describe(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray):
        """For explain and the decision annotation: the top nodes that fit only thanks to the
        policy's overcommit factors."""
        got = state.read(_ADMITTED_KEY)
        if not got:
            return None
        factors = ", ".join(f"{k} x{v:g}" for k, v in sorted(self._factors().items()))
        return [{"admittedBy": f"overcommit ({factors})"} if int(r) in got else None for r in rows]

    # ------------------------------------------------------------------ score
    def _score_requests(self, pod: PodInfo) -> list[tuple[str, int | None]]:
        """The pod's request for each configured resource (cpu/memory with the non-zero
        defaults); None for a resource left out of the score (a scalar resource the pod does not
        request, or a name that is neither cpu, memory, ephemeral-storage nor scalar)."""
        out = []
        for name in self._resources:
            if name == "cpu":
                q = pod.score_cpu
            elif name == "memory":
                q = pod.score_memory
            else:
                q = pod.score_requests.get(name, 0)
                if name != "ephemeral-storage" and (not is_scalar_resource_name(name) or q == 0):
                    q = None
            out.append((name, q))
        return out

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> Status:
        state.write(self._PRE_SCORE_KEY, self._score_requests(pod))
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, nodes: NodeTable, rows: np.ndarray) -> np.ndarray:
        reqs = state.read(self._PRE_SCORE_KEY)
        if reqs is None:
            reqs = self._score_requests(pod)
        keep = [i for i, (_, q) in enumerate(reqs) if q is not None]
        if not keep or len(rows) == 0:
            return np.zeros(len(rows), dtype=np.int64)
        alloc = np.empty((len(keep), len(rows)), dtype=np.int64)
        requested = np.empty_like(alloc)
        for k, i in enumerate(keep):
            name, q = reqs[i]
            col = nodes.res_index.get(name)
            if col is None:  # no node advertises it: allocatable 0 everywhere
                alloc[k] = 0
                requested[k] = q
                continue
            alloc[k] = nodes.allocatable[rows, col]
            if name == "cpu":
                requested[k] = nodes.nonzero[rows, 0] + q
            elif name == "memory":
                requested[k] = nodes.nonzero[rows, 1] + q
            else:
                requested[k] = nodes.requested[rows, col] + q
        return score_resources(self._kind, self._shape, requested, alloc, self._weights[keep])

    # ------------------------------------------------------------------ pod-group placements
    def score_placement(self, pods: list[PodInfo], nodes: NodeTable, rows: np.ndarray) -> int:
        """upstream Fit.ScorePlacement (TopologyAwareWorkloadScheduling): MostAllocated, whatever
        the scoring strategy's type, over its resources, on the placement as a whole: the
        proposed pods' requests (cpu and memory with the non-zero defaults) plus what the
        placement's nodes already hold, over their allocatable; 0-100, not normalized. A scalar
        resource no proposed pod requests is left out, as is one no node has."""
        num = wsum = 0
        for name, weight in zip(self._resources, self._weights.tolist()):
            col = nodes.res_index.get(name)
            if name == "cpu":
                req = sum(p.score_cpu for p in pods)
                held = int(nodes.nonzero[rows, 0].sum())
            elif name == "memory":
                req = sum(p.score_memory for p in pods)
                held = int(nodes.nonzero[rows, 1].sum())
            else:
                req = sum(p.score_requests.get(name, 0) for p in pods)
                if req == 0 and is_scalar_resource_name(name):
                    continue
                held = int(nodes.requested[rows, col].sum()) if col is not None else 0
            alloc = int(nodes.allocatable[rows, col].sum()) if col is not None else 0
            if alloc == 0:
                continue
            num += min(req + held, alloc) * 100 // alloc * weight
            wsum += weight
        return num // wsum if wsum else 0


PLUGIN = NodeResourcesFit
