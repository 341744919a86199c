"""Generated invalid SchedulingPolicy specs, each with the field its error must name.

``invalid_policies()`` returns ``Case``s: a spec that is wrong in one place, the field path the
refusal must name (``spec.plugins[0].args.hardPodAffinityWeight``) and a fragment of the detail.
They cover every plugin's args, the spec's own fields, label keys and values in every place they
occur, selectors, size caps and regular expressions. ``valid_policies()`` returns specs that must
pass. Used by tests/unit/test_invalid_policies.py (the operator's validation) and
tests/e2e/test_validation.py (the same specs through the API server).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]  # the repository


@dataclass(frozen=True)
class Case:
    name: str
    spec: dict[str, Any]
    path: str  # the field the error must name (spec.…)
    detail: str = ""  # a fragment of the error's detail


def names_field(error: str, path: str) -> bool:
    """``error`` ("<path>: <detail>") names ``path`` or a field inside it."""
    p = error.split(": ", 1)[0]
    return p == path or p.startswith((path + ".", path + "["))


def refusal_for(errors: list[str], case: Case) -> str | None:
    """The error of ``errors`` that refuses ``case`` as expected, or None."""
    for e in errors:
        if names_field(e, case.path) and case.detail in e.split(": ", 1)[-1]:
            return e
    return None


# ---------------------------------------------------------------------------------------- building blocks
def plugin(name: str, args: Any = None, **ref: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, **ref}
    if args is not None:
        d["args"] = args
    return d


def with_plugin(name: str, args: Any = None, **ref: Any) -> dict[str, Any]:
    """A spec whose only listed plugin (index 0) is ``name``."""
    return {"plugins": [plugin(name, args, **ref)]}


def args_path(field: str = "") -> str:
    return "spec.plugins[0].args" + (("." + field) if field and not field.startswith("[") else field)


NO_ARGS = ["PrioritySort", "NodeUnschedulable", "NodeName", "TaintToleration", "NodePorts", "ImageLocality",
           "NodeDeclaredFeatures",
           "SchedulingGates", "DefaultBinder"]
NO_SCORE = ["PrioritySort", "NodeUnschedulable", "NodeName", "NodePorts", "NodeLabelMatch", "MetricThreshold",
            "NodeDeclaredFeatures",
            "SchedulingGates", "DefaultBinder"]
SCORE = ["TaintToleration", "NodeAffinity", "NodeResourcesFit", "NodeResourcesBalancedAllocation", "PodTopologySpread",
         "InterPodAffinity", "ImageLocality", "LoadAware", "MetricScore"]

# label keys that are not qualified names, and label values that are not valid (apimachinery)
BAD_KEYS = ["", "-a", "a-", "a b", "a/b/c", "/a", "a/", "Example.com/a", "exa_mple.com/a", "a" * 64,
            "a" * 254 + "/b", "é", "a\n", ".a", "a:b"]
BAD_VALUES = ["-a", "a-", "a b", "a/b", "é", "a\n", "_a", ".a", "a:b"]
LONG_VALUE = "v" * 64

REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"

NLM = "NodeLabelMatch"
NODE_LABEL = {"key": "pool", "value": "web"}


def nlm(**args: Any) -> dict[str, Any]:
    return with_plugin(NLM, {"nodeLabel": NODE_LABEL, **args})


def affinity_required(*exprs: dict, fields: list | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": list(exprs)} if exprs else {}
    if fields is not None:
        term["matchFields"] = fields
    return with_plugin("NodeAffinity", {"addedAffinity": {REQ: {"nodeSelectorTerms": [term]}}})


def affinity_preferred(*exprs: dict, weight: Any = 1) -> dict[str, Any]:
    return with_plugin("NodeAffinity", {"addedAffinity": {PREF: [
        {"weight": weight, "preference": {"matchExpressions": list(exprs)}}]}})


def req(key: str, op: str, *values: str) -> dict[str, Any]:
    d: dict[str, Any] = {"key": key, "operator": op}
    if values:
        d["values"] = list(values)
    return d


def dc(**kw: Any) -> dict[str, Any]:
    return {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", **kw}


def spread(*constraints: dict, **args: Any) -> dict[str, Any]:
    return with_plugin("PodTopologySpread", {"defaultingType": "List", "defaultConstraints": list(constraints), **args})


def fit(**args: Any) -> dict[str, Any]:
    return with_plugin("NodeResourcesFit", args)


RTCR = "RequestedToCapacityRatio"


def rtcr(*points: dict) -> dict[str, Any]:
    return fit(scoringStrategy={"type": RTCR, "requestedToCapacityRatio": {"shape": list(points)}})


def load_aware(**args: Any) -> dict[str, Any]:
    return with_plugin("LoadAware", args)


def threshold_rule(**kw: Any) -> dict[str, Any]:
    return {"name": "m", "query": "up", "rejectAbove": 1, **kw}


def score_rule(**kw: Any) -> dict[str, Any]:
    return {"name": "m", "query": "up", "prefer": "Lower", **kw}


def thresholds(*rules: dict) -> dict[str, Any]:
    return with_plugin("MetricThreshold", {"metrics": list(rules)})


def scores(*rules: dict) -> dict[str, Any]:
    return with_plugin("MetricScore", {"metrics": list(rules)})


# ---------------------------------------------------------------------------------------- the cases
def _spec_cases() -> list[Case]:
    c: list[Case] = []
    ok = [plugin("NodeResourcesFit")]
    c.append(Case("plugins-empty", {"plugins": []}, "spec.plugins", "at least 1"))
    c.append(Case("plugins-missing", {}, "spec.plugins", "Required value"))
    c.append(Case("plugins-not-a-list", {"plugins": {"name": "NodeName"}}, "spec.plugins", "must be a list"))
    for n in (65, 100, 1000, 10000):  # past 1,024 items a list is past the limits of a spec (policy/limits.py)
        c.append(Case(f"plugins-{n}", {"plugins": [plugin(f"P{i}") for i in range(n)]}, "spec.plugins",
                      f"Too many: {n}: must have at most {64 if n <= 1024 else 1024} items"))
    c.append(Case("plugins-10000-same", {"plugins": [plugin("NodeName")] * 10000}, "spec.plugins", "Too many"))
    c.append(Case("plugin-unknown", {"plugins": [plugin("Bogus")]}, "spec.plugins[0].name", "unknown plugin"))
    c.append(Case("plugin-lowercase", {"plugins": ok + [plugin("nodename")]}, "spec.plugins[1].name",
                  "unknown plugin"))
    c.append(Case("plugin-name-empty", {"plugins": [plugin("")]}, "spec.plugins[0].name", "Required value"))
    c.append(Case("plugin-name-long", {"plugins": [plugin("N" * 129)]}, "spec.plugins[0].name", "Too long"))
    c.append(Case("plugin-name-int", {"plugins": [{"name": 5}]}, "spec.plugins[0].name", "must be a string"))
    c.append(Case("plugin-no-name", {"plugins": [{"weight": 1}]}, "spec.plugins[0].name", "Required value"))
    c.append(Case("plugin-unknown-field", {"plugins": [{"name": "NodeName", "wieght": 1}]}, "spec.plugins[0].wieght",
                  "Extra inputs"))
    c.append(Case("plugin-args-list", {"plugins": [{"name": "NodeResourcesFit", "args": [1]}]},
                  "spec.plugins[0].args", "must be an object"))
    c.append(Case("plugin-args-string", {"plugins": [{"name": "NodeResourcesFit", "args": "x"}]},
                  "spec.plugins[0].args", "must be an object"))
    for name in ("NodeName", "NodeResourcesFit", "NodeLabelMatch", "SchedulingGates"):
        dup_args = {"podNamePattern": "x", "nodeLabel": NODE_LABEL} if name == NLM else None
        c.append(Case(f"duplicate-{name}", {"plugins": [plugin(name, dup_args), plugin("NodeUnschedulable"),
                                                        plugin(name, dup_args)]},
                      "spec.plugins[2].name", "duplicate plugin"))
    for name in NO_ARGS:
        c.append(Case(f"no-args-{name}", with_plugin(name, {"x": 1}), "spec.plugins[0].args", "takes no args"))
    for name in NO_SCORE:
        args = {"podNamePattern": "x", "nodeLabel": NODE_LABEL} if name == NLM else (
            {"metrics": [threshold_rule()]} if name == "MetricThreshold" else None)
        c.append(Case(f"weight-without-score-{name}", with_plugin(name, args, weight=2), "spec.plugins[0].weight",
                      "no Score extension point"))
    for name in SCORE:
        args = {"metrics": [score_rule()]} if name == "MetricScore" else None
        for w in (-1, -(2**31), 2**31, 2**40):
            c.append(Case(f"weight-{w}-{name}", with_plugin(name, args, weight=w), "spec.plugins[0].weight",
                          "out of range"))
    for w in ("5", 1.5, True, [1]):
        c.append(Case(f"weight-type-{w!r}", with_plugin("NodeResourcesFit", weight=w), "spec.plugins[0].weight",
                      "must be an integer"))
    # disabled
    c.append(Case("disabled-unlisted", {"plugins": ok, "disabled": [{"name": "ImageLocality"}]},
                  "spec.disabled[0].name", "is not in plugins"))
    c.append(Case("disabled-unknown", {"plugins": ok, "disabled": [{"name": "Bogus", "point": "filter"}]},
                  "spec.disabled[0].name", "is not in plugins"))
    c.append(Case("disabled-second-unlisted", {"plugins": ok, "disabled": [
        {"name": "NodeResourcesFit", "point": "score"}, {"name": "NodeName"}]}, "spec.disabled[1].name",
        "is not in plugins"))
    for point in ("scoring", "Filter", "", "all", "pre_filter"):
        c.append(Case(f"disabled-point-{point or 'empty'}", {"plugins": ok, "disabled": [
            {"name": "NodeResourcesFit", "point": point}]}, "spec.disabled[0].point", "Unsupported value"))
    c.append(Case("disabled-name-empty", {"plugins": ok, "disabled": [{"name": ""}]}, "spec.disabled[0].name",
                  "Required value"))
    c.append(Case("disabled-name-long", {"plugins": ok, "disabled": [{"name": "x" * 129}]}, "spec.disabled[0].name",
                  "Too long"))
    c.append(Case("disabled-unknown-field", {"plugins": ok, "disabled": [{"name": "NodeResourcesFit", "at": "x"}]},
                  "spec.disabled[0].at", "Extra inputs"))
    c.append(Case("disabled-257", {"plugins": ok, "disabled": [{"name": "NodeResourcesFit", "point": "score"}] * 257},
                  "spec.disabled", "Too many: 257: must have at most 256 items"))
    # percentageOfNodesToScore, schedulerName, unknown fields
    for v, why in ((-1, "greater than or equal to 0"), (101, "less than or equal to 100"), (1000, "less than"),
                   ("50", "must be an integer"), (12.5, "must be an integer")):
        c.append(Case(f"percentage-{v!r}", {"plugins": ok, "percentageOfNodesToScore": v},
                      "spec.percentageOfNodesToScore", why))
    for v in ("Policy_Scheduler", "-x", "x-", "a..b", "UPPER", "s" * 254, "a b"):
        c.append(Case(f"scheduler-name-{v[:20]}", {"plugins": ok, "schedulerName": v}, "spec.schedulerName",
                      "Too long" if len(v) > 253 else "must match"))
    c.append(Case("spec-unknown-field", {"plugins": ok, "plugin": []}, "spec.plugin", "Extra inputs"))
    c.append(Case("spec-typo-namespace-selector", {"plugins": ok, "nsSelector": {}}, "spec.nsSelector",
                  "Extra inputs"))
    # prometheus
    for v in ("ftp://prom:9090", "http://", "prometheus:9090", "http:// x", "http://" + "p" * 2048):
        c.append(Case(f"prometheus-address-{v[:16]}", {"plugins": ok, "prometheus": {"address": v}},
                      "spec.prometheus.address", "Too long" if len(v) > 2048 else "must match"))
    for fld in ("refreshInterval", "queryTimeout", "ttl", "usageLag"):
        for v in ("5", "1d", "-1s", "1.s", "s", "1" * 70 + "s"):
            c.append(Case(f"prometheus-{fld}-{v[:8]}", {"plugins": ok, "prometheus": {fld: v}},
                          f"spec.prometheus.{fld}", "Too long" if len(v) > 64 else "must match"))
    for fld in ("refreshInterval", "queryTimeout", "ttl"):
        for v in ("0s", "0ms", "0m0s"):
            c.append(Case(f"prometheus-{fld}-zero-{v}", {"plugins": ok, "prometheus": {fld: v}},
                          f"spec.prometheus.{fld}", "must be positive"))
    c.append(Case("prometheus-unknown-field", {"plugins": ok, "prometheus": {"url": "http://p:9090"}},
                  "spec.prometheus.url", "Extra inputs"))
    # tuning
    fit = {"NodeResourcesFit": [1, 10]}

    def tuning(plugins=None, **kw):
        return {"plugins": plugins or ok, "tuning": {"objective": {"nodesUsed": 1}, "bounds": fit, **kw}}

    c.append(Case("tuning-mode", tuning(mode="Bogus"), "spec.tuning.mode", "Unsupported value"))
    c.append(Case("tuning-objective-none", tuning(objective={}), "spec.tuning.objective", "positive weight"))
    c.append(Case("tuning-objective-negative", tuning(objective={"zoneSkew": -1}), "spec.tuning.objective.zoneSkew"))
    c.append(Case("tuning-bounds-unlisted", tuning(bounds={"PodTopologySpread": [1, 2]}),
                  "spec.tuning.bounds.PodTopologySpread", "must name a plugin listed in plugins"))
    c.append(Case("tuning-bounds-order", tuning(bounds={"NodeResourcesFit": [5, 2]}), "spec.tuning.bounds.NodeResourcesFit",
                  "1 <= min <= max"))
    c.append(Case("tuning-bounds-zero", tuning(bounds={"NodeResourcesFit": [0, 2]}), "spec.tuning.bounds.NodeResourcesFit"))
    c.append(Case("tuning-bounds-three", tuning(bounds={"NodeResourcesFit": [1, 2, 3]}),
                  "spec.tuning.bounds.NodeResourcesFit"))
    c.append(Case("tuning-bounds-not-score", tuning([plugin("NodeResourcesFit"), plugin("NodeName")],
                                                    bounds={"NodeName": [1, 2]}),
                  "spec.tuning.bounds.NodeName", "no Score extension point"))
    c.append(Case("tuning-interval-zero", tuning(interval="0s"), "spec.tuning.interval", "at least 1s"))
    c.append(Case("tuning-window-both", tuning(window={"pods": 10, "minutes": 5}), "spec.tuning.window.minutes",
                  "exactly one"))
    c.append(Case("tuning-window-pods", tuning(window={"pods": 5001}), "spec.tuning.window.pods"))
    c.append(Case("tuning-max-step", tuning(maxStep=0), "spec.tuning.maxStep"))
    c.append(Case("tuning-hot-nodes", tuning(objective={"hotNodes": 1}), "spec.tuning.objective.hotNodes",
                  "needs LoadAware"))
    return c


def _selector_cases(prefix: str, make) -> list[Case]:
    """A label selector at ``prefix`` (make(selector) -> spec): operators, values rules, keys and
    values, sizes (metav1validation.ValidateLabelSelector)."""
    c: list[Case] = []
    tag = prefix.rsplit(".", 1)[-1]
    for op in ("Gt", "Lt", "in", "Equals", "", "exists"):
        c.append(Case(f"{tag}-operator-{op or 'empty'}", make({"matchExpressions": [req("app", op, "1")]}),
                      f"{prefix}.matchExpressions[0].operator", ""))
    c.append(Case(f"{tag}-in-no-values", make({"matchExpressions": [req("app", "In")]}),
                  f"{prefix}.matchExpressions[0].values", "must be specified when `operator` is 'In' or 'NotIn'"))
    c.append(Case(f"{tag}-notin-empty-values", make({"matchExpressions": [{"key": "app", "operator": "NotIn",
                                                                           "values": []}]}),
                  f"{prefix}.matchExpressions[0].values", "must be specified"))
    c.append(Case(f"{tag}-exists-values", make({"matchExpressions": [req("app", "Exists", "x")]}),
                  f"{prefix}.matchExpressions[0].values", "may not be specified"))
    c.append(Case(f"{tag}-doesnotexist-values", make({"matchExpressions": [req("a", "Exists"),
                                                                            req("app", "DoesNotExist", "x")]}),
                  f"{prefix}.matchExpressions[1].values", "may not be specified"))
    for i, k in enumerate(BAD_KEYS):
        c.append(Case(f"{tag}-expr-key-{i}", make({"matchExpressions": [req(k, "Exists")]}),
                      f"{prefix}.matchExpressions[0].key", "Invalid value"))
        c.append(Case(f"{tag}-label-key-{i}", make({"matchLabels": {k: "v"}}), f"{prefix}.matchLabels",
                      "Invalid value"))
    for i, v in enumerate(BAD_VALUES):
        c.append(Case(f"{tag}-expr-value-{i}", make({"matchExpressions": [req("app", "In", "ok", v)]}),
                      f"{prefix}.matchExpressions[0].values[1]", "Invalid value"))
        c.append(Case(f"{tag}-label-value-{i}", make({"matchLabels": {"app": v}}), f"{prefix}.matchLabels",
                      "Invalid value"))
    c.append(Case(f"{tag}-expr-value-long", make({"matchExpressions": [req("app", "In", LONG_VALUE)]}),
                  f"{prefix}.matchExpressions[0].values[0]", "Too long"))
    c.append(Case(f"{tag}-label-value-long", make({"matchLabels": {"app": LONG_VALUE}}), f"{prefix}.matchLabels",
                  "Too long"))
    c.append(Case(f"{tag}-key-too-long", make({"matchExpressions": [req("k" * 318, "Exists")]}),
                  f"{prefix}.matchExpressions[0].key", "Too long"))
    c.append(Case(f"{tag}-too-many-expressions", make({"matchExpressions": [req("a", "Exists")] * 33}),
                  f"{prefix}.matchExpressions", "Too many: 33"))
    c.append(Case(f"{tag}-too-many-values", make({"matchExpressions": [req("a", "In", *map(str, range(129)))]}),
                  f"{prefix}.matchExpressions[0].values", "Too many: 129"))
    c.append(Case(f"{tag}-too-many-labels", make({"matchLabels": {f"k{i}": "v" for i in range(65)}}),
                  f"{prefix}.matchLabels", "Too many: 65"))
    c.append(Case(f"{tag}-unknown-field", make({"matchLabel": {"a": "b"}}), f"{prefix}.matchLabel", "Extra inputs"))
    c.append(Case(f"{tag}-values-not-list", make({"matchExpressions": [{"key": "a", "operator": "In",
                                                                        "values": "x"}]}),
                  f"{prefix}.matchExpressions[0].values", "must be a list"))
    c.append(Case(f"{tag}-labels-not-map", make({"matchLabels": ["a"]}), f"{prefix}.matchLabels", "must be an object"))
    c.append(Case(f"{tag}-label-value-int", make({"matchLabels": {"a": 1}}), f"{prefix}.matchLabels.a",
                  "must be a string"))
    return c


def _node_affinity_cases() -> list[Case]:
    c: list[Case] = []
    rp = args_path(f"addedAffinity.{REQ}.nodeSelectorTerms[0]")
    pp = args_path(f"addedAffinity.{PREF}[0]")
    for op in ("Near", "in", "Equals", "", "GT"):
        c.append(Case(f"na-req-operator-{op or 'empty'}", affinity_required(req("zone", op, "a")),
                      f"{rp}.matchExpressions[0].operator", "Unsupported value"))
        c.append(Case(f"na-pref-operator-{op or 'empty'}", affinity_preferred(req("zone", op, "a")),
                      f"{pp}.preference.matchExpressions[0].operator", "Unsupported value"))
    rules = [("in-no-values", req("zone", "In"), "values", "values set can't be empty"),
             ("notin-no-values", req("zone", "NotIn"), "values", "values set can't be empty"),
             ("exists-values", req("zone", "Exists", "a"), "values", "values set must be empty"),
             ("doesnotexist-values", req("zone", "DoesNotExist", "a"), "values", "values set must be empty"),
             ("gt-no-value", req("gpu", "Gt"), "values", "exactly one value is required"),
             ("lt-two-values", req("gpu", "Lt", "1", "2"), "values", "exactly one value is required"),
             ("gt-float", req("gpu", "Gt", "1.5"), "values[0]", "the value must be an integer"),
             ("gt-word", req("gpu", "Gt", "many"), "values[0]", "the value must be an integer"),
             ("lt-huge", req("gpu", "Lt", "99999999999999999999"), "values[0]", "the value must be an integer"),
             ("lt-negative", req("gpu", "Lt", "-1"), "values[0]", "a valid label"),
             ("gt-empty", req("gpu", "Gt", ""), "values[0]", "the value must be an integer")]
    for tag, expr, sub, why in rules:
        c.append(Case(f"na-req-{tag}", affinity_required(expr), f"{rp}.matchExpressions[0].{sub}", why))
        c.append(Case(f"na-pref-{tag}", affinity_preferred(expr), f"{pp}.preference.matchExpressions[0].{sub}", why))
    for i, k in enumerate(BAD_KEYS):
        c.append(Case(f"na-req-key-{i}", affinity_required(req(k, "Exists")), f"{rp}.matchExpressions[0].key",
                      "Invalid value"))
        c.append(Case(f"na-pref-key-{i}", affinity_preferred(req(k, "Exists")),
                      f"{pp}.preference.matchExpressions[0].key", "Invalid value"))
    for i, v in enumerate(BAD_VALUES):
        c.append(Case(f"na-req-value-{i}", affinity_required(req("zone", "In", "a", v)),
                      f"{rp}.matchExpressions[0].values[1]", "Invalid value"))
        c.append(Case(f"na-pref-value-{i}", affinity_preferred(req("zone", "NotIn", v)),
                      f"{pp}.preference.matchExpressions[0].values[0]", "Invalid value"))
    c.append(Case("na-value-long", affinity_required(req("zone", "In", LONG_VALUE)),
                  f"{rp}.matchExpressions[0].values[0]", "Too long"))
    fields = [("two-values", {"key": "metadata.name", "operator": "In", "values": ["a", "b"]}, "values",
               "must have one element"),
              ("no-values", {"key": "metadata.name", "operator": "NotIn"}, "values", "must have one element"),
              ("exists", {"key": "metadata.name", "operator": "Exists"}, "operator", "Unsupported value"),
              ("gt", {"key": "metadata.name", "operator": "Gt", "values": ["1"]}, "operator", "Unsupported value"),
              ("key", {"key": "metadata.labels", "operator": "In", "values": ["a"]}, "key", "Unsupported value"),
              ("node-name-long", {"key": "metadata.name", "operator": "In", "values": ["n" * 254]}, "values[0]",
               "Too long")]
    for tag, f, sub, why in fields:
        c.append(Case(f"na-field-{tag}", affinity_required(fields=[f]), f"{rp}.matchFields[0].{sub}", why))
    big = {"nodeSelectorTerms": [{"matchExpressions": [req("a", "Exists")]}] * 33}
    c.append(Case("na-too-many-terms", with_plugin("NodeAffinity", {"addedAffinity": {REQ: big}}),
                  args_path(f"addedAffinity.{REQ}.nodeSelectorTerms"), "Too many: 33"))
    c.append(Case("na-too-many-expressions", affinity_required(*[req("a", "Exists")] * 33),
                  f"{rp}.matchExpressions", "Too many: 33"))
    c.append(Case("na-too-many-fields", affinity_required(fields=[
        {"key": "metadata.name", "operator": "In", "values": ["a"]}] * 33), f"{rp}.matchFields", "Too many: 33"))
    c.append(Case("na-too-many-values", affinity_required(req("a", "In", *map(str, range(129)))),
                  f"{rp}.matchExpressions[0].values", "Too many: 129"))
    c.append(Case("na-too-many-preferred", with_plugin("NodeAffinity", {"addedAffinity": {PREF: [
        {"weight": 1, "preference": {"matchExpressions": [req("a", "Exists")]}}] * 33}}),
        args_path(f"addedAffinity.{PREF}"), "Too many: 33"))
    for w in (2**31, -(2**31) - 1):
        c.append(Case(f"na-pref-weight-{w}", affinity_preferred(req("a", "Exists"), weight=w), f"{pp}.weight",
                      "32-bit"))
    for w in ("1", 1.5):
        c.append(Case(f"na-pref-weight-{w!r}", affinity_preferred(req("a", "Exists"), weight=w), f"{pp}.weight",
                      "must be an integer"))
    for bad, path in (({"addedAffinity": {"requiredDuringSchedulingRequiredDuringExecution": {}}},
                       "addedAffinity.requiredDuringSchedulingRequiredDuringExecution"),
                      ({"addedAffinity": []}, "addedAffinity"),
                      ({"addedAffinity": {REQ: {"terms": []}}}, f"addedAffinity.{REQ}.terms"),
                      ({"addedAffinity": {REQ: {"nodeSelectorTerms": {}}}}, f"addedAffinity.{REQ}.nodeSelectorTerms"),
                      ({"addedAffinity": {PREF: [{"weight": 1, "preference": {"matchExpressions": [
                          {"key": "a", "operator": "Exists", "value": "x"}]}}]}},
                       f"addedAffinity.{PREF}[0].preference.matchExpressions[0].value"),
                      ({"affinity": {}}, "affinity")):
        c.append(Case(f"na-shape-{path[-24:]}", with_plugin("NodeAffinity", bad), args_path(path), ""))
    return c


def _node_label_match_cases() -> list[Case]:
    c: list[Case] = []
    for i, p in enumerate(["(a)\\1", "(?P<x>a)(?P=x)", "(?=a)", "(?!a)b", "(?<=a)b", "(?<!a)b", "a++", "(?>a)",
                           "a\\Z", "(", ")", "[", "[z-a]", "a{1001}", "*a", "a**", "\\p{NoSuchClass}", "(?(1)a|b)",
                           "\\g<1>", "(?i", "\\k<name>", "a{2,1}", "x" * 1025]):
        c.append(Case(f"nlm-regex-{i}", nlm(podNamePattern=p), args_path("podNamePattern"),
                      "Too long" if len(p) > 1024 else "Invalid value"))
    for v in (5, ["a"], {"a": 1}):
        c.append(Case(f"nlm-regex-type-{type(v).__name__}", nlm(podNamePattern=v), args_path("podNamePattern"),
                      "must be a string"))
    c.extend(_selector_cases(args_path("podSelector"), lambda sel: nlm(podSelector=sel)))
    c.append(Case("nlm-no-workload", with_plugin(NLM, {"nodeLabel": NODE_LABEL}), args_path("podNamePattern"),
                  "at least one of podNamePattern and podSelector"))
    c.append(Case("nlm-no-args", with_plugin(NLM), args_path(), ""))
    c.append(Case("nlm-no-node-label", with_plugin(NLM, {"podNamePattern": "x"}), args_path("nodeLabel"),
                  "Required value"))
    for i, k in enumerate(BAD_KEYS):
        c.append(Case(f"nlm-node-label-key-{i}", with_plugin(NLM, {"podNamePattern": "x",
                                                                   "nodeLabel": {"key": k, "value": "v"}}),
                      args_path("nodeLabel.key"), "Invalid value"))
    for i, v in enumerate(BAD_VALUES + [LONG_VALUE]):
        c.append(Case(f"nlm-node-label-value-{i}", with_plugin(NLM, {"podNamePattern": "x",
                                                                     "nodeLabel": {"key": "k", "value": v}}),
                      args_path("nodeLabel.value"), "Too long" if v == LONG_VALUE else "Invalid value"))
    for bad, path, why in (({"key": "k"}, "nodeLabel.value", "Required value"),
                           ({"value": "v"}, "nodeLabel.key", "Required value"),
                           ({"key": "k", "value": "v", "op": "In"}, "nodeLabel.op", "Extra inputs"),
                           ("pool=web", "nodeLabel", "must be an object"),
                           ({"key": 1, "value": "v"}, "nodeLabel.key", "must be a string"),
                           ({"key": "k", "value": True}, "nodeLabel.value", "must be a string")):
        c.append(Case(f"nlm-node-label-{path}-{why[:8]}", with_plugin(NLM, {"podNamePattern": "x", "nodeLabel": bad}),
                      args_path(path), why))
    c.append(Case("nlm-unknown-arg", nlm(podNamePattern="x", namespaces=["a"]), args_path("namespaces"),
                  "Extra inputs"))
    return c


def _spread_cases() -> list[Case]:
    c: list[Case] = []
    p0 = args_path("defaultConstraints[0]")
    for v in (0, -1, -(2**31), 2**31):
        c.append(Case(f"pts-maxskew-{v}", spread(dc(maxSkew=v)), f"{p0}.maxSkew", ""))
    c.append(Case("pts-maxskew-string", spread(dc(maxSkew="1")), f"{p0}.maxSkew", "must be an integer"))
    c.append(Case("pts-topology-key-empty", spread(dc(topologyKey="")), f"{p0}.topologyKey", "can not be empty"))
    for i, k in enumerate(BAD_KEYS[1:]):
        c.append(Case(f"pts-topology-key-{i}", spread(dc(topologyKey=k)), f"{p0}.topologyKey", "Invalid value"))
    c.append(Case("pts-topology-key-long", spread(dc(topologyKey="k" * 318)), f"{p0}.topologyKey", "Too long"))
    c.append(Case("pts-when-empty", spread(dc(whenUnsatisfiable="")), f"{p0}.whenUnsatisfiable", "can not be empty"))
    for v in ("doNotSchedule", "Never", "ScheduleAnyWay", "DoNotSchedule "):
        c.append(Case(f"pts-when-{v}", spread(dc(whenUnsatisfiable=v)), f"{p0}.whenUnsatisfiable",
                      "Unsupported value"))
    for fld in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        for v in ("Always", "honor", "", "Ignored"):
            c.append(Case(f"pts-{fld}-{v or 'empty'}", spread(dc(**{fld: v})), f"{p0}.{fld}", "Unsupported value"))
    for v in (0, -3):
        c.append(Case(f"pts-mindomains-{v}", spread(dc(minDomains=v)), f"{p0}.minDomains", "greater than zero"))
    c.append(Case("pts-mindomains-anyway", spread(dc(minDomains=2, whenUnsatisfiable="ScheduleAnyway")),
                  f"{p0}.minDomains", "can only use minDomains if whenUnsatisfiable=DoNotSchedule"))
    for i, k in enumerate(BAD_KEYS[:6]):
        c.append(Case(f"pts-match-label-keys-{i}", spread(dc(matchLabelKeys=["app", k])), f"{p0}.matchLabelKeys[1]",
                      "Invalid value"))
    c.append(Case("pts-selector", spread(dc(labelSelector={"matchLabels": {"a": "b"}})), f"{p0}.labelSelector",
                  "Forbidden"))
    c.append(Case("pts-selector-empty", spread(dc(labelSelector={})), f"{p0}.labelSelector", "Forbidden"))
    c.append(Case("pts-duplicate", spread(dc(), dc(maxSkew=3)), args_path("defaultConstraints[1]"),
                  'Duplicate value: "{zone, DoNotSchedule}"'))
    c.append(Case("pts-duplicate-third", spread(dc(), dc(whenUnsatisfiable="ScheduleAnyway"), dc(maxSkew=2)),
                  args_path("defaultConstraints[2]"), "Duplicate value"))
    for v in ("Zone", "list", "system", "None"):
        c.append(Case(f"pts-defaulting-{v}", with_plugin("PodTopologySpread", {"defaultingType": v}),
                      args_path("defaultingType"), "Unsupported value"))
    c.append(Case("pts-system-with-constraints", spread(dc(), defaultingType="System"), args_path("defaultingType"),
                  "when .defaultConstraints are not empty"))
    c.append(Case("pts-too-many", spread(*[dc(topologyKey=f"k{i}") for i in range(17)]),
                  args_path("defaultConstraints"), "Too many: 17"))
    c.append(Case("pts-too-many-match-label-keys", spread(dc(matchLabelKeys=[f"k{i}" for i in range(17)])),
                  f"{p0}.matchLabelKeys", "Too many: 17"))
    c.append(Case("pts-unknown-field", spread(dc(maxskew=1)), f"{p0}.maxskew", "Extra inputs"))
    c.append(Case("pts-constraints-not-list", with_plugin("PodTopologySpread", {"defaultConstraints": dc()}),
                  args_path("defaultConstraints"), "must be a list"))
    return c


def _fit_cases() -> list[Case]:
    c: list[Case] = []
    for i, k in enumerate(BAD_KEYS):
        c.append(Case(f"fit-ignored-{i}", fit(ignoredResources=["cpu", k]), args_path("ignoredResources[1]"),
                      "Invalid value"))
    for i, g in enumerate(["example.com/foo", "a/b", "-foo", "foo bar", ""]):
        c.append(Case(f"fit-group-{i}", fit(ignoredResourceGroups=[g]), args_path("ignoredResourceGroups[0]"),
                      "Invalid value"))
    for t in ("Invalid", "leastAllocated", "Balanced", ""):
        c.append(Case(f"fit-type-{t or 'empty'}", fit(scoringStrategy={"type": t}), args_path("scoringStrategy.type"),
                      "Unsupported value"))
    c.append(Case("fit-type-missing", fit(scoringStrategy={"resources": [{"name": "cpu", "weight": 1}]}),
                  args_path("scoringStrategy.type"), "Unsupported value"))
    for w in (101, -1, 1000):
        c.append(Case(f"fit-weight-{w}", fit(scoringStrategy={"type": "MostAllocated", "resources": [
            {"name": "cpu", "weight": 1}, {"name": "memory", "weight": w}]}),
            args_path("scoringStrategy.resources[1].weight"), "not in valid range (0, 100]"))
    c.append(Case("fit-rtcr-missing", fit(scoringStrategy={"type": RTCR}),
                  args_path("scoringStrategy.requestedToCapacityRatio"), "must be specified"))
    c.append(Case("fit-rtcr-empty-shape", rtcr(), args_path("scoringStrategy.requestedToCapacityRatio.shape"),
                  "at least one point"))
    sp = "scoringStrategy.requestedToCapacityRatio.shape"
    for tag, pts, sub, why in (
            ("equal", [{"utilization": 10, "score": 1}, {"utilization": 10, "score": 2}], "[1].utilization", "sorted"),
            ("decreasing", [{"utilization": 60, "score": 1}, {"utilization": 20, "score": 2}], "[1].utilization",
             "sorted"),
            ("util-over", [{"utilization": 101, "score": 1}], "[0].utilization", "[0, 100]"),
            ("util-negative", [{"utilization": -1, "score": 1}], "[0].utilization", "[0, 100]"),
            ("score-over", [{"utilization": 0, "score": 11}], "[0].score", "[0, 10]"),
            ("score-negative", [{"utilization": 0, "score": -1}], "[0].score", "[0, 10]"),
            ("util-string", [{"utilization": "10", "score": 1}], "[0].utilization", "must be an integer"),
            ("score-missing", [{"utilization": 10}], "[0].score", "Required value"),
            ("extra", [{"utilization": 10, "score": 1, "weight": 1}], "[0].weight", "Extra inputs")):
        c.append(Case(f"fit-shape-{tag}", rtcr(*pts), args_path(sp + sub), why))
    c.append(Case("fit-rtcr-forbidden", fit(scoringStrategy={"type": "LeastAllocated", "requestedToCapacityRatio": {
        "shape": [{"utilization": 0, "score": 0}]}}), args_path("scoringStrategy.requestedToCapacityRatio"),
        "Forbidden"))
    c.append(Case("fit-too-many-ignored", fit(ignoredResources=[f"r{i}" for i in range(65)]),
                  args_path("ignoredResources"), "Too many: 65"))
    c.append(Case("fit-too-many-groups", fit(ignoredResourceGroups=[f"g{i}" for i in range(65)]),
                  args_path("ignoredResourceGroups"), "Too many: 65"))
    c.append(Case("fit-too-many-resources", fit(scoringStrategy={"type": "LeastAllocated", "resources": [
        {"name": f"r{i}", "weight": 1} for i in range(33)]}), args_path("scoringStrategy.resources"), "Too many: 33"))
    c.append(Case("fit-too-many-points", rtcr(*[{"utilization": i, "score": 1} for i in range(102)]),
                  args_path(sp), "Too many: 102"))
    c.append(Case("fit-ignored-too-long", fit(ignoredResources=["r" * 318]), args_path("ignoredResources[0]"),
                  "Too long"))
    c.append(Case("fit-unknown-arg", fit(ignoredResource=["x"]), args_path("ignoredResource"), "Extra inputs"))
    c.append(Case("fit-unknown-strategy-field", fit(scoringStrategy={"type": "LeastAllocated", "shape": []}),
                  args_path("scoringStrategy.shape"), "Extra inputs"))
    # NodeResourcesBalancedAllocation
    ba = "NodeResourcesBalancedAllocation"
    for w in (2, 0.5, -1, 100):
        c.append(Case(f"ba-weight-{w}", with_plugin(ba, {"resources": [{"name": "cpu", "weight": w}]}),
                      args_path("resources[0].weight"), "must be an integer" if isinstance(w, float) else "must be 1"))
    c.append(Case("ba-duplicate", with_plugin(ba, {"resources": [{"name": "cpu", "weight": 1},
                                                                 {"name": "memory", "weight": 1},
                                                                 {"name": "cpu", "weight": 1}]}),
                  args_path("resources[2].name"), "Duplicate value"))
    c.append(Case("ba-name-missing", with_plugin(ba, {"resources": [{"weight": 1}]}), args_path("resources[0].name"),
                  "Required value"))
    c.append(Case("ba-too-many", with_plugin(ba, {"resources": [{"name": f"r{i}", "weight": 1} for i in range(33)]}),
                  args_path("resources"), "Too many: 33"))
    c.append(Case("ba-unknown-arg", with_plugin(ba, {"resource": []}), args_path("resource"), "Extra inputs"))
    return c


def _affinity_cases() -> list[Case]:
    c: list[Case] = []
    ipa = "InterPodAffinity"
    for w in (-1, 101, 1000, -100, 2**31, 2**40):
        c.append(Case(f"ipa-weight-{w}", with_plugin(ipa, {"hardPodAffinityWeight": w}),
                      args_path("hardPodAffinityWeight"), "not in valid range [0, 100]"))
    for w in ("5", 1.5, True, [5]):
        c.append(Case(f"ipa-weight-{w!r}", with_plugin(ipa, {"hardPodAffinityWeight": w}),
                      args_path("hardPodAffinityWeight"), "must be an integer"))
    for v in ("true", 1, [True]):
        c.append(Case(f"ipa-ignore-{v!r}", with_plugin(ipa, {"ignorePreferredTermsOfExistingPods": v}),
                      args_path("ignorePreferredTermsOfExistingPods"), "must be a boolean"))
    c.append(Case("ipa-unknown-arg", with_plugin(ipa, {"hardPodAffinity": 1}), args_path("hardPodAffinity"),
                  "Extra inputs"))
    return c


def _metric_cases() -> list[Case]:
    c: list[Case] = []
    for fld in ("usageThresholds", "estimatedScalingFactors"):
        for res in ("cpu", "memory"):
            for v in (100.5, 101, 1000, -1, -0.5):
                c.append(Case(f"la-{fld}-{res}-{v}", load_aware(**{fld: {res: v}}), args_path(f"{fld}.{res}"),
                              "must be a percentage in [0, 100]"))
            c.append(Case(f"la-{fld}-{res}-string", load_aware(**{fld: {res: "80"}}), args_path(f"{fld}.{res}"),
                          "must be a number"))
        c.append(Case(f"la-{fld}-unknown", load_aware(**{fld: {"gpu": 50}}), args_path(f"{fld}.gpu"), "Extra inputs"))
    for res in ("cpu", "memory"):
        for v in (101, -1):
            c.append(Case(f"la-weight-{res}-{v}", load_aware(resourceWeights={res: v}),
                          args_path(f"resourceWeights.{res}"), "Invalid value"))
    c.append(Case("la-weights-zero", load_aware(resourceWeights={"cpu": 0, "memory": 0}),
                  args_path("resourceWeights"), "at least one weight must be positive"))
    for v in ("neutral", "Ignore", "", "Fallback"):
        c.append(Case(f"la-missing-{v or 'empty'}", load_aware(onMissingMetrics=v), args_path("onMissingMetrics"),
                      "Unsupported value"))
    for v in ("node-name", "1instance", "", "a b", "instance\n", "x" * 129):
        c.append(Case(f"la-node-label-{v[:10]!r}", load_aware(nodeLabel=v), args_path("nodeLabel"),
                      "Too long" if len(v) > 128 else "Prometheus label name"))
    for v in ("1 minute", "5", "1m\n", "m", "1M", "1" * 65 + "s"):
        c.append(Case(f"la-rate-window-{v[:10]!r}", load_aware(rateWindow=v), args_path("rateWindow"),
                      "Too long" if len(v) > 64 else "PromQL duration"))
    for fld in ("cpuQuery", "memoryQuery"):
        c.append(Case(f"la-{fld}-empty", load_aware(**{fld: ""}), args_path(fld), "Required value"))
        c.append(Case(f"la-{fld}-long", load_aware(**{fld: "x" * 4097}), args_path(fld), "Too long"))
    for res in ("cpu", "memory"):
        for v in ("lots", "1Zi", "-", "1" * 65):
            c.append(Case(f"la-defaults-{res}-{v[:6]}", load_aware(estimatedDefaults={res: v}),
                          args_path(f"estimatedDefaults.{res}"), "Too long" if len(v) > 64 else "Invalid value"))
    c.append(Case("la-unknown-arg", load_aware(threshold=3), args_path("threshold"), "Extra inputs"))
    # MetricThreshold
    mp = args_path("metrics[0]")
    for tag, rule, path, why in (
            ("no-bound", {"name": "m", "query": "q"}, "rejectAbove", "Required value"),
            ("below-above", threshold_rule(rejectAbove=1, rejectBelow=2), "rejectBelow", "above rejectAbove"),
            ("above-string", threshold_rule(rejectAbove="1"), "rejectAbove", "must be a number"),
            ("no-name", {"query": "q", "rejectAbove": 1}, "name", "Required value"),
            ("no-query", {"name": "m", "rejectAbove": 1}, "query", "Required value"),
            ("prefer", threshold_rule(prefer="Lower"), "prefer", "Extra inputs")):
        c.append(Case(f"mt-{tag}", thresholds(rule), f"{mp}.{path}", why))
    for tag, make, rule in (("mt", thresholds, threshold_rule), ("ms", scores, score_rule)):
        for v in ("", "gpu util", "-gpu", "gpu-", "x" * 64, "gpu/util"):
            c.append(Case(f"{tag}-name-{v[:8]!r}", make(rule(name=v)), f"{mp}.name", ""))
        c.append(Case(f"{tag}-query-empty", make(rule(query="")), f"{mp}.query", "Required value"))
        c.append(Case(f"{tag}-query-long", make(rule(query="q" * 4097)), f"{mp}.query", "Too long"))
        for v in ("Host-name", "", "9x", "x" * 129):
            c.append(Case(f"{tag}-node-label-{v[:8]!r}", make(rule(nodeLabel=v)), f"{mp}.nodeLabel", ""))
        for i, r in enumerate(["nvidia com/gpu", "a/b/c", "-gpu", ""]):
            c.append(Case(f"{tag}-pods-requesting-{i}", make(rule(podsRequesting=["cpu", r])),
                          f"{mp}.podsRequesting[1]", "Invalid value"))
        c.append(Case(f"{tag}-pods-requesting-many", make(rule(podsRequesting=[f"r{i}" for i in range(17)])),
                      f"{mp}.podsRequesting", "Too many: 17"))
        for v in ("Drop", "neutral", ""):
            c.append(Case(f"{tag}-missing-{v or 'empty'}", make(rule(onMissingMetrics=v)), f"{mp}.onMissingMetrics",
                          "Unsupported value"))
        c.append(Case(f"{tag}-duplicate", make(rule(), rule(query="r")), args_path("metrics[1].name"),
                      "Duplicate value"))
        c.append(Case(f"{tag}-too-many", make(*[rule(name=f"m{i}") for i in range(17)]), args_path("metrics"),
                      "Too many: 17"))
        c.append(Case(f"{tag}-empty", make(), args_path("metrics"), "at least 1"))
        c.append(Case(f"{tag}-not-list", with_plugin("MetricThreshold" if tag == "mt" else "MetricScore",
                                                     {"metrics": rule()}), args_path("metrics"), "must be a list"))
        c.append(Case(f"{tag}-unknown-field", make(rule(nodelabel="x")), f"{mp}.nodelabel", "Extra inputs"))
    # MetricScore
    for tag, rule, path, why in (
            ("no-prefer", {"name": "m", "query": "q"}, "prefer", "Required value"),
            ("prefer-lower", score_rule(prefer="lower"), "prefer", "Unsupported value"),
            ("prefer-best", score_rule(prefer="Best"), "prefer", "Unsupported value"),
            ("weight-0", score_rule(weight=0), "weight", "greater than or equal to 1"),
            ("weight-101", score_rule(weight=101), "weight", "less than or equal to 100"),
            ("weight-float", score_rule(weight=2.5), "weight", "must be an integer"),
            ("reject-above", score_rule(rejectAbove=1), "rejectAbove", "Extra inputs")):
        c.append(Case(f"ms-{tag}", scores(rule), f"{mp}.{path}", why))
    return c


def invalid_policies() -> list[Case]:
    """Every generated invalid spec (names unique)."""
    cases = (_spec_cases()
             + _selector_cases("spec.namespaceSelector",
                               lambda sel: {"plugins": [plugin("NodeResourcesFit")], "namespaceSelector": sel})
             + _node_affinity_cases() + _node_label_match_cases() + _spread_cases() + _fit_cases()
             + _affinity_cases() + _metric_cases())
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate case names: {sorted(dup)}"
    return cases


def valid_policies() -> list[tuple[str, dict[str, Any]]]:
    """Specs that must be accepted: the example policies and edge cases of every rule."""
    out = []
    for f in sorted((ROOT / "policies").glob("*.yaml")):
        # a file may hold more objects than its policy (gpu-dra.yaml: the DRA objects it uses)
        body = next(d for d in yaml.safe_load_all(f.read_text()) if d and d["kind"] == "SchedulingPolicy")
        out.append((f"example-{f.stem}", body["spec"]))
    out += [
        ("edges", {
            "plugins": [
                plugin("NodeAffinity", {"addedAffinity": {
                    REQ: {"nodeSelectorTerms": [{}, {"matchExpressions": [req("example.com/zone", "In", "", "a"),
                                                                          req("gpu", "Gt", "0010")]},
                                                {"matchFields": [{"key": "metadata.name", "operator": "NotIn",
                                                                  "values": ["n" * 253]}]}]},
                    PREF: [{"weight": 0, "preference": {"matchExpressions": [req("a", "Bogus")]}},
                           {"weight": 5, "preference": {}}]}}, weight=0),
                plugin(NLM, {"podNamePattern": "(a+)+$", "podSelector": {},
                             "nodeLabel": {"key": "example.com/pool", "value": ""}}),
                plugin("PodTopologySpread", {"defaultingType": "List", "defaultConstraints": [
                    dc(minDomains=2, nodeAffinityPolicy="Ignore", nodeTaintsPolicy="Honor"),
                    dc(whenUnsatisfiable="ScheduleAnyway", matchLabelKeys=["pod-template-hash"])]}, weight=2),
                plugin("InterPodAffinity", {"hardPodAffinityWeight": 100}, weight=2**31 - 1),
                plugin("NodeResourcesFit", {"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {
                    "shape": [{"utilization": i, "score": i % 11} for i in range(101)]}}}),
                plugin("LoadAware", {"usageThresholds": {"cpu": 0, "memory": 100}, "resourceWeights": {"cpu": 0}}),
                plugin("MetricThreshold", {"metrics": [threshold_rule(name=f"m{i}", rejectBelow=0) for i in range(16)]}),
            ],
            "disabled": [{"name": "SchedulingGates"}, {"name": "NodeAffinity", "point": "score"}],
            "percentageOfNodesToScore": 100,
            "namespaceSelector": {"matchLabels": {"example.com/team": ""},
                                  "matchExpressions": [req("tier", "NotIn", *[f"t{i}" for i in range(128)])]},
            "prometheus": {"address": "https://prom.example.com:9090/sub/path", "ttl": "1m30s", "usageLag": "0s"},
            "schedulerName": "a" * 63 + ".b"}),
        ("tuning", {
            "plugins": [plugin("NodeResourcesFit", weight=1), plugin("PodTopologySpread", weight=10),
                        plugin("LoadAware", weight=2)],
            "tuning": {"mode": "Apply", "interval": "1s", "window": {"minutes": 1440},
                       "objective": {"imbalance": 1, "nodesUsed": 0.5, "zoneSkew": 0, "unschedulable": 10,
                                     "hotNodes": 2},
                       "bounds": {"NodeResourcesFit": [1, 1000], "PodTopologySpread": [1, 1], "LoadAware": [1, 5]},
                       "maxStep": 10, "threshold": 0, "maxReplays": 500, "timeLimit": "500ms",
                       "maxPredictionError": 100, "seed": 2**31 - 1}}),
        ("disabled-256", {
            "plugins": [plugin("NodeResourcesFit")], "disabled": [{"name": "NodeResourcesFit", "point": "score"}] * 256}),
    ]
    return out
