"""`mpbroker dump-log` on an active segment: memory and time against the file's size.

Builds a segment as a running broker leaves it: a few small batches at the start of a
file preallocated to `log.segment.bytes` (1 GiB by default; the tail is zeros), then
runs `mpbroker dump-log --print-data-log` on it `--rounds` times in a fresh process,
alternating with `python -c pass` (the interpreter's own start), and prints the medians
of wall time and maximum RSS (`wait4`), the ratio of the dump's RSS to the segment's
size, and the ratio of its wall time to the bare interpreter start.

    .venv/bin/python -m loadtest.bench_dump_log --rounds 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def build_segment(path: Path, size: int, batches: int) -> int:
    from storage.batch import BatchBuilder
    data = b"".join(BatchBuilder(i * 3).append(b"k", b"v" * 20).append(b"k", b"w").append(None, b"x").build()
                    for i in range(batches))
    with open(path, "wb") as f:
        f.write(data)
        f.truncate(size)
        os.posix_fallocate(f.fileno(), 0, size)     # real blocks, as the broker reserves them
    return len(data)


def run(cmd: list[str]) -> tuple[float, int, int]:
    """(wall seconds, max RSS in bytes, exit code) of one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    _, status, usage = os.wait4(p.pid, 0)
    return time.perf_counter() - t0, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--segment-mib", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-dump-log-") as d:
        seg = Path(d) / "00000000000000000000.log"
        size = args.segment_mib * 1024 * 1024
        valid = build_segment(seg, size, args.batches)
        dump = [sys.executable, "-m", "mpbroker.cli.main", "dump-log", str(seg), "--print-data-log"]
        bare = [sys.executable, "-c", "pass"]
        rows = {"dump": [], "bare": []}
        for r in range(args.rounds):
            for name, cmd in (("dump", dump), ("bare", bare)) if r % 2 == 0 else (("bare", bare), ("dump", dump)):
                wall, rss, rc = run(cmd)
                if rc != 0:
                    print(f"{name} exited with {rc}", file=sys.stderr)
                    return 1
                rows[name].append((wall, rss))
        med = {k: (statistics.median(w for w, _ in v), statistics.median(m for _, m in v)) for k, v in rows.items()}
    print(f"segment {size / 2**20:.0f} MiB preallocated, {valid} bytes of batches; {args.rounds} rounds")
    print(f"dump-log:        median {med['dump'][0]:.3f} s, max RSS {med['dump'][1] / 2**20:.1f} MiB")
    print(f"python -c pass:  median {med['bare'][0]:.3f} s, max RSS {med['bare'][1] / 2**20:.1f} MiB")
    print(f"RSS / segment size: {med['dump'][1] / size:.4f}; wall / bare interpreter: "
          f"{med['dump'][0] / med['bare'][0]:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
