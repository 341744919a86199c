"""The DRA workload of bench/throughput.py (``--workload DRA``): the objects, the sizes and the
checks, as plain functions (the measuring is throughput.py's).

The shape is upstream scheduler_perf's SchedulingWithResourceClaimTemplate
(test/integration/scheduler_perf/dra/: performance-config.yaml and templates/):

- nodes ``scheduler-perf-dra-<i>``: 4 cpu / 32Gi / 110 pods, labelled ``node-with-dra: "true"``
  plus the kubelet's hostname label and a zone;
- one ResourceSlice per node, ``resourceslice-<i>``, a pool of the same name (generation 1, one
  slice), ``nodeName`` set, driver ``test-driver.cdi.k8s.io``, with ``devices`` devices
  ``basic-device-0..`` of 14 attributes each (``driverVersion`` 1.2.3,
  ``resource.kubernetes.io/pciRoot`` cycling over 2 roots, ...) and capacity memory 24480Mi,
  millicores 1k;
- the DeviceClass ``test-class`` (CEL ``device.driver == "test-driver.cdi.k8s.io"``), the
  ResourceClaimTemplate ``test-claim-template`` with one request ``req-0`` of exactly one device of
  that class;
- pods of a pause container with small requests, each with one claim from the template
  (``spec.resourceClaims: [{name: resource, resourceClaimTemplateName: test-claim-template}]``):
  kube-controller-manager's resourceclaim controller creates the claim and names it in the pod's
  ``status.resourceClaimStatuses``; until then the scheduler holds the pod (PreEnqueue).

Partitionable devices (DRAPartitionableDevices, on in v1.37): every device consumes its memory
from a counter set per PCI root (``pci-root-<r>``: the memory of the root's devices together),
published in a second slice of the pool, ``resourceslice-<i>-counters`` (``sharedCounters``, no
devices; both slices say ``resourceSliceCount: 2``). The counters hold exactly what the devices
consume, so every device can still be allocated: the workload is upstream's, with the counter
checks of the allocator on every device (up to 64 devices per slice, the API's limit for devices
that consume counters; more devices are published without counters).

Upstream's burst (5000pods_500nodes) has 500 nodes of 10 devices, 2,500 pods scheduled first (not
measured: their claims allocated) and 2,500 measured: the devices end up all allocated. The sizes
here default to the same halves of the devices of the nodes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

DRIVER = "test-driver.cdi.k8s.io"
DEVICE_CLASS = "test-class"
CLAIM_TEMPLATE = "test-claim-template"
POD_CLAIM = "resource"  # the pod's name for its claim (spec.resourceClaims[].name)
REQUEST = "req-0"
NODE_LABEL = "node-with-dra"
PCI_ROOT = "resource.kubernetes.io/pciRoot"
PCI_ROOTS = 2  # upstream's numPCIRoots
DEVICES = 10  # devices per node, upstream's default
DEVICE_MEMORY_MI = 24480
MAX_PARTITIONABLE = 64  # ResourceSliceMaxDevicesWithAdvancedFeatures: devices per slice that consume counters
CONTROLLERS = "resourceclaim-controller"  # kube-controller-manager --controllers: the claims of templates
API = "resource.k8s.io/v1"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


def node_name(i: int) -> str:
    return f"scheduler-perf-dra-{i}"


def slice_name(i: int) -> str:
    return f"resourceslice-{i}"


def partitionable(devices: int) -> bool:
    return 0 < devices <= MAX_PARTITIONABLE


def node(i: int, zones: int, cpu: str, memory: str, pods: str, hostname: str, zone: str,
         kwok_annotation: dict[str, str], conditions: list[dict] | None) -> dict:
    name = node_name(i)
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    status: dict[str, Any] = {"capacity": alloc, "allocatable": alloc}
    if conditions is not None:
        status["conditions"] = conditions
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {NODE_LABEL: "true", hostname: name, zone: f"zone-{i % zones}"},
                         "annotations": kwok_annotation},
            "status": status}


def device(i: int, d: int, counters: bool = False) -> dict:
    """``basic-device-<d>`` of node ``i``: 14 attributes, two capacities; with ``counters``, its
    memory consumed from its PCI root's counter set."""
    root = d % PCI_ROOTS
    out: dict[str, Any] = {
        "name": f"basic-device-{d}",
        "attributes": {
            "index": {"int": d},
            "uuid": {"string": f"dev-{i:05d}-{d:02d}-0000-0000-000000000000"},
            "model": {"string": "LATEST-GPU-MODEL"},
            "family": {"string": "test"},
            "productName": {"string": "test device"},
            "brand": {"string": "test-brand"},
            "architecture": {"string": "test-arch"},
            "driverVersion": {"version": "1.2.3"},
            "firmwareVersion": {"version": "2.0.1"},
            "numaNode": {"int": root},
            PCI_ROOT: {"string": f"pci{root:04x}:00"},
            "pcieBusID": {"string": f"{root:04x}:{d + 1:02x}:00.0"},
            "migCapable": {"bool": False},
            "healthy": {"bool": True},
        },
        "capacity": {"memory": {"value": f"{DEVICE_MEMORY_MI}Mi"}, "millicores": {"value": "1k"}},
    }
    if counters:
        out["consumesCounters"] = [{"counterSet": f"pci-root-{root}",
                                    "counters": {"memory": {"value": f"{DEVICE_MEMORY_MI}Mi"}}}]
    return out


def resource_slice(i: int, devices: int) -> dict:
    """The node's devices (a pool of two slices with partitionable devices, else of one)."""
    parts = partitionable(devices)
    return {"apiVersion": API, "kind": "ResourceSlice",
            "metadata": {"name": slice_name(i)},
            "spec": {"driver": DRIVER, "nodeName": node_name(i),
                     "pool": {"name": slice_name(i), "generation": 1, "resourceSliceCount": 2 if parts else 1},
                     "devices": [device(i, d, parts) for d in range(devices)]}}


def counter_slice(i: int, devices: int) -> dict | None:
    """The pool's shared counters: per PCI root the memory of its devices (None without
    partitionable devices)."""
    if not partitionable(devices):
        return None
    per_root = Counter(d % PCI_ROOTS for d in range(devices))
    return {"apiVersion": API, "kind": "ResourceSlice",
            "metadata": {"name": f"{slice_name(i)}-counters"},
            "spec": {"driver": DRIVER, "nodeName": node_name(i),
                     "pool": {"name": slice_name(i), "generation": 1, "resourceSliceCount": 2},
                     "sharedCounters": [{"name": f"pci-root-{r}",
                                         "counters": {"memory": {"value": f"{n * DEVICE_MEMORY_MI}Mi"}}}
                                        for r, n in sorted(per_root.items())]}}


def slices(i: int, devices: int) -> list[dict]:
    """Node ``i``'s ResourceSlices: its devices and, with partitionable devices, its counters."""
    return [s for s in (resource_slice(i, devices), counter_slice(i, devices)) if s is not None]


def device_class() -> dict:
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def claim_template(namespace: str) -> dict:
    return {"apiVersion": API, "kind": "ResourceClaimTemplate",
            "metadata": {"name": CLAIM_TEMPLATE, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [
                {"name": REQUEST, "exactly": {"deviceClassName": DEVICE_CLASS}}]}}}}


def pod(name: str, namespace: str, scheduler_name: str, cpu: str, memory: str, app: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
            "spec": {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": cpu, "memory": memory},
                                                   "limits": {"cpu": cpu, "memory": memory},
                                                   "claims": [{"name": POD_CLAIM}]}}],
                     "resourceClaims": [{"name": POD_CLAIM, "resourceClaimTemplateName": CLAIM_TEMPLATE}]}}


def sizes(nodes: int, devices: int, pods: int | None, init: int | None) -> tuple[int, int]:
    """(measured pods, pods scheduled first): by default upstream's halves of the devices (they
    end up all allocated); with ``init`` given the measured pods take the rest, with ``pods``
    given the pods scheduled first take up to half the devices, of what is left. At least one
    pod is scheduled first, so that the scheduler's start-up is not measured. Raises ValueError
    when they ask for more devices than the nodes have."""
    total = nodes * devices
    if init is None:
        init = total // 2 if pods is None else min(total // 2, total - pods)
    init = max(1, init)
    if pods is None:
        pods = total - init
    if pods < 1 or init < 0 or pods + init > total:
        raise ValueError(f"{init} pods scheduled first and {pods} measured need {pods + init} devices; "
                         f"{nodes} nodes x {devices} devices have {total}")
    return pods, init


def pod_claim_name(p: dict) -> str | None:
    """The claim the resourceclaim controller made for the pod's ``resource`` claim."""
    for st in (p.get("status") or {}).get("resourceClaimStatuses") or []:
        if st.get("name") == POD_CLAIM:
            return st.get("resourceClaimName")
    return None


def pod_claim_names(p: dict) -> list[str] | None:
    """The names of all the pod's claims, or None while one from a template is not made yet."""
    statuses = {st.get("name"): st.get("resourceClaimName")
                for st in (p.get("status") or {}).get("resourceClaimStatuses") or []}
    out = []
    for rc in (p.get("spec") or {}).get("resourceClaims") or []:
        cname = rc.get("resourceClaimName") or statuses.get(rc.get("name"))
        if not cname:
            return None
        out.append(cname)
    return out


def allocation(node: str, pool: str, dev: str, timestamp: str) -> dict:
    """status.allocation of a claim given one device of the node's slice, as kube-scheduler's
    PreBind writes it (the bare binder's DRA mode)."""
    return {"devices": {"results": [{"request": REQUEST, "driver": DRIVER, "pool": pool, "device": dev}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
            "allocationTimestamp": timestamp}


def check_claims(pods: list[dict], claims: list[dict], names: list[str]) -> tuple[list[str], dict[str, Any]]:
    """After a run: no device allocated twice (every claim's status.allocation.devices.results),
    every bound pod of ``names`` with exactly one claim, owned by it, allocated once (one result,
    for req-0, a device of the slice of the pod's node, a node selector naming that node) and
    reserved for it alone. Returns the errors (at most a few of each kind) and a tally."""
    errors: list[str] = []
    by_name = {p["metadata"]["name"]: p for p in pods}
    claim_by_name = {c["metadata"]["name"]: c for c in claims}
    owned = Counter(ref.get("uid") for c in claims for ref in c["metadata"].get("ownerReferences") or []
                    if ref.get("kind") == "Pod" and ref.get("controller"))
    used: Counter = Counter()
    allocated = 0
    for c in claims:
        results = ((((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or [])
        allocated += bool(results)
        used.update((r.get("driver"), r.get("pool"), r.get("device")) for r in results)
    twice = [f"{d[1]}/{d[2]} x{n}" for d, n in used.items() if n > 1]
    if twice:
        errors.append(f"{len(twice)} devices allocated more than once, e.g. {twice[:5]}")
    bad: dict[str, list[str]] = {}

    def fail(kind: str, what: str) -> None:
        bad.setdefault(kind, []).append(what)

    for n in names:
        p = by_name.get(n)
        node = ((p or {}).get("spec") or {}).get("nodeName")
        if not node:
            continue  # check_run reports unbound pods
        uid = p["metadata"]["uid"]
        cname = pod_claim_name(p)
        c = claim_by_name.get(cname or "")
        if c is None:
            fail("bound without a claim", f"{n} ({cname})")
            continue
        if owned[uid] != 1:
            fail("claims owned by the pod != 1", f"{n}: {owned[uid]}")
        refs = [r for r in c["metadata"].get("ownerReferences") or [] if r.get("controller")]
        if [r.get("uid") for r in refs] != [uid]:
            fail("claim not controlled by its pod", f"{cname} of {n}")
        st = c.get("status") or {}
        results = ((st.get("allocation") or {}).get("devices") or {}).get("results") or []
        if len(results) != 1:
            fail("claim not allocated exactly once", f"{cname} of {n}: {len(results)} results")
        else:
            r = results[0]
            want_pool = "resourceslice-" + node.rsplit("-", 1)[1]
            if (r.get("request"), r.get("driver"), r.get("pool")) != (REQUEST, DRIVER, want_pool):
                fail("device not of the pod's node", f"{cname} of {n} on {node}: {r}")
        terms = ((st.get("allocation") or {}).get("nodeSelector") or {}).get("nodeSelectorTerms") or []
        fields = [f for t in terms for f in t.get("matchFields") or []]
        if fields != [{"key": "metadata.name", "operator": "In", "values": [node]}]:
            fail("allocation's node selector is not the pod's node", f"{cname} of {n} on {node}: {terms}")
        reserved = [(x.get("resource"), x.get("name"), x.get("uid")) for x in st.get("reservedFor") or []]
        if reserved != [("pods", n, uid)]:
            fail("claim not reserved for its pod alone", f"{cname} of {n}: {reserved}")
    for kind, items in bad.items():
        errors.append(f"{len(items)} pods: {kind}, e.g. {items[:3]}")
    return errors, {"claims": len(claims), "claims_allocated": allocated, "devices_allocated": sum(used.values())}
