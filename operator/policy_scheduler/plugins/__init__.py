"""Scheduling plugins: one module per plugin, each exporting ``PLUGIN`` (the class).

The class carries ``NAME`` (the registry name used in policies) and ``Args`` (a pydantic model
with ``extra="forbid"``, or None when the plugin takes no args). Adding a plugin: its module
here, its name in PLUGIN_MODULES, its test module under tests/unit/plugins/.

A plugin family is a folder (``dynamicresources/``, ``podgroups/``, ``volumes/``): its plugin
modules, the code they share (objects, caches, helpers) and a README.md saying what of upstream
it implements. Its plugins are named in PLUGIN_MODULES by their dotted path below this package
(``volumes.volume_binding``). Modules of one family import each other; a plugin module or family
imports no other plugin module or family (tests/unit/test_layout.py).
"""

from __future__ import annotations

import importlib

from ..framework.registry import Registry

PLUGIN_MODULES = (
    "priority_sort",
    "node_unschedulable",
    "node_name",
    "taint_toleration",
    "node_affinity",
    "node_ports",
    "node_resources_fit",
    "volumes.volume_restrictions",
    "volumes.node_volume_limits",
    "volumes.volume_binding",
    "volumes.volume_zone",
    "pod_topology_spread",
    "inter_pod_affinity",
    "balanced_allocation",
    "image_locality",
    "node_declared_features",
    "node_label_match",
    "load_aware",
    "metric_threshold",
    "metric_score",
    "scheduling_gates",
    "default_preemption",
    "podgroups.coscheduling",
    "podgroups.gang_scheduling",
    "dynamicresources.dynamic_resources",
    "dynamicresources.device_fragmentation",
    "default_binder",
)

_default: Registry | None = None


def default_registry() -> Registry:
    """The registry of every built-in plugin."""
    global _default
    if _default is None:
        reg = Registry()
        for mod in PLUGIN_MODULES:
            reg.register(importlib.import_module(f"{__name__}.{mod}").PLUGIN)
        _default = reg
    return _default


def registry_with(modules: list[str]) -> tuple[Registry, list[str]]:
    """The built-in plugins plus the out-of-tree ones of ``modules`` (a new registry; the
    default one is left as it is). Returns it and the names added."""
    if not modules:
        return default_registry(), []
    reg = Registry()
    base = default_registry()
    for name in base.names():
        if (cls := base.get(name)) is not None:  # (every name it lists)
            reg.register(cls)
    return reg, load_plugin_modules(modules, reg)


def load_plugin_modules(names: list[str], registry: Registry) -> list[str]:
    """Out-of-tree plugins: import each module (dotted name) and register its ``PLUGIN`` (or
    every class in its ``PLUGINS``) in ``registry``. Returns the registered plugin names."""
    added = []
    for name in names:
        mod = importlib.import_module(name)
        classes = list(getattr(mod, "PLUGINS", ()) or ([mod.PLUGIN] if hasattr(mod, "PLUGIN") else []))
        if not classes:
            raise ImportError(f"plugin module {name} defines neither PLUGIN nor PLUGINS")
        for cls in classes:
            registry.register(cls)
            added.append(cls.NAME)
    return added
