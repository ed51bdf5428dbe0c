"""confluent-kafka (librdkafka 2.x) against the real broker process.

Admin API (topics, partitions, configs, records, cluster, offsets by time), a 10k-record
produce/consume with keys, null keys, empty values, headers, timestamps and a value near
message.max.bytes, every codec, acks 0/1/all, the idempotent producer, long-poll wake-up
latency, and fetches below the log start offset after DeleteRecords.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import (OFFSET_BEGINNING, OFFSET_END, TIMESTAMP_CREATE_TIME, KafkaError, KafkaException,
                             TopicCollection, TopicPartition)
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic, OffsetSpec, ResourceType)

from loadtest.bench.reqstats import ReqStats
from tests.integration import mixed_records
from tests.integration.broker import (DeliveryTracker, admin, assign_from_beginning, consume, consumer, flush,
                                      producer, wait_for_topic, wait_until)

T = 30  # seconds: timeout for every admin call


# ---------------------------------------------------------------- metadata and admin

def test_metadata_lists_broker_and_topic(broker, make_topic):
    topic = make_topic(partitions=3)
    md = admin(broker.bootstrap).list_topics(timeout=T)
    assert len(md.brokers) == 1
    (b,) = md.brokers.values()
    assert (b.host, b.port) == (broker.host, int(broker.bootstrap.rsplit(":", 1)[1]))
    assert md.controller_id == b.id
    t = md.topics[topic]
    assert t.error is None
    assert sorted(t.partitions) == [0, 1, 2]
    for p in t.partitions.values():
        assert p.leader == b.id and p.replicas == [b.id] and p.isrs == [b.id]


def test_metadata_unknown_topic_without_autocreate(broker, topic_name):
    md = admin(broker.bootstrap, **{"allow.auto.create.topics": False}).list_topics(topic=topic_name, timeout=T)
    t = md.topics.get(topic_name)
    assert t is None or t.error is not None


def test_admin_create_describe_delete_topics(broker, topic_name):
    a = admin(broker.bootstrap)
    futs = a.create_topics([NewTopic(topic_name, 2, 1, config={"retention.ms": "3600000"})],
                           operation_timeout=T, request_timeout=T)
    futs[topic_name].result(T)
    wait_for_topic(broker.bootstrap, topic_name, 2)

    # creating it again: TOPIC_ALREADY_EXISTS
    futs = a.create_topics([NewTopic(topic_name, 2, 1)], request_timeout=T)
    with pytest.raises(KafkaException) as ei:
        futs[topic_name].result(T)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    desc = a.describe_topics(TopicCollection([topic_name]), request_timeout=T)[topic_name].result(T)
    assert desc.name == topic_name
    assert [p.id for p in desc.partitions] == [0, 1]

    a.delete_topics([topic_name], operation_timeout=T, request_timeout=T)[topic_name].result(T)
    wait_for_topic(broker.bootstrap, topic_name, present=False)
    futs = a.delete_topics([topic_name], request_timeout=T)
    with pytest.raises(KafkaException) as ei:
        futs[topic_name].result(T)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_create_topic_invalid(broker):
    a = admin(broker.bootstrap)
    bad = "bad/topic name"
    with pytest.raises(KafkaException) as ei:
        a.create_topics([NewTopic(bad, 1, 1)], request_timeout=T)[bad].result(T)
    assert ei.value.args[0].code() == KafkaError.TOPIC_EXCEPTION


def test_admin_create_partitions(broker, make_topic):
    topic = make_topic(partitions=1)
    a = admin(broker.bootstrap)
    a.create_partitions([NewPartitions(topic, 3)], operation_timeout=T, request_timeout=T)[topic].result(T)
    wait_for_topic(broker.bootstrap, topic, 3)
    # produce to the new partitions
    p, dt = producer(broker.bootstrap), DeliveryTracker()
    for part in range(3):
        p.produce(topic, value=b"v%d" % part, partition=part, on_delivery=dt)
    flush(p)
    assert not dt.errors and sorted(dt.delivered) == [(0, 0), (1, 0), (2, 0)]
    # shrinking is refused
    with pytest.raises(KafkaException) as ei:
        a.create_partitions([NewPartitions(topic, 2)], request_timeout=T)[topic].result(T)
    assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def _topic_configs(a, topic):
    res = ConfigResource(ResourceType.TOPIC, topic)
    return a.describe_configs([res], request_timeout=T)[res].result(T)


def test_admin_describe_and_incremental_alter_configs(broker, make_topic):
    topic = make_topic(config={"retention.ms": "7200000"})
    a = admin(broker.bootstrap)
    cfg = _topic_configs(a, topic)
    assert cfg["retention.ms"].value == "7200000"
    assert "cleanup.policy" in cfg and "segment.bytes" in cfg

    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
    ])
    a.incremental_alter_configs([res], request_timeout=T)[res].result(T)
    cfg = _topic_configs(a, topic)
    assert cfg["retention.ms"].value == "600000"
    assert cfg["max.message.bytes"].value == "2000000"

    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "", incremental_operation=AlterConfigOpType.DELETE)])
    a.incremental_alter_configs([res], request_timeout=T)[res].result(T)
    assert _topic_configs(a, topic)["retention.ms"].value != "600000"


def test_admin_describe_broker_configs(broker):
    a = admin(broker.bootstrap)
    node = a.list_topics(timeout=T).controller_id
    res = ConfigResource(ResourceType.BROKER, str(node))
    cfg = a.describe_configs([res], request_timeout=T)[res].result(T)
    assert cfg["broker.id"].value == str(node) and cfg["broker.id"].is_read_only
    # Kafka's defaults, reported as such
    for key, value in (("message.max.bytes", "1048588"), ("log.retention.hours", "168"),
                       ("log.cleanup.policy", "delete"), ("auto.create.topics.enable", "true")):
        assert (cfg[key].value, cfg[key].source) == (value, ConfigSource.DEFAULT_CONFIG.value), key
    if not broker.external:
        # from the harness's server.properties (tests/integration/broker.py)
        assert (cfg["num.partitions"].value, cfg["num.partitions"].source) == \
            ("1", ConfigSource.STATIC_BROKER_CONFIG.value)
        assert cfg["log.dirs"].value == str(broker.data_dir)


def test_admin_describe_cluster(broker):
    a = admin(broker.bootstrap)
    desc = a.describe_cluster(request_timeout=T).result(T)
    assert desc.cluster_id
    assert len(desc.nodes) == 1
    assert desc.controller is not None and desc.controller.id == desc.nodes[0].id
    assert desc.nodes[0].host == broker.host


def _produce_n(bootstrap, topic, n, partition=0, **conf):
    p, dt = producer(bootstrap, **conf), DeliveryTracker()
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"value-%06d" % i, partition=partition, on_delivery=dt)
    flush(p)
    assert not dt.errors, dt.errors[:3]
    return dt


def test_admin_delete_records_and_list_offsets(broker, make_topic):
    topic = make_topic()
    _produce_n(broker.bootstrap, topic, 20)
    a = admin(broker.bootstrap)
    tp = TopicPartition(topic, 0)

    def offsets(spec):
        return a.list_offsets({tp: spec}, request_timeout=T)[tp].result(T).offset

    assert (offsets(OffsetSpec.earliest()), offsets(OffsetSpec.latest())) == (0, 20)
    res = a.delete_records([TopicPartition(topic, 0, 12)], request_timeout=T, operation_timeout=T)
    deleted = res[TopicPartition(topic, 0, 12)].result(T)
    assert deleted.low_watermark == 12  # the new low watermark
    assert (offsets(OffsetSpec.earliest()), offsets(OffsetSpec.latest())) == (12, 20)
    # beyond the high watermark: OFFSET_OUT_OF_RANGE
    res = a.delete_records([TopicPartition(topic, 0, 99)], request_timeout=T)
    with pytest.raises(KafkaException) as ei:
        res[TopicPartition(topic, 0, 99)].result(T)
    assert ei.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_list_offsets_by_timestamp(broker, make_topic):
    topic = make_topic()
    base = int(time.time() * 1000) - 100_000
    p, dt = producer(broker.bootstrap), DeliveryTracker()
    for i in range(10):  # timestamps base, base+1000, ...
        p.produce(topic, value=b"v%d" % i, partition=0, timestamp=base + 1000 * i, on_delivery=dt)
    flush(p)
    assert not dt.errors
    a = admin(broker.bootstrap)
    tp = TopicPartition(topic, 0)

    def at(ts):
        return a.list_offsets({tp: OffsetSpec.for_timestamp(ts)}, request_timeout=T)[tp].result(T)

    assert at(base - 5).offset == 0
    assert at(base + 3000).offset == 3
    r = at(base + 3500)
    assert r.offset == 4 and r.timestamp == base + 4000
    assert at(base + 10_000).offset == -1  # after every record: no offset
    mx = a.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=T)[tp].result(T)
    assert (mx.offset, mx.timestamp) == (9, base + 9000)


# ---------------------------------------------------------------- produce and consume

@pytest.mark.slow
def test_produce_consume_10k_keyed_records(broker, make_topic):
    partitions = 3
    topic = make_topic(partitions=partitions)
    base_ts = int(time.time() * 1000) - 3_600_000
    expected = mixed_records.mixed(10_000, base_ts, partitions)
    mixed_records.produce_with_confluent(broker.bootstrap, topic, expected)

    c = consumer(broker.bootstrap, **{"fetch.max.bytes": 52_428_800})
    try:
        assign_from_beginning(c, topic, partitions)
        msgs = consume(c, len(expected) + 1, timeout=90)
    finally:
        c.close()
    for m in msgs:
        assert m.timestamp()[0] == TIMESTAMP_CREATE_TIME
    mixed_records.check([mixed_records.Received(m.partition(), m.offset(), m.key(), m.value(), m.headers() or [],
                                                m.timestamp()[1]) for m in msgs], expected, base_ts)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codecs(broker, make_topic, codec):
    topic = make_topic(partitions=2)
    n = 2000
    p = producer(broker.bootstrap, **{"compression.type": codec, "linger.ms": 20})
    dt = DeliveryTracker()
    for i in range(n):
        p.produce(topic, key=b"k%d" % (i % 10), value=(b"compressible %d " % i) * 20, on_delivery=dt)
    flush(p)
    assert not dt.errors
    c = consumer(broker.bootstrap)
    try:
        assign_from_beginning(c, topic, 2)
        msgs = consume(c, n)
    finally:
        c.close()
    assert len(msgs) == n
    got = sorted(int(m.value().split(b" ")[1]) for m in msgs)
    assert got == list(range(n))
    for m in msgs:
        i = int(m.value().split(b" ")[1])
        assert m.key() == b"k%d" % (i % 10) and m.value() == (b"compressible %d " % i) * 20


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker, make_topic, acks):
    topic = make_topic()
    n = 500
    p, dt = producer(broker.bootstrap, acks=acks), DeliveryTracker()
    for i in range(n):
        p.produce(topic, value=b"a%d" % i, partition=0, on_delivery=dt)
    flush(p)
    assert not dt.errors
    if acks != "0":  # with acks=0 the client never learns the offsets
        assert sorted(o for _, o in dt.delivered) == list(range(n))
    c = consumer(broker.bootstrap)
    try:
        assign_from_beginning(c, topic, 1)
        msgs = consume(c, n)
    finally:
        c.close()
    assert [m.value() for m in msgs] == [b"a%d" % i for i in range(n)]


def test_idempotent_producer(broker, make_topic):
    topic = make_topic(partitions=2)
    n = 3000
    p = producer(broker.bootstrap, **{"enable.idempotence": True, "max.in.flight.requests.per.connection": 5,
                                      "linger.ms": 1, "batch.num.messages": 100})
    dt = DeliveryTracker()
    for i in range(n):
        p.produce(topic, key=b"k%d" % (i % 4), value=b"%d" % i, on_delivery=dt)
        if i % 500 == 0:
            p.poll(0)
    flush(p)
    assert not dt.errors
    assert len(set(dt.delivered)) == n
    c = consumer(broker.bootstrap)
    try:
        assign_from_beginning(c, topic, 2)
        msgs = consume(c, n)
        msgs += consume(c, 1, timeout=1.5)  # one more: no duplicate may arrive
    finally:
        c.close()
    values = [int(m.value()) for m in msgs]
    assert len(values) == n and sorted(values) == list(range(n))
    per_key = {}
    for m in msgs:
        per_key.setdefault(m.key(), []).append(int(m.value()))
    for vals in per_key.values():
        assert vals == sorted(vals)


def test_long_poll_wakes_on_produce(broker, make_topic):
    """A Fetch parked with a long max wait completes as soon as data arrives: each record
    is received well within the fetch's 30 s wait (the deadline of each wait below)."""
    topic = make_topic()
    c = consumer(broker.bootstrap, **{"fetch.wait.max.ms": 30000, "fetch.min.bytes": 1})
    p = producer(broker.bootstrap, **{"linger.ms": 0, "acks": "1"})
    received: list[tuple[bytes, float]] = []
    stop = threading.Event()

    def poll_loop():
        while not stop.is_set():
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                received.append(m.value())

    c.assign([TopicPartition(topic, 0, 0)])
    t = threading.Thread(target=poll_loop, daemon=True)
    t.start()
    try:
        for i in range(6):
            if not broker.external:       # the consumer's fetch is parked at the broker
                wait_until(lambda: broker.parked_fetches() > 0, 15, "a parked fetch", broker)
            acked = []
            value = b"lp-%d" % i
            p.produce(topic, value=value, partition=0,
                      on_delivery=lambda err, msg: acked.append(err))
            flush(p, 10)
            assert acked == [None]
            wait_until(lambda: value in received, 15, f"record {value!r}", broker, step=0.005)
    finally:
        stop.set()
        t.join(5)
        c.close()
    assert received == [b"lp-%d" % i for i in range(6)]


def _fetches_to_read(bootstrap, topic, n):
    """(records read from the start of partition 0, Fetch requests the consumer sent)."""
    reqs = ReqStats(100)        # the benchmarks' count, from librdkafka's statistics
    c = consumer(bootstrap, **reqs.config())
    try:
        assign_from_beginning(c, topic, 1)
        msgs = consume(c, n)
        assert reqs.settle(c.poll, time.time_ns(), timeout_s=T), "no statistics after the reads"
    finally:
        c.close()
    return [m.value() for m in msgs], reqs.final()["Fetch"]


def test_broker_fetch_max_bytes_caps_each_fetch_response(broker, fresh_broker, topic_name):
    # KIP-541: the broker's fetch.max.bytes bounds a response whatever the consumer asks
    # (librdkafka's fetch.max.bytes 50 MiB here); one batch bigger than it still comes whole
    values = [b"%03d" % i + b"x" * 3000 for i in range(40)]

    def load(bootstrap):
        a = admin(bootstrap)
        a.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(T)
        wait_for_topic(bootstrap, topic_name)
        p = producer(bootstrap, **{"linger.ms": 0, "batch.size": 1})   # a batch per record
        dt = DeliveryTracker()
        for v in values:
            p.produce(topic_name, v, partition=0, on_delivery=dt)
            p.flush(T)
        assert not dt.errors and len(dt.delivered) == len(values)
        return _fetches_to_read(bootstrap, topic_name, len(values))

    capped_broker = fresh_broker({"fetch.max.bytes": 4096})   # first: it may skip the test
    got, uncapped = load(broker.bootstrap)
    assert got == values and uncapped < 10
    got, capped = load(capped_broker.bootstrap)
    assert got == values                  # every record, in order, each batch whole
    assert capped >= len(values)          # at most one whole batch (3 KiB) per response


def _delete_before(bootstrap, topic, offset):
    a = admin(bootstrap)
    tp = TopicPartition(topic, 0, offset)
    assert a.delete_records([tp], request_timeout=T)[tp].result(T).low_watermark == offset


def test_fetch_below_log_start_earliest(broker, make_topic):
    topic = make_topic()
    _produce_n(broker.bootstrap, topic, 10)
    _delete_before(broker.bootstrap, topic, 5)
    c = consumer(broker.bootstrap, **{"auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 2)])
        msgs = consume(c, 5)
    finally:
        c.close()
    assert [m.offset() for m in msgs] == [5, 6, 7, 8, 9]


def test_fetch_below_log_start_latest(broker, make_topic):
    topic = make_topic()
    _produce_n(broker.bootstrap, topic, 10)
    _delete_before(broker.bootstrap, topic, 5)
    c = consumer(broker.bootstrap, **{"auto.offset.reset": "latest"})
    try:
        c.assign([TopicPartition(topic, 0, 2)])
        assert consume(c, 1, timeout=3) == []
        _produce_n(broker.bootstrap, topic, 1)
        msgs = consume(c, 1)
    finally:
        c.close()
    assert [m.offset() for m in msgs] == [10]


def test_fetch_below_log_start_error(broker, make_topic):
    topic = make_topic()
    _produce_n(broker.bootstrap, topic, 10)
    _delete_before(broker.bootstrap, topic, 5)
    c = consumer(broker.bootstrap, **{"auto.offset.reset": "error"})
    errors = []
    try:
        c.assign([TopicPartition(topic, 0, 2)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not errors:
            m = c.poll(0.5)
            if m is not None and m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
                errors.append(m.error())
            elif m is not None and m.error() is None:
                pytest.fail(f"got a record at offset {m.offset()} below the log start")
    finally:
        c.close()
    assert errors, "no error for a fetch below the log start offset"
    err = errors[0]
    assert err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE), err
    assert err.code() == KafkaError.OFFSET_OUT_OF_RANGE or "out of range" in err.str().lower(), err


def test_consume_from_end_and_beginning_offsets(broker, make_topic):
    topic = make_topic()
    _produce_n(broker.bootstrap, topic, 5)
    c = consumer(broker.bootstrap)
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=T)
        assert (lo, hi) == (0, 5)
        c.assign([TopicPartition(topic, 0, OFFSET_END)])
        assert consume(c, 1, timeout=2) == []
        _produce_n(broker.bootstrap, topic, 2)
        msgs = consume(c, 2)
        assert [m.offset() for m in msgs] == [5, 6]
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert [m.offset() for m in consume(c, 7)] == list(range(7))
    finally:
        c.close()
