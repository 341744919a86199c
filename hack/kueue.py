#!/usr/bin/env python3
"""Kueue's real controller manager next to a local control plane (hack/localcluster.py), out of
cluster, as /work/shared/docs/kueue.md §2 describes it ("Recipe A": URL webhooks, own certs).

    python hack/kueue.py up   [--cluster-state-dir DIR]   # DIR: localcluster's --state-dir
    python hack/kueue.py down [--cluster-state-dir DIR]
    python hack/kueue.py status [--cluster-state-dir DIR]

``up`` against a running cluster:
  1. builds or finds the manager and its CRDs (hack/ensure-kueue.sh, KUEUE_VERSION in versions.env);
  2. creates the namespace kueue-system (server-side apply);
  3. server-side applies the 11 CRDs of config/components/crd/bases (no conversion webhook: every
     client must use kueue.x-k8s.io/v1beta2, the storage version) and waits for Established;
  4. makes a CA and a serving certificate for IP:127.0.0.1 (openssl, like localcluster.make_pki)
     in <state-dir>/kueue/certs;
  5. makes sure /etc/kueue/metrics/certs/tls.{crt,key} exist: Kueue v0.17 hard-codes that path and
     exits at start without it when internal cert management is off, even with metrics disabled.
     Existing files are left alone; missing ones are a copy of the serving pair (needs root or a
     writable /etc/kueue);
  6. writes the Configuration (<state-dir>/kueue/kueue.yaml; doc §2.3: internal certs, leader
     election, metrics and VisibilityOnDemand off, webhook and health on free 127.0.0.1 ports);
  7. starts ``nice -n 19 kueue --config=... --kubeconfig=<admin kubeconfig>`` as the cluster's
     component "kueue" (log: <state-dir>/logs/kueue.log; ``localcluster.py down`` stops it too)
     and waits for its /readyz;
  8. registers kueue-mutating-webhook-configuration and kueue-validating-webhook-configuration,
     from the module's config/components/webhook/manifests.yaml with every service reference
     rewritten to ``url: https://127.0.0.1:<port><path>`` plus our CA, and upstream's
     namespaceSelector patch on the pod/deployment/statefulset webhooks (kueue-system and
     kube-system excluded);
  9. waits until the webhooks answer: a dry-run create of a ResourceFlavor goes through
     vresourceflavor.kb.io.

No RBAC objects are created: the manager uses the admin kubeconfig (group system:masters).
``down`` deletes the two webhook configurations first (every Kueue webhook is failurePolicy: Fail:
with the manager gone, pod creation in every namespace but kube-system/kueue-system would fail),
then stops the manager. CRDs and Kueue objects stay.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import localcluster  # noqa: E402
from localcluster import ClusterError, LocalCluster, free_port, pid_alive, tail  # noqa: E402

HACK = Path(__file__).resolve().parent
FIELD_MANAGER = "policy-scheduler-kueue"
NAMESPACE = "kueue-system"
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")  # hard-coded in Kueue's cmd/kueue/main.go
WEBHOOK_NAMES = ("kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration")
# upstream's config/components/webhook/kustomization.yaml patch
NS_SELECTED = ("mpod.kb.io", "mdeployment.kb.io", "mstatefulset.kb.io",
               "vpod.kb.io", "vdeployment.kb.io", "vstatefulset.kb.io")
NS_SELECTOR = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                     "values": ["kube-system", NAMESPACE]}]}
START_TIMEOUT = float(os.environ.get("POLICY_SCHEDULER_KUEUE_TIMEOUT", "120"))
COMPONENT = "kueue"


def log(msg: str) -> None:
    print(f"[kueue] {msg}", file=sys.stderr, flush=True)


def kueue_version() -> str:
    for line in (HACK / "versions.env").read_text().splitlines():
        if line.startswith("KUEUE_VERSION="):
            return line.split("=", 1)[1].strip()
    raise ClusterError("KUEUE_VERSION is not set in hack/versions.env")


def kueue_dir(build: bool = True) -> Path:
    """The directory with the kueue binary, crds/ and webhook-manifests.yaml (building if needed)."""
    args = ["bash", str(HACK / "ensure-kueue.sh")] + ([] if build else ["--dir"])
    res = subprocess.run(args, stdout=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise ClusterError("hack/ensure-kueue.sh failed (see its output above)")
    return Path(res.stdout.strip().splitlines()[-1])


def _openssl(*args: str, cwd: Path) -> None:
    localcluster._openssl(*args, cwd=cwd)


def make_serving_pki(d: Path) -> None:
    """A CA (ca.crt) and a serving pair tls.crt/tls.key for IP:127.0.0.1 and localhost."""
    d.mkdir(parents=True, exist_ok=True)
    if all((d / f).exists() for f in ("ca.crt", "tls.crt", "tls.key")):
        return
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
             "-subj", "/CN=policy-scheduler-kueue-ca", cwd=d)
    (d / "serving.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "tls.crt", "-days", "3650", "-extfile", "serving.ext", cwd=d)


def ensure_metrics_certs(source: Path) -> str:
    """Kueue v0.17 reads /etc/kueue/metrics/certs/tls.{crt,key} at start when internal cert
    management is off (its metrics cert watcher; the path is not configurable). Returns what was done."""
    crt, key = METRICS_CERT_DIR / "tls.crt", METRICS_CERT_DIR / "tls.key"
    if crt.is_file() and key.is_file():
        return f"{METRICS_CERT_DIR}/tls.{{crt,key}} exist; left as they are"
    try:
        METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
        crt.write_bytes((source / "tls.crt").read_bytes())
        key.write_bytes((source / "tls.key").read_bytes())
        key.chmod(0o600)
    except OSError as e:
        raise ClusterError(
            f"Kueue needs {crt} and {key} (hard-coded path, read at start when internal certs are off) "
            f"and they cannot be written: {e}. Create them as root (any certificate pair will do).") from None
    return f"wrote {METRICS_CERT_DIR}/tls.{{crt,key}} (a copy of {source}/tls.{{crt,key}})"


def webhook_configurations(manifests: Path, port: int, ca: bytes) -> list[dict]:
    """The module's webhook configurations, service references rewritten to 127.0.0.1 URLs."""
    out = []
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": "kueue-" + doc["metadata"]["name"]}
        for wh in doc["webhooks"]:
            svc = wh["clientConfig"].pop("service")
            wh["clientConfig"] = {"url": f"https://127.0.0.1:{port}{svc['path']}",
                                  "caBundle": base64.b64encode(ca).decode()}
            if wh["name"] in NS_SELECTED:
                wh["namespaceSelector"] = copy.deepcopy(NS_SELECTOR)
        out.append(doc)
    return out


def configuration(webhook_port: int, health_port: int, cert_dir: Path, dispatcher: str | None = None,
                  feature_gates: dict | None = None) -> str:
    """The manager's Configuration; ``dispatcher``: MultiKueue's dispatcherName (an External one
    when it is not Kueue's own); ``feature_gates`` are added to the defaults."""
    cfg = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["batch/job"]},
        "clientConnection": {"qps": 100, "burst": 200},
        "featureGates": {"VisibilityOnDemand": False, **(feature_gates or {})},
    }
    if dispatcher:
        cfg["multiKueue"] = {"dispatcherName": dispatcher}
    return yaml.safe_dump(cfg, sort_keys=False)


class Kueue:
    """Kueue's manager for one LocalCluster. State lives in <cluster state dir>/kueue/."""

    def __init__(self, cluster: LocalCluster, bins: Path | None = None, dispatcher: str | None = None,
                 feature_gates: dict | None = None) -> None:
        self.cluster = cluster
        self.dispatcher, self.feature_gates = dispatcher, feature_gates
        self.dir = cluster.state_dir / "kueue"
        self.bins = bins
        self.state_path = self.dir / "state.json"
        try:
            self.state = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            self.state = {}
        pki = cluster.state_dir / "pki"
        self._ssl = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self._ssl.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    # ------------------------------------------------------------------ API
    def api(self, method: str, path: str, body=None, content_type: str = "application/json",
            ok404: bool = False, timeout: float = 30):
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.cluster.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            if ok404 and e.code == 404:
                return None
            raise ClusterError(f"{method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')[:2000]}") from None
        return json.loads(raw) if raw else None

    def apply(self, path: str, obj: dict) -> dict:
        """Server-side apply (JSON is YAML) of ``obj`` at ``path`` (the object's own URL)."""
        return self.api("PATCH", f"{path}?fieldManager={FIELD_MANAGER}&force=true", obj,
                        content_type="application/apply-patch+yaml")

    # ------------------------------------------------------------------ state
    @property
    def webhook_port(self) -> int:
        return self.state.get("webhook_port", 0)

    @property
    def health_port(self) -> int:
        return self.state.get("health_port", 0)

    @property
    def log_path(self) -> Path:
        return self.cluster.state_dir / "logs" / f"{COMPONENT}.log"

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_path.write_text(json.dumps(self.state, indent=2))

    def pid(self) -> int | None:
        info = self.cluster.state.get("procs", {}).get(COMPONENT)
        return info["pid"] if info else None

    def running(self) -> bool:
        pid = self.pid()
        return pid is not None and pid_alive(pid)

    def ready(self) -> bool:
        if not self.health_port:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                return r.read().strip() == b"ok"
        except OSError:
            return False

    # ------------------------------------------------------------------ steps
    def install_crds(self, timeout: float = 60) -> list[str]:
        names = []
        served: dict[str, set[str]] = {}  # group/version -> plurals the manager will look up
        for f in sorted((self.bins / "crds").glob("*.yaml")):
            crd = yaml.load(f.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            name = crd["metadata"]["name"]
            self.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", crd)
            names.append(name)
            for v in crd["spec"]["versions"]:
                if v.get("served"):
                    served.setdefault(f"{crd['spec']['group']}/{v['name']}", set()).add(crd["spec"]["names"]["plural"])
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending:
            for name in sorted(pending):
                crd = self.api("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
                if conds.get("Established") == "True":
                    pending.discard(name)
            if pending:
                if time.monotonic() > deadline:
                    raise ClusterError(f"CRDs not Established after {timeout:.0f}s: {sorted(pending)}")
                time.sleep(0.3)
        # Established is not yet discoverable: the manager's REST mapper reads discovery at start
        # and exits on a kind it does not find there ("no matches for kind Workload")
        while True:
            missing = []
            for gv, plurals in sorted(served.items()):
                got = self.api("GET", f"/apis/{gv}", ok404=True) or {}
                have = {r.get("name") for r in got.get("resources") or []}
                missing += [f"{gv}/{p}" for p in sorted(plurals - have)]
            if not missing:
                return names
            if time.monotonic() > deadline:
                raise ClusterError(f"CRDs Established but not in discovery after {timeout:.0f}s: {missing[:5]}")
            time.sleep(0.3)

    def register_webhooks(self) -> None:
        ca = (self.dir / "certs" / "ca.crt").read_bytes()
        for cfg in webhook_configurations(self.bins / "webhook-manifests.yaml", self.webhook_port, ca):
            cfg = {"apiVersion": "admissionregistration.k8s.io/v1", **cfg}
            plural = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
                      "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}[cfg["kind"]]
            self.apply(f"/apis/admissionregistration.k8s.io/v1/{plural}/{cfg['metadata']['name']}", cfg)

    def remove_webhooks(self) -> None:
        for plural, name in zip(("mutatingwebhookconfigurations", "validatingwebhookconfigurations"),
                                WEBHOOK_NAMES):
            self.api("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}", ok404=True)

    def webhooks_answer(self) -> bool:
        """A dry-run create that only succeeds through Kueue's ResourceFlavor webhooks."""
        rf = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": "policy-scheduler-webhook-probe"}, "spec": {}}
        try:
            self.api("POST", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors?dryRun=All", rf, timeout=10)
            return True
        except ClusterError as e:
            if "already exists" in str(e):
                return True
            self._last_probe_error = str(e)
            return False

    # ------------------------------------------------------------------ up / down
    def up(self, timeout: float = START_TIMEOUT) -> "Kueue":
        if not self.cluster.server or not self.cluster.ready():
            raise ClusterError(f"no local cluster is ready (state dir {self.cluster.state_dir})")
        if self.running() and self.ready():
            log(f"already running (pid {self.pid()}, webhooks on 127.0.0.1:{self.webhook_port})")
            return self
        if self.pid() is not None:  # a dead manager left in the cluster's state
            self.cluster.stop(COMPONENT)
        t0 = time.monotonic()
        self.bins = self.bins or kueue_dir(build=True)
        self.apply(f"/api/v1/namespaces/{NAMESPACE}",
                   {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        names = self.install_crds()
        log(f"{len(names)} CRDs applied (server-side) and Established")
        certs = self.dir / "certs"
        make_serving_pki(certs)
        log(ensure_metrics_certs(certs))
        self.state = {"version": kueue_version(), "webhook_port": free_port(), "health_port": free_port()}
        self._save()
        cfg = self.dir / "kueue.yaml"
        cfg.write_text(configuration(self.webhook_port, self.health_port, certs, self.dispatcher, self.feature_gates))
        argv = ["nice", "-n", "19", str(self.bins / "kueue"), f"--config={cfg}",
                f"--kubeconfig={self.cluster.admin_kubeconfig}", "--zap-log-level=info"]
        proc = self.cluster._spawn(COMPONENT, argv)
        deadline = time.monotonic() + timeout
        restarts = 0
        while not self.ready():
            if proc.poll() is not None:
                # a CRD the API server has just made discoverable can still be missing from the
                # discovery the manager read at its start: once more, as its Deployment would
                if restarts < 2 and "no matches for kind" in tail(self.log_path):
                    restarts += 1
                    log(f"kueue exited at start-up on a kind not yet discoverable; starting it again ({restarts})")
                    self.cluster.stop(COMPONENT)
                    time.sleep(1.0)
                    proc = self.cluster._spawn(COMPONENT, argv)
                    continue
                raise ClusterError(f"kueue exited with code {proc.returncode} during start-up. "
                                   f"Last lines of {self.log_path}:\n{tail(self.log_path)}")
            if time.monotonic() > deadline:
                raise ClusterError(f"kueue was not ready after {timeout:.0f}s. "
                                   f"Last lines of {self.log_path}:\n{tail(self.log_path)}")
            time.sleep(0.3)
        log(f"manager ready (pid {proc.pid}, /readyz on 127.0.0.1:{self.health_port})")
        self.register_webhooks()
        self._last_probe_error = ""
        while not self.webhooks_answer():
            if time.monotonic() > deadline:
                raise ClusterError(f"Kueue's webhooks do not answer: {self._last_probe_error}")
            time.sleep(0.5)
        log(f"webhooks registered and answering on https://127.0.0.1:{self.webhook_port} "
            f"(Kueue {self.state['version']}, up in {time.monotonic() - t0:.1f}s, log {self.log_path})")
        return self

    def down(self) -> bool:
        """Remove the webhook configurations, then stop the manager."""
        was = self.pid() is not None
        if self.cluster.server and self.cluster.ready():
            self.remove_webhooks()
        self.cluster.stop(COMPONENT)
        try:
            self.state_path.unlink()
        except OSError:
            pass
        self.state = {}
        return was


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run Kueue's controller manager against a local control plane "
                                             "(hack/localcluster.py).")
    ap.add_argument("command", choices=["up", "down", "status", "build"])
    ap.add_argument("--cluster-state-dir", default=str(localcluster.DEFAULT_STATE),
                    help="the local cluster's --state-dir")
    a = ap.parse_args(argv)
    try:
        if a.command == "build":
            print(kueue_dir(build=True))
            return 0
        c = LocalCluster(Path(a.cluster_state_dir))
        k = Kueue(c)
        if a.command == "up":
            k.up()
        elif a.command == "down":
            if not k.down():
                log("kueue was not running")
            else:
                log("webhook configurations removed, manager stopped")
        else:
            if k.running() and k.ready():
                print(f"up: kueue {k.state.get('version')} pid {k.pid()} webhooks https://127.0.0.1:{k.webhook_port} "
                      f"readyz http://127.0.0.1:{k.health_port}/readyz log {k.log_path}")
            else:
                print("down")
                return 1
    except ClusterError as e:
        log(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
