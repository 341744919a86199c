"""The limits of a SchedulingPolicy spec as a whole, checked before anything else reads it.

The models cap every field they type (framework/validation.py, and the CRD with them); these
limits bound what no model types: plugin args are open (``x-kubernetes-preserve-unknown-fields``),
and the API server stores objects nested up to 10,000 levels deep and up to its request size
(3 MiB). A spec past one of them is *unreadable*: the policy store reports it ``Ready=False``
with reason ``Unreadable`` (and a Warning event) and never parses it, and the admission webhook
refuses it. ``spec_problem`` walks the spec once, iteratively (no recursion, whatever the depth),
and stops at the first problem; its cost is bounded by the limits themselves.

The CRD carries what the API server can check of them (policy/crd.py): ``maxProperties`` on the
open objects of args; depth, total size and the strings and lists of unknown fields it cannot.
"""

from __future__ import annotations

from typing import Any

from ..safejson import Unreadable

MAX_DEPTH = 64  # levels of nesting of a spec (the spec object is level 1; real args use about 12)
MAX_SPEC_BYTES = 256 * 1024  # the spec serialized as JSON (UTF-8, no whitespace)
MAX_STRING = 16 * 1024  # characters of one string, key or value
MAX_ITEMS = 1024  # items of one list
MAX_KEYS = 1024  # keys of one object
_SHOWN_KEY = 40  # characters of a key shown in a path
_SHOWN_PATH = 240  # characters of a path shown in a message


def _path(parts: list[str]) -> str:
    """``spec.plugins[0].args.x``, a long one cut in the middle."""
    s = "".join(parts)
    if len(s) <= _SHOWN_PATH:
        return s
    return f"{s[:_SHOWN_PATH // 2]}…{s[-_SHOWN_PATH // 2:]}"


def _key(k: str) -> str:
    return "." + (k if len(k) <= _SHOWN_KEY else k[:_SHOWN_KEY] + "…")


def _size(v: Any) -> int:
    """The JSON size of a scalar (strings without their escapes)."""
    if isinstance(v, str):
        return len(v) + 2 if v.isascii() else len(v.encode("utf-8", "surrogatepass")) + 2
    if v is None or v is True:
        return 4
    if v is False:
        return 5
    if isinstance(v, float):
        return len(repr(v))
    return len(str(v)) if -(2 ** 63) <= v < 2 ** 64 else 0  # out of range: refused by the caller


def spec_problem(spec: Any, root: str = "spec") -> str | None:
    """Why ``spec`` cannot be read, ``"<path>: <detail>"`` as every field error (the detail in
    apimachinery's words where it has them: ``Too many``, ``Too long``, ``Invalid value``), or
    None when it is within the limits. ``spec`` is the decoded JSON value; None (no spec) is the
    model's to refuse."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        return f"{root}: Invalid value: must be an object, not {_kind(spec)}"
    size = 0
    # (value, depth, parent entry, path part): paths are built only for the problem reported
    stack: list[tuple[Any, int, Any, str]] = [(spec, 1, None, root)]
    while stack:
        entry = stack.pop()
        v, d, _, _ = entry
        if isinstance(v, Unreadable):
            return f"{_walk_path(entry)}: {v.strip('<>')}"  # the decoder's marker
        if isinstance(v, str):
            if len(v) > MAX_STRING:
                return f"{_walk_path(entry)}: Too long: a string of {len(v)} characters, at most {MAX_STRING}"
            size += _size(v)
        elif isinstance(v, dict):
            if d > MAX_DEPTH:
                return f"{_walk_path(entry)}: nested deeper than {MAX_DEPTH} levels"
            if len(v) > MAX_KEYS:
                return f"{_walk_path(entry)}: Too many: {len(v)}: must have at most {MAX_KEYS} keys"
            size += 2 + max(len(v) - 1, 0)  # braces, commas
            for k, x in reversed(v.items()):
                if not isinstance(k, str):
                    return f"{_walk_path(entry)}: Invalid value: a key of type {type(k).__name__}, not a string"
                if len(k) > MAX_STRING:
                    return f"{_walk_path(entry)}: Too long: a key of {len(k)} characters, at most {MAX_STRING}"
                size += _size(k) + 1  # the key and its colon
                stack.append((x, d + 1, entry, _key(k)))
        elif isinstance(v, list):
            if d > MAX_DEPTH:
                return f"{_walk_path(entry)}: nested deeper than {MAX_DEPTH} levels"
            if len(v) > MAX_ITEMS:
                return f"{_walk_path(entry)}: Too many: {len(v)}: must have at most {MAX_ITEMS} items"
            size += 2 + max(len(v) - 1, 0)
            for i in range(len(v) - 1, -1, -1):
                stack.append((v[i], d + 1, entry, f"[{i}]"))
        elif v is None or isinstance(v, (bool, float)):
            size += _size(v)
        elif isinstance(v, int):
            if not -(2 ** 63) <= v < 2 ** 64:
                return f"{_walk_path(entry)}: Invalid value: an integer out of the 64-bit range"
            size += _size(v)
        else:
            return f"{_walk_path(entry)}: Invalid value: a {type(v).__name__} is not a JSON value"
        if size > MAX_SPEC_BYTES:
            return f"{root}: Too long: more than {MAX_SPEC_BYTES // 1024} KiB as JSON"
    return None


def _walk_path(entry: tuple[Any, int, Any, str]) -> str:
    parts = []
    e = entry
    while e is not None:
        parts.append(e[3])
        e = e[2]
    return _path(parts[::-1])


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    return f"a {type(v).__name__}"
