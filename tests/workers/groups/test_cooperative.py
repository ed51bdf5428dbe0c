"""Cooperative-sticky (KIP-429) runs on the classic protocol: the coordinator only has to
pass subscriptions (with owned partitions) and assignments through untouched, and let
members rejoin right after a revocation. Two incremental rebalances move partitions from
A to B without A ever giving up the partitions it keeps."""

from workers.groups.consumer_metadata import (
    Assignment, Subscription, encode_assignment, encode_subscription, parse_assignment,
    parse_subscription)

from workers.groups.records import decode_group_metadata_value

from .harness import heartbeat, join, join_new, make, sync

PROTO = "cooperative-sticky"


def meta(owned, generation):
    return [{"name": PROTO, "metadata": encode_subscription(
        Subscription(["t"], b"user", [("t", owned)] if owned else [], generation))}]


def test_two_incremental_rebalances():
    coord, _, sched, app = make()
    # generation 1: A alone owns t-0..3
    box = join_new(coord, protos=meta([], -1))
    sched.advance(3000)
    ra = box.value
    A, gen = ra["member_id"], ra["generation_id"]
    s = sync(coord, "g", A, gen, [(A, encode_assignment(Assignment([("t", [0, 1, 2, 3])])))],
             protocol_name=PROTO)
    assert parse_assignment(s.value["assignment"]).partitions == [("t", [0, 1, 2, 3])]

    # B joins: rebalance 1. A learns of it from its heartbeat and rejoins with what it owns.
    b_box = join_new(coord, protos=meta([], -1))
    assert heartbeat(coord, "g", A, gen) == 27  # REBALANCE_IN_PROGRESS
    a_box = join(coord, member_id=A, protos=meta([0, 1, 2, 3], gen))
    ra, rb = a_box.value, b_box.value
    gen2 = ra["generation_id"]
    assert gen2 == gen + 1 and ra["leader"] == A
    B = rb["member_id"]
    # the leader sees every member's subscription byte for byte
    sent = {A: meta([0, 1, 2, 3], gen)[0]["metadata"], B: meta([], -1)[0]["metadata"]}
    assert {m["member_id"]: m["metadata"] for m in ra["members"]} == sent
    assert parse_subscription(sent[A]).owned_partitions == [("t", [0, 1, 2, 3])]
    # cooperative: A keeps 0,1 and must revoke 2,3 before anyone gets them
    bs = sync(coord, "g", B, gen2, protocol_name=PROTO)
    as_ = sync(coord, "g", A, gen2, [(A, encode_assignment(Assignment([("t", [0, 1])]))),
                                     (B, encode_assignment(Assignment([])))], protocol_name=PROTO)
    assert parse_assignment(as_.value["assignment"]).partitions == [("t", [0, 1])]
    assert parse_assignment(bs.value["assignment"]).partitions == []
    assert coord.groups["g"].state == "Stable"

    # rebalance 2: A revoked 2,3 and rejoins at once (it is the leader: that rebalances)
    a_box = join(coord, member_id=A, protos=meta([0, 1], gen2))
    assert coord.groups["g"].state == "PreparingRebalance"
    assert heartbeat(coord, "g", B, gen2) == 27
    b_box = join(coord, member_id=B, protos=meta([], gen2))
    ra, rb = a_box.value, b_box.value
    gen3 = ra["generation_id"]
    assert gen3 == gen2 + 1 and rb["generation_id"] == gen3 and rb["members"] == []
    owned = {m["member_id"]: parse_subscription(m["metadata"]).owned_partitions for m in ra["members"]}
    assert owned == {A: [("t", [0, 1])], B: []}
    bs = sync(coord, "g", B, gen3, protocol_name=PROTO)
    sync(coord, "g", A, gen3, [(A, encode_assignment(Assignment([("t", [0, 1])]))),
                               (B, encode_assignment(Assignment([("t", [2, 3])])))],
         protocol_name=PROTO)
    assert parse_assignment(bs.value["assignment"]).partitions == [("t", [2, 3])]
    assert coord.groups["g"].state == "Stable" and coord.groups["g"].protocol_name == PROTO
    assert heartbeat(coord, "g", A, gen3) == heartbeat(coord, "g", B, gen3) == 0
    # the stored group record carries the subscriptions and assignments as sent
    key, value = app.log()[-1]
    stored = decode_group_metadata_value(value)
    assert stored.generation == gen3 and stored.protocol == PROTO
    subs = {m.member_id: parse_subscription(m.subscription).owned_partitions for m in stored.members}
    assert subs == {A: [("t", [0, 1])], B: []}
    assert {m.member_id: parse_assignment(m.assignment).partitions for m in stored.members} == {
        A: [("t", [0, 1])], B: [("t", [2, 3])]}
