"""Tenants on one cluster: per-policy overcommit, a namespace's default policy, and policies
scoped to namespaces, with the session's operator on the real local control plane."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

from helpers import GROUP, PLURAL, VERSION, apply_policy, events_for, pod, policy_status, wait_bound, wait_for

LABEL = "policy-scheduler.io/policy"
FIT = [{"name": "NodeResourcesFit"}, {"name": "NodeAffinity"}]


def bound(core, namespace: str, prefix: str) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace).items
            if p.metadata.name.startswith(prefix) and p.spec.node_name}


def failed(core, namespace: str, name: str) -> str | None:
    ev = events_for(core, namespace, name, "FailedScheduling")
    return ev[-1].message if ev else None


def test_an_overcommitted_tenant_places_more_and_a_strict_one_refuses_what_it_overfilled(
        core, namespace, nodes, operator, policies):
    apply_policy(policies, "t-strict", FIT)
    apply_policy(policies, "t-loose", FIT, overcommit={"cpu": 1.05})
    assert policy_status(policies, "t-loose") is not None
    for pool in ("strict", "loose"):
        for i in range(2):
            nodes(f"oc-{pool}-{i}", cpu="10", memory="64Gi", labels={"e2e": f"oc-{pool}"})

    def burst(prefix: str, policy: str, pool: str, n: int) -> None:
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda i: core.create_namespaced_pod(namespace, pod(
                f"{prefix}{i:02d}", namespace, cpu="500m", labels={LABEL: policy},
                nodeSelector={"e2e": f"oc-{pool}"})), range(n)))

    # the same nodes, the same 500m pods: 20 per 10-cpu node strictly, 21 with cpu x1.05
    burst("s", "t-strict", "strict", 44)
    burst("l", "t-loose", "loose", 44)
    wait_for(lambda: len(bound(core, namespace, "s")) == 40 and len(bound(core, namespace, "l")) == 42, 60,
             what="40 strict and 42 overcommitted pods bound")
    surplus = [f"l{i:02d}" for i in range(44) if f"l{i:02d}" not in bound(core, namespace, "l")]
    assert len(surplus) == 2
    wait_for(lambda: all(failed(core, namespace, n) for n in surplus), 30, what="the loose tenant's surplus reported")
    time.sleep(1)
    assert len(bound(core, namespace, "s")) == 40 and len(bound(core, namespace, "l")) == 42
    print(f"\nsame nodes (2 x 10 cpu), 500m pods: strict policy placed {len(bound(core, namespace, 's'))}, "
          f"cpu x1.05 placed {len(bound(core, namespace, 'l'))}")

    # the pods placed beyond the real allocatable say so in their decision
    extra = [n for n in bound(core, namespace, "l")
             if "admittedBy" in json.dumps(json.loads(core.read_namespaced_pod(n, namespace).metadata.annotations[
                 "policy-scheduler.io/decision"])["top"][0].get("details", {}))]
    assert len(extra) == 2, extra
    details = json.loads(core.read_namespaced_pod(extra[0], namespace).metadata.annotations[
        "policy-scheduler.io/decision"])["top"][0]["details"]
    assert details["NodeResourcesFit"] == {"admittedBy": "overcommit (cpu x1.05)"}

    # a strict tenant's pod refuses the nodes the overcommitted tenant pushed past allocatable
    core.create_namespaced_pod(namespace, pod("strict-on-loose", namespace, cpu="100m", labels={LABEL: "t-strict"},
                                              nodeSelector={"e2e": "oc-loose"}))
    msg = wait_for(lambda: failed(core, namespace, "strict-on-loose"), 30, what="the strict pod's FailedScheduling")
    assert "2 Insufficient cpu (node already over its allocatable cpu: overcommitted)" in msg, msg
    print(f"strict pod on the overcommitted nodes: {msg}")
    for name in ("t-strict", "t-loose"):
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def test_a_namespace_default_policy_applies_to_its_unlabelled_pods_and_a_relabel_to_pending_ones(
        core, namespace, nodes, operator, policies):
    apply_policy(policies, "t-ns-strict", FIT)
    apply_policy(policies, "t-ns-roomy", FIT, overcommit={"cpu": 1.5})
    nodes("dp-0", cpu="1", memory="8Gi", labels={"e2e": "dp"})
    sel = {"nodeSelector": {"e2e": "dp"}}
    core.patch_namespace(namespace, {"metadata": {"labels": {"policy-scheduler.io/default-policy": "t-ns-strict"}}})
    time.sleep(0.5)
    core.create_namespaced_pod(namespace, pod("first", namespace, cpu="900m", **sel))
    wait_bound(core, namespace, ["first"], 30)
    ann = json.loads(core.read_namespaced_pod("first", namespace).metadata.annotations["policy-scheduler.io/decision"])
    assert ann["policy"] == "t-ns-strict"

    core.create_namespaced_pod(namespace, pod("second", namespace, cpu="200m", **sel))  # 1100m > 1 cpu
    assert "Insufficient cpu" in wait_for(lambda: failed(core, namespace, "second"), 30, what="second refused")
    t0 = time.monotonic()
    core.patch_namespace(namespace, {"metadata": {"labels": {"policy-scheduler.io/default-policy": "t-ns-roomy"}}})
    wait_bound(core, namespace, ["second"], 30)
    took = time.monotonic() - t0
    ann = json.loads(core.read_namespaced_pod("second", namespace).metadata.annotations["policy-scheduler.io/decision"])
    assert ann["policy"] == "t-ns-roomy"
    print(f"\nnamespace relabelled to another default policy: its pending pod bound {took:.2f}s later under it")
    assert took < 5
    for name in ("t-ns-strict", "t-ns-roomy"):
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def test_a_policy_scoped_to_namespaces_refuses_others_until_their_labels_allow(core, namespace, nodes, operator,
                                                                               policies):
    apply_policy(policies, "t-dept-b", FIT, namespaceSelector={"matchLabels": {"dept": "b"}})
    nodes("scope-0", cpu="4", labels={"e2e": "scope"})
    assert policy_status(policies, "t-dept-b") is not None
    core.create_namespaced_pod(namespace, pod("wants-b", namespace, labels={LABEL: "t-dept-b"},
                                              nodeSelector={"e2e": "scope"}))
    ev = wait_for(lambda: events_for(core, namespace, "wants-b", "NoPolicy"), 30, what="the NoPolicy event")
    assert ev[0].message == f"SchedulingPolicy 't-dept-b' does not admit pods of namespace '{namespace}'"
    admitted = wait_for(lambda: policy_status(policies, "t-dept-b").get("namespaces") is not None
                        and policy_status(policies, "t-dept-b"), 30, what="status.namespaces")
    before = admitted["namespaces"]
    core.patch_namespace(namespace, {"metadata": {"labels": {"dept": "b"}}})
    assert wait_bound(core, namespace, ["wants-b"], 30)["wants-b"] == "scope-0"
    wait_for(lambda: policy_status(policies, "t-dept-b").get("namespaces") == before + 1, 30,
             what="one more namespace admitted in the status")
    policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "t-dept-b")
