"""Against the real broker: a stateful job changes job.elasticity.factor with samzamp-rebucket-stores.

Word count by message key (recording_tasks.KeyCountTask, a changelogged store keyed by the message
key) on 2 partitions at F = 2, with SIGKILLs, then a clean stop: exact counts. A restart at F = 4
without re-bucketing exits 2; after ``samzamp-rebucket-stores --from-factor 2`` it restores every
count into the task its key's messages now go to and continues, processing nothing twice. Then
F = 4 -> 1 with --build-local-stores: the merged tasks restore by replaying nothing, their reused
changelog partitions cleared of the keys they no longer own.
"""

from __future__ import annotations

import itertools
import re
import shlex
import struct
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka_util import (
    ROOT,
    Container,
    checkpointed_past,
    child_env,
    counts_store,
    create_topic,
    job_toml,
    read_checkpoint_records,
    starting_offsets,
    wait_until,
    write_config,
)

from samzamp.consume.key_bucket import key_bucket
from samzamp.storage.lmdb import LmdbEngine

pytestmark = pytest.mark.integration

PARTS = 2
KEYS = 40  # key k<j>: partition j % PARTS; every key gets a message in every 40
Message = tuple[int, int, str]  # (partition, offset, key)


def _produce(bootstrap: str, topic: str, start: int, count: int) -> list[Message]:
    """Messages m<i> with key k<i % KEYS> on partition (i % KEYS) % PARTS; what the broker stored."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    out: list[Message] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        out.append((msg.partition(), msg.offset(), msg.key().decode()))

    for i in range(start, start + count):
        j = i % KEYS
        producer.produce(topic, f"m{i}".encode(), f"k{j}".encode(), partition=j % PARTS, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert len(out) == count
    return out


def _counts(messages: list[Message]) -> dict[str, int]:
    return dict(Counter(key for _p, _o, key in messages))


def _task_dir(partition: int, key: str, factor: int) -> str:
    base = f"Partition_{partition}"
    return base if factor == 1 else f"{base}_{key_bucket(key.encode(), 0, factor)}_{factor}"


def _task_of(starts: dict[tuple[str, int], int], partition: int, key: str) -> str:
    """The task that reads ``key``'s messages of ``partition``, among a container's (``starts``)."""
    tasks = [t for t, p in starts if p == partition]
    return tasks[0] if len(tasks) == 1 else _task_dir(partition, key, len(tasks))


def _by_task(counts: dict[str, int], factor: int) -> dict[str, dict[str, int]]:
    """Where each key's count must be at ``factor``: the task its messages go to."""
    out: dict[str, dict[str, int]] = {}
    for key, n in counts.items():
        out.setdefault(_task_dir(int(key[1:]) % PARTS, key, factor), {})[key] = n
    return out


def _files(rec: Path, suffix: str) -> set[Path]:
    return set(rec.glob(f"*{suffix}"))


def _processed(files: set[Path]) -> Counter[tuple[int, int]]:
    out: Counter[tuple[int, int]] = Counter()
    for f in files:
        for line in f.read_text().splitlines():
            kind, p, o = line.split()
            if kind == "P":
                out[(int(p), int(o))] += 1
    return out


def _dumps(files: set[Path]) -> dict[str, dict[str, int]]:
    """Task dir -> its store as restored at init (complete dumps only)."""
    out = {}
    for f in files:
        lines = f.read_text().splitlines()
        if lines and lines[-1] == "END":
            out[f.name.rsplit(".", 2)[0]] = {k: int(v) for k, v in (line.split() for line in lines[:-1])}
    return out


def _local(state: Path, tasks: set[str]) -> dict[str, dict[str, int]]:
    """Task dir -> its local "counts" store, for the tasks named."""
    out = {}
    for name in sorted(tasks):
        engine = LmdbEngine(state / "counts" / name)
        try:
            out[name] = {k.decode(): struct.unpack(">q", v)[0] for k, v in engine.items()}
        finally:
            engine.close()
    return {t: c for t, c in out.items() if c}


def _rebucket(cfg: Path, bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "samzamp.cli.rebucket_stores",
            str(cfg),
            "--set",
            f"systems.kafka.bootstrap.servers={bootstrap}",
            "--master",
            "local[2]",
            *args,
        ],
        cwd=str(ROOT),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _lines(out: str, kind: str) -> list[dict[str, str]]:
    return [
        dict(w.split("=", 1) for w in shlex.split(line) if "=" in w)
        for line in out.splitlines()
        if line.startswith(kind + " ")
    ]


def _run_until(
    cfg: Path,
    bootstrap: str,
    rec: Path,
    log: Path,
    want: list[Message],
    tasks: int,
    *sets: str,
    during: Callable[[], None] = lambda: None,
):
    """Start a container, wait until ``tasks`` stores were dumped and it processed every message of
    ``want`` past its task's checkpoint (then calls ``during``), stop it cleanly; its new record and
    dump files, and its log."""
    logs, dumps = _files(rec, ".log"), _files(rec, ".state")
    c = Container(cfg, bootstrap, *sets, log=log)
    c.wait_started()
    starts = starting_offsets(c.log_text())
    wanted = {(p, o) for p, o, k in want if o >= starts[(_task_of(starts, p, k), p)]}
    wait_until(lambda: len(_dumps(_files(rec, ".state") - dumps)) >= tasks, 120, f"{tasks} stores restored", c)
    wait_until(lambda: wanted <= set(_processed(_files(rec, ".log") - logs)), 120, "every message processed", c)
    during()
    assert c.stop() == 0, c.log_text()[-3000:]
    return _files(rec, ".log") - logs, _files(rec, ".state") - dumps, c.log_text()


def test_a_stateful_job_changes_its_factor_with_every_count_exact(broker: Any, unique: str, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap_servers
    topic, changelog = f"rb-in-{unique}", f"rb-counts-{unique}"
    create_topic(bootstrap, topic, PARTS)
    # Tansu cannot add partitions (CreatePartitions), so the changelog has room for the 8 tasks of
    # F = 4 up front. A start at F = 4 refused for its state records none of them: the re-bucketed
    # tasks take partitions 0..7 (a refusal that came after creating and recording the changelog
    # would have said the changelog needs 12 partitions instead).
    create_topic(bootstrap, changelog, 8)
    rec, state = tmp_path / "rec", tmp_path / "state"
    rec.mkdir()
    extra = counts_store(f"kafka.{changelog}")
    top = f'"job.logged.store.base.dir" = "{state}"\n"job.elasticity.factor" = 2'
    cfg = write_config(
        tmp_path / "job.toml", job_toml(f"rb-{unique}", "recording_tasks:KeyCountTask", topic, rec, extra, top)
    )

    # F = 2, three SIGKILLs mid-stream, then a clean stop after everything: exact counts. The killed
    # runs have two workers and 300 µs a message, so each checkpoints progress of its own (a commit
    # every 100 ms) before it is killed with work done past it: each restart finds the buckets of a
    # partition at their own checkpoints, and their stores ahead of them.
    sent: list[Message] = []
    killed = ("job.container.thread.pool.size=2", "test.busy.us=300", "task.commit.ms=100")
    started: list[dict[tuple[str, int], int]] = []
    for k in range(3):
        sent += _produce(bootstrap, topic, len(sent), 2000)
        files_before = _files(rec, ".log")
        before = sum(_processed(files_before).values())
        c = Container(cfg, bootstrap, *killed, log=tmp_path / f"f2-kill-{k}.log")
        c.wait_started()
        starts = starting_offsets(c.log_text())
        started.append(starts)
        wait_until(lambda f=files_before, s=starts: checkpointed_past(rec, f, s), 120, "a checkpoint", c)
        wait_until(lambda b=before: sum(_processed(_files(rec, ".log")).values()) >= b + 300, 120, "progress", c)
        c.kill()

    def refused_while_running() -> None:
        running = _rebucket(cfg, bootstrap, "--from-factor", "2", "--set", "job.elasticity.factor=4")
        assert running.returncode == 3, running.stderr
        assert "is running" in running.stderr

    _, _, log = _run_until(cfg, bootstrap, rec, tmp_path / "f2.log", sent, 4, during=refused_while_running)
    # The premise: each restart started from newer checkpoints, and some restart with a partition's buckets
    # apart (a killed run can finish its round before the kill, and then every bucket of a partition
    # checkpoints the partition's last offset).
    started.append(starting_offsets(log))
    assert all(a != b for a, b in itertools.pairwise(started)), started
    assert any(
        len({o for (t, p), o in starts.items() if p == q}) > 1 for starts in started[1:] for q in range(PARTS)
    ), started
    f2_tasks = {f"Partition_{p}_{b}_2" for p in range(PARTS) for b in range(2)}
    assert _local(state, f2_tasks) == _by_task(_counts(sent), 2)

    # F = 4 without re-bucketing: refused.
    c = Container(cfg, bootstrap, "job.elasticity.factor=4", log=tmp_path / "f4-refused.log")
    assert c.proc.wait(timeout=120) == 2, c.log_text()[-3000:]
    assert "job.elasticity.factor" in c.log_text()
    assert "samzamp rebucket-stores job.toml --from-factor 2" in c.log_text()

    # Refusals that write nothing: the same factor, the wrong old factor, a changelog too small.
    same = _rebucket(cfg, bootstrap, "--from-factor", "2")
    assert same.returncode == 2, same.stderr
    assert "nothing to re-bucket" in same.stderr
    wrong = _rebucket(cfg, bootstrap, "--from-factor", "1", "--set", "job.elasticity.factor=4")
    assert wrong.returncode == 2, wrong.stderr
    assert "latest checkpoints are of factor 2" in wrong.stderr
    small = _rebucket(cfg, bootstrap, "--from-factor", "2", "--set", "job.elasticity.factor=8")
    assert small.returncode == 2, small.stderr
    assert f"changelog topic kafka.{changelog} of store 'counts' has 8 partitions" in small.stderr
    assert "need 16" in small.stderr

    # 2 -> 4: every count moves to its key's new bucket; the restart continues from there.
    r = _rebucket(cfg, bootstrap, "--from-factor", "2", "--set", "job.elasticity.factor=4")
    assert r.returncode == 0, r.stderr
    print(r.stdout)  # the figures, shown with -s or on a failure
    assert len(_lines(r.stdout, "read")) == 4, r.stdout
    assert len(_lines(r.stdout, "wrote")) == 8, r.stdout
    summary = _lines(r.stdout, "rebucketed")[0]
    assert (summary["old_tasks"], summary["new_tasks"], summary["keys"]) == ("4", "8", str(KEYS)), r.stdout
    # Each new task's checkpoint: its ancestor's input offsets (a split), its state marker at its write.
    newest = {cp.task_name: cp for cp in read_checkpoint_records(bootstrap, f"rb-{unique}")}
    for w in _lines(r.stdout, "wrote"):
        p, b = (int(x) for x in w["task"].removeprefix("Partition ").split("_")[:2])
        ancestor = newest[f"Partition {p}_{b % 2}_2"]
        assert {o.partition: o.offset for o in newest[w["task"]].input_offsets} == {
            o.partition: o.offset for o in ancestor.input_offsets
        }
        assert newest[w["task"]].state_markers == {"counts": w["marker"]}
    more = _produce(bootstrap, topic, len(sent), 800)
    logs, dumps, _ = _run_until(cfg, bootstrap, rec, tmp_path / "f4.log", more, 8, "job.elasticity.factor=4")
    restored = {t: c for t, c in _dumps(dumps).items() if c}
    assert restored == _by_task(_counts(sent), 4)
    assert _processed(logs) == Counter((p, o) for p, o, _k in more)  # each new message once, nothing before
    sent += more
    f4_tasks = {f"Partition_{p}_{b}_4" for p in range(PARTS) for b in range(4)}
    assert _local(state, f4_tasks) == _by_task(_counts(sent), 4)

    # 4 -> 1 with the local stores built: nothing replayed; the merged tasks' partitions (0 and 1,
    # the F = 2 tasks' before) were cleared of the other tasks' keys by tombstones.
    r = _rebucket(cfg, bootstrap, "--from-factor", "4", "--set", "job.elasticity.factor=1", "--build-local-stores")
    assert r.returncode == 0, r.stderr
    print(r.stdout)
    wrote = {w["task"]: w for w in _lines(r.stdout, "wrote")}
    assert {t: w["partition"] for t, w in wrote.items()} == {"Partition 0": "0", "Partition 1": "1"}
    assert int(wrote["Partition 1"]["tombstones"]) > 0, r.stdout  # partition 1 held Partition 0_1_2's keys
    last = _produce(bootstrap, topic, len(sent), 400)
    logs, dumps, log = _run_until(cfg, bootstrap, rec, tmp_path / "f1.log", last, 2, "job.elasticity.factor=1")
    assert re.findall(r"replayed (\d+) changelog records", log) == ["0", "0"]
    assert _dumps(dumps) == _by_task(_counts(sent), 1)
    # A merge starts after the slowest bucket's checkpoint (at-least-once): what it processed again
    # counts again, and nothing is lost.
    again = _processed(logs)
    assert set(again) >= {(p, o) for p, o, _k in last}
    assert set(again) <= {(p, o) for p, o, _k in sent + last}
    by_offset = {(p, o): k for p, o, k in sent + last}
    expected = Counter(_counts(sent)) + Counter(by_offset[m] for m in again.elements())
    assert _local(state, {"Partition_0", "Partition_1"}) == _by_task(dict(expected), 1)
