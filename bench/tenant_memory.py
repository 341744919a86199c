#!/usr/bin/env python3
"""What a hostile tenant can add to the operator's memory, on the real local control plane.

The scenario (issue #41, threat H2 of the tenancy review):

1. ``--nodes`` plain Node objects (no kubelet, no kwok), created concurrently through the API;
2. the operator (``policy-scheduler run``) syncs them; its RSS is read (``/proc/<pid>/status``
   VmRSS) once the last node is seen (a pod pinned to the last node created is bound);
3. ``--pods`` pending pods, each with a required node affinity ``In`` over ``--values`` label
   values that no node carries (distinct per pod), are created and left until the operator has
   found each unschedulable (PodScheduled=False); RSS is sampled every 100 ms meanwhile;
4. the pods are deleted; RSS is read again;
5. ``--made-up`` pods bound by hand (``spec.nodeName``, which anyone who may create a pod may
   set), each requesting ``--names`` extended resources that no node advertises (distinct per
   pod), are created; the operator counts them on their node. Before a resource got a column
   only when a node advertises it, each name cost every node two cells of the node table (at
   2,000 nodes, 20 pods x 1,000 names: 40,000 columns, over 600 MB). RSS is sampled as before;
   a plain pod is bound meanwhile (the time is measured); the pods are deleted, RSS read again;
6. a plain pod is created and the time until it is bound is measured.

It prints RSS before, at the peak and after the deletion, the growth, and the plain pod's bind
time, then one JSON line with every figure. Not a pass/fail test (tests/e2e/test_tenant_memory.py
asserts the 2,000-node case); run it at the chart's scale to compare with its memory limit:

    .venv/bin/python bench/tenant_memory.py --nodes 15000

The functions here are the scenario's steps; the e2e test uses them on its session's cluster.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AFFINITY_KEY = "tenant-memory.example/slot"  # a label key no node carries a value of that the pods name
NODE_LABEL = "tenant-memory"


# ------------------------------------------------------------------------------------------ RSS
def rss_bytes(pid: int) -> int:
    """The process's resident set (VmRSS), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class RssSampler:
    """Samples a process's RSS every ``interval`` seconds on a thread; ``peak`` is the largest seen."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval = pid, interval
        self.peak = rss_bytes(pid)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
                self.samples += 1
            except (OSError, RuntimeError):
                return

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self.peak = max(self.peak, rss_bytes(self.pid))
        except (OSError, RuntimeError):
            pass


def settled_rss(pid: int, seconds: float = 2.0) -> int:
    """RSS after ``seconds`` of quiet: the last of a few readings (the operator's loop idles)."""
    end = time.monotonic() + seconds
    rss = rss_bytes(pid)
    while time.monotonic() < end:
        time.sleep(0.2)
        rss = rss_bytes(pid)
    return rss


# ------------------------------------------------------------------------------------------ objects
def node_body(name: str) -> dict:
    alloc = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, NODE_LABEL: "1"}},
            "status": {"capacity": alloc, "allocatable": alloc, "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "plain Node object"}]}}


def pod_body(name: str, namespace: str, scheduler: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.local/app:1",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}], **spec}}


def made_up_pod(i: int, namespace: str, scheduler: str, names: int, node: str) -> dict:
    """A pod bound by hand to ``node``, requesting one of each of ``names`` extended resources
    no node advertises (distinct per pod; an extended resource's limit equals its request)."""
    made_up = {f"r{j}.p{i}.tenant-memory.example/x": "1" for j in range(names)}
    body = pod_body(f"made-up-{i}", namespace, scheduler, nodeName=node)
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "10m", "memory": "16Mi", **made_up},
                                                  "limits": made_up}
    return body


def hostile_pod(i: int, namespace: str, scheduler: str, values: int) -> dict:
    """A pod requiring label AFFINITY_KEY In ``values`` values no node has (distinct per pod)."""
    term = {"matchExpressions": [{"key": AFFINITY_KEY, "operator": "In",
                                  "values": [f"p{i}-v{j}" for j in range(values)]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return pod_body(f"hostile-{i}", namespace, scheduler, affinity=affinity)


# ------------------------------------------------------------------------------------------ steps
def parallel(fn, args, workers: int) -> None:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(fn, a) for a in args]:
            f.result()


def create_nodes(core, prefix: str, count: int, workers: int = 16) -> list[str]:
    """``count`` nodes named <prefix>-<i>; the last one is created after all the others, so once
    a watcher has seen it, it has seen them all (watch events come in resourceVersion order)."""
    names = [f"{prefix}-{i}" for i in range(count)]
    parallel(lambda n: core.create_node(node_body(n)), names[:-1], workers)
    core.create_node(node_body(names[-1]))
    return names


def delete_nodes(core) -> None:
    """Delete every node the scenario created (one DELETE of the collection, by their label)."""
    core.delete_collection_node(label_selector=f"{NODE_LABEL}=1")


def fast_client(kubeconfig: str, pool: int = 32):
    """A CoreV1Api whose connection pool takes ``pool`` concurrent requests (the client's default
    is 5 per core, and extra connections are dropped after each request)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = pool
    return client.CoreV1Api(client.ApiClient(cfg))


def pod_node(core, namespace: str, name: str) -> str | None:
    return core.read_namespaced_pod(name, namespace).spec.node_name


def wait(fn, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def bind_seconds(core, namespace: str, body: dict, timeout: float = 60.0) -> float:
    """Create ``body`` and return the seconds until it has a node (polled every 10 ms)."""
    name = body["metadata"]["name"]
    t0 = time.monotonic()
    core.create_namespaced_pod(namespace, body)
    while time.monotonic() - t0 < timeout:
        if pod_node(core, namespace, name):
            return time.monotonic() - t0
        time.sleep(0.01)
    raise TimeoutError(f"pod {namespace}/{name} not bound within {timeout}s")


def unschedulable_pods(core, namespace: str) -> int:
    n = 0
    for p in core.list_namespaced_pod(namespace).items:
        for c in (p.status.conditions or []) if p.status else []:
            if c.type == "PodScheduled" and c.status == "False":
                n += 1
    return n


def delete_pods(core, namespace: str, timeout: float = 60.0) -> None:
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait(lambda: not core.list_namespaced_pod(namespace).items, timeout, f"pods of {namespace} gone")


def run_scenario(core, namespace: str, scheduler: str, pid: int, last_node: str, pods: int = 40,
                 values: int = 2000, workers: int = 8, progress=lambda s: None, made_up: int = 20,
                 names: int = 1000) -> dict:
    """Steps 2-6 of the module docstring on nodes already created (``last_node`` the last of
    them); returns the figures (bytes and seconds)."""
    warm = pod_body("warm-up", namespace, scheduler, nodeSelector={"kubernetes.io/hostname": last_node})
    sync_s = bind_seconds(core, namespace, warm, timeout=120)
    delete_pods(core, namespace)
    before = settled_rss(pid)
    progress(f"operator has every node (warm-up pod bound after {sync_s:.1f}s); RSS {before / 2**20:.0f} MiB")
    t0 = time.monotonic()
    with RssSampler(pid) as sampler:
        parallel(lambda i: core.create_namespaced_pod(namespace, hostile_pod(i, namespace, scheduler, values)),
                 range(pods), workers)
        wait(lambda: unschedulable_pods(core, namespace) >= pods, 120,
             f"{pods} pods found unschedulable", interval=0.25)
        attempted_s = time.monotonic() - t0
        progress(f"{pods} hostile pods unschedulable after {attempted_s:.1f}s; "
                 f"peak RSS so far {sampler.peak / 2**20:.0f} MiB")
        time.sleep(2.0)  # retries from the backoff queue
        delete_pods(core, namespace)
        after = settled_rss(pid)
    with RssSampler(pid) as made_up_sampler:
        parallel(lambda i: core.create_namespaced_pod(namespace, made_up_pod(i, namespace, scheduler, names,
                                                                             last_node)), range(made_up), workers)
        # a plain pod bound after them: the operator has read them (its watch delivers in order)
        made_up_plain_s = bind_seconds(core, namespace, pod_body("plain-beside", namespace, scheduler))
        time.sleep(1.0)
        progress(f"{made_up} pods bound by hand with {names} made-up resources each; plain pod bound in "
                 f"{made_up_plain_s:.2f}s; peak RSS {made_up_sampler.peak / 2**20:.0f} MiB")
        delete_pods(core, namespace)
        made_up_after = settled_rss(pid)
    plain_s = bind_seconds(core, namespace, pod_body("plain", namespace, scheduler))
    delete_pods(core, namespace)
    return {"rss_before": before, "rss_peak": sampler.peak, "rss_after": after,
            "growth_peak": sampler.peak - before, "growth_after": after - before,
            "hostile_unschedulable_s": attempted_s, "plain_bind_s": plain_s, "sync_s": sync_s,
            "rss_samples": sampler.samples, "rss_made_up_peak": made_up_sampler.peak,
            "growth_made_up_peak": made_up_sampler.peak - before, "rss_made_up_after": made_up_after,
            "growth_made_up_after": made_up_after - before, "made_up_plain_bind_s": made_up_plain_s,
            "rss_made_up_samples": made_up_sampler.samples}


# ------------------------------------------------------------------------------------------ main
def _mib(b: int) -> str:
    return f"{b / 2**20:.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2000, help="plain Node objects (default 2000)")
    ap.add_argument("--pods", type=int, default=40, help="hostile pending pods (default 40)")
    ap.add_argument("--values", type=int, default=2000, help="values of each pod's In requirement (default 2000)")
    ap.add_argument("--made-up", type=int, default=20, help="pods bound by hand with made-up resources (default 20)")
    ap.add_argument("--names", type=int, default=1000, help="made-up extended resources per such pod (default 1000)")
    ap.add_argument("--workers", type=int, default=16, help="concurrent API requests creating nodes (default 16)")
    ap.add_argument("--keep", action="store_true", help="leave the run's directory (logs) in place")
    a = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT / "hack"))
    import yaml
    from kubernetes import client, config, utils

    import localcluster

    run_dir = Path(tempfile.mkdtemp(prefix="tenant-memory-", dir=ROOT / ".local" if (ROOT / ".local").is_dir() else None))
    cluster = localcluster.LocalCluster(run_dir / "cluster", kubeconfig_path=run_dir / "kubeconfig")
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    cluster.up(quiet=True)
    proc = None
    try:
        api = config.new_client_from_config(str(cluster.kubeconfig_path))
        core = client.CoreV1Api(api)
        for crd in ("schedulingpolicies.yaml", "podgroups.yaml"):
            utils.create_from_dict(api, yaml.safe_load((ROOT / "crds" / crd).read_text()))
        time.sleep(2)  # the CRDs established and served
        objs = client.CustomObjectsApi(api)
        policy = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())
        wait(lambda: _try(lambda: objs.create_cluster_custom_object("policy-scheduler.io", "v1alpha1",
                                                                    "schedulingpolicies", policy)), 30, "policy")
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="tenant")))
        t0 = time.monotonic()
        names = create_nodes(fast_client(str(cluster.kubeconfig_path)), "tm", a.nodes, a.workers)
        say(f"{a.nodes} nodes created in {time.monotonic() - t0:.1f}s")
        log = open(run_dir / "operator.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "policy_scheduler.cli", "run", "--kubeconfig",
                                 str(cluster.kubeconfig_path), "--metrics-port", "0", "--health-port", "0"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        figures = run_scenario(core, "tenant", "policy-scheduler", proc.pid, names[-1], a.pods, a.values,
                               progress=say, made_up=a.made_up, names=a.names)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        cluster.down(quiet=True)
        if not a.keep:
            import shutil
            shutil.rmtree(run_dir, ignore_errors=True)
    figures.update(nodes=a.nodes, pods=a.pods, values=a.values, made_up=a.made_up, names=a.names)
    print(f"nodes {a.nodes}, {a.pods} pods x In over {a.values} values no node carries")
    print(f"  RSS before     {_mib(figures['rss_before'])}")
    print(f"  RSS peak       {_mib(figures['rss_peak'])}  (+{_mib(figures['growth_peak'])})")
    print(f"  RSS after      {_mib(figures['rss_after'])}  (+{_mib(figures['growth_after'])}, pods deleted)")
    print(f"then {a.made_up} pods bound by hand x {a.names} extended resources no node advertises")
    print(f"  RSS peak       {_mib(figures['rss_made_up_peak'])}  (+{_mib(figures['growth_made_up_peak'])})")
    print(f"  RSS after      {_mib(figures['rss_made_up_after'])}  (+{_mib(figures['growth_made_up_after'])}, "
          f"pods deleted)")
    print(f"  plain pod bound beside them in {figures['made_up_plain_bind_s'] * 1000:.0f} ms")
    print(f"  plain pod bound in {figures['plain_bind_s'] * 1000:.0f} ms; hostile pods all tried in "
          f"{figures['hostile_unschedulable_s']:.1f}s")
    print(json.dumps(figures))
    return 0


def _try(fn) -> bool:
    try:
        fn()
        return True
    except Exception:  # noqa: BLE001 - the CRD not served yet
        return False


if __name__ == "__main__":
    sys.exit(main())
