"""read_committed on the worker side: Fetch/ListOffsets handlers, DelayedFetch waking on
LSO moves, markers applied, transactional Produce and DescribeProducers (WriteTxnMarkers'
own errors: handlers/test_write_txn_markers.py; the marker split/merge: test_router.py).

The handlers run against real Partitions (real Logs in tmp dirs), a real fetch session
cache, real purgatories on a real timing wheel; the broker object around them is the
minimum the handlers read (the whole worker needs a controller and sockets, which
tests/integration/test_txn_markers.py covers)."""
from __future__ import annotations

import asyncio
import types

import pytest

from mpbroker.config import BROKER_CONFIGS
from mpbroker.protocol.errors import ErrorCode
from storage.batch import BatchBuilder
from storage.log import Log, LogConfig
from workers.fetch_session import FetchSessionCache
from mpbroker.protocol import api_keys as K
from workers.handlers import (describe_producers, fetch, list_offsets, produce as produce_handler,
                              write_txn_markers)
from workers.partition import Partition
from workers.purgatory import Purgatory
from workers.router import PART_SPECS, merge_partitions, split_partitions
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


def produce_req(batch, index=0, txn_id="tx"):
    return {"transactional_id": txn_id, "acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": TOPIC, "partition_data": [
                {"index": index, "records": memoryview(bytearray(batch))}]}]}


def produce_code(resp):
    return resp["responses"][0]["partition_responses"][0]["error_code"]


def test_produce_transactional_batches_and_verifier_hook(broker):
    calls = []

    def verifier(tid, pid, epoch, topic, index):
        calls.append((tid, pid, epoch, topic, index))
        return ErrorCode.INVALID_TXN_STATE if pid == 66 else ErrorCode.NONE
    # no transactional id: refused like Kafka's authorization check
    r = produce_handler.handle(broker, ctx(0, 7), produce_req(txn_batch(5, 0, b"x"), txn_id=None))
    assert produce_code(r) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    broker.txn_verifier = verifier
    r = produce_handler.handle(broker, ctx(0, 7), produce_req(txn_batch(66, 0, b"x")))
    assert produce_code(r) == ErrorCode.INVALID_TXN_STATE
    assert broker.partition(TOPIC, 0).log_end_offset == 0
    r = produce_handler.handle(broker, ctx(0, 7), produce_req(txn_batch(5, 0, b"x", epoch=3)))
    assert produce_code(r) == 0 and calls[-1] == ("tx", 5, 3, TOPIC, 0)
    assert broker.partition(TOPIC, 0).has_ongoing_txn(5)
    # plain batches are not verified
    n = len(calls)
    r = produce_handler.handle(broker, ctx(0, 7), produce_req(BatchBuilder().append(b"k", b"v")
                                                              .build(), txn_id=None))
    assert produce_code(r) == 0 and len(calls) == n
    # verification disabled by config
    broker.config["transaction.partition.verification.enable"] = False
    r = produce_handler.handle(broker, ctx(0, 7), produce_req(txn_batch(66, 0, b"x")))
    assert produce_code(r) == 0 and len(calls) == n
    assert broker.partition(TOPIC, 0).last_stable_offset == 0


def test_produce_waits_for_an_awaitable_verifier(broker):
    async def run():
        gate = asyncio.get_running_loop().create_future()

        async def answer():
            return await gate

        broker.txn_verifier = lambda *a: answer()
        out = produce_handler.handle(broker, ctx(0, 7), produce_req(txn_batch(5, 0, b"x")))
        task = asyncio.ensure_future(out)
        await asyncio.sleep(0)
        assert not task.done() and broker.partition(TOPIC, 0).log_end_offset == 0
        gate.set_result(ErrorCode.NONE)
        resp = await task
        assert produce_code(resp) == 0 and broker.partition(TOPIC, 0).log_end_offset == 1
    asyncio.run(run())


def test_describe_producers_shows_open_transactions(broker):
    produce(broker, 0, txn_batch(1, 0, b"a", epoch=2))
    produce(broker, 0, BatchBuilder(producer_id=2, producer_epoch=0, base_sequence=0)
            .append(b"k", b"idempotent").build())
    produce(broker, 0, txn_batch(3, 0, b"c"))
    write_txn_markers.apply_markers(broker, markers(3, True, [0], coordinator_epoch=4))
    r = describe_producers.handle(broker, ctx(61, 0), {"topics": [
        {"name": TOPIC, "partition_indexes": [0, 1, 9]},
        {"name": "nope", "partition_indexes": [0]}]})
    p0, p1, p9 = r["topics"][0]["partitions"]
    assert p0["error_code"] == 0 and p1["error_code"] == 0 and p1["active_producers"] == []
    assert p9["error_code"] == 3 and r["topics"][1]["partitions"][0]["error_code"] == 3
    got = {a["producer_id"]: (a["producer_epoch"], a["last_sequence"], a["coordinator_epoch"],
                              a["current_txn_start_offset"]) for a in p0["active_producers"]}
    assert got == {1: (2, 0, -1, 0), 2: (0, 0, -1, -1), 3: (0, 0, 4, -1)}


def test_describe_producers_split_by_owner_keeps_request_order():
    spec = PART_SPECS[K.DESCRIBE_PRODUCERS]
    req = {"topics": [{"name": "a", "partition_indexes": [3, 0, 1]},
                      {"name": "b", "partition_indexes": [2]}]}
    parts = split_partitions(req, spec, lambda t, p: p % 2)
    assert parts[0]["topics"] == [{"name": "a", "partition_indexes": [0]},
                                  {"name": "b", "partition_indexes": [2]}]
    assert parts[1]["topics"] == [{"name": "a", "partition_indexes": [3, 1]}]

    def answer(sub):
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [{"partition_index": i, "error_code": 0}
                                               for i in t["partition_indexes"]]}
            for t in sub["topics"]]}
    merged = merge_partitions(req, spec, [answer(parts[1]), answer(parts[0])])
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in merged["topics"]] == [("a", [3, 0, 1]), ("b", [2])]
