"""The nominator: which nominated pods count while a pod is scheduled, on every node or on one."""

from __future__ import annotations

from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.queue.nominator import Nominator


def pod(name, priority=0):
    return parse_pod({"metadata": {"name": name, "namespace": "ns"},
                      "spec": {"priority": priority, "containers": [{"name": "c", "image": "i"}]}})


def keys(pairs):
    return [(p.key, node) for p, node in pairs]


def test_pods_for_counts_equal_or_higher_priority_others_on_every_node_or_one():
    n = Nominator()
    a, b, c, low = pod("a", 10), pod("b", 10), pod("c", 20), pod("low", 1)
    n.add(a, "n1")
    n.add(b, "n2")
    n.add(c, "n1")
    n.add(low, "n1")
    assert keys(n.pods_for(a)) == [("ns/b", "n2"), ("ns/c", "n1")]
    assert keys(n.pods_for(a, "n1")) == [("ns/c", "n1")]
    assert keys(n.pods_for(pod("x", 0), "n1")) == [("ns/a", "n1"), ("ns/c", "n1"), ("ns/low", "n1")]
    assert keys(n.pods_for(a, "n3")) == []
    assert [p.key for p in n.nominated_pods("n1")] == ["ns/a", "ns/c", "ns/low"]


def test_a_new_nomination_moves_the_pod_and_removal_forgets_it_on_its_node():
    n = Nominator()
    a, b = pod("a", 10), pod("b", 10)
    n.add(a, "n1")
    n.add(b, "n1")
    n.add(a, "n2")  # nominated again, elsewhere
    assert n.node_of("ns/a") == "n2" and len(n) == 2
    assert [p.key for p in n.nominated_pods("n1")] == ["ns/b"]
    assert keys(n.pods_for(pod("x"), "n2")) == [("ns/a", "n2")]
    assert keys(n.pods_for(pod("x"))) == [("ns/a", "n2"), ("ns/b", "n1")]  # in first-nominated order
    assert n.remove("ns/a") and not n.remove("ns/a")
    assert n.nominated_pods("n2") == [] and keys(n.pods_for(pod("x"), "n2")) == []
    assert n.remove("ns/b") and not n
