"""Builders for the remedies tests: a cluster (a what-if World over a snapshot: the operator's
ClusterState and PolicyStore, the real plugins and policy chains), a pod's attempt, and a
suggestion APPLIED the way a user would apply it (the pod re-created from its patched object,
or the cluster changed through the state's own ``apply_*`` methods), then the pod's scheduling
cycle run again."""

from __future__ import annotations

import copy

from policy_scheduler.framework.cycle.schedule import schedule_one
from policy_scheduler.framework.interface import CycleState
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.remedies import CLUSTER, POD, apply_pod_patch
from policy_scheduler.whatif.world import World

from support.whatif import DEFAULT, snap

NO_PREEMPTION = copy.deepcopy(DEFAULT)
NO_PREEMPTION["metadata"] = {"name": "no-preemption"}
NO_PREEMPTION["spec"]["plugins"] = [p for p in DEFAULT["spec"]["plugins"] if p["name"] != "DefaultPreemption"]


class Cluster:
    """Nodes and bound pods (bodies kept to apply changes to), the state and its policies."""

    def __init__(self, nodes, pods=(), policies=(DEFAULT, NO_PREEMPTION), **extra) -> None:
        self.nodes = {n["metadata"]["name"]: copy.deepcopy(n) for n in nodes}
        self.pods = {f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}": copy.deepcopy(p)
                     for p in pods}
        self.policies, self.extra = policies, extra
        self.world = World(snap(list(self.nodes.values()), list(self.pods.values()), policies=policies, **extra))
        self.world.table()
        self.state = self.world.state

    def policy(self, name="default"):
        return self.world.usable_policy(name)

    def decide(self, pod_body, policy="default"):
        """The pod's cycle now (no PostFilter: nothing changes), the round-robin start kept."""
        chain = self.policy(policy).chain
        start = chain.next_start_node_index
        try:
            return schedule_one(chain, parse_pod(pod_body), self.state.table, None, CycleState(), post_filter=False)
        finally:
            chain.next_start_node_index = start

    def changed(self, suggestion) -> "Cluster":
        """A new cluster with a Cluster suggestion's operations applied through the state."""
        nodes, pods = copy.deepcopy(self.nodes), copy.deepcopy(self.pods)
        extra = copy.deepcopy(self.extra)
        for op in suggestion.patch:
            if op["kind"] == "Node":
                body = nodes[op["name"]]
                nodes[op["name"]] = apply_pod_patch(body, [{k: v for k, v in op.items() if k in ("op", "path", "value")}])
            elif op["kind"] == "Pod" and op["op"] == "delete":
                del pods[f"{op['namespace']}/{op['name']}"]
            elif op["kind"] == "DeviceClass" and op["op"] == "create":
                assert op["value"]["metadata"]["name"] == op["name"]
                assert all(c["metadata"]["name"] != op["name"] for c in extra.get("deviceClasses", ()))
                extra.setdefault("deviceClasses", []).append(dict(op["value"], metadata=dict(
                    op["value"]["metadata"], resourceVersion="1")))
            else:
                raise AssertionError(f"unknown operation {op}")
        return Cluster(list(nodes.values()), list(pods.values()), self.policies, **extra)


def apply(cluster: Cluster, pod_body, suggestion, policy="default"):
    """The decision for the pod after applying ``suggestion`` (to the pod or to the cluster)."""
    if suggestion.target == POD:
        return cluster.decide(apply_pod_patch(pod_body, suggestion.patch), policy)
    assert suggestion.target == CLUSTER
    return cluster.changed(suggestion).decide(pod_body, policy)


def state_fingerprint(state):
    """What a read-only search must leave as it was."""
    t = state.table
    return (t.version, t.node_version, t.n, t.requested[: t.n].tobytes(), t.unschedulable[: t.n].tobytes(),
            dict(t.pod_node), tuple(s.taints for s in t.specs), dict(t.pvc_refs), [dict(u) for u in t.used_ports],
            [dict(p) for p in t.pods], t.resources[:])
