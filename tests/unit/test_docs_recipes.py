"""docs/development.md's "Where a new check goes" and "Recipes" name files and code: every file
path they mention exists, and every name resolves (``policy/check.py:validate``,
``cluster/telemetry.py:Telemetry.__init__``, dotted ``policy.validate``), so that a move or a rename
that leaves them behind fails here.

What counts, among the section's `code spans`:
- a path: a span with a ``/`` or a file suffix, relative to the repository's root or to the
  package (``operator/policy_scheduler/``); ``<name>`` placeholders check their folder only;
- ``<package file>.py:<Name>[.<attr>...]``: the file, and the name in the module it is;
- a dotted name whose first part is a module or folder of the package (``policy.validate``,
  ``plugins.PLUGIN_MODULES``): imported, then looked up attribute by attribute.
Other spans (``make crd``, ``spec.tuning``, ``NAME``) are prose.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import policy_scheduler

ROOT = Path(__file__).resolve().parents[2]
PKG = Path(policy_scheduler.__file__).resolve().parent
DOC = ROOT / "docs" / "development.md"
SECTIONS = ("## Where a new check goes", "## Recipes")
RECIPES = ("### A plugin", "### A metric", "### A CLI command", "### A policy field")
SUFFIXES = (".py", ".md", ".yaml", ".json", ".sh", ".toml")


def section(text: str, heading: str) -> str:
    """The text under ``heading``, up to the next heading of its level or above."""
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ")[0]
    end = re.search(rf"\n#{{1,{len(level)}}} ", text[start + 1:])
    return text[start: start + 1 + end.start()] if end else text[start:]


def top_names() -> set[str]:
    """The package's top-level modules and folders: what a dotted name may start with."""
    return {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}


def resolve(module: str, attrs: list[str]) -> str | None:
    """Why ``module`` and then ``attrs`` cannot be found (None: found)."""
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        return f"cannot import {module}: {e}"
    for i, a in enumerate(attrs):
        if not hasattr(obj, a):
            return f"{module}.{'.'.join(attrs[:i + 1])} does not exist"
        obj = getattr(obj, a)
    return None


def _path(rel: str) -> Path | None:
    for base in (ROOT, PKG):
        if (base / rel).exists():
            return base / rel
    return None


def problems(text: str, tops: set[str]) -> tuple[list[str], int]:
    """What in ``text`` does not exist, and how many references were checked."""
    bad, checked = [], 0
    for span in re.findall(r"`([^`\n]+)`", text):
        span = span.strip().removesuffix("()")
        head, sep, qual = span.partition(":")
        if sep and head.endswith(".py") and re.fullmatch(r"[A-Za-z_][\w.]*", qual):
            checked += 1
            f = _path(head)
            if f is None or not f.is_relative_to(PKG):
                bad.append(f"{span}: {head} is not a file of the package")
                continue
            parts = f.relative_to(PKG).with_suffix("").parts
            module = ".".join(["policy_scheduler", *parts[:-1]] if parts[-1] == "__init__"
                              else ["policy_scheduler", *parts])
            why = resolve(module, qual.split("."))
            if why:
                bad.append(f"{span}: {why}")
        elif " " not in span and ("/" in span or span.endswith(SUFFIXES)):
            checked += 1
            rel = span.split("<")[0].rsplit("/", 1)[0] if "<" in span else span
            if _path(rel) is None:
                bad.append(f"{span}: no such file or folder")
        elif re.fullmatch(r"[a-z_]\w*(\.[A-Za-z_]\w*)+", span) and span.split(".")[0] in tops:
            checked += 1
            parts = span.split(".")
            i = next((i for i in range(len(parts), 0, -1) if _is_module(parts[:i])), 0)
            why = resolve(".".join(["policy_scheduler", *parts[:i]]), parts[i:]) if i else "no module"
            if why:
                bad.append(f"{span}: {why}")
    return bad, checked


def _is_module(parts: list[str]) -> bool:
    """``parts`` name a module or a package of the package."""
    return PKG.joinpath(*parts).with_suffix(".py").exists() or (PKG.joinpath(*parts) / "__init__.py").exists()


def test_the_sections_name_only_files_and_names_that_exist():
    text = DOC.read_text()
    recipes = section(text, "## Recipes")
    assert all(f"\n{h}\n" in recipes for h in RECIPES), f"the recipes are {RECIPES}"
    tops = top_names()
    for heading in SECTIONS:
        bad, checked = problems(section(text, heading), tops)
        assert checked >= 20, f"{heading}: only {checked} references checked"
        assert not bad, f"docs/development.md {heading!r} names what does not exist:\n  " + "\n  ".join(bad)


def test_the_checker_finds_what_is_missing():
    tops = top_names()
    text = ("`policy/check.py:validate` `policy/check.py:nothing_here` `policy.validate` `policy.gone` "
            "`plugins.PLUGIN_MODULES` `cluster/telemetry.py:Telemetry.attempt` `cluster/telemetry.py:Telemetry.gone` "
            "`docs/operations.md` `docs/gone.md` `plugins/<module>.py` `nowhere/<module>.py` `make crd` "
            "`spec.tuning` `hack/dashboard.py:x`")
    bad, checked = problems(text, tops)
    assert checked == 12
    assert [b.split(":")[0] for b in bad] == [
        "policy/check.py", "policy.gone", "cluster/telemetry.py", "docs/gone.md", "nowhere/<module>.py",
        "hack/dashboard.py"]
    assert "policy_scheduler.policy.check.nothing_here does not exist" in bad[0]
