"""One log segment: `<base>.log` + `<base>.index` + `<base>.timeindex` (+ `.txnindex`).

Files (base = the first offset the segment may hold, 20 decimal digits, zero padded):

    00000000000000012345.log        record batches (v2), back to back, as on the wire
    00000000000000012345.index      offset index, see storage/index.py
    00000000000000012345.timeindex  time index, see storage/index.py
    00000000000000012345.txnindex   aborted transactions, see storage/txn_index.py (only
                                    created once the segment holds an ABORT marker)

Suffixes during life-cycle changes: `.deleted` (retention, deleted after
`file.delete.delay.ms`), `.cleaned` / `.swap` (compaction, see storage/cleaner.py).

Who writes: only the owning worker, through this class.  Other processes read the
`.log` file by path with `sendfile`, bounded by the `FileSlice`s the owner handed out.

Active segment: with `preallocate` (Kafka's topic config, `log.preallocate`; default
false) the `.log` file is sized to `capacity` (`ftruncate`, normally `segment.bytes`)
when it becomes active, else it grows with the appends (plus the bounded reservation
below), so its apparent size is about its data; either way it is mmap'd for reading at
`capacity`; an append is one `pwrite` at `size`, into the same
page-cache pages the map shows, and reads (header scans, recovery, down-conversion)
go through the map.  Why not a copy into a writable map: on this project's machines
(Linux 6.18, ext4) the first write fault in a newly created file's shared map costs
2-20 ms (the first `pwrite` 5-15 us), so a worker that creates or rolls many
segments at once (a 100-partition topic's first records) stalled its event loop for
seconds: 100 new partitions x 50 appends took 0.60-0.74 s through the map and 0.08 s
with pwrite (indexes too, storage/index.py).  Large appends also win (1 MiB: 1,013
MB/s through the map, 1,819 with pwrite: large page-cache folios); small appends to
one long-lived segment lose a little (A/B interleaved, 64 MiB of appends: 1 KiB 0.27x
vs 0.33x of raw writes, 16 KiB 0.73x vs 0.80x), a price paid for the absence of
multi-second stalls.  Bytes past `size` are zeros (or, after a crash, a torn tail);
`size` is the source of truth in memory.  When the segment rolls or the log closes,
the file and the indexes are trimmed to their real size, so an inactive segment's
file length is its size.

Reservation ahead.  Writing past the end (or into the sparse file `preallocate`
makes) allocates disk blocks on every first write to a page.  So appends reserve
real blocks ahead of `size` with `posix_fallocate`, as much as the segment already
holds (at least `PREALLOCATE_MIN_STEP`, at most `PREALLOCATE_STEP`) at a time: a
partition that got one small append reserves 256 KiB, not the whole segment (1 GiB of
disk per partition up front otherwise).  Without `preallocate` this also sets the
file's length to the reserved end: at most `size` + 16 MiB (and at most twice `size`
past 256 KiB), cut back at roll and close.  Measured (same machine, A/B
interleaved): +8% for 16 KiB and 1 MiB appends through the map (823 -> 890, 1183 ->
1275 MB/s), 2457 -> 2937 MB/s for plain 1 MiB pwrites.  The reserved blocks read as
zeros, so recovery cuts them like any zero tail, and the trim at roll/close frees
them.  A filesystem that cannot (EOPNOTSUPP, EINVAL, ...) leaves the segment sparse,
silently; a full disk (ENOSPC even for the bytes of this append) refuses the append
with KAFKA_STORAGE_ERROR.  The `.index` / `.timeindex` stay sparse: with
`index.interval.bytes`=4096 one index page is first written per ~2 MiB of log, too
rare to be worth 2 x `segment.index.bytes` of reserved disk per partition.

Recovery (`recover`) walks the batches from position 0: framing, magic 2, CRC-32C,
offsets strictly increasing and within the int32 relative range; the first batch that
fails ends the segment: the file is cut there (dropping a torn tail, garbage and the
preallocated zeros) and both indexes are rebuilt on the way.

Offsets inside a segment: `translate_offset(o)` finds the batch holding `o` by an index
lookup (largest indexed offset <= o) plus a scan of batch headers (at most about
`index.interval.bytes`).  Reads return whole batches only.
"""
from __future__ import annotations

import errno
import gc
import mmap
import os
import struct
from typing import Iterator, NamedTuple

from storage.batch import HEADER_SIZE, LOG_OVERHEAD, MAGIC, RecordBatch
from storage.errors import (InvalidOffsetError, KafkaStorageError,
                            LogSegmentOffsetOverflowError, StorageError)
from storage.index import INT32_MAX, CorruptIndexError, OffsetIndex, TimeIndex
from storage.slices import FileSlice
from storage.txn_index import TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

_HDR = struct.Struct(">qi")               # base_offset, batch_length
_LOD = struct.Struct(">i")                # last_offset_delta at byte 23
_MAXTS = struct.Struct(">q")              # max_timestamp at byte 35
PREALLOCATE_STEP = 16 * 1024 * 1024       # most disk reserved ahead of the active end
PREALLOCATE_MIN_STEP = 256 * 1024         # least (a segment's first appends)


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_base_offset(name: str) -> int | None:
    """Base offset from a segment file name, or None when it is not one."""
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def _close_map(mm) -> None:
    """Close an mmap; a lingering memoryview (BufferError) gets one gc pass, then is left."""
    if mm is None:
        return
    try:
        mm.close()
    except BufferError:
        gc.collect()
        try:
            mm.close()
        except BufferError:
            pass                   # closed by its finaliser once the last view is gone


class BatchPosition(NamedTuple):
    position: int
    base_offset: int
    last_offset: int
    size: int


class LogSegment:
    """A segment; `active=True` maps it writable with room for `capacity` bytes."""

    def __init__(self, dir_path: str, base_offset: int, *, capacity: int,
                 index_interval_bytes: int = 4096, max_index_size: int = 10 * 1024 * 1024,
                 created_ms: int = 0, active: bool = False, suffix: str = "",
                 preallocate: bool = True):
        self.dir = dir_path
        self.preallocate = preallocate
        self.base_offset = base_offset
        self.suffix = suffix
        self.capacity = capacity
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.created_ms = created_ms
        self.log_path = os.path.join(dir_path, file_name(base_offset, LOG_SUFFIX) + suffix)
        self.index_path = os.path.join(dir_path, file_name(base_offset, INDEX_SUFFIX) + suffix)
        self.time_index_path = os.path.join(dir_path,
                                            file_name(base_offset, TIME_INDEX_SUFFIX) + suffix)
        self.txn_index_path = os.path.join(dir_path,
                                           file_name(base_offset, TXN_INDEX_SUFFIX) + suffix)
        existed = os.path.exists(self.log_path)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        st = os.fstat(self.fd)
        self.size = st.st_size if existed else 0
        self.file_id = (st.st_dev, st.st_ino)    # in every FileSlice (storage/slices.py)
        self._amm = None            # map of the whole capacity (active; written by pwrite)
        self._allocated = 0         # active: file bytes with disk blocks reserved
        self._written_to = self.size  # end of the bytes pwritten (> size while an append runs)
        self._rmm = None            # read-only map (inactive), of `_rmm_len` bytes
        self._rmm_len = 0
        # the last append when it was one batch: where a consumer at the end of the
        # log reads next, found without the index and the walk of batch headers
        self._tail: BatchPosition | None = None
        self.active = False
        self.index_needs_rebuild = False
        self.index, self.time_index = self._open_indexes()
        self.txn_index = TransactionIndex(self.txn_index_path, base_offset)
        self.bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = base_offset
        self._rolling_ts: int | None = None
        if existed and not self.index_needs_rebuild:
            self._reload_max_timestamp()
        if active:
            self.make_active(capacity)

    # -- opening ----------------------------------------------------------------------

    def _open_indexes(self):
        """Open both indexes; a missing or failing one is flagged for rebuild."""
        try:
            missing = not (os.path.exists(self.index_path) and os.path.exists(self.time_index_path))
            index = OffsetIndex(self.index_path, self.base_offset, self.max_index_size)
            time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size)
        except (OSError, ValueError) as e:
            raise StorageError(f"cannot open indexes of {self.log_path}: {e}") from e
        try:
            index.sanity_check(self.size)
            time_index.sanity_check()
            if index.entries and index.last_offset > self.base_offset + INT32_MAX:
                raise CorruptIndexError("index offset out of range")
            self.index_needs_rebuild = missing and self.size > 0
        except CorruptIndexError:
            self.index_needs_rebuild = True
        if self.index_needs_rebuild:
            index.reset()
            time_index.reset()
        return index, time_index

    def make_active(self, capacity: int) -> None:
        """Accept appends up to `capacity` (at least `size`): with `preallocate` the
        file is sized to it, else it grows with the appends; mapped for reading."""
        self._drop_read_map()
        self.capacity = max(capacity, self.size)
        length = os.fstat(self.fd).st_size
        if self.preallocate and length != self.capacity:
            os.ftruncate(self.fd, self.capacity)
            length = self.capacity
        _close_map(self._amm)
        self._amm = None
        if self.capacity:
            if length < self.capacity:
                # mmap refuses a length past the end of the file, so the file is grown
                # for the call and cut back: the map stays valid past the end, and only
                # [0, size) is ever read (no blocks are allocated either way)
                os.ftruncate(self.fd, self.capacity)
                try:
                    self._amm = mmap.mmap(self.fd, self.capacity, access=mmap.ACCESS_READ)
                finally:
                    os.ftruncate(self.fd, length)
            else:
                self._amm = mmap.mmap(self.fd, self.capacity, access=mmap.ACCESS_READ)
        self._allocated = self.size     # blocks below size hold data; reserve on append
        self.index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        self.active = True

    def on_become_inactive(self) -> None:
        """Roll: record the final max timestamp, trim the file and the indexes, unmap."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp,
                                         skip_full_check=True)
        self.index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        _close_map(self._amm)
        self._amm = None
        os.ftruncate(self.fd, self.size)        # also frees the blocks reserved ahead
        self.capacity = self._allocated = self.size
        self.active = False

    # -- reading bytes ----------------------------------------------------------------

    def _map(self):
        """A map covering [0, size): the write map when active, else a read-only one."""
        if self._amm is not None:
            return self._amm
        if self.size == 0:
            return None
        if self._rmm is None or self._rmm_len != self.size:
            _close_map(self._rmm)
            self._rmm = mmap.mmap(self.fd, self.size, access=mmap.ACCESS_READ)
            self._rmm_len = self.size
        return self._rmm

    def _drop_read_map(self) -> None:
        _close_map(self._rmm)
        self._rmm = None
        self._rmm_len = 0

    def read_bytes(self, position: int, length: int) -> bytes:
        mm = self._map()
        return b"" if mm is None else mm[position:min(position + length, self.size)]

    def batch_at(self, position: int) -> BatchPosition | None:
        """Header facts of the batch at `position` (inside [0, size)), or None."""
        if position + HEADER_SIZE > self.size:
            return None
        mm = self._map()
        base, length = _HDR.unpack_from(mm, position)
        lod = _LOD.unpack_from(mm, position + 23)[0]
        return BatchPosition(position, base, base + lod, length + LOG_OVERHEAD)

    def iter_positions(self, start: int = 0, end: int | None = None) -> Iterator[BatchPosition]:
        end = self.size if end is None else min(end, self.size)
        pos = start
        while pos < end:
            b = self.batch_at(pos)
            if b is None or b.size < HEADER_SIZE or pos + b.size > end:
                return
            yield b
            pos += b.size

    def iter_batches(self, start: int = 0, end: int | None = None) -> Iterator[RecordBatch]:
        """RecordBatch views over the map (do not keep them past the next log change)."""
        mm = self._map()
        if mm is None:
            return
        view = memoryview(mm)
        try:
            for b in self.iter_positions(start, end):
                yield RecordBatch(view[b.position:b.position + b.size])
        finally:
            view.release()

    def max_timestamp_at(self, position: int) -> int:
        return _MAXTS.unpack_from(self._map(), position + 35)[0]

    # -- offsets ----------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchPosition | None:
        """The first batch at or after `start_position` whose last offset >= `offset`."""
        t = self._tail
        if t is not None and t.base_offset <= offset <= t.last_offset \
                and t.position >= start_position:
            return t        # offsets grow: no earlier batch reaches `offset`
        _, pos = self.index.lookup(offset)
        for b in self.iter_positions(max(pos, start_position)):
            if b.last_offset >= offset:
                return b
        return None

    def read_next_offset(self) -> int:
        """One past the last offset in the segment (base offset when empty)."""
        _, pos = self.index.lookup(2**63 - 1)
        last = None
        for last in self.iter_positions(pos):
            pass
        return last.last_offset + 1 if last else self.base_offset

    @property
    def first_batch_timestamp(self) -> int | None:
        if self._rolling_ts is None and self.size >= HEADER_SIZE:
            self._rolling_ts = self.max_timestamp_at(0)
        return self._rolling_ts

    def _reload_max_timestamp(self) -> None:
        """Max timestamp: the time index's last entry, then the batches after the last
        offset-index point (their timestamps are not in the time index yet)."""
        ts, off = self.time_index.last_entry
        self.max_timestamp_so_far, self.offset_of_max_timestamp = ts, off
        _, pos = self.index.lookup(2**63 - 1)
        for b in self.iter_positions(pos):
            mts = self.max_timestamp_at(b.position)
            if mts > self.max_timestamp_so_far:
                self.max_timestamp_so_far, self.offset_of_max_timestamp = mts, b.last_offset

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when no batch has one (Kafka's rule)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return int(os.stat(self.log_path).st_mtime * 1000)

    # -- appending --------------------------------------------------------------------

    def can_convert_to_relative(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def append(self, largest_offset: int, largest_timestamp: int,
               offset_of_max_timestamp: int, records) -> tuple | None:
        """Copy `records` (whole batches with offsets assigned) to the end of the file.

        All or nothing: an OSError at any step is undone (`rollback`) and raised as
        KafkaStorageError.  Returns the `mark` taken before, with which the log undoes
        the append when one of its own later steps fails."""
        n = len(records)
        if n == 0:
            return None
        if not self.active:
            raise StorageError(f"append to inactive segment {self.log_path}")
        if not 0 <= largest_offset - self.base_offset <= INT32_MAX:   # inlined: hot path
            raise LogSegmentOffsetOverflowError(
                f"offset {largest_offset} does not fit segment {self.base_offset}")
        position = self.size
        if position + n > self.capacity:
            raise StorageError(f"segment {self.log_path} full: {position} + {n} > {self.capacity}")
        mark = self.mark()
        try:
            if position + n > self._allocated:
                self._preallocate(position + n)
            if position == 0:
                self._rolling_ts = largest_timestamp if self._rolling_ts is None \
                    else self._rolling_ts
            self._pwrite(records, position)
            self.size = position + n
            tail = self.batch_at(position)
            self._tail = tail if tail is not None and tail.size == n else None
            if largest_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = largest_timestamp
                self.offset_of_max_timestamp = offset_of_max_timestamp
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self.index.append(largest_offset, position)
                self.time_index.maybe_append(self.max_timestamp_so_far,
                                             self.offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += n
        except (OSError, StorageError) as e:
            self.rollback(mark)             # raises itself when the undo fails
            if isinstance(e, OSError):
                raise KafkaStorageError.from_os_error(f"cannot append to {self.log_path}",
                                                      e) from e
            raise                           # an index refused its entry: nothing kept
        return mark

    def _pwrite(self, records, position: int) -> None:
        view = memoryview(records)
        while view:                     # a regular file writes all unless the disk fails
            written = os.pwrite(self.fd, view, position)
            view, position = view[written:], position + written
            self._written_to = position     # appends only go forward from size

    # -- undoing an append (storage/log.py: an append is all or nothing) ------------

    def mark(self) -> tuple:
        """The state an append changes; `rollback(mark)` restores it."""
        return (self.size, self.max_timestamp_so_far, self.offset_of_max_timestamp,
                self.bytes_since_last_index_entry, self._rolling_ts, self.index._entries,
                self.time_index._entries, len(self.txn_index.entries))

    def rollback(self, mark: tuple) -> None:
        """Undo every append since `mark`: in memory, and on disk so that neither a
        later append nor a recovery after a crash sees the undone bytes.

        Only frees space (ftruncate down and up again: the data past the old end is a
        hole again; the index slots written are zeroed in pages that were just
        allocated), so it works on a full disk.  An undo that fails (EIO, EROFS) leaves
        files that do not match the state: KafkaStorageError with
        `log_consistent=False` (the log goes offline).
        """
        (size, max_ts, max_ts_off, since_index, rolling_ts, n_index, n_time,
         n_txn) = mark
        self._tail = None
        self.size, self.max_timestamp_so_far, self.offset_of_max_timestamp = size, max_ts, \
            max_ts_off
        self.bytes_since_last_index_entry, self._rolling_ts = since_index, rolling_ts
        try:
            if self.index.entries > n_index:
                self.index.truncate_to_entries(n_index)
            if self.time_index.entries > n_time:
                self.time_index.truncate_to_entries(n_time)
            if self.txn_index.entry_count > n_txn:
                self.txn_index.truncate_to_count(n_txn)
            if self._written_to > size:
                os.ftruncate(self.fd, size)
                if self.preallocate and self.capacity > size:
                    os.ftruncate(self.fd, self.capacity)
                self._allocated = min(self._allocated, size)
            self._written_to = size
        except OSError as e:
            raise KafkaStorageError(f"cannot undo a failed append to {self.log_path}: {e}",
                                    e.errno, log_consistent=False) from e

    def _preallocate(self, end: int) -> None:
        """Reserve disk blocks up to at least `end`, a step ahead (see the docstring)."""
        step = min(PREALLOCATE_STEP, max(PREALLOCATE_MIN_STEP, self.size))
        ahead = min(self.capacity, max(end, self._allocated + step))
        for target in (ahead, end):
            try:
                os.posix_fallocate(self.fd, self._allocated, target - self._allocated)
                self._allocated = target
                return
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    self._allocated = self.capacity     # unsupported here: stay sparse
                    return
        raise OSError(errno.ENOSPC, f"no space left on the device of {self.log_path}"
                                    f" for {end - self.size} bytes")

    def should_roll(self, *, messages_size: int, max_timestamp_in_messages: int,
                    max_offset_in_messages: int, now_ms: int, segment_bytes: int,
                    segment_ms: int, roll_jitter_ms: int = 0) -> bool:
        """Kafka's roll conditions for the next append."""
        size = self.size
        return (size + messages_size > min(segment_bytes, self.capacity)
                or (size > 0 and self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
                    > segment_ms - roll_jitter_ms)
                or self.index.is_full() or self.time_index.is_full()
                or not 0 <= max_offset_in_messages - self.base_offset <= INT32_MAX)

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        first = self.first_batch_timestamp
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    # -- fetch and time lookups -------------------------------------------------------

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_batch: bool = True) -> tuple[FileSlice, int] | None:
        """Whole batches from the one holding `start_offset`: (slice, first batch base).

        At most `max_size` bytes unless `min_one_batch` and the first batch is larger;
        nothing at or past `max_position` (a batch boundary).  None when there is no
        batch to return.
        """
        first = self.translate_offset(start_offset)
        limit = self.size if max_position is None else min(self.size, max_position)
        if first is None or first.position >= limit:
            return None
        start = first.position
        target = start + max(max_size, 0)
        if target >= limit:
            end = limit
        else:
            _, pos = self.index.lookup_by_position(target)
            end = max(pos, start)           # index positions are batch starts
            for b in self.iter_positions(end, limit):
                if b.position + b.size > target:
                    break
                end = b.position + b.size
            if end == start:
                if not min_one_batch:
                    return None
                end = min(start + first.size, limit)
        return FileSlice(self.log_path, start, end - start, self.fd, *self.file_id), \
            first.base_offset

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0
                                 ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.index.lookup(max(ts_offset, starting_offset))
        for batch in self.iter_batches(pos):
            if batch.max_timestamp < timestamp or batch.last_offset < starting_offset:
                continue
            for rec in batch.records():
                if rec.offset >= starting_offset and rec.timestamp >= timestamp:
                    return rec.offset, rec.timestamp
        return None

    # -- recovery and truncation ------------------------------------------------------

    def recover(self, producer_state=None, epoch_cache=None) -> int:
        """Validate every batch, rebuild the indexes, cut at the first bad batch.

        Replays each valid batch into `producer_state` / `epoch_cache` when given.
        Returns the number of bytes removed past the last valid batch (torn tail,
        garbage and preallocated zeros).
        """
        file_len = os.fstat(self.fd).st_size
        self.size = file_len
        self._drop_read_map()
        self.index.reset()
        self.time_index.reset()
        self.max_timestamp_so_far, self.offset_of_max_timestamp = -1, self.base_offset
        self.bytes_since_last_index_entry = 0
        self._rolling_ts = None
        valid = self._scan_valid(producer_state, epoch_cache)
        truncated = file_len - valid
        self._cut_file(valid)
        if self.max_timestamp_so_far >= 0 and not self.active:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp,
                                         skip_full_check=True)
        self.index_needs_rebuild = False
        return truncated

    def _scan_valid(self, producer_state, epoch_cache) -> int:
        mm = self._map()
        if mm is None:
            return 0
        view = memoryview(mm)
        pos, prev_last = 0, self.base_offset - 1
        try:
            while pos + HEADER_SIZE <= self.size:
                base, length = _HDR.unpack_from(mm, pos)
                size = length + LOG_OVERHEAD
                if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > self.size \
                        or mm[pos + 16] != MAGIC:
                    break
                batch = RecordBatch(view[pos:pos + size])
                try:
                    batch.validate()
                except StorageError:
                    break
                last = batch.last_offset
                if base <= prev_last or not self.can_convert_to_relative(last):
                    break
                self._index_recovered_batch(batch, pos, size)
                if producer_state is not None:
                    producer_state.apply_batch(batch)
                if epoch_cache is not None and batch.partition_leader_epoch >= 0:
                    epoch_cache.assign(batch.partition_leader_epoch, base)
                prev_last = last
                pos += size
                del batch
        finally:
            view.release()
        return pos

    def _index_recovered_batch(self, batch, pos: int, size: int) -> None:
        if pos == 0:
            self._rolling_ts = batch.max_timestamp
        if batch.max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = batch.max_timestamp
            self.offset_of_max_timestamp = batch.last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.index.append(batch.last_offset, pos)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp,
                                         skip_full_check=True)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def _cut_file(self, valid: int) -> None:
        """Drop everything past `valid` (zeros, not stale bytes, if re-extended later)."""
        self._drop_read_map()
        was_active = self.active
        _close_map(self._amm)
        self._amm = None
        os.ftruncate(self.fd, valid)
        self.size = self._written_to = valid
        self._tail = None
        self.active = False
        if was_active:
            self.make_active(self.capacity)

    def truncate_to(self, offset: int) -> int:
        """Remove the batches holding `offset` and later; bytes removed."""
        b = self.translate_offset(offset)
        if b is None:
            return 0
        removed = self.size - b.position
        self.index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self._cut_file(b.position)
        self.bytes_since_last_index_entry = 0
        if b.position == 0:
            self._rolling_ts = None
        self._reload_max_timestamp()
        return removed

    # -- durability and lifecycle -----------------------------------------------------

    def flush(self) -> None:
        os.fsync(self.fd)           # appends are pwrites: nothing to msync
        self.index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self, sync: bool = True) -> None:
        """Record the final max timestamp, trim files to their real size, release all."""
        if self.fd < 0:
            return
        if self.active:
            self.on_become_inactive()
            if sync:
                os.fsync(self.fd)
        self._drop_read_map()
        self.index.close()
        self.time_index.close()
        self.txn_index.flush()
        self.txn_index.close()
        os.close(self.fd)
        self.fd = -1

    def close_unclean(self) -> None:
        """Release maps and fds without trimming (tests: a crash as files see it)."""
        if self.fd < 0:
            return
        _close_map(self._amm)
        self._amm = None
        self._drop_read_map()
        self.index.close(trim=False)
        self.time_index.close(trim=False)
        self.txn_index.close()
        os.close(self.fd)
        self.fd = -1

    def paths(self) -> list[str]:
        return [self.log_path, self.index_path, self.time_index_path, self.txn_index_path]

    def rename_suffix(self, new_suffix: str) -> list[str]:
        """Rename every file of the segment from its current suffix to `new_suffix`."""
        out = []
        for attr in ("log_path", "index_path", "time_index_path", "txn_index_path"):
            old = getattr(self, attr)
            new = old[:len(old) - len(self.suffix)] + new_suffix if self.suffix else old + new_suffix
            if os.path.exists(old):
                os.rename(old, new)
                out.append(new)
            setattr(self, attr, new)
        self.index.path, self.time_index.path = self.index_path, self.time_index_path
        self.txn_index.rename(self.txn_index_path)
        self.suffix = new_suffix
        return out

    def delete(self) -> None:
        self.close_unclean()
        for p in self.paths():
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def __repr__(self):
        return f"LogSegment({self.base_offset}, size={self.size}, active={self.active})"


def check_offsets_increasing(segment: LogSegment) -> None:
    """Invariant check for tests: batch offsets strictly increase inside the segment."""
    prev = segment.base_offset - 1
    for b in segment.iter_positions():
        if b.base_offset <= prev or b.last_offset < b.base_offset:
            raise InvalidOffsetError(f"{segment.log_path}: batch {b} after offset {prev}")
        prev = b.last_offset
