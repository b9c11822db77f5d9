"""An application's graph in worker processes: each worker runs ``describe`` itself, and a worker
whose graph is not the container's stops the container with a config error (exit 2) that names
app.class, before any task starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka_util import Container, create_topic, write_config

from samzamp.systems.kafka import EmbeddedBroker

pytestmark = pytest.mark.integration


def test_a_describe_that_builds_another_graph_in_a_worker_stops_the_container_with_exit_2(
    broker: EmbeddedBroker, unique: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap_servers, f"lines-{unique}", 2)
    config = write_config(
        tmp_path / "job.toml",
        f"""
[job]
name = "unstable-{unique}"
default.system = "kafka"
container.thread.pool.size = 2

[app]
class = "unstable_app:Unstable"

[systems.kafka]
samza.factory = "kafka"

[streams.lines]
samza.physical.name = "lines-{unique}"
samza.msg.serde = "string"
""",
    )
    log = tmp_path / "container.log"
    container = Container(config, broker.bootstrap_servers, log=log)
    assert container.proc.wait(timeout=120) == 2
    last = container.log_text().strip().splitlines()[-1]
    assert last.startswith("samzamp run: config error: app.class: describe() of unstable_app:Unstable")
    assert "built another graph in this worker" in last
    assert "starting offsets" not in container.log_text()  # no task started
