"""workers/gc_freeze.py: when a worker refreezes its heap (a fake collector and clock)."""
from __future__ import annotations

import gc
import weakref

import pytest

from workers import gc_freeze
from workers.gc_freeze import GcFreezer


class FakeGc:
    def __init__(self):
        self.calls: list[str] = []

    def unfreeze(self):
        self.calls.append("unfreeze")

    def collect(self):
        self.calls.append("collect")

    def freeze(self):
        self.calls.append("freeze")

    def get_freeze_count(self):
        return 0


class FakeLoop:
    def __init__(self):
        self.timers: list = []

    def call_later(self, delay, fn):
        timer = Timer(delay, fn)
        self.timers.append(timer)
        return timer

    def fire(self):
        timers, self.timers = self.timers, []
        for t in timers:
            if not t.cancelled:
                t.fn()


class Timer:
    def __init__(self, delay, fn):
        self.delay, self.fn, self.cancelled = delay, fn, False

    def cancel(self):
        self.cancelled = True


@pytest.fixture
def env():
    now = [1000.0]
    loop, collector = FakeLoop(), FakeGc()
    return GcFreezer(loop.call_later, clock=lambda: now[0], collector=collector), loop, collector, now


def test_refreeze_collects_everything_then_freezes(env):
    f, _, collector, _ = env
    f.refreeze()
    assert collector.calls == ["unfreeze", "collect", "freeze"]
    assert f.enabled and f.refreezes == 1


def test_nothing_happens_before_the_worker_booted(env):
    f, loop, collector, now = env
    f.changed()
    now[0] += 10 * gc_freeze.PERIOD_S
    f.tick()
    assert loop.timers == [] and collector.calls == []


def test_changes_are_debounced_into_one_refreeze(env):
    f, loop, collector, _ = env
    f.refreeze()
    collector.calls.clear()
    for _ in range(500):            # a CreateTopics of many partitions opening
        f.changed()
    assert len(loop.timers) == 1 and loop.timers[0].delay == gc_freeze.DEBOUNCE_S
    loop.fire()
    assert collector.calls == ["collect", "freeze"]      # added only: the light one
    f.changed()                     # the next change schedules again
    assert len(loop.timers) == 1


def test_a_removal_makes_the_pending_refreeze_full(env):
    f, loop, collector, _ = env
    f.refreeze()
    collector.calls.clear()
    f.changed()
    f.changed(removed=True)         # a partition closed: its cycles may be frozen
    f.changed()
    loop.fire()
    assert collector.calls == ["unfreeze", "collect", "freeze"]
    collector.calls.clear()
    f.changed()                     # the full one is not sticky
    loop.fire()
    assert collector.calls == ["collect", "freeze"]


def test_tick_refreezes_once_a_period(env):
    f, _, collector, now = env
    f.refreeze()
    collector.calls.clear()
    now[0] += gc_freeze.PERIOD_S - 1
    f.tick()
    assert collector.calls == []
    now[0] += 1
    f.tick()
    assert collector.calls == ["unfreeze", "collect", "freeze"]
    f.tick()
    assert f.refreezes == 2


def test_cancel_drops_a_pending_refreeze(env):
    f, loop, collector, _ = env
    f.refreeze()
    collector.calls.clear()
    f.changed()
    f.cancel()
    loop.fire()
    assert collector.calls == []


def test_real_collector_frees_frozen_cycles_on_refreeze():
    """Garbage that was frozen while alive is collected by the next refreeze."""
    class Node:
        pass

    f = GcFreezer()
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a          # a cycle, alive while referenced
        f.refreeze()
        assert gc.get_freeze_count() > 0
        ref = weakref.ref(a)
        del a, b
        assert ref() is not None        # frozen: not collected by an ordinary pass
        gc.collect()
        assert ref() is not None
        f.refreeze()
        assert ref() is None
    finally:
        gc.unfreeze()
