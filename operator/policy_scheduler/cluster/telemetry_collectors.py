"""The parts of the operator's /metrics (telemetry.py) that are read at scrape time or come from
elsewhere than the scheduling loop: the leader-only gate, ``scheduler_cache_size``, the content
caches' ``policy_scheduler_content_cache_*``,
``scheduler_plugin_evaluation_total``, client-go's ``rest_client_*`` and the build info.

Read at scrape time means the loop pays a plain dict increment (or nothing) and the collector
turns the counts into samples when Prometheus asks."""

from __future__ import annotations

import platform
import sys
import time
from typing import Any, Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .. import __version__

# the kube-scheduler release whose metrics (names, labels, buckets) the operator's follow
KUBE_SCHEDULER_VERSION = "v1.37.1"

# client-go's rest_client_request_duration_seconds buckets (component-base/metrics/prometheus/restclient)
REST_CLIENT_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


class LeaderOnly:
    """A registry of its own, collected only while ``is_leader()``: the scheduling series of a
    standby replica are absent (not zero), so a sum over the replicas counts the leader's alone."""

    def __init__(self, is_leader: Callable[[], bool]) -> None:
        self.registry = CollectorRegistry()
        self.is_leader = is_leader

    def describe(self) -> list:
        return []  # no name check against the outer registry: the names are distinct by construction

    def collect(self) -> Iterable:
        if self.is_leader():
            yield from self.registry.collect()


class CacheSize:
    """``scheduler_cache_size{type}`` (upstream's cache: nodes, pods, assumed_pods), read from the
    node table at scrape time. ``table``: a callable returning the table (None before the engine)."""

    NAME = "scheduler_cache_size"
    HELP = "Number of nodes, pods, and assumed (bound) pods in the scheduler cache."

    def __init__(self) -> None:
        self.table: Callable[[], Any] | None = None

    def describe(self) -> list:
        return [GaugeMetricFamily(self.NAME, self.HELP, labels=["type"])]

    def collect(self) -> Iterable:
        fam = GaugeMetricFamily(self.NAME, self.HELP, labels=["type"])
        table = self.table() if self.table is not None else None
        if table is not None:
            fam.add_metric(["nodes"], table.n)
            fam.add_metric(["pods"], len(table.pod_node))  # bound and assumed, as upstream's podStates
            fam.add_metric(["assumed_pods"], len(table.assumed))
        yield fam


class ContentCaches:
    """``policy_scheduler_content_cache_*{cache}``: the caches keyed by what objects contain (the
    node table's masks, compiled CEL selectors, compiled regexes), each an LRU with a byte budget
    (framework/model/bounded.py). Read at scrape time from the plain counters they keep.
    ``table``: a callable returning the node table (None before the engine)."""

    PREFIX = "policy_scheduler_content_cache"

    def __init__(self, table: Callable[[], Any] | None = None) -> None:
        self.table = table

    def _stats(self) -> list[tuple[str, Mapping[str, int]]]:
        from ..framework import validation
        from ..plugins.dynamicresources import cel

        out = []
        table = self.table() if self.table is not None else None
        if table is not None:
            out.append(("node_masks", table.mask_cache_stats()))
        out.append(("cel_selectors", cel.cache_stats()))
        out.append(("regexes", validation.regex_cache_stats()))
        return out

    def _families(self) -> list:
        p = self.PREFIX
        return [GaugeMetricFamily(f"{p}_bytes", "Bytes charged to the cache's entries (keys and values).", labels=["cache"]),
                GaugeMetricFamily(f"{p}_budget_bytes", "The cache's byte budget: past it, least recently used entries are "
                                  "evicted.", labels=["cache"]),
                GaugeMetricFamily(f"{p}_entries", "Entries in the cache.", labels=["cache"]),
                CounterMetricFamily(f"{p}_evictions", "Entries evicted to stay within the byte budget.", labels=["cache"]),
                CounterMetricFamily(f"{p}_uncached", "Results computed but not kept: larger than the cache allows "
                                    "for one entry.", labels=["cache"])]

    def describe(self) -> list:
        return self._families()

    def collect(self) -> Iterable:
        size, budget, entries, evictions, uncached = fams = self._families()
        for name, st in self._stats():
            size.add_metric([name], st["bytes"])
            budget.add_metric([name], st["budget"])
            entries.add_metric([name], st["entries"])
            evictions.add_metric([name], st["evictions"])
            uncached.add_metric([name], st["uncached"])
        yield from fams


class _Plan:
    """One (profile, chain)'s label keys per point and its running sums: ``acc`` = [cycles,
    nodes evaluated, cycles that scored, feasible nodes scored]; ``sub``: per key, what the
    plugin skipped (Skip at PreFilter or PreScore) leaves out of those sums."""

    __slots__ = ("chain", "pre_filter", "filter", "pre_score", "score", "acc", "sub")

    def __init__(self, profile: str, chain: Any) -> None:
        self.chain = chain
        self.pre_filter = [(p.NAME, "PreFilter", profile) for p in chain.pre_filter]
        self.filter = {p.NAME: (p.NAME, "Filter", profile) for p in chain.filter}
        self.pre_score = [(p.NAME, "PreScore", profile) for p in chain.pre_score]
        self.score = {p.NAME: (p.NAME, "Score", profile) for p, _ in chain.score}
        self.acc = [0, 0, 0, 0]
        self.sub: dict[tuple[str, str, str], int] = {}

    def totals(self) -> dict[tuple[str, str, str], int]:
        cycles, evaluated, scored, feasible = self.acc
        sub = self.sub
        out = {k: cycles for k in self.pre_filter}
        out.update((k, evaluated - sub.get(k, 0)) for k in self.filter.values())
        out.update((k, scored) for k in self.pre_score)
        out.update((k, feasible - sub.get(k, 0)) for k in self.score.values())
        return out


class PluginEvaluations:
    """``scheduler_plugin_evaluation_total{plugin,extension_point,profile}``: how many times each
    plugin was run at PreFilter, Filter, PreScore and Score (upstream counts each call of its
    instrumented plugins: PreFilter and PreScore once per cycle, Filter and Score once per node).
    A cycle adds four sums to its chain's plan (and what skipped plugins leave out); the samples
    are made at scrape time."""

    NAME = "scheduler_plugin_evaluation"
    HELP = ("Number of attempts to schedule pods by each plugin and the extension point (available only in "
            "PreFilter, Filter, PreScore, and Score).")
    LABELS = ["plugin", "extension_point", "profile"]
    MAX_PLANS = 1024

    def __init__(self) -> None:
        self.retired: dict[tuple[str, str, str], int] = {}  # the counts of plans no longer kept
        self._plans: dict[tuple[str, int], _Plan] = {}

    def cycle(self, profile: str, chain: Any, skip_filter: set, skip_score: set, evaluated: int,
              feasible: int) -> None:
        """One single-pod cycle: every PreFilter plugin ran once; every Filter plugin not skipped
        over the ``evaluated`` nodes (the nodes the scan evaluated: for a plugin after one that
        rejected some of them, an upper bound, since the operator filters batches of nodes);
        with two or more feasible nodes, every PreScore plugin once and every Score plugin not
        skipped once per feasible node (upstream scores nothing for a single feasible node)."""
        plan = self._plans.get((profile, id(chain)))
        if plan is None or plan.chain is not chain:
            plan = self._new_plan(profile, chain)
        acc = plan.acc
        acc[0] += 1
        if evaluated:
            acc[1] += evaluated
            if skip_filter:
                self._skip(plan, plan.filter, skip_filter, evaluated)
        if feasible > 1:
            acc[2] += 1
            acc[3] += feasible
            if skip_score:
                self._skip(plan, plan.score, skip_score, feasible)

    @staticmethod
    def _skip(plan: _Plan, keys: dict, skipped: set, n: int) -> None:
        sub = plan.sub
        for name in skipped:
            key = keys.get(name)
            if key is not None:
                sub[key] = sub.get(key, 0) + n

    def _new_plan(self, profile: str, chain: Any) -> _Plan:
        old = self._plans.pop((profile, id(chain)), None)
        if old is not None:  # a chain replaced at a reused address
            self._retire(old)
        if len(self._plans) >= self.MAX_PLANS:  # chains replaced over a long life: fold the oldest
            self._retire(self._plans.pop(next(iter(self._plans))))
        plan = self._plans[(profile, id(chain))] = _Plan(profile, chain)
        return plan

    def _retire(self, plan: _Plan) -> None:
        for key, n in plan.totals().items():
            self.retired[key] = self.retired.get(key, 0) + n

    def counts(self) -> dict[tuple[str, str, str], int]:
        out = dict(self.retired)
        for plan in list(self._plans.values()):  # a copy: the loop keeps counting
            for key, n in plan.totals().items():
                out[key] = out.get(key, 0) + n
        return out

    def describe(self) -> list:
        return [CounterMetricFamily(self.NAME, self.HELP, labels=self.LABELS)]

    def collect(self) -> Iterable:
        fam = CounterMetricFamily(self.NAME, self.HELP, labels=self.LABELS)
        for key, n in sorted(self.counts().items()):
            fam.add_metric(list(key), n)
        yield fam


class RestClientMetrics:
    """client-go's request metrics of the operator's API client (cluster/kubeclient.py), under
    client-go's names, labels and buckets: ``rest_client_requests_total{code,host,method}`` (code
    ``<error>`` when no answer came) and ``rest_client_request_duration_seconds{verb,host}`` (until
    the response's headers: a watch counts its start, not its stream). Children cached per label
    set; fed by an aiohttp client middleware of the client's session (``middleware``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("rest_client_requests", "Number of HTTP requests, partitioned by status code, "
                                "method, and host.", ["code", "method", "host"], registry=registry)
        self.duration = Histogram("rest_client_request_duration_seconds",
                                  "Request latency in seconds. Broken down by verb, and host.", ["verb", "host"],
                                  buckets=REST_CLIENT_BUCKETS, registry=registry)
        self._requests: dict[tuple[str, str, str], Any] = {}
        self._durations: dict[tuple[str, str], Any] = {}

    def observe(self, method: str, host: str, code: int | str, seconds: float) -> None:
        """One request to ``host`` (host:port) answered with HTTP ``code`` (or ``<error>``)."""
        code = str(code)
        key = (code, method, host)
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self.requests.labels(code, method, host)
        child.inc()
        dkey = (method, host)
        hist = self._durations.get(dkey)
        if hist is None:
            hist = self._durations[dkey] = self.duration.labels(method, host)
        hist.observe(seconds)

    def middleware(self):
        """An aiohttp client middleware feeding ``observe``: every request of the client's session,
        the informers' LISTs and WATCHes included, timed until the response's headers (a
        coroutine call per request; aiohttp's tracing costs ten times that)."""
        observe = self.observe

        async def count(request, handler):
            t0 = time.perf_counter()
            try:
                response = await handler(request)
            except BaseException:
                observe(request.method, _host(request.url), "<error>", time.perf_counter() - t0)
                raise
            observe(request.method, _host(request.url), response.status, time.perf_counter() - t0)
            return response

        return count


def _host(url: Any) -> str:
    """client-go's host label: the base URL's host[:port] as written."""
    host = url.raw_host or "none"
    return f"{host}:{url.port}" if url.explicit_port else host


def build_info(registry: CollectorRegistry) -> Gauge:
    """``policy_scheduler_build_info{...} 1`` (as kube components' kubernetes_build_info): the
    operator's version, the kube-scheduler release its metrics follow, the Python that runs it."""
    g = Gauge("policy_scheduler_build_info",
              "A metric with a constant '1' value labeled by the operator's version, the kube-scheduler release "
              "whose behaviour and metrics it follows, and the Python implementation and version it runs on.",
              ["version", "kube_scheduler_version", "python_implementation", "python_version"], registry=registry)
    g.labels(__version__, KUBE_SCHEDULER_VERSION, platform.python_implementation(),
             ".".join(map(str, sys.version_info[:3]))).set(1)
    return g


def event_resource(kind: str, body: Mapping[str, Any]) -> str:
    """The resource half of upstream's event label (``NodeAdd``, ``AssignedPodUpdate``,
    ``storage.k8s.io/CSINodeDelete``) for one of our informers' kinds."""
    if kind == "pods":
        return "AssignedPod" if (body.get("spec") or {}).get("nodeName") else "UnscheduledPod"
    return EVENT_RESOURCES.get(kind, kind)


EVENT_RESOURCES = {
    "nodes": "Node", "namespaces": "Namespace", "persistentvolumes": "PersistentVolume",
    "persistentvolumeclaims": "PersistentVolumeClaim", "storageclasses": "storage.k8s.io/StorageClass",
    "csinodes": "storage.k8s.io/CSINode", "csidrivers": "storage.k8s.io/CSIDriver",
    "resourceclaims": "resource.k8s.io/ResourceClaim", "resourceslices": "resource.k8s.io/ResourceSlice",
    "deviceclasses": "resource.k8s.io/DeviceClass", "poddisruptionbudgets": "PodDisruptionBudget",
    "services": "Service", "replicationcontrollers": "ReplicationController", "replicasets": "apps/ReplicaSet",
    "statefulsets": "apps/StatefulSet", "schedulingpolicies": "SchedulingPolicy",
    "podgroups": "scheduling.x-k8s.io/PodGroup", "podgroups.scheduling.k8s.io": "scheduling.k8s.io/PodGroup",
    "compositepodgroups.scheduling.k8s.io": "scheduling.k8s.io/CompositePodGroup",
}
EVENT_ACTIONS = {"ADDED": "Add", "MODIFIED": "Update", "DELETED": "Delete"}
