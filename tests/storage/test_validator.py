"""storage/validator.py: every poison is refused with Kafka's error, valid batches pass."""
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from storage import codecs, validator
from storage.batch import (CRC_OFFSET, HEADER_SIZE, LAST_OFFSET_DELTA_OFFSET,
                           RECORD_COUNT_OFFSET, BatchBuilder, RecordBatch, crc32c,
                           encode_varint)
from storage.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from storage.legacy import LegacyRecord
from tests.conftest import require

NOW = 1_700_000_000_000
TYPED = (CorruptRecordError, InvalidRecordError, InvalidTimestampError)


@pytest.fixture(autouse=True, params=["pure", "fast"])
def walk_impl(request, monkeypatch):
    """Every test here runs with the pure-Python walk alone and with the compiled fast
    check in front of it (storage/_recwalk.c): the answers must not differ."""
    if request.param == "pure":
        monkeypatch.setattr(validator, "_recwalk", None)
    elif validator._recwalk is None:
        require("storage._recwalk",
                "not loaded: not compiled (pip install -e . builds it) or MPBROKER_PURE_PYTHON=1")
    return request.param


def build(records=None, compression=0, **kw):
    """A client batch; records are (key, value, headers, timestamp)."""
    if records is None:
        records = [(b"k%d" % i, b"value %d" % i, (("h", b"x"),) if i % 2 else (), NOW)
                   for i in range(5)]
    b = BatchBuilder(compression=compression, **kw)
    for key, value, headers, ts in records:
        b.append(key, value, headers, timestamp=ts)
    return bytearray(b.build())


def recrc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[21:])))
    return buf


def with_body(buf: bytearray, body: bytes, count=None) -> bytearray:
    """The same header over another records region (lengths, count and CRC fixed)."""
    out = bytearray(buf[:HEADER_SIZE]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    if count is not None:
        struct.pack_into(">i", out, RECORD_COUNT_OFFSET, count)
        struct.pack_into(">i", out, LAST_OFFSET_DELTA_OFFSET, count - 1)
    return recrc(out)


def check(buf, rules=validator.Rules()):
    return validator.validate_batch(RecordBatch(buf), rules)


@pytest.mark.parametrize("codec", sorted(codecs.NAMES))
def test_valid_batches_pass_and_return_the_records_region(codec):
    buf = build(compression=codec)
    data = check(buf)
    batch = RecordBatch(buf)
    records = list(batch.records(data=data))
    assert [r.key for r in records] == [b"k%d" % i for i in range(5)]
    assert records == list(batch.records())
    assert data == build()[HEADER_SIZE:]            # decompressed, once


def test_null_keys_values_and_large_fields_pass():
    recs = [(None, None, (), NOW), (b"", b"", (("", None),), NOW),
            (b"k" * 300, b"v" * 20000, (("a" * 200, b"b" * 70000),), NOW)]
    data = check(build(recs))
    assert len(list(RecordBatch(build(recs)).records(data=data))) == 3


def test_garbage_varints_are_invalid_record():
    buf = build()
    body = bytearray(buf[HEADER_SIZE:])
    body[3:9] = b"\xff" * 6                         # offset delta: a 6-byte varint
    with pytest.raises(InvalidRecordError):
        check(with_body(buf, bytes(body)))
    with pytest.raises(InvalidRecordError):         # a varint cut by the batch end
        check(with_body(buf, bytes(buf[HEADER_SIZE:]) + b"\x80"))


@pytest.mark.parametrize("delta", [1, -1, 3])
def test_record_count_disagreeing_with_the_records_is_invalid_record(delta):
    buf = build()
    with pytest.raises(InvalidRecordError, match="declared batch size"):
        check(with_body(buf, bytes(buf[HEADER_SIZE:]), count=5 + delta))


def test_record_length_beyond_the_batch_or_short_of_its_fields():
    buf = build([(b"k", b"v", (), NOW)])
    body = bytearray(buf[HEADER_SIZE:])
    body[0] = encode_varint(len(body) + 5)[0]       # longer than the batch
    with pytest.raises(InvalidRecordError):
        check(with_body(buf, bytes(body)))
    body = bytes(buf[HEADER_SIZE:]) + b"\x00"       # one byte beyond the fields
    body = encode_varint(len(body) - 1) + body[1:]
    with pytest.raises(InvalidRecordError, match="Invalid record size"):
        check(with_body(buf, body))


def record(offset_delta=0, key=b"k", value=b"v", headers=b"\x00", ts_delta=0,
           key_len=None, value_len=None):
    body = b"\x00" + encode_varint(ts_delta) + encode_varint(offset_delta)
    body += encode_varint(len(key) if key_len is None else key_len) + key
    body += encode_varint(len(value) if value_len is None else value_len) + value + headers
    return encode_varint(len(body)) + body


@pytest.mark.parametrize("rec", [
    record(key_len=-2, key=b""), record(value_len=-7, value=b""),
    record(headers=encode_varint(-1)), record(headers=encode_varint(1) + encode_varint(-1)),
    record(headers=encode_varint(1) + encode_varint(1) + b"a" + encode_varint(-3)),
    record(offset_delta=1)], ids=["key", "value", "header-count", "header-key-null",
                                  "header-value", "offset-delta"])
def test_bad_fields_are_invalid_record(rec):
    buf = build([(b"k", b"v", (), NOW)])
    assert check(with_body(buf, record(), 1)) is not None      # the helper builds valid ones
    with pytest.raises(InvalidRecordError):
        check(with_body(buf, rec, 1))


def test_bad_compressed_stream_is_corrupt_message():
    buf = build(compression=codecs.GZIP)
    body = bytearray(buf[HEADER_SIZE:])
    body[12:20] = b"\x00" * 8
    with pytest.raises(CorruptRecordError):
        check(with_body(buf, bytes(body)))
    for codec in (codecs.SNAPPY, codecs.LZ4, codecs.ZSTD):
        buf = build(compression=codec)
        with pytest.raises(CorruptRecordError):
            check(with_body(buf, b"\x00garbage" * 4))


def test_compressed_records_are_walked_too():
    good = build(compression=codecs.ZSTD)
    raw = build()
    body = bytearray(raw[HEADER_SIZE:])
    body[3:9] = b"\xff" * 6
    with pytest.raises(InvalidRecordError):
        check(with_body(good, codecs.compress(codecs.ZSTD, bytes(body))))


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.LZ4, codecs.ZSTD, codecs.SNAPPY])
def test_decompression_bomb_refused_without_inflating_it_all(codec):
    limit = 1 << 20
    inner = record(value=bytes(16 << 20))          # one 16 MiB record of zeros
    buf = with_body(build([(b"k", b"v", (), NOW)], compression=codec),
                    codecs.compress(codec, inner), 1)
    assert len(buf) < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="exceeds"):
            check(buf, validator.Rules(max_uncompressed_bytes=limit))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * limit


def test_keyless_records_on_a_compacted_topic():
    recs = [(b"a", b"1", (), NOW), (None, b"2", (), NOW), (b"c", b"3", (), NOW),
            (None, None, (), NOW)]
    check(build(recs))                              # fine on a delete topic
    with pytest.raises(InvalidRecordError) as e:
        check(build(recs), validator.Rules(compacted=True))
    assert [i for i, _ in e.value.record_errors] == [1, 3]
    assert all("Compacted topic cannot accept message without key" in m
               for _, m in e.value.record_errors)
    assert "2 record errors" in e.value.error_message


def test_every_record_timestamp_is_checked():
    rules = validator.Rules(now_ms=NOW, before_max_ms=60_000, after_max_ms=1_000)
    # first and max in bounds (the log's header check passes), one in between is not
    recs = [(b"a", b"1", (), NOW), (b"b", b"2", (), NOW - 3_600_000), (b"c", b"3", (), NOW),
            (b"d", b"4", (), NOW + 500), (b"e", b"5", (), -1)]
    with pytest.raises(InvalidTimestampError) as e:
        check(build(recs), rules)
    assert [i for i, _ in e.value.record_errors] == [1]
    recs[1] = (b"b", b"2", (), NOW - 1_000)
    check(build(recs), rules)
    # a keyless record's error is its key error; any timestamp error wins the code
    recs[0] = (None, b"1", (), NOW)
    recs[2] = (b"c", b"3", (), NOW + 5_000)
    with pytest.raises(InvalidTimestampError) as e:
        check(build(recs), rules._replace(compacted=True))
    assert [(i, "Compacted" in m) for i, m in e.value.record_errors] == [(0, True), (2, False)]
    # LogAppendTime topic: no bounds
    check(build(recs), rules._replace(log_append_time=True))


def test_producer_may_not_set_log_append_time_on_a_log_append_time_topic():
    buf = build(timestamp_type=1, log_append_time_ms=NOW)
    check(buf)                                      # CreateTime topic: max timestamp read
    with pytest.raises(InvalidTimestampError) as e:
        check(buf, validator.Rules(log_append_time=True))
    assert len(e.value.record_errors) == 5
    with pytest.raises(InvalidTimestampError):      # out of bounds on a CreateTime topic
        check(buf, validator.Rules(now_ms=NOW + 10**9, before_max_ms=1000))


def test_legacy_records_follow_the_same_rules():
    def rec(key=b"k", ts=NOW, magic=1, ts_type=0):
        return LegacyRecord(0, ts, key, b"v", magic, 0, ts_type)
    rules = validator.Rules(now_ms=NOW, before_max_ms=1000, after_max_ms=1000)
    validator.validate_legacy_records([rec(), rec(None), rec(ts=-1), rec(magic=0, ts=-1)],
                                      rules)
    with pytest.raises(InvalidRecordError) as e:
        validator.validate_legacy_records([rec(), rec(None)], rules._replace(compacted=True))
    assert [i for i, _ in e.value.record_errors] == [1]
    with pytest.raises(InvalidTimestampError) as e:
        validator.validate_legacy_records([rec(), rec(ts=NOW - 5000), rec()], rules)
    assert [i for i, _ in e.value.record_errors] == [1]
    with pytest.raises(InvalidTimestampError):
        validator.validate_legacy_records([rec(ts_type=1)], rules._replace(log_append_time=True))


def test_rules_from_a_topic_config():
    from storage.log import LogConfig
    c = LogConfig(cleanup_policy="compact,delete", message_timestamp_difference_max_ms=5,
                  message_timestamp_after_max_ms=7)
    r = validator.rules_for(c, NOW)
    assert (r.compacted, r.log_append_time, r.before_max_ms, r.after_max_ms) == \
        (True, False, 5, 7)
    assert validator.rules_for(LogConfig(message_timestamp_type="LogAppendTime"),
                               NOW).log_append_time


def _consistent_or_refused(buf, rules=validator.Rules()):
    """Either a typed error, or records that decode with sequential offsets."""
    try:
        data = check(buf, rules)
    except TYPED:
        return False
    batch = RecordBatch(buf)
    records = list(batch.records(data=data))
    assert len(records) == batch.record_count
    assert [r.offset for r in records] == list(range(len(records)))
    return True


def test_every_single_byte_corruption_of_the_records_region():
    buf = build([(b"key", b"value", (("h", b"v"),), NOW), (None, b"x" * 70, (), NOW + 1),
                 (b"k", None, (), NOW + 2)])
    accepted = 0
    for pos in range(HEADER_SIZE, len(buf)):
        for value in range(256):
            if value == buf[pos]:
                continue
            bad = bytearray(buf)
            bad[pos] = value
            accepted += _consistent_or_refused(recrc(bad))
    assert accepted > 0                             # key/value bytes are free-form


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD])
def test_every_single_byte_corruption_of_a_compressed_stream(codec):
    buf = build([(b"key", b"value" * 5, (("h", b"v"),), NOW), (None, b"x" * 70, (), NOW + 1)],
                compression=codec)
    for pos in range(HEADER_SIZE, len(buf)):
        for value in {0x00, 0x01, 0x7F, 0x80, 0xFF, buf[pos] ^ 0x01, buf[pos] ^ 0x80}:
            if value != buf[pos]:
                bad = bytearray(buf)
                bad[pos] = value
                _consistent_or_refused(recrc(bad))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=200)),
                          st.one_of(st.none(), st.binary(max_size=300)),
                          st.lists(st.tuples(st.text(max_size=5),
                                             st.one_of(st.none(), st.binary(max_size=9))),
                                   max_size=3)),
                min_size=1, max_size=20),
       st.sampled_from(sorted(codecs.NAMES)),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
       st.booleans())
def test_random_batches_and_corruptions(recs, codec, flips, compacted):
    buf = build([(k, v, tuple(h), NOW) for k, v, h in recs], compression=codec)
    rules = validator.Rules(compacted=compacted)
    if not compacted or all(k is not None for k, _, _ in recs):
        assert _consistent_or_refused(buf, rules)
    # corrupt the uncompressed records region, recompress, fix the CRC
    body = bytearray(build([(k, v, tuple(h), NOW) for k, v, h in recs])[HEADER_SIZE:])
    for pos, value in flips:
        body[pos % len(body)] = value
    _consistent_or_refused(with_body(buf, codecs.compress(codec, bytes(body))), rules)
