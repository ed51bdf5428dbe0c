"""Connection memory (issue #15): reads charged to the worker's pool, muting while it is
exhausted and resuming when answered requests release it; one shared read buffer; the
charge returned on close; abort() wakes a muted reader; last_active follows traffic."""
import asyncio
import socket
import struct

from mpbroker.protocol import framing
from workers.connection import Connection, ReadBuffer
from workers.memory_pool import MemoryPool

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


async def until(cond, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def run(test):
    async def main():
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        try:
            await test(a, b)
        finally:
            b.close()
    asyncio.run(main())


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
        pool = MemoryPool(10)
        conn = Connection(a, HoldingDispatcher(), 1 << 20, pool=pool, clock=lambda: now[0])
        task = asyncio.ensure_future(conn.serve())
        now[0] = 150.0
        b.sendall(b"\0\0\0\x40" + b"z" * 20)
        await until(lambda: conn.muted)
        assert conn.last_active == 150.0 and pool.used == 10
        conn.abort()
        await asyncio.wait_for(task, 5)
        assert pool.used == 0
    run(test)
