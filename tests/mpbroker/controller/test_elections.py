"""Election strategies and the partition planner of the ZooKeeper controller (pure)."""
from mpbroker.controller import elections


def test_offline_first_live_isr_member_in_assignment_order():
    assert elections.offline_leader([3, 1, 2], [1, 2, 3], {1, 2}) == (1, (1, 2))
    assert elections.offline_leader([3, 1, 2], [2, 3], {1, 2}) == (2, (2,))


def test_offline_no_live_isr_member():
    assert elections.offline_leader([1, 2, 3], [1], {2, 3}) is None
    # unclean: the first live replica, alone in the ISR
    assert elections.offline_leader([1, 3, 2], [1], {2, 3}, unclean=True) == (3, (3,))
    assert elections.offline_leader([1, 2], [1], set(), unclean=True) is None


def test_preferred_and_reassignment():
    assert elections.preferred_leader([2, 1, 3], [1, 2, 3], {1, 2, 3}) == (2, (1, 2, 3))
    assert elections.preferred_leader([2, 1, 3], [1, 3], {1, 2, 3}) is None     # not in ISR
    assert elections.preferred_leader([2, 1, 3], [1, 2, 3], {1, 3}) is None     # not alive
    assert elections.reassignment_leader([4, 5], [1, 5], {1, 4, 5}) == (5, (1, 5))


def test_controlled_shutdown_moves_to_other_isr_member():
    assert elections.controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == (2, (2, 3))
    assert elections.controlled_shutdown_leader([1, 2, 3], [1], {1, 2, 3}, {1}) is None
    assert elections.controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}) == (3, (3,))


def test_plan_leader_dies():
    assert elections.plan([1, 2, 3], 1, [1, 2, 3], {2, 3}) == (2, (2, 3))
    # nothing eligible: offline, the last ISR member kept
    assert elections.plan([1, 2, 3], 1, [1], {2, 3}) == (-1, (1,))
    assert elections.plan([1, 2, 3], 1, [1], {2, 3}, unclean=True) == (2, (2,))
    # already offline and still nobody: no change; the ISR member returns: it leads
    assert elections.plan([1, 2, 3], -1, [1], {2, 3}) is None
    assert elections.plan([1, 2, 3], -1, [1], {1, 2, 3}) == (1, (1,))


def test_plan_follower_dies_and_shutting_down_brokers_are_not_candidates():
    assert elections.plan([1, 2, 3], 1, [1, 2, 3], {1, 2}) == (1, (1, 2))
    assert elections.plan([1, 2, 3], 1, [1, 2, 3], {1, 2, 3}) is None
    # brokers shutting down are not online for elections (Kafka: isReplicaOnline(.., false))
    assert elections.plan([1, 2, 3], 1, [1, 2, 3], {2, 3}, shutting_down={2}) == (3, (3,))


def test_plan_drops_followers_in_controlled_shutdown_from_the_isr():
    # a leader that did not know added a stopping follower back: the controller drops it
    assert elections.plan([1, 2, 3], 1, [1, 2, 3], {1, 2, 3}, shutting_down={2}) == (1, (1, 3))
    # a stopping leader that could not hand over keeps leading, alone if need be
    assert elections.plan([1, 2], 1, [1], {1, 2}, shutting_down={1}) is None
    assert elections.plan([1, 2], 1, [1, 2], {1, 2}, shutting_down={1, 2}) == (1, (1,))


def test_imbalance():
    ars = {("t", 0): (1, 2), ("t", 1): (1, 2), ("t", 2): (2, 1)}
    leaders = {("t", 0): 2, ("t", 1): 1, ("t", 2): 2}
    assert elections.imbalanced(ars, leaders, 1) == (0.5, [("t", 0)])
    assert elections.imbalanced(ars, leaders, 2) == (0.0, [])
    assert elections.imbalanced(ars, leaders, 3) == (0.0, [])
