"""The public test kit: run a task on in-memory inputs, without Kafka (Samza's TestRunner)."""

from samzamp.testing.runner import Record, TestResult, TestRunner

__all__ = ["Record", "TestResult", "TestRunner"]
