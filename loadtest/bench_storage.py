"""Storage benchmark: the log engine against the raw limits of the same disk, in one run.

    python -m loadtest.bench_storage [--dir D] [--mib 128] [--rounds 3]
                                     [--recovery-mib 64]   # 1024 for the 1 GiB segment

Prints, per measurement, the median over `--rounds` of mpbroker's rate, the median
raw rate of the same bytes on the same disk, and the ratio of the two medians:

* append MB/s (1 KiB, 16 KiB, 1 MiB batches, `--mib` per round; CRC validation,
  offset assignment in place, the write into the active segment (map copy, or pwrite
  for large batches, storage/segment.py) with its disk preallocation, a roll every
  256 MiB, final flush; opening the log is not timed) vs plain sequential `os.write`
  of the same bytes to a new file plus one fsync;
* read MB/s: `Log.read` slices (1 MiB at a time) sent with `sendfile` to a loopback
  TCP socket vs `sendfile` of a plain file holding the same bytes, in the same chunk
  size, to the same socket.  Both files were just written, so this measures the page
  cache and the loopback, not the disk;
* offset lookups/s (`Log.read(random offset, 1)`: segment bisect + index search +
  header scan) vs a bisect over a Python list of the batch offsets;
* recovery of one segment of `--recovery-mib` after an unclean close (`Log.open`:
  framing + CRC-32C of every batch, index rebuild, the preallocated tail cut) vs
  reading the file and computing CRC-32C over it in 1 MiB chunks (page cache warm
  for both).  Needs about `--recovery-mib` + 16 MiB free in the directory.
"""
from __future__ import annotations

import argparse
import bisect
import os
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import crc32c  # noqa: E402

from storage.batch import BatchBuilder  # noqa: E402
from storage.log import Log, LogConfig  # noqa: E402

MiB = 1024 * 1024


def make_batch(size: int) -> bytearray:
    value = os.urandom(max(0, size - 80))
    return bytearray(BatchBuilder(0).append(b"key", value, timestamp=1_700_000_000_000).build())


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_append(base: str, batch_size: int, total: int) -> tuple[float, float]:
    batch = make_batch(batch_size)
    n = max(1, total // len(batch))
    d = os.path.join(base, f"append{batch_size}-0")
    log = Log.open(d, LogConfig(segment_bytes=256 * MiB), lambda: 1_700_000_000_000)
    mv = memoryview(batch)

    def run_log():
        for _ in range(n):
            log.append(mv, 0)
        log.flush()
    t_log = timed(run_log)
    log.close()
    shutil.rmtree(d)
    raw_path = os.path.join(base, "raw-append")
    fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    data = bytes(batch)

    def run_raw():
        for _ in range(n):
            os.write(fd, data)
        os.fsync(fd)
    t_raw = timed(run_raw)
    os.close(fd)
    os.unlink(raw_path)
    nbytes = n * len(batch)
    return nbytes / t_log / MiB, nbytes / t_raw / MiB


def _drain_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def drain():
        conn, _ = srv.accept()
        while conn.recv(4 * MiB):
            pass
        conn.close()
    th = threading.Thread(target=drain, daemon=True)
    th.start()
    cli = socket.create_connection(("127.0.0.1", port))
    return srv, cli, th


def _sendfile_all(sock, fd, pos, length):
    while length > 0:
        sent = os.sendfile(sock.fileno(), fd, pos, length)
        pos += sent
        length -= sent


def bench_read(base: str, total: int, chunk: int = MiB) -> tuple[float, float]:
    d = os.path.join(base, "read-0")
    log = Log.open(d, LogConfig(segment_bytes=128 * MiB), lambda: 1_700_000_000_000)
    batch = make_batch(16 * 1024)
    mv = memoryview(batch)
    while log.size_bytes < total:
        log.append(mv, 0)
    size = log.size_bytes
    srv, cli, th = _drain_server()

    def run_log():
        off = 0
        while off < log.log_end_offset:
            info = log.read(off, chunk)
            for s in info.slices:
                _sendfile_all(cli, s.fd, s.position, s.length)
            off = _next_offset(log, off, info)
    t_log = timed(run_log)
    raw_path = os.path.join(base, "raw-read")
    with open(raw_path, "wb") as f:
        for seg in log.segments:
            f.write(seg.read_bytes(0, seg.size))
    fd = os.open(raw_path, os.O_RDONLY)

    def run_raw():
        pos = 0
        while pos < size:
            n = min(chunk, size - pos)
            _sendfile_all(cli, fd, pos, n)
            pos += n
    t_raw = timed(run_raw)
    os.close(fd)
    os.unlink(raw_path)
    cli.close()
    th.join()
    srv.close()
    log.close()
    shutil.rmtree(d)
    return size / t_log / MiB, size / t_raw / MiB


def _next_offset(log, off, info) -> int:
    """Offset after the last batch in `info` (read its header through the segment)."""
    last = info.slices[-1]
    for seg in log.segments:
        if seg.log_path == last.path:
            end = last.position + last.length
            b = None
            for b in seg.iter_positions(last.position, end):
                pass
            return b.last_offset + 1
    raise AssertionError("slice of an unknown segment")


def bench_lookups(base: str, total: int, lookups: int = 20_000) -> tuple[float, float]:
    d = os.path.join(base, "lookup-0")
    log = Log.open(d, LogConfig(segment_bytes=32 * MiB), lambda: 1_700_000_000_000)
    mv = memoryview(make_batch(1024))
    while log.size_bytes < total:
        log.append(mv, 0)
    rnd = random.Random(1)
    targets = [rnd.randrange(log.log_end_offset) for _ in range(lookups)]

    def run_log():
        for t in targets:
            log.read(t, 1)
    t_log = timed(run_log)
    offsets = list(range(log.log_end_offset))

    def run_raw():
        for t in targets:
            bisect.bisect_right(offsets, t)
    t_raw = timed(run_raw)
    log.close()
    shutil.rmtree(d)
    return lookups / t_log, lookups / t_raw


def bench_recovery(base: str, total: int) -> tuple[float, float]:
    d = os.path.join(base, "recover-0")
    log = Log.open(d, LogConfig(segment_bytes=total + 16 * MiB), lambda: 1_700_000_000_000)
    mv = memoryview(make_batch(16 * 1024))
    while log.size_bytes < total:
        log.append(mv, 0)
    size = log.size_bytes
    path = log.active_segment.log_path
    log.flush()
    log.close(clean=False)
    t_log = timed(lambda: Log.open(d, LogConfig(segment_bytes=total + 16 * MiB),
                                   lambda: 1_700_000_000_000).close(clean=False))

    def run_raw():
        with open(path, "rb", buffering=0) as f:
            crc = 0
            while True:
                chunk = f.read(MiB)
                if not chunk:
                    break
                crc = crc32c.crc32c(chunk, crc)
    t_raw = timed(run_raw)
    shutil.rmtree(d)
    return size / t_log / MiB, size / t_raw / MiB


def report(name: str, unit: str, results: list[tuple[float, float]]) -> None:
    ours = statistics.median(r[0] for r in results)
    raw = statistics.median(r[1] for r in results)
    print(f"{name:<34} {ours:>12.1f} {raw:>12.1f} {unit:<10} ratio {ours / raw:6.3f}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", default=None, help="directory on the disk to measure")
    p.add_argument("--mib", type=int, default=128, help="MiB written per append round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--recovery-mib", type=int, default=64, help="segment size to recover")
    args = p.parse_args(argv)
    base = tempfile.mkdtemp(prefix="bench-storage-", dir=args.dir)
    total = args.mib * MiB
    try:
        print(f"{'measurement':<34} {'mpbroker':>12} {'raw':>12} {'unit':<10}")
        for size in (1024, 16 * 1024, MiB):
            report(f"append {size // 1024} KiB batches", "MB/s",
                   [bench_append(base, size, total) for _ in range(args.rounds)])
        report("read via sendfile (loopback)", "MB/s",
               [bench_read(base, total) for _ in range(args.rounds)])
        report("offset lookups", "lookups/s",
               [bench_lookups(base, min(total, 64 * MiB)) for _ in range(args.rounds)])
        report(f"recovery of a {args.recovery_mib} MiB segment", "MB/s",
               [bench_recovery(base, args.recovery_mib * MiB) for _ in range(args.rounds)])
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
