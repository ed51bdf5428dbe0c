"""Data leaving a log (storage/log_retention.py): retention by time and bytes bounded by
the high watermark, the file delete delay, DeleteRecords, follower truncation."""
import os

import pytest

from storage.errors import OffsetOutOfRangeError
from tests.storage.log_harness import all_records, batch, open_log


def test_retention_by_time_bytes_and_hw_bound(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=1000)
    for i in range(40):
        log.append(batch(2, ts=clock.now - 5000 + i), 0)
    n = len(log.segments)
    assert log.enforce_retention(clock.now) == 0            # high watermark still 0
    log.update_high_watermark(40)
    assert log.enforce_retention(clock.now) == 2             # only below the HW (40)
    assert log.log_start_offset == log.segments[0].base_offset == 40
    log.update_high_watermark(80)
    assert log.enforce_retention(clock.now) == n - 2         # active one too: rolls first
    assert log.log_start_offset == log.log_end_offset == 80 and log.size_bytes == 0
    assert log.append(batch(1), 0).first_offset == 80
    assert not [f for f in os.listdir(log.dir) if f.endswith(".deleted")]
    log.close()


def test_retention_bytes(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_bytes=3000, retention_ms=-1)
    for i in range(60):
        log.append(batch(2), 0)
    log.update_high_watermark(log.log_end_offset)
    log.enforce_retention()
    assert log.size_bytes <= 3000 + 2048 and log.size_bytes > 3000 - 2048
    assert [r[0] for r in all_records(log)] == list(range(log.log_start_offset, 120))


def test_file_delete_delay(tmp_path, clock):
    log = open_log(tmp_path, clock, retention_ms=0, file_delete_delay_ms=60_000)
    for i in range(30):
        log.append(batch(2, ts=1), 0)
    log.update_high_watermark(log.log_end_offset)
    log.enforce_retention(clock.now)
    deleted = [f for f in os.listdir(log.dir) if f.endswith(".deleted")]
    assert deleted
    log.enforce_retention(clock.now + 59_999)
    assert [f for f in os.listdir(log.dir) if f.endswith(".deleted")]
    log.enforce_retention(clock.now + 60_000)
    assert not [f for f in os.listdir(log.dir) if f.endswith(".deleted")]


def test_delete_records_before(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for i in range(30):
        log.append(batch(2, pid=1, epoch=0, seq=2 * i), 2)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(10)
    log.update_high_watermark(50)
    assert log.delete_records_before(33) == 33
    assert log.segments[0].base_offset <= 33 < (log.segments[1].base_offset
                                                if len(log.segments) > 1 else 10**9)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(32, 100)
    assert log.read(33, 100).first_offset == 32              # whole batch 32-33
    assert log.epoch_cache.entries == [(2, 33)]
    assert log.delete_records_before(-1) == 50
    log.close()
    log = open_log(tmp_path, clock)
    assert log.log_start_offset == 50 and log.high_watermark == 50


def test_truncate_to(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for i in range(30):
        log.append(batch(2, pid=1, epoch=0, seq=2 * i), i // 10)
    log.update_high_watermark(60)
    assert log.truncate_to(25)
    assert log.log_end_offset == 24 and log.high_watermark == 24
    assert log.epoch_cache.entries == [(0, 0), (1, 20)]
    assert [r[0] for r in all_records(log)] == list(range(24))
    # producer state is rolled back too: seq 24 is next, not 60
    info = log.append(batch(2, pid=1, epoch=0, seq=24), 3)
    assert info.first_offset == 24 and not info.duplicate
    assert log.truncate_to(0)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    log.append(batch(1), 4)
    assert [r[0] for r in all_records(log)] == [0]
