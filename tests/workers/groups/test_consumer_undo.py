"""workers/groups/consumer_undo.py: a consumer group change whose records the appender
refuses is undone (driven through the coordinator, as test_consumer_protocol.py)."""

from __future__ import annotations

from tests.workers.groups.test_consumer_protocol import Env, owned, parts
from workers.groups import errors


def group_state(g):
    """Everything a heartbeat may change, for comparing a group before and after."""
    return (g.state, g.group_epoch, g.assignment_epoch, dict(g.target), dict(g.partition_owner),
            dict(g.static_members), dict(g.subscription_metadata),
            {mid: (m.reconciliation_state(), m.instance_id, tuple(m.subscribed_topic_names))
             for mid, m in g.members.items()})


def test_refused_append_rolls_the_change_back():
    """Kafka applies a change only with its records: an append refused before anything
    was written (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS) leaves the group as it was."""
    env = Env()
    env.hb("m1", 0)
    env.hb("s1", 0, instance_id="s")
    env.hb("m1", 1, owned(*parts(env.hb("m1", 1))))
    g = env.coord.groups["g"]
    before, timers = group_state(g), env.scheduler.pending()

    env.appender.refuse = errors.NOT_LEADER_OR_FOLLOWER
    assert env.hb("m2", 0)["error_code"] == errors.NOT_COORDINATOR          # a join
    assert env.hb("h1", 0, group="h")["error_code"] == errors.NOT_COORDINATOR  # a new group
    env.appender.refuse = errors.NOT_ENOUGH_REPLICAS
    assert env.hb("m1", -1)["error_code"] == errors.COORDINATOR_NOT_AVAILABLE  # a leave
    assert env.hb("s1", -2, instance_id="s")["error_code"] == errors.COORDINATOR_NOT_AVAILABLE
    assert env.coord.groups["g"] is g and "h" not in env.coord.groups
    assert group_state(g) == before and env.scheduler.pending() == timers  # m2, h1: no timers
    # a session timeout whose fence is refused keeps the member, with a new session timeout
    env.scheduler.advance(2000)
    env.hb("s1", 2, instance_id="s")
    env.scheduler.advance(1000)                       # m1 expires; its removal is refused
    assert "m1" in g.members and group_state(g) == before

    env.appender.refuse = errors.NONE
    r = env.hb("m2", 0)                               # the join again: epoch 3, not 4
    assert r["error_code"] == 0 and g.group_epoch == 3
    env.scheduler.advance(1500)
    env.hb("s1", 2, instance_id="s")
    env.hb("m2", 3)
    env.scheduler.advance(1499)
    assert "m1" in g.members
    env.scheduler.advance(1)                          # the retried fence, now written
    assert "m1" not in g.members and g.group_epoch == 4
    # the log holds only what was written: a reload gives the same group
    reloaded = Env()
    reloaded.coord.unload()
    reloaded.coord.load(env.appender.log())
    assert group_state(reloaded.coord.groups["g"])[1:] == group_state(g)[1:]
