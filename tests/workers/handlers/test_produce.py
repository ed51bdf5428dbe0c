"""workers/handlers/produce.py: transactional batches and the KIP-890 verification hook
(refused, verified, awaited, disabled by config). Real Partitions over real Logs, in
test_txn_fetch.py's MiniBroker."""
from __future__ import annotations

import asyncio

from mpbroker.protocol.errors import ErrorCode
from storage.batch import BatchBuilder
from tests.workers.test_txn_fetch import TOPIC, broker, ctx, txn_batch  # noqa: F401 (broker: the fixture)
from workers.handlers import produce as produce_handler


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


def test_acks_all_is_answered_at_once_when_the_high_watermark_covers_the_append(broker):
    req = {**produce_req(BatchBuilder().append(b"k", b"v").build(), txn_id=None), "acks": -1}
    r = produce_handler.handle(broker, ctx(0, 9), req)     # one replica: the HW moved with it
    assert isinstance(r, dict) and produce_code(r) == 0
    assert len(broker.produce_purgatory) == 0 and broker.partition(TOPIC, 0).high_watermark == 1


def test_acks_all_waits_in_the_purgatory_while_the_high_watermark_is_behind(broker):
    async def run():
        p = broker.partition(TOPIC, 0)
        p._maybe_increment_high_watermark = lambda: False   # as if followers lagged
        req = {**produce_req(BatchBuilder().append(b"k", b"v").build(), txn_id=None),
               "acks": -1}
        fut = produce_handler.handle(broker, ctx(0, 9), req)
        assert not isinstance(fut, dict) and not fut.done()
        assert len(broker.produce_purgatory) == 1 and p.high_watermark == 0
        p.log.update_high_watermark(1)
        broker.produce_purgatory.check_and_complete(p.key)
        assert produce_code(fut.result()) == 0
    asyncio.run(run())


def test_transactional_batch_reads_the_header_in_place():
    batch = txn_batch(77, 0, b"x", epoch=4)
    assert produce_handler.transactional_batch(memoryview(batch)) == (77, 4)
    plain = BatchBuilder(producer_id=77, producer_epoch=4).append(b"k", b"v").build()
    assert produce_handler.transactional_batch(plain) is None
    assert produce_handler.transactional_batch(None) is None
    assert produce_handler.transactional_batch(b"\x00" * 10) is None


def test_a_validated_batch_is_not_checked_again_by_the_log(broker, monkeypatch):
    from storage.batch import RecordBatch
    calls = []
    check = RecordBatch.validate
    monkeypatch.setattr(RecordBatch, "validate", lambda self, *a, **kw: calls.append(kw)
                        or check(self, *a, **kw))
    r = produce_handler.handle(broker, ctx(0, 9), produce_req(
        BatchBuilder().append(b"k", b"v").build(), txn_id=None))
    assert produce_code(r) == 0 and len(calls) == 1          # the validator's
    broker.config["produce.record.validation.enable"] = False
    calls.clear()
    r = produce_handler.handle(broker, ctx(0, 9), produce_req(
        BatchBuilder().append(b"k", b"v").build(), txn_id=None))
    assert produce_code(r) == 0 and len(calls) == 1          # the log's, then
    bad = bytearray(BatchBuilder().append(b"k", b"v").build())
    bad[-1] ^= 1                                             # CRC mismatch: still refused
    r = produce_handler.handle(broker, ctx(0, 9), produce_req(bad, txn_id=None))
    assert produce_code(r) == ErrorCode.CORRUPT_MESSAGE
