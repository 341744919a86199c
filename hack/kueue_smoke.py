#!/usr/bin/env python3
"""A by-hand smoke check of Kueue on the local control plane (docs/multicluster.md), through the
Python API the tests would use (``LocalCluster(...).up()``, ``Kueue(cluster).up()``). Not part of
the test suite.

    nice -n 19 .venv/bin/python hack/kueue_smoke.py [--state-dir DIR] [--keep]

It starts a control plane with kube-controller-manager in DIR (default: a temporary directory),
starts Kueue, and creates:
  * a ResourceFlavor;
  * a ClusterQueue with 2 CPUs of quota;
  * a LocalQueue;
  * three 1-CPU Jobs labelled kueue.x-k8s.io/queue-name, with schedulerName: policy-scheduler.

It then checks that exactly two Workloads are Admitted and their Jobs unsuspended and given pods that
carry Kueue's labels, and that the third Job stays suspended with its Workload pending. It deletes one
admitted Job and checks that the third is admitted. Finally it brings everything down (unless --keep)
and exits 0 when all checks held.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kueue import Kueue  # noqa: E402
from localcluster import ClusterError, LocalCluster  # noqa: E402

KQ = "/apis/kueue.x-k8s.io/v1beta2"
NS = "default"


def job(i: int) -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"job-{i}", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
            "schedulerName": "policy-scheduler", "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "30"],
                            "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}}]}}},
    }


def cond(obj: dict, typ: str) -> dict:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == typ:
            return c
    return {}


def until(what: str, fn, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def run(k: Kueue) -> None:
    k.apply(f"{KQ}/resourceflavors/default-flavor",
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
             "metadata": {"name": "default-flavor"}})
    k.apply(f"{KQ}/clusterqueues/cq", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": "default-flavor", "resources": [
                {"name": "cpu", "nominalQuota": "2"}, {"name": "memory", "nominalQuota": "4Gi"}]}]}]}})
    k.apply(f"{KQ}/namespaces/{NS}/localqueues/lq",
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}})
    for i in (1, 2, 3):
        k.api("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", job(i))
    print("created ResourceFlavor default-flavor, ClusterQueue cq (cpu 2), LocalQueue lq, Jobs job-1..3 (1 cpu each)")

    def workloads() -> list[dict]:
        return k.api("GET", f"{KQ}/namespaces/{NS}/workloads")["items"]

    def settled():
        ws = workloads()
        adm = [w for w in ws if cond(w, "Admitted").get("status") == "True"]
        pend = [w for w in ws if cond(w, "QuotaReserved").get("status") == "False"]
        return (adm, pend) if len(ws) == 3 and len(adm) == 2 and len(pend) == 1 else None

    adm, pend = until("2 admitted and 1 pending Workloads", settled)
    for w in adm + pend:
        owner = w["metadata"]["ownerReferences"][0]["name"]
        c = cond(w, "Admitted") if w in adm else cond(w, "QuotaReserved")
        print(f"workload {w['metadata']['name']} (job {owner}): {c['type']}={c['status']} {c.get('message', '')}")
    pending_job = pend[0]["metadata"]["ownerReferences"][0]["name"]
    jobs = {j["metadata"]["name"]: j for j in k.api("GET", f"/apis/batch/v1/namespaces/{NS}/jobs")["items"]}
    for name, j in sorted(jobs.items()):
        print(f"job {name}: suspend={j['spec'].get('suspend')} schedulerName={j['spec']['template']['spec']['schedulerName']}")
        assert j["spec"].get("suspend") is (name == pending_job), f"{name}: suspend={j['spec'].get('suspend')}"

    def pods():
        items = k.api("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
        return items if len(items) == 2 else None

    for p in until("the admitted Jobs' 2 pods (kube-controller-manager)", pods):
        labels = {a: b for a, b in p["metadata"]["labels"].items() if a.startswith("kueue.x-k8s.io/")}
        print(f"pod {p['metadata']['name']}: schedulerName={p['spec']['schedulerName']} "
              f"gates={p['spec'].get('schedulingGates')} nodeName={p['spec'].get('nodeName')} "
              f"kueue labels={labels} workload={p['metadata'].get('annotations', {}).get('kueue.x-k8s.io/workload')}")
        assert p["spec"]["schedulerName"] == "policy-scheduler"
        assert labels.get("kueue.x-k8s.io/podset") == "main" and labels.get("kueue.x-k8s.io/cluster-queue-name") == "cq"
    first = adm[0]["metadata"]["ownerReferences"][0]["name"]
    k.api("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/{first}",
          {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
    print(f"deleted job {first}")
    w = until(f"the Workload of {pending_job} admitted",
              lambda: next((w for w in workloads() if w["metadata"]["name"] == pend[0]["metadata"]["name"]
                            and cond(w, "Admitted").get("status") == "True"), None))
    j = k.api("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/{pending_job}")
    print(f"workload {w['metadata']['name']} admitted after the release; job {pending_job} suspend={j['spec'].get('suspend')}")
    assert j["spec"].get("suspend") is False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state-dir", default=None, help="the local cluster's state dir (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster and Kueue running")
    a = ap.parse_args()
    state = Path(a.state_dir) if a.state_dir else Path(tempfile.mkdtemp(prefix="kueue-smoke-")) / "cluster"
    c = LocalCluster(state)
    k = None
    ok = False
    try:
        c.up(controller_manager=True)
        k = Kueue(c).up()
        run(k)
        ok = True
        print("smoke check passed")
    except (ClusterError, AssertionError) as e:
        print(f"smoke check FAILED: {e}", file=sys.stderr)
    finally:
        if a.keep:
            print(f"left running: kubeconfig {c.admin_kubeconfig}; stop with hack/kueue.py down and "
                  f"hack/localcluster.py down --state-dir {state}")
        else:
            if k is not None:
                k.down()
            c.down(quiet=True)
            if not a.state_dir:
                shutil.rmtree(state.parent, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
