"""The operator as users run it: the image built here (hack/image/), started by a real kubelet
(hack/realnode.py: containerd, runc, kubelet and kube-proxy v1.37.1, CNI), installed by the chart
with its default values (two replicas, webhooks, leader election, the shipped RBAC, probes, a
read-only root filesystem, uid 10001), on a control plane of its own with kube-controller-manager,
kube-scheduler (for the operator's own pods) and kwok nodes beside the real one.

One module, in order: the image runs as uid 10001 on a read-only root; the chart's pods become
Ready on the real node through their probes; one of them leads (in-cluster configuration, the
shipped RBAC); the webhook Service refuses a bad policy; a burst of pods is bound on the kwok nodes
and on the real node, where they run; the leader pod is deleted, and the other replica binds the
next pods within 20 s, with no pod lost or bound twice (each pod's successful bindings counted in
the API server's audit log); `helm upgrade` and `helm uninstall` leave the user's policies and
revisions; `hack/realnode.py down` leaves no process, mount, namespace, interface or cgroup.

Root only (network namespaces, mounts, cgroups), as CI runs. The images are built by
hack/image/export.sh (cached: the Debian base once, the layers above it when the source changes)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

import localcluster
import realnode
from conftest import STATE
from helpers import GROUP, PLURAL, VERSION, apply_policy, suggestions_condition, wait_for

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "policy-scheduler"
RELEASE = "policy-scheduler"
NS = "policy-scheduler-system"
SCHED = "policy-scheduler"
BUSYBOX = "docker.io/library/policy-scheduler-busybox:1"
# what the chart's default image (repository policy-scheduler, tag appVersion) is to the kubelet
OPERATOR_IMAGE = "docker.io/library/policy-scheduler:" + yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
KWOK_NODES = 4
TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
# every successful or failed Binding, with its response code, for the "bound twice" count
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources: [{group: "", resources: [pods/binding]}]
  - level: None
"""


def _images() -> dict[str, Path]:
    """The operator, pause and busybox images as archives containerd imports, by image name (built
    if needed; POLICY_SCHEDULER_IMAGES=NAME=A.tar,NAME=B.tar takes archives made before)."""
    given = os.environ.get("POLICY_SCHEDULER_IMAGES", "")
    if given:
        return {k: Path(v) for k, _, v in (x.partition("=") for x in given.split(","))}
    res = subprocess.run(["bash", str(ROOT / "hack" / "image" / "export.sh")], stdout=subprocess.PIPE, text=True,
                         timeout=1800)
    assert res.returncode == 0, "hack/image/export.sh failed (see its output above)"
    out = {name: Path(path) for name, _, path in (ln.partition(" ") for ln in res.stdout.splitlines()) if path}
    assert {OPERATOR_IMAGE, realnode.PAUSE_IMAGE, BUSYBOX} <= set(out), res.stdout
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The control plane, the real node with the images imported, the kwok nodes."""
    images = _images()
    state = STATE / "realnode-cluster"
    c = localcluster.LocalCluster(state, kubeconfig_path=state / "kubeconfig")
    node = realnode.RealNode()
    try:
        c.up(kwok=True, controller_manager=True, quiet=True, node_address=realnode.HOST_ADDRESS,
             audit_policy=AUDIT_POLICY)
        c.start_scheduler()
        node.up(c.admin_kubeconfig, list(images.values()))
        api = config.new_client_from_config(str(c.kubeconfig_path))
        core = client.CoreV1Api(api)
        for i in range(KWOK_NODES):
            core.create_node({"metadata": {"name": f"kwok-{i}", "annotations": {"kwok.x-k8s.io/node": "fake"},
                                           "labels": {"type": "kwok", "kubernetes.io/hostname": f"kwok-{i}"}},
                              "spec": {"taints": [TAINT]},
                              "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                                         "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"}}})
        yield {"cluster": c, "node": node, "api": api, "core": core, "images": images,
               "tools": _tools(c, tmp_path_factory.mktemp("realnode-home"))}
    finally:
        node.down(quiet=True)
        c.down(quiet=True)


def _tools(c: localcluster.LocalCluster, home: Path):
    res = subprocess.run(["bash", str(ROOT / "hack" / "ensure-helm.sh")], stdout=subprocess.PIPE, text=True)
    assert res.returncode == 0, "hack/ensure-helm.sh failed (see its output above)"
    helm = res.stdout.strip().splitlines()[-1]
    kubectl = str(localcluster.bin_dir(build=False) / "kubectl")
    env = {"KUBECONFIG": str(c.kubeconfig_path), "PATH": "/usr/bin:/bin", "HOME": str(home),
           "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data")}

    def run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        out = subprocess.run([{"helm": helm, "kubectl": kubectl}[args[0]], *args[1:]], env=env,
                             capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        if check:
            assert out.returncode == 0, f"{' '.join(args)} failed:\n{out.stderr}"
        return out

    return run


def operator_pods(core) -> list:
    return core.list_namespaced_pod(NS, label_selector="app.kubernetes.io/name=policy-scheduler").items


def ready(p) -> bool:
    return p.status.phase == "Running" and p.metadata.deletion_timestamp is None and any(
        c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])


def leader_pod(core) -> str:
    """The pod whose process holds the Lease (identity ``<hostname>_<uuid>``, hostname = pod name)."""
    lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease(SCHED, "kube-system")
    holder = lease.spec.holder_identity or ""
    return holder.rsplit("_", 1)[0] if "_" in holder else ""


def workload_pod(name: str, namespace: str, real: bool) -> dict:
    spec = {"schedulerName": SCHED, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", "echo running on $(hostname); exec sleep 3600"],
                            "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}}]}
    if real:
        spec["nodeSelector"] = {"kubernetes.io/hostname": realnode.NODE_NAME}
    else:
        spec["nodeSelector"] = {"type": "kwok"}
        spec["tolerations"] = [{**TAINT, "operator": "Equal"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def bindings(c: localcluster.LocalCluster, namespace: str) -> dict[str, list[int]]:
    """Response codes of every Binding of a pod in ``namespace``, from the audit log."""
    out: dict[str, list[int]] = {}
    for line in c.audit_log.read_text().splitlines():
        ev = json.loads(line)
        ref = ev.get("objectRef") or {}
        if ref.get("subresource") == "binding" and ref.get("namespace") == namespace and ev.get("stage") == "ResponseComplete":
            out.setdefault(ref["name"], []).append(ev.get("responseStatus", {}).get("code", 0))
    return out


def test_the_image_runs_as_uid_10001_on_a_read_only_root(world):
    node = world["node"]
    image = OPERATOR_IMAGE
    for args, want in ((["policy-scheduler", "--version"], "policy-scheduler "),
                       (["id", "-u"], "10001"),
                       (["policy-scheduler", "run", "--help"], "--leader-elect")):
        # no --user: the image's own USER (ctr 1.6 has no flag for it anyway)
        res = node.ctr("run", "--rm", "--read-only", "--net-host", image,
                       f"ro-{args[-1].strip('-')}", *args, check=False)
        assert res.returncode == 0, res.stderr
        assert want in res.stdout, res.stdout


def test_the_chart_runs_on_the_real_node_and_fails_over(world):
    c, core, tools = world["cluster"], world["core"], world["tools"]
    objs = client.CustomObjectsApi(world["api"])
    apps = client.AppsV1Api(world["api"])
    tools("helm", "install", RELEASE, str(CHART), "-n", NS, "--create-namespace")
    t0 = time.monotonic()
    pods = wait_for(lambda: (ps := operator_pods(core)) and len(ps) == 2 and all(map(ready, ps)) and ps,
                    180, interval=1.0, what="the chart's two pods Ready")
    print(f"\noperator pods Ready {time.monotonic() - t0:.1f}s after helm install: "
          f"{[(p.metadata.name, p.spec.node_name, p.status.pod_ip) for p in pods]}")
    assert {p.spec.node_name for p in pods} == {realnode.NODE_NAME}
    for p in pods:
        sc = p.spec.containers[0].security_context
        assert sc.read_only_root_filesystem and p.spec.security_context.run_as_user == 10001
    leader = wait_for(lambda: leader_pod(core), 60, what="a leader elected")
    assert leader in {p.metadata.name for p in pods}

    # the webhook Service refuses a bad policy (the API server calls the pod behind it)
    bad = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulingPolicy", "metadata": {"name": "bad"},
           "spec": {"schedulerName": SCHED, "plugins": [
               {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Bogus"}}}]}}
    with pytest.raises(client.ApiException) as e:
        objs.create_cluster_custom_object(GROUP, VERSION, PLURAL, bad)
    message = json.loads(e.value.body)["message"]
    assert message.startswith('admission webhook "schedulingpolicies.policy-scheduler.io" denied the request: '
                              'SchedulingPolicy "bad" is invalid: spec.plugins[0].args.scoringStrategy.type'), message

    # a burst on both kinds of node
    ns = "burst"
    core.create_namespace({"metadata": {"name": ns}})
    wait_for(lambda: any(s.metadata.name == "default" for s in core.list_namespaced_service_account(ns).items),
             30, what="the namespace's default ServiceAccount")
    first = [("real", i) for i in range(4)] + [("kwok", i) for i in range(36)]
    for kind, i in first:
        core.create_namespaced_pod(ns, workload_pod(f"a-{kind}-{i}", ns, kind == "real"))
    bound = wait_for(lambda: (ps := core.list_namespaced_pod(ns).items) and all(p.spec.node_name for p in ps)
                     and len(ps) == len(first) and ps, 60, interval=0.5, what="the burst bound")
    on = {p.metadata.name: p.spec.node_name for p in bound}
    assert all(on[f"a-real-{i}"] == realnode.NODE_NAME for i in range(4))
    assert {on[f"a-kwok-{i}"] for i in range(36)} <= {f"kwok-{i}" for i in range(KWOK_NODES)}
    wait_for(lambda: all(p.status.phase == "Running" for p in core.list_namespaced_pod(ns).items
                         if p.spec.node_name == realnode.NODE_NAME), 60, what="the real node's pods Running")
    log = core.read_namespaced_pod_log("a-real-0", ns)
    assert log.strip() == "running on a-real-0", log

    # the leader pod goes; the other replica takes over and binds the next pods
    standby = next(p.metadata.name for p in pods if p.metadata.name != leader)
    t_del = time.monotonic()
    core.delete_namespaced_pod(leader, NS)
    second = [("real", i) for i in range(4, 6)] + [("kwok", i) for i in range(36, 54)]
    for kind, i in second:
        core.create_namespaced_pod(ns, workload_pod(f"b-{kind}-{i}", ns, kind == "real"))
    wait_for(lambda: all(p.spec.node_name for p in core.list_namespaced_pod(ns).items), 20, interval=0.2,
             what="the next pods bound by the other replica within 20 s of the leader's deletion")
    took = time.monotonic() - t_del
    # the standby, synced and polling every 2 s, normally takes the released Lease first; the
    # Deployment's replacement may win it on a loaded machine (it runs for leader once synced),
    # which loses nothing: the holder must be a live replica other than the deleted leader, and
    # the standby must not have restarted (a standby that died would show here)
    holder = leader_pod(core)
    live = {p.metadata.name for p in operator_pods(core) if p.metadata.deletion_timestamp is None}
    assert holder != leader and holder in live, (holder, leader, live)
    standby_status = core.read_namespaced_pod(standby, NS).status
    assert all(c.restart_count == 0 for c in standby_status.container_statuses or []), standby_status
    if holder != standby:
        print(f"the Lease went to the replacement {holder}, not the standby {standby}; the standby's log:\n"
              + core.read_namespaced_pod_log(standby, NS, tail_lines=60))
    total = len(first) + len(second)
    codes = wait_for(lambda: (b := bindings(c, ns)) and len(b) == total and b, 10, what="the audit log")
    # a Binding answered 504 (the server gave up waiting; a loaded machine) may still have been
    # stored: bound twice means two Bindings created, lost means a pod with no node
    twice = {name: cs for name, cs in codes.items() if cs.count(201) > 1}
    assert twice == {}, f"pods bound twice: {twice}"
    lost = [p.metadata.name for p in core.list_namespaced_pod(ns).items if not p.spec.node_name]
    assert lost == []
    print(f"leader {leader} deleted; {len(second)} pods bound by {holder} {took:.1f}s later; "
          f"{total} pods, 0 lost, 0 bound twice; attempts refused: "
          f"{sum(len(cs) - 1 for cs in codes.values())}; answered other than 201: "
          f"{ {n: cs for n, cs in codes.items() if set(cs) != {201} } }")
    wait_for(lambda: len([p for p in operator_pods(core) if ready(p)]) == 2, 120, interval=1.0,
             what="the Deployment's replacement pod Ready")
    # the new leader's metrics and probes, through the API server's proxy to the pod
    done = []  # the replicas that led since the deletion (the standby, and the replacement if it won)
    for name in {standby, holder}:
        metrics = core.connect_get_namespaced_pod_proxy_with_path(f"{name}:8081", NS, "metrics")
        done += [ln for ln in metrics.splitlines()
                 if ln.startswith("scheduler_schedule_attempts_total{") and 'result="scheduled"' in ln]
    # the deposed leader may still bind a pod of the second batch between the deletion and its SIGTERM
    assert done and 1 <= sum(float(ln.rsplit(" ", 1)[1]) for ln in done) <= len(second), done
    health = json.loads(core.connect_get_namespaced_pod_proxy_with_path(
        f"{holder}:8080", NS, "readyz", _preload_content=False).data)
    assert health["leader"] and health["ready"] and health["webhooks"]["serving"], health

    # a pod no node fits gets its suggestions condition under the shipped RBAC (pods/status), signed
    big = workload_pod("too-big", ns, False)
    big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1000"
    core.create_namespaced_pod(ns, big)
    got = wait_for(lambda: suggestions_condition(json.loads(core.read_namespaced_pod(
        "too-big", ns, _preload_content=False).data)), 30, interval=0.5,
                   what="the suggestions condition on a pod no node fits")
    cond, doc = got
    assert (cond["status"], cond["reason"]) == ("True", "Found"), cond
    assert any("LowerRequest" in s["kind"] for s in doc["suggestions"]), doc  # with the nodeSelector too, or alone
    assert json.loads(cond["message"])["mac"].startswith("v1:")
    print(f"suggestions condition of too-big: {doc['text']}")

    # helm upgrade and uninstall leave the user's policy and its revisions
    mine = "mine"
    apply_policy(objs, mine, [{"name": "NodeResourcesFit"}])
    label = f"policy-scheduler.io/policy={mine}"
    wait_for(lambda: apps.list_namespaced_controller_revision(NS, label_selector=label).items, 30,
             what="the policy's first revision")
    tools("helm", "upgrade", RELEASE, str(CHART), "-n", NS, "--reuse-values", "--set", "logLevel=debug")
    wait_for(lambda: (ps := operator_pods(core)) and len(ps) == 2 and all(map(ready, ps)) and all(
        "--log-level=debug" in p.spec.containers[0].args for p in ps), 180, interval=1.0,
        what="the upgraded pods Ready")
    tools("helm", "uninstall", RELEASE, "-n", NS)
    assert objs.get_cluster_custom_object(GROUP, VERSION, PLURAL, mine)["metadata"]["name"] == mine
    assert apps.list_namespaced_controller_revision(NS, label_selector=label).items
    wait_for(lambda: not operator_pods(core), 60, what="the operator's pods gone after uninstall")


def test_down_leaves_nothing_behind(world):
    node = world["node"]
    running = node.leftovers()  # what down has to remove: the check sees the node while it runs
    assert any(x.startswith("process kubelet") for x in running) and f"interface {realnode.HOST_VETH}" in running
    node.down(quiet=True)
    assert node.leftovers() == []
