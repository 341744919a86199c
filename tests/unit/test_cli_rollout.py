"""`policy-scheduler rollout history|undo` (commands/rollout.py) against the in-memory client: the
table, the revision ``undo`` picks, the spec it writes back, a concurrent change."""

from __future__ import annotations

import asyncio
import io

import pytest
from support.fakeclient import FakeClient

from policy_scheduler.cache import revisions as rev
from policy_scheduler.cli import build_parser
from policy_scheduler.commands import rollout
from policy_scheduler.timefmt import parse_rfc3339

NS = "sched"
GOOD = {"plugins": [{"name": "NodeResourcesFit", "weight": 5}, {"name": "TaintToleration", "weight": 3}]}
EDIT = {"plugins": [{"name": "NodeResourcesFit", "weight": 2}, {"name": "TaintToleration", "weight": 3}]}
MORE = {"plugins": [{"name": "NodeResourcesFit", "weight": 2}, {"name": "TaintToleration", "weight": 3},
                    {"name": "ImageLocality", "weight": 1}]}
BOGUS = {"plugins": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Bogus"}}}]}


def cluster(spec=BOGUS, in_use: int | None = 2) -> FakeClient:
    c = FakeClient()
    c.serve(rollout.POLICIES, {"apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy",
                               "metadata": {"name": "binpack", "uid": "u1", "generation": 4},
                               "spec": spec, "status": {"revision": in_use, "conditions": [
                                   {"type": "Ready", "status": "False"}]}})
    revs = c.serve(rev.collection_path(NS))
    for number, (s, gen, created) in enumerate([(GOOD, 1, "2025-01-01T00:00:00Z"), (EDIT, 2, "2025-01-01T01:00:00Z"),
                                                (MORE, 3, "2025-01-01T01:59:30Z")], 1):
        obj = rev.revision_object("binpack", "u1", s, gen, number)
        obj["metadata"]["creationTimestamp"] = created
        revs[obj["metadata"]["name"]] = obj
    stale = rev.revision_object("binpack", "old", EDIT, 1, 7)
    stale["metadata"]["name"] = "binpack-stale"
    revs["binpack-stale"] = stale
    return c


def test_history_lists_the_revisions_what_changed_and_the_one_in_use():
    c = cluster()
    obj, revisions = asyncio.run(rollout.read(c, "binpack", NS))
    assert [r.number for r in revisions] == [3, 2, 1]  # the earlier policy's revision is not listed
    out = io.StringIO()
    rollout.write_history(obj, revisions, NS, out, now=parse_rfc3339("2025-01-01T02:00:00Z"))
    lines = out.getvalue().splitlines()
    assert lines[0] == ("schedulingpolicy.policy-scheduler.io/binpack: generation 4, Ready False, "
                        "scheduling with revision 2")
    assert lines[1].split() == ["REVISION", "GENERATION", "CREATED", "AGE", "IN", "USE", "CHANGE"]
    rows = [ln.split(None, 4) for ln in lines[2:]]
    assert [r[:4] for r in rows] == [["1", "1", "2025-01-01T00:00:00Z", "2h"], ["2", "2", "2025-01-01T01:00:00Z", "1h"],
                                     ["3", "3", "2025-01-01T01:59:30Z", "30s"]]
    assert rows[0][4] == "plugins: NodeResourcesFit(w=5), TaintToleration(w=3)"
    assert rows[1][4].split(None, 1) == ["*", "NodeResourcesFit weight 5->2"]
    assert rows[2][4] == "+ImageLocality(w=1)"
    out = io.StringIO()
    rollout.write_revision(obj, revisions[1], NS, out)
    assert out.getvalue().startswith("schedulingpolicy.policy-scheduler.io/binpack revision 2: generation 2")
    assert "weight: 2" in out.getvalue()


def test_undo_goes_back_to_the_revision_before_the_one_in_use():
    obj, revisions = asyncio.run(rollout.read(cluster(), "binpack", NS))
    assert rollout.undo_target(obj, revisions, None).number == 1
    assert rollout.undo_target(obj, revisions, 3).number == 3
    obj["status"] = {}  # no revision in use known: the one before the newest
    assert rollout.undo_target(obj, revisions, None).number == 2
    with pytest.raises(rollout.RolloutError, match=r"revision 9 .* not found \(revisions: 1, 2, 3\)"):
        rollout.undo_target(obj, revisions, 9)
    obj["status"] = {"revision": 1}
    with pytest.raises(rollout.RolloutError, match="no revision before revision 1"):
        rollout.undo_target(obj, revisions, None)
    with pytest.raises(rollout.RolloutError, match="no revisions"):
        rollout.undo_target(obj, [], None)


def test_undo_writes_the_spec_back():
    c = cluster()
    line = asyncio.run(rollout.undo(c, "binpack", NS, None))
    assert line == "schedulingpolicy.policy-scheduler.io/binpack rolled back to revision 1 (generation 1)"
    (put,) = c.calls_of("put")
    assert put.path == f"{rollout.POLICIES}/binpack" and "status" not in put.body
    assert put.body["metadata"]["resourceVersion"]  # the write is refused if the policy changed meanwhile
    assert c.served[rollout.POLICIES]["binpack"]["spec"] == GOOD
    # once more with the same target: nothing to write
    assert "skipped rollback" in asyncio.run(rollout.undo(c, "binpack", NS, 1))
    assert len(c.calls_of("put")) == 1


def test_undo_reads_again_after_a_concurrent_change():
    c = cluster()
    c.fail("put", 409, path_contains="/binpack", times=1)
    assert "rolled back to revision 3" in asyncio.run(rollout.undo(c, "binpack", NS, 3))
    assert len(c.calls_of("put")) == 2 and c.served[rollout.POLICIES]["binpack"]["spec"] == MORE


def test_a_missing_policy_is_one_line():
    with pytest.raises(rollout.RolloutError, match='SchedulingPolicy "nope" not found'):
        asyncio.run(rollout.read(cluster(), "nope", NS))


def test_the_commands_parse():
    a = build_parser().parse_args(["rollout", "undo", "binpack", "--to-revision", "2", "--revision-namespace", "x"])
    assert (a.fn, a.policy, a.to_revision, a.revision_namespace) == (rollout.cmd_undo, "binpack", 2, "x")
    a = build_parser().parse_args(["rollout", "history", "binpack", "--context", "kind"])
    assert (a.fn, a.revision, a.context) == (rollout.cmd_history, None, "kind")
    a = build_parser().parse_args(["run", "--revision-history-limit", "3", "--revision-namespace", "ops"])
    assert (a.revision_history_limit, a.revision_namespace) == (3, "ops")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--revision-history-limit", "-1"])


def test_age():
    now = parse_rfc3339("2025-01-03T00:00:00Z")
    assert [rollout.age(t, now) for t in ("2025-01-01T00:00:00Z", "2025-01-02T23:00:00Z", "2025-01-02T23:59:59Z",
                                          "bad")] == ["2d", "1h", "1s", "<unknown>"]
