"""A commit's asynchronous phase against the real broker (task.commit.stores.async, the default), for a
task inline on the loop and one in a worker process (pool 2).

The test holds LMDB's writer lock on the task's store directory from this process, so the container's
write of a commit's store writes waits for it (LMDB's writer mutex is shared by every process that
opens the environment): while held, the task must go on processing past the commit it asked for, no
checkpoint may cover that commit's inputs, and a stop must wait for the write before its final commit.
"""

from __future__ import annotations

import re
import shutil
import signal
import struct
import subprocess
import time
from collections import Counter
from pathlib import Path

import lmdb
import pytest
from kafka_util import (
    Container,
    counts_store,
    create_topic,
    job_toml,
    produce,
    read_checkpoint_records,
    records,
    run_drain,
    wait_until,
    write_config,
)

from samzamp.storage.dirs import store_dir
from samzamp.storage.lmdb import LmdbEngine
from samzamp.storage.offset_file import read_offset_file

TASK = "Partition 0"
WORDS = 37  # StoreCountTask's words: message m<i> counts word w<i % 37>


class WriterLock:
    """LMDB's writer lock of one store directory, held by this process until ``release``."""

    def __init__(self, path: Path) -> None:
        self._env = lmdb.open(str(path), max_dbs=2, create=False)
        self._txn = self._env.begin(write=True)

    def release(self) -> None:
        self._txn.abort()
        self._env.close()


def _counts(path: Path) -> dict[str, int]:
    engine = LmdbEngine(path)
    try:
        return {k.decode(): struct.unpack(">q", v)[0] for k, v in engine.items()}
    finally:
        engine.close()


def _kinds(rec: Path, kind: str) -> list[int]:
    return [o for k, _, o in records(rec, kind)]


class _CountingJob:
    """A store-counting job of one input partition whose task asks for a commit after each offset in
    ``commit_at``, started with no timed commit and run until its checkpoint of offset 49."""

    def __init__(
        self, broker, unique: str, tmp_path: Path, pool: int, task: str, commit_at: str, *overrides: str
    ) -> None:
        self.bs = broker.bootstrap_servers
        self.topic, self.job = f"in-{unique}", f"async-{unique}"
        create_topic(self.bs, self.topic, 1)
        self.rec, state = tmp_path / "rec", tmp_path / "state"
        self.rec.mkdir()
        self.cfg = write_config(
            tmp_path / "job.toml",
            job_toml(
                self.job,
                f"recording_tasks:{task}",
                self.topic,
                self.rec,
                counts_store(f"kafka.counts-log-{unique}"),
                f'"job.logged.store.base.dir" = "{state}"',
            ),
        )
        self.c = Container(
            self.cfg,
            self.bs,
            f"job.container.thread.pool.size={pool}",
            "task.commit.ms=600000",  # only the commits the task asks for
            f"test.commit.at={commit_at}",
            *overrides,
            log=tmp_path / "container.log",
        )
        self.c.wait_started()
        self.path = store_dir(state, "counts", TASK)
        produce(self.bs, self.topic, 1, 50)
        wait_until(lambda: 49 in _kinds(self.rec, "K"), 60, "the checkpoint of offset 49", self.c)

    def process_past_the_commit_at_74(self) -> None:
        """Offsets 50 to 99 in, with LMDB's writer lock held by the caller: the commit asked for at 74
        sets the store's writes aside and lets the task go on; their write waits for the lock, and
        so does the checkpoint."""
        produce(self.bs, self.topic, 1, 50, start=50)
        wait_until(lambda: 99 in _kinds(self.rec, "P"), 60, "offset 99 processed", self.c)
        assert 74 in _kinds(self.rec, "C")
        assert 74 not in _kinds(self.rec, "K")

    def assert_exited_with_every_input_checkpointed(self, n: int) -> None:
        """The container exits 0; its last checkpoint covers the ``n`` inputs, with the store on disk
        at that checkpoint's marker and its counts exact."""
        assert self.c.proc.wait(timeout=60) == 0, self.c.log_text()[-3000:]
        last = read_checkpoint_records(self.bs, self.job)[-1]
        assert [o.offset for o in last.input_offsets] == [n - 1]
        recorded = read_offset_file(self.path)
        assert recorded is not None
        assert str(recorded.offset) == last.state_markers["counts"]
        assert _counts(self.path) == {f"w{w}": k for w, k in Counter(i % WORDS for i in range(n)).items()}


@pytest.mark.parametrize("pool", [1, 2], ids=["inline", "pool2"])
def test_the_task_processes_while_its_commit_writes_the_store_and_the_checkpoint_and_a_stop_wait_for_it(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    run = _CountingJob(broker, unique, tmp_path, pool, "CommitAtStoreCountTask", "49,74,124")
    bs, rec, c = run.bs, run.rec, run.c
    held = WriterLock(run.path)
    try:
        run.process_past_the_commit_at_74()
        assert all(o.offset < 74 for cp in read_checkpoint_records(bs, run.job) for o in cp.input_offsets)
    finally:
        held.release()
    wait_until(lambda: 74 in _kinds(rec, "K"), 60, "the checkpoint of offset 74", c)
    seen = [(k, o) for k, _, o in records(rec, "PCK")]
    assert seen.index(("C", 74)) < seen.index(("P", 99)) < seen.index(("K", 74))
    cp = next(cp for cp in read_checkpoint_records(bs, run.job) if [o.offset for o in cp.input_offsets] == [74])
    assert int(cp.state_markers["counts"]) >= 0

    # A stop while a commit's write waits: the container's final commit comes after it, and its
    # checkpoint covers every input, with the store on disk at its marker.
    held = WriterLock(run.path)
    try:
        produce(bs, run.topic, 1, 25, start=100)
        wait_until(lambda: 124 in _kinds(rec, "P"), 60, "offset 124 processed", c)
        c.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "shutting down" in c.log_text(), 60, "the container to begin its stop", c)
        assert 124 not in _kinds(rec, "K")
    finally:
        held.release()
    run.assert_exited_with_every_input_checkpointed(125)


@pytest.mark.parametrize("pool", [1, 2], ids=["inline", "pool2"])
def test_a_drain_while_a_commits_write_waits_runs_on_drain_and_the_final_commit_after_the_write(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    """A drain requested while a commit's store write waits: the task reaches its drain point, but
    on_drain and the final commit wait for the write, so the last checkpoint covers every input with
    the store on disk at its marker, and the container exits 0."""
    run = _CountingJob(
        broker,
        unique,
        tmp_path,
        pool,
        "DrainingCommitAtStoreCountTask",
        "49,74",
        "job.drain-monitor.poll.interval.ms=200",
    )
    rec, c = run.rec, run.c
    held = WriterLock(run.path)
    try:
        run.process_past_the_commit_at_74()
        r = run_drain(run.cfg, run.bs)
        assert r.returncode == 0, (r.stdout, r.stderr)
        wait_until(lambda: "drain point:" in c.log_text(), 60, "the drain to begin", c)
        # Nothing marks a drain that waits for a write, so what must not happen is watched for a
        # while: 2 s, ten drain-monitor intervals, far more than on_drain takes once it may run.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert not records(rec, "D"), "on_drain ran while a commit's store write waited"
            assert c.alive(), c.log_text()[-3000:]
            time.sleep(0.05)
        assert 74 not in _kinds(rec, "K")
    finally:
        held.release()
    run.assert_exited_with_every_input_checkpointed(100)
    seen = [(k, o) for k, _, o in records(rec, "PCKD")]
    assert [k for k, _ in seen].count("D") == 1
    assert seen.index(("P", 99)) < seen.index(("K", 74)) < seen.index(("D", 0))


def _tmpfs_wrapper(mount: Path, size: str) -> list[str]:
    """Run a command in its own user and mount namespaces with a tmpfs of ``size`` on ``mount``."""
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", size, str(mount)]


@pytest.mark.parametrize("pool", [1, 2], ids=["inline", "pool2"])
def test_a_full_disk_under_a_commits_asynchronous_write_stops_the_container_without_its_checkpoint(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    """Both stores changelogged, so both are written in the commits' asynchronous phases, on a 1 MiB
    tmpfs that the job fills: the write that fails stops the container with one line naming the
    store, the task and the directory, no checkpoint covers the inputs it held, and a restart with
    space counts every input exactly once."""
    if shutil.which("unshare") is None:
        pytest.skip("a full disk is simulated with a tmpfs in a user namespace, and unshare(1) is not installed")
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run([*_tmpfs_wrapper(probe, "64k"), "true"], capture_output=True, timeout=30, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {done.stderr!r}")
    bs = broker.bootstrap_servers
    topic, job = f"in-{unique}", f"async-full-{unique}"
    n1, n = 500, 4_000
    create_topic(bs, topic, 1)
    produce(bs, topic, 1, n1)
    rec, state = tmp_path / "rec", tmp_path / "state"
    rec.mkdir()
    state.mkdir()
    stores = counts_store(f"kafka.counts-log-{unique}") + (
        f'\n[stores.pad]\nfactory = "lmdb"\nchangelog = "kafka.pad-log-{unique}"\n'
        'key.serde = "string"\nmsg.serde = "string"\n'
    )
    top = f'"job.logged.store.base.dir" = "{state}"\n"test.pad.bytes" = 400'
    cfg = write_config(
        tmp_path / "job.toml", job_toml(job, "recording_tasks:StorePadCountTask", topic, rec, stores, top)
    )
    over = f"job.container.thread.pool.size={pool}"
    c = Container(cfg, bs, over, log=tmp_path / "run-1.log", wrapper=_tmpfs_wrapper(state, "1m"))
    wait_until(lambda: n1 - 1 in _kinds(rec, "K"), 60, f"the first {n1} inputs checkpointed", c)
    produce(bs, topic, 1, n - n1, start=n1)
    assert c.proc.wait(timeout=120) == 1, c.log_text()[-3000:]
    log = c.log_text()
    failed = [line for line in log.splitlines() if line.startswith("samzamp run: failed:")]
    assert len(failed) == 1, log[-3000:]
    assert re.fullmatch(
        rf"samzamp run: failed: store '(counts|pad)' of task '{TASK}' in {re.escape(str(state))}/(counts|pad)/"
        r"Partition_0: no space left on its filesystem \(\d+ bytes free\) while .*; free space there.*",
        failed[0],
    ), failed[0]
    assert "Traceback" not in log
    checkpointed = max(o.offset for cp in read_checkpoint_records(bs, job) for o in cp.input_offsets)
    assert n1 - 1 <= checkpointed < n - 1
    # Every checkpoint's markers were durable: the restart restores each store to its last one.
    c = Container(cfg, bs, over, log=tmp_path / "run-2.log")
    wait_until(lambda: n - 1 in _kinds(rec, "P") and n - 1 in _kinds(rec, "K"), 120, "every input counted", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    assert _counts(store_dir(state, "counts", TASK)) == {
        f"w{w}": k for w, k in Counter(i % WORDS for i in range(n)).items()
    }
