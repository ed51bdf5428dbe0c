"""Opening a partition's log: a brand-new one, or one found on disk, recovered.

A brand-new log (`Log.open` made its directory) is created as Kafka creates one: the
directory and its files (empty segment, indexes, `partition.metadata`) are made without
an fsync per file and without the checkpoint files (nothing to checkpoint: written by
the first `checkpoint()`); the parent directory is fsynced (`sync_parent`, or by the
caller once per batch of new logs, workers/worker.py).  A crash before anything was
appended may lose such a log, or some of its files: it held nothing, nothing was
acknowledged from it, and the next open makes it again (empty, with the topic id it is
given) - Kafka's behaviour.  Its first `flush()` fsyncs `partition.metadata` and the
directory (`_sync_created`) before anything flushed can count as durable, so data that
exists is as safe as in a log opened the old way.

A log found on disk: temporary files go, an interrupted compaction swap is finished
(`_complete_swaps`), and without the clean-shutdown marker every segment from the one
holding the recovery point is recovered: CRC-validated batch by batch, torn tails and
preallocated zeros cut, indexes rebuilt; segments after a corrupt one are dropped.  A
missing or insane index is rebuilt in any case.  The producer state is reloaded from
the newest usable snapshot plus the batches after it, rebuilding on the way the
txnindexes of the segments recovery re-validated.

`partition.metadata`: "version: 0\ntopic_id: <base64url uuid, no padding>\n".

`LogRecovery` is a part of `Log` (storage/log.py), which owns the state these methods
read and write (segments, offsets, checkpoints, producer state).
"""
from __future__ import annotations

import base64
import bisect
import os

from storage.checkpoint import atomic_write, fsync_dir
from storage.errors import StorageError
from storage.index import CorruptIndexError
from storage.log_config import LONG_MAX
from storage.segment import (CLEANED_SUFFIX, DELETED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX,
                             parse_base_offset)

PARTITION_METADATA_FILE = "partition.metadata"


class InconsistentTopicIdError(StorageError):
    """INCONSISTENT_TOPIC_ID (103): partition.metadata holds another topic id."""

    code = 103


class LogRecovery:
    """Creating, loading and recovering a `Log` (see the module doc)."""

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
