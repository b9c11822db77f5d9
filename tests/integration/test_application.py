"""The high-level API (app.class) on the real embedded broker: word count through an intermediate
topic and a window, inline, in worker processes and with virtual tasks; windows across SIGKILLs;
stream-table and stream-stream joins; bad applications; the example configs as they are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kafka_util import ROOT, child_env, create_topic

pytestmark = pytest.mark.integration


def app_toml(job: str, app_class: str, topics: dict[str, tuple[str, int]], extra: str = "") -> str:
    """A job running ``app_class``; ``topics``: stream id -> (its topic, its partition count), so
    tests sharing the broker never share a topic."""
    streams = "".join(
        f'\n[streams.{sid}]\nsamza.physical.name = "{topic}"\npartitions = {n}\n' for sid, (topic, n) in topics.items()
    )
    return f"""
[job]
name = "{job}"
default.system = "kafka"

[app]
class = "{app_class}"

[task]
commit.ms = 500

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"

[metrics]
log.interval.ms = 0
{streams}
{extra}
"""


def _run_to_exit(config: Path, bootstrap: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "samzamp.cli.container", str(config)]
    if bootstrap is not None:
        args += ["--set", f"systems.kafka.bootstrap.servers={bootstrap}"]
    return subprocess.run(
        args, env=child_env(), cwd=str(ROOT), capture_output=True, text=True, timeout=timeout, check=False
    )


def _assert_exit_2_naming(proc: subprocess.CompletedProcess[str], *names: str) -> str:
    """The container exited 2 and its last line on stderr is a config error naming each of ``names``."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("samzamp-container: config error: "), last
    for name in names:
        assert name in last, f"{name!r} not in {last!r}"
    return last


# -- Acceptance 4: bad applications exit 2 with one line naming the thing ----------------------------

UNREACHABLE = "127.0.0.1:9"  # never contacted: these fail while the config is planned


@pytest.mark.parametrize(
    ("case", "app_class", "extra", "names"),
    [
        (
            "app-and-task-class",
            "samzamp.examples.word_count_app:WordCountApp",
            '[task]\nclass = "samzamp.examples.word_count:WordCountTask"\n',
            ("app.class", "task.class", "both set"),
        ),
        (
            "not-a-stream-application",
            "graph_apps:NotAnApp",
            "",
            ("app.class", "graph_apps:NotAnApp", "StreamApplication"),
        ),
        ("duplicate-op-id", "graph_apps:DuplicateIdApp", "", ("app.class", "bad-1-partition_by-twice", "'twice'")),
    ],
)
def test_a_bad_application_exits_2_naming_it(
    tmp_path: Path, case: str, app_class: str, extra: str, names: tuple[str, ...]
) -> None:
    # Without the broker: the base points at a port nothing listens on, so a case that got past
    # planning would not exit 2 with a config error.
    config = tmp_path / "job.toml"
    config.write_text(
        f"""
[job]
name = "bad"
default.system = "kafka"

[app]
class = "{app_class}"

[systems.kafka]
samza.factory = "kafka"
bootstrap.servers = "{UNREACHABLE}"

[streams.lines]
samza.msg.serde = "string"

{extra}
"""
    )
    proc = _run_to_exit(config, timeout=60)
    _assert_exit_2_naming(proc, *names)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_an_intermediate_topic_with_another_partition_count_exits_2_naming_it(
    broker, unique: str, tmp_path: Path
) -> None:
    """The job's partition_by topic exists with 2 partitions; the job wants 4 (its input's count)."""
    job = f"wc-{unique}"
    lines = f"lines-{unique}"
    intermediate = f"{job}-1-partition_by-by-word"
    create_topic(broker.bootstrap_servers, lines, 4)
    create_topic(broker.bootstrap_servers, intermediate, 2)
    config = tmp_path / "job.toml"
    config.write_text(
        app_toml(
            job,
            "samzamp.examples.word_count_app:WordCountApp",
            {"lines": (lines, 4), "word-counts": (f"counts-{unique}", 4)},
        )
    )
    last = _assert_exit_2_naming(
        _run_to_exit(config, broker.bootstrap_servers), intermediate, "2 partitions", "wants 4"
    )
    assert "job.intermediate.stream.partitions" in last


def test_a_join_of_streams_with_different_partition_counts_exits_2_naming_it(
    broker, unique: str, tmp_path: Path
) -> None:
    job = f"join-{unique}"
    config = tmp_path / "job.toml"
    orders, payments = f"orders-{unique}", f"payments-{unique}"
    config.write_text(
        app_toml(
            job,
            "graph_apps:StreamJoinApp",
            {"orders": (orders, 2), "payments": (payments, 4), "paid": (f"paid-{unique}", 2)},
        )
    )
    last = _assert_exit_2_naming(
        _run_to_exit(config, broker.bootstrap_servers), f"{job}-1-join-paid", f"{orders}: 2", f"{payments}: 4"
    )
    assert "different partition counts" in last
