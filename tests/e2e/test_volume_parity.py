"""Volume scheduling against upstream: seeded cases of labelled nodes in two zones, static local
PersistentVolumes of a WaitForFirstConsumer class, zonal volumes bound up front, and a sequence of
pods with claims, run by kube-scheduler v1.37.1 (default profile) and by policy-scheduler's
`default` policy, with the PV controller completing the bindings.

Each case's world is built three times: twice for kube-scheduler, once for policy-scheduler. Its
pods are created one at a time, each waiting to be bound or refused before the next. Where
upstream's outcome agrees with itself across its two runs, ours must be the same: every pod's
node, the volume each claim is bound to (its node and size: upstream's choice among a node's
PVs of equal size is a Go map's order, random), and the FailedScheduling message of each
refused pod.
A tie for the best node is broken at random by both schedulers, and the worlds differ from then
on: a case is compared up to its first pod whose best node was not unique in our decision (the
decision annotation's top scores).

A second test compares the FailedScheduling message of pods rejected at PreFilter (a claim that
does not exist, for a pod that may preempt and one that may not, an unbound claim of immediate
binding, node affinity terms that conflict) or by a PreFilter's node set that names no node: the
PreFilter message, then DefaultPreemption's verdict, since upstream runs PostFilter after a
PreFilter rejection as after any other FitError. It uses a second profile of the same
kube-scheduler, the default one without DynamicResources (as the `default` policy)."""

from __future__ import annotations

import json
import os
import random
import secrets
from dataclasses import dataclass

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from helpers import apply_policy, events_for, example_plugins, node, pod, priority_classes, wait_for

DECISION = "policy-scheduler.io/decision"

SEED = int(os.environ.get("VOLUME_PARITY_SEED", "20261124"))
CASES = 6
OURS, UPSTREAM = "policy-scheduler", "default-scheduler"
ZONES = ("za", "zb")


@dataclass
class Case:
    nodes: list[tuple[str, str]]  # (cpu, zone) per node
    local_pvs: list[tuple[int, str]]  # (node index, size)
    zonal_pvs: list[str]  # zone of each zonal PV (bound up front to claim zonal-<i>)
    pods: list[tuple[str, object]]  # ("wffc", size) | ("zonal", index) | ("none", None)


@dataclass(frozen=True)
class Outcome:
    placements: tuple  # per pod: node index, or the FailedScheduling message
    # per pod: the local PV its wffc claim is bound to, as (node index, size) (None: unbound or no
    # claim). Not the PV's name: among PVs of equal size upstream takes the first in its cache's
    # index, a Go map, so which of two same-size PVs of a node it binds is random from run to run
    volumes: tuple
    ties: tuple = ()  # ours only, per pod: its best node was not unique

    def upto(self, n: int) -> tuple:
        return self.placements[:n], self.volumes[:n]


def unique_best(decision: dict) -> bool:
    top = decision.get("top") or []
    return len(top) == 1 or (len(top) > 1 and top[0]["total"] > top[1]["total"])


def make_case(rng: random.Random) -> Case:
    n = rng.randint(2, 4)
    # distinct sizes: pods without a volume constraint then have one best node, not a tie
    nodes = [(cpu, ZONES[i % 2]) for i, cpu in enumerate(rng.sample(("2", "3", "4", "6", "8", "12"), n))]
    local = [(rng.randrange(n), rng.choice(("1Gi", "2Gi"))) for _ in range(rng.randint(1, 4))]
    zonal = [rng.choice(ZONES) for _ in range(rng.randint(0, 2))]
    pods = []
    for _ in range(rng.randint(3, 5)):
        kind = rng.choice(("wffc", "wffc", "zonal", "none")) if zonal else rng.choice(("wffc", "wffc", "none"))
        pods.append((kind, rng.choice(("1Gi", "2Gi")) if kind == "wffc" else
                     rng.randrange(len(zonal)) if kind == "zonal" else None))
    return Case(nodes, local, zonal, pods)


def strip_finalizers_and_delete_pv(core, name):
    try:
        core.patch_persistent_volume(name, {"metadata": {"finalizers": None}})
        core.delete_persistent_volume(name)
    except ApiException:
        pass


def run_world(api, core, namespace: str, case: Case, scheduler: str, tag: str) -> Outcome:
    storage = client.StorageV1Api(api)
    node_names = [f"vp-{tag}-{i}" for i in range(len(case.nodes))]
    cls = f"vp-local-{tag}"
    pv_names: list[str] = []
    try:
        for name, (cpu, zone) in zip(node_names, case.nodes):
            core.create_node(node(name, cpu=cpu, labels={"e2e-vp": tag, "topology.kubernetes.io/zone": zone}))
        storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                      "metadata": {"name": cls}, "provisioner": "kubernetes.io/no-provisioner",
                                      "volumeBindingMode": "WaitForFirstConsumer"})
        for i, (ni, size) in enumerate(case.local_pvs):
            name = f"vp-{tag}-l{i}"
            core.create_persistent_volume({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                                           "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                                                    "storageClassName": cls, "local": {"path": f"/mnt/{name}"},
                                                    "persistentVolumeReclaimPolicy": "Retain",
                                                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{
                                                        "matchExpressions": [{"key": "kubernetes.io/hostname",
                                                                              "operator": "In",
                                                                              "values": [node_names[ni]]}]}]}}}})
            pv_names.append(name)
        for i, zone in enumerate(case.zonal_pvs):
            name, claim = f"vp-{tag}-z{i}", f"zonal-{tag}-{i}"
            core.create_persistent_volume({"apiVersion": "v1", "kind": "PersistentVolume",
                                           "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
                                           "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                                    "storageClassName": "", "hostPath": {"path": f"/mnt/{name}"},
                                                    "persistentVolumeReclaimPolicy": "Retain",
                                                    "claimRef": {"namespace": namespace, "name": claim}}})
            pv_names.append(name)
            core.create_namespaced_persistent_volume_claim(namespace, {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": name,
                         "resources": {"requests": {"storage": "1Gi"}}}})
        for i in range(len(case.zonal_pvs)):
            wait_for(lambda i=i: core.read_namespaced_persistent_volume_claim(
                f"zonal-{tag}-{i}", namespace).status.phase == "Bound", 60, what="zonal claim Bound")

        placements: list = []
        ties: list[bool] = []
        wffc_claims: list[str] = []
        for j, (kind, arg) in enumerate(case.pods):
            name = f"vp-{tag}-p{j}"
            volumes = []
            if kind == "wffc":
                claim = f"wffc-{tag}-{j}"
                core.create_namespaced_persistent_volume_claim(namespace, {
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                             "resources": {"requests": {"storage": arg}}}})
                wffc_claims.append(claim)
                volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
            elif kind == "zonal":
                volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": f"zonal-{tag}-{arg}"}}]
            core.create_namespaced_pod(namespace, pod(name, namespace, cpu="500m", scheduler=scheduler,
                                                      nodeSelector={"e2e-vp": tag}, volumes=volumes))

            def outcome(name=name):
                p = core.read_namespaced_pod(name, namespace)
                if p.spec.node_name:
                    return ("node", node_names.index(p.spec.node_name)), p
                evs = events_for(core, namespace, name, "FailedScheduling")
                return (("refused", evs[0].message), p) if evs else None

            placed, p = wait_for(outcome, 60, 0.2, what=f"pod {name} bound or refused")
            placements.append(placed)
            decision = (p.metadata.annotations or {}).get(DECISION)
            ties.append(decision is not None and not unique_best(json.loads(decision)))
        # the claims of bound pods: the PV controller completes what PreBind started
        volumes_of: list[int | None] = []
        for j, (kind, _) in enumerate(case.pods):
            claim = f"wffc-{tag}-{j}"

            def bound(claim=claim):
                c = core.read_namespaced_persistent_volume_claim(claim, namespace)
                return c if c.status.phase == "Bound" else None

            if kind == "wffc" and placements[j][0] == "node":
                c = wait_for(bound, 60, 0.3, what=f"claim {claim} Bound")
                volumes_of.append(case.local_pvs[pv_names.index(c.spec.volume_name)])
            else:
                volumes_of.append(None)
        return Outcome(tuple(placements), tuple(volumes_of), tuple(ties))
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        for c in core.list_namespaced_persistent_volume_claim(namespace).items:
            try:
                core.patch_namespaced_persistent_volume_claim(c.metadata.name, namespace,
                                                              {"metadata": {"finalizers": None}})
                core.delete_namespaced_persistent_volume_claim(c.metadata.name, namespace)
            except ApiException:
                pass
        for name in pv_names:
            strip_finalizers_and_delete_pv(core, name)
        try:
            storage.delete_storage_class(cls)
        except ApiException:
            pass
        for name in node_names:
            try:
                core.delete_node(name)
            except ApiException:
                pass


# a second profile of the same kube-scheduler: the default one without DynamicResources, which
# policy-scheduler's `default` policy is
NO_DRA = "default-scheduler-no-dra"
PROFILES = f"""profiles:
- schedulerName: {UPSTREAM}
- schedulerName: {NO_DRA}
  plugins:
    multiPoint:
      disabled:
      - name: DynamicResources
"""


@pytest.fixture(scope="module")
def pv_controller_and_upstream(cluster):
    """The PV controller and kube-scheduler with the NO_DRA profile too (a kube-scheduler already
    running without it is restarted with it, and restarted plain afterwards)."""
    procs = cluster.state.get("procs", {})
    started = [n for n in ("kube-controller-manager", "kube-scheduler") if n not in procs]
    if "kube-controller-manager" in started:
        cluster.start_controller_manager(controllers="persistentvolume-binder-controller")
    restarted = "kube-scheduler" not in started
    if restarted:
        cluster.stop("kube-scheduler")
    cluster.start_scheduler(config_extra=PROFILES)
    yield
    cluster.stop("kube-scheduler")
    if restarted:
        cluster.start_scheduler()
    for n in started:
        if n != "kube-scheduler":
            cluster.stop(n)


def test_same_volume_placements_as_kube_scheduler(api, core, namespace, operator, example_policies,
                                                  pv_controller_and_upstream):
    rng = random.Random(SEED)
    cases = [make_case(rng) for _ in range(CASES)]
    run = secrets.token_hex(2)
    unique = agree = pods = 0
    lines = []
    for i, case in enumerate(cases):
        up1 = run_world(api, core, namespace, case, UPSTREAM, f"{run}-{i}a")
        up2 = run_world(api, core, namespace, case, UPSTREAM, f"{run}-{i}b")
        ours = run_world(api, core, namespace, case, OURS, f"{run}-{i}c")
        n = ours.ties.index(True) if True in ours.ties else len(case.pods)  # up to the first tie
        if n == 0:
            lines.append(f"  case {i}: its first pod has a tie for the best node: not compared")
            continue
        if up1.upto(n) != up2.upto(n):
            lines.append(f"  case {i}: upstream not unique ({up1} / {up2})")
            continue
        unique += 1
        pods += n
        same = ours.upto(n) == up1.upto(n)
        agree += same
        lines.append(f"  case {i}: {'same' if same else 'DIFFERENT'} on its first {n} pod(s): upstream "
                     f"{up1.upto(n)}" + ("" if same else f"; ours {ours.upto(n)}"))
    print(f"\nvolume parity: {CASES} cases (seed {SEED}); compared on {unique} ({pods} pods); "
          f"same placements, volumes and messages on {agree}/{unique}"
          f" = {100.0 * agree / unique if unique else 0:.0f}%")
    print("\n".join(lines))
    assert unique >= CASES // 2, "\n".join(lines)
    assert agree == unique, "\n".join(lines)


def _pinned(*names: str) -> dict:
    """Required node affinity: one term whose matchFields name ``names`` (ANDed)."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]} for n in names]}]}}}


# pods rejected before any node is filtered: name -> (the spec's extra fields, the name of a claim to
# create first or None); "<tag>" stands for the run's tag
POLICY_LABEL = "policy-scheduler.io/policy"
NO_DRA_POLICY = "vp-default-no-dra"  # policies/default.yaml without DynamicResources

PREFILTER_CASES = {
    # VolumeRestrictions' PreFilter: UnschedulableAndUnresolvable `persistentvolumeclaim "..." not found`
    "missing-claim": ({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "vp-missing-<tag>"}}]},
                      None),
    # the same for a pod that may not preempt: DefaultPreemption says so instead
    "missing-claim-never": ({"priorityClassName": "vp-never", "volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "vp-missing-<tag>"}}]}, None),
    # VolumeBinding's PreFilter: `pod has unbound immediate PersistentVolumeClaims` (no class: immediate;
    # no volume is that big)
    "unbound-immediate": ({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "vp-imm-<tag>"}}]},
                          "vp-imm-<tag>"),
    # NodeAffinity's PreFilter: matchFields naming two nodes in one term: `pod affinity terms conflict`
    "affinity-conflict": ({"affinity": _pinned("vp-<tag>-0", "vp-<tag>-1")}, None),
    # NodeAffinity's PreFilter names a node that does not exist: every node is absent from the scan
    "pinned-to-no-node": ({"affinity": _pinned("vp-<tag>-ghost")}, None),
}


@pytest.fixture
def never_class(api):
    yield from priority_classes(api, {"vp-never": (1000, "Never")})


def test_prefilter_rejections_same_message_as_kube_scheduler(api, core, namespace, operator, example_policies,
                                                             pv_controller_and_upstream, never_class):
    """upstream findNodesThatFitPod turns a PreFilter rejection into a FitError whose absent-node
    status is the rejection, and schedulingAlgorithm runs PostFilter (DefaultPreemption) on it:
    `0/N nodes are available: <PreFilter message>. preemption: 0/N nodes are available: N
    Preemption is not helpful for scheduling.` That is kube-scheduler's profile without
    DynamicResources, which a policy of the default plugins without it must match. With
    DynamicResources (kube-scheduler's default profile and our `default` policy), after a
    rejection at an earlier PreFilter its PostFilter finds no state of its PreFilter, errs with
    `not found`, and DefaultPreemption does not run: `0/N nodes are available: <message>. not
    found`; ours must write that too. Neither leaves a nomination."""
    tag = secrets.token_hex(3)
    names = [f"vp-{tag}-{i}" for i in range(3)]
    made: list[str] = []
    claims: list[str] = []
    try:
        for case, (_, claim) in PREFILTER_CASES.items():
            if claim:
                claim = claim.replace("<tag>", tag)
                core.create_namespaced_persistent_volume_claim(namespace, {
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                             "resources": {"requests": {"storage": "64Ti"}}}})
                claims.append(claim)
        for name in names:
            core.create_node(node(name, labels={"e2e-vp": tag}))
        # both schedulers have every node (and, earlier in their watches, the claim) once they bind
        # a pod that only the last node admits
        apply_policy(client.CustomObjectsApi(api), NO_DRA_POLICY,
                     [p for p in example_plugins("default") if p["name"] != "DynamicResources"])
        schedulers = ((NO_DRA, "up", None), (OURS, "ours", None), (UPSTREAM, "dra", None),
                      (OURS, "ours-no-dra", NO_DRA_POLICY))
        for sched, short, policy in schedulers:
            probe = f"vp-{tag}-probe-{short}"
            core.create_namespaced_pod(namespace, pod(probe, namespace, scheduler=sched,
                                                      labels={POLICY_LABEL: policy} if policy else None,
                                                      nodeSelector={"kubernetes.io/hostname": names[-1]},
                                                      terminationGracePeriodSeconds=0))
            made.append(probe)
            wait_for(lambda p=probe: core.read_namespaced_pod(p, namespace).spec.node_name, 60, 0.1,
                     what=f"{sched} to see the nodes")
        messages: dict[str, dict[str, str]] = {}
        for case, (extra, _) in PREFILTER_CASES.items():
            spec = json.loads(json.dumps(extra).replace("<tag>", tag))
            for sched, short, policy in schedulers:
                name = f"vp-{tag}-{case}-{short}"
                core.create_namespaced_pod(namespace, pod(name, namespace, scheduler=sched,
                                                          labels={POLICY_LABEL: policy} if policy else None,
                                                          terminationGracePeriodSeconds=0, **spec))
                made.append(name)

                def refused(name=name):
                    evs = events_for(core, namespace, name, "FailedScheduling")
                    return evs[0].message if evs else None

                msg = wait_for(refused, 60, 0.2, what=f"{sched} to refuse {name}")
                p = core.read_namespaced_pod(name, namespace)
                assert not p.spec.node_name and not p.status.nominated_node_name, (case, sched, p.status)
                messages.setdefault(case, {})[short] = msg.replace(tag, "<tag>")
        lines = []
        for case, m in messages.items():
            same = m["ours"] == m["dra"] and m["ours-no-dra"] == m["up"]
            lines.append(f"  {case}: {'same' if same else 'DIFFERENT'}: upstream {m['dra']!r}, without "
                         f"DynamicResources {m['up']!r}" + ("" if same else f"; ours {m['ours']!r}, without "
                                                            f"DynamicResources {m['ours-no-dra']!r}"))
        print("\nPreFilter rejections:\n" + "\n".join(lines))
        assert all(m["ours"] == m["dra"] and m["ours-no-dra"] == m["up"] for m in messages.values()), \
            "\n".join(lines)
        # upstream's PostFilters added their parts (so the comparisons are not vacuous)
        assert all(" preemption: " in m["up"] for m in messages.values()), "\n".join(lines)
        assert sum(m["dra"].endswith(". not found") for m in messages.values()) >= 3, "\n".join(lines)
    finally:
        for name in made:
            try:
                core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            except ApiException:
                pass
        for claim in claims:
            try:
                core.delete_namespaced_persistent_volume_claim(claim, namespace)
            except ApiException:
                pass
        for name in names:
            try:
                core.delete_node(name)
            except ApiException:
                pass
        try:
            client.CustomObjectsApi(api).delete_cluster_custom_object("policy-scheduler.io", "v1alpha1",
                                                                      "schedulingpolicies", NO_DRA_POLICY)
        except ApiException:
            pass
