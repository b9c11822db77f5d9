"""``samzamp status CONFIG [--json]``: whether the job runs, and where each task stands.

Prints the job's run (id, state: running, draining, drained, stopped, failed, died or never ran,
and how that is known), a standalone job's processors and their tasks (from ZooKeeper), and per
task its last checkpoint and its age, and per input partition the checkpointed offset, the end
offset (the high watermark: the next offset the broker will write) and the lag.

A checkpoint holds the **last processed** offset (as in Samza): the task reads that offset + 1
next. So lag = end offset - (checkpointed offset + 1): the messages not yet processed as far as
the checkpoint knows (a running task is usually ahead of its last checkpoint, by up to
task.commit.ms of work). A partition without a checkpoint has no lag shown: it starts where
samza.offset.default says.

How "runs" is known (``samzamp.drain.deployment``): a standalone job's processors are members of
its run on ZooKeeper (exact, within a session timeout of a processor's death). A job of one
container has only its run record: the container writes "running" as it starts and how it ended
as it stops, so a container killed with SIGKILL (or a lost host) leaves "running" behind. Its pid
is checked when its host is this one ("died" when it is gone); on another host the record is
believed, and the output says it was not checked. A checkpoint's age proves nothing either way:
a task writes one only when its offsets moved.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import msgspec

from samzamp.cli.common import (
    EXIT_OK,
    EXIT_STATE,
    add_job_config,
    add_log_level,
    new_parser,
    report_failure,
    setup,
)
from samzamp.cli.job_access import JobAccess
from samzamp.commit.checkpoint import Checkpoint, written_ms
from samzamp.commit.checkpoint_edits import partition_of
from samzamp.drain.deployment import Deployment

__all__ = ["EXIT_CODES", "build_parser", "main", "status_document"]

PROG = "samzamp status"


EXIT_CODES = {
    0: "a deployment of the job runs (running or draining)",
    1: "failed: the broker or ZooKeeper cannot be reached",
    2: "bad config or arguments",
    3: "no deployment runs: never ran, stopped, drained, failed or died",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = new_parser(
        prog,
        "Show whether a job runs (its run id and state), its processors and, per task, its last checkpoint, "
        "and per input partition the checkpointed offset, the end offset and the lag.\n\n"
        "A checkpoint holds the last processed offset; lag = end offset - (checkpointed offset + 1).\n"
        "Needs the job's brokers (systems.<s>.bootstrap.servers), and ZooKeeper for a standalone job.\n\n"
        "How 'runs' is known: a standalone job's processors are members of its run on ZooKeeper. A job of\n"
        "one container has only its run record, which a container killed with SIGKILL leaves at 'running':\n"
        "its pid is checked when its host is this one (state 'died' when gone); on another host the\n"
        "record is believed, and the output says it was not checked.",
        examples=[
            f"{prog} job.toml",
            f"{prog} job.toml --json | jq '.tasks[].partitions[].lag'",
            f"{prog} job.toml --set systems.kafka.bootstrap.servers=kafka:9092",
        ],
        exit_codes=EXIT_CODES,
    )
    add_job_config(p)
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    add_log_level(p, "WARNING")
    return p


def _when(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms is not None else "?"


def status_document(access: JobAccess, deployment: Deployment) -> dict[str, Any]:
    """Everything ``status`` shows, as the JSON document ``--json`` prints."""
    record = deployment.record
    doc: dict[str, Any] = {
        "job": access.job,
        "state": deployment.state.value,
        "runs": deployment.runs,
        "checked": deployment.checked,
        "evidence": deployment.evidence,
        "run": msgspec.to_builtins(record) if record is not None else None,
        "drains": deployment.drains,
        "processors": (
            [msgspec.to_builtins(p) for p in deployment.processors] if deployment.processors is not None else None
        ),
    }
    try:
        model = access.model
        last = access.last_checkpoints()
    except Exception as e:  # the run is known; the tasks are not: say why, keep the exit code the run's
        doc["tasks"] = None
        doc["tasks_unknown"] = str(e).splitlines()[0] if str(e) else type(e).__name__
        return doc
    partitions = sorted({partition_of(ssp) for t in model.tasks.values() for ssp in t.ssps})
    ends = access.end_offsets(partitions)
    now = time.time() * 1000
    tasks: list[dict[str, Any]] = []
    total_lag = 0
    for name, task in model.tasks.items():
        cp: Checkpoint | None = last.get(name)
        offsets = cp.offsets() if cp is not None else {}
        when = written_ms(cp) if cp is not None else None
        rows: list[dict[str, Any]] = []
        for ssp in task.ssps:
            checkpointed = offsets.get(ssp)
            end = ends[partition_of(ssp)]
            lag = max(0, end - (checkpointed + 1)) if checkpointed is not None else None
            total_lag += lag or 0
            rows.append(
                {
                    "system": ssp.system,
                    "stream": ssp.stream,
                    "partition": ssp.partition,
                    "key_bucket": ssp.key_bucket,
                    "checkpointed": checkpointed,
                    "end": end,
                    "lag": lag,
                }
            )
        tasks.append(
            {
                "task": name,
                "checkpoint_id": cp.checkpoint_id if cp is not None else None,
                "written_ms": when,
                "age_s": round((now - when) / 1000, 1) if when is not None else None,
                "run_id": cp.run_id if cp is not None else None,
                "partitions": rows,
            }
        )
    doc["tasks"] = tasks
    doc["total_lag"] = total_lag
    return doc


def _text(doc: dict[str, Any]) -> str:
    lines = [f"job {doc['job']}: {doc['state']}"]
    run = doc["run"]
    if run is not None:
        lines.append(
            f"  run {run['runId']} started {_when(run['startedMs'])}, recorded {run['state']} at "
            f"{_when(run['updatedMs'])} (host {run['host']}, pid {run['pid']})"
        )
    lines.append(f"  how known: {doc['evidence']}")
    if doc["drains"]:
        lines.append(f"  drain requested: notification {', '.join(doc['drains'])}")
    if doc["processors"] is not None:
        lines.append(f"processors ({len(doc['processors'])}):")
        for p in doc["processors"]:
            tasks = ", ".join(p["tasks"]) or "no tasks yet"
            lines.append(f"  {p['processor_id']} (host {p['host']}, pid {p['pid']}): {tasks}")
    if doc["tasks"] is None:
        lines.append(f"tasks: cannot be known: {doc['tasks_unknown']}")
        return "\n".join(lines)
    lines.append(f"tasks ({len(doc['tasks'])}), total lag {doc['total_lag']}:")
    width = max((len(_ssp(r)) for t in doc["tasks"] for r in t["partitions"]), default=0)
    for t in doc["tasks"]:
        if t["checkpoint_id"] is None:
            lines.append(f"  {t['task']}: no checkpoint (starts at samza.offset.default)")
        else:
            lines.append(
                f"  {t['task']}: checkpoint {_when(t['written_ms'])} ({t['age_s']:.1f} s ago"
                f"{', run ' + t['run_id'] if t['run_id'] else ', written outside a run'})"
            )
        for r in t["partitions"]:
            checkpointed = "-" if r["checkpointed"] is None else r["checkpointed"]
            lag = "-" if r["lag"] is None else r["lag"]
            lines.append(f"    {_ssp(r):<{width}}  checkpointed {checkpointed}  end {r['end']}  lag {lag}")
    return "\n".join(lines)


def _ssp(row: dict[str, Any]) -> str:
    bucket = f" bucket {row['key_bucket']}" if row["key_bucket"] >= 0 else ""
    return f"{row['system']}.{row['stream']}[{row['partition']}]{bucket}"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = setup(build_parser(prog), argv)
    try:
        access = JobAccess.from_args(args, prog)
        try:
            deployment = access.deployment()
            doc = status_document(access, deployment)
        finally:
            access.close()
    except Exception as e:
        return report_failure(prog, e)
    print(json.dumps(doc, indent=2) if args.json else _text(doc), flush=True)
    return EXIT_OK if deployment.runs else EXIT_STATE


if __name__ == "__main__":
    sys.exit(main())
