"""The transaction API handlers in front of the coordinator, in one real worker (as in
test_service.py): the error code each request version may carry, and InitProducerId
without a transactional id."""
from __future__ import annotations

from mpbroker.protocol import api_keys as K
from mpbroker.protocol.errors import ErrorCode as E
from workers.handlers import (_txn, add_offsets_to_txn, add_partitions_to_txn, end_txn,
                              init_producer_id)

from tests.workers.txn.test_service import Clock, init, make_broker, run, settle, setup


class Ctx:
    def __init__(self, api_key: int, version: int):
        self.api_key = api_key
        self.api_version = version


def test_producer_fenced_only_from_the_versions_that_know_it():
    assert _txn.for_version(K.END_TXN, 1, E.PRODUCER_FENCED) == E.INVALID_PRODUCER_EPOCH
    assert _txn.for_version(K.END_TXN, 2, E.PRODUCER_FENCED) == E.PRODUCER_FENCED
    assert _txn.for_version(K.INIT_PRODUCER_ID, 3, E.PRODUCER_FENCED) == E.INVALID_PRODUCER_EPOCH
    assert _txn.for_version(K.INIT_PRODUCER_ID, 4, E.PRODUCER_FENCED) == E.PRODUCER_FENCED
    assert _txn.for_version(K.END_TXN, 0, E.INVALID_TXN_STATE) == E.INVALID_TXN_STATE


def test_fenced_producer_gets_the_code_of_its_request_version(tmp_path):
    clock = Clock()

    async def main():
        b, ctl = make_broker(tmp_path, clock)
        await setup(b, ctl)
        pid = (await init(b, "f"))["producer_id"]
        assert (await init(b, "f"))["producer_epoch"] == 1      # epoch 0 is fenced now

        async def end(version):
            r = await end_txn.handle(b, Ctx(K.END_TXN, version),
                                     {"transactional_id": "f", "producer_id": pid,
                                      "producer_epoch": 0, "committed": True})
            return r["error_code"]

        async def offsets(version):
            r = await add_offsets_to_txn.handle(b, Ctx(K.ADD_OFFSETS_TO_TXN, version),
                                                {"transactional_id": "f", "producer_id": pid,
                                                 "producer_epoch": 0, "group_id": "g"})
            return r["error_code"]

        async def partitions(version):
            ctx = Ctx(K.ADD_PARTITIONS_TO_TXN, version)
            if version < 4:
                r = await add_partitions_to_txn.handle(b, ctx, {
                    "v3_and_below_transactional_id": "f", "v3_and_below_producer_id": pid,
                    "v3_and_below_producer_epoch": 0,
                    "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
                res = r["results_by_topic_v3_and_below"]
            else:
                r = await add_partitions_to_txn.handle(b, ctx, {"transactions": [
                    {"transactional_id": "f", "producer_id": pid, "producer_epoch": 0,
                     "verify_only": True, "topics": [{"name": "t", "partitions": [0]}]}]})
                res = r["results_by_transaction"][0]["topic_results"]
            return res[0]["results_by_partition"][0]["partition_error_code"]

        async def init_v(version):
            r = await init_producer_id.handle(b, Ctx(K.INIT_PRODUCER_ID, version), {
                "transactional_id": "f", "transaction_timeout_ms": 60000,
                "producer_id": pid, "producer_epoch": 7})
            return r["error_code"]

        for version in range(5):
            want = E.INVALID_PRODUCER_EPOCH if version < 2 else E.PRODUCER_FENCED
            assert await end(version) == want, version
            assert await offsets(version) == want, version
            assert await partitions(version) == want, version
        assert await init_v(3) == E.INVALID_PRODUCER_EPOCH
        assert await init_v(4) == await init_v(5) == E.PRODUCER_FENCED
        await settle(b)
        b.shutdown()
    run(main())


def test_init_producer_id_without_transactional_id_never_bumps(tmp_path):
    clock = Clock()

    async def main():
        b, ctl = make_broker(tmp_path, clock)

        async def ask(version, pid, epoch):
            r = await init_producer_id.handle(b, Ctx(K.INIT_PRODUCER_ID, version), {
                "transactional_id": None, "transaction_timeout_ms": 60000,
                "producer_id": pid, "producer_epoch": epoch})
            assert r["error_code"] == 0 and r["producer_epoch"] == 0, (version, r)
            return r["producer_id"]

        first = await ask(0, -1, -1)
        seen = {first}
        # v3+ naming an id in use (KIP-360 bump of an idempotent producer), or any other
        for version, pid, epoch in ((3, first, 0), (4, first, 0), (5, first, 9), (3, -1, -1),
                                    (4, first + 1000, 0)):
            pid = await ask(version, pid, epoch)
            assert pid not in seen, (version, pid)
            seen.add(pid)
        b.shutdown()
    run(main())
