"""Kubernetes resource.Quantity parsing (pure, no client library).

Values are returned as integers in the unit the scheduler uses: milli-units for cpu
(``Quantity.MilliValue``), whole units for everything else (``Quantity.Value``); both round away
from zero, as upstream does, and are capped to the int64 range (upstream caps at MaxInt64).
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_UP, Context, Decimal, DecimalException

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
MAX_INT64 = 2**63 - 1
# Exact arithmetic: the default context (28 digits) would round long quantities before ceiling.
_CTX = Context(prec=1000, Emax=MAX_EMAX, Emin=MIN_EMIN)
_RE = re.compile(r"^([+-]?[0-9]*\.?[0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$")


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a quantity ("100m", "1Gi", "1e3", 2) into an exact Decimal."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a string or number, not {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity must be a string or number, not {type(value).__name__}")
    s = value.strip()
    m = _RE.match(s)
    if not m or m.group(1) in ("", "+", "-", ".", "+.", "-."):
        raise QuantityError(f"quantities must match the regular expression "
                            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}")
    number = Decimal(m.group(1))
    suffix = m.group(2)
    try:
        if suffix in _BINARY:
            return _CTX.multiply(number, _BINARY[suffix])
        if len(suffix) > 1 and suffix[0] in "eE":  # an exponent; a bare "E" is exa
            return number.scaleb(int(suffix[1:]), context=_CTX)
        return _CTX.multiply(number, _DECIMAL[suffix])
    except DecimalException:  # an exponent beyond any representable value
        raise QuantityError(f"quantity out of range: {value!r}") from None


def to_int(value: str | int | float, milli: bool = False) -> int:
    """Quantity as an int, rounded away from zero: milli-units when ``milli`` (cpu), else whole
    units. Magnitudes beyond int64 are capped to +/-MaxInt64."""
    d = parse_quantity(value)
    if not d.is_finite():
        raise QuantityError(f"quantity must be finite: {value!r}")
    if milli:
        d = _CTX.multiply(d, 1000)
    if d.copy_abs() > MAX_INT64:
        return MAX_INT64 if d > 0 else -MAX_INT64
    return int(d.to_integral_value(rounding=ROUND_UP, context=_CTX))


_MEMO: dict[tuple[bool, str], int] = {}  # (milli, quantity string) -> value: pods repeat a few strings
_MEMO_MAX = 4096  # emptied when full: strings from hostile objects cannot grow it without bound


def resource_value(name: str, value: str | int | float) -> int:
    """The scheduler's integer value of resource ``name``: cpu in millicores, others in units.
    Strings are parsed once (a cluster's pods repeat "100m", "500Mi", ...; at start-up the
    parse was a fifth of decoding 50,000 pods)."""
    milli = name == "cpu"
    if value.__class__ is not str:
        return to_int(value, milli=milli)
    key = (milli, value)
    got = _MEMO.get(key)
    if got is None:
        got = to_int(value, milli=milli)  # raises QuantityError: an invalid string is not kept
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        _MEMO[key] = got
    return got
