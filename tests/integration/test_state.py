"""Issue 4 against the real broker: LMDB stores changelogged to Kafka, restored on start."""

from __future__ import annotations

import re
import shutil
import struct
from collections import Counter
from pathlib import Path

import pytest
from kafka_util import Container, job_toml, produce, records, seed_input, wait_until, write_config

from samzamp.storage.lmdb import LmdbEngine

pytestmark = pytest.mark.integration

PARTITIONS = 4
WORDS = 37


def _store_toml(tmp_path: Path, unique: str, topic: str, task: str) -> tuple[Path, Path, Path]:
    rec = tmp_path / "rec"
    rec.mkdir(exist_ok=True)
    state = tmp_path / "state"
    extra = f"""
[stores.counts]
factory = "lmdb"
changelog = "kafka.counts-log-{unique}"
key.serde = "string"
msg.serde = "long"
"""
    top = f'"job.logged.store.base.dir" = "{state}"'
    cfg = write_config(
        tmp_path / "job.toml", job_toml(f"state-{unique}", f"recording_tasks:{task}", topic, rec, extra, top)
    )
    return cfg, rec, state


def _store_contents(state: Path) -> dict[str, dict[str, int]]:
    """Task dir -> {key: value} of every local "counts" store (read with LMDB directly)."""
    out = {}
    for d in sorted((state / "counts").iterdir()):
        engine = LmdbEngine(d)
        try:
            out[d.name] = {k.decode(): struct.unpack(">q", v)[0] for k, v in engine.items()}
        finally:
            engine.close()
    return out


def _true_counts(n: int) -> dict[str, dict[str, int]]:
    per: dict[str, Counter[str]] = {f"Partition_{p}": Counter() for p in range(PARTITIONS)}
    for i in range(n):
        per[f"Partition_{i % PARTITIONS}"][f"w{i % WORDS}"] += 1
    return {t: dict(c) for t, c in per.items()}


def _replayed(log: str) -> list[int]:
    return [int(x) for x in re.findall(r"replayed (\d+) changelog records", log)]


def _run_until(cfg: Path, broker, rec: Path, n: int, log: Path, *overrides: str) -> str:
    """Run a container until ``n`` distinct offsets were processed (over all runs) and every task's
    store was opened, then stop it cleanly; returns its log."""
    c = Container(cfg, broker.bootstrap_servers, *overrides, log=log)
    wait_until(lambda: len(_replayed(c.log_text())) >= PARTITIONS, 60, "every store opened", c)
    wait_until(lambda: len({(p, o) for _, p, o in records(rec)}) >= n, 120, f"{n} processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    return c.log_text()


def test_counts_continue_after_restart_and_a_full_replay_gives_the_same_state(broker, unique, tmp_path: Path) -> None:
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 4_000)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreCountTask")
    _run_until(cfg, broker, rec, 4_000, tmp_path / "run-0.log")
    assert _store_contents(state) == _true_counts(4_000)

    produce(broker.bootstrap_servers, topic, PARTITIONS, 2_000, start=4_000)
    log = _run_until(cfg, broker, rec, 6_000, tmp_path / "run-1.log")
    assert _store_contents(state) == _true_counts(6_000)
    assert _replayed(log) == [0] * PARTITIONS, "host affinity: a clean stop leaves nothing to replay"

    # Without the local stores, the full replay of the changelog gives the same state.
    shutil.rmtree(state)
    log = _run_until(cfg, broker, rec, 6_000, tmp_path / "run-2.log")
    assert sum(_replayed(log)) >= 6_000  # every write of every task (compaction may drop some on real Kafka)
    assert _store_contents(state) == _true_counts(6_000)


def test_host_affinity_replays_only_what_was_written_after_the_recorded_offset(broker, unique, tmp_path: Path) -> None:
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 2_000)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreCountTask")
    _run_until(cfg, broker, rec, 2_000, tmp_path / "run-0.log")
    # Move one task's local store back in time: keep a copy from now, run more, then put the copy back.
    saved = tmp_path / "saved"
    shutil.copytree(state / "counts" / "Partition_1", saved)
    produce(broker.bootstrap_servers, topic, PARTITIONS, 1_000, start=2_000)
    _run_until(cfg, broker, rec, 3_000, tmp_path / "run-1.log")
    shutil.rmtree(state / "counts" / "Partition_1")
    shutil.copytree(saved, state / "counts" / "Partition_1")
    log = _run_until(cfg, broker, rec, 3_000, tmp_path / "run-2.log")
    # Partition 1 processed 250 more messages in run 1, each one changelog write: exactly those replay.
    replayed = dict(re.findall(r"store 'counts' of task 'Partition (\d)': .*?replayed (\d+) changelog", log))
    assert replayed == {"0": "0", "1": "250", "2": "0", "3": "0"}
    assert _store_contents(state) == _true_counts(3_000)


def test_deleted_keys_stay_deleted_after_restore(broker, unique, tmp_path: Path) -> None:
    topic = f"in-{unique}"
    n = 900
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreDeleteTask")
    expected = {f"k{i}" for i in range(n) if i % 3}

    def keys() -> set[str]:
        return {k for d in _store_contents(state).values() for k in d}

    _run_until(cfg, broker, rec, n, tmp_path / "run-0.log")
    assert keys() == expected
    shutil.rmtree(state)  # a full restore replays puts and tombstones
    log = _run_until(cfg, broker, rec, n, tmp_path / "run-1.log")
    assert sum(_replayed(log)) >= n
    assert keys() == expected
