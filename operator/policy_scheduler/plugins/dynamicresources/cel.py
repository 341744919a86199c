"""CEL device selectors (DRA, resource.k8s.io/v1), evaluated with `common-expression-language`.

The single variable is ``device``: ``driver`` (string), ``attributes`` (domain -> name -> bool, int,
string or version), ``capacity`` (domain -> name -> quantity), ``allowMultipleAllocations`` (bool).
Attribute and capacity values may also be given in the API's shape (``{"int": 1}``,
``{"version": "1.0.0"}``, ``{"value": "40Gi"}``).

Kubernetes' extensions, as far as the library allows (it has custom functions, called as functions or
as methods, but no custom types):

- ``quantity(s)`` and capacity values are quantities, held as a map with one reserved key and the
  exact decimal value: ``==`` compares by value (``quantity("1Gi") == quantity("1024Mi")``), ``<``
  or ``+`` on them is a runtime error. ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``asInteger``,
  ``isInteger`` and ``sign`` compare and read them by value (framework/model/quantity.py's parsing).
- ``semver(s)`` and version attributes are semantic versions, held likewise: ``major()``,
  ``minor()``, ``patch()``, ``compareTo``, ``isGreaterThan``, ``isLessThan`` (SemVer 2.0 precedence).
- An unknown domain reads as an empty map, as upstream: the domains the expression names as string
  literals (``attributes["x"]``) are added empty when the device lacks them. An unknown name is the
  runtime error ``no such key: <name>``.

Not supported by the library: ``cel.bind``, optional syntax (``.?``, ``[?``; so the missing-key hint
names has() only), compile-time type checking (a non-bool result is found when evaluating).

Cost limit. Upstream limits each evaluation to ``CELSelectorExpressionMaxCost`` = 1,000,000 units
and expressions to 10 KiB. The library has no cost tracking and cannot be interrupted, so what is
enforced is static, at compile time: the length limit (``MAX_EXPRESSION_LENGTH``) and an estimate,
``len(expression) * W ** d``: ``d`` is the deepest nesting of comprehension macros (``all``,
``exists``, ``exists_one``, ``map``, ``filter``), ``W`` bounds the elements one iterates: the larger
of 32 (upstream's limit on a device's attributes and capacities) and 1 + the commas and ``+`` of
the expression (no selector builds a longer list). Over ``MAX_COST``: a compile error. Both are
read from the code alone, string literals (raw, bytes and triple-quoted ones included) and
comments removed as CEL's lexer reads them, so that neither can hide a comprehension.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from functools import lru_cache
from threading import Lock
from typing import Any

from ...framework.model.bounded import BoundedCache
from ...framework.model.quantity import QuantityError, parse_quantity

MAX_COST = 1_000_000  # upstream's CELSelectorExpressionMaxCost
MAX_EXPRESSION_LENGTH = 10 * 1024  # upstream's DeviceSelector expression limit, in bytes
CACHE_SIZE = 10  # upstream's DynamicResources plugin keeps the 10 most recently compiled expressions
# ... and within a byte budget: a compiled program holds about 24 bytes per byte of its text
# (measured), charged 32 per byte + 4 KiB; ten programs of the 10 KiB limit fit
CACHE_BYTES = 4 << 20
MAX_CONTEXTS = 16  # evaluation contexts a device keeps (one per set of domains its selectors miss)
MISSING_KEY_HINT = ". consider guarding the check with has() for optional fields"  # upstream's, less `.?`
_Q, _V = "__k8s_quantity__", "__k8s_semver__"
_MACRO = re.compile(r"\.\s*(all|exists_one|exists|map|filter)\s*\(")
_DOMAIN = re.compile(r"\b(?:attributes|capacity)\s*\[\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')\s*\]")
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
                     r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$")


def _lib():
    """The CEL library, imported on first use: only clusters with DRA selectors need it, and its
    import is a quarter of a second of every operator's start-up."""
    import cel
    return cel


class CELError(ValueError):
    """A selector that cannot be compiled (``kind == "compile"``) or evaluated (``"runtime"``); the
    message reads as upstream's: ``CEL compile error: ...`` / ``CEL runtime error: ...``."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"CEL {kind} error: {detail}")
        self.kind, self.detail = kind, detail


# --- quantities and versions -------------------------------------------------------------------

_MEMO_KEY = 64  # longer strings are converted each time: 4,096 memo entries stay under 1 MiB


def _quantity_value(s: Any) -> dict:
    return {_Q: (_canonical if not isinstance(s, str) or len(s) <= _MEMO_KEY else _canonical.__wrapped__)(s)}


@lru_cache(maxsize=4096)
def _canonical(s: Any) -> str:
    """The exact value of quantity ``s`` as a plain decimal string (cached for short strings:
    selectors repeat them)."""
    try:
        d = parse_quantity(s)
    except QuantityError as e:
        raise ValueError(str(e)) from None
    return format(d.normalize(), "f") if d else "0"


def _semver_value(s: Any) -> dict:
    if not isinstance(s, str) or not _SEMVER.match(s):
        raise ValueError(f"invalid semver: {s!r}")
    return {_V: s.split("+", 1)[0]}  # build metadata does not take part in equality or precedence


def _semver_key(v: str) -> tuple:
    core, _, pre = v.partition("-")
    nums = tuple(int(x) for x in core.split("."))
    if not pre:
        return nums, (1,)  # a release ranks above its pre-releases
    ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return nums, (0, ids)


def _unwrap(x: Any, what: str):
    if isinstance(x, Mapping):
        if _Q in x:
            q = x[_Q]
            return _Q, (Decimal(q) if isinstance(q, str) and len(q) > _MEMO_KEY else _decimal(q))
        if _V in x:
            return _V, _semver_key(x[_V])
    raise TypeError(f"no such overload: {what} on {type(x).__name__}")


_decimal = lru_cache(maxsize=4096)(Decimal)


def _compare(a: Any, b: Any) -> int:
    ka, va = _unwrap(a, "compareTo")
    kb, vb = _unwrap(b, "compareTo")
    if ka != kb:
        raise TypeError("no such overload: compareTo between a quantity and a semver")
    return (va > vb) - (va < vb)


def _version_part(i: int, name: str):
    def part(v: Any) -> int:
        k, key = _unwrap(v, name)
        if k != _V:
            raise TypeError(f"no such overload: {name} on a quantity")
        return key[0][i]
    return part


def _quantity_fn(name: str, fn):
    def call(q: Any):
        k, d = _unwrap(q, name)
        if k != _Q:
            raise TypeError(f"no such overload: {name} on a semver")
        return fn(d)
    return call


_FUNCTIONS = {
    "quantity": _quantity_value, "semver": _semver_value,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "major": _version_part(0, "major"), "minor": _version_part(1, "minor"), "patch": _version_part(2, "patch"),
    "sign": _quantity_fn("sign", lambda d: (d > 0) - (d < 0)),
    "isInteger": _quantity_fn("isInteger", lambda d: d == d.to_integral_value() and abs(d) < 2**63),
    "asInteger": _quantity_fn("asInteger", lambda d: _as_integer(d)),
}


def _as_integer(d: Decimal) -> int:
    if d != d.to_integral_value() or abs(d) >= 2**63:
        raise ValueError("cannot convert value to integer")
    return int(d)


# --- the device variable -----------------------------------------------------------------------

def _attribute(v: Any) -> Any:
    if isinstance(v, Mapping) and len(v) == 1:
        (k, inner), = v.items()
        if k == "version":
            return _semver_value(inner)
        if k in ("int", "bool", "string"):
            return inner
    return v


def _capacity(v: Any) -> Any:
    if isinstance(v, Mapping) and _Q not in v:
        v = v.get("value")
    return v if isinstance(v, Mapping) else _quantity_value(v)


class Device:
    """The ``device`` variable, converted once from a mapping of driver, attributes, capacity and
    allowMultipleAllocations, with the library's evaluation contexts (built on first use: a
    reused context evaluates in well under a microsecond, a new one costs about 20 us). Pass it to
    ``matches`` when a device meets several selectors. Not for concurrent use from several threads."""

    __slots__ = ("var", "_contexts")

    def __init__(self, device: Mapping[str, Any]):
        self.var = {
            "driver": device.get("driver", ""),
            "attributes": {dom: {n: _attribute(v) for n, v in names.items()}
                           for dom, names in (device.get("attributes") or {}).items()},
            "capacity": {dom: {n: _capacity(v) for n, v in names.items()}
                         for dom, names in (device.get("capacity") or {}).items()},
            "allowMultipleAllocations": bool(device.get("allowMultipleAllocations", False)),
        }
        self._contexts: dict[frozenset, Any] = {}

    def context(self, domains: frozenset) -> Any:
        """The context where each of ``domains`` exists (empty when the device lacks it)."""
        var = self.var
        missing = frozenset(d for d in domains if d not in var["attributes"] or d not in var["capacity"])
        ctx = self._contexts.get(missing)
        if ctx is None:
            if missing:
                var = dict(var, attributes=dict(var["attributes"]), capacity=dict(var["capacity"]))
                for d in missing:
                    var["attributes"].setdefault(d, {})
                    var["capacity"].setdefault(d, {})
            ctx = _lib().Context({"device": var}, functions=_FUNCTIONS)
            if len(self._contexts) < MAX_CONTEXTS:  # the sets come from selectors: beyond, built each time
                self._contexts[missing] = ctx
        return ctx


# --- compiling and evaluating ------------------------------------------------------------------

def _code(text: str) -> str:
    """``text`` as CEL's lexer splits it, with every string literal replaced by ``""`` and every
    comment (``//`` to the end of the line) by a space: what is left is code. Raw strings
    (``r"..."``, escapes not processed), bytes (``b"..."``) and triple-quoted strings are read as
    CEL reads them, so no literal or comment can hide a macro from the estimate."""
    out: list[str] = []
    i, n, last = 0, len(text), 0
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            out.append(text[last:i] + " ")
            j = text.find("\n", i)
            i = last = n if j < 0 else j
            continue
        if c in "\"'":
            k = i  # a prefix of r/R/b/B letters (at most two), not part of a longer identifier
            while k > 0 and i - k < 2 and text[k - 1] in "rRbB":
                k -= 1
            if k > 0 and (text[k - 1].isalnum() or text[k - 1] == "_"):
                k = i
            raw = any(ch in "rR" for ch in text[k:i])
            quote = c * 3 if text.startswith(c * 3, i) else c
            j = i + len(quote)
            while j < n and not text.startswith(quote, j):
                j += 2 if text[j] == "\\" and not raw else 1
            out.append(text[last:k] + '""')
            i = last = min(n, j + len(quote))
            continue
        i += 1
    out.append(text[last:])
    return "".join(out)


def estimated_cost(text: str) -> int:
    """The static estimate described in the module docstring: ``len(text) * W ** depth``, the
    depth and ``W`` read from the code alone (``_code``: no string literal or comment counts)."""
    code = _code(text)
    opens = {m.end() - 1 for m in _MACRO.finditer(code)}
    depth = deepest = 0
    stack: list[bool] = []
    for i, c in enumerate(code):
        if c == "(":
            macro = i in opens
            stack.append(macro)
            depth += macro
            deepest = max(deepest, depth)
        elif c == ")" and stack:
            depth -= stack.pop()
    separators = code.count(",") + code.count("+")
    return max(1, len(text)) * max(32, 1 + separators) ** deepest


class Selector:
    """A compiled selector: the program and the domains its text names."""

    __slots__ = ("text", "program", "domains")

    def __init__(self, text: str):
        self.text = text
        if len(text.encode()) > MAX_EXPRESSION_LENGTH:
            raise CELError("compile", f"expression is {len(text.encode())} bytes long, "
                                      f"more than the limit of {MAX_EXPRESSION_LENGTH}")
        cost = estimated_cost(text)
        if cost > MAX_COST:
            raise CELError("compile", f"estimated cost {cost} exceeds the limit of {MAX_COST}")
        try:
            self.program = _lib().compile(text)
        except Exception as e:  # the library reports syntax errors as ValueError
            raise CELError("compile", str(e)) from None
        self.domains = frozenset(m.group(1)[1:-1] for m in _DOMAIN.finditer(text))

    def evaluate(self, device: Device | Mapping[str, Any]) -> bool:
        dev = device if isinstance(device, Device) else Device(device)
        try:
            result = self.program.execute(dev.context(self.domains))
        except KeyError as e:
            raise CELError("runtime", f"no such key: {e.args[0] if e.args else e}{MISSING_KEY_HINT}") from None
        except Exception as e:
            raise CELError("runtime", str(e)) from None
        if not isinstance(result, bool):
            raise CELError("runtime", f"CEL result of type {_type_name(result)} could not be converted to bool")
        return result


def _type_name(v: Any) -> str:
    if isinstance(v, Mapping) and (_Q in v or _V in v):
        return "Quantity" if _Q in v else "Semver"
    return {int: "int", float: "double", str: "string", bytes: "bytes", list: "list", dict: "map",
            type(None): "null_type"}.get(type(v), type(v).__name__)


_cache = BoundedCache(CACHE_BYTES, max_entry=CACHE_BYTES, max_entries=CACHE_SIZE)
_cache_lock = Lock()


def _charge(text: str) -> int:
    return 32 * len(text.encode()) + 4096


def compile_selector(text: str) -> Selector:
    """The compiled selector for ``text``, from a bounded LRU cache keyed by the text (compile errors
    are not cached): the 10 most recent, within ``CACHE_BYTES``."""
    with _cache_lock:
        sel = _cache.get(text)
        if sel is not None:
            return sel
    sel = Selector(text)
    with _cache_lock:
        cur = _cache.get(text)
        if cur is not None:
            return cur
        _cache.put(text, sel, _charge(text))
    return sel


def cache_stats() -> dict[str, int]:
    """bytes, entries, budget, evictions, uncached of the compiled-selector cache (for the metrics)."""
    with _cache_lock:
        return _cache.stats()


def matches(text: str, device: Device | Mapping[str, Any]) -> bool:
    """Whether ``device`` satisfies the selector ``text``; a ``CELError`` for compile errors, runtime
    errors and non-bool results (upstream: an error, not "does not match")."""
    return compile_selector(text).evaluate(device)
