"""Virtual tasks (job.elasticity.factor) against the real broker: every key's messages reach exactly
one task, the task of the key's bucket, in offset order, whatever runs the tasks (inline, one
worker, two workers); every input is processed exactly once in a clean run."""

from __future__ import annotations

import signal
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka_util import (
    Container,
    NewLines,
    count_lines,
    create_topic,
    job_toml,
    read_checkpoint_records,
    run_drain,
    wait_until,
    whole_lines,
    write_config,
)

from samzamp.consume.key_bucket import key_bucket

pytestmark = pytest.mark.integration


def produce_keyed(bootstrap: str, topic: str, partitions: int, keys: int, per_key: int) -> dict[int, int]:
    """``keys`` keys ``k<j>``, ``per_key`` messages each (interleaved), key j on partition j % partitions;
    returns partition -> messages written."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    counts: dict[int, int] = defaultdict(int)
    for seq in range(per_key):
        for j in range(keys):
            p.produce(topic, f"{seq}".encode(), f"k{j}".encode(), partition=j % partitions)
            counts[j % partitions] += 1
        p.poll(0)
    assert p.flush(30) == 0
    return dict(counts)


def task_records(record_dir: Path, kind: str = "V") -> dict[str, list[list[str]]]:
    """Task name (as in its record file's name) -> its records of ``kind`` in the order written.

    A task's files (one per process that ran it) are read oldest last-write first: a file's name holds a
    pid, and pids do not grow with time (they wrap), so the name says nothing of which run came first.
    """
    out: dict[str, list[list[str]]] = defaultdict(list)
    for f in sorted(record_dir.glob("*.log"), key=lambda f: (f.stat().st_mtime_ns, f.name)):
        task = f.name.rsplit(".", 2)[0].replace("_", " ", 1)
        out[task].extend(line.split()[1:] for line in whole_lines(f) if line.startswith(kind + " "))
    return dict(out)


def virtual_job(tmp_path: Path, unique: str, topic: str, extra: str = "") -> tuple[Path, Path]:
    rec = tmp_path / "rec"
    rec.mkdir(exist_ok=True)
    cfg = write_config(
        tmp_path / "job.toml",
        job_toml(f"vt-{unique}", "recording_tasks:KeyBucketTask", topic, rec, extra=extra),
    )
    return cfg, rec


def _processed(rec: Path) -> int:
    """How many V records the record files hold (``task_records``' rows, all tasks)."""
    return count_lines(rec, "V ")


@pytest.mark.parametrize("pool", [0, 1, 2])
@pytest.mark.parametrize("factor", [2, 4])
@pytest.mark.parametrize("partitions", [1, 4])
def test_every_key_reaches_exactly_its_buckets_task_in_order(
    broker, unique, tmp_path: Path, partitions: int, factor: int, pool: int
) -> None:
    topic = f"in-{unique}"
    create_topic(broker.bootstrap_servers, topic, partitions)
    written = produce_keyed(broker.bootstrap_servers, topic, partitions, keys=200, per_key=10)
    total = sum(written.values())
    cfg, rec = virtual_job(tmp_path, unique, topic)
    c = Container(
        cfg,
        broker.bootstrap_servers,
        f"job.elasticity.factor={factor}",
        f"job.container.thread.pool.size={pool}",
        log=tmp_path / "run.log",
    )
    wait_until(lambda: _processed(rec) >= total, 120, "every message processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]

    by_task = task_records(rec)
    expected_tasks = {f"Partition {p}_{kb}_{factor}" for p in range(partitions) for kb in range(factor)}
    assert set(by_task) == expected_tasks
    seen: dict[tuple[int, int], str] = {}
    owner: dict[str, str] = {}
    for task, rows in by_task.items():
        last_offset: dict[int, int] = {}
        for partition_s, bucket_s, offset_s, key in rows:
            partition, bucket, offset = int(partition_s), int(bucket_s), int(offset_s)
            assert task == f"Partition {partition}_{bucket}_{factor}", (task, partition, bucket)
            assert bucket == key_bucket(key.encode(), offset, factor), f"{key} is not of bucket {bucket}"
            assert owner.setdefault(key, task) == task, f"key {key} reached {owner[key]} and {task}"
            assert offset > last_offset.get(partition, -1), f"{task}: offset {offset} after {last_offset[partition]}"
            last_offset[partition] = offset
            assert (partition, offset) not in seen, (
                f"{(partition, offset)} processed by {seen[(partition, offset)]} and {task}"
            )
            seen[(partition, offset)] = task
    assert {p: sum(1 for q, _ in seen if q == p) for p in range(partitions)} == written
    assert len(owner) == 200


def _checkpoints_never_go_back(bootstrap: str, job: str) -> dict[str, dict[tuple[str, int, int], int]]:
    """Every task's checkpoints in topic order never move an SSP back; returns each task's last."""
    last: dict[str, dict[tuple[str, int, int], int]] = defaultdict(dict)
    for cp in read_checkpoint_records(bootstrap, job):
        mine = last[cp.task_name]
        for o in cp.input_offsets:
            key = (o.stream, o.partition, o.key_bucket)
            assert o.offset >= mine.get(key, -1), f"{cp.task_name}: {key} went back from {mine[key]} to {o.offset}"
            mine[key] = o.offset
    return dict(last)


def test_sigkill_loop_loses_nothing_and_checkpoints_never_go_back(broker, unique, tmp_path: Path) -> None:
    partitions, factor, kills = 2, 4, 5
    topic = f"in-{unique}"
    create_topic(broker.bootstrap_servers, topic, partitions)
    written = produce_keyed(broker.bootstrap_servers, topic, partitions, keys=1000, per_key=100)
    total = sum(written.values())
    assert total == 100_000
    cfg, rec = virtual_job(tmp_path, unique, topic)
    # 20 µs a message: each run lives long enough to checkpoint, so a restart finds the buckets of a
    # partition at different offsets, each lane skipping to its own.
    overrides = (f"job.elasticity.factor={factor}", "job.container.thread.pool.size=2", "test.busy.us=20")

    def checkpointed() -> int:  # how far the job's checkpoints reach, summed over every task and bucket
        return sum(
            sum(offsets.values())
            for offsets in _checkpoints_never_go_back(broker.bootstrap_servers, f"vt-{unique}").values()
        )

    def lanes_apart() -> bool:  # a restart now starts some partition's buckets at different offsets
        at = {
            k: o
            for offsets in _checkpoints_never_go_back(broker.bootstrap_servers, f"vt-{unique}").values()
            for k, o in offsets.items()
        }
        return any(len({at[k] for kb in range(factor) if (k := (topic, p, kb)) in at}) > 1 for p in range(partitions))

    restarts_apart = []
    for run in range(kills):
        before = checkpointed() if run else 0  # before the first run the checkpoint topic does not exist
        if run:
            restarts_apart.append(lanes_apart())
        c = Container(cfg, broker.bootstrap_servers, *overrides, log=tmp_path / f"run-{run}.log")
        target = (run + 1) * total // (kills + 2)
        wait_until(lambda t=target: _processed(rec) >= t, 180, f"run {run}: {target} processed", c)
        # And it checkpointed progress of its own (on a fast machine a run can reach its target
        # within one commit interval), so the next run starts from a newer checkpoint.
        wait_until(lambda b=before: checkpointed() > b, 60, f"run {run}: a checkpoint past the last run's", c)
        c.kill()
        assert c.proc.wait(timeout=30) == -signal.SIGKILL
    # The premise: some restart starts a partition's buckets at different checkpointed offsets, each lane
    # skipping to its own. A run can finish the input before its kill (then every bucket of a partition
    # checkpoints its last offset), so the premise is asked of every restart, not just the last.
    restarts_apart.append(lanes_apart())
    assert any(restarts_apart), restarts_apart
    c = Container(cfg, broker.bootstrap_servers, *overrides, log=tmp_path / "run-last.log")
    c.wait_started()  # the killed runs may have seen everything already: SIGTERM must find it running

    new_lines, seen = NewLines(rec, "V "), set()
    every = {(p, o) for p, n in written.items() for o in range(n)}

    def everything_seen() -> bool:  # task_records' rows: V <partition> <bucket> <offset> <key>
        seen.update((int(r[1]), int(r[3])) for r in (line.split() for line in new_lines()))
        return seen >= every

    wait_until(everything_seen, 240, "every offset processed at least once", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    last = _checkpoints_never_go_back(broker.bootstrap_servers, f"vt-{unique}")
    assert set(last) == {f"Partition {p}_{kb}_{factor}" for p in range(partitions) for kb in range(factor)}
    # Within each run (one record file per task and process), a key's messages came in offset order,
    # every one of them to its key's bucket.
    for f in rec.glob("*.log"):
        last_of_key: dict[str, int] = {}
        for line in f.read_text().splitlines():
            _, _, bucket, offset, key = line.split()
            assert int(bucket) == key_bucket(key.encode(), int(offset), factor), f"{f.name}: {key} at {offset}"
            assert int(offset) > last_of_key.get(key, -1), f"{f.name}: {key} at {offset} after {last_of_key[key]}"
            last_of_key[key] = int(offset)


def _seen_offsets(rec: Path) -> list[tuple[int, int]]:
    return [(int(r[0]), int(r[2])) for rows in task_records(rec).values() for r in rows]


def test_split_inherits_the_ancestors_offset_and_merge_loses_nothing(broker, unique, tmp_path: Path) -> None:
    partitions = 2
    topic = f"in-{unique}"
    create_topic(broker.bootstrap_servers, topic, partitions)
    cfg, rec = virtual_job(tmp_path, unique, topic)
    written: dict[int, int] = defaultdict(int)

    def run(factor: int, name: str) -> Container:
        for p, n in produce_keyed(broker.bootstrap_servers, topic, partitions, keys=100, per_key=10).items():
            written[p] += n
        c = Container(cfg, broker.bootstrap_servers, f"job.elasticity.factor={factor}", log=tmp_path / f"{name}.log")
        expected = {(p, o) for p, n in written.items() for o in range(n)}
        wait_until(lambda: set(_seen_offsets(rec)) >= expected, 120, f"{name}: every offset processed", c)
        c.proc.send_signal(signal.SIGTERM)
        assert c.proc.wait(timeout=60) == 0, c.log_text()[-3000:]
        return c

    run(2, "f2")
    run(4, "f4")
    seen = _seen_offsets(rec)
    repeated = sorted({x for x in seen if seen.count(x) > 1})
    assert not repeated, f"split after a clean stop processed {len(repeated)} offsets twice: {repeated[:10]}"
    four = task_records(rec)
    assert {t for t in four if t.endswith("_4")} == {f"Partition {p}_{kb}_4" for p in range(2) for kb in range(4)}

    run(2, "f2-again")  # a merge: nothing lost (what the faster descendant processed may come again)
    c = Container(cfg, broker.bootstrap_servers, "job.elasticity.factor=3", log=tmp_path / "f3.log")
    assert c.proc.wait(timeout=60) == 2
    log = c.log_text()
    assert "job.elasticity.factor" in log, log[-2000:]
    assert "neither divides the other" in log, log[-2000:]


def test_broadcast_partition_reaches_every_virtual_task_once(broker, unique, tmp_path: Path) -> None:
    partitions, factor = 2, 2
    topic, bc = f"in-{unique}", f"bc-{unique}"
    create_topic(broker.bootstrap_servers, topic, partitions)
    create_topic(broker.bootstrap_servers, bc, 1)
    written = produce_keyed(broker.bootstrap_servers, topic, partitions, keys=100, per_key=10)

    def broadcast(start: int, n: int) -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(start, start + n):
            p.produce(bc, f"b{i}".encode(), f"b{i}".encode(), partition=0)
        assert p.flush(30) == 0

    broadcast(0, 50)
    extra = f"""
[streams.{bc}]
samza.key.serde = "string"
samza.msg.serde = "string"
"""
    cfg, rec = virtual_job(tmp_path, unique, topic, extra=extra)
    overrides = (
        f"job.elasticity.factor={factor}",
        "job.container.thread.pool.size=2",
        f"task.broadcast.inputs=kafka.{bc}#0",
        f"test.broadcast.stream={bc}",
    )
    tasks = {f"Partition {p}_{kb}_{factor}" for p in range(partitions) for kb in range(factor)}
    total = sum(written.values())

    def done(bc_count: int) -> bool:
        records = task_records(rec, "B")
        return _processed(rec) >= total and all(len(records.get(t, [])) >= bc_count for t in tasks)

    c = Container(cfg, broker.bootstrap_servers, *overrides, log=tmp_path / "run-0.log")
    wait_until(lambda: done(50), 120, "every task saw every broadcast message", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    broadcast(50, 30)
    c = Container(cfg, broker.bootstrap_servers, *overrides, log=tmp_path / "run-1.log")
    wait_until(lambda: done(80), 120, "every task saw the new broadcast messages", c)
    assert c.stop() == 0, c.log_text()[-3000:]

    by_task = task_records(rec, "B")
    assert set(by_task) == tasks
    for task, rows in by_task.items():
        assert [int(o) for _, o in rows] == list(range(80)), f"{task} saw broadcast offsets {rows}"
    seen = _seen_offsets(rec)
    assert sorted(seen) == sorted((p, o) for p, n in written.items() for o in range(n)), "the keyed input changed"


def test_drain_of_virtual_tasks_loses_and_repeats_nothing(broker, unique, tmp_path: Path) -> None:
    partitions = 2
    topic = f"in-{unique}"
    create_topic(broker.bootstrap_servers, topic, partitions)
    written = produce_keyed(broker.bootstrap_servers, topic, partitions, keys=500, per_key=40)
    cfg, rec = virtual_job(tmp_path, unique, topic)
    overrides = (
        "job.elasticity.factor=2",
        "job.container.thread.pool.size=2",
        "job.drain-monitor.poll.interval.ms=200",
        "task.fetch.threshold=2000",  # little fetched ahead of the tasks: the drain comes mid-stream
        # 4 s of work for the two workers: the drain tool starts and the monitor finds its notification
        # in about a second, well before the end (at 100 µs, one run in eight fetched to the end first).
        "test.busy.us=400",
    )
    c = Container(cfg, broker.bootstrap_servers, *overrides, log=tmp_path / "run-0.log")
    wait_until(lambda: _processed(rec) >= 1000, 120, "some progress", c)
    r = run_drain(cfg, broker.bootstrap_servers, "--wait", "--timeout", "120")
    assert r.returncode == 0, (r.stdout, r.stderr, c.log_text()[-3000:])
    assert c.proc.wait(timeout=60) == 0, c.log_text()[-3000:]
    assert "every task is drained" in c.log_text()
    drained = _processed(rec)
    assert drained < sum(written.values()), "the drain came after everything was processed"
    for p, n in produce_keyed(broker.bootstrap_servers, topic, partitions, keys=100, per_key=10).items():
        written[p] += n
    c = Container(cfg, broker.bootstrap_servers, *overrides, log=tmp_path / "run-1.log")
    wait_until(lambda: "starting offsets" in c.log_text(), 60, "the next deployment to start", c)
    wait_until(lambda: _processed(rec) >= sum(written.values()), 120, "the rest", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    seen = _seen_offsets(rec)
    assert sorted(seen) == sorted((p, o) for p, n in written.items() for o in range(n)), "lost or repeated"


@pytest.mark.parametrize("pool", [0, 2])
def test_a_bucket_with_few_messages_or_none_checkpoints_its_partitions_position(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    # A partition is read from the lowest checkpoint among its buckets: a bucket whose checkpoint
    # stayed at its last message (or at none) would have every restart read the partition again.
    factor = 4
    topic = f"in-{unique}"
    create_topic(broker.bootstrap_servers, topic, 1)
    keys_of: dict[int, list[bytes]] = defaultdict(list)
    for j in range(200):
        key = f"k{j}".encode()
        keys_of[key_bucket(key, 0, factor)].append(key)
    # Bucket 2 gets messages only at the start, bucket 3 none; buckets 0 and 1 get the rest.
    keys = [*keys_of[2][:5], *[k for _ in range(20) for k in (*keys_of[0][:5], *keys_of[1][:5])]]
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for key in keys:
        p.produce(topic, b"v", key, partition=0)
    assert p.flush(30) == 0
    cfg, rec = virtual_job(tmp_path, unique, topic)
    overrides = (f"job.elasticity.factor={factor}", f"job.container.thread.pool.size={pool}")
    c = Container(cfg, broker.bootstrap_servers, *overrides, log=tmp_path / "run-0.log")
    wait_until(lambda: _processed(rec) >= len(keys), 120, "every message processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]

    last = _checkpoints_never_go_back(broker.bootstrap_servers, f"vt-{unique}")
    end = len(keys) - 1
    checkpointed = {kb: last.get(f"Partition 0_{kb}_{factor}", {}).get((topic, 0, kb)) for kb in range(factor)}
    assert checkpointed == dict.fromkeys(range(factor), end)
    # The next deployment starts every bucket at the partition's end: nothing is read again.
    c = Container(cfg, broker.bootstrap_servers, *overrides, log=tmp_path / "run-1.log")
    wait_until(lambda: "starting offsets" in c.log_text(), 60, "the next deployment to start", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    starts = next(line for line in c.log_text().splitlines() if "starting offsets" in line)
    assert starts.count(f": {end + 1}") == factor, starts
