"""A simulation's outputs: the terminal table, and one self-contained HTML file (no script, no
external file, no network; its charts and drill-down tables are report_html.py's): the summary,
nodes used and imbalance per policy, per-node cpu and memory allocation before and after (one row
per policy), placed pods per zone, PodGroups, preemptions, the FailedScheduling messages, and the
per-pod drill-down (each plugin's verdict and score on the best nodes)."""

from __future__ import annotations

from typing import Any, Mapping, TextIO

import numpy as np

from ..explain import print_decision
from .report_html import CSS, PALETTE, allocation_section, drill_section, grouped_bars
from .report_html import esc as _esc
from .simulate import PolicyRun, Simulation, format_quantity
from .snapshot import rfc3339

MAX_NODE_ROWS = 30  # the terminal lists nodes one by one up to this many
MAX_FAILURE_GROUPS = 5
MAX_GROUP_ROWS = 20  # PodGroups listed one by one in the text output
MAX_SUGGESTION_ROWS = 50  # pods whose suggestions the HTML report lists (simulate searches 50 per policy)


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%"


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


def _failure_groups(run: PolicyRun) -> list[tuple[str, list[str]]]:
    groups: dict[str, list[str]] = {}
    for r in run.failed:
        groups.setdefault(r.message, []).append(r.pod)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


def group_line(g: Mapping[str, Any]) -> tuple[str, str, str]:
    """(group, outcome, why) of one PodGroup of a run (PolicyRun.groups)."""
    mc = g.get("minCount")
    size = f"{g['placed']}/{g['pods']} placed" + (f", minCount {mc}" if mc else "") + \
        (f", {g['topologyKey']} {', '.join(g.get('domains') or []) or '-'}" if g.get("topologyKey") else "")
    if not g.get("exists", True):
        outcome = "no such PodGroup"
    elif g["whole"]:
        outcome = "placed whole"
    elif g["placed"]:
        outcome = "placed in part"
    else:
        outcome = "not placed"
    return g["podGroup"], f"{outcome} ({size})", g.get("message") or ""


def write_groups(run: PolicyRun, out: TextIO) -> None:
    """Per PodGroup: placed whole or not, and why (the PodGroupInitiallyScheduled condition's message
    the operator would write, else the members' own)."""
    if not run.groups:
        return
    whole = sum(1 for g in run.groups if g["whole"])
    out.write(f"\n{run.policy}: PodGroups: {whole} of {len(run.groups)} placed whole\n")
    for g in run.groups[:MAX_GROUP_ROWS]:
        name, outcome, why = group_line(g)
        out.write(f"  {name}: {outcome}\n")
        if why:
            out.write(f"    {why}\n")
    if len(run.groups) > MAX_GROUP_ROWS:
        out.write(f"  ... {len(run.groups) - MAX_GROUP_ROWS} more groups (--json lists every group)\n")


def write_text(sim: Simulation, out: TextIO) -> None:
    out.write(f"simulated {sim.pods} pods on {sim.nodes} nodes ({sim.source}, taken {rfc3339(sim.taken_at)}), "
              f"seed {sim.seed}\n\n")
    warnings = sim.runs[0].warnings if sim.runs else []
    for w in warnings:
        out.write(f"warning: snapshot: {w}\n")
    if warnings:
        out.write("\n")
    shape = sim.runs[0].shape if sim.runs else {}
    shape_txt = "/".join(format_quantity(k, v) for k, v in shape.items() if k in ("cpu", "memory")) or "-"
    rows = [["POLICY", "PLACED", "UNSCHEDULABLE", "NODES USED", "RECEIVING PODS", "IMBALANCE", "ZONE SKEW",
             f"FITS ({shape_txt})", "TIME"]]
    for run in sim.runs:
        s = run.summary()
        rows.append([run.policy, str(s["placed"]), str(s["unschedulable"]),
                     f"{s['nodesUsed']} (was {s['nodesUsedBefore']})", str(s["nodesReceivingPods"]),
                     f"{s['imbalance']:.3f} (was {s['imbalanceBefore']:.3f})", str(s["zoneSpread"]["skew"]),
                     f"{s['fragmentation']['fits']} (was {s['fragmentation']['fitsBefore']})",
                     f"{run.seconds:.1f}s"])
    _table(rows, out)
    for run in sim.runs:
        if run.shadow is not None:
            out.write("\n")
            write_shadow(run.policy, run.shadow_summary(), out)
        if run.devices is not None:
            dv = run.devices
            out.write(f"\n{run.policy}: DRA devices allocated: {dv['allocated']} of {dv['total']} "
                      f"(was {dv['allocatedBefore']}), on {dv['nodes']} nodes (was {dv['nodesBefore']})\n")
        if run.preemptions:
            n = sum(len(p["victims"]) for p in run.preemptions)
            out.write(f"\n{run.policy}: {len(run.preemptions)} preemption(s) carried out, {n} pod(s) preempted\n")
            for p in run.preemptions[:MAX_FAILURE_GROUPS]:
                out.write(f"  {p['preemptor']} on {p['node']}: {', '.join(p['victims'])}\n")
        write_groups(run, out)
        spread = run.zone_spread()["perZone"]
        if len(spread) > 1 or "" not in spread:
            out.write(f"\n{run.policy}: placed per zone: "
                      + ", ".join(f"{z or '(no zone)'} {n}" for z, n in spread.items()) + "\n")
        groups = _failure_groups(run)
        if groups:
            out.write(f"\n{run.policy}: {len(run.failed)} unschedulable\n")
            for msg, pods in groups[:MAX_FAILURE_GROUPS]:
                more = f", ... ({len(pods)} pods)" if len(pods) > 3 else ""
                out.write(f"  {msg}\n    {', '.join(pods[:3])}{more}\n")
                notes = {r.note for r in run.failed if r.message == msg and r.note}
                for n in sorted(notes)[:2]:
                    out.write(f"    {n}\n")
                helped = next((p for p in pods if p in run.remedies and run.remedies[p].suggestions), None)
                if helped is not None:
                    out.write(f"    would place {helped}: {run.remedies[helped].text()}\n")
            if len(groups) > MAX_FAILURE_GROUPS:
                out.write(f"  ... {len(groups) - MAX_FAILURE_GROUPS} more messages (--json lists every pod)\n")
    if not sim.runs:
        return
    first = sim.runs[0].after
    if len(first.names) > MAX_NODE_ROWS:
        out.write(f"\nper-node allocation of {len(first.names)} nodes: see --json or --report\n")
        return
    out.write("\nper-node allocation, cpu/memory requested of allocatable, before -> after:\n")
    rows = [["NODE", "ZONE", *(r.policy for r in sim.runs)]]
    for i, nm in enumerate(first.names):
        b = sim.runs[0].before
        bs = _shares(b.requested[i], b.allocatable[i])
        cells = []
        for run in sim.runs:
            a = run.after
            s = _shares(a.requested[i], a.allocatable[i])
            cells.append(f"{_pct(bs[0])}/{_pct(bs[1])} -> {_pct(s[0])}/{_pct(s[1])}")
        rows.append([nm, first.zones[i] or "-", *cells])
    _table(rows, out)


def write_shadow(policy: str, sh: Mapping[str, Any], out: TextIO) -> None:
    """A rollout candidate's decisions beside the policy's (simulate's PolicyRun.shadow_summary,
    or the operator's status.rollout.shadow: the same fields)."""
    n, k = sh.get("compared", 0), sh.get("changed", 0)
    pct = f" ({100 * k / n:.1f}%)" if n else ""
    out.write(f"{policy}: the rollout candidate changed {k} of {n} decisions{pct}; "
              f"{sh.get('becameUnschedulable', 0)} would find no node, {sh.get('becameSchedulable', 0)} would "
              "find one where the policy finds none\n")
    plugins = sh.get("plugins") or []
    if plugins:
        out.write("  moved by: " + ", ".join(f"{p['name']} {p['changed']}" for p in plugins) + "\n")
    samples = sh.get("samples") or []
    if samples:
        rows = [["POD", "STABLE", "CANDIDATE", "MOVED BY"]]
        rows += [[str(x.get("pod")), str(x.get("stable") or "(none)"), str(x.get("candidate") or "(none)"),
                  ", ".join(x.get("plugins") or []) or "-"] for x in samples]
        _table(rows, out)


def shadow_html(policy: str, sh: Mapping[str, Any], title: str = "") -> str:
    """The same as HTML: a summary, the plugins that moved decisions as bars, the sample pods."""
    n, k = sh.get("compared", 0), sh.get("changed", 0)
    out = [f"<h2>{_esc(title or policy)}: rollout candidate beside the policy</h2>",
           f"<p>{k} of {n} decisions changed" + (f" ({100 * k / n:.1f}%)" if n else "") +
           f"; {sh.get('becameUnschedulable', 0)} would find no node; {sh.get('becameSchedulable', 0)} would find "
           "one where the policy finds none. A decision changed when the node the policy chose is not among the "
           "candidate's best.</p>"]
    plugins = sh.get("plugins") or []
    if plugins:
        out.append("<div class=\"panel\">")
        out.append(grouped_bars([p["name"] for p in plugins], [("changed", [float(p["changed"]) for p in plugins],
                                                                 PALETTE[0])],
                                 "changed decisions each plugin moved", fmt=lambda v: f"{v:.0f}"))
        out.append("</div>")
    samples = sh.get("samples") or []
    if samples:
        out.append("<table><tr><th>pod</th><th>policy's node</th><th>candidate's node</th><th>moved by</th></tr>")
        for x in samples:
            out.append(f"<tr><td>{_esc(x.get('pod'))}</td><td>{_esc(x.get('stable') or '(none)')}</td>"
                       f"<td>{_esc(x.get('candidate') or '(none)')}</td>"
                       f"<td>{_esc(', '.join(x.get('plugins') or []) or '-')}</td></tr>")
        out.append("</table>")
    return "".join(out)


def shadow_page(policy: str, sh: Mapping[str, Any], note: str) -> str:
    """A whole page of shadow_html (``rollout diff --html``)."""
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>policy-scheduler rollout diff: {_esc(policy)}</title><style>{CSS}</style></head><body>"
            f"<h1>policy-scheduler rollout diff</h1><p class=\"small\">{_esc(note)}</p>"
            f"{shadow_html(policy, sh)}</body></html>\n")


def _shares(req: np.ndarray, alloc: np.ndarray) -> tuple[float, float]:
    return tuple(float(r) / float(a) if a > 0 else 0.0 for r, a in zip(req, alloc))  # type: ignore[return-value]


def write_explain(run: PolicyRun, out: TextIO) -> None:
    """explain's per-plugin table for each simulated pod (explain.print_decision), to ``out``."""
    for r in run.results:
        out.write(f"pod {r.pod} under policy {run.policy}: node {r.node or '(none)'}\n")
        d = run.explain(r)
        if d is not None:
            d["at"] = "simulated"
            print_decision(d, out)
        else:
            out.write(f"  not scheduled: {r.message}\n")
            if r.note:
                out.write(f"  {r.note}\n")
            if r.decision is not None and r.decision.failures:
                out.write("  filtered out:\n")
                for reason, n in sorted(r.decision.failures.items(), key=lambda kv: -kv[1]):
                    out.write(f"    {n:>5}  {reason}\n")
    out.flush()


# ---------------------------------------------------------------------------------------- HTML

SUMMARY_NOTES = ("nodes used: nodes with at least one pod after the simulation (was: before it); nodes receiving "
                 "pods: the nodes the simulation placed a pod on. Imbalance: the standard deviation of the nodes' "
                 "allocation. Fits: how many more pods of the most common shape would fit after the run.")


def _failures_html(run: PolicyRun) -> str:
    groups = _failure_groups(run)
    if not groups:
        return ""
    out = [f"<h2>{_esc(run.policy)}: {len(run.failed)} unschedulable</h2><table class=\"fixed\">"
           "<colgroup><col style=\"width:62%\"><col style=\"width:8%\"><col style=\"width:30%\"></colgroup>"
           "<tr><th>FailedScheduling message</th><th class=\"num\">pods</th><th>which</th></tr>"]
    for msg, pods in groups[:20]:
        more = f" ... ({len(pods)})" if len(pods) > 5 else ""
        out.append(f"<tr><td>{_esc(msg)}</td><td class=\"num\">{len(pods)}</td>"
                   f"<td>{_esc(', '.join(pods[:5]) + more)}</td></tr>")
    out.append("</table>")
    if len(groups) > 20:
        out.append(f"<p class=\"small\">... {len(groups) - 20} more messages (--json lists every pod)</p>")
    out.append(_suggestions_html(run))
    return "".join(out)


def _suggestions_html(run: PolicyRun) -> str:
    """The verified changes that would place the unschedulable pods searched (the first
    SUGGEST_PODS of them): per pod, its suggestions best first, or why there are none."""
    searched = list(run.remedies.items())
    if not searched:
        return ""
    helped = sum(1 for _, r in searched if r.suggestions)
    out = [f"<h3>{_esc(run.policy)}: what would place them</h3><p class=\"small\">{helped} of the "
           f"{len(searched)} pods searched have a suggestion; each was verified by the pod's own scheduling "
           "cycle on the state the run ended with (the node it would get, its score). --json has each "
           "change's patch.</p><table class=\"fixed\"><colgroup><col style=\"width:21%\"><col style=\"width:15%\">"
           "<col style=\"width:37%\"><col style=\"width:11%\"><col style=\"width:16%\"></colgroup><tr><th>pod</th>"
           "<th>kind</th><th>change</th><th class=\"num\">nodes opened</th><th>node (score)</th></tr>"]
    for key, r in searched[:MAX_SUGGESTION_ROWS]:
        if not r.suggestions:
            why = r.reason or ("the time budget ran out" if r.partial else "none found")
            out.append(f"<tr><td>{_esc(key)}</td><td>-</td><td class=\"small\">{_esc(why)}</td><td></td><td></td></tr>")
            continue
        for i, sg in enumerate(r.suggestions[:3]):
            score = "" if sg.score is None else f" ({sg.score})"
            out.append(f"<tr><td>{_esc(key) if i == 0 else ''}</td><td>{_esc(sg.kind)}</td><td>{_esc(sg.change)}</td>"
                       f"<td class=\"num\">{sg.nodes_opened}</td><td>{_esc(sg.node)}{score}</td></tr>")
    out.append("</table>")
    if len(searched) > MAX_SUGGESTION_ROWS:
        out.append(f"<p class=\"small\">... {len(searched) - MAX_SUGGESTION_ROWS} more pods (--json lists each)</p>")
    return "".join(out)


def html_report(sim: Simulation) -> str:
    colors = {r.policy: PALETTE[i % len(PALETTE)] for i, r in enumerate(sim.runs)}
    drilled = any(r.drilldowns for r in sim.runs)
    out = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
           f"<title>policy-scheduler what-if: {_esc(', '.join(r.policy for r in sim.runs))}</title>",
           f"<style>{CSS}</style></head><body>",
           "<h1>policy-scheduler what-if</h1>",
           f"<p class=\"small\">{sim.pods} pods simulated on {sim.nodes} nodes of {_esc(sim.source)} "
           f"(taken {rfc3339(sim.taken_at)}), seed {sim.seed}. Nothing was written to the cluster.</p>",
           "<nav class=\"small\"><a href=\"#summary\">Summary</a><a href=\"#allocation\">Allocation per node</a>"
           "<a href=\"#zones\">Pods per zone</a>"
           + ("<a href=\"#drill-down\">Per-pod drill-down</a>" if drilled else "") + "</nav>",
           "<h2 id=\"summary\">Summary</h2><table class=\"summary\"><tr><th>policy</th><th class=\"num\">placed</th>"
           "<th class=\"num\">unschedulable</th><th class=\"num\">nodes used</th><th class=\"num\">nodes receiving "
           "pods</th><th class=\"num\">imbalance</th><th class=\"num\">zone skew</th><th>fits (common shape)</th></tr>"]
    for run in sim.runs:
        s = run.summary()
        shape = ", ".join(f"{k} {v}" for k, v in s["fragmentation"]["shape"].items())
        out.append(f"<tr><td><span style=\"color:{colors[run.policy]}\">&#9632;</span> {_esc(run.policy)}</td>"
                   f"<td class=\"num\">{s['placed']}</td><td class=\"num\">{s['unschedulable']}</td>"
                   f"<td class=\"num\">{s['nodesUsed']} (was {s['nodesUsedBefore']})</td>"
                   f"<td class=\"num\">{s['nodesReceivingPods']}</td>"
                   f"<td class=\"num\">{s['imbalance']:.3f} (was {s['imbalanceBefore']:.3f})</td>"
                   f"<td class=\"num\">{s['zoneSpread']['skew']}</td>"
                   f"<td>{s['fragmentation']['fits']} (was {s['fragmentation']['fitsBefore']}; "
                   f"{_esc(shape)})</td></tr>")
    out.append(f"</table><p class=\"small\">{SUMMARY_NOTES}</p>")
    if sim.runs and sim.runs[0].warnings:
        out.append("<h2>Objects of the snapshot skipped</h2><ul>"
                   + "".join(f"<li>{_esc(w)}</li>" for w in sim.runs[0].warnings) + "</ul>")
    with_devices = [r for r in sim.runs if r.devices is not None]
    if with_devices:
        out.append("<h2>DRA devices</h2><table><tr><th>policy</th><th>devices allocated</th><th>of</th>"
                   "<th>nodes with a device in use</th></tr>")
        for run in with_devices:
            dv = run.devices
            out.append(f"<tr><td>{_esc(run.policy)}</td><td>{dv['allocated']} (was {dv['allocatedBefore']})</td>"
                       f"<td>{dv['total']}</td><td>{dv['nodes']} (was {dv['nodesBefore']})</td></tr>")
        out.append("</table>")
    if sim.runs:
        series = [(r.policy, [float(r.after.nodes_used()), float(r.summary()["nodesReceivingPods"])],
                   colors[r.policy]) for r in sim.runs]
        out.append("<h2>Nodes used and imbalance</h2><div class=\"pair\"><div class=\"panel\">")
        out.append(grouped_bars(["nodes used", "nodes receiving pods"], series, "nodes used per policy",
                                width=560, height=230, fmt=lambda v: f"{v:.0f}"))
        out.append("</div><div class=\"panel\">")
        out.append(grouped_bars(["imbalance after"],
                                [(r.policy, [r.after.imbalance()], colors[r.policy]) for r in sim.runs],
                                "imbalance per policy", width=560, height=230, fmt=lambda v: f"{v:.3f}"))
        out.append(f"<p class=\"small\">before them: {sim.runs[0].before.imbalance():.3f} (the same snapshot for "
                   "every policy)</p>")
        out.append("</div></div>")
        out.append(allocation_section(sim.runs, colors))
        spreads = [run.zone_spread()["perZone"] for run in sim.runs]
        zones = sorted({z for s in spreads for z in s})
        out.append("<h2 id=\"zones\">Placed pods per zone</h2><div class=\"panel\">")
        out.append(grouped_bars([z or "(no zone)" for z in zones],
                                [(run.policy, [float(s.get(z, 0)) for z in zones], colors[run.policy])
                                 for run, s in zip(sim.runs, spreads)], "placed pods per zone",
                                width=1100, height=230, fmt=lambda v: f"{v:.0f}"))
        out.append("</div>")
        for run in sim.runs:
            if run.shadow is not None:
                out.append(shadow_html(run.policy, run.shadow_summary()))
        for run in sim.runs:
            if run.groups:
                whole = sum(1 for g in run.groups if g["whole"])
                out.append(f"<h2>{_esc(run.policy)}: PodGroups, {whole} of {len(run.groups)} placed whole</h2>"
                           "<table class=\"fixed\"><colgroup><col style=\"width:25%\"><col style=\"width:30%\">"
                           "<col style=\"width:45%\"></colgroup><tr><th>PodGroup</th><th>outcome</th>"
                           "<th>why (PodGroupInitiallyScheduled)</th></tr>")
                for g in run.groups:
                    name, outcome, why = group_line(g)
                    out.append(f"<tr><td>{_esc(name)}</td><td>{_esc(outcome)}</td><td>{_esc(why)}</td></tr>")
                out.append("</table>")
            if run.preemptions:
                out.append(f"<h2>{_esc(run.policy)}: preemptions carried out</h2><table class=\"fixed\"><colgroup>"
                           "<col style=\"width:30%\"><col style=\"width:20%\"><col style=\"width:50%\"></colgroup>"
                           "<tr><th>preemptor</th><th>node</th><th>victims</th></tr>")
                for p in run.preemptions:
                    out.append(f"<tr><td>{_esc(p['preemptor'])}</td><td>{_esc(p['node'])}</td>"
                               f"<td>{_esc(', '.join(p['victims']))}</td></tr>")
                out.append("</table>")
        out += [_failures_html(run) for run in sim.runs]
        out.append(drill_section(sim.runs))
    out.append("</body></html>\n")
    return "".join(out)
