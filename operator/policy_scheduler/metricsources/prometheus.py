"""Prometheus metric sources: one per policy whose chain has a metric plugin.

Each source refreshes on its own task: every ``refreshInterval`` it sends one instant query per
distinct metric of the policy (all nodes at once), each in a worker thread with a time limit,
and publishes the results to the policy's MetricsView (framework/metricview.py), which the
plugins read. A node keeps its latest value, with the value's sample time, until a newer one
arrives: it is fresh while no older than ``ttl``, stale after, and missing without any value.

Queries go through promclient.py: plain HTTP GETs of ``/api/v1/query``, with no retry (the
next refresh is the retry), the policy's ``queryTimeout`` as a total deadline (also sent to
Prometheus as the query's own evaluation timeout) and a 16 MiB cap on the answer. They are
blocking, so they run in this module's own small thread pool (``QUERY_THREADS``), never on the
scheduling loop and never in asyncio's default executor: the API client renews its token there,
and hung queries must not delay it. What a query's error puts into the policy's status is
Prometheus's ``errorType``/``error`` or the operator's own words, bounded and without control
characters, never the raw answer (the address is the policy author's choice).

When Prometheus cannot be reached, the source keeps its values (they turn stale after ``ttl``)
and logs one line; when it answers again, one more line. The policy's status shows a Degraded
condition with the reason, and per query the fresh / stale / missing node counts. Metrics never
make a policy invalid: without an address, or with a query Prometheus rejects, the policy stays
Ready and its nodes follow the plugins' onMissingMetrics.

Sample times are Prometheus's evaluation timestamps; in-flight estimates compare them with the
operator's clock, so both are assumed NTP-synchronised (``usageLag`` absorbs small skew).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from pydantic import ValidationError

from .. import timefmt
from ..framework.events import METRICS_REFRESH
from ..framework.interface import ReadsMetrics
from ..framework.metricview import MetricsView, Sample, SeriesKey, node_key
from ..framework.registry import Registry
from ..plugins import default_registry
from ..policy.fields import duration_seconds
from ..policy.models import SchedulingPolicySpec
from .manager import MetricSources
# QueryError, Unreachable and prometheus_api_query are imported from here by callers (whatif, tests)
from .promclient import QueryError, Unreachable, clean, prometheus_api_query  # noqa: F401

log = logging.getLogger("policy_scheduler.metrics")

DEFAULT_REFRESH = 15.0
DEFAULT_TIMEOUT = 5.0
DEFAULT_TTL = 120.0
DEFAULT_USAGE_LAG = 60.0
FORGET_AFTER_TTLS = 10  # a node's value older than this many ttls is forgotten: missing
EVENT = METRICS_REFRESH  # the queue event: metric plugins' rejections may be lifted
# Threads of the queries, for the whole process. Few: each query asks for every node at once, and
# a query ends at its deadline, so a hung Prometheus holds at most this many threads and the
# other queries wait (and time out) in the pool's queue instead of piling up threads.
QUERY_THREADS = 4
STATUS_ERROR_CHARS = 400  # one query's error text in the policy status

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def query_executor() -> ThreadPoolExecutor:
    """The queries' own thread pool (made on first use): not asyncio's default executor, which
    the API client's token renewal shares."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=QUERY_THREADS, thread_name_prefix="prometheus-query")
        return _executor


def parse_vector(result: Any, node_label: str) -> dict[str, Sample]:
    """node -> (value, sample time) from an instant-query result. Series without the label and
    NaN values are skipped; when several series name one node, the largest value counts."""
    if not isinstance(result, list) or any(not isinstance(x, dict) or "metric" not in x for x in result):
        raise QueryError("the query must return an instant vector keyed by node, not a scalar or string")
    out: dict[str, Sample] = {}
    labels: set[str] = set()
    for item in result:
        metric = item.get("metric") or {}
        name = metric.get(node_label)
        if name is None:
            labels.update(metric)
            continue
        try:
            ts, raw = item["value"]
            v, t = float(raw), float(ts)
        except (KeyError, TypeError, ValueError):
            continue
        if math.isnan(v) or math.isinf(v):
            continue
        node = node_key(str(name))
        if node not in out or v > out[node][0]:
            out[node] = (v, t)
    if result and not out and labels:
        names = sorted(labels)
        shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
        raise QueryError(f"no series has the label {node_label!r} (labels: {shown}); "
                         "set nodeLabel or aggregate by it")
    return out


def rfc3339(t: float | None) -> str | None:
    """A sample time for the status; None for none (or NaN)."""
    if t is None or math.isnan(t):
        return None
    return timefmt.rfc3339(t)


@dataclass(frozen=True)
class SourceConfig:
    address: str
    refresh: float
    timeout: float
    ttl: float
    usage_lag: float


class PolicySource:
    """One policy's queries, their cached samples, and its view."""

    def __init__(self, policy: str, config: SourceConfig, keys: Iterable[SeriesKey], plugins: set[str],
                 clock: Callable[[], float]) -> None:
        self.policy = policy
        self.config = config
        self.plugins = plugins  # names of the policy's metric plugins
        self.clock = clock
        self.view = MetricsView(clock)
        self.samples: dict[SeriesKey, dict[str, Sample]] = {k: {} for k in keys}
        self.errors: dict[SeriesKey, str] = {}
        self.available: bool | None = None  # None: not refreshed yet
        self.down_error = ""
        self.down_since: float | None = None
        self.last_refresh: float | None = None
        self.last_success: float | None = None
        self.task: asyncio.Task | None = None

    def set_keys(self, keys: Iterable[SeriesKey], plugins: set[str]) -> None:
        self.samples = {k: self.samples.get(k, {}) for k in keys}
        self.errors = {k: e for k, e in self.errors.items() if k in self.samples}
        self.plugins = plugins

    async def refresh(self, query_fn: Callable[[str, str, float], list]) -> None:
        keys = list(self.samples)
        cfg = self.config

        async def one(key: SeriesKey) -> tuple[str, Any]:
            query, label = key
            loop = asyncio.get_running_loop()
            try:
                got = await asyncio.wait_for(
                    loop.run_in_executor(query_executor(),
                                         lambda: parse_vector(query_fn(cfg.address, query, cfg.timeout), label)),
                    cfg.timeout + 1.0)
                return "ok", got
            except QueryError as e:
                return "query", clean(e, STATUS_ERROR_CHARS)
            except Unreachable as e:
                return "down", clean(e, STATUS_ERROR_CHARS)
            except asyncio.TimeoutError:
                return "down", f"no answer within {cfg.timeout:g}s"
            except Exception as e:  # anything else: no usable answer this time
                return "down", clean(f"{type(e).__name__}: {e}", STATUS_ERROR_CHARS)

        outcomes = await asyncio.gather(*(one(k) for k in keys))
        now = self.clock()
        reached, down = False, ""
        for key, (kind, payload) in zip(keys, outcomes):
            if key not in self.samples:
                continue  # the policy changed its metrics meanwhile
            if kind == "ok":
                self.samples[key].update(payload)
                reached = True
                if key in self.errors:
                    log.info("metrics of policy %s: query %r works again", self.policy, key[0])
                    del self.errors[key]
            else:
                if kind == "query":
                    reached = True
                    if self.errors.get(key) != payload:
                        log.warning("metrics of policy %s: query %r failed: %s", self.policy, key[0], payload)
                else:
                    down = payload
                self.errors[key] = payload
        forget = now - FORGET_AFTER_TTLS * cfg.ttl
        for per_node in self.samples.values():
            for nm in [nm for nm, (_, t) in per_node.items() if t < forget]:
                del per_node[nm]
        self._transition(reached or not keys, down, now)
        self.last_refresh = now
        self.view.publish(self.samples, now, cfg.ttl, bool(self.available), cfg.usage_lag, cfg.usage_lag + cfg.ttl)

    def _transition(self, reached: bool, down: str, now: float) -> None:
        """One log line when Prometheus goes away and one when it is back, not one per refresh."""
        addr = self.config.address
        if reached:
            self.last_success = now
            if self.available is False:
                log.info("metrics of policy %s: Prometheus %s is reachable again after %.0fs; metric scoring "
                         "resumes", self.policy, addr, now - (self.down_since or now))
            elif self.available is None:
                log.info("metrics of policy %s: Prometheus %s is reachable (%d queries every %gs)",
                         self.policy, addr, len(self.samples), self.config.refresh)
            self.available, self.down_error, self.down_since = True, "", None
        else:
            if self.available is not False:
                log.warning("metrics of policy %s: Prometheus %s is unreachable (%s); nodes keep their values "
                            "until they are older than %gs, then onMissingMetrics applies", self.policy, addr,
                            down, self.config.ttl)
                self.down_since = now
            self.available, self.down_error = False, down

    # ------------------------------------------------------------------ status
    def condition(self, counts: list[dict]) -> dict[str, str]:
        addr = self.config.address
        if not addr:
            return {"type": "Degraded", "status": "True", "reason": "NoPrometheusAddress",
                    "message": "the policy's metric plugins need a Prometheus address: set spec.prometheus.address "
                               "or the operator's --prometheus-url; until then nodes follow the plugins' "
                               "onMissingMetrics"}
        if self.available is None:
            return {"type": "Degraded", "status": "Unknown", "reason": "NotRefreshedYet",
                    "message": f"waiting for the first answer from Prometheus {addr}"}
        if not self.available:
            return {"type": "Degraded", "status": "True", "reason": "PrometheusUnreachable",
                    "message": f"Prometheus {addr} is unreachable: {self.down_error}; nodes without fresh values "
                               "follow the plugins' onMissingMetrics"}
        if self.errors:
            msgs = "; ".join(f"query {q!r}: {e}" for (q, _), e in self.errors.items())
            return {"type": "Degraded", "status": "True", "reason": "QueryFailed",
                    "message": f"{msgs}; nodes without fresh values follow the plugins' onMissingMetrics"}
        empty = [c["query"] for c in counts if c["fresh"] == 0]
        if empty:
            return {"type": "Degraded", "status": "True", "reason": "NoFreshValues",
                    "message": "no node has a fresh value for " + ", ".join(repr(q) for q in empty)}
        return {"type": "Degraded", "status": "False", "reason": "MetricsAvailable",
                "message": f"{len(self.samples)} queries answered by Prometheus {addr}"}

    def status(self, node_names: Sequence[str] | None) -> dict[str, Any]:
        now = self.clock()
        queries = []
        for key, per_node in self.samples.items():
            names = node_names if node_names is not None else list(per_node)
            fresh = stale = missing = 0
            times = []
            for nm in names:
                s = per_node.get(nm)
                if s is None:
                    missing += 1
                    continue
                times.append(s[1])
                if now - s[1] <= self.config.ttl:
                    fresh += 1
                else:
                    stale += 1
            q = {"query": key[0], "nodeLabel": key[1], "fresh": fresh, "stale": stale, "missing": missing,
                 "newestSampleTime": rfc3339(max(times)) if times else None,
                 "oldestSampleTime": rfc3339(min(times)) if times else None}
            if key in self.errors:
                q["error"] = self.errors[key]
            queries.append(q)
        metrics = {"address": self.config.address, "available": bool(self.available),
                   "refreshIntervalSeconds": self.config.refresh, "ttlSeconds": self.config.ttl,
                   "lastRefreshTime": rfc3339(self.last_refresh), "lastSuccessTime": rfc3339(self.last_success),
                   "inFlightPods": len(self.view.records), "queries": queries}
        return {"conditions": [self.condition(queries)], "metrics": metrics}


class PrometheusMetricSources(MetricSources):
    """Builds, refreshes and reports the Prometheus sources of every policy that needs one."""

    def __init__(self, default_address: str | None = None, *, refresh: float = DEFAULT_REFRESH,
                 timeout: float = DEFAULT_TIMEOUT, ttl: float = DEFAULT_TTL, usage_lag: float = DEFAULT_USAGE_LAG,
                 registry: Registry | None = None,
                 query_fn: Callable[[str, str, float], list] = prometheus_api_query,
                 clock: Callable[[], float] = time.time) -> None:
        self.default_address = default_address
        self.defaults = (refresh, timeout, ttl, usage_lag)
        self.registry = registry
        self.query_fn = query_fn
        self.clock = clock
        self.sources: dict[str, PolicySource] = {}
        self._running = False

    # ------------------------------------------------------------------ policies
    def _metric_plugins(self, spec: SchedulingPolicySpec) -> tuple[list[SeriesKey], set[str]]:
        registry = self.registry or default_registry()
        keys: list[SeriesKey] = []
        plugins: set[str] = set()
        rollout = getattr(spec, "rollout", None)  # a rollout's candidate reads its metrics from the same source
        for ref in [*spec.plugins, *(rollout.candidate.plugins if rollout is not None else [])]:
            cls = registry.get(ref.name)
            if cls is None or not issubclass(cls, ReadsMetrics) or cls.Args is None:
                continue
            try:
                args = cls.Args.model_validate(ref.args or {})
            except ValidationError:
                continue  # the chain builder reports it
            plugins.add(cls.NAME)
            keys.extend(k for k in cls.metric_queries(args) if k not in keys)
        return keys, plugins

    def _config(self, spec: SchedulingPolicySpec) -> SourceConfig:
        p = spec.prometheus
        address = (p.address if p and p.address else self.default_address) or ""
        refresh, timeout, ttl, lag = self.defaults
        if p is not None:
            refresh = duration_seconds(p.refresh_interval) if p.refresh_interval else refresh
            timeout = duration_seconds(p.query_timeout) if p.query_timeout else timeout
            ttl = duration_seconds(p.ttl) if p.ttl else ttl
            lag = duration_seconds(p.usage_lag) if p.usage_lag else lag
        return SourceConfig(address.rstrip("/"), refresh, timeout, ttl, lag)

    def policy_updated(self, name: str, spec: Any) -> list[str]:
        keys, plugins = self._metric_plugins(spec)
        if not keys:
            self.policy_deleted(name)
            return []
        config = self._config(spec)
        src = self.sources.get(name)
        if src is not None and src.config == config:
            src.set_keys(keys, plugins)
            return []
        self.policy_deleted(name)
        src = self.sources[name] = PolicySource(name, config, keys, plugins, self.clock)
        if self._running:
            self._launch(src)
        return []

    def policy_deleted(self, name: str) -> None:
        src = self.sources.pop(name, None)
        if src is not None and src.task is not None:
            src.task.cancel()

    # ------------------------------------------------------------------ reading
    def view(self, name: str) -> MetricsView | None:
        src = self.sources.get(name)
        return None if src is None else src.view

    def status(self, name: str) -> dict[str, Any] | None:
        src = self.sources.get(name)
        if src is None:
            return None
        return src.status(list(self._node_names()) if self._node_names is not None else None)

    # ------------------------------------------------------------------ refresh tasks
    def _launch(self, src: PolicySource) -> None:
        if src.config.address:  # without one the source only reports that it has none
            src.task = asyncio.get_running_loop().create_task(self._refresh_loop(src))

    async def _refresh_loop(self, src: PolicySource) -> None:
        while True:
            try:
                await src.refresh(self.query_fn)
                self._requeue_rejected(src)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not end the refreshes
                log.exception("metrics of policy %s: refresh failed", src.policy)
            await asyncio.sleep(src.config.refresh)

    def _requeue_rejected(self, src: PolicySource) -> None:
        """New values may lift the rejections of the policy's metric plugins."""
        if self._requeue is not None:
            self._requeue(EVENT, lambda q: q.policy == src.policy and bool(q.unschedulable_plugins & src.plugins))

    async def start(self) -> None:
        self._running = True
        for src in self.sources.values():
            if src.task is None:
                self._launch(src)

    async def stop(self) -> None:
        self._running = False
        tasks = [s.task for s in self.sources.values() if s.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

