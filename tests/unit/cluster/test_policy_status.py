"""PolicyStatusWriter against the fake client: the status fields and counts, no write when
nothing changed, lastTransitionTime moves only on a flip, a deleted policy is not written."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from support.fakeclient import FakeClient

from policy_scheduler.cluster import policy_status
from policy_scheduler.cache.policies import PLURAL_PATH, PolicyStore
from policy_scheduler.cluster.policy_status import PolicyStatusWriter
from policy_scheduler.cluster.telemetry import Telemetry
from policy_scheduler.framework.interface import Handle
from policy_scheduler.metricsources.manager import MetricSources

GOOD = {"plugins": [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesBalancedAllocation", "weight": 2}]}
BAD_WEIGHT = {"plugins": [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesBalancedAllocation", "weight": -1}]}
EMPTY = {"active": 0, "backoff": 0, "unschedulable": 0}


class Queue:
    """The queue's per-policy counts, as the writer reads them."""

    def __init__(self) -> None:
        self.by_policy: dict[str, dict[str, int]] = {}
        self.rejected: dict[tuple[str, str], int] = {}  # (policy, plugin) -> pods in the pool

    def counts(self, policy: str | None = None) -> dict[str, int]:
        if policy is not None:
            return dict(self.by_policy.get(policy, EMPTY))
        return {k: sum(c[k] for c in self.by_policy.values()) for k in EMPTY}

    def unschedulable_plugin_counts(self) -> dict[tuple[str, str], int]:
        return dict(self.rejected)


class Sources(MetricSources):
    def status(self, name):
        return {"conditions": [{"type": "Degraded", "status": "False", "reason": "Fresh", "message": ""}],
                "metrics": {"inFlightPods": 0}} if name == "m" else None


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    """A distinct timestamp per call, so a moved lastTransitionTime shows."""
    ticks = itertools.count()
    monkeypatch.setattr(policy_status, "now_rfc3339", lambda: f"2025-01-01T00:00:{next(ticks):02d}Z")


def setup(sources=None):
    client, queue, telemetry = FakeClient(), Queue(), Telemetry()
    sources = sources or MetricSources()
    store = PolicyStore(sources, lambda name: Handle())
    writer = PolicyStatusWriter(client, store.policies, queue, sources, telemetry, interval=0.01)
    return client, queue, telemetry, store, writer


def policy(name, spec, gen=1):
    return {"metadata": {"name": name, "generation": gen}, "spec": spec}


def test_status_fields_and_counts():
    client, queue, _, store, writer = setup()
    store.on_policy("ADDED", policy("p", GOOD, gen=4))
    st = store.policies["p"]
    st.scheduled, st.last_scheduled_time = 3, "2025-01-01T00:00:00Z"
    queue.by_policy["p"] = {"active": 2, "backoff": 1, "unschedulable": 4}
    asyncio.run(writer.write(st))
    (call,) = client.calls_of("merge_patch")
    assert call.path == f"{PLURAL_PATH}/p/status"
    status = call.body["status"]
    assert status["conditions"] == [{
        "type": "Ready", "status": "True", "reason": "Valid", "observedGeneration": 4,
        "message": "chain built: SchedulingGates, NodeResourcesFit(w=1), NodeResourcesBalancedAllocation(w=2), "
                   "DefaultBinder",
        "lastTransitionTime": "2025-01-01T00:00:00Z"}]
    names = [p.name for p in st.chain.resolved]
    assert [p["name"] for p in status["plugins"]] == names and status["pluginCount"] == len(names)
    assert status["pluginSummary"] == ("SchedulingGates,NodeResourcesFit:1,NodeResourcesBalancedAllocation:2,"
                                       "DefaultBinder")
    assert {k: status[k] for k in ("observedGeneration", "scheduled", "unschedulable", "pending",
                                   "lastScheduledTime")} == {
        "observedGeneration": 4, "scheduled": 3, "unschedulable": 4, "pending": 7,
        "lastScheduledTime": "2025-01-01T00:00:00Z"}
    assert "metrics" not in status and st.last_written == status and not st.dirty


def test_metric_sources_add_their_conditions_and_metrics():
    client, _, _, store, writer = setup(Sources())
    store.on_policy("ADDED", policy("m", GOOD))
    status = writer.policy_status(store.policies["m"])
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Degraded"]
    assert status["metrics"] == {"inFlightPods": 0}


def test_no_write_when_unchanged_and_transition_time_moves_only_on_a_flip():
    client, queue, _, store, writer = setup()
    store.on_policy("ADDED", policy("p", GOOD))
    st = store.policies["p"]

    async def main():
        await writer.write(st)
        st.dirty = True
        await writer.write(st)  # nothing changed: no request
        assert len(client.calls_of("merge_patch")) == 1 and not st.dirty
        queue.by_policy["p"] = {"active": 1, "backoff": 0, "unschedulable": 0}
        await writer.write(st)  # a count changed: written, the condition keeps its time
        store.on_policy("MODIFIED", policy("p", BAD_WEIGHT, gen=2))
        await writer.write(st)  # Ready flips to False: a new time

    asyncio.run(main())
    conds = [c.body["status"]["conditions"][0] for c in client.calls_of("merge_patch")]
    assert len(conds) == 3
    assert conds[0]["lastTransitionTime"] == conds[1]["lastTransitionTime"] == "2025-01-01T00:00:00Z"
    assert conds[2]["lastTransitionTime"] != conds[1]["lastTransitionTime"]
    assert (conds[2]["status"], conds[2]["reason"], conds[2]["observedGeneration"]) == ("False", "InvalidSpec", 2)
    assert conds[2]["message"].startswith("generation 2 is invalid: spec.plugins[1].weight: ")
    assert conds[2]["message"].endswith("; scheduling with generation 1")  # no revision recorded here
    st.revision, st.revision_generation = 3, 1  # the chain's revision, once recorded
    assert writer.policy_status(st)["conditions"][0]["message"].endswith("; scheduling with revision 3 (generation 1)")
    assert writer.policy_status(st)["revision"] == 3


def test_a_deleted_policy_is_not_written_and_other_failures_are_counted():
    client, _, telemetry, store, writer = setup()
    store.on_policy("ADDED", policy("gone", GOOD))
    store.on_policy("ADDED", policy("p", GOOD))
    client.fail("merge_patch", 404, path_contains="/gone/", times=1)
    client.fail("merge_patch", 500, path_contains="/p/", times=1)

    async def main():
        await writer.write(store.policies["gone"])  # 404: deleted meanwhile, not an error
        await writer.write(store.policies["p"])  # 500: counted, retried by the next batch
        assert not store.policies["gone"].dirty and store.policies["gone"].last_written is None
        assert store.policies["p"].dirty
        store.on_policy("DELETED", policy("gone", GOOD))
        loop = asyncio.get_running_loop().create_task(writer.run())
        await asyncio.sleep(0.1)
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)

    asyncio.run(main())
    paths = [c.path for c in client.calls_of("merge_patch")]
    assert paths.count(f"{PLURAL_PATH}/gone/status") == 1  # never again after the 404
    assert paths.count(f"{PLURAL_PATH}/p/status") == 2  # the failed write, then the batch's retry only
    assert telemetry.registry.get_sample_value("policy_scheduler_events_dropped_total", {"kind": "status"}) == 1
    assert telemetry.registry.get_sample_value("scheduler_pending_pods", {"queue": "active"}) == 0


def test_write_soon_writes_in_a_task_and_stop_cancels():
    client, _, _, store, writer = setup()
    store.on_policy("ADDED", policy("p", GOOD))

    async def main():
        writer.write_soon(store.policies["p"])
        await asyncio.sleep(0.01)
        writer.write_soon(store.policies["p"])
        await writer.stop()

    asyncio.run(main())
    assert len(client.calls_of("merge_patch")) == 1


def test_the_status_loop_sets_unschedulable_pods_per_plugin_and_existing_policy():
    """scheduler_unschedulable_pods{plugin,profile}: a policy that does not exist is `unknown`;
    a series whose pods left the pool goes to 0."""
    client, queue, telemetry, store, writer = setup()
    telemetry.known_policies = store.policies  # as the engine sets it
    store.on_policy("ADDED", policy("p", GOOD))
    queue.rejected = {("p", "NodeResourcesFit"): 2, ("nope-1", "PolicySelection"): 1,
                      ("nope-2", "PolicySelection"): 3}

    async def tick():
        task = asyncio.get_running_loop().create_task(writer.run())
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(tick())
    get = telemetry.registry.get_sample_value
    assert get("scheduler_unschedulable_pods", {"plugin": "NodeResourcesFit", "profile": "p"}) == 2
    assert get("scheduler_unschedulable_pods", {"plugin": "PolicySelection", "profile": "unknown"}) == 4
    queue.rejected = {}
    asyncio.run(tick())
    assert get("scheduler_unschedulable_pods", {"plugin": "NodeResourcesFit", "profile": "p"}) == 0


def test_an_unreadable_policy_is_reported_with_reason_unreadable():
    client, _, _, store, writer = setup()
    deep = 1
    for _ in range(80):
        deep = {"a": deep}
    store.on_policy("ADDED", policy("p", {"plugins": [{"name": "NodeAffinity", "args": deep}]}, gen=3))
    cond = writer.policy_status(store.policies["p"])["conditions"][0]
    assert (cond["status"], cond["reason"], cond["observedGeneration"]) == ("False", "Unreadable", 3)
    assert cond["message"].startswith("spec.plugins[0].args.a.a.")
    assert cond["message"].endswith(": nested deeper than 64 levels")
