"""remedies.suggest, one kind at a time: a pod that cannot be placed gets the expected top
suggestion with the node its cycle would choose, and applying the suggestion (the pod re-created
from its patched object, or the cluster changed through the state) places it on that node. The
search leaves the state as it was."""

from __future__ import annotations

import json

from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.remedies import SCHEMA_VERSION, apply_pod_patch, dumps, suggest

from support.remedykit import Cluster, apply, state_fingerprint
from support.whatif import DEFAULT as DEFAULT_POLICY, node, pod

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def tainted(n, *taints):
    n["spec"] = {**n.get("spec", {}), "taints": [dict(zip(("key", "value", "effect"), t)) for t in taints]}
    return n


def no_room(n):
    n["status"]["allocatable"]["pods"] = "0"
    return n


def bound(name, node_name, cpu="100m", labels=None, priority=0, ports=(), namespace="default"):
    body = pod(name, cpu=cpu, memory="64Mi", labels=labels, namespace=namespace, nodeName=node_name, priority=priority)
    if ports:
        body["spec"]["containers"][0]["ports"] = [{"containerPort": p, "hostPort": p} for p in ports]
    body["status"] = {"phase": "Running", "startTime": "2025-01-01T00:00:00Z"}
    return body


def run(cluster, body, policy="default", **kw):
    """suggest() for a pod the cluster cannot place; every suggestion applied places it on its node."""
    assert not cluster.decide(body, policy).scheduled
    before = state_fingerprint(cluster.state)
    r = suggest(parse_pod(body), cluster.state, cluster.policy(policy), budget=kw.pop("budget", 1.0), **kw)
    assert state_fingerprint(cluster.state) == before, "the search changed the state"
    assert not r.partial, r.reason
    for s in r.suggestions:
        d = apply(cluster, body, s, policy)
        assert d.node == s.node, (s.sentence(), d.message)
    return r


def test_lower_a_request_to_the_largest_free_amount():
    c = Cluster([node("n0", cpu="2"), node("n1", cpu="3"), node("n2", cpu="4"), node("n3", cpu="4")])
    r = run(c, pod("big", cpu="5"))
    best = r.best
    assert best.kind == "LowerRequest" and best.target == "Pod"
    assert best.change == "lower the cpu request to at most 4"
    assert best.patch == [{"op": "replace", "path": "/spec/containers/0/resources/requests/cpu", "value": "4"}]
    assert best.nodes_opened == 2 and best.node in ("n2", "n3")
    assert r.text() == f"lower the cpu request to at most 4: opens 2 nodes ({best.node} would be chosen)"


def test_lower_requests_across_containers_and_both_resources():
    c = Cluster([node("n0", cpu="2", memory="2Gi"), node("n1", cpu="3", memory="3Gi")])
    body = pod("two", cpu="2", memory="2Gi")
    body["spec"]["containers"].append({"name": "d", "image": "x", "resources": {"requests": {"cpu": "1500m",
                                                                                            "memory": "1536Mi"}}})
    r = run(c, body)
    best = r.best
    assert best.change == "lower the cpu request to at most 3 and the memory request to at most 3Gi"
    assert best.nodes_opened == 1 and best.node == "n1"
    changed = parse_pod(apply_pod_patch(body, best.patch))
    assert changed.requests["cpu"] == 3000 and changed.requests["memory"] == 3 << 30
    assert body["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "2"  # the original is untouched


def test_tolerate_the_taint_that_blocks_most_nodes():
    c = Cluster([tainted(node("n0"), ("dedicated", "gpu", "NoSchedule")),
                 tainted(node("n1"), ("dedicated", "gpu", "NoSchedule")),
                 tainted(node("n2"), ("team", "", "NoExecute")), node("n3", cpu="1")])
    r = run(c, pod("p", cpu="2"))
    assert r.best.kind == "TolerateTaint"
    assert r.best.change == "tolerate taint dedicated=gpu:NoSchedule"
    assert r.best.patch == [{"op": "add", "path": "/spec/tolerations", "value": [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}]
    assert r.best.nodes_opened == 2 and r.best.node in ("n0", "n1")
    assert any(s.change == "tolerate taint team:NoExecute" and s.nodes_opened == 1 for s in r.suggestions)
    # the lower request for n3 ranks after: one node opened... unless it opens as many
    assert [s.nodes_opened for s in r.suggestions] == sorted((s.nodes_opened for s in r.suggestions), reverse=True)


def test_drop_a_node_selector_key():
    c = Cluster([node("n0", disk="hdd"), node("n1", disk="hdd"), node("n2")])
    r = run(c, pod("p", nodeSelector={"disk": "ssd", "kubernetes.io/os": "linux"}))
    assert r.best.kind == "DropNodeSelector"
    assert r.best.change.startswith("drop nodeSelector disk=ssd; drop nodeSelector kubernetes.io/os=linux")
    assert r.best.nodes_opened == 3


def test_widen_a_required_node_affinity_term():
    c = Cluster([node("a1", zone="a"), node("a2", zone="a"), node("b1", zone="b")])
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["x"]}]}]}}}
    r = run(c, pod("p", affinity=aff))
    assert r.best.kind == "WidenNodeAffinity"
    assert r.best.change == f"add a to {ZONE} In [x] in required node affinity term 0"
    assert r.best.nodes_opened == 2 and r.best.node in ("a1", "a2")
    assert r.best.patch == [{"op": "add", "value": "a", "path": "/spec/affinity/nodeAffinity/requiredDuring"
                             "SchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0/values/-"}]


def test_drop_an_expression_no_node_can_match():
    c = Cluster([node("a1", zone="a"), node("a2", zone="a", gpu="yes")])
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a"]},
                              {"key": "gpu", "operator": "DoesNotExist"},
                              {"key": "fast", "operator": "Exists"}]}]}}}
    r = run(c, pod("p", affinity=aff))
    # the most nodes opened first, then the smallest change
    assert [(s.change, s.nodes_opened) for s in r.suggestions] == [
        ("drop fast Exists from required node affinity term 0; drop gpu DoesNotExist from required node affinity "
         "term 0", 2),
        ("drop fast Exists from required node affinity term 0", 1)]
    assert r.suggestions[1].node == "a1"


def test_relax_a_topology_spread_constraint_to_the_smallest_max_skew():
    nodes = [node("a1", zone="a"), node("a2", zone="a"), node("a3", zone="a"),
             tainted(node("b1", zone="b"), ("maintenance", "", "NoSchedule"))]
    pods = [bound(f"w{i}", "a1", labels={"app": "web"}) for i in range(2)]
    c = Cluster(nodes, pods)
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    r = run(c, pod("p", labels={"app": "web"}, topologySpreadConstraints=spread))
    assert r.best.kind == "RelaxTopologySpread"
    assert r.best.change == f"raise maxSkew of topology spread constraint 0 ({ZONE}, maxSkew 1) to 3"
    assert r.best.nodes_opened == 3
    kinds = {s.change: s.nodes_opened for s in r.suggestions}
    assert kinds["tolerate taint maintenance:NoSchedule"] == 1
    assert kinds[f"set whenUnsatisfiable of topology spread constraint 0 ({ZONE}, maxSkew 1) to ScheduleAnyway"] == 3


def test_drop_a_host_port_that_collides():
    nodes = [node("n0"), node("n1"), node("n2", cpu="100m")]
    c = Cluster(nodes, [bound("x", "n0", ports=[8080]), bound("y", "n1", ports=[8080])])
    body = pod("p")
    body["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]
    r = run(c, body)
    assert r.best.kind == "DropHostPort"
    assert r.best.change == "drop hostPort 8080/TCP of container c"
    assert r.best.patch == [{"op": "remove", "path": "/spec/containers/0/ports/0/hostPort"}]
    assert r.best.nodes_opened == 2


def test_uncordon_a_node():
    cordoned = node("n0", cpu="8")
    cordoned["spec"] = {"unschedulable": True,
                        "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}
    c = Cluster([cordoned, no_room(node("n1", cpu="8"))])
    r = run(c, pod("p", cpu="4"))
    assert r.best.kind == "UncordonNode" and r.best.target == "Cluster"
    assert r.best.change == "uncordon node n0" and r.best.node == "n0" and r.best.nodes_opened == 1
    assert r.best.patch == [
        {"op": "replace", "kind": "Node", "name": "n0", "path": "/spec/unschedulable", "value": False},
        {"op": "remove", "kind": "Node", "name": "n0", "path": "/spec/taints/0"}]
    assert c.state.table.unschedulable[c.state.table.index["n0"]]  # the live state is still cordoned


def test_evict_lower_priority_pods_when_the_policy_does_not_preempt():
    nodes = [node("n0", cpu="2"), node("n1", cpu="2")]
    pods = [bound("low-0", "n0", cpu="2", priority=1), bound("mid-1", "n1", cpu="2", priority=50)]
    c = Cluster(nodes, pods)
    body = pod("p", cpu="1", priority=100)
    r = run(c, body, policy="no-preemption")
    assert r.best.kind == "EvictLowerPriority" and r.best.target == "Cluster"
    assert r.best.node == "n0"
    assert r.best.patch == [{"op": "delete", "kind": "Pod", "namespace": "default", "name": "low-0"}]
    assert "its policy has no DefaultPreemption" in r.best.change
    # under the default policy DefaultPreemption does it already: no such suggestion
    assert not any(s.kind == "EvictLowerPriority" for s in suggest(parse_pod(body), c.state, c.policy()).suggestions)


def test_a_pod_that_fits_gets_nothing_and_a_pod_nothing_helps_says_why():
    c = Cluster([node("n0", cpu="1")])
    r = suggest(parse_pod(pod("small", cpu="100m")), c.state, c.policy())
    assert r.suggestions == [] and r.reason == "it fits a node now"
    c = Cluster([no_room(node("n0", cpu="8"))])  # no room for a pod: nothing of the pod's can change that
    r = suggest(parse_pod(pod("huge", cpu="64")), c.state, c.policy())
    assert r.suggestions == [] and r.reason == "no change of the supported kinds places it"
    assert r.to_json()["suggestions"] == []


def test_the_json_form_is_versioned_and_capped():
    c = Cluster([node(f"n{i}", cpu=str(1 + i)) for i in range(4)])
    r = suggest(parse_pod(pod("big", cpu="8")), c.state, c.policy())
    doc = r.to_json()
    assert doc["version"] == SCHEMA_VERSION and doc["pod"] == "default/big" and doc["partial"] is False
    s = doc["suggestions"][0]
    assert set(s) == {"kind", "target", "change", "patch", "nodesOpened", "node", "score", "size"}
    assert doc["text"] == r.text() and json.loads(dumps(doc)) == doc
    small = r.to_json(max_bytes=300)
    assert len(dumps(small).encode()) <= 300
    tiny = r.to_json(max_bytes=10)
    assert tiny["suggestions"] == [] and tiny["truncated"] is True


def test_drop_a_volume_whose_zone_no_node_is_in():
    from support.volkit import pv, pvc

    nodes = [node("a1", zone="a"), node("a2", zone="a")]
    vols = {"persistentVolumes": [pv("pv-b", labels={ZONE: "b"}, claim=("default", "data"), phase="Bound")],
            "persistentVolumeClaims": [pvc("data", volume="pv-b", bound=True)]}
    c = Cluster(nodes, **vols)
    body = pod("p", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                             {"name": "tmp", "emptyDir": {}}])
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"},
                                                      {"name": "data", "mountPath": "/data"}]
    r = run(c, body)
    assert r.best.kind == "DropVolume"
    assert r.best.change == "drop volume data (claim data) and its mounts: node(s) had no available volume zone"
    assert r.best.patch == [{"op": "remove", "path": "/spec/containers/0/volumeMounts/1"},
                            {"op": "remove", "path": "/spec/volumes/0"}]
    assert r.best.nodes_opened == 2


def test_the_diagnosis_counts_nodes_per_set_of_rejecting_plugins():
    c = Cluster([tainted(node("n0", cpu="1"), ("dedicated", "gpu", "NoSchedule")), node("n1", cpu="1"),
                 node("n2", cpu="1")])
    r = suggest(parse_pod(pod("p", cpu="2")), c.state, c.policy())
    assert r.blockers == {"NodeResourcesFit": 2, "NodeResourcesFit+TaintToleration": 1}
    assert r.to_json(blockers=True)["blockers"] == r.blockers
    assert "blockers" not in r.to_json()


def test_another_policy_the_pod_may_use():
    """A policy without TaintToleration: the pod's default policy rejects every node for its
    taint, that one places it."""
    import copy

    other = copy.deepcopy(DEFAULT_POLICY)
    other["metadata"] = {"name": "binpack"}
    other["spec"]["plugins"] = [p for p in other["spec"]["plugins"] if p["name"] != "TaintToleration"]
    c = Cluster([tainted(node("n0"), ("dedicated", "gpu", "NoSchedule")),
                 tainted(node("n1"), ("dedicated", "gpu", "NoSchedule"))], policies=(DEFAULT_POLICY, other))
    body = pod("p", cpu="1")
    alternatives = {"binpack": c.policy("binpack").chain, "default": c.policy().chain}
    r = suggest(parse_pod(body), c.state, c.policy(), alternatives=alternatives, budget=1.0)
    use = [s for s in r.suggestions if s.kind == "UsePolicy"]
    assert len(use) == 1 and use[0].nodes_opened == 2
    assert use[0].change == ("schedule it with SchedulingPolicy binpack (label policy-scheduler.io/policy=binpack); "
                             "under default, TaintToleration rejects the most nodes (2)")
    assert use[0].patch == [{"op": "add", "path": "/metadata/labels/policy-scheduler.io~1policy", "value": "binpack"}]
    changed = apply_pod_patch(body, use[0].patch)
    assert changed["metadata"]["labels"] == {"policy-scheduler.io/policy": "binpack"}
    assert c.decide(changed, "binpack").node == use[0].node


def test_two_kinds_at_once_for_a_node_two_plugins_reject():
    c = Cluster([tainted(node("n0", cpu="2"), ("dedicated", "gpu", "NoSchedule")), node("n1", cpu="1")])
    r = run(c, pod("p", cpu="3"))
    both = [s for s in r.suggestions if s.kind == "LowerRequest+TolerateTaint"]
    assert [(s.change, s.node) for s in both] == [
        ("lower the cpu request to at most 2; and tolerate taint dedicated=gpu:NoSchedule", "n0")]
    assert both[0].patch == [
        {"op": "replace", "path": "/spec/containers/0/resources/requests/cpu", "value": "2"},
        {"op": "add", "path": "/spec/tolerations", "value": [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}]


def test_drop_a_required_pod_affinity_term_no_pod_matches():
    c = Cluster([node("n0", zone="a"), node("n1", zone="b")],
                [bound("web-0", "n0", labels={"app": "web"})])
    body = pod("p", cpu="100m")
    body["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE},
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME}]}}
    r = run(c, body)
    # both dropped opens both nodes: first by nodes opened
    assert r.best.kind == "DropPodAffinityTerm" and r.best.target == "Pod"
    assert r.best.change == "drop the pod's 2 required pod affinity terms" and r.best.nodes_opened == 2
    assert r.best.patch == [{"op": "remove", "path": "/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution"}]
    # term 1 (no db pod anywhere) alone: term 0 stays, so only zone a's n0, where web-0 runs
    one = [s for s in r.suggestions if s.patch == [
        {"op": "remove", "path": "/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/1"}]]
    assert len(one) == 1 and one[0].nodes_opened == 1 and one[0].node == "n0"
    assert one[0].change == ('drop required pod affinity term 1 (topologyKey kubernetes.io/hostname, '
                             'labelSelector {"matchLabels": {"app": "db"}})')
    # term 0 alone places nothing (the db term still matches no pod): never shown
    assert not any(s.patch[0]["path"].endswith("/0") for s in r.suggestions if s.kind == "DropPodAffinityTerm")


def test_drop_a_required_pod_anti_affinity_term_every_node_violates():
    c = Cluster([node("n0"), node("n1")], [bound("db-0", "n0", labels={"app": "db"}),
                                           bound("db-1", "n1", labels={"app": "db"})])
    body = pod("p", cpu="100m")
    body["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME}]}}
    r = run(c, body)
    assert r.best.kind == "DropPodAffinityTerm" and r.best.nodes_opened == 2
    assert r.best.change.startswith("drop required pod anti-affinity term 0 (topologyKey kubernetes.io/hostname")


def test_existing_pods_anti_affinity_gets_no_pod_affinity_change():
    guard = bound("guard", "n0", labels={"app": "guard"})
    guard["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}]}}
    c = Cluster([node("n0")], [guard])
    r = run(c, pod("p", cpu="100m", labels={"app": "web"}))
    assert all(s.kind != "DropPodAffinityTerm" for s in r.suggestions)
    assert r.blockers == {"InterPodAffinity": 1}
