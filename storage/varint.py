"""Kafka's base-128 varints and their zig-zag signed forms: the one implementation.

    uvarint   7 bits a byte, least significant first, high bit set on every byte but
              the last (protobuf); at most 5 bytes for 32 bits, 10 for 64
    varint    zig-zag (0 -> 0, -1 -> 1, 1 -> 2, ...) then uvarint; varlong the same, 64-bit

Storage is the lowest layer, so the encoders live here and the protocol layer
(mpbroker/protocol/primitives.py) re-uses them. The decoders here serve record batches
(storage/batch.py, storage/validator.py): they take a `limit` (the record's end) and
raise CorruptRecordError, and `varint_at` / `varlong_at` add a one-byte fast path for
the record decoding of the produce and fetch paths. The protocol's Reader decodes its
own (primitives.read_uvarint: a short read marks the reader bad instead of raising).
"""
from __future__ import annotations

from storage.errors import CorruptRecordError

_SMALL = [bytes([n]) for n in range(0x80)]


def encode_uvarint(value: int) -> bytes:
    """Unsigned base-128 varint (protocol compact lengths, record fields after zig-zag)."""
    if value < 0:
        raise ValueError(f"uvarint of a negative number {value}")
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint/varlong (both encode the same way): 0 -> 00, -1 -> 01, 1 -> 02."""
    if not -(2**63) <= value < 2**63:
        raise ValueError("varlong out of int64 range")
    return encode_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def decode_uvarint(buf, pos: int = 0, max_bytes: int = 5, limit: int = None):
    """Return (value, next_pos). Raises CorruptRecordError when truncated or too long."""
    end = len(buf) if limit is None else limit
    result = 0
    shift = 0
    stop = min(end, pos + max_bytes)
    while pos < stop:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    if pos >= end:
        raise CorruptRecordError("truncated varint")
    raise CorruptRecordError("varint longer than %d bytes" % max_bytes)


def decode_varint(buf, pos: int = 0, limit: int = None):
    """Zig-zag int32 varint (at most 5 bytes). Return (value, next_pos)."""
    raw, pos = decode_uvarint(buf, pos, 5, limit)
    raw &= 0xFFFFFFFF           # what Java's int arithmetic keeps of a 5th byte
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf, pos: int = 0, limit: int = None):
    """Zig-zag int64 varlong (at most 10 bytes). Return (value, next_pos)."""
    raw, pos = decode_uvarint(buf, pos, 10, limit)
    raw &= 0xFFFFFFFFFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def varint_at(data, pos: int, limit: int):
    """`decode_varint` with a fast path for the one-byte case, which is nearly every
    record field (the record decoding of storage/batch.py)."""
    if pos < limit:
        b = data[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    return decode_varint(data, pos, limit)


def varlong_at(data, pos: int, limit: int):
    """`decode_varlong` with the same fast path."""
    if pos < limit:
        b = data[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    return decode_varlong(data, pos, limit)
