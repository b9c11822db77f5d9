"""Which processor runs which task in standalone mode: Samza's GroupByContainerIds, moving as few
tasks as the balance allows.

**Balance.** With t tasks and p processors each processor gets floor(t/p) or ceil(t/p) tasks. With
more processors than tasks, as Samza, only the t smallest processor ids (as strings) get a task,
one each; the others get none.

**Where a task would stay.** Its *owner* is its processor in the previous job model, if that
processor is still here. With host affinity a task also has a *home*: the location where it last
ran (its task locality), if a processor is there now, else its owner's location; its owner then
counts only if it is at the home (a previous model whose barrier failed may name an owner that
never ran the task, while the locality says where its local state is).

**The assignment** keeps the most tasks at their home and, among the assignments that do that, the
most tasks on their owner; no balanced assignment keeps more (see the bound below; with more
processors than tasks: no assignment that gives the tasks to the t smallest ids):

1. the t % p processors that get ceil(t/p) are chosen where the extra task saves a move: first a
   location's processors (those with the most own tasks) while the location has more home tasks
   than its processors' floor shares, then the processors with the most own tasks (an extra task
   saves a move where a processor has more than floor(t/p)), then by id;
2. each processor keeps its own tasks (in task order) up to its share;
3. each task left goes to a processor at its home with room (the one with the most room, then id);
4. what is left fills the processors with room in id order, tasks in task order.

Bound: with q = floor(t/p) and r = t % p, a processor with n own tasks keeps at most min(n, its
share), so at most sum(min(n, q)) + min(r, number of processors with n > q) tasks stay with their
owner; a location with k processors and m home tasks keeps at most min(m, q*k + its ceil shares).
Step 1 gives the ceil shares where they raise these minima, step 2 reaches every processor's
minimum, and step 3 every location's.

**Where this differs from Samza.** Samza's GroupByContainerIds without host affinity ignores the
previous model: tasks sorted as strings are dealt round robin over the processor ids, so going from
2 to 3 processors over 8 tasks moves 4 tasks where 2 must. Its host-affinity variant
(``group(tasks, GrouperContext)``) gives each processor a quota of floor(t/p) tasks from its
location, then deals the rest to the first processor under quota or else round robin: the t % p
tasks above the quota can move even when no processor changed (8 tasks over 3 processors: up to
2), it ignores owners within a location, it can give one task to two processors sharing a
location (its loop has no break), and its order is a hash map's. Here nothing moves when nothing
changed, and task order is ``task_order`` (``Partition 2`` before ``Partition 10``), not string
order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Mapping

from samzamp.model.grouper import task_order

__all__ = ["group_by_container_ids"]


def group_by_container_ids(
    tasks: Collection[str],
    processors: Mapping[str, str],
    *,
    previous_owner: Mapping[str, str] = {},
    task_locality: Mapping[str, str] = {},
    host_affinity: bool = False,
) -> dict[str, list[str]]:
    """Processor id -> its tasks in ``task_order``: every task exactly once, every processor a key.

    ``processors``: processor id -> its location id. ``previous_owner``: task -> its processor in
    the previous job model. ``task_locality``: task -> the location id where it last ran (read only
    with ``host_affinity``). The result depends only on the contents of the arguments, never on the
    order of their keys. ValueError if there are tasks and no processor.
    """
    ordered = sorted(set(tasks), key=_task_key)
    ids = sorted(processors)
    if not ordered:
        return {pid: [] for pid in ids}
    if not ids:
        raise ValueError(f"no processor to run the job's {len(ordered)} tasks")
    at: dict[str, list[str]] = defaultdict(list)  # location -> its processors, in id order
    for pid in ids:
        at[processors[pid]].append(pid)
    present = {
        task: owner for task in ordered if (owner := previous_owner.get(task)) is not None and owner in processors
    }
    homes = _homes(ordered, processors, present, task_locality) if host_affinity else {}
    owners = {task: owner for task, owner in present.items() if homes.get(task, processors[owner]) == processors[owner]}
    shares = _shares(len(ordered), ids, at, Counter(homes.values()), Counter(owners.values()))
    return _assign(ordered, ids, shares, at, homes, owners)


def _task_key(name: str) -> tuple[tuple[tuple[int, int | str], ...], str]:
    # task_order alone ties "Partition 01" with "Partition 1": the name breaks the tie.
    return task_order(name), name


def _homes(
    ordered: list[str], processors: Mapping[str, str], present: Mapping[str, str], task_locality: Mapping[str, str]
) -> dict[str, str]:
    """Task -> its home location, for each task that has one: where it last ran if a processor is
    there, else its owner's location (``present``: task -> its owner, if still here)."""
    here = set(processors.values())
    homes = {}
    for task in ordered:
        location = task_locality.get(task)
        if location is not None and location in here:
            homes[task] = location
        elif task in present:
            homes[task] = processors[present[task]]
    return homes


def _shares(
    t: int, ids: list[str], at: Mapping[str, list[str]], home_tasks: Counter[str], own: Counter[str]
) -> dict[str, int]:
    """Processor -> how many tasks it gets (step 1)."""
    p = len(ids)
    if p >= t:
        return {pid: int(i < t) for i, pid in enumerate(ids)}
    q, r = divmod(t, p)
    saves_location: set[str] = set()
    for location, pids in at.items():
        wanted = min(len(pids), max(0, home_tasks[location] - q * len(pids)))
        saves_location.update(sorted(pids, key=lambda pid: (-own[pid], pid))[:wanted])
    ranked = sorted(ids, key=lambda pid: (pid not in saves_location, -own[pid], pid))
    ceil = set(ranked[:r])
    return {pid: q + (pid in ceil) for pid in ids}


def _assign(
    ordered: list[str],
    ids: list[str],
    shares: Mapping[str, int],
    at: Mapping[str, list[str]],
    homes: Mapping[str, str],
    owners: Mapping[str, str],
) -> dict[str, list[str]]:
    """Steps 2 to 4."""
    out: dict[str, list[str]] = {pid: [] for pid in ids}

    def room(pid: str) -> int:
        return shares[pid] - len(out[pid])

    unplaced = []
    for task in ordered:
        owner = owners.get(task)
        if owner is not None and room(owner) > 0:
            out[owner].append(task)
        else:
            unplaced.append(task)
    rest = []
    for task in unplaced:
        home = homes.get(task)
        near = [pid for pid in at[home] if room(pid) > 0] if home is not None else []
        if near:
            out[min(near, key=lambda pid: (-room(pid), pid))].append(task)
        else:
            rest.append(task)
    free = [pid for pid in ids for _ in range(room(pid))]
    for task, pid in zip(rest, free, strict=True):
        out[pid].append(task)
    return {pid: sorted(names, key=_task_key) for pid, names in out.items()}
