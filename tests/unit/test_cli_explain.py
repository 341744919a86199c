"""`policy-scheduler explain`: the pod argument and --namespace, the policy an unscheduled pod would
get (as the operator's PolicyStore picks it), the one document behind the text, JSON and YAML
outputs, --top."""

from __future__ import annotations

import json

import pytest
import yaml

from policy_scheduler import DEFAULT_POLICY_LABEL, POLICY_LABEL, cli
from policy_scheduler.cache.policies import PolicyStore
from policy_scheduler.commands import explain as cmd
from policy_scheduler.explain import DECISION_ANNOTATION
from policy_scheduler.framework.interface import Handle
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.metricsources.manager import MetricSources

DECISION = {"policy": "spread", "node": "n0", "nodes": 6, "evaluated": 6, "feasible": 5, "at": "2026-01-01T00:00:00Z",
            "top": [{"node": f"n{i}", "total": 100 - i, "scores": {"NodeResourcesFit": 100 - i}} for i in range(5)],
            "failures": {"Insufficient cpu": 1}}


def pod(name="x", ns="demo", labels=None, node=None, decision=None, condition=None, uid="u1"):
    meta = {"name": name, "namespace": ns, "uid": uid, "labels": labels or {}}
    if decision is not None:
        meta["annotations"] = {DECISION_ANNOTATION: decision if isinstance(decision, str) else json.dumps(decision)}
    status = {"phase": "Running" if node else "Pending"}
    if condition is not None:
        status["conditions"] = [{"type": "Initialized", "status": "True"}, {"type": "PodScheduled", **condition}]
    return {"metadata": meta, "spec": {"schedulerName": "policy-scheduler", "containers": [{"name": "c"}],
                                       **({"nodeName": node} if node else {})}, "status": status}


def event(reason, message, t, uid="u1", type_="Warning"):
    return {"type": type_, "reason": reason, "message": message, "lastTimestamp": t, "count": 2,
            "involvedObject": {"kind": "Pod", "name": "x", "uid": uid}}


UNSCHEDULABLE = {"status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu.",
                 "lastTransitionTime": "2026-01-01T00:00:05Z"}


def test_the_pod_is_namespace_slash_name_or_a_name_and_namespace():
    assert cmd.pod_ref("demo/x", None) == ("demo", "x")
    assert cmd.pod_ref("x", "demo") == ("demo", "x")
    assert cmd.pod_ref("x", None) == ("default", "x")
    assert cmd.pod_ref("demo/x", "demo") == ("demo", "x")
    for bad, ns in (("demo/x", "other"), ("/x", None), ("demo/", None), ("a/b/c", None)):
        with pytest.raises(ValueError):
            cmd.pod_ref(bad, ns)


@pytest.mark.parametrize("labels,ns_labels,expected", [
    ({POLICY_LABEL: "mine"}, {DEFAULT_POLICY_LABEL: "ns-default"}, ("mine", "podLabel")),
    ({}, {DEFAULT_POLICY_LABEL: "ns-default"}, ("ns-default", "namespaceLabel")),
    ({}, {"other": "label"}, ("op-default", "default")),
    ({}, None, ("op-default", "default")),
    ({POLICY_LABEL: ""}, {}, ("op-default", "default")),
])
def test_the_policy_is_the_one_the_operator_would_pick(labels, ns_labels, expected):
    assert cmd.policy_of(labels, ns_labels, "op-default") == expected
    store = PolicyStore(MetricSources(), lambda name: Handle(), default_policy="op-default",
                        namespaces={"demo": ns_labels} if ns_labels is not None else {})
    p = parse_pod({"metadata": {"name": "x", "namespace": "demo", "labels": labels},
                   "spec": {"containers": [{"name": "c", "image": "i"}]}})
    assert store.policy_name(p) == expected[0]


def test_a_scheduled_pod_explained_by_its_decision():
    evs = [event("Preempting", "Preempting 1 pod(s) on node n0: demo/low", "2026-01-01T00:00:02Z", type_="Normal"),
           event("Scheduled", "bound to n0", "2026-01-01T00:00:03Z", type_="Normal")]
    doc = cmd.explanation(pod(node="n0", decision=DECISION, condition={"status": "True"}), None, evs,
                          default_policy="default")
    assert doc["pod"] == "demo/x" and doc["node"] == "n0" and doc["scheduler"] == "policy-scheduler"
    assert (doc["policy"], doc["policySource"]) == ("spread", "decision")
    assert doc["decision"] == DECISION
    # the per-plugin table explain prints (explain.plugin_table), one row per top node
    assert [r["node"] for r in doc["plugins"]["rows"]] == [t["node"] for t in DECISION["top"]]
    first = DECISION["top"][0]
    assert {p: c["weighted"] for p, c in doc["plugins"]["rows"][0]["cells"].items()} == first["scores"]
    assert doc["plugins"]["rows"][0]["total"] == first["total"]
    assert doc["preemptions"] == ["Preempting 1 pod(s) on node n0: demo/low"]
    assert doc["podScheduled"]["status"] == "True" and doc["lastFailedScheduling"] is None
    assert cmd.explanation(pod(node="n0", decision=DECISION), None, [], default_policy="d",
                           top=2)["decision"]["top"] == DECISION["top"][:2]


def test_an_unscheduled_pod_explained_by_its_policy_condition_and_events():
    evs = [event("FailedScheduling", f"try {i}", f"2026-01-01T00:00:0{i}Z") for i in (3, 1, 2)]
    evs += [event("FailedScheduling", "an earlier pod of that name", "2026-01-01T00:00:09Z", uid="old"),
            event("Pulled", "image", "2026-01-01T00:00:00Z", type_="Normal")]
    evs += [event("Other", f"older {i}", f"2025-12-31T00:00:0{i}Z", type_="Normal") for i in range(3)]
    doc = cmd.explanation(pod(condition=UNSCHEDULABLE), {DEFAULT_POLICY_LABEL: "team"}, evs, default_policy="d")
    assert doc["node"] is None and doc["decision"] is None and doc["phase"] == "Pending"
    assert (doc["policy"], doc["policySource"]) == ("team", "namespaceLabel")
    assert doc["podScheduled"] == UNSCHEDULABLE
    assert doc["lastFailedScheduling"] == {"type": "Warning", "reason": "FailedScheduling", "message": "try 3",
                                           "count": 2, "time": "2026-01-01T00:00:03Z"}
    # the last five of this pod's events, oldest first (not the earlier pod's)
    assert [e["message"] for e in doc["events"]] == ["older 2", "image", "try 1", "try 2", "try 3"]


def test_a_pod_bound_by_another_scheduler_names_no_policy():
    doc = cmd.explanation(pod(node="n0"), None, [], default_policy="d")
    assert doc["policy"] is None and doc["policySource"] is None and doc["decision"] is None


def test_an_unreadable_decision_is_an_error():
    for bad in ("{not json", "[1, 2]"):
        with pytest.raises(ValueError, match="unreadable"):
            cmd.explanation(pod(node="n0", decision=bad), None, [], default_policy="d")


@pytest.fixture
def served(monkeypatch):
    """cmd_explain over pods held here instead of an API server: (pod, namespace labels, events)."""
    answers = {}
    asked = []

    def fetch(a, ns, name):
        asked.append((ns, name))
        if (ns, name) not in answers:
            raise cmd.ExplainError(f"cannot read pod {ns}/{name}: HTTP 404 Not Found")
        return answers[(ns, name)]

    monkeypatch.setattr(cmd, "fetch", fetch)
    monkeypatch.setattr(cmd, "decision_trust", lambda a, pod, cache=None: (None, "no key here"))
    monkeypatch.setattr(cmd, "suggestions_trust", lambda a, pod, cache=None: (None, "no key here"))
    answers["asked"] = asked
    return answers


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_print_only_the_document(served, capsys, output):
    served[("demo", "x")] = pod(node="n0", decision=DECISION), None, []
    served[("demo", "y")] = pod("y", condition=UNSCHEDULABLE), {}, [event("FailedScheduling", "no", "2026-01-01T00:00:01Z")]
    load = json.loads if output == "json" else yaml.safe_load
    for args in (["demo/x"], ["x", "-n", "demo"], ["x", "--namespace", "demo", "--top", "3"]):
        assert cli.main(["explain", *args, "-o", output]) == 0
        out, err = capsys.readouterr()
        doc = load(out)
        assert doc["pod"] == "demo/x" and doc["decision"]["node"] == "n0" and err == ""
        assert len(doc["decision"]["top"]) == (3 if "--top" in args else 5)
    assert cli.main(["explain", "demo/y", "--output", output]) == 0
    out, _ = capsys.readouterr()
    doc = load(out)
    assert doc["decision"] is None and doc["node"] is None
    assert (doc["policy"], doc["policySource"]) == ("default", "default")
    assert doc["podScheduled"]["reason"] == "Unschedulable" and doc["lastFailedScheduling"]["message"] == "no"


def test_text_names_the_policy_an_unscheduled_pod_would_get(served, capsys):
    served[("demo", "y")] = (pod("y", labels={POLICY_LABEL: "gpu"}, condition=UNSCHEDULABLE), None,
                             [event("FailedScheduling", "0/3 nodes", "2026-01-01T00:00:01Z")])
    assert cli.main(["explain", "y", "-n", "demo", "--default-policy", "ours"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "pod demo/y: scheduler policy-scheduler, node (none)",
        f"  policy:    gpu   (would schedule it: the pod's label {POLICY_LABEL})",
        "  not scheduled (Unschedulable): 0/3 nodes are available: 3 Insufficient cpu.",
        "  reasons (nodes per reason):",
        "        3  Insufficient cpu",
        "  event Warning FailedScheduling: 0/3 nodes"]


def test_text_of_a_decision_keeps_its_table_and_top(served, capsys):
    served[("demo", "x")] = pod(node="n0", decision=DECISION), None, []
    assert cli.main(["explain", "demo/x", "--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "pod demo/x: scheduler policy-scheduler, node n0"
    assert "  policy:    spread" in lines
    table = lines[lines.index("  top nodes (weighted score per plugin):") + 2:]
    assert [row.split()[0] for row in table if row.startswith("    n")] == ["n0", "n1"]


def test_errors(served, capsys):
    assert cli.main(["explain", "demo/x", "-n", "other"]) == 2
    assert capsys.readouterr().err == "policy-scheduler explain: 'demo/x' is in namespace demo, --namespace says other\n"
    assert cli.main(["explain", "demo/nope", "-o", "json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == "policy-scheduler explain: cannot read pod demo/nope: HTTP 404 Not Found\n"
    served[("demo", "x")] = pod(node="n0", decision="{"), None, []
    assert cli.main(["explain", "demo/x", "-o", "json"]) == 1
    assert capsys.readouterr() == ("", f"policy-scheduler explain: unreadable {DECISION_ANNOTATION} annotation\n")
    with pytest.raises(SystemExit):
        cli.main(["explain", "demo/x", "--top", "0"])


def test_a_workloads_cluster_chooser_record_is_explained():
    import io

    from policy_scheduler.commands.explain import workload_explanation, write_workload_text

    rec = {"policy": "default", "chosen": "big", "clusters": {
        "small": {"placed": 1, "pods": 2, "preempted": 0, "meanScore": 0.0, "rank": 2},
        "big": {"placed": 2, "pods": 2, "preempted": 0, "meanScore": 431.5, "rank": 1},
        "gone": {"error": "NotRead"}, "hostile": {"error": "KubeconfigRefused", "reason": "ExecPlugin"}}}
    wl = {"metadata": {"namespace": "team", "name": "job-a-1", "annotations": {
        "policy-scheduler.io/cluster-scores": json.dumps(rec)}}, "status": {"clusterName": "big"}}
    events = [{"type": "Normal", "reason": "ClusterNominated", "message": "nominated big under policy default",
               "eventTime": "2026-11-27T10:00:00.000000Z"}]
    doc = workload_explanation(wl, events)
    assert [c["cluster"] for c in doc["clusters"]] == ["big", "small", "gone", "hostile"] and doc["chosen"] == "big"
    out = io.StringIO()
    write_workload_text(doc, out)
    assert out.getvalue().splitlines() == [
        "Workload team/job-a-1: running on big",
        "  policy default; chosen: big",
        "  1. big: 2/2 pods placed, 0 preempted, mean score 431.5",
        "  2. small: 1/2 pods placed, 0 preempted, mean score 0.0",
        "  -  gone: left out: NotRead",
        "  -  hostile: left out: KubeconfigRefused (ExecPlugin)",
        "  event Normal ClusterNominated: nominated big under policy default"]
    # no record, a nomination not admitted yet; a record that is not JSON counts as none
    bare = workload_explanation({"metadata": {"namespace": "t", "name": "w", "annotations": {
        "policy-scheduler.io/cluster-scores": "{"}}, "status": {"nominatedClusterNames": ["w1"]}}, [])
    out = io.StringIO()
    write_workload_text(bare, out)
    assert out.getvalue() == ("Workload t/w: nominated to w1, not admitted there yet\n"
                              "  no record of the MultiKueue cluster chooser (run --multikueue-dispatcher) on it\n")


# ------------------------------------------------------------------ tenant text and verification
def signed_pod(key, decision=json.dumps(DECISION), uid="uid-x", node="n0", mac=None):
    from policy_scheduler.cluster.decision_mac import MAC_ANNOTATION

    p = pod(node=node, decision=decision)
    p["metadata"]["uid"] = uid
    p["metadata"]["annotations"][MAC_ANNOTATION] = mac if mac is not None else key.sign(uid, node, decision)
    return p


def test_the_decision_is_verified_with_the_schedulers_key_when_the_secret_can_be_read(monkeypatch):
    import base64
    import types

    from policy_scheduler.cluster.decision_mac import DecisionKey

    raw = b"k" * 32
    key = DecisionKey(raw)
    secrets = {("ops", "policy-scheduler-decision-key"): {"data": {"key": base64.b64encode(raw).decode()}}}

    def read_secret(a, ns, name):
        if (ns, name) not in secrets:
            raise cmd.ExplainError("HTTP 403 Forbidden")
        return secrets[(ns, name)]

    monkeypatch.setattr(cmd, "read_secret", read_secret)
    a = types.SimpleNamespace(operator_namespace="ops", kubeconfig=None, context=None)
    ok, how = cmd.decision_trust(a, signed_pod(key))
    assert ok is True and "Secret ops/policy-scheduler-decision-key" in how
    # tampered, copied to another pod, signed by another key, no MAC at all
    assert cmd.decision_trust(a, signed_pod(key, mac=key.sign("uid-x", "n0", json.dumps(DECISION) + " ")))[0] is False
    copied = signed_pod(key)
    copied["metadata"]["uid"] = "uid-y"
    assert cmd.decision_trust(a, copied)[0] is False
    assert cmd.decision_trust(a, signed_pod(DecisionKey()))[0] is False
    bare = pod(node="n0", decision=DECISION)
    assert cmd.decision_trust(a, bare) == (False, "it has no policy-scheduler.io/decision-mac")
    # the caller may not read the Secret: not verified, and said why
    other = types.SimpleNamespace(operator_namespace="elsewhere", kubeconfig=None, context=None)
    assert cmd.decision_trust(other, signed_pod(key)) == (
        None, "cannot read the key in Secret elsewhere/policy-scheduler-decision-key: HTTP 403 Forbidden")
    doc = cmd.explanation(signed_pod(key), None, [], default_policy="d", trust=cmd.decision_trust(a, signed_pod(key)))
    assert doc["decisionVerified"] is True


def test_text_marks_an_unverified_decision_and_escapes_control_characters(served, capsys):
    evil = dict(DECISION)
    evil["node"] = "n0\x1b]52;c;Y3VybCBldmlsCg==\x07\n  decision:  verified\x9b2J\u202e"
    served[("demo", "x")] = pod(node="n0", decision=json.dumps(evil)), None, [
        event("Scheduled", "bound \x1b[31mred\x1b[0m", "2026-01-01T00:00:01Z")]
    assert cli.main(["explain", "demo/x"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1] == "  decision:  annotation (user-writable), not verified: no key here"
    assert not any(c in out for c in "\x1b\x07\x9b\u202e")
    assert "n0\\x1b]52;c;Y3VybCBldmlsCg==\\x07\\x0a  decision:  verified\\x9b2J\\u202e" in out
    assert sum(1 for x in lines if x.startswith("  decision:")) == 1  # the fake line stays inside its field
    for output in ("yaml", "json"):
        assert cli.main(["explain", "demo/x", "-o", output]) == 0
        out = capsys.readouterr().out
        assert not any(c in out for c in "\x1b\x07\x9b\u202e"), output
        doc = (yaml.safe_load if output == "yaml" else json.loads)(out)
        assert doc["decisionVerified"] is None and doc["decisionTrust"] == "no key here"


# ---------------------------------------------------------------------------------------------
# a pending pod's reasons, grouped, and the scheduler's suggestions (cluster/suggestions.py)

def suggested_pod(uid="u1", key=None, text=None):
    """A pending pod with the suggestions condition the scheduler writes, signed with ``key`` (no
    key: the document without a mac; ``text``: the message as it is)."""
    from policy_scheduler.cluster.suggestions import condition, document_text
    from policy_scheduler.remedies import Remedies, Suggestion

    r = Remedies("demo/y", [Suggestion("LowerRequest", "Pod", "lower the cpu request to at most 2",
                                       [{"op": "replace", "path": "/spec/containers/0/resources/requests/cpu",
                                         "value": "2"}], 0.33, 3, "n1", 87)],
                 blockers={"NodeResourcesFit": 2, "NodeResourcesFit+TaintToleration": 1})
    doc_text = document_text(r)
    p = pod("y", condition={**UNSCHEDULABLE, "message": "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had "
                            "untolerated taint(s). preemption: 0/5 nodes are available: 5 Preemption is not helpful "
                            "for scheduling."}, uid=uid)
    if text is not None:
        cond = {"type": cmd.SUGGESTIONS, "status": "True", "reason": "Found", "message": text}
    elif key is not None:
        cond = condition(r, doc_text, key.sign_suggestions(uid, doc_text))
    else:
        cond = {"type": cmd.SUGGESTIONS, "status": "True", "reason": "Found", "message": doc_text}
    p["status"]["conditions"].append(cond)
    return p


def suggestions_message(p):
    return next(c for c in p["status"]["conditions"] if c["type"] == cmd.SUGGESTIONS)


def test_grouped_reasons_of_a_failed_scheduling_message():
    assert cmd.grouped_reasons("0/12 nodes are available: 2 Insufficient cpu, 10 node(s) didn't match Pod's node "
                               "affinity/selector. preemption: 0/12 nodes are available: 12 Preemption is not "
                               "helpful for scheduling.") == [
        {"nodes": 10, "reason": "node(s) didn't match Pod's node affinity/selector"},
        {"nodes": 2, "reason": "Insufficient cpu"}]
    for other in (None, 3, "", 'running "X" filter plugin: boom', "0/3 nodes are available: invalid pod spec"):
        assert cmd.grouped_reasons(other) == []


def test_the_suggestions_and_their_verification(monkeypatch):
    from policy_scheduler.cluster.decision_mac import DecisionKey

    key = DecisionKey()
    cache = {"key": (key, "Secret ops/policy-scheduler-decision-key")}
    a = type("A", (), {"operator_namespace": "ops"})()
    p = suggested_pod(key=key)
    assert cmd.suggestions_trust(a, p, cache)[0] is True
    doc = cmd.explanation(p, {}, [], default_policy="default", suggestions_trust=cmd.suggestions_trust(a, p, cache))
    assert doc["reasons"] == [{"nodes": 3, "reason": "node(s) had untolerated taint(s)"},
                              {"nodes": 2, "reason": "Insufficient cpu"}]
    assert doc["blockers"] == {"NodeResourcesFit": 2, "NodeResourcesFit+TaintToleration": 1}
    assert doc["suggestions"]["version"] == 1 and doc["suggestions"]["suggestions"][0]["node"] == "n1"
    assert doc["suggestionsVerified"] is True
    # someone else's text, the mac copied: does not verify; another pod's condition: neither
    forged = suggested_pod(key=key)
    c = suggestions_message(forged)
    c["message"] = c["message"].replace("at most 2", "at most 1")
    assert cmd.suggestions_trust(a, forged, cache)[0] is False
    other = suggested_pod(uid="u2")
    other["status"]["conditions"] = p["status"]["conditions"]
    assert cmd.suggestions_trust(a, other, cache)[0] is False
    unsigned = suggested_pod()
    assert cmd.suggestions_trust(a, unsigned, cache) == (False, "its policy-scheduler.io/Suggestions condition has "
                                                                "no mac")
    assert cmd.suggestions_trust(a, pod("z"), cache) == (None, "no suggestions")
    # a bound pod's condition is the past's: left out
    bound = suggested_pod(key=key)
    bound["spec"]["nodeName"] = "n1"
    assert cmd.explanation(bound, {}, [], default_policy="default")["suggestions"] is None
    # not JSON: said so, nothing else read from it
    bad = cmd.explanation(suggested_pod(text="{no"), {}, [], default_policy="default")
    assert bad["suggestions"] == {"unreadable": "the policy-scheduler.io/Suggestions condition's message is not a "
                                                "JSON object"}


def test_text_and_json_print_the_suggestions(served, capsys, monkeypatch):
    monkeypatch.setattr(cmd, "suggestions_trust", lambda a, pod, cache=None: (True, "its MAC verifies"))
    served[("demo", "y")] = suggested_pod(), {}, []
    assert cli.main(["explain", "demo/y"]) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("  suggestions: verified: written by the scheduler (its MAC verifies)")
    assert out[at + 1] == "    1. lower the cpu request to at most 2: opens 3 nodes (n1 would be chosen) [LowerRequest, Pod]"
    assert out[at + 2].startswith('       patch: [{"op": "replace"')
    assert "  rejected by (nodes per set of filter plugins, every node checked):" in out
    assert "        1  NodeResourcesFit+TaintToleration" in out
    assert cli.main(["explain", "demo/y", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["suggestions"]["suggestions"][0]["kind"] == "LowerRequest" and doc["suggestionsVerified"] is True
    assert doc["suggestionsTrust"] == "its MAC verifies"
