"""``samzamp checkpoints show CONFIG [--task T] [--json]`` and ``samzamp checkpoints set CONFIG --from FILE``.

``show`` prints the last checkpoint of each task of the job model in Samza's checkpoint-tool line
format (``samzamp.commit.checkpoint_file``), or as JSON. ``set`` writes new checkpoints for the
tasks a file names, in that line format or that JSON (so ``show --json``, edited, is a valid
input): each task and partition must be in the job model (else exit 2 naming it); the partitions a
task's file lines do not name keep their offsets; its stores keep their changelog markers
(``samzamp.commit.checkpoint_edits``). Refused (exit 3) while a processor of the job runs: a job
reads its checkpoints only as it starts, and a running one would write over them at its next commit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from samzamp.cli.common import (
    EXIT_CONFIG,
    EXIT_OK,
    EXIT_STATE,
    add_job_config,
    add_log_level,
    new_parser,
    report_failure,
    setup,
)
from samzamp.cli.job_access import JobAccess, refuse_while_running
from samzamp.commit.checkpoint import Checkpoint
from samzamp.commit.checkpoint_edits import UnknownTargetError, resolve, write_new_offsets
from samzamp.commit.checkpoint_file import (
    CheckpointFileError,
    NewOffsets,
    checkpoints_json,
    format_line,
    format_lines,
    parse_checkpoint_file,
)

__all__ = ["EXIT_CODES", "build_parser", "main"]

PROG = "samzamp checkpoints"

_OFFSETS = (
    "An offset is the last processed one (a task resumes at offset + 1; -1: from 0), as in Samza.\n"
    "A line: tasknames.<task>.systems.<system>.streams.<stream>.partitions.<p>=<offset>, the task name\n"
    "with Java Properties escapes (Partition\\ 0); an unescaped space reads too."
)


EXIT_CODES = {
    0: "done",
    1: "failed: the broker or ZooKeeper cannot be reached",
    2: "bad config or arguments; set: a line that does not parse, or a task or partition not in the job",
    3: "set: refused, a processor of the job runs (stop it first)",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = new_parser(
        prog,
        "Show or set a job's checkpoints (Samza's checkpoint-tool line format, or JSON).\n\n" + _OFFSETS,
        examples=[
            f"{prog} show job.toml",
            f"{prog} show job.toml --task 'Partition 0' --json",
            f"{prog} show job.toml --json > cp.json   # edit cp.json, then:",
            f"{prog} set job.toml --from cp.json",
            f"echo 'tasknames.Partition\\ 0.systems.kafka.streams.lines.partitions.0=-1' | {prog} set job.toml --from -",
        ],
        exit_codes=EXIT_CODES,
    )
    sub = p.add_subparsers(dest="action", required=True, metavar="{show,set}")
    show = sub.add_parser(
        "show",
        help="print each task's last checkpoint",
        description="Print the last checkpoint of each task of the job model (lines, or --json).\n\n" + _OFFSETS,
        formatter_class=p.formatter_class,
        epilog=p.epilog,
    )
    add_job_config(show)
    show.add_argument("--task", action="append", default=[], metavar="T", help="only task T (repeatable)")
    show.add_argument("--json", action="store_true", help="print JSON (the input `set --from` takes too)")
    add_log_level(show, "WARNING")
    put = sub.add_parser(
        "set",
        help="write new checkpoints for the tasks a file names (the job stopped)",
        description=(
            "Write new checkpoints for the tasks FILE names (lines, or the JSON of `show --json`). The partitions\n"
            "a task's lines do not name keep their offsets; stores are not changed (their changelog markers are\n"
            "kept). Refused (exit 3) while a processor of the job runs.\n\n" + _OFFSETS
        ),
        formatter_class=p.formatter_class,
        epilog=p.epilog,
    )
    add_job_config(put)
    put.add_argument("--from", dest="source", required=True, metavar="FILE", help="the new offsets; - reads stdin")
    add_log_level(put, "WARNING")
    return p


def _show(access: JobAccess, tasks: list[str], as_json: bool) -> int:
    model = access.model
    unknown = [t for t in tasks if t not in model.tasks]
    if unknown:
        print(f"{PROG}: task {unknown[0]!r} is not in the job model of {access.job}", file=sys.stderr)
        return EXIT_CONFIG
    last = access.last_checkpoints()
    names = tasks or list(model.tasks)
    mine: dict[str, Checkpoint | None] = {t: last.get(t) for t in names}
    others = sorted(t for t in last if t not in model.tasks) if not tasks else []
    if as_json:
        doc = checkpoints_json(mine, job=access.job, checkpoint_topic=access.settings.checkpoint_topic)
        doc["other_tasks"] = others
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    print(f"# job {access.job}: the last checkpoint of each task (offset = last processed)")
    for t in names:
        cp = mine[t]
        if cp is None:
            print(f"# {t}: no checkpoint")
        else:
            for line in format_lines({t: cp}):
                print(line)
    for t in others:
        print(f"# {t}: has a checkpoint but is not a task of the job model now (job.elasticity.factor changed?)")
    return EXIT_OK


def _set(access: JobAccess, new: NewOffsets) -> int:
    edits = resolve(access.model, new)
    if refuse_while_running(PROG + " set", access, "checkpoints can be set"):
        return EXIT_STATE
    last = access.last_checkpoints()
    written = write_new_offsets(access.checkpoint_writer(), last, edits)
    for task in written:
        for ssp, offset in sorted(edits[task].items()):
            print(f"set {format_line(task, ssp, offset)}")
    unchanged = len(edits) - len(written)
    print(
        f"{PROG} set: {access.job}: wrote {len(written)} checkpoint(s)"
        + (f"; {unchanged} task(s) already there" if unchanged else "")
        + "; the job starts from them at its next start"
    )
    return EXIT_OK


def _read(source: str) -> NewOffsets:
    """The new offsets of ``--from``; CheckpointFileError when it cannot be read or parsed."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as e:
        raise CheckpointFileError(f"--from {source}: cannot be read: {e.strerror or e}") from None
    return parse_checkpoint_file(text, "stdin" if source == "-" else source)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = setup(build_parser(prog), argv)
    try:
        new = _read(args.source) if args.action == "set" else {}
        access = JobAccess.from_args(args, prog)
        try:
            if args.action == "show":
                return _show(access, args.task, args.json)
            return _set(access, new)
        finally:
            access.close()
    except (CheckpointFileError, UnknownTargetError) as e:
        print(f"{prog}: {e}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except Exception as e:
        return report_failure(prog, e)


if __name__ == "__main__":
    sys.exit(main())
