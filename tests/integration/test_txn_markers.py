"""Transactions, partition side, against the real broker: WriteTxnMarkers and read_committed.

No public client sends WriteTxnMarkers (API 27: the transaction coordinator does), so
the markers go through a small raw client built on the project's codec; the producer
ids come from InitProducerId without a transactional id, the transactional batches are
produced as Produce v7 with a transactional id (`transaction.partition.verification.enable
=false`, so the KIP-890 coordinator check does not ask about a transaction that no
coordinator knows).  What is read is read by real consumers: confluent-kafka,
kafka-python and aiokafka with isolation.level read_committed (exactly the committed
records) and read_uncommitted (everything but the markers).  Two workers, so the
markers of one request are split between the partitions' owners.
"""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from mpbroker.protocol import api_keys as K
from mpbroker.protocol import codec, framing
from storage.batch import BatchBuilder
from tests.integration import broker as h

pytestmark = pytest.mark.timeout(180)

TXN_ID = "partition-side-test"
# the test plays the transaction coordinator: a lone broker refuses WriteTxnMarkers from
# clients unless told otherwise (issue #17)
OVERRIDES = {"transaction.partition.verification.enable": "false", "num.workers": 2,
             "lone.broker.inter.broker.requests.enable": "true"}


class RawClient:
    """One connection, one request at a time, the project's codec."""

    def __init__(self, bootstrap: str):
        self.sock = h.connect(bootstrap, timeout=20.0)
        self.corr = 0

    def call(self, api_key: int, version: int, body: dict) -> dict:
        self.corr += 1
        self.sock.sendall(framing.frame_request(api_key, version, self.corr, "txn-test", body))
        frame = memoryview(h.recv_frame(self.sock))
        corr, pos = framing.parse_response_header(frame, api_key, version)
        assert corr == self.corr
        return codec.decode_response(api_key, version, frame, pos)

    def close(self):
        self.sock.close()

    # -- helpers
    def init_pid(self) -> tuple[int, int]:
        r = self.call(K.INIT_PRODUCER_ID, 1, {"transactional_id": None,
                                                "transaction_timeout_ms": 60000})
        assert r["error_code"] == 0, r
        return r["producer_id"], r["producer_epoch"]

    def produce(self, topic: str, partition: int, batch: bytes, txn_id=TXN_ID) -> tuple[int, int]:
        r = self.call(K.PRODUCE, 7, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 10000,
                                     "topic_data": [{"name": topic, "partition_data": [
                                         {"index": partition, "records": batch}]}]})
        p = r["responses"][0]["partition_responses"][0]
        return p["error_code"], p["base_offset"]

    def markers(self, markers: list) -> dict:
        """{(producer id, topic, partition): error code} of one WriteTxnMarkers v1."""
        r = self.call(K.WRITE_TXN_MARKERS, 1, {"markers": markers})
        out = {}
        assert len(r["markers"]) == len(markers)
        for m in r["markers"]:
            for t in m["topics"]:
                for p in t["partitions"]:
                    out[(m["producer_id"], t["name"], p["partition_index"])] = p["error_code"]
        return out

    def list_latest(self, topic: str, partition: int, isolation: int) -> int:
        r = self.call(K.LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": isolation,
                                          "topics": [{"name": topic, "partitions": [
                                              {"partition_index": partition, "timestamp": -1}]}]})
        p = r["topics"][0]["partitions"][0]
        assert p["error_code"] == 0, p
        return p["offset"]

    def open_txns(self, topic: str, partitions) -> dict:
        """{partition: {producer id: current txn start offset}} from DescribeProducers."""
        r = self.call(K.DESCRIBE_PRODUCERS, 0, {"topics": [
            {"name": topic, "partition_indexes": list(partitions)}]})
        out = {}
        for p in r["topics"][0]["partitions"]:
            assert p["error_code"] == 0, p
            out[p["partition_index"]] = {a["producer_id"]: a["current_txn_start_offset"]
                                         for a in p["active_producers"]}
        return out

    def fetch(self, topic: str, partition: int, offset: int, isolation: int,
              max_wait_ms: int = 0) -> dict:
        r = self.call(K.FETCH, 11, {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
                                    "max_bytes": 1 << 20, "isolation_level": isolation,
                                    "session_id": 0, "session_epoch": -1,
                                    "topics": [{"topic": topic, "partitions": [
                                        {"partition": partition, "fetch_offset": offset,
                                         "partition_max_bytes": 1 << 20}]}]})
        return r["responses"][0]["partitions"][0]


def marker(pid, epoch, commit, topic, partitions, coordinator_epoch=0):
    return {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
            "topics": [{"name": topic, "partition_indexes": list(partitions)}],
            "coordinator_epoch": coordinator_epoch}


def txn_batch(pid, epoch, seq, values):
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     is_transactional=True)
    for v in values:
        b.append(b"k", v)
    return b.build()


def plain_batch(values):
    b = BatchBuilder()
    for v in values:
        b.append(b"k", v)
    return b.build()


@pytest.fixture
def txn_broker(fresh_broker):
    return fresh_broker(OVERRIDES)


PARTITIONS = 4
COMMITTED = [b"b0", b"n0", b"b1", b"c0"]
EVERYTHING = [b"a0", b"b0", b"n0", b"a1", b"b1", b"c0"]


def run_scenario(bootstrap: str, topic: str) -> dict:
    """On every partition: pid1 a0, pid2 b0, plain n0, pid1 a1, ABORT pid1, pid2 b1,
    COMMIT pid2, pid1 c0 (open), then COMMIT pid1.  Checks the LSO on the way."""
    c = RawClient(bootstrap)
    try:
        (p1, e1), (p2, e2) = c.init_pid(), c.init_pid()
        assert p1 != p2
        seq = {p1: 0, p2: 0}
        first_a = {}

        def send(pid, epoch, values, part):
            err, base = c.produce(topic, part, txn_batch(pid, epoch, seq[pid], values))
            assert err == 0, err
            return base

        parts = range(PARTITIONS)
        for part in parts:
            first_a[part] = send(p1, e1, [b"a0"], part)
            send(p2, e2, [b"b0"], part)
            err, _ = c.produce(topic, part, plain_batch([b"n0"]), txn_id=None)
            assert err == 0
        seq[p1] += 1
        seq[p2] += 1
        for part in parts:
            send(p1, e1, [b"a1"], part)
            # both transactions open: LSO is the first offset of pid1's
            assert c.list_latest(topic, part, 1) == first_a[part]
            assert c.list_latest(topic, part, 0) == 4
        seq[p1] += 1
        codes = c.markers([marker(p1, e1, False, topic, parts)])
        assert set(codes.values()) == {0}, codes
        for part in parts:
            assert c.list_latest(topic, part, 1) == 1          # pid2's b0 still open
            send(p2, e2, [b"b1"], part)
        seq[p2] += 1
        codes = c.markers([marker(p2, e2, True, topic, parts)])
        assert set(codes.values()) == {0}, codes
        for part in parts:
            assert c.list_latest(topic, part, 1) == 7          # after both markers
            send(p1, e1, [b"c0"], part)
            assert c.list_latest(topic, part, 1) == 7          # c0 is open
            f = c.fetch(topic, part, 0, 1)
            assert f["last_stable_offset"] == 7 and f["high_watermark"] == 8
            assert f["aborted_transactions"] == [{"producer_id": p1, "first_offset": first_a[part]}]
            fu = c.fetch(topic, part, 0, 0)
            assert fu["last_stable_offset"] == 7 and fu["aborted_transactions"] is None
        # the fenced and the bad: stale coordinator epoch, old producer epoch, unknown
        # topic, partition out of range, negative producer id
        codes = c.markers([marker(p1, e1, True, topic, [0], coordinator_epoch=5)])
        assert codes == {(p1, topic, 0): 0}                     # epoch 5 now recorded
        assert c.list_latest(topic, 0, 1) == 9
        codes = c.markers([marker(p1, e1, True, topic, [0], coordinator_epoch=4),
                           marker(p2, e2 - 1, True, topic, [1]),
                           marker(p1, e1, True, "no-such-topic", [0]),
                           marker(p1, e1, True, topic, [PARTITIONS]),
                           marker(-5, 0, True, topic, [2])])
        assert codes == {(p1, topic, 0): 52, (p2, topic, 1): 47,
                         (p1, "no-such-topic", 0): 3, (p1, topic, PARTITIONS): 3,
                         (-5, topic, 2): 49}, codes
        # the other partitions commit c0 with one request spread over both workers
        codes = c.markers([marker(p1, e1, True, topic, range(1, PARTITIONS))])
        assert set(codes.values()) == {0}, codes
        for part in parts:
            assert c.list_latest(topic, part, 1) == 9 == c.list_latest(topic, part, 0)
        return {"p1": p1, "p2": p2}
    finally:
        c.close()


def consume_confluent(bootstrap, topic, isolation, n):
    cons = h.consumer(bootstrap, **{"isolation.level": isolation})
    try:
        h.assign_from_beginning(cons, topic, PARTITIONS)
        msgs = h.consume(cons, n, timeout=30)
        # nothing more arrives
        msgs += h.consume(cons, 1, timeout=0.5)
        return {p: [m.value() for m in msgs if m.partition() == p] for p in range(PARTITIONS)}
    finally:
        cons.close()


def consume_kafka_python(bootstrap, topic, isolation, n):
    from kafka import KafkaConsumer, TopicPartition
    cons = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                         enable_auto_commit=False, auto_offset_reset="earliest",
                         consumer_timeout_ms=3000)
    try:
        cons.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        cons.seek_to_beginning()
        out = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        got = 0
        while time.monotonic() < deadline:
            polled = cons.poll(timeout_ms=500)
            for tp, recs in polled.items():
                for r in recs:
                    out[tp.partition].append(r.value)
                    got += 1
            if got >= n and not polled:
                break
        return out
    finally:
        cons.close()


def consume_aiokafka(bootstrap, topic, isolation, n):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        cons = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                enable_auto_commit=False, auto_offset_reset="earliest")
        await cons.start()
        try:
            cons.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            await cons.seek_to_beginning()
            out = {p: [] for p in range(PARTITIONS)}
            deadline = time.monotonic() + 30
            got = 0
            while time.monotonic() < deadline:
                polled = await cons.getmany(timeout_ms=500)
                for tp, recs in polled.items():
                    for r in recs:
                        out[tp.partition].append(r.value)
                        got += 1
                if got >= n and not polled:
                    break
            return out
        finally:
            await cons.stop()
    return asyncio.run(run())


CONSUMERS = {"confluent": consume_confluent, "kafka-python": consume_kafka_python,
             "aiokafka": consume_aiokafka}


@pytest.fixture
def scenario(txn_broker):
    topic = h.create_topic(txn_broker.bootstrap, "txn-markers", PARTITIONS)
    run_scenario(txn_broker.bootstrap, topic)
    return txn_broker, topic


def test_read_committed_and_uncommitted_with_every_client(scenario):
    b, topic = scenario
    for name, consume in CONSUMERS.items():
        committed = consume(b.bootstrap, topic, "read_committed", len(COMMITTED) * PARTITIONS)
        assert committed == {p: COMMITTED for p in range(PARTITIONS)}, name
        everything = consume(b.bootstrap, topic, "read_uncommitted",
                             len(EVERYTHING) * PARTITIONS)
        assert everything == {p: EVERYTHING for p in range(PARTITIONS)}, name


def test_txn_state_survives_restart_and_long_poll_wakes_on_marker(scenario):
    """After a hard kill: the txnindex and the open transaction come back (recovery);
    a parked read_committed fetch answers when the COMMIT marker moves the LSO."""
    b, topic = scenario
    c = RawClient(b.bootstrap)
    try:
        pid, epoch = c.init_pid()
        err, base = c.produce(topic, 0, txn_batch(pid, epoch, 0, [b"open"]))
        assert err == 0 and base == 9
    finally:
        c.close()
    b.kill()
    b.start()
    h.wait_for_topic(b.bootstrap, topic, PARTITIONS)
    c = RawClient(b.bootstrap)
    try:
        assert c.list_latest(topic, 0, 1) == 9              # the open txn is still open
        # DescribeProducers (spread over both workers) shows it, and nothing else open
        open_txns = c.open_txns(topic, range(PARTITIONS))
        assert open_txns[0][pid] == 9
        assert all(v == -1 for p, txns in open_txns.items() for k, v in txns.items()
                   if (p, k) != (0, pid))
        assert all(len(open_txns[p]) == 2 for p in range(1, PARTITIONS))
        assert c.list_latest(topic, 0, 0) == 10
        f = c.fetch(topic, 0, 0, 1)
        assert f["last_stable_offset"] == 9
        assert len(f["aborted_transactions"]) == 1          # rebuilt/kept txnindex
        # a long poll at the LSO: the open txn's data does not wake it, the marker does
        # (a 60 s wait: an answer within the 15 s join below is the marker waking it)
        waiter = RawClient(b.bootstrap)
        waiter.sock.settimeout(90)
        try:
            result = {}

            th = threading.Thread(target=lambda: result.update(
                waiter.fetch(topic, 0, 9, 1, max_wait_ms=60000)))
            th.start()
            h.wait_until(lambda: b.parked_fetches() > 0, 15, "the fetch parked", b)
            err, _ = c.produce(topic, 0, txn_batch(pid, epoch, 1, [b"open2"]))
            assert err == 0
            time.sleep(0.5)     # the scenario: a window in which the open data must not wake it
            assert th.is_alive(), "woken by open transactional data"
            codes = c.markers([marker(pid, epoch, True, topic, [0], coordinator_epoch=9)])
            assert set(codes.values()) == {0}
            th.join(15)
            assert not th.is_alive(), "not woken by the marker"
            assert result["error_code"] == 0 and result["last_stable_offset"] == 12
            assert result["records"]
        finally:
            waiter.close()
    finally:
        c.close()
    committed = consume_confluent(b.bootstrap, topic, "read_committed",
                                  len(COMMITTED) * PARTITIONS + 2)
    assert committed == {0: COMMITTED + [b"open", b"open2"],
                         **{p: COMMITTED for p in range(1, PARTITIONS)}}
