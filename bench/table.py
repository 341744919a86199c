#!/usr/bin/env python3
"""One markdown table of every workload of a bench/throughput.py run, from its JSON result.

    .venv/bin/python bench/table.py RESULT [--no-notes]

RESULT is the run's result.json, its run directory (holding result.json), or a file holding the
benchmark's stdout (its last line that is a JSON object is the result). Printed: the run's date,
commit, sizes (quick or full), the machine's cores and load averages at its start and end, then
one row per workload in the run's order with, per scheduler that ran (policy-scheduler,
kube-scheduler with the same plugins, kube-scheduler with its default profile, kube-scheduler with
a minimal profile, the bare binder): pods/s between the 10% and the 90% pod scheduled; the ratios
policy-scheduler / kube-scheduler (same plugins), / bare binder and / minimal kube-scheduler, with
first, after the sizes, the whole run's: pods over the time from start to the last pod, and CPU
per pod over that time, each ours / kube-scheduler (same plugins); the start-up (process start to the first pod
scheduled) and the scheduler's CPU per pod in the measured window of each; and the most cores the
rest of the machine used in a measured window (the noise). Then what each workload is (the
workload's description from the result) and the run's errors. Every figure is read from the JSON:
nothing is computed but the formatting, so a README's table can be regenerated from a run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# throughput.py's scheduler keys, in the table's order, with their column heads
COLUMNS = (("policy-scheduler", "policy-scheduler"), ("kube-same", "kube-scheduler (same plugins)"),
           ("kube-scheduler", "kube-scheduler (default)"), ("kube-minimal", "kube-scheduler (minimal)"),
           ("ceiling", "bare binder"))
SHORT = {"policy-scheduler": "ours", "kube-same": "same", "kube-scheduler": "kube", "kube-minimal": "min",
         "ceiling": "binder"}
# ratio column -> (head, the scheduler it divides by); the whole run's come first, after the sizes
WHOLE_RUN = (("ours_vs_kube_avg", "whole run: ours / kube-same", "kube-same"),
             ("cpu_run_ours_vs_kube", "CPU/pod, whole run: ours / kube-same", "kube-same"))
RATIOS = (("ours_vs_kube", "ours / kube-same", "kube-same"), ("ours_vs_ceiling", "ours / binder", "ceiling"),
          ("ours_vs_kube_minimal", "ours / kube-min", "kube-minimal"))
DASH = "–"


def load(path: Path) -> dict:
    """The result object from a result.json, a run directory, or a captured stdout."""
    if path.is_dir():
        path = path / "result.json"
    for line in reversed(path.read_text().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"{path}: no JSON object line")


def num(x: Any, digits: int = 1) -> str:
    if x is None or isinstance(x, bool):
        return DASH
    return f"{x:,.{digits}f}"


def size(wr: dict) -> str:
    out = f"{wr['nodes']:,} × {wr['pods']:,}"
    extra = []
    if wr.get("init_pods"):
        extra.append(f"+{wr['init_pods']:,} {'first' if wr.get('devices_per_node') else 'bound'}")
    if wr.get("gated_pods"):
        extra.append(f"+{wr['gated_pods']:,} gated")
    return out + (f" ({', '.join(extra)})" if extra else "")


def startup(run: dict | None) -> float | None:
    return None if run is None else run.get("startup_s")


def render(result: dict, notes: bool = True) -> str:
    config, machine = result.get("config") or {}, result.get("machine") or {}
    ran = config.get("schedulers") or [k for k, _ in COLUMNS]
    cols = [(k, head) for k, head in COLUMNS if k in ran]
    keys = [k for k, _ in cols]
    load_start = machine.get("loadavg_1_5_15_at_start") or [machine.get("loadavg_at_start")]
    load_end = machine.get("loadavg_1_5_15_at_end")
    lines = [
        f"Run of {result.get('started', '?')} ("
        + (f"finished {result['finished']}" if result.get("finished") else f"written {result.get('written', '?')}")
        + f"), commit "
        f"{result.get('commit') or '?'}, {'quick' if config.get('quick') else 'full'} sizes; "
        f"{machine.get('cores', '?')} cores, load average (1/5/15 min) "
        f"{' / '.join(num(x, 2) for x in load_start)} at the start"
        + (f", {' / '.join(num(x, 2) for x in load_end)} at the end" if load_end else "")
        + ("" if result.get("ok") else "; the run did NOT pass: see the errors below"
           if result.get("error") or any("error" in w for w in (result.get("workloads") or {}).values())
           else "; INCOMPLETE: the run had not finished (or was stopped) when this JSON was written"),
        "",
    ]
    ratio_cols = [(k, h) for k, h, by in RATIOS if "policy-scheduler" in keys and by in keys]
    whole_cols = [(k, h) for k, h, by in WHOLE_RUN if "policy-scheduler" in keys and by in keys]
    who = " / ".join(SHORT[k] for k in keys)
    head = ["Workload", "nodes × pods", *(h for _, h in whole_cols), *(f"{h} pods/s" for _, h in cols),
            *(h for _, h in ratio_cols),
            f"start-up s ({who})", f"CPU ms/pod ({who})", f"CPU ms/pod, whole run ({who})", "other cores"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join([":---", ":---"] + ["---:"] * (len(head) - 2)) + "|")
    errors: list[tuple[str, str]] = []
    footnotes: set[str] = set()
    for name, wr in (result.get("workloads") or {}).items():
        runs = wr.get("runs") or {}
        if "error" in wr:  # the schedulers that finished before the failure keep their figures
            errors.append((name, wr["error"]))
            # the schedulers run in the config's order: the first without figures failed, the rest never ran
            failed = next((k for k in ran if k not in runs), None)
            cells = [name, DASH, *(DASH for _ in whole_cols),
                     *(num(runs[k]["pods_per_s"]) if k in runs else "failed" if k == failed
                                   else "not run" for k in keys),
                     *(DASH for _ in ratio_cols),
                     " / ".join(num(startup(runs.get(k)), 2) for k in keys),
                     " / ".join(num((runs.get(k) or {}).get("cpu_ms_per_pod"), 2) for k in keys),
                     " / ".join(num((runs.get(k) or {}).get("cpu_ms_per_pod_run"), 2) for k in keys), DASH]
            lines.append("| " + " | ".join(cells) + " |")
            continue
        mark = ""
        if wr.get("devices_per_node"):  # DRA: measured otherwise
            mark = " †"
            footnotes.add("†")
        if wr.get("skipped"):
            footnotes.add("left out")
        rat = wr.get("ratios") or {}
        cells = [f"{name}{mark}", size(wr), *(num(rat.get(k), 2) for k, _ in whole_cols)]
        for k in keys:
            r = runs.get(k)
            cells.append(num(r["pods_per_s"]) if r else ("left out" if k in (wr.get("skipped") or {}) else DASH))
        cells += [num(rat.get(k), 2) for k, _ in ratio_cols]
        cells.append(" / ".join(num(startup(runs.get(k)), 2) for k in keys))
        cells.append(" / ".join(num((runs.get(k) or {}).get("cpu_ms_per_pod"), 2) for k in keys))
        cells.append(" / ".join(num((runs.get(k) or {}).get("cpu_ms_per_pod_run"), 2) for k in keys))
        other = [r.get("other_cores_in_window") for r in runs.values() if r.get("other_cores_in_window") is not None]
        cells.append(num(max(other), 2) if other else DASH)
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "pods/s: between the 10% and the 90% pod scheduled (bound, with its Scheduled event), all "
                  "measured pods created before the scheduler starts; ratios of those pods/s; whole run: "
                  "scheduler_perf's average, the pods over the time from the scheduler's start to the last pod "
                  "scheduled; start-up: the scheduler's process start to its first pod scheduled; CPU ms/pod: the "
                  "scheduler's CPU in the 10-90% window per pod, and from its start to the last pod; other cores: the most cores the rest of the machine (not the scheduler, "
                  "API server, etcd or the benchmark) used in a measured window of the workload (above ~0.2 the "
                  "figures are noisy); –: not run or not measured"
                  + (f"; median of {next(iter(result['workloads'].values())).get('repeat')} runs per scheduler"
                     if any((w.get("repeat") or 1) > 1 for w in result.get("workloads", {}).values()) else "")
                  + "."]
        if "†" in footnotes:
            lines.append("† DRA: pods posted with the scheduler running, after its first pods were scheduled; "
                         "pods/s from the first create to the last bound (the claims' creation included); CPU over "
                         "that span; no start-up figure.")
        described = [(n, wr.get("description")) for n, wr in (result.get("workloads") or {}).items()
                     if wr.get("description")]
        if described:
            lines.append("")
            lines += [f"- **{n}**: {d}" for n, d in described]
        for n, wr in (result.get("workloads") or {}).items():
            for w, why in (wr.get("skipped") or {}).items():
                lines.append(f"- {n}: {w} left out: {why}")
    if errors or result.get("error"):
        lines.append("")
        lines += [f"- {n} failed: {e.splitlines()[0] if e else e}" for n, e in errors]
        if result.get("error") and not errors:
            lines.append(f"- the run failed: {result['error'].splitlines()[0]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", type=Path, help="result.json, its run directory, or the benchmark's stdout")
    ap.add_argument("--no-notes", action="store_true", help="the header line and the table only")
    a = ap.parse_args(argv)
    try:
        result = load(a.result)
    except (OSError, ValueError) as e:
        print(f"table.py: {e}", file=sys.stderr)
        return 2
    print(render(result, notes=not a.no_notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
