"""Record-format work around the log: what a produce payload becomes before
`Log.append`, and what an old fetcher gets instead of the stored v2 batches.

Produce (`prepare_produce(records, version, config, now_ms)`):

* Produce v3+ must carry magic v2 batches (anything else: INVALID_RECORD, raised by
  `Log.append`); v3-v6 may not use zstd (UNSUPPORTED_COMPRESSION_TYPE, as Kafka's
  ProduceRequest.validateRecords).  A magic-2 payload, of any Produce version, holds
  exactly one batch (`check_one_batch`, INVALID_RECORD otherwise, as Kafka).
* Produce v0-v2 may carry magic 0/1 message sets (Kafka keeps accepting v2 batches
  there too). A message set is validated (CRC-32 of every message, wrapper and inner,
  inner magic = wrapper magic, no nested compression, lengths; top-level messages
  above `max.message.bytes` give MESSAGE_TOO_LARGE; CreateTime timestamps outside
  `message.timestamp.before/after.max.ms` give INVALID_TIMESTAMP) and converted to one
  v2 batch with offsets 0..n-1 (the log assigns the real ones; inner offsets of v1
  wrappers are relative, see storage/legacy.py). v0 records keep timestamp -1. The
  batch takes the topic's `compression.type` (`producer`: the producer's codec) at the
  topic's `compression.<codec>.level`. LogAppendTime is written by the log on the v2
  batch header, as for every batch.
* A v2 batch whose codec differs from a topic `compression.type` other than
  `producer` is rebuilt with the topic's codec (records, offsets, timestamps,
  headers and the producer id/epoch/sequence/transactional flag are kept).
* Inflating any payload (legacy wrapper or v2 batch being recompressed) past
  `MAX_UNCOMPRESSED_BYTES` raises CorruptRecordError (CORRUPT_MESSAGE) without
  allocating more than that (storage.codecs bounds every decoder).

Fetch (`down_convert(data, to_magic, fetch_offset, max_bytes)`), for Fetch v0-v3
(v0-v1: magic 0, v2-v3: magic 1), as Kafka's RecordsUtil.downConvert: control
batches dropped, headers lost, an uncompressed batch becomes plain messages from
`fetch_offset` on, a compressed batch becomes one wrapper of the same codec (all its
records), zstd raises UnsupportedCompressionTypeError (Kafka: fetchers before v10
cannot read zstd) when it is the first batch (after converted ones, the output just
stops there). A partial trailing batch is dropped; the output stops after the batch
that reaches `max_bytes` (at least one batch is always converted).

Validation on the produce path
------------------------------
Every magic-2 batch a producer sends is validated by storage/validator.py before
`Log.append` (header, CRC-32C, decompression within `MAX_UNCOMPRESSED_BYTES`, the
structure of every record, keys on compacted topics, per-record timestamps), as
Kafka's LogValidator does; the records region it returns (decompressed once) is what
a recompression to the topic's `compression.type` rebuilds from. A v0/v1 message set
is parsed whole by storage/legacy.py (CRC-32 of every message, wrapper and inner;
framing: CORRUPT_MESSAGE; inner magic or nested compression: INVALID_RECORD) and its
records go through the same per-record rules (`validator.validate_legacy_records`:
keys, v1 timestamps, INVALID_RECORD / INVALID_TIMESTAMP with `record_errors`) before
conversion.  The cost per record and per MB is in loadtest/RESULTS.md
(`python -m loadtest.bench_validate`).  Code that reads stored batches (fetch,
compaction, down-conversion, recovery) still answers a storage error for a batch
whose records contradict its header (written before this validation, or by a
follower) instead of crashing.
"""
from __future__ import annotations

import struct
from typing import Optional

from storage import codecs, legacy, validator
from storage.batch import (BATCH_LENGTH_OFFSET, DEFAULT_MAX_UNCOMPRESSED_BYTES,
                           LOG_OVERHEAD, MAGIC, BatchBuilder, RecordBatch,
                           batch_magic, iter_batches)
from storage.errors import (CorruptRecordError, InvalidRecordError,
                            MessageTooLargeError, StorageError,
                            UnsupportedCompressionTypeError)

MAX_UNCOMPRESSED_BYTES = DEFAULT_MAX_UNCOMPRESSED_BYTES     # 64 MiB per batch/wrapper
LONG_MAX = 2**63 - 1
PRODUCER = "producer"
_LEVEL_FIELD = {codecs.GZIP: "compression_gzip_level", codecs.LZ4: "compression_lz4_level",
                codecs.ZSTD: "compression_zstd_level"}
_CODEC_OF_TYPE = {"uncompressed": codecs.NONE, "none": codecs.NONE, "gzip": codecs.GZIP,
                  "snappy": codecs.SNAPPY, "lz4": codecs.LZ4, "zstd": codecs.ZSTD}
_ENTRY_HEADER = struct.Struct(">qi")
_I32 = struct.Struct(">i")
ZSTD_MIN_PRODUCE_VERSION = 7
ZSTD_MIN_FETCH_VERSION = 10


# -- topic settings ----------------------------------------------------------------

def target_codec(config, source_codec: int) -> int:
    """The codec a batch is stored with: topic compression.type, or the producer's."""
    ctype = getattr(config, "compression_type", PRODUCER)
    if ctype == PRODUCER:
        return source_codec
    return _CODEC_OF_TYPE[ctype]


def compression_level(config, codec: int) -> Optional[int]:
    """The topic's compression.<codec>.level (None: the codec's default)."""
    name = _LEVEL_FIELD.get(codec)
    level = getattr(config, name, None) if name else None
    if codec == codecs.GZIP and level == -1:
        return None
    return level


def fetch_zstd_refused(config, version: int) -> bool:
    """Kafka: a fetcher before v10 gets UNSUPPORTED_COMPRESSION_TYPE on a zstd topic."""
    return version < ZSTD_MIN_FETCH_VERSION and \
        getattr(config, "compression_type", PRODUCER) == "zstd"


# -- produce ---------------------------------------------------------------------------

def prepare_produce(records, version: int, config, now_ms: int, validate: bool = True):
    """The bytes to hand to Log.append for one partition of a Produce request.

    Every batch is validated (storage/validator.py) first, unless `validate` is false
    (`produce.record.validation.enable=false`, trusted producers: a magic-2 batch that
    needs no recompression is then passed on after one length read). Returns `records`
    itself unless the payload is converted or recompressed (then a new writable
    bytearray). Raises StorageError subclasses (their `code` is the answer).
    """
    check_one_batch(records, version)
    if not validate and version >= ZSTD_MIN_PRODUCE_VERSION and \
            getattr(config, "compression_type", PRODUCER) == PRODUCER:
        return records
    magic = batch_magic(records)
    if magic < 0:
        raise CorruptRecordError("produce payload of %d bytes is not a batch" % len(records))
    rules = validator.rules_for(config, now_ms, MAX_UNCOMPRESSED_BYTES)
    if magic < MAGIC:
        if version >= 3:
            raise InvalidRecordError("Produce requests with version %d are only allowed to "
                                     "contain record batches with magic version 2" % version)
        return convert_legacy(records, config, now_ms, rules)
    ctype = getattr(config, "compression_type", PRODUCER)
    batches = list(iter_batches(records))
    rebuilt = []
    for b in batches:
        if b.magic != MAGIC:
            return records                              # Log.append refuses it
        codec = b.attributes & 0x07 if len(b.buffer) >= 23 else codecs.NONE
        if codec == codecs.ZSTD and version < ZSTD_MIN_PRODUCE_VERSION:
            raise UnsupportedCompressionTypeError(
                "Produce requests with version %d cannot use zstd (v%d+ needed)"
                % (version, ZSTD_MIN_PRODUCE_VERSION))
        data = validator.validate_batch(b, rules) if validate else None
        if ctype != PRODUCER and codec != target_codec(config, codec):
            rebuilt.append(recompress_batch(b, config, data))
        else:
            rebuilt.append(None)
    if not any(r is not None for r in rebuilt):
        return records
    return bytearray(b"".join(bytes(b.buffer) if r is None else r
                              for b, r in zip(batches, rebuilt)))


def check_one_batch(records, version: int) -> None:
    """A magic-2 payload holds exactly one batch (Kafka: ProduceRequest.validateRecords
    for v3+, LogValidator's "more than one batch" check for every version), else
    INVALID_RECORD.  One length field is read.  Trailing bytes
    that are not a whole second batch are refused the same way (Kafka trims a partial
    one silently; Log.append would answer CORRUPT_MESSAGE)."""
    if batch_magic(records) != MAGIC:
        return                          # legacy sets and short payloads: checked later
    (batch_length,) = _I32.unpack_from(records, BATCH_LENGTH_OFFSET)
    if 0 <= batch_length < len(records) - LOG_OVERHEAD:
        raise InvalidRecordError("Produce requests with version %d are only allowed to "
                                 "contain exactly one record batch (%d bytes follow the "
                                 "first)" % (version,
                                             len(records) - LOG_OVERHEAD - batch_length))


def recompress_batch(batch: RecordBatch, config, data=None) -> bytes:
    """One client v2 batch rebuilt with the topic's codec (header + CRC checked first).

    `data`: its records region as storage/validator.py returned it (not decompressed
    again)."""
    batch.validate(from_client=True)
    codec = target_codec(config, batch.compression)
    if codec == batch.compression:
        return bytes(batch.buffer)
    h = batch.header()
    builder = BatchBuilder(h.base_offset, compression=codec,
                           compression_level=compression_level(config, codec),
                           timestamp_type=batch.timestamp_type,
                           log_append_time_ms=h.max_timestamp,
                           producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                           base_sequence=h.base_sequence,
                           is_transactional=batch.is_transactional,
                           partition_leader_epoch=h.partition_leader_epoch)
    count = 0
    for count, r in enumerate(batch.records(MAX_UNCOMPRESSED_BYTES, data), 1):
        if r.offset != h.base_offset + count - 1:
            raise InvalidRecordError("record offset delta %d, expected %d"
                                     % (r.offset - h.base_offset, count - 1))
        builder.append(r.key, r.value, r.headers, timestamp=r.timestamp, offset=r.offset)
    if count != h.record_count:
        raise InvalidRecordError("batch holds %d records, header says %d"
                                 % (count, h.record_count))
    return builder.build()


def _check_entry_sizes(buf, max_message_bytes: int) -> None:
    """Kafka checks each top-level (shallow) message, log overhead included."""
    pos, end = 0, len(buf)
    while pos + LOG_OVERHEAD <= end:
        _, size = _ENTRY_HEADER.unpack_from(buf, pos)
        if size < 0:
            return                      # framing errors are reported by the parser
        if size + LOG_OVERHEAD > max_message_bytes:
            raise MessageTooLargeError("message of %d bytes exceeds max.message.bytes %d"
                                       % (size + LOG_OVERHEAD, max_message_bytes))
        pos += LOG_OVERHEAD + size


def convert_legacy(records, config, now_ms: int, rules=None) -> bytearray:
    """A magic 0/1 message set from a producer as one v2 batch (offsets 0..n-1)."""
    buf = bytes(records)
    _check_entry_sizes(buf, getattr(config, "max_message_bytes", LONG_MAX))
    items = list(legacy.iter_records(buf, MAX_UNCOMPRESSED_BYTES))
    if not items:
        raise InvalidRecordError("message set holds no records")
    if rules is None:
        rules = validator.rules_for(config, now_ms, MAX_UNCOMPRESSED_BYTES)
    validator.validate_legacy_records(items, rules)
    codec = target_codec(config, items[-1].codec)
    builder = BatchBuilder(0, compression=codec,
                           compression_level=compression_level(config, codec))
    for i, r in enumerate(items):
        builder.append(r.key, r.value, timestamp=r.timestamp, offset=i)
    return bytearray(builder.build())


# -- fetch -------------------------------------------------------------------------------

def fetch_magic(version: int) -> Optional[int]:
    """The message format a Fetch version can read below v2 batches (None: v2)."""
    if version <= 1:
        return 0
    if version <= 3:
        return 1
    return None


def down_convert(data, to_magic: int, fetch_offset: int, max_bytes: int = LONG_MAX) -> bytes:
    """Stored bytes (whole batches, maybe a partial tail) as a magic 0/1 message set."""
    out = []
    total = 0
    for batch in iter_batches(data, allow_partial_tail=True):
        if len(batch.buffer) < batch.size:
            break
        magic = batch.magic
        try:
            if magic <= to_magic:
                chunk = bytes(batch.buffer)
            elif magic == MAGIC:
                chunk = _down_convert_batch(batch, to_magic, fetch_offset)
            else:
                chunk = legacy.down_convert(batch.buffer, to_magic, MAX_UNCOMPRESSED_BYTES)
        except StorageError:
            if out:                 # send what converted; the error comes at that offset
                break
            raise
        if not chunk:
            continue
        out.append(chunk)
        total += len(chunk)
        if total >= max_bytes:
            break
    return b"".join(out)


def _down_convert_batch(batch: RecordBatch, to_magic: int, fetch_offset: int) -> bytes:
    batch.validate()
    if batch.is_control:
        return b""
    codec = batch.compression
    if codec == codecs.ZSTD:
        raise UnsupportedCompressionTypeError(
            "zstd batches cannot be read by a fetcher of magic v%d" % to_magic)
    records = [(r.offset, r.timestamp, r.key, r.value)
               for r in batch.records(MAX_UNCOMPRESSED_BYTES)
               if codec != codecs.NONE or r.offset >= fetch_offset]
    if not records:
        return b""
    return legacy.build_message_set(records, to_magic, codec, batch.timestamp_type,
                                    batch.max_timestamp)
