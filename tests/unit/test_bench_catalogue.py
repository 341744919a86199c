"""bench/throughput.py's workload catalogue and bench/table.py's table: the pure parts (no control plane)."""

import pytest
import yaml

# bench/ is no package: its scripts are on sys.path through pyproject.toml's pytest pythonpath, like hack/'s
import table
import throughput as tp


def nodes_of(wl, n):
    return {b["metadata"]["name"]: b for b in (wl.node(i, False) for i in range(n))}


def bind(pod, node):
    pod["spec"]["nodeName"] = node
    return pod


def test_workload_names_commas_repeats_and_all():
    assert tp.workload_names(["SchedulingBasic,Unschedulable", "SchedulingBasic"]) == ["SchedulingBasic",
                                                                                       "Unschedulable"]
    everything = tp.workload_names(["DRA,all"])
    assert everything == list(tp.WORKLOADS) and everything[0] == "SchedulingBasic"
    assert tp.workload_names([]) == []
    with pytest.raises(ValueError, match="Nope"):
        tp.workload_names(["SchedulingBasic,Nope"])


def test_every_workload_is_described_and_has_a_quick_size():
    assert set(tp.WORKLOAD_NOTES) == set(tp.WORKLOADS)
    for wl in tp.WORKLOADS.values():
        assert 0 < wl.quick_nodes <= wl.nodes and 0 < wl.quick_pods <= wl.pods
    assert tp.WORKLOADS["SchedulingDaemonset"].nodes == 15000


def test_both_schedulers_have_the_plugins_the_catalogue_needs():
    needed = {"NodeAffinity", "PodTopologySpread", "InterPodAffinity", "NodeResourcesFit", "DefaultPreemption"}
    assert all(tp.policy_has(p) for p in needed)
    profile = yaml.safe_load(tp.same_plugins_config(gangs=False))["profiles"][0]
    enabled = {p["name"] for p in profile["plugins"]["multiPoint"]["enabled"]}
    assert needed | {"SchedulingGates"} <= enabled


# kube-scheduler v1.37.1's default profile (apis/config/v1/default_plugins.go: getDefaultPlugins, then
# applyFeatureGates with its default gates: NodeDeclaredFeatures appended, DynamicResources before
# DefaultPreemption; GangScheduling appended with GenericWorkload)
UPSTREAM_DEFAULT = ["SchedulingGates", "PrioritySort", "NodeName", "NodeUnschedulable", "TaintToleration",
                    "NodeAffinity", "NodePorts", "NodeResourcesFit", "VolumeRestrictions", "NodeVolumeLimits",
                    "VolumeBinding", "VolumeZone", "PodTopologySpread", "InterPodAffinity", "DynamicResources",
                    "DefaultPreemption", "NodeResourcesBalancedAllocation", "ImageLocality", "DefaultBinder",
                    "NodeDeclaredFeatures"]


@pytest.mark.parametrize("gangs", [False, True])
def test_the_kube_same_profile_is_upstreams_default_in_its_order(gangs):
    """The same plugins by kube-scheduler's own names (NodeDeclaredFeatures included), in
    upstream's order; DefaultBinder (Bind only: its place changes nothing) comes last."""
    profile = yaml.safe_load(tp.same_plugins_config(gangs=gangs))["profiles"][0]
    enabled = [p["name"] for p in profile["plugins"]["multiPoint"]["enabled"]]
    want = UPSTREAM_DEFAULT + (["GangScheduling"] if gangs else [])
    assert [n for n in enabled if n != "DefaultBinder"] == [n for n in want if n != "DefaultBinder"]
    assert enabled[-1] == "DefaultBinder"


def test_daemonset_pods_are_pinned_and_checked():
    wl = tp.WORKLOADS["SchedulingDaemonset"]
    nodes = nodes_of(wl, 4)
    pods = [wl.pod("t", i, "x", 4) for i in range(6)]
    assert "resources" not in pods[0]["spec"]["containers"][0]
    term = pods[5]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchFields"][0] == {"key": "metadata.name", "operator": "In",
                                                              "values": ["node-00001"]}
    assert wl.violations([bind(p, f"node-{i % 4:05d}") for i, p in enumerate(pods)], nodes) == []
    bind(pods[2], "node-00003")
    assert any("pinned to node-00002" in v for v in wl.violations(pods, nodes))


def test_extended_resource_fits_one_node_and_is_not_overcommitted():
    wl = tp.WORKLOADS["ExtendedResource"]
    nodes = nodes_of(wl, 3)
    assert nodes["node-00002"]["status"]["allocatable"]["foo.com/bar-2"] == "1"
    pods = [bind(wl.pod("t", i, "x", 3), f"node-{i:05d}") for i in range(3)]
    assert pods[1]["spec"]["containers"][0]["resources"]["requests"] == {"foo.com/bar-1": "1"}
    assert wl.violations(pods, nodes) == []
    pods.append(bind(wl.pod("t", 1, "x", 3), "node-00000"))  # bar-1 on a node without it
    assert any("foo.com/bar-1" in v for v in wl.violations(pods, nodes))


def test_preferred_workloads_follow_upstreams_templates():
    spread = tp.WORKLOADS["PreferredTopologySpreading"].pod("t", 0, "x", 10)["spec"]["topologySpreadConstraints"][0]
    assert (spread["maxSkew"], spread["whenUnsatisfiable"]) == (5, "ScheduleAnyway")
    aff = tp.WORKLOADS["PreferredPodAffinity"]
    init = aff.init_pods(2, 1)
    assert [p["spec"]["nodeName"] for p in init] == ["node-00000", "node-00001"]
    assert init[0]["metadata"]["labels"]["color"] == "red" and "podAffinity" in init[0]["spec"]["affinity"]
    anti = tp.WORKLOADS["PreferredPodAntiAffinity"].pod("t", 0, "x", 10)
    assert anti["metadata"]["labels"]["color"] == "yellow"
    assert anti["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]


def test_churn_and_gated_pods_are_marked_to_stay_unbound():
    create = tp.WORKLOADS["Unschedulable"].churn_objects(0, "x")
    assert [b["kind"] for _, b in create] == ["Pod"]
    pod = create[0][1]
    assert pod["metadata"]["labels"][tp.ROLE] == tp.UNSCHEDULABLE
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "9"  # nodes have 4
    recreate = tp.WORKLOADS["SchedulingWithMixedChurn"].churn_objects(3, "x")
    assert [b["kind"] for _, b in recreate] == ["Node", "Pod", "Service"]
    assert recreate[0][1]["status"]["allocatable"]["pods"] == "0"
    gated = tp.WORKLOADS["SchedulingGatedPods"]
    assert gated.gated_pod(0, "x")["spec"]["schedulingGates"] and gated.node(0, False)["status"]["allocatable"][
        "pods"] == "90000"
    # a pod on a node that is not the workload's (a churn node) is a violation
    wl = tp.WORKLOADS["SchedulingWithMixedChurn"]
    assert wl.violations([bind(wl.pod("t", 0, "x", 2), "churn-node-000000")], nodes_of(wl, 2))


def test_the_ceilings_placements_go_unchecked_but_their_held_gated_pods_do_not(tmp_path):
    """kube-minimal and the bare binder decide nothing: a pod where the workload forbids it, or a
    churn pod that fits nowhere bound by kube-minimal, fails the decision-makers' checks only."""
    wl = tp.WORKLOADS["Unschedulable"]
    nodes = nodes_of(wl, 2)
    measured = bind(wl.pod("t", 0, "x", 2), "churn-node-000000")  # not one of the workload's nodes
    churn = bind(wl.churn_objects(0, "x")[0][1], "node-00000")  # 9 cpu on a node of 4
    plan = tp.RunPlan(wl, 2, 1, 0, 0, tmp_path)
    watch = object.__new__(tp.PodWatch)
    watch.node, watch.rebound = {"t-000000": "churn-node-000000"}, []
    proc = tp.Proc(0, tmp_path / "none.log", lambda: None)
    events = [{"regarding": {"name": "t-000000"}}]

    def check(which, pods):
        return tp.check_run(which, plan, watch, ["t-000000"], pods, nodes, events, "", proc)

    for ceiling in (tp.KUBE_MIN, tp.CEILING):
        assert check(ceiling, [measured, churn])["bound"] == 1
    with pytest.raises(tp.BenchError, match="fit nowhere or are gated"):
        check(tp.KUBE_SAME, [measured, churn])
    with pytest.raises(tp.BenchError, match="not one of the workload's nodes"):
        check(tp.OURS, [measured])
    gated = bind(tp.WORKLOADS["SchedulingGatedPods"].gated_pod(0, "x"), "node-00001")
    with pytest.raises(tp.BenchError, match="fit nowhere or are gated"):
        check(tp.KUBE_MIN, [measured, gated])


def result(**over):
    run = {"pods_per_s": 100.0, "startup_s": 1.5, "cpu_ms_per_pod": 2.0, "cpu_ms_per_pod_run": 3.0,
           "other_cores_in_window": 0.1}
    res = {"ok": True, "started": "2026-11-27T10:00:00+00:00", "finished": "2026-11-27T10:30:00+00:00",
           "commit": "abc1234", "machine": {"cores": 2, "loadavg_1_5_15_at_start": [0.5, 0.4, 0.3],
                                            "loadavg_1_5_15_at_end": [1.0, 0.9, 0.8]},
           "config": {"quick": True, "schedulers": ["policy-scheduler", "kube-scheduler", "kube-same", "ceiling"]},
           "workloads": {
               "SchedulingBasic": {"nodes": 200, "pods": 2000, "init_pods": 0, "repeat": 1, "description": "plain",
                                   "runs": {"policy-scheduler": {**run, "pods_per_s": 150.0},
                                            "kube-same": run, "kube-scheduler": run,
                                            "ceiling": {**run, "pods_per_s": 300.0}},
                                   "ratios": {"ours_vs_kube": 1.5, "ours_vs_ceiling": 0.5, "ours_vs_kube_avg": 1.25,
                                              "cpu_run_ours_vs_kube": 0.4}},
               "DRA": {"nodes": 100, "pods": 500, "init_pods": 500, "devices_per_node": 10, "repeat": 1,
                       "runs": {"ceiling": {"pods_per_s": 80.0, "cpu_ms_per_pod": 1.0,
                                            "other_cores_in_window": 0.3}},
                       "skipped": {"policy-scheduler": "no DynamicResources"},
                       "ratios": {"ours_vs_kube": None, "ours_vs_ceiling": None}},
               "Unschedulable": {"error": "policy-scheduler on Unschedulable: 3 pods not bound\n(logs in x)",
                                 "runs": {"ceiling": {**run, "pods_per_s": 250.0}}}}}
    res.update(over)
    return res


def test_table_has_one_row_per_workload_with_the_jsons_figures():
    out = table.render(result(ok=False))
    lines = out.splitlines()
    assert "2026-11-27T10:00:00+00:00" in lines[0] and "2 cores" in lines[0] and "0.50 / 0.40 / 0.30" in lines[0]
    assert "did NOT pass" in lines[0]
    partial = result(ok=False)
    partial["workloads"].pop("Unschedulable")
    assert "INCOMPLETE" in table.render(partial).splitlines()[0]  # written while the run goes on
    rows = [x for x in lines if x.startswith("| ") and not x.startswith("| Workload")]
    assert [r.split(" | ")[0][2:] for r in rows] == ["SchedulingBasic", "DRA †", "Unschedulable"]
    basic = rows[0].split(" | ")
    # the whole run's ratios first (pods/s, CPU per pod), then pods/s per scheduler, then the window's ratios
    assert basic[1:4] == ["200 × 2,000", "1.25", "0.40"]
    assert basic[4:9] == ["150.0", "100.0", "100.0", "300.0", "1.50"] and basic[9] == "0.50"
    assert basic[12] == "3.00 / 3.00 / 3.00 / 3.00"  # CPU per pod over the whole run
    assert "1.50 / 1.50 / 1.50 / 1.50" in rows[0]
    assert rows[1].split(" | ")[2:4] == ["–", "–"]  # DRA: no ratios
    assert rows[1].split(" | ")[10:12] == ["– / – / – / –", "– / – / – / 1.00"]  # DRA: no start-up
    assert "left out" in rows[1]
    # ran in the config's order: policy-scheduler failed, the two kube-schedulers never ran, the binder had
    assert rows[2].split(" | ")[2:8] == ["–", "–", "failed", "not run", "not run", "250.0"]
    assert "- Unschedulable failed: policy-scheduler on Unschedulable: 3 pods not bound" in out
    assert "- **SchedulingBasic**: plain" in out
    head = lines[2]
    assert head.count("|") - 1 == len(basic)  # every row as wide as the head


def test_table_columns_follow_the_schedulers_that_ran(tmp_path):
    res = result(config={"quick": False, "schedulers": ["policy-scheduler", "kube-same"]})
    res["workloads"].pop("DRA")
    out = table.render(res, notes=False)
    assert "bare binder" not in out and "ours / binder" not in out and "ours / kube-same" in out
    (tmp_path / "out.txt").write_text("table\n" + __import__("json").dumps(res) + "\n")
    assert table.load(tmp_path / "out.txt")["commit"] == "abc1234"


def test_the_minimal_kube_profile_keeps_only_the_queue_sort_the_gates_and_the_binder():
    profile = yaml.safe_load(tp.minimal_config())["profiles"][0]
    assert profile["schedulerName"] == tp.SCHEDULER_NAME[tp.KUBE_MIN] == "default-scheduler"
    mp = profile["plugins"]["multiPoint"]
    assert mp["enabled"] == [{"name": "PrioritySort"}, {"name": "SchedulingGates"}, {"name": "DefaultBinder"}]
    assert mp["disabled"] == [{"name": "*"}] and "pluginConfig" not in profile


def test_table_shows_ours_over_the_minimal_kube_scheduler_when_it_ran():
    res = result(config={"quick": True, "schedulers": ["policy-scheduler", "kube-same", "kube-minimal", "ceiling"]})
    res["workloads"] = {"SchedulingBasic": res["workloads"]["SchedulingBasic"]}
    basic = res["workloads"]["SchedulingBasic"]
    basic["runs"]["kube-minimal"] = {**basic["runs"]["kube-same"], "pods_per_s": 200.0}
    basic["ratios"]["ours_vs_kube_minimal"] = 0.75
    lines = table.render(res, notes=False).splitlines()
    head = [h.strip() for h in lines[2].split("|")[1:-1]]
    row = [c.strip() for c in lines[4].split("|")[1:-1]]
    assert "kube-scheduler (minimal) pods/s" in head and row[head.index("kube-scheduler (minimal) pods/s")] == "200.0"
    assert row[head.index("ours / kube-min")] == "0.75"
    assert "ours / kube-min" not in table.render(result(), notes=False)  # not run: no column
