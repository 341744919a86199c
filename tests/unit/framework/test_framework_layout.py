"""framework/'s layout: its modules, in framework/ and its subpackages (cycle/, queue/, model/),
import one another without a circle, counting the imports under TYPE_CHECKING and those inside
functions (the contract, interface.py, never depends on a module that depends on it), and none
of them grows past MAX_LINES."""

from __future__ import annotations

import ast
from pathlib import Path

import policy_scheduler.framework

FRAMEWORK = Path(policy_scheduler.framework.__file__).resolve().parent
MAX_LINES = 600


def _files() -> dict[str, Path]:
    """Every module of framework/ by its dotted name below it: ``interface``, ``cycle.schedule``;
    a subpackage's __init__.py is the subpackage (``cycle``), framework's own is ``__init__``."""
    names = {}
    for f in sorted(FRAMEWORK.rglob("*.py")):
        parts = f.relative_to(FRAMEWORK).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        names[".".join(parts)] = f
    return names


def _graph() -> dict[str, set[str]]:
    """module -> the framework modules it imports. ``from P import n`` imports the module P.n when
    there is one, else P (the parent packages Python initialises on the way are not counted)."""
    files = _files()
    known = {(() if n == "__init__" else tuple(n.split("."))): n for n in files}
    graph: dict[str, set[str]] = {}
    for name, f in files.items():
        here = () if name == "__init__" else tuple(name.split("."))
        pkg = here if f.name == "__init__.py" else here[:-1]  # what `from . import` means here
        deps: set[str] = set()

        def add(parts: tuple[str, ...]) -> None:
            if (target := known.get(parts)) is not None:
                deps.add(target)

        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = tuple(node.module.split(".")) if node.module else ()
                if node.level:
                    if node.level - 1 > len(pkg):
                        continue  # above framework/: another layer (test_layout.py's concern)
                    base = (*pkg[:len(pkg) - (node.level - 1)], *module)
                elif module[:2] == ("policy_scheduler", "framework"):
                    base = module[2:]
                else:
                    continue
                for a in node.names:
                    sub = (*base, a.name)
                    add(sub if sub in known else base)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = tuple(a.name.split("."))
                    if parts[:2] == ("policy_scheduler", "framework"):
                        add(parts[2:])
        graph[name] = deps - {name}
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


def test_the_graph_reads_subpackages_and_every_kind_of_import():
    graph = _graph()
    assert {"cycle", "queue", "model"} <= set(graph)  # the subpackages' __init__.py
    assert "model.podinfo" in graph["cycle.schedule"] and "interface" in graph["cycle.schedule"]
    assert "cycle.runtime" in graph["queue.scheduling_queue"]
    assert "model.volumes" in graph["interface"]  # under TYPE_CHECKING and inside a function


def test_framework_has_no_import_cycle():
    graph = _graph()
    assert {"interface", "cycle.binding_cycle", "waiting", "cycle.chain", "registry"} <= set(graph)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_waiting_and_status_are_leaves():
    graph = _graph()
    assert graph["status"] == set()
    assert graph["waiting"] == {"status"}


def test_no_framework_module_is_over_max_lines():
    sizes = {str(f.relative_to(FRAMEWORK)): len(f.read_text().splitlines()) for f in FRAMEWORK.rglob("*.py")}
    assert {"interface.py", "cycle/schedule.py", "queue/scheduling_queue.py", "model/nodetable.py"} <= set(sizes)
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
