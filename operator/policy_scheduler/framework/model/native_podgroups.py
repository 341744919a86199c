"""Kubernetes' own PodGroups (``scheduling.k8s.io``, behind the ``GenericWorkload`` feature gate;
``v1beta1`` and ``v1alpha3`` in 1.37, kube-scheduler reads v1beta1), as GangScheduling
(plugins/gang_scheduling.py) reads them: the policy
(``spec.schedulingPolicy.gang.minCount``, or ``basic``), the topology constraint
(``spec.schedulingConstraints.topology[0].key``, behind ``TopologyAwareWorkloadScheduling``), and
the members: pods whose ``spec.schedulingGroup.podGroupName`` names the group, in its namespace.

The machinery is scheduler-plugins' (framework/model/podgroups.py): counts, reservations, group
rejection by epoch, events for the queue (here on the ``scheduling.k8s.io/PodGroup`` resource).
On top of it, the topology domain chosen for a group (``set_domain``), kept until the group is
rejected or nothing of it is placed any more; and the status upstream keeps: the
``PodGroupInitiallyScheduled`` condition, True once minCount members are bound (terminal), False
with reason ``Unschedulable`` and the rejection's message while the group cannot be placed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..events import ActionType, ClusterEvent, Resource
from .podgroups import PodGroup, PodGroupCache
from .podinfo import PodSpecError, compute_requests, scheduling_group_name
from .quantity import QuantityError

GROUP, PLURAL = "scheduling.k8s.io", "podgroups"
# served versions, the one to use first; the operator reads the API's discovery (engine.py)
VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
DEFAULT_VERSION = VERSIONS[0]
CONDITION = "PodGroupInitiallyScheduled"  # 1.37's condition type (v1alpha2 of 1.36 called it PodGroupScheduled)
MAX_MESSAGE = 32768  # metav1.Condition.message


def api_path(version: str = DEFAULT_VERSION) -> str:
    return f"/apis/{GROUP}/{version}/{PLURAL}"


NATIVE_POD_GROUP_ADD = ClusterEvent(Resource.NATIVE_POD_GROUP, ActionType.ADD)
NATIVE_POD_GROUP_UPDATE = ClusterEvent(Resource.NATIVE_POD_GROUP, ActionType.UPDATE)
NATIVE_POD_GROUP_DELETE = ClusterEvent(Resource.NATIVE_POD_GROUP, ActionType.DELETE)
# ours: a group's membership changed (a pod naming it added, removed, bound, or its gates gone);
# upstream's GangScheduling registers UnscheduledPod/Add and AssignedPod/Add for the same purpose
NATIVE_POD_GROUP_MEMBERS = ClusterEvent(Resource.NATIVE_POD_GROUP, ActionType.UPDATE, "NativePodGroupMembersChange")


def native_group_key(pod: Any) -> str | None:
    """"<namespace>/<spec.schedulingGroup.podGroupName>" of a PodInfo, or None."""
    name = getattr(pod, "pod_group_name", "")
    return f"{pod.namespace}/{name}" if name else None


@dataclass(slots=True)
class NativePodGroup(PodGroup):
    """A ``scheduling.k8s.io`` PodGroup. ``min_member`` is the gang's minCount (1 for a basic
    group), so the shared machinery reads it as it reads scheduler-plugins' minMember."""

    gang: bool = False
    topology_key: str = ""  # spec.schedulingConstraints.topology[0].key ("" : none)
    api_version: str = ""
    generation: int = 0

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
        return cls(namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name") or ""),
                   min_member=min_count, creation_timestamp=str(meta.get("creationTimestamp") or ""),
                   uid=str(meta.get("uid") or ""), status=dict(body.get("status") or {}),
                   gang=gang is not None, topology_key=key, api_version=str(body.get("apiVersion") or ""),
                   generation=int(meta.get("generation") or 0))

    def same_spec(self, other: PodGroup) -> bool:  # type: ignore[override]
        return PodGroup.same_spec(self, other) and isinstance(other, NativePodGroup) and \
            (self.gang, self.topology_key) == (other.gang, other.topology_key)


@dataclass(frozen=True, slots=True)
class Domain:
    """The topology domain chosen for a group: ``key=value`` of a node label."""

    key: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


class NativePodGroupCache(PodGroupCache):
    EVENTS = (NATIVE_POD_GROUP_ADD, NATIVE_POD_GROUP_UPDATE, NATIVE_POD_GROUP_DELETE, NATIVE_POD_GROUP_MEMBERS)

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._domain: dict[str, Domain] = {}
        self._why: dict[str, str] = {}  # group -> its last rejection (the False condition's message)
        self._cond: dict[str, dict[str, Any]] = {}  # group -> the condition last computed
        self.requests: dict[str, dict[str, int]] = {}  # member pod key -> its requests

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
            try:  # what the member needs, for the choice of a domain (summed over the group)
                self.requests[pod_key] = compute_requests(body.get("spec") or {})
            except (PodSpecError, QuantityError, TypeError, ValueError, AttributeError):
                self.requests[pod_key] = {}
        else:
            self.requests.pop(pod_key, None)
        return out

    # ------------------------------------------------------------------ topology domain
    def domain(self, gkey: str) -> Domain | None:
        return self._domain.get(gkey)

    def domains(self) -> dict[str, Domain]:
        """Every group's domain, chosen or where its members are."""
        return self._domain

    def set_domain(self, gkey: str, domain: Domain) -> None:
        self._domain[gkey] = domain

    def release_domain(self, gkey: str) -> None:
        self._domain.pop(gkey, None)

    def _after_member_change(self, gkey: str) -> None:
        super()._after_member_change(gkey)
        if not any(m.node or m.assumed for m in self._members.get(gkey, {}).values() if not m.terminal):
            self._domain.pop(gkey, None)  # nothing placed: the next attempt chooses again

    def _forget_group_state(self, key: str) -> None:
        super()._forget_group_state(key)
        self._domain.pop(key, None)
        self._why.pop(key, None)
        self._cond.pop(key, None)

    def reject(self, gkey: str, why: str, backoff: float = 0.0) -> None:
        super().reject(gkey, why, backoff)
        self._domain.pop(gkey, None)  # the group places again from nothing: the choice is made again
        self._why[gkey] = why
        self._mark(gkey)

    def permit(self, gkey: str) -> None:
        super().permit(gkey)
        self._why.pop(gkey, None)

    # ------------------------------------------------------------------ status
    def status(self, gkey: str) -> dict[str, Any]:
        """The group's status with upstream's condition: ``PodGroupInitiallyScheduled`` True
        (reason ``Scheduled``, no message) once minCount members are placed (the quorum reached
        at Permit, or bound), which is then never changed; False, reason ``Unschedulable``, with
        the last rejection's message, while the group is rejected; ``observedGeneration`` the
        group's. The other conditions are kept; a group with nothing to say keeps its status."""
        pg = self.groups.get(gkey)
        if pg is None:
            return {}
        conditions = [c for c in (pg.status.get("conditions") or []) if isinstance(c, Mapping)]
        cur = next((c for c in conditions if c.get("type") == CONDITION), None)
        if cur is not None and cur.get("status") == "True":
            return dict(pg.status)  # terminal
        c = self.counts(gkey)
        if self.permitted(gkey) or c.bound + c.succeeded >= pg.min_member:
            want = ("True", "Scheduled", "")
        elif gkey in self._why:
            want = ("False", "Unschedulable", self._why[gkey][:MAX_MESSAGE])
        else:
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


@dataclass(slots=True)
class DomainFit:
    """What ``choose_domain`` found: the domain chosen (None: none fits), and for the message,
    what the group needs and the domain with the most free room."""

    domain: Domain | None
    need: dict[str, int] = field(default_factory=dict)
    pods: int = 0
    largest: str = ""  # the label value of the domain with the most free cpu (then memory)
    largest_free: dict[str, int] = field(default_factory=dict)
    candidates: int = 0  # domains considered
    quorum_only: bool = False  # no domain holds every pending member; this one holds minCount of them
