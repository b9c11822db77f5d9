"""Checkpoints as an operator reads and edits them: Samza's checkpoint-tool line format, and JSON.

**Lines** (Samza's ``CheckpointTool``), one per task and input partition::

    tasknames.<task>.systems.<system>.streams.<stream>.partitions.<p>=<offset>

The offset is what a checkpoint holds: the **last processed** offset of the partition (a task
resumes at offset + 1; -1: nothing processed, it starts at 0), as in Samza. Samza reads such a file
with ``java.util.Properties``, so the task name is written with Java's escapes: ``Partition 0``
becomes ``Partition\\ 0`` (a space, ``=``, ``:``, ``#``, ``!`` and ``\\`` get a backslash). Read back,
escapes are undone and an unescaped space is kept too (``tasknames.Partition 0.systems...`` reads as
task ``Partition 0``). Blank lines and lines starting with ``#`` or ``!`` are comments; any other
line that does not parse, a bad offset, or a partition named twice is an error naming its line.

A virtual task's partition (job.elasticity.factor > 1, ``Partition 0_1_2``) carries the task's key
bucket, which its name implies: the lines name the partition only, and the job model gives the
bucket back (``samzamp.commit.checkpoint_edits``).

**JSON** (``samzamp checkpoints show --json``)::

    {"tasks": {"Partition 0": {"checkpoint_id": "...", "written_ms": ..., "run_id": "...",
               "offsets": [{"system": "kafka", "stream": "lines", "partition": 0, "key_bucket": -1,
                            "offset": 41}]}, ...}}

Read back, only ``tasks.<task>.offsets`` (system, stream, partition, offset) counts, so the output
of ``show --json`` edited in place is a valid input of ``set``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import SamzampError
from samzamp.commit.checkpoint import Checkpoint, written_ms

__all__ = [
    "CheckpointFileError",
    "NewOffsets",
    "checkpoints_json",
    "format_line",
    "format_lines",
    "parse_checkpoint_file",
    "parse_json",
    "parse_lines",
]

# task -> partition (key_bucket -1) -> the last processed offset
NewOffsets = dict[str, dict[SystemStreamPartition, int]]

_FORMAT = "tasknames.<task>.systems.<system>.streams.<stream>.partitions.<p>=<offset>"
_LINE = re.compile(r"tasknames\.(.+)\.systems\.(.+)\.streams\.(.+)\.partitions\.([0-9]+)")
_ESCAPED = {" ": "\\ ", "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!", "\\": "\\\\", "\t": "\\t", "\n": "\\n"}
_UNESCAPED = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class CheckpointFileError(SamzampError):
    """A checkpoint file does not parse: the message names the file, the line and what is wrong."""


def _escape(text: str) -> str:
    return "".join(_ESCAPED.get(c, c) for c in text)


def format_line(task: str, ssp: SystemStreamPartition, offset: int) -> str:
    """One line of the format (module docstring), the task name escaped as Java's Properties does."""
    key = f"tasknames.{task}.systems.{ssp.system}.streams.{ssp.stream}.partitions.{ssp.partition}"
    return f"{_escape(key)}={offset}"


def format_lines(checkpoints: Mapping[str, Checkpoint]) -> list[str]:
    """Every offset of ``checkpoints``, one line each, by task then partition."""
    return [
        format_line(task, o.ssp, o.offset)
        for task in sorted(checkpoints)
        for o in sorted(checkpoints[task].input_offsets, key=lambda o: o.ssp)
    ]


def _split(line: str) -> tuple[str, str] | None:
    """The unescaped key and the value of a ``key=value`` (or ``key:value``) line; None without one."""
    key: list[str] = []
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            nxt = line[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", line[i + 2 : i + 6]):
                key.append(chr(int(line[i + 2 : i + 6], 16)))
                i += 6
                continue
            key.append(_UNESCAPED.get(nxt, nxt))
            i += 2
            continue
        if c in "=:":
            return "".join(key).strip(), line[i + 1 :].strip()
        key.append(c)
        i += 1
    return None


def parse_lines(text: str, source: str) -> NewOffsets:
    """The offsets a file of lines names; CheckpointFileError naming ``source`` and the line."""
    out: NewOffsets = {}
    seen: dict[tuple[str, SystemStreamPartition], int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        where = f"{source}, line {number}"
        split = _split(line)
        if split is None:
            raise CheckpointFileError(f"{where}: no '=': expected {_FORMAT}, got {raw.strip()!r}")
        key, value = split
        m = _LINE.fullmatch(key)
        if m is None:
            raise CheckpointFileError(f"{where}: {key!r} is not {_FORMAT}")
        task, system, stream, partition = m.group(1), m.group(2), m.group(3), int(m.group(4))
        try:
            offset = int(value)
        except ValueError:
            raise CheckpointFileError(f"{where}: offset {value!r} of task {task!r} is not a number") from None
        if offset < -1:
            raise CheckpointFileError(f"{where}: offset {offset} of task {task!r} is below -1 (nothing processed)")
        ssp = SystemStreamPartition(system, stream, partition)
        first = seen.setdefault((task, ssp), number)
        if first != number:
            raise CheckpointFileError(f"{where}: task {task!r}, {ssp} is named on line {first} already")
        out.setdefault(task, {})[ssp] = offset
    return out


class _Offset(msgspec.Struct):
    system: str
    stream: str
    partition: int
    offset: int
    key_bucket: int = -1


class _Task(msgspec.Struct):
    offsets: list[_Offset] = []


class _File(msgspec.Struct):
    tasks: dict[str, _Task | None]


def parse_json(text: str, source: str) -> NewOffsets:
    """The offsets a JSON file (as ``checkpoints_json`` writes it) names; CheckpointFileError naming
    ``source`` and what is wrong."""
    try:
        parsed = msgspec.json.decode(text, type=_File)
    except msgspec.DecodeError as e:
        raise CheckpointFileError(f"{source}: not the JSON of `checkpoints show --json`: {e}") from None
    out: NewOffsets = {}
    for task, entry in parsed.tasks.items():
        for o in entry.offsets if entry is not None else []:
            ssp = SystemStreamPartition(o.system, o.stream, o.partition)
            if o.offset < -1:
                raise CheckpointFileError(f"{source}: offset {o.offset} of task {task!r}, {ssp} is below -1")
            if ssp in out.get(task, {}):
                raise CheckpointFileError(f"{source}: task {task!r} names {ssp} twice")
            out.setdefault(task, {})[ssp] = o.offset
    return out


def parse_checkpoint_file(text: str, source: str) -> NewOffsets:
    """JSON when the text starts with ``{``, else lines."""
    return parse_json(text, source) if text.lstrip().startswith("{") else parse_lines(text, source)


def checkpoints_json(tasks: Mapping[str, Checkpoint | None], **extra: Any) -> dict[str, Any]:
    """The JSON object of ``show --json``: each task's last checkpoint (None: it has none), plus
    ``extra`` top-level fields."""
    out: dict[str, Any] = dict(extra)
    out["tasks"] = {
        task: (
            None
            if cp is None
            else {
                "checkpoint_id": cp.checkpoint_id,
                "written_ms": written_ms(cp),
                "run_id": cp.run_id,
                "offsets": [msgspec.to_builtins(o) for o in sorted(cp.input_offsets, key=lambda o: o.ssp)],
            }
        )
        for task, cp in tasks.items()
    }
    return out
