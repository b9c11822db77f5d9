"""bench/peers.py's Bytewax job: the flow source it writes for its Bytewax processes is valid Python, and
where a Bytewax interpreter is named (BENCH_BYTEWAX_PYTHON, e.g. /tmp/bytewax-venv/bin/python), it builds
a Dataflow there with Bytewax's Kafka source and sink, and its step forwards a message as the job
should, with either JSON codec. Building connects to nothing, so no broker is needed; without that
interpreter (or msgspec in it) those tests are skipped: Bytewax is no dependency of samzamp."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def peers(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # The bench's modules import each other by name, as they do when run from bench/.
    monkeypatch.syspath_prepend(str(BENCH))
    import peers as module

    return module


def test_flow_source_compiles(peers: ModuleType) -> None:
    compile(peers.FLOW_SOURCE, "peers_bytewax_flow.py", "exec")


@pytest.mark.parametrize("codec", ["json", "msgspec"])
def test_flow_builds_under_bytewax(peers: ModuleType, tmp_path: Path, codec: str) -> None:
    python = os.environ.get("BENCH_BYTEWAX_PYTHON")
    if not python:
        pytest.skip("no Bytewax interpreter (set BENCH_BYTEWAX_PYTHON to one with bytewax==0.21.1)")
    (tmp_path / "peers_bytewax_flow.py").write_text(peers.FLOW_SOURCE)
    conf = {"bootstrap": "127.0.0.1:1", "input": "in", "output": "out", "consumer": {}, "producer": {}, "codec": codec}
    env = dict(os.environ, PYTHONPATH=str(tmp_path), BENCH_PEERS_BYTEWAX=json.dumps(conf))
    code = (
        "import json, peers_bytewax_flow as f\n"
        "from bytewax.connectors.kafka import KafkaSourceMessage\n"
        'out = f.forward(KafkaSourceMessage(b\'7\', b\'{"id": 7, "pad": "x"}\'))\n'
        "print(json.dumps([type(f.flow).__name__, out.key.decode(), json.loads(out.value)]))\n"
    )
    r = subprocess.run([python, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    if codec == "msgspec" and "No module named 'msgspec'" in r.stderr:
        pytest.skip(f"{python} has no msgspec")
    assert r.returncode == 0, r.stderr
    # One output per input, the same key, the value decoded and encoded again.
    assert json.loads(r.stdout) == ["Dataflow", "7", {"id": 7, "pad": "x"}]
