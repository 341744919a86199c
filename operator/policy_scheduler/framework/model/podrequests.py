"""A pod's resource requests as kube-scheduler counts them: upstream component-helpers
resource.PodRequests (v0.37.1) with the options the scheduler passes.

Four totals are derived from one pod (``PodRequests`` below):

- ``requests``: what a node holding the pod counts (upstream PodInfo.CalculateResource, with
  in-place resize GA and InPlacePodLevelResourcesVerticalScaling beta and on): per resource the
  largest of what the spec asks, what the kubelet has allocated (``allocatedResources``) and what
  it has actuated (``resources.requests``), per container, or from the pod-level status when the
  kubelet reports it; with a resize that is ``Infeasible`` (condition PodResizePending) the spec
  is left out. NodeResourcesBalancedAllocation, the scale-down/scale-up events and
  NodeResourcesFit's pod hint read it too.
- ``nonzero_cpu`` / ``nonzero_memory``: the same with the non-zero defaults (100m, 200Mi) for a
  container that asks for none (getNonMissingContainerRequests: with pod-level requests set,
  only for a resource neither the pod level nor any container names): the node's NonZeroRequested.
- ``spec_requests``: the spec alone (NodeResourcesFit's PreFilter, computePodResourceRequest):
  what the pod being scheduled asks. Equal to ``requests`` for a pod without resize status.
- ``fit_score``: NodeResourcesFit's score request of the pod being scheduled
  (resourceAllocationScorer.calculatePodResourceRequest as NewFit builds its scorer: none of the
  feature flags set, so neither status resources nor pod-level requests; the defaults for every
  container that names no cpu or memory). BalancedAllocation's scorer has the flags and reads
  ``requests``. Differs from ``requests`` with the non-zero pair only for pods with pod-level
  requests or status resources.

Every total: containers summed, init containers as the sidecar KEP defines (a restartable init
container adds to the total and to every later init container's usage; the total is at least
the largest init-phase usage), pod-level requests (``spec.resources.requests``: cpu, memory,
hugepages-*) replacing the containers' sum for those resources, then ``spec.overhead`` added.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

from .quantity import QuantityError, resource_value

# Non-zero defaults used for scoring only (pkg/scheduler/util/pod_resources.go).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
_DEFAULTS = {"cpu": DEFAULT_MILLI_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST}

RESIZE_PENDING = "PodResizePending"
INFEASIBLE, DEFERRED = "Infeasible", "Deferred"

RList = dict[str, int]


class PodSpecError(ValueError):
    pass


def parse_list(raw: Any, where: str) -> RList | None:
    """A ResourceList as values (cpu in millicores); None when absent (Go's nil map)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise PodSpecError(f"{where}: must be an object")
    out: RList = {}
    for name, q in raw.items():
        try:
            out[str(name)] = resource_value(str(name), q)
        except QuantityError as e:
            raise PodSpecError(f"{where}.{name}: {e}") from None
    return out


def is_supported_pod_level(name: str) -> bool:
    """upstream IsSupportedPodLevelResource: cpu, memory, hugepages-*."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def resize_pending_reason(status: Mapping[str, Any]) -> str:
    """The reason of the first PodResizePending condition ("Deferred", "Infeasible", ...), or ""."""
    conds = status.get("conditions")
    if not isinstance(conds, list):
        return ""
    for c in conds:
        if isinstance(c, Mapping) and c.get("type") == RESIZE_PENDING:
            return str(c.get("reason") or "")
    return ""


def resize_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a pod's status read here (what-if snapshots keep them): each container
    status's name, allocatedResources and resources.requests, and the pod level's; the
    PodResizePending condition is kept with the other conditions."""
    out: dict[str, Any] = {}
    for k in ("containerStatuses", "initContainerStatuses"):
        kept = []
        for cs in status.get(k) or ():
            if not isinstance(cs, Mapping):
                continue
            t: dict[str, Any] = {}
            if cs.get("allocatedResources") is not None:
                t["allocatedResources"] = cs["allocatedResources"]
            res = cs.get("resources")
            if isinstance(res, Mapping) and res.get("requests") is not None:
                t["resources"] = {"requests": res["requests"]}
            if t:
                kept.append({"name": cs.get("name"), **t})
        if kept:
            out[k] = kept
    if status.get("allocatedResources") is not None:
        out["allocatedResources"] = status["allocatedResources"]
    res = status.get("resources")
    if isinstance(res, Mapping):
        out["resources"] = {"requests": res["requests"]} if res.get("requests") is not None else {}
    return out


def _add(into: RList, other: RList | None) -> None:
    if other:
        for r, v in other.items():
            into[r] = into.get(r, 0) + v


def _max_into(into: RList, other: RList | None) -> None:
    """upstream maxResourceList: a resource missing from ``into`` is taken, even at 0."""
    if other:
        for r, v in other.items():
            if r not in into or v > into[r]:
                into[r] = v


def _max(a: RList | None, *others: RList | None) -> RList:
    out = dict(a) if a else {}
    for o in others:
        _max_into(out, o)
    return out


class _Container(NamedTuple):
    spec: RList | None  # resources.requests
    allocated: RList | None  # its status' allocatedResources
    actuated: RList | None  # its status' resources.requests
    has_status: bool


Getter = Callable[[_Container, bool], "RList | None"]


def _spec(c: _Container, infeasible: bool) -> RList | None:
    return c.spec


def _allocated(c: _Container, infeasible: bool) -> RList | None:
    """upstream containerAllocatedRequests."""
    if c.allocated is not None:
        return c.allocated
    return None if infeasible else c.spec


def _actuated(c: _Container, infeasible: bool) -> RList | None:
    """upstream containerActuatedRequests."""
    if c.actuated is not None:
        return c.actuated
    if c.allocated is not None:
        return c.allocated
    return None if infeasible else c.spec


def _with_non_missing(req: RList | None, non_missing: RList | None) -> RList | None:
    """upstream applyNonMissing: the defaults for resources the container does not name (one it
    names, even at zero, is kept)."""
    if not non_missing:
        return req
    out = dict(req) if req else {}
    for r, v in non_missing.items():
        if r not in out:
            out[r] = v
    return out


def _aggregate(containers: list[_Container], inits: list[tuple[_Container, bool]], get: Getter, infeasible: bool,
               non_missing: RList | None) -> RList:
    """upstream aggregateContainerResourcesByFn."""
    result: RList = {}
    for c in containers:
        _add(result, _with_non_missing(get(c, infeasible), non_missing))
    sidecars: RList = {}
    init_max: RList = {}
    for c, restartable in inits:
        res = _with_non_missing(get(c, infeasible), non_missing)
        if restartable:
            _add(result, res)
            _add(sidecars, res)
            usage = sidecars
        else:
            usage = dict(res) if res else {}
            _add(usage, sidecars)
        _max_into(init_max, usage)
    _max_into(result, init_max)
    return result


class _Parsed(NamedTuple):
    containers: list[_Container]
    inits: list[tuple[_Container, bool]]
    pod_level: RList | None  # spec.resources.requests, None unless a supported resource is named
    overhead: RList | None
    infeasible: bool
    status_alloc: RList | None  # status.allocatedResources
    status_requests: RList | None  # status.resources.requests
    status_resources: bool  # status.resources set (pod level)
    any_status: bool  # some container or the pod reports status resources, or a resize is infeasible


def _statuses(status: Mapping[str, Any]) -> dict[str, tuple[RList | None, RList | None]]:
    """container name -> (allocatedResources, resources.requests) of status.containerStatuses
    then initContainerStatuses (upstream findContainerStatus: the first of a name wins)."""
    out: dict[str, tuple[RList | None, RList | None]] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        lst = status.get(key)
        if not isinstance(lst, list):
            continue
        for i, cs in enumerate(lst):
            if not isinstance(cs, Mapping):
                continue
            name = str(cs.get("name") or "")
            if name in out:
                continue
            where = f"status.{key}[{i}]"
            alloc = parse_list(cs.get("allocatedResources"), f"{where}.allocatedResources")
            res = cs.get("resources")
            req = None
            if isinstance(res, Mapping):
                req = parse_list(res.get("requests"), f"{where}.resources.requests")
            if alloc is not None or req is not None:
                out[name] = (alloc, req)
    return out


def _container(c: Any, where: str, statuses: Mapping[str, tuple[RList | None, RList | None]]) -> _Container:
    if not isinstance(c, Mapping):
        raise PodSpecError(f"{where}: must be an object")
    res = c.get("resources")
    spec = parse_list(res.get("requests"), f"{where}.resources.requests") if isinstance(res, Mapping) else None
    st = statuses.get(str(c.get("name") or ""))
    if st is None:
        return _Container(spec, None, None, False)
    return _Container(spec, st[0], st[1], True)


def _parse(spec: Mapping[str, Any], status: Mapping[str, Any]) -> _Parsed:
    statuses = _statuses(status) if status else {}
    containers = [_container(c, f"spec.containers[{i}]", statuses) for i, c in enumerate(spec.get("containers") or ())]
    inits = [(_container(c, f"spec.initContainers[{i}]", statuses),
              isinstance(c, Mapping) and c.get("restartPolicy") == "Always")
             for i, c in enumerate(spec.get("initContainers") or ())]
    res = spec.get("resources")
    pod_level = parse_list(res.get("requests"), "spec.resources.requests") if isinstance(res, Mapping) else None
    if pod_level is not None and not any(is_supported_pod_level(r) for r in pod_level):
        pod_level = None  # upstream IsPodLevelRequestsSet
    overhead = parse_list(spec.get("overhead"), "spec.overhead")
    infeasible = bool(status) and resize_pending_reason(status) == INFEASIBLE
    status_alloc = status_requests = None
    status_resources = False
    if status:
        status_alloc = parse_list(status.get("allocatedResources"), "status.allocatedResources")
        sres = status.get("resources")
        if isinstance(sres, Mapping):
            status_resources = True
            status_requests = parse_list(sres.get("requests"), "status.resources.requests")
    any_status = bool(statuses) or infeasible or status_alloc is not None or status_resources
    return _Parsed(containers, inits, pod_level, overhead, infeasible, status_alloc, status_requests,
                   status_resources, any_status)


def _pod_requests(p: _Parsed, use_status: bool, non_missing: RList | None = None, pod_level: bool = True) -> RList:
    """upstream PodRequests with UseStatusResources=``use_status``,
    InPlacePodLevelResourcesVerticalScalingEnabled (beta, on), SkipPodLevelResources=not
    ``pod_level``, NonMissingContainerRequests=``non_missing``, overhead included."""
    if not use_status:
        reqs = _aggregate(p.containers, p.inits, _spec, False, non_missing)
    else:
        spec_reqs = _aggregate(p.containers, p.inits, _spec, p.infeasible, non_missing)
        if p.status_alloc is not None and p.status_requests is not None:
            allocated, actuated = p.status_alloc, p.status_requests
        else:
            allocated = _aggregate(p.containers, p.inits, _allocated, p.infeasible, non_missing)
            actuated = _aggregate(p.containers, p.inits, _actuated, p.infeasible, non_missing)
        reqs = _max(actuated, allocated) if p.infeasible else _max(spec_reqs, actuated, allocated)
    if pod_level and p.pod_level is not None:
        effective: RList | None = p.pod_level
        if use_status and p.status_resources:  # upstream effectivePodLevelResources
            effective = _max(None if p.infeasible else p.pod_level, p.status_requests, p.status_alloc)
        for r, v in (effective or {}).items():
            if is_supported_pod_level(r):
                reqs[r] = v
    _add(reqs, p.overhead)
    return reqs


class PodRequests(NamedTuple):
    requests: RList
    nonzero_cpu: int
    nonzero_memory: int
    spec_requests: RList | None  # None: the same as ``requests``
    fit_score: RList | None  # None: ``requests`` with cpu and memory from the non-zero pair


def _single(c: _Container) -> PodRequests:
    """The common case: one container, no init containers, no pod-level requests, no overhead,
    no status resources: its own requests."""
    req = dict(c.spec) if c.spec else {}
    return PodRequests(req, req.get("cpu", DEFAULT_MILLI_CPU_REQUEST), req.get("memory", DEFAULT_MEMORY_REQUEST),
                       None, None)


def pod_requests_of(spec: Mapping[str, Any], status: Mapping[str, Any] | None = None) -> PodRequests:
    """Every total of the module docstring; raises PodSpecError on a malformed quantity."""
    p = _parse(spec, status or {})
    if len(p.containers) == 1 and not p.inits and p.pod_level is None and p.overhead is None and not p.any_status:
        return _single(p.containers[0])
    requests = _pod_requests(p, True)
    # upstream getNonMissingContainerRequests
    if p.pod_level is None:
        non_missing = _DEFAULTS
    else:
        non_missing = {r: v for r, v in _DEFAULTS.items() if r not in requests}
    nz = _pod_requests(p, True, non_missing) if non_missing else requests
    nonzero = (nz.get("cpu", 0), nz.get("memory", 0))
    spec_requests = _pod_requests(p, False) if p.any_status else None
    if spec_requests == requests:
        spec_requests = None
    fit_score = None
    if p.pod_level is not None or p.any_status:
        fit_score = _pod_requests(p, False, _DEFAULTS, pod_level=False)
        if fit_score == {**requests, "cpu": nonzero[0], "memory": nonzero[1]}:
            fit_score = None
    return PodRequests(requests, nonzero[0], nonzero[1], spec_requests, fit_score)


def compute_requests(spec: Mapping[str, Any], defaults: bool = False) -> RList:
    """upstream PodRequests of a pod spec without status: ``defaults`` applies the non-zero
    cpu/memory defaults to every container that names none."""
    return _pod_requests(_parse(spec, {}), False, _DEFAULTS if defaults else None)
