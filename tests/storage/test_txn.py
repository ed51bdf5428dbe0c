"""Transactions in the storage layer: LSO, aborted transactions, recovery, truncation,
retention, follower appends, compaction (storage/log.py, storage/producer_state.py,
storage/cleaner.py; the txnindex file on its own: test_txn_index.py)."""
from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.batch import (CONTROL_MASK, TRANSACTIONAL_MASK, BatchBuilder, RecordBatch,
                           build_control_batch, iter_batches)
from storage.cleaner import LogCleaner
from storage.errors import (InvalidProducerEpochError, InvalidRecordError, InvalidTxnStateError,
                            TransactionCoordinatorFencedError)
from storage.log import Log, LogConfig
from storage.producer_state import read_end_txn_marker
from storage.txn_index import AbortedTxn


class Clock:
    def __init__(self, now=1_700_000_000_000):
        self.now = now

    def __call__(self):
        return self.now


def open_log(path, clock=None, **cfg):
    return Log.open(str(path), LogConfig(**cfg), clock or Clock())


def txn(log, pid, seq, values, epoch=0, key=b"k"):
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     is_transactional=True, clock=log.clock)
    for v in values:
        b.append(key if not isinstance(v, tuple) else v[0], v if not isinstance(v, tuple) else v[1])
    info = log.append(b.build(), 0)
    log.update_high_watermark(log.log_end_offset)
    return info


def plain(log, values, key=b"k"):
    b = BatchBuilder(clock=log.clock)
    for v in values:
        b.append(key if not isinstance(v, tuple) else v[0], v if not isinstance(v, tuple) else v[1])
    info = log.append(b.build(), 0)
    log.update_high_watermark(log.log_end_offset)
    return info


def end(log, pid, commit, epoch=0, coordinator_epoch=0):
    info = log.append_control(pid, epoch, commit, coordinator_epoch, 0)
    log.update_high_watermark(log.log_end_offset)
    return info


def committed_view(log, start=0):
    """What a read_committed consumer sees: records below the LSO, minus aborted
    transactions (the client algorithm: aborted list + markers), control records dropped."""
    lso = log.last_stable_offset
    aborted = sorted(log.collect_aborted_transactions(start, lso), key=lambda x: x[1])
    data = b""
    offset = start
    while offset < lso:     # fetch after fetch (a read stops at an emptied segment)
        info = log.read(offset, 1 << 30, max_offset=lso)
        if not info.slices:
            break
        data += b"".join(os.pread(s.fd, s.length, s.position) for s in info.slices)
        assert info.next_offset > offset
        offset = info.next_offset
    skipping: set[int] = set()
    out = []
    for b in iter_batches(memoryview(data)):
        while aborted and aborted[0][1] <= b.last_offset:
            skipping.add(aborted.pop(0)[0])
        if b.is_control:
            if b.producer_id in skipping and not read_end_txn_marker(b).commit:
                skipping.discard(b.producer_id)
            continue
        if b.is_transactional and b.producer_id in skipping:
            continue
        out.extend((r.offset, r.key, r.value) for r in b.records() if r.offset >= start)
    return out


# ================================================================ control records

@given(key=st.one_of(st.none(), st.binary(max_size=12)),
       value=st.one_of(st.none(), st.binary(max_size=12)),
       extra=st.integers(0, 2))
@settings(max_examples=300, deadline=None)
def test_control_record_decoder_never_crashes(key, value, extra):
    b = BatchBuilder(producer_id=1, producer_epoch=0, is_transactional=True, is_control=True)
    b.append(key, value, timestamp=1)
    for _ in range(extra):
        b.append(key, value, timestamp=1)
    batch = RecordBatch(b.build())
    try:
        marker = read_end_txn_marker(batch)
    except InvalidRecordError:
        return
    assert extra == 0 and len(key) >= 4 and len(value) >= 6
    version, kind = struct.unpack_from(">hh", key)
    assert marker.commit == (kind == 1) and version >= 0
    assert marker.coordinator_epoch == struct.unpack_from(">i", value, 2)[0]


@given(commit=st.booleans(), epoch=st.integers(-2 ** 31, 2 ** 31 - 1))
def test_control_batch_builder_roundtrip(commit, epoch):
    batch = RecordBatch(build_control_batch(5, 42, 3, commit, epoch, 1234, 7))
    batch.validate()
    both = CONTROL_MASK | TRANSACTIONAL_MASK
    assert batch.attributes & both == both
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.record_count,
            batch.partition_leader_epoch) == (5, 42, 3, 1, 7)
    assert read_end_txn_marker(batch) == (commit, epoch)


# ================================================================ LSO and markers

def test_lso_with_interleaved_producers(tmp_path):
    log = open_log(tmp_path / "t-0")
    assert log.last_stable_offset == 0 and log.first_unstable_offset is None
    txn(log, 1, 0, [b"a0"])                     # 0
    txn(log, 2, 0, [b"b0", b"b1"])              # 1-2
    plain(log, [b"n0"])                         # 3
    assert log.first_unstable_offset == 0 and log.last_stable_offset == 0
    assert log.has_ongoing_txn(1) and log.has_ongoing_txn(2) and not log.has_ongoing_txn(3)
    assert log.producer_state.ongoing_txns == {0: 1, 1: 2}
    end(log, 1, commit=False)                   # 4: abort pid 1
    assert log.last_stable_offset == 1 and not log.has_ongoing_txn(1)
    txn(log, 1, 1, [b"a1"])                     # 5: pid 1's next transaction
    end(log, 2, commit=True)                    # 6
    assert log.last_stable_offset == 5
    end(log, 1, commit=True)                    # 7
    assert log.last_stable_offset == 8 == log.log_end_offset
    assert log.collect_aborted_transactions(0, 8) == [(1, 0)]
    assert log.collect_aborted_transactions(5, 8) == []
    (entry,) = log.active_segment.txn_index.entries
    assert entry == AbortedTxn(1, 0, 4, 1)      # LSO after the abort: pid 2's first offset
    assert [v for _, _, v in committed_view(log)] == [b"b0", b"b1", b"n0", b"a1"]


def test_read_point_names_the_lso_position_and_the_last_abort(tmp_path):
    log = open_log(tmp_path / "t-0")
    plain(log, [b"n0"])                         # 0
    txn(log, 1, 0, [b"a0"])                     # 1
    plain(log, [b"n1"])                         # 2
    lso_pos = log.read(1, 1 << 20).slices[0].position
    assert log.read_point(3, log.last_stable_offset) == (
        log.active_segment.log_path, *log.active_segment.file_id, log.active_segment.size,
        lso_pos, -1)
    end(log, 1, commit=False)                   # 3: the abort's entry ends there
    point = log.read_point(4, 4)
    assert point[3:] == (log.active_segment.size, log.active_segment.size, 3)


def test_lso_is_bounded_by_high_watermark(tmp_path):
    log = open_log(tmp_path / "t-0")
    plain(log, [b"x"] * 3)
    log.append(BatchBuilder(producer_id=9, producer_epoch=0, base_sequence=0,
                            is_transactional=True).append(b"k", b"v").build(), 0)
    log.update_high_watermark(2)
    assert log.last_stable_offset == 2
    log.update_high_watermark(4)
    assert log.last_stable_offset == 3
    log.append_control(9, 0, True, 0, 0)
    # the marker is not replicated yet: the transaction stays unstable
    assert log.first_unstable_offset == 3 and log.last_stable_offset == 3
    log.update_high_watermark(5)
    assert log.first_unstable_offset is None and log.last_stable_offset == 5


def test_marker_fencing_and_producer_rules(tmp_path):
    log = open_log(tmp_path / "t-0")
    txn(log, 1, 0, [b"a"], epoch=3)
    with pytest.raises(InvalidProducerEpochError):
        log.append_control(1, 2, True, 0, 0)
    with pytest.raises(InvalidTxnStateError):     # plain write in the middle of a transaction
        log.append(BatchBuilder(producer_id=1, producer_epoch=3, base_sequence=1)
                   .append(b"k", b"v").build(), 0)
    end(log, 1, commit=True, epoch=3, coordinator_epoch=5)
    assert log.producer_state.last_entry(1).coordinator_epoch == 5
    with pytest.raises(TransactionCoordinatorFencedError) as e:
        log.append_control(1, 3, False, 4, 0)
    assert e.value.code == 52
    end(log, 1, commit=False, epoch=3, coordinator_epoch=5)   # no open txn: nothing indexed
    assert log.active_segment.txn_index.entries == []
    with pytest.raises(InvalidRecordError):       # clients never write control batches
        log.append(build_control_batch(0, 1, 3, True, 5, 1), 0)
    end_offset = log.log_end_offset
    # a marker from a newer producer epoch (the coordinator fenced the producer)
    end(log, 1, commit=False, epoch=4, coordinator_epoch=6)
    assert log.producer_state.last_entry(1).producer_epoch == 4
    assert log.log_end_offset == end_offset + 1


def test_aborted_transactions_across_segments(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    txn(log, 1, 0, [b"a" * 50])                   # 0, pid 1 aborted later
    for i in range(6):
        txn(log, 2, i, [b"b" * 50])               # 1..6, committed later
    end(log, 1, commit=False)                     # 7
    txn(log, 3, 0, [b"c" * 50])                   # 8
    end(log, 2, commit=True)                      # 9
    for i in range(4):
        plain(log, [b"n" * 50])                   # 10..13
    end(log, 3, commit=False)                     # 14
    assert len(log.segments) >= 4
    seg_of = {t.last_offset: s.base_offset for s in log.segments for t in s.txn_index.entries}
    assert set(seg_of) == {7, 14}
    assert seg_of[7] > 0                          # the entry lives with its marker
    assert log.collect_aborted_transactions(0, 15) == [(1, 0), (3, 8)]
    assert log.collect_aborted_transactions(8, 9) == [(3, 8)]
    assert log.collect_aborted_transactions(1, 3) == [(1, 0)]
    assert log.collect_aborted_transactions(9, 15) == [(3, 8)]
    assert log.collect_aborted_transactions(15, 15) == []
    got = [v[:1] for _, _, v in committed_view(log)]
    assert got == [b"b"] * 6 + [b"n"] * 4
    info = log.read(0, 10**6, max_offset=log.last_stable_offset)
    assert info.next_offset == log.log_end_offset
    info = log.read(0, 1)
    assert info.first_offset == 0 and info.next_offset == 1


# ================================================================ durability

def _scenario(log):
    txn(log, 1, 0, [b"a0"])                       # 0 aborted
    txn(log, 2, 0, [b"b0"])                       # 1 committed
    end(log, 1, commit=False)                     # 2
    end(log, 2, commit=True)                      # 3
    txn(log, 3, 0, [b"c0"])                       # 4 open


def test_clean_restart_keeps_open_transactions(tmp_path):
    log = open_log(tmp_path / "t-0")
    _scenario(log)
    log.close()
    log = open_log(tmp_path / "t-0")
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 4 and log.has_ongoing_txn(3)
    assert log.collect_aborted_transactions(0, 5) == [(1, 0)]
    end(log, 3, commit=False)
    assert log.collect_aborted_transactions(0, 6) == [(1, 0), (3, 4)]
    assert log.last_stable_offset == 6


@pytest.mark.parametrize("damage", ["torn-tail", "lost-txnindex", "corrupt-txnindex",
                                    "no-snapshots"])
def test_recovery_rebuilds_txnindex_and_lso(tmp_path, damage):
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=300)
    txn(log, 9, 0, [b"z" * 60])                   # 0: a long transaction over segments
    for i in range(3):
        plain(log, [b"p" * 60])
    _scenario_base = log.log_end_offset           # 4
    txn(log, 1, 0, [b"a0"])
    txn(log, 2, 0, [b"b0"])
    end(log, 1, commit=False)
    end(log, 2, commit=True)
    txn(log, 3, 0, [b"c0"])                       # open
    assert len(log.segments) >= 2
    expect_aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    assert expect_aborted == [(1, _scenario_base)]
    leo = log.log_end_offset
    last = log.active_segment
    log.close(clean=False)
    if damage == "torn-tail":
        with open(last.log_path, "r+b") as f:     # garbage after the last batch
            f.seek(last.size)
            f.write(b"\x00\x00\x00\x00\x00\x00\x00\x63\x00\x00\x01\x00garbage")
    elif damage in ("lost-txnindex", "corrupt-txnindex"):
        for name in os.listdir(d):
            if name.endswith(".txnindex"):
                p = os.path.join(d, name)
                if damage == "lost-txnindex":
                    os.unlink(p)
                else:
                    with open(p, "r+b") as f:
                        f.write(b"\x00\x07")     # version 7
    elif damage == "no-snapshots":
        for name in os.listdir(d):
            if name.endswith(".snapshot") or name.endswith(".txnindex"):
                os.unlink(os.path.join(d, name))
    if damage == "lost-txnindex":
        # an unclean open re-validates only past the recovery point: force it to 0
        for name in os.listdir(d):
            if name == "recovery-point-offset-checkpoint":
                os.unlink(os.path.join(d, name))
    log = open_log(d, segment_bytes=300)
    log.update_high_watermark(log.log_end_offset)
    assert log.log_end_offset == leo
    assert log.collect_aborted_transactions(0, leo) == expect_aborted
    assert log.first_unstable_offset == 0          # pid 9's transaction is still open
    assert log.has_ongoing_txn(9) and log.has_ongoing_txn(3)
    end(log, 9, commit=True)
    assert log.last_stable_offset == leo - 1      # pid 3's c0
    entries = [t for s in log.segments for t in s.txn_index.entries]
    assert [(t.producer_id, t.first_offset) for t in entries] == expect_aborted


def test_recovery_cutting_a_marker_reopens_its_transaction(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d)
    txn(log, 1, 0, [b"a0"])
    end(log, 1, commit=False)
    seg = log.active_segment
    marker_pos = seg.translate_offset(1).position
    log.close(clean=False)
    with open(seg.log_path, "r+b") as f:         # the marker is torn
        f.seek(marker_pos + 30)
        f.write(b"\xff" * 8)
    log = open_log(d)
    log.update_high_watermark(log.log_end_offset)
    assert log.log_end_offset == 1
    assert log.active_segment.txn_index.entries == []
    assert log.has_ongoing_txn(1) and log.last_stable_offset == 0


def test_truncation_drops_entries_and_reopens_transactions(tmp_path):
    d = tmp_path / "t-0"
    log = open_log(d, segment_bytes=300, file_delete_delay_ms=0)
    txn(log, 1, 0, [b"a" * 60])                   # 0
    end(log, 1, commit=False)                     # 1
    txn(log, 2, 0, [b"b" * 60])                   # 2
    for i in range(3):
        plain(log, [b"p" * 60])                   # 3..5
    end(log, 2, commit=False)                     # 6
    assert len(log.segments) >= 2
    txnindex_files = {s.txn_index.path for s in log.segments if s.txn_index.entries}
    assert len(txnindex_files) == 2
    log.truncate_to(6)                            # cuts pid 2's marker
    assert log.collect_aborted_transactions(0, 6) == [(1, 0)]
    assert log.has_ongoing_txn(2)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    log.truncate_to(1)                            # and pid 1's
    assert log.collect_aborted_transactions(0, 1) == []
    assert log.has_ongoing_txn(1) and not log.has_ongoing_txn(2)
    log.delete_expired_files(log.clock.now + 1)
    assert not any(os.path.exists(p) for p in txnindex_files)
    log.close()
    log = open_log(d, segment_bytes=300)
    assert log.has_ongoing_txn(1) and log.collect_aborted_transactions(0, 1) == []


def test_retention_deletes_txnindex_with_its_segment(tmp_path):
    clock = Clock()
    d = tmp_path / "t-0"
    log = open_log(d, clock, segment_bytes=300, retention_ms=1000, file_delete_delay_ms=0)
    for i in range(3):
        txn(log, 1, i * 2, [b"a" * 60, b"a" * 60])
        end(log, 1, commit=False)
    clock.now += 10_000
    plain(log, [b"new"])
    paths = [s.txn_index.path for s in log.segments[:-1] if s.txn_index.entries]
    assert paths and all(os.path.exists(p) for p in paths)
    assert log.enforce_retention() > 0
    log.delete_expired_files(clock.now + 1)
    assert not any(os.path.exists(p) for p in paths)
    assert log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset) == []


def test_follower_append_copies_transaction_state(tmp_path):
    leader = open_log(tmp_path / "l-0", segment_bytes=400)
    follower = open_log(tmp_path / "f-0", segment_bytes=400)
    txn(leader, 1, 0, [b"a" * 40])
    txn(leader, 2, 0, [b"b" * 40])
    end(leader, 1, commit=False)
    plain(leader, [b"n" * 40] * 3)
    end(leader, 2, commit=True)
    txn(leader, 3, 0, [b"c" * 40])
    end(leader, 3, commit=False)
    txn(leader, 4, 0, [b"d"])                     # open
    data = leader.read_records_bytes(0)
    # copy as fetches of two batches each (data and markers in one append)
    chunks = [bytes(b.buffer[:b.size]) for b in iter_batches(memoryview(data))]
    for i in range(0, len(chunks), 2):
        follower.append(bytearray(b"".join(chunks[i:i + 2])), assign_offsets=False)
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.last_stable_offset == leader.last_stable_offset
    assert follower.producer_state.ongoing_txns == leader.producer_state.ongoing_txns
    le = [t for s in leader.segments for t in s.txn_index.entries]
    fe = [t for s in follower.segments for t in s.txn_index.entries]
    assert fe == le and len(fe) == 2


# ================================================================ compaction

def test_compaction_removes_aborted_data_and_keeps_committed(tmp_path):
    clock = Clock()
    d = tmp_path / "c-0"
    log = open_log(d, clock, segment_bytes=600, cleanup_policy="compact",
                   min_cleanable_dirty_ratio=0.0, delete_retention_ms=1000,
                   file_delete_delay_ms=0)
    plain(log, [(b"k1", b"v1"), (b"k2", b"v2")])  # 0-1
    txn(log, 7, 0, [(b"k1", b"aborted1")])          # 2: aborted, later key for k1
    txn(log, 8, 0, [(b"k2", b"committed2")])        # 3
    end(log, 7, commit=False)                       # 4
    end(log, 8, commit=True)                        # 5
    txn(log, 7, 1, [(b"k3", b"aborted3")], epoch=0)  # 6: aborted again
    end(log, 7, commit=False)                       # 7
    txn(log, 9, 0, [(b"k4", b"open")])              # 8: open: never cleaned
    for i in range(6):
        plain(log, [(b"f%d" % i, b"x" * 80)])       # fillers to roll segments
    before = committed_view(log)
    assert {(k, v) for _, k, v in before} >= {(b"k1", b"v1"), (b"k2", b"committed2")}
    cleaner = LogCleaner(log)
    cleaner.clean_all()
    assert cleaner.passes_completed == 1
    after = committed_view(log)
    assert after == [r for r in before if r[1] != b"k2" or r[2] != b"v2"]
    values = [r.value for s in log.segments for b in s.iter_batches() if not b.is_control
              for r in b.records()]
    assert b"aborted1" not in values and b"aborted3" not in values
    assert b"v1" in values and b"open" in values          # committed k1 kept: aborted k1 ignored
    # producer 7's data is gone: its ABORT markers got a delete horizon but stay until it
    markers = [(b.base_offset, b.delete_horizon_ms) for s in log.segments
               for b in s.iter_batches() if b.is_control]
    # producer 8's COMMIT stays as it is: its data is still there; so does producer 7's
    # second ABORT: the aborted batch at 6 is its last batch, kept empty (sequence state)
    assert markers == [(4, clock.now + 1000), (5, None), (7, None)]
    empty = [b for s in log.segments for b in s.iter_batches() if b.base_offset == 6]
    assert len(empty) == 1 and empty[0].record_count == 0 and empty[0].is_transactional
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [(7, 2), (7, 6)]
    # the open transaction blocks the cleaner; once committed, after the horizon the
    # markers and their index entries go
    assert cleaner.first_uncleanable_offset(clock.now) == 8
    end(log, 9, commit=True)
    clock.now += 5000
    for i in range(6):
        plain(log, [(b"g%d" % i, b"x" * 80)])
    cleaner.clean_all()
    markers = [b.base_offset for s in log.segments for b in s.iter_batches() if b.is_control]
    assert cleaner.passes_completed == 2
    assert markers == [5, 7, 9 + 6]               # pid 9's COMMIT: its data is there
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [(7, 6)]
    final = committed_view(log)
    assert [(k, v) for _, k, v in final if k in (b"k1", b"k2", b"k3")] == \
        [(b"k1", b"v1"), (b"k2", b"committed2")]
    assert (b"k4", b"open") in [(k, v) for _, k, v in final]
    # the cleaned log survives a restart with the same view
    log.close(clean=False)
    log = open_log(d, clock, segment_bytes=600, cleanup_policy="compact")
    log.update_high_watermark(log.log_end_offset)
    assert committed_view(log) == final and not log.has_ongoing_txn(9)
    assert log.first_unstable_offset is None


def test_compaction_stops_at_first_unstable_offset(tmp_path):
    log = open_log(tmp_path / "c-0", segment_bytes=300, cleanup_policy="compact",
                   min_cleanable_dirty_ratio=0.0)
    txn(log, 5, 0, [(b"a", b"open-a")])             # 0: open for the whole test
    for i in range(8):
        plain(log, [(b"a", b"x" * 60)])
    cleaner = LogCleaner(log)
    assert cleaner.first_uncleanable_offset(log.clock()) == 0
    assert not cleaner.needs_cleaning()
    end(log, 5, commit=True)
    assert cleaner.first_uncleanable_offset(log.clock()) == log.active_segment.base_offset


def test_dump_log_prints_markers_and_txnindex(tmp_path, capsys):
    from mpbroker.cli.main import main
    log = open_log(tmp_path / "t-0")
    txn(log, 4, 0, [b"a"])
    end(log, 4, commit=False, coordinator_epoch=3)
    seg = log.active_segment
    log.close()
    assert main(["dump-log", seg.log_path, "--print-data-log"]) == 0
    out = capsys.readouterr().out
    assert "isControl: true" in out and "endTxnMarker: ABORT coordinatorEpoch: 3" in out
    assert main(["dump-log", seg.txn_index_path]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == \
        "version: 0 producerId: 4 firstOffset: 0 lastOffset: 1 lastStableOffset: 2"


def test_interrupted_compaction_swap_rebuilds_txnindex(tmp_path):
    """A crash between writing `<base>.log.swap` and the final rename: the open finishes
    the swap and rebuilds that segment's txnindex from the batches (its own index file
    did not survive), so read_committed consumers still see the same records."""
    clock = Clock()
    d = tmp_path / "c-0"
    cfg = dict(segment_bytes=600, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
               delete_retention_ms=10**9, file_delete_delay_ms=0)
    log = open_log(d, clock, **cfg)
    for i in range(3):
        txn(log, 7, i, [(b"a%d" % i, b"aborted")])
        plain(log, [(b"p%d" % i, b"plain")])
        txn(log, 8, i, [(b"c%d" % i, b"committed")])
        end(log, 7, commit=False)
        end(log, 8, commit=True)
    for i in range(6):
        plain(log, [(b"f%d" % i, b"x" * 80)])
    LogCleaner(log).clean_all()
    view = committed_view(log)
    assert not any(v == b"aborted" for _, _, v in view)
    # the second segment holds producer 7's last (aborted, kept empty) batch and markers
    seg = log.segments[1]
    entries = [(t.producer_id, t.first_offset, t.last_offset) for t in seg.txn_index.entries]
    assert entries and any(b.record_count == 0 for b in seg.iter_batches())
    log.flush()
    log.checkpoint()        # only the swapped segment is re-read on open
    log.close(clean=False)
    os.rename(seg.log_path, seg.log_path + ".swap")
    for p in (seg.txn_index_path, seg.index_path):
        if os.path.exists(p):
            os.rename(p, p + ".swap")
    log = open_log(d, clock, **cfg)
    log.update_high_watermark(log.log_end_offset)
    assert os.path.exists(seg.log_path) and not os.path.exists(seg.log_path + ".swap")
    again = log.segments[1]
    assert again.base_offset == seg.base_offset
    assert [(t.producer_id, t.first_offset, t.last_offset)
            for t in again.txn_index.entries] == entries
    assert committed_view(log) == view
    assert log.first_unstable_offset is None
