"""Package layout promises: `operator/` is a folder, not a package; the pure core stays pure; imports
run one way (no cycle, no layer importing from one above it)."""

import ast
import functools
import importlib
import re
from pathlib import Path

import policy_scheduler

PKG = Path(policy_scheduler.__file__).resolve().parent
FORBIDDEN = ("kopf", "kubernetes", "aiohttp", "prometheus_api_client", "prometheus_client", "requests", "urllib",
             "socket", "http")


def test_import_operator_is_the_standard_library():
    op = importlib.import_module("operator")
    assert hasattr(op, "itemgetter") and hasattr(op, "add")
    assert "site-packages" not in (op.__file__ or "") and "/operator/" not in (op.__file__ or "")


def _tree(path: Path) -> ast.Module:
    """Each text is parsed once for the whole module (parsing is most of its time)."""
    return _parse(path.read_text())


@functools.lru_cache(maxsize=None)
def _parse(text: str) -> ast.Module:
    return ast.parse(text)


def import_statements(tree: ast.Module):
    """Every import statement, at any depth (in functions, classes, `if TYPE_CHECKING:`, `try:`):
    statements only hold imports, so expressions are not walked."""
    stack = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            stack.extend(reversed(getattr(node, field, None) or ()))


def _imports(path: Path) -> set[str]:
    names = set()
    for node in import_statements(_tree(path)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_framework_and_plugins_import_no_client_and_do_no_io():
    files = sorted((PKG / "framework").rglob("*.py")) + sorted((PKG / "plugins").rglob("*.py"))
    assert {"cycle", "queue", "model"} <= {f.parent.name for f in files}  # framework's subpackages
    assert set(FAMILIES) <= {f.parent.name for f in files}  # the plugin families' folders
    assert len(files) > 5
    for f in files:
        bad = _imports(f) & set(FORBIDDEN)
        assert not bad, f"{f.relative_to(PKG)} imports {bad}"


# A plugin family: a folder under plugins/ whose modules count as one plugin (they may import each
# other), with a README.md naming each plugin it registers.
FAMILIES = ("dynamicresources", "podgroups", "volumes")


def plugin_units(plugins_dir: Path) -> dict[str, str]:
    """Each module under plugins/ (dotted, below the plugins package) -> its unit: the module's own
    name for a plugin module flat in plugins/, the folder's name for a module of a family;
    plugins/__init__.py (the registry) is in no unit."""
    units = {}
    for name in module_files(plugins_dir):
        if name != "__init__":
            units[name] = name.split(".")[0]
    return units


def plugin_leaf_violations(root: Path, package: str, plugins: str = "plugins",
                           allowed: tuple[str, ...] = ("framework",)) -> list[str]:
    """Imports by a plugin module or family module (`root/plugins/...`) of another plugin module
    or family, or of anything of the package outside `plugins` itself and `allowed` (the core)."""
    graph = import_graph(root, package)
    units = plugin_units(root / plugins)
    bad = []
    for mod, edges in sorted(graph.items()):
        parts = mod.split(".")
        if parts[0] != plugins or len(parts) == 1:
            continue
        own = units[".".join(parts[1:])]
        for target, line in sorted(edges.items()):
            tparts = target.split(".")
            if tparts[0] == plugins:
                unit = units.get(".".join(tparts[1:])) if len(tparts) > 1 else None
                if unit is not None and unit != own:
                    bad.append(f"{mod}:{line} imports {target}: another plugin or family than {own}")
            elif tparts[0] not in allowed:
                bad.append(f"{mod}:{line} imports {target}: outside the core")
    return bad


def test_plugins_do_not_reach_outside_the_core():
    bad = [b for b in plugin_leaf_violations(PKG, "policy_scheduler") if b.endswith("outside the core")]
    assert not bad, "\n".join(bad)


def test_a_plugin_module_imports_nothing_from_a_sibling_plugin_module():
    """Shared helpers live in framework/, or in the family's folder for the plugins of one family:
    plugin modules and families are leaves, so that one can be moved, replaced or dropped without
    touching another."""
    units = plugin_units(PKG / "plugins")
    assert {"node_resources_fit", "load_aware", "metric_threshold", *FAMILIES} <= set(units.values())
    assert units["volumes.volume_binding"] == units["volumes.cache"] == "volumes"
    bad = plugin_leaf_violations(PKG, "policy_scheduler")
    assert not bad, "\n".join(bad)


def test_the_registry_finds_every_plugin_module_and_only_those():
    """PLUGIN_MODULES names, dotted below plugins/, every module that exports a PLUGIN, the ones in
    family folders included."""
    from policy_scheduler.plugins import PLUGIN_MODULES

    exporting = set()
    for name, f in module_files(PKG / "plugins").items():
        tree = _tree(f)
        if any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PLUGIN" for t in n.targets)
               for n in tree.body):
            exporting.add(name)
    assert {"volumes.volume_binding", "podgroups.gang_scheduling", "dynamicresources.dynamic_resources"} <= exporting
    assert sorted(PLUGIN_MODULES) == sorted(exporting)
    assert len(set(PLUGIN_MODULES)) == len(PLUGIN_MODULES)


def test_each_family_folder_has_a_readme_naming_each_plugin_it_registers():
    from policy_scheduler.plugins import PLUGIN_MODULES

    folders = sorted(d.name for d in (PKG / "plugins").iterdir() if (d / "__init__.py").exists())
    assert folders == sorted(FAMILIES)
    for family in FAMILIES:
        readme = PKG / "plugins" / family / "README.md"
        assert readme.exists(), f"plugins/{family}/ has no README.md"
        text = readme.read_text()
        names = [importlib.import_module(f"policy_scheduler.plugins.{m}").PLUGIN.NAME for m in PLUGIN_MODULES
                 if m.split(".")[0] == family]
        assert names, f"plugins/{family}/ registers no plugin"
        missing = [n for n in names if not re.search(rf"\b{n}\b", text)]
        assert not missing, f"plugins/{family}/README.md does not name {missing}"


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
    built-in registry lives in plugins/, and the chain builder takes a registry). Its subpackages
    included: `from ...plugins import` in framework/cycle/ reaches the top as `from ..` does in
    framework/."""
    files = sorted((PKG / "framework").rglob("*.py"))
    assert any(len(f.relative_to(PKG).parts) > 2 for f in files)
    for f in files:
        rel = f.relative_to(PKG)
        pkg = rel.parts[:-1]  # the package a relative import starts from: ("framework", "cycle")
        for node in import_statements(_tree(f)):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    if node.level - 1 > len(pkg):
                        continue
                    base = [*pkg[:len(pkg) - (node.level - 1)], *(mod.split(".") if mod else [])]
                    # from the top (`from .. import x` in framework/): the names are the targets
                    targets = [base[0]] if base else [a.name for a in node.names]
                elif mod.startswith("policy_scheduler"):
                    parts = mod.split(".")
                    targets = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
                else:
                    continue
                assert "plugins" not in targets, f"{rel} imports from plugins"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    assert not a.name.startswith("policy_scheduler.plugins"), f"{rel} imports {a.name}"


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


# ---- the import graph: no cycle, and layers that only import downward -------------------------
#
# The graph counts every import statement: top level, under `if TYPE_CHECKING:`, inside a
# function; relative (`from . import x`, `from ..a.b import c`) or absolute
# (`import policy_scheduler.x`, `from policy_scheduler.a import b`). `from P import n` is an
# import of the submodule P.n when that module exists, else of P itself. Not counted: the parent
# packages Python initialises on the way to a module (as import-linter/grimp), and imports by
# name through importlib (plugins/__init__.py, idle.warm).


def module_files(root: Path) -> dict[str, Path]:
    """Every module under `root` by its dotted name relative to the package: `cluster.engine`,
    `cluster` for cluster/__init__.py, `__init__` for the package's own __init__.py."""
    names = {}
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        names[".".join(parts)] = f
    return names


def import_graph(root: Path, package: str) -> dict[str, dict[str, int]]:
    """module -> {module of the same package it imports: line of the first such import}."""
    files = module_files(root)
    known = {(() if n == "__init__" else tuple(n.split("."))): n for n in files}
    graph = {}
    for name, path in files.items():
        here = () if name == "__init__" else tuple(name.split("."))
        pkg = here if path.name == "__init__.py" else here[:-1]  # what `from . import` means here
        edges = graph[name] = {}

        def add(parts, line):
            target = known.get(tuple(parts))
            if target is not None and target != name:
                edges.setdefault(target, line)

        def absolute(dotted):  # the parts below `package`, or None for another distribution
            head, *rest = dotted.split(".")
            return rest if head == package else None

        for node in import_statements(_tree(path)):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if (parts := absolute(a.name)) is not None:
                        add(parts, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    if node.level - 1 > len(pkg):
                        continue  # beyond the top of the package: Python refuses it too
                    base = [*pkg[:len(pkg) - (node.level - 1)], *(node.module.split(".") if node.module else [])]
                elif (base := absolute(node.module)) is None:
                    continue
                for a in node.names:
                    sub = (*base, a.name)
                    add(sub if sub in known else base, node.lineno)
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _shortest_cycle(graph: dict[str, dict[str, int]], members: set[str], start: str) -> list[str]:
    """Breadth first from `start`, inside `members`, back to `start`."""
    paths, queue = {start: [start]}, [start]
    for v in queue:
        for w in sorted(graph[v]):
            if w == start:
                return paths[v] + [start]
            if w in members and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    raise AssertionError(f"{start} is on no cycle inside {sorted(members)}")


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Cycles in import order, the first module repeated at the end. For each strongly connected
    component: the shortest cycle through each module, less those whose modules all lie on another
    one kept; each starts at its first module by name."""
    cycles = []
    for comp in strongly_connected(graph):
        found = []
        for start in comp:
            c = _shortest_cycle(graph, set(comp), start)
            first = c.index(min(c))
            c = c[first:-1] + c[:first] + [min(c)]
            if c not in found:
                found.append(c)
        kept = list(found)
        for c in sorted(found, key=len):
            if any(d is not c and set(c) <= set(d) for d in kept):
                kept.remove(c)
        cycles += sorted(kept)
    return cycles


def format_cycle(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    """`a:3 -> b:7 -> a`: a imports b at its line 3, b imports a at its line 7."""
    return " -> ".join(f"{m}:{graph[m][n]}" for m, n in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def layer_index(module: str, layers) -> int:
    """The layer of a module is named by its first dotted part (`cluster.engine` -> `cluster`);
    a name no layer lists belongs to the layer that lists "*"."""
    head = module.split(".")[0]
    for i, (_, names) in enumerate(layers):
        if head in names:
            return i
    return next(i for i, (_, names) in enumerate(layers) if "*" in names)


def layer_violations(graph: dict[str, dict[str, int]], layers) -> list[str]:
    """Every import of a module in a layer above the importer's own (`layers` top to bottom, as
    (label, names) pairs). Imports within a layer are allowed; a listed layer may have no module
    yet."""
    bad = []
    for mod in sorted(graph):
        i = layer_index(mod, layers)
        for target, line in sorted(graph[mod].items()):
            j = layer_index(target, layers)
            if j < i:
                bad.append(f"{mod}:{line} imports {target}: layer {layers[j][0]} is above {layers[i][0]}")
    return bad


# Top to bottom. A module may import from its own layer and the layers below it.
GROUND = {"explain", "logs", "health", "idle", "timefmt", "__init__", "*"}  # "*": any other top-level module
LAYERS = (
    ("cli", {"cli", "commands"}),  # the parser (cli.py) and the commands it runs (commands/)
    ("serve", {"serve"}),  # the composition root: builds the engine and its neighbours, runs kopf
    ("handlers", {"handlers"}),
    ("cluster", {"cluster"}),
    ("whatif", {"whatif"}),
    ("remedies", {"remedies"}),  # what would place a pending pod: changes verified by its own cycle (read-only)
    ("scheduler", {"scheduler"}),  # the scheduling driver: ScheduleOne, the pod-group cycle, their ports
    ("cache", {"cache"}),  # the pure ClusterState, policies, workloads, StateHandle
    ("metricsources", {"metricsources"}),
    ("policy", {"policy"}),  # the SchedulingPolicy: models, limits, chain builder, validate()
    ("plugins", {"plugins"}),
    # Leaf modules (the decision record, log formatting, probes, the idle worker, the package's
    # constants): they may import framework and each other, and framework imports none of them.
    ("ground", GROUND),
    ("framework", {"framework"}),
)
ENGINE = "cluster.engine"
ENGINE_IMPORTERS = {"cli", "serve", "handlers"}  # the wiring
CACHE_FORBIDDEN = ("aiohttp", "kopf", "kubernetes")


@functools.lru_cache(maxsize=None)
def package_graph() -> dict[str, dict[str, int]]:
    return import_graph(PKG, "policy_scheduler")


def test_the_package_has_no_import_cycle():
    graph = package_graph()
    assert {"cli", "cluster.engine", "framework.interface", "plugins.node_name"} <= set(graph)
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (`a:3 -> b` = a imports b at its line 3):\n  " + "\n  ".join(
        format_cycle(graph, c) for c in cycles)


def test_every_subpackage_belongs_to_a_layer():
    named = set().union(*(names for _, names in LAYERS)) - {"*"}
    folders = {d.name for d in PKG.iterdir() if (d / "__init__.py").exists()}
    assert folders - named == set()


def test_no_module_imports_from_a_layer_above_its_own():
    bad = layer_violations(package_graph(), LAYERS)
    assert not bad, "upward imports:\n  " + "\n  ".join(bad)


def test_only_the_wiring_imports_the_engine():
    """cli.py, serve.py and handlers.py build the Engine; no collaborator is handed it."""
    bad = [f"{m}:{edges[ENGINE]}" for m, edges in sorted(package_graph().items())
           if ENGINE in edges and m not in ENGINE_IMPORTERS]
    assert not bad, f"{ENGINE} imported outside the wiring by: {', '.join(bad)}"


def quoted_annotations_naming(tree: ast.Module, name: str) -> list[int]:
    """Lines of the string annotations (of an argument, a return or a variable; `"Engine"`,
    `Optional["Engine"]`, `"Engine | None"`) that name `name`: a type only imported under
    TYPE_CHECKING, the way a module is handed an object it must not import."""
    annotations = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            annotations += [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
    lines = []
    for c in (c for ann in annotations if ann for c in ast.walk(ann)):
        if isinstance(c, ast.Constant) and isinstance(c.value, str):
            try:
                expr = ast.parse(c.value.strip(), mode="eval")
            except SyntaxError:
                continue
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(expr)):
                lines.append(c.lineno)
    return lines


def test_no_module_is_handed_the_engine_by_a_quoted_annotation():
    """The precise form of `grep -rn '"Engine"' operator/policy_scheduler/` finding nothing: that
    grep also finds `__all__ = [..., "Engine", ...]` in cluster/engine.py, which hands nobody
    anything. An unquoted annotation would need an import of cluster.engine, refused above."""
    hits = [f"{f.relative_to(PKG)}:{n}" for f in sorted(PKG.rglob("*.py")) if re.search(r"[\"']Engine\b", f.read_text())
            for n in quoted_annotations_naming(_tree(f), "Engine")]
    assert not hits, '"Engine" annotations at: ' + ", ".join(hits)


def test_whatif_imports_nothing_from_cluster():
    bad = [f"{m}:{line} imports {t}" for m, edges in sorted(package_graph().items()) if m.split(".")[0] == "whatif"
           for t, line in sorted(edges.items()) if t.split(".")[0] == "cluster"]
    assert not bad, "whatif/ reaches into cluster/:\n  " + "\n  ".join(bad)


def test_the_cache_is_pure():
    """cache/ imports neither the I/O layers nor a client."""
    above = {"cluster", "whatif", "cli", "serve", "handlers"}
    bad = [f"{m}:{line} imports {t}" for m, edges in sorted(package_graph().items()) if m.split(".")[0] == "cache"
           for t, line in sorted(edges.items()) if t.split(".")[0] in above]
    bad += [f"cache/{f.relative_to(PKG / 'cache')} imports {x}" for f in sorted((PKG / "cache").glob("**/*.py"))
            for x in sorted(_imports(f) & set(CACHE_FORBIDDEN))]
    assert not bad, "\n".join(bad)


def test_the_policy_is_pure_and_judged_in_one_place():
    """policy/ (the SchedulingPolicy's models, limits, chain builder and ``validate``) does no I/O,
    and the policy store and the admission webhook both judge a spec by ``policy.validate``."""
    files = sorted((PKG / "policy").glob("**/*.py"))
    assert {"check", "limits", "models", "chain"} <= {f.stem for f in files}
    bad = [f"policy/{f.relative_to(PKG / 'policy')} imports {x}" for f in files for x in sorted(_imports(f) & set(FORBIDDEN))]
    assert not bad, "\n".join(bad)
    graph = package_graph()
    for mod in ("cache.policies", "cluster.admission"):
        calls = [n for n in ast.walk(_tree(module_files(PKG)[mod])) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id == "validate"]
        assert "policy" in graph[mod] and calls, f"{mod} does not call policy.validate"


def test_the_driver_is_pure():
    """scheduler/ (the scheduling driver) reaches the world through its ports only: it imports
    neither the operator (cluster/), what-if, nor a client or kopf."""
    above = {"cluster", "whatif", "cli", "serve", "handlers", "commands"}
    bad = [f"{m}:{line} imports {t}" for m, edges in sorted(package_graph().items()) if m.split(".")[0] == "scheduler"
           for t, line in sorted(edges.items()) if t.split(".")[0] in above]
    files = sorted((PKG / "scheduler").glob("**/*.py"))
    assert {f.name for f in files} >= {"ports.py", "schedule_one.py", "group_cycle.py"}
    bad += [f"scheduler/{f.relative_to(PKG / 'scheduler')} imports {x}" for f in files
            for x in sorted(_imports(f) & {*CACHE_FORBIDDEN, *FORBIDDEN})]
    assert not bad, "\n".join(bad)


def test_the_operator_and_whatif_run_the_same_driver():
    graph = package_graph()
    for m in ("whatif.queue_run", "cluster.engine"):
        assert "scheduler.schedule_one" in graph[m], f"{m} does not import scheduler.schedule_one"


def test_the_cache_imports_nothing_from_the_driver():
    bad = [f"{m}:{line} imports {t}" for m, edges in sorted(package_graph().items()) if m.split(".")[0] == "cache"
           for t, line in sorted(edges.items()) if t.split(".")[0] == "scheduler"]
    assert not bad, "\n".join(bad)


# The plugin runtime's cycle entry points: one cycle (framework/cycle/schedule.py schedule_one),
# assume-Reserve-Permit and its undoing (ClusterState.reserve / unreserve, four arguments), the
# pod-group cycle (PodGroupCycle) and the binding cycle (run_binding). Only the driver runs a
# pod's cycle; the framework runs its own parts; the rest asks the driver.
CYCLE_ENTRIES = frozenset({"schedule_one", "reserve", "unreserve", "PodGroupCycle", "run_binding"})
CYCLE_CALLERS = {
    "scheduler/": CYCLE_ENTRIES,  # the driver
    "framework/": CYCLE_ENTRIES,  # the runtime itself (cycle/shadow.py: the rollout's candidate beside the chain)
    "plugins/podgroups/": frozenset({"schedule_one", "PodGroupCycle"}),  # the pod-group cycle's own family
    "whatif/drilldown.py": frozenset({"schedule_one"}),  # the explain-only re-run (post_filter=False, below)
    "remedies/probe.py": frozenset({"schedule_one"}),  # a suggested change verified (post_filter=False, below)
    "cluster/binding_tasks.py": frozenset({"run_binding"}),  # the operator's Binder: the async binding task
}
EXPLAIN_ONLY = {"whatif/drilldown.py", "remedies/probe.py"}  # their schedule_one calls run no PostFilter (no preemption)


def cycle_entry_calls(root: Path) -> dict[str, list[tuple[int, str, ast.Call]]]:
    """Every call of a cycle entry point, by module path under `root`: a name or an attribute
    named as one (or imported under another name), ``reserve``/``unreserve`` with ClusterState's
    four positional arguments (the gang caches' take one or two)."""
    found: dict[str, list[tuple[int, str, ast.Call]]] = {}
    for f in sorted(root.rglob("*.py")):
        tree = _tree(f)
        alias = {a.asname: a.name for node in import_statements(tree) if isinstance(node, ast.ImportFrom)
                 for a in node.names if a.asname and a.name in CYCLE_ENTRIES}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
            name = alias.get(name, name)
            if name not in CYCLE_ENTRIES or (name in ("reserve", "unreserve") and len(node.args) != 4):
                continue
            found.setdefault(f.relative_to(root).as_posix(), []).append((node.lineno, name, node))
    return found


def cycle_entry_violations(root: Path) -> list[str]:
    bad = []
    for rel, calls in sorted(cycle_entry_calls(root).items()):
        allowed = next((names for prefix, names in CYCLE_CALLERS.items() if rel.startswith(prefix)), frozenset())
        for line, name, call in calls:
            if name not in allowed:
                bad.append(f"{rel}:{line} calls {name}")
            elif rel in EXPLAIN_ONLY and name == "schedule_one" and not any(
                    k.arg == "post_filter" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in call.keywords):
                bad.append(f"{rel}:{line} calls {name} with its PostFilter")
    return bad


def test_only_the_driver_runs_a_pods_cycle():
    calls = cycle_entry_calls(PKG)
    assert {"scheduler/schedule_one.py", "scheduler/group_cycle.py", "cluster/binding_tasks.py"} <= set(calls)
    bad = cycle_entry_violations(PKG)
    assert not bad, "cycle entry points called outside the driver:\n  " + "\n  ".join(bad)


def test_a_cycle_run_outside_the_driver_is_reported(tmp_path):
    root = _write(tmp_path / "synth", {
        "scheduler/schedule_one.py": "def f(s, c, st, p, n):\n    s.reserve(c, st, p, n)\n    schedule_one(c)\n",
        "framework/gangs.py": "def g(cache, p):\n    cache.reserve(p, 'n')\n",
        "cluster/engine.py": ("from x import schedule_one as so\n\n\ndef h(state, c, st, p, n):\n"
                              "    so(c, p)\n    state.unreserve(c, st, p, n)\n"),
        "cluster/binding_tasks.py": "async def b(c):\n    await run_binding(c)\n    PodGroupCycle(c)\n",
        "whatif/drilldown.py": ("def d(c):\n    schedule_one(c, post_filter=False)\n"
                                "    schedule_one(c)\n"),
        "plugins/spread.py": "def s(cache, p):\n    cache.unreserve(p)\n",
    })
    assert cycle_entry_violations(root) == [
        "cluster/binding_tasks.py:3 calls PodGroupCycle",
        "cluster/engine.py:5 calls schedule_one",
        "cluster/engine.py:6 calls unreserve",
        "whatif/drilldown.py:3 calls schedule_one with its PostFilter",
    ]


# ---- the checks above can fail: a small package written for the purpose -------------------------


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_graph_reads_every_kind_of_import(tmp_path):
    root = _write(tmp_path / "synth", {
        "__init__.py": "NAME = 'x'\n",
        "top.py": "import synth.sub.d\nimport os\n",
        "sub/__init__.py": "from . import d\n",
        "sub/d.py": "from .. import NAME\nfrom ..sub import e\nfrom synth import top\n",
        "sub/e.py": "def f():\n    from synth.sub.d import g\n    import synth.missing\n",
        "sub/f.py": "from ...elsewhere import x\nfrom .e import *\n",
    })
    graph = import_graph(root, "synth")
    assert {m: set(e) for m, e in graph.items()} == {
        "__init__": set(),
        "top": {"sub.d"},
        "sub": {"sub.d"},
        "sub.d": {"__init__", "sub.e", "top"},
        "sub.e": {"sub.d"},
        "sub.f": {"sub.e"},
    }
    assert graph["sub.e"] == {"sub.d": 2}


def test_a_cycle_through_a_type_checking_import_in_a_function_is_reported(tmp_path):
    root = _write(tmp_path / "synth", {
        "__init__.py": "",
        "a.py": "from . import b\n",
        "b.py": ("from typing import TYPE_CHECKING\n\n\n"
                 "def f():\n    if TYPE_CHECKING:\n        from .a import A\n"),
        "c.py": "from .a import b\n",  # into the cycle, not on it
    })
    graph = import_graph(root, "synth")
    assert strongly_connected(graph) == [["a", "b"]]
    assert import_cycles(graph) == [["a", "b", "a"]]
    assert format_cycle(graph, ["a", "b", "a"]) == "a:1 -> b:6 -> a"


def test_every_module_of_a_larger_cycle_is_named_in_order():
    graph = {"binding": {"chain": 1, "interface": 2}, "chain": {"registry": 1}, "registry": {"interface": 1},
             "interface": {"binding": 1}, "status": {}, "x": {"binding": 1}}
    # binding -> interface -> binding and the cycle through chain lie on the one through registry
    assert import_cycles(graph) == [["binding", "chain", "registry", "interface", "binding"]]
    graph["interface"]["status"] = 2
    graph["status"] = {"interface": 1}
    assert import_cycles(graph) == [["binding", "chain", "registry", "interface", "binding"],
                                    ["interface", "status", "interface"]]
    assert import_cycles({"a": {"b": 1}, "b": {}}) == []


def test_a_quoted_engine_annotation_is_found():
    tree = ast.parse('__all__ = ["Engine"]\n'
                     'def f(engine: "Engine", other: Optional["Engine"] = None) -> "Engine | None": ...\n'
                     'class B:\n    engine: "Engine"\n    def g(self, x: "EngineRoom", y: Engine) -> None: ...\n')
    assert quoted_annotations_naming(tree, "Engine") == [2, 2, 2, 4]


def test_an_upward_import_is_reported(tmp_path):
    files = {
        "__init__.py": "",
        "top/__init__.py": "",
        "top/t.py": "from ..low import l\nfrom .. import leaf\n",
        "low/__init__.py": "",
        "low/l.py": "from ..leaf import X\n",
        "leaf.py": "X = 1\n",
    }
    layers = (("top", {"top"}), ("absent", {"absent"}), ("low", {"low"}), ("ground", {"*"}))
    assert layer_violations(import_graph(_write(tmp_path / "synth", files), "synth"), layers) == []

    _write(tmp_path / "synth", {"low/l.py": "from ..leaf import X\n\n\ndef f():\n    from ..top.t import Y\n",
                                "leaf.py": "import synth.low\n"})
    assert layer_violations(import_graph(tmp_path / "synth", "synth"), layers) == [
        "leaf:1 imports low: layer low is above ground",
        "low.l:5 imports top.t: layer top is above low",
    ]


def test_a_plugin_importing_another_plugin_or_family_is_reported(tmp_path):
    files = {
        "__init__.py": "",
        "framework/__init__.py": "",
        "framework/core.py": "X = 1\n",
        "cache.py": "X = 2\n",
        "plugins/__init__.py": "import importlib\n",
        "plugins/alone.py": "from ..framework.core import X\n",
        "plugins/fam/__init__.py": "from .model import M\n",
        "plugins/fam/model.py": "from ...framework import core\nM = 1\n",
        "plugins/fam/plugin.py": "from .model import M\nfrom . import model\nfrom synth.plugins.fam.model import M\n",
    }
    root = _write(tmp_path / "synth", files)
    assert plugin_units(root / "plugins") == {"alone": "alone", "fam": "fam", "fam.model": "fam", "fam.plugin": "fam"}
    assert plugin_leaf_violations(root, "synth") == []

    _write(root, {"plugins/alone.py": "from .fam.model import M\n",
                  "plugins/fam/plugin.py": "from .. import alone\n\n\ndef f():\n    from ...cache import X\n",
                  "plugins/fam/model.py": "import synth.plugins.alone\n"})
    assert plugin_leaf_violations(root, "synth") == [
        "plugins.alone:1 imports plugins.fam.model: another plugin or family than alone",
        "plugins.fam.model:1 imports plugins.alone: another plugin or family than fam",
        "plugins.fam.plugin:5 imports cache: outside the core",
        "plugins.fam.plugin:1 imports plugins.alone: another plugin or family than fam",
    ]


MAX_LINES = 600  # a module past this wants splitting along a seam (README's architecture names them)


def test_no_module_is_over_max_lines():
    sizes = {str(f.relative_to(PKG)): len(f.read_text().splitlines()) for f in PKG.rglob("*.py")}
    assert {"cli.py", "cluster/engine.py", "framework/cycle/schedule.py",
            "framework/queue/scheduling_queue.py"} <= set(sizes)
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_the_plugin_contract_leaves_import_only_each_other():
    """framework/status.py imports nothing of the package, waiting.py only status: every other
    module can depend on them (the cycle the waiting pods once closed cannot come back)."""
    graph = package_graph()
    assert set(graph["framework.status"]) == set()
    assert set(graph["framework.waiting"]) == {"framework.status"}
