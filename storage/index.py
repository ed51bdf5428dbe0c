"""Sparse, memory-mapped segment indexes: `.index` (offset) and `.timeindex` (time).

On-disk formats (Kafka's, big-endian, no header, one fixed-size entry after another):

    <base>.index      8 bytes per entry:  relative_offset int32 | position int32
    <base>.timeindex 12 bytes per entry:  timestamp int64      | relative_offset int32

`relative_offset = offset - base_offset` of the segment the index belongs to.

Who writes what: only the worker that owns the partition, through its `LogSegment`.
An index is *sparse*: the segment adds an entry once more than `index.interval.bytes`
of batches were appended since the last entry, so a lookup returns a lower bound
and the caller scans batch headers forward from there (at most about one interval).

* Offset index entry: (last offset of an append, file position where that append
  starts).  `lookup(t)` gives the largest entry with offset <= t: the batch holding
  `t` starts at or after that position.
* Time index entry: (largest timestamp so far in the segment, the last offset of the
  batch that carried it), appended only when the timestamp grows. `lookup(ts)` gives
  the largest entry with timestamp <= ts; every batch before its offset has a smaller
  max timestamp, so a scan for the first batch with max timestamp >= ts starts there.

Lifecycle: the file of the active segment is preallocated to `segment.index.bytes`
(rounded down to whole entries) and mmap'd for reading; entries are written with
`pwrite` (the first write fault in a new file's shared map costs milliseconds on this
project's machines, a pwrite microseconds: storage/segment.py has the figures); when the segment rolls or the log
closes it is trimmed to the bytes in use (`trim_to_valid_size`), so an inactive index
file's length says how many entries it holds.  After a crash the active index may
carry a preallocated zero tail; `open` drops trailing all-zero entries (no real entry
is all zeros: the first entry is only written after `index.interval.bytes`, so its
relative offset is > 0) and `sanity_check` rejects anything else that is not
monotonic at the ends, in which case the segment rebuilds the index from its batches.

Search: Kafka's "warm section first" binary search.  Lookups from fetches at the
tail of the log touch only the last `WARM_BYTES` of the index, so those pages stay
in the page cache; a search first probes that section and only falls back to the
whole array when the target is older.
"""
from __future__ import annotations

import errno
import mmap
import os
import struct
import sys
from array import array

from storage.errors import InvalidOffsetError, StorageError

WARM_BYTES = 8192
READ_CHUNK = 64 * 1024       # bytes per pread when counting the entries of a file
INT32_MAX = 2**31 - 1


class CorruptIndexError(StorageError):
    """An index file failed its sanity check; the segment rebuilds it (never on the wire)."""


class IndexFullError(StorageError):
    """Append to a full index; the log rolls before this can happen."""


class _MmapIndex:
    """Shared base: the file, the map, the entry count and the search.

    Subclasses define `ENTRY_SIZE`, `_key(n)` (the sort key of entry n) and the
    (de)serialisation of entries. Not thread-safe; one owner.
    """

    ENTRY_SIZE = 0

    def __init__(self, path: str, base_offset: int, max_index_size: int = 10 * 1024 * 1024,
                 writable: bool = True):
        self.path = path
        self.base_offset = base_offset
        self.writable = writable
        self._mm = None
        self._entries = 0
        self._max_entries = 0
        self._max_index_size = max_index_size
        exists = os.path.exists(path) and os.path.getsize(path) > 0
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        self._fd = os.open(path, flags, 0o644)
        length = os.fstat(self._fd).st_size
        if not exists and writable:
            length = self._round(max_index_size)
            os.ftruncate(self._fd, length)
        self._map(length)
        self._entries = self._count_entries(length) if exists else 0

    # -- geometry ---------------------------------------------------------------------

    def _round(self, n: int) -> int:
        return max(0, n - n % self.ENTRY_SIZE)

    def _map(self, length: int) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._length = length
        self._max_entries = length // self.ENTRY_SIZE
        if length > 0:
            self._mm = mmap.mmap(self._fd, length, access=mmap.ACCESS_READ)

    def _count_entries(self, length: int) -> int:
        """Entries in an existing file: whole entries, minus a zero tail left by a crash.

        Read with pread, only where the file has data (SEEK_DATA/SEEK_HOLE), never
        through the map: the preallocated tail of an active index is a hole, and
        reading a hole through a shared map allocates a page for it (on tmpfs that is
        RAM: 20 MiB per partition, SIGBUS once tmpfs is full)."""
        n = -(-self._data_end(length) // self.ENTRY_SIZE)
        n = min(n, length // self.ENTRY_SIZE)
        chunk = max(1, READ_CHUNK // self.ENTRY_SIZE)
        while n > 0:
            lo = max(0, n - chunk)
            data = os.pread(self._fd, (n - lo) * self.ENTRY_SIZE, lo * self.ENTRY_SIZE)
            used = len(data.rstrip(b"\0"))
            if used:
                return lo + (used - 1) // self.ENTRY_SIZE + 1
            n = lo
        return 0

    def _data_end(self, length: int) -> int:
        """The end of the last data region of the file (holes after it are skipped);
        the whole length where the file system cannot tell."""
        end = pos = 0
        try:
            while pos < length:
                start = os.lseek(self._fd, pos, os.SEEK_DATA)
                pos = os.lseek(self._fd, start, os.SEEK_HOLE)
                end = min(pos, length)
        except OSError as e:
            if e.errno != errno.ENXIO:          # ENXIO: no data after pos
                return length
        return end

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def size_bytes(self) -> int:
        return self._entries * self.ENTRY_SIZE

    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    # -- search -----------------------------------------------------------------------

    def _key(self, n: int) -> int:
        raise NotImplementedError

    def _largest_lower_bound_slot(self, target: int, key=None) -> int:
        """Slot of the largest entry whose key <= target, or -1."""
        key = key or self._key
        n = self._entries
        if n == 0 or key(0) > target:
            return -1
        warm_entries = WARM_BYTES // self.ENTRY_SIZE
        first_hot = max(0, n - 1 - warm_entries)
        if key(first_hot) <= target:
            return self._binary_search(target, first_hot, n - 1, key)
        return self._binary_search(target, 0, first_hot, key)

    @staticmethod
    def _binary_search(target: int, lo: int, hi: int, key) -> int:
        # invariant: key(lo) <= target; answer in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if key(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # -- maintenance ------------------------------------------------------------------

    def _truncate_to_entries(self, n: int) -> None:
        assert 0 <= n <= self._entries
        if self._mm is not None and self.writable and n < self._entries:
            # zero the dropped entries so that a crash cannot resurrect them
            start, end = n * self.ENTRY_SIZE, self._entries * self.ENTRY_SIZE
            os.pwrite(self._fd, bytes(end - start), start)
        self._entries = n

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first `n` entries (an undone append); the dropped slots are zeroed."""
        self._truncate_to_entries(n)

    def _truncate_to_offset(self, offset: int, field: int, key=None) -> None:
        """Remove every entry with offset >= `offset`; `field` is where an entry holds
        its offset, `key` the slot's offset for the search (the entries' order)."""
        slot = self._largest_lower_bound_slot(offset, key)
        if slot < 0:
            self._truncate_to_entries(0)
        elif self.entry(slot)[field] == offset:
            self._truncate_to_entries(slot)
        else:
            self._truncate_to_entries(slot + 1)

    def _put(self, entry: bytes) -> None:
        """Write the next entry (pwrite, not through the map: see the module docstring)."""
        os.pwrite(self._fd, entry, self._entries * self.ENTRY_SIZE)
        self._entries += 1

    def reset(self) -> None:
        """Drop every entry and preallocate again (before a rebuild)."""
        self._truncate_to_entries(0)
        self.resize(self._max_index_size)

    def resize(self, new_size: int) -> bool:
        """Set the file (and map) length, keeping the entries; False when unchanged."""
        new_length = max(self._round(new_size), self.size_bytes)
        if new_length == self._length:
            return False
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        os.ftruncate(self._fd, new_length)
        self._map(new_length)
        return True

    def trim_to_valid_size(self) -> None:
        self.resize(self.size_bytes)

    def flush(self) -> None:
        if self.writable:           # entries are pwrites: nothing to msync
            os.fsync(self._fd)

    def close(self, trim: bool = True) -> None:
        if self._fd < 0:
            return
        if trim and self.writable:
            self.trim_to_valid_size()
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        os.close(self._fd)
        self._fd = -1

    def delete(self) -> None:
        self.close(trim=False)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def check_all_monotonic(self) -> None:
        """Full O(n) check (tests and `dump-log`): keys strictly increasing, values
        non-decreasing (`entry(n)` is (key, value))."""
        prev = (self._KEY_BEFORE_FIRST, -1)
        for n in range(self._entries):
            cur = self.entry(n)
            if cur[0] <= prev[0] or cur[1] < prev[1]:
                raise CorruptIndexError(f"{self.path}: entry {n} {cur} after {prev}")
            prev = cur

    def all_entries(self) -> list[tuple[int, int]]:
        return [self.entry(n) for n in range(self._entries)]

    def _check_room(self, skip_full_check: bool = False) -> None:
        if not self.writable:
            raise StorageError(f"index {self.path} is read-only")
        if self._entries >= self._max_entries or (not skip_full_check and self.is_full()):
            raise IndexFullError(f"index {self.path} is full ({self._entries} entries)")


class OffsetIndex(_MmapIndex):
    """`.index`: relative offset int32 + position int32 per entry."""

    ENTRY_SIZE = 8
    _S = struct.Struct(">ii")
    _KEY_BEFORE_FIRST = -1            # offsets

    def entry(self, n: int) -> tuple[int, int]:
        """(absolute offset, position) of entry n."""
        rel, pos = self._S.unpack_from(self._mm, n * 8)
        return self.base_offset + rel, pos

    def _key(self, n: int) -> int:
        return self.base_offset + struct.unpack_from(">i", self._mm, n * 8)[0]

    def _pos_key(self, n: int) -> int:
        return struct.unpack_from(">i", self._mm, n * 8 + 4)[0]

    @property
    def last_offset(self) -> int:
        return self.entry(self._entries - 1)[0] if self._entries else self.base_offset

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest (offset, position) with offset <= target, else (base_offset, 0)."""
        slot = self._largest_lower_bound_slot(target_offset)
        return (self.base_offset, 0) if slot < 0 else self.entry(slot)

    def lookup_by_position(self, target_position: int) -> tuple[int, int]:
        """Largest (offset, position) with position <= target (positions grow with offsets)."""
        slot = self._largest_lower_bound_slot(target_position, self._pos_key)
        return (self.base_offset, 0) if slot < 0 else self.entry(slot)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise InvalidOffsetError(f"offset {offset} outside index base {self.base_offset}")
        if self._entries:
            last_off, last_pos = self.entry(self._entries - 1)
            if offset <= last_off or position < last_pos:
                raise InvalidOffsetError(
                    f"index entry ({offset}, {position}) not after ({last_off}, {last_pos})"
                    f" in {self.path}")
        self._check_room()
        self._put(self._S.pack(rel, position))

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset`."""
        self._truncate_to_offset(offset, 0)

    def sanity_check(self, log_size: int | None = None) -> None:
        if self._length % self.ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: length {self._length} not a multiple of 8")
        if not self._entries:
            return
        first_off, _ = self.entry(0)
        last_off, last_pos = self.entry(self._entries - 1)
        if last_off < first_off or (self._entries > 1 and
                                    self.entry(self._entries - 2)[0] >= last_off):
            raise CorruptIndexError(f"{self.path}: last entry {last_off} not increasing")
        if log_size is not None and last_pos >= max(log_size, 1):
            raise CorruptIndexError(f"{self.path}: position {last_pos} beyond log size {log_size}")

    def check_monotonic_fast(self, log_size: int | None = None) -> None:
        """Every entry increasing, at C speed (unclean opens check flushed segments)."""
        n = self._entries
        if n == 0:
            return
        a = array("i")
        a.frombytes(self._mm[:n * 8])
        if sys.byteorder == "little":
            a.byteswap()
        rel, pos = a[0::2], a[1::2]
        if (rel[0] < 0 or sorted(rel) != list(rel) or len(set(rel)) != n
                or sorted(pos) != list(pos) or pos[0] < 0
                or (log_size is not None and pos[-1] >= max(log_size, 1))):
            raise CorruptIndexError(f"{self.path}: entries not increasing")


class TimeIndex(_MmapIndex):
    """`.timeindex`: timestamp int64 + relative offset int32 per entry.

    `is_full` keeps one slot free, as Kafka does, for the entry that records the
    segment's final max timestamp when it rolls (`maybe_append(..., skip_full_check=True)`).
    """

    ENTRY_SIZE = 12
    _S = struct.Struct(">qi")
    _KEY_BEFORE_FIRST = -(2**63)      # timestamps

    def entry(self, n: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of entry n."""
        ts, rel = self._S.unpack_from(self._mm, n * 12)
        return ts, self.base_offset + rel

    def _key(self, n: int) -> int:
        return struct.unpack_from(">q", self._mm, n * 12)[0]

    def _off_key(self, n: int) -> int:
        return self.base_offset + struct.unpack_from(">i", self._mm, n * 12 + 8)[0]

    def is_full(self) -> bool:
        return self._entries >= self._max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset)."""
        return self.entry(self._entries - 1) if self._entries else (-1, self.base_offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """Largest (timestamp, offset) with timestamp <= target, else (-1, base_offset)."""
        slot = self._largest_lower_bound_slot(target_timestamp)
        return (-1, self.base_offset) if slot < 0 else self.entry(slot)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append when `timestamp` is larger than the last entry's; True if appended."""
        last_ts, last_off = self.last_entry
        if self._entries and offset < last_off:
            raise InvalidOffsetError(f"time index offset {offset} < last {last_off} in {self.path}")
        if self._entries and timestamp < last_ts:
            raise InvalidOffsetError(f"time index timestamp {timestamp} < last {last_ts}")
        if self._entries and timestamp == last_ts:
            return False
        if not 0 <= offset - self.base_offset <= INT32_MAX:
            raise InvalidOffsetError(f"offset {offset} outside index base {self.base_offset}")
        if self._entries and offset == last_off:
            # same batch, larger timestamp (a roll re-appending): replace the entry
            self._entries -= 1
        self._check_room(skip_full_check)
        self._put(self._S.pack(timestamp, offset - self.base_offset))
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset`."""
        self._truncate_to_offset(offset, 1, self._off_key)

    def sanity_check(self, log_size: int | None = None) -> None:
        if self._length % self.ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: length {self._length} not a multiple of 12")
        if self._entries > 1:
            ts0, off0 = self.entry(self._entries - 2)
            ts1, off1 = self.entry(self._entries - 1)
            if ts1 <= ts0 or off1 < off0:
                raise CorruptIndexError(f"{self.path}: last entry not increasing")
        if self._entries and (self.entry(0)[1] < self.base_offset
                              or self.entry(0)[0] > self.last_entry[0]):
            raise CorruptIndexError(f"{self.path}: first entry after last, or before base")

    def check_monotonic_fast(self, log_size: int | None = None) -> None:
        n = self._entries
        if n == 0:
            return
        entries = list(struct.iter_unpack(">qi", self._mm[:n * 12]))
        ts = [e[0] for e in entries]
        rel = [e[1] for e in entries]
        if rel[0] < 0 or sorted(ts) != ts or len(set(ts)) != n or sorted(rel) != rel:
            raise CorruptIndexError(f"{self.path}: entries not increasing")
