"""workers/handlers/init_producer_id.py: idempotent producers get a fresh id at epoch 0
whatever they send; transactional ones are answered by the transaction coordinator, its
PRODUCER_FENCED becoming INVALID_PRODUCER_EPOCH below v4."""
from __future__ import annotations

import asyncio
import types

import pytest

from mpbroker.protocol.errors import ErrorCode
from workers.handlers import init_producer_id

NS = types.SimpleNamespace


class Txn:
    def __init__(self, code=0):
        self.code, self.calls = code, []

    async def init_producer_id(self, ctx, req):
        self.calls.append((ctx.api_version, req))
        return {"throttle_time_ms": 0, "error_code": self.code, "producer_id": 77, "producer_epoch": 3}


def make_broker(txn=None):
    ids = iter([1000, 1001, 1002])

    async def next_producer_id():
        return next(ids)
    return NS(transactions=txn, next_producer_id=next_producer_id)


def handle(broker, v, req):
    return asyncio.run(init_producer_id.handle(broker, NS(api_version=v), req))


def test_idempotent_producers_get_a_new_id_at_epoch_0_even_when_asking_for_a_bump():
    txn = Txn()
    b = make_broker(txn)
    first = handle(b, 2, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert first == {"throttle_time_ms": 0, "error_code": 0, "producer_id": 1000, "producer_epoch": 0}
    bump = handle(b, 4, {"transactional_id": None, "producer_id": 1000, "producer_epoch": 0})
    assert (bump["producer_id"], bump["producer_epoch"]) == (1001, 0)
    assert txn.calls == []                        # never reaches the transaction coordinator


def test_transactional_id_goes_to_the_transaction_coordinator():
    txn = Txn()
    req = {"transactional_id": "tx", "transaction_timeout_ms": 1000}
    resp = handle(make_broker(txn), 4, req)
    assert (resp["error_code"], resp["producer_id"], resp["producer_epoch"]) == (0, 77, 3)
    assert txn.calls == [(4, req)]


def test_empty_transactional_id_is_still_transactional():
    txn = Txn()
    handle(make_broker(txn), 3, {"transactional_id": ""})
    assert len(txn.calls) == 1


def test_no_transaction_coordinator_answers_coordinator_not_available():
    resp = handle(make_broker(None), 4, {"transactional_id": "tx"})
    assert resp == {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    "producer_id": -1, "producer_epoch": -1}


@pytest.mark.parametrize("version,code", [(0, ErrorCode.INVALID_PRODUCER_EPOCH),
                                          (3, ErrorCode.INVALID_PRODUCER_EPOCH),
                                          (4, ErrorCode.PRODUCER_FENCED),
                                          (5, ErrorCode.PRODUCER_FENCED)])
def test_producer_fenced_is_invalid_producer_epoch_below_v4(version, code):
    assert handle(make_broker(Txn(ErrorCode.PRODUCER_FENCED)), version,
                  {"transactional_id": "tx"})["error_code"] == code


def test_other_coordinator_errors_pass_through_at_every_version():
    for v in (0, 5):
        assert handle(make_broker(Txn(ErrorCode.CONCURRENT_TRANSACTIONS)), v,
                      {"transactional_id": "tx"})["error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS
