"""Varints (storage/varint.py): Kafka's vectors, limits, and a round-trip property."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import varint as V
from storage.errors import CorruptRecordError


@pytest.mark.parametrize("value,encoded", [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-64, b"\x7f"),
    (64, b"\x80\x01"), (300, b"\xd8\x04"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
])
def test_varint_vectors(value, encoded):
    assert V.encode_varint(value) == encoded
    assert V.decode_varint(encoded) == (value, len(encoded))
    assert V.decode_varlong(encoded + b"\x99") == (value, len(encoded))


def test_varlong_extremes_and_limits():
    for value in (2**63 - 1, -(2**63), 2**40, -(2**40)):
        encoded = V.encode_varint(value)
        assert V.decode_varlong(encoded) == (value, len(encoded))
    with pytest.raises(CorruptRecordError, match="longer"):
        V.decode_varint(b"\x80" * 6)
    with pytest.raises(CorruptRecordError, match="truncated"):
        V.decode_varlong(b"\x80\x80")
    with pytest.raises(CorruptRecordError):
        V.decode_varlong(b"\xff" * 11)
    assert V.encode_uvarint(300) == b"\xac\x02"
    assert V.decode_uvarint(b"\xac\x02") == (300, 2)
    with pytest.raises(ValueError):
        V.encode_uvarint(-1)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value):
    encoded = V.encode_varint(value)
    assert V.decode_varlong(encoded) == (value, len(encoded))
    if -(2**31) <= value < 2**31:
        assert V.decode_varint(encoded) == (value, len(encoded))


def test_fast_paths_agree_with_the_decoders():
    for value in (0, -1, 63, -64, 64, 2**31 - 1, -(2**40)):
        encoded = V.encode_varint(value) + b"\x00"
        assert V.varlong_at(encoded, 0, len(encoded)) == V.decode_varlong(encoded)
        if -(2**31) <= value < 2**31:
            assert V.varint_at(encoded, 0, len(encoded)) == V.decode_varint(encoded)
