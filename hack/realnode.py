#!/usr/bin/env python3
"""One real Kubernetes node beside the simulated ones: containerd + runc, kubelet and kube-proxy
v1.37.1 (built by hack/build.sh from the pinned module), pod networking by the CNI bridge plugin.

    python3 hack/realnode.py up --kubeconfig KUBECONFIG [--images A.tar,B.tar] [--state-dir DIR]
    python3 hack/realnode.py down [--state-dir DIR]
    python3 hack/realnode.py status [--state-dir DIR]
    python3 hack/realnode.py leftovers [--state-dir DIR]    (what `down` would have to remove)

The control plane must be reachable from the node's network: start it with
``LocalCluster.up(node_address=HOST_ADDRESS)`` (hack/localcluster.py; ``make node-up`` does both).

Network (all of it on this machine):

    host network namespace                 network namespace ``psnode`` (made here)
    kube-apiserver :PORT (every address)   containerd, kubelet, kube-proxy (iptables mode)
    psnode0 10.250.0.1/24  <---- veth ---> eth0 10.250.0.2/24 (the node's InternalIP)
    route 10.251.0.0/24 via 10.250.0.2     bridge cni0 10.251.0.1/24, pods 10.251.0.2-254

Pods reach the API server through the ``kubernetes`` Service (kube-proxy's DNAT to the advertised
10.250.0.1); kube-apiserver reaches webhook pods at their endpoints through the route above; the
kubelet probes pods on the bridge. Nothing is routed anywhere else: the node's namespace has no
other interface and no NAT to the outside.

cgroup v1 here (kubelet: ``failCgroupV1: false``, ``cgroupDriver: cgroupfs``); containerd 1.6
(Debian's) answers the kubelet's RuntimeConfig with Unimplemented and the kubelet falls back to
its own cgroup driver. Nothing can be pulled: the pause image and every image pods use are
imported into containerd's ``k8s.io`` namespace (``--images``, archives from hack/image/).

``down`` stops every process it started (by PID, with containerd's shims and the containers under
them), unmounts what is mounted under the state directory and the pods' network namespaces, deletes
the namespaces, veths and cgroups, and removes the state directory; ``leftovers`` lists what is
still there (the e2e test checks it is nothing). Root only. Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HACK = Path(__file__).resolve().parent
sys.path.insert(0, str(HACK))
from localcluster import ClusterError, bin_dir, pid_alive, tail, wait_started  # noqa: E402

DEFAULT_STATE = Path(os.environ.get("POLICY_SCHEDULER_NODE_DIR", "/tmp/policy-scheduler-node"))
NODE_NAME = "real-node-0"
NETNS = "psnode"
HOST_VETH = "psnode0"
HOST_ADDRESS = "10.250.0.1"
NODE_ADDRESS = "10.250.0.2"
PREFIX = 24
POD_CIDR = "10.251.0.0/24"
PAUSE_IMAGE = "docker.io/library/policy-scheduler-pause:1"
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
CGROUP_ROOT = Path("/sys/fs/cgroup")
READY_TIMEOUT = 120.0


def log(msg: str) -> None:
    print(f"[realnode] {msg}", file=sys.stderr, flush=True)


def run(*args: str, check: bool = True, netns: bool = False) -> subprocess.CompletedProcess:
    cmd = (["nsenter", f"--net=/run/netns/{NETNS}"] if netns else []) + list(args)
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and res.returncode != 0:
        raise ClusterError(f"{' '.join(cmd)}: exit {res.returncode}: {res.stderr.strip() or res.stdout.strip()}")
    return res


def netns_list() -> list[str]:
    try:
        return sorted(os.listdir("/run/netns"))
    except OSError:
        return []


def mounts_under(prefixes: list[str]) -> list[str]:
    """Mount points (deepest first) under any of ``prefixes``, from /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if any(mp == p or mp.startswith(p.rstrip("/") + "/") for p in prefixes):
                out.append(mp)
    return sorted(set(out), key=lambda m: (-m.count("/"), m))


def processes_mentioning(needle: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd:
            pids.append(int(d))
    return pids


def descendants(roots: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], list(roots)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def kill_all(pids: list[int], grace: float = 5.0) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return
        for p in alive:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(pid_alive(p) for p in alive):
            for p in alive:
                try:
                    os.waitpid(p, os.WNOHANG)
                except ChildProcessError:
                    pass
            time.sleep(0.1)


class RealNode:
    def __init__(self, state_dir: Path = DEFAULT_STATE) -> None:
        self.dir = Path(state_dir).resolve()
        self.state_file = self.dir / "state.json"
        try:
            self.state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            self.state = {}
        # the network namespaces that were there before the node: the pods' (cni-*) are the others;
        # kept after down, for leftovers()
        self.netns_before = set(self.state.get("netns_before", netns_list()))

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(self.state, indent=2))

    @property
    def sock(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    # ------------------------------------------------------------------ processes
    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "ab") as logf:
            p = subprocess.Popen(["nsenter", f"--net=/run/netns/{NETNS}", *args], stdout=logf,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.state.setdefault("procs", {})[name] = p.pid
        self._save()
        return p

    def _fail(self, name: str, why: str) -> ClusterError:
        logp = self.dir / "logs" / f"{name}.log"
        return ClusterError(f"{name} {why}. Last lines of {logp}:\n{tail(logp, 30)}")

    def _wait(self, name: str, proc: subprocess.Popen, check, timeout: float) -> None:
        wait_started(proc, check, timeout, lambda why: self._fail(name, why), interval=0.3)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run("ctr", f"--address={self.sock}", "--namespace=k8s.io", *args, check=check)

    # ------------------------------------------------------------------ up
    def preflight(self) -> Path:
        if os.geteuid() != 0:
            raise ClusterError("a real node needs root (network namespaces, mounts, cgroups)")
        for cmd, pkg in (("containerd", "containerd"), ("runc", "runc"), ("ip", "iproute2"),
                         ("iptables", "iptables"), ("nsenter", "util-linux"), ("conntrack", "conntrack")):
            if shutil.which(cmd) is None:
                subprocess.run(["bash", str(HACK / "ensure-deb.sh"), cmd, pkg], check=True)
        if not any(Path(d, "bridge").exists() for d in CNI_BIN_DIRS):
            subprocess.run(["bash", str(HACK / "ensure-deb.sh"), "/usr/lib/cni/bridge",
                            "containernetworking-plugins"], check=False)
            if not any(Path(d, "bridge").exists() for d in CNI_BIN_DIRS):
                raise ClusterError("the CNI plugins are missing (apt-get install containernetworking-plugins)")
        if not (CGROUP_ROOT / "memory").is_dir() and not (CGROUP_ROOT / "cgroup.controllers").exists():
            raise ClusterError(f"no cgroup hierarchy under {CGROUP_ROOT}")
        bins = bin_dir(build=True)
        for b in ("kubelet", "kube-proxy"):
            if not (bins / b).exists():
                raise ClusterError(f"{bins / b} is missing; run hack/build.sh")
        return bins

    def up(self, kubeconfig: Path, images: list[Path] = (), node_name: str = NODE_NAME) -> "RealNode":
        if self.state.get("procs"):
            log("found a real node's state; taking it down first")
            self.down(quiet=True)
        bins = self.preflight()
        t0 = time.monotonic()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        self.netns_before = set(netns_list())
        self.state = {"procs": {}, "node": node_name, "netns_before": sorted(self.netns_before),
                      "kubeconfig": str(kubeconfig)}
        self._save()
        kubeconfig = self._node_kubeconfig(kubeconfig)
        try:
            self._network()
            self._containerd(images)
            self._kubelet(bins, kubeconfig, node_name)
            self._kube_proxy(bins, kubeconfig, node_name)
        except BaseException:
            self.down(quiet=True)
            raise
        log(f"node {node_name} up in {time.monotonic() - t0:.1f}s (state {self.dir})")
        return self

    def _node_kubeconfig(self, kubeconfig: Path) -> Path:
        """The same credentials, with the API server at the host's address on the veth: loopback
        inside the node's namespace is the node's own."""
        cfg = json.loads(kubeconfig.read_text())  # hack/localcluster.py writes JSON
        for c in cfg.get("clusters", []):
            server = c["cluster"]["server"]
            port = server.rsplit(":", 1)[1]
            c["cluster"]["server"] = f"https://{HOST_ADDRESS}:{port}"
        out = self.dir / "node.kubeconfig"
        out.write_text(json.dumps(cfg, indent=2))
        # the cluster's CA also authenticates the API server's client certificate to the kubelet
        ca = cfg["clusters"][0]["cluster"].get("certificate-authority-data", "")
        (self.dir / "ca.crt").write_bytes(base64.b64decode(ca))
        out.chmod(0o600)
        return out

    def _network(self) -> None:
        if NETNS in netns_list():
            run("ip", "netns", "del", NETNS, check=False)
        run("ip", "link", "del", HOST_VETH, check=False)
        run("ip", "netns", "add", NETNS)
        self.state["netns"] = NETNS
        self._save()
        run("ip", "link", "add", HOST_VETH, "type", "veth", "peer", "name", f"{HOST_VETH}n")
        run("ip", "link", "set", f"{HOST_VETH}n", "netns", NETNS)
        run("ip", "addr", "add", f"{HOST_ADDRESS}/{PREFIX}", "dev", HOST_VETH)
        run("ip", "link", "set", HOST_VETH, "up")
        for args in (("ip", "link", "set", "lo", "up"),
                     ("ip", "link", "set", f"{HOST_VETH}n", "name", "eth0"),
                     ("ip", "addr", "add", f"{NODE_ADDRESS}/{PREFIX}", "dev", "eth0"),
                     ("ip", "link", "set", "eth0", "up"),
                     ("ip", "route", "add", "default", "via", HOST_ADDRESS),
                     ("sysctl", "-qw", "net.ipv4.ip_forward=1")):
            run(*args, netns=True)
        run("ip", "route", "add", POD_CIDR, "via", NODE_ADDRESS)
        cni = self.dir / "cni" / "net.d"
        cni.mkdir(parents=True)
        (cni / "10-policy-scheduler-node.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "policy-scheduler-node",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(self.dir / "cni" / "ipam"),
                          "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}, indent=2))

    def _containerd(self, images: list[Path]) -> None:
        d = self.dir / "containerd"
        d.mkdir(parents=True, exist_ok=True)
        cni_bin = next(x for x in CNI_BIN_DIRS if Path(x, "bridge").exists())
        cfg = d / "config.toml"
        cfg.write_text(f"""version = 2
root = "{d / 'root'}"
state = "{d / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{self.dir / 'cni' / 'net.d'}"
""")
        p = self._spawn("containerd", ["containerd", f"--config={cfg}"])
        self._wait("containerd", p, lambda: self.sock.exists() and self.ctr("version", check=False).returncode == 0, 30)
        for img in images:
            res = self.ctr("images", "import", str(img), check=False)
            if res.returncode != 0:
                raise ClusterError(f"ctr images import {img}: {res.stderr.strip()}")
        names = self.ctr("images", "ls", "-q").stdout.split()
        if PAUSE_IMAGE not in names:
            raise ClusterError(f"the pause image {PAUSE_IMAGE} is not among the imported images ({names}); "
                               "pass its archive with --images (hack/image/)")

    def _kubelet(self, bins: Path, kubeconfig: Path, node_name: str) -> None:
        k = self.dir / "kubelet"
        (k / "pki").mkdir(parents=True)
        cfg = k / "config.yaml"
        # JSON is YAML; the kubelet reads either
        cfg.write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.dir / "ca.crt")}},
            "authorization": {"mode": "Webhook"},
            "address": NODE_ADDRESS, "port": 10250, "readOnlyPort": 0, "healthzPort": 0,
            "podLogsDir": str(self.dir / "pod-logs"),
            "volumePluginDir": str(k / "volume-plugins"),
            "resolvConf": "", "clusterDomain": "cluster.local",
            # nothing can be pulled: keep every imported image, and no eviction for a full disk
            # of a shared test machine
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "serializeImagePulls": False, "maxPods": 50,
            "nodeStatusUpdateFrequency": "5s", "syncFrequency": "10s",
            "fileCheckFrequency": "20s", "staticPodPath": "",
            "shutdownGracePeriod": "0s",
            "protectKernelDefaults": False, "makeIPTablesUtilChains": False,
        }, indent=2))
        p = self._spawn("kubelet", [
            str(bins / "kubelet"), f"--config={cfg}", f"--kubeconfig={kubeconfig}",
            f"--root-dir={k / 'root'}", f"--cert-dir={k / 'pki'}", f"--hostname-override={node_name}",
            f"--node-ip={NODE_ADDRESS}", "--v=1",
        ])
        self._wait("kubelet", p, lambda: self.node_ready(kubeconfig, node_name), READY_TIMEOUT)

    def _kube_proxy(self, bins: Path, kubeconfig: Path, node_name: str) -> None:
        cfg = self.dir / "kube-proxy.yaml"
        cfg.write_text(json.dumps({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)}, "hostnameOverride": node_name,
            "mode": "iptables", "clusterCIDR": POD_CIDR, "bindAddress": NODE_ADDRESS,
            "healthzBindAddress": f"{NODE_ADDRESS}:10256", "metricsBindAddress": f"{NODE_ADDRESS}:10249",
            "iptables": {"localhostNodePorts": False, "syncPeriod": "30s", "minSyncPeriod": "0s"},
            # leave the kernel's conntrack settings (shared with the host) as they are
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }, indent=2))
        p = self._spawn("kube-proxy", [str(bins / "kube-proxy"), f"--config={cfg}", "--v=1"])

        def synced() -> bool:
            res = run("iptables", "-t", "nat", "-S", "KUBE-SERVICES", check=False, netns=True)
            return res.returncode == 0 and "default/kubernetes:https" in res.stdout

        self._wait("kube-proxy", p, synced, 60)

    def node_ready(self, kubeconfig: Path, node_name: str) -> bool:
        kubectl = bin_dir(build=False) / "kubectl"
        res = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", "get", "node", node_name, "-o",
                              "jsonpath={.status.conditions[?(@.type=='Ready')].status}"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return res.returncode == 0 and res.stdout.strip() == "True"

    # ------------------------------------------------------------------ down
    def _shims(self) -> list[int]:
        return processes_mentioning(str(self.sock))

    def down(self, quiet: bool = False) -> bool:
        if not self.state and not self.dir.exists():
            if not quiet:
                log(f"no real node here (state dir {self.dir})")
            return False
        procs = self.state.get("procs", {})
        # the node agents first (nothing restarts a container after them), then the containers with
        # their shims (they left containerd's process group on purpose), then containerd
        for name in ("kube-proxy", "kubelet"):
            if name in procs:
                kill_all(descendants([procs[name]]), grace=10.0)
        kill_all(descendants(self._shims()), grace=5.0)
        if "containerd" in procs:
            kill_all(descendants([procs["containerd"]]), grace=10.0)
        kill_all(descendants(self._shims()), grace=1.0)
        pod_netns = [n for n in netns_list() if n.startswith("cni-") and n not in self.netns_before]
        for mp in mounts_under([str(self.dir)] + [f"/run/netns/{n}" for n in pod_netns]):
            subprocess.run(["umount", "-l", mp], stderr=subprocess.DEVNULL)
        for n in pod_netns + ([NETNS] if NETNS in netns_list() else []):
            run("ip", "netns", "del", n, check=False)
        run("ip", "link", "del", HOST_VETH, check=False)
        self._remove_cgroups()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.state = {}
        if not quiet:
            log("node stopped and cleaned up")
        return True

    @staticmethod
    def _cgroup_dirs() -> list[Path]:
        """The cgroups the kubelet makes (kubepods under every v1 controller, or under v2's root)."""
        out = []
        for top in [CGROUP_ROOT, *(p for p in CGROUP_ROOT.iterdir() if p.is_dir())]:
            d = top / "kubepods"
            if d.is_dir():
                out.extend(sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)))
                out.append(d)
        return out

    def _remove_cgroups(self) -> None:
        for _ in range(3):
            for d in self._cgroup_dirs():
                try:
                    d.rmdir()
                except OSError:
                    pass
            if not self._cgroup_dirs():
                return
            time.sleep(0.5)

    def leftovers(self) -> list[str]:
        """What this node left behind: processes, mounts, namespaces, interfaces, cgroups."""
        out = []
        procs = self.state.get("procs", {})
        out += [f"process {n} ({p})" for n, p in procs.items() if pid_alive(p)]
        out += [f"process {p} (uses {self.sock})" for p in self._shims()]
        out += [f"process {p} ({Path(f'/proc/{p}/cmdline').read_bytes()[:80]!r})"
                for p in processes_mentioning(str(self.dir)) if p not in procs.values()]
        out += [f"mount {m}" for m in mounts_under([str(self.dir)])]
        out += [f"network namespace {n}" for n in netns_list()
                if n == NETNS or (n.startswith("cni-") and n not in self.netns_before)]
        if run("ip", "link", "show", HOST_VETH, check=False).returncode == 0:
            out.append(f"interface {HOST_VETH}")
        out += [f"cgroup {d}" for d in self._cgroup_dirs()]
        if self.dir.exists():
            out.append(f"directory {self.dir}")
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("command", choices=["up", "down", "status", "leftovers"])
    ap.add_argument("--state-dir", default=str(DEFAULT_STATE), help="containerd's and the kubelet's state, logs "
                    "(short: unix socket paths must stay under 108 bytes)")
    ap.add_argument("--kubeconfig", help="the control plane's admin kubeconfig (up)")
    ap.add_argument("--images", default="", help="comma-separated image archives to import into containerd "
                    "(the pause image among them)")
    ap.add_argument("--node-name", default=NODE_NAME)
    a = ap.parse_args(argv)
    node = RealNode(Path(a.state_dir))
    try:
        if a.command == "up":
            if not a.kubeconfig:
                ap.error("up needs --kubeconfig")
            node.up(Path(a.kubeconfig).resolve(), [Path(x) for x in a.images.split(",") if x], a.node_name)
        elif a.command == "down":
            node.down()
            left = node.leftovers()
            if left:
                log("left behind: " + "; ".join(left))
                return 1
        elif a.command == "leftovers":
            left = node.leftovers()
            print("\n".join(left) if left else "nothing")
            return 1 if left else 0
        else:
            procs = node.state.get("procs", {})
            if procs and all(pid_alive(p) for p in procs.values()):
                print(f"up: node {node.state.get('node')} components={','.join(procs)}")
            else:
                print("down")
                return 1
    except ClusterError as e:
        log(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
