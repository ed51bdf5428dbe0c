"""workers/handlers/fetch/fanout.py: a Fetch split across workers by the front, over a
fake router (which worker owns what, what was forwarded, which parts were told to
answer now)."""
from __future__ import annotations

import asyncio

import pytest

from storage.batch import BatchBuilder
from tests.workers.test_txn_fetch import TOPIC, MiniBroker, ctx, fetch_req, produce
from workers.handlers.fetch.fanout import fan_out
from workers.router import PeerGone


class FakeRouter:
    """Partition 0 is this worker's (0), partition 1 worker 1's; `reachable` says
    whether worker 1 answers (`forward` gives a future) or is gone (None)."""

    def __init__(self, broker, reachable=True):
        self.broker = broker
        self.me = 0
        self.reachable = reachable
        self.forwarded = []          # (worker, sub-request)
        self.completed = []          # (worker, rid)
        self.counted = []

    def owner(self, topic, partition):
        return partition

    def count(self, keys):
        self.counted.extend(keys)

    def place(self, keys):
        self.count(keys)
        return {k: self.owner(*k) for k in keys}

    def forward(self, wid, ctx, body, keys=None):
        if not self.reachable:
            return None
        fut = asyncio.get_running_loop().create_future()
        fut.rid = len(self.forwarded) + 1
        self.forwarded.append((wid, body, fut))
        return fut

    def send_complete(self, wid, rid):
        self.completed.append((wid, rid))


@pytest.fixture
def broker(tmp_path):
    b = MiniBroker(tmp_path)
    yield b
    b.close()


def two_partitions(max_wait_ms=0):
    req = fetch_req(0, 0, max_wait_ms=max_wait_ms)
    req["topics"][0]["partitions"].append(
        {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1 << 20})
    return req


def never(*_):
    raise AssertionError("the whole request runs here only when every partition is ours")


def test_all_partitions_ours_runs_the_handler(broker):
    router = FakeRouter(broker)
    router.owner = lambda topic, partition: 0
    assert fan_out(router, ctx(1, 11), fetch_req(0, 0), lambda b, c, r: "local") == "local"
    assert router.counted == [(TOPIC, 0)] and not router.forwarded


def test_an_unreachable_owner_has_its_part_read_here(broker):
    produce(broker, 1, BatchBuilder().append(b"k", b"v").build())
    router = FakeRouter(broker, reachable=False)

    async def run():
        return fan_out(router, ctx(1, 11), two_partitions(), never)
    resp = asyncio.run(run())
    parts = resp["responses"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == [0, 1]
    assert parts[1]["records"] and parts[0]["records"] == []


def test_remote_part_forwarded_sessionless_and_merged_in_request_order(broker):
    produce(broker, 0, BatchBuilder().append(b"k", b"local").build())
    router = FakeRouter(broker)

    async def run():
        answer = fan_out(router, ctx(1, 11), two_partitions(), never)
        ((wid, sub, fut),) = router.forwarded
        assert wid == 1 and sub["session_epoch"] == -1 and sub["max_wait_ms"] == 0
        assert [p["partition"] for p in sub["topics"][0]["partitions"]] == [1]
        fut.set_result({"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
            {"topic": TOPIC, "partitions": [{"partition_index": 1, "error_code": 0,
                                              "high_watermark": 9, "last_stable_offset": 9,
                                              "log_start_offset": 0, "records": [b"x"]}]}]})
        return await answer
    resp = asyncio.run(run())
    parts = resp["responses"][0]["partitions"]
    assert [(p["partition_index"], p["high_watermark"]) for p in parts] == [(0, 1), (1, 9)]


def test_long_poll_first_answer_completes_the_other_parts(broker):
    router = FakeRouter(broker)

    async def run():
        answer = asyncio.ensure_future(
            fan_out(router, ctx(1, 11), two_partitions(max_wait_ms=5000), never))
        ((_, sub, fut),) = router.forwarded
        assert sub["max_wait_ms"] == 5000
        assert len(broker.fetch_purgatory) == 1          # the local part is parked here
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())   # local news
        for _ in range(10):                              # the gather sees the local answer
            if router.completed:
                break
            await asyncio.sleep(0)
        assert router.completed == [(1, fut.rid)]        # the owner is told to answer now
        fut.set_exception(PeerGone("worker 1 is gone"))  # ... and went: read here
        return await answer
    resp = asyncio.run(run())
    parts = resp["responses"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == [0, 1] and parts[0]["records"]


def test_an_incremental_session_hears_only_what_changed_from_the_owner(broker):
    """An incremental session's part tells the owner what the client last saw of each
    partition ("known"); the owner leaves out the partitions with nothing new, which
    the session's response leaves out too (the front fills them in as unchanged)."""
    router = FakeRouter(broker)

    def owner_answer(hw, records=()):
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
            {"topic": TOPIC, "partitions": [{"partition_index": 1, "error_code": 0,
                                              "high_watermark": hw, "last_stable_offset": hw,
                                              "log_start_offset": 0, "records": list(records)}]}]}

    async def fetch(req, answer):
        result = fan_out(router, ctx(1, 11), req, never)
        wid, sub, fut = router.forwarded[-1]
        if answer is not None:
            fut.set_result(answer)
        return sub, await result

    async def run():
        full = two_partitions()
        full["session_epoch"] = 0                       # a new session: a full answer
        sub, resp = await fetch(full, owner_answer(9))
        assert "known" not in sub["topics"][0]["partitions"][0]
        assert [p["partition_index"] for p in resp["responses"][0]["partitions"]] == [0, 1]
        sid = resp["session_id"]
        assert sid

        def incremental(epoch):
            return {**fetch_req(0, 0), "topics": [], "session_id": sid, "session_epoch": epoch}
        sub, resp = await fetch(incremental(1), {"throttle_time_ms": 0, "error_code": 0,
                                                 "session_id": 0, "responses": []})
        (p,) = sub["topics"][0]["partitions"]
        assert p["partition"] == 1 and p["known"] == (9, 9, 0)
        assert resp["session_id"] == sid and resp["responses"] == []     # nothing new
        sub, resp = await fetch(incremental(2), owner_answer(10, [b"x"]))
        assert [(p["partition_index"], p["high_watermark"])
                for p in resp["responses"][0]["partitions"]] == [(1, 10)]
        # a failed part assumes nothing: its partitions are answered as read here
        sub, resp = await fetch(incremental(3), {"throttle_time_ms": 0, "error_code": 58,
                                                 "session_id": 0, "responses": []})
        assert sub["topics"][0]["partitions"][0]["known"] == (10, 10, 0)
        assert [p["partition_index"] for p in resp["responses"][0]["partitions"]] == [1]
    asyncio.run(run())
