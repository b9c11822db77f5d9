"""The container's metrics leave the process, on the real broker: Samza's snapshot reporter writes
its JSON messages to a topic (AT-C3), the metrics log line and the snapshots carry the metrics a
task keeps of its own and those its worker process counted (send-calls), with the right totals."""

from __future__ import annotations

import json
import re
import socket
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from kafka_util import Container, count_lines, create_topic, job_toml, read_all, seed_input, wait_until, write_config
from test_prometheus_endpoint import endpoint, label, scrape, values

from samzamp.metrics.snapshot import host_partition

pytestmark = pytest.mark.integration

PARTITIONS = 4
N = 2_000
TASKS = [f"TaskName-Partition {p}" for p in range(PARTITIONS)]
CONTAINER = "samza-container-0"
REPORTER = "MetricsSnapshotReporterFactory"
TASK_GROUP = "org.apache.samza.container.TaskInstanceMetrics"
HEADER = {
    "job-name",
    "job-id",
    "container-name",
    "exec-env-container-id",
    "samza-epoch-id",
    "source",
    "version",
    "samza-version",
    "host",
    "time",
    "reset-time",
}
METRICS_PARTITIONS = 3
# Exactly these leave the snapshots: two metrics of every task, and only those (Java's matches():
# the whole of group.metric).
BLACKLIST = r"org\.apache\.samza\.container\.TaskInstanceMetrics\.(pending-messages|user-gauge)"
LEFT_OUT = {"pending-messages", "user-gauge"}


class Job:
    """A MetricsTask job over a 4-partition input of ``N`` messages, forwarding each to ``out``, with
    the snapshot reporter sending to ``metrics`` (3 partitions) every ``interval`` seconds."""

    def __init__(self, broker: Any, tmp_path: Path, unique: str, interval: int) -> None:
        self.bootstrap = broker.bootstrap_servers
        self.input, self.out, self.metrics = f"in-{unique}", f"out-{unique}", f"metrics-{unique}"
        seed_input(self.bootstrap, self.input, PARTITIONS, N)
        create_topic(self.bootstrap, self.out, PARTITIONS)
        self.rec = tmp_path / "rec"
        self.rec.mkdir()
        extra = f"""
reporters = ["snapshot"]
reporter.snapshot.class = "org.apache.samza.metrics.reporter.MetricsSnapshotReporterFactory"
reporter.snapshot.stream = "kafka.{self.metrics}"
reporter.snapshot.interval = {interval}
reporter.snapshot.blacklist = '{BLACKLIST}'

[streams.{self.metrics}]
partitions = {METRICS_PARTITIONS}

[streams.{self.out}]
samza.key.serde = "string"
samza.msg.serde = "string"
"""
        toml = job_toml(
            f"mx-{unique}", "recording_tasks:MetricsTask", self.input, self.rec, extra, f'test.output = "{self.out}"'
        )
        self.cfg = write_config(tmp_path / "job.toml", toml)
        self.log = tmp_path / "run.log"

    def start(self, *overrides: str) -> Container:
        return Container(self.cfg, self.bootstrap, *overrides, log=self.log)

    def snapshots(self) -> list[tuple[int, Any, dict[str, Any]]]:
        """(partition, key, message) of every message on the metrics topic, in order per partition;
        plain JSON (never unpickled)."""
        return [
            (m.partition(), m.key(), json.loads(m.value()))
            for m in read_all(self.bootstrap, self.metrics, list(range(METRICS_PARTITIONS)))
        ]

    def outputs(self) -> int:
        """How many records the output topic holds."""
        return len(read_all(self.bootstrap, self.out, list(range(PARTITIONS))))


def _log_lines(c: Container) -> list[dict[str, dict[str, Any]]]:
    return [json.loads(line) for line in re.findall(r"metrics (\{.*\})$", c.log_text(), re.MULTILINE)]


def _by_source(snapshots: list[tuple[int, Any, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, _, m in snapshots:
        out[m["header"]["source"]].append(m)
    return out


def _task_metrics(message: dict[str, Any]) -> dict[str, Any]:
    assert set(message["metrics"]) == {TASK_GROUP}, message["metrics"].keys()
    return message["metrics"][TASK_GROUP]


@pytest.mark.parametrize("pool", [1, 2], ids=["inline", "pool2"])
def test_snapshot_reporter_sends_samzas_messages_every_second_and_a_last_one_at_stop(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    job = Job(broker, tmp_path, unique, interval=1)
    c = job.start(f"job.container.thread.pool.size={pool}", "metrics.log.interval.ms=3600000")
    wait_until(lambda: count_lines(job.rec) >= N, 120, "every message processed", c)
    wait_until(lambda: len(_by_source(job.snapshots()).get(CONTAINER, [])) >= 3, 60, "three reports", c)
    sigterm_ms = int(time.time() * 1000)
    assert c.stop() == 0, c.log_text()[-3000:]

    snapshots = job.snapshots()
    # Plain JSON with a null key, placed by the host's Java hash as Samza's producer places it.
    host = socket.gethostname()
    assert {(p, key) for p, key, _ in snapshots} == {(host_partition(host, METRICS_PARTITIONS), None)}
    sources = _by_source(snapshots)
    assert set(sources) == {CONTAINER, REPORTER, *TASKS}
    run_id = None
    for source, messages in sources.items():
        times = [m["header"]["time"] for m in messages]
        assert len(messages) >= 3 if source == CONTAINER else len(messages) >= 2, (source, times)
        assert times == sorted(times), (source, times)
        assert len(set(times)) == len(times), (source, times)
        assert len({m["header"]["reset-time"] for m in messages}) == 1
        for m in messages:
            assert set(m) == {"header", "metrics"}
            h = m["header"]
            assert set(h) == HEADER
            assert (h["job-name"], h["job-id"], h["container-name"], h["source"]) == (
                f"mx-{unique}",
                "1",
                CONTAINER,
                source,
            )
            assert h["host"] == host
            assert h["samza-version"].startswith("samzamp-")
            assert h["version"] == "0.0.1"  # recording_tasks has no __version__
            assert h["reset-time"] <= h["time"]
            run_id = run_id or h["samza-epoch-id"]
            assert h["samza-epoch-id"] == run_id
            assert all(m["metrics"].values()), "an empty group is omitted"
        assert messages[-1]["header"]["time"] >= sigterm_ms, f"{source}: no snapshot after SIGTERM"

    # The last snapshots against the container's registry at stop, as its last metrics log line has it.
    (logged,) = _log_lines(c)  # the log's interval is an hour: its one line is the one at stop
    assert logged["SamzaContainerMetrics"]["run-id"] == run_id
    last = {source: messages[-1] for source, messages in sources.items()}
    for task in TASKS:
        sent = _task_metrics(last[task])
        registry = logged[task]
        assert set(registry) >= LEFT_OUT, "the blacklisted metrics exist: they are left out of the snapshots only"
        assert set(sent) == set(registry) - LEFT_OUT
        assert sent == {n: v for n, v in registry.items() if n not in LEFT_OUT}
    container = last[CONTAINER]["metrics"]
    samza = container["org.apache.samza.container.SamzaContainerMetrics"]
    assert samza["process-envelopes"] == logged["SamzaContainerMetrics"]["process-envelopes"] == N
    assert samza["process-ns"] == pytest.approx(logged["SamzaContainerMetrics"]["process-ns"]["avg"], abs=1)
    assert "org.apache.samza.system.SystemConsumersMetrics" in container
    assert "org.apache.samza.checkpoint.OffsetManagerMetrics" in container
    assert ("WorkerPool-0" in container) == (pool == 2)
    assert not any(g.startswith("TaskName-") for g in container), "a task's group is its own source"
    own = last[REPORTER]["metrics"]["org.apache.samza.metrics.reporter.MetricsSnapshotReporter"]
    assert own["messages-sent"] >= 2 * (len(TASKS) + 2)
    assert own["send-failed"] == 0

    # Every output counted where it was sent (in a worker too), and the task's own counter.
    outputs = job.outputs()
    assert outputs == N
    assert sum(_task_metrics(last[t])["send-calls"] for t in TASKS) == outputs
    assert sum(_task_metrics(last[t])["user-messages"] for t in TASKS) == N
    assert sum(logged[t]["send-calls"] for t in TASKS) == outputs


def test_a_worker_tasks_own_counter_and_sends_reach_the_log_and_the_one_snapshot_at_stop(
    broker, unique, tmp_path: Path
) -> None:
    """With reports an hour apart, the only snapshot and the only metrics log line are the ones the
    stop makes, after the workers sent their last counts."""
    job = Job(broker, tmp_path, unique, interval=3600)
    c = job.start("job.container.thread.pool.size=2", "metrics.log.interval.ms=3600000", "metrics.prometheus.port=0")
    base, _ = endpoint(c)
    wait_until(lambda: count_lines(job.rec) >= N, 120, "every message processed", c)
    assert not job.snapshots(), "a snapshot before the interval"
    # The worker tasks' own counter, in /metrics too, per task, once the workers reported it.
    wait_until(
        lambda: sum(values(scrape(base), "samza_task_user_messages_total").values()) == N,
        60,
        f"{N} user-messages, as scraped",
        c,
    )
    scraped = values(scrape(base), "samza_task_user_messages_total")
    assert {label(k, "task") for k in scraped} == {t.removeprefix("TaskName-") for t in TASKS}
    assert c.stop() == 0, c.log_text()[-3000:]
    sources = _by_source(job.snapshots())
    assert {s: len(m) for s, m in sources.items()} == {s: 1 for s in (CONTAINER, REPORTER, *TASKS)}
    (logged,) = _log_lines(c)
    outputs = job.outputs()
    assert outputs == N
    for counter, total in (("user-messages", N), ("send-calls", outputs)):
        assert sum(_task_metrics(sources[t][0])[counter] for t in TASKS) == total, counter
        assert sum(logged[t][counter] for t in TASKS) == total, counter
    assert all(logged[t]["user-gauge"] == "set-at-init" for t in TASKS)  # a worker's gauge, in the container
