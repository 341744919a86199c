"""Kubernetes resource.Quantity parsing (pure, no client library).

Values are returned as integers in the unit the scheduler uses: milli-units for cpu
(``Quantity.MilliValue``), whole units for everything else (``Quantity.Value``); both round up,
as upstream does.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
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
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as e:  # pragma: no cover - the regex already guards this
        raise QuantityError(f"invalid quantity {value!r}") from e
    suffix = m.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number * _DECIMAL[suffix]


def to_int(value: str | int | float, milli: bool = False) -> int:
    """Quantity as an int, rounded up: milli-units when ``milli`` (cpu), else whole units."""
    d = parse_quantity(value)
    if milli:
        d = d * 1000
    return int(d.to_integral_value(rounding=ROUND_CEILING))


def resource_value(name: str, value: str | int | float) -> int:
    """The scheduler's integer value of resource ``name``: cpu in millicores, others in units."""
    return to_int(value, milli=(name == "cpu"))


def format_milli_cpu(m: int) -> str:
    return f"{m}m" if m % 1000 else str(m // 1000)
