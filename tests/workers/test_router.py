"""The router's pure split/merge functions (workers/router.py) and an owner whose
handler fails answering its part with the API's error response (how a front sends
another worker's FileSlices: tests/workers/test_connection.py)."""
from __future__ import annotations

import asyncio
import types

import pytest

from mpbroker.protocol import api_keys as K
from mpbroker.protocol.errors import ErrorCode
from storage.slices import FileSlice
from workers.fetch_session import CachedPartition
from workers.payloads import sanitize_response
from workers.router import (GROUP_MULTI, PART_SPECS, fetch_subrequest,
                            merge_groups, merge_list_groups, merge_markers, merge_partitions,
                            split_groups, split_markers, split_partitions)
from workers.scope import PARTITION


def produce_req():
    return {"acks": -1, "timeout_ms": 1000, "transactional_id": None, "topic_data": [
        {"name": "a", "partition_data": [{"index": i, "records": memoryview(bytearray(b"r%d" % i))}
                                         for i in (3, 0, 1)]},
        {"name": "b", "partition_data": [{"index": 0, "records": memoryview(bytearray(b"b0"))}]}]}


def owner(topic, p):
    return {"a": p % 2, "b": 1}[topic]


def test_split_produce_by_owner_keeps_order_and_fields():
    parts = split_partitions(produce_req(), PART_SPECS[K.PRODUCE], owner)
    assert set(parts) == {0, 1}
    assert [(t["name"], [p["index"] for p in t["partition_data"]]) for t in parts[1]["topic_data"]] == \
        [("a", [3, 1]), ("b", [0])]
    assert [(t["name"], [p["index"] for p in t["partition_data"]]) for t in parts[0]["topic_data"]] == \
        [("a", [0])]
    assert parts[0]["acks"] == -1 and parts[1]["timeout_ms"] == 1000


def test_merge_produce_in_request_order():
    req = produce_req()
    parts = split_partitions(req, PART_SPECS[K.PRODUCE], owner)

    def answer(sub, throttle):
        return {"throttle_time_ms": throttle, "responses": [
            {"name": t["name"], "partition_responses": [
                {"index": p["index"], "error_code": 0, "base_offset": 10 * p["index"]}
                for p in t["partition_data"]]} for t in sub["topic_data"]]}
    merged = merge_partitions(req, PART_SPECS[K.PRODUCE], [answer(parts[1], 5), answer(parts[0], 0)])
    assert merged["throttle_time_ms"] == 5
    assert [(t["name"], [(p["index"], p["base_offset"]) for p in t["partition_responses"]])
            for t in merged["responses"]] == [("a", [(3, 30), (0, 0), (1, 10)]), ("b", [(0, 0)])]


def test_split_single_owner_and_empty():
    assert list(split_partitions(produce_req(), PART_SPECS[K.PRODUCE], lambda t, p: 7)) == [7]
    assert split_partitions({"topic_data": []}, PART_SPECS[K.PRODUCE], owner) == {}


def test_list_offsets_and_offset_for_leader_epoch_specs():
    req = {"replica_id": -1, "topics": [{"name": "a", "partitions": [
        {"partition_index": i, "timestamp": -1} for i in range(4)]}]}
    spec = PART_SPECS[K.LIST_OFFSETS]
    parts = split_partitions(req, spec, owner)
    resps = [{"throttle_time_ms": 0, "topics": [{"name": "a", "partitions": [
        {"partition_index": p["partition_index"], "offset": 100 + p["partition_index"]}
        for p in sub["topics"][0]["partitions"]]}]} for sub in parts.values()]
    merged = merge_partitions(req, spec, resps)
    assert [p["offset"] for p in merged["topics"][0]["partitions"]] == [100, 101, 102, 103]
    ofle = {"topics": [{"topic": "a", "partitions": [{"partition": 1, "leader_epoch": 0},
                                                      {"partition": 0, "leader_epoch": 0}]}]}
    spec = PART_SPECS[K.OFFSET_FOR_LEADER_EPOCH]
    parts = split_partitions(ofle, spec, owner)
    resps = [{"topics": [{"topic": "a", "partitions": [{"partition": p["partition"], "end_offset": 5}
                                                       for p in sub["topics"][0]["partitions"]]}]}
             for sub in parts.values()]
    assert [p["partition"] for p in merge_partitions(ofle, spec, resps)["topics"][0]["partitions"]] == [1, 0]


def test_groups_split_and_merge():
    spec = GROUP_MULTI[K.DESCRIBE_GROUPS]
    req = {"groups": ["g1", "g2", "g3"], "include_authorized_operations": False}
    own = {"g1": 0, "g2": 1, "g3": 0}
    parts = split_groups(req, spec, own.get)
    assert parts[0]["groups"] == ["g1", "g3"] and parts[1]["groups"] == ["g2"]
    resps = [{"throttle_time_ms": 0, "groups": [{"group_id": g, "error_code": 0} for g in sub["groups"]]}
             for sub in (parts[1], parts[0])]
    assert [g["group_id"] for g in merge_groups(req, spec, resps)["groups"]] == ["g1", "g2", "g3"]
    spec = GROUP_MULTI[K.OFFSET_FETCH]
    req = {"groups": [{"group_id": "g2", "topics": None}, {"group_id": "g1", "topics": None}]}
    parts = split_groups(req, spec, own.get)
    assert parts[1]["groups"] == [{"group_id": "g2", "topics": None}]
    resps = [{"groups": [{"group_id": g["group_id"], "topics": []} for g in sub["groups"]]}
             for sub in parts.values()]
    assert [g["group_id"] for g in merge_groups(req, spec, resps)["groups"]] == ["g2", "g1"]
    lg = merge_list_groups([{"error_code": 0, "groups": [{"group_id": "a"}]},
                            {"error_code": 14, "groups": [{"group_id": "b"}], "throttle_time_ms": 3}])
    assert lg == {"throttle_time_ms": 3, "error_code": 14, "groups": [{"group_id": "a"}, {"group_id": "b"}]}


def test_fetch_subrequest_is_sessionless():
    cps = [CachedPartition("a", b"\1" * 16, 1, 5, 1000), CachedPartition("a", b"\1" * 16, 3, 7, 1000),
           CachedPartition("b", b"\2" * 16, 0, 0, 500)]
    req = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 100, "isolation_level": 0,
           "session_id": 77, "session_epoch": 3, "topics": [], "forgotten_topics_data": [{"topic": "z"}],
           "rack_id": ""}
    sub = fetch_subrequest(req, 12, cps, 50, 1)
    assert sub["session_epoch"] == -1 and sub["session_id"] == 0 and sub["forgotten_topics_data"] == []
    assert (sub["max_bytes"], sub["max_wait_ms"], sub["min_bytes"]) == (50, 0, 1)
    assert [(t["topic"], [(p["partition"], p["fetch_offset"]) for p in t["partitions"]])
            for t in sub["topics"]] == [("a", [(1, 5), (3, 7)]), ("b", [(0, 0)])]
    sub13 = fetch_subrequest(req, 13, cps, 50, 1)
    assert [t["topic_id"] for t in sub13["topics"]] == [b"\1" * 16, b"\2" * 16]


def test_sanitize_a_fetch_answer():
    resp = {"error_code": 0, "responses": [{"topic": "a", "partitions": [
        {"partition_index": 0, "error_code": 0,
         "records": [FileSlice("/x/0.log", 0, 10, 42, 7, 99)]}]}]}
    out = sanitize_response(K.FETCH, resp)
    # the fd stays home, the file's identity travels with the slice
    assert out["responses"][0]["partitions"][0]["records"] == \
        [FileSlice("/x/0.log", 0, 10, -1, 7, 99)]


# ------------------------------------------------------------ failures on the owner
class _Link:
    closed = False

    def __init__(self):
        self.sent = []

    def send(self, msg, raw=()):
        self.sent.append(msg)


class _Broker:
    requests_served = 0
    worker_id = 1


def _owner_with(monkeypatch, handle):
    from workers.dispatch import Dispatcher
    from workers.handlers import HANDLERS, Handler
    from workers.router import Router
    h = HANDLERS[K.LIST_OFFSETS]
    monkeypatch.setitem(HANDLERS, K.LIST_OFFSETS, Handler(handle, h.min_version, h.max_version))
    r = Router(_Broker(), Dispatcher(_Broker()).run_part)
    link = r.peers[0] = _Link()
    return r, link


LIST_OFFSETS_PART = {"replica_id": -1, "isolation_level": 0, "topics": [
    {"name": "a", "partitions": [{"partition_index": 3, "timestamp": -1},
                                 {"partition_index": 1, "timestamp": -1}]}]}


def test_an_owner_whose_handler_raises_answers_its_part_with_the_error(monkeypatch):
    from mpbroker.protocol.errors import ErrorCode as E

    def boom(broker, ctx, req):
        raise OSError(5, "Input/output error")
    r, link = _owner_with(monkeypatch, boom)
    r._serve(0, {"op": "req", "id": 9, "api_key": K.LIST_OFFSETS, "version": 7,
                 "body": LIST_OFFSETS_PART, "client_id": "c", "client_host": "h"})
    (reply,) = link.sent
    assert reply["id"] == 9 and "error" not in reply
    (t,) = reply["body"]["topics"]
    assert [(p["partition_index"], p["error_code"]) for p in t["partitions"]] == \
        [(3, E.KAFKA_STORAGE_ERROR), (1, E.KAFKA_STORAGE_ERROR)]


def test_an_owner_whose_awaitable_fails_answers_its_part_with_the_error(monkeypatch):
    from mpbroker.protocol.errors import ErrorCode as E

    async def later(broker, ctx, req):
        await asyncio.sleep(0)
        raise KeyError("bug")

    async def main():
        r, link = _owner_with(monkeypatch, later)
        r._serve(0, {"op": "req", "id": 4, "api_key": K.LIST_OFFSETS, "version": 7,
                     "body": LIST_OFFSETS_PART, "client_id": "c", "client_host": "h"})
        for _ in range(20):
            if link.sent:
                break
            await asyncio.sleep(0.01)
        return link.sent
    (reply,) = asyncio.run(main())
    codes = [p["error_code"] for p in reply["body"]["topics"][0]["partitions"]]
    assert codes == [E.UNKNOWN_SERVER_ERROR] * 2


class _ListOffsetsCtx:
    api_key, api_version = K.LIST_OFFSETS, 7


def _counting_router(topics: dict):
    """A Router whose ListOffsets route answers "routed", over a broker whose metadata
    has `topics` (name -> partition count): just what the request counting reads."""
    from workers.router import Router

    class B:
        worker_id = 0
        placement = type("P", (), {"num_workers": 2})()
        metadata = _md_with_partitions(topics)

    r = Router(B())
    r.routes["partition"] = lambda ctx, req, handle, scope: "routed"
    return r, B


def _md_with_partitions(topics: dict):
    return type("MD", (), {"topics": {
        name: type("T", (), {"partitions": dict.fromkeys(range(n)), "num_partitions": n})()
        for name, n in topics.items()}})()


def test_front_counts_partition_level_requests_for_balancing():
    r, _ = _counting_router({"a": 4})
    assert r.route(_ListOffsetsCtx(), LIST_OFFSETS_PART, None, PARTITION) == "routed"
    assert r.route(_ListOffsetsCtx(), LIST_OFFSETS_PART, None, PARTITION) == "routed"
    assert r.partition_requests == {("a", 3): 2, ("a", 1): 2}


def test_request_counts_stay_bounded_by_the_partitions_that_exist():
    """Requests naming topics or partitions that do not exist (a client's typo, or any
    names at all) are not counted: the counts are the balancer's input and must not
    grow with what clients send; a deleted topic's counts go at the next stats."""
    r, B = _counting_router({"a": 2})
    for i in range(100):
        r.route(_ListOffsetsCtx(), {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": f"nope-{i}", "partitions": [{"partition_index": 0, "timestamp": -1}]},
            {"name": "a", "partitions": [{"partition_index": 1, "timestamp": -1},
                                         {"partition_index": 7, "timestamp": -1}]}]}, None,
                 PARTITION)
    assert r.partition_requests == {("a", 1): 100}
    assert r.request_counts() == [["a", 1, 100]]
    B.metadata = _md_with_partitions({})           # "a" deleted
    assert r.request_counts() == [] and not r.partition_requests


# ---- the runtime: where each scope sends a request (a fake mesh: worker 1 answers)
class _Mesh:
    """Worker 0's router over a fake channel to worker 1: partition p is worker p % 2's,
    group/transactional ids hash to a partition of a 2-partition internal topic."""

    def __init__(self, loop, reachable=True):
        from workers.router import Router

        def topic(n):
            return type("T", (), {"partitions": dict.fromkeys(range(n)), "num_partitions": n})()

        class B:
            worker_id = 0
            requests_served = 0
            placement = type("P", (), {"num_workers": 2,
                                       "owner": staticmethod(lambda t, p: p % 2)})()
            metadata = type("MD", (), {"topics": {"a": topic(4), "__consumer_offsets": topic(2),
                                                  "__transaction_state": topic(2)}})()
        self.router = Router(B())
        self.router.loop = loop
        self.link = _Link()
        self.link.closed = not reachable
        self.router.peers[1] = self.link

    def answer(self, body):
        for msg in self.link.sent:
            self.router.on_message(1, {"op": "resp", "id": msg["id"], "body": body(msg)})


def _ctx(api_key, version):
    return type("C", (), {"api_key": api_key, "api_version": version, "client_id": "c",
                          "client_host": "h", "connection": None})()


def _local(broker, ctx, req):
    return {"here": req}


def test_partition_scope_splits_by_owner_and_merges_in_request_order():
    from workers.scope import PARTITION

    async def run():
        mesh = _Mesh(asyncio.get_running_loop())
        req = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "a", "partitions": [
            {"partition_index": i, "timestamp": -1} for i in (3, 0, 1)]}]}

        def handle(broker, ctx, sub):
            return {"topics": [{"name": "a", "partitions": [
                {"partition_index": p["partition_index"], "where": 0}
                for p in sub["topics"][0]["partitions"]]}]}
        answer = mesh.router.route(_ctx(K.LIST_OFFSETS, 7), req, handle, PARTITION)
        (msg,) = mesh.link.sent
        assert [p["partition_index"] for p in msg["body"]["topics"][0]["partitions"]] == [3, 1]
        mesh.answer(lambda m: {"topics": [{"name": "a", "partitions": [
            {"partition_index": p["partition_index"], "where": 1}
            for p in m["body"]["topics"][0]["partitions"]]}]})
        return await answer
    resp = asyncio.run(run())
    assert [(p["partition_index"], p["where"]) for p in resp["topics"][0]["partitions"]] == \
        [(3, 1), (0, 0), (1, 1)]


def test_group_scope_goes_whole_to_the_coordinator_else_runs_here():
    from workers.groups.partitioner import coordinator_partition
    from workers.scope import GROUP

    async def run():
        mesh = _Mesh(asyncio.get_running_loop())
        theirs = next(g for g in ("g1", "g2", "g3", "g4")
                      if coordinator_partition(g, 2) == 1)
        ours = next(g for g in ("g1", "g2", "g3", "g4") if coordinator_partition(g, 2) == 0)
        assert mesh.router.route(_ctx(K.HEARTBEAT, 4), {"group_id": ours}, _local, GROUP) == \
            {"here": {"group_id": ours}}
        answer = mesh.router.route(_ctx(K.HEARTBEAT, 4), {"group_id": theirs}, _local, GROUP)
        (msg,) = mesh.link.sent
        assert msg["body"] == {"group_id": theirs}
        mesh.answer(lambda m: {"there": m["body"]})
        return await answer, theirs
    out, theirs = asyncio.run(run())
    assert out == {"there": {"group_id": theirs}}


def test_txn_scope_without_a_transactional_id_runs_here():
    from workers.scope import TXN

    async def run():
        mesh = _Mesh(asyncio.get_running_loop())
        out = mesh.router.route(_ctx(K.INIT_PRODUCER_ID, 4), {"transactional_id": None},
                                _local, TXN)
        return out, mesh.link.sent
    out, sent = asyncio.run(run())
    assert out == {"here": {"transactional_id": None}} and sent == []


def test_cluster_scope_asks_every_worker_and_merges():
    from workers.scope import cluster

    async def run():
        mesh = _Mesh(asyncio.get_running_loop())
        answer = mesh.router.route(_ctx(K.LIST_GROUPS, 4), {}, lambda b, c, r: {
            "error_code": 0, "groups": [{"group_id": "mine"}]}, cluster(merge_list_groups))
        mesh.answer(lambda m: {"error_code": 0, "groups": [{"group_id": "theirs"}]})
        return await answer
    assert [g["group_id"] for g in asyncio.run(run())["groups"]] == ["mine", "theirs"]


def test_a_request_that_runs_here_whole_is_answered_as_the_handler_answers():
    """No guard, no task: the handler's future itself, and its failure raised, for the
    dispatcher to answer (as with one worker)."""
    from workers.scope import PARTITION

    async def run():
        mesh = _Mesh(asyncio.get_running_loop())
        fut = asyncio.get_running_loop().create_future()
        req = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "a", "partitions": [
            {"partition_index": i, "timestamp": -1} for i in (0, 2)]}]}
        assert mesh.router.route(_ctx(K.LIST_OFFSETS, 7), req, lambda b, c, r: fut,
                                 PARTITION) is fut

        def broken(broker, ctx, sub):
            raise OSError(5, "Input/output error")
        with pytest.raises(OSError):
            mesh.router.route(_ctx(K.LIST_OFFSETS, 7), req, broken, PARTITION)
        assert mesh.link.sent == []
    asyncio.run(run())


def test_a_part_that_fails_here_answers_its_partitions_with_the_error():
    """The local part of a split request is guarded: its partitions get the API's
    error, the owner's part its answer, merged in request order."""
    from workers.scope import PARTITION

    async def run():
        mesh = _Mesh(asyncio.get_running_loop())
        req = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "a", "partitions": [
            {"partition_index": i, "timestamp": -1} for i in (1, 0)]}]}

        def broken(broker, ctx, sub):
            raise OSError(5, "Input/output error")
        answer = mesh.router.route(_ctx(K.LIST_OFFSETS, 7), req, broken, PARTITION)
        mesh.answer(lambda m: {"topics": [{"name": "a", "partitions": [
            {"partition_index": 1, "error_code": 0, "where": 1}]}]})
        return await answer
    parts = asyncio.run(run())["topics"][0]["partitions"]
    assert [(p["partition_index"], p["error_code"]) for p in parts] == \
        [(1, 0), (0, ErrorCode.KAFKA_STORAGE_ERROR)]


def test_an_owner_that_goes_before_answering_has_its_part_answered_here():
    """The part forwarded to a worker whose link closes meanwhile (PeerGone) runs here
    instead, and the answer, a future completed by the parts' callbacks (no task), merges
    it in request order."""
    from workers.scope import PARTITION

    async def run():
        mesh = _Mesh(asyncio.get_running_loop())
        mesh.link.worker = 1
        mesh.router.broker.fetch_purgatory = types.SimpleNamespace(
            check_and_complete=lambda key: 0)
        req = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "a", "partitions": [
            {"partition_index": i, "timestamp": -1} for i in (1, 0, 3)]}]}

        def handle(broker, ctx, sub):
            return {"topics": [{"name": "a", "partitions": [
                {"partition_index": p["partition_index"], "where": "here"}
                for p in sub["topics"][0]["partitions"]]}]}
        answer = mesh.router.route(_ctx(K.LIST_OFFSETS, 7), req, handle, PARTITION)
        assert isinstance(answer, asyncio.Future) and not answer.done()
        mesh.router._closed(mesh.link)
        return await answer
    parts = asyncio.run(run())["topics"][0]["partitions"]
    assert [(p["partition_index"], p["where"]) for p in parts] == \
        [(1, "here"), (0, "here"), (3, "here")]


def test_an_unreachable_owner_has_its_part_answered_here():
    from workers.scope import GROUP

    async def run():
        mesh = _Mesh(asyncio.get_running_loop(), reachable=False)
        req = {"groups": ["g1", "g2", "g3", "g4"]}
        return mesh.router.route(_ctx(K.DESCRIBE_GROUPS, 5), req, lambda b, c, r: {
            "groups": [{"group_id": g, "here": True} for g in r["groups"]]}, GROUP)
    resp = asyncio.run(run())
    assert [g["group_id"] for g in resp["groups"]] == ["g1", "g2", "g3", "g4"]


def test_split_and_merge_markers_by_owner():
    req = {"markers": [
        {"producer_id": 1, "producer_epoch": 0, "transaction_result": True,
         "coordinator_epoch": 0, "topics": [{"name": "a", "partition_indexes": [0, 1, 2]},
                                            {"name": "b", "partition_indexes": [1]}]},
        {"producer_id": 2, "producer_epoch": 0, "transaction_result": False,
         "coordinator_epoch": 0, "topics": [{"name": "a", "partition_indexes": [1]}]}]}
    owner = lambda t, p: p % 2       # noqa: E731
    parts = split_markers(req, owner)
    assert set(parts) == {0, 1}
    sub0, order0 = parts[0]
    assert order0 == [0]
    assert sub0["markers"][0]["topics"] == [{"name": "a", "partition_indexes": [0, 2]}]
    sub1, order1 = parts[1]
    assert order1 == [0, 1]
    assert sub1["markers"][0]["topics"] == [{"name": "a", "partition_indexes": [1]},
                                            {"name": "b", "partition_indexes": [1]}]

    def answer(sub, code):
        return {"markers": [{"producer_id": m["producer_id"], "topics": [
            {"name": t["name"], "partitions": [{"partition_index": i, "error_code": code + i}
                                               for i in t["partition_indexes"]]}
            for t in m["topics"]]} for m in sub["markers"]]}
    merged = merge_markers(req, [(order1, answer(sub1, 10)), (order0, answer(sub0, 0))])
    assert merged == {"markers": [
        {"producer_id": 1, "topics": [
            {"name": "a", "partitions": [{"partition_index": 0, "error_code": 0},
                                         {"partition_index": 1, "error_code": 11},
                                         {"partition_index": 2, "error_code": 2}]},
            {"name": "b", "partitions": [{"partition_index": 1, "error_code": 11}]}]},
        {"producer_id": 2, "topics": [
            {"name": "a", "partitions": [{"partition_index": 1, "error_code": 11}]}]}]}


def test_describe_producers_split_by_owner_keeps_request_order():
    spec = PART_SPECS[K.DESCRIBE_PRODUCERS]
    req = {"topics": [{"name": "a", "partition_indexes": [3, 0, 1]},
                      {"name": "b", "partition_indexes": [2]}]}
    parts = split_partitions(req, spec, lambda t, p: p % 2)
    assert parts[0]["topics"] == [{"name": "a", "partition_indexes": [0]},
                                  {"name": "b", "partition_indexes": [2]}]
    assert parts[1]["topics"] == [{"name": "a", "partition_indexes": [3, 1]}]

    def answer(sub):
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [{"partition_index": i, "error_code": 0}
                                               for i in t["partition_indexes"]]}
            for t in sub["topics"]]}
    merged = merge_partitions(req, spec, [answer(parts[1]), answer(parts[0])])
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in merged["topics"]] == [("a", [3, 0, 1]), ("b", [2])]


def _placing_router():
    """A 2-worker router over topic "a" (4 partitions: p % 2's), worker 1 reachable;
    `calls` lists what its placement table was asked."""
    r, B = _counting_router({"a": 4})
    calls = []

    def owner(t, p):
        calls.append((t, p))
        return p % 2
    B.placement = type("P", (), {"num_workers": 2, "owner": staticmethod(owner)})()
    r.peers[1] = _Link()
    return r, B, calls


def test_place_counts_like_count_and_answers_like_owner():
    """`placed` (Fetch's front): one pass that counts each occurrence of a partition
    that exists and gives each key its `owner`; placement answers are cached per table."""
    r, B, calls = _placing_router()
    keys = [("a", 1), ("a", 2), ("a", 1), ("a", 9), ("nope", 0)]
    assert r.placed(keys).owners == {("a", 1): 1, ("a", 2): 0, ("a", 9): 0, ("nope", 0): 0}
    assert r.partition_requests == {("a", 1): 2, ("a", 2): 1}
    assert [r.owner(*k) for k in keys] == [1, 0, 1, 0, 0]
    assert calls == [("a", 1), ("a", 2)]               # cached: asked once each
    r.peers[1].closed = True                           # an unreachable owner: here
    r.links_changed += 1                               # (what closing its link does)
    assert r.placed([("a", 1)]).owners == {("a", 1): 0} and r.owner("a", 1) == 0
    r.peers[1].closed = False
    r.links_changed += 1
    table = B.placement
    B.placement = type("P", (), {"num_workers": 2, "owner": staticmethod(lambda t, p: 0)})()
    assert r.owner("a", 1) == 0                        # a new table: asked again
    B.placement = table
    assert r.owner("a", 1) == 1
    B.metadata = _md_with_partitions({})               # "a" deleted: new metadata
    before = dict(r.partition_requests)
    assert r.placed([("a", 1)]).owners == {("a", 1): 0} and r.owner("a", 1) == 0
    assert r.partition_requests == before


def test_a_request_shape_is_placed_once_and_counted_per_request():
    """A consumer's every Fetch names the same partitions: `placed` places that shape
    once while the owners stay as they are and counts each request, in the counts the
    balancer reads; a new table, new metadata or a link that opens or closes places it
    again, without losing what was counted."""
    r, B, calls = _placing_router()
    keys = [("a", 0), ("a", 1), ("a", 9)]
    first = r.placed(keys)
    assert first.owners == {("a", 0): 0, ("a", 1): 1, ("a", 9): 0} and not first.mine
    for _ in range(9):
        assert r.placed(list(keys)) is first
    assert r.placed([("a", 0), ("a", 2)]).mine          # another shape, all this worker's
    assert calls == [("a", 0), ("a", 1), ("a", 2)]
    assert r.partition_requests == {("a", 0): 11, ("a", 1): 10, ("a", 2): 1}
    assert r.placed(keys) is first
    r.links_changed += 1                                # worker 1's link closed
    r.peers[1].closed = True
    again = r.placed(keys)
    assert again is not first and again.mine
    assert r.request_counts() == [["a", 0, 13], ["a", 1, 12], ["a", 2, 1]]
    B.metadata = _md_with_partitions({"a": 1})          # partitions 1-3 gone
    assert r.placed(keys).owners == {("a", 0): 0, ("a", 1): 0, ("a", 9): 0}
    assert r.request_counts() == [["a", 0, 14]]


def test_shapes_not_remembered_or_past_the_cap_are_counted_all_the_same(monkeypatch):
    """An incremental Fetch's shape is placed and counted, not cached; the cache holds
    at most SHAPE_KEYS partitions, and what it counted survives its clearing."""
    from workers import router as routermod
    monkeypatch.setattr(routermod, "SHAPE_KEYS", 4)
    r, _, calls = _placing_router()
    once = r.placed([("a", 0), ("a", 1)], remember=False)
    assert once.owners == {("a", 0): 0, ("a", 1): 1} and not r._shapes
    assert r.partition_requests == {("a", 0): 1, ("a", 1): 1}
    three = [("a", 1), ("a", 2), ("a", 3)]
    first = r.placed(three)
    assert r.placed(three) is first and len(r._shapes) == 1
    r.placed([("a", 0), ("a", 2)])          # 5 partitions in all: the cache starts again
    assert list(r._shapes) == [(("a", 0), ("a", 2))]
    assert r.placed(three) is not first
    assert r.request_counts() == [["a", 0, 2], ["a", 1, 4], ["a", 2, 4], ["a", 3, 3]]


def test_an_owner_publishes_the_state_of_what_a_front_asked_for(tmp_path):
    """A Fetch part with "sub": the owner's answer carries the partitions' state as read,
    and each later change of them (the fetch purgatory's check of their key) is
    published once per loop iteration; a front's copy wakes its parked Fetches."""
    from tests.workers.test_txn_fetch import TOPIC, MiniBroker, fetch_req, produce
    from storage.batch import BatchBuilder
    from workers.handler_errors import run_guarded
    from workers.handlers import fetch
    from workers.router import Router

    async def run():
        broker = MiniBroker(tmp_path)
        broker.requests_served, broker.worker_id = 0, 1
        r = Router(broker, lambda ctx, body: run_guarded(fetch.handle, broker, ctx, body))
        r.start(asyncio.get_running_loop())
        link = r.peers[0] = _Link()
        r.on_message(0, {"op": "req", "id": 1, "api_key": K.FETCH, "version": 11,
                         "client_id": "c", "client_host": "h", "body": fetch_req(0, 0),
                         "sub": [(TOPIC, 0), (TOPIC, 9)]})
        (reply,) = link.sent
        ((topic, index, st),) = reply["state"]
        assert reply["id"] == 1 and (topic, index, st[:6]) == (TOPIC, 0, (0, 0, 0, 0, 0, 0))
        path, _, _, hw_pos, lso_pos, abort_end = st[6]    # where a read at the HW starts
        assert path.endswith(".log") and (hw_pos, lso_pos, abort_end) == (0, 0, -1)
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())
        broker.fetch_purgatory.check_and_complete((TOPIC, 0))
        produce(broker, 1, BatchBuilder().append(b"k", b"v").build())   # nobody asked
        broker.fetch_purgatory.check_and_complete((TOPIC, 1))
        assert len(link.sent) == 1                        # not before the iteration ends
        await asyncio.sleep(0)
        (_, _, published), = link.sent[1]["parts"]
        assert published[0] == 1 and published[4] > 0    # hw 1, bytes appended
        r.on_message(0, {"op": "unsub", "keys": [[TOPIC, 0]]})   # the front swept it
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())
        broker.fetch_purgatory.check_and_complete((TOPIC, 0))
        await asyncio.sleep(0)
        assert len(link.sent) == 2
        # the front's side: the answer that subscribed brings the copy (before the
        # waiter hears of the answer), a published change updates it; each checks the
        # key in the fetch purgatory
        checked = []
        broker.fetch_purgatory.on_check = checked.append
        fut = asyncio.get_running_loop().create_future()
        r.pending[5] = (fut, 2)
        r.on_message(2, {"op": "resp", "id": 5, "body": {}, "state": [(TOPIC, 5, published)]})
        assert fut.result() == {} and fut.state == [(TOPIC, 5, published)]
        assert checked == [(TOPIC, 5)] and r.states.get((TOPIC, 5)).owner == 2
        r.on_message(2, {"op": "state", "parts": [(TOPIC, 5, (7,) + published[1:])]})
        assert r.states.get((TOPIC, 5)).high_watermark == 7 and len(checked) == 2
        links = r.links_changed
        r._closed(r.peers.setdefault(2, types.SimpleNamespace(worker=2)))
        assert r.states.get((TOPIC, 5)) is None and checked == [(TOPIC, 5)] * 3
        assert r.links_changed == links + 1     # a fan-out's park splits again after this
        broker.close()
    asyncio.run(run())


def test_a_coordinator_key_maps_by_the_topics_whole_partition_count():
    # __consumer_offsets shown in part (cluster mode, while it is created): a group keeps
    # the partition it maps to with all 3 shown
    from mpbroker.metadata import model
    from workers.groups.partitioner import coordinator_partition
    from workers.router import Router

    st = model.PartitionState(0, 1, 0, (1,), (1,))

    class B:
        worker_id = 0
        placement = type("P", (), {"num_workers": 2})()
        metadata = type("MD", (), {"topics": {
            "__consumer_offsets": model.Topic("__consumer_offsets", b"\x01" * 16, {0: st}, {}, True, 3)}})()

    r = Router(B())
    group = next(g for g in (f"g{i}" for i in range(100)) if coordinator_partition(g, 3) == 2)
    assert r._coordinator_key("__consumer_offsets", group) == ("__consumer_offsets", 2)


def _front(tmp_path):
    """Worker 1's router over a MiniBroker, started in the running loop, with a fake
    channel to worker 2: (broker, router, that channel)."""
    from tests.workers.test_txn_fetch import MiniBroker
    from workers.router import Router
    broker = MiniBroker(tmp_path)
    broker.requests_served, broker.worker_id = 0, 1
    r = Router(broker, lambda ctx, body: {})
    r.start(asyncio.get_running_loop())
    link = r.peers[2] = _Link()
    return broker, r, link


def test_a_sweep_tells_the_owner_and_wakes_a_fetch_parked_on_the_copy(tmp_path):
    from tests.workers.test_txn_fetch import TOPIC

    async def run():
        broker, r, link = _front(tmp_path)
        checked = []
        broker.fetch_purgatory.on_check = checked.append
        r.states.update(2, [(TOPIC, 5, (1, 1, 0, 0, 9, 9, None)),
                            (TOPIC, 6, (1, 1, 0, 0, 9, 9, None))],
                        subscribed=True)
        r.states.used.add((TOPIC, 6))
        r._sweep_states()
        assert link.sent == [{"op": "unsub", "keys": [(TOPIC, 5)]}] and checked == [(TOPIC, 5)]
        assert r.states.get((TOPIC, 5)) is None and r.states.get((TOPIC, 6)) is not None
        r._sweeper.cancel()
        broker.close()
    asyncio.run(run())


def test_bytes_a_front_read_from_an_owners_files_count_as_the_owners_bytes_out(tmp_path):
    from tests.workers.test_txn_fetch import TOPIC, MiniBroker
    from workers.router import Router

    async def run():
        front_broker, owner_broker = MiniBroker(tmp_path / "f"), MiniBroker(tmp_path / "o")
        for b, wid in ((front_broker, 1), (owner_broker, 2)):
            b.requests_served, b.worker_id = 0, wid
        front = Router(front_broker, lambda ctx, body: {})
        owner = Router(owner_broker, lambda ctx, body: {})
        front.start(asyncio.get_running_loop())
        owner.start(asyncio.get_running_loop())
        link = front.peers[2] = _Link()
        front._report_served()
        assert link.sent == []                  # nothing read: nothing told
        front.states.count_served(2, (TOPIC, 1), 300)
        front.states.count_served(2, (TOPIC, 7), 5)     # not the owner's (any more)
        front._report_served()
        (msg,) = link.sent
        assert msg == {"op": "served", "parts": [(TOPIC, 1, 300), (TOPIC, 7, 5)]}
        owner.on_message(1, msg)
        assert owner_broker.partition(TOPIC, 1).bytes_out == 300
        assert owner_broker.partition(TOPIC, 0).bytes_out == 0
        front.states.count_served(2, (TOPIC, 1), 20)
        link.write_batched = link.close = lambda: None
        front.close()                           # what is not told yet leaves with it
        assert link.sent[-1] == {"op": "served", "parts": [(TOPIC, 1, 20)]}
        owner._sweeper.cancel()
        owner._reporter.cancel()
        front_broker.close()
        owner_broker.close()
    asyncio.run(run())


def test_a_fetch_part_that_fails_on_the_owner_leaves_no_subscription(tmp_path):
    from tests.workers.test_txn_fetch import TOPIC, MiniBroker, fetch_req
    from workers.router import Router

    def boom(ctx, body):
        raise ConnectionAbortedError("failed")

    async def run():
        broker = MiniBroker(tmp_path)
        broker.requests_served, broker.worker_id = 0, 1
        r = Router(broker, boom)
        r.start(asyncio.get_running_loop())
        link = r.peers[0] = _Link()
        r.on_message(0, {"op": "req", "id": 1, "api_key": K.FETCH, "version": 11,
                         "client_id": "c", "client_host": "h", "body": fetch_req(0, 0),
                         "sub": [(TOPIC, 0)]})
        (reply,) = link.sent
        assert "error" in reply and r.publisher.subscribers == {}
        r._sweeper.cancel()
        broker.close()
    asyncio.run(run())


def test_a_shape_names_the_one_other_worker_that_owns_all_its_partitions():
    """`sole`: what a connection's move to its partitions' owner goes by (workers/handoff.py)."""
    r, B, calls = _placing_router()
    assert r.placed([("a", 1), ("a", 3)]).sole == 1
    mine = r.placed([("a", 0), ("a", 2), ("nope", 0)])
    assert mine.mine and mine.sole is None
    both = r.placed([("a", 0), ("a", 1)])
    assert not both.mine and both.sole is None
    assert r.placed([("a", 3), ("nope", 1)]).sole is None   # an unknown one is answered here
    assert r.placed([], remember=False).mine and r.placed([]).sole is None
    r.peers[1].closed = True                                # unreachable: all here
    r.links_changed += 1
    gone = r.placed([("a", 1), ("a", 3)])
    assert gone.mine and gone.sole is None


def test_a_moved_connections_copies_go_unless_another_fetch_here_uses_them(tmp_path):
    """`forget_states` (workers/handoff.py): the copies of the moved connection's
    partitions are dropped and their owner told at once, except one a parked Fetch
    watches and one a part in flight subscribes (its answer would bring a copy the
    owner no longer updates); the others' owners' copies are not touched."""
    from tests.workers.test_purgatory import Op
    from tests.workers.test_txn_fetch import TOPIC

    async def run():
        broker, r, link = _front(tmp_path)
        r.peers[3] = _Link()
        state = (1, 1, 0, 0, 9, 9, None)
        r.states.update(2, [(TOPIC, i, state) for i in (5, 6, 7, 8)], subscribed=True)
        r.states.update(3, [(TOPIC, 9, state)], subscribed=True)
        broker.fetch_purgatory.try_complete_else_watch(Op(60_000), [(TOPIC, 6)])  # parked
        asking = r.forward(2, types.SimpleNamespace(api_key=1, api_version=12, client_id="c",
                                                    client_host="h"),
                           {"topics": []}, sub_keys=[(TOPIC, 7)])
        link.sent.clear()
        r.forget_states(2, [(TOPIC, 5), (TOPIC, 6), (TOPIC, 7), (TOPIC, 9)])
        assert link.sent == [{"op": "unsub", "keys": [(TOPIC, 5)]}]
        assert r.states.get((TOPIC, 5)) is None
        assert all(r.states.get((TOPIC, i)) is not None for i in (6, 7, 8, 9))
        r.on_message(2, {"op": "resp", "id": asking.rid, "body": {}})   # answered
        link.sent.clear()
        r.forget_states(2, [(TOPIC, 7)])
        assert link.sent == [{"op": "unsub", "keys": [(TOPIC, 7)]}]
        r._sweeper.cancel()
        r._reporter.cancel()
        broker.close()
    asyncio.run(run())


def test_a_produce_that_goes_whole_to_another_worker_counts_to_move_its_connection():
    """workers/handoff.py: a Produce all of whose partitions are one other worker's adds
    1 to the connection's streak; one with a partition here, or with acks=0 (whose
    failure closes the connection from here), ends it; a connection that may not move
    is not counted."""
    from workers.connection import Connection
    from workers.scope import PARTITION

    class Conn:
        on_move = staticmethod(lambda conn, wid: False)
        move_to, move_streak, move_keys = -1, 0, ()
        produced_to = Connection.produced_to

    def req(parts, acks=-1):
        return {"acks": acks, "timeout_ms": 1000, "transactional_id": None, "topic_data": [
            {"name": "a", "partition_data": [{"index": i, "records": memoryview(bytearray(b"r"))}
                                             for i in parts]}]}

    async def run():
        mesh = _Mesh(asyncio.get_running_loop())
        mesh.link.write_batched = lambda: None
        ctx = _ctx(K.PRODUCE, 9)
        ctx.connection = conn = Conn()

        def produce(parts, acks=-1):
            answer = mesh.router.route(ctx, req(parts, acks), _local, PARTITION)
            if asyncio.isfuture(answer):
                answer.cancel()
        for n in (1, 2, 3):
            produce([1, 3])                                 # both worker 1's
            assert (conn.move_to, conn.move_streak) == (1, n)
        for other in ([0], [0, 1]):
            produce([1])
            assert conn.move_streak >= 1
            produce(other)
            assert conn.move_streak == 0, other
        produce([1])
        produce([3], acks=0)
        assert conn.move_streak == 0
        conn.on_move = None
        produce([1])
        assert conn.move_streak == 0
    asyncio.run(run())
