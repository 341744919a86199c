#!/usr/bin/env python3
"""`make demo`: the scheduler on a real local control plane with simulated nodes.

Starts etcd + kube-apiserver + kwok (hack/localcluster.py), installs the CRD and the example
policies (every SchedulingPolicy of policies/, and the DeviceClass of gpu-dra.yaml's DRA example),
creates simulated nodes of mixed sizes, zones, racks and labels (the GPU node publishes its GPUs
in a ResourceSlice), runs the operator, creates a burst of pods across the policies, waits for
them to be placed, prints where each pod went (and which GPUs the gpu-dra pods got) and `kubectl
get schedulingpolicies`, then stops everything it started.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import yaml
from kubernetes import client, config, utils

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import localcluster  # noqa: E402
from playground import GPU_DEVICES, claim_devices, dra_example, load_yaml_docs, resource_slice  # noqa: E402

STATE = ROOT / ".local" / "demo-cluster"
NS = "demo"
POLICY = "policy-scheduler.io/policy"

# name, cpu, memory, zone, rack, extra labels, taints
NODES = [
    ("small-a1", "4", "8Gi", "a", "a1", {}, []),
    ("small-a2", "4", "8Gi", "a", "a2", {}, []),
    ("large-a1", "16", "64Gi", "a", "a1", {}, []),
    ("small-b1", "4", "8Gi", "b", "b1", {}, []),
    ("large-b1", "16", "64Gi", "b", "b1", {}, []),
    ("large-b2", "16", "64Gi", "b", "b2", {}, []),
    ("small-c1", "4", "8Gi", "c", "c1", {}, []),
    ("large-c1", "16", "64Gi", "c", "c1", {}, []),
    ("ingest-c2", "8", "32Gi", "c", "c2", {"pool": "ingest"}, []),
    ("ingest-a2", "8", "32Gi", "a", "a2", {"pool": "ingest"}, []),
    ("gpu-b2", "32", "128Gi", "b", "b2", {"accelerator": "gpu"},
     [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
]


def node(name, cpu, mem, zone, rack, labels, taints):
    alloc = {"cpu": cpu, "memory": mem, "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {localcluster.KWOK_NODE_ANNOTATION: "fake"},
                         "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"zone-{zone}",
                                    "topology.kubernetes.io/rack": f"rack-{rack}", "node.size": name.split("-")[0],
                                    **labels}},
            "spec": {"taints": taints},
            "status": {"capacity": alloc, "allocatable": alloc}}


GPU_TOLERATION = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
EXAMPLE = dra_example()  # policies/gpu-dra.yaml's objects by kind


def pod(name, cpu, mem, policy=None, labels=None, **spec):
    lab = dict(labels or {})
    if policy:
        lab[POLICY] = policy
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": lab},
            "spec": {"schedulerName": "policy-scheduler",
                     "containers": [{"name": "main", "image": "registry.local/demo:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": mem}}}], **spec}}


def serve_pod(name: str) -> dict:
    """A pod of the policy gpu-dra that claims what gpu-dra.yaml's Deployment's pods claim, through
    a ResourceClaim of its own named ``<pod>-<claim>`` (see claims_of), made by the demo: it runs
    no kube-controller-manager, whose resourceclaim controller would make the claims from the
    template (the playground, which stays up, runs it). The demo's cluster lives for a minute
    and deletes no pod, so claims made here behave as the controller's would, and cost no
    extra process."""
    spec = EXAMPLE["Deployment"]["spec"]["template"]["spec"]
    p = pod(name, "2", "8Gi", "gpu-dra", {"app": "serve"}, tolerations=GPU_TOLERATION,
            resourceClaims=[{"name": c["name"], "resourceClaimName": f"{name}-{c['name']}"}
                            for c in spec["resourceClaims"]])
    p["spec"]["containers"][0]["resources"]["claims"] = copy.deepcopy(spec["containers"][0]["resources"]["claims"])
    return p


def claims_of(p: dict) -> list[dict]:
    """The ResourceClaims ``p`` names: each with the spec of gpu-dra.yaml's ResourceClaimTemplate
    (single-gpu: one GPU with 40Gi of memory or more), as the resourceclaim controller makes them."""
    template = EXAMPLE["ResourceClaimTemplate"]
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": c["resourceClaimName"], "namespace": NS},
             "spec": copy.deepcopy(template["spec"]["spec"])} for c in p["spec"].get("resourceClaims") or ()]


WORKLOADS = [
    # (what, policy, pods)
    ("web: a Service's replicas, spread by zone (hard) and rack (soft)", "spread",
     [pod(f"web-{i}", "500m", "512Mi", "spread", {"app": "web"}) for i in range(6)]),
    ("batch: packed onto as few nodes as possible", "binpack",
     [pod(f"batch-{i}", "1", "2Gi", "binpack", {"app": "batch"}) for i in range(8)]),
    ("ingest: pinned to nodes labelled pool=ingest", "node-label-match",
     [pod(f"ingest-{i}", "1", "2Gi", "node-label-match", {"app": "ingest"}) for i in range(4)]),
    ("api: upstream default placement (no policy label: policy 'default')", "default",
     [pod(f"api-{i}", "250m", "256Mi", None, {"app": "api"}) for i in range(6)]),
    ("train: GPU pods tolerate the dedicated taint and require the gpu label", "default",
     [pod(f"train-{i}", "4", "16Gi", None, {"app": "train"},
          tolerations=GPU_TOLERATION, nodeSelector={"accelerator": "gpu"}) for i in range(2)]),
    ("serve: one GPU of 40Gi or more per pod through DRA (a claim each, as gpu-dra.yaml's template)", "gpu-dra",
     [serve_pod(f"serve-{i}") for i in range(2)]),
    ("huge: asks for more than any node has", "default", [pod("huge-0", "64", "1Gi", None, {"app": "huge"})]),
]


def kubectl(cluster, *args, stdin: str | None = None) -> str:
    bins = localcluster.bin_dir(build=False)
    out = subprocess.run([str(bins / "kubectl"), *args], capture_output=True, text=True, timeout=60, input=stdin,
                         env={"KUBECONFIG": str(cluster.kubeconfig_path), "HOME": str(cluster.state_dir)})
    return out.stdout + out.stderr


def main() -> int:
    t0 = time.monotonic()
    cluster = localcluster.LocalCluster(STATE, kubeconfig_path=STATE / "kubeconfig")
    if cluster.state.get("procs"):
        cluster.down(quiet=True)
    print("== starting a local control plane (etcd, kube-apiserver, kwok) built from pinned upstream sources")
    cluster.up(kwok=True, quiet=True)
    op = None
    try:
        api = config.new_client_from_config(str(cluster.kubeconfig_path))
        core = client.CoreV1Api(api)
        utils.create_from_dict(api, yaml.safe_load((ROOT / "crds" / "schedulingpolicies.yaml").read_text()))
        ext = client.ApiextensionsV1Api(api)
        for _ in range(100):
            crd = ext.read_custom_resource_definition("schedulingpolicies.policy-scheduler.io")
            if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or []):
                break
            time.sleep(0.1)
        # the policies, and the DeviceClass the gpu-dra pods' claims name; not gpu-dra.yaml's
        # ResourceClaimTemplate (the demo makes each pod's claim itself) nor its Deployment (no
        # controller here would make its pods)
        docs = [d for f in sorted((ROOT / "policies").glob("*.yaml")) for d in load_yaml_docs(f)
                if d["kind"] in ("SchedulingPolicy", "DeviceClass")]
        print("$ kubectl apply -f policies/   # the SchedulingPolicies, and gpu-dra.yaml's DeviceClass")
        print(kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs, sort_keys=False)).strip())
        objs = client.CustomObjectsApi(api)
        for n in NODES:
            core.create_node(node(*n))
            if n[0] in GPU_DEVICES:
                objs.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                                  resource_slice(n[0], GPU_DEVICES[n[0]]))
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        core.create_namespaced_service(NS, client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(selector={"app": "web"}, ports=[client.V1ServicePort(port=80)])))
        gpus = [n[0] for n in NODES if n[0] in GPU_DEVICES]
        print(f"== {len(NODES)} simulated nodes (kwok) in 3 zones, {', '.join(gpus)} with its GPUs in a ResourceSlice "
              "(DRA); starting the operator")
        log = open(STATE / "operator.log", "w")
        op = subprocess.Popen([sys.executable, "-m", "policy_scheduler.cli", "run", "--kubeconfig",
                               str(cluster.kubeconfig_path), "--metrics-port", "0", "--health-port", "0"],
                              stdout=log, stderr=subprocess.STDOUT)
        total = sum(len(p) for _, _, p in WORKLOADS)
        print(f"== creating {total} pods across {len({policy for _, policy, _ in WORKLOADS})} policies "
              "(and a ResourceClaim for each gpu-dra pod)")
        burst = time.monotonic()
        for _, _, pods in WORKLOADS:
            for p in pods:
                for c in claims_of(p):
                    objs.create_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims", c)
                core.create_namespaced_pod(NS, p)
        expected = total - 1  # huge-0 cannot fit anywhere
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            items = core.list_namespaced_pod(NS).items
            if sum(1 for p in items if p.spec.node_name) >= expected:
                break
            time.sleep(0.2)
        took = time.monotonic() - burst
        time.sleep(2.5)  # let the batched policy status catch up
        items = {p.metadata.name: p for p in core.list_namespaced_pod(NS).items}
        nodes = {n[0]: n for n in NODES}
        claims = {c["metadata"]["name"]: c
                  for c in objs.list_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims")["items"]}
        slices = objs.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")["items"]

        def label(name: str, p: dict) -> str:
            """The pod's name, and the devices its claims got: ``serve-0 [gpu-0 (h100 80Gi)]``."""
            refs = [c["resourceClaimName"] for c in p["spec"].get("resourceClaims") or ()]
            if not refs:
                return name
            return f"{name} [{', '.join(claim_devices(claims.get(r) or {}, slices) for r in refs)}]"

        print(f"\n== placements ({sum(1 for p in items.values() if p.spec.node_name)}/{total} bound "
              f"in {took:.1f}s)\n")
        for what, policy, pods in WORKLOADS:
            print(f"{what}   [policy {policy}]")
            per_node = defaultdict(list)
            for p in pods:
                got = items[p["metadata"]["name"]]
                per_node[got.spec.node_name or "-"].append(label(p["metadata"]["name"], p))
            for nn, names in sorted(per_node.items()):
                where = (f"zone-{nodes[nn][3]} rack-{nodes[nn][4]}  {nodes[nn][1]} cpu" if nn in nodes
                         else "not placed")
                print(f"    {nn:<10} {where:<30} {', '.join(names)}")
            print()
        huge = items["huge-0"]
        cond = next((c for c in huge.status.conditions or [] if c.type == "PodScheduled"), None)
        if cond is not None:
            print(f"huge-0 is Pending, PodScheduled=False: {cond.message}\n")
        print("$ kubectl get schedulingpolicies")
        print(kubectl(cluster, "get", "schedulingpolicies"))
        print(f"$ policy-scheduler explain {NS}/api-0")
        print(subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "explain", f"{NS}/api-0",
                              "--kubeconfig", str(cluster.kubeconfig_path)],
                             capture_output=True, text=True, timeout=60).stdout)
        bound = sum(1 for p in items.values() if p.spec.node_name)
        ok = bound == expected
        print(f"== demo {'done' if ok else 'INCOMPLETE'} in {time.monotonic() - t0:.0f}s; operator log: "
              f"{STATE / 'operator.log'}")
        return 0 if ok else 1
    finally:
        if op is not None:
            op.terminate()
            try:
                op.wait(15)
            except subprocess.TimeoutExpired:
                op.kill()
        cluster.down(quiet=True)


if __name__ == "__main__":
    sys.exit(main())
