"""Small builders shared by the plugin tests."""

from __future__ import annotations

from policy_scheduler.framework.interface import Handle
from policy_scheduler.framework.metricview import SOURCE
from policy_scheduler.framework.nodetable import NodeTable


class ViewHandle(Handle):
    """A Handle whose metric source is ``view`` (a MetricsView prepared by the test)."""

    def __init__(self, view) -> None:
        self.view = view

    def source(self, name):
        return self.view if name == SOURCE else None


def table(nodes, existing=()) -> NodeTable:
    """A NodeTable from node dicts; ``existing``: (node name, PodInfo) pairs, renamed existing-<i>."""
    t = NodeTable()
    for n in nodes:
        t.upsert_node(n)
    for i, (node, pod) in enumerate(existing):
        pod.name = f"existing-{i}"
        t.add_pod(pod, node)
    return t


def instance(plugin_cls, args=None, handle=None):
    """The plugin built as the chain builder builds it: validated args, defaults applied."""
    return plugin_cls(plugin_cls.Args.model_validate(args or {}), handle or Handle())
