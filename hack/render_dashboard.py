#!/usr/bin/env python3
"""Render the main panels of docs/grafana-dashboard.json from a real burst on the local control plane.

What it does, and stops again, failure or not (Ctrl-C and SIGTERM included):

1. a local control plane (etcd + kube-apiserver, hack/localcluster.py) in `.local/render-<time>/`,
   the CRD, the `default` policy (policies/default.yaml) and a node;
2. a real Prometheus (the `prometheus` binary; `bash hack/ensure-prometheus.sh` installs the
   Debian package when it is missing) on a free loopback port with a temporary config and data
   directory, scraping the operator every second (job `policy-scheduler`);
3. `policy-scheduler run --metrics-port <free port>`;
4. a warm-up before the plotted window, so that the series the burst moves exist already (rate()
   cannot see the jump of a counter's first sample): pods that can never fit (64 cpu) and pods
   with a scheduling gate (both stay), pods that fit only on a node added right after their
   failure or after their backoff, then those pods and the third node deleted; then a burst in
   phases, marked on every image: idle; 200 pods while only the 2 nodes exist (about 80 fit, the
   rest wait as unschedulable); 100 more nodes (the waiting pods move on NodeAdd and are bound);
   2,000 pods at once; a quiet tail;
5. each rendered panel's own PromQL, read from the dashboard JSON with the template variables
   substituted (`$job` = the scrape job, `$profile` = `.*`, `$__rate_interval` = `--rate-window`),
   through Prometheus's `/api/v1/query_range`, drawn with matplotlib into `docs/img/dashboard-*.png`.

Needs matplotlib, an optional extra of the package:

    .venv/bin/pip install -e '.[docs]'        # or: .venv/bin/pip install matplotlib

Usage:

    .venv/bin/python hack/render_dashboard.py [--nodes 100] [--pods 2000] [--early-pods 200]
        [--unschedulable 5] [--gated 3] [--out docs/img] [--rate-window 10s]
    .venv/bin/python hack/render_dashboard.py --check     # only check the dashboard JSON, no cluster

`--check` (also run before every render) parses the JSON and checks that every expression of
every panel uses only the metric names the operator exports (the list below) and, when the
package is importable, that the operator's Telemetry registry has each of them. Logs of the run
(operator, Prometheus, control plane) stay in `.local/render-<time>/`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import localcluster  # noqa: E402

DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
JOB = "policy-scheduler"
NAMESPACE = "render"
NODE_CPU, NODE_MEM, NODE_PODS = "4", "32Gi", "110"
POD_CPU, POD_MEM = "100m", "500Mi"

# The series the dashboard may use: name -> type, as the operator exports them.
METRICS = {
    "scheduler_schedule_attempts_total": "counter",
    "scheduler_scheduling_attempt_duration_seconds": "histogram",
    "scheduler_pod_scheduling_sli_duration_seconds": "histogram",
    "scheduler_plugin_execution_duration_seconds": "histogram",
    "scheduler_framework_extension_point_duration_seconds": "histogram",
    "scheduler_pending_pods": "gauge",
    "scheduler_queue_incoming_pods_total": "counter",
    "scheduler_unschedulable_pods": "gauge",
    "policy_scheduler_binding_duration_seconds": "histogram",
    "policy_scheduler_binding_errors_total": "counter",
    "policy_scheduler_events_dropped_total": "counter",
    "policy_scheduler_nodes": "gauge",
    "policy_scheduler_policies": "gauge",
    "policy_scheduler_rollout_phase": "gauge",
    "policy_scheduler_rollout_attempts_total": "counter",
    "policy_scheduler_rollout_shadow_decisions_total": "counter",
    "policy_scheduler_rollout_rollbacks_total": "counter",
    "policy_scheduler_rollout_promotions_total": "counter",
    "scheduler_preemption_attempts_total": "counter",
    "scheduler_preemption_victims": "histogram",
    "leader_election_master_status": "gauge",
    "policy_scheduler_tuning_evaluations_total": "counter",
    "policy_scheduler_tuning_replays_total": "counter",
    "policy_scheduler_tuning_evaluation_duration_seconds": "histogram",
    "scheduler_preemption_evaluation_duration_seconds": "histogram",
    "scheduler_workload_preemption_attempts_total": "counter",
    "scheduler_workload_preemption_victims": "histogram",
    "scheduler_podgroup_schedule_attempts_total": "counter",
    "scheduler_podgroup_scheduling_attempt_duration_seconds": "histogram",
    "scheduler_podgroup_scheduling_algorithm_duration_seconds": "histogram",
    "scheduler_cache_size": "gauge",
    "scheduler_event_handling_duration_seconds": "histogram",
    "rest_client_requests_total": "counter",
    "rest_client_request_duration_seconds": "histogram",
    "policy_scheduler_build_info": "gauge",
    "process_cpu_seconds_total": "counter",
    "process_resident_memory_bytes": "gauge",
}
# Series Prometheus records itself for every target (not in the operator's registry).
PROMETHEUS_SERIES = {"up"}

# The panels rendered: dashboard title -> image name (docs/img/dashboard-<name>.png).
RENDERED = {
    "Schedule attempts by result": "attempts",
    "Scheduling attempt duration": "attempt-duration",
    "Pending pods by queue": "pending",
    "Incoming pods by event": "incoming",
    "Extension point duration p99": "extension-points",
    "Plugin execution duration p99": "plugins",
}
MAX_SERIES = 10  # per image; the others are named in the title's count

_PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "inf", "nan", "le",
}


# ------------------------------------------------------------------------------------ the dashboard
def series_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels and strings left out);
    for a Grafana variable query ``label_values(metric, label)``, the metric."""
    lv = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", expr)
    if lv:
        expr = lv.group(1)
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                    # strings
    e = re.sub(r"\{[^}]*\}", "", e)                                  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                                 # range selectors
    e = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", e)     # grouping labels
    e = re.sub(r"\$\{?\w+\}?", "", e)                               # template variables
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word = m.group(0)
        if e[m.end():].lstrip().startswith("(") or word.lower() in _PROMQL_WORDS:
            continue
        names.add(word)
    return names


def exposed(name: str, kind: str) -> set[str]:
    """The series names a metric family of this type exposes."""
    if kind == "histogram":
        return {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return {name}


def allowed_series() -> set[str]:
    return set().union(*(exposed(n, k) for n, k in METRICS.items())) | PROMETHEUS_SERIES


def registry_series() -> set[str] | None:
    """Series names of the operator's Telemetry registry, or None when the package is not importable."""
    try:
        from policy_scheduler.cluster.telemetry import Telemetry
    except ImportError:
        return None
    out: set[str] = set()
    for fam in Telemetry().registry.collect():
        if fam.type == "counter":
            out.add(f"{fam.name}_total")  # no _created series: the operator exports none
        elif fam.type == "histogram":
            out |= exposed(fam.name, "histogram")
        else:
            out.add(fam.name)
    return out


def load_dashboard(path: Path = DASHBOARD) -> dict:
    return json.loads(path.read_text())


def panels(dash: dict) -> list[dict]:
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out += p.get("panels", [])  # collapsed rows hold their panels
    return out


def check_dashboard(dash: dict) -> list[str]:
    """Problems with the dashboard: expressions with unknown names, or names the registry lacks."""
    problems = []
    allowed = allowed_series()
    registry = registry_series()
    exprs = [(p.get("title", "?"), t["expr"]) for p in panels(dash) for t in p.get("targets", []) if "expr" in t]
    exprs += [(f"variable {v['name']}", v["definition"]) for v in dash["templating"]["list"]
              if v.get("type") == "query"]
    if not exprs:
        problems.append("no expressions found")
    for title, expr in dict.fromkeys(exprs):
        for name in sorted(series_names(expr)):
            if name not in allowed:
                problems.append(f"{title}: {name} is not one of the operator's metrics")
            elif registry is not None and name not in registry and name not in PROMETHEUS_SERIES:
                problems.append(f"{title}: {name} is not in the operator's Telemetry registry (yet)")
    problems += dashboard_generator().replica_problems(dash)
    return list(dict.fromkeys(problems))


def dashboard_generator():
    """hack/dashboard.py, which writes the dashboard and knows how each series behaves with replicas."""
    import dashboard

    return dashboard


def substitute(expr: str, variables: dict[str, str]) -> str:
    for k in sorted(variables, key=len, reverse=True):
        expr = expr.replace("${" + k + "}", variables[k]).replace("$" + k, variables[k])
    return expr


# ------------------------------------------------------------------------------------ processes
def progress(msg: str) -> None:
    print(f"[render {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def http_get(url: str, timeout: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


class Prometheus:
    """`prometheus` on a free loopback port, scraping the operator's targets (``host:port``, one per
    replica) every second as job ``JOB``, data in a temp dir."""

    def __init__(self, targets: str | list[str], log: Path) -> None:
        targets = [targets] if isinstance(targets, str) else list(targets)
        binary = shutil.which("prometheus")
        if binary is None:
            subprocess.run(["bash", str(HERE / "ensure-prometheus.sh")], check=True)
            binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("no prometheus binary on PATH after hack/ensure-prometheus.sh")
        self.dir = Path(tempfile.mkdtemp(prefix="render-prometheus-"))
        self.port = localcluster.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (self.dir / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: {JOB}\n"
            f"    static_configs:\n      - targets: [{', '.join(repr(t) for t in targets)}]\n")
        with open(log, "ab") as f:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._wait_ready(log)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, log: Path) -> None:
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited:\n{localcluster.tail(log, 20)}")
            try:
                if http_get(f"{self.url}/-/ready", 1):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready after 60s:\n{localcluster.tail(log, 20)}")
            time.sleep(0.2)

    def api(self, path: str, **params: str) -> dict | list:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            body = json.loads(http_get(url, 30))
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus {path} {params.get('query')!r}: {body.get('error', body)}")
        return body["data"]

    def query(self, expr: str) -> list:
        return self.api("query", query=expr)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=str(step))["result"]

    def stop(self) -> None:
        stop_proc(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def stop_proc(p: subprocess.Popen | None) -> None:
    """SIGTERM, then SIGKILL after 20 s: the benchmark's own ``terminate``."""
    if p is not None:
        bench().terminate(p)


def scrape_value(url: str, name: str, **labels: str) -> float:
    """Sum of a metric's samples with these labels on a /metrics page (0 when absent or unreachable)."""
    try:
        text = http_get(url, 5).decode()
    except OSError:
        return 0.0
    want = [f'{k}="{v}"' for k, v in labels.items()]
    total = 0.0
    for line in text.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and all(w in line for w in want):
            total += float(line.rsplit(" ", 1)[1])
    return total


# ------------------------------------------------------------------------------------ the burst
def seconds(duration: str) -> float:
    """A Prometheus duration such as 10s, 1m or 500ms, in seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration)
    if not m:
        raise ValueError(f"not a duration: {duration!r} (e.g. 10s, 1m)")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def node(i: int) -> dict:
    name = f"node-{i:04d}"
    alloc = {"cpu": NODE_CPU, "memory": NODE_MEM, "pods": NODE_PODS}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
            "status": {"capacity": alloc, "allocatable": alloc,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "plain Node object"}]}}


def pod(name: str, cpu: str = POD_CPU, gated: bool = False) -> dict:
    spec: dict = {"schedulerName": "policy-scheduler",
                  "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                  "resources": {"requests": {"cpu": cpu, "memory": POD_MEM}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": "example.com/hold"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name.rsplit("-", 1)[0]}},
            "spec": spec}


async def create_all(client, path: str, bodies: list[dict], concurrency: int = 16) -> None:
    it = iter(bodies)

    async def worker() -> None:
        for body in it:
            await client.post(path, body)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def bench():
    """bench/throughput.py, whose cluster helpers this script shares."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    import throughput

    return throughput


async def install_policy(client) -> None:
    """The CRD and the default policy: the benchmark's own routine."""
    await bench().install_policy(client)


async def wait_bound(metrics_url: str, want: int, op: subprocess.Popen, log: Path, stall: float = 60) -> float:
    """Wait until the operator has made ``want`` successful bindings; fail when it stalls or exits."""
    last, since = -1.0, time.monotonic()
    while True:
        if op.poll() is not None:
            raise RuntimeError(f"the operator exited:\n{localcluster.tail(log, 30)}")
        bound = scrape_value(metrics_url, "policy_scheduler_binding_duration_seconds_count")
        if bound >= want:
            return bound
        if bound != last:
            last, since = bound, time.monotonic()
        elif time.monotonic() - since > stall:
            raise RuntimeError(f"bindings stalled at {bound:.0f}/{want} for {stall:.0f}s; log {log}")
        await asyncio.sleep(0.5)


async def burst(a: argparse.Namespace, cluster, prom: Prometheus, run_dir: Path, marks: list) -> tuple[float, float]:
    """Everything on the cluster: policy, nodes, the operator, the phases. Returns (start, end) unix times."""
    from policy_scheduler.cluster.credentials import load_credentials
    from policy_scheduler.cluster.kubeclient import KubeClient

    client = KubeClient(load_credentials(cluster.admin_kubeconfig), qps=0, burst=1, timeout=120,
                        user_agent="render-dashboard")
    op = None
    log = run_dir / "policy-scheduler.log"
    try:
        await client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": NAMESPACE}})
        await install_policy(client)
        await create_all(client, "/api/v1/nodes", [node(0)])
        with open(log, "ab") as f:
            op = subprocess.Popen(
                [sys.executable, "-m", "policy_scheduler.cli", "run", "--kubeconfig", str(cluster.admin_kubeconfig),
                 "--metrics-port", str(a.metrics_port), "--metrics-address", "127.0.0.1", "--health-port", "0"],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        progress(f"operator started (pid {op.pid}, metrics on :{a.metrics_port}); waiting for the first scrapes")
        deadline = time.monotonic() + 60
        while not prom.query(f'policy_scheduler_nodes{{job="{JOB}"}} == 1'):
            if op.poll() is not None:
                raise RuntimeError(f"the operator exited:\n{localcluster.tail(log, 30)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Prometheus has no policy_scheduler_nodes == 1 after 60s; log {log}")
            await asyncio.sleep(0.5)
        metrics_url = f"http://127.0.0.1:{a.metrics_port}/metrics"
        pods_path = f"/api/v1/namespaces/{NAMESPACE}/pods"

        # warm-up, before the plotted window, so that the series the phases move exist already (a
        # counter's series appears per label set, e.g. queue and event, and rate() cannot see the
        # jump of its first sample): pods that never fit and gated ones, which stay; then pods that
        # fit only on a node added right after their failure (NodeAdd into backoff, BackoffComplete)
        # or after their backoff (NodeAdd into active); then the warm-up's pods and third node are
        # deleted, which leaves 2 empty nodes
        progress(f"warm-up: {a.unschedulable} pods that never fit, {a.gated} gated; 3 pods bound on nodes added "
                 f"for them, then deleted")
        await create_all(client, pods_path, [pod(f"huge-{i}", cpu="64") for i in range(a.unschedulable)]
                         + [pod(f"gated-{i}", gated=True) for i in range(a.gated)] + [pod("warmup-0")])
        await wait_bound(metrics_url, 1, op, log)
        for i, backoff_over in ((1, False), (2, True)):  # 3950m: more than any existing node has free
            failed = scrape_value(metrics_url, "scheduler_schedule_attempts_total", result="unschedulable")
            await client.post(pods_path, pod(f"warmup-{i}", cpu="3950m"))
            deadline = time.monotonic() + 30
            while scrape_value(metrics_url, "scheduler_schedule_attempts_total", result="unschedulable") <= failed:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"warm-up: warmup-{i} was not found unschedulable in 30s; log {log}")
                await asyncio.sleep(0.1)
            if backoff_over:
                await asyncio.sleep(2.5)  # a first failure backs off 1 s
            await client.post("/api/v1/nodes", node(i))
            await wait_bound(metrics_url, 1 + i, op, log)
        for i in range(3):
            await client.request("DELETE", f"{pods_path}/warmup-{i}", body={"gracePeriodSeconds": 0})
        await client.request("DELETE", f"/api/v1/nodes/{node(2)['metadata']['name']}")
        await asyncio.sleep(3 + seconds(a.rate_window))  # the warm-up leaves every rate window
        start = time.time()
        await asyncio.sleep(a.idle)

        marks.append((time.time(), f"{a.early_pods} pods, 2 nodes"))
        progress(f"phase 1: {a.early_pods} pods on 2 nodes")
        await create_all(client, pods_path, [pod(f"early-{i:04d}") for i in range(a.early_pods)])
        await asyncio.sleep(a.phase)

        marks.append((time.time(), f"+{a.nodes} nodes"))
        progress(f"phase 2: {a.nodes} more nodes")
        await create_all(client, "/api/v1/nodes", [node(i) for i in range(3, 3 + a.nodes)])  # 2: the warm-up's
        await wait_bound(metrics_url, 2 + a.early_pods, op, log)
        await asyncio.sleep(a.phase)

        marks.append((time.time(), f"{a.pods:,} pods"))
        progress(f"phase 3: {a.pods} pods at once")
        t = time.monotonic()
        await create_all(client, pods_path, [pod(f"burst-{i:05d}") for i in range(a.pods)])
        created = time.monotonic() - t
        await wait_bound(metrics_url, 2 + a.early_pods + a.pods, op, log)
        progress(f"  {a.pods} pods created in {created:.1f}s, all bound {time.monotonic() - t:.1f}s after the "
                 f"first; tail {a.tail:.0f}s")
        await asyncio.sleep(a.tail)
        end = time.time()
        await asyncio.sleep(2)  # the last scrapes
        return start, end
    finally:
        stop_proc(op)
        await client.close()


# ------------------------------------------------------------------------------------ rendering
def legend(fmt: str, labels: dict) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip() or "value"


def render(dash: dict, prom: Prometheus, start: float, end: float, marks: list, out: Path, a: argparse.Namespace,
           title_note: str) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    variables = {"job": JOB, "profile": ".*", "__rate_interval": a.rate_window,
                 "__range": f"{int(end - start)}s", "__interval": "1s"}
    by_title = {p.get("title"): p for p in panels(dash)}
    written = []
    out.mkdir(parents=True, exist_ok=True)
    for title, slug in RENDERED.items():
        panel = by_title.get(title)
        if panel is None:
            raise RuntimeError(f"panel {title!r} is not in {DASHBOARD}")
        unit = panel["fieldConfig"]["defaults"].get("unit", "short")
        scale, ylabel = {"s": (1000.0, "ms"), "ops": (1.0, "per second")}.get(unit, (1.0, "pods"))
        lines = []
        for t in panel["targets"]:
            expr = substitute(t["expr"], variables)
            for s in prom.query_range(expr, start - 2, end, 1):
                xs = [float(x) - start for x, _ in s["values"]]
                ys = [float(v) * scale if v not in ("NaN", "+Inf", "-Inf") else float("nan") for _, v in s["values"]]
                if any(y == y and y != 0 for y in ys):  # something to show (not all NaN or zero)
                    lines.append((legend(t.get("legendFormat", ""), s["metric"]), xs, ys))
        total = len(lines)
        lines.sort(key=lambda ln: -max((y for y in ln[2] if y == y), default=0))
        lines = lines[:MAX_SERIES]
        many = total > 4
        fig, ax = plt.subplots(figsize=(9.5 if many else 8, 3.4), dpi=100)
        for name, xs, ys in sorted(lines, key=lambda ln: ln[0]):
            ax.plot(xs, ys, label=name, linewidth=1.3)
        for t, label in marks:
            ax.axvline(t - start, color="0.55", linestyle="--", linewidth=0.8)
            ax.annotate(label, (t - start, 1.0), xycoords=("data", "axes fraction"), xytext=(2, 2),
                        textcoords="offset points", fontsize=7.5, color="0.35", va="bottom")
        shown = f" (top {len(lines)} of {total} by peak)" if total > len(lines) else ""
        ax.set_title(f"{title}{shown}", fontsize=10.5, loc="left", pad=16)
        ax.set_xlabel(f"seconds since start   ·   {title_note}", fontsize=8.5)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_xlim(0, end - start)
        if not (unit == "s" and many):
            ax.set_ylim(bottom=0)
        if unit == "s" and many:  # latencies of many plugins or points span decades
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.grid(True, color="0.9", linewidth=0.6)
        ax.tick_params(labelsize=8)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        if lines:
            if many:
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
            else:
                ax.legend(fontsize=8, loc="best", framealpha=0.85, edgecolor="none")
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="0.5")
        fig.tight_layout()
        path = out / f"dashboard-{slug}.png"
        fig.savefig(path, dpi=100, pil_kwargs={"optimize": True})
        plt.close(fig)
        progress(f"  {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {total} series, "
                 f"{path.stat().st_size // 1024} KB")
        written.append(path)
    return written


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only check the dashboard JSON (no cluster)")
    ap.add_argument("--dashboard", type=Path, default=DASHBOARD)
    ap.add_argument("--nodes", type=int, default=100, help="nodes added in phase 2 (2 exist before)")
    ap.add_argument("--pods", type=int, default=2000, help="pods of the burst (phase 3)")
    ap.add_argument("--early-pods", type=int, default=200, help="pods created while only 2 nodes exist (80 fit)")
    ap.add_argument("--unschedulable", type=int, default=5, help="pods asking for 64 cpu: never fit")
    ap.add_argument("--gated", type=int, default=3, help="pods with a scheduling gate that stays")
    ap.add_argument("--idle", type=float, default=10, help="seconds before the first phase")
    ap.add_argument("--phase", type=float, default=15, help="seconds after phases 1 and 2")
    ap.add_argument("--tail", type=float, default=20, help="seconds after the last binding")
    ap.add_argument("--rate-window", default="10s", help="replaces $__rate_interval")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    a = ap.parse_args(argv)
    try:
        seconds(a.rate_window)
    except ValueError as e:
        ap.error(str(e))

    dash = load_dashboard(a.dashboard)
    problems = check_dashboard(dash)
    n_exprs = sum(len(p.get("targets", [])) for p in panels(dash))
    if problems:
        print("dashboard check failed:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    progress(f"{a.dashboard.name}: {len(panels(dash))} panels, {n_exprs} expressions, every metric name known"
             + ("" if registry_series() is not None else " (package not importable: registry not checked)"))
    if a.check:
        return 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is missing: .venv/bin/pip install -e '.[docs]' (or .venv/bin/pip install matplotlib)",
              file=sys.stderr)
        return 2

    def on_term(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    t0 = time.monotonic()
    run_dir = ROOT / ".local" / f"render-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True)
    cluster = localcluster.LocalCluster(run_dir / "cluster", kubeconfig_path=run_dir / "kubeconfig")
    prom = None
    try:
        progress(f"local control plane in {run_dir.relative_to(ROOT)}")
        cluster.up(quiet=True)
        a.metrics_port = localcluster.free_port()
        prom = Prometheus(f"127.0.0.1:{a.metrics_port}", run_dir / "prometheus.log")
        progress(f"Prometheus on {prom.url}, scraping the operator every 1s")
        marks: list = []
        start, end = asyncio.run(burst(a, cluster, prom, run_dir, marks))
        note = (f"{2 + a.nodes} nodes, {a.early_pods + a.pods:,} pods + {a.unschedulable} unschedulable "
                f"+ {a.gated} gated, policy default, rate window {a.rate_window}")
        progress(f"rendering {len(RENDERED)} panels from {end - start:.0f}s of data")
        render(dash, prom, start, end, marks, a.out, a, note)
        progress(f"done in {time.monotonic() - t0:.0f}s; logs in {run_dir.relative_to(ROOT)}")
        return 0
    except KeyboardInterrupt:
        progress("interrupted; cleaning up")
        return 130
    finally:
        if prom is not None:
            prom.stop()
        cluster.down(quiet=True)
        shutil.rmtree(cluster.state_dir / "etcd", ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
