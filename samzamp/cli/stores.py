"""``samzamp stores VERB``: look at a job's local stores. ``inspect`` reads one task's store without
changing it (``samzamp.storage.inspect`` does the reading; this module parses and prints).

``samzamp stores inspect job.toml --store counts --task "Partition 0"`` prints ``key<TAB>value``
lines (``--json``: one JSON object), keys and values decoded with the store's serdes, and a summary
line on stderr. Exit codes: see ``EXIT_CODES``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from samzamp.cli.common import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_STATE,
    add_job_config,
    add_log_level,
    new_parser,
    report_failure,
    setup,
)
from samzamp.config import load_config, parse_overrides, validate
from samzamp.storage.dirs import StoreLockedError
from samzamp.storage.inspect import DEFAULT_LIMIT, StoreListing, StoreNotFoundError, inspect_store

__all__ = ["EXIT_CODES", "build_parser", "main"]

PROG = "samzamp stores"

EXIT_CODES = {
    EXIT_OK: "shown",
    EXIT_FAILED: "--key not found; or a value fails its checksum (the line names the key), or the store's "
    "files cannot be read (damaged, a format conversion cut short)",
    EXIT_CONFIG: "bad config or arguments; unknown store, or no directory of it for the task here (the line "
    "lists the stores, or the tasks that have one)",
    EXIT_STATE: "a running task holds the store (its LOCK file is locked): stop it, or use --snapshot",
}

_FORMATS = {0: "empty, never written", 1: "plain values", 2: "values checksummed"}


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The parser of ``samzamp stores``: one subparser per verb (``inspect``)."""
    p = new_parser(
        prog,
        "Look at a job's local stores (run on the machine, and from the directory, where its tasks run).",
        examples=[f'{prog} inspect job.toml --store counts --task "Partition 0"'],
        exit_codes=EXIT_CODES,
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    inspect_help = new_parser(
        f"{prog} inspect",
        "",
        examples=[
            f'{prog} inspect job.toml --store counts --task "Partition 0"',
            f'{prog} inspect job.toml --store counts --task "Partition 0" --key w7',
            f"{prog} inspect job.toml --store counts --task Partition_0 --json --limit 100000 > counts.json",
            f'{prog} inspect job.toml --store counts --task "Partition 0" --snapshot   # while the job runs',
        ],
        exit_codes=EXIT_CODES,
    )
    inspect = verbs.add_parser(
        "inspect",
        help="print one task's store, read from its local LMDB files without changing them",
        description=(
            "Print one task's store, read from its local LMDB files (under job.logged.store.base.dir, or\n"
            "job.non-logged.store.base.dir for a store without changelog: <base>/<store>/<task>) without\n"
            "changing them: opened read-only, never created nor converted to another store format. Keys\n"
            "and values are decoded with the store's serdes (stores.<name>.key.serde, .msg.serde) and\n"
            "printed as KEY<TAB>VALUE lines in key-byte order; a summary line goes to stderr. Each value's\n"
            "CRC32C checksum is checked as the task checks it: a damaged value is reported, never shown.\n"
            "Refused while a running task holds the store; a task that starts meanwhile waits for the read."
        ),
        epilog=inspect_help.epilog,
        formatter_class=inspect_help.formatter_class,
    )
    add_job_config(inspect)
    inspect.add_argument("--store", required=True, help="the store's name (stores.<name>)")
    inspect.add_argument(
        "--task",
        required=True,
        help="the task, as the job names it ('Partition 0', or its directory name Partition_0); virtual tasks "
        "(job.elasticity.factor > 1) are named like 'Partition 0_1_4': a wrong name lists those there",
    )
    inspect.add_argument(
        "--key",
        help="show only this key's value; exit 1 when the store does not hold it. Given as text: the key "
        "serde gets the text, or the number or JSON value it spells",
    )
    inspect.add_argument(
        "--limit",
        type=_positive,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"show at most N entries, the first in key order (default: {DEFAULT_LIMIT}); only their "
        "checksums are checked",
    )
    inspect.add_argument("--json", action="store_true", help="print one JSON object (entries, count, offsets)")
    inspect.add_argument(
        "--snapshot",
        action="store_true",
        help="read the store even while its task runs: one consistent LMDB read transaction, as of the "
        "task's last commit (its writes since are not in the files yet, and it goes on writing). LMDB "
        "registers the reader in the task's lock.mdb (its reader table) and keeps the snapshot's pages "
        "while it reads, so the store's data.mdb may grow meanwhile; data.mdb is never written",
    )
    add_log_level(inspect, "WARNING")
    return p


def _text(value: Any) -> str:
    """A key or value as one line of text: a string as it is (JSON-quoted when it holds a tab or a
    line break), bytes as Python writes them, anything else as JSON where it can be."""
    if isinstance(value, str):
        return value if value.isprintable() else msgspec.json.encode(value).decode()
    if isinstance(value, bytes | bytearray | memoryview):
        return repr(bytes(value))
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return repr(bytes(value))
    return value


def _summary(listing: StoreListing) -> str:
    shown = f"{len(listing.entries)} shown" + (" (--limit)" if listing.truncated else "")
    offset = "dirty (writes no commit covers)" if listing.dirty else f"changelog offset {listing.changelog_offset}"
    running = ""
    if listing.snapshot:
        pid = f"pid {listing.running_pid}" if listing.running_pid is not None else "a live process"
        running = f"; a snapshot: the task runs ({pid})"
    return (
        f"store {listing.store!r} of task {listing.task!r} in {listing.path}: {listing.count} entries, {shown}; "
        f"store format {listing.format} ({_FORMATS.get(listing.format, '?')}); {offset}{running}"
    )


def _print(listing: StoreListing, as_json: bool) -> None:
    if as_json:
        doc = {
            "store": listing.store,
            "task": listing.task,
            "path": str(listing.path),
            "format": listing.format,
            "count": listing.count,
            "changelog_offset": listing.changelog_offset,
            "dirty": listing.dirty,
            "snapshot": listing.snapshot,
            "running_pid": listing.running_pid,
            "truncated": listing.truncated,
            "found": not listing.missing_key,
            "entries": [
                {"key": _jsonable(e.key), "damaged": True}
                if e.damaged
                else {"key": _jsonable(e.key), "value": _jsonable(e.value)}
                for e in listing.entries
            ],
        }
        sys.stdout.write(msgspec.json.encode(doc, enc_hook=repr).decode() + "\n")
        return
    sys.stdout.writelines(f"{_text(e.key)}\t{_text(e.value)}\n" for e in listing.entries if not e.damaged)


def inspect(args: argparse.Namespace, prog: str) -> int:
    """``stores inspect``: the exit code (see EXIT_CODES)."""
    try:
        settings = validate(load_config(args.config, parse_overrides(args.overrides)))
        listing = inspect_store(settings, args.store, args.task, key=args.key, limit=args.limit, snapshot=args.snapshot)
    except StoreNotFoundError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except StoreLockedError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_STATE
    except Exception as e:
        return report_failure(prog, e)
    _print(listing, args.json)
    print(f"{prog}: {_summary(listing)}", file=sys.stderr)
    if listing.missing_key:
        print(f"{prog}: key {args.key!r} not found in store {args.store!r} of task {args.task!r}", file=sys.stderr)
        return EXIT_FAILED
    for entry in listing.damaged:
        print(
            f"{prog}: damaged: the value of key {_text(entry.key)} in store {args.store!r} of task {args.task!r} fails "
            "its checksum (CRC32C): its bytes changed on disk; the task's next start restores the store from "
            "its changelog",
            file=sys.stderr,
        )
    return EXIT_FAILED if listing.damaged else EXIT_OK


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = setup(build_parser(prog), argv)
    return inspect(args, f"{prog} {args.verb}")


if __name__ == "__main__":
    sys.exit(main())
