"""PodInfo: everything the scheduler derives from a pod, computed once per pod object.

Input is the pod as the API serves it (a JSON dict with camelCase keys). Parsing never raises:
a pod whose spec cannot be understood (a malformed quantity, a bad selector) gets ``parse_error``,
and ``schedule_one`` turns that into an Unschedulable status with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .labels import LabelSelector, NodeSelector, NodeSelectorTerm, SelectorError
from .podrequests import (DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, PodSpecError,  # noqa: F401 (API)
                          compute_requests, pod_requests_of)
from .quantity import QuantityError
from .taints import Toleration

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A pod (anti-)affinity term with its namespace set resolved against the owning pod."""

    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None  # None: not set (only ``namespaces`` count)
    topology_key: str

    def matches(self, pod: "PodInfo", ns_labels: Mapping[str, str] | None = None) -> bool:
        """AffinityTerm.Matches: namespace in the set, or the namespace's labels match the selector;
        and the label selector matches the pod's labels."""
        if pod.namespace not in self.namespaces:
            # unknown namespace labels count as none (upstream matches labels.Set(nil))
            if self.namespace_selector is None or not self.namespace_selector.matches(ns_labels or {}):
                return False
        return self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class WeightedAffinityTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    selector: LabelSelector  # with matchLabelKeys already merged in
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE


@dataclass(frozen=True, slots=True)
class PodVolume:
    """One ``spec.volumes`` entry the volume plugins read (section 3 and 4 of the semantics doc).

    Only volumes of these sources are kept: ``persistentVolumeClaim`` and ``ephemeral`` (both
    name a claim: ``claim``; a generic ephemeral volume's claim is ``<pod name>-<volume name>``,
    upstream ephemeral.VolumeClaimName), inline ``csi`` (``csi_driver``), and the legacy disks
    VolumeRestrictions compares (``gce_pd``: pdName, ``aws_ebs``: volumeID, ``iscsi_iqn``,
    ``rbd``: (monitors, pool, image)). ``read_only``: the source's readOnly. Projected,
    configMap, secret, emptyDir, hostPath, ... volumes are not kept."""

    name: str
    claim: str = ""  # the PVC name (persistentVolumeClaim and ephemeral volumes)
    pvc: bool = False  # a persistentVolumeClaim source (its claimName may be empty)
    ephemeral: bool = False
    read_only: bool = False
    csi_driver: str = ""
    gce_pd: str = ""
    aws_ebs: str = ""
    iscsi_iqn: str = ""
    rbd: tuple[frozenset[str], str, str] | None = None

    @property
    def has_claim(self) -> bool:
        """A persistentVolumeClaim or generic ephemeral volume: it names a PVC."""
        return self.pvc or self.ephemeral


_VOLUME_SOURCES = ("persistentVolumeClaim", "ephemeral", "csi", "gcePersistentDisk", "awsElasticBlockStore",
                   "iscsi", "rbd")


def parse_volumes(volumes: Any, pod_name: str) -> tuple[PodVolume, ...]:
    """The kept ``spec.volumes`` entries (see PodVolume), in spec order."""
    out = []
    for v in volumes:
        if not isinstance(v, Mapping):
            continue
        name = str(v.get("name") or "")
        src = v.get("persistentVolumeClaim")
        if src is not None:
            out.append(PodVolume(name, claim=str(src.get("claimName") or ""), read_only=bool(src.get("readOnly")),
                                 pvc=True))
            continue
        if v.get("ephemeral") is not None:
            out.append(PodVolume(name, claim=f"{pod_name}-{name}", ephemeral=True))
            continue
        src = v.get("csi")
        if src is not None:
            out.append(PodVolume(name, csi_driver=str(src.get("driver") or ""), read_only=bool(src.get("readOnly"))))
            continue
        src = v.get("gcePersistentDisk")
        if src is not None:
            out.append(PodVolume(name, gce_pd=str(src.get("pdName") or ""), read_only=bool(src.get("readOnly"))))
            continue
        src = v.get("awsElasticBlockStore")
        if src is not None:
            out.append(PodVolume(name, aws_ebs=str(src.get("volumeID") or ""), read_only=bool(src.get("readOnly"))))
            continue
        src = v.get("iscsi")
        if src is not None:
            out.append(PodVolume(name, iscsi_iqn=str(src.get("iqn") or ""), read_only=bool(src.get("readOnly"))))
            continue
        src = v.get("rbd")
        if src is not None:
            # the API defaults pool to "rbd"
            rbd = (frozenset(str(m) for m in src.get("monitors") or ()), str(src.get("pool") or "rbd"),
                   str(src.get("image") or ""))
            out.append(PodVolume(name, rbd=rbd, read_only=bool(src.get("readOnly"))))
    return tuple(out)


@dataclass(slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    labels: dict[str, str]
    priority: int = 0
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    terminating: bool = False
    creation_timestamp: str = ""
    # resources (section 4.0 of the semantics doc; podrequests.py): true requests, incl.
    # init/sidecars/pod level/overhead, with in-place resize's status resources (what a node
    # holding the pod counts)
    requests: dict[str, int] = field(default_factory=dict)
    nonzero_cpu: int = 0  # millicores, with the 100m default for containers that set none
    nonzero_memory: int = 0  # bytes, with the 200Mi default
    # the spec's requests alone (NodeResourcesFit's Filter) when they differ from ``requests``
    # (status resources), else None: read ``spec_requests``
    spec_only: dict[str, int] | None = None
    # NodeResourcesFit's score requests (podrequests.py: no pod level, no status, the defaults)
    # when they differ from ``requests`` with the non-zero pair, else None: read ``score_cpu``,
    # ``score_memory`` and ``score_requests``
    fit_score: dict[str, int] | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    required_node_affinity: NodeSelector | None = None
    preferred_node_affinity: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedAffinityTerm, ...] = ()
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[tuple[str, str, int], ...] = ()  # (hostIP, protocol, hostPort), sidecars included
    images: tuple[str, ...] = ()  # normalized names of init + regular container images
    preemption_policy: str = "PreemptLowerPriority"
    nominated_node_name: str = ""
    # status.startTime as the API writes it (RFC 3339, UTC, seconds: compares as a string);
    # "" when the pod has not started (preemption then counts it as started now)
    start_time: str = ""
    # deletionTimestamp set and the first DisruptionTarget condition True with reason
    # PreemptionByScheduler (upstream podTerminatingByPreemption)
    terminating_by_preemption: bool = False
    scheduling_gates: tuple[str, ...] = ()  # spec.schedulingGates names, in spec order
    # spec.schedulingGroup.podGroupName: the native PodGroup (scheduling.k8s.io) the pod belongs to,
    # in its namespace; "" for a pod in no group (GangScheduling, plugins/podgroups/native_cache.py)
    pod_group_name: str = ""
    # spec.volumes the volume plugins read (PodVolume); empty for pods with none of those
    volumes: tuple[PodVolume, ...] = ()
    # spec.resourceClaims (DRA), in spec order: (name, resourceClaimName, resourceClaimTemplateName)
    resource_claims: tuple[tuple[str, str, str], ...] = ()
    # status.resourceClaimStatuses: pod-claim name -> the generated claim's name ("" when the
    # controller intentionally created none)
    claim_statuses: dict[str, str] = field(default_factory=dict)
    parse_error: str | None = None
    # the API object; kept for pods waiting to be scheduled, dropped for pods counted on a node
    raw: Mapping[str, Any] | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def spec_requests(self) -> dict[str, int]:
        """What the spec asks (upstream computePodResourceRequest): the pod being scheduled."""
        return self.requests if self.spec_only is None else self.spec_only

    @property
    def score_cpu(self) -> int:
        """NodeResourcesFit's score request of cpu (the 100m default per container naming none)."""
        return self.nonzero_cpu if self.fit_score is None else self.fit_score.get("cpu", 0)

    @property
    def score_memory(self) -> int:
        return self.nonzero_memory if self.fit_score is None else self.fit_score.get("memory", 0)

    @property
    def score_requests(self) -> dict[str, int]:
        """NodeResourcesFit's score requests of other resources."""
        return self.requests if self.fit_score is None else self.fit_score

    @property
    def claim_names(self) -> tuple[str, ...]:
        """The PVC names of the pod's persistentVolumeClaim and ephemeral volumes, in spec order."""
        return tuple(v.claim for v in self.volumes if v.has_claim)

    @property
    def has_affinity(self) -> bool:
        return bool(self.required_affinity or self.required_anti_affinity
                    or self.preferred_affinity or self.preferred_anti_affinity)

    @property
    def has_required_anti_affinity(self) -> bool:
        return bool(self.required_anti_affinity)

    @classmethod
    def from_dict(cls, pod: Mapping[str, Any]) -> "PodInfo":
        return parse_pod(pod)


def normalized_image_name(name: str) -> str:
    """ImageLocality's normalizedImageName: append ":latest" when the name has no tag."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def _affinity_term(t: Mapping[str, Any], owner_ns: str, where: str) -> AffinityTerm:
    if not isinstance(t, Mapping):
        raise SelectorError(f"{where}: must be an object")
    key = t.get("topologyKey")
    if not key:
        raise SelectorError(f"{where}.topologyKey: required")
    sel = LabelSelector.parse(t.get("labelSelector"), f"{where}.labelSelector")
    namespaces = frozenset(t.get("namespaces") or ())
    ns_sel_raw = t.get("namespaceSelector")
    ns_sel = None if ns_sel_raw is None else LabelSelector.parse(ns_sel_raw, f"{where}.namespaceSelector")
    if not namespaces and ns_sel is None:
        namespaces = frozenset((owner_ns,))
    return AffinityTerm(sel, namespaces, ns_sel, str(key))


def _affinity_block(aff: Mapping[str, Any] | None, ns: str, where: str):
    req: list[AffinityTerm] = []
    pref: list[WeightedAffinityTerm] = []
    if not aff:
        return (), ()
    for i, t in enumerate(aff.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
        req.append(_affinity_term(t, ns, f"{where}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"))
    for i, wt in enumerate(aff.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        w = f"{where}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        pref.append(WeightedAffinityTerm(int(wt.get("weight", 0)),
                                         _affinity_term(wt.get("podAffinityTerm") or {}, ns, f"{w}.podAffinityTerm")))
    return tuple(req), tuple(pref)


def _spread_constraints(spec: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    out = []
    for i, c in enumerate(spec.get("topologySpreadConstraints") or []):
        w = f"spec.topologySpreadConstraints[{i}]"
        sel = LabelSelector.parse(c.get("labelSelector"), f"{w}.labelSelector")
        extra = {k: labels[k] for k in (c.get("matchLabelKeys") or []) if k in labels}
        if extra:
            sel = sel.and_labels(extra)
        try:
            max_skew = int(c.get("maxSkew", 1))
        except (TypeError, ValueError):
            raise SelectorError(f"{w}.maxSkew: must be an integer") from None
        md = c.get("minDomains")
        out.append(SpreadConstraint(
            max_skew=max_skew,
            topology_key=str(c.get("topologyKey", "")),
            when_unsatisfiable=str(c.get("whenUnsatisfiable", DO_NOT_SCHEDULE)),
            selector=sel,
            min_domains=int(md) if md is not None else 1,
            node_affinity_policy=str(c.get("nodeAffinityPolicy") or HONOR),
            node_taints_policy=str(c.get("nodeTaintsPolicy") or IGNORE),
        ))
    return tuple(out)


def _terminating_by_preemption(status: Mapping[str, Any]) -> bool:
    """The first DisruptionTarget condition decides (upstream podTerminatingByPreemption)."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return False
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == "DisruptionTarget":
            return c.get("status") == "True" and c.get("reason") == "PreemptionByScheduler"
    return False


def scheduling_group_name(spec: Mapping[str, Any]) -> str:
    """``spec.schedulingGroup.podGroupName`` of a pod spec, or "" (absent or malformed)."""
    sg = spec.get("schedulingGroup")
    if not isinstance(sg, Mapping):
        return ""
    name = sg.get("podGroupName")
    return name if isinstance(name, str) else ""


def parse_pod(pod: Mapping[str, Any]) -> PodInfo:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ns = meta.get("namespace") or "default"
    labels = dict(meta.get("labels") or {})
    info = PodInfo(
        uid=str(meta.get("uid") or f"{ns}/{meta.get('name', '')}"),
        namespace=ns,
        name=str(meta.get("name", "")),
        labels=labels,
        priority=int(spec.get("priority") or 0),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        terminating=meta.get("deletionTimestamp") is not None,
        creation_timestamp=str(meta.get("creationTimestamp") or ""),
        preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
        nominated_node_name=str(status.get("nominatedNodeName") or ""),
        start_time=str(status.get("startTime") or ""),
        scheduling_gates=tuple(str((g or {}).get("name", "")) for g in (spec.get("schedulingGates") or [])
                               if isinstance(g, Mapping)),
        pod_group_name=scheduling_group_name(spec),
        raw=pod,
    )
    if info.terminating:
        info.terminating_by_preemption = _terminating_by_preemption(status)
    try:
        pr = pod_requests_of(spec, status if isinstance(status, Mapping) else None)
        info.requests, info.nonzero_cpu, info.nonzero_memory = pr.requests, pr.nonzero_cpu, pr.nonzero_memory
        info.spec_only, info.fit_score = pr.spec_requests, pr.fit_score
        info.tolerations = tuple(Toleration.parse(t) for t in (spec.get("tolerations") or []))
        info.node_selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
        aff = spec.get("affinity") or {}
        na = aff.get("nodeAffinity") or {}
        req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
        if req is not None:
            info.required_node_affinity = NodeSelector.parse(
                req, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
        prefs = []
        for i, p in enumerate(na.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            w = f"spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
            prefs.append((int(p.get("weight", 0)), NodeSelectorTerm.parse(p.get("preference") or {}, f"{w}.preference")))
        info.preferred_node_affinity = tuple(prefs)
        info.required_affinity, info.preferred_affinity = _affinity_block(
            aff.get("podAffinity"), ns, "spec.affinity.podAffinity")
        info.required_anti_affinity, info.preferred_anti_affinity = _affinity_block(
            aff.get("podAntiAffinity"), ns, "spec.affinity.podAntiAffinity")
        info.spread_constraints = _spread_constraints(spec, labels)
        ports = []
        # upstream GetHostPorts: restartable init containers (sidecars) first, then containers
        sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        for c in sidecars + list(spec.get("containers") or []):
            for p in c.get("ports") or []:
                hp = int(p.get("hostPort") or 0)
                if hp > 0:
                    ports.append((str(p.get("hostIP") or "0.0.0.0"), str(p.get("protocol") or "TCP"), hp))
        info.host_ports = tuple(ports)
        imgs = []
        for c in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
            if c.get("image"):
                imgs.append(normalized_image_name(str(c["image"])))
        info.images = tuple(imgs)
        vols = spec.get("volumes")
        if vols:
            info.volumes = parse_volumes(vols, info.name)
        rcs = spec.get("resourceClaims")
        if rcs:
            info.resource_claims = tuple(
                (str(c.get("name") or ""), str(c.get("resourceClaimName") or ""),
                 str(c.get("resourceClaimTemplateName") or "")) for c in rcs)
            info.claim_statuses = {str(s.get("name") or ""): str(s.get("resourceClaimName") or "")
                                   for s in (status.get("resourceClaimStatuses") or [])}
    except (PodSpecError, SelectorError, QuantityError) as e:
        info.parse_error = str(e)
    except (TypeError, ValueError, AttributeError) as e:
        info.parse_error = f"malformed pod spec: {e}"
    return info
