"""Tests for workers.timing_wheel (fake clock); its asyncio driver: test_loop_timer.py."""
import pytest
from hypothesis import given, settings, strategies as st

from workers.timing_wheel import CallbackTask, Timer, TimerTask


class FakeClock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


class Recorder(TimerTask):
    def __init__(self, delay_ms, log, name=None):
        super().__init__(delay_ms)
        self.log = log
        self.name = name
        self.runs = 0

    def run(self):
        self.runs += 1
        self.log.append(self.name)


def advance(timer, clock, to):
    clock.now = to
    return timer.advance_clock(to)


def test_kafka_javadoc_example_cascades_450ms_task_down_the_levels():
    clock = FakeClock(0)
    timer = Timer(tick_ms=1, wheel_size=20, clock=clock)
    log = []
    for delay in (2, 350, 450):
        timer.add(Recorder(delay, log, delay))
    assert timer.size == 3
    # level 1 bucket 2 (2 ms), level 2 bucket 17 (340 ms), level 3 bucket 1 (400 ms)
    assert timer.next_expiration_ms() == 2
    level2 = timer.wheel.overflow_wheel
    level3 = level2.overflow_wheel
    assert (level2.tick_ms, level3.tick_ms) == (20, 400)
    assert level3.overflow_wheel is None
    assert advance(timer, clock, 1) == 0
    assert advance(timer, clock, 2) == 1 and log == [2]
    assert timer.next_expiration_ms() == 340
    assert advance(timer, clock, 349) == 0
    assert advance(timer, clock, 350) == 1 and log == [2, 350]
    assert timer.next_expiration_ms() == 400
    assert advance(timer, clock, 400) == 0
    assert timer.next_expiration_ms() == 440        # re-inserted into level 2
    assert advance(timer, clock, 440) == 0
    assert timer.next_expiration_ms() == 450        # re-inserted into level 1
    assert advance(timer, clock, 449) == 0
    assert advance(timer, clock, 450) == 1 and log == [2, 350, 450]
    assert timer.size == 0
    assert timer.next_expiration_ms() is None


def test_wheel_of_size_3_overflows_repeatedly():
    clock = FakeClock(1000)
    timer = Timer(tick_ms=1, wheel_size=3, clock=clock)
    log = []
    delays = [1, 2, 3, 5, 9, 10, 27, 28, 100, 1000]
    for d in delays:
        timer.add(Recorder(d, log, d))
    wheel, levels = timer.wheel, 0
    while wheel is not None:
        levels, wheel = levels + 1, wheel.overflow_wheel
    assert levels >= 6                           # 3, 9, 27, 81, 243, 729 ms ...
    for t in range(1000, 2001):
        advance(timer, clock, t)
        assert sorted(log) == [d for d in delays if 1000 + d <= t]
    assert timer.size == 0


def test_cancel_is_o1_unlink_and_task_never_fires():
    clock = FakeClock(0)
    timer = Timer(tick_ms=1, wheel_size=3, clock=clock)
    log = []
    a, b = Recorder(5, log, "a"), Recorder(5, log, "b")
    timer.add(a)
    timer.add(b)
    assert timer.size == 2
    a.cancel()
    assert timer.size == 1
    a.cancel()                                   # idempotent
    assert advance(timer, clock, 100) == 1
    assert log == ["b"]
    b.cancel()                                   # after firing: no-op
    assert timer.size == 0


def test_re_add_replaces_the_pending_entry():
    clock = FakeClock(0)
    timer = Timer(tick_ms=1, wheel_size=3, clock=clock)
    log = []
    t = Recorder(10, log, "t")
    timer.add(t)
    clock.now = 4
    t.delay_ms = 20
    timer.add(t)                                 # now due at 24, the 10 ms entry is gone
    assert timer.size == 1
    assert advance(timer, clock, 23) == 0
    assert advance(timer, clock, 24) == 1
    assert t.runs == 1
    timer.add(t)                                 # re-add after it ran: runs again
    assert advance(timer, clock, 44) == 1 and t.runs == 2


def test_expired_on_add_runs_on_next_advance_not_inside_add():
    clock = FakeClock(50)
    timer = Timer(clock=clock)
    log = []
    t = Recorder(0, log, "now")
    timer.add(t)
    assert log == []                             # add never calls back
    assert timer.size == 1
    assert timer.next_expiration_ms() <= 50
    assert timer.advance_clock(50) == 1 and log == ["now"]
    neg = Recorder(-5, log, "neg")
    timer.add(neg)
    neg.cancel()
    assert timer.size == 0
    assert timer.advance_clock(50) == 0


def test_task_may_add_and_cancel_from_run():
    clock = FakeClock(0)
    timer = Timer(tick_ms=1, wheel_size=3, clock=clock)
    log = []
    victim = Recorder(7, log, "victim")

    class Chain(TimerTask):
        def run(self):
            log.append("chain")
            victim.cancel()
            timer.add(CallbackTask(1, lambda: log.append("child")))

    timer.add(Chain(7))
    timer.add(victim)
    advance(timer, clock, 7)
    assert log == ["chain"]
    advance(timer, clock, 8)
    assert log == ["chain", "child"]


def test_failing_task_does_not_stop_others(caplog):
    clock = FakeClock(0)
    timer = Timer(clock=clock)
    log = []
    timer.add(CallbackTask(1, lambda: 1 / 0))
    timer.add(Recorder(1, log, "ok"))
    assert advance(timer, clock, 1) == 2
    assert log == ["ok"]


def test_tick_granularity_fires_at_start_of_tick():
    clock = FakeClock(0)
    timer = Timer(tick_ms=10, wheel_size=4, clock=clock)
    log = []
    timer.add(Recorder(27, log, 27))             # lowest-level bucket [20, 30)
    assert advance(timer, clock, 19) == 0
    assert advance(timer, clock, 20) == 1        # up to tick_ms - 1 early, as Kafka


def test_invalid_parameters():
    with pytest.raises(ValueError):
        Timer(tick_ms=0)
    with pytest.raises(ValueError):
        Timer(wheel_size=1)


# Property: Kafka's bound. A task added at time a with delay d (deadline
# D = a + d) is run by the first advance_clock(now) call after the add with
# now >= floor(D / tick) * tick, exactly once; a cancelled task never runs.
@settings(max_examples=150, deadline=None)
@given(
    tick=st.sampled_from([1, 1, 2, 5]),
    wheel_size=st.integers(2, 8),
    start=st.integers(0, 10_000),
    steps=st.lists(
        st.tuples(
            st.lists(st.integers(-3, 3000), max_size=4),   # delays added at this step
            st.integers(0, 400),                          # then advance by this much
            st.booleans(),                                # cancel the oldest pending task
        ),
        min_size=1, max_size=40),
)
def test_every_task_fires_exactly_once_within_kafkas_bound(tick, wheel_size, start, steps):
    clock = FakeClock(start)
    timer = Timer(tick_ms=tick, wheel_size=wheel_size, clock=clock)
    fired = {}                                   # task id -> [now of the calls that ran it]
    current = {"now": None}
    tasks = []

    class T(TimerTask):
        def __init__(self, delay):
            super().__init__(delay)
            self.deadline = clock.now + delay
            self.cancelled = False

        def run(self):
            fired.setdefault(id(self), []).append(current["now"])

    def check_call(now):
        current["now"] = now
        before = {id(t): len(fired.get(id(t), [])) for t in tasks}
        n = timer.advance_clock(now)
        ran = [t for t in tasks if len(fired.get(id(t), [])) > before[id(t)]]
        assert n == len(ran)
        for t in tasks:
            due = (t.deadline // tick) * tick <= now
            done_before = before[id(t)] > 0
            if t.cancelled or done_before:
                assert t not in ran
            else:
                assert (t in ran) == due, (t.deadline, now, tick)

    for delays, step, cancel in steps:
        for d in delays:
            t = T(d)
            tasks.append(t)
            timer.add(t)
        if cancel:
            pending = [t for t in tasks if id(t) not in fired and not t.cancelled]
            if pending:
                pending[0].cancel()
                pending[0].cancelled = True
        clock.now += step
        check_call(clock.now)
    clock.now += 100_000
    check_call(clock.now)
    for t in tasks:
        assert len(fired.get(id(t), [])) == (0 if t.cancelled else 1)
    assert timer.size == 0


def test_many_tasks_fire_in_deadline_order():
    clock = FakeClock(0)
    timer = Timer(clock=clock)
    log = []
    import random
    rng = random.Random(7)
    delays = [rng.randrange(0, 50_000) for _ in range(5000)]
    for i, d in enumerate(delays):
        timer.add(CallbackTask(d, lambda d=d: log.append((d, clock.now))))
    assert timer.size == 5000
    while timer.size:
        nxt = timer.next_expiration_ms()
        advance(timer, clock, max(nxt, clock.now))
    assert [d for d, _ in log] == sorted(delays)
    assert all(now == max(d, 0) for d, now in log)
