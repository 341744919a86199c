"""Extended resources backed by DRA (DRAExtendedResource, GA in 1.37) against upstream: seeded cases
of 2-4 nodes with GPUs published in ResourceSlices (dra_world.py's devices), some of which also
advertise the resource through a device plugin (allocatable 1 or 2, or 0), and pods created one
at a time that ask for `drax.example.com/gpu` (DeviceClass drax-gpu, any GPU), for
`drax.example.com/a100` (drax-a100, a100s only), for the implicit
`deviceclass.resource.kubernetes.io/drax-gpu`, for a resource no class backs (only a device
plugin can serve it), in one or two containers, with an init container or a sidecar asking too,
and some with a ResourceClaim of their own besides. Run by kube-scheduler v1.37.1 (its default
profile) and by policy-scheduler's `default` policy, with kube-controller-manager's resourceclaim
controller and garbage collector (which free and delete the claims of deleted pods).

Each case's world is built three times: twice for kube-scheduler, once for policy-scheduler. Where
upstream's outcome agrees with itself across its two runs, ours must be the same: every pod's node
(index) or FailedScheduling message; the claim the scheduler created for it (its generateName,
owner, annotation, finalizer, requests; the devices allocated as (request, driver, pool's node
index, device) and the allocation's nodeSelector; who it is reserved for); the pod's
status.extendedResourceClaimStatus (request mappings, the claim's name); and the allocation of its
own claim (of a pod refused by a PreBind Error, which is retried again and again, only the
message). A case is compared up to its first pod whose best node was not unique in our decision.
At least 95% of the compared cases must agree.

A second test deletes a bound pod's pod and sees its device freed (the claim deallocated and
deleted with it) and given to the next pod."""

from __future__ import annotations

import json
import os
import random
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
from kubernetes import client, config

from dra_world import (DRIVER, RESOURCE, ClaimRef, Device, NodeSpec, Poller, Raw, World, claim_spec, cleanup,
                       create_classes, create_infra, delete_classes, node_body, pod_body, probe, unique_best)

SEED = int(os.environ.get("DRAX_PARITY_SEED", "20261129"))
CASES = int(os.environ.get("DRAX_PARITY_CASES", "24"))
OURS, UPSTREAM = "policy-scheduler", "default-scheduler"
MAX_NODES = 99
RES = "drax.example.com/gpu"  # DeviceClass drax-gpu
RES_A100 = "drax.example.com/a100"  # DeviceClass drax-a100
IMPLICIT = "deviceclass.resource.kubernetes.io/drax-gpu"
UNBACKED = "drax.example.com/fpga"  # no class: a device plugin's only
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
PREBIND_ERROR = 'running PreBind plugin "DynamicResources": '
X_CLASSES = [("drax-a100", RES_A100, [f'device.driver == "{DRIVER}"', f'device.attributes["{DRIVER}"].model == "a100"']),
             ("drax-gpu", RES, [f'device.driver == "{DRIVER}"'])]


# ---------------------------------------------------------------------------------------------
# the cases

@dataclass
class XPod:
    cpu: str
    containers: list[dict]  # {resource: count} per container
    init: dict | None = None  # an init container's requests
    sidecar: dict | None = None  # a restartable init container's requests
    claims: list[ClaimRef] = field(default_factory=list)  # a claim of its own (kind "any")


@dataclass
class XCase:
    nodes: list[NodeSpec]
    plugin: list[dict]  # per node: what its device plugin advertises
    pods: list[XPod]

    def describe(self) -> str:
        nodes = "; ".join(f"n{i} cpu {n.cpu} " + ("no slice" if n.devices is None else
                                                 ",".join(d.short() for d in n.devices)) + (f" plugin {p}" if p else "")
                          for i, (n, p) in enumerate(zip(self.nodes, self.plugin)))
        pods = "; ".join(f"p{j} {p.containers}" + (f" init {p.init}" if p.init else "")
                         + (f" sidecar {p.sidecar}" if p.sidecar else "") + (" +claim" if p.claims else "")
                         for j, p in enumerate(self.pods))
        return f"nodes [{nodes}] pods [{pods}]"


def _want(rng: random.Random) -> dict:
    res = rng.choices((RES, RES_A100, IMPLICIT, UNBACKED, "both"), weights=(6, 3, 2, 1, 1))[0]
    count = lambda: rng.choices((1, 2, 3), weights=(14, 5, 1))[0]  # noqa: E731
    return {RES: count(), RES_A100: 1} if res == "both" else {res: count()}


def make_case(rng: random.Random) -> XCase:
    n = rng.randint(2, 4)
    nodes, plugin = [], []
    for i, cpu in enumerate(rng.sample(("2", "3", "4", "6", "8"), n)):
        devs = None
        if rng.random() > 0.15:
            devs = [Device(m, rng.choice(("40Gi", "80Gi")) if m == "a100" else "16Gi", rng.choice(("pci0", "pci1")),
                           "NoSchedule" if rng.random() < 0.1 else None)
                    for m in (rng.choice(("a100", "a100", "t4")) for _ in range(rng.randint(1, 4)))]
        nodes.append(NodeSpec(cpu, ("za", "zb")[i % 2], devs))
        r = rng.random()
        plugin.append({RES: str(rng.choice((0, 1, 2)))} if r < 0.25 else {UNBACKED: "1"} if r < 0.35 else {})
    pods = []
    for j in range(rng.randint(3, 6)):
        containers = [_want(rng)] + ([_want(rng) if rng.random() < 0.5 else {}] if rng.random() < 0.25 else [])
        p = XPod(rng.choice(("500m", "1")), containers)
        if rng.random() < 0.15:
            p.init = {RES: rng.choice((1, 2))}
        if rng.random() < 0.1:
            p.sidecar = {RES: 1}
        if rng.random() < 0.15:
            p.claims = [ClaimRef("named", "any", f"{j}-0")]
        pods.append(p)
    return XCase(nodes, plugin, pods)


# ---------------------------------------------------------------------------------------------
# a world

def _requests(cpu: str | None, want: dict) -> dict:
    return {**({"cpu": cpu, "memory": "128Mi"} if cpu else {}), **{k: str(v) for k, v in want.items()}}


class XWorld(World):
    """dra_world's World (nodes, slices) with device-plugin allocatable and the pods above."""

    def nodes(self) -> list[dict]:
        out = []
        for name, n, plug in zip(self.node_names, self.case.nodes, self.case.plugin):
            body = node_body(name, n.cpu, n.zone, {**self.labels, "drap-world": self.tag})
            body["status"]["allocatable"] = {**body["status"]["allocatable"], **plug}
            body["status"]["capacity"] = dict(body["status"]["allocatable"])
            out.append(body)
        return out

    def pod(self, j: int, p: XPod, name: str) -> dict:
        body = pod_body(name, self.ns, self.scheduler, p.cpu, {"drap-world": self.tag},
                        [{"name": f"g{k}", "resourceClaimName": self._claim_name(c.ref)} for k, c in enumerate(p.claims)],
                        self.labels)
        spec = body["spec"]
        spec["containers"] = [{"name": f"c{k}", "image": "registry.local/app:1",
                               "resources": {"requests": _requests(p.cpu if k == 0 else None, w),
                                             "limits": {r: str(v) for r, v in w.items()}}}
                              for k, w in enumerate(p.containers)]
        inits = []
        if p.init:
            inits.append({"name": "init", "image": "registry.local/app:1", "resources": {
                "requests": _requests(None, p.init), "limits": {r: str(v) for r, v in p.init.items()}}})
        if p.sidecar:
            inits.append({"name": "side", "image": "registry.local/app:1", "restartPolicy": "Always", "resources": {
                "requests": _requests(None, p.sidecar), "limits": {r: str(v) for r, v in p.sidecar.items()}}})
        if inits:
            spec["initContainers"] = inits
        return body

    def run(self, raw: Raw, poller: Poller, timeout: float = 60):
        placed, ties, decided = [], [], []
        names = [f"{self.tag}-p{j}" for j in range(len(self.case.pods))]
        for j, p in enumerate(self.case.pods):
            for c in p.claims:
                self._create_claim(raw, c.ref, c.kind)
            raw.create(f"/api/v1/namespaces/{self.ns}/pods", self.pod(j, p, names[j]))

            def outcome(pods, refused, name=names[j]):
                pd = pods.get(name)
                if pd is None:
                    return None
                if pd["spec"].get("nodeName"):
                    return ("node", self.node_names.index(pd["spec"]["nodeName"])), pd
                if name in refused:
                    return ("refused", refused[name][0].replace(self.tag, "<tag>")), pd
                return None

            where, pd = poller.wait(outcome, timeout, f"pod {names[j]} bound or refused by {self.scheduler}")
            placed.append(where)
            decision = (pd["metadata"].get("annotations") or {}).get("policy-scheduler.io/decision")
            ties.append(bool(pd["spec"].get("nodeName")) and decision is not None
                        and not unique_best(json.loads(decision)))
            decided.append(decision is not None)
        index = {n: j for j, n in enumerate(names)}
        outs = []
        for j, p in enumerate(self.case.pods):
            pd = raw.req("GET", f"/api/v1/namespaces/{self.ns}/pods/{names[j]}")
            outs.append((placed[j], self.claims_of(raw, pd, names[j], p, index)))
        return XOutcome(tuple(outs), tuple(ties), tuple(decided))

    def _allocation(self, obj: dict | None, index: dict) -> tuple:
        st = (obj or {}).get("status") or {}
        alloc = st.get("allocation")
        devices = None if alloc is None else (tuple(
            (r["request"], r["driver"], self.local(r["pool"]), r["device"],
             json.dumps({k: v for k, v in r.items() if k not in ("request", "driver", "pool", "device")},
                        sort_keys=True))
            for r in alloc["devices"].get("results") or ()),
            json.dumps(alloc.get("nodeSelector"), sort_keys=True).replace(f"drap-{self.tag}-", ""))
        return devices, tuple(sorted(index.get(r["name"], -1) for r in st.get("reservedFor") or ()))

    def claims_of(self, raw: Raw, pd: dict, name: str, p: XPod, index: dict) -> tuple:
        """The pod's extended-resource claim and status, and its own claims' allocations."""
        ext = (pd.get("status") or {}).get("extendedResourceClaimStatus")
        made = [c for c in raw.req("GET", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims")["items"]
                if any(o.get("uid") == pd["metadata"]["uid"] for o in c["metadata"].get("ownerReferences") or ())]
        out = []
        for c in made:
            meta = c["metadata"]
            owner = [{**o, "name": o["name"].replace(self.tag, "<tag>"), "uid": "<pod>"}
                     for o in meta.get("ownerReferences") or ()]
            summary = {"generated": meta["name"].startswith(meta.get("generateName") or "?"),
                       "generateName": (meta.get("generateName") or "").replace(self.tag, "<tag>"),
                       "owner": owner, "annotations": meta.get("annotations"), "finalizers": meta.get("finalizers"),
                       "spec": c.get("spec"),
                       "inPodStatus": bool(ext) and ext.get("resourceClaimName") == meta["name"]}
            devices, reserved = self._allocation(c, index)
            out.append(("ext", (json.dumps(summary, sort_keys=True), devices), reserved))
        out.append(("status", json.dumps((ext or {}).get("requestMappings"), sort_keys=True), ()))
        for k, c in enumerate(p.claims):
            obj = raw.req("GET", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims/{self._claim_name(c.ref)}",
                          missing_ok=True)
            devices, reserved = self._allocation(obj, index)
            out.append((f"g{k}", devices, reserved))
        return tuple(out)


@dataclass(frozen=True)
class XOutcome:
    pods: tuple  # per pod: (placed, claims)
    ties: tuple = field(default=(), compare=False)
    decided: tuple = field(default=(), compare=False)

    def upto(self, n: int) -> tuple:
        """Up to pod ``n``. A pod refused by a PreBind Error is retried again and again (upstream's
        own case: claims of its own, and a device plugin serving its extended resource, fail to
        be recorded in its status every time): its claims are read at some point of a retry, so
        only its message is compared."""
        return tuple((placed, ("retried",) if placed[0] == "refused" and placed[1].startswith(PREBIND_ERROR) else
                      tuple((c[0], c[1], tuple(i for i in c[2] if i < n)) for c in claims))
                     for placed, claims in self.pods[:n])


# ---------------------------------------------------------------------------------------------
# fixtures and the run

@pytest.fixture(scope="module")
def dra_components(cluster):
    """kube-controller-manager with the resourceclaim controller and the garbage collector (the
    claim of a deleted pod is freed, then deleted with it), and kube-scheduler (default profile)."""
    procs = cluster.state.get("procs", {})
    had_kcm = "kube-controller-manager" in procs
    if had_kcm:
        cluster.stop("kube-controller-manager")
    cluster.start_controller_manager(controllers="resourceclaim-controller,garbage-collector-controller")
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
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig_path), client_configuration=cfg)
    cfg.connection_pool_maxsize = 96
    api = client.ApiClient(cfg)
    yield Raw(api)
    api.close()


@pytest.fixture(scope="module")
def classes(raw):
    """drax-a100 and drax-gpu, then dra_world's classes (drap-gpu last: the probe's pod allocates
    through it, so a scheduler that bound it has seen these)."""
    for name, _, _ in X_CLASSES:
        raw.req("DELETE", f"{RESOURCE}/deviceclasses/{name}", missing_ok=True)
    for name, res, sels in X_CLASSES:
        raw.create(f"{RESOURCE}/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"extendedResourceName": res, "selectors": [{"cel": {"expression": s}} for s in sels]}})
    made = create_classes(raw)
    yield
    delete_classes(raw, made + [n for n, _, _ in X_CLASSES])


def drop_extended_claims(raw: Raw, ns: str) -> None:
    """The claims the schedulers made (no label of the batch): finalizers stripped, deleted."""
    for c in raw.req("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims")["items"]:
        if (c["metadata"].get("annotations") or {}).get(ANNOTATION) != "true":
            continue
        path = f"{RESOURCE}/namespaces/{ns}/resourceclaims/{c['metadata']['name']}"
        raw.req("PATCH", path, {"metadata": {"finalizers": None}}, patch=True, missing_ok=True)
        raw.req("DELETE", path, missing_ok=True)


def batches(cases: list[XCase], room: int) -> list[list[int]]:
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


def run_batch(raw, poller, ns, run, b, cases, idx, results) -> None:
    batch = f"{run}-b{b}"
    worlds = {(i, w): XWorld(cases[i], f"{run}-{i}{w}", OURS if w == "c" else UPSTREAM, ns, run, batch)
              for i in idx for w in "abc"}
    try:
        create_infra(raw, list(worlds.values()))
        probe(raw, poller, ns, run, batch, [UPSTREAM, OURS])
        with ThreadPoolExecutor(max_workers=len(worlds)) as pool:
            futures = {key: pool.submit(w.run, raw, poller) for key, w in worlds.items()}
            for key, f in futures.items():
                try:
                    results[key] = f.result()
                except AssertionError as e:
                    results[key] = f"failed: {e}"
    finally:
        cleanup(raw, ns, batch)
        drop_extended_claims(raw, ns)


def compare(cases: list[XCase], results: dict) -> tuple[int, int, list[str], list[str]]:
    unique = agree = 0
    lines, bad = [], []
    for i, case in enumerate(cases):
        up1, up2, ours = results[(i, "a")], results[(i, "b")], results[(i, "c")]
        if not isinstance(up1, XOutcome) or not isinstance(up2, XOutcome):
            lines.append(f"  case {i}: upstream did not finish ({up1 if isinstance(up1, str) else up2})")
            continue
        if not isinstance(ours, XOutcome):
            n = len(case.pods)
            if up1.upto(n) == up2.upto(n):
                unique += 1
                lines.append(f"  case {i}: DIFFERENT: ours {ours}")
                bad.append(f"case {i} (seed {SEED}): {case.describe()}\n    ours {ours}")
            continue
        n = ours.ties.index(True) if True in ours.ties else len(case.pods)
        if n == 0 or up1.upto(n) != up2.upto(n):
            lines.append(f"  case {i}: not compared (a tie first, or upstream not unique on {n} pod(s))")
            continue
        unique += 1
        same = ours.upto(n) == up1.upto(n)
        agree += same
        lines.append(f"  case {i}: {'same' if same else 'DIFFERENT'} on its first {n} pod(s)")
        if os.environ.get("DRAX_PARITY_SHOW"):  # what was compared, pod by pod
            lines += [f"    pod {j}: {o}" for j, o in enumerate(ours.upto(n))]
        if not same:
            diffs = [f"    pod {j}: upstream {u}\n           ours     {o}"
                     for j, (u, o) in enumerate(zip(up1.upto(n), ours.upto(n))) if u != o]
            bad.append(f"case {i} (seed {SEED}): {case.describe()}\n" + "\n".join(diffs))
    return unique, agree, lines, bad


def test_same_extended_resource_outcomes_as_kube_scheduler(cluster, core, namespace, operator, example_policies,
                                                           dra_components, raw, classes):
    rng = random.Random(SEED)
    cases = [make_case(rng) for _ in range(CASES)]
    run = secrets.token_hex(2)
    groups = batches(cases, MAX_NODES - len(core.list_node().items) - 1)
    poller = Poller(raw, namespace, run).start()
    results: dict = {}
    t0 = time.monotonic()
    try:
        for b, idx in enumerate(groups):
            run_batch(raw, poller, namespace, run, b, cases, idx, results)
    finally:
        poller.stop()
    unique, agree, lines, bad = compare(cases, results)
    wrong = [f"case {i} world {w} pod {j}" for (i, w), out in sorted(results.items()) if isinstance(out, XOutcome)
             for j, ((kind, _), d) in enumerate(zip((p[0] for p in out.pods), out.decided))
             if kind == "node" and d != (w == "c")]
    assert not wrong, f"bound by the other scheduler: {wrong}"
    bound = sum(1 for (i, w), out in results.items() if w == "a" and isinstance(out, XOutcome)
                for placed, claims in out.pods if placed[0] == "node" and any(c[0] == "ext" for c in claims))
    print(f"\nDRA extended resources parity: {CASES} cases (seed {SEED}) in {len(groups)} batches, "
          f"{time.monotonic() - t0:.0f}s; upstream unique on {unique}; same on {agree}/{unique} = "
          f"{100.0 * agree / unique if unique else 0:.0f}%; upstream's first runs bound {bound} pods through a claim")
    print("\n".join(lines))
    if bad:
        print("disagreements:\n" + "\n".join(bad))
    assert bound > 0, "no pod got its devices through an extended-resource claim"
    assert unique >= CASES * 2 // 3, "\n".join(lines)
    assert agree * 100 >= unique * 95, "\n".join(bad)


def test_deleting_the_pod_frees_its_device(cluster, core, namespace, operator, example_policies, dra_components,
                                           raw, classes):
    """One node, one GPU: a pod asking for drax.example.com/gpu is bound with it through the claim
    policy-scheduler created (as upstream's: generateName, owner, annotation, finalizer, reserved
    for the pod, recorded in the pod's status); a second pod waits; deleting the first frees the
    device (kube-controller-manager deallocates the claim and the garbage collector deletes it)
    and the second gets it."""
    run = secrets.token_hex(2)
    labels = {"drap-run": run, "drap-batch": f"{run}-free"}
    node = f"drax-{run}"
    raw.create("/api/v1/nodes", node_body(node, "8", "za", {**labels, "drap-world": node}))
    raw.create(f"{RESOURCE}/resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": node, "labels": labels},
        "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [Device("a100", "40Gi", "pci0", None).body(0)]}})
    poller = Poller(raw, namespace, run).start()
    pods = f"/api/v1/namespaces/{namespace}/pods"
    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    try:
        def make(name):
            body = pod_body(name, namespace, OURS, "100m", {"drap-world": node}, [], labels)
            body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m", RES: "1"}, "limits": {RES: "1"}}
            return raw.create(pods, body)

        first = make(f"{node}-a")
        poller.wait(lambda ps, _: (ps.get(f"{node}-a") or {}).get("spec", {}).get("nodeName"), 60, "the first pod bound")
        pd = raw.req("GET", f"{pods}/{node}-a")
        status = pd["status"].get("extendedResourceClaimStatus")
        assert status and status["requestMappings"] == [
            {"containerName": "c", "resourceName": RES, "requestName": "container-0-request-1"}], status
        claim = raw.req("GET", f"{claims}/{status['resourceClaimName']}")
        meta = claim["metadata"]
        assert meta["generateName"] == f"{node}-a-extended-resources-" and meta["name"].startswith(meta["generateName"])
        assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": f"{node}-a",
                                            "uid": first["metadata"]["uid"], "controller": True}]
        assert meta["annotations"] == {ANNOTATION: "true"} and meta["finalizers"] == [
            "resource.kubernetes.io/delete-protection"]
        assert claim["spec"]["devices"]["requests"] == [{"name": "container-0-request-1", "exactly": {
            "deviceClassName": "drax-gpu", "allocationMode": "ExactCount", "count": 1}}]
        assert [(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]] == [
            (node, "gpu-0")]
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": f"{node}-a",
                                                   "uid": first["metadata"]["uid"]}]
        make(f"{node}-b")
        msg = poller.wait(lambda ps, refused: (refused.get(f"{node}-b") or [None])[0], 60, "the second pod refused")
        assert "cannot allocate all claims" in msg, msg
        raw.req("DELETE", f"{pods}/{node}-a", query={"gracePeriodSeconds": "0"})
        poller.wait(lambda ps, _: (ps.get(f"{node}-b") or {}).get("spec", {}).get("nodeName"), 90,
                    "the second pod bound once the first was deleted")
        deadline = time.monotonic() + 60
        while raw.req("GET", f"{claims}/{meta['name']}", missing_ok=True) is not None:
            assert time.monotonic() < deadline, "the deleted pod's claim was not deleted"
            time.sleep(0.5)
    finally:
        poller.stop()
        cleanup(raw, namespace, f"{run}-free")
        drop_extended_claims(raw, namespace)
