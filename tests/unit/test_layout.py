"""Package layout promises: `operator/` is a folder, not a package; the pure core stays pure."""

import ast
import importlib
from pathlib import Path

import policy_scheduler

PKG = Path(policy_scheduler.__file__).resolve().parent
FORBIDDEN = ("kopf", "kubernetes", "aiohttp", "prometheus_api_client", "prometheus_client", "requests", "urllib",
             "socket", "http")


def test_import_operator_is_the_standard_library():
    op = importlib.import_module("operator")
    assert hasattr(op, "itemgetter") and hasattr(op, "add")
    assert "site-packages" not in (op.__file__ or "") and "/operator/" not in (op.__file__ or "")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_framework_and_plugins_import_no_client_and_do_no_io():
    files = sorted((PKG / "framework").glob("*.py")) + sorted((PKG / "plugins").glob("*.py"))
    assert len(files) > 5
    for f in files:
        bad = _imports(f) & set(FORBIDDEN)
        assert not bad, f"{f.relative_to(PKG)} imports {bad}"


def test_plugins_do_not_reach_outside_the_core():
    for f in sorted((PKG / "plugins").glob("*.py")):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module:
                assert node.module.split(".")[0] in ("framework",), f"{f.name} imports ..{node.module}"


def test_a_plugin_module_imports_nothing_from_a_sibling_plugin_module():
    """Shared helpers live in framework/: plugin modules are leaves, so that one plugin can be
    moved, replaced or dropped without touching another."""
    plugin_dir = PKG / "plugins"
    siblings = {f.stem for f in plugin_dir.glob("*.py") if f.stem != "__init__"}
    assert {"node_resources_fit", "load_aware", "metric_threshold"} <= siblings
    for f in sorted(plugin_dir.glob("*.py")):
        if f.stem == "__init__":
            continue
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:  # from .x import ..., or from . import x
                    targets = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                elif node.level == 0 and node.module and node.module.startswith("policy_scheduler.plugins."):
                    targets = [node.module.split(".")[2]]
                elif node.level == 0 and node.module == "policy_scheduler.plugins":
                    targets = [a.name for a in node.names]
                else:
                    continue
                bad = [t for t in targets if t in siblings]
                assert not bad, f"plugins/{f.name} imports from sibling plugin module(s) {bad}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    assert not (parts[:2] == ["policy_scheduler", "plugins"] and len(parts) > 2
                                and parts[2] in siblings), f"plugins/{f.name} imports {a.name}"


def test_every_builtin_plugin_that_can_reject_declares_its_events():
    """A rejecting plugin without EnqueueExtensions would get every event (upstream's default);
    the built-in ones list theirs. Plugins that cannot reject list nothing."""
    from policy_scheduler.framework.interface import EXTENSION_POINTS, REJECTING_POINTS, EnqueueExtensions
    from policy_scheduler.plugins import PLUGIN_MODULES

    rejecting = tuple(EXTENSION_POINTS[p] for p in REJECTING_POINTS)
    for mod in PLUGIN_MODULES:
        cls = importlib.import_module(f"policy_scheduler.plugins.{mod}").PLUGIN
        if issubclass(cls, rejecting):
            assert issubclass(cls, EnqueueExtensions), f"{cls.NAME} can reject but lists no events"
        else:
            assert not issubclass(cls, EnqueueExtensions), f"{cls.NAME} cannot reject: its events would be unused"


def test_the_pure_core_does_not_import_plugins():
    """framework/ is the contract plugins are written against; it must not depend on them (the
    built-in registry lives in plugins/, and the chain builder takes a registry)."""
    for f in sorted((PKG / "framework").glob("*.py")):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level == 2:  # from ..x import / from .. import x
                    targets = [mod.split(".")[0]] if mod else [a.name for a in node.names]
                elif node.level == 0 and mod.startswith("policy_scheduler"):
                    parts = mod.split(".")
                    targets = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
                else:
                    continue
                assert "plugins" not in targets, f"framework/{f.name} imports from plugins"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    assert not a.name.startswith("policy_scheduler.plugins"), f"framework/{f.name} imports {a.name}"


def test_test_module_names_are_unique():
    """pytest imports test modules by basename (no packages under tests/): two files of one name
    stop the whole run at collection."""
    names = [p.name for p in (PKG.parents[1] / "tests").rglob("test_*.py")]
    assert len(names) > 20
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_one_conftest_per_kind_of_test():
    """e2e tests import OperatorProcess from `conftest`: pytest keeps the last conftest.py it
    imported under that name, so tests/ and tests/e2e/ hold the only ones."""
    tests = PKG.parents[1] / "tests"
    assert sorted(str(p.relative_to(tests)) for p in tests.rglob("conftest.py")) == ["conftest.py", "e2e/conftest.py"]
