"""kcat (Debian's 1.7.1, linked to librdkafka 2.0.2) against the real broker process.

kcat's old librdkafka decides features from exact version overlaps and mis-skips
default-valued tagged fields in ApiVersions v3 (see shared/reference/CLIENT-API-USAGE.md):
these tests catch a broker that breaks it. Every kcat run has a timeout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from tests.integration import mixed_records
from tests.integration.broker import DeliveryTracker, flush, producer

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")

KCAT_TIMEOUT_S = 60


def kcat(bootstrap, *args, input: bytes | None = None) -> subprocess.CompletedProcess:
    cmd = ["kcat", "-b", bootstrap, "-m", "15", "-X", "broker.address.family=v4", *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, timeout=KCAT_TIMEOUT_S)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\nstdout: {proc.stdout[-2000:]!r}\n"
                             f"stderr: {proc.stderr[-4000:].decode(errors='replace')}")
    return proc


def kcat_consume(bootstrap, topic, fmt, *extra) -> list[str]:
    out = kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", fmt, *extra).stdout
    return [line for line in out.decode().split("\x1e") if line]


def test_metadata_list(broker, make_topic):
    topic = make_topic(partitions=3)
    md = json.loads(kcat(broker.bootstrap, "-L", "-J").stdout)
    assert [b["name"] for b in md["brokers"]] == [f"{broker.host}:{broker.bootstrap.rsplit(':', 1)[1]}"]
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]
    assert all(p["leader"] == md["brokers"][0]["id"] for p in t["partitions"])
    # and the plain text form, restricted to the topic
    text = kcat(broker.bootstrap, "-L", "-t", topic).stdout.decode()
    assert f'topic "{topic}" with 3 partitions' in text


def test_produce_consume_keys(broker, make_topic):
    topic = make_topic()
    lines = b"".join(b"key%d:value %d\n" % (i, i) for i in range(100))
    kcat(broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K:", input=lines)
    got = kcat_consume(broker.bootstrap, topic, "%o|%k|%s\x1e")
    assert got == [f"{i}|key{i}|value {i}" for i in range(100)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_produce_compressed(broker, make_topic, codec):
    topic = make_topic()
    lines = b"".join(b"k%d:%s\n" % (i, b"compress me %d " % i * 10) for i in range(500))
    kcat(broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-z", codec, "-X", "linger.ms=50", input=lines)
    got = kcat_consume(broker.bootstrap, topic, "%o|%k|%s\x1e")
    assert got == [f"{i}|k{i}|" + (f"compress me {i} " * 10) for i in range(500)]


def test_headers(broker, make_topic):
    topic = make_topic()
    kcat(broker.bootstrap, "-P", "-t", topic, "-p", "0", "-H", "h1=v1", "-H", "trace=abc", input=b"one\ntwo\n")
    got = kcat_consume(broker.bootstrap, topic, "%s|%h\x1e")
    assert got == ["one|h1=v1,trace=abc", "two|h1=v1,trace=abc"]


def test_timestamps(broker, make_topic):
    topic = make_topic()
    before = int(time.time() * 1000)
    kcat(broker.bootstrap, "-P", "-t", topic, "-p", "0", input=b"a\nb\n")
    after = int(time.time() * 1000)
    for line in kcat_consume(broker.bootstrap, topic, "%T\x1e"):
        assert before - 1000 <= int(line) <= after + 1000
    # explicit CreateTime timestamps set by another client come back exactly
    p, dt = producer(broker.bootstrap), DeliveryTracker()
    for i, ts in enumerate((1_600_000_000_000, 1_700_000_000_123)):
        p.produce(topic, value=b"t%d" % i, partition=0, timestamp=ts, on_delivery=dt)
    flush(p)
    assert not dt.errors
    got = kcat_consume(broker.bootstrap, topic, "%s|%T\x1e")[2:]
    assert got == ["t0|1600000000000", "t1|1700000000123"]


def test_null_and_empty(broker, make_topic):
    topic = make_topic()
    p, dt = producer(broker.bootstrap), DeliveryTracker()
    p.produce(topic, key=None, value=None, partition=0, on_delivery=dt)
    p.produce(topic, key=b"", value=b"", partition=0, on_delivery=dt)
    flush(p)
    assert not dt.errors
    assert kcat_consume(broker.bootstrap, topic, "%K|%S\x1e") == ["-1|-1", "0|0"]


def test_consume_offsets_and_count(broker, make_topic):
    topic = make_topic()
    kcat(broker.bootstrap, "-P", "-t", topic, "-p", "0", input=b"".join(b"m%d\n" % i for i in range(20)))
    out = kcat(broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "15", "-e", "-f", "%o:%s\n").stdout.decode()
    assert out.split() == [f"{i}:m{i}" for i in range(15, 20)]
    out = kcat(broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "-3", "-e", "-f", "%s\n").stdout.decode()
    assert out.split() == ["m17", "m18", "m19"]
    out = kcat(broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", "4", "-f", "%s\n")
    assert out.stdout.decode().split() == ["m0", "m1", "m2", "m3"]


def _parse_records(out: bytes) -> list[mixed_records.Received]:
    """Records printed with KCAT_FORMAT: lengths first, so keys and values may hold any
    byte, the separators included."""
    recs, pos = [], 0

    def field(end: bytes) -> bytes:
        nonlocal pos
        i = out.index(end, pos)
        v, pos = out[pos:i], i + 1
        return v

    def sized(n: int) -> bytes | None:
        nonlocal pos
        if n < 0:
            pos += 1
            return None
        v, pos = out[pos:pos + n], pos + n + 1
        return v
    while pos < len(out):
        part, off = int(field(b"\x1f")), int(field(b"\x1f"))
        key = sized(int(field(b"\x1f")))
        value = sized(int(field(b"\x1f")))
        hdrs = field(b"\x1f").decode()
        ts = int(field(b"\x1e"))
        headers = [(k, v.encode()) for k, _, v in (h.partition("=") for h in hdrs.split(","))] if hdrs else []
        recs.append(mixed_records.Received(part, off, key, value, headers, ts))
    return recs


KCAT_FORMAT = "%p\x1f%o\x1f%K\x1f%k\x1f%S\x1f%s\x1f%h\x1f%T\x1e"


@pytest.mark.slow
def test_consume_10k_mixed_records(broker, make_topic):
    """kcat reads the everyday set (null keys, empty values, headers, CreateTime, a value
    near message.max.bytes) that confluent-kafka produced."""
    partitions = 3
    topic = make_topic(partitions=partitions)
    base_ts = int(time.time() * 1000) - 3_600_000
    expected = mixed_records.mixed(10_000, base_ts, partitions)
    mixed_records.produce_with_confluent(broker.bootstrap, topic, expected)
    out = kcat(broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", KCAT_FORMAT,
               "-X", "fetch.message.max.bytes=2000000").stdout
    mixed_records.check(_parse_records(out), expected, base_ts)


@pytest.mark.slow
def test_produce_10k_keyed_lines(broker, make_topic):
    """kcat as the producer: 10k keyed lines (empty keys sent as null with -Z) with
    headers, and one value near message.max.bytes, read back by kcat itself."""
    topic = make_topic(partitions=3)
    lines = [(b"" if i % 10 == 0 else b"key-%d" % (i % 97), b"value-%06d" % i) for i in range(10_000)]
    data = b"".join(k + b":" + v + b"\n" for k, v in lines)
    big = b"x" * mixed_records.BIG_VALUE_SIZE
    before = int(time.time() * 1000)
    kcat(broker.bootstrap, "-P", "-t", topic, "-K:", "-Z", "-H", "src=kcat", "-X", "message.max.bytes=2000000",
         "-X", "linger.ms=20", input=data + b"big:" + big + b"\n")
    got = _parse_records(kcat(broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", KCAT_FORMAT,
                              "-X", "fetch.message.max.bytes=2000000").stdout)
    assert len(got) == len(lines) + 1
    by_value = {r.value: r for r in got}
    assert by_value[big].key == b"big"
    for i, (k, v) in enumerate(lines):
        r = by_value.pop(v)
        assert r.key == (k or None) and r.headers == [("src", b"kcat")], (i, r)
        assert r.timestamp >= before - 1000
    # the partitioner keeps one key on one partition, and producer order per partition
    parts: dict[bytes, set] = {}
    for r in got:
        if r.key is not None:
            parts.setdefault(r.key, set()).add(r.partition)
    assert all(len(s) == 1 for s in parts.values())
    for part in range(3):
        seq = [int(r.value[6:]) for r in sorted(got, key=lambda r: r.offset)
               if r.partition == part and r.key != b"big"]
        assert seq == sorted(seq)
