"""Hostile DRA objects, drawn from fixed seeds (null, wrong types, nesting as deep as the informer's
decoder keeps (128 levels), megabyte strings,
huge lists in every position of a ResourceClaim, ResourceSlice and DeviceClass) into the cluster
state as the informers deliver them: nothing raises, each bad object is ignored on its own, and a
good pod still gets its device from the good objects around them."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from policy_scheduler.cache.handle import StateHandle
from policy_scheduler.cache.state import ClusterState
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.plugins.dynamicresources.dynamic_resources import DynamicResources

DRIVER = "gpu.example.com"
CLASS = {"metadata": {"name": "gpu", "resourceVersion": "1"},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
SLICE = {"metadata": {"name": "n0-gpus", "resourceVersion": "1"},
         "spec": {"driver": DRIVER, "nodeName": "n0", "pool": {"name": "n0", "generation": 1, "resourceSliceCount": 1},
                  "devices": [{"name": "g0", "attributes": {"model": {"string": "a100"}},
                               "capacity": {"memory": {"value": "40Gi"}}}]}}
CLAIM = {"metadata": {"name": "c", "namespace": "default", "uid": "u-c", "resourceVersion": "1"},
         "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}}


def _junk(rng: random.Random):
    return rng.choice([None, 7, -1, 1.5, True, "x" * (1 << 20), [], {}, [None] * 10_000, {"a": None},
                       _deep(rng.choice([10, 127])), ["x"] * 3, {"int": "no"}, {"version": 3}])


def _deep(n: int):
    v: dict = {}
    for _ in range(n):
        v = {"a": v}
    return v


def _paths(obj, prefix=()):
    yield prefix
    if len(prefix) >= 12:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _mutate(obj, rng: random.Random):
    out = copy.deepcopy(obj)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(out) if p and (p[0] != "metadata" or p[:2] == ("metadata", "resourceVersion"))
                 and len(p) < 12]
        path = rng.choice(paths)
        cur = out
        for k in path[:-1]:
            cur = cur[k]
        try:
            cur[path[-1]] = _junk(rng)
        except (TypeError, IndexError, KeyError):
            pass
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 5, 8])
def test_hostile_dra_objects_are_ignored_one_by_one(seed):
    rng = random.Random(seed)
    st = ClusterState()
    st.apply_node("ADDED", {"metadata": {"name": "n0", "labels": {"kubernetes.io/hostname": "n0"}},
                            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
    for i in range(60):
        for kind, good in (("deviceclasses", CLASS), ("resourceslices", SLICE), ("resourceclaims", CLAIM)):
            bad = _mutate(good, rng)
            bad["metadata"] = dict(bad.get("metadata") or {}, name=f"bad-{i}")
            st.apply_dra(kind, rng.choice(["ADDED", "MODIFIED"]), bad)  # never raises
    st.apply_dra("deviceclasses", "ADDED", CLASS)
    st.apply_dra("resourceslices", "ADDED", SLICE)
    st.apply_dra("resourceclaims", "ADDED", CLAIM)
    pl = DynamicResources(DynamicResources.Args.model_validate({}), StateHandle(st))
    pod = parse_pod({"metadata": {"name": "p", "namespace": "default", "uid": "u-p"},
                     "spec": {"containers": [], "resourceClaims": [{"name": "r", "resourceClaimName": "c"}]}})
    state = CycleState()
    status, _ = pl.pre_filter(state, pod, st.table)
    assert status.is_success, status.reasons
    res = pl.filter(state, pod, st.table, np.arange(st.table.n))
    if res.error is not None:  # a hostile class or slice of the same driver may make CEL fail: an Error, named
        assert "CEL" in res.error.message() or "request" in res.error.message()
    else:
        assert res.passed.all() or res.reasons
