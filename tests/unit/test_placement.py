"""Where tasks run in the worker pool: balanced by SSP count, the same on every start, and a task
that arrives goes to the least loaded worker without moving any task already placed."""

from __future__ import annotations

from collections import Counter

import pytest

from samzamp.api.envelope import SystemStreamPartition
from samzamp.dispatch.process.placement import assign_tasks, place_task, place_tasks


def _job(sizes: dict[str, int]) -> dict[str, frozenset[SystemStreamPartition]]:
    return {name: frozenset(SystemStreamPartition("kafka", name, p) for p in range(n)) for name, n in sizes.items()}


def test_a_whole_job_is_balanced_by_ssp_count_largest_first() -> None:
    placement = assign_tasks(_job({"a": 3, "b": 1, "c": 1, "d": 1, "e": 2}), 2)
    # a(3) -> 0; e(2) -> 1; b -> 1 (2 < 3); c -> 0 (3 = 3, lower index); d -> 1 (3 < 4)
    assert placement == {"a": 0, "e": 1, "b": 1, "c": 0, "d": 1}
    loads = [
        sum(n for name, n in {"a": 3, "b": 1, "c": 1, "d": 1, "e": 2}.items() if placement[name] == w) for w in (0, 1)
    ]
    assert loads == [4, 4]


def test_the_same_tasks_on_the_same_pool_size_land_in_the_same_place_whatever_their_order() -> None:
    sizes = {f"Partition {p}": 1 for p in range(7)}
    shuffled = dict(reversed(list(sizes.items())))
    assert assign_tasks(_job(sizes), 3) == assign_tasks(_job(shuffled), 3)
    assert sorted(assign_tasks(_job(sizes), 3).values()) == [0, 0, 0, 1, 1, 2, 2]


def test_an_arriving_task_goes_to_the_least_loaded_worker() -> None:
    assert place_task([3, 1, 2]) == 1
    assert place_tasks({"new": 1}, [3, 1, 2]) == {"new": 1}


def test_ties_go_to_the_lowest_worker_index() -> None:
    assert place_task([2, 1, 1]) == 1
    assert place_task([0, 0]) == 0
    assert place_tasks({"new": 2}, [2, 1, 1]) == {"new": 1}


def test_arriving_tasks_are_placed_one_after_another_on_the_loads_they_leave() -> None:
    # Largest first: x(2) -> 1 (load 1); then y(1) and z(1) by name: y -> 2 (1), z -> 0 (2 vs 3 vs 2: 0).
    assert place_tasks({"z": 1, "y": 1, "x": 2}, [2, 1, 1]) == {"x": 1, "y": 2, "z": 0}


def test_placing_onto_an_empty_pool_is_the_whole_job_placement() -> None:
    sizes = {"a": 2, "b": 1, "c": 3, "d": 1}
    assert place_tasks(sizes, [0, 0, 0]) == assign_tasks(_job(sizes), 3)


def test_a_task_that_leaves_and_comes_back_fills_the_gap_it_left() -> None:
    sizes = {f"Partition {p}": 1 for p in range(4)}
    placement = assign_tasks(_job(sizes), 2)
    gone = "Partition 1"
    loads = [sum(1 for name, w in placement.items() if w == i and name != gone) for i in (0, 1)]
    assert place_tasks({gone: 1}, loads) == {gone: placement[gone]}


def test_no_workers_is_an_error_not_a_silent_empty_placement() -> None:
    with pytest.raises(ValueError, match="no workers"):
        place_task([])
    with pytest.raises(ValueError, match="no workers"):
        place_tasks({"a": 1}, [])


def test_tasks_are_placed_in_numeric_task_order() -> None:
    tasks = {f"Partition {p}": {p} for p in range(12)}
    assert assign_tasks(tasks, 3) == {f"Partition {p}": p % 3 for p in range(12)}


@pytest.mark.parametrize(
    ("partitions", "factor", "workers"), [(1, 2, 2), (1, 4, 2), (1, 4, 4), (2, 2, 2), (2, 4, 4), (3, 2, 4)]
)
def test_a_partitions_key_buckets_are_spread_over_the_workers(partitions: int, factor: int, workers: int) -> None:
    tasks = {f"Partition {p}_{kb}_{factor}": {f"in-{p}-{kb}"} for p in range(partitions) for kb in range(factor)}
    placed = assign_tasks(tasks, workers)
    for p in range(partitions):
        per_worker = Counter(placed[f"Partition {p}_{kb}_{factor}"] for kb in range(factor))
        # As even as the counts allow: no worker holds two buckets of a partition while another holds none.
        assert len(per_worker) == min(workers, factor)
        assert max(per_worker.values()) - min(per_worker.values()) <= 1
    assert max(Counter(placed.values()).values()) - min(Counter(placed.values()).values()) <= 1
    assert assign_tasks(dict(reversed(tasks.items())), workers) == placed  # stable
