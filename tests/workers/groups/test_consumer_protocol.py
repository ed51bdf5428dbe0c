"""KIP-848 consumer groups (workers/groups/consumer_protocol.py) driven through the
coordinator with a fake clock, scheduler and appender."""

from __future__ import annotations

from tests.workers.groups.harness import FakeAppender, FakeClock, FakeScheduler
from workers.groups import errors
from workers.groups import records as rec
from workers.groups.consumer_group import (
    MEMBER_STABLE, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS, ConsumerGroup)
from workers.groups.coordinator import GroupCoordinator, LoadRecord

T1 = b"\x01" * 16
T2 = b"\x02" * 16
CONFIG = {"group.consumer.session.timeout.ms": 3000, "group.consumer.heartbeat.interval.ms": 500}


class Env:
    def __init__(self, topics=None, config=None):
        self.clock = FakeClock()
        self.scheduler = FakeScheduler(self.clock)
        self.appender = FakeAppender()
        self.topics = dict(topics or {"t1": (T1, 6)})
        self.coord = GroupCoordinator(0, {**CONFIG, **(config or {})}, self.clock, self.scheduler,
                                      self.appender, topic_metadata=lambda: self.topics)
        self.coord.load([])

    def hb(self, member_id, epoch, owned=None, group="g", version=1, **fields):
        req = {"group_id": group, "member_id": member_id, "member_epoch": epoch,
               "topic_partitions": owned, **fields}
        if epoch == 0:
            req.setdefault("rebalance_timeout_ms", 10000)
            req.setdefault("subscribed_topic_names", ["t1"])
            if owned is None:
                req["topic_partitions"] = []
        out = []
        self.coord.consumer_group_heartbeat(req, version, "client", "/127.0.0.1", out.append)
        assert len(out) == 1
        return out[0]


def parts(resp, topic_id=T1):
    a = resp["assignment"]
    if a is None:
        return None
    return sorted(p for t in a["topic_partitions"] if t["topic_id"] == topic_id for p in t["partitions"])


def owned(*ps, topic_id=T1):
    return [{"topic_id": topic_id, "partitions": list(ps)}]


def test_first_member_gets_everything_and_epochs():
    env = Env()
    r = env.hb("m1", 0)
    assert r["error_code"] == 0 and r["member_id"] == "m1" and r["member_epoch"] == 1
    assert r["heartbeat_interval_ms"] == 500
    assert parts(r) == [0, 1, 2, 3, 4, 5]
    g = env.coord.groups["g"]
    assert isinstance(g, ConsumerGroup) and g.state == "Stable" and g.group_epoch == 1
    # a plain heartbeat carries no assignment
    r = env.hb("m1", 1)
    assert r["error_code"] == 0 and r["assignment"] is None


def test_revocation_before_assignment():
    env = Env()
    env.hb("m1", 0)
    r2 = env.hb("m2", 0)
    # m2 moves to epoch 2 but gets nothing yet: m1 still owns everything
    assert r2["member_epoch"] == 2 and parts(r2) == []
    g = env.coord.groups["g"]
    assert g.members["m2"].state == UNRELEASED_PARTITIONS and g.state == "Reconciling"
    # m1 is asked to give up three partitions, its epoch does not move yet
    r1 = env.hb("m1", 1)
    keep = parts(r1)
    assert r1["member_epoch"] == 1 and len(keep) == 3
    assert g.members["m1"].state == UNREVOKED_PARTITIONS
    # still owning them: nothing moves
    assert env.hb("m1", 1, owned(*range(6)))["member_epoch"] == 1
    assert parts(env.hb("m2", 2)) in (None, [])
    # revoked: m1 moves to epoch 2, m2 gets the released partitions on its next heartbeat
    r1 = env.hb("m1", 1, owned(*keep))
    assert r1["member_epoch"] == 2 and parts(r1) == keep
    r2 = env.hb("m2", 2)
    assert sorted(parts(r2) + keep) == [0, 1, 2, 3, 4, 5]
    assert g.state == "Stable"
    assert set(g.partition_owner.values()) == {"m1", "m2"} and len(g.partition_owner) == 6


def test_fencing_and_previous_epoch():
    env = Env()
    env.hb("m1", 0)
    assert env.hb("m1", 5)["error_code"] == errors.FENCED_MEMBER_EPOCH
    assert env.hb("nobody", 1)["error_code"] == errors.UNKNOWN_MEMBER_ID
    env.hb("m2", 0)
    r1 = env.hb("m1", 1)
    keep = parts(r1)
    env.hb("m1", 1, owned(*keep))  # m1 now at epoch 2, previous 1
    # the response was lost: epoch 1 with a subset of the assignment is still accepted
    assert env.hb("m1", 1, owned(*keep))["error_code"] == 0
    # but not with partitions it does not own
    assert env.hb("m1", 1, owned(*range(6)))["error_code"] == errors.FENCED_MEMBER_EPOCH


def test_session_timeout_fences_and_moves_partitions():
    env = Env()
    env.hb("m1", 0)
    env.hb("m2", 0)
    keep = parts(env.hb("m1", 1))
    env.hb("m1", 1, owned(*keep))
    env.hb("m2", 2)
    g = env.coord.groups["g"]
    epoch, last = 2, None
    for _ in range(5):  # m1 keeps heartbeating, m2 goes silent
        env.scheduler.advance(1000)
        last = env.hb("m1", epoch)
        assert last["error_code"] == 0
        epoch = last["member_epoch"]
    assert "m2" not in g.members and g.group_epoch == 3
    assert epoch == 3 and g.members["m1"].assigned == {(T1, p) for p in range(6)}


def test_session_not_expired_early():
    env = Env()
    env.hb("m1", 0)
    env.scheduler.advance(2999)
    assert "m1" in env.coord.groups["g"].members
    env.scheduler.advance(1)
    assert "m1" not in env.coord.groups["g"].members


def test_rebalance_timeout_fences_a_member_that_does_not_revoke():
    env = Env()
    env.hb("m1", 0, rebalance_timeout_ms=2000)
    env.hb("m2", 0)
    env.hb("m1", 1)  # asked to revoke
    for _ in range(3):
        env.scheduler.advance(900)
        env.hb("m1", 1, owned(*range(6)))  # heartbeats but never revokes
        env.hb("m2", 2)
    assert "m1" not in env.coord.groups["g"].members


def test_leave_and_static_member_replacement():
    env = Env()
    env.hb("a1", 0, instance_id="a")
    env.hb("b1", 0, instance_id="b")
    ka = parts(env.hb("a1", 1, instance_id="a"))
    env.hb("a1", 1, owned(*ka), instance_id="a")
    kb = parts(env.hb("b1", 2, instance_id="b"))
    g = env.coord.groups["g"]
    epoch = g.group_epoch
    # b leaves temporarily
    r = env.hb("b1", -2, instance_id="b")
    assert r["member_epoch"] == -2 and g.group_epoch == epoch
    # a replacement with the same instance id takes over without a rebalance
    r = env.hb("b2", 0, instance_id="b")
    assert r["error_code"] == 0 and parts(r) == kb and r["member_epoch"] == 2
    assert g.group_epoch == epoch and "b1" not in g.members
    # while b2 is active another b is refused
    assert env.hb("b3", 0, instance_id="b")["error_code"] == errors.UNRELEASED_INSTANCE_ID
    # a full leave rebalances
    r = env.hb("b2", -1)
    assert r["member_epoch"] == -1 and g.group_epoch == epoch + 1
    assert parts(env.hb("a1", 2, instance_id="a")) == [0, 1, 2, 3, 4, 5]


def test_validation_errors():
    env = Env()
    assert env.hb("m", 0, group="")["error_code"] == errors.INVALID_REQUEST
    assert env.hb("", 0)["error_code"] == errors.INVALID_REQUEST
    assert env.hb("m", 0, rebalance_timeout_ms=-1)["error_code"] == errors.INVALID_REQUEST
    assert env.hb("m", 0, owned(1))["error_code"] == errors.INVALID_REQUEST
    assert env.hb("m", 0, server_assignor="nope")["error_code"] == errors.UNSUPPORTED_ASSIGNOR
    assert env.hb("m", 0, subscribed_topic_regex="(")["error_code"] == errors.INVALID_REGULAR_EXPRESSION
    assert env.hb("m", -3)["error_code"] == errors.INVALID_REQUEST
    # v0: the coordinator names the member
    r = env.hb("", 0, version=0)
    assert r["error_code"] == 0 and r["member_id"]


def test_classic_group_with_members_is_not_a_consumer_group():
    env = Env()
    out = []
    env.coord.join_group({"group_id": "g", "member_id": "", "session_timeout_ms": 6000,
                          "rebalance_timeout_ms": 6000, "protocol_type": "consumer",
                          "protocols": [{"name": "range", "metadata": b""}]}, 3, "c", "h", out.append)
    assert env.hb("m", 0)["error_code"] == errors.GROUP_ID_NOT_FOUND


def test_offset_commit_and_fetch_use_member_epochs():
    env = Env()
    r = env.hb("m1", 0)
    epoch = r["member_epoch"]

    def commit(version, member, gen):
        out = []
        env.coord.offset_commit({"group_id": "g", "member_id": member, "generation_id_or_member_epoch": gen,
                                 "topics": [{"name": "t1", "partitions": [
                                     {"partition_index": 0, "committed_offset": 7}]}]}, version, out.append)
        return out[0]["topics"][0]["partitions"][0]["error_code"]
    assert commit(9, "m1", epoch + 1) == errors.STALE_MEMBER_EPOCH
    assert commit(9, "x", epoch) == errors.UNKNOWN_MEMBER_ID
    assert commit(8, "m1", epoch) == errors.UNSUPPORTED_VERSION
    assert commit(9, "m1", epoch) == errors.NONE
    out = []
    env.coord.offset_fetch({"groups": [{"group_id": "g", "member_id": "m1", "member_epoch": epoch + 1,
                                        "topics": None}]}, 9, out.append)
    assert out[0]["groups"][0]["error_code"] == errors.STALE_MEMBER_EPOCH
    out = []
    env.coord.offset_fetch({"groups": [{"group_id": "g", "member_id": "m1", "member_epoch": epoch,
                                        "topics": None}]}, 9, out.append)
    assert out[0]["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 7


def test_state_survives_reload_from_records():
    env = Env()
    env.hb("m1", 0)
    env.hb("m2", 0, instance_id="s")
    keep = parts(env.hb("m1", 1))
    env.hb("m1", 1, owned(*keep))
    got = parts(env.hb("m2", 2, instance_id="s"))
    g = env.coord.groups["g"]
    records = [LoadRecord(k, v) for batch in env.appender.batches for k, v in batch[0]]
    env2 = Env(topics=env.topics)
    env2.coord.unload()
    env2.coord.load(records)
    g2 = env2.coord.groups["g"]
    assert isinstance(g2, ConsumerGroup)
    assert (g2.group_epoch, g2.assignment_epoch, g2.state) == (g.group_epoch, g.assignment_epoch, "Stable")
    assert {m: (x.member_epoch, x.assigned, x.state) for m, x in g2.members.items()} == \
        {m: (x.member_epoch, x.assigned, x.state) for m, x in g.members.items()}
    assert g2.static_members == {"s": "m2"} and g2.target == g.target
    # members carry on with their epochs, no rebalance
    r = env2.hb("m2", 2, instance_id="s")
    assert r["error_code"] == 0 and r["member_epoch"] == 2 and g2.group_epoch == g.group_epoch
    assert got and g2.members["m2"].state == MEMBER_STABLE
    # a member that never comes back expires after the session timeout from the load
    env2.scheduler.advance(3000)
    assert "m1" not in g2.members


def test_describe_and_list():
    env = Env()
    env.hb("m1", 0)
    d = env.coord.consumer_group_describe(["g", "nope"])
    assert d[0]["error_code"] == 0 and d[0]["group_state"] == "Stable" and d[0]["assignor_name"] == "uniform"
    m = d[0]["members"][0]
    assert m["member_id"] == "m1" and m["subscribed_topic_names"] == ["t1"]
    assert m["assignment"]["topic_partitions"][0]["topic_name"] == "t1"
    assert d[1]["error_code"] == errors.GROUP_ID_NOT_FOUND
    _err, groups = env.coord.list_groups(types_filter=["consumer"])
    assert [(x["group_id"], x["group_type"]) for x in groups] == [("g", "consumer")]
    _err, groups = env.coord.list_groups(types_filter=["classic"])
    assert groups == []
    classic = env.coord.describe_groups(["g"], 5)[0]
    assert classic["protocol_type"] == "consumer" and classic["group_state"] == "Stable"


def test_metadata_change_rebalances():
    env = Env()
    env.hb("m1", 0)
    env.topics["t1"] = (T1, 8)
    r = env.hb("m1", 1)
    assert r["member_epoch"] == 2 and parts(r) == list(range(8))


def test_regex_subscription():
    env = Env(topics={"orders-a": (T1, 2), "orders-b": (T2, 1)})
    r = env.hb("m1", 0, subscribed_topic_names=None, subscribed_topic_regex="orders-.*")
    assert parts(r, T1) == [0, 1] and parts(r, T2) == [0]


def test_records_are_kafkas_layout():
    key = rec.encode_consumer_group_key(rec.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    assert key == b"\x00\x08\x00\x01g\x00\x01m"
    assert rec.decode_key(key) == rec.ConsumerGroupKey(8, "g", "m")
    value = rec.encode_consumer_current_assignment_value(rec.ConsumerCurrentAssignmentValue(
        5, 4, 0, {T1: [0, 2]}, {}))
    assert value == (b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00\x00\x00\x04" + b"\x00"
                     + b"\x02" + T1 + b"\x03" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02" + b"\x00"
                     + b"\x01" + b"\x00")
    assert rec.decode_consumer_current_assignment_value(value).assigned == {T1: [0, 2]}
    assert rec.encode_consumer_group_epoch_value(3) == b"\x00\x00\x00\x00\x00\x03\x00"
