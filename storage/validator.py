"""Record validation of a produced v2 batch, as Kafka's LogValidator does by default.

Pure: takes a `RecordBatch` view and the topic's rules, returns the batch's records
region (decompressed when the batch is compressed, so that a caller that rebuilds the
batch does not decompress it again) or raises a typed error from storage/errors.py.
Called for every magic-2 batch of a Produce request (storage/convert.py
`prepare_produce`), before `Log.append`; replication and recovery do not call it.

Checks, in order, and the error each one answers (Kafka's codes):

* the header: framing, magic, CRC-32C, codec id, count == last offset delta + 1 > 0,
  no control batch, a sequence with a producer id (`RecordBatch.validate(from_client=
  True)`): CORRUPT_MESSAGE for framing/CRC (and for an uncompressed batch whose count
  cannot fit its size, 7 bytes a record at least), INVALID_RECORD for the header rules;
* a compressed body decompresses with the declared codec into at most
  `max_uncompressed_bytes` (a decompression bomb is refused once that many bytes came
  out, never inflated whole; storage/codecs.py bounds every decoder): CORRUPT_MESSAGE
  (Kafka answers an undecodable stream with UNKNOWN_SERVER_ERROR and has no bound on a
  batch's decompressed total; trunk's `max.decompressed.message.bytes` bounds one
  record's body, unlimited by default);
* every record's structure, walked over lengths and varints only (no key, value or
  header is copied): the length varint, a varlong timestamp delta, the offset delta,
  key and value lengths (-1 = null, else >= 0), the header count (>= 0), each header's
  key length (>= 0) and value length, all inside the record's declared length and
  ending exactly at it; exactly `record_count` records filling the records region:
  INVALID_RECORD (Kafka's `InvalidRecordException` from DefaultRecord.readFrom /
  the batch iterator), without `record_errors`, as Kafka;
* the offset delta of record i is i: INVALID_RECORD (stricter than Kafka, which
  rebuilds a compressed batch with other inner offsets and stores an uncompressed one
  as sent; every v2 producer writes 0, 1, 2, ...);
* per-record rules, all records checked, then one error with a `record_errors` entry
  (batch index, message) per failing record: a keyless record on a compacted topic
  (INVALID_RECORD "Compacted topic cannot accept message without key"); on a
  CreateTime topic a record timestamp (base timestamp + delta, or the batch's max
  timestamp when the batch says LogAppendTime) outside
  `message.timestamp.before/after.max.ms` (or `message.timestamp.difference.max.ms`)
  or a LogAppendTime batch without a timestamp; on a LogAppendTime topic a batch that
  says LogAppendTime ("Producer should not set timestamp type to LogAppendTime"):
  INVALID_TIMESTAMP, which wins over INVALID_RECORD when both occur (Kafka's
  processRecordErrors).

Two implementations of the record walk, one answer: the compiled fast check
(storage/_recwalk.c, built by setup.py when a compiler is there) walks the region
once and says only "every record is valid, offset deltas 0..n-1" plus the smallest
and largest timestamp delta and whether any key is null. When that proves that no
rule fails, validation is done; in any other case (a structure it doubts, a null
key on a compacted topic, a timestamp range reaching past the bounds) the
pure-Python `_walk` runs and raises exactly the errors described above. Without the
extension, or with MPBROKER_PURE_PYTHON=1 in the environment at import, only the
pure walk runs (tests flip the module's `_recwalk` to None).

Cost: one pass over the records region doing a few integer operations per field; a
batch that breaks a rule (or whose timestamp range touches a bound) pays a second,
pure pass for its errors. The pure walk costs ~1 us a record, the compiled check
~0.05 us: for 16 KiB uncompressed batches of 100 B values `validate_batch` takes ~7 us
instead of ~170 us, CRC and copy included; a broker (one worker) producing 100 B
records spends ~3 ms of CPU a MB instead of ~15 (~2.5 with validation off), 1 KiB
records ~2 instead of ~3 (loadtest/bench_validate.py, loadtest/RESULTS.md).
"""
from __future__ import annotations

import logging
import os
from typing import NamedTuple

from storage import codecs
from storage.batch import (COMPRESSION_MASK, DEFAULT_MAX_UNCOMPRESSED_BYTES, HEADER_SIZE,
                           NO_TIMESTAMP, TIMESTAMP_TYPE_MASK, RecordBatch)
from storage.varint import decode_varint, decode_varlong
from storage.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError

LONG_MAX = 2**63 - 1
NO_KEY_MESSAGE = "Compacted topic cannot accept message without key"
PRODUCER_LOG_APPEND_TIME_MESSAGE = ("Invalid timestamp type in message: producer should not "
                                    "set timestamp type to LogAppendTime")
MAX_RECORD_ERRORS_SHOWN = 3

if os.environ.get("MPBROKER_PURE_PYTHON") == "1":
    _recwalk = None
else:
    try:
        from storage import _recwalk
    except ImportError:             # not compiled (optional in setup.py): the pure walk
        logging.getLogger(__name__).debug("storage._recwalk not built: pure-Python walk")
        _recwalk = None


class Rules(NamedTuple):
    """What a topic asks of each record (see `rules_for`)."""
    compacted: bool = False
    log_append_time: bool = False           # the topic's message.timestamp.type
    now_ms: int = 0
    before_max_ms: int = LONG_MAX
    after_max_ms: int = LONG_MAX
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES


def rules_for(config, now_ms: int,
              max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> Rules:
    """The rules of a topic's LogConfig (storage/log_config.py) at `now_ms`.

    The timestamp bounds are `message.timestamp.before/after.max.ms` where set (Kafka
    3.6+), else the deprecated `message.timestamp.difference.max.ms`."""
    diff = getattr(config, "message_timestamp_difference_max_ms", LONG_MAX)
    before = getattr(config, "message_timestamp_before_max_ms", LONG_MAX)
    after = getattr(config, "message_timestamp_after_max_ms", LONG_MAX)
    return Rules(compacted="compact" in getattr(config, "cleanup_policy", "delete"),
                 log_append_time=getattr(config, "message_timestamp_type",
                                         "CreateTime") == "LogAppendTime",
                 now_ms=now_ms,
                 before_max_ms=diff if before == LONG_MAX else before,
                 after_max_ms=diff if after == LONG_MAX else after,
                 max_uncompressed_bytes=max_uncompressed_bytes)


def validate_batch(batch: RecordBatch, rules: Rules = Rules()) -> bytes:
    """Validate one client batch; return its records region (decompressed).

    Raises CorruptRecordError, InvalidRecordError, InvalidTimestampError or
    UnsupportedCompressionTypeError (storage/errors.py); nothing else, whatever the
    bytes."""
    batch.validate(from_client=True)
    h = batch.header()
    body = batch.buffer[HEADER_SIZE:]
    codec = h.attributes & COMPRESSION_MASK
    if codec == codecs.NONE:
        data = bytes(body)
    else:
        data = codecs.decompress(codec, body, rules.max_uncompressed_bytes)
    batch_lat = bool(h.attributes & TIMESTAMP_TYPE_MASK)
    check_ts = not rules.log_append_time and not batch_lat and (
        rules.before_max_ms != LONG_MAX or rules.after_max_ms != LONG_MAX)
    fast = _recwalk.walk(data, h.record_count) if _recwalk is not None else None
    if fast is not None and not (rules.compacted and fast[2]) and (
            not check_ts or rules.now_ms - rules.before_max_ms <= h.base_timestamp + fast[0]
            and h.base_timestamp + fast[1] <= rules.now_ms + rules.after_max_ms):
        keyless = bad_ts = ()                   # proven: no record breaks a rule
    else:
        keyless, bad_ts = _checked_walk(data, h.record_count, check_ts, h.base_timestamp,
                                        rules)
    if batch_lat:
        bad_ts = _log_append_time_batch_errors(h.max_timestamp, h.record_count, rules)
    raise_record_errors(keyless, bad_ts)
    return data


def _checked_walk(data: bytes, count: int, check_ts: bool, base_ts: int, rules: Rules):
    """`_walk`, its decoding errors as Kafka's structure error."""
    try:
        return _walk(data, count, rules.compacted, check_ts, base_ts, rules)
    except (IndexError, CorruptRecordError):
        # a varint running past the end, or longer than 5/10 bytes: Kafka's
        # "Found invalid record structure" (an InvalidRecordException)
        raise InvalidRecordError("Found invalid record structure") from None


def _walk(data: bytes, count: int, compacted: bool, check_ts: bool, base_ts: int,
          rules: Rules):
    """Walk `count` records filling `data`; return (keyless indexes, [(index, timestamp)]
    out of bounds).

    Speed matters (every produced record passes here): varints of one and two bytes
    (every field of records up to 8 KiB) are decoded inline, longer ones by
    storage.batch; a read past `data` raises IndexError (the caller's structure
    error), a read past the record's end is caught by the record size check."""
    end = len(data)
    pos = 0
    index = 0
    keyless = []
    bad_ts = []
    low = rules.now_ms - rules.before_max_ms
    high = rules.now_ms + rules.after_max_ms
    varint = decode_varint
    od2 = 0                                     # zig-zag of `index`, while one byte
    while pos < end:
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            length = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            length, pos = varint(data, pos, end)
        record_end = pos + length
        if length < 6 or record_end > end:      # attributes + 5 one-byte varints at least
            raise InvalidRecordError("Invalid record size %d at record %d (%d bytes left)"
                                     % (length, index, end - pos))
        pos += 1                                # attributes: unused
        ts_pos = pos                            # timestamp delta: decoded if checked
        if data[pos] < 0x80:
            pos += 1
        else:
            _, pos = decode_varlong(data, pos, record_end)
        b = data[pos]                           # offset delta: must be `index`
        if b < 0x80:
            if b != od2:
                raise InvalidRecordError("Record %d has offset delta %d"
                                         % (index, (b >> 1) ^ -(b & 1)))
            pos += 1
        else:
            n, pos = varint(data, pos, record_end)
            if n != index:
                raise InvalidRecordError("Record %d has offset delta %d" % (index, n))
        b = data[pos]                           # key length
        if b < 0x80:
            pos += 1
            if not b & 1:
                pos += b >> 1
            elif b == 1:
                if compacted:
                    keyless.append(index)
            else:
                raise InvalidRecordError("Invalid key length %d in record %d"
                                         % ((b >> 1) ^ -(b & 1), index))
        else:
            n, pos = varint(data, pos, record_end)
            if n < 0:
                raise InvalidRecordError("Invalid key length %d in record %d" % (n, index))
            pos += n
        b = data[pos]                           # value length
        if b < 0x80:
            pos += 1
            if not b & 1:
                pos += b >> 1
            elif b != 1:
                raise InvalidRecordError("Invalid value length %d in record %d"
                                         % ((b >> 1) ^ -(b & 1), index))
        elif data[pos + 1] < 0x80:
            b = (b & 0x7F) | (data[pos + 1] << 7)
            if b & 1:
                raise InvalidRecordError("Invalid value length %d in record %d"
                                         % ((b >> 1) ^ -(b & 1), index))
            pos += 2 + (b >> 1)
        else:
            n, pos = varint(data, pos, record_end)
            if n >= 0:
                pos += n
            elif n != -1:
                raise InvalidRecordError("Invalid value length %d in record %d" % (n, index))
        if data[pos] == 0:                      # header count
            pos += 1
        else:
            pos = _skip_headers(data, pos, record_end, index)
        if pos != record_end:
            raise InvalidRecordError("Invalid record size: expected to read %d bytes in record "
                                     "payload, but instead read %d"
                                     % (length, length - (record_end - pos)))
        od2 += 2
        if check_ts:
            ts = base_ts + decode_varlong(data, ts_pos, record_end)[0]
            if ts != NO_TIMESTAMP and not low <= ts <= high:
                bad_ts.append((index, ts))
        index += 1
    if index > count:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining "
                                 "(%d records, the header says %d)" % (index, count))
    if index < count:
        raise InvalidRecordError("Incorrect declared batch size, premature EOF reached "
                                 "(%d records, the header says %d)" % (index, count))
    return keyless, bad_ts


def _skip_headers(data, pos, record_end, index) -> int:
    count, pos = decode_varint(data, pos, record_end)
    if count < 0 or count > record_end - pos:
        raise InvalidRecordError("Found invalid number of record headers %d in record %d"
                                 % (count, index))
    for _ in range(count):
        n, pos = decode_varint(data, pos, record_end)
        if n < 0:
            raise InvalidRecordError("Invalid negative header key size %d in record %d"
                                     % (n, index))
        pos += n
        n, pos = decode_varint(data, pos, record_end)
        if n >= 0:
            pos += n
        elif n != -1:
            raise InvalidRecordError("Invalid header value size %d in record %d" % (n, index))
        if pos > record_end:
            break                               # reported by the record size check
    return pos


def _log_append_time_batch_errors(max_timestamp: int, count: int, rules: Rules) -> list:
    """A client batch that says LogAppendTime: every record reads the batch's max
    timestamp (Kafka's rule); [(index, timestamp or None)] of the records refused."""
    if rules.log_append_time or max_timestamp == NO_TIMESTAMP:
        return [(i, None) for i in range(count)]
    if not rules.now_ms - rules.before_max_ms <= max_timestamp <= \
            rules.now_ms + rules.after_max_ms:
        return [(i, max_timestamp) for i in range(count)]
    return []


def raise_record_errors(keyless: list, bad_ts: list) -> None:
    """Raise for `keyless` (batch indexes) and `bad_ts` ([(batch index, timestamp, or
    None for a LogAppendTime record a producer may not send)]), if any.

    One error for the batch, listing every failing record: a record's key error
    comes before its timestamp error, and any timestamp error makes the whole answer
    INVALID_TIMESTAMP (Kafka's validateRecord / processRecordErrors)."""
    if not keyless and not bad_ts:
        return
    errors = {i: NO_KEY_MESSAGE for i in keyless}
    timestamp_errors = {i: PRODUCER_LOG_APPEND_TIME_MESSAGE if ts is None else
                        "Timestamp %d of message with offset delta %d is out of range" % (ts, i)
                        for i, ts in bad_ts if i not in errors}
    errors.update(timestamp_errors)
    errors = sorted(errors.items())
    if timestamp_errors:
        raise InvalidTimestampError("One or more records have been rejected due to invalid "
                                    "timestamp", errors)
    raise InvalidRecordError(
        "One or more records have been rejected due to %d record errors in total, and only "
        "showing the first three errors at most: %s"
        % (len(errors), errors[:MAX_RECORD_ERRORS_SHOWN]), errors)


def validate_legacy_records(records, rules: Rules = Rules()) -> None:
    """The per-record rules for a v0/v1 message set being converted (its framing and
    CRC-32s were checked by storage/legacy.py): keys on a compacted topic and, for v1,
    timestamps as for v2 (a LogAppendTime wrapper's records read its timestamp).
    `records` are storage.legacy.LegacyRecord; batch indexes count from 0."""
    keyless = []
    bad_ts = []
    low = rules.now_ms - rules.before_max_ms
    high = rules.now_ms + rules.after_max_ms
    for i, r in enumerate(records):
        if rules.compacted and r.key is None:
            keyless.append(i)
        if r.magic == 0:
            continue                            # v0 has no timestamp
        if r.timestamp_type == 1 and (rules.log_append_time or r.timestamp == NO_TIMESTAMP):
            bad_ts.append((i, None))
        elif not rules.log_append_time and r.timestamp != NO_TIMESTAMP and \
                not low <= r.timestamp <= high:
            bad_ts.append((i, r.timestamp))
    raise_record_errors(keyless, bad_ts)
