"""Record batches, magic v2: zero-copy views over the bytes a producer sent.

The wire format is the disk format (ARCHITECTURE §3): the broker validates the header
and CRC-32C, writes the base offset (and LogAppendTime where configured) in place, and
appends the same bytes. Nothing on the append path looks at individual records.

Batch layout (big-endian; offsets are byte positions from the batch start)::

     0 base_offset            int64
     8 batch_length           int32   bytes after this field: size = batch_length + 12
    12 partition_leader_epoch int32   not covered by the CRC
    16 magic                  int8    2
    17 crc                    uint32  CRC-32C (Castagnoli) of bytes [21, size)
    21 attributes             int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy,
                                      3 lz4, 4 zstd), bit 3 timestamp type (1 =
                                      LogAppendTime), bit 4 transactional, bit 5
                                      control, bit 6 delete horizon set
    23 last_offset_delta      int32
    27 base_timestamp         int64   first record's timestamp, or the delete horizon
    35 max_timestamp          int64   max record timestamp, or the LogAppendTime
    43 producer_id            int64   -1 when not idempotent
    51 producer_epoch         int16
    53 base_sequence          int32
    57 record_count           int32
    61 records                        compressed as a whole when compression != 0

Record layout (varint = zig-zag base-128, varlong the same with up to 10 bytes)::

    length          varint   bytes after this field
    attributes      int8     unused, 0
    timestamp_delta varlong  timestamp - base_timestamp
    offset_delta    varint   offset - base_offset
    key_length      varint   -1 for a null key
    key             bytes
    value_length    varint   -1 for a null value
    value           bytes
    header_count    varint
    headers         header_count x (key_length varint >= 0, key utf-8,
                                    value_length varint (-1 = null), value)

With LogAppendTime, every record's timestamp reads as the batch's max_timestamp.
Control batches (transaction markers) hold one record whose key is
(version int16, type int16: 0 abort, 1 commit) and whose value is
(version int16, coordinator_epoch int32).

Errors: framing, size, magic and CRC problems raise `CorruptRecordError`; well-framed
batches that break a rule, and bad records inside a batch whose CRC matched, raise
`InvalidRecordError` (Kafka's split between CORRUPT_MESSAGE and INVALID_RECORD).
Nothing else escapes from parsing, whatever the bytes.

The varints are storage/varint.py's (shared with the protocol layer's codecs).
"""
import struct
import time
from typing import Iterator, NamedTuple, Optional

import crc32c as _crc32c

from storage import codecs
from storage.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError
from storage.varint import encode_varint, varint_at, varlong_at

MAGIC = 2
LOG_OVERHEAD = 12                   # base_offset + batch_length
HEADER_SIZE = 61                    # RECORD_BATCH_OVERHEAD
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
LEGACY_MIN_MESSAGE_SIZE = 14        # v0 message without offset/length: what framing accepts
MIN_RECORD_SIZE = 7                 # length, attributes, ts, offset, key, value, headers
DEFAULT_MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORD_COUNT_OFFSET = 57

_HEADER = struct.Struct(">qiibIhiqqqhii")
_LOG_HEADER = struct.Struct(">qi")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")
_INT32_MAX = 2**31 - 1
assert _HEADER.size == HEADER_SIZE


def crc32c(data) -> int:
    return _crc32c.crc32c(data)


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: tuple          # ((str, bytes | None), ...); keys decoded utf-8, surrogateescape


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


def increment_sequence(sequence: int, increment: int) -> int:
    """Producer sequences wrap from INT32_MAX to 0 (Kafka's DefaultRecordBatch)."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


# -- the batch view ------------------------------------------------------------------------

class RecordBatch:
    """A view over one v2 batch at the start of `buf` (bytes-like; kept, never copied).

    Header properties read straight from the buffer. Reading them is safe once
    `validate()` passed (or `magic == 2` and `len(buf) >= 61`); `records()` and
    `validate()` check bounds themselves and raise only storage errors.
    """

    __slots__ = ("_buf",)

    def __init__(self, buf):
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        if len(mv) < MAGIC_OFFSET + 1:
            raise CorruptRecordError("batch shorter than its log header (%d bytes)" % len(mv))
        self._buf = mv

    def __repr__(self):
        if len(self._buf) < HEADER_SIZE:
            return "RecordBatch(<%d bytes, magic %d>)" % (len(self._buf), self.magic)
        return "RecordBatch(base_offset=%d, count=%d, size=%d, codec=%d)" % (
            self.base_offset, self.record_count, self.size, self.compression)

    # header fields
    @property
    def base_offset(self) -> int:
        return _I64.unpack_from(self._buf, BASE_OFFSET_OFFSET)[0]

    @property
    def batch_length(self) -> int:
        return _I32.unpack_from(self._buf, BATCH_LENGTH_OFFSET)[0]

    @property
    def partition_leader_epoch(self) -> int:
        return _I32.unpack_from(self._buf, PARTITION_LEADER_EPOCH_OFFSET)[0]

    @property
    def magic(self) -> int:
        return _I8.unpack_from(self._buf, MAGIC_OFFSET)[0]

    @property
    def crc(self) -> int:
        return _U32.unpack_from(self._buf, CRC_OFFSET)[0]

    @property
    def attributes(self) -> int:
        return _I16.unpack_from(self._buf, ATTRIBUTES_OFFSET)[0]

    @property
    def last_offset_delta(self) -> int:
        return _I32.unpack_from(self._buf, LAST_OFFSET_DELTA_OFFSET)[0]

    @property
    def base_timestamp(self) -> int:
        return _I64.unpack_from(self._buf, BASE_TIMESTAMP_OFFSET)[0]

    @property
    def max_timestamp(self) -> int:
        return _I64.unpack_from(self._buf, MAX_TIMESTAMP_OFFSET)[0]

    @property
    def producer_id(self) -> int:
        return _I64.unpack_from(self._buf, PRODUCER_ID_OFFSET)[0]

    @property
    def producer_epoch(self) -> int:
        return _I16.unpack_from(self._buf, PRODUCER_EPOCH_OFFSET)[0]

    @property
    def base_sequence(self) -> int:
        return _I32.unpack_from(self._buf, BASE_SEQUENCE_OFFSET)[0]

    @property
    def record_count(self) -> int:
        return _I32.unpack_from(self._buf, RECORD_COUNT_OFFSET)[0]

    def header(self) -> BatchHeader:
        """All header fields in one unpack (the append path reads most of them)."""
        return BatchHeader._make(_HEADER.unpack_from(self._buf, 0))

    # derived
    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def buffer(self) -> memoryview:
        """The batch's own bytes (a view of exactly `size` bytes, or fewer if truncated)."""
        return self._buf[:self.size]

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> Optional[int]:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(base, self.last_offset_delta)

    def compute_crc(self) -> int:
        return _crc32c.crc32c(self._buf[ATTRIBUTES_OFFSET:self.size])

    # validation
    def validate(self, deep: bool = False, from_client: bool = False,
                 max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> None:
        """Check framing, magic, CRC-32C and the header's own consistency.

        `from_client` adds the rules Kafka applies to batches a producer sent
        (count == last_offset_delta + 1 > 0, no control batches, a sequence with a
        producer id). `deep` also walks every record (decompressing) and checks its
        framing, the record count and that offset deltas increase (Kafka requires this
        for compacted topics and conversions); it costs a pass over the records.
        """
        buf = self._buf
        if len(buf) < HEADER_SIZE:
            raise CorruptRecordError("batch of %d bytes is shorter than a v2 header" % len(buf))
        (_, batch_length, _, magic, crc, attributes, last_offset_delta, _, _, producer_id, _,
         base_sequence, record_count) = _HEADER.unpack_from(buf, 0)
        size = batch_length + LOG_OVERHEAD
        if batch_length < MIN_BATCH_LENGTH or len(buf) < size:
            self._check_frame()                     # raises with the specific message
        if magic != MAGIC:
            raise CorruptRecordError("unsupported magic %d in a v2 batch view" % magic)
        if crc != _crc32c.crc32c(buf[ATTRIBUTES_OFFSET:size]):
            raise CorruptRecordError("record batch CRC mismatch (stored %d)" % crc)
        codec = attributes & COMPRESSION_MASK
        if codec > codecs.ZSTD:
            raise UnsupportedCompressionTypeError("unknown compression type id %d" % codec)
        if record_count < 0:
            raise InvalidRecordError("invalid record count %d" % record_count)
        if record_count and last_offset_delta < record_count - 1:
            raise InvalidRecordError("last offset delta %d < record count %d - 1"
                                     % (last_offset_delta, record_count))
        if codec == codecs.NONE and record_count * MIN_RECORD_SIZE > size - HEADER_SIZE:
            raise CorruptRecordError("record count %d does not fit in %d bytes"
                                     % (record_count, size - HEADER_SIZE))
        if from_client:
            self._validate_client_rules(attributes, last_offset_delta, producer_id,
                                        base_sequence, record_count)
        if deep:
            self._validate_records(from_client, max_uncompressed_bytes)

    def _check_frame(self):
        available = len(self._buf)
        if available < HEADER_SIZE:
            raise CorruptRecordError("batch of %d bytes is shorter than a v2 header" % available)
        batch_length = self.batch_length
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError("batch length %d below the minimum %d"
                                     % (batch_length, MIN_BATCH_LENGTH))
        if available < batch_length + LOG_OVERHEAD:
            raise CorruptRecordError("batch of %d bytes truncated to %d"
                                     % (batch_length + LOG_OVERHEAD, available))

    @staticmethod
    def _validate_client_rules(attributes, last_offset_delta, producer_id, base_sequence,
                               record_count):
        if record_count == 0:
            raise InvalidRecordError("invalid reported count for record batch: 0")
        if last_offset_delta + 1 != record_count:
            raise InvalidRecordError("inconsistent batch offset range (%d) and record count (%d)"
                                     % (last_offset_delta + 1, record_count))
        if attributes & CONTROL_MASK:
            raise InvalidRecordError("clients are not allowed to write control records")
        if producer_id > NO_PRODUCER_ID and base_sequence < 0:
            raise InvalidRecordError("invalid sequence number %d" % base_sequence)

    def _validate_records(self, from_client, max_uncompressed_bytes):
        last_offset_delta = self.last_offset_delta
        previous = -1
        count = 0
        for count, delta in enumerate(self._offset_deltas(max_uncompressed_bytes), 1):
            if delta <= previous or delta > last_offset_delta:
                raise InvalidRecordError("record offset delta %d out of order (after %d, last %d)"
                                         % (delta, previous, last_offset_delta))
            if from_client and delta != count - 1:
                raise InvalidRecordError("record offset delta %d, expected %d" % (delta, count - 1))
            previous = delta
        if count != self.record_count:
            raise InvalidRecordError("batch holds %d records, header says %d"
                                     % (count, self.record_count))

    def _offset_deltas(self, max_uncompressed_bytes):
        base_offset = self.base_offset
        for record in self.records(max_uncompressed_bytes):
            yield record.offset - base_offset

    # in-place updates (the buffer must be writable)
    def set_base_offset(self, base_offset: int) -> None:
        _I64.pack_into(self._buf, BASE_OFFSET_OFFSET, base_offset)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        _I32.pack_into(self._buf, PARTITION_LEADER_EPOCH_OFFSET, epoch)

    def set_log_append_time(self, timestamp_ms: int) -> None:
        """Mark the batch LogAppendTime with max_timestamp = timestamp_ms; recompute the CRC."""
        attributes = self.attributes | TIMESTAMP_TYPE_MASK
        if attributes == self.attributes and timestamp_ms == self.max_timestamp:
            return
        _I16.pack_into(self._buf, ATTRIBUTES_OFFSET, attributes)
        _I64.pack_into(self._buf, MAX_TIMESTAMP_OFFSET, timestamp_ms)
        _U32.pack_into(self._buf, CRC_OFFSET, self.compute_crc())

    def set_max_timestamp(self, timestamp_type: int, timestamp_ms: int) -> None:
        """General form of set_log_append_time (Kafka's setMaxTimestamp)."""
        attributes = self.attributes & ~TIMESTAMP_TYPE_MASK
        if timestamp_type == LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        _I16.pack_into(self._buf, ATTRIBUTES_OFFSET, attributes)
        _I64.pack_into(self._buf, MAX_TIMESTAMP_OFFSET, timestamp_ms)
        _U32.pack_into(self._buf, CRC_OFFSET, self.compute_crc())

    # records
    def records(self, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
                data=None) -> Iterator[Record]:
        """Decode the records (decompressing the whole body first, capped in size).

        `data`: the records region already decompressed (storage/validator.py returns
        it), so that a batch is decompressed once."""
        self._check_frame()
        if self.magic != MAGIC:
            raise CorruptRecordError("unsupported magic %d in a v2 batch view" % self.magic)
        (base_offset, _, _, _, _, attributes, _, base_timestamp, max_timestamp, _, _, _,
         record_count) = _HEADER.unpack_from(self._buf, 0)
        if record_count < 0:
            raise InvalidRecordError("invalid record count %d" % record_count)
        body = self._buf[HEADER_SIZE:self.size]
        codec = attributes & COMPRESSION_MASK
        if data is not None:
            pass
        elif codec == codecs.NONE:
            data = bytes(body)
        else:
            data = codecs.decompress(codec, body, max_uncompressed_bytes)
        log_append_time = max_timestamp if attributes & TIMESTAMP_TYPE_MASK else None
        return _decode_records(data, record_count, base_offset, base_timestamp, log_append_time)

    def __iter__(self):
        return iter(self.records())


def _decode_records(data: bytes, count: int, base_offset: int, base_timestamp: int,
                    log_append_time: Optional[int]) -> Iterator[Record]:
    try:
        yield from _decode_records_unchecked(data, count, base_offset, base_timestamp,
                                             log_append_time)
    except CorruptRecordError as exc:
        # A truncated varint inside a batch whose CRC matched: the record is invalid.
        raise InvalidRecordError("invalid record structure: %s" % exc) from None


def _decode_records_unchecked(data, count, base_offset, base_timestamp, log_append_time):
    end = len(data)
    if count * MIN_RECORD_SIZE > end:
        raise InvalidRecordError("record count %d does not fit in %d bytes" % (count, end))
    pos = 0
    for _ in range(count):
        length, pos = varint_at(data, pos, end)
        if length < MIN_RECORD_SIZE - 1 or length > end - pos:
            raise InvalidRecordError("invalid record size %d (%d bytes left)" % (length, end - pos))
        record_end = pos + length
        pos += 1                                            # attributes: unused
        timestamp_delta, pos = varlong_at(data, pos, record_end)
        offset_delta, pos = varint_at(data, pos, record_end)
        key, pos = _read_nullable_bytes(data, pos, record_end)
        value, pos = _read_nullable_bytes(data, pos, record_end)
        header_count, pos = varint_at(data, pos, record_end)
        if header_count:
            headers, pos = _read_headers(data, pos, record_end, header_count)
        else:
            headers = ()
        if pos != record_end:
            raise InvalidRecordError("record has %d bytes beyond its fields" % (record_end - pos))
        if log_append_time is None:
            timestamp = base_timestamp + timestamp_delta
        else:
            timestamp = log_append_time
        yield Record(base_offset + offset_delta, timestamp, key, value, headers)
    if pos != end:
        raise InvalidRecordError("incorrect declared batch size: %d bytes left after %d records"
                                 % (end - pos, count))


def _read_nullable_bytes(data, pos, limit):
    length, pos = varint_at(data, pos, limit)
    if length < 0:
        if length != -1:
            raise InvalidRecordError("invalid length %d" % length)
        return None, pos
    if length > limit - pos:
        raise InvalidRecordError("length %d beyond the record end" % length)
    return data[pos:pos + length], pos + length


def _read_headers(data, pos, limit, count):
    if count < 0 or count * 2 > limit - pos:
        raise InvalidRecordError("invalid number of record headers %d" % count)
    headers = []
    for _ in range(count):
        key, pos = _read_nullable_bytes(data, pos, limit)
        if key is None:
            raise InvalidRecordError("null header key")
        value, pos = _read_nullable_bytes(data, pos, limit)
        headers.append((key.decode("utf-8", "surrogateescape"), value))
    return tuple(headers), pos


# -- framing -------------------------------------------------------------------------

def iter_batches(buf, allow_partial_tail: bool = False) -> Iterator[RecordBatch]:
    """Yield a view over each consecutive batch in `buf` (a produce payload, a segment).

    Checks framing only (the length field), like Kafka's ByteBufferLogInputStream: each
    yielded batch still needs `validate()`. A length below the smallest message
    (v0, 14 bytes) or a truncated batch raises CorruptRecordError, except that with
    `allow_partial_tail` (fetch responses, which Kafka cuts at max_bytes) a truncated
    last batch ends the iteration silently.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    end = len(mv)
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining < LOG_OVERHEAD:
            if allow_partial_tail:
                return
            raise CorruptRecordError("%d trailing bytes are not a batch" % remaining)
        batch_length = _I32.unpack_from(mv, pos + BATCH_LENGTH_OFFSET)[0]
        if batch_length < LEGACY_MIN_MESSAGE_SIZE:
            raise CorruptRecordError("batch length %d below the minimum" % batch_length)
        size = batch_length + LOG_OVERHEAD
        if size > remaining:
            if allow_partial_tail:
                return
            raise CorruptRecordError("batch of %d bytes truncated to %d" % (size, remaining))
        yield RecordBatch(mv[pos:pos + size])
        pos += size


def batch_magic(buf, pos: int = 0) -> int:
    """The magic byte of the batch (or v0/v1 message) at `pos`; -1 when too short."""
    if len(buf) < pos + MAGIC_OFFSET + 1:
        return -1
    return _I8.unpack_from(buf, pos + MAGIC_OFFSET)[0]


# -- building ------------------------------------------------------------------------

def end_txn_marker(commit: bool, coordinator_epoch: int):
    """(key, value) of the control record that commits or aborts a transaction."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    return key, _END_TXN_VALUE.pack(0, coordinator_epoch)


def parse_control_key(key: bytes):
    """(version, type) of a control record key; InvalidRecordError if too short."""
    if key is None or len(key) < 4:
        raise InvalidRecordError("control record key too short")
    return _CONTROL_KEY.unpack_from(key, 0)


def parse_end_txn_value(value: bytes):
    """(version, coordinator_epoch) of an end-transaction marker's value."""
    if value is None or len(value) < 6:
        raise InvalidRecordError("end transaction marker value too short")
    return _END_TXN_VALUE.unpack_from(value, 0)


def _encode_bytes(data, out: bytearray):
    if data is None:
        out += b"\x01"                                  # zig-zag -1
    else:
        out += encode_varint(len(data))
        out += data


class BatchBuilder:
    """Builds one valid v2 batch (tests, internal topics, converted legacy data).

    `append(...)` returns the builder, so `BatchBuilder().append(k, v).build()` works.
    Timestamps default to `clock()` at append time; offsets are sequential unless an
    explicit `offset` (absolute) is given, e.g. to rebuild a compacted batch.
    """

    def __init__(self, base_offset: int = 0, *, compression: int = 0,
                 compression_level: Optional[int] = None, timestamp_type: int = CREATE_TIME,
                 log_append_time_ms: Optional[int] = None,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 base_sequence: int = NO_SEQUENCE, is_transactional: bool = False,
                 is_control: bool = False,
                 partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                 delete_horizon_ms: Optional[int] = None, clock=None):
        if not 0 <= compression <= codecs.ZSTD:
            raise UnsupportedCompressionTypeError("unknown compression type id %d" % compression)
        self.base_offset = base_offset
        self.compression = compression
        self.compression_level = compression_level
        self.timestamp_type = timestamp_type
        self.log_append_time_ms = log_append_time_ms
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.delete_horizon_ms = delete_horizon_ms
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._records = []          # (offset_delta, timestamp, key, value, headers)

    def __len__(self):
        return len(self._records)

    def append(self, key, value, headers=(), timestamp: Optional[int] = None,
               offset: Optional[int] = None) -> "BatchBuilder":
        if timestamp is None:
            timestamp = self._clock()
        if offset is None:
            delta = self._records[-1][0] + 1 if self._records else 0
        else:
            delta = offset - self.base_offset
            if delta < 0 or (self._records and delta <= self._records[-1][0]):
                raise ValueError("offsets must increase from the base offset")
        self._records.append((delta, timestamp, _as_bytes(key), _as_bytes(value),
                              tuple(headers)))
        return self

    def build(self, last_offset_delta: Optional[int] = None) -> bytes:
        records = self._records
        if records:
            base_timestamp = records[0][1]
            max_timestamp = max(r[1] for r in records)
            if last_offset_delta is None:
                last_offset_delta = records[-1][0]
        else:
            base_timestamp = max_timestamp = NO_TIMESTAMP
            last_offset_delta = last_offset_delta or 0
        if self.delete_horizon_ms is not None:
            base_timestamp = self.delete_horizon_ms
        attributes = self._attributes()
        if self.timestamp_type == LOG_APPEND_TIME:
            max_timestamp = (self.log_append_time_ms if self.log_append_time_ms is not None
                             else self._clock())
        body = self._encode_records(base_timestamp)
        if self.compression:
            body = codecs.compress(self.compression, body, self.compression_level)
        header = bytearray(_HEADER.pack(
            self.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body),
            self.partition_leader_epoch, MAGIC, 0, attributes, last_offset_delta,
            base_timestamp, max_timestamp, self.producer_id, self.producer_epoch,
            self.base_sequence, len(records)))
        out = header + body
        _U32.pack_into(out, CRC_OFFSET, _crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
        return bytes(out)

    def _attributes(self) -> int:
        attributes = self.compression
        if self.timestamp_type == LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attributes |= TRANSACTIONAL_MASK
        if self.is_control:
            attributes |= CONTROL_MASK
        if self.delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_MASK
        return attributes

    def _encode_records(self, base_timestamp: int) -> bytes:
        out = bytearray()
        for delta, timestamp, key, value, headers in self._records:
            body = bytearray(b"\x00")                          # attributes
            body += encode_varint(timestamp - base_timestamp)
            body += encode_varint(delta)
            _encode_bytes(key, body)
            _encode_bytes(value, body)
            body += encode_varint(len(headers))
            for header_key, header_value in headers:
                _encode_bytes(_as_bytes(header_key), body)
                _encode_bytes(_as_bytes(header_value), body)
            out += encode_varint(len(body))
            out += body
        return bytes(out)


def _as_bytes(data):
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8", "surrogateescape")
    return bytes(data)


def build_control_batch(base_offset: int, producer_id: int, producer_epoch: int,
                        commit: bool, coordinator_epoch: int, timestamp_ms: int,
                        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A transactional control batch holding one end-transaction marker."""
    key, value = end_txn_marker(commit, coordinator_epoch)
    builder = BatchBuilder(base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                           is_transactional=True, is_control=True,
                           partition_leader_epoch=partition_leader_epoch)
    return builder.append(key, value, timestamp=timestamp_ms).build()
