"""The commit's error rule, shared by the inline and the worker host (samzamp.commit.flush_policy)."""

from __future__ import annotations

import pytest

from samzamp.api.errors import SystemFailureError
from samzamp.collect.output_failures import OutputFailures
from samzamp.commit.flush_policy import FlushResult, commit_failure, flush_task_producers, require_markers
from samzamp.metrics.registry import Counter


def _outputs(drop: bool) -> OutputFailures:
    return OutputFailures("T", drop, Counter())


class _Producer:
    def __init__(self, unacked: int = 0, errors: tuple[str, ...] = ()) -> None:
        self.unacked = unacked
        self.errors = list(errors)
        self.flushed_with: float | None = None

    def flush(self, timeout_s: float) -> int:
        self.flushed_with = timeout_s
        return self.unacked

    def take_errors(self) -> list[str]:
        errors, self.errors = self.errors, []
        return errors


def test_flush_keeps_outputs_and_changelogs_apart() -> None:
    out = _Producer(1, ("out[0]: boom",))
    cl = _Producer(2, ("log[3]: Local: Message timed out",))
    result = flush_task_producers([out], [cl], timeout_s=7)
    assert result == FlushResult(1, ("out[0]: boom",), 2, ("log[3]: Local: Message timed out",))
    assert out.flushed_with == cl.flushed_with == 7


@pytest.mark.parametrize("drop", [False, True])
def test_a_changelog_write_that_failed_always_fails_the_commit(drop: bool) -> None:
    failure = commit_failure("T", FlushResult(changelog_errors=("log[3]: timed out",)), _outputs(drop))
    assert failure is not None
    assert "'T'" in failure
    assert "log[3]: timed out" in failure
    assert "task.drop.producer.errors covers outputs only" in failure


@pytest.mark.parametrize("drop", [False, True])
def test_an_unacknowledged_changelog_write_always_fails_the_commit(drop: bool) -> None:
    assert commit_failure("T", FlushResult(unacked_changelog=3), _outputs(drop)) is not None


@pytest.mark.parametrize("drop", [False, True])
def test_unacknowledged_outputs_always_fail_the_commit(drop: bool) -> None:
    failure = commit_failure("T", FlushResult(unacked_outputs=5), _outputs(drop))
    assert failure is not None
    assert "5 outputs were not acknowledged" in failure


def test_failed_outputs_fail_the_commit_unless_dropped(caplog: pytest.LogCaptureFixture) -> None:
    result = FlushResult(output_errors=("out[1]: too large", "out[2]: too large"))
    failure = commit_failure("T", result, _outputs(False))
    assert failure is not None
    assert "2 outputs could not be delivered" in failure
    outputs = _outputs(True)
    assert commit_failure("T", result, outputs) is None
    assert "dropped (task.drop.producer.errors=true)" in caplog.text
    assert outputs.failed.count == 2


def test_nothing_undelivered_goes_on() -> None:
    assert commit_failure("T", FlushResult(), _outputs(False)) is None


def test_a_checkpoint_without_the_markers_of_a_logged_store_is_refused() -> None:
    require_markers("T", frozenset({"counts"}), {"counts": "12"})
    require_markers("T", frozenset(), {})
    with pytest.raises(SystemFailureError, match=r"'T'.*\['counts'\]"):
        require_markers("T", frozenset({"counts", "other"}), {"other": "4"})
