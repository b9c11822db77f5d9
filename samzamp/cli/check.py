"""``samzamp check job.toml [--set key=value ...]``: is this config one ``samzamp run`` would start?

Loads and validates the config as the container does (``load_job``: every key, the serdes, the task
class imported or the application's ``describe`` run) and resolves what a processor resolves before
it connects (``resolve_job``: the task class, the coordinator and its extra). It connects to nothing:
a broker or ZooKeeper that is down, or a topic that does not exist yet, is for ``samzamp run`` to find.

On success prints a short summary on stdout (the job, its class, inputs, stores, pool size and
coordinator) and exits 0; a bad config is the container's one line on stderr, naming the key, and
exit 2. The exit codes are in ``EXIT_CODES`` (``samzamp check --help`` shows them).
"""

from __future__ import annotations

import argparse
import sys

from samzamp.cli.common import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    add_job_config,
    add_log_level,
    load_job,
    new_parser,
    report_failure,
    setup,
)
from samzamp.config.settings import JobSettings
from samzamp.processor.stream_processor import resolve_job

__all__ = ["EXIT_CODES", "PROG", "build_parser", "main", "summary"]

PROG = "samzamp check"

EXIT_CODES = {
    EXIT_OK: "the config is valid and its task or application class imports; the summary is printed",
    EXIT_FAILED: "failed otherwise (the line says what)",
    EXIT_CONFIG: "bad config or arguments (the line names the key), a class that does not import, or a "
    "missing extra (the line says what to install)",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The arguments of ``samzamp check``: the job's config, ``--set`` overrides and the log options."""
    p = new_parser(
        prog,
        "Check a job's config and import its task or application class, without connecting to anything.",
        examples=[
            f"{prog} configs/word-count.toml",
            f"{prog} job.toml --set task.class=my_tasks:CountTask --set job.container.thread.pool.size=4",
        ],
        exit_codes=EXIT_CODES,
    )
    add_job_config(p)
    add_log_level(p, "WARNING")
    return p


def summary(settings: JobSettings) -> list[str]:
    """The lines ``samzamp check`` prints for a valid job: what it will run, read, keep and use."""
    if settings.application is not None:
        what = ("app.class", settings.application.app_class)
    else:
        what = ("task.class", settings.task.task_class)
    stores = [
        f"{name} (changelog {store.changelog})" if store.changelog is not None else name
        for name, store in sorted(settings.stores.items())
    ]
    pool = settings.pool_size
    workers = f"{pool} worker processes" if pool >= 2 else "tasks run in the container's process"
    if settings.zk is not None:
        coordinator = f"{settings.coordinator_factory} (ZooKeeper {settings.zk.connect})"
    else:
        coordinator = f"{settings.coordinator_factory} (one container)"
    rows = [
        ("job", f"{settings.name} (id {settings.id})"),
        what,
        ("inputs", ", ".join(str(ss) for ss in settings.task.inputs)),
        ("stores", ", ".join(stores) or "none"),
        ("pool size", f"{pool} ({workers})"),
        ("coordinator", coordinator),
        *(("warning", str(w)) for w in settings.warnings),
    ]
    width = max(len(name) for name, _ in rows)
    return [f"{name:<{width}}  {value}" for name, value in rows]


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``samzamp check`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code. Every line
    it writes starts with ``prog``, the name it runs as (its alias passes none: the same name)."""
    args = setup(build_parser(prog), argv)
    try:
        settings = load_job(args)
        resolve_job(settings)
    except Exception as e:
        return report_failure(prog, e)
    print("\n".join(summary(settings)))
    print(f"{prog}: {args.config} is valid (nothing was connected to)", flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
