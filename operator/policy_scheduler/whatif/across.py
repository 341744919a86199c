"""The same pods against several clusters (or snapshots): each cluster simulated on its own
(simulate.py, the operator's core, nothing written), then ranked per policy.

The rank of a cluster for a policy, best first:

1. more pods placed (a cluster that holds the whole set comes before one that holds part of it);
2. fewer pods preempted to place them (a cluster with free room before one that has to make it);
3. a higher mean score of the chosen nodes (each placed pod's node's total under the policy's
   weights: the policy's own preference, as it ranks nodes);
4. the order the clusters were given in.

A cluster where the policy cannot be used (not in that cluster, or not valid there) is not
ranked; it is listed with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TextIO

from .report_html import CSS, esc
from .simulate import Simulation


@dataclass
class ClusterRun:
    name: str  # the context, or the snapshot file
    source: str
    sim: Simulation | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # policy -> why it was not run there
    error: str = ""  # the cluster could not be read at all


@dataclass
class Standing:
    cluster: str
    placed: int
    pods: int
    preempted: int
    mean_score: float
    nodes_used: int

    def key(self) -> tuple:
        return (-self.placed, self.preempted, -self.mean_score)

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "placed": self.placed, "pods": self.pods, "preempted": self.preempted,
                "meanScore": round(self.mean_score, 2), "nodesUsed": self.nodes_used,
                "fitsWhole": self.placed == self.pods}


def standing(name: str, sim: Simulation, policy: str) -> Standing | None:
    run = next((r for r in sim.runs if r.policy == policy), None)
    if run is None:
        return None
    placed = run.placed
    scores = [r.top[0][1] for r in placed if r.top]
    s = run.summary()
    return Standing(name, len(placed), len(run.results), s.get("preempted", 0),
                    sum(scores) / len(scores) if scores else 0.0, s["nodesUsed"])


def rank(clusters: list[ClusterRun], policy: str) -> list[Standing]:
    """The clusters where ``policy`` ran, best first (stable: given order breaks full ties)."""
    got = [st for c in clusters if c.sim is not None and (st := standing(c.name, c.sim, policy)) is not None]
    return sorted(got, key=Standing.key)


def policies_of(clusters: list[ClusterRun]) -> list[str]:
    names: list[str] = []
    for c in clusters:
        for r in (c.sim.runs if c.sim is not None else []):
            names.append(r.policy)
        names.extend(c.skipped)
    return list(dict.fromkeys(names))


def to_dict(clusters: list[ClusterRun], pods: int) -> dict[str, Any]:
    return {"apiVersion": "policy-scheduler.io/simulation/v1", "kind": "ClusterRanking", "pods": pods,
            "ranking": {p: [s.to_dict() for s in rank(clusters, p)] for p in policies_of(clusters)},
            "clusters": [{"name": c.name, "source": c.source,
                          **({"error": c.error} if c.error else {}),
                          **({"skipped": dict(c.skipped)} if c.skipped else {}),
                          **({"simulation": c.sim.to_dict()} if c.sim is not None else {})} for c in clusters]}


def write_text(clusters: list[ClusterRun], pods: int, out: TextIO) -> None:
    out.write(f"simulated the same {pods} pods on {len(clusters)} clusters; ranked per policy by pods placed, "
              "then fewest preempted, then the mean score of the chosen nodes\n")
    for c in clusters:
        if c.error:
            out.write(f"  {c.name}: not read: {c.error}\n")
    for policy in policies_of(clusters):
        out.write(f"\npolicy {policy}\n")
        rows = [["RANK", "CLUSTER", "PLACED", "PREEMPTED", "MEAN SCORE", "NODES USED"]]
        for i, s in enumerate(rank(clusters, policy), 1):
            rows.append([str(i), s.cluster, f"{s.placed}/{s.pods}" + (" (all)" if s.placed == s.pods else ""),
                         str(s.preempted), f"{s.mean_score:.1f}", str(s.nodes_used)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            out.write("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() + "\n")
        for c in clusters:
            if policy in c.skipped:
                out.write(f"  {c.name}: not ranked: {c.skipped[policy]}\n")


def html_report(clusters: list[ClusterRun], pods: int) -> str:
    out = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
           "<title>policy-scheduler what-if across clusters</title>", f"<style>{CSS}</style></head><body>",
           "<h1>policy-scheduler what-if across clusters</h1>",
           f"<p class=\"small\">The same {pods} pods simulated on each of {len(clusters)} clusters; nothing was "
           "written. Ranked per policy by pods placed, then fewest preempted, then the mean score of the chosen "
           "nodes.</p>"]
    for c in clusters:
        if c.error:
            out.append(f"<p>{esc(c.name)}: not read: {esc(c.error)}</p>")
    for policy in policies_of(clusters):
        out.append(f"<h2>{esc(policy)}</h2><table class=\"summary\"><tr><th class=\"num\">rank</th><th>cluster</th>"
                   "<th class=\"num\">placed</th><th class=\"num\">preempted</th><th class=\"num\">mean score</th>"
                   "<th class=\"num\">nodes used</th></tr>")
        for i, s in enumerate(rank(clusters, policy), 1):
            out.append(f"<tr><td class=\"num\">{i}</td><td>{esc(s.cluster)}</td>"
                       f"<td class=\"num\">{s.placed}/{s.pods}</td><td class=\"num\">{s.preempted}</td>"
                       f"<td class=\"num\">{s.mean_score:.1f}</td><td class=\"num\">{s.nodes_used}</td></tr>")
        out.append("</table>")
        for c in clusters:
            if policy in c.skipped:
                out.append(f"<p class=\"small\">{esc(c.name)}: not ranked: {esc(c.skipped[policy])}</p>")
    for c in clusters:
        if c.sim is None:
            continue
        out.append(f"<h2>{esc(c.name)}</h2><p class=\"small\">{c.sim.nodes} nodes of {esc(c.source)}.</p>"
                   "<table><tr><th>policy</th><th class=\"num\">placed</th><th class=\"num\">unschedulable</th>"
                   "<th>first reasons</th></tr>")
        for run in c.sim.runs:
            s = run.summary()
            reasons = sorted({r.message for r in run.failed})[:3]
            out.append(f"<tr><td>{esc(run.policy)}</td><td class=\"num\">{s['placed']}</td>"
                       f"<td class=\"num\">{s['unschedulable']}</td><td class=\"small\">"
                       + "<br>".join(esc(m) for m in reasons) + "</td></tr>")
        out.append("</table>")
    out.append("</body></html>")
    return "".join(out)
