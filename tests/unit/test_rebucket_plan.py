"""Re-bucketing's pure parts: changelog partitions of the new tasks, where each store key goes, the
factor of the job's latest state, and the tombstones a reused partition needs."""

from __future__ import annotations

import pytest

from samzamp.api.errors import ConfigError
from samzamp.commit.checkpoint import CheckpointV1
from samzamp.consume.key_bucket import key_bucket
from samzamp.model.grouper import parse_task_name
from samzamp.offline.rebucket_plan import (
    assign_partitions,
    check_bases,
    check_latest_factor,
    live_keys,
    route_key,
    stale_keys,
)

KEYS = [f"k{i}".encode() for i in range(200)]


def _tasks(base: str, factor: int) -> list[str]:
    return [f"{base}_{b}_{factor}" for b in range(factor)]


def test_new_tasks_take_the_lowest_partitions_in_task_order() -> None:
    """A job that ran at F = 2 (tasks on 0..3) re-bucketed to F = 4: the new tasks, unknown to the
    history, take 0..7 in task order (numbers as numbers), the old tasks' partitions first."""
    known = {"Partition 0_0_2": 0, "Partition 0_1_2": 1, "Partition 1_0_2": 2, "Partition 1_1_2": 3}
    new = _tasks("Partition 1", 4) + _tasks("Partition 0", 4)
    got = assign_partitions(new, known)
    assert got == {name: i for i, name in enumerate(_tasks("Partition 0", 4) + _tasks("Partition 1", 4))}


def test_a_known_new_task_keeps_its_partition_and_the_others_fill_the_gaps() -> None:
    """A new task the history records (a refused start at F = 4 recorded it) keeps its partition; the
    others take the lowest partitions no new task holds, even ones old tasks held."""
    known = {"Partition 0_0_2": 0, "Partition 0_1_2": 1, "Partition 0_1_4": 5, "Partition 0_3_4": 2}
    got = assign_partitions(_tasks("Partition 0", 4), known)
    assert got == {"Partition 0_0_4": 0, "Partition 0_1_4": 5, "Partition 0_2_4": 1, "Partition 0_3_4": 2}
    # numeric order: Partition 2 before Partition 10
    assert assign_partitions(["Partition 10", "Partition 2"], {}) == {"Partition 2": 0, "Partition 10": 1}


def test_two_new_tasks_on_one_recorded_partition_are_refused() -> None:
    with pytest.raises(ValueError, match="same changelog partition 3"):
        assign_partitions(["Partition 0", "Partition 1"], {"Partition 0": 3, "Partition 1": 3})


@pytest.mark.parametrize(("old_factor", "new_factor"), [(2, 4), (4, 2), (1, 4), (4, 1), (2, 8)])
def test_every_key_goes_to_the_new_task_its_messages_go_to(old_factor: int, new_factor: int) -> None:
    """A key of old task (base, b, F1) goes to (base, key_bucket(key, F2)), the task the container
    sends its messages to, which is a descendant (split) or the ancestor (merge) of the old task."""
    for key in KEYS:
        old_name = parse_task_name(
            f"Partition 3_{key_bucket(key, 0, old_factor)}_{old_factor}" if old_factor > 1 else "Partition 3"
        )
        dest = route_key(old_name, key, new_factor)
        assert dest is not None
        new = parse_task_name(dest)
        assert (new.base, new.factor) == ("Partition 3", new_factor)
        assert new.key_bucket == key_bucket(key, 0, new_factor)
        assert old_name.is_ancestor_of(new) or new.is_ancestor_of(old_name), (old_name, dest)


def test_ssp_grouper_names_route_too() -> None:
    key = KEYS[7]
    old = parse_task_name(f"SystemStreamPartition [kafka, in, 2, {key_bucket(key, 0, 2)}]_2")
    assert route_key(old, key, 4) == f"SystemStreamPartition [kafka, in, 2, {key_bucket(key, 0, 4)}]_4"


def test_a_key_in_the_wrong_bucket_is_not_routed() -> None:
    """A store keyed by something else than its messages' keys: its keys are not in their task's bucket."""
    key = KEYS[0]
    wrong = 1 - key_bucket(key, 0, 2)
    assert route_key(parse_task_name(f"Partition 0_{wrong}_2"), key, 4) is None


def test_the_new_factor_must_cover_every_old_base() -> None:
    check_bases(_tasks("Partition 0", 2), _tasks("Partition 0", 4), 4)
    with pytest.raises(ConfigError, match="no task 'Partition 1_0_4'"):
        check_bases(_tasks("Partition 0", 2) + _tasks("Partition 1", 2), _tasks("Partition 0", 4), 4)


def _checkpoint(task: str, millis: int, markers: dict[str, str]) -> CheckpointV1:
    return CheckpointV1(f"{millis}-000000", task, [], markers)


def test_the_latest_state_must_be_of_the_old_factor() -> None:
    old = _tasks("Partition 0", 2)
    last = {
        "Partition 0_0_2": _checkpoint("Partition 0_0_2", 2000, {"counts": "5"}),
        "Partition 0_1_2": _checkpoint("Partition 0_1_2", 2001, {"counts": "7"}),
        "Partition 0": _checkpoint("Partition 0", 1000, {"counts": "9"}),  # F = 1, before
        "Partition 0_0_4": _checkpoint("Partition 0_0_4", 3000, {}),  # no state: does not count
    }
    check_latest_factor(old, last, 2, ["counts"])
    newer = {**last, "Partition 0_3_4": _checkpoint("Partition 0_3_4", 2500, {"counts": "1"})}
    with pytest.raises(ConfigError, match=r"latest checkpoints are of factor 4 .*pass --from-factor 4"):
        check_latest_factor(old, newer, 2, ["counts"])
    with pytest.raises(ConfigError, match="no checkpoint of the job records the state"):
        check_latest_factor(old, {}, 2, ["counts"])


def test_live_keys_is_the_last_value_per_key_tombstones_deleting() -> None:
    records = [(0, b"a", b"1"), (1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1"), (4, b"b", b"2"), (5, b"a", b"3")]
    records += [(6, b"c", None)]
    assert live_keys(records) == ({b"a": b"3", b"b": b"2"}, 7)


def test_a_reused_partition_gets_a_tombstone_for_each_live_key_the_new_state_lacks() -> None:
    present, _ = live_keys([(0, b"x", b"1"), (1, b"y", b"1"), (2, b"z", b"1"), (3, b"z", None)])
    assert stale_keys(present, {b"y": b"9", b"w": b"1"}) == [b"x"]
