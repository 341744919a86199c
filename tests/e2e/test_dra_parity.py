"""Dynamic Resource Allocation (resource.k8s.io/v1) against upstream: seeded cases of 2-4 nodes
with GPUs of two models published in ResourceSlices, and a sequence of pods with claims, run by
kube-scheduler v1.37.1 (its default profile, which has DynamicResources) and by policy-scheduler's
`default` policy, with kube-controller-manager's resourceclaim controller creating the claims of
templates (see dra_world.py for the devices and the kinds of claims).

The claims cover CEL selectors on the model and on the memory capacity (compareTo, isGreaterThan),
a DeviceClass's selectors, `matchAttribute` on a PCIe root (qualified, and bare in the driver's
domain; on all requests or some), `distinctAttribute`, `allocationMode: All`, `exactly.count` > 1,
`firstAvailable` subrequests, `adminAccess`, devices with a NoSchedule or NoExecute taint (and
one of effect None) for requests with and without a toleration (Exists, Equal, everything), one
named claim shared by two pods (the second must go where the first went), claims from templates
(a template used by several pods), a claim allocated before its pod (reserved for nobody; when
the pod may not go to its node, PostFilter deallocates it and the pod is tried again), and pods
that cannot be satisfied: too many devices, a DeviceClass that does not exist, and a claim that
does not exist yet (PreEnqueue: neither scheduler may bind the pod or say anything about it for
a few seconds; then the claim is created and it is scheduled). Pools are in one slice or two
(sorted by name, not in device order), and some nodes have a second pool (sorted first) or none.
Every kind of claim is in some case whatever the seed (the cases go round them); the other
features must be too (a seed that leaves one out fails).

Each case's world is built three times: twice for kube-scheduler, once for policy-scheduler. Its
pods are created one at a time, each waiting to be bound or refused before the next. Where
upstream's outcome agrees with itself across its two runs, ours must be the same: every pod's
node (index), the devices allocated to each of its claims (status.allocation.devices.results as
(request, driver, pool's node index, device)) and who they are reserved for, and the
FailedScheduling message of each refused pod. A tie for the best node is broken at random by both
schedulers, and the worlds differ from then on: a case is compared up to its first pod whose best
node was not unique in our decision (the decision annotation's top scores).

The worlds of several cases are run side by side (a batch: all their nodes and slices exist
before the first pod, so the node count in every message is the batch's; each world's pods only
go to its own nodes, and each node's devices are its own pool); a probe pod per scheduler, which
needs a device of the batch's last slice on the batch's last node through the last DeviceClass
made, shows both schedulers have seen the batch before its worlds start."""

from __future__ import annotations

import os
import random
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client, config

from dra_world import (KINDS, Case, Poller, Raw, World, WorldOutcome, cleanup, create_classes, create_infra,
                       delete_classes, make_case, probe)

SEED = int(os.environ.get("DRA_PARITY_SEED", "20261127"))
CASES = int(os.environ.get("DRA_PARITY_CASES", "64"))
OURS, UPSTREAM = "policy-scheduler", "default-scheduler"
# nodes of a batch (three worlds per case) and its probe node, with those of the rest of the
# cluster: below 100, kube-scheduler looks at every node for every pod (percentageOfNodesToScore)
MAX_NODES = 99

# what the cases must cover between them (a seed that misses one is a bad seed)
REQUIRED = {f"kind:{k}" for k in KINDS} | {"source:named", "source:template", "source:shared", "source:late",
                                           "taint:NoSchedule", "taint:NoExecute", "taint:None",
                                           "node-without-devices", "split-pool", "second-pool", "source:allocated",
                                           "allocated-elsewhere"}
ADMIN_ACCESS = "resource.kubernetes.io/admin-access"  # a namespace label: its claims may ask for adminAccess


@pytest.fixture(scope="module")
def dra_components(cluster):
    """kube-controller-manager with the resourceclaim controller (claims of templates, and
    pod.status.resourceClaimStatuses), and kube-scheduler with its default profile. A
    kube-controller-manager already running is restarted with it, and restarted with its default
    controllers afterwards; a kube-scheduler already running is used as it is."""
    procs = cluster.state.get("procs", {})
    had_kcm = "kube-controller-manager" in procs
    if had_kcm:
        cluster.stop("kube-controller-manager")
    cluster.start_controller_manager(controllers="resourceclaim-controller")
    started_scheduler = "kube-scheduler" not in procs
    if started_scheduler:
        cluster.start_scheduler()
    yield
    if started_scheduler:
        cluster.stop("kube-scheduler")
    cluster.stop("kube-controller-manager")
    if had_kcm:
        cluster.start_controller_manager()


@pytest.fixture(scope="module")
def raw(cluster):
    """A client of its own, with room for a connection per world of a batch."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig_path), client_configuration=cfg)
    cfg.connection_pool_maxsize = 96
    api = client.ApiClient(cfg)
    yield Raw(api)
    api.close()


def batches(cases: list[Case], room: int) -> list[list[int]]:
    """Consecutive cases whose three worlds' nodes fit in ``room``."""
    out: list[list[int]] = [[]]
    used = 0
    for i, case in enumerate(cases):
        need = 3 * len(case.nodes)
        if out[-1] and used + need > room:
            out.append([])
            used = 0
        out[-1].append(i)
        used += need
    return out


def run_batch(raw: Raw, poller: Poller, namespace: str, run: str, b: int, cases: list[Case], idx: list[int],
              results: dict) -> None:
    batch = f"{run}-b{b}"
    worlds = {(i, w): World(cases[i], f"{run}-{i}{w}", OURS if w == "c" else UPSTREAM, namespace, run, batch)
              for i in idx for w in "abc"}
    try:
        create_infra(raw, list(worlds.values()))
        probe(raw, poller, namespace, run, batch, [UPSTREAM, OURS])
        with ThreadPoolExecutor(max_workers=len(worlds)) as pool:
            futures = {key: pool.submit(w.run, raw, poller) for key, w in worlds.items()}
            for key, f in futures.items():
                try:
                    results[key] = f.result()
                except AssertionError as e:  # a pod neither bound nor refused: reported with the case
                    results[key] = f"failed: {e}"
    finally:
        cleanup(raw, namespace, batch)


def compare(cases: list[Case], results: dict) -> tuple[int, int, int, list[str], list[str]]:
    """(compared cases, agreeing ones, pods compared, per-case lines, disagreements)."""
    unique = agree = pods = 0
    lines, bad = [], []
    for i, case in enumerate(cases):
        up1, up2, ours = results[(i, "a")], results[(i, "b")], results[(i, "c")]
        if not isinstance(up1, WorldOutcome) or not isinstance(up2, WorldOutcome):
            lines.append(f"  case {i}: upstream did not finish ({up1 if isinstance(up1, str) else up2})")
            continue
        if not isinstance(ours, WorldOutcome):
            n = len(case.pods)
            if up1.upto(n) != up2.upto(n):
                lines.append(f"  case {i}: upstream not unique; ours {ours}")
                continue
            unique += 1
            pods += n
            lines.append(f"  case {i}: DIFFERENT: ours {ours}")
            bad.append(f"case {i} (seed {SEED}): {case.describe()}\n    upstream {up1.upto(n)}\n    ours {ours}")
            continue
        n = ours.ties.index(True) if True in ours.ties else len(case.pods)  # up to the first tie
        if n == 0:
            lines.append(f"  case {i}: its first pod has a tie for the best node: not compared")
            continue
        if up1.upto(n) != up2.upto(n):
            lines.append(f"  case {i}: upstream not unique on its first {n} pod(s)")
            continue
        unique += 1
        pods += n
        same = ours.upto(n) == up1.upto(n)
        agree += same
        lines.append(f"  case {i}: {'same' if same else 'DIFFERENT'} on its first {n} pod(s)")
        if not same:
            diffs = [f"    pod {j}: upstream {u}\n           ours     {o}"
                     for j, (u, o) in enumerate(zip(up1.upto(n), ours.upto(n))) if u != o]
            bad.append(f"case {i} (seed {SEED}): {case.describe()}\n" + "\n".join(diffs))
    return unique, agree, pods, lines, bad


def who_bound(cases: list[Case], results: dict) -> list[str]:
    """Bound pods of ours without policy-scheduler's decision, or of upstream's with one: a world
    that another scheduler than its own served (the comparison would then prove nothing)."""
    wrong = []
    for (i, w), out in sorted(results.items()):
        if not isinstance(out, WorldOutcome):
            continue
        for j, (p, decided) in enumerate(zip(out.pods, out.decided)):
            if "node" in p.placed[::2] and decided != (w == "c"):
                wrong.append(f"case {i} world {w} pod {j}: {'has' if decided else 'lacks'} our decision")
    return wrong


def summary(results: dict) -> str:
    """What upstream's first runs did: pods bound, the reasons of the FailedScheduling messages
    (each node's, counted once per message, and PostFilter's), pods gated while a claim was
    missing, claims allocated and the subrequests picked."""
    bound = gated = allocated = 0
    reasons: dict[str, int] = {}
    subs: dict[str, int] = {}
    for (i, w), out in results.items():
        if w != "a" or not isinstance(out, WorldOutcome):
            continue
        for p in out.pods:
            gated += bool(p.gated)
            steps = list(zip(p.placed[::2], p.placed[1::2]))
            bound += any(kind == "node" for kind, _ in steps)
            for kind, msg in steps:
                if kind != "refused":
                    continue
                head = re.split(r"[.,] preemption: ", msg.split(": ", 1)[1])[0]
                fit, _, post = head.partition(". ")
                for reason in fit.split(", ") + ([f"PostFilter: {post}"] if post else []):
                    key = reason.lstrip("0123456789 ")
                    reasons[key] = reasons.get(key, 0) + 1
            for _, allocation, _ in p.claims:
                allocated += allocation is not None
                for req, *_ in allocation[0] if allocation else ():
                    if "/" in req:
                        subs[req] = subs.get(req, 0) + 1
    return (f"upstream's first runs: {bound} pods bound, {gated} gated while their claim was missing, "
            f"{allocated} claims allocated at the end; subrequests picked {subs}; reasons in FailedScheduling "
            f"messages {reasons}")


def test_same_dra_outcomes_as_kube_scheduler(cluster, core, namespace, operator, example_policies, dra_components,
                                             raw):
    rng = random.Random(SEED)
    cases = [make_case(rng, list(KINDS)[i % len(KINDS)]) for i in range(CASES)]
    covered = set().union(*(c.features() for c in cases))
    assert REQUIRED <= covered, f"seed {SEED} leaves out {sorted(REQUIRED - covered)}"
    core.patch_namespace(namespace, {"metadata": {"labels": {ADMIN_ACCESS: "true"}}})
    run = secrets.token_hex(2)
    existing = len(core.list_node().items)
    groups = batches(cases, MAX_NODES - existing - 1)
    classes = create_classes(raw)
    poller = Poller(raw, namespace, run).start()
    results: dict = {}
    t0 = time.monotonic()
    try:
        for b, idx in enumerate(groups):
            run_batch(raw, poller, namespace, run, b, cases, idx, results)
    finally:
        poller.stop()
        delete_classes(raw, classes)
    took = time.monotonic() - t0
    unique, agree, pods, lines, bad = compare(cases, results)
    wrong = who_bound(cases, results)
    assert not wrong, "\n".join(wrong)
    print(f"\nDRA parity: {CASES} cases (seed {SEED}) in {len(groups)} batches, {took:.0f}s; upstream unique on "
          f"{unique} ({pods} pods); same nodes, devices and messages on {agree}/{unique}"
          f" = {100.0 * agree / unique if unique else 0:.0f}%")
    print(summary(results))
    print("\n".join(lines))
    if bad:
        print("disagreements:\n" + "\n".join(bad))
    assert unique >= CASES * 3 // 4, "\n".join(lines)
    assert agree == unique, "\n".join(bad)
