"""Incremental fetch sessions (KIP-227) over a topic whose partitions sit on two workers:
the front keeps the session; each owner hears what the client last saw of its partitions
and answers only those with news (workers/payloads.py `drop_unchanged`, workers/handlers/
fetch/fanout.py). kafka-python fetches with incremental sessions; librdkafka does not.
Data is checked per partition, in order, against what was sent."""
from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration import broker as h

pytestmark = pytest.mark.skipif(h.external_bootstrap() is not None,
                                reason="needs our own multi-worker broker process")

TIMEOUT_MS = 30_000
PARTITIONS = 8


@pytest.fixture
def two_workers(tmp_path):
    b = h.Broker(tmp_path / "b", {"num.workers": 2}, name="fetch-sessions")
    b.start()
    yield b
    if b.is_alive():
        b.stop(timeout=30)
    else:
        b.kill()


def _drain(consumer, got: dict, want: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(v) for v in got.values()) < want:
        assert time.monotonic() < deadline, f"got {sum(len(v) for v in got.values())} of {want}"
        for tp, records in consumer.poll(timeout_ms=500).items():
            got.setdefault(tp.partition, []).extend(r.value for r in records)


def test_incremental_session_across_workers_gets_every_record_in_order(two_workers):
    b = two_workers
    topic = h.create_topic(b.bootstrap, f"fs-{uuid.uuid4().hex[:10]}", PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=b.bootstrap, request_timeout_ms=TIMEOUT_MS,
                             max_block_ms=TIMEOUT_MS, acks="all")
    consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, request_timeout_ms=TIMEOUT_MS,
                             enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", fetch_max_wait_ms=200)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    sent: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    got: dict[int, list] = {}
    try:
        n = 0
        # rounds with news on every partition, then on one partition at a time (the
        # others caught up: their owners leave them out of their answers)
        rounds = [list(range(PARTITIONS))] + [[p] for p in range(PARTITIONS)] * 2
        for parts in rounds:
            for p in parts:
                for _ in range(3):
                    value = f"{p}-{n}".encode()
                    n += 1
                    producer.send(topic, value, partition=p)
                    sent[p].append(value)
            producer.flush(30)
            _drain(consumer, got, n)
        assert {p: got.get(p, []) for p in range(PARTITIONS)} == sent
    finally:
        consumer.close()
        producer.close()
