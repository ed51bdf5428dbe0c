"""__consumer_offsets record formats: expected bytes built field by field."""

import struct

import pytest
from hypothesis import given, strategies as st

from workers.groups import records as r


def i16(v): return struct.pack(">h", v)
def i32(v): return struct.pack(">i", v)
def i64(v): return struct.pack(">q", v)
def s(v): return i16(len(v.encode())) + v.encode()            # classic string
def b(v): return i32(len(v)) + v                              # classic bytes
def cs(v): return bytes([len(v.encode()) + 1]) + v.encode()   # compact string (short)
def cb(v): return bytes([len(v) + 1]) + v                     # compact bytes (short)
NULL_STR = i16(-1)
NO_TAGS = b"\x00"


def test_offset_commit_key_v1():
    expected = (i16(1)            # version
                + s("grp")        # group
                + s("topic")      # topic
                + i32(7))         # partition
    assert r.encode_offset_commit_key("grp", "topic", 7) == expected
    assert r.decode_key(expected) == r.OffsetCommitKey("grp", "topic", 7)


def test_offset_commit_key_v0_decodes_like_v1():
    data = i16(0) + s("g") + s("t") + i32(0)
    assert r.encode_offset_commit_key("g", "t", 0, version=0) == data
    assert r.decode_key(data) == r.OffsetCommitKey("g", "t", 0)


def test_group_metadata_key_v2():
    expected = i16(2) + s("my-group")
    assert r.encode_group_metadata_key("my-group") == expected
    assert r.decode_key(expected) == r.GroupMetadataKey("my-group")


def test_unknown_key_version_is_reported_not_raised():
    assert r.decode_key(i16(9) + s("x")) == r.UnknownKey(9)


def test_offset_commit_value_v3():
    v = r.OffsetCommitValue(offset=42, metadata="md", commit_timestamp=1000, leader_epoch=5)
    expected = (i16(3)          # version
                + i64(42)       # offset
                + i32(5)        # leader epoch (v3+)
                + s("md")       # metadata
                + i64(1000))    # commit timestamp
    assert r.encode_offset_commit_value(v) == expected
    assert r.decode_offset_commit_value(expected) == v


def test_offset_commit_value_v1_carries_expire_timestamp():
    v = r.OffsetCommitValue(offset=1, metadata="", commit_timestamp=10, expire_timestamp=99)
    expected = i16(1) + i64(1) + s("") + i64(10) + i64(99)
    assert r.offset_commit_value_version(v) == 1
    assert r.encode_offset_commit_value(v) == expected
    assert r.decode_offset_commit_value(expected) == v


def test_offset_commit_value_v0_and_v2():
    v0 = i16(0) + i64(3) + s("m") + i64(5)
    assert r.decode_offset_commit_value(v0) == r.OffsetCommitValue(3, "m", 5, -1, -1)
    v2 = i16(2) + i64(3) + s("m") + i64(5)
    assert r.decode_offset_commit_value(v2) == r.OffsetCommitValue(3, "m", 5, -1, -1)
    assert r.encode_offset_commit_value(r.OffsetCommitValue(3, "m", 5), version=2) == v2


def test_offset_commit_value_v4_flexible():
    v = r.OffsetCommitValue(offset=42, metadata="md", commit_timestamp=1000, leader_epoch=5)
    expected = (i16(4) + i64(42) + i32(5)
                + cs("md")      # compact string: uvarint(len + 1)
                + i64(1000)
                + NO_TAGS)      # tagged fields: count 0
    assert r.encode_offset_commit_value(v, version=4) == expected
    assert r.decode_offset_commit_value(expected) == v
    # an unknown tagged field is skipped: one field, tag 7, 2 bytes
    with_tag = expected[:-1] + b"\x01" + b"\x07" + b"\x02" + b"hi"
    assert r.decode_offset_commit_value(with_tag) == v


MEMBER = r.MemberMetadataValue(member_id="m-1", group_instance_id="inst", client_id="cid",
                               client_host="/1.2.3.4", rebalance_timeout=30000,
                               session_timeout=10000, subscription=b"SUB", assignment=b"AS")


def test_group_metadata_value_v3():
    v = r.GroupMetadataValue(protocol_type="consumer", generation=4, protocol="range",
                             leader="m-1", current_state_timestamp=123, members=[MEMBER])
    expected = (i16(3)              # version
                + s("consumer")     # protocol type
                + i32(4)            # generation
                + s("range")        # protocol
                + s("m-1")          # leader
                + i64(123)          # current state timestamp (v2+)
                + i32(1)            # members
                + s("m-1")          #   member id
                + s("inst")         #   group instance id (v3+)
                + s("cid")          #   client id
                + s("/1.2.3.4")     #   client host
                + i32(30000)        #   rebalance timeout (v1+)
                + i32(10000)        #   session timeout
                + b(b"SUB")         #   subscription
                + b(b"AS"))         #   assignment
    assert r.encode_group_metadata_value(v) == expected
    assert r.decode_group_metadata_value(expected) == v


def test_group_metadata_value_empty_group_null_protocol():
    v = r.GroupMetadataValue(protocol_type="consumer", generation=2, protocol=None, leader=None,
                             current_state_timestamp=5, members=[])
    expected = i16(3) + s("consumer") + i32(2) + NULL_STR + NULL_STR + i64(5) + i32(0)
    assert r.encode_group_metadata_value(v) == expected
    assert r.decode_group_metadata_value(expected) == v


def test_group_metadata_value_v0_v1_v2():
    member0 = s("m") + s("c") + s("h") + i32(7000) + b(b"S") + b(b"A")
    v0 = i16(0) + s("consumer") + i32(1) + s("range") + s("m") + i32(1) + member0
    got = r.decode_group_metadata_value(v0)
    assert got.current_state_timestamp == -1
    assert got.members[0].rebalance_timeout == got.members[0].session_timeout == 7000
    assert got.members[0].group_instance_id is None
    member1 = s("m") + s("c") + s("h") + i32(9000) + i32(7000) + b(b"S") + b(b"A")
    v1 = i16(1) + s("consumer") + i32(1) + s("range") + s("m") + i32(1) + member1
    assert r.decode_group_metadata_value(v1).members[0].rebalance_timeout == 9000
    v2 = i16(2) + s("consumer") + i32(1) + s("range") + s("m") + i64(77) + i32(1) + member1
    assert r.decode_group_metadata_value(v2).current_state_timestamp == 77


def test_group_metadata_value_v4_flexible():
    v = r.GroupMetadataValue(protocol_type="consumer", generation=4, protocol="range",
                             leader=None, current_state_timestamp=123, members=[MEMBER])
    expected = (i16(4) + cs("consumer") + i32(4) + cs("range")
                + b"\x00"                                 # null compact string
                + i64(123)
                + b"\x02"                                 # compact array: 1 member
                + cs("m-1") + cs("inst") + cs("cid") + cs("/1.2.3.4")
                + i32(30000) + i32(10000) + cb(b"SUB") + cb(b"AS")
                + NO_TAGS                                 # member tagged fields
                + NO_TAGS)                                # value tagged fields
    assert r.encode_group_metadata_value(v, version=4) == expected
    assert r.decode_group_metadata_value(expected) == v


@pytest.mark.parametrize("data", [b"", i16(1), i16(1) + s("g") + s("t"), i16(2) + s("g") + b"x"])
def test_corrupt_keys_raise(data):
    with pytest.raises(r.RecordFormatError):
        r.decode_key(data)


@pytest.mark.parametrize("data", [b"", i16(3) + i64(1),
                                  i16(3) + i64(1) + i32(0) + s("m") + i64(1) + b"x",
                                  i16(3) + i64(1) + i32(0) + i16(5) + b"ab"])
def test_corrupt_values_raise(data):
    with pytest.raises(r.RecordFormatError):
        r.decode_offset_commit_value(data)


def test_unknown_value_versions_raise():
    with pytest.raises(r.RecordFormatError):
        r.decode_offset_commit_value(i16(5) + i64(1))
    with pytest.raises(r.RecordFormatError):
        r.decode_group_metadata_value(i16(9))


names = st.text(max_size=20)


@given(names, names, st.integers(-2**31, 2**31 - 1), st.integers(0, 2**62), names,
       st.integers(0, 2**40), st.integers(-1, 2**31 - 1), st.sampled_from([0, 1, 2, 3, 4]))
def test_offset_round_trip(group, topic, partition, offset, metadata, ts, epoch, version):
    assert r.decode_key(r.encode_offset_commit_key(group, topic, partition)) == r.OffsetCommitKey(group, topic, partition)
    v = r.OffsetCommitValue(offset, metadata, ts, epoch if version >= 3 else -1,
                            ts + 1 if version == 1 else -1)
    assert r.decode_offset_commit_value(r.encode_offset_commit_value(v, version)) == v


@given(st.lists(st.tuples(names, st.none() | names, st.binary(max_size=300), st.binary(max_size=300)), max_size=5),
       st.sampled_from([3, 4]))
def test_group_round_trip(members, version):
    v = r.GroupMetadataValue("consumer", 3, "range", "x", 9, [
        r.MemberMetadataValue(mid, "c", "h", 1, 2, sub, asg, iid) for mid, iid, sub, asg in members])
    assert r.decode_group_metadata_value(r.encode_group_metadata_value(v, version)) == v
