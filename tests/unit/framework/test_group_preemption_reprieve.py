"""Group preemption's reprieve (framework/group_preemption.py): a victim on nodes that hold no
proposed member is spared without running the Filters again when every PreFilter and Filter of
the policy is node-local for the pods involved; the victims, nominations and messages are those
of the full check."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from types import SimpleNamespace

import yaml

from policy_scheduler.serve import build_engine
from policy_scheduler.cluster.sync import NATIVE_PODGROUPS
from policy_scheduler.framework import group_preemption as gp
from policy_scheduler.framework.model.podinfo import parse_pod
from support import gangs as G
from support.fakeclient import FakeClient

DEFAULT = yaml.safe_load((Path(__file__).resolve().parents[3] / "policies" / "default.yaml").read_text())
PLUGINS = DEFAULT["spec"]["plugins"]


def _pod(name, cpu, prio, group=None, node="", anti=False):
    body = G.pod_body(name, group, cpu=cpu, node=node, priority=prio, labels={"app": "x"})
    if anti:
        body["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "other"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    return body


def _run(monkeypatch, local: bool, anti: bool = False):
    """8 nodes of 4 cpu, each full of 1-cpu pods of priority 10; a group of 3 pods of 3 cpu
    (priority 100). Returns (victims deleted, nominations, condition message, _fits calls)."""
    calls = []
    real_fits = gp._fits

    def counting(*a):
        calls.append(1)
        return real_fits(*a)

    monkeypatch.setattr(gp, "_fits", counting)
    if not local:
        monkeypatch.setattr(gp, "_node_local", lambda *a: False)

    async def go():
        e = build_engine(FakeClient(), rng=random.Random(7))  # G.engine, seeded: ties between nodes alike
        e.on_policy("ADDED", {"metadata": {"name": "default", "generation": 1}, "spec": {"plugins": PLUGINS}})
        for i in range(8):
            e.on_node("ADDED", G.node(f"n{i}", cpu="4"))
        for i in range(8):
            for j in range(4):
                e.on_pod("ADDED", _pod(f"low-n{i}-{j}", "1", 10, node=f"n{i}", anti=anti and j == 0))
        e.route(NATIVE_PODGROUPS)("ADDED", G.npg("g", 3, priority=100))
        for i in range(3):
            e.on_pod("ADDED", _pod(f"g-{i}", "3", 100, group="g"))
        e.schedule(e.queue.pop())
        await G.drain(e, 10)
        for _ in range(20):
            await asyncio.sleep(0)
        noms = sorted((c.path.split("/")[-2], c.body["status"]["nominatedNodeName"])
                      for c in e.client.calls_of("strategic_patch")
                      if (c.body.get("status") or {}).get("nominatedNodeName"))
        out = G.deletes(e), noms, G.cond_message(e), len(calls)
        await e.stop()
        return out

    return asyncio.run(go())


def test_the_shortcut_picks_the_victims_the_full_check_picks_with_far_fewer_filter_runs(monkeypatch):
    full = _run(monkeypatch, local=False)
    monkeypatch.undo()
    fast = _run(monkeypatch, local=True)
    assert fast[:3] == full[:3]
    assert len(fast[0]) == 9  # 3 per member's node (then tried again: ongoing preemption)
    # one check per victim before; now only the 12 on the members' nodes
    assert (full[3], fast[3]) == (32, 12)


def test_a_victim_with_required_anti_affinity_turns_the_shortcut_off(monkeypatch):
    fast = _run(monkeypatch, local=True, anti=True)
    monkeypatch.undo()
    full = _run(monkeypatch, local=False, anti=True)
    assert fast == full  # the same checks ran: no shortcut


def _chain(*names, hard_defaults=()):
    plugins = {n: SimpleNamespace(NAME=n, _default_hard=hard_defaults) for n in names}
    return SimpleNamespace(pre_filter=list(plugins.values()), filter=list(plugins.values()), plugin=plugins.get)


def test_node_local_per_plugin():
    plain = parse_pod(G.pod_body("p", cpu="1"))
    anti = parse_pod(_pod("a", "1", 0, anti=True))
    claim = parse_pod({**G.pod_body("c"), "spec": {**G.pod_body("c")["spec"],
                                                   "resourceClaims": [{"name": "r", "resourceClaimName": "x"}]}})
    v = [gp.Victim([plain], 0, 1, plain.key)]
    assert gp._node_local(_chain("NodeResourcesFit", "NodePorts", "TaintToleration"), [plain], v)
    assert not gp._node_local(_chain("LoadAware"), [plain], v)  # unknown: never
    assert gp._node_local(_chain("InterPodAffinity"), [plain], v)
    assert not gp._node_local(_chain("InterPodAffinity"), [anti], v)
    assert not gp._node_local(_chain("InterPodAffinity"), [plain], [gp.Victim([anti], 0, 1, anti.key)])
    assert gp._node_local(_chain("PodTopologySpread"), [plain], v)
    assert not gp._node_local(_chain("PodTopologySpread", hard_defaults=("c",)), [plain], v)
    assert gp._node_local(_chain("DynamicResources"), [plain], v)
    assert not gp._node_local(_chain("DynamicResources"), [claim], v)


def test_a_plugin_may_say_it_is_node_local_coscheduling_for_pods_outside_its_groups():
    from policy_scheduler.plugins.podgroups.coscheduling import Coscheduling

    plain = parse_pod(G.pod_body("p", cpu="1"))
    labelled = parse_pod(G.pod_body("q", cpu="1", labels={"scheduling.x-k8s.io/pod-group": "pg"}))
    v = [gp.Victim([plain], 0, 1, plain.key)]
    cos = SimpleNamespace(NAME="Coscheduling", node_local_for=lambda ms: Coscheduling.node_local_for(None, ms))
    chain = SimpleNamespace(pre_filter=[cos], filter=[], plugin=lambda n: cos)
    assert gp._node_local(chain, [plain], v)
    assert not gp._node_local(chain, [plain, labelled], v)


def test_the_table_holds_what_it_held_before_the_group_post_filter(monkeypatch):
    """The victims taken off for the dry run (in one step), those spared by the shortcut (put back
    at the end) and those kept all go back: the counts and the pods of every node are as before."""
    seen = []
    real = gp.pod_group_post_filter

    def state(nodes):
        return (nodes.requested[:nodes.n].tolist(), nodes.nonzero[:nodes.n].tolist(),
                [sorted(nodes.pods[r]) for r in range(nodes.n)], dict(nodes.pod_node), set(nodes.assumed))

    def checking(cycle, *a, **k):
        before = state(cycle.nodes)
        out = real(cycle, *a, **k)
        seen.append((before, state(cycle.nodes), len(out.victims)))
        return out

    from policy_scheduler.plugins import default_preemption
    monkeypatch.setattr(default_preemption, "pod_group_post_filter", checking)
    deleted = _run(monkeypatch, local=True)[0]
    assert seen and seen[0][2] == len(deleted) == 9
    for before, after, _ in seen:
        assert after == before
