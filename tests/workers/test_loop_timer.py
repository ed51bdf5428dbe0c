"""Tests for workers.loop_timer: the timing wheel driven by a real asyncio loop."""
import asyncio
import time

from workers.loop_timer import LoopTimer
from workers.timing_wheel import CallbackTask, Timer


def test_loop_timer_fires_on_a_real_asyncio_loop():
    async def main():
        loop = asyncio.get_running_loop()
        timer = Timer()                          # real epoch-ms clock
        lt = LoopTimer(timer, loop)
        fired = []
        t0 = time.monotonic()
        lt.schedule(60, lambda: fired.append(("late", time.monotonic() - t0)))
        assert lt.armed_for_ms is not None
        first_armed = lt.armed_for_ms
        lt.schedule(10, lambda: fired.append(("early", time.monotonic() - t0)))
        assert lt.armed_for_ms < first_armed       # re-armed for the earlier task
        cancelled = lt.schedule(20, lambda: fired.append(("cancelled", 0)))
        cancelled.cancel()
        done = loop.create_future()
        lt.schedule(80, lambda: done.set_result(None))
        await asyncio.wait_for(done, 5)
        names = [n for n, _ in fired]
        assert names == ["early", "late"]
        assert fired[0][1] >= 0.009 and fired[1][1] >= 0.059
        assert timer.size == 0
        assert lt.armed_for_ms is None
        lt.close()

    asyncio.run(main())


def test_loop_timer_rearms_for_tasks_added_directly_to_the_timer():
    async def main():
        loop = asyncio.get_running_loop()
        timer = Timer()
        lt = LoopTimer(timer, loop)
        assert lt.armed_for_ms is None
        done = loop.create_future()
        timer.add(CallbackTask(5, lambda: done.set_result(True)))   # not via lt.add
        assert lt.armed_for_ms is not None
        assert await asyncio.wait_for(done, 5)
        lt.close()

    asyncio.run(main())
