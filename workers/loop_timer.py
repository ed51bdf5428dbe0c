"""Drive a ``workers.timing_wheel.Timer`` from an asyncio event loop.

One loop timer (``loop.call_at``) is armed for the Timer's earliest bucket
expiration. When it fires, the Timer is advanced to ``timer.clock()`` and the
loop timer is re-armed for the next expiration. ``Timer.add`` notifies us
(``timer.on_add``) so an earlier expiration re-arms the loop timer at once;
tasks added through any path (a Purgatory holding the bare Timer) are covered.

The Timer's clock (monotonic ms, workers/worker.py) and the loop's clock (monotonic
seconds, possibly another origin) differ;
the delay ``expiration - timer.clock()`` is converted onto the loop's clock at
arming time. If the loop timer fires a little early (loop clock resolution),
nothing is due yet and it simply re-arms for the remaining time.

Concurrency contract: everything runs on the loop's thread; not thread-safe.
"""
from __future__ import annotations

import asyncio
from typing import Callable, Optional

from workers.timing_wheel import CallbackTask, Timer, TimerTask

__all__ = ["LoopTimer"]


class LoopTimer:
    def __init__(self, timer: Timer, loop: Optional[asyncio.AbstractEventLoop] = None):
        self.timer = timer
        self.loop = loop or asyncio.get_event_loop()
        self._handle: Optional[asyncio.TimerHandle] = None
        self._armed_for: Optional[int] = None      # timer-clock ms the handle is for
        self._closed = False
        timer.on_add = self._maybe_rearm
        self._maybe_rearm()

    def add(self, task: TimerTask) -> TimerTask:
        self.timer.add(task)        # on_add re-arms
        return task

    def schedule(self, delay_ms: int, fn: Callable[[], object]) -> TimerTask:
        """Run ``fn()`` after ``delay_ms``; returns a task with ``cancel()``."""
        return self.add(CallbackTask(delay_ms, fn))

    @property
    def armed_for_ms(self) -> Optional[int]:
        return self._armed_for

    def close(self) -> None:
        self._closed = True
        self._disarm()
        if self.timer.on_add == self._maybe_rearm:
            self.timer.on_add = None

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._armed_for = None

    def _maybe_rearm(self) -> None:
        if self._closed:
            return
        expiration = self.timer.next_expiration_ms()
        if expiration is None:
            self._disarm()
            return
        if self._armed_for is not None and self._armed_for <= expiration:
            return          # the armed handle fires first; it re-arms then
        self._disarm()
        delay_s = max(0, expiration - self.timer.clock()) / 1000.0
        self._handle = self.loop.call_at(self.loop.time() + delay_s, self._on_timer)
        self._armed_for = expiration

    def _on_timer(self) -> None:
        self._handle = None
        self._armed_for = None
        self.timer.advance_clock(self.timer.clock())
        self._maybe_rearm()
