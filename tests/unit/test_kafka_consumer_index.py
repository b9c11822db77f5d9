"""The Kafka consumer's SSP lookups, kept as SSPs come and go, equal the ones rebuilt from scratch."""

from __future__ import annotations

import random

from samzamp.api.envelope import SystemStreamPartition
from samzamp.systems.base import OLDEST
from samzamp.systems.kafka.client_config import KafkaClientSettings
from samzamp.systems.kafka.consumer import KafkaSystemConsumer


def _rebuilt(c: KafkaSystemConsumer) -> tuple[dict[tuple[str, int], SystemStreamPartition], object]:
    ssps = list(c._starts)
    single = len({s.stream for s in ssps}) == 1
    return {(s.stream, s.partition): s for s in ssps}, ({s.partition: s for s in ssps} if single else None)


def test_lookups_kept_incrementally_equal_rebuilt_ones() -> None:
    # Never started: no broker is needed to register and unregister.
    c = KafkaSystemConsumer(KafkaClientSettings("kafka", "127.0.0.1:1", "test-index"), "test-index")
    try:
        rng = random.Random(7)
        pool = [SystemStreamPartition("kafka", t, p) for t in ("a", "b", "c") for p in range(20)]
        registered: set[SystemStreamPartition] = set()
        for _ in range(600):
            # Mostly one topic, so the single-topic lookup appears, goes and comes back.
            free = [s for s in pool if s not in registered and (s.stream == "a" or rng.random() < 0.15)]
            if free and (not registered or rng.random() < 0.55):
                s = rng.choice(free)
                c.register(s, OLDEST)
                registered.add(s)
            else:
                gone = rng.sample(sorted(registered), rng.randint(1, min(3, len(registered))))
                c.unregister(gone)
                registered.difference_update(gone)
            ssp_of, by_partition = _rebuilt(c)
            assert c._ssp_of == ssp_of
            assert c._by_partition == by_partition
            assert c._topics() == {s.stream for s in registered}
    finally:
        c.stop()
