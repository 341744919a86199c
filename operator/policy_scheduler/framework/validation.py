"""Validation shared by the policy model and every plugin's args: field errors in upstream's words,
size caps, and users' regular expressions compiled with RE2.

Errors are ``"<path>: <detail>"`` lines, the path relative to the model that validates (a plugin's
args, the policy spec); the chain builder and the policy model prefix them (``spec.plugins[2].args.``).
The details follow apimachinery's ``field.Error``: ``Invalid value: <value>: <why>``,
``Required value``, ``Forbidden``, ``Unsupported value: <value>: supported values: "a", "b"``,
``Duplicate value``, ``Too long``, ``Too many``; values are printed as Go prints them (strings
quoted, ``[]string{"a"}`` for lists).

A validator reports several problems at once by raising ``FieldErrors``; ``validation_errors``
turns a pydantic ``ValidationError`` (which carries them) into lines with full paths.

User regular expressions never run on Python's backtracking engine: ``compile_user_regex`` uses
RE2 (linear time in the input, bounded memory) and refuses what RE2 cannot express
(backreferences, lookarounds). Python's ``re`` is only for this project's own constant patterns,
applied to input whose length is capped first.
"""

from __future__ import annotations

import math
import re
from threading import Lock
from typing import Any, Iterable, Mapping, Sized

import re2
from pydantic import ValidationError

from .model.bounded import BoundedCache

# ---------------------------------------------------------------------------------------- caps
# Sizes a policy may not exceed. The CRD (api/crd.py) carries the same caps as maxItems /
# maxLength, so the API server refuses larger objects before the operator sees them; the models
# refuse them again for clients that bypass the schema (and for the admission webhook).
MAX_PLUGINS = 64  # spec.plugins (names are unique: more than every registered plugin is a mistake)
MAX_DISABLED = 256  # spec.disabled
MAX_NAME = 128  # names: a plugin's registry name, a Prometheus label name
MAX_PLUGIN_NAME = MAX_NAME
MAX_LABEL_KEY = 317  # a qualified name: DNS-1123 subdomain prefix (253) + "/" + name (63)
MAX_LABEL_VALUE = 63
MAX_MATCH_LABELS = 64  # matchLabels entries of a label selector
MAX_REQUIREMENTS = 32  # matchExpressions / matchFields of a selector or selector term
MAX_VALUES = 128  # values of one requirement
MAX_TERMS = 32  # nodeSelectorTerms, preferred scheduling terms
MAX_NAMES = 64  # lists of resource names (ignoredResources, ignoredResourceGroups)
MAX_RESOURCES = 32  # scoringStrategy.resources, NodeResourcesBalancedAllocation resources
MAX_SHAPE_POINTS = 101  # utilization is strictly increasing within [0, 100]
MAX_CONSTRAINTS = 16  # PodTopologySpread defaultConstraints
MAX_MATCH_LABEL_KEYS = 16
MAX_METRICS = 16  # MetricThreshold / MetricScore metrics
MAX_PODS_REQUESTING = 16
MAX_QUERY = 4096  # a PromQL query
MAX_PATTERN = 1024  # a regular expression
MAX_SHORT = 64  # enum-like strings, quantities, durations
MAX_URL = 2048
MAX_ERRORS = 50  # problems reported for one policy; the rest are counted

# RE2's memory budget for one user pattern (its default is 8 MiB); a pattern needing more is refused
REGEX_MAX_MEM = 1 << 20


# ---------------------------------------------------------------------------------------- values
def go_quote(s: str) -> str:
    """Go's %q for a string (strconv.Quote), enough for error messages."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif not ch.isprintable():
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_float(v: float) -> str:
    """Go's %v for a float64: the shortest representation, exponent form below 1e-4 or from 1e21."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e21:
        return str(int(v))
    r = repr(v)
    if "e" in r:
        mant, exp = r.split("e")
        e = int(exp)
        return f"{mant}e{'-' if e < 0 else '+'}{abs(e):02d}"
    return r


_CLIP = 128  # longest value printed in a message


def go_value(v: Any) -> str:
    """A bad value as apimachinery prints it (strings %q, numbers %v, lists %#v); long values are
    cut short so that one message stays small."""
    if v is None:
        s = "null"
    elif isinstance(v, bool):
        s = "true" if v else "false"
    elif isinstance(v, int):
        s = str(v)
    elif isinstance(v, float):
        s = go_float(v)
    elif isinstance(v, str):
        s = go_quote(v if len(v) <= _CLIP else v[:_CLIP] + "...")
    elif isinstance(v, (list, tuple)):
        if all(isinstance(x, str) for x in v):
            s = "[]string{" + ", ".join(go_quote(x) for x in v[:8]) + (", ..." if len(v) > 8 else "") + "}"
        else:
            s = "[" + " ".join(go_value(x) for x in v[:8]) + (" ..." if len(v) > 8 else "") + "]"
    elif isinstance(v, dict):
        s = "map[" + " ".join(f"{k}:{go_value(x)}" for k, x in list(v.items())[:8]) + (" ..." if len(v) > 8 else "") + "]"
    else:
        s = str(v)
    return s if len(s) <= 2 * _CLIP else s[:2 * _CLIP] + "..."


# ---------------------------------------------------------------------------------------- errors
def invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {go_value(value)}: {detail}"


def required(path: str, detail: str = "") -> str:
    return f"{path}: Required value" + (f": {detail}" if detail else "")


def forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"


def not_supported(path: str, value: Any, supported: Iterable[str]) -> str:
    return (f"{path}: Unsupported value: {go_value(value)}: supported values: "
            + ", ".join(go_quote(s) for s in supported))


def duplicate(path: str, value: Any) -> str:
    return f"{path}: Duplicate value: {go_value(value)}"


def too_long(path: str, max_bytes: int) -> str:
    return f"{path}: Too long: may not be more than {max_bytes} bytes"


def too_many(path: str, actual: int, max_items: int) -> str:
    return f"{path}: Too many: {actual}: must have at most {max_items} items"


def int32_errors(path: str, v: int) -> list[str]:
    """A value that Go could not decode into an int32."""
    if not -(2**31) <= v <= 2**31 - 1:
        return [invalid(path, v, "must fit in a 32-bit integer")]
    return []


class FieldErrors(ValueError):
    """Several field errors at once, each ``"path: detail"`` relative to the validating model."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


def raise_if(errors: list[str]) -> None:
    if errors:
        raise FieldErrors(errors)


def join_path(prefix: str, path: str) -> str:
    """``prefix`` + ``path``: "a" + "b" -> "a.b", "a" + "[0].b" -> "a[0].b"."""
    if not prefix:
        return path
    if not path:
        return prefix
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


def loc_path(loc: Iterable[Any]) -> str:
    """A pydantic location as a field path: ("plugins", 0, "weight") -> "plugins[0].weight"."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = join_path(out, str(part))
    return out


# a field path at the start of a message: name, then .name or [index] / [key] parts
_FIELD_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?:\[[^\]\s]*\]|\.[A-Za-z_][A-Za-z0-9_-]*)*")


def split_field_message(msg: str) -> tuple[str, str] | None:
    """``"field.sub[0]: detail"`` -> (path, detail); None when the message names no field."""
    head, sep, rest = msg.partition(": ")
    if not sep or len(head) > 512 or not _FIELD_PATH.fullmatch(head):
        return None
    return head, rest


def _nest(base: str, msg: str) -> str:
    """A validator's message "field: detail" under ``base``, the location pydantic reports: the
    field joins the path, unless it restates the location's own last name (a field validator of
    ``podsRequesting`` naming ``podsRequesting[1]``)."""
    fm = split_field_message(msg)
    if fm is None:
        return f"{base}: {msg}" if base else msg
    fld, detail = fm
    if base:
        head, _, last = base.rpartition(".")
        if fld == last or fld.startswith((last + "[", last + ".")):
            return f"{join_path(head, fld)}: {detail}"
        if base.endswith("." + fld):
            return f"{base}: {detail}"
    return f"{join_path(base, fld)}: {detail}"


_TYPE_NAMES = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "string_type": "a string",
    "bool_type": "a boolean", "bool_parsing": "a boolean", "dict_type": "an object",
    "model_type": "an object", "model_attributes_type": "an object", "list_type": "a list",
}


def _expected_literals(expected: str) -> list[str]:
    """pydantic's "'A', 'B' or 'C'" -> ["A", "B", "C"]."""
    parts = expected.replace(" or ", ", ").split(", ")
    return [p.strip().strip("'") for p in parts if p.strip()]


def _line(path: str, err: Mapping[str, Any]) -> list[str]:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    value = err.get("input")
    msg = str(err.get("msg", ""))
    where = path or "<root>"
    if kind == "value_error":
        exc = ctx.get("error")
        if isinstance(exc, FieldErrors):
            return [_nest(path, m) for m in exc.errors]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        return [_nest(path, msg)]
    if kind == "missing":
        return [required(where)]
    if kind == "extra_forbidden":
        return [f"{where}: Extra inputs are not permitted"]
    if kind == "literal_error":
        return [not_supported(where, value, _expected_literals(str(ctx.get("expected", ""))))]
    if kind == "too_long":
        actual = ctx.get("actual_length") or (len(value) if isinstance(value, Sized) else 0)
        return [too_many(where, int(actual), int(ctx.get("max_length") or 0))]
    if kind == "string_too_long":
        return [too_long(where, int(ctx.get("max_length") or 0))]
    if kind in ("too_short", "string_too_short"):
        return [required(where, f"must have at least {ctx.get('min_length')} "
                                f"{'character' if kind == 'string_too_short' else 'item'}(s)")]
    if kind == "greater_than_equal":
        return [invalid(where, value, f"must be greater than or equal to {ctx.get('ge')}")]
    if kind == "greater_than":
        return [invalid(where, value, f"must be greater than {ctx.get('gt')}")]
    if kind == "less_than_equal":
        return [invalid(where, value, f"must be less than or equal to {ctx.get('le')}")]
    if kind == "less_than":
        return [invalid(where, value, f"must be less than {ctx.get('lt')}")]
    if kind == "string_pattern_mismatch":
        return [invalid(where, value, f"must match the regular expression {ctx.get('pattern')!s}")]
    if kind == "finite_number":
        return [invalid(where, value, "must be a finite number")]
    if kind in _TYPE_NAMES:
        return [invalid(where, value, f"must be {_TYPE_NAMES[kind]}")]
    return [f"{where}: {msg}"]


def validation_errors(e: ValidationError, prefix: str = "") -> list[str]:
    """One "path: detail" line per problem of a pydantic ValidationError, the path prefixed with
    ``prefix``. Messages of validators that name a field ("field: detail", or a FieldErrors)
    get that field joined onto the path."""
    out: list[str] = []
    for err in e.errors(include_url=False):
        out.extend(_line(join_path(prefix, loc_path(err.get("loc", ()))), err))
    return out


def cap_errors(errors: list[str], limit: int = MAX_ERRORS) -> list[str]:
    """At most ``limit`` errors; the last one kept says how many were left out."""
    if len(errors) <= limit:
        return errors
    kept = errors[:limit]
    kept[-1] += f" (and {len(errors) - limit} more errors)"
    return kept


# ---------------------------------------------------------------------------------------- regexes
def _options() -> re2.Options:
    o = re2.Options()
    o.log_errors = False  # RE2 would print every refused pattern to stderr
    o.max_mem = REGEX_MAX_MEM
    return o


_RE2_OPTIONS = _options()
# Compiled user regexes, keyed by the pattern (policies and the webhook's requests name them): each
# is charged its memory limit, so at most 16 are kept. RE2's own module keeps 128 of any size
# (an lru_cache in re2.compile); it is emptied after each compilation here, so that ours is the
# only one.
REGEX_CACHE_BYTES = 16 * (REGEX_MAX_MEM + MAX_PATTERN)
_regexes = BoundedCache(REGEX_CACHE_BYTES, max_entry=REGEX_CACHE_BYTES)
_regex_lock = Lock()


def _compile(pattern: str):
    with _regex_lock:
        hit = _regexes.get(pattern)
    if hit is not None:
        return hit
    try:
        rx = re2.compile(pattern, _RE2_OPTIONS)
    finally:
        re2.purge()
    with _regex_lock:
        _regexes.put(pattern, rx, REGEX_MAX_MEM + len(pattern))
    return rx


def regex_cache_stats() -> dict[str, int]:
    """bytes, entries, budget, evictions, uncached of the compiled-regex cache (for the metrics)."""
    with _regex_lock:
        return _regexes.stats()


def regex_error(pattern: str) -> str | None:
    """Why RE2 refuses ``pattern`` (None: it compiles)."""
    if len(pattern) > MAX_PATTERN:
        return f"must be no more than {MAX_PATTERN} bytes"
    try:
        _compile(pattern)
    except re2.error as e:
        why = e.args[0] if e.args else str(e)
        if isinstance(why, bytes):
            why = why.decode(errors="replace")
        return (f"not a regular expression RE2 accepts ({why}); RE2 has no backreferences or "
                "lookarounds, and matching runs in linear time")
    return None


def compile_user_regex(pattern: str):
    """A user's regular expression, compiled with RE2 (linear-time matching), from a byte-bounded
    LRU cache. Raises ValueError with the reason when RE2 cannot compile it."""
    why = regex_error(pattern)
    if why is not None:
        raise ValueError(why)
    return _compile(pattern)
