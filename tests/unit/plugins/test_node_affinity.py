"""NodeAffinity: PreFilter node-name sets, Filter on nodeSelector / required terms / addedAffinity,
Score on preferred terms, args validation."""

import numpy as np
import pytest

from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.node_affinity import (ERR_REASON_CONFLICT, ERR_REASON_ENFORCED, ERR_REASON_POD, NAME,
                                                    PLUGIN, parse_int64)
from policy_scheduler.framework.events import ActionType, Resource
from support.kit import QUEUE, SKIP, arg_errors, hint, node, refused, registered

NODE_LABELS = {
    "n1": {"zone": "a", "gpu": "4", "disk": "ssd"},
    "n2": {"zone": "b", "gpu": "8"},
    "n3": {"zone": "c"},
    "n4": {},
    "n5": {"gpu": "many"},
}
ALL = set(NODE_LABELS)


def make_node(name, labels):
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def table(node_labels=NODE_LABELS):
    t = NodeTable()
    for name, labels in node_labels.items():
        t.upsert_node(make_node(name, labels))
    return t


def expr(key, op, *values):
    e = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def term(*exprs, fields=()):
    t = {}
    if exprs:
        t["matchExpressions"] = list(exprs)
    if fields:
        t["matchFields"] = list(fields)
    return t


def make_pod(node_selector=None, required=None, preferred=None):
    na = {}
    if required is not None:
        na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required}
    if preferred is not None:
        na["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "preference": p} for w, p in preferred]
    spec = {"containers": [{"name": "c"}]}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if na:
        spec["affinity"] = {"nodeAffinity": na}
    pod = parse_pod({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})
    assert pod.parse_error is None, pod.parse_error
    return pod


def plugin(args=None):
    return PLUGIN(PLUGIN.Args.model_validate(args or {}), Handle())


def passing(pl, nodes, pod):
    """Run PreFilter then Filter over all rows; names of the nodes that pass."""
    state = CycleState()
    status, _ = pl.pre_filter(state, pod, nodes)
    assert not status.is_rejected
    if status.is_skip:
        return ALL
    res = pl.filter(state, pod, nodes, np.arange(nodes.n))
    if not res.passed.all():
        assert res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    return {nodes.names[r] for r, ok in enumerate(res.passed) if ok}


@pytest.mark.parametrize("pod_kwargs, expected", [
    pytest.param({"node_selector": {"zone": "a"}}, {"n1"}, id="selector"),
    pytest.param({"node_selector": {"zone": "a", "disk": "ssd"}}, {"n1"}, id="selector-all-pairs"),
    pytest.param({"node_selector": {"zone": "b", "disk": "ssd"}}, set(), id="selector-is-anded"),
    pytest.param({"node_selector": {"zone": "A"}}, set(), id="selector-exact-value"),
    pytest.param({"required": [term(expr("zone", "In", "a", "b"))]}, {"n1", "n2"}, id="in"),
    pytest.param({"required": [term(expr("zone", "NotIn", "a"))]}, {"n2", "n3", "n4", "n5"},
                 id="notin-matches-absent-label"),
    pytest.param({"required": [term(expr("gpu", "Exists"))]}, {"n1", "n2", "n5"}, id="exists"),
    pytest.param({"required": [term(expr("gpu", "DoesNotExist"))]}, {"n3", "n4"}, id="doesnotexist"),
    pytest.param({"required": [term(expr("gpu", "Gt", "4"))]}, {"n2"}, id="gt-strict"),
    pytest.param({"required": [term(expr("gpu", "Lt", "8"))]}, {"n1"}, id="lt-strict-non-integer-label-fails"),
    pytest.param({"required": [term(expr("gpu", "Gt", "-1"))]}, {"n1", "n2"}, id="gt-negative-value"),
    pytest.param({"required": [term(expr("gpu", "Gt", "four"))]}, set(), id="gt-non-integer-value"),
    pytest.param({"required": [term(expr("zone", "In", "a"), expr("gpu", "Gt", "5"))]}, set(),
                 id="expressions-are-anded"),
    pytest.param({"required": [term(expr("zone", "In", "a", "b"), expr("gpu", "Gt", "5"))]}, {"n2"},
                 id="expressions-anded-match"),
    pytest.param({"required": [term(expr("zone", "In", "a")), term(expr("zone", "In", "c"))]}, {"n1", "n3"},
                 id="terms-are-ored"),
    pytest.param({"required": [term(), term(expr("zone", "In", "b"))]}, {"n2"}, id="empty-term-skipped"),
    pytest.param({"required": [term()]}, set(), id="only-empty-term-matches-nothing"),
    pytest.param({"required": [term(fields=[expr("metadata.name", "In", "n3")])]}, {"n3"}, id="field-in"),
    pytest.param({"required": [term(fields=[expr("metadata.name", "NotIn", "n3")])]}, ALL - {"n3"},
                 id="field-notin"),
    pytest.param({"required": [term(expr("zone", "In", "a", "c"), fields=[expr("metadata.name", "In", "n3")])]},
                 {"n3"}, id="expressions-and-fields-anded"),
    pytest.param({"node_selector": {"zone": "a"}, "required": [term(expr("gpu", "Gt", "4"))]}, set(),
                 id="selector-and-affinity-both-required"),
    pytest.param({"node_selector": {"zone": "b"}, "required": [term(expr("gpu", "Gt", "4"))]}, {"n2"},
                 id="selector-and-affinity-match"),
    pytest.param({"preferred": [(10, term(expr("zone", "In", "a")))]}, ALL, id="preferred-only-does-not-filter"),
])
def test_filter(pod_kwargs, expected):
    assert passing(plugin(), table(), make_pod(**pod_kwargs)) == expected


def test_filter_reason_and_row_alignment():
    nodes = table()
    pl, state, pod = plugin(), CycleState(), make_pod(node_selector={"zone": "b"})
    pl.pre_filter(state, pod, nodes)
    rows = np.array([nodes.index["n2"], nodes.index["n4"], nodes.index["n1"]])
    res = pl.filter(state, pod, nodes, rows)
    assert res.passed.tolist() == [True, False, False]
    assert res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert [(r, m.tolist()) for r, m in res.reasons] == [(ERR_REASON_POD, [False, True, True])]


@pytest.mark.parametrize("value, parsed", [
    ("42", 42), ("+5", 5), ("-7", -7), ("007", 7),
    ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -2**63),
    ("9223372036854775808", None), ("1_0", None), (" 5", None), ("5 ", None), ("", None), ("0x10", None),
    ("1e3", None),
])
def test_parse_int64_is_go_parseint(value, parsed):
    assert parse_int64(value) == parsed


def test_gt_rejects_label_beyond_int64():
    nodes = table({"big": {"v": "9223372036854775808"}, "max": {"v": "9223372036854775807"}})
    pod = make_pod(required=[term(expr("v", "Gt", "0"))])
    assert passing(plugin(), nodes, pod) == {"max"}


def test_label_changes_invalidate_cached_masks():
    nodes = table()
    pod = make_pod(node_selector={"zone": "a"})
    assert passing(plugin(), nodes, pod) == {"n1"}
    nodes.upsert_node(make_node("n3", {"zone": "a"}))
    assert passing(plugin(), nodes, pod) == {"n1", "n3"}
    nodes.remove_node("n1")
    assert passing(plugin(), nodes, pod) == {"n3"}


NAME_IN = lambda *names: expr("metadata.name", "In", *names)  # noqa: E731


@pytest.mark.parametrize("pod_kwargs, args, code, names", [
    pytest.param({}, None, Code.SKIP, None, id="nothing-to-check-skips"),
    pytest.param({"preferred": [(5, term(expr("zone", "In", "a")))]}, None, Code.SKIP, None,
                 id="preferred-only-skips"),
    pytest.param({}, {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term(expr("zone", "Exists"))]}}}, Code.SUCCESS, None,
        id="added-affinity-does-not-skip"),
    pytest.param({"node_selector": {"zone": "a"}}, None, Code.SUCCESS, None, id="selector-no-node-set"),
    pytest.param({"required": [term(fields=[NAME_IN("n1")])]}, None, Code.SUCCESS, {"n1"}, id="single-name"),
    pytest.param({"required": [term(fields=[NAME_IN("n1")]), term(fields=[NAME_IN("n2")])]}, None,
                 Code.SUCCESS, {"n1", "n2"}, id="union-over-terms"),
    pytest.param({"required": [term(fields=[NAME_IN("n1"), NAME_IN("n1")])]}, None, Code.SUCCESS, {"n1"},
                 id="intersection-within-term"),
    pytest.param({"required": [term(expr("zone", "Exists"), fields=[NAME_IN("gone")])]}, None,
                 Code.SUCCESS, {"gone"}, id="names-need-not-exist"),
    pytest.param({"required": [term(fields=[NAME_IN("n1")]), term(expr("zone", "In", "a"))]}, None,
                 Code.SUCCESS, None, id="term-without-names-lifts-restriction"),
    pytest.param({"required": [term(fields=[NAME_IN("n1")]), term()]}, None, Code.SUCCESS, None,
                 id="empty-term-lifts-restriction"),
    pytest.param({"required": [term(fields=[expr("metadata.name", "NotIn", "n1")])]}, None, Code.SUCCESS, None,
                 id="notin-does-not-restrict"),
    pytest.param({"required": [term(fields=[NAME_IN("n1"), NAME_IN("n2")])]}, None,
                 Code.UNSCHEDULABLE_AND_UNRESOLVABLE, None, id="conflict"),
])
def test_pre_filter(pod_kwargs, args, code, names):
    status, result = plugin(args).pre_filter(CycleState(), make_pod(**pod_kwargs), table())
    assert status.code == code
    assert result == names
    if code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
        assert status.reasons == (ERR_REASON_CONFLICT,)


ADDED_ZONES_AB = {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [term(expr("zone", "In", "a", "b"))]}}}


def test_added_affinity_is_checked_first_with_its_own_reason():
    nodes = table()
    pl, state, pod = plugin(ADDED_ZONES_AB), CycleState(), make_pod(node_selector={"gpu": "8"})
    pl.pre_filter(state, pod, nodes)
    res = pl.filter(state, pod, nodes, np.arange(nodes.n))
    # n1: zone a passes added, gpu 4 fails the pod; n2 passes both; n3-n5 fail added (checked first)
    assert res.passed.tolist() == [False, True, False, False, False]
    assert res.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert [(r, m.tolist()) for r, m in res.reasons] == [
        (ERR_REASON_ENFORCED, [False, False, True, True, True]),
        (ERR_REASON_POD, [True, False, False, False, False]),
    ]


def test_added_affinity_alone_filters_pods_without_affinity():
    assert passing(plugin(ADDED_ZONES_AB), table(), make_pod()) == {"n1", "n2"}


def test_added_affinity_with_no_terms_matches_no_node():
    args = {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    assert passing(plugin(args), table(), make_pod()) == set()


def run_score(pl, nodes, pod, rows=None):
    rows = np.arange(nodes.n) if rows is None else np.asarray(rows)
    state = CycleState()
    status = pl.pre_score(state, pod, nodes, rows)
    if status.is_skip:
        return None
    raw = pl.score(state, pod, nodes, rows)
    return raw.tolist(), pl.normalize_score(state, pod, nodes, rows, raw).tolist()


PREFERRED = [(10, term(expr("zone", "In", "a"))), (5, term(expr("gpu", "Exists"))),
             (0, term(expr("zone", "In", "b"))), (7, term())]


@pytest.mark.parametrize("preferred, args, expected", [
    # raw n1..n5 = 10+5, 5, 0, 0, 5 (weight-0 and empty terms ignored); 100*raw//15 -> 100, 33, 0, 0, 33
    pytest.param(PREFERRED, None, ([15, 5, 0, 0, 5], [100, 33, 0, 0, 33]), id="pod-preferred"),
    # + added weight 3 on zone c: n3 = 3 -> 100*3//15 = 20
    pytest.param(PREFERRED, {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 3, "preference": term(expr("zone", "In", "c"))}]}},
        ([15, 5, 3, 0, 5], [100, 33, 20, 0, 33]), id="pod-and-added-preferred"),
    # added only: n3 raw 3 = max -> 100
    pytest.param(None, {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 3, "preference": term(expr("zone", "In", "c"))}]}},
        ([0, 0, 3, 0, 0], [0, 0, 100, 0, 0]), id="added-preferred-only"),
    # nothing matches: all raw 0 stay 0 (not reversed)
    pytest.param([(4, term(expr("zone", "In", "zz")))], None, ([0, 0, 0, 0, 0], [0, 0, 0, 0, 0]),
                 id="all-zero"),
    # only weight-0 terms: not skipped, scores 0
    pytest.param([(0, term(expr("zone", "In", "a")))], None, ([0, 0, 0, 0, 0], [0, 0, 0, 0, 0]),
                 id="weight-zero-only"),
    # field preference: metadata.name In n4 weight 9 -> 100 on n4
    pytest.param([(9, term(fields=[expr("metadata.name", "In", "n4")]))], None,
                 ([0, 0, 0, 9, 0], [0, 0, 0, 100, 0]), id="field-preference"),
    pytest.param(None, None, None, id="skip-without-preferred-terms"),
    pytest.param(None, ADDED_ZONES_AB, None, id="added-required-does-not-score"),
])
def test_score(preferred, args, expected):
    assert run_score(plugin(args), table(), make_pod(preferred=preferred)) == expected


def test_score_on_a_subset_of_rows():
    nodes = table()
    rows = [nodes.index["n2"], nodes.index["n3"]]
    # n2 raw 5 (gpu exists), n3 raw 0 -> 100*5//5 = 100, 0
    assert run_score(plugin(), nodes, make_pod(preferred=PREFERRED), rows) == ([5, 0], [100, 0])


REQ = "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution"
PREF = "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution"


def required_args(*terms):
    return {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def preferred_args(*weighted):
    return {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": w, "preference": t} for w, t in weighted]}}


# upstream ValidateNodeAffinityArgs: nodeaffinity.NewNodeSelector / NewPreferredSchedulingTerms, i.e.
# labels.NewRequirement per expression; its verdicts and messages
@pytest.mark.parametrize("args, path, detail", [
    pytest.param(required_args(term(expr("zone", "Near", "a"))), f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].operator",
                 'Unsupported value: "Near": supported values: "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"',
                 id="bad-operator"),
    pytest.param(required_args(term(expr("zone", "In"))), f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values",
                 "Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty",
                 id="in-without-values"),
    pytest.param(required_args(term(expr("zone", "NotIn"))), f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values",
                 "values set can't be empty", id="notin-without-values"),
    pytest.param(required_args(term(expr("zone", "Exists", "a"))),
                 f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values",
                 "values set must be empty for exists and does not exist", id="exists-with-values"),
    pytest.param(required_args(term(expr("zone", "DoesNotExist", "a"))),
                 f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values",
                 "values set must be empty for exists and does not exist", id="doesnotexist-with-values"),
    pytest.param(required_args(term(expr("gpu", "Gt", "1", "2"))),
                 f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values",
                 "for 'Gt', 'Lt' operators, exactly one value is required", id="gt-two-values"),
    pytest.param(required_args(term(expr("gpu", "Lt"))), f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values",
                 "exactly one value is required", id="lt-no-value"),
    pytest.param(required_args(term(expr("gpu", "Gt", "1.5"))),
                 f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values[0]",
                 'Invalid value: "1.5": for \'Gt\', \'Lt\' operators, the value must be an integer', id="gt-float"),
    pytest.param(required_args(term(expr("gpu", "Gt", "9223372036854775808"))),
                 f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values[0]", "the value must be an integer",
                 id="gt-beyond-int64"),
    # Gt/Lt values are label values too (labels.NewRequirement): a sign is refused, as upstream
    pytest.param(required_args(term(expr("gpu", "Lt", "-5"))),
                 f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values[0][gpu]", 'Invalid value: "-5"',
                 id="lt-negative"),
    pytest.param(preferred_args((1, term(expr("gpu", "Gt", "lots")))),
                 f"{PREF}[0].preference.matchExpressions[0].values[0]", "the value must be an integer",
                 id="gt-non-integer"),
    pytest.param(required_args(term(expr("-zone", "Exists"))), f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].key",
                 'Invalid value: "-zone": name part must consist of alphanumeric characters', id="bad-key"),
    pytest.param(required_args(term(expr("a/b/c", "Exists"))), f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].key",
                 "a valid label key must consist of", id="key-two-slashes"),
    pytest.param(required_args(term(expr("Example.com/zone", "Exists"))),
                 f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].key", "prefix part a lowercase RFC 1123 subdomain",
                 id="key-uppercase-prefix"),
    pytest.param(required_args(term(expr("zone", "In", "a b"))),
                 f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values[0][zone]",
                 'Invalid value: "a b": a valid label must be an empty string', id="bad-value"),
    pytest.param(required_args(term(expr("zone", "In", "x" * 64))),
                 f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values[0]", "Too long: may not be more than 63 bytes",
                 id="value-too-long"),
    pytest.param(required_args(term(fields=[expr("metadata.name", "In", "a", "b")])),
                 f"{REQ}.nodeSelectorTerms[0].matchFields[0].values",
                 'Invalid value: []string{"a", "b"}: must have one element', id="field-two-values"),
    pytest.param(required_args(term(fields=[expr("metadata.name", "Exists")])),
                 f"{REQ}.nodeSelectorTerms[0].matchFields[0].operator",
                 'Unsupported value: "Exists": supported values: "In", "NotIn"', id="field-operator"),
    pytest.param(required_args(term(fields=[expr("metadata.labels", "In", "x")])),
                 f"{REQ}.nodeSelectorTerms[0].matchFields[0].key", 'Unsupported value: "metadata.labels"',
                 id="field-key"),
    pytest.param(required_args(*[term(expr("zone", "Exists"))] * 33), f"{REQ}.nodeSelectorTerms",
                 "Too many: 33: must have at most 32 items", id="too-many-terms"),
    pytest.param(required_args(term(expr("zone", "In", *[f"z{i}" for i in range(129)]))),
                 f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].values", "Too many: 129", id="too-many-values"),
    pytest.param(preferred_args((2**31, term(expr("gpu", "Exists")))), f"{PREF}[0].weight",
                 "must fit in a 32-bit integer", id="weight-beyond-int32"),
    pytest.param({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": "heavy", "preference": term(expr("gpu", "Exists"))}]}}, f"{PREF}[0].weight",
        'Invalid value: "heavy": must be an integer', id="weight-not-int"),
    pytest.param({"addedAffinity": {"requiredDuringSchedulingRequiredDuringExecution": {}}},
                 "addedAffinity.requiredDuringSchedulingRequiredDuringExecution", "Extra inputs are not permitted",
                 id="unknown-affinity-field"),
    pytest.param({"addedAffinity": [1]}, "addedAffinity", "must be an object", id="not-an-object"),
    pytest.param({"hardAffinity": {}}, "hardAffinity", "Extra inputs are not permitted", id="unknown-arg"),
])
def test_args_validation(args, path, detail):
    refused(NAME, args, path, detail)


def test_args_validation_reports_required_and_preferred_problems_together():
    args = {"addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term(expr("a", "Foo"))]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": term(expr("b", "In"))}]}}
    assert [e.split(": ")[0] for e in arg_errors(NAME, args)] == [
        f"{REQ}.nodeSelectorTerms[0].matchExpressions[0].operator", f"{PREF}[0].preference.matchExpressions[0].values"]


@pytest.mark.parametrize("args", [
    pytest.param({}, id="no-args"),
    pytest.param(required_args(), id="no-terms"),  # accepted; matches no node
    pytest.param(required_args({}), id="empty-term"),  # not parsed: selects nothing
    pytest.param(required_args(term(expr("gpu", "Gt", "3")), term(expr("gpu", "Lt", "0010"))), id="ints"),
    pytest.param(required_args(term(expr("zone", "In", "")), term(expr("zone", "DoesNotExist"))), id="empty-value"),
    pytest.param(required_args(term(expr("example.com/zone", "NotIn", "a", "b"))), id="prefixed-key"),
    pytest.param(required_args(term(fields=[expr("metadata.name", "NotIn", "n1")])), id="field"),
    pytest.param(preferred_args((0, term(expr("zone", "Near", "a"))), (3, {})), id="skipped-preferred"),
    pytest.param(preferred_args((-5, term(expr("zone", "In", "a")))), id="negative-weight"),  # upstream: no check
])
def test_args_accepted(args):
    assert arg_errors(NAME, args) == []


def test_added_preferred_terms_with_weight_zero_or_no_requirements_are_not_parsed():
    # upstream NewPreferredSchedulingTerms skips them before parsing, so a bad operator there is no error
    args = {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "preference": term(expr("zone", "Near", "a"))},
        {"weight": 4, "preference": {}},
        {"weight": 2, "preference": term(expr("zone", "In", "b"))}]}}
    pl = plugin(args)
    assert [w for w, _ in pl.added_preferred] == [2]
    # only n2 (zone b) scores: raw 2 -> 100
    assert run_score(pl, table(), make_pod()) == ([0, 2, 0, 0, 0], [0, 100, 0, 0, 0])


def test_args_defaults_and_aliases():
    assert PLUGIN.Args.model_validate({}).added_affinity is None
    args = PLUGIN.Args.model_validate(ADDED_ZONES_AB)
    assert args.added_affinity.as_dict() == ADDED_ZONES_AB["addedAffinity"]


# ------------------------------------------------------------------ events and queueing hints
A, T = ActionType, Resource
ADDED = {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [term(expr("pool", "In", "batch"))]}}}


def test_events_to_register():
    assert registered(plugin()) == [(T.NODE, A.ADD), (T.NODE, A.UPDATE_NODE_LABEL)]


# upstream isSchedulableAfterNodeChange: Skip unless the new node matches the pod's nodeSelector and
# required terms (and the profile's addedAffinity); a new node then queues, an updated one only if
# it did not match before.
@pytest.mark.parametrize("args, pod, action, old, new, want", [
    (None, make_pod({"zone": "a"}), A.ADD, None, node("x", {"zone": "a"}), QUEUE),
    (None, make_pod({"zone": "a"}), A.ADD, None, node("x", {"zone": "b"}), SKIP),
    (None, make_pod(), A.ADD, None, node("x"), QUEUE),  # nothing required: any node matches
    (None, make_pod(required=[term(expr("gpu", "Exists"))]), A.ADD, None, node("x", {"gpu": "1"}), QUEUE),
    (None, make_pod(required=[term(fields=[expr("metadata.name", "In", "y")])]), A.ADD, None, node("x"), SKIP),
    (None, make_pod({"zone": "a"}), A.UPDATE_NODE_LABEL, node("x", {"zone": "b"}), node("x", {"zone": "a"}), QUEUE),
    (None, make_pod({"zone": "a"}), A.UPDATE_NODE_LABEL, node("x", {"zone": "a"}),
     node("x", {"zone": "a", "new": "1"}), SKIP),  # matched before: nothing changes for the pod
    (None, make_pod({"zone": "a"}), A.UPDATE_NODE_LABEL, node("x", {"zone": "a"}), node("x", {"zone": "b"}), SKIP),
    (None, make_pod(required=[term(expr("gpu", "Gt", "2"))]), A.UPDATE_NODE_LABEL, node("x", {"gpu": "2"}),
     node("x", {"gpu": "3"}), QUEUE),
    # addedAffinity: the node must match the scheduler-enforced selector too
    (ADDED, make_pod(), A.ADD, None, node("x", {"pool": "web"}), SKIP),
    (ADDED, make_pod(), A.ADD, None, node("x", {"pool": "batch"}), QUEUE),
    (ADDED, make_pod({"zone": "a"}), A.UPDATE_NODE_LABEL, node("x", {"zone": "a", "pool": "web"}),
     node("x", {"zone": "a", "pool": "batch"}), QUEUE),  # the enforced selector now matches
])
def test_node_change_hint(args, pod, action, old, new, want):
    assert hint(plugin(args), T.NODE, action, pod, old, new) == want
