"""The high-watermark copy the lag metrics read (``samzamp.consume.high_watermarks``): taken by the
poller, read without calling into a consumer."""

from __future__ import annotations

from samzamp.api.envelope import SystemStreamPartition
from samzamp.consume.high_watermarks import HIGH_WATERMARK_REFRESH_S, HighWatermarks
from samzamp.systems.base import SystemConsumer

A = SystemStreamPartition("s", "in", 0)
B = SystemStreamPartition("s", "in", 1)
ORPHAN = SystemStreamPartition("gone", "in", 0)


class Watermarks:
    """A consumer that only knows high watermarks, and counts the calls."""

    def __init__(self) -> None:
        self.hw = {A: 10, B: 20}
        self.calls = 0

    def high_watermark(self, ssp: SystemStreamPartition) -> int | None:
        self.calls += 1
        return self.hw.get(ssp)


def cache(consumer: Watermarks, now: list[float]) -> HighWatermarks:
    consumers: dict[str, SystemConsumer] = {"s": consumer}  # type: ignore[dict-item]
    return HighWatermarks(consumers, lambda: now[0])


def test_a_copy_is_read_without_calling_the_consumer_and_a_key_bucket_reads_its_partitions() -> None:
    c, now = Watermarks(), [5.0]
    hw = cache(c, now)
    assert hw.get(A) is None  # nothing copied yet
    assert hw.due <= now[0]
    hw.refresh([A, B, ORPHAN])
    assert hw.due == now[0] + HIGH_WATERMARK_REFRESH_S
    c.hw[A] = 99  # not seen until the next refresh
    assert (hw.get(A), hw.get(B), hw.get(A._replace(key_bucket=3)), hw.get(ORPHAN)) == (10, 20, 10, None)
    assert c.calls == 2


def test_expire_makes_the_next_poll_refresh_and_forget_drops_a_partition() -> None:
    c, now = Watermarks(), [5.0]
    hw = cache(c, now)
    hw.refresh([A, B])
    hw.expire()
    assert hw.due <= now[0]
    hw.forget([A])
    assert (hw.get(A), hw.get(B)) == (None, 20)
