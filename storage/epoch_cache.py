"""Leader epoch cache: which leader epoch started at which offset.

On disk: `<partition dir>/leader-epoch-checkpoint`, Kafka's checkpoint format
(`storage/checkpoint.py`): version 0, count, one `epoch start_offset` line per entry,
entries in increasing epoch and start offset order.  Written (tmp + fsync + rename)
by the partition's owner whenever the cache changes; changes are rare (a new leader,
a truncation), so every change is persisted at once.

Used by OffsetForLeaderEpoch (`end_offset_for`) and by follower truncation after a
failover (KIP-101/279): the log appends assign entries, truncations trim them.

Invariant (asserted on every change): epochs strictly increase and start offsets
never decrease along the list.
"""
from __future__ import annotations

import bisect
import os
from typing import NamedTuple

from storage.checkpoint import CheckpointError, CheckpointFile
from storage.errors import DISK_FULL_ERRNOS

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, dir_path: str | None, persist: bool = True):
        """`dir_path` None or `persist=False`: in memory only (tests, temp logs)."""
        self.path = os.path.join(dir_path, LEADER_EPOCH_FILE) if dir_path else None
        self._file = CheckpointFile(self.path, 0, fields=2) if self.path and persist else None
        self._entries: list[EpochEntry] = []
        if self._file:
            try:
                self._entries = [EpochEntry(e, o) for e, o in self._file.read()]
                self._check()
            except (CheckpointError, AssertionError):
                # a corrupt cache is rebuilt from the batches by log recovery
                self._entries = []

    # -- queries ----------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        """Epoch of the leader that wrote `offset`, or UNDEFINED_EPOCH."""
        i = bisect.bisect_right([e.start_offset for e in self._entries], offset) - 1
        return self._entries[i].epoch if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers it (Kafka's endOffsetFor).

        * requested is the latest epoch: (requested, log end offset);
        * otherwise the start offset of the first epoch above `requested`, paired with
          the largest known epoch <= requested (or `requested` itself when it is below
          every known epoch);
        * requested above every epoch, undefined, or an empty cache: (-1, -1).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        hi = bisect.bisect_right(epochs, requested_epoch)
        if hi == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher = self._entries[hi]
        if hi == 0:
            return requested_epoch, higher.start_offset
        return self._entries[hi - 1].epoch, higher.start_offset

    # -- changes ----------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True if the cache changed.

        Ignored when `epoch` is already the latest with an earlier start.  Entries that
        the new one contradicts (epoch >= new epoch or start >= new start) are removed,
        as in Kafka, so a new leader's entry always wins over stale history.
        """
        if epoch < 0:
            return False
        if self._entries:
            last = self._entries[-1]
            if last.epoch == epoch and last.start_offset <= start_offset:
                return False
        kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        self._entries = kept + [EpochEntry(epoch, start_offset)]
        self._changed()
        return True

    def snapshot(self) -> list[EpochEntry]:
        """The entries as of now, for `restore` (no copy: changes replace the list)."""
        return self._entries

    def restore(self, entries: list[EpochEntry]) -> None:
        """Back to `entries` (an undone append).  In memory at least: when the file
        cannot be rewritten (a full disk) the entry it holds past the log end is
        dropped by `truncate_from_end` on the next open."""
        if entries is self._entries:
            return
        self._entries = entries
        try:
            self._changed()
        except OSError:
            pass

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries starting at or after `end_offset` (the log was truncated there)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        self._entries = [e for e in self._entries if e.start_offset < end_offset]
        self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below the new log start; move the covering one up to it."""
        if not self._entries or self._entries[0].start_offset >= start_offset:
            return
        i = bisect.bisect_right([e.start_offset for e in self._entries], start_offset) - 1
        covering = self._entries[i]
        self._entries = [EpochEntry(covering.epoch, start_offset)] + self._entries[i + 1:]
        try:
            self._changed()
        except OSError as e:
            # a full disk must not stop DeleteRecords/retention (they free space): the
            # file keeps entries below the log start, which the next open truncates
            # again, and the next change writes them all
            if e.errno not in DISK_FULL_ERRNOS:
                raise

    def clear(self) -> None:
        self._entries = []
        self._changed()

    def _check(self) -> None:
        for a, b in zip(self._entries, self._entries[1:]):
            assert a.epoch < b.epoch and a.start_offset <= b.start_offset, (a, b)

    def _changed(self) -> None:
        self._check()
        if self._file:
            self._file.write(self._entries)
