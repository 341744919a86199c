"""Session fixtures for end-to-end tests: one real local control plane for the whole session."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from kubernetes import client, config

import localcluster

ROOT = Path(__file__).resolve().parents[2]
# one control plane per test session; concurrent sessions (e.g. -n or two terminals) do not collide
STATE = ROOT / ".local" / f"test-cluster-{os.getpid()}"


def _reap_stale_clusters() -> None:
    """Stop clusters left by test sessions that were killed (their pid is gone)."""
    for d in (ROOT / ".local").glob("test-cluster-*"):
        try:
            owner = int(d.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if owner != os.getpid() and not localcluster.pid_alive(owner):
            for extra in d.glob("*-cluster"):  # control planes of their own some tests start (Kueue's, ...)
                localcluster.LocalCluster(extra, kubeconfig_path=extra / "kubeconfig").down(quiet=True)
            localcluster.LocalCluster(d, kubeconfig_path=d / "kubeconfig").down(quiet=True)
            import shutil
            shutil.rmtree(d, ignore_errors=True)


# alpha gates without which the API server drops (bindMountOptions) or refuses (hostNetwork with
# hostUsers: false) what two NodeDeclaredFeatures features are inferred from; kube-scheduler reads
# neither gate (only the pods' specs)
NODE_FEATURE_GATES = "VolumeBindMountOptions=true,UserNamespacesHostNetworkSupport=true"


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def cluster():
    """etcd + kube-apiserver + kwok, built from pinned sources by hack/ (built here if missing),
    with the feature gates and API of Kubernetes' own gangs."""
    _reap_stale_clusters()
    c = localcluster.LocalCluster(STATE, kubeconfig_path=STATE / "kubeconfig")
    t0 = time.monotonic()
    # with Kubernetes' own gangs served (GangScheduling's e2e and parity tests); nothing else
    # uses scheduling.k8s.io PodGroups or spec.schedulingGroup. NODE_FEATURE_GATES: the API server
    # keeps the pod fields of two alpha node features (test_node_features_parity.py)
    c.up(kwok=True, quiet=True, feature_gates=localcluster.GANG_FEATURE_GATES + "," + NODE_FEATURE_GATES,
         runtime_config=localcluster.GANG_RUNTIME_CONFIG)
    print(f"\nlocal control plane up in {time.monotonic() - t0:.1f}s at {c.server}")
    yield c
    c.down(quiet=True)
    import shutil
    shutil.rmtree(STATE, ignore_errors=True)


@pytest.fixture(scope="session")
def api(cluster) -> client.ApiClient:
    return config.new_client_from_config(str(cluster.kubeconfig_path))


@pytest.fixture(scope="session")
def core(api) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def namespace(core, request):
    """A fresh namespace per test (pods in it are removed with grace period 0 at the end)."""
    name = "t-" + request.node.name.lower().replace("_", "-")[:40].strip("-") + f"-{os.getpid() % 1000}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)


# ---------------------------------------------------------------------------------------------
# the operator under test, as a real process

import subprocess  # noqa: E402
import sys  # noqa: E402

import yaml  # noqa: E402
from kubernetes import utils  # noqa: E402

from helpers import wait_for  # noqa: E402

OPERATOR_LOGS = STATE / "operator-logs"


class OperatorProcess:
    """`policy-scheduler run` against the test cluster, with its own scheduler name and log file."""

    def __init__(self, cluster, scheduler_name: str, extra: list[str] | None = None, kubeconfig: str | None = None,
                 env: dict[str, str] | None = None, kubeconfig_flag: bool = True, log_name: str | None = None):
        """``kubeconfig_flag=False`` passes no --kubeconfig: the operator resolves $KUBECONFIG,
        ~/.kube/config, ... itself (set them in ``env``). ``log_name``: the log file's name, for
        replicas of one scheduler name (default: the scheduler name)."""
        self.cluster = cluster
        self.env = env
        self.scheduler_name = scheduler_name
        self.extra = extra or []
        self.kubeconfig = (kubeconfig or str(cluster.kubeconfig_path)) if kubeconfig_flag else None
        OPERATOR_LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = OPERATOR_LOGS / f"{log_name or scheduler_name}.log"
        self.proc: subprocess.Popen | None = None
        self._offset = 0  # where this process's lines start in the (appended) log file

    def start(self, wait: bool = True) -> "OperatorProcess":
        """Start the process; with ``wait``, until its cache is synced (see ``wait_synced``)."""
        logf = open(self.log_path, "ab")
        self._offset = logf.tell()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "policy_scheduler.cli", "run",
             *(["--kubeconfig", self.kubeconfig] if self.kubeconfig else []),
             "--scheduler-name", self.scheduler_name, "--metrics-port", "0", "--health-port", "0", *self.extra],
            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=None if self.env is None else {**os.environ, **self.env})
        logf.close()
        if wait:
            self.wait_synced()
        return self

    def wait_synced(self, timeout: float = 60) -> None:
        wait_for(lambda: "cache synced in" in self.log() or self.proc.poll() is not None, timeout,
                 what=f"operator {self.scheduler_name} to sync")
        assert self.proc.poll() is None, f"operator exited:\n{self.log()[-3000:]}"

    def assert_running(self) -> None:
        """Fail with the log's tail if the process has exited (a lost lease, a crash): a test that
        waits for the operator's work then says why, instead of timing out."""
        assert self.proc is not None and self.proc.poll() is None, \
            f"operator {self.scheduler_name} exited ({self.proc and self.proc.returncode}):\n{self.log()[-3000:]}"

    def stacks(self, wait: float = 1.0) -> str:
        """Every thread's stack of the running process (SIGUSR1, which `run` answers with a dump to
        its log), for a test's failure message: where an operator that does nothing is waiting."""
        if not self.proc or self.proc.poll() is not None:
            return ""
        before = len(self.log())
        self.proc.send_signal(signal.SIGUSR1)
        time.sleep(wait)
        return self.log()[before:]

    def log(self) -> str:
        """What the current process logged (earlier runs with the same log file are skipped)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no cleanup, exactly like a crashed or evicted operator."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def install_crd(api, path: Path) -> dict:
    """Create the CRD of ``path`` (an existing one is left as it is) and wait until Established."""
    ext = client.ApiextensionsV1Api(api)
    manifest = yaml.safe_load(path.read_text())
    try:
        utils.create_from_dict(api, manifest)
    except utils.FailToCreateError as e:
        if not all(x.status == 409 for x in e.api_exceptions):
            raise

    def established():
        c = ext.read_custom_resource_definition(manifest["metadata"]["name"])
        return any(x.type == "Established" and x.status == "True" for x in (c.status.conditions or []))

    wait_for(established, 30, what=f"CRD {manifest['metadata']['name']} Established")
    return manifest


@pytest.fixture(scope="session")
def crd(api):
    return install_crd(api, ROOT / "crds" / "schedulingpolicies.yaml")


@pytest.fixture(scope="session")
def podgroup_crd(api):
    """scheduler-plugins' PodGroup CRD (crds/podgroups.yaml), for Coscheduling."""
    return install_crd(api, ROOT / "crds" / "podgroups.yaml")


def wait_served(api, *manifests: dict) -> None:
    """Until a LIST of each CRD's kind answers twice in a row: a CRD just created makes the API
    server (re)initialize the storage of custom resources for a moment (HTTP 429), and a watch
    that meets it backs off."""
    objs = client.CustomObjectsApi(api)

    def served() -> bool:
        for m in manifests:
            spec = m["spec"]
            version = spec["versions"][0]["name"]
            try:
                objs.list_cluster_custom_object(spec["group"], version, spec["names"]["plural"], limit=1)
            except client.exceptions.ApiException:
                return False
        return True

    wait_for(lambda: served() and (time.sleep(0.5) or served()), 30, what="custom resources served")


@pytest.fixture(scope="session")
def operator(cluster, api, crd, podgroup_crd):
    """The operator for scheduler name policy-scheduler, for the whole session."""
    wait_served(api, crd, podgroup_crd)
    op = OperatorProcess(cluster, "policy-scheduler").start()
    yield op
    op.stop()


@pytest.fixture(scope="session")
def policies(api):
    return client.CustomObjectsApi(api)


@pytest.fixture
def nodes(core):
    """Create nodes for one test (helpers.node arguments); delete them afterwards."""
    from kubernetes.client.rest import ApiException

    from helpers import node

    made: list[str] = []

    def make(name: str, **kw) -> str:
        core.create_node(node(name, **kw))
        made.append(name)
        return name

    yield make
    for n in made:
        try:
            core.delete_node(n)
        except ApiException:
            pass


@pytest.fixture(scope="module")
def example_policies(operator, policies):
    """The example policies of policies/, applied and Ready."""
    from helpers import apply_policy, ready_condition

    for f in sorted((ROOT / "policies").glob("*.yaml")):
        # the policy of each file (gpu-dra.yaml also holds the DRA objects of its example)
        body = next(d for d in yaml.safe_load_all(f.read_text()) if d and d["kind"] == "SchedulingPolicy")
        apply_policy(policies, body["metadata"]["name"], body["spec"]["plugins"],
                     **{k: v for k, v in body["spec"].items() if k != "plugins"})
    for name in ("default", "binpack", "spread", "node-label-match"):
        wait_for(lambda: (ready_condition(policies, name) or {}).get("status") == "True", 30,
                 what=f"policy {name} Ready")
    return policies
