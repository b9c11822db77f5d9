"""``samzamp reset-offsets CONFIG --to-earliest | --to-latest | --to-offset N | --to-datetime T
[--input STREAM]... [--dry-run]``: where the job's next run starts reading, as Kafka Streams'
application reset tool.

Writes, for every task that reads a selected input (every input by default; each key bucket of a
virtual task and every reader of a broadcast partition alike), a checkpoint that makes it read the
chosen offset next: the checkpoint holds the last processed offset, so it holds that offset - 1.
``--to-offset N`` is clamped into each partition's range (oldest to end), and said. ``--to-datetime``
takes ISO 8601 (``2026-11-27T06:00:00Z``; without a zone, local time) and finds per partition the
first message at or after it (the broker's offsets-for-times, read forward to be exact on brokers
that answer it loosely); a partition with none starts at its end. Refused (exit 3) while a
processor of the job runs. Stores are not reset (see ``STORES``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from datetime import datetime

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.api.errors import ConfigError
from samzamp.cli.common import (
    EXIT_OK,
    EXIT_STATE,
    add_job_config,
    add_log_level,
    new_parser,
    report_failure,
    setup,
)
from samzamp.cli.job_access import JobAccess, refuse_while_running
from samzamp.commit.checkpoint_edits import changed, partition_of, reset_offsets, write_new_offsets
from samzamp.commit.checkpoint_file import format_line

__all__ = ["EXIT_CODES", "STORES", "build_parser", "main"]

PROG = "samzamp reset-offsets"

STORES = (
    "stores are NOT reset: each task's checkpoint keeps its stores' changelog markers, so at the next start "
    "every store restores to its state at the last checkpoint and the input read again is applied on top of "
    "it (a count counts it again). To reprocess into empty stores instead, run the job under a new job.id (a "
    "new checkpoint topic and coordinator stream: its inputs start at samza.offset.default) with new changelog "
    "topics (stores.<name>.changelog) and an empty job.logged.store.base.dir: a task without a checkpoint "
    "marker keeps only what its changelog and its local store directory hold"
)


EXIT_CODES = {
    0: "done (with --dry-run: printed, nothing written)",
    1: "failed: the broker or ZooKeeper cannot be reached",
    2: "bad config or arguments (an --input the job does not read, a bad date)",
    3: "refused: a processor of the job runs (stop it first)",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = new_parser(
        prog,
        "Set where a stopped job starts reading its inputs at its next start (as Kafka Streams' reset tool):\n"
        "writes a checkpoint for every task that reads them. A checkpoint holds the last processed offset,\n"
        "so the one written is the offset to read next - 1. Stores are NOT reset (the output says how to).",
        examples=[
            f"{prog} job.toml --to-earliest --dry-run",
            f"{prog} job.toml --to-earliest",
            f"{prog} job.toml --to-datetime 2026-11-27T06:00:00Z --input lines",
            f"{prog} job.toml --to-offset 1000 --input kafka.lines",
        ],
        exit_codes=EXIT_CODES,
    )
    add_job_config(p)
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the oldest message each partition holds")
    to.add_argument("--to-latest", action="store_true", help="the end: skip everything written so far")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped into each partition's range)")
    to.add_argument(
        "--to-datetime",
        type=_datetime,
        metavar="T",
        help="the first message at or after T, ISO 8601 (2026-11-27T06:00:00Z; no zone: local time)",
    )
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="STREAM",
        help="only this input, as system.stream or stream (repeatable; default: every input)",
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be written; write nothing")
    add_log_level(p, "WARNING")
    return p


def _datetime(text: str) -> int:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date and time (2026-11-27T06:00:00Z)") from None
    return int(when.timestamp() * 1000)  # a naive datetime is local time


def _selected(access: JobAccess, names: list[str]) -> set[SystemStream]:
    """The inputs ``--input`` names (every input without one); ConfigError naming one the job lacks."""
    task = access.settings.task
    inputs = set(task.inputs) | {s.system_stream for s in task.broadcast_inputs}
    if not names:
        return inputs
    out = set()
    for name in names:
        found = {s for s in inputs if name in (f"{s.system}.{s.stream}", s.stream)}
        if not found:
            known = ", ".join(sorted(f"{s.system}.{s.stream}" for s in inputs))
            raise ConfigError("--input", f"{name!r} is not an input of job {access.job} (its inputs: {known})")
        out |= found
    return out


def _next_offsets(
    access: JobAccess, args: argparse.Namespace, partitions: list[SystemStreamPartition]
) -> tuple[dict[SystemStreamPartition, int], list[str]]:
    """Where each partition is read next, and notes (offsets clamped)."""
    out: dict[SystemStreamPartition, int] = {}
    notes: list[str] = []
    for system in sorted({p.system for p in partitions}):
        mine = [p for p in partitions if p.system == system]
        admin = access.admin(system)
        if args.to_earliest:
            out.update(admin.beginning_offsets(mine))
        elif args.to_latest:
            out.update(admin.end_offsets(mine))
        elif args.to_datetime is not None:
            out.update(admin.offsets_for_times(mine, args.to_datetime))
        else:
            lows, ends = admin.beginning_offsets(mine), admin.end_offsets(mine)
            for p in mine:
                out[p] = min(max(args.to_offset, lows[p]), ends[p])
                if out[p] != args.to_offset:
                    notes.append(f"{p}: offset {args.to_offset} is outside {lows[p]}..{ends[p]}: {out[p]} instead")
    return out, notes


def _describe(before: Mapping[SystemStreamPartition, int], ssp: SystemStreamPartition) -> str:
    was = before.get(ssp)
    return f"(was {was})" if was is not None else "(no checkpoint)"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = setup(build_parser(prog), argv)
    try:
        access = JobAccess.from_args(args, prog)
        try:
            return _reset(prog, access, args)
        finally:
            access.close()
    except Exception as e:
        return report_failure(prog, e)


def _reset(prog: str, access: JobAccess, args: argparse.Namespace) -> int:
    streams = _selected(access, args.input)
    if not args.dry_run and refuse_while_running(prog, access, "offsets can be reset"):
        return EXIT_STATE
    model = access.model
    partitions = sorted({partition_of(s) for t in model.tasks.values() for s in t.ssps if s.system_stream in streams})
    nxt, notes = _next_offsets(access, args, partitions)
    edits = reset_offsets(model, lambda p: p.system_stream in streams, nxt)
    last = access.last_checkpoints()
    verb = "would set" if args.dry_run else "set"
    for note in notes:
        print(f"note: {note}")
    for task in sorted(changed(last, edits)):
        before = last[task].offsets() if task in last else {}
        for ssp, offset in sorted(edits[task].items()):
            print(f"{verb} {format_line(task, ssp, offset)} {_describe(before, ssp)}")
    todo = changed(last, edits)
    if args.dry_run:
        d = access.deployment()
        running = f"; the job is {d.state.value} now: stop it before resetting" if d.runs else ""
        print(f"{prog}: {access.job}: dry run: {len(todo)} checkpoint(s) would be written, none was{running}")
    else:
        written = write_new_offsets(access.checkpoint_writer(), last, edits)
        print(f"{prog}: {access.job}: wrote {len(written)} checkpoint(s); the job starts from them at its next start")
    print(f"{prog}: {STORES}" if access.settings.stores else f"{prog}: stores are NOT reset (this job has none)")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
