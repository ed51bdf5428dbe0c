"""Magic v0/v1 message sets: exact bytes, wrappers, conversions, kafka-python interop."""
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from storage import batch as B
from storage import codecs, legacy
from storage.batch import BatchBuilder
from storage.errors import (CorruptRecordError, InvalidRecordError, StorageError,
                            UnsupportedCompressionTypeError)

TS = 1_600_000_000_000


def kafka_python_read(buf):
    records = MemoryRecords(bytes(buf))
    out = []
    while (batch := records.next_batch()) is not None:
        out += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    return out


def test_v0_message_bytes():
    body = (
        struct.pack(">b", 0)            # magic
        + struct.pack(">b", 0)          # attributes
        + struct.pack(">i", 3) + b"key"  # key
        + struct.pack(">i", -1)         # null value
    )
    expected = (
        struct.pack(">q", 5)            # offset
        + struct.pack(">i", 4 + len(body))     # message size
        + struct.pack(">I", zlib.crc32(body))  # CRC-32 of magic..end
        + body
    )
    assert legacy.build_message_set([(5, -1, b"key", None)], magic=0) == expected
    assert list(legacy.iter_records(expected)) == [
        legacy.LegacyRecord(5, -1, b"key", None, 0, 0, 0)]


def test_v1_message_bytes():
    body = (
        struct.pack(">b", 1)            # magic
        + struct.pack(">b", 8)          # attributes: LogAppendTime
        + struct.pack(">q", TS)         # timestamp
        + struct.pack(">i", -1)         # null key
        + struct.pack(">i", 5) + b"value"
    )
    expected = struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body
    assert legacy.build_message_set([(0, TS, None, b"value")], 1, timestamp_type=1) == expected


@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in range(4)
                                         if (m, c) != (0, 3)])   # kafka-python needs xxhash
def test_we_read_kafka_python_message_sets(magic, codec):
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i in range(4):
        builder.append(i, timestamp=TS + i if magic else None, key=b"k%d" % i,
                       value=None if i == 2 else b"v%d" % i)
    records = list(legacy.iter_records(bytes(builder.build())))
    assert [(r.key, r.value) for r in records] == [
        (b"k0", b"v0"), (b"k1", b"v1"), (b"k2", None), (b"k3", b"v3")]
    assert [r.timestamp for r in records] == ([TS + i for i in range(4)] if magic else [-1] * 4)
    assert all(r.codec == codec and r.magic == magic for r in records)
    # kafka-python's v1 producer writes wrapper offset 0, so the last inner is offset 0
    offsets = [r.offset for r in records]
    assert offsets == list(range(offsets[0], offsets[0] + 4))
    assert offsets[-1] == (0 if magic == 1 and codec else 3)


@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in range(4)
                                         if (m, c) != (0, 3)])
def test_kafka_python_reads_our_message_sets(magic, codec):
    records = [(10 + i, TS + i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    ours = legacy.build_message_set(records, magic, codec)
    expected = [(o, t if magic else None, k, v) for o, t, k, v in records]
    assert kafka_python_read(ours) == expected
    assert [(r.offset, r.key, r.value) for r in legacy.iter_records(ours)] == [
        (o, k, v) for o, t, k, v in records]


def test_v1_relative_inner_offsets():
    ours = legacy.build_message_set([(100, TS, b"a", b"1"), (101, TS, b"b", b"2"),
                                     (105, TS, b"c", b"3")], 1, codecs.GZIP)
    (wrapper,) = legacy.iter_messages(ours)
    assert wrapper.offset == 105 and wrapper.key is None
    inner = list(legacy.iter_messages(zlib.decompress(wrapper.value, 31)))
    assert [m.offset for m in inner] == [0, 1, 5]
    assert [r.offset for r in legacy.iter_records(ours)] == [100, 101, 105]


def test_v0_lz4_uses_broken_checksum():
    ours = legacy.build_message_set([(0, -1, b"k", b"v")], 0, codecs.LZ4)
    (wrapper,) = legacy.iter_messages(ours)
    with pytest.raises(CorruptRecordError):
        codecs.decompress(codecs.LZ4, wrapper.value, 1000)
    assert [r.value for r in legacy.iter_records(ours)] == [b"v"]


def test_log_append_time_wrapper():
    ours = legacy.build_message_set([(0, 1, b"a", b"1"), (1, 2, b"b", b"2")], 1, codecs.SNAPPY,
                                    timestamp_type=1, log_append_time_ms=TS)
    assert [(r.timestamp, r.timestamp_type) for r in legacy.iter_records(ours)] == [(TS, 1)] * 2


def test_corruption_and_invalid_wrappers():
    good = bytearray(legacy.build_message_set([(0, TS, b"k", b"v")], 1))
    good[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(legacy.iter_records(good))
    nested = legacy.build_message_set([(0, TS, b"k", b"v")], 1, codecs.GZIP)
    inner = legacy.encode_message(1, codecs.GZIP, TS, None, codecs.compress(codecs.GZIP, nested))
    with pytest.raises(InvalidRecordError, match="inner"):
        list(legacy.iter_records(struct.pack(">qi", 0, len(inner)) + inner))
    mixed_inner = legacy.build_message_set([(0, -1, b"k", b"v")], 0)
    wrapper = legacy.encode_message(1, codecs.GZIP, TS, None,
                                    codecs.compress(codecs.GZIP, mixed_inner))
    with pytest.raises(InvalidRecordError, match="magic"):
        list(legacy.iter_records(struct.pack(">qi", 0, len(wrapper)) + wrapper))
    zstd = legacy.encode_message(1, codecs.ZSTD, TS, None, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        list(legacy.iter_records(struct.pack(">qi", 0, len(zstd)) + zstd))
    with pytest.raises(CorruptRecordError):
        list(legacy.iter_records(struct.pack(">qi", 0, 5) + b"\0" * 5))


@pytest.mark.parametrize("to_magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_down_convert(to_magic, codec):
    first = BatchBuilder(50, compression=codec)
    for i in range(3):
        first.append(b"k%d" % i, b"v%d" % i, headers=[("dropped", b"x")], timestamp=TS + i)
    control = B.build_control_batch(53, 1, 0, True, 0, TS)
    second = BatchBuilder(54).append(None, b"last", timestamp=TS + 9).build()
    data = first.build() + control + second
    converted = legacy.down_convert(data + second[:30], to_magic)    # partial tail dropped
    expected = [(50 + i, TS + i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    expected.append((54, TS + 9, None, b"last"))
    got = [(r.offset, r.timestamp, r.key, r.value) for r in legacy.iter_records(converted)]
    assert got == [(o, t if to_magic else -1, k, v) for o, t, k, v in expected]
    if (to_magic, codec) != (0, 3):        # kafka-python needs xxhash for v0 lz4
        assert kafka_python_read(converted) == [(o, t if to_magic else None, k, v)
                                                for o, t, k, v in expected]


def test_down_convert_refuses_zstd_and_passes_old_data():
    zstd = BatchBuilder(compression=codecs.ZSTD).append(b"k", b"v", timestamp=TS).build()
    with pytest.raises(UnsupportedCompressionTypeError):
        legacy.down_convert(zstd, 1)
    v1 = legacy.build_message_set([(0, TS, b"k", b"v")], 1)
    assert legacy.down_convert(v1, 1) == v1
    v0 = legacy.down_convert(v1, 0)
    assert [(r.magic, r.timestamp) for r in legacy.iter_records(v0)] == [(0, -1)]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)),
                                         max_size=3))
def test_fuzz_only_storage_errors(data, flips):
    base = bytearray(legacy.build_message_set([(0, TS, b"k", b"v"), (1, TS, None, b"w")], 1,
                                              codecs.GZIP))
    for position, bit in flips:
        base[position % len(base)] ^= 1 << bit
    for candidate in (data, bytes(base), struct.pack(">qi", 0, len(data)) + data):
        try:
            list(legacy.iter_records(candidate, max_uncompressed_bytes=1 << 16))
            legacy.down_convert(candidate, 0, max_uncompressed_bytes=1 << 16)
        except StorageError:
            pass


def test_wrapper_offset_that_puts_inner_offsets_out_of_int64_is_refused():
    # found by the fuzz test: wrapper offset near -2**63, inner relative offsets 0 and 1
    wrapper = bytearray(legacy.build_message_set([(0, TS, b"k", b"v"), (1, TS, None, b"w")], 1,
                                                 codecs.GZIP))
    wrapper[0] ^= 0x80                     # offset 1 -> 1 - 2**63: the first record below
    wrapper[7] ^= 0x01                     # offset -2**63 (last record 0: first -1)
    with pytest.raises(InvalidRecordError):
        list(legacy.iter_records(bytes(wrapper)))
    with pytest.raises(InvalidRecordError):
        legacy.down_convert(bytes(wrapper), 0)
