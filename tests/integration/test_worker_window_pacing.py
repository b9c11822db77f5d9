"""A due window() of a task in a worker process is not starved by the work sent ahead to that worker.

The case a new user meets first: a synchronous task that takes 15 ms a message, a worker pool, a
backlog waiting at start and task.window.ms = 250. Windows wait until none of the task's messages is
in flight, so however much the loop has sent ahead (before it could measure the task, or before it
saw the task slow down) must not hold a window back for more than about one message.

The second case is the task that slows down: its first messages take no time, so the loop keeps a
deep queue in the worker (at most 16 batches), which then takes 15 ms a message.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from kafka_util import Container, count_lines, job_toml, records, seed_input, wait_until, write_config

pytestmark = pytest.mark.integration

WINDOW_MS = 250
PROCESS_MS = 15
SLOW = 400  # 6 s of work at 15 ms a message: about 24 windows


@pytest.mark.parametrize(
    ("pool", "fast_first"),
    [(2, 0), (4, 0), (2, 4000)],
    ids=["pool2-slow-from-the-start", "pool4-slow-from-the-start", "pool2-slows-down"],
)
def test_windows_keep_their_period_from_the_first_message_of_a_backlog(
    broker, unique, tmp_path: Path, pool: int, fast_first: int
) -> None:
    backlog = fast_first + SLOW
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, 1, backlog)
    rec = tmp_path / "rec"
    rec.mkdir()
    cfg = write_config(tmp_path / "job.toml", job_toml(f"pace-{unique}", "recording_tasks:SlowSpanTask", topic, rec))
    c = Container(
        cfg,
        broker.bootstrap_servers,
        f"job.container.thread.pool.size={pool}",
        f"task.window.ms={WINDOW_MS}",
        f"test.process.ms={PROCESS_MS}",
        f"test.fast.until={fast_first}",
        log=tmp_path / "container.log",
    )
    wait_until(lambda: count_lines(rec, "P ") >= backlog, 120, "the backlog processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]

    spans = records(rec, "PW")
    first = min(a for k, a, _ in spans if k == "P")
    last = max(b for k, _, b in spans if k == "P")
    # The windows while the backlog lasted; the gap before the first counts from the first message.
    windows = sorted(a for k, a, _ in spans if k == "W" and first <= a <= last)
    assert len(windows) >= 4, f"only {len(windows)} windows in {(last - first) / 1e9:.1f} s of backlog"
    gaps_ms = [(b - a) / 1e6 for a, b in zip([first, *windows], windows, strict=False)]
    median, mean = statistics.median(gaps_ms), statistics.mean(gaps_ms)
    shown = ", ".join(f"{g:.0f}" for g in gaps_ms)
    print(
        f"pool {pool}, {fast_first} fast first: window gaps median {median:.0f} ms, mean {mean:.0f} ms: {shown}"
    )  # shown with -s
    low, high = WINDOW_MS * 0.5, WINDOW_MS * 1.5
    assert low <= median <= high, f"median window gap {median:.0f} ms, not {WINDOW_MS} ms ±50%; gaps: {shown}"
    assert low <= mean <= high, f"mean window gap {mean:.0f} ms, not {WINDOW_MS} ms ±50%; gaps: {shown}"
