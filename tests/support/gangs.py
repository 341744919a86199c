"""Native pod groups (scheduling.k8s.io/v1alpha3 PodGroup) and an Engine on the in-memory client
that schedules them: shared by the GangScheduling plugin's tests and group preemption's."""

from __future__ import annotations

import asyncio

from policy_scheduler.cluster.engine import Engine
from policy_scheduler.serve import build_engine
from support.fakeclient import FakeClient

NS = "ns"


def npg(name, min_count=None, topology=None, created="2026-01-01T00:00:00Z", priority=None, mode=None,
        policy=None):
    spec = {"schedulingPolicy": {"gang": {"minCount": min_count}} if min_count else {"basic": {}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    if priority is not None:
        spec["priority"] = priority
    if mode:
        spec["disruptionMode"] = {mode: {}}
    if policy:
        spec["preemptionPolicy"] = policy
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-pg-{name}", "creationTimestamp": created},
            "spec": spec}


def pod_body(name, group=None, cpu="1500m", node="", scheduler="policy-scheduler", gates=(), priority=None,
             labels=None, policy=None):
    spec = {"schedulerName": scheduler, "nodeName": node,
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}
    if priority is not None:
        spec["priority"] = priority
    if policy:
        spec["preemptionPolicy"] = policy
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": dict(labels or {})},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def node(name, cpu="4", rack=None, **labels):
    alloc = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    lab = {"kubernetes.io/hostname": name, **({"rack": rack} if rack else {}), **labels}
    return {"metadata": {"name": name, "labels": lab}, "status": {"allocatable": alloc, "capacity": alloc}}


GANG = [{"name": "NodeResourcesFit"}, {"name": "InterPodAffinity"}, {"name": "DefaultPreemption"},
        {"name": "GangScheduling"}]


def engine(nodes, plugins=None) -> Engine:
    e = build_engine(FakeClient())
    e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": plugins or GANG}})
    for n in nodes:
        e.on_node("ADDED", n)
    return e


async def drain(e: Engine, rounds: int = 120) -> None:
    """The scheduling loop, by hand: pop, decide, let the binding tasks run."""
    for _ in range(rounds):
        qpi = e.queue.pop()
        if qpi is not None:
            e.schedule(qpi)
        for _ in range(4):
            await asyncio.sleep(0)


def deletes(e: Engine) -> list[str]:
    return sorted(c.path.split("/")[-1] for c in e.client.calls_of("delete"))


def cond_message(e: Engine, group: str = "ns/g") -> str:
    return e.state.native_pod_groups.status(group)["conditions"][0]["message"]
