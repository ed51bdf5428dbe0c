"""A full disk loses nothing acknowledged, and the broker serves again by itself.

Real broker process on a small loop-mounted ext4 file system or tmpfs, real
confluent-kafka producers (acks=all idempotent, and acks=1), a ledger of unique
values: records acknowledged before, while and after the disk is full are all read
back once, at the offset they were acknowledged with.  Room is made again by deleting
a topic through the Kafka API (ext4) or by removing a filler file (tmpfs).
"""
from __future__ import annotations

import time

import pytest

from tests.faults.conftest import fill
from tests.integration import broker as harness

pytestmark = pytest.mark.slow

VALUE_PAD = b"." * 1000


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise TimeoutError(f"not {what} within {timeout}s")


def _produce(producers, ledger, topic, n, partitions=2):
    for i in range(n):
        for p in producers:
            p.produce(topic, ledger.next_value() + VALUE_PAD, partition=i % partitions,
                      on_delivery=_strip(ledger))
        if i % 50 == 0:
            for p in producers:
                p.poll(0)


def _strip(ledger):
    def cb(err, msg):
        class M:        # the ledger keys on the unique part of the value
            value = staticmethod(lambda: msg.value()[:-len(VALUE_PAD)])
            partition = msg.partition
            offset = msg.offset
        ledger.on_delivery(err, M)
    return cb


def _log(b) -> str:
    return b.log_path.read_text(errors="replace")


def _read_all(bootstrap, topic, partitions=2):
    from confluent_kafka import TopicPartition
    c = harness.consumer(bootstrap)
    try:
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
        harness.assign_from_beginning(c, topic, partitions)
        out, pos = [], [0] * partitions
        deadline = time.monotonic() + 60
        while any(pos[p] < ends[p] for p in range(partitions)) and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=1.0):
                if m.error() is None:
                    out.append((m.partition(), m.offset(), m.value()[:-len(VALUE_PAD)]))
                    pos[m.partition()] = m.offset() + 1
        assert pos == ends, f"read up to {pos}, the log ends at {ends}"
        return out
    finally:
        c.close()


@pytest.mark.parametrize("fs", ["ext4", "tmpfs"])
def test_disk_full_loses_nothing_and_recovers(fresh_broker, mounts, ledger, tmp_path, fs):
    data = tmp_path / "broker0" / "data"
    (mounts.ext4 if fs == "ext4" else mounts.tmpfs)(data, 48)
    b = fresh_broker({"log.segment.bytes": 4 * 1024 * 1024})
    topic = harness.create_topic(b.bootstrap, "full", 2)
    spare = harness.create_topic(b.bootstrap, "spare", 1)
    sp = harness.producer(b.bootstrap, acks="1", **{"linger.ms": 50})
    for _ in range(8000):               # 8 MB that deleting the topic frees later
        sp.produce(spare, VALUE_PAD)
        sp.poll(0)
    harness.flush(sp, 60)
    p_all = harness.producer(b.bootstrap, acks="all", **{"enable.idempotence": True,
                                                           "message.timeout.ms": 90000})
    p_one = harness.producer(b.bootstrap, acks="1", **{"message.timeout.ms": 90000})
    producers = (p_all, p_one)
    _produce(producers, ledger, topic, 200)
    for p in producers:
        harness.flush(p, 60)
    assert len(ledger.acked) == 400 and not ledger.failed

    filler = fill(data)
    # enough to go past the space the segments reserved ahead: appends must fail now
    _produce(producers, ledger, topic, 1500)

    def refused():
        for p in producers:
            p.poll(0.1)
        return "no room on the disk, appends answer KAFKA_STORAGE_ERROR" in _log(b)
    _wait(refused, 60, "refused for want of space")
    assert b.is_alive()

    if fs == "ext4":                         # room again: the retries go through
        a = harness.admin(b.bootstrap)       # (DeleteTopics works on a full disk)
        a.delete_topics([spare], operation_timeout=30)[spare].result(30)
    else:
        filler.unlink()
    for p in producers:
        harness.flush(p, 90)
    _wait(lambda: "appends succeed again" in _log(b), 30, "serving again")
    _produce(producers, ledger, topic, 100)
    for p in producers:
        harness.flush(p, 60)
    counts = ledger.check(_read_all(b.bootstrap, topic))
    assert counts["acked"] == 400 + 3000 + 200 and counts["failed"] == 0, counts
    assert _log(b).count("(logged once)") <= 2 * 2     # per partition (and a retry race)
    assert b.stop() == 0
