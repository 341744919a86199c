"""whatif/snapshot.py: the versioned format, loading and its refusals, trimming, taking one
from an API client (in memory) and the metric values of the policies' queries."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from policy_scheduler.whatif import snapshot as snapmod
from policy_scheduler.whatif.snapshot import API_VERSION, SnapshotError, from_dict, loads


def doc(**over):
    d = {"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": "2025-01-01T12:00:00Z",
         "nodes": [{"metadata": {"name": "n1", "labels": {"zone": "a"}},
                    "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}],
         "pods": [{"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1", "containers": []}}],
         "namespaces": {"ns": {"team": "x"}}}
    d.update(over)
    return d


def test_a_valid_snapshot_loads_with_its_defaults():
    s = from_dict(doc())
    assert s.taken_at == 1735732800.0
    assert s.scheduler_name == "policy-scheduler" and s.default_policy == "default"
    assert [n["metadata"]["name"] for n in s.nodes] == ["n1"] and len(s.pods) == 1
    assert s.namespaces == {"ns": {"team": "x"}} and s.policies == [] and s.metrics == []
    # what it writes reads back the same
    again = loads(s.dumps())
    assert again.to_dict() == s.to_dict()


@pytest.mark.parametrize("version", ["policy-scheduler.io/snapshot/v2", "v1", None])
def test_another_version_is_refused_naming_the_one_it_reads(version):
    with pytest.raises(SnapshotError) as e:
        from_dict(doc(apiVersion=version), "old.json")
    msg = str(e.value)
    assert msg.startswith("old.json: apiVersion") and repr(version) in msg and API_VERSION in msg


@pytest.mark.parametrize("text,needle", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ("", "not valid JSON"),
])
def test_malformed_documents_are_refused(text, needle):
    with pytest.raises(SnapshotError, match=needle):
        loads(text, "x.json")


@pytest.mark.parametrize("over,field", [
    ({"nodes": {"n1": {}}}, "nodes: must be a list"),
    ({"nodes": [{"metadata": {}}]}, "nodes[0].metadata.name: required"),
    ({"nodes": [{"metadata": {"name": "a"}}, {"metadata": {"name": "a"}}]}, "nodes: duplicate node names: a"),
    ({"pods": [{"metadata": {"name": "p"}, "spec": {}}]}, "pods[0].spec.nodeName: required"),
    ({"namespaces": ["a"]}, "namespaces: must be an object"),
    ({"takenAt": "yesterday"}, "takenAt: 'yesterday' is not a time"),
    ({"policies": [{"metadata": {"name": "p"}}]}, "policies[0].spec: required"),
    ({"metrics": [{"query": "q", "nodeLabel": "instance", "samples": {"n1": {"value": "hot", "time": 1}}}]},
     "metrics[0].samples[n1]: must be"),
    ({"metrics": [{"nodeLabel": "instance"}]}, "metrics[0].query: required"),
])
def test_a_field_of_the_wrong_shape_is_named(over, field):
    with pytest.raises(SnapshotError) as e:
        from_dict(doc(**over), "s.json")
    assert str(e.value).startswith("s.json: invalid snapshot: ") and field in str(e.value)


def test_load_names_an_unreadable_file(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read snapshot"):
        snapmod.load(tmp_path / "missing.json")


def test_trimming_keeps_what_the_scheduler_reads():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}, "managedFields": [{}],
                        "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}]},
           "spec": {"nodeName": "n1", "volumes": [{"name": "v"}], "serviceAccountName": "sa", "priority": 5,
                    "containers": [{"name": "c", "image": "i", "env": [{"name": "X"}], "command": ["x"],
                                    "resources": {"requests": {"cpu": "1"}}, "ports": [{"hostPort": 80}]}]},
           "status": {"phase": "Running", "startTime": "t", "podIP": "1.2.3.4",
                      "conditions": [{"type": "Ready"}, {"type": "DisruptionTarget", "status": "True"}]}}
    t = snapmod.trim_pod(pod)
    assert "managedFields" not in t["metadata"] and t["metadata"]["ownerReferences"][0]["name"] == "rs"
    assert "volumes" not in t["spec"] and "serviceAccountName" not in t["spec"] and t["spec"]["priority"] == 5
    assert t["spec"]["containers"] == [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}},
                                        "ports": [{"hostPort": 80}]}]
    assert t["status"] == {"phase": "Running", "startTime": "t",
                           "conditions": [{"type": "DisruptionTarget", "status": "True"}]}
    node = {"metadata": {"name": "n", "labels": {"l": "v"}, "annotations": {"a": "b"}},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDR": "x"},
            "status": {"allocatable": {"cpu": "1"}, "conditions": [{}], "images": [{"names": ["i"], "sizeBytes": 1}]}}
    assert snapmod.trim_node(node) == {"metadata": {"name": "n", "labels": {"l": "v"}},
                                       "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
                                       "status": {"allocatable": {"cpu": "1"},
                                                  "images": [{"names": ["i"], "sizeBytes": 1}]}}


def test_pods_are_split_as_the_engine_counts_them():
    def pod(name, node="", phase="Running", sched="policy-scheduler", deleting=False):
        meta = {"name": name, "namespace": "ns", **({"deletionTimestamp": "t"} if deleting else {})}
        return {"metadata": meta, "spec": {"nodeName": node, "schedulerName": sched}, "status": {"phase": phase}}

    bound, pending = snapmod.split_pods([pod("a", "n1"), pod("done", "n1", "Succeeded"), pod("b"),
                                         pod("other", sched="default-scheduler"), pod("gone", deleting=True)],
                                        "policy-scheduler")
    assert [p["metadata"]["name"] for p in bound] == ["a"]
    assert [p["metadata"]["name"] for p in pending] == ["b"]


class FakeClient:
    def __init__(self, objects):
        self.objects = objects
        self.paths = []

    async def get(self, path):
        self.paths.append(path)
        return {"items": self.objects.get(path, [])}


def test_take_reads_every_list_and_keeps_only_this_schedulers_policies():
    client = FakeClient({
        "/api/v1/nodes": [{"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "1"}}}],
        "/api/v1/pods": [{"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}}],
        "/api/v1/namespaces": [{"metadata": {"name": "ns", "labels": {"t": "1"}}}],
        "/api/v1/services": [{"metadata": {"name": "s", "namespace": "ns"}, "spec": {"selector": {"app": "a"},
                                                                                   "ports": [{"port": 80}]}}],
        "/apis/policy-scheduler.io/v1alpha1/schedulingpolicies": [
            {"metadata": {"name": "mine", "generation": 3}, "spec": {"plugins": [{"name": "NodeName"}]}},
            {"metadata": {"name": "theirs"}, "spec": {"schedulerName": "other", "plugins": []}}],
    })
    s = asyncio.run(snapmod.take(client, scheduler_name="policy-scheduler", default_policy="default"))
    assert set(client.paths) >= {"/api/v1/nodes", "/api/v1/pods", "/api/v1/namespaces", "/api/v1/services",
                                 "/api/v1/replicationcontrollers", "/apis/apps/v1/replicasets",
                                 "/apis/apps/v1/statefulsets", "/apis/policy/v1/poddisruptionbudgets"}
    assert [p["metadata"]["name"] for p in s.policies] == ["mine"]
    assert s.services == [{"metadata": {"name": "s", "namespace": "ns"}, "spec": {"selector": {"app": "a"}}}]
    assert s.namespaces == {"ns": {"t": "1"}} and len(s.pods) == 1
    assert json.loads(s.dumps())["apiVersion"] == API_VERSION


def test_metric_values_are_read_once_per_query_with_their_sample_times():
    policy = {"metadata": {"name": "la"}, "spec": {"plugins": [
        {"name": "MetricThreshold", "args": {"metrics": [{"name": "gpu", "query": "gpu_util", "nodeLabel": "Hostname",
                                                          "rejectAbove": 0.9}]}}]}}
    asked = []
    now = time.time()

    def query(address, q, timeout):
        asked.append((address, q))
        return [{"metric": {"Hostname": "n1"}, "value": [now - 3.5, "0.95"]},
                {"metric": {"Hostname": "n2:9100"}, "value": [now - 3.0, "0.1"]}]

    out = asyncio.run(snapmod.read_metrics([policy], "http://prom:9090", query_fn=query))
    assert asked == [("http://prom:9090", "gpu_util")]
    assert out == [{"query": "gpu_util", "nodeLabel": "Hostname",
                    "samples": {"n1": {"value": 0.95, "time": now - 3.5}, "n2": {"value": 0.1, "time": now - 3.0}}}]
    warnings = []
    assert asyncio.run(snapmod.read_metrics([policy], None, query_fn=query, warn=warnings.append)) == []
    assert "need a Prometheus address" in warnings[0]
