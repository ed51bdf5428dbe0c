"""Crash safety: SIGKILL during appends, torn tails, flipped bytes, damaged indexes.

Every batch's content is a pure function of its base offset, so after any crash the
test can rebuild the exact bytes the log must hold (base offset and partition leader
epoch are written by the log; the CRC does not cover them).
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from storage.batch import BatchBuilder, iter_batches
from storage.log import Log, LogConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CFG = dict(segment_bytes=64 * 1024, index_interval_bytes=512, segment_index_bytes=8 * 256,
           file_delete_delay_ms=0)


def expected_batch(base: int) -> bytes:
    rnd = random.Random(base)
    b = BatchBuilder(base, partition_leader_epoch=0, compression=base % 2 * 3)
    for i in range(1 + base % 4):
        b.append(b"key-%d" % (base + i), rnd.randbytes(rnd.randrange(0, 3000)),
                 timestamp=1_000_000 + base + i)
    return b.build()


CHILD = textwrap.dedent("""
    import os, random, sys
    sys.path.insert(0, sys.argv[2])
    from storage.log import Log, LogConfig
    from storage.batch import BatchBuilder
    sys.path.insert(0, os.path.join(sys.argv[2], "tests", "storage"))
    from test_crash import expected_batch, CFG
    log = Log.open(sys.argv[1], LogConfig(**CFG), lambda: 1_000_000)
    out = os.fdopen(1, "w", buffering=1)
    out.write("ready %d\\n" % log.log_end_offset)
    n = 0
    while True:
        data = bytearray(expected_batch(log.log_end_offset))
        data[0:8] = bytes(8)                         # the producer sends base offset 0
        log.append(data, 0)
        n += 1
        if n % 7 == 0:
            log.flush()
            out.write("flushed %d\\n" % log.log_end_offset)
""")


def verify_log(dir_path: str) -> int:
    """Open (recovering), check every batch byte for byte; return the log end offset."""
    log = Log.open(dir_path, LogConfig(**CFG), lambda: 1_000_000)
    try:
        data = log.read_records_bytes(0)
        offset = 0
        for batch in iter_batches(data):
            assert bytes(batch.buffer) == expected_batch(offset), f"batch at {offset} differs"
            offset = batch.last_offset + 1
        assert offset == log.log_end_offset
        for seg in log.segments:
            seg.index.check_all_monotonic()
            seg.time_index.check_all_monotonic()
        for probe in random.Random(offset).sample(range(max(offset, 1)), min(offset, 20)):
            first = log.read(probe, 1).first_offset
            assert first <= probe
        return log.log_end_offset
    finally:
        log.close(clean=False)


def kill_rounds(tmp_path, rounds: int, seed: int):
    rnd = random.Random(seed)
    d = str(tmp_path / "crash-0")
    flushed = 0
    for _ in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, d, ROOT],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
        line = proc.stdout.readline()
        assert line.startswith("ready"), line
        time.sleep(rnd.uniform(0.02, 0.25))     # the scenario: a random point to kill at
        proc.send_signal(signal.SIGKILL)
        for line in proc.stdout:
            if line.startswith("flushed"):
                flushed = max(flushed, int(line.split()[1]))
        proc.wait()
        end = verify_log(d)
        assert end >= flushed
    return flushed


def test_sigkill_during_appends_quick(tmp_path):
    kill_rounds(tmp_path, rounds=3, seed=1)


@pytest.mark.slow
def test_sigkill_during_appends_many_rounds(tmp_path):
    flushed = kill_rounds(tmp_path, rounds=8, seed=2)
    assert flushed > 0


def build_log(dir_path: str, batches: int) -> None:
    """A log of `batches` batches, flushed and checkpointed, closed uncleanly (no marker)."""
    log = Log.open(dir_path, LogConfig(**CFG), lambda: 1_000_000)
    for _ in range(batches):
        data = bytearray(expected_batch(log.log_end_offset))
        log.append(data, 0)
    log.flush()
    log.checkpoint()
    log.close(clean=False)


def last_segment_files(dir_path):
    logs = sorted(f for f in os.listdir(dir_path) if f.endswith(".log"))
    stem = logs[-1][:-4]
    return [os.path.join(dir_path, stem + s) for s in (".log", ".index", ".timeindex")]


def batch_ends(path):
    """(start, end, last_offset) of every valid batch in a segment file."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos + 61 <= len(data):
        length = int.from_bytes(data[pos + 8:pos + 12], "big")
        if length < 49 or pos + 12 + length > len(data):
            break
        out.append((pos, pos + 12 + length))
        pos += 12 + length
    return out


def corruption_round(tmp_path, rnd, template, i):
    d = str(tmp_path / f"c{i}-0")
    shutil.copytree(template, d)
    log_path, index_path, time_path = last_segment_files(d)
    spans = batch_ends(log_path)
    real_end = spans[-1][1]
    kind = rnd.choice(["truncate", "flip", "index"])
    expected_batches = len(spans)
    if kind == "truncate":
        cut = rnd.randrange(0, real_end)
        with open(log_path, "r+b") as f:
            f.truncate(cut)
        expected_batches = sum(1 for s, e in spans if e <= cut)
    elif kind == "flip":
        pos = rnd.randrange(0, real_end)
        with open(log_path, "r+b") as f:
            f.seek(pos)
            byte = f.read(1)
            f.seek(pos)
            f.write(bytes([byte[0] ^ (1 << rnd.randrange(8))]))
        hit = next(k for k, (s, e) in enumerate(spans) if s <= pos < e)
        in_pad = 12 <= pos - spans[hit][0] < 16     # partition leader epoch: not CRC-covered
        expected_batches = len(spans) if in_pad else hit
    for path in (index_path, time_path):
        if kind == "index" or rnd.random() < 0.3:
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                for _ in range(rnd.randrange(1, 8)):
                    if size:
                        f.seek(rnd.randrange(size))
                        f.write(bytes([rnd.randrange(256)]))
                if rnd.random() < 0.3:
                    f.truncate(rnd.randrange(size + 1))
    log = Log.open(d, LogConfig(**CFG), lambda: 1_000_000)
    try:
        seg = log.active_segment
        assert [b.position for b in seg.iter_positions()] == \
            [s for s, _ in spans[:expected_batches]], kind
        data = log.read_records_bytes(log.log_start_offset)
        offset = 0
        for batch in iter_batches(data):
            batch.validate()
            offset = batch.last_offset + 1
        assert offset == log.log_end_offset
        for probe in range(seg.base_offset, log.log_end_offset):
            assert log.read(probe, 1).first_offset <= probe
        log.append(bytearray(expected_batch(log.log_end_offset)), 0)   # still appendable
    finally:
        log.close(clean=False)
        shutil.rmtree(d)


def corruption_rounds(tmp_path, rounds, seed):
    template = str(tmp_path / "template-0")
    build_log(template, 60)
    rnd = random.Random(seed)
    for i in range(rounds):
        corruption_round(tmp_path, rnd, template, i)


def test_tail_corruption_quick(tmp_path):
    corruption_rounds(tmp_path, 12, seed=3)


@pytest.mark.slow
def test_tail_corruption_many(tmp_path):
    corruption_rounds(tmp_path, 60, seed=4)


def test_damaged_index_of_inactive_segment_rebuilt_on_clean_open(tmp_path):
    d = str(tmp_path / "idx-0")
    log = Log.open(d, LogConfig(**CFG), lambda: 1_000_000)
    for _ in range(80):
        log.append(bytearray(expected_batch(log.log_end_offset)), 0)
    assert len(log.segments) > 2
    entries = log.segments[0].index.all_entries()
    log.close()
    first_index = os.path.join(d, "00000000000000000000.index")
    with open(first_index, "r+b") as f:
        f.truncate(os.path.getsize(first_index) - 3)        # not a multiple of 8
    log = Log.open(d, LogConfig(**CFG), lambda: 1_000_000)
    assert log.segments[0].index.all_entries() == entries
    log.close()
    assert verify_log(d) > 0


def test_unclean_open_fully_checks_indexes_of_flushed_segments(tmp_path):
    d = str(tmp_path / "idx2-0")
    log = Log.open(d, LogConfig(**CFG), lambda: 1_000_000)
    for _ in range(80):
        log.append(bytearray(expected_batch(log.log_end_offset)), 0)
    entries = log.segments[0].index.all_entries()
    assert len(entries) > 4
    log.flush()
    log.checkpoint()
    log.close(clean=False)
    with open(os.path.join(d, "00000000000000000000.index"), "r+b") as f:
        f.seek(8 * 2 + 4)
        f.write((10**6).to_bytes(4, "big"))             # interior position jumps ahead
    log = Log.open(d, LogConfig(**CFG), lambda: 1_000_000)
    assert log.segments[0].index.all_entries() == entries
    log.close(clean=False)
