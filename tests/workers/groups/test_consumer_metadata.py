"""workers/groups/consumer_metadata.py: the "consumer" protocol's subscription and
assignment bytes, per version, a newer version read with the newest known layout, and
the subscribed topics of a group (None when a member's bytes do not parse)."""
from __future__ import annotations

import struct

import pytest

from workers.groups.consumer_metadata import (
    Assignment, Subscription, encode_assignment, encode_subscription, parse_assignment,
    parse_subscription, subscribed_topics)
from workers.groups.records import RecordFormatError

FULL = Subscription(["a", "b"], b"ud", [("a", [0, 2])], generation_id=7, rack_id="r1")


@pytest.mark.parametrize("version,expect", [
    (0, Subscription(["a", "b"], b"ud")),
    (1, Subscription(["a", "b"], b"ud", [("a", [0, 2])])),
    (2, Subscription(["a", "b"], b"ud", [("a", [0, 2])], generation_id=7)),
    (3, FULL),
])
def test_subscription_keeps_the_fields_of_its_version(version, expect):
    assert parse_subscription(encode_subscription(FULL, version)) == expect


def test_a_newer_subscription_is_read_with_the_newest_layout_trailing_bytes_ignored():
    newer = bytearray(encode_subscription(FULL, 3))
    newer[0:2] = struct.pack(">h", 9)
    assert parse_subscription(bytes(newer) + b"\x00\x01future") == FULL


def test_assignment_round_trip_and_null_user_data():
    a = Assignment([("t", [1, 3]), ("u", [])], None)
    assert parse_assignment(encode_assignment(a)) == a
    assert parse_assignment(encode_assignment(Assignment([], b"x"), 0)) == Assignment([], b"x")


@pytest.mark.parametrize("buf", [
    b"",                                            # nothing
    struct.pack(">h", -1),                          # a negative version
    encode_subscription(FULL, 3)[:-3],              # truncated
])
def test_bad_subscription_bytes_raise_record_format_error(buf):
    with pytest.raises(RecordFormatError):
        parse_subscription(buf)


def test_bad_assignment_bytes_raise_record_format_error():
    with pytest.raises(RecordFormatError):
        parse_assignment(struct.pack(">h", -2))
    with pytest.raises(RecordFormatError):
        parse_assignment(encode_assignment(Assignment([("t", [1])]))[:-2])


def test_subscribed_topics_is_the_union_or_none_when_one_does_not_parse():
    subs = [encode_subscription(Subscription(["a", "b"])), encode_subscription(Subscription(["b", "c"]), 0)]
    assert subscribed_topics(subs) == {"a", "b", "c"}
    assert subscribed_topics([]) == set()
    assert subscribed_topics(subs + [b"\x00"]) is None
