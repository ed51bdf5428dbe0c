"""The request memory pool of one worker: `queued.max.request.bytes` (KIP-72).

Kafka's SocketServer takes each request's buffer from a MemoryPool and, when the pool is
exhausted, mutes the channels (stops reading from their sockets) until memory is
released. Here the pool counts the bytes a worker's connections read and still hold:
bytes of incomplete frames, and each complete request until it is answered. It never
reserves a frame's declared size (a 5-byte header announcing 100 MB costs 5 bytes), so
a flood of large headers cannot exhaust it either; bytes are charged as they arrive.

Contract (one event loop, no threads): `room()` is how many bytes a connection may read
now (it reads at most that much, then `take`s what it read); 0 means exhausted: the
connection waits (`wait`, muted) until `release` brings the pool under its capacity.
Reads are synchronous after a readiness wait. A capacity <= 0 is unbounded (Kafka's
default, -1).

Charging bytes as they arrive can leave the pool full of incomplete frames only
(`partial`, kept by the connections): no request is held, so no answer will release
anything, and every connection waits for the others (`stalled`). Then one connection,
the `finisher`, reads the rest of its frame over the capacity, as Kafka's non-strict
pool hands a request its whole size whenever any memory is left; so the pool holds at
most its capacity plus one frame.
"""
from __future__ import annotations

import asyncio


class MemoryPool:
    __slots__ = ("capacity", "used", "_waiters", "muted_total", "partial", "finisher")

    def __init__(self, capacity: int = -1):
        self.capacity = capacity
        self.used = 0
        self.partial = 0              # of `used`: bytes of incomplete frames
        self.finisher = None          # the connection reading its frame over the capacity
        self._waiters: list[asyncio.Future] = []
        self.muted_total = 0          # times a connection was muted (for tests and logs)

    @property
    def bounded(self) -> bool:
        return self.capacity > 0

    def room(self, want: int) -> int:
        """How many of `want` bytes may be read now (0: the pool is exhausted)."""
        if not self.bounded:
            return want
        return max(0, min(want, self.capacity - self.used))

    def stalled(self) -> bool:
        """Exhausted by incomplete frames alone: no answer will bring room."""
        return self.bounded and self.used >= self.capacity and self.partial >= self.used

    def take(self, n: int) -> None:
        self.used += n

    def release(self, n: int) -> None:
        if n <= 0:
            return
        self.used -= n
        if self.used < self.capacity:
            # room again: no one reads over the capacity any more (a slow finisher must
            # not keep the role into the next stall)
            self.finisher = None
        if self._waiters and (not self.bounded or self.used < self.capacity):
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def wait(self) -> asyncio.Future:
        """A future done once the pool has room again (the caller is muted till then)."""
        fut = asyncio.get_running_loop().create_future()
        if self.room(1):
            fut.set_result(None)
        else:
            self.muted_total += 1
            if len(self._waiters) > 256:      # futures a caller gave up on (timeouts)
                self._waiters = [w for w in self._waiters if not w.done()]
            self._waiters.append(fut)
        return fut
