"""read_committed on the worker side: Fetch/ListOffsets handlers, DelayedFetch waking on
LSO moves and on markers (the handlers' other tests, on this module's MiniBroker:
handlers/test_produce.py, test_describe_producers.py, test_write_txn_markers.py).

The handlers run against real Partitions (real Logs in tmp dirs), a real fetch session
cache, real purgatories on a real timing wheel; the broker object around them is the
minimum the handlers read (the whole worker needs a controller and sockets, which
tests/integration/test_txn_markers.py covers)."""
from __future__ import annotations

import asyncio
import types

import pytest

from mpbroker.config import BROKER_CONFIGS
from storage.batch import BatchBuilder
from storage.log import Log, LogConfig
from workers.fetch_session import FetchSessionCache
from workers.handlers import fetch, list_offsets, write_txn_markers
from workers.partition import Partition
from workers.purgatory import Purgatory
from workers.timing_wheel import Timer

TOPIC = "t"


class MiniBroker:
    """What fetch/list_offsets/write_txn_markers read from `broker`."""

    def __init__(self, tmp_path, partitions=2):
        self.clock_ms = 1_700_000_000_000
        self.timer = Timer(tick_ms=1, wheel_size=20, clock=lambda: self.clock_ms)
        self.fetch_purgatory = Purgatory("Fetch", self.timer)
        self.produce_purgatory = Purgatory("Produce", self.timer)
        self.fetch_sessions = FetchSessionCache(clock=lambda: self.clock_ms)
        self.partitions = {}
        for i in range(partitions):
            log = Log.open(str(tmp_path / f"{TOPIC}-{i}"), LogConfig())
            self.partitions[(TOPIC, i)] = Partition(TOPIC, i, b"\x01" * 16, log)
        topic = types.SimpleNamespace(topic_id=b"\x01" * 16, partitions={i: None for i in
                                                                          range(partitions)})
        self.metadata = types.SimpleNamespace(topics={TOPIC: topic})
        self.placement = None       # the placement table (a router's fan-out compares it)
        # the table's defaults, as a BrokerConfig with no props answers
        self.config = {**{k: c.default for k, c in BROKER_CONFIGS.items()}, "request.timeout.ms": 1000}
        self.groups = None
        self.txn_verifier = None

    def clock(self):
        return self.clock_ms

    def partition(self, topic, index):
        return self.partitions.get((topic, index))

    def partition_error(self, topic, index):
        return 3 if (topic, index) not in self.partitions else 6

    def close(self):
        for p in self.partitions.values():
            p.close()


@pytest.fixture
def broker(tmp_path):
    b = MiniBroker(tmp_path)
    yield b
    b.close()


def ctx(api_key, version):
    return types.SimpleNamespace(api_key=api_key, api_version=version, connection=None)


def txn_batch(pid, seq, value, epoch=0):
    return BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=True).append(b"k", value).build()


def produce(broker, index, data):
    p = broker.partition(TOPIC, index)
    p.append(memoryview(bytearray(data)))
    broker.fetch_purgatory.check_and_complete(p.key)     # what the produce handler does


def fetch_req(offset, isolation, max_wait_ms=0, index=0):
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": index, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}


def part_of(resp):
    return resp["responses"][0]["partitions"][0]


def markers(pid, commit, indexes, epoch=0, coordinator_epoch=0):
    return [{"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
             "topics": [{"name": TOPIC, "partition_indexes": list(indexes)}],
             "coordinator_epoch": coordinator_epoch}]


def test_read_committed_fetch_stops_at_lso_with_aborted_list(broker):
    produce(broker, 0, txn_batch(1, 0, b"a"))                        # 0
    produce(broker, 0, txn_batch(2, 0, b"b"))                        # 1
    res = write_txn_markers.apply_markers(broker, markers(1, False, [0]))   # 2
    assert res == [{"producer_id": 1, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "error_code": 0}]}]}]
    p = broker.partition(TOPIC, 0)
    assert p.last_stable_offset == 1 and p.high_watermark == 3
    committed = part_of(fetch.handle(broker, ctx(1, 11), fetch_req(0, 1)))
    assert committed["last_stable_offset"] == 1 and committed["high_watermark"] == 3
    assert committed["aborted_transactions"] == [{"producer_id": 1, "first_offset": 0}]
    assert sum(s.length for s in committed["records"]) > 0
    uncommitted = part_of(fetch.handle(broker, ctx(1, 11), fetch_req(0, 0)))
    assert uncommitted["aborted_transactions"] is None
    assert uncommitted["last_stable_offset"] == 1
    assert sum(s.length for s in uncommitted["records"]) > \
        sum(s.length for s in committed["records"])
    # at the LSO: nothing for read_committed, data for read_uncommitted
    assert part_of(fetch.handle(broker, ctx(1, 11), fetch_req(1, 1)))["records"] == []
    assert part_of(fetch.handle(broker, ctx(1, 11), fetch_req(1, 0)))["records"]
    # ListOffsets LATEST per isolation level
    lo = {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "timestamp": -1}]}]}
    for iso, want in ((0, 3), (1, 1)):
        r = list_offsets.handle(broker, ctx(2, 5), {**lo, "isolation_level": iso})
        assert r["topics"][0]["partitions"][0]["offset"] == want


def test_delayed_read_committed_fetch_wakes_on_lso_not_on_open_data(broker):
    async def run():
        produce(broker, 0, txn_batch(1, 0, b"open"))                  # 0: open txn
        fut = fetch.handle(broker, ctx(1, 11), fetch_req(0, 1, max_wait_ms=5000))
        assert asyncio.isfuture(fut) and not fut.done()
        unc = fetch.handle(broker, ctx(1, 11), fetch_req(1, 0, max_wait_ms=5000))
        assert asyncio.isfuture(unc) and not unc.done()
        produce(broker, 0, txn_batch(1, 1, b"more open"))             # 1
        produce(broker, 1, BatchBuilder().append(b"k", b"other partition").build())
        await asyncio.sleep(0)
        assert not fut.done()                     # open transactional data: no wake-up
        assert unc.done()                         # read_uncommitted sees it at once
        out = write_txn_markers.apply_markers(broker, markers(1, True, [0]))
        assert out[0]["topics"][0]["partitions"][0]["error_code"] == 0
        assert fut.done()                         # the COMMIT moved the LSO: answered
        part = part_of(fut.result())
        assert part["last_stable_offset"] == 3 and part["aborted_transactions"] == []
        assert sum(s.length for s in part["records"]) > 0
    asyncio.run(run())
