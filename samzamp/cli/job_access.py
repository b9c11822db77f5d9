"""What ``samzamp status``, ``checkpoints`` and ``reset-offsets`` share: the job reached from outside,
through its real brokers (and ZooKeeper for a standalone job), never starting the embedded broker.

``JobAccess`` opens lazily what each command needs: the job's run (``samzamp.drain.deployment``),
its job model as a container would compute it now (``samzamp.offline.job.resolve_model``: the
inputs' partitions and the task history in the coordinator stream), its checkpoints
(``TopicCheckpointManager``) and its systems' admins (end offsets, offsets for times).
"""

from __future__ import annotations

import argparse
import sys
from functools import cached_property

from samzamp.api.envelope import SystemStreamPartition
from samzamp.cli.drain import open_run_view
from samzamp.commit.checkpoint import Checkpoint
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.config import load_config, parse_overrides, validate
from samzamp.config.settings import JobSettings
from samzamp.coordinator.run_id import RunView
from samzamp.drain.deployment import Deployment, read_deployment
from samzamp.model.job_model import JobModel
from samzamp.offline.job import kafka_clients, read_last_checkpoints, resolve_model
from samzamp.systems.kafka import KafkaSystemAdmin, KafkaSystemProducer

__all__ = ["JobAccess", "refuse_while_running"]


class JobAccess:
    """One job, reached from a tool; ``close`` releases every client it opened."""

    def __init__(self, settings: JobSettings, prog: str) -> None:
        """``prog``: the command, as config errors name it."""
        self.settings = settings
        self._prog = prog
        self.job = f"{settings.name}-{settings.id}"
        self._view: RunView | None = None
        self._admins: dict[str, KafkaSystemAdmin] = {}
        self._producer: KafkaSystemProducer | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, prog: str) -> JobAccess:
        """The job of ``args.config`` and ``args.overrides`` (``add_job_config``), validated."""
        return cls(validate(load_config(args.config, parse_overrides(args.overrides))), prog)

    def deployment(self) -> Deployment:
        """The job's run now (read again at each call)."""
        if self._view is None:
            self._view = open_run_view(self.settings, self._prog)
        return read_deployment(self._view)

    @cached_property
    def model(self) -> JobModel:
        """The tasks a container of the job would run now, and what each reads."""
        model, _known, _implied = resolve_model(self.settings)
        return model

    def last_checkpoints(self) -> dict[str, Checkpoint]:
        """The newest checkpoint of every task in the checkpoint topic (none when it does not exist)."""
        return read_last_checkpoints(self.settings)

    def admin(self, system: str) -> KafkaSystemAdmin:
        """An admin client of ``system`` (a Kafka system with bootstrap.servers)."""
        if system not in self._admins:
            self._admins[system] = KafkaSystemAdmin(kafka_clients(self.settings, system, "read its offsets"))
        return self._admins[system]

    def end_offsets(self, ssps: list[SystemStreamPartition]) -> dict[SystemStreamPartition, int]:
        """The high watermark (next offset to be written) of each partition, exact."""
        out: dict[SystemStreamPartition, int] = {}
        for system in sorted({s.system for s in ssps}):
            out.update(self.admin(system).end_offsets([s for s in ssps if s.system == system]))
        return out

    def checkpoint_writer(self) -> TopicCheckpointManager:
        """The job's checkpoint topic (created when missing), ready to write checkpoints outside any run."""
        s = self.settings
        clients = kafka_clients(s, s.checkpoint_system, "write the job's checkpoints")
        if self._producer is None:
            self._producer = KafkaSystemProducer(clients, "checkpoint-producer")
        manager = TopicCheckpointManager(
            self.admin(s.checkpoint_system),
            self._producer,
            s.checkpoint_topic,
            s.grouper,
            s.checkpoint_replication_factor,
            s.checkpoint_segment_bytes,
            s.checkpoint_validation,
        )
        manager.create_topic()
        return manager

    def close(self) -> None:
        if self._producer is not None:
            self._producer.stop()
        for admin in self._admins.values():
            admin.stop()
        if self._view is not None:
            self._view.close()


def refuse_while_running(prog: str, access: JobAccess, what: str) -> bool:
    """True (after one line on stderr saying why and what to do) when a process of the job runs, or
    its record says one does on a host that cannot be checked from here."""
    d = access.deployment()
    if not d.runs:
        return False
    print(
        f"{prog}: refused: job {access.job} is {d.state.value} ({d.evidence}); {what} only while no processor of "
        "it runs: stop it first (samzamp drain, or SIGTERM), then run this again",
        file=sys.stderr,
        flush=True,
    )
    return True
