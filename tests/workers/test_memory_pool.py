"""The KIP-72 request memory pool: room, muting waiters woken by releases, unbounded."""
import asyncio

from workers.memory_pool import MemoryPool


def test_unbounded_pool_always_has_room():
    pool = MemoryPool(-1)
    pool.take(10 ** 12)
    assert not pool.bounded and pool.room(4096) == 4096


def test_room_never_exceeds_capacity():
    pool = MemoryPool(1000)
    assert pool.room(4096) == 1000
    pool.take(900)
    assert pool.room(4096) == 100
    pool.take(100)
    assert pool.room(4096) == 0
    pool.release(300)
    assert pool.room(4096) == 300 and pool.used == 700


def test_exhausted_pool_mutes_until_release():
    async def main():
        pool = MemoryPool(100)
        pool.take(100)
        waits = [pool.wait(), pool.wait()]
        assert pool.muted_total == 2
        await asyncio.sleep(0)
        assert not any(w.done() for w in waits)
        pool.release(0)                                 # nothing released: still muted
        assert not any(w.done() for w in waits)
        pool.release(1)
        assert all(w.done() for w in waits)
        assert pool.wait().done()                       # room: no wait at all
    asyncio.run(main())


def test_room_again_ends_the_finishers_turn():
    pool = MemoryPool(10)
    pool.take(12)
    pool.partial = 12
    assert pool.stalled()
    pool.finisher = "a connection"
    pool.release(1)                   # still over the capacity: it goes on
    assert pool.finisher == "a connection"
    pool.release(5)
    assert pool.finisher is None and not pool.stalled()
