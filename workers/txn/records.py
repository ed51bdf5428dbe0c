"""Record formats of the `__transaction_state` topic, byte-compatible with Kafka.

Kafka's transaction-coordinator `TransactionLogKey.json` / `TransactionLogValue.json`;
both start with an int16 schema version, so Kafka tools
(kafka-console-consumer --formatter TransactionLogMessageFormatter, kafka-dump-log
--transaction-log-decoder) read these bytes.

TransactionLogKey v0 (never flexible)::

    version int16 (0) | transactional_id string (int16 length + UTF-8)

TransactionLogValue v0 (classic) / v1 (flexible: compact strings and arrays, tagged
fields at the end of every struct)::

    version int16
    producer_id int64
    producer_epoch int16
    transaction_timeout_ms int32
    transaction_status int8          0 Empty 1 Ongoing 2 PrepareCommit 3 PrepareAbort
                                     4 CompleteCommit 5 CompleteAbort 6 Dead
                                     7 PrepareEpochFence (never written)
    transaction_partitions nullable [ topic string, partition_ids [int32] (+tags v1) ]
    transaction_last_update_timestamp_ms int64
    transaction_start_timestamp_ms int64
    tagged fields (v1): 0 PreviousProducerId int64 (default -1), 1 NextProducerId int64
                        (default -1), 2 ClientTransactionVersion int16 (default 0)

Written: key v0, value v1 (the flexible version of Kafka 3.x+/4.x), tagged fields only
when they differ from their defaults. Read: value v0 and v1; unknown tags are skipped.
A tombstone (value None) removes the transactional id (expiration).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from mpbroker.protocol.primitives import VersionedReader, VersionedWriter
from workers.groups.records import RecordFormatError, _done

KEY_VERSION = 0
VALUE_VERSION = 1
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: int
    partitions: dict = field(default_factory=dict)   # topic -> sorted [partition]
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_txn_version: int = 0


def encode_key(transactional_id: str) -> bytes:
    w = VersionedWriter(False)
    w.int16(KEY_VERSION)
    w.field_string(transactional_id)
    return w.getvalue()


def decode_key(buf) -> str:
    """The transactional id; RecordFormatError for another key version or bad bytes."""
    r = VersionedReader(buf)
    version = r.int16()
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown TransactionLogKey version {version}")
    tid = r.field_string()
    _done(r)
    return tid


def encode_value(v: TxnLogValue, version: int = VALUE_VERSION) -> bytes:
    if version not in (0, 1):
        raise ValueError(f"TransactionLogValue version {version}")
    flex = version >= 1
    w = VersionedWriter(flex)
    w.int16(version)
    w.int64(v.producer_id)
    w.int16(v.producer_epoch)
    w.int32(v.txn_timeout_ms)
    w.int8(v.state)
    parts = v.partitions
    if parts is None:
        w.field_array_len(-1)
    else:
        w.field_array_len(len(parts))
        for topic in sorted(parts):
            w.field_string(topic)
            ids = sorted(parts[topic])
            w.field_array_len(len(ids))
            for i in ids:
                w.int32(i)
            w.end_struct()
    w.int64(v.last_update_ms)
    w.int64(v.start_ms)
    tags = {}
    if v.previous_producer_id != -1:
        tags[0] = _I64.pack(v.previous_producer_id)
    if v.next_producer_id != -1:
        tags[1] = _I64.pack(v.next_producer_id)
    if v.client_txn_version != 0:
        tags[2] = _I16.pack(v.client_txn_version)
    w.end_struct(tags)      # only in the flexible version
    return w.getvalue()


def decode_value(buf) -> TxnLogValue:
    r = VersionedReader(buf)
    version = r.int16()
    if version not in (0, 1):
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    r.flexible = version >= 1
    pid = r.int64()
    epoch = r.int16()
    timeout = r.int32()
    state = r.int8()
    n = r.field_array_len(nullable=True)
    partitions = None
    if n >= 0:
        partitions = {}
        for _ in range(n):
            topic = r.field_string()
            ids = [r.int32() for _ in range(r.field_array_len())]
            r.end_struct()
            partitions.setdefault(topic, []).extend(ids)
    last_update = r.int64()
    start = r.int64()
    prev_pid = next_pid = -1
    ctv = 0
    if r.flexible:
        for tag, data in r.end_struct().items():
            try:
                if tag == 0:
                    prev_pid = _I64.unpack(data)[0]
                elif tag == 1:
                    next_pid = _I64.unpack(data)[0]
                elif tag == 2:
                    ctv = _I16.unpack(data)[0]
            except struct.error:
                raise RecordFormatError(f"tagged field {tag} of {len(data)} bytes") from None
    _done(r)
    if not 0 <= state <= 7:
        raise RecordFormatError(f"unknown transaction state {state}")
    return TxnLogValue(pid, epoch, timeout, state, partitions if partitions is not None else {},
                       last_update, start, prev_pid, next_pid, ctv)
