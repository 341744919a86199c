"""Volume-aware scheduling on the real control plane, with kube-controller-manager running the PV
controller (persistentvolume-binder-controller only): the `default` policy's VolumeBinding,
VolumeZone, VolumeRestrictions and NodeVolumeLimits.

Each test makes its own nodes, labelled with a per-test tag that its pods select, so the
session's other nodes only add "didn't match Pod's node affinity/selector" to the messages."""

from __future__ import annotations

import secrets

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from helpers import events_for, pod, wait_bound, wait_for

NO_PROVISIONER = "kubernetes.io/no-provisioner"
CSI_DRIVER = "csi.e2e.policy-scheduler.io"


@pytest.fixture(scope="module")
def pv_controller(cluster):
    """The PV controller: it completes the bindings VolumeBinding's PreBind starts."""
    started = "kube-controller-manager" not in cluster.state.get("procs", {})
    if started:
        cluster.start_controller_manager(controllers="persistentvolume-binder-controller")
    yield
    if started:
        cluster.stop("kube-controller-manager")


@pytest.fixture
def storage(api):
    """StorageV1Api; the cluster-scoped objects made through ``made`` are deleted afterwards."""
    s = client.StorageV1Api(api)
    core = client.CoreV1Api(api)
    made: list[tuple[str, str]] = []
    s.made = made
    yield s
    for kind, name in reversed(made):
        try:
            if kind == "pv":  # its pv-protection finalizer has no controller here to remove it
                core.patch_persistent_volume(name, {"metadata": {"finalizers": None}})
                core.delete_persistent_volume(name)
            elif kind == "sc":
                s.delete_storage_class(name)
            elif kind == "csinode":
                s.delete_csi_node(name)
        except ApiException:
            pass


def storage_class(storage, name: str, mode: str = "WaitForFirstConsumer") -> str:
    storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": name}, "provisioner": NO_PROVISIONER,
                                  "volumeBindingMode": mode})
    storage.made.append(("sc", name))
    return name


def pv(core, storage, name: str, size: str = "1Gi", cls: str = "", node: str | None = None,
       zone: str | None = None, modes=("ReadWriteOnce",), claim: tuple[str, str] | None = None,
       csi: bool = False) -> str:
    spec = {"capacity": {"storage": size}, "accessModes": list(modes), "storageClassName": cls,
            "persistentVolumeReclaimPolicy": "Retain"}
    if csi:
        spec["csi"] = {"driver": CSI_DRIVER, "volumeHandle": name}
    elif node:
        spec["local"] = {"path": f"/mnt/{name}"}
    else:  # a local volume needs node affinity; these are reachable from anywhere (or by zone label)
        spec["hostPath"] = {"path": f"/mnt/{name}"}
    if node:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
    if claim:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    labels = {"topology.kubernetes.io/zone": zone} if zone else {}
    core.create_persistent_volume({"apiVersion": "v1", "kind": "PersistentVolume",
                                   "metadata": {"name": name, "labels": labels}, "spec": spec})
    storage.made.append(("pv", name))
    return name


def pvc(core, namespace: str, name: str, cls: str = "", size: str = "1Gi", volume: str | None = None,
        modes=("ReadWriteOnce",)) -> str:
    spec = {"accessModes": list(modes), "storageClassName": cls, "resources": {"requests": {"storage": size}}}
    if volume:
        spec["volumeName"] = volume
    core.create_namespaced_persistent_volume_claim(namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec})
    return name


def volume_pod(name: str, namespace: str, tag: str, claim: str, cpu: str = "100m") -> dict:
    return pod(name, namespace, cpu=cpu, nodeSelector={"e2e-vol": tag},
               volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])


def claim_of(core, namespace: str, name: str):
    return core.read_namespaced_persistent_volume_claim(name, namespace)


def wait_claims_bound(core, namespace: str, names) -> dict[str, str]:
    def check():
        got = {n: claim_of(core, namespace, n) for n in names}
        if all(c.status.phase == "Bound" for c in got.values()):
            return {n: c.spec.volume_name for n, c in got.items()}
        return None

    return wait_for(check, 60, 0.3, what=f"claims {sorted(names)} Bound")


def failed_message(core, namespace: str, name: str, timeout: float = 30) -> str:
    evs = wait_for(lambda: events_for(core, namespace, name, "FailedScheduling"), timeout,
                   what=f"FailedScheduling for {name}")
    return evs[-1].message


def test_static_local_volumes_wait_for_first_consumer(core, storage, nodes, namespace, example_policies,
                                                      pv_controller):
    """4 pods with one PVC each on static local PVs of two nodes (a third node has none): each pod
    lands where its PV is, each claim ends Bound to a distinct PV there, a 5th pod is refused."""
    tag = secrets.token_hex(3)
    names = [nodes(f"vol-{tag}-{i}", labels={"e2e-vol": tag}) for i in range(3)]
    cls = storage_class(storage, f"local-{tag}")
    pv_node = {}
    for i in range(4):
        n = names[i % 2]
        pv_node[pv(core, storage, f"local-{tag}-{i}", cls=cls, node=n)] = n
    claims = [pvc(core, namespace, f"data-{i}", cls) for i in range(5)]
    for i in range(4):
        core.create_namespaced_pod(namespace, volume_pod(f"app-{i}", namespace, tag, claims[i]))
    placed = wait_bound(core, namespace, [f"app-{i}" for i in range(4)], timeout=90)
    volumes = wait_claims_bound(core, namespace, claims[:4])
    assert len(set(volumes.values())) == 4, volumes  # no two pods took the same PV
    for i in range(4):
        assert pv_node[volumes[claims[i]]] == placed[f"app-{i}"], (i, volumes, placed)
    assert names[2] not in placed.values()
    core.create_namespaced_pod(namespace, volume_pod("app-4", namespace, tag, claims[4]))
    msg = failed_message(core, namespace, "app-4")
    assert "3 node(s) didn't find available persistent volumes to bind" in msg, msg
    assert claim_of(core, namespace, claims[4]).status.phase == "Pending"


def test_a_bound_zonal_volume_keeps_its_pods_in_its_zone(core, storage, nodes, namespace, example_policies,
                                                         pv_controller):
    """The PV is in zone A; zone B's node is far emptier (every score prefers it), yet every pod
    of the claim lands in zone A."""
    tag = secrets.token_hex(3)
    a = nodes(f"zone-a-{tag}", cpu="2", labels={"e2e-vol": tag, "topology.kubernetes.io/zone": f"a-{tag}"})
    nodes(f"zone-b-{tag}", cpu="32", labels={"e2e-vol": tag, "topology.kubernetes.io/zone": f"b-{tag}"})
    vol = pv(core, storage, f"zonal-{tag}", zone=f"a-{tag}", claim=(namespace, "shared"))
    pvc(core, namespace, "shared", volume=vol)
    wait_claims_bound(core, namespace, ["shared"])
    for i in range(3):
        core.create_namespaced_pod(namespace, volume_pod(f"z-{i}", namespace, tag, "shared"))
    placed = wait_bound(core, namespace, [f"z-{i}" for i in range(3)])
    assert set(placed.values()) == {a}, placed


def test_read_write_once_pod_claim_in_use_refuses_a_second_pod(core, storage, nodes, namespace, example_policies,
                                                               pv_controller):
    tag = secrets.token_hex(3)
    nodes(f"rwop-{tag}", labels={"e2e-vol": tag})
    vol = pv(core, storage, f"rwop-{tag}", modes=("ReadWriteOncePod",), claim=(namespace, "solo"))
    pvc(core, namespace, "solo", volume=vol, modes=("ReadWriteOncePod",))
    wait_claims_bound(core, namespace, ["solo"])
    core.create_namespaced_pod(namespace, volume_pod("first", namespace, tag, "solo"))
    wait_bound(core, namespace, ["first"])
    core.create_namespaced_pod(namespace, volume_pod("second", namespace, tag, "solo"))
    msg = failed_message(core, namespace, "second")
    assert "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod" in msg, msg


def test_csi_attach_limit_of_two_takes_no_third_volume(core, storage, nodes, namespace, example_policies,
                                                       pv_controller):
    tag = secrets.token_hex(3)
    n = nodes(f"csi-{tag}", labels={"e2e-vol": tag})
    storage.create_csi_node({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": n},
                             "spec": {"drivers": [{"name": CSI_DRIVER, "nodeID": n, "allocatable": {"count": 2}}]}})
    storage.made.append(("csinode", n))
    for i in range(3):
        vol = pv(core, storage, f"csi-{tag}-{i}", csi=True, claim=(namespace, f"c-{i}"))
        pvc(core, namespace, f"c-{i}", volume=vol)
    wait_claims_bound(core, namespace, [f"c-{i}" for i in range(3)])
    for i in range(2):
        core.create_namespaced_pod(namespace, volume_pod(f"att-{i}", namespace, tag, f"c-{i}"))
    wait_bound(core, namespace, ["att-0", "att-1"])
    core.create_namespaced_pod(namespace, volume_pod("att-2", namespace, tag, "c-2"))
    msg = failed_message(core, namespace, "att-2")
    assert "1 node(s) exceed max volume count" in msg, msg
    assert core.read_namespaced_pod("att-2", namespace).spec.node_name is None
