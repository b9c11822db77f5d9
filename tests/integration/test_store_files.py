"""Against the real broker: a store's local files that are damaged or cannot be written. A truncated
``data.mdb`` means a full restore from the changelog, never a crash; a value whose bytes changed is
found by its checksum (at the start after, or at the read while running), never served, and restored
from the changelog; a full disk stops the container with one line naming the store, the task and the
directory, and a restart with space gives exact counts."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from kafka_util import (
    Container,
    counts_store,
    create_topic,
    job_toml,
    produce,
    read_all,
    read_checkpoints,
    records,
    seed_input,
    wait_until,
    write_config,
)
from test_state import (
    PARTITIONS,
    _counts_at,
    _replayed,
    _restored_states,
    _run_through,
    _run_until,
    _store_contents,
    _store_toml,
    _true_counts,
)

from samzamp.storage.checksum import seal

pytestmark = pytest.mark.integration

# data.mdb of each task cut at one of the sizes; the fourth task's is left whole.
CUTS = {"Partition_0": ("8 KiB", lambda n: 8192), "Partition_1": ("half", lambda n: n // 2)}
CUTS["Partition_2"] = ("its size minus 4 KiB", lambda n: n - 4096)


@pytest.mark.parametrize("pool", [0, 2], ids=["inline", "pool2"])
def test_truncated_data_files_are_restored_in_full_from_the_changelog(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 2_000)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreCountTask")
    over = f"job.container.thread.pool.size={pool}"
    _run_until(cfg, broker, rec, 2_000, tmp_path / "run-0.log", over)
    assert _store_contents(state) == _true_counts(2_000)

    for task, (what, cut) in CUTS.items():
        data = state / "counts" / task / "data.mdb"
        size = data.stat().st_size
        assert 8192 <= cut(size) < size, (
            f"{task}: cutting {size} bytes to {what} must leave the meta pages and cut data"
        )
        os.truncate(data, cut(size))
    produce(broker.bootstrap_servers, topic, PARTITIONS, 1_000, start=2_000)
    log = _run_until(cfg, broker, rec, 3_000, tmp_path / "run-1.log", over)

    assert _store_contents(state) == _true_counts(3_000)
    for task in CUTS:
        name = task.replace("_", " ")
        where = re.escape(str(state / "counts" / task))
        warnings = re.findall(
            rf"WARNING .*store 'counts' of task '{name}': the LMDB files in {where} cannot be used", log
        )
        assert len(warnings) == 1, log[-3000:]
        assert re.search(rf"store 'counts' of task '{name}': full restore; replayed [1-9]\d* changelog records", log)
    assert re.search(r"store 'counts' of task 'Partition 3': local store at offset \d+ \(host affinity\)", log)
    assert "Partition 3': the LMDB files" not in log


def _flip_value(data_mdb: Path, key: str, count: int) -> int:
    """Change the last byte of the value ``count`` of ``key`` in a "counts" store's data.mdb, wherever
    the file holds it (LMDB's leaf node: the key bytes, then the sealed value), as a bad sector
    would; returns how many copies it changed."""
    node = key.encode() + seal(key.encode(), struct.pack(">q", count))
    data = data_mdb.read_bytes()
    n, at = 0, data.find(node)
    fd = os.open(data_mdb, os.O_RDWR)
    try:
        while at >= 0:
            os.pwrite(fd, bytes([data[at + len(node) - 1] ^ 0x01]), at + len(node) - 1)
            n += 1
            at = data.find(node, at + 1)
    finally:
        os.close(fd)
    return n


def _restored_after_damage(log: str, state: Path, task: str, key: str, why: str) -> None:
    """The log of the start after ``task``'s store was damaged at ``key``: one warning naming the
    store, the task, the key and the file, then a full restore from the changelog."""
    name = task.replace("_", " ")
    where = re.escape(str(state / "counts" / task))
    warnings = re.findall(
        rf"WARNING .*store 'counts' of task '{name}': the LMDB files in {where} cannot be used \({why}: "
        rf"the value of key b'{key}' in {where}/data\.mdb fails its checksum",
        log,
    )
    assert len(warnings) == 1, log[-3000:]
    assert re.search(rf"store 'counts' of task '{name}': full restore; replayed [1-9]\d* changelog records", log)


def test_a_value_damaged_while_stopped_is_found_at_the_next_start_and_restored_in_full(
    broker, unique, tmp_path: Path
) -> None:
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 2_000)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreCountTask")
    _run_until(cfg, broker, rec, 2_000, tmp_path / "run-0.log")
    truth = _true_counts(2_000)
    assert _store_contents(state) == truth

    assert _flip_value(state / "counts" / "Partition_1" / "data.mdb", "w5", truth["Partition_1"]["w5"]) >= 1
    produce(broker.bootstrap_servers, topic, PARTITIONS, 1_000, start=2_000)
    log = _run_until(cfg, broker, rec, 3_000, tmp_path / "run-1.log")

    _restored_after_damage(log, state, "Partition_1", "w5", "it was found damaged")
    assert _store_contents(state) == _true_counts(3_000)
    for other in ("Partition 0", "Partition 2", "Partition 3"):
        assert re.search(rf"store 'counts' of task '{other}': local store at offset \d+ \(host affinity\)", log)


def test_a_value_damaged_while_running_fails_the_task_and_is_never_served_or_changelogged(
    broker, unique, tmp_path: Path
) -> None:
    """In a worker process: once every task checkpointed (its writes applied to LMDB), the count of
    "w5" in Partition 1's store changes on disk; the next input of "w5" reads it there."""
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 2_000)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "CheckpointedStoreCountTask")
    # Each write goes to the changelog at once: a count computed from the damaged value would be there.
    pool = "job.container.thread.pool.size=2"
    each = "stores.counts.write.batch.size=1"
    c = Container(cfg, broker.bootstrap_servers, pool, each, log=tmp_path / "run-0.log")
    last = {(p, 2_000 // PARTITIONS - 1) for p in range(PARTITIONS)}
    wait_until(lambda: last <= {(p, o) for _, p, o in records(rec, "K")}, 120, "every input checkpointed", c)
    truth = _true_counts(2_000)["Partition_1"]["w5"]
    assert _flip_value(state / "counts" / "Partition_1" / "data.mdb", "w5", truth) >= 1

    produce(broker.bootstrap_servers, topic, PARTITIONS, 1_000, start=2_000)
    assert c.proc.wait(timeout=120) == 1, c.log_text()[-3000:]
    log = c.log_text()
    where = re.escape(str(state / "counts" / "Partition_1"))
    failed = [line for line in log.splitlines() if line.startswith("samzamp run: failed:")]
    assert len(failed) == 1, log[-3000:]
    assert re.fullmatch(
        rf"samzamp run: failed: store 'counts' of task 'Partition 1' in {where}: the value of key b'w5' "
        rf"in {where}/data\.mdb fails its checksum \(CRC32C\): its bytes changed on disk; nothing to do: .*",
        failed[0],
    ), failed[0]
    assert len(re.findall(r"WARNING .*store 'counts' of task 'Partition 1' in .*fails its checksum", log)) == 1
    # Every count of "w5" the changelog ever held is a true one: none was computed from the damaged value.
    changelog = read_all(broker.bootstrap_servers, f"counts-log-{unique}", [1])
    w5 = [struct.unpack(">q", m.value())[0] for m in changelog if m.key() == b"w5"]
    assert w5 == list(range(1, truth + 1)), w5[-5:]

    # Run 0 died with the other tasks' last inputs processed but maybe not checkpointed: their
    # records are no sign that this run applied them, their checkpoints are.
    c = Container(cfg, broker.bootstrap_servers, pool, log=tmp_path / "run-1.log")
    wait_until(lambda: len(_replayed(c.log_text())) >= PARTITIONS, 60, "every store opened", c)
    last = {(p, 3_000 // PARTITIONS - 1) for p in range(PARTITIONS)}
    wait_until(lambda: last <= {(p, o) for _, p, o in records(rec, "K")}, 120, "every input checkpointed", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    _restored_after_damage(c.log_text(), state, "Partition_1", "w5", "it was marked damaged")
    assert _store_contents(state) == _true_counts(3_000)


@pytest.mark.parametrize("pool", [0, 2], ids=["inline", "pool2"])
def test_a_crash_in_native_code_prints_where_it_happened(broker, unique, tmp_path: Path, pool: int) -> None:
    topic = f"in-{unique}"
    create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    # Only partition 0 has input, so one task crashes: two workers crashing at once write their
    # traces into the one log byte by byte interleaved, and neither can be read.
    produce(broker.bootstrap_servers, topic, 1, 10)
    cfg = write_config(
        tmp_path / "job.toml", job_toml(f"crash-{unique}", "recording_tasks:NativeCrashTask", topic, tmp_path)
    )
    c = Container(cfg, broker.bootstrap_servers, f"job.container.thread.pool.size={pool}", log=tmp_path / "run.log")
    code = c.proc.wait(timeout=60)
    log = c.log_text()
    if pool == 0:
        assert code == -11, log[-3000:]
    else:  # the worker died; the container says which and stops
        assert code == 1, log[-3000:]
        assert "was killed by SIGSEGV" in log, log[-3000:]
    assert "Fatal Python error: Segmentation fault" in log, log[-3000:]
    assert re.search(r'File ".*recording_tasks\.py", line \d+ in process', log), log[-3000:]


# -- a full disk --------------------------------------------------------------------------------------


def _tmpfs_wrapper(mount: Path, size: str) -> list[str]:
    """Run a command in its own user and mount namespaces with a tmpfs of ``size`` on ``mount``
    (which dies with the namespace)."""
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", size, str(mount)]


def _require_tmpfs(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("a full disk is simulated with a tmpfs in a user namespace, and unshare(1) is not installed")
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(
        [*_tmpfs_wrapper(probe, "64k"), "true"], capture_output=True, text=True, timeout=30, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here (a full disk is simulated so): {done.stderr}")


@pytest.mark.parametrize("pool", [0, 2], ids=["inline", "pool2"])
def test_a_full_disk_stops_the_container_with_one_line_and_a_restart_with_space_is_exact(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    """The stores live on a 1 MiB tmpfs that the job fills (each message adds 200 bytes to a store).
    The first inputs fit and are checkpointed; the rest fill the disk: the container exits 1 with one
    line naming the store, the task and the directory. The tmpfs dies with the container; with the
    stores on a disk with space, a restart restores them from the changelog at the last checkpoints
    (what each task sees at init is exactly the counts of the inputs they cover) and then counts
    every input exactly once."""
    _require_tmpfs(tmp_path)
    n1, n = 1_000, 8_000
    topic = f"in-{unique}"
    job = f"full-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n1)
    rec = tmp_path / "rec"
    rec.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    extra = (
        counts_store(f"kafka.counts-log-{unique}")
        + """
[stores.pad]
factory = "lmdb"
key.serde = "string"
msg.serde = "string"
"""
    )
    top = (
        f'"job.logged.store.base.dir" = "{state}"\n"job.non-logged.store.base.dir" = "{state}"\n"test.pad.bytes" = 200'
    )
    cfg = write_config(
        tmp_path / "job.toml", job_toml(job, "recording_tasks:StorePadCountTask", topic, rec, extra, top)
    )
    over = f"job.container.thread.pool.size={pool}"

    c = Container(cfg, broker.bootstrap_servers, over, log=tmp_path / "run-1.log", wrapper=_tmpfs_wrapper(state, "1m"))
    first = {p: n1 // PARTITIONS - 1 for p in range(PARTITIONS)}

    def checkpointed() -> set[tuple[int, int]]:
        return {(p, o) for _, p, o in records(rec, "K")}

    wait_until(lambda: set(first.items()) <= checkpointed(), 60, f"the first {n1} inputs checkpointed", c)
    produce(broker.bootstrap_servers, topic, PARTITIONS, n - n1, start=n1)
    assert c.proc.wait(timeout=120) == 1, c.log_text()[-3000:]
    log = c.log_text()
    failed = [line for line in log.splitlines() if line.startswith("samzamp run: failed:")]
    assert len(failed) == 1, log[-3000:]
    m = re.fullmatch(
        r"samzamp run: failed: store '(counts|pad)' of task 'Partition (\d)' in (\S+): "
        r"no space left on its filesystem \(\d+ bytes free\) while .*; free space there.*",
        failed[0],
    )
    assert m is not None, failed[0]
    assert m[3] == str(state / m[1] / f"Partition_{m[2]}")
    assert "Traceback" not in log
    assert log.rstrip().endswith(failed[0])
    last: dict[int, int] = {}
    for _task, offsets in read_checkpoints(broker.bootstrap_servers, job):
        last.update(offsets)
    assert all(first[p] <= last[p] < n // PARTITIONS - 1 for p in range(PARTITIONS)), last

    known = set(rec.glob("*.state"))
    log2 = _run_through(cfg, broker, rec, n, tmp_path / "run-2.log", over)
    assert len(re.findall(r"store 'counts' of task 'Partition \d': full restore", log2)) == PARTITIONS
    new_pids = {int(f.name.rsplit(".", 2)[1]) for f in set(rec.glob("*.state")) - known}
    assert _restored_states(rec, new_pids) == _counts_at(last)
    assert _store_contents(state) == _true_counts(n)
