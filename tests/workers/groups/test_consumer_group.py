"""The KIP-848 group and member state (workers/groups/consumer_group.py)."""

from workers.groups.consumer_group import (
    ASSIGNING, MEMBER_STABLE, RECONCILING, UNREVOKED_PARTITIONS, ConsumerGroup, ConsumerMember,
    from_map, to_map)

T1 = b"\x01" * 16
T2 = b"\x02" * 16


def test_partition_maps_round_trip_sorted():
    tps = frozenset({(T2, 3), (T1, 1), (T1, 0)})
    assert to_map(tps) == {T1: [0, 1], T2: [3]}
    assert from_map(to_map(tps)) == tps and from_map(None) == frozenset()


def test_state_follows_the_epochs():
    g = ConsumerGroup("g")
    assert g.protocol_type == "consumer"
    g.update_state(1)
    assert g.state == "Empty"
    m = ConsumerMember("m", member_epoch=1, state=MEMBER_STABLE)
    g.members["m"] = m
    g.group_epoch, g.assignment_epoch = 2, 1
    g.update_state(2)
    assert g.state == ASSIGNING and g.state_timestamp_ms == 2
    g.assignment_epoch = 2
    g.update_state(3)
    assert g.state == RECONCILING                 # the member is still at epoch 1
    m.member_epoch = 2
    m.state = UNREVOKED_PARTITIONS
    g.update_state(4)
    assert g.state == RECONCILING
    m.state = MEMBER_STABLE
    g.update_state(5)
    assert g.state == "Stable"
