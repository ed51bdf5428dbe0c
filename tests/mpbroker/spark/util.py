"""Kafka helpers for the Spark tests (plain confluent-kafka, independent of the data source)."""
from __future__ import annotations

import time

from tests.integration import broker as harness


def produce(bootstrap: str, topic: str, records: list[dict]) -> list[tuple[int, int]]:
    """Produce dicts (key, value, partition, headers, timestamp) and wait for every ack;
    -> [(partition, offset)] in produce order."""
    p = harness.producer(bootstrap, **{"enable.idempotence": True})
    acks: dict[int, tuple[int, int]] = {}
    errors = []

    for i, r in enumerate(records):
        def on_delivery(err, msg, i=i):
            if err is not None:
                errors.append(err)
            else:
                acks[i] = (msg.partition(), msg.offset())
        kw = {k: r[k] for k in ("key", "value", "partition", "headers", "timestamp") if r.get(k) is not None}
        p.produce(topic, on_delivery=on_delivery, **kw)
    harness.flush(p)
    assert not errors, errors
    return [acks[i] for i in range(len(records))]


def read_all(bootstrap: str, topic: str, partitions: int, expect: int | None = None,
             timeout: float = 30.0, isolation: str = "read_uncommitted") -> list:
    """Every message of the topic, read with a plain confluent-kafka consumer
    (`isolation`: its isolation.level; read_committed skips aborted and open transactions)."""
    from confluent_kafka import TopicPartition

    c = harness.consumer(bootstrap, **{"isolation.level": isolation})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)}
    want = sum(ends.values()) if expect is None else expect
    harness.assign_from_beginning(c, topic, partitions)
    out = harness.consume(c, want, timeout)
    # Nothing beyond what is expected may be there either.
    extra = harness.consume(c, 1, 1.0) if expect is not None else []
    c.close()
    return out + extra


def wait_until(cond, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not met after {timeout}s")
        time.sleep(0.1)


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    """DeleteRecords: the log of topic-partition starts at `before` afterwards."""
    from confluent_kafka import TopicPartition

    a = harness.admin(bootstrap)  # kept referenced until the futures are done
    for f in a.delete_records([TopicPartition(topic, partition, before)]).values():
        f.result(30)
