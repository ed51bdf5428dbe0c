"""workers/handlers/elect_leaders.py: the election type check, the partitions handed to
the controller (deduplicated, None for all), and the response shape per version (a
top-level error from v1, results grouped by topic)."""
from __future__ import annotations

import asyncio
import types

from mpbroker.protocol.errors import ErrorCode
from workers.handlers import elect_leaders

NS = types.SimpleNamespace


class Controller:
    def __init__(self, code=0, results=()):
        self.code, self.results, self.calls = code, list(results), []

    async def elect_leaders(self, election_type, partitions):
        self.calls.append((election_type, partitions))
        return self.code, self.results


def handle(ctl, v, req):
    return asyncio.run(elect_leaders.handle(NS(controller=ctl), NS(api_version=v), req))


def test_named_partitions_are_sent_once_each_in_request_order():
    ctl = Controller()
    handle(ctl, 1, {"election_type": 1, "topic_partitions": [
        {"topic": "a", "partitions": [1, 0, 1]}, {"topic": "b", "partitions": [0]},
        {"topic": "a", "partitions": [0, 2]}]})
    assert ctl.calls == [(1, [("a", 1), ("a", 0), ("b", 0), ("a", 2)])]


def test_null_topic_partitions_means_every_partition_and_v0_is_preferred():
    ctl = Controller()
    handle(ctl, 0, {"topic_partitions": None})
    assert ctl.calls == [(0, None)]
    handle(ctl, 2, {"election_type": 0, "topic_partitions": []})
    assert ctl.calls[1] == (0, [])


def test_results_are_grouped_by_topic_with_a_top_level_error_from_v1():
    ctl = Controller(0, [("a", 0, 0, None), ("b", 3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "gone"),
                         ("a", 1, ErrorCode.ELECTION_NOT_NEEDED, "Leader is already preferred")])
    req = {"election_type": 0, "topic_partitions": [{"topic": "a", "partitions": [0, 1]},
                                                     {"topic": "b", "partitions": [3]}]}
    v1 = handle(ctl, 1, req)
    assert v1 == {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
        {"topic": "a", "partition_result": [
            {"partition_id": 0, "error_code": 0, "error_message": None},
            {"partition_id": 1, "error_code": ErrorCode.ELECTION_NOT_NEEDED,
             "error_message": "Leader is already preferred"}]},
        {"topic": "b", "partition_result": [
            {"partition_id": 3, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "error_message": "gone"}]}]}
    v0 = handle(ctl, 0, req)
    assert "error_code" not in v0 and v0["replica_election_results"] == v1["replica_election_results"]


def test_not_controller_is_answered_at_top_level_from_v1():
    ctl = Controller(ErrorCode.NOT_CONTROLLER, [("a", 0, ErrorCode.NOT_CONTROLLER, None)])
    assert handle(ctl, 2, {"election_type": 0, "topic_partitions": None})["error_code"] == ErrorCode.NOT_CONTROLLER


def test_unknown_election_type_is_an_invalid_request_on_every_partition_and_never_reaches_the_controller():
    ctl = Controller()
    resp = handle(ctl, 1, {"election_type": 2, "topic_partitions": [{"topic": "a", "partitions": [0, 1]}]})
    assert ctl.calls == []
    assert resp["error_code"] == ErrorCode.INVALID_REQUEST
    assert [(r["partition_id"], r["error_code"], r["error_message"])
            for r in resp["replica_election_results"][0]["partition_result"]] == [
        (0, ErrorCode.INVALID_REQUEST, "Unknown election type 2"),
        (1, ErrorCode.INVALID_REQUEST, "Unknown election type 2")]
    resp = handle(ctl, 1, {"election_type": -1, "topic_partitions": None})
    assert resp == {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST, "replica_election_results": []}
