"""Partitionable devices and consumable capacity (DRAPartitionableDevices, DRAConsumableCapacity:
beta and on in v1.37) against upstream: seeded cases run by kube-scheduler v1.37.1 (twice) and by
policy-scheduler's `default` policy, as test_dra_parity.py runs its cases (same worlds, batches,
probe and comparison; see there).

Devices, per node (driver ``gpu.example.com``):
- pool ``<node>-gpu``: one or two physical GPUs (40Gi or 80Gi, 8 SMs) published as a counter set
  each (``gpu-<i>``: counters ``memory`` and ``sm``) in a slice of its own (``<node>-gpu-counters``)
  and their partitions in another (or two, named so that they sort the second half first): whole
  (all of it), half, quarter (a quarter of the memory, 2 SMs) and small (an eighth, 3 SMs: the
  SMs run out first), in a seeded order, attributes ``profile`` and ``gpu``, capacity ``memory``;
  sometimes also a partition with ``allowMultipleAllocations`` that consumes half a GPU once
  however many shares it has;
- pool ``<node>-vgpu`` (some nodes): two devices with ``allowMultipleAllocations`` and consumable
  capacity: ``memory`` 40Gi (default 4Gi, validRange 1Gi..40Gi step 1Gi) and ``cores`` 100
  (default 10, validValues 10/25/50/100);
- pool ``fabric`` (some worlds): a slice with ``perDeviceNodeSelection``, devices bound to one node
  (``nodeName``) or to two of the world's nodes (a ``nodeSelector`` on the hostname).

Claims ask for partitions by profile, count, memory (CEL on capacity), firstAvailable, matchAttribute
and distinctAttribute on the GPU, All; for shares with capacity requests (rounded up by the
policy, the defaults, more than a device has, a capacity no device has, two shares of one device
in one claim, distinct devices, All); for fabric devices; and a mix. Sources: named, template,
shared by two pods, and allocated before the pods (a partition, or a share with its shareID and
consumedCapacity), as test_dra_parity.py's. Compared: every pod's node, its claims' allocation
results (request, pool, device, consumedCapacity, whether a shareID is there) and nodeSelector,
reservedFor, and FailedScheduling messages, where upstream's two runs agree."""

from __future__ import annotations

import copy
import os
import random
import secrets
import time
import uuid
from dataclasses import dataclass

from dra_world import (DRIVER, ZONES, ClaimRef, PodSpec, Poller, World, WorldOutcome, create_classes, delete_classes,
                       RESOURCE)
from test_dra_parity import ADMIN_ACCESS, batches, compare, dra_components, raw, run_batch, summary, who_bound

__all__ = ["dra_components", "raw"]  # the fixtures, shared with test_dra_parity.py

SEED = int(os.environ.get("DRA_PART_SEED", "20261129"))
CASES = int(os.environ.get("DRA_PART_CASES", "40"))
MAX_NODES = 99
AGREE = 0.95  # of the cases where upstream agrees with itself

CLASS_PART = "drapp-part"  # partitions: a profile attribute
CLASS_VGPU = "drapp-vgpu"  # devices that allow multiple allocations
CLASS_FABRIC = "drapp-fabric"
P_CLASSES = [
    (CLASS_PART, [f'device.driver == "{DRIVER}"', f'"profile" in device.attributes["{DRIVER}"]']),
    (CLASS_VGPU, [f'device.driver == "{DRIVER}"', "device.allowMultipleAllocations"]),
    (CLASS_FABRIC, [f'device.driver == "{DRIVER}"', f'"fabric" in device.attributes["{DRIVER}"]']),
]
PROFILES = {"whole": (1, 8), "half": (2, 4), "quarter": (4, 2), "small": (8, 3)}  # memory divisor, SMs


def _profile(p: str) -> str:
    return f'device.attributes["{DRIVER}"].profile == "{p}"'


def _ex(cls: str, sels: tuple = (), count: int | None = None, all_: bool = False, caps: dict | None = None) -> dict:
    e: dict = {"deviceClassName": cls}
    if sels:
        e["selectors"] = [{"cel": {"expression": s}} for s in sels]
    if all_:
        e["allocationMode"] = "All"
    elif count:
        e["allocationMode"], e["count"] = "ExactCount", count
    if caps:
        e["capacity"] = {"requests": dict(caps)}
    return e


def _one(**kw) -> list:
    return [{"name": "d", "exactly": _ex(**kw)}]


GPU_ATTR = f"{DRIVER}/gpu"
VID_ATTR = f"{DRIVER}/vid"
# name -> (weight, requests, constraints)
PKINDS: dict[str, tuple[int, list, list]] = {
    "part-any": (4, _one(cls=CLASS_PART), []),
    "whole": (3, _one(cls=CLASS_PART, sels=(_profile("whole"),)), []),
    "half": (3, _one(cls=CLASS_PART, sels=(_profile("half"),)), []),
    "quarter2": (3, _one(cls=CLASS_PART, sels=(_profile("quarter"),), count=2), []),
    "small3": (2, _one(cls=CLASS_PART, sels=(_profile("small"),), count=3), []),
    "mem-ge": (2, _one(cls=CLASS_PART, sels=(f'device.capacity["{DRIVER}"].memory.compareTo(quantity("20Gi")) >= 0',)),
               []),
    "first-part": (3, [{"name": "d", "firstAvailable": [
        {"name": "whole", **_ex(CLASS_PART, (_profile("whole"),))},
        {"name": "halves", **_ex(CLASS_PART, (_profile("half"),), count=2)},
        {"name": "quarter", **_ex(CLASS_PART, (_profile("quarter"),))}]}], []),
    "match-gpu": (2, _one(cls=CLASS_PART, count=2), [{"matchAttribute": GPU_ATTR}]),
    "distinct-gpu": (2, _one(cls=CLASS_PART, sels=(_profile("half"),), count=2), [{"distinctAttribute": GPU_ATTR}]),
    "all-half": (1, _one(cls=CLASS_PART, sels=(_profile("half"),), all_=True), []),
    "vgpu": (4, _one(cls=CLASS_VGPU, caps={"memory": "5.5Gi"}), []),
    "vgpu-default": (3, _one(cls=CLASS_VGPU), []),
    "vgpu-cores": (2, _one(cls=CLASS_VGPU, caps={"cores": "30"}), []),
    "vgpu-big": (3, _one(cls=CLASS_VGPU, caps={"memory": "30Gi", "cores": "50"}), []),
    "vgpu-over": (1, _one(cls=CLASS_VGPU, caps={"memory": "41Gi"}), []),
    "vgpu-no-such": (1, _one(cls=CLASS_VGPU, caps={"bandwidth": "1"}), []),
    "vgpu-two": (2, [{"name": "a", "exactly": _ex(CLASS_VGPU, caps={"memory": "2Gi"})},
                     {"name": "b", "exactly": _ex(CLASS_VGPU, caps={"memory": "20Gi", "cores": "25"})}], []),
    "vgpu-distinct": (2, [{"name": "a", "exactly": _ex(CLASS_VGPU, caps={"memory": "20Gi"})},
                          {"name": "b", "exactly": _ex(CLASS_VGPU, caps={"memory": "20Gi"})}],
                      [{"distinctAttribute": VID_ATTR}]),
    "vgpu-all": (1, _one(cls=CLASS_VGPU, all_=True, caps={"memory": "1Gi"}), []),
    "fabric": (2, _one(cls=CLASS_FABRIC), []),
    "mixed": (2, [{"name": "p", "exactly": _ex(CLASS_PART, (_profile("quarter"),))},
                  {"name": "v", "exactly": _ex(CLASS_VGPU, caps={"memory": "3Gi"})}], []),
}


def claim_spec(kind: str) -> dict:
    _, requests, constraints = PKINDS[kind]
    devices: dict = {"requests": copy.deepcopy(requests)}
    if constraints:
        devices["constraints"] = copy.deepcopy(constraints)
    return {"devices": devices}


# ---------------------------------------------------------------------------------------------
# the cases

@dataclass
class PNode:
    """``gpus``: per physical GPU its memory and its partitions' profiles in slice order (None: no
    gpu pool); ``shared``: the GPU pool also has a partition with allowMultipleAllocations;
    ``vgpu``: the node has the vgpu pool; ``split``: partitions in two slices."""
    cpu: str
    zone: str
    gpus: list[tuple[str, list[str]]] | None
    shared: bool = False
    vgpu: bool = False
    split: bool = False

    def short(self) -> str:
        g = "no gpu" if self.gpus is None else " ".join(f"{m}[{','.join(ps)}]" for m, ps in self.gpus)
        return g + (" +shared" if self.shared else "") + (" +vgpu" if self.vgpu else "") + (" split" if self.split else "")


@dataclass
class PCase:
    nodes: list[PNode]
    pods: list[PodSpec]
    fabric: bool

    def features(self) -> set[str]:
        f = {f"kind:{c.kind}" for p in self.pods for c in p.claims} | {f"source:{c.source}" for p in self.pods
                                                                          for c in p.claims}
        f |= {"shared-partition" for n in self.nodes if n.shared} | {"split" for n in self.nodes if n.split}
        f |= {"fabric"} if self.fabric else set()
        return f

    def describe(self) -> str:
        nodes = "; ".join(f"n{i} cpu {n.cpu} {n.short()}" for i, n in enumerate(self.nodes))
        pods = "; ".join(f"p{j} cpu {p.cpu}" + (f" zone {p.zone}" if p.zone else "") + ": " +
                         ",".join(f"{c.source}:{c.kind}" + (f"({c.ref})" if c.source == "shared" else "")
                                  + (f"(n{c.at[0]} #{c.at[1]})" if c.at else "") for c in p.claims)
                         for j, p in enumerate(self.pods))
        return f"nodes [{nodes}]{' +fabric' if self.fabric else ''} pods [{pods}]"


def _kind(rng: random.Random) -> str:
    names = list(PKINDS)
    return rng.choices(names, weights=[PKINDS[k][0] for k in names])[0]


def make_case(rng: random.Random, must: str) -> PCase:
    n = rng.randint(2, 3)
    nodes = []
    for i, cpu in enumerate(rng.sample(("2", "3", "4", "6", "8"), n)):
        gpus = None
        if rng.random() < 0.85:
            gpus = []
            for _ in range(rng.randint(1, 2)):
                parts = ["whole", "half", "half", "quarter", "quarter", "quarter", "quarter", "small", "small"]
                parts = rng.sample(parts, rng.randint(4, len(parts)))
                gpus.append((rng.choice(("40Gi", "80Gi")), parts))
        nodes.append(PNode(cpu, ZONES[i % 2], gpus, shared=bool(gpus) and rng.random() < 0.3,
                           vgpu=rng.random() < 0.6, split=bool(gpus) and rng.random() < 0.25))
    pods: list[PodSpec] = []
    named: list[tuple[str, str]] = []
    allocated_done = False
    for j in range(rng.randint(3, 6)):
        claims: list[ClaimRef] = []
        for k in range(rng.choices((1, 2), weights=(3, 1))[0]):
            r, ref = rng.random(), f"{j}-{k}"
            if r < 0.12 and named and not any(c.source == "shared" for c in claims):
                ref, kind = rng.choice(named)
                claims.append(ClaimRef("shared", kind, ref))
            elif r < 0.22 and not allocated_done:
                allocated_done = True
                ni = rng.randrange(n)
                kind = "vgpu-default" if nodes[ni].vgpu and (not nodes[ni].gpus or rng.random() < 0.5) else "part-any"
                if kind == "part-any" and not nodes[ni].gpus:
                    continue
                claims.append(ClaimRef("allocated", kind, ref, at=(ni, rng.randrange(2))))
            elif r < 0.45:
                claims.append(ClaimRef("template", _kind(rng), ref))
            else:
                claims.append(ClaimRef("named", _kind(rng), ref))
        named += [(c.ref, c.kind) for c in claims if c.source in ("named", "allocated")]
        zone = rng.choice(ZONES) if rng.random() < 0.1 else None
        for c in claims:
            if c.source == "allocated" and rng.random() < 0.3:
                zone = ZONES[(c.at[0] + 1) % 2]
        pods.append(PodSpec(rng.choice(("500m", "1", "1500m")), claims, zone))
    if not any(c.kind == must for p in pods for c in p.claims):
        j = rng.randrange(len(pods))
        pods[j].claims.append(ClaimRef("named", must, f"{j}-{len(pods[j].claims)}"))
    return PCase(nodes, pods, rng.random() < 0.5)


# ---------------------------------------------------------------------------------------------
# the world

def _gi(q: str) -> int:
    return int(q.removesuffix("Gi"))


def _slice(name: str, pool: str, count: int, labels: dict, node: str | None = None, **spec) -> dict:
    s = {"driver": DRIVER, "pool": {"name": pool, "generation": 1, "resourceSliceCount": count}, **spec}
    if node:
        s["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name, "labels": labels},
            "spec": s}


def _counters(mem: str, sms: int) -> dict:
    return {"memory": {"value": mem}, "sm": {"value": str(sms)}}


VGPU_CAPACITY = {
    "memory": {"value": "40Gi", "requestPolicy": {"default": "4Gi",
                                                  "validRange": {"min": "1Gi", "max": "40Gi", "step": "1Gi"}}},
    "cores": {"value": "100", "requestPolicy": {"default": "10", "validValues": ["10", "25", "50", "100"]}},
}


class PWorld(World):
    def claim_spec(self, kind: str) -> dict:
        return claim_spec(kind)

    def partitions(self, node: PNode) -> list[dict]:
        out = []
        for gi, (mem, parts) in enumerate(node.gpus or []):
            seen: dict[str, int] = {}
            for p in parts:
                div, sms = PROFILES[p]
                k = seen[p] = seen.get(p, -1) + 1
                m = f"{_gi(mem) * 1024 // div}Mi"
                out.append({"name": f"g{gi}-{p}-{k}", "attributes": {"profile": {"string": p}, "gpu": {"int": gi}},
                            "capacity": {"memory": {"value": m}},
                            "consumesCounters": [{"counterSet": f"gpu-{gi}", "counters": _counters(m, sms)}]})
            if node.shared and gi == 0:
                half = f"{_gi(mem) // 2}Gi"
                out.append({"name": "g0-shared", "allowMultipleAllocations": True,
                            "attributes": {"profile": {"string": "shared"}, "gpu": {"int": 0}, "vid": {"int": 9}},
                            "capacity": {"memory": {"value": half, "requestPolicy": {
                                "default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}},
                            "consumesCounters": [{"counterSet": "gpu-0", "counters": _counters(half, 4)}]})
        return out

    def slices(self) -> list[dict]:
        out = []
        for name, n in zip(self.node_names, self.case.nodes):
            if n.gpus is not None:
                pool = f"{name}-gpu"
                devs = self.partitions(n)
                count = 3 if n.split else 2
                out.append(_slice(f"{name}-gpu-counters", pool, count, self.labels, name, sharedCounters=[
                    {"name": f"gpu-{gi}", "counters": _counters(mem, 8)} for gi, (mem, _) in enumerate(n.gpus)]))
                if n.split:
                    h = len(devs) // 2
                    out += [_slice(f"{name}-gpu-devs-b", pool, count, self.labels, name, devices=devs[:h]),
                            _slice(f"{name}-gpu-devs-a", pool, count, self.labels, name, devices=devs[h:])]
                else:
                    out.append(_slice(f"{name}-gpu-devs", pool, count, self.labels, name, devices=devs))
            if n.vgpu:
                out.append(_slice(f"{name}-vgpu", f"{name}-vgpu", 1, self.labels, name, devices=[
                    {"name": f"vgpu-{i}", "allowMultipleAllocations": True, "attributes": {"vid": {"int": i}},
                     "capacity": copy.deepcopy(VGPU_CAPACITY)} for i in range(2)]))
        if self.case.fabric:
            hosts = self.node_names
            devs = [{"name": f"link-{i}", "attributes": {"fabric": {"bool": True}}, "nodeName": h}
                    for i, h in enumerate(hosts[:2])]
            devs.append({"name": "link-pair", "attributes": {"fabric": {"bool": True}}, "nodeSelector": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts[-2:]}]}]}})
            out.append(_slice(f"drap-{self.tag}-fabric", f"drap-{self.tag}-fabric", 1, self.labels,
                              perDeviceNodeSelection=True, devices=devs))
        return out

    def allocate_claims(self, raw) -> None:
        """Claims allocated before the first pod: a partition (the ``at[1]``-th of the node's
        first GPU) or a share of a vgpu (its shareID and the defaults consumed)."""
        for p in self.case.pods:
            for c in p.claims:
                if c.source != "allocated":
                    continue
                self._create_claim(raw, c.ref, c.kind)
                node = self.node_names[c.at[0]]
                if c.kind == "vgpu-default":
                    result = {"request": "d", "driver": DRIVER, "pool": f"{node}-vgpu", "device": f"vgpu-{c.at[1]}",
                              "shareID": str(uuid.uuid4()), "consumedCapacity": {"memory": "4Gi", "cores": "10"}}
                else:
                    devs = [d for d in self.partitions(self.case.nodes[c.at[0]]) if not d.get("allowMultipleAllocations")]
                    result = {"request": "d", "driver": DRIVER, "pool": f"{node}-gpu",
                              "device": devs[c.at[1] % len(devs)]["name"]}
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                raw.req("PATCH", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims/{self._claim_name(c.ref)}/status",
                        {"status": {"allocation": {"devices": {"results": [result]}, "allocationTimestamp": now,
                                                   "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                                       {"key": "metadata.name", "operator": "In",
                                                        "values": [node]}]}]}}}}, patch=True)


def create_p_classes(raw) -> list[str]:
    made = []
    for name, sels in P_CLASSES:
        raw.req("DELETE", f"{RESOURCE}/deviceclasses/{name}", missing_ok=True)
        raw.create(f"{RESOURCE}/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": s}} for s in sels]}})
        made.append(name)
    return made + create_classes(raw)  # dra_world's last: the probe's class, made after these


REQUIRED = {f"kind:{k}" for k in PKINDS} | {"source:named", "source:template", "source:shared", "source:allocated",
                                            "shared-partition", "split", "fabric"}


def test_same_partitionable_and_consumable_outcomes_as_kube_scheduler(cluster, core, namespace, operator,
                                                                      example_policies, dra_components, raw,
                                                                      monkeypatch):
    import test_dra_parity

    monkeypatch.setattr(test_dra_parity, "World", PWorld)  # run_batch builds these worlds
    monkeypatch.setattr(test_dra_parity, "SEED", SEED)  # (its messages name the seed)
    rng = random.Random(SEED)
    cases = [make_case(rng, list(PKINDS)[i % len(PKINDS)]) for i in range(CASES)]
    covered = set().union(*(c.features() for c in cases))
    if CASES >= len(PKINDS):
        assert REQUIRED <= covered, f"seed {SEED} leaves out {sorted(REQUIRED - covered)}"
    core.patch_namespace(namespace, {"metadata": {"labels": {ADMIN_ACCESS: "true"}}})
    run = secrets.token_hex(2)
    existing = len(core.list_node().items)
    groups = batches(cases, MAX_NODES - existing - 1)
    classes = create_p_classes(raw)
    poller = Poller(raw, namespace, run).start()
    results: dict = {}
    t0 = time.monotonic()
    try:
        for b, idx in enumerate(groups):
            run_batch(raw, poller, namespace, run, b, cases, idx, results)
    finally:
        poller.stop()
        delete_classes(raw, classes)
    took = time.monotonic() - t0
    unique, agree, pods, lines, bad = compare(cases, results)
    wrong = who_bound(cases, results)
    assert not wrong, "\n".join(wrong)
    print(f"\nDRA partitionable/consumable parity: {CASES} cases (seed {SEED}) in {len(groups)} batches, {took:.0f}s; "
          f"upstream unique on {unique} ({pods} pods); same nodes, devices and messages on {agree}/{unique}"
          f" = {100.0 * agree / unique if unique else 0:.0f}%")
    print(summary(results))
    shares = consumed = 0
    for (i, w), out in results.items():
        if w != "a" or not isinstance(out, WorldOutcome):
            continue
        for p in out.pods:
            for _, allocation, _ in p.claims:
                for *_, extra in (allocation[0] if allocation else ()):
                    shares += '"shareID"' in extra
                    consumed += '"consumedCapacity"' in extra
    print(f"upstream's first runs: {shares} results with a shareID, {consumed} with consumedCapacity")
    assert shares and consumed, "no case allocated a share: the comparison proves nothing about them"
    print("\n".join(lines))
    if bad:
        print("disagreements:\n" + "\n".join(bad))
    assert unique >= CASES * 3 // 4, "\n".join(lines)
    assert agree >= AGREE * unique, "\n".join(bad)
