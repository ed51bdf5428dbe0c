import os

import pytest

from storage.batch import BatchBuilder, RecordBatch
from storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from storage.producer_state import (INT32_MAX, ProducerStateManager, decrement_sequence,
                                    increment_sequence, in_sequence)


def batch(pid, epoch, seq, n=1, offset=0, ts=1000, txn=False):
    b = BatchBuilder(offset, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     is_transactional=txn)
    for i in range(n):
        b.append(None, b"v", timestamp=ts)
    return RecordBatch(memoryview(bytearray(b.build())))


def append(m, b, first):
    info = m.prepare_append()
    dup = info.find_duplicate(b)
    if dup:
        return dup
    info.check(b)
    info.update(b, first, first + b.last_offset_delta)
    m.commit(info, first + b.last_offset_delta + 1)
    return None


def test_sequence_helpers_wrap():
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert decrement_sequence(1, 3) == INT32_MAX - 1
    assert in_sequence(INT32_MAX, 0) and in_sequence(4, 5) and not in_sequence(4, 6)


def test_duplicates_gaps_and_epochs():
    m = ProducerStateManager(None)
    assert append(m, batch(7, 0, 0, 3), 0) is None
    assert append(m, batch(7, 0, 3, 2), 3) is None
    dup = append(m, batch(7, 0, 0, 3), 99)
    assert (dup.first_offset, dup.last_offset) == (0, 2)
    with pytest.raises(OutOfOrderSequenceError):
        append(m, batch(7, 0, 6), 5)
    with pytest.raises(OutOfOrderSequenceError):
        append(m, batch(7, 1, 5), 5)                  # new epoch must start at 0
    assert append(m, batch(7, 1, 0), 5) is None
    with pytest.raises(InvalidProducerEpochError):
        append(m, batch(7, 0, 5), 6)
    assert append(m, batch(8, 3, 1234), 6) is None   # unknown producer: any sequence


def test_only_last_five_batches_are_deduplicated():
    m = ProducerStateManager(None)
    for i in range(7):
        append(m, batch(1, 0, i), i)
    assert append(m, batch(1, 0, 2), 50).first_offset == 2
    with pytest.raises(OutOfOrderSequenceError):
        append(m, batch(1, 0, 1), 50)                # evicted, and not in sequence


def test_sequence_wraps_at_int32():
    m = ProducerStateManager(None)
    append(m, batch(1, 0, INT32_MAX - 1, 2), 0)
    assert append(m, batch(1, 0, 0), 2) is None


def test_failed_append_leaves_state_untouched():
    m = ProducerStateManager(None)
    append(m, batch(1, 0, 0), 0)
    info = m.prepare_append()
    b = batch(1, 0, 1)
    info.check(b)
    info.update(b, 1, 1)
    with pytest.raises(OutOfOrderSequenceError):
        info.check(batch(1, 0, 5))
    assert m.last_entry(1).last_seq == 0


def test_snapshot_roundtrip_keeps_five_batches(tmp_path):
    m = ProducerStateManager(str(tmp_path))
    for i in range(6):
        append(m, batch(1, 2, i * 2, 2, ts=5000 + i), i * 2)
    append(m, batch(9, 0, 0, txn=True), 12)
    m.take_snapshot(13)
    assert os.path.exists(tmp_path / "00000000000000000013.snapshot")
    m2 = ProducerStateManager(str(tmp_path))
    assert m2.truncate_and_reload(0, 13, now_ms=6000) == 13
    e = m2.last_entry(1)
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches] == \
        [(2 * i, 2 * i + 1, 2 * i, 2 * i + 1) for i in range(1, 6)]
    assert e.producer_epoch == 2
    assert m2.last_entry(9).current_txn_first_offset == 12
    assert append(m2, batch(1, 2, 4, 2), 99).first_offset == 4


def test_corrupt_snapshot_is_skipped_and_newer_ones_dropped_on_truncate(tmp_path):
    m = ProducerStateManager(str(tmp_path))
    append(m, batch(1, 0, 0), 0)
    m.take_snapshot(1)
    append(m, batch(1, 0, 1), 1)
    m.take_snapshot(2)
    m.take_snapshot(5)
    p = tmp_path / "00000000000000000002.snapshot"
    data = bytearray(p.read_bytes())
    data[-1] ^= 0xFF
    p.write_bytes(bytes(data))
    m2 = ProducerStateManager(str(tmp_path))
    assert m2.truncate_and_reload(0, 3, now_ms=1000) == 1   # 5 > end dropped, 2 corrupt
    assert m2.snapshot_offsets() == [1]
    assert m2.last_entry(1).last_seq == 0


def test_expiry():
    m = ProducerStateManager(None, producer_id_expiration_ms=100)
    append(m, batch(1, 0, 0, ts=1000), 0)
    append(m, batch(2, 0, 0, ts=1080), 1)
    assert m.remove_expired_producers(1150) == 1
    assert m.last_entry(1) is None and m.last_entry(2) is not None


def marker(pid, epoch, commit=True, offset=0):
    from storage.batch import build_control_batch
    return RecordBatch(memoryview(bytearray(
        build_control_batch(offset, pid, epoch, commit, 0, 1000))))


def test_known_epoch_without_cached_batches_must_start_at_zero():
    """Kafka's checkSequence: only an entry with no known epoch takes any sequence."""
    m = ProducerStateManager(None)
    append(m, batch(5, 0, 0, 2, txn=True), 0)
    append(m, marker(5, 1, commit=False, offset=2), 2)   # the coordinator bumped the epoch
    e = m.last_entry(5)
    assert e.producer_epoch == 1 and not e.batches
    with pytest.raises(OutOfOrderSequenceError):
        append(m, batch(5, 1, 7), 3)
    assert append(m, batch(5, 1, 0), 3) is None
    # an entry known only from a batch without sequence (a coordinator's write) too
    info = m.prepare_append(validate=False)
    info.update(batch(6, 2, -1), 10, 10)
    m.commit(info, 11)
    with pytest.raises(OutOfOrderSequenceError):
        append(m, batch(6, 2, 4), 11)
    assert append(m, batch(6, 2, 0), 11) is None


def test_markers_of_the_same_epoch_keep_the_sequence_going():
    m = ProducerStateManager(None)
    append(m, batch(5, 0, 0, 3, txn=True), 0)
    append(m, marker(5, 0, commit=True, offset=3), 3)
    assert append(m, batch(5, 0, 3, 2, txn=True), 4) is None     # continues at 3
    append(m, marker(5, 0, commit=False, offset=6), 6)
    with pytest.raises(OutOfOrderSequenceError):
        append(m, batch(5, 0, 0, txn=True), 7)                   # not a restart at 0
    assert append(m, batch(5, 0, 5, txn=True), 7) is None


def test_any_sequence_once_retention_removed_the_producer():
    m = ProducerStateManager(None)
    append(m, batch(5, 0, 0, 3), 0)
    with pytest.raises(OutOfOrderSequenceError):
        append(m, batch(5, 0, 40), 3)
    m.on_log_start_offset_incremented(3)         # DeleteRecords/retention past its data
    assert m.last_entry(5) is None
    assert append(m, batch(5, 0, 40), 3) is None


def test_bumped_epoch_without_batches_survives_a_snapshot(tmp_path):
    m = ProducerStateManager(str(tmp_path))
    append(m, batch(5, 0, 0, 2, txn=True), 0)
    append(m, marker(5, 1, commit=True, offset=2), 2)
    m.take_snapshot(3)
    m2 = ProducerStateManager(str(tmp_path))
    assert m2.truncate_and_reload(0, 3, 1000) == 3
    assert m2.last_entry(5).producer_epoch == 1
    with pytest.raises(OutOfOrderSequenceError):
        append(m2, batch(5, 1, 9), 3)
    assert append(m2, batch(5, 1, 0), 3) is None
