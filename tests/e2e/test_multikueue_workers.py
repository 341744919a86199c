"""policy-scheduler as MultiKueue's External dispatcher (`run --multikueue-dispatcher`): one manager
and three worker control planes on this machine, each with Kueue v0.17.0's manager (hack/kueue.py);
each worker with kube-controller-manager (the Job controller) and policy-scheduler binding its
pods; the manager with policy-scheduler as the cluster chooser, Kueue's ``multiKueue.dispatcherName``
set to ours and ``WorkloadRequestUseMergePatch`` (so that Kueue clears our nomination when it sets
``clusterName``). No kubelet: the test writes a bound pod's status Succeeded after RUN_FOR, on
whichever worker it runs, and removes a pod being deleted at once.

The workers differ in size and shape: small (2 nodes of 4 CPUs), big (4 of 8), wide (6 of 2).

- Seeded Jobs (MK_JOBS, 1 to 3 pods of 1 to 6 CPUs) through the manager's LocalQueue: for every
  Job, the chooser's record on the Workload (``policy-scheduler.io/cluster-scores``) names the
  worker its policy ranked first among those that hold the whole Job, ``status.clusterName``
  (where Kueue ran it) is that worker, the Job finishes, and its pods were bound on that worker by
  policy-scheduler. A Job no worker can hold (8 pods of 6 CPUs) is never nominated, and `simulate`
  across the workers' contexts ranks the workers for its pods as the chooser's record does.
- Hostile worker kubeconfigs: a MultiKueueCluster whose Secret authenticates with an exec plugin,
  one with a ``tokenFile`` naming a FIFO: each refused (a Warning Event ``KubeconfigRefused`` on
  it, its condition in the record of a Workload evaluated meanwhile), the exec command never run
  by the operator, the FIFO never opened.
- Preemptions: every worker full of low-priority Jobs, one high-priority Job through the manager,
  with our dispatcher and then with Kueue's AllAtOnce: Workloads evicted on the workers that did
  not run it (ours: none).
"""

from __future__ import annotations

import base64
import os
import json
import random
import shutil
import subprocess
import sys
import time

import pytest
import yaml
from kubernetes import client, config

import localcluster
from conftest import ROOT, STATE, OperatorProcess, install_crd
from helpers import apply_policy, merged_kubeconfig, node, ready_condition, wait_for
from kueue import Kueue

KQ = ("kueue.x-k8s.io", "v1beta2")
SCHED, LABEL = "policy-scheduler", "policy-scheduler.io/policy"
DISPATCHER = "policy-scheduler.io/cluster-chooser"
WORKERS = {"small": (2, "4"), "big": (4, "8"), "wide": (6, "2")}
NS = "team"
RUN_FOR = 0.5  # seconds a bound pod runs before the test writes it Succeeded
PRIORITIES = {"low": 100, "high": 1000}
MANAGER: dict = {}  # WorkloadPriorityClasses and pod PriorityClasses, in every cluster
JOBS = int(os.environ.get("MK_JOBS", "60"))  # 200: the run docs/multicluster.md reports
SEED = 20261127


def kobj(api, plural: str, body: dict, namespace: str | None = None) -> dict:
    objs = client.CustomObjectsApi(api)
    body = {"apiVersion": "/".join(KQ), **body}
    if namespace:
        body["metadata"]["namespace"] = namespace
        return objs.create_namespaced_custom_object(*KQ, namespace, plural, body)
    return objs.create_cluster_custom_object(*KQ, plural, body)


def cond(obj: dict, typ: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == typ), {})


def queues(api, cpu: int, checks: list[str] | None = None) -> None:
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": NS}})
    kobj(api, "resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}, "spec": {}})
    spec = {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
        "name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": str(cpu)},
                                                {"name": "memory", "nominalQuota": "512Gi"}]}]}]}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    else:  # a worker: a higher-priority Workload preempts lower ones in its ClusterQueue
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    for pname, value in PRIORITIES.items():
        kobj(api, "workloadpriorityclasses", {"kind": "WorkloadPriorityClass", "metadata": {"name": pname},
                                              "value": value})
        client.SchedulingV1Api(api).create_priority_class({"metadata": {"name": pname}, "value": value})
    kobj(api, "clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": spec})
    kobj(api, "localqueues", {"kind": "LocalQueue", "metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}},
         namespace=NS)


@pytest.fixture(scope="module")
def mk():
    """(the manager's API client, each worker's, a kubeconfig with a context per worker)."""
    started: list = []  # (cluster, kueue, operator) to stop, last first
    try:
        workers = {}
        for name, (count, cpu) in WORKERS.items():
            state = STATE / f"mk-{name}-cluster"
            c = localcluster.LocalCluster(state, kubeconfig_path=state / "kubeconfig")
            c.up(controller_manager=True, quiet=True)
            started.append([c, None, None])
            started[-1][1] = Kueue(c).up()
            api = config.new_client_from_config(str(c.kubeconfig_path))
            install_crd(api, ROOT / "crds" / "schedulingpolicies.yaml")
            core = client.CoreV1Api(api)
            for i in range(count):
                core.create_node(node(f"{name}-{i}", cpu=cpu, memory="64Gi",
                                      labels={"topology.kubernetes.io/zone": f"{name}-zone"}))
            queues(api, count * int(cpu))
            started[-1][2] = OperatorProcess(c, SCHED, log_name=f"mk-{name}").start()
            objs = client.CustomObjectsApi(api)
            apply_policy(objs, "default", yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())["spec"]["plugins"])
            wait_for(lambda: (ready_condition(objs, "default") or {}).get("status") == "True", 30, what=f"{name}: policy")
            workers[name] = (c, api)
        state = STATE / "mk-manager-cluster"
        m = localcluster.LocalCluster(state, kubeconfig_path=state / "kubeconfig")
        m.up(quiet=True)
        started.append([m, None, None])
        started[-1][1] = Kueue(m, dispatcher=DISPATCHER, feature_gates={"WorkloadRequestUseMergePatch": True}).up()
        api = config.new_client_from_config(str(m.kubeconfig_path))
        install_crd(api, ROOT / "crds" / "schedulingpolicies.yaml")
        core = client.CoreV1Api(api)
        for name, (c, _) in workers.items():
            core.create_namespaced_secret("kueue-system", {
                "metadata": {"name": name},
                "data": {"kubeconfig": base64.b64encode(c.kubeconfig_path.read_bytes()).decode()}})
            kobj(api, "multikueueclusters", {"kind": "MultiKueueCluster", "metadata": {"name": name}, "spec": {
                "clusterSource": {"kubeConfig": {"locationType": "Secret", "location": name}}}})
        kobj(api, "multikueueconfigs", {"kind": "MultiKueueConfig", "metadata": {"name": "workers"},
                                        "spec": {"clusters": list(workers)}})
        kobj(api, "admissionchecks", {"kind": "AdmissionCheck", "metadata": {"name": "mk"}, "spec": {
            "controllerName": "kueue.x-k8s.io/multikueue",
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "workers"}}})
        # the manager's quota above the workers' 52 CPUs together: more Workloads wait for a
        # nomination at once (the chooser's backlog), each admitted on its worker when room comes
        queues(api, 200, checks=["mk"])
        started[-1][2] = OperatorProcess(m, SCHED, log_name="mk-manager",
                                         extra=["--multikueue-dispatcher", DISPATCHER,
                                                "--multikueue-refresh", "1s"]).start()
        objs = client.CustomObjectsApi(api)
        wait_for(lambda: all(cond(objs.get_cluster_custom_object(*KQ, "multikueueclusters", n), "Active")
                             .get("status") == "True" for n in workers), 60, what="MultiKueueClusters Active")
        wait_for(lambda: cond(objs.get_cluster_custom_object(*KQ, "clusterqueues", "cq"), "Active")
                 .get("status") == "True", 60, what="the manager's ClusterQueue Active")
        # the workers' contexts in one kubeconfig, for simulate across contexts
        (state / "workers.kubeconfig").write_text(merged_kubeconfig({n: c for n, (c, _) in workers.items()}))
        MANAGER.update(cluster=m, parts=started[-1])  # the last test switches the manager's dispatcher
        yield api, {n: a for n, (_, a) in workers.items()}, state / "workers.kubeconfig"
    finally:
        for c, k, op in reversed(started):
            if op is not None:
                op.stop()
            if k is not None:
                k.down()
            c.down(quiet=True)
            shutil.rmtree(c.state_dir, ignore_errors=True)


def job(name: str, pods: int, cpu: str, priority: str | None = None, fill: bool = False) -> dict:
    labels = {"kueue.x-k8s.io/queue-name": "lq", **({"kueue.x-k8s.io/priority-class": priority} if priority else {})}
    spec = {"schedulerName": SCHED, "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.local/batch:1",
                            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    if priority:
        spec["priorityClassName"] = priority
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels},
            "spec": {"parallelism": pods, "completions": pods, "template": {
                "metadata": {"labels": {LABEL: "default", **({"mk-role": "fill"} if fill else {})}}, "spec": spec}}}


def finish_bound(core, seen: dict) -> None:
    """A kubelet's part: a bound pod's container exits 0 after a second (not the fillers', which
    run until they are evicted); a pod being deleted goes at once."""
    now = time.monotonic()
    for p in core.list_namespaced_pod(NS).items:
        if p.metadata.deletion_timestamp:
            try:
                core.delete_namespaced_pod(p.metadata.name, NS, grace_period_seconds=0)
            except client.ApiException as e:
                if e.status != 404:
                    raise
            continue
        if (p.metadata.labels or {}).get("mk-role") == "fill":
            continue
        if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed"):
            if now - seen.setdefault(p.metadata.uid, now) >= RUN_FOR:
                t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                core.patch_namespaced_pod_status(p.metadata.name, NS, {"status": {
                    "phase": "Succeeded", "containerStatuses": [{
                        "name": "c", "image": "registry.local/batch:1", "imageID": "", "ready": False,
                        "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                                     "startedAt": t, "finishedAt": t}}}]}})


def test_each_job_runs_on_the_worker_its_policy_ranks_first(mk):
    api, workers, workers_kubeconfig = mk
    rng = random.Random(SEED)
    batch = client.BatchV1Api(api)
    jobs = {f"job-{i:03d}": (rng.choice((1, 1, 2, 3)), str(rng.choice((1, 1, 2, 3, 6)))) for i in range(JOBS)}
    jobs["too-big"] = (8, "6")  # 48 CPUs: more than any worker has
    for name, (pods, cpu) in jobs.items():
        batch.create_namespaced_job(NS, job(name, pods, cpu))
    objs = client.CustomObjectsApi(api)
    cores = {n: client.CoreV1Api(a) for n, a in workers.items()}
    seen: dict = {}

    def workloads() -> dict[str, dict]:
        items = objs.list_namespaced_custom_object(*KQ, NS, "workloads")["items"]
        return {w["metadata"]["ownerReferences"][0]["name"]: w for w in items}

    def all_done():
        for core in cores.values():
            finish_bound(core, seen)
        wls = workloads()
        done = {j for j, w in wls.items() if cond(w, "Finished").get("status") == "True"}
        done_count[0] = len(done)
        return wls if done >= set(jobs) - {"too-big"} else None

    t0 = time.monotonic()
    done_count = [0]
    try:
        wls = wait_for(all_done, 600, 0.5, what="every Job but too-big finished through a worker")
    except AssertionError as e:
        raise AssertionError(f"{e}; {done_count[0]} of {len(jobs) - 1} finished") from None
    took = time.monotonic() - t0
    lines, placed_on = [], {}
    for name in sorted(set(jobs) - {"too-big"}):
        w = wls[name]
        rec = json.loads(w["metadata"]["annotations"]["policy-scheduler.io/cluster-scores"])
        ranked = sorted((c for c, s in rec["clusters"].items() if "rank" in s), key=lambda c: rec["clusters"][c]["rank"])
        whole = [c for c in ranked if rec["clusters"][c]["placed"] == rec["clusters"][c]["pods"]]
        ran = (w.get("status") or {}).get("clusterName")
        assert whole and rec["chosen"] == whole[0] == ran, (name, rec, ran)
        placed_on[name] = ran
        lines.append(f"{name} {jobs[name][0]}x{jobs[name][1]}cpu -> {ran} ("
                     + ", ".join(f"{c} {rec['clusters'][c]['placed']}/{rec['clusters'][c]['pods']} "
                                 f"{rec['clusters'][c]['meanScore']}" for c in ranked) + ")")
    # the pods ran where Kueue sent them, bound by policy-scheduler
    for wname, core in cores.items():
        evs = [e for e in core.list_namespaced_event(NS).items if e.reason == "Scheduled"]
        assert all((e.reporting_component or e.source.component) == SCHED for e in evs)
        jobs_here = {e.involved_object.name.rsplit("-", 1)[0] for e in evs}
        assert jobs_here == {j for j, wk in placed_on.items() if wk == wname}, (wname, jobs_here)
    big = wls["too-big"]
    assert not (big.get("status") or {}).get("nominatedClusterNames") and not (big.get("status") or {}).get("clusterName")
    # why not: its record, and the same ranking from `simulate` across the workers' contexts on the
    # same (now idle) state, for the same pods
    pods_file = workers_kubeconfig.parent / "too-big.yaml"
    tmpl = job("too-big", 8, "6")["spec"]["template"]
    pods_file.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"too-big-{i}", "namespace": NS, **tmpl["metadata"]}, "spec": tmpl["spec"]} for i in range(8)]))

    def same_ranking():
        """The chooser's latest record (it evaluates too-big again each refresh; the last Jobs'
        pods may still have counted in the previous one) against simulate on the same state."""
        rec = json.loads(workloads()["too-big"]["metadata"]["annotations"]["policy-scheduler.io/cluster-scores"])
        sim = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "simulate", "--kubeconfig",
                              str(workers_kubeconfig), *[x for w in workers for x in ("--context", w)],
                              "--pods", str(pods_file), "--policy", "default", "--json"],
                             capture_output=True, text=True, timeout=120)
        assert sim.returncode == 0, sim.stderr
        ranking = [(s["cluster"], s["placed"], s["meanScore"]) for s in json.loads(sim.stdout)["ranking"]["default"]]
        chooser = [(c, v["placed"], v["meanScore"]) for c, v in sorted(
            ((c, v) for c, v in rec["clusters"].items() if "rank" in v), key=lambda x: x[1]["rank"])]
        return (rec, ranking) if rec["chosen"] is None and ranking == chooser else None

    rec, ranking = wait_for(same_ranking, 90, 1.0, what="the chooser's record of too-big equal to simulate's ranking")
    # `explain --workload` shows the record, for a Job that ran and for the one that did not
    manager_kc = str(MANAGER["cluster"].kubeconfig_path)
    first = sorted(placed_on)[0]
    shown = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "explain", "--workload", "--kubeconfig",
                            manager_kc, f"{NS}/{wls[first]['metadata']['name']}"], capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"running on {placed_on[first]}" in shown.stdout and f"1. {placed_on[first]}: " in shown.stdout, shown.stdout
    shown = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "explain", "--workload", "--kubeconfig",
                            manager_kc, f"{NS}/{big['metadata']['name']}"], capture_output=True, text=True, timeout=60)
    assert "no worker cluster yet" in shown.stdout and "chosen: none" in shown.stdout, shown.stdout
    lines.append(f"too-big 8x6cpu -> none ({', '.join(f'{c} {p}/8 {m}' for c, p, m in ranking)}; simulate across "
                 "the workers' contexts ranks them the same)")
    print(f"\n{len(placed_on)} Jobs finished through 3 workers in {took:.1f}s; too-big never nominated\n  "
          + "\n  ".join(lines))
    assert len(set(placed_on.values())) >= 2, "every Job went to one worker: the ranking was not exercised"


def _fifo_watch(path, opened: list, stop) -> None:
    """Poll a FIFO: opening it for writing without blocking fails with ENXIO unless a reader has it
    open (a client blocked reading it as a token file); record any time one had."""
    import errno

    while not stop.is_set():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:
                opened.append(f"unexpected {e!r}")
        else:
            opened.append(time.monotonic())
            os.close(fd)
        stop.wait(0.02)


def test_hostile_worker_kubeconfigs_are_refused_without_running_or_reading_anything(mk):
    """Two MultiKueueClusters whose kubeconfig Secrets point at a real worker (so that a loaded
    one would work): one authenticates with an exec plugin whose command records its parent
    process, one with a tokenFile that names a FIFO nobody writes. The chooser refuses both: a
    Warning Event KubeconfigRefused on each MultiKueueCluster, and its condition in the record of a
    Workload it evaluates meanwhile (which still goes to a real worker); the operator is never the
    parent of the exec command, and the FIFO is never opened by a reader."""
    import threading

    api, workers, _ = mk
    core, objs = client.CoreV1Api(api), client.CustomObjectsApi(api)
    op = MANAGER["parts"][2]
    base = json.loads((STATE / "mk-small-cluster" / "kubeconfig").read_text())  # a real worker's
    tmp = STATE / "mk-hostile"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    marker, fifo = tmp / "exec-parents", tmp / "token-fifo"
    os.mkfifo(fifo)
    # the exec plugin: records its parent's pid and command line, then prints a token that works
    script = tmp / "plugin.sh"
    script.write_text("#!/bin/sh\n"
                      f"echo \"$PPID $(tr '\\0' ' ' < /proc/$PPID/cmdline)\" >> {marker}\n"
                      "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
                      "\"status\":{\"token\":\"x\"}}'\n")
    script.chmod(0o755)
    hostile = {
        "hostile-exec": {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script),
                                  "interactiveMode": "Never"}},
        "hostile-tokenfile": {"tokenFile": str(fifo)},
    }
    opened: list = []
    stop = threading.Event()
    watcher = threading.Thread(target=_fifo_watch, args=(fifo, opened, stop), daemon=True)
    watcher.start()
    try:
        for name, user in hostile.items():
            cfg = {**base, "users": [{"name": base["users"][0]["name"], "user": user}]}
            core.create_namespaced_secret("kueue-system", {"metadata": {"name": name}, "data": {
                "kubeconfig": base64.b64encode(json.dumps(cfg).encode()).decode()}})
            kobj(api, "multikueueclusters", {"kind": "MultiKueueCluster", "metadata": {"name": name}, "spec": {
                "clusterSource": {"kubeConfig": {"locationType": "Secret", "location": name}}}})
        client.BatchV1Api(api).create_namespaced_job(NS, job("probe", 1, "1"))
        events_api = client.EventsV1Api(api)

        def refused():
            evs = {(e.regarding.name, e.reason): e for e in events_api.list_namespaced_event("default").items
                   if e.regarding is not None and e.regarding.kind == "MultiKueueCluster"}
            return evs if all((n, "KubeconfigRefused") in evs for n in hostile) else None

        evs = wait_for(refused, 60, 0.5, what="a KubeconfigRefused Event on each hostile MultiKueueCluster")
        for name, reason in (("hostile-exec", "ExecPlugin"), ("hostile-tokenfile", "TokenFile")):
            e = evs[(name, "KubeconfigRefused")]
            mc = objs.get_cluster_custom_object(*KQ, "multikueueclusters", name)
            assert e.type == "Warning" and e.regarding.uid == mc["metadata"]["uid"], e
            assert e.note.startswith(f"{reason}: users[0].user."), e.note
            assert str(fifo) not in e.note and str(script) not in e.note  # the field, not the content

        seen: dict = {}

        def recorded():
            for core_w in (client.CoreV1Api(a) for a in workers.values()):
                finish_bound(core_w, seen)
            w = next((w for w in objs.list_namespaced_custom_object(*KQ, NS, "workloads")["items"]
                      if w["metadata"]["ownerReferences"][0]["name"] == "probe"), None)
            rec = (w or {}).get("metadata", {}).get("annotations", {}).get("policy-scheduler.io/cluster-scores")
            return (w, json.loads(rec)) if rec and cond(w, "Finished").get("status") == "True" else None

        w, rec = wait_for(recorded, 120, 0.5, what="the probe Job recorded and finished on a real worker")
        assert rec["clusters"]["hostile-exec"] == {"error": "KubeconfigRefused", "reason": "ExecPlugin"}, rec
        assert rec["clusters"]["hostile-tokenfile"] == {"error": "KubeconfigRefused", "reason": "TokenFile"}, rec
        assert w["status"]["clusterName"] in workers and rec["chosen"] == w["status"]["clusterName"]
        time.sleep(3)  # three more refreshes (1 s) of both Secrets
        assert "kubeconfig not used (ExecPlugin)" in op.log() and "kubeconfig not used (TokenFile)" in op.log()
    finally:
        stop.set()
        watcher.join(5)
        for name in hostile:
            for fn, args in ((objs.delete_cluster_custom_object, (*KQ, "multikueueclusters", name)),
                             (core.delete_namespaced_secret, (name, "kueue-system"))):
                try:
                    fn(*args)
                except client.ApiException:
                    pass
    parents = marker.read_text().splitlines() if marker.exists() else []
    ours = [p for p in parents if p.split()[0] == str(op.proc.pid) or "policy_scheduler" in p]
    print(f"\nexec plugin runs: {len(parents)} ({', '.join(p[:80] for p in parents) or 'none'}); by the chooser: "
          f"{len(ours)}; token FIFO opened by a reader: {len(opened)} times")
    assert ours == [], parents
    # Kueue v0.17 refuses both kubeconfigs too (its validateKubeconfig), so nothing ran at all
    assert not marker.exists(), parents
    assert opened == []


def _clear(api_by_name: dict, manager_api) -> None:
    """Every Job of the namespace gone, on the manager and the workers (pods included)."""
    for a in (manager_api, *api_by_name.values()):
        client.BatchV1Api(a).delete_collection_namespaced_job(NS, propagation_policy="Background")
        # the manager runs no garbage collector (no kube-controller-manager): its Workloads by hand
        client.CustomObjectsApi(a).delete_collection_namespaced_custom_object(*KQ, NS, "workloads")

    def gone():
        left = 0
        for a in (manager_api, *api_by_name.values()):
            core = client.CoreV1Api(a)
            finish_bound(core, {})
            left += len(core.list_namespaced_pod(NS).items)
            left += len(client.CustomObjectsApi(a).list_namespaced_custom_object(*KQ, NS, "workloads")["items"])
        return left == 0

    left: dict = {}

    def gone_and_say():
        ok = gone()
        if not ok:
            for n, a in (("manager", manager_api), *api_by_name.items()):
                left[n] = ([p.metadata.name for p in client.CoreV1Api(a).list_namespaced_pod(NS).items],
                           [w["metadata"]["name"] for w in client.CustomObjectsApi(a).list_namespaced_custom_object(
                               *KQ, NS, "workloads")["items"]])
        return ok or None

    try:
        wait_for(gone_and_say, 90, 0.5, what="the namespace's Jobs, pods and Workloads gone everywhere")
    except AssertionError as e:
        raise AssertionError(f"{e}: left {left}") from None


def test_only_the_chosen_worker_preempts_where_all_at_once_preempts_on_every_worker(mk):
    """Every worker full of low-priority Jobs (admitted by its own Kueue, one pod per node); one
    high-priority Job (one 2-CPU pod) through the manager. With policy-scheduler as the dispatcher
    it goes to one worker, which evicts a low-priority Workload for it; with Kueue's AllAtOnce
    (the manager restarted with its default dispatcher, the chooser stopped) every worker gets a
    copy and evicts one, and all but one eviction are for nothing."""
    api, workers, _ = mk
    out = {}
    for mode in ("policy-scheduler", "AllAtOnce"):
        if mode == "AllAtOnce":
            m, parts = MANAGER["cluster"], MANAGER["parts"]
            parts[2].stop()
            parts[2] = None
            parts[1].down()
            parts[1] = Kueue(m, feature_gates={"WorkloadRequestUseMergePatch": True}).up()
        _clear(workers, api)
        for wname, a in workers.items():
            count, cpu = WORKERS[wname]
            for i in range(count):
                client.BatchV1Api(a).create_namespaced_job(NS, job(f"fill-{i}", 1, cpu, "low", fill=True))
        cores = {n: client.CoreV1Api(a) for n, a in workers.items()}
        total = sum(c for c, _ in WORKERS.values())
        wait_for(lambda: sum(1 for core in cores.values() for p in core.list_namespaced_pod(NS).items
                             if p.spec.node_name) == total, 90, 0.5, what="every worker's nodes full of fillers")
        client.BatchV1Api(api).create_namespaced_job(NS, job("urgent", 1, "2", "high"))
        evicted: dict[str, set] = {n: set() for n in workers}
        seen: dict = {}

        def urgent_done():
            for n, a in workers.items():
                finish_bound(cores[n], seen)
                for w in client.CustomObjectsApi(a).list_namespaced_custom_object(*KQ, NS, "workloads")["items"]:
                    if (cond(w, "Preempted").get("status") == "True"
                            or (cond(w, "Evicted").get("status") == "True" and cond(w, "Evicted").get("reason") == "Preempted")):
                        evicted[n].add(w["metadata"]["name"])
            wl = next((w for w in client.CustomObjectsApi(api).list_namespaced_custom_object(*KQ, NS, "workloads")["items"]
                       if w["metadata"]["ownerReferences"][0]["name"] == "urgent"), None)
            return wl if wl is not None and cond(wl, "Finished").get("status") == "True" else None

        wl = wait_for(urgent_done, 120, 0.3, what=f"the high-priority Job finished ({mode})")
        ran = wl["status"]["clusterName"]
        out[mode] = (ran, {n: len(v) for n, v in evicted.items()})
    print("\npreempted Workloads per worker (the worker the high-priority Job ran on first):")
    for mode, (ran, per) in out.items():
        wasted = sum(v for n, v in per.items() if n != ran)
        print(f"  {mode}: ran on {ran}; {ran} {per[ran]}, "
              + ", ".join(f"{n} {v}" for n, v in per.items() if n != ran) + f"; on workers not chosen: {wasted}")
    ran, per = out["policy-scheduler"]
    assert per[ran] >= 1, "the chosen worker preempted nothing: the scenario did not need preemption"
    assert sum(v for n, v in per.items() if n != ran) == 0
