"""Kafka's primitive encodings: a Reader, a Writer, and the varint helpers.

Wire formats (all fixed-width integers big-endian):

* int8/16/32/64, uint16/32, float64 (IEEE-754), bool (1 byte, non-zero is true),
  uuid (16 raw bytes);
* uvarint: protobuf base-128, at most 5 bytes for 32 bits (10 for uvarlong);
  varint/varlong: zig-zag, then base-128;
* classic string: int16 length + UTF-8 (-1: null); classic bytes: int32 length
  (-1: null); classic array: int32 count (-1: null);
* compact string/bytes/array (flexible versions): uvarint of length+1 (0: null);
* tagged fields: uvarint count, then (uvarint tag, uvarint size, data) per field.

One reader and writer for every codec above storage: the protocol's messages (the
generated codec.py compiles its own decoders from the same rules), and the records of
the internal topics (`VersionedReader` / `VersionedWriter`: workers/groups/records.py,
workers/txn/records.py, workers/groups/consumer_metadata.py). The varint encoders are
storage's (storage/varint.py: storage is the lowest layer and record batches need them).

The Reader follows franz-go's kbin: a read past the end does not raise; it marks the
reader bad and returns a zero value, and the caller checks once, at the end, with
`complete()` (which raises ProtocolError). A length or count larger than the bytes
left is "bad" before anything is allocated. The codec's compiled decoders do the same
without a Reader object: they read with precompiled structs and catch the one error
at the end of the message (see codec.py).
"""
from __future__ import annotations

import struct

from storage.varint import encode_uvarint as uvarint_bytes
from storage.varint import encode_varint

from .errors import ProtocolError

_b = struct.Struct(">b")
_h = struct.Struct(">h")
_H = struct.Struct(">H")
_i = struct.Struct(">i")
_I = struct.Struct(">I")
_q = struct.Struct(">q")
_d = struct.Struct(">d")

ZERO_UUID = bytes(16)


# ------------------------------------------------------------- varint helpers

def read_uvarint(buf, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """(value, new pos). Raises IndexError past the end, ProtocolError when too long."""
    value = 0
    shift = 0
    for i in range(max_bytes):
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + i + 1
        shift += 7
    raise ProtocolError("varint is too long")


def unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def varint_bytes(n: int) -> bytes:
    if not -0x80000000 <= n <= 0x7FFFFFFF:
        raise ValueError(f"varint out of range: {n}")
    return encode_varint(n)     # zig-zag 64 and 32 agree on int32 values


def varlong_bytes(n: int) -> bytes:
    return encode_varint(n)


def read_varint(buf, pos: int) -> tuple[int, int]:
    v, pos = read_uvarint(buf, pos, 5)
    if v > 0xFFFFFFFF:
        raise ProtocolError("varint out of range")
    return unzigzag(v), pos


def read_varlong(buf, pos: int) -> tuple[int, int]:
    v, pos = read_uvarint(buf, pos, 10)
    if v > 0xFFFFFFFFFFFFFFFF:
        raise ProtocolError("varlong out of range")
    return unzigzag(v), pos


# ------------------------------------------------------------------- Reader

class Reader:
    """Reads primitives from `buf[pos:end]`; goes bad instead of raising.

    >>> r = Reader(b"\\x00\\x01"); r.int16(), r.int32(), r.ok
    (1, 0, False)
    """
    __slots__ = ("buf", "pos", "end", "bad")

    def __init__(self, buf, pos: int = 0, end: int | None = None):
        self.buf = memoryview(buf) if not isinstance(buf, memoryview) else buf
        self.pos = pos
        self.end = len(self.buf) if end is None else end
        self.bad = False

    @property
    def ok(self) -> bool:
        return not self.bad

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def complete(self) -> None:
        """Raise ProtocolError if any read ran short (kbin's Complete)."""
        if self.bad:
            raise ProtocolError(f"message truncated or malformed near byte {self.pos}")

    def _fixed(self, s: struct.Struct, zero):
        pos = self.pos
        if self.bad or pos + s.size > self.end:
            self.bad = True
            return zero
        self.pos = pos + s.size
        return s.unpack_from(self.buf, pos)[0]

    def int8(self) -> int: return self._fixed(_b, 0)
    def int16(self) -> int: return self._fixed(_h, 0)
    def uint16(self) -> int: return self._fixed(_H, 0)
    def int32(self) -> int: return self._fixed(_i, 0)
    def uint32(self) -> int: return self._fixed(_I, 0)
    def int64(self) -> int: return self._fixed(_q, 0)
    def float64(self) -> float: return self._fixed(_d, 0.0)

    def bool(self) -> bool:
        return self._fixed(_b, 0) != 0

    def span(self, n: int) -> memoryview:
        """The next n bytes as a view (no copy); empty and bad when short."""
        pos = self.pos
        if self.bad or n < 0 or n > self.end - pos:
            self.bad = True
            return self.buf[0:0]
        self.pos = pos + n
        return self.buf[pos:pos + n]

    def uuid(self) -> bytes:
        v = self.span(16)
        return bytes(v) if not self.bad else ZERO_UUID

    def _varint(self, max_bytes: int) -> int:
        if self.bad:
            return 0
        try:
            v, pos = read_uvarint(self.buf, self.pos, max_bytes)
        except (IndexError, ProtocolError):
            self.bad = True
            return 0
        if pos > self.end:
            self.bad = True
            return 0
        self.pos = pos
        return v

    def uvarint(self) -> int: return self._varint(5)
    def uvarlong(self) -> int: return self._varint(10)
    def varint(self) -> int: return unzigzag(self._varint(5))
    def varlong(self) -> int: return unzigzag(self._varint(10))

    def _text(self, n: int, nullable: bool) -> str | None:
        if n < 0:
            if not nullable:
                self.bad = True
                return ""
            return None
        v = self.span(n)
        return str(v, "utf-8", "replace") if not self.bad else ""

    def string(self) -> str: return self._text(self.int16(), False)
    def nullable_string(self) -> str | None: return self._text(self.int16(), True)
    def compact_string(self) -> str: return self._text(self.uvarint() - 1, False)
    def compact_nullable_string(self) -> str | None: return self._text(self.uvarint() - 1, True)

    def _blob(self, n: int, nullable: bool) -> bytes | None:
        if n < 0:
            if not nullable:
                self.bad = True
                return b""
            return None
        return bytes(self.span(n))

    def bytes(self) -> bytes: return self._blob(self.int32(), False)
    def nullable_bytes(self) -> bytes | None: return self._blob(self.int32(), True)
    def compact_bytes(self) -> bytes: return self._blob(self.uvarint() - 1, False)
    def compact_nullable_bytes(self) -> bytes | None: return self._blob(self.uvarint() - 1, True)

    def _count(self, n: int) -> int:
        """An array count: -1 stays -1 (null); larger than the bytes left is bad."""
        if n < -1 or n > self.end - self.pos:
            self.bad = True
            return 0
        return n

    def array_len(self) -> int: return self._count(self.int32())
    def compact_array_len(self) -> int: return self._count(self.uvarint() - 1)

    def tagged_fields(self) -> dict[int, memoryview]:
        """Read a tagged-field section; return {tag: raw data view}."""
        out: dict[int, memoryview] = {}
        n = self._count(self.uvarint())
        for _ in range(n):
            tag = self.uvarint()
            data = self.span(self.uvarint())
            if self.bad:
                break
            out[tag] = data
        return out


# ------------------------------------------------------------------- Writer

class Writer:
    """Appends primitives to a bytearray; `getvalue()` returns bytes."""
    __slots__ = ("buf",)

    def __init__(self):
        self.buf = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def int8(self, v: int) -> None: self.buf += _b.pack(v)
    def int16(self, v: int) -> None: self.buf += _h.pack(v)
    def uint16(self, v: int) -> None: self.buf += _H.pack(v)
    def int32(self, v: int) -> None: self.buf += _i.pack(v)
    def uint32(self, v: int) -> None: self.buf += _I.pack(v)
    def int64(self, v: int) -> None: self.buf += _q.pack(v)
    def float64(self, v: float) -> None: self.buf += _d.pack(v)
    def bool(self, v: bool) -> None: self.buf.append(1 if v else 0)

    def uuid(self, v: bytes) -> None:
        if len(v) != 16:
            raise ValueError("uuid must be 16 bytes")
        self.buf += v

    def raw(self, data) -> None: self.buf += data
    def uvarint(self, v: int) -> None: self.buf += uvarint_bytes(v)
    def uvarlong(self, v: int) -> None: self.buf += uvarint_bytes(v)
    def varint(self, v: int) -> None: self.buf += varint_bytes(v)
    def varlong(self, v: int) -> None: self.buf += varlong_bytes(v)

    def string(self, v: str) -> None:
        data = v.encode("utf-8")
        self.buf += _h.pack(len(data))
        self.buf += data

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self.buf += b"\xff\xff"
        else:
            self.string(v)

    def compact_string(self, v: str) -> None:
        data = v.encode("utf-8")
        self.buf += uvarint_bytes(len(data) + 1)
        self.buf += data

    def compact_nullable_string(self, v: str | None) -> None:
        if v is None:
            self.buf.append(0)
        else:
            self.compact_string(v)

    def bytes(self, v) -> None:
        self.buf += _i.pack(len(v))
        self.buf += v

    def nullable_bytes(self, v) -> None:
        if v is None:
            self.buf += b"\xff\xff\xff\xff"
        else:
            self.bytes(v)

    def compact_bytes(self, v) -> None:
        self.buf += uvarint_bytes(len(v) + 1)
        self.buf += v

    def compact_nullable_bytes(self, v) -> None:
        if v is None:
            self.buf.append(0)
        else:
            self.compact_bytes(v)

    def array_len(self, n: int | None) -> None:
        self.buf += _i.pack(-1 if n is None else n)

    def compact_array_len(self, n: int | None) -> None:
        self.buf += uvarint_bytes(0 if n is None else n + 1)

    def tagged_fields(self, fields: dict[int, bytes] | None = None) -> None:
        """Write a tagged-field section from {tag: encoded data}, tags ascending."""
        fields = fields or {}
        self.buf += uvarint_bytes(len(fields))
        for tag in sorted(fields):
            data = fields[tag]
            self.buf += uvarint_bytes(tag)
            self.buf += uvarint_bytes(len(data))
            self.buf += data


# ------------------------------------------------------------------- versioned structs

class VersionedReader(Reader):
    """A Reader for one version of a versioned struct (the records of the internal
    topics, workers/groups/records.py and workers/txn/records.py): `flexible` (Kafka's
    flexibleVersions) picks compact strings, bytes and arrays and a tagged-field section
    at the end of each struct, as the generated code does. A null array or bytes where
    none is allowed makes the reader bad, like a short read."""
    __slots__ = ("flexible",)

    def __init__(self, buf, flexible: bool = False):
        super().__init__(buf)
        self.flexible = flexible

    def _length(self, classic) -> int:
        return self.uvarint() - 1 if self.flexible else classic()

    def field_string(self, nullable: bool = False) -> str | None:
        return self._text(self._length(self.int16), nullable)

    def field_bytes(self) -> bytes:
        return self._blob(self._length(self.int32), False)

    def field_array_len(self, nullable: bool = False) -> int:
        """The count; -1 for a null array where `nullable`."""
        n = self._count(self._length(self.int32))
        if n < 0 and not nullable:
            self.bad = True
            return 0
        return n

    def end_struct(self) -> dict[int, memoryview]:
        """The struct's tagged fields ({} when not flexible)."""
        return self.tagged_fields() if self.flexible else {}


class VersionedWriter(Writer):
    """The Writer counterpart of `VersionedReader`."""
    __slots__ = ("flexible",)

    def __init__(self, flexible: bool = False):
        super().__init__()
        self.flexible = flexible

    def _length(self, n: int, classic) -> None:
        if self.flexible:
            self.buf += uvarint_bytes(n + 1)
        else:
            self.buf += classic.pack(n)

    def field_string(self, v: str | None) -> None:
        if v is None:
            self._length(-1, _h)
            return
        data = v.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        self._length(len(data), _h)
        self.buf += data

    def field_bytes(self, v) -> None:
        self._length(len(v), _i)
        self.buf += v

    def field_array_len(self, n: int | None) -> None:
        self._length(-1 if n is None else n, _i)

    def end_struct(self, fields: dict[int, bytes] | None = None) -> None:
        if self.flexible:
            self.tagged_fields(fields)
