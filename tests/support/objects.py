"""API bodies of a node and of a pending pod of policy ``policy`` (namespace ns), as an Engine on
the in-memory client receives them from its informers."""

from __future__ import annotations


def node(name):
    alloc = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name, policy="p", cpu="1"):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "labels": {"policy-scheduler.io/policy": policy}},
            "spec": {"schedulerName": "policy-scheduler",
                     "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Pending"}}
