"""The log of one partition: ordered segments, offsets, retention, recovery.

Directory `<log.dirs>/<topic>-<partition>/`, written only by the worker that owns the
partition (one writer process; other processes only read `.log` files by path):

    <base>.log / .index / .timeindex        segments (storage/segment.py)
    <base>.txnindex                         aborted transactions (storage/txn_index.py)
    <base>.log.deleted ...                  removed by retention/truncation, unlinked
                                            after `file.delete.delay.ms` (or on open)
    <offset>.snapshot                       producer state (storage/producer_state.py)
    leader-epoch-checkpoint                 storage/epoch_cache.py
    recovery-point-offset-checkpoint        \\
    log-start-offset-checkpoint              > storage/checkpoint.py (per partition)
    replication-offset-checkpoint (HW)      /
    .kafka_cleanshutdown                    clean-shutdown marker (per partition)
    partition.metadata                      "version: 0\\ntopic_id: <base64 uuid>\\n"

Offsets.  `log_start_offset <= high_watermark <= log_end_offset` always (asserted
after every change); batch offsets strictly increase across segments; a segment's base
offset is <= its first batch's offset and > the previous segment's last offset.

Appends (`append`): each batch is framed, CRC-checked and (leader appends) checked
against the client rules, the timestamps of a CreateTime topic against its bounds
(header fields only; a client's LogAppendTime bit is reset there, see
storage/convert.py); the idempotent producer state decides duplicate / out of order /
fenced (only a single-batch append can be a duplicate: its original offsets and
append time are answered); then the base offset, the partition leader epoch and, with
`message.timestamp.type=LogAppendTime`, the timestamp are written *in place* in the
caller's buffer, and the bytes are copied once into the active segment.
Follower appends (`assign_offsets=False`) keep the leader's offsets and epochs and
must not go backwards.  The active segment rolls on `segment.bytes`, `segment.ms`
(+jitter), a full index, or an offset that does not fit the int32 relative range.

All or nothing: an append that fails at any step after its offsets were assigned
(the roll, the data, an index entry, the leader-epoch checkpoint, the producer state,
the txnindex, the flush) is undone, in memory and on disk (`_undo_append`,
`LogSegment.rollback`: the file cut back to its old end, index slots zeroed), so the
next append gets the same offsets and no offset is ever in the log twice.  OSErrors
are raised as KafkaStorageError with their errno (`disk_full` for ENOSPC/EDQUOT); an
undo that itself fails takes the log offline (`offline`: every later call raises
KafkaStorageError).  A full disk does not stop DeleteRecords (its checkpoint is left
to the periodic one).

Reads (`read`) return `FileSlice`s of whole batches, at least one batch when
`min_one_batch` even past `max_bytes`, and never a batch at or past `max_offset`.

Transactions (Kafka's UnifiedLog).  Transactional batches open a
transaction per producer (storage/producer_state.py); `append_control` (leader, asked
by the transaction coordinator through WriteTxnMarkers) writes a COMMIT/ABORT control
batch; follower appends of copied control batches do the same bookkeeping.  Each ABORT
that ends an open transaction appends an entry to the `.txnindex` of the segment that
holds the marker.  `first_unstable_offset` is the first offset of the earliest open
(or not yet replicated) transaction, `last_stable_offset` = min(it, high watermark):
read_committed consumers read below it, and `collect_aborted_transactions(start,
upper)` lists the aborted transactions they must drop in [start, upper).  Truncation
cuts the txnindex with its segment, retention deletes it with its segment, recovery
rebuilds the txnindex of every segment it re-validates (replaying producer state from
a snapshot at or below that segment), and the producer snapshots keep the open
transactions across restarts.

Durability.  Appends land in the page cache (the map).  `flush()` msyncs/fsyncs the
segments past the recovery point and moves the recovery point to the log end; the
flush policy is `flush.messages` / `flush.ms` (`maybe_flush(now_ms)`).
`close(clean=True)` flushes, snapshots the producer state, trims the active segment,
writes the checkpoints and the clean-shutdown marker.

Opening, creating and recovering a log: storage/log_recovery.py (`LogRecovery`).
Retention, DeleteRecords, truncation and the compaction swap: storage/log_retention.py
(`LogRetention`).  Both are parts of `Log`, split out by concept; `Log` owns the state.
Topic settings: storage/log_config.py (`LogConfig`).

One piece at ~700 lines: what is left is the append, its undo, the roll, the reads and
the flush, which all change the segment list under the invariants above (asserted after
every change), so a split would only spread that state over two files.
"""
from __future__ import annotations

import bisect
import os
import shutil
import time
from typing import Callable, NamedTuple

from storage.batch import (CREATE_TIME, DELETE_HORIZON_MASK, LOG_OVERHEAD, MAGIC,
                           NO_TIMESTAMP, TIMESTAMP_TYPE_MASK, build_control_batch,
                           iter_batches)
from storage.checkpoint import PartitionCheckpoints, fsync_dir
from storage.epoch_cache import LeaderEpochCache
from storage.errors import (InvalidOffsetError, InvalidRecordError, InvalidTimestampError,
                            KafkaStorageError, MessageTooLargeError, OffsetOutOfRangeError,
                            RecordBatchTooLargeError, StorageError)
from storage.index import INT32_MAX
from storage.log_config import LONG_MAX, LogConfig
from storage.log_recovery import PARTITION_METADATA_FILE, InconsistentTopicIdError, LogRecovery
from storage.log_retention import CLEANER_CHECKPOINT_FILE, LogRetention
from storage.producer_state import ProducerStateManager
from storage.segment import LOG_SUFFIX, LogSegment, parse_base_offset
from storage.slices import FileSlice

__all__ = ["AppendInfo", "CLEANER_CHECKPOINT_FILE", "InconsistentTopicIdError", "Log", "LogConfig",
           "LONG_MAX", "PARTITION_METADATA_FILE", "ReadInfo"]

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


def _default_clock() -> int:
    return int(time.time() * 1000)


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool
    record_count: int


class ReadInfo(NamedTuple):
    slices: list
    first_offset: int
    next_offset: int = -1       # offset after the last returned batch (= start if none)


def parse_partition_dir(name: str) -> tuple[str, int]:
    topic, sep, part = name.rpartition("-")
    if sep and part.isdigit() and topic:
        return topic, int(part)
    return name, 0


class Log(LogRecovery, LogRetention):
    """One partition's log. Use `Log.open`. Single-threaded, one owner process."""

    def __init__(self, dir_path: str, config: LogConfig, clock: Callable[[], int]):
        self.dir = dir_path
        self.config = config
        self.clock = clock
        self.topic, self.partition = parse_partition_dir(os.path.basename(dir_path.rstrip("/")))
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._positions_seen = None     # (segment, offset, position): `_position_in`
        self.log_start_offset = 0
        self.next_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        self.topic_id: bytes | None = None
        self.epoch_cache = LeaderEpochCache(dir_path)
        self.producer_state = ProducerStateManager(dir_path, config.producer_id_expiration_ms)
        self.checkpoints = PartitionCheckpoints(dir_path, self.topic, self.partition)
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._unflushed_messages = 0
        self.last_flush_ms = clock()
        self.closed = False
        self.offline: str | None = None         # why: an append could not be undone
        self.recovered_bytes_truncated = 0      # for tests and metrics
        self.recovered = False                  # the open ran recovery (no clean marker)
        self._txn_rebuild_from: int | None = None  # recovery: rebuild txnindexes from here
        self.created = False        # `open` made this log (its directory) just now
        self._unsynced = False      # made by `_create`: files not yet fsynced (flush does)

    # ================================================================= opening

    @classmethod
    def open(cls, dir_path: str, config: LogConfig | None = None,
             clock: Callable[[], int] | None = None, *, topic_id: bytes | None = None,
             sync_parent: bool = True) -> "Log":
        """Open (recover) the log in `dir_path`, or create it there when the directory
        does not exist (see the module doc, Durability: no fsync per file; the parent
        directory is fsynced unless `sync_parent` is False, when the caller fsyncs it
        before the log is used; `created` tells)."""
        parent = os.path.dirname(os.path.abspath(dir_path))
        if not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        try:
            os.mkdir(dir_path)
            created = True
        except FileExistsError:
            created = False
        log = cls(dir_path, config or LogConfig(), clock or _default_clock)
        log.created = created
        if created:
            log._create(topic_id)
            if sync_parent:
                fsync_dir(parent)
        else:
            log._load(topic_id)
        return log

    def _new_segment(self, base: int, *, active: bool, suffix: str = "",
                     capacity: int | None = None) -> LogSegment:
        c = self.config
        return LogSegment(self.dir, base, capacity=capacity or c.segment_bytes,
                          index_interval_bytes=c.index_interval_bytes,
                          max_index_size=c.segment_index_bytes, created_ms=self.clock(),
                          active=active, suffix=suffix, preallocate=c.preallocate)

    def _open_segments(self, log_start: int) -> None:
        bases = sorted(b for b in (parse_base_offset(n) for n in os.listdir(self.dir)
                                   if n.endswith(LOG_SUFFIX)) if b is not None)
        for b in bases:
            self._add_segment(self._new_segment(b, active=False))
        if not self.segments:
            self._add_segment(self._new_segment(log_start, active=False))

    def _add_segment(self, seg: LogSegment) -> None:
        assert not self._bases or seg.base_offset > self._bases[-1], (seg, self._bases)
        self.segments.append(seg)
        self._bases.append(seg.base_offset)

    # ================================================================= properties

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def _check_invariants(self) -> None:
        assert self.log_start_offset <= self.high_watermark <= self.next_offset, \
            (self.log_start_offset, self.high_watermark, self.next_offset)
        assert self.segments[0].base_offset <= self.log_start_offset, \
            (self.segments[0].base_offset, self.log_start_offset)
        assert self.recovery_point <= self.next_offset
        assert self.active_segment.base_offset <= self.next_offset

    def _check_open(self) -> None:
        if self.closed:
            raise StorageError(f"log {self.dir} is closed")
        if self.offline is not None:
            raise KafkaStorageError(f"log {self.dir} is offline: {self.offline}",
                                    log_consistent=False)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log start, log end]); returns it."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.next_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        self._check_invariants()
        return self.high_watermark

    # ================================================================= transactions

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open or not yet replicated transaction."""
        f = self.producer_state.first_unstable_offset
        return None if f is None else max(f, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """LSO: read_committed consumers read below it; min(first unstable, HW)."""
        ps = self.producer_state
        if not ps.ongoing_txns and not ps.unreplicated_txns:
            return self.high_watermark      # no transaction: every fetch asks, keep it cheap
        f = self.first_unstable_offset
        return self.high_watermark if f is None else min(f, self.high_watermark)

    def read_point(self, high_watermark: int, last_stable_offset: int) -> tuple | None:
        """Where a consumer's read of the active segment ends, for a reader in another
        process that opens the file by path (workers/partition_states.py): (path, dev,
        ino, position of `high_watermark`, position of `last_stable_offset` or -1, last
        offset of the segment's last aborted transaction or -1); None when the high
        watermark lies before the active segment or the segment cannot be read. A
        position is where `read` of that offset starts (the batch holding it, or the
        segment's end at the log end)."""
        seg = self.segments[-1]
        try:
            hw_pos = self._position_in(seg, high_watermark)
            if hw_pos is None:
                return None
            if last_stable_offset == high_watermark:
                lso_pos = hw_pos
            else:
                lso_pos = self._position_in(seg, last_stable_offset)
        except (OSError, ValueError):     # unreadable: the readers ask the owner
            return None
        aborted = seg.txn_index.entries
        return (seg.log_path, *seg.file_id, hw_pos, -1 if lso_pos is None else lso_pos,
                aborted[-1].last_offset if aborted else -1)

    def _position_in(self, seg: LogSegment, offset: int) -> int | None:
        if offset < seg.base_offset:
            return None
        if offset >= self.next_offset:
            return seg.size
        # the high watermark and LSO only move forward in the active segment: the scan
        # starts at the last position found, not at an index entry, each publish, if
        # that batch is still there (a follower's truncation may have rewritten it)
        seen = self._positions_seen
        start = 0
        if seen is not None and seen[0] is seg and seen[1] <= offset:
            b = seg.batch_at(seen[2])
            if b is not None and b.base_offset <= seen[1] <= b.last_offset:
                if seen[1] == offset:
                    return seen[2]
                start = seen[2]
        b = seg.translate_offset(offset, start)
        if b is None:
            return None
        self._positions_seen = (seg, offset, b.position)
        return b.position

    def has_ongoing_txn(self, producer_id: int) -> bool:
        return self.producer_state.has_ongoing_txn(producer_id)

    def append_control(self, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int, leader_epoch: int,
                       timestamp_ms: int | None = None) -> AppendInfo:
        """Leader only: append a COMMIT/ABORT marker for `producer_id`.

        InvalidProducerEpochError (47) for an epoch older than the producer's,
        TransactionCoordinatorFencedError (52) for a coordinator epoch older than the
        last marker's.  A marker of a producer without an open transaction here is
        appended too (it fences the coordinator epoch) but indexes nothing.
        """
        ts = self.clock() if timestamp_ms is None else timestamp_ms
        batch = build_control_batch(0, producer_id, producer_epoch, commit, coordinator_epoch,
                                    ts)
        return self._append(memoryview(bytearray(batch)), leader_epoch, validate=True,
                            assign_offsets=True, from_client=False)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int
                                     ) -> list[tuple[int, int]]:
        """[(producer_id, first_offset)] of the aborted transactions overlapping
        [start_offset, upper_bound_offset), in marker order (Fetch's
        aborted_transactions for read_committed)."""
        out: list[tuple[int, int]] = []
        if upper_bound_offset <= start_offset:
            return out
        for seg in self.segments[self._segment_index(start_offset):]:
            r = seg.txn_index.collect_aborted(start_offset, upper_bound_offset)
            out.extend((t.producer_id, t.first_offset) for t in r.aborted)
            if r.complete:
                break
        return out

    # ================================================================= append

    def append(self, records, leader_epoch: int = -1, *, validate: bool = True,
               assign_offsets: bool = True) -> AppendInfo:
        """Append whole batches; see the module docstring. Raises StorageError subclasses.

        `assign_offsets=False` is the follower path: batches keep their offsets and
        partition leader epochs, must start at or after the log end offset, and skip
        the producer sequence checks (the leader made them).  Clients may not write
        control batches (`append_control` does, for the coordinator).
        """
        return self._append(records, leader_epoch, validate=validate,
                            assign_offsets=assign_offsets, from_client=assign_offsets)

    def _append(self, records, leader_epoch: int, *, validate: bool, assign_offsets: bool,
                from_client: bool) -> AppendInfo:
        self._check_open()
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        if mv.readonly and assign_offsets:
            mv = memoryview(bytearray(mv))
        batches = list(iter_batches(mv))
        if not batches:
            return AppendInfo(-1, -1, -1, self.log_start_offset, False, 0)
        now = self.clock()
        headers = self._validate_batches(batches, len(mv), now, from_client, validate)
        pinfo = None                # producer state staging, only for idempotent batches
        next_offset = self.next_offset
        log_append_time = now if self.config.log_append_time and assign_offsets else -1
        max_ts, offset_of_max_ts, count = -1, -1, 0
        first_offset = None
        single = len(batches) == 1
        for b, h in zip(batches, headers):  # one unpack per batch, made by the validation
            if h.producer_id >= 0 and pinfo is None:
                pinfo = self.producer_state.prepare_append(validate=assign_offsets)
            if assign_offsets:
                if h.producer_id >= 0:
                    # only a whole append can be a retry (clients send one batch per
                    # partition); a repeated batch among others fails the sequence check
                    dup = pinfo.find_duplicate(b) if single else None
                    if dup is not None:
                        return self._duplicate_info(dup, h.record_count)
                    pinfo.check(b)
                b.set_base_offset(next_offset)
                b.set_partition_leader_epoch(leader_epoch)
                base = next_offset
                if log_append_time >= 0:
                    b.set_log_append_time(log_append_time)
            else:
                base = h.base_offset
                if base < next_offset:
                    raise InvalidOffsetError(f"{self.dir}: follower append at {base}"
                                             f" below log end {next_offset}")
            if first_offset is None:
                first_offset = base
            last = base + h.last_offset_delta
            ts = log_append_time if log_append_time >= 0 else h.max_timestamp
            if ts > max_ts:
                max_ts, offset_of_max_ts = ts, last
            if pinfo is not None:
                pinfo.update(b, base, last)
            count += h.record_count
            next_offset = last + 1
        last_offset = next_offset - 1
        if last_offset - first_offset > INT32_MAX:
            raise InvalidRecordError("append spans more than the int32 relative offset range")
        assert next_offset > self.next_offset >= self.high_watermark, "offsets went backwards"
        undo = [None, self.next_offset, self._unflushed_messages, self.epoch_cache.snapshot(),
                None if pinfo is None else self.producer_state.save(pinfo)]
        try:
            segment = self._maybe_roll_for(len(mv), max_ts, last_offset, first_offset, now)
            undo[0] = segment.append(last_offset, max_ts, offset_of_max_ts, mv)
            self._record_epochs(batches, leader_epoch, first_offset, assign_offsets)
            if pinfo is not None:
                for txn in self.producer_state.commit(pinfo, next_offset):
                    segment.txn_index.append(txn)
            self.producer_state.map_end_offset = next_offset
            self.next_offset = next_offset
            self._unflushed_messages += count
            if self._unflushed_messages >= self.config.flush_messages:
                self.flush()
        except (OSError, StorageError) as e:
            err = self._undo_append(undo, e)
            if err is e:
                raise
            raise err from e
        return AppendInfo(first_offset, last_offset, log_append_time, self.log_start_offset,
                          False, count)

    def _undo_append(self, undo, cause: Exception) -> KafkaStorageError:
        """An append failed at some step (data, index, time index, epoch checkpoint,
        producer state, txn index, flush): put the log back exactly as before it, in
        memory and on disk, so that its offsets were never assigned.  A roll made for
        it stays (an empty active segment at the log end is a valid log).  Returns the
        error to raise; when the undo itself fails the log goes offline."""
        seg_mark, next_offset, self._unflushed_messages, epochs, producers = undo
        self.next_offset = next_offset
        self.producer_state.map_end_offset = next_offset
        if producers is not None:
            self.producer_state.restore(producers)
        try:
            if seg_mark is not None:        # else the roll or the segment undid itself
                self.active_segment.rollback(seg_mark)
            self.epoch_cache.restore(epochs)
        except OSError as e:
            cause = KafkaStorageError(f"cannot undo a failed append to {self.dir}: {e}",
                                      e.errno, log_consistent=False)
        except KafkaStorageError as e:
            cause = e
        if isinstance(cause, StorageError):
            err = cause         # KafkaStorageError, or a refusal (an index entry) undone
        else:
            err = KafkaStorageError.from_os_error(f"cannot append to {self.dir}", cause)
        if not getattr(err, "log_consistent", True):
            self.offline = str(err)
        return err

    def _duplicate_info(self, dup, record_count: int) -> AppendInfo:
        """The answer to a retried batch: its original offsets and, on a LogAppendTime
        topic, its original append time (the cached max timestamp; Kafka answers that
        timestamp whatever the topic's type, -1 is kept here for CreateTime as for any
        CreateTime append)."""
        ts = dup.timestamp_ms if self.config.log_append_time else -1
        return AppendInfo(dup.first_offset, dup.last_offset, ts, self.log_start_offset, True,
                          record_count)

    def _validate_batches(self, batches, total: int, now: int, from_client: bool,
                          validate: bool) -> list:
        """Raises for the first bad batch; returns their headers (BatchHeader each).

        Leader appends to a CreateTime topic: the topic's type wins over the batch's
        attribute bit (a client cannot skip the timestamp check by setting
        LogAppendTime), and the bounds are checked on the header's timestamps (each
        record's were checked by storage/validator.py on the produce path)."""
        c = self.config
        if total > c.segment_bytes:
            raise RecordBatchTooLargeError(f"{total} bytes exceed segment.bytes {c.segment_bytes}")
        headers = []
        check_ts = from_client and not c.log_append_time
        for b in batches:
            if b.magic != MAGIC:
                raise InvalidRecordError(f"magic {b.magic}: only v2 batches are stored")
            if validate:
                b.validate(from_client=from_client)
            h = b.header()          # one unpack for every header field (kept for _append)
            size = h.batch_length + LOG_OVERHEAD
            if size > c.max_message_bytes:
                raise MessageTooLargeError(f"batch of {size} bytes exceeds max.message.bytes"
                                           f" {c.max_message_bytes}")
            if check_ts:
                h = self._check_create_time(b, h, now)
            headers.append(h)
            if from_client and c.compact:
                # one walk; Kafka answers one record error per keyless record (Produce v8+)
                keyless = [i for i, r in enumerate(b.records()) if r.key is None]
                if keyless:
                    msg = "compacted topic cannot accept a record without key"
                    raise InvalidRecordError(msg, [(i, msg) for i in keyless])
        return headers

    def _check_create_time(self, b, h, now: int):
        """CreateTime topic, leader append: reset a client's LogAppendTime bit (in place,
        CRC recomputed, as Kafka's LogValidator does) and check the bounds on the max
        timestamp and on the first record's (base) timestamp.  Returns the header."""
        if h.attributes & TIMESTAMP_TYPE_MASK:
            b.set_max_timestamp(CREATE_TIME, h.max_timestamp)
            h = b.header()
        self._check_timestamp(h.max_timestamp, now)
        if not h.attributes & DELETE_HORIZON_MASK:  # else base_timestamp is a horizon
            self._check_timestamp(h.base_timestamp, now)
        return h

    def _check_timestamp(self, ts: int, now: int) -> None:
        c = self.config
        if ts == NO_TIMESTAMP:
            return
        # Kafka 3.6+: before/after.max.ms when set, else the deprecated difference.max.ms
        diff = c.message_timestamp_difference_max_ms
        before = c.message_timestamp_before_max_ms
        after = c.message_timestamp_after_max_ms
        if now - ts > (diff if before == LONG_MAX else before) or \
                ts - now > (diff if after == LONG_MAX else after):
            raise InvalidTimestampError(f"timestamp {ts} out of range at {now}")

    def _record_epochs(self, batches, leader_epoch, first_offset, assigned: bool) -> None:
        if assigned:
            if leader_epoch >= 0:
                self.epoch_cache.assign(leader_epoch, first_offset)
            return
        for b in batches:
            if b.partition_leader_epoch >= 0:
                self.epoch_cache.assign(b.partition_leader_epoch, b.base_offset)

    # ================================================================= rolling

    def _maybe_roll_for(self, size: int, max_ts: int, max_offset: int, first_offset: int,
                        now: int) -> LogSegment:
        seg = self.active_segment
        c = self.config
        if seg.should_roll(messages_size=size, max_timestamp_in_messages=max_ts,
                           max_offset_in_messages=max_offset, now_ms=now,
                           segment_bytes=c.segment_bytes, segment_ms=c.segment_ms,
                           roll_jitter_ms=c.segment_jitter_ms):
            return self.roll(first_offset)
        return seg

    def maybe_roll(self, now_ms: int | None = None) -> bool:
        """Roll a non-empty active segment older than `segment.ms` (idle partitions)."""
        now = self.clock() if now_ms is None else now_ms
        seg = self.active_segment
        if seg.size and seg.time_waited_for_roll(now, now) > \
                self.config.segment_ms - self.config.segment_jitter_ms:
            self.roll()
            return True
        return False

    def roll(self, new_base: int | None = None) -> LogSegment:
        """Close the active segment for appends and start one at `new_base` (>= LEO)."""
        self._check_open()
        new_base = self.next_offset if new_base is None else max(new_base, self.next_offset)
        old = self.active_segment
        if old.size == 0 and old.base_offset == new_base:
            old.make_active(max(self.config.segment_bytes, old.size))
            return old
        if new_base <= old.base_offset:
            raise InvalidOffsetError(f"roll to {new_base} <= active base {old.base_offset}")
        self.producer_state.take_snapshot(self.next_offset)
        mark = old.mark()
        try:
            old.on_become_inactive()
            seg = self._new_segment(new_base, active=True)
        except (OSError, StorageError):
            # no room for the new files: drop what was created, the old one goes on
            # exactly as it was (its final time index entry undone)
            for suffix in (LOG_SUFFIX, ".index", ".timeindex"):
                try:
                    os.unlink(os.path.join(self.dir, f"{new_base:020d}{suffix}"))
                except OSError:
                    pass
            if not old.active:
                old.make_active(max(self.config.segment_bytes, old.size))
            old.rollback(mark)
            raise
        self._add_segment(seg)
        return seg

    # ================================================================= reading

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> ReadInfo:
        """Slices of whole batches from the batch holding `offset`.

        `max_offset` is exclusive (e.g. the high watermark): batches whose last offset
        is >= it are not returned.  OffsetOutOfRangeError outside [log start, log end].
        """
        self._check_open()
        if offset < self.log_start_offset or offset > self.next_offset:
            raise OffsetOutOfRangeError(f"offset {offset} not in [{self.log_start_offset},"
                                        f" {self.next_offset}] of {self.dir}")
        if offset == self.next_offset or (max_offset is not None and offset >= max_offset):
            return ReadInfo([], offset, offset)
        try:
            return self._read(offset, max_bytes, max_offset, min_one_batch)
        except OSError as e:
            raise KafkaStorageError.from_os_error(f"cannot read {self.dir}", e) from e

    def _read(self, offset: int, max_bytes: int, max_offset: int | None,
              min_one_batch: bool) -> ReadInfo:
        if max_offset is not None and max_offset >= self.next_offset:
            max_offset = None       # no batch reaches it (a caught-up HW): no position lookup
        slices: list[FileSlice] = []
        first = None
        remaining = max_bytes
        last_seg = None
        for seg in self.segments[self._segment_index(offset):]:
            if max_offset is not None and seg.base_offset >= max_offset:
                break
            max_pos = None
            if max_offset is not None:
                bound = seg.translate_offset(max_offset)
                max_pos = bound.position if bound is not None else None
            r = seg.read(offset, remaining, max_pos, min_one_batch and not slices)
            if r is None:
                if seg.size and seg.translate_offset(offset) is not None:
                    # it holds the next batch, which does not fit or lies past max_offset:
                    # stop here, or a later segment's batch would leave a gap
                    break
                continue        # nothing at or after `offset` (emptied by compaction): go on
            sl, base = r
            slices.append(sl)
            last_seg = seg
            first = base if first is None else first
            remaining -= sl.length
            if remaining <= 0 or sl.position + sl.length < seg.size:
                break
        if first is None:
            return ReadInfo(slices, offset, offset)
        return ReadInfo(slices, first, self._offset_after(last_seg, slices[-1]))

    def _offset_after(self, seg: LogSegment, sl: FileSlice) -> int:
        """The first offset after slice `sl` of `seg` (next batch, segment or log end)."""
        b = seg.batch_at(sl.position + sl.length)
        if b is not None:
            return b.base_offset
        i = bisect.bisect_left(self._bases, seg.base_offset)
        return self.segments[i + 1].base_offset if i + 1 < len(self.segments) else self.next_offset

    def read_records_bytes(self, offset: int, max_bytes: int = LONG_MAX,
                           max_offset: int | None = None) -> bytes:
        """The bytes `read` would send (tests, internal readers); copies."""
        info = self.read(offset, max_bytes, max_offset)
        return b"".join(os.pread(s.fd, s.length, s.position) for s in info.slices)

    def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ts_ms, or None.

        Kafka's special values: -2 earliest -> (log start, -1); -1 latest -> (log end,
        -1) (the partition layer bounds it by the high watermark / LSO for consumers);
        -3 max timestamp -> `max_timestamp_offset()`.
        """
        self._check_open()
        if ts_ms == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        if ts_ms == LATEST_TIMESTAMP:
            return self.next_offset, -1
        if ts_ms == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        for seg in self.segments[self._segment_index(self.log_start_offset):]:
            if seg.max_timestamp_so_far >= ts_ms:
                found = seg.find_offset_by_timestamp(ts_ms, self.log_start_offset)
                if found is not None:
                    return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (first if tied)."""
        best = None
        for seg in self.segments:
            if seg.max_timestamp_so_far >= 0 and (best is None or
                                                  seg.max_timestamp_so_far > best.max_timestamp_so_far):
                best = seg
        if best is None:
            return None
        found = best.find_offset_by_timestamp(best.max_timestamp_so_far, self.log_start_offset)
        return found

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch; (-1, -1) when unknown."""
        return self.epoch_cache.end_offset_for(epoch, self.next_offset)

    # ================================================================= durability

    def flush(self) -> None:
        """msync/fsync every segment past the recovery point; recovery point = LEO."""
        self._check_open()
        if self._unsynced:
            self._sync_created()
        for seg in self.segments[self._segment_index(self.recovery_point):]:
            seg.flush()
        self.recovery_point = self.next_offset
        self._unflushed_messages = 0
        self.last_flush_ms = self.clock()

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush when `flush.messages` or `flush.ms` says so; True if flushed."""
        now = self.clock() if now_ms is None else now_ms
        if self._unflushed_messages >= self.config.flush_messages or (
                self.recovery_point < self.next_offset
                and now - self.last_flush_ms >= self.config.flush_ms):
            self.flush()
            return True
        return False

    def checkpoint(self) -> None:
        """Write the recovery point, log start and high watermark checkpoint files."""
        self.checkpoints.write(recovery_point=self.recovery_point,
                               log_start_offset=self.log_start_offset,
                               high_watermark=self.high_watermark)

    def close(self, clean: bool = True) -> None:
        """Clean: flush, snapshot producers, trim, checkpoint, write the marker."""
        if self.closed:
            return
        if clean:
            self.flush()
            self.producer_state.take_snapshot(self.next_offset)
            for seg in self.segments:
                seg.close()
            self.delete_expired_files(LONG_MAX)
            self.checkpoint()
            self.checkpoints.write_clean_shutdown()
        else:
            for seg in self.segments:
                seg.close_unclean()
            for _, seg in self._pending_deletes:
                seg.close_unclean()
        self.closed = True

    def delete(self) -> None:
        """Remove the partition directory (topic deletion / reassignment away)."""
        if not self.closed:
            self.close(clean=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self):
        return (f"Log({self.dir!r}, start={self.log_start_offset}, hw={self.high_watermark},"
                f" end={self.next_offset}, segments={len(self.segments)})")
