"""PodInfo parsing: upstream PodRequests (component-helpers resource/helpers.go), the scheduler's
non-zero scoring defaults, tolerations, affinity terms, spread constraints, host ports, images."""

from __future__ import annotations

import pytest

from policy_scheduler.framework.model.labels import NOTHING
from policy_scheduler.framework.model.podinfo import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    compute_requests,
    normalized_image_name,
    parse_pod,
)
from policy_scheduler.framework.model.taints import Taint, Toleration

G = 10**9
MI = 2**20


def c(requests=None, *, name="c", image="busybox", ports=None, sidecar=False):
    """A container dict; ``requests`` None means no requests map at all."""
    d = {"name": name, "image": image}
    if requests is not None:
        d["resources"] = {"requests": requests}
    if ports:
        d["ports"] = ports
    if sidecar:
        d["restartPolicy"] = "Always"
    return d


def pod(spec=None, *, name="p", ns="team-a", labels=None, **meta):
    return parse_pod({"metadata": {"name": name, "namespace": ns, "labels": labels or {}, **meta},
                      "spec": spec or {"containers": [c()]}})


# ---------------------------------------------------------------- requests (section 4.0)

@pytest.mark.parametrize("spec, want", [
    # classic example: sum(containers) {3, 2G}, init max {2, 3G} -> {3 cpu, 3G}
    ({"initContainers": [c({"cpu": "2", "memory": "1G"}), c({"cpu": "2", "memory": "3G"})],
      "containers": [c({"cpu": "2", "memory": "1G"}), c({"cpu": "1", "memory": "1G"})]},
     {"cpu": 3000, "memory": 3 * G}),
    # a normal init container bigger than the app containers wins per resource
    ({"initContainers": [c({"cpu": "4"})], "containers": [c({"cpu": "1", "memory": "1G"})]},
     {"cpu": 4000, "memory": G}),
    # sidecar S1 {1}, init I1 {2}, sidecar S2 {500m}; app {1}:
    # app + sidecars = 1 + 1 + 0.5 = 2.5; init-phase usages: S1 1, I1 2+1 = 3, S2 1.5 -> max 3
    ({"initContainers": [c({"cpu": "1"}, sidecar=True), c({"cpu": "2"}), c({"cpu": "500m"}, sidecar=True)],
      "containers": [c({"cpu": "1"})]},
     {"cpu": 3000}),
    # a sidecar started AFTER a normal init container does not count in that init's usage:
    # I1 usage 2; app + sidecar = 1.5 + 1 = 2.5 -> 2.5
    ({"initContainers": [c({"cpu": "2"}), c({"cpu": "1"}, sidecar=True)], "containers": [c({"cpu": "1500m"})]},
     {"cpu": 2500}),
    # sidecars are added to the total even with no app container requests
    ({"initContainers": [c({"memory": "1Gi"}, sidecar=True), c({"memory": "1Gi"}, sidecar=True)],
      "containers": [c()]},
     {"memory": 2 * 2**30}),
    # restartPolicy other than Always is a normal init container
    ({"initContainers": [{**c({"cpu": "1"}), "restartPolicy": "OnFailure"}], "containers": [c({"cpu": "500m"})]},
     {"cpu": 1000}),
    # extended resources aggregate the same way
    ({"initContainers": [c({"nvidia.com/gpu": "2"})], "containers": [c({"nvidia.com/gpu": "1"})]},
     {"nvidia.com/gpu": 2}),
    # overhead is added on top
    ({"containers": [c({"cpu": "1", "memory": "1Gi"})], "overhead": {"cpu": "250m", "memory": "120Mi"}},
     {"cpu": 1250, "memory": 2**30 + 120 * MI}),
    # pod-level requests replace the container aggregate for cpu/memory/hugepages only,
    # then overhead is added
    ({"resources": {"requests": {"cpu": "2", "memory": "2Gi", "hugepages-2Mi": "4Mi", "ephemeral-storage": "9Gi"}},
      "containers": [c({"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"}), c({"cpu": "500m"})],
      "overhead": {"cpu": "100m"}},
     {"cpu": 2100, "memory": 2 * 2**30, "hugepages-2Mi": 4 * MI, "ephemeral-storage": 2**30}),
    # pod-level cpu only: memory stays the container aggregate
    ({"resources": {"requests": {"cpu": "3"}}, "containers": [c({"cpu": "1", "memory": "1Gi"})]},
     {"cpu": 3000, "memory": 2**30}),
    # explicit zero is kept as a present key
    ({"containers": [c({"cpu": "0"})]}, {"cpu": 0}),
    ({"containers": [c()]}, {}),
])
def test_true_requests(spec, want):
    p = pod(spec)
    assert p.parse_error is None
    assert p.requests == want
    assert compute_requests(spec) == want


@pytest.mark.parametrize("spec, cpu, memory", [
    # no requests anywhere: one container -> 100m / 200Mi
    ({"containers": [c()]}, 100, 200 * MI),
    # per container: the container missing cpu gets 100m, the other keeps 500m
    ({"containers": [c({"cpu": "500m"}), c()]}, 600, 400 * MI),
    # an explicit 0 stays 0 (the key is present)
    ({"containers": [c({"cpu": "0", "memory": "0"})]}, 0, 0),
    ({"containers": [c({"cpu": "0"}), c({"memory": "1Gi"})]}, 0 + 100, 200 * MI + 2**30),
    # init containers get the defaults too: max(app 100m, init 100m) = 100m
    ({"initContainers": [c()], "containers": [c()]}, 100, 200 * MI),
    # a sidecar without requests adds 100m/200Mi to the app sum
    ({"initContainers": [c(sidecar=True)], "containers": [c({"cpu": "1", "memory": "1Gi"})]},
     1100, 2**30 + 200 * MI),
    # overhead is added to the defaulted aggregate
    ({"containers": [c()], "overhead": {"cpu": "50m", "memory": "10Mi"}}, 150, 210 * MI),
    # pod-level requests replace the defaulted aggregate
    ({"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}, "containers": [c(), c()]}, 2000, 2**30),
])
def test_nonzero_defaults_apply_per_container_only_when_missing(spec, cpu, memory):
    p = pod(spec)
    assert (p.nonzero_cpu, p.nonzero_memory) == (cpu, memory)
    assert DEFAULT_MILLI_CPU_REQUEST == 100 and DEFAULT_MEMORY_REQUEST == 200 * MI


@pytest.mark.parametrize("spec", [
    {"containers": [c({"cpu": "1", "memory": "1Gi"})]}, {"containers": [c({"cpu": "250m"})]}, {"containers": [c()]},
    {"containers": [c({"cpu": "0"})], "overhead": {"cpu": "50m"}},
    {"containers": [c({"memory": "1Gi"})], "resources": {"requests": {"cpu": "2"}}},
    {"initContainers": [c(sidecar=True), c({"cpu": "3"})], "containers": [c({"cpu": "1"}), c()]},
])
def test_parsed_requests_are_both_aggregates_at_once(spec):
    p = pod(spec)
    plain = compute_requests(spec)
    # NodeResourcesFit's score: the containers with their defaults, the pod level not read
    nonzero = compute_requests({k: v for k, v in spec.items() if k != "resources"}, defaults=True)
    assert p.requests == p.spec_requests == plain
    assert (p.score_cpu, p.score_memory) == (nonzero["cpu"], nonzero["memory"])
    assert spec["containers"][0].get("resources", {}).get("requests", {}).keys() <= plain.keys()


def test_nonzero_defaults_never_touch_true_requests():
    p = pod({"containers": [c(), c({"ephemeral-storage": "1Gi"})]})
    assert p.requests == {"ephemeral-storage": 2**30}
    assert (p.nonzero_cpu, p.nonzero_memory) == (200, 400 * MI)


@pytest.mark.parametrize("spec, field", [
    ({"containers": [c({"cpu": "1"}), c({"memory": "lots"})]}, "spec.containers[1].resources.requests.memory"),
    ({"initContainers": [c({"cpu": "1x"})], "containers": [c()]}, "spec.initContainers[0].resources.requests.cpu"),
    ({"containers": [c()], "overhead": {"memory": "1Kb"}}, "spec.overhead.memory"),
    ({"containers": [c()], "resources": {"requests": {"cpu": "?"}}}, "spec.resources.requests.cpu"),
    ({"containers": [c()], "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "zone", "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Bad"}]}}]}}},
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
     ".labelSelector.matchExpressions[0].operator"),
    ({"containers": [c()], "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {}}]}}},
     "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"),
    ({"containers": [c()], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]}}}},
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
     ".nodeSelectorTerms[0].matchExpressions[0].values"),
    ({"containers": [c()], "topologySpreadConstraints": [{"maxSkew": "x", "topologyKey": "zone"}]},
     "spec.topologySpreadConstraints[0].maxSkew"),
])
def test_malformed_spec_sets_parse_error_naming_the_field(spec, field):
    p = pod(spec)
    assert p.parse_error is not None
    assert p.parse_error.startswith(field + ":"), p.parse_error


def test_parse_error_keeps_identity():
    p = pod({"containers": [c({"cpu": "bad"})]}, name="x", uid="u-1")
    assert (p.key, p.uid, p.namespace) == ("team-a/x", "u-1", "team-a")
    assert p.parse_error


# ---------------------------------------------------------------- identity and simple fields

def test_identity_and_defaults():
    p = parse_pod({"metadata": {"name": "p"}, "spec": {"containers": [c()]}})
    assert p.namespace == "default" and p.key == "default/p"
    assert p.scheduler_name == "default-scheduler"
    assert p.priority == 0 and p.preemption_policy == "PreemptLowerPriority"
    assert not p.terminating and p.node_name == "" and p.nominated_node_name == ""
    q = parse_pod({"metadata": {"name": "q", "namespace": "ns", "uid": "u",
                                "deletionTimestamp": "2024-01-01T00:00:00Z"},
                   "spec": {"containers": [c()], "priority": 7, "schedulerName": "s", "nodeName": "n1",
                            "preemptionPolicy": "Never"},
                   "status": {"nominatedNodeName": "n2"}})
    assert (q.uid, q.priority, q.scheduler_name, q.node_name, q.preemption_policy, q.nominated_node_name) == \
        ("u", 7, "s", "n1", "Never", "n2")
    assert q.terminating


def test_tolerations():
    p = pod({"containers": [c()], "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "spot", "value": "true"},  # operator defaults to Equal
        {"operator": "Exists"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ]})
    assert p.tolerations == (
        Toleration("dedicated", "Equal", "gpu", "NoSchedule"),
        Toleration("spot", "Equal", "true", ""),
        Toleration("", "Exists", "", ""),
        Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
    )
    assert p.tolerations[1].tolerates(Taint("spot", "true", "PreferNoSchedule"))
    assert not p.tolerations[1].tolerates(Taint("spot", "false", "NoSchedule"))
    assert p.tolerations[2].tolerates(Taint("anything", "x", "NoExecute"))


def test_node_selector_and_node_affinity():
    p = pod({"containers": [c()], "nodeSelector": {"disk": "ssd"}, "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "preference": {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}}],
    }}})
    assert p.node_selector == {"disk": "ssd"}
    assert p.required_node_affinity.matches({"zone": "a"}, "n")
    assert not p.required_node_affinity.matches({"zone": "b"}, "n")
    (w, t), = p.preferred_node_affinity
    assert w == 5 and t.matches({"gen": "4"}, "n") and not t.matches({"gen": "3"}, "n")
    assert pod().required_node_affinity is None


# ---------------------------------------------------------------- pod (anti-)affinity

def aff_term(**kw):
    return {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "db"}}, **kw}


@pytest.mark.parametrize("term, namespaces, has_ns_selector", [
    (aff_term(), {"team-a"}, False),  # defaults to the owner's namespace
    (aff_term(namespaces=["x", "y"]), {"x", "y"}, False),
    (aff_term(namespaceSelector={}), set(), True),  # empty selector: all namespaces, no default
    (aff_term(namespaceSelector={"matchLabels": {"env": "prod"}}), set(), True),
    (aff_term(namespaces=["x"], namespaceSelector={"matchLabels": {"env": "prod"}}), {"x"}, True),
])
def test_affinity_term_namespaces(term, namespaces, has_ns_selector):
    p = pod({"containers": [c()],
             "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}})
    (t,) = p.required_affinity
    assert t.namespaces == frozenset(namespaces)
    assert (t.namespace_selector is not None) is has_ns_selector
    assert t.topology_key == "zone"


def test_affinity_term_matches_uses_owner_namespace_not_target():
    owner = pod({"containers": [c()], "affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [aff_term()],
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 30, "podAffinityTerm": aff_term(namespaceSelector={"matchLabels": {"env": "prod"}})}],
    }}}, ns="team-a")
    (req,) = owner.required_anti_affinity
    same_ns = pod(ns="team-a", labels={"app": "db"}, name="db1")
    other_ns = pod(ns="team-b", labels={"app": "db"}, name="db2")
    wrong_labels = pod(ns="team-a", labels={"app": "web"}, name="web")
    assert req.matches(same_ns)
    assert not req.matches(other_ns)  # term namespace is the OWNER's (team-a)
    assert not req.matches(wrong_labels)
    (pref,) = owner.preferred_anti_affinity
    assert pref.weight == 30
    assert pref.term.matches(other_ns, {"env": "prod"})
    assert not pref.term.matches(other_ns, {"env": "dev"})
    assert not pref.term.matches(other_ns, None)  # unknown namespace labels match no selector
    assert owner.has_affinity and owner.has_required_anti_affinity


def test_affinity_term_nil_label_selector_matches_nothing():
    p = pod({"containers": [c()], "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "zone"}]}}})
    (t,) = p.required_affinity
    assert t.selector is NOTHING
    assert not t.matches(pod(ns="team-a", labels={"app": "db"}, name="x"))


def test_no_affinity_flags():
    p = pod()
    assert not p.has_affinity and not p.has_required_anti_affinity
    assert p.required_affinity == () and p.preferred_affinity == ()


# ---------------------------------------------------------------- topology spread constraints

def test_spread_constraints_merge_match_label_keys_and_default_fields():
    p = pod({"containers": [c()], "topologySpreadConstraints": [
        {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash", "absent"]},
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "minDomains": 3,
         "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor",
         "labelSelector": {"matchLabels": {"app": "web"}}},
        {"maxSkew": 1, "topologyKey": "rack", "matchLabelKeys": ["pod-template-hash"]},  # nil selector
    ]}, labels={"app": "web", "pod-template-hash": "abc"})
    soft, hard, nil_sel = p.spread_constraints
    assert (soft.max_skew, soft.topology_key, soft.when_unsatisfiable) == (2, "zone", "ScheduleAnyway")
    # pod-template-hash=abc is ANDed in; the key the pod lacks is ignored
    assert soft.selector.matches({"app": "web", "pod-template-hash": "abc"})
    assert not soft.selector.matches({"app": "web", "pod-template-hash": "old"})
    assert not soft.selector.matches({"app": "web"})
    assert (soft.min_domains, soft.node_affinity_policy, soft.node_taints_policy) == (1, "Honor", "Ignore")
    assert hard.when_unsatisfiable == "DoNotSchedule"
    assert (hard.min_domains, hard.node_affinity_policy, hard.node_taints_policy) == (3, "Ignore", "Honor")
    # a nil labelSelector stays "nothing" even with matchLabelKeys (mergeLabelSetWithSelector)
    assert nil_sel.selector is NOTHING


# ---------------------------------------------------------------- host ports and images

def test_host_ports_only_positive_with_defaults_from_regular_containers():
    p = pod({"initContainers": [c(ports=[{"containerPort": 1, "hostPort": 9999}])],
             "containers": [
                 c(ports=[{"containerPort": 80, "hostPort": 8080},
                          {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                          {"containerPort": 443},
                          {"containerPort": 9000, "hostPort": 0}]),
                 c(ports=[{"containerPort": 81, "hostPort": 8081, "protocol": "TCP"}], name="d"),
             ]})
    assert p.host_ports == (("0.0.0.0", "TCP", 8080), ("10.0.0.1", "UDP", 53), ("0.0.0.0", "TCP", 8081))


def test_host_ports_of_sidecars_come_first_as_upstream_get_host_ports():
    # a restartable init container keeps running next to the app, so its host port stays taken;
    # a plain init container's port is released before the app starts
    p = pod({"initContainers": [c(ports=[{"containerPort": 1, "hostPort": 9999}], name="init"),
                                c(ports=[{"containerPort": 2, "hostPort": 7000}], name="side", sidecar=True)],
             "containers": [c(ports=[{"containerPort": 80, "hostPort": 8080}])]})
    assert p.host_ports == (("0.0.0.0", "TCP", 7000), ("0.0.0.0", "TCP", 8080))


@pytest.mark.parametrize("image, normalized", [
    ("nginx", "nginx:latest"),
    ("nginx:1.27", "nginx:1.27"),
    ("registry.local:5000/team/app", "registry.local:5000/team/app:latest"),  # port, no tag
    ("registry.local:5000/team/app:v2", "registry.local:5000/team/app:v2"),
    ("gcr.io/x/y@sha256:abcd", "gcr.io/x/y@sha256:abcd"),
])
def test_normalized_image_name(image, normalized):
    assert normalized_image_name(image) == normalized


def test_images_cover_init_then_regular_containers():
    p = pod({"initContainers": [c(image="busybox:1.36")], "containers": [c(image="nginx"), c(image="redis:7")]})
    assert p.images == ("busybox:1.36", "nginx:latest", "redis:7")
