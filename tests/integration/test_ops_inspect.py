"""Against the real broker: ``samzamp stores inspect`` and ``samzamp job-model show`` on a stateful
word count, while it runs and after it stopped (one job start)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from kafka_util import (
    ROOT,
    Container,
    child_env,
    counts_store,
    create_topic,
    job_toml,
    records,
    seed_input,
    wait_until,
    whole_lines,
    write_config,
)
from standalone_util import Processor, ZkView, standalone_config

pytestmark = pytest.mark.integration

PARTITIONS = 4
WORDS = 37  # StoreCountTask: message m<i> is word w<i % 37>
N = 2_000


def _true_counts() -> dict[str, dict[str, int]]:
    """Task directory -> the counts the inputs imply (message i is on partition i % 4)."""
    per: dict[str, Counter[str]] = {f"Partition_{p}": Counter() for p in range(PARTITIONS)}
    for i in range(N):
        per[f"Partition_{i % PARTITIONS}"][f"w{i % WORDS}"] += 1
    return {t: dict(c) for t, c in per.items()}


def _samzamp(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "samzamp", *args, "--set", f"systems.kafka.bootstrap.servers={bootstrap}"]
    return subprocess.run(cmd, env=child_env(), cwd=str(ROOT), capture_output=True, text=True, timeout=120, check=False)


def _inspect(bootstrap: str, cfg: Path, task: str, *args: str) -> subprocess.CompletedProcess[str]:
    return _samzamp(bootstrap, "stores", "inspect", str(cfg), "--store", "counts", "--task", task, *args)


def _counts(out: str) -> dict[str, int]:
    pairs = [line.split("\t") for line in out.splitlines()]
    return {k: int(v) for k, v in pairs}


def _fingerprint(state: Path) -> dict[str, tuple[str, int]]:
    """Every file of the store directories: its bytes' digest and its mtime."""
    return {
        str(f.relative_to(state)): (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns)
        for f in sorted(state.rglob("*"))
        if f.is_file()
    }


def _checkpointed_everything(rec: Path) -> bool:
    """Each partition has a checkpoint (a ``K`` line of CheckpointedStoreCountTask) of its last offset:
    its store's writes are committed to its LMDB files (a commit applies them before the checkpoint)."""
    last = N // PARTITIONS - 1
    done: set[int] = set()
    for f in rec.glob("*.log"):
        for line in whole_lines(f):
            kind, *rest = line.split()
            if kind == "K" and int(rest[1]) >= last:
                done.add(int(rest[0]))
    return len(done) == PARTITIONS


def test_inspect_reads_the_counts_the_job_wrote_and_job_model_shows_its_tasks(broker, unique, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap_servers
    topic = f"in-{unique}"
    changelog = f"counts-log-{unique}"
    seed_input(bootstrap, topic, PARTITIONS, N)
    rec = tmp_path / "rec"
    rec.mkdir()
    state = tmp_path / "state"
    cfg = write_config(
        tmp_path / "job.toml",
        job_toml(
            f"inspect-{unique}",
            "recording_tasks:CheckpointedStoreCountTask",
            topic,
            rec,
            counts_store(f"kafka.{changelog}"),
            f'"job.logged.store.base.dir" = "{state}"',
        ),
    )
    expected = _true_counts()

    c = Container(cfg, bootstrap, log=tmp_path / "run.log")
    wait_until(lambda: len({(p, o) for _, p, o in records(rec)}) >= N, 120, f"{N} processed", c)
    wait_until(lambda: _checkpointed_everything(rec), 60, "a checkpoint of every partition's end", c)

    # While the task runs: refused, naming the task, the process and --snapshot; a snapshot reads its last commit.
    refused = _inspect(bootstrap, cfg, "Partition 0")
    assert refused.returncode == 3, refused.stderr
    assert "store 'counts' of task 'Partition 0'" in refused.stderr
    assert f"pid {c.proc.pid}" in refused.stderr
    assert "--snapshot" in refused.stderr
    assert refused.stdout == ""
    snap = _inspect(bootstrap, cfg, "Partition 2", "--snapshot")
    assert snap.returncode == 0, snap.stderr
    assert _counts(snap.stdout) == expected["Partition_2"]
    assert "a snapshot: the task runs" in snap.stderr

    shown = _samzamp(bootstrap, "job-model", "show", str(cfg), "--json")
    assert shown.returncode == 0, shown.stderr
    model = json.loads(shown.stdout)
    assert (model["coordinator"], model["source"], model["history_found"]) == ("passthrough", "computed", True)
    assert model["changelogs"] == {"counts": {"system": "kafka", "stream": changelog}}
    assert [t["name"] for t in model["tasks"]] == [f"Partition {p}" for p in range(PARTITIONS)]
    for p, t in enumerate(model["tasks"]):
        assert t["ssps"] == [{"system": "kafka", "stream": topic, "partition": p, "key_bucket": None}]
        assert t["changelog_partition"] == p
        assert t["changelogs"] == [{"store": "counts", "system": "kafka", "stream": changelog, "partition": p}]

    assert c.stop() == 0, c.log_text()[-3000:]

    # Stopped: every task's store holds exactly the counts of its partition's messages, and reading
    # them changes no file.
    before = _fingerprint(state)
    assert any(name.endswith("data.mdb") for name in before)
    for task, counts in expected.items():
        r = _inspect(bootstrap, cfg, task.replace("_", " "))
        assert r.returncode == 0, r.stderr
        assert _counts(r.stdout) == counts, task
    one = _inspect(bootstrap, cfg, "Partition_3", "--key", "w5", "--json")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["entries"] == [{"key": "w5", "value": expected["Partition_3"]["w5"]}]
    absent = _inspect(bootstrap, cfg, "Partition 3", "--key", "nope")
    assert absent.returncode == 1
    assert "key 'nope' not found" in absent.stderr
    unknown = _inspect(bootstrap, cfg, "Partition 4")
    assert unknown.returncode == 2
    assert "the tasks with one in" in unknown.stderr
    assert "Partition_0, Partition_1, Partition_2, Partition_3" in unknown.stderr
    assert _fingerprint(state) == before


def test_job_model_show_reads_a_standalone_jobs_processors_and_locations_from_zookeeper(
    broker, zookeeper, unique, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bootstrap, topic, PARTITIONS)
    job = f"jm-{unique}"
    cfg, _ = standalone_config(tmp_path, job, topic, zookeeper.connect_string)
    view = ZkView(zookeeper.connect_string, job)
    try:
        processors = [Processor(cfg, bootstrap, "p1", "A"), Processor(cfg, bootstrap, "p2", "B")]
        version, owners = view.wait_stable(processors)
        shown = _samzamp(bootstrap, "job-model", "show", str(cfg), "--json")
        assert shown.returncode == 0, shown.stderr
        model = json.loads(shown.stdout)
        assert (model["coordinator"], model["source"], model["version"]) == ("zk", "zookeeper", version)
        found = {p["processor_id"]: (p["location_id"], set(p["tasks"]), p["live"]) for p in model["processors"]}
        assert found == {"p1": ("A", owners["p1"], True), "p2": ("B", owners["p2"], True)}
        assert {p["pid"] for p in model["processors"]} == {p.proc.pid for p in processors}
        assert {t["name"]: t["processor"] for t in model["tasks"]} == {
            task: pid for pid, tasks in owners.items() for task in tasks
        }
        assert [t["ssps"][0]["partition"] for t in model["tasks"]] == list(range(PARTITIONS))
        for p in processors:
            assert p.stop() == 0, p.log_text()[-3000:]
    finally:
        view.close()
    # ZooKeeper unreachable: exit 1, one line naming the key.
    gone = _samzamp(
        bootstrap,
        "job-model",
        "show",
        str(cfg),
        "--set",
        "job.coordinator.zk.connect=127.0.0.1:1",
        "--set",
        "job.coordinator.zk.connection.timeout.ms=500",
    )
    assert gone.returncode == 1, gone.stderr
    assert "job.coordinator.zk.connect: no ZooKeeper answered at 127.0.0.1:1" in gone.stderr
