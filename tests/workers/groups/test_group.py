"""workers/groups/group.py: the classic group's state machine (Kafka's GroupMetadata
transitions), its members and leader, protocol selection by votes, and the next
generation (the coordinator's use of it: test_membership.py)."""
from __future__ import annotations

import itertools

import pytest

from workers.groups.consumer_metadata import Subscription, encode_subscription
from workers.groups.group import (
    ALL_STATES, COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, ClassicGroup,
    IllegalGroupTransition, Member)

LEGAL = {(EMPTY, PREPARING_REBALANCE), (PREPARING_REBALANCE, COMPLETING_REBALANCE),
         (PREPARING_REBALANCE, EMPTY), (COMPLETING_REBALANCE, STABLE),
         (COMPLETING_REBALANCE, PREPARING_REBALANCE), (STABLE, PREPARING_REBALANCE)} | \
    {(s, DEAD) for s in ALL_STATES}


def member(mid, protocols=(("range", b"r"),), instance=None, protocol_type="consumer"):
    return Member(mid, instance, "client", "/h", 60000, 10000, protocol_type, list(protocols))


@pytest.mark.parametrize("frm,to", list(itertools.product(ALL_STATES, ALL_STATES)))
def test_transitions_are_kafkas(frm, to):
    g = ClassicGroup("g", state=frm)
    if (frm, to) in LEGAL:
        g.transition_to(to, 42)
        assert g.state == to and g.state_timestamp_ms == 42
    else:
        with pytest.raises(IllegalGroupTransition):
            g.transition_to(to, 42)
        assert g.state == frm


def test_the_first_member_leads_and_a_leaving_leader_hands_over_in_join_order():
    g = ClassicGroup("g")
    for mid in ("a", "b", "c"):
        g.add(member(mid, instance="i-" + mid if mid == "b" else None))
    assert g.leader_id == "a" and g.protocol_type == "consumer" and g.static_members == {"i-b": "b"}
    g.remove("a")
    assert g.leader_id == "b"
    g.remove("b")
    assert g.leader_id == "c" and g.static_members == {}
    g.remove("c")
    assert g.leader_id is None and not g.supported_protocols


def test_only_protocols_every_member_supports_are_candidates_and_votes_pick_one():
    g = ClassicGroup("g")
    g.add(member("a", [("sticky", b""), ("range", b"")]))
    g.add(member("b", [("range", b""), ("sticky", b""), ("rr", b"")]))
    g.add(member("c", [("range", b""), ("sticky", b"")]))
    assert g.candidate_protocols() == {"sticky", "range"}
    assert g.select_protocol() == "range"                   # two votes to one
    g.remove("c")                                           # a tie: the first member's choice
    assert g.select_protocol() == "sticky"
    g.state = STABLE                                        # (an Empty group accepts any)
    assert g.supports_protocols("consumer", [("rr", b""), ("range", b"")])
    assert not g.supports_protocols("consumer", [("rr", b"")])
    assert not g.supports_protocols("connect", [("range", b"")])


def test_an_empty_group_accepts_any_protocol_and_cannot_select_one():
    g = ClassicGroup("g")
    assert g.supports_protocols("anything", [("x", b"")])
    assert not g.supports_protocols("", [("x", b"")]) and not g.supports_protocols("c", [])
    with pytest.raises(IllegalGroupTransition):
        g.select_protocol()


def test_next_generation_selects_the_protocol_and_the_subscribed_topics():
    g = ClassicGroup("g", state=PREPARING_REBALANCE)
    for mid, topics in (("a", ["t1"]), ("b", ["t2"])):
        g.add(member(mid, [("range", encode_subscription(Subscription(topics)))]))
    g.init_next_generation(5)
    assert (g.generation_id, g.state, g.protocol_name) == (1, COMPLETING_REBALANCE, "range")
    assert g.subscribed_topics == {"t1", "t2"}
    assert g.is_subscribed_to_topic("t1") and not g.is_subscribed_to_topic("t3")
    # everyone left: the next generation is Empty, with no protocol and any topic
    g.transition_to(PREPARING_REBALANCE, 6)
    g.remove("a")
    g.remove("b")
    g.init_next_generation(7)
    assert (g.generation_id, g.state, g.protocol_name, g.subscribed_topics) == (2, EMPTY, None, None)
    assert g.is_subscribed_to_topic("anything")


def test_a_non_consumer_group_has_unknown_subscriptions():
    g = ClassicGroup("g", state=PREPARING_REBALANCE)
    g.add(member("a", [("x", b"\xff")], protocol_type="connect"))
    g.init_next_generation(1)
    assert g.subscribed_topics is None and g.is_subscribed_to_topic("t")
