import errno
import os

import pytest

import storage.segment as segment_mod
from storage.batch import BatchBuilder, RecordBatch
from storage.errors import KafkaStorageError
from storage.segment import LogSegment, check_offsets_increasing, parse_base_offset


def mk_batch(offset, n=1, ts=1000, value=b"v" * 40):
    b = BatchBuilder(offset)
    for i in range(n):
        b.append(b"k%d" % i, value, timestamp=ts + i)
    return b.build()


def fill(seg, count, start=None, n=2, ts0=1000):
    off = seg.base_offset if start is None else start
    out = []
    for i in range(count):
        data = mk_batch(off, n, ts=ts0 + i * 10)
        b = RecordBatch(data)
        seg.append(b.last_offset, b.max_timestamp, b.last_offset, data)
        out.append((off, data))
        off += n
    return out


def new_seg(tmp_path, base=100, cap=1 << 16, interval=200):
    return LogSegment(str(tmp_path), base, capacity=cap, index_interval_bytes=interval,
                      max_index_size=8 * 64, created_ms=0, active=True)


def test_file_names_and_preallocation(tmp_path):
    seg = new_seg(tmp_path)
    assert os.path.basename(seg.log_path) == "00000000000000000100.log"
    assert parse_base_offset("00000000000000000100.timeindex") == 100
    assert parse_base_offset("leader-epoch-checkpoint") is None
    assert os.path.getsize(seg.log_path) == 1 << 16
    fill(seg, 3)
    seg.close()
    assert os.path.getsize(seg.log_path) == seg.size


def test_translate_and_read_whole_batches(tmp_path):
    seg = new_seg(tmp_path)
    batches = fill(seg, 50)
    assert seg.index.entries > 3
    seg.index.check_all_monotonic()
    positions = {}
    pos = 0
    for off, data in batches:
        positions[off] = pos
        pos += len(data)
    for off, data in batches:
        for o in (off, off + 1):
            b = seg.translate_offset(o)
            assert (b.position, b.base_offset) == (positions[off], off)
    assert seg.translate_offset(100 + 100) is None
    assert seg.read_next_offset() == 200
    size = len(batches[0][1])
    sl, first = seg.read(110, 3 * size + 5)
    assert first == 110 and sl.position == positions[110] and sl.length == 3 * size
    sl, _ = seg.read(110, 1)                           # at least one batch
    assert sl.length == size
    assert seg.read(110, 1, min_one_batch=False) is None
    sl, _ = seg.read(110, 10**9, max_position=positions[120])
    assert sl.length == positions[120] - positions[110]
    assert seg.read(120, 100, max_position=positions[120]) is None
    got = os.pread(sl.fd, sl.length, sl.position)
    assert got == b"".join(d for o, d in batches if 110 <= o < 120)


def test_the_last_appended_batch_is_found_without_the_index_walk(tmp_path, monkeypatch):
    """A consumer at the end reads the batch appended last: translated from what the
    append remembered, the same answer as the index walk; two batches in one append, a
    rollback or a truncation leave nothing remembered."""
    seg = new_seg(tmp_path)
    batches = fill(seg, 10)
    walked = seg.translate_offset(118, start_position=1)
    seg._tail = None
    assert seg.translate_offset(118, start_position=1) == walked
    fill(seg, 1, start=120)
    walks = []
    real = seg.batch_at
    monkeypatch.setattr(seg, "batch_at", lambda pos: walks.append(pos) or real(pos))
    b = seg.translate_offset(121)
    assert walks == [] and (b.base_offset, b.last_offset) == (120, 121)
    assert seg.translate_offset(121, start_position=b.position + 1) is None   # walked
    assert walks
    two = mk_batch(122, 2) + mk_batch(124, 2)
    seg.append(125, 1000, 125, two)                    # two batches: nothing remembered
    assert seg._tail is None and seg.translate_offset(124).base_offset == 124
    mark = seg.mark()
    fill(seg, 1, start=126)
    seg.rollback(mark)
    assert seg._tail is None and seg.translate_offset(126) is None
    fill(seg, 1, start=126)
    seg.truncate_to(126)
    assert seg._tail is None and seg.translate_offset(126) is None
    assert seg.translate_offset(batches[-1][0]).base_offset == batches[-1][0]


def test_find_offset_by_timestamp(tmp_path):
    seg = new_seg(tmp_path)
    fill(seg, 30)                                      # batch i: ts 1000+10i, 1001+10i
    assert seg.find_offset_by_timestamp(0) == (100, 1000)
    assert seg.find_offset_by_timestamp(1001) == (101, 1001)
    assert seg.find_offset_by_timestamp(1005) == (102, 1010)
    assert seg.find_offset_by_timestamp(1291) == (159, 1291)
    assert seg.find_offset_by_timestamp(1292) is None
    assert seg.find_offset_by_timestamp(1000, starting_offset=130) == (130, 1150)
    assert seg.max_timestamp_so_far == 1291 and seg.offset_of_max_timestamp == 159


def test_recover_cuts_torn_tail_and_rebuilds_indexes(tmp_path):
    seg = new_seg(tmp_path)
    batches = fill(seg, 40)
    entries = seg.index.all_entries()
    good_size = seg.size
    os.pwrite(seg.fd, batches[0][1][:30], good_size)              # torn next batch
    assert seg.recover() == (1 << 16) - good_size
    assert seg.size == good_size and seg.index.all_entries() == entries
    assert os.path.getsize(seg.log_path) == 1 << 16                 # still preallocated
    check_offsets_increasing(seg)
    # flip a byte in the middle: everything from that batch on is gone
    mid = sum(len(d) for _, d in batches[:20]) + 30
    os.pwrite(seg.fd, bytes([os.pread(seg.fd, 1, mid)[0] ^ 0xFF]), mid)
    seg.recover()
    assert seg.read_next_offset() == 140 and seg.size == mid - 30


def test_recover_rejects_offsets_going_backwards(tmp_path):
    seg = new_seg(tmp_path)
    fill(seg, 2)
    data = mk_batch(101)                                # overlaps offsets 100-101... base 101
    pos = seg.size
    os.pwrite(seg.fd, data, pos)
    seg.recover()
    assert seg.size == pos


def test_truncate_to(tmp_path):
    seg = new_seg(tmp_path)
    fill(seg, 40)
    seg.truncate_to(151)                                # batch 150-151 goes entirely
    assert seg.read_next_offset() == 150
    assert all(o < 150 for o, _ in seg.index.all_entries())
    assert all(o < 150 for _, o in seg.time_index.all_entries())
    assert seg.max_timestamp_so_far == 1000 + 24 * 10 + 1
    fill(seg, 1, start=150)                            # appends continue
    assert seg.read_next_offset() == 152
    seg.truncate_to(100)
    assert seg.size == 0 and seg.read_next_offset() == 100


def test_roll_trims_and_reopen_inactive(tmp_path):
    seg = new_seg(tmp_path)
    fill(seg, 40)
    size, entries, ts = seg.size, seg.index.all_entries(), seg.max_timestamp_so_far
    seg.on_become_inactive()
    assert os.path.getsize(seg.log_path) == size
    assert os.path.getsize(seg.index_path) == 8 * len(entries)
    assert seg.time_index.last_entry == (ts, 179)
    seg.close()
    again = LogSegment(str(tmp_path), 100, capacity=1 << 16, index_interval_bytes=200,
                       max_index_size=8 * 64)
    assert not again.index_needs_rebuild
    assert again.size == size and again.index.all_entries() == entries
    assert again.max_timestamp_so_far == ts and again.read_next_offset() == 180
    again.close()


def test_missing_or_corrupt_index_flagged_for_rebuild(tmp_path):
    seg = new_seg(tmp_path)
    fill(seg, 40)
    entries = seg.index.all_entries()
    seg.close()
    os.unlink(seg.index_path)
    again = LogSegment(str(tmp_path), 100, capacity=1 << 16, index_interval_bytes=200,
                       max_index_size=8 * 64)
    assert again.index_needs_rebuild
    again.recover()
    assert again.index.all_entries() == entries
    again.close()
    with open(again.time_index_path, "r+b") as f:
        f.seek(0)
        f.write(b"\x7f" * 8)
    third = LogSegment(str(tmp_path), 100, capacity=1 << 16, index_interval_bytes=200,
                       max_index_size=8 * 64)
    assert third.index_needs_rebuild
    third.close()


def test_should_roll(tmp_path):
    seg = new_seg(tmp_path, cap=2000)
    kw = dict(max_timestamp_in_messages=1000, max_offset_in_messages=100, now_ms=0,
              segment_bytes=2000, segment_ms=500)
    assert not seg.should_roll(messages_size=100, **kw)       # empty: never on time
    fill(seg, 1)
    assert seg.should_roll(messages_size=2000, **kw)          # size
    assert not seg.should_roll(messages_size=10, **kw)
    kw["max_timestamp_in_messages"] = 1502
    assert seg.should_roll(messages_size=10, **kw)            # segment.ms vs first batch ts
    kw["max_timestamp_in_messages"] = 1000
    kw["max_offset_in_messages"] = 100 + 2**31
    assert seg.should_roll(messages_size=10, **kw)            # relative offset overflow


def allocated_bytes(path):
    return os.stat(path).st_blocks * 512


def test_appends_reserve_disk_blocks_ahead_and_trim_frees_them(tmp_path, monkeypatch):
    monkeypatch.setattr(segment_mod, "PREALLOCATE_MIN_STEP", 1 << 16)
    monkeypatch.setattr(segment_mod, "PREALLOCATE_STEP", 1 << 18)
    seg = LogSegment(str(tmp_path), 100, capacity=1 << 20, index_interval_bytes=1 << 16,
                     max_index_size=8 * 64, active=True)
    assert allocated_bytes(seg.log_path) == 0             # sparse until the first append
    fill(seg, 3)                     # ext4, xfs, btrfs, tmpfs all support fallocate
    assert seg.size < 1 << 16 == seg._allocated <= allocated_bytes(seg.log_path) < 1 << 18
    reserved = [seg._allocated]
    off = seg.read_next_offset()
    while seg.size < 3 << 18:
        data = mk_batch(off, value=b"v" * 4000)
        seg.append(off, 1000, off, data)
        off += 1
        if seg._allocated != reserved[-1]:
            reserved.append(seg._allocated)
        assert seg.size <= seg._allocated <= allocated_bytes(seg.log_path)
    # each step reserves as much as the segment holds, from 64 KiB up to 256 KiB
    steps = [b - a for a, b in zip(reserved, reserved[1:])]
    assert steps[0] >= 1 << 16 and max(steps) == 1 << 18 and steps == sorted(steps)
    seg.on_become_inactive()                             # roll: trimmed, blocks freed
    assert os.path.getsize(seg.log_path) == seg.size
    assert allocated_bytes(seg.log_path) < seg.size + (1 << 16)
    seg.close()


def test_recovery_cuts_the_reserved_zero_tail(tmp_path):
    seg = new_seg(tmp_path, cap=1 << 20)
    data = fill(seg, 20)
    size = seg.size
    seg.close_unclean()                                  # a crash: file still 1 MiB
    assert os.path.getsize(seg.log_path) == 1 << 20
    seg = LogSegment(str(tmp_path), 100, capacity=1 << 20, index_interval_bytes=200,
                     max_index_size=8 * 64)
    assert seg.recover() == (1 << 20) - size
    assert seg.size == size == os.path.getsize(seg.log_path)
    assert seg.read_bytes(0, size) == b"".join(d for _, d in data)
    seg.close()


def test_preallocation_falls_back_or_refuses(tmp_path, monkeypatch):
    calls = []

    def unsupported(fd, offset, length):
        calls.append(length)
        raise OSError(errno.EOPNOTSUPP, "not supported")
    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    seg = new_seg(tmp_path)
    fill(seg, 5)                                         # silently sparse
    assert len(calls) == 1 and seg.read_next_offset() == 110
    seg.close()

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "no space")
    monkeypatch.setattr(os, "posix_fallocate", full)
    seg = new_seg(tmp_path, base=500)
    with pytest.raises(KafkaStorageError):
        fill(seg, 1, start=500)
    assert seg.size == 0 and seg.read_next_offset() == 500
    seg.close()


def test_appends_are_pwrites_that_the_map_and_recovery_read_back(tmp_path, monkeypatch):
    writes = []
    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, b, pos: writes.append((fd, pos)) or
                        real_pwrite(fd, b, pos))
    seg = new_seg(tmp_path)
    data = fill(seg, 3) + fill(seg, 3, start=106, n=8) + fill(seg, 2, start=130)
    assert [pos for fd, pos in writes if fd == seg.fd] == \
        [sum(len(d) for _, d in data[:i]) for i in range(len(data))]
    assert any(fd == seg.index._fd for fd, _ in writes)      # index entries too
    want = b"".join(d for _, d in data)
    assert seg.read_bytes(0, seg.size) == want == os.pread(seg.fd, seg.size, 0)
    assert [b.base_offset for b in seg.iter_positions()] == [o for o, _ in data]
    assert seg.index.entries > 0 and seg.translate_offset(131).base_offset == 130
    seg.close_unclean()
    seg = LogSegment(str(tmp_path), 100, capacity=1 << 16, index_interval_bytes=200,
                     max_index_size=8 * 64)
    seg.recover()
    assert seg.read_bytes(0, seg.size) == want
    seg.close()
