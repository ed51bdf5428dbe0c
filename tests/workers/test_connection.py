"""Connection memory (issue #15): reads charged to the worker's pool, muting while it is
exhausted and resuming when answered requests release it; one shared read buffer; the
charge returned on close; abort() wakes a muted reader; last_active follows traffic.
How a front sends another worker's FileSlices: only ever the bytes of the file the owner
read, on real files and a real socket pair. The send path (issue #18): a response with its
small slices in one sendmsg, large ones by sendfile, partial sends, IOV_MAX, files that
shrank or went away; the reader callback kept between reads, no recv after a short read;
responses ready together (pipelined requests answered at once, answers that arrive
together) leave in one send, in request order; an answer that comes later (EncodedLater)
leaves from its future's done callback, the write loop left asleep, unless it cannot go
out at once."""
import asyncio
import os
import socket
import struct

import uvloop

from mpbroker.protocol import framing
from storage.slices import FileSlice
from workers.answers import EncodedLater
from workers.connection import INLINE_SLICE_MAX, Connection, ReadBuffer
from workers.memory_pool import MemoryPool
from workers.payloads import pin_records

FRAME = 1000


def request(cid: int) -> bytes:
    head = framing.encode_request_header(18, 0, cid, "c")
    body = head + b"\0" * (FRAME - len(head))
    return struct.pack(">i", len(body)) + body


class HoldingDispatcher:
    """Answers each request only when the test resolves its future."""

    def __init__(self):
        self.futures: list[asyncio.Future] = []

    def dispatch(self, ctx, frame, pos):
        fut = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


class Answering:
    """Answers each request at once with its correlation id."""

    def dispatch(self, ctx, frame, pos):
        return [struct.pack(">ii", 4, ctx.correlation_id)]


class Mixed:
    """Holds request `held` until the test resolves `self.held`; answers the others at
    once, request `big` with 4 MiB (more than a socket takes in one send)."""

    def __init__(self, held: int, big: int):
        self.held_cid, self.big = held, big
        self.held = None

    def dispatch(self, ctx, frame, pos):
        cid = ctx.correlation_id
        if cid == self.held_cid:
            self.held = asyncio.get_running_loop().create_future()
            return self.held
        body = struct.pack(">i", cid) + (b"x" * (1 << 22) if cid == self.big else b"")
        return [struct.pack(">i", len(body)), body]


async def until(cond, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def run(test, loop_factory=None):
    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        try:
            await test(a, b)
        finally:
            b.close()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())


def test_exhausted_pool_mutes_reads_until_requests_are_answered():
    async def test(a, b):
        pool = MemoryPool(3 * (FRAME + 4) - 500)
        disp = HoldingDispatcher()
        conn = Connection(a, disp, 1 << 20, pool=pool, read_buffer=ReadBuffer(4096))
        task = asyncio.ensure_future(conn.serve())
        b.sendall(b"".join(request(i) for i in range(5)))
        await until(lambda: conn.muted)
        assert len(disp.futures) == 2 and pool.used == pool.capacity
        assert conn.charged == pool.used
        disp.futures[0].set_result([b"answer-0"])
        await until(lambda: len(disp.futures) == 3)
        assert pool.used <= pool.capacity
        for i in range(1, 5):
            await until(lambda: len(disp.futures) > i)
            disp.futures[i].set_result([b"x"])
        await until(lambda: pool.used == 0 and not conn.pending)
        assert conn.bytes_in == 5 * (FRAME + 4)
        b.close()
        await asyncio.wait_for(task, 5)
        assert pool.used == 0
    run(test)


def test_a_pool_full_of_incomplete_frames_lets_one_finish_over_its_capacity():
    """Two connections each hold part of a request and together fill the pool: no
    answer can release anything, so one reads the rest of its request over the
    capacity (Kafka's non-strict pool); once answered, the other proceeds."""
    async def test(a, b):
        c, d = socket.socketpair()
        c.setblocking(False)
        pool = MemoryPool(1500)
        disp = HoldingDispatcher()
        one = Connection(a, disp, 1 << 20, pool=pool, read_buffer=ReadBuffer(4096))
        two = Connection(c, disp, 1 << 20, pool=pool, read_buffer=ReadBuffer(4096))
        tasks = [asyncio.ensure_future(x.serve()) for x in (one, two)]
        r1, r2 = request(1), request(2)
        b.sendall(r1[:800])
        await until(lambda: one.charged == 800)
        d.sendall(r2[:800])
        # two read 700 and filled the pool with incomplete frames: it goes on, alone,
        # over the capacity (the 100 bytes it has); one is muted
        await until(lambda: pool.finisher is two and two.charged == 800)
        assert pool.used == 1600 and pool.partial == 1600 and pool.stalled()
        b.sendall(r1[800:])
        d.sendall(r2[800:])
        await until(lambda: len(disp.futures) == 1)        # two's request, whole
        assert two.charged == len(r2) and pool.finisher is None
        assert not pool.stalled()                          # a request holds memory now
        await until(lambda: one.muted)                     # so one waits for its answer
        disp.futures[0].set_result([b"answer"])
        await until(lambda: len(disp.futures) == 2)
        disp.futures[1].set_result([b"answer"])
        await until(lambda: pool.used == 0 and pool.partial == 0)
        b.close()
        d.close()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert pool.used == 0 and pool.partial == 0 and pool.finisher is None
    run(test)


def test_a_request_larger_than_the_pool_is_read_whole():
    """queued.max.request.bytes below one request: the request is read all the same (no
    other frame holds memory), as Kafka's pool lets a request take more than is left."""
    async def test(a, b):
        pool = MemoryPool(10)
        disp = HoldingDispatcher()
        conn = Connection(a, disp, 1 << 20, pool=pool, read_buffer=ReadBuffer(4096))
        task = asyncio.ensure_future(conn.serve())
        b.sendall(request(1))
        await until(lambda: len(disp.futures) == 1)
        assert pool.used == FRAME + 4 and pool.partial == 0 and pool.finisher is None
        disp.futures[0].set_result([b"answer"])
        await until(lambda: pool.used == 0)
        b.close()
        await asyncio.wait_for(task, 5)
    run(test)


def test_close_returns_the_charge_of_a_partial_frame_and_pending_requests():
    async def test(a, b):
        pool = MemoryPool(-1)
        disp = HoldingDispatcher()
        conn = Connection(a, disp, 200 << 20, pool=pool)
        task = asyncio.ensure_future(conn.serve())
        b.sendall(request(1) + struct.pack(">i", 100 << 20) + b"partial")
        await until(lambda: len(disp.futures) == 1 and conn.charged == FRAME + 4 + 11)
        assert conn.frames.buffered == 11                 # not the 100 MB declared
        conn.abort()
        disp.futures[0].set_result([b"late"])
        await asyncio.wait_for(task, 5)
        assert pool.used == 0 and conn.charged == 0
    run(test)


def test_abort_wakes_a_muted_reader_and_last_active_follows_traffic():
    async def test(a, b):
        now = [100.0]
        # an unanswered request holds most of the pool: the next frame's first 10 bytes
        # fill it, and the reader waits for that answer, muted
        pool = MemoryPool(len(request(1)) + 10)
        disp = HoldingDispatcher()
        conn = Connection(a, disp, 1 << 20, pool=pool, clock=lambda: now[0])
        task = asyncio.ensure_future(conn.serve())
        now[0] = 150.0
        b.sendall(request(1) + b"\0\0\0\x40" + b"z" * 20)
        await until(lambda: conn.muted)
        assert conn.last_active == 150.0 and pool.used == pool.capacity
        conn.abort()
        disp.futures[0].set_result([b"late"])     # in flight: answered, then closed
        await asyncio.wait_for(task, 5)
        assert pool.used == 0
    run(test)


def test_a_throttled_connection_answers_then_reads_nothing_until_the_throttle_ends():
    """KIP-219 (workers/quotas.py): the response goes out at once, the next request is
    not read until the connection's clock passes the throttle time."""
    class Throttling:
        def __init__(self):
            self.seen = 0

        def dispatch(self, ctx, frame, pos):
            self.seen += 1
            if self.seen == 1:
                ctx.connection.throttle(50)
            return [struct.pack(">i", 4) + struct.pack(">i", self.seen)]

    async def test(a, b):
        now = [100.0]
        disp = Throttling()
        conn = Connection(a, disp, 1 << 20, clock=lambda: now[0])
        task = asyncio.ensure_future(conn.serve())
        b.sendall(request(0))
        await until(lambda: disp.seen == 1 and conn._waiter is not None)
        b.sendall(request(1))
        loop = asyncio.get_running_loop()
        answer = await asyncio.wait_for(loop.sock_recv(b, 8), 5)
        assert answer[4:] == struct.pack(">i", 1)             # answered at once
        assert conn.throttled_until == 100.05 and disp.seen == 1
        now[0] = 101.0                                        # the throttle time passed
        await until(lambda: disp.seen == 2)
        conn.abort()
        await asyncio.wait_for(task, 5)
    run(test)


# ------------------------------------------------------------------ slices at the front
def _write(path, data: bytes) -> FileSlice:
    """A new file at `path` (replacing any) and a slice of it as an owner hands it out."""
    tmp = str(path) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    st = os.stat(path)
    return FileSlice(str(path), 0, len(data), -1, st.st_dev, st.st_ino)


def _front(test):
    """Run `test(conn, peer)` with a real Connection over a socket pair."""
    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        conn = Connection(a, dispatcher=None, max_request_bytes=1 << 20)
        try:
            return await test(conn, b)
        finally:
            conn._close()
            b.close()
    return asyncio.run(main())


def _recv(peer, n):
    peer.settimeout(2)
    out = b""
    while len(out) < n:
        out += peer.recv(n - len(out))
    return out


def test_front_never_sends_another_files_bytes_at_the_same_path(tmp_path):
    seg = tmp_path / "00000000000000000000.log"
    old = _write(seg, b"OLD-bytes")

    async def test(conn, peer):
        await conn._sendfile(conn.pin(old))
        assert _recv(peer, 9) == b"OLD-bytes"
        assert len(conn._files) == 1                 # the handle is kept for the path
        os.unlink(seg)                               # the topic is deleted ...
        new = _write(seg, b"NEW-bytes")              # ... and created again
        assert new.ino != old.ino                    # (the cached handle keeps old's inode)
        await conn._sendfile(conn.pin(new))          # the cached handle is not reused
        assert _recv(peer, 9) == b"NEW-bytes"
        # an answer read before the deletion, arriving now: its file is gone
        assert conn.pin(old) is None
        data = pin_records({"partition_index": 0, "error_code": 0, "high_watermark": 5,
                            "records": [old]}, conn)
        assert data["error_code"] == 6 and data["records"] == b""   # NOT_LEADER_OR_FOLLOWER
        from workers.connection import StaleSlice
        try:
            await conn._sendfile(old)                # found stale only while sending
        except StaleSlice:
            pass
        else:
            raise AssertionError("a stale slice was sent")
    _front(test)


def test_front_reads_a_compacted_segment_under_its_retired_name(tmp_path):
    seg = tmp_path / "00000000000000000000.log"
    old = _write(seg, b"before-compaction")

    async def test(conn, peer):
        await conn._sendfile(conn.pin(old))
        assert _recv(peer, 17) == b"before-compaction"
        # compaction: old -> .deleted (still there for file.delete.delay.ms), cleaned
        # segment swapped in at the same name
        os.rename(seg, str(seg) + ".deleted")
        new = _write(seg, b"after")
        await conn._sendfile(conn.pin(new))
        assert _recv(peer, 5) == b"after"
        # a slice read before the swap is still answered from the retired file
        await conn._sendfile(old)
        assert _recv(peer, 17) == b"before-compaction"
        os.unlink(str(seg) + ".deleted")
        assert conn.pin(old) is None
    _front(test)


def test_local_slice_whose_fd_number_was_reused_is_not_sent_from_the_wrong_file(tmp_path):
    seg, other = tmp_path / "a.log", tmp_path / "b.log"
    mine = _write(seg, b"mine")
    _write(other, b"else")

    async def test(conn, peer):
        fd = os.open(seg, os.O_RDONLY)
        local = mine._replace(fd=fd)                 # a local partition's own segment fd
        await conn._sendfile(local)
        assert _recv(peer, 4) == b"mine"
        os.close(fd)                                 # the segment closed (moved away) ...
        fd2 = os.open(other, os.O_RDONLY)            # ... and its fd number reused
        try:
            assert fd2 == fd
            await conn._sendfile(local)              # reopened by path: the right file
            assert _recv(peer, 4) == b"mine"
        finally:
            os.close(fd2)
    _front(test)


def test_idle_file_handles_are_closed(tmp_path, monkeypatch):
    from workers import connection
    monkeypatch.setattr(connection, "FILE_IDLE_S", 0.05)
    sl = _write(tmp_path / "x.log", b"x")

    async def test(conn, peer):
        await conn._sendfile(sl)
        fd = conn._files[sl.path][0]
        await until(lambda: conn._files == {})       # the sweep closed the idle handle
        try:
            os.fstat(fd)
        except OSError:
            pass
        else:
            assert os.readlink(f"/proc/self/fd/{fd}") != sl.path, "handle still open"
    _front(test)


# ------------------------------------------------------------------ SASL gating (issue #17)
class SaslDispatcher:
    """The real SASL handlers for keys 17/36; any other request answers b"ok"."""

    def __init__(self):
        self.served = []

    def dispatch(self, ctx, frame, pos):
        from mpbroker.protocol import codec
        from workers.handlers import sasl_authenticate, sasl_handshake
        handlers = {17: sasl_handshake.handle, 36: sasl_authenticate.handle}
        self.served.append(ctx.api_key)
        if ctx.api_key in handlers:
            req = codec.decode_request(ctx.api_key, ctx.api_version, frame, pos)
            body = handlers[ctx.api_key](None, ctx, req)

            async def encode(body):
                body = await body if asyncio.iscoroutine(body) else body
                return framing.frame_response(ctx.api_key, ctx.api_version, ctx.correlation_id,
                                              codec.encode_response(ctx.api_key, ctx.api_version, body))
            return asyncio.ensure_future(encode(body))
        tail = b"ok" + ctx.principal.encode()
        return [struct.pack(">ii", 4 + len(tail), ctx.correlation_id), tail]


def sasl_security():
    from workers.listener_security import ListenerSecurity
    return ListenerSecurity.from_config(
        {"sasl.enabled.mechanisms": "PLAIN", "connection.failed.authentication.delay.ms": 0,
         "sasl.jaas.config": 'x.PlainLoginModule required user_alice="pw";'},
        "SASL_PLAINTEXT", "SASL_PLAINTEXT")


def sasl_request(key, version, cid, body: dict) -> bytes:
    from mpbroker.protocol import codec
    data = framing.encode_request_header(key, version, cid, "c") + bytes(
        codec.encode_request(key, version, body))
    return struct.pack(">i", len(data)) + data


async def read_frame(b) -> bytes:
    loop = asyncio.get_running_loop()
    head = b""
    while len(head) < 4:
        chunk = await loop.sock_recv(b, 4 - len(head))
        assert chunk, "closed"
        head += chunk
    n = struct.unpack(">i", head)[0]
    out = b""
    while len(out) < n:
        chunk = await loop.sock_recv(b, n - len(out))
        assert chunk, "closed"
        out += chunk
    return out


def test_sasl_listener_closes_on_a_request_before_authentication():
    async def test(a, b):
        disp = SaslDispatcher()
        conn = Connection(a, disp, 1 << 20, security=sasl_security())
        task = asyncio.ensure_future(conn.serve())
        b.sendall(sasl_request(3, 1, 1, {"topics": None}))       # Metadata
        await asyncio.wait_for(task, 5)
        assert disp.served == [] and conn.closed
    run(test)


def test_sasl_v1_then_requests_carry_the_principal_and_a_failure_closes():
    async def test(a, b):
        disp = SaslDispatcher()
        conn = Connection(a, disp, 1 << 20, security=sasl_security())
        task = asyncio.ensure_future(conn.serve())
        b.sendall(sasl_request(17, 1, 1, {"mechanism": "PLAIN"}))
        await read_frame(b)
        b.sendall(sasl_request(36, 1, 2, {"auth_bytes": b"\0alice\0pw"}))
        await read_frame(b)
        b.sendall(sasl_request(3, 1, 3, {"topics": None}))
        assert (await read_frame(b)).endswith(b"okUser:alice")
        assert conn.principal == "User:alice"
        b.close()
        await asyncio.wait_for(task, 5)

    async def failing(a, b):
        conn = Connection(a, SaslDispatcher(), 1 << 20, security=sasl_security())
        task = asyncio.ensure_future(conn.serve())
        b.sendall(sasl_request(17, 1, 1, {"mechanism": "PLAIN"}))
        await read_frame(b)
        b.sendall(sasl_request(36, 1, 2, {"auth_bytes": b"\0alice\0nope"}))
        answer = await read_frame(b)
        assert b"Invalid username or password" in answer
        await asyncio.wait_for(task, 5)              # closed after the answer
        assert conn.principal == "User:ANONYMOUS"
    run(test)
    run(failing)


def test_sasl_v0_bare_token_and_an_oversized_frame():
    async def test(a, b):
        conn = Connection(a, SaslDispatcher(), 1 << 20, security=sasl_security())
        task = asyncio.ensure_future(conn.serve())
        b.sendall(sasl_request(17, 0, 1, {"mechanism": "PLAIN"}))
        await read_frame(b)
        token = b"\0alice\0pw"
        b.sendall(struct.pack(">i", len(token)) + token)
        assert await read_frame(b) == b""
        assert conn.principal == "User:alice"
        b.close()
        await asyncio.wait_for(task, 5)

    async def oversized(a, b):
        sec = sasl_security()
        sec.max_receive_size = 100
        conn = Connection(a, SaslDispatcher(), 1 << 20, security=sec)
        task = asyncio.ensure_future(conn.serve())
        b.sendall(sasl_request(17, 1, 1, {"mechanism": "P" * 200}))
        await asyncio.wait_for(task, 5)
        assert conn.closed
    run(test)
    run(oversized)


# ------------------------------------------------------------------ the send path (issue #18)
class CountingSocket:
    """A socket stand-in: `sendmsg` and `send` take at most `step` bytes per call
    (partial sends); records the count of buffers and the flags of each call."""

    def __init__(self, sock, step=1 << 30):
        self.sock, self.step, self.calls = sock, step, []

    def sendmsg(self, buffers, ancdata=(), flags=0):
        data = b"".join(bytes(b) for b in buffers)[:self.step]
        self.calls.append((len(buffers), flags))
        return self.sock.send(data)

    def send(self, data, flags=0):
        return self.sendmsg([data], (), flags)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def _response(tmp_path, sizes):
    """[head, (bytes, slice) per size] of real files and the bytes they stand for."""
    chunks, expect = [b"HEAD"], b"HEAD"
    for i, size in enumerate(sizes):
        data = bytes([65 + i % 26]) * size
        sl = _write(tmp_path / f"{i}.log", b"xx" + data + b"yy")._replace(position=2, length=size)
        part = f"<p{i}>".encode()
        chunks += [bytearray(part), sl]
        expect += part + data
    return chunks, expect


def _send(tmp_path, sizes, step=1 << 30):
    chunks, expect = _response(tmp_path, sizes)

    async def test(conn, peer):
        conn.sock = CountingSocket(conn.sock, step)
        task = asyncio.ensure_future(conn._send_chunks(chunks))
        got = await asyncio.get_running_loop().run_in_executor(None, _recv, peer, len(expect))
        await asyncio.wait_for(task, 5)
        assert got == expect and conn.bytes_out == len(expect)
        return conn.sock.calls
    return _front(test)


def test_small_slices_go_out_with_the_response_bytes_in_one_sendmsg(tmp_path):
    calls = _send(tmp_path, [10, 1000, 4096])
    assert calls == [(7, 0)]


def test_large_slices_go_by_sendfile_after_bytes_sent_with_msg_more(tmp_path):
    from workers.connection import INLINE_SLICE_MAX
    big = INLINE_SLICE_MAX + 1
    calls = _send(tmp_path, [big, big])
    assert calls == [(2, socket.MSG_MORE), (1, socket.MSG_MORE)]    # head+<p0>, <p1>


def test_mixed_small_and_large_slices(tmp_path):
    from workers.connection import INLINE_SLICE_MAX
    calls = _send(tmp_path, [5, INLINE_SLICE_MAX + 7, 9, 11])
    assert calls == [(4, socket.MSG_MORE), (4, 0)]


def test_partial_sendmsg_advances_over_the_buffers(tmp_path):
    calls = _send(tmp_path, [3, 100, 7, 2000], step=5)
    assert len(calls) > 10 and all(flags == 0 for _, flags in calls)


def test_partial_sends_when_the_socket_is_full(tmp_path):
    # a 64 KiB-ish socket buffer and a peer that reads only later: EAGAIN, then writable
    _send(tmp_path, [30000] * 40)


def test_inlined_bytes_are_sent_before_the_batch_limit_is_passed(tmp_path, monkeypatch):
    from workers import connection
    monkeypatch.setattr(connection, "INLINE_BATCH_MAX", 2500)
    calls = _send(tmp_path, [1000, 1000, 1000, 1000])
    assert calls == [(6, socket.MSG_MORE), (3, 0)]    # HEAD <p0> s0 <p1> s1 <p2> | s2 <p3> s3


def test_more_buffers_than_iov_max(tmp_path, monkeypatch):
    from workers import connection
    monkeypatch.setattr(connection, "IOV_MAX", 4)
    calls = _send(tmp_path, [1] * 5)                 # 11 buffers: 4 + 4 + 3
    assert calls == [(4, socket.MSG_MORE), (4, socket.MSG_MORE), (3, 0)]
    assert connection.advance([b"ab", b"cd", b"ef"], 3)[0].tobytes() == b"d"
    assert connection.advance([b"ab", b"cd"], 4) == []


def test_a_small_slice_of_a_file_that_shrank_or_went_away(tmp_path):
    from workers.connection import StaleSlice
    seg = tmp_path / "s.log"
    sl = _write(seg, b"0123456789")

    async def test(conn, peer):
        os.truncate(seg, 4)                          # shorter than the slice now
        try:
            await conn._send_chunks([b"head", sl])
        except StaleSlice:
            raise AssertionError("same file, only shorter: not stale")
        except ConnectionAbortedError:
            pass
        else:
            raise AssertionError("a short slice was sent")
        other = tmp_path / "o.log"
        gone = _write(other, b"0123456789")
        _write(other, b"0123456789")                 # another file at the path
        try:
            await conn._send_chunks([b"head", gone])
        except StaleSlice:
            pass
        else:
            raise AssertionError("a stale slice was sent")
        peer.setblocking(False)
        try:
            assert peer.recv(100) == b""
        except BlockingIOError:
            pass                                     # nothing of either response left
    _front(test)


def test_the_reader_callback_stays_while_reading_and_goes_while_waiting_for_else(monkeypatch):
    """The loop's reader stays registered between reads and is removed whenever the
    connection waits for something else (in-flight limit, pool, throttle) and on close:
    a level-triggered callback nobody waits on would fire on every loop iteration."""
    from workers import connection
    monkeypatch.setattr(connection, "MAX_IN_FLIGHT", 2)

    async def test(a, b):
        disp = HoldingDispatcher()
        conn = Connection(a, disp, 1 << 20)
        task = asyncio.ensure_future(conn.serve())
        b.sendall(request(0))
        await until(lambda: len(disp.futures) == 1 and conn._readable is not None)
        assert conn._reading
        b.sendall(request(1))
        await until(lambda: len(disp.futures) == 2 and not conn._reading)   # in-flight limit
        disp.futures[0].set_result([b"a"])
        disp.futures[1].set_result([b"b"])
        await until(lambda: not conn.pending and conn._readable is not None)
        assert conn._reading
        conn.throttle(10_000)
        b.sendall(request(2))
        await until(lambda: conn._waiter is not None and conn._readable is None)
        assert not conn._reading and len(disp.futures) == 2                 # throttled
        conn.abort()
        await asyncio.wait_for(task, 5)
        assert not conn._reading and conn.closed
    run(test)


class CountingSends:
    """The connection's socket, counting the system calls that send and receive."""

    def __init__(self, sock):
        self.sock, self.sends, self.recvs = sock, 0, 0

    def recv_into(self, *a):
        self.recvs += 1
        return self.sock.recv_into(*a)

    def send(self, *a):
        self.sends += 1
        return self.sock.send(*a)

    def sendmsg(self, *a):
        self.sends += 1
        return self.sock.sendmsg(*a)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def _spy_write_loop(conn) -> list:
    """The chunk counts of what the write loop sends (`_send_chunks` calls)."""
    sent = []
    send_chunks = conn._send_chunks

    async def spy(chunks):
        sent.append(len(chunks))
        await send_chunks(chunks)
    conn._send_chunks = spy
    return sent


def test_a_short_read_waits_for_the_next_bytes_without_another_recv():
    """One recv per request that arrives alone (a recv failing with EAGAIN after each
    was a system call per request), and a request sent meanwhile is still read."""
    async def test(a, b):
        conn = Connection(a, Answering(), 1 << 20)
        conn.sock = CountingSends(a)
        task = asyncio.ensure_future(conn.serve())
        for cid in range(3):
            b.sendall(request(cid))
            assert (await read_frame(b)) == struct.pack(">i", cid)
            await until(lambda: conn._readable is not None)
        assert conn.sock.recvs == 3
        b.sendall(request(7) + request(8))
        assert (await read_frame(b)) + (await read_frame(b)) == struct.pack(">ii", 7, 8)
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)  # the worker's loop (asyncio's may wake a reader twice)


def test_an_answer_ready_at_once_leaves_from_the_reader_in_order():
    """A response answered at once with nothing owed before it is sent by the reader
    (the write loop is not used for it); behind an answer not ready yet it waits its
    turn; a partial send leaves the rest to the write loop, in order."""
    async def test(a, b):
        disp = Mixed(held=1, big=3)
        conn = Connection(a, disp, 1 << 20)
        chunked = _spy_write_loop(conn)
        task = asyncio.ensure_future(conn.serve())
        b.sendall(request(0))
        assert (await read_frame(b)) == struct.pack(">i", 0) and chunked == []   # direct
        b.sendall(request(1) + request(2))
        await until(lambda: len(conn.pending) == 2)      # 2 waits behind the held 1
        disp.held.set_result([struct.pack(">ii", 4, 1)])
        assert (await read_frame(b)) + (await read_frame(b)) == struct.pack(">ii", 1, 2)
        assert chunked == [3]           # 2 was ready behind 1: both in one send
        b.sendall(request(3))                            # 4 MiB: more than the socket takes
        body = await read_frame(b)
        assert body[:4] == struct.pack(">i", 3) and len(body) == 4 + (1 << 22)
        assert len(chunked) == 2                         # the rest went by the write loop
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)


def test_before_authentication_no_frame_over_the_sasl_limit_is_read_past_the_pool():
    """A pool filled by incomplete frames lets one finish over its capacity, but not an
    unauthenticated connection's frame larger than sasl.server.max.receive.size (512
    KiB): it stays muted, its bytes unread."""
    async def test(a, b):
        pool = MemoryPool(1000)
        conn = Connection(a, SaslDispatcher(), 4 << 20, pool=pool, security=sasl_security(),
                          read_buffer=ReadBuffer(4096))
        task = asyncio.ensure_future(conn.serve())
        b.sendall(struct.pack(">i", 1 << 20) + b"z" * 3000)     # declares 1 MiB
        await until(lambda: conn.muted)
        assert pool.used == 1000 and pool.stalled() and pool.finisher is None
        conn.abort()
        await asyncio.wait_for(task, 5)
        assert pool.used == 0 and pool.partial == 0
    run(test)




def test_pipelined_requests_answered_at_once_leave_in_one_send():
    """A producer pipelines its Produce requests (librdkafka: one per partition); those
    of one read answered at once go out together in one sendmsg, in order, and their
    pool charge is returned."""
    async def test(a, b):
        pool = MemoryPool(1 << 20)
        conn = Connection(a, Answering(), 1 << 20, pool=pool)
        conn.sock = CountingSends(a)
        b.sendall(b"".join(request(cid) for cid in range(10)))
        task = asyncio.ensure_future(conn.serve())
        got = b"".join([await read_frame(b) for _ in range(10)])
        assert got == struct.pack(">10i", *range(10))
        assert conn.sock.sends == 1
        await until(lambda: pool.used == 0)
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)


def test_what_the_socket_does_not_take_of_a_read_s_answers_goes_first():
    """The answers of one read are more than the socket takes: the rest leaves from the
    write loop before an answer owed behind them, in request order."""
    async def test(a, b):
        disp = Mixed(held=2, big=0)
        conn = Connection(a, disp, 1 << 20)
        b.sendall(request(0) + request(1) + request(2) + request(3))
        task = asyncio.ensure_future(conn.serve())
        await until(lambda: disp.held is not None)
        disp.held.set_result([struct.pack(">ii", 4, 2)])
        first = await read_frame(b)
        assert first[:4] == struct.pack(">i", 0) and len(first) == 4 + (1 << 22)
        rest = b"".join([await read_frame(b) for _ in range(3)])
        assert rest == struct.pack(">3i", 1, 2, 3)
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)


def test_answers_taken_before_a_frame_that_closes_the_connection_still_leave():
    """A read holds answered requests and then an unreadable frame: the answers go out
    before the connection closes."""
    async def test(a, b):
        conn = Connection(a, Answering(), 1 << 20)
        bad = struct.pack(">i", 1) + b"\xff"          # a header that cannot be parsed
        b.sendall(request(0) + request(1) + bad)
        task = asyncio.ensure_future(conn.serve())
        assert (await read_frame(b)) + (await read_frame(b)) == struct.pack(">ii", 0, 1)
        await asyncio.wait_for(task, 5)
        assert conn.closed
    run(test, uvloop.new_event_loop)


def test_answers_ready_together_leave_from_the_write_loop_in_one_send():
    """Answers that become ready together (one mesh reply answering several requests)
    leave in one send; one not ready yet stops the gathering, a failed one is not
    taken with the others."""
    async def test(a, b):
        disp = HoldingDispatcher()
        conn = Connection(a, disp, 1 << 20)
        conn.sock = CountingSends(a)
        task = asyncio.ensure_future(conn.serve())
        b.sendall(b"".join(request(cid) for cid in range(4)))
        await until(lambda: len(disp.futures) == 4)
        for cid in (1, 2, 0):           # 3 is not ready yet
            disp.futures[cid].set_result([struct.pack(">ii", 4, cid)])
        got = b"".join([await read_frame(b) for _ in range(3)])
        assert got == struct.pack(">3i", 0, 1, 2) and conn.sock.sends == 1
        disp.futures[3].set_result([struct.pack(">ii", 4, 3)])
        assert (await read_frame(b)) == struct.pack(">i", 3) and conn.sock.sends == 2
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)


class WriteLoopOnly(Connection):
    """A connection whose answers all go by the write loop, as through TLS."""
    DIRECT_SEND = False


class LaterDispatcher:
    """Answers each request later: an EncodedLater whose future the test resolves with
    the chunks to send (or an exception); `finish` as the real dispatcher's does."""

    def __init__(self, finish=None):
        self.futures: list[asyncio.Future] = []
        self.finish = finish or (lambda fut: fut.result())

    def dispatch(self, ctx, frame, pos):
        fut = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return EncodedLater(fut, self.finish)


async def _answers_owed(cls, disp, a, b, n: int = 1):
    """A `cls` connection serving `disp` with requests 0..n-1 dispatched and their
    answers owed: (connection, its serve task, the connections its close hook was
    called with)."""
    closed = []
    conn = cls(a, disp, 1 << 20, on_close=closed.append)
    task = asyncio.ensure_future(conn.serve())
    b.sendall(b"".join(request(cid) for cid in range(n)))
    await until(lambda: len(disp.futures) == n)
    return conn, task, closed


def _answer(cid: int) -> list:
    return [struct.pack(">ii", 4, cid)]


def test_later_answers_leave_from_their_callback_in_order_and_together():
    """A later answer goes out from its future's done callback, never through the write
    loop; one behind an answer not ready yet waits for it; answers ready together
    leave in one send."""
    async def test(a, b):
        disp = LaterDispatcher()
        pool = MemoryPool(1 << 20)
        conn = Connection(a, disp, 1 << 20, pool=pool)
        conn.sock = CountingSends(a)
        by_loop = _spy_write_loop(conn)
        task = asyncio.ensure_future(conn.serve())
        b.sendall(b"".join(request(cid) for cid in range(4)))
        await until(lambda: len(disp.futures) == 4)
        disp.futures[0].set_result(_answer(0))
        assert (await read_frame(b)) == struct.pack(">i", 0) and conn.sock.sends == 1
        disp.futures[2].set_result(_answer(2))          # waits for 1
        await asyncio.sleep(0.01)
        assert conn.sock.sends == 1 and len(conn.pending) == 3
        disp.futures[3].set_result(_answer(3))
        disp.futures[1].set_result(_answer(1))
        got = b"".join([await read_frame(b) for _ in range(3)])
        assert got == struct.pack(">3i", 1, 2, 3) and conn.sock.sends == 2
        assert by_loop == [] and not conn.pending
        await until(lambda: pool.used == 0)
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)


def test_a_later_answer_with_a_large_slice_goes_by_the_write_loop(tmp_path):
    """A large slice is sendfile's: the answer goes back to the head of the queue and
    the write loop sends it; a small one is read in and sent from the callback."""
    big = INLINE_SLICE_MAX + 100
    large = _write(tmp_path / "big.log", b"L" * big)
    small = _write(tmp_path / "small.log", b"s" * 10)

    async def test(a, b):
        disp = LaterDispatcher()
        conn = Connection(a, disp, 1 << 20)
        by_loop = _spy_write_loop(conn)
        task = asyncio.ensure_future(conn.serve())
        b.sendall(request(0) + request(1))
        await until(lambda: len(disp.futures) == 2)
        disp.futures[0].set_result([struct.pack(">ii", 4 + 10, 0), small])
        assert (await read_frame(b)) == struct.pack(">i", 0) + b"s" * 10 and by_loop == []
        disp.futures[1].set_result([struct.pack(">ii", 4 + big, 1), large])
        assert (await read_frame(b)) == struct.pack(">i", 1) + b"L" * big
        assert by_loop == [2]
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)


def test_a_later_answer_the_socket_does_not_take_whole_is_finished_by_the_write_loop():
    """What the socket does not take of a later answer sent from its callback goes out
    from the write loop, before the answers behind it."""
    async def test(a, b):
        disp = LaterDispatcher()
        conn, task, _ = await _answers_owed(Connection, disp, a, b, 2)
        body = struct.pack(">i", 0) + b"x" * (1 << 22)
        disp.futures[0].set_result([struct.pack(">i", len(body)), body])
        await until(lambda: conn.bytes_out > 0)
        disp.futures[1].set_result(_answer(1))
        first = await read_frame(b)
        assert first == body and (await read_frame(b)) == struct.pack(">i", 1)
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)


def test_a_later_answer_that_cannot_be_made_closes_the_connection():
    """`finish` raising (a cancelled answer, a failure of ours): nothing more is sent,
    the connection closes; answers before it went out."""
    def finish(fut):
        if isinstance(fut.result(), Exception):
            raise fut.result()
        return fut.result()

    async def test(a, b):
        disp = LaterDispatcher(finish)
        conn, task, _ = await _answers_owed(Connection, disp, a, b, 3)
        disp.futures[0].set_result(_answer(0))
        disp.futures[1].set_result(RuntimeError("a bug of ours"))
        disp.futures[2].set_result(_answer(2))
        await asyncio.wait_for(task, 5)     # the reader too ends, not waiting for the client
        assert conn._dead
        b.setblocking(True)
        b.settimeout(2)
        got = b""
        while chunk := b.recv(1 << 16):
            got += chunk
        assert got == struct.pack(">ii", 4, 0)      # answer 0, then nothing (not answer 2)
    run(test, uvloop.new_event_loop)


def test_a_later_answer_held_back_by_a_quota_goes_after_its_delay_in_order():
    """`finish` gives an awaitable (a pre-KIP-219 throttled answer): the write loop
    awaits it; the answer behind it waits its turn."""
    async def test(a, b):
        loop = asyncio.get_running_loop()
        held = loop.create_future()

        def finish(fut):
            return held if fut.result() == "throttled" else fut.result()
        disp = LaterDispatcher(finish)
        conn, task, _ = await _answers_owed(Connection, disp, a, b, 2)
        disp.futures[0].set_result("throttled")
        disp.futures[1].set_result(_answer(1))
        await asyncio.sleep(0.01)
        assert conn.bytes_out == 0
        held.set_result(_answer(0))
        assert (await read_frame(b)) + (await read_frame(b)) == struct.pack(">ii", 0, 1)
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)


def test_without_direct_sends_the_write_loop_awaits_later_answers():
    """Through TLS (no direct sends) the write loop awaits an EncodedLater itself."""
    async def test(a, b):
        disp = LaterDispatcher()
        conn = WriteLoopOnly(a, disp, 1 << 20)
        by_loop = _spy_write_loop(conn)
        task = asyncio.ensure_future(conn.serve())
        b.sendall(request(0))
        await until(lambda: len(disp.futures) == 1)
        disp.futures[0].set_result(_answer(0))
        assert (await read_frame(b)) == struct.pack(">i", 0) and by_loop == [1]
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)


def test_a_later_answer_owed_when_the_client_stops_sending_goes_out_then_it_closes():
    """The client half-closes with an answer still owed (a long poll): the answer goes
    out when it is ready, and the connection then closes (the write loop ends, the
    close hook runs)."""
    async def test(a, b):
        disp = LaterDispatcher()
        conn, task, closed = await _answers_owed(Connection, disp, a, b)
        b.shutdown(socket.SHUT_WR)
        await until(lambda: conn.closed)
        disp.futures[0].set_result(_answer(0))
        assert (await read_frame(b)) == struct.pack(">i", 0)
        await asyncio.wait_for(task, 5)
        assert closed == [conn] and not conn.pending
    run(test, uvloop.new_event_loop)


def test_after_a_failed_send_no_later_answer_follows_on_the_broken_stream(tmp_path):
    """A slice found shorter than promised while the write loop sends it (part of the
    answer is on the wire): the connection closes and an answer completing afterwards
    is not sent after the partial one."""
    big = INLINE_SLICE_MAX + 40_000
    seg = tmp_path / "big.log"
    sl = _write(seg, b"L" * big)
    os.truncate(seg, big // 2)          # the file shrank after the owner's read

    async def test(a, b):
        disp = LaterDispatcher()
        conn, task, _ = await _answers_owed(Connection, disp, a, b, 2)
        disp.futures[0].set_result([struct.pack(">ii", 4 + big, 0), sl])
        await until(lambda: conn.closed)
        disp.futures[1].set_result(_answer(1))
        await asyncio.wait_for(task, 5)
        got = b""
        b.setblocking(True)
        b.settimeout(2)
        while True:
            chunk = b.recv(1 << 16)
            if not chunk:
                break
            got += chunk
        assert len(got) == 8 + big // 2     # the partial answer, and nothing after it
    run(test, uvloop.new_event_loop)


def test_an_answer_ready_at_once_behind_a_later_one_leaves_with_it():
    """An answer ready at once but owed after a later one waits in the queue (the write
    loop is not woken for it) and leaves with the later one, in order, in one send."""
    class LaterFirst(LaterDispatcher):
        def dispatch(self, ctx, frame, pos):
            if ctx.correlation_id == 0:
                return super().dispatch(ctx, frame, pos)
            return _answer(ctx.correlation_id)

    async def test(a, b):
        disp = LaterFirst()
        conn = Connection(a, disp, 1 << 20)
        conn.sock = CountingSends(a)
        by_loop = _spy_write_loop(conn)
        task = asyncio.ensure_future(conn.serve())
        b.sendall(request(0) + request(1))
        await until(lambda: len(conn.pending) == 2)
        disp.futures[0].set_result(_answer(0))
        assert (await read_frame(b)) + (await read_frame(b)) == struct.pack(">ii", 0, 1)
        assert conn.sock.sends == 1 and by_loop == []
        b.close()
        await asyncio.wait_for(task, 5)
    run(test, uvloop.new_event_loop)


def test_after_a_failed_answer_the_reader_starts_no_more_requests(monkeypatch):
    """The reader waits for room (MAX_IN_FLIGHT answers owed) when an answer fails: it
    is woken and ends; what the client pipelined next is not started."""
    monkeypatch.setattr("workers.connection.MAX_IN_FLIGHT", 2)

    def finish(fut):
        raise RuntimeError("a bug of ours")

    async def test(a, b):
        disp = LaterDispatcher(finish)
        conn, task, _ = await _answers_owed(Connection, disp, a, b, 2)
        b.sendall(request(2))
        await until(lambda: not conn._reading)      # it waits for room, unread bytes there
        disp.futures[0].set_result(None)
        await asyncio.wait_for(task, 5)
        assert len(disp.futures) == 2 and conn._dead
    run(test, uvloop.new_event_loop)


def test_a_cancelled_answer_awaited_by_the_write_loop_closes_the_connection():
    """Through the write loop (no direct sends, as TLS): an answer whose future is
    cancelled closes the connection cleanly (the close hook runs)."""
    async def test(a, b):
        disp = HoldingDispatcher()
        conn, task, closed = await _answers_owed(WriteLoopOnly, disp, a, b)
        disp.futures[0].cancel()
        await asyncio.wait_for(task, 5)
        assert closed == [conn] and conn._dead
    run(test, uvloop.new_event_loop)


# ------------------------------------------------------------------ hand-off
class Moving:
    """Each request read only worker 1's partitions (the Fetch fan-out's note); request
    `held` is answered when the test resolves `self.held` (an EncodedLater: as a
    forwarded Fetch's answer comes), the others at once."""

    def __init__(self, held: int = -1):
        self.held_cid = held
        self.held = None
        self.seen = 0

    def dispatch(self, ctx, frame, pos):
        self.seen += 1
        ctx.connection.fetched_from(1)
        cid = ctx.correlation_id
        answer = [struct.pack(">ii", 4, cid)]
        if cid == self.held_cid:
            self.held = asyncio.get_running_loop().create_future()
            return EncodedLater(self.held, lambda fut: answer)
        return answer


def _mover(conn, accept=True):
    """`on_move` that keeps a duplicate of the socket (what the mesh's SCM_RIGHTS does)."""
    moves = []

    def on_move(c, wid):
        if not accept:
            moves.append((wid, None))
            return False
        moves.append((wid, socket.socket(fileno=os.dup(c.fd))))
        return True
    conn.on_move = on_move
    return moves


def test_a_connection_moves_once_its_streak_is_reached_and_nothing_of_it_is_here():
    """MOVE_AFTER Fetches of one other worker's partitions, then the hand-off happens
    only when nothing is in flight: the held answer goes out first, in order; the moved
    connection lets go of the socket without shutting it down, so whoever took it
    serves the client's next bytes; `abort` of a moved connection does nothing."""
    from workers.connection import FETCH_WEIGHT, MOVE_AT
    MOVE_AFTER = MOVE_AT // FETCH_WEIGHT        # Fetches

    async def test(a, b):
        disp = Moving(held=MOVE_AFTER - 1)
        conn = Connection(a, disp, 1 << 20)
        moves = _mover(conn)
        task = asyncio.ensure_future(conn.serve())
        for cid in range(MOVE_AFTER - 1):
            b.sendall(request(cid))
            assert (await read_frame(b)) == struct.pack(">i", cid)
        b.sendall(request(MOVE_AFTER - 1))              # held: its answer comes later
        await until(lambda: disp.held is not None and conn._readable is not None)
        assert conn.move_streak == MOVE_AT and moves == []   # in flight: stays
        disp.held.set_result(None)
        assert (await read_frame(b)) == struct.pack(">i", MOVE_AFTER - 1)
        await asyncio.wait_for(task, 5)                 # handed over: this end is done
        assert conn.moved and conn.closed and [w for w, _ in moves] == [1]
        conn.abort()                                    # (the socket is not this end's)
        taken = moves[0][1]
        b.sendall(b"the next request")
        taken.settimeout(5)
        assert taken.recv(100) == b"the next request"   # the socket is alive elsewhere
        taken.close()
    run(test, uvloop.new_event_loop)


def test_a_connection_with_bytes_of_a_request_or_a_refused_move_stays_and_serves():
    """Half a frame read, a throttle, or an `on_move` that refuses: the connection stays,
    keeps serving, and tries again only after a new streak."""
    from workers.connection import FETCH_WEIGHT, MOVE_AT
    MOVE_AFTER = MOVE_AT // FETCH_WEIGHT        # Fetches

    async def test(a, b):
        disp = Moving()
        conn = Connection(a, disp, 1 << 20)
        moves = _mover(conn, accept=False)
        task = asyncio.ensure_future(conn.serve())
        for cid in range(MOVE_AFTER - 1):
            b.sendall(request(cid))
            assert (await read_frame(b)) == struct.pack(">i", cid)
        last = request(MOVE_AFTER - 1)
        b.sendall(last + request(50)[:10])              # a streak, and part of a frame
        assert (await read_frame(b)) == struct.pack(">i", MOVE_AFTER - 1)
        await until(lambda: conn.frames.buffered == 10 and conn._readable is not None)
        assert moves == [] and conn.move_streak == MOVE_AT
        b.sendall(request(50)[10:])                     # the frame completes: one more
        assert (await read_frame(b)) == struct.pack(">i", 50)
        await until(lambda: moves)                      # tried: refused
        assert moves == [(1, None)] and conn.move_streak == 0 and not conn.closed
        for cid in range(60, 60 + MOVE_AFTER):          # still served; a new streak
            b.sendall(request(cid))
            assert (await read_frame(b)) == struct.pack(">i", cid)
        await until(lambda: len(moves) == 2)
        conn.throttle(10_000)
        for cid in range(70, 70 + MOVE_AFTER):
            conn.fetched_from(1)
        b.sendall(request(80))
        await until(lambda: conn._waiter is not None and conn._readable is None)
        assert len(moves) == 2                          # throttled: not tried
        conn.abort()
        await asyncio.wait_for(task, 5)
        assert not conn.moved
    run(test, uvloop.new_event_loop)


def test_the_streak_weighs_fetches_and_produces_and_each_move_doubles_the_next():
    """A Fetch weighs FETCH_WEIGHT, a Produce 1, together toward MOVE_AT; a request to
    another worker starts a new streak (and forgets the Fetch's partitions); a
    connection that moved n times moves again at MOVE_AT << n."""
    from workers.connection import FETCH_WEIGHT, MOVE_AT, MOVE_BACKOFF_MAX

    async def test(a, b):
        conn = Connection(a, Answering(), 1 << 20)
        conn.fetched_from(1, [("t", 0)])
        conn.fetched_from(1, [("t", 0)])
        for _ in range(MOVE_AT - 2 * FETCH_WEIGHT):
            conn.produced_to(1)
        assert conn.move_streak == MOVE_AT and conn.move_keys == [("t", 0)]
        conn.produced_to(2)
        assert (conn.move_to, conn.move_streak, conn.move_keys) == (2, 1, ())
        assert conn.move_at == MOVE_AT
        conn.moved_before(2)
        assert conn.moves == 2 and conn.move_at == MOVE_AT * 4
        conn.moved_before(99)
        assert conn.move_at == MOVE_AT << MOVE_BACKOFF_MAX
    run(test)
