"""DeleteRecords on the worker (workers/handlers/delete_records.py): the low watermark
over live replicas, DelayedDeleteRecords in the purgatory (completion by follower
Fetches, by a broker leaving, by losing leadership, by timeout; exactly once), and the
per-partition errors Kafka gives.

Real Partitions over real Logs in a temporary directory, a real purgatory on a real
timing wheel with an injected clock, and the real Fetch handler for the follower side;
the broker object around them is the minimum the handlers read (tests/cluster covers a
real three-broker cluster)."""
from __future__ import annotations

import asyncio
import types

import pytest

from mpbroker.config import BROKER_CONFIGS
from mpbroker.protocol.errors import ErrorCode as E
from storage.batch import BatchBuilder
from storage.log import Log, LogConfig
from workers.fetch_session import FetchSessionCache
from workers.handlers import delete_records, fetch
from workers.partition import Partition
from workers.purgatory import Purgatory
from workers.timing_wheel import Timer

TID = b"\x07" * 16


class MiniBroker:
    """What the DeleteRecords and Fetch handlers read from `broker`; broker 1 leads."""

    def __init__(self, tmp_path):
        self.broker_id = 1
        self.clock_ms = 1_700_000_000_000
        self.timer = Timer(tick_ms=1, wheel_size=20, clock=lambda: self.clock_ms)
        self.fetch_purgatory = Purgatory("Fetch", self.timer)
        self.delete_records_purgatory = Purgatory("DeleteRecords", self.timer)
        self.fetch_sessions = FetchSessionCache(clock=lambda: self.clock_ms)
        self.partitions = {}
        self.tmp_path = tmp_path
        self.metadata = types.SimpleNamespace(topics={}, brokers={1: None, 2: None, 3: None})
        self.config = {k: c.default for k, c in BROKER_CONFIGS.items()}   # a BrokerConfig's defaults

    def clock(self):
        return self.clock_ms

    def add(self, name, replicas=(1, 2, 3), cleanup_policy="delete"):
        lg = Log.open(str(self.tmp_path / f"{name}-0"), LogConfig(cleanup_policy=cleanup_policy),
                      clock=self.clock)
        p = Partition(name, 0, TID, lg, leader_epoch=3, leader_id=1, replicated=len(replicas) > 1)
        p.make_leader(1, 3, replicas, replicas, 0, self.clock_ms)
        self.partitions[(name, 0)] = p
        self.metadata.topics[name] = types.SimpleNamespace(topic_id=TID, partitions={0: None})
        return p

    def partition(self, topic, index):
        return self.partitions.get((topic, index))

    def partition_error(self, topic, index):
        return E.UNKNOWN_TOPIC_OR_PARTITION

    def close(self):
        for p in self.partitions.values():
            if not p.closed:
                p.close()


@pytest.fixture
def broker(tmp_path):
    b = MiniBroker(tmp_path)
    yield b
    b.close()


def records(n):
    b = BatchBuilder()
    for i in range(n):
        b.append(None, b"v%d" % i)
    return memoryview(b.build())


def ctx(version=2):
    return types.SimpleNamespace(api_key=21, api_version=version, connection=None)


def request(topic, offset, timeout_ms=30000, partition=0):
    return {"timeout_ms": timeout_ms, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}]}


def only(resp):
    (t,) = resp["topics"]
    (part,) = t["partitions"]
    return part["error_code"], part["low_watermark"]


def follower_fetch(broker, replica, p, log_start):
    """A real follower Fetch (v12, no wait) from `replica` at the leader's log end."""
    req = {"replica_id": replica, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
           "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
           "forgotten_topics_data": [], "topics": [{"topic": p.topic, "partitions": [{
               "partition": 0, "current_leader_epoch": p.leader_epoch,
               "fetch_offset": p.log_end_offset, "last_fetched_epoch": -1,
               "log_start_offset": log_start, "partition_max_bytes": 1 << 20}]}]}
    resp = fetch.handle(broker, types.SimpleNamespace(api_key=1, api_version=12,
                                                       connection=None), req)
    assert resp["responses"][0]["partitions"][0]["error_code"] == 0
    return resp


def replicated(broker, name="t", n=10):
    p = broker.add(name)
    p.append(records(n))
    for replica in (2, 3):
        follower_fetch(broker, replica, p, 0)
    assert p.high_watermark == n
    return p


def test_waits_for_every_live_replica_then_completes_once(broker):
    async def main():
        p = replicated(broker)
        fut = delete_records.handle(broker, ctx(), request("t", 6))
        assert isinstance(fut, asyncio.Future) and not fut.done()
        assert p.log_start_offset == 6 and delete_records.low_watermark(p, {1, 2, 3}) == 0
        assert len(broker.delete_records_purgatory) == 1
        follower_fetch(broker, 2, p, 6)
        assert not fut.done()                          # replica 3 still starts at 0
        follower_fetch(broker, 3, p, 4)
        assert not fut.done()
        follower_fetch(broker, 3, p, 6)
        assert fut.done() and only(fut.result()) == (0, 6)
        assert len(broker.delete_records_purgatory) == 0
        # exactly once: later events and the timeout change nothing
        assert broker.delete_records_purgatory.check_and_complete(p.key) == 0
        broker.clock_ms += 60_000
        broker.timer.advance_clock(broker.clock_ms)
        assert only(fut.result()) == (0, 6)
    asyncio.run(main())


def test_timeout_answers_request_timed_out(broker):
    async def main():
        p = replicated(broker)
        follower_fetch(broker, 2, p, 3)
        fut = delete_records.handle(broker, ctx(), request("t", 8, timeout_ms=500))
        follower_fetch(broker, 2, p, 8)
        broker.clock_ms += 499
        broker.timer.advance_clock(broker.clock_ms)
        assert not fut.done()
        broker.clock_ms += 1
        broker.timer.advance_clock(broker.clock_ms)
        # the low watermark known when the leader deleted (replica 3 at 0)
        assert only(fut.result()) == (E.REQUEST_TIMED_OUT, 0)
        assert p.log_start_offset == 8                 # the leader's deletion stays
    asyncio.run(main())


def test_replica_on_a_dead_broker_is_not_waited_for(broker):
    async def main():
        p = replicated(broker)
        fut = delete_records.handle(broker, ctx(), request("t", -1))   # -1: the HW (10)
        follower_fetch(broker, 2, p, 10)
        assert not fut.done()
        del broker.metadata.brokers[3]             # what Worker._reconcile then checks
        broker.delete_records_purgatory.check_and_complete(p.key)
        assert only(fut.result()) == (0, 10)
    asyncio.run(main())


def test_leadership_lost_while_waiting(broker):
    async def main():
        p = replicated(broker)
        fut = delete_records.handle(broker, ctx(), request("t", 5))
        p.make_follower(2, 4, (1, 2, 3), (2, 3), 1)
        broker.delete_records_purgatory.check_and_complete(p.key)
        assert only(fut.result()) == (E.NOT_LEADER_OR_FOLLOWER, -1)
    asyncio.run(main())


def test_one_replica_answers_at_once(broker):
    async def main():
        p = broker.add("single", replicas=(1,))
        p.append(records(4))
        resp = delete_records.handle(broker, ctx(), request("single", 3))
        assert isinstance(resp, dict) and only(resp) == (0, 3)
        # at or below the log start: nothing moves, the current start is answered
        assert only(delete_records.handle(broker, ctx(), request("single", 1))) == (0, 3)
        assert len(broker.delete_records_purgatory) == 0
    asyncio.run(main())


@pytest.mark.parametrize("topic,offset,code", [
    ("compacted", 1, E.POLICY_VIOLATION),           # cleanup.policy=compact only
    ("__consumer_offsets", 0, E.INVALID_TOPIC_EXCEPTION),
    ("single", 5, E.OFFSET_OUT_OF_RANGE),           # above the high watermark (4)
    ("single", -2, E.OFFSET_OUT_OF_RANGE),
    ("missing", 0, E.UNKNOWN_TOPIC_OR_PARTITION),
])
def test_errors(broker, topic, offset, code):
    async def main():
        broker.add("single", replicas=(1,)).append(records(4))
        broker.add("compacted", replicas=(1,), cleanup_policy="compact")
        b = BatchBuilder()
        b.append(b"k", b"v")
        broker.partition("compacted", 0).append(memoryview(b.build()))
        broker.add("__consumer_offsets", replicas=(1,))
        assert only(delete_records.handle(broker, ctx(), request(topic, offset))) == (code, -1)
        assert broker.partition("compacted", 0).log_start_offset == 0
    asyncio.run(main())


def test_compact_and_delete_policy_allows_deletion(broker):
    async def main():
        p = broker.add("both", replicas=(1,), cleanup_policy="compact,delete")
        b = BatchBuilder()
        for i in range(3):
            b.append(b"k%d" % i, b"v")
        p.append(memoryview(b.build()))
        assert only(delete_records.handle(broker, ctx(), request("both", 2))) == (0, 2)
    asyncio.run(main())


def test_a_deletion_that_fails_after_moving_the_log_start_still_checks_the_partition(broker):
    """The log start moved, then deleting the segments below it failed: the error is
    answered, and the partition's fetch waiters hear of the new start all the same."""
    from storage import errors as serr

    async def main():
        p = broker.add("single", replicas=(1,))
        p.append(records(4))
        real = p.delete_records_before

        def failing(offset):
            real(offset)
            raise serr.KafkaStorageError("deleting segments: EIO")
        p.delete_records_before = failing
        seen = []

        class Listener:
            checked = staticmethod(seen.append)
        broker.fetch_purgatory.listen([p.key], Listener())
        code, _ = only(delete_records.handle(broker, ctx(), request("single", 2)))
        assert code == E.KAFKA_STORAGE_ERROR
        assert p.log_start_offset == 2 and seen == [p.key]
    asyncio.run(main())
