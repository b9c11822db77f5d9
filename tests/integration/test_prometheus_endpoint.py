"""The Prometheus endpoint (metrics.prometheus.port) of real containers on the real broker, scraped
over HTTP and parsed with prometheus_client's own parser: a word count inline and at pool 2, the
default (no port bound), /healthz through a restore of a large changelog, and a standalone
rebalance between two processors on the real ZooKeeper."""

from __future__ import annotations

import json
import re
import struct
import threading
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Producer
from kafka_util import ROOT, Container, counts_store, create_topic, read_all, wait_until, write_config
from prometheus_client.parser import text_string_to_metric_families
from standalone_util import InputFlow, Processor, ZkView, moved, standalone_config

pytestmark = pytest.mark.integration

DASHBOARD = ROOT / "deploy" / "grafana" / "samzamp.json"
ENDPOINT = re.compile(r"prometheus: (http://127\.0\.0\.1:(\d+))/metrics")
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
# Samples that only grow while their series lives: counters, and a summary's count and sum.
GROWING = ("_total", "_seconds_count", "_seconds_sum")

Labels = tuple[tuple[str, str], ...]
Scrape = dict[tuple[str, Labels], float]


def endpoint(c: Container, timeout: float = 120) -> tuple[str, int]:
    """The base URL and port a container logged (``prometheus: http://HOST:PORT/metrics``)."""
    found: list[re.Match[str]] = []

    def logged() -> bool:
        m = ENDPOINT.search(c.log_text())
        if m is not None:
            found.append(m)
        return m is not None

    wait_until(logged, timeout, "the container to log its Prometheus endpoint", c)
    return found[0].group(1), int(found[0].group(2))


def scrape(base: str) -> Scrape:
    """GET /metrics, parsed with prometheus_client's parser: every sample by (name, labels). Fails
    on a status other than 200, an invalid name, or a series that comes twice."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as r:
        assert r.status == 200
        text = r.read().decode()
    out: Scrape = {}
    for family in text_string_to_metric_families(text):
        assert NAME.match(family.name), family.name
        for s in family.samples:
            assert NAME.match(s.name), s.name
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"series twice: {key}"
            out[key] = s.value
    return out


def health(base: str) -> tuple[int, str]:
    """GET /healthz: its status and the state its one-line JSON body names."""
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=30) as r:
            status, body = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read().decode()
    assert body.count("\n") == 1, body
    m = re.fullmatch(r'\{"state": "([a-z]+)"\}\n', body)
    assert m is not None, body
    return status, m.group(1)


def values(s: Scrape, name: str, **labels: str) -> dict[Labels, float]:
    """The samples named ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return {k[1]: v for k, v in s.items() if k[0] == name and want <= set(k[1])}


def label(key: Labels, name: str) -> str:
    return dict(key)[name]


def check_growing(before: Scrape, after: Scrape) -> None:
    """No counter (nor a summary's count or sum) of a series in both scrapes went down."""
    for key, value in after.items():
        if key[0].endswith(GROWING) and key in before:
            assert value >= before[key], f"{key} went from {before[key]} to {value}"


def listening_ports(pid: int) -> set[int]:
    """The TCP ports a process and its children (workers) listen on."""
    root = psutil.Process(pid)
    ports = set()
    for p in [root, *root.children(recursive=True)]:
        for conn in p.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                ports.add(conn.laddr.port)
    return ports


def word_count_toml(tmp_path: Path, unique: str, topic: str, out: str, pool: int, extra: str = "") -> Path:
    return write_config(
        tmp_path / "job.toml",
        f"""
"test.output" = "{out}"

[job]
name = "prom-{unique}"
default.system = "kafka"
container.thread.pool.size = {pool}

[task]
class = "prometheus_tasks:WordCountTask"
inputs = ["kafka.{topic}"]
commit.ms = 300

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"

[streams.{topic}]
samza.msg.serde = "string"

[streams.{out}]
samza.key.serde = "string"
samza.msg.serde = "long"

[metrics]
log.interval.ms = 0
{extra}
""",
    )


def produce_lines(bootstrap: str, topic: str, partitions: int, n: int, start: int = 0) -> int:
    """``n`` lines of three words each, round robin over the partitions; how many words."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, f"a{i % 11} b{i % 7} c".encode(), partition=i % partitions)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    return 3 * n


@pytest.mark.parametrize("pool", [0, 2], ids=["inline", "pool2"])
def test_a_word_count_scraped_while_it_runs(broker, unique, tmp_path: Path, pool: int) -> None:
    bs = broker.bootstrap_servers
    topic, out, partitions, lines = f"lines-{unique}", f"counts-{unique}", 4, 3000
    create_topic(bs, topic, partitions)
    words = produce_lines(bs, topic, partitions, lines)
    cfg = word_count_toml(tmp_path, unique, topic, out, pool, "prometheus.port = 0")
    c = Container(cfg, bs, log=tmp_path / "container.log")
    base, port = endpoint(c)
    assert listening_ports(c.proc.pid) == {port}
    scrapes: list[Scrape] = []

    def caught_up() -> bool:
        s = scrape(base)
        if scrapes:
            check_growing(scrapes[-1], s)
        scrapes.append(s)
        processed = values(s, "samza_task_process_calls_total")
        lag = values(s, "samza_consumer_messages_behind_high_watermark")
        return (
            len(processed) == partitions
            and sum(processed.values()) == lines
            and len(lag) == partitions
            and set(lag.values()) == {0}
        )

    wait_until(caught_up, 120, f"{lines} lines processed and no lag, as scraped", c)
    last = scrapes[-1]
    assert {label(k, "task") for k in values(last, "samza_task_process_calls_total")} == {
        f"Partition {p}" for p in range(partitions)
    }
    assert {
        (label(k, "stream"), label(k, "partition"))
        for k in values(last, "samza_consumer_messages_behind_high_watermark")
    } == {(topic, str(p)) for p in range(partitions)}
    assert sum(values(last, "samza_task_messages_actually_processed_total").values()) == lines
    assert sum(values(last, "samza_container_process_envelopes_total").values()) == lines
    for name, key in last:
        labels = dict(key)
        assert (labels["job"], labels["job_id"], labels["processor"]) == (f"prom-{unique}", "1", "0"), (name, key)
    assert values(last, "samza_container_info")  # the run id

    # Every word was sent once, by the task wherever it runs (a worker's counts reach the
    # container's registry); the outputs reach the topic at the next commit.
    def sent() -> bool:
        s = scrape(base)
        check_growing(scrapes[-1], s)
        scrapes.append(s)
        return sum(values(s, "samza_task_send_calls_total").values()) == words

    wait_until(sent, 60, f"{words} sends, as scraped", c)
    assert {label(k, "task") for k in values(scrapes[-1], "samza_task_send_calls_total")} == {
        f"Partition {p}" for p in range(partitions)
    }
    wait_until(lambda: len(read_all(bs, out, [0])) >= words, 60, f"{words} outputs", c)
    assert len(read_all(bs, out, [0])) == words
    if pool:
        assert values(last, "samza_worker_messages_processed_total")
        assert {label(k, "worker") for k in values(last, "samza_worker_rss_bytes")} == {"0", "1"}
    # The checkpoints catch up with the input: checkpointed offsets reach each partition's last offset.
    per_partition = lines // partitions

    def checkpointed() -> bool:
        s = scrape(base)
        check_growing(scrapes[-1], s)
        scrapes.append(s)
        offsets = values(s, "samza_offset_manager_checkpointed_offset")
        return len(offsets) == partitions and set(offsets.values()) == {per_partition - 1}

    wait_until(checkpointed, 60, "every partition checkpointed to its end, as scraped", c)
    assert len(scrapes) >= 2
    assert c.stop() == 0, c.log_text()[-3000:]
    with pytest.raises(urllib.error.URLError):
        scrape(base)  # the endpoint went with the container


def test_no_port_is_bound_by_default(broker, unique, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    topic, out = f"lines-{unique}", f"counts-{unique}"
    create_topic(bs, topic, 1)
    produce_lines(bs, topic, 1, 10)
    c = Container(word_count_toml(tmp_path, unique, topic, out, 0), bs, log=tmp_path / "container.log")
    c.wait_started()
    assert listening_ports(c.proc.pid) == set()
    assert "prometheus:" not in c.log_text()
    assert c.stop() == 0, c.log_text()[-3000:]


def test_healthz_is_503_while_a_large_changelog_restores_then_200(broker, unique, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    topic, out, changelog, records = f"lines-{unique}", f"counts-{unique}", f"counts-log-{unique}", 600_000
    create_topic(bs, topic, 1)
    create_topic(bs, changelog, 1)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.num.messages": 10000})
    for i in range(records):
        p.produce(changelog, struct.pack(">q", i), f"k{i}".encode(), partition=0)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    store = f"""
[stores.counts]
factory = "lmdb"
changelog = "kafka.{changelog}"
key.serde = "string"
msg.serde = "long"
"""
    cfg = word_count_toml(tmp_path, unique, topic, out, 0, f"prometheus.port = 0\n{store}")
    c = Container(
        cfg,
        bs,
        "test.store=true",
        f"job.logged.store.base.dir={tmp_path / 'state'}",
        log=tmp_path / "container.log",
    )
    base, _ = endpoint(c)
    seen: list[tuple[int, str]] = []

    def state_is(want: str) -> bool:
        seen.append(health(base))
        return seen[-1][1] == want

    wait_until(lambda: state_is("restoring"), 120, "/healthz to say restoring", c)
    assert seen[-1] == (503, "restoring")
    wait_until(lambda: state_is("running"), 120, "/healthz to say running", c)
    assert seen[-1] == (200, "running")
    # Before the restore: starting; never running before it ended.
    states = [state for _, state in seen]
    assert set(states[: states.index("restoring")]) <= {"starting"}, states
    assert all(status == 503 for status, state in seen if state != "running"), seen
    s = scrape(base)
    assert values(s, "samza_task_store_restored_records", store="counts", task="Partition 0") == {
        tuple(
            sorted(
                {
                    "job": f"prom-{unique}",
                    "job_id": "1",
                    "processor": "0",
                    "task": "Partition 0",
                    "store": "counts",
                }.items()
            )
        ): records
    }
    assert values(s, "samza_processor_state", state="running").popitem()[1] == 1
    assert c.stop() == 0, c.log_text()[-3000:]


class _Scraper:
    """Scrapes one processor's endpoint every few ms on a thread of its own, until ``stop``; keeps
    each scrape's task names (from samza_task_process_calls_total) and any error."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.seen: list[tuple[set[str], str]] = []  # each scrape's tasks, and the state /healthz said after it
        self.scrapes = 0
        self.errors: list[str] = []
        self.processors: set[str] = set()
        self.names: set[str] = set()  # every sample name scraped
        self._stop = threading.Event()
        self._last: Scrape | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                s = scrape(self.base)
                if self._last is not None:
                    check_growing(self._last, s)
                self._last = s
                tasks = {label(k, "task") for k in values(s, "samza_task_process_calls_total")}
                self.processors |= {label(k[1], "processor") for k in s}
                self.names |= {k[0] for k in s}
                self.seen.append((tasks, health(self.base)[1]))
                self.scrapes += 1
            except Exception as e:
                self.errors.append(f"{type(e).__name__}: {e}")
            self._stop.wait(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def latest(self) -> tuple[set[str], str]:
        return self.seen[-1] if self.seen else (set(), "")


def dashboard_metrics() -> set[str]:
    """Every metric name a query of the Grafana dashboard (deploy/grafana/samzamp.json) names: its
    panels' expressions and its variables' queries."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    assert len(exprs) > 20
    return {name for e in exprs for name in re.findall(r"\bsamza_[a-z0-9_]+", e)}


def test_a_standalone_rebalance_moves_a_tasks_series_and_every_scrape_succeeds(
    broker, zookeeper, unique, tmp_path: Path
) -> None:
    """Two processors of a job with a changelogged store: p1 inline, p2 at pool 2, so that their
    scrapes together show every area the dashboard charts (zk, workers, restores, the inline
    task runtime's error counters); the dashboard's every query must name a metric they export."""
    bs = broker.bootstrap_servers
    topic, partitions = f"in-{unique}", 4
    create_topic(bs, topic, partitions)
    job = f"promsa-{unique}"
    store = counts_store(f"kafka.counts-log-{unique}")
    cfg, _ = standalone_config(
        tmp_path,
        job,
        topic,
        zookeeper.connect_string,
        task_class="recording_tasks:OwnershipCountTask",
        extra=f"[metrics.prometheus]\nport = 0\n{store}",
        top=f'"job.logged.store.base.dir" = "{tmp_path / "state"}"',
    )
    view = ZkView(zookeeper.connect_string, job)
    flow = InputFlow(bs, topic, partitions)
    scrapers: list[_Scraper] = []
    try:
        p1 = Processor(cfg, bs, "p1", "A")
        _, before = view.wait_stable([p1])
        s1 = _Scraper(endpoint(p1)[0])
        scrapers.append(s1)
        wait_until(lambda: s1.latest() == (before["p1"], "running"), 60, "p1's scrapes to show its tasks", p1)
        p2 = Processor(cfg, bs, "p2", "B", "job.container.thread.pool.size=2")
        s2 = _Scraper(endpoint(p2)[0])
        scrapers.append(s2)
        _, after = view.wait_stable([p1, p2])
        assert moved(before, after) == partitions // 2
        wait_until(lambda: s1.latest() == (after["p1"], "running"), 60, "p1's scrapes to show its tasks after", p1)
        wait_until(lambda: s2.latest() == (after["p2"], "running"), 60, "p2's scrapes to show its tasks", p2)
        for s in scrapers:
            s.stop()
        gone = before["p1"] - after["p1"]
        assert gone == after["p2"]
        # Every scrape of both succeeded, parsed, valid and with no series twice, throughout.
        assert s1.errors == []
        assert s2.errors == []
        assert s1.scrapes > 5
        assert s2.scrapes > 5
        # The moved tasks' series left p1 and appeared on p2.
        assert gone <= s1.seen[0][0]
        assert not gone & s1.latest()[0]
        assert s2.latest()[0] == gone
        # /healthz throughout: p1 kept running but for the rebalance; p2 started, then restored its tasks.
        assert {state for _, state in s1.seen} <= {"running", "rebalancing"}, s1.seen
        p2_states = [state for _, state in s2.seen]
        assert set(p2_states) <= {"starting", "rebalancing", "restoring", "running"}, p2_states
        assert p2_states[0] == "starting"
        assert all(state != "running" for tasks, state in s2.seen if not tasks), s2.seen  # ready only with tasks
        # Each processor's series carry its processor id, and only its own.
        assert s1.processors == {"p1"}
        assert s2.processors == {"p2"}
        # The dashboard charts only what the endpoint really exports.
        exported = s1.names | s2.names
        assert dashboard_metrics() - exported == set()
        flow.stop()
        assert p1.stop() == 0, p1.log_text()[-3000:]
        assert p2.stop() == 0, p2.log_text()[-3000:]
    finally:
        flow.stop()
        for s in scrapers:
            s.stop()
        view.close()
