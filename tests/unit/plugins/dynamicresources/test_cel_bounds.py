"""CEL's bounds against tenant input (issue #41, threat L4 and H2): the static cost estimate reads
code only (comments, raw, bytes and triple-quoted strings cannot hide a nested comprehension), the
compiled-selector cache has a byte budget, and a device keeps a bounded number of contexts."""

from __future__ import annotations

import pytest

from policy_scheduler.plugins.dynamicresources import cel
from policy_scheduler.plugins.dynamicresources.cel import CELError, Device, compile_selector

NESTED = "device.attributes['d'].all(x, [1, 2].all(y, [3].all(z, [4].all(w, true))))"


def depth_of(text: str) -> int:
    """The nesting depth the estimate found: cost = len * W ** depth with W = 32 here."""
    cost, d = cel.estimated_cost(text) // max(1, len(text)), 0
    while cost > 1:
        cost //= 32
        d += 1
    return d


@pytest.mark.parametrize("text", [
    pytest.param(NESTED, id="plain"),
    pytest.param(NESTED.replace(".all(", ". // c\n all("), id="comment-between-dot-and-macro"),
    pytest.param(NESTED.replace(".all(", "." + " " * 40 + "all("), id="long-whitespace"),
    pytest.param('r"\\" == "" || ' + NESTED, id="raw-string-ending-in-backslash"),
    pytest.param("b'\\\\' == b'' || " + NESTED, id="bytes"),
    pytest.param('"""a"b""" == "" || ' + NESTED, id="triple-quoted"),
    pytest.param("'''it's''' == '' || " + NESTED, id="triple-single-quoted"),
    pytest.param('// a comment with a quote " in it\n' + NESTED, id="quote-in-comment"),
])
def test_the_estimate_sees_every_comprehension(text):
    assert depth_of(text) == 4
    with pytest.raises(CELError, match="estimated cost"):
        compile_selector(text)


def test_literals_and_comments_add_no_depth():
    assert cel._code('"a.all(x, true)" + r\'b.map(\' // .exists(\nz') == '"" + ""  \nz'
    assert depth_of('device.driver == "x.all(y, y.all(z, true))" // .all(a, b.all(c, true))') == 0
    assert depth_of("device.attributes['d'].exists(x, true)") == 1


def test_compiled_selectors_stay_within_their_byte_budget():
    for i in range(50):
        compile_selector(f'device.driver == "budget-{i}-{"x" * 5000}"')
    st = cel.cache_stats()
    assert st["entries"] <= cel.CACHE_SIZE and 0 < st["bytes"] <= cel.CACHE_BYTES
    assert st["evictions"] >= 40


def test_a_device_keeps_a_bounded_number_of_contexts():
    dev = Device({"driver": "d", "attributes": {}, "capacity": {}})
    for i in range(100):  # selectors naming domains the device lacks: one context per set
        assert cel.matches(f'!("x" in device.attributes["dom{i}.example.com"])', dev)
    assert len(dev._contexts) == cel.MAX_CONTEXTS
