"""cache/revisions.py: a policy's ControllerRevisions as data: the hash and name of a spec, the
numbering (a new spec, the same spec again), the history limit, revisions of an earlier policy
of the same name, the revision to fall back on, and what changed between two."""

from __future__ import annotations

from policy_scheduler.cache import revisions as rev

A = {"plugins": [{"name": "NodeResourcesFit", "weight": 5, "args": {"scoringStrategy": {"type": "MostAllocated"}}},
                 {"name": "TaintToleration", "weight": 3}]}
B = {"plugins": [{"name": "NodeResourcesFit", "weight": 2, "args": {"scoringStrategy": {"type": "MostAllocated"}}},
                 {"name": "TaintToleration", "weight": 3}]}
C = {"plugins": [{"name": "TaintToleration", "weight": 3}, {"name": "ImageLocality", "weight": 1}],
     "percentageOfNodesToScore": 50}


def applied(revisions: list[rev.Revision], p: rev.Plan) -> list[rev.Revision]:
    """The revisions after ``p``'s writes, as the API server would hold them."""
    out = {r.name: r for r in revisions if r.name not in p.delete_first}
    if p.create is not None:
        out[p.name] = rev.parse({**p.create, "metadata": {**p.create["metadata"], "creationTimestamp": "t"}})
    elif p.update is not None:
        old = out[p.name]
        gen = int(((p.update.get("metadata") or {}).get("annotations") or {}).get(rev.GENERATION_ANNOTATION,
                                                                                 old.generation))
        out[p.name] = rev.Revision(old.name, old.policy, old.uid, p.update.get("revision", old.number), gen,
                                   old.spec, old.created)
    for n in p.prune:
        del out[n]
    return list(out.values())


def record(revisions, spec, gen, limit=10, uid="u1", policy="binpack"):
    p = rev.plan(revisions, policy, uid, spec, gen, limit)
    return p, applied(revisions, p)


def test_the_hash_and_the_name_depend_on_the_spec_only():
    reordered = {"plugins": [{"weight": 5, "args": {"scoringStrategy": {"type": "MostAllocated"}},
                              "name": "NodeResourcesFit"}, {"weight": 3, "name": "TaintToleration"}]}
    assert rev.spec_hash(A) == rev.spec_hash(reordered) != rev.spec_hash(B)
    assert len(rev.spec_hash(A)) == rev.HASH_LEN
    assert rev.revision_name("binpack", A) == f"binpack-{rev.spec_hash(A)}"
    long = "p" * 250
    name = rev.revision_name(long, A)
    assert len(name) == rev.MAX_NAME and name.endswith(rev.spec_hash(A))


def test_the_label_value_fits_and_stays_distinct():
    assert rev.label_value("binpack") == "binpack"
    a, b = rev.label_value("x" * 100), rev.label_value("x" * 99 + "y")
    assert len(a) <= 63 and len(b) <= 63 and a != b
    assert rev.selector("binpack") == "policy-scheduler.io/policy=binpack"
    assert rev.selector() == "policy-scheduler.io/policy"


def test_the_object_records_the_spec_its_generation_and_its_owner():
    obj = rev.revision_object("binpack", "u1", A, 4, 3)
    assert obj["kind"] == "ControllerRevision" and obj["apiVersion"] == "apps/v1"
    assert obj["data"] == A and obj["revision"] == 3
    meta = obj["metadata"]
    assert meta["labels"] == {"policy-scheduler.io/policy": "binpack"}
    assert meta["annotations"] == {"policy-scheduler.io/generation": "4"}
    assert meta["ownerReferences"] == [{"apiVersion": "policy-scheduler.io/v1alpha1", "kind": "SchedulingPolicy",
                                        "name": "binpack", "uid": "u1", "controller": True}]
    r = rev.parse({**obj, "metadata": {**meta, "creationTimestamp": "2025-01-01T00:00:00Z"}})
    assert (r.policy, r.uid, r.number, r.generation, r.spec, r.created) == (
        "binpack", "u1", 3, 4, A, "2025-01-01T00:00:00Z")
    assert rev.parse({"metadata": {"name": "x"}}) is None  # neither owner nor label: not ours


def test_numbers_grow_and_the_same_spec_again_reuses_its_revision():
    p, revs = record([], A, 1)
    assert (p.number, p.create["metadata"]["name"], p.update, p.prune) == (1, rev.revision_name("binpack", A),
                                                                           None, [])
    p, revs = record(revs, B, 2)
    assert p.number == 2 and p.create is not None
    # A again: its ControllerRevision is reused, renumbered as the newest, with its new generation
    p, revs = record(revs, A, 3)
    assert p.create is None and p.name == rev.revision_name("binpack", A)
    assert p.update == {"revision": 3, "metadata": {"annotations": {"policy-scheduler.io/generation": "3"}}}
    assert sorted((r.number, r.generation) for r in revs) == [(2, 2), (3, 3)]
    # the newest spec applied again (a later generation): only its generation changes
    p, revs = record(revs, A, 5)
    assert p.number == 3 and p.update == {"metadata": {"annotations": {"policy-scheduler.io/generation": "5"}}}
    # nothing to write when it is recorded already
    p, _ = record(revs, A, 5)
    assert p.number == 3 and not p.writes


def test_the_history_limit_deletes_the_oldest():
    revs: list[rev.Revision] = []
    for gen in range(1, 6):
        _, revs = record(revs, {"plugins": [{"name": "TaintToleration", "weight": gen}]}, gen, limit=3)
    assert sorted(r.number for r in revs) == [3, 4, 5]
    p, revs = record(revs, {"plugins": [{"name": "TaintToleration", "weight": 3}]}, 6, limit=3)  # revision 3 again
    assert p.update["revision"] == 6 and p.prune == []
    assert sorted(r.number for r in revs) == [4, 5, 6]
    p, revs = record(revs, A, 7, limit=1)  # a lower limit takes effect at the next record
    assert len(p.prune) == 3 and [r.number for r in revs] == [7]
    p, revs = record(revs, B, 8, limit=0)  # at least the newest is kept
    assert [r.number for r in revs] == [8]


def test_revisions_of_an_earlier_policy_of_the_same_name_are_not_counted_and_go():
    _, old = record([], A, 1, uid="old")
    _, old = record(old, B, 2, uid="old")
    p, revs = record(old, A, 1, uid="new")
    assert p.number == 1 and p.create is not None
    assert sorted(p.delete_first) == sorted(r.name for r in old)  # the one named like the new one too
    assert [(r.uid, r.number) for r in revs] == [("new", 1)]
    # other policies' revisions are left alone
    _, other = record([], A, 1, policy="spread")
    p = rev.plan(other + revs, "binpack", "new", B, 2, 10)
    assert p.number == 2 and p.delete_first == [] and p.prune == []


def test_the_newest_valid_revision_is_chosen():
    revs: list[rev.Revision] = []
    for gen, spec in ((1, A), (2, B), (3, C)):
        _, revs = record(revs, spec, gen)
    tried = []

    def valid(r):
        tried.append(r.number)
        return ["spec.plugins[1].name: unknown plugin 'ImageLocality'"] if r.spec == C else []

    r, problems = rev.choose(revs, "binpack", "u1", valid)
    assert (r.number, r.generation, r.spec) == (2, 2, B) and tried == [3, 2]
    assert problems == ["revision 3: spec.plugins[1].name: unknown plugin 'ImageLocality'"]
    assert rev.choose(revs, "binpack", "another-uid", valid) == (None, [])
    assert rev.choose(revs, "binpack", "u1", lambda r: ["bad"])[0] is None


def test_what_changed():
    assert rev.describe_change(None, A) == "plugins: NodeResourcesFit(w=5), TaintToleration(w=3)"
    assert rev.describe_change(A, B) == "NodeResourcesFit weight 5->2"
    assert rev.describe_change(B, C) == "+ImageLocality(w=1); -NodeResourcesFit; percentageOfNodesToScore"
    args = {"plugins": [{"name": "NodeResourcesFit", "weight": 5,
                         "args": {"scoringStrategy": {"type": "LeastAllocated"}}},
                        {"name": "TaintToleration", "weight": 3}]}
    assert rev.describe_change(A, args) == "NodeResourcesFit args scoringStrategy"
    swapped = {"plugins": list(reversed(A["plugins"]))}
    assert rev.describe_change(A, swapped) == "plugin order"
    unweighted = {"plugins": [{"name": "NodeResourcesFit", "args": A["plugins"][0]["args"]},
                              {"name": "TaintToleration", "weight": 3}]}
    assert rev.describe_change(A, unweighted) == "NodeResourcesFit weight 5->unset"
    assert rev.describe_change(A, A) == "no change"


def test_the_default_namespace_is_the_pods_own(monkeypatch):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert rev.default_namespace() == "policy-scheduler-system"
    monkeypatch.setenv("POD_NAMESPACE", "sched")
    assert rev.default_namespace() == "sched"
