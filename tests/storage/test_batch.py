"""Record batch v2 views: exact bytes, header fields, validation, in-place updates,
framing, and cross-checks against kafka-python's encoder and decoder."""
import struct

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from storage import batch as B
from storage.batch import BatchBuilder, Record, RecordBatch, iter_batches
from storage.errors import (CorruptRecordError, InvalidRecordError, StorageError,
                            UnsupportedCompressionTypeError)

TS = 1_700_000_000_000


def expected_one_record_batch():
    """One record (key b"key", value b"value"), built field by field."""
    record_body = (
        b"\x00"                     # attributes (unused)
        + b"\x00"                   # timestamp delta 0 (zig-zag varlong)
        + b"\x00"                   # offset delta 0
        + b"\x06" + b"key"          # key length 3 -> zig-zag 6, key
        + b"\x0a" + b"value"        # value length 5 -> zig-zag 10, value
        + b"\x00"                   # header count 0
    )
    record = bytes([len(record_body) * 2]) + record_body    # length 14 -> zig-zag 28
    after_crc = (
        struct.pack(">h", 0)        # attributes: no compression, CreateTime
        + struct.pack(">i", 0)      # last offset delta
        + struct.pack(">q", TS)     # base timestamp
        + struct.pack(">q", TS)     # max timestamp
        + struct.pack(">q", -1)     # producer id
        + struct.pack(">h", -1)     # producer epoch
        + struct.pack(">i", -1)     # base sequence
        + struct.pack(">i", 1)      # record count
        + record
    )
    return (
        struct.pack(">q", 0)                          # base offset
        + struct.pack(">i", 4 + 1 + 4 + len(after_crc))  # batch length: epoch..end
        + struct.pack(">i", -1)                       # partition leader epoch
        + struct.pack(">b", 2)                        # magic
        + struct.pack(">I", crc32c.crc32c(after_crc))  # CRC-32C of attributes..end
        + after_crc
    )


def build(n=3, **kwargs):
    builder = BatchBuilder(kwargs.pop("base_offset", 0), **kwargs)
    for i in range(n):
        builder.append(b"k%d" % i, b"v%d" % i, timestamp=TS + i)
    return builder.build()


def resign(buf):
    """Recompute the CRC after a test edits the header."""
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return buf


# -- exact bytes -----------------------------------------------------------------------

def test_builder_writes_expected_bytes():
    got = BatchBuilder().append(b"key", b"value", timestamp=TS).build()
    assert got == expected_one_record_batch()
    assert len(got) == 76           # 61 header + 15 record, as the seed's dump shows


def test_record_with_headers_and_nulls_bytes():
    got = BatchBuilder().append(None, None, headers=[("h", b"v"), ("n", None)],
                                timestamp=TS).build()
    record = (
        b"\x00"                     # attributes
        + b"\x00"                   # timestamp delta
        + b"\x00"                   # offset delta
        + b"\x01"                   # key length -1 (null)
        + b"\x01"                   # value length -1 (null)
        + b"\x04"                   # 2 headers
        + b"\x02h" + b"\x02v"       # header "h" = b"v"
        + b"\x02n" + b"\x01"        # header "n" = null
    )
    assert got[61:] == bytes([len(record) * 2]) + record
    assert list(RecordBatch(got).records()) == [
        Record(0, TS, None, None, (("h", b"v"), ("n", None)))]


def test_header_properties():
    buf = BatchBuilder(100, producer_id=7, producer_epoch=3, base_sequence=40,
                       is_transactional=True, partition_leader_epoch=5, compression=1)
    for i in range(4):
        buf.append(b"k", b"v", timestamp=TS + 10 - i)
    batch = RecordBatch(buf.build())
    assert batch.base_offset == 100
    assert batch.partition_leader_epoch == 5
    assert batch.magic == 2
    assert batch.attributes == 0x11
    assert batch.compression == 1
    assert batch.timestamp_type == 0
    assert batch.is_transactional and not batch.is_control and not batch.has_delete_horizon
    assert batch.last_offset_delta == 3 and batch.last_offset == 103 and batch.next_offset == 104
    assert batch.base_timestamp == TS + 10 and batch.max_timestamp == TS + 10
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 3, 40)
    assert batch.last_sequence == 43
    assert batch.record_count == 4
    assert batch.size == batch.batch_length + 12 == len(batch.buffer)
    assert batch.crc == batch.compute_crc()
    assert batch.header() == (100, batch.batch_length, 5, 2, batch.crc, 0x11, 3, TS + 10,
                              TS + 10, 7, 3, 40, 4)
    batch.validate(deep=True, from_client=True)


def test_last_sequence_wraps():
    batch = RecordBatch(build(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert batch.last_sequence == 0
    assert RecordBatch(build(3)).last_sequence == -1
    assert B.increment_sequence(2**31 - 1, 1) == 0


# -- validate ------------------------------------------------------------------------------

def test_validate_accepts_every_codec():
    for codec in range(5):
        batch = RecordBatch(build(50, compression=codec))
        batch.validate()
        batch.validate(deep=True, from_client=True)
        assert [r.value for r in batch.records()] == [b"v%d" % i for i in range(50)]


@pytest.mark.parametrize("position", [21, 30, 60, 61, 70])
def test_validate_detects_flipped_bit(position):
    buf = bytearray(build(3))
    buf[position] ^= 0x10
    with pytest.raises(CorruptRecordError, match="CRC"):
        RecordBatch(buf).validate()


def test_crc_excludes_offset_and_epoch():
    buf = bytearray(build(3))
    batch = RecordBatch(buf)
    batch.set_base_offset(12345)
    batch.set_partition_leader_epoch(9)
    batch.validate()
    assert batch.base_offset == 12345 and batch.partition_leader_epoch == 9
    assert [r.offset for r in batch.records()] == [12345, 12346, 12347]
    assert bytes(buf) != build(3)


def test_validate_size_bounds():
    good = build(2)
    with pytest.raises(CorruptRecordError):
        RecordBatch(good[:10])                   # shorter than the log header
    with pytest.raises(CorruptRecordError, match="shorter"):
        RecordBatch(good[:40]).validate()
    with pytest.raises(CorruptRecordError, match="truncated"):
        RecordBatch(good[:-1]).validate()
    small = bytearray(good)
    struct.pack_into(">i", small, 8, 48)         # below the 49-byte minimum
    with pytest.raises(CorruptRecordError, match="minimum"):
        RecordBatch(small).validate()


def test_validate_magic():
    buf = bytearray(build(1))
    buf[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        RecordBatch(buf).validate()
    assert B.batch_magic(buf) == 1 and B.batch_magic(b"123") == -1


def test_validate_header_rules():
    buf = resign(bytearray(build(3)))
    struct.pack_into(">i", buf, 57, -1)          # negative record count
    with pytest.raises(InvalidRecordError, match="count"):
        RecordBatch(resign(buf)).validate()
    buf = bytearray(build(3))
    struct.pack_into(">i", buf, 23, 1)           # last offset delta < count - 1
    with pytest.raises(InvalidRecordError, match="last offset delta"):
        RecordBatch(resign(buf)).validate()
    buf = bytearray(build(3))
    struct.pack_into(">i", buf, 57, 1000)        # 1000 records cannot fit in the body
    struct.pack_into(">i", buf, 23, 999)
    with pytest.raises(CorruptRecordError, match="does not fit"):
        RecordBatch(resign(buf)).validate()
    buf = bytearray(build(3))
    struct.pack_into(">h", buf, 21, 5)           # compression id 5
    with pytest.raises(UnsupportedCompressionTypeError):
        RecordBatch(resign(buf)).validate()


def test_validate_client_rules():
    empty = BatchBuilder().build()
    RecordBatch(empty).validate()                # the cleaner leaves such batches
    with pytest.raises(InvalidRecordError, match="count"):
        RecordBatch(empty).validate(from_client=True)
    sparse = BatchBuilder().append(b"a", b"1", timestamp=TS, offset=0)
    sparse = sparse.append(b"b", b"2", timestamp=TS, offset=5).build()
    RecordBatch(sparse).validate(deep=True)      # a compacted batch is fine from disk
    with pytest.raises(InvalidRecordError, match="inconsistent"):
        RecordBatch(sparse).validate(from_client=True)
    with pytest.raises(InvalidRecordError, match="control"):
        RecordBatch(B.build_control_batch(0, 1, 0, True, 3, TS)).validate(from_client=True)
    with pytest.raises(InvalidRecordError, match="sequence"):
        RecordBatch(build(1, producer_id=4, producer_epoch=0)).validate(from_client=True)


def test_validate_deep_checks_records():
    buf = bytearray(build(3))
    struct.pack_into(">i", buf, 57, 2)           # header says 2, body holds 3
    batch = RecordBatch(resign(buf))
    batch.validate()                             # the cheap pass cannot know
    with pytest.raises(InvalidRecordError):
        batch.validate(deep=True)
    # offset deltas out of order: swap the deltas of records 0 and 1 (both 1 byte)
    buf = bytearray(build(2))
    assert buf[61 + 3] == 0 and buf[61 + 3 + 10] == 2
    buf[61 + 3], buf[61 + 3 + 10] = 2, 0
    with pytest.raises(InvalidRecordError, match="out of order"):
        RecordBatch(resign(buf)).validate(deep=True)


def test_records_reject_bad_structure():
    buf = bytearray(build(1))
    buf[61] = 0x7E                               # record length 63 > what is left
    with pytest.raises(InvalidRecordError, match="record size"):
        list(RecordBatch(resign(buf)).records())
    buf = bytearray(build(1) + b"\x00")          # a trailing byte after the records
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    with pytest.raises(InvalidRecordError, match="declared batch size"):
        list(RecordBatch(resign(buf)).records())


# -- in-place updates ----------------------------------------------------------------------

def test_set_log_append_time():
    buf = bytearray(build(3))
    batch = RecordBatch(buf)
    batch.set_log_append_time(TS + 999)
    batch.validate()
    assert batch.timestamp_type == 1 and batch.max_timestamp == TS + 999
    assert batch.base_timestamp == TS
    assert [r.timestamp for r in batch.records()] == [TS + 999] * 3
    batch.set_max_timestamp(0, TS + 2)
    batch.validate()
    assert [r.timestamp for r in batch.records()] == [TS, TS + 1, TS + 2]


def test_log_append_time_builder():
    batch = RecordBatch(build(2, timestamp_type=1, log_append_time_ms=5))
    batch.validate()
    assert batch.timestamp_type == 1 and batch.max_timestamp == 5
    assert [r.timestamp for r in batch.records()] == [5, 5]


def test_set_on_memoryview_slice_of_larger_buffer():
    area = bytearray(b"\xff" * 10 + build(2) + b"\xee" * 5)
    batch = RecordBatch(memoryview(area)[10:])
    batch.set_base_offset(7)
    batch.validate()
    assert area[:10] == b"\xff" * 10 and area[-5:] == b"\xee" * 5


# -- framing -----------------------------------------------------------------------------

def test_iter_batches_consecutive():
    data = (build(2, base_offset=0) + build(3, base_offset=2, compression=3)
            + build(1, base_offset=5))
    batches = list(iter_batches(data))
    assert [(b.base_offset, b.record_count) for b in batches] == [(0, 2), (2, 3), (5, 1)]
    for batch in batches:
        batch.validate()
    assert [r.offset for b in batches for r in b.records()] == list(range(6))
    assert list(iter_batches(b"")) == []


def test_iter_batches_partial_tail():
    data = build(2) + build(3, base_offset=2)
    for cut in (1, 11, 12, 30, 80):
        with pytest.raises(CorruptRecordError):
            list(iter_batches(data[:-cut]))
        assert len(list(iter_batches(data[:-cut], allow_partial_tail=True))) == 1


def test_iter_batches_impossible_length():
    data = bytearray(build(1))
    struct.pack_into(">i", data, 8, 13)
    with pytest.raises(CorruptRecordError, match="minimum"):
        list(iter_batches(data))
    struct.pack_into(">i", data, 8, -5)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(data, allow_partial_tail=True))


def test_iter_batches_views_share_memory():
    area = bytearray(build(1) + build(1, base_offset=1))
    second = list(iter_batches(memoryview(area)))[1]
    second.set_base_offset(42)
    assert RecordBatch(memoryview(area)[second.size:]).base_offset == 42


# -- builder features ----------------------------------------------------------------------

def test_control_batch():
    batch = RecordBatch(B.build_control_batch(10, producer_id=5, producer_epoch=2,
                                              commit=False, coordinator_epoch=7,
                                              timestamp_ms=TS))
    batch.validate(deep=True)
    assert batch.is_control and batch.is_transactional and batch.attributes == 0x30
    (record,) = batch.records()
    assert B.parse_control_key(record.key) == (0, B.CONTROL_ABORT)
    assert B.parse_end_txn_value(record.value) == (0, 7)
    assert record.key == struct.pack(">hh", 0, 0)            # version 0, type abort


def test_delete_horizon():
    builder = BatchBuilder(delete_horizon_ms=TS + 5000)
    batch = RecordBatch(builder.append(b"k", None, timestamp=TS).build())
    batch.validate(deep=True)
    assert batch.has_delete_horizon and batch.delete_horizon_ms == TS + 5000
    assert [r.timestamp for r in batch.records()] == [TS]    # negative delta


def test_builder_clock_and_str_inputs():
    batch = RecordBatch(BatchBuilder(clock=lambda: 77).append("ké", "v").build())
    assert list(batch.records()) == [Record(0, 77, "ké".encode(), b"v", ())]


def test_builder_rejects_unknown_codec_and_bad_offsets():
    with pytest.raises(UnsupportedCompressionTypeError):
        BatchBuilder(compression=6)
    builder = BatchBuilder(10).append(b"a", b"b", offset=12)
    with pytest.raises(ValueError):
        builder.append(b"a", b"b", offset=12)


def test_records_decompression_cap():
    batch = RecordBatch(BatchBuilder(compression=4).append(None, b"\0" * 100_000,
                                                           timestamp=TS).build())
    with pytest.raises(CorruptRecordError, match="bomb"):
        list(batch.records(max_uncompressed_bytes=10_000))


def test_all_errors_are_storage_errors():
    for exc in (CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError):
        assert issubclass(exc, StorageError)
    assert (CorruptRecordError.code, InvalidRecordError.code,
            UnsupportedCompressionTypeError.code) == (2, 87, 76)


# -- kafka-python cross-checks -------------------------------------------------------------

RECORDS = [
    (b"k0", b"v0", []),
    (None, b"value-without-key", [("h1", b"x"), ("h2", b"")]),
    (b"key-without-value", None, []),
    (b"k3", b"x" * 5000, [("big", b"y" * 300)]),
]


@pytest.mark.parametrize("codec", range(5))
def test_we_parse_kafka_python_batches(codec):
    theirs = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                       producer_id=12, producer_epoch=1, base_sequence=100,
                                       batch_size=1 << 20)
    for i, (key, value, headers) in enumerate(RECORDS):
        theirs.append(i, timestamp=TS + i, key=key, value=value, headers=headers)
    batch = RecordBatch(bytes(theirs.build()))
    batch.validate(deep=True, from_client=True)
    assert (batch.compression, batch.record_count, batch.last_offset_delta) == (codec, 4, 3)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (12, 1, 100)
    assert list(batch.records()) == [
        Record(i, TS + i, k, v, tuple(h)) for i, (k, v, h) in enumerate(RECORDS)]


@pytest.mark.parametrize("codec", range(5))
def test_kafka_python_parses_our_batches(codec):
    ours = BatchBuilder(1000, compression=codec, producer_id=12, producer_epoch=1,
                        base_sequence=100, is_transactional=True)
    for i, (key, value, headers) in enumerate(RECORDS):
        ours.append(key, value, headers=headers, timestamp=TS + i)
    theirs = DefaultRecordBatch(bytearray(ours.build()))
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.compression_type) == (1000, codec)
    assert theirs.is_transactional
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (12, 1, 100)
    decoded = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    assert decoded == [(1000 + i, TS + i, k, v, h) for i, (k, v, h) in enumerate(RECORDS)]


def test_uncompressed_bytes_identical_to_kafka_python():
    theirs = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                       producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                       batch_size=1 << 20)
    ours = BatchBuilder(partition_leader_epoch=0)    # kafka-python writes 0, Java -1
    for i, (key, value, headers) in enumerate(RECORDS):
        theirs.append(i, timestamp=TS + i, key=key, value=value, headers=headers)
        ours.append(key, value, headers=headers, timestamp=TS + i)
    assert ours.build() == bytes(theirs.build())
