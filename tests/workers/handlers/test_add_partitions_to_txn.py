"""workers/handlers/add_partitions_to_txn.py: v0-v3 (one transaction, v3_and_below_*
fields) and v4+ (a batch, each added or only verified), per-partition codes (unknown
topics make the rest OPERATION_NOT_ATTEMPTED), duplicates answered once, and
PRODUCER_FENCED only from v2."""
from __future__ import annotations

import asyncio
import types

import pytest

from mpbroker.protocol.errors import ErrorCode
from workers.handlers import add_partitions_to_txn as apt

NS = types.SimpleNamespace


class Txn:
    def __init__(self, add_code=0, verify=None):
        self.add_code, self.verify, self.added, self.verified = add_code, verify or {}, [], []

    async def add_partitions(self, tid, pid, epoch, tps):
        self.added.append((tid, pid, epoch, tps))
        return self.add_code

    def verify_partitions(self, tid, pid, epoch, tps):
        self.verified.append((tid, pid, epoch, tps))
        return {tp: self.verify.get(tp, 0) for tp in tps}


def make_broker(txn):
    return NS(transactions=txn, metadata=NS(topics={"a": NS(partitions={0: None, 1: None}),
                                                   "b": NS(partitions={0: None})}))


def v3_request(topics):
    return {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 9,
            "v3_and_below_producer_epoch": 1, "v3_and_below_topics": topics}


def handle(broker, v, req):
    return asyncio.run(apt.handle(broker, NS(api_version=v), req))


def flat(results):
    return [(t["name"], p["partition_index"], p["partition_error_code"])
            for t in results for p in t["results_by_partition"]]


def test_v3_adds_every_partition_once_and_answers_the_coordinators_code_on_each():
    txn = Txn()
    resp = handle(make_broker(txn), 3, v3_request([{"name": "a", "partitions": [0, 1, 0]},
                                                   {"name": "b", "partitions": [0]}]))
    assert resp["throttle_time_ms"] == 0 and "error_code" not in resp
    assert flat(resp["results_by_topic_v3_and_below"]) == [("a", 0, 0), ("a", 1, 0), ("b", 0, 0)]
    assert txn.added == [("tx", 9, 1, [("a", 0), ("a", 1), ("b", 0)])]


def test_an_unknown_partition_fails_alone_and_the_rest_are_not_attempted():
    txn = Txn()
    resp = handle(make_broker(txn), 1, v3_request([{"name": "a", "partitions": [0, 5]},
                                                   {"name": "zz", "partitions": [0]}]))
    assert flat(resp["results_by_topic_v3_and_below"]) == [
        ("a", 0, ErrorCode.OPERATION_NOT_ATTEMPTED), ("a", 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("zz", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert txn.added == []


def test_without_a_transaction_coordinator_every_partition_is_coordinator_not_available():
    resp = handle(make_broker(None), 0, v3_request([{"name": "a", "partitions": [0]},
                                                    {"name": "zz", "partitions": [0]}]))
    assert {c for *_, c in flat(resp["results_by_topic_v3_and_below"])} == {ErrorCode.COORDINATOR_NOT_AVAILABLE}


@pytest.mark.parametrize("version,code", [(0, ErrorCode.INVALID_PRODUCER_EPOCH),
                                          (1, ErrorCode.INVALID_PRODUCER_EPOCH),
                                          (2, ErrorCode.PRODUCER_FENCED),
                                          (3, ErrorCode.PRODUCER_FENCED)])
def test_producer_fenced_only_from_v2(version, code):
    resp = handle(make_broker(Txn(ErrorCode.PRODUCER_FENCED)), version,
                  v3_request([{"name": "a", "partitions": [0]}]))
    assert flat(resp["results_by_topic_v3_and_below"]) == [("a", 0, code)]


def test_v4_batches_transactions_adding_or_only_verifying_each():
    txn = Txn(add_code=ErrorCode.CONCURRENT_TRANSACTIONS, verify={("b", 0): ErrorCode.INVALID_TXN_STATE})
    req = {"transactions": [
        {"transactional_id": "t1", "producer_id": 1, "producer_epoch": 0, "verify_only": False,
         "topics": [{"name": "a", "partitions": [1]}]},
        {"transactional_id": "t2", "producer_id": 2, "producer_epoch": 4, "verify_only": True,
         "topics": [{"name": "a", "partitions": [0]}, {"name": "b", "partitions": [0]}]},
        {"transactional_id": "t3", "producer_id": 3, "producer_epoch": 0, "verify_only": True,
         "topics": [{"name": "nope", "partitions": [0]}]},
        {"transactional_id": "t4", "producer_id": 4, "producer_epoch": 0, "topics": None}]}
    resp = handle(make_broker(txn), 4, req)
    assert resp["throttle_time_ms"] == 0 and resp["error_code"] == 0
    by_tid = {r["transactional_id"]: flat(r["topic_results"]) for r in resp["results_by_transaction"]}
    assert list(by_tid) == ["t1", "t2", "t3", "t4"]
    assert by_tid == {"t1": [("a", 1, ErrorCode.CONCURRENT_TRANSACTIONS)],
                      "t2": [("a", 0, 0), ("b", 0, ErrorCode.INVALID_TXN_STATE)],
                      "t3": [("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)],
                      "t4": []}
    assert txn.added[0] == ("t1", 1, 0, [("a", 1)])
    assert not {"t2", "t3"} & {a[0] for a in txn.added}          # verify_only never adds
    assert txn.verified == [("t2", 2, 4, [("a", 0), ("b", 0)])]


def test_v4_without_transactions_answers_an_empty_batch():
    assert handle(make_broker(Txn()), 5, {}) == {"throttle_time_ms": 0, "error_code": 0,
                                                 "results_by_transaction": []}
