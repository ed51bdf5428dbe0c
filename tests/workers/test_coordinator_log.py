"""The coordinators' shared runtime (workers/coordinator_log.py) with fakes: a partition
that records appends, purgatories over a timer that never fires, a log of fake batches.
The append's refusals (leader, min.insync.replicas, storage), the wait for the high
watermark, and the replay's chunks and restarts."""
from __future__ import annotations

import asyncio

import pytest

from mpbroker.protocol.errors import ErrorCode as E
from storage import errors as serr
from storage.batch import BatchBuilder
from workers import coordinator_log as cl
from workers.purgatory import Purgatory
from workers.timing_wheel import Timer


class FakePartition:
    key = ("__transaction_state", 0)

    def __init__(self, isr=1, min_isr=1):
        self.closed = False
        self.is_leader = True
        self.replicated = isr > 1
        self.isr = list(range(isr))
        self.maximal_isr = self.isr
        self.min_isr = min_isr
        self.high_watermark = 0
        self.log_end_offset = 0
        self.appended = []
        self.fail = None

    def not_enough_replicas(self):
        return self.is_leader and len(self.isr) < self.min_isr

    def append(self, records):
        if self.fail is not None:
            raise self.fail
        self.appended.append(bytes(records))

        class Info:
            last_offset = self.log_end_offset
        self.log_end_offset += 1
        if not self.replicated:
            self.high_watermark = self.log_end_offset
        return Info


class FakeBroker:
    def __init__(self):
        timer = Timer(clock=lambda: 0)
        self.fetch_purgatory = Purgatory("Fetch", timer, timer_enabled=False)
        self.produce_purgatory = Purgatory("Produce", timer, timer_enabled=False)


BATCH = BatchBuilder(clock=lambda: 0).append(b"k", b"v").build()


def append(b, p, acks=-1):
    codes = []
    code = cl.append_committed(b, p, BATCH, codes.append, required_acks=acks, timeout_ms=1000)
    return code, codes


def test_refused_when_not_the_leader():
    b, p = FakeBroker(), FakePartition()
    p.is_leader = False
    assert append(b, p) == (E.NOT_LEADER_OR_FOLLOWER, [])
    p.is_leader, p.closed = True, True
    assert append(b, p) == (E.NOT_LEADER_OR_FOLLOWER, [])
    assert p.appended == []


def test_refused_below_min_insync_replicas_with_acks_all_only():
    b, p = FakeBroker(), FakePartition(isr=1, min_isr=2)
    assert append(b, p) == (E.NOT_ENOUGH_REPLICAS, [])
    assert p.appended == []
    assert append(b, p, acks=1) == (0, [0])          # acks 1: committed by the append
    assert len(p.appended) == 1


def test_refused_by_the_log():
    b, p = FakeBroker(), FakePartition()
    p.fail = serr.KafkaStorageError("disk")
    assert append(b, p) == (serr.KafkaStorageError.code, [])


def test_one_replica_is_committed_by_the_append():
    b, p = FakeBroker(), FakePartition()
    assert append(b, p) == (0, [0])


def test_waits_for_the_high_watermark():
    async def main():
        b, p = FakeBroker(), FakePartition(isr=2, min_isr=2)
        code, codes = append(b, p)
        assert (code, codes) == (0, [])
        p.high_watermark = p.log_end_offset             # the follower fetched it
        b.produce_purgatory.check_and_complete(p.key)
        await asyncio.sleep(0)
        assert codes == [0]
    asyncio.run(main())


def test_append_committed_async_returns_the_refusal_or_the_final_code():
    async def main():
        b, p = FakeBroker(), FakePartition(isr=1, min_isr=2)
        assert await cl.append_committed_async(b, p, BATCH, required_acks=-1,
                                               timeout_ms=1000) == E.NOT_ENOUGH_REPLICAS
        p = FakePartition(isr=2, min_isr=2)
        waiting = asyncio.ensure_future(cl.append_committed_async(
            b, p, BATCH, required_acks=-1, timeout_ms=1000))
        await asyncio.sleep(0)
        assert not waiting.done()
        p.is_leader = False                             # lost the leadership meanwhile
        b.produce_purgatory.check_and_complete(p.key)
        assert await waiting == E.NOT_LEADER_OR_FOLLOWER
    asyncio.run(main())


class FakeLog:
    """`read_records_bytes` over a list of real one-record batches."""

    def __init__(self, n):
        self.batches = [BatchBuilder(base_offset=i, clock=lambda: 0).append(b"k%d" % i, b"v")
                        .build() for i in range(n)]
        self.log_start_offset = 0
        self.log_end_offset = n
        self.reads = []

    def read_records_bytes(self, offset, max_bytes):
        self.reads.append(offset)
        out = b""
        for data in self.batches[offset:]:
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return out


def test_replay_reads_in_chunks_to_the_log_end():
    lg, seen = FakeLog(10), []
    chunks = asyncio.run(cl.replay(lg, len(lg.batches[0]) * 3, lambda b: seen.append(
        b.base_offset), "t-0"))
    assert seen == list(range(10)) and chunks == 4 and lg.reads == [0, 3, 6, 9]


def test_replay_stops_when_the_partition_is_lost():
    lg, seen = FakeLog(10), []
    chunks = asyncio.run(cl.replay(lg, len(lg.batches[0]) * 3, lambda b: seen.append(
        b.base_offset), "t-0", still_ours=lambda: False))
    assert chunks == 1 and seen == [0, 1, 2]


def test_replay_of_an_unreadable_log_fails():
    lg = FakeLog(2)
    lg.read_records_bytes = lambda offset, max_bytes: b""
    with pytest.raises(cl.LoadError):
        asyncio.run(cl.replay(lg, 100, lambda b: None, "t-0"))


def test_load_with_backoff_retries_while_ours(monkeypatch):
    monkeypatch.setattr(cl, "LOAD_RETRY_MIN_MS", 0)
    attempts, failures = [], []

    async def load():
        attempts.append(1)
        if len(attempts) < 3:
            raise cl.LoadError("not yet")
        return "state"
    assert asyncio.run(cl.load_with_backoff(load, lambda: True, "t-0",
                                            lambda: failures.append(1))) == "state"
    assert len(attempts) == 3 and len(failures) == 2
    attempts.clear()
    assert asyncio.run(cl.load_with_backoff(load, lambda: False, "t-0")) is None
    assert len(attempts) == 1
