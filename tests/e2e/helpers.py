"""Helpers shared by e2e tests: object builders and polling."""

from __future__ import annotations

import copy
import json
import time
import urllib.request
from pathlib import Path
from typing import Callable, TypeVar

import yaml

T = TypeVar("T")
KWOK = {"kwok.x-k8s.io/node": "fake"}


def wait_for(fn: Callable[[], T], timeout: float = 30.0, interval: float = 0.2, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def node(name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110", labels: dict | None = None,
         taints: list | None = None, kwok: bool = False) -> dict:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                     "annotations": dict(KWOK) if kwok else {}},
        "spec": {"taints": taints or []},
        # kwok's node-initialize stage fills in conditions for the nodes it manages
        "status": {"capacity": alloc, "allocatable": alloc, **({} if kwok else {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "plain Node object"}]})},
    }


def pod(name: str, namespace: str, cpu: str | None = "100m", memory: str | None = "64Mi",
        scheduler: str = "policy-scheduler", labels: dict | None = None, **spec) -> dict:
    req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"schedulerName": scheduler,
                 "containers": [{"name": "c", "image": "registry.local/app:1", "resources": {"requests": req}}],
                 **spec},
    }


GROUP, VERSION, PLURAL = "policy-scheduler.io", "v1alpha1", "schedulingpolicies"


# leader election timings for tests that restart an operator after SIGKILL (the new process waits
# for the old one's lease to expire): 3 s instead of kube-scheduler's 15 s
FAST_ELECTION = ["--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
                 "--leader-elect-retry-period", "500ms"]
# for two replicas that both run through a test: a killed leader is replaced within seconds, and a
# leader busy with a burst on a loaded 2-core machine still renews within its deadline
STEADY_ELECTION = ["--leader-elect-lease-duration", "8s", "--leader-elect-renew-deadline", "6s",
                   "--leader-elect-retry-period", "1s"]


def example_plugins(policy: str, **weights) -> list[dict]:
    """The plugins of policies/<policy>.yaml, with some weights changed (plugin name -> weight)."""
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "policies" / f"{policy}.yaml"
    plugins = yaml.safe_load(path.read_text())["spec"]["plugins"]
    for p in plugins:
        if p["name"] in weights:
            p["weight"] = weights[p["name"]]
    return plugins


def apply_policy(objs, name: str, plugins: list, **spec) -> dict:
    """Create or replace a SchedulingPolicy."""
    from kubernetes.client.rest import ApiException

    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SchedulingPolicy", "metadata": {"name": name},
            "spec": {"plugins": plugins, **spec}}
    try:
        return objs.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    except ApiException as e:
        if e.status != 409:
            raise
    for attempt in range(10):  # the operator may write the status between our read and our write
        cur = objs.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        try:
            return objs.replace_cluster_custom_object(GROUP, VERSION, PLURAL, name, body)
        except ApiException as e:
            if e.status != 409 or attempt == 9:
                raise


def policy_status(objs, name: str) -> dict:
    return objs.get_cluster_custom_object(GROUP, VERSION, PLURAL, name).get("status") or {}


def ready_condition(objs, name: str) -> dict | None:
    return next((c for c in policy_status(objs, name).get("conditions") or [] if c["type"] == "Ready"), None)


def wait_bound(core, namespace: str, names, timeout: float = 60.0) -> dict[str, str]:
    """Wait until every pod in ``names`` has a node; returns name -> node."""
    names = set(names)

    def check():
        pods = core.list_namespaced_pod(namespace).items
        got = {p.metadata.name: p.spec.node_name for p in pods if p.metadata.name in names and p.spec.node_name}
        return got if len(got) == len(names) else None

    return wait_for(check, timeout, 0.3, what=f"{len(names)} pods bound in {namespace}")


def events_for(core, namespace: str, name: str, reason: str | None = None) -> list:
    evs = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [e for e in evs if reason is None or e.reason == reason]


def priority_classes(api, classes: dict[str, tuple[int, str | None]]):
    """Create PriorityClasses name -> (value, preemptionPolicy or None); a generator for a
    fixture: yields once, then deletes the ones it created."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    sched = client.SchedulingV1Api(api)
    made = []
    for name, (value, policy) in classes.items():
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value, **({"preemptionPolicy": policy} if policy else {})}
        try:
            sched.create_priority_class(body)
            made.append(name)
        except ApiException as e:
            if e.status != 409:
                raise
    yield
    for name in made:
        sched.delete_priority_class(name)


def merged_kubeconfig(clusters: dict) -> str:
    """One kubeconfig (JSON) with a context per local cluster, named by the dict's keys (cluster
    name -> LocalCluster), as a platform engineer's kubeconfig holds several clusters."""
    import json

    merged = {"apiVersion": "v1", "kind": "Config", "current-context": next(iter(clusters)), "clusters": [],
              "users": [], "contexts": []}
    for name, c in clusters.items():
        kc = json.loads(c.kubeconfig_path.read_text())
        for part in ("clusters", "users"):
            merged[part] += [{**x, "name": name} for x in kc[part]]
        merged["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    return json.dumps(merged)


ROOT = Path(__file__).resolve().parents[2]
DECISION = "policy-scheduler.io/decision"  # the pod annotation of the decision record


def webhook_configs(port: int, name: str) -> dict[str, dict]:
    """manifests/08-webhooks.yaml's configurations, named ``name``, calling 127.0.0.1:``port``."""
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests" / "08-webhooks.yaml").read_text()) if d]
    out = {}
    for d in docs:
        if d["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            d = copy.deepcopy(d)
            d["metadata"]["name"] = name
            for w in d["webhooks"]:
                path = w["clientConfig"].pop("service")["path"]
                w["clientConfig"]["url"] = f"https://127.0.0.1:{port}{path}"
            out[d["kind"]] = d
    return out


def metric(port: int, name: str, **labels) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def arms(core, namespace: str, names) -> dict[str, int]:
    names = set(names)
    out: dict[str, int] = {}
    for p in core.list_namespaced_pod(namespace).items:
        if p.metadata.name in names and p.spec.node_name:
            d = json.loads((p.metadata.annotations or {}).get(DECISION, "{}"))
            arm = (d.get("rollout") or {}).get("arm", "none")
            out[arm] = out.get(arm, 0) + 1
    return out


def recreated(body: dict, patch: list, name: str) -> dict:
    """The pod as a Pod suggestion says, as a new object named ``name``."""
    from policy_scheduler.remedies import apply_pod_patch

    changed = apply_pod_patch(body, patch)
    meta = changed["metadata"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": meta["namespace"], "labels": meta.get("labels") or {}},
            "spec": {k: v for k, v in changed["spec"].items() if k != "nodeName"}}


def suggestions_condition(body: dict) -> tuple[dict, dict] | None:
    """A pod's suggestions condition and its document (the message's JSON without its mac, read
    as explain reads it), or None while it has none."""
    from policy_scheduler.cluster.suggestions import SUGGESTIONS_CONDITION, split_message

    for c in (body.get("status") or {}).get("conditions") or []:
        if c.get("type") == SUGGESTIONS_CONDITION:
            doc, _, _ = split_message(c.get("message"))
            assert doc is not None, c
            return c, doc
    return None
