"""What-if with partitionable devices and consumable capacity: a snapshot carries the counter
slices and the shares already allocated (shareID, consumedCapacity), the simulation allocates by
them, and device use counts a shared device once."""

from __future__ import annotations

import json

from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.snapshot import loads
from policy_scheduler.whatif.world import World
from support.whatif import node, pod, snap

DRIVER = "gpu.example.com"


def _slice(name, node_name, pool, count, **spec):
    return {"metadata": {"name": name}, "spec": {"driver": DRIVER, "nodeName": node_name,
                                                 "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
                                                 **spec}}


def _claim(name, cls, caps=None, allocation=None):
    ex = {"deviceClassName": cls, **({"capacity": {"requests": caps}} if caps else {})}
    body = {"metadata": {"name": name, "namespace": "default", "uid": f"u-{name}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}}}
    if allocation:
        body["status"] = {"allocation": allocation}
    return body


def test_simulated_pods_get_partitions_while_counters_last_and_shares_while_capacity_lasts():
    classes = [{"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": expr}}]}}
               for name, expr in (("part", "!device.allowMultipleAllocations"), ("vgpu", "device.allowMultipleAllocations"))]
    half = {"counterSet": "gpu-0", "counters": {"memory": {"value": "20Gi"}}}
    slices = [_slice("n0-counters", "n0", "n0", 2, sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}]),
              _slice("n0-parts", "n0", "n0", 2, devices=[{"name": f"half-{i}", "consumesCounters": [half]}
                                                           for i in range(3)]),
              _slice("n1-vgpu", "n1", "n1", 1, devices=[{"name": "vgpu", "allowMultipleAllocations": True,
                                                          "capacity": {"memory": {"value": "40Gi", "requestPolicy": {
                                                              "default": "4Gi",
                                                              "validRange": {"min": "1Gi", "step": "1Gi"}}}}}])]
    taken = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "vgpu",
                                      "shareID": "0b6f5a3e-4f4e-4e4f-9c0d-2f1b8a0c9d11",
                                      "consumedCapacity": {"memory": "30Gi"}}]}}
    claims = [_claim(f"p{i}", "part") for i in range(3)]
    claims += [_claim("v0", "vgpu"), _claim("v1", "vgpu", {"memory": "6Gi"}), _claim("v2", "vgpu", {"memory": "1"})]
    claims.append(_claim("old", "vgpu", allocation=taken))
    s = snap([node("n0"), node("n1")], resourceSlices=slices, deviceClasses=classes, resourceClaims=claims)
    s = loads(json.dumps(s.to_dict()))  # what a saved snapshot keeps
    pods = [pod(f"p{i}", resourceClaims=[{"name": "gpu", "resourceClaimName": f"p{i}"}]) for i in range(3)]
    pods += [pod(f"v{i}", resourceClaims=[{"name": "gpu", "resourceClaimName": f"v{i}"}]) for i in range(3)]
    run = simulate(World(s), ["default"], pods).runs[0]
    got = {r.pod.split("/")[-1]: (r.node, [d["device"] for d in r.devices]) for r in run.results}
    # three halves, one 40Gi counter set: two of them
    assert got["p0"] == ("n0", [f"{DRIVER}/n0/half-0"]) and got["p1"] == ("n0", [f"{DRIVER}/n0/half-1"])
    assert got["p2"][0] is None
    assert "0/2 nodes are available: 2 cannot allocate all claims." in run.results[2].message
    # 30Gi of 40Gi taken before the snapshot; v0 the default 4Gi, v1 6Gi: full, v2 refused
    assert got["v0"] == ("n1", [f"{DRIVER}/n1/vgpu"]) and got["v1"] == ("n1", [f"{DRIVER}/n1/vgpu"])
    assert got["v2"][0] is None
    assert run.devices["allocated"] == 3  # half-0, half-1 and the one vgpu, shared
    shared = [(d["claim"], d["consumedCapacity"]) for r in run.results for d in r.devices if d.get("shared")]
    assert shared == [("v0", {"memory": "4Gi"}), ("v1", {"memory": "6Gi"})]
