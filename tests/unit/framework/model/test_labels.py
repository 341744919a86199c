"""Label selectors (apimachinery LabelSelectorAsSelector) and node selector terms
(component-helpers nodeaffinity) against upstream matching rules."""

from __future__ import annotations

import pytest

from policy_scheduler.framework.model.labels import (
    EVERYTHING,
    NOTHING,
    LabelSelector,
    NodeSelector,
    NodeSelectorTerm,
    Requirement,
    SelectorError,
)

LABELS = {"app": "web", "tier": "front", "zone": "a"}


def expr(key, op, *values):
    d = {"key": key, "operator": op}
    if values:
        d["values"] = list(values)
    return d


# ---------------------------------------------------------------- LabelSelector

def test_nil_selector_matches_nothing_and_empty_matches_everything():
    nil = LabelSelector.parse(None)
    empty = LabelSelector.parse({})
    assert nil is NOTHING and nil.nothing and not nil.empty
    assert empty.empty and not empty.nothing
    for labels in ({}, LABELS):
        assert not nil.matches(labels)
        assert empty.matches(labels)
    assert EVERYTHING.matches({}) and not NOTHING.matches(LABELS)
    # {"matchLabels": {}} / {"matchExpressions": []} are still the empty selector
    assert LabelSelector.parse({"matchLabels": {}, "matchExpressions": []}).matches({})


@pytest.mark.parametrize("selector, labels, want", [
    ({"matchLabels": {"app": "web"}}, LABELS, True),
    ({"matchLabels": {"app": "db"}}, LABELS, False),
    ({"matchLabels": {"app": "web", "tier": "back"}}, LABELS, False),  # all pairs must hold
    ({"matchExpressions": [expr("app", "In", "db", "web")]}, LABELS, True),
    ({"matchExpressions": [expr("app", "In", "db")]}, LABELS, False),
    ({"matchExpressions": [expr("missing", "In", "x")]}, LABELS, False),  # In needs the key
    ({"matchExpressions": [expr("app", "NotIn", "db")]}, LABELS, True),
    ({"matchExpressions": [expr("app", "NotIn", "web")]}, LABELS, False),
    ({"matchExpressions": [expr("missing", "NotIn", "x")]}, LABELS, True),  # NotIn matches an absent key
    ({"matchExpressions": [expr("app", "Exists")]}, LABELS, True),
    ({"matchExpressions": [expr("missing", "Exists")]}, LABELS, False),
    ({"matchExpressions": [expr("missing", "DoesNotExist")]}, LABELS, True),
    ({"matchExpressions": [expr("app", "DoesNotExist")]}, LABELS, False),
    # matchLabels AND matchExpressions
    ({"matchLabels": {"app": "web"}, "matchExpressions": [expr("tier", "In", "back")]}, LABELS, False),
    ({"matchLabels": {"app": "web"}, "matchExpressions": [expr("tier", "In", "front")]}, LABELS, True),
    ({"matchExpressions": [expr("app", "Exists"), expr("zone", "NotIn", "a")]}, LABELS, False),
    # the empty label set
    ({"matchExpressions": [expr("app", "DoesNotExist")]}, {}, True),
    ({"matchLabels": {"app": "web"}}, {}, False),
])
def test_label_selector_matching(selector, labels, want):
    assert LabelSelector.parse(selector).matches(labels) is want


@pytest.mark.parametrize("selector, field", [
    ({"matchExpressions": [expr("app", "Gt", "1")]}, "sel.matchExpressions[0].operator"),  # not for pods
    ({"matchExpressions": [expr("app", "Equals", "x")]}, "sel.matchExpressions[0].operator"),
    ({"matchExpressions": [expr("a", "Exists"), expr("app", "In")]}, "sel.matchExpressions[1].values"),
    ({"matchExpressions": [expr("app", "NotIn")]}, "sel.matchExpressions[0].values"),
    ({"matchExpressions": [expr("app", "Exists", "x")]}, "sel.matchExpressions[0].values"),
    ({"matchExpressions": [expr("app", "DoesNotExist", "x")]}, "sel.matchExpressions[0].values"),
    ({"matchExpressions": [{"operator": "Exists"}]}, "sel.matchExpressions[0].key"),
    ({"matchExpressions": ["app"]}, "sel.matchExpressions[0]"),
    ("app=web", "sel"),
])
def test_label_selector_errors_name_the_field(selector, field):
    with pytest.raises(SelectorError) as e:
        LabelSelector.parse(selector, "sel")
    assert str(e.value).startswith(field + ":")


def test_a_null_label_value_is_the_empty_string_as_go_reads_it():
    """Go decodes JSON null into a string as "": {app: null} is app="" (never the text "None"),
    in the parsed selector, in node selector terms and in the models policies are written with
    (NodeLabelMatch's podSelector: tests/unit/plugins/test_node_label_match.py)."""
    from policy_scheduler.framework.model.labels import LabelSelectorSpec, NodeSelectorTermSpec

    for sel in (LabelSelector.parse({"matchLabels": {"app": None}}),
                LabelSelector.parse({"matchExpressions": [expr("app", "In", None)]}),
                LabelSelectorSpec.model_validate({"matchLabels": {"app": None}}).selector(),
                LabelSelectorSpec.model_validate({"matchExpressions": [expr("app", "In", None)]}).selector()):
        assert sel.requirements == (Requirement("app", "In", ("",)),)
        assert sel.matches({"app": ""}) and not sel.matches({"app": "None"}) and not sel.matches({})
    term = NodeSelectorTerm.parse({"matchExpressions": [expr("zone", "NotIn", None, "a")]}, "t")
    assert term.expressions == (Requirement("zone", "NotIn", ("", "a")),)
    assert term.matches({"zone": "b"}, "n") and not term.matches({"zone": ""}, "n")
    spec = NodeSelectorTermSpec.model_validate({"matchExpressions": [expr("zone", "In", None)]})
    assert spec.as_dict()["matchExpressions"][0]["values"] == [""]


def test_and_labels_merges_pairs_and_keeps_nil_nothing():
    sel = LabelSelector.parse({"matchLabels": {"app": "web"}})
    merged = sel.and_labels({"tier": "front"})
    assert merged.matches(LABELS)
    assert not merged.matches({"app": "web", "tier": "back"})
    assert sel.and_labels({}) is sel
    # upstream mergeLabelSetWithSelector returns labels.Nothing() unchanged
    assert NOTHING.and_labels({"app": "web"}) is NOTHING
    assert not NOTHING.and_labels({"app": "web"}).matches(LABELS)
    # the empty selector ANDed with pairs is no longer empty
    assert not EVERYTHING.and_labels({"app": "db"}).matches(LABELS)


# ---------------------------------------------------------------- node selector terms

def term(*exprs, fields=()):
    d = {}
    if exprs:
        d["matchExpressions"] = list(exprs)
    if fields:
        d["matchFields"] = list(fields)
    return NodeSelectorTerm.parse(d, "t")


@pytest.mark.parametrize("op, want_value, label, matches", [
    ("Gt", "5", "6", True),
    ("Gt", "5", "5", False),
    ("Lt", "5", "4", True),
    ("Lt", "5", "5", False),
    ("Gt", "-3", "-2", True),
    ("Gt", "+5", "6", True),  # ParseInt accepts a leading sign
    ("Lt", "10", "9", True),  # integer, not string, comparison ("9" > "10" as strings)
    ("Gt", "5", "abc", False),  # non-integer label value -> no match
    ("Gt", "5", "6.0", False),
    ("Gt", "5", "1_000", False),  # Go's ParseInt(s, 10, 64) rejects underscores
    ("Gt", "5", " 6", False),  # ... and spaces
    ("Gt", "5", "", False),
    ("Gt", "5", "99999999999999999999", False),  # out of int64 range -> parse error
    ("Lt", "5", "-99999999999999999999", False),
    ("Gt", "x", "6", False),  # non-integer requirement value -> the term matches nothing
    ("Lt", "1e3", "6", False),
    ("Gt", "9223372036854775806", "9223372036854775807", True),  # int64 max still parses
])
def test_gt_lt_parse_both_sides_as_int64(op, want_value, label, matches):
    t = term(expr("n", op, want_value))
    assert t.matches({"n": label}, "node-1") is matches


@pytest.mark.parametrize("op", ["Gt", "Lt"])
def test_gt_lt_need_the_label(op):
    assert not term(expr("n", op, "5")).matches({}, "node-1")


@pytest.mark.parametrize("fields, name, want", [
    ([expr("metadata.name", "In", "node-1")], "node-1", True),
    ([expr("metadata.name", "In", "node-1")], "node-2", False),
    ([expr("metadata.name", "NotIn", "node-1")], "node-2", True),
    ([expr("metadata.name", "NotIn", "node-1")], "node-1", False),
])
def test_match_fields_on_metadata_name(fields, name, want):
    assert term(fields=fields).matches({}, name) is want


def test_term_ands_expressions_and_fields():
    t = term(expr("zone", "In", "a"), fields=[expr("metadata.name", "In", "node-1")])
    assert t.matches({"zone": "a"}, "node-1")
    assert not t.matches({"zone": "b"}, "node-1")
    assert not t.matches({"zone": "a"}, "node-2")


def test_empty_term_matches_nothing():
    empty = NodeSelectorTerm.parse({}, "t")
    assert empty.empty
    assert not empty.matches({}, "node-1")
    assert not empty.matches(LABELS, "node-1")
    assert not NodeSelectorTerm.parse({"matchExpressions": [], "matchFields": []}, "t").matches(LABELS, "n")


def test_node_selector_ors_terms_and_skips_empty_ones():
    sel = NodeSelector.parse({"nodeSelectorTerms": [
        {},
        {"matchExpressions": [expr("zone", "In", "b")]},
        {"matchFields": [expr("metadata.name", "In", "special")]},
    ]}, "req")
    assert sel.matches({"zone": "b"}, "node-1")
    assert sel.matches({"zone": "a"}, "special")
    assert not sel.matches({"zone": "a"}, "node-1")
    only_empty = NodeSelector.parse({"nodeSelectorTerms": [{}]}, "req")
    assert not only_empty.matches(LABELS, "node-1")


@pytest.mark.parametrize("d, field", [
    ({"nodeSelectorTerms": []}, "req.nodeSelectorTerms"),
    ({}, "req.nodeSelectorTerms"),
    ({"nodeSelectorTerms": [{"matchExpressions": [expr("a", "Foo", "1")]}]},
     "req.nodeSelectorTerms[0].matchExpressions[0].operator"),
    ({"nodeSelectorTerms": [{}, {"matchExpressions": [expr("a", "Exists"), expr("b", "Gt", "1", "2")]}]},
     "req.nodeSelectorTerms[1].matchExpressions[1].values"),
    ({"nodeSelectorTerms": [{"matchExpressions": [expr("a", "Gt")]}]},
     "req.nodeSelectorTerms[0].matchExpressions[0].values"),
    ({"nodeSelectorTerms": [{"matchFields": [expr("metadata.labels", "In", "x")]}]},
     "req.nodeSelectorTerms[0].matchFields[0].key"),
    ({"nodeSelectorTerms": [{"matchFields": [expr("metadata.name", "In", "a", "b")]}]},
     "req.nodeSelectorTerms[0].matchFields[0].values"),
    ({"nodeSelectorTerms": [{"matchFields": [expr("metadata.name", "Exists")]}]},
     "req.nodeSelectorTerms[0].matchFields[0].operator"),
    ({"nodeSelectorTerms": ["x"]}, "req.nodeSelectorTerms[0]"),
])
def test_node_selector_errors_name_the_field(d, field):
    with pytest.raises(SelectorError) as e:
        NodeSelector.parse(d, "req")
    assert str(e.value).startswith(field + ":")


def test_requirement_with_unknown_operator_matches_nothing():
    assert not Requirement("app", "Bogus", ("web",)).matches(LABELS)
