"""workers/handlers/fetch/fanout.py: a Fetch split across workers by the front, over a
fake router (which worker owns what, what was forwarded, what worker 1 published)."""
from __future__ import annotations

import asyncio
import os

import pytest

from storage.batch import BatchBuilder
from tests.workers.test_txn_fetch import TOPIC, MiniBroker, ctx, fetch_req, part_of, produce
from workers.connection import FETCH_WEIGHT
from workers.handlers.fetch import memo as memo_mod
from workers.handlers.fetch import handle as fetch_handle
from workers.handlers.fetch.fanout import fan_out
from workers.partition_states import RemoteStates, state_of
from workers.router import PeerGone, Router, _Shape


class FakeRouter:
    """Partition 0 is this worker's (0), partition 1 worker 1's; `reachable` says
    whether worker 1 answers (`forward` gives a future) or is gone (None)."""

    def __init__(self, broker, reachable=True):
        self.broker = broker
        self.me = 0
        self.reachable = reachable
        self.forwarded = []          # (worker, sub-request, future, subscribed keys)
        self.counted = []
        self.states = RemoteStates()
        self.links_changed = 0       # as Router's: bumped when a peer's link opens or closes
        self.remembered = []         # `placed`'s `remember` of each Fetch
        self.owner_calls = 0

    # the real Router's: what its owners answer from (broker.metadata, broker.placement,
    # links_changed)
    owners_token = Router.owners_token
    owners_same = Router.owners_same

    def owner(self, topic, partition):
        self.owner_calls += 1
        return partition

    def count(self, keys):
        self.counted.extend(keys)

    def placed(self, keys, remember=True):
        self.remembered.append(remember)
        self.count(keys)
        owners = {k: self.owner(*k) for k in keys}
        ws = set(owners.values())
        sole = ws.pop() if len(ws) == 1 and self.me not in ws else None
        return _Shape(owners, keys, all(w == self.me for w in owners.values()), sole)

    def forward(self, wid, ctx, body, sub_keys=None):
        if not self.reachable:
            return None
        fut = asyncio.get_running_loop().create_future()
        self.forwarded.append((wid, body, fut, sub_keys))
        return fut

    def publish(self, broker, index=1):
        """Worker 1 tells its partition `index` (read from the test's broker), as the
        answer that subscribed it or a change since, and the front's long polls check
        it, as Router._on_state does."""
        for key in self.states.update(1, [(TOPIC, index, state_of(broker.partition(TOPIC, index)))],
                                      subscribed=True):
            broker.fetch_purgatory.check_and_complete(key)


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


def test_all_partitions_ours_are_served_here(broker, monkeypatch):
    """Served as the registry's handler would (plan.serve), from the partitions resolved
    for placing it: neither `handle` nor a second resolution runs."""
    produce(broker, 0, BatchBuilder().append(b"k", b"v").build())
    router = FakeRouter(broker)
    router.owner = lambda topic, partition: 0
    resolved = []
    real = memo_mod.requested_partitions

    def counting(*a):
        resolved.append(a)
        return real(*a)
    monkeypatch.setattr(memo_mod, "requested_partitions", counting)
    resp = fan_out(router, ctx(1, 11), fetch_req(0, 0), never)
    monkeypatch.undo()
    assert resp == fetch_handle(broker, ctx(1, 11), fetch_req(0, 0))
    assert part_of(resp)["records"] and part_of(resp)["high_watermark"] == 1
    assert len(resolved) == 1
    assert router.counted == [(TOPIC, 0)] and not router.forwarded


def test_all_partitions_ours_park_as_a_future_of_the_answer(broker):
    """A parked Fetch that is all this worker's is the purgatory's future itself (the
    dispatcher finishes it with a callback; no task runs a guard around it)."""
    router = FakeRouter(broker)
    router.owner = lambda topic, partition: 0

    async def run():
        answer = fan_out(router, ctx(1, 11), fetch_req(0, 0, max_wait_ms=600_000), never)
        assert isinstance(answer, asyncio.Future)
        assert not answer.done()
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())
        return await answer
    assert part_of(asyncio.run(run()))["records"]


def test_an_unreachable_owner_has_its_part_read_here(broker):
    produce(broker, 1, BatchBuilder().append(b"k", b"v").build())
    router = FakeRouter(broker, reachable=False)

    async def run():
        return await fan_out(router, ctx(1, 11), two_partitions(), never)
    resp = asyncio.run(run())
    parts = resp["responses"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == [0, 1]
    assert parts[1]["records"] and parts[0]["records"] == []


def test_remote_part_forwarded_sessionless_and_merged_in_request_order(broker):
    produce(broker, 0, BatchBuilder().append(b"k", b"local").build())
    router = FakeRouter(broker)

    async def run():
        answer = fan_out(router, ctx(1, 11), two_partitions(), never)
        ((wid, sub, fut, keys),) = router.forwarded
        assert wid == 1 and sub["session_epoch"] == -1 and sub["max_wait_ms"] == 0
        assert keys == [(TOPIC, 1)]                      # the front hears of it from now on
        assert [p["partition"] for p in sub["topics"][0]["partitions"]] == [1]
        fut.set_result({"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
            {"topic": TOPIC, "partitions": [{"partition_index": 1, "error_code": 0,
                                              "high_watermark": 9, "last_stable_offset": 9,
                                              "log_start_offset": 0, "records": [b"x"]}]}]})
        return await answer
    resp = asyncio.run(run())
    parts = resp["responses"][0]["partitions"]
    assert [(p["partition_index"], p["high_watermark"]) for p in parts] == [(0, 1), (1, 9)]


async def _until(cond):
    for _ in range(50):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def _parked(router, broker, max_wait_ms):
    """A Fetch of both partitions parked on the front; the future of its answer."""
    answer = asyncio.ensure_future(
        fan_out(router, ctx(1, 11), two_partitions(max_wait_ms=max_wait_ms), never))
    await _until(lambda: len(broker.fetch_purgatory) == 1)
    return answer


def _answer(hw, records=()):
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": TOPIC, "partitions": [{"partition_index": 1, "error_code": 0,
                                          "high_watermark": hw, "last_stable_offset": hw,
                                          "log_start_offset": 0, "records": list(records)}]}]}


def test_a_caught_up_remote_partition_is_answered_from_its_published_state(broker):
    """No forward at all: the consumer is at the published high watermark."""
    produce(broker, 1, BatchBuilder().append(b"k", b"v").build())
    router = FakeRouter(broker)
    router.publish(broker)
    req = two_partitions()
    req["topics"][0]["partitions"][1]["fetch_offset"] = 1
    resp = fan_out(router, ctx(1, 11), req, never)         # answered now, not awaited
    assert not router.forwarded
    parts = resp["responses"][0]["partitions"]
    assert [(p["partition_index"], p["high_watermark"], p["records"]) for p in parts] == \
        [(0, 0, []), (1, 1, [])]


def test_a_remote_partition_is_asked_when_behind_or_on_another_epoch(broker):
    produce(broker, 1, BatchBuilder().append(b"k", b"v").build())
    router = FakeRouter(broker)
    router.publish(broker)

    async def run(offset, epoch):
        req = two_partitions()
        req["topics"][0]["partitions"][1].update(fetch_offset=offset, current_leader_epoch=epoch)
        answer = fan_out(router, ctx(1, 11), req, never)
        router.forwarded[-1][2].set_result(_answer(1))
        return await answer
    asyncio.run(run(0, -1))                               # behind the high watermark
    asyncio.run(run(1, 7))                                # an epoch it does not publish
    assert len(router.forwarded) == 2


def test_a_follower_is_always_asked(broker):
    router = FakeRouter(broker)
    router.publish(broker)

    async def run():
        req = two_partitions()
        req["replica_id"] = 2
        answer = fan_out(router, ctx(1, 11), req, never)
        router.forwarded[-1][2].set_result(_answer(0))
        return await answer
    asyncio.run(run())
    assert len(router.forwarded) == 1


def test_long_poll_parks_on_the_front_and_asks_only_the_owner_with_news(broker):
    """Caught up everywhere: the Fetch parks here, watching worker 1's partition through
    its published state; worker 1 publishing an append wakes it, and only then is
    worker 1 asked (for the partition with news: here it is over the partition's
    max bytes, so the front cannot read it whole from the file)."""
    router = FakeRouter(broker)
    router.publish(broker)

    async def run():
        req = two_partitions(max_wait_ms=5000)
        req["topics"][0]["partitions"][1]["partition_max_bytes"] = 10
        answer = asyncio.ensure_future(fan_out(router, ctx(1, 11), req, never))
        await _until(lambda: len(broker.fetch_purgatory) == 1)
        assert not router.forwarded
        produce(broker, 1, BatchBuilder().append(b"k", b"v").build())   # on worker 1
        router.publish(broker)
        await _until(lambda: router.forwarded)
        ((wid, sub, fut, _),) = router.forwarded
        assert wid == 1 and sub["max_wait_ms"] == 0
        fut.set_result(_answer(1, [b"x"]))
        return await answer
    resp = asyncio.run(run())
    parts = resp["responses"][0]["partitions"]
    assert [(p["partition_index"], p["records"]) for p in parts] == [(0, []), (1, [b"x"])]
    assert not router.states.take_served()


def _bytes(slices):
    """What a connection sends of `slices` (from another worker: opened by path)."""
    return b"".join(_pread(sl) for sl in slices)


def _pread(sl):
    assert sl.fd == -1
    fd = os.open(sl.path, os.O_RDONLY)
    try:
        assert (os.fstat(fd).st_dev, os.fstat(fd).st_ino) == (sl.dev, sl.ino)
        return os.pread(fd, sl.length, sl.position)
    finally:
        os.close(fd)


def test_long_poll_woken_by_an_owner_reads_its_new_batches_from_its_file(broker):
    """The owner published the file position of the offset the consumer fetches from
    and of its new high watermark: the front sends that range of the owner's segment
    itself (the bytes the owner's read gives), asks nothing, and counts the bytes for
    the owner."""
    router = FakeRouter(broker)
    router.publish(broker)

    async def run():
        answer = await _parked(router, broker, 5000)
        produce(broker, 1, BatchBuilder().append(b"k", b"v1").append(b"k", b"v2").build())
        produce(broker, 1, BatchBuilder().append(b"k", b"v3").build())
        router.publish(broker)
        return await answer
    resp = asyncio.run(run())
    assert not router.forwarded
    parts = resp["responses"][0]["partitions"]
    owner = broker.partition(TOPIC, 1)
    assert (parts[1]["high_watermark"], parts[1]["log_start_offset"]) == (3, 0)
    assert _bytes(parts[1]["records"]) == owner.log.read_records_bytes(0, max_offset=3)
    assert router.states.take_served() == {1: [(TOPIC, 1, len(_bytes(parts[1]["records"])))]}


def test_long_poll_woken_here_answers_the_remote_partition_from_its_state(broker):
    router = FakeRouter(broker)
    router.publish(broker)

    async def run():
        answer = await _parked(router, broker, 5000)
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())   # local news
        return await answer
    resp = asyncio.run(run())
    assert not router.forwarded
    parts = resp["responses"][0]["partitions"]
    assert parts[0]["records"] and parts[1]["records"] == []


def test_long_poll_expires_without_asking(broker):
    router = FakeRouter(broker)
    router.publish(broker)

    async def run():
        answer = await _parked(router, broker, 100)
        broker.clock_ms += 200
        broker.timer.advance_clock(broker.clock_ms)
        return await answer
    resp = asyncio.run(run())
    assert not router.forwarded
    assert [p["records"] for p in resp["responses"][0]["partitions"]] == [[], []]


def test_an_answer_without_news_parks_then_an_owner_gone_is_read_here(broker):
    """First fetch: worker 1's partition is asked (nothing published yet); its answer
    has no news, so the Fetch parks; worker 1's channel closing drops its state, which
    wakes the Fetch, and the partition is read here (not ours: an error)."""
    router = FakeRouter(broker)

    async def run():
        answer = asyncio.ensure_future(
            fan_out(router, ctx(1, 11), two_partitions(max_wait_ms=5000), never))
        await _until(lambda: router.forwarded)
        router.publish(broker)                            # sent before the answer
        router.forwarded[0][2].set_result(_answer(0))
        await _until(lambda: len(broker.fetch_purgatory) == 1)
        router.reachable = False
        for key in router.states.drop_owner(1):
            broker.fetch_purgatory.check_and_complete(key)
        return await answer
    resp = asyncio.run(run())
    assert len(router.forwarded) == 1
    parts = resp["responses"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == [0, 1]


def test_an_incremental_session_leaves_out_the_quiet_remote_partition(broker):
    router = FakeRouter(broker)

    async def run():
        full = two_partitions()
        full["session_epoch"] = 0                         # a new session: a full answer
        answer = fan_out(router, ctx(1, 11), full, never)
        router.publish(broker)
        router.forwarded[0][2].set_result(_answer(0))
        resp = await answer
        assert [p["partition_index"] for p in resp["responses"][0]["partitions"]] == [0, 1]
        sid = resp["session_id"]
        incremental = {**fetch_req(0, 0), "topics": [], "session_id": sid, "session_epoch": 1}
        resp = fan_out(router, ctx(1, 11), incremental, never)
        assert resp["session_id"] == sid and resp["responses"] == []      # nothing new
        assert len(router.forwarded) == 1
        # the full Fetch's shape may come again, the incremental one's (its own
        # partitions, then the session's) hardly
        assert router.remembered == [True, False]
    asyncio.run(run())


def test_data_published_between_the_owners_read_and_the_park_wakes_the_fetch(broker):
    """The park counts from the state the owner's answer was read at, not from the
    front's copy when it parks: an append published in between completes it at once."""
    router = FakeRouter(broker)

    async def run():
        answer = asyncio.ensure_future(
            fan_out(router, ctx(1, 11), two_partitions(max_wait_ms=600_000), never))
        await _until(lambda: router.forwarded)
        read_at = state_of(broker.partition(TOPIC, 1))
        router.states.update(1, [(TOPIC, 1, read_at)], subscribed=True)
        fut = router.forwarded[0][2]
        fut.state = [(TOPIC, 1, read_at)]
        produce(broker, 1, BatchBuilder().append(b"k", b"v").build())   # right after the read
        router.publish(broker)                            # heard before the front parks
        fut.set_result(_answer(0))
        return await answer                               # woken at once: read again
    resp = asyncio.run(run())
    assert len(router.forwarded) == 1       # (the new batch read here, from the owner's file)
    assert _bytes(resp["responses"][0]["partitions"][1]["records"]) == \
        broker.partition(TOPIC, 1).log.read_records_bytes(0)


def test_local_data_between_the_read_and_the_park_wakes_the_fetch(broker):
    router = FakeRouter(broker)
    router.publish(broker)

    async def run():
        parked = fan_out(router, ctx(1, 11), two_partitions(max_wait_ms=600_000), never)
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())   # before it parks
        return await parked
    resp = asyncio.run(run())
    assert resp["responses"][0]["partitions"][0]["records"]
    assert not router.forwarded


def test_remote_records_below_min_bytes_park_the_fetch(broker):
    produce(broker, 1, BatchBuilder().append(b"k", b"v").build())
    router = FakeRouter(broker)

    async def run():
        req = two_partitions(max_wait_ms=100)
        req["min_bytes"] = 1 << 20
        answer = asyncio.ensure_future(fan_out(router, ctx(1, 11), req, never))
        await _until(lambda: router.forwarded)
        router.publish(broker)
        router.forwarded[0][2].set_result(_answer(1, [b"x"]))
        await _until(lambda: len(broker.fetch_purgatory) == 1)     # 1 byte: it waits
        broker.clock_ms += 200
        broker.timer.advance_clock(broker.clock_ms)
        await _until(lambda: len(router.forwarded) == 2)  # expired: reads again
        router.forwarded[1][2].set_result(_answer(1, [b"x"]))
        return await answer
    resp = asyncio.run(run())
    assert resp["responses"][0]["partitions"][1]["records"] == [b"x"]


def test_an_incremental_fetch_that_forgets_every_partition_is_answered_at_once(broker):
    """Nothing left to read (the session's partitions all forgotten): no long poll."""
    router = FakeRouter(broker)
    router.publish(broker)

    async def run():
        full = two_partitions()
        full["session_epoch"] = 0
        sid = fan_out(router, ctx(1, 11), full, never)["session_id"]
        forget = {**fetch_req(0, 0, max_wait_ms=600_000), "topics": [], "session_id": sid,
                  "session_epoch": 1, "forgotten_topics_data": [{"topic": TOPIC,
                                                                 "partitions": [0, 1]}]}
        return fan_out(router, ctx(1, 11), forget, never)
    resp = asyncio.run(run())
    assert resp["error_code"] == 0 and resp["responses"] == []
    assert len(broker.fetch_purgatory) == 0


def test_a_woken_park_keeps_its_split_while_the_owners_cannot_have_changed(broker):
    router = FakeRouter(broker)
    router.publish(broker)

    async def run():
        answer = await _parked(router, broker, 5000)
        calls = router.owner_calls
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())   # local news
        resp = await answer
        assert router.owner_calls == calls        # no partition's owner looked up again
        return resp
    resp = asyncio.run(run())
    assert resp["responses"][0]["partitions"][0]["records"]


def _published_and_spied(broker):
    """A router to which worker 1 published partition 1, and the partitions whose
    published state a pass looks at (`RemoteStates.quiet`), in order."""
    router = FakeRouter(broker)
    router.publish(broker)
    quiet = router.states.quiet
    asked = []
    router.states.quiet = lambda cp, w, committed: asked.append(cp.partition) or quiet(
        cp, w, committed)
    return router, asked

def test_a_woken_park_passes_again_only_over_the_partitions_that_changed(broker):
    """Woken by news of partition 0, the Fetch keeps partition 1's caught-up answer
    (worker 1 published nothing new): its state is not looked at through a pass again."""
    router, asked = _published_and_spied(broker)

    async def run():
        answer = await _parked(router, broker, 5000)
        assert asked == [1]
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())   # local news
        return await answer
    parts = asyncio.run(run())["responses"][0]["partitions"]
    assert asked == [1] and not router.forwarded
    assert parts[0]["records"] and parts[1]["records"] == []
    assert (parts[1]["high_watermark"], router.states.used) == (0, {(TOPIC, 1)})


def test_a_woken_park_answers_again_a_partition_whose_state_changed(broker):
    """Partition 1's owner publishes a new leader epoch during the park (no bytes: that
    alone does not wake it); woken by partition 0, the Fetch does not keep partition 1's
    answer (the consumer names the old epoch): it asks the owner, which fences it."""
    router = FakeRouter(broker)
    router.publish(broker)
    p1 = broker.partition(TOPIC, 1)

    async def run():
        req = two_partitions(max_wait_ms=5000)
        req["topics"][0]["partitions"][1]["current_leader_epoch"] = p1.leader_epoch
        answer = asyncio.ensure_future(fan_out(router, ctx(1, 11), req, never))
        await _until(lambda: len(broker.fetch_purgatory) == 1)
        p1.leader_epoch += 1
        router.publish(broker)
        assert not answer.done() and not router.forwarded
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())   # wakes it
        await _until(lambda: router.forwarded)
        ((wid, sub, fut, _),) = router.forwarded
        assert wid == 1 and [p["partition"] for p in sub["topics"][0]["partitions"]] == [1]
        fenced = _answer(0)
        fenced["responses"][0]["partitions"][0]["error_code"] = 74     # FENCED_LEADER_EPOCH
        fut.set_result(fenced)
        return await answer
    parts = asyncio.run(run())["responses"][0]["partitions"]
    assert parts[0]["records"] and parts[1]["error_code"] == 74


def test_a_woken_follower_reads_again_what_it_was_answered(broker):
    """A follower's incremental Fetch that forgot its remote partition parks on its
    local one alone; the append that wakes it does not move the high watermark (this
    follower's next fetch does), so the first answer, unchanged by the offsets it
    carries, is not kept: the records are read."""
    from workers.purgatory import Purgatory
    broker.delete_records_purgatory = Purgatory("DeleteRecords", broker.timer)
    broker.partition(TOPIC, 0).make_leader(0, 0, (0, 2), (0, 2), 0, broker.clock_ms)
    router = FakeRouter(broker)

    async def run():
        full = {**two_partitions(), "replica_id": 2, "session_epoch": 0}
        answer = fan_out(router, ctx(1, 12), full, never)
        router.forwarded[0][2].set_result({"throttle_time_ms": 0, "error_code": 0,
                                           "session_id": 0, "responses": []})
        session_id = (await answer)["session_id"]
        assert session_id
        forgets = {**fetch_req(0, 0, max_wait_ms=5000), "replica_id": 2, "topics": [],
                   "session_id": session_id, "session_epoch": 1,
                   "forgotten_topics_data": [{"topic": TOPIC, "partitions": [1]}]}
        answer = asyncio.ensure_future(fan_out(router, ctx(1, 12), forgets, never))
        await _until(lambda: len(broker.fetch_purgatory) == 1)
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())
        return await answer
    resp = asyncio.run(run())
    parts = [p for t in resp["responses"] for p in t["partitions"]]
    assert [p["partition_index"] for p in parts] == [0] and parts[0]["records"]


def test_a_woken_fetcher_before_v10_reads_everything_again(broker):
    """A v4 consumer is answered from the reads, not from published state: after a
    park, all of its partitions are passed over again (only what changed is kept for
    a v10+ consumer)."""
    router, asked = _published_and_spied(broker)

    async def run():
        answer = asyncio.ensure_future(fan_out(router, ctx(1, 4), two_partitions(5000),
                                               never))
        await _until(lambda: router.forwarded)
        router.forwarded[0][2].set_result(_answer(0))
        await _until(lambda: len(broker.fetch_purgatory) == 1)
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())   # local news
        await _until(lambda: len(router.forwarded) == 2)
        router.forwarded[1][2].set_result(_answer(0))                  # asked again
        return await answer
    parts = asyncio.run(run())["responses"][0]["partitions"]
    assert not asked and parts[0]["records"] and not parts[1]["records"]


def test_a_woken_park_splits_again_when_a_link_opened_or_closed(broker):
    """Partition 1 becomes ours during the park (its owner's link went): after the
    wake it is read here, with the records appended meanwhile, not answered from
    worker 1's old published state."""
    router = FakeRouter(broker)
    router.publish(broker)

    async def run():
        answer = await _parked(router, broker, 5000)
        router.owner = lambda topic, partition: 0
        router.links_changed += 1
        produce(broker, 1, BatchBuilder().append(b"k", b"moved").build())
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())   # wakes it
        return await answer
    resp = asyncio.run(run())
    assert not router.forwarded
    parts = resp["responses"][0]["partitions"]
    assert parts[0]["records"] and parts[1]["records"]


def test_bytes_read_from_an_owners_file_leave_the_rest_of_max_bytes_to_the_others(tmp_path):
    """Partition 1 is read here from worker 1's file; worker 2, asked for partition 2,
    and this worker's own read share what is left of the Fetch's max_bytes."""
    broker = MiniBroker(tmp_path, partitions=3)
    try:
        router = FakeRouter(broker)
        router.publish(broker)
        produce(broker, 1, BatchBuilder().append(b"k", b"v" * 100).build())
        router.publish(broker)
        n = broker.partition(TOPIC, 1).log.active_segment.size
        req = two_partitions()
        req["max_bytes"] = 9000
        req["topics"][0]["partitions"].append(
            {"partition": 2, "fetch_offset": 0, "partition_max_bytes": 1 << 20})

        async def run():
            answer = fan_out(router, ctx(1, 11), req, never)
            ((wid, sub, fut, _),) = router.forwarded
            assert wid == 2 and sub["max_bytes"] == (9000 - n) // 2
            fut.set_result({"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                            "responses": [{"topic": TOPIC, "partitions": [
                                {"partition_index": 2, "error_code": 0, "high_watermark": 0,
                                 "last_stable_offset": 0, "log_start_offset": 0,
                                 "records": []}]}]})
            return await answer
        parts = asyncio.run(run())["responses"][0]["partitions"]
        assert [p["partition_index"] for p in parts] == [0, 1, 2]
        assert len(_bytes(parts[1]["records"])) == n
        assert router.states.take_served() == {1: [(TOPIC, 1, n)]}
    finally:
        broker.close()


def test_bytes_read_here_count_once_per_answer(broker):
    """Read from worker 1's file, below min_bytes: the Fetch parks, then reads it again
    at expiry; the owner hears of the bytes of the answer, once."""
    router = FakeRouter(broker)
    router.publish(broker)
    produce(broker, 1, BatchBuilder().append(b"k", b"v").build())
    router.publish(broker)
    n = broker.partition(TOPIC, 1).log.active_segment.size

    async def run():
        req = two_partitions(max_wait_ms=100)
        req["min_bytes"] = 1 << 20
        answer = asyncio.ensure_future(fan_out(router, ctx(1, 11), req, never))
        await _until(lambda: len(broker.fetch_purgatory) == 1)
        assert router.states.take_served() == {}          # nothing answered yet
        broker.clock_ms += 200
        broker.timer.advance_clock(broker.clock_ms)
        return await answer
    parts = asyncio.run(run())["responses"][0]["partitions"]
    assert len(_bytes(parts[1]["records"])) == n and not router.forwarded
    assert router.states.take_served() == {1: [(TOPIC, 1, n)]}


class _Conn:
    """What the fan-out sees of a client connection that may move (workers/handoff.py)."""
    on_move = staticmethod(lambda conn, wid: False)
    move_to = -1
    move_streak = 0
    move_session = 0
    fetched_from = __import__("workers.connection", fromlist=["Connection"]).Connection.fetched_from


def test_consumer_fetches_of_one_other_workers_partitions_count_to_move(broker):
    """Each consumer Fetch that reads only worker 1's partitions adds to the
    connection's streak, with the partitions and the fetch session it read (an
    incremental one counts by its session's partitions); one that reads this worker's,
    both workers', or for a follower ends it. A connection that may not move is not
    counted."""
    router = FakeRouter(broker)
    conn = _Conn()
    c = ctx(1, 11)
    c.connection = conn

    def fetch(req):
        answer = fan_out(router, c, req, never)
        if asyncio.isfuture(answer) or asyncio.iscoroutine(answer):
            asyncio.ensure_future(answer).cancel()

    async def run():
        remote = fetch_req(0, 0, index=1)
        for n in (1, 2, 3):
            fetch(remote)
            assert (conn.move_to, conn.move_streak) == (1, n * FETCH_WEIGHT)
            assert conn.move_keys == [(TOPIC, 1)] and conn.move_session == 0
        for other in (fetch_req(0, 0, index=0), two_partitions(), {**remote, "replica_id": 3}):
            fetch(remote)
            assert conn.move_streak >= 1
            fetch(other)
            assert conn.move_streak == 0, other
        fetch({**remote, "session_epoch": 0})           # a new session of partition 1
        sid = conn.move_session
        assert sid and conn.move_streak == FETCH_WEIGHT
        fetch({**remote, "session_id": sid, "session_epoch": 1,
               "topics": []})                           # incremental: names nothing
        assert conn.move_streak == 2 * FETCH_WEIGHT and conn.move_keys == [(TOPIC, 1)]
        assert conn.move_session == sid
        conn.on_move = None
        for _ in range(3):
            fetch(remote)
        assert conn.move_streak == 2 * FETCH_WEIGHT
    asyncio.run(run())
