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


def lying_batch(pairs, count):
    """A gzip batch whose header claims `count` records (CRC recomputed to match):
    accepted by the header-only produce path, found out by a record walk."""
    import struct
    from storage.batch import RecordBatch
    raw = bytearray(kv_batch(pairs, compression=1))
    struct.pack_into(">i", raw, 23, count - 1)          # last offset delta
    struct.pack_into(">i", raw, 57, count)              # record count
    b = RecordBatch(raw)
    struct.pack_into(">I", raw, 17, b.compute_crc())
    return raw


def test_corrupt_batch_makes_the_log_uncleanable_then_retried(tmp_path, caplog):
    clock = Clock()
    log = open_log(tmp_path, clock, cleanup_policy="delete")
    log.append(kv_batch([(b"a", b"1")]), 0)
    log.append(lying_batch([(b"b", b"1"), (b"c", b"1")], 5), 0)   # header-only checks pass
    for i in range(30):
        log.append(kv_batch([(b"k%d" % (i % 3), b"v%d" % i)]), 0)
    log.config = LogConfig(**{**vars(log.config), "cleanup_policy": "compact"})
    before = contents_raw(log)
    cleaner = LogCleaner(log, backoff_ms=1000)
    with caplog.at_level("WARNING", logger="storage.cleaner"):
        assert cleaner.clean_step(1000.0) is False       # no exception, pass abandoned
        assert cleaner.failures == 1 and not cleaner.needs_cleaning()
        assert not [f for f in os.listdir(log.dir) if f.endswith(".cleaned")]
        clock.now += 1000
        assert cleaner.needs_cleaning()
        cleaner.clean_step(1000.0)
        assert cleaner.failures == 2 and cleaner.retry_at_ms == clock.now + 2000
    assert len([r for r in caplog.records if "uncleanable" in r.getMessage()]) == 1
    assert contents_raw(log) == before                   # nothing changed
    # once DeleteRecords removes the bad batch, the log is cleaned again
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(log.segments[1].base_offset)
    clock.now += 2000
    cleaner.clean_all()
    assert cleaner.failures == 0 and cleaner.passes_completed == 1


def contents_raw(log):
    return log.read_records_bytes(log.log_start_offset)


def test_keyless_records_are_dropped_by_compaction(tmp_path):
    clock = Clock()
    log = open_log(tmp_path, clock, cleanup_policy="delete")
    for i in range(30):
        log.append(kv_batch([(None, b"nokey%d" % i), (b"k%d" % (i % 2), b"v%d" % i)]), 0)
    log.config = LogConfig(**{**vars(log.config), "cleanup_policy": "compact"})
    active_base = log.active_segment.base_offset
    LogCleaner(log).clean_all()
    cleaned = [r for r in contents(log) if r[0] < active_base]
    assert cleaned and all(k is not None for _, k, _ in cleaned)
    assert any(k is None for _, k, _ in contents(log))   # the active segment: untouched


def test_full_map_cleans_only_below_its_end_and_moves_the_checkpoint(tmp_path):
    clock = Clock()
    log = open_log(tmp_path, clock)
    appended = []
    for i in range(40):                       # 8 distinct keys, 2 records a batch
        pairs = [(b"k%d" % ((2 * i + j) % 8), b"v%d-%d" % (i, j)) for j in range(2)]
        info = log.append(kv_batch(pairs), 0)
        appended += [(info.first_offset + j, k, v) for j, (k, v) in enumerate(pairs)]
    assert len(log.segments) >= 4
    untouched = {s.base_offset: os.stat(s.log_path).st_ino for s in log.segments}
    cleaner = LogCleaner(log, max_map_entries=3)
    cleaner.clean_step(1000.0)
    while cleaner._phase != "idle":
        cleaner.clean_step(1000.0)
    # the map held k0, k1, k2 (offsets 0-2): it ends at offset 3, the checkpoint too
    assert cleaner.first_dirty_offset == 3
    first_seg_end = log.segments[1].base_offset
    assert first_seg_end > 3
    # only the first segment was rewritten; the others are the same files
    for s in log.segments[1:]:
        assert untouched.get(s.base_offset) == os.stat(s.log_path).st_ino
    assert [r for r in contents(log) if r[0] >= first_seg_end] == \
        [r for r in appended if r[0] >= first_seg_end]
    # passes go on from the checkpoint until the whole dirty range is clean
    for _ in range(200):
        if not cleaner.needs_cleaning():
            break
        cleaner.clean_all()
    active_base = log.active_segment.base_offset
    got = [r for r in contents(log) if r[0] < active_base]
    newest = {k: off for off, k, v in appended if off < active_base}
    assert sorted(newest.values()) == [off for off, _, _ in got]


def test_manager_cleans_one_log_at_a_time_dirtiest_first(tmp_path):
    from storage.cleaner import CleanerManager, map_entries_for
    assert map_entries_for(128 * 1024 * 1024) > 800_000
    assert map_entries_for(1024 * 1024, 0.5) == 1024 * 1024 // 2 // 137
    clock = Clock()
    logs = {}
    for name, batches in (("a", 20), ("b", 40)):
        lg = Log.open(str(tmp_path / f"{name}-0"), open_log(tmp_path, clock).config, clock)
        for i in range(batches):
            lg.append(kv_batch([(b"k%d" % (i % 2), b"v" * 40)]), 0)
        logs[name] = lg
    LogCleaner(logs["a"]).clean_all()              # a: only its newest data is dirty
    for i in range(12):
        logs["a"].append(kv_batch([(b"k%d" % (i % 2), b"u" * 40)]), 0)
    ticks = iter(range(10**9))
    m = CleanerManager(max_map_entries=10, backoff_ms=5000,
                       timer=lambda: next(ticks) / 1000.0)
    order = []
    for _ in range(10_000):
        busy = m.step(logs, clock.now, budget_ms=3)
        assert sum(c._map is not None for c in m.cleaners.values()) <= 1   # one map alive
        if m.current is not None and m.current not in order:
            order.append(m.current)
        if not busy and m.current is None and m.next_check_ms > clock.now:
            break                                  # nothing left to clean
    assert order == ["b", "a"]                     # b is dirtier: cleaned first
    assert {k: c.passes_completed for k, c in m.cleaners.items()} == {"a": 1, "b": 1}
    # nothing due: no look at the logs again before log.cleaner.backoff.ms
    assert not m.step(logs, clock.now) and m.next_check_ms == clock.now + 5000
    for i in range(40):
        logs["a"].append(kv_batch([(b"k%d" % (i % 2), b"w" * 40)]), 0)
    assert not m.step(logs, clock.now + 4999) and m.current is None
    assert m.step(logs, clock.now + 5000, budget_ms=0.001) and m.current == "a"
    m.forget("a")
    assert m.current is None and "a" not in m.cleaners
    off = CleanerManager(max_map_entries=10, enabled=False)
    assert not off.step(logs, clock.now + 10_000) and not off.cleaners
