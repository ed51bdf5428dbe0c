"""Log compaction (`cleanup.policy=compact` / `compact,delete`) for one partition's log.

What a pass does (Kafka's LogCleaner, one log at a time, run by the owning worker):

1. Cleanable range: from the log start to the *first uncleanable offset*: the active
   segment's base offset, or the base of the first segment younger than
   `min.compaction.lag.ms`.  The active segment is never touched.
2. Offset map: for the *dirty* part (from the cleaner checkpoint to the end of the
   range) map `blake2b-128(key) -> latest offset`.  The map holds at most
   `max_map_entries` keys (bounded memory, like Kafka's dedupe buffer); when it fills
   up, the map ends at the first record that did not fit (Kafka: the map's latest
   offset + 1), and this pass cleans only the segments that start below that offset
   and moves the checkpoint there.
3. Rewrite: segments of the cleanable range, in groups whose total size fits in
   `segment.bytes`, are copied into one `<base>.log.cleaned` segment keeping for each
   key only its latest record (records above the map's range are all kept) and no
   record without a key (Kafka's cleaner drops them as invalid: a topic that was
   `delete` before and `compact` now, or a follower's copy).  Offsets
   never change: a batch keeps its base offset, last offset delta, producer id/epoch
   and base sequence; its surviving records are re-encoded with the same codec, or
   the batch bytes are copied as they are when nothing in it changes.  A batch left
   without records is dropped, unless it is its producer's last batch (kept empty, so
   the producer's sequence state survives, as Kafka does).
4. Tombstones (null values): a batch holding a kept tombstone gets a *delete horizon*
   (now + `delete.retention.ms`, stored in its base timestamp with attribute bit 6,
   KIP-534) the first time it is cleaned; once that horizon has passed, a later pass
   drops its tombstones.
5. Swap: `Log.replace_segments` renames `.cleaned` -> `.swap` (synced), the old
   segments -> `.deleted`, `.swap` -> `.log`; `Log.open` completes a swap a crash
   interrupted.
6. Checkpoint: `<partition dir>/cleaner-offset-checkpoint` (Kafka's offset checkpoint
   format, one `topic partition offset` entry, written only by the owner) records the
   first dirty offset for the next pass.

Incremental: `clean_step(budget_ms)` does at most about `budget_ms` of work (a batch
at a time) and returns, keeping its place, so the worker's event loop can interleave
appends and fetches; appends never wait for a whole pass.  If retention or truncation
removes a segment that a pass is working on, the pass is abandoned and restarts.

Uncleanable logs.  Produce validates every record (storage/validator.py), but a
batch written before that or copied by a follower may still contradict its header
(a wrong count inside a compressed batch, say); such a batch is found here.  Such a log is marked uncleanable, as in Kafka's
LogCleanerManager: the pass is abandoned (its `.cleaned` output deleted) and the
error logged once.  Kafka leaves it uncleanable until the partition moves or the
broker restarts; here it is retried after `backoff_ms`, doubled after each failure in
a row up to `MAX_BACKOFF_FACTOR` times (retention, DeleteRecords or a truncation may
have removed the bad batch meanwhile).  Nothing is raised to the worker.

Per worker (`CleanerManager`, Kafka's LogCleaner with one thread): the worker's
compacted logs are cleaned one pass at a time, dirtiest first, so the one offset map
alive is bounded by the worker's share of `log.cleaner.dedupe.buffer.size` (split
evenly between the workers, as Kafka splits it between cleaner threads; an entry costs
`MAP_ENTRY_BYTES` in CPython, and `log.cleaner.io.buffer.load.factor` of the buffer
is used).  With nothing to clean it looks again after `log.cleaner.backoff.ms`;
`log.cleaner.enable=false` turns compaction off.

Transactions (Kafka's CleanedTransactionMetadata, simplified):

* the cleanable range also ends at the log's first unstable offset: an open (or not
  yet replicated) transaction is never cleaned (Kafka bounds it by the LSO, which is
  also bounded by the high watermark; here only transactions bound it, so nothing
  undecided is ever cleaned either way);
* aborted transactions come from the txnindexes (storage/txn_index.py): a
  transactional data batch inside an aborted transaction of its producer (first
  offset <= batch offset <= ABORT marker) contributes no key to the offset map and is
  dropped whole (kept empty only when it is its producer's last batch);
* a COMMIT/ABORT marker stays while any data batch of its transaction is still in the
  log (one was written to the cleaned output since the producer's previous marker);
  once none is, it gets a delete horizon (now + `delete.retention.ms`, like a
  tombstone) so consumers that read the transaction's data still see its end, and a
  pass after the horizon drops it.  An ABORT marker's txnindex entry goes into the
  cleaned segment exactly when the marker does, so no entry ever points at a marker
  that is gone (which would make read_committed consumers skip that producer for good).
"""
from __future__ import annotations

import bisect
import hashlib
import logging
import os
import time
from typing import Callable

from storage.batch import LOG_APPEND_TIME, BatchBuilder
from storage.checkpoint import CheckpointError, OffsetCheckpoint
from storage.errors import InvalidRecordError, StorageError
from storage.index import INT32_MAX
from storage.log_retention import CLEANER_CHECKPOINT_FILE
from storage.producer_state import read_end_txn_marker
from storage.segment import CLEANED_SUFFIX, LogSegment

log = logging.getLogger(__name__)

MAP_ENTRY_BYTES = 137           # measured: dict slot + 16-byte digest + int, CPython 3.11
MAX_BACKOFF_FACTOR = 64


def map_entries_for(buffer_bytes: int, load_factor: float = 0.9) -> int:
    """Offset map entries that `buffer_bytes` of dedupe buffer hold."""
    return max(1, int(buffer_bytes * load_factor) // MAP_ENTRY_BYTES)


def key_hash(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


def _builder_like(batch, delete_horizon_ms: int | None = None) -> BatchBuilder:
    """A builder for a cleaned copy of `batch`: its base offset, compression, timestamp
    type (and LogAppendTime), producer fields and leader epoch, records to be added."""
    return BatchBuilder(batch.base_offset, compression=batch.compression,
                        timestamp_type=batch.timestamp_type,
                        log_append_time_ms=batch.max_timestamp
                        if batch.timestamp_type == LOG_APPEND_TIME else None,
                        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                        base_sequence=batch.base_sequence,
                        is_transactional=batch.is_transactional,
                        partition_leader_epoch=batch.partition_leader_epoch,
                        delete_horizon_ms=delete_horizon_ms)


class OffsetMap:
    """key hash -> latest offset, at most `max_entries` keys."""

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> bool:
        """Record `offset` for `key`; False (nothing stored) when a new key would not fit."""
        h = key_hash(key)
        if h not in self._map and len(self._map) >= self.max_entries:
            return False
        self._map[h] = offset
        self.latest_offset = max(self.latest_offset, offset)
        return True

    def get(self, key: bytes) -> int:
        return self._map.get(key_hash(key), -1)

    def __len__(self):
        return len(self._map)


class LogCleaner:
    """Compaction of one `Log`; the log's owner calls `clean_step` from its loop."""

    def __init__(self, log, *, max_map_entries: int = 1_000_000,
                 timer: Callable[[], float] = time.monotonic, backoff_ms: int = 15_000):
        self.log = log
        self.max_map_entries = max_map_entries
        self.timer = timer
        self.backoff_ms = backoff_ms
        self.checkpoint_file = OffsetCheckpoint(os.path.join(log.dir, CLEANER_CHECKPOINT_FILE))
        self.first_dirty_offset = 0
        self._load_checkpoint()
        self._reset_pass()
        self.passes_completed = 0
        self.failures = 0               # failed passes in a row (uncleanable while > 0)
        self.retry_at_ms = 0            # an uncleanable log is not looked at before this

    # -- scheduling -------------------------------------------------------------------

    def _load_checkpoint(self) -> None:
        """First dirty offset from the checkpoint (the log lowers it on truncation)."""
        try:
            stored = self.checkpoint_file.read().get((self.log.topic, self.log.partition))
        except CheckpointError:
            stored = None
        if stored is not None:
            self.first_dirty_offset = stored
        if not self.log.log_start_offset <= self.first_dirty_offset <= self.log.log_end_offset:
            self.first_dirty_offset = self.log.log_start_offset

    def _reset_pass(self) -> None:
        if getattr(self, "_out", None) is not None:
            self._out.delete()
        self._phase = "idle"
        self._segs: list[LogSegment] = []   # the segments this pass cleans
        self._map = None
        self._end = 0                   # first uncleanable offset of this pass
        self._scan = None               # (segment index, position) while building the map
        self._groups: list[list[LogSegment]] = []
        self._group_pos = None          # (segment idx in group, position) while copying
        self._out: LogSegment | None = None

    def first_uncleanable_offset(self, now_ms: int) -> int:
        log = self.log
        end = log.active_segment.base_offset
        unstable = log.first_unstable_offset
        if unstable is not None:
            end = min(end, unstable)
        lag = log.config.min_compaction_lag_ms
        if lag > 0:
            for seg in log.segments[:-1]:
                if seg.largest_timestamp > now_ms - lag:
                    end = min(end, seg.base_offset)
                    break
        return end

    def dirty_ratio(self, now_ms: int) -> float:
        end = self.first_uncleanable_offset(now_ms)
        total = dirty = 0
        for seg in self.log.segments:
            if seg.base_offset >= end:
                break
            total += seg.size
            if seg.read_next_offset() > self.first_dirty_offset:
                dirty += seg.size
        return dirty / total if total else 0.0

    def needs_cleaning(self, now_ms: int | None = None) -> bool:
        return self.cleaning_priority(now_ms) is not None

    def cleaning_priority(self, now_ms: int | None = None) -> float | None:
        """The dirty ratio when a pass is due (higher = dirtier), else None."""
        c = self.log.config
        if not c.compact or self.log.closed:
            return None
        now = self.log.clock() if now_ms is None else now_ms
        if now < self.retry_at_ms:
            return None
        ratio = self.dirty_ratio(now)
        if ratio >= c.min_cleanable_dirty_ratio and ratio > 0:
            return ratio
        first = self.log.segments[0]
        if len(self.log.segments) > 1 and first.read_next_offset() > self.first_dirty_offset \
                and now - first.largest_timestamp > c.max_compaction_lag_ms:
            return ratio
        return None

    def clean_step(self, budget_ms: float = 5.0) -> bool:
        """Work for about `budget_ms`; True while a pass is in progress.  A log whose
        data cannot be cleaned becomes uncleanable for a while (module docstring)."""
        try:
            return self._clean_step(budget_ms)
        except Exception as e:      # noqa: BLE001 - a bad log must not stop the worker
            self._mark_uncleanable(e)
            return False

    def _clean_step(self, budget_ms: float) -> bool:
        deadline = self.timer() + budget_ms / 1000.0
        if self._phase == "idle":
            self._load_checkpoint()
            if not self.needs_cleaning():
                return False
            self._start_pass()
        while self.timer() < deadline and self._phase != "idle":
            if not self._segments_still_there():
                self._reset_pass()
                return False
            if self._phase == "map":
                self._map_step(deadline)
            elif self._phase == "copy":
                self._copy_step(deadline)
        return self._phase != "idle"

    def _mark_uncleanable(self, error: Exception) -> None:
        self._reset_pass()
        self.failures += 1
        factor = min(2 ** (self.failures - 1), MAX_BACKOFF_FACTOR)
        self.retry_at_ms = self.log.clock() + self.backoff_ms * factor
        if self.failures == 1:      # once per streak: the same error would repeat
            expected = isinstance(error, (StorageError, OSError))
            log.warning("%s is uncleanable (retried after %d ms, then less often): %s",
                        self.log.dir, self.backoff_ms, error, exc_info=not expected)

    def clean_all(self) -> None:
        """One whole pass (tests, offline tools)."""
        if self._phase == "idle" and not self.needs_cleaning():
            return
        while self.clean_step(1000.0):
            pass

    # -- pass phases ------------------------------------------------------------------

    def _start_pass(self) -> None:
        log = self.log
        self._end = self.first_uncleanable_offset(log.clock())
        self._map = OffsetMap(self.max_map_entries)
        start = max(self.first_dirty_offset, log.log_start_offset)
        idx = max(0, log._segment_index(start))
        self._segs = [s for s in log.segments if s.base_offset < self._end]
        # aborted transactions: producer id -> sorted [(first offset, AbortedTxn)]
        self._aborted: dict[int, list] = {}
        for seg in log.segments:
            for t in seg.txn_index.entries:
                self._aborted.setdefault(t.producer_id, []).append((t.first_offset, t))
        for lst in self._aborted.values():
            lst.sort(key=lambda x: x[0])
        self._txn_data: set[int] = set()   # producers with data kept since their marker
        self._scan = (idx, 0)
        self._map_end = self._end
        self._phase = "map"

    def _segments_still_there(self) -> bool:
        present = {id(s) for s in self.log.segments}
        return all(id(s) in present for s in self._segs) and not self.log.closed

    def _map_step(self, deadline: float) -> None:
        i, pos = self._scan
        start = max(self.first_dirty_offset, self.log.log_start_offset)
        while i < len(self._segs):
            seg = self._segs[i]
            for batch in seg.iter_batches(pos):
                if batch.base_offset >= self._end:
                    break
                if batch.last_offset >= start and not batch.is_control \
                        and not self._is_aborted(batch):
                    full_at = self._map_batch(batch)
                    if full_at is not None:
                        self._map_end = full_at         # map full: it ends there
                        self._begin_copy()
                        return
                pos += batch.size
                if self.timer() >= deadline:
                    self._scan = (i, pos)
                    return
            i, pos = i + 1, 0
        self._begin_copy()

    def _map_batch(self, batch) -> int | None:
        """Put the batch's keys; the offset of the first record that did not fit, or
        None.  The batch is decoded whole first, so a bad one changes nothing."""
        records = list(batch.records())
        for r in records:
            if r.key is not None and r.offset >= self.log.log_start_offset:
                if not self._map.put(r.key, r.offset):
                    return r.offset
        return None

    def _begin_copy(self) -> None:
        groups, cur, size = [], [], 0
        limit = self.log.config.segment_bytes
        for seg in self._segs:
            if seg.base_offset >= self._map_end:
                break               # not indexed by this pass's map (Kafka: the same)
            fits = cur and size + seg.size <= limit and \
                seg.read_next_offset() - 1 - cur[0].base_offset <= INT32_MAX
            if cur and not fits:
                groups.append(cur)
                cur, size = [], 0
            cur.append(seg)
            size += seg.size
        if cur:
            groups.append(cur)
        self._groups = groups
        self._group_pos = None
        self._phase = "copy"
        self._now = self.log.clock()

    def _copy_step(self, deadline: float) -> None:
        while self._groups:
            group = self._groups[0]
            if self._group_pos is None:
                # a rewritten batch can grow (a delete horizon in the base timestamp
                # makes the record timestamp deltas longer varints): leave room
                cap = max(1, sum(s.size for s in group))
                cap += cap // 8 + 1024
                c = self.log.config
                path = os.path.join(self.log.dir, f"{group[0].base_offset:020d}.log{CLEANED_SUFFIX}")
                if os.path.exists(path):
                    os.unlink(path)
                self._out = LogSegment(self.log.dir, group[0].base_offset, capacity=cap,
                                       index_interval_bytes=c.index_interval_bytes,
                                       max_index_size=max(
                                           c.segment_index_bytes, 8,
                                           12 * (cap // max(1, c.index_interval_bytes) + 2)),
                                       created_ms=self._now, active=True, suffix=CLEANED_SUFFIX)
                self._out.txn_index.reset()     # a leftover of an abandoned pass
                self._group_pos = (0, 0)
            si, pos = self._group_pos
            while si < len(group):
                for batch in group[si].iter_batches(pos):
                    self._copy_batch(batch)
                    pos += batch.size
                    if self.timer() >= deadline:
                        self._group_pos = (si, pos)
                        return
                si, pos = si + 1, 0
            self._finish_group(group)
        self._finish_pass()

    def _finish_group(self, group) -> None:
        out = self._out
        out.on_become_inactive()
        self.log.replace_segments(group, out)
        self._segs = [s for s in self._segs if s not in group]
        self._out = None
        self._groups.pop(0)
        self._group_pos = None

    def _finish_pass(self) -> None:
        self.first_dirty_offset = min(self._map_end, self._end)
        self.checkpoint_file.write({(self.log.topic, self.log.partition): self.first_dirty_offset})
        self._reset_pass()
        self.passes_completed += 1
        self.failures = 0
        self.retry_at_ms = 0

    # -- filtering one batch ----------------------------------------------------------

    def _is_aborted(self, batch) -> bool:
        """A transactional data batch inside an aborted transaction of its producer."""
        if not batch.is_transactional or batch.is_control:
            return False
        lst = self._aborted.get(batch.producer_id)
        if not lst:
            return False
        o = batch.base_offset
        i = bisect.bisect_right(lst, o, key=lambda x: x[0]) - 1
        return i >= 0 and lst[i][1].last_offset >= o

    def _copy_control(self, batch) -> None:
        pid = batch.producer_id
        try:
            commit = read_end_txn_marker(batch).commit
        except InvalidRecordError:
            self._write(batch)          # not a marker we know: kept as it is
            return
        entry = None
        if not commit:
            entry = next((t for _, t in self._aborted.get(pid, ())
                          if t.last_offset == batch.base_offset), None)
        if batch.base_offset >= self._end or pid in self._txn_data:
            # data of its transaction is still there (or the marker is above the range)
            self._txn_data.discard(pid)
            self._keep_marker(batch, entry)
            return
        horizon = batch.delete_horizon_ms
        if horizon is not None and self._now >= horizon:
            return                      # nothing of the transaction left, horizon passed
        if horizon is not None:
            self._keep_marker(batch, entry)
            return
        # first pass that finds the transaction empty: keep it until the horizon
        rec = next(iter(batch.records()))
        b = BatchBuilder(batch.base_offset, producer_id=pid, producer_epoch=batch.producer_epoch,
                         base_sequence=batch.base_sequence, is_transactional=True,
                         is_control=True, partition_leader_epoch=batch.partition_leader_epoch,
                         delete_horizon_ms=self._now + self.log.config.delete_retention_ms)
        b.append(rec.key, rec.value, rec.headers, timestamp=rec.timestamp, offset=rec.offset)
        self._out.append(batch.last_offset, rec.timestamp, batch.last_offset,
                         b.build(last_offset_delta=batch.last_offset_delta))
        if entry is not None:
            self._out.txn_index.append(entry)

    def _keep_marker(self, batch, entry) -> None:
        self._write(batch)
        if entry is not None:
            self._out.txn_index.append(entry)

    def _copy_batch(self, batch) -> None:
        if batch.is_control:
            self._copy_control(batch)
            return
        if batch.last_offset < self.log.log_start_offset:
            return
        if batch.base_offset >= self._end:
            self._write_data(batch)      # above the cleanable range: untouched
            return
        if self._is_aborted(batch):
            if self._is_producers_last_batch(batch):
                self._write_empty(batch)
            return
        horizon = batch.delete_horizon_ms
        drop_tombstones = horizon is not None and self._now >= horizon
        records = list(batch.records())
        kept = []
        for r in records:
            if r.offset < self.log.log_start_offset:
                continue
            if r.key is None:
                continue                        # Kafka drops keyless records here
            if r.offset < self._map_end and self._map.get(r.key) > r.offset:
                continue
            if r.value is None and drop_tombstones:
                continue
            kept.append(r)
        has_tombstone = any(r.value is None for r in kept)
        new_horizon = horizon
        if has_tombstone and horizon is None:
            new_horizon = self._now + self.log.config.delete_retention_ms
        if len(kept) == len(records) and new_horizon == horizon:
            self._write_data(batch)
            return
        if not kept and not self._is_producers_last_batch(batch):
            return
        if batch.is_transactional:
            self._txn_data.add(batch.producer_id)
        b = _builder_like(batch, new_horizon if has_tombstone else None)
        for r in kept:
            b.append(r.key, r.value, r.headers, timestamp=r.timestamp, offset=r.offset)
        data = b.build(last_offset_delta=batch.last_offset_delta)
        self._out.append(batch.last_offset, max([r.timestamp for r in kept], default=-1),
                         batch.last_offset, data)

    def _write_data(self, batch) -> None:
        if batch.is_transactional:
            self._txn_data.add(batch.producer_id)
        self._write(batch)

    def _write_empty(self, batch) -> None:
        """Keep the batch header without records (the producer's sequence state)."""
        self._txn_data.add(batch.producer_id)
        b = _builder_like(batch)
        self._out.append(batch.last_offset, -1, batch.last_offset,
                         b.build(last_offset_delta=batch.last_offset_delta))

    def _write(self, batch) -> None:
        """Copy the batch bytes unchanged."""
        self._out.append(batch.last_offset, batch.max_timestamp, batch.last_offset,
                         batch.buffer[:batch.size])

    def _is_producers_last_batch(self, batch) -> bool:
        if not batch.has_producer_id:
            return False
        e = self.log.producer_state.last_entry(batch.producer_id)
        return e is not None and e.last_offset == batch.last_offset


class CleanerManager:
    """The compaction of every compacted log of one worker (module docstring): one
    pass at a time, the dirtiest log first; the owner calls `step` from its loop."""

    def __init__(self, *, max_map_entries: int, backoff_ms: int = 15_000,
                 enabled: bool = True, timer: Callable[[], float] = time.monotonic):
        self.max_map_entries = max_map_entries
        self.backoff_ms = backoff_ms
        self.enabled = enabled
        self.timer = timer
        self.cleaners: dict = {}        # key -> LogCleaner (no map while idle)
        self.current = None             # the key whose pass is in progress
        self.next_check_ms = 0          # nothing was due: look again from then

    def step(self, logs: dict, now_ms: int, budget_ms: float = 5.0) -> bool:
        """One slice of about `budget_ms` for the log being cleaned, choosing one
        first when none is.  `logs`: key -> Log, all the worker owns.  True while a
        pass is in progress."""
        if not self.enabled:
            return False
        if self.current is None:
            if now_ms < self.next_check_ms:
                return False
            self.current = self._filthiest(logs, now_ms)
            if self.current is None:
                self.next_check_ms = now_ms + self.backoff_ms
                return False
        cleaner = self.cleaners.get(self.current)
        if cleaner is None or logs.get(self.current) is not cleaner.log:
            self.current = None         # the partition went away or was reopened
            return False
        if cleaner.clean_step(budget_ms):
            return True
        self.current = None
        return False

    def forget(self, key) -> None:
        """The worker closed or deleted the log of `key`."""
        self.cleaners.pop(key, None)
        if self.current == key:
            self.current = None

    def _filthiest(self, logs: dict, now_ms: int):
        for key in [k for k, c in self.cleaners.items() if logs.get(k) is not c.log]:
            del self.cleaners[key]
        best, best_ratio = None, -1.0
        for key, lg in logs.items():
            if lg.closed or not lg.config.compact:
                continue
            cleaner = self.cleaners.get(key)
            if cleaner is None:
                cleaner = self.cleaners[key] = LogCleaner(
                    lg, max_map_entries=self.max_map_entries, timer=self.timer,
                    backoff_ms=self.backoff_ms)
            ratio = cleaner.cleaning_priority(now_ms)
            if ratio is not None and ratio > best_ratio:
                best, best_ratio = key, ratio
        return best
