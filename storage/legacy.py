"""Message sets of magic v0 and v1 (Kafka before 0.11): parse (storage/convert.py
up-converts what this yields to v2 batches), build, and down-convert v2 batches for old
fetchers.

Message set entry (big-endian)::

    offset        int64
    message_size  int32    bytes of the message that follows
    crc           uint32   CRC-32 (zlib's, not Castagnoli) of magic .. end
    magic         int8     0 or 1
    attributes    int8     bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4; zstd
                           is v2 only), bit 3 (v1) timestamp type, 1 = LogAppendTime
    timestamp     int64    v1 only
    key           int32 length (-1 = null) + bytes
    value         int32 length (-1 = null) + bytes

A compressed message is a *wrapper*: its value is a compressed message set of inner
messages (never compressed themselves, same magic). v0 inner offsets are absolute.
v1 inner offsets are relative (0, 1, ...) and the wrapper holds the absolute offset of
the last inner message, so ``absolute = wrapper_offset - last_relative + relative``.
A v1 wrapper with LogAppendTime gives every inner message its own timestamp; inner
messages always say CreateTime. LZ4 in v0 uses the broken frame header checksum
(see storage.codecs).

Down-conversion builds, per v2 batch, plain messages (uncompressed batch) or
one wrapper (compressed batch), drops headers and control batches, and refuses zstd.
"""
import struct
import zlib
from typing import Iterator, NamedTuple, Optional

from storage import codecs
from storage.batch import (DEFAULT_MAX_UNCOMPRESSED_BYTES, LOG_OVERHEAD, NO_TIMESTAMP,
                           RecordBatch, iter_batches)
from storage.errors import (CorruptRecordError, InvalidRecordError,
                            UnsupportedCompressionTypeError, UnsupportedForMessageFormatError)

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
RECORD_OVERHEAD = {0: 14, 1: 22}        # crc, magic, attributes, [timestamp], key, value
_LOG_HEADER = struct.Struct(">qi")
_PREFIX = struct.Struct(">IbB")         # crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1


class LegacyRecord(NamedTuple):
    offset: int             # absolute
    timestamp: int          # -1 for v0
    key: Optional[bytes]
    value: Optional[bytes]
    magic: int
    codec: int              # of the wrapper it came out of, 0 if none
    timestamp_type: int     # the (outer) message's timestamp type


class _Message(NamedTuple):
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]


# -- parsing -------------------------------------------------------------------------------

def iter_messages(buf, allow_partial_tail: bool = False) -> Iterator[_Message]:
    """Yield the top-level messages of a v0/v1 message set, CRC-checked."""
    buf = bytes(buf)
    pos = 0
    end = len(buf)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            if allow_partial_tail:
                return
            raise CorruptRecordError("%d trailing bytes are not a message" % (end - pos))
        offset, size = _LOG_HEADER.unpack_from(buf, pos)
        if size < RECORD_OVERHEAD[0]:
            raise CorruptRecordError("message size %d below the minimum" % size)
        if size > end - pos - LOG_OVERHEAD:
            if allow_partial_tail:
                return
            raise CorruptRecordError("message of %d bytes truncated" % size)
        pos += LOG_OVERHEAD
        yield _decode_message(offset, buf, pos, pos + size)
        pos += size


def _decode_message(offset, buf, start, end):
    crc, magic, attributes = _PREFIX.unpack_from(buf, start)
    if magic not in RECORD_OVERHEAD:
        raise CorruptRecordError("invalid magic %d in a legacy message" % magic)
    if end - start < RECORD_OVERHEAD[magic]:
        raise CorruptRecordError("message of %d bytes below the v%d minimum" % (end - start, magic))
    if crc != zlib.crc32(memoryview(buf)[start + 4:end]):
        raise CorruptRecordError("message CRC mismatch at offset %d" % offset)
    pos = start + _PREFIX.size
    timestamp = NO_TIMESTAMP
    if magic == 1:
        timestamp = _I64.unpack_from(buf, pos)[0]
        pos += 8
    key, pos = _read_bytes(buf, pos, end)
    value, pos = _read_bytes(buf, pos, end)
    if pos != end:
        raise CorruptRecordError("message size does not match its fields")
    return _Message(offset, magic, attributes, timestamp, key, value)


def _read_bytes(buf, pos, end):
    if end - pos < 4:
        raise CorruptRecordError("truncated message field")
    length = _I32.unpack_from(buf, pos)[0]
    pos += 4
    if length < 0:
        if length != -1:
            raise CorruptRecordError("invalid field length %d" % length)
        return None, pos
    if length > end - pos:
        raise CorruptRecordError("field of %d bytes beyond the message end" % length)
    return buf[pos:pos + length], pos + length


def iter_records(buf, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
                 allow_partial_tail: bool = False) -> Iterator[LegacyRecord]:
    """Every logical record of a message set, wrappers opened, offsets made absolute."""
    for message in iter_messages(buf, allow_partial_tail):
        codec = message.attributes & CODEC_MASK
        timestamp_type = 1 if message.magic == 1 and message.attributes & TIMESTAMP_TYPE_MASK else 0
        if codec == codecs.NONE:
            yield LegacyRecord(message.offset, message.timestamp, message.key, message.value,
                               message.magic, 0, timestamp_type)
        else:
            yield from _open_wrapper(message, codec, timestamp_type, max_uncompressed_bytes)


def _open_wrapper(wrapper, codec, timestamp_type, max_uncompressed_bytes):
    if codec == codecs.ZSTD or codec > codecs.ZSTD:
        raise UnsupportedCompressionTypeError("compression id %d in a v%d message"
                                              % (codec, wrapper.magic))
    if wrapper.value is None:
        raise InvalidRecordError("compressed message without a value")
    data = codecs.decompress(codec, wrapper.value, max_uncompressed_bytes,
                             legacy_checksum=wrapper.magic == 0)
    inner = list(iter_messages(data))
    if not inner:
        raise InvalidRecordError("compressed message set is empty")
    base = wrapper.offset - inner[-1].offset if wrapper.magic == 1 else 0
    for message in inner:
        if message.magic != wrapper.magic:
            raise InvalidRecordError("inner magic %d does not match wrapper magic %d"
                                     % (message.magic, wrapper.magic))
        if message.attributes & CODEC_MASK:
            raise InvalidRecordError("inner messages must not be compressed")
        timestamp = wrapper.timestamp if timestamp_type == 1 else message.timestamp
        offset = base + message.offset
        if not _INT64_MIN <= offset <= _INT64_MAX:      # relative offsets of a bad wrapper
            raise InvalidRecordError("inner message offset %d is out of the int64 range"
                                     % offset)
        yield LegacyRecord(offset, timestamp, message.key, message.value,
                           message.magic, codec, timestamp_type)


# -- building and down-conversion --------------------------------------------------------

def encode_message(magic: int, attributes: int, timestamp: int, key, value) -> bytes:
    """One message without its offset and size (crc .. value)."""
    body = bytearray(struct.pack(">bB", magic, attributes))
    if magic == 1:
        body += _I64.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _I32.pack(-1)
        else:
            body += _I32.pack(len(field))
            body += field
    return struct.pack(">I", zlib.crc32(body)) + bytes(body)


def _entry(offset, message):
    return _LOG_HEADER.pack(offset, len(message)) + message


def build_message_set(records, magic: int, compression: int = codecs.NONE,
                      timestamp_type: int = 0, log_append_time_ms: Optional[int] = None
                      ) -> bytes:
    """A v0/v1 message set from `(offset, timestamp, key, value)` tuples.

    Compressed: one wrapper holding every record, inner offsets absolute (v0) or
    relative to the first record (v1), wrapper offset = the last record's offset.
    """
    if magic not in RECORD_OVERHEAD:
        raise ValueError("legacy magic must be 0 or 1")
    if compression not in (codecs.NONE, codecs.GZIP, codecs.SNAPPY, codecs.LZ4):
        raise UnsupportedCompressionTypeError("compression id %d is not allowed in v%d"
                                              % (compression, magic))
    records = list(records)
    type_bit = TIMESTAMP_TYPE_MASK if magic == 1 and timestamp_type == 1 else 0
    if compression == codecs.NONE:
        return b"".join(_entry(offset, encode_message(magic, type_bit, timestamp, key, value))
                        for offset, timestamp, key, value in records)
    if not records:
        return b""
    first = records[0][0]
    inner = b"".join(
        _entry(offset - first if magic == 1 else offset,
               encode_message(magic, 0, timestamp, key, value))
        for offset, timestamp, key, value in records)
    if type_bit:
        wrapper_timestamp = log_append_time_ms
    else:
        wrapper_timestamp = max(r[1] for r in records)
    value = codecs.compress(compression, inner, legacy_checksum=magic == 0)
    return _entry(records[-1][0],
                  encode_message(magic, compression | type_bit, wrapper_timestamp, None, value))


def down_convert(buf, to_magic: int,
                 max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> bytes:
    """Records (v2 batches and/or older messages) as a message set of `to_magic` (0/1).

    For a fetch: a partial trailing batch is dropped, control batches are dropped,
    headers are lost, and a zstd batch raises UnsupportedCompressionTypeError
    (Kafka answers UNSUPPORTED_COMPRESSION_TYPE to fetchers that predate zstd).
    """
    if to_magic not in RECORD_OVERHEAD:
        raise UnsupportedForMessageFormatError("cannot down-convert to magic %d" % to_magic)
    out = []
    for batch in iter_batches(buf, allow_partial_tail=True):
        magic = batch.magic
        if magic <= to_magic:
            out.append(bytes(batch.buffer))
        elif magic == 2:
            out.append(_down_convert_batch(batch, to_magic, max_uncompressed_bytes))
        elif magic == 1:
            out.append(_down_convert_legacy(batch.buffer, to_magic, max_uncompressed_bytes))
        else:
            raise CorruptRecordError("invalid magic %d" % magic)
    return b"".join(out)


def _down_convert_batch(batch: RecordBatch, to_magic, max_uncompressed_bytes):
    batch.validate()
    if batch.is_control:
        return b""
    codec = batch.compression
    if codec == codecs.ZSTD:
        raise UnsupportedCompressionTypeError("zstd batches cannot be read by a v%d fetcher"
                                              % to_magic)
    records = [(r.offset, r.timestamp, r.key, r.value)
               for r in batch.records(max_uncompressed_bytes)]
    return build_message_set(records, to_magic, codec, batch.timestamp_type, batch.max_timestamp)


def _down_convert_legacy(buf, to_magic, max_uncompressed_bytes):
    records = list(iter_records(buf, max_uncompressed_bytes))
    codec = records[0].codec if records else 0
    return build_message_set([(r.offset, r.timestamp, r.key, r.value) for r in records],
                             to_magic, codec)
