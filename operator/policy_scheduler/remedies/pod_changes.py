"""Candidate changes to the pod, drawn from the nodes each could open: a node rejected by one
plugin only (``Verdicts.only``) is what changing what that plugin reads can open. Each candidate
is a JSON Patch on the pod (patch.py) with its words and its size; none is verified here (the
search, search.py, simulates each).

Every loop over the pod's or the nodes' lists is capped (``Caps``): a pod with thousands of
tolerations, terms or ports, or a node with thousands of taints, costs at most the caps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..framework.model.labels import NodeSelectorTerm
from ..framework.model.nodetable import NodeTable
from ..framework.model.podinfo import DO_NOT_SCHEDULE, SCHEDULE_ANYWAY, PodInfo
from ..framework.model.quantity import QuantityError, resource_value
from ..framework.model.taints import NO_EXECUTE, NO_SCHEDULE, tolerated
from .patch import pointer
from .probe import Verdicts
from .result import (DROP_HOST_PORT, DROP_VOLUME, DROP_NODE_SELECTOR, LOWER_REQUEST, RELAX_SPREAD, TOLERATE_TAINT,
                     WIDEN_NODE_AFFINITY)

FIT, TAINTS, AFFINITY, SPREAD, PORTS = "NodeResourcesFit", "TaintToleration", "NodeAffinity", "PodTopologySpread", \
    "NodePorts"
INSUFFICIENT = "Insufficient "
NATIVE = ("cpu", "memory", "ephemeral-storage")  # requests may differ from limits only for these
MAX_SKEW = 2**31 - 1  # maxSkew is an int32


@dataclass(frozen=True)
class Caps:
    """Bounds on what one search looks at."""

    rows: int = 256  # nodes examined per kind (of those a kind could open)
    items: int = 16  # entries of one list read (terms, expressions, ports, containers, taints of a node, ...)
    per_kind: int = 4  # candidates of one kind simulated
    skew_steps: int = 24  # filter passes one maxSkew search may take
    pod_lists: int = 256  # a pod with a longer list (tolerations, terms, ports, ...) is not searched at all


def too_large(pod: PodInfo, raw: Mapping[str, Any], caps: Caps) -> str:
    """Why the pod is too large to search ("" when it is not): each simulation runs the pod's
    cycle, whose cost grows with these lists, so a pod past the caps costs one cycle, not many."""
    spec = _spec(raw)
    terms = pod.required_node_affinity.terms if pod.required_node_affinity is not None else ()
    sizes = {"tolerations": len(pod.tolerations), "nodeSelector keys": len(pod.node_selector),
             "required node affinity terms": len(terms),
             "node affinity expressions": sum(len(t.expressions) + len(t.fields) for t in terms),
             "topology spread constraints": len(pod.spread_constraints), "host ports": len(pod.host_ports),
             "containers": len(_list(spec.get("containers"))) + len(_list(spec.get("initContainers"))),
             "volumes": len(pod.volumes), "resource claims": len(pod.resource_claims),
             "pod affinity terms": len(pod.required_affinity) + len(pod.required_anti_affinity)
             + len(pod.preferred_affinity) + len(pod.preferred_anti_affinity)}
    over = [f"{n} {what}" for what, n in sizes.items() if n > caps.pod_lists]
    return f"the pod is too large to search ({', '.join(over)}; at most {caps.pod_lists} each)" if over else ""


@dataclass
class Candidate:
    kind: str
    change: str
    ops: list[dict[str, Any]]
    size: float
    # a family of changes searched for the smallest that opens a node (maxSkew): value -> (words, ops)
    search: Callable[[int], tuple[str, list[dict[str, Any]], float]] | None = None
    bounds: tuple[int, int] = (0, 0)
    extra: dict[str, Any] = field(default_factory=dict)


def _spec(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    s = raw.get("spec")
    return s if isinstance(s, Mapping) else {}


def _list(v: Any) -> list:
    return v if isinstance(v, list) else []


def _dict(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


# ---------------------------------------------------------------------------------- quantities
def quantity(resource: str, v: int) -> str:
    """A value as a quantity string: cpu in cores or millicores, byte sizes with a binary suffix
    when exact, other resources as integers."""
    if resource == "cpu":
        return str(v // 1000) if v % 1000 == 0 else f"{v}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, mult in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if v and v % mult == 0:
                return f"{v // mult}{suffix}"
    return str(v)


def round_down(resource: str, v: int) -> int:
    """A byte size rounded down to whole MiB (64Mi and more), for a readable quantity."""
    if resource in ("memory", "ephemeral-storage") and v >= 64 << 20:
        return v - v % (1 << 20)
    return v


def _value(resource: str, q: Any) -> int | None:
    try:
        return resource_value(resource, q)
    except (QuantityError, TypeError, ValueError):
        return None


def request_ops(raw: Mapping[str, Any], resource: str, want: int, caps: Caps) -> list[dict[str, Any]] | None:
    """JSON Patch lowering the pod's ``resource`` request to at most ``want`` (what
    NodeResourcesFit compares): the pod-level request when set; else every init container asking
    more than the budget is lowered to it and the containers' (and sidecars') requests are cut,
    the largest first, until their sum fits; extended resources and hugepages keep their limit
    equal to the request. None when no such change exists within the caps."""
    spec = _spec(raw)
    overhead = _value(resource, _dict(spec.get("overhead")).get(resource, 0)) or 0
    budget = want - overhead
    if budget < 0:
        return None
    pod_level = _dict(_dict(spec.get("resources")).get("requests"))
    if resource in pod_level:
        return [{"op": "replace", "path": pointer("spec", "resources", "requests", resource),
                 "value": quantity(resource, budget)}]
    ops: list[dict[str, Any]] = []
    both = resource not in NATIVE

    def set_to(kind: str, i: int, c: Mapping[str, Any], v: int) -> None:
        res = _dict(c.get("resources"))
        reqs = _dict(res.get("requests"))
        if "resources" not in c:
            ops.append({"op": "add", "path": pointer("spec", kind, i, "resources"), "value": {}})
        if "requests" not in res:
            ops.append({"op": "add", "path": pointer("spec", kind, i, "resources", "requests"), "value": {}})
        ops.append({"op": "replace" if resource in reqs else "add",
                    "path": pointer("spec", kind, i, "resources", "requests", resource), "value": quantity(resource, v)})
        if both and resource in _dict(res.get("limits")):
            ops.append({"op": "replace", "path": pointer("spec", kind, i, "resources", "limits", resource),
                        "value": quantity(resource, v)})

    def asked(c: Mapping[str, Any]) -> int:
        res = _dict(c.get("resources"))
        q = _dict(res.get("requests")).get(resource, _dict(res.get("limits")).get(resource))
        return 0 if q is None else (_value(resource, q) or 0)

    inits = _list(spec.get("initContainers"))
    containers = _list(spec.get("containers"))
    if len(inits) > caps.items or len(containers) > caps.items:
        return None
    running: list[tuple[int, str, int, Mapping[str, Any]]] = []  # (asked, kind, index, container)
    for i, c in enumerate(inits):
        if not isinstance(c, Mapping):
            return None
        if c.get("restartPolicy") == "Always":
            running.append((asked(c), "initContainers", i, c))
        elif asked(c) > budget:
            set_to("initContainers", i, c, budget)
    for i, c in enumerate(containers):
        if not isinstance(c, Mapping):
            return None
        running.append((asked(c), "containers", i, c))
    excess = sum(a for a, *_ in running) - budget
    for a, kind, i, c in sorted(running, key=lambda x: -x[0]):
        if excess <= 0:
            break
        take = min(a, excess)
        set_to(kind, i, c, a - take)
        excess -= take
    return ops if ops and excess <= 0 else None


def lower_requests(pod: PodInfo, raw: Mapping[str, Any], table: NodeTable, v: Verdicts, caps: Caps) -> list[Candidate]:
    """Per set of insufficient resources, the smallest cut that opens a node: the requests
    lowered to that node's free amount (allocatable less requested). Nodes with too many pods,
    or already over their allocatable, cannot open this way."""
    rows = np.flatnonzero(v.only({FIT}))[: caps.rows]
    if not len(rows):
        return []
    closed = np.zeros(v.n, dtype=bool)
    short: dict[str, np.ndarray] = {}
    for reason, mask in v.reasons.get(FIT, ()):
        if reason.startswith(INSUFFICIENT) and "(" not in reason:
            short[reason[len(INSUFFICIENT):]] = mask
        else:
            closed |= mask  # Too many pods, overcommitted nodes
    req = pod.spec_requests
    best: dict[tuple[str, ...], tuple[float, dict[str, int]]] = {}
    for row in rows.tolist():
        if closed[row]:
            continue
        names = tuple(sorted(r for r, m in list(short.items())[: caps.items] if m[row]))
        if not names:
            continue
        target: dict[str, int] = {}
        size = 0.0
        for r in names:
            col = table.res_index.get(r)
            asked = req.get(r, 0)
            if col is None or asked <= 0:
                break
            free = round_down(r, int(table.allocatable[row, col] - table.requested[row, col]))
            if free <= 0 or free >= asked:  # a request of 0 is no request: not a remedy
                break
            target[r] = free
            size += (asked - free) / asked
        else:
            if names not in best or size < best[names][0]:
                best[names] = (size, target)
    out = []
    for names, (size, target) in best.items():
        ops: list[dict[str, Any]] = []
        for r, want in target.items():
            got = request_ops(raw, r, want, caps)
            if got is None:
                break
            ops += got
        else:
            words = " and ".join(f"the {r} request to at most {quantity(r, w)}" for r, w in target.items())
            out.append(Candidate(LOWER_REQUEST, f"lower {words}", ops, size, extra={"requests": target}))
    return sorted(out, key=lambda c: c.size)[: caps.per_kind]


# ---------------------------------------------------------------------------------- taints
def _toleration(key: str, value: str, effect: str) -> dict[str, str]:
    if value:
        return {"key": key, "operator": "Equal", "value": value, "effect": effect}
    return {"key": key, "operator": "Exists", "effect": effect}


def tolerate_taints(pod: PodInfo, raw: Mapping[str, Any], table: NodeTable, v: Verdicts, caps: Caps) -> list[Candidate]:
    """Per set of untolerated NoSchedule/NoExecute taints a node has, tolerating them."""
    rows = np.flatnonzero(v.only({TAINTS}))[: caps.rows]
    groups: dict[tuple, int] = {}
    for row in rows.tolist():
        taints = table.specs[row].taints
        if len(taints) > caps.items:
            continue
        need = tuple(sorted({(t.key, t.value, t.effect) for t in taints if t.effect in (NO_SCHEDULE, NO_EXECUTE)
                             and not tolerated(t, pod.tolerations)}))
        if need:
            groups[need] = groups.get(need, 0) + 1
    has = isinstance(_spec(raw).get("tolerations"), list)
    out = []
    for need, count in sorted(groups.items(), key=lambda g: (len(g[0]), -g[1], g[0])):
        tols = [_toleration(*t) for t in need]
        ops = ([{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in tols] if has else
               [{"op": "add", "path": "/spec/tolerations", "value": tols}])
        words = ", ".join(f"{k}={val}:{e}" if val else f"{k}:{e}" for k, val, e in need)
        out.append(Candidate(TOLERATE_TAINT, f"tolerate taint{'s' if len(need) > 1 else ''} {words}", ops,
                             float(len(need))))
    return out[: caps.per_kind]


# ---------------------------------------------------------------------------------- node affinity
_AFF = ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


def node_affinity(pod: PodInfo, raw: Mapping[str, Any], table: NodeTable, v: Verdicts, caps: Caps) -> list[Candidate]:
    """Per node rejected only by NodeAffinity: the nodeSelector keys it does not match dropped,
    and one required term made to match it (an ``In`` widened by the node's value, any other
    expression it fails dropped; a term that would be left empty: the required affinity dropped)."""
    rows = np.flatnonzero(v.only({AFFINITY}))[: caps.rows]
    if not len(rows):
        return []
    selector = list(pod.node_selector.items())
    req = pod.required_node_affinity
    if len(selector) > caps.items or (req is not None and len(req.terms) > caps.items):
        return []
    found: dict[tuple, int] = {}
    for row in rows.tolist():
        spec = table.specs[row]
        labels = spec.labels
        keys = tuple(k for k, val in selector if labels.get(k) != val)
        if req is None:
            if keys:
                found[(keys, -1, ())] = found.get((keys, -1, ()), 0) + 1
            continue
        for i, term in enumerate(req.terms):
            if len(term.expressions) > caps.items or any(not f.matches({"metadata.name": spec.name}) for f in term.fields):
                continue
            changes = []
            for j, e in enumerate(term.expressions):
                if not e.matches(labels):
                    changes.append((j, labels[e.key]) if e.operator == "In" and e.key in labels else (j, None))
            if not changes and not keys:
                continue
            if not term.fields and changes and all(val is None for _, val in changes) \
                    and len(changes) == len(term.expressions):
                changes = [(-1, None)]  # the term would be empty (it would match nothing): drop the affinity
            key = (keys, i, tuple(changes))
            found[key] = found.get(key, 0) + 1
    out = []
    for (keys, i, changes), count in found.items():
        ops: list[dict[str, Any]] = [{"op": "remove", "path": pointer("spec", "nodeSelector", k)} for k in keys]
        words = [f"drop nodeSelector {k}={pod.node_selector[k]}" for k in keys]
        size = float(len(keys))
        if changes == ((-1, None),):
            ops.append({"op": "remove", "path": pointer(*_AFF)})
            words.append("drop the required node affinity")
            size += len(req.terms[i].expressions) if req else 1
        else:
            chosen: NodeSelectorTerm | None = req.terms[i] if req else None
            for j, val in changes:
                if val is not None and chosen is not None:
                    e = chosen.expressions[j]
                    ops.append({"op": "add", "path": pointer(*_AFF, "nodeSelectorTerms", i, "matchExpressions", j,
                                                             "values", "-"), "value": val})
                    words.append(f"add {val} to {e.key} In [{', '.join(e.values[:4])}] in required node affinity "
                                 f"term {i}")
                    size += 0.5
            for j, val in sorted(changes, reverse=True):
                if val is None and chosen is not None:
                    e = chosen.expressions[j]
                    ops.append({"op": "remove", "path": pointer(*_AFF, "nodeSelectorTerms", i, "matchExpressions", j)})
                    shown = f" [{', '.join(e.values[:4])}]" if e.values else ""
                    words.append(f"drop {e.key} {e.operator}{shown} from required node affinity term {i}")
                    size += 1
        kind = DROP_NODE_SELECTOR if not changes else WIDEN_NODE_AFFINITY
        out.append(Candidate(kind, "; ".join(words), ops, size, extra={"count": count}))
    return sorted(out, key=lambda c: (c.size, -c.extra["count"], c.change))[: caps.per_kind]


# ---------------------------------------------------------------------------------- topology spread
def relax_spread(pod: PodInfo, raw: Mapping[str, Any], table: NodeTable, v: Verdicts, caps: Caps) -> list[Candidate]:
    """Per DoNotSchedule constraint (when some node is rejected by PodTopologySpread only): the
    smallest maxSkew that opens a node (searched), and whenUnsatisfiable: ScheduleAnyway."""
    if not v.only({SPREAD}).any():
        return []
    raw_list = _list(_spec(raw).get("topologySpreadConstraints"))
    if len(raw_list) != len(pod.spread_constraints) or len(raw_list) > caps.items:
        return []
    out = []
    for i, c in enumerate(pod.spread_constraints):
        if c.when_unsatisfiable != DO_NOT_SCHEDULE:
            continue
        what = f"topology spread constraint {i} ({c.topology_key}, maxSkew {c.max_skew})"

        def skew(m: int, i: int = i, what: str = what, old: int = c.max_skew) -> tuple[str, list[dict[str, Any]], float]:
            return (f"raise maxSkew of {what} to {m}",
                    [{"op": "replace", "path": pointer("spec", "topologySpreadConstraints", i, "maxSkew"), "value": m}],
                    (m - old) / m)

        out.append(Candidate(RELAX_SPREAD, "", [], 0.0, search=skew, bounds=(c.max_skew + 1, MAX_SKEW)))
        out.append(Candidate(RELAX_SPREAD, f"set whenUnsatisfiable of {what} to {SCHEDULE_ANYWAY}",
                             [{"op": "replace", "path": pointer("spec", "topologySpreadConstraints", i,
                                                                "whenUnsatisfiable"), "value": SCHEDULE_ANYWAY}],
                             1.0))
    return out[: 2 * caps.per_kind]


# ---------------------------------------------------------------------------------- host ports
def drop_host_ports(pod: PodInfo, raw: Mapping[str, Any], table: NodeTable, v: Verdicts,
                    caps: Caps) -> list[Candidate]:
    """Per host port of the pod in use on some node NodePorts alone rejects: that hostPort
    dropped (each port alone, then all of them). Not for a hostNetwork pod (its hostPort is its
    containerPort)."""
    rows = np.flatnonzero(v.only({PORTS}))[: caps.rows]
    spec = _spec(raw)
    if not len(rows) or spec.get("hostNetwork"):
        return []
    where: list[tuple[str, int, int, Mapping[str, Any]]] = []
    for kind in ("initContainers", "containers"):
        cs = _list(spec.get(kind))
        if len(cs) > caps.items:
            return []
        for i, c in enumerate(cs):
            if not isinstance(c, Mapping) or (kind == "initContainers" and c.get("restartPolicy") != "Always"):
                continue
            ports = _list(c.get("ports"))
            if len(ports) > caps.items:
                return []
            for j, p in enumerate(ports):
                if isinstance(p, Mapping) and p.get("hostPort"):
                    where.append((kind, i, j, p))
    used: dict[int, int] = {}
    for row in rows.tolist():
        taken = {port for (_, _, port) in table.used_ports[row]}
        for _, _, _, p in where:
            if p.get("hostPort") in taken:
                used[id(p)] = used.get(id(p), 0) + 1
    out = []
    for kind, i, j, p in where:
        if id(p) in used:
            out.append(Candidate(DROP_HOST_PORT,
                                 f"drop hostPort {p.get('hostPort')}/{p.get('protocol') or 'TCP'} of {kind[:-1]} "
                                 f"{_dict(_list(spec.get(kind))[i]).get('name', i)}",
                                 [{"op": "remove", "path": pointer("spec", kind, i, "ports", j, "hostPort")}], 1.0,
                                 extra={"count": used[id(p)]}))
    out.sort(key=lambda c: -c.extra["count"])
    if len(out) > 1:
        ops = [{"op": "remove", "path": pointer("spec", kind, i, "ports", j, "hostPort")} for kind, i, j, p in where]
        out.append(Candidate(DROP_HOST_PORT, f"drop the pod's {len(where)} hostPorts", ops, float(len(where)),
                             extra={"count": 0}))
    return out[: caps.per_kind]


# ---------------------------------------------------------------------------------- volumes
VOLUMES = ("VolumeBinding", "VolumeRestrictions", "VolumeZone", "NodeVolumeLimits")


def drop_volumes(pod: PodInfo, raw: Mapping[str, Any], table: NodeTable, v: Verdicts, caps: Caps) -> list[Candidate]:
    """When the volume plugins alone reject some nodes (or one rejected the pod at PreFilter):
    each volume they read (a claim, an inline CSI volume, a legacy disk) dropped with its mounts,
    the plugins' reasons saying why it blocks."""
    if v.prefilter is not None and v.prefilter.plugin in VOLUMES:
        why = v.prefilter.message()
    elif v.only(set(VOLUMES)).any():
        why = "; ".join(sorted({r for p in VOLUMES for r, _ in v.reasons.get(p, ())}))
    else:
        return []
    spec = _spec(raw)
    vols = _list(spec.get("volumes"))
    if len(vols) > caps.items:
        return []
    kept = {pv.name: pv for pv in pod.volumes}
    out = []
    for i, vol in enumerate(vols):
        name = _dict(vol).get("name")
        pv = kept.get(name) if isinstance(name, str) else None
        if pv is None:
            continue
        ops: list[dict[str, Any]] = []
        for kind in ("initContainers", "containers"):
            cs = _list(spec.get(kind))
            if len(cs) > caps.items:
                return []
            for ci, c in enumerate(cs):
                mounts = _list(_dict(c).get("volumeMounts"))
                if len(mounts) > caps.items:
                    return []
                for mi in reversed(range(len(mounts))):
                    if _dict(mounts[mi]).get("name") == name:
                        ops.append({"op": "remove", "path": pointer("spec", kind, ci, "volumeMounts", mi)})
        ops.append({"op": "remove", "path": pointer("spec", "volumes", i)})
        what = (f"claim {pv.claim}" if pv.has_claim else f"CSI driver {pv.csi_driver}" if pv.csi_driver else
                "a disk")
        out.append(Candidate(DROP_VOLUME, f"drop volume {name} ({what}) and its mounts: {why}", ops, 1.0))
    return out[: caps.per_kind]


POD_KINDS = (lower_requests, tolerate_taints, node_affinity, relax_spread, drop_host_ports, drop_volumes)
