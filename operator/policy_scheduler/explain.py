"""The decision record: what the operator writes on a pod when it binds it (the
``policy-scheduler.io/decision`` annotation), the message of a failed binding cycle, and how
``policy-scheduler explain`` prints a record (``simulate --explain`` prints the same table for the
pods it places).

A leaf below the CLI, the operator and what-if: it reads only the framework's types and writes
only to the stream it is given."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from .timefmt import now_rfc3339

if TYPE_CHECKING:  # pragma: no cover
    from .framework.cycle.schedule import Decision
    from .framework.status import Status

DECISION_ANNOTATION = "policy-scheduler.io/decision"
# the top nodes the annotation keeps: as many as a Decision keeps (framework/cycle/schedule.py
# TOP_NODES), each a name, a total, a weighted score per Score plugin and the metric plugins' details
ANNOTATION_TOP_NODES = 5
# CycleState key: {"arm": "stable" | "canary", "candidate": hash} of a pod decided during a canary
ROLLOUT_KEY = "policy-scheduler/rollout"


def _rounded(v: Any) -> Any:
    """Plugin details for the decision annotation, floats (numpy's too) to 3 decimals."""
    if isinstance(v, float):
        return round(float(v), 3)
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v


ANNOTATION_DEVICES = 16  # at most this many allocated devices are listed


def decision_annotation(policy: str, d: "Decision", group: dict[str, Any] | None = None,
                        at: str | None = None, rollout: dict[str, Any] | None = None,
                        devices: list[dict[str, Any]] | None = None) -> str:
    """The bounded decision record the Binding sets on the pod (``policy-scheduler explain``);
    ``group``: the pod's PodGroup placement, as a gang plugin wrote it in the CycleState
    (GROUP_PLACEMENT); ``at``: when it was decided (default now, RFC 3339); ``rollout``: the arm
    of a canary rollout that decided it and the candidate's hash (ROLLOUT_KEY); ``devices``: the
    DRA devices of its claims (DEVICE_ALLOCATION; the first ANNOTATION_DEVICES, and how many)."""
    return orjson.dumps({
        "policy": policy, "node": d.node, "nodes": d.num_all_nodes, "evaluated": d.evaluated,
        "feasible": d.feasible, "at": at if at is not None else now_rfc3339(),
        "top": [{"node": s.node, "total": s.total, "scores": {k: v[1] for k, v in s.plugins.items()},
                 **({"details": _rounded(s.details)} if s.details else {})}
                for s in d.top[:ANNOTATION_TOP_NODES]],
        "failures": dict(sorted(d.failures.items(), key=lambda kv: -kv[1])[:8]),
        **({"group": group} if group else {}),
        **({"rollout": rollout} if rollout else {}),
        **({"devices": devices[:ANNOTATION_DEVICES], "deviceCount": len(devices)} if devices else {}),
    }).decode()


def failure_message(status: "Status") -> str:
    """The event text for a failed binding cycle: upstream's message, naming the plugin."""
    msg = status.message() or str(status.code)
    plugin = status.plugin
    if plugin and plugin not in msg:
        msg = f'plugin "{plugin}" rejected the pod: {msg}'
    return msg


def format_details(v: dict) -> str:
    """LoadAware / MetricThreshold / MetricScore details: per metric its value, in-flight share,
    sample age and freshness, e.g. "cpu 0.42 (+0.05 in flight, fresh, 3.1s old)"."""
    parts = []
    for name, m in v.items():
        if not isinstance(m, dict):
            parts.append(f"{name} {m}")
            continue
        head = f"{name} {m['value']:g}" if m.get("value") is not None else name
        extra = [f"+{m['inFlight']:g} in flight"] if m.get("inFlight") else []
        extra.append(m.get("state", "?"))
        if m.get("age") is not None:
            extra.append(f"{m['age']:g}s old")
        parts.append(f"{head} ({', '.join(extra)})")
    return "; ".join(parts)


PASSED = "passed"  # a Filter plugin's verdict on a node it let through
NOT_RUN = "not run"  # a Filter plugin after the one that rejected the node (upstream stops there)
SKIPPED = "skipped"  # a Filter plugin whose PreFilter said Skip for the pod


def plugin_table(nodes: list[dict], weights: dict[str, int] | None = None,
                 filters: list[str] | None = None) -> dict:
    """The per-plugin table of some nodes, the one ``explain`` prints and the what-if report's
    drill-down draws: per node and plugin its Filter verdict, raw score, normalized score, weight
    and weighted score, each None when unknown.

    ``nodes``: the decision record's ``top`` entries ({"node", "total", "scores": weighted per
    plugin}), optionally with "normalized" and "raw" per plugin, "filters" (plugin -> verdict:
    PASSED, NOT_RUN or the rejection's reasons), "verdict" (a word on the node) and "chosen".
    ``weights``: plugin -> weight, when known; ``filters``: the Filter plugins in chain order.
    A normalized score is derived from the weighted one and the weight, and the other way round.
    Returns {"filters": [...], "scores": [...], "rows": [{"node", "total", "verdict", "chosen",
    "cells": {plugin: {"filter", "raw", "normalized", "weight", "weighted"}}}]}."""
    def of(t: dict, key: str) -> dict:  # a record read from a pod's annotation may hold anything
        v = t.get(key)
        return v if isinstance(v, dict) else {}

    nodes = [t for t in nodes if isinstance(t, dict) and "node" in t]
    weights = {p: w for p, w in (weights.items() if isinstance(weights, dict) else ()) if isinstance(w, int)}
    filter_names = list(filters or [])
    for t in nodes:
        filter_names += [p for p in of(t, "filters") if p not in filter_names]
    score_names = list(weights)
    for t in nodes:
        for key in ("scores", "normalized", "raw"):
            score_names += [p for p in of(t, key) if p not in score_names]
    rows = []
    for t in nodes:
        cells: dict[str, dict] = {}
        fv = of(t, "filters")
        for p in filter_names:
            cells.setdefault(p, {})["filter"] = fv.get(p)
        for p in score_names:
            w = weights.get(p)
            weighted = of(t, "scores").get(p)
            norm = of(t, "normalized").get(p)
            if norm is None and isinstance(weighted, int) and w:
                norm = weighted // w if weighted % w == 0 else round(weighted / w, 2)
            if weighted is None and isinstance(norm, int) and w is not None:
                weighted = norm * w
            cells.setdefault(p, {}).update(raw=of(t, "raw").get(p), normalized=norm, weight=w,
                                           weighted=weighted)
        rows.append({"node": str(t["node"]), "total": t.get("total"), "verdict": t.get("verdict"),
                     "chosen": bool(t.get("chosen")), "cells": cells})
    return {"filters": filter_names, "scores": score_names, "rows": rows}


def write_plugin_table(table: dict, out: TextIO, indent: str = "    ") -> None:
    """``plugin_table`` as text: a row per node with its total and weighted score per Score
    plugin (normalized x weight = weighted, when the weight is known), then each node's Filter
    verdicts when the table has them."""
    plugins = table["scores"]
    rows = table["rows"]
    if not rows:
        return
    with_weights = any(r["cells"].get(p, {}).get("weight") is not None for r in rows for p in plugins)

    def cell(c: dict) -> str:
        if c.get("weighted") is None:
            return "-"
        if with_weights and c.get("normalized") is not None and c.get("weight") is not None:
            raw = f"raw {c['raw']}: " if c.get("raw") is not None else ""
            return f"{raw}{c['normalized']}x{c['weight']}={c['weighted']}"
        return str(c["weighted"])

    grid = [["NODE", "TOTAL", *plugins]] if plugins or any(r["total"] is not None for r in rows) else []
    for r in rows if grid else ():
        grid.append([r["node"] + (" *" if r["chosen"] else ""), "-" if r["total"] is None else str(r["total"]),
                     *(cell(r["cells"].get(p, {})) for p in plugins)])
    widths = [max(len(g[i]) for g in grid) for i in range(len(grid[0]))] if grid else []
    for g in grid:
        out.write(indent + "  ".join([g[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(g[1:], widths[1:])])
                  .rstrip() + "\n")
    for r in rows:
        verdicts = [(p, r["cells"].get(p, {}).get("filter")) for p in table["filters"]]
        verdicts = [(p, v) for p, v in verdicts if v is not None]
        if not (r["verdict"] or verdicts):
            continue
        counts = {k: sum(1 for _, v in verdicts if v == k) for k in (PASSED, SKIPPED, NOT_RUN)}
        said = "; ".join(f"{p}: {v}" for p, v in verdicts if v not in counts)
        filters = ", ".join(f"{n} {k}" for k, n in counts.items() if n) + (f"; {said}" if said else "")
        out.write(f"{indent}{r['node']}:" + (f" {r['verdict']}" if r["verdict"] else "")
                  + (f" (Filter plugins: {filters})" if filters else "") + "\n")


def print_decision(d: dict, out: TextIO) -> None:
    """A decision record (the annotation, parsed) as explain prints it, to ``out``: the policy and
    node, how many nodes were evaluated and feasible, the top nodes' weighted score per plugin and
    what plugins saw of them, the PodGroup, and how many nodes each filter reason removed."""
    def line(s: str) -> None:
        out.write(s + "\n")

    line(f"  policy:    {d.get('policy')}")
    line(f"  node:      {d.get('node')}   (decided {d.get('at')})")
    line(f"  nodes:     {d.get('nodes')} in cluster, {d.get('evaluated')} evaluated, {d.get('feasible')} feasible")
    top = d.get("top") or []
    if top:
        line("  top nodes (weighted score per plugin):")
        write_plugin_table(plugin_table(top, d.get("weights")), out)
        details = [(t["node"], p, v) for t in top for p, v in (t.get("details") or {}).items()]
        if details:
            line("  what plugins saw of the top nodes:")
            for node, plugin, v in details:
                line(f"    {node}  {plugin}: {format_details(v)}")
    group = d.get("group")
    if group:
        quorum = f", minCount {group['minCount']}" if group.get("minCount") else ""
        where = f", domain {group['domain']}" if group.get("domain") else ""
        line(f"  group:     PodGroup {group.get('podGroup')}{quorum}{where}")
    devices = d.get("devices") or []
    if devices:
        more = d.get("deviceCount", len(devices)) - len(devices)
        line("  devices:   " + (f"{len(devices)} of {len(devices) + more} shown" if more > 0 else
                                f"{len(devices)} allocated" if len(devices) > 1 else "1 allocated"))
        for dev in devices:
            if isinstance(dev, dict):
                line(f"    claim {dev.get('claim')}  request {dev.get('request')}  {dev.get('device')}"
                     + ("  (admin access)" if dev.get("adminAccess") else "")
                     + (f"  for {', '.join(map(str, dev['resources']))}" if isinstance(dev.get("resources"), list)
                        else ""))
    fails = d.get("failures") or {}
    if fails:
        line("  filtered out:")
        for reason, n in fails.items():
            line(f"    {n:>5}  {reason}")


# What a terminal would act on rather than show: C0 controls (ESC starts CSI/OSC sequences, CR and
# BS overwrite what was printed, LF starts a line that looks like ours), DEL, the C1 controls (CSI
# and OSC as single bytes) and the bidirectional overrides and isolates that reorder what is seen.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MAX_PRINTED_DEPTH = 64  # a document deeper than this is cut (annotations are the API's, at most 256 KiB)


def printable(s: str) -> str:
    """``s`` with every control character written as its escape (``\\x1b``, ``\\u202e``): tenant
    text (annotations, event messages, names) printed to an admin's terminal can neither run
    escape sequences (OSC 52 clipboard writes, hyperlinks, cursor moves) nor fake a line."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", s)


def printable_doc(v: Any, depth: int = 0) -> Any:
    """A document (dicts, lists, strings: keys included) with ``printable`` text."""
    if isinstance(v, str):
        return printable(v)
    if depth >= MAX_PRINTED_DEPTH:
        return None
    if isinstance(v, dict):
        return {printable(str(k)): printable_doc(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [printable_doc(x, depth + 1) for x in v]
    return v
