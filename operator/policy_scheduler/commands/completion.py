"""`policy-scheduler completion bash|zsh`: a shell completion script generated from the argument
parser, so it knows every command, subcommand and flag of this version (nothing to install but the
script). Completes subcommands, flags, the values of flags with a fixed set (``--log-level``,
``-o``, ``--leader-elect``) and file names for flags that take a file.

The script is static: ``path`` below is a command with its subcommands (``""``, ``"rollout"``,
``"rollout history"``); the script's functions map each path to its subcommands and flags, and
each (path, flag) to what the flag takes. zsh runs the bash script through ``bashcompinit``."""

from __future__ import annotations

import argparse
import re
import sys

SHELLS = ("bash", "zsh")
PROGRAMS = ("policy-scheduler", "kubectl-policy_scheduler")
FUNCTION = "_policy_scheduler"


def walk(parser: argparse.ArgumentParser, path: str = ""):
    """(path, words, flags, {flag: what it takes}) for the parser and every subparser, depth
    first. Words: its subcommands, then the choices of its positional arguments (``completion``'s
    shell). What a flag takes: ``choices:a b c``, ``file``, or ``any``; flags without a value are
    not in the dict."""
    subs: dict[str, argparse.ArgumentParser] = {}
    words: list[str] = []
    flags: list[str] = []
    values: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            subs.update({name: p for name, p in action.choices.items()})
            continue
        if not action.option_strings:
            words += [str(c) for c in action.choices or ()]
            continue
        flags += action.option_strings
        kind = value_kind(action)
        if kind:
            values.update({flag: kind for flag in action.option_strings})
    yield path, list(subs) + words, flags, values
    seen: set[int] = set()
    for name, p in subs.items():
        if id(p) not in seen:  # an alias names the same parser
            seen.add(id(p))
            yield from walk(p, f"{path} {name}".strip())


def value_kind(action: argparse.Action) -> str | None:
    """What a flag's value is for completion: None (it takes none), choices, a file, or any text."""
    if action.nargs == 0:
        return None
    if action.choices:
        return "choices:" + " ".join(str(c) for c in action.choices)
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    if "FILE" in metavar:
        return "file"
    if re.fullmatch(r"[a-z]+(\|[a-z]+)+", metavar):  # true|false
        return "choices:" + metavar.replace("|", " ")
    return "any"


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def bash_script(parser: argparse.ArgumentParser) -> str:
    tree = list(walk(parser))
    words = "\n".join(f"        {_quote(path)}) echo {_quote(' '.join(s))} ;;" for path, s, _, _ in tree if s)
    flags = "\n".join(f"        {_quote(path)}) echo {_quote(' '.join(f))} ;;" for path, _, f, _ in tree)
    values = "\n".join(f"        {_quote(f'{path}|{flag}')}) echo {_quote(kind)} ;;"
                       for path, _, _, v in tree for flag, kind in v.items())
    f = FUNCTION
    return f"""# {parser.prog} completion for bash, generated from its flags by `{parser.prog} completion bash`.
# Load it in this shell:   source <({parser.prog} completion bash)
# or for every shell:      {parser.prog} completion bash > ~/.local/share/bash-completion/completions/{parser.prog}

{f}_words() {{
    case "$1" in
{words}
    esac
}}

{f}_flags() {{
    case "$1" in
{flags}
    esac
}}

# what flag $2 of command path $1 takes: choices:WORDS, file or any (nothing: no value)
{f}_value() {{
    case "$1|$2" in
{values}
    esac
}}

{f}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" flag="" path="" w s i
    COMPREPLY=()
    # the command path: the subcommands among the words before the cursor (a flag's value skipped)
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        case "$w" in
            -*=*) continue ;;
            -*) # its value: the next word ("=" and the word after it when bash split --flag=value)
                if [[ -n "$({f}_value "$path" "$w")" && "${{COMP_WORDS[i+1]}}" != -* ]] && ((i + 1 < COMP_CWORD)); then
                    ((i++))
                    [[ "${{COMP_WORDS[i]}}" == "=" ]] && ((i++))
                fi
                continue ;;
        esac
        for s in $({f}_words "$path"); do
            if [[ "$s" == "$w" ]]; then path="${{path:+$path }}$w"; break; fi
        done
    done
    # the flag whose value is being typed: --flag VALUE, --flag=VALUE (one word when "=" does not
    # break words, as in zsh: then the replies are --flag=VALUE too)
    local joined=""
    if ((COMP_CWORD > 1)); then prev="${{COMP_WORDS[COMP_CWORD-1]}}"; fi
    if [[ "$prev" == "=" ]] && ((COMP_CWORD > 2)); then
        flag="${{COMP_WORDS[COMP_CWORD-2]}}"
    elif [[ "$cur" == --*=* ]]; then
        flag="${{cur%%=*}}"; cur="${{cur#*=}}"; joined="$flag="
    elif [[ "$prev" == -* ]]; then
        flag="$prev"
    fi
    if [[ -n "$flag" ]]; then
        local kind
        kind="$({f}_value "$path" "$flag")"
        case "$kind" in
            choices:*) COMPREPLY=($(compgen -P "$joined" -W "${{kind#choices:}}" -- "$cur")); return 0 ;;
            file) COMPREPLY=($(compgen -P "$joined" -f -- "$cur"))
                  type compopt &>/dev/null && compopt -o filenames
                  return 0 ;;
            any) return 0 ;;
        esac
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$({f}_flags "$path")" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$({f}_words "$path")" -- "$cur"))
    fi
    return 0
}}

complete -F {f} {' '.join(PROGRAMS)}
"""


def zsh_script(parser: argparse.ArgumentParser) -> str:
    return (f"#compdef {' '.join(PROGRAMS)}\n"
            f"# {parser.prog} completion for zsh, generated from its flags by `{parser.prog} completion zsh`.\n"
            f"# Load it in this shell:   source <({parser.prog} completion zsh)\n"
            "# (the bash completion, run by zsh's bashcompinit)\n\n"
            "autoload -U +X compinit && { (( $+functions[compdef] )) || compinit; }\n"
            "autoload -U +X bashcompinit && bashcompinit\n\n" + bash_script(parser).split("\n\n", 1)[1])


def cmd_completion(a: argparse.Namespace) -> int:
    sys.stdout.write((bash_script if a.shell == "bash" else zsh_script)(a.root_parser))
    return 0


def add_parser(sub, root: argparse.ArgumentParser) -> None:
    c = sub.add_parser("completion", help="print a shell completion script (bash or zsh)",
                       description="Prints a completion script for bash or zsh: subcommands, flags, the values of "
                                   "flags with a fixed set, file names. Load it with `source <(policy-scheduler "
                                   "completion bash)` (in ~/.bashrc or ~/.zshrc for every shell), or install it: "
                                   "`policy-scheduler completion bash > "
                                   "~/.local/share/bash-completion/completions/policy-scheduler`.")
    c.add_argument("shell", choices=SHELLS)
    c.set_defaults(fn=cmd_completion, root_parser=root)
