"""cluster/revisions.py against the in-memory client: every valid generation recorded as a
ControllerRevision (numbered, reused, pruned, by the leader only), and after a restart a policy
whose current generation is invalid scheduled with its newest valid revision; failures retried."""

from __future__ import annotations

import asyncio
import logging

import pytest
from support.fakeclient import FakeClient

from policy_scheduler.cache import revisions as rev
from policy_scheduler.cache.policies import PolicyStore
from policy_scheduler.cluster.apicalls import ApiCalls
from policy_scheduler.cluster.leader import Leadership
from policy_scheduler.cluster.policy_status import invalid_message, revisions_conditions
from policy_scheduler.cluster.revisions import Revisions
from policy_scheduler.cluster.telemetry import Telemetry
from policy_scheduler.framework.interface import Handle
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.metricsources.manager import MetricSources

NS = "sched"
PATH = rev.collection_path(NS)
GOOD = {"plugins": [{"name": "NodeResourcesFit", "weight": 5}, {"name": "TaintToleration", "weight": 3}]}
EDIT = {"plugins": [{"name": "NodeResourcesFit", "weight": 2}, {"name": "TaintToleration", "weight": 3}]}
BOGUS = {"plugins": [{"name": "NodeResourcesFit", "weight": 5, "args": {"scoringStrategy": {"type": "Bogus"}}}]}
UNKNOWN = {"plugins": [{"name": "NoSuchPlugin"}]}


class Leader(Leadership):
    def __init__(self, leading: bool = True) -> None:
        super().__init__()
        self.leading_now = leading

    def valid(self) -> bool:
        return self.leading_now


class Operator:
    """One operator process's store and revisions, wired as the engine wires them."""

    def __init__(self, client: FakeClient, *, limit: int = 10, leading: bool = True) -> None:
        self.leader = Leader(leading)
        self.recorded: list[str] = []
        self.store = PolicyStore(MetricSources(), lambda name: Handle(), on_change=self.changed,
                                 namespaces={NS: {}})  # the namespaces informer's view
        api = ApiCalls(client, self.leader, Telemetry(), lambda: "v1alpha2")
        self.revisions = Revisions(client, self.store, api, namespace=NS, history_limit=limit,
                                   may_write=self.leader.valid, on_recorded=lambda st: self.recorded.append(st.name))

    def changed(self, st) -> None:
        self.revisions.policy_changed(st)

    def apply(self, spec, gen, name="binpack", uid="u1") -> None:
        self.store.on_policy("MODIFIED", {"metadata": {"name": name, "generation": gen, "uid": uid}, "spec": spec})

    def settle(self) -> bool:
        return asyncio.run(self.revisions.run_once())


def served(client: FakeClient) -> dict[str, tuple[int, int]]:
    """name -> (revision, generation) of what the API server holds."""
    return {n: (o["revision"], int(o["metadata"]["annotations"][rev.GENERATION_ANNOTATION]))
            for n, o in client.served[PATH].items()}


@pytest.fixture
def client():
    c = FakeClient()
    c.serve(PATH)
    return c


def test_every_valid_generation_is_recorded_and_the_same_spec_reuses_its_revision(client):
    op = Operator(client)
    op.apply(GOOD, 1)
    assert op.settle()
    name = rev.revision_name("binpack", GOOD)
    obj = client.served[PATH][name]
    assert obj["data"] == GOOD and obj["revision"] == 1
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert obj["metadata"]["labels"] == {rev.LABEL: "binpack"}
    st = op.store.policies["binpack"]
    assert st.revision_in_use == 1 and op.recorded == ["binpack"]

    op.apply(EDIT, 2)
    op.settle()
    assert st.revision_in_use == 2
    op.apply(BOGUS, 3)  # invalid: nothing recorded, the chain of revision 2 stays in use
    op.settle()
    assert st.revision_in_use == 2 and len(client.served[PATH]) == 2
    assert invalid_message(st).startswith("generation 3 is invalid: spec.plugins[0].args.scoringStrategy.type")
    assert invalid_message(st).endswith("; scheduling with revision 2 (generation 2)")
    op.apply(GOOD, 4)  # the first spec again: its revision, renumbered
    op.settle()
    assert served(client) == {name: (3, 4), rev.revision_name("binpack", EDIT): (2, 2)}
    assert st.revision_in_use == 3
    assert [c.method for c in client.calls if c.path.startswith(PATH)][-2:] == ["get", "merge_patch"]


def test_the_history_is_bounded(client):
    op = Operator(client, limit=2)
    for gen in range(1, 5):
        op.apply({"plugins": [{"name": "TaintToleration", "weight": gen}]}, gen)
        op.settle()
    assert sorted(served(client).values()) == [(3, 3), (4, 4)]
    assert sum(1 for c in client.calls if c.method == "delete") == 2


def test_only_the_leader_writes_and_records_when_it_leads(client):
    op = Operator(client, leading=False)
    op.apply(GOOD, 1)
    op.settle()
    assert client.served[PATH] == {} and not [c for c in client.calls if c.method in ("post", "merge_patch")]
    op.leader.leading_now = True
    op.revisions.lead()
    op.settle()
    assert served(client) == {rev.revision_name("binpack", GOOD): (1, 1)}


def test_after_a_restart_an_invalid_policy_is_scheduled_with_its_last_valid_revision(client):
    before = Operator(client)
    before.apply(GOOD, 1)
    before.settle()
    before.apply(EDIT, 2)
    before.settle()
    # the operator is down; an invalid edit gets in; a new process starts
    op = Operator(client)
    op.apply(BOGUS, 3)
    st = op.store.policies["binpack"]
    assert st.chain is None
    pod = parse_pod({"metadata": {"name": "p", "namespace": "ns", "labels": {"policy-scheduler.io/policy": "binpack"}},
                     "spec": {"containers": [{"name": "c", "image": "i"}]}})
    assert op.store.resolve_policy(pod)[0] is None
    asyncio.run(op.revisions.restore_all())  # the sync point
    assert op.store.resolve_policy(pod)[0] is st
    assert (st.chain_generation, st.revision_in_use, st.ready) == (2, 2, False)
    assert {p.name: p.weight for p in st.chain.resolved}["NodeResourcesFit"] == 2
    assert invalid_message(st) == (f"generation 3 is invalid: {'; '.join(st.errors)}; "
                                   "scheduling with revision 2 (generation 2)")
    # later invalid edits keep it; a valid one replaces it and is recorded
    op.apply(UNKNOWN, 4)
    assert st.chain is not None and st.revision_in_use == 2
    op.settle()
    assert len(client.served[PATH]) == 2
    op.apply(GOOD, 5)
    op.settle()
    assert st.ready and st.revision_in_use == 3


def test_a_revision_that_is_not_valid_any_more_is_skipped(client, caplog):
    client.serve(PATH, rev.revision_object("binpack", "u1", GOOD, 1, 1),
                 rev.revision_object("binpack", "u1", UNKNOWN, 2, 2),
                 rev.revision_object("binpack", "old-uid", EDIT, 7, 9))  # an earlier policy of that name
    op = Operator(client)
    op.apply(BOGUS, 3)
    with caplog.at_level(logging.WARNING, "policy_scheduler"):
        asyncio.run(op.revisions.restore_all())
    st = op.store.policies["binpack"]
    assert (st.revision_in_use, st.chain_generation) == (1, 1)
    assert "revision 2: spec.plugins[0].name: unknown plugin 'NoSuchPlugin'" in caplog.text


def test_no_revision_leaves_the_policy_waiting(client):
    op = Operator(client)
    op.apply(BOGUS, 1)
    asyncio.run(op.revisions.restore_all())
    st = op.store.policies["binpack"]
    assert st.chain is None and invalid_message(st) == "; ".join(st.errors)
    op.settle()  # the background task reads them again, finds none, and forgets the policy
    assert op.revisions._pending == {}


def test_a_valid_policy_needs_no_read_at_the_sync_point(client):
    op = Operator(client)
    op.apply(GOOD, 1)
    asyncio.run(op.revisions.restore_all())
    assert not [c for c in client.calls if c.method == "get"]


def test_failed_requests_are_retried_and_never_lost(client, caplog):
    first = Operator(client)
    first.apply(GOOD, 1)
    first.settle()
    op = Operator(client)
    op.apply(BOGUS, 2)
    client.fail("get", 403, path_contains=PATH, times=1)
    with caplog.at_level(logging.WARNING, "policy_scheduler"):
        asyncio.run(op.revisions.restore_all())  # the sync point does not wait for it
    st = op.store.policies["binpack"]
    assert st.chain is None and "cannot read the ControllerRevisions" in caplog.text
    assert op.settle() and st.revision_in_use == 1  # the background task reads them

    client.fail("post", 500, path_contains=PATH, times=2)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, "policy_scheduler"):
        op.apply(EDIT, 3)
        assert not op.settle() and not op.settle()
        assert op.settle()
    assert st.revision_in_use == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "HTTP 500" in warnings[0].getMessage()  # once per run of failures
    assert "requests work again" in caplog.text

    client.fail("post", 409, path_contains=PATH, times=1)  # a write this replica's LIST did not see
    caplog.clear()
    with caplog.at_level(logging.INFO, "policy_scheduler"):
        op.apply({"plugins": [{"name": "TaintToleration"}]}, 4)
        assert not op.settle()  # tried again, quietly
        assert op.settle()
    assert "409" not in caplog.text and not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert st.revision_in_use == 3


def test_the_background_task_runs_until_cancelled(client):
    op = Operator(client)

    async def main():
        task = asyncio.get_running_loop().create_task(op.revisions.run())
        op.apply(GOOD, 1)
        for _ in range(50):
            await asyncio.sleep(0.01)
            if op.store.policies["binpack"].revision_in_use:
                break
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert op.store.policies["binpack"].revision_in_use == 1


def test_off_without_a_namespace(client):
    store = PolicyStore(MetricSources(), lambda name: Handle())
    r = Revisions(client, store, ApiCalls(client, Leadership(), Telemetry(), lambda: "v1"), namespace=None)
    store.on_change = r.policy_changed
    store.on_policy("ADDED", {"metadata": {"name": "p", "generation": 1, "uid": "u"}, "spec": BOGUS})
    asyncio.run(r.restore_all())
    asyncio.run(r.run())
    assert client.calls == []


def test_the_engine_restores_at_its_sync_point(client):
    from policy_scheduler.serve import build_engine

    client.serve(PATH, rev.revision_object("binpack", "u1", GOOD, 4, 3))

    async def main():
        e = build_engine(client, revision_namespace=NS)

        async def listed():  # the informers, listed
            return 0.0

        e.informers.run = listed
        e.on_policy("ADDED", {"metadata": {"name": "binpack", "generation": 5, "uid": "u1"}, "spec": BOGUS})
        assert e.policies["binpack"].chain is None
        await e.sync()
        await e.stop()
        return e

    e = asyncio.run(main())
    st = e.policies["binpack"]
    assert e.synced and st.revision_in_use == 3 and not st.ready
    status = e.status_writer.policy_status(st)
    assert status["revision"] == 3 and status["pluginCount"] > 0
    assert status["conditions"][0]["message"].endswith("; scheduling with revision 3 (generation 4)")


# ------------------------------------------------------------------ saying when they cannot be kept
def conditions(op: Operator, name: str = "binpack") -> list[dict]:
    """The policy's RevisionsRecorded conditions, as its status shows them."""
    return revisions_conditions(op.store.policies[name])


def test_a_missing_namespace_is_shown_on_every_policy_and_clears_when_it_appears(client):
    op = Operator(client)
    namespaces = op.store.namespaces = {}  # the namespaces informer: NS is not there
    op.apply(GOOD, 1)
    op.apply(EDIT, 1, name="spread", uid="u2")
    asyncio.run(op.revisions.restore_all())  # the sync point
    p = op.revisions.problem
    assert p is not None and p.reason == "NamespaceNotFound"
    assert p.message.startswith(f"ControllerRevisions cannot be written in namespace {NS!r}: the namespace does "
                                "not exist; this policy's last valid generation is not recorded")
    assert "--revision-namespace" in p.message and "$POD_NAMESPACE" in p.message
    for name in ("binpack", "spread"):
        (cond,) = conditions(op, name)
        assert (cond["status"], cond["reason"], cond["message"]) == ("False", "NamespaceNotFound", p.message)
    op.apply(GOOD, 1, name="late", uid="u3")  # a policy created meanwhile carries it too
    assert conditions(op, "late")[0]["reason"] == "NamespaceNotFound"

    assert not op.settle() and not client.calls_of("post")  # no write tried while it is missing
    namespaces[NS] = {}  # its ADD
    op.revisions.namespaces_changed()
    assert op.revisions.problem is None and all(not conditions(op, n) for n in ("binpack", "spread", "late"))
    assert op.settle()
    assert {r[0] for r in served(client).values()} == {1} and len(served(client)) == 3  # recorded now


def test_a_write_refused_is_shown_and_another_error_is_the_policys_alone(client):
    op = Operator(client)
    op.store.namespaces = {NS: {}}
    op.apply(GOOD, 1)
    op.apply(EDIT, 1, name="spread", uid="u2")
    client.fail("post", 403, path_contains=PATH, times=1)
    assert not op.settle()
    p = op.revisions.problem
    assert p.reason == "Forbidden" and "manifests/09-revisions-rbac.yaml" in p.message and "HTTP 403" in p.message
    assert conditions(op, "binpack")[0]["reason"] == conditions(op, "spread")[0]["reason"] == "Forbidden"
    assert op.settle()  # granted now: cleared on every policy
    assert op.revisions.problem is None and not conditions(op, "binpack") and not conditions(op, "spread")

    client.fail("post", 422, path_contains=PATH, times=1)
    op.apply(GOOD, 2, name="third", uid="u3")
    assert not op.settle()
    assert op.revisions.problem is None and not conditions(op, "binpack")
    (cond,) = conditions(op, "third")
    assert cond["reason"] == "RequestFailed" and "HTTP 422" in cond["message"]
    assert op.settle() and not conditions(op, "third")
