"""Frames and headers, without I/O.

Every request and response on a Kafka connection is `int32 size` + `size` bytes.

Request header (the header version follows from the API and its version):

    v0  api_key int16, api_version int16, correlation_id int32      (ControlledShutdown v0 only)
    v1  v0 + client_id: classic nullable string (int16 length, -1 = null)
    v2  v1 + tagged-field section                                     (flexible request versions)

client_id keeps the classic int16 length in v2 so that any broker can read the header
of an ApiVersions request of a version it does not know.

Response header: v0 `correlation_id int32`; v1 adds a tagged-field section and is used
for flexible versions, except by ApiVersions, whose responses always use v0 (a client
must be able to read them before it knows which versions the broker speaks).

`FrameReader` splits a byte stream into frames, like h11's reader: feed it what the
socket gave, get complete frames back; a size prefix that is negative or above
`max_bytes` (`socket.request.max.bytes`) raises FrameTooLarge as soon as the prefix
is seen, so an incomplete frame never buffers more than the cap. Memory follows the
bytes that arrived, never the size a prefix declares: a 5-byte header announcing
100 MB costs 5 bytes until the 100 MB are actually sent.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from storage.slices import FileSlice

from . import api_keys, codec
from .errors import ErrorCode, FrameTooLarge, ProtocolError, UnsupportedVersion
from .primitives import read_uvarint

DEFAULT_MAX_BYTES = 104857600      # socket.request.max.bytes

_HHI = struct.Struct(">hhi")
_h = struct.Struct(">h")
_i = struct.Struct(">i")
_ii = struct.Struct(">ii")
# the header version of each (api key, version) seen, as request_header_version and
# response_header_version answer it: the versions the schemas define only (a few
# thousand pairs at most), whatever versions clients send
_REQUEST_HEADERS: dict[tuple[int, int], int] = {}
_FLEXIBLE_RESPONSES: dict[tuple[int, int], bool] = {}


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int


def request_header_version(api_key: int, api_version: int) -> int:
    """0, 1 or 2. Raises UnsupportedVersion for an API key we do not define."""
    msg = codec.REQUESTS.get(api_key)
    if msg is None:
        raise UnsupportedVersion(api_key, api_version, f"unknown api key {api_key}")
    if api_key == api_keys.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if msg.flexible_from is not None and api_version >= msg.flexible_from else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == api_keys.API_VERSIONS:
        return 0
    msg = codec.RESPONSES.get(api_key)
    if msg is None:
        raise UnsupportedVersion(api_key, api_version, f"unknown api key {api_key}")
    return 1 if msg.flexible_from is not None and api_version >= msg.flexible_from else 0


def parse_request_header(buf) -> tuple[RequestHeader, int]:
    """Parse the header at the start of a request frame; returns (header, body_pos).

    The version is not checked against the API's range (the dispatcher decides:
    KIP-511 answer for ApiVersions, closed connection otherwise); an unknown API key
    raises UnsupportedVersion, short or malformed bytes ProtocolError.
    """
    if type(buf) is not memoryview:
        buf = memoryview(buf)
    end = len(buf)
    if end < 8:
        raise ProtocolError("request header truncated")
    api_key, api_version, correlation_id = _HHI.unpack_from(buf, 0)
    header_version = _REQUEST_HEADERS.get((api_key, api_version))
    if header_version is None:      # (a defined pair is looked up once: it never changes)
        header_version = request_header_version(api_key, api_version)
        lo, hi = codec.REQUESTS[api_key].valid_versions
        if lo <= api_version <= hi:
            _REQUEST_HEADERS[(api_key, api_version)] = header_version
    pos = 8
    client_id = None
    if header_version >= 1:
        if end < 10:
            raise ProtocolError("request header truncated")
        n = _h.unpack_from(buf, 8)[0]
        pos = 10
        if n >= 0:
            if n > end - pos:
                raise ProtocolError("client_id longer than the frame")
            client_id = str(buf[pos:pos + n], "utf-8", "replace")
            pos += n
    if header_version >= 2:
        if pos < end and buf[pos] == 0:
            pos += 1                # no tagged fields: what every client sends
        else:
            pos = _skip_tagged_fields(buf, pos, end)
    return RequestHeader(api_key, api_version, correlation_id, client_id, header_version), pos


def _skip_tagged_fields(buf, pos: int, end: int) -> int:
    try:
        count, pos = read_uvarint(buf, pos)
        if count > end - pos:
            raise ProtocolError("too many tagged fields in the header")
        for _ in range(count):
            _tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            if size > end - pos:
                raise ProtocolError("header tagged field past the end")
            pos += size
    except IndexError:
        raise ProtocolError("request header truncated") from None
    return pos


def encode_request_header(api_key: int, api_version: int, correlation_id: int,
                          client_id: str | None) -> bytes:
    header_version = request_header_version(api_key, api_version)
    out = bytearray(_HHI.pack(api_key, api_version, correlation_id))
    if header_version >= 1:
        if client_id is None:
            out += b"\xff\xff"
        else:
            data = client_id.encode("utf-8")
            out += _h.pack(len(data)) + data
    if header_version >= 2:
        out.append(0)
    return bytes(out)


def frame_request(api_key: int, api_version: int, correlation_id: int,
                  client_id: str | None, body: dict) -> bytes:
    """A whole request frame (size + header + body): for tests and the replica fetcher."""
    data = encode_request_header(api_key, api_version, correlation_id, client_id) + \
        codec.encode_request(api_key, api_version, body)
    return _i.pack(len(data)) + data


def frame_response(api_key: int, api_version: int, correlation_id: int, body_chunks: list) -> list:
    """[size + response header, *body_chunks]; the chunks are passed through."""
    body_len = 0
    for c in body_chunks:
        body_len += c.length if isinstance(c, FileSlice) else len(c)
    flexible = _FLEXIBLE_RESPONSES.get((api_key, api_version))
    if flexible is None:
        flexible = response_header_version(api_key, api_version) == 1
        msg = codec.RESPONSES.get(api_key)
        if msg is not None and msg.valid_versions[0] <= api_version <= msg.valid_versions[1]:
            _FLEXIBLE_RESPONSES[(api_key, api_version)] = flexible
    if not flexible:
        head = _ii.pack(body_len + 4, correlation_id)
    else:
        head = _ii.pack(body_len + 5, correlation_id) + b"\x00"
    return [head, *body_chunks]


def parse_response_header(buf, api_key: int, api_version: int) -> tuple[int, int]:
    """(correlation_id, body_pos) of a response frame (without its size prefix)."""
    if type(buf) is not memoryview:
        buf = memoryview(buf)
    if len(buf) < 4:
        raise ProtocolError("response header truncated")
    correlation_id = _i.unpack_from(buf, 0)[0]
    pos = 4
    if response_header_version(api_key, api_version) == 1:
        pos = _skip_tagged_fields(buf, pos, len(buf))
    return correlation_id, pos


def api_versions_fallback(correlation_id: int, api_versions_range: tuple[int, int] | None = None) -> list:
    """The KIP-511 answer to an ApiVersions request of a version we do not support:
    an ApiVersionsResponse v0 with UNSUPPORTED_VERSION and our ApiVersions range, so
    that the client retries with a version from it. Returns framed chunks."""
    lo, hi = api_versions_range or codec.REQUESTS[api_keys.API_VERSIONS].valid_versions
    body = codec.encode_response(api_keys.API_VERSIONS, 0, {
        "error_code": int(ErrorCode.UNSUPPORTED_VERSION),
        "api_keys": [{"api_key": api_keys.API_VERSIONS, "min_version": lo, "max_version": hi}],
    })
    return frame_response(api_keys.API_VERSIONS, 0, correlation_id, body)


class FrameReader:
    """Incremental frame splitter: `feed(data) -> [memoryview frame, ...]`.

    Frames are returned without their size prefix, as views over buffers that no later
    feed changes (the caller may keep them; `feed` never keeps a view of `data`, so the
    caller may reuse its read buffer): small frames over immutable bytes, a frame
    larger than BIG_FRAME that arrives in pieces over a bytearray of its own, filled
    piece by piece (one copy per byte instead of accumulate + cut) and writable, so the
    log assigns offsets in place without copying the batch again. That bytearray is
    never allocated at the declared size up front: it starts with what arrived and
    doubles (capped at the declared size) when full, so it holds at most twice the bytes
    that arrived, and the bytes are copied at most twice in all (growing a bytearray by
    each piece would copy the whole frame again at each piece). Bytes of an incomplete
    frame stay buffered (at most max_bytes + 4).
    """
    __slots__ = ("max_bytes", "_buf", "_big", "_big_got", "_big_size")

    BIG_FRAME = 64 * 1024

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._big: bytearray | None = None     # a large frame being filled
        self._big_got = 0                      # ... bytes of it so far
        self._big_size = 0                     # ... the size its prefix declared

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (that arrived; the buffer may be larger)."""
        return len(self._buf) + (self._big_got + 4 if self._big is not None else 0)

    @property
    def missing(self) -> int:
        """Bytes still to arrive to complete the frame in progress (0: none is; while
        its size prefix is incomplete, the rest of the prefix)."""
        if self._big is not None:
            return self._big_size - self._big_got
        n = len(self._buf)
        if n == 0:
            return 0
        if n < 4:
            return 4 - n
        return 4 + _i.unpack_from(self._buf, 0)[0] - n

    def _split(self, src) -> tuple[list[tuple[int, int]], int]:
        spans = []
        pos = 0
        n = len(src)
        max_bytes = self.max_bytes
        while n - pos >= 4:
            size = _i.unpack_from(src, pos)[0]
            if size < 0 or size > max_bytes:
                raise FrameTooLarge(size, max_bytes)
            if n - pos - 4 < size:
                break
            spans.append((pos + 4, pos + 4 + size))
            pos += 4 + size
        return spans, pos

    def feed(self, data) -> list[memoryview]:
        out: list[memoryview] = []
        if self._big is not None:
            mv = data if isinstance(data, memoryview) else memoryview(data)
            got = self._big_got
            take = min(self._big_size - got, len(mv))
            if got + take > len(self._big):
                self._grow(got + take)
            self._big[got:got + take] = mv[:take]
            self._big_got = got = got + take
            if got < self._big_size:
                return out
            big, self._big = self._big, None
            out.append(memoryview(big))
            data = mv[take:]
            if not len(data):
                return out
        if not self._buf:
            spans, pos = self._split(data)
            if spans:
                whole = data if type(data) is bytes else bytes(memoryview(data)[:pos])
                view = memoryview(whole)
                out += [view[a:b] for a, b in spans]
            if pos < len(data):
                self._buf += memoryview(data)[pos:]
                self._maybe_big()
            return out
        self._buf += data
        spans, pos = self._split(self._buf)
        if not spans:
            self._maybe_big()
            return out
        whole = memoryview(self._buf)
        try:
            consumed = memoryview(bytes(whole[:pos]))
        finally:
            whole.release()
        del self._buf[:pos]
        self._maybe_big()
        out += [consumed[a:b] for a, b in spans]
        return out

    def _grow(self, need: int) -> None:
        """A larger buffer for the frame being filled: double, at least `need`, at most
        the declared size."""
        cap = min(self._big_size, max(need, 2 * len(self._big)))
        big = bytearray(cap)
        big[:self._big_got] = memoryview(self._big)[:self._big_got]
        self._big = big

    def _maybe_big(self) -> None:
        """The buffered partial frame is large: move its bytes so far to a bytearray of
        its own (sized to them; `_grow` makes room as more arrive)."""
        buf = self._buf
        if len(buf) < 4:
            return
        size = _i.unpack_from(buf, 0)[0]
        if size <= self.BIG_FRAME or len(buf) - 4 >= size:
            return
        self._big, self._big_size = bytearray(memoryview(buf)[4:]), size
        self._big_got = len(self._big)
        buf.clear()
