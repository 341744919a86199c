"""Kubernetes' own PodGroups (``scheduling.k8s.io``, behind the ``GenericWorkload`` feature gate;
``v1beta1`` and ``v1alpha3`` in 1.37, kube-scheduler reads v1beta1), as GangScheduling
(gang_scheduling.py) reads them: the policy
(``spec.schedulingPolicy.gang.minCount``, or ``basic``), the topology constraint
(``spec.schedulingConstraints.topology[0].key``, behind ``TopologyAwareWorkloadScheduling``), and
the members: pods whose ``spec.schedulingGroup.podGroupName`` names the group, in its namespace.

The machinery is scheduler-plugins' (cache.py): counts, reservations, events
for the queue (here on the ``scheduling.k8s.io/PodGroup`` resource). On top of it: the node each
member was assumed on (the placed members' domain), the group's priority, preemption policy and
disruption mode (group preemption), and the status upstream keeps: the
``PodGroupInitiallyScheduled`` condition as the last pod-group cycle left it (``set_condition``):
True (reason ``Scheduled``) once a cycle placed the group, never changed after that; False with
reason ``Unschedulable`` or ``SchedulerError`` and the cycle's message otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, cast

from ...framework.cycle.podgroup_result import MAX_DEPTH, native_group_key  # noqa: F401 (native_group_key re-exported)
from ...framework.events import ActionType, ClusterEvent, Resource
from ...framework.model.podinfo import PodSpecError, compute_requests, scheduling_group_name
from ...framework.model.quantity import QuantityError
from .cache import PodGroup, PodGroupCache, PodGroupChange

GROUP, PLURAL = "scheduling.k8s.io", "podgroups"
# served versions, the one to use first; the operator reads the API's discovery (engine.py)
VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
DEFAULT_VERSION = VERSIONS[0]
CONDITION = "PodGroupInitiallyScheduled"  # 1.37's condition type (v1alpha2 of 1.36 called it PodGroupScheduled)
MAX_MESSAGE = 32768  # metav1.Condition.message


def api_path(version: str = DEFAULT_VERSION) -> str:
    return f"/apis/{GROUP}/{version}/{PLURAL}"


# CompositePodGroups (multi-level gangs): v1alpha3 only in 1.37, behind the CompositePodGroup gate
COMPOSITE_VERSION, COMPOSITE_PLURAL = "v1alpha3", "compositepodgroups"
COMPOSITE_PATH = f"/apis/{GROUP}/{COMPOSITE_VERSION}/{COMPOSITE_PLURAL}"


NATIVE_POD_GROUP_ADD = ClusterEvent(Resource.NATIVE_POD_GROUP, ActionType.ADD)
NATIVE_POD_GROUP_UPDATE = ClusterEvent(Resource.NATIVE_POD_GROUP, ActionType.UPDATE)
NATIVE_POD_GROUP_DELETE = ClusterEvent(Resource.NATIVE_POD_GROUP, ActionType.DELETE)
# ours: a group's membership changed (a pod naming it added, removed, bound, or its gates gone);
# upstream's GangScheduling registers UnscheduledPod/Add and AssignedPod/Add for the same purpose
NATIVE_POD_GROUP_MEMBERS = ClusterEvent(Resource.NATIVE_POD_GROUP, ActionType.UPDATE, "NativePodGroupMembersChange")


@dataclass(slots=True)
class NativePodGroup(PodGroup):
    """A ``scheduling.k8s.io`` PodGroup. ``min_member`` is the gang's minCount (1 for a basic
    group), so the shared machinery reads it as it reads scheduler-plugins' minMember."""

    gang: bool = False
    topology_key: str = ""  # spec.schedulingConstraints.topology[0].key ("" : none)
    api_version: str = ""
    generation: int = 0
    priority: int = 0  # spec.priority (set by admission from priorityClassName; nil = 0)
    preemption_policy: str = "PreemptLowerPriority"  # spec.preemptionPolicy
    preemption_policy_set: bool = False  # spec.preemptionPolicy present
    disruption_all: bool = False  # spec.disruptionMode: {all: {}}
    parent: str = ""  # spec.parentCompositePodGroupName

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "NativePodGroup":
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        policy = spec.get("schedulingPolicy") or {}
        if not isinstance(policy, Mapping):
            raise ValueError("spec.schedulingPolicy: not an object")
        gang = policy.get("gang")
        min_count = 1
        if gang is not None:
            if not isinstance(gang, Mapping):
                raise ValueError("spec.schedulingPolicy.gang: not an object")
            mc = gang.get("minCount", 1)
            if isinstance(mc, bool) or not isinstance(mc, int):
                raise ValueError(f"spec.schedulingPolicy.gang.minCount: not an integer: {mc!r}")
            min_count = max(int(mc), 1)
        constraints = spec.get("schedulingConstraints") or {}
        topology = constraints.get("topology") if isinstance(constraints, Mapping) else None
        key = ""
        if topology:
            if not isinstance(topology, list) or not isinstance(topology[0], Mapping):
                raise ValueError("spec.schedulingConstraints.topology: not a list of objects")
            key = str(topology[0].get("key") or "")  # upstream reads the first one (the API allows one)
        priority = spec.get("priority")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise ValueError(f"spec.priority: not an integer: {priority!r}")
        pp = spec.get("preemptionPolicy")
        if pp is not None and pp not in ("Never", "PreemptLowerPriority"):
            raise ValueError(f"spec.preemptionPolicy: Unsupported value: {pp!r}: supported values: "
                             f"\"Never\", \"PreemptLowerPriority\"")
        dm = spec.get("disruptionMode")
        if dm is not None and not isinstance(dm, Mapping):
            raise ValueError("spec.disruptionMode: not an object")
        return cls(namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name") or ""),
                   min_member=min_count, creation_timestamp=str(meta.get("creationTimestamp") or ""),
                   uid=str(meta.get("uid") or ""), status=dict(body.get("status") or {}),
                   gang=gang is not None, topology_key=key, api_version=str(body.get("apiVersion") or ""),
                   generation=int(meta.get("generation") or 0), priority=int(priority or 0),
                   preemption_policy=str(pp or "PreemptLowerPriority"), preemption_policy_set=pp is not None,
                   disruption_all=dm is not None and dm.get("all") is not None,
                   parent=str(spec.get("parentCompositePodGroupName") or ""))

    def same_spec(self, other: PodGroup) -> bool:
        return PodGroup.same_spec(self, other) and isinstance(other, NativePodGroup) and \
            (self.gang, self.topology_key, self.priority, self.preemption_policy, self.disruption_all, self.parent) == \
            (other.gang, other.topology_key, other.priority, other.preemption_policy, other.disruption_all,
             other.parent)


@dataclass(slots=True)
class CompositePodGroup(NativePodGroup):
    """A ``scheduling.k8s.io/v1alpha3`` CompositePodGroup: a group of groups. ``min_member`` is
    the gang's ``minGroupCount`` (1 for basic): how many child groups must be satisfied."""

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> "CompositePodGroup":
        spec = dict(body.get("spec") or {})
        policy = spec.get("schedulingPolicy") or {}
        if not isinstance(policy, Mapping):
            raise ValueError("spec.schedulingPolicy: not an object")
        gang = policy.get("gang")
        if gang is not None:
            if not isinstance(gang, Mapping):
                raise ValueError("spec.schedulingPolicy.gang: not an object")
            mgc = gang.get("minGroupCount", 1)
            if isinstance(mgc, bool) or not isinstance(mgc, int):
                raise ValueError(f"spec.schedulingPolicy.gang.minGroupCount: not an integer: {mgc!r}")
            spec["schedulingPolicy"] = {"gang": {"minCount": mgc}}
        pg = NativePodGroup.from_dict({**body, "spec": spec})
        return cls(**{f: getattr(pg, f) for f in NativePodGroup.__dataclass_fields__})


class NativePodGroupCache(PodGroupCache):
    EVENTS = (NATIVE_POD_GROUP_ADD, NATIVE_POD_GROUP_UPDATE, NATIVE_POD_GROUP_DELETE, NATIVE_POD_GROUP_MEMBERS)

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._assumed_on: dict[str, str] = {}  # member pod key -> the node it was assumed on
        self._want: dict[str, tuple[str, str, str]] = {}  # group -> the condition its last cycle left
        self._cond: dict[str, dict[str, Any]] = {}  # group -> the condition last computed
        self.requests: dict[str, dict[str, int]] = {}  # member pod key -> its requests
        self.composites: dict[str, CompositePodGroup] = {}  # ns/name -> CompositePodGroup
        # called when a cycle set a condition: the operator's status writer writes it at once
        # (upstream patches it as the cycle ends), not at its next round
        self.on_condition: Callable[[], None] | None = None

    def get(self, key: str | None) -> NativePodGroup | None:
        return cast("NativePodGroup | None", self.groups.get(key) if key else None)  # parse() makes every group one

    # ------------------------------------------------------------------ CompositePodGroups
    def apply_composite(self, event: str, body: Mapping[str, Any]) -> list[tuple[ClusterEvent, Any, Any]]:
        """A CompositePodGroup watch event: Add, Update (spec changed) or Delete for the queue,
        with PodGroupChange objects whose group is the CompositePodGroup. ValueError for a spec
        that cannot be parsed (the composite then counts as absent)."""
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        old = self.composites.get(key)
        add, update, delete, _ = self.EVENTS
        if event == "DELETED":
            if old is None:
                return []
            del self.composites[key]
            return [(delete, PodGroupChange(key, old), None)]
        try:
            new = CompositePodGroup.from_dict(body)
        except ValueError:
            if old is not None:
                del self.composites[key]
                return [(delete, PodGroupChange(key, old), None)]
            raise
        self.composites[key] = new
        if old is None:
            return [(add, None, PodGroupChange(key, new))]
        if old.same_spec(new):
            return []
        return [(update, PodGroupChange(key, old), PodGroupChange(key, new))]

    def root_of(self, key: str, composite: bool = False) -> tuple[bool, str] | None:
        """The root of the hierarchy of the PodGroup ``key`` (of the CompositePodGroup, with
        ``composite``): (is a composite, its key); None when a parent does not exist (or the chain
        of parents is a cycle or deeper than MAX_DEPTH)."""
        ns = key.split("/", 1)[0]
        g = self.composites.get(key) if composite else self.groups.get(key)
        for _ in range(MAX_DEPTH):
            if g is None:
                return None
            parent = getattr(g, "parent", "")
            if not parent:
                return composite, key
            key, composite = f"{ns}/{parent}", True
            g = self.composites.get(key)
        return None

    def children(self, ckey: str) -> list[tuple[bool, str]]:
        """The child groups of CompositePodGroup ``ckey``: (is a composite, key), in upstream's
        order (GetChildGroups): by creation time, then name."""
        ns, name = ckey.split("/", 1)
        out = [(c.creation_timestamp, c.name, True, k) for k, c in self.composites.items()
               if c.parent == name and c.namespace == ns]
        out += [(g.creation_timestamp, g.name, False, k) for k, g in self.groups.items()
                if isinstance(g, NativePodGroup) and g.parent == name and g.namespace == ns]
        return [(c, k) for _, _, c, k in sorted(out)]

    def leaves(self, composite: bool, key: str, depth: int = 0) -> list[str]:
        """The PodGroups under a hierarchy node (the PodGroup itself for a leaf)."""
        if not composite:
            return [key]
        if depth >= MAX_DEPTH:
            return []
        return [leaf for c, k in self.children(key) for leaf in self.leaves(c, k, depth + 1)]

    def tree_ready(self, ckey: str, count, depth: int = 0) -> bool:
        """upstream isCPGTreeReady: at least minGroupCount (1 for basic) children ready: a
        PodGroup whose ``count(key)`` reaches its minCount (1 for basic), a CompositePodGroup
        whose own tree is ready."""
        c = self.composites.get(ckey)
        if c is None or depth >= MAX_DEPTH:
            return False
        ready = 0
        for composite, key in self.children(ckey):
            if composite:
                ready += self.tree_ready(key, count, depth + 1)
            else:
                g = self.groups.get(key)
                ready += g is not None and count(key) >= (g.min_member if getattr(g, "gang", False) else 1)
        return ready >= (c.min_member if c.gang else 1)

    def parse(self, body: Mapping[str, Any]) -> NativePodGroup:
        return NativePodGroup.from_dict(body)

    def member_group(self, namespace: str, body: Mapping[str, Any]) -> str | None:
        name = scheduling_group_name(body.get("spec") or {})
        return f"{namespace}/{name}" if name else None

    def tracks(self, key: str, labels: Mapping[str, str] | None) -> bool:
        return key in self._pod_group

    def tracks_pod(self, key: str, body: Mapping[str, Any]) -> bool:
        return key in self._pod_group or bool(scheduling_group_name(body.get("spec") or {}))

    def on_pod(self, event: str, body: Mapping[str, Any]) -> list[tuple[ClusterEvent, Any, Any]]:
        out = super().on_pod(event, body)
        meta = body.get("metadata") or {}
        pod_key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        if pod_key in self._pod_group:
            try:  # what the member needs (group preemption's messages, the what-if report)
                self.requests[pod_key] = compute_requests(body.get("spec") or {})
            except (PodSpecError, QuantityError, TypeError, ValueError, AttributeError):
                self.requests[pod_key] = {}
        else:
            self.requests.pop(pod_key, None)
            self._assumed_on.pop(pod_key, None)
        return out

    # ------------------------------------------------------------------ assumed members' nodes
    def set_assumed_node(self, pod_key: str, node: str) -> None:
        self._assumed_on[pod_key] = node

    def assumed_node(self, pod_key: str) -> str:
        return self._assumed_on.get(pod_key, "")

    def unreserve(self, pod_key: str) -> bool:
        self._assumed_on.pop(pod_key, None)
        return super().unreserve(pod_key)

    def _forget_group_state(self, key: str) -> None:
        super()._forget_group_state(key)
        self._want.pop(key, None)
        self._cond.pop(key, None)

    # ------------------------------------------------------------------ status
    def set_condition(self, gkey: str, status: str, reason: str, message: str) -> None:
        """What the group's last pod-group cycle says (podgroup.condition): written by the status
        writer unless the condition is already True (upstream never turns it back)."""
        if gkey in self.groups:
            if status != "True" and self._want.get(gkey, ("",))[0] == "True":
                return  # True, maybe not written yet: a later cycle for extra pods does not undo it
            self._want[gkey] = (status, reason, message[:MAX_MESSAGE])
            self._mark(gkey)
            if self.on_condition is not None:
                self.on_condition()

    def status(self, gkey: str) -> dict[str, Any]:
        """The group's status with upstream's condition ``PodGroupInitiallyScheduled`` as its last
        cycle left it; ``observedGeneration`` the group's. A True condition is never changed; the
        other conditions are kept; a group with nothing to say keeps its status."""
        pg = self.get(gkey)
        if pg is None:
            return {}
        conditions = [c for c in (pg.status.get("conditions") or []) if isinstance(c, Mapping)]
        cur = next((c for c in conditions if c.get("type") == CONDITION), None)
        if cur is not None and cur.get("status") == "True":
            return dict(pg.status)  # terminal
        want = self._want.get(gkey)
        if want is None:
            return dict(pg.status)
        if cur is not None and (cur.get("status"), cur.get("reason"), cur.get("message")) == want:
            return dict(pg.status)
        prev = self._cond.get(gkey)
        if prev is not None and (prev["status"], prev["reason"], prev["message"]) == want:
            cond = prev
        else:
            since = cur.get("lastTransitionTime") if cur is not None and cur.get("status") == want[0] else None
            cond = {"type": CONDITION, "status": want[0], "reason": want[1], "message": want[2],
                    "lastTransitionTime": since or self.wall(), "observedGeneration": pg.generation}
            self._cond[gkey] = cond
        return {"conditions": [dict(x) for x in conditions if x.get("type") != CONDITION] + [cond]}
