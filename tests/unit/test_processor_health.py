"""What /healthz reports, from the processor's own flags: a processor on the in-memory system read
from another thread (as the endpoint's threads read it) while its task's init holds it in
restoring, then running, stopped; the listener's rebalancing flag through a version; and no
endpoint in a TestRunner."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from samzamp import InitableTask, StreamTask
from samzamp.config import load_config, validate
from samzamp.model.job_model import JobModel
from samzamp.processor.health import READY, ProcessorState
from samzamp.processor.listener import ContainerListener
from samzamp.processor.stream_processor import StreamProcessor
from samzamp.systems.inmemory.system import InMemoryStreams
from samzamp.testing import TestRunner

GATE = threading.Event()


class GatedInit(StreamTask, InitableTask):
    """Its init waits for GATE: the processor stays in restoring (tasks starting) meanwhile."""

    def init(self, context: Any) -> None:
        assert GATE.wait(30), "the test never opened the gate"

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        pass


def _until(what: str, pred: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _healthz(port: int) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("endpoint", [False, True], ids=["state", "healthz"])
def test_a_processor_starts_restores_runs_and_stops(endpoint: bool) -> None:
    GATE.clear()
    config = {
        "job.name": "job",
        "job.default.system": "mem",
        "task.class": f"{GatedInit.__module__}:{GatedInit.__qualname__}",
        "task.inputs": ["mem.in"],
        "metrics.log.interval.ms": 0,
        "systems.mem.samza.factory": "inmemory",
        "systems.mem.samza.msg.serde": "msgpack",
        "metrics.prometheus.port": 0 if endpoint else -1,
    }
    streams = InMemoryStreams()
    streams.create("in", 1)
    p = StreamProcessor(validate(load_config(None, config)), inmemory={"mem": streams})
    assert p.state is ProcessorState.STARTING
    loops: list[asyncio.AbstractEventLoop] = []
    errors: list[BaseException] = []

    async def main() -> None:
        loops.append(asyncio.get_running_loop())
        await p.run()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        if endpoint:
            _until("the endpoint", lambda: p.endpoint is not None)
            assert p.endpoint is not None
            port = p.endpoint.port
            _until("restoring", lambda: _healthz(port) == (503, {"state": "restoring"}))
        else:
            _until("restoring", lambda: p.state is ProcessorState.RESTORING)
        GATE.set()
        if endpoint:
            _until("running", lambda: _healthz(port) == (200, {"state": "running"}))
        else:
            _until("running", lambda: p.state is ProcessorState.RUNNING)
        assert p.processor_id == "0"
        loops[0].call_soon_threadsafe(p.stop)
        thread.join(30)
        assert not thread.is_alive()
        assert errors == []
        assert p.state is ProcessorState.STOPPED
        if endpoint:
            with pytest.raises(urllib.error.URLError):
                _healthz(port)  # it stopped with the processor
    finally:
        GATE.set()
        if thread.is_alive() and loops:
            loops[0].call_soon_threadsafe(p.stop)
        thread.join(30)


def test_ready_means_running_or_draining() -> None:
    assert {s for s in ProcessorState if s in READY} == {ProcessorState.RUNNING, ProcessorState.DRAINING}


class _FakeContainer:
    """What the listener uses of a container; ``apply`` checks the flag while it runs."""

    def __init__(self, listener_flag: Callable[[], bool], fail: bool = False) -> None:
        self.takes_models = True
        self.job_model = JobModel(0, {})
        self._flag = listener_flag
        self._fail = fail
        self.seen: list[bool] = []

    async def apply(self, model: JobModel) -> None:
        self.seen.append(self._flag())
        if self._fail:
            raise RuntimeError("apply failed")
        self.job_model = model


def test_the_listener_rebalances_from_a_versions_expiry_until_it_is_applied() -> None:
    holder: list[ContainerListener] = []
    container = _FakeContainer(lambda: holder[0].rebalancing)
    listener = ContainerListener(container, None)  # type: ignore[arg-type]
    holder.append(listener)
    assert listener.rebalancing is False

    async def version() -> None:
        assert await listener.on_job_model_expired(JobModel(1, {})) == []
        assert listener.rebalancing is True  # the barrier: still under way
        assert await listener.on_new_job_model(JobModel(1, {})) == []
        assert listener.rebalancing is False

    asyncio.run(version())
    assert container.seen == [True]

    failing = _FakeContainer(lambda: True, fail=True)
    listener = ContainerListener(failing, None)  # type: ignore[arg-type]

    async def failed() -> None:
        await listener.on_job_model_expired(JobModel(1, {}))
        with pytest.raises(RuntimeError):
            await listener.on_new_job_model(JobModel(1, {}))

    asyncio.run(failed())
    assert listener.rebalancing is False  # the failure stops the processor: stopping says so


class _Counting(StreamTask):
    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        pass


def test_a_test_runner_binds_no_port_of_the_jobs_config() -> None:
    result = TestRunner(_Counting, {"metrics.prometheus.port": 0}).add_input("in", [1, 2, 3]).run()
    assert result.processor.endpoint is None
    assert result.processor.settings.prometheus is None
