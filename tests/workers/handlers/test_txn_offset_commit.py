"""workers/handlers/txn_offset_commit.py: request checks, the group coordinator's
errors on every partition, the KIP-890 verification before the offsets reach the
coordinator (its NOT_ENOUGH_REPLICAS made retriable for the group API), and unknown
partitions answered here."""
from __future__ import annotations

import asyncio
import types

import pytest

from mpbroker.metadata.model import OFFSETS_TOPIC
from mpbroker.protocol.errors import ErrorCode
from workers.handlers import txn_offset_commit

NS = types.SimpleNamespace


class Coordinator:
    def __init__(self):
        self.calls = []

    def txn_offset_commit(self, req, version, respond):
        self.calls.append((req, version))
        respond({"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": 0}
                                               for p in t["partitions"]]} for t in req["topics"]]})


class Verifier:
    """Answers `code` (at once or, with `later`, as a coroutine); records what it was asked."""

    def __init__(self, code=0, later=False, then=None):
        self.code, self.later, self.then, self.calls = code, later, then, []

    def __call__(self, *args):
        self.calls.append(args)
        if self.then:
            self.then()
        if self.later:
            async def answer():
                return self.code
            return answer()
        return self.code


def make_broker(coord, verifier=None, verify=True, topics=("t",)):
    owners = {"g": coord} if coord else {}
    md_topics = {OFFSETS_TOPIC: NS(partitions={0: None})}
    md_topics.update({name: NS(partitions={0: None, 1: None}) for name in topics})
    return NS(metadata=NS(topics=md_topics),
              groups=NS(coordinator_for=lambda gid: owners.get(gid), partition_for=lambda gid: 7),
              txn_verifier=verifier,
              config={"transaction.partition.verification.enable": verify})


def request(**kw):
    req = {"transactional_id": "tx", "group_id": "g", "producer_id": 5, "producer_epoch": 2,
           "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 10},
                                                   {"partition_index": 1, "committed_offset": 11}]}]}
    req.update(kw)
    return req


def codes(resp):
    return [(t["name"], p["partition_index"], p["error_code"]) for t in resp["topics"] for p in t["partitions"]]


def handle(broker, req, v=3):
    return asyncio.run(txn_offset_commit.handle(broker, NS(api_version=v), req))


@pytest.mark.parametrize("kw", [{"transactional_id": ""}, {"transactional_id": None}, {"producer_id": -1}])
def test_missing_transactional_id_or_producer_id_is_an_invalid_request_for_every_partition(kw):
    c = Coordinator()
    resp = handle(make_broker(c, Verifier()), request(**kw))
    assert codes(resp) == [("t", 0, ErrorCode.INVALID_REQUEST), ("t", 1, ErrorCode.INVALID_REQUEST)]
    assert resp["throttle_time_ms"] == 0 and c.calls == []


def test_no_coordinator_here_answers_not_coordinator_without_verifying():
    v = Verifier()
    resp = handle(make_broker(None, v), request())
    assert {code for *_, code in codes(resp)} == {ErrorCode.NOT_COORDINATOR}
    assert v.calls == []


def test_verified_offsets_go_to_the_coordinator_and_unknown_partitions_answer_here():
    c, v = Coordinator(), Verifier(later=True)
    req = request(topics=[{"name": "t", "partitions": [{"partition_index": 1}, {"partition_index": 9}]},
                          {"name": "gone", "partitions": [{"partition_index": 0}]}])
    resp = handle(make_broker(c, v), req, v=4)
    assert codes(resp) == [("t", 1, 0), ("t", 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                           ("gone", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    # the verifier is asked about the group's __consumer_offsets partition, at the producer's epoch
    assert v.calls == [("tx", 5, 2, OFFSETS_TOPIC, 7)]
    sent, version = c.calls[0]
    assert version == 4 and sent["topics"] == [{"name": "t", "partitions": [{"partition_index": 1}]}]


@pytest.mark.parametrize("code,answered", [
    (ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_TXN_STATE),
    (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
])
def test_a_failed_verification_answers_every_partition_and_stores_nothing(code, answered):
    c = Coordinator()
    resp = handle(make_broker(c, Verifier(code)), request())
    assert codes(resp) == [("t", 0, answered), ("t", 1, answered)]
    assert c.calls == []


def test_verification_off_or_absent_skips_the_verifier():
    c, v = Coordinator(), Verifier(ErrorCode.INVALID_TXN_STATE)
    assert {code for *_, code in codes(handle(make_broker(c, v, verify=False), request()))} == {0}
    assert v.calls == [] and len(c.calls) == 1
    assert {code for *_, code in codes(handle(make_broker(c, None), request()))} == {0}


def test_coordinator_moved_while_verifying_answers_not_coordinator():
    c = Coordinator()
    broker = make_broker(c)

    def owners_gone():
        broker.groups.coordinator_for = lambda gid: None
    broker.txn_verifier = Verifier(then=owners_gone)
    resp = handle(broker, request())
    assert {code for *_, code in codes(resp)} == {ErrorCode.NOT_COORDINATOR}
    assert c.calls == []
