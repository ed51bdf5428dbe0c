"""Request/response headers, frames, the frame reader and the KIP-511 fallback."""
import struct

import pytest

from mpbroker.protocol import api_keys, codec, framing
from mpbroker.protocol.errors import FrameTooLarge, ProtocolError, UnsupportedVersion
from storage.slices import FileSlice


def h(v): return struct.pack(">h", v)
def i(v): return struct.pack(">i", v)


def test_header_v1():
    frame = h(3) + h(1) + i(42) + h(3) + b"cli" + b"BODY"       # Metadata v1: header v1
    hdr, pos = framing.parse_request_header(memoryview(frame))
    assert hdr == framing.RequestHeader(3, 1, 42, "cli", 1)
    assert frame[pos:] == b"BODY"


def test_header_v2_keeps_classic_client_id_and_skips_tags():
    frame = (h(0) + h(9) + i(7)          # Produce v9: flexible, header v2
             + h(2) + b"id"              # client_id: classic int16 length even in v2
             + b"\x01" + b"\x05\x02zz"   # tagged fields: 1 entry, tag 5, size 2
             + b"BODY")
    hdr, pos = framing.parse_request_header(frame)
    assert hdr == framing.RequestHeader(0, 9, 7, "id", 2)
    assert frame[pos:] == b"BODY"


def test_header_v0_for_controlled_shutdown_v0_and_null_client_id():
    hdr, pos = framing.parse_request_header(h(7) + h(0) + i(1) + b"B")
    assert hdr.header_version == 0 and hdr.client_id is None and pos == 8
    hdr, pos = framing.parse_request_header(h(7) + h(1) + i(1) + h(-1))
    assert hdr.header_version == 1 and hdr.client_id is None and pos == 10


def test_header_of_an_unknown_api_versions_version_parses():
    # KIP-511: a newer client's ApiVersions v9 must still be readable (flexible header)
    frame = h(18) + h(9) + i(5) + h(1) + b"c" + b"\x00"
    hdr, pos = framing.parse_request_header(frame)
    assert (hdr.api_version, hdr.header_version, pos) == (9, 2, len(frame))


def test_header_versions_kept_per_key_and_version_answer_as_computed():
    """parse_request_header and frame_response keep each pair's header version: the
    same answer, parse after parse, for every defined key and version (a header with
    and without tagged fields, one the first time a pair is seen, one after)."""
    for key in sorted(codec.REQUESTS):
        lo, hi = codec.REQUESTS[key].valid_versions
        for v in range(lo, hi + 2):
            want = framing.request_header_version(key, v)
            head = h(key) + h(v) + i(3) + (h(1) + b"c" if want >= 1 else b"")
            for tags in (b"\x00", b"\x01\x07\x01z", b"\x00"):
                frame = head + (tags if want >= 2 else b"") + b"BODY"
                hdr, pos = framing.parse_request_header(frame)
                assert hdr.header_version == want and frame[pos:] == b"BODY", (key, v, tags)
            flexible = framing.response_header_version(key, v) == 1
            for _ in range(2):
                head_chunk = framing.frame_response(key, v, 3, [b"xy"])[0]
                assert len(head_chunk) == (9 if flexible else 8), (key, v)
    assert framing._REQUEST_HEADERS[(7, 0)] == 0        # ControlledShutdown v0
    with pytest.raises(UnsupportedVersion):             # an unknown key is never kept
        framing.parse_request_header(h(999) + h(0) + i(1) + h(-1))
    # versions no schema defines (a client can send any) are answered, never kept
    for v in (-1, 999, 32767):
        hdr, _ = framing.parse_request_header(h(18) + h(v) + i(1) + h(-1) + b"\x00")
        assert hdr.api_version == v
    assert all(codec.REQUESTS[k].valid_versions[0] <= v <= codec.REQUESTS[k].valid_versions[1]
               for k, v in framing._REQUEST_HEADERS)
    assert all(codec.RESPONSES[k].valid_versions[0] <= v <= codec.RESPONSES[k].valid_versions[1]
               for k, v in framing._FLEXIBLE_RESPONSES)


def test_header_errors():
    for bad in (b"", h(3) + h(1) + i(1), h(3) + h(1) + i(1) + h(10) + b"abc",
                h(0) + h(9) + i(1) + h(0), h(0) + h(9) + i(1) + h(0) + b"\x02\x01"):
        with pytest.raises(ProtocolError):
            framing.parse_request_header(bad)
    with pytest.raises(UnsupportedVersion):
        framing.parse_request_header(h(999) + h(0) + i(1) + h(-1))


def test_frame_request_round_trip():
    data = framing.frame_request(3, 12, 99, "me", {"topics": None})
    assert struct.unpack(">i", data[:4])[0] == len(data) - 4
    hdr, pos = framing.parse_request_header(data[4:])
    assert hdr == framing.RequestHeader(3, 12, 99, "me", 2)
    assert codec.decode_request(3, 12, data[4:], pos)["topics"] is None


def test_frame_response_headers():
    body = codec.encode_response(18, 3, {"api_keys": []})
    chunks = framing.frame_response(18, 3, 11, body)      # ApiVersions: header v0 always
    data = b"".join(chunks)
    assert data[:8] == i(len(data) - 4) + i(11)
    assert data[8:] == b"".join(body)
    chunks = framing.frame_response(3, 12, 12, [b"xyz"])  # flexible: header v1
    assert b"".join(chunks) == i(8) + i(12) + b"\x00" + b"xyz"
    chunks = framing.frame_response(3, 1, 13, [b"xyz"])   # classic: header v0
    assert b"".join(chunks) == i(7) + i(13) + b"xyz"


def test_frame_response_counts_file_slices():
    fs = FileSlice("/seg.log", 0, 100)
    chunks = framing.frame_response(1, 4, 1, [b"ab", fs])
    assert chunks[-1] is fs
    assert struct.unpack(">i", chunks[0][:4])[0] == 4 + 2 + 100
    corr, pos = framing.parse_response_header(chunks[0][4:], 1, 4)
    assert (corr, pos) == (1, 4)


def test_api_versions_fallback():
    data = b"".join(framing.api_versions_fallback(77))
    assert data[:8] == i(len(data) - 4) + i(77)
    body = codec.decode_response(18, 0, data[8:])
    assert body == {"error_code": 35, "api_keys": [
        {"api_key": api_keys.API_VERSIONS, "min_version": 0, "max_version": 4}]}


def frames(*payloads):
    return b"".join(i(len(p)) + p for p in payloads)


def test_frame_reader_splits_any_chunking():
    stream = frames(b"one", b"", b"three33", b"x" * 1000)
    for step in (1, 2, 3, 5, 7, 64, len(stream)):
        reader = framing.FrameReader(2000)
        out = []
        for pos in range(0, len(stream), step):
            out += [bytes(f) for f in reader.feed(stream[pos:pos + step])]
        assert out == [b"one", b"", b"three33", b"x" * 1000]
        assert reader.buffered == 0


def test_frame_reader_frames_survive_later_feeds():
    reader = framing.FrameReader()
    buf = bytearray(frames(b"aaaa") + i(4) + b"bb")
    first = reader.feed(buf)
    buf[:] = b"\x00" * len(buf)                           # caller reuses its buffer
    second = reader.feed(b"cc" + frames(b"dd"))
    assert [bytes(f) for f in first + second] == [b"aaaa", b"bbcc", b"dd"]


def test_frame_reader_caps_size_before_buffering():
    reader = framing.FrameReader(max_bytes=100)
    with pytest.raises(FrameTooLarge):
        reader.feed(i(101))
    reader = framing.FrameReader(max_bytes=100)
    reader.feed(b"\x00\x00")
    with pytest.raises(FrameTooLarge):
        reader.feed(b"\x01\x00")                          # 256 > 100, seen as soon as complete
    with pytest.raises(FrameTooLarge):
        framing.FrameReader().feed(i(-1))
    assert framing.FrameReader().max_bytes == 104857600


def test_frame_reader_large_frames_any_chunking():
    big1, big2 = bytes(range(256)) * 400, b"y" * 200000          # > FrameReader.BIG_FRAME
    stream = frames(b"a", big1, b"bb", big2, b"c")
    for step in (3, 4096, 65536, 70001, 256 * 1024, len(stream)):
        reader = framing.FrameReader()
        out = []
        buf = bytearray(step)
        for pos in range(0, len(stream), step):
            piece = stream[pos:pos + step]
            buf[:len(piece)] = piece                          # the caller reuses its buffer
            out += reader.feed(memoryview(buf)[:len(piece)])
        assert [bytes(f) for f in out] == [b"a", big1, b"bb", big2, b"c"]
        assert reader.buffered == 0
    reader = framing.FrameReader()
    first = reader.feed(stream[:1000])
    rest = reader.feed(stream[1000:])
    frame = rest[0]
    assert bytes(frame) == big1 and not frame.readonly        # appended in place by the log
    assert reader.feed(b"") == [] and [bytes(f) for f in first] == [b"a"]


def test_frame_reader_large_frame_size_capped():
    reader = framing.FrameReader(max_bytes=100000)
    with pytest.raises(FrameTooLarge):
        reader.feed(i(100001) + b"x" * 10)


def test_frame_reader_memory_follows_arrived_bytes_not_declared_size():
    """A prefix declaring 100 MB holds what arrived, not 100 MB (issue #15 item 3)."""
    declared = 100 * 1024 * 1024
    reader = framing.FrameReader()
    assert reader.feed(i(declared) + b"z" * 70000) == []       # past BIG_FRAME: own buffer
    assert reader.buffered == 70004 and len(reader._big) == 70000
    for _ in range(100):
        assert reader.feed(b"z" * 1000) == []
    assert reader.buffered == 170004
    assert len(reader._big) <= 2 * 170000       # doubled as bytes arrived, not declared
    small = framing.FrameReader()
    small.feed(i(declared) + b"q")
    assert small.buffered == 5 and len(small._big) == 1
    capped = framing.FrameReader()                # never beyond the declared size
    capped.feed(i(100000) + b"a" * 70000)
    frames = capped.feed(b"b" * 29999)
    assert frames == [] and len(capped._big) == 100000     # doubling capped at the size
    frames = capped.feed(b"c" + i(1) + b"d")
    assert [bytes(f) for f in frames] == [b"a" * 70000 + b"b" * 29999 + b"c", b"d"]


def test_missing_is_what_completes_the_frame_in_progress():
    r = framing.FrameReader()
    assert r.missing == 0
    r.feed(b"\0\0")
    assert r.missing == 2                       # the rest of the size prefix
    r.feed(b"\0\x0a" + b"x" * 3)
    assert r.missing == 7
    assert r.feed(b"x" * 7 + b"\0\0\0\x02y") == [memoryview(b"x" * 10)]
    assert r.missing == 1
    big = framing.FrameReader.BIG_FRAME + 100   # filled in a bytearray of its own
    r = framing.FrameReader()
    r.feed(i(big) + b"z" * 1000)
    assert r.missing == big - 1000
    r.feed(b"z" * (big - 1000))
    assert r.missing == 0
