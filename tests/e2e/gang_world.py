"""Worlds for the native-gang parity test (test_gang_parity.py): one case (racks and zones of
kwok nodes, pre-bound filler pods and victim PodGroups, the PodGroups and CompositePodGroup to
schedule with their member pods, and what changes mid-way) built in a namespace of its own on
nodes of its own, for one scheduler; many worlds are built and settled together in a batch.

Isolation between the worlds of a batch:
- each world's nodes carry ``gp-world: <tag>``, and its members select them with a nodeSelector;
- its topology keys are its own (``rack-<tag>``, ``zone-<tag>``): placements are built only from
  nodes with the key, so other worlds' nodes are not even placements;
- (anti-)affinity terms are namespaced, and each world has its namespace;
- the member pods are created before their PodGroups (parked until the group appears), so that
  a group's first cycle sees all of its pods whatever the timing.
Pod and group names are the same in every world; node names hold the tag (messages are
normalised with it)."""

from __future__ import annotations

import copy
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.rest import ApiException

import localcluster
from helpers import KWOK, wait_for

OURS, UPSTREAM = "policy-scheduler", "default-scheduler"
G = "scheduling.k8s.io"
PG_VERSION = localcluster.GANG_API_VERSION
CPG_VERSION = "v1alpha3"
CONDITION = "PodGroupInitiallyScheduled"
WORLD = "gp-world"
RUN = "gp-run"

# name -> (value, preemptionPolicy): distinct filler priorities make victim choice deterministic
PRIORITY_CLASSES = {"gp-low-1": (100, None), "gp-low-2": (200, None), "gp-low-3": (300, None),
                    "gp-mid": (500, None), "gp-high": (1000, None), "gp-high-never": (1000, "Never")}


@dataclass
class Rack:
    nodes: int
    cpu: int  # per node
    zone: int = 0


@dataclass
class Filler:
    """A pod bound (spec.nodeName) before the groups come: occupies cpu; a victim if its
    priority is lower than a preemptor's; an anchor for affinity through its labels."""
    name: str
    rack: int
    node: int
    cpu: str
    priority: str | None = None  # PriorityClass
    group: str | None = None  # a victim PodGroup (see Case.victim_groups)
    labels: dict = field(default_factory=dict)
    start: str | None = None  # status.startTime once kwok runs it (None: kwok's own, the same second for most)


@dataclass
class Group:
    name: str
    pods: int
    cpu: str
    min_count: int
    topology: str | None = "rack"  # "rack", "zone" or None
    priority: str | None = None
    parent: str | None = None  # CompositePodGroup
    affinity: dict | None = None  # a pod's spec.affinity ("<group>" is replaced by the group name)
    disruption: str | None = None  # "all" / "single"


@dataclass
class Composite:
    name: str
    min_group_count: int | None  # None: basic
    topology: str | None = "zone"


@dataclass
class Case:
    family: str
    desc: str
    racks: list[Rack]
    groups: list[Group]
    fillers: list[Filler] = field(default_factory=list)
    victim_groups: list[Group] = field(default_factory=list)  # PodGroups of pre-bound fillers
    composite: Composite | None = None
    # phase 1 (after the first settle): ("min", group, n) patches minCount, ("add", group, k)
    # creates k more members
    later: list[tuple] = field(default_factory=list)
    waits: bool = False  # phase 0 may end without any outcome (a gang short of pods)
    policy: str = "gang"  # policy-scheduler's policy for the members ("default": with DynamicResources)


def topology_key(kind: str, tag: str) -> str:
    return f"{kind}-{tag}"


class World:
    def __init__(self, case: Case, scheduler: str, tag: str, run: str):
        self.case, self.scheduler, self.tag, self.run = case, scheduler, tag, run
        self.ns = f"gp-{tag}"
        self.nodes: dict[str, str] = {}  # node -> domain ("r1", or "z0/r1" with zones)
        self.members: dict[str, list[str]] = {g.name: [f"{g.name}-{i:02d}" for i in range(g.pods)]
                                              for g in case.groups}
        self.added = 0

    def node_name(self, r: int, i: int) -> str:
        return f"{self.tag}-r{r}-n{i}"

    # ------------------------------------------------------------------ objects
    def node_bodies(self) -> list[dict]:
        zones = len({r.zone for r in self.case.racks}) > 1 or self.case.composite is not None
        out = []
        for r, rack in enumerate(self.case.racks):
            for i in range(rack.nodes):
                name = self.node_name(r, i)
                alloc = {"cpu": str(rack.cpu), "memory": "64Gi", "pods": "110"}
                labels = {"kubernetes.io/hostname": name, WORLD: self.tag, RUN: self.run,
                          topology_key("rack", self.tag): f"r{r}", topology_key("zone", self.tag): f"z{rack.zone}"}
                self.nodes[name] = f"z{rack.zone}/r{r}" if zones else f"r{r}"
                out.append({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": labels, "annotations": dict(KWOK)},
                            "status": {"capacity": alloc, "allocatable": alloc}})
        return out

    def _group_body(self, g: Group, version: str = PG_VERSION) -> dict:
        spec: dict = {"schedulingPolicy": {"gang": {"minCount": g.min_count}}}
        if g.topology:
            spec["schedulingConstraints"] = {"topology": [{"key": topology_key(g.topology, self.tag)}]}
        if g.priority:
            spec["priorityClassName"] = g.priority
            if PRIORITY_CLASSES[g.priority][1] == "Never":
                # defaulting writes PreemptLowerPriority before admission resolves the class:
                # a Never class needs the policy spelled out
                spec["preemptionPolicy"] = "Never"
        if g.disruption:
            spec["disruptionMode"] = {g.disruption: {}}
        if g.parent:
            spec["parentCompositePodGroupName"] = g.parent
            spec["workloadRef"] = {"workloadName": "w", "templateName": g.name}
        return {"apiVersion": f"{G}/{version}", "kind": "PodGroup",
                "metadata": {"name": g.name, "labels": {RUN: self.run}}, "spec": spec}

    def _composite_body(self, c: Composite) -> dict:
        spec: dict = {"workloadRef": {"workloadName": "w", "templateName": c.name},
                      "schedulingPolicy": {"gang": {"minGroupCount": c.min_group_count}}
                      if c.min_group_count else {"basic": {}}}
        if c.topology:
            spec["schedulingConstraints"] = {"topology": [{"key": topology_key(c.topology, self.tag)}]}
        return {"apiVersion": f"{G}/{CPG_VERSION}", "kind": "CompositePodGroup",
                "metadata": {"name": c.name, "labels": {RUN: self.run}}, "spec": spec}

    def _pod(self, name: str, cpu: str, labels: dict, **spec) -> dict:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {RUN: self.run, WORLD: self.tag, **labels}},
                "spec": {"terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "c", "image": "registry.local/app:1",
                                         "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
                         **spec}}

    def filler_body(self, f: Filler) -> dict:
        spec: dict = {"nodeName": self.node_name(f.rack, f.node), "schedulerName": self.scheduler}
        if f.priority:
            spec["priorityClassName"] = f.priority
        if f.group:
            spec["schedulingGroup"] = {"podGroupName": f.group}
        return self._pod(f.name, f.cpu, {"gp-role": "filler", **f.labels}, **spec)

    def member_body(self, g: Group, name: str) -> dict:
        labels = {"gp-role": "member", "gp-group": g.name}
        if self.scheduler == OURS:
            labels["policy-scheduler.io/policy"] = self.case.policy
        spec: dict = {"schedulerName": self.scheduler, "nodeSelector": {WORLD: self.tag},
                      "schedulingGroup": {"podGroupName": g.name}}
        if g.priority:
            spec["priorityClassName"] = g.priority
        if g.affinity:
            aff = copy.deepcopy(g.affinity)
            for kind in aff.values():
                for terms in kind.values():
                    for t in terms:
                        t["topologyKey"] = {"rack": topology_key("rack", self.tag)}.get(t["topologyKey"],
                                                                                          t["topologyKey"])
                        sel = t["labelSelector"]["matchLabels"]
                        for k, v in list(sel.items()):
                            sel[k] = v.replace("<group>", g.name)
            spec["affinity"] = aff
        return self._pod(name, g.cpu, labels, **spec)

    # ------------------------------------------------------------------ build
    def build_static(self, core, objs) -> None:
        """Namespace, victim PodGroups and fillers (nodes are created by the batch)."""
        core.create_namespace({"metadata": {"name": self.ns, "labels": {RUN: self.run}}})
        for g in self.case.victim_groups:
            objs.create_namespaced_custom_object(G, PG_VERSION, self.ns, "podgroups", self._group_body(g))
        for f in self.case.fillers:
            core.create_namespaced_pod(self.ns, self.filler_body(f))

    def build_groups(self, core, objs) -> None:
        """The members first, then their PodGroups, then the CompositePodGroup."""
        for g in self.case.groups:
            for name in self.members[g.name]:
                core.create_namespaced_pod(self.ns, self.member_body(g, name))
        for g in self.case.groups:
            objs.create_namespaced_custom_object(G, PG_VERSION, self.ns, "podgroups", self._group_body(g))
        if self.case.composite:
            objs.create_namespaced_custom_object(G, CPG_VERSION, self.ns, "compositepodgroups",
                                                 self._composite_body(self.case.composite))

    def apply_later(self, core, objs) -> None:
        for op, gname, n in self.case.later:
            g = next(x for x in self.case.groups if x.name == gname)
            if op == "min":
                objs.patch_namespaced_custom_object(G, PG_VERSION, self.ns, "podgroups", gname,
                                                    {"spec": {"schedulingPolicy": {"gang": {"minCount": n}}}})
            elif op == "add":
                start = len(self.members[gname])
                for i in range(start, start + n):
                    name = f"{gname}-{i:02d}"
                    self.members[gname].append(name)
                    core.create_namespaced_pod(self.ns, self.member_body(g, name))

    # ------------------------------------------------------------------ observe
    def observe(self, pods: list, groups: list, events: list) -> dict:
        """The world's outcome from the batch's listings (its namespace's part)."""
        by_name = {p.metadata.name: p for p in pods}
        bound = {}
        msgs = {}
        latest: dict[str, tuple] = {}
        for e in events:
            t = (e.series.last_observed_time if e.series else None) or e.last_timestamp or e.event_time
            key = e.involved_object.name
            if key not in latest or (t, e.count or 0) >= latest[key][0]:
                latest[key] = ((t, e.count or 0), e.message or "")
        for gname, names in self.members.items():
            for n in names:
                p = by_name.get(n)
                if p is not None and p.spec.node_name:
                    bound[n] = self.nodes.get(p.spec.node_name, p.spec.node_name)
                    if os.environ.get("GANG_PARITY_NODES"):  # debugging: the node, not only its domain
                        bound[n] += "@" + p.spec.node_name.rsplit("-", 2)[-2] + "-" + p.spec.node_name.rsplit("-", 1)[-1]
                elif n in latest:
                    msgs[n] = self.norm(latest[n][1])
        conds = {}
        for obj in groups:
            c = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == CONDITION),
                     None)
            if c:
                conds[f"{obj['kind']}/{obj['metadata']['name']}"] = (c.get("status"), c.get("reason"),
                                                                      self.norm(c.get("message") or ""))
        victims = sorted(f.name for f in self.case.fillers
                         if f.name not in by_name or by_name[f.name].metadata.deletion_timestamp)
        return {"bound": bound, "victims": victims, "conditions": conds, "messages": msgs}

    def resolved(self, rec: dict, phase: int) -> bool:
        if phase == 0 and self.case.waits:
            return True
        names = [g.name for g in self.case.groups]
        everyone = sum(len(v) for v in self.members.values())
        return len(rec["bound"]) == everyone or all(f"PodGroup/{n}" in rec["conditions"] for n in names)

    def norm(self, msg: str) -> str:
        return msg.replace(self.ns, "<ns>").replace(self.tag, "<w>")


# ---------------------------------------------------------------------- batches

def _pool(n: int = 8) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=n)


def _each(pool, fn, items) -> None:
    for f in [pool.submit(fn, x) for x in items]:
        f.result()


class Batch:
    """Worlds built, settled and observed together."""

    def __init__(self, api, worlds: list[World], run: str, log=print):
        self.api, self.worlds, self.run, self.log = api, worlds, run, log
        self.core = client.CoreV1Api(api)
        self.objs = client.CustomObjectsApi(api)
        self.probe_nodes: list[str] = []

    def build(self, schedulers: list[str]) -> None:
        core, objs = self.core, self.objs
        t0 = time.monotonic()
        with _pool() as pool:
            bodies = [b for w in self.worlds for b in w.node_bodies()]
            # a world's nodes one after the other (the worlds side by side): both schedulers list
            # nodes in arrival order and break node ties by it, so every world has the same order
            _each(pool, lambda w: [core.create_node(b) for b in w.node_bodies()], self.worlds)
            _each(pool, lambda w: w.build_static(core, objs), self.worlds)
            self._start_times(pool)
        # every scheduler has seen every node and filler once it binds a probe pod that only a
        # node created after them admits (one watch per kind: nodes, pods, each in order)
        ns = f"gp-probe-{self.run}"
        try:
            core.create_namespace({"metadata": {"name": ns, "labels": {RUN: self.run}}})
        except ApiException as e:
            if e.status != 409:
                raise
        for s in schedulers:
            name = f"gp-probe-{self.run}-{len(self.probe_nodes)}"
            alloc = {"cpu": "1", "memory": "1Gi", "pods": "110"}
            core.create_node({"apiVersion": "v1", "kind": "Node",
                              "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, RUN: self.run},
                                           "annotations": dict(KWOK)},
                              "status": {"capacity": alloc, "allocatable": alloc}})
            self.probe_nodes.append(name)
        for s, node in zip(schedulers, self.probe_nodes):
            pod = f"probe-{node}"
            core.create_namespaced_pod(ns, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "labels": {RUN: self.run, "policy-scheduler.io/policy": "gang"}},
                "spec": {"schedulerName": s, "nodeSelector": {"kubernetes.io/hostname": node},
                         "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "c", "image": "registry.local/app:1"}]}})
        for node in self.probe_nodes:
            wait_for(lambda: self.core.read_namespaced_pod(f"probe-{node}", ns).spec.node_name, 90, 0.2,
                     what=f"a scheduler to see the batch's world ({node})")
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(ns).items, 30, 0.2, what="the probes gone")
        self.log(f"  batch: {len(self.worlds)} worlds, {len(bodies)} nodes built in {time.monotonic() - t0:.1f}s")
        with _pool() as pool:
            _each(pool, lambda w: w.build_groups(core, objs), self.worlds)

    def _start_times(self, pool) -> None:
        """The fillers' chosen status.startTime (victims are weighed by it), written once kwok has
        run them (its pod-ready stage writes startTime once, when the pod leaves Pending)."""
        want = {(w.ns, f.name): f.start for w in self.worlds for f in w.case.fillers if f.start}
        if not want:
            return

        def running() -> bool:
            pods = self.core.list_pod_for_all_namespaces(label_selector=f"{RUN}={self.run},gp-role=filler").items
            ok = {(p.metadata.namespace, p.metadata.name) for p in pods if p.status.phase == "Running"}
            return all(k in ok for k in want)

        wait_for(running, 60, 0.3, what="kwok to run the fillers")
        _each(pool, lambda k: self.core.patch_namespaced_pod_status(k[1], k[0], {"status": {"startTime": want[k]}}),
              list(want))

    def later(self) -> None:
        with _pool() as pool:
            _each(pool, lambda w: w.apply_later(self.core, self.objs), [w for w in self.worlds if w.case.later])

    def snapshot(self) -> dict[str, dict]:
        pods = self.core.list_pod_for_all_namespaces(label_selector=f"{RUN}={self.run}").items
        groups = [{**o, "kind": "PodGroup"} for o in self.objs.list_cluster_custom_object(
            G, PG_VERSION, "podgroups", label_selector=f"{RUN}={self.run}")["items"]]
        groups += [{**o, "kind": "CompositePodGroup"} for o in self.objs.list_cluster_custom_object(
            G, CPG_VERSION, "compositepodgroups", label_selector=f"{RUN}={self.run}")["items"]]
        events = [e for e in self.core.list_event_for_all_namespaces(field_selector="reason=FailedScheduling").items
                  if e.metadata.namespace.startswith(f"gp-{self.run}")]
        by_ns: dict[str, tuple[list, list, list]] = {w.ns: ([], [], []) for w in self.worlds}
        for p in pods:
            if p.metadata.namespace in by_ns:
                by_ns[p.metadata.namespace][0].append(p)
        for o in groups:
            if o["metadata"]["namespace"] in by_ns:
                by_ns[o["metadata"]["namespace"]][1].append(o)
        for e in events:
            if e.metadata.namespace in by_ns:
                by_ns[e.metadata.namespace][2].append(e)
        return {w.ns: w.observe(*by_ns[w.ns]) for w in self.worlds}

    def settle(self, phase: int, quiet: float = 5.0, least: float = 4.0, timeout: float | None = None) -> dict[str, dict]:
        """Until every world has an outcome and nothing changed for ``quiet`` seconds."""
        # upstream settles a batch in about 30 s; a scheduler that leaves worlds without any
        # outcome costs this much per phase
        timeout = timeout or float(os.environ.get("GANG_PARITY_SETTLE_TIMEOUT", "90"))
        t0 = time.monotonic()
        last, since = None, time.monotonic()
        while True:
            snap = self.snapshot()
            now = time.monotonic()
            if snap != last:
                last, since = snap, now
            done = all(w.resolved(snap[w.ns], phase) for w in self.worlds)
            if done and now - since >= quiet and now - t0 >= least:
                self.log(f"  batch: phase {phase} settled in {now - t0:.1f}s")
                return snap
            if now - t0 > timeout:
                open_ = [w.ns for w in self.worlds if not w.resolved(snap[w.ns], phase)]
                self.log(f"  batch: phase {phase} NOT settled after {timeout:.0f}s (no outcome: {open_[:8]})")
                return snap
            time.sleep(1.0)

    def teardown(self) -> None:
        core, objs = self.core, self.objs

        def clean(ns: str) -> None:
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            for version, plural in ((PG_VERSION, "podgroups"), (CPG_VERSION, "compositepodgroups")):
                try:
                    objs.delete_collection_namespaced_custom_object(G, version, ns, plural)
                except ApiException:
                    pass
            try:
                core.delete_namespace(ns)
            except ApiException:
                pass

        with _pool() as pool:
            _each(pool, clean, [w.ns for w in self.worlds] + [f"gp-probe-{self.run}"])
            nodes = [n for w in self.worlds for n in w.nodes] + self.probe_nodes
            _each(pool, lambda n: _ignore_missing(core.delete_node, n), nodes)
        wait_for(lambda: not core.list_pod_for_all_namespaces(label_selector=f"{RUN}={self.run}").items, 60, 0.5,
                 what="the batch's pods gone")


def _ignore_missing(fn, *a) -> None:
    try:
        fn(*a)
    except ApiException as e:
        if e.status != 404:
            raise
