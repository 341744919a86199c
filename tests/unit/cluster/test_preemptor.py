"""cluster/preemptor.py, through the engine: asynchronous preemption (upstream
prepareCandidateAsync). The preemptor is held by DefaultPreemption's PreEnqueue while its victims
are deleted: all but the last in parallel, then the last one, after which the preemptor may go as
soon as the state no longer holds that victim."""

import asyncio

from support.fakeclient import FakeClient

from policy_scheduler.cluster.engine import Engine
from policy_scheduler.serve import build_engine
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.queue.scheduling_queue import ACTIVE, GATED, UNSCHEDULABLE
from policy_scheduler.plugins.default_preemption import WAITING_MESSAGE, DefaultPreemption


def node(name):
    alloc = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name, node_name="", priority=0, terminating=False):
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta,
            "spec": {"schedulerName": "policy-scheduler", "nodeName": node_name, "priority": priority,
                     "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running" if node_name else "Pending"}}


def engine_with_victims(n=3):
    e = build_engine(FakeClient())
    e.on_node("ADDED", node("n1"))
    victims = []
    for i in range(n):
        e.on_pod("ADDED", pod(f"v{i}", "n1"))
        victims.append(e.state.table.pod(f"ns/v{i}"))
    e.on_pod("ADDED", pod("hi", priority=10))
    return e, victims


def test_a_preemptor_runs_preemption_until_its_last_victim_leaves_the_cache():
    e, victims = engine_with_victims()
    assert not e.preemptor.is_running("uid-hi")
    e.preemptor.preempting["uid-hi"] = None  # deleting all victims but the last
    assert e.preemptor.is_running("uid-hi")
    e.preemptor.preempting["uid-hi"] = "ns/v2"  # only the last is left, still in the cache
    assert e.preemptor.is_running("uid-hi")
    e.on_pod("MODIFIED", pod("v2", "n1", terminating=True))  # its deletion has started: it still counts
    assert e.preemptor.is_running("uid-hi")
    e.on_pod("DELETED", pod("v2", "n1", terminating=True))
    assert not e.preemptor.is_running("uid-hi")


def test_default_preemption_gates_a_pod_whose_preemption_runs():
    e, _ = engine_with_victims()
    plugin = DefaultPreemption(DefaultPreemption.Args(), e.handle)
    hi = parse_pod(pod("hi", priority=10))
    assert plugin.pre_enqueue(hi).is_success
    e.preemptor.preempting["uid-hi"] = None
    st = plugin.pre_enqueue(hi)
    assert not st.is_success and st.message() == WAITING_MESSAGE


def test_victims_are_deleted_all_but_the_last_first_and_the_preemptor_is_released():
    e, victims = engine_with_victims()
    hi = e.queue.pop().pod
    e.preemptor.preempting[hi.uid] = None
    seen = []

    async def go():
        real = e.client.request

        async def spy(method, path, body=None, **kw):
            seen.append((path.rsplit("/", 1)[1], e.preemptor.preempting.get(hi.uid, "released")))
            return await real(method, path, body, **kw)

        e.client.request = spy
        await e.preemptor._delete_victims(hi, victims, "n1")

    asyncio.run(go())
    # the first two while the preemptor is fully held; the last once it is registered as the last
    assert sorted(seen[:2]) == [("v0", None), ("v1", None)]
    assert seen[2] == ("v2", "ns/v2")
    assert hi.uid not in e.preemptor.preempting
    deletes = e.client.calls_of("delete")
    assert [c.body["preconditions"]["uid"] for c in deletes] == ["uid-v0", "uid-v1", "uid-v2"]
    assert all("DisruptionTarget" in str(c.body) for c in e.client.calls_of("strategic_patch")
               + e.client.calls_of("merge_patch"))


def test_a_failed_victim_deletion_activates_the_preemptor_and_spares_the_last_victim():
    e, victims = engine_with_victims()
    qpi = e.queue.pop()
    hi = qpi.pod
    e.queue.add_unschedulable(qpi, {"NodeResourcesFit"})
    e.preemptor.preempting[hi.uid] = None
    assert e.queue.state_of(hi.key) == UNSCHEDULABLE
    e.client.fail("delete", 500, path_contains="/pods/v0", times=1)
    asyncio.run(e.preemptor._delete_victims(hi, victims, "n1"))
    assert hi.uid not in e.preemptor.preempting
    assert [c.path.rsplit("/", 1)[1] for c in e.client.calls_of("delete")] == ["v0", "v1"]
    assert e.queue.state_of(hi.key) == ACTIVE  # not left waiting for a deletion event


def preempting(e):
    """The preemptor under a policy with DefaultPreemption, back in the pool after its attempt
    (rejected by NodeResourcesFit), its preemption running (call inside a running loop)."""
    e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1},
                          "spec": {"plugins": [{"name": "NodeResourcesFit"}, {"name": "DefaultPreemption"}]}})
    qpi = e.queue.pop()
    e.preemptor.preempting[qpi.pod.uid] = None
    e.queue.add_unschedulable(qpi, {"NodeResourcesFit"})
    return qpi.pod


def test_a_held_preemptor_moves_on_its_victims_deletion_once_released():
    """The deletion events re-check a gated preemptor; NodeResourcesFit's hint decides, and
    PreEnqueue holds it while the preemption runs."""

    async def go():
        e, _ = engine_with_victims()
        hi = preempting(e)
        e.on_pod("DELETED", pod("v0", "n1"))
        assert e.queue.state_of(hi.key) == GATED
        assert e.queue.get(hi.key).gating_message == WAITING_MESSAGE
        e.preemptor.preempting[hi.uid] = "ns/v2"
        e.on_pod("DELETED", pod("v1", "n1"))
        assert e.queue.state_of(hi.key) == GATED  # the last victim is still there
        e.on_pod("DELETED", pod("v2", "n1"))
        assert e.queue.state_of(hi.key) not in (GATED, UNSCHEDULABLE)
        assert e.queue.pop().pod is hi  # SchedulerPopFromBackoffQ: nothing else to do, so at once

    asyncio.run(go())


def test_a_victim_gone_before_it_was_registered_as_the_last_still_releases_the_preemptor():
    """The last victim's deletion event came while the preemptor was still held (e.g. it was
    deleted already, by an earlier preemption): no later event re-checks the gate, so the end of
    the preemption does."""

    async def go():
        e, victims = engine_with_victims(1)
        hi = preempting(e)
        e.on_pod("DELETED", pod("v0", "n1"))
        assert e.queue.state_of(hi.key) == GATED
        await e.preemptor._delete_victims(hi, victims, "n1")
        assert hi.uid not in e.preemptor.preempting
        assert e.queue.state_of(hi.key) not in (GATED, UNSCHEDULABLE)

    asyncio.run(go())


def test_an_update_without_nominated_node_keeps_the_reservation_made_in_memory():
    """upstream UpdateNominatedPod: an update event that lacks status.nominatedNodeName, when the
    last version seen lacked it too, keeps the in-memory nomination (a status write of ours that
    raced the nomination's patch); one that drops it from the API releases the node."""
    e, _ = engine_with_victims()
    hi = e.queue.pop().pod
    e.nominator.add(hi, "n1")  # what Engine.nominate does before its status patch goes out
    e.on_pod("MODIFIED", pod("hi", priority=10))  # e.g. the PodScheduled=False patch, seen before the nomination's
    assert e.nominator.node_of("ns/hi") == "n1"
    assert [p.key for p, _ in e.nominator.pods_for(parse_pod(pod("other", priority=10)))] == ["ns/hi"]
    with_node = pod("hi", priority=10)
    with_node["status"]["nominatedNodeName"] = "n1"
    e.on_pod("MODIFIED", with_node)
    assert e.nominator.node_of("ns/hi") == "n1"
    e.on_pod("MODIFIED", pod("hi", priority=10))  # the API cleared it
    assert e.nominator.node_of("ns/hi") is None


def test_a_deleted_victim_counts_as_terminating_in_the_cache_before_its_watch_event():
    """Once the DELETE succeeded the cache has the victim terminating by preemption (its watch
    event may lag): the node still counts it, and its preemptor, tried meanwhile, is not eligible
    to preempt again (upstream PodEligibleToPreemptOthers) rather than preempting it twice."""
    from policy_scheduler.framework.preemption import MSG_TERMINATING, eligible
    from policy_scheduler.framework.status import Status

    e, victims = engine_with_victims()
    hi = e.queue.pop().pod
    e.preemptor.preempting[hi.uid] = None
    asyncio.run(e.preemptor._delete_victims(hi, victims, "n1"))
    cached = [e.state.table.pod(f"ns/v{i}") for i in range(3)]
    assert all(p is not None and p.terminating and p.terminating_by_preemption for p in cached)
    hi.nominated_node_name = "n1"
    assert eligible(hi, e.state.table, Status.success()) == (False, MSG_TERMINATING)
    e.on_pod("DELETED", pod("v2", "n1", terminating=True))
    assert e.state.table.pod("ns/v2") is None


def test_a_preemptor_whose_last_victim_is_still_cached_waits_for_its_deleted_event():
    """The DELETE calls returned but the watch has not delivered them: the preemptor stays held
    (tried now, it would find the victims still counted), and the last DELETED event moves it."""

    async def go():
        e, victims = engine_with_victims(4)
        hi = preempting(e)
        e.on_pod("DELETED", pod("v3", "n1"))  # some other pod's deletion: the held preemptor is gated
        assert e.queue.state_of(hi.key) == GATED
        await e.preemptor._delete_victims(hi, victims[:3], "n1")
        assert hi.uid not in e.preemptor.preempting
        assert e.queue.state_of(hi.key) == GATED  # not activated: v2 is still in the cache
        for i in range(3):
            e.on_pod("DELETED", pod(f"v{i}", "n1", terminating=True))
        assert e.queue.state_of(hi.key) not in (GATED, UNSCHEDULABLE)

    asyncio.run(go())


def test_a_victim_already_gone_from_the_api_is_terminating_in_the_cache_too():
    """DELETE answered 404 (gone) while the watch has not said so: the cache holds it terminating,
    so the preemptor, once released, waits for it instead of preempting it again."""
    e, victims = engine_with_victims()
    hi = e.queue.pop().pod
    e.preemptor.preempting[hi.uid] = None
    e.client.fail("delete", 404, path_contains="/pods/v2", times=1)
    asyncio.run(e.preemptor._delete_victims(hi, victims, "n1"))
    assert hi.uid not in e.preemptor.preempting
    assert e.state.table.pod("ns/v2").terminating_by_preemption
    # a late watch event of an older version (its DisruptionTarget condition, no deletionTimestamp)
    e.on_pod("MODIFIED", pod("v2", "n1"))
    assert e.state.table.pod("ns/v2").terminating_by_preemption
    e.on_pod("DELETED", pod("v2", "n1", terminating=True))
    assert e.state.table.pod("ns/v2") is None and not e.state.deleted_victims - {("ns/v0", "uid-v0"), ("ns/v1", "uid-v1")}


def test_a_preemptor_stays_held_until_every_victim_left_the_state():
    """The DELETEs returned while the watch lags: another pod's deletion event does not release
    the preemptor (tried now, it would find its victims still counted on the node and wait
    again); nor do its first victims' events; the last one's does."""

    async def go():
        e, victims = engine_with_victims(4)
        hi = preempting(e)
        await e.preemptor._delete_victims(hi, victims[:3], "n1")
        assert hi.uid not in e.preemptor.preempting and e.preemptor.is_running(hi.uid)
        e.on_pod("DELETED", pod("v3", "n1"))  # not one of its victims
        assert e.queue.state_of(hi.key) == GATED
        e.on_pod("DELETED", pod("v0", "n1", terminating=True))
        e.on_pod("DELETED", pod("v1", "n1", terminating=True))
        assert e.queue.state_of(hi.key) == GATED
        e.on_pod("DELETED", pod("v2", "n1", terminating=True))
        assert e.queue.state_of(hi.key) not in (GATED, UNSCHEDULABLE)
        assert not e.preemptor.is_running(hi.uid) and hi.uid not in e.preemptor.waits

    asyncio.run(go())


def test_a_preemptor_whose_victims_stay_is_released_at_the_deadline(monkeypatch):
    """A victim stuck terminating (a long grace period): the preemptor goes after VICTIMS_WAIT
    seconds anyway, as upstream would let it go, and waits for the victims as not eligible."""
    from policy_scheduler.cluster import preemptor as mod

    monkeypatch.setattr(mod, "VICTIMS_WAIT", 0.01)

    async def go():
        e, victims = engine_with_victims(2)
        hi = preempting(e)
        e.on_pod("DELETED", pod("v1", "n1"))  # some event gates it
        assert e.queue.state_of(hi.key) == GATED
        await e.preemptor._delete_victims(hi, victims[:1], "n1")
        assert e.preemptor.is_running(hi.uid)
        await asyncio.sleep(0.05)
        assert e.queue.state_of(hi.key) == ACTIVE
        assert not e.preemptor.is_running(hi.uid)

    asyncio.run(go())
