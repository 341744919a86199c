"""The world of the DRA burst tests (test_dra_burst.py), in upstream scheduler_perf's shape
(SchedulingWithResourceClaimTemplate): nodes that each publish one ResourceSlice of identical
devices (driver ``test-driver.cdi.k8s.io``, a pool per node named after it, generation 1,
resourceSliceCount 1, spec.nodeName set), one DeviceClass selecting the driver by CEL, one
ResourceClaimTemplate asking for one device, and many pods that each reference the template.

Everything goes through the API as raw JSON (thousands of objects: the kubernetes client's models
would cost more CPU than the scheduler under test on a 2-core machine), from a thread pool.
``PodWatch`` follows the pods with one watch (per pod the node it was first seen bound to, and any
later change), ``ClaimWatch`` the claims (how often each was allocated, and any later change);
``check`` states the invariants of a finished burst."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, config
from kubernetes.client.rest import ApiException

DRIVER = "test-driver.cdi.k8s.io"
FINALIZER = "resource.kubernetes.io/delete-protection"
RESOURCE = "/apis/resource.k8s.io/v1"
ZONES = ("zone-a", "zone-b", "zone-c")
LABEL = "dra-burst"  # on every object of a world (its tag): nodes and slices are found by it
REQUEST = "dev"  # the template's one request, and the pods' entry of spec.resourceClaims


class Raw:
    """JSON requests through a kubernetes ApiClient of its own (urllib3's pool: thread-safe)."""

    def __init__(self, kubeconfig: str, pool: int = 32):
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = pool
        self.api = client.ApiClient(cfg)

    def close(self) -> None:
        self.api.close()

    def _serialize(self, method: str, path: str, body, query: dict | None, patch: bool):
        headers = {"Accept": "application/json",
                   "Content-Type": "application/merge-patch+json" if patch else "application/json"}
        return self.api.param_serialize(method, path, query_params=list((query or {}).items()),
                                        header_params=headers, body=body, auth_settings=["BearerToken"])

    def req(self, method: str, path: str, body=None, query: dict | None = None, patch: bool = False,
            missing_ok: bool = False, timeout: float = 60):
        m, url, hdrs, data, post = self._serialize(method, path, body, query, patch)
        r = self.api.call_api(m, url, header_params=hdrs, body=data, post_params=post, _request_timeout=timeout)
        payload = r.read()
        if r.status >= 400:
            if missing_ok and r.status == 404:
                return None
            raise ApiException(status=r.status, reason=f"{method} {path}: {payload[:500]!r}")
        return json.loads(payload) if payload else None

    def create(self, path: str, body: dict, retries: int = 5) -> dict:
        """POST, retried on 429/5xx and connection errors (a 2-core API server under a burst)."""
        for attempt in range(retries):
            try:
                return self.req("POST", path, body)
            except ApiException as e:
                if e.status == 409 and attempt:  # an earlier attempt got through
                    return {}
                if e.status not in (429, 500, 503, 504) or attempt + 1 == retries:
                    raise
            except OSError:
                if attempt + 1 == retries:
                    raise
            time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def delete(self, path: str, query: dict | None = None, retries: int = 5) -> None:
        """DELETE, retried as ``create``; an object already gone is fine."""
        for attempt in range(retries):
            try:
                self.req("DELETE", path, query=query, missing_ok=True)
                return
            except ApiException as e:
                if e.status not in (429, 500, 503, 504) or attempt + 1 == retries:
                    raise
            except OSError:
                if attempt + 1 == retries:
                    raise
            time.sleep(0.5 * (attempt + 1))

    def items(self, path: str, query: dict | None = None) -> list[dict]:
        """Every object of a list, page by page."""
        out: list[dict] = []
        q = dict(query or {}, limit="500")
        while True:
            page = self.req("GET", path, query=q)
            out.extend(page["items"])
            cont = page["metadata"].get("continue")
            if not cont:
                return out
            q["continue"] = cont


def parallel(fn, args, workers: int = 8) -> None:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(fn, a) for a in args]:
            f.result()


# ---------------------------------------------------------------------------------------------
# kube-controller-manager with the resourceclaim controller

def start_claim_controller(cluster, qps: int = 1000) -> None:
    """kube-controller-manager with resourceclaim-controller (claims of templates, pods'
    status.resourceClaimStatuses, deallocation of claims whose pods are gone) and
    namespace-controller (the test's namespace is deleted at the end). As
    LocalCluster.start_controller_manager, plus a client rate limit that fits thousands of pods:
    its default, 20 requests/s, would take minutes to create 2,000 claims and set 2,000 pod
    statuses. Registered under the component's name: ``cluster.stop("kube-controller-manager")``."""
    cluster.start_controller_manager(controllers="resourceclaim-controller,namespace-controller",
                                     extra=[f"--kube-api-qps={qps}", f"--kube-api-burst={qps}"])


# ---------------------------------------------------------------------------------------------
# the world

class BurstWorld:
    """``nodes`` nodes with ``per_node`` devices each, a DeviceClass and a ResourceClaimTemplate in
    the namespace ``drb-<tag>`` (created here), and pods of ``scheduler``."""

    def __init__(self, raw: Raw, tag: str, nodes: int, per_node: int, scheduler: str):
        self.raw, self.tag, self.per_node, self.scheduler = raw, tag, per_node, scheduler
        self.ns = f"drb-{tag}"
        self.cls = f"drb-{tag}"
        self.template = "one-device"
        self.node_names = [f"drb-{tag}-{i:03d}" for i in range(nodes)]
        self.labels = {LABEL: tag}

    # ------------------------------------------------------------------ building
    def node_body(self, i: int, name: str) -> dict:
        alloc = {"cpu": "32", "memory": "64Gi", "pods": "110"}
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                      "topology.kubernetes.io/zone": ZONES[i % len(ZONES)],
                                                      **self.labels}},
                "status": {"capacity": alloc, "allocatable": alloc, "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "plain Node object"}]}}

    def slice_body(self, name: str) -> dict:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{DRIVER}", "labels": self.labels},
                "spec": {"driver": DRIVER, "nodeName": name,
                         "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": f"dev-{d}"} for d in range(self.per_node)]}}

    def create(self) -> None:
        raw = self.raw
        raw.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": self.ns, "labels": self.labels}})
        raw.create(f"{RESOURCE}/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": self.cls, "labels": self.labels},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
        raw.create(f"{RESOURCE}/namespaces/{self.ns}/resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": self.template, "labels": self.labels},
            "spec": {"metadata": {"labels": self.labels}, "spec": {"devices": {"requests": [
                {"name": REQUEST, "exactly": {"deviceClassName": self.cls, "allocationMode": "ExactCount",
                                              "count": 1}}]}}}})

        def one(i: int) -> None:
            name = self.node_names[i]
            raw.create("/api/v1/nodes", self.node_body(i, name))
            raw.create(f"{RESOURCE}/resourceslices", self.slice_body(name))

        parallel(one, range(len(self.node_names)))

    def pod_body(self, name: str) -> dict:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": self.ns, "labels": dict(self.labels)},
                "spec": {"schedulerName": self.scheduler, "terminationGracePeriodSeconds": 0,
                         "nodeSelector": dict(self.labels),
                         "containers": [{"name": "c", "image": "registry.local/app:1",
                                         "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                         "resourceClaims": [{"name": REQUEST, "resourceClaimTemplateName": self.template}]}}

    def create_pods(self, names: list[str], workers: int = 8) -> None:
        parallel(lambda n: self.raw.create(f"/api/v1/namespaces/{self.ns}/pods", self.pod_body(n)), names, workers)

    # ------------------------------------------------------------------ reading
    def pods(self) -> list[dict]:
        return self.raw.items(f"/api/v1/namespaces/{self.ns}/pods")

    def claims(self) -> list[dict]:
        return self.raw.items(f"{RESOURCE}/namespaces/{self.ns}/resourceclaims")

    def slices(self) -> list[dict]:
        return self.raw.items(f"{RESOURCE}/resourceslices", {"labelSelector": f"{LABEL}={self.tag}"})

    # ------------------------------------------------------------------ the end
    def delete_pods(self, workers: int = 8) -> None:
        """Every pod, grace period 0, one request each (a DELETE of the collection runs past the API
        server's 60 s request timeout on a loaded machine)."""
        names = [p["metadata"]["name"] for p in self.pods()]
        parallel(lambda n: self.raw.delete(f"/api/v1/namespaces/{self.ns}/pods/{n}", {"gracePeriodSeconds": "0"}),
                 names, workers)

    def leftover_allocations(self) -> list[str]:
        """Claims still allocated, reserved or protected by the finalizer (every pod is gone)."""
        out = []
        for c in self.claims():
            st = c.get("status") or {}
            if st.get("allocation") or st.get("reservedFor") or FINALIZER in (c["metadata"].get("finalizers") or ()):
                out.append(f"{c['metadata']['name']}: allocation {bool(st.get('allocation'))}, reservedFor "
                           f"{[r.get('name') for r in st.get('reservedFor') or ()]}, finalizers "
                           f"{c['metadata'].get('finalizers')}")
        return out

    def cleanup(self, timeout: float = 300) -> list[str]:
        """Delete everything of the world; returns what went wrong (nothing raises)."""
        errors: list[str] = []

        def attempt(fn, *a, **kw):
            try:
                return fn(*a, **kw)
            except Exception as e:  # noqa: BLE001 - clean up the rest, report at the end
                errors.append(repr(e)[:300])

        raw = self.raw
        attempt(self.delete_pods)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = attempt(raw.req, "GET", f"/api/v1/namespaces/{self.ns}/pods", query={"limit": "1"},
                           missing_ok=True)
            if left is None or not left["items"]:
                break
            time.sleep(0.5)
        # claims keep the finalizer only when the test failed before the controller deallocated them
        attempt(parallel, lambda n: raw.req("PATCH", f"{RESOURCE}/namespaces/{self.ns}/resourceclaims/{n}",
                                            {"metadata": {"finalizers": None}}, patch=True, missing_ok=True),
                [c["metadata"]["name"] for c in attempt(self.claims) or () if c["metadata"].get("finalizers")])
        # the namespace controller deletes the claims and the template with the namespace
        attempt(raw.delete, f"/api/v1/namespaces/{self.ns}")
        attempt(parallel, raw.delete, [f"{RESOURCE}/resourceslices/{s['metadata']['name']}"
                                       for s in attempt(self.slices) or ()])
        attempt(raw.delete, f"{RESOURCE}/deviceclasses/{self.cls}")
        attempt(parallel, raw.delete, [f"/api/v1/nodes/{n}" for n in self.node_names])
        while time.monotonic() < deadline:  # the namespace controller empties and removes it
            if attempt(raw.req, "GET", f"/api/v1/namespaces/{self.ns}", missing_ok=True) is None:
                break
            time.sleep(0.5)
        else:
            errors.append(f"namespace {self.ns} still there after {timeout}s")
        return errors


# ---------------------------------------------------------------------------------------------
# following the pods

class Watch:
    """One watch on a list path (a list first, and again after a 410 or an error), each object
    handed to ``_see`` under ``cond``; after ``close`` (objects are deleted on purpose at the end of
    the test) events are ignored."""

    def __init__(self, raw: Raw, path: str):
        self.raw, self.path = raw, path
        self.violations: list[str] = []
        self.error: BaseException | None = None
        self.closing = False
        self.cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"watch {path}", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)

    def close(self) -> None:
        with self.cond:
            self.closing = True

    def _see(self, obj: dict, deleted: bool) -> None:
        raise NotImplementedError

    def _handle(self, obj: dict, deleted: bool = False) -> None:
        with self.cond:
            if not self.closing:
                self._see(obj, deleted)
                self.cond.notify_all()

    def _loop(self) -> None:
        rv = None
        failures = 0
        while not self._stop.is_set():
            try:
                if rv is None:
                    lst = self.raw.req("GET", self.path)
                    for obj in lst["items"]:
                        self._handle(obj)
                    rv = lst["metadata"]["resourceVersion"]
                m, url, hdrs, data, post = self.raw._serialize(
                    "GET", self.path, None, {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                                             "timeoutSeconds": "10"}, False)
                r = self.raw.api.call_api(m, url, header_params=hdrs, _request_timeout=(10, 60))
                if r.status != 200:
                    r.read()
                    rv = None
                    raise OSError(f"watch answered {r.status}")
                for line in r.response:
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev["type"] == "ERROR":
                        rv = None if obj.get("code") == 410 else rv
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] != "BOOKMARK":
                        self._handle(obj, deleted=ev["type"] == "DELETED")
                    if self._stop.is_set():
                        break
                r.response.release_conn()
                failures = 0
            except Exception as e:  # noqa: BLE001 - a loaded API server: retry, give up after a while
                failures += 1
                if failures > 30:
                    self.error = e
                    with self.cond:
                        self.cond.notify_all()
                    return
                time.sleep(0.5)


class PodWatch(Watch):
    """The namespace's pods. Per pod name: its uid, the node it was first seen bound to and when
    (monotonic). A violation: a bound pod seen on another node or unbound again, a pod recreated
    (another uid) or deleted."""

    def __init__(self, raw: Raw, ns: str):
        super().__init__(raw, f"/api/v1/namespaces/{ns}/pods")
        self.uid: dict[str, str] = {}
        self.node: dict[str, str] = {}
        self.bound_at: dict[str, float] = {}

    def _see(self, p: dict, deleted: bool) -> None:
        name, uid = p["metadata"]["name"], p["metadata"]["uid"]
        node = p["spec"].get("nodeName") or ""
        if deleted:
            self.violations.append(f"pod {name} deleted while the test ran")
        old_uid = self.uid.setdefault(name, uid)
        if old_uid != uid:
            self.violations.append(f"pod {name} was recreated: uid {old_uid} then {uid}")
        if node:
            first = self.node.setdefault(name, node)
            if first == node and name not in self.bound_at:
                self.bound_at[name] = time.monotonic()
            if first != node:
                self.violations.append(f"pod {name} bound to {first}, later seen on {node}")
        elif name in self.node:
            self.violations.append(f"pod {name} bound to {self.node[name]}, later seen unbound")

    def _check(self, alive) -> None:
        if self.error is not None:
            raise AssertionError(f"the pod watch failed: {self.error!r}")
        why = alive() if alive is not None else None
        if why:
            raise AssertionError(why)

    def bound(self) -> int:
        with self.cond:
            return len(self.node)

    def wait_bound(self, names, timeout: float, what: str, alive=None) -> None:
        """Until every pod of ``names`` was seen bound. ``alive``: returns why to give up now (e.g. the
        scheduler exited), or None."""
        names = set(names)
        deadline = time.monotonic() + timeout
        with self.cond:
            while not names <= self.node.keys():
                self._check(alive)
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(names - self.node.keys())
                    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}: {len(missing)} "
                                         f"unbound, e.g. {missing[:10]}")
                self.cond.wait(min(left, 1.0))

    def wait_count(self, n: int, timeout: float, what: str, alive=None) -> int:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.node) < n:
                self._check(alive)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} ({len(self.node)})")
                self.cond.wait(min(left, 1.0))
            return len(self.node)


class ClaimWatch(Watch):
    """The namespace's claims. Per claim: how many times it went from unallocated to allocated, and
    its first allocation (the devices and the nodeSelector). A violation: an allocation replaced by
    another, or removed, while the test runs (every pod keeps its claim until the end); a claim
    deleted."""

    def __init__(self, raw: Raw, ns: str):
        super().__init__(raw, f"{RESOURCE}/namespaces/{ns}/resourceclaims")
        self.allocations: dict[str, int] = {}
        self.first: dict[str, str] = {}
        self._current: dict[str, str] = {}

    def _see(self, c: dict, deleted: bool) -> None:
        name = c["metadata"]["name"]
        if deleted:
            self.violations.append(f"claim {name} deleted while the test ran")
            return
        alloc = (c.get("status") or {}).get("allocation")
        now = json.dumps({"devices": (alloc.get("devices") or {}).get("results"),
                          "nodeSelector": alloc.get("nodeSelector")}, sort_keys=True) if alloc else ""
        before = self._current.get(name, "")
        self._current[name] = now
        if now and not before:
            self.allocations[name] = self.allocations.get(name, 0) + 1
            first = self.first.setdefault(name, now)
            if first != now:
                self.violations.append(f"claim {name} allocated again: first {first}, then {now}")
        elif before and not now:
            self.violations.append(f"claim {name} deallocated (it was {before})")
        elif before and now != before:
            self.violations.append(f"claim {name}'s allocation changed from {before} to {now}")


# ---------------------------------------------------------------------------------------------
# the invariants

def claim_node(claim: dict) -> str | None:
    """The node of an allocation's nodeSelector: one term, matchFields metadata.name In [node]."""
    sel = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    terms = sel.get("nodeSelectorTerms") or []
    if len(terms) != 1 or terms[0].get("matchExpressions"):
        return None
    fields = terms[0].get("matchFields") or []
    if len(fields) != 1 or fields[0].get("key") != "metadata.name" or fields[0].get("operator") != "In" \
            or len(fields[0].get("values") or []) != 1:
        return None
    return fields[0]["values"][0]


def check(world: BurstWorld, names: list[str], pods_seen: PodWatch, claims_seen: ClaimWatch) -> list[str]:
    """Everything wrong with a finished burst (empty: nothing). Every pod of ``names`` bound, with
    exactly one claim, created for it from the template (its controller owner), resolved in its
    status.resourceClaimStatuses; the claim allocated once (one result, for request ``dev``, of our
    driver, from the pool of the pod's node, a device that pool publishes; the allocation's
    nodeSelector names that node), reserved for exactly that pod, with the delete-protection
    finalizer; no device in two claims; no claim of the namespace without its pod. From the watches:
    each pod's node the one it was first seen bound to, each claim allocated exactly once (never
    deallocated, reallocated or changed), nothing deleted or recreated."""
    problems: list[str] = []
    pods = {p["metadata"]["name"]: p for p in world.pods()}
    claims = world.claims()
    by_name = {c["metadata"]["name"]: c for c in claims}
    published = {s["spec"]["pool"]["name"]: {d["name"] for d in s["spec"].get("devices") or ()}
                 for s in world.slices() if s["spec"]["driver"] == DRIVER}
    owners: dict[str, list[str]] = {}
    for c in claims:
        ctl = [o for o in c["metadata"].get("ownerReferences") or () if o.get("controller")]
        owners.setdefault(ctl[0]["uid"] if ctl else "", []).append(c["metadata"]["name"])
    holder: dict[tuple, str] = {}
    for name in names:
        p = pods.get(name)
        if p is None:
            problems.append(f"pod {name} does not exist")
            continue
        uid, node = p["metadata"]["uid"], p["spec"].get("nodeName")
        if not node:
            problems.append(f"pod {name} is not bound")
            continue
        if pods_seen.node.get(name) != node:
            problems.append(f"pod {name} on {node}, first seen bound to {pods_seen.node.get(name)}")
        mine = owners.get(uid, [])
        if len(mine) != 1:
            problems.append(f"pod {name}: {len(mine)} claims owned by it: {mine}")
        statuses = p.get("status", {}).get("resourceClaimStatuses") or []
        cname = next((s.get("resourceClaimName") for s in statuses if s.get("name") == REQUEST), None)
        claim = by_name.get(cname or "")
        if claim is None:
            problems.append(f"pod {name}: its claim {cname!r} (status.resourceClaimStatuses) does not exist")
            continue
        if cname not in mine:
            problems.append(f"pod {name}: its claim {cname} is not owned by it")
        if claims_seen.allocations.get(cname, 0) != 1:
            problems.append(f"pod {name}: claim {cname} seen allocated {claims_seen.allocations.get(cname, 0)} times")
        st = claim.get("status") or {}
        alloc = st.get("allocation")
        if not alloc:
            problems.append(f"pod {name} on {node}: claim {cname} not allocated")
            continue
        results = (alloc.get("devices") or {}).get("results") or []
        if len(results) != 1:
            problems.append(f"pod {name}: claim {cname} has {len(results)} allocated devices: {results}")
        for r in results:
            key = (r.get("driver"), r.get("pool"), r.get("device"))
            if key in holder:
                problems.append(f"device {key} allocated twice: claim {holder[key]} and claim {cname} (pod {name})")
            holder[key] = cname
            if r.get("request") != REQUEST or r.get("driver") != DRIVER:
                problems.append(f"pod {name}: claim {cname}: result {r}")
            if r.get("pool") != node:
                problems.append(f"pod {name} on {node}: claim {cname} has device {r.get('device')} of pool "
                                f"{r.get('pool')}")
            elif r.get("device") not in published.get(node, ()):
                problems.append(f"pod {name}: claim {cname}: device {r.get('device')} is not in pool {node}")
        alloc_node = claim_node(claim)
        if alloc_node != node:
            problems.append(f"pod {name} on {node}: claim {cname}'s allocation is for node {alloc_node} "
                            f"(nodeSelector {alloc.get('nodeSelector')})")
        reserved = [(r.get("resource"), r.get("name"), r.get("uid")) for r in st.get("reservedFor") or ()]
        if reserved != [("pods", name, uid)]:
            problems.append(f"pod {name}: claim {cname} reservedFor {reserved}")
        if FINALIZER not in (claim["metadata"].get("finalizers") or ()):
            problems.append(f"pod {name}: claim {cname} lacks the finalizer {FINALIZER}")
    problems += pods_seen.violations + claims_seen.violations
    uids = {p["metadata"]["uid"] for p in pods.values()}
    for uid, cs in owners.items():
        if uid not in uids:
            problems.append(f"claims without their pod ({uid or 'no owner'}): {cs}")
    return problems
