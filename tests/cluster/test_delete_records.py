"""DeleteRecords in cluster mode (workers/handlers/delete_records.py, DelayedDeleteRecords):
three real `mpbroker serve` processes on real ZooKeeper, RF=3. The answer waits until
every replica on a live broker moved its log start offset (the low watermark); a
follower that does not fetch makes it REQUEST_TIMED_OUT; a broker whose ZooKeeper
session ended no longer counts."""
from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from mpbroker.protocol import api_keys as K
from mpbroker.protocol.errors import ErrorCode as E
from workers.kafka_client import KafkaConnection

pytestmark = [pytest.mark.slow, pytest.mark.integration]


async def _delete_records(b, topic, offset, timeout_ms):
    conn = await KafkaConnection.connect(b.host, b.port, timeout_ms=timeout_ms + 15000)
    try:
        resp = await conn.request(K.DELETE_RECORDS, 2, {"timeout_ms": timeout_ms, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}]})
        r = resp["topics"][0]["partitions"][0]
        return r["error_code"], r["low_watermark"]
    finally:
        await conn.close()


def delete_records(b, topic, offset, timeout_ms):
    return asyncio.run(_delete_records(b, topic, offset, timeout_ms))


def test_delete_records_waits_for_live_followers(cluster):
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("dr", 1, 3)], operation_timeout=30,
                        request_timeout=30)["dr"].result(30)
    c.wait_for(lambda: len((c.state("dr", 0) or {}).get("isr", ())) == 3, 30, "full ISR")
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(10):
        p.produce("dr", b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    leader = c.state("dr", 0)["leader"]
    paused, killed = [i for i in c.brokers if i != leader]
    lb = c.brokers[leader]

    # every follower reports the new log start in its next Fetch
    assert delete_records(lb, "dr", 6, 15000) == (0, 6)

    # a follower that does not fetch (but is still registered) holds the answer back
    c.pause(paused)
    try:
        assert delete_records(lb, "dr", 8, 1000) == (E.REQUEST_TIMED_OUT, 6)
    finally:
        c.resume(paused)

    # a killed follower counts until its ZooKeeper session ends, then not
    c.kill(killed)
    assert delete_records(lb, "dr", 10, 30000) == (0, 10)
    assert killed not in c.live_ids()
