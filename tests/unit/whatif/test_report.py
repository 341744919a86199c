"""whatif/report.py: ``simulate --explain``'s table writes everything to the stream it is given."""

from __future__ import annotations

import io
import re
from pathlib import Path

import yaml

from policy_scheduler.whatif.report import write_explain
from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.snapshot import API_VERSION, from_dict
from policy_scheduler.whatif.world import World

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())


def node(name):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def pod(name, cpu):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "app:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}


def test_write_explain_writes_the_decisions_to_out_and_nothing_to_stdout(capsys):
    snap = from_dict({"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": "2025-01-01T12:00:00Z",
                      "nodes": [node("a"), node("b")], "policies": [DEFAULT], "namespaces": {"default": {}}})
    sim = simulate(World(snap), ["default"], [pod("one", "500m"), pod("huge", "64")], keep_decisions=True)
    capsys.readouterr()
    out = io.StringIO()
    write_explain(sim.runs[0], out)
    assert capsys.readouterr() == ("", "")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("pod default/one under policy default: node ")
    # the decision record, as `policy-scheduler explain` prints it
    assert "  policy:    default" in lines
    assert any(x.startswith("  node:      ") and x.endswith("(decided simulated)") for x in lines)
    assert "  nodes:     2 in cluster, 2 evaluated, 2 feasible" in lines
    assert any(x.startswith("    NODE") and "TOTAL" in x and "NodeResourcesFit" in x for x in lines)
    # the pod no node fits: its FailedScheduling message and the filter histogram
    i = lines.index("pod default/huge under policy default: node (none)")
    assert lines[i + 1].startswith("  not scheduled: 0/2 nodes are available: 2 Insufficient cpu.")
    assert lines[i + 2:i + 4] == ["  filtered out:", "        2  Insufficient cpu"]


# ------------------------------------------------------------------------------------ the HTML report

def _sim(n_nodes, policies=("default",), pods=None, **kw):
    docs = []
    for name in policies:
        d = yaml.safe_load(yaml.safe_dump(DEFAULT))
        d["metadata"]["name"] = name
        docs.append(d)
    snap = from_dict({"apiVersion": API_VERSION, "kind": "ClusterSnapshot", "takenAt": "2025-01-01T12:00:00Z",
                      "nodes": [node(f"node-{i:04d}") for i in range(n_nodes)], "policies": docs,
                      "namespaces": {"default": {}},
                      "pods": [{**pod("old", "1"), "spec": {**pod("old", "1")["spec"], "nodeName": "node-0000"}}]})
    return simulate(World(snap), list(policies), pods or [pod(f"p{i}", "500m") for i in range(6)] + [pod("huge", "64")],
                    **kw)


def test_the_page_is_self_contained_and_names_every_node_under_its_bars():
    from policy_scheduler.whatif.report import html_report

    page = html_report(_sim(12, ("a", "b", "c")))
    assert "<script" not in page and "<link" not in page and "src=" not in page
    names = re.findall(r'<text class="node"[^>]*>([^<]*)<title>', page)
    assert sorted(set(names)) == [f"node-{i:04d}" for i in range(12)]
    assert len(names) == 12 * 2 * 3  # cpu and memory, per policy
    # one row per policy whatever their number: each policy's charts are one panel of the rows
    rows = page[page.index('id="allocation"'):page.index('id="zones"')]
    assert rows.count('<div class="panel"><h3>') == 3 and 'class="rows"' in rows


def test_nodes_receiving_pods_are_beside_nodes_used():
    from policy_scheduler.whatif.report import html_report

    sim = _sim(12)
    s = sim.runs[0].summary()
    received = {r.node for r in sim.runs[0].placed}
    assert s["nodesReceivingPods"] == len(received) < s["nodesUsed"] == len(received | {"node-0000"})
    page = html_report(sim)
    head = page[page.index('id="summary"'):page.index("</table>", page.index('id="summary"'))]
    assert "<th class=\"num\">nodes receiving pods</th>" in head
    assert f"<td class=\"num\">{s['nodesUsed']} (was 1)</td><td class=\"num\">{s['nodesReceivingPods']}</td>" in head


def test_past_60_nodes_the_allocation_is_a_sorted_distribution():
    from policy_scheduler.whatif.report import html_report
    from policy_scheduler.whatif.report_html import MAX_NODE_BARS

    sim = _sim(MAX_NODE_BARS + 1, ("a", "b"), pods=[pod(f"p{i}", "2") for i in range(30)])
    page = html_report(sim)
    assert 'class="node"' not in page  # no bar (and name) per node
    assert page.count("least to most allocated</text>") == 4  # cpu and memory, per policy
    assert page.count("<polygon") == 4 and "median" in page
    a = sim.runs[0].after
    cpu = a.requested[:, 0] / a.allocatable[:, 0]
    most = a.names[int(cpu.argmax())]
    assert f"<td>{most}</td><td class=\"num\">{cpu.max() * 100:.0f}%</td>" in page  # named in the table


def test_long_messages_wrap_in_a_fixed_table_and_the_drill_down_is_there():
    from policy_scheduler.whatif.drilldown import DrillSpec
    from policy_scheduler.whatif.report import html_report
    from policy_scheduler.whatif.report_html import CSS

    page = html_report(_sim(12, drill=DrillSpec(pods=["default/p0", "default/huge"])))
    assert "overflow-wrap:anywhere" in CSS and "table-layout:fixed" in CSS
    i = page.index("FailedScheduling message")
    assert page.rfind('<table class="fixed">', 0, i) > page.rfind("</table>", 0, i)
    assert 'id="drill-down"' in page and 'href="#drill-down"' in page
    assert page.count('<details open class="drill">') == 2
    assert "default/huge: no node" in page and "&#10007; Insufficient cpu" in page


def test_the_terminal_table_says_nodes_receiving_pods_beside_nodes_used():
    from policy_scheduler.whatif.report import write_text

    sim = _sim(12)
    out = io.StringIO()
    write_text(sim, out)
    lines = out.getvalue().splitlines()
    head = next(x for x in lines if x.startswith("POLICY"))
    assert "NODES USED  RECEIVING PODS  IMBALANCE" in head
    s = sim.runs[0].summary()
    row = next(x for x in lines if x.startswith("default "))
    used, got = head.index("NODES USED"), head.index("RECEIVING PODS")
    assert row[used:got].strip() == f"{s['nodesUsed']} (was 1)"
    assert row[got:head.index("IMBALANCE")].strip() == str(s["nodesReceivingPods"])
