"""Field errors read out of pydantic: each problem of a model one ``"<path>: <detail>"`` line
with upstream's path syntax (``plugins[3].weight``) and apimachinery's wording
(framework/validation.py: ``Invalid value``, ``Required value``, ``Unsupported value``, ...), at
most MAX_ERRORS of them for one policy. The policy model (policy/models.py) and the chain builder
(policy/chain.py, for every plugin's ``Args``) report through here.

A validator reports several problems at once by raising ``FieldErrors`` (framework/validation.py);
``validation_errors`` turns a pydantic ``ValidationError`` (which carries them) into lines with
full paths.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sized

from pydantic import ValidationError

from ..framework.validation import FieldErrors, invalid, not_supported, required, too_long, too_many

MAX_ERRORS = 50  # problems reported for one policy; the rest are counted


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


class PolicyInvalid(Exception):
    """A SchedulingPolicy spec that cannot be used: ``errors``, one ``"spec.<path>: <detail>"``
    line per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors
