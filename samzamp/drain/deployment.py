"""A job's deployment as a tool sees it from outside (``samzamp status``, the commands that must not
write while the job runs): its run, its state, and whether a process of it runs, with the evidence.

What is known, and how:

- **the run record** (``samzamp.coordinator.run_id``) says how the run's last container or processor
  ended: stopped or drained (the run is over), failed (a restart continues it), or running;
- **a standalone job** (job.coordinator.factory = zk): its processors are members of the run on
  ZooKeeper (ephemeral nodes), so "runs" is exact, give or take a session timeout after a processor
  was killed;
- **a job of one container**: only the record tells, and a container killed by SIGKILL (or a lost
  host) leaves it saying running. Nothing the container writes while it runs proves it alive (a
  checkpoint is written only when its offsets moved, so an idle job writes none). So the record's
  host and pid are checked when that host is this one; on another host "running" is what the
  record says, unchecked (``Deployment.checked`` is False), and the evidence says so.

``draining``: the run runs and a drain notification for it waits (``samzamp drain`` wrote it; its
processors act on it within job.drain-monitor.poll.interval.ms).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from samzamp.coordinator.run_id import (
    RUN_NAMESPACE,
    RunProcessor,
    RunRecord,
    RunState,
    RunView,
    process_alive,
    read_current_run,
)
from samzamp.drain.notification import DRAIN_NAMESPACE, read_drain_notifications

__all__ = ["Deployment", "DeploymentState", "read_deployment"]


class DeploymentState(enum.StrEnum):
    NEVER_RAN = "never ran"  # no run record: no container of the job ever started
    RUNNING = "running"
    DRAINING = "draining"  # running, with a drain requested for its run
    DRAINED = "drained"  # the run drained and stopped
    STOPPED = "stopped"  # the run stopped cleanly (signal, shutdown request, end of input)
    FAILED = "failed"  # its last container stopped on a failure; a restart continues the run
    DIED = "died"  # the record says running, but no process of the run is left (killed, or its host lost)

    @property
    def runs(self) -> bool:
        return self in (DeploymentState.RUNNING, DeploymentState.DRAINING)


@dataclass(frozen=True)
class Deployment:
    """What ``read_deployment`` found. ``runs``: a process of the job runs (or may: see ``checked``)."""

    state: DeploymentState
    record: RunRecord | None
    evidence: str  # one sentence: how the state is known
    checked: bool = True  # False: "running" rests on the record alone (its host is another one)
    processors: list[RunProcessor] | None = None  # a standalone job's live processors
    drains: list[str] = field(default_factory=list)  # the drain notifications waiting for the run

    @property
    def runs(self) -> bool:
        return self.state.runs


def read_deployment(view: RunView) -> Deployment:
    """The job's deployment as ``view`` holds it (module docstring); reads only."""
    if not view.exists():
        return Deployment(DeploymentState.NEVER_RAN, None, f"nothing in {view.where}: no container of it ever started")
    record = read_current_run(view.namespace(RUN_NAMESPACE))
    if record is None:
        return Deployment(DeploymentState.NEVER_RAN, None, f"no run record in {view.where}")
    if record.state is RunState.DRAINED:
        return Deployment(DeploymentState.DRAINED, record, f"the run record in {view.where} says drained")
    if record.state is RunState.STOPPED:
        return Deployment(DeploymentState.STOPPED, record, f"the run record in {view.where} says stopped")
    members = view.members()
    processors = view.processors()
    checked = True
    if members is not None:  # standalone: the run's members are exact
        live = members > 0
        if live:
            evidence = f"{members} processor(s) are members of the run in {view.where}"
        else:
            evidence = (
                f"the run record in {view.where} says {record.state.value}, and no processor is a member of the run"
            )
    elif record.state is RunState.FAILED:
        live, evidence = False, f"the run record in {view.where} says its container failed"
    else:
        alive = process_alive(record.host, record.pid)
        live = alive is not False
        checked = alive is not None
        if alive:
            evidence = f"the run record says running, and its container (pid {record.pid}) runs on this host"
        elif alive is False:
            evidence = (
                f"the run record says running, but its container (pid {record.pid}) is gone from this host: it "
                "was killed without recording it (a restart continues the run)"
            )
        else:
            evidence = (
                f"the run record says running (pid {record.pid} on host {record.host}, which cannot be checked "
                "from here: a container killed with SIGKILL leaves such a record)"
            )
    if not live:
        state = DeploymentState.FAILED if record.state is RunState.FAILED else DeploymentState.DIED
        return Deployment(state, record, evidence, checked, processors)
    drains = [n.uuid for n in read_drain_notifications(view.namespace(DRAIN_NAMESPACE)) if n.run_id == record.run_id]
    state = DeploymentState.DRAINING if drains else DeploymentState.RUNNING
    return Deployment(state, record, evidence, checked, processors, drains)
