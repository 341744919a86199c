"""`simulate` with PodGroups: a snapshot of twenty Kubernetes PodGroups (scheduling.k8s.io, the
GangScheduling plugin) and their pending pods, simulated, then scheduled by the live operator; the
two must agree.

On the real control plane the e2e suite starts (GenericWorkload and TopologyAwareWorkloadScheduling
on, scheduling.k8s.io served): sixteen nodes of this test's pool in four racks (node label
``rack``) of different sizes, 4 x 16, 4 x 16, 4 x 32 and 4 x 8 cpus; the contents of
``policies/gang.yaml`` as a policy of this test's own scheduler name; twenty PodGroups in one
namespace, of mixed sizes: gangs with ``schedulingConstraints.topology: [{key: rack}]``, gangs
without, a basic group, and two that cannot be placed at all (a rack gang larger than the largest
rack, a gang whose pods need more cpu than any node has). All their pods are created while no
operator of this scheduler name runs (they stay pending), then:

1. ``policy-scheduler snapshot`` writes the cluster: the PodGroups (in the version the API
   serves) and the pending pods are in it;
2. ``policy-scheduler simulate --snapshot ... --pending --seed SEED --json`` places them;
3. an operator of the scheduler name is started fresh with ``run --seed SEED`` (its first LIST
   queues the pending pods in name order, the order of the snapshot's ``pendingPods``) and
   schedules them; we wait until every group that the simulation placed whole is bound whole and
   the others have said why they are not placed (their PodGroupInitiallyScheduled condition is
   False, or their pods' FailedScheduling events).

Compared per group: placed whole or not, the same on both sides; a rack group in the same rack; the
PodGroupInitiallyScheduled condition the operator writes (status, reason, message) is the one the
simulation reports; and per pod, the same node where the simulation found the best node unique. Ties between equally
good nodes are drawn from ``random.Random(SEED)`` on both sides, so the nodes of tied pods match
too when both sides take the same cycles in the same order (counted and printed, not asserted).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from conftest import ROOT, OperatorProcess
from helpers import apply_policy, events_for, pod, ready_condition, wait_for

SCHED = "wgang-sched"
POLICY = "wgang"
SEED = 7
PG_GROUP, PG_PLURAL = "scheduling.k8s.io", "podgroups"
PG_VERSION = localcluster.GANG_API_VERSION
POOL = "e2e.policy-scheduler.io/whatif-gang-pool"
CONDITION = "PodGroupInitiallyScheduled"
RACKS = {"r0": "16", "r1": "16", "r2": "32", "r3": "8"}  # rack -> cpu of each of its 4 nodes

# name -> (pods, cpu per pod, minCount, topology key or None, "gang" or "basic"); every group fits
# alone but for the last two; together they use about half of the pool (288 cpu)
GROUPS: dict[str, tuple[int, str, int, str | None, str]] = {
    "g00-rack": (4, "2", 4, "rack", "gang"),
    "g01-rack": (8, "2", 8, "rack", "gang"),
    "g02-rack": (6, "4", 6, "rack", "gang"),
    "g03-rack": (3, "4", 3, "rack", "gang"),
    "g04-rack": (10, "2", 10, "rack", "gang"),
    "g05-rack": (2, "8", 2, "rack", "gang"),
    "g06-rack": (4, "3", 3, "rack", "gang"),
    "g07": (2, "1", 2, None, "gang"),
    "g08": (3, "1", 3, None, "gang"),
    "g09": (4, "1", 4, None, "gang"),
    "g10": (5, "1", 5, None, "gang"),
    "g11": (2, "2", 2, None, "gang"),
    "g12": (3, "2", 2, None, "gang"),
    "g13": (4, "500m", 4, None, "gang"),
    "g14": (2, "3", 2, None, "gang"),
    "g15": (3, "1500m", 3, None, "gang"),
    "g16": (2, "1", 1, None, "basic"),
    "g17": (4, "1", 4, "rack", "gang"),
    "x18-too-big-rack": (40, "4", 40, "rack", "gang"),  # 160 cpu: more than the largest rack (128)
    "x19-too-big-pod": (2, "40", 2, None, "gang"),  # no node has 40 cpu
}
CANNOT_FIT = {"x18-too-big-rack", "x19-too-big-pod"}


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "policy_scheduler.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def group_body(name: str, namespace: str) -> dict:
    _, _, min_count, topology, kind = GROUPS[name]
    spec: dict = {"schedulingPolicy": {"gang": {"minCount": min_count}} if kind == "gang" else {"basic": {}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {"apiVersion": f"{PG_GROUP}/{PG_VERSION}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def member_bodies(name: str, namespace: str, pool: str) -> list[dict]:
    n, cpu, *_ = GROUPS[name]
    out = []
    for i in range(n):
        body = pod(f"{name}-{i:02d}", namespace, cpu=cpu, memory="256Mi", scheduler=SCHED,
                   labels={"policy-scheduler.io/policy": POLICY}, nodeSelector={POOL: pool})
        body["spec"]["schedulingGroup"] = {"podGroupName": name}
        out.append(body)
    return out


@pytest.fixture
def gang_pool(core, nodes, policies, crd, namespace):
    """The racks, and the policy (policies/gang.yaml's plugins) for this test's scheduler name."""
    pool = f"wg-{namespace[-6:]}"
    for rack, cpu in RACKS.items():
        for i in range(4):
            nodes(f"{pool}-{rack}-n{i}", cpu=cpu, memory="128Gi", labels={POOL: pool, "rack": f"{pool}-{rack}"})
    body = next(d for d in yaml.safe_load_all((ROOT / "policies" / "gang.yaml").read_text())
                if d and d.get("kind") == "SchedulingPolicy")
    apply_policy(policies, POLICY, body["spec"]["plugins"], schedulerName=SCHED,
                 **{k: v for k, v in body["spec"].items() if k not in ("plugins", "schedulerName")})
    yield pool
    try:
        policies.delete_cluster_custom_object("policy-scheduler.io", "v1alpha1", "schedulingpolicies", POLICY)
    except ApiException:
        pass


def live_condition(objs, namespace: str, name: str) -> dict:
    st = objs.get_namespaced_custom_object(PG_GROUP, PG_VERSION, namespace, PG_PLURAL, name).get("status") or {}
    return next((c for c in st.get("conditions") or [] if c.get("type") == CONDITION), {})


def test_simulated_groups_are_placed_as_the_operator_places_them(cluster, api, core, namespace, gang_pool,
                                                                  policies, tmp_path):
    objs = client.CustomObjectsApi(api)
    try:
        objs.list_namespaced_custom_object(PG_GROUP, PG_VERSION, namespace, PG_PLURAL)
    except ApiException as e:
        pytest.fail(f"{PG_GROUP}/{PG_VERSION} PodGroups are not served ({e.status}): the e2e control plane must "
                    "run with the GenericWorkload gate (hack/localcluster.py --gangs)")
    kubeconfig = str(cluster.kubeconfig_path)
    for name in GROUPS:
        objs.create_namespaced_custom_object(PG_GROUP, PG_VERSION, namespace, PG_PLURAL, group_body(name, namespace))
    pods = [b for name in GROUPS for b in member_bodies(name, namespace, gang_pool)]
    for body in pods:
        core.create_namespaced_pod(namespace, body)
    names = [b["metadata"]["name"] for b in pods]
    group_of = {b["metadata"]["name"]: b["spec"]["schedulingGroup"]["podGroupName"] for b in pods}

    # 1. the snapshot: the groups and the pending pods (no operator of SCHED runs yet)
    t0 = time.monotonic()
    snap_path = tmp_path / "gangs.json"
    p = cli("snapshot", "--kubeconfig", kubeconfig, "--scheduler-name", SCHED, "-o", str(snap_path))
    assert p.returncode == 0, p.stderr
    doc = json.loads(snap_path.read_text())
    mine = [g for g in doc["podGroups"] if g["metadata"].get("namespace") == namespace]
    assert sorted(g["metadata"]["name"] for g in mine) == sorted(GROUPS), doc.get("podGroupsVersion")
    assert doc["podGroupsVersion"] == PG_VERSION
    pending = [x["metadata"]["name"] for x in doc["pendingPods"] if x["metadata"].get("namespace") == namespace]
    assert sorted(pending) == sorted(names)
    assert not [x for x in doc["pendingPods"] if x["metadata"].get("namespace") != namespace], \
        "pending pods of this scheduler name from elsewhere"

    # 2. the simulation
    t1 = time.monotonic()
    p = cli("simulate", "--snapshot", str(snap_path), "--policy", POLICY, "--pending", "--seed", str(SEED),
            "--json")
    assert p.returncode == 0, p.stderr
    run = json.loads(p.stdout)["policies"][POLICY]
    sim_nodes = {x["pod"].split("/", 1)[1]: x for x in run["placements"]}
    sim_groups = {g["podGroup"].split("/", 1)[1]: g for g in run.get("podGroups") or []}
    assert sorted(sim_groups) == sorted(GROUPS), run.get("podGroups")
    t_sim = time.monotonic() - t1
    for name in CANNOT_FIT:
        assert not sim_groups[name]["whole"] and sim_groups[name]["placed"] == 0, sim_groups[name]
        assert sim_groups[name]["message"], sim_groups[name]
    whole_sim = {n for n, g in sim_groups.items() if g["whole"]}

    # 3. the live operator, fresh, with the same seed
    op = OperatorProcess(cluster, SCHED, log_name=f"{SCHED}-{namespace[-6:]}",
                         extra=["--leader-elect=false", "--seed", str(SEED)]).start(wait=False)
    try:
        op.wait_synced()
        wait_for(lambda: (ready_condition(policies, POLICY) or {}).get("status") == "True", 30,
                 what=f"policy {POLICY} Ready")
        t2 = time.monotonic()

        def live_bound() -> dict[str, str]:
            return {x.metadata.name: x.spec.node_name for x in core.list_namespaced_pod(namespace).items
                    if x.metadata.name in group_of and x.spec.node_name}

        def settled():
            bound = live_bound()
            for g in GROUPS:
                n = GROUPS[g][0]
                got = sum(1 for k in bound if group_of[k] == g)
                if g in whole_sim and got < n:
                    return None  # the simulation placed it whole: wait for all of it
            # the others: bound whole (a disagreement, reported below) or said why not
            for g in set(GROUPS) - whole_sim:
                got = sum(1 for k in bound if group_of[k] == g)
                if got == GROUPS[g][0]:
                    continue
                if live_condition(objs, namespace, g).get("status") == "False":
                    continue
                if any(events_for(core, namespace, k, "FailedScheduling") for k in group_of if group_of[k] == g):
                    continue
                return None
            return bound

        try:
            live = wait_for(settled, 90, 0.5, what="the operator to place or reject every group")
        except AssertionError:
            live = live_bound()
        time.sleep(2)  # a group that was to be rejected is not placed late
        live = live_bound()
        t_live = time.monotonic() - t2
        # the PodGroupInitiallyScheduled condition the operator wrote is the one the simulation reports
        conditions = {}
        for g in GROUPS:
            want = (sim_groups[g].get("condition") or {}).get("status")
            if want:
                conditions[g] = wait_for(lambda: (c := live_condition(objs, namespace, g)).get("status") == want
                                         and c or None, 20, what=f"PodGroup {g}'s {CONDITION} {want}")
        assert "Traceback" not in op.log(), op.log()[-3000:]
    finally:
        op.stop()

    # 4. the comparison
    rows, wrong = [], []
    for g, (n, cpu, mc, topo, kind) in GROUPS.items():
        members = [k for k in names if group_of[k] == g]
        live_n = sum(1 for k in members if k in live)
        live_whole = live_n == n
        sg = sim_groups[g]
        live_racks = sorted({live[k].rsplit("-n", 1)[0].rsplit("-", 1)[1] for k in members if k in live})
        sim_racks = sorted({sim_nodes[k]["node"].rsplit("-n", 1)[0].rsplit("-", 1)[1]
                            for k in members if sim_nodes[k]["node"]})
        rows.append(f"{g:18} {kind:5} {n:>2}x{cpu:>4} min {mc:>2} {topo or '-':4}  sim {sg['placed']:>2}/{n} "
                    f"{','.join(sim_racks) or '-':8} live {live_n:>2}/{n} {','.join(live_racks) or '-':8}")
        if sg["whole"] != live_whole:
            wrong.append(f"{g}: simulated {'whole' if sg['whole'] else 'not whole'} ({sg['placed']}/{n}: "
                         f"{sg['message']}), live {live_n}/{n}")
        elif topo and live_whole and sim_racks != live_racks:
            wrong.append(f"{g}: simulated in rack {sim_racks}, live in {live_racks}")
    unique = [k for k in names if sim_nodes[k]["node"] and sim_nodes[k].get("uniqueBest") and k in live]
    unique_same = [k for k in unique if sim_nodes[k]["node"] == live[k]]
    both = [k for k in names if sim_nodes[k]["node"] and k in live]
    same = [k for k in both if sim_nodes[k]["node"] == live[k]]
    print(f"\n{len(GROUPS)} PodGroups, {len(names)} pods: simulated {len(whole_sim)} groups whole "
          f"({sum(1 for x in sim_nodes.values() if x['node'])} pods placed, {run.get('cycles')} cycles) in "
          f"{t_sim:.1f}s; the operator bound {len(live)} pods in {t_live:.1f}s; snapshot + simulation "
          f"{t1 - t0 + t_sim:.1f}s")
    print(f"pods on the same node: {len(unique_same)}/{len(unique)} whose best node was unique, "
          f"{len(same)}/{len(both)} of all placed on both sides")
    print("\n".join(rows))
    assert not wrong, "simulation and operator disagree:\n" + "\n".join(wrong) + "\n" + "\n".join(rows)
    for g in CANNOT_FIT:
        assert not any(k in live for k in names if group_of[k] == g)
        assert sim_groups[g]["condition"]["status"] == "False", sim_groups[g]
    for g, cond in conditions.items():
        sim_cond = sim_groups[g]["condition"]
        assert (cond["status"], cond["reason"], cond.get("message") or "") == \
            (sim_cond["status"], sim_cond["reason"], sim_cond.get("message") or ""), (g, cond, sim_cond)
    assert unique_same == unique, [(k, sim_nodes[k]["node"], live[k]) for k in unique if k not in unique_same]
