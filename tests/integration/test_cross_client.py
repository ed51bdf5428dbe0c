"""Every codec produced by one client and consumed by every other client.

Producers and consumers: confluent-kafka (librdkafka 2.x), kafka-python, aiokafka and
kcat (librdkafka 2.0.2). The broker stores the producer's batch as sent (it never
re-encodes), so each consumer decodes another library's compressed batches.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest

from tests.conftest import REQUIRE_ALL, require

from tests.integration import broker as h

CODECS = ["gzip", "snappy", "lz4", "zstd"]
CLIENTS = ["confluent", "kafka-python", "aiokafka", "kcat"]
N = 300


def records():
    return [(b"key-%d" % i, b"value-%d-" % i + b"z" * (i % 40)) for i in range(N)]


# ---------------------------------------------------------------- producers

def produce_confluent(bootstrap, topic, codec, recs):
    p, dt = h.producer(bootstrap, **{"compression.type": codec, "linger.ms": 20}), h.DeliveryTracker()
    for k, v in recs:
        p.produce(topic, key=k, value=v, partition=0, on_delivery=dt)
    h.flush(p)
    assert not dt.errors


def produce_kafka_python(bootstrap, topic, codec, recs):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20,
                      request_timeout_ms=30000, max_block_ms=30000)
    futs = [p.send(topic, key=k, value=v, partition=0) for k, v in recs]
    p.flush(timeout=30)
    for f in futs:
        f.get(timeout=30)
    p.close(timeout=10)


def produce_aiokafka(bootstrap, topic, codec, recs):
    from aiokafka import AIOKafkaProducer

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20,
                             request_timeout_ms=30000)
        await p.start()
        try:
            futs = [await p.send(topic, key=k, value=v, partition=0) for k, v in recs]
            for f in futs:
                await f
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(go(), 60))


def produce_kcat(bootstrap, topic, codec, recs):
    data = b"".join(k + b"\t" + v + b"\n" for k, v in recs)
    subprocess.run(["kcat", "-b", bootstrap, "-m", "15", "-P", "-t", topic, "-p", "0", "-K", "\t", "-z", codec,
                    "-X", "linger.ms=20"], input=data, check=True, capture_output=True, timeout=60)


# ---------------------------------------------------------------- consumers: -> [(offset, key, value)]

def consume_confluent(bootstrap, topic, n):
    c = h.consumer(bootstrap)
    try:
        h.assign_from_beginning(c, topic, 1)
        return [(m.offset(), m.key(), m.value()) for m in h.consume(c, n)]
    finally:
        c.close()


def consume_kafka_python(bootstrap, topic, n):
    import time

    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=30000)
    try:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_beginning()
        out, deadline = [], time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500, max_records=n - len(out)).values():
                out.extend((r.offset, r.key, r.value) for r in recs)
        return out
    finally:
        c.close()


def consume_aiokafka(bootstrap, topic, n):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=30000)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            out = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while len(out) < n and loop.time() < deadline:
                for recs in (await c.getmany(timeout_ms=500, max_records=n - len(out))).values():
                    out.extend((r.offset, r.key, r.value) for r in recs)
            return out
        finally:
            await c.stop()

    return asyncio.run(asyncio.wait_for(go(), 60))


def consume_kcat(bootstrap, topic, n):
    proc = subprocess.run(["kcat", "-b", bootstrap, "-m", "15", "-C", "-t", topic, "-p", "0", "-o", "beginning",
                           "-e", "-c", str(n), "-f", "%o\t%k\t%s\n"], check=True, capture_output=True, timeout=60)
    out = []
    for line in proc.stdout.decode().splitlines():
        o, k, v = line.split("\t", 2)
        out.append((int(o), k.encode(), v.encode()))
    return out


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python,
             "aiokafka": produce_aiokafka, "kcat": produce_kcat}
CONSUMERS = {"confluent": consume_confluent, "kafka-python": consume_kafka_python,
             "aiokafka": consume_aiokafka, "kcat": consume_kcat}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer_name", CLIENTS)
def test_codec_across_clients(broker, make_topic, producer_name, codec):
    have_kcat = shutil.which("kcat") is not None
    if producer_name == "kcat" or REQUIRE_ALL:
        require("kcat", None if have_kcat else "kcat is not on PATH")
    topic = make_topic()
    recs = records()
    PRODUCERS[producer_name](broker.bootstrap, topic, codec, recs)
    expected = [(i, k, v) for i, (k, v) in enumerate(recs)]
    failures = {}
    for name, consume in CONSUMERS.items():
        if name == producer_name or (name == "kcat" and not have_kcat):
            continue
        try:
            got = consume(broker.bootstrap, topic, N)
        except Exception as e:  # noqa: BLE001 - reported with the other consumers' results
            failures[name] = f"{type(e).__name__}: {str(e)[:300]}"
            continue
        if got != expected:
            failures[name] = f"{len(got)} records; first difference at " + next(
                (str(i) for i, (a, b) in enumerate(zip(got, expected)) if a != b), "the end")
    assert not failures, f"{producer_name} {codec} batches misread by: {failures}"
