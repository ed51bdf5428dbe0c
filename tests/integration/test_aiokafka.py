"""aiokafka against the real broker process: round trip, codecs, admin create topics.

aiokafka speaks only non-flexible versions (ApiVersions v0, Produce <= 7, Fetch <= 11,
Metadata <= 5): these tests cover the broker's classic encodings. Each test runs its
coroutine under asyncio.run with an overall timeout (no pytest-asyncio needed).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.integration import mixed_records
from tests.integration.broker import wait_for_topic

TIMEOUT_S = 60


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


async def produce(bootstrap, topic, records, **kw):
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=30000, **kw)
    await p.start()
    try:
        futs = [await p.send(topic, key=k, value=v, partition=part, headers=h) for part, k, v, h in records]
        return [await f for f in futs]
    finally:
        await p.stop()


async def consume(bootstrap, topic, partitions, n, timeout_s=20.0, extra_s=0.0, **kw):
    """n records from the beginning; then extra_s more seconds to catch any surplus."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", request_timeout_ms=30000, **kw)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        out = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while len(out) < n and loop.time() < deadline:
            batch = await c.getmany(timeout_ms=500, max_records=n - len(out))
            for recs in batch.values():
                out.extend(recs)
        if extra_s:
            for recs in (await c.getmany(timeout_ms=int(extra_s * 1000))).values():
                out.extend(recs)
        return out
    finally:
        await c.stop()


@pytest.mark.slow
def test_produce_consume_10k_mixed_records(broker, make_topic):
    partitions = 3
    topic = make_topic(partitions=partitions)
    base_ts = int(time.time() * 1000) - 3_600_000
    expected = mixed_records.mixed(10_000, base_ts, partitions)

    async def produce_all():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000, linger_ms=5,
                             max_request_size=2_000_000, max_batch_size=1_000_000)
        await p.start()
        try:
            futs = [await p.send(topic, key=r.key, value=r.value, headers=r.headers, timestamp_ms=r.timestamp,
                                 partition=r.partition) for r in expected]
            futs.append(await p.send(topic, key=mixed_records.BIG_KEY, value=mixed_records.big_value(),
                                     partition=0))
            for f in futs:
                await f
        finally:
            await p.stop()
    run(produce_all())
    recs = run(consume(broker.bootstrap, topic, partitions, len(expected) + 1, timeout_s=50, extra_s=1.0,
                       fetch_max_bytes=52_428_800, max_partition_fetch_bytes=2_000_000))
    assert all(r.timestamp_type == 0 for r in recs)      # CreateTime
    mixed_records.check([mixed_records.Received(r.partition, r.offset, r.key, r.value, list(r.headers),
                                                r.timestamp) for r in recs], expected, base_ts)


def test_round_trip(broker, make_topic):
    topic = make_topic(partitions=2)
    n = 1000
    records = [(i % 2, b"k%d" % i if i % 5 else None, b"v%d" % i, [("h", b"%d" % i)]) for i in range(n)]
    metas = run(produce(broker.bootstrap, topic, records, linger_ms=5))
    assert sorted((m.partition, m.offset) for m in metas) == \
           sorted([(0, o) for o in range(n // 2)] + [(1, o) for o in range(n // 2)])
    recs = run(consume(broker.bootstrap, topic, 2, n, extra_s=1.5))
    assert len(recs) == n
    for r in recs:
        i = int(r.value[1:])
        assert r.partition == i % 2
        assert r.key == (b"k%d" % i if i % 5 else None)
        assert list(r.headers) == [("h", b"%d" % i)]
    for part in (0, 1):
        offs = [r.offset for r in recs if r.partition == part]
        assert offs == list(range(n // 2))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_codecs(broker, make_topic, codec):
    topic = make_topic()
    n = 500
    records = [(0, b"%d" % i, (b"aiokafka %d " % i) * 10, None) for i in range(n)]
    run(produce(broker.bootstrap, topic, records, compression_type=codec, linger_ms=20))
    recs = run(consume(broker.bootstrap, topic, 1, n))
    assert [(r.offset, r.key, r.value) for r in recs] == [(i, k, v) for i, (_, k, v, _) in enumerate(records)]


def test_idempotent_producer(broker, make_topic):
    topic = make_topic()
    n = 300
    records = [(0, None, b"%d" % i, None) for i in range(n)]
    metas = run(produce(broker.bootstrap, topic, records, enable_idempotence=True))
    assert [m.offset for m in metas] == list(range(n))
    recs = run(consume(broker.bootstrap, topic, 1, n, extra_s=1.5))
    assert [r.value for r in recs] == [b"%d" % i for i in range(n)]


def test_admin_create_topics(broker):
    names = [f"aio-admin-{uuid.uuid4().hex[:8]}-{i}" for i in range(2)]

    async def go():
        a = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
        await a.start()
        try:
            resp = await a.create_topics([NewTopic(names[0], 1, 1), NewTopic(names[1], 4, 1)])
            assert sorted((e[0], e[1]) for e in resp.topic_errors) == sorted((n, 0) for n in names), resp
            # again: TOPIC_ALREADY_EXISTS (36) for each, read from the same field
            again = await a.create_topics([NewTopic(names[0], 1, 1)])
            assert [(e[0], e[1]) for e in again.topic_errors] == [(names[0], 36)], again
            listed = await a.list_topics()
            return listed
        finally:
            await a.close()

    listed = run(go())
    assert set(names) <= set(listed)
    wait_for_topic(broker.bootstrap, names[0], 1)
    wait_for_topic(broker.bootstrap, names[1], 4)
