"""Topics and data survive a controlled stop (SIGTERM) and a crash (SIGKILL of the whole
process group) when produced with acks=all and `log.flush.interval.messages=1`.

Each test runs its own broker (fresh_broker) and restarts it on the same port and data
directory. Skipped when MPBROKER_TEST_BOOTSTRAP points at an external broker.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import ConfigResource, OffsetSpec, ResourceType

from tests.integration import broker as h

FLUSH_EVERY_MESSAGE = {"log.flush.interval.messages": 1}
T = 30


def produce(bootstrap, topic, values, partitions=1, **conf):
    p, dt = h.producer(bootstrap, acks="all", **conf), h.DeliveryTracker()
    for i, v in enumerate(values):
        p.produce(topic, key=b"%d" % i, value=v, partition=i % partitions, on_delivery=dt)
    h.flush(p)
    assert not dt.errors, dt.errors[:3]
    return dt


def read_all(bootstrap, topic, partitions, n, timeout=30):
    c = h.consumer(bootstrap)
    try:
        h.assign_from_beginning(c, topic, partitions)
        msgs = h.consume(c, n, timeout=timeout) if n else []
        msgs += h.consume(c, 1, timeout=1.5)  # anything beyond n is a duplicate or a ghost
    finally:
        c.close()
    return msgs


def by_partition(msgs):
    out = {}
    for m in msgs:
        out.setdefault(m.partition(), []).append((m.offset(), m.value()))
    return out


def setup_topics(b):
    plain = h.create_topic(b.bootstrap, "restart-plain", 3, {"retention.ms": "86400000"})
    gz = h.create_topic(b.bootstrap, "restart-gzip", 1)
    values = [b"value %d " % i * 5 for i in range(600)]
    produce(b.bootstrap, plain, values, partitions=3)
    produce(b.bootstrap, gz, values[:200], **{"compression.type": "gzip"})
    return plain, gz, values


def check_topics(b, plain, gz, values):
    md = h.admin(b.bootstrap).list_topics(timeout=T)
    assert sorted(md.topics[plain].partitions) == [0, 1, 2]
    assert sorted(md.topics[gz].partitions) == [0]
    a = h.admin(b.bootstrap)
    res = ConfigResource(ResourceType.TOPIC, plain)
    assert a.describe_configs([res], request_timeout=T)[res].result(T)["retention.ms"].value == "86400000"
    got = by_partition(read_all(b.bootstrap, plain, 3, len(values), timeout=20))
    for p in range(3):
        expected = [v for i, v in enumerate(values) if i % 3 == p]
        assert got[p] == list(enumerate(expected)), f"partition {p} differs after restart"
    assert [v for _, v in by_partition(read_all(b.bootstrap, gz, 1, 200, timeout=20))[0]] == values[:200]
    # appends continue at the old log end
    dt = produce(b.bootstrap, gz, [b"after restart"])
    assert dt.delivered == [(0, 200)]


def test_sigterm_restart_keeps_topics_and_data(fresh_broker):
    b = fresh_broker(FLUSH_EVERY_MESSAGE)
    plain, gz, values = setup_topics(b)
    rc = b.stop()
    assert rc == 0, f"SIGTERM shutdown exited with {rc}"
    b.start()
    check_topics(b, plain, gz, values)


def test_kill9_restart_keeps_acked_data(fresh_broker):
    b = fresh_broker(FLUSH_EVERY_MESSAGE)
    plain, gz, values = setup_topics(b)
    b.kill()
    b.start()
    check_topics(b, plain, gz, values)
    # and once more, right after the append
    produce(b.bootstrap, plain, [b"x"], partitions=1)
    b.restart(hard=True)
    msgs = read_all(b.bootstrap, plain, 3, len(values) + 1)
    assert len(msgs) == len(values) + 1


def test_deletions_survive_restart(fresh_broker):
    b = fresh_broker(FLUSH_EVERY_MESSAGE)
    keep = h.create_topic(b.bootstrap, "keep-me", 1)
    gone = h.create_topic(b.bootstrap, "delete-me", 1)
    produce(b.bootstrap, keep, [b"%d" % i for i in range(20)])
    a = h.admin(b.bootstrap)
    tp = TopicPartition(keep, 0, 8)
    assert a.delete_records([tp], request_timeout=T)[tp].result(T).low_watermark == 8
    a.delete_topics([gone], operation_timeout=T, request_timeout=T)[gone].result(T)
    h.wait_for_topic(b.bootstrap, gone, present=False)
    b.restart()
    a = h.admin(b.bootstrap)
    md = a.list_topics(timeout=T)
    assert keep in md.topics and (gone not in md.topics or md.topics[gone].error is not None)
    tp = TopicPartition(keep, 0)
    assert a.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=T)[tp].result(T).offset == 8
    assert [m.offset() for m in read_all(b.bootstrap, keep, 1, 12)] == list(range(8, 20))


@pytest.mark.slow
def test_kill9_during_produce_loses_no_acked_record(fresh_broker):
    """A producer keeps writing with acks=all; the broker is killed mid-stream. Every
    record the producer saw acknowledged is there after the restart, offsets are dense."""
    b = fresh_broker(FLUSH_EVERY_MESSAGE)
    topic = h.create_topic(b.bootstrap, "crash-during-produce", 1)
    acked: list[tuple[int, bytes]] = []
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            acked.append((msg.offset(), msg.value()))

    def run():
        p = h.producer(b.bootstrap, acks="all", **{"linger.ms": 1, "message.timeout.ms": 5000,
                                                   "retries": 0})
        i = 0
        while not stop.is_set() and i < 200_000:
            try:
                p.produce(topic, value=b"rec-%d" % i, partition=0, on_delivery=on_delivery)
                i += 1
            except BufferError:
                p.poll(0.01)
            p.poll(0)
        p.flush(10)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 2000 and time.monotonic() < deadline:
        time.sleep(0.05)
    b.kill()
    stop.set()
    t.join(30)
    assert len(acked) >= 1, "nothing was acknowledged before the kill"
    b.start()
    msgs = read_all(b.bootstrap, topic, 1, len(acked), timeout=30)
    stored = {m.offset(): m.value() for m in msgs}
    assert [m.offset() for m in msgs] == list(range(len(msgs))), "offsets are dense after recovery"
    missing = [(o, v) for o, v in acked if stored.get(o) != v]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
