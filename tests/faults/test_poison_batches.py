"""Poison batches against the real broker: refused with Kafka's error, nothing appended.

Hand-made Produce requests (raw protocol through mpbroker.protocol.codec/framing) for
each Produce version real clients send (v3: the first with magic-2 batches; v7:
librdkafka, kcat, aiokafka; v8: the first with `record_errors`; v9: kafka-python, the
first flexible one; v10), carrying batches whose CRC is right but whose records are
not: garbage varints, a record count that disagrees with the records, a bad gzip
stream, decompression bombs, keyless records on a compacted topic, a record timestamp
out of bounds; and magic-1 message sets in Produce v2 with a bad CRC, a keyless record
or a stale timestamp.  After each one the log end offset has not moved (the next good
batch gets the next offset), a real consumer reads every good record, and no worker was
replaced.
"""
from __future__ import annotations

import re
import struct
import time
import zlib

import pytest
import zstandard

from mpbroker.protocol import codec, framing
from storage import codecs, legacy
from storage.batch import HEADER_SIZE, BatchBuilder, crc32c, encode_varint
from tests.integration import broker as h
from tests.integration.conftest import (broker, fresh_broker, make_topic,  # noqa: F401
                                        session_broker)

PRODUCE = 0
NONE, CORRUPT_MESSAGE, INVALID_TIMESTAMP, INVALID_RECORD = 0, 2, 32, 87
VERSIONS = (3, 7, 8, 9, 10)
SERVING = re.compile(rb"worker (\d+) \(pid (\d+)\) serving on")
BOMB_BYTES = 200 << 20


def worker_pids(b) -> dict:
    """{worker index: pid of its latest start} from the broker's log."""
    return dict(SERVING.findall(b.log_path.read_bytes()))


def assert_workers_not_replaced(b, before: dict) -> None:
    assert b.is_alive()
    now = worker_pids(b)
    assert {w: now.get(w) for w in before} == before, "a worker was replaced"


def batch(records, compression=0, timestamp=None) -> bytearray:
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    b = BatchBuilder(compression=compression)
    for key, value in records:
        b.append(key, value, timestamp=ts)
    return bytearray(b.build())


def with_body(buf: bytearray, body: bytes, count: int | None = None) -> bytes:
    """`buf`'s header over another records region: length, count and CRC made right."""
    out = bytearray(buf[:HEADER_SIZE]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    if count is not None:
        struct.pack_into(">i", out, 57, count)
        struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def garbage_varints() -> bytes:
    good = batch([(b"k%d" % i, b"v%d" % i) for i in range(3)])
    body = bytearray(good[HEADER_SIZE:])
    body[3:9] = b"\xff" * 6                 # the first record's offset delta: 6 bytes
    return with_body(good, bytes(body))


def wrong_count(count=4) -> bytes:
    good = batch([(b"k%d" % i, b"v%d" % i) for i in range(3)])
    return with_body(good, bytes(good[HEADER_SIZE:]), count=count)


def bad_gzip() -> bytes:
    good = batch([(b"k", b"v" * 100)], compression=codecs.GZIP)
    body = bytearray(good[HEADER_SIZE:])
    body[12:24] = b"\x00" * 12
    return with_body(good, bytes(body))


def _record_prefix(value_len: int) -> bytes:
    """The start of one record (key b"k") declaring a value of `value_len` bytes."""
    body = b"\x00\x00\x00" + encode_varint(1) + b"k" + encode_varint(value_len)
    return encode_varint(len(body) + value_len + 1) + body


def gzip_bomb() -> bytes:
    # concatenated gzip members (read as one stream, as Java does): 200 MiB of zeros
    def member(data):
        c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    zeros = member(bytes(1 << 20))
    stream = member(_record_prefix(BOMB_BYTES)) + zeros * (BOMB_BYTES >> 20) + member(b"\x00")
    return with_body(batch([(b"k", b"v")], compression=codecs.GZIP), stream, count=1)


def zstd_bomb() -> bytes:
    # a streamed frame: no declared content size, the decoder has to find out
    c = zstandard.ZstdCompressor(level=3).compressobj()
    chunk = bytes(1 << 20)
    parts = [c.compress(_record_prefix(BOMB_BYTES))]
    parts += [c.compress(chunk) for _ in range(BOMB_BYTES >> 20)]
    parts.append(c.compress(b"\x00") + c.flush())
    return with_body(batch([(b"k", b"v")], compression=codecs.ZSTD), b"".join(parts), count=1)


class Wire:
    """One connection sending raw Produce requests."""

    def __init__(self, bootstrap: str):
        self.sock = h.connect(bootstrap, timeout=30)
        self.correlation = 0

    def produce(self, version: int, topic: str, parts: dict) -> list:
        """{partition: records} -> [partition response dicts], in partition order."""
        self.correlation += 1
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000,
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": p, "records": r} for p, r in sorted(parts.items())]}]}
        self.sock.sendall(framing.frame_request(PRODUCE, version, self.correlation,
                                                "poison-tests", body))
        frame = h.recv_frame(self.sock)
        corr, pos = framing.parse_response_header(frame, PRODUCE, version)
        assert corr == self.correlation
        resp = codec.decode_response(PRODUCE, version, frame, pos)
        (t,) = resp["responses"]
        return sorted(t["partition_responses"], key=lambda r: r["index"])

    def close(self):
        self.sock.close()


@pytest.fixture
def wire(broker):
    w = Wire(broker.bootstrap)
    yield w
    w.close()


class Ledger:
    """The good records written so far to partition 0 of a topic, and their offsets."""

    def __init__(self, wire, topic):
        self.wire, self.topic, self.values = wire, topic, []

    def good(self, version: int, key=b"good") -> None:
        value = b"good %d" % len(self.values)
        (r,) = self.wire.produce(version, self.topic, {0: batch([(key, value)])})
        assert (r["error_code"], r["base_offset"]) == (NONE, len(self.values)), r
        self.values.append(value)

    def refused(self, version: int, records: bytes, code: int) -> dict:
        (r,) = self.wire.produce(version, self.topic, {0: records})
        assert r["error_code"] == code, r
        assert r["base_offset"] == -1
        self.good(version)                  # the log end offset did not move
        return r

    def consumed(self, b) -> None:
        c = h.consumer(b.bootstrap)
        try:
            h.assign_from_beginning(c, self.topic, 1)
            msgs = h.consume(c, len(self.values))
        finally:
            c.close()
        assert [m.value() for m in msgs] == self.values
        assert [m.offset() for m in msgs] == list(range(len(self.values)))


POISONS = [("garbage-varints", garbage_varints, INVALID_RECORD),
           ("wrong-count", wrong_count, INVALID_RECORD),
           # a count the records region cannot hold (7 bytes a record at least) is
           # refused by the header check already, as a framing error
           ("count-1000", lambda: wrong_count(1000), CORRUPT_MESSAGE),
           ("bad-gzip", bad_gzip, CORRUPT_MESSAGE)]


def test_poison_batches_refused_for_every_version(broker, make_topic, wire):
    topic = make_topic()
    pids = worker_pids(broker)
    assert pids
    ledger = Ledger(wire, topic)
    poisons = [(name, make()) for name, make, _ in POISONS]
    for version in VERSIONS:
        ledger.good(version)
        for (name, records), (_, _, code) in zip(poisons, POISONS):
            r = ledger.refused(version, records, code)
            if version >= 8:
                assert r["error_message"], (name, r)
    # one poisoned partition does not refuse its neighbour in the same request
    topic2 = make_topic(partitions=2)
    r0, r1 = wire.produce(7, topic2, {0: poisons[0][1], 1: batch([(b"k", b"v")])})
    assert (r0["error_code"], r1["error_code"], r1["base_offset"]) == (INVALID_RECORD, NONE, 0)
    ledger.consumed(broker)
    assert_workers_not_replaced(broker, pids)


def test_decompression_bombs_refused(broker, make_topic, wire):
    topic = make_topic()
    pids = worker_pids(broker)
    assert pids
    ledger = Ledger(wire, topic)
    gz, zs = gzip_bomb(), zstd_bomb()
    assert len(gz) < 1 << 20 and len(zs) < 1 << 20    # under max.message.bytes
    for version in (3, 7, 9):
        ledger.good(version)
        ledger.refused(version, gz, CORRUPT_MESSAGE)
        if version >= 7:                    # zstd needs Produce v7+
            ledger.refused(version, zs, CORRUPT_MESSAGE)
    ledger.consumed(broker)
    assert_workers_not_replaced(broker, pids)


def test_keyless_records_on_a_compacted_topic(broker, make_topic, wire):
    topic = make_topic(config={"cleanup.policy": "compact"})
    ledger = Ledger(wire, topic)
    keyless = bytes(batch([(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")]))
    for version in VERSIONS:
        ledger.good(version)
        r = ledger.refused(version, keyless, INVALID_RECORD)
        if version >= 8:
            assert [e["batch_index"] for e in r["record_errors"]] == [1, 3]
            assert "Compacted topic cannot accept message without key" in \
                r["record_errors"][0]["batch_index_error_message"]
    ledger.consumed(broker)


def test_a_record_timestamp_out_of_bounds(broker, make_topic, wire):
    topic = make_topic(config={"message.timestamp.before.max.ms": "3600000"})
    ledger = Ledger(wire, topic)
    now = int(time.time() * 1000)
    b = BatchBuilder()
    for i, ts in enumerate((now, now - 86_400_000, now)):   # first and max in bounds
        b.append(b"k%d" % i, b"v", timestamp=ts)
    stale = b.build()
    for version in VERSIONS:
        ledger.good(version)
        r = ledger.refused(version, stale, INVALID_TIMESTAMP)
        if version >= 8:
            assert [e["batch_index"] for e in r["record_errors"]] == [1]
    ledger.consumed(broker)


def test_the_connection_survives_a_poison(broker, make_topic, wire):
    """Errors are per partition: the same connection keeps answering."""
    topic = make_topic()
    for version in (7, 9):
        (r,) = wire.produce(version, topic, {0: garbage_varints()})
        assert r["error_code"] == INVALID_RECORD
    (r,) = wire.produce(9, topic, {0: batch([(b"k", b"v")])})
    assert (r["error_code"], r["base_offset"]) == (NONE, 0)


def test_trusted_producers_can_opt_out(fresh_broker):
    """produce.record.validation.enable=false: records are not walked (a malformed one
    is stored as sent), the header and CRC still are."""
    b = fresh_broker({"produce.record.validation.enable": "false"})
    topic = h.create_topic(b.bootstrap, "trusted")
    w = Wire(b.bootstrap)
    try:
        (r,) = w.produce(9, topic, {0: garbage_varints()})
        assert (r["error_code"], r["base_offset"]) == (NONE, 0)
        bad_crc = bytearray(batch([(b"k", b"v")]))
        bad_crc[-1] ^= 0xFF
        (r,) = w.produce(9, topic, {0: bytes(bad_crc)})
        assert r["error_code"] == CORRUPT_MESSAGE
    finally:
        w.close()


def test_old_format_message_sets_follow_the_same_rules(broker, make_topic, wire):
    """Produce v2 carrying magic-1 message sets (converted to v2 batches): a bad CRC,
    a keyless record on a compacted topic, a stale timestamp."""
    now = int(time.time() * 1000)
    compacted = make_topic(config={"cleanup.policy": "compact",
                                   "message.timestamp.before.max.ms": "3600000"})
    ledger = Ledger(wire, compacted)
    ledger.good(2)
    good = legacy.build_message_set([(0, now, b"k", b"v")], 1)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    ledger.refused(2, bytes(bad_crc), CORRUPT_MESSAGE)
    for codec in (codecs.NONE, codecs.GZIP):
        keyless = legacy.build_message_set([(0, now, b"k", b"v"), (1, now, None, b"v")], 1,
                                           codec)
        ledger.refused(2, keyless, INVALID_RECORD)
        stale = legacy.build_message_set([(0, now, b"k", b"v"),
                                          (1, now - 86_400_000, b"k2", b"v")], 1, codec)
        ledger.refused(2, stale, INVALID_TIMESTAMP)
    ledger.consumed(broker)
