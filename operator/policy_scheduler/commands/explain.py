"""`policy-scheduler explain`: why a pod went where it went (explain.py prints the decision record)."""

from __future__ import annotations

import argparse
import json
import sys

from . import CONTEXT_HELP, KUBECONFIG_HELP


def cmd_explain(a: argparse.Namespace) -> int:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from ..cluster.kubeclient import client_configuration
    from ..explain import DECISION_ANNOTATION, print_decision

    if "/" in a.pod:
        ns, name = a.pod.split("/", 1)
    else:
        ns, name = "default", a.pod
    try:
        cfg = client_configuration(a.kubeconfig, a.context)
    except RuntimeError as e:  # no kubeconfig, unknown context, a failing exec plugin
        print(f"policy-scheduler explain: cannot load credentials: {e}", file=sys.stderr)
        return 1
    try:
        core = client.CoreV1Api(client.ApiClient(cfg))
        pod = core.read_namespaced_pod(name, ns)
    except ApiException as e:
        print(f"policy-scheduler explain: cannot read pod {ns}/{name}: HTTP {e.status} {e.reason}", file=sys.stderr)
        return 1
    except Exception as e:  # an unreachable server
        print(f"policy-scheduler explain: {e}", file=sys.stderr)
        return 1
    print(f"pod {ns}/{name}: scheduler {pod.spec.scheduler_name}, node {pod.spec.node_name or '(none)'}")
    ann = (pod.metadata.annotations or {}).get(DECISION_ANNOTATION)
    if ann:
        try:
            d = json.loads(ann)
        except ValueError:
            print(f"  unreadable {DECISION_ANNOTATION} annotation")
            return 1
        if a.output == "json":
            print(json.dumps(d, indent=2))
        else:
            print_decision(d, sys.stdout)
            # a preemptor: which pods it preempted, where, and why that node (its Preempting event)
            try:
                evs = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
            except ApiException:
                evs = []
            for e in evs:
                if e.reason == "Preempting" and (not pod.metadata.uid or e.involved_object.uid == pod.metadata.uid):
                    print(f"  preemption: {e.message}")
        return 0
    cond = next((c for c in (pod.status.conditions or []) if c.type == "PodScheduled"), None)
    if cond is not None and cond.status == "False":
        print(f"  not scheduled ({cond.reason}): {cond.message}")
    else:
        print("  no decision recorded by policy-scheduler for this pod")
    evs = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    for e in sorted(evs, key=lambda e: str(e.last_timestamp or e.event_time or ""))[-5:]:
        print(f"  event {e.type} {e.reason}: {e.message}")
    return 0


def add_parser(sub) -> None:
    e = sub.add_parser("explain", help="why a pod went where it went (or why it did not)",
                       description="Shows the latest decision for a pod: the chosen node, per-plugin weighted "
                                   "scores of the top nodes, and how many nodes each filter reason removed.")
    e.add_argument("pod", help="NAMESPACE/POD")
    e.add_argument("--kubeconfig", default=None, metavar="FILE", help=KUBECONFIG_HELP)
    e.add_argument("--context", default=None, help=CONTEXT_HELP)
    e.add_argument("--output", "-o", choices=("text", "json"), default="text")
    e.set_defaults(fn=cmd_explain)
