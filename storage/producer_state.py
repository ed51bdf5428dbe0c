"""Idempotent producer state of one partition, and its snapshot files.

In memory, per producer id: the producer epoch, the metadata of its last 5 batches
(first/last sequence, first/last offset, max timestamp), the coordinator epoch, the
first offset of its open transaction (None when there is none) and the time of its
last write.  This is what Kafka's ProducerStateManager keeps:

* a batch whose (epoch, first seq, last seq) equals one of the 5 cached batches is a
  *duplicate* (a producer retry): the log answers with the original offsets and appends
  nothing;
* a batch whose first sequence does not follow the last one (with wrap-around at
  int32 max -> 0) is an `OutOfOrderSequenceError`;
* a batch from an older epoch is an `InvalidProducerEpochError`;
* a new epoch must start at sequence 0, and so must a known epoch with no cached
  batch (after a marker that bumped the epoch); only an unknown producer (new,
  expired, or its data deleted by retention / DeleteRecords) may start at any
  sequence (Kafka's ProducerAppendInfo.checkSequence).

Appends stage their changes in a `ProducerAppendInfo` and `commit()` them only after
the bytes were written, so a failed append leaves the state untouched.

Transactions (Kafka's ProducerStateManager).  A transactional data
batch of a producer without an open transaction here starts one at its first offset
(`current_txn_first_offset`); `ongoing_txns` maps first offset -> producer id for all
open transactions.  A control batch (COMMIT/ABORT marker, storage/batch.py) ends it:
`commit()` returns the `AbortedTxn` entries the log must write to the marker's segment
`.txnindex` (storage/txn_index.py) and moves the transaction to `unreplicated_txns`
until the high watermark passes its marker (`on_high_watermark_updated`).  The first
unstable offset is the smallest first offset of the open and the not yet replicated
transactions; the log's LSO is min(high watermark, first unstable offset).  A marker
whose coordinator epoch is older than the producer's is TRANSACTION_COORDINATOR_FENCED
(52), one whose producer epoch is older INVALID_PRODUCER_EPOCH (47) (client and
coordinator appends; follower appends take the leader's word).  A non-transactional
batch from a producer with an open transaction is INVALID_TXN_STATE (48).

Snapshot files: `<partition dir>/<20-digit offset>.snapshot`, written by the owner when
a segment rolls (offset = the new segment's base offset) and on clean close (offset =
log end offset): the state as of just before that offset.  On open the newest snapshot
at or below the log end offset is loaded and the batches after it are replayed.
Format (Kafka's ProducerSnapshot v1, big-endian)::

    version         int16   1
    crc             uint32  CRC-32C of everything after this field
    entry count     int32
    entries         count x (producer_id int64, producer_epoch int16,
                             last_sequence int32, last_offset int64, offset_delta int32,
                             timestamp int64, coordinator_epoch int32,
                             current_txn_first_offset int64 (-1 = none))

Kafka writes one entry per producer (its last batch).  mpbroker writes one entry per
cached batch, oldest first, so a reload keeps all 5 batches for duplicate detection;
a reader that keeps one entry per producer id and lets later ones win (Kafka's) still
sees the last batch.  `first sequence = last_sequence - offset_delta` (mod int32) and
`first offset = last_offset - offset_delta`.
"""
from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c as _crc32c

from storage.batch import CONTROL_ABORT, CONTROL_COMMIT, parse_control_key, parse_end_txn_value
from storage.checkpoint import atomic_write
from storage.errors import (InvalidProducerEpochError, InvalidRecordError, InvalidTxnStateError,
                            OutOfOrderSequenceError, TransactionCoordinatorFencedError)
from storage.txn_index import AbortedTxn

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

_SNAP_HEADER = struct.Struct(">hIi")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")


def increment_sequence(seq: int, increment: int) -> int:
    """seq + increment with wrap-around past int32 max back to 0."""
    if seq > INT32_MAX - increment:
        return increment - (INT32_MAX - seq) - 1
    return seq + increment


def decrement_sequence(seq: int, decrement: int) -> int:
    if seq < decrement:
        return INT32_MAX - (decrement - seq) + 1
    return seq - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int            # the marker's offset
    is_aborted: bool


class EndTxnMarker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def read_end_txn_marker(batch) -> EndTxnMarker:
    """The COMMIT/ABORT marker of a control batch; InvalidRecordError when the batch
    does not hold exactly one well-formed end-transaction control record."""
    records = list(batch.records())
    if len(records) != 1:
        raise InvalidRecordError(f"control batch holds {len(records)} records, expected 1")
    rec = records[0]
    version, kind = parse_control_key(rec.key)
    if version < 0 or kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise InvalidRecordError(f"control record type {kind} (version {version}) is not"
                                 " an end-transaction marker")
    _, coordinator_epoch = parse_end_txn_value(rec.value)
    return EndTxnMarker(kind == CONTROL_COMMIT, coordinator_epoch)


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


@dataclass
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_timestamp_ms: int = -1
    current_txn_first_offset: int | None = None

    def copy(self) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.producer_epoch,
                                  deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
                                  self.coordinator_epoch, self.last_timestamp_ms,
                                  self.current_txn_first_offset)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def add_batch(self, epoch: int, first_seq: int, last_seq: int, first_offset: int,
                  last_offset: int, timestamp_ms: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset,
                                          timestamp_ms))
        self.last_timestamp_ms = timestamp_ms


class ProducerAppendInfo:
    """Staged producer-state changes of one append; `ProducerStateManager.commit` applies."""

    def __init__(self, manager: "ProducerStateManager", validate: bool):
        self._manager = manager
        self._validate = validate
        self.entries: dict[int, ProducerStateEntry] = {}
        self.completed_txns: list[CompletedTxn] = []

    def _entry(self, producer_id: int) -> ProducerStateEntry:
        e = self.entries.get(producer_id)
        if e is None:
            cur = self._manager.producers.get(producer_id)
            e = cur.copy() if cur else ProducerStateEntry(producer_id)
            self.entries[producer_id] = e
        return e

    def find_duplicate(self, batch) -> BatchMetadata | None:
        """The cached metadata of an earlier identical batch (epoch + sequence range)."""
        if batch.producer_id <= NO_PRODUCER_ID or batch.base_sequence == NO_SEQUENCE:
            return None
        e = self.entries.get(batch.producer_id) or self._manager.producers.get(batch.producer_id)
        if e is None:
            return None
        return e.find_duplicate(batch.producer_epoch, batch.base_sequence, batch.last_sequence)

    def check(self, batch) -> None:
        """Raise if the batch breaks epoch/sequence rules (client appends only)."""
        if not self._validate or batch.producer_id <= NO_PRODUCER_ID:
            return
        e = self._entry(batch.producer_id)
        epoch, first_seq = batch.producer_epoch, batch.base_sequence
        if epoch < e.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {batch.producer_id}: epoch {epoch} older than {e.producer_epoch}")
        if batch.is_control:
            marker = read_end_txn_marker(batch)
            if marker.coordinator_epoch < e.coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"producer {batch.producer_id}: marker of coordinator epoch"
                    f" {marker.coordinator_epoch} older than {e.coordinator_epoch}")
            return
        # Kafka's ProducerAppendInfo.checkSequence: any sequence only for a producer
        # without a known epoch (new, expired, or its data deleted by retention or
        # DeleteRecords); a known epoch with no cached batch (a marker bumped it)
        # continues from "no sequence", i.e. at 0
        if epoch != e.producer_epoch:
            if first_seq != 0 and e.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {batch.producer_id}: new epoch {epoch} must start at sequence 0,"
                    f" got {first_seq}")
        elif e.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(e.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {batch.producer_id}: sequence {first_seq} after {e.last_seq}")
        if not batch.is_transactional and e.current_txn_first_offset is not None:
            raise InvalidTxnStateError(
                f"producer {batch.producer_id}: non-transactional write during its"
                f" transaction from offset {e.current_txn_first_offset}")

    def update(self, batch, first_offset: int, last_offset: int) -> None:
        """Record an appended batch (offsets already assigned)."""
        if batch.producer_id <= NO_PRODUCER_ID:
            return
        e = self._entry(batch.producer_id)
        ts = batch.max_timestamp
        if batch.is_control:
            # end of a transaction: a COMMIT/ABORT marker at `first_offset`
            try:
                marker = read_end_txn_marker(batch)
            except InvalidRecordError:
                marker = None      # replayed junk control batch: ends nothing
            if batch.producer_epoch > e.producer_epoch:
                e.batches.clear()
                e.producer_epoch = batch.producer_epoch
            if marker is not None:
                if e.current_txn_first_offset is not None:
                    self.completed_txns.append(CompletedTxn(
                        e.producer_id, e.current_txn_first_offset, first_offset,
                        not marker.commit))
                e.current_txn_first_offset = None
                e.coordinator_epoch = marker.coordinator_epoch
            e.last_timestamp_ms = ts
            return
        if batch.base_sequence != NO_SEQUENCE:
            e.add_batch(batch.producer_epoch, batch.base_sequence, batch.last_sequence,
                        first_offset, last_offset, ts)
        else:
            if batch.producer_epoch > e.producer_epoch:
                e.batches.clear()       # as add_batch: cached sequences are per epoch
                e.producer_epoch = batch.producer_epoch
            e.last_timestamp_ms = ts
        if batch.is_transactional and e.current_txn_first_offset is None:
            e.current_txn_first_offset = first_offset


class ProducerStateManager:
    """The producer state of one partition; owned by the partition's worker."""

    def __init__(self, dir_path: str | None, producer_id_expiration_ms: int = 86_400_000):
        self.dir = dir_path
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0          # state covers batches below this offset
        self.ongoing_txns: dict[int, int] = {}          # first offset -> producer id
        self.unreplicated_txns: dict[int, CompletedTxn] = {}  # first offset -> txn

    # -- appends ----------------------------------------------------------------------

    def prepare_append(self, validate: bool = True) -> ProducerAppendInfo:
        return ProducerAppendInfo(self, validate)

    def commit(self, info: ProducerAppendInfo, end_offset: int) -> list[AbortedTxn]:
        """Apply staged changes; returns the aborted transactions to index (in order)."""
        started = []
        for pid, e in info.entries.items():
            old = self.producers.get(pid)
            old_first = old.current_txn_first_offset if old else None
            if e.current_txn_first_offset is not None and e.current_txn_first_offset != old_first:
                started.append((e.current_txn_first_offset, pid))
        self.producers.update(info.entries)
        for first, pid in started:
            self.ongoing_txns[first] = pid
        aborted = []
        for txn in info.completed_txns:
            if txn.is_aborted:
                aborted.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                          self.last_stable_offset_after(txn)))
            self.complete_txn(txn)
        self.map_end_offset = max(self.map_end_offset, end_offset)
        return aborted

    def save(self, info: ProducerAppendInfo) -> tuple:
        """What `commit(info)` changes, for `restore` (an undone append): the entries
        of the producers it touches and the small transaction maps."""
        return ({pid: self.producers.get(pid) for pid in info.entries}, dict(self.ongoing_txns),
                dict(self.unreplicated_txns), self.map_end_offset)

    def restore(self, saved: tuple) -> None:
        entries, self.ongoing_txns, self.unreplicated_txns, self.map_end_offset = saved
        for pid, e in entries.items():
            if e is None:
                self.producers.pop(pid, None)
            else:
                self.producers[pid] = e

    def apply_batch(self, batch) -> list[AbortedTxn]:
        """Replay one batch read from the log (recovery): no validation."""
        info = self.prepare_append(validate=False)
        info.update(batch, batch.base_offset, batch.last_offset)
        return self.commit(info, batch.last_offset + 1)

    # -- transactions -----------------------------------------------------------------

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """The LSO once `txn` is complete: the first offset of the earliest other open
        transaction, else one past the marker (Kafka's lastStableOffset(completedTxn))."""
        firsts = [f for f, pid in self.ongoing_txns.items()
                  if pid != txn.producer_id and f != txn.first_offset]
        return min(firsts) if firsts else txn.last_offset + 1

    def complete_txn(self, txn: CompletedTxn) -> None:
        self.ongoing_txns.pop(txn.first_offset, None)
        self.unreplicated_txns[txn.first_offset] = txn

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the high watermark."""
        if self.unreplicated_txns:
            for first in [f for f, t in self.unreplicated_txns.items()
                          if t.last_offset < high_watermark]:
                del self.unreplicated_txns[first]

    @property
    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an open or not yet replicated transaction."""
        best = None
        if self.ongoing_txns:
            best = min(self.ongoing_txns)
        if self.unreplicated_txns:
            u = min(self.unreplicated_txns)
            best = u if best is None else min(best, u)
        return best

    def has_ongoing_txn(self, producer_id: int) -> bool:
        e = self.producers.get(producer_id)
        return e is not None and e.current_txn_first_offset is not None

    def _rebuild_ongoing(self) -> None:
        self.ongoing_txns = {e.current_txn_first_offset: pid for pid, e in self.producers.items()
                             if e.current_txn_first_offset is not None}
        self.unreplicated_txns = {}

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # -- expiry and truncation --------------------------------------------------------

    def is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (entry.current_txn_first_offset is None and
                now_ms - entry.last_timestamp_ms >= self.producer_id_expiration_ms)

    def remove_expired_producers(self, now_ms: int) -> int:
        expired = [pid for pid, e in self.producers.items() if self.is_expired(e, now_ms)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Forget producers whose last write is below the new log start (Kafka does too)."""
        gone = [pid for pid, e in self.producers.items()
                if e.batches and e.last_offset < log_start_offset
                and e.current_txn_first_offset is None]
        for pid in gone:
            del self.producers[pid]
        self.delete_snapshots_before(log_start_offset, keep_latest=True)

    def truncate_and_reload(self, log_start_offset: int, end_offset: int, now_ms: int,
                            load_at_or_below: int | None = None) -> int:
        """Drop snapshots above `end_offset`, load the newest at or below it (and at or
        below `load_at_or_below` when given: recovery replays from there).

        Returns the offset from which the caller must replay batches (the snapshot's
        offset, or `log_start_offset` when none is usable).
        """
        for off in self.snapshot_offsets():
            if off > end_offset:
                self._unlink(off)
        self.producers = {}
        self.ongoing_txns, self.unreplicated_txns = {}, {}
        self.map_end_offset = log_start_offset
        for off in reversed(self.snapshot_offsets()):
            if off < log_start_offset:
                break
            if load_at_or_below is not None and off > load_at_or_below:
                continue
            try:
                self.producers = self.read_snapshot(off, now_ms)
                self.map_end_offset = off
                self._rebuild_ongoing()
                return off
            except ValueError:
                self._unlink(off)
        return log_start_offset

    # -- snapshots --------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        if not self.dir or not os.path.isdir(self.dir):
            return []
        out = []
        for name in os.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX) and len(name) == 20 + len(SNAPSHOT_SUFFIX):
                try:
                    out.append(int(name[:20]))
                except ValueError:
                    continue
        return sorted(out)

    def snapshot_path(self, offset: int) -> str:
        return os.path.join(self.dir, snapshot_file_name(offset))

    def take_snapshot(self, offset: int | None = None) -> None:
        """Write the state as `<offset>.snapshot` (default: the map end offset)."""
        if not self.dir:
            return
        offset = self.map_end_offset if offset is None else offset
        atomic_write(self.snapshot_path(offset), self.encode_snapshot(self.producers))

    @staticmethod
    def encode_snapshot(producers: dict[int, ProducerStateEntry]) -> bytes:
        body = bytearray()
        count = 0
        for pid in sorted(producers):
            e = producers[pid]
            txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
            batches = list(e.batches) or [None]
            for b in batches:
                if b is None:
                    body += _SNAP_ENTRY.pack(pid, e.producer_epoch, NO_SEQUENCE, -1, 0,
                                             e.last_timestamp_ms, e.coordinator_epoch, txn)
                else:
                    body += _SNAP_ENTRY.pack(pid, e.producer_epoch, b.last_seq, b.last_offset,
                                             b.offset_delta, b.timestamp_ms,
                                             e.coordinator_epoch, txn)
                count += 1
        tail = struct.pack(">i", count) + bytes(body)
        return struct.pack(">hI", SNAPSHOT_VERSION, _crc32c.crc32c(tail)) + tail

    @staticmethod
    def decode_snapshot(data: bytes) -> dict[int, ProducerStateEntry]:
        """Parse a snapshot; ValueError when it is short, of another version or bad CRC."""
        if len(data) < _SNAP_HEADER.size:
            raise ValueError("snapshot too short")
        version, crc, count = _SNAP_HEADER.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"snapshot version {version}")
        if _crc32c.crc32c(memoryview(data)[6:]) != crc:
            raise ValueError("snapshot CRC mismatch")
        if count < 0 or len(data) != _SNAP_HEADER.size + count * _SNAP_ENTRY.size:
            raise ValueError("snapshot length does not match its count")
        producers: dict[int, ProducerStateEntry] = {}
        for i in range(count):
            (pid, epoch, last_seq, last_offset, delta, ts, coord_epoch,
             txn) = _SNAP_ENTRY.unpack_from(data, _SNAP_HEADER.size + i * _SNAP_ENTRY.size)
            e = producers.get(pid)
            if e is None or e.producer_epoch != epoch:
                e = producers[pid] = ProducerStateEntry(pid, epoch)
            e.coordinator_epoch = coord_epoch
            e.current_txn_first_offset = None if txn < 0 else txn
            e.last_timestamp_ms = ts
            if last_seq != NO_SEQUENCE and last_offset >= 0:
                e.batches.append(BatchMetadata(decrement_sequence(last_seq, delta), last_seq,
                                               last_offset - delta, last_offset, ts))
        return producers

    def read_snapshot(self, offset: int, now_ms: int | None = None) -> dict[int, ProducerStateEntry]:
        with open(self.snapshot_path(offset), "rb") as f:
            producers = self.decode_snapshot(f.read())
        if now_ms is not None:
            producers = {p: e for p, e in producers.items() if not self.is_expired(e, now_ms)}
        return producers

    def delete_snapshots_before(self, offset: int, keep_latest: bool = False) -> None:
        offs = self.snapshot_offsets()
        for off in offs:
            if off < offset and not (keep_latest and off == offs[-1]):
                self._unlink(off)

    def _unlink(self, offset: int) -> None:
        try:
            os.unlink(self.snapshot_path(offset))
        except FileNotFoundError:
            pass
