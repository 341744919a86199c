"""Label selectors (metav1.LabelSelector) and node selector terms (v1.NodeSelectorTerm), parsed once.

Semantics follow apimachinery: a nil LabelSelector matches nothing, an empty one matches
everything; NotIn/DoesNotExist match when the key is absent. Node selector requirements add Gt/Lt
(integer comparison, label must be present) and matchFields on ``metadata.name``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping


class SelectorError(ValueError):
    """A selector that the API would reject (unknown operator, missing values...)."""


_SET_OPS = {"In", "NotIn", "Exists", "DoesNotExist"}
_NODE_OPS = _SET_OPS | {"Gt", "Lt"}
_INT_RE = re.compile(r"[+-]?[0-9]+")


def _parse_int64(s: str) -> int:
    """Go's strconv.ParseInt(s, 10, 64): ASCII digits with an optional sign, within int64
    (Python's int() would also take spaces, underscores and unbounded values)."""
    if not _INT_RE.fullmatch(s):
        raise ValueError(f"invalid integer {s!r}")
    v = int(s)
    if not -(2**63) <= v < 2**63:
        raise ValueError(f"integer out of range {s!r}")
    return v


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return self.key in labels and labels[self.key] in self.values
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt"):
            if self.key not in labels:
                return False
            try:
                have = _parse_int64(labels[self.key])
                want = _parse_int64(self.values[0])
            except (ValueError, IndexError):
                return False
            return have > want if op == "Gt" else have < want
        return False


def _requirement(expr: Mapping[str, Any], allowed: set[str], where: str) -> Requirement:
    if not isinstance(expr, Mapping):
        raise SelectorError(f"{where}: must be an object")
    key = expr.get("key")
    op = expr.get("operator")
    values = expr.get("values") or []
    if not isinstance(key, str) or not key:
        raise SelectorError(f"{where}.key: required")
    if op not in allowed:
        raise SelectorError(f"{where}.operator: unsupported operator {op!r}")
    if op in ("In", "NotIn") and not values:
        raise SelectorError(f"{where}.values: must be non-empty for operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise SelectorError(f"{where}.values: must be empty for operator {op}")
    if op in ("Gt", "Lt") and len(values) != 1:
        raise SelectorError(f"{where}.values: must have exactly one element for operator {op}")
    return Requirement(key, op, tuple(str(v) for v in values))


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed metav1.LabelSelector. ``nothing`` marks the nil selector (matches no object)."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @classmethod
    def parse(cls, d: Mapping[str, Any] | None, where: str = "labelSelector") -> "LabelSelector":
        if d is None:
            return NOTHING
        if not isinstance(d, Mapping):
            raise SelectorError(f"{where}: must be an object")
        reqs: list[Requirement] = []
        for k, v in (d.get("matchLabels") or {}).items():
            reqs.append(Requirement(str(k), "In", (str(v),)))
        for i, e in enumerate(d.get("matchExpressions") or []):
            reqs.append(_requirement(e, _SET_OPS, f"{where}.matchExpressions[{i}]"))
        return cls(tuple(reqs))

    @property
    def empty(self) -> bool:
        """True for the empty selector ``{}``, which matches everything."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for r in self.requirements:
            if not r.matches(labels):
                return False
        return True

    def and_labels(self, extra: Mapping[str, str]) -> "LabelSelector":
        """This selector ANDed with key=value pairs (matchLabelKeys merging)."""
        if self.nothing or not extra:
            return self
        return LabelSelector(self.requirements + tuple(Requirement(k, "In", (v,)) for k, v in extra.items()))


NOTHING = LabelSelector(nothing=True)
EVERYTHING = LabelSelector()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One v1.NodeSelectorTerm: all expressions (on labels) and fields (on metadata.name) must hold."""

    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]

    @property
    def empty(self) -> bool:
        return not self.expressions and not self.fields

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if self.empty:  # an empty term matches no objects
            return False
        for r in self.expressions:
            if not r.matches(labels):
                return False
        if self.fields:
            f = {"metadata.name": node_name}
            for r in self.fields:
                if not r.matches(f):
                    return False
        return True

    @classmethod
    def parse(cls, d: Mapping[str, Any], where: str) -> "NodeSelectorTerm":
        if not isinstance(d, Mapping):
            raise SelectorError(f"{where}: must be an object")
        exprs = tuple(_requirement(e, _NODE_OPS, f"{where}.matchExpressions[{i}]")
                      for i, e in enumerate(d.get("matchExpressions") or []))
        fields = []
        for i, e in enumerate(d.get("matchFields") or []):
            r = _requirement(e, {"In", "NotIn"}, f"{where}.matchFields[{i}]")
            if r.key != "metadata.name":
                raise SelectorError(f"{where}.matchFields[{i}].key: not a valid field selector key {r.key!r}")
            if len(r.values) != 1:
                raise SelectorError(f"{where}.matchFields[{i}].values: must have one element")
            fields.append(r)
        return cls(exprs, tuple(fields))


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """v1.NodeSelector: terms are ORed."""

    terms: tuple[NodeSelectorTerm, ...]

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        for t in self.terms:
            if t.matches(labels, node_name):
                return True
        return False

    @classmethod
    def parse(cls, d: Mapping[str, Any], where: str) -> "NodeSelector":
        terms = d.get("nodeSelectorTerms") if isinstance(d, Mapping) else None
        if not terms:
            raise SelectorError(f"{where}.nodeSelectorTerms: required")
        return cls(tuple(NodeSelectorTerm.parse(t, f"{where}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms)))
