"""Record formats end to end: real clients forced to magic v0/v1 against the real broker.

Old clients: kafka-python with `api_version=(0, 9)` (Produce/Fetch v0-v1, magic 0) and
`(0, 10)` (Produce/Fetch v2, magic 1); librdkafka with `api.version.request=false` and
`broker.version.fallback=0.9.0` / `0.10.0` (the same formats). New clients: the
defaults (magic 2). Old producers' records are read by new consumers, new producers'
records by old consumers, with keys, values and timestamps checked, for every codec
both sides support (zstd is v2 only; kafka-python's magic-0 lz4 needs the xxhash
package, which is not installed). The broker stores v2 and converts both ways
(storage/convert.py).

Each direction produces into one topic per (client, codec) and then reads all of them
with one consumer per consumer kind, to stay fast.
"""
from __future__ import annotations

import struct
import time
from pathlib import Path

from tests.integration import broker as harness

N = 6
CK_CODEC = {None: "none", "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}


def _records(tag: str, with_ts: bool):
    base = int(time.time() * 1000) - 1000
    return [(f"{tag}-k{i}".encode() if i % 3 else None,
             f"{tag}-v{i}-".encode() + b"compressible" * 20,
             base + i if with_ts else None) for i in range(N)]


def stored_codecs(b, topic) -> list[int]:
    """Codec ids of the v2 batches in the partition's first segment (on the broker's disk)."""
    raw = (Path(b.data_dir) / f"{topic}-0" / "00000000000000000000.log").read_bytes()
    out, pos = [], 0
    while pos + 61 <= len(raw):
        (length,) = struct.unpack_from(">i", raw, pos + 8)
        if length <= 0:                     # the preallocated tail of the active segment
            break
        assert raw[pos + 16] == 2           # stored as magic 2, whatever came in
        out.append(struct.unpack_from(">h", raw, pos + 21)[0] & 7)
        pos += 12 + length
    return out


# -- producers -------------------------------------------------------------------------

def kp_produce(bootstrap, topic, records, api_version, codec):
    from kafka import KafkaProducer

    kw = {} if api_version is None else {"api_version": api_version}
    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=50,
                      acks=1, enable_idempotence=False, **kw)
    futures = [p.send(topic, key=k, value=v, partition=0, timestamp_ms=ts)
               for k, v, ts in records]
    p.flush(30)
    offsets = [f.get(timeout=30).offset for f in futures]
    p.close(5)
    assert offsets == list(range(N)), offsets


def ck_produce(bootstrap, topic, records, fallback, codec):
    conf = {"compression.codec": CK_CODEC[codec], "linger.ms": 50}
    if fallback:
        conf.update({"api.version.request": False, "broker.version.fallback": fallback})
    p = harness.producer(bootstrap, **conf)
    tracker = harness.DeliveryTracker()
    for k, v, ts in records:
        kw = {"timestamp": ts} if ts is not None else {}
        p.produce(topic, value=v, key=k, partition=0, on_delivery=tracker, **kw)
    harness.flush(p)
    assert not tracker.errors, tracker.errors
    assert sorted(o for _, o in tracker.delivered) == list(range(N))


# -- consumers: {topic: [(offset, key, value, timestamp or None)]} ---------------------

def kp_consume(bootstrap, topics, api_version, timeout=40):
    from kafka import KafkaConsumer, TopicPartition

    kw = {} if api_version is None else {"api_version": api_version}
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", **kw)
    c.assign([TopicPartition(t, 0) for t in topics])
    got = {t: [] for t in topics}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and any(len(v) < N for v in got.values()):
            for tp, msgs in c.poll(timeout_ms=1000).items():
                got[tp.topic] += [(m.offset, m.key, m.value,
                                   m.timestamp if m.timestamp is not None and m.timestamp >= 0
                                   else None, m.timestamp_type) for m in msgs]
    finally:
        c.close()
    return got


def ck_consume(bootstrap, topics, fallback, timeout=40):
    from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, TopicPartition

    conf = {}
    if fallback:
        conf.update({"api.version.request": False, "broker.version.fallback": fallback})
    c = harness.consumer(bootstrap, **conf)
    c.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in topics])
    got = {t: [] for t in topics}
    try:
        for m in harness.consume(c, N * len(topics), timeout=timeout):
            ttype, ts = m.timestamp()       # (TIMESTAMP_NOT_AVAILABLE, 0) from magic 0
            if ttype == TIMESTAMP_NOT_AVAILABLE or ts is None or ts < 0:
                ts = None
            got[m.topic()].append((m.offset(), m.key(), m.value(), ts, ttype))
    finally:
        c.close()
    return got


def check(got, expected, what, *, timestamps: bool, log_append_after=None):
    for topic, records in expected.items():
        rows = sorted(got[topic])
        assert [(o, k, v) for o, k, v, _, _ in rows] == \
            [(i, k, v) for i, (k, v, _) in enumerate(records)], (what, topic, rows)
        for (o, k, v, ts, ttype), (_, _, want_ts) in zip(rows, records):
            if log_append_after is not None:
                assert ts is not None and ts >= log_append_after, (what, topic, rows)
            elif timestamps:                # v0 producers: no timestamp at all
                assert ts == want_ts, (what, topic, rows)
            else:
                assert ts is None, (what, topic, rows)


CODEC_ID = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# librdkafka honours broker.version.fallback only up to 0.9.0 (magic 0, Produce/Fetch v1):
# from 0.10 on it sends ApiVersions anyway and speaks v2 (checked with -d protocol), so
# magic 1 comes from kafka-python (0, 10) only; the librdkafka 0.10.0 rows stay as the
# configuration the issue names.
OLD_PRODUCERS = (
    [("kp", (0, 9), c) for c in (None, "gzip", "snappy")]
    + [("kp", (0, 10), c) for c in (None, "gzip", "snappy", "lz4")]
    + [("ck", f, c) for f in ("0.9.0", "0.10.0") for c in (None, "gzip", "snappy", "lz4")])


def test_old_producers_new_consumers(broker, make_topic):
    """Magic 0/1 message sets in, v2 batches out, for every codec of each old client."""
    expected = {}
    for kind, version, codec in OLD_PRODUCERS:
        magic1 = version in ((0, 10), "0.10.0")
        topic = make_topic()
        recs = _records(f"{kind}{version}{codec}", magic1)
        if kind == "kp":
            kp_produce(broker.bootstrap, topic, recs, version, codec)
        else:
            ck_produce(broker.bootstrap, topic, recs, version, codec)
        expected[topic] = recs
        if not harness.external_bootstrap():
            assert set(stored_codecs(broker, topic)) == {CODEC_ID[codec]}, (kind, version, codec)
    # a LogAppendTime topic and a broker-side recompression (old gzip -> stored zstd)
    start = int(time.time() * 1000)
    lat = make_topic(config={"message.timestamp.type": "LogAppendTime"})
    kp_produce(broker.bootstrap, lat, _records("lat", True), (0, 10), "gzip")
    recompressed = make_topic(config={"compression.type": "zstd"})
    recs = _records("zstd-topic", True)
    kp_produce(broker.bootstrap, recompressed, recs, (0, 10), "gzip")
    expected_all = {**expected, recompressed: recs}
    if not harness.external_bootstrap():
        assert set(stored_codecs(broker, recompressed)) == {CODEC_ID["zstd"]}

    got = kp_consume(broker.bootstrap, list(expected_all) + [lat], None)
    check({t: got[t] for t in expected_all}, expected_all, "kafka-python new", timestamps=True)
    check({lat: got[lat]}, {lat: _records("lat", True)}, "kafka-python new LogAppendTime",
          timestamps=True, log_append_after=start)
    assert {r[4] for r in got[lat]} == {1}
    got = ck_consume(broker.bootstrap, list(expected_all), None)
    check(got, expected_all, "confluent new", timestamps=True)


NEW_PRODUCERS = [(kind, c) for kind in ("kp", "ck")
                 for c in (None, "gzip", "snappy", "lz4", "zstd")]
OLD_CONSUMERS = [("kp", (0, 9)), ("kp", (0, 10)), ("ck", "0.9.0"), ("ck", "0.10.0")]


def test_new_producers_old_consumers(broker, make_topic):
    """v2 batches in (headers too), magic 0/1 message sets out, codec kept."""
    topics = {}
    for kind, codec in NEW_PRODUCERS:
        topic = make_topic()
        recs = _records(f"new-{kind}{codec}", True)
        if kind == "kp":
            kp_produce(broker.bootstrap, topic, recs, None, codec)
        else:
            ck_produce(broker.bootstrap, topic, recs, None, codec)
        topics[topic] = (codec, recs)
    for kind, version in OLD_CONSUMERS:
        magic1 = version in ((0, 10), "0.10.0")
        readable = {t: recs for t, (codec, recs) in topics.items()
                    if codec != "zstd" and not (kind == "kp" and version == (0, 9)
                                                and codec == "lz4")}
        if kind == "kp":
            got = kp_consume(broker.bootstrap, list(readable), version)
        else:
            got = ck_consume(broker.bootstrap, list(readable), version)
        check(got, readable, f"{kind} {version}", timestamps=magic1)


def test_zstd_topic_refuses_old_fetchers(broker, make_topic):
    """Fetch < v10 on a compression.type=zstd topic: UNSUPPORTED_COMPRESSION_TYPE (76)."""
    topic = make_topic(config={"compression.type": "zstd"})
    kp_produce(broker.bootstrap, topic, _records("z", True), None, None)
    name = topic.encode()
    body = (struct.pack(">iii", -1, 100, 1)            # replica_id, max_wait_ms, min_bytes
            + struct.pack(">i", 1)                      # one topic
            + struct.pack(">h", len(name)) + name       # topic name
            + struct.pack(">i", 1)                      # one partition
            + struct.pack(">iqi", 0, 0, 1 << 20))       # partition, fetch_offset, max_bytes
    sock = harness.connect(broker.bootstrap)
    try:
        sock.sendall(harness.frame_request(1, 2, 7, body))   # Fetch v2
        frame = harness.recv_frame(sock)
    finally:
        sock.close()
    pos = 4 + 4 + 4                                     # correlation id, throttle, n topics
    (tlen,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + tlen + 4                                 # name, n partitions
    partition, error = struct.unpack_from(">ih", frame, pos)
    assert (partition, error) == (0, 76)
