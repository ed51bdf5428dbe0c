"""workers/handlers/offset_fetch.py: v0-v7 ask one group's coordinator (or answer its
group-level error on every requested partition); v8+ ask each group's own coordinator
and merge their groups, a group without one answering its error alone."""
from __future__ import annotations

import asyncio
import types

from mpbroker.metadata.model import OFFSETS_TOPIC
from mpbroker.protocol.errors import ErrorCode
from workers.handlers import offset_fetch

NS = types.SimpleNamespace


class Coordinator:
    """Answers OffsetFetch at once (`later=False`) or when the test calls `release()`."""

    def __init__(self, name, later=False):
        self.name, self.later, self.calls, self.pending = name, later, [], []

    def offset_fetch(self, req, version, respond):
        self.calls.append((req, version))
        groups = req.get("groups") or [{"group_id": req.get("group_id")}]
        resp = {"throttle_time_ms": 0, "error_code": 0, "served_by": self.name,
                "groups": [{"group_id": g["group_id"], "topics": [], "error_code": 0,
                            "served_by": self.name} for g in groups]}
        if self.later:
            self.pending.append(lambda: respond(resp))
        else:
            respond(resp)

    def release(self):
        for r in self.pending:
            r()


def make_broker(owners, offsets_topic=True, groups=True):
    """owners: group id -> Coordinator (a group missing from it is another broker's)."""
    return NS(metadata=NS(topics={OFFSETS_TOPIC: object()} if offsets_topic else {}),
              groups=NS(coordinator_for=owners.get) if groups else None)


def ctx(v):
    return NS(api_version=v)


def test_v7_goes_to_the_groups_coordinator_as_it_is():
    c = Coordinator("a")
    req = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}], "require_stable": True}
    resp = offset_fetch.handle(make_broker({"g": c}), ctx(7), req)
    assert resp["served_by"] == "a"
    assert c.calls == [(req, 7)]


def test_v1_without_a_coordinator_puts_the_error_on_every_requested_partition():
    resp = offset_fetch.handle(make_broker({}), ctx(1),
                               {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 2]}]})
    assert "error_code" not in resp                    # v0-v1 have no top-level error
    assert [(p["partition_index"], p["committed_offset"], p["error_code"])
            for p in resp["topics"][0]["partitions"]] == [(0, -1, ErrorCode.NOT_COORDINATOR),
                                                         (2, -1, ErrorCode.NOT_COORDINATOR)]


def test_v5_before_the_offsets_topic_exists_answers_coordinator_not_available():
    resp = offset_fetch.handle(make_broker({}, offsets_topic=False), ctx(5),
                               {"group_id": "g", "topics": None})
    assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE and resp["topics"] == []
    resp = offset_fetch.handle(make_broker({"g": Coordinator("a")}, groups=False), ctx(5),
                               {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [1]}]})
    assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert resp["topics"][0]["partitions"][0]["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_v8_asks_each_groups_coordinator_separately_and_merges_in_request_order():
    a, b = Coordinator("a"), Coordinator("b", later=True)
    broker = make_broker({"g1": a, "g3": b})
    req = {"groups": [{"group_id": "g1", "topics": None}, {"group_id": "g2", "topics": None},
                      {"group_id": "g3", "topics": [{"name": "t", "partition_indexes": [0]}]}],
           "require_stable": True}

    async def main():
        task = asyncio.ensure_future(offset_fetch.handle(broker, ctx(8), req))
        for _ in range(100):             # yield to the handler until b holds its answer back
            if b.pending:
                break
            await asyncio.sleep(0)
        assert b.pending and not task.done()
        b.release()
        return await task
    resp = asyncio.run(main())
    assert resp["throttle_time_ms"] == 0
    assert [(g["group_id"], g["error_code"], g.get("served_by")) for g in resp["groups"]] == [
        ("g1", 0, "a"), ("g2", ErrorCode.NOT_COORDINATOR, None), ("g3", 0, "b")]
    assert resp["groups"][1]["topics"] == []
    # each coordinator sees only its group, with the request's require_stable, at the request's version
    assert a.calls == [({"groups": [req["groups"][0]], "require_stable": True}, 8)]
    assert b.calls == [({"groups": [req["groups"][2]], "require_stable": True}, 8)]


def test_v8_require_stable_defaults_to_false_and_no_offsets_topic_fails_every_group():
    a = Coordinator("a")
    resp = asyncio.run(offset_fetch.handle(make_broker({"g": a}), ctx(9), {"groups": [{"group_id": "g"}]}))
    assert a.calls[0][0]["require_stable"] is False and resp["groups"][0]["served_by"] == "a"
    resp = asyncio.run(offset_fetch.handle(make_broker({"g": a}, offsets_topic=False), ctx(9),
                                           {"groups": [{"group_id": "g"}, {"group_id": "h"}]}))
    assert [g["error_code"] for g in resp["groups"]] == [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 2
