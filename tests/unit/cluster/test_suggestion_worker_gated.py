"""cluster/suggestions.py for pods DynamicResources holds at PreEnqueue (a ResourceClaim that does
not exist): upstream gives such a pod no attempt and posts no FailedScheduling, so the Hints port
never hears of it; the queue's ``on_gated`` hook files it instead, and ``step`` searches it once it
has been held ``gated_after`` seconds and is still held. Real engine parts (build_engine on the
in-memory client, the default policy)."""

from __future__ import annotations

import asyncio

from support.drakit import claim, device_class, gpu, resource_slice

from policy_scheduler.cluster.suggestions import HINT_EVENT
from policy_scheduler.framework.queue.scheduling_queue import ACTIVE, GATED

from test_suggestion_worker import events, make, metric, patches, pod, written

DRIVER = "gpu.example.com"


def dra_world(e):
    e.route("deviceclasses")("ADDED", device_class(DRIVER))
    for n in ("n1", "n2", "n3"):
        e.route("resourceslices")("ADDED", resource_slice(n, [gpu("d0")]))


def with_claim(body, **src):
    body["spec"]["resourceClaims"] = [{"name": "gpu", **src}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return body


def test_a_pod_held_for_a_missing_claim_is_searched_after_the_grace_and_gets_drop_resource_claim():
    async def go():
        e, clock = make()
        dra_world(e)
        w = e.suggestions
        e.on_pod("ADDED", with_claim(pod("p", cpu="1"), resourceClaimName="nope"))
        assert e.queue.state_of("ns/p") == GATED and e.queue.pop() is None
        assert len(w) == 1 and w.retry_in() == 5.0
        assert not w.step()  # not before it has been held 5 s
        clock.t += 5
        assert w.retry_in() == 0.01
        assert w.step()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        evs = events(e)
        # no FailedScheduling (upstream posts none for a PreEnqueue rejection): the hint only
        assert [(r, t) for _, t, r, _ in evs] == [(HINT_EVENT, "Normal")]
        assert evs[0][3] == ("drop resource claim gpu (ResourceClaim ns/nope does not exist) from the pod and its "
                             "containers: the pod gets no devices for it: opens 3 nodes (n1 would be chosen)")
        (p,) = patches(e)
        cond, doc, _, _ = written(p)
        assert [s["kind"] for s in doc["suggestions"]] == ["DropResourceClaim"]
        assert doc["suggestions"][0]["patch"] == [{"op": "remove", "path": "/spec/containers/0/resources/claims/0"},
                                                  {"op": "remove", "path": "/spec/resourceClaims/0"}]
        assert doc["blockers"] == {"DynamicResources (PreFilter)": 3}
        assert e.queue.state_of("ns/p") == GATED  # the queue is as it was
        # the condition's own write neither moves the pod nor files it again
        body = with_claim(pod("p", cpu="1"), resourceClaimName="nope")
        body["status"]["conditions"] = [cond]
        body["metadata"]["resourceVersion"] = "2"
        e.on_pod("MODIFIED", body)
        assert e.queue.state_of("ns/p") == GATED and len(w) == 0 and not w.step()
        assert metric(e, 'policy_scheduler_suggestions_total{kind="DropResourceClaim"}') == [
            'policy_scheduler_suggestions_total{kind="DropResourceClaim"} 1.0']
    asyncio.run(go())


def test_a_template_claim_not_made_yet_is_searched_only_if_still_missing_after_the_grace():
    async def go():
        e, clock = make()
        dra_world(e)
        w = e.suggestions
        # the resourceclaim controller makes q's claim within the grace: the pod is released, not searched
        e.on_pod("ADDED", with_claim(pod("q", cpu="1"), resourceClaimTemplateName="t"))
        e.on_pod("ADDED", with_claim(pod("r", cpu="1"), resourceClaimTemplateName="t"))
        assert len(w) == 2
        e.route("resourceclaims")("ADDED", claim("q-gpu", ns="ns", owner="uid-q"))
        made = with_claim(pod("q", cpu="1"), resourceClaimTemplateName="t")
        made["metadata"]["resourceVersion"] = "2"
        made["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "q-gpu"}]
        e.on_pod("MODIFIED", made)
        assert e.queue.state_of("ns/q") == ACTIVE
        clock.t += 5
        assert w.step() and w.step() and not w.step()  # q skipped (no longer held), r searched
        await asyncio.sleep(0)
        evs = [(k, n) for k, _, r, n in events(e) if r == HINT_EVENT]
        assert [k for k, _ in evs] == ["ns/r"]
        assert evs[0][1].startswith("drop resource claim gpu (its ResourceClaim from template t has not been created)")
        assert metric(e, 'policy_scheduler_suggestion_searches_total{result="skipped-stale"}') == [
            'policy_scheduler_suggestion_searches_total{result="skipped-stale"} 1.0']
    asyncio.run(go())


def test_other_gates_and_deleted_pods_are_not_searched():
    async def go():
        e, clock = make()
        dra_world(e)
        w = e.suggestions
        gated = pod("sg", cpu="1")
        gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
        e.on_pod("ADDED", gated)  # SchedulingGates holds it: not a DRA question
        assert e.queue.state_of("ns/sg") == GATED and len(w) == 0
        body = with_claim(pod("p", cpu="1"), resourceClaimName="nope")
        e.on_pod("ADDED", body)
        assert len(w) == 1
        e.on_pod("DELETED", body)
        assert len(w) == 0
        clock.t += 10
        assert not w.step() and not patches(e)
    asyncio.run(go())


def test_a_held_pod_whose_class_is_missing_gets_the_class_once_its_claim_exists():
    """The claim made, the pod goes to a cycle: its failure (the class does not exist) is filed
    through the Hints port as any other, and the search suggests the class."""
    async def go():
        e, clock = make()
        for n in ("n1", "n2", "n3"):
            e.route("resourceslices")("ADDED", resource_slice(n, [gpu("d0")]))
        e.on_pod("ADDED", with_claim(pod("p", cpu="1"), resourceClaimName="c"))
        e.route("resourceclaims")("ADDED", claim("c", ns="ns", requests=[{"name": "gpu", "exactly": {
            "deviceClassName": "gpus"}}]))
        qpi = e.queue.pop()
        assert qpi is not None and not e.schedule(qpi).scheduled
        clock.t += 5
        assert e.suggestions.step() and not e.suggestions.step()
        await asyncio.sleep(0)
        evs = [(r, n) for _, _, r, n in events(e)]
        assert [r for r, _ in evs] == ["FailedScheduling", HINT_EVENT]
        assert "device class gpus does not exist" in evs[0][1]
        assert evs[1][1].startswith(f'create DeviceClass gpus selecting the devices of driver {DRIVER}')
        (p,) = patches(e)
        doc = written(p)[1]
        assert [s["kind"] for s in doc["suggestions"]] == ["CreateDeviceClass", "DropResourceClaim"]
    asyncio.run(go())
