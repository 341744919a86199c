"""resource.Quantity parsing against apimachinery's Quantity.Value / MilliValue."""

from __future__ import annotations

from decimal import Decimal

import pytest

from policy_scheduler.framework.model.quantity import (
    MAX_INT64,
    QuantityError,
    parse_quantity,
    resource_value,
    to_int,
)


@pytest.mark.parametrize("text, exact", [
    ("100m", Decimal("0.1")),
    ("0.5", Decimal("0.5")),
    ("1", Decimal(1)),
    ("1Gi", Decimal(2**30)),
    ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)),  # "E" followed by digits is an exponent, not exa
    ("1e-3", Decimal("0.001")),
    ("1.5Ki", Decimal(1536)),  # 1.5 * 1024
    ("128974848", Decimal(128974848)),
    ("129e6", Decimal(129000000)),
    ("129M", Decimal(129000000)),
    ("123Mi", Decimal(123 * 2**20)),  # 128974848
    ("2E", Decimal(2 * 10**18)),  # bare "E" is exa
    ("5n", Decimal("0.000000005")),
    ("7u", Decimal("0.000007")),
    ("3k", Decimal(3000)),
    ("1Ti", Decimal(2**40)),
    ("1Ei", Decimal(2**60)),
    (".5", Decimal("0.5")),
    ("1.", Decimal(1)),  # upstream accepts a trailing dot ("1.G" is valid)
    ("+2", Decimal(2)),
    ("-2", Decimal(-2)),
    (" 4Mi ", Decimal(4 * 2**20)),  # JSON unmarshalling trims spaces
    (2, Decimal(2)),
    (0.25, Decimal("0.25")),
])
def test_parse_quantity_exact_value(text, exact):
    assert parse_quantity(text) == exact


@pytest.mark.parametrize("text, value, milli", [
    # (quantity, Value(), MilliValue())
    ("100m", 1, 100),  # Value rounds 0.1 up to 1
    ("0.5", 1, 500),
    ("1", 1, 1000),
    ("1Gi", 1073741824, 1073741824000),
    ("1e3", 1000, 1000000),
    ("1.5Ki", 1536, 1536000),
    ("128974848", 128974848, 128974848000),
    ("129e6", 129000000, 129000000000),
    ("129M", 129000000, 129000000000),
    ("123Mi", 128974848, 128974848000),
    ("1.0001m", 1, 2),  # 1.0001 milli rounds up to 2m
    ("0.1m", 1, 1),  # never rounds a non-zero request down to 0
    ("1n", 1, 1),
    ("0", 0, 0),
    ("0m", 0, 0),
    # rounding is away from zero (negativeScaleInt64), not towards +inf
    ("-1.5", -2, -1500),
    ("-100m", -1, -100),
    ("-1.0001m", -1, -2),
    # 29 significant digits: exact arithmetic, no 28-digit context rounding before the ceiling
    ("1.0000000000000000000000000001", 2, 1001),
])
def test_value_and_milli_value_round_away_from_zero(text, value, milli):
    assert to_int(text) == value
    assert to_int(text, milli=True) == milli


@pytest.mark.parametrize("text, expected", [
    ("1e30", MAX_INT64),
    ("-1e30", -MAX_INT64),
    ("9223372036854775808", MAX_INT64),  # 2**63
    ("9223372036854775807", MAX_INT64),
    ("1e9999999", MAX_INT64),  # upstream caps at MaxInt64 instead of failing
])
def test_huge_values_are_capped_to_int64(text, expected):
    assert to_int(text) == expected
    assert to_int(text, milli=True) == expected


@pytest.mark.parametrize("name, text, expected", [
    ("cpu", "250m", 250),
    ("cpu", "2", 2000),
    ("cpu", "1.0001m", 2),
    ("memory", "1Gi", 1073741824),
    ("memory", "100m", 1),  # non-cpu resources use Value(), rounding up
    ("ephemeral-storage", "1.5Ki", 1536),
    ("nvidia.com/gpu", "2", 2),
    ("pods", "110", 110),
])
def test_resource_value_uses_milli_for_cpu_only(name, text, expected):
    assert resource_value(name, text) == expected


@pytest.mark.parametrize("bad", [
    "", " ", "abc", "1.5.5", "1Kb", "1K", "1ki", "1mi", "1e", "1 Gi", "Gi", "--1", "1e3.5",
    "+", "-", ".", "0x10", "1,5", "1e99999999999999999999", True, None, [1], {"a": 1},
])
def test_malformed_quantities_raise_quantity_error(bad):
    with pytest.raises(QuantityError):
        to_int(bad)


def test_quantity_error_is_a_value_error_with_the_input():
    with pytest.raises(ValueError, match="'1Kb'"):
        parse_quantity("1Kb")


def test_resource_value_parses_a_string_once_and_stays_bounded(monkeypatch):
    from policy_scheduler.framework.model import quantity
    calls = []
    real = quantity.to_int
    monkeypatch.setattr(quantity, "to_int", lambda v, milli=False: calls.append(v) or real(v, milli=milli))
    monkeypatch.setattr(quantity, "_MEMO", {})
    assert quantity.resource_value("cpu", "250m") == 250
    assert quantity.resource_value("cpu", "250m") == 250
    assert quantity.resource_value("memory", "250m") == 1  # not cpu: whole units, rounded up; its own entry
    assert calls == ["250m", "250m"]
    with pytest.raises(quantity.QuantityError):  # an invalid string is not kept: it raises every time
        quantity.resource_value("cpu", "12x")
    with pytest.raises(quantity.QuantityError):
        quantity.resource_value("cpu", "12x")
    monkeypatch.setattr(quantity, "_MEMO_MAX", 8)
    for i in range(100):  # hostile variety cannot grow the memo past its bound
        assert quantity.resource_value("memory", f"{i}Ki") == i * 1024
    assert len(quantity._MEMO) <= 8
