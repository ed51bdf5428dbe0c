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

Transactions (seed 000 §6.3, Kafka's UnifiedLog).  Transactional batches open a
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

A brand-new log (`Log.open` made its directory) is created as Kafka creates one: the
directory and its files (empty segment, indexes, `partition.metadata`) are made without
an fsync per file and without the checkpoint files (nothing to checkpoint: written by
the first `checkpoint()`); the parent directory is fsynced (`sync_parent`, or by the
caller once per batch of new logs, workers/worker.py).  A crash before anything was
appended may lose such a log, or some of its files: it held nothing, nothing was
acknowledged from it, and the next open makes it again (empty, with the topic id it is
given) - Kafka's behaviour.  Its first `flush()` fsyncs `partition.metadata` and the
directory before anything flushed can count as durable, so data that exists is as
safe as in a log opened the old way.  `Log.open` without the marker
recovers every segment from the one holding the recovery point: CRC-validated batch
by batch, torn tails and preallocated zeros cut, indexes rebuilt; segments after a
corrupt one are dropped.  A missing or insane index is rebuilt in any case.

Retention (`enforce_retention(now_ms)`): whole segments, oldest first, only below the
high watermark, by `retention.ms` (segment's largest timestamp), `retention.bytes`, and
the log start offset (DeleteRecords).  Removed segments are renamed `*.deleted`
(their fds stay open, so slices already handed out stay valid in this process) and
unlinked `file.delete.delay.ms` later; a reader in another process that opens the old
path after the rename gets ENOENT and must refetch.
"""
from __future__ import annotations

import base64
import bisect
import os
import shutil
import time
from dataclasses import dataclass, fields
from typing import Callable, NamedTuple

from storage.batch import (CREATE_TIME, DELETE_HORIZON_MASK, LOG_OVERHEAD, MAGIC,
                           NO_TIMESTAMP, TIMESTAMP_TYPE_MASK, build_control_batch,
                           iter_batches)
from storage.checkpoint import (CheckpointError, OffsetCheckpoint, PartitionCheckpoints,
                               atomic_write, fsync_dir)
from storage.epoch_cache import LeaderEpochCache
from storage.errors import (DISK_FULL_ERRNOS, InvalidOffsetError, InvalidRecordError, InvalidTimestampError,
                            KafkaStorageError, MessageTooLargeError, OffsetOutOfRangeError,
                            RecordBatchTooLargeError, StorageError)
from storage.index import INT32_MAX, CorruptIndexError
from storage.producer_state import ProducerStateManager
from storage.segment import (CLEANED_SUFFIX, DELETED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, LogSegment,
                             parse_base_offset)
from storage.slices import FileSlice

LONG_MAX = 2**63 - 1
PARTITION_METADATA_FILE = "partition.metadata"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"     # written by storage/cleaner.py
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


def _default_clock() -> int:
    return int(time.time() * 1000)


class InconsistentTopicIdError(StorageError):
    """INCONSISTENT_TOPIC_ID (103): partition.metadata holds another topic id."""

    code = 103


@dataclass
class LogConfig:
    """Topic-level log settings; field = Kafka topic config name with '.' -> '_'."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    max_message_bytes: int = 1024 * 1024 + 12
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    # record formats (storage/convert.py): broker-side recompression, legacy timestamp bound
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    message_timestamp_difference_max_ms: int = LONG_MAX
    preallocate: bool = False       # size a new active segment's file to segment.bytes

    @classmethod
    def from_properties(cls, props: dict, base: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka topic config names (`segment.bytes`, ...); unknown keys ignored.

        Broker-level `log.`-prefixed names (`log.segment.bytes`, `log.retention.ms`,
        `log.flush.interval.messages`, ...) are accepted too.
        """
        values = dict(vars(base)) if base else {}
        names = {f.name: f for f in fields(cls)}
        aliases = {"log.flush.interval.messages": "flush_messages",
                   "log.flush.interval.ms": "flush_ms", "log.roll.ms": "segment_ms",
                   "log.roll.jitter.ms": "segment_jitter_ms",
                   "log.index.size.max.bytes": "segment_index_bytes",
                   "message.max.bytes": "max_message_bytes",
                   "log.message.timestamp.type": "message_timestamp_type",
                   "log.cleaner.delete.retention.ms": "delete_retention_ms",
                   "log.cleaner.min.compaction.lag.ms": "min_compaction_lag_ms",
                   "log.cleaner.max.compaction.lag.ms": "max_compaction_lag_ms",
                   "log.cleaner.min.cleanable.ratio": "min_cleanable_dirty_ratio",
                   "log.segment.delete.delay.ms": "file_delete_delay_ms"}
        for key, raw in props.items():
            name = aliases.get(key)
            if name is None:
                k = key[4:] if key.startswith("log.") else key
                name = k.replace(".", "_")
            f = names.get(name)
            if f is None:
                continue
            if f.type in ("int", int):
                values[name] = int(raw)
            elif f.type in ("float", float):
                values[name] = float(raw)
            elif f.type in ("bool", bool):
                values[name] = raw if isinstance(raw, bool) else str(raw).lower() == "true"
            else:
                values[name] = str(raw)
        return cls(**values)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"


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


class Log:
    """One partition's log. Use `Log.open`. Single-threaded, one owner process."""

    def __init__(self, dir_path: str, config: LogConfig, clock: Callable[[], int]):
        self.dir = dir_path
        self.config = config
        self.clock = clock
        self.topic, self.partition = parse_partition_dir(os.path.basename(dir_path.rstrip("/")))
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
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

    def _create(self, topic_id) -> None:
        """A brand-new, empty log in the directory just made: an empty active segment
        at offset 0 and `partition.metadata`, not fsynced (Kafka creates a log so: a
        crash before the first flush may lose this empty log; `flush()` makes the
        files durable first, `_unsynced`)."""
        self._add_segment(self._new_segment(0, active=False))
        self.active_segment.make_active(self.config.segment_bytes)
        self._rebuild_producer_state()          # nothing to read: as `_load` leaves it
        self.producer_state.on_high_watermark_updated(0)
        self._unsynced = True
        if topic_id is not None:
            self.write_topic_id(topic_id, durable=False)
        self._check_invariants()

    def _load(self, topic_id) -> None:
        values = self.checkpoints.read()
        clean = self.checkpoints.had_clean_shutdown()
        self._remove_temporary_files()
        self._complete_swaps()
        self._open_segments(values.get("log_start_offset", 0))
        if not clean:
            self.recovered = True
            self._recover(values.get("recovery_point", 0))
        else:
            self._rebuild_bad_indexes()
        last = self.active_segment
        last.make_active(max(self.config.segment_bytes, last.size))
        # The log start never moves back; data below it may be gone (an emptied segment
        # reads as "next offset = base"), so the log end is at least the log start.
        self.log_start_offset = max(values.get("log_start_offset", 0),
                                    self.segments[0].base_offset)
        self.next_offset = max(last.read_next_offset(), self.log_start_offset)
        self.epoch_cache.truncate_from_end(self.next_offset)
        self.epoch_cache.truncate_from_start(self.log_start_offset)
        self._rebuild_producer_state()
        if not clean:
            # what recovery kept is durable before the recovery point moves past it
            for seg in self.segments[self._segment_index(values.get("recovery_point", 0)):]:
                seg.flush()
        self.recovery_point = self.next_offset
        self.high_watermark = min(max(values.get("high_watermark", self.log_start_offset),
                                      self.log_start_offset), self.next_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        self.checkpoints.clear_clean_shutdown()
        self.checkpoint()
        self._load_topic_id(topic_id)
        self._check_invariants()

    def _remove_temporary_files(self) -> None:
        for name in os.listdir(self.dir):
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                os.unlink(os.path.join(self.dir, name))

    def _complete_swaps(self) -> None:
        """Finish a compaction swap that a crash interrupted (see storage/cleaner.py).

        A `.log.swap` file exists only once the cleaned segment was fully written and
        synced, so it wins: the old segments it covers are deleted, the suffix dropped.
        """
        for name in sorted(os.listdir(self.dir)):
            if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                continue
            base = parse_base_offset(name)
            for suffix in (".index", ".timeindex", ".txnindex"):
                p = os.path.join(self.dir, name.split(".")[0] + suffix + SWAP_SUFFIX)
                if os.path.exists(p):
                    os.unlink(p)    # rebuilt below
            seg = self._new_segment(base, active=False, suffix=SWAP_SUFFIX)
            seg.recover()
            end = seg.read_next_offset()
            for other in os.listdir(self.dir):
                ob = parse_base_offset(other)
                if ob is not None and ob != base and base <= ob < end and \
                        not other.endswith(SWAP_SUFFIX):
                    os.unlink(os.path.join(self.dir, other))
            for other in os.listdir(self.dir):
                if parse_base_offset(other) == base and not other.endswith(SWAP_SUFFIX) \
                        and not other.endswith(".snapshot"):
                    os.unlink(os.path.join(self.dir, other))
            seg.rename_suffix("")
            seg.close()
            self._mark_txn_rebuild(base)

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

    def _recover(self, recovery_point: int) -> None:
        """Validate segments from the one holding `recovery_point`; cut at corruption."""
        start = max(0, bisect.bisect_right(self._bases, recovery_point) - 1)
        for i, seg in enumerate(self.segments):
            if i < start and not seg.index_needs_rebuild:
                # flushed data is trusted (as in Kafka), its indexes get a full check
                try:
                    seg.index.check_monotonic_fast(seg.size)
                    seg.time_index.check_monotonic_fast()
                    continue
                except CorruptIndexError:
                    seg.index_needs_rebuild = True
            truncated = seg.recover(epoch_cache=self.epoch_cache if i >= start else None)
            if i >= start or truncated:
                self._mark_txn_rebuild(seg.base_offset)
            self.recovered_bytes_truncated += truncated
            # past the recovery point an inactive segment was trimmed at roll: a cut
            # there means a torn write, and nothing after it can be trusted
            if truncated and i >= start and i + 1 < len(self.segments):
                for later in self.segments[i + 1:]:
                    later.delete()
                del self.segments[i + 1:]
                del self._bases[i + 1:]
                break

    def _rebuild_bad_indexes(self) -> None:
        """Clean shutdown: trust the data, but rebuild missing/insane indexes, and check
        that the last segment ends exactly at its file length (else recover it)."""
        for seg in self.segments:
            if seg.index_needs_rebuild:
                seg.recover()
        last = self.active_segment
        _, pos = last.index.lookup(LONG_MAX)
        end = pos
        for b in last.iter_positions(pos):
            end = b.position + b.size
        if end != last.size:
            self.recovered_bytes_truncated += last.recover(epoch_cache=self.epoch_cache)
            self._mark_txn_rebuild(last.base_offset)

    def _mark_txn_rebuild(self, offset: int) -> None:
        if self._txn_rebuild_from is None or offset < self._txn_rebuild_from:
            self._txn_rebuild_from = offset

    def _rebuild_producer_state(self) -> None:
        """Producer state from the newest usable snapshot plus the batches after it;
        the txnindexes of re-validated segments (and of unreadable ones) are rebuilt
        on the way, from a snapshot at or below the first of them."""
        for seg in self.segments:
            if seg.txn_index.needs_rebuild:
                self._mark_txn_rebuild(seg.base_offset)
        rebuild = self._txn_rebuild_from
        self._txn_rebuild_from = None
        if rebuild is not None:
            for seg in self.segments:
                seg.txn_index.truncate_to(rebuild)
                seg.txn_index.needs_rebuild = False
        start = self.producer_state.truncate_and_reload(self.log_start_offset, self.next_offset,
                                                        self.clock(), load_at_or_below=rebuild)
        self._replay_producer_state(start, self.next_offset, rebuild_txn_index_from=rebuild)
        self.producer_state.remove_expired_producers(self.clock())

    def _replay_producer_state(self, start: int, end: int,
                               rebuild_txn_index_from: int | None = None) -> None:
        i = max(0, bisect.bisect_right(self._bases, start) - 1)
        for seg in self.segments[i:]:
            first = seg.translate_offset(start)
            if first is None:
                continue
            for batch in seg.iter_batches(first.position):
                if batch.base_offset >= end:
                    break
                if batch.base_offset >= start:
                    aborted = self.producer_state.apply_batch(batch)
                    if rebuild_txn_index_from is not None:
                        for txn in aborted:
                            if txn.last_offset >= rebuild_txn_index_from:
                                seg.txn_index.append(txn)
        self.producer_state.map_end_offset = end

    def _load_topic_id(self, topic_id: bytes | None) -> None:
        path = os.path.join(self.dir, PARTITION_METADATA_FILE)
        stored = None
        if os.path.exists(path):
            with open(path, "r", encoding="utf-8") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key.strip() == "topic_id":
                        v = value.strip()
                        stored = base64.urlsafe_b64decode(v + "=" * (-len(v) % 4))
        if topic_id is not None and stored is not None and stored != topic_id:
            raise InconsistentTopicIdError(f"{self.dir}: topic id differs from partition.metadata")
        if topic_id is not None and stored is None:
            self.write_topic_id(topic_id)
        self.topic_id = stored if stored is not None else topic_id

    def write_topic_id(self, topic_id: bytes, durable: bool = True) -> None:
        """Write `partition.metadata` (Kafka's format: base64url uuid, no padding)."""
        text = base64.urlsafe_b64encode(topic_id).decode().rstrip("=")
        atomic_write(os.path.join(self.dir, PARTITION_METADATA_FILE),
                     f"version: 0\ntopic_id: {text}\n".encode(), durable=durable)
        self.topic_id = topic_id

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
                if slices:
                    break
                continue
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

    # ================================================================= deletion

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to `offset` (-1 = high watermark).

        OffsetOutOfRangeError past the high watermark.  Segments wholly below the new
        start are removed at once.  Returns the log start offset.
        """
        self._check_open()
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(f"cannot delete records before {offset}: high watermark"
                                        f" is {self.high_watermark}")
        if offset > self.log_start_offset:
            self._set_log_start(offset)
            try:
                self._delete_segments(self._start_breached_count(), self.clock())
            except OSError as e:        # a roll for it failed: the start moved all the same
                raise KafkaStorageError.from_os_error(f"deleting records of {self.dir}", e) \
                    from e
            try:
                self.checkpoints.write(log_start_offset=self.log_start_offset)
            except OSError as e:
                # a full disk must not stop DeleteRecords (it frees space); the periodic
                # checkpoint writes it once there is room
                if e.errno not in DISK_FULL_ERRNOS:
                    raise KafkaStorageError.from_os_error(
                        f"checkpointing the log start of {self.dir}", e) from e
        self._check_invariants()
        return self.log_start_offset

    def _set_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        self.epoch_cache.truncate_from_start(offset)
        self.producer_state.on_log_start_offset_incremented(offset)

    def _start_breached_count(self) -> int:
        n = 0
        for seg, nxt in zip(self.segments, self.segments[1:]):
            if nxt.base_offset > self.log_start_offset:
                break
            n += 1
        return n

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Delete old segments by retention.ms / retention.bytes / log start; count."""
        self._check_open()
        now = self.clock() if now_ms is None else now_ms
        self.delete_expired_files(now)
        deleted = 0
        c = self.config
        if c.delete and c.retention_ms >= 0:
            deleted += self._delete_segments(self._deletable(
                lambda seg, _: now - seg.largest_timestamp > c.retention_ms), now)
        if c.delete and c.retention_bytes >= 0:
            excess = self.size_bytes - c.retention_bytes

            def over(seg, _):
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False
            deleted += self._delete_segments(self._deletable(over), now)
        deleted += self._delete_segments(self._start_breached_count(), now)
        self._check_invariants()
        return deleted

    def _deletable(self, predicate) -> int:
        """How many oldest segments match, bounded by the high watermark."""
        n = 0
        for i, seg in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            upper = nxt.base_offset if nxt else self.next_offset
            if upper > self.high_watermark or (nxt is None and seg.size == 0):
                break
            if not predicate(seg, nxt):
                break
            n += 1
        return n

    def _delete_segments(self, n: int, now: int) -> int:
        if n <= 0:
            return 0
        if n >= len(self.segments):
            self.roll()
            n = len(self.segments) - 1
        doomed = self.segments[:n]
        del self.segments[:n]
        del self._bases[:n]
        for seg in doomed:
            seg.rename_suffix(DELETED_SUFFIX)
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))
        if self.segments[0].base_offset > self.log_start_offset:
            self._set_log_start(self.segments[0].base_offset)
            if self.high_watermark < self.log_start_offset:
                self.high_watermark = self.log_start_offset
        self.producer_state.delete_snapshots_before(self.segments[0].base_offset,
                                                    keep_latest=True)
        self.delete_expired_files(now)
        return n

    def delete_expired_files(self, now_ms: int) -> int:
        """Unlink `.deleted` segments whose `file.delete.delay.ms` has passed."""
        due = [(t, s) for t, s in self._pending_deletes if t <= now_ms]
        self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now_ms]
        for _, seg in due:
            seg.delete()
        return len(due)

    # ================================================================= truncation

    def truncate_to(self, offset: int) -> bool:
        """Follower truncation: drop every batch holding an offset >= `offset`.

        The log end lands on the batch boundary at or below `offset` (Kafka sets it to
        `offset` itself; both are the same for the batch-aligned offsets followers use).
        Returns True when anything was removed.
        """
        self._check_open()
        if offset < 0:
            raise InvalidOffsetError(f"cannot truncate to {offset}")
        if offset >= self.next_offset:
            return False
        if offset < self.log_start_offset or offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        now = self.clock()
        i = self._segment_index(offset)
        later = self.segments[i + 1:]
        del self.segments[i + 1:]
        del self._bases[i + 1:]
        for seg in later:
            seg.rename_suffix(DELETED_SUFFIX)
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))
        seg = self.segments[i]
        seg.truncate_to(offset)
        if not seg.active:
            seg.make_active(max(self.config.segment_bytes, seg.size))
        # never below the log start: a segment emptied by compaction or DeleteRecords
        # reads as "next offset = its base", which may be below the log start
        self.next_offset = max(seg.read_next_offset(), self.log_start_offset)
        self._after_truncation()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment; the log restarts empty at `offset`."""
        now = self.clock()
        for seg in self.segments:
            seg.rename_suffix(DELETED_SUFFIX)
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))
        self.segments, self._bases = [], []
        self._add_segment(self._new_segment(offset, active=True))
        self.next_offset = self.log_start_offset = offset
        self.epoch_cache.clear()
        self.producer_state.delete_snapshots_before(LONG_MAX)
        self._after_truncation()

    def _after_truncation(self) -> None:
        self.epoch_cache.truncate_from_end(self.next_offset)
        self.recovery_point = min(self.recovery_point, self.next_offset)
        self.high_watermark = min(max(self.high_watermark, self.log_start_offset),
                                  self.next_offset)
        self.log_start_offset = min(self.log_start_offset, self.next_offset)
        start = self.producer_state.truncate_and_reload(self.log_start_offset,
                                                        self.next_offset, self.clock())
        self._replay_producer_state(start, self.next_offset)
        self._truncate_cleaner_checkpoint()
        self.delete_expired_files(self.clock())
        self.checkpoint()                   # rare; a restart must not see older offsets
        self._check_invariants()

    def _truncate_cleaner_checkpoint(self) -> None:
        """Lower the cleaner's first dirty offset to the new log end (Kafka does too)."""
        cp = OffsetCheckpoint(os.path.join(self.dir, CLEANER_CHECKPOINT_FILE))
        try:
            value = cp.read().get((self.topic, self.partition))
        except CheckpointError:
            value = None
        if value is not None and value > self.next_offset:
            cp.write({(self.topic, self.partition): self.next_offset})

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

    def _sync_created(self) -> None:
        """The first flush of a log `_create` made: its `partition.metadata` and its
        directory entries (segment files included) are made durable before the data."""
        path = os.path.join(self.dir, PARTITION_METADATA_FILE)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            pass
        else:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(self.dir)
        self._unsynced = False

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

    # ================================================================= compaction hooks

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """Swap cleaned `new` (suffix `.cleaned`) in for `old` (contiguous, inactive).

        Crash-safe order: `.cleaned` -> `.swap` (synced), old -> `.deleted`, `.swap` ->
        final name; `_complete_swaps` finishes an interrupted swap on open.
        """
        assert old and all(not s.active for s in old)
        i = self.segments.index(old[0])
        assert self.segments[i:i + len(old)] == old
        new.flush()
        new.rename_suffix(SWAP_SUFFIX)
        fsync_dir(self.dir)
        now = self.clock()
        for seg in old:
            seg.rename_suffix(DELETED_SUFFIX)
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, seg))
        new.rename_suffix("")
        fsync_dir(self.dir)
        self.segments[i:i + len(old)] = [new]
        self._bases[i:i + len(old)] = [new.base_offset]
        self.delete_expired_files(now)
