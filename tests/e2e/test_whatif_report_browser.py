"""The simulate report as a browser lays it out (headless Chromium, 1,400 px wide): nothing wider
than the page, every node named at 12 nodes, the drill-down's per-plugin scores on screen for
each of the best nodes, at 3 policies x 12 nodes, 2 x 60 (the most nodes drawn one bar each) and
2 x 1,000.

No cluster: the snapshots are built here (nodes, bound pods), and the report is what
``simulate --report`` writes (report.html_report on simulate's result). A probe script, added to a
copy of the page (the report itself has none), writes its measurements into the DOM, which
``chromium --dump-dom`` prints. The reports and their full-page screenshots are left in /tmp
(report-12.html, report-12.png, report-1000.html, report-1000.png) for a person to look at."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from policy_scheduler.whatif.drilldown import DrillSpec
from policy_scheduler.whatif.report import html_report
from policy_scheduler.whatif.report_html import MAX_NODE_BARS
from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.snapshot import API_VERSION, from_dict
from policy_scheduler.whatif.world import World

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 1400
SHOTS = Path("/tmp")

# what the page measures of itself: its width, every element past the viewport's edges or with
# content wider than itself, the
# node names drawn as text on screen, and per drill-down table, per node column, the Score rows' text
PROBE = """<script>(() => {
  const vw = window.innerWidth, out = {vw, scrollWidth: document.documentElement.scrollWidth,
    height: document.documentElement.scrollHeight, overflowing: [], names: {}, drills: []};
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && (r.right > vw + 0.5 || r.left < -0.5))
      out.overflowing.push(el.tagName + '.' + (el.getAttribute('class') || '') + ' ' + Math.round(r.left) + '..' +
                           Math.round(r.right) + ' ' + (el.textContent || '').slice(0, 60));
    // content wider than its own box (a long message pushing out of its cell)
    if (el instanceof HTMLElement && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
      out.overflowing.push(el.tagName + '.' + (el.getAttribute('class') || '') + ' content ' + el.scrollWidth +
                           ' > ' + el.clientWidth + ' ' + (el.textContent || '').slice(0, 60));
  }
  out.overlaps = [];
  for (const svg of document.querySelectorAll('svg')) {
    let last = null;
    for (const t of svg.querySelectorAll('text.node')) {
      const r = t.getBoundingClientRect();
      if (r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= vw)
        out.names[t.firstChild.textContent] = (out.names[t.firstChild.textContent] || 0) + 1;
      if (last && r.left < last.right - 0.5 && r.top < last.bottom - 0.5 && last.top < r.bottom - 0.5)
        out.overlaps.push(t.firstChild.textContent);  // a name drawn over its neighbour's
      last = r;
    }
  }
  for (const d of document.querySelectorAll('details.drill')) {
    const table = d.querySelector('table.drill'), head = d.querySelector('summary').textContent;
    if (!table) { out.drills.push({head, nodes: []}); continue; }
    const nodes = [...table.querySelectorAll('th[data-node]')].map(th => th.getAttribute('data-node'));
    const scores = {};
    for (const tr of table.querySelectorAll('tr.score-row')) {
      const cells = [...tr.querySelectorAll('td')].slice(1);
      scores[tr.getAttribute('data-plugin')] = cells.map(c => {
        const r = c.getBoundingClientRect(), s = c.querySelector('.score');
        return (r.width > 20 && r.height > 10 && r.right <= vw && s) ? s.textContent : null;
      });
    }
    out.drills.push({head, nodes, scores});
  }
  document.body.setAttribute('data-probe', JSON.stringify(out));
})();</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:  # as test_whatif.py does: install it, never skip
        subprocess.run(["bash", str(ROOT / "hack" / "ensure-chromium.sh")], check=True, timeout=900)
        found = shutil.which("chromium")
    assert found, "hack/ensure-chromium.sh did not put chromium on PATH"
    return found


def policy(name: str) -> dict:
    return yaml.safe_load((ROOT / "policies" / f"{name}.yaml").read_text())


def node(name: str, cpu: str, zone: str) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "topology.kubernetes.io/zone": zone}},
            "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}}}


def pod(name: str, cpu: str, memory: str = "1Gi", node_name: str | None = None) -> dict:
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
         "spec": {"containers": [{"name": "c", "image": "app:1",
                                  "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}
    if node_name:
        p["spec"]["nodeName"] = node_name
        p["status"] = {"phase": "Running"}
    return p


def world(n: int, policies: list[str], long_names: bool):
    names = [f"ip-10-0-{i // 250}-{i % 250}.eu-west-1.compute.internal" if long_names else f"worker-{i:02d}"
             for i in range(n)]
    nodes = [node(nm, "8" if i % 3 else "16", f"zone-{'abc'[i % 3]}") for i, nm in enumerate(names)]
    bound = [pod(f"running-{i}", ["1", "2", "4"][i % 3], "4Gi", names[(i * 7) % n]) for i in range(n // 2)]
    snap = from_dict({"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": "2025-01-01T12:00:00Z",
                      "nodes": nodes, "pods": bound, "policies": [policy(p) for p in policies],
                      "namespaces": {"default": {}}})
    return snap, names


def render(tmp_path: Path, n: int, policies: list[str], pods: int) -> tuple[dict, object, list[str], str]:
    snap, names = world(n, policies, long_names=n > 100)
    wanted = ["default/web-0", "default/web-1", "default/giant-batch-job-that-fits-on-no-node-at-all"]
    batch = [pod(f"web-{i}", ["500m", "1", "2"][i % 3], "2Gi") for i in range(pods)]
    batch.append(pod("giant-batch-job-that-fits-on-no-node-at-all", "64"))
    sim = simulate(World(snap), policies, batch, drill=DrillSpec(pods=wanted, nodes=[names[-1]]),
                   source="an in-memory snapshot")
    page = html_report(sim)
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    report = SHOTS / f"report-{n}.html"  # left beside its screenshot
    report.write_text(page)
    probe = tmp_path / f"probe-{n}.html"
    probe.write_text(page.replace("</body>", PROBE + "</body>"))
    exe = chromium()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--hide-scrollbars", f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    dom = subprocess.run([exe, *flags, f"--window-size={WIDTH},1000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=180)
    m = re.search(r'data-probe="([^"]*)"', dom.stdout)
    assert m, f"chromium did not render the report: {dom.stderr[-2000:]}"
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                     .replace("&amp;", "&"))
    shot = SHOTS / f"report-{n}.png"
    subprocess.run([exe, *flags, f"--window-size={WIDTH},{min(got['height'] + 20, 16000)}", f"--screenshot={shot}",
                    report.as_uri()], capture_output=True, timeout=180)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\n{n} nodes, {len(policies)} policies: report {len(page)} bytes, page {got['scrollWidth']}x"
          f"{got['height']} px, screenshot {shot}")
    return got, sim, names, page


def check_layout_and_drill_down(got: dict, sim) -> None:
    assert got["vw"] == WIDTH
    assert got["scrollWidth"] <= WIDTH, got["scrollWidth"]
    assert got["overflowing"] == [], got["overflowing"][:10]
    assert got["overlaps"] == [], got["overlaps"][:10]
    drills = [d for run in sim.runs for d in run.drilldowns]
    assert len(got["drills"]) == len(drills) == 3 * len(sim.runs)
    for shown, dd in zip(got["drills"], drills):
        assert shown["head"].startswith(dd.pod)
        table = dd.table()
        assert shown["nodes"] == [r["node"] for r in table["rows"]]
        if dd.node is None:  # no node fits: Filter verdicts only
            assert shown["scores"] == {}
            continue
        top = [r for r in table["rows"] if r["total"] is not None]
        assert len(top) >= 5 and top[0]["chosen"] and top[0]["node"] == dd.node
        assert set(shown["scores"]) == set(dd.weights) and dd.weights
        for plugin, cells in shown["scores"].items():  # on screen, for every best node, the weighted score
            for i, r in enumerate(table["rows"]):
                if r["total"] is not None:
                    assert cells[i] == str(r["cells"][plugin]["weighted"]), (dd.pod, plugin, r["node"])


def test_three_policies_on_12_nodes(tmp_path):
    got, sim, names, _ = render(tmp_path, 12, ["default", "binpack", "spread"], 30)
    check_layout_and_drill_down(got, sim)
    # every node's name under its bars, in the cpu and the memory chart of each policy
    assert {nm: got["names"].get(nm, 0) for nm in names} == {nm: 2 * len(sim.runs) for nm in names}


def test_60_nodes_still_get_a_named_bar_each(tmp_path):
    """The most nodes drawn one bar each: every name under its bar, none over its neighbour."""
    got, sim, names, _ = render(tmp_path, MAX_NODE_BARS, ["default", "binpack"], 60)
    check_layout_and_drill_down(got, sim)
    assert {nm: got["names"].get(nm, 0) for nm in names} == {nm: 2 * len(sim.runs) for nm in names}


def test_two_policies_on_1000_nodes(tmp_path):
    got, sim, names, page = render(tmp_path, 1000, ["default", "binpack"], 400)
    assert len(names) > MAX_NODE_BARS
    check_layout_and_drill_down(got, sim)
    assert len(page.encode()) < 2_000_000
    assert got["names"] == {}  # no bar per node: the distributions
    assert page.count("least to most allocated") == 2 * len(sim.runs)
    for run in sim.runs:  # the most allocated node of each policy is named
        cpu = run.after.requested[:, 0] / run.after.allocatable[:, 0]
        assert run.after.names[int(cpu.argmax())] in page


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q", "-s"])
