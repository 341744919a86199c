"""NodeDeclaredFeatures: the inference of component-helpers v0.37.1 nodedeclaredfeatures (each
feature, a pod that needs it and one that does not), the plugin's PreFilter/Filter verdicts and
message, its queueing hints, and status.declaredFeatures parsed from hostile nodes."""

from __future__ import annotations

import numpy as np
import pytest
from support import kit
from support.kit import QUEUE, SKIP, hint, registered

from policy_scheduler.framework.events import ActionType, Resource, node_change_events
from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.nodetable import MAX_DECLARED_FEATURES, NodeSpec, NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.node_declared_features import (ERR_REASON, FEATURES, PLUGIN, Feature,
                                                              infer_for_scheduling)

RESTART_ALL = "RestartAllContainersOnContainerExits"
USERNS_HOSTNET = "UserNamespacesHostNetworkSupport"
BIND_MOUNT = "VolumeBindMountOptions"

RULE = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
RESTART_RULE = {"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}
MOUNT = {"name": "data", "mountPath": "/data"}


def ctr(name="c", **fields):
    return {"name": name, "image": "app:1", **fields}


# ------------------------------------------------------------------ the inference, feature by feature
@pytest.mark.parametrize("spec, want", [
    # RestartAllContainersOnContainerExits: a RestartAllContainers rule on a regular or init container
    pytest.param({"containers": [ctr(restartPolicy="Never", restartPolicyRules=[RULE])]}, {RESTART_ALL},
                 id="restart-all-regular"),
    pytest.param({"containers": [ctr()], "initContainers": [ctr("i", restartPolicy="Never",
                                                                restartPolicyRules=[RESTART_RULE, RULE])]},
                 {RESTART_ALL}, id="restart-all-init-second-rule"),
    pytest.param({"containers": [ctr()], "initContainers": [ctr("s", restartPolicy="Always",
                                                                restartPolicyRules=[RULE])]},
                 {RESTART_ALL}, id="restart-all-sidecar"),
    pytest.param({"containers": [ctr(restartPolicy="Never", restartPolicyRules=[RESTART_RULE])]}, set(),
                 id="restart-rule-only"),
    pytest.param({"containers": [ctr()], "ephemeralContainers": [ctr("e", restartPolicyRules=[RULE])]}, set(),
                 id="restart-all-ephemeral-not-counted"),
    # UserNamespacesHostNetworkSupport: host network with hostUsers false
    pytest.param({"containers": [ctr()], "hostNetwork": True, "hostUsers": False}, {USERNS_HOSTNET},
                 id="hostnetwork-userns"),
    pytest.param({"containers": [ctr()], "hostNetwork": True}, set(), id="hostnetwork-hostusers-unset"),
    pytest.param({"containers": [ctr()], "hostNetwork": True, "hostUsers": True}, set(), id="hostnetwork-hostusers"),
    pytest.param({"containers": [ctr()], "hostUsers": False}, set(), id="userns-without-hostnetwork"),
    # VolumeBindMountOptions: a mount with bind mount options in any kind of container
    pytest.param({"containers": [ctr(volumeMounts=[MOUNT, {**MOUNT, "bindMountOptions": ["noexec"]}])]},
                 {BIND_MOUNT}, id="bind-options-regular"),
    pytest.param({"containers": [ctr()], "initContainers": [ctr("i", volumeMounts=[
        {**MOUNT, "bindMountOptions": ["nosuid"]}])]}, {BIND_MOUNT}, id="bind-options-init"),
    pytest.param({"containers": [ctr()], "ephemeralContainers": [ctr("e", volumeMounts=[
        {**MOUNT, "bindMountOptions": ["nodev"]}])]}, {BIND_MOUNT}, id="bind-options-ephemeral"),
    pytest.param({"containers": [ctr(volumeMounts=[MOUNT, {**MOUNT, "bindMountOptions": []}])]}, set(),
                 id="bind-options-empty"),
    # several at once; none
    pytest.param({"containers": [ctr(restartPolicy="Never", restartPolicyRules=[RULE],
                                     volumeMounts=[{**MOUNT, "bindMountOptions": ["noexec"]}])],
                  "hostNetwork": True, "hostUsers": False}, {RESTART_ALL, USERNS_HOSTNET, BIND_MOUNT}, id="all-three"),
    pytest.param({"containers": [ctr(resources={"requests": {"cpu": "1"}}, volumeMounts=[MOUNT])]}, set(), id="plain"),
])
def test_inference(spec, want):
    assert infer_for_scheduling(spec) == want


@pytest.mark.parametrize("spec", [
    None, [], "spec", {"containers": "c"}, {"containers": [None, 3, "c"]},
    {"containers": [ctr(restartPolicyRules="RestartAllContainers")]},
    {"containers": [ctr(restartPolicyRules=[None, "RestartAllContainers", {"action": None}])]},
    {"containers": [ctr(volumeMounts={"bindMountOptions": ["noexec"]})]},
    {"containers": [ctr(volumeMounts=[None, {"bindMountOptions": "noexec"}])]},
    {"containers": [ctr()], "hostNetwork": "true", "hostUsers": "false"},
    {"containers": [ctr()], "hostNetwork": 1, "hostUsers": 0},
], ids=repr)
def test_inference_of_malformed_specs_requires_nothing_and_never_raises(spec):
    assert infer_for_scheduling(spec) == frozenset()


def test_registry_is_upstreams_and_a_max_version_below_the_scheduler_drops_the_requirement():
    assert [f.name for f in FEATURES] == sorted([
        "DRANodeAllocatableResources", "DRAOptionalNodeOperations", "ExtendWebSocketsToKubelet",
        "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers",
        "InPlacePodVerticalScalingMemoryBackedVolumes", RESTART_ALL, USERNS_HOSTNET, BIND_MOUNT])
    spec = {"containers": [ctr(restartPolicy="Never", restartPolicyRules=[RULE])]}
    # upstream: required unless targetVersion.GreaterThan(maxVersion)
    old = Feature(RESTART_ALL, FEATURES[[f.name for f in FEATURES].index(RESTART_ALL)].infer, (1, 37, 0))
    same = Feature(RESTART_ALL, old.infer, (1, 37, 1))
    import policy_scheduler.plugins.node_declared_features as ndf
    saved = ndf.FEATURES
    try:
        ndf.FEATURES = (old,)
        assert infer_for_scheduling(spec) == frozenset()
        ndf.FEATURES = (same,)
        assert infer_for_scheduling(spec) == {RESTART_ALL}
    finally:
        ndf.FEATURES = saved


# ------------------------------------------------------------------ PreFilter and Filter
def node_body(name, features=None):
    status = {"allocatable": {"cpu": "4", "pods": "10"}}
    if features is not None:
        status["declaredFeatures"] = features
    return {"metadata": {"name": name}, "status": status}


def pod(spec):
    return parse_pod({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})


def run(nodes, p):
    pl, state = PLUGIN(None, Handle()), CycleState()
    status, names = pl.pre_filter(state, p, nodes)
    assert names is None
    if status.is_skip:
        return None
    assert status.is_success
    return pl.filter(state, p, nodes, np.arange(nodes.n))


RESTART_POD = {"containers": [ctr(restartPolicy="Never", restartPolicyRules=[RULE])]}
BOTH_POD = {"containers": [ctr(restartPolicy="Never", restartPolicyRules=[RULE])], "hostNetwork": True,
            "hostUsers": False}


def test_prefilter_skips_a_pod_requiring_nothing():
    nodes = kit.table([node_body("a"), node_body("b", [RESTART_ALL])])
    assert run(nodes, pod({"containers": [ctr()]})) is None
    assert PLUGIN(None, Handle()).requires_features(pod({"containers": [ctr()]})) is False
    assert PLUGIN(None, Handle()).requires_features(pod(RESTART_POD)) is True


@pytest.mark.parametrize("spec, declared, passed", [
    pytest.param(RESTART_POD, [None, [RESTART_ALL], ["Other", RESTART_ALL], ["Other"], []],
                 [False, True, True, False, False], id="one-feature"),
    pytest.param(BOTH_POD, [[RESTART_ALL], [RESTART_ALL, USERNS_HOSTNET], [USERNS_HOSTNET],
                            [BIND_MOUNT, RESTART_ALL, USERNS_HOSTNET]],
                 [False, True, False, True], id="two-features"),
])
def test_filter_needs_every_required_feature(spec, declared, passed):
    nodes = kit.table([node_body(f"n{i}", d) for i, d in enumerate(declared)])
    res = run(nodes, pod(spec))
    assert res.passed.tolist() == passed
    assert res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert [(r, m.tolist()) for r, m in res.reasons] == [(ERR_REASON, [not x for x in passed])]
    assert ERR_REASON == "node(s) didn't match Pod's required features"


def test_filter_follows_a_node_update_and_rows_subset():
    nodes = kit.table([node_body("a"), node_body("b", [RESTART_ALL])])
    assert run(nodes, pod(RESTART_POD)).passed.tolist() == [False, True]
    nodes.upsert_node(node_body("a", [RESTART_ALL]))
    nodes.upsert_node(node_body("b", []))
    assert run(nodes, pod(RESTART_POD)).passed.tolist() == [True, False]
    pl, state = PLUGIN(None, Handle()), CycleState()
    pl.pre_filter(state, pod(RESTART_POD), nodes)
    assert pl.filter(state, pod(RESTART_POD), nodes, np.asarray([1])).passed.tolist() == [False]
    # without its PreFilter (not run in this cycle) it infers again
    assert pl.filter(CycleState(), pod(RESTART_POD), nodes, np.asarray([0, 1])).passed.tolist() == [True, False]


def test_takes_no_args():
    kit.assert_takes_no_args("NodeDeclaredFeatures", {"x": 1})


# ------------------------------------------------------------------ events and queueing hints
def spec_node(features=None, **kw):
    return NodeSpec.from_dict({"metadata": {"name": "n", "labels": kw.get("labels", {})},
                               "status": {"declaredFeatures": features} if features is not None else {}})


def test_registered_events():
    assert registered(PLUGIN(None, Handle())) == sorted([
        (Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE),
        (Resource.TARGET_POD, ActionType.UPDATE)], key=lambda p: (p[0], int(p[1])))


def test_node_hints():
    pl, p = PLUGIN(None, Handle()), pod(RESTART_POD)
    assert hint(pl, Resource.NODE, ActionType.ADD, p, None, spec_node()) == QUEUE
    assert hint(pl, Resource.NODE, ActionType.UPDATE_NODE_DECLARED_FEATURE, p,
                spec_node([]), spec_node([RESTART_ALL])) == QUEUE
    assert hint(pl, Resource.NODE, ActionType.UPDATE_NODE_DECLARED_FEATURE, p,
                spec_node([RESTART_ALL]), spec_node(["Other"])) == QUEUE
    assert hint(pl, Resource.NODE, ActionType.UPDATE_NODE_DECLARED_FEATURE, p,
                spec_node([RESTART_ALL]), spec_node([RESTART_ALL])) == SKIP
    # a label change is no event of this plugin's
    with pytest.raises(AssertionError):
        hint(pl, Resource.NODE, ActionType.UPDATE_NODE_LABEL, p, spec_node(), spec_node())


def test_node_change_events_report_declared_features():
    old, new = spec_node([RESTART_ALL]), spec_node([RESTART_ALL, USERNS_HOSTNET])
    assert [e.action for e in node_change_events(old, new)] == [ActionType.UPDATE_NODE_DECLARED_FEATURE]
    assert [e.label for e in node_change_events(old, new)] == ["NodeUpdateNodeDeclaredFeature"]
    assert node_change_events(old, spec_node([RESTART_ALL])) == []
    # a registration for any node update (upstream's Update) gets it, another aspect's does not
    from policy_scheduler.framework.events import ClusterEvent
    incoming = node_change_events(old, new)[0]
    assert ClusterEvent(Resource.NODE, ActionType.UPDATE).matches(incoming)
    assert not ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL).matches(incoming)
    assert [e.action for e in node_change_events(old, spec_node([RESTART_ALL], labels={"a": "b"}))] == [
        ActionType.UPDATE_NODE_LABEL]


def test_target_pod_update_hint():
    pl = PLUGIN(None, Handle())
    plain, needs = pod({"containers": [ctr()]}), pod(RESTART_POD)
    labelled = parse_pod({"metadata": {"name": "p", "namespace": "default", "labels": {"a": "b"}},
                          "spec": RESTART_POD})
    assert hint(pl, Resource.TARGET_POD, ActionType.UPDATE_POD_LABEL, needs, needs, labelled) == SKIP
    assert hint(pl, Resource.TARGET_POD, ActionType.UPDATE, needs, needs, plain) == QUEUE
    bound = parse_pod({"metadata": {"name": "p", "namespace": "default"}, "spec": RESTART_POD})
    bound.raw = None  # not kept: cannot tell, so Queue
    assert hint(pl, Resource.TARGET_POD, ActionType.UPDATE, needs, needs, bound) == QUEUE


# ------------------------------------------------------------------ status.declaredFeatures of hostile nodes
@pytest.mark.parametrize("value, want", [
    (None, frozenset()), ("RestartAllContainersOnContainerExits", frozenset()), ({"a": 1}, frozenset()),
    (7, frozenset()), ([None, 3, ["X"], {"a": "b"}, "Good"], {"Good"}), (["A" * 254, "B" * 253], {"B" * 253}),
])
def test_declared_features_parsing_is_hostile_input_safe(value, want):
    assert NodeSpec.from_dict({"metadata": {"name": "n"}, "status": {"declaredFeatures": value}}).declared_features \
        == want


def test_declared_features_are_bounded_and_interned():
    many = [f"F{i:06d}" for i in range(100_000)]
    got = NodeSpec.from_dict({"metadata": {"name": "n"}, "status": {"declaredFeatures": many}}).declared_features
    assert len(got) == MAX_DECLARED_FEATURES
    a = NodeSpec.from_dict({"metadata": {"name": "a"}, "status": {"declaredFeatures": ["".join(["Feat", "ure"])]}})
    b = NodeSpec.from_dict({"metadata": {"name": "b"}, "status": {"declaredFeatures": ["".join(["Fea", "ture"])]}})
    assert next(iter(a.declared_features)) is next(iter(b.declared_features))
    # a status that is not an object declares nothing
    from policy_scheduler.framework.model.nodetable import declared_features
    assert declared_features(["x"]) == frozenset()  # type: ignore[arg-type]
    t = NodeTable()
    t.upsert_node({"metadata": {"name": "n"}, "status": {"declaredFeatures": many}})
    assert len(t.specs[0].declared_features) == MAX_DECLARED_FEATURES


# ------------------------------------------------------------------ the default policy, whole (what-if)
def test_default_policy_places_on_the_declaring_node_and_refuses_with_upstreams_message():
    from policy_scheduler.whatif.simulate import simulate
    from policy_scheduler.whatif.snapshot import trim_node, trim_pod
    from policy_scheduler.whatif.world import World
    from support.whatif import node as wnode, pod as wpod, snap

    def declaring(name, features):
        n = wnode(name)
        n["status"]["declaredFeatures"] = features
        return n

    needs = wpod("needs", "100m", **{"restartPolicy": "Never"})
    needs["spec"]["containers"][0].update(restartPolicy="Never", restartPolicyRules=[RULE])
    plain = wpod("plain", "100m")
    # the snapshot keeps what the inference reads, and the node's declared features
    assert infer_for_scheduling(trim_pod(needs)["spec"]) == {RESTART_ALL}
    assert trim_node(declaring("a", [RESTART_ALL]))["status"]["declaredFeatures"] == [RESTART_ALL]
    userns = trim_pod(wpod("u", hostNetwork=True, hostUsers=False))
    assert infer_for_scheduling(userns["spec"]) == {USERNS_HOSTNET}
    mounts = wpod("m")
    mounts["spec"]["containers"][0]["volumeMounts"] = [MOUNT, {**MOUNT, "name": "b", "bindMountOptions": ["ro"]}]
    assert infer_for_scheduling(trim_pod(mounts)["spec"]) == {BIND_MOUNT}

    # the node with more room (b) loses: only a declares the feature
    one = World(snap([declaring("a", ["Other", RESTART_ALL]), wnode("b", cpu="16")]))
    run = simulate(one, ["default"], [needs, plain]).runs[0]
    assert [r.node for r in run.results] == ["a", "b"]
    none = World(snap([declaring("a", ["Other"]), wnode("b")]))
    run = simulate(none, ["default"], [needs]).runs[0]
    assert run.results[0].node is None
    assert run.results[0].message == ("0/2 nodes are available: 2 node(s) didn't match Pod's required features. "
                                      "preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
                                      "scheduling.")


# ------------------------------------------------------------------ preemption's reprieve shortcut
def test_preemption_reprieve_shortcut_with_the_plugin_in_the_chain():
    """The plugin reads the node only: a pod needing no feature keeps the arithmetic-only reprieve
    (the chain never re-run for a node NodeResourcesFit rejected); a pod needing one gets the
    chain re-run (NodeDeclaredFeatures comes after NodeResourcesFit), and victims only where the
    node declares the feature."""
    from policy_scheduler.framework.cycle.schedule import NodeFilter
    from policy_scheduler.framework.preemption import resource_only, select_victims_on_node
    from policy_scheduler.plugins import default_registry
    from policy_scheduler.policy.chain import build_chain, default_chain_spec

    def prio_pod(name, prio, cpu, spec_extra=None):
        c = ctr(resources={"requests": {"cpu": cpu}})
        c.update(spec_extra or {})
        return parse_pod({"metadata": {"name": name, "namespace": "default", "uid": name},
                          "spec": {"priority": prio, "containers": [c]}})

    t = kit.table([{"metadata": {"name": n}, "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"},
                                                        "declaredFeatures": d}}
                   for n, d in (("plain", []), ("declaring", [RESTART_ALL]))])
    for n in ("plain", "declaring"):
        t.add_pod(prio_pod(f"low-{n}", 0, "2"), n)
    nf = NodeFilter(build_chain(default_chain_spec(), default_registry()))
    plain, needs = prio_pod("p", 10, "1"), prio_pod("q", 10, "1", {"restartPolicy": "Never",
                                                                   "restartPolicyRules": [RULE]})
    fast_plain, fast_needs = resource_only(plain, t, nf), resource_only(needs, t, nf)
    assert fast_plain is not None and fast_plain.independent_first
    assert fast_needs is not None and not fast_needs.independent_first
    victims, _, status = select_victims_on_node(needs, t, 0, [], nf, fast_needs, rejected_by_fit=True)
    assert victims == [] and status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.reasons == (ERR_REASON,)
    victims, _, status = select_victims_on_node(needs, t, 1, [], nf, fast_needs, rejected_by_fit=True)
    assert [v.name for v in victims] == ["low-declaring"] and status.is_success
