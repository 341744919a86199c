"""CEL device selectors: upstream's examples, the compile cache, quantities and versions by value,
the errors' wording, the length and estimated-cost limits."""

from __future__ import annotations

import pytest

from policy_scheduler.plugins.dynamicresources import cel
from policy_scheduler.plugins.dynamicresources.cel import CELError, Device, compile_selector, matches

GPU = {
    "driver": "gpu.example.com",
    "attributes": {
        "gpu.example.com": {"model": {"string": "a100"}, "cores": {"int": 108}, "mig": {"bool": True}},
        "dra.example.com": {"version": {"version": "1.2.0"}},
    },
    "capacity": {"gpu.example.com": {"memory": {"value": "40Gi"}}},
    "allowMultipleAllocations": False,
}


@pytest.mark.parametrize("expr, want", [
    ('device.driver == "gpu.example.com"', True),
    ('device.driver == "other.example.com"', False),
    ('device.attributes["gpu.example.com"].model == "a100"', True),
    ('device.attributes["gpu.example.com"].cores >= 100 && device.attributes["gpu.example.com"].mig', True),
    ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0', True),
    ('device.capacity["gpu.example.com"].memory.compareTo(quantity("41Gi")) >= 0', False),
    ('device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("1Mi"))', True),
    ('device.attributes["dra.example.com"].version.isGreaterThan(semver("1.0.0"))', True),
    ('device.attributes["dra.example.com"].version.major() >= 1', True),
    ('device.attributes["dra.example.com"].version.isLessThan(semver("1.2.0"))', False),
    ('has(device.attributes["gpu.example.com"].model)', True),
    ('has(device.attributes["gpu.example.com"].nope)', False),
    ('has(device.attributes["unknown.example.com"].model)', False),  # an unknown domain is an empty map
    ('device.attributes["unknown.example.com"].size() == 0', True),
    ('device.attributes.exists(d, d == "gpu.example.com")', True),
    ('!device.allowMultipleAllocations', True),
    ('device.attributes["gpu.example.com"].cores > 100.5', True),  # cross-type numeric comparison
])
def test_upstream_examples(expr, want):
    assert matches(expr, GPU) is want
    assert matches(expr, Device(GPU)) is want


def test_plain_values_are_accepted_too():
    dev = {"driver": "d", "attributes": {"d": {"model": "a100"}}, "capacity": {"d": {"memory": "1Gi"}}}
    assert matches('device.attributes["d"].model == "a100" && device.capacity["d"].memory == quantity("1024Mi")', dev)


def test_quantities_compare_by_value():
    assert matches('quantity("1Gi").isGreaterThan(quantity("1000Mi"))', GPU)
    assert matches('quantity("1Gi").compareTo(quantity("1000Mi")) == 1', GPU)
    assert matches('quantity("1000Mi").isLessThan(quantity("1Gi"))', GPU)
    assert matches('quantity("1Gi") == quantity("1024Mi")', GPU)  # equality by value, not by text
    assert matches('quantity("1k") == quantity("1000")', GPU)
    assert not matches('quantity("1Gi") == quantity("1G")', GPU)
    assert matches('quantity("500m").compareTo(quantity("0.5")) == 0', GPU)
    assert matches('quantity("2k").asInteger() == 2000 && !quantity("1.5").isInteger()', GPU)


def test_semver_precedence():
    assert matches('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', GPU)
    assert matches('semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))', GPU)
    assert matches('semver("1.10.0").isGreaterThan(semver("1.9.0"))', GPU)
    assert matches('semver("1.0.0+build.1") == semver("1.0.0")', GPU)


def test_cache_returns_the_same_compiled_selector():
    text = 'device.driver == "cache.example.com"'
    first = compile_selector(text)
    assert compile_selector(text) is first
    for i in range(cel.CACHE_SIZE):  # pushed out by as many others: bounded
        compile_selector(f'device.driver == "{i}"')
    assert compile_selector(text) is not first


def _error(expr, device=GPU) -> CELError:
    with pytest.raises(CELError) as info:
        matches(expr, device)
    return info.value


def test_compile_errors():
    e = _error("device.driver ==")
    assert e.kind == "compile" and str(e).startswith("CEL compile error: ")
    assert isinstance(e, ValueError)


def test_runtime_errors():
    e = _error('device.attributes["gpu.example.com"].nope == 1')
    assert e.kind == "runtime"
    assert str(e).startswith("CEL runtime error: no such key: nope. consider guarding the check with has()")
    assert _error('device.driver + 1 == 2').kind == "runtime"
    assert _error('quantity("1Gi") > 1').kind == "runtime"  # a quantity is not a number
    assert _error('quantity("one")').kind == "runtime"
    assert _error('semver("1.0")').kind == "runtime"
    assert _error('quantity("1").isGreaterThan(semver("1.0.0"))').kind == "runtime"
    assert _error('undefined(1)').kind == "runtime"


def test_non_bool_result_is_an_error():
    assert str(_error("device.driver")) == ("CEL runtime error: CEL result of type string could not be "
                                            "converted to bool")
    assert "type Quantity" in str(_error('quantity("1Gi")'))
    assert "type int" in str(_error("1 + 1"))


def test_estimated_cost_limit_stops_nested_comprehensions():
    small = '[1, 2].all(x, x > 0)'
    assert matches(small, GPU)
    assert cel.estimated_cost(small) == len(small) * 32
    assert matches('device.attributes.all(d, device.attributes.all(e, true))', GPU)  # 32 ** 2 per char
    nested = '[1, 2, 3].all(x, [1, 2, 3].all(y, [1, 2, 3].all(z, x + y + z > 0)))'
    e = _error(nested)
    assert e.kind == "compile" and "exceeds the limit of 1000000" in str(e)
    in_a_string = '".all(x, .map(y, .filter(z" == ""'  # macro names inside a string literal do not count
    assert cel.estimated_cost(in_a_string) == len(in_a_string)


def test_length_limit():
    long = "true && " * (cel.MAX_EXPRESSION_LENGTH // 8) + "true"
    e = _error(long)
    assert e.kind == "compile" and "more than the limit of 10240" in str(e)
