"""The znode layout of one job (Samza's ZkKeyBuilder), and the check of its protocol version.

::

    /app-<job.name>-<job.id>
    └── <job.name>-<job.id>-2.0-coordinationData         root; data: PROTOCOL_VERSION ("1.0")
        ├── processors/<seq>                               ephemeral sequential: one per live processor
        ├── jobModelGeneration/
        │   ├── jobModelVersion                            the latest published version
        │   ├── activeJobModelVersion                      the last version the barrier agreed
        │   ├── jobModels/<version>                        a job model (a value, see below)
        │   └── jobModelUpgradeBarrier/versionBarriers/
        │       └── barrier_<version>/
        │           ├── barrier_state                      NEW, DONE or TIMED_OUT
        │           └── barrier_participants/<processor id>
        ├── taskLocality/<task name>                       data: the location id of the task's processor
        ├── runId/{lock, processors/<seq>}                 the run's members (coordinator.zk.runs)
        └── metadata/<namespace>/<key>                     ZkMetadataStore values (see below)

Samza's root is ``/app-<app.name>-<app.id>/...``; samzamp has no app.name nor app.id, so it uses
job.name and job.id in both places, which is what Samza does for a job that sets neither app key.

Names that come from the user or the job (job.name, job.id, task names, processor ids, namespaces,
keys) are encoded with ``encode_name``: a node name may not contain "/" nor be "." or "..", and
ZooKeeper refuses control and some non-ASCII characters. The encoding is percent-encoding (RFC 3986)
of "/", "%", everything outside printable ASCII, and the dots of "." and ".."; everything else is
kept, so ``Partition 3_1_2`` and ``SystemStreamPartition [kafka, in, 0]`` read as themselves and
``decode_name`` gives back exactly the original. An empty name has no node name (``ValueError``).

A value (a job model, a metadata store value) lives on its node as ``samzamp.coordinator.zk.values``
writes it: small ones in the node's data, larger ones in segments under a generation child::

    <value node>                  data: header (format, length, CRC32, and the generation, if any)
    └── g-<seq>/<0..n-1>          segments of about 1 MB of one generation
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from samzamp.coordinator.zk.errors import ZkProtocolError

__all__ = ["PROTOCOL_VERSION", "ZkKeys", "decode_name", "encode_name", "ensure_root"]

PROTOCOL_VERSION = "1.0"

# Printable ASCII except the path separator and the escape character itself.
_KEPT = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in "/%")


def encode_name(name: str) -> str:
    """``name`` as one znode name, reversibly (see the module docstring)."""
    if not name:
        raise ValueError("an empty name has no znode name")
    encoded = quote(name, safe=_KEPT, errors="strict")
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    return encoded


def decode_name(node: str) -> str:
    """The name ``encode_name`` encoded as ``node``."""
    return unquote(node, errors="strict")


class ZkKeys:
    """The paths of one job's coordination data (the tree in the module docstring)."""

    def __init__(self, job_name: str, job_id: str) -> None:
        self.job_name = job_name
        self.job_id = job_id
        name, jid = encode_name(job_name), encode_name(job_id)
        self.app_path = f"/app-{name}-{jid}"
        self.root = f"{self.app_path}/{name}-{jid}-2.0-coordinationData"

    @property
    def processors_dir(self) -> str:
        return f"{self.root}/processors"

    @property
    def processor_prefix(self) -> str:
        """The path to create a processor's ephemeral sequential node with (its name is the sequence)."""
        return f"{self.processors_dir}/"

    def processor(self, node_name: str) -> str:
        """The path of a processor's node, by its name as ``get_children`` lists it."""
        return f"{self.processors_dir}/{node_name}"

    @property
    def job_model_generation_dir(self) -> str:
        return f"{self.root}/jobModelGeneration"

    @property
    def job_model_version(self) -> str:
        return f"{self.job_model_generation_dir}/jobModelVersion"

    @property
    def active_job_model_version(self) -> str:
        return f"{self.job_model_generation_dir}/activeJobModelVersion"

    @property
    def job_models_dir(self) -> str:
        return f"{self.job_model_generation_dir}/jobModels"

    def job_model(self, version: str | int) -> str:
        return f"{self.job_models_dir}/{encode_name(str(version))}"

    @property
    def barriers_dir(self) -> str:
        return f"{self.job_model_generation_dir}/jobModelUpgradeBarrier/versionBarriers"

    def barrier(self, version: str | int) -> str:
        return f"{self.barriers_dir}/barrier_{encode_name(str(version))}"

    def barrier_state(self, version: str | int) -> str:
        return f"{self.barrier(version)}/barrier_state"

    def barrier_participants(self, version: str | int) -> str:
        return f"{self.barrier(version)}/barrier_participants"

    def barrier_participant(self, version: str | int, processor_id: str) -> str:
        return f"{self.barrier_participants(version)}/{encode_name(processor_id)}"

    @property
    def task_locality_dir(self) -> str:
        return f"{self.root}/taskLocality"

    def task_locality(self, task_name: str) -> str:
        return f"{self.task_locality_dir}/{encode_name(task_name)}"

    @property
    def metadata_root(self) -> str:
        return f"{self.root}/metadata"

    def metadata_dir(self, namespace: str) -> str:
        """The node under which ``ZkMetadataStore`` keeps the keys of ``namespace``."""
        return f"{self.metadata_root}/{encode_name(namespace)}"


def ensure_root(client: KazooClient, keys: ZkKeys) -> None:
    """Create the job's root with ``PROTOCOL_VERSION`` as its data, or check the one there: a root
    without data (made as the parent of another node) gets the version; another version raises
    ``ZkProtocolError`` naming the path, both versions and what to do. Safe to race."""
    expected = PROTOCOL_VERSION.encode()
    while True:
        try:
            client.create(keys.root, expected, makepath=True)
            return
        except NodeExistsError:
            pass
        try:
            data, stat = client.get(keys.root)
        except NoNodeError:
            continue  # deleted in between: create it again
        if data == expected:
            return
        if data:
            raise ZkProtocolError(keys.root, data.decode("utf-8", "replace"), PROTOCOL_VERSION)
        try:
            client.set(keys.root, expected, version=stat.version)
            return
        except (BadVersionError, NoNodeError):
            continue  # another process wrote it first: check what it wrote
