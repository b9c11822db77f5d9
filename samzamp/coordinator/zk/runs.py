"""The run of a standalone job on ZooKeeper: one run id shared by the job's processors (Samza's
RunIdGenerator), its record, and the job's drain notifications beside it.

**Where.** A standalone job's run record (``samzamp-run-v1/current``) and its drain notifications
(``samza-drain-v1``) live in the job's ``ZkMetadataStore`` on ZooKeeper, not in the coordinator
stream, as Samza keeps them for standalone: the run is decided together with the membership of the
run, which only ZooKeeper can hold (ephemeral nodes, a lock); every processor is connected to
ZooKeeper anyway; and ``samzamp-drain`` needs only job.coordinator.zk.connect to reach them.

**Membership of the run** (Samza's ZkClusterMembership): each processor of the run has an ephemeral
sequential node ``<root>/runId/processors/<seq>``, apart from the job coordinator's ``processors``
(a processor joins the run before its coordinator registers it, since the run id must be known
first). Its own ZooKeeper client (its own session) holds it, as Samza's runner has its own client
for this; so the run does not depend on when the job coordinator connects or reconnects.

**The rule**, under the lock ``<root>/runId/lock`` (a kazoo lock: a crashed holder's turn ends
with its session), on ``start``: register, then count the other members:

- ``app.run.id`` set: that id;
- other members: their run, the id in the record (the processor restarted after a crash or a stop
  while the others run keeps the id);
- none, and the last run did not end (its last processor failed or died without ending it): that
  run goes on, as a job of one container's does (Samza generates a new id here; samzamp keeps a
  drain requested for the run acting on its restart);
- none, and the last run ended (stopped or drained), or none ran: a new id.

On ``end``: unregister, then count the members left; only the last one records how the run ended:
stopped or drained (the run is over), or failed (a restart continues it). A processor that dies leaves when its session expires,
without ending the run. A processor whose session expired and that goes on with a new session joins
again (the same run id). Taking turns under the lock is what makes "first" and "last" exact when
processors start or stop at once.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import msgspec
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError
from kazoo.recipe.lock import Lock

from samzamp.api.errors import SystemFailureError
from samzamp.config.standalone import ZkSettings
from samzamp.coordinator.metadata_store import MetadataStore
from samzamp.coordinator.run_id import (
    RUN_NAMESPACE,
    RunAlreadyDrained,
    RunProcessor,
    RunRecord,
    RunState,
    end_run,
    start_run,
)
from samzamp.coordinator.zk.client import connect
from samzamp.coordinator.zk.keys import ZkKeys, ensure_root
from samzamp.coordinator.zk.metadata_store import ZkMetadataStores
from samzamp.coordinator.zk.view import read_model_view

__all__ = ["LOCK_TIMEOUT_S", "RunMember", "ZkRunView", "ZkRuns", "run_lock_path", "run_members", "run_members_dir"]

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 60.0


class RunMember(msgspec.Struct, frozen=True, rename="camel"):
    """What a member node of the run says of its processor."""

    host: str
    pid: int
    processor_id: str | None = None  # processor.id, when set


def run_members_dir(keys: ZkKeys) -> str:
    return f"{keys.root}/runId/processors"


def run_lock_path(keys: ZkKeys) -> str:
    return f"{keys.root}/runId/lock"


def run_members(client: KazooClient, keys: ZkKeys) -> dict[str, RunMember]:
    """Node name -> member, for every live processor of the job's current run."""
    path = run_members_dir(keys)
    try:
        nodes = client.get_children(path)
    except NoNodeError:
        return {}
    out: dict[str, RunMember] = {}
    for node in sorted(nodes):
        try:
            raw, _ = client.get(f"{path}/{node}")
            out[node] = msgspec.json.decode(raw, type=RunMember)
        except NoNodeError:
            continue
        except msgspec.DecodeError:
            out[node] = RunMember("?", 0)  # still a member: it counts
    return out


class ZkRuns:
    """This processor's part of its standalone job's run (a ``samzamp.coordinator.run_id.Runs``)."""

    def __init__(self, client: KazooClient, keys: ZkKeys, processor_id: str | None) -> None:
        """``client``: owned from now on (``close`` stops it)."""
        self._client = client
        self._keys = keys
        self._stores = ZkMetadataStores(client, keys)
        self._me = RunMember(socket.gethostname(), os.getpid(), processor_id)
        self._member: str | None = None  # this processor's member node, while it is one
        self._lost = False
        self._left = False  # ended its part of the run
        self._closed = False
        self.where = f"ZooKeeper {keys.root}"
        client.add_listener(self._on_state)

    @classmethod
    def open(cls, zk: ZkSettings, keys: ZkKeys) -> ZkRuns:
        """Connect to the job's ZooKeeper (a client of this processor's run) and check its root."""
        client = connect(zk.connect, zk.session_timeout_ms, zk.connection_timeout_ms)
        try:
            ensure_root(client, keys)
        except BaseException:
            client.stop()
            client.close()
            raise
        return cls(client, keys, zk.processor_id)

    def namespace(self, namespace: str) -> MetadataStore:
        return self._stores.namespace(namespace)

    def start(self, configured: str | None) -> tuple[RunRecord, str]:
        """Join the run (see the module docstring): the run and how its id was chosen."""
        with self._locked("joining the run"):
            self._register()
            others = len(self._others())
            try:
                return start_run(self.namespace(RUN_NAMESPACE), configured, others)
            except RunAlreadyDrained:
                self._unregister()  # never a member of a run that is over
                raise

    def end(self, record: RunRecord, state: RunState) -> tuple[RunRecord, int]:
        """Leave the run; the last member also records ``state`` (see ``Runs.end``)."""
        with self._locked(f"leaving run {record.run_id}"):
            left, self._left = self._left, True
            self._unregister()
            others = len(run_members(self._client, self._keys))
            if others or left:  # left before (a failure after its end): how it ended is recorded
                return record, others
            return end_run(self.namespace(RUN_NAMESPACE), record, state), 0

    def close(self) -> None:
        """Stop the client: a member node left behind (start-up abandoned) goes with the session."""
        if self._closed:
            return
        self._closed = True
        self._member = None
        try:
            self._client.stop()
            self._client.close()
        except Exception as e:  # closing: nothing left to do about it
            log.debug("closing the run's ZooKeeper client: %s", e)

    # -- membership -----------------------------------------------------------------------------
    def _register(self) -> None:
        path = self._client.create(
            f"{run_members_dir(self._keys)}/",
            msgspec.json.encode(self._me),
            ephemeral=True,
            sequence=True,
            makepath=True,
        )
        self._member = str(path).rsplit("/", 1)[1]

    def _unregister(self) -> None:
        member, self._member = self._member, None
        if member is None:
            return
        try:
            self._client.delete(f"{run_members_dir(self._keys)}/{member}")
        except NoNodeError:
            pass  # its session expired meanwhile: it was gone already

    def _others(self) -> dict[str, RunMember]:
        return {n: m for n, m in run_members(self._client, self._keys).items() if n != self._member}

    @contextmanager
    def _locked(self, what: str) -> Iterator[None]:
        path = run_lock_path(self._keys)
        lock = Lock(self._client, path, f"{self._me.host} {self._me.pid}")
        try:
            lock.acquire(timeout=LOCK_TIMEOUT_S)
        except LockTimeout as e:
            raise SystemFailureError(
                f"{what}: the run's lock {path} on ZooKeeper was not free within {LOCK_TIMEOUT_S:.0f} s; "
                "another processor of the job holds it: check the job's processors, then start again"
            ) from e
        except KazooException as e:
            raise self._failure(what, e) from e
        try:
            yield
        except KazooException as e:
            raise self._failure(what, e) from e
        finally:
            try:
                lock.release()
            except KazooException as e:  # the lock's node goes with the session anyway
                log.warning("releasing the run's lock %s: %s", path, e)

    def _failure(self, what: str, e: KazooException) -> SystemFailureError:
        return SystemFailureError(
            f"{what} on ZooKeeper ({self.where}) failed: {type(e).__name__}{': ' + str(e) if str(e) else ''}; "
            "check that ZooKeeper (job.coordinator.zk.connect) is reachable"
        )

    # -- a new session ----------------------------------------------------------------------------
    def _on_state(self, state: str) -> None:
        """kazoo's connection thread: after an expired session, join the run again (the member node
        went with the old session), off this thread, since it may not block."""
        if state == KazooState.LOST:
            self._lost = self._member is not None
        elif state == KazooState.CONNECTED and self._lost and not self._closed:
            self._lost = False
            self._client.handler.spawn(self._rejoin)

    def _rejoin(self) -> None:
        try:
            with self._locked("joining the run again after a new ZooKeeper session"):
                if self._left or self._closed:
                    return
                self._register()
                others = len(self._others())
            log.info("joined the run again with a new ZooKeeper session (%d other processor(s) in it)", others)
        except Exception as e:
            log.warning("could not join the run again after a new ZooKeeper session: %s", e)


class ZkRunView:
    """A standalone job's run as a tool (``samzamp-drain``) sees it, without taking part in it (a ``RunView``)."""

    def __init__(self, client: KazooClient, keys: ZkKeys) -> None:
        """``client``: owned from now on (``close`` stops it)."""
        self._client = client
        self._keys = keys
        self._stores = ZkMetadataStores(client, keys)
        self.where = f"ZooKeeper {keys.root}"

    @classmethod
    def open(cls, zk: ZkSettings, keys: ZkKeys) -> ZkRunView:
        return cls(connect(zk.connect, zk.session_timeout_ms, zk.connection_timeout_ms), keys)

    def namespace(self, namespace: str) -> MetadataStore:
        return self._stores.namespace(namespace)

    def exists(self) -> bool:
        """Whether a processor of the job ever started (its root exists)."""
        return self._client.exists(self._keys.root) is not None

    def prepare(self) -> None:
        pass  # a value's znode is created with its parents

    def members(self) -> int:
        """How many processors run the job's current run now."""
        return len(run_members(self._client, self._keys))

    def processors(self) -> list[RunProcessor]:
        """The job's registered (live) processors, with their tasks in the job model shown by
        ``samzamp job-model show`` (the agreed version, else the latest): a processor that joined
        since has none yet."""
        view = read_model_view(self._client, self._keys, self.where)
        out = []
        for data in sorted(view.processors.values(), key=lambda d: d.processor_id):
            container = view.model.containers.get(data.processor_id) if view.model is not None else None
            tasks = container.tasks if container is not None else ()
            out.append(RunProcessor(data.processor_id, data.host, data.pid, tuple(tasks)))
        return out

    def close(self) -> None:
        self._client.stop()
        self._client.close()
