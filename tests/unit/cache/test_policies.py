"""PolicyStore: policies validated and built into chains, a bad edit keeps the last valid
chain, which policy a pod gets (and why none)."""

from __future__ import annotations

from policy_scheduler import POLICY_LABEL
from policy_scheduler.cache.policies import DEFAULT_POLICY, PolicyStore, policy_name
from policy_scheduler.framework.interface import Handle
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.registry import Registry
from policy_scheduler.metricsources.manager import MetricSources
from policy_scheduler.plugins import default_registry
from policy_scheduler.plugins.node_name import PLUGIN as NodeName

GOOD = {"plugins": [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesBalancedAllocation", "weight": 2}]}
BAD_WEIGHT = {"plugins": [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesBalancedAllocation", "weight": -1}]}


def policy(name, spec, gen=1):
    return {"metadata": {"name": name, "generation": gen}, "spec": spec}


def pod(labels=None, namespace="ns"):
    return parse_pod({"metadata": {"name": "p", "namespace": namespace, "labels": labels or {}},
                      "spec": {"containers": [{"name": "c", "image": "i"}]}})


def store(**kw):
    changed = []
    s = PolicyStore(MetricSources(), lambda name: Handle(), on_change=changed.append, **kw)
    return s, changed


class Counts(dict):
    """What the store reports through on_counts: {"true": ready, "false": not ready}."""

    def __call__(self, ready: int, not_ready: int) -> None:
        self["true"], self["false"] = ready, not_ready


def ready_gauge(t: Counts, ready: str) -> float:
    return t.get(ready, 0)


def test_a_valid_policy_is_ready_with_its_chain():
    t = Counts()
    s, changed = store(on_counts=t)
    s.on_policy("ADDED", policy("p", GOOD))
    st = s.policies["p"]
    assert st.ready and st.errors == [] and st.chain_generation == 1
    assert [(p.name, p.weight) for p in st.chain.resolved if p.weight is not None] == [
        ("NodeResourcesFit", 1), ("NodeResourcesBalancedAllocation", 2)]
    assert changed == [st] and ready_gauge(t, "true") == 1 and ready_gauge(t, "false") == 0
    s.on_policy("MODIFIED", policy("p", GOOD))  # our own status write or a resync: nothing to do
    assert changed == [st]


def test_invalid_policies_name_the_field():
    s, _ = store()
    s.on_policy("ADDED", policy("empty", {"plugins": []}))
    s.on_policy("ADDED", policy("weight", BAD_WEIGHT))
    s.on_policy("ADDED", policy("args", {"plugins": [{"name": "NodeResourcesFit", "args": {"bogus": 1}}]}))
    s.on_policy("ADDED", policy("unknown", {"plugins": [{"name": "Nope"}]}))
    s.on_policy("ADDED", policy("ns", {"plugins": [{"name": "NodeResourcesFit"}],
                                       "namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}))
    errors = {name: st.errors for name, st in s.policies.items()}
    assert not any(st.ready or st.chain is not None for st in s.policies.values())
    assert errors["empty"][0].startswith("spec.plugins: ")
    assert errors["weight"][0].startswith("spec.plugins[1].weight: ")
    assert errors["args"] == ["spec.plugins[0].args.bogus: Extra inputs are not permitted"]
    assert errors["unknown"][0].startswith("spec.plugins[0].name: unknown plugin 'Nope'")
    assert errors["ns"] == ["spec.namespaceSelector.matchExpressions[0].values: Required value: "
                            "must be specified when `operator` is 'In' or 'NotIn'"]


def test_an_invalid_edit_keeps_the_last_valid_chain_and_generation():
    t = Counts()
    s, changed = store(on_counts=t)
    s.on_policy("ADDED", policy("p", GOOD, gen=1))
    st = s.policies["p"]
    chain = st.chain
    s.on_policy("MODIFIED", policy("p", BAD_WEIGHT, gen=2))
    assert st.chain is chain and st.chain_generation == 1 and st.generation == 2
    assert not st.ready and st.errors[0].startswith("spec.plugins[1].weight: ")
    assert len(changed) == 2 and ready_gauge(t, "false") == 1
    ok, why = s.resolve_policy(pod({POLICY_LABEL: "p"}))
    assert ok is st and why == ""  # pods keep being scheduled with generation 1
    s.on_policy("MODIFIED", policy("p", GOOD, gen=3))
    assert st.ready and st.chain is not chain and st.chain_generation == 3
    s.on_policy("DELETED", policy("p", GOOD, gen=3))
    assert "p" not in s.policies and len(changed) == 3  # deletion is not a change to write
    assert ready_gauge(t, "true") == 0 and ready_gauge(t, "false") == 0


def test_resolve_policy_explains_why_no_policy_applies():
    s, _ = store()
    assert policy_name(pod()) == DEFAULT_POLICY
    assert s.resolve_policy(pod()) == (None, f"no SchedulingPolicy selects this pod: it has no {POLICY_LABEL} "
                                             f"label and there is no policy named 'default'")
    assert s.resolve_policy(pod({POLICY_LABEL: "gpu"})) == (
        None, f"SchedulingPolicy 'gpu' (label {POLICY_LABEL}) does not exist")
    s.on_policy("ADDED", policy("gpu", BAD_WEIGHT))
    st, why = s.resolve_policy(pod({POLICY_LABEL: "gpu"}))
    assert st is None and why.startswith("SchedulingPolicy 'gpu' is not Ready: spec.plugins[1].weight: ")


def test_resolve_policy_applies_the_namespace_selector():
    namespaces = {"team-a": {"team": "a"}, "team-b": {"team": "b"}}
    s, _ = store(namespaces=namespaces)
    s.on_policy("ADDED", policy("default", {**GOOD, "namespaceSelector": {"matchLabels": {"team": "a"}}}))
    assert s.resolve_policy(pod(namespace="team-a"))[0] is s.policies["default"]
    assert s.resolve_policy(pod(namespace="team-b")) == (
        None, "SchedulingPolicy 'default' does not admit pods of namespace 'team-b'")
    namespaces["team-b"] = {"team": "a"}  # the store reads the engine's namespace cache live
    assert s.resolve_policy(pod(namespace="team-b"))[0] is s.policies["default"]


def test_chains_are_built_from_the_given_registry():
    reg = Registry()
    for name in ("SchedulingGates", "DefaultBinder", "NodeResourcesFit"):
        reg.register(default_registry().get(name))
    s, _ = store(registry=reg)
    s.on_policy("ADDED", policy("p", GOOD))
    assert s.policies["p"].errors[0].startswith("spec.plugins[1].name: unknown plugin 'NodeResourcesBalancedAllocation'")
    reg.register(NodeName)
    s.on_policy("ADDED", policy("q", {"plugins": [{"name": "NodeName"}]}))
    assert s.policies["q"].ready


# ------------------------------------------------------------------ instances own their policies


def test_an_instance_loads_only_the_policies_that_name_it():
    t = Counts()
    s, changed = store(on_counts=t, scheduler_name="batch", default_policy="batch-default")
    s.on_policy("ADDED", policy("theirs", GOOD))  # no schedulerName: policy-scheduler's
    s.on_policy("ADDED", policy("other", {**GOOD, "schedulerName": "gpu"}))
    s.on_policy("ADDED", policy("batch-default", {**GOOD, "schedulerName": "batch"}))
    assert set(s.policies) == {"batch-default"} and changed == [s.policies["batch-default"]]
    assert s.foreign == {"theirs": "policy-scheduler", "other": "gpu"}
    assert ready_gauge(t, "true") == 1

    assert s.resolve_policy(pod())[0] is s.policies["batch-default"]  # the instance's default policy
    st, why = s.resolve_policy(pod({POLICY_LABEL: "theirs"}))
    assert st is None and why == ("SchedulingPolicy 'theirs' belongs to scheduler 'policy-scheduler' "
                                  "(its spec.schedulerName), not to 'batch'")
    assert s.resolve_policy(pod({POLICY_LABEL: "nope"}))[1] == (
        f"SchedulingPolicy 'nope' (label {POLICY_LABEL}) does not exist")
    s.on_policy("DELETED", policy("batch-default", {}))
    assert "no policy named 'batch-default'" in s.resolve_policy(pod())[1]


def test_a_policy_handed_to_another_instance_is_dropped_and_one_handed_over_is_taken():
    t = Counts()
    s, changed = store(on_counts=t)
    s.on_policy("ADDED", policy("p", GOOD))
    assert "p" in s.policies and ready_gauge(t, "true") == 1
    s.on_policy("MODIFIED", policy("p", {**GOOD, "schedulerName": "batch"}, gen=2))
    assert "p" not in s.policies and s.foreign == {"p": "batch"} and ready_gauge(t, "true") == 0
    s.on_policy("MODIFIED", policy("p", {**GOOD, "schedulerName": "policy-scheduler"}, gen=3))
    assert s.policies["p"].ready and s.foreign == {} and changed[-1] is s.policies["p"]
    s.on_policy("MODIFIED", policy("q", {**GOOD, "schedulerName": "batch"}))
    s.on_policy("DELETED", policy("q", {}))
    assert s.foreign == {}


def test_an_invalid_scheduler_name_is_an_error_of_the_owner():
    s, _ = store(scheduler_name="Bad_Name")
    s.on_policy("ADDED", policy("p", {**GOOD, "schedulerName": "Bad_Name"}))
    assert s.policies["p"].errors and s.policies["p"].errors[0].startswith("spec.schedulerName:")


# ------------------------------------------------------------------ tenants: namespace defaults, overcommit


def test_a_namespace_names_the_policy_of_its_unlabelled_pods():
    namespaces = {"team-a": {"policy-scheduler.io/default-policy": "a-policy"}, "other": {}}
    s, _ = store(namespaces=namespaces)
    s.on_policy("ADDED", policy("a-policy", GOOD))
    s.on_policy("ADDED", policy("default", GOOD))
    assert s.resolve_policy(pod(namespace="team-a"))[0].name == "a-policy"
    assert s.resolve_policy(pod(namespace="other"))[0].name == "default"
    assert s.resolve_policy(pod({POLICY_LABEL: "default"}, namespace="team-a"))[0].name == "default"  # label wins
    namespaces["team-a"]["policy-scheduler.io/default-policy"] = "gone"
    st, why = s.resolve_policy(pod(namespace="team-a"))
    assert st is None and why == ("SchedulingPolicy 'gone' (label policy-scheduler.io/default-policy of "
                                  "namespace 'team-a') does not exist")


def test_overcommit_factors_and_admitted_namespaces():
    namespaces = {"a": {"dept": "a"}, "b": {"dept": "b"}, "c": {}}
    s, _ = store(namespaces=namespaces)
    s.on_policy("ADDED", policy("loose", {**GOOD, "overcommit": {"cpu": 1.05, "memory": 1.0},
                                          "namespaceSelector": {"matchLabels": {"dept": "a"}}}))
    s.on_policy("ADDED", policy("strict", GOOD))
    assert s.policies["loose"].overcommit == {"cpu": 1.05} and s.policies["strict"].overcommit is None
    assert s.admitted_namespaces(s.policies["loose"]) == 1 and s.admitted_namespaces(s.policies["strict"]) == 3
    s.on_policy("ADDED", policy("bad", {**GOOD, "overcommit": {"cpu": 0.5}}))
    assert s.policies["bad"].errors == ["spec.overcommit.cpu: Invalid value: 0.5: must be greater than or equal to 1.0"]


def deep(levels):
    v = 1
    for _ in range(levels):
        v = {"a": v}
    return v


def test_a_policy_past_the_limits_is_unreadable_and_never_parsed():
    from policy_scheduler.safejson import loads

    t = Counts()
    s, changed = store(on_counts=t)
    # as the informer decodes it: 1,100 levels, past what orjson reads, the deepest part a marker
    raw = (b'{"metadata":{"name":"deep","generation":1},"spec":{"plugins":[{"name":"NodeAffinity","args":'
           b'{"addedAffinity":' + b'{"a":' * 1_100 + b"1" + b"}" * 1_100 + b"}}]}}")
    s.on_policy("ADDED", loads(raw))
    s.on_policy("ADDED", policy("big", {"plugins": [{"name": "NodeResourcesFit", "args": {"x": "y" * 20_000}}]}))
    s.on_policy("ADDED", policy("list", {"plugins": [{"name": "NodeResourcesFit"}] * 5_000}))
    s.on_policy("ADDED", policy("kind", ["NodeResourcesFit"]))
    s.on_policy("ADDED", policy("p", GOOD))
    assert s.policies["p"].ready and ready_gauge(t, "true") == 1 and ready_gauge(t, "false") == 4
    why = {n: st.unreadable for n, st in s.policies.items() if n != "p"}
    assert why["deep"].startswith("spec.plugins[0].args.addedAffinity.a.a.")
    assert why["deep"].endswith(": nested deeper than 64 levels")
    assert why["big"] == "spec.plugins[0].args.x: Too long: a string of 20000 characters, at most 16384"
    assert why["list"] == "spec.plugins: Too many: 5000: must have at most 1024 items"
    assert why["kind"] == "spec: Invalid value: must be an object, not a list"
    for name in why:
        st = s.policies[name]
        assert st.errors == [st.unreadable] and st.chain is None and st.spec_raw is None and not st.ready
    assert s.resolve_policy(pod({POLICY_LABEL: "deep"}))[1].startswith(
        "SchedulingPolicy 'deep' is not Ready: spec.plugins[0].args.addedAffinity.a.a.")
    assert s.validate(loads(raw)["spec"]) == [why["deep"]]  # the webhook's check says the same
    n = len(changed)
    s.on_policy("MODIFIED", loads(raw))  # a status write or a resync: nothing new
    assert len(changed) == n


def test_an_unreadable_edit_keeps_the_last_valid_chain_and_a_readable_one_ends_it():
    s, changed = store()
    s.on_policy("ADDED", policy("p", GOOD, gen=1))
    st = s.policies["p"]
    chain = st.chain
    s.on_policy("MODIFIED", policy("p", {"plugins": [{"name": "NodeAffinity", "args": deep(100)}]}, gen=2))
    assert st.chain is chain and st.chain_generation == 1 and st.generation == 2 and not st.ready
    assert st.unreadable.endswith("nested deeper than 64 levels") and st.errors == [st.unreadable]
    assert s.resolve_policy(pod({POLICY_LABEL: "p"})) == (st, "")  # still scheduled with generation 1
    s.on_policy("MODIFIED", policy("p", BAD_WEIGHT, gen=3))
    assert st.unreadable is None and st.errors[0].startswith("spec.plugins[1].weight") and st.chain is chain
    s.on_policy("MODIFIED", policy("p", GOOD, gen=4))
    assert st.ready and st.chain_generation == 4 and st.unreadable is None and len(changed) == 4


def test_objects_without_a_usable_name_or_generation_are_not_fatal():
    s, changed = store()
    for body in ({}, {"metadata": None}, {"metadata": []}, {"metadata": {"name": 7}}, "x", None,
                 {"metadata": {"name": ""}, "spec": GOOD}):
        s.on_policy("ADDED", body)
    assert s.policies == {} and changed == []
    s.on_policy("ADDED", {"metadata": {"name": "g", "generation": "7"}, "spec": GOOD})
    s.on_policy("ADDED", {"metadata": {"name": "o", "generation": 1}, "spec": {**GOOD, "schedulerName": {"a": 1}}})
    assert s.policies["g"].ready and s.policies["g"].generation == 0
    # a schedulerName that is no name leaves the policy to the default instance, which refuses it
    assert not s.policies["o"].ready and s.policies["o"].errors[0].startswith("spec.schedulerName")


def test_a_namespace_not_in_the_cache_yet_is_not_admitted_by_a_namespace_selector():
    """L9: a namespace the cache has not seen yet has unknown labels, not empty ones: a selector of
    NotIn / DoesNotExist would otherwise admit its pods before its labels are known."""
    namespaces: dict = {}
    s, _ = store(namespaces=namespaces)
    s.on_policy("ADDED", policy("default", {**GOOD, "namespaceSelector": {"matchExpressions": [
        {"key": "tier", "operator": "NotIn", "values": ["restricted"]},
        {"key": "quarantine", "operator": "DoesNotExist"}]}}))
    s.on_policy("ADDED", policy("open", GOOD))
    assert s.resolve_policy(pod(namespace="new")) == (
        None, "SchedulingPolicy 'default' selects namespaces (spec.namespaceSelector) and namespace 'new' is not "
              "known yet: not admitted until it is")
    assert s.resolve_policy(pod({POLICY_LABEL: "open"}, namespace="new"))[0] is s.policies["open"]  # no selector
    namespaces["new"] = {"quarantine": "yes"}  # its ADD: now its labels decide
    assert s.resolve_policy(pod(namespace="new")) == (
        None, "SchedulingPolicy 'default' does not admit pods of namespace 'new'")
    namespaces["new"] = {}
    assert s.resolve_policy(pod(namespace="new"))[0] is s.policies["default"]
