"""Property tests: no bytes make the batch code raise anything but storage errors, and
BatchBuilder -> RecordBatch.records() round-trips."""
import struct

import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import codecs
from storage.batch import BatchBuilder, RecordBatch, iter_batches
from storage.errors import StorageError

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(FUZZ, max_examples=150)          # the slow ones: many batches per example
CAP = 1 << 20

nullable_bytes = st.none() | st.binary(max_size=64)
headers = st.lists(st.tuples(st.text(max_size=8), nullable_bytes), max_size=3)
timestamps = st.integers(min_value=0, max_value=2**41)
records = st.lists(st.tuples(nullable_bytes, nullable_bytes, headers, timestamps),
                   min_size=0, max_size=12)


def exercise(buf, allow_partial_tail=False):
    """Drive every parsing entry point; only StorageError may come out."""
    try:
        for batch in iter_batches(buf, allow_partial_tail=allow_partial_tail):
            repr(batch)
            try:
                batch.validate(deep=True, max_uncompressed_bytes=CAP)
            except StorageError:
                pass
            try:
                for _ in batch.records(max_uncompressed_bytes=CAP):
                    pass
            except StorageError:
                pass
    except StorageError:
        pass


def resign(buf):
    if len(buf) >= 21:
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return buf


@st.composite
def valid_batches(draw):
    codec = draw(st.integers(0, 4))
    builder = BatchBuilder(draw(st.integers(0, 2**40)), compression=codec,
                           producer_id=draw(st.integers(-1, 2**40)),
                           producer_epoch=draw(st.integers(-1, 2**15 - 1)),
                           base_sequence=draw(st.integers(-1, 2**31 - 1)),
                           is_transactional=draw(st.booleans()))
    for key, value, hdrs, ts in draw(records):
        builder.append(key, value, headers=hdrs, timestamp=ts)
    return builder


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data):
    exercise(data)
    exercise(data, allow_partial_tail=True)


@FUZZ
@given(st.binary(min_size=49, max_size=300), st.integers(0, 4), st.integers(-3, 40))
def test_random_body_behind_a_plausible_resigned_header(body, codec, count):
    # A correct header and CRC over random records reaches the record decoder.
    header = struct.pack(">qiibIhiqqqhii", 0, 49 + len(body), 0, 2, 0, codec, max(count - 1, 0),
                         0, 0, -1, -1, -1, count)
    exercise(resign(bytearray(header + body)))


@FEW
@given(valid_batches(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)),
                                 min_size=1, max_size=4), st.booleans())
def test_bit_flips(builder, flips, fix_crc):
    buf = bytearray(builder.build())
    for position, bit in flips:
        buf[position % len(buf)] ^= 1 << bit
    if fix_crc:
        resign(buf)
    exercise(buf)
    exercise(buf[: len(buf) // 2], allow_partial_tail=True)


@FEW
@given(valid_batches(), st.data())
def test_body_corruption_behind_a_valid_crc(builder, data):
    buf = bytearray(builder.build())
    if len(buf) > 61:
        position = data.draw(st.integers(61, len(buf) - 1))
        buf[position] = data.draw(st.integers(0, 255))
        exercise(resign(buf))


@FEW
@given(valid_batches())
def test_round_trip(builder):
    expected = [(builder.base_offset + delta, ts, key, value,
                 tuple((k, v) for k, v in hdrs))
                for delta, ts, key, value, hdrs in builder._records]
    buf = builder.build()
    batch = RecordBatch(buf)
    batch.validate(deep=True)
    if expected:
        batch.validate(from_client=batch.producer_id < 0 or batch.base_sequence >= 0)
    assert batch.record_count == len(expected) and batch.size == len(buf)
    assert [tuple(r) for r in batch.records()] == expected
    if expected:
        assert batch.max_timestamp == max(r[1] for r in expected)
        assert batch.last_offset == expected[-1][0]


@FEW
@given(st.lists(valid_batches(), min_size=1, max_size=4))
def test_iter_batches_round_trip(builders):
    blobs = [b.build() for b in builders]
    found = list(iter_batches(b"".join(blobs)))
    assert [bytes(f.buffer) for f in found] == blobs


@FUZZ
@given(st.integers(0, 4), st.binary(max_size=300), st.booleans())
def test_codec_garbage(codec, data, legacy):
    try:
        codecs.decompress(codec, data, 4096, legacy_checksum=legacy)
    except StorageError:
        pass
