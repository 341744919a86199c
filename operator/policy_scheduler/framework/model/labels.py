"""Label selectors (metav1.LabelSelector) and node selector terms (v1.NodeSelectorTerm), parsed once;
and their validation, in apimachinery's words, for everything a policy gives.

Semantics follow apimachinery: a nil LabelSelector matches nothing, an empty one matches
everything; NotIn/DoesNotExist match when the key is absent. A null label value (a matchLabels
value, an entry of values) is the empty string, as Go decodes JSON null into a string. Node selector requirements add Gt/Lt
(integer comparison, label must be present) and matchFields on ``metadata.name``.

Validation (the second half of this module): label keys are qualified names (IsQualifiedName),
label values at most 63 characters of ``(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?``
(IsValidLabelValue), label selectors as ``metav1validation.ValidateLabelSelector`` (values
included), node selectors as component-helpers ``nodeaffinity.NewNodeSelector`` /
``NewPreferredSchedulingTerms`` (``labels.NewRequirement``). The pydantic models
(``LabelSelectorSpec``, ``NodeSelectorSpec``, ``NodeAffinitySpec``) are what the policy and the
plugins' args declare; they carry the size caps of ``validation.py`` and run these checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Mapping

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from ..validation import (MAX_LABEL_KEY, MAX_LABEL_VALUE, MAX_MATCH_LABELS, MAX_REQUIREMENTS, MAX_SHORT, MAX_TERMS,
                          MAX_VALUES, int32_errors, invalid, not_supported, raise_if, required)


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


def _value(v: Any) -> str:
    """A label value as Go reads it: JSON null is the empty string."""
    return "" if v is None else str(v)


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
    return Requirement(key, op, tuple(_value(v) for v in values))


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
            reqs.append(Requirement(str(k), "In", (_value(v),)))
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


# ---------------------------------------------------------------------------------------- validation
# apimachinery pkg/api/validate/content (IsLabelKey, IsLabelValue, IsDNS1123Subdomain): the same
# checks and messages. Our own constant patterns, on input whose length is checked first.

_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_LABEL_VALUE_FMT = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                    "and must start and end with an alphanumeric character")
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                          "and must start and end with an alphanumeric character")
_LABEL_KEY_RE = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_MAX_CHECKED = 1024  # longer strings fail on length alone; the patterns never see them


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """apimachinery RegexError."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    msg += " (e.g. "
    for i, ex in enumerate(examples):
        if i > 0:
            msg += " or "
        msg += f"'{ex}', "
    return msg + f"regex used for validation is '{fmt}')"


def _nbytes(s: str) -> int:
    return len(s.encode())


def _fullmatch(pattern: re.Pattern, s: str) -> bool:
    return len(s) <= _MAX_CHECKED and pattern.fullmatch(s) is not None


def dns1123_subdomain_errors(value: str) -> list[str]:
    """IsDNS1123Subdomain."""
    errs = []
    if _nbytes(value) > 253:
        errs.append("must be no more than 253 bytes")
    if not _fullmatch(_DNS1123_SUBDOMAIN_RE, value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName (IsLabelKey): ``[prefix/]name``, the prefix a DNS-1123 subdomain, the name
    at most 63 characters of ``([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]``."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    else:
        return ["a valid label key " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif _nbytes(name) > 63:
        errs.append("name part must be no more than 63 bytes")
    if not _fullmatch(_LABEL_KEY_RE, name):
        errs.append("name part " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value_errors(value: str) -> list[str]:
    """IsValidLabelValue: at most 63 characters, empty allowed."""
    errs = []
    if _nbytes(value) > 63:
        errs.append("must be no more than 63 bytes")
    if not _fullmatch(_LABEL_VALUE_RE, value):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def validate_label_name(key: str, path: str) -> list[str]:
    """metav1validation.ValidateLabelName: one error per problem of the qualified name."""
    return [invalid(path, key, m) for m in qualified_name_errors(key)]


def validate_label_value(value: str, path: str) -> list[str]:
    return [invalid(path, value, m) for m in label_value_errors(value)]


def validate_labels(labels: Mapping[str, str], path: str) -> list[str]:
    """metav1validation.ValidateLabels (errors name the map, as upstream's do)."""
    errs: list[str] = []
    for k, v in labels.items():
        errs += validate_label_name(k, path)
        errs += validate_label_value(v, path)
    return errs


LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_SELECTOR_OPERATORS = ("In", "NotIn")
NODE_FIELD_KEYS = ("metadata.name",)


def _sub(path: str, child: str) -> str:
    return f"{path}.{child}" if path else child


def label_selector_requirement_errors(expr: Mapping[str, Any], path: str) -> list[str]:
    """metav1validation.ValidateLabelSelectorRequirement, label values checked."""
    errs: list[str] = []
    op, key, values = expr.get("operator"), expr.get("key", ""), expr.get("values") or []
    if op in ("In", "NotIn"):
        if not values:
            errs.append(required(_sub(path, "values"), "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist"):
        if values:
            errs.append(f"{_sub(path, 'values')}: Forbidden: may not be specified when `operator` is 'Exists' or "
                        "'DoesNotExist'")
    else:
        errs.append(invalid(_sub(path, "operator"), op, "not a valid selector operator"))
    errs += validate_label_name(key, _sub(path, "key"))
    for i, v in enumerate(values):
        errs += validate_label_value(v, f"{_sub(path, 'values')}[{i}]")
    return errs


def label_selector_errors(sel: Mapping[str, Any], path: str) -> list[str]:
    """metav1validation.ValidateLabelSelector (with label values checked, as the API server does
    for new objects)."""
    errs = validate_labels(sel.get("matchLabels") or {}, _sub(path, "matchLabels"))
    for i, e in enumerate(sel.get("matchExpressions") or []):
        errs += label_selector_requirement_errors(e, f"{_sub(path, 'matchExpressions')}[{i}]")
    return errs


def _is_int64(s: str) -> bool:
    if len(s) > 20 or not _INT_RE.fullmatch(s):
        return False
    return -(2**63) <= int(s) < 2**63


def new_requirement_errors(key: str, op: str, values: list[str], path: str) -> list[str]:
    """labels.NewRequirement's checks, as node selector terms get them."""
    errs: list[str] = []
    key_errs = qualified_name_errors(key)
    if key_errs:
        errs.append(invalid(_sub(path, "key"), key, "; ".join(key_errs)))
    vpath = _sub(path, "values")
    if op in ("In", "NotIn"):
        if not values:
            errs.append(invalid(vpath, values, "for 'in', 'notin' operators, values set can't be empty"))
    elif op in ("Exists", "DoesNotExist"):
        if values:
            errs.append(invalid(vpath, values, "values set must be empty for exists and does not exist"))
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            errs.append(invalid(vpath, values, "for 'Gt', 'Lt' operators, exactly one value is required"))
        for i, v in enumerate(values):
            if not _is_int64(v):
                errs.append(invalid(f"{vpath}[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer"))
    for i, v in enumerate(values):
        v_errs = label_value_errors(v)
        if v_errs:
            errs.append(invalid(f"{vpath}[{i}][{key}]", v, "; ".join(v_errs)))
    return errs


def node_selector_term_errors(term: Mapping[str, Any], path: str) -> list[str]:
    """nodeaffinity newNodeSelectorTerm: matchExpressions as label requirements (operators In,
    NotIn, Exists, DoesNotExist, Gt, Lt), matchFields In/NotIn with exactly one value. Field keys
    other than ``metadata.name`` are refused too (the API server's rule for pods; nothing else
    could ever match a node)."""
    errs: list[str] = []
    for i, e in enumerate(term.get("matchExpressions") or []):
        p = f"{_sub(path, 'matchExpressions')}[{i}]"
        op = e.get("operator")
        if op not in NODE_SELECTOR_OPERATORS:
            errs.append(not_supported(_sub(p, "operator"), op, NODE_SELECTOR_OPERATORS))
            continue
        errs += new_requirement_errors(e.get("key", ""), op, list(e.get("values") or []), p)
    for i, e in enumerate(term.get("matchFields") or []):
        p = f"{_sub(path, 'matchFields')}[{i}]"
        op, values = e.get("operator"), list(e.get("values") or [])
        if op in FIELD_SELECTOR_OPERATORS:
            if len(values) != 1:
                errs.append(invalid(_sub(p, "values"), values, "must have one element"))
        else:
            errs.append(not_supported(_sub(p, "operator"), op, FIELD_SELECTOR_OPERATORS))
        if e.get("key") not in NODE_FIELD_KEYS:
            errs.append(not_supported(_sub(p, "key"), e.get("key"), NODE_FIELD_KEYS))
    return errs


def _empty_term(term: Mapping[str, Any]) -> bool:
    return not term.get("matchExpressions") and not term.get("matchFields")


def node_selector_errors(ns: Mapping[str, Any], path: str) -> list[str]:
    """nodeaffinity.NewNodeSelector: every non-empty term parses (empty terms select nothing and
    are not parsed)."""
    errs: list[str] = []
    for i, t in enumerate(ns.get("nodeSelectorTerms") or []):
        if not _empty_term(t):
            errs += node_selector_term_errors(t, f"{_sub(path, 'nodeSelectorTerms')}[{i}]")
    return errs


def preferred_terms_errors(terms: list[Mapping[str, Any]], path: str) -> list[str]:
    """nodeaffinity.NewPreferredSchedulingTerms: terms with weight 0 or an empty preference are
    skipped unparsed; the others' preference must parse. Weights are int32."""
    errs: list[str] = []
    for i, t in enumerate(terms):
        p = f"{path}[{i}]"
        errs += int32_errors(_sub(p, "weight"), t.get("weight", 0))
        pref = t.get("preference") or {}
        if t.get("weight", 0) == 0 or _empty_term(pref):
            continue
        errs += node_selector_term_errors(pref, _sub(p, "preference"))
    return errs


# ---------------------------------------------------------------------------------------- models
class _Spec(BaseModel):
    # defer_build: validators are built on first use, not at import (the operator's start-up)
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True, defer_build=True)

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


LabelKey = Annotated[str, Field(max_length=MAX_LABEL_KEY)]
# JSON null is "" (as Go decodes it into a string): {app: null} selects app=""
LabelValue = Annotated[str, Field(max_length=MAX_LABEL_VALUE), BeforeValidator(lambda v: "" if v is None else v)]
NodeName = Annotated[str, Field(max_length=253)]


class LabelSelectorRequirementSpec(_Spec):
    key: LabelKey
    operator: str = Field(max_length=MAX_SHORT, json_schema_extra={"enum": list(LABEL_SELECTOR_OPERATORS)})
    values: list[LabelValue] | None = Field(default=None, max_length=MAX_VALUES)


class LabelSelectorSpec(_Spec):
    """A metav1.LabelSelector, validated as the API server validates one. ``{}`` selects everything."""

    match_labels: dict[str, LabelValue] | None = Field(default=None, alias="matchLabels", max_length=MAX_MATCH_LABELS)
    match_expressions: list[LabelSelectorRequirementSpec] | None = Field(
        default=None, alias="matchExpressions", max_length=MAX_REQUIREMENTS)

    @model_validator(mode="after")
    def _valid(self) -> "LabelSelectorSpec":
        raise_if(label_selector_errors(self.as_dict(), ""))
        return self

    def selector(self) -> "LabelSelector":
        return LabelSelector.parse(self.as_dict())


class NodeSelectorRequirementSpec(_Spec):
    key: LabelKey
    operator: str = Field(max_length=MAX_SHORT, json_schema_extra={"enum": list(NODE_SELECTOR_OPERATORS)})
    values: list[LabelValue] | None = Field(default=None, max_length=MAX_VALUES)


class FieldSelectorRequirementSpec(_Spec):
    key: str = Field(max_length=MAX_SHORT, json_schema_extra={"enum": list(NODE_FIELD_KEYS)})
    operator: str = Field(max_length=MAX_SHORT, json_schema_extra={"enum": list(FIELD_SELECTOR_OPERATORS)})
    values: list[NodeName] | None = Field(default=None, max_length=MAX_VALUES)


class NodeSelectorTermSpec(_Spec):
    match_expressions: list[NodeSelectorRequirementSpec] | None = Field(
        default=None, alias="matchExpressions", max_length=MAX_REQUIREMENTS)
    match_fields: list[FieldSelectorRequirementSpec] | None = Field(
        default=None, alias="matchFields", max_length=MAX_REQUIREMENTS)


class NodeSelectorSpec(_Spec):
    """A v1.NodeSelector: terms ORed (checked by the NodeAffinitySpec holding it)."""

    node_selector_terms: list[NodeSelectorTermSpec] = Field(
        default_factory=list, alias="nodeSelectorTerms", max_length=MAX_TERMS)


class PreferredSchedulingTermSpec(_Spec):
    weight: int = 0
    preference: NodeSelectorTermSpec = Field(default_factory=NodeSelectorTermSpec)


class NodeAffinitySpec(_Spec):
    """A v1.NodeAffinity (its two scheduling fields)."""

    required: NodeSelectorSpec | None = Field(default=None, alias="requiredDuringSchedulingIgnoredDuringExecution")
    preferred: list[PreferredSchedulingTermSpec] | None = Field(
        default=None, alias="preferredDuringSchedulingIgnoredDuringExecution", max_length=MAX_TERMS)

    @model_validator(mode="after")
    def _valid(self) -> "NodeAffinitySpec":
        d = self.as_dict()
        req, pref = "requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"
        raise_if(node_selector_errors(d.get(req) or {}, req) + preferred_terms_errors(d.get(pref) or [], pref))
        return self
