"""The process tree's channel framing (mpbroker/ipc.py): pickled meta + raw buffers,
partial reads and writes, malformed or truncated frames (the channel closes with a log
line), file descriptors passed with a frame, and blocking use without a loop."""
from __future__ import annotations

import asyncio
import logging
import os
import pickle
import socket
import struct

import pytest

from mpbroker import ipc
from mpbroker.ipc import Channel, FrameError, decode, encode


def _frame(msg) -> bytes:
    chunks, _ = encode(msg)
    return b"".join(bytes(c) for c in chunks)


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
    with pytest.raises(FrameError):
        decode(memoryview(body))


def _pair(received, closed=None):
    a, b = socket.socketpair()
    la = Channel(a, lambda m: None)
    lb = Channel(b, received.append, closed.append if closed is not None else None)
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
    struct.pack("<I", ipc.MAX_FRAME + 1) + b"x" * 16,                  # absurd size
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
    with caplog.at_level(logging.ERROR, logger="mpbroker.ipc"):
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
        await _until(lambda: lb.bytes_received == 100000)     # all of it read: still open
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
        la, lb = Channel(a, lambda m: None), Channel(b, on_message)
        loop = asyncio.get_running_loop()
        la.attach(loop)
        lb.attach(loop)
        la.send({"i": 1})
        la.send({"i": 2})
        await _until(lambda: len(got) == 2)
        assert not lb.closed
    asyncio.run(run())


def test_channel_frames_survive_any_split_and_carry_fds():
    a, b = socket.socketpair()
    got = []
    rx = Channel(b, got.append, pass_fds=True)
    tx = Channel(a, lambda m: None)
    data = _frame({"n": 1}) + _frame(list(range(1000)))
    for i in range(len(data)):                     # byte by byte
        a.send(data[i:i + 1])
        rx.poll(1)
    assert got == [{"n": 1}, list(range(1000))]
    r, w = os.pipe()
    tx.send({"op": "peer"}, fds=[w])
    tx.flush(1)
    while len(got) < 3:
        rx.poll(1)
    fd = rx.take_fd()
    os.close(w)
    os.write(fd, b"through the passed fd")
    assert os.read(r, 100) == b"through the passed fd"
    os.close(fd), os.close(r)


def test_channel_reports_eof():
    a, b = socket.socketpair()
    closed = []
    rx = Channel(b, lambda m: None, lambda ch: closed.append(True))
    a.close()
    rx.poll(1)
    assert closed == [True] and rx.closed


# ---------------------------------------------------------------- batched writes (the mesh)
class _CountingSocket(socket.socket):
    """A socket that counts its `sendmsg` calls."""
    sendmsgs = 0

    def sendmsg(self, *args):
        type(self).sendmsgs += 1
        return super().sendmsg(*args)


def _batched_pair(received, closed=None, pass_fds=False, loop=None):
    """A batching sender and a plain receiver (both attached to `loop` if given)."""
    a, b = socket.socketpair()
    _CountingSocket.sendmsgs = 0
    ca = _CountingSocket(a.family, a.type, fileno=a.detach())
    la = Channel(ca, lambda m: None, batch=True)
    lb = Channel(b, received.append, closed.append if closed is not None else None,
                 pass_fds=pass_fds)
    if loop is not None:
        la.attach(loop)
        lb.attach(loop)
    return la, lb


def test_batched_sends_of_one_iteration_leave_in_one_write_in_order():
    async def run():
        got = []
        la, lb = _batched_pair(got, loop=asyncio.get_running_loop())
        for i in range(5):
            la.send({"i": i}, [b"r" * i] if i % 2 else ())
        assert _CountingSocket.sendmsgs == 0          # nothing written inside the iteration
        await _until(lambda: len(got) == 5)
        assert _CountingSocket.sendmsgs == 1
        assert [m["i"] for m in got] == list(range(5))
        assert [bytes(m["raw"][0]) for m in got if "raw" in m] == [b"r", b"rrr"]
        la.send({"i": 5})                             # a later iteration: another write
        await _until(lambda: len(got) == 6)
        assert _CountingSocket.sendmsgs == 2 and la.bytes_sent == lb.bytes_received
    asyncio.run(run())


def test_batched_small_and_large_frames_past_the_iov_limit_keep_their_order():
    async def run():
        got = []
        la, lb = _batched_pair(got, loop=asyncio.get_running_loop())
        big = bytes(range(256)) * 4096                # 1 MiB
        n = ipc.IOV_CHUNKS                            # 4 chunks each: past one sendmsg's limit
        for i in range(n):
            la.send({"i": i}, [memoryview(big)[:i * 4000], b"t"])
        await _until(lambda: len(got) == n, timeout=20)
        assert [m["i"] for m in got] == list(range(n))
        assert all(bytes(m["raw"][0]) == big[:m["i"] * 4000] for m in got)
        assert la.bytes_sent == lb.bytes_received and not la.out
    asyncio.run(run())


def test_close_while_batched_drops_the_frames_and_the_write():
    async def run():
        got, closed = [], []
        la, lb = _batched_pair(got, closed, loop=asyncio.get_running_loop())
        la.send({"i": 1})
        la.send({"i": 2})
        la.close()
        with pytest.raises(ConnectionError):
            la.send({"i": 3})
        await _until(lambda: closed)                  # the peer sees EOF, and no frame
        assert not got and _CountingSocket.sendmsgs == 0
    asyncio.run(run())


def test_flush_and_fds_write_the_batched_frames_first():
    async def run():
        got = []
        la, lb = _batched_pair(got, pass_fds=True)
        loop = asyncio.get_running_loop()
        la.attach(loop)
        la.send({"i": 1})
        la.send({"i": 2})
        la.flush(1)                                   # no loop iteration needed
        assert _CountingSocket.sendmsgs == 1 and not la._batched
        la.send({"i": 3})
        r, w = os.pipe()
        la.send({"i": 4}, fds=[w])                    # written now, after frame 3
        assert _CountingSocket.sendmsgs == 3
        lb.attach(loop)
        await _until(lambda: len(got) == 4)
        assert [m["i"] for m in got] == [1, 2, 3, 4]
        fd = lb.take_fd()
        os.close(w), os.close(fd), os.close(r)
        await asyncio.sleep(0)                        # the scheduled batch finds nothing
        assert _CountingSocket.sendmsgs == 3
        la.send({"i": 5})
        la.write_batched()                            # written now (an owner closing)
        la.close()
        await _until(lambda: len(got) == 5)
        assert _CountingSocket.sendmsgs == 4 and got[-1] == {"i": 5}
    asyncio.run(run())


def test_an_unbatched_channel_writes_in_send():
    async def run():
        a, b = socket.socketpair()
        _CountingSocket.sendmsgs = 0
        la = Channel(_CountingSocket(a.family, a.type, fileno=a.detach()), lambda m: None)
        la.attach(asyncio.get_running_loop())
        la.send({"i": 1})
        assert _CountingSocket.sendmsgs == 1
        la.close(), b.close()
    asyncio.run(run())


def test_advance_cuts_a_buffer_list_after_a_partial_send():
    import array as arr

    from mpbroker.ipc import advance

    ints = memoryview(arr.array("i", [1, 2]))           # 8 bytes, items of 4
    rest = advance([b"ab", ints, b"cd"], 5)
    assert [bytes(b) for b in rest] == [ints.tobytes()[3:], b"cd"]
    assert advance([b"ab", b"cd"], 2) == [b"cd"]       # a whole buffer sent: the rest as it was
    assert advance([b"ab"], 2) == [] and advance([], 0) == []
    assert [bytes(b) for b in advance([arr.array("i", [1, 2])], 5)] == [arr.array("i", [1, 2]).tobytes()[5:]]


def test_descriptors_the_kernel_will_not_pass_leave_the_channel_open():
    """A frame whose fd cannot be passed (here a closed one: EBADF; ETOOMANYREFS and
    ENOMEM alike) is not sent and the channel stays open; received fds are close-on-exec."""
    a, b = socket.socketpair()
    got = []
    rx = Channel(b, got.append, pass_fds=True)
    tx = Channel(a, lambda m: None)
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(ConnectionError, match="cannot pass file descriptors"):
        tx.send({"op": "conn"}, fds=[w])
    assert not tx.closed
    r2, w2 = os.pipe()
    tx.send({"op": "conn"}, fds=[w2])
    tx.send({"op": "after"})
    while len(got) < 2:
        rx.poll(1)
    assert got == [{"op": "conn"}, {"op": "after"}]
    fd = rx.take_fd()
    assert not os.get_inheritable(fd)
    for x in (fd, r, r2, w2):
        os.close(x)
