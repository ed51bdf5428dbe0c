"""Bad bytes on the wire: the broker answers as Kafka does and keeps serving.

Kafka's behaviour (SocketServer.processCompletedReceives / RequestContext.parseRequest):
an unreadable frame (negative size, size above socket.request.max.bytes), a header
or body that does not parse, an unknown API key, or an unsupported version of any API
other than ApiVersions closes the connection without a response. An unsupported
ApiVersions version gets a v0-format response with UNSUPPORTED_VERSION (35) and the
ApiVersions range (KIP-511), and the connection stays open. A Produce whose batch fails
its CRC gets CORRUPT_MESSAGE (2) for that partition and nothing is appended.

After each case, a normal client still produces and consumes, and the records written
before are intact.
"""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest
from confluent_kafka import TopicPartition

from tests.integration import broker as h

CORRUPT_MESSAGE = 2
UNSUPPORTED_VERSION = 35
METADATA = 3
SEED_RECORDS = [(b"k%d" % i, b"seed value %d" % i) for i in range(10)]


@pytest.fixture
def seeded(broker, make_topic):
    """A topic holding SEED_RECORDS on partition 0; yields its name."""
    topic = make_topic()
    p, dt = h.producer(broker.bootstrap), h.DeliveryTracker()
    for k, v in SEED_RECORDS:
        p.produce(topic, key=k, value=v, partition=0, on_delivery=dt)
    h.flush(p)
    assert not dt.errors
    return topic


def assert_healthy(broker, topic, extra: int = 0):
    """The broker answers ApiVersions, keeps the seeded records, and takes a new one."""
    err, ranges = h.api_versions_v0(broker.bootstrap)
    assert err == 0 and 18 in ranges
    p, dt = h.producer(broker.bootstrap), h.DeliveryTracker()
    p.produce(topic, key=b"after", value=b"after bad input", partition=0, on_delivery=dt)
    h.flush(p)
    assert not dt.errors
    c = h.consumer(broker.bootstrap)
    try:
        h.assign_from_beginning(c, topic, 1)
        msgs = h.consume(c, len(SEED_RECORDS) + extra + 1)
    finally:
        c.close()
    got = [(m.key(), m.value()) for m in msgs]
    assert got[:len(SEED_RECORDS)] == SEED_RECORDS
    assert got[-1] == (b"after", b"after bad input")
    assert [m.offset() for m in msgs] == list(range(len(msgs)))


def assert_closed(sock: socket.socket, timeout: float = 10.0) -> None:
    """The broker closes the connection (EOF or reset) without sending a response."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        pytest.fail(f"connection still open {timeout}s after bad input (received {len(data)} bytes)")
    assert data == b"", f"expected a closed connection, got a response of {len(data)} bytes: {data[:64]!r}"


def test_random_bytes(broker, seeded):
    rng = random.Random(1234)
    for _ in range(20):
        with h.connect(broker.bootstrap) as s:
            try:
                s.sendall(rng.randbytes(rng.randint(1, 4096)))
                s.shutdown(socket.SHUT_WR)
                s.settimeout(10)
                while s.recv(65536):
                    pass
            except OSError:  # reset, broken pipe, not connected: the broker hung up first
                pass
    # random payloads behind a valid size prefix: header or body does not parse
    for _ in range(20):
        payload = rng.randbytes(rng.randint(1, 512))
        with h.connect(broker.bootstrap) as s:
            try:
                s.sendall(struct.pack(">i", len(payload)) + payload)
                s.settimeout(10)
                while s.recv(65536):  # Kafka closes; a frame that happens to parse may be answered
                    pass
            except OSError:  # reset, broken pipe, not connected: the broker hung up first
                pass
    assert_healthy(broker, seeded)


def test_huge_size_prefix(broker, seeded):
    with h.connect(broker.bootstrap) as s:
        s.sendall(struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 64)  # 2 GiB - 1 > socket.request.max.bytes
        assert_closed(s)
    assert_healthy(broker, seeded)


@pytest.mark.parametrize("size", [-1, -2147483648, 0])
def test_negative_or_zero_size(broker, seeded, size):
    with h.connect(broker.bootstrap) as s:
        s.sendall(struct.pack(">i", size) + b"\x00" * 16)
        assert_closed(s)
    assert_healthy(broker, seeded)


def test_truncated_frame_then_eof(broker, seeded):
    frame = h.frame_request(METADATA, 1, 1, struct.pack(">i", -1))
    with h.connect(broker.bootstrap) as s:
        s.sendall(frame[:len(frame) // 2])
        s.shutdown(socket.SHUT_WR)
        assert_closed(s)
    # a size prefix cut in the middle
    with h.connect(broker.bootstrap) as s:
        s.sendall(b"\x00\x00")
        s.shutdown(socket.SHUT_WR)
        assert_closed(s)
    assert_healthy(broker, seeded)


def test_truncated_body(broker, seeded):
    # Metadata v1 saying 5 topics follow, with none: the body does not parse
    with h.connect(broker.bootstrap) as s:
        s.sendall(h.frame_request(METADATA, 1, 1, struct.pack(">i", 5)))
        assert_closed(s)
    # a request header cut inside the client id
    with h.connect(broker.bootstrap) as s:
        payload = struct.pack(">hhih", METADATA, 1, 1, 20) + b"abc"
        s.sendall(struct.pack(">i", len(payload)) + payload)
        assert_closed(s)
    assert_healthy(broker, seeded)


def test_unknown_api_key(broker, seeded):
    with h.connect(broker.bootstrap) as s:
        s.sendall(h.frame_request(1000, 0, 1))
        assert_closed(s)
    with h.connect(broker.bootstrap) as s:
        s.sendall(h.frame_request(-5, 0, 1))
        assert_closed(s)
    assert_healthy(broker, seeded)


@pytest.mark.parametrize("api_key", [h.PRODUCE, 1, METADATA])
def test_unsupported_version_of_known_api_closes(broker, seeded, api_key):
    with h.connect(broker.bootstrap) as s:
        s.sendall(h.frame_request(api_key, 999, 1, b"\x00" * 32))
        assert_closed(s)
    assert_healthy(broker, seeded)


def test_api_versions_unsupported_version_gets_v0_answer(broker, seeded):
    with h.connect(broker.bootstrap) as s:
        # a future ApiVersions version: request header v2 (flexible: an empty tagged-field
        # buffer after the client id), then a body that may be anything (KIP-511: not parsed)
        s.sendall(h.frame_request(h.API_VERSIONS, 99, 42, b"\x00" + b"\x07garbage\x00\x01\x02"))
        corr, err, ranges = h.parse_api_versions_v0(h.recv_frame(s))
        assert corr == 42
        assert err == UNSUPPORTED_VERSION
        assert h.API_VERSIONS in ranges
        lo, hi = ranges[h.API_VERSIONS]
        assert lo == 0 and hi >= 3
        # the connection stays usable: a v0 request is answered in full
        s.sendall(h.frame_request(h.API_VERSIONS, 0, 43))
        corr, err, ranges = h.parse_api_versions_v0(h.recv_frame(s))
        assert (corr, err) == (43, 0) and h.PRODUCE in ranges and 1 in ranges and METADATA in ranges
    assert_healthy(broker, seeded)


def _watermarks(broker, topic):
    c = h.consumer(broker.bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        c.close()


def test_produce_corrupt_crc(broker, seeded):
    before = _watermarks(broker, seeded)
    assert before == (0, len(SEED_RECORDS))
    with h.connect(broker.bootstrap) as s:
        # a good batch through the same raw encoder first: proves the request itself is fine
        good = h.build_record_batch([(b"raw", b"good raw batch")])
        s.sendall(h.frame_request(h.PRODUCE, 3, 1, h.produce_v3_body(seeded, 0, good)))
        ((topic, part, err, base),) = h.parse_produce_v3(h.recv_frame(s))
        assert (topic, part, err, base) == (seeded, 0, 0, len(SEED_RECORDS))
        bad = h.build_record_batch([(b"bad", b"corrupt batch %d" % i) for i in range(3)], corrupt_crc=True)
        s.sendall(h.frame_request(h.PRODUCE, 3, 2, h.produce_v3_body(seeded, 0, bad)))
        ((topic, part, err, _base),) = h.parse_produce_v3(h.recv_frame(s))
        assert (topic, part, err) == (seeded, 0, CORRUPT_MESSAGE)
        # and the connection still works
        s.sendall(h.frame_request(h.API_VERSIONS, 0, 3))
        assert h.parse_api_versions_v0(h.recv_frame(s))[:2] == (3, 0)
    assert _watermarks(broker, seeded) == (0, len(SEED_RECORDS) + 1)
    assert_healthy(broker, seeded, extra=1)


def test_produce_truncated_batch(broker, seeded):
    """A batch whose length field runs past the records bytes: CORRUPT_MESSAGE, nothing stored."""
    batch = h.build_record_batch([(b"x", b"truncated")])
    with h.connect(broker.bootstrap) as s:
        s.sendall(h.frame_request(h.PRODUCE, 3, 1, h.produce_v3_body(seeded, 0, batch[:-5])))
        try:
            ((_t, _p, err, _b),) = h.parse_produce_v3(h.recv_frame(s))
            assert err == CORRUPT_MESSAGE
        except ConnectionError:
            pass  # closing the connection is acceptable as well
    assert _watermarks(broker, seeded) == (0, len(SEED_RECORDS))
    assert_healthy(broker, seeded)


def test_many_bad_connections_at_once(broker, seeded):
    """Bad input on many connections while a good client works: the good one is served."""
    socks = []
    try:
        for i in range(50):
            s = h.connect(broker.bootstrap)
            s.sendall(struct.pack(">i", -1 - i) if i % 2 else h.frame_request(1000 + i, 0, i))
            socks.append(s)
        assert_healthy(broker, seeded)
    finally:
        for s in socks:
            s.close()
