"""policy/limits.py: a spec's depth, size, strings, lists and keys, checked in one iterative walk
that stops at the first problem and names where it is."""

from __future__ import annotations

import time

from policy_scheduler.policy.limits import MAX_DEPTH, MAX_ITEMS, MAX_KEYS, MAX_SPEC_BYTES, MAX_STRING, spec_problem
from policy_scheduler.safejson import UNREADABLE


def affinity(value) -> dict:
    return {"plugins": [{"name": "NodeAffinity", "args": {"addedAffinity": value}}]}


def nested(levels: int, leaf=1):
    v = leaf
    for _ in range(levels):
        v = {"a": v}
    return v


def test_real_policies_are_within_the_limits():
    assert spec_problem(None) is None
    assert spec_problem({"plugins": [{"name": "NodeResourcesFit", "weight": 2}], "percentageOfNodesToScore": 50,
                         "namespaceSelector": {"matchLabels": {"team": "a"}}, "overcommit": {"cpu": 1.5}}) is None
    # the spec is level 1, plugins 2, the entry 3, args 4, addedAffinity's object 5: 60 objects fit
    assert spec_problem(affinity(nested(MAX_DEPTH - 4))) is None


def test_too_deep_names_the_path_where_the_limit_is_passed():
    for levels in (MAX_DEPTH - 3, 1_000, 10_000):
        why = spec_problem(affinity(nested(levels)))
        assert why.startswith("spec.plugins[0].args.addedAffinity.a.a.") and why.endswith(
            f": nested deeper than {MAX_DEPTH} levels"), why
        assert len(why) < 400
    assert spec_problem([[[]]]) == "spec: Invalid value: must be an object, not a list"
    assert spec_problem("x") == "spec: Invalid value: must be an object, not a string"


def test_strings_lists_keys_and_size():
    big = "é" * (MAX_STRING + 1)
    assert spec_problem({"plugins": [{"name": big}]}) == (
        f"spec.plugins[0].name: Too long: a string of {MAX_STRING + 1} characters, at most {MAX_STRING}")
    assert spec_problem({big: 1}) == f"spec: Too long: a key of {MAX_STRING + 1} characters, at most {MAX_STRING}"
    assert spec_problem({"plugins": list(range(MAX_ITEMS + 1))}) == (
        f"spec.plugins: Too many: {MAX_ITEMS + 1}: must have at most {MAX_ITEMS} items")
    assert spec_problem({"args": {str(i): i for i in range(MAX_KEYS + 1)}}) == (
        f"spec.args: Too many: {MAX_KEYS + 1}: must have at most {MAX_KEYS} keys")
    wide = {"plugins": [{"name": "x" * (MAX_STRING - 10)} for _ in range(MAX_SPEC_BYTES // MAX_STRING + 1)]}
    assert spec_problem(wide) == f"spec: Too long: more than {MAX_SPEC_BYTES // 1024} KiB as JSON"
    assert spec_problem({"n": 2 ** 64}) == "spec.n: Invalid value: an integer out of the 64-bit range"
    assert spec_problem({"n": {1, 2}}) == "spec.n: Invalid value: a set is not a JSON value"


def test_the_decoders_marker_is_unreadable():
    assert spec_problem(affinity({"a": UNREADABLE})) == (
        "spec.plugins[0].args.addedAffinity.a: unreadable: nested deeper than 128 levels")


def test_long_keys_and_paths_are_cut_short():
    v: object = 1
    for _ in range(MAX_DEPTH + 5):
        v = {"k" * 1000: v}
    why = spec_problem(v)
    assert why.endswith(f"nested deeper than {MAX_DEPTH} levels") and len(why) < 400 and "…" in why


def test_the_walk_is_cheap_whatever_the_input():
    t0 = time.perf_counter()
    spec_problem(affinity(nested(50_000)))  # stops at the limit
    spec_problem({"plugins": [0] * 1_000_000})  # the list's length alone
    spec_problem({"s": "x" * 5_000_000})  # the string's length alone
    spec_problem({"plugins": [{"name": "y" * 1000}] * 1000})  # stops at the size limit
    assert time.perf_counter() - t0 < 1.0
