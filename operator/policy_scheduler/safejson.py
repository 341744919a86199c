"""JSON from the API server (and from anyone who calls the webhooks), read so that no document can
stop the reader.

``loads`` is orjson's ``loads`` for every document orjson reads. orjson refuses a document nested
deeper than 1,024 levels, where the API server stores objects up to 10,000 levels deep (a custom
resource's ``x-kubernetes-preserve-unknown-fields`` subtree, and its managedFields, which mirror
it). For such a document ``loads`` falls back on ``tolerant``: one scan of the raw bytes, in
linear time and without recursion, that replaces every subtree deeper than ``MAX_DEPTH`` by a
marker value (an ``Unreadable``, a ``str``), then orjson reads the rest. So a LIST page or a WATCH
line with one hostile object still delivers every object, the hostile one included, and the
object's owner can say what is wrong with it.

The scan steps over strings whole, escapes included (a bracket inside a string is text), and
checks that brackets pair up; anything else orjson would refuse is refused still (ValueError).
A leaf: orjson and the standard library only.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import orjson

MAX_DEPTH = 128  # the tolerant decoder keeps this many levels of a document (the document itself is level 1)

# a string token (escapes included), or a lone quote (an unterminated string), or a bracket
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|["\[\]{}]', re.S)
_OPEN = {ord("["): ord("]"), ord("{"): ord("}")}
_QUOTE = ord('"')
# what the scan writes in place of a subtree: a string nobody else writes (a NUL and a nonce
# drawn per process), turned into an Unreadable after parsing
_NONCE = "\x00policy-scheduler:unreadable:" + secrets.token_hex(8)
_NONCE_JSON = orjson.dumps(_NONCE)


class Unreadable(str):
    """The value of a subtree the tolerant decoder did not read (nested deeper than its limit).
    A ``str``, so that it serializes, compares and prints like any value; consumers that care
    test ``isinstance(v, Unreadable)``."""

    __slots__ = ()


def unreadable(max_depth: int = MAX_DEPTH) -> Unreadable:
    """The marker of a subtree cut at ``max_depth`` levels."""
    return Unreadable(f"<unreadable: nested deeper than {max_depth} levels>")


UNREADABLE = unreadable()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """orjson.loads; a document orjson refuses goes through ``tolerant`` (ValueError if that
    cannot read it either)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return tolerant(data)[0]


def tolerant(data: bytes | bytearray | memoryview | str, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """The document with every subtree deeper than ``max_depth`` levels replaced by an
    ``Unreadable`` marker, and how many were replaced. ValueError when it is not JSON for another
    reason (orjson's message), or when its brackets do not pair up."""
    if max_depth < 1:
        raise ValueError("max_depth must be at least 1")
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    parts: list[bytes] = []
    stack = bytearray()  # the closing bracket each open one expects
    last = 0  # raw[last:] is not copied yet
    cut = -1  # where the subtree being replaced starts, or -1
    replaced = 0
    for m in _TOKEN.finditer(raw):
        pos = m.start()
        c = raw[pos]
        if c == _QUOTE:
            if m.end() - pos == 1:
                raise ValueError(f"unterminated string at byte {pos}")
            continue
        close = _OPEN.get(c)
        if close is not None:
            stack.append(close)
            if len(stack) == max_depth + 1 and cut < 0:
                cut = pos
            continue
        if not stack or stack.pop() != c:
            raise ValueError(f"unbalanced {chr(c)!r} at byte {pos}")
        if cut >= 0 and len(stack) == max_depth:
            parts += (raw[last:cut], _NONCE_JSON)
            last, cut = m.end(), -1
            replaced += 1
    if stack:
        raise ValueError("unexpected end of data: unclosed brackets")
    if not replaced:  # nothing too deep: orjson's own verdict stands
        return orjson.loads(raw), 0
    parts.append(raw[last:])
    doc = orjson.loads(b"".join(parts))
    return _mark(doc, replaced, UNREADABLE if max_depth == MAX_DEPTH else unreadable(max_depth)), replaced


def _mark(doc: Any, count: int, marker: Unreadable) -> Any:
    """Replace the ``count`` placeholder strings of ``doc`` by ``marker``, iteratively (the root
    is never one: max_depth is at least 1)."""
    stack = [doc] if isinstance(doc, (dict, list)) else []
    while stack and count:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        hits = []
        for k, v in items:
            if isinstance(v, str):
                if v == _NONCE:
                    hits.append(k)
            elif isinstance(v, (dict, list)):
                stack.append(v)
        for k in hits:
            node[k] = marker
        count -= len(hits)
    return doc

