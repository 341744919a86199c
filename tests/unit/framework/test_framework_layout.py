"""framework/'s layout: its modules import one another without a circle, counting the imports
under TYPE_CHECKING and those inside functions (the contract, interface.py, never depends on a
module that depends on it), and none of them grows past MAX_LINES."""

from __future__ import annotations

import ast
from pathlib import Path

import policy_scheduler.framework

FRAMEWORK = Path(policy_scheduler.framework.__file__).resolve().parent
MAX_LINES = 600


def _graph() -> dict[str, set[str]]:
    mods = {f.stem for f in FRAMEWORK.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for f in FRAMEWORK.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                if parts[:2] == ["policy_scheduler", "framework"]:
                    deps.update(parts[2:3] or [a.name for a in node.names])
        graph[f.stem] = (deps & mods) - {f.stem}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_framework_has_no_import_cycle():
    graph = _graph()
    assert {"interface", "binding", "waiting", "chain", "registry"} <= set(graph)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_waiting_and_status_are_leaves():
    graph = _graph()
    assert graph["status"] == set()
    assert graph["waiting"] == {"status"}


def test_no_framework_module_is_over_max_lines():
    sizes = {f.name: len(f.read_text().splitlines()) for f in FRAMEWORK.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
