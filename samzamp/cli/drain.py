"""``samzamp drain job.toml [--run-id ID] [--wait] [--timeout S]`` (alias ``samzamp-drain``): drain a running job.

Writes a drain notification for the job's running deployment where the job keeps its run: its
coordinator stream (``__samza_coordinator_<job.name>_<job.id>``), or for a standalone job
(job.coordinator.factory = zk) ZooKeeper (job.coordinator.zk.connect; the broker is not needed).
Each container of the run sees it within job.drain-monitor.poll.interval.ms, stops fetching,
processes everything it already fetched, emits its windows, commits and exits 0. Made to run from
cron before an upgrade, e.g.::

    55 3 * * *  cd /srv/jobs && bin/samzamp drain configs/word-count.toml --wait --timeout 600 >> drain.log 2>&1

Which run: ``--run-id``, else ``app.run.id`` from the config, else the running deployment the
container published (the one run of all a standalone job's processors). ``--run-id`` must name the
job's current run (or ``app.run.id``): a mistyped or old id would leave a notification nothing ever
acts on. The run named by ``app.run.id`` may not have started yet: its container drains right after
it starts.

Idempotent: when the run already has a notification, none is added (the line says "already"); a run
that already drained answers 0 again ("already drained"), so a cron retry after a timeout is safe.
``--wait`` then waits until the run has drained (its container, or a standalone job's last
processor of the run, records the run as drained and deletes the notification: so every processor
of the run drained), at most ``--timeout`` seconds.

Prints one line; the exit codes are in ``EXIT_CODES`` (``samzamp drain --help`` shows them).
"""

from __future__ import annotations

import argparse
import sys
import time

from samzamp.api.errors import ConfigError
from samzamp.cli.common import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_STATE,
    EXIT_TIMEOUT,
    add_job_config,
    add_log_level,
    load_job,
    new_parser,
    report_failure,
    setup,
)
from samzamp.config.settings import JobSettings
from samzamp.config.system_kinds import system_kind_names
from samzamp.coordinator.factory import job_coordinator_factory
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.run_id import RUN_NAMESPACE, RunRecord, RunState, RunView, StreamRunView, read_current_run
from samzamp.drain.notification import DRAIN_NAMESPACE, read_drain_notifications, write_drain_notification
from samzamp.systems.factory import Place
from samzamp.systems.registry import open_system

__all__ = ["EXIT_CODES", "PROG", "build_parser", "drain", "main", "open_run_view"]

# The alias samzamp-drain runs as this too, so that its every line is the subcommand's.
PROG = "samzamp drain"
EXIT_NO_RUN = EXIT_STATE
WAIT_POLL_S = 0.5

EXIT_CODES = {
    EXIT_OK: "drain requested (or already requested); with --wait: the run drained; the run already drained",
    EXIT_FAILED: "failed: the broker (or ZooKeeper) cannot be reached, or (--wait) the run stopped without draining",
    EXIT_CONFIG: "bad config or arguments (the line names the key)",
    EXIT_NO_RUN: "no running deployment found: the job never ran, its last run stopped (without a drain), "
    "or --run-id names a run that is not the job's current one",
    EXIT_TIMEOUT: "--wait timed out: no container drained the run in time (is it running, with "
    "job.drain-monitor.enabled?); the notification stays, so the run drains when it next polls",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The arguments of ``samzamp drain``: the job's config, which run, and whether to wait."""
    p = new_parser(
        prog,
        "Drain a running samzamp job: its containers process what they fetched, commit and exit 0.",
        examples=[
            f"{prog} configs/word-count.toml",
            f"{prog} configs/word-count.toml --wait --timeout 600",
        ],
        exit_codes=EXIT_CODES,
    )
    add_job_config(p)
    p.add_argument("--run-id", help="the run to drain (default: app.run.id, else the running deployment)")
    p.add_argument("--wait", action="store_true", help="wait until the run has drained")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="with --wait: give up after S seconds")
    add_log_level(p, "WARNING")
    return p


def open_run_view(settings: JobSettings, tool: str = PROG) -> RunView:
    """Where the job keeps its run record and drain notifications: its coordinator factory says (a
    standalone job's are on ZooKeeper, samzamp.coordinator.zk.runs). ``tool`` names the command in
    a config error."""
    return job_coordinator_factory(settings).run_view(lambda: _coordinator_stream(settings, tool))


def _coordinator_stream(settings: JobSettings, tool: str) -> StreamRunView:
    system = settings.coordinator_system
    s = settings.systems[system]
    if not s.kind.shared:
        raise ConfigError(
            "job.coordinator.system",
            f"system {system!r} is {s.kind}, in its container's process only; {tool} reaches only "
            f"{system_kind_names(lambda k: k.shared)} systems",
        )
    if not s.bootstrap_servers:
        raise ConfigError(
            f"systems.{system}.bootstrap.servers",
            f"is not set: {tool} must reach the job's broker (an embedded broker is private to its container)",
        )
    opened = open_system(settings, system, Place(process=tool.rsplit(" ", 1)[-1].removeprefix("samzamp-")))
    admin = opened.admin()
    producer = opened.producer()
    return StreamRunView(
        CoordinatorStreamStore(admin, producer, settings.coordinator_topic, settings.coordinator_replication_factor)
    )


def _say(prog: str, job: str, text: str, err: bool = False) -> None:
    print(f"{prog}: {job}: {text}", file=sys.stderr if err else sys.stdout, flush=True)


def _describe(run: RunRecord) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.updated_ms / 1000))
    return f"run {run.run_id} {run.state.value} at {when} (host {run.host}, pid {run.pid})"


def _target_run(
    prog: str, job: str, settings: JobSettings, current: RunRecord | None, run_id: str | None, where: str
) -> str | int:
    """The run to drain, or the exit code when there is none to drain."""
    configured = settings.run_id
    if run_id is not None and run_id != configured and (current is None or current.run_id != run_id):
        now = f"the current one is {current.run_id}" if current is not None else "the job has no run yet"
        _say(prog, job, f"no running deployment found: run {run_id} is not this job's deployment ({now})")
        return EXIT_NO_RUN
    wanted = run_id or configured
    if wanted is None:
        if current is None:
            _say(prog, job, f"no running deployment found (the job has no run in its {where})")
            return EXIT_NO_RUN
        wanted = current.run_id
    if current is not None and current.run_id == wanted:
        if current.state is RunState.DRAINED:
            _say(prog, job, f"run {wanted} already drained ({_describe(current)})")
            return EXIT_OK
        if current.state.ended:
            _say(prog, job, f"no running deployment found (last: {_describe(current)})")
            return EXIT_NO_RUN
    return wanted


def drain(
    settings: JobSettings, store: RunView, run_id: str | None, wait: bool, timeout: float, prog: str = PROG
) -> int:
    """Drain the job's run (see the module docstring); prints one line, each starting ``prog``, and
    returns the exit code."""
    job = f"{settings.name}-{settings.id}"
    runs = store.namespace(RUN_NAMESPACE)
    notifications = store.namespace(DRAIN_NAMESPACE)
    current = read_current_run(runs) if store.exists() else None
    target = _target_run(prog, job, settings, current, run_id, store.where)
    if isinstance(target, int):
        return target
    store.prepare()
    mine = [n for n in read_drain_notifications(notifications) if n.run_id == target]
    if mine:
        notification, verb = mine[0], "already requested"
    else:
        notification, verb = write_drain_notification(notifications, target), "requested"
    running = current is not None and current.run_id == target
    where = "" if running else " (not running yet: it drains when it starts)"
    if not wait:
        _say(prog, job, f"drain {verb} for run {target}{where} (notification {notification.uuid})")
        return EXIT_OK
    return _wait(prog, job, store, target, notification.uuid, seen=bool(mine), timeout=timeout)


def _wait(prog: str, job: str, store: RunView, run_id: str, uuid: str, seen: bool, timeout: float) -> int:
    """Wait until the run drained: its record says so, or its notification, once seen, is gone (the
    container, or a standalone run's last processor, records the run as drained and then deletes its
    notifications, both after its final commits; a restarted container may replace the record with
    a new run before this looks)."""
    runs = store.namespace(RUN_NAMESPACE)
    notifications = store.namespace(DRAIN_NAMESPACE)
    started = time.monotonic()
    deadline = started + timeout
    while True:
        current = read_current_run(runs)
        ours = current if current is not None and current.run_id == run_id else None
        pending = any(n.run_id == run_id for n in read_drain_notifications(notifications))
        seen = seen or pending
        if (ours is not None and ours.state is RunState.DRAINED) or (seen and not pending):
            _say(prog, job, f"run {run_id} drained ({time.monotonic() - started:.1f} s after the request)")
            return EXIT_OK
        if ours is not None and ours.state is RunState.STOPPED:
            _say(prog, job, f"run {run_id} stopped without draining ({_describe(ours)}); the notification stays", True)
            return EXIT_FAILED
        if time.monotonic() >= deadline:
            members = store.members()
            running = f"; {members} processor(s) of the run still running" if members is not None else ""
            _say(
                prog,
                job,
                f"timed out after {timeout:g} s: run {run_id} has not drained (is its container running with "
                f"job.drain-monitor.enabled?{running}); notification {uuid} stays",
                True,
            )
            return EXIT_TIMEOUT
        time.sleep(WAIT_POLL_S)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``samzamp drain`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code. Every line
    it writes starts with ``prog``, the name it runs as (its alias passes none: the same name)."""
    args = setup(build_parser(prog), argv)
    if args.timeout <= 0:
        print(f"{prog}: error: --timeout must be > 0, got {args.timeout:g} (see {prog} --help)", file=sys.stderr)
        return EXIT_CONFIG
    try:
        settings = load_job(args)
        store = open_run_view(settings, prog)
        try:
            return drain(settings, store, args.run_id, args.wait, args.timeout, prog)
        finally:
            store.close()
    except Exception as e:
        return report_failure(prog, e)


if __name__ == "__main__":
    sys.exit(main())
