"""Classic group membership: JoinGroup / SyncGroup / Heartbeat / LeaveGroup."""

from workers.groups import errors
from workers.groups.consumer_metadata import parse_assignment, parse_subscription

from .harness import (
    assignment, form_group, heartbeat, join, join_new, leave, make, protocols, sync)


def test_member_id_required_on_first_join_v4_plus():
    coord, *_ = make()
    r = join(coord, version=4).value
    assert r["error_code"] == errors.MEMBER_ID_REQUIRED
    assert r["member_id"].startswith("client-")
    assert r["generation_id"] == -1 and r["members"] == []
    assert coord.groups["g"].pending_members == {r["member_id"]}


def test_no_member_id_round_trip_before_v4():
    coord, _, sched, _ = make()
    box = join(coord, version=3)
    assert not box.done  # waits in the initial rebalance delay
    sched.advance(3000)
    r = box.value
    assert r["error_code"] == 0 and r["member_id"] and r["leader"] == r["member_id"]


def test_two_members_split_partitions():
    coord, _, sched, _ = make()
    a = join_new(coord, protos=protocols("t"))
    b = join_new(coord, protos=protocols("t"))
    # b joined during the initial delay, which therefore runs once more (Kafka's
    # InitialDelayedJoin): 3 s + 3 s
    sched.advance(5999)
    assert not a.done and not b.done
    sched.advance(1)
    ra, rb = a.value, b.value
    assert ra["generation_id"] == rb["generation_id"] == 1
    assert ra["protocol_name"] == "range"
    leader, follower = (ra, rb) if ra["leader"] == ra["member_id"] else (rb, ra)
    # only the leader gets the members, with their metadata passed through
    assert follower["members"] == []
    assert {m["member_id"] for m in leader["members"]} == {ra["member_id"], rb["member_id"]}
    assert all(parse_subscription(m["metadata"]).topics == ["t"] for m in leader["members"])
    assert coord.groups["g"].state == "CompletingRebalance"

    fs = sync(coord, "g", follower["member_id"], 1)
    assert not fs.done  # followers wait for the leader
    ls = sync(coord, "g", leader["member_id"], 1, [
        (leader["member_id"], assignment(("t", [0, 1]))),
        (follower["member_id"], assignment(("t", [2, 3])))])
    assert parse_assignment(ls.value["assignment"]).partitions == [("t", [0, 1])]
    assert parse_assignment(fs.value["assignment"]).partitions == [("t", [2, 3])]
    assert coord.groups["g"].state == "Stable"
    assert heartbeat(coord, "g", follower["member_id"], 1) == errors.NONE


def test_sync_v5_returns_protocol_type_and_name_and_checks_them():
    coord, _, sched, _ = make()
    box = join_new(coord, version=7)
    sched.advance(3000)
    r = box.value
    assert r["protocol_type"] == "consumer" and "skip_assignment" not in r  # v9+
    bad = sync(coord, "g", r["member_id"], 1, version=5, protocol_name="roundrobin")
    assert bad.value["error_code"] == errors.INCONSISTENT_GROUP_PROTOCOL
    missing = sync(coord, "g", r["member_id"], 1, version=5, protocol_type=None)
    assert missing.value["error_code"] == errors.INCONSISTENT_GROUP_PROTOCOL
    ok = sync(coord, "g", r["member_id"], 1, [(r["member_id"], b"A")], version=5)
    assert ok.value == {"throttle_time_ms": 0, "error_code": 0, "protocol_type": "consumer",
                        "protocol_name": "range", "assignment": b"A"}


def test_protocol_selected_by_votes():
    coord, _, sched, _ = make()
    a = join_new(coord, protos=protocols("t", names=("range", "roundrobin")))
    b = join_new(coord, protos=protocols("t", names=("roundrobin", "range")))
    c = join_new(coord, protos=protocols("t", names=("roundrobin", "sticky", "range")))
    sched.advance(6000)
    assert {x.value["protocol_name"] for x in (a, b, c)} == {"roundrobin"}


def test_inconsistent_group_protocol():
    coord, _, sched, _ = make()
    join_new(coord, protos=protocols("t", names=("range",)))
    r = join(coord, protos=protocols("t", names=("roundrobin",))).value
    assert r["error_code"] == errors.INCONSISTENT_GROUP_PROTOCOL
    r = join(coord, protocol_type="connect").value
    assert r["error_code"] == errors.INCONSISTENT_GROUP_PROTOCOL


def test_invalid_session_timeout():
    coord, *_ = make()
    assert join(coord, session=5999).value["error_code"] == errors.INVALID_SESSION_TIMEOUT
    assert join(coord, session=300001).value["error_code"] == errors.INVALID_SESSION_TIMEOUT


def test_invalid_group_id_and_unknown_member():
    coord, *_ = make()
    assert join(coord, group="").value["error_code"] == errors.INVALID_GROUP_ID
    assert join(coord, member_id="nobody").value["error_code"] == errors.UNKNOWN_MEMBER_ID


def test_member_leaves_triggers_rebalance():
    coord, _, sched, _ = make()
    (a, b), gen = form_group(coord, sched, 2)
    r = leave(coord, "g", b)
    assert r["error_code"] == 0 and r["members"] == [{"member_id": b, "group_instance_id": None, "error_code": 0}]
    group = coord.groups["g"]
    assert group.state == "PreparingRebalance"
    assert heartbeat(coord, "g", a, gen) == errors.REBALANCE_IN_PROGRESS
    rejoin = join(coord, member_id=a)
    r = rejoin.value  # the only member rejoined: the rebalance completes at once
    assert r["generation_id"] == gen + 1 and r["leader"] == a and len(r["members"]) == 1


def test_leave_group_v0_and_unknown_member():
    coord, _, sched, _ = make()
    (a, b), gen = form_group(coord, sched, 2)
    assert leave(coord, "g", "ghost", version=0) == {"error_code": errors.UNKNOWN_MEMBER_ID}
    assert leave(coord, "g", b, version=1) == {"throttle_time_ms": 0, "error_code": 0}
    assert leave(coord, "nogroup", "x")["members"][0]["error_code"] == errors.UNKNOWN_MEMBER_ID


def test_session_timeout_expels_member_not_sooner():
    coord, _, sched, _ = make()
    (a, b), gen = form_group(coord, sched, 2)
    group = coord.groups["g"]
    for _ in range(5):  # a keeps heartbeating, b goes silent
        sched.advance(4000)
        if heartbeat(coord, "g", a, gen) == errors.REBALANCE_IN_PROGRESS:
            break
    assert coord.clock() - 1_700_000_000_000 - 6000 == 12000  # noticed at the first beat after 10 s
    # b's last sign of life was its SyncGroup at t0; session timeout is 10 s
    assert b not in group.members and group.state == "PreparingRebalance"

    coord2, _, sched2, _ = make()
    (a2, b2), gen2 = form_group(coord2, sched2, 2)
    sched2.advance(9999)
    assert b2 in coord2.groups["g"].members and coord2.groups["g"].state == "Stable"
    assert heartbeat(coord2, "g", b2, gen2) == errors.NONE  # resets b2's timer
    sched2.advance(9999)
    assert b2 in coord2.groups["g"].members  # a2 expired meanwhile, but not b2
    assert a2 not in coord2.groups["g"].members


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    coord, _, sched, _ = make()
    (a, b), gen = form_group(coord, sched, 2)
    box = join(coord, member_id=a, protos=protocols("t", "u"))  # metadata change
    assert coord.groups["g"].state == "PreparingRebalance" and not box.done
    # b keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins
    for _ in range(7):
        sched.advance(4000)
        heartbeat(coord, "g", b, gen)
    assert not box.done
    sched.advance(2000)
    assert box.done  # rebalance timeout 30 s passed
    r = box.value
    assert r["generation_id"] == gen + 1 and [m["member_id"] for m in r["members"]] == [a]
    assert heartbeat(coord, "g", b, gen) == errors.UNKNOWN_MEMBER_ID


def test_illegal_generation_and_unknown_member():
    coord, _, sched, _ = make()
    (a, b), gen = form_group(coord, sched, 2)
    assert heartbeat(coord, "g", a, gen - 1) == errors.ILLEGAL_GENERATION
    assert heartbeat(coord, "g", "who", gen) == errors.UNKNOWN_MEMBER_ID
    assert heartbeat(coord, "nope", a, gen) == errors.UNKNOWN_MEMBER_ID
    assert sync(coord, "g", a, gen + 5).value["error_code"] == errors.ILLEGAL_GENERATION
    assert sync(coord, "g", "who", gen).value["error_code"] == errors.UNKNOWN_MEMBER_ID


def test_stable_follower_rejoin_with_same_metadata_does_not_rebalance():
    coord, _, sched, _ = make()
    (a, b), gen = form_group(coord, sched, 2)
    follower = b if coord.groups["g"].leader_id == a else a
    r = join(coord, member_id=follower).value
    assert r["error_code"] == 0 and r["generation_id"] == gen and r["members"] == []
    assert coord.groups["g"].state == "Stable"


def test_max_group_size():
    coord, _, sched, _ = make({"group.max.size": 2})
    form_group(coord, sched, 2)
    r = join(coord).value
    assert r["error_code"] == errors.GROUP_MAX_SIZE_REACHED and r["member_id"] == ""
    # while rebalancing, the limit counts members that have joined, not pending ids
    coord2, _, sched2, _ = make({"group.max.size": 2})
    first = join_new(coord2)
    p1, p2 = join(coord2).value, join(coord2).value
    assert p1["error_code"] == p2["error_code"] == errors.MEMBER_ID_REQUIRED
    second = join(coord2, member_id=p1["member_id"])
    third = join(coord2, member_id=p2["member_id"]).value
    assert third["error_code"] == errors.GROUP_MAX_SIZE_REACHED
    assert not coord2.groups["g"].pending_members
    assert join(coord2).value["error_code"] == errors.GROUP_MAX_SIZE_REACHED
    sched2.advance(6000)
    assert first.value["error_code"] == second.value["error_code"] == 0


def test_initial_rebalance_delay_extends_while_members_arrive():
    coord, _, sched, _ = make()
    a = join_new(coord)
    sched.advance(2000)
    b = join_new(coord)  # arrives during the first delay: one more delay
    sched.advance(1000)
    assert not a.done
    sched.advance(2999)
    assert not a.done
    sched.advance(1)
    assert a.value["generation_id"] == b.value["generation_id"] == 1


def test_pending_member_expires_after_session_timeout():
    coord, _, sched, _ = make()
    r = join(coord).value
    sched.advance(10000)
    assert not coord.groups["g"].pending_members
    assert join(coord, member_id=r["member_id"]).value["error_code"] == errors.UNKNOWN_MEMBER_ID


def test_new_member_that_never_completes_join_is_dropped_after_five_minutes():
    coord, _, sched, _ = make({"group.max.session.timeout.ms": 1_000_000})
    (a, b), gen = form_group(coord, sched, 2, session=600_000, rebalance=900_000)
    late = join_new(coord, session=600_000, rebalance=900_000)  # a new member starts a rebalance
    assert not late.done
    sched.advance(300_000)  # a and b never rejoin; the new member timeout (5 min) hits first
    assert late.value["error_code"] == errors.UNKNOWN_MEMBER_ID


def test_pending_sync_members_are_removed():
    coord, _, sched, _ = make()
    a = join_new(coord)
    b = join_new(coord)
    sched.advance(6000)
    ra, rb = a.value, b.value
    leader = ra if ra["leader"] == ra["member_id"] else rb
    other = rb if leader is ra else ra
    ls = sync(coord, "g", leader["member_id"], 1, [(leader["member_id"], b"L")])
    assert ls.value["error_code"] == 0
    # the follower never sends SyncGroup: after the rebalance timeout it is removed
    for _ in range(8):
        sched.advance(4000)
        heartbeat(coord, "g", leader["member_id"], 1)
    assert other["member_id"] not in coord.groups["g"].members


def test_sync_while_preparing_rebalance_and_rejoin_during_completing():
    coord, _, sched, _ = make()
    a = join_new(coord)
    b = join_new(coord)
    sched.advance(6000)
    ra, rb = a.value, b.value
    leader = ra if ra["leader"] == ra["member_id"] else rb
    follower = rb if leader is ra else ra
    fs = sync(coord, "g", follower["member_id"], 1)
    # the follower lost the JoinGroup response and rejoins with the same metadata
    again = join(coord, member_id=follower["member_id"]).value
    assert again["generation_id"] == 1 and again["members"] == []
    # a new member arrives before the leader syncs: the waiting follower is told to rejoin
    c = join_new(coord)
    assert fs.value["error_code"] == errors.REBALANCE_IN_PROGRESS
    assert sync(coord, "g", leader["member_id"], 1).value["error_code"] == errors.REBALANCE_IN_PROGRESS
    assert not c.done


def test_static_member_bounce_without_rebalance():
    coord, _, sched, app = make()
    a = join(coord, instance="i-a", version=5)
    b = join(coord, instance="i-b", version=5)  # static members skip MEMBER_ID_REQUIRED
    sched.advance(6000)
    ra, rb = a.value, b.value
    assert ra["error_code"] == rb["error_code"] == 0
    assert ra["member_id"].startswith("i-a-")
    leader = ra if ra["leader"] == ra["member_id"] else rb
    follower = rb if leader is ra else ra
    fsync = sync(coord, "g", follower["member_id"], 1, instance="i-b" if follower is rb else "i-a")
    sync(coord, "g", leader["member_id"], 1, [(ra["member_id"], b"A"), (rb["member_id"], b"B")],
         instance="i-a" if leader is ra else "i-b")
    assert fsync.value["error_code"] == 0
    group = coord.groups["g"]
    assert group.state == "Stable"

    # the follower restarts: it rejoins with its instance id and no member id
    inst = "i-b" if follower is rb else "i-a"
    bounce = join(coord, instance=inst, version=5).value
    assert bounce["error_code"] == 0 and bounce["generation_id"] == 1
    assert bounce["member_id"] != follower["member_id"] and bounce["members"] == []
    assert group.state == "Stable" and group.generation_id == 1
    # its assignment is unchanged; the old member id is fenced
    again = sync(coord, "g", bounce["member_id"], 1, instance=inst).value
    assert again["error_code"] == 0 and again["assignment"] == (b"B" if follower is rb else b"A")
    assert heartbeat(coord, "g", follower["member_id"], 1, instance=inst) == errors.FENCED_INSTANCE_ID
    # the new member id was persisted in the group metadata record
    assert app.batches[-1][0][0][1] is not None


def test_static_leader_bounce_v9_skips_assignment_older_versions_act_as_follower():
    coord, _, sched, _ = make()
    a = join(coord, instance="i-a", version=9)
    sched.advance(3000)
    ra = a.value
    sync(coord, "g", ra["member_id"], 1, [(ra["member_id"], b"A")], instance="i-a", version=5)
    v9 = join(coord, instance="i-a", version=9).value
    assert v9["skip_assignment"] is True and v9["leader"] == v9["member_id"]
    assert [m["member_id"] for m in v9["members"]] == [v9["member_id"]]
    v5 = join(coord, instance="i-a", version=5).value
    assert v5["leader"] == v9["member_id"] != v5["member_id"]  # the old leader id
    assert v5["members"] == []
    assert coord.groups["g"].state == "Stable"


def test_fenced_instance_id():
    coord, _, sched, _ = make()
    a = join(coord, instance="i-a")
    sched.advance(3000)
    old = a.value["member_id"]
    sync(coord, "g", old, 1, [(old, b"A")], instance="i-a")
    new = join(coord, instance="i-a").value["member_id"]
    assert join(coord, member_id=old, instance="i-a").value["error_code"] == errors.FENCED_INSTANCE_ID
    assert sync(coord, "g", old, 1, instance="i-a").value["error_code"] == errors.FENCED_INSTANCE_ID
    assert leave(coord, "g", (old, "i-a"))["members"][0]["error_code"] == errors.FENCED_INSTANCE_ID
    assert heartbeat(coord, "g", new, 1, instance="i-a") == errors.NONE
    assert heartbeat(coord, "g", new, 1, instance="i-zzz") == errors.UNKNOWN_MEMBER_ID


def test_static_member_with_changed_protocol_rebalances():
    coord, _, sched, _ = make()
    join(coord, instance="i-a", protos=protocols("t", names=("range", "roundrobin")))
    b = join(coord, instance="i-b", protos=protocols("t", names=("range", "roundrobin")))
    sched.advance(6000)
    mb = b.value["member_id"]
    ma = coord.groups["g"].static_members["i-a"]
    sync(coord, "g", mb, 1)
    sync(coord, "g", ma, 1)
    sync(coord, "g", coord.groups["g"].leader_id, 1)
    assert coord.groups["g"].state == "Stable" and coord.groups["g"].protocol_name == "range"
    r = join(coord, instance="i-b", protos=protocols("t", names=("roundrobin",)))
    assert coord.groups["g"].state == "PreparingRebalance" and not r.done


def test_admin_removes_static_member_by_instance_id():
    coord, _, sched, _ = make()
    a = join(coord, instance="i-a")
    sched.advance(3000)
    r = leave(coord, "g", ("", "i-a"), version=4)
    assert r["members"] == [{"member_id": "", "group_instance_id": "i-a", "error_code": 0}]
    assert not coord.groups["g"].members
    assert leave(coord, "g", ("", "i-x"))["members"][0]["error_code"] == errors.UNKNOWN_MEMBER_ID


def test_group_store_failure_maps_errors_to_sync():
    coord, _, sched, app = make()
    a = join_new(coord)
    sched.advance(3000)
    m = a.value["member_id"]
    app.error = errors.NOT_ENOUGH_REPLICAS
    r = sync(coord, "g", m, 1, [(m, b"A")]).value
    assert r["error_code"] == errors.COORDINATOR_NOT_AVAILABLE and r["assignment"] == b""
    assert coord.groups["g"].state == "PreparingRebalance"
    # the member rejoins and the next generation is stored on a healthy log
    app.error = errors.NONE
    r2 = join(coord, member_id=m).value
    assert r2["generation_id"] == 2
    app.error = errors.NOT_LEADER_OR_FOLLOWER
    assert sync(coord, "g", m, 2, [(m, b"A")]).value["error_code"] == errors.NOT_COORDINATOR


def test_follower_sync_answered_when_store_completes_later():
    coord, _, sched, app = make()
    a = join_new(coord)
    b = join_new(coord)
    sched.advance(6000)
    ra, rb = a.value, b.value
    leader = ra if ra["leader"] == ra["member_id"] else rb
    follower = rb if leader is ra else ra
    app.hold = True
    fs = sync(coord, "g", follower["member_id"], 1)
    ls = sync(coord, "g", leader["member_id"], 1, [(follower["member_id"], b"F")])
    assert not fs.done and not ls.done
    app.release(errors.NONE)
    assert fs.value["assignment"] == b"F"
    assert ls.value["assignment"] == b""  # the leader left itself out


def test_old_client_versions_end_to_end():
    """aiokafka's versions (JoinGroup v2, SyncGroup v1, Heartbeat v1, LeaveGroup v1):
    no KIP-394 round trip, no static membership fields."""
    coord, _, sched, _ = make()
    box = join(coord, version=2)
    sched.advance(3000)
    r = box.value
    assert set(r) == {"throttle_time_ms", "error_code", "generation_id", "protocol_name",
                      "leader", "member_id", "members"}
    assert set(r["members"][0]) == {"member_id", "metadata"}
    s = sync(coord, "g", r["member_id"], 1, [(r["member_id"], b"A")], version=1).value
    assert s == {"throttle_time_ms": 0, "error_code": 0, "assignment": b"A"}
    b = {}
    coord.heartbeat({"group_id": "g", "generation_id": 1, "member_id": r["member_id"]}, 0, b.update)
    assert b == {"error_code": 0}
    assert leave(coord, "g", r["member_id"], version=1) == {"throttle_time_ms": 0, "error_code": 0}
    assert coord.groups["g"].state == "Empty"


def test_v0_join_uses_session_timeout_as_rebalance_timeout():
    coord, _, sched, _ = make()
    box = join(coord, version=0, session=7000, rebalance=99999)
    sched.advance(3000)
    m = coord.groups["g"].members[box.value["member_id"]]
    assert m.rebalance_timeout_ms == m.session_timeout_ms == 7000
