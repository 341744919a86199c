"""Prometheus sources: parsing, the client's error handling over real HTTP, refresh outcomes,
staleness, transitions logged once, status, policy wiring and per-policy in-flight estimates."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from policy_scheduler.policy.models import SchedulingPolicySpec
from policy_scheduler.framework.metricview import FRESH, MISSING, STALE, estimate_parts
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.metricsources.prometheus import (EVENT, PolicySource, PrometheusMetricSources, QueryError,
                                                       SourceConfig, Unreachable, parse_vector,
                                                       prometheus_api_query)

CPU = ("cpu_q", "instance")
MEM = ("mem_q", "instance")


def sample(node, value, ts=100.0, label="instance", **more):
    return {"metric": {label: node, **more}, "value": [ts, str(value)]}


# ------------------------------------------------------------------ parsing
def test_parse_vector():
    got = parse_vector([
        sample("n1:9100", 0.5, 10.0),  # host:port -> host
        sample("n2", 0.2, 11.0, job="a"),
        sample("n2", 0.7, 11.0, job="b"),  # two series for n2: the largest counts
        sample("n3", "NaN"),  # skipped
        {"metric": {"job": "x"}, "value": [1, "1"]},  # no node label: skipped
    ], "instance")
    assert got == {"n1": (0.5, 10.0), "n2": (0.7, 11.0)}
    assert parse_vector([], "instance") == {}


@pytest.mark.parametrize("result,message", [
    ([1700000000.0, "3"], "must return an instant vector keyed by node"),  # a scalar
    ([{"metric": {"node": "a"}, "value": [1, "1"]}], "no series has the label 'instance' (labels: node)"),
])
def test_parse_vector_rejects_unusable_results(result, message):
    with pytest.raises(QueryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_vector(result, "instance")


# ------------------------------------------------------------------ the client, over real HTTP
class _FakePrometheus(BaseHTTPRequestHandler):
    answers: dict = {}
    seen: list = []

    def do_GET(self):  # noqa: N802
        q = parse_qs(urlparse(self.path).query)
        self.seen.append(q)
        status, body = self.answers.get(q["query"][0], (200, {"status": "success",
                                                             "data": {"resultType": "vector", "result": []}}))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture
def fake_prometheus():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _FakePrometheus)
    _FakePrometheus.answers, _FakePrometheus.seen = {}, []
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", _FakePrometheus
    srv.shutdown()
    srv.server_close()


def test_client_returns_the_vector_and_sends_the_timeout(fake_prometheus):
    url, fake = fake_prometheus
    fake.answers["up"] = (200, {"status": "success", "data": {"resultType": "vector",
                                                              "result": [sample("n1", 1)]}})
    assert prometheus_api_query(url, "up", 2.5) == [sample("n1", 1)]
    assert fake.seen[-1]["timeout"] == ["2.5s"]  # Prometheus's own evaluation limit


def test_client_reports_prometheus_error_text_for_a_bad_query(fake_prometheus):
    url, fake = fake_prometheus
    fake.answers["1 +"] = (400, {"status": "error", "errorType": "bad_data",
                                 "error": "invalid parameter \"query\": 1:4: parse error: unexpected end of input"})
    with pytest.raises(QueryError) as e:
        prometheus_api_query(url, "1 +", 1.0)
    assert str(e.value) == 'bad_data: invalid parameter "query": 1:4: parse error: unexpected end of input'
    assert len(fake.seen) == 1  # no retries


def test_client_server_error_counts_as_unreachable(fake_prometheus):
    url, fake = fake_prometheus
    fake.answers["up"] = (503, {"status": "error", "errorType": "unavailable", "error": "starting"})
    with pytest.raises(Unreachable, match="HTTP 503: unavailable: starting"):
        prometheus_api_query(url, "up", 1.0)
    assert len(fake.seen) == 1


def test_client_non_prometheus_answer_is_unreachable(fake_prometheus):
    url, fake = fake_prometheus
    fake.answers["up"] = (200, {"hello": "world"})  # JSON, but not the API's
    with pytest.raises(Unreachable, match="not a Prometheus API answer"):
        prometheus_api_query(url, "up", 1.0)


def test_client_connection_refused_is_unreachable():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(Unreachable):
        prometheus_api_query(f"http://127.0.0.1:{port}", "up", 1.0)


# ------------------------------------------------------------------ refresh, staleness, transitions
class Clock:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


class FakeQueries:
    """Per query: a list of results, or an exception to raise."""

    def __init__(self):
        self.answers: dict = {}
        self.calls: list = []

    def __call__(self, address, query, timeout):
        self.calls.append((address, query, timeout))
        a = self.answers.get(query, [])
        if isinstance(a, Exception):
            raise a
        return a


def source(clock, ttl=30.0, usage_lag=10.0):
    return PolicySource("p", SourceConfig("http://prom:9090", 5.0, 1.0, ttl, usage_lag), [CPU, MEM],
                        {"LoadAware"}, clock)


def refresh(src, fq):
    asyncio.run(src.refresh(fq))


def states(src, key, names):
    t = NodeTable()
    for n in names:
        t.upsert_node({"metadata": {"name": n}})
    s = src.view.series_for(key)
    return [int(x) for x in s.state[src.view.slot_rows(t)]]


def test_refresh_queries_each_metric_once_for_all_nodes():
    clock, fq = Clock(), FakeQueries()
    fq.answers = {"cpu_q": [sample("a", 0.1, 100), sample("b", 0.2, 100)],
                  "mem_q": [sample("a", 0.3, 100), sample("b", 0.4, 100)]}
    src = source(clock)
    refresh(src, fq)
    assert sorted(q for _, q, _ in fq.calls) == ["cpu_q", "mem_q"]  # one query per metric, not per node
    assert fq.calls[0][0] == "http://prom:9090" and fq.calls[0][2] == 1.0
    assert src.available and states(src, CPU, ["a", "b", "c"]) == [FRESH, FRESH, MISSING]


def test_values_age_into_stale_when_prometheus_goes_away_and_resume(caplog):
    clock, fq = Clock(100.0), FakeQueries()
    fq.answers = {"cpu_q": [sample("a", 0.1, 100)], "mem_q": [sample("a", 0.3, 100)]}
    src = source(clock, ttl=30.0)
    caplog.set_level(logging.INFO, "policy_scheduler.metrics")
    refresh(src, fq)
    fq.answers = {"cpu_q": Unreachable("ConnectionError: refused"), "mem_q": Unreachable("ConnectionError: refused")}
    for t in (110.0, 120.0, 131.0):
        clock.t = t
        refresh(src, fq)
    assert not src.available and not src.view.available
    # the value from t=100 is kept (fresh until 130), then stale
    assert states(src, CPU, ["a"]) == [STALE]
    assert src.view.series_for(CPU).values[src.view.index["a"]] == 0.1
    down = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(down) == 1 and "ConnectionError: refused" in down[0].getMessage()
    cond = src.status(["a"])["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("True", "PrometheusUnreachable")
    fq.answers = {"cpu_q": [sample("a", 0.5, 140)], "mem_q": [sample("a", 0.3, 140)]}
    clock.t = 140.0
    refresh(src, fq)
    back = [r for r in caplog.records if "reachable again" in r.getMessage()]
    assert len(back) == 1 and "after 30s" in back[0].getMessage()
    assert states(src, CPU, ["a"]) == [FRESH] and src.view.series_for(CPU).values[src.view.index["a"]] == 0.5
    assert src.status(["a"])["conditions"][0]["reason"] == "MetricsAvailable"


def test_a_node_absent_from_results_keeps_its_last_value_until_forgotten():
    clock, fq = Clock(100.0), FakeQueries()
    fq.answers = {"cpu_q": [sample("a", 0.1, 100), sample("b", 0.2, 100)], "mem_q": []}
    src = source(clock, ttl=30.0)
    refresh(src, fq)
    fq.answers["cpu_q"] = [sample("a", 0.1, 140)]
    clock.t = 140.0
    refresh(src, fq)
    assert states(src, CPU, ["a", "b"]) == [FRESH, STALE]
    clock.t = 100.0 + 10 * 30.0 + 1  # ten ttls: forgotten
    fq.answers["cpu_q"] = [sample("a", 0.1, clock.t)]
    refresh(src, fq)
    assert states(src, CPU, ["a", "b"]) == [FRESH, MISSING]


def test_an_invalid_query_degrades_without_hiding_the_others(caplog):
    clock, fq = Clock(), FakeQueries()
    fq.answers = {"cpu_q": [sample("a", 0.1, 100)], "mem_q": QueryError("bad_data: parse error")}
    src = source(clock)
    caplog.set_level(logging.INFO, "policy_scheduler.metrics")
    refresh(src, fq)
    refresh(src, fq)
    assert src.available  # Prometheus answered
    st = src.status(["a", "b"])
    assert st["conditions"][0] == {
        "type": "Degraded", "status": "True", "reason": "QueryFailed",
        "message": "query 'mem_q': bad_data: parse error; nodes without fresh values follow the plugins' "
                   "onMissingMetrics"}
    cpu, mem = st["metrics"]["queries"]
    assert (cpu["fresh"], cpu["missing"], "error" in cpu) == (1, 1, False)
    assert mem["error"] == "bad_data: parse error" and mem["missing"] == 2
    assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1  # once, not per refresh


def test_a_failing_client_never_ends_the_refreshes():
    def broken(address, query, timeout):
        raise RuntimeError("boom")

    src = source(Clock())
    refresh(src, broken)
    assert not src.available and src.errors[CPU] == "RuntimeError: boom"


def test_no_fresh_values_degrade_with_a_reason():
    clock, fq = Clock(), FakeQueries()
    fq.answers = {"cpu_q": [sample("a", 0.1, 100)], "mem_q": []}
    src = source(clock)
    refresh(src, fq)
    cond = src.status(["a"])["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("True", "NoFreshValues") and "'mem_q'" in cond["message"]


def test_a_slow_query_is_cut_at_the_timeout():
    release = threading.Event()

    def slow(address, query, timeout):
        release.wait(5)
        return []

    src = PolicySource("p", SourceConfig("http://prom:9090", 5.0, 0.05, 30.0, 10.0), [CPU], set(), Clock())

    async def main():
        try:
            await src.refresh(slow)
        finally:
            release.set()  # let the worker thread end

    asyncio.run(main())
    assert not src.available and src.errors[CPU] == "no answer within 0.05s"


def test_status_counts_and_times():
    clock, fq = Clock(1_700_000_000.0), FakeQueries()
    fq.answers = {"cpu_q": [sample("a", 0.1, 1_700_000_000.0), sample("b", 0.1, 1_699_999_900.0),
                            sample("not-a-node", 0.1, 1_700_000_000.0)], "mem_q": []}
    src = source(clock, ttl=30.0)
    refresh(src, fq)
    src.view.add_inflight("ns/x", "a", parse_pod_parts(), clock.t)
    st = src.status(["a", "b", "c"])
    m = st["metrics"]
    assert (m["address"], m["available"], m["refreshIntervalSeconds"], m["ttlSeconds"], m["inFlightPods"]) == \
        ("http://prom:9090", True, 5.0, 30.0, 1)
    q = m["queries"][0]
    assert (q["query"], q["nodeLabel"], q["fresh"], q["stale"], q["missing"]) == ("cpu_q", "instance", 1, 1, 1)
    assert q["newestSampleTime"] == "2023-11-14T22:13:20Z" and q["oldestSampleTime"] == "2023-11-14T22:11:40Z"


def parse_pod_parts():
    from policy_scheduler.framework.metricview import estimate_parts
    return estimate_parts(parse_pod({"metadata": {"name": "x", "namespace": "ns"},
                                     "spec": {"containers": [{"name": "c", "image": "i"}]}}))


# ------------------------------------------------------------------ the manager
def spec(plugins, prometheus=None):
    body = {"plugins": plugins}
    if prometheus is not None:
        body["prometheus"] = prometheus
    return SchedulingPolicySpec.model_validate(body)


LOAD_AWARE = [{"name": "NodeResourcesFit"}, {"name": "LoadAware", "weight": 3}]


def test_policies_without_metric_plugins_get_no_source():
    m = PrometheusMetricSources("http://prom:9090")
    assert m.policy_updated("p", spec([{"name": "NodeResourcesFit"}])) == []
    assert m.view("p") is None and m.status("p") is None


def test_a_metric_policy_without_an_address_is_degraded_not_invalid():
    m = PrometheusMetricSources(None)
    assert m.policy_updated("p", spec(LOAD_AWARE)) == []  # still Ready: the fallbacks apply
    cond = m.status("p")["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("True", "NoPrometheusAddress")
    assert "spec.prometheus.address or the operator's --prometheus-url" in cond["message"]

    async def main():
        await m.start()
        assert m.sources["p"].task is None  # nothing to query
        await m.stop()

    asyncio.run(main())
    assert m.policy_updated("p", spec(LOAD_AWARE, {"address": "http://other:9090/"})) == []
    src = m.sources["p"]
    assert src.config == SourceConfig("http://other:9090", 15.0, 5.0, 120.0, 60.0)  # operator defaults
    assert src.plugins == {"LoadAware"} and len(src.samples) == 2


def test_policy_settings_override_defaults_and_changes_replace_or_keep_the_source():
    m = PrometheusMetricSources("http://prom:9090", refresh=10, timeout=2, ttl=60, usage_lag=30)
    m.policy_updated("p", spec(LOAD_AWARE, {"refreshInterval": "1s", "ttl": "1m30s", "usageLag": "500ms"}))
    src = m.sources["p"]
    assert src.config == SourceConfig("http://prom:9090", 1.0, 2.0, 90.0, 0.5)
    # same source settings, one more metric: the source (and its samples) stays
    gpu = {"name": "MetricThreshold", "args": {"metrics": [{"name": "gpu", "query": "gpu_q", "rejectAbove": 0.9}]}}
    m.policy_updated("p", spec(LOAD_AWARE + [gpu], {"refreshInterval": "1s", "ttl": "1m30s", "usageLag": "500ms"}))
    assert m.sources["p"] is src and ("gpu_q", "instance") in src.samples
    assert src.plugins == {"LoadAware", "MetricThreshold"}
    # new settings: a new source
    m.policy_updated("p", spec(LOAD_AWARE, {"refreshInterval": "2s"}))
    assert m.sources["p"] is not src
    m.policy_deleted("p")
    assert m.view("p") is None


def test_each_policy_has_its_own_view_of_in_flight_estimates():
    m = PrometheusMetricSources("http://prom:9090")
    m.policy_updated("a", spec(LOAD_AWARE))
    m.policy_updated("b", spec(LOAD_AWARE))
    pod = parse_pod({"metadata": {"name": "x", "namespace": "ns"},
                     "spec": {"containers": [{"name": "c", "image": "i",
                                              "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}})
    m.view("a").add_inflight(pod.key, "n1", estimate_parts(pod), 100.0)
    assert "ns/x" in m.view("a").records and not m.view("b").records
    assert m.status("a")["metrics"]["inFlightPods"] == 1
    m.view("a").remove_inflight("ns/x")
    assert not m.view("a").records


def test_running_manager_refreshes_and_requeues_pods_its_plugins_rejected():
    fq = FakeQueries()
    fq.answers = {"cpu_q": [sample("a", 0.1, 100)], "mem_q": [sample("a", 0.2, 100)]}
    m = PrometheusMetricSources("http://prom:9090", query_fn=fq, clock=Clock(100.0))
    moves = []
    m.attach(lambda: ["a"], lambda event, check: moves.append((event, check)))
    m.policy_updated("p", spec([{"name": "LoadAware", "args": {"cpuQuery": "cpu_q", "memoryQuery": "mem_q"}}],
                               {"refreshInterval": "50ms"}))

    class Q:
        def __init__(self, policy, plugins):
            self.policy, self.unschedulable_plugins = policy, plugins

    async def main():
        await m.start()
        await asyncio.sleep(0.2)
        await m.stop()

    asyncio.run(main())
    assert len(fq.calls) >= 4  # refreshed on its own, every 50 ms
    assert m.status("p")["conditions"][0]["reason"] == "MetricsAvailable"
    event, check = moves[0]
    assert event == EVENT
    assert check(Q("p", {"LoadAware"})) and not check(Q("p", {"NodeResourcesFit"})) \
        and not check(Q("other", {"LoadAware"}))
