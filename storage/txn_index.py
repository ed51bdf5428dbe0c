"""The transaction index of one segment: `<base>.txnindex`, aborted transactions.

Kafka's format (TransactionIndex / AbortedTxn), big-endian, fixed 34-byte entries,
appended in the order the ABORT markers were written to the log::

    version           int16   0
    producer_id       int64
    first_offset      int64   first offset of the aborted transaction
    last_offset       int64   offset of its ABORT control batch (marker)
    last_stable_offset int64  the partition's LSO right after the marker was written

An entry lives in the segment that holds its ABORT marker, so `last_offset` increases
from entry to entry; its `first_offset` may lie in an earlier segment.  Only aborted
transactions are indexed (read_committed consumers drop the data of these producers
between `first_offset` and the marker).

Who writes: the log's owner only (storage/log.py), on the append of an ABORT marker
(leader and follower paths), on recovery (rebuilt from the replayed batches), on
truncation (`truncate_to`), by the cleaner (the cleaned segment gets the entries of
the segments it replaces).  The file is small; its entries are kept in memory and each
append is one `os.write` at the end (no preallocation, no mmap).  A short tail (a torn
write) is cut on open; an entry with a version other than 0 makes the file unreadable
for the log, which then rebuilds it from the batches.
"""
from __future__ import annotations

import os
import struct
from typing import NamedTuple

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size
CURRENT_VERSION = 0
assert ENTRY_SIZE == 34


class CorruptTxnIndexError(ValueError):
    pass


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset,
                          self.last_offset, self.last_stable_offset)


class TxnSearchResult(NamedTuple):
    aborted: list           # [AbortedTxn]
    complete: bool          # no later segment can hold a txn below the upper bound


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """Entries of a txnindex file's bytes; a partial tail is ignored.

    CorruptTxnIndexError on an unknown version or offsets that make no sense
    (first > last, last offsets going backwards)."""
    out: list[AbortedTxn] = []
    n = len(data) // ENTRY_SIZE
    prev_last = -1
    for i in range(n):
        version, pid, first, last, lso = ENTRY.unpack_from(data, i * ENTRY_SIZE)
        if version != CURRENT_VERSION:
            raise CorruptTxnIndexError(f"txnindex entry {i}: version {version}")
        if first < 0 or last < first or last <= prev_last:
            raise CorruptTxnIndexError(f"txnindex entry {i}: offsets {first}..{last}"
                                       f" after {prev_last}")
        prev_last = last
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TransactionIndex:
    """The `.txnindex` of one segment. The file is created on the first append."""

    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self.needs_rebuild = False
        self._fd = -1
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        try:
            self.entries = decode_entries(data)
        except CorruptTxnIndexError:
            self.entries = []
            self.needs_rebuild = True
            self._rewrite()
            return
        if len(data) % ENTRY_SIZE:
            self._rewrite()             # cut the torn tail

    def _open(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _rewrite(self) -> None:
        self.close()
        if not self.entries:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"".join(e.encode() for e in self.entries))
        finally:
            os.close(fd)

    # -- writing ----------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Add the entry of an ABORT marker.  The log is the authority: entries at or
        past this marker's offset can only be stale (a log cut that the index missed),
        so they are dropped first rather than refusing an append whose bytes are
        already in the segment."""
        if txn.first_offset > txn.last_offset:
            raise ValueError(f"aborted txn {txn}: first offset after last")
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            self.truncate_to(txn.last_offset)
        fd = self._open()
        try:
            os.write(fd, txn.encode())
        except OSError:
            os.ftruncate(fd, len(self.entries) * ENTRY_SIZE)   # no torn entry left behind
            raise
        self.entries.append(txn)

    @property
    def entry_count(self) -> int:
        return len(self.entries)

    def truncate_to_count(self, n: int) -> None:
        """Keep the first `n` entries (an undone append): the file is cut to them."""
        if n < len(self.entries):
            del self.entries[n:]
            os.ftruncate(self._open(), n * ENTRY_SIZE)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker (last offset) is at or after `offset`."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._rewrite()

    def reset(self) -> None:
        """Empty the index (recovery rebuilds it)."""
        self.entries = []
        self.needs_rebuild = False
        self._rewrite()

    # -- reading ----------------------------------------------------------------------

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnSearchResult:
        """Kafka's collectAbortedTxns: the aborted transactions overlapping
        [fetch_offset, upper_bound_offset); `complete` once an entry's LSO reaches the
        upper bound (no transaction below it can end in a later segment)."""
        out = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                out.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return TxnSearchResult(out, True)
        return TxnSearchResult(out, False)

    # -- life cycle -------------------------------------------------------------------

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename(self, new_path: str) -> None:
        """The segment renamed the file (suffix change); reopen by the new path."""
        self.close()
        self.path = new_path

    def __len__(self):
        return len(self.entries)
