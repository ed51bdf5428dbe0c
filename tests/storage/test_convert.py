"""storage/convert.py: produce-side conversion/recompression, fetch-side down-conversion.

Byte fixtures are built field by field with struct.pack (one comment per field),
independently of storage/legacy.py's encoder, so the converter is checked against the
format of seeds 001 §5.3.3 / 004 rather than against itself.
"""
import gzip
import os
import struct
import time
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from storage import codecs, convert, legacy
from storage.batch import BatchBuilder, build_control_batch, crc32c, iter_batches
from storage.errors import (CorruptRecordError, InvalidRecordError, InvalidTimestampError,
                            MessageTooLargeError, StorageError, UnsupportedCompressionTypeError)
from storage.log import Log, LogConfig

NOW = int(time.time() * 1000)


# -- fixtures built field by field -------------------------------------------------------

def v0_message(offset, key, value, attributes=0):
    """offset int64, size int32, crc uint32 (CRC-32 of magic..value), magic, attrs, key, value."""
    body = (struct.pack(">b", 0)                                   # magic 0
            + struct.pack(">b", attributes)                        # attributes: codec bits 0-2
            + (struct.pack(">i", -1) if key is None                # key length (-1 = null)
               else struct.pack(">i", len(key)) + key)             # key bytes
            + (struct.pack(">i", -1) if value is None              # value length
               else struct.pack(">i", len(value)) + value))        # value bytes
    crc = struct.pack(">I", zlib.crc32(body))                      # crc32 (zlib, not crc32c)
    return (struct.pack(">q", offset)                              # offset
            + struct.pack(">i", len(crc) + len(body))              # message size
            + crc + body)


def v1_message(offset, timestamp, key, value, attributes=0):
    """As v0, plus timestamp int64 after attributes; attributes bit 3 = LogAppendTime."""
    body = (struct.pack(">b", 1)                                   # magic 1
            + struct.pack(">b", attributes)                        # attributes
            + struct.pack(">q", timestamp)                         # timestamp (ms)
            + (struct.pack(">i", -1) if key is None                # key length
               else struct.pack(">i", len(key)) + key)             # key
            + (struct.pack(">i", -1) if value is None              # value length
               else struct.pack(">i", len(value)) + value))        # value
    crc = struct.pack(">I", zlib.crc32(body))                      # crc32 of magic..value
    return struct.pack(">qi", offset, 4 + len(body)) + crc + body  # offset, size, message


def gzip_bytes(data):
    return gzip.compress(data)


def xerial(data):
    """snappy-java framing: magic, version 1, compat 1, [int32 len][raw block]..."""
    block = bytes(cramjam.snappy.compress_raw(data))
    return (b"\x82SNAPPY\x00"                                      # xerial magic
            + struct.pack(">ii", 1, 1)                             # version, compatible version
            + struct.pack(">i", len(block)) + block)               # one block


def lz4_v0_broken_hc(data):
    """LZ4 frame whose header checksum covers the magic too (Kafka before KIP-57)."""
    frame = bytearray(lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                         content_checksum=False, store_size=False))
    frame[6] = (codecs.xxh32(bytes(frame[0:6])) >> 8) & 0xFF      # HC over magic+FLG+BD
    return bytes(frame)


def records_of(buf):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for b in iter_batches(buf) for r in b.records()]


def kafka_python_read(buf):
    mr = MemoryRecords(bytes(buf))
    out = []
    while (batch := mr.next_batch()) is not None:
        out += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    return out


def open_log(tmp_path, **cfg):
    return Log.open(str(tmp_path / "t-0"), LogConfig(**cfg))


# -- produce: legacy message sets ----------------------------------------------------

def test_v0_uncompressed_set_converts_to_one_v2_batch():
    ms = v0_message(7, b"k1", b"v1") + v0_message(7, None, b"v2") + v0_message(0, b"k3", None)
    out = convert.prepare_produce(memoryview(ms), 0, LogConfig(), NOW)
    batches = list(iter_batches(out))
    assert len(batches) == 1 and batches[0].compression == codecs.NONE
    batches[0].validate(from_client=True)
    # client offsets are ignored: 0..n-1; v0 records have no timestamp (-1)
    assert records_of(out) == [(0, -1, b"k1", b"v1", ()), (1, -1, None, b"v2", ()),
                               (2, -1, b"k3", None, ())]


def test_v1_gzip_wrapper_relative_inner_offsets():
    inner = (v1_message(0, NOW - 2, b"a", b"1")                    # relative inner offsets
             + v1_message(1, NOW - 1, b"b", b"2")
             + v1_message(2, NOW, b"c", b"3"))
    wrapper = v1_message(1000, NOW, None, gzip_bytes(inner), attributes=codecs.GZIP)
    out = convert.prepare_produce(memoryview(wrapper), 2, LogConfig(), NOW)
    (b,) = iter_batches(out)
    assert b.compression == codecs.GZIP                            # producer codec kept
    assert b.max_timestamp == NOW and b.timestamp_type == 0
    assert records_of(out) == [(0, NOW - 2, b"a", b"1", ()), (1, NOW - 1, b"b", b"2", ()),
                               (2, NOW, b"c", b"3", ())]


@pytest.mark.parametrize("name,compress,codec", [
    ("snappy-xerial", xerial, codecs.SNAPPY),
    ("snappy-raw", lambda d: bytes(cramjam.snappy.compress_raw(d)), codecs.SNAPPY),
    ("lz4-v0-broken-hc", lz4_v0_broken_hc, codecs.LZ4),
    ("gzip", gzip_bytes, codecs.GZIP)])
def test_v0_wrappers_of_every_codec(name, compress, codec):
    inner = v0_message(0, b"k", b"v" * 100) + v0_message(1, None, b"w" * 50)
    wrapper = v0_message(1, None, compress(inner), attributes=codec)
    out = convert.prepare_produce(memoryview(wrapper), 1, LogConfig(), NOW)
    assert next(iter_batches(out)).compression == codec
    assert records_of(out) == [(0, -1, b"k", b"v" * 100, ()), (1, -1, None, b"w" * 50, ())]


def test_topic_compression_type_recompresses_legacy():
    ms = v1_message(0, NOW, b"k", b"v" * 300) + v1_message(1, NOW, b"k2", b"v" * 300)
    for ctype, codec in (("zstd", codecs.ZSTD), ("lz4", codecs.LZ4), ("uncompressed", 0)):
        out = convert.prepare_produce(memoryview(ms), 2, LogConfig(compression_type=ctype), NOW)
        assert next(iter_batches(out)).compression == codec
        assert [r[2:4] for r in records_of(out)] == [(b"k", b"v" * 300), (b"k2", b"v" * 300)]


def test_legacy_errors():
    good = v0_message(0, b"k", b"v")
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        convert.prepare_produce(memoryview(bytes(bad_crc)), 0, LogConfig(), NOW)
    # inner message of another magic / nested compression
    nested = v0_message(0, None, gzip_bytes(v0_message(0, None, b"x", attributes=1)), 1)
    mixed = v0_message(0, None, gzip_bytes(v1_message(0, NOW, None, b"x")), 1)
    for payload in (nested, mixed):
        with pytest.raises(InvalidRecordError):
            convert.prepare_produce(memoryview(payload), 0, LogConfig(), NOW)
    # zstd is v2 only
    z = v1_message(0, NOW, None, codecs.compress(codecs.ZSTD, good), attributes=4)
    with pytest.raises(UnsupportedCompressionTypeError):
        convert.prepare_produce(memoryview(z), 2, LogConfig(), NOW)
    # Produce v3+ must carry v2
    with pytest.raises(InvalidRecordError):
        convert.prepare_produce(memoryview(good), 3, LogConfig(compression_type="gzip"), NOW)
    # a wrapper above max.message.bytes (shallow size, log overhead included)
    big = v0_message(0, None, gzip_bytes(os.urandom(4000)), 1)
    with pytest.raises(MessageTooLargeError):
        convert.prepare_produce(memoryview(big), 0, LogConfig(max_message_bytes=1000), NOW)


def test_legacy_timestamp_bounds():
    old = v1_message(0, NOW - 10_000, None, b"x")
    for cfg in (LogConfig(message_timestamp_difference_max_ms=5_000),
                LogConfig(message_timestamp_before_max_ms=5_000)):
        with pytest.raises(InvalidTimestampError):
            convert.prepare_produce(memoryview(old), 2, cfg, NOW)
    future = v1_message(0, NOW + 10_000, None, b"x")
    with pytest.raises(InvalidTimestampError):
        convert.prepare_produce(memoryview(future), 2,
                                LogConfig(message_timestamp_after_max_ms=5_000), NOW)
    # LogAppendTime topics do not check, v0 has no timestamp
    convert.prepare_produce(memoryview(old), 2, LogConfig(
        message_timestamp_difference_max_ms=5_000, message_timestamp_type="LogAppendTime"), NOW)
    convert.prepare_produce(memoryview(v0_message(0, None, b"x")), 0,
                            LogConfig(message_timestamp_difference_max_ms=5_000), NOW)


def test_log_append_time_on_converted_legacy(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    inner = v1_message(0, 5, b"a", b"1") + v1_message(1, 6, b"b", b"2")
    wrapper = v1_message(1, 6, None, gzip_bytes(inner), attributes=codecs.GZIP)
    info = log.append(convert.prepare_produce(memoryview(wrapper), 2, log.config, NOW))
    assert info.first_offset == 0 and info.last_offset == 1 and info.log_append_time_ms > 0
    stored = log.read_records_bytes(0)
    (b,) = iter_batches(stored)
    assert b.timestamp_type == 1 and b.max_timestamp == info.log_append_time_ms
    assert {r[1] for r in records_of(stored)} == {info.log_append_time_ms}
    # old fetchers see the wrapper as LogAppendTime with the append time
    down = convert.down_convert(stored, 1, 0)
    (msg,) = legacy.iter_messages(down)
    assert msg.attributes & 0x08 and msg.timestamp == info.log_append_time_ms
    log.close()


def test_timestamp_difference_applies_to_v2_batches(tmp_path):
    log = open_log(tmp_path, message_timestamp_difference_max_ms=1000)
    batch = BatchBuilder().append(b"k", b"v", timestamp=NOW - 60_000).build()
    with pytest.raises(InvalidTimestampError):
        log.append(convert.prepare_produce(memoryview(batch), 9, log.config, NOW))
    log.close()


def test_compacted_topic_record_errors(tmp_path):
    log = open_log(tmp_path, cleanup_policy="compact")
    batch = (BatchBuilder().append(b"k", b"v").append(None, b"v").append(b"k2", b"v")
             .append(None, b"x").build())
    with pytest.raises(InvalidRecordError) as ei:
        log.append(convert.prepare_produce(memoryview(batch), 9, log.config, NOW))
    assert [i for i, _ in ei.value.record_errors] == [1, 3]
    legacy_set = v0_message(0, None, b"x") + v0_message(0, b"k", b"y")
    with pytest.raises(InvalidRecordError) as ei:
        log.append(convert.prepare_produce(memoryview(legacy_set), 0, log.config, NOW))
    assert [i for i, _ in ei.value.record_errors] == [0]
    log.close()


# -- produce: v2 batches ---------------------------------------------------------------

def test_v2_hot_path_returns_the_request_buffer():
    batch = memoryview(BatchBuilder(compression=codecs.LZ4).append(b"k", b"v").build())
    assert convert.prepare_produce(batch, 9, LogConfig(), NOW) is batch
    assert convert.prepare_produce(batch, 9, LogConfig(compression_type="lz4"), NOW) is batch
    assert convert.prepare_produce(batch, 3, LogConfig(), NOW) is batch


@pytest.mark.parametrize("version", [2, 3, 7, 9])
@pytest.mark.parametrize("ctype", ["producer", "gzip"])
def test_v2_payload_must_hold_exactly_one_batch(version, ctype):
    one = BatchBuilder().append(b"k", b"v", timestamp=NOW).build()
    cfg = LogConfig(compression_type=ctype)
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        convert.prepare_produce(memoryview(one + one), version, cfg, NOW)
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        convert.prepare_produce(memoryview(one + one[:20]), version, cfg, NOW)  # torn 2nd
    out = convert.prepare_produce(memoryview(one), version, cfg, NOW)
    assert records_of(out) == records_of(one)


def _garbage_varints(compression=codecs.NONE):
    """A batch whose CRC is right but whose first record's offset delta is 6 bytes long."""
    good = bytearray(BatchBuilder().append(b"k", b"v", timestamp=NOW)
                     .append(b"k2", b"v2", timestamp=NOW).build())
    body = bytearray(good[61:])
    body[3:9] = b"\xff" * 6
    body = codecs.compress(compression, bytes(body))
    out = bytearray(good[:61]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, compression)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return memoryview(bytes(out))


@pytest.mark.parametrize("ctype", ["producer", "zstd"])
@pytest.mark.parametrize("version", [3, 7, 9])
def test_every_record_is_validated_unless_opted_out(version, ctype):
    cfg = LogConfig(compression_type=ctype)
    for compression in (codecs.NONE, codecs.LZ4):
        bad = _garbage_varints(compression)
        with pytest.raises(InvalidRecordError, match="invalid record structure"):
            convert.prepare_produce(bad, version, cfg, NOW)
        if ctype == "producer" and version >= 7:    # trusted producers: passed on as sent
            assert convert.prepare_produce(bad, version, cfg, NOW, validate=False) is bad


def test_recompression_decompresses_once(monkeypatch):
    batch = BatchBuilder(compression=codecs.LZ4)
    for i in range(10):
        batch.append(b"k%d" % i, b"v" * 100, timestamp=NOW)
    raw = batch.build()
    calls = []
    real = codecs.decompress
    monkeypatch.setattr(codecs, "decompress", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    out = convert.prepare_produce(memoryview(raw), 9, LogConfig(compression_type="zstd"), NOW)
    assert calls == [codecs.LZ4]
    assert records_of(out) == records_of(raw)


def test_zstd_needs_produce_v7():
    batch = memoryview(BatchBuilder(compression=codecs.ZSTD).append(b"k", b"v").build())
    for version in (3, 6):
        with pytest.raises(UnsupportedCompressionTypeError):
            convert.prepare_produce(batch, version, LogConfig(), NOW)
    assert convert.prepare_produce(batch, 7, LogConfig(), NOW) is batch


def test_v2_recompression_keeps_everything():
    src = BatchBuilder(compression=codecs.LZ4, producer_id=42, producer_epoch=3,
                       base_sequence=10, is_transactional=True)
    for i in range(20):
        src.append(b"k%d" % i, b"v%d" % i * 10, headers=[("h", b"x%d" % i)], timestamp=NOW + i)
    raw = src.build()
    for ctype, codec in (("zstd", codecs.ZSTD), ("gzip", codecs.GZIP),
                         ("snappy", codecs.SNAPPY), ("uncompressed", codecs.NONE)):
        cfg = LogConfig(compression_type=ctype, compression_zstd_level=1)
        out = convert.prepare_produce(memoryview(raw), 9, cfg, NOW)
        (b,) = iter_batches(out)
        b.validate(from_client=True)
        assert b.compression == codec
        h = b.header()
        assert (h.producer_id, h.producer_epoch, h.base_sequence, b.is_transactional,
                h.max_timestamp, h.record_count) == (42, 3, 10, True, NOW + 19, 20)
        assert records_of(out) == records_of(raw)


@pytest.mark.parametrize("ctype,field,low,high", [
    ("gzip", "compression_gzip_level", 1, 9),
    ("zstd", "compression_zstd_level", 1, 19),
    ("lz4", "compression_lz4_level", 1, 12)])
def test_topic_compression_level_reaches_the_compressor(ctype, field, low, high):
    src = BatchBuilder()
    for i in range(300):            # compressible, but not trivially: levels differ
        src.append(b"key-%d" % (i % 17), b"value %d %s" % (i * 7919 % 1000, b"ab" * (i % 13)),
                   timestamp=NOW + i)
    raw = src.build()
    legacy_set = b"".join(v1_message(i, NOW, b"k%d" % (i % 5), b"v %d" % (i * 31 % 97) * 5)
                          for i in range(200))
    sizes = {}
    for level in (low, high):
        cfg = LogConfig(compression_type=ctype, **{field: level})
        out = convert.prepare_produce(memoryview(raw), 9, cfg, NOW)
        assert records_of(out) == records_of(raw)
        sizes[level] = len(out)
        # a legacy set converted on the broker gets the same level
        conv = convert.prepare_produce(memoryview(legacy_set), 2, cfg, NOW)
        sizes[("legacy", level)] = len(conv)
    assert sizes[high] < sizes[low]
    assert sizes[("legacy", high)] < sizes[("legacy", low)]


def test_v2_recompression_of_a_bad_batch_is_refused():
    raw = bytearray(BatchBuilder(compression=codecs.LZ4).append(b"k", b"v").build())
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):        # CRC
        convert.prepare_produce(memoryview(bytes(raw)), 9, LogConfig(compression_type="gzip"), NOW)


# -- fetch: down-conversion ----------------------------------------------------------

def stored_log(tmp_path, batches):
    log = open_log(tmp_path)
    for raw in batches:
        log.append(memoryview(bytearray(raw)))
    return log


@pytest.mark.parametrize("codec", [codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4])
@pytest.mark.parametrize("to_magic", [0, 1])
def test_down_convert_round_trip(tmp_path, codec, to_magic):
    b1 = BatchBuilder(compression=codec)
    for i in range(5):
        b1.append(b"k%d" % i, b"v%d" % i, headers=[("dropped", b"x")], timestamp=NOW + i)
    log = stored_log(tmp_path, [b1.build(), BatchBuilder(compression=codec)
                                .append(None, b"last", timestamp=NOW + 9).build()])
    stored = log.read_records_bytes(0)
    out = convert.down_convert(stored, to_magic, 0)
    want_ts = (lambda i: NOW + i) if to_magic == 1 else (lambda i: -1)
    got = [(r.offset, r.timestamp, r.key, r.value) for r in legacy.iter_records(out)]
    expected = [(i, want_ts(i), b"k%d" % i, b"v%d" % i) for i in range(5)] + \
               [(5, want_ts(9), None, b"last")]
    assert got == expected
    assert {r.magic for r in legacy.iter_records(out)} == {to_magic}
    assert {r.codec for r in legacy.iter_records(out)} == {codec}
    if not (to_magic == 0 and codec == codecs.LZ4):        # kafka-python needs xxhash there
        assert [(o, t if t is not None else -1, k, v)
                for o, t, k, v in kafka_python_read(out)] == expected
    # up again (what an old producer's set becomes) gives the same records
    assert [r[2:4] for r in records_of(convert.prepare_produce(
        memoryview(out), to_magic + 1, LogConfig(), NOW))] == [e[2:4] for e in expected]
    log.close()


def test_down_convert_offsets_in_wrapper(tmp_path):
    b = BatchBuilder(compression=codecs.GZIP)
    for i in range(3):
        b.append(None, b"%d" % i, timestamp=NOW)
    log = stored_log(tmp_path, [BatchBuilder().append(None, b"x", timestamp=NOW).build(),
                                b.build()])
    out = convert.down_convert(log.read_records_bytes(1), 1, 1)
    (wrapper,) = legacy.iter_messages(out)
    assert wrapper.offset == 3                              # the last inner message's offset
    inner = list(legacy.iter_messages(codecs.decompress(codecs.GZIP, wrapper.value, 1 << 20)))
    assert [m.offset for m in inner] == [0, 1, 2]           # v1: relative
    out0 = convert.down_convert(log.read_records_bytes(1), 0, 1)
    (wrapper0,) = legacy.iter_messages(out0)
    inner0 = list(legacy.iter_messages(codecs.decompress(codecs.GZIP, wrapper0.value, 1 << 20)))
    assert [m.offset for m in inner0] == [1, 2, 3]          # v0: absolute
    log.close()


def test_down_convert_skips_before_fetch_offset_and_control(tmp_path):
    b = BatchBuilder()
    for i in range(4):
        b.append(None, b"%d" % i, timestamp=NOW)
    log = stored_log(tmp_path, [b.build()])
    stored = log.read_records_bytes(0)
    control = build_control_batch(4, 7, 0, True, 0, NOW)
    out = convert.down_convert(stored + control, 1, 2)
    assert [r.offset for r in legacy.iter_records(out)] == [2, 3]
    assert convert.down_convert(control, 0, 4) == b""
    log.close()


def test_down_convert_refuses_zstd_and_stops_at_max_bytes(tmp_path):
    z = BatchBuilder(compression=codecs.ZSTD).append(b"k", b"v").build()
    with pytest.raises(UnsupportedCompressionTypeError):
        convert.down_convert(z, 1, 0)
    ok = BatchBuilder(compression=codecs.GZIP).append(b"a", b"b", timestamp=NOW).build()
    z1 = BatchBuilder(base_offset=1, compression=codecs.ZSTD).append(b"k", b"v").build()
    assert [r.key for r in legacy.iter_records(convert.down_convert(ok + z1, 1, 0))] == [b"a"]
    plain = [BatchBuilder(base_offset=i).append(None, b"x" * 100, timestamp=NOW).build()
             for i in range(3)]
    out = convert.down_convert(b"".join(plain) + plain[0][:30], 1, 0, max_bytes=150)
    assert [r.offset for r in legacy.iter_records(out)] == [0, 1]
    assert convert.fetch_magic(0) == 0 and convert.fetch_magic(3) == 1
    assert convert.fetch_magic(4) is None
    assert convert.fetch_zstd_refused(LogConfig(compression_type="zstd"), 9)
    assert not convert.fetch_zstd_refused(LogConfig(compression_type="zstd"), 10)


# -- decompression bombs and fuzzing ------------------------------------------------

def test_decompression_bomb_in_legacy_wrapper_is_refused_cheaply():
    zeros = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = zeros.compress(b"\0" * (80 << 20)) + zeros.flush()       # 80 MiB -> ~80 KiB
    wrapper = v1_message(0, NOW, None, bomb, attributes=codecs.GZIP)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            convert.prepare_produce(memoryview(wrapper), 2, LogConfig(), NOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < convert.MAX_UNCOMPRESSED_BYTES + (16 << 20)


def test_decompression_bomb_in_recompressed_v2_batch():
    src = BatchBuilder(compression=codecs.ZSTD)
    src.append(None, b"\0" * (70 << 20))
    raw = src.build()
    assert len(raw) < 100_000
    with pytest.raises(CorruptRecordError):
        convert.prepare_produce(memoryview(raw), 9, LogConfig(compression_type="gzip"), NOW)


def _legacy_corpus():
    inner1 = v1_message(0, NOW, b"a", b"1") + v1_message(1, NOW, None, b"2")
    inner0 = v0_message(0, b"a", b"1") + v0_message(1, b"b", None)
    return [
        v0_message(0, b"k", b"v") + v0_message(1, None, b"w"),
        v1_message(5, NOW, b"k", b"v"),
        v1_message(1, NOW, None, gzip_bytes(inner1), attributes=1),
        v0_message(1, None, xerial(inner0), attributes=2),
        v0_message(1, None, lz4_v0_broken_hc(inner0), attributes=3),
        v1_message(1, NOW, None, codecs.compress(codecs.LZ4, inner1), attributes=3),
    ]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(_legacy_corpus()), st.lists(st.tuples(st.integers(0, 10_000),
                                                             st.integers(0, 255)),
                                                   min_size=1, max_size=6),
       st.integers(0, 2), st.booleans())
def test_fuzz_legacy_produce(payload, flips, version, truncate):
    """Corrupted outer or nested messages: a StorageError, never anything else."""
    buf = bytearray(payload)
    for pos, value in flips:
        buf[pos % len(buf)] = value
    if truncate:
        buf = buf[:len(buf) - 1 - flips[0][0] % len(buf)]
    if not buf:
        return
    try:
        out = convert.prepare_produce(memoryview(bytes(buf)), version,
                                      LogConfig(compression_type="producer"), NOW)
        for b in iter_batches(out):
            b.validate(deep=True, from_client=True)
    except StorageError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(min_size=0, max_size=300), st.sampled_from([0, 1, 2, 3]), st.sampled_from([0, 1]))
def test_fuzz_nested_garbage_with_valid_wrapper_crc(inner, codec, magic):
    """The wrapper is well formed (valid CRC) but its value is garbage or a garbage set."""
    value = codecs.compress(codec, inner, legacy_checksum=magic == 0) if codec else inner
    attrs = codec if codec else 1                   # codec 0 + bit: pretend gzip
    msg = v0_message(0, None, value, attrs) if magic == 0 else v1_message(0, NOW, None, value, attrs)
    try:
        convert.prepare_produce(memoryview(msg), magic + 1, LogConfig(), NOW)
    except StorageError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(min_size=61, max_size=400), st.sampled_from([0, 1]), st.integers(0, 500))
def test_fuzz_down_convert(garbage, to_magic, fetch_offset):
    """Stored data is trusted, but a broken segment must still only raise StorageError."""
    good = BatchBuilder(compression=codecs.GZIP).append(b"k", b"v", timestamp=NOW).build()
    for data in (garbage, good[:40] + garbage, good + garbage):
        try:
            convert.down_convert(data, to_magic, fetch_offset)
        except StorageError:
            pass
