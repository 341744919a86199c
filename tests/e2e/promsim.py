"""A real Prometheus server on loopback, scraping a small exporter with values the test sets.

The server is the Debian package's binary (hack/ensure-prometheus.sh installs it when missing).
The exporter serves, for each simulated node, node_exporter-style series (an idle cpu-seconds
counter that grows at the rate the test sets, memory gauges) and optionally a DCGM-style GPU
utilisation gauge, labelled with the node's name (``instance`` for node_exporter series,
``Hostname`` for DCGM ones; the scrape keeps them with honor_labels).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from helpers import wait_for

GI = 1024 ** 3
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SimExporter:
    """Per node: cpu usage share (the idle counter grows at 1 - usage seconds per second), memory
    usage share of ``memory_bytes``, and GPU utilisation in percent (None: no GPU series)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, dict] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True)
        self._thread.start()

    def set(self, node: str, cpu: float | None = None, memory: float | None = None, gpu: float | None = None,
            memory_bytes: int = 8 * GI) -> None:
        now = time.time()
        with self._lock:
            # counters start high, as on a node up for a while (a counter near zero makes
            # Prometheus's rate() extrapolation stop at its zero point)
            n = self._nodes.setdefault(node, {"cpu": 0.0, "idle": 1e6, "busy": 1e5, "t": now, "memory": 0.0,
                                              "total": memory_bytes, "gpu": None})
            self._advance(n, now)
            if cpu is not None:
                n["cpu"] = cpu
            if memory is not None:
                n["memory"] = memory
            if gpu is not None:
                n["gpu"] = gpu

    @staticmethod
    def _advance(n: dict, now: float) -> None:
        dt = now - n["t"]
        n["idle"] += (1.0 - n["cpu"]) * dt
        n["busy"] += n["cpu"] * dt
        n["t"] = now

    def render(self) -> str:
        now = time.time()
        lines = ["# TYPE node_cpu_seconds_total counter"]
        with self._lock:
            for name, n in sorted(self._nodes.items()):
                self._advance(n, now)
                lines.append(f'node_cpu_seconds_total{{cpu="0",instance="{name}",mode="idle"}} {n["idle"]:.6f}')
                lines.append(f'node_cpu_seconds_total{{cpu="0",instance="{name}",mode="user"}} {n["busy"]:.6f}')
            lines.append("# TYPE node_memory_MemTotal_bytes gauge")
            for name, n in sorted(self._nodes.items()):
                lines.append(f'node_memory_MemTotal_bytes{{instance="{name}"}} {n["total"]}')
            lines.append("# TYPE node_memory_MemAvailable_bytes gauge")
            for name, n in sorted(self._nodes.items()):
                lines.append(f'node_memory_MemAvailable_bytes{{instance="{name}"}} '
                             f'{int(n["total"] * (1.0 - n["memory"]))}')
            lines.append("# TYPE DCGM_FI_DEV_GPU_UTIL gauge")
            for name, n in sorted(self._nodes.items()):
                if n["gpu"] is not None:
                    lines.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="{name}",modelName="sim"}} {n["gpu"]}')
        return "\n".join(lines) + "\n"

    def _handler(self):
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        return Handler

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class PrometheusServer:
    """`prometheus` (hack/ensure-prometheus.sh installs it) on a free loopback port, scraping the
    exporter every second, with its data in a temporary directory; stop() and start() again keep
    the port and the data, as a restarted server would."""

    def __init__(self, exporter_port: int) -> None:
        if shutil.which("prometheus") is None:  # make test runs it first; a bare pytest run may not have
            subprocess.run(["bash", str(ROOT / "hack" / "ensure-prometheus.sh")], check=True)
        binary = shutil.which("prometheus")
        assert binary, "prometheus is not on PATH after hack/ensure-prometheus.sh"
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="e2e-prometheus-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (self.dir / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: sim\n    honor_labels: true\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n")
        self.proc: subprocess.Popen | None = None

    def start(self) -> "PrometheusServer":
        log = open(self.dir / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        wait_for(self._ready, 60, 0.2, what="Prometheus ready")
        return self

    def wait_rate_window(self, window: int, refresh: float = 1.0) -> None:
        """Wait until every idle cpu counter has a sample per second of the last ``window``
        seconds, then one operator refresh more. Before, ``rate(x[window])`` sees too few samples
        (the server begins scraping seconds after it is ready): Prometheus extrapolates the
        increase only part of the way to the window's start, so it reads a rate well below the true
        one (a node's idle rate too low, its cpu usage too high)."""
        def whole() -> bool:
            got = self.query(f'count_over_time(node_cpu_seconds_total{{mode="idle"}}[{window}s])')
            return bool(got) and min(float(x["value"][1]) for x in got) >= window
        wait_for(whole, 60, 0.5, what=f"{window}s of samples in Prometheus")
        time.sleep(refresh + 0.5)

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, \
            f"prometheus exited:\n{(self.dir / 'prometheus.log').read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, promql: str) -> list:
        import json
        from urllib.parse import urlencode

        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urlencode({'query': promql})}", timeout=5) as r:
            return json.loads(r.read())["data"]["result"]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
