"""workers/delayed.py: the request path's delayed operations complete when what they
wait for happened (or the partition went), resolve their future once, on a fake clock."""
from __future__ import annotations

import asyncio
import types

from mpbroker.protocol.errors import ErrorCode
from workers.delayed import (DelayedDeleteRecords, DelayedFetch, DelayedProduce, alive_brokers,
                             low_watermark)
from workers.purgatory import Purgatory
from workers.timing_wheel import Timer


class FakePartition:
    def __init__(self, topic="t", index=0, **kw):
        self.topic, self.index = topic, index
        self.key = (topic, index)
        self.high_watermark = 0
        self.last_stable_offset = 0
        self.log_start_offset = 0
        self.bytes_appended = self.bytes_committed = 0
        self.closed, self.is_leader, self.replicated = False, True, False
        self.maximal_isr, self.min_isr = (1,), 1
        self.followers = {}
        self.__dict__.update(kw)


def purgatory():
    clock = {"now": 0}
    return Purgatory("test", Timer(tick_ms=1, wheel_size=20, clock=lambda: clock["now"])), clock


def test_delayed_produce_done_when_the_high_watermark_passes_the_last_offset():
    async def run():
        p = FakePartition()
        result = {"error_code": 0}
        fut = asyncio.get_running_loop().create_future()
        op = DelayedProduce(1000, [(p, 4, result)], {"r": result}, fut)
        pg, _ = purgatory()
        pg.try_complete_else_watch(op, [p.key])
        assert not fut.done()
        p.high_watermark = 5
        pg.check_and_complete(p.key)
        assert fut.result() == {"r": {"error_code": 0}}
    asyncio.run(run())


def test_delayed_produce_on_a_partition_no_longer_led_here():
    async def run():
        p = FakePartition(is_leader=False)
        result = {"error_code": 0}
        fut = asyncio.get_running_loop().create_future()
        DelayedProduce(1000, [(p, 4, result)], result, fut).try_complete()
        assert fut.result()["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    asyncio.run(run())


class FakePlan:
    def __init__(self, broker, partitions, min_bytes=10, replica_id=-1, isolation_level=0):
        self.broker, self.min_bytes, self.max_wait_ms = broker, min_bytes, 1000
        self.replica_id, self.isolation_level = replica_id, isolation_level
        self.fctx = types.SimpleNamespace(partitions=[
            types.SimpleNamespace(topic=p.topic, partition=p.index) for p in partitions])
        self.reads = 0

    def read_all(self):
        self.reads += 1
        return ["read"], 0, False

    def response(self, results):
        return {"results": results}


def fake_broker(*partitions):
    by_key = {p.key: p for p in partitions}
    return types.SimpleNamespace(partition=lambda t, i: by_key.get((t, i)),
                                 metadata=types.SimpleNamespace(brokers={1: None, 2: None}))


def test_delayed_fetch_counts_committed_bytes_for_consumers_appended_for_followers():
    async def run():
        p = FakePartition(bytes_appended=100, bytes_committed=50)
        broker = fake_broker(p)
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        consumer = DelayedFetch(FakePlan(broker, [p]), answer)
        follower = DelayedFetch(FakePlan(broker, [p], replica_id=2), loop.create_future())
        p.bytes_appended += 10                  # appended, not yet committed
        assert not consumer.try_complete() and follower.try_complete()
        p.bytes_committed += 10
        assert consumer.try_complete()
        assert answer.result() == {"results": ["read"]} and consumer.plan.reads == 1
        assert consumer.future is None and consumer.start_bytes == {}    # nothing kept
    asyncio.run(run())


def test_delayed_fetch_read_committed_waits_for_the_lso_to_move():
    async def run():
        p = FakePartition()
        op = DelayedFetch(FakePlan(fake_broker(p), [p], isolation_level=1),
                          asyncio.get_running_loop().create_future())
        p.bytes_committed += 100
        assert not op.try_complete()            # an open transaction: the LSO stayed
        p.last_stable_offset = 3
        assert op.try_complete()
    asyncio.run(run())


def test_delayed_fetch_completes_when_a_watched_partition_went_away():
    async def run():
        p = FakePartition()
        broker = fake_broker(p)
        answer = asyncio.get_running_loop().create_future()
        op = DelayedFetch(FakePlan(broker, [p]), answer)
        p.closed = True
        assert op.try_complete() and answer.done()
    asyncio.run(run())


def test_low_watermark_over_the_live_followers():
    p = FakePartition(log_start_offset=8, followers={
        1: types.SimpleNamespace(log_start_offset=5), 3: types.SimpleNamespace(log_start_offset=0)})
    assert low_watermark(p, {1, 2}) == 5 and low_watermark(p, {1, 3}) == 0
    assert alive_brokers(types.SimpleNamespace(metadata=None)) == ()


def test_delayed_delete_records_settles_each_partition_once():
    async def run():
        a = FakePartition(index=0, log_start_offset=6,
                          followers={1: types.SimpleNamespace(log_start_offset=2)})
        b = FakePartition(index=1)
        broker = fake_broker(a, b)
        ra = {"error_code": ErrorCode.REQUEST_TIMED_OUT, "low_watermark": 2}
        rb = {"error_code": ErrorCode.REQUEST_TIMED_OUT, "low_watermark": 0}
        fut = asyncio.get_running_loop().create_future()
        op = DelayedDeleteRecords(1000, broker, [(a, 6, ra), (b, 3, rb)], {"all": 1}, fut)
        assert not op.try_complete()
        b.is_leader = False                     # b lost leadership
        a.followers[1].log_start_offset = 6     # a's follower caught up
        assert op.try_complete() and fut.result() == {"all": 1}
        assert ra == {"error_code": 0, "low_watermark": 6}
        assert rb == {"error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "low_watermark": -1}
    asyncio.run(run())


def test_delayed_fetch_key_checks_recount_only_that_partition():
    async def run():
        a, b = FakePartition(index=0), FakePartition(index=1)
        broker = fake_broker(a, b)
        lookups = []
        find = broker.partition
        broker.partition = lambda t, i: lookups.append(i) or find(t, i)
        answer = asyncio.get_running_loop().create_future()
        op = DelayedFetch(FakePlan(broker, [a, b], min_bytes=10), answer)
        lookups.clear()
        a.bytes_committed += 6
        assert not op.try_complete_key(a.key) and lookups == [0]
        b.bytes_committed += 3
        assert not op.try_complete_key(b.key)
        a.bytes_committed += 1                  # 7 + 3: the sum over both partitions
        assert op.try_complete_key(a.key) and answer.done()
    asyncio.run(run())


def test_delayed_fetch_key_check_completes_when_its_partition_went_away():
    async def run():
        a, b = FakePartition(index=0), FakePartition(index=1)
        op = DelayedFetch(FakePlan(fake_broker(a, b), [a, b]),
                          asyncio.get_running_loop().create_future())
        assert not op.try_complete_key(b.key)
        b.closed = True
        assert op.try_complete_key(b.key)
    asyncio.run(run())


def test_delayed_fetch_key_check_read_committed_and_unknown_keys():
    async def run():
        p = FakePartition()
        answer = asyncio.get_running_loop().create_future()
        op = DelayedFetch(FakePlan(fake_broker(p), [p], isolation_level=1), answer)
        p.bytes_committed += 100
        assert not op.try_complete_key(p.key)   # the LSO stayed: nothing counts
        p.last_stable_offset = 3
        assert op.try_complete_key(("t", 9))     # a key it does not read: the full check
        assert answer.done()
    asyncio.run(run())


def test_delayed_fetch_in_the_purgatory_wakes_on_its_keys():
    async def run():
        a, b = FakePartition(index=0), FakePartition(index=1)
        pg, _ = purgatory()
        answer = asyncio.get_running_loop().create_future()
        op = DelayedFetch(FakePlan(fake_broker(a, b), [a, b], min_bytes=1), answer)
        assert not pg.try_complete_else_watch(op, list(op.start_bytes))
        assert pg.check_and_complete(a.key) == 0
        b.bytes_committed += 1
        assert pg.check_and_complete(b.key) == 1 and answer.done()
    asyncio.run(run())


def test_delayed_fetch_counts_from_a_given_start_and_what_was_found():
    """`start`: counters older than now (what arrived since completes at once); `base`:
    bytes found already count towards min_bytes; a counter that went back (the
    partition replaced) completes the op."""
    async def run():
        loop = asyncio.get_running_loop()
        p = FakePartition(bytes_appended=100, bytes_committed=100)
        broker = fake_broker(p)
        older = DelayedFetch(FakePlan(broker, [p]), loop.create_future(),
                             start={("t", 0): (90, 90, 0)})
        assert older.try_complete()
        plan = FakePlan(broker, [p])
        plan.min_bytes = 30
        found = DelayedFetch(plan, loop.create_future(), base=20)
        assert not found.try_complete()
        p.bytes_committed += 10
        assert found.try_complete_key(("t", 0))
        replaced = DelayedFetch(FakePlan(broker, [p]), loop.create_future())
        p.bytes_committed = 0
        assert replaced.try_complete_key(("t", 0))
    asyncio.run(run())


def test_a_partition_gone_when_the_fetch_parks_completes_it_at_the_first_check():
    """Absent or closed already when the op is made: `gone`, so the park checks it
    (workers/handlers/fetch/plan.py `park`) and it completes at once."""
    async def run():
        loop = asyncio.get_running_loop()
        p, closed = FakePartition(index=0), FakePartition(index=1, closed=True)
        for plan in (FakePlan(fake_broker(p), [p, FakePartition(index=2)]),
                     FakePlan(fake_broker(p, closed), [p, closed]),
                     FakePlan(fake_broker(p, closed), [p, closed], isolation_level=1)):
            op = DelayedFetch(plan, loop.create_future())
            assert op.gone and op.try_complete() and op.is_completed
        op = DelayedFetch(FakePlan(fake_broker(p), [p]), loop.create_future())
        assert not op.gone and not op.try_complete()
    asyncio.run(run())


def test_a_fetch_parked_from_the_partitions_its_read_looked_up_counts_as_one_looked_up_again():
    """`looked` (the read's Partition objects, None where one is not led here) gives the
    same counters, LSOs and `gone` as looking each partition up, without the lookups."""
    async def run():
        loop = asyncio.get_running_loop()
        a = FakePartition(index=0, bytes_appended=100, bytes_committed=70, last_stable_offset=4)
        b = FakePartition(index=1, bytes_appended=9, bytes_committed=5)
        closed = FakePartition(index=2, closed=True)
        lookups = []

        def nobody(t, i):
            lookups.append((t, i))
        broker = types.SimpleNamespace(partition=nobody)
        for isolation in (0, 1):
            for replica in (-1, 2):
                plan = FakePlan(broker, [a, b], replica_id=replica, isolation_level=isolation)
                op = DelayedFetch(plan, loop.create_future(), lookup=fake_broker(a, b).partition,
                                  looked=[a, b])
                ref = DelayedFetch(plan, loop.create_future(), lookup=fake_broker(a, b).partition)
                assert (op.start_bytes, op.start_lso, op.gone) == \
                    (ref.start_bytes, ref.start_lso, ref.gone)
                assert op.start_bytes[("t", 0)] == (100 if replica >= 0 else 70)
        assert lookups == []
        for looked in ([a, None], [a, closed]):
            plan = FakePlan(broker, [a, b if looked[1] is None else closed])
            op = DelayedFetch(plan, loop.create_future(), looked=looked)
            assert op.gone
        assert not DelayedFetch(FakePlan(broker, [a, b]), loop.create_future(),
                                looked=[a, b]).gone
    asyncio.run(run())
