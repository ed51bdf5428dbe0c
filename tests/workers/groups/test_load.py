"""Loading by replay, the loading window, and unloading."""

from workers.groups import errors
from workers.groups import records as rec
from workers.groups.coordinator import GroupCoordinator, LoadRecord, TxnMarker
from workers.groups.partitioner import coordinator_partition

from .harness import (
    CONFIG, Box, FakeAppender, FakeClock, FakeScheduler, commit, commit_errors, fetch, form_group,
    heartbeat, join, join_new, leave, make, sync)


def snapshot(coord):
    out = {}
    for gid, g in coord.groups.items():
        out[gid] = dict(
            state=g.state, generation=g.generation_id, protocol_type=g.protocol_type,
            protocol=g.protocol_name, leader=g.leader_id,
            # offsets-only groups have no record of their own: their timestamp is the load's
            state_ts=g.state_timestamp_ms if g.protocol_type else None,
            members={m.member_id: (m.group_instance_id, m.client_id, m.client_host,
                                   m.rebalance_timeout_ms, m.session_timeout_ms,
                                   m.metadata(g.protocol_name) if g.protocol_name else None,
                                   m.assignment)
                     for m in g.members.values()},
            static=dict(g.static_members),
            offsets={tp: r.oam for tp, r in g.offsets.items()})
    return out


def test_load_by_replay_equals_state_before():
    coord, clock, sched, app = make()
    (a, b), gen = form_group(coord, sched, 2)
    commit(coord, "g", {("t", 0): 10, ("t", 1): 20}, generation=gen, member_id=a, leader_epoch=4, metadata="x")
    commit(coord, "g", {("t", 0): 11}, generation=gen, member_id=b)
    commit(coord, "simple", {("s", 0): 1, ("s", 1): 2})
    commit(coord, "gone", {("z", 0): 1})
    coord.delete_groups(["gone"])
    coord.offset_delete({"group_id": "simple", "topics": [{"name": "s", "partitions": [{"partition_index": 1}]}]},
                        0, Box())
    st = join(coord, group="static", instance="i-1")
    sched.advance(3000)
    sm = st.value["member_id"]
    sync(coord, "static", sm, 1, [(sm, b"SA")], instance="i-1")
    # an Empty group with a generation: both members left
    form_group(coord, sched, 1, group="left")
    leave(coord, "left", coord.groups["left"].leader_id)
    before = snapshot(coord)
    assert set(before) == {"g", "simple", "static", "left"}
    assert before["left"]["state"] == "Empty" and before["left"]["generation"] == 2

    coord2, clock2, sched2, app2 = make(loaded=False)
    clock2.now_ms = clock.now_ms
    coord2.load(app.log())
    assert snapshot(coord2) == before
    # the loaded members are alive: heartbeats work, and stop-the-world restarts their timers
    sched2.advance(5000)
    assert heartbeat(coord2, "g", a, gen) == errors.NONE
    sched2.advance(5000)
    assert coord2.groups["g"].state == "PreparingRebalance"  # b never heartbeated again


def test_load_in_chunks_and_tombstones(caplog):
    coord, *_ = make(loaded=False)
    k = rec.encode_offset_commit_key
    v = lambda off: rec.encode_offset_commit_value(rec.OffsetCommitValue(off, "", 5))
    coord.begin_load()
    coord.load_records([(k("g", "t", 0), v(1)), (k("g", "t", 1), v(2))])
    assert commit_errors(commit(coord, "g", {("t", 0): 3})) == {("t", 0): errors.COORDINATOR_LOAD_IN_PROGRESS}
    member_key = rec.encode_consumer_group_key(rec.CONSUMER_GROUP_MEMBER_METADATA, "c", "m1")
    assert rec.decode_key(member_key) == rec.ConsumerGroupKey(5, "c", "m1")  # decoded: version 5
    coord.load_records([(k("g", "t", 0), None), (k("g", "t", 1), v(3)),
                        (rec.encode_group_metadata_key("x"), None),
                        (b"\x00\x63" + b"later", b"ignored"),  # key version 99: skipped
                        (member_key, b"\x00\x00garbage")])    # unreadable value: skipped
    coord.finish_load()
    assert "unknown key version 99" in caplog.text
    assert "skipping unreadable record" in caplog.text
    # neither cost anything else: g keeps its offsets, and no group c appears
    assert fetch(coord, "g", None)[1] == {("t", 1): (3, -1, "", 0)}
    assert coord.groups["g"].state == "Empty" and coord.groups["g"].protocol_type is None
    assert set(coord.groups) == {"g"}


def test_load_transactional_offsets():
    coord, *_ = make(loaded=False)
    k = rec.encode_offset_commit_key
    v = lambda off: rec.encode_offset_commit_value(rec.OffsetCommitValue(off, "", 5))
    coord.load([
        LoadRecord(k("g", "t", 0), v(5), producer_id=1, is_transactional=True),
        LoadRecord(k("g", "t", 1), v(6), producer_id=2, is_transactional=True),
        (k("g", "t", 0), v(4)),  # a plain commit after the transactional one: it wins
        TxnMarker(1, commit=True),
        TxnMarker(2, commit=False),
        LoadRecord(k("g", "t", 2), v(7), producer_id=3, is_transactional=True),  # still open
    ])
    _, got = fetch(coord, "g", None)
    assert got == {("t", 0): (4, -1, "", 0)}
    assert fetch(coord, "g", [("t", 2)], require_stable=True)[1][("t", 2)][3] == errors.UNSTABLE_OFFSET_COMMIT
    coord.complete_txn(3, committed=True)
    assert fetch(coord, "g", [("t", 2)])[1][("t", 2)][0] == 7


def test_requests_while_loading():
    coord, *_ = make(loaded=False)
    assert join(coord).value["error_code"] == errors.COORDINATOR_LOAD_IN_PROGRESS
    assert heartbeat(coord, "g", "m", 1) == errors.NONE
    assert sync(coord, "g", "m", 1).value["error_code"] == errors.REBALANCE_IN_PROGRESS
    assert fetch(coord, "g", [("t", 0)])[0] == errors.COORDINATOR_LOAD_IN_PROGRESS
    assert fetch(coord, "g", [("t", 0)], version=1)[1] == {("t", 0): (-1, -1, "", errors.COORDINATOR_LOAD_IN_PROGRESS)}
    # v2-v7: the top-level error, and on each requested partition too (aiokafka reads only those)
    assert fetch(coord, "g", [("t", 0)], version=3) == (
        errors.COORDINATOR_LOAD_IN_PROGRESS, {("t", 0): (-1, -1, "", errors.COORDINATOR_LOAD_IN_PROGRESS)})
    assert fetch(coord, "g", None, version=7) == (errors.COORDINATOR_LOAD_IN_PROGRESS, {})
    assert fetch(coord, "g", [("t", 0)], version=8)[0] == errors.COORDINATOR_LOAD_IN_PROGRESS
    assert coord.list_groups()[0] == errors.COORDINATOR_LOAD_IN_PROGRESS
    assert coord.describe_groups(["g"], 1)[0]["error_code"] == errors.COORDINATOR_LOAD_IN_PROGRESS
    assert coord.delete_groups(["g"])[0]["error_code"] == errors.COORDINATOR_LOAD_IN_PROGRESS


def test_unload_answers_waiting_requests_with_not_coordinator():
    coord, clock, sched, app = make()
    (a, b), gen = form_group(coord, sched, 2)
    waiting_join = join_new(coord)  # starts a rebalance; a and b have not rejoined
    app.hold = True
    held_commit = commit(coord, "simple", {("t", 0): 1})
    coord.unload()
    assert waiting_join.value["error_code"] == errors.NOT_COORDINATOR
    assert not held_commit.done
    app.release(errors.NOT_LEADER_OR_FOLLOWER)
    assert commit_errors(held_commit) == {("t", 0): errors.NOT_COORDINATOR}
    assert sched.pending() == 0  # every timer cancelled
    sched.advance(10 ** 7)
    assert join(coord).value["error_code"] == errors.NOT_COORDINATOR
    assert heartbeat(coord, "g", a, gen) == errors.NOT_COORDINATOR
    assert commit_errors(commit(coord, "g", {("t", 0): 1})) == {("t", 0): errors.NOT_COORDINATOR}
    # the partition comes back: reload
    coord.load(app.log())
    assert set(coord.groups) == {"g"}


def test_unload_answers_waiting_sync():
    coord, clock, sched, app = make()
    a = join_new(coord)
    b = join_new(coord)
    sched.advance(6000)
    follower = a.value if a.value["leader"] != a.value["member_id"] else b.value
    fs = sync(coord, "g", follower["member_id"], 1)
    coord.unload()
    assert fs.value["error_code"] == errors.NOT_COORDINATOR


def test_group_of_another_partition_is_not_ours():
    coord, *_ = make({"offsets.topic.num.partitions": 50})
    mine = next(f"g{i}" for i in range(1000) if coordinator_partition(f"g{i}", 50) == 0)
    other = next(f"g{i}" for i in range(1000) if coordinator_partition(f"g{i}", 50) != 0)
    assert join(coord, group=other).value["error_code"] == errors.NOT_COORDINATOR
    assert join(coord, group=mine).value["error_code"] == errors.MEMBER_ID_REQUIRED


def test_partition_count_is_read_at_every_check():
    """Cluster mode: a worker's metadata may list the offsets topic's partitions one by
    one; a coordinator created while it knew 3 of 50 must not refuse its groups forever."""
    cfg = dict(CONFIG, **{"offsets.topic.num.partitions": 3})
    clock = FakeClock()
    coord = GroupCoordinator(2, cfg, clock, FakeScheduler(clock), FakeAppender())
    coord.load([])
    g = next(f"g{i}" for i in range(1000)
             if coordinator_partition(f"g{i}", 50) == 2 and coordinator_partition(f"g{i}", 3) != 2)
    assert join(coord, group=g).value["error_code"] == errors.NOT_COORDINATOR
    cfg["offsets.topic.num.partitions"] = 50  # the rest of the metadata arrived
    assert join(coord, group=g).value["error_code"] == errors.MEMBER_ID_REQUIRED


def test_loaded_group_over_capacity_rebalances():
    coord, clock, sched, app = make()
    form_group(coord, sched, 3)
    coord2, *_ = make({"group.max.size": 2}, loaded=False)
    coord2.load(app.log())
    assert coord2.groups["g"].state == "PreparingRebalance"
