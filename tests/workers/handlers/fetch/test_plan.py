"""workers/handlers/fetch/plan.py: the request's partitions, a plan's reads and
response, one worker's share (`PartPlan`) and parking a plan (`park`)."""
from __future__ import annotations

import asyncio
import types

import pytest

from mpbroker.protocol.errors import ErrorCode
from storage.batch import BatchBuilder
from tests.workers.test_txn_fetch import TOPIC, MiniBroker, ctx, fetch_req, produce
from workers.fetch_session import CachedPartition, FetchContext
from workers.handlers.fetch.plan import (FetchPlan, PartPlan, park, replica_id,
                                         requested_partitions)

TOPIC_ID = b"\x01" * 16


@pytest.fixture
def broker(tmp_path):
    b = MiniBroker(tmp_path)
    yield b
    b.close()


def cp(index, offset=0, epoch=-1):
    return CachedPartition(TOPIC, TOPIC_ID, index, offset, 1 << 20, current_leader_epoch=epoch)


def test_requested_partitions_names_unknown_topic_ids_and_forgotten(broker):
    broker.topic_name_for_id = lambda tid: TOPIC if tid == TOPIC_ID else None
    req = {"topics": [
        {"topic_id": TOPIC_ID, "partitions": [
            {"partition": 1, "fetch_offset": 5, "partition_max_bytes": 10}]},
        {"topic_id": b"\x02" * 16, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 10}]}],
        "forgotten_topics_data": [{"topic_id": TOPIC_ID, "partitions": [0]}]}
    requested, forgotten, unknown = requested_partitions(broker, req, 13)
    assert [(c.topic, c.partition, c.fetch_offset, c.max_bytes) for c in requested] == \
        [(TOPIC, 1, 5, 10)]
    assert forgotten == [(TOPIC, 0)]
    assert unknown == {b"\x02" * 16: [0]}


def test_replica_id_from_the_field_or_replica_state():
    assert replica_id({"replica_id": 3}) == 3
    assert replica_id({"replica_state": {"replica_id": 2}}) == 2
    assert replica_id({}) == -1


def test_part_plan_answers_its_reads_raw(broker):
    produce(broker, 0, BatchBuilder().append(b"k", b"v").build())
    plan = PartPlan(broker, ctx(1, 11), fetch_req(0, 0), [cp(0), cp(1)])
    results, total, error = plan.read_all()
    assert [c.partition for c, _ in results] == [0, 1] and total > 0 and not error
    assert plan.response(results) == results


def test_an_older_leader_epoch_is_fenced_a_newer_one_unknown(broker):
    broker.partition(TOPIC, 0).leader_epoch = 5
    req = fetch_req(0, 0)
    plan = FetchPlan(broker, ctx(1, 11), req, FetchContext([cp(0, epoch=4), cp(0, epoch=6),
                                                            cp(0, epoch=5)], None, False), {})
    codes = [d["error_code"] for _, d in plan.read_all()[0]]
    assert codes == [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, 0]


def test_a_parked_plan_answers_once_min_bytes_arrived(broker):
    async def run():
        plan = FetchPlan(broker, ctx(1, 11), fetch_req(0, 0, max_wait_ms=5000),
                         FetchContext([cp(0)], None, False), {})
        future, op = park(plan, *plan.read_all()[:2])
        assert not future.done() and len(broker.fetch_purgatory) == 1
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())
        assert future.done() and op.is_completed
        (topic,) = future.result()["responses"]
        assert topic["topic"] == TOPIC and topic["partitions"][0]["records"]
    asyncio.run(run())


def test_a_parked_part_plan_answers_raw(broker):
    async def run():
        plan = PartPlan(broker, ctx(1, 11), fetch_req(0, 0, max_wait_ms=5000), [cp(1)])
        future, op = park(plan, *plan.read_all()[:2])
        op.force_complete()
        ((c, data),) = future.result()
        assert c.partition == 1 and data["records"] == []
    asyncio.run(run())


@pytest.mark.parametrize("isolation", [0, 1])
def test_a_wake_up_keeps_the_answers_of_partitions_whose_state_did_not_move(broker, isolation):
    """A parked plan's second read keeps the first read's answer of a partition whose
    offsets are unchanged, reads the others again, and answers what a read of every
    partition answers."""
    async def run():
        hw = [broker.partition(TOPIC, i).high_watermark for i in (0, 1)]
        plan = PartPlan(broker, ctx(1, 11), fetch_req(0, isolation, max_wait_ms=5000),
                        [cp(0, offset=hw[0]), cp(1, offset=hw[1])])
        first = plan.read_all()[0]
        future, op = park(plan, first, 0)
        produce(broker, 1, BatchBuilder().append(b"k", b"v").build())
        assert future.done() and op.results is None     # completed: nothing kept
        (a, da), (b, db) = future.result()
        assert da is first[0][1] and db["records"] and db["high_watermark"] == hw[1] + 1
        again = PartPlan(broker, ctx(1, 11), fetch_req(0, isolation),
                         [cp(0, offset=hw[0]), cp(1, offset=hw[1])]).read_all()[0]
        assert [d for _, d in again] == [da, db]
    asyncio.run(run())


def test_partitions_that_changed_before_any_check_are_all_read_again(broker):
    """Two partitions written before either is checked (as WriteTxnMarkers does): the
    check of the first completes the Fetch, whose answer carries both."""
    async def run():
        plan = PartPlan(broker, ctx(1, 11), fetch_req(0, 0, max_wait_ms=5000), [cp(0), cp(1)])
        future, _ = park(plan, *plan.read_all()[:2])
        for i in (0, 1):
            broker.partition(TOPIC, i).append(
                memoryview(bytearray(BatchBuilder().append(b"k", b"v").build())))
        broker.fetch_purgatory.check_and_complete((TOPIC, 0))
        assert [bool(d["records"]) for _, d in future.result()] == [True, True]
    asyncio.run(run())


def test_a_moved_log_start_or_leader_epoch_is_read_again(broker):
    async def run():
        p0 = broker.partition(TOPIC, 0)
        plan = PartPlan(broker, ctx(1, 11), fetch_req(0, 0), [cp(0, epoch=p0.leader_epoch),
                                                              cp(1)])
        first = plan.read_all()[0]
        assert plan.read_again(first) == (first, 0, False)     # nothing moved
        p0.leader_epoch += 1
        again, _, _ = plan.read_again(first)
        assert again[0][1]["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
        assert again[1][1] is first[1][1]
    asyncio.run(run())


def test_after_records_were_found_a_wake_up_reads_everything(broker):
    async def run():
        produce(broker, 0, BatchBuilder().append(b"k", b"v").build())
        plan = PartPlan(broker, ctx(1, 11), fetch_req(0, 0), [cp(0), cp(1)])
        found, total, _ = plan.read_all()      # records, below min_bytes: all read again
        _, op = park(plan, found, total)
        assert total > 0 and op.results is None
        op.force_complete()
    asyncio.run(run())


def test_plan_of_a_follower_reads_by_replica_id(broker):
    plan = FetchPlan(broker, types.SimpleNamespace(api_version=11),
                     {**fetch_req(0, 0), "replica_id": 7}, FetchContext([cp(0)], None, False), {})
    assert plan.replica_id == 7


@pytest.mark.parametrize("isolation", [0, 1])
def test_a_caught_up_consumer_reads_as_the_full_path_answers(broker, isolation):
    produce(broker, 0, BatchBuilder().append(b"k", b"v").build())
    hw = broker.partition(TOPIC, 0).high_watermark
    cps = lambda: [cp(0, offset=hw), cp(1), cp(0, offset=0), cp(0, offset=hw, epoch=0)]  # noqa: E731

    def reads(version):
        plan = FetchPlan(broker, ctx(1, version), fetch_req(0, isolation),
                         FetchContext(cps(), None, False), {})
        return [(c.partition, d) for c, d in plan.read_all()[0]]
    # v11: the caught-up shortcut; v9: every partition through the full read
    fast, full = reads(11), reads(9)
    assert fast[0] == full[0] and fast[1] == full[1] and fast[3] == full[3]
    assert fast[0][1]["records"] == [] and fast[0][1]["high_watermark"] == hw
    assert fast[2][1]["records"]           # behind: read from the log


def test_requested_partitions_carry_every_field_of_the_request(broker):
    req = {"topics": [{"topic": TOPIC, "partitions": [
        {"partition": 1, "fetch_offset": 5, "partition_max_bytes": 10, "log_start_offset": 2,
         "current_leader_epoch": 3, "last_fetched_epoch": 4},
        {"partition": 0, "fetch_offset": 6, "partition_max_bytes": 11}]}]}
    (a, b), _, _ = requested_partitions(broker, req, 12)
    assert (a.topic, a.topic_id, a.partition, a.fetch_offset, a.max_bytes, a.log_start_offset,
            a.current_leader_epoch, a.last_fetched_epoch) == (TOPIC, TOPIC_ID, 1, 5, 10, 2, 3, 4)
    assert (b.log_start_offset, b.current_leader_epoch, b.last_fetched_epoch) == (-1, -1, -1)
    for c in (a, b):        # what the session remembers starts unknown
        assert (c.last_high_watermark, c.last_stable_offset, c.last_log_start_offset) == \
            (-1, -1, -1)


def test_a_sessionless_response_carries_every_partition_by_topic_in_order(broker):
    cps = [cp(1), cp(0)]
    plan = FetchPlan(broker, ctx(1, 12), fetch_req(0, 0), FetchContext(cps, None, False), {})
    resp = plan.response(plan.read_all()[0])
    (topic,) = resp["responses"]
    assert topic["topic"] == TOPIC and [p["partition_index"] for p in topic["partitions"]] == [1, 0]
    assert resp["session_id"] == 0
    assert all(c.last_high_watermark == -1 for c in cps)    # nothing kept: no session


def test_a_session_response_remembers_what_it_answered(broker):
    session = types.SimpleNamespace(session_id=7, partitions={})
    cps = [cp(0)]
    plan = FetchPlan(broker, ctx(1, 12), fetch_req(0, 0), FetchContext(cps, session, False), {})
    resp = plan.response(plan.read_all()[0])
    assert resp["session_id"] == 7 and len(resp["responses"][0]["partitions"]) == 1
    assert cps[0].last_high_watermark == 0 and cps[0].last_stable_offset == 0


def test_the_brokers_fetch_max_bytes_caps_what_a_request_asks_for(broker):
    for i in (0, 1):
        produce(broker, i, BatchBuilder().append(b"k", b"v" * 600).build())
    req = {**fetch_req(0, 0), "min_bytes": 4096, "topics": [{"topic": TOPIC, "partitions": [
        {"partition": i, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for i in (0, 1)]}]}

    def read():
        plan = FetchPlan(broker, ctx(1, 11), req, FetchContext([cp(0), cp(1)], None, False), {})
        return plan, plan.read_all()
    plan, (_, total, _) = read()
    assert (plan.max_bytes, plan.min_bytes, total > 1024) == (1 << 20, 4096, True)
    broker.config["fetch.max.bytes"] = 1024       # KIP-541: the broker's cap wins, min_bytes too
    plan, (results, total, _) = read()
    assert (plan.max_bytes, plan.min_bytes) == (1024, 1024)
    assert results[0][1]["records"] and total <= 1024
