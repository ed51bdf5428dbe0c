"""Producer ids, handed out from blocks of Kafka's size (ProducerIdManager): a block is
claimed from a durable counter (the embedded controller's file, ZooKeeper's
`/latest_producer_id_block`) before any id of it is given, so an id is never given twice,
even across restarts; ids left in a block when the process stops are skipped."""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

BLOCK_SIZE = 1000


class ProducerIdBlocks:
    def __init__(self, claim_block: Callable[[], Awaitable[int]]):
        """`claim_block()`: durably claim the next block; its first id."""
        self._claim_block = claim_block
        self._next, self._end = 0, 0
        self._lock = asyncio.Lock()          # one block claim at a time

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                self._next = await self._claim_block()
                self._end = self._next + BLOCK_SIZE
            pid = self._next
            self._next += 1
            return pid
