"""cluster/rollout_controller.py with a real PolicyStore and ClusterState and fake callables: a
canary whose candidate rejects every node is rolled back after minPods failed canary attempts
(event, metric, requeue) and every pod goes back to the stable chain; promotion by pods writes
the candidate's chain into the spec (an asyncio task, the leader only, tried again after a
failed write); a shadow counts its comparisons."""

from __future__ import annotations

import asyncio
import random

import orjson

from policy_scheduler.cache.policies import PolicyStore
from policy_scheduler.cache.rollouts import CANARY, PROGRESSING, PROMOTED, PROMOTING, ROLLED_BACK, SHADOWING, STABLE
from policy_scheduler.cache.state import ClusterState
from policy_scheduler.cluster.decision_mac import MAC_ANNOTATION, DecisionKey
from policy_scheduler.cluster.kubeclient import ApiError
from policy_scheduler.cluster.rollout_controller import RolloutController
from policy_scheduler.cluster.telemetry import Telemetry
from policy_scheduler.explain import DECISION_ANNOTATION, ROLLOUT_KEY, decision_annotation
from policy_scheduler.framework.cycle.schedule import schedule_one
from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.queue.nominator import Nominator
from policy_scheduler.metricsources.manager import MetricSources

FIT = {"name": "NodeResourcesFit", "weight": 5, "args": {"scoringStrategy": {"type": "MostAllocated"}}}
SPREAD = {"name": "PodTopologySpread", "weight": 1}
PLUGINS = [FIT, SPREAD]
WEIGHTS_ONLY = [{**FIT, "weight": 1}, {**SPREAD, "weight": 5}]
NO_NODE_MATCHES = {"name": "NodeAffinity", "args": {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}}}


class Recorder:
    def __init__(self):
        self.events = []

    def policy_event(self, name, uid, type_, reason, action, note):
        self.events.append((name, uid, type_, reason, action, note))

    def reasons(self):
        return [e[3] for e in self.events]


class Harness:
    """A store with policy ``p``, nodes n0..n3, and a controller whose callables record."""

    def __init__(self, rollout, plugins=PLUGINS, leader=True, patch_fails=0):
        self.state = ClusterState()
        for i in range(4):
            name = f"n{i}"
            self.state.table.upsert_node({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                      "topology.kubernetes.io/zone": "z" + "ab"[i % 2]}},
                "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
        self.store = PolicyStore(MetricSources(), lambda name: Handle())
        self.body = {"metadata": {"name": "p", "generation": 1, "uid": "pol-uid"},
                     "spec": {"plugins": plugins, "rollout": rollout}}
        self.store.on_policy("ADDED", self.body)
        self.st = self.store.policies["p"]
        assert self.st.ready, self.st.errors
        self.recorder, self.telemetry = Recorder(), Telemetry()
        self.requeued, self.status_writes, self.patches = [], [], []
        self.leader, self.patch_fails = leader, patch_fails
        self.ctrl = RolloutController(self.state, self.store.policies, Nominator(), self.recorder, self.telemetry,
                                      self.patch_spec, self.requeued.append, self.status_writes.append,
                                      lambda: self.leader)
        self.rng = random.Random(0)
        self.n = 0

    async def patch_spec(self, name, patch):
        self.patches.append((name, patch))
        if self.patch_fails:
            self.patch_fails -= 1
            raise RuntimeError("the API server said no")

    def metric(self, name, **labels):
        return self.telemetry.registry.get_sample_value(name, {"policy": "p", **labels}) or 0

    def pod(self, arm=None):
        """A new pod of policy p; ``arm``: one whose UID falls in that arm."""
        while True:
            self.n += 1
            uid = f"uid-{self.n:05d}"
            if arm is None or self.st.rollout.arm(uid) == arm:
                break
        return parse_pod({"metadata": {"name": f"p{self.n}", "namespace": "ns", "uid": uid, "labels": {"app": "a"}},
                          "spec": {"containers": [{"name": "c", "image": "i",
                                                   "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}})

    def schedule(self, pod):
        """One cycle as the engine runs it: the chain for the pod, the cycle, ``decided``."""
        chain, arm = self.ctrl.chain_for(self.st, pod)
        state = CycleState()
        d = schedule_one(chain, pod, self.state.table, self.rng, state)
        self.ctrl.decided(self.st, pod, arm, d, state)
        return chain, arm, d, state

    def bind(self, pod, d, state):
        """The binding and the watch's view of it: the pod lands with its decision annotation."""
        self.state.table.add_pod(pod, d.node)
        self.ctrl.bound(self.st, pod, 1.0, d.node)
        ann = decision_annotation("p", d, rollout=state.read(ROLLOUT_KEY))
        self.last_bound = {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid,
                                        "annotations": {DECISION_ANNOTATION: ann,  # as the binder signs it
                                                        MAC_ANNOTATION: self.ctrl.key.sign(pod.uid, d.node, ann)}},
                           "spec": {"nodeName": d.node}}
        self.ctrl.seen_bound(self.last_bound)


# ------------------------------------------------------------------ rollback
def rejecting_canary(min_pods=3):
    return {"strategy": "Canary", "percent": 50, "candidate": {"plugins": [*PLUGINS, NO_NODE_MATCHES]},
            "analysis": {"minPods": min_pods}}


def test_a_candidate_that_rejects_every_node_is_rolled_back_after_min_pods_canary_failures():
    h = Harness(rejecting_canary(min_pods=3))
    st, ro = h.st, h.st.rollout
    assert ro.phase == PROGRESSING
    for _ in range(5):  # stable pods schedule, with the stable chain
        p = h.pod(STABLE)
        chain, arm, d, state = h.schedule(p)
        assert chain is st.chain and arm == STABLE and d.node is not None
        assert state.read(ROLLOUT_KEY) == {"arm": STABLE, "candidate": ro.hash}
        h.bind(p, d, state)
    assert ro.arms[STABLE].bound == 5 and len(ro.arms[STABLE].placed) == 5
    for i in range(2):
        chain, arm, d, state = h.schedule(h.pod(CANARY))
        assert chain is st.candidate and arm == CANARY and d.node is None
        assert "NodeAffinity" in d.unschedulable_plugins
        assert state.read(ROLLOUT_KEY) == {"arm": CANARY, "candidate": ro.hash}
    assert ro.phase == PROGRESSING and h.requeued == [] and h.recorder.events == []  # 2 < minPods
    h.schedule(h.pod(CANARY))
    assert ro.phase == ROLLED_BACK
    assert h.requeued == ["p"] and h.status_writes == [st] and st.dirty
    assert len(h.recorder.events) == 1
    name, uid, type_, reason, _, note = h.recorder.events[0]
    assert (name, uid, type_, reason) == ("p", "pol-uid", "Warning", "RolloutRolledBack")
    assert f"candidate {ro.hash} rolled back: FailedScheduling rate 100% of 3 canary attempts" in note
    assert ro.message.startswith("rolled back: FailedScheduling rate 100% of 3 canary attempts")
    assert h.metric("policy_scheduler_rollout_rollbacks_total") == 1
    assert h.metric("policy_scheduler_rollout_phase", phase=ROLLED_BACK) == 1
    assert h.metric("policy_scheduler_rollout_phase", phase=PROGRESSING) == 0
    assert h.metric("policy_scheduler_rollout_attempts_total", arm=CANARY, result="unschedulable") == 3
    assert h.metric("policy_scheduler_rollout_attempts_total", arm=STABLE, result="scheduled") == 5

    # every pod is the stable chain's now, the former canary ones too, and nothing more is counted
    for _ in range(20):
        p = h.pod()
        assert h.ctrl.chain_for(st, p) == (st.chain, STABLE)
    attempts = ro.arms[CANARY].attempts
    chain, arm, d, state = h.schedule(h.pod())
    assert chain is st.chain and d.node is not None and state.read(ROLLOUT_KEY) is None
    assert ro.arms[CANARY].attempts == attempts
    h.ctrl.tick()
    assert h.requeued == ["p"] and len(h.recorder.events) == 1  # rolled back once
    assert h.metric("policy_scheduler_rollout_rollbacks_total") == 1


def test_a_canary_failing_as_often_as_stable_is_not_rolled_back():
    h = Harness({"strategy": "Canary", "percent": 50, "candidate": {"plugins": WEIGHTS_ONLY},
                 "analysis": {"minPods": 3}})
    big = {"cpu": "100"}  # fits no node whichever chain decides
    for arm in (STABLE, CANARY) * 4:
        p = h.pod(arm)
        p = parse_pod({"metadata": {"name": p.name, "namespace": "ns", "uid": p.uid},
                       "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": big}}]}})
        _, got, d, _ = h.schedule(p)
        assert got == arm and d.node is None
    assert h.st.rollout.phase == PROGRESSING and h.requeued == [] and h.recorder.events == []


# ------------------------------------------------------------------ promotion
def promoting_canary(pods=2):
    return {"strategy": "Canary", "percent": 50, "candidate": {"plugins": WEIGHTS_ONLY}, "promote": {"pods": pods}}


def run(coro):
    return asyncio.run(coro)


async def settle():
    for _ in range(3):
        await asyncio.sleep(0)


PROMOTION = {"spec": {"plugins": WEIGHTS_ONLY, "disabled": None, "percentageOfNodesToScore": None, "rollout": None}}


def test_promotion_by_pods_patches_the_spec_with_the_candidates_chain():
    h = Harness(promoting_canary(pods=2))
    st, ro = h.st, h.st.rollout

    async def main():
        for arm in (STABLE, CANARY, STABLE):
            p = h.pod(arm)
            chain, got, d, state = h.schedule(p)
            assert got == arm and chain is (st.candidate if arm == CANARY else st.chain) and d.node is not None
            h.bind(p, d, state)
        await settle()
        assert ro.phase == PROGRESSING and h.patches == []  # one canary pod bound of two
        p = h.pod(CANARY)
        _, _, d, state = h.schedule(p)
        h.bind(p, d, state)
        assert ro.phase == PROMOTING
        await settle()

    run(main())
    assert h.patches == [("p", PROMOTION)]
    assert h.requeued == ["p"] and h.status_writes == [st]
    assert h.recorder.reasons() == ["RolloutPromoting", "RolloutPromoted"]
    assert "2 canary pods bound without a breach" in h.recorder.events[0][5]
    assert h.metric("policy_scheduler_rollout_promotions_total") == 1
    assert h.metric("policy_scheduler_rollout_phase", phase=PROMOTING) == 1
    assert {h.ctrl.chain_for(st, h.pod())[1] for _ in range(20)} == {STABLE}  # nobody is a canary pod now

    # the patched generation arrives: the candidate's chain is the policy's, the rollout Promoted
    h.store.on_policy("MODIFIED", {"metadata": {"name": "p", "generation": 2, "uid": "pol-uid"},
                                   "spec": {"plugins": WEIGHTS_ONLY}})
    assert st.rollout is ro and ro.phase == PROMOTED and st.candidate is None
    assert [(x.name, x.weight) for x in st.chain.resolved if x.weight is not None] == [
        ("NodeResourcesFit", 1), ("PodTopologySpread", 5)]


def test_a_follower_counts_but_only_the_leaders_tick_promotes():
    h = Harness(promoting_canary(pods=2), leader=False)
    ro = h.st.rollout

    async def main():
        for _ in range(3):
            p = h.pod(CANARY)
            _, _, d, state = h.schedule(p)
            h.bind(p, d, state)
        await settle()
        assert ro.arms[CANARY].bound == 3 and ro.phase == PROGRESSING and h.patches == []
        h.leader = True
        h.ctrl.tick()
        await settle()

    run(main())
    assert ro.phase == PROMOTING and h.patches == [("p", PROMOTION)]


def test_a_failed_promotion_write_is_tried_again_at_the_next_tick():
    h = Harness(promoting_canary(pods=1), patch_fails=1)

    async def main():
        p = h.pod(CANARY)
        _, _, d, state = h.schedule(p)
        h.bind(p, d, state)
        await settle()
        assert len(h.patches) == 1 and h.recorder.reasons() == ["RolloutPromoting"]
        h.ctrl.tick()
        await settle()

    run(main())
    assert h.patches == [("p", PROMOTION)] * 2
    assert h.recorder.reasons() == ["RolloutPromoting", "RolloutPromoted"]
    assert h.metric("policy_scheduler_rollout_promotions_total") == 1


def test_a_pod_annotated_for_another_candidate_is_not_counted():
    h = Harness(promoting_canary(pods=1))
    ro = h.st.rollout
    d = schedule_one(h.st.chain, h.pod(), h.state.table, h.rng, CycleState())
    other = decision_annotation("p", d, rollout={"arm": CANARY, "candidate": "0123456789ab"})
    plain = decision_annotation("p", d)
    for i, ann in enumerate((other, plain, "{not json", orjson.dumps({"rollout": 1}).decode())):
        h.ctrl.seen_bound({"metadata": {"uid": f"x{i}", "annotations": {DECISION_ANNOTATION: ann}}})
    assert ro.arms[CANARY].bound == 0 and ro.phase == PROGRESSING


# ------------------------------------------------------------------ shadow
def test_a_shadow_compares_every_decision_and_never_changes_the_chain():
    h = Harness({"strategy": "Shadow", "candidate": {"plugins": [*PLUGINS, NO_NODE_MATCHES]}})
    st, ro = h.st, h.st.rollout
    assert ro.phase == SHADOWING and st.shadow is not None and not st.shadow.shared
    for _ in range(4):
        p = h.pod()
        chain, arm, d, state = h.schedule(p)
        assert chain is st.chain and arm == STABLE and d.node is not None
        assert state.read(ROLLOUT_KEY) is None
        h.state.table.add_pod(p, d.node)
    assert (ro.compared, ro.changed, ro.became_unschedulable) == (4, 4, 4)
    assert ro.movers == {"NodeAffinity": 4}
    assert h.metric("policy_scheduler_rollout_shadow_decisions_total", outcome="changed") == 4
    assert h.metric("policy_scheduler_rollout_shadow_decisions_total", outcome="same") == 0
    h.ctrl.tick()
    assert ro.phase == SHADOWING and h.metric("policy_scheduler_rollout_phase", phase=SHADOWING) == 1


# ------------------------------------------------------------------ forged decision annotations
def forged(h, arm, i, mac=None):
    """A pod a tenant created with spec.nodeName set and a decision annotation copied from the
    policy's status: the real candidate hash and arm, but no MAC of ours."""
    uid = f"forged-{i}"
    ann = orjson.dumps({"policy": "p", "node": "n0", "rollout": {"arm": arm, "candidate": h.st.rollout.hash}}).decode()
    anns = {DECISION_ANNOTATION: ann, **({MAC_ANNOTATION: mac} if mac is not None else {})}
    return {"metadata": {"name": f"f{i}", "namespace": "tenant", "uid": uid, "annotations": anns},
            "spec": {"nodeName": "n0"}}


def test_forged_annotations_move_no_count_and_are_counted_once_per_pod(caplog):
    h = Harness(promoting_canary(pods=2))
    ro = h.st.rollout
    genuine = h.pod(CANARY)
    _, _, d, state = h.schedule(genuine)
    h.bind(genuine, d, state)  # one real canary pod (signed by the binder's key)
    stranger = DecisionKey()  # a forger's key, or another instance's
    with caplog.at_level("WARNING", logger="policy_scheduler"):
        for i in range(100):
            arm = CANARY if i % 2 else STABLE
            mac = None if i % 3 == 0 else ("v1:AAAA" if i % 3 == 1 else None)
            body = forged(h, arm, i, mac)
            if i % 3 == 2:
                body["metadata"]["annotations"][MAC_ANNOTATION] = stranger.sign(
                    body["metadata"]["uid"], "n0", body["metadata"]["annotations"][DECISION_ANNOTATION])
            for _ in range(3):  # each pod's updates come again and again
                h.ctrl.seen_bound(body)
        # a genuine pod's annotation copied, MAC and all, onto a tenant's pod
        copy = forged(h, CANARY, 100)
        copy["metadata"]["annotations"] = {k: v for k, v in h.last_bound["metadata"]["annotations"].items()}
        h.ctrl.seen_bound(copy)
    assert [ro.arms[CANARY].bound, ro.arms[STABLE].bound] == [1, 0] and ro.phase == PROGRESSING
    assert ro.arms[STABLE].attempts == 0 and ro.arms[CANARY].attempts == 1
    assert h.metric("policy_scheduler_forged_decisions_total") == 101
    assert caplog.text.count("was not written by this scheduler") == 101
    assert "tenant/f7" in caplog.text
    # a genuine canary pod still counts, and the second one promotes
    async def second():
        p = h.pod(CANARY)
        _, _, d, state = h.schedule(p)
        h.bind(p, d, state)
        await settle()

    run(second())
    assert ro.arms[CANARY].bound == 2 and ro.phase == PROMOTING and h.patches == [("p", PROMOTION)]


def test_the_forged_pods_remembered_are_bounded(monkeypatch):
    from policy_scheduler.cluster import rollout_controller as rc

    monkeypatch.setattr(rc, "MAX_FORGED_REMEMBERED", 10)
    h = Harness(promoting_canary(pods=2))
    for i in range(25):
        h.ctrl.seen_bound(forged(h, CANARY, i))
    assert len(h.ctrl._forged) == 10 and "forged-24" in h.ctrl._forged and "forged-0" not in h.ctrl._forged
    assert h.metric("policy_scheduler_forged_decisions_total") == 25


# ------------------------------------------------------------------ the promotion's precondition
class Policies:
    """The policy as the API server has it: GET answers it, the merge patch is refused (409) when
    its resourceVersion is not the current one; ``edits``: applied on the GETs of that number."""

    def __init__(self, body, edits=None):
        self.obj = orjson.loads(orjson.dumps(body))
        self.obj["metadata"]["resourceVersion"] = "10"
        self.edits, self.gets = edits or {}, 0

    async def read(self, path):
        assert path.endswith("/p")
        self.gets += 1
        obj = orjson.loads(orjson.dumps(self.obj))
        if self.gets in self.edits:  # an edit lands after this read
            self.edits[self.gets](self.obj)
            self.obj["metadata"]["resourceVersion"] = str(int(self.obj["metadata"]["resourceVersion"]) + 1)
        return obj

    def check(self, patch):
        if patch["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            raise ApiError(409, {"reason": "Conflict", "message": "the object has been modified"}, "PATCH", "/p")


def promote_with(h, policies):
    h.ctrl.read = policies.read
    inner = h.patch_spec

    async def patch_spec(name, patch):
        await inner(name, orjson.loads(orjson.dumps(patch)))
        policies.check(patch)

    h.ctrl.patch_spec = patch_spec

    async def main():
        p = h.pod(CANARY)
        _, _, d, state = h.schedule(p)
        h.bind(p, d, state)
        for _ in range(10):
            await asyncio.sleep(0)

    run(main())


def test_the_promotion_patch_carries_the_resource_version_read():
    h = Harness(promoting_canary(pods=1))
    promote_with(h, Policies(h.body))
    assert h.patches == [("p", {**PROMOTION, "metadata": {"resourceVersion": "10"}})]
    assert h.recorder.reasons() == ["RolloutPromoting", "RolloutPromoted"]


def test_an_edit_between_read_and_patch_is_read_again_and_promoted_on_the_new_version():
    h = Harness(promoting_canary(pods=1))

    def edit_plugins(obj):
        obj["spec"]["plugins"] = [FIT]

    promote_with(h, Policies(h.body, {1: edit_plugins}))
    assert [p["metadata"]["resourceVersion"] for _, p in h.patches] == ["10", "11"]
    assert h.recorder.reasons() == ["RolloutPromoting", "RolloutPromoted"]


def test_a_changed_candidate_is_not_promoted():
    h = Harness(promoting_canary(pods=1))

    def other_candidate(obj):
        obj["spec"]["rollout"]["candidate"]["plugins"] = [FIT]

    promote_with(h, Policies(h.body, {1: other_candidate}))
    assert len(h.patches) == 1  # the first, refused; the second read sees another candidate: no write
    assert h.recorder.reasons() == ["RolloutPromoting"] and h.metric("policy_scheduler_rollout_promotions_total") == 0


def test_other_thresholds_for_the_same_candidate_are_judged_again():
    h = Harness(promoting_canary(pods=1))

    def raise_the_bar(obj):
        obj["spec"]["rollout"]["promote"] = {"pods": 50}

    promote_with(h, Policies(h.body, {1: raise_the_bar}))
    assert len(h.patches) == 1 and h.st.rollout.phase == PROGRESSING
    assert "judged again" in h.st.rollout.message and h.status_writes[-1] is h.st


def test_pods_listed_before_the_policies_are_judged_by_the_first_tick():
    """A new process lists pods and policies at once: the pods that came first are counted (or
    refused) once the policies are known, as if they had come after."""
    h = Harness(promoting_canary(pods=100))
    ro = h.st.rollout
    policies: dict = {}
    ctrl = RolloutController(h.state, policies, Nominator(), h.recorder, h.telemetry, h.patch_spec,
                             h.requeued.append, h.status_writes.append, lambda: True, key=h.ctrl.key)
    signed = []
    for i in range(6):
        p = h.pod(CANARY if i % 2 else STABLE)
        ann = orjson.dumps({"policy": "p", "node": "n1", "rollout": {"arm": ro.arm(p.uid), "candidate": ro.hash}}
                           ).decode()
        signed.append({"metadata": {"name": p.name, "namespace": "ns", "uid": p.uid, "annotations": {
            DECISION_ANNOTATION: ann, MAC_ANNOTATION: h.ctrl.key.sign(p.uid, "n1", ann)}}, "spec": {"nodeName": "n1"}})
    for body in signed + [forged(h, CANARY, i) for i in range(4)]:
        ctrl.seen_bound(body)
    assert ro.arms[CANARY].bound == ro.arms[STABLE].bound == 0 and len(ctrl._early) == 10
    policies["p"] = h.st  # the policies' LIST
    ctrl.tick()
    assert [ro.arms[CANARY].bound, ro.arms[STABLE].bound] == [3, 3] and not ctrl._early
    assert h.metric("policy_scheduler_forged_decisions_total") == 4
    ctrl.seen_bound(signed[0])  # the same pods again: counted once
    assert ro.arms[STABLE].bound == 3
