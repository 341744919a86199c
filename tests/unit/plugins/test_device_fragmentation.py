"""DeviceFragmentation: the share of a node's devices in use once the pod's allocation is made."""

from __future__ import annotations

import numpy as np
from support.drakit import DRIVER, DraHandle, claim, device_class, filter_all, gpu, nodes, pod, request, resource_slice
from support.kit import instance

from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.dynamicresources.device_fragmentation import DeviceFragmentation
from policy_scheduler.plugins.dynamicresources.dynamic_resources import DynamicResources


def test_packs_devices_onto_the_fullest_node():
    h = DraHandle()
    h.add("deviceclasses", device_class(), device_class("other", selectors=['device.driver == "x"']))
    h.add("resourceslices", resource_slice("n0", [gpu(f"g{i}") for i in range(4)]),
          resource_slice("n1", [gpu(f"g{i}") for i in range(4)]), resource_slice("n2", []))
    alloc = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": f"g{i}"}
                                     for i in range(2)]}}
    h.add("resourceclaims", claim("held", [request(count=2)], allocation=alloc), claim("x"))
    t = nodes("n0", "n1", "n2")
    dra = instance(DynamicResources, None, h)
    frag = instance(DeviceFragmentation, None, h)
    p = pod("p", claims=["x"])
    _, res, state = filter_all(dra, p, t)
    assert list(res.passed) == [True, True, False]
    assert frag.pre_score(state, p, t, np.arange(2)).is_success
    assert list(frag.score(state, p, t, np.arange(2))) == [25, 75]  # n1 ends with 3 of 4 in use
    only_other = instance(DeviceFragmentation, {"classes": ["other"]}, h)
    assert list(only_other.score(state, p, t, np.arange(2))) == [0, 0]


def test_skips_pods_without_claims():
    h = DraHandle()
    frag = instance(DeviceFragmentation, None, h)
    assert frag.pre_score(CycleState(), pod("p"), nodes("n0"), np.arange(1)).code == Code.SKIP
