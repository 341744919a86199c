"""Scheduling plugins: one module per plugin, each exporting ``PLUGIN`` (the class).

The class carries ``NAME`` (the registry name used in policies) and ``Args`` (a pydantic model
with ``extra="forbid"``, or None when the plugin takes no args).
"""

PLUGIN_MODULES = (
    "priority_sort",
    "node_unschedulable",
    "node_name",
    "taint_toleration",
    "node_affinity",
    "node_ports",
    "node_resources_fit",
    "pod_topology_spread",
    "inter_pod_affinity",
    "balanced_allocation",
    "image_locality",
    "node_label_match",
    "load_aware",
    "metric_threshold",
    "metric_score",
)
