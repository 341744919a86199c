"""objdecode: Pods and Nodes read without managedFields, everything else as safejson reads it; a
document the fast path cannot take is read by safejson, so no object is lost."""

from __future__ import annotations

import json
import random

import orjson
import pytest

from policy_scheduler.cluster import objdecode
from policy_scheduler.cluster.sync import LEAN_KINDS
from policy_scheduler.safejson import Unreadable, loads

MANAGED = [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-27T10:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {'k:{"type":"Ready"}': {".": {}}}}}}]


def pod(i: int, **meta) -> dict:
    return {"metadata": {"name": f"p-{i}", "namespace": "ns", "uid": f"u-{i}", "resourceVersion": str(100 + i),
                         "creationTimestamp": "2026-11-27T10:00:00Z", "labels": {"app": "a", "i": str(i)},
                         "annotations": {"x": "y"}, "ownerReferences": [{"kind": "ReplicaSet", "name": "rs"}],
                         "finalizers": ["f"], "generateName": "p-", "generation": 1, "managedFields": MANAGED, **meta},
            "spec": {"nodeName": f"node-{i}", "priority": 2 ** 40, "containers": [
                {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def without_managed(obj: dict) -> dict:
    out = orjson.loads(orjson.dumps(obj))
    out.get("metadata", {}).pop("managedFields", None)
    return out


def page_bytes(items: list, **meta) -> bytes:
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1",
                         "metadata": {"resourceVersion": "900", "continue": "c1", "remainingItemCount": 3, **meta},
                         "items": items})


def test_a_page_is_what_safejson_reads_less_managed_fields():
    items = [pod(i) for i in range(5)]
    items[2]["metadata"]["deletionTimestamp"] = "2026-11-27T11:00:00Z"
    items[3] = {"apiVersion": "v1", "kind": "Pod", **items[3]}  # an item that names its kind
    raw = page_bytes(items)
    want = loads(raw)
    want["items"] = [without_managed(o) for o in want["items"]]
    got = objdecode.page(raw)
    assert got == want
    assert all("managedFields" not in o["metadata"] for o in got["items"])
    assert got["metadata"]["continue"] == "c1"


def test_absent_fields_stay_absent_and_null_stays_null():
    raw = orjson.dumps({"items": [{"metadata": {"name": "n", "labels": None}}, {"spec": {}}]})
    assert objdecode.page(raw) == {"items": [{"metadata": {"name": "n", "labels": None}}, {"spec": {}}]}
    assert objdecode.page(b'{"kind":"PodList","items":null}') == {"kind": "PodList", "items": None}


@pytest.mark.parametrize("hostile", [
    None, [1, 2], "text", 7,  # an item that is not an object
    {"metadata": None}, {"metadata": ["x"]}, {"metadata": "m"},  # metadata that is not an object
    {"metadata": {"name": 5, "labels": [1]}, "spec": "s"},  # wrong types inside: kept as they are
])
def test_a_hostile_item_costs_its_page_the_fast_path_never_an_object(hostile):
    items = [pod(0), hostile, pod(2)]
    raw = page_bytes(items)
    got = objdecode.page(raw)
    assert len(got["items"]) == 3
    assert got["items"][1] == (without_managed(hostile) if isinstance(hostile, dict) and
                               isinstance(hostile.get("metadata"), dict) else loads(raw)["items"][1])
    # the objects around it are all there, named as they are
    assert [o["metadata"]["name"] for o in (got["items"][0], got["items"][2])] == ["p-0", "p-2"]


def test_a_document_nested_deeper_than_the_fast_path_reads_goes_to_the_tolerant_decoder():
    deep = {"metadata": {"name": "deep", "namespace": "ns"}, "spec": {}}
    raw = page_bytes([pod(0), deep, pod(2)]).replace(b'"spec":{}', b'"spec":{"x":' + b"[" * 1100 + b"]" * 1100 + b"}")
    got = objdecode.page(raw)
    assert [o["metadata"]["name"] for o in got["items"]] == ["p-0", "deep", "p-2"]
    x = got["items"][1]["spec"]["x"]
    while isinstance(x, list):
        x = x[0]
    assert isinstance(x, Unreadable)


def test_what_is_not_json_is_refused_as_safejson_refuses_it():
    for raw in (b'{"items": [', b"nonsense", b'{"items":[{"metadata":{"name":"\\ud800"}}]}'):
        with pytest.raises(ValueError):
            objdecode.page(raw)


def test_watch_events_lose_managed_fields_and_errors_come_whole():
    ev = orjson.dumps({"type": "MODIFIED", "object": {"apiVersion": "v1", "kind": "Pod", **pod(1)}})
    got = objdecode.event(ev)
    assert got == {"type": "MODIFIED", "object": without_managed({"apiVersion": "v1", "kind": "Pod", **pod(1)})}
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {
        "resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}}}}
    assert objdecode.event(orjson.dumps(bookmark)) == bookmark
    status = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                          "message": "too old resource version: 1 (5)", "reason": "Expired",
                                          "code": 410}}
    assert objdecode.event(orjson.dumps(status)) == status  # code and message kept: the informer reads them
    odd = {"type": "ADDED", "object": ["not", "an", "object"]}
    assert objdecode.event(orjson.dumps(odd)) == odd  # left for the informer to skip with a warning


def test_seeded_objects_decode_as_safejson_less_managed_fields():
    rng = random.Random(7)
    leaves = [None, True, 0, -1, 2 ** 70, 1.5, "", "ü", "\\", '"', [], {}]

    def value(depth: int):
        r = rng.random()
        if depth > 4 or r < 0.4:
            return rng.choice(leaves)
        if r < 0.7:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {rng.choice(["a", "b", "name", "metadata", "spec"]): value(depth + 1) for _ in range(rng.randrange(4))}

    for _ in range(200):
        obj = {k: value(1) for k in rng.sample(["apiVersion", "kind", "spec", "status"], rng.randrange(5))}
        if rng.random() < 0.9:
            obj["metadata"] = {k: value(2) for k in rng.sample(objdecode.META_FIELDS + ("managedFields",), 4)}
        raw = json.dumps({"kind": "PodList", "items": [obj]}).encode()  # orjson writes no int of 2 ** 70
        want = loads(raw)
        if isinstance(want["items"][0].get("metadata"), dict):
            want["items"][0]["metadata"].pop("managedFields", None)
        got = objdecode.page(raw)
        assert got == want  # 2 ** 70: an int here, orjson's float there, equal


def test_pods_and_nodes_are_read_lean():
    assert set(LEAN_KINDS) == {"pods", "nodes"}
