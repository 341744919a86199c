"""NodePorts: host-port conflicts (0.0.0.0 vs specific IPs, protocols) and sidecar ports."""

import numpy as np
from support import kit
import pytest

from policy_scheduler.framework.interface import CycleState, Handle
from policy_scheduler.framework.model.nodetable import NodeTable
from policy_scheduler.framework.model.podinfo import parse_pod
from policy_scheduler.framework.status import Code
from policy_scheduler.plugins.node_ports import ERR_REASON, PLUGIN, wanted_ports
from policy_scheduler.framework.events import ActionType, Resource
from support.kit import QUEUE, SKIP, changed, hint, node, registered


def port(host_port, host_ip=None, protocol=None, container_port=8080):
    p = {"containerPort": container_port}
    if host_port is not None:
        p["hostPort"] = host_port
    if host_ip is not None:
        p["hostIP"] = host_ip
    if protocol is not None:
        p["protocol"] = protocol
    return p


def make_pod(name, ports=(), init_containers=()):
    spec = {"containers": [{"name": "c", "ports": list(ports)}]}
    if init_containers:
        spec["initContainers"] = list(init_containers)
    return parse_pod({"metadata": {"name": name, "namespace": "default"}, "spec": spec})


def table(*node_ports):
    """One node per entry; each node runs one pod using the given host ports."""
    t = NodeTable()
    for i, ports in enumerate(node_ports):
        t.upsert_node({"metadata": {"name": f"n{i}"}, "status": {"allocatable": {"cpu": "4", "pods": "10"}}})
        if ports:
            t.add_pod(make_pod(f"existing-{i}", ports), f"n{i}")
    return t


def run(nodes, pod, rows=None):
    pl, state = PLUGIN(None, Handle()), CycleState()
    status, names = pl.pre_filter(state, pod, nodes)
    assert names is None
    if status.is_skip:
        return None
    assert status.is_success
    return pl.filter(state, pod, nodes, np.arange(nodes.n) if rows is None else np.asarray(rows))


@pytest.mark.parametrize("existing, wanted, conflict", [
    pytest.param([port(80)], [port(80)], True, id="same-default-ip"),
    pytest.param([port(80, "10.0.0.1")], [port(80)], True, id="wanted-any-ip-vs-specific"),
    pytest.param([port(80)], [port(80, "10.0.0.1")], True, id="wanted-specific-vs-any-ip"),
    pytest.param([port(80, "0.0.0.0")], [port(80, "10.0.0.1")], True, id="explicit-any-ip"),
    pytest.param([port(80, "10.0.0.1")], [port(80, "10.0.0.1")], True, id="same-specific-ip"),
    pytest.param([port(80, "10.0.0.1")], [port(80, "10.0.0.2")], False, id="different-specific-ips"),
    pytest.param([port(80, protocol="UDP")], [port(80)], False, id="different-protocol"),
    pytest.param([port(80, protocol="UDP")], [port(80, protocol="UDP")], True, id="same-udp"),
    pytest.param([port(80, "10.0.0.1", "SCTP")], [port(80, protocol="SCTP")], True, id="sctp-any-ip"),
    pytest.param([port(80, protocol="TCP")], [port(80, "127.0.0.1")], True, id="protocol-defaults-to-tcp"),
    pytest.param([port(80)], [port(81)], False, id="different-port"),
    pytest.param([port(80, "::1")], [port(80, "::2")], False, id="ipv6-specific-ips-differ"),
    pytest.param([port(80, "::")], [port(80, "10.0.0.1")], False, id="ipv6-unspecified-is-not-bind-all"),
    pytest.param([], [port(80)], False, id="free-node"),
    pytest.param([port(80), port(443)], [port(8443), port(443, "10.0.0.9")], True, id="any-wanted-port-conflicts"),
])
def test_filter(existing, wanted, conflict):
    res = run(table(existing), make_pod("new", wanted))
    assert res.passed.tolist() == [not conflict]
    if conflict:
        assert res.code == Code.UNSCHEDULABLE
        assert [(r, m.tolist()) for r, m in res.reasons] == [(ERR_REASON, [True])]


def test_row_alignment_over_several_nodes():
    nodes = table([port(80)], [], [port(80, "10.0.0.1")], [port(80, protocol="UDP")])
    res = run(nodes, make_pod("new", [port(80, "10.0.0.2")]), rows=[3, 2, 1, 0])
    # n3 UDP: free; n2 10.0.0.1: other IP, free; n1: empty; n0 0.0.0.0: conflict
    assert res.passed.tolist() == [True, True, True, False]


def test_ports_freed_when_the_pod_leaves():
    nodes = table([port(80)])
    assert run(nodes, make_pod("new", [port(80)])).passed.tolist() == [False]
    nodes.remove_pod("default/existing-0")
    assert run(nodes, make_pod("new", [port(80)])).passed.tolist() == [True]


@pytest.mark.parametrize("pod, expected", [
    pytest.param(make_pod("p"), (), id="no-ports"),
    pytest.param(make_pod("p", [port(None), port(0)]), (), id="container-ports-without-host-port"),
    pytest.param(make_pod("p", [port(80)]), (("0.0.0.0", "TCP", 80),), id="defaults"),
    pytest.param(make_pod("p", [port(53, "10.1.1.1", "UDP")]), (("10.1.1.1", "UDP", 53),), id="explicit"),
    pytest.param(make_pod("p", [port(80)], init_containers=[
        {"name": "sidecar", "restartPolicy": "Always", "ports": [port(9000)]},
        {"name": "init", "ports": [port(9001)]}]),
        (("0.0.0.0", "TCP", 9000), ("0.0.0.0", "TCP", 80)), id="sidecar-ports-first-plain-init-ignored"),
])
def test_wanted_ports(pod, expected):
    assert wanted_ports(pod) == expected


@pytest.mark.parametrize("pod", [
    pytest.param(make_pod("p"), id="no-ports"),
    pytest.param(make_pod("p", [port(0)]), id="host-port-zero"),
    pytest.param(make_pod("p", init_containers=[{"name": "init", "ports": [port(80)]}]), id="plain-init-container"),
])
def test_pre_filter_skips_pods_without_host_ports(pod):
    assert run(table([port(80)]), pod) is None


def test_sidecar_host_port_conflicts():
    pod = make_pod("p", init_containers=[{"name": "proxy", "restartPolicy": "Always", "ports": [port(80)]}])
    assert run(table([port(80)], []), pod).passed.tolist() == [False, True]


# ------------------------------------------------------------------ events and queueing hints
A, T = ActionType, Resource


def test_events_to_register():
    pl = PLUGIN(None, Handle())
    assert registered(pl) == [(T.ASSIGNED_POD, A.DELETE), (T.NODE, A.ADD)]
    # upstream: Node/Add without a hint (a new node has every port free)
    assert hint(pl, T.NODE, A.ADD, make_pod("p", [port(80)]), None, node("x")) == QUEUE


def bound(pod, node_name="n0", nominated=""):
    return changed(pod, node_name=node_name, nominated_node_name=nominated)


# upstream isSchedulableAfterPodDeleted: Queue when the deleted pod was bound or nominated and held a
# host port that conflicts with one the pod wants (HostPortInfo.CheckConflict).
@pytest.mark.parametrize("wants, deleted, want", [
    ([port(80)], bound(make_pod("d", [port(80)])), QUEUE),
    ([port(80)], bound(make_pod("d", [port(80)]), node_name="", nominated="n0"), QUEUE),  # nominated
    ([port(80)], bound(make_pod("d", [port(80)]), node_name=""), SKIP),  # never placed: held nothing
    ([port(80)], bound(make_pod("d", [port(81)])), SKIP),  # another port
    ([port(80)], bound(make_pod("d", [port(80, protocol="UDP")])), SKIP),  # another protocol
    ([port(80)], bound(make_pod("d")), SKIP),  # no host port at all
    ([port(80, host_ip="10.0.0.1")], bound(make_pod("d", [port(80)])), QUEUE),  # 0.0.0.0 clashes with any IP
    ([port(80, host_ip="10.0.0.1")], bound(make_pod("d", [port(80, host_ip="10.0.0.2")])), SKIP),
    ([port(80)], bound(make_pod("d", init_containers=[
        {"name": "s", "restartPolicy": "Always", "ports": [port(80)]}])), QUEUE),  # a sidecar's port
])
def test_pod_deleted_hint(wants, deleted, want):
    pod = make_pod("p", wants)
    assert hint(PLUGIN(None, Handle()), T.ASSIGNED_POD, A.DELETE, pod, deleted, None) == want


# ------------------------------------------------------------------ args
@pytest.mark.parametrize("args", [{"x": 1}, {"weight": 2}])
def test_takes_no_args(args):
    kit.assert_takes_no_args(PLUGIN.NAME, args)
