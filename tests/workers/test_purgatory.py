"""Tests for workers.purgatory: completion exactly once under every ordering."""
import itertools

import pytest

from workers.purgatory import DelayedOperation, Purgatory
from workers.timing_wheel import Timer


class FakeClock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


class Op(DelayedOperation):
    """Completes once ``ready`` is true; records every callback."""

    def __init__(self, delay_ms, name="op", ready=False):
        super().__init__(delay_ms)
        self.name = name
        self.ready = ready
        self.events = []
        self.tries = 0

    def try_complete(self):
        self.tries += 1
        if self.ready:
            return self.force_complete()
        return False

    def on_complete(self):
        self.events.append("complete")

    def on_expiration(self):
        self.events.append("expired")


@pytest.fixture
def env():
    clock = FakeClock(0)
    timer = Timer(tick_ms=1, wheel_size=3, clock=clock)
    return clock, timer, Purgatory("Produce", timer)


def tick(timer, clock, to):
    clock.now = to
    return timer.advance_clock(to)


def test_completes_immediately_without_watching(env):
    clock, timer, purgatory = env
    op = Op(100, ready=True)
    assert purgatory.try_complete_else_watch(op, ["p0"]) is True
    assert op.events == ["complete"]
    assert purgatory.watched("p0") == 0
    assert timer.size == 0 and purgatory.size == 0


def test_double_check_try_watch_try_again(env):
    clock, timer, purgatory = env

    class FlipsOnFirstTry(Op):
        calls = 0

        def try_complete(self):
            self.calls += 1
            if self.calls == 1:
                self.ready = True               # an event that arrives while watching
                return False
            return self.force_complete()

    op = FlipsOnFirstTry(100)
    assert purgatory.try_complete_else_watch(op, ["a", "b"]) is True
    assert op.calls == 2 and op.events == ["complete"]
    assert timer.size == 0                       # never put on the wheel


def test_completion_via_key(env):
    clock, timer, purgatory = env
    op = Op(100)
    assert purgatory.try_complete_else_watch(op, ["p0"]) is False
    assert timer.size == 1 and purgatory.size == 1 and purgatory.watched("p0") == 1
    assert purgatory.check_and_complete("p0") == 0
    op.ready = True
    assert purgatory.check_and_complete("p0") == 1
    assert op.events == ["complete"]
    assert timer.size == 0                       # timeout cancelled
    assert purgatory.watched("p0") == 0 and purgatory.size == 0
    assert tick(timer, clock, 1000) == 0
    assert op.events == ["complete"]


def test_expiry_through_the_wheel(env):
    clock, timer, purgatory = env
    op = Op(50)
    purgatory.try_complete_else_watch(op, ["p0"])
    assert tick(timer, clock, 49) == 0
    assert tick(timer, clock, 50) == 1
    assert op.events == ["complete", "expired"]
    assert purgatory.size == 0
    op.ready = True
    assert purgatory.check_and_complete("p0") == 0   # already done; removed from the list
    assert purgatory.watched("p0") == 0
    assert op.events == ["complete", "expired"]


def test_watch_on_several_keys_completes_once(env):
    clock, timer, purgatory = env
    op = Op(100)
    purgatory.try_complete_else_watch(op, ["a", "b", "c"])
    assert purgatory.watched() == 3
    op.ready = True
    assert purgatory.check_and_complete("b") == 1
    assert purgatory.check_and_complete("a") == 0
    assert purgatory.check_and_complete("c") == 0
    assert op.events == ["complete"]
    assert purgatory.watched() == 0


@pytest.mark.parametrize("order", list(itertools.permutations(["key", "force", "expire", "key2"])))
def test_exactly_once_under_every_ordering(env, order):
    clock, timer, purgatory = env
    op = Op(10)
    purgatory.try_complete_else_watch(op, ["a", "b"])
    for step in order:
        if step == "key":
            op.ready = True
            purgatory.check_and_complete("a")
        elif step == "key2":
            op.ready = True
            purgatory.check_and_complete("b")
        elif step == "force":
            op.force_complete()
        else:
            tick(timer, clock, clock.now + 10)
    assert op.events.count("complete") == 1
    assert op.events.count("expired") == (1 if order[0] == "expire" else 0)
    assert op.is_completed and purgatory.size == 0 and timer.size == 0


def test_force_complete_is_exactly_once_under_reentrancy(env):
    clock, timer, purgatory = env

    class Reentrant(Op):
        def on_complete(self):
            super().on_complete()
            # re-enter through every path while completing
            assert self.force_complete() is False
            purgatory.check_and_complete("k")
            tick(timer, clock, clock.now + 1000)

    op = Reentrant(5)
    purgatory.try_complete_else_watch(op, ["k"])
    assert op.force_complete() is True
    assert op.force_complete() is False
    assert op.events == ["complete"]


def test_completion_callback_may_complete_others_on_same_key(env):
    clock, timer, purgatory = env
    second = Op(100, "second")

    class Chained(Op):
        def on_complete(self):
            super().on_complete()
            second.ready = True
            purgatory.check_and_complete("k")      # re-enters while "k" is iterated

    first = Chained(100, "first")
    purgatory.try_complete_else_watch(first, ["k"])
    purgatory.try_complete_else_watch(second, ["k"])
    first.ready = True
    completed = purgatory.check_and_complete("k")
    assert first.events == ["complete"] and second.events == ["complete"]
    assert completed == 1                           # the inner call counted the second
    assert purgatory.watched("k") == 0 and purgatory.size == 0


def test_expiring_op_runs_on_expiration_after_on_complete_once(env):
    clock, timer, purgatory = env
    ops = [Op(d, str(d)) for d in (3, 7, 30, 300)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["x"])
    for t in range(0, 301):
        tick(timer, clock, t)
    assert all(op.events == ["complete", "expired"] for op in ops)


def test_cancel_for_key_cancels_timeouts_without_completing(env):
    clock, timer, purgatory = env
    op = Op(10)
    purgatory.try_complete_else_watch(op, ["gone"])
    cancelled = purgatory.cancel_for_key("gone")
    assert cancelled == [op]
    assert timer.size == 0 and purgatory.watched("gone") == 0
    tick(timer, clock, 100)
    assert op.events == []
    assert purgatory.cancel_for_key("gone") == []


def test_purge_removes_completed_ops_from_watch_lists():
    clock = FakeClock(0)
    timer = Timer(clock=clock)
    purgatory = Purgatory("Fetch", timer, purge_interval=5)
    ops = [Op(1000) for _ in range(10)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["hot", "cold"])
    for op in ops:
        op.ready = True
    assert purgatory.check_and_complete("hot") == 10
    # "cold" was never checked: the completed ops still sit on its list
    assert purgatory.watched("cold") == 10
    purgatory.try_complete_else_watch(Op(1000), ["other"])  # adding triggers maybe_purge
    assert purgatory.watched("cold") == 0
    assert purgatory.watched() == 1
    assert purgatory.purged_total == 10


class ManyKeysOp(Op):
    unwatch_on_complete = True


def test_an_op_that_unwatches_on_complete_leaves_every_list_at_once():
    """Completed by one key (or by its timeout), it leaves the lists of all its keys,
    nothing is left for a purge, and the keys' other ops stay watched."""
    clock = FakeClock(0)
    timer = Timer(tick_ms=1, wheel_size=3, clock=clock)
    purgatory = Purgatory("Fetch", timer, purge_interval=5)
    ops = [ManyKeysOp(1000) for _ in range(3)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["a", "b", "c"])
    stays = Op(5000)
    purgatory.try_complete_else_watch(stays, ["b"])
    ops[0].ready = True
    assert purgatory.check_and_complete("a") == 1
    assert [purgatory.watched(k) for k in "abc"] == [2, 3, 2]
    tick(timer, clock, 1000)                       # the others expire
    assert [op.events for op in ops[1:]] == [["complete", "expired"]] * 2
    assert purgatory.watching("b") == [stays] and purgatory.watched() == 1
    assert purgatory.purge_completed() == 0 and len(purgatory) == 1


def test_no_keys_is_an_error(env):
    with pytest.raises(ValueError):
        env[2].try_complete_else_watch(Op(1), [])


def test_timer_disabled_keeps_op_only_on_watch_lists():
    clock = FakeClock(0)
    timer = Timer(clock=clock)
    purgatory = Purgatory("Heartbeat", timer, timer_enabled=False)
    op = Op(1)
    purgatory.try_complete_else_watch(op, ["g"])
    assert timer.size == 0
    op.ready = True
    assert purgatory.check_and_complete("g") == 1


def test_broker_deadlines_ignore_wall_clock_jumps(tmp_path, monkeypatch):
    """The worker's timing wheel runs on the monotonic clock (Kafka's SystemTimer):
    a wall clock stepped a day ahead neither fires a 60 s timeout nor stops one that
    is due, while records still see the wall clock (Worker.clock)."""
    import time

    from mpbroker import config as configmod
    from mpbroker.controller.embedded import EmbeddedController
    from workers.worker import Worker

    cfg = configmod.BrokerConfig({"broker.id": "1", "log.dirs": str(tmp_path),
                                  "listeners": "PLAINTEXT://127.0.0.1:0"})
    b = Worker(cfg, EmbeddedController(cfg))
    slow, quick = Op(60_000, "slow"), Op(1, "quick")
    b.delete_records_purgatory.try_complete_else_watch(slow, ["k"])
    b.fetch_purgatory.try_complete_else_watch(quick, ["k"])
    wall = time.time()
    monkeypatch.setattr(time, "time", lambda: wall + 86_400)
    assert b.clock() >= (wall + 86_400) * 1000 - 1
    time.sleep(0.005)       # the scenario: the default (monotonic) timer clock moves past 1 ms
    b.timer.advance_clock(b.timer.clock())
    assert quick.events == ["complete", "expired"] and slow.events == []
    monkeypatch.setattr(time, "time", lambda: wall - 86_400)   # and stepped back
    b.timer.advance_clock(b.timer.clock())
    assert slow.events == [] and len(b.delete_records_purgatory) == 1


def test_a_key_check_goes_through_try_complete_key(env):
    clock, timer, purgatory = env

    class KeyOp(Op):
        def try_complete_key(self, key):
            self.events.append(("key", key))
            return super().try_complete_key(key)     # the default: try_complete

    op = KeyOp(100)
    purgatory.try_complete_else_watch(op, ["a", "b"])
    assert op.tries == 2                     # before and after watching
    op.ready = True
    assert purgatory.check_and_complete("b") == 1
    assert op.events == [("key", "b"), "complete"] and op.tries == 3


def test_an_op_that_needs_no_recheck_is_tried_once_before_watching(env):
    clock, timer, purgatory = env

    class ReadOnlyOp(Op):
        recheck_after_watch = False

    op = ReadOnlyOp(100)
    assert purgatory.try_complete_else_watch(op, ["a"]) is False
    assert op.tries == 1 and purgatory.watched("a") == 1 and timer.size == 1
    op.ready = True
    assert purgatory.check_and_complete("a") == 1 and op.events == ["complete"]


class Listener:
    def __init__(self, purgatory, log):
        self.purgatory, self.log = purgatory, log

    def checked(self, key):
        # the ops watching the key are tried after the listeners
        self.log.append((key, [op.tries for op in self.purgatory.watching(key)]))


def test_listeners_hear_every_check_of_their_keys_until_they_stop(env):
    clock, timer, purgatory = env
    log = []
    listener = Listener(purgatory, log)
    purgatory.listen(["p0", "p1"], listener)
    op = Op(100)
    purgatory.try_complete_else_watch(op, ["p0"])
    purgatory.check_and_complete("p0")
    purgatory.check_and_complete("p2")
    purgatory.check_and_complete("p1")
    assert log == [("p0", [2]), ("p1", [])]         # tried twice when watched
    assert op.tries == 3
    assert purgatory.listening("p0") == 1 and purgatory.listening("p2") == 0
    purgatory.unlisten(["p0", "p1"], listener)
    purgatory.check_and_complete("p0")
    assert len(log) == 2 and purgatory.listening("p0") == 0


def test_an_unwatched_op_is_counted_and_timed_on_no_watch_list(env):
    clock, timer, purgatory = env
    op, other = Op(10), Op(10)
    purgatory.add_unwatched(op)
    assert purgatory.size == 1 and purgatory.watched() == 0 and timer.size == 1
    with pytest.raises(ValueError):
        Purgatory("Fetch", timer).add_unwatched(op)
    tick(timer, clock, 20)
    assert op.events == ["complete", "expired"] and purgatory.size == 0
    purgatory.add_unwatched(other)
    assert other.force_complete() and purgatory.size == 0 and timer.size == 0
    assert purgatory._completed_in_lists == 0       # nothing left for a purge
