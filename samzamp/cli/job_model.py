"""``samzamp job-model VERB``: a job's model. ``show`` prints its tasks, what each reads and its
changelog partition, and in standalone mode which processor runs which task, where
(``samzamp.coordinator.job_model_view`` reads it; this module parses and prints).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from samzamp.api.envelope import SystemStreamPartition
from samzamp.cli.common import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    add_job_config,
    add_log_level,
    new_parser,
    report_failure,
    setup,
)
from samzamp.config import load_config, parse_overrides, validate
from samzamp.coordinator.job_model_view import JobModelView, job_model_view
from samzamp.model.grouper import task_order

__all__ = ["EXIT_CODES", "build_parser", "main"]

PROG = "samzamp job-model"

EXIT_CODES = {
    EXIT_OK: "shown",
    EXIT_FAILED: "the broker or ZooKeeper cannot be reached (or holds a job model another samzamp wrote)",
    EXIT_CONFIG: "bad config or arguments (the line names the key), or the zookeeper extra is missing",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The parser of ``samzamp job-model``: one subparser per verb (``show``)."""
    p = new_parser(
        prog,
        "Look at a job's model: its tasks and where they run.",
        examples=[f"{prog} show job.toml"],
        exit_codes=EXIT_CODES,
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    show_help = new_parser(
        f"{prog} show",
        "",
        examples=[f"{prog} show job.toml", f"{prog} show job.toml --json | jq '.tasks[].name'"],
        exit_codes=EXIT_CODES,
    )
    show = verbs.add_parser(
        "show",
        help="print the job's tasks, their input partitions and changelog partitions",
        description=(
            "Print the job's tasks: the input partitions each reads (with their key bucket where\n"
            "job.elasticity.factor > 1), and its partition of each store's changelog. Read only.\n"
            "A standalone job (job.coordinator.factory = zk): the current version of the model its\n"
            "processors agreed on, read from ZooKeeper without joining the job, with which processor\n"
            "runs which task at which location, and the processors registered now. Any other job, or a\n"
            "standalone job that never published one: the model a container would compute if it started\n"
            "now, from the inputs' partitions on the broker and the task history in the job's\n"
            "coordinator stream, with the container's own code."
        ),
        epilog=show_help.epilog,
        formatter_class=show_help.formatter_class,
    )
    add_job_config(show)
    show.add_argument("--json", action="store_true", help="print one JSON object")
    add_log_level(show, "WARNING")
    return p


def _ssp(ssp: SystemStreamPartition, factor: int) -> str:
    bucket = f" (key bucket {ssp.key_bucket} of {factor})" if ssp.key_bucket >= 0 else ""
    return f"{ssp.system}.{ssp.stream}.{ssp.partition}{bucket}"


def _source(view: JobModelView) -> str:
    if view.source == "zookeeper":
        newer = (
            f"; version {view.latest} is being agreed"
            if view.latest is not None and view.latest != view.version
            else ""
        )
        return f"version {view.version} of the job model on {view.where}{newer}"
    history = (
        "the task history in its coordinator stream"
        if view.history_found
        else "no task history (the job never started: changelog partitions as a first start assigns them)"
    )
    zk = f"; no processor published a job model on {view.where} yet" if view.coordinator == "zk" else ""
    return f"computed from the inputs' partitions on the broker now and {history}{zk}"


def _document(view: JobModelView) -> dict[str, Any]:
    owners = view.model.owners()
    tasks = [view.model.tasks[n] for n in sorted(view.model.tasks, key=task_order)]
    return {
        "job": view.job,
        "coordinator": view.coordinator,
        "source": view.source,
        "zookeeper": view.where or None,
        "version": view.version,
        "active_version": view.active,
        "latest_version": view.latest,
        "history_found": view.history_found,
        "missing_inputs": view.missing_inputs,
        "changelogs": {store: {"system": cl.system, "stream": cl.stream} for store, cl in view.changelogs.items()},
        "tasks": [
            {
                "name": t.name,
                "changelog_partition": t.changelog_partition,
                "changelogs": [
                    {"store": store, "system": cl.system, "stream": cl.stream, "partition": t.changelog_partition}
                    for store, cl in view.changelogs.items()
                ],
                "processor": owners.get(t.name),
                "ssps": [
                    {
                        "system": s.system,
                        "stream": s.stream,
                        "partition": s.partition,
                        "key_bucket": s.key_bucket if s.key_bucket >= 0 else None,
                    }
                    for s in t.ssps
                ],
            }
            for t in tasks
        ],
        "processors": [
            {
                "processor_id": pid,
                "location_id": c.location_id,
                "tasks": list(c.tasks),
                "live": pid in view.processors,
                "host": view.processors[pid].host if pid in view.processors else None,
                "pid": view.processors[pid].pid if pid in view.processors else None,
            }
            for pid, c in sorted(view.model.containers.items())
        ]
        + [
            {
                "processor_id": pid,
                "location_id": p.location_id,
                "tasks": [],
                "live": True,
                "host": p.host,
                "pid": p.pid,
            }
            for pid, p in sorted(view.processors.items())
            if pid not in view.model.containers
        ],
    }


def _text(view: JobModelView, factor: int) -> str:
    model = view.model
    lines = [f"job {view.job} ({view.coordinator}): {len(model.tasks)} tasks, {_source(view)}"]
    lines += [f"input {name}: not on the broker (no task reads it)" for name in view.missing_inputs]
    lines += [f"store {store}: changelog {cl.system}.{cl.stream}" for store, cl in view.changelogs.items()]
    for pid, c in sorted(model.containers.items()):
        live = view.processors.get(pid)
        at = f"registered now: host {live.host}, pid {live.pid}" if live is not None else "not registered now"
        lines.append(f"processor {pid} at location {c.location_id} ({at}): {len(c.tasks)} tasks")
    for pid, p in sorted(view.processors.items()):
        if pid not in model.containers:
            lines.append(
                f"processor {pid} at location {p.location_id} (registered now: host {p.host}, pid {p.pid}): in no model yet"
            )
    owners = model.owners()
    names = sorted(model.tasks, key=task_order)
    width = max((len(n) for n in names), default=4)
    lines.append(f"{'TASK':<{width}}  CHANGELOG  " + ("PROCESSOR  " if model.containers else "") + "INPUTS")
    for name in names:
        t = model.tasks[name]
        owner = f"{owners.get(name, '-'):<9}  " if model.containers else ""
        inputs = ", ".join(_ssp(s, factor) for s in t.ssps)
        lines.append(f"{name:<{width}}  {t.changelog_partition:<9}  {owner}{inputs}")
    return "\n".join(lines) + "\n"


def show(args: argparse.Namespace, prog: str) -> int:
    """``job-model show``: the exit code (see EXIT_CODES)."""
    try:
        settings = validate(load_config(args.config, parse_overrides(args.overrides)))
        view = job_model_view(settings)
    except Exception as e:
        return report_failure(prog, e)
    if args.json:
        sys.stdout.write(msgspec.json.encode(_document(view)).decode() + "\n")
    else:
        sys.stdout.write(_text(view, settings.elasticity_factor))
    return EXIT_OK


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = setup(build_parser(prog), argv)
    return show(args, f"{prog} {args.verb}")


if __name__ == "__main__":
    sys.exit(main())
