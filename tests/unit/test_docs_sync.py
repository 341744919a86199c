"""Documentation that follows the code: the flags table of `run` in docs/operations.md lists exactly
the flags of `run --help`, and docs/policy-reference.md's count of the plugins
policies/default.yaml lists and shows is the chain builder's."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from policy_scheduler.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def section(path: Path, heading: str) -> str:
    """The text under a `## heading`, up to the next heading of that level or above."""
    text = path.read_text()
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ")[0]
    end = re.search(rf"\n#{{1,{len(level)}}} ", text[start + 1:])
    return text[start: start + 1 + end.start()] if end else text[start:]


def table_flags(text: str) -> list[str]:
    """The flags in the first cell of each row of the markdown table: `--a`, `-b`."""
    flags = []
    for line in text.splitlines():
        if line.startswith("| `-"):
            flags += re.findall(r"`(-[-\w]+)`", line.split("|")[1])
    return flags


def run_flags() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return [f for a in sub.choices["run"]._actions for f in a.option_strings if f not in ("-h", "--help")]


def test_the_run_flags_table_lists_every_flag_of_run_help():
    documented = table_flags(section(ROOT / "docs" / "operations.md", "## policy-scheduler run flags"))
    flags = run_flags()
    assert len(flags) >= 40 and "--kubeconfig" in documented
    missing = [f for f in flags if f not in documented]
    extra = [f for f in documented if f not in flags]
    assert (missing, extra) == ([], []), (f"docs/operations.md's run flags table lacks {missing} and lists {extra}, "
                                          "which `policy-scheduler run --help` does not have")
    assert len(documented) == len(set(documented))


def test_the_table_reader_finds_what_is_missing():
    rows = "| Flag | Default | Meaning |\n|---|---|---|\n| `--a`, `-a` | `1` | `--b` is elsewhere |\n| `--c` | 2 | x |\n"
    assert table_flags(rows) == ["--a", "-a", "--c"]


def test_the_policy_reference_counts_the_default_policys_plugins_as_the_chain_builder_does():
    from policy_scheduler.policy.chain import build_chain
    from policy_scheduler.plugins import default_registry

    spec = yaml.safe_load((ROOT / "policies" / "default.yaml").read_text())["spec"]
    chain = build_chain(spec, default_registry())
    listed, shown = len(spec["plugins"]), len(chain.resolved)  # status.pluginCount, the PLUGINS column
    assert [p.name for p in chain.resolved][::len(chain.resolved) - 1] == ["SchedulingGates", "DefaultBinder"]
    text = re.sub(r"\s+", " ", (ROOT / "docs" / "policy-reference.md").read_text())
    said = re.findall(r"the (\d+) plugins of `policies/default\.yaml` show as (\d+)", text)
    assert said == [(str(listed), str(shown))], f"policies/default.yaml: {listed} plugins listed, {shown} shown"
