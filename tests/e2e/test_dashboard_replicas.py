"""The Grafana dashboard with two replicas tells the truth: two operator processes with leader
election on the local control plane, a real Prometheus scraping both every second (hack/render_dashboard's
Prometheus), nodes, a policy, a policy that is not Ready and a burst of pods; then every *stat*
panel's own expression, read from docs/grafana-dashboard.json with the template variables substituted
as hack/render_dashboard.py does, through Prometheus's /api/v1/query, against the truth read from
the API server and the replicas: before and after the leader hands over its Lease. Every other
panel's expressions are run too (Prometheus must accept them)."""

from __future__ import annotations

import time

import localcluster
import render_dashboard as rd
from policy_scheduler import __version__
from conftest import OperatorProcess
from helpers import GROUP, PLURAL, VERSION, apply_policy, pod, ready_condition, wait_bound, wait_for

SCHED = "dash-scheduler"
RATE_WINDOW = "4s"


def stat_panels(dash: dict) -> dict[str, str]:
    return {p["title"]: p["targets"][0]["expr"] for p in rd.panels(dash) if p["type"] == "stat"}


class Board:
    """The dashboard's expressions evaluated by a Prometheus that scrapes the replicas."""

    def __init__(self, prom: rd.Prometheus, dash: dict) -> None:
        self.prom, self.dash = prom, dash
        self.stats = stat_panels(dash)
        self.range_start = time.time()

    def variables(self) -> dict[str, str]:
        return {"job": rd.JOB, "profile": ".*", "__rate_interval": RATE_WINDOW, "__interval": "1s",
                "__range": f"{max(1, round(time.time() - self.range_start))}s"}

    def query(self, expr: str) -> list:
        return self.prom.query(rd.substitute(expr, self.variables()))

    def stat(self, title: str) -> float | dict[str, float] | None:
        """A one-series stat's value (None: no data); a stat with a legend, its values by legend."""
        panel = next(p for p in rd.panels(self.dash) if p.get("title") == title)
        got = self.query(self.stats[title])
        fmt = panel["targets"][0].get("legendFormat") or ""
        if fmt:
            return {rd.legend(fmt, s["metric"]): float(s["value"][1]) for s in got}
        assert len(got) <= 1, f"{title}: {len(got)} series: {got}"
        return float(got[0]["value"][1]) if got else None


def not_ready_policies(policies) -> int:
    items = policies.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    return sum(1 for p in items if (p.get("spec") or {}).get("schedulerName") == SCHED
               and any(c["type"] == "Ready" and c["status"] == "False"
                       for c in (p.get("status") or {}).get("conditions") or []))


def test_every_stat_panel_equals_the_truth_with_two_replicas(cluster, api, core, namespace, nodes, crd, policies,
                                                             tmp_path):
    dash = rd.load_dashboard()
    assert rd.check_dashboard(dash) == []
    apply_policy(policies, SCHED, [{"name": "NodeResourcesFit"}], schedulerName=SCHED)
    apply_policy(policies, "dash-broken", [{"name": "NoSuchPlugin"}], schedulerName=SCHED)
    for i in range(6):
        nodes(f"dash-{i}", cpu="4", memory="16Gi", labels={"e2e": "dash"})
    mports = [localcluster.free_port(), localcluster.free_port()]
    reps = [OperatorProcess(cluster, SCHED, log_name=f"{SCHED}-{i}", extra=[
        "--default-policy", SCHED, "--metrics-port", str(mports[i]), "--metrics-address", "127.0.0.1"])
        for i in range(2)]
    prom = None
    try:
        for r in reps:
            r.start(wait=False)
        prom = rd.Prometheus([f"127.0.0.1:{p}" for p in mports], tmp_path / "prometheus.log")
        for r in reps:
            r.wait_synced()
        wait_for(lambda: sum("successfully acquired lease" in r.log() for r in reps) == 1, 30, what="one leader")
        leader, standby = reps if "successfully acquired lease" in reps[0].log() else reps[::-1]
        lead_port, standby_port = (mports if leader is reps[0] else mports[::-1])
        wait_for(lambda: "is held by" in standby.log(), 15, what="the standby to see the leader")
        wait_for(lambda: ready_condition(policies, "dash-broken") and
                 ready_condition(policies, "dash-broken")["status"] == "False", 30, what="dash-broken Ready=False")

        # 60 pods that fit, 4 that never fit (64 cpu), 2 held by a scheduling gate
        fit = [f"fit-{i:02d}" for i in range(60)]
        for n in fit:
            core.create_namespaced_pod(namespace, pod(n, namespace, scheduler=SCHED, nodeSelector={"e2e": "dash"}))
        for i in range(4):
            core.create_namespaced_pod(namespace, pod(f"huge-{i}", namespace, cpu="64", scheduler=SCHED))
        for i in range(2):
            core.create_namespaced_pod(namespace, pod(f"gated-{i}", namespace, scheduler=SCHED,
                                                      schedulingGates=[{"name": "example.com/hold"}]))
        wait_bound(core, namespace, fit, 60)
        board = Board(prom, dash)

        def truth(leader_port: int, ports: list[int]) -> dict:
            n_nodes = len(core.list_node().items)
            assert n_nodes >= 6
            assert not_ready_policies(policies) == 1
            mine = core.list_namespaced_pod(namespace).items
            unbound = [p for p in mine if not p.spec.node_name]
            assert len(unbound) == 6
            want = {
                "Scheduled / s": 0.0,  # every pod that can be bound is, and the rate window has passed
                "Pending pods": 6.0,  # 4 unschedulable + 2 gated: every unbound pod
                "Unschedulable pods": 4.0,
                "Nodes": float(n_nodes),
                "Policies not Ready": float(not_ready_policies(policies)),
                "Binding errors (range)": 0.0,
                "Leaders": 1.0,
                "Replicas up": float(len(ports)),
                "Leader by replica": {f"127.0.0.1:{p}": float(p == leader_port) for p in ports},
            }
            if "Version by replica" in board.stats:  # policy_scheduler_build_info
                want["Version by replica"] = {f"127.0.0.1:{p} {__version__}": 1.0 for p in ports}
            return want

        def settle(want: dict, timeout: float, extra: dict | None = None) -> dict:
            """Wait until every stat shows its truth at once; fail with the last values."""
            want = {**want, **(extra or {})}
            missing = set(board.stats) - set(want)
            assert not missing, f"stat panels without a truth in this test: {missing}"
            last: dict = {}

            def all_equal() -> bool:
                last.clear()
                last.update({t: board.stat(t) for t in board.stats})
                return last == want

            try:
                wait_for(all_equal, timeout, 0.5, what="every stat panel equal to the truth")
            except AssertionError:
                wrong = {t: (last.get(t), want[t]) for t in want if last.get(t) != want[t]}
                raise AssertionError(f"stat panels (shown, truth): {wrong}") from None
            return last

        # the lease transitions so far depend on when the first scrapes came: counted from now on
        board.range_start = time.time()
        time.sleep(1)
        shown = settle(truth(lead_port, mports), 30, {"Lease transitions (range)": 0.0})
        print(f"\ntwo replicas: {shown}")

        # every expression of the dashboard runs in Prometheus (timeseries and state timelines too);
        # a panel per instance shows both replicas
        instances = {f"127.0.0.1:{m}" for m in mports}
        for p in rd.panels(dash):
            for t in p.get("targets", []):
                got = board.query(t["expr"])  # raises on a PromQL error
                if "{{instance}}" in t.get("legendFormat", ""):
                    # a rate over the short window needs two scrapes of each replica in it: on a
                    # loaded machine a scrape can come late, so ask again for a while
                    def both(expr=t["expr"]) -> bool:
                        nonlocal got
                        got = board.query(expr)
                        return {s["metric"].get("instance") for s in got} == instances
                    if not both():
                        try:
                            wait_for(both, 20, 1.0, what=f"{p['title']}: a series per replica")
                        except AssertionError:  # say what Prometheus had of the replicas
                            raise AssertionError((p["title"], t["expr"], got, board.query("up"),
                                                  board.query("process_cpu_seconds_total[10s]"))) from None
                    assert {s["metric"].get("instance") for s in got} == instances, (p["title"], got)
        cache = next((p for p in rd.panels(dash) if p.get("title") == "Scheduler cache"), None)
        if cache is not None:  # scheduler_cache_size: both replicas export it, the panel shows it once
            shown = {s["metric"]["type"]: float(s["value"][1]) for s in board.query(cache["targets"][0]["expr"])}
            bound = sum(1 for p in core.list_pod_for_all_namespaces().items if p.spec.node_name)
            assert shown == {"nodes": len(core.list_node().items), "pods": bound, "assumed_pods": 0}, shown

        # the leader stops (a rolling update): it gives the Lease up, the standby takes over and
        # tries the waiting pods again; the stopped replica's series go stale
        board.range_start = time.time() - 1
        leader.stop()
        wait_for(lambda: "successfully acquired lease" in standby.log(), 20, what="the standby to take over")
        shown = settle(truth(standby_port, [standby_port]), 40, {"Lease transitions (range)": 1.0})
        print(f"after the hand-over: {shown}")
    finally:
        for r in reps:
            r.stop()
        if prom is not None:
            prom.stop()
        for name in (SCHED, "dash-broken"):
            try:
                policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            except Exception:  # noqa: BLE001 - cleanup
                pass
