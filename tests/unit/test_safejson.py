"""safejson: orjson for what orjson reads; for a document nested deeper than it reads, every
subtree past MAX_DEPTH replaced by a marker, in one linear scan that steps over strings."""

from __future__ import annotations

import time

import orjson
import pytest

from policy_scheduler.safejson import MAX_DEPTH, UNREADABLE, Unreadable, loads, tolerant, unreadable


def nested(levels: int, leaf: bytes = b"1") -> bytes:
    """``{"a":{"a":...leaf...}}``: ``levels`` objects deep."""
    return b'{"a":' * levels + leaf + b"}" * levels


def page(*items: bytes) -> bytes:
    return b'{"kind":"List","metadata":{"resourceVersion":"7"},"items":[' + b",".join(items) + b"]}"


def obj(name: str, spec: bytes) -> bytes:
    return b'{"metadata":{"name":"' + name.encode() + b'"},"spec":' + spec + b"}"


def depth_of_marker(doc) -> int:
    """The level at which the marker sits under the chain of "a" keys."""
    d = 0
    while isinstance(doc, dict):
        doc, d = doc["a"], d + 1
    assert doc is UNREADABLE
    return d


def test_what_orjson_reads_is_read_by_orjson():
    raw = page(obj("a", b'{"plugins":[{"name":"NodeResourcesFit"}]}'))
    assert loads(raw) == orjson.loads(raw)
    assert loads(raw.decode()) == orjson.loads(raw)
    assert tolerant(raw) == (orjson.loads(raw), 0)


@pytest.mark.parametrize("levels", [1_025, 1_100, 10_000])
def test_a_page_with_one_object_too_deep_delivers_every_object(levels):
    deep = obj("deep", b'{"plugins":[{"name":"NodeAffinity","args":{"addedAffinity":' + nested(levels) + b"}}]}")
    raw = page(obj("before", b'{"x":"[{\\"}"}'), deep, obj("after", b"{}"))
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    doc = loads(raw)
    items = doc["items"]
    assert [i["metadata"]["name"] for i in items] == ["before", "deep", "after"]
    assert items[0]["spec"] == {"x": '[{"}'} and items[2]["spec"] == {}
    assert doc["metadata"] == {"resourceVersion": "7"}
    added = items[1]["spec"]["plugins"][0]["args"]["addedAffinity"]
    # the page is level 1, items 2, the object 3, spec 4, plugins 5, the entry 6, args 7, addedAffinity's
    # object 8: levels 8 to MAX_DEPTH are kept
    assert depth_of_marker(added) == MAX_DEPTH - 7
    assert isinstance(UNREADABLE, Unreadable) and isinstance(UNREADABLE, str)
    assert orjson.loads(orjson.dumps(doc))["items"][1]["metadata"] == {"name": "deep"}  # it serializes


def test_brackets_and_quotes_inside_strings_are_text():
    tricky = '[[[{{ \\" \\\\ ]]] }} \\u005b \\\\'
    raw = b'{"s":"' + tricky.encode() + b'","deep":' + nested(1_200) + b',"t":"}]"}'
    doc, cut = tolerant(raw, 4)
    assert cut == 1
    assert doc["s"] == orjson.loads(b'"' + tricky.encode() + b'"') and doc["t"] == "}]"
    assert doc["deep"]["a"]["a"]["a"] == "<unreadable: nested deeper than 4 levels>"


def test_several_deep_subtrees_each_become_a_marker():
    raw = b"[" + b",".join([nested(2_000)] * 3 + [b'"plain"']) + b"]"
    doc, cut = tolerant(raw, 2)
    assert cut == 3 and doc == [{"a": unreadable(2)}] * 3 + ["plain"]
    assert all(type(x["a"]) is Unreadable for x in doc[:3]) and type(doc[3]) is str


def test_a_string_that_looks_like_the_marker_stays_a_string():
    raw = b'{"v":"<unreadable: nested deeper than 128 levels>","w":' + nested(1_100) + b"}"
    doc = loads(raw)
    assert doc["v"] == UNREADABLE and type(doc["v"]) is str  # written by someone: not a marker
    assert type(doc["w"]) is dict


@pytest.mark.parametrize("raw", [
    b'{"a": "unterminated' + b"[" * 2_000,
    b"[" * 2_000 + b"]" * 1_999,
    b"[" * 2_000 + b"}" * 2_000,
    b"]",
    b"[1 2," + b"[" * 2_000 + b"]" * 2_000 + b"]",  # broken outside the subtree replaced
    b'{"a":1}garbage',
    b"",
    b"\xff\xfe",
])
def test_what_is_not_json_is_refused(raw):
    with pytest.raises(ValueError):
        loads(raw)


def test_linear_time_and_no_recursion_at_any_depth():
    t0 = time.perf_counter()
    for levels in (10_000, 100_000):
        doc, cut = tolerant(b"[" * levels + b"]" * levels)
        assert cut == 1
    big = page(*[obj(f"p{i}", b'{"s":"' + b"x" * 1_000 + b'"}') for i in range(2_000)], obj("deep", nested(2_000)))
    doc = loads(big)
    assert len(doc["items"]) == 2_001
    assert time.perf_counter() - t0 < 3
