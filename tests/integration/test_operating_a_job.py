"""``samzamp status``, ``checkpoints show|set`` and ``reset-offsets`` against the real broker, on one job
of virtual tasks (job.elasticity.factor = 2: task names with spaces, one checkpoint per key bucket),
in two runs: what each command says and refuses while it runs, after a drain, and that a reset to
the earliest offsets makes the next run process every input again."""

from __future__ import annotations

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
    count_lines,
    end_offsets,
    job_toml,
    produce,
    produced_offsets,
    read_checkpoint_records,
    run_drain,
    seed_input,
    wait_until,
    write_config,
)

from samzamp.commit.checkpoint import Checkpoint

pytestmark = pytest.mark.integration

PARTITIONS = 4
SEED = 2000
MORE = 400


def samzamp(cfg: Path, bootstrap: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``samzamp COMMAND cfg ARGS --set systems.kafka.bootstrap.servers=...``: args[0] is the command
    (with its action, for checkpoints), the config goes after it."""
    command = [a for a in args if not a.startswith("-")][: 2 if args[0] == "checkpoints" else 1]
    rest = list(args[len(command) :])
    argv = [
        sys.executable,
        "-m",
        "samzamp",
        *command,
        str(cfg),
        "--set",
        f"systems.kafka.bootstrap.servers={bootstrap}",
    ]
    return subprocess.run(
        [*argv, *rest], env=child_env(), cwd=str(ROOT), capture_output=True, text=True, input=stdin, timeout=120
    )


def last_checkpoints(bootstrap: str, job: str) -> dict[str, Checkpoint]:
    last: dict[str, Checkpoint] = {}
    for cp in read_checkpoint_records(bootstrap, job):
        last[cp.task_name] = cp
    return last


def lag_rows(doc: dict) -> dict[tuple[str, int, int], tuple[int | None, int, int | None]]:
    """(task, partition, key bucket) -> (checkpointed, end, lag), from ``status --json``."""
    return {
        (t["task"], r["partition"], r["key_bucket"]): (r["checkpointed"], r["end"], r["lag"])
        for t in doc["tasks"]
        for r in t["partitions"]
    }


def expected_rows(
    bootstrap: str, job: str, topic: str
) -> dict[tuple[str, int, int], tuple[int | None, int, int | None]]:
    """The same, from the checkpoint topic and the broker's end offsets: lag = end - (checkpoint + 1)."""
    ends = end_offsets(bootstrap, topic, list(range(PARTITIONS)))
    out = {}
    for task, cp in last_checkpoints(bootstrap, job).items():
        for o in cp.input_offsets:
            out[(task, o.partition, o.key_bucket)] = (o.offset, ends[o.partition], ends[o.partition] - o.offset - 1)
    return out


def processed_by(rec: Path, pid: int) -> Counter[tuple[int, int]]:
    """(partition, offset) -> how often the process ``pid`` recorded processing it."""
    seen: Counter[tuple[int, int]] = Counter()
    for f in rec.glob(f"*.{pid}.log"):
        for line in f.read_text().splitlines():
            kind, p, o = line.split()
            if kind == "P":
                seen[(int(p), int(o))] += 1
    return seen


def test_status_checkpoints_and_reset_offsets_on_a_running_job(broker, unique, tmp_path) -> None:
    bootstrap = broker.bootstrap_servers
    topic, job = f"ops-in-{unique}", f"ops-{unique}"
    seed_input(bootstrap, topic, PARTITIONS, SEED)
    rec = tmp_path / "rec"
    rec.mkdir()
    cfg = write_config(
        tmp_path / "job.toml",
        job_toml(job, "recording_tasks:OrderTask", topic, rec).replace("[job]\n", "[job]\nelasticity.factor = 2\n"),
    )

    # Never ran: exit 3, and its tasks have no checkpoint yet.
    never = samzamp(cfg, bootstrap, "status", "--json")
    assert never.returncode == 3, never.stderr
    doc = json.loads(never.stdout)
    assert doc["state"] == "never ran"
    assert doc["runs"] is False
    assert len(doc["tasks"]) == 2 * PARTITIONS
    assert all(t["checkpoint_id"] is None for t in doc["tasks"])

    c1 = Container(cfg, bootstrap, "job.drain-monitor.poll.interval.ms=200", log=tmp_path / "c1.log")
    wait_until(lambda: count_lines(rec) >= SEED, 120, "the seed to be processed", c1)

    # Running: exit 0, the run on this host; lag is the broker's end minus (checkpoint + 1). The
    # checkpoints may still move: compare with a reading of the topic that did not change around it.
    for _ in range(20):
        before = expected_rows(bootstrap, job, topic)
        running = samzamp(cfg, bootstrap, "status", "--json")
        if before == expected_rows(bootstrap, job, topic) and len(before) == 2 * PARTITIONS:
            break
    assert running.returncode == 0, running.stderr
    doc = json.loads(running.stdout)
    assert doc["state"] == "running", doc["evidence"]
    assert doc["checked"] is True
    assert f"pid {c1.proc.pid}" in doc["evidence"]
    assert lag_rows(doc) == before
    text = samzamp(cfg, bootstrap, "status")
    assert text.returncode == 0
    assert "job ops-" in text.stdout
    assert "Partition 0_1_2: checkpoint" in text.stdout

    # Setting checkpoints while it runs is refused, and writes nothing.
    records = len(read_checkpoint_records(bootstrap, job))
    refused = samzamp(
        cfg, bootstrap, "checkpoints", "set", "--from", "-",
        stdin=f"tasknames.Partition\\ 0_0_2.systems.kafka.streams.{topic}.partitions.0=0\n",
    )  # fmt: skip
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    assert "refused" in refused.stderr
    assert "running" in refused.stderr
    refused_reset = samzamp(cfg, bootstrap, "reset-offsets", "--to-earliest")
    assert refused_reset.returncode == 3, refused_reset.stderr
    assert len(read_checkpoint_records(bootstrap, job)) - records >= 0  # (the job itself may commit)

    drained = run_drain(cfg, bootstrap, "--wait", "--timeout", "120")
    assert drained.returncode == 0, drained.stderr
    assert c1.proc.wait(timeout=60) == 0, c1.log_text()[-3000:]
    produce(bootstrap, topic, PARTITIONS, MORE, SEED)  # lag that nothing processes

    after = samzamp(cfg, bootstrap, "status", "--json")
    assert after.returncode == 3, after.stderr
    doc = json.loads(after.stdout)
    assert doc["state"] == "drained"
    assert doc["runs"] is False
    expected = expected_rows(bootstrap, job, topic)
    assert lag_rows(doc) == expected
    assert doc["total_lag"] == sum(lag for _c, _e, lag in expected.values()) >= MORE
    assert "drained" in samzamp(cfg, bootstrap, "status").stdout

    # show --json | edit | set round-trips: one bucket's offset moved back, the rest unchanged.
    shown = samzamp(cfg, bootstrap, "checkpoints", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    edited = json.loads(shown.stdout)
    entry = edited["tasks"]["Partition 1_1_2"]["offsets"][0]
    assert (entry["partition"], entry["key_bucket"]) == (1, 1)
    entry["offset"] = 7
    put = samzamp(cfg, bootstrap, "checkpoints", "set", "--from", "-", stdin=json.dumps(edited))
    assert put.returncode == 0, put.stderr
    assert "wrote 1 checkpoint(s)" in put.stdout, put.stdout
    again = json.loads(samzamp(cfg, bootstrap, "checkpoints", "show", "--json").stdout)
    assert again["tasks"]["Partition 1_1_2"]["offsets"][0]["offset"] == 7
    for task in edited["tasks"]:
        if task != "Partition 1_1_2":
            assert again["tasks"][task]["offsets"] == edited["tasks"][task]["offsets"], task
    # ... and the line format, task names with spaces escaped, reads back as written.
    lines = samzamp(cfg, bootstrap, "checkpoints", "show", "--task", "Partition 1_1_2")
    assert f"tasknames.Partition\\ 1_1_2.systems.kafka.streams.{topic}.partitions.1=7" in lines.stdout.splitlines()
    same = samzamp(cfg, bootstrap, "checkpoints", "set", "--from", "-", stdin=lines.stdout)
    assert same.returncode == 0, same.stderr
    assert "wrote 0 checkpoint(s)" in same.stdout, same.stdout
    unknown = samzamp(
        cfg, bootstrap, "checkpoints", "set", "--from", "-",
        stdin=f"tasknames.Partition 9_0_2.systems.kafka.streams.{topic}.partitions.9=1\n",
    )  # fmt: skip
    assert unknown.returncode == 2, unknown.stderr
    assert "'Partition 9_0_2'" in unknown.stderr

    # --dry-run writes nothing; the reset itself writes offset -1 (nothing processed) everywhere.
    records = read_checkpoint_records(bootstrap, job)
    dry = samzamp(cfg, bootstrap, "reset-offsets", "--to-earliest", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would set" in dry.stdout
    assert "stores are NOT reset" in dry.stdout
    assert read_checkpoint_records(bootstrap, job) == records
    reset = samzamp(cfg, bootstrap, "reset-offsets", "--to-earliest")
    assert reset.returncode == 0, reset.stderr
    assert f"wrote {2 * PARTITIONS} checkpoint(s)" in reset.stdout, reset.stdout
    assert {
        (t, o.partition, o.key_bucket): o.offset
        for t, cp in last_checkpoints(bootstrap, job).items()
        for o in cp.input_offsets
    } == {(f"Partition {p}_{kb}_2", p, kb): -1 for p in range(PARTITIONS) for kb in range(2)}

    # The next run processes every input again, once.
    c2 = Container(cfg, bootstrap, log=tmp_path / "c2.log")
    total = SEED + MORE
    wait_until(lambda: sum(processed_by(rec, c2.proc.pid).values()) >= total, 120, "everything again", c2)
    assert c2.stop() == 0
    seen = processed_by(rec, c2.proc.pid)
    assert set(seen.values()) == {1}
    assert {p: {o for (q, o) in seen if q == p} for p in range(PARTITIONS)} == produced_offsets(total, PARTITIONS)
