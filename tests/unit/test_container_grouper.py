"""GroupByContainerIds for standalone mode: balance, every task once, and minimal movement."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from samzamp.coordinator.container_grouper import group_by_container_ids
from samzamp.model.grouper import task_order

Assignment = dict[str, list[str]]


def _tasks(n: int) -> list[str]:
    return [f"Partition {i}" for i in range(n)]


def _owner_of(assignment: Assignment) -> dict[str, str]:
    return {task: pid for pid, tasks in assignment.items() for task in tasks}


def _moved(before: Assignment, after: Assignment) -> set[str]:
    """The tasks whose processor changed (a task new in ``after`` has not moved)."""
    old, new = _owner_of(before), _owner_of(after)
    return {task for task, pid in new.items() if task in old and old[task] != pid}


def _check(assignment: Assignment, tasks: list[str], processors: dict[str, str]) -> None:
    """Every processor a key, every task exactly once, in task order, and balanced as Samza is."""
    assert set(assignment) == set(processors)
    placed = [task for names in assignment.values() for task in names]
    assert sorted(placed) == sorted(set(tasks))
    for names in assignment.values():
        assert names == sorted(names, key=task_order)
    t, p = len(set(tasks)), len(processors)
    if p > t:
        assert {pid for pid, names in assignment.items() if names} == set(sorted(processors)[:t])
        assert all(len(names) <= 1 for names in assignment.values())
    elif t:
        assert {len(names) for names in assignment.values()} <= {t // p, -(-t // p)}


def _step(before: Assignment, processors: dict[str, str], tasks: list[str]) -> Assignment:
    after = group_by_container_ids(tasks, processors, previous_owner=_owner_of(before))
    _check(after, tasks, processors)
    return after


# --------------------------------------------------------------------------- scaling without host affinity


@pytest.mark.parametrize(("leaving", "moves_in"), [(("p1", "p2"), (3, 4)), (("p3", "p1"), (2, 4))])
def test_scaling_1_2_3_2_1_over_8_tasks_moves_only_what_balance_or_a_leaving_processor_needs(
    leaving: tuple[str, str], moves_in: tuple[int, int]
) -> None:
    tasks = _tasks(8)
    one = _step({}, {"p1": "h"}, tasks)
    assert one == {"p1": tasks}
    two = _step(one, {"p1": "h", "p2": "h"}, tasks)
    assert len(_moved(one, two)) == 4
    three = _step(two, {"p1": "h", "p2": "h", "p3": "h"}, tasks)
    assert len(_moved(two, three)) == 2  # 8 = 3 + 3 + 2: each of p1 and p2 gives one
    assert sorted(len(names) for names in three.values()) == [2, 3, 3]
    remaining = {"p1": "h", "p2": "h", "p3": "h"}
    before = three
    for pid, moves in zip(leaving, moves_in, strict=True):
        del remaining[pid]
        after = _step(before, dict(remaining), tasks)
        assert _moved(before, after) == set(before[pid])  # exactly the leaving processor's tasks
        assert len(before[pid]) == moves
        before = after


def test_nothing_moves_when_nothing_changed() -> None:
    tasks = _tasks(8)
    processors = {"a": "h1", "b": "h2", "c": "h3"}
    first = group_by_container_ids(tasks, processors)
    for affinity in (False, True):
        again = group_by_container_ids(
            tasks,
            processors,
            previous_owner=_owner_of(first),
            task_locality={t: processors[p] for t, p in _owner_of(first).items()},
            host_affinity=affinity,
        )
        assert again == first


@pytest.mark.parametrize("leaving", ["a", "b", "c", "d"])
def test_a_processor_leaving_moves_only_its_tasks(leaving: str) -> None:
    tasks = _tasks(13)
    processors = {"a": "h", "b": "h", "c": "h", "d": "h"}
    before = group_by_container_ids(tasks, processors)
    del processors[leaving]
    after = _step(before, processors, tasks)
    assert _moved(before, after) == set(before[leaving])


def test_a_new_processor_takes_only_the_tasks_balance_asks_for() -> None:
    tasks = _tasks(12)
    before = group_by_container_ids(tasks, {"a": "h", "b": "h", "c": "h"})
    after = _step(before, {"a": "h", "b": "h", "c": "h", "z": "h"}, tasks)
    assert _moved(before, after) == set(after["z"])
    assert len(after["z"]) == 3


# --------------------------------------------------------------------------- host affinity


def test_a_restarted_processor_with_a_new_id_gets_its_location_s_tasks_back() -> None:
    tasks = _tasks(9)
    before = group_by_container_ids(tasks, {"p1": "A", "p2": "B", "p3": "C"})
    locality = {t: {"p1": "A", "p2": "B", "p3": "C"}[p] for t, p in _owner_of(before).items()}
    # p2 restarts as p9 at the same location while p3 leaves: p3's tasks are shared out (5 + 4).
    now = {"p1": "A", "p9": "B"}
    with_affinity = group_by_container_ids(
        tasks, now, previous_owner=_owner_of(before), task_locality=locality, host_affinity=True
    )
    _check(with_affinity, tasks, now)
    assert set(before["p2"]) < set(with_affinity["p9"])
    assert set(before["p1"]) < set(with_affinity["p1"])
    without = group_by_container_ids(tasks, now, previous_owner=_owner_of(before), task_locality=locality)
    _check(without, tasks, now)
    assert not set(before["p2"]) <= set(without["p9"])  # without host affinity the locality is not read


def test_a_rolling_restart_returns_every_task_to_its_location() -> None:
    tasks = _tasks(8)
    processors = {"a-1": "A", "b-1": "B", "c-1": "C"}
    assignment = group_by_container_ids(tasks, processors)
    home = {t: processors[p] for t, p in _owner_of(assignment).items()}
    for n, location in enumerate(["A", "B", "C"] * 2, start=2):
        old = next(pid for pid, loc in processors.items() if loc == location)
        del processors[old]
        processors[f"{location.lower()}-{n}"] = location
        assignment = group_by_container_ids(
            tasks, processors, previous_owner=_owner_of(assignment), task_locality=home, host_affinity=True
        )
        _check(assignment, tasks, processors)
        assert {t: processors[p] for t, p in _owner_of(assignment).items()} == home


def test_processors_sharing_a_location_keep_their_own_tasks_and_share_the_rest() -> None:
    tasks = _tasks(9)
    before = {"x": tasks[:6], "z": tasks[6:]}
    locality = {t: "h1" for t in tasks[:6]} | {t: "h2" for t in tasks[6:]}
    processors = {"x": "h1", "y": "h1", "z": "h2"}  # y starts on x's host
    after = group_by_container_ids(
        tasks, processors, previous_owner=_owner_of(before), task_locality=locality, host_affinity=True
    )
    _check(after, tasks, processors)
    assert after["z"] == before["z"]
    assert set(after["x"]) | set(after["y"]) == set(before["x"])
    assert len(_moved(before, after)) == 3


def test_extra_tasks_go_to_the_location_that_holds_their_state() -> None:
    # a has 4 tasks, b joins a's location, c at M has 1: 5 tasks over 3 processors (2, 2, 1). The
    # location that needs the two larger shares is L, though c holds more own tasks than b.
    tasks = _tasks(5)
    before = {"a": tasks[:4], "c": tasks[4:]}
    locality = {t: "L" for t in tasks[:4]} | {tasks[4]: "M"}
    processors = {"a": "L", "b": "L", "c": "M"}
    after = group_by_container_ids(
        tasks, processors, previous_owner=_owner_of(before), task_locality=locality, host_affinity=True
    )
    _check(after, tasks, processors)
    assert {t: processors[p] for t, p in _owner_of(after).items()} == locality
    assert len(_moved(before, after)) == 2


def test_the_locality_wins_over_a_previous_owner_elsewhere() -> None:
    # The previous model named a, but the task last ran (and has its state) at M.
    processors = {"a": "L", "b": "M"}
    after = group_by_container_ids(
        ["Partition 0", "Partition 1"],
        processors,
        previous_owner={"Partition 0": "a", "Partition 1": "a"},
        task_locality={"Partition 0": "M"},
        host_affinity=True,
    )
    assert after == {"a": ["Partition 1"], "b": ["Partition 0"]}


def test_a_task_whose_location_is_gone_stays_with_its_owner() -> None:
    after = group_by_container_ids(
        _tasks(2),
        {"a": "L", "b": "M"},
        previous_owner={"Partition 0": "b", "Partition 1": "a"},
        task_locality={"Partition 0": "gone", "Partition 1": "gone"},
        host_affinity=True,
    )
    assert after == {"a": ["Partition 1"], "b": ["Partition 0"]}


# --------------------------------------------------------------------------- edges


def test_more_processors_than_tasks_uses_the_smallest_ids() -> None:
    processors = {pid: f"h-{pid}" for pid in ["e", "d", "c", "b", "a"]}
    owners = {"Partition 0": "e", "Partition 1": "a", "Partition 2": "b"}
    after = group_by_container_ids(_tasks(3), processors, previous_owner=owners)
    assert after == {"a": ["Partition 1"], "b": ["Partition 2"], "c": ["Partition 0"], "d": [], "e": []}


def test_as_many_processors_as_tasks_gives_one_each() -> None:
    after = group_by_container_ids(_tasks(3), {"a": "h", "b": "h", "c": "h"}, previous_owner={"Partition 0": "c"})
    assert after == {"a": ["Partition 1"], "b": ["Partition 2"], "c": ["Partition 0"]}


def test_empty_inputs() -> None:
    assert group_by_container_ids([], {"a": "h", "b": "h"}) == {"a": [], "b": []}
    assert group_by_container_ids([], {}) == {}
    with pytest.raises(ValueError, match="no processor to run the job's 2 tasks"):
        group_by_container_ids(_tasks(2), {})


def test_tasks_are_in_task_order_and_a_name_given_twice_is_one_task() -> None:
    after = group_by_container_ids(["Partition 10", "Partition 2", "Partition 2", "Partition 02"], {"a": "h"})
    assert after == {"a": ["Partition 02", "Partition 2", "Partition 10"]}


def test_the_result_does_not_depend_on_the_order_of_the_inputs() -> None:
    rng = random.Random(17)
    tasks = [*_tasks(20), "Partition 01", "Partition 001"]
    processors = {f"p{i}": f"h{i % 3}" for i in range(6)}
    owners = {t: f"p{rng.randrange(8)}" for t in tasks}
    locality = {t: f"h{rng.randrange(4)}" for t in tasks}
    for affinity in (False, True):
        expected = group_by_container_ids(
            tasks, processors, previous_owner=owners, task_locality=locality, host_affinity=affinity
        )
        for _ in range(20):
            shuffled = [dict(rng.sample(list(m.items()), len(m))) for m in (processors, owners, locality)]
            got = group_by_container_ids(
                rng.sample(tasks, len(tasks)),
                shuffled[0],
                previous_owner=shuffled[1],
                task_locality=shuffled[2],
                host_affinity=affinity,
            )
            assert got == expected


# --------------------------------------------------------------------------- property: the minimum moves


def _ceil_max(counts: dict[str, int], per_unit: dict[str, int], q: int, r: int) -> int:
    """The most of ``counts[u]`` items that units ``u`` of ``per_unit[u]`` processors keep when each
    processor takes q items and r of them one more: sum(min(n, q*k)) + min(r, sum(min(k, n - q*k)))."""
    base = sum(min(n, q * per_unit[u]) for u, n in counts.items())
    return base + min(r, sum(min(per_unit[u], max(0, n - q * per_unit[u])) for u, n in counts.items()))


def _bounds(
    tasks: list[str],
    processors: dict[str, str],
    owners: dict[str, str],
    locality: dict[str, str],
    affinity: bool,
) -> tuple[dict[str, str], dict[str, str], int, int]:
    """Homes, counted owners, and the most tasks any balanced assignment keeps at home / with their owner."""
    present = {t: o for t, o in owners.items() if o in processors}
    homes: dict[str, str] = {}
    if affinity:
        here = set(processors.values())
        for t in tasks:
            if locality.get(t) in here:
                homes[t] = locality[t]
            elif t in present:
                homes[t] = processors[present[t]]
    counted = {t: o for t, o in present.items() if homes.get(t, processors[o]) == processors[o]}
    t, p = len(tasks), len(processors)
    if p >= t:
        used = sorted(processors)[:t]
        loc_max = sum(min(n, sum(processors[u] == loc for u in used)) for loc, n in Counter(homes.values()).items())
        own_max = sum(1 for pid in used if pid in counted.values())
        return homes, counted, loc_max, own_max
    q, r = divmod(t, p)
    per_location = Counter(processors.values())
    loc_max = _ceil_max(Counter(homes.values()), per_location, q, r)
    own_max = _ceil_max(Counter(counted.values()), dict.fromkeys(processors, 1), q, r)
    return homes, counted, loc_max, own_max


def _brute_force_best(
    processors: dict[str, str], homes: dict[str, str], counted: dict[str, str], t: int
) -> tuple[int, int]:
    """(at home, with owner) of the best choice of the processors that get ceil(t/p), tried one by one."""
    q, r = divmod(t, len(processors))
    home_n, own_n = Counter(homes.values()), Counter(counted.values())
    best = (-1, -1)
    for ceil in itertools.combinations(sorted(processors), r):
        share = {pid: q + (pid in ceil) for pid in processors}
        cap = Counter({loc: 0 for loc in processors.values()})
        for pid, s in share.items():
            cap[processors[pid]] += s
        kept = (sum(min(n, cap[loc]) for loc, n in home_n.items()), sum(min(n, share[o]) for o, n in own_n.items()))
        best = max(best, kept)
    return best


def test_random_cases_are_balanced_and_move_no_more_than_they_must() -> None:
    rng = random.Random(2024)
    for case in range(3000):
        t, p = rng.randrange(0, 25), rng.randrange(1, 8)
        tasks = rng.sample(_tasks(40), t)
        pool = [f"p{i}" for i in range(10)]
        processors = {pid: f"h{rng.randrange(4)}" for pid in rng.sample(pool, p)}
        owners = {task: rng.choice(pool) for task in tasks if rng.random() < 0.85}
        locality = {task: f"h{rng.randrange(5)}" for task in tasks if rng.random() < 0.7}
        affinity = rng.random() < 0.5
        got = group_by_container_ids(
            tasks, processors, previous_owner=owners, task_locality=locality, host_affinity=affinity
        )
        _check(got, tasks, processors)
        placed = _owner_of(got)
        homes, counted, loc_max, own_max = _bounds(tasks, processors, owners, locality, affinity)
        at_home = sum(processors[placed[task]] == home for task, home in homes.items())
        with_owner = sum(placed[task] == owner for task, owner in counted.items())
        assert at_home == loc_max, case
        if not affinity:
            # The minimum: every task whose owner left, and those the balance takes from the others.
            moves = sum(placed[task] != owner for task, owner in owners.items())
            assert moves == len(owners) - own_max, case
            assert with_owner == own_max, case
        if p < t:
            # And with host affinity the most owners kept of the assignments that keep loc_max at home.
            assert (at_home, with_owner) == _brute_force_best(processors, homes, counted, t), case
