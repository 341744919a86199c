"""The pieces of simulate's HTML report (report.py puts the page together): the stylesheet, inline
SVG charts drawn here (no script, no external file), and the per-pod drill-down's tables.

Per-node allocation: up to MAX_NODE_BARS nodes, one bar per node with its name on the axis; past
that, the distribution of allocation over the nodes (every node's share, sorted), with its
minimum, median and maximum, and the most and least allocated nodes named. Charts scale to the
width of their column; the page never needs more width than the browser gives it."""

from __future__ import annotations

import html
from typing import Any, Callable

import numpy as np

from ..explain import NOT_RUN, PASSED, SKIPPED

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7")
BEFORE = "#b9bec7"
MAX_NODE_BARS = 60  # more nodes than this: the distribution instead of one bar per node
SIDE_BY_SIDE = 24  # up to this many bars, a policy's cpu and memory charts side by side; past it, stacked
MAX_LABEL = 30  # characters of a node name on an axis (the whole name in its tooltip)
CURVE_POINTS = 300  # points of a distribution curve at most
NAMED = 5  # most and least allocated nodes named under a distribution

CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;padding:24px;color:#222;
max-width:1280px;overflow-wrap:anywhere}
h1{font-size:20px}h2{font-size:16px;margin-top:32px;border-bottom:1px solid #e3e3e3;padding-bottom:4px}
h3{font-size:14px;margin:0 0 6px 0}
table{border-collapse:collapse;font-size:13px;margin:8px 0;max-width:100%}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top;overflow-wrap:anywhere;
word-break:break-word}
th{background:#f4f5f7;font-weight:600}td.num,th.num{text-align:right;white-space:nowrap}
table.fixed{table-layout:fixed;width:100%}table.summary td:first-child{min-width:9em}
.rows{display:flex;flex-direction:column;gap:16px}
.pair{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:16px}
.panel{border:1px solid #e3e3e3;padding:10px;border-radius:4px;min-width:0}
svg.chart{display:block;width:100%;height:auto}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}
.small{font-size:12px;color:#555}pre{font-size:12px;white-space:pre-wrap}
nav a{margin-right:14px}
details{margin:10px 0;border:1px solid #e3e3e3;border-radius:4px;padding:6px 10px}
summary{cursor:pointer;font-weight:600}
td.pass{color:#2f7d32}td.fail{color:#b3261e;background:#fdf1f0}td.idle{color:#999}
td.chosen,th.chosen{background:#eef4fb}
.score{font-size:15px;font-weight:600}code{white-space:nowrap}
"""


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def _label(name: str) -> str:
    return name if len(name) <= MAX_LABEL else name[:MAX_LABEL - 1] + "\u2026"


def _svg_open(width: float, height: float, label: str) -> str:
    return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'width="{width:.0f}" height="{height:.0f}" role="img" aria-label="{esc(label)}">')


def _shares(run, resource: int) -> tuple[np.ndarray, np.ndarray]:
    b, a = run.before, run.after
    alloc = a.allocatable[:, resource]
    n = len(a.names)
    before = np.divide(b.requested[:, resource], alloc, out=np.zeros(n), where=alloc > 0)
    after = np.divide(a.requested[:, resource], alloc, out=np.zeros(n), where=alloc > 0)
    return before, after


def node_bars(run, color: str, resource: int, label: str, width: int = 560) -> str:
    """Bars per node, its name under it: the share allocated before (grey) and what the
    simulation added (the policy's color), in snapshot order."""
    names = run.after.names
    n = len(names)
    before, after = (np.clip(x, 0, 1.2) for x in _shares(run, resource))
    left, top, ph = 40, 10, 150
    pw = width - left - 8
    bw = pw / max(n, 1)
    labels = [_label(x) for x in names]
    longest = max((len(x) for x in labels), default=1)
    flat = longest * 6.2 <= bw - 2  # every name fits under its bar
    bottom = 22 if flat else int(longest * 6.2) + 14
    height = top + ph + bottom
    parts = [_svg_open(width, height, f"{run.policy} {label} per node")]
    for frac in (0, 0.5, 1.0):
        y = top + ph * (1 - frac / 1.2)
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{int(frac * 100)}%</text>')
    gap = 0.18 * bw if bw > 4 else 0.0
    y0 = top + ph
    for i in range(n):
        x = left + i * bw + gap / 2
        hb, ha = ph * before[i] / 1.2, ph * after[i] / 1.2
        tip = f"<title>{esc(names[i])}: {before[i] * 100:.0f}% -> {after[i] * 100:.0f}%</title>"
        w = max(bw - gap, 0.5)
        if ha > hb:
            parts.append(f'<rect x="{x:.2f}" y="{y0 - ha:.2f}" width="{w:.2f}" height="{ha - hb:.2f}" '
                         f'fill="{color}">{tip}</rect>')
        if hb > 0:
            parts.append(f'<rect x="{x:.2f}" y="{y0 - hb:.2f}" width="{w:.2f}" height="{hb:.2f}" '
                         f'fill="{BEFORE}">{tip}</rect>')
        cx = left + (i + 0.5) * bw
        if flat:
            parts.append(f'<text class="node" x="{cx:.1f}" y="{y0 + 14}" text-anchor="middle" font-size="10">'
                         f'{esc(labels[i])}<title>{esc(names[i])}</title></text>')
        else:  # vertical, read from the bottom up, ending under the bar
            parts.append(f'<text class="node" x="{cx + 3.5:.1f}" y="{y0 + 6}" text-anchor="end" font-size="10" '
                         f'transform="rotate(-90 {cx + 3.5:.1f} {y0 + 6})">{esc(labels[i])}'
                         f'<title>{esc(names[i])}</title></text>')
    parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y0}" y2="{y0}" stroke="#888"/></svg>')
    return "".join(parts)


def _curve(values: np.ndarray) -> np.ndarray:
    """``values`` sorted, at CURVE_POINTS evenly spaced ranks at most (the first and last kept)."""
    v = np.sort(values)
    if len(v) <= CURVE_POINTS:
        return v
    return v[np.linspace(0, len(v) - 1, CURVE_POINTS).round().astype(int)]


def _stats(v: np.ndarray) -> str:
    if not len(v):
        return "-"
    return f"min {v.min() * 100:.0f}%, median {np.median(v) * 100:.0f}%, max {v.max() * 100:.0f}%"


def node_distribution(run, color: str, resource: int, label: str, width: int = 560) -> str:
    """Every node's allocated share after the run (the policy's color) and before (grey line),
    each sorted from the least to the most allocated: the x axis is the share of nodes. Marks
    the minimum, median and maximum; names the most and least allocated nodes under the chart."""
    before, after = _shares(run, resource)
    left, top, ph, bottom = 40, 12, 170, 34
    pw = width - left - 12
    height = top + ph + bottom
    ymax = max(1.0, float(min(max(after.max(initial=0), before.max(initial=0)), 1.2)))

    def xy(vals: np.ndarray) -> list[tuple[float, float]]:
        k = max(len(vals) - 1, 1)
        return [(left + pw * i / k, top + ph * (1 - min(float(v), ymax) / ymax)) for i, v in enumerate(vals)]

    a_pts, b_pts = xy(_curve(after)), xy(_curve(before))
    y0 = top + ph
    parts = [_svg_open(width, height, f"{run.policy} {label}: allocation of the {len(after)} nodes, sorted"),
             f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafbfc"/>']
    for frac in (0, 0.25, 0.5, 0.75, 1.0):
        if frac > ymax:
            continue
        y = top + ph * (1 - frac / ymax)
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e3e3"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{int(frac * 100)}%</text>')
    area = " ".join(f"{x:.1f},{y:.1f}" for x, y in a_pts)
    parts.append(f'<polygon points="{left},{y0} {area} {left + pw},{y0}" fill="{color}" fill-opacity="0.55" '
                 f'stroke="{color}"/>')
    parts.append('<polyline points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in b_pts) +
                 f'" fill="none" stroke="#6b7280" stroke-width="1.5" stroke-dasharray="4 3"/>')
    srt = np.sort(after)
    for name, rank in (("min", 0), ("median", (len(srt) - 1) / 2), ("max", len(srt) - 1)):
        if not len(srt):
            break
        v = float(np.median(srt)) if name == "median" else float(srt[int(rank)])
        x = left + pw * rank / max(len(srt) - 1, 1)
        y = top + ph * (1 - min(v, ymax) / ymax)
        anchor = "start" if name == "min" else ("end" if name == "max" else "middle")
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#222"/>'
                     f'<text x="{x + (4 if name == "min" else -4 if name == "max" else 0):.1f}" '
                     f'y="{max(y - 6, top + 10):.1f}" text-anchor="{anchor}" font-size="11">'
                     f'{name} {v * 100:.0f}%</text>')
    for frac in (0, 0.5, 1.0):
        x = left + pw * frac
        anchor = "start" if frac == 0 else ("end" if frac == 1 else "middle")
        parts.append(f'<text x="{x:.1f}" y="{y0 + 14}" text-anchor="{anchor}" font-size="10">'
                     f'{int(frac * 100)}% of nodes</text>')
    parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y0}" y2="{y0}" stroke="#888"/>'
                 f'<text x="{left + pw / 2:.1f}" y="{height - 4}" text-anchor="middle" font-size="10">'
                 f'{len(after)} nodes, least to most allocated</text></svg>')
    order = np.argsort(after, kind="stable")
    names = run.after.names

    most, least = np.argsort(-after, kind="stable")[:NAMED], order[:NAMED]
    parts.append(f'<p class="small">after: {_stats(after)}; before: {_stats(before)}</p>'
                 '<table class="fixed small nodes"><colgroup><col style="width:40%"><col style="width:10%">'
                 '<col style="width:40%"><col style="width:10%"></colgroup><tr><th>most allocated</th>'
                 '<th class="num">after</th><th>least allocated</th><th class="num">after</th></tr>')
    for i, j in zip(most, least):
        parts.append(f'<tr><td>{esc(names[i])}</td><td class="num">{after[i] * 100:.0f}%</td>'
                     f'<td>{esc(names[j])}</td><td class="num">{after[j] * 100:.0f}%</td></tr>')
    parts.append("</table>")
    return "".join(parts)


def allocation_section(runs, colors: dict[str, str]) -> str:
    """One row per policy, its cpu and memory side by side (the same layout for any number of
    policies): bars per node with their names, or the sorted distribution past MAX_NODE_BARS."""
    if not runs:
        return ""
    n = len(runs[0].after.names)
    many = n > MAX_NODE_BARS
    out = ["<h2 id=\"allocation\">Allocation per node, per policy</h2><p class=\"legend small\">"
           f"<span style=\"background:{BEFORE}\"></span>before the simulated pods"
           "<span style=\"background:#666\"></span>after (the policy's color). "
           + (f"{n} nodes: each curve is every node's allocated share, sorted from the least to the most allocated "
              "(the dashed line: before the simulated pods, sorted too); a flat curve means even nodes, a step up at "
              "the right a few full ones." if many else
              "Nodes in snapshot order, the same in every chart; hover a bar for its numbers.") + "</p>",
           "<div class=\"rows\">"]
    wide = MAX_NODE_BARS >= n > SIDE_BY_SIDE  # a bar and a name per node need the whole width
    for run in runs:
        out.append(f"<div class=\"panel\"><h3>{esc(run.policy)}</h3><div class=\"{'rows' if wide else 'pair'}\">")
        for res, label in ((0, "cpu"), (1, "memory")):
            chart = (node_distribution(run, colors[run.policy], res, label) if many else
                     node_bars(run, colors[run.policy], res, label, width=1160 if wide else 560))
            out.append(f"<div><div class=\"small\">{label} requested of allocatable</div>{chart}</div>")
        out.append("</div></div>")
    out.append("</div>")
    return "".join(out)


def grouped_bars(categories: list[str], series: list[tuple[str, list[float], str]], title: str,
                 width: int = 900, height: int = 220, fmt: Callable[[float], str] = lambda v: f"{v:g}") -> str:
    """Grouped vertical bars: one group per category, one bar per series (name, values, color),
    each labelled with its value; the series named in a legend under the chart."""
    left, bottom, top = 44, 34 + 16, 16
    pw, ph = width - left - 10, height - bottom - top
    vmax = max([v for _, vals, _ in series for v in vals] + [1e-9])
    ng, ns = max(len(categories), 1), max(len(series), 1)
    gw = pw / ng
    bw = gw * 0.8 / ns
    parts = [_svg_open(width, height, title),
             f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" stroke="#888"/>']
    for frac in (0.5, 1.0):
        y = top + ph * (1 - frac)
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10">'
                     f'{esc(fmt(vmax * frac))}</text>')
    for gi, cat in enumerate(categories):
        gx = left + gi * gw + gw * 0.1
        for si, (name, vals, color) in enumerate(series):
            v = vals[gi]
            h = ph * v / vmax
            x = gx + si * bw
            parts.append(f'<rect x="{x:.2f}" y="{top + ph - h:.2f}" width="{max(bw - 1, 0.5):.2f}" height="{h:.2f}" '
                         f'fill="{color}"><title>{esc(name)} / {esc(cat)}: {esc(fmt(v))}</title></rect>')
            if ng * ns <= 40:
                parts.append(f'<text x="{x + bw / 2:.2f}" y="{top + ph - h - 3:.2f}" text-anchor="middle" '
                             f'font-size="10">{esc(fmt(v))}</text>')
        if ng <= 40:
            parts.append(f'<text x="{left + gi * gw + gw / 2:.1f}" y="{top + ph + 14}" text-anchor="middle" '
                         f'font-size="11">{esc(_label(cat))}<title>{esc(cat)}</title></text>')
    if len(series) > 1:  # the legend: which color is which series
        x = left
        for name, _, color in series:
            parts.append(f'<rect x="{x:.1f}" y="{height - 14}" width="10" height="10" fill="{color}"/>'
                         f'<text x="{x + 14:.1f}" y="{height - 5}" font-size="11">{esc(_label(name))}</text>')
            x += 24 + 6.5 * len(_label(name))
    parts.append("</svg>")
    return "".join(parts)


# ------------------------------------------------------------------------------------- drill-down

def _filter_cell(v: str | None, chosen: bool) -> str:
    ch = " chosen" if chosen else ""
    if v is None:
        return f"<td class=\"idle{ch}\">-</td>"
    if v == PASSED:
        return f"<td class=\"pass{ch}\">&#10003; passed</td>"
    if v in (NOT_RUN, SKIPPED):
        return f"<td class=\"idle{ch}\">{esc(v)}</td>"
    return f"<td class=\"fail{ch}\">&#10007; {esc(v)}</td>"


def _score_cell(c: dict[str, Any] | None, chosen: bool) -> str:
    ch = " chosen" if chosen else ""
    if not c or c.get("weighted") is None:
        return f"<td class=\"idle{ch}\">-</td>"
    parts = [f"<span class=\"score\">{esc(c['weighted'])}</span>"]
    if c.get("normalized") is not None and c.get("weight") is not None:
        parts.append(f"<br><span class=\"small\">{esc(c['normalized'])} &times; {esc(c['weight'])}"
                     + (f", raw {esc(c['raw'])}" if c.get("raw") is not None else "") + "</span>")
    return f"<td class=\"num{ch}\">" + "".join(parts) + "</td>"


def _codes(text: str) -> str:
    """Flag and field names in a verdict kept whole (a line may not break inside them)."""
    for word in ("--explain-node",):
        text = text.replace(word, f"<code>{word}</code>")
    return text


def drill_html(dd) -> str:
    """One pod's drill-down (drilldown.DrillDown) as a table: a column per node shown, a row per
    Filter plugin (its verdict) and per Score plugin (weighted score, normalized x weight, raw),
    then the total. explain.plugin_table makes the rows, as for ``explain``."""
    table = dd.table()
    rows = table["rows"]
    head = (f"{esc(dd.pod)}: " + (f"node {esc(dd.node)}" if dd.node else "no node")
            + f" <span class=\"small\">({dd.nodes} nodes, {dd.evaluated} evaluated, {dd.feasible} feasible)</span>")
    out = [f"<details open class=\"drill\"><summary>{head}</summary>"]
    if dd.message:
        out.append(f"<p>{esc(dd.message)}</p>")
    if dd.note:
        out.append(f"<p class=\"small\">{esc(dd.note)}</p>")
    if not rows:
        out.append("</details>")
        return "".join(out)
    k = len(rows)
    out.append("<table class=\"fixed drill\"><colgroup><col style=\"width:24%\">"
               + f"<col style=\"width:{76 / k:.2f}%\">" * k + "</colgroup>")
    out.append("<tr><th>plugin</th>" + "".join(
        f"<th class=\"{'chosen' if r['chosen'] else ''}\" data-node=\"{esc(r['node'])}\">"
        + esc(r["node"]).replace(".", ".<wbr>")  # a long name breaks after a dot, if it must break
        + ("<br><span class=\"small\">chosen</span>" if r["chosen"] else "") + "</th>" for r in rows) + "</tr>")
    out.append("<tr><td>verdict</td>" + "".join(
        "<td class=\"small\">" + _codes(esc(r["verdict"] or ""))
        + "</td>" for r in rows) + "</tr>")
    if table["scores"]:
        out.append(f"<tr><th colspan=\"{k + 1}\">Score: weighted score (normalized &times; weight, raw)</th></tr>")
        for p in table["scores"]:
            out.append(f"<tr class=\"score-row\" data-plugin=\"{esc(p)}\"><td>{esc(p)}</td>"
                       + "".join(_score_cell(r["cells"].get(p), r["chosen"]) for r in rows) + "</tr>")
        out.append("<tr class=\"total\"><td><b>total</b></td>" + "".join(
            f"<td class=\"num{' chosen' if r['chosen'] else ''}\"><span class=\"score\">"
            f"{esc('-' if r['total'] is None else r['total'])}</span></td>" for r in rows) + "</tr>")
    # a Filter plugin the pod's PreFilter skipped on every node shown: named once, under the table
    skipped = [p for p in table["filters"] if all((r["cells"].get(p) or {}).get("filter") == SKIPPED for r in rows)]
    shown = [p for p in table["filters"] if p not in skipped]
    if shown:
        out.append(f"<tr><th colspan=\"{k + 1}\">Filter, in the policy's order</th></tr>")
        for p in shown:
            out.append(f"<tr class=\"filter-row\" data-plugin=\"{esc(p)}\"><td>{esc(p)}</td>"
                       + "".join(_filter_cell((r["cells"].get(p) or {}).get("filter"), r["chosen"]) for r in rows)
                       + "</tr>")
    out.append("</table>")
    if skipped:
        out.append("<p class=\"small\">Filter plugins skipped for this pod (their PreFilter said Skip: nothing to "
                   "check): " + ", ".join(esc(p) for p in skipped) + "</p>")
    if dd.failures and not dd.node:
        out.append("<p class=\"small\">filtered out: " + "; ".join(
            f"{n} {esc(reason)}" for reason, n in sorted(dd.failures.items(), key=lambda kv: -kv[1])) + "</p>")
    out.append("</details>")
    return "".join(out)


def drill_section(runs) -> str:
    """Every policy's drill-downs (PolicyRun.drilldowns), under one heading."""
    runs = [r for r in runs if r.drilldowns]
    if not runs:
        return ""
    out = ["<h2 id=\"drill-down\">Per-pod drill-down: each plugin on the best nodes</h2>"
           "<p class=\"small\">For each pod shown (<code>simulate --explain-pod</code>; by default the first pods): "
           "the nodes with the best totals, the chosen one first, and the nodes named with "
           "<code>--explain-node</code>; for a pod no node fits, the first nodes of the snapshot. Each Filter "
           "plugin's verdict (upstream stops at the first rejection: the later ones did not run) and each Score "
           "plugin's weighted score, the same table <code>policy-scheduler explain</code> prints.</p>"]
    for run in runs:
        out.append(f"<h3>{esc(run.policy)}</h3>")
        out += [drill_html(dd) for dd in run.drilldowns]
    return "".join(out)
