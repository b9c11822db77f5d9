"""A container whose input has gone quiet keeps its loop running: metrics go on being reported (with
the lag read from the fetch thread's high watermarks), and new input is still processed.

confluent-kafka (2.x) lets one thread at a time into a Consumer, and a second caller waits, retrying
every so often. While the input is idle the fetch thread sits in back-to-back blocking polls, so any
consumer call from the loop thread could wait until data arrives: the loop must make none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka_util import Container, count_lines, job_toml, produce, seed_input, wait_until, write_config

pytestmark = pytest.mark.integration

PARTITIONS = 2


def _metrics_lines(c: Container) -> list[dict]:
    out = []
    for line in c.log_text().splitlines():
        _, sep, payload = line.partition(" metrics ")
        if sep:
            out.append(json.loads(payload))
    return out


@pytest.mark.parametrize("pool", [1, 2], ids=lambda n: f"pool{n}")
def test_metrics_keep_coming_and_new_input_is_processed_while_the_input_is_idle(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 40)
    rec = tmp_path / "rec"
    rec.mkdir()
    cfg = write_config(tmp_path / "job.toml", job_toml(f"idle-{unique}", "recording_tasks:OrderTask", topic, rec))
    c = Container(
        cfg,
        broker.bootstrap_servers,
        "metrics.log.interval.ms=100",
        f"job.container.thread.pool.size={pool}",
        log=tmp_path / "container.log",
    )
    wait_until(lambda: count_lines(rec) >= 40, 60, "40 processed messages", c)
    # Input idle from here. Ten more reports: the loop is not stuck behind the fetch thread's polls.
    seen = len(_metrics_lines(c))
    wait_until(lambda: len(_metrics_lines(c)) >= seen + 10, 30, "10 more metrics reports on idle input", c)

    # The lag comes from real high watermarks (40 messages, all processed): 0 behind, not unknown.
    def caught_up() -> bool:
        last = _metrics_lines(c)[-1]["SystemConsumersMetrics"]
        return all(last[f"kafka-{topic}-{p}-messages-behind-high-watermark"] == 0 for p in range(PARTITIONS))

    wait_until(caught_up, 30, "the lag metrics to read 0 behind", c)
    produce(broker.bootstrap_servers, topic, PARTITIONS, 10, start=40)
    wait_until(lambda: count_lines(rec) >= 50, 60, "the 10 new messages processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]
