"""README's architecture section and docs/development.md name modules: each must exist. A module
moved or removed without its docs fails here, naming the doc, the line and the path.

How a name is read:
- a path with a folder (`cluster/engine.py`, `framework/queue/`, `tests/unit/test_layout.py`) must
  exist under `operator/policy_scheduler/` or the repository's root, or end the path of one there
  (`model/labels.py` in a paragraph about `framework/`);
- in README's package tree, an entry (a name at the start of a line, indented two spaces per level)
  is the folder above it plus its name, so `engine.py` under `cluster/` is `cluster/engine.py`;
- any other bare module name (`engine.py` in a sentence) must be some file's name in the package,
  the tests, hack/ or bench/.
"""

import re
from pathlib import Path

import policy_scheduler

PKG = Path(policy_scheduler.__file__).resolve().parent
ROOT = PKG.parents[1]
PATH = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)+(?:[A-Za-z_][\w-]*\.(?:py|md|yaml|sh|toml))?|[A-Za-z_]\w*\.py)(?![\w/])")
ENTRY = re.compile(r"^( +)((?:[A-Za-z_][\w-]*(?:\.py|/))(?:, [A-Za-z_][\w-]*(?:\.py|/))*)(?=\s|$)")
NOT_OURS = {"kopf/", "k8s.io/", "pkg/", "cmd/", "sigs.k8s.io/", "scheduler-plugins/", "staging/"}


TOPS = ("operator", "tests", "hack", "bench", "docs", "charts", "manifests", "crds", "policies")


def _files() -> list[str]:
    """Every file and folder of the repository's own trees, as paths from the root."""
    out = []
    for top in TOPS:
        out += [str(p.relative_to(ROOT)) + ("/" if p.is_dir() else "") for p in (ROOT / top).rglob("*")
                if "__pycache__" not in p.parts]
    return out


def _basenames() -> set[str]:
    return {p.rstrip("/").rsplit("/", 1)[-1] + ("/" if p.endswith("/") else "") for p in _files()}


def _exists(path: str) -> bool:
    bare = path.rstrip("/")
    if (PKG / bare).exists() or (ROOT / bare).exists():
        return True
    return any(f.rstrip("/").endswith("/" + bare) for f in _files())


def _section(text: str, title: str) -> tuple[int, str]:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text.count("\n", 0, start) + 1, text[start:end if end != -1 else len(text)]


def _tree_entries(block: list[tuple[int, str]]) -> tuple[list[tuple[int, str]], set[int]]:
    """(line, path) of each entry of the package tree, and the lines whose entries were read."""
    out, stack, seen = [], [], set()
    for n, line in block:
        if line.startswith("operator/policy_scheduler/"):
            stack = [(0, "")]
            continue
        m = ENTRY.match(line)
        if not stack or not m or len(m.group(1)) % 2 or len(m.group(1)) > 2 * len(stack):
            continue
        depth = len(m.group(1)) // 2
        del stack[depth:]
        parent = stack[-1][1] if stack else ""
        names = m.group(2).split(", ")
        for name in names:
            out.append((n, parent + name))
        if len(names) == 1 and names[0].endswith("/"):
            stack.append((depth, parent + names[0]))
        seen.add(n)
    return out, seen


def problems(doc: str, text: str, first_line: int = 1) -> list[str]:
    lines = list(enumerate(text.splitlines(), first_line))
    bad, known = [], _basenames()
    tree_lines: set[int] = set()
    in_fence, fence = False, []
    for n, line in lines + [(0, "```")]:
        if line.startswith("```"):
            if in_fence and fence and fence[0][1].startswith("operator/policy_scheduler/"):
                entries, tree_lines = _tree_entries(fence)
                bad += [f"{doc}:{m}: {p}" for m, p in entries if not _exists(p)]
            in_fence, fence = not in_fence, []
        elif in_fence:
            fence.append((n, line))
    for n, line in lines:
        for m in PATH.finditer(line):
            p = m.group(1)
            if n in tree_lines and m.start() < len(line) - len(line.lstrip()) + 40 and ENTRY.match(line[:m.end()]):
                continue  # the tree's entry itself, read above with its folder
            if any(p.startswith(x) for x in NOT_OURS) or "://" in line[max(m.start() - 8, 0):m.start()]:
                continue
            if line[max(m.start() - 1, 0):m.start()] in ("$", "{"):
                continue  # a shell variable: $PWD/
            ok = _exists(p) if "/" in p.rstrip("/") else (p in known or _exists(p))
            if not ok:
                bad.append(f"{doc}:{n}: {p}")
    return bad


def test_readme_architecture_names_only_modules_that_exist():
    first, section = _section((ROOT / "README.md").read_text(), "Architecture")
    assert "operator/policy_scheduler/" in section
    assert problems("README.md", section, first) == []


def test_development_guide_names_only_modules_that_exist():
    text = (ROOT / "docs" / "development.md").read_text()
    assert "cluster/engine.py" in text
    assert problems("docs/development.md", text) == []


def test_a_module_that_does_not_exist_is_found():
    text = ("See `cluster/engine.py` and `cluster/nowhere.py`, and gone_module.py.\n"
            "```\noperator/policy_scheduler/\n  cluster/      I/O\n    engine.py   the loop\n"
            "    missing.py  not there\n  cache/\n    engine.py   not in cache/\n```\n")
    assert problems("x.md", text) == ["x.md:6: cluster/missing.py", "x.md:8: cache/engine.py",
                                      "x.md:1: cluster/nowhere.py", "x.md:1: gone_module.py"]


def _diagram(text: str) -> str:
    start = text.index("```\ninformer (cluster/informer.py")
    return text[start:text.index("```\n", start + 4) + 4]


def test_readme_and_the_development_guide_draw_one_diagram():
    """A pod's way from watch event to Binding is drawn once: README's copy is the guide's."""
    _, section = _section((ROOT / "README.md").read_text(), "Architecture")
    guide = (ROOT / "docs" / "development.md").read_text()
    assert "scheduler/schedule_one.py" in _diagram(guide)
    assert _diagram(section) == _diagram(guide)
