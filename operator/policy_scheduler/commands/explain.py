"""`policy-scheduler explain`: why a pod went where it went, or why it did not (explain.py prints the
decision record). ``explanation`` makes one document of what the API server says of the pod (its
decision annotation, its PodScheduled condition, its events); the text output and ``-o json|yaml``
print that document.

The decision annotation is written by the scheduler's binder, but a pod's owner can write it too:
explain says which, by checking its ``policy-scheduler.io/decision-mac`` with the scheduler's key
(cluster/decision_mac.py; the Secret in --operator-namespace, when the caller may read it), and
otherwise marks it "annotation (user-writable)". The same goes for a pending pod's
``policy-scheduler.io/Suggestions`` condition (what would place it, cluster/suggestions.py),
checked against the ``mac`` in its message. Text and YAML output print every
string of the document with its control characters escaped (explain.printable): annotations and
event messages are tenant text."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, TextIO

from .. import DEFAULT_POLICY_LABEL, POLICY_LABEL
from . import CONTEXT_HELP, KUBECONFIG_HELP, positive

OUTPUTS = ("text", "json", "yaml")
EVENTS = 5  # the pod's last events in the document


class ExplainError(Exception):
    """Why explain cannot say anything: one line on stderr, exit status 1."""


def pod_ref(pod: str, namespace: str | None) -> tuple[str, str]:
    """(namespace, name) of ``NAMESPACE/NAME``, or of ``NAME`` in ``namespace`` (default: default).
    ValueError when the two name different namespaces."""
    if "/" not in pod:
        return namespace or "default", pod
    ns, name = pod.split("/", 1)
    if not ns or not name or "/" in name:
        raise ValueError(f"{pod!r} is not NAME or NAMESPACE/NAME")
    if namespace and namespace != ns:
        raise ValueError(f"{pod!r} is in namespace {ns}, --namespace says {namespace}")
    return ns, name


def policy_of(pod_labels: dict[str, str], namespace_labels: dict[str, str] | None,
              default_policy: str) -> tuple[str, str]:
    """The policy a pod is scheduled with, as the operator resolves it (PolicyStore.policy_name):
    its policy label, else its namespace's default-policy label, else the default policy; and
    where the name came from: podLabel, namespaceLabel or default."""
    if pod_labels.get(POLICY_LABEL):
        return pod_labels[POLICY_LABEL], "podLabel"
    if (namespace_labels or {}).get(DEFAULT_POLICY_LABEL):
        return namespace_labels[DEFAULT_POLICY_LABEL], "namespaceLabel"
    return default_policy, "default"


def _event_time(e: dict[str, Any]) -> str:
    return str(e.get("lastTimestamp") or e.get("eventTime") or (e.get("series") or {}).get("lastObservedTime")
               or e.get("firstTimestamp") or (e.get("metadata") or {}).get("creationTimestamp") or "")


def _event(e: dict[str, Any]) -> dict[str, Any]:
    return {"type": e.get("type"), "reason": e.get("reason"), "message": e.get("message"),
            "count": e.get("count") or (e.get("series") or {}).get("count") or 1, "time": _event_time(e) or None}


SUGGESTIONS = "policy-scheduler.io/Suggestions"  # the pod condition (cluster/suggestions.py)
_REASON = re.compile(r"(\d+) (.+?)(?=, \d+ |$)")


def grouped_reasons(message: Any) -> list[dict[str, Any]]:
    """The per-node reasons of a FailedScheduling message (``0/12 nodes are available: 2
    Insufficient cpu, 10 node(s) didn't match ...``): [{"nodes": 2, "reason": "Insufficient cpu"}, ...],
    most nodes first; [] for any other message."""
    if not isinstance(message, str):
        return []
    m = re.match(r"0/\d+ nodes are available: (.*?)\.(?: preemption: |$)", message[:8192], re.S)
    if m is None:
        return []
    out = [{"nodes": int(n), "reason": r.strip()} for n, r in _REASON.findall(m.group(1))]
    return sorted(out, key=lambda x: -x["nodes"])


def _suggestions_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    conds = (pod.get("status") or {}).get("conditions")
    if not isinstance(conds, list):
        return None
    return next((c for c in conds[:64] if isinstance(c, dict) and c.get("type") == SUGGESTIONS), None)


def suggestions_of(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The suggestions condition's document (its message, the JSON form, without its mac). None:
    none; not a JSON object: ``{"unreadable": ...}``."""
    from ..cluster.suggestions import split_message

    cond = _suggestions_condition(pod)
    if cond is None:
        return None
    doc, _, _ = split_message(cond.get("message"))
    return doc if doc is not None else {"unreadable": f"the {SUGGESTIONS} condition's message is not a JSON object"}


def explanation(pod: dict[str, Any], namespace_labels: dict[str, str] | None, events: list[dict[str, Any]], *,
                default_policy: str, top: int | None = None,
                trust: tuple[bool | None, str] = (None, "not checked"),
                suggestions_trust: tuple[bool | None, str] = (None, "not checked")) -> dict[str, Any]:
    """The document explain prints: the pod, its scheduler and node; the policy (the decision's,
    or for a pod not bound yet the one it would be scheduled with, and where that name came from);
    the decision record (its top nodes cut to ``top``); the PodScheduled condition; the last
    FailedScheduling event; the Preempting events' messages; the last EVENTS events; and
    ``plugins``: the decision's top nodes as explain.plugin_table makes them (per node and plugin
    its weighted score; the table explain prints and simulate's drill-down draws). ``pod`` and
    ``events`` as the API server writes them (JSON); ``namespace_labels`` None when unknown;
    ``trust``: whether the decision's MAC verifies (None: it could not be checked) and with what
    key, or why not (``decision_trust``). ValueError for an unreadable decision annotation."""
    from ..explain import DECISION_ANNOTATION, plugin_table

    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    uid = meta.get("uid")
    decision = None
    raw = (meta.get("annotations") or {}).get(DECISION_ANNOTATION)
    if raw:
        try:
            decision = json.loads(raw)
        except ValueError:
            decision = None
        if not isinstance(decision, dict):
            raise ValueError(f"unreadable {DECISION_ANNOTATION} annotation")
        if top is not None:
            decision = {**decision, "top": (decision.get("top") or [])[:top]}
    node = spec.get("nodeName") or None
    if decision is not None:
        policy, source = decision.get("policy"), "decision"
    elif node is None:
        policy, source = policy_of(meta.get("labels") or {}, namespace_labels, default_policy)
    else:  # bound, and not by a decision of ours
        policy, source = None, None
    # a pod deleted and created again under its name: only the events of this one
    evs = sorted((e for e in events if not uid or (e.get("involvedObject") or {}).get("uid") in (None, "", uid)),
                 key=_event_time)
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    failed = [e for e in evs if e.get("reason") == "FailedScheduling"]
    # a pending pod: why no node (the FailedScheduling message's reasons, grouped) and what would
    # place it (the suggestions condition; a bound pod's is the past's and is left out)
    sugg = suggestions_of(pod) if node is None else None
    why = (cond or {}).get("message") if (cond or {}).get("status") == "False" else None
    if not why and failed:
        why = failed[-1].get("message")
    return {
        "pod": f"{meta.get('namespace')}/{meta.get('name')}", "uid": uid, "scheduler": spec.get("schedulerName"),
        "node": node, "phase": status.get("phase"), "policy": policy, "policySource": source,
        "decision": decision,
        "decisionVerified": trust[0] if decision is not None else None,
        "decisionTrust": trust[1] if decision is not None else None,
        "plugins": (plugin_table(top_nodes if isinstance(top_nodes := decision.get("top"), list) else [],
                                 decision.get("weights")) if decision is not None else None),
        "podScheduled": ({k: cond.get(k) for k in ("status", "reason", "message", "lastTransitionTime")}
                         if cond is not None else None),
        "lastFailedScheduling": _event(failed[-1]) if failed else None,
        "preemptions": [e.get("message") for e in evs if e.get("reason") == "Preempting"],
        "events": [_event(e) for e in evs[-EVENTS:]],
        "reasons": grouped_reasons(why) if node is None else None,
        "blockers": (sugg or {}).get("blockers") if sugg is not None else None,
        "suggestions": sugg,
        "suggestionsVerified": suggestions_trust[0] if sugg is not None else None,
        "suggestionsTrust": suggestions_trust[1] if sugg is not None else None,
    }


SOURCES = {"podLabel": f"the pod's label {POLICY_LABEL}", "namespaceLabel": f"the namespace's label "
           f"{DEFAULT_POLICY_LABEL}", "default": "no policy label: the default policy"}


def write_text(doc: dict[str, Any], out: TextIO) -> None:
    """The document as explain prints it on a terminal."""
    from ..explain import print_decision

    out.write(f"pod {doc['pod']}: scheduler {doc['scheduler']}, node {doc['node'] or '(none)'}\n")
    if doc["decision"] is not None:
        verified, how = doc.get("decisionVerified"), doc.get("decisionTrust")
        out.write("  decision:  " + (f"verified: written by the scheduler ({how})" if verified else
                                     f"annotation (user-writable), NOT written by the scheduler: {how}"
                                     if verified is False else f"annotation (user-writable), not verified: {how}")
                  + "\n")
        print_decision(doc["decision"], out)
        for msg in doc["preemptions"]:  # a preemptor: which pods it preempted, where, and why that node
            out.write(f"  preemption: {msg}\n")
        return
    if doc["policy"] is not None:
        out.write(f"  policy:    {doc['policy']}   (would schedule it: {SOURCES[doc['policySource']]})\n")
    cond = doc["podScheduled"]
    if cond is not None and cond["status"] == "False":
        out.write(f"  not scheduled ({cond['reason']}): {cond['message']}\n")
    else:
        out.write("  no decision recorded by policy-scheduler for this pod\n")
    write_suggestions_text(doc, out)
    for e in doc["events"]:
        out.write(f"  event {e['type']} {e['reason']}: {e['message']}\n")


def _trust_line(verified: Any, how: Any) -> str:
    return (f"verified: written by the scheduler ({how})" if verified else
            f"annotation (user-writable), NOT written by the scheduler: {how}" if verified is False else
            f"annotation (user-writable), not verified: {how}")


def write_suggestions_text(doc: dict[str, Any], out: TextIO) -> None:
    """A pending pod's reasons per node (grouped), the search's diagnosis and its suggestions."""
    if doc.get("reasons"):
        out.write("  reasons (nodes per reason):\n")
        for r in doc["reasons"]:
            out.write(f"    {r['nodes']:5d}  {r['reason']}\n")
    blockers = doc.get("blockers")
    if isinstance(blockers, dict) and blockers:
        out.write("  rejected by (nodes per set of filter plugins, every node checked):\n")
        for plugins, n in blockers.items():
            out.write(f"    {n!s:>5}  {plugins}\n")
    sugg = doc.get("suggestions")
    if sugg is None:
        return
    out.write(f"  suggestions: {_trust_line(doc.get('suggestionsVerified'), doc.get('suggestionsTrust'))}\n")
    items = sugg.get("suggestions") if isinstance(sugg.get("suggestions"), list) else []
    for i, s in enumerate(items, 1):
        if not isinstance(s, dict):
            continue
        n = s.get("nodesOpened")
        out.write(f"    {i}. {s.get('change')}: opens {n} node{'' if n == 1 else 's'} ({s.get('node')} would be "
                  f"chosen) [{s.get('kind')}, {s.get('target')}]\n")
        out.write(f"       patch: {json.dumps(s.get('patch'))}\n")
    if not items:
        out.write(f"    none{': ' + str(sugg.get('reason')) if sugg.get('reason') else ''}\n")
    elif sugg.get("partial"):
        out.write(f"    (the search was cut short: {sugg.get('reason')})\n")


def fetch(a: argparse.Namespace, ns: str, name: str) -> tuple[dict, dict | None, list[dict]]:
    """The pod, its namespace's labels (None when they cannot be read) and its events."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from ..cluster.credentials import client_configuration

    try:
        cfg = client_configuration(a.kubeconfig, a.context)
    except RuntimeError as e:  # no kubeconfig, unknown context, a failing exec plugin
        raise ExplainError(f"cannot load credentials: {e}") from None
    core = client.CoreV1Api(client.ApiClient(cfg))
    try:
        pod = json.loads(core.read_namespaced_pod(name, ns, _preload_content=False).data)
    except ApiException as e:
        raise ExplainError(f"cannot read pod {ns}/{name}: HTTP {e.status} {e.reason}") from None
    except Exception as e:  # an unreachable server
        raise ExplainError(str(e)) from None
    labels = None
    if _namespace_matters(pod):
        try:
            labels = (json.loads(core.read_namespace(ns, _preload_content=False).data).get("metadata") or {}).get(
                "labels") or {}
        except ApiException as e:
            print(f"policy-scheduler explain: warning: cannot read namespace {ns} (HTTP {e.status} {e.reason}): "
                  f"its label {DEFAULT_POLICY_LABEL} is unknown", file=sys.stderr)
    try:
        events = json.loads(core.list_namespaced_event(
            ns, field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}",
            _preload_content=False).data).get("items") or []
    except ApiException as e:
        print(f"policy-scheduler explain: warning: cannot list the pod's events: HTTP {e.status} {e.reason}",
              file=sys.stderr)
        events = []
    return pod, labels, events


def _namespace_matters(pod: dict) -> bool:
    """Whether the namespace's labels name the pod's policy: a pod not bound, without a decision
    and without a policy label."""
    from ..explain import DECISION_ANNOTATION

    meta = pod.get("metadata") or {}
    return (not (pod.get("spec") or {}).get("nodeName") and DECISION_ANNOTATION not in (meta.get("annotations") or {})
            and not (meta.get("labels") or {}).get(POLICY_LABEL))


_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,200}[a-z0-9])?")


def _scheduler_key(a: argparse.Namespace, pod: dict[str, Any], cache: dict[str, Any]) -> tuple[Any, str]:
    """(DecisionKey, where it is) of the pod's scheduler, or (None, why not); read once per call
    of explain (``cache``)."""
    if "key" in cache:
        return cache["key"]
    from ..cluster.decision_mac import DecisionKey, decode_key, secret_name

    sched = (pod.get("spec") or {}).get("schedulerName") or "policy-scheduler"
    ns = getattr(a, "operator_namespace", None)
    if not isinstance(sched, str) or not _NAME.fullmatch(sched) or not ns:
        got: tuple[Any, str] = (None, "no scheduler name or operator namespace to find its key")
    else:
        where = f"Secret {ns}/{secret_name(sched)}"
        try:
            key = decode_key(read_secret(a, ns, secret_name(sched)))
            got = (DecisionKey(key), where) if key is not None else (None, f"{where} holds no usable key")
        except ExplainError as e:
            got = (None, f"cannot read the key in {where}: {e}")
    cache["key"] = got
    return got


def decision_trust(a: argparse.Namespace, pod: dict[str, Any], cache: dict[str, Any] | None = None
                   ) -> tuple[bool | None, str]:
    """Whether the pod's decision annotation is one the scheduler's binder signed for this pod and
    node: (True, where the key is), (False, why not), or (None, why it could not be checked: no
    decision, or the key's Secret cannot be read by the caller)."""
    from ..cluster.decision_mac import MAC_ANNOTATION
    from ..explain import DECISION_ANNOTATION

    anns = (pod.get("metadata") or {}).get("annotations") or {}
    if DECISION_ANNOTATION not in anns:
        return None, "no decision"
    if MAC_ANNOTATION not in anns:
        return False, f"it has no {MAC_ANNOTATION}"
    key, where = _scheduler_key(a, pod, {} if cache is None else cache)
    if key is None:
        return None, where
    if key.verify_pod(pod):
        return True, f"its {MAC_ANNOTATION} verifies with the key in {where}"
    return False, f"its {MAC_ANNOTATION} does not verify with the key in {where} (another pod's, node's or text)"


def suggestions_trust(a: argparse.Namespace, pod: dict[str, Any], cache: dict[str, Any] | None = None
                      ) -> tuple[bool | None, str]:
    """Whether the pod's suggestions condition is the scheduler's, for this pod (as decision_trust)."""
    from ..cluster.suggestions import split_message

    meta = pod.get("metadata") or {}
    cond = _suggestions_condition(pod)
    if cond is None:
        return None, "no suggestions"
    doc, text, mac = split_message(cond.get("message"))
    if doc is None or mac is None:
        return False, f"its {SUGGESTIONS} condition has no mac"
    key, where = _scheduler_key(a, pod, {} if cache is None else cache)
    if key is None:
        return None, where
    if key.verify_suggestions(meta.get("uid"), text, mac):
        return True, f"its {SUGGESTIONS} condition's mac verifies with the key in {where}"
    return False, (f"its {SUGGESTIONS} condition's mac does not verify with the key in {where} (another pod's, "
                   "or other text)")


def read_secret(a: argparse.Namespace, ns: str, name: str) -> Any:
    """A Secret as the caller's credentials read it; ExplainError says why not (never its data)."""
    try:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        from ..cluster.credentials import client_configuration

        core = client.CoreV1Api(client.ApiClient(client_configuration(a.kubeconfig, a.context)))
        return json.loads(core.read_namespaced_secret(name, ns, _preload_content=False).data)
    except ApiException as e:
        raise ExplainError(f"HTTP {e.status} {e.reason}") from None
    except Exception as e:  # no credentials, an unreachable server
        raise ExplainError(type(e).__name__) from None


def workload_explanation(wl: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """A Kueue Workload and the MultiKueue cluster chooser's record of it (cluster/multikueue.py)."""
    from ..cluster.multikueue import SCORES_ANNOTATION

    meta, st = wl.get("metadata") or {}, wl.get("status") or {}
    raw = (meta.get("annotations") or {}).get(SCORES_ANNOTATION)
    try:
        rec = json.loads(raw) if raw else None
    except ValueError:
        rec = None
    clusters = (rec or {}).get("clusters") or {}
    ranked = sorted(((c, v) for c, v in clusters.items() if isinstance(v, dict) and "rank" in v),
                    key=lambda x: x[1]["rank"])
    return {"workload": f"{meta.get('namespace')}/{meta.get('name')}",
            "clusterName": st.get("clusterName"), "nominatedClusterNames": st.get("nominatedClusterNames") or [],
            "policy": (rec or {}).get("policy"), "chosen": (rec or {}).get("chosen"),
            "clusters": [{"cluster": c, **v} for c, v in ranked]
            + [{"cluster": c, **v} for c, v in clusters.items() if isinstance(v, dict) and "rank" not in v],
            "recorded": rec is not None,
            "events": [_event(e) for e in sorted(events, key=_event_time)[-EVENTS:]]}


def write_workload_text(doc: dict[str, Any], out: TextIO) -> None:
    out.write(f"Workload {doc['workload']}: ")
    if doc["clusterName"]:
        out.write(f"running on {doc['clusterName']}\n")
    elif doc["nominatedClusterNames"]:
        out.write(f"nominated to {', '.join(doc['nominatedClusterNames'])}, not admitted there yet\n")
    else:
        out.write("no worker cluster yet\n")
    if not doc["recorded"]:
        out.write("  no record of the MultiKueue cluster chooser (run --multikueue-dispatcher) on it\n")
    else:
        chosen = doc["chosen"] or "none (no worker holds the whole Workload)"
        out.write(f"  policy {doc['policy']}; chosen: {chosen}\n")
        for c in doc["clusters"]:
            if "rank" in c:
                out.write(f"  {c['rank']}. {c['cluster']}: {c['placed']}/{c['pods']} pods placed, "
                          f"{c['preempted']} preempted, mean score {c['meanScore']}\n")
            else:
                why = f" ({c['reason']})" if c.get("reason") else ""
                out.write(f"  -  {c['cluster']}: left out: {c.get('error')}{why}\n")
    for e in doc["events"]:
        out.write(f"  event {e['type']} {e['reason']}: {e['message']}\n")


def fetch_workload(a: argparse.Namespace, ns: str, name: str) -> tuple[dict, list[dict]]:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from ..cluster.credentials import client_configuration

    try:
        cfg = client_configuration(a.kubeconfig, a.context)
    except RuntimeError as e:
        raise ExplainError(f"cannot load credentials: {e}") from None
    api = client.ApiClient(cfg)
    try:
        wl = json.loads(client.CustomObjectsApi(api).get_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", ns, "workloads", name, _preload_content=False).data)
    except ApiException as e:
        raise ExplainError(f"cannot read workload {ns}/{name}: HTTP {e.status} {e.reason}") from None
    except Exception as e:
        raise ExplainError(str(e)) from None
    try:
        events = json.loads(client.CoreV1Api(api).list_namespaced_event(
            ns, field_selector=f"involvedObject.kind=Workload,involvedObject.name={name}",
            _preload_content=False).data).get("items") or []
    except ApiException:
        events = []
    return wl, events


def cmd_explain(a: argparse.Namespace) -> int:
    try:
        ns, name = pod_ref(a.pod, a.namespace)
    except ValueError as e:
        print(f"policy-scheduler explain: {e}", file=sys.stderr)
        return 2
    try:
        if a.workload:
            wl, events = fetch_workload(a, ns, name)
            doc = workload_explanation(wl, events)
        else:
            pod, labels, events = fetch(a, ns, name)
            cache: dict[str, Any] = {}  # the key's Secret, read once
            doc = explanation(pod, labels, events, default_policy=a.default_policy, top=a.top,
                              trust=decision_trust(a, pod, cache), suggestions_trust=suggestions_trust(a, pod, cache))
    except (ExplainError, ValueError) as e:
        print(f"policy-scheduler explain: {e}", file=sys.stderr)
        return 1
    if a.output == "json":  # json.dumps escapes every control character
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    from ..explain import printable_doc

    doc = printable_doc(doc)  # tenant text: no escape sequence reaches the terminal
    if a.output == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True))
    elif a.workload:
        write_workload_text(doc, sys.stdout)
    else:
        write_text(doc, sys.stdout)
    return 0


def add_parser(sub) -> None:
    from ..cache.policies import DEFAULT_POLICY
    from ..cache.revisions import DEFAULT_NAMESPACE, default_namespace
    from ..explain import ANNOTATION_TOP_NODES

    e = sub.add_parser("explain", help="why a pod went where it went (or why it did not)",
                       description="Shows the latest decision for a pod: the chosen node, per-plugin weighted "
                                   "scores of the top nodes, and how many nodes each filter reason removed. For a "
                                   "pod without one: the policy it would be scheduled with, why it is not "
                                   "scheduled (its PodScheduled condition, the reasons per node grouped), the "
                                   "scheduler's verified suggestions of what would place it (the "
                                   "policy-scheduler.io/Suggestions condition) and its last events.")
    e.add_argument("pod", metavar="POD", help="NAME (in --namespace) or NAMESPACE/NAME")
    e.add_argument("--namespace", "-n", default=None, help="the pod's namespace (default: default)")
    e.add_argument("--kubeconfig", default=None, metavar="FILE", help=KUBECONFIG_HELP)
    e.add_argument("--context", default=None, help=CONTEXT_HELP)
    e.add_argument("--output", "-o", choices=OUTPUTS, default="text",
                   help="text (default), or the whole explanation as one JSON or YAML document")
    e.add_argument("--top", type=positive, default=None, metavar="N",
                   help=f"show the N best nodes (default: all the decision records, at most "
                        f"{ANNOTATION_TOP_NODES})")
    e.add_argument("--default-policy", default=DEFAULT_POLICY, metavar="NAME",
                   help="the operator's --default-policy: the policy of a pod without the policy label in a "
                        f"namespace without the {DEFAULT_POLICY_LABEL} label (default {DEFAULT_POLICY!r})")
    e.add_argument("--operator-namespace", default=default_namespace(), metavar="NAMESPACE",
                   help="the operator's namespace (its --revision-namespace; default $POD_NAMESPACE, else "
                        f"{DEFAULT_NAMESPACE}), whose Secret SCHEDULER-decision-key verifies the decision "
                        "annotation when you may read it; otherwise the decision is marked user-writable")
    e.add_argument("--workload", action="store_true",
                   help="POD names a Kueue Workload in a MultiKueue manager cluster: where it runs, and the "
                        "cluster chooser's record (run --multikueue-dispatcher): its policy, each worker's rank, "
                        "pods placed and score, or why a worker was left out")
    e.set_defaults(fn=cmd_explain)
