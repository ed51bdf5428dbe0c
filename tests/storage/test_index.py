import bisect
import os
import struct

import pytest

from storage.errors import InvalidOffsetError
from storage.index import CorruptIndexError, IndexFullError, OffsetIndex, TimeIndex


def test_offset_index_lookup_matches_bisect_including_warm_section(tmp_path):
    idx = OffsetIndex(str(tmp_path / "0.index"), base_offset=1000, max_index_size=8 * 5000)
    offsets = [1000 + 3 * i + 1 for i in range(4000)]          # > warm section (1024 entries)
    for n, off in enumerate(offsets):
        idx.append(off, n * 100)
    assert idx.entries == 4000
    for target in [999, 1000, 1001, 1002, 1500, 5000, offsets[-1], offsets[-1] + 10,
                   offsets[-1100], offsets[-1100] - 1, offsets[-1030]]:
        i = bisect.bisect_right(offsets, target) - 1
        expect = (1000, 0) if i < 0 else (offsets[i], i * 100)
        assert idx.lookup(target) == expect, target
    assert idx.lookup_by_position(250) == (offsets[2], 200)
    assert idx.lookup_by_position(-1) == (1000, 0)
    idx.check_all_monotonic()


def test_offset_index_rejects_non_increasing_and_full(tmp_path):
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, max_index_size=8 * 3 + 5)
    assert idx.max_entries == 3
    idx.append(5, 10)
    with pytest.raises(InvalidOffsetError):
        idx.append(5, 20)
    with pytest.raises(InvalidOffsetError):
        idx.append(6, 5)
    idx.append(6, 20)
    idx.append(7, 30)
    assert idx.is_full()
    with pytest.raises(IndexFullError):
        idx.append(8, 40)
    with pytest.raises(InvalidOffsetError):
        OffsetIndex(str(tmp_path / "1.index"), 100).append(99, 0)


def test_offset_index_truncate(tmp_path):
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, 8 * 10)
    for i in range(1, 6):
        idx.append(i * 10, i * 100)
    idx.truncate_to(30)
    assert idx.all_entries() == [(10, 100), (20, 200)]
    idx.truncate_to(25)
    assert idx.all_entries() == [(10, 100), (20, 200)]
    idx.truncate_to(5)
    assert idx.entries == 0
    assert idx.lookup(100) == (0, 0)


def test_reopen_preallocated_index_drops_zero_tail_and_trim(tmp_path):
    path = str(tmp_path / "0.index")
    idx = OffsetIndex(path, 0, 8 * 100)
    idx.append(3, 50)
    idx.append(9, 120)
    idx.close(trim=False)                       # like a crash: file still preallocated
    assert os.path.getsize(path) == 800
    again = OffsetIndex(path, 0, 8 * 100)
    assert again.all_entries() == [(3, 50), (9, 120)]
    again.sanity_check(log_size=200)
    again.close()                               # trims
    assert os.path.getsize(path) == 16


def test_sanity_check_catches_garbage(tmp_path):
    path = str(tmp_path / "0.index")
    with open(path, "wb") as f:
        f.write(struct.pack(">ii", 10, 100) + struct.pack(">ii", 5, 200))
    idx = OffsetIndex(path, 0, 8 * 10)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    with open(path, "wb") as f:
        f.write(struct.pack(">ii", 10, 100) + b"\x01\x02\x03")
    idx = OffsetIndex(path, 0, 8 * 10, writable=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    with open(path, "wb") as f:
        f.write(struct.pack(">ii", 10, 5000))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 80).sanity_check(log_size=100)


def test_time_index_semantics(tmp_path):
    ti = TimeIndex(str(tmp_path / "0.timeindex"), 100, 12 * 5)
    assert ti.lookup(5) == (-1, 100)
    assert ti.maybe_append(1000, 105)
    assert not ti.maybe_append(1000, 107)           # timestamp did not grow
    assert ti.maybe_append(2000, 110)
    with pytest.raises(InvalidOffsetError):
        ti.maybe_append(3000, 109)
    with pytest.raises(InvalidOffsetError):
        ti.maybe_append(1500, 120)
    assert ti.lookup(999) == (-1, 100)
    assert ti.lookup(1000) == (1000, 105)
    assert ti.lookup(1999) == (1000, 105)
    assert ti.lookup(10**12) == (2000, 110)
    ti.maybe_append(3000, 120)
    ti.maybe_append(4000, 130)
    assert ti.is_full()                             # one slot kept for the roll entry
    with pytest.raises(IndexFullError):
        ti.maybe_append(5000, 140)
    assert ti.maybe_append(5000, 140, skip_full_check=True)
    ti.truncate_to(120)
    assert ti.all_entries() == [(1000, 105), (2000, 110)]
    ti.check_all_monotonic()
    ti.trim_to_valid_size()
    assert os.path.getsize(ti.path) == 24


def test_reset_and_resize(tmp_path):
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, 80)
    idx.append(1, 1)
    idx.trim_to_valid_size()
    assert idx.max_entries == 1 and idx.is_full()
    idx.resize(80)
    assert idx.max_entries == 10 and idx.entries == 1
    idx.reset()
    assert idx.entries == 0 and os.path.getsize(idx.path) == 80


def test_fast_full_check(tmp_path):
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, 8 * 100)
    for i in range(1, 50):
        idx.append(i * 3, i * 10)
    idx.check_monotonic_fast(log_size=1000)
    with pytest.raises(CorruptIndexError):
        idx.check_monotonic_fast(log_size=100)
    os.pwrite(idx._fd, struct.pack(">ii", 7, 205), 8 * 20)         # interior entry goes back
    with pytest.raises(CorruptIndexError):
        idx.check_monotonic_fast()
    ti = TimeIndex(str(tmp_path / "0.timeindex"), 0, 12 * 100)
    for i in range(1, 50):
        ti.maybe_append(1000 + i, i)
    ti.check_monotonic_fast()
    os.pwrite(ti._fd, struct.pack(">qi", 5, 10), 12 * 10)
    with pytest.raises(CorruptIndexError):
        ti.check_monotonic_fast()


def test_counting_entries_reads_only_the_data_not_the_sparse_tail(tmp_path, monkeypatch):
    """A crash leaves the active index at its preallocated (sparse) size: the entries
    are counted with pread over the file's data regions only, never through the map.
    Reading a hole through a shared map allocates it: on tmpfs (/dev/shm here) that is
    RAM, 10 MiB per index, which the file's block count shows."""
    import os as _os
    import shutil
    import tempfile

    assert _os.path.isdir("/dev/shm"), "needs /dev/shm (tmpfs)"
    shm = tempfile.mkdtemp(dir="/dev/shm")
    try:
        path = _os.path.join(shm, "00000000000000000000.index")
        idx = OffsetIndex(path, 0, 10 * 1024 * 1024)
        for i in range(1, 1001):
            idx.append(i * 10, i * 4096)
        idx.close(trim=False)                  # as a crash leaves it: 10 MiB, mostly hole
        assert _os.path.getsize(path) == 10 * 1024 * 1024
        blocks = _os.stat(path).st_blocks
        read = []
        real = _os.pread
        monkeypatch.setattr(_os, "pread", lambda fd, n, off: read.append(n) or real(fd, n, off))
        again = OffsetIndex(path, 0, 10 * 1024 * 1024)
        assert again.entries == 1000 and again.entry(999) == (10000, 1000 * 4096)
        assert _os.stat(path).st_blocks == blocks, "holes of the index were allocated"
        assert sum(read) <= 64 * 1024 + 8000, f"read {sum(read)} bytes to count 1000 entries"
        again.close(trim=False)
        # a zeroed tail inside the data (entries truncated away) is not counted either
        tpath = _os.path.join(shm, "00000000000000000000.timeindex")
        t = TimeIndex(tpath, 0, 1024 * 1024)
        for i in range(1, 11):
            t.maybe_append(1000 + i, i)
        t.truncate_to(6)
        t.close(trim=False)
        assert TimeIndex(tpath, 0, 1024 * 1024).entries == 5
    finally:
        shutil.rmtree(shm, ignore_errors=True)
