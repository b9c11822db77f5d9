"""Drain (seed 003) against the real broker: ``samzamp-drain`` stops a running container
once everything it fetched is processed, its windows emitted and its final checkpoint written; the
next deployment resumes right after it, so across the two runs every input is processed once."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka_util import (
    Container,
    count_lines,
    create_topic,
    job_toml,
    produce,
    produced_offsets,
    read_all,
    read_checkpoint_records,
    read_checkpoints,
    run_drain,
    seed_input,
    wait_until,
    write_config,
)

PARTITIONS = 4


class KeepProducing:
    """Input that keeps arriving: chunks of ``chunk`` messages (continuing ``produce``'s numbering)
    until stopped, so partition offsets stay those ``produced_offsets`` gives."""

    def __init__(self, bootstrap: str, topic: str, start: int, chunk: int = 200, pause_s: float = 0.05) -> None:
        self.total = start
        self._stop = threading.Event()
        self._error: BaseException | None = None

        def run() -> None:
            try:
                while not self._stop.is_set():
                    produce(bootstrap, topic, PARTITIONS, chunk, self.total)
                    self.total += chunk
                    self._stop.wait(pause_s)
            except BaseException as e:  # reported by stop()
                self._error = e

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        if self._error is not None:
            raise self._error
        return self.total


def _owner(file_name: str) -> int:
    return int(file_name.split(".")[-2])


def records_by_file(record_dir: Path) -> dict[str, list[tuple[str, int, int]]]:
    out = {}
    for f in sorted(record_dir.glob("*.log")):
        rows = []
        for line in f.read_text().splitlines():
            kind, a, b = line.split()
            rows.append((kind, int(a), int(b)))
        out[f.name] = rows
    return out


def drain_point(log: str) -> dict[int, int]:
    """Partition -> the newest offset fetched when the drain began (the container's "drain point" line)."""
    points = re.findall(r"drain point: (\{.*\})", log)
    assert len(points) == 1, f"expected one drain point line, found {len(points)}"
    out = {}
    for ssp, offset in json.loads(points[0]).items():
        assert offset is not None, f"{ssp}: nothing fetched before the drain"
        out[int(ssp.rstrip("]").rsplit(", ", 1)[1])] = offset
    return out


def buffered_at_drain(log: str) -> int:
    m = re.search(r"fetching stopped with (\d+) messages buffered", log)
    assert m, "no drain line in the container's log"
    return int(m.group(1))


def run_id(log: str) -> tuple[str, str]:
    m = re.search(r"run id (\S+) \(([^)]*)\)", log)
    assert m, "the container did not log its run id"
    return m.group(1), m.group(2)


def final_checkpoints(bootstrap: str, job: str) -> dict[int, int]:
    last: dict[int, int] = {}
    for _task, offsets in read_checkpoints(bootstrap, job):
        last.update(offsets)
    return last


def processed_in(files: dict[str, list[tuple[str, int, int]]], pids: set[int], kind: str) -> dict[int, list[int]]:
    """Partition -> offsets recorded with ``kind`` by the processes ``pids``, in record order."""
    out: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    for name, rows in files.items():
        if _owner(name) in pids:
            for k, p, o in rows:
                if k == kind:
                    out[p].append(o)
    return out


def process_ids(c: Container) -> set[int]:
    """The container's pid and its workers' (worker record files carry the worker's pid)."""
    pids = {c.proc.pid}
    pids.update(int(p) for p in re.findall(r"worker \d+ \(pid (\d+);", c.log_text()))
    return pids


def _setup(
    broker, unique: str, tmp_path: Path, task: str, seed: int, top: str = ""
) -> tuple[str, str, str, Path, Path]:
    bootstrap = broker.bootstrap_servers
    topic, job = f"drain-in-{unique}", f"drain-{unique}"
    seed_input(bootstrap, topic, PARTITIONS, seed)
    rec = tmp_path / "rec"
    rec.mkdir()
    cfg = write_config(tmp_path / "job.toml", job_toml(job, f"recording_tasks:{task}", topic, rec, top=top))
    return bootstrap, topic, job, rec, cfg


FAST_MONITOR = "job.drain-monitor.poll.interval.ms=200"


def drain_and_wait(cfg: Path, bootstrap: str, c: Container, *overrides: str) -> str:
    args = [a for o in overrides for a in ("--set", o)]
    r = run_drain(cfg, bootstrap, *args, "--wait", "--timeout", "120")
    assert r.returncode == 0, (r.stdout, r.stderr, c.log_text()[-3000:])
    assert "drained" in r.stdout
    assert c.proc.wait(timeout=60) == 0, c.log_text()[-3000:]
    return r.stdout


def second_run_to_the_end(
    cfg: Path, bootstrap: str, rec: Path, tmp_path: Path, total: int, kind: str, *overrides: str
) -> tuple[Container, dict[int, list[int]]]:
    """A new deployment that processes the rest (``total`` inputs in all), then is drained too."""
    c2 = Container(cfg, bootstrap, FAST_MONITOR, *overrides, log=tmp_path / "c2.log")
    wait_until(lambda: count_lines(rec, f"{kind} ") >= total, 180, "the second run to finish", c2)
    drain_and_wait(cfg, bootstrap, c2)
    return c2, processed_in(records_by_file(rec), process_ids(c2), kind)


def assert_exactly_once(total: int, *runs: dict[int, list[int]]) -> None:
    expected = produced_offsets(total, PARTITIONS)
    for p in range(PARTITIONS):
        seen = Counter(o for run in runs for o in run[p])
        repeated = sorted(o for o, n in seen.items() if n > 1)
        missing = sorted(expected[p] - set(seen))
        assert not repeated, f"partition {p}: processed twice: {repeated[:10]} ({len(repeated)})"
        assert not missing, f"partition {p}: never processed: {missing[:10]} ({len(missing)})"
        assert set(seen) == expected[p]


def test_drain_of_a_windowed_aggregation_loses_and_repeats_nothing(broker, unique, tmp_path) -> None:
    seed = 60_000
    out = f"drain-out-{unique}"
    bootstrap, topic, job, rec, cfg = _setup(
        broker, unique, tmp_path, "WindowedCountTask", seed, top=f'test.output = "{out}"\ntest.busy.us = 40'
    )
    create_topic(bootstrap, out, 1)
    overrides = (FAST_MONITOR, "task.window.ms=1000", "task.fetch.threshold=200000")
    c1 = Container(cfg, bootstrap, *overrides, log=tmp_path / "c1.log")
    more = KeepProducing(bootstrap, topic, seed)
    wait_until(lambda: count_lines(rec) >= 2000, 120, "the first run to process 2000 messages", c1)
    drain_and_wait(cfg, bootstrap, c1)
    log1 = c1.log_text()
    buffered = buffered_at_drain(log1)
    point = drain_point(log1)
    run1, how1 = run_id(log1)
    assert how1 == "generated"

    files = records_by_file(rec)
    first = processed_in(files, {c1.proc.pid}, "P")
    checkpoint = final_checkpoints(bootstrap, job)
    for p in range(PARTITIONS):
        # Everything fetched was processed, in order, once, and the final checkpoint covers exactly that.
        assert first[p] == list(range(point[p] + 1)), f"partition {p}"
        assert checkpoint[p] == point[p], f"partition {p}: checkpoint {checkpoint[p]}, drain point {point[p]}"
    assert buffered >= 20_000, f"only {buffered} messages were buffered at the drain"

    # The windows emitted everything counted, the last one (the drain's) the partial window.
    tails = {}
    for name, rows in files.items():
        if _owner(name) == c1.proc.pid:
            p = rows[0][1]
            windows = [n for k, _, n in rows if k == "W"]
            assert sum(windows) == point[p] + 1, f"partition {p}: windows emitted {sum(windows)}"
            # (K lines come from on_checkpoint: the final commit writes none when a timer commit
            # already recorded the drain point; the checkpoint topic is checked above.)
            tails[p] = [k for k, _, _ in rows if k != "K"][-3:]
    assert tails == {p: ["P", "W", "D"] for p in range(PARTITIONS)}  # after the last message: window, on_drain
    emitted: Counter[int] = Counter()
    for m in read_all(bootstrap, out, [0]):
        p, n = m.value().decode().split()
        emitted[int(p)] += int(n)
    assert emitted == Counter({p: point[p] + 1 for p in range(PARTITIONS)})

    total = more.stop()
    c2, second = second_run_to_the_end(cfg, bootstrap, rec, tmp_path, total, "P", *overrides[1:])
    run2, how2 = run_id(c2.log_text())
    assert (run2, how2) != (run1, "generated")
    assert how2 == "generated"
    for p in range(PARTITIONS):
        assert second[p][0] == point[p] + 1, f"partition {p}: the new run did not resume right after the drain"
    assert_exactly_once(total, first, second)
    print(f"buffered at drain: {buffered}; drain point {point}; total {total}")


@pytest.mark.parametrize(
    ("task", "overrides", "kind"),
    [
        ("DrainingAsyncTask", ("task.max.concurrency=8",), "C"),
        # 200 µs a message: 2 s of work for the two workers, so the drain finds the seed unfinished.
        ("DrainingOrderTask", ("job.container.thread.pool.size=2", "test.busy.us=200"), "P"),
    ],
    ids=["async-c8", "pool2"],
)
def test_drain_waits_for_in_flight_work(broker, unique, tmp_path, task, overrides, kind) -> None:
    seed = 20_000
    bootstrap, topic, job, rec, cfg = _setup(broker, unique, tmp_path, task, seed)
    c1 = Container(cfg, bootstrap, FAST_MONITOR, *overrides, log=tmp_path / "c1.log")
    more = KeepProducing(bootstrap, topic, seed)
    wait_until(lambda: count_lines(rec, f"{kind} ") >= 1000, 120, "the first run to process 1000 messages", c1)
    drain_and_wait(cfg, bootstrap, c1)
    log1 = c1.log_text()
    assert buffered_at_drain(log1) > 0, "the drain found no work left: it waited for nothing"
    point = drain_point(log1)
    files = records_by_file(rec)
    pids = process_ids(c1)
    if "pool.size" in overrides[0]:
        assert len(pids) == 3, f"expected two workers: {pids}"
    first = processed_in(files, pids, kind)
    checkpoint = final_checkpoints(bootstrap, job)
    for p in range(PARTITIONS):
        assert sorted(first[p]) == list(range(point[p] + 1)), f"partition {p}"
        assert checkpoint[p] == point[p]
    if kind == "C":  # every message started was completed before the final commit
        started = processed_in(files, pids, "S")
        assert {p: sorted(v) for p, v in started.items()} == {p: sorted(v) for p, v in first.items()}
    drained = [rows[0][1] for n, rows in files.items() if _owner(n) in pids and ("D", rows[0][1], 0) in rows]
    assert sorted(drained) == list(range(PARTITIONS))  # every task got on_drain
    total = more.stop()
    _c2, second = second_run_to_the_end(cfg, bootstrap, rec, tmp_path, total, kind, *overrides)
    assert_exactly_once(total, first, second)


def test_a_notification_for_another_run_is_ignored(broker, unique, tmp_path) -> None:
    bootstrap, topic, _job, rec, cfg = _setup(broker, unique, tmp_path, "DrainingOrderTask", 2000)
    mine = f"run-a-{unique}"
    r = run_drain(cfg, bootstrap, "--set", f"app.run.id=run-b-{unique}")  # a deployment not started
    assert r.returncode == 0, r.stderr
    assert "not running yet" in r.stdout
    c = Container(cfg, bootstrap, FAST_MONITOR, f"app.run.id={mine}", log=tmp_path / "c.log")
    wait_until(lambda: count_lines(rec) >= 2000, 60, "the seed to be processed", c)
    wait_until(
        lambda: f"is for run run-b-{unique}, this run is {mine}" in c.log_text(), 30, "the stale one to be seen", c
    )
    time.sleep(0.5)  # several more polls: the stale notification must not start a drain
    assert "drain point" not in c.log_text()
    produce(bootstrap, topic, PARTITIONS, 400, 2000)
    wait_until(lambda: count_lines(rec) >= 2400, 60, "new input to be processed (still consuming)", c)
    drain_and_wait(cfg, bootstrap, c, f"app.run.id={mine}")
    again = run_drain(cfg, bootstrap, "--set", f"app.run.id=run-b-{unique}")  # run-b's notification was left alone
    assert again.returncode == 0, again.stderr
    assert "already requested" in again.stdout, again.stdout


def test_a_notification_written_before_start_drains_right_after_start(broker, unique, tmp_path) -> None:
    bootstrap, _topic, job, rec, cfg = _setup(broker, unique, tmp_path, "DrainingOrderTask", 2000)
    run = f"run-c-{unique}"
    r = run_drain(cfg, bootstrap, "--set", f"app.run.id={run}")
    assert r.returncode == 0, r.stderr
    c = Container(cfg, bootstrap, FAST_MONITOR, f"app.run.id={run}", log=tmp_path / "c.log")
    assert c.proc.wait(timeout=60) == 0, c.log_text()[-3000:]
    log = c.log_text()
    assert "found at start" in log
    assert "drain complete" in log
    assert count_lines(rec) == 0  # drained before anything was fetched
    assert count_lines(rec, "D ") == PARTITIONS
    # Each task's one checkpoint covers nothing and says it drained in this run.
    drained = sorted(
        (cp.task_name, cp.offsets(), cp.run_id, cp.drained) for cp in read_checkpoint_records(bootstrap, job)
    )
    assert drained == [(f"Partition {p}", {}, run, True) for p in range(PARTITIONS)]
    # Asking again (a cron retry) is answered from the run's record.
    done = run_drain(cfg, bootstrap, "--set", f"app.run.id={run}", "--wait", "--timeout", "5")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert f"run {run} already drained" in done.stdout
    # A drained run is over: a container a supervisor starts for it again (a StatefulSet restarts
    # whatever exits) processes nothing and exits 0, and the run stays drained.
    again = Container(cfg, bootstrap, FAST_MONITOR, f"app.run.id={run}", log=tmp_path / "again.log")
    assert again.proc.wait(timeout=60) == 0, again.log_text()[-3000:]
    assert f"run {run} (app.run.id) drained at " in again.log_text()
    assert count_lines(rec) == 0
    assert count_lines(rec, "D ") == PARTITIONS  # no task started again
    still = run_drain(cfg, bootstrap, "--set", f"app.run.id={run}", "--wait", "--timeout", "5")
    assert f"run {run} already drained" in still.stdout, (still.stdout, still.stderr)


def test_a_container_restarted_in_the_middle_of_a_drain_drains_at_once(broker, unique, tmp_path) -> None:
    bootstrap, _topic, _job, rec, cfg = _setup(broker, unique, tmp_path, "DrainingOrderTask", 2000)
    c1 = Container(cfg, bootstrap, "job.drain-monitor.enabled=false", log=tmp_path / "c1.log")
    wait_until(lambda: count_lines(rec) >= 2000, 60, "the seed to be processed", c1)
    run1, _ = run_id(c1.log_text())
    c1.kill()  # the run's container dies; a supervisor would restart it
    r = run_drain(cfg, bootstrap)  # the run is still the job's deployment
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"drain requested for run {run1}" in r.stdout
    c2 = Container(cfg, bootstrap, FAST_MONITOR, log=tmp_path / "c2.log")
    assert c2.proc.wait(timeout=60) == 0, c2.log_text()[-3000:]
    log2 = c2.log_text()
    assert run_id(log2)[0] == run1
    assert "found at start" in log2
    again = run_drain(cfg, bootstrap)
    assert again.returncode == 0, again.stdout
    assert f"run {run1} already drained" in again.stdout


def test_drain_command_exit_codes(broker, unique, tmp_path) -> None:
    bootstrap, _topic, _job, rec, cfg = _setup(broker, unique, tmp_path, "DrainingOrderTask", 500)
    never = run_drain(cfg, bootstrap)
    assert never.returncode == 3, never.stdout  # the job never ran
    assert "no running deployment found" in never.stdout
    assert never.stdout.count("\n") == 1
    c = Container(cfg, bootstrap, "job.drain-monitor.enabled=false", log=tmp_path / "c.log")
    wait_until(lambda: count_lines(rec) >= 500, 60, "the seed to be processed", c)
    first = run_drain(cfg, bootstrap)
    second = run_drain(cfg, bootstrap)
    assert first.returncode == second.returncode == 0
    bogus = run_drain(cfg, bootstrap, "--run-id", "1700000000000-deadbeef")  # not this job's run
    assert bogus.returncode == 3, bogus.stdout
    assert "is not this job's deployment" in bogus.stdout
    uuid = re.search(r"notification (\S+)\)", first.stdout)
    assert uuid
    assert "drain requested" in first.stdout
    assert "drain already requested" in second.stdout
    assert uuid.group(1) in second.stdout
    t0 = time.monotonic()
    waited = run_drain(cfg, bootstrap, "--wait", "--timeout", "2")
    assert waited.returncode == 4, (waited.stdout, waited.stderr)
    assert 2 <= time.monotonic() - t0 < 60
    assert "timed out after 2 s" in waited.stderr
    assert waited.stderr.count("\n") == 1
    assert c.alive()  # no monitor: nobody acted on it
    assert c.stop() == 0
    stopped = run_drain(cfg, bootstrap)
    assert stopped.returncode == 3, stopped.stdout
    assert "stopped at" in stopped.stdout, stopped.stdout
    bad = run_drain(cfg, bootstrap, "--set", "task.max.concurrency=0")
    assert bad.returncode == 2
    assert "task.max.concurrency" in bad.stderr
