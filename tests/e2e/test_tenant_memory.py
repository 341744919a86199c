"""A tenant cannot fill the operator's memory through what its pods contain (issue #41, H2).

2,000 plain nodes; 40 pending pods, each with a required node affinity ``In`` over 2,000 label
values no node carries. Before the node masks were bounded, the operator kept one 2,000-byte
mask per value (80,000 of them) until some node's labels changed: RSS went from about 106 MB to
295 MB and stayed there after the pods were deleted. Now a value no node carries costs a set
lookup, and every content-keyed cache is an LRU with a byte budget.

Then 20 pods bound by hand (spec.nodeName), each requesting 1,000 extended resources no node
advertises. When every resource a pod named got a column of the node table, that was 20,000
columns of 2,000 nodes, two cells each: over 600 MB, kept after the pods were deleted. Now only a
resource some node advertises has a column; the others are summed per node as the pods' own
specs are.

The scenario's steps are bench/tenant_memory.py's (the benchmark runs them at any node count).
"""

from __future__ import annotations

import time

from conftest import OperatorProcess, wait_served
from helpers import GROUP, PLURAL, VERSION, apply_policy, example_plugins

import tenant_memory as tm  # bench/, on sys.path through pyproject.toml

SCHED = POLICY = "tenant-memory"
NODES, PODS, VALUES = 2000, 40, 2000
MADE_UP, NAMES = 20, 1000
MAX_GROWTH = 60 * 10**6  # bytes, at the peak and after the deletion
MAX_PLAIN_BIND_S = 1.0


def test_hostile_affinity_values_do_not_grow_memory(cluster, api, core, crd, podgroup_crd, policies, namespace):
    wait_served(api, crd, podgroup_crd)
    apply_policy(policies, POLICY, example_plugins("default"), schedulerName=SCHED)  # the default profile
    t0 = time.monotonic()
    names = tm.create_nodes(tm.fast_client(str(cluster.kubeconfig_path)), "tmem", NODES, workers=16)
    created_s = time.monotonic() - t0
    op = OperatorProcess(cluster, SCHED, extra=["--default-policy", POLICY]).start()
    try:
        figures = tm.run_scenario(core, namespace, SCHED, op.proc.pid, names[-1], PODS, VALUES, made_up=MADE_UP,
                                  names=NAMES)
        mb = {k: round(v / 10**6, 1) for k, v in figures.items()
              if k.startswith(("rss_", "growth")) and not k.endswith("_samples")}
        print(f"\n{NODES} nodes created in {created_s:.1f}s; {mb}; plain pod bound in "
              f"{figures['plain_bind_s'] * 1000:.0f} ms (beside the made-up ones "
              f"{figures['made_up_plain_bind_s'] * 1000:.0f} ms); hostile pods tried in "
              f"{figures['hostile_unschedulable_s']:.1f}s")
        assert op.proc.poll() is None, f"operator exited:\n{op.log()[-3000:]}"
        assert figures["rss_samples"] > 0
        assert figures["growth_peak"] <= MAX_GROWTH, f"RSS grew by {mb['growth_peak']} MB at its peak: {mb}"
        assert figures["growth_after"] <= MAX_GROWTH, f"RSS grew by {mb['growth_after']} MB after deletion: {mb}"
        assert figures["plain_bind_s"] <= MAX_PLAIN_BIND_S, f"plain pod bound after {figures['plain_bind_s']:.2f}s"
        assert figures["rss_made_up_samples"] > 0
        assert figures["growth_made_up_peak"] <= MAX_GROWTH, f"made-up resources: {mb}"
        assert figures["growth_made_up_after"] <= MAX_GROWTH, f"made-up resources, after deletion: {mb}"
        assert figures["made_up_plain_bind_s"] <= MAX_PLAIN_BIND_S, \
            f"plain pod beside the made-up ones bound after {figures['made_up_plain_bind_s']:.2f}s"
    finally:
        op.stop()
        tm.delete_nodes(core)
        policies.delete_cluster_custom_object(GROUP, VERSION, PLURAL, POLICY)
