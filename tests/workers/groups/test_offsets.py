"""OffsetCommit / OffsetFetch / TxnOffsetCommit / expiry (workers/groups/offsets.py)."""

import pytest

from workers.groups import errors
from workers.groups import records as rec

from .harness import (
    Box, commit, commit_errors, fetch, form_group, join, leave, make, protocols)

HOUR_MS = 60 * 60 * 1000


def test_member_commits_and_fetches():
    coord, clock, sched, app = make()
    (a, b), gen = form_group(coord, sched, 2)
    box = commit(coord, "g", {("t", 0): 10, ("t", 1): 11, ("u", 0): 5},
                 generation=gen, member_id=a, leader_epoch=3, metadata="md")
    assert commit_errors(box) == {("t", 0): 0, ("t", 1): 0, ("u", 0): 0}
    assert box.value["throttle_time_ms"] == 0
    top, got = fetch(coord, "g", [("t", 0), ("t", 1), ("t", 9)])
    assert top == 0
    assert got == {("t", 0): (10, 3, "md", 0), ("t", 1): (11, 3, "md", 0), ("t", 9): (-1, -1, "", 0)}
    # all partitions (topics null, v2+), in v8 multi-group form too
    assert set(fetch(coord, "g", None)[1]) == {("t", 0), ("t", 1), ("u", 0)}
    assert fetch(coord, "g", None, version=8)[1][("u", 0)] == (5, 3, "md", 0)
    # the records are Kafka's: key v1, value v3 with the leader epoch
    key, value = app.log()[-1]
    assert rec.decode_key(key) == rec.OffsetCommitKey("g", "u", 0)
    assert value[:2] == b"\x00\x03"
    assert rec.decode_offset_commit_value(value) == rec.OffsetCommitValue(5, "md", clock(), 3)


def test_fetch_version_shapes():
    coord, _, sched, _ = make()
    commit(coord, "g", {("t", 0): 7}, leader_epoch=2)
    box = Box()
    coord.offset_fetch({"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}, 1, box)
    assert box.value == {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 7, "metadata": "", "error_code": 0}]}]}
    box = Box()
    coord.offset_fetch({"group_id": "g", "topics": None}, 5, box)
    assert box.value["error_code"] == 0 and box.value["throttle_time_ms"] == 0
    assert box.value["topics"][0]["partitions"][0]["committed_leader_epoch"] == 2


def test_fetch_unknown_group_returns_no_offsets():
    coord, *_ = make()
    assert fetch(coord, "none", [("t", 0)]) == (0, {("t", 0): (-1, -1, "", 0)})
    assert fetch(coord, "none", None) == (0, {})


def test_simple_consumer_commit_only_when_group_empty_or_absent():
    coord, _, sched, _ = make()
    assert commit_errors(commit(coord, "simple", {("t", 0): 1})) == {("t", 0): 0}
    assert coord.groups["simple"].protocol_type is None
    (a, b), gen = form_group(coord, sched, 2)
    assert commit_errors(commit(coord, "g", {("t", 0): 1})) == {("t", 0): errors.UNKNOWN_MEMBER_ID}


def test_commit_generation_checks():
    coord, _, sched, _ = make()
    # a generation for a group the coordinator does not know
    assert commit_errors(commit(coord, "x", {("t", 0): 1}, generation=3, member_id="m")) == {
        ("t", 0): errors.ILLEGAL_GENERATION}
    assert commit_errors(commit(coord, "x", {("t", 0): 1}, generation=3, member_id="m", version=9)) == {
        ("t", 0): errors.GROUP_ID_NOT_FOUND}
    (a, b), gen = form_group(coord, sched, 2)
    assert commit_errors(commit(coord, "g", {("t", 0): 1}, generation=gen + 1, member_id=a)) == {
        ("t", 0): errors.ILLEGAL_GENERATION}
    assert commit_errors(commit(coord, "g", {("t", 0): 1}, generation=gen, member_id="zz")) == {
        ("t", 0): errors.UNKNOWN_MEMBER_ID}


def test_commit_during_rebalance():
    coord, _, sched, _ = make()
    (a, b), gen = form_group(coord, sched, 2)
    join(coord, member_id=a, protos=protocols("t", "v"))  # PreparingRebalance
    # still allowed while preparing: the heartbeat tells the member to rejoin
    assert commit_errors(commit(coord, "g", {("t", 0): 1}, generation=gen, member_id=b)) == {("t", 0): 0}
    join(coord, member_id=b)
    assert coord.groups["g"].state == "CompletingRebalance"
    assert commit_errors(commit(coord, "g", {("t", 0): 2}, generation=gen + 1, member_id=b)) == {
        ("t", 0): errors.REBALANCE_IN_PROGRESS}


def test_offset_metadata_too_large():
    coord, *_ = make()  # offset.metadata.max.bytes = 32
    big = "x" * 33
    assert commit_errors(commit(coord, "g", {("t", 0): 1}, metadata=big)) == {
        ("t", 0): errors.OFFSET_METADATA_TOO_LARGE}
    box = Box()
    coord.offset_commit({"group_id": "g", "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 1, "committed_metadata": big},
        {"partition_index": 1, "committed_offset": 2, "committed_metadata": None}]}]}, 2, box)
    assert commit_errors(box) == {("t", 0): errors.OFFSET_METADATA_TOO_LARGE, ("t", 1): 0}
    assert fetch(coord, "g", [("t", 0), ("t", 1)])[1] == {("t", 0): (-1, -1, "", 0), ("t", 1): (2, -1, "", 0)}


@pytest.mark.parametrize("append_error,expected", [
    (errors.NOT_ENOUGH_REPLICAS, errors.COORDINATOR_NOT_AVAILABLE),
    (errors.UNKNOWN_TOPIC_OR_PARTITION, errors.COORDINATOR_NOT_AVAILABLE),
    (errors.NOT_LEADER_OR_FOLLOWER, errors.NOT_COORDINATOR),
    (errors.KAFKA_STORAGE_ERROR, errors.NOT_COORDINATOR),
    (errors.MESSAGE_TOO_LARGE, errors.INVALID_COMMIT_OFFSET_SIZE),
])
def test_appender_failure_maps_errors(append_error, expected):
    coord, _, _, app = make()
    app.error = append_error
    assert commit_errors(commit(coord, "g", {("t", 0): 1})) == {("t", 0): expected}
    assert fetch(coord, "g", [("t", 0)])[1][("t", 0)] == (-1, -1, "", 0)  # nothing committed


def test_require_stable_reports_pending_commit():
    coord, _, _, app = make()
    commit(coord, "g", {("t", 0): 1})
    app.hold = True
    box = commit(coord, "g", {("t", 0): 2})
    assert not box.done
    assert fetch(coord, "g", [("t", 0)], require_stable=True)[1][("t", 0)][3] == errors.UNSTABLE_OFFSET_COMMIT
    assert fetch(coord, "g", [("t", 0)])[1][("t", 0)][0] == 1
    app.release()
    assert commit_errors(box) == {("t", 0): 0}
    assert fetch(coord, "g", [("t", 0)], require_stable=True)[1][("t", 0)][:2] == (2, -1)


def test_commit_timestamp_v1_and_retention_v2():
    coord, clock, _, app = make()
    box = Box()
    coord.offset_commit({"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                         "topics": [{"name": "t", "partitions": [
                             {"partition_index": 0, "committed_offset": 4, "commit_timestamp": 1234,
                              "committed_metadata": ""}]}]}, 1, box)
    assert rec.decode_offset_commit_value(app.log()[-1][1]).commit_timestamp == 1234
    commit(coord, "g", {("t", 1): 5}, version=2, retention_ms=1000)
    v = rec.decode_offset_commit_value(app.log()[-1][1])
    assert app.log()[-1][1][:2] == b"\x00\x01" and v.expire_timestamp == clock() + 1000


def keep_alive(coord, sched, members, generation, ms, step=5000):
    for _ in range(ms // step):
        sched.advance(step)
        for m in members:
            coord.heartbeat({"group_id": "g", "generation_id": generation, "member_id": m},
                            1, lambda r: None)


def test_expiry_of_simple_consumer_offsets():
    coord, clock, sched, app = make({"offsets.retention.check.interval.ms": 10 * HOUR_MS})
    commit(coord, "simple", {("t", 0): 1})
    sched.advance(HOUR_MS - 1)
    assert coord.expire_offsets() == 0
    sched.advance(1)
    assert coord.expire_offsets() == 1
    # the group had only offsets: it is gone, with an offset tombstone and no group tombstone
    assert "simple" not in coord.groups
    assert app.log()[-1] == (rec.encode_offset_commit_key("simple", "t", 0), None)


def test_periodic_expiry_runs_on_the_scheduler():
    coord, clock, sched, app = make({"offsets.retention.check.interval.ms": 60_000})
    commit(coord, "simple", {("t", 0): 1})
    sched.advance(HOUR_MS - 1)
    assert "simple" in coord.groups
    sched.advance(60_000)
    assert "simple" not in coord.groups


def test_expiry_counts_from_when_group_became_empty():
    coord, clock, sched, app = make({"offsets.retention.check.interval.ms": 60_000})
    (a, b), gen = form_group(coord, sched, 2)
    commit(coord, "g", {("t", 0): 1}, generation=gen, member_id=a)
    keep_alive(coord, sched, (a, b), gen, 40 * 60 * 1000)
    leave(coord, "g", a, b)
    assert coord.groups["g"].state == "Empty"  # the now empty rebalance completes at once
    sched.advance(30 * 60 * 1000)  # 70 min after the commit, 30 min after emptying
    assert fetch(coord, "g", [("t", 0)])[1][("t", 0)][0] == 1
    sched.advance(31 * 60 * 1000)  # the periodic check runs every minute
    assert "g" not in coord.groups
    tombstones = [k for k, v in app.log()[-2:] if v is None]
    assert tombstones == [rec.encode_offset_commit_key("g", "t", 0), rec.encode_group_metadata_key("g")]


def test_expiry_keeps_subscribed_topics_of_stable_group():
    coord, clock, sched, _ = make({"offsets.retention.check.interval.ms": 10 * HOUR_MS})
    (a, b), gen = form_group(coord, sched, 2, topics=("t",))
    commit(coord, "g", {("t", 0): 1, ("old", 0): 9}, generation=gen, member_id=a)
    keep_alive(coord, sched, (a, b), gen, HOUR_MS + 5000)
    assert coord.groups["g"].state == "Stable"
    assert coord.expire_offsets() == 1
    assert set(coord.groups["g"].offsets) == {("t", 0)}


def test_txn_offsets_materialise_on_commit_marker():
    coord, _, _, app = make()
    box = Box()
    req = {"transactional_id": "tx", "group_id": "g", "producer_id": 77, "producer_epoch": 1,
           "generation_id": -1, "member_id": "", "group_instance_id": None,
           "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 50,
                                                     "committed_leader_epoch": -1,
                                                     "committed_metadata": ""}]}]}
    coord.txn_offset_commit(req, 3, box)
    assert box.value == {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0}]}]}
    assert app.batches[-1][1] == {"producer_id": 77, "producer_epoch": 1}
    assert fetch(coord, "g", [("t", 0)])[1][("t", 0)][0] == -1
    assert fetch(coord, "g", [("t", 0)], require_stable=True)[1][("t", 0)][3] == errors.UNSTABLE_OFFSET_COMMIT
    coord.complete_txn(77, committed=True)
    assert fetch(coord, "g", [("t", 0)])[1][("t", 0)][0] == 50
    # an aborted transaction leaves the committed offset alone
    req["topics"][0]["partitions"][0]["committed_offset"] = 60
    coord.txn_offset_commit(req, 3, Box())
    coord.complete_txn(77, committed=False)
    assert fetch(coord, "g", [("t", 0)], require_stable=True)[1][("t", 0)][:2] == (50, -1)
