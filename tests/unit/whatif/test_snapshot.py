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


def test_a_v1_snapshot_loads_as_a_cluster_without_storage_objects():
    s = from_dict(doc(apiVersion=snapmod.API_VERSION_V1))
    assert s.volumes == {k: [] for k in snapmod.VOLUME_LISTS.values()} and len(s.volume_cache()) == 0
    assert json.loads(s.dumps())["apiVersion"] == API_VERSION == "policy-scheduler.io/snapshot/v2"


def test_storage_lists_load_into_a_volume_cache_and_bad_ones_are_named():
    pv = {"metadata": {"name": "pv1", "resourceVersion": "7"},
          "spec": {"storageClassName": "local", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"]}}
    s = from_dict(doc(persistentVolumes=[pv], storageClasses=[{"metadata": {"name": "local"},
                                                                "volumeBindingMode": "WaitForFirstConsumer"}],
                      persistentVolumeClaims=[{"metadata": {"name": "c", "namespace": "ns"}, "spec": {}}],
                      csiNodes=[{"metadata": {"name": "n1"}, "spec": {"drivers": [
                          {"name": "d", "allocatable": {"count": 2}}]}}],
                      csiDrivers=[{"metadata": {"name": "d"}, "spec": {"attachRequired": True}}]))
    cache = s.volume_cache()
    assert cache.pv("pv1").capacity == 10 << 30 and cache.storage_class("local").binding_mode == "WaitForFirstConsumer"
    assert cache.pvc("ns", "c") is not None and cache.csinode("n1").limits() == {"d": 2}
    assert cache.csidriver("d").attach_required
    assert s.volume_cache() is not cache  # a fresh one each time
    assert loads(s.dumps()).to_dict() == s.to_dict()
    for over, field in [({"persistentVolumes": [{"metadata": {"name": "p"}, "spec": {"capacity": "10Gi"}}]},
                         "persistentVolumes[0]: cannot be read as a persistentvolume"),
                        ({"persistentVolumeClaims": [{"metadata": {}}]}, "persistentVolumeClaims[0].metadata.name"),
                        ({"csiNodes": {"n1": {}}}, "csiNodes: must be a list")]:
        with pytest.raises(SnapshotError) as e:
            from_dict(doc(**over), "s.json")
        assert field in str(e.value)


@pytest.mark.parametrize("version", ["policy-scheduler.io/snapshot/v3", "v1", None])
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


def test_trimming_keeps_a_resize_in_progress_as_the_node_holds_it():
    """A bound pod in the middle of an in-place resize counts in what-if as in the operator."""
    from policy_scheduler.framework.model.podinfo import parse_pod

    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                                                      "resources": {"requests": {"cpu": "1"}}}],
                    "initContainers": [{"name": "s", "image": "i", "restartPolicy": "Always",
                                        "resources": {"requests": {"cpu": "100m"}}}]},
           "status": {"phase": "Running", "conditions": [
               {"type": "Ready", "status": "True"}, {"type": "PodResizePending", "status": "True", "reason": "Deferred"}],
               "containerStatuses": [{"name": "c", "image": "i", "imageID": "x", "ready": True,
                                      "allocatedResources": {"cpu": "3"}, "resources": {"requests": {"cpu": "2"}}}],
               "initContainerStatuses": [{"name": "s", "image": "i", "allocatedResources": {"cpu": "500m"}}]}}
    t = snapmod.trim_pod(pod)
    assert t["status"]["conditions"] == [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]
    assert t["status"]["containerStatuses"] == [{"name": "c", "allocatedResources": {"cpu": "3"},
                                                 "resources": {"requests": {"cpu": "2"}}}]
    assert parse_pod(t).requests == parse_pod(pod).requests == {"cpu": 3500}


def test_trimming_keeps_the_volumes_and_storage_fields_the_volume_plugins_read():
    pod = {"metadata": {"name": "p", "namespace": "ns"},
           "spec": {"nodeName": "n1", "containers": [], "volumes": [
               {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
               {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
               {"name": "cfg", "configMap": {"name": "x"}}, {"name": "tmp", "emptyDir": {}},
               {"name": "inline", "csi": {"driver": "d"}}]}}
    assert snapmod.trim_pod(pod)["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"name": "inline", "csi": {"driver": "d"}}]
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": "pv", "resourceVersion": "3", "managedFields": [{}], "labels": {"z": "a"},
                       "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}",
                                       "pv.kubernetes.io/bound-by-controller": "yes"}},
          "spec": {"capacity": {"storage": "1Gi"}, "claimRef": {"namespace": "ns", "name": "c"}},
          "status": {"phase": "Bound", "lastPhaseTransitionTime": "t"}}
    assert snapmod.trim_storage("persistentvolumes", pv) == {
        "metadata": {"name": "pv", "resourceVersion": "3", "labels": {"z": "a"},
                     "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"}},
        "spec": {"capacity": {"storage": "1Gi"}, "claimRef": {"namespace": "ns", "name": "c"}},
        "status": {"phase": "Bound"}}
    sc = {"metadata": {"name": "local"}, "provisioner": "p", "volumeBindingMode": "WaitForFirstConsumer",
          "reclaimPolicy": "Delete", "allowedTopologies": [{"matchLabelExpressions": [{"key": "k", "values": ["v"]}]}]}
    assert snapmod.trim_storage("storageclasses", sc) == {
        "metadata": {"name": "local"}, "provisioner": "p", "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": "k", "values": ["v"]}]}]}


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
        "/api/v1/nodes": [{"metadata": {"name": "n2"}},
                          {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "1"}}}],
        "/api/v1/persistentvolumes": [{"metadata": {"name": "pv", "managedFields": [{}]},
                                       "spec": {"capacity": {"storage": "1Gi"}}}],
        "/apis/storage.k8s.io/v1/storageclasses": [{"metadata": {"name": "local"}, "provisioner": "p"}],
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
                                 "/apis/apps/v1/statefulsets", "/apis/policy/v1/poddisruptionbudgets",
                                 "/api/v1/persistentvolumes", "/api/v1/persistentvolumeclaims",
                                 "/apis/storage.k8s.io/v1/storageclasses", "/apis/storage.k8s.io/v1/csinodes",
                                 "/apis/storage.k8s.io/v1/csidrivers"}
    assert [n["metadata"]["name"] for n in s.nodes] == ["n1", "n2"]  # name order, as the operator's LIST
    assert s.volumes["persistentvolumes"] == [{"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "1Gi"}}}]
    assert s.volumes["storageclasses"] == [{"metadata": {"name": "local"}, "provisioner": "p"}]
    assert json.loads(s.dumps())["persistentVolumes"] == s.volumes["persistentvolumes"]
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
