"""workers/handlers/create_topics.py: request topics translated into the controller's
specs, names repeated in one request refused here (and never sent), the quota argument,
throttle time and per-version shaping of the controller's results."""
from __future__ import annotations

import asyncio
import types

from mpbroker.metadata.quota import MutationResults
from mpbroker.protocol import api_keys
from mpbroker.protocol.errors import ErrorCode
from workers.handlers import create_topics

NS = types.SimpleNamespace


class Controller:
    def __init__(self, errors=None, throttle_ms=0, with_configs=True):
        self.errors, self.throttle_ms, self.calls = errors or {}, throttle_ms, []
        self.with_configs = with_configs

    async def create_topics(self, specs, validate_only, timeout_ms, quota):
        self.calls.append((specs, validate_only, timeout_ms, quota))
        out = []
        for s in specs:
            code = self.errors.get(s["name"], 0)
            r = {"name": s["name"], "error_code": code, "error_message": "no" if code else None,
                 "num_partitions": s["num_partitions"], "replication_factor": s["replication_factor"]}
            if not code and self.with_configs:
                r["configs"] = [{"name": "cleanup.policy", "value": "delete"}]
            out.append(r)
        res = MutationResults(out)
        res.throttle_time_ms = self.throttle_ms
        return res


def topic(name, n=1, rf=1, assignments=(), configs=()):
    return {"name": name, "num_partitions": n, "replication_factor": rf,
            "assignments": [{"partition_index": i, "broker_ids": b} for i, b in assignments],
            "configs": [{"name": k, "value": v} for k, v in configs]}


def handle(ctl, v, req, client_id="app"):
    ctx = NS(api_key=api_keys.CREATE_TOPICS, api_version=v, client_id=client_id)
    return asyncio.run(create_topics.handle(NS(controller=ctl), ctx, req))


def test_request_topics_become_controller_specs():
    ctl = Controller()
    handle(ctl, 7, {"topics": [topic("a", -1, -1, assignments=[(0, [1, 2]), (1, (2, 1))],
                                     configs=[("retention.ms", "10"), ("cleanup.policy", None)])],
                    "timeout_ms": 1234, "validate_only": True})
    specs, validate_only, timeout_ms, quota = ctl.calls[0]
    assert specs == [{"name": "a", "num_partitions": -1, "replication_factor": -1,
                      "assignments": {0: [1, 2], 1: [2, 1]},
                      "configs": [("retention.ms", "10"), ("cleanup.policy", None)]}]
    assert (validate_only, timeout_ms, quota) == (True, 1234, ("app", True))


def test_defaults_and_quota_strictness_follow_the_version():
    ctl = Controller()
    handle(ctl, 0, {"topics": [topic("a")]}, client_id=None)
    assert ctl.calls[0][1:] == (False, 60000, ("", False))
    handle(ctl, 6, {"topics": [topic("a")]})
    assert ctl.calls[1][3] == ("app", True)


def test_repeated_names_are_refused_in_place_and_not_sent_to_the_controller():
    ctl = Controller()
    resp = handle(ctl, 5, {"topics": [topic("d"), topic("ok", 3), topic("d", 2)]})
    assert [s["name"] for s in ctl.calls[0][0]] == ["ok"]
    assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [
        ("d", ErrorCode.INVALID_REQUEST), ("ok", 0), ("d", ErrorCode.INVALID_REQUEST)]
    dup = resp["topics"][0]
    assert dup["error_message"] == "Create topics request from client contains multiple entries for the same topic"
    assert (dup["num_partitions"], dup["replication_factor"], dup["configs"]) == (-1, -1, None)
    assert resp["topics"][1]["num_partitions"] == 3


def test_configs_are_answered_from_v5_and_only_for_created_topics():
    ctl = Controller(errors={"bad": ErrorCode.TOPIC_ALREADY_EXISTS})
    v5 = handle(ctl, 5, {"topics": [topic("a"), topic("bad")]})["topics"]
    assert v5[0]["configs"] == [{"name": "cleanup.policy", "value": "delete"}]
    assert v5[1]["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS and v5[1]["configs"] is None
    v4 = handle(Controller(with_configs=False), 4, {"topics": [topic("a")]})["topics"]
    assert v4[0]["error_code"] == 0 and v4[0]["configs"] is None


def test_results_follow_request_order_and_carry_the_throttle_time():
    ctl = Controller(throttle_ms=250)
    resp = handle(ctl, 7, {"topics": [topic("z"), topic("a"), topic("m")]})
    assert [t["name"] for t in resp["topics"]] == ["z", "a", "m"]
    assert resp["throttle_time_ms"] == 250
