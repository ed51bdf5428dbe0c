"""kafka-python against the real broker process.

The default KafkaProducer (idempotent, acks=all), a forced retry of a produce whose
response was lost (through a proxy that swallows the first Produce response and closes
the connection: the unmodified client resends the same batch with the same producer id
and sequence, and the broker must not store it twice), KafkaConsumer with assign() and
seeks, KafkaAdminClient topics, configs (incremental and classic), partitions and
cluster (DescribeCluster v2), and every codec kafka-python supports.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import (InvalidPartitionsError, TopicAlreadyExistsError,
                          UnknownTopicOrPartitionError)

from tests.integration import mixed_records
from tests.integration.broker import DropResponseProxy, free_port, wait_for_topic

TIMEOUT_MS = 30_000


def kp_producer(bootstrap, **kw):
    return KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS, max_block_ms=TIMEOUT_MS,
                         **kw)


def kp_consumer(bootstrap, **kw):
    kw.setdefault("consumer_timeout_ms", 5000)
    return KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS, enable_auto_commit=False,
                         group_id=None, auto_offset_reset="earliest", **kw)


def kp_admin(bootstrap):
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_MS)


def read_all(consumer, n, timeout=30.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=500, max_records=n - len(out)).values():
            out.extend(recs)
    return out


def test_default_producer_is_idempotent_and_round_trips(broker, make_topic):
    topic = make_topic(partitions=2)
    p = kp_producer(broker.bootstrap, linger_ms=5)
    assert p.config["enable_idempotence"] is True and p.config["acks"] == -1
    n = 2000
    futures = [p.send(topic, key=b"k%d" % (i % 7), value=b"v%d" % i, headers=[("i", str(i).encode())])
               for i in range(n)]
    p.flush(timeout=30)
    metas = [f.get(timeout=30) for f in futures]
    p.close(timeout=10)
    assert len({(m.partition, m.offset) for m in metas}) == n

    c = kp_consumer(broker.bootstrap)
    c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    c.seek_to_beginning()
    recs = read_all(c, n)
    recs += read_all(c, 1, timeout=1.5)  # one more than sent: catches duplicates
    c.close()
    assert len(recs) == n
    for r in recs:
        i = int(r.value[1:])
        assert r.key == b"k%d" % (i % 7)
        assert r.headers == [("i", str(i).encode())]
    by_part = {}
    for r in recs:
        by_part.setdefault(r.partition, []).append((r.offset, int(r.value[1:])))
    for rows in by_part.values():
        assert [o for o, _ in rows] == list(range(len(rows)))
        assert [i for _, i in rows] == sorted(i for _, i in rows)


@pytest.mark.slow
def test_produce_consume_10k_mixed_records(broker, make_topic):
    partitions = 3
    topic = make_topic(partitions=partitions)
    base_ts = int(time.time() * 1000) - 3_600_000
    expected = mixed_records.mixed(10_000, base_ts, partitions)
    p = kp_producer(broker.bootstrap, linger_ms=5, max_request_size=2_000_000, batch_size=1_000_000)
    futures = [p.send(topic, key=r.key, value=r.value, headers=r.headers, timestamp_ms=r.timestamp,
                      partition=r.partition) for r in expected]
    futures.append(p.send(topic, key=mixed_records.BIG_KEY, value=mixed_records.big_value(), partition=0))
    p.flush(timeout=60)
    for f in futures:
        f.get(timeout=30)
    p.close(timeout=10)

    c = kp_consumer(broker.bootstrap, fetch_max_bytes=52_428_800, max_partition_fetch_bytes=2_000_000)
    c.assign([TopicPartition(topic, i) for i in range(partitions)])
    c.seek_to_beginning()
    recs = read_all(c, len(expected) + 1, timeout=90)
    recs += read_all(c, 1, timeout=1.5)  # one more than sent: catches duplicates
    c.close()
    assert all(r.timestamp_type == 0 for r in recs)      # CreateTime
    mixed_records.check([mixed_records.Received(r.partition, r.offset, r.key, r.value, list(r.headers),
                                                r.timestamp) for r in recs], expected, base_ts)


def test_forced_retry_is_not_duplicated(fresh_broker, topic_name):
    """The first Produce response is lost (connection closed after the broker appended):
    kafka-python resends the batch with the same sequence; it must be stored once."""
    broker_port = free_port()
    proxy = DropResponseProxy(broker_port)
    try:
        b = fresh_broker({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}, port=broker_port)
        bootstrap = f"127.0.0.1:{proxy.port}"
        a = kp_admin(bootstrap)
        a.create_topics([NewTopic(topic_name, 1, 1)])
        a.close()
        wait_for_topic(b.bootstrap, topic_name, 1)
        p = kp_producer(bootstrap, linger_ms=50, retry_backoff_ms=50)
        futures = [p.send(topic_name, value=b"r%d" % i, partition=0) for i in range(100)]
        p.flush(timeout=30)
        metas = [f.get(timeout=30) for f in futures]
        p.close(timeout=10)
        assert proxy.dropped == 1, "the proxy did not drop a Produce response"
        assert proxy.forwarded.count(0) >= 2, "the client did not retry"
        assert [m.offset for m in metas] == list(range(100))

        c = kp_consumer(b.bootstrap)
        c.assign([TopicPartition(topic_name, 0)])
        c.seek_to_beginning()
        recs = read_all(c, 100)
        recs += read_all(c, 1, timeout=1.5)
        c.close()
        assert [r.value for r in recs] == [b"r%d" % i for i in range(100)]
    finally:
        proxy.close()


def test_consumer_assign_and_seek(broker, make_topic):
    topic = make_topic()
    p = kp_producer(broker.bootstrap)
    for i in range(50):
        p.send(topic, value=b"%d" % i, partition=0)
    p.flush(timeout=30)
    p.close(timeout=10)
    tp = TopicPartition(topic, 0)
    c = kp_consumer(broker.bootstrap)
    c.assign([tp])
    c.seek_to_beginning(tp)
    assert c.position(tp, timeout_ms=TIMEOUT_MS) == 0
    assert [int(r.value) for r in read_all(c, 50)] == list(range(50))
    c.seek(tp, 42)
    assert [int(r.value) for r in read_all(c, 8)] == list(range(42, 50))
    c.seek_to_end(tp)
    assert c.position(tp, timeout_ms=TIMEOUT_MS) == 50
    assert c.beginning_offsets([tp], timeout_ms=TIMEOUT_MS) == {tp: 0}
    assert c.end_offsets([tp], timeout_ms=TIMEOUT_MS) == {tp: 50}
    c.close()


def test_admin_create_describe_delete(broker):
    name = f"kp-admin-{uuid.uuid4().hex[:8]}"
    a = kp_admin(broker.bootstrap)
    try:
        a.create_topics([NewTopic(name, 3, 1, topic_configs={"retention.ms": "3600000"})])
        wait_for_topic(broker.bootstrap, name, 3)
        assert name in a.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            a.create_topics([NewTopic(name, 3, 1)])

        cfg = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all")
        entries = cfg["topic"][name]
        assert entries["retention.ms"]["value"] == "3600000"
        assert "cleanup.policy" in entries

        def topic_configs():
            return a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)],
                                      config_filter="all")["topic"][name]

        # IncrementalAlterConfigs (the client's default): SET, and APPEND to a list key
        # that has no override yet starts from its default ("delete")
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs={
            "max.message.bytes": "2000000", "cleanup.policy": ("APPEND", "compact")})])
        entries = topic_configs()
        assert entries["max.message.bytes"]["value"] == "2000000"
        assert entries["cleanup.policy"]["value"] == "delete,compact"
        assert entries["retention.ms"]["value"] == "3600000"
        # the classic AlterConfigs (incremental=False): the client resends the other
        # overrides, since AlterConfigs replaces them all
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name,
                                        configs={"retention.ms": "600000"})], incremental=False)
        entries = topic_configs()
        assert entries["retention.ms"]["value"] == "600000"
        assert entries["max.message.bytes"]["value"] == "2000000"

        a.create_partitions({name: NewPartitions(5)})
        wait_for_topic(broker.bootstrap, name, 5)
        with pytest.raises(InvalidPartitionsError):
            a.create_partitions({name: NewPartitions(2)})

        # DescribeCluster (v2 with kafka-python 3: include_fenced_brokers, is_fenced)
        cluster = a.describe_cluster()
        assert cluster["cluster_id"] and cluster["controller_id"] == cluster["brokers"][0]["broker_id"]
        assert [(b["port"], b["is_fenced"]) for b in cluster["brokers"]] == \
            [(int(broker.bootstrap.rsplit(":", 1)[1]), False)]

        a.delete_topics([name])
        wait_for_topic(broker.bootstrap, name, present=False)
        with pytest.raises(UnknownTopicOrPartitionError):
            a.delete_topics([name])
    finally:
        a.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_codecs(broker, make_topic, codec):
    topic = make_topic()
    p = kp_producer(broker.bootstrap, compression_type=codec, linger_ms=20)
    n = 1000
    for i in range(n):
        p.send(topic, key=b"%d" % i, value=(b"kafka-python %d " % i) * 10, partition=0)
    p.flush(timeout=30)
    p.close(timeout=10)
    c = kp_consumer(broker.bootstrap)
    c.assign([TopicPartition(topic, 0)])
    c.seek_to_beginning()
    recs = read_all(c, n)
    c.close()
    assert [(r.offset, r.key, r.value) for r in recs] == \
           [(i, b"%d" % i, (b"kafka-python %d " % i) * 10) for i in range(n)]
