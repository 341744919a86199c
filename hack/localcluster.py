#!/usr/bin/env python3
"""A real local Kubernetes control plane: etcd + kube-apiserver (+ kwok, kube-controller-manager,
kube-scheduler on request), built from pinned upstream modules by hack/build.sh.

    python3 hack/localcluster.py up [--kwok] [--controller-manager] [--kube-scheduler] [--gangs]
                                    [--node-address ADDR] [--state-dir DIR]
    python3 hack/localcluster.py down [--state-dir DIR]
    python3 hack/localcluster.py status [--state-dir DIR]

Everything listens on free loopback ports. RBAC is on; the admin identity is a client
certificate (group system:masters) signed by a CA made here, which also signs the apiserver's
serving certificate. The kubeconfig is written to ``<state-dir>/../kubeconfig`` (by default
``.local/kubeconfig``). Standard library only, so it runs before any virtualenv exists; tests and
benchmarks import it.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HACK = Path(__file__).resolve().parent
ROOT = HACK.parent
DEFAULT_STATE = ROOT / ".local" / "cluster"
READY_TIMEOUT = float(os.environ.get("POLICY_SCHEDULER_READY_TIMEOUT", "90"))

# Admission plugins that need controllers we do not run: ServiceAccount wants the default SA that
# only kube-controller-manager creates; TaintNodesByCondition stamps not-ready taints that only the
# node lifecycle controller removes.
DISABLED_ADMISSION = "ServiceAccount,TaintNodesByCondition"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# Kubernetes' own gangs (scheduling.k8s.io PodGroups, pods' spec.schedulingGroup) and their
# topology constraint: the feature gates and the API version they need, for kube-apiserver and
# kube-scheduler (``up(feature_gates=..., runtime_config=...)``, ``--gangs`` on the command line)
# (v1.37.1: PodGroup is served in scheduling.k8s.io/v1beta1, which kube-scheduler reads, and in
# v1alpha3 with CompositePodGroup; kube-scheduler's default profile then has GangScheduling,
# TopologyPlacementGenerator and PodGroupPodsCount: no profile needed)
# (PodGroupPreemptionPolicy: PodGroups' spec.preemptionPolicy; CompositePodGroup: v1alpha3
# CompositePodGroups and PodGroups' spec.parentCompositePodGroupName, two-level gangs)
GANG_FEATURE_GATES = ("GenericWorkload=true,TopologyAwareWorkloadScheduling=true,"
                      "PodGroupPreemptionPolicy=true,CompositePodGroup=true")
GANG_API_VERSION = "v1beta1"
GANG_RUNTIME_CONFIG = f"scheduling.k8s.io/{GANG_API_VERSION}=true,scheduling.k8s.io/v1alpha3=true"


class ClusterError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[localcluster] {msg}", file=sys.stderr, flush=True)


def bin_dir(build: bool = True) -> Path:
    """The directory of the pinned binaries, building them first if ``build`` and any is missing."""
    args = ["bash", str(HACK / "build.sh")]
    if not build:
        args.append("--bindir")
    res = subprocess.run(args, stdout=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise ClusterError("hack/build.sh failed to build the control plane (see its output above)")
    return Path(res.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def tail(path: Path, n: int = 20) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return False


def wait_started(proc: subprocess.Popen, check, timeout: float, fail, interval: float = 0.2) -> None:
    """Until ``check()`` is true: raise ``fail(why)`` when ``proc`` exits first or ``timeout``
    passes (``fail`` makes the error, with the component's log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise fail(f"exited with code {proc.returncode} during start-up")
        if check():
            return
        time.sleep(interval)
    raise fail(f"was not ready after {timeout:.0f}s")


def _openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise ClusterError(f"openssl {' '.join(args[:2])} failed: {res.stderr.strip()}")


def make_pki(d: Path, extra_ips: tuple[str, ...] = ()) -> None:
    """A CA, the apiserver serving cert (SANs 127.0.0.1/localhost/kubernetes*, and ``extra_ips``),
    an admin client cert (O=system:masters) and the service-account signing key. EC P-256 keys:
    fast to make."""
    if shutil.which("openssl") is None:
        raise ClusterError("openssl is not installed (apt-get install openssl)")
    d.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
             "-subj", "/CN=policy-scheduler-local-ca", cwd=d)
    sans = "subjectAltName=IP:127.0.0.1,IP:10.0.0.1," + "".join(f"IP:{ip}," for ip in extra_ips) + \
           "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default," \
           "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    (d / "apiserver.ext").write_text(sans + "\nextendedKeyUsage=serverAuth\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subj, ext in (("apiserver", "/CN=kube-apiserver", "apiserver.ext"),
                            ("admin", "/O=system:masters/CN=admin", "client.ext")):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj, cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "3650", "-extfile", ext, cwd=d)
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=d)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def kubeconfig_text(server: str, ca: bytes, user: dict, name: str = "policy-scheduler-local") -> str:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
    }
    return json.dumps(cfg, indent=2) + "\n"  # JSON is valid YAML


@dataclass
class LocalCluster:
    state_dir: Path = DEFAULT_STATE
    kubeconfig_path: Path | None = None
    bins: Path | None = None
    state: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir).resolve()
        if self.kubeconfig_path is None:
            self.kubeconfig_path = self.state_dir.parent / "kubeconfig"
        self.kubeconfig_path = Path(self.kubeconfig_path)
        self._load()

    # ---------------------------------------------------------------- state
    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    def _load(self) -> None:
        try:
            self.state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            self.state = {}

    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(self.state, indent=2))

    @property
    def server(self) -> str:
        return self.state.get("server", "")

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state_dir / "admin.kubeconfig"

    def running(self) -> bool:
        procs = self.state.get("procs", {})
        return bool(procs) and all(pid_alive(p["pid"]) for p in procs.values())

    def admin_ssl(self) -> ssl.SSLContext:
        """The admin client certificate, without verifying the serving certificate: for
        kube-scheduler's /metrics (its serving certificate is self-signed)."""
        pki = self.state_dir / "pki"
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return ctx

    def ready(self) -> bool:
        if not self.server:
            return False
        try:
            ctx = ssl.create_default_context(cafile=str(self.state_dir / "pki" / "ca.crt"))
            with urllib.request.urlopen(self.server + "/readyz", context=ctx, timeout=3) as r:
                return r.read().strip() == b"ok"
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    # ---------------------------------------------------------------- processes
    def _spawn(self, name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
        logs = self.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        logf = open(logs / f"{name}.log", "ab")
        try:
            p = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, env={**os.environ, **(env or {})})
        except OSError as e:
            raise ClusterError(f"{name}: cannot start {args[0]}: {e}") from None
        finally:
            logf.close()
        self.state.setdefault("procs", {})[name] = {"pid": p.pid, "log": str(logs / f"{name}.log")}
        self._save()
        return p

    def _fail(self, name: str, why: str) -> ClusterError:
        logp = self.state_dir / "logs" / f"{name}.log"
        return ClusterError(f"{name} {why}. Last lines of {logp}:\n{tail(logp)}")

    def _wait(self, name: str, proc: subprocess.Popen, check, timeout: float) -> None:
        wait_started(proc, check, timeout, lambda why: self._fail(name, why))

    def _take_port(self, preferred: int | None = None) -> int:
        if preferred:
            if port_in_use(preferred):
                raise ClusterError(f"port {preferred} on 127.0.0.1 is already in use")
            return preferred
        return free_port()

    # ---------------------------------------------------------------- up / down
    @property
    def feature_gates(self) -> str:
        """The --feature-gates the control plane was started with ("" for none)."""
        return self.state.get("feature_gates", "")

    def up(self, kwok: bool = False, controller_manager: bool = False, apiserver_port: int | None = None,
           quiet: bool = False, feature_gates: str = "", runtime_config: str = "",
           audit_policy: str = "", node_address: str = "") -> "LocalCluster":
        """Start etcd and kube-apiserver (and kwok, kube-controller-manager). ``feature_gates``
        (``A=true,B=true``) go to kube-apiserver and to every component started later
        (kube-controller-manager, kube-scheduler); ``runtime_config`` (``group/version=true``)
        to kube-apiserver's --runtime-config. See GANG_FEATURE_GATES and GANG_RUNTIME_CONFIG.
        ``audit_policy``: an audit.k8s.io Policy (YAML) that kube-apiserver logs by, as JSON
        lines, to ``audit_log`` (off by default). ``node_address``: for real nodes (hack/realnode.py):
        kube-apiserver also listens on that address (it binds every address) and advertises it as
        the ``kubernetes`` Service's endpoint (reconciled, so pods' in-cluster configuration works
        through kube-proxy), and calls webhook Services at their endpoints (aggregator routing),
        since the control plane itself runs no kube-proxy."""
        if self.state.get("procs"):
            if self.running() and self.ready():
                raise ClusterAlreadyUp(self)
            log("found a stale local cluster (some processes are gone); cleaning it up first")
            self.down(quiet=True)
        t0 = time.monotonic()
        self.bins = self.bins or bin_dir(build=True)
        for b in ("etcd", "kube-apiserver"):
            if not (self.bins / b).exists():
                raise ClusterError(f"binary {self.bins / b} is missing; run hack/build.sh")
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        self.state_dir.mkdir(parents=True)
        self.state = {"procs": {}, "started": time.time(), "feature_gates": feature_gates,
                      "runtime_config": runtime_config, "audit": bool(audit_policy),
                      "node_address": node_address}
        if audit_policy:
            (self.state_dir / "audit-policy.yaml").write_text(audit_policy)
        try:
            self._start_control_plane(apiserver_port)
            if controller_manager:
                self.start_controller_manager()
            if kwok:
                self.start_kwok()
        except BaseException:
            self.down(quiet=True)
            raise
        if not quiet:
            log(f"cluster up in {time.monotonic() - t0:.1f}s: {self.server}  (kubeconfig {self.kubeconfig_path})")
        return self

    @property
    def audit_log(self) -> Path:
        """kube-apiserver's audit log (JSON lines), when started with an ``audit_policy``."""
        return self.state_dir / "audit.log"

    def _audit_flags(self) -> list[str]:
        if not self.state.get("audit"):
            return []
        return [f"--audit-policy-file={self.state_dir / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxbackup=0"]

    def _start_control_plane(self, apiserver_port: int | None) -> None:
        pki = self.state_dir / "pki"
        node_address = self.state.get("node_address", "")
        make_pki(pki, (node_address,) if node_address else ())
        etcd_port, peer_port = self._take_port(), self._take_port()
        api_port = self._take_port(apiserver_port)
        self.state.update(etcd_port=etcd_port, apiserver_port=api_port, server=f"https://127.0.0.1:{api_port}")
        self._save()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd = self._spawn("etcd", [
            str(self.bins / "etcd"), "--name=local", f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=local={peer_url}", "--unsafe-no-fsync=true", "--log-level=warn",
            "--quota-backend-bytes=8589934592",
        ])

        def etcd_ok() -> bool:
            try:
                with urllib.request.urlopen(etcd_url + "/health", timeout=2) as r:
                    return b'"health":"true"' in r.read()
            except OSError:
                return False

        self._wait("etcd", etcd, etcd_ok, 30)
        api = self._spawn("kube-apiserver", [
            str(self.bins / "kube-apiserver"),
            f"--etcd-servers={etcd_url}", *self._address_flags(),
            f"--secure-port={api_port}", f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true", "--authorization-mode=Node,RBAC",
            f"--disable-admission-plugins={self._disabled_admission()}",
            # a test cluster on loopback: let the clients, not the server, be the limit
            "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
            "--enable-priority-and-fairness=false", "--profiling=false", "--v=1",
            *self._gate_flags(),
            *([f"--runtime-config={self.state['runtime_config']}"] if self.state.get("runtime_config") else []),
            *self._audit_flags(),
        ])
        ca = (pki / "ca.crt").read_bytes()
        user = {"client-certificate-data": base64.b64encode((pki / "admin.crt").read_bytes()).decode(),
                "client-key-data": base64.b64encode((pki / "admin.key").read_bytes()).decode()}
        text = kubeconfig_text(self.server, ca, user)
        self.admin_kubeconfig.write_text(text)
        self.kubeconfig_path.parent.mkdir(parents=True, exist_ok=True)
        self.kubeconfig_path.write_text(text)
        self._wait("kube-apiserver", api, self.ready, READY_TIMEOUT)

    def _disabled_admission(self) -> str:
        # with real nodes, pods need their service account token volume: ServiceAccount stays on
        # (start the controller manager, which makes each namespace's default ServiceAccount)
        if self.state.get("node_address"):
            return ",".join(p for p in DISABLED_ADMISSION.split(",") if p != "ServiceAccount")
        return DISABLED_ADMISSION

    def _address_flags(self) -> list[str]:
        node_address = self.state.get("node_address", "")
        if not node_address:
            return ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]
        pki = self.state_dir / "pki"
        return ["--bind-address=0.0.0.0", f"--advertise-address={node_address}",
                "--endpoint-reconciler-type=lease", "--enable-aggregator-routing=true",
                # logs and exec: the kubelet at its InternalIP, as the admin (no name service here)
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={pki / 'admin.crt'}", f"--kubelet-client-key={pki / 'admin.key'}"]

    def _gate_flags(self) -> list[str]:
        return [f"--feature-gates={self.feature_gates}"] if self.feature_gates else []

    def start_controller_manager(self, controllers: str = "*,-node-ipam-controller,-node-lifecycle-controller",
                                 extra: list[str] | None = None) -> None:
        """kube-controller-manager with ``controllers`` (its --controllers; the default is every
        on-by-default controller but the two that need real nodes) and ``extra`` flags (e.g.
        ``--kube-api-qps``: its default of 20 requests/s cannot create thousands of DRA claims
        in time). The volume tests run only persistentvolume-binder-controller, the PV controller."""
        pki = self.state_dir / "pki"
        kc = str(self.admin_kubeconfig)
        p = self._spawn("kube-controller-manager", [
            str(self.bins / "kube-controller-manager"), f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=false",
            # nodes here are simulated or plain objects: no IPAM, no lifecycle taints for missing kubelets
            f"--controllers={controllers}",
            "--v=1", *self._gate_flags(), *(extra or []),
        ])
        time.sleep(2.0)
        if p.poll() is not None:
            raise self._fail("kube-controller-manager", f"exited with code {p.returncode}")

    def start_kwok(self) -> None:
        stages = self.bins / "kwok-stages.yaml"
        p = self._spawn("kwok", [
            str(self.bins / "kwok"), f"--kubeconfig={self.admin_kubeconfig}",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            "--cidr=10.0.0.0/16", "--node-ip=10.0.0.1", "--node-lease-duration-seconds=40",
            f"--config={stages}",
        ], env={"HOME": str(self.state_dir)})
        time.sleep(1.0)
        if p.poll() is not None:
            raise self._fail("kwok", f"exited with code {p.returncode}")

    def start_scheduler(self, qps: float = 5000, burst: int = 10000, extra: list[str] | None = None,
                        config_extra: str = "") -> str:
        """Start upstream kube-scheduler (default profile, with the cluster's feature gates)
        against this cluster; returns its name. ``config_extra``: more top-level YAML of its
        KubeSchedulerConfiguration (e.g. ``profiles:``, see GANG_SCHEDULER_PROFILE)."""
        cfg = self.state_dir / "kube-scheduler.yaml"
        cfg.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            f"clientConnection:\n  kubeconfig: {self.admin_kubeconfig}\n  qps: {qps}\n  burst: {burst}\n"
            "leaderElection:\n  leaderElect: false\n" + config_extra)
        kc = str(self.admin_kubeconfig)
        p = self._spawn("kube-scheduler", [
            str(self.bins / "kube-scheduler"), f"--config={cfg}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            "--v=1", *self._gate_flags(), *(extra or []),
        ])
        time.sleep(0.5)
        if p.poll() is not None:
            raise self._fail("kube-scheduler", f"exited with code {p.returncode}")
        return "kube-scheduler"

    def stop(self, name: str, timeout: float = 10.0) -> None:
        """Stop one component (its whole process group) and forget it."""
        info = self.state.get("procs", {}).pop(name, None)
        if info is None:
            return
        pid = info["pid"]
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and pid_alive(pid):
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                time.sleep(0.1)
            if not pid_alive(pid):
                break
        self._save()

    def down(self, quiet: bool = False) -> bool:
        """Stop everything this cluster started. Returns False when nothing was running."""
        procs = self.state.get("procs", {})
        if not procs:
            if not quiet:
                log(f"no local cluster is running (state dir {self.state_dir})")
            return False
        # clients first, the store last
        order = [n for n in procs if n not in ("kube-apiserver", "etcd")] + ["kube-apiserver", "etcd"]
        for name in order:
            self.stop(name)
        ports = [self.state.get(k) for k in ("apiserver_port", "etcd_port") if self.state.get(k)]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(port_in_use(p) for p in ports):
            time.sleep(0.1)
        self.state = {}
        try:
            self.state_file.unlink()
        except OSError:
            pass
        if not quiet:
            log("cluster stopped")
        return True


class ClusterAlreadyUp(ClusterError):
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        super().__init__(f"a local cluster is already up at {cluster.server} "
                         f"(kubeconfig {cluster.kubeconfig_path}); run 'make cluster-down' first to restart it")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run a real local Kubernetes control plane (etcd + kube-apiserver, "
                                             "optionally kwok and kube-controller-manager) on loopback.")
    ap.add_argument("command", choices=["up", "down", "status", "build"])
    ap.add_argument("--state-dir", default=str(DEFAULT_STATE), help="where pki, data, logs and state live")
    ap.add_argument("--kubeconfig", default=None, help="where to write the admin kubeconfig "
                                                      "(default: <state-dir>/../kubeconfig)")
    ap.add_argument("--kwok", action="store_true", help="also run kwok to simulate nodes annotated "
                                                        f"{KWOK_NODE_ANNOTATION}=fake and their pods")
    ap.add_argument("--controller-manager", action="store_true", help="also run kube-controller-manager")
    ap.add_argument("--kube-scheduler", action="store_true", help="also run kube-scheduler (default profile), "
                    "for pods of the default scheduler such as the operator's own (hack/realnode.py)")
    ap.add_argument("--node-address", default="", help="for real nodes (hack/realnode.py): kube-apiserver "
                    "listens on every address and advertises this one, the host's end of the node's veth")
    ap.add_argument("--port", type=int, default=None, help="kube-apiserver port (default: a free one)")
    ap.add_argument("--feature-gates", default="", help="feature gates for every component (A=true,B=false)")
    ap.add_argument("--runtime-config", default="", help="kube-apiserver --runtime-config (group/version=true)")
    ap.add_argument("--gangs", action="store_true", help="Kubernetes' own gangs: --feature-gates "
                    f"{GANG_FEATURE_GATES} and --runtime-config {GANG_RUNTIME_CONFIG} (added to the two above)")
    a = ap.parse_args(argv)
    if a.command == "build":
        print(bin_dir(build=True))
        return 0
    c = LocalCluster(Path(a.state_dir), Path(a.kubeconfig) if a.kubeconfig else None)
    try:
        if a.command == "up":
            gates = ",".join(x for x in (a.feature_gates, GANG_FEATURE_GATES if a.gangs else "") if x)
            runtime = ",".join(x for x in (a.runtime_config, GANG_RUNTIME_CONFIG if a.gangs else "") if x)
            c.up(kwok=a.kwok, controller_manager=a.controller_manager, apiserver_port=a.port,
                 feature_gates=gates, runtime_config=runtime, node_address=a.node_address)
            if a.kube_scheduler:
                c.start_scheduler()
        elif a.command == "down":
            c.down()
        else:
            if c.running() and c.ready():
                print(f"up: {c.server} kubeconfig={c.kubeconfig_path} components={','.join(c.state['procs'])}")
            else:
                print("down")
                return 1
    except ClusterAlreadyUp as e:
        log(str(e))
        return 0
    except ClusterError as e:
        log(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
