"""Scheduling on real usage, against a real Prometheus server.

Prometheus (the Debian package; hack/ensure-prometheus.sh installs it) runs on a free loopback
port and scrapes an exporter of this test (promsim.py) that serves node_exporter-style and
DCGM-style series for the simulated nodes, with the values the tests set. The operator under
test has its own scheduler name; every test has its own nodes (label ``e2e-metrics``) and pods
selecting them.
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import time

from pathlib import Path

import pytest
import yaml
from kubernetes.client.rest import ApiException

from conftest import OperatorProcess
from helpers import GROUP, PLURAL, VERSION, apply_policy, events_for, node, pod, policy_status, wait_bound, wait_for
from promsim import PrometheusServer, SimExporter

SCHED = "metrics-scheduler"
POLICY = "policy-scheduler.io/policy"
GROUP_LABEL = "e2e-metrics"
DECISION = "policy-scheduler.io/decision"
ROOT = Path(__file__).resolve().parents[2]

# node -> (cpu usage, memory usage, GPU utilisation %), served from the start so rates are settled
NODES = {
    "m-low": (0.20, 0.30, None), "m-high": (0.60, 0.30, None), "m-hot": (0.95, 0.30, None),
    "h-idle": (0.05, 0.30, None), **{f"h-busy{i}": (0.40, 0.30, None) for i in range(4)},
    "d-req": (0.10, 0.30, None), "d-free": (0.70, 0.30, None),
    "b-1": (0.30, 0.30, None), "b-2": (0.30, 0.30, None),
    "g-hot": (0.20, 0.30, 95.0), "g-cool": (0.20, 0.30, 10.0),
}


@pytest.fixture(scope="module")
def sim():
    exporter = SimExporter()
    for name, (cpu, mem, gpu) in NODES.items():
        exporter.set(name, cpu=cpu, memory=mem, gpu=gpu)
    prom = PrometheusServer(exporter.port)
    try:
        prom.start()

        # Prometheus picks up its targets ~5 s after start; the 5 s rates settle a few samples later
        def settled():
            got = {r["metric"]["instance"]: float(r["value"][1]) for r in prom.query(
                '1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[5s]))')}
            return len(got) == len(NODES) and all(abs(got[n] - NODES[n][0]) < 0.01 for n in NODES)
        wait_for(settled, 60, 0.5, what="Prometheus to have the set cpu usage of every simulated node")
        yield exporter, prom
    finally:
        prom.cleanup()
        exporter.close()


@pytest.fixture(scope="module")
def mop(cluster, crd, sim):
    """The operator under test: scheduler name metrics-scheduler, refreshing every second."""
    _, prom = sim
    op = OperatorProcess(cluster, SCHED, extra=[
        "--prometheus-url", prom.url, "--prometheus-refresh-interval", "1s", "--prometheus-ttl", "4s",
        "--prometheus-query-timeout", "1s"]).start()
    yield op
    op.stop()


@pytest.fixture(scope="module")
def mpolicies(policies, mop):
    made: list[str] = []

    def make(name: str, plugins: list, prometheus: dict | None = None, **spec) -> str:
        if prometheus is not None:
            spec["prometheus"] = prometheus
        apply_policy(policies, name, plugins, schedulerName=SCHED, **spec)
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except ApiException:
            pass


@pytest.fixture
def nodes(core):
    made: list[str] = []

    def make(group: str, *names: str, **kw) -> None:
        for name in names:
            body = node(name, labels={GROUP_LABEL: group}, **kw)
            if NODES[name][2] is not None:
                body["status"]["allocatable"]["nvidia.com/gpu"] = "4"
            core.create_node(body)
            made.append(name)

    yield make
    for n in made:
        try:
            core.delete_node(n)
        except ApiException:
            pass


def mpod(name: str, ns: str, group: str, policy: str, cpu_limit: str = "100m", gpus: int = 0, **spec) -> dict:
    """A pod of the scheduler under test on the group's nodes, with limits (its in-flight estimate)."""
    p = pod(name, ns, cpu="100m", memory="64Mi", scheduler=SCHED, labels={POLICY: policy},
            nodeSelector={GROUP_LABEL: group, **spec.pop("nodeSelector", {})}, **spec)
    res = p["spec"]["containers"][0]["resources"]
    res["limits"] = {"cpu": cpu_limit, "memory": "64Mi"}
    if gpus:
        res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = str(gpus)
    return p


def example(name: str) -> tuple[list, dict]:
    """(plugins, rest of the spec) of policies/<name>.yaml."""
    spec = yaml.safe_load((ROOT / "policies" / f"{name}.yaml").read_text())["spec"]
    return spec.pop("plugins"), spec


def load_aware(mode: str = "FallbackToRequests", **args) -> list:
    return [{"name": "NodeUnschedulable"}, {"name": "NodeAffinity"}, {"name": "NodeResourcesFit"},
            {"name": "LoadAware", "weight": 5, "args": {"rateWindow": "5s", "onMissingMetrics": mode, **args}}]


def prometheus(prom, **kw) -> dict:
    return {"address": prom.url, "refreshInterval": "1s", "ttl": "4s", "queryTimeout": "1s", **kw}


def condition(policies, name: str, ctype: str) -> dict:
    return next((c for c in policy_status(policies, name).get("conditions") or [] if c["type"] == ctype), {})


def wait_metrics(policies, name: str, timeout: float = 30) -> dict:
    wait_for(lambda: condition(policies, name, "Degraded").get("status") == "False", timeout, 0.3,
             what=f"policy {name} to have its metrics")
    return policy_status(policies, name)


def failed_message(core, ns: str, name: str, needle: str, timeout: float = 20) -> str:
    def find():
        for e in events_for(core, ns, name, "FailedScheduling"):
            msg = e.message or getattr(e, "note", "") or ""
            if needle in msg:
                return msg
        return None
    try:
        return wait_for(find, timeout, 0.3, what=f"FailedScheduling for {name} mentioning {needle!r}")
    except AssertionError:
        seen = [(e.reason, e.message) for e in events_for(core, ns, name)]
        where = core.read_namespaced_pod(name, ns).spec.node_name
        raise AssertionError(f"no FailedScheduling for {name} mentioning {needle!r}; node {where}, events {seen}")


def decision(core, ns: str, name: str) -> dict:
    return json.loads(core.read_namespaced_pod(name, ns).metadata.annotations[DECISION])


# ------------------------------------------------------------------------------------------
def test_lower_real_cpu_wins_and_a_hot_node_is_filtered(core, namespace, nodes, mpolicies, policies, sim, cluster):
    """m-low and m-high are equal but for their real cpu (20% vs 60%); m-hot is at 95%."""
    nodes("cpu", "m-low", "m-high", "m-hot")
    _, prom = sim
    # the example policy; for the test, faster refreshes and a 5 s rate window (Prometheus has run
    # for seconds only: a 1 m rate() would still be extrapolating from partial data)
    plugins, spec = example("load-aware")
    next(p for p in plugins if p["name"] == "LoadAware")["args"]["rateWindow"] = "5s"
    mpolicies("load-aware", plugins, {**spec["prometheus"], **prometheus(prom)})
    status = wait_metrics(policies, "load-aware")
    prom.wait_rate_window(5)
    assert [(q["fresh"] >= 3, q["error"] if "error" in q else None) for q in status["metrics"]["queries"]] == \
        [(True, None), (True, None)]

    placed = {}
    for i in range(3):
        core.create_namespaced_pod(namespace, mpod(f"c{i}", namespace, "cpu", "load-aware"))
        placed.update(wait_bound(core, namespace, [f"c{i}"], 30))
    assert set(placed.values()) == {"m-low"}, placed

    # a pod that may only go to the hot node: filtered, the reason names the metric and threshold
    core.create_namespaced_pod(namespace, mpod("pinned-hot", namespace, "cpu", "load-aware",
                                               nodeSelector={"kubernetes.io/hostname": "m-hot"}))
    msg = failed_message(core, namespace, "pinned-hot", "cpu usage")
    assert "1 node(s) had cpu usage above the 80% threshold" in msg, msg
    print(f"\n  hot node filtered: {msg}")

    # explain: value, age and freshness of each metric for the top nodes
    d = decision(core, namespace, "c0")
    top = {t["node"]: t["details"]["LoadAware"] for t in d["top"] if "details" in t}  # the first three are described
    assert top["m-low"]["cpu"]["state"] == "fresh" and abs(top["m-low"]["cpu"]["value"] - 0.2) < 0.02
    assert abs(top["m-high"]["cpu"]["value"] - 0.6) < 0.02 and top["m-high"]["memory"]["age"] < 4
    out = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "explain", f"{namespace}/c0",
                          "--kubeconfig", str(cluster.kubeconfig_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith("m-low  LoadAware:"))
    shown = re.search(r"cpu (\d+(?:\.\d+)?) \(fresh", line)  # rate() may print 0.199 for 20%
    assert shown and abs(float(shown.group(1)) - 0.2) < 0.02, out.stdout
    print("  explain:\n" + "\n".join("    " + x for x in out.stdout.splitlines()))


def test_a_burst_does_not_pile_onto_the_idle_looking_node(core, namespace, nodes, mpolicies, policies, sim):
    """h-idle is at 5% cpu, four others at 40%. 50 pods with a 100m limit (2.5% of 4 cores each)
    arrive at once, faster than any metric refresh: each counts on its node at its limit until a
    sample 60 s newer covers it, so the idle node stops looking idle after a dozen or so."""
    busy = [f"h-busy{i}" for i in range(4)]
    nodes("herd", "h-idle", *busy)
    _, prom = sim
    mpolicies("m-herd", load_aware(), prometheus(prom, usageLag="60s"))
    wait_metrics(policies, "m-herd")
    names = [f"b{i:02d}" for i in range(50)]
    t0 = time.monotonic()
    for n in names:
        core.create_namespaced_pod(namespace, mpod(n, namespace, "herd", "m-herd"))
    placed = wait_bound(core, namespace, names, 90)
    spread = collections.Counter(placed.values())
    print(f"\n  burst of 50 pods in {time.monotonic() - t0:.1f}s: " +
          ", ".join(f"{n} {spread.get(n, 0)}" for n in ["h-idle", *busy]))
    # usage levels out: (5 + 4 x 40 + 50 x 2.5) / 5 = 58% per node: ~21 pods on h-idle, ~7 elsewhere
    assert spread["h-idle"] < 30, spread
    assert all(spread.get(n, 0) >= 3 for n in busy), spread
    # the policy status (written every 2 s) counts them until a sample 60 s newer covers them
    wait_for(lambda: policy_status(policies, "m-herd")["metrics"]["inFlightPods"] == 50, 10, 0.3,
             what="the status to count the burst in flight")
    last_idle = max(n for n, where in placed.items() if where == "h-idle")
    details = {t["node"]: t["details"]["LoadAware"] for t in decision(core, namespace, last_idle)["top"]
               if "details" in t}  # the first three of the top nodes are described
    assert details["h-idle"]["cpu"]["inFlight"] > 0.2, details  # its earlier burst pods, at their limits


def test_prometheus_down_and_back_under_each_mode(core, namespace, nodes, mpolicies, policies, sim, mop):
    """d-req has little real cpu (10%) but most of its cpu requested by a bound pod; d-free has
    70% real cpu and no requests. Metric scoring prefers d-req; allocation prefers d-free."""
    exporter, prom = sim
    nodes("down", "d-req", "d-free")
    core.create_namespaced_pod(namespace, pod("big", namespace, cpu="3", memory="1Gi", nodeName="d-req"))
    modes = {"Neutral": "m-neutral", "Exclude": "m-exclude", "FallbackToRequests": "m-fallback"}
    for mode, name in modes.items():
        mpolicies(name, load_aware(mode, usageThresholds={"cpu": 95, "memory": 95}), prometheus(prom))
    for name in modes.values():
        wait_metrics(policies, name)
    prom.wait_rate_window(5)  # rateWindow: the cpu rates are whole
    for name in modes.values():
        core.create_namespaced_pod(namespace, mpod(f"{name}-up", namespace, "down", name))
    before = wait_bound(core, namespace, [f"{n}-up" for n in modes.values()], 30)
    assert set(before.values()) == {"d-req"}, before  # real usage decides

    prom.stop()
    try:
        for name in modes.values():  # the values age past the ttl (4 s): every node stale
            wait_for(lambda: (condition(policies, name, "Degraded").get("reason") == "PrometheusUnreachable"
                              and policy_status(policies, name)["metrics"]["queries"][0]["fresh"] == 0), 30, 0.3,
                     what=f"{name}: Prometheus unreachable and no fresh value")
        cond = condition(policies, "m-fallback", "Degraded")
        assert cond["status"] == "True" and prom.url in cond["message"], cond
        for name in modes.values():
            core.create_namespaced_pod(namespace, mpod(f"{name}-down", namespace, "down", name))
        down = wait_bound(core, namespace, ["m-fallback-down", "m-neutral-down"], 30)
        assert down["m-fallback-down"] == "d-free", down  # scored by allocation, as NodeResourcesFit would
        msg = failed_message(core, namespace, "m-exclude-down", "no fresh cpu and memory usage metrics")
        assert msg.startswith("0/"), msg
        time.sleep(2)
        assert not core.read_namespaced_pod("m-exclude-down", namespace).spec.node_name
        print(f"\n  Prometheus down: FallbackToRequests -> {down['m-fallback-down']}, Neutral -> "
              f"{down['m-neutral-down']}, Exclude waits: {msg}")
    finally:
        prom.start()

    # back: the waiting pod is placed once its nodes have fresh metrics again (which node is not
    # pinned: in the first seconds after the restart the rate window holds too few samples and
    # overstates both nodes' cpu usage, d-req's by more), and metric scoring resumes
    wait_bound(core, namespace, ["m-exclude-down"], 40)
    for name in modes.values():
        wait_metrics(policies, name)
    prom.wait_rate_window(5)
    for name in ("m-exclude", "m-fallback"):
        core.create_namespaced_pod(namespace, mpod(f"{name}-back", namespace, "down", name))
    back = wait_bound(core, namespace, ["m-exclude-back", "m-fallback-back"], 30)
    assert back == {"m-exclude-back": "d-req", "m-fallback-back": "d-req"}, back
    log = mop.log()
    for name in modes.values():  # one line when it went away, one when it came back: not one per pod
        assert log.count(f"metrics of policy {name}: Prometheus {prom.url} is unreachable") == 1, log[-3000:]
        assert log.count(f"metrics of policy {name}: Prometheus {prom.url} is reachable again") == 1, log[-3000:]
    for p in core.list_namespaced_pod(namespace).items:
        assert p.spec.node_name, f"{p.metadata.name} was not scheduled"


def test_invalid_query_or_unreachable_address_degrade_only_their_policy(core, namespace, nodes, mpolicies,
                                                                         policies, sim):
    nodes("bad", "b-1", "b-2")
    _, prom = sim
    from promsim import free_port
    nowhere = f"http://127.0.0.1:{free_port()}"
    bad_query = [{"name": "NodeAffinity"}, {"name": "NodeResourcesFit"}, {"name": "MetricThreshold", "args": {"metrics": [
        {"name": "broken", "query": "sum(node_load1", "rejectAbove": 1}]}}]
    mpolicies("m-good", load_aware(), prometheus(prom))
    mpolicies("m-badquery", bad_query, prometheus(prom))
    mpolicies("m-nowhere", load_aware(), prometheus(prom, address=nowhere))
    wait_for(lambda: condition(policies, "m-badquery", "Degraded").get("reason") == "QueryFailed", 30, 0.3,
             what="m-badquery Degraded")
    wait_for(lambda: condition(policies, "m-nowhere", "Degraded").get("reason") == "PrometheusUnreachable", 30,
             0.3, what="m-nowhere Degraded")
    bq, nw = condition(policies, "m-badquery", "Degraded"), condition(policies, "m-nowhere", "Degraded")
    assert bq["status"] == "True" and "parse error" in bq["message"] and "sum(node_load1" in bq["message"], bq
    assert nw["status"] == "True" and nowhere in nw["message"], nw
    assert policy_status(policies, "m-badquery")["metrics"]["queries"][0]["error"].startswith("bad_data:")
    print(f"\n  invalid PromQL: {bq['reason']}: {bq['message']}\n  unreachable: {nw['reason']}: {nw['message']}")
    good = wait_metrics(policies, "m-good")
    assert good["metrics"]["available"] is True
    for name in ("m-good", "m-badquery", "m-nowhere"):  # still Ready: pods are placed on the fallback
        assert condition(policies, name, "Ready")["status"] == "True"
        core.create_namespaced_pod(namespace, mpod(f"{name}-p", namespace, "bad", name))
    wait_bound(core, namespace, ["m-good-p", "m-badquery-p", "m-nowhere-p"], 30)


def test_gpu_utilisation_filters_nodes_for_gpu_pods(core, namespace, nodes, mpolicies, policies, sim):
    """The gpu-utilization example: DCGM_FI_DEV_GPU_UTIL of g-hot at 95%, g-cool at 10%; the rule
    applies to GPU pods only. The policy takes its Prometheus address from the operator's
    --prometheus-url (only the refresh is made faster for the test)."""
    nodes("gpu", "g-hot", "g-cool")
    plugins, spec = example("gpu-utilization")
    mpolicies("gpu-utilization", plugins, {**spec["prometheus"], "refreshInterval": "1s", "ttl": "4s"})
    status = wait_metrics(policies, "gpu-utilization")
    assert status["metrics"]["address"] == sim[1].url and status["metrics"]["queries"][0]["fresh"] >= 2
    core.create_namespaced_pod(namespace, mpod("gpu-any", namespace, "gpu", "gpu-utilization", gpus=1))
    core.create_namespaced_pod(namespace, mpod("gpu-hot", namespace, "gpu", "gpu-utilization", gpus=1,
                                               nodeSelector={"kubernetes.io/hostname": "g-hot"}))
    core.create_namespaced_pod(namespace, mpod("cpu-hot", namespace, "gpu", "gpu-utilization",
                                               nodeSelector={"kubernetes.io/hostname": "g-hot"}))
    placed = wait_bound(core, namespace, ["gpu-any", "cpu-hot"], 30)
    assert placed == {"gpu-any": "g-cool", "cpu-hot": "g-hot"}, placed
    msg = failed_message(core, namespace, "gpu-hot", "gpu-util")
    assert "1 node(s) had gpu-util 0.95 above the 0.9 threshold" in msg, msg
    d = {t["node"]: t.get("details", {}) for t in decision(core, namespace, "gpu-any")["top"]}
    assert d["g-cool"]["MetricThreshold"]["gpu-util"]["value"] == pytest.approx(0.1)
