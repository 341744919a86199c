"""NodeTree order and heap tie-breaks, against upstream's node_tree.go and Go's container/heap."""

from __future__ import annotations

import random

import numpy as np
import pytest

from policy_scheduler.policy.chain import build_chain
from policy_scheduler.framework.cycle.schedule import schedule_one
from policy_scheduler.framework.model.nodetable import NodeSpec, NodeTable
from policy_scheduler.framework.model.nodetree import NodeTree, heap_root_among, zone_key
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.plugins import default_registry

ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"


def go_heap_root(totals: list[int]) -> int:
    """Go's heap.Init then Pop on upstream's nodeScoreHeap (Less: greater total; no Randomizer),
    written out step by step: the index of the element Pop returns."""
    h = list(enumerate(totals))

    def less(i, j):
        return h[i][1] > h[j][1]

    def down(i0, n):
        i = i0
        while True:
            j1 = 2 * i + 1
            if j1 >= n or j1 < 0:
                break
            j = j1
            if j1 + 1 < n and less(j1 + 1, j1):
                j = j1 + 1
            if not less(j, i):
                break
            h[i], h[j] = h[j], h[i]
            i = j

    n = len(h)
    for i in range(n // 2 - 1, -1, -1):
        down(i, n)
    return h[0][0]


@pytest.mark.parametrize("seed", range(120))
def test_heap_root_as_go_heap(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 300)
    totals = [rng.choice((rng.randint(0, 5), 5, 5)) for _ in range(n)]
    best = np.flatnonzero(np.array(totals) == max(totals))
    assert heap_root_among(best) == go_heap_root(totals)


def test_heap_root_is_not_simply_the_first():
    totals = [1, 2, 10, 10]  # heap.Init sifts index 3 up through index 1, which is the root's left child
    assert go_heap_root(totals) == 3
    assert heap_root_among(np.array([2, 3])) == 3


def test_zone_key_as_upstream():
    assert zone_key({}) == ""
    assert zone_key({ZONE: "a"}) == ":\x00:a"
    assert zone_key({REGION: "r", ZONE: "a"}) == "r:\x00:a"
    assert zone_key({"failure-domain.beta.kubernetes.io/zone": "b", ZONE: "a"}) == ":\x00:b"


def test_tree_order_round_robin_over_zones():
    t = NodeTree()
    for name, zone in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a"), ("c1", "c"), ("b2", "b")):
        t.add(name, {ZONE: zone})
    assert t.order() == ["a1", "b1", "c1", "a2", "b2", "a3"]
    t.remove("c1")  # the zone goes with its last node
    t.add("c2", {ZONE: "c"})  # and comes back last
    t.update("a1", {ZONE: "b"})  # moves to the end of its new zone
    assert t.order() == ["a2", "b1", "c2", "a3", "b2", "a1"]
    assert len(t) == 6


def test_table_rows_follow_the_tree_after_swap_removal():
    t = NodeTable()
    for i, zone in enumerate("ababa"):
        t.upsert_node(NodeSpec(f"n{i}", {ZONE: zone}, allocatable={"cpu": 1000, "pods": 10}))
    t.remove_node("n0")  # the last row moves into row 0
    rows, pos = t.tree_rows()
    assert [t.names[r] for r in rows] == ["n2", "n1", "n4", "n3"]
    assert all(rows[pos[r]] == r for r in range(t.n))


def _pod(name, cpu):
    return parse_pod({"metadata": {"name": name, "namespace": "d"},
                      "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}})


def test_equal_scores_go_where_kube_scheduler_puts_them():
    """Four nodes in two zones, added z1-0, z1-1, z2-0, z2-1; z1-0 and z2-1 carry a pod. upstream
    lists [z1-0, z2-0, z1-1, z2-1]; z2-0 and z1-1 tie on the best score, and the heap's root is
    z2-0 (the left child): every time, whatever the seed, though z1-1 has the lower row."""
    t = NodeTable()
    for name, zone in (("z1-0", "z1"), ("z1-1", "z1"), ("z2-0", "z2"), ("z2-1", "z2")):
        t.upsert_node(NodeSpec(name, {ZONE: zone}, allocatable={"cpu": 4000, "memory": 1 << 30, "pods": 10}))
    t.add_pod(_pod("a", "2"), "z1-0")
    t.add_pod(_pod("b", "2"), "z2-1")
    chain = build_chain({"plugins": [{"name": "NodeResourcesFit"}]}, default_registry())
    picks = {schedule_one(chain, _pod("p", "1"), t, random.Random(s)).node for s in range(10)}
    assert picks == {"z2-0"}
