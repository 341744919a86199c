"""Parity with kube-scheduler v1.37.1 on how requests are counted: pod-level resources, init
containers, sidecars, containers without requests (the non-zero defaults), and bound pods in the
middle of an in-place resize (their status's allocatedResources and resources.requests, the
PodResizePending condition Deferred or Infeasible, the pod-level status).

Seeded: plain nodes (no kwok, so nothing but this test writes pod status) hold bound pods whose
status the test writes as a kubelet would; then pods are placed one at a time, first by
policy-scheduler (its node and decision recorded, the pod deleted), then by kube-scheduler (kept),
as test_parity.py does; every few pods a bound pod's resize moves on (its status rewritten), so
both schedulers also follow resizes. Compared: the node wherever our best node is unique, and
the FailedScheduling message (PodScheduled condition) of pods neither can place.

RESIZE_PARITY_SEED, RESIZE_PARITY_PODS and RESIZE_PARITY_NODES change the world."""

from __future__ import annotations

import json
import os
import random
import re
import secrets

import yaml
from kubernetes.client.rest import ApiException

import test_parity as tp
from helpers import apply_policy, events_for, priority_classes, ready_condition, wait_for

SEED = int(os.environ.get("RESIZE_PARITY_SEED", "20260137"))
NUM_PODS = int(os.environ.get("RESIZE_PARITY_PODS", "60"))
NUM_NODES = int(os.environ.get("RESIZE_PARITY_NODES", "8"))
HOST = "kubernetes.io/hostname"
CPUS = ("100m", "250m", "500m", "1", "1500m", "2")
MEMS = ("64Mi", "128Mi", "512Mi", "1Gi", "2Gi")


def milli(q: str) -> int:
    return int(float(q[:-1])) if q.endswith("m") else int(float(q) * 1000)


def mib(q: str) -> int:
    return int(q[:-2]) * (1024 if q.endswith("Gi") else 1)


def requests(rng: random.Random) -> dict | None:
    """A container's requests: sometimes none, sometimes cpu or memory only (the defaults)."""
    r = rng.random()
    if r < 0.2:
        return None
    req = {"cpu": rng.choice(CPUS), "memory": rng.choice(MEMS)}
    if r < 0.4:
        req.pop(rng.choice(("cpu", "memory")))
    return req


def container(name: str, req: dict | None, sidecar: bool = False) -> dict:
    c: dict = {"name": name, "image": "registry.local/parity/app:1"}
    if req is not None:
        c["resources"] = {"requests": req}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def make_spec(rng: random.Random, tag: str) -> dict:
    """Containers, init containers and sidecars with assorted requests, sometimes pod-level
    requests (at least the containers' sum, as validation wants), sometimes overhead-free."""
    containers = [container(f"c{i}", requests(rng)) for i in range(rng.choice((1, 1, 2, 3)))]
    inits = []
    for i in range(rng.choice((0, 0, 1, 2))):
        inits.append(container(f"i{i}", requests(rng), sidecar=rng.random() < 0.5))
    spec: dict = {"containers": containers, "nodeSelector": {"parity": tag}, "terminationGracePeriodSeconds": 0}
    if inits:
        spec["initContainers"] = inits
    if rng.random() < 0.35:
        level = {}
        for res, pick, unit in (("cpu", CPUS, milli), ("memory", MEMS, mib)):
            if rng.random() < 0.75:
                # at least the containers' aggregate (validation): sidecars add to the sum and to
                # every later init container's usage
                def req(c: dict) -> int:
                    q = (c.get("resources") or {}).get("requests", {}).get(res)
                    return unit(q) if q else 0
                total, sidecars, peak = sum(req(c) for c in containers), 0, 0
                for c in inits:
                    if c.get("restartPolicy") == "Always":
                        sidecars += req(c)
                        total += req(c)
                        peak = max(peak, sidecars)
                    else:
                        peak = max(peak, sidecars + req(c))
                want = max(total, peak) + unit(rng.choice(pick))
                level[res] = f"{want}m" if res == "cpu" else f"{want}Mi"
        if level:
            spec["resources"] = {"requests": level}
    return spec


def resize_status(rng: random.Random, spec: dict) -> dict:
    """A kubelet's status for a pod being resized: per container (and sidecar) the allocated and
    actuated requests, either the spec's or another size; sometimes the pod level's; sometimes a
    PodResizePending condition (Deferred or Infeasible)."""
    def other(req: dict | None) -> dict:
        out = dict(req or {})
        for res, pick in (("cpu", CPUS), ("memory", MEMS)):
            if rng.random() < 0.6:
                out[res] = rng.choice(pick)
        return out

    def cstatus(c: dict) -> dict:
        st: dict = {"name": c["name"], "image": c["image"], "imageID": "", "ready": True, "restartCount": 0,
                    "started": True, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
        spec_req = (c.get("resources") or {}).get("requests")
        r = rng.random()
        if r < 0.25:
            return st  # no status resources: the spec counts
        alloc = other(spec_req)
        st["allocatedResources"] = alloc
        if r < 0.8:
            st["resources"] = {"requests": other(alloc) if rng.random() < 0.4 else alloc}
        return st

    status: dict = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [cstatus(c) for c in spec["containers"]]}
    inits = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    if inits:
        status["initContainerStatuses"] = [cstatus(c) for c in inits]
    r = rng.random()
    if r < 0.2:
        status["conditions"].append({"type": "PodResizePending", "status": "True", "reason": "Deferred",
                                     "message": "node is full"})
    elif r < 0.4:
        status["conditions"].append({"type": "PodResizePending", "status": "True", "reason": "Infeasible",
                                     "message": "too big"})
    if spec.get("resources") and rng.random() < 0.5:
        level = other(spec["resources"]["requests"])
        status["resources"] = {"requests": level}
        if rng.random() < 0.7:
            status["allocatedResources"] = other(level)
    return status


def make_nodes(rng: random.Random, tag: str) -> list[dict]:
    nodes = []
    for i in range(NUM_NODES):
        name = f"rparity-{tag}-{i:02d}"
        alloc = {"cpu": str(rng.choice((4, 6, 8))), "memory": f"{rng.choice((8, 12, 16))}Gi", "pods": "20"}
        nodes.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "labels": {HOST: name, "parity": tag}},
                      "status": {"capacity": alloc, "allocatable": alloc, "conditions": [
                          {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "plain"}]}})
    return nodes


def without_overcommit(policies) -> list[dict]:
    """Delete the policies that overcommit (an earlier module's examples: dept-analytics) and
    return them. While one exists, NodeResourcesFit words a node already past its allocatable as
    `(node already over its allocatable cpu: overcommitted)`, our documented addition to
    upstream's message; a node in the middle of a resize is past it too, so the messages are
    compared without such a policy, as in a cluster that has none."""
    from helpers import GROUP, PLURAL, VERSION

    gone = [p for p in policies.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
            if (p.get("spec") or {}).get("overcommit")]
    for p in gone:
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, p["metadata"]["name"])
    names = {p["metadata"]["name"] for p in gone}
    wait_for(lambda: not names & {p["metadata"]["name"] for p in policies.list_cluster_custom_object(
        GROUP, VERSION, PLURAL)["items"]}, 30, what="the overcommitting policies deleted")
    return gone


def restore(policies, gone: list[dict]) -> None:
    for p in gone:
        spec = dict(p["spec"])
        apply_policy(policies, p["metadata"]["name"], spec.pop("plugins"), **spec)


def test_requests_counted_as_kube_scheduler_counts_them(cluster, core, operator, policies, namespace):
    default = yaml.safe_load((tp.ROOT / "policies" / "default.yaml").read_text())
    apply_policy(policies, "default", default["spec"]["plugins"])
    wait_for(lambda: (ready_condition(policies, "default") or {}).get("status") == "True", 30,
             what="policy default Ready")
    gone = without_overcommit(policies)
    started = "kube-scheduler" not in cluster.state.get("procs", {})
    if started:
        cluster.start_scheduler()

    rng = random.Random(SEED)
    tag = f"r-{secrets.token_hex(3)}"
    nodes = make_nodes(rng, tag)
    names = [n["metadata"]["name"] for n in nodes]
    outcomes: list[tp.Outcome] = []
    bound: list[tuple[str, dict]] = []
    try:
        for n in nodes:
            core.create_node(n)
        # bound pods in the middle of resizes, one to three per node
        for j, node_name in enumerate(names):
            for k in range(rng.choice((1, 2, 3))):
                name = f"held-{j}-{k}"
                spec = {**make_spec(rng, tag), "nodeName": node_name}
                core.create_namespaced_pod(namespace, tp.pod_body(name, namespace, tp.OURS, {"held": "1"}, spec))
                core.patch_namespaced_pod_status(name, namespace, {"status": resize_status(rng, spec)})
                bound.append((name, spec))
        # both schedulers have every node and every held pod's status once they bind a pod that
        # only the last node admits (pod events arrive in resourceVersion order)
        probe = {"containers": [{"name": "c", "image": tp.UNCACHED}], "nodeSelector": {HOST: names[-1]},
                 "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0}
        for sched in (tp.OURS, tp.UPSTREAM):
            got = tp.place(core, namespace, f"probe-{sched}", sched, {}, probe, timeout=60)
            assert got.spec.node_name == names[-1], f"{sched} did not see the parity nodes"
            tp.delete_and_wait(core, namespace, f"probe-{sched}")

        for i in range(NUM_PODS):
            if i % 4 == 3:  # a held pod's resize moves on
                name, spec = rng.choice(bound)
                core.patch_namespaced_pod_status(name, namespace, {"status": resize_status(rng, spec)})
            labels, spec = {"parity": tag, "app": f"a{i % 3}"}, make_spec(rng, tag)
            o = tp.Outcome(i, labels, spec)
            ours = tp.place(core, namespace, f"p{i:02d}-ours", tp.OURS, labels, spec)
            if ours.spec.node_name:
                o.ours = ours.spec.node_name
                o.decision = json.loads((ours.metadata.annotations or {})[tp.DECISION])
            else:
                o.messages.append(tp.unschedulable_message(ours))
            tp.delete_and_wait(core, namespace, f"p{i:02d}-ours")
            up = tp.place(core, namespace, f"p{i:02d}-upstream", tp.UPSTREAM, labels, spec)
            if up.spec.node_name:
                o.upstream = up.spec.node_name
            else:
                o.messages.append(tp.unschedulable_message(up))
                tp.delete_and_wait(core, namespace, f"p{i:02d}-upstream")
            outcomes.append(o)
    finally:
        restore(policies, gone)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60, what="parity pods deleted")
        for n in names:
            try:
                core.delete_node(n)
            except ApiException as e:
                if e.status != 404:
                    raise
        if started:
            cluster.stop("kube-scheduler")

    unique = [o for o in outcomes if o.unique_best]
    both_placed = [o for o in outcomes if o.ours and o.upstream]
    disagree = [o for o in unique if o.ours != o.upstream]
    neither = [o for o in outcomes if o.ours is None and o.upstream is None]
    one_only = [o for o in outcomes if (o.ours is None) != (o.upstream is None)]
    bad_msgs = [o for o in neither if o.messages[0] != o.messages[1]]
    print(f"\nresize parity: {len(outcomes)} pods on {NUM_NODES} nodes with {len(bound)} held pods (seed {SEED}); "
          f"placed by both {len(both_placed)}, best unique {len(unique)}, same node {len(unique) - len(disagree)}; "
          f"unschedulable for both {len(neither)} (same message {len(neither) - len(bad_msgs)}), "
          f"for one only {len(one_only)}")
    for o in disagree + one_only + bad_msgs:
        print(f"  pod {o.index:02d} ours={o.ours} upstream={o.upstream}: {json.dumps(o.spec)}")
        for m in o.messages:
            print(f"    {m}")
        for t in (o.decision or {}).get("top") or []:
            print(f"    {t['node']}: total={t['total']} {t['scores']}")
    assert len(unique) >= NUM_PODS // 3, f"only {len(unique)} pods had a unique best node"
    assert neither, "no pod was unschedulable for both: the messages were never compared"
    assert not disagree and not one_only and not bad_msgs


# ---------------------------------------------------------------------------------------------
# preemption: victims counted as their node holds them

PCASES = int(os.environ.get("RESIZE_PREEMPTION_CASES", "6"))
FORMS = ("plain", "pod-level", "shrinking", "deferred", "infeasible")


def filler_body(name: str, node_name: str, pclass: str, cpu: int, form: str, tag: str) -> tuple[dict, dict]:
    """(pod, status) of a filler the node counts at ``cpu`` millicores, written in ``form``:
    plainly, as a pod-level request over a smaller container, as a resize down the kubelet has not
    actuated (spec 250m less), as a Deferred resize up (spec ``cpu``, held 250m less), or as an
    Infeasible resize up (spec 1 cpu more, held ``cpu``)."""
    spec_cpu, held, level, reason = cpu, None, None, None
    if form == "pod-level":
        spec_cpu, level = cpu // 2, cpu
    elif form == "shrinking":
        spec_cpu, held = cpu - 250, cpu
    elif form == "deferred":
        held, reason = cpu - 250, "Deferred"
    elif form == "infeasible":
        spec_cpu, held, reason = cpu + 1000, cpu, "Infeasible"
    spec: dict = {"nodeName": node_name, "priorityClassName": pclass,
                  "containers": [{"name": "c", "image": "registry.local/app:1",
                                  "resources": {"requests": {"cpu": f"{spec_cpu}m", "memory": "64Mi"}}}]}
    if level:
        spec["resources"] = {"requests": {"cpu": f"{level}m"}}
    status: dict = {"conditions": [{"type": "Ready", "status": "True"}]}
    if held is not None:
        res = {"cpu": f"{held}m", "memory": "64Mi"}
        status["containerStatuses"] = [{"name": "c", "image": "registry.local/app:1", "imageID": "", "ready": True,
                                        "restartCount": 0, "allocatedResources": res, "resources": {"requests": res}}]
    if reason:
        status["conditions"].append({"type": "PodResizePending", "status": "True", "reason": reason})
    return ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"pp": tag}}, "spec": spec},
            status)


def make_pcase(rng: random.Random) -> dict:
    n = rng.randint(2, 3)
    fillers = []
    for j in range(n):
        used = 0
        while used < 4000:  # every node exactly full as counted
            cpu = rng.choice([c for c in (500, 1000, 1500) if used + c <= 4000])
            used += cpu
            fillers.append((j, cpu, rng.choice(FORMS), rng.choice(("pp-10", "pp-20", "pp-30"))))
    minutes = rng.sample(range(len(fillers) * 3), len(fillers))
    return {"nodes": n, "fillers": fillers, "preemptor": rng.choice(("1", "1500m", "2", "3")),
            "starts": [f"2026-01-01T{m // 60:02d}:{m % 60:02d}:00Z" for m in minutes]}


def run_pworld(core, namespace: str, case: dict, scheduler: str, tag: str) -> tuple:
    """Build the case under ``tag``, let ``scheduler`` handle the preemptor: (nominated node index,
    victims, first FailedScheduling message)."""
    node_names = [f"rp-{tag}-{j}" for j in range(case["nodes"])]
    for name in node_names:
        alloc = {"cpu": "4", "memory": "16Gi", "pods": "110"}
        core.create_node({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "labels": {HOST: name, "pp": tag}},
                          "status": {"capacity": alloc, "allocatable": alloc, "conditions": [
                              {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}]}})
    try:
        for k, (j, cpu, form, pclass) in enumerate(case["fillers"]):
            body, status = filler_body(f"{tag}-f{k:02d}", node_names[j], pclass, cpu, form, tag)
            core.create_namespaced_pod(namespace, body)
            core.patch_namespaced_pod_status(body["metadata"]["name"], namespace,
                                             {"status": {**status, "startTime": case["starts"][k]}})
        probe = f"{tag}-probe"
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": probe, "labels": {"pp": tag}},
            "spec": {"schedulerName": scheduler, "nodeSelector": {HOST: node_names[-1]},
                     "terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "registry.local/app:1"}]}})
        wait_for(lambda: core.read_namespaced_pod(probe, namespace).spec.node_name, 60, 0.1,
                 what=f"{scheduler} to see the world")
        core.delete_namespaced_pod(probe, namespace, grace_period_seconds=0)
        wait_for(lambda: probe not in {p.metadata.name for p in core.list_namespaced_pod(
            namespace, label_selector=f"pp={tag}").items}, 30, 0.1, what="the probe gone")
        name = f"{tag}-pre"
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"pp": tag}},
            "spec": {"schedulerName": scheduler, "priorityClassName": "pp-1000", "nodeSelector": {"pp": tag},
                     "containers": [{"name": "c", "image": "registry.local/app:1",
                                     "resources": {"requests": {"cpu": case["preemptor"], "memory": "64Mi"}}}]}})
        found = re.compile(r"preemption: found a potential placement for pod on node (\S+), preempting (\d+) victims")

        def terminating() -> frozenset[str]:
            return frozenset(p.metadata.name.rsplit("-", 1)[1] for p in core.list_namespaced_pod(
                namespace, label_selector=f"pp={tag}").items
                if p.metadata.deletion_timestamp and p.metadata.name not in (name, probe))

        def settled():
            ev = events_for(core, namespace, name, "FailedScheduling")
            msg = ev[0].message if ev else None
            if msg is None or "preemption:" not in msg:
                return None
            m = found.search(msg)
            if m is None:
                return None, terminating(), msg
            nominated = core.read_namespaced_pod(name, namespace).status.nominated_node_name
            victims = terminating()
            if nominated != m.group(1) or len(victims) != int(m.group(2)):
                return None
            return node_names.index(nominated), victims, msg

        node, victims, msg = wait_for(settled, 60, 0.2, what=f"{scheduler}'s outcome for {name}")
        return node, victims, msg.replace(tag, "<tag>")
    finally:
        core.delete_collection_namespaced_pod(namespace, label_selector=f"pp={tag}", grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector=f"pp={tag}").items, 60,
                 what="the world's pods gone")
        for n in node_names:
            core.delete_node(n)


def test_preemption_counts_victims_as_kube_scheduler_does(cluster, api, core, operator, policies, namespace):
    """Full nodes whose pods are counted through pod-level requests and resizes in every state;
    a higher-priority pod preempts: the same nominated node, victims and message as upstream's
    (where upstream agrees with itself over two runs: its ties are random)."""
    default = yaml.safe_load((tp.ROOT / "policies" / "default.yaml").read_text())
    apply_policy(policies, "default", default["spec"]["plugins"])
    wait_for(lambda: (ready_condition(policies, "default") or {}).get("status") == "True", 30,
             what="policy default Ready")
    classes = priority_classes(api, {"pp-10": (10, None), "pp-20": (20, None), "pp-30": (30, None),
                                     "pp-1000": (1000, None)})
    next(classes)
    started = "kube-scheduler" not in cluster.state.get("procs", {})
    if started:
        cluster.start_scheduler()
    rng = random.Random(SEED)
    cases = [make_pcase(rng) for _ in range(PCASES)]
    run = secrets.token_hex(2)
    unique, lines, differ = 0, [], 0
    try:
        for i, case in enumerate(cases):
            up1 = run_pworld(core, namespace, case, tp.UPSTREAM, f"{run}-{i}a")
            up2 = run_pworld(core, namespace, case, tp.UPSTREAM, f"{run}-{i}b")
            ours = run_pworld(core, namespace, case, tp.OURS, f"{run}-{i}c")
            forms = ",".join(sorted({f for _, _, f, _ in case["fillers"]}))
            if up1 != up2:
                lines.append(f"  case {i} [{forms}]: upstream not unique ({up1} / {up2})")
                continue
            unique += 1
            differ += ours != up1
            lines.append(f"  case {i} [{forms}]: {'same' if ours == up1 else 'DIFFERENT'}: upstream {up1}"
                         + ("" if ours == up1 else f"; ours {ours}"))
    finally:
        if started:
            cluster.stop("kube-scheduler")
        next(classes, None)
    print(f"\nresize preemption parity: {PCASES} cases (seed {SEED}); upstream unique on {unique}; "
          f"same outcome on {unique - differ}/{unique}")
    print("\n".join(lines))
    assert unique >= PCASES // 2
    assert not differ, "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# what-if: a snapshot of held pods in the middle of resizes, replayed on kube-scheduler's states

def test_whatif_counts_requests_as_kube_scheduler_does(cluster, core, operator, policies, namespace, tmp_path):
    """`policy-scheduler snapshot` of nodes holding pods in the middle of resizes (and pods with
    pod-level requests, sidecars, init containers), then pods placed one by one by kube-scheduler
    (kept); the simulation of the same pods on the snapshot, each decided on kube-scheduler's
    state so far (``follow``), picks kube-scheduler's node wherever its best node is unique, and
    leaves the pods kube-scheduler could not place unplaced."""
    import asyncio
    import subprocess
    import sys

    from policy_scheduler.whatif import snapshot as snapmod
    from policy_scheduler.whatif.simulate import run_policy
    from policy_scheduler.whatif.world import World

    default = yaml.safe_load((tp.ROOT / "policies" / "default.yaml").read_text())
    apply_policy(policies, "default", default["spec"]["plugins"])
    wait_for(lambda: (ready_condition(policies, "default") or {}).get("status") == "True", 30,
             what="policy default Ready")
    started = "kube-scheduler" not in cluster.state.get("procs", {})
    if started:
        cluster.start_scheduler()
    rng = random.Random(SEED + 1)
    tag = f"w-{secrets.token_hex(3)}"
    nodes = make_nodes(rng, tag)
    names = [n["metadata"]["name"] for n in nodes]
    pods = []
    upstream: dict[str, str | None] = {}
    try:
        for n in nodes:
            core.create_node(n)
        for j, node_name in enumerate(names):
            for k in range(rng.choice((1, 2, 3))):
                name = f"held-{j}-{k}"
                spec = {**make_spec(rng, tag), "nodeName": node_name}
                core.create_namespaced_pod(namespace, tp.pod_body(name, namespace, tp.OURS, {"held": "1"}, spec))
                core.patch_namespaced_pod_status(name, namespace, {"status": resize_status(rng, spec)})
        snap_path = tmp_path / "cluster.json"
        p = subprocess.run([sys.executable, "-m", "policy_scheduler.cli", "snapshot", "--kubeconfig",
                            str(cluster.kubeconfig_path), "--scheduler-name", tp.OURS, "-o", str(snap_path)],
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        probe = {"containers": [{"name": "c", "image": tp.UNCACHED}], "nodeSelector": {HOST: names[-1]},
                 "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0}
        got = tp.place(core, namespace, "probe", tp.UPSTREAM, {}, probe, timeout=60)
        assert got.spec.node_name == names[-1]
        tp.delete_and_wait(core, namespace, "probe")
        for i in range(NUM_PODS // 2):
            labels, spec = {"parity": tag, "app": f"a{i % 3}"}, make_spec(rng, tag)
            name = f"w{i:02d}"
            pods.append(tp.pod_body(name, namespace, tp.OURS, labels, spec))
            up = tp.place(core, namespace, name, tp.UPSTREAM, labels, spec)
            upstream[name] = up.spec.node_name or None
            if not up.spec.node_name:
                tp.delete_and_wait(core, namespace, name)
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60, what="parity pods deleted")
        for n in names:
            try:
                core.delete_node(n)
            except ApiException as e:
                if e.status != 404:
                    raise
        if started:
            cluster.stop("kube-scheduler")

    snap = snapmod.load(snap_path)
    assert len([x for x in snap.pods if x["metadata"]["name"].startswith("held-")]) >= NUM_NODES

    async def replay():
        world = World(snap)
        await world.prepare()
        return await run_policy(world, "default", pods,
                                follow={f"{namespace}/{n}": v for n, v in upstream.items() if v})

    results = {r.pod.split("/", 1)[1]: r for r in asyncio.run(replay()).results}
    unique = [n for n, r in results.items() if r.unique and r.node]
    differ = [n for n in unique if results[n].node != upstream[n]]
    one_only = [n for n, r in results.items() if (r.node is None) != (upstream[n] is None)]
    print(f"\nresize what-if parity: {len(pods)} pods (seed {SEED + 1}); unique {len(unique)}, same node "
          f"{len(unique) - len(differ)}; unplaced by both {sum(1 for n, r in results.items() if not r.node and not upstream[n])}"
          f", by one only {len(one_only)}")
    for n in differ + one_only:
        r = results[n]
        print(f"  {n}: simulated {r.node} {r.top[:3]} {r.message}; upstream {upstream[n]}")
    assert len(unique) >= len(pods) // 4
    assert not differ and not one_only
