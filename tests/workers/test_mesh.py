"""The worker mesh frame (workers/mesh.py): pickled meta + raw buffers, partial reads and
writes, and malformed or truncated frames (the link closes with a log line)."""
from __future__ import annotations

import asyncio
import logging
import pickle
import socket
import struct

import pytest

from mpbroker.protocol import api_keys as K
from workers import mesh
from workers.mesh import MeshFrameError, PeerLink, decode, encode
from workers.payloads import attach_records, detach_records


def _body(encoded) -> memoryview:
    chunks, total = encoded if isinstance(encoded, tuple) else (encoded, None)
    data = b"".join(bytes(c) for c in chunks)
    assert total is None or total == len(data)
    (size,) = struct.unpack_from("<I", data)
    assert size == len(data) - 4
    return memoryview(data)[4:]


def test_encode_decode_roundtrip_with_buffers():
    payload = bytearray(b"x" * 1000)
    chunks = encode({"op": "req", "id": 7}, [memoryview(payload)[:10], b"", b"abc"])
    msg = decode(_body(chunks))
    assert msg["op"] == "req" and msg["id"] == 7
    assert [bytes(b) for b in msg["raw"]] == [b"x" * 10, b"", b"abc"]
    assert not msg["raw"][0].readonly       # the owner appends in place


def test_decode_owned_gives_views_of_the_frame():
    chunks = encode({"a": 1}, [b"hello"])
    body = bytearray(_body(chunks))
    msg = decode(memoryview(body), owned=True)
    body[-5:] = b"HELLO"
    assert bytes(msg["raw"][0]) == b"HELLO"


def test_decode_without_buffers():
    assert decode(_body(encode(["any", 1]))) == ["any", 1]


@pytest.mark.parametrize("body", [
    b"",                                                          # shorter than its header
    struct.pack("<II", 100, 0) + b"x",                           # meta longer than frame
    struct.pack("<II", 1, 70000),                                 # too many buffers
    struct.pack("<III", 1, 1, 5) + b"N" + b"abc",                 # buffer lengths wrong
    struct.pack("<II", 3, 0) + b"zzz",                           # meta does not unpickle
    struct.pack("<III", len(pickle.dumps(1)), 1, 1) + pickle.dumps(1) + b"a",  # raw on int
])
def test_decode_malformed(body):
    with pytest.raises(MeshFrameError):
        decode(memoryview(body))


def _pair(received, closed=None):
    a, b = socket.socketpair()
    la = PeerLink(a, lambda m: None)
    lb = PeerLink(b, received.append, closed.append if closed is not None else None)
    return a, b, la, lb


async def _until(cond, timeout=5.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.005)


def test_many_messages_small_and_large_in_order():
    async def run():
        got = []
        _, _, la, lb = _pair(got)
        loop = asyncio.get_running_loop()
        la.attach(loop)
        lb.attach(loop)
        big = bytes(range(256)) * 8192            # 2 MiB: larger than the read chunk
        for i in range(60):
            la.send({"i": i}, [memoryview(big)[:i * 40000], b"t"] if i % 3 else ())
        await _until(lambda: len(got) == 60)
        for i, m in enumerate(got):
            assert m["i"] == i
            if i % 3:
                assert bytes(m["raw"][0]) == big[:i * 40000] and bytes(m["raw"][1]) == b"t"
            else:
                assert "raw" not in m
        assert la.bytes_sent == lb.bytes_received
        la.close()
        lb.close()
    asyncio.run(run())


def test_queued_writes_before_attach_are_sent():
    async def run():
        got = []
        _, _, la, lb = _pair(got)
        data = b"y" * (3 << 20)
        for i in range(4):                        # socket buffer fills: the rest queues
            la.send({"i": i}, [data])
        assert la.out
        loop = asyncio.get_running_loop()
        la.attach(loop)
        lb.attach(loop)
        await _until(lambda: len(got) == 4)
        assert [m["i"] for m in got] == [0, 1, 2, 3]
        assert all(bytes(m["raw"][0]) == data for m in got)
    asyncio.run(run())


@pytest.mark.parametrize("raw", [
    struct.pack("<I", mesh.MAX_FRAME + 1) + b"x" * 16,                  # absurd size
    struct.pack("<I", 9) + struct.pack("<II", 1, 0) + b"\xff",         # meta not a pickle
    struct.pack("<I", 8 + 4 + 1) + struct.pack("<III", 1, 1, 7) + b"N",  # lengths wrong
])
def test_bad_frame_closes_the_link_with_a_log_line(raw, caplog):
    async def run():
        got, closed = [], []
        a, _, _, lb = _pair(got, closed)
        lb.attach(asyncio.get_running_loop())
        a.sendall(raw)
        await _until(lambda: closed)
        assert lb.closed and not got
    with caplog.at_level(logging.ERROR, logger="workers.mesh"):
        asyncio.run(run())
    assert any("unreadable frame" in r.getMessage() for r in caplog.records)


def test_truncated_frame_then_eof_closes_the_link():
    async def run():
        got, closed = [], []
        a, _, _, lb = _pair(got, closed)
        lb.attach(asyncio.get_running_loop())
        chunks, _ = encode({"i": 1}, [b"z" * 200000])
        data = b"".join(bytes(c) for c in chunks)
        a.sendall(data[:100000])                  # a large frame, cut short
        await asyncio.sleep(0.05)
        assert not closed and not got
        a.close()
        await _until(lambda: closed)
        assert not got
    asyncio.run(run())


def test_handler_exception_does_not_close_the_link():
    async def run():
        got = []

        def on_message(m):
            got.append(m)
            raise RuntimeError("boom")
        a, b = socket.socketpair()
        la, lb = PeerLink(a, lambda m: None), PeerLink(b, on_message)
        loop = asyncio.get_running_loop()
        la.attach(loop)
        lb.attach(loop)
        la.send({"i": 1})
        la.send({"i": 2})
        await _until(lambda: len(got) == 2)
        assert not lb.closed
    asyncio.run(run())


def test_detach_and_attach_produce_records():
    recs = [memoryview(b"r3"), memoryview(b"r0")]
    body = {"acks": 1, "topic_data": [{"name": "a", "partition_data": [
        {"index": 3, "records": recs[0]}, {"index": 0, "records": recs[1]},
        {"index": 1, "records": None}]}]}
    sent, bufs = detach_records(K.PRODUCE, body)
    assert body["topic_data"][0]["partition_data"][0]["records"] is recs[0]   # untouched
    assert [p["records"] for p in sent["topic_data"][0]["partition_data"]] == [0, 1, None]
    assert bufs == recs
    got = decode(_body(encode({"body": sent}, bufs)))
    attach_records(got["body"], got["raw"])
    assert [None if p["records"] is None else bytes(p["records"])
            for p in got["body"]["topic_data"][0]["partition_data"]] == [b"r3", b"r0", None]
    with pytest.raises(ValueError):
        attach_records({"topic_data": [{"partition_data": [{"records": 5}]}]}, [])
    assert detach_records(K.FETCH, {"x": 1}) == ({"x": 1}, [])
