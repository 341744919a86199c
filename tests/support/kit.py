"""Small builders shared by the plugin tests."""

from __future__ import annotations

from dataclasses import replace

from policy_scheduler.framework.events import ActionType, ClusterEvent, QueueingHint, call_hint
from policy_scheduler.framework.interface import Handle
from policy_scheduler.framework.model.nodetable import NodeSpec, NodeTable

QUEUE, SKIP = QueueingHint.QUEUE, QueueingHint.SKIP


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


# ------------------------------------------------------------------ events and queueing hints
def arg_errors(name: str, args) -> list[str]:
    """The problems of ``args`` for the built-in plugin ``name``, as the chain builder reports
    them, with paths relative to the args (``hardPodAffinityWeight: Invalid value: ...``);
    empty when the args are valid."""
    from policy_scheduler.policy.chain import ChainError, build_chain
    from policy_scheduler.plugins import default_registry

    try:
        build_chain({"plugins": [{"name": name, "args": args}]}, default_registry())
    except ChainError as e:
        prefix = "plugins[0].args"
        errs = [x.removeprefix("spec.") for x in e.errors]
        assert all(x.startswith(prefix) for x in errs), errs
        return [x[len(prefix):].lstrip(".") for x in errs]
    return []


def refused(name: str, args, path: str, detail: str = "") -> list[str]:
    """Assert that ``args`` are refused with an error at ``path`` (relative to args) whose
    detail contains ``detail``; returns every error."""
    errs = arg_errors(name, args)
    assert any(e.startswith(path + ": ") and detail in e[len(path) + 2:] for e in errs), (path, detail, errs)
    return errs


def registered(plugin) -> list[tuple[str, ActionType]]:
    """The (resource, action) pairs ``plugin.events_to_register()`` lists, sorted."""
    return sorted(((r.event.resource, r.event.action) for r in plugin.events_to_register()),
                  key=lambda p: (p[0], int(p[1])))


def hint(plugin, resource: str, action: ActionType, pod, old=None, new=None) -> QueueingHint:
    """What the queue would get from ``plugin`` for the incoming event (resource, action): the
    hint of the one registration matching it (no hint: QUEUE), run as the queue runs it."""
    incoming = ClusterEvent(resource, action)
    regs = [r for r in plugin.events_to_register() if r.event.matches(incoming)]
    assert len(regs) == 1, f"{plugin.NAME}: {len(regs)} registrations match {incoming.label}"
    return call_hint(regs[0], pod, old, new)


def node(name="n", labels=None, taints=(), unschedulable=False, allocatable=None) -> NodeSpec:
    """A NodeSpec as hints see it; ``taints``: (key, value, effect) tuples; ``allocatable``
    quantities as the API writes them."""
    return NodeSpec.from_dict({
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"unschedulable": unschedulable,
                 "taints": [dict(zip(("key", "value", "effect"), t)) for t in taints]},
        "status": {"allocatable": dict(allocatable or {})}})


def changed(spec, **fields):
    """A copy of a NodeSpec or PodInfo with ``fields`` replaced (the ``new`` of an update)."""
    return replace(spec, **fields)


def assert_takes_no_args(name: str, args) -> None:
    """A plugin without args: any args are refused with upstream-style wording, empty ones pass."""
    import pytest

    from policy_scheduler.policy.chain import ChainError, build_chain
    from policy_scheduler.plugins import default_registry

    with pytest.raises(ChainError) as e:
        build_chain({"plugins": [{"name": name, "args": args}]}, default_registry())
    assert e.value.errors == [f"plugins[0].args: plugin {name} takes no args"]
    build_chain({"plugins": [{"name": name, "args": {}}]}, default_registry())  # empty args are fine
