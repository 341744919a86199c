"""The worlds of the DRA parity suite (test_dra_parity.py): seeded cases of nodes with GPUs
published in ResourceSlices, claims and claim templates, and pods created one at a time; building
them through the API (raw JSON: resource.k8s.io/v1 objects as the API server writes them), a
poller that watches every world's pods and FailedScheduling events at once, and the outcome of a
world that the suite compares.

Devices: driver ``gpu.example.com``, one slice per node (pool named after the node, generation 1,
resourceSliceCount 1, spec.nodeName set, as upstream's scheduler_perf publishes them). A device
has the string attribute ``model`` (a100 or t4), the capacity ``memory`` (a100: 40Gi or 80Gi, t4:
16Gi), the qualified attribute ``resource.kubernetes.io/pciRoot`` and, on a100s only, the bare
``pcieRoot`` (``gpu.example.com/pcieRoot`` to a constraint: the driver's own domain); some carry a
NoSchedule taint (``example.com/unhealthy``) or a taint of effect None (ignored)."""

from __future__ import annotations

import copy
import json
import random
import threading
import time
from dataclasses import dataclass, field

from kubernetes.client.rest import ApiException

DRIVER = "gpu.example.com"
PCI_ROOT = "resource.kubernetes.io/pciRoot"  # on every device
PCIE_ROOT = f"{DRIVER}/pcieRoot"  # the bare attribute `pcieRoot`, on a100s only
TAINT_KEY = "example.com/unhealthy"
BOUND_CONDITION, FAILED_CONDITION = "example.com/attached", "example.com/attach-failed"  # binding conditions
CLASS_GPU = "drap-gpu"  # device.driver == "gpu.example.com"
CLASS_A100 = "drap-a100"  # that, and model a100
CLASS_MISSING = "drap-missing"  # never created
DECISION = "policy-scheduler.io/decision"
ZONES = ("za", "zb")
LABEL_RUN, LABEL_BATCH = "drap-run", "drap-batch"
GATE_WAIT = 3.0  # how long a pod whose claim does not exist yet must stay untouched
DEALLOCATED = "deallocation of ResourceClaim completed"  # DynamicResources' PostFilter freed a claim
SETTLE = 1.5  # a pod that was bound may still get the FailedScheduling event of an earlier attempt

SEL_A100 = f'device.attributes["{DRIVER}"].model == "a100"'
SEL_T4 = f'device.attributes["{DRIVER}"].model == "t4"'
SEL_MEM40 = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
SEL_MEM80 = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) >= 0'
SEL_MEM_GT = f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("20Gi"))'
TOLERATIONS = {  # by name: what a request tolerates
    "exists": {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
    "equal": {"key": TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    "everything": {"operator": "Exists"},  # NoExecute too
}

CLASSES = [  # (name, selectors); CLASS_GPU last: a probe that allocates through it proves the others seen
    (CLASS_A100, [f'device.driver == "{DRIVER}"', SEL_A100]),
    (CLASS_GPU, [f'device.driver == "{DRIVER}"']),
]


# ---------------------------------------------------------------------------------------------
# the cases

def _exactly(cls: str = CLASS_GPU, sels: tuple = (), count: int | None = None, all_: bool = False,
             tol: bool | str = False, admin: bool = False) -> dict:
    e: dict = {"deviceClassName": cls}
    if sels:
        e["selectors"] = [{"cel": {"expression": s}} for s in sels]
    if all_:
        e["allocationMode"] = "All"
    elif count:
        e["allocationMode"] = "ExactCount"
        e["count"] = count
    if tol:
        e["tolerations"] = [dict(TOLERATIONS["exists" if tol is True else tol])]
    if admin:
        e["adminAccess"] = True
    return e


def _one(**kw) -> list[dict]:
    return [{"name": "gpu", "exactly": _exactly(**kw)}]


def _first(*subs: tuple[str, dict]) -> list[dict]:
    return [{"name": "gpu", "firstAvailable": [{"name": n, **_exactly(**kw)} for n, kw in subs]}]


# claim kinds: name -> (weight, requests, constraints)
KINDS: dict[str, tuple[int, list, list]] = {
    "any": (6, _one(), []),
    "a100": (4, _one(sels=(SEL_A100,)), []),  # CEL on the model
    "t4": (2, _one(sels=(SEL_T4,)), []),
    "class-a100": (3, _one(cls=CLASS_A100), []),  # the class's selector on the model
    "mem40": (4, _one(sels=(SEL_MEM40,)), []),  # CEL on the memory capacity
    "mem-gt": (1, _one(sels=(SEL_MEM_GT,)), []),
    "count2": (3, _one(count=2), []),
    "count3": (2, _one(count=3), []),
    "all-t4": (2, _one(sels=(SEL_T4,), all_=True), []),
    "all": (1, _one(all_=True), []),
    "all-tol": (1, _one(all_=True, tol=True), []),
    "match-pci": (3, _one(count=2), [{"matchAttribute": PCI_ROOT}]),
    "match-pcie": (2, [{"name": "a", "exactly": _exactly()}, {"name": "b", "exactly": _exactly(sels=(SEL_MEM40,))}],
                   [{"matchAttribute": PCIE_ROOT}]),
    # a constraint on two of three requests
    "match-some": (2, [{"name": "a", "exactly": _exactly()}, {"name": "b", "exactly": _exactly(sels=(SEL_MEM40,))},
                       {"name": "c", "exactly": _exactly(sels=(SEL_T4,))}],
                   [{"requests": ["a", "c"], "matchAttribute": PCI_ROOT}]),
    "distinct-pci": (2, _one(count=2), [{"distinctAttribute": PCI_ROOT}]),
    "first": (3, _first(("big", {"sels": (SEL_MEM80,)}), ("pair", {"sels": (SEL_T4,), "count": 2}), ("one", {})),
              []),
    "first-a100": (2, _first(("two", {"cls": CLASS_A100, "count": 2}), ("one", {"tol": True})), []),
    "tol": (3, _one(tol=True), []),  # tolerates the NoSchedule taint
    "tol-equal": (1, _one(tol="equal"), []),
    "tol-all": (1, _one(tol="everything", count=2), []),
    # a device in use may be given again, and this one is not counted as in use (needs the
    # namespace label resource.kubernetes.io/admin-access)
    "admin": (2, _one(admin=True, sels=(SEL_A100,)), []),
    "count2-tol": (1, _one(count=2, tol=True), []),
    "too-many": (1, _one(count=9), []),
    "missing-class": (1, _one(cls=CLASS_MISSING), []),
    "first-missing": (1, _first(("x", {"cls": CLASS_MISSING}), ("y", {})), []),
}


@dataclass
class Device:
    model: str
    memory: str
    pci: str
    taint: str | None  # "NoSchedule", "NoExecute", "None" or None
    binding: str | None = None  # with binding conditions: "ok" (the driver reports them met), "fail" (fails once)

    def body(self, i: int) -> dict:
        attrs = {"model": {"string": self.model}, PCI_ROOT: {"string": self.pci}}
        if self.model == "a100":
            attrs["pcieRoot"] = {"string": self.pci}
        d = {"name": f"gpu-{i}", "attributes": attrs, "capacity": {"memory": {"value": self.memory}}}
        if self.taint in ("NoSchedule", "NoExecute"):
            d["taints"] = [{"key": TAINT_KEY, "value": "true", "effect": self.taint}]
        elif self.taint == "None":
            d["taints"] = [{"key": "example.com/info", "value": "x", "effect": "None"}]
        if self.binding:
            d["bindingConditions"] = [BOUND_CONDITION]
            d["bindingFailureConditions"] = [FAILED_CONDITION]
        return d

    def short(self) -> str:
        return (f"{self.model}/{self.memory}/{self.pci}" + (f"/taint={self.taint}" if self.taint else "")
                + (f"/binding={self.binding}" if self.binding else ""))


@dataclass
class NodeSpec:
    """``devices``: the node's pool (None: no ResourceSlice); ``split``: in two slices, whose
    names sort the second half of the devices first; ``extra``: devices of a second pool, whose
    name sorts before the first's."""
    cpu: str
    zone: str
    devices: list[Device] | None
    split: bool = False
    extra: list[Device] | None = None


@dataclass
class ClaimRef:
    """One entry of a pod's spec.resourceClaims. ``source``: named (a ResourceClaim created with
    the pod), template (resourceClaimTemplateName), shared (the named claim ``ref`` of an earlier
    pod), late (a named claim created only after the pod has waited GATE_WAIT seconds), allocated
    (a named claim of kind ``any`` made with the world, allocated already to the device ``at`` of
    a node's pool, reserved for nobody: as a claim whose pods are gone)."""
    source: str
    kind: str  # a KINDS key (for shared: the kind of the claim it shares)
    ref: str = ""  # the claim's (or template's) name suffix in its world
    at: tuple[int, int] | None = None  # allocated: (node index, device index)


@dataclass
class PodSpec:
    cpu: str
    claims: list[ClaimRef]
    zone: str | None = None


@dataclass
class Case:
    nodes: list[NodeSpec]
    pods: list[PodSpec]

    def features(self) -> set[str]:
        f = set()
        for p in self.pods:
            for c in p.claims:
                f.add(f"kind:{c.kind}")
                f.add(f"source:{c.source}")
        for n in self.nodes:
            for d in (n.devices or []) + (n.extra or []):
                if d.taint:
                    f.add(f"taint:{d.taint}")
            if n.devices is None:
                f.add("node-without-devices")
            if n.split:
                f.add("split-pool")
            if n.extra:
                f.add("second-pool")
        for p in self.pods:
            for c in p.claims:
                if c.source == "allocated" and p.zone and p.zone != self.nodes[c.at[0]].zone:
                    f.add("allocated-elsewhere")  # the pod may not go where its claim is
        return f

    def describe(self) -> str:
        nodes = "; ".join(f"n{i} cpu {n.cpu} " + ("no slice" if n.devices is None else
                                                 ",".join(d.short() for d in n.devices))
                          + (" (two slices)" if n.split else "")
                          + (" + pool e " + ",".join(d.short() for d in n.extra) if n.extra else "")
                          for i, n in enumerate(self.nodes))
        pods = "; ".join(f"p{j} cpu {p.cpu}" + (f" zone {p.zone}" if p.zone else "") + ": " +
                         (",".join(f"{c.source}:{c.kind}" + (f"({c.ref})" if c.source == "shared" else "")
                                   + (f"(n{c.at[0]} gpu-{c.at[1]})" if c.at else "")
                                   for c in p.claims) or "no claim")
                         for j, p in enumerate(self.pods))
        return f"nodes [{nodes}] pods [{pods}]"


def _kind(rng: random.Random) -> str:
    names = list(KINDS)
    return rng.choices(names, weights=[KINDS[k][0] for k in names])[0]


def make_case(rng: random.Random, must: str | None = None) -> Case:
    """A random case; with ``must``, one of its pods has a named claim of that kind (the suite
    goes round every kind)."""
    n = rng.randint(2, 4)
    nodes = []
    for i, cpu in enumerate(rng.sample(("2", "3", "4", "6", "8"), n)):  # distinct sizes: fewer score ties
        def devices(k: int) -> list[Device]:
            out = []
            for _ in range(k):
                model = rng.choice(("a100", "a100", "t4", "t4", "t4"))
                r = rng.random()
                out.append(Device(model, rng.choice(("40Gi", "80Gi")) if model == "a100" else "16Gi",
                                  rng.choice(("pci0", "pci1")),
                                  "NoSchedule" if r < 0.18 else "NoExecute" if r < 0.22 else "None" if r < 0.27
                                  else None))
            return out

        if rng.random() < 0.12:
            nodes.append(NodeSpec(cpu, ZONES[i % 2], None))
            continue
        main = devices(rng.randint(2, 6))
        nodes.append(NodeSpec(cpu, ZONES[i % 2], main, split=len(main) >= 3 and rng.random() < 0.25,
                              extra=devices(rng.randint(1, 2)) if rng.random() < 0.15 else None))
    pods: list[PodSpec] = []
    named: list[tuple[str, str]] = []  # (ref, kind) of the named claims made so far
    late_done = allocated_done = False
    with_devices = [i for i, n in enumerate(nodes) if n.devices]
    for j in range(rng.randint(3, 6)):
        claims: list[ClaimRef] = []
        for k in range(rng.choices((0, 1, 2), weights=(1, 7, 2))[0]):
            r = rng.random()
            ref = f"{j}-{k}"
            # shared: a claim of an earlier pod (a pod naming one claim twice fails upstream's PreBind)
            if r < 0.15 and named and not any(c.source == "shared" for c in claims):
                ref, kind = rng.choice(named)
                claims.append(ClaimRef("shared", kind, ref))
            elif r < 0.22 and not late_done:
                late_done = True
                claims.append(ClaimRef("late", _kind(rng), ref))
            elif r < 0.29 and not allocated_done and with_devices:
                allocated_done = True
                ni = rng.choice(with_devices)
                claims.append(ClaimRef("allocated", "any", ref, at=(ni, rng.randrange(len(nodes[ni].devices)))))
            elif r < 0.50:
                templates = [c for p in pods for c in p.claims if c.source == "template"]
                if templates and rng.random() < 0.3:  # another claim from an earlier pod's template
                    c = rng.choice(templates)
                    claims.append(ClaimRef("template", c.kind, c.ref))
                else:
                    claims.append(ClaimRef("template", _kind(rng), ref))
            else:
                claims.append(ClaimRef("named", _kind(rng), ref))
        named += [(c.ref, c.kind) for c in claims if c.source in ("named", "late", "allocated")]
        zone = rng.choice(ZONES) if rng.random() < 0.1 else None
        for c in claims:
            if c.source == "allocated" and rng.random() < 0.5:  # away from its claim's node
                zone = ZONES[(c.at[0] + 1) % 2]
        pods.append(PodSpec(rng.choice(("500m", "1", "1500m")), claims, zone))
    if must and not any(c.kind == must for p in pods for c in p.claims):
        j = rng.randrange(len(pods))
        pods[j].claims.append(ClaimRef("named", must, f"{j}-{len(pods[j].claims)}"))
    return Case(nodes, pods)


# ---------------------------------------------------------------------------------------------
# the API, as raw JSON

RESOURCE = "/apis/resource.k8s.io/v1"


class Raw:
    """JSON requests through a kubernetes ApiClient (thread-safe: urllib3's pool)."""

    def __init__(self, api):
        self.api = api

    def req(self, method: str, path: str, body=None, query: dict | None = None, patch: bool = False,
            missing_ok: bool = False):
        headers = {"Accept": "application/json",
                   "Content-Type": "application/merge-patch+json" if patch else "application/json"}
        m, url, hdrs, data, post = self.api.param_serialize(method, path, query_params=list((query or {}).items()),
                                                            header_params=headers, body=body,
                                                            auth_settings=["BearerToken"])
        r = self.api.call_api(m, url, header_params=hdrs, body=data, post_params=post, _request_timeout=30)
        payload = r.read()
        if r.status >= 400:
            if missing_ok and r.status in (404, 409):
                return None
            raise ApiException(status=r.status, reason=f"{method} {path}: {payload[:500]!r}")
        return json.loads(payload) if payload else None

    def create(self, path: str, body: dict) -> dict:
        return self.req("POST", path, body)


def node_body(name: str, cpu: str, zone: str, labels: dict) -> dict:
    alloc = {"cpu": cpu, "memory": "16Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "topology.kubernetes.io/zone": zone, **labels}},
            "status": {"capacity": alloc, "allocatable": alloc, "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "plain Node object"}]}}


def slice_body(name: str, node: str, pool: str, devices: list[dict], labels: dict, count: int = 1) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name, "labels": labels},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}, "devices": devices}}


def claim_spec(kind: str) -> dict:
    _, requests, constraints = KINDS[kind]
    devices: dict = {"requests": copy.deepcopy(requests)}
    if constraints:
        devices["constraints"] = copy.deepcopy(constraints)
    return {"devices": devices}


def pod_body(name: str, ns: str, scheduler: str, cpu: str, node_selector: dict, claims: list[dict],
             labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0, "nodeSelector": node_selector,
                     "containers": [{"name": "c", "image": "registry.local/app:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
                     **({"resourceClaims": claims} if claims else {})}}


def create_classes(raw: Raw) -> list[str]:
    made = []
    for name, sels in CLASSES:
        raw.req("DELETE", f"{RESOURCE}/deviceclasses/{name}", missing_ok=True)
    for name, sels in CLASSES:
        raw.create(f"{RESOURCE}/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": s}} for s in sels]}})
        made.append(name)
    return made


def delete_classes(raw: Raw, names: list[str]) -> None:
    for name in names:
        raw.req("DELETE", f"{RESOURCE}/deviceclasses/{name}", missing_ok=True)


# ---------------------------------------------------------------------------------------------
# watching every world at once

class Poller:
    """One thread that lists the run's pods and the namespace's FailedScheduling events a few
    times a second: what every world waits on (a world's own polling, times some dozen worlds,
    would load the API server of a 2-core machine)."""

    def __init__(self, raw: Raw, ns: str, run: str, interval: float = 0.15):
        self.raw, self.ns, self.run, self.interval = raw, ns, run, interval
        self.pods: dict[str, dict] = {}
        self.refused: dict[str, list[str]] = {}  # pod -> its distinct FailedScheduling messages, oldest first
        self.cond = threading.Condition()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="dra-poller", daemon=True)

    def start(self) -> "Poller":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                pods = self.raw.req("GET", f"/api/v1/namespaces/{self.ns}/pods",
                                    query={"labelSelector": f"{LABEL_RUN}={self.run}"})["items"]
                evs = self.raw.req("GET", f"/api/v1/namespaces/{self.ns}/events",
                                   query={"fieldSelector": "reason=FailedScheduling"})["items"]
                failures = 0
            except Exception as e:  # noqa: BLE001 - a slow API server: try again, give up after a while
                failures += 1
                if failures > 50:
                    self.error = e
                    with self.cond:
                        self.cond.notify_all()
                    return
                time.sleep(self.interval)
                continue
            by_pod: dict[str, list] = {}
            for e in evs:  # one per message (a repeated one is counted in its event)
                when = e.get("eventTime") or e.get("firstTimestamp") or e["metadata"]["creationTimestamp"]
                by_pod.setdefault(e["involvedObject"].get("name", ""), []).append(
                    (when, e["metadata"]["name"], e.get("message") or e.get("note") or ""))
            with self.cond:
                self.pods = {p["metadata"]["name"]: p for p in pods}
                # distinct messages: an attempt that fails alike may be written in another event
                self.refused = {name: list(dict.fromkeys(m for _, _, m in sorted(ms))) for name, ms in by_pod.items()}
                self.cond.notify_all()
            self._stop.wait(self.interval)

    def wait(self, fn, timeout: float, what: str):
        """Until ``fn(pods, refused)`` returns something true (under the lock)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if self.error is not None:
                    raise AssertionError(f"the poller failed: {self.error!r}")
                got = fn(self.pods, self.refused)
                if got:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
                self.cond.wait(min(left, 1.0))


# ---------------------------------------------------------------------------------------------
# a world

@dataclass(frozen=True)
class PodOutcome:
    placed: tuple  # ("node", index) | ("refused", FailedScheduling message); for a pod with a claim that
    #                may have been allocated before: ("refused", message) for each message, then ("node",
    #                index) when it was bound
    gated: bool | None  # a pod with a late claim: neither bound nor refused while its claim was missing
    claims: tuple  # per pod claim: (name, allocation, the indices of the pods in reservedFor); allocation:
    #                None when unallocated, else (the results, each (request, driver, pool, device) and
    #                its other fields (adminAccess, tolerations), as JSON; its nodeSelector, as JSON);
    #                pools and nodes by their name less the world's prefix ("0-gpu" of node 0)

    def upto(self, n: int) -> "PodOutcome":
        """Without the pods from ``n`` on (in the reservedFor of a shared claim)."""
        return PodOutcome(self.placed, self.gated,
                          tuple((c[0], c[1], tuple(i for i in c[2] if i < n)) for c in self.claims))


@dataclass(frozen=True)
class WorldOutcome:
    pods: tuple[PodOutcome, ...]
    ties: tuple[bool, ...] = field(default=(), compare=False)  # ours only, per pod: its best node was not unique
    decided: tuple[bool, ...] = field(default=(), compare=False)  # per pod: it has policy-scheduler's decision

    def upto(self, n: int) -> tuple:
        return tuple(p.upto(n) for p in self.pods[:n])


def unique_best(decision: dict) -> bool:
    top = decision.get("top") or []
    return len(top) == 1 or (len(top) > 1 and top[0]["total"] > top[1]["total"])


class World:
    """One case's world for one scheduler: its nodes (label ``drap-world=<tag>``), their slices,
    and, in ``run``, its claims, templates and pods."""

    # FailedScheduling messages after which the pod is tried again at once (not its outcome yet)
    RETRIED: tuple[str, ...] = (DEALLOCATED,)

    def settles(self, p: "PodSpec") -> bool:
        """Whether the pod may be refused, then tried again (its outcome: every message, then the node)."""
        return any(c.source in ("allocated", "shared") for c in p.claims)

    def __init__(self, case: Case, tag: str, scheduler: str, ns: str, run: str, batch: str):
        self.case, self.tag, self.scheduler, self.ns = case, tag, scheduler, ns
        self.labels = {LABEL_RUN: run, LABEL_BATCH: batch}
        self.node_names = [f"drap-{tag}-{i}" for i in range(len(case.nodes))]

    def nodes(self) -> list[dict]:
        return [node_body(name, n.cpu, n.zone, {**self.labels, "drap-world": self.tag})
                for name, n in zip(self.node_names, self.case.nodes)]

    def slices(self) -> list[dict]:
        """Per node: its pool ``<node>-gpu`` in the slice of that name, or split in two
        (``<node>-gpu-b`` with the first half of the devices, ``<node>-gpu-a`` with the rest);
        and its second pool ``<node>-aux`` (sorted first) in a slice of that name."""
        out = []
        for name, n in zip(self.node_names, self.case.nodes):
            if n.devices is None:
                continue
            devs = [d.body(i) for i, d in enumerate(n.devices)]
            if n.split:
                h = len(devs) // 2
                out += [slice_body(f"{name}-gpu-b", name, f"{name}-gpu", devs[:h], self.labels, 2),
                        slice_body(f"{name}-gpu-a", name, f"{name}-gpu", devs[h:], self.labels, 2)]
            else:
                out.append(slice_body(f"{name}-gpu", name, f"{name}-gpu", devs, self.labels))
            if n.extra:
                out.append(slice_body(f"{name}-aux", name, f"{name}-aux",
                                      [d.body(i) for i, d in enumerate(n.extra)], self.labels))
        return out

    def local(self, name: str) -> str:
        """A pool's or node's name without the world's prefix."""
        return name.removeprefix(f"drap-{self.tag}-")

    def allocate_claims(self, raw: Raw) -> None:
        """The world's claims that are allocated before its first pod (source ``allocated``)."""
        for p in self.case.pods:
            for c in p.claims:
                if c.source != "allocated":
                    continue
                self._create_claim(raw, c.ref, c.kind)
                node = self.node_names[c.at[0]]
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                raw.req("PATCH", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims/{self._claim_name(c.ref)}/status",
                        {"status": {"allocation": {
                            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": f"{node}-gpu",
                                                     "device": f"gpu-{c.at[1]}"}]},
                            # as a scheduler writes it (kube-scheduler's PreBind fails to reserve a
                            # claim without: it sets the field, immutable once allocated)
                            "allocationTimestamp": now,
                            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}, patch=True)

    def _claim_name(self, ref: str) -> str:
        return f"{self.tag}-c{ref}"

    def _create_claim(self, raw: Raw, ref: str, kind: str) -> None:
        raw.create(f"{RESOURCE}/namespaces/{self.ns}/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": self._claim_name(ref), "labels": self.labels}, "spec": claim_spec(kind)})

    def run(self, raw: Raw, poller: Poller, timeout: float = 60) -> WorldOutcome:
        placements: list[tuple] = []
        gated: list[bool | None] = []
        ties: list[bool] = []
        decided: list[bool] = []
        names = [f"{self.tag}-p{j}" for j in range(len(self.case.pods))]
        templates: set[str] = set()
        for j, p in enumerate(self.case.pods):
            entries = []
            late = []
            for k, c in enumerate(p.claims):
                if c.source == "template":
                    tname = f"{self.tag}-t{c.ref}"
                    if tname in templates:  # an earlier pod's template: a claim of its own again
                        entries.append({"name": f"g{k}", "resourceClaimTemplateName": tname})
                        continue
                    templates.add(tname)
                    raw.create(f"{RESOURCE}/namespaces/{self.ns}/resourceclaimtemplates", {
                        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                        "metadata": {"name": tname, "labels": self.labels},
                        "spec": {"metadata": {"labels": self.labels}, "spec": claim_spec(c.kind)}})
                    entries.append({"name": f"g{k}", "resourceClaimTemplateName": tname})
                    continue
                if c.source == "named":
                    self._create_claim(raw, c.ref, c.kind)
                # allocated: made with the world (create_infra)
                elif c.source == "late":
                    late.append(c)
                entries.append({"name": f"g{k}", "resourceClaimName": self._claim_name(c.ref)})
            selector = {"drap-world": self.tag, **({"topology.kubernetes.io/zone": p.zone} if p.zone else {})}
            name = names[j]
            raw.create(f"/api/v1/namespaces/{self.ns}/pods",
                       pod_body(name, self.ns, self.scheduler, p.cpu, selector, entries, self.labels))
            if late:
                time.sleep(GATE_WAIT)
                gated.append(poller.wait(lambda pods, refused, name=name: (
                    name in pods and (not pods[name]["spec"].get("nodeName") and name not in refused,)),
                    timeout, f"pod {name} seen")[0])
                for c in late:
                    self._create_claim(raw, c.ref, c.kind)
            else:
                gated.append(None)

            def outcome(pods, refused, name=name):
                pd = pods.get(name)
                if pd is None:
                    return None
                if pd["spec"].get("nodeName"):  # ours: its decision annotation comes with the binding
                    return ("node", self.node_names.index(pd["spec"]["nodeName"])), pd
                if name in refused:
                    return ("refused", refused[name][0].replace(self.tag, "<tag>")), pd
                return None

            if self.settles(p):
                # a claim allocated before may be freed by PostFilter (a message saying so), and
                # the pod tried again at once: bound (maybe before the message is written), or
                # refused again; every message, then the node
                def settled(pods, refused, name=name):
                    pd = pods.get(name)
                    msgs = refused.get(name, [])
                    if pd is None or not (pd["spec"].get("nodeName")
                                          or msgs and not any(r in msgs[-1] for r in self.RETRIED)):
                        return None
                    return True

                poller.wait(settled, timeout, f"pod {name} bound or refused by {self.scheduler}")
                time.sleep(SETTLE)
                placed, pd = poller.wait(lambda pods, refused, name=name: (tuple(
                    x for m in refused.get(name, ()) for x in ("refused", m.replace(self.tag, "<tag>")))
                    + (("node", self.node_names.index(pods[name]["spec"]["nodeName"]))
                       if pods[name]["spec"].get("nodeName") else ()), pods[name]), timeout, f"pod {name}")
            else:
                placed, pd = poller.wait(outcome, timeout, f"pod {name} bound or refused by {self.scheduler}")
            placements.append(placed)
            decision = (pd["metadata"].get("annotations") or {}).get(DECISION)
            bound = bool(pd["spec"].get("nodeName"))
            ties.append(bound and decision is not None and not unique_best(json.loads(decision)))
            decided.append(decision is not None)
        # the claims of every pod: what PreBind wrote (before the binding the pod was seen with)
        index = {n: j for j, n in enumerate(names)}
        outs = []
        for j, p in enumerate(self.case.pods):
            pd = raw.req("GET", f"/api/v1/namespaces/{self.ns}/pods/{names[j]}")
            statuses = {s["name"]: s.get("resourceClaimName") for s in pd["status"].get("resourceClaimStatuses") or ()}
            claims = []
            for k, c in enumerate(p.claims):
                cname = statuses.get(f"g{k}") if c.source == "template" else self._claim_name(c.ref)
                obj = raw.req("GET", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims/{cname}",
                              missing_ok=True) if cname else None
                st = (obj or {}).get("status") or {}
                alloc = st.get("allocation")
                devices = None if alloc is None else (tuple(
                    (r["request"], r["driver"], self.local(r["pool"]), r["device"],
                     json.dumps({k: v for k, v in r.items() if k not in ("request", "driver", "pool", "device")},
                                sort_keys=True))
                    for r in alloc["devices"].get("results") or ()),
                    json.dumps(alloc.get("nodeSelector"), sort_keys=True).replace(f"drap-{self.tag}-", ""))
                reserved = tuple(sorted(index.get(r["name"], -1) for r in st.get("reservedFor") or ()))
                claims.append((f"g{k}", devices, reserved))
            outs.append(PodOutcome(placements[j], gated[j], tuple(claims)))
        return WorldOutcome(tuple(outs), tuple(ties), tuple(decided))


# ---------------------------------------------------------------------------------------------
# a batch: several worlds side by side

def create_infra(raw: Raw, worlds: list[World]) -> None:
    """Every world's nodes, then every world's slices, then every world's allocated claims (the
    probe's claims come later: a scheduler that has them has these)."""
    for w in worlds:
        for n in w.nodes():
            raw.create("/api/v1/nodes", n)
    for w in worlds:
        for s in w.slices():
            raw.create(f"{RESOURCE}/resourceslices", s)
    for w in worlds:
        w.allocate_claims(raw)


def probe(raw: Raw, poller: Poller, ns: str, run: str, batch: str, schedulers: list[str],
          timeout: float = 60) -> None:
    """A node and a slice made after every other of the batch, and for each scheduler a pod that
    needs one of that slice's devices through CLASS_GPU (the last class made) and may only go to
    that node: once both are bound with their device, every scheduler has seen the batch's nodes,
    slices and the classes (each kind's watch events arrive in order)."""
    labels = {LABEL_RUN: run, LABEL_BATCH: batch}
    name = f"drap-{batch}-probe"
    raw.create("/api/v1/nodes", node_body(name, "8", ZONES[0], {**labels, "drap-world": name}))
    raw.create(f"{RESOURCE}/resourceslices", slice_body(name, name, name, [
        Device("t4", "16Gi", "pci0", None).body(i) for i in range(len(schedulers))], labels))
    for i, sched in enumerate(schedulers):
        pname = f"{name}-{i}"
        raw.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": pname, "labels": labels}, "spec": claim_spec("any")})
        raw.create(f"/api/v1/namespaces/{ns}/pods", pod_body(
            pname, ns, sched, "100m", {"drap-world": name}, [{"name": "g0", "resourceClaimName": pname}], labels))
    for i, sched in enumerate(schedulers):
        pname = f"{name}-{i}"
        poller.wait(lambda pods, refused, p=pname: (pods.get(p) or {}).get("spec", {}).get("nodeName"), timeout,
                    f"{sched} to bind its probe pod {pname}")
        claim = raw.req("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{pname}")
        assert (claim.get("status") or {}).get("allocation"), f"{sched} bound {pname} without allocating its claim"


def cleanup(raw: Raw, ns: str, batch: str, timeout: float = 60) -> None:
    """The batch's pods (grace 0), claims (their delete-protection finalizer stripped), templates,
    slices and nodes."""
    sel = f"{LABEL_BATCH}={batch}"
    errors = []

    def attempt(fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - go on cleaning, report at the end
            errors.append(repr(e))

    attempt(raw.req, "DELETE", f"/api/v1/namespaces/{ns}/pods", query={"labelSelector": sel,
                                                                     "gracePeriodSeconds": "0"})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = attempt(raw.req, "GET", f"/api/v1/namespaces/{ns}/pods", query={"labelSelector": sel})
        if left is not None and not left["items"]:
            break
        time.sleep(0.3)
    for _ in range(3):
        claims = attempt(raw.req, "GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims",
                         query={"labelSelector": sel}) or {"items": []}
        if not claims["items"]:
            break
        for c in claims["items"]:
            if c["metadata"].get("finalizers"):
                attempt(raw.req, "PATCH", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{c['metadata']['name']}",
                        {"metadata": {"finalizers": None}}, patch=True, missing_ok=True)
        attempt(raw.req, "DELETE", f"{RESOURCE}/namespaces/{ns}/resourceclaims", query={"labelSelector": sel})
        time.sleep(0.3)
    attempt(raw.req, "DELETE", f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", query={"labelSelector": sel})
    attempt(raw.req, "DELETE", f"{RESOURCE}/resourceslices", query={"labelSelector": sel})
    attempt(raw.req, "DELETE", "/api/v1/nodes", query={"labelSelector": sel})
    assert not errors, f"cleanup of batch {batch}: {errors}"
