"""The longest stall of the running asyncio loop while a piece of work runs in it.

    async with LoopStall() as stall:
        ...                      # the work, on this loop
    stall.longest_s              # the longest time between two turns of the loop

A task yields at every turn and records the gap since its last turn; the benches use it
to show how long a worker's or the controller's loop went without serving anything.
"""
from __future__ import annotations

import asyncio
import time


class LoopStall:
    def __init__(self) -> None:
        self.longest_s = 0.0
        self._done = False
        self._task: asyncio.Task | None = None

    async def _tick(self) -> None:
        last = time.perf_counter()
        while not self._done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            self.longest_s = max(self.longest_s, now - last)
            last = now

    async def __aenter__(self) -> "LoopStall":
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)          # the ticker runs before the work starts
        return self

    async def __aexit__(self, *exc) -> None:
        self._done = True
        await self._task
