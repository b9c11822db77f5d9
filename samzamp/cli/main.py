"""``samzamp COMMAND ...``: one command for running and operating samzamp jobs (``python -m samzamp`` too).

Each subcommand lives in its own module of ``samzamp.cli``, imported only when it runs (``samzamp
--help`` starts no Spark and no Kafka client). The module's ``main(argv, prog)`` parses the rest of
the command line, and its ``build_parser(prog)`` is the parser it uses (shell completion reads it).

The scripts in ``ALIASES`` (``samzamp-container``, ``samzamp-drain`` and the others) call the same
``main`` with its default ``prog``, the subcommand's name (``samzamp run``): an alias runs as its
subcommand, with the same arguments, the same exit codes and the same lines on stderr.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Protocol, cast

from samzamp._version import __version__
from samzamp.cli.common import EXIT_CONFIG, EXIT_OK

__all__ = ["ALIASES", "COMMANDS", "PROG", "Command", "main"]

PROG = "samzamp"


class _CommandModule(Protocol):
    def main(self, argv: list[str] | None = None, prog: str = ...) -> int: ...


@dataclass(frozen=True)
class Command:
    """A subcommand: the module whose ``main(argv, prog)`` runs it, and one line for ``samzamp --help``."""

    module: str
    summary: str

    def run(self, name: str, argv: list[str]) -> int:
        """Run the command as ``samzamp <name>`` with the arguments after its name."""
        module = cast(_CommandModule, importlib.import_module(self.module))
        return module.main(argv, prog=f"{PROG} {name}")


# In the order an operator meets them: run a job, look at it, change where it reads, stop it, the
# local services, then the offline (Spark) tools.
COMMANDS: dict[str, Command] = {
    "run": Command("samzamp.cli.container", "run one container (processor) of a job"),
    "check": Command("samzamp.cli.check", "validate a config and import its task or application class, offline"),
    "status": Command("samzamp.cli.status", "whether a job runs, and each task's checkpoint, end offset and lag"),
    "checkpoints": Command(
        "samzamp.cli.checkpoints", "show or set a job's checkpoints (Samza's checkpoint-tool format)"
    ),
    "reset-offsets": Command("samzamp.cli.reset_offsets", "set where a stopped job starts reading its inputs"),
    "job-model": Command("samzamp.cli.job_model", "show the job's tasks, their inputs and changelog partitions"),
    "stores": Command("samzamp.cli.stores", "inspect a task's local store without changing it"),
    "drain": Command("samzamp.cli.drain", "drain a running job: stop it with nothing buffered lost"),
    "broker": Command("samzamp.cli.broker", "run the embedded, memory-only Kafka broker on 127.0.0.1"),
    "zookeeper": Command("samzamp.cli.zookeeper", "run the embedded ZooKeeper server on 127.0.0.1"),
    "compact-changelog": Command("samzamp.cli.compact_changelog", "compact a store's changelog to Parquet (Spark)"),
    "restore-stores": Command("samzamp.cli.restore_stores", "restore every task's store in bulk (Spark)"),
    "rebucket-stores": Command("samzamp.cli.rebucket_stores", "re-bucket stores to job.elasticity.factor (Spark)"),
    "completion": Command("samzamp.cli.completion", "print the bash or zsh completion script"),
}

# The scripts that existed before the samzamp command, kept (setup.py's console scripts and bin/):
# each runs its subcommand's module.
ALIASES: dict[str, str] = {
    "samzamp-container": "run",
    "samzamp-drain": "drain",
    "samzamp-broker": "broker",
    "samzamp-zookeeper": "zookeeper",
    "samzamp-compact-changelog": "compact-changelog",
    "samzamp-restore-stores": "restore-stores",
    "samzamp-rebucket-stores": "rebucket-stores",
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    alias_width = max(len(alias) for alias in ALIASES)
    lines = [
        f"usage: {PROG} [--version] [-h] COMMAND [ARGS ...]",
        "",
        "Run and operate samzamp jobs. `samzamp COMMAND --help` shows a command's arguments, an",
        "example and its exit codes.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {c.summary}" for name, c in COMMANDS.items()),
        "",
        "exit codes (every command):",
        "  0    done",
        "  1    failed (the line says what)",
        "  2    bad config or arguments (the line names the key or argument)",
        "  3    the job's state forbids it (no deployment runs, or one runs)",
        "  4    timed out waiting",
        "",
        "aliases (same arguments, exit codes and messages):",
        *(f"  {alias:<{alias_width}}  {PROG} {name}" for alias, name in ALIASES.items()),
        "",
        f"shell completion: {PROG} completion --help",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``samzamp COMMAND [ARGS ...]``: run COMMAND's ``main`` and return its exit code."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stderr.write(_usage())
        return EXIT_CONFIG
    if args[0] in ("-h", "--help"):
        sys.stdout.write(_usage())
        return EXIT_OK
    if args[0] == "--version":
        print(f"{PROG} {__version__}")
        return EXIT_OK
    command = COMMANDS.get(args[0])
    if command is None:
        print(
            f"{PROG}: error: unknown command {args[0]!r}: choose one of {', '.join(COMMANDS)} (see {PROG} --help)",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    return command.run(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
