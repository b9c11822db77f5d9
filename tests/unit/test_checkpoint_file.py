"""Samza's checkpoint-tool line format and the JSON of ``checkpoints show``: what parses, what is
refused (naming the line), and how new offsets land on the job model's SSPs (key buckets included)."""

from __future__ import annotations

import json

import pytest

from samzamp.api.envelope import SystemStreamPartition as SSP
from samzamp.commit.checkpoint import CheckpointV2, SSPOffset
from samzamp.commit.checkpoint_edits import UnknownTargetError, changed, reset_offsets, resolve
from samzamp.commit.checkpoint_file import (
    CheckpointFileError,
    checkpoints_json,
    format_line,
    format_lines,
    parse_checkpoint_file,
    parse_lines,
)
from samzamp.model.job_model import JobModel, TaskModel


def _cp(task: str, *offsets: tuple[str, int, int, int]) -> CheckpointV2:
    return CheckpointV2(
        "1795760724549-00000100", task, [SSPOffset("kafka", s, p, o, kb) for s, p, o, kb in offsets], {"counts": "12"}
    )


def test_a_task_name_with_spaces_is_escaped_as_java_properties_and_reads_back() -> None:
    line = format_line("Partition 0", SSP("kafka", "lines", 3), 41)
    assert line == "tasknames.Partition\\ 0.systems.kafka.streams.lines.partitions.3=41"
    assert parse_lines(line, "f") == {"Partition 0": {SSP("kafka", "lines", 3): 41}}
    # Unescaped spaces, spaces around "=", ":" as the separator, comments and blank lines.
    text = (
        "# a comment\n\n! another\n"
        "tasknames.Partition 1.systems.kafka.streams.lines.partitions.1 = -1\n"
        "tasknames.SystemStreamPartition\\ [kafka,\\ lines,\\ 2].systems.kafka.streams.lines.partitions.2:7\n"
    )
    assert parse_lines(text, "f") == {
        "Partition 1": {SSP("kafka", "lines", 1): -1},
        "SystemStreamPartition [kafka, lines, 2]": {SSP("kafka", "lines", 2): 7},
    }


def test_format_lines_round_trips_every_checkpoint() -> None:
    cps = {"Partition 0_1_2": _cp("Partition 0_1_2", ("lines", 0, 5, 1), ("other.topic", 0, 9, -1))}
    lines = format_lines(cps)
    assert parse_lines("\n".join(lines), "f") == {
        "Partition 0_1_2": {SSP("kafka", "lines", 0): 5, SSP("kafka", "other.topic", 0): 9}
    }


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("tasknames.P 0.systems.kafka.streams.s.partitions.0=1\nnot a line\n", 2, "no '='"),
        ("\n\ntasknames.P 0.systems.kafka.streams.s.partitions.x=1", 3, "is not tasknames"),
        ("tasknames.P 0.systems.kafka.streams.s.partitions.0=ten", 1, "'ten' of task 'P 0' is not a number"),
        ("tasknames.P 0.systems.kafka.streams.s.partitions.0=-2", 1, "below -1"),
        (
            "tasknames.P 0.systems.kafka.streams.s.partitions.0=1\ntasknames.P\\ 0.systems.kafka.streams.s.partitions.0=2",
            2,
            "named on line 1 already",
        ),
    ],
)
def test_a_bad_line_is_named_by_its_number(text: str, line: int, what: str) -> None:
    with pytest.raises(CheckpointFileError) as e:
        parse_lines(text, "offsets.properties")
    assert f"offsets.properties, line {line}: " in str(e.value)
    assert what in str(e.value)


def test_the_json_of_show_reads_back_as_new_offsets() -> None:
    doc = checkpoints_json({"Partition 0": _cp("Partition 0", ("lines", 0, 5, -1)), "Partition 1": None}, job="j-1")
    text = json.dumps(doc)
    assert parse_checkpoint_file(text, "-") == {"Partition 0": {SSP("kafka", "lines", 0): 5}}
    with pytest.raises(CheckpointFileError, match="not the JSON of `checkpoints show --json`"):
        parse_checkpoint_file('{"tasks": 3}', "cp.json")


VIRTUAL = JobModel(
    1,
    {
        f"Partition {p}_{kb}_2": TaskModel(
            f"Partition {p}_{kb}_2", (SSP("kafka", "lines", p, kb), SSP("kafka", "b", 0))
        )
        for p in range(2)
        for kb in range(2)
    },
)


def test_new_offsets_land_on_the_key_bucket_of_a_virtual_task_and_unknown_ones_are_refused() -> None:
    edits = resolve(VIRTUAL, {"Partition 1_1_2": {SSP("kafka", "lines", 1): 3}})
    assert edits == {"Partition 1_1_2": {SSP("kafka", "lines", 1, 1): 3}}
    with pytest.raises(UnknownTargetError, match="task 'Partition 1' is not in the job model"):
        resolve(VIRTUAL, {"Partition 1": {SSP("kafka", "lines", 1): 3}})
    with pytest.raises(UnknownTargetError, match=r"task 'Partition 1_1_2' does not read SystemStreamPartition"):
        resolve(VIRTUAL, {"Partition 1_1_2": {SSP("kafka", "lines", 0): 3}})


def test_a_reset_writes_the_offset_before_the_next_one_for_every_reader_of_a_partition() -> None:
    nxt = {SSP("kafka", "lines", 0): 0, SSP("kafka", "lines", 1): 10, SSP("kafka", "b", 0): 4}
    edits = reset_offsets(VIRTUAL, lambda p: p.stream == "lines", nxt)
    assert edits == {
        f"Partition {p}_{kb}_2": {SSP("kafka", "lines", p, kb): (-1 if p == 0 else 9)}
        for p in range(2)
        for kb in range(2)
    }
    everywhere = reset_offsets(VIRTUAL, lambda p: p.stream == "b", nxt)
    assert everywhere == {t: {SSP("kafka", "b", 0): 3} for t in VIRTUAL.tasks}  # a broadcast partition: every task
    # A task whose checkpoint already says so is not written again.
    last = {"Partition 0_0_2": _cp("Partition 0_0_2", ("lines", 0, -1, 0))}
    assert "Partition 0_0_2" not in changed(last, edits)
    assert "Partition 0_1_2" in changed(last, edits)
