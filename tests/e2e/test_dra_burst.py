"""DynamicResources under load, in upstream scheduler_perf's shape (SchedulingWithResourceClaimTemplate):
500 nodes, each publishing one ResourceSlice of 8 devices (a pool per node), a DeviceClass that
selects the driver by CEL, a ResourceClaimTemplate of one device, and pods that each reference
the template; kube-controller-manager's resourceclaim controller creates every pod's claim (see
dra_burst_world.py).

- test_burst_of_2000_claim_pods: 2,000 pods scheduled by the session's operator with the `default`
  policy, all created at once. Once all are bound: no device is allocated to two claims, each pod
  has exactly one claim, allocated once (one device from its node's pool, the allocation's
  nodeSelector naming that node), reserved for that pod alone and protected by the finalizer, and
  no pod was seen on two nodes. Then every pod is deleted and the controller must deallocate
  every claim (no claim left allocated, reserved or protected for a deleted pod).
- test_sigkill_mid_burst_then_restart: an operator process of its own (its own scheduler name and
  policy, a copy of the `default` policy) SIGKILLed when a third of the pods are bound, then
  restarted. A claim may be allocated and reserved when the process dies before the binding:
  upstream's restarted scheduler binds such a pod to its allocation's node. After the restart every
  pod is bound and the same invariants hold; no pod's node ever changes, and no pod has two
  Scheduled events. 600 pods instead of 2,000 (on the same 500 nodes): the kill-and-restart is
  what is tested, and the smaller burst keeps the run near a minute on a 2-core machine."""

from __future__ import annotations

import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from conftest import OperatorProcess
from dra_burst_world import BurstWorld, ClaimWatch, PodWatch, Raw, check, claim_node, start_claim_controller
from helpers import GROUP, STEADY_ELECTION, PLURAL, VERSION, apply_policy, ready_condition, wait_for

ROOT = Path(__file__).resolve().parents[2]
NODES, DEVICES = 500, 8
BURST_PODS = 2000
CRASH_PODS = 600
CRASH_SCHED = "dra-burst-crash"


@pytest.fixture(scope="module")
def claim_controller(cluster):
    """kube-controller-manager with the resourceclaim controller (and the namespace controller), at
    a client rate that fits the burst; one already running is restarted with it, and restarted with
    its default controllers afterwards."""
    had = "kube-controller-manager" in cluster.state.get("procs", {})
    if had:
        cluster.stop("kube-controller-manager")
    start_claim_controller(cluster)
    yield
    cluster.stop("kube-controller-manager")
    if had:
        cluster.start_controller_manager()


@pytest.fixture(scope="module")
def raw(cluster):
    r = Raw(str(cluster.kubeconfig_path))
    yield r
    r.close()


def report(problems: list[str], limit: int = 40) -> str:
    return f"{len(problems)} problem(s):\n" + "\n".join(problems[:limit])


def tracebacks(log: str) -> list[str]:
    """The lines around each traceback of an operator log."""
    lines = log.splitlines()
    return ["\n".join(lines[max(0, i - 2):i + 12]) for i, line in enumerate(lines) if "Traceback" in line]


def exited(op: OperatorProcess) -> str | None:
    if op.proc is not None and op.proc.poll() is not None:
        return f"the operator exited ({op.proc.returncode}):\n" + "\n".join(op.log().splitlines()[-30:])
    return None


def delete_and_wait_deallocated(world: BurstWorld, watches, timeout: float = 300) -> float:
    """Delete every pod; wait until no claim is allocated, reserved or protected any more (the
    resourceclaim controller's work). Returns the seconds it took."""
    for w in watches:
        w.close()
    t0 = time.monotonic()
    world.delete_pods()
    wait_for(lambda: not world.pods(), timeout, 1.0, what="every pod deleted")
    last: list[str] = []

    def done() -> bool:
        last[:] = world.leftover_allocations()
        return not last

    try:
        wait_for(done, timeout, 2.0, what="every claim deallocated")
    except AssertionError:
        raise AssertionError(f"claims left allocated for deleted pods after {timeout:.0f}s: "
                             + report(last)) from None
    return time.monotonic() - t0


def scheduled_twice(raw: Raw, ns: str) -> list[str]:
    """Pods with more than one Scheduled event."""
    count: dict[str, int] = {}
    for e in raw.items(f"/api/v1/namespaces/{ns}/events", {"fieldSelector": "reason=Scheduled"}):
        who = e["involvedObject"]["name"]
        count[who] = count.get(who, 0) + (e.get("count") or 1)
    return [f"pod {k}: {v} Scheduled events" for k, v in sorted(count.items()) if v > 1]


def stop_all(*watches) -> None:
    for w in watches:
        if w is not None:
            w.stop()


@pytest.mark.timeout(900)  # about 2 minutes on an idle 2-core machine, 6 with a load average of 10
def test_burst_of_2000_claim_pods(operator, example_policies, claim_controller, raw):
    world = BurstWorld(raw, f"b{os.getpid() % 1000}{secrets.token_hex(2)}", NODES, DEVICES, "policy-scheduler")
    names = [f"p-{i:04d}" for i in range(BURST_PODS)]
    log_from = len(operator.log())
    pods_seen = claims_seen = None
    try:
        t0 = time.monotonic()
        world.create()
        t_world = time.monotonic() - t0
        pods_seen, claims_seen = PodWatch(raw, world.ns).start(), ClaimWatch(raw, world.ns).start()
        t1 = time.monotonic()
        world.create_pods(names)
        t_created = time.monotonic() - t1
        pods_seen.wait_bound(names, 600, f"{BURST_PODS} pods bound", alive=lambda: exited(operator))
        t_bound = time.monotonic() - t1
        times = sorted(pods_seen.bound_at.values())
        problems = check(world, names, pods_seen, claims_seen) + scheduled_twice(raw, world.ns)
        assert not problems, report(problems)
        t_delete = delete_and_wait_deallocated(world, (pods_seen, claims_seen))
    finally:
        stop_all(pods_seen, claims_seen)
        errors = world.cleanup()
    assert not errors, errors
    trace = tracebacks(operator.log()[log_from:])
    assert not trace, "the operator logged tracebacks:\n" + "\n---\n".join(trace[:5])
    print(f"\nDRA burst: {NODES} nodes x {DEVICES} devices built in {t_world:.1f}s; {BURST_PODS} pods created in "
          f"{t_created:.1f}s ({BURST_PODS / t_created:.0f}/s), all bound {t_bound:.1f}s after the first was created "
          f"({BURST_PODS / t_bound:.1f} pods/s overall; {BURST_PODS / max(times[-1] - times[0], 1e-3):.1f} pods/s "
          f"from the first binding to the last); every claim allocated once, on its pod's node, reserved for it; "
          f"all pods deleted and their claims deallocated in {t_delete:.1f}s")


def own_default(policies, name: str) -> None:
    """policies/default.yaml, named ``name`` and owned by the scheduler of that name."""
    spec = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())["spec"]
    apply_policy(policies, name, spec.pop("plugins"), **{**spec, "schedulerName": name})


def test_sigkill_mid_burst_then_restart(cluster, crd, policies, claim_controller, raw):
    world = BurstWorld(raw, f"k{os.getpid() % 1000}{secrets.token_hex(2)}", NODES, DEVICES, CRASH_SCHED)
    names = [f"p-{i:04d}" for i in range(CRASH_PODS)]
    own_default(policies, CRASH_SCHED)
    # the restarted process waits for the killed one's lease to expire: 8 s, and a renew deadline of
    # 6 s that a process busy with the burst on a loaded 2-core machine still meets (with 2 s it lost
    # its lease and exited mid-burst)
    op = OperatorProcess(cluster, CRASH_SCHED, extra=STEADY_ELECTION + ["--default-policy", CRASH_SCHED])
    pods_seen = claims_seen = None
    first_log = second_log = ""
    try:
        t0 = time.monotonic()
        world.create()
        t_world = time.monotonic() - t0
        op.start()
        wait_for(lambda: (ready_condition(policies, CRASH_SCHED) or {}).get("status") == "True", 60,
                 what=f"policy {CRASH_SCHED} Ready")
        pods_seen, claims_seen = PodWatch(raw, world.ns).start(), ClaimWatch(raw, world.ns).start()
        t1 = time.monotonic()
        with ThreadPoolExecutor(max_workers=1) as creator:
            created = creator.submit(world.create_pods, names)
            pods_seen.wait_count(CRASH_PODS // 3, 300, "a third of the pods bound", alive=lambda: exited(op))
            op.kill()
            t_kill = time.monotonic() - t1
            killed_at = pods_seen.bound()
            first_log = op.log()
            # what the killed process left: claims allocated and reserved for a pod it had not bound
            bound = {p["metadata"]["uid"] for p in world.pods() if p["spec"].get("nodeName")}
            in_flight = [c["metadata"]["name"] for c in world.claims()
                         if (c.get("status") or {}).get("allocation") and c["status"].get("reservedFor")
                         and c["status"]["reservedFor"][0]["uid"] not in bound]
            created.result()
        assert killed_at < CRASH_PODS, "the burst finished before the kill; nothing was tested"
        t2 = time.monotonic()
        op.start()  # a fresh process: it waits for the lease, relists, schedules what is left
        pods_seen.wait_bound(names, 600, f"{CRASH_PODS} pods bound after the restart", alive=lambda: exited(op))
        t_rest = time.monotonic() - t2
        # the claims in flight at the kill too: allocated once (never deallocated, reallocated or
        # changed), and their pods bound to the allocation's node
        problems = check(world, names, pods_seen, claims_seen) + scheduled_twice(raw, world.ns)
        assert not problems, report(problems)
        t_delete = delete_and_wait_deallocated(world, (pods_seen, claims_seen))
        second_log = op.log()
    finally:
        op.stop()
        stop_all(pods_seen, claims_seen)
        errors = world.cleanup()
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, CRASH_SCHED)
        raw.delete(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{CRASH_SCHED}")
    assert not errors, errors
    trace = tracebacks(first_log) + tracebacks(second_log)
    assert not trace, "the operator logged tracebacks:\n" + "\n---\n".join(trace[:5])
    print(f"\nDRA crash: world built in {t_world:.1f}s; SIGKILL {t_kill:.1f}s into the burst with {killed_at}/"
          f"{CRASH_PODS} bound ({killed_at / t_kill:.1f} pods/s), {len(in_flight)} claim(s) allocated and reserved "
          f"for unbound pods at that moment; after the restart the rest bound in {t_rest:.1f}s, every claim "
          f"allocated once, on its pod's node, reserved for it, no pod's node ever changed; deleted and "
          f"deallocated in {t_delete:.1f}s")
