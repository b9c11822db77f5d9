"""The job coordinator of a standalone job (Samza's ZkJobCoordinator): ZooKeeper decides which
processor runs which tasks, and every processor follows the versions it publishes. It is the
``JobCoordinator`` that job.coordinator.factory = zk gives a processor (``samzamp.coordinator.job_coordinator``).

Each processor registers (``registry``); the one with the lowest sequence leads. Every processor
watches the list of processors, so when the leader goes, the next in line knows at once that it now
leads (each watches the whole list rather than only its predecessor, as Samza does: the herd a
change wakes is a handful of processors).

The leader, ``job.debounce.time.ms`` after the last change of the list: reads the processors and
the task locality, computes the job's tasks (``ModelCalculator``: from the inputs and the task
history, as for a one-processor job), groups them onto the processors (``group_by_container_ids``:
minimal movement, host affinity), and publishes it as the next version with its barrier
(``job_models.publish``), each container naming the registration it was computed for. When every
processor of the model joined the barrier it writes DONE; if ``job.coordinator.zk.consensus.timeout.ms``
passes first, TIMED_OUT, and it tries again after the debounce time.

Every processor, on a new version: stops the tasks it gives up (``on_job_model_expired``; in-flight
work finished, final commit, stores closed), then joins the barrier; on DONE it starts its new tasks
(``on_new_job_model``) and writes the locality of its own tasks (only its own, as SAMZA-2632 says). A
version superseded before its barrier completed is dropped for the newer one, and a version computed
for an earlier registration of the same processor id is not this processor's to run. The pause
of a rebalance, from a version's arrival to its tasks started, is the gauge
``last-rebalance-pause-ms``.

Everything runs on the processor's event loop, one event at a time; kazoo's callbacks (its own
threads) only queue events, and blocking ZooKeeper calls run in a thread (an event that meets a
dropped connection is handled again). The session: a heartbeat keeps a lease (``lease_valid``), the
time within which the session is known to be alive, and the processor processes only inside it
(``JobCoordinatorListener.fence``, ``on_lease``).

ZooKeeper away (a dropped connection, a server stopped, frozen or cut off): the processor goes on
until its lease ends, then processes nothing and waits, holding its tasks, for as long as it takes.
Only ZooKeeper can say whether the session outlived the silence, so nothing is decided before it
answers. When it does: a session alive means no other processor was given these tasks (they move
only once a session ended), so the processor renews its lease at once and goes on with them: a
restarted server keeps its sessions, so a ZooKeeper restart moves no task. An expired session fails
the processor with ``ZkSessionExpired``, a ``MembershipExpired`` (``on_coordinator_failure``): it
abandons its tasks without a commit, since another processor may own them by then, and joins again.
Stopping instead after a silence as long as the session, as Samza's processor does, would only
trade the lease's pause for a restart, and gain no safety: the lease already stops the processing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import msgspec
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from samzamp.api.errors import SystemFailureError
from samzamp.config.standalone import ZkSettings
from samzamp.coordinator.container_grouper import group_by_container_ids
from samzamp.coordinator.job_coordinator import JobCoordinatorListener, ModelCalculator
from samzamp.coordinator.zk import job_models
from samzamp.coordinator.zk.barrier import BarrierState, complete_if_joined, join, time_out
from samzamp.coordinator.zk.client import connect
from samzamp.coordinator.zk.errors import ZkSessionExpired
from samzamp.coordinator.zk.keys import ZkKeys, decode_name, ensure_root
from samzamp.coordinator.zk.registry import leader_of, read_processors, register
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.grouper import task_order
from samzamp.model.job_model import ContainerModel, JobModel

__all__ = ["METRICS_GROUP", "ZkJobCoordinator"]

log = logging.getLogger(__name__)

T = TypeVar("T")

METRICS_GROUP = "ZkJobCoordinatorMetrics"
RETRY_S = 0.2  # before an event that met a dropped connection is handled again
LEASE_SHARE = 2 / 3  # of the session timeout after a heartbeat's send that processing may go on


class ZkJobCoordinator:
    """One processor's membership of a standalone job. ``start`` registers it; ``stop`` leaves."""

    models_while_running = True

    def __init__(
        self,
        settings: ZkSettings,
        keys: ZkKeys,
        processor_id: str,
        location_id: str,
        calculator: ModelCalculator,
        metrics: MetricsRegistry,
    ) -> None:
        self._zk = settings
        self._keys = keys
        self.processor_id = processor_id
        self.location_id = location_id
        self._calculator = calculator
        self._listener: JobCoordinatorListener | None = None  # from start on
        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self.node: str | None = None  # this processor's node name (its sequence)
        self.leader = False
        self._debounce: asyncio.TimerHandle | None = None
        self._barrier_timer: asyncio.TimerHandle | None = None
        self._suspended = False  # disconnected from ZooKeeper, its session's fate unknown
        self._lapse: asyncio.TimerHandle | None = None  # when the lease of a suspended processor ends
        self._published = 0  # the last version this processor published as leader
        self._published_model: JobModel | None = None  # its model, as processors read it back
        self._seen = 0  # the newest version this processor acted on
        self._joined = 0  # the newest version whose barrier this processor joined
        self._current: JobModel | None = None  # the newest version's model, while its barrier is open
        self._stopping = False
        self.m_version = metrics.gauge(METRICS_GROUP, "job-model-version")
        self.m_rebalances = metrics.counter(METRICS_GROUP, "rebalances")
        self.m_leader = metrics.gauge(METRICS_GROUP, "is-leader")
        self._m_pause_ms = metrics.gauge(METRICS_GROUP, "last-rebalance-pause-ms")
        self._paused_since: float | None = None  # this rebalance's first release, until its apply
        self._lost: list[str] = []  # released since the last apply, over superseded versions too
        # Until when this processor may process: a heartbeat that found its node alive in its own
        # session at ``sent`` proves the session cannot expire before ``sent`` + the session
        # timeout; LEASE_SHARE of that leaves room for clocks and a server that granted less.
        self._lease_until = 0.0
        self._heartbeat: asyncio.Task[None] | None = None
        self._renew_now = asyncio.Event()  # connected again: renew the lease without waiting a period
        self._located: set[str] = set()  # tasks whose locality this processor wrote since it got them
        # The coordinator's blocking calls (ZooKeeper, the model's calculation) run on threads of
        # its own: in asyncio's default executor they would queue behind the container's calls, of
        # which a commit round of thousands of tasks makes thousands, and a rebalance and the
        # lease's heartbeat would wait for them. Its events run one at a time, beside the heartbeat.
        self._threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="samzamp-zk-coordinator")

    # -- lifetime -------------------------------------------------------------------------------
    async def start(self, listener: JobCoordinatorListener) -> None:
        """Connect, register and watch; the first version arrives through ``listener``, which from
        now on processes only while the session is known alive."""
        self._listener = listener
        listener.fence(self.lease_valid)
        self._loop = asyncio.get_running_loop()
        zk, keys = self._zk, self._keys
        client: KazooClient = await self._blocking(connect, zk.connect, zk.session_timeout_ms, zk.connection_timeout_ms)
        self._client = client
        try:
            await self._blocking(ensure_root, client, keys)
            self.node = await self._blocking(
                register, client, keys, self.processor_id, self.location_id, zk.session_timeout_ms
            )
        except BaseException:
            await self._blocking(_close, client)
            raise
        log.info(
            "processor %s at location %s registered as %s (job %s-%s)",
            self.processor_id,
            self.location_id,
            keys.processor(self.node),
            keys.job_name,
            keys.job_id,
        )
        self._set_lease(time.monotonic() + LEASE_SHARE * zk.session_timeout_ms / 1000)
        client.add_listener(self._on_session)  # kazoo calls it from its connection thread
        self._worker = self._loop.create_task(self._serve(), name="samzamp-zk-coordinator")
        self._heartbeat = self._loop.create_task(self._renew_lease(client, keys.processor(self.node)))
        ChildrenWatch(client, keys.processors_dir, self._watch_processors)
        DataWatch(client, keys.job_model_version, self._watch_version)

    async def stop(self) -> None:
        """Leave the job: the node goes, so the leader rebalances the tasks this processor stopped."""
        self._stopping = True
        for timer in (self._debounce, self._barrier_timer, self._lapse):
            if timer is not None:
                timer.cancel()
        for task in (self._worker, self._heartbeat):
            if task is None:
                continue
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        if self._client is not None:
            await self._blocking(_close, self._client)
            self._client = None
        self._threads.shutdown(wait=False)

    async def _blocking(self, fn: Callable[..., T], /, *args: Any) -> T:
        """``fn(*args)`` on the coordinator's threads (as ``asyncio.to_thread``, context included)."""
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    # -- kazoo's threads: queue events ----------------------------------------------------------
    def _post(self, kind: str, arg: Any = None) -> None:
        if self._loop is not None and not self._stopping:
            self._loop.call_soon_threadsafe(self._events.put_nowait, (kind, arg))

    def _watch_processors(self, children: list[str]) -> bool:
        self._post("processors", list(children))
        return not self._stopping

    def _watch_version(self, data: bytes | None, _stat: Any) -> bool:
        if data is not None:
            try:
                self._post("version", int(data.decode()))
            except (UnicodeDecodeError, ValueError):
                self._post("fail", SystemFailureError(f"{self._keys.job_model_version} holds {data[:40]!r}"))
        return not self._stopping

    def _on_session(self, state: str) -> None:
        self._post("session", state)

    # -- the loop: one event at a time ----------------------------------------------------------
    async def _serve(self) -> None:
        handlers: dict[str, Callable[[Any], Awaitable[None]]] = {
            "processors": self._on_processors,
            "regenerate": self._regenerate,
            "version": self._on_version,
            "barrier": self._on_barrier,
            "participants": self._on_participants,
            "barrier-timeout": self._on_barrier_timeout,
            "session": self._on_session_state,
            "fail": self._fail,
        }
        while True:
            kind, arg = await self._events.get()
            try:
                await handlers[kind](arg)
            except asyncio.CancelledError:
                raise
            except SessionExpiredError:  # met before kazoo reported LOST
                self._set_lease(0.0)
                await self._fail(self._expired())
                return
            except (ConnectionLoss, OperationTimeoutError) as e:
                # The connection dropped: if the session survives, the event is handled again once
                # kazoo reconnects (each handler may run twice); if not, LOST makes it rejoin.
                log.info("ZooKeeper %s while handling %s: trying again", type(e).__name__, kind)
                assert self._loop is not None
                self._loop.call_later(RETRY_S, self._post, kind, arg)
            except Exception as e:
                await self._fail(e)
                return

    async def _fail(self, error: BaseException) -> None:
        if not self._stopping:
            self._stopping = True
            self._listening().on_coordinator_failure(error)

    async def _on_processors(self, children: list[str]) -> None:
        leading = leader_of(children) == self.node
        if leading and not self.leader:
            log.info("processor %s leads the job now (%d processors)", self.processor_id, len(children))
        self.leader = leading
        self.m_leader.set(int(leading))
        if leading:
            self._schedule_regenerate()
        # A version follows: a listener may read ahead what the start of its tasks will read (an
        # optional part of a listener: ``ContainerListener.on_membership_change``).
        ahead = getattr(self._listening(), "on_membership_change", None)
        if ahead is not None:
            ahead()

    def _schedule_regenerate(self) -> None:
        """Regenerate job.debounce.time.ms from now, replacing a regeneration already scheduled."""
        assert self._loop is not None
        if self._debounce is not None:
            self._debounce.cancel()
        self._debounce = self._loop.call_later(self._zk.debounce_ms / 1000, self._post, "regenerate")

    # -- the leader -----------------------------------------------------------------------------
    async def _regenerate(self, _: Any) -> None:
        if not self.leader:
            return
        client, keys = self._client_or_fail(), self._keys
        processors = await self._blocking(read_processors, client, keys)
        ids = [d.processor_id for d in processors.values()]
        if len(set(ids)) != len(ids):
            log.warning("processor ids registered twice (%s): waiting for the duplicate to leave", sorted(ids))
            return
        latest = await self._blocking(job_models.read_version, client, keys)
        previous = await self._previous_model(latest) if latest else None
        # Only host affinity places tasks by their locality: without it, the records are not read.
        locality = await self._blocking(_read_locality, client, keys) if self._zk.host_affinity else {}
        model = await self._calculate({d.processor_id: d.location_id for d in processors.values()}, previous, locality)
        # Each container names the registration it was computed for: a processor restarted under
        # the same processor.id must not take the tasks of a version computed for its predecessor.
        node_of = {d.processor_id: node for node, d in processors.items()}
        model = msgspec.structs.replace(
            model,
            containers={
                pid: msgspec.structs.replace(c, node=node_of.get(pid, "")) for pid, c in model.containers.items()
            },
        )
        try:
            version = await self._blocking(job_models.publish, client, keys, model)
        except BadVersionError:
            log.info("another leader published meanwhile: computing again")
            self._schedule_regenerate()
            return
        self._published = version
        self._published_model = msgspec.structs.replace(model, generation=version)
        log.info(
            "published job model version %d: %s",
            version,
            {pid: len(c.tasks) for pid, c in sorted(model.containers.items())},
        )
        assert self._loop is not None
        if self._barrier_timer is not None:
            self._barrier_timer.cancel()
        self._barrier_timer = self._loop.call_later(
            self._zk.consensus_timeout_ms / 1000, self._post, "barrier-timeout", version
        )
        ChildrenWatch(client, keys.barrier_participants(version), functools.partial(self._participants, version))
        await self._blocking(job_models.cleanup, client, keys, version)

    async def _calculate(
        self, processors: dict[str, str], previous: JobModel | None, locality: dict[str, str]
    ) -> JobModel:
        """The job's tasks now, grouped onto ``processors`` (id -> location id), given the latest
        published model and the task locality (task -> location id)."""
        return await self._blocking(self._calculate_now, processors, previous, locality)

    def _calculate_now(
        self, processors: dict[str, str], previous: JobModel | None, locality: dict[str, str]
    ) -> JobModel:
        """``_calculate``'s work, blocking (the grouping of thousands of tasks too takes a while)."""
        model = self._calculator.calculate()
        groups = group_by_container_ids(
            model.tasks,
            processors,
            previous_owner=previous.owners() if previous is not None else {},
            task_locality=locality,
            host_affinity=self._zk.host_affinity,
        )
        containers = {pid: ContainerModel(pid, processors[pid], tuple(tasks)) for pid, tasks in groups.items()}
        return JobModel(0, model.tasks, containers)

    async def _previous_model(self, version: int) -> JobModel:
        """The model of ``version``, which the next one moves as few tasks from as it can: the one
        this processor published, else read from ZooKeeper (a model of thousands of tasks is a
        megabyte of JSON). Only the grouping reads it, so a leader that was raced by another for
        this version, and kept its own, would only move more tasks than it must: what the
        processors run is always read from ZooKeeper."""
        if version == self._published and self._published_model is not None:
            return self._published_model
        return await self._blocking(job_models.read_job_model, self._client_or_fail(), self._keys, version)

    def _participants(self, version: int, _children: list[str]) -> bool:
        self._post("participants", version)
        return not self._stopping and version == self._published

    async def _on_participants(self, version: int) -> None:
        if version != self._published or not self.leader:
            return
        if await self._blocking(complete_if_joined, self._client_or_fail(), self._keys, version):
            log.info("barrier of version %d: every processor joined", version)
            if self._barrier_timer is not None:
                self._barrier_timer.cancel()

    async def _on_barrier_timeout(self, version: int) -> None:
        if not self.leader:
            return
        if await self._blocking(time_out, self._client_or_fail(), self._keys, version):
            log.warning(
                "barrier of version %d timed out (job.coordinator.zk.consensus.timeout.ms = %d): computing again",
                version,
                self._zk.consensus_timeout_ms,
            )
            self._schedule_regenerate()

    # -- every processor ------------------------------------------------------------------------
    async def _on_version(self, version: int) -> None:
        if version < self._seen or version == self._joined:
            return
        client, keys = self._client_or_fail(), self._keys
        model = await self._blocking(job_models.read_job_model, client, keys, version)
        container = model.containers.get(self.processor_id)
        if container is None and self._seen == 0:
            # Computed before this processor registered (the leader's next one will name it): taken
            # as this processor's first model it would say "no task", and a drain found at start
            # would end the processor before the rebalance its registration asks for.
            log.info(
                "job model version %d was computed before processor %s registered: waiting for the next",
                version,
                self.processor_id,
            )
            return
        if container is not None and container.node != self.node:
            log.info(
                "job model version %d was computed for an earlier registration of processor %s (node %s): "
                "waiting for the next",
                version,
                self.processor_id,
                container.node,
            )
            return
        self._seen = version
        self._current = model
        mine = model.of_processor(self.processor_id, version)
        if self._paused_since is None:  # a version superseding one not applied yet: the same pause
            self._paused_since = time.monotonic()
        released = await self._listening().on_job_model_expired(mine)
        if released is None:
            log.info("job model version %d: not joining its barrier, this processor is stopping", version)
            return
        self._lost += released
        self._located.difference_update(released)  # its next owner records it, wherever that is
        if not await self._blocking(join, client, keys, version, self.processor_id):
            return  # the barrier is gone: a newer version replaced it
        self._joined = version
        # A partial, not a lambda with a default: kazoo passes the watcher a third argument when it takes one.
        DataWatch(client, keys.barrier_state(version), functools.partial(self._barrier_changed, version))

    def _barrier_changed(self, version: int, data: bytes | None, _stat: Any) -> bool:
        if data is None:
            return False
        state = data.decode(errors="replace")
        if state != BarrierState.NEW:
            self._post("barrier", (version, state))
            return False
        return not self._stopping

    async def _on_barrier(self, arg: tuple[int, str]) -> None:
        version, state = arg
        if version != self._seen or self._current is None:
            return  # superseded
        if state == BarrierState.TIMED_OUT:
            log.info("barrier of version %d timed out: waiting for the next version", version)
            return
        model, self._current = self._current, None
        mine = model.of_processor(self.processor_id, version)
        client, keys = self._client_or_fail(), self._keys
        gained = await self._listening().on_new_job_model(mine)
        if gained is not None:  # a stopping processor took nothing: no locality
            self._applied(version, mine, gained)
            await self._record_locality(client, list(mine.tasks))
        if self.leader:
            await self._blocking(job_models.set_active_version, client, keys, version)
        self.m_version.set(version)
        self.m_rebalances.count += 1

    async def _record_locality(self, client: KazooClient, tasks: list[str]) -> None:
        """Write this processor's location as the locality of ``tasks`` (its own, after a version
        was applied), except where it wrote it already since it last got the task: a task that
        stayed here has no newer record by anyone else, so a rebalance writes what moved, not
        every task again."""
        mine = set(tasks)
        self._located &= mine  # a task that left may be recorded elsewhere by the time it returns
        news = [t for t in tasks if t not in self._located]
        if news:
            await self._blocking(_write_locality, client, self._keys, news, self.location_id)
            self._located.update(news)

    def _applied(self, version: int, mine: JobModel, gained: list[str]) -> None:
        """The end of a rebalance for this processor: how long it paused, what it gained and lost."""
        since, self._paused_since = self._paused_since, None
        paused_ms = (time.monotonic() - since) * 1000 if since is not None else 0.0
        self._m_pause_ms.set(round(paused_ms))
        lost, self._lost = self._lost, []
        log.info(
            "job model version %d applied by processor %s: %d tasks; gained %s; lost %s; paused %.0f ms",
            version,
            self.processor_id,
            len(mine.tasks),
            sorted(gained, key=task_order) or "none",
            lost or "none",
            paused_ms,
        )

    def _listening(self) -> JobCoordinatorListener:
        if self._listener is None:
            raise RuntimeError(f"processor {self.processor_id}: the ZooKeeper coordinator was not started")
        return self._listener

    # -- the session ----------------------------------------------------------------------------
    def lease_valid(self) -> bool:
        """Whether this processor may process now: its session is known to be alive. Checked by the
        run loop before each slice, so a processor continued after a pause longer than its lease
        (SIGSTOP, a frozen VM) processes nothing until it knows whether its session survived."""
        return time.monotonic() < self._lease_until

    async def _renew_lease(self, client: KazooClient, node_path: str) -> None:
        period = self._zk.session_timeout_ms / 1000 / 4
        while True:
            sent = time.monotonic()
            try:
                # While disconnected the call waits for the connection: its answer, from ``sent``
                # on, renews nothing that has lapsed meanwhile.
                stat = await self._blocking(client.exists, node_path)
            except Exception as e:  # disconnected: the session listener decides what that means
                log.debug("lease of processor %s not renewed: %s", self.processor_id, e)
            else:
                if stat is not None and stat.ephemeralOwner == client.client_id[0]:
                    self._set_lease(sent + LEASE_SHARE * self._zk.session_timeout_ms / 1000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._renew_now.wait(), period)
            self._renew_now.clear()

    def _set_lease(self, until: float) -> None:
        self._lease_until = until
        if self._listener is not None:
            self._listener.on_lease(until)

    async def _on_session_state(self, state: str) -> None:
        assert self._loop is not None
        if state == KazooState.LOST:
            self._set_lease(0.0)
            await self._fail(self._expired())
        elif state == KazooState.SUSPENDED and not self._suspended:
            self._suspended = True
            left = self._lease_until - time.monotonic()
            if left > 0:
                log.warning(
                    "processor %s: disconnected from ZooKeeper: it processes %.1f s more (its lease), then waits "
                    "for ZooKeeper",
                    self.processor_id,
                    left,
                )
            else:  # kazoo noticed only after the lease ended (a server that stopped answering)
                log.warning("processor %s: disconnected from ZooKeeper", self.processor_id)
            self._lapse = self._loop.call_later(max(0.0, left), self._lease_lapsed)
        elif state == KazooState.CONNECTED and self._suspended:
            self._suspended = False
            if self._lapse is not None:
                self._lapse.cancel()
                self._lapse = None
            log.info(
                "processor %s: connected to ZooKeeper again, its session alive: it goes on with its tasks",
                self.processor_id,
            )
            self._renew_now.set()

    def _lease_lapsed(self) -> None:
        """The lease of a processor still disconnected ran out: say what it does now."""
        self._lapse = None
        if self._suspended and not self.lease_valid():
            log.warning(
                "processor %s: processing paused: ZooKeeper did not answer within its lease; it holds its tasks "
                "and waits for ZooKeeper (its session alive: it goes on with them; expired: it abandons them "
                "without a commit and joins the job again)",
                self.processor_id,
            )

    def _expired(self) -> ZkSessionExpired:
        return ZkSessionExpired(
            f"processor {self.processor_id}: its ZooKeeper session expired (it was silent longer than "
            f"job.coordinator.zk.session.timeout.ms = {self._zk.session_timeout_ms}); its tasks may run "
            "elsewhere now: it abandons them without a commit and joins the job again"
        )

    def _client_or_fail(self) -> KazooClient:
        if self._client is None:
            raise SystemFailureError(f"processor {self.processor_id}: not connected to ZooKeeper")
        return self._client


def _read_locality(client: KazooClient, keys: ZkKeys) -> dict[str, str]:
    """Every task's recorded location id. The reads are sent at once and answered in one stream: a
    job of thousands of tasks would otherwise wait a round trip per task."""
    try:
        nodes = client.get_children(keys.task_locality_dir)
    except NoNodeError:
        return {}
    pending = [(node, client.get_async(f"{keys.task_locality_dir}/{node}")) for node in nodes]
    out: dict[str, str] = {}
    for node, answer in pending:
        try:
            raw, _ = answer.get()
        except NoNodeError:
            continue
        out[decode_name(node)] = raw.decode(errors="replace")
    return out


def _write_locality(client: KazooClient, keys: ZkKeys, tasks: list[str], location_id: str) -> None:
    """Record ``location_id`` as the location of each of ``tasks``. The writes are sent at once (a
    round trip in all, not one per task); a task's first record is created where a write finds none."""
    value = location_id.encode()
    pending = [(task, client.set_async(keys.task_locality(task), value)) for task in tasks]
    missing = []
    for task, answer in pending:
        try:
            answer.get()
        except NoNodeError:
            missing.append(task)
    created = [(task, client.create_async(keys.task_locality(task), value, makepath=True)) for task in missing]
    for task, answer in created:
        try:
            answer.get()
        except NodeExistsError:  # another processor created it meanwhile: ours is the newer record
            client.set(keys.task_locality(task), value)


def _close(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()
