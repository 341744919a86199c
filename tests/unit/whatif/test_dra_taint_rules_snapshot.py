"""Snapshots carry DeviceTaintRules (and the claims' status.devices), and simulate honours them:
a rule's NoSchedule taint keeps simulated pods off the devices it picks, as in the operator."""

from __future__ import annotations

import pytest
from support.whatif import node, pod, snap

from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.snapshot import SnapshotError, from_dict, trim_dra
from policy_scheduler.whatif.world import World

CLASS = {"metadata": {"name": "gpu.example.com"},
         "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}}


def slices(nodes, per_node=2):
    return [{"metadata": {"name": f"{n}-gpus"}, "spec": {
        "driver": "gpu.example.com", "nodeName": n, "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": f"gpu-{i}"} for i in range(per_node)]}} for n in nodes]


def claim(i):
    return {"metadata": {"name": f"c{i}", "namespace": "default", "uid": f"u{i}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}


RULE = {"metadata": {"name": "n0-broken"}, "spec": {"deviceSelector": {"pool": "n0"},
                                                    "taint": {"key": "broken", "effect": "NoSchedule"}}}


def test_simulated_pods_keep_off_devices_a_rule_taints():
    claims = [claim(i) for i in range(4)]
    pods = [pod(f"p{i}", resourceClaims=[{"name": "gpu", "resourceClaimName": f"c{i}"}]) for i in range(4)]
    kw = dict(resourceSlices=slices(["n0", "n1"]), deviceClasses=[CLASS], resourceClaims=claims)
    free = simulate(World(snap([node("n0"), node("n1")], **kw)), ["default"], pods).runs[0]
    assert sum(1 for r in free.results if r.node) == 4
    s = snap([node("n0"), node("n1")], deviceTaintRules=[RULE], **kw)
    assert s.to_dict()["deviceTaintRules"][0]["spec"] == RULE["spec"]
    run = simulate(World(s), ["default"], pods).runs[0]
    assert [r.node for r in run.results] == ["n1", "n1", None, None]
    assert "0/2 nodes are available: 2 cannot allocate all claims." in run.results[2].message


def test_a_bad_rule_is_reported_and_claim_device_status_is_kept():
    doc = snap([node("n0")]).to_dict()
    doc["deviceTaintRules"] = [{"metadata": {"name": "bad"}, "spec": {"deviceSelector": {"pool": 7}}}]
    with pytest.raises(SnapshotError, match="deviceTaintRules"):
        from_dict(doc)
    c = claim(0) | {"status": {"allocation": {"devices": {"results": []}}, "devices": [{"driver": "d"}],
                               "other": 1}}
    assert trim_dra("resourceclaims", c)["status"] == {"allocation": {"devices": {"results": []}},
                                                       "devices": [{"driver": "d"}]}
