"""An append that fails at any step leaves the log exactly as before (storage/log.py).

Faults are injected at the system-call level: `os.pwrite`, `os.write`, `os.fsync`,
`os.posix_fallocate`, `os.ftruncate` and `os.open` raise (ENOSPC by default) for the
files of one step only, identified by the path of the descriptor.
"""
from __future__ import annotations

import contextlib
import errno
import os

import pytest

from storage.batch import BatchBuilder, iter_batches
from storage.errors import KafkaStorageError
from storage.log import Log, LogConfig


class Clock:
    def __init__(self, now=1_000_000):
        self.now = now

    def __call__(self):
        self.now += 1           # every append a larger timestamp: the time index grows
        return self.now


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@contextlib.contextmanager
def failing(monkeypatch, match, err=errno.ENOSPC, calls=("pwrite", "write", "fsync",
                                                        "posix_fallocate", "open"),
            partial=False):
    """Make the listed os calls fail with `err` on paths for which `match(path)` holds.

    `partial`: the first failing pwrite writes half its bytes first (a short write
    before the disk filled up).  Yields a list of the paths that failed."""
    hits: list[str] = []
    real = {name: getattr(os, name) for name in calls}

    def fd_call(name):
        def call(fd, *args):
            path = _fd_path(fd)
            if match(path):
                hits.append(path)
                if partial and name == "pwrite" and len(hits) == 1 and len(args[0]) > 1:
                    data, pos = args
                    return real[name](fd, bytes(data)[:len(data) // 2], pos)
                raise OSError(err, os.strerror(err), path)
            return real[name](fd, *args)
        return call

    def open_call(path, flags, *args, **kw):
        if flags & (os.O_WRONLY | os.O_RDWR) and match(os.fspath(path)) and \
                not os.path.exists(path):
            hits.append(os.fspath(path))
            raise OSError(err, os.strerror(err), path)
        return real["open"](path, flags, *args, **kw)

    for name in calls:
        monkeypatch.setattr(os, name, open_call if name == "open" else fd_call(name))
    try:
        yield hits
    finally:
        for name in calls:
            monkeypatch.setattr(os, name, real[name])


def plain(value: bytes, pid=-1, seq=-1, txn=False, epoch=0):
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch if pid >= 0 else -1,
                     base_sequence=seq, is_transactional=txn)
    b.append(b"k", value, timestamp=1_000_000 + int(value.split(b"-")[-1]))
    return bytearray(b.build())


def state(log: Log) -> dict:
    """Everything an append changes, in memory and on disk."""
    segs = []
    for seg in log.segments:
        with open(seg.log_path, "rb") as f:
            data = f.read()
        assert data[seg.size:].count(0) == len(data) - seg.size, "bytes past the end"
        segs.append((seg.base_offset, seg.size, data[:seg.size], seg.active,
                     seg.index.all_entries(), seg.time_index.all_entries(),
                     list(seg.txn_index.entries), seg.max_timestamp_so_far,
                     seg.bytes_since_last_index_entry))
    ps = log.producer_state
    return {"next": log.next_offset, "hw": log.high_watermark, "segments": segs,
            "epochs": log.epoch_cache.entries,
            "producers": {pid: (e.producer_epoch, e.last_seq, e.current_txn_first_offset)
                          for pid, e in ps.producers.items()},
            "ongoing": dict(ps.ongoing_txns), "lso": log.last_stable_offset}


def values(log: Log) -> list[tuple[int, bytes]]:
    data = log.read_records_bytes(log.log_start_offset)
    return [(r.offset, r.value) for b in iter_batches(data) for r in b.records()
            if not b.is_control]


def ends(*suffixes):
    return lambda p: p.endswith(suffixes)


# step -> (config, how the failing append is made, which files fail)
STEPS = {
    "data": ({}, "plain", ends(".log")),
    "data-short-write": ({}, "plain", ends(".log")),
    "offset-index": ({}, "plain", ends(".index")),
    "time-index": ({}, "plain", ends(".timeindex")),
    "producer-state": ({"segment_bytes": 600}, "plain", ends(".snapshot.tmp")),
    "new-segment": ({"segment_bytes": 600}, "plain", lambda p: p.endswith(".log") and
                    "00000000000000000000" not in p),
    "txn-index": ({}, "abort", ends(".txnindex")),
    "epoch-checkpoint": ({}, "new-epoch", ends("leader-epoch-checkpoint.tmp")),
    "flush": ({"flush_messages": 1}, "plain", ends(".log")),   # fsync only
}


def _setup(tmp_path, cfg):
    base = dict(segment_bytes=64 * 1024, index_interval_bytes=0, segment_index_bytes=4096)
    base.update(cfg)
    log = Log.open(str(tmp_path / "t-0"), LogConfig(**base), Clock())
    acked = []
    for i in range(4):
        _ack(log, acked, b"v-%d" % i)
    info = log.append(plain(b"t-10", pid=8, seq=0, txn=True), 0)
    log.update_high_watermark(log.log_end_offset)
    acked.append((info.first_offset, b"t-10"))
    return log, acked


def _next_seq(acked):
    return sum(1 for _, v in acked if v.startswith(b"v-"))


def _ack(log, acked, value):
    info = log.append(plain(value, pid=7, seq=_next_seq(acked)), 0)
    log.update_high_watermark(log.log_end_offset)
    acked.append((info.first_offset, value))


def _failing_append(log, how, seq):
    if how == "plain":
        return log.append(plain(b"v-99", pid=7, seq=seq), 0)
    if how == "abort":
        return log.append_control(8, 0, False, 0, 0)
    return log.append(plain(b"v-99", pid=7, seq=seq), 1)          # new leader epoch


@pytest.mark.parametrize("step", sorted(STEPS))
def test_failed_append_leaves_the_log_as_before(tmp_path, monkeypatch, step):
    cfg, how, match = STEPS[step]
    log, acked = _setup(tmp_path, cfg)
    if step in ("producer-state", "new-segment"):
        n = len(plain(b"v-99", pid=7, seq=0))
        while log.active_segment.size + 2 * n <= 600:            # the next append rolls
            _ack(log, acked, b"v-%d" % len(acked))
        _ack(log, acked, b"v-%d" % len(acked))
        assert log.active_segment.size + n > 600
    before = state(log)
    calls = ("fsync",) if step == "flush" else ("pwrite", "write", "fsync", "posix_fallocate",
                                                "open")
    with failing(monkeypatch, match, partial=step == "data-short-write", calls=calls) as hits:
        with pytest.raises(KafkaStorageError) as ei:
            _failing_append(log, how, _next_seq(acked))
    assert hits, "the fault was not hit"
    assert ei.value.code == 56 and ei.value.disk_full and ei.value.errno == errno.ENOSPC
    if step == "producer-state" or step == "new-segment":
        assert len(log.segments) == len(before["segments"])
    assert state(log) == before
    # the same offsets go to the next append, which now succeeds: no offset twice
    info = log.append(plain(b"v-100", pid=7, seq=_next_seq(acked)), 0)
    assert info.first_offset == before["next"] and not info.duplicate
    log.update_high_watermark(log.log_end_offset)
    expected = [a for a in acked] + [(info.first_offset, b"v-100")]
    assert values(log) == expected
    # and a crash right now recovers exactly that
    for seg in log.segments:
        seg.close_unclean()
    log.closed = True
    log = Log.open(log.dir, log.config, Clock())
    assert values(log) == expected
    log.close()


def test_retry_of_a_failed_idempotent_batch_is_not_a_duplicate(tmp_path, monkeypatch):
    """The producer state is undone too: the retry is appended, not answered as a
    duplicate of offsets that were never written."""
    log, acked = _setup(tmp_path, {})
    with failing(monkeypatch, ends(".log")):
        with pytest.raises(KafkaStorageError):
            log.append(plain(b"v-4", pid=7, seq=4), 0)
    info = log.append(plain(b"v-4", pid=7, seq=4), 0)
    assert not info.duplicate and info.first_offset == acked[-1][0] + 1
    assert values(log)[-1] == (info.first_offset, b"v-4")


def test_io_error_is_not_disk_full(tmp_path, monkeypatch):
    log, acked = _setup(tmp_path, {})
    before = state(log)
    with failing(monkeypatch, ends(".index"), err=errno.EIO):
        with pytest.raises(KafkaStorageError) as ei:
            log.append(plain(b"v-99", pid=7, seq=4), 0)
    assert not ei.value.disk_full and ei.value.log_consistent
    assert state(log) == before


def test_undo_that_fails_takes_the_log_offline(tmp_path, monkeypatch):
    """EIO on the index write, then on the truncation that would undo the data."""
    log, acked = _setup(tmp_path, {})
    with failing(monkeypatch, ends(".index"), err=errno.EIO, calls=("pwrite",)), \
            failing(monkeypatch, ends(".log"), err=errno.EIO, calls=("ftruncate",)) as hits:
        with pytest.raises(KafkaStorageError) as ei:
            log.append(plain(b"v-99", pid=7, seq=4), 0)
    assert hits
    assert not ei.value.log_consistent and not ei.value.disk_full
    assert log.offline
    with pytest.raises(KafkaStorageError):
        log.append(plain(b"v-100", pid=7, seq=4), 0)
    with pytest.raises(KafkaStorageError):
        log.read(0, 1000)


def test_delete_records_works_on_a_full_disk(tmp_path, monkeypatch):
    """DeleteRecords frees space, so a full disk must not stop it: the checkpoint of
    the new log start is written by the next periodic checkpoint."""
    log, acked = _setup(tmp_path, {"segment_bytes": 600})
    while len(log.segments) < 3:
        _ack(log, acked, b"v-%d" % len(acked))
    cut = log.segments[1].base_offset
    with failing(monkeypatch, lambda p: "checkpoint" in p) as hits:
        assert log.delete_records_before(cut) == cut
    assert hits and log.log_start_offset == cut and log.segments[0].base_offset == cut
    log.checkpoint()                           # room again
    log.close()
    assert Log.open(log.dir, log.config, Clock()).log_start_offset == cut


def test_an_index_that_refuses_its_entry_leaves_the_log_as_before(tmp_path, monkeypatch):
    """Not only OSError: any StorageError after the data was written (an index that
    refuses the entry) is undone as well, so the offsets are not taken twice."""
    from storage.errors import InvalidOffsetError
    from storage.index import OffsetIndex
    log, acked = _setup(tmp_path, {})
    before = state(log)

    def refuse(self, offset, position):
        raise InvalidOffsetError("refused")
    monkeypatch.setattr(OffsetIndex, "append", refuse)
    with pytest.raises(InvalidOffsetError):
        log.append(plain(b"v-99", pid=7, seq=_next_seq(acked)), 0)
    monkeypatch.undo()
    assert state(log) == before
    info = log.append(plain(b"v-100", pid=7, seq=_next_seq(acked)), 0)
    assert info.first_offset == before["next"]
