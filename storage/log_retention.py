"""Data leaving a partition's log: retention, DeleteRecords, follower truncation and the
compaction swap.

Retention (`enforce_retention(now_ms)`): whole segments, oldest first, only below the
high watermark, by `retention.ms` (segment's largest timestamp), `retention.bytes`, and
the log start offset (DeleteRecords, `delete_records_before`).  Removed segments are
renamed `*.deleted` (their fds stay open, so slices already handed out stay valid in
this process) and unlinked `file.delete.delay.ms` later (`delete_expired_files`); a
reader in another process that opens the old path after the rename gets ENOENT and
must refetch.  Truncation (`truncate_to`, `truncate_fully_and_start_at`) cuts the log
end back for a follower, with the txnindex, the leader epochs, the producer state and
the cleaner's checkpoint.  `replace_segments` swaps a segment the cleaner wrote
(storage/cleaner.py) in for the ones it replaces, in a crash-safe order.

`LogRetention` is a part of `Log` (storage/log.py), which owns the state these methods
read and write.
"""
from __future__ import annotations

import os

from storage.checkpoint import CheckpointError, OffsetCheckpoint, fsync_dir
from storage.errors import (DISK_FULL_ERRNOS, InvalidOffsetError, KafkaStorageError,
                            OffsetOutOfRangeError)
from storage.log_config import LONG_MAX
from storage.segment import DELETED_SUFFIX, SWAP_SUFFIX, LogSegment

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"     # written by storage/cleaner.py


class LogRetention:
    """Removing data from a `Log` (see the module doc)."""

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
