import os

from storage.batch import BatchBuilder, iter_batches
from storage.cleaner import CLEANER_CHECKPOINT_FILE, LogCleaner, OffsetMap
from storage.errors import InvalidRecordError
from storage.log import Log, LogConfig

import pytest


class Clock:
    def __init__(self):
        self.now = 1_000_000

    def __call__(self):
        return self.now


def kv_batch(pairs, compression=0, ts=1_000_000, pid=-1, seq=-1):
    b = BatchBuilder(0, compression=compression, producer_id=pid,
                     producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)
    for k, v in pairs:
        b.append(k, v, timestamp=ts)
    return b.build()


def open_log(tmp_path, clock, **kw):
    cfg = dict(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=8 * 64,
               cleanup_policy="compact", min_cleanable_dirty_ratio=0.01,
               delete_retention_ms=10_000, file_delete_delay_ms=0)
    cfg.update(kw)
    return Log.open(str(tmp_path / "compacted-0"), LogConfig(**cfg), clock)


def contents(log):
    data = log.read_records_bytes(log.log_start_offset)
    out = []
    for b in iter_batches(data):
        b.validate()
        out += [(r.offset, r.key, r.value) for r in b.records()]
    return out


def latest(appended):
    last = {}
    for off, k, v in appended:
        last[k] = (off, k, v)
    return sorted(last.values())


def test_offset_map_is_bounded():
    m = OffsetMap(2)
    assert m.put(b"a", 1) and m.put(b"b", 2) and m.put(b"a", 3)
    assert not m.put(b"c", 4)
    assert m.get(b"a") == 3 and m.get(b"c") == -1 and len(m) == 2


def test_compaction_keeps_newest_per_key_and_offsets(tmp_path):
    clock = Clock()
    log = open_log(tmp_path, clock)
    appended = []
    for i in range(60):
        codec = i % 5                         # none, gzip, snappy, lz4, zstd
        pairs = [(b"key%d" % ((i * 3 + j) % 7), b"value-%d-%d" % (i, j)) for j in range(3)]
        info = log.append(kv_batch(pairs, compression=codec), 0)
        appended += [(info.first_offset + j, k, v) for j, (k, v) in enumerate(pairs)]
    active_base = log.active_segment.base_offset
    before_active = [r for r in contents(log) if r[0] >= active_base]
    size_before = log.size_bytes
    cleaner = LogCleaner(log)
    assert cleaner.needs_cleaning()
    cleaner.clean_all()
    got = contents(log)
    cleanable = [r for r in appended if r[0] < active_base]
    assert [r for r in got if r[0] < active_base] == latest(cleanable) or \
        set(r for r in got if r[0] < active_base) >= set(latest(cleanable))
    # every record that survives is the newest for its key within the cleaned range
    newest = {k: off for off, k, v in cleanable}
    assert all(newest[k] == off for off, k, v in got if off < active_base)
    assert [r for r in got if r[0] >= active_base] == before_active     # active untouched
    assert log.size_bytes < size_before
    assert log.log_end_offset == 180
    # codecs preserved
    data = log.read_records_bytes(0)
    assert {b.compression for b in iter_batches(data)} - {0} != set()
    assert open(os.path.join(log.dir, CLEANER_CHECKPOINT_FILE)).read().startswith("0\n1\n")
    # survives reopen (clean and unclean)
    log.close()
    log = open_log(tmp_path, clock)
    assert contents(log) == got
    log.close(clean=False)
    log = open_log(tmp_path, clock)
    assert contents(log) == got
    for seg in log.segments:
        seg.index.check_all_monotonic()


def test_incremental_steps_with_tiny_budget_interleave_appends(tmp_path):
    clock = Clock()
    log = open_log(tmp_path, clock)
    for i in range(40):
        log.append(kv_batch([(b"k%d" % (i % 4), b"v%d" % i)]), 0)
    ticks = iter(range(10**9))
    cleaner = LogCleaner(log, timer=lambda: next(ticks) / 1000.0)   # 1 ms per call
    steps = 0
    while cleaner.clean_step(budget_ms=2):
        log.append(kv_batch([(b"new", b"x")]), 0)                   # owner keeps appending
        steps += 1
    assert steps > 3 and cleaner.passes_completed == 1
    got = contents(log)
    offs = [o for o, _, _ in got]
    assert offs == sorted(offs) and log.log_end_offset == 40 + steps


def test_tombstones_dropped_after_delete_retention(tmp_path):
    clock = Clock()
    log = open_log(tmp_path, clock)
    log.append(kv_batch([(b"a", b"1"), (b"b", b"1")]), 0)
    log.append(kv_batch([(b"a", None)]), 0)
    for i in range(30):
        log.append(kv_batch([(b"filler%d" % i, b"z" * 50)]), 0)
    cleaner = LogCleaner(log)
    cleaner.clean_all()
    got = contents(log)
    assert (2, b"a", None) in got and (1, b"b", b"1") in got
    assert all(k != b"a" or v is None for _, k, v in got)
    clock.now += 10_001
    for i in range(30):
        log.append(kv_batch([(b"filler%d" % i, b"y" * 50)]), 0)
    cleaner.clean_all()
    assert all(k != b"a" for _, k, _ in contents(log))
    assert (1, b"b", b"1") in contents(log)


def test_compacted_topic_rejects_null_keys(tmp_path):
    log = open_log(tmp_path, Clock())
    with pytest.raises(InvalidRecordError):
        log.append(kv_batch([(None, b"v")]), 0)


def test_interrupted_swap_is_completed_on_open(tmp_path):
    clock = Clock()
    log = open_log(tmp_path, clock)
    for i in range(30):
        log.append(kv_batch([(b"k%d" % (i % 3), b"v%d" % i)]), 0)
    cleaner = LogCleaner(log)
    cleaner.clean_all()
    expect = contents(log)
    log.close()
    # simulate a crash after `.swap` was written: copy a cleaned segment back to .swap
    # and re-create an "old" overlapping segment file that must be removed
    first = sorted(f for f in os.listdir(log.dir) if f.endswith(".log"))[0]
    data = open(os.path.join(log.dir, first), "rb").read()
    open(os.path.join(log.dir, first + ".swap"), "wb").write(data)
    log = open_log(tmp_path, clock)
    assert contents(log) == expect
    assert not [f for f in os.listdir(log.dir) if f.endswith(".swap")]
