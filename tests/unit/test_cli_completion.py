"""`policy-scheduler completion bash|zsh`: the script is generated from the parser, loads in the
shell, and completes subcommands, flags, the values of flags with a fixed set and file names."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from policy_scheduler import cli
from policy_scheduler.cli import build_parser
from policy_scheduler.commands.completion import walk

BIN = Path(sys.executable).parent
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def bash(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=ENV)


def test_the_script_loads_and_registers_the_commands():
    assert (BIN / "policy-scheduler").exists()
    p = bash("source <(policy-scheduler completion bash) && complete -p policy-scheduler kubectl-policy_scheduler")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["complete -F _policy_scheduler policy-scheduler",
                                     "complete -F _policy_scheduler kubectl-policy_scheduler"]
    assert p.stderr == ""


@pytest.fixture(scope="module")
def complete(tmp_path_factory):
    """Shell text that loads the script and defines `t WORD...`: the replies for the last word."""
    path = tmp_path_factory.mktemp("completion") / "policy-scheduler.bash"
    path.write_text(subprocess.run([BIN / "policy-scheduler", "completion", "bash"], capture_output=True, text=True,
                                   check=True).stdout)
    return textwrap.dedent(f"""
        source {path}
        t() {{ COMP_WORDS=("$@"); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMPREPLY=(); _policy_scheduler
              echo "${{COMPREPLY[*]}}"; }}
    """)


@pytest.mark.parametrize("words,expected", [
    ("policy-scheduler ro", "rollout"),
    ("policy-scheduler ''", "run crd explain snapshot simulate tune clusters rollout completion"),
    ("policy-scheduler rollout ''", "history undo diff promote abort"),
    ("policy-scheduler rollout history --rev", "--revision --revision-namespace"),
    ("policy-scheduler run --log-f", "--log-format"),
    ("policy-scheduler run --log-level ''", "debug info warning error"),
    ("policy-scheduler run --log-level = w", "warning"),  # --log-level=w, as bash splits it
    ("policy-scheduler run --leader-elect = f", "false"),
    ("policy-scheduler run --log-level=w", "--log-level=warning"),  # one word (no "=" in COMP_WORDBREAKS)
    ("policy-scheduler run --log-level debug --namespace rollout --q", "--qps"),  # values are not commands
    ("policy-scheduler explain demo/x -o ''", "text json yaml"),
    ("policy-scheduler explain demo/x --top 3 -o y", "yaml"),
    ("policy-scheduler explain --namespace ''", ""),  # any text: nothing offered
    ("policy-scheduler completion ''", "bash zsh"),
])
def test_bash_completes(complete, words, expected):
    p = bash(complete + f"t {words}")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.strip() == expected


def test_a_file_flag_completes_file_names(complete, tmp_path):
    (tmp_path / "snap.json").write_text("{}")
    (tmp_path / "pods.yaml").write_text("")
    p = bash(complete + f"compopt() {{ :; }}; t policy-scheduler tune --snapshot {tmp_path}/sn; "
             f"t policy-scheduler snapshot -o {tmp_path}/p")
    assert p.stdout.splitlines() == [f"{tmp_path}/snap.json", f"{tmp_path}/pods.yaml"], p.stderr


def test_every_flag_and_subcommand_of_the_parser_is_in_the_script(capsys):
    assert cli.main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    tree = {path: (words, flags, values) for path, words, flags, values in walk(build_parser())}
    assert {"", "run", "explain", "tune", "rollout", "rollout undo", "completion"} <= set(tree)
    assert "--plugin-metrics-sample-percent" in tree["run"][1] and tree["run"][2]["--log-format"] == "choices:text json"
    assert tree["tune"][2]["--snapshot"] == "file" and "--json" not in tree["tune"][2]  # --json takes no value
    assert cli.main(["completion", "zsh"]) == 0
    zsh = capsys.readouterr().out
    assert zsh.startswith("#compdef policy-scheduler kubectl-policy_scheduler\n") and "bashcompinit" in zsh
    assert script.split("\n\n", 1)[1] in zsh
    for path, (words, flags, _) in tree.items():
        assert f"'{path}') echo '{' '.join(flags)}'" in script
        if words:
            assert f"'{path}') echo '{' '.join(words)}'" in script


def test_zsh_completes_through_its_completion_system():
    """A real interactive zsh (zpty), compinit, the script sourced; TAB after `policy-scheduler ro`."""
    script = textwrap.dedent(r"""
        zmodload zsh/zpty
        zpty -b z 'zsh -f -i'
        zpty -w z 'PS1="> "; autoload -U compinit && compinit -u; source <(policy-scheduler completion zsh); print LOADED-$((40+2))'
        read_until() {  # the pty's output until $1 shows, for at most 20 s
          local out="" chunk; integer i
          for (( i = 0; i < 200; i++ )); do
            zpty -r -t z chunk && out+=$chunk
            [[ $out == *$1* ]] && { print -r -- "$out"; return 0 }
            sleep 0.1
          done
          print -r -- "$out"; return 1
        }
        read_until LOADED-42 > /dev/null || { print "not loaded"; exit 1 }
        zpty -n -w z $'policy-scheduler ro\t'
        read_until 'policy-scheduler rollout' > /dev/null && print ROLLOUT
        zpty -n -w z $'\x15policy-scheduler run --log-level=war\t'
        read_until 'log-level=warning' > /dev/null && print WARNING
        zpty -d z
    """)
    p = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, timeout=90, env=ENV)
    assert p.stdout.split() == ["ROLLOUT", "WARNING"], (p.stdout, p.stderr)
