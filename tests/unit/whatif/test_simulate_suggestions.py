"""simulate reports, for the pods it could not place, the verified changes that would place them
(remedies/): in PolicyRun.remedies, in the JSON failures (the remedies' versioned form) and in
the text report (the best one in a sentence). Applying it places the pod."""

from __future__ import annotations

import io

from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.remedies import apply_pod_patch
from policy_scheduler.whatif.report import html_report, write_text
from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.world import World
from support.whatif import DEFAULT, node, pod, snap


def _sim(**kw):
    nodes = [node(f"n{i}", cpu="4") for i in range(3)]
    pods = [pod("fits", cpu="1"), pod("huge", cpu="6"), pod("picky", cpu="100m", nodeSelector={"disk": "ssd"})]
    return simulate(World(snap(nodes, policies=(DEFAULT,))), ["default"], pods, **kw), pods


def test_unschedulable_pods_get_verified_suggestions():
    sim, pods = _sim()
    run = sim.runs[0]
    assert sorted(run.remedies) == ["default/huge", "default/picky"]
    huge = run.remedies["default/huge"]
    assert huge.best.change == "lower the cpu request to at most 4"  # "fits" took 1 cpu of one node
    assert huge.best.nodes_opened == 2
    # applied: the pod, as changed, fits the node named on the state the run ended with
    changed = apply_pod_patch(pods[1], huge.best.patch)
    assert parse_pod(changed).requests["cpu"] == 4000
    again = simulate(World(snap([node(f"n{i}", cpu="4") for i in range(3)], policies=(DEFAULT,))), ["default"],
                     [pods[0], changed, pods[2]])
    assert {r.pod: r.node for r in again.runs[0].results}["default/huge"] == huge.best.node
    doc = run.to_dict()
    failures = {f["pod"]: f for f in doc["failures"]}
    assert failures["default/picky"]["remedies"]["version"] == 1
    assert failures["default/picky"]["remedies"]["suggestions"][0]["kind"] == "DropNodeSelector"
    out = io.StringIO()
    write_text(sim, out)
    text = out.getvalue()
    assert "would place default/huge: lower the cpu request to at most 4: opens 2 nodes (" in text
    assert "would place default/picky: drop nodeSelector disk=ssd: opens 3 nodes (" in text


def test_suggestions_can_be_turned_off():
    sim, _ = _sim(suggestions=0)
    assert sim.runs[0].remedies == {}
    assert all("remedies" not in f for f in sim.runs[0].to_dict()["failures"])


def test_the_html_report_lists_each_searched_pods_suggestions_and_why_none():
    nodes = [node(f"n{i}", cpu="4") for i in range(3)]
    pods = [pod("fits", cpu="1"), pod("huge", cpu="6"), pod("picky", cpu="100m", nodeSelector={"disk": "ssd"}),
            pod("<b>odd</b>", cpu="100m", tolerations="not a list")]
    sim = simulate(World(snap(nodes, policies=(DEFAULT,))), ["default"], pods)
    html = html_report(sim)
    section = html.split("default: what would place them", 1)[1].split("</table>", 1)[0]
    assert "2 of the 3 pods searched have a suggestion" in html
    huge = sim.runs[0].remedies["default/huge"].best
    assert f"<td>LowerRequest</td><td>{huge.change}</td><td class=\"num\">{huge.nodes_opened}</td>" \
           f"<td>{huge.node} ({huge.score})</td>" in section
    assert "<td>DropNodeSelector</td><td>drop nodeSelector disk=ssd</td>" in section
    assert "<b>odd</b>" not in html  # pod names are escaped; a pod without a suggestion says why
    assert "<tr><td>default/&lt;b&gt;odd&lt;/b&gt;</td><td>-</td><td class=\"small\">its spec cannot be read: " in section
