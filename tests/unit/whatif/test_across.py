"""whatif/across.py and `simulate` with several snapshots: the same pods on each cluster, ranked
per policy; and the `clusters` command's capacity of a snapshot (commands/clusters.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from policy_scheduler import cli
from policy_scheduler.commands.clusters import _probe, cluster_capacity
from policy_scheduler.whatif import across
from policy_scheduler.whatif.simulate import simulate
from policy_scheduler.whatif.world import World
from support.whatif import BINPACK, DEFAULT, ROOT, node, pod, snap


def bound(name, node_name, cpu, memory="1Gi"):
    p = pod(name, cpu, memory)
    p["spec"]["nodeName"] = node_name
    return p


def pods(n, cpu="1"):
    return [pod(f"p{i}", cpu, "1Gi") for i in range(n)]


@pytest.fixture
def three(tmp_path):
    """small: 2 nodes of 4 cpu (holds 8 one-cpu pods, not 10); big: 4 of 4 cpu, a quarter full
    (holds 12); roomy: 4 empty nodes of 8 cpu; and the same 10 pods for all."""
    worlds = {
        "small": snap([node("s0"), node("s1")]),
        "big": snap([node(f"b{i}") for i in range(4)], [bound(f"f{i}", f"b{i}", "1") for i in range(4)]),
        "roomy": snap([node(f"r{i}", cpu="8", memory="32Gi") for i in range(4)], policies=(DEFAULT,)),
    }
    for name, s in worlds.items():
        (tmp_path / f"{name}.json").write_text(s.dumps())
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods(10)))
    return tmp_path


def test_clusters_rank_by_pods_placed_then_by_score():
    runs = []
    for name, s in (("small", snap([node("s0"), node("s1")])),
                    ("roomy", snap([node(f"r{i}", cpu="8", memory="32Gi") for i in range(4)]))):
        runs.append(across.ClusterRun(name, name, simulate(World(s), ["default", "binpack"], pods(10))))
    for policy in ("default", "binpack"):
        ranked = across.rank(runs, policy)
        assert [s.cluster for s in ranked] == ["roomy", "small"]
        assert ranked[0].placed == 10 and ranked[1].placed == 8 and ranked[0].pods == 10
    # two clusters that both hold everything: the policy's mean node score decides (LeastAllocated
    # prefers the emptier cluster; binpack the fuller one)
    half = snap([node(f"h{i}", cpu="8", memory="32Gi") for i in range(4)],
                [bound(f"f{i}", f"h{i}", "4", "8Gi") for i in range(4)])
    runs[1:] = [across.ClusterRun("roomy", "roomy", runs[1].sim),
                across.ClusterRun("half", "half", simulate(World(half), ["default", "binpack"], pods(10)))]
    assert [s.cluster for s in across.rank(runs, "default")] == ["roomy", "half", "small"]
    assert [s.cluster for s in across.rank(runs, "binpack")] == ["half", "roomy", "small"]


def test_simulate_with_several_snapshots_ranks_them(three, capsys):
    args = ["simulate", "--pods", str(three / "pods.yaml"), "--policy", "default", "--policy", "binpack"]
    for name in ("small", "big", "roomy"):
        args += ["--snapshot", str(three / f"{name}.json")]
    assert cli.main([*args, "--json", "--report", str(three / "r.html")]) == 0
    out = capsys.readouterr()
    d = json.loads(out.out)
    assert d["kind"] == "ClusterRanking" and d["pods"] == 10
    ranked = [s["cluster"].rsplit("/", 1)[-1] for s in d["ranking"]["default"]]
    assert ranked == ["roomy.json", "big.json", "small.json"]
    first = d["ranking"]["default"][0]
    assert first["placed"] == 10 and first["fitsWhole"] and first["preempted"] == 0
    assert [s["placed"] for s in d["ranking"]["default"]] == [10, 10, 8]
    # the roomy snapshot has no binpack policy: not ranked there, and said why
    assert [s["cluster"].rsplit("/", 1)[-1] for s in d["ranking"]["binpack"]] == ["big.json", "small.json"]
    roomy = next(c for c in d["clusters"] if c["name"].endswith("roomy.json"))
    assert "no SchedulingPolicy named 'binpack'" in roomy["skipped"]["binpack"]
    html = (three / "r.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "across clusters" in html and "roomy.json" in html
    # text: one table per policy
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "policy default" in text and "policy binpack" in text
    assert "10/10 (all)" in text and "8/10" in text and "not ranked: no SchedulingPolicy named 'binpack'" in text


@pytest.mark.parametrize("extra, needle", [
    (["--pending"], "--pending reads one cluster's pending pods"),
    (["--explain"], "take one cluster"),
])
def test_across_clusters_refuses_one_cluster_flags(three, capsys, extra, needle):
    args = ["simulate", "--snapshot", str(three / "small.json"), "--snapshot", str(three / "big.json"), *extra]
    if "--pending" not in extra:
        args += ["--pods", str(three / "pods.yaml")]
    assert cli.main(args) == 2
    assert needle in capsys.readouterr().err


def test_the_same_cluster_twice_is_refused(three, capsys):
    f = str(three / "small.json")
    assert cli.main(["simulate", "--snapshot", f, "--snapshot", f, "--pods", str(three / "pods.yaml")]) == 2
    assert "named twice" in capsys.readouterr().err


def test_a_context_that_cannot_be_read_is_listed_and_the_rest_ranked(three, tmp_path, capsys):
    kc = tmp_path / "kc.yaml"
    kc.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "gone",
                                  "clusters": [{"name": "gone", "cluster": {"server": "https://127.0.0.1:9"}}],
                                  "users": [{"name": "u", "user": {"token": "t"}}],
                                  "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}]}))
    code = cli.main(["simulate", "--kubeconfig", str(kc), "--context", "gone", "--snapshot", str(three / "big.json"),
                     "--pods", str(three / "pods.yaml"), "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    gone = next(c for c in d["clusters"] if c["name"] == "gone")
    assert gone["error"].startswith("cannot read the cluster")
    assert [s["cluster"] for s in d["ranking"]["default"]] == [str(three / "big.json")]


def test_cluster_capacity_counts_free_room_and_probes_each_policy():
    s = snap([node("a", cpu="4", memory="8Gi"), node("b", cpu="2", memory="8Gi")], [bound("f", "a", "1")])
    cap = cluster_capacity(s, _probe("1", "1Gi", 20))
    assert cap["nodes"] == 2 and cap["schedulableNodes"] == 2
    assert cap["free"] == {"cpu": "5", "memory": "15Gi", "pods": 219}
    assert set(cap["policies"]) == {"default", "binpack"}
    for p in cap["policies"].values():
        assert p["probePods"] == 5 and p["of"] == 20 and p["nodes"] == 2
    # the sixth probe's FailedScheduling message (binpack has no DefaultPreemption, default does)
    assert cap["policies"]["binpack"]["stoppedBy"] == "0/2 nodes are available: 2 Insufficient cpu."
    assert cap["policies"]["default"]["stoppedBy"] == (
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption "
        "victims found for incoming pod.")


def test_clusters_command_refuses_bad_probes(capsys):
    assert cli.main(["clusters", "--probe-cpu", "lots"]) == 2
    assert "--probe-cpu 'lots'" in capsys.readouterr().err
    assert cli.main(["clusters", "--probe-pods", "-1"]) == 2


def test_binpack_policy_file_is_added_to_every_cluster(three, capsys):
    code = cli.main(["simulate", "--snapshot", str(three / "roomy.json"), "--snapshot", str(three / "small.json"),
                     "--pods", str(three / "pods.yaml"), "--policy", str(ROOT / "policies" / "binpack.yaml"),
                     "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert [s["placed"] for s in d["ranking"]["binpack"]] == [10, 8]
    assert BINPACK["metadata"]["name"] == "binpack"
