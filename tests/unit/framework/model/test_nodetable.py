"""NodeTable: the snapshot's node rows, per-node aggregates (upstream NodeInfo Requested /
NonZeroRequested / UsedPorts / pod counts), assume/forget, orphan pods and cached label masks."""

from __future__ import annotations

import numpy as np
import pytest

from policy_scheduler.framework.model.nodetable import (BASE_RESOURCES, CPU, EPHEMERAL, MEMORY, PODS, REQUEST_COLS_KEPT,
                                                       NodeSpec, NodeTable)
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.model.taints import Taint

MI = 2**20
GI = 2**30


def node(name, labels=None, cpu="4", memory="8Gi", pods="110", taints=None, unschedulable=False,
         images=None, **extra):
    d = {"metadata": {"name": name, "labels": labels or {}},
         "spec": {"taints": taints or [], "unschedulable": unschedulable},
         "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, **extra}}}
    if images:
        d["status"]["images"] = images
    return d


def pod(name, requests=None, *, ns="default", ports=None, affinity=None, containers=1):
    ctrs = []
    for i in range(containers):
        ctr = {"name": f"c{i}", "image": "busybox"}
        if requests is not None:
            ctr["resources"] = {"requests": requests}
        if ports and i == 0:
            ctr["ports"] = ports
        ctrs.append(ctr)
    spec = {"containers": ctrs}
    if affinity:
        spec["affinity"] = affinity
    return parse_pod({"metadata": {"name": name, "namespace": ns}, "spec": spec})


def row_of(t, name):
    return t.index[name]


def check_consistent(t: NodeTable):
    """Every live row's bookkeeping agrees with its name and its pods."""
    assert t.n == len(t.names) == len(t.specs) == len(t.pods) == len(t.used_ports)
    for row, name in enumerate(t.names):
        assert t.index[name] == row
        assert t.specs[row].name == name
        pods = t.pods[row].values()
        assert t.requested[row, PODS] == len(t.pods[row])
        assert t.requested[row, CPU] == sum(p.requests.get("cpu", 0) for p in pods)
        assert t.requested[row, MEMORY] == sum(p.requests.get("memory", 0) for p in pods)
        assert t.nonzero[row, 0] == sum(p.nonzero_cpu for p in pods)
        assert t.nonzero[row, 1] == sum(p.nonzero_memory for p in pods)
        assert t.allocatable[row, CPU] == t.specs[row].allocatable.get("cpu", 0)
        assert t.unschedulable[row] == t.specs[row].unschedulable
        # every request counted once: in its column, or in ``loose`` when no node advertises it
        names = {r for p in pods for r in p.requests}
        for r in names:
            total = sum(p.requests.get(r, 0) for p in pods)
            if r in t.res_index:
                assert t.requested[row, t.res_index[r]] == total, (name, r)
            else:
                assert t.loose[row].get(r, 0) == total, (name, r)
        assert not set(t.loose[row]) & set(t.res_index) and all(t.loose[row].values())
    assert len(t.loose) == t.n
    assert set(t.index) == set(t.names)


# ---------------------------------------------------------------- nodes

def test_node_spec_from_dict():
    taints = [{"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "e", "effect": "NoExecute"}]
    images = [{"names": ["nginx:1.27", "docker.io/library/nginx:1.27"], "sizeBytes": 70 * MI}]
    s = NodeSpec.from_dict(node("n1", {"zone": "a"}, cpu="3500m", memory="1Gi", **{"nvidia.com/gpu": "2"},
                                taints=taints, unschedulable=True, images=images))
    assert s.name == "n1" and s.labels == {"zone": "a"} and s.unschedulable
    assert s.allocatable == {"cpu": 3500, "memory": GI, "pods": 110, "nvidia.com/gpu": 2}
    assert s.taints == (Taint("k", "v", "NoSchedule"), Taint("e", "", "NoExecute"))
    assert s.images == {"nginx:1.27": 70 * MI, "docker.io/library/nginx:1.27": 70 * MI}


def test_node_spec_falls_back_to_capacity_and_ignores_bad_quantities():
    s = NodeSpec.from_dict({"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "2", "memory": "oops"}}})
    assert s.allocatable == {"cpu": 2000, "memory": 0}
    # an exa quantity and a huge exponent neither crash nor overflow the int64 columns
    t = NodeTable()
    t.upsert_node({"metadata": {"name": "big"}, "status": {"allocatable": {"memory": "1E", "cpu": "1e40"}}})
    assert t.allocatable[0, MEMORY] == 10**18
    assert t.allocatable[0, CPU] == 2**63 - 1


def test_add_update_remove_nodes_keeps_rows_dense_and_index_consistent():
    t = NodeTable(capacity=2)  # forces growth
    for i in range(5):
        t.upsert_node(node(f"n{i}", cpu=str(i + 1)))
    assert t.n == len(t) == 5 and t.names == ["n0", "n1", "n2", "n3", "n4"]
    t.add_pod(pod("p4", {"cpu": "1"}), "n4")
    t.add_pod(pod("p1", {"cpu": "500m"}), "n1")
    check_consistent(t)
    # update keeps the row and replaces allocatable
    row = t.upsert_node(node("n2", cpu="16", unschedulable=True))
    assert row == 2 and t.allocatable[2, CPU] == 16000 and t.unschedulable[2]
    # swap-remove: the last row (n4, with its pod) moves into n1's row
    t.remove_node("n1")
    assert t.n == 4 and "n1" not in t.index
    assert t.names == ["n0", "n4", "n2", "n3"]
    assert t.index["n4"] == 1
    assert t.allocatable[1, CPU] == 5000 and t.requested[1, CPU] == 1000
    assert list(t.pods[1]) == ["default/p4"]
    check_consistent(t)
    t.remove_node("n3")  # removing the last row
    t.remove_node("missing")  # unknown: no-op
    assert t.names == ["n0", "n4", "n2"]
    check_consistent(t)
    # a new node reuses the freed row with clean aggregates
    t.upsert_node(node("n9"))
    assert t.index["n9"] == 3 and t.requested[3].sum() == 0 and t.nonzero[3].sum() == 0
    check_consistent(t)


def test_update_node_allocatable_can_drop_a_resource():
    t = NodeTable()
    t.upsert_node(node("n", **{"example.com/dongle": "3"}))
    col = t.res_index["example.com/dongle"]
    assert t.allocatable[0, col] == 3
    t.upsert_node(node("n"))
    assert t.allocatable[0, col] == 0


# ---------------------------------------------------------------- pods

def test_requested_nonzero_and_pod_counts():
    t = NodeTable()
    t.upsert_node(node("n"))
    t.add_pod(pod("a", {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "2Gi"}), "n")
    t.add_pod(pod("b"), "n")  # best effort: no true requests, scoring defaults only
    t.add_pod(pod("c", {"cpu": "0"}), "n")  # explicit 0 cpu, memory defaulted
    r = t.index["n"]
    assert t.requested[r, CPU] == 1000
    assert t.requested[r, MEMORY] == GI
    assert t.requested[r, EPHEMERAL] == 2 * GI
    assert t.requested[r, PODS] == 3
    # nonzero: a 1000 + b 100 + c 0 ; memory a 1Gi + b 200Mi + c 200Mi
    assert t.nonzero[r].tolist() == [1100, GI + 400 * MI]
    assert t.node_of("default/b") == "n" and t.pod("default/b").name == "b"
    assert sorted(p.name for _, p in t.iter_pods()) == ["a", "b", "c"]


def test_readding_a_pod_replaces_the_old_copy():
    t = NodeTable()
    t.upsert_node(node("n1"))
    t.upsert_node(node("n2"))
    t.add_pod(pod("a", {"cpu": "1"}), "n1")
    t.add_pod(pod("a", {"cpu": "2"}), "n1")  # updated pod
    assert t.requested[0, CPU] == 2000 and t.requested[0, PODS] == 1
    t.add_pod(pod("a", {"cpu": "2"}), "n2")  # moved
    assert t.requested[0].tolist()[:4] == [0, 0, 0, 0]
    assert t.requested[1, CPU] == 2000 and t.node_of("default/a") == "n2"
    check_consistent(t)


def test_assume_and_forget():
    t = NodeTable()
    t.upsert_node(node("n"))
    p = pod("a", {"cpu": "1", "memory": "1Gi"}, ports=[{"containerPort": 80, "hostPort": 80}])
    t.add_pod(p, "n", assumed=True)
    assert "default/a" in t.assumed
    assert t.requested[0, CPU] == 1000 and t.used_ports[0] == {("0.0.0.0", "TCP", 80): 1}
    # forget: everything the pod added is subtracted again
    assert t.remove_pod("default/a") is p
    assert "default/a" not in t.assumed and t.node_of("default/a") is None
    assert t.requested[0].sum() == 0 and t.nonzero[0].sum() == 0 and t.used_ports[0] == {}
    assert t.remove_pod("default/a") is None  # twice: no-op
    # assume then confirm: stays accounted, no longer assumed
    t.add_pod(p, "n", assumed=True)
    t.confirm("default/a")
    assert "default/a" not in t.assumed and t.requested[0, CPU] == 1000
    # the bound copy arriving from the watch replaces the assumed one without double counting
    t.add_pod(p, "n")
    assert t.requested[0, CPU] == 1000 and t.requested[0, PODS] == 1
    check_consistent(t)


def test_used_ports_are_reference_counted():
    t = NodeTable()
    t.upsert_node(node("n"))
    ports = [{"containerPort": 53, "hostPort": 53, "protocol": "UDP"}, {"containerPort": 80, "hostPort": 8080}]
    t.add_pod(pod("a", ports=ports), "n")
    t.add_pod(pod("b", ports=ports[:1]), "n")
    assert t.used_ports[0] == {("0.0.0.0", "UDP", 53): 2, ("0.0.0.0", "TCP", 8080): 1}
    t.remove_pod("default/a")
    assert t.used_ports[0] == {("0.0.0.0", "UDP", 53): 1}
    t.remove_pod("default/b")
    assert t.used_ports[0] == {}


def test_pods_with_affinity_and_their_term_index():
    t = NodeTable()
    t.upsert_node(node("n", labels={"zone": "a"}))  # a node without the term's key would index nothing
    term = {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "x"}}}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    t.add_pod(pod("anti", affinity=anti), "n")
    t.add_pod(pod("pref", affinity={"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": term}]}}), "n")
    t.add_pod(pod("plain"), "n")
    assert set(t.pods_with_affinity[0]) == {"default/anti", "default/pref"}
    assert len(t.required_anti_affinity_terms) == 1 and len(t.preferred_affinity_terms) == 1
    t.remove_pod("default/anti")
    assert set(t.pods_with_affinity[0]) == {"default/pref"}
    assert not t.required_anti_affinity_terms


def test_pods_on_unknown_node_are_kept_and_applied_when_the_node_arrives():
    t = NodeTable()
    t.upsert_node(node("other"))
    t.add_pod(pod("early", {"cpu": "1", "nvidia.com/gpu": "1"}), "late")
    assert t.node_of("default/early") == "late" and t.pod("default/early").name == "early"
    assert t.requested[0].sum() == 0
    row = t.upsert_node(node("late", **{"nvidia.com/gpu": "4"}))
    gpu = t.res_index["nvidia.com/gpu"]
    assert t.requested[row, CPU] == 1000 and t.requested[row, gpu] == 1 and t.requested[row, PODS] == 1
    assert "default/early" in t.pods[row]
    check_consistent(t)


def test_orphan_pod_can_be_removed_before_its_node_arrives():
    t = NodeTable()
    t.add_pod(pod("early", {"cpu": "1"}), "late")
    assert t.remove_pod("default/early").name == "early"
    row = t.upsert_node(node("late"))
    assert t.requested[row, PODS] == 0 and t.pods[row] == {}


def test_remove_node_keeps_its_pods_as_orphans():
    t = NodeTable()
    t.upsert_node(node("a"))
    t.upsert_node(node("b"))
    t.add_pod(pod("p", {"cpu": "2"}), "a")
    t.remove_node("a")
    assert t.node_of("default/p") == "a" and t.pod("default/p").name == "p"
    assert t.requested[t.index["b"]].sum() == 0
    # the node comes back: its pods count again
    row = t.upsert_node(node("a"))
    assert t.requested[row, CPU] == 2000 and t.requested[row, PODS] == 1
    check_consistent(t)
    # or the pod is deleted while its node is gone
    t.remove_node("a")
    assert t.remove_pod("default/p") is not None
    row = t.upsert_node(node("a"))
    assert t.requested[row, PODS] == 0


def test_a_resource_gets_a_column_when_a_node_advertises_it_not_when_a_pod_asks_for_it():
    t = NodeTable()
    t.upsert_node(node("n1"))
    t.upsert_node(node("n0"))
    base = len(t.resources)
    t.add_pod(pod("g", {"example.com/fpga": "2", "hugepages-2Mi": "4Mi"}), "n1")
    t.add_pod(pod("h", {"example.com/fpga": "1"}), "n1")
    assert len(t.resources) == base and t.allocatable.shape[1] == t.requested.shape[1] == base
    assert t.loose[0] == {"example.com/fpga": 3, "hugepages-2Mi": 4 * MI} and t.loose[1] == {}
    check_consistent(t)
    # a node advertises it: the column, with what the pods on each node asked for
    t.upsert_node(node("n2", **{"example.com/fpga": "8"}))
    col = t.res_index["example.com/fpga"]
    assert t.allocatable[:3, col].tolist() == [0, 0, 8] and t.requested[:3, col].tolist() == [3, 0, 0]
    assert t.loose[0] == {"hugepages-2Mi": 4 * MI}
    check_consistent(t)
    t.remove_pod("default/g")
    assert t.requested[0, col] == 1 and t.loose[0] == {}
    check_consistent(t)
    # request_vector aligns the pod's requests with the columns; pods column = 1; a resource no
    # node advertises is not in it, and requests_unadvertised says so
    p = pod("v", {"cpu": "1", "example.com/new": "3", "example.com/fpga": "2"})
    v = t.request_vector(p)
    assert len(v) == len(t.resources) and "example.com/new" not in t.res_index
    assert v[CPU] == 1000 and v[PODS] == 1 and v[col] == 2 and t.requests_unadvertised(p)
    assert not t.requests_unadvertised(pod("w", {"cpu": "1", "example.com/fpga": "2"}))


def test_made_up_resource_names_in_pods_cost_no_column():
    """A tenant's pod naming thousands of resources no node has (bound by hand, or pending)
    widens no array: a column would cost every node two cells per name."""
    t = NodeTable()
    for i in range(100):
        t.upsert_node(node(f"n{i}"))
    shape = t.requested.shape
    many = {f"x{i}.example.com/r": "1" for i in range(5000)}
    t.add_pod(pod("hostile", {"cpu": "1", **many}), "n7")
    t.add_pods([(pod(f"h{i}", {f"y{i}.example.com/r": "1"}), f"n{i}") for i in range(50)])
    assert t.requested.shape == shape and len(t.resources) == len(BASE_RESOURCES)
    assert len(t.loose[t.index["n7"]]) == 5001 and len(t._request_cols) <= REQUEST_COLS_KEPT
    check_consistent(t)
    t.remove_pod("default/hostile")
    t.remove_pods([f"default/h{i}" for i in range(50)])
    assert all(not d for d in t.loose)
    check_consistent(t)


def test_a_resource_per_node_grows_the_columns_by_doubling_and_keeps_every_value():
    """scheduler_perf's ExtendedResource: 1,000 nodes each with a resource of its own. The columns
    are views of wider arrays, made anew only when full (a handful of times), not one copy of
    both arrays per new column (4.5 s at 1,000 nodes)."""
    t = NodeTable()
    rooms = set()
    for i in range(300):
        t.upsert_node(node(f"n{i}", **{f"foo.com/bar-{i}": str(i + 1)}))
        t.add_pod(pod(f"p{i}", {f"foo.com/bar-{i}": "1", "cpu": "100m"}), f"n{i}")
        rooms.add(id(t._room[0]) if t._room is not None else None)
        assert t.allocatable.shape == t.requested.shape == (t.allocatable.shape[0], len(t.resources))
    assert len(rooms) <= 16  # rows double 3 times and columns 9: nowhere near one per node
    for i in range(300):
        col = t.res_index[f"foo.com/bar-{i}"]
        assert t.allocatable[i, col] == i + 1 and t.requested[i, col] == 1
        assert t.allocatable[:t.n, col].sum() == i + 1 and t.requested[:t.n, col].sum() == 1
    assert (t.requested[:t.n, CPU] == 100).all()
    t.remove_node("n0")  # the last row moves into row 0, its values with it
    assert t.allocatable[0, t.res_index["foo.com/bar-299"]] == 300


def test_an_overlay_adds_columns_without_touching_the_live_table():
    from policy_scheduler.remedies.probe import overlay
    t = NodeTable()
    for i in range(4):
        t.upsert_node(node(f"n{i}", **{f"foo.com/bar-{i}": "1"}))
    live = (t.allocatable.copy(), t.requested.copy(), list(t.resources))
    o = overlay(t)
    o.upsert_node(node("n0", **{"foo.com/baz": "7"}))
    o.add_pod(pod("p", {"foo.com/qux": "2", "foo.com/bar-2": "1"}), "n1")
    t.upsert_node(node("n1", **{"foo.com/live": "5"}))  # the live table's own new column
    assert o.allocatable[0, o.res_index["foo.com/baz"]] == 7 and o.requested[1, o.res_index["foo.com/bar-2"]] == 1
    assert o.loose[1] == {"foo.com/qux": 2} and t.loose[1] == {} and "foo.com/qux" not in o.res_index
    assert t.resources == live[2] + ["foo.com/live"] and "foo.com/live" not in o.res_index
    k = len(live[2])
    assert (t.requested[:, :k] == live[1]).all() and (t.allocatable[[0, 2, 3], :k] == live[0][[0, 2, 3]]).all()
    assert t.allocatable[1, t.res_index["foo.com/live"]] == 5 and t.requested[:, t.res_index["foo.com/live"]].sum() == 0


def test_image_node_counts():
    t = NodeTable()
    img = [{"names": ["nginx:1.27"], "sizeBytes": 10}]
    t.upsert_node(node("a", images=img))
    t.upsert_node(node("b", images=img + [{"names": ["redis:7"], "sizeBytes": 5}]))
    assert t.image_nodes == {"nginx:1.27": 2, "redis:7": 1}
    t.upsert_node(node("b", images=[{"names": ["redis:7"], "sizeBytes": 5}]))
    assert t.image_nodes == {"nginx:1.27": 1, "redis:7": 1}
    t.remove_node("a")
    assert t.image_nodes == {"redis:7": 1}


# ---------------------------------------------------------------- label masks

def test_label_mask_and_column():
    t = NodeTable()
    t.upsert_node(node("a", {"zone": "z1", "disk": "ssd"}))
    t.upsert_node(node("b", {"zone": "z2"}))
    t.upsert_node(node("c", {}))
    assert t.label_mask("zone").tolist() == [True, True, False]
    assert t.label_mask("zone", "z2").tolist() == [False, True, False]
    assert t.label_mask("zone", "z9").tolist() == [False, False, False]
    assert t.label_mask("missing").tolist() == [False, False, False]
    assert t.label_column("zone") == ["z1", "z2", None]
    assert t.label_values("zone") == {"z1": {"a"}, "z2": {"b"}}


def test_label_caches_are_reused_and_invalidated_on_label_change():
    t = NodeTable()
    t.upsert_node(node("a", {"zone": "z1"}))
    t.upsert_node(node("b", {"zone": "z2"}))
    m = t.label_mask("zone", "z1")
    assert t.label_mask("zone", "z1") is m  # cached
    col = t.label_column("zone")
    assert t.label_column("zone") is col
    calls = []
    built = t.cached(("test", "k"), lambda: calls.append(1) or np.array([1, 2]))
    assert t.cached(("test", "k"), lambda: calls.append(1) or None) is built and len(calls) == 1
    # a change that does not touch labels/taints keeps the caches
    t.upsert_node(node("a", {"zone": "z1"}, cpu="64"))
    t.add_pod(pod("p"), "a")
    assert t.label_mask("zone", "z1") is m
    v = t.node_version
    # relabel: caches rebuilt
    t.upsert_node(node("a", {"zone": "z2"}))
    assert t.node_version > v
    assert t.label_mask("zone", "z1").tolist() == [False, False]
    assert t.label_mask("zone", "z2").tolist() == [True, True]
    assert t.label_column("zone") == ["z2", "z2"]
    assert t.cached(("test", "k"), lambda: "rebuilt") == "rebuilt"


@pytest.mark.parametrize("change", ["taint", "add", "remove"])
def test_label_caches_invalidated_on_taint_and_node_set_changes(change):
    t = NodeTable()
    t.upsert_node(node("a", {"zone": "z1"}))
    t.upsert_node(node("b", {"zone": "z1"}))
    t.cached(("test", "k"), lambda: "old")
    assert t.label_mask("zone").tolist() == [True, True]
    if change == "taint":
        t.upsert_node(node("a", {"zone": "z1"}, taints=[{"key": "k", "effect": "NoSchedule"}]))
        assert t.label_mask("zone").tolist() == [True, True]
    elif change == "add":
        t.upsert_node(node("c", {"zone": "z1"}))
        assert t.label_mask("zone").tolist() == [True, True, True]
    else:
        t.remove_node("a")
        assert t.label_mask("zone").tolist() == [True]
        assert t.label_column("zone") == ["z1"]
    assert t.cached(("test", "k"), lambda: "new") == "new"


def test_label_mask_follows_swap_remove():
    t = NodeTable()
    for name, z in (("a", "z1"), ("b", "z2"), ("c", "z3")):
        t.upsert_node(node(name, {"zone": z}))
    t.remove_node("a")  # c moves into row 0
    assert t.names == ["c", "b"]
    assert t.label_mask("zone", "z3").tolist() == [True, False]
    assert t.label_column("zone") == ["z3", "z2"]


# ---------------------------------------------------------------------- (anti-)affinity term index
def anti_term(key, app):
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def anti_pod(name, app, key="zone", ns="default"):
    return pod(name, ns=ns, affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        anti_term(key, app)]}})


def term_index(t: NodeTable):
    """Every kind of the term index as plain dicts, for comparison."""
    return [{k: dict(v) for k, v in index.items()}
            for index in (t.required_affinity_terms, t.required_anti_affinity_terms,
                          t.preferred_affinity_terms, t.preferred_anti_affinity_terms)]


def brute_term_index(t: NodeTable):
    """The term index recounted from the rows' pods: one occurrence per (pod, term) on a node
    having the term's topology key."""
    out = [{}, {}, {}, {}]
    for row in range(t.n):
        labels = t.specs[row].labels
        for p in t.pods[row].values():
            for index, terms in zip(out, (p.required_affinity, p.required_anti_affinity,
                                          p.preferred_affinity, p.preferred_anti_affinity)):
                for x in terms:
                    key = getattr(x, "term", x).topology_key
                    if key in labels:
                        pairs = index.setdefault(x, {})
                        pairs[(key, labels[key])] = pairs.get((key, labels[key]), 0) + 1
    return out


def test_term_index_counts_each_pod_term_on_nodes_with_the_key():
    t = NodeTable()
    t.upsert_node(node("a", {"zone": "z1"}))
    t.upsert_node(node("b", {"zone": "z1"}))
    t.upsert_node(node("c"))  # no zone label: its pods' zone terms are in no domain
    for name, node_name in (("p1", "a"), ("p2", "b"), ("p3", "c")):
        t.add_pod(anti_pod(name, "web"), node_name)
    term = t.pods[row_of(t, "a")]["default/p1"].required_anti_affinity[0]
    assert t.required_anti_affinity_terms == {term: {("zone", "z1"): 2}}
    t.remove_pod("default/p1")
    assert t.required_anti_affinity_terms == {term: {("zone", "z1"): 1}}
    t.remove_pod("default/p2")
    t.remove_pod("default/p3")
    assert t.required_anti_affinity_terms == {}


def test_term_index_follows_node_label_changes_and_node_removal():
    t = NodeTable()
    t.upsert_node(node("a", {"zone": "z1"}))
    t.add_pod(anti_pod("p1", "web"), "a")
    term = t.pod("default/p1").required_anti_affinity[0]
    t.upsert_node(node("a", {"zone": "z2"}))
    assert t.required_anti_affinity_terms == {term: {("zone", "z2"): 1}}
    t.upsert_node(node("a", {}))
    assert t.required_anti_affinity_terms == {}
    t.upsert_node(node("a", {"zone": "z3"}))
    assert t.required_anti_affinity_terms == {term: {("zone", "z3"): 1}}
    t.remove_node("a")  # the pod waits as an orphan, in no domain
    assert t.required_anti_affinity_terms == {}
    t.upsert_node(node("a", {"zone": "z4"}))
    assert t.required_anti_affinity_terms == {term: {("zone", "z4"): 1}}


def test_term_index_keeps_preferred_terms_by_weight():
    t = NodeTable()
    t.upsert_node(node("a", {"zone": "z1"}))
    pref = {"podAffinityTerm": anti_term("zone", "web")}
    p = pod("p", affinity={"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        dict(pref, weight=5)]}, "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        dict(pref, weight=5), dict(pref, weight=7)]}})
    t.add_pod(p, "a")
    assert t.preferred_affinity_terms == {p.preferred_affinity[0]: {("zone", "z1"): 1}}
    assert t.preferred_anti_affinity_terms == {w: {("zone", "z1"): 1} for w in p.preferred_anti_affinity}
    assert t.required_anti_affinity_terms == {}


def test_term_index_equals_a_recount_after_random_changes():
    import random

    rng = random.Random(3)
    t = NodeTable()
    kinds = [
        lambda: {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            anti_term(rng.choice(["zone", "rack"]), rng.choice(["web", "db"]))]}},
        lambda: {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            anti_term("zone", "web"), anti_term("rack", rng.choice(["web", "db"]))]}},
        lambda: {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": rng.choice([1, 2]), "podAffinityTerm": anti_term("zone", "db")}]},
                 "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                     {"weight": 3, "podAffinityTerm": anti_term("rack", "web")}]}},
        lambda: None,
    ]

    def labels():
        return {k: rng.choice(["1", "2"]) for k in ("zone", "rack") if rng.random() < 0.8}

    for step in range(800):
        op = rng.random()
        names = [f"n{i}" for i in range(6)]
        if op < 0.45:
            t.add_pod(pod(f"p{rng.randrange(60)}", ns=rng.choice(["default", "other"]),
                          affinity=rng.choice(kinds)()), rng.choice(names))
        elif op < 0.65:
            t.remove_pod(f"{rng.choice(['default', 'other'])}/p{rng.randrange(60)}")
        elif op < 0.9:
            t.upsert_node(node(rng.choice(names), labels()))
        else:
            t.remove_node(rng.choice(names))
        assert term_index(t) == brute_term_index(t), step


def table_state(t: NodeTable):
    """What a table holds, comparable between two tables built the same way."""
    cols = sorted(t.res_index)
    return {"requested": {(name, c): int(t.requested[t.index[name], t.res_index[c]]) for name in t.names for c in cols},
            "nonzero": {name: tuple(int(v) for v in t.nonzero[t.index[name]]) for name in t.names},
            "pods": {name: list(t.pods[t.index[name]]) for name in t.names},
            "ports": {name: dict(t.used_ports[t.index[name]]) for name in t.names},
            "pod_node": dict(t.pod_node), "terms": term_index(t),
            "affinity": {name: list(t.pods_with_affinity[t.index[name]]) for name in t.names},
            "loose": {name: dict(t.loose[t.index[name]]) for name in t.names}}


def test_add_pods_and_remove_pods_count_what_add_pod_and_remove_pod_count():
    """The bulk path (one numpy call per array, for the nominated pods a cycle counts) leaves the
    table as the pod-at-a-time path does: counts, a resource first seen in the batch, host
    ports, affinity terms; pods already in the table, repeated or on unknown nodes are skipped."""
    def build():
        t = NodeTable()
        for i in range(4):
            t.upsert_node(node(f"n{i}", {"zone": f"z{i % 2}"}, **({"example.com/fpga": "4"} if i == 3 else {})))
        t.add_pod(pod("bound", {"cpu": "1"}), "n0")
        return t

    batch = []
    for i in range(20):
        req = {"cpu": f"{100 + i}m", "memory": f"{i + 1}Mi"}
        if i % 5 == 0:
            req["example.com/gpu"] = "1"  # no node advertises it: no column
        if i % 2 == 0:
            req["example.com/fpga"] = "1"  # n3 advertises it
        batch.append((pod(f"p{i}", req, ports=[{"containerPort": 80, "hostPort": 8000 + i % 2}] if i % 3 == 0 else None,
                          affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                              anti_term("zone", "web")]}} if i % 4 == 0 else None), f"n{i % 4}"))
    batch += [(batch[0][0], "n1"), (pod("bound", {"cpu": "2"}), "n1"), (pod("nowhere", {"cpu": "1"}), "gone")]
    bulk, one = build(), build()
    before = table_state(one)
    v0 = bulk.version
    added = bulk.add_pods(batch)
    assert added == [f"default/p{i}" for i in range(20)]
    for p, n in batch[:20]:
        one.add_pod(p, n)
    assert bulk.version > v0
    assert table_state(bulk) == table_state(one)
    assert [d.get("example.com/gpu", 0) for d in bulk.loose] == [1, 1, 1, 1] and "example.com/gpu" not in bulk.res_index
    assert bulk.requested[:bulk.n, bulk.res_index["example.com/fpga"]].tolist() == [5, 0, 5, 0]
    check_consistent(bulk)
    v1 = bulk.version
    bulk.remove_pods(added + ["default/p0", "default/unknown"])
    for key in added:
        one.remove_pod(key)
    assert bulk.version > v1
    assert table_state(bulk) == table_state(one)
    after = table_state(bulk)
    assert after["requested"] == before["requested"] and after["loose"] == before["loose"]
    assert after["pods"] == before["pods"] and after["terms"] == before["terms"] and after["ports"] == before["ports"]
    check_consistent(bulk)


def test_add_pods_below_the_bulk_size_adds_them_one_by_one():
    t = NodeTable()
    t.upsert_node(node("a"))
    assert t.add_pods([(pod("p", {"cpu": "1"}), "a"), (pod("q", {"cpu": "1"}), "b")]) == ["default/p"]
    assert t.requested[0, CPU] == 1000
    t.remove_pods(["default/p"])
    assert t.requested[0, CPU] == 0 and t.pod_node == {}
