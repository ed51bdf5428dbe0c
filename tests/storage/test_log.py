"""The log of one partition (storage/log.py): appends (offsets, LogAppendTime, the
idempotent producer's duplicates and gaps, follower appends), rolls, reads, offsets by
timestamp, the flush policy. Retention and truncation: test_log_retention.py; opening
and recovery: test_log_recovery.py."""
import os

import pytest

from storage.batch import BatchBuilder, RecordBatch, iter_batches
from storage.errors import (CorruptRecordError, InvalidOffsetError,
                            MessageTooLargeError, OffsetOutOfRangeError,
                            OutOfOrderSequenceError, RecordBatchTooLargeError)
from storage.log import Log, LogConfig
from tests.storage.log_harness import all_records, batch, open_log, small_config


def test_append_assigns_offsets_in_place_and_reads_back(tmp_path, clock):
    log = open_log(tmp_path, clock)
    buf = batch(3)
    info = log.append(memoryview(buf), leader_epoch=5)
    assert (info.first_offset, info.last_offset, info.record_count, info.duplicate) == (0, 2, 3, False)
    b = RecordBatch(buf)
    assert b.base_offset == 0 and b.partition_leader_epoch == 5
    info = log.append(batch(2), leader_epoch=5)
    assert (info.first_offset, info.last_offset) == (3, 4)
    assert log.log_end_offset == 5
    assert [r[0] for r in all_records(log)] == [0, 1, 2, 3, 4]
    assert log.end_offset_for_epoch(5) == (5, 5)
    assert log.epoch_cache.entries == [(5, 0)]
    log.close()


def test_log_append_time(tmp_path, clock):
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    clock.now = 5_000_000
    info = log.append(batch(2, ts=7), 0)
    assert info.log_append_time_ms == 5_000_000
    b = next(iter_batches(log.read_records_bytes(0)))
    b.validate()
    assert b.timestamp_type == 1 and b.max_timestamp == 5_000_000
    assert [r.timestamp for r in b.records()] == [5_000_000] * 2


def test_rejects_bad_batches_without_storing(tmp_path, clock):
    log = open_log(tmp_path, clock, max_message_bytes=300)
    buf = batch(1)
    buf[30] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(buf, 0)
    with pytest.raises(CorruptRecordError):
        log.append(batch(1)[:-3], 0)
    with pytest.raises(MessageTooLargeError):
        log.append(batch(1, value=b"y" * 400), 0)
    with pytest.raises(RecordBatchTooLargeError):
        log.append(b"".join(bytes(batch(1)) for _ in range(40)), 0)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    assert log.append(b"", 0).first_offset == -1


def test_idempotent_producer_duplicates_and_gaps(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(2, pid=9, epoch=0, seq=0), 0)
    info = log.append(batch(2, pid=9, epoch=0, seq=2), 0)
    assert (info.first_offset, info.last_offset) == (2, 3)
    dup = log.append(batch(2, pid=9, epoch=0, seq=0), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 1)
    assert log.log_end_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(1, pid=9, epoch=0, seq=7), 0)
    # duplicates survive a clean restart (snapshot) and an unclean one (replay)
    log.close()
    log = open_log(tmp_path, clock)
    assert log.append(batch(2, pid=9, epoch=0, seq=2), 0).duplicate
    log.close(clean=False)
    log = open_log(tmp_path, clock)
    assert log.append(batch(2, pid=9, epoch=0, seq=2), 0).duplicate
    assert log.append(batch(1, pid=9, epoch=0, seq=4), 0).first_offset == 4


def test_follower_append_keeps_offsets_and_refuses_going_back(tmp_path, clock):
    log = open_log(tmp_path, clock)
    b1 = BatchBuilder(10, partition_leader_epoch=3).append(b"k", b"v", timestamp=1).build()
    log.truncate_fully_and_start_at(10)
    info = log.append(b1, -1, assign_offsets=False)
    assert (info.first_offset, info.last_offset) == (10, 10)
    b2 = BatchBuilder(15, partition_leader_epoch=4).append(b"k", b"v", timestamp=2).build()
    log.append(b2, -1, assign_offsets=False)                   # gap (compacted leader) ok
    assert log.log_end_offset == 16
    assert log.epoch_cache.entries == [(3, 10), (4, 15)]
    with pytest.raises(InvalidOffsetError):
        log.append(b1, -1, assign_offsets=False)


def test_roll_on_size_and_time_and_read_across_segments(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_ms=10_000)
    sizes = []
    for i in range(30):
        sizes.append(len(batch(2)))
        log.append(batch(2), 0)
    assert len(log.segments) >= 3
    assert all(s.size <= 2048 for s in log.segments)
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and bases[0] == 0
    recs = all_records(log)
    assert [r[0] for r in recs] == list(range(60))
    info = log.read(0, 10**6)
    assert len(info.slices) == len(log.segments)
    # max_offset (exclusive, e.g. the high watermark) bounds the read
    data = log.read_records_bytes(0, max_offset=20)
    assert [b.last_offset for b in iter_batches(data)][-1] == 19
    # time roll: first batch timestamp + segment.ms
    n = len(log.segments)
    log.append(batch(1, ts=1_000_000 + 20_000), 0)
    assert len(log.segments) == n + 1
    assert log.maybe_roll(clock.now) is False
    log.close()


def test_read_bounds(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for _ in range(5):
        log.append(batch(2), 0)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, 100)
    assert log.read(10, 100).slices == []
    one = log.read(3, 1)                       # min one batch, starts at the batch holding 3
    assert one.first_offset == 2 and len(one.slices) == 1
    assert log.read(3, 1, min_one_batch=False).slices == []
    assert log.read(4, 100, max_offset=4).slices == []


def test_a_batch_that_does_not_fit_is_never_skipped_for_the_next_segments(tmp_path, clock):
    # a Fetch's later partitions read with min_one_batch=False: when the batch at the
    # offset is larger than what is left, nothing is read (a smaller batch from the next
    # segment would leave the offsets of the big one out for good)
    log = open_log(tmp_path, clock)
    log.append(batch(1, value=b"x" * 1000), 0)        # offset 0, about 1.1 KB
    log.roll()
    log.append(batch(1, value=b"y"), 0)               # offset 1, in the next segment
    assert [s.base_offset for s in log.segments] == [0, 1]
    info = log.read(0, 200, min_one_batch=False)
    assert info.slices == [] and info.next_offset == 0
    assert log.read(0, 200).first_offset == 0       # min_one_batch: the big one alone
    assert [b.base_offset for b in iter_batches(log.read_records_bytes(0))] == [0, 1]


def test_offset_for_timestamp_and_special_values(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for i in range(20):
        log.append(batch(2, ts=1000 + 10 * i), 0)
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1011) == (4, 1020)
    assert log.offset_for_timestamp(1190) == (38, 1190)
    assert log.offset_for_timestamp(1191) is None
    assert log.offset_for_timestamp(-2) == (0, -1)
    assert log.offset_for_timestamp(-1) == (40, -1)
    assert log.offset_for_timestamp(-3) == (38, 1190)
    log.close()
    log = open_log(tmp_path, clock)
    assert log.offset_for_timestamp(1011) == (4, 1020)
    assert log.max_timestamp_offset() == (38, 1190)


def test_flush_policy(tmp_path, clock):
    log = open_log(tmp_path, clock, flush_messages=5, flush_ms=1000)
    log.append(batch(2), 0)
    assert log.recovery_point == 0
    log.append(batch(3), 0)
    assert log.recovery_point == 5                           # flush.messages reached
    log.append(batch(1), 0)
    assert not log.maybe_flush(clock.now + 999)
    assert log.maybe_flush(clock.now + 1000) and log.recovery_point == 6


def test_duplicate_only_answers_a_single_batch_append(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_bytes=64 * 1024)
    log.append(batch(2, pid=9, epoch=0, seq=0), 0)
    # a retried batch behind a new one: nothing is dropped silently, nothing stored
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(2, pid=9, epoch=0, seq=2) + batch(2, pid=9, epoch=0, seq=0), 0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(2, pid=9, epoch=0, seq=0) + batch(2, pid=9, epoch=0, seq=2), 0)
    assert log.log_end_offset == 2
    info = log.append(batch(2, pid=9, epoch=0, seq=2) + batch(1, pid=9, epoch=0, seq=4), 0)
    assert (info.first_offset, info.last_offset, info.duplicate) == (2, 4, False)
    assert log.append(batch(1, pid=9, epoch=0, seq=4), 0).duplicate
    # a follower appends many batches of the leader's, duplicates checked by the leader
    follower = Log.open(str(tmp_path / "topic-1"), small_config(segment_bytes=64 * 1024), clock)
    follower.append(log.read_records_bytes(0), assign_offsets=False)
    assert all_records(follower) == all_records(log) and follower.log_end_offset == 5


def test_duplicate_answers_the_original_log_append_time(tmp_path, clock):
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    clock.now = 5_000_000
    first = log.append(batch(2, pid=9, epoch=0, seq=0), 0)
    clock.now = 6_000_000
    dup = log.append(batch(2, pid=9, epoch=0, seq=0), 0)
    assert dup.duplicate and dup.log_append_time_ms == first.log_append_time_ms == 5_000_000
    log.close()
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")  # snapshot
    assert log.append(batch(2, pid=9, epoch=0, seq=0), 0).log_append_time_ms == 5_000_000
    create = open_log(tmp_path / "c", clock)
    create.append(batch(1, pid=9, epoch=0, seq=0), 0)
    assert create.append(batch(1, pid=9, epoch=0, seq=0), 0).log_append_time_ms == -1


def test_create_time_topic_resets_a_client_log_append_time_bit(tmp_path, clock):
    from storage.errors import InvalidTimestampError
    log = open_log(tmp_path, clock, message_timestamp_before_max_ms=1000,
                   message_timestamp_after_max_ms=1000)
    clock.now = 10_000_000
    sneaky = BatchBuilder(0, timestamp_type=1, log_append_time_ms=10_000_000)
    sneaky.append(b"k", b"v", timestamp=1)      # far outside the bounds
    raw = bytearray(sneaky.build())
    assert RecordBatch(raw).timestamp_type == 1
    with pytest.raises(InvalidTimestampError):   # checked on the base timestamp
        log.append(raw, 0)
    assert log.log_end_offset == 0
    ok = BatchBuilder(0, timestamp_type=1, log_append_time_ms=10_000_100)
    ok.append(b"k", b"v", timestamp=10_000_050)
    log.append(bytearray(ok.build()), 0)
    (stored,) = iter_batches(log.read_records_bytes(0))
    stored.validate()                            # the CRC was recomputed
    assert stored.timestamp_type == 0 and stored.max_timestamp == 10_000_100
    assert [r.timestamp for r in stored.records()] == [10_000_050]
    # max timestamp past the upper bound, base timestamp fine: refused
    late = BatchBuilder(0).append(b"k", b"v", timestamp=10_000_000) \
        .append(b"k", b"v", timestamp=10_005_000)
    with pytest.raises(InvalidTimestampError):
        log.append(bytearray(late.build()), 0)
    # a follower keeps the leader's bits
    follower = Log.open(str(tmp_path / "topic-1"), small_config(), clock)
    lat = BatchBuilder(0, timestamp_type=1, log_append_time_ms=3).append(b"k", b"v", timestamp=1)
    follower.append(bytearray(lat.build()), assign_offsets=False)
    assert next(iter_batches(follower.read_records_bytes(0))).timestamp_type == 1


def test_flush_fsyncs_every_segment_past_the_recovery_point(tmp_path, clock, monkeypatch):
    log = open_log(tmp_path, clock)
    log.append(batch(2), 0)
    log.flush()
    while len(log.segments) < 3:
        log.append(batch(2), 0)
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    log.flush()
    for seg in log.segments:                                   # all three: past the point
        assert {seg.fd, seg.index._fd, seg.time_index._fd} <= set(synced)
    assert log.recovery_point == log.log_end_offset
    synced.clear()
    active = log.active_segment
    log.append(batch(2), 0)
    log.flush()                                                # only the active one now
    assert active.fd in synced and log.segments[0].fd not in synced


def test_wrong_magic_is_refused_with_a_typed_error(tmp_path, clock):
    import struct
    import zlib

    from storage.errors import InvalidRecordError
    log = open_log(tmp_path, clock)
    body = struct.pack(">bbq", 1, 0, 1000) + struct.pack(">i", -1) + struct.pack(">i", 1) + b"v"
    v1 = struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body   # a magic 1 message
    future = batch(1)
    future[16] = 3                                                        # magic 3
    for raw in (bytearray(v1), future):
        with pytest.raises(InvalidRecordError) as ei:
            log.append(raw, 0)
        assert ei.value.code == 87 and "magic" in str(ei.value)
    assert log.log_end_offset == 0 and log.size_bytes == 0


@pytest.mark.parametrize("preallocate", [False, True])
def test_preallocate_sizes_the_active_file_only_when_asked(tmp_path, clock, preallocate):
    """Kafka's `preallocate` (default false): without it the active .log's apparent size
    is its data plus the bounded reservation ahead, never segment.bytes."""
    cfg = LogConfig.from_properties({"preallocate": str(preallocate).lower(),
                                     "segment.bytes": 64 * 1024 * 1024})
    assert cfg.preallocate is preallocate
    log = Log.open(str(tmp_path / "topic-0"), cfg, clock)
    for _ in range(20):
        log.append(batch(3))
    seg = log.active_segment
    apparent = os.path.getsize(seg.log_path)
    if preallocate:
        assert apparent == 64 * 1024 * 1024
    else:
        assert seg.size <= apparent <= seg.size + 256 * 1024
    for s in log.segments:              # a crash: recovery cuts the tail either way
        s.close_unclean()
    log.closed = True
    again = Log.open(log.dir, cfg, clock)
    assert [r[0] for r in all_records(again)] == list(range(60))
    again.append(batch(1))
    again.close()
    assert os.path.getsize(again.active_segment.log_path) == again.active_segment.size



def test_a_bound_at_or_past_the_log_end_reads_as_no_bound(tmp_path, clock):
    log = open_log(tmp_path, clock, segment_ms=10_000)
    for _ in range(30):
        log.append(batch(2), 0)
    assert len(log.segments) >= 3
    for start in (0, 7, 58):
        unbounded = log.read(start, 10**6)
        for bound in (60, 61, 10**9):      # the high watermark of a caught-up log, or more
            bounded = log.read(start, 10**6, max_offset=bound)
            assert bounded == unbounded
    assert log.read(60, 10**6, max_offset=60).slices == []
    log.close()


def test_read_point_is_where_a_read_of_the_high_watermark_starts(tmp_path, clock):
    """What an owner publishes for fronts that read its file (workers/partition_states.py):
    the positions at which `read` of the high watermark and of the LSO start."""
    log = open_log(tmp_path, clock)
    log.append(batch(3), 0)                     # offsets 0-2
    log.append(batch(2), 0)                     # 3-4
    seg = log.active_segment
    log.update_high_watermark(3)
    path, dev, ino, hw_pos, lso_pos, abort_end = log.read_point(3, 3)
    assert (path, (dev, ino), abort_end) == (seg.log_path, seg.file_id, -1)
    assert hw_pos == lso_pos == log.read(3, 1 << 20).slices[0].position
    assert hw_pos == log.read(0, 1 << 20, max_offset=3).slices[0].length
    log.update_high_watermark(5)                # the log end: where the next batch goes
    assert log.read_point(5, 3)[3:5] == (seg.size, hw_pos)
    log.append(batch(1), 0)
    assert log.read(5, 1 << 20).slices[0].position == seg.size - len(batch(1))
    log.update_high_watermark(6)
    log.roll()
    new = log.active_segment
    assert log.read_point(6, 6) == (new.log_path, *new.file_id, 0, 0, -1)
    log.append(batch(1), 0)
    assert log.read_point(5, 5) is None         # before the active segment
    log.close()



def test_read_point_follows_the_high_watermark_and_a_truncation(tmp_path, clock):
    """Positions found from the last one found (`Log._position_in`) match `read`'s, as
    the high watermark moves, into a batch, and after a follower's truncation rewrote
    the batches the last one was found in."""
    log = open_log(tmp_path, clock)
    for n in (3, 2, 4, 1, 2):                   # 0-2, 3-4, 5-8, 9, 10-11
        log.append(batch(n), 0)

    def pos(offset):
        return log.read(offset, 1 << 20).slices[0].position
    for hw in (3, 5, 5, 9, 10, 7, 10):
        log.update_high_watermark(hw)
        assert log.read_point(hw, hw)[3] == pos(hw), hw
    log.truncate_to(5)
    log.append(batch(1, value=b"y" * 300), 0)   # 5, longer than the batches it replaced
    log.append(batch(2), 0)                     # 6-7
    log.append(batch(5), 0)                     # 8-12
    for hw in (10, 11, 12):
        log.update_high_watermark(hw)
        assert log.read_point(hw, hw)[3] == pos(hw), hw
    log.close()


def test_read_point_of_an_unreadable_segment_is_none(tmp_path, clock, monkeypatch):
    """The owner publishes no read point then (fronts ask it), rather than failing the
    publish of every other partition's state."""
    log = open_log(tmp_path, clock)
    log.append(batch(3), 0)
    log.append(batch(2), 0)
    log.update_high_watermark(3)

    def fail(*_):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(log.active_segment, "translate_offset", fail)
    assert log.read_point(3, 3) is None
    assert log.read_point(5, 5)[3] == log.active_segment.size      # the log end: no read
    log.close()
