"""Consumable capacity (DRAConsumableCapacity, beta and on in v1.37): upstream
``structured/internal/incubating/consumable_capacity.go``.

A device's ``capacity`` entries may carry a ``requestPolicy`` (``default``, ``validValues`` or
``validRange`` with ``min``/``max``/``step``); a request's ``capacity.requests`` asks for an amount
of some of them. For every capacity of the device the amount consumed is: the request rounded up
to the policy (the first valid value at or above it; ``min``, or the next ``min + n*step``), or,
when the capacity is not requested, the policy's default or else the whole capacity. A device
fits when it defines every requested capacity, no consumed amount violates the policy, and what
allocated claims, this attempt's earlier picks and this pick consume stays within the value.

``DRAFractionalCapacityRange`` is off by default in v1.37, so steps use whole units (Go's
``Quantity.Value``, rounded up). Values keep their Kubernetes format (BinarySI, DecimalSI,
DecimalExponent) so that ``consumedCapacity`` is written in upstream's canonical form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any, Mapping

from ...framework.model.quantity import MAX_INT64, QuantityError, parse_quantity

Q = tuple[Decimal, str]  # (value, format): format BinarySI | DecimalSI | DecimalExponent
NOT_REPRESENTABLE = "capacity request cannot be represented in the device's range arithmetic"
NEGATIVE = "capacity value is negative"


class CapacityError(Exception):
    """An unrepresentable or negative amount: upstream aborts the allocation (Filter's Error)."""


def parse_q(v: Any, where: str) -> Q:
    """A quantity with its format (how upstream's ``ParseQuantity`` classifies the suffix)."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise ValueError(f"{where}: not a quantity")
    try:
        d = parse_quantity(v)
    except QuantityError as e:
        raise ValueError(f"{where}: {e}") from None
    if not d.is_finite() or (d and not -10 <= d.adjusted() <= 40):
        raise ValueError(f"{where}: out of range")  # bounded: a hostile value must not cost big integers
    s = str(v).strip()
    if s.endswith(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")):
        return d, "BinarySI"
    i = max(s.rfind("e"), s.rfind("E"))
    if 0 < i < len(s) - 1 and s[i + 1:].lstrip("+-").isdigit():
        return d, "DecimalExponent"
    return d, "DecimalSI"


_SI = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E", -3: "m", -6: "u", -9: "n"}
_BIN = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def canonical(q: Q) -> str:
    """Go's ``Quantity.String()`` (CanonicalizeBytes) of ``q``."""
    v, fmt = q
    if v == 0:
        return "0"
    if fmt == "BinarySI" and (-1024 < v < 1024 or v != v.to_integral_value()):
        fmt = "DecimalSI"
    if fmt == "BinarySI":
        n, e = int(v), 0
        while n % 1024 == 0 and e < len(_BIN) - 1:
            n //= 1024
            e += 1
        return f"{n}{_BIN[e]}"
    sign, digits, exp = v.normalize().as_tuple()
    m = int("".join(map(str, digits))) * (-1 if sign else 1)
    assert isinstance(exp, int)
    r = exp % 3
    m, exp = m * 10 ** r, exp - r
    if fmt == "DecimalSI" and exp in _SI:
        return f"{m}{_SI[exp]}"
    return f"{m}" if exp == 0 else f"{m}e{exp}"


def _value(d: Decimal) -> int:
    """Go's ``Quantity.Value()``: rounded up to a whole number."""
    return int(d.to_integral_value(rounding=ROUND_CEILING))


@dataclass(frozen=True, slots=True)
class Capacity:
    """One ``DeviceCapacity``: its value and ``requestPolicy`` (None when the device has none)."""

    value: Q
    policy: bool = False
    default: Q | None = None
    valid_values: tuple[Q, ...] = ()
    range_min: Q | None = None
    range_max: Q | None = None
    range_step: Q | None = None
    has_range: bool = False

    @classmethod
    def parse(cls, d: Any, where: str) -> "Capacity":
        if not isinstance(d, Mapping):
            raise ValueError(f"{where}: not an object")
        value = parse_q(d.get("value") if d.get("value") is not None else "0", f"{where}.value")
        pol = d.get("requestPolicy")
        if pol is None:
            return cls(value)
        if not isinstance(pol, Mapping):
            raise ValueError(f"{where}.requestPolicy: not an object")

        def q(v: Any, w: str) -> Q | None:
            return None if v is None else parse_q(v, f"{where}.requestPolicy.{w}")

        vv = pol.get("validValues") or []
        if not isinstance(vv, list) or len(vv) > 64:
            raise ValueError(f"{where}.requestPolicy.validValues: not a list of at most 64")
        rng = pol.get("validRange")
        if rng is not None and not isinstance(rng, Mapping):
            raise ValueError(f"{where}.requestPolicy.validRange: not an object")
        rng = rng or {}
        return cls(value, True, q(pol.get("default"), "default"),
                   tuple(parse_q(x, f"{where}.requestPolicy.validValues[{i}]") for i, x in enumerate(vv)),
                   q(rng.get("min"), "validRange.min"), q(rng.get("max"), "validRange.max"),
                   q(rng.get("step"), "validRange.step"), pol.get("validRange") is not None)

    # ------------------------------------------------------------------ upstream's helpers
    def consumed(self, requested: Q | None) -> Q:
        """calculateConsumedCapacity."""
        if requested is None:
            return self.default if self.default is not None else self.value
        if not self.policy:
            return requested
        if self.has_range and self.range_min is not None:
            return self._round_up_range(requested)
        if self.valid_values:
            for v in self.valid_values:
                if requested[0] <= v[0]:
                    return v
        return requested

    def _round_up_range(self, requested: Q) -> Q:
        lo = self.range_min
        assert lo is not None
        if requested[0] < lo[0]:
            return lo
        step = self.range_step
        if step is None:
            return requested
        if requested[0] > MAX_INT64:
            raise CapacityError(f"{NOT_REPRESENTABLE}: request {canonical(requested)} exceeds MaxInt64")
        req, st, mn = _value(requested[0]), _value(step[0]), _value(lo[0])
        if st <= 0:
            return requested  # not admitted by validation; no division by zero here
        added = req - mn
        n = added // st + (1 if added % st else 0)
        if mn >= 0 and n > (MAX_INT64 - mn) // st:
            raise CapacityError(f"{NOT_REPRESENTABLE}: rounding request {canonical(requested)} up to the next "
                                "step passes MaxInt64")
        return Decimal(mn + st * n), step[1]

    def violates(self, q: Q) -> bool:
        """violatesPolicy (integer arithmetic: DRAFractionalCapacityRange is off)."""
        if not self.policy:
            return False
        if self.default is not None and q == self.default:
            return False
        if self.has_range:
            if self.range_max is not None and q[0] > self.range_max[0]:
                return True
            if self.range_step is not None and self.range_min is not None:
                st = _value(self.range_step[0])
                if st and _go_rem(_value(q[0]) - _value(self.range_min[0]), st) != 0:
                    return True
            return False
        if self.valid_values:
            return not any(q[0] == v[0] for v in self.valid_values)
        return False


def _go_rem(a: int, b: int) -> int:
    """Go's ``%`` (truncated towards zero)."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _name(n: str) -> str:
    return json.dumps(n)  # Go's %q for the plain names capacities have


def consumed_amounts(requests: Mapping[str, Q], capacity: Mapping[str, Capacity]) -> dict[str, Q]:
    """What one allocation consumes of every capacity of the device (GetConsumedCapacityFromRequest
    and the resolving half of CmpRequestOverCapacity); CapacityError when an amount cannot be."""
    out = {}
    for name, cap in capacity.items():
        try:
            q = cap.consumed(requests.get(name))
        except CapacityError as e:
            raise CapacityError(f"capacity {_name(name)}: {e}") from None
        if q[0] < 0:
            raise CapacityError(f"capacity {_name(name)}: {NEGATIVE}")
        out[name] = q
    return out


def fits(requests: Mapping[str, Q], capacity: Mapping[str, Capacity], allocated: Mapping[str, Decimal] | None,
         allocating: Mapping[str, Decimal] | None) -> bool:
    """upstream CmpRequestOverCapacity: the device defines every requested capacity, no consumed
    amount violates its policy, and allocated + allocating + this one stays within each value."""
    for name in requests:
        if name not in capacity:
            return False
    amounts = consumed_amounts(requests, capacity)
    for name, cap in capacity.items():
        q = amounts[name]
        if cap.violates(q):
            return False
        total = q[0] + (allocated or {}).get(name, 0) + (allocating or {}).get(name, 0)
        if total > cap.value[0]:
            return False
    return True
