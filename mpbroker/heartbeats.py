"""The heartbeat table (ARCHITECTURE §1): an anonymous shared mmap created by the
supervisor before any fork, one slot per child, so that the supervisor sees a hung child
without talking to it.

Slot 0 is the controller, slot 1 + i worker i. A slot is (pid, state, monotonic seconds
of the last beat), little-endian `<qqd`. Each slot has one writer at a time: the
supervisor resets it (BOOTING) before the fork, then only the child writes it: READY once
it serves, then a beat every interval from a task on its event loop (`heartbeat_loop`),
so that a blocked loop or a stopped process stops beating. The controller writes
CS_DONE when this broker's controlled shutdown is done (it still serves).
"""
from __future__ import annotations

import asyncio
import mmap
import os
import struct
import time
from typing import Callable

BOOTING, READY = 0, 1
CS_DONE = 2      # the controller slot: serving, and this broker's controlled shutdown is done
SLOT = struct.Struct("<qqd")   # pid, state, monotonic seconds of the last beat


class HeartbeatTable:
    """Shared anonymous memory (MAP_SHARED, inherited by fork): one slot per child."""

    def __init__(self, slots: int):
        self.map = mmap.mmap(-1, SLOT.size * slots)

    def reset(self, slot: int) -> None:
        SLOT.pack_into(self.map, slot * SLOT.size, 0, BOOTING, time.monotonic())

    def beat(self, slot: int, state: int = READY) -> None:
        SLOT.pack_into(self.map, slot * SLOT.size, os.getpid(), state, time.monotonic())

    def read(self, slot: int) -> tuple[int, int, float]:
        return SLOT.unpack_from(self.map, slot * SLOT.size)

    def fresh(self, slot: int, within_s: float) -> bool:
        """The child of `slot` serves and beat within the last `within_s` seconds (read
        by its siblings too: a worker hands connections only to a live one)."""
        _, state, at = self.read(slot)
        return state != BOOTING and time.monotonic() - at <= within_s


async def heartbeat_loop(table: HeartbeatTable, slot: int, interval_s: float,
                         state: Callable[[], int] = lambda: READY) -> None:
    """Beat `slot` every `interval_s` with the state `state()` says, until cancelled."""
    while True:
        table.beat(slot, state())
        await asyncio.sleep(interval_s)
