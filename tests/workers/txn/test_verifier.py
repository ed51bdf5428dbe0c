"""TxnVerifier (workers/txn/verifier.py), the KIP-890 produce check, in one real worker
(as test_service.py) whose transaction coordinator is local."""
from __future__ import annotations

import inspect

from mpbroker.protocol.errors import ErrorCode
from workers.txn.verifier import _verify_code

from tests.workers.txn.test_service import Clock, init, make_broker, run, setup


async def verify(b, *args):
    code = b.txn_verifier(*args)
    return await code if inspect.isawaitable(code) else code


def test_verify_code_of_a_response():
    tp = ("t", 1)
    assert _verify_code({"error_code": ErrorCode.NOT_COORDINATOR}, tp) == ErrorCode.NOT_COORDINATOR
    assert _verify_code({"error_code": 0, "results_by_transaction": [{"topic_results": [
        {"name": "t", "results_by_partition": [
            {"partition_index": 1, "partition_error_code": 48}]}]}]}, tp) == 48
    assert _verify_code({"error_code": 0}, tp) == ErrorCode.UNKNOWN_SERVER_ERROR


def test_added_partitions_pass_the_others_do_not(tmp_path):
    clock = Clock()

    async def main():
        b, ctl = make_broker(tmp_path, clock)
        await setup(b, ctl)
        pid = (await init(b, "a"))["producer_id"]
        assert await b.transactions.add_partitions("a", pid, 0, [("t", 0)]) == 0
        assert await verify(b, "a", pid, 0, "t", 0) == ErrorCode.NONE
        assert await verify(b, "a", pid, 0, "t", 1) == ErrorCode.INVALID_TXN_STATE
        assert await verify(b, "a", pid, 5, "t", 0) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert await verify(b, None, pid, 0, "t", 0) == ErrorCode.INVALID_TXN_STATE
        b.shutdown()
    run(main())


def test_a_coordinator_partition_not_shown_yet_answers_a_retriable_error():
    # cluster mode shows __transaction_state while its partitions are initialized: the
    # id's partition (2 of 3) is not there yet
    import asyncio
    import types

    from mpbroker.metadata import model
    from workers.txn.verifier import TXN_TOPIC, TxnVerifier

    st = model.PartitionState(0, 1, 0, (1,), (1,))
    NS = types.SimpleNamespace
    broker = NS(metadata=NS(topics={TXN_TOPIC: model.Topic(TXN_TOPIC, b"\x01" * 16, {0: st}, {}, True, 3)}),
                transactions=NS(partition_for=lambda tid: 2), broker_id=1)
    v = TxnVerifier(broker)
    assert asyncio.run(v._ask("a", 1, 0, "t", 0)) == ErrorCode.NOT_ENOUGH_REPLICAS
