"""``samzamp completion bash|zsh``: print a shell completion script for ``samzamp`` and its aliases.

The script is generated from ``COMMANDS`` and each command's ``build_parser``: the subcommands, their
options, the options that take a value (with their choices, e.g. ``--log-level``), positional
choices, and nested subcommands (a command's argparse subparsers), so a command added to the table
completes with nothing else to change. Where the script offers nothing (a config path), the shell
completes file names. zsh runs the same functions through its ``bashcompinit``: no dependency.

Install (see ``samzamp completion --help``)::

    samzamp completion bash > ~/.local/share/bash-completion/completions/samzamp
    echo 'source <(samzamp completion zsh)' >> ~/.zshrc    # after compinit
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, cast

from samzamp.cli.common import EXIT_CONFIG, EXIT_OK, new_parser, parser_actions
from samzamp.cli.main import ALIASES, COMMANDS
from samzamp.cli.main import PROG as SAMZAMP

__all__ = [
    "EXIT_CODES",
    "PROG",
    "Spec",
    "bash_script",
    "build_parser",
    "main",
    "parser_spec",
    "samzamp_spec",
    "zsh_script",
]

PROG = "samzamp completion"
SHELLS = ("bash", "zsh")

EXIT_CODES = {
    EXIT_OK: "the script is printed",
    EXIT_CONFIG: "bad arguments (a shell other than bash or zsh)",
}


@dataclass(frozen=True)
class Spec:
    """What a command line accepts, for completion: its options, the options that take a value and
    their choices (empty: any value), the choices of its positionals in order, and its subcommands."""

    options: tuple[str, ...]
    valued: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    positionals: tuple[tuple[str, ...], ...] = ()
    commands: Mapping[str, Spec] = field(default_factory=dict)


def _choices(action: argparse.Action) -> tuple[str, ...]:
    return tuple(str(c) for c in action.choices) if action.choices is not None else ()


def parser_spec(p: argparse.ArgumentParser) -> Spec:
    """The ``Spec`` of a parser ``new_parser`` built, its subparsers' included."""
    options: list[str] = []
    valued: dict[str, tuple[str, ...]] = {}
    positionals: list[tuple[str, ...]] = []
    commands: dict[str, Spec] = {}
    for action in parser_actions(p):
        if action.option_strings:
            options += action.option_strings
            if action.nargs != 0:  # flags (store_true, help, version) take none
                valued.update(dict.fromkeys(action.option_strings, _choices(action)))
        elif isinstance(action.choices, Mapping) and all(
            isinstance(sub, argparse.ArgumentParser) for sub in action.choices.values()
        ):  # subparsers: a name per choice (aliases included), each its own parser
            commands.update({str(name): parser_spec(sub) for name, sub in action.choices.items()})
        else:
            positionals.append(_choices(action))
    return Spec(tuple(options), valued, tuple(positionals), commands)


class _CommandModule(Protocol):
    def build_parser(self, prog: str = ...) -> argparse.ArgumentParser: ...


def samzamp_spec() -> Spec:
    """The ``Spec`` of ``samzamp``: its own options and every command of ``COMMANDS``."""
    commands = {
        name: parser_spec(cast(_CommandModule, importlib.import_module(c.module)).build_parser(f"{SAMZAMP} {name}"))
        for name, c in COMMANDS.items()
    }
    return Spec(("-h", "--help", "--version"), {}, (), commands)


def _flatten(spec: Spec, path: str = "") -> dict[str, Spec]:
    out = {path: spec}
    for name, sub in spec.commands.items():
        out.update(_flatten(sub, f"{path} {name}".strip()))
    return out


def _quote(text: str) -> str:
    return shlex.quote(text) if text else '""'


def _words(values: tuple[str, ...] | list[str]) -> str:
    # One shell word holding a space-separated list (compgen -W and the membership tests split it).
    return shlex.quote(" ".join(values))


def _case(function: str, what: str, rows: dict[str, str]) -> list[str]:
    lines = [f"# {what}", f"{function}() {{", '    case "$1" in']
    lines += [f"        {_quote(key)}) echo {value} ;;" for key, value in rows.items() if value != "''"]
    lines += ["    esac", "}"]
    return lines


# The walk over the words before the cursor: which command path they reach, whether the word under
# the cursor is an option's value, and how many positionals came before it. Names avoid zsh's
# special parameters (path, words), as zsh runs this through bashcompinit.
_COMPLETE = r"""
_samzamp_complete() {
    # $1: the command path the script's name stands for ("" for samzamp, "run" for samzamp-container)
    [ -n "${ZSH_VERSION-}" ] && setopt local_options ksh_arrays
    local cmdpath="$1" cur="${COMP_WORDS[COMP_CWORD]}" word valued="" npos=0 i=1
    COMPREPLY=()
    while [ "$i" -lt "$COMP_CWORD" ]; do
        word="${COMP_WORDS[i]}"
        i=$((i + 1))
        if [ -n "$valued" ]; then
            valued=""
            continue
        fi
        case "$word" in
            -*=*) ;;
            -*)
                case " $(_samzamp_valued "$cmdpath") " in
                    *" $word "*) valued="$word" ;;
                esac ;;
            *)
                case " $(_samzamp_commands "$cmdpath") " in
                    *" $word "*) cmdpath="${cmdpath:+$cmdpath }$word"; npos=0 ;;
                    *) npos=$((npos + 1)) ;;
                esac ;;
        esac
    done
    if [ -n "$valued" ]; then
        COMPREPLY=($(compgen -W "$(_samzamp_choices "$cmdpath $valued")" -- "$cur"))
        return 0
    fi
    case "$cur" in
        -*=*) ;;
        -*) COMPREPLY=($(compgen -W "$(_samzamp_options "$cmdpath")" -- "$cur")) ;;
        *) COMPREPLY=($(compgen -W "$(_samzamp_commands "$cmdpath") $(_samzamp_positional "$cmdpath $npos")" -- "$cur")) ;;
    esac
    return 0
}
"""


def _function(script: str) -> str:
    return "_samzamp" + "".join(ch if ch.isalnum() else "_" for ch in script.removeprefix("samzamp"))


def bash_script(spec: Spec, aliases: Mapping[str, str]) -> str:
    """The bash completion script for ``samzamp`` (``spec``) and each alias, which completes as the
    command it stands for (``aliases``: script name -> command path)."""
    paths = _flatten(spec)
    commands = {p: _words(list(s.commands)) for p, s in paths.items()}
    options = {p: _words(list(s.options)) for p, s in paths.items()}
    valued = {p: _words(list(s.valued)) for p, s in paths.items()}
    choices = {f"{p} {opt}": _words(list(c)) for p, s in paths.items() for opt, c in s.valued.items()}
    positional = {f"{p} {i}": _words(list(c)) for p, s in paths.items() for i, c in enumerate(s.positionals)}
    lines = [
        "# samzamp shell completion, generated by `samzamp completion` from the commands' parsers.",
        "",
        *_case("_samzamp_commands", "the subcommands of a command path", commands),
        *_case("_samzamp_options", "the options of a command path", options),
        *_case("_samzamp_valued", "the options of a command path that take a value", valued),
        *_case("_samzamp_choices", "'PATH OPTION': the choices of an option's value", choices),
        *_case("_samzamp_positional", "'PATH N': the choices of the Nth positional", positional),
        _COMPLETE.rstrip(),
        "",
    ]
    for script, path in {"samzamp": "", **aliases}.items():
        lines.append(f"{_function(script)}() {{ _samzamp_complete {_quote(path)}; }}")
        lines.append(f"complete -o default -F {_function(script)} {script}")
    return "\n".join(lines) + "\n"


def zsh_script(spec: Spec, aliases: Mapping[str, str]) -> str:
    """The zsh completion script: the bash one, run by zsh's ``bashcompinit`` (source it after compinit)."""
    head = [
        f"#compdef samzamp {' '.join(aliases)}",
        "# Source it after compinit (e.g. in ~/.zshrc: source <(samzamp completion zsh)).",
        "autoload -U +X bashcompinit && bashcompinit",
    ]
    return "\n".join(head) + "\n" + bash_script(spec, aliases)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The arguments of ``samzamp completion``: the shell."""
    p = new_parser(
        prog,
        "Print a completion script for samzamp and its aliases (samzamp-container, ...) for bash or zsh.",
        examples=[
            f"{prog} bash > ~/.local/share/bash-completion/completions/samzamp",
            f"source <({prog} bash)  # in ~/.bashrc",
            f"source <({prog} zsh)  # in ~/.zshrc, after compinit",
        ],
        exit_codes=EXIT_CODES,
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    return p


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``samzamp completion`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code. Every line
    it writes starts with ``prog``, the name it runs as (its alias passes none: the same name)."""
    args = build_parser(prog).parse_args(argv)
    spec = samzamp_spec()
    script = bash_script(spec, ALIASES) if args.shell == "bash" else zsh_script(spec, ALIASES)
    sys.stdout.write(script)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
