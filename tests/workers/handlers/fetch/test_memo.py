"""A connection's memory of its last sessionless Fetch (workers/handlers/fetch/memo.py):
the same answers as a Fetch served without it, from reads of what changed only."""
from __future__ import annotations

import asyncio
import types

import pytest

from storage.batch import BatchBuilder
from storage.log import Log, LogConfig
from tests.workers.test_txn_fetch import TOPIC, MiniBroker, produce, txn_batch
from workers.handlers import write_txn_markers
from workers.handlers.fetch import handle
from workers.handlers.fetch.memo import FetchMemo
from workers.partition import Partition

N = 8
VERSION = 12


@pytest.fixture
def broker(tmp_path):
    b = MiniBroker(tmp_path, partitions=N)
    yield b
    b.close()


def conn():
    return types.SimpleNamespace(fetch_memo=None)


def context(connection, version=VERSION):
    return types.SimpleNamespace(api_key=1, api_version=version, connection=connection)


def request(offsets, max_wait_ms=0, isolation=0, min_bytes=1, partitions=None):
    """A librdkafka-like sessionless Fetch of `partitions` (default: all) at `offsets`."""
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": isolation, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": i, "current_leader_epoch": -1, "fetch_offset": offsets[i],
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}
                for i in (range(N) if partitions is None else partitions)]}]}


def batch(value=b"v"):
    return BatchBuilder().append(b"k", value).build()


def plain(resp):
    """A response with records as (position, length) pairs: comparable across reads."""
    out = []
    for t in resp["responses"]:
        for p in t["partitions"]:
            p = dict(p)
            p["records"] = [(s.position, s.length) for s in p["records"]]
            out.append(p)
    return out


def next_offsets(offsets, resp):
    """The offsets a consumer fetches from next: past each partition's last record."""
    offsets = dict(offsets)
    for p in resp["responses"][0]["partitions"]:
        if p["records"]:
            offsets[p["partition_index"]] = p["high_watermark"]
    return offsets


def parked(broker, c, offsets, max_wait_ms, **kw):
    """A Fetch that parks on the memo its connection's first Fetch made (at min_bytes
    1 on no watch list; a larger one as a DelayedFetch on every partition)."""
    handle(broker, context(c), request(offsets, **kw))      # the memo: every partition read
    fut = handle(broker, context(c), request(offsets, max_wait_ms=max_wait_ms, **kw))
    assert not fut.done() and c.fetch_memo.busy
    if kw.get("min_bytes", 1) <= 1:
        assert c.fetch_memo.parked is not None and broker.fetch_purgatory.watched() == 0
    else:
        assert c.fetch_memo.parked is None and broker.fetch_purgatory.watched() == N
    return fut


def with_records_of(parts: list) -> list:
    """The indexes of the partition answers that carry records, in answer order."""
    return [p["partition_index"] for p in parts if p["records"]]


def with_records(resp) -> list:
    """`with_records_of` a one-topic response."""
    return with_records_of(resp["responses"][0]["partitions"])


class Lookups:
    """Counts the broker's partition lookups (what a read costs per partition)."""

    def __init__(self, broker):
        self.n = 0
        real = broker.partition

        def counted(topic, index):
            self.n += 1
            return real(topic, index)
        broker.partition = counted


def test_the_same_answers_as_without_a_memo_while_records_arrive(broker):
    """Fetch after Fetch, with appends between them: a memo's connection gets exactly
    the answers a connection without one gets."""
    c = conn()
    offsets = {i: 0 for i in range(N)}
    for step in range(12):
        for i in (step % N, (step * 3) % N):
            if step % 4:
                produce(broker, i, batch(b"x" * step))
        with_memo = handle(broker, context(c), request(offsets))
        without = handle(broker, context(None), request(offsets))
        assert plain(with_memo) == plain(without)
        offsets = next_offsets(offsets, with_memo)
    assert isinstance(c.fetch_memo, FetchMemo)


def test_a_caught_up_fetch_reads_only_the_partitions_that_changed(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}
    handle(broker, context(c), request(offsets))         # the first read: every partition
    lookups = Lookups(broker)
    resp = handle(broker, context(c), request(offsets))
    assert lookups.n == 0                   # nothing checked since: the answers kept
    assert all(not p["records"] for p in resp["responses"][0]["partitions"])
    produce(broker, 3, batch())
    lookups.n = 0
    resp = handle(broker, context(c), request(offsets))
    assert lookups.n == 1
    assert with_records(resp) == [3]
    lookups.n = 0
    resp = handle(broker, context(c), request(next_offsets(offsets, resp)))
    assert lookups.n == 1                   # the entry that moved, read again
    assert all(not p["records"] for p in resp["responses"][0]["partitions"])
    assert [p["high_watermark"] for p in resp["responses"][0]["partitions"]][3] == 1


def test_a_parked_fetch_waits_on_no_watch_list_and_wakes_with_the_record(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}

    async def run():
        handle(broker, context(c), request(offsets))
        lookups = Lookups(broker)
        fut = handle(broker, context(c), request(offsets, max_wait_ms=60_000))
        assert isinstance(fut, asyncio.Future) and not fut.done()
        assert lookups.n == 0               # nothing changed: nothing read
        assert broker.fetch_purgatory.size == 1 and broker.fetch_purgatory.watched() == 0
        assert c.fetch_memo.busy
        produce(broker, 5, batch())
        await asyncio.sleep(0)         # completed at the next turn
        assert fut.done()
        assert lookups.n == 3               # the append's, the wake-up's, the read of 5
        assert broker.fetch_purgatory.size == 0
        return fut.result()
    resp = asyncio.run(run())
    parts = resp["responses"][0]["partitions"]
    assert with_records_of(parts) == [5]
    assert len(parts) == N and not c.fetch_memo.busy


def test_a_parked_fetch_answers_at_its_max_wait(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}

    async def run():
        fut = parked(broker, c, offsets, 100)
        broker.clock_ms += 200
        broker.timer.advance_clock(broker.clock_ms)
        assert fut.done()
        return fut.result()
    resp = asyncio.run(run())
    assert plain(resp) == plain(handle(broker, context(None), request(offsets)))


def test_a_check_without_bytes_keeps_it_parked_and_its_answer_is_read_again(broker):
    """A log start that moved (DeleteRecords, retention) is checked: no byte to wake
    a parked Fetch, but its answer is not kept."""
    c = conn()
    for _ in range(3):
        produce(broker, 2, batch())
    offsets = {i: (3 if i == 2 else 0) for i in range(N)}

    async def run():
        fut = parked(broker, c, offsets, 100)
        p = broker.partition(TOPIC, 2)
        p.delete_records_before(2)
        broker.fetch_purgatory.check_and_complete(p.key)
        assert not fut.done()
        broker.clock_ms += 200
        broker.timer.advance_clock(broker.clock_ms)
        return fut.result()
    resp = asyncio.run(run())
    assert resp["responses"][0]["partitions"][2]["log_start_offset"] == 2
    assert plain(resp) == plain(handle(broker, context(None), request(offsets)))


def test_read_committed_wakes_when_the_lso_moves_not_before(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}

    async def run():
        fut = parked(broker, c, offsets, 60_000, isolation=1)
        produce(broker, 1, txn_batch(7, 0, b"open"))         # below no LSO yet
        assert not fut.done()
        write_txn_markers.apply_markers(broker, [{
            "producer_id": 7, "producer_epoch": 0, "transaction_result": True,
            "topics": [{"name": TOPIC, "partition_indexes": [1]}], "coordinator_epoch": 0}])
        await asyncio.sleep(0)         # completed at the next turn
        assert fut.done()
        return fut.result()
    resp = asyncio.run(run())
    assert plain(resp) == plain(handle(broker, context(None), request(offsets, isolation=1)))
    assert resp["responses"][0]["partitions"][1]["records"]


def test_a_partition_that_goes_away_is_answered_with_its_error(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}

    async def run():
        fut = parked(broker, c, offsets, 60_000)
        broker.partitions.pop((TOPIC, 4))
        broker.fetch_purgatory.check_and_complete((TOPIC, 4))
        await asyncio.sleep(0)         # completed at the next turn
        assert fut.done()
        return fut.result()
    resp = asyncio.run(run())
    assert resp["responses"][0]["partitions"][4]["error_code"] == 3
    # and the next Fetch reads it again: not kept as it was
    again = handle(broker, context(c), request(offsets))
    assert again["responses"][0]["partitions"][4]["error_code"] == 3


def test_a_larger_min_bytes_parks_as_any_fetch_and_reads_through_the_memo(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}

    async def run():
        fut = parked(broker, c, offsets, 60_000, min_bytes=200)
        assert broker.fetch_purgatory.watched() == N        # a DelayedFetch
        produce(broker, 6, batch(b"a"))
        await asyncio.sleep(0)
        assert not fut.done()                               # under min_bytes
        produce(broker, 0, batch(b"b" * 300))
        resp = await fut
        await asyncio.sleep(0)
        return resp
    resp = asyncio.run(run())
    assert with_records(resp) == [0, 6]
    assert not c.fetch_memo.busy
    assert plain(resp) == plain(handle(broker, context(None), request(offsets)))


def test_another_shape_starts_a_new_memo_and_the_old_stops_listening(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}
    handle(broker, context(c), request(offsets))
    first = c.fetch_memo
    assert broker.fetch_purgatory.listening((TOPIC, 7)) == 1
    resp = handle(broker, context(c), request(offsets, partitions=[0, 1, 2]))
    assert c.fetch_memo is not first and len(c.fetch_memo.cps) == 3
    assert broker.fetch_purgatory.listening((TOPIC, 7)) == 0
    assert broker.fetch_purgatory.listening((TOPIC, 1)) == 1
    assert len(resp["responses"][0]["partitions"]) == 3
    # another isolation level is another shape too
    handle(broker, context(c), request(offsets, isolation=1, partitions=[0, 1, 2]))
    assert c.fetch_memo.isolation_level == 1


def test_a_fetch_pipelined_behind_a_parked_one_is_served_without_the_memo(broker):
    c = conn()
    first = {i: 0 for i in range(N)}

    async def run():
        offsets = first
        handle(broker, context(c), request(offsets))
        memo = c.fetch_memo
        parked = handle(broker, context(c), request(offsets, max_wait_ms=60_000))
        produce(broker, 2, batch())
        await asyncio.sleep(0)         # completed at the next turn
        assert parked.done() and not memo.busy
        offsets = next_offsets(first, parked.result())
        parked = handle(broker, context(c), request(offsets, max_wait_ms=60_000))
        assert not parked.done() and memo.busy
        lookups = Lookups(broker)
        behind = handle(broker, context(c), request(offsets))
        assert lookups.n == N               # read whole, not through the memo
        assert c.fetch_memo is memo and memo.busy
        assert plain(behind) == plain(handle(broker, context(None), request(offsets)))
        produce(broker, 3, batch())
        await asyncio.sleep(0)         # completed at the next turn
        assert parked.done() and not memo.busy
        return parked.result()
    resp = asyncio.run(run())
    assert with_records(resp) == [3]


def test_a_closed_connection_forgets_its_memo(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}

    async def run():
        fut = parked(broker, c, offsets, 60_000)
        c.fetch_memo.forget()           # what Connection._close does
        assert fut.cancelled()
        assert broker.fetch_purgatory.size == 0
        assert all(broker.fetch_purgatory.listening((TOPIC, i)) == 0 for i in range(N))
        produce(broker, 0, batch())     # nothing listens: nothing breaks
    asyncio.run(run())


def test_sessions_followers_and_old_versions_are_served_without_a_memo(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}
    handle(broker, context(c), {**request(offsets), "session_epoch": 0})
    assert c.fetch_memo is None
    handle(broker, context(c), {**request(offsets), "replica_id": 1})
    assert c.fetch_memo is None
    old = request(offsets)
    for p in old["topics"][0]["partitions"]:
        del p["last_fetched_epoch"]
    handle(broker, context(c, 9), old)
    assert c.fetch_memo is None
    handle(broker, context(c, 11), old)
    assert c.fetch_memo is not None


def test_a_partition_named_twice_is_not_remembered(broker):
    c = conn()
    req = request({i: 0 for i in range(N)})
    req["topics"][0]["partitions"].append(dict(req["topics"][0]["partitions"][0]))
    resp = handle(broker, context(c), req)
    assert len(resp["responses"][0]["partitions"]) == N + 1
    assert plain(resp) == plain(handle(broker, context(None), req))
    assert c.fetch_memo.forgotten and broker.fetch_purgatory.listening((TOPIC, 0)) == 0
    handle(broker, context(c), request({i: 0 for i in range(N)}))
    assert not c.fetch_memo.forgotten       # the next Fetch starts afresh

    async def run():        # parked, it waits as any Fetch and is answered
        twice = dict(req, max_wait_ms=60_000)
        fut = handle(broker, context(conn()), twice)
        assert broker.fetch_purgatory.watched() == N
        produce(broker, 5, batch())
        await asyncio.sleep(0)
        return await fut
    parts = asyncio.run(run())["responses"][0]["partitions"]
    assert with_records_of(parts) == [5]


def rotated(offsets, start):
    """librdkafka's next Fetch: the same partitions, its list rotated to `start`."""
    return request(offsets, partitions=[(start + i) % N for i in range(N)])


def test_a_rotated_request_keeps_the_memo_and_is_answered_in_its_order(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}
    handle(broker, context(c), request(offsets))
    memo = c.fetch_memo
    for start in (1, 5, 0, 7):
        produce(broker, start, batch())
        lookups = Lookups(broker)
        resp = handle(broker, context(c), rotated(offsets, start))
        assert c.fetch_memo is memo
        assert lookups.n == 1               # the partition appended to, only
        parts = resp["responses"][0]["partitions"]
        assert [p["partition_index"] for p in parts] == [(start + i) % N for i in range(N)]
        assert plain(resp) == plain(handle(broker, context(None), rotated(offsets, start)))
        offsets = next_offsets(offsets, resp)
        # the entry that moved is read again, wherever it now stands
        lookups.n = 0
        resp = handle(broker, context(c), rotated(offsets, (start + 3) % N))
        assert lookups.n == 1 and c.fetch_memo is memo
        assert plain(resp) == plain(handle(broker, context(None),
                                           rotated(offsets, (start + 3) % N)))


def test_any_order_of_the_same_partitions_keeps_the_memo(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}
    handle(broker, context(c), request(offsets))
    memo = c.fetch_memo
    shuffled = [3, 0, 7, 1, 6, 2, 5, 4]
    produce(broker, 6, batch())
    offsets[2] = 0
    resp = handle(broker, context(c), request(offsets, partitions=shuffled))
    assert c.fetch_memo is memo
    assert [p["partition_index"] for p in resp["responses"][0]["partitions"]] == shuffled
    assert plain(resp) == plain(handle(broker, context(None),
                                       request(offsets, partitions=shuffled)))
    # a partition left out, or one more, is another request: a new memo
    handle(broker, context(c), request(offsets, partitions=shuffled[:-1]))
    assert c.fetch_memo is not memo


def test_a_parked_fetch_in_another_order_wakes_with_its_partition(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}

    async def run():
        handle(broker, context(c), request(offsets))
        fut = handle(broker, context(c), rotated(offsets, 6) | {"max_wait_ms": 60_000})
        produce(broker, 2, batch())
        await asyncio.sleep(0)         # completed at the next turn
        assert fut.done()
        return fut.result()
    resp = asyncio.run(run())
    parts = resp["responses"][0]["partitions"]
    assert parts[0]["partition_index"] == 6
    assert with_records_of(parts) == [2]


def test_a_larger_min_bytes_fetch_woken_after_its_connection_closed_listens_no_more(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}

    async def run():
        fut = parked(broker, c, offsets, 60_000, min_bytes=10)
        c.fetch_memo.forget()           # what Connection._close does
        produce(broker, 1, batch(b"z" * 50))
        assert fut.done()               # answered (nobody reads it), from a plain read
        assert all(broker.fetch_purgatory.listening((TOPIC, i)) == 0 for i in range(N))
    asyncio.run(run())


def test_a_partition_the_bytes_ran_out_for_is_read_again_not_kept(broker):
    """An answer without records because the request's max_bytes ran out (not because
    the partition has none) is not a caught-up one: the next Fetch reads it again."""
    produce(broker, 0, batch(b"a" * 600))
    produce(broker, 1, batch(b"b" * 600))
    c = conn()
    offsets = {i: 0 for i in range(N)}
    req = request(offsets)
    req["max_bytes"] = 700          # room for partition 0's batch only
    first = handle(broker, context(c), req)
    parts = first["responses"][0]["partitions"]
    assert parts[0]["records"] and not parts[1]["records"] and parts[1]["high_watermark"] == 1
    offsets = next_offsets(offsets, {"responses": [{"partitions": parts[:1]}]})
    req = request(offsets)
    req["max_bytes"] = 700
    second = handle(broker, context(c), req)
    assert c.fetch_memo is not None
    assert with_records(second) == [1]


def test_a_wake_up_answers_every_partition_the_same_step_changed(broker):
    """A step that changes two partitions, then checks them one after the other (a
    transaction's markers, a metadata update): the Fetch woken by the first check
    completes after the step, and reads both."""
    c = conn()
    offsets = {i: 0 for i in range(N)}

    async def run():
        fut = parked(broker, c, offsets, 60_000)
        a, b = broker.partition(TOPIC, 2), broker.partition(TOPIC, 6)
        for p in (a, b):
            p.append(memoryview(bytearray(batch())))
        broker.fetch_purgatory.check_and_complete(a.key)
        assert not fut.done()
        broker.fetch_purgatory.check_and_complete(b.key)
        await asyncio.sleep(0)
        assert fut.done()
        return fut.result()
    resp = asyncio.run(run())
    assert with_records(resp) == [2, 6]


def add_topic(broker, tmp_path, name, partitions, topic_id):
    for i in range(partitions):
        log = Log.open(str(tmp_path / f"{name}-{i}"), LogConfig())
        broker.partitions[(name, i)] = Partition(name, i, topic_id, log)
    broker.metadata.topics[name] = types.SimpleNamespace(
        topic_id=topic_id, partitions={i: None for i in range(partitions)})


def topics_request(named):
    """A Fetch of {topic: [partitions]} at offset 0, topics in the given order."""
    req = request({i: 0 for i in range(N)}, partitions=[])
    req["topics"] = [{"topic": t, "partitions": [
        {"partition": i, "current_leader_epoch": -1, "fetch_offset": 0,
         "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
        for i in parts]} for t, parts in named]
    return req


def test_a_memo_of_two_topics_is_not_taken_for_one_topics_partitions(broker, tmp_path):
    """Made by a Fetch of t-0 and u-1, the memo is not a Fetch of t-0 and t-1 (the same
    partition numbers, the same entries): t-1 is read."""
    add_topic(broker, tmp_path, "u", 2, b"\x02" * 16)
    c = conn()
    handle(broker, context(c), topics_request([(TOPIC, [0]), ("u", [1])]))
    produce(broker, 1, batch(b"t1"))
    req = topics_request([(TOPIC, [0, 1])])
    resp = handle(broker, context(c), req)
    assert with_records(resp) == [1]
    assert plain(resp) == plain(handle(broker, context(None), req))
    # a Fetch of both topics, a topic twice in it (librdkafka's rotation can split one)
    c = conn()
    handle(broker, context(c), topics_request([(TOPIC, [0, 1]), ("u", [0, 1])]))
    memo = c.fetch_memo
    req = topics_request([(TOPIC, [1]), ("u", [0, 1]), (TOPIC, [0])])
    resp = handle(broker, context(c), req)
    assert c.fetch_memo is memo
    assert plain(resp) == plain(handle(broker, context(None), req))


def test_a_topic_made_again_under_another_id_is_not_the_one_remembered(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}
    handle(broker, context(c), request(offsets))
    first = c.fetch_memo
    broker.metadata.topics[TOPIC].topic_id = b"\x09" * 16
    handle(broker, context(c), request(offsets))
    assert c.fetch_memo is not first and first.forgotten
    assert broker.fetch_purgatory.listening((TOPIC, 0)) == 1


class Failing:
    """broker.partition that raises for one partition while `on`."""

    def __init__(self, broker, index):
        self.on, real = False, broker.partition

        def partition(topic, i):
            if self.on and i == index:
                raise RuntimeError("a bug in a read")
            return real(topic, i)
        broker.partition = partition


def test_a_first_read_that_fails_leaves_no_listener_and_no_memo(broker):
    c = conn()
    failing = Failing(broker, 3)
    failing.on = True
    with pytest.raises(RuntimeError):
        handle(broker, context(c), request({i: 0 for i in range(N)}))
    assert c.fetch_memo is None
    assert all(broker.fetch_purgatory.listening((TOPIC, i)) == 0 for i in range(N))
    failing.on = False
    handle(broker, context(c), request({i: 0 for i in range(N)}))
    assert c.fetch_memo is not None and not c.fetch_memo.busy


def test_a_wake_up_that_fails_answers_the_failure_and_the_memo_goes(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}
    failing = Failing(broker, 3)

    async def run():
        fut = parked(broker, c, offsets, 60_000)
        memo = c.fetch_memo
        produce(broker, 3, batch())
        failing.on = True
        await asyncio.sleep(0)
        failing.on = False
        assert isinstance(fut.exception(), RuntimeError)
        assert memo.forgotten and not memo.busy
        assert all(broker.fetch_purgatory.listening((TOPIC, i)) == 0 for i in range(N))
        resp = handle(broker, context(c), request(offsets))     # afresh
        assert c.fetch_memo is not memo
        return resp
    resp = asyncio.run(run())
    assert with_records(resp) == [3]


def test_a_connection_closed_between_the_wake_up_and_its_turn(broker):
    c = conn()
    offsets = {i: 0 for i in range(N)}

    async def run():
        fut = parked(broker, c, offsets, 100)
        produce(broker, 0, batch())         # due at the next turn
        c.fetch_memo.forget()               # closed first
        assert fut.cancelled() and broker.fetch_purgatory.size == 0
        await asyncio.sleep(0)              # the turn comes: nothing more happens
        broker.clock_ms += 200
        broker.timer.advance_clock(broker.clock_ms)
    asyncio.run(run())
