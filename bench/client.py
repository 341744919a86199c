"""The HTTP client, measured before it is chosen: Bindings and their Scheduled events posted to a
real local kube-apiserver over loopback, through each candidate client, the way the operator
posts them (a pod's Binding, then its event; ``--concurrency`` pods in flight).

    make bench-client [CLIENT_ARGS="--pods 3000 --rounds 3"]
    .local/bench-client-venv/bin/python bench/client.py [--pods N] [--rounds R] [--concurrency C]
                                                        [--variants NAME ...] [--keep]

The candidates (``--variants``; every one by default):

  aiohttp-h1      the operator's client today: cluster/kubeclient.KubeClient on aiohttp, HTTP/1.1
                  over TLS, one request per connection at a time (up to 256 connections)
  httpx-h2x1      httpx with h2 (pure Python HTTP/2), one connection
  httpx-h2x4      the same, four clients (four connections), the pods spread over them
  niquests-h2x1   niquests (urllib3-future, jh2), one multiplexed HTTP/2 connection
  niquests-h2x4   the same, four sessions
  pyreqwest-h2x1  pyreqwest (Rust's reqwest and hyper, HTTP/2 negotiated by ALPN), one client
  pyreqwest-h2x4  the same, four clients

Each candidate runs in a fresh process of its own, in turn, ``--rounds`` times interleaved, each
time on ``--pods`` pods created beforehand in a namespace of their own on one control plane
(etcd + kube-apiserver, started here as hack/localcluster.py does and stopped at the end). A
process first opens its connections (one GET per pod slot in flight, not measured), then posts
every pod's Binding (``pods/binding``, to one of 100 node names) and its events.k8s.io/v1
Scheduled event, and reports:

- binds/s: pods bound and reported per second of the measured window;
- CPU ms per bind: the client process's CPU time (user + system, every thread: a Rust runtime's
  included) per Binding + Event pair, and the API server's over the same window;
- p50 / p99: milliseconds from a pod's Binding sent to its event answered;
- GC: the interpreter's garbage collections (generations 0, 1, 2) in the window;
- connections: sockets the process opened in the window, seen in /proc/self/fd every 100 ms
  (its only sockets are to the API server: each is a TCP connection and a TLS handshake; a client
  that keeps its connections alive opens none in the window; the sampling's own CPU is left out
  of the client's), and its connections to the API server at the end, from /proc/net/tcp;
- streams waited: for the HTTP/2 candidates, the most requests in flight on one connection
  against the server's SETTINGS_MAX_CONCURRENT_STREAMS (kube-apiserver answers 100).

The table gives the median of the rounds per candidate and its ratios to aiohttp-h1; the last
line is one JSON object with every figure. A benchmark, not a test: nothing fails when a figure
gets worse, apart from errors (a Binding or Event not answered 201), which are counted and shown.
The candidates other than aiohttp are not dependencies of the operator; they live in the
benchmark's own virtual environment (requirements/bench-client.txt, hash-checked), which
``make bench-client`` creates.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("aiohttp-h1", "httpx-h2x1", "httpx-h2x4", "niquests-h2x1", "niquests-h2x4", "pyreqwest-h2x1",
            "pyreqwest-h2x4")
NODES = 100
REPORTER = "bench-client"


def pki_paths(pki: Path) -> dict[str, str]:
    return {"ca": str(pki / "ca.crt"), "cert": str(pki / "admin.crt"), "key": str(pki / "admin.key")}


# ------------------------------------------------------------------------------ the candidates
class Candidate:
    """One client: ``post(path, body)`` -> (HTTP status, decoded body); ``lanes`` connections (or
    sessions) the pods are spread over by the caller's slot."""

    lanes = 1

    async def post(self, lane: int, path: str, body: dict) -> tuple[int, Any]:
        raise NotImplementedError

    async def get(self, lane: int, path: str) -> int:
        raise NotImplementedError

    async def close(self) -> None:
        pass

    def max_streams(self) -> int | None:
        """The server's SETTINGS_MAX_CONCURRENT_STREAMS, where the client shows it."""
        return None


def ssl_context(p: dict[str, str]):
    import ssl
    ctx = ssl.create_default_context(cafile=p["ca"])
    ctx.load_cert_chain(p["cert"], p["key"])
    return ctx


class AiohttpToday(Candidate):
    """cluster/kubeclient.KubeClient as the operator builds it (qps high enough never to wait)."""

    def __init__(self, server: str, p: dict[str, str]) -> None:
        from policy_scheduler.cluster.kubeclient import ApiError, KubeClient

        class Creds:
            ssl_context = ssl_context(p)

            async def auth_header_async(self) -> dict[str, str]:
                return {}
        Creds.server = server  # type: ignore[attr-defined]
        self.client = KubeClient(Creds(), qps=1e9, burst=10 ** 9, user_agent=REPORTER)  # type: ignore[arg-type]
        self.api_error = ApiError

    async def post(self, lane: int, path: str, body: dict) -> tuple[int, Any]:
        try:
            return 201, await self.client.request("POST", path, body)
        except self.api_error as e:
            return e.status, e.body

    async def get(self, lane: int, path: str) -> int:
        await self.client.get(path)
        return 200

    async def close(self) -> None:
        await self.client.close()


class Httpx(Candidate):
    def __init__(self, server: str, p: dict[str, str], lanes: int) -> None:
        import httpx
        import orjson
        ctx = ssl_context(p)
        self.lanes = lanes
        self.server, self.dumps, self.loads = server, orjson.dumps, orjson.loads
        self.clients = [httpx.AsyncClient(http2=True, verify=ctx, timeout=30.0,
                                          limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                                          headers={"User-Agent": REPORTER, "Accept": "application/json"})
                        for _ in range(lanes)]

    async def post(self, lane: int, path: str, body: dict) -> tuple[int, Any]:
        r = await self.clients[lane].post(self.server + path, content=self.dumps(body),
                                          headers={"Content-Type": "application/json"})
        return r.status_code, self.loads(r.content)

    async def get(self, lane: int, path: str) -> int:
        r = await self.clients[lane].get(self.server + path)
        if r.http_version != "HTTP/2":
            raise RuntimeError(f"httpx negotiated {r.http_version}, not HTTP/2")
        return r.status_code

    async def close(self) -> None:
        for c in self.clients:
            await c.aclose()

    def max_streams(self) -> int | None:
        try:  # httpcore's internals: the h2 connection's remote settings
            conn = self.clients[0]._transport._pool.connections[0]._connection  # type: ignore[attr-defined]
            return conn._h2_state.remote_settings.max_concurrent_streams
        except (AttributeError, IndexError):
            return None


class Niquests(Candidate):
    def __init__(self, server: str, p: dict[str, str], lanes: int) -> None:
        import niquests
        import orjson
        self.lanes = lanes
        self.server, self.dumps, self.loads = server, orjson.dumps, orjson.loads
        self.tls = {"verify": p["ca"], "cert": (p["cert"], p["key"])}
        self.sessions = []
        for _ in range(lanes):
            s = niquests.AsyncSession(disable_http3=True, pool_connections=1, pool_maxsize=1)
            s.headers.update({"User-Agent": REPORTER, "Accept": "application/json"})
            self.sessions.append(s)

    async def post(self, lane: int, path: str, body: dict) -> tuple[int, Any]:
        r = await self.sessions[lane].post(self.server + path, data=self.dumps(body),
                                           headers={"Content-Type": "application/json"}, timeout=30, **self.tls)
        return r.status_code, self.loads(r.content)

    async def get(self, lane: int, path: str) -> int:
        r = await self.sessions[lane].get(self.server + path, timeout=30, **self.tls)
        if r.http_version != 20:
            raise RuntimeError(f"niquests negotiated HTTP version {r.http_version}, not 2")
        return r.status_code

    async def close(self) -> None:
        for s in self.sessions:
            await s.close()


class Pyreqwest(Candidate):
    def __init__(self, server: str, p: dict[str, str], lanes: int) -> None:
        from pyreqwest.client import ClientBuilder
        import orjson
        self.lanes = lanes
        self.server, self.dumps, self.loads = server, orjson.dumps, orjson.loads
        ident = Path(p["cert"]).read_bytes() + Path(p["key"]).read_bytes()
        ca = Path(p["ca"]).read_bytes()
        self.clients = [ClientBuilder().add_root_certificate_pem(ca).identity_pem(ident).http2(True)
                        .max_connections(1).user_agent(REPORTER)
                        .default_headers({"Accept": "application/json"}).build() for _ in range(lanes)]

    async def post(self, lane: int, path: str, body: dict) -> tuple[int, Any]:
        r = await (self.clients[lane].post(self.server + path).body_bytes(self.dumps(body))
                   .header("Content-Type", "application/json").build().send())
        return r.status, self.loads(bytes(await r.bytes()))

    async def get(self, lane: int, path: str) -> int:
        r = await self.clients[lane].get(self.server + path).build().send()
        await r.bytes()
        if r.version != "HTTP/2.0":
            raise RuntimeError(f"pyreqwest negotiated {r.version}, not HTTP/2")
        return r.status

    async def close(self) -> None:
        for c in self.clients:
            await c.close()


def candidate(name: str, server: str, p: dict[str, str]) -> Candidate:
    lanes = 4 if name.endswith("x4") else 1
    if name == "aiohttp-h1":
        return AiohttpToday(server, p)
    if name.startswith("httpx-"):
        return Httpx(server, p, lanes)
    if name.startswith("niquests-"):
        return Niquests(server, p, lanes)
    if name.startswith("pyreqwest-"):
        return Pyreqwest(server, p, lanes)
    raise SystemExit(f"unknown candidate {name!r}; one of {', '.join(VARIANTS)}")


# ------------------------------------------------------------------------------ the measurement
def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def socket_inodes() -> set[str]:
    """The inodes of this process's sockets (/proc/self/fd: cheap, a few dozen entries)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def server_connections(port: int) -> set[str]:
    """The inodes of this process's TCP connections to 127.0.0.1:``port`` (reads /proc/net/tcp,
    which lists every socket of the machine: at the window's ends only)."""
    mine = socket_inodes()
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[9] in mine and int(cols[2].rsplit(":", 1)[1], 16) == port:
                        found.add(cols[9])
        except OSError:
            continue
    return found


def event_body(ns: str, name: str, node: str) -> dict:
    now = time.time()
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": ns},
            "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z",
            "reportingController": REPORTER, "reportingInstance": REPORTER, "action": "Binding",
            "reason": "Scheduled", "type": "Normal", "note": f"Successfully assigned {ns}/{name} to {node}",
            "regarding": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns}}


async def measure(a: argparse.Namespace) -> dict:
    p = pki_paths(Path(a.pki))
    port = int(a.server.rsplit(":", 1)[1])
    c = candidate(a.variant, a.server, p)
    # open the connections: one GET per slot in flight, on each slot's lane
    await asyncio.gather(*(c.get(i % c.lanes, f"/api/v1/namespaces/{a.namespace}/pods?limit=1")
                           for i in range(a.concurrency)))
    before = socket_inodes()
    seen = set(before)
    sampling = [0.0]  # CPU seconds the sampling took: left out of the client's figure
    lat: list[float] = []
    counts = {"errors": 0}
    first_error: list[str] = []
    in_flight = [0] * c.lanes
    most = [0] * c.lanes
    nxt = itertools.count()
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            t = time.thread_time()
            seen.update(socket_inodes())
            sampling[0] += time.thread_time() - t
            try:
                await asyncio.wait_for(done.wait(), 0.1)
            except asyncio.TimeoutError:
                pass

    def check(status: int, body: Any, what: str) -> None:
        if status != 201:
            counts["errors"] += 1
            if not first_error:
                first_error.append(f"{what}: HTTP {status}: {str(body)[:200]}")

    async def slot(k: int) -> None:
        lane = k % c.lanes
        while (i := next(nxt)) < a.pods:
            name, node = f"p-{i}", f"node-{i % NODES}"
            t = time.perf_counter()
            in_flight[lane] += 1
            most[lane] = max(most[lane], in_flight[lane])
            try:
                s, b = await c.post(lane, f"/api/v1/namespaces/{a.namespace}/pods/{name}/binding", {
                    "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": a.namespace},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
                check(s, b, f"binding {name}")
                s, b = await c.post(lane, f"/apis/events.k8s.io/v1/namespaces/{a.namespace}/events",
                                    event_body(a.namespace, name, node))
                check(s, b, f"event {name}")
            except Exception as e:  # noqa: BLE001 -- counted and shown: a benchmark reports, it does not stop
                counts["errors"] += 1
                if not first_error:
                    first_error.append(f"{name}: {type(e).__name__}: {e}"[:300])
            finally:
                in_flight[lane] -= 1
            lat.append(time.perf_counter() - t)

    gc0 = [g["collections"] for g in gc.get_stats()]
    srv0, cpu0, t0 = proc_cpu_s(a.server_pid), cpu_s(), time.perf_counter()
    sampler = asyncio.create_task(sample())
    await asyncio.gather(*(slot(k) for k in range(a.concurrency)))
    wall, cpu, srv = time.perf_counter() - t0, cpu_s() - cpu0, proc_cpu_s(a.server_pid) - srv0
    gc1 = [g["collections"] for g in gc.get_stats()]
    done.set()
    await sampler
    cpu -= sampling[0]
    at_end = server_connections(port)
    max_streams = c.max_streams()
    await c.close()
    lat.sort()
    n = len(lat)
    return {"variant": a.variant, "pods": n, "wall_s": round(wall, 3), "binds_per_s": round(n / wall, 1),
            "cpu_ms_per_bind": round(cpu * 1e3 / n, 3), "server_cpu_ms_per_bind": round(srv * 1e3 / n, 3),
            "p50_ms": round(lat[n // 2] * 1e3, 1), "p99_ms": round(lat[min(n - 1, int(n * 0.99))] * 1e3, 1),
            "gc": [b - a_ for a_, b in zip(gc0, gc1)], "connections_opened": len(seen - before),
            "sampling_cpu_ms": round(sampling[0] * 1e3, 1),
            "connections_open": len(at_end), "most_in_flight_per_connection": max(most) if c.lanes else None,
            "server_max_streams": max_streams, "errors": counts["errors"], "first_error": first_error[0]
            if first_error else None}


# ------------------------------------------------------------------------------ the driver
def median_of(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


async def create_pods(server: str, p: dict[str, str], ns: str, n: int) -> None:
    import aiohttp
    ctx = ssl_context(p)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, ssl=ctx)) as s:
        async with s.post(f"{server}/api/v1/namespaces", json={"metadata": {"name": ns}}) as r:
            if r.status != 201:
                raise SystemExit(f"namespace {ns}: HTTP {r.status}: {await r.text()}")
        nxt = itertools.count()

        async def worker() -> None:
            while (i := next(nxt)) < n:
                body = {"metadata": {"name": f"p-{i}", "namespace": ns},
                        "spec": {"schedulerName": REPORTER, "containers": [{"name": "c", "image": "busybox"}]}}
                async with s.post(f"{server}/api/v1/namespaces/{ns}/pods", json=body) as r:
                    if r.status != 201:
                        raise SystemExit(f"pod {ns}/p-{i}: HTTP {r.status}: {await r.text()}")
        await asyncio.gather(*(worker() for _ in range(64)))


def print_table(rows: dict[str, list[dict]]) -> dict[str, dict]:
    base = rows.get("aiohttp-h1")
    summary: dict[str, dict] = {}
    head = (f"{'client':<16}{'binds/s':>9}{'CPU ms/bind':>13}{'server ms':>11}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'GC 0/1/2':>14}{'conns new/open':>16}{'streams':>10}{'errors':>8}  vs aiohttp-h1 (binds/s, CPU)")
    print(head)
    print("-" * len(head))
    for name, rs in rows.items():
        m = {k: median_of(rs, k) for k in ("binds_per_s", "cpu_ms_per_bind", "server_cpu_ms_per_bind", "p50_ms",
                                          "p99_ms", "connections_opened", "connections_open")}
        m["gc"] = [statistics.median(r["gc"][g] for r in rs) for g in range(3)]
        m["errors"] = sum(r["errors"] for r in rs)
        m["most_in_flight_per_connection"] = max(r["most_in_flight_per_connection"] or 0 for r in rs)
        m["server_max_streams"] = next((r["server_max_streams"] for r in rs if r["server_max_streams"]), None)
        m["rounds"] = len(rs)
        if base:
            m["binds_vs_aiohttp"] = round(m["binds_per_s"] / median_of(base, "binds_per_s"), 2)
            m["cpu_vs_aiohttp"] = round(m["cpu_ms_per_bind"] / median_of(base, "cpu_ms_per_bind"), 2)
        summary[name] = m
        streams = "" if name == "aiohttp-h1" else (f"{m['most_in_flight_per_connection']}/"
                                                   f"{m['server_max_streams'] or '?'}")
        vs = f"{m.get('binds_vs_aiohttp', '-')}x, {m.get('cpu_vs_aiohttp', '-')}x" if base else ""
        print(f"{name:<16}{m['binds_per_s']:>9.0f}{m['cpu_ms_per_bind']:>13.3f}{m['server_cpu_ms_per_bind']:>11.3f}"
              f"{m['p50_ms']:>9.1f}{m['p99_ms']:>9.1f}{'/'.join(f'{g:g}' for g in m['gc']):>14}"
              f"{int(m['connections_opened']):>8}/{int(m['connections_open']):<7}{streams:>10}{m['errors']:>8}  {vs}")
        for r in rs:
            if r["first_error"]:
                print(f"  {name}: first error: {r['first_error']}")
                break
    return summary


def drive(a: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT / "hack"))
    import localcluster  # noqa: E402 -- hack/ is not a package
    run_dir = Path(a.dir or ROOT / ".local" / time.strftime("bench-client-%Y%m%d-%H%M%S"))
    cluster = localcluster.LocalCluster(run_dir / "cluster", kubeconfig_path=run_dir / "kubeconfig")
    print(f"[bench-client] control plane in {run_dir}", flush=True)
    cluster.up(quiet=True)
    rows: dict[str, list[dict]] = {v: [] for v in a.variants}
    try:
        p = pki_paths(cluster.state_dir / "pki")
        server_pid = cluster.state["procs"]["kube-apiserver"]["pid"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "operator"),
                                                                         os.environ.get("PYTHONPATH")]))}
        for rnd in range(a.rounds):
            order = a.variants if rnd % 2 == 0 else list(reversed(a.variants))  # neither always first
            for v in order:
                ns = f"cb-{rnd}-{v}"
                asyncio.run(create_pods(cluster.server, p, ns, a.pods))
                time.sleep(1.0)  # let the API server's and etcd's work on the creations settle
                out = subprocess.run([sys.executable, __file__, "worker", "--variant", v, "--server", cluster.server,
                                      "--pki", str(cluster.state_dir / "pki"), "--namespace", ns, "--pods",
                                      str(a.pods), "--concurrency", str(a.concurrency), "--server-pid",
                                      str(server_pid)], env=env, capture_output=True, text=True, timeout=600)
                if out.returncode != 0:
                    print(f"[bench-client] round {rnd + 1}, {v}: failed:\n{out.stderr[-2000:]}", flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows[v].append(r)
                print(f"[bench-client] round {rnd + 1}, {v}: {r['binds_per_s']} binds/s, "
                      f"{r['cpu_ms_per_bind']} CPU ms/bind, p99 {r['p99_ms']} ms, "
                      f"{r['connections_opened']} connections opened, {r['errors']} errors", flush=True)
    finally:
        cluster.down(quiet=True)
        if not a.keep:
            shutil.rmtree(cluster.state_dir / "etcd", ignore_errors=True)
    rows = {v: rs for v, rs in rows.items() if rs}
    print(f"\n{a.pods} pods per run, {a.concurrency} in flight, median of {a.rounds} rounds; "
          f"load average at the end {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    summary = print_table(rows)
    print(json.dumps({"pods": a.pods, "concurrency": a.concurrency, "rounds": a.rounds, "summary": summary,
                      "runs": rows}))
    return 0 if rows else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        w = argparse.ArgumentParser(prog="client.py worker")
        w.add_argument("--variant", required=True)
        w.add_argument("--server", required=True)
        w.add_argument("--pki", required=True)
        w.add_argument("--namespace", required=True)
        w.add_argument("--pods", type=int, required=True)
        w.add_argument("--concurrency", type=int, required=True)
        w.add_argument("--server-pid", type=int, required=True)
        print(json.dumps(asyncio.run(measure(w.parse_args(argv[1:])))), flush=True)
        return 0
    ap = argparse.ArgumentParser(prog="bench/client.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=3000, help="pods bound per candidate and round (default 3000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, candidates interleaved (default 3)")
    ap.add_argument("--concurrency", type=int, default=64,
                    help="pods in flight, as the operator's --bind-concurrency (default 64)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS, metavar="NAME",
                    help=f"candidates to run (default: all: {', '.join(VARIANTS)})")
    ap.add_argument("--dir", help="where the control plane's state goes (default .local/bench-client-<time>)")
    ap.add_argument("--keep", action="store_true", help="keep etcd's data at the end")
    return drive(ap.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
