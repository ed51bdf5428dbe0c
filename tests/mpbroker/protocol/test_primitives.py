"""Reader/Writer and varint helpers."""
import struct

import pytest
from hypothesis import given, strategies as st

from mpbroker.protocol.errors import ProtocolError
from mpbroker.protocol.primitives import (
    Reader, Writer, read_uvarint, read_varint, read_varlong, uvarint_bytes, varint_bytes,
    varlong_bytes,
)


def test_uvarint_known_values():
    assert uvarint_bytes(0) == b"\x00"
    assert uvarint_bytes(127) == b"\x7f"
    assert uvarint_bytes(128) == b"\x80\x01"
    assert uvarint_bytes(300) == b"\xac\x02"
    assert uvarint_bytes(2**32 - 1) == b"\xff\xff\xff\xff\x0f"
    assert read_uvarint(b"\xac\x02", 0) == (300, 2)


def test_varint_zigzag():
    assert varint_bytes(0) == b"\x00" and varint_bytes(-1) == b"\x01" and varint_bytes(1) == b"\x02"
    assert varint_bytes(-64) == b"\x7f" and varint_bytes(64) == b"\x80\x01"
    assert read_varint(varint_bytes(-2**31), 0)[0] == -2**31
    assert read_varlong(varlong_bytes(2**63 - 1), 0)[0] == 2**63 - 1


def test_uvarint_too_long():
    with pytest.raises(ProtocolError):
        read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)
    r = Reader(b"\xff\xff\xff\xff\xff\x01")
    r.uvarint()
    assert not r.ok


@given(st.integers(0, 2**32 - 1))
def test_uvarint_round_trip(n):
    data = uvarint_bytes(n)
    assert read_uvarint(data, 0) == (n, len(data))


@given(st.integers(-2**63, 2**63 - 1))
def test_varlong_round_trip(n):
    data = varlong_bytes(n)
    assert read_varlong(data, 0) == (n, len(data))


def test_writer_reader_round_trip():
    w = Writer()
    w.int8(-1); w.int16(-2); w.uint16(65535); w.int32(-3); w.uint32(2**32 - 1); w.int64(-4)
    w.float64(1.5); w.bool(True); w.uuid(bytes(range(16))); w.uvarint(300); w.varint(-5)
    w.varlong(-6); w.string("héllo"); w.nullable_string(None); w.compact_string("c")
    w.compact_nullable_string(None); w.bytes(b"ab"); w.nullable_bytes(None)
    w.compact_bytes(b"x"); w.compact_nullable_bytes(None); w.array_len(2); w.array_len(None)
    w.compact_array_len(1); w.compact_array_len(None); w.tagged_fields({3: b"z", 1: b""})
    r = Reader(w.getvalue())
    assert [r.int8(), r.int16(), r.uint16(), r.int32(), r.uint32(), r.int64()] == \
        [-1, -2, 65535, -3, 2**32 - 1, -4]
    assert r.float64() == 1.5 and r.bool() is True and r.uuid() == bytes(range(16))
    assert (r.uvarint(), r.varint(), r.varlong()) == (300, -5, -6)
    assert (r.string(), r.nullable_string(), r.compact_string(), r.compact_nullable_string()) == \
        ("héllo", None, "c", None)
    assert (r.bytes(), r.nullable_bytes(), r.compact_bytes(), r.compact_nullable_bytes()) == \
        (b"ab", None, b"x", None)
    assert r.array_len() == 2 and r.array_len() == -1
    assert r.compact_array_len() == 1 and r.compact_array_len() == -1
    tags = r.tagged_fields()
    assert {k: bytes(v) for k, v in tags.items()} == {1: b"", 3: b"z"}
    assert r.remaining == 0
    r.complete()


def test_reader_goes_bad_once_and_is_checked_at_the_end():
    r = Reader(struct.pack(">h", 7))
    assert r.int16() == 7
    assert r.int32() == 0 and r.int64() == 0 and r.string() == ""   # no exception per read
    assert not r.ok
    with pytest.raises(ProtocolError):
        r.complete()


def test_reader_rejects_lengths_beyond_the_input_before_allocating():
    r = Reader(struct.pack(">i", 2**31 - 1))
    assert r.bytes() == b"" and not r.ok
    r = Reader(struct.pack(">i", 1000) + b"xx")
    assert r.array_len() == 0 and not r.ok
    r = Reader(struct.pack(">h", -1))
    assert r.string() == "" and not r.ok             # null in a non-nullable string


def test_reader_end_bound():
    r = Reader(b"\x00\x01\x00\x02", 0, 2)
    assert r.int16() == 1
    r.int16()
    assert not r.ok


def test_versioned_struct_classic_and_flexible():
    from mpbroker.protocol.primitives import VersionedReader, VersionedWriter
    for flexible in (False, True):
        w = VersionedWriter(flexible)
        w.field_string("ab")
        w.field_string(None)
        w.field_bytes(b"xyz")
        w.field_array_len(2)
        w.field_array_len(None)
        w.end_struct({1: b"\x07"})
        data = w.getvalue()
        if flexible:
            assert data == b"\x03ab\x00\x04xyz\x03\x00\x01\x01\x01\x07"
        else:
            assert data == (b"\x00\x02ab\xff\xff\x00\x00\x00\x03xyz\x00\x00\x00\x02"
                            b"\xff\xff\xff\xff")
        r = VersionedReader(data, flexible)
        assert r.field_string() == "ab" and r.field_string(nullable=True) is None
        assert r.field_bytes() == b"xyz" and r.field_array_len() == 2
        assert r.field_array_len(nullable=True) == -1
        assert {k: bytes(v) for k, v in r.end_struct().items()} == ({1: b"\x07"} if flexible else {})
        assert r.ok and r.remaining == 0


def test_versioned_reader_goes_bad_on_null_where_not_allowed():
    from mpbroker.protocol.primitives import VersionedReader
    r = VersionedReader(b"\xff\xff\xff\xff")
    assert r.field_array_len() == 0 and not r.ok
    r = VersionedReader(b"\xff\xff")
    r.field_string()
    assert not r.ok
