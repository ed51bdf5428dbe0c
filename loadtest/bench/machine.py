"""The raw limits of this machine, measured in the benchmark's own run, and what it is.

* loopback TCP: one sender and one receiver process over 127.0.0.1
  (`loadtest.peers.loopback_tcp_limit_mb_s`): the ceiling for any broker's consume path.
* sequential disk write in the directory the brokers write to, 1 MiB writes: buffered
  (no fsync: the page cache) and with an fsync after every write (a durable log).

Both stop at a byte count or a time limit, whichever comes first. MB = 10^6 bytes.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

CHUNK = 1 << 20


def loopback_mb_s(seconds: float) -> float:
    from loadtest.peers import loopback_tcp_limit_mb_s

    return loopback_tcp_limit_mb_s(seconds=seconds)


def disk_write_mb_s(directory: Path, total_mb: float, fsync_each: bool, time_limit_s: float = 10.0) -> float:
    """MB/s of sequential 1 MiB writes to a new file in `directory` (deleted afterwards).
    Without fsync_each the file is still fsynced once at the end, outside the timing, so
    one probe's dirty pages do not slow the next."""
    path = Path(directory) / f"disk-probe-{os.getpid()}.bin"
    data = os.urandom(CHUNK)
    limit = int(total_mb * 1e6)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        written = 0
        t0 = time.perf_counter()
        while written < limit and time.perf_counter() - t0 < time_limit_s:
            written += os.write(fd, data)
            if fsync_each:
                os.fsync(fd)
        elapsed = time.perf_counter() - t0
        os.fsync(fd)
        return written / elapsed / 1e6
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe() -> dict:
    import psutil

    return {
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def measure_limits(directory: Path, loopback_s: float, disk_mb: float) -> dict:
    return {
        "loopback_tcp_mb_s": loopback_mb_s(loopback_s),
        "disk_write_mb_s": disk_write_mb_s(directory, disk_mb, fsync_each=False),
        "disk_write_fsync_mb_s": disk_write_mb_s(directory, disk_mb / 4, fsync_each=True),
    }
